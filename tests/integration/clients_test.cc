// Compatibility with the real dflockd clients. Each test replays the exact bytes one client sends
// for one operation (read from the client's source) against turnstiled, and checks that the reply
// parses the way that client parses it. The comment on each test names the client behaviour it
// pins. Sources read:
//  * Python: mtingers/dflockd-client-py, src/dflockd_client/_protocol.py and _sync.py (v2.x),
//    sync_client.py and _common.py (v1.x).
//  * TypeScript: mtingers/dflockd-client-ts, src/client.ts (old and current).
//  * Go: mtingers/dflockd, client/client.go (old and current).
//
// What they share: every request is `cmd\nkey\narg\n` with `\n` only (never `\r\n`), written in
// one write; optional fields are appended with single spaces; an unused key is `_`. Replies are
// read up to `\n` and one trailing `\r` is stripped (Go TrimRight "\r", Python rstrip("\r\n"), TS
// replace(/\r$/)). Parsers differ: Go strings.Fields and Python str.split() split on runs of
// whitespace and demand an exact field count; TS splits on single spaces (resp.split(" ")) and
// takes fields by index.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <csignal>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/harness.h"

namespace turnstile::integration {
namespace {

using Json = nlohmann::json;

// ---- the clients' reply parsers, re-stated ---------------------------------------------------

// Sends exactly `bytes` and returns the reply line as the client sees it. Also checks what every
// client relies on: the line ends in '\n' and carries no '\r' (TS strips only one).
std::string replay(Client& client, const std::string& bytes) {
  if (!client.send(bytes)) return "<send failed>";
  std::optional<std::string> line = client.read_line(5s);
  if (!line) return client.eof() ? "<closed>" : "<timeout>";
  EXPECT_EQ(line->find('\r'), std::string::npos) << "reply carries a CR: " << *line;
  return *line;
}

// Python str.split() / Go strings.Fields for ASCII: runs of whitespace, no empty fields.
std::vector<std::string> whitespace_fields(const std::string& line) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    const std::size_t start = i;
    while (i < line.size() && !std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

// TS resp.split(" "): every single space separates, empty fields kept.
std::vector<std::string> ts_split(const std::string& line) { return fields(line); }

bool is_decimal(const std::string& text) {
  return !text.empty() &&
         std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

struct ParsedGrant {
  std::string token;
  long long lease_s = -1;
};

// Go parseGrantResponse / Python _decode_token_lease: exactly three fields, status first,
// integer lease. Returns nullopt where those clients raise.
std::optional<ParsedGrant> go_python_grant(const std::string& line, const std::string& status) {
  const std::vector<std::string> parts = whitespace_fields(line);
  if (parts.size() != 3 || parts[0] != status || !is_decimal(parts[2])) return std::nullopt;
  return ParsedGrant{parts[1], std::stoll(parts[2])};
}

// TS protoAcquire/protoWait/protoEnqueue: startsWith("<status> "), token = split(" ")[1] (must
// be non-empty), lease = Number(split(" ")[2]).
std::optional<ParsedGrant> ts_grant(const std::string& line, const std::string& status) {
  if (line.rfind(status + " ", 0) != 0) return std::nullopt;
  const std::vector<std::string> parts = ts_split(line);
  if (parts.size() < 3 || parts[1].empty() || !is_decimal(parts[2])) return std::nullopt;
  return ParsedGrant{parts[1], std::stoll(parts[2])};
}

// All three parsers must agree on a grant; returns it (and fails the test when they do not).
ParsedGrant grant_all_clients(const std::string& line, const std::string& status = "ok") {
  const std::optional<ParsedGrant> go_py = go_python_grant(line, status);
  const std::optional<ParsedGrant> ts = ts_grant(line, status);
  EXPECT_TRUE(go_py) << "Go/Python would reject: " << line;
  EXPECT_TRUE(ts) << "TS would reject: " << line;
  if (!go_py || !ts) return ParsedGrant{};
  EXPECT_EQ(go_py->token, ts->token);
  EXPECT_EQ(go_py->lease_s, ts->lease_s);
  // Go FenceFromToken / Python fence_from_token: exactly 32 hex characters.
  EXPECT_TRUE(fence_of(go_py->token).has_value()) << go_py->token;
  return *go_py;
}

// Go parseRenewOK / Python _decode_remaining: exactly `ok <int>`.
std::optional<long long> renew_remaining(const std::string& line) {
  const std::vector<std::string> parts = whitespace_fields(line);
  if (parts.size() != 2 || parts[0] != "ok" || !is_decimal(parts[1])) return std::nullopt;
  return std::stoll(parts[1]);
}

// Python parse_stats_response / TS statsProto: "ok " then JSON with dflockd's five fields.
Json parse_stats(const std::string& line) {
  EXPECT_EQ(line.rfind("ok ", 0), 0U) << line;
  if (line.rfind("ok ", 0) != 0) return Json::object();
  Json root = Json::parse(line.substr(3), nullptr, false);
  EXPECT_FALSE(root.is_discarded()) << line;
  for (const char* field :
       {"connections", "locks", "semaphores", "idle_locks", "idle_semaphores"}) {
    EXPECT_TRUE(root.contains(field)) << field;
  }
  EXPECT_TRUE(root["connections"].is_number_integer());
  for (const char* field : {"locks", "semaphores", "idle_locks", "idle_semaphores"}) {
    EXPECT_TRUE(root[field].is_array()) << field << " must be an array, never null";
  }
  return root;
}

// ---- Python (dflockd-client-py) ----------------------------------------------------------------

// Python acquire(): `l\n<key>\n<timeout>\n`, or `<timeout> <lease>` with lease_ttl_s; the reply is
// rstrip'd and must split into exactly ["ok", token, int].
TEST(PythonClient, AcquireWithAndWithoutLease) {
  Daemon daemon;
  Client conn(daemon.port());
  const ParsedGrant first = grant_all_clients(replay(conn, "l\npy-key\n10\n"));
  EXPECT_EQ(first.lease_s, 33);
  const ParsedGrant second = grant_all_clients(replay(conn, "l\npy-other\n10 15\n"));
  EXPECT_EQ(second.lease_s, 15);
}

// Python renew(): `n\n<key>\n<token>[ <lease>]\n`; parse_renew_response wants exactly
// ["ok", int], the new TTL, used as the next renew interval (lease * renew_ratio).
TEST(PythonClient, RenewReturnsTheNewTtl) {
  Daemon daemon;
  Client conn(daemon.port());
  const ParsedGrant grant = grant_all_clients(replay(conn, "l\nk\n10 8\n"));
  EXPECT_EQ(renew_remaining(replay(conn, "n\nk\n" + grant.token + " 8\n")), 8);
  // lease_ttl_s None: the token alone; the server default comes back.
  EXPECT_EQ(renew_remaining(replay(conn, "n\nk\n" + grant.token + "\n")), 33);
}

// Python release(): `r\n<key>\n<token>\n`; anything but exactly "ok" raises.
TEST(PythonClient, ReleaseIsExactlyOk) {
  Daemon daemon;
  Client conn(daemon.port());
  const ParsedGrant grant = grant_all_clients(replay(conn, "l\nk\n10\n"));
  EXPECT_EQ(replay(conn, "r\nk\n" + grant.token + "\n"), "ok");
  // A second release maps to the generic DflockdError (plain "error", not a sentinel).
  EXPECT_EQ(replay(conn, "r\nk\n" + grant.token + "\n"), "error");
}

// Python enqueue(): build_enqueue_arg with no limit and no lease is the empty string, so the
// request is `e\n<key>\n\n`; the reply is exactly "queued" or ["acquired", token, int].
TEST(PythonClient, EnqueueWithEmptyArgumentThenWait) {
  Daemon daemon;
  Client conn(daemon.port());
  Client holder(daemon.port());
  const ParsedGrant fast = grant_all_clients(replay(conn, "e\nfree\n\n"), "acquired");
  EXPECT_EQ(fast.lease_s, 33);
  // Python wait() after a fast-path acquire returns at once without sending anything; but the
  // server still holds a granted record, and `w` must hand back the same token.
  EXPECT_EQ(grant_all_clients(replay(conn, "w\nfree\n10\n")).token, fast.token);

  const ParsedGrant held = grant_all_clients(replay(holder, "l\nbusy\n10\n"));
  EXPECT_EQ(replay(conn, "e\nbusy\n12\n"), "queued");
  ASSERT_TRUE(conn.send("w\nbusy\n10\n"));
  EXPECT_EQ(replay(holder, "r\nbusy\n" + held.token + "\n"), "ok");
  const std::optional<std::string> waited = conn.read_line(3s);
  ASSERT_TRUE(waited);
  EXPECT_EQ(grant_all_clients(*waited).lease_s, 12);  // the lease given at `e`
}

// Python sem_acquire()/sem_enqueue(): arguments in the order timeout, limit, lease and limit,
// lease (build_acquire_arg / build_enqueue_arg).
TEST(PythonClient, SemaphoreArgumentOrder) {
  Daemon daemon;
  Client conn(daemon.port());
  const ParsedGrant first = grant_all_clients(replay(conn, "sl\npool\n10 3\n"));
  const ParsedGrant second = grant_all_clients(replay(conn, "sl\npool\n10 3 20\n"));
  EXPECT_EQ(first.lease_s, 33);
  EXPECT_EQ(second.lease_s, 20);
  const ParsedGrant third = grant_all_clients(replay(conn, "se\npool\n3 9\n"), "acquired");
  EXPECT_EQ(third.lease_s, 9);
  EXPECT_EQ(grant_all_clients(replay(conn, "sw\npool\n10\n")).token, third.token);
  EXPECT_EQ(renew_remaining(replay(conn, "sn\npool\n" + first.token + " 40\n")), 40);
  EXPECT_EQ(replay(conn, "sr\npool\n" + first.token + "\n"), "ok");
  // se with a limit only.
  Client other(daemon.port());
  EXPECT_EQ(grant_all_clients(replay(other, "se\npool\n3\n"), "acquired").lease_s, 33);
}

// Python stats() v2.x sends `stats\n_\n_\n`; v1.x (sync_client.py) sent `stats\n_\n\n`. Both
// decode resp[3:] with json.loads into the five-field StatsResult.
TEST(PythonClient, StatsBothFramings) {
  Daemon daemon;
  Client conn(daemon.port());
  grant_all_clients(replay(conn, "l\nheld\n10\n"));
  const Json current = parse_stats(replay(conn, "stats\n_\n_\n"));
  const Json legacy = parse_stats(replay(conn, "stats\n_\n\n"));
  EXPECT_EQ(current["connections"], 1);
  ASSERT_EQ(current["locks"].size(), 1U);
  EXPECT_EQ(current["locks"][0]["key"], "held");
  EXPECT_EQ(legacy["locks"].size(), 1U);
}

// Python authenticate(): `auth\n_\n<token>\n`; "ok" passes, "error_draining" raises
// DrainingError, anything else PermissionError.
TEST(PythonClient, AuthHandshake) {
  Daemon daemon({"--auth-token", "py-secret"});
  Client good(daemon.port());
  EXPECT_EQ(replay(good, "auth\n_\npy-secret\n"), "ok");
  grant_all_clients(replay(good, "l\nk\n10\n"));
  Client bad(daemon.port());
  EXPECT_EQ(replay(bad, "auth\n_\nnope\n"), "error_auth");
  EXPECT_TRUE(bad.closed_by_peer(2s));
}

// Python _STATUS_ERRORS: each sentinel is matched by exact string equality, so the status must
// be the whole line with nothing after it.
TEST(PythonClient, StatusSentinelsAreWholeLines) {
  Daemon daemon({"--max-waiters", "1", "--max-locks", "3"});
  Client a(daemon.port());
  Client b(daemon.port());
  Client c(daemon.port());
  grant_all_clients(replay(a, "l\nk\n10\n"));
  EXPECT_EQ(replay(b, "e\nk\n\n"), "queued");
  EXPECT_EQ(replay(b, "e\nk\n\n"), "error_already_enqueued");
  EXPECT_EQ(replay(c, "l\nk\n1\n"), "error_max_waiters");
  EXPECT_EQ(replay(c, "w\nk\n1\n"), "error_not_enqueued");
  grant_all_clients(replay(a, "sl\ns\n10 2\n"));
  EXPECT_EQ(replay(c, "sl\ns\n10 5\n"), "error_limit_mismatch");
  grant_all_clients(replay(a, "l\nthird\n10\n"));
  EXPECT_EQ(replay(c, "l\nfourth\n10\n"), "error_max_locks");
  EXPECT_EQ(replay(c, "l\nk\n0\n"), "error_max_waiters");
  EXPECT_EQ(replay(c, "e\nfourth\n\n"), "error_max_locks");
  EXPECT_EQ(replay(c, "se\nfourth\n2\n"), "error_max_locks");
}

// Python SyncConn: one connection, many keys, requests serialised by a mutex. A renew thread
// renews every max(1, lease * 0.5) seconds on the same connection.
TEST(PythonClient, OneConnectionHoldsSeveralKeysAndRenewsThem) {
  Daemon daemon;
  Client conn(daemon.port());
  Client other(daemon.port());
  const ParsedGrant a = grant_all_clients(replay(conn, "l\na\n10 2\n"));
  const ParsedGrant b = grant_all_clients(replay(conn, "l\nb\n10 2\n"));
  for (int i = 0; i < 3; ++i) {
    std::this_thread::sleep_for(1s);  // renew_interval(2, 0.5) == 1.0
    EXPECT_EQ(renew_remaining(replay(conn, "n\na\n" + a.token + " 2\n")), 2);
    EXPECT_EQ(renew_remaining(replay(conn, "n\nb\n" + b.token + " 2\n")), 2);
  }
  EXPECT_EQ(replay(other, "l\na\n0\n"), "timeout");
  EXPECT_EQ(replay(other, "l\nb\n0\n"), "timeout");
}

// Python v1.x parse_lease(): a missing or non-integer lease falls back to 30 with a warning; the
// lease must therefore always be present as an integer field.
TEST(PythonClient, LegacyParserAlwaysFindsTheLeaseField) {
  Daemon daemon;
  Client conn(daemon.port());
  const std::string reply = replay(conn, "l\nk\n10\n");
  const std::vector<std::string> parts = whitespace_fields(reply);
  ASSERT_GE(parts.size(), 3U) << reply;
  EXPECT_EQ(parts[2], "33");
}

// ---- TypeScript (dflockd-client-ts) -----------------------------------------------------------

// TS encodeLines: lines.map(l => l + "\n"); acquire arg `${timeout}` or `${timeout} ${lease}`;
// the reply is split on single spaces, so the server must never pad with extra spaces.
TEST(TypeScriptClient, AcquireReplyHasSingleSpaces) {
  Daemon daemon;
  Client sock(daemon.port());
  const std::string reply = replay(sock, "l\nts-key\n10 12\n");
  const std::vector<std::string> parts = ts_split(reply);
  ASSERT_EQ(parts.size(), 3U) << reply;
  EXPECT_EQ(parts[0], "ok");
  EXPECT_EQ(parts[1].size(), 32U);
  EXPECT_EQ(parts[2], "12");
}

// TS renew: bare "ok" or "ok <n>" accepted; with "ok <n>", parseLease(split(" ")[1]).
TEST(TypeScriptClient, RenewAndRelease) {
  Daemon daemon;
  Client sock(daemon.port());
  const ParsedGrant grant = grant_all_clients(replay(sock, "l\nk\n10 5\n"));
  const std::string renewed = replay(sock, "n\nk\n" + grant.token + " 5\n");
  ASSERT_EQ(ts_split(renewed).size(), 2U);
  EXPECT_EQ(ts_split(renewed)[1], "5");
  EXPECT_EQ(replay(sock, "r\nk\n" + grant.token + "\n"), "ok");  // resp !== "ok" throws
}

// TS protoEnqueue: parts.join(" ") of [limit?, lease?], so a lock enqueue without a lease sends
// an empty argument line; "queued" must match exactly; then waitForLock sends String(timeout).
TEST(TypeScriptClient, EnqueueAndWait) {
  Daemon daemon;
  Client sock(daemon.port());
  Client holder(daemon.port());
  const ParsedGrant held = grant_all_clients(replay(holder, "l\nk\n10\n"));
  EXPECT_EQ(replay(sock, "e\nk\n\n"), "queued");
  EXPECT_EQ(replay(holder, "r\nk\n" + held.token + "\n"), "ok");
  EXPECT_EQ(grant_all_clients(replay(sock, "w\nk\n10\n")).lease_s, 33);
  // The semaphore variants: `se` with `${limit} ${lease}`, `sw` with the timeout.
  EXPECT_EQ(grant_all_clients(replay(sock, "se\nsem\n2 7\n"), "acquired").lease_s, 7);
  EXPECT_EQ(grant_all_clients(replay(sock, "sw\nsem\n10\n")).lease_s, 7);
}

// TS stats(): a short-lived connection (auth first when configured) sends `stats\n_\n\n`, then
// destroys the socket; the typed Stats has {key, idle_s} entries in idle_locks/idle_semaphores
// and {key, limit, holders, waiters} in semaphores.
TEST(TypeScriptClient, StatsOnAShortLivedAuthenticatedConnection) {
  Daemon daemon({"--auth-token", "ts-secret"});
  Client worker(daemon.port());
  EXPECT_EQ(replay(worker, "auth\n_\nts-secret\n"), "ok");
  const ParsedGrant idle = grant_all_clients(replay(worker, "l\nidle\n10\n"));
  EXPECT_EQ(replay(worker, "r\nidle\n" + idle.token + "\n"), "ok");
  grant_all_clients(replay(worker, "sl\nsem\n10 4\n"));
  {
    Client sock(daemon.port());
    EXPECT_EQ(replay(sock, "auth\n_\nts-secret\n"), "ok");
    const Json stats = parse_stats(replay(sock, "stats\n_\n\n"));
    EXPECT_EQ(stats["connections"], 2);
    ASSERT_EQ(stats["idle_locks"].size(), 1U);
    EXPECT_EQ(stats["idle_locks"][0]["key"], "idle");
    EXPECT_TRUE(stats["idle_locks"][0]["idle_s"].is_number());
    ASSERT_EQ(stats["semaphores"].size(), 1U);
    EXPECT_EQ(stats["semaphores"][0],
              (Json{{"key", "sem"}, {"limit", 4}, {"holders", 1}, {"waiters", 0}}));
    sock.abort();  // sock.destroy()
  }
  EXPECT_EQ(replay(worker, "ping\n_\n\n"), "ok");
}

// TS connect() with auth: "error_auth" becomes AuthError, any other non-"ok" a LockError; either
// way the client destroys the socket.
TEST(TypeScriptClient, AuthFailureIsExactlyErrorAuth) {
  Daemon daemon({"--auth-token", "ts-secret"});
  Client sock(daemon.port());
  EXPECT_EQ(replay(sock, "auth\n_\nwrong\n"), "error_auth");
}

// TS close(): destroys the socket without releasing; the server's auto-release (default on)
// hands the lock to the next waiter.
TEST(TypeScriptClient, CloseWithoutReleaseFreesTheLock) {
  Daemon daemon;
  Client sock(daemon.port());
  Client next(daemon.port());
  grant_all_clients(replay(sock, "l\nk\n10\n"));
  ASSERT_TRUE(next.send("l\nk\n10\n"));
  std::this_thread::sleep_for(50ms);
  sock.abort();  // destroy() may reset rather than close politely
  const std::optional<std::string> reply = next.read_line(3s);
  ASSERT_TRUE(reply);
  grant_all_clients(*reply);
}

// Older TS releases sent String(acquireTimeoutS) unchecked, so a fractional timeout went out as
// `0.5`; the server answers plain `error` (not an integer, code 4) and keeps the connection, and
// the client raises "acquire failed: 'error'".
TEST(TypeScriptClient, FractionalTimeoutIsAProtocolErrorThatKeepsTheConnection) {
  Daemon daemon;
  Client sock(daemon.port());
  EXPECT_EQ(replay(sock, "l\nk\n0.5\n"), "error");
  EXPECT_EQ(replay(sock, "l\nk\n1e3\n"), "error");
  grant_all_clients(replay(sock, "l\nk\n1\n"));
}

// Older TS validateKey only rejected CR/LF, so a key with a space or tab reached the wire; the
// server answers `error` (code 5) and the connection stays usable.
TEST(TypeScriptClient, KeyWithASpaceIsAnErrorAndTheConnectionStaysOpen) {
  Daemon daemon;
  Client sock(daemon.port());
  EXPECT_EQ(replay(sock, "l\nmy lock\n10\n"), "error");
  EXPECT_EQ(replay(sock, "l\nmy\tlock\n10\n"), "error");
  EXPECT_EQ(replay(sock, "ping\n_\n\n"), "ok");
}

// ---- Go (dflockd client/client.go) --------------------------------------------------------------

// Go secondsCeil: a timeout rounds up to whole seconds (1 ms -> "1", 1.5 s -> "2"), 0 stays "0";
// WithLeaseTTL(n > 0) appends " n".
TEST(GoClient, TimeoutsRoundUpToWholeSeconds) {
  Daemon daemon;
  Client conn(daemon.port());
  Client holder(daemon.port());
  grant_all_clients(replay(holder, "l\nk\n0\n"));
  EXPECT_EQ(replay(conn, "l\nk\n0\n"), "timeout");  // Acquire(c, key, 0): try once
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(replay(conn, "l\nk\n1\n"), "timeout");  // Acquire(c, key, time.Millisecond)
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, 900ms);
  EXPECT_LT(waited, 1800ms);
  EXPECT_EQ(grant_all_clients(replay(conn, "l\nother\n2 30\n")).lease_s, 30);
}

// Go parseOKTokenLease/parseAcquiredGrant: strings.Fields must give exactly 3 fields; Atoi
// lease. Go Wait maps timeout/error_not_enqueued/error_lease_expired/error by exact match.
TEST(GoClient, TwoPhaseEnqueueAndWait) {
  Daemon daemon;
  Client conn(daemon.port());
  const ParsedGrant fast = grant_all_clients(replay(conn, "e\nk\n5\n"), "acquired");
  EXPECT_EQ(fast.lease_s, 5);  // formatEnqueueArg("e", 0, 5) == "5"
  EXPECT_EQ(grant_all_clients(replay(conn, "w\nk\n10\n")).token, fast.token);
  EXPECT_EQ(replay(conn, "w\nk\n10\n"), "error_not_enqueued");  // ErrNotQueued
  // formatEnqueueArg("se", 3, 0) == "3".
  EXPECT_EQ(grant_all_clients(replay(conn, "se\nsem\n3\n"), "acquired").lease_s, 33);
  // ErrLeaseExpired: a two-phase grant whose lease ended before Wait.
  grant_all_clients(replay(conn, "e\nshort\n1\n"), "acquired");
  std::this_thread::sleep_for(1200ms);
  EXPECT_EQ(replay(conn, "w\nshort\n1\n"), "error_lease_expired");
}

// Go Wait: a timeout (or error) closes the connection, because the enqueue state is consumed.
// The server must drop nothing else that belongs to other connections, and the key must be
// enqueueable again from a fresh connection.
TEST(GoClient, WaitTimeoutThenTheClientRedials) {
  Daemon daemon;
  Client holder(daemon.port());
  const ParsedGrant held = grant_all_clients(replay(holder, "l\nk\n10\n"));
  {
    Client conn(daemon.port());
    EXPECT_EQ(replay(conn, "e\nk\n\n"), "queued");
    EXPECT_EQ(replay(conn, "w\nk\n1\n"), "timeout");  // ErrTimeout; then conn.Close()
  }
  Client redialed(daemon.port());
  EXPECT_EQ(replay(redialed, "e\nk\n\n"), "queued");
  EXPECT_EQ(replay(holder, "r\nk\n" + held.token + "\n"), "ok");
  grant_all_clients(replay(redialed, "w\nk\n1\n"));
}

// Go Lock: every Acquire dials a fresh connection; if the context is cancelled as a grant
// arrives, the client releases that token on a new connection within 2 s. The token alone is
// the capability, from any connection.
TEST(GoClient, ReleaseFromAFreshConnection) {
  Daemon daemon({"--auto-release-on-disconnect=false"});
  std::string token;
  {
    Client first(daemon.port());
    token = grant_all_clients(replay(first, "l\nk\n10\n")).token;
  }  // the first connection is gone; without auto-release the lock stays
  Client second(daemon.port());
  EXPECT_EQ(replay(second, "l\nk\n0\n"), "timeout");
  EXPECT_EQ(replay(second, "r\nk\n" + token + "\n"), "ok");
  grant_all_clients(replay(second, "l\nk\n0\n"));
}

// Go Authenticate: `auth\n_\n<token>\n`; "ok" passes, "error_draining" is ErrDraining, anything
// else ErrAuth. The server's shutdown must produce exactly "error_draining".
TEST(GoClient, AuthenticateAndDraining) {
  Daemon daemon({"--auth-token", "go-secret"});
  Client conn(daemon.port());
  EXPECT_EQ(replay(conn, "auth\n_\ngo-secret\n"), "ok");
  daemon.signal(SIGTERM);
  EXPECT_EQ(conn.read_line(3s), "error_draining");  // ErrDraining on the next call
  EXPECT_TRUE(conn.closed_by_peer(3s));
}

// Go FenceFromToken: exactly 32 hex characters, the first 16 a big-endian uint64 that strictly
// increases per key on every grant.
TEST(GoClient, FenceFromTokenIncreasesPerKey) {
  Daemon daemon;
  Client conn(daemon.port());
  unsigned long long previous = 0;
  for (int i = 0; i < 20; ++i) {
    const ParsedGrant grant = grant_all_clients(replay(conn, "l\nfenced\n10\n"));
    const unsigned long long fence = fence_of(grant.token).value_or(0);
    EXPECT_GT(fence, previous) << i;
    previous = fence;
    EXPECT_EQ(replay(conn, "r\nfenced\n" + grant.token + "\n"), "ok");
  }
}

// Go readLine caps a reply at 64 KiB and every client reads replies one line at a time: a
// request's reply is one line, never split, even when many arrive back to back (Conn is
// serialised, but a renew goroutine and Release share it).
TEST(GoClient, RepliesAreOneLineEach) {
  Daemon daemon;
  Client conn(daemon.port());
  std::string bytes;
  for (int i = 0; i < 50; ++i) bytes += "l\nk" + std::to_string(i) + "\n10 30\n";
  ASSERT_TRUE(conn.send(bytes));
  for (int i = 0; i < 50; ++i) {
    const std::optional<std::string> line = conn.read_line(5s);
    ASSERT_TRUE(line) << i;
    grant_all_clients(*line);
  }
  EXPECT_EQ(conn.pending(50ms), "");
}

// ---- all clients
// ---------------------------------------------------------------------------------

// Keys are UTF-8 (Python .encode("utf-8"), TS Buffer.from(..., "utf-8"), Go bytes) and come back
// unchanged in stats; control characters other than CR/LF/tab are allowed.
TEST(AllClients, Utf8AndControlCharacterKeys) {
  Daemon daemon;
  Client conn(daemon.port());
  const std::string utf8 = "ключ-\xC3\xBC-\xE2\x9C\x93";
  grant_all_clients(replay(conn, "l\n" + utf8 + "\n10\n"));
  grant_all_clients(replay(conn, std::string("l\nctl\x01key\n10\n")));
  const Json stats = parse_stats(replay(conn, "stats\n_\n\n"));
  std::vector<std::string> keys;
  for (const Json& item : stats["locks"]) keys.push_back(item["key"]);
  EXPECT_NE(std::find(keys.begin(), keys.end(), utf8), keys.end());
  EXPECT_NE(std::find(keys.begin(), keys.end(), std::string("ctl\x01key")), keys.end());
}

// The clients send `\n` only, but a hand-written client (or nc on Windows) may send CRLF; both
// must parse identically and the reply never carries a CR.
TEST(AllClients, CrlfAndLfRequestsGetTheSameReplies) {
  Daemon daemon;
  Client conn(daemon.port());
  const ParsedGrant lf = grant_all_clients(replay(conn, "l\na\n10 9\n"));
  const ParsedGrant crlf = grant_all_clients(replay(conn, "l\r\nb\r\n10 9\r\n"));
  EXPECT_EQ(lf.lease_s, crlf.lease_s);
  EXPECT_EQ(replay(conn, "ping\r\n_\r\n\r\n"), "ok");
}

// Holders that never ping keep their lock: the clients only renew (at lease/2) and send nothing
// else between requests, so an idle gap must not close the connection (deliberate difference
// from dflockd's idle read timeout).
TEST(AllClients, ARenewingHolderIsNeverDroppedForBeingQuiet) {
  Daemon daemon({"--read-timeout", "1"});
  Client conn(daemon.port());
  Client other(daemon.port());
  const ParsedGrant grant = grant_all_clients(replay(conn, "l\nk\n10 4\n"));
  // A request begun after the grant and never finished is ended by the read timeout: the holder
  // has been quiet longer than that by then.
  Client partial(daemon.port());
  ASSERT_TRUE(partial.send("l\nk"));
  EXPECT_EQ(partial.read_line(10s), "error");
  EXPECT_TRUE(partial.closed_by_peer(5s));
  EXPECT_EQ(renew_remaining(replay(conn, "n\nk\n" + grant.token + " 4\n")), 4);
  EXPECT_EQ(replay(other, "l\nk\n0\n"), "timeout");
}

}  // namespace
}  // namespace turnstile::integration
