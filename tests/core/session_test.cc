// Tests of core::Session, the per-connection protocol state, driven through test::Loopback with
// real bytes against a real core::Engine: reference 1.1 (framing, ordering), 1.2 and
// compatibility.md section 2 (read and idle timeouts), 1.6 (which errors close), 1.7 (stats
// reply), 1.8 (auth), 1.9 (example exchanges), 2.9 (disconnect), 2.14 (draining) and the edge
// cases of reference section 7 that live at the session layer (4, 5, 17, 18, 19, 35), plus a
// property over random bytes in random chunks.
#include "core/session.h"

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/engine.h"
#include "core/protocol.h"
#include "core/random.h"
#include "core/time.h"
#include "core/types.h"
#include "testing/loopback.h"

namespace turnstile::test {
namespace {

using core::CloseReason;
using core::Duration;
using core::SessionId;

constexpr std::string_view kPing = "ping\n_\n\n";
constexpr std::string_view kStats = "stats\n_\n\n";
constexpr std::string_view kReferenceStatsPrefix =
    R"(ok {"connections":1,"locks":[],"semaphores":[],"idle_locks":[],"idle_semaphores":[])";

std::string request(std::string_view command, std::string_view key, std::string_view arg) {
  std::string text;
  text.append(command).append("\n").append(key).append("\n").append(arg).append("\n");
  return text;
}

std::string repeat(std::string_view text, int times) {
  std::string out;
  for (int i = 0; i < times; ++i) out.append(text);
  return out;
}

std::vector<std::string> lines_of(std::string_view text) {
  std::vector<std::string> lines;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    if (end == std::string_view::npos) {
      lines.emplace_back(text);  // an unterminated line: the caller's checks will flag it
      break;
    }
    lines.emplace_back(text.substr(0, end));
    text.remove_prefix(end + 1);
  }
  return lines;
}

// True for a grant line `<status> <32 lowercase hex> <lease_s>` (without '\n').
bool is_grant_line(std::string_view line, std::string_view status, std::int64_t lease_s) {
  const std::regex pattern(std::string(status) + " [0-9a-f]{32} " + std::to_string(lease_s));
  return std::regex_match(std::string(line), pattern);
}

// The token of a grant line.
std::string token_of(std::string_view line) {
  const std::size_t first = line.find(' ');
  if (first == std::string_view::npos) return {};
  return std::string(line.substr(first + 1, core::Token::kWireLength));
}

bool is_any_grant_line(const std::string& line) {
  static const std::regex kGrant("(ok|acquired) [0-9a-f]{32} [0-9]+");
  return std::regex_match(line, kGrant);
}

// Every line the server may write (reference 1.5, 1.4 reply fields), without '\n'.
bool is_valid_reply_line(const std::string& line) {
  static const std::regex kStatusOnly(
      "ok|queued|timeout|error|error_auth|error_max_locks|error_max_waiters|"
      "error_limit_mismatch|error_not_enqueued|error_already_enqueued|error_lease_expired|"
      "error_draining");
  static const std::regex kRenew("ok [0-9]+");
  if (std::regex_match(line, kStatusOnly) || is_any_grant_line(line) ||
      std::regex_match(line, kRenew)) {
    return true;
  }
  if (line.starts_with("ok {")) {
    const nlohmann::json json = nlohmann::json::parse(line.substr(3), nullptr, false);
    return !json.is_discarded() && json.is_object() && json.contains("connections");
  }
  return false;
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out.append(item).append("; ");
  return out;
}

// Every test owns one Loopback and checks at the end that the driver contract held.
class LoopbackTest : public ::testing::Test {
 protected:
  Loopback& start(LoopbackConfig config = {}) {
    net_ = std::make_unique<Loopback>(std::move(config));
    return *net_;
  }
  void TearDown() override {
    if (net_) {
      EXPECT_TRUE(net_->anomalies().empty()) << joined(net_->anomalies());
    }
  }

  // Sends `l key 0 [lease]` from `id`, expects `ok <token> <lease>` (33 s is the server
  // default, so it is left out), returns the token.
  std::string acquire(SessionId id, std::string_view key, std::int64_t lease_s = 33) {
    const std::string arg = lease_s == 33 ? "0" : "0 " + std::to_string(lease_s);
    net_->send(id, request("l", key, arg));
    const std::string reply = net_->read(id);
    EXPECT_TRUE(reply.ends_with('\n') &&
                is_grant_line(reply.substr(0, reply.size() - 1), "ok", lease_s))
        << reply;
    return token_of(reply);
  }

  std::unique_ptr<Loopback> net_;
};

class ExampleTest : public LoopbackTest {};
class PipelineTest : public LoopbackTest {};
class StatsTest : public LoopbackTest {};
class ProtocolErrorTest : public LoopbackTest {
 protected:
  // A protocol error that keeps the connection open (reference 1.6): `error`, and the next
  // request is served.
  void expect_error_keeps_open(std::string_view bytes) {
    Loopback& net = start();
    const SessionId a = net.connect();
    net.send(a, bytes);
    net.send(a, kPing);
    EXPECT_EQ(net.read(a), "error\nok\n");
    EXPECT_TRUE(net.is_open(a));
    EXPECT_EQ(net.engine().resources_count(), 0U);  // nothing reached the engine
  }
};
class AuthTest : public LoopbackTest {
 protected:
  Loopback& start_with_secret() {
    LoopbackConfig config;
    config.session.auth_secret = "s3cret";
    return start(config);
  }
  // After a failed handshake: nothing until the 100 ms delay has passed, then `error_auth` and
  // close.
  void expect_auth_failure(Loopback& net, SessionId id) {
    EXPECT_EQ(net.read(id), "");
    net.advance(Duration::milliseconds(99));
    EXPECT_EQ(net.read(id), "");
    EXPECT_TRUE(net.is_open(id));
    net.advance(Duration::milliseconds(1));
    EXPECT_EQ(net.read(id), "error_auth\n");
    EXPECT_FALSE(net.is_open(id));
    EXPECT_TRUE(net.forgotten(id));
  }
};
class ReadTimeoutTest : public LoopbackTest {};
class IdleTimeoutTest : public LoopbackTest {};
class DrainTest : public LoopbackTest {};
class BackpressureTest : public LoopbackTest {};
class DisconnectTest : public LoopbackTest {};
class TwoPhaseTest : public LoopbackTest {
 protected:
  // A connection queued behind a holder with `e k 1`, promoted when the holder releases, and
  // 1.2 s later (injected time) past its 1 s lease without having called `w`.
  SessionId promoted_then_expired() {
    Loopback& net = start();
    const SessionId holder = net.connect();
    const SessionId a = net.connect();
    const std::string token = acquire(holder, "k");
    net.send(a, request("e", "k", "1"));
    EXPECT_EQ(net.read(a), "queued\n");
    net.send(holder, "r\nk\n" + token + "\n");  // promoted, lease 1 s running
    EXPECT_EQ(net.read(holder), "ok\n");
    net.advance(Duration::milliseconds(1200));
    return a;
  }
  Loopback& loopback() { return *net_; }
};
class GrantRaceTest : public LoopbackTest {};
class LifecycleTest : public LoopbackTest {};

// ---- reference 1.9 example exchanges --------------------------------------------------------

TEST_F(ExampleTest, LockRenewRelease) {
  Loopback& net = start();
  const SessionId a = net.connect();
  net.send(a, "l\nk\n10\n");
  const std::string granted = net.read(a);
  ASSERT_TRUE(is_grant_line(lines_of(granted).at(0), "ok", 33)) << granted;
  const std::string token = token_of(granted);
  EXPECT_EQ(token.substr(0, 16), "0000000000000001");  // the first fence after floor 0

  net.send(a, "n\nk\n" + token + " 60\n");
  EXPECT_EQ(net.read(a), "ok 60\n");
  net.send(a, "r\nk\n" + token + "\n");
  EXPECT_EQ(net.read(a), "ok\n");
}

TEST_F(ExampleTest, EnqueueUncontendedIsAcquiredThenWaitReturnsSameToken) {
  Loopback& net = start();
  const SessionId a = net.connect();
  net.send(a, "e\nk\n\n");
  const std::string acquired = net.read(a);
  ASSERT_TRUE(is_grant_line(lines_of(acquired).at(0), "acquired", 33)) << acquired;
  net.send(a, "w\nk\n10\n");
  EXPECT_EQ(net.read(a), "ok " + token_of(acquired) + " 33\n");
}

TEST_F(ExampleTest, EnqueueContendedIsQueuedThenWaitIsGranted) {
  Loopback& net = start();
  const SessionId holder = net.connect();
  const SessionId a = net.connect();
  const std::string token = acquire(holder, "k");
  net.send(a, "e\nk\n\n");
  EXPECT_EQ(net.read(a), "queued\n");
  net.send(a, "w\nk\n10\n");
  EXPECT_EQ(net.read(a), "");  // parked
  net.send(holder, "r\nk\n" + token + "\n");
  EXPECT_EQ(net.read(holder), "ok\n");
  const std::string granted = net.read(a);
  EXPECT_TRUE(is_grant_line(lines_of(granted).at(0), "ok", 33)) << granted;
}

TEST_F(ExampleTest, StatsOnFreshServer) {
  Loopback& net = start();
  const SessionId a = net.connect();
  net.send(a, kStats);
  const std::string reply = net.read(a);
  // dflockd's fields first, in its order; turnstile's additions may follow (compatibility 1).
  EXPECT_TRUE(reply.starts_with(kReferenceStatsPrefix)) << reply;
  EXPECT_TRUE(reply.ends_with("}\n")) << reply;
  EXPECT_EQ(std::count(reply.begin(), reply.end(), '\n'), 1);
}

// ---- ordering and pipelining (reference 1.1, compatibility 2) --------------------------------

TEST_F(PipelineTest, PingAnswersOk) {
  Loopback& net = start();
  const SessionId a = net.connect();
  net.send(a, kPing);
  EXPECT_EQ(net.read(a), "ok\n");
  EXPECT_EQ(net.engine().resources_count(), 0U);
}

TEST_F(PipelineTest, CrLfLinesAreAccepted) {
  Loopback& net = start();
  const SessionId a = net.connect();
  net.send(a, "ping\r\n_\r\n\r\n");
  net.send(a, "l\r\nk\r\n0\r\n");
  const std::vector<std::string> lines = lines_of(net.read(a));
  ASSERT_EQ(lines.size(), 2U);
  EXPECT_EQ(lines[0], "ok");
  EXPECT_TRUE(is_grant_line(lines[1], "ok", 33)) << lines[1];
}

// The script of PipelineTest cases: every kind of answer, each depending on the one before.
std::string mixed_script() {
  return std::string(kPing) + request("l", "a", "0") + request("l", "a", "0") +
         request("bogus", "a", "") + request("sl", "s", "0 2 7") + request("sl", "s", "0 3") +
         request("e", "a", "") + request("w", "b", "1") + std::string(kStats) + std::string(kPing);
}

void expect_mixed_script_answers(const std::string& output) {
  const std::vector<std::string> lines = lines_of(output);
  ASSERT_EQ(lines.size(), 10U) << output;
  EXPECT_EQ(lines[0], "ok");
  EXPECT_TRUE(is_grant_line(lines[1], "ok", 33)) << lines[1];
  EXPECT_EQ(lines[2], "timeout");  // same session holds it; timeout 0 does not queue
  EXPECT_EQ(lines[3], "error");
  EXPECT_TRUE(is_grant_line(lines[4], "ok", 7)) << lines[4];
  EXPECT_EQ(lines[5], "error_limit_mismatch");
  EXPECT_EQ(lines[6], "queued");
  EXPECT_EQ(lines[7], "error_not_enqueued");
  EXPECT_TRUE(lines[8].starts_with(R"(ok {"connections":1,"locks":[{"key":"a",)")) << lines[8];
  EXPECT_EQ(lines[9], "ok");
}

TEST_F(PipelineTest, ManyRequestsInOneWriteAreAnsweredInOrder) {
  Loopback& net = start();
  const SessionId a = net.connect();
  net.send(a, mixed_script());
  expect_mixed_script_answers(net.read(a));
  EXPECT_EQ(net.pending_input(a), 0U);
}

TEST_F(PipelineTest, OneByteAtATimeGivesTheSameBytesAsOneWrite) {
  Loopback& whole = start();
  const SessionId a = whole.connect();
  whole.send(a, mixed_script());
  const std::string expected = whole.read(a);

  Loopback bytewise;  // same seed, so the same tokens
  const SessionId b = bytewise.connect();
  std::string output;
  for (char byte : mixed_script()) {
    bytewise.send(b, std::string_view(&byte, 1));
    output += bytewise.read(b);
  }
  EXPECT_EQ(output, expected);
  expect_mixed_script_answers(output);
  EXPECT_TRUE(bytewise.anomalies().empty()) << joined(bytewise.anomalies());
}

TEST_F(PipelineTest, RequestsBehindAParkedRequestWaitForIt) {
  Loopback& net = start();
  const SessionId holder = net.connect();
  const SessionId a = net.connect();
  const std::string token = acquire(holder, "k");
  net.send(a, request("l", "k", "10") + std::string(kPing) + request("l", "j", "0"));
  EXPECT_EQ(net.read(a), "");                     // even the ping waits: strictly in order
  EXPECT_EQ(net.engine().resources_count(), 1U);  // `l j` has not started: one in flight
  EXPECT_EQ(net.session(a)->queued_requests(), 2U);

  net.send(holder, "r\nk\n" + token + "\n");
  const std::vector<std::string> lines = lines_of(net.read(a));
  ASSERT_EQ(lines.size(), 3U);
  EXPECT_TRUE(is_grant_line(lines[0], "ok", 33));
  EXPECT_EQ(lines[1], "ok");
  EXPECT_TRUE(is_grant_line(lines[2], "ok", 33));
}

TEST_F(PipelineTest, ParkedRequestTimesOutInOrder) {
  Loopback& net = start();
  const SessionId holder = net.connect();
  const SessionId a = net.connect();
  acquire(holder, "k");
  net.send(a, request("l", "k", "2") + std::string(kPing));
  net.advance(Duration::seconds(2) - Duration::nanoseconds(1));
  EXPECT_EQ(net.read(a), "");
  net.advance(Duration::nanoseconds(1));
  EXPECT_EQ(net.read(a), "timeout\nok\n");
}

// ---- stats (reference 1.7) ------------------------------------------------------------------

TEST_F(StatsTest, ConnectionsCountsOpenSessions) {
  Loopback& net = start();
  const SessionId a = net.connect();
  const SessionId b = net.connect();
  net.connect();
  net.send(a, kStats);
  EXPECT_TRUE(net.read(a).starts_with(R"(ok {"connections":3,)"));
  net.disconnect(b);
  net.send(a, kStats);
  EXPECT_TRUE(net.read(a).starts_with(R"(ok {"connections":2,)"));
}

TEST_F(StatsTest, ReplyIsOneLineOfJsonNamingTheHolder) {
  Loopback& net = start();
  const SessionId holder = net.connect();
  const SessionId waiter = net.connect();
  const SessionId a = net.connect();
  acquire(holder, "k");
  net.send(waiter, request("l", "k", "10"));
  net.send(a, kStats);
  const std::string reply = net.read(a);
  ASSERT_TRUE(reply.starts_with("ok {") && reply.ends_with("}\n")) << reply;
  EXPECT_EQ(std::count(reply.begin(), reply.end(), '\n'), 1);
  const nlohmann::json json = nlohmann::json::parse(reply.substr(3));
  EXPECT_EQ(json["connections"], 3);
  ASSERT_EQ(json["locks"].size(), 1U);
  EXPECT_EQ(json["locks"][0]["key"], "k");
  EXPECT_EQ(json["locks"][0]["owner_conn_id"], holder.value);
  EXPECT_EQ(json["locks"][0]["waiters"], 1);
  EXPECT_TRUE(json["semaphores"].is_array());
  EXPECT_TRUE(json["idle_locks"].is_array());
  EXPECT_TRUE(json["idle_semaphores"].is_array());
}

// ---- protocol errors (reference 1.3, 1.6, edge case 4) ---------------------------------------

TEST_F(ProtocolErrorTest, UnknownCommandAnswersErrorAndKeepsOpen) {
  expect_error_keeps_open(request("lock", "k", "0"));
}
TEST_F(ProtocolErrorTest, KeyWithSpaceAnswersErrorAndKeepsOpen) {
  expect_error_keeps_open(request("l", "a b", "0"));
}
TEST_F(ProtocolErrorTest, EmptyKeyAnswersErrorAndKeepsOpen) {
  expect_error_keeps_open(request("l", "", "0"));
}
TEST_F(ProtocolErrorTest, NonIntegerAnswersErrorAndKeepsOpen) {
  expect_error_keeps_open(request("l", "k", "ten"));
}
TEST_F(ProtocolErrorTest, NegativeTimeoutAnswersErrorAndKeepsOpen) {
  expect_error_keeps_open(request("l", "k", "-1"));
}
TEST_F(ProtocolErrorTest, TooLargeTimeoutAnswersErrorAndKeepsOpen) {
  expect_error_keeps_open(request("l", "k", "9223372037"));
}
TEST_F(ProtocolErrorTest, ZeroLeaseAnswersErrorAndKeepsOpen) {
  expect_error_keeps_open(request("l", "k", "0 0"));
}
TEST_F(ProtocolErrorTest, EmptyTokenAnswersErrorAndKeepsOpen) {
  expect_error_keeps_open(request("r", "k", ""));
}
TEST_F(ProtocolErrorTest, WrongFieldCountAnswersErrorAndKeepsOpen) {
  expect_error_keeps_open(request("w", "k", ""));
}
TEST_F(ProtocolErrorTest, BadSemaphoreLimitAnswersErrorAndKeepsOpen) {
  expect_error_keeps_open(request("sl", "k", "0 0"));
}

TEST_F(ProtocolErrorTest, LineTooLongAnswersErrorAndCloses) {
  Loopback& net = start();
  const SessionId a = net.connect();
  net.send(a, "l\n" + std::string(257, 'k') + "\n0\n");
  EXPECT_EQ(net.read(a), "error\n");
  EXPECT_FALSE(net.is_open(a));
  EXPECT_EQ(net.session(a), nullptr);  // closed, nothing in flight: forgotten
}

TEST_F(ProtocolErrorTest, LineOf256BytesIsAccepted) {
  Loopback& net = start();
  const SessionId a = net.connect();
  acquire(a, std::string(256, 'k'));
  EXPECT_TRUE(net.is_open(a));
}

TEST_F(ProtocolErrorTest, LineTooLongIsAnsweredAfterEarlierPipelinedRequests) {
  Loopback& net = start();
  const SessionId a = net.connect();
  net.send(a, std::string(kPing) + request("l", "k", "0") + std::string(300, 'x') + "\n" +
                  std::string(kPing));
  const std::vector<std::string> lines = lines_of(net.read(a));
  ASSERT_EQ(lines.size(), 3U);  // the ping after the long line is never answered
  EXPECT_EQ(lines[0], "ok");
  EXPECT_TRUE(is_grant_line(lines[1], "ok", 33));
  EXPECT_EQ(lines[2], "error");
  EXPECT_FALSE(net.is_open(a));
}

TEST_F(ProtocolErrorTest, LineTooLongBehindParkedRequestWaitsForIt) {
  Loopback& net = start();
  const SessionId holder = net.connect();
  const SessionId a = net.connect();
  const std::string token = acquire(holder, "k");
  net.send(a, request("l", "k", "10") + std::string(300, 'x') + "\n");
  EXPECT_EQ(net.read(a), "");
  EXPECT_TRUE(net.is_open(a));
  net.send(holder, "r\nk\n" + token + "\n");
  const std::vector<std::string> lines = lines_of(net.read(a));
  ASSERT_EQ(lines.size(), 2U);
  EXPECT_TRUE(is_grant_line(lines[0], "ok", 33));
  EXPECT_EQ(lines[1], "error");
  EXPECT_FALSE(net.is_open(a));
}

// ---- auth (reference 1.8, edge cases 5 and 25) -----------------------------------------------

TEST_F(AuthTest, CorrectSecretAnswersOkAndUnlocksCommands) {
  Loopback& net = start_with_secret();
  const SessionId a = net.connect();
  net.send(a, "auth\n_\ns3cret\n");
  EXPECT_EQ(net.read(a), "ok\n");
  acquire(a, "k");
}

TEST_F(AuthTest, AuthAndCommandPipelinedInOneWrite) {
  Loopback& net = start_with_secret();
  const SessionId a = net.connect();
  net.send(a, "auth\n_\ns3cret\n" + std::string(kPing));
  EXPECT_EQ(net.read(a), "ok\nok\n");
}

TEST_F(AuthTest, SecretLineIsTrimmed) {
  Loopback& net = start_with_secret();
  const SessionId a = net.connect();
  net.send(a, "auth\n_\n  s3cret \r\n");
  EXPECT_EQ(net.read(a), "ok\n");
}

TEST_F(AuthTest, WrongSecretAnswersErrorAuthAfter100MsThenCloses) {
  Loopback& net = start_with_secret();
  const SessionId a = net.connect();
  net.send(a, "auth\n_\ns3cre7\n");
  expect_auth_failure(net, a);
}

TEST_F(AuthTest, SecretWithExtraSuffixFails) {
  Loopback& net = start_with_secret();
  const SessionId a = net.connect();
  net.send(a, "auth\n_\ns3cretX\n");
  expect_auth_failure(net, a);
}

TEST_F(AuthTest, OtherFirstCommandAnswersErrorAuth) {
  Loopback& net = start_with_secret();
  const SessionId a = net.connect();
  net.send(a, kPing);
  expect_auth_failure(net, a);
}

TEST_F(AuthTest, ProtocolErrorAsFirstRequestAnswersErrorAuth) {
  Loopback& net = start_with_secret();
  const SessionId a = net.connect();
  net.send(a, request("bogus", "_", ""));
  expect_auth_failure(net, a);
}

TEST_F(AuthTest, LineTooLongAsFirstRequestAnswersErrorAuth) {
  Loopback& net = start_with_secret();
  const SessionId a = net.connect();
  net.send(a, std::string(300, 'x') + "\n");
  expect_auth_failure(net, a);
}

TEST_F(AuthTest, RequestsPipelinedAfterFailedAuthNeverRun) {
  Loopback& net = start_with_secret();
  const SessionId a = net.connect();
  net.send(a, "auth\n_\nwrong\n" + request("l", "k", "0"));
  net.send(a, request("l", "j", "0"));  // during the delay
  expect_auth_failure(net, a);
  EXPECT_EQ(net.engine().resources_count(), 0U);
  EXPECT_TRUE(net.routed(a).empty());
}

TEST_F(AuthTest, AuthAgainAfterSuccessAnswersErrorAndKeepsOpen) {
  Loopback& net = start_with_secret();
  const SessionId a = net.connect();
  net.send(a, "auth\n_\ns3cret\n");
  net.send(a, "auth\n_\ns3cret\n");
  net.send(a, kPing);
  EXPECT_EQ(net.read(a), "ok\nerror\nok\n");
  EXPECT_TRUE(net.is_open(a));
}

TEST_F(AuthTest, AuthWithoutConfiguredSecretAnswersErrorAndKeepsOpen) {
  Loopback& net = start();
  const SessionId a = net.connect();
  net.send(a, "auth\n_\nanything\n");
  net.send(a, kPing);
  EXPECT_EQ(net.read(a), "error\nok\n");
  EXPECT_TRUE(net.is_open(a));
}

TEST_F(AuthTest, PeerClosingDuringTheDelayWritesNothing) {
  Loopback& net = start_with_secret();
  const SessionId a = net.connect();
  net.send(a, "auth\n_\nwrong\n");
  net.advance(Duration::milliseconds(50));
  net.disconnect(a);
  net.advance(Duration::milliseconds(100));
  EXPECT_EQ(net.read(a), "");
  EXPECT_TRUE(net.forgotten(a));
}

// Edge case 5 and reference 1.8: "Any failure (read error, other command, wrong secret) gives
// error_auth". A first request that never completes is a read failure of the handshake.
TEST_F(AuthTest, ReadTimeoutDuringHandshakeAnswersErrorAuth) {
  Loopback& net = start_with_secret();
  const SessionId a = net.connect();
  net.send(a, "auth\n_\ns3c");
  net.advance(Duration::seconds(23) + Duration::milliseconds(100));
  EXPECT_EQ(net.read(a), "error_auth\n");
  EXPECT_FALSE(net.is_open(a));
}

// ---- read timeout (reference 1.2, compatibility 2, edge case 4) ------------------------------

TEST_F(ReadTimeoutTest, PartialRequestOlderThanReadTimeoutAnswersErrorAndCloses) {
  Loopback& net = start();
  const SessionId a = net.connect();
  net.send(a, "l\nk");
  net.advance(Duration::seconds(23) - Duration::nanoseconds(1));
  EXPECT_EQ(net.read(a), "");
  EXPECT_TRUE(net.is_open(a));
  net.advance(Duration::nanoseconds(1));
  EXPECT_EQ(net.read(a), "error\n");
  EXPECT_FALSE(net.is_open(a));
  EXPECT_TRUE(net.forgotten(a));
}

TEST_F(ReadTimeoutTest, SlowButCompleteRequestInsideTheTimeoutIsServed) {
  Loopback& net = start();
  const SessionId a = net.connect();
  net.send(a, "l\n");
  net.advance(Duration::seconds(10));
  net.send(a, "k\n");
  net.advance(Duration::seconds(12));
  net.send(a, "0\n");
  const std::string reply = net.read(a);
  EXPECT_TRUE(is_grant_line(lines_of(reply).at(0), "ok", 33)) << reply;
  net.advance(Duration::seconds(60));
  EXPECT_TRUE(net.is_open(a));
}

TEST_F(ReadTimeoutTest, ClockStartsAtTheFirstByteOfEachRequest) {
  Loopback& net = start();
  const SessionId a = net.connect();
  net.send(a, "pi");
  net.advance(Duration::seconds(20));
  net.send(a, "ng\n_\n\npi");  // completes one request and starts the next
  net.advance(Duration::seconds(20));
  net.send(a, "ng\n_\n\n");
  EXPECT_EQ(net.read(a), "ok\nok\n");
  EXPECT_TRUE(net.is_open(a));
}

TEST_F(ReadTimeoutTest, IdleConnectionIsNotDroppedByTheReadTimeout) {
  Loopback& net = start();
  const SessionId a = net.connect();
  net.advance(Duration::seconds(3600));
  EXPECT_TRUE(net.is_open(a));
  net.send(a, kPing);
  EXPECT_EQ(net.read(a), "ok\n");
}

TEST_F(ReadTimeoutTest, ZeroMeansNoLimit) {
  LoopbackConfig config;
  config.session.read_timeout = Duration::zero();
  Loopback& net = start(config);
  const SessionId a = net.connect();
  net.send(a, "ping\n");
  net.advance(Duration::seconds(3600));
  EXPECT_TRUE(net.is_open(a));
  net.send(a, "_\n\n");
  EXPECT_EQ(net.read(a), "ok\n");
}

TEST_F(ReadTimeoutTest, ParkedRequestIsAnsweredBeforeTheTimeoutError) {
  Loopback& net = start();
  const SessionId holder = net.connect();
  const SessionId a = net.connect();
  const std::string token = acquire(holder, "k");
  net.send(a, request("l", "k", "100") + "pi");
  net.advance(Duration::seconds(30));
  EXPECT_EQ(net.read(a), "");
  net.send(holder, "r\nk\n" + token + "\n");
  const std::vector<std::string> lines = lines_of(net.read(a));
  ASSERT_EQ(lines.size(), 2U);
  EXPECT_TRUE(is_grant_line(lines[0], "ok", 33));
  EXPECT_EQ(lines[1], "error");
  EXPECT_FALSE(net.is_open(a));
}

// ---- idle timeout (compatibility 2) ----------------------------------------------------------

LoopbackConfig idle_config(Duration idle) {
  LoopbackConfig config;
  config.session.idle_timeout = idle;
  return config;
}

TEST_F(IdleTimeoutTest, ClosesSilentlyAfterIdleTimeout) {
  Loopback& net = start(idle_config(Duration::seconds(60)));
  const SessionId a = net.connect();
  net.advance(Duration::seconds(60) - Duration::nanoseconds(1));
  EXPECT_TRUE(net.is_open(a));
  net.advance(Duration::nanoseconds(1));
  EXPECT_FALSE(net.is_open(a));
  EXPECT_EQ(net.read(a), "");
  EXPECT_TRUE(net.forgotten(a));
}

TEST_F(IdleTimeoutTest, ZeroMeansNever) {
  Loopback& net = start(idle_config(Duration::zero()));
  const SessionId a = net.connect();
  net.advance(Duration::seconds(365LL * 24 * 3600));
  EXPECT_TRUE(net.is_open(a));
}

TEST_F(IdleTimeoutTest, EachRequestRestartsIt) {
  Loopback& net = start(idle_config(Duration::seconds(60)));
  const SessionId a = net.connect();
  net.advance(Duration::seconds(50));
  net.send(a, kPing);
  net.advance(Duration::seconds(50));
  EXPECT_TRUE(net.is_open(a));
  EXPECT_EQ(net.read(a), "ok\n");
  net.advance(Duration::seconds(10));
  EXPECT_FALSE(net.is_open(a));
}

TEST_F(IdleTimeoutTest, ParkedRequestIsNotIdle) {
  LoopbackConfig config = idle_config(Duration::seconds(10));
  config.auto_release = false;  // the idle holder's close must not free the lock
  Loopback& net = start(config);
  const SessionId holder = net.connect();
  const SessionId a = net.connect();
  net.send(holder, request("l", "k", "0 3600"));
  net.send(a, request("l", "k", "60"));
  net.advance(Duration::seconds(60) - Duration::nanoseconds(1));
  EXPECT_TRUE(net.is_open(a));
  net.advance(Duration::nanoseconds(1));
  EXPECT_EQ(net.read(a), "timeout\n");
  net.advance(Duration::seconds(10) - Duration::nanoseconds(1));
  EXPECT_TRUE(net.is_open(a));
  net.advance(Duration::nanoseconds(1));
  EXPECT_FALSE(net.is_open(a));
}

TEST_F(IdleTimeoutTest, PartialRequestIsNotIdle) {
  LoopbackConfig config = idle_config(Duration::seconds(10));
  config.session.read_timeout = Duration::zero();
  Loopback& net = start(config);
  const SessionId a = net.connect();
  net.send(a, "pi");
  net.advance(Duration::seconds(100));
  EXPECT_TRUE(net.is_open(a));
}

// The idle period begins when the last queued request has been answered, not when its bytes
// arrived: requests held back by a full output buffer are not idleness.
TEST_F(IdleTimeoutTest, CountsFromTheLastAnswerNotTheLastByte) {
  LoopbackConfig config = idle_config(Duration::seconds(10));
  config.session.output_max = 1;
  Loopback& net = start(config);
  const SessionId a = net.connect();
  net.send(a, repeat(kPing, 3));
  net.advance(Duration::seconds(9));
  EXPECT_EQ(net.read(a), "ok\n");
  EXPECT_EQ(net.read(a), "ok\n");
  EXPECT_EQ(net.read(a), "ok\n");  // the last request is answered at 9 s
  net.advance(Duration::seconds(9));
  EXPECT_TRUE(net.is_open(a));  // idle for 9 s only
}

TEST_F(IdleTimeoutTest, IdleHolderIsClosedAndItsLockAutoReleased) {
  Loopback& net = start(idle_config(Duration::seconds(10)));
  const SessionId holder = net.connect();
  acquire(holder, "k", 3600);
  const SessionId a = net.connect();
  net.send(a, request("l", "k", "60"));
  net.advance(Duration::seconds(10));
  EXPECT_FALSE(net.is_open(holder));
  EXPECT_TRUE(is_grant_line(lines_of(net.read(a)).at(0), "ok", 33));
}

// ---- draining (reference 2.14) ---------------------------------------------------------------

// An idle connection is answered `error_draining` at once and closed: the client reads it as the
// reply to its next request, so shutdown need not wait for idle lock holders.
TEST_F(DrainTest, IdleConnectionGetsErrorDrainingAtOnceThenClose) {
  Loopback& net = start();
  const SessionId a = net.connect();
  net.begin_drain();
  EXPECT_EQ(net.read(a), "error_draining\n");
  EXPECT_FALSE(net.is_open(a));
  net.send(a, std::string(kPing) + request("l", "k", "0"));  // too late: ignored
  EXPECT_EQ(net.read(a), "");
  EXPECT_EQ(net.engine().resources_count(), 0U);
}

// Without auto-release the idle holder's close keeps its lock: the parked request stays in
// flight, is answered first, and only then comes `error_draining`. Queued requests never start.
TEST_F(DrainTest, QueuedRequestsAreNotStartedOnlyErrorDraining) {
  LoopbackConfig config;
  config.auto_release = false;
  Loopback& net = start(config);
  const SessionId holder = net.connect();
  const SessionId a = net.connect();
  acquire(holder, "k", 3600);
  net.send(a, request("l", "k", "60") + std::string(kPing) + request("l", "j", "0"));
  net.begin_drain();
  EXPECT_EQ(net.read(holder), "error_draining\n");
  EXPECT_EQ(net.read(a), "");  // the parked l is in flight
  net.advance(Duration::seconds(60));
  EXPECT_EQ(net.read(a), "timeout\nerror_draining\n");  // the ping and l j never ran
  EXPECT_FALSE(net.is_open(a));
  EXPECT_EQ(net.engine().resources_count(), 1U);
}

// With auto-release, draining closes the idle holder, whose lock goes to the parked waiter: its
// in-flight request is answered with the grant, then `error_draining`.
TEST_F(DrainTest, DrainClosesIdleHolderAndItsParkedWaiterIsGranted) {
  Loopback& net = start();
  const SessionId holder = net.connect();
  const SessionId a = net.connect();
  acquire(holder, "k", 3600);
  net.send(a, request("l", "k", "60") + std::string(kPing));
  net.begin_drain();
  EXPECT_EQ(net.read(holder), "error_draining\n");
  const std::vector<std::string> lines = lines_of(net.read(a));
  ASSERT_EQ(lines.size(), 2U);
  EXPECT_TRUE(is_grant_line(lines[0], "ok", 33));
  EXPECT_EQ(lines[1], "error_draining");
  EXPECT_FALSE(net.is_open(a));
}

// ---- backpressure (compatibility 2) ----------------------------------------------------------

TEST_F(BackpressureTest, PipelineMaxBoundsParsedRequests) {
  LoopbackConfig config;
  config.session.pipeline_max = 2;
  Loopback& net = start(config);
  const SessionId holder = net.connect();
  const SessionId a = net.connect();
  const std::string token = acquire(holder, "k");
  net.send(a, request("l", "k", "10") + repeat(kPing, 6));
  EXPECT_LE(net.session(a)->queued_requests(), 2U);
  EXPECT_GE(net.pending_input(a), 4 * kPing.size());  // the driver keeps what was not taken
  EXPECT_EQ(net.read(a), "");

  net.send(holder, "r\nk\n" + token + "\n");
  const std::vector<std::string> lines = lines_of(net.read(a));
  ASSERT_EQ(lines.size(), 7U);
  EXPECT_TRUE(is_grant_line(lines[0], "ok", 33));
  for (std::size_t i = 1; i < lines.size(); ++i) EXPECT_EQ(lines[i], "ok");
  EXPECT_EQ(net.pending_input(a), 0U);
}

TEST_F(BackpressureTest, OutputMaxStopsNewRequestsUntilOutputIsConsumed) {
  LoopbackConfig config;
  config.session.output_max = 1;
  Loopback& net = start(config);
  const SessionId a = net.connect();
  net.send(a, repeat(kPing, 3));
  EXPECT_EQ(net.session(a)->queued_requests(), 2U);
  EXPECT_EQ(net.read(a), "ok\n");
  EXPECT_EQ(net.read(a), "ok\n");
  EXPECT_EQ(net.read(a), "ok\n");
  EXPECT_EQ(net.read(a), "");
}

TEST_F(BackpressureTest, OutputMaxHoldsEngineCommandsBack) {
  LoopbackConfig config;
  config.session.output_max = 1;
  Loopback& net = start(config);
  const SessionId a = net.connect();
  net.send(a, request("l", "a", "0") + request("l", "b", "0"));
  EXPECT_EQ(net.engine().resources_count(), 1U);  // `l b` waits for the socket
  EXPECT_EQ(net.routed(a).size(), 1U);
  EXPECT_TRUE(is_grant_line(lines_of(net.read(a)).at(0), "ok", 33));
  EXPECT_EQ(net.engine().resources_count(), 2U);
  EXPECT_TRUE(is_grant_line(lines_of(net.read(a)).at(0), "ok", 33));
}

// ---- disconnect (reference 2.9, edge cases 17 and 18) ----------------------------------------

TEST_F(DisconnectTest, ParkedWaiterIsDroppedAndTheNextWaiterGetsTheLock) {
  Loopback& net = start();
  const SessionId holder = net.connect();
  const SessionId b = net.connect();
  const SessionId c = net.connect();
  const std::string token = acquire(holder, "k");
  net.send(b, request("l", "k", "10"));
  net.send(c, request("l", "k", "10"));
  net.disconnect(b);
  EXPECT_TRUE(net.forgotten(b));  // the parked request was cancelled
  ASSERT_EQ(net.engine().inspect().size(), 1U);
  EXPECT_EQ(net.engine().inspect()[0].waiters, std::vector<SessionId>{c});

  net.send(holder, "r\nk\n" + token + "\n");
  EXPECT_EQ(net.read(holder), "ok\n");
  EXPECT_TRUE(is_grant_line(lines_of(net.read(c)).at(0), "ok", 33));
  EXPECT_EQ(net.read(b), "");
}

// EOF is a half-close (`printf ... | nc -N`): what arrived is answered, then the session closes.
TEST_F(DisconnectTest, EofAnswersWhatArrivedThenCloses) {
  Loopback& net = start();
  const SessionId a = net.connect();
  net.send(a, request("ping", "_", "") + request("l", "k", "10"));
  net.half_close(a);
  const std::vector<std::string> lines = lines_of(net.read(a));
  ASSERT_EQ(lines.size(), 2U);
  EXPECT_EQ(lines[0], "ok");
  EXPECT_TRUE(is_grant_line(lines[1], "ok", 33));
  EXPECT_TRUE(net.forgotten(a));
}

// A parked request is cancelled when the peer stops sending (reference 2.9 peer-close watcher).
TEST_F(DisconnectTest, EofWhileParkedCancelsTheWaiter) {
  Loopback& net = start();
  const SessionId holder = net.connect();
  const SessionId b = net.connect();
  const SessionId c = net.connect();
  const std::string token = acquire(holder, "k");
  net.send(b, request("l", "k", "10"));
  net.send(c, request("l", "k", "10"));
  net.half_close(b);
  EXPECT_TRUE(net.forgotten(b));
  ASSERT_EQ(net.engine().inspect().size(), 1U);
  EXPECT_EQ(net.engine().inspect()[0].waiters, std::vector<SessionId>{c});
  net.send(holder, "r\nk\n" + token + "\n");
  EXPECT_TRUE(is_grant_line(lines_of(net.read(c)).at(0), "ok", 33));
  EXPECT_EQ(net.read(b), "");
}

// A request that arrived before EOF but only parks afterwards is cancelled when it parks.
TEST_F(DisconnectTest, EofThenRequestThatParksIsCancelled) {
  Loopback& net = start();
  const SessionId holder = net.connect();
  const SessionId b = net.connect();
  acquire(holder, "k");
  net.send(b, request("ping", "_", "") + request("l", "k", "10") + request("ping", "_", ""));
  net.half_close(b);
  EXPECT_EQ(net.read(b), "ok\n");  // the first ping; the parked l and what follows are dropped
  EXPECT_TRUE(net.forgotten(b));
  ASSERT_EQ(net.engine().inspect().size(), 1U);
  EXPECT_TRUE(net.engine().inspect()[0].waiters.empty());
}

TEST_F(DisconnectTest, EofDropsAnIncompleteRequest) {
  Loopback& net = start();
  const SessionId a = net.connect();
  net.send(a, "l\nk");
  net.half_close(a);
  EXPECT_EQ(net.read(a), "");
  EXPECT_TRUE(net.forgotten(a));
  EXPECT_TRUE(net.engine().inspect().empty());
}

TEST_F(DisconnectTest, HolderDisconnectAutoReleasesToParkedWaiter) {
  Loopback& net = start();
  const SessionId holder = net.connect();
  const SessionId b = net.connect();
  acquire(holder, "k");
  net.send(b, request("l", "k", "10"));
  EXPECT_EQ(net.read(b), "");
  net.disconnect(holder);
  EXPECT_TRUE(is_grant_line(lines_of(net.read(b)).at(0), "ok", 33));
}

TEST_F(DisconnectTest, WithoutAutoReleaseHoldingLivesUntilItsLeaseEnds) {
  LoopbackConfig config;
  config.auto_release = false;
  Loopback& net = start(config);
  const SessionId holder = net.connect();
  const SessionId b = net.connect();
  acquire(holder, "k", 10);
  net.send(b, request("l", "k", "30"));
  net.disconnect(holder);
  EXPECT_TRUE(net.forgotten(holder));
  EXPECT_EQ(net.read(b), "");
  net.advance(Duration::seconds(10) - Duration::nanoseconds(1));
  EXPECT_EQ(net.read(b), "");
  net.advance(Duration::nanoseconds(1));
  EXPECT_TRUE(is_grant_line(lines_of(net.read(b)).at(0), "ok", 33));
}

TEST_F(DisconnectTest, WithoutAutoReleaseAnotherSessionReleasesByToken) {
  LoopbackConfig config;
  config.auto_release = false;
  Loopback& net = start(config);
  const SessionId holder = net.connect();
  const SessionId b = net.connect();
  const SessionId c = net.connect();
  const std::string token = acquire(holder, "k", 3600);
  net.send(b, request("l", "k", "30"));
  net.disconnect(holder);
  EXPECT_EQ(net.read(b), "");
  net.send(c, "r\nk\n" + token + "\n");
  EXPECT_EQ(net.read(c), "ok\n");
  EXPECT_TRUE(is_grant_line(lines_of(net.read(b)).at(0), "ok", 33));
}

TEST_F(DisconnectTest, QueuedEnqueueIsRemovedEvenWithoutAutoRelease) {
  LoopbackConfig config;
  config.auto_release = false;
  Loopback& net = start(config);
  const SessionId holder = net.connect();
  const SessionId b = net.connect();
  const SessionId c = net.connect();
  const std::string token = acquire(holder, "k");
  net.send(b, request("e", "k", ""));
  EXPECT_EQ(net.read(b), "queued\n");
  net.send(c, request("l", "k", "30"));
  net.disconnect(b);
  net.send(holder, "r\nk\n" + token + "\n");
  EXPECT_TRUE(is_grant_line(lines_of(net.read(c)).at(0), "ok", 33));
}

// ---- two-phase over the wire (reference 2.6) -------------------------------------------------

TEST_F(TwoPhaseTest, EnqueueAndWaitPipelinedOnOneConnection) {
  Loopback& net = start();
  const SessionId holder = net.connect();
  const SessionId a = net.connect();
  const std::string token = acquire(holder, "k");
  net.send(a, request("e", "k", "20") + request("w", "k", "10") + std::string(kPing));
  EXPECT_EQ(net.read(a), "queued\n");
  net.send(holder, "r\nk\n" + token + "\n");
  const std::vector<std::string> lines = lines_of(net.read(a));
  ASSERT_EQ(lines.size(), 2U);
  EXPECT_TRUE(is_grant_line(lines[0], "ok", 20)) << lines[0];  // the lease given at `e`
  EXPECT_EQ(lines[1], "ok");
}

TEST_F(TwoPhaseTest, SemaphoreEnqueueAndWait) {
  Loopback& net = start();
  const SessionId a = net.connect();
  const SessionId b = net.connect();
  const SessionId c = net.connect();
  net.send(a, request("se", "s", "2"));
  net.send(b, request("se", "s", "2"));
  net.send(c, request("se", "s", "2") + request("sw", "s", "10"));
  const std::string a_reply = net.read(a);
  EXPECT_TRUE(is_grant_line(lines_of(a_reply).at(0), "acquired", 33));
  EXPECT_TRUE(is_grant_line(lines_of(net.read(b)).at(0), "acquired", 33));
  EXPECT_EQ(net.read(c), "queued\n");
  net.send(a, "sr\ns\n" + token_of(a_reply) + "\n");
  EXPECT_EQ(net.read(a), "ok\n");
  EXPECT_TRUE(is_grant_line(lines_of(net.read(c)).at(0), "ok", 33));
}

TEST_F(TwoPhaseTest, WaitWithoutEnqueueIsNotEnqueued) {
  Loopback& net = start();
  const SessionId a = net.connect();
  const SessionId b = net.connect();
  net.send(a, request("e", "k", ""));
  EXPECT_TRUE(is_grant_line(lines_of(net.read(a)).at(0), "acquired", 33));
  net.send(b, request("w", "k", "1"));  // records are per connection
  EXPECT_EQ(net.read(b), "error_not_enqueued\n");
}

// A two-phase record's lease runs on the engine's clock: injected time, no real second.
TEST_F(TwoPhaseTest, WaitAfterTheTwoPhaseLeaseEndedIsLeaseExpired) {
  Loopback& net = start();
  const SessionId a = net.connect();
  net.send(a, request("e", "k", "1"));
  EXPECT_TRUE(is_grant_line(lines_of(net.read(a)).at(0), "acquired", 1));
  net.advance(Duration::milliseconds(1200));
  net.send(a, request("w", "k", "1"));
  EXPECT_EQ(net.read(a), "error_lease_expired\n");
  // The expired record is gone: the key is free and `e` works again.
  net.send(a, request("e", "k", "1"));
  EXPECT_TRUE(is_grant_line(lines_of(net.read(a)).at(0), "acquired", 1));
}

TEST_F(TwoPhaseTest, APromotedWaiterThatNeverWaitedCanEnqueueAgainAfterExpiry) {
  // Reference edge case 22: the promoted record follows its token, so it does not block `e`.
  const SessionId a = promoted_then_expired();
  Loopback& net = loopback();
  net.send(a, request("e", "k", "1"));
  EXPECT_TRUE(is_grant_line(lines_of(net.read(a)).at(0), "acquired", 1));
}

TEST_F(TwoPhaseTest, WaitAfterAPromotedGrantExpiredIsLeaseExpiredThenNotEnqueued) {
  const SessionId a = promoted_then_expired();
  Loopback& net = loopback();
  net.send(a, request("w", "k", "1"));
  EXPECT_EQ(net.read(a), "error_lease_expired\n");
  net.send(a, request("w", "k", "1"));
  EXPECT_EQ(net.read(a), "error_not_enqueued\n");
}

// ---- a grant racing a close (core/session.h, edge cases 19 and 35) ---------------------------

TEST_F(GrantRaceTest, ParkedLockGrantedAfterCloseIsGivenBackToTheNextWaiter) {
  Loopback& net = start();
  const SessionId holder = net.connect();
  const SessionId b = net.connect();
  const SessionId c = net.connect();
  const std::string token = acquire(holder, "k");
  net.send(b, request("l", "k", "10"));
  net.send(c, request("l", "k", "10"));

  net.hold_close_notices(true);
  net.disconnect(b);  // the engine does not know yet
  ASSERT_NE(net.session(b), nullptr);
  EXPECT_TRUE(net.session(b)->closed());
  EXPECT_FALSE(net.session(b)->finished());
  net.send(holder, "r\nk\n" + token + "\n");  // grants b, which is gone

  // b gave its grant back with a release, so c holds the lock now.
  ASSERT_EQ(net.routed(b).size(), 2U);
  EXPECT_EQ(net.routed(b)[1].command, core::Command::kRelease);
  EXPECT_EQ(net.routed(b)[1].key, "k");
  EXPECT_TRUE(is_grant_line(lines_of(net.read(c)).at(0), "ok", 33));
  EXPECT_EQ(net.read(b), "");

  net.hold_close_notices(false);
  EXPECT_TRUE(net.forgotten(b));
  ASSERT_EQ(net.engine().inspect().size(), 1U);
  ASSERT_EQ(net.engine().inspect()[0].holders.size(), 1U);
  EXPECT_EQ(net.engine().inspect()[0].holders[0].session, c);
}

TEST_F(GrantRaceTest, GrantGivenBackWithNoOtherWaiterFreesTheLock) {
  Loopback& net = start();
  const SessionId holder = net.connect();
  const SessionId b = net.connect();
  const std::string token = acquire(holder, "k");
  net.send(b, request("l", "k", "10"));
  net.hold_close_notices(true);
  net.disconnect(b);
  net.send(holder, "r\nk\n" + token + "\n");
  net.hold_close_notices(false);
  EXPECT_TRUE(net.forgotten(b));
  const SessionId d = net.connect();
  acquire(d, "k");  // free again at once, not after b's 33 s lease
}

TEST_F(GrantRaceTest, TwoPhaseWaitGrantedAfterCloseIsGivenBack) {
  Loopback& net = start();
  const SessionId holder = net.connect();
  const SessionId b = net.connect();
  const SessionId c = net.connect();
  const std::string token = acquire(holder, "k");
  net.send(b, request("e", "k", "") + request("w", "k", "10"));
  EXPECT_EQ(net.read(b), "queued\n");
  net.send(c, request("l", "k", "10"));
  net.hold_close_notices(true);
  net.close(b, CloseReason::kDriver);
  net.send(holder, "r\nk\n" + token + "\n");
  EXPECT_TRUE(is_grant_line(lines_of(net.read(c)).at(0), "ok", 33));
  net.hold_close_notices(false);
  EXPECT_TRUE(net.forgotten(b));
}

TEST_F(GrantRaceTest, SemaphoreGrantIsGivenBackWithSemRelease) {
  Loopback& net = start();
  const SessionId holder = net.connect();
  const SessionId b = net.connect();
  const SessionId c = net.connect();
  net.send(holder, request("sl", "s", "0 1"));
  const std::string token = token_of(net.read(holder));
  net.send(b, request("sl", "s", "10 1"));
  net.send(c, request("sl", "s", "10 1"));
  net.hold_close_notices(true);
  net.disconnect(b);
  net.send(holder, "sr\ns\n" + token + "\n");
  ASSERT_EQ(net.routed(b).size(), 2U);
  EXPECT_EQ(net.routed(b)[1].command, core::Command::kSemRelease);
  EXPECT_TRUE(is_grant_line(lines_of(net.read(c)).at(0), "ok", 33));
  net.hold_close_notices(false);
}

TEST_F(GrantRaceTest, TimeoutAfterCloseIsDroppedWithoutGiveBack) {
  Loopback& net = start();
  const SessionId holder = net.connect();
  const SessionId b = net.connect();
  acquire(holder, "k");
  net.send(b, request("l", "k", "2"));
  net.hold_close_notices(true);
  net.disconnect(b);
  net.advance(Duration::seconds(2));
  EXPECT_EQ(net.routed(b).size(), 1U);  // no give-back: nothing was granted
  EXPECT_TRUE(net.session(b)->finished());
  net.hold_close_notices(false);
  EXPECT_TRUE(net.forgotten(b));
  EXPECT_EQ(net.read(b), "");
}

TEST_F(GrantRaceTest, CloseNoticeWhileStillParkedCancelsTheRequest) {
  Loopback& net = start();
  const SessionId holder = net.connect();
  const SessionId b = net.connect();
  const std::string token = acquire(holder, "k");
  net.send(b, request("l", "k", "10"));
  net.hold_close_notices(true);
  net.disconnect(b);
  EXPECT_FALSE(net.session(b)->finished());  // its request is still parked
  net.hold_close_notices(false);             // close_session returns true: on_cancelled
  EXPECT_TRUE(net.forgotten(b));
  net.send(holder, "r\nk\n" + token + "\n");
  EXPECT_EQ(net.read(holder), "ok\n");
  EXPECT_TRUE(net.engine().inspect().empty() || net.engine().inspect()[0].holders.empty());
}

// The session alone, without an engine: a grant that arrives after close becomes a give-back,
// and the session is finished only once that give-back has been answered.
TEST_F(GrantRaceTest, SessionGivesBackAGrantThatArrivesAfterClose) {
  const core::Instant t0 = core::Instant::from_ns(1'000);
  core::Session session(SessionId{7}, core::SessionConfig{}, t0);
  const std::string lock_request = request("l", "k", "10");
  EXPECT_EQ(session.on_bytes(t0, lock_request), lock_request.size());
  const std::optional<core::Request> lock = session.next_request(t0);
  ASSERT_TRUE(lock.has_value());
  EXPECT_EQ(lock->command, core::Command::kLock);

  session.on_peer_closed(t0);
  EXPECT_TRUE(session.closed());
  EXPECT_FALSE(session.finished());
  const core::Token token{core::Fence{42}, 0x1234};
  session.on_reply(t0, core::Reply::granted(core::Status::kOk, token, 33));
  EXPECT_FALSE(session.finished());
  EXPECT_EQ(session.output(), "");

  const std::optional<core::Request> give_back = session.next_request(t0);
  ASSERT_TRUE(give_back.has_value());
  EXPECT_EQ(give_back->command, core::Command::kRelease);
  EXPECT_EQ(give_back->key, "k");
  EXPECT_EQ(give_back->token, token);
  EXPECT_FALSE(session.finished());  // the give-back is in flight
  EXPECT_FALSE(session.next_request(t0).has_value());
  session.on_reply(t0, core::Reply::of(core::Status::kOk));
  EXPECT_TRUE(session.finished());
  EXPECT_FALSE(session.next_request(t0).has_value());
  EXPECT_EQ(session.output(), "");
}

TEST_F(GrantRaceTest, SessionGivesBackAnAcquiredEnqueueAndIgnoresOtherLateReplies) {
  const core::Instant t0 = core::Instant::from_ns(1'000);
  core::Session session(SessionId{7}, core::SessionConfig{}, t0);
  session.on_bytes(t0, request("se", "s", "3") + request("n", "k", std::string(32, 'a')));
  ASSERT_TRUE(session.next_request(t0).has_value());
  session.close(CloseReason::kDriver);
  const core::Token token{core::Fence{9}, 0x77};
  session.on_reply(t0, core::Reply::granted(core::Status::kAcquired, token, 33));
  const std::optional<core::Request> give_back = session.next_request(t0);
  ASSERT_TRUE(give_back.has_value());
  EXPECT_EQ(give_back->command, core::Command::kSemRelease);
  EXPECT_EQ(give_back->key, "s");
  EXPECT_EQ(give_back->token, token);
  session.on_reply(t0, core::Reply::of(core::Status::kError));  // already released: fine
  EXPECT_TRUE(session.finished());
  EXPECT_FALSE(session.next_request(t0).has_value());  // the queued renew never starts
  EXPECT_EQ(session.output(), "");
}

TEST_F(GrantRaceTest, NonGrantReplyAfterCloseIsDroppedWithoutGiveBack) {
  const core::Instant t0 = core::Instant::from_ns(1'000);
  core::Session session(SessionId{7}, core::SessionConfig{}, t0);
  session.on_bytes(t0, request("n", "k", std::string(32, 'a')));
  ASSERT_TRUE(session.next_request(t0).has_value());
  session.on_peer_closed(t0);
  session.on_reply(t0, core::Reply::renewed(33));
  EXPECT_TRUE(session.finished());
  EXPECT_FALSE(session.next_request(t0).has_value());
}

// ---- tokens and lifecycle --------------------------------------------------------------------

TEST_F(LifecycleTest, ReleaseAndRenewByTokenFromAnotherConnection) {
  Loopback& net = start();
  const SessionId a = net.connect();
  const SessionId b = net.connect();
  const std::string token = acquire(a, "k");
  net.send(b, "n\nk\n" + token + " 60\n");
  EXPECT_EQ(net.read(b), "ok 60\n");
  net.send(b, "r\nk\n" + token + "\n");
  EXPECT_EQ(net.read(b), "ok\n");
  net.send(a, "r\nk\n" + token + "\n");
  EXPECT_EQ(net.read(a), "error\n");
}

TEST_F(LifecycleTest, InputAfterACloseIsIgnored) {
  Loopback& net = start();
  const SessionId a = net.connect();
  net.send(a, std::string(300, 'x') + "\n");
  EXPECT_EQ(net.read(a), "error\n");
  net.send(a, kPing);
  net.send(a, request("l", "k", "0"));
  EXPECT_EQ(net.read(a), "");
  EXPECT_EQ(net.engine().resources_count(), 0U);
}

TEST_F(LifecycleTest, SessionIgnoresBytesAfterCloseAndReportsThemConsumed) {
  const core::Instant t0 = core::Instant::from_ns(1'000);
  core::Session session(SessionId{1}, core::SessionConfig{}, t0);
  session.close(CloseReason::kDriver);
  EXPECT_EQ(session.on_bytes(t0, kPing), kPing.size());
  EXPECT_EQ(session.output(), "");
  EXPECT_FALSE(session.next_request(t0).has_value());
  EXPECT_TRUE(session.finished());
  EXPECT_EQ(session.close_reason(), CloseReason::kDriver);
}

TEST_F(LifecycleTest, DriverCloseCancelsTheParkedRequestAndWritesNothing) {
  Loopback& net = start();
  const SessionId holder = net.connect();
  const SessionId b = net.connect();
  acquire(holder, "k");
  net.send(b, request("l", "k", "10"));
  net.close(b, CloseReason::kDriver);  // e.g. a write timeout
  EXPECT_TRUE(net.forgotten(b));
  EXPECT_EQ(net.read(b), "");
}

TEST_F(LifecycleTest, FinishedOnlyAfterInFlightIsSettled) {
  Loopback& net = start();
  const SessionId holder = net.connect();
  const SessionId b = net.connect();
  acquire(holder, "k");
  net.send(b, request("l", "k", "10"));
  net.hold_close_notices(true);
  net.disconnect(b);
  ASSERT_NE(net.session(b), nullptr);
  EXPECT_TRUE(net.session(b)->closed());
  EXPECT_TRUE(net.session(b)->in_flight());
  EXPECT_FALSE(net.session(b)->finished());
  EXPECT_EQ(net.session(b)->close_reason(), CloseReason::kPeerClosed);
  net.hold_close_notices(false);
  EXPECT_TRUE(net.forgotten(b));
}

TEST_F(LifecycleTest, IdleSessionReportsItsDeadlineAndCloseReason) {
  const core::Instant t0 = core::Instant::from_ns(1);
  core::SessionConfig config;
  config.idle_timeout = Duration::seconds(5);
  core::Session idle(SessionId{1}, config, t0);
  EXPECT_EQ(idle.next_deadline(), t0 + Duration::seconds(5));
  idle.on_timer(t0 + Duration::seconds(5) - Duration::nanoseconds(1));
  EXPECT_FALSE(idle.closed());
  idle.on_timer(t0 + Duration::seconds(5));
  EXPECT_EQ(idle.close_reason(), CloseReason::kIdleTimeout);
  EXPECT_EQ(core::close_reason_name(CloseReason::kIdleTimeout), "idle_timeout");
  EXPECT_FALSE(idle.next_deadline().has_value());
  EXPECT_EQ(idle.output(), "");
}

// ---- property: random bytes in random chunks -------------------------------------------------

// The token of the engine's n-th grant (n >= 1) under LoopbackConfig defaults: fences count up
// from floor 0, and each grant draws the next salt of SplitMix64(salt_seed).
std::string nth_grant_token(std::uint64_t salt_seed, std::uint64_t n) {
  core::SplitMix64 salts(salt_seed);
  std::uint64_t salt = 0;
  for (std::uint64_t i = 0; i < n; ++i) salt = salts.next_u64();
  return core::Token{core::Fence{n}, salt}.to_string();
}

TEST_F(LifecycleTest, NthGrantTokenHelperMatchesTheEngine) {
  Loopback& net = start();
  const SessionId a = net.connect();
  EXPECT_EQ(acquire(a, "x"), nth_grant_token(1, 1));
  EXPECT_EQ(acquire(a, "y"), nth_grant_token(1, 2));
}

// One well-formed request over a few keys (tokens of the first grants, so some match).
std::string random_valid_request() {
  const std::string key = *rc::gen::element<std::string>("a", "a", "b");
  const std::string timeout = std::to_string(*rc::gen::inRange(0, 4));
  const std::string lease = *rc::gen::element<std::string>("", " 1", " 5");
  const std::string limit = std::to_string(*rc::gen::inRange(1, 3));
  const std::string token = nth_grant_token(1, *rc::gen::inRange<std::uint64_t>(1, 6));
  switch (*rc::gen::inRange(0, 13)) {
    case 0:
      return request("l", key, timeout + lease);
    case 1:
      return request("r", key, token);
    case 2:
      return request("n", key, token + lease);
    case 3:
      return request("e", key, lease.empty() ? "" : lease.substr(1));
    case 4:
      return request("w", key, timeout);
    case 5:
      return request("sl", key, timeout + " " + limit + lease);
    case 6:
      return request("sr", key, token);
    case 7:
      return request("sn", key, token + lease);
    case 8:
      return request("se", key, limit + lease);
    case 9:
      return request("sw", key, timeout);
    case 10:
      return std::string(kPing);
    case 11:
      return std::string(kStats);
    default:
      return request("l", key, "bad");  // a protocol error that keeps the connection
  }
}

// Builds one piece of client input: mostly well-formed requests over a few keys, some garbage.
std::string random_piece(const std::string& last_token) {
  static const std::vector<std::string> kKeys = {"a", "a", "a", "b"};
  const std::string key = *rc::gen::elementOf(kKeys);
  const std::string timeout = std::to_string(*rc::gen::inRange(0, 4));
  const std::string lease = *rc::gen::element<std::string>("", " 1", " 2", " 60");
  const std::string limit = std::to_string(*rc::gen::inRange(1, 3));
  const std::string token =
      *rc::gen::element(0, 1, 2) == 0 ? std::string(32, '0') + "x" : last_token;
  switch (*rc::gen::inRange(0, 20)) {
    case 0:
      return request("l", key, timeout + lease);
    case 1:
      return request("r", key, token);
    case 2:
      return request("n", key, token + lease);
    case 3:
      return request("e", key, lease.empty() ? "" : lease.substr(1));
    case 4:
      return request("w", key, timeout);
    case 5:
      return request("sl", key, timeout + " " + limit + lease);
    case 6:
      return request("sr", key, token);
    case 7:
      return request("sn", key, token + lease);
    case 8:
      return request("se", key, limit + lease);
    case 9:
      return request("sw", key, timeout);
    case 10:
      return std::string(kPing);
    case 11:
      return std::string(kStats);
    case 12:
      return request("auth", "_", *rc::gen::element<std::string>("s3cret", "nope", ""));
    case 13:
      return std::string(*rc::gen::inRange<std::size_t>(250, 300), 'x') + "\n";
    case 14:
      return std::string(*rc::gen::inRange<std::size_t>(0, 3), '\n');
    case 15: {
      const std::string alphabet = "lrnewsp \t\r\n_0123456789-+abx";
      const auto chars = *rc::gen::container<std::vector<char>>(rc::gen::elementOf(alphabet));
      return std::string(chars.begin(), chars.end());
    }
    case 16:
      return request("l", key, "3" + lease);
    case 17:
      return request("sl", key, "3 " + limit + lease);
    case 18:
      return request("w", key, "3");
    default:
      return *rc::gen::string<std::string>();
  }
}

RC_GTEST_PROP(SessionProperty, RandomBytesInRandomChunksKeepEverySessionSane, ()) {
  LoopbackConfig config;
  config.session.pipeline_max = *rc::gen::inRange<std::size_t>(1, 5);
  config.session.output_max = *rc::gen::element<std::size_t>(1, 8, 64, 4096);
  config.session.parser_limits.long_line_max = 512;
  config.session.read_timeout = *rc::gen::element(Duration::zero(), Duration::seconds(2));
  config.session.idle_timeout = *rc::gen::element(Duration::zero(), Duration::seconds(3));
  if (*rc::gen::arbitrary<bool>()) config.session.auth_secret = "s3cret";
  config.auto_release = *rc::gen::arbitrary<bool>();
  config.engine.waiters_max = *rc::gen::element<std::int64_t>(0, 1);
  Loopback net(config);

  // With a secret, most connections authenticate first, so that the engine sees traffic.
  const auto open_connection = [&] {
    const SessionId id = net.connect();
    if (config.session.auth_secret && *rc::gen::inRange(0, 4) != 0) {
      net.send(id, "auth\n_\ns3cret\n");
    }
    return id;
  };
  std::vector<SessionId> ids;
  const int sessions = *rc::gen::inRange(1, 5);
  for (int i = 0; i < sessions; ++i) ids.push_back(open_connection());

  std::string last_token(32, 'f');
  const auto check_output = [&](SessionId id) {
    const std::string output = net.read(id);
    RC_ASSERT(output.empty() || output.back() == '\n');
    for (const std::string& line : lines_of(output)) {
      RC_ASSERT(is_valid_reply_line(line));
      if (is_any_grant_line(line)) last_token = token_of(line);
    }
  };

  const int steps = *rc::gen::inRange(1, 40);
  for (int step = 0; step < steps; ++step) {
    const SessionId id = ids[*rc::gen::inRange<std::size_t>(0, ids.size())];
    const int action = *rc::gen::inRange(0, 22);
    if (action < 12) {
      // Several pieces cut at random points into chunks.
      std::string bytes;
      const int pieces = *rc::gen::inRange(1, 4);
      for (int p = 0; p < pieces; ++p) bytes += random_piece(last_token);
      std::size_t at = 0;
      while (at < bytes.size()) {
        const std::size_t chunk = *rc::gen::inRange<std::size_t>(1, bytes.size() - at + 1);
        net.send(id, std::string_view(bytes).substr(at, chunk));
        at += chunk;
      }
    } else if (action < 16) {
      check_output(id);
    } else if (action < 19) {
      net.advance(*rc::gen::element(Duration::milliseconds(1), Duration::milliseconds(100),
                                    Duration::seconds(1), Duration::seconds(5)));
    } else if (action == 19 || action == 20) {
      const int how = *rc::gen::inRange(0, 3);
      if (how == 0) {
        net.disconnect(id);
      } else if (how == 1) {
        net.half_close(id);
      } else {
        net.close(id, CloseReason::kDriver);
      }
      ids.push_back(open_connection());
    } else {
      net.hold_close_notices(*rc::gen::arbitrary<bool>());
    }

    RC_ASSERT(net.anomalies().empty());
    for (SessionId each : ids) {
      const core::Session* session = net.session(each);
      if (session == nullptr) continue;
      RC_ASSERT(session->queued_requests() <= config.session.pipeline_max);
      // The parser holds at most the three lines of one request, at their caps.
      RC_ASSERT(session->buffered_input_bytes() <= config.session.parser_limits.long_line_max +
                                                       2 * config.session.parser_limits.line_max);
      // One reply may overshoot output_max (the one in flight), plus a closing error line.
      RC_ASSERT(session->output().size() <= config.session.output_max + 1024);
    }
  }

  // Everything ends: every session closes, every request settles, the engine empties.
  for (SessionId id : ids) check_output(id);
  net.hold_close_notices(false);
  for (SessionId id : ids) net.disconnect(id);
  net.advance(Duration::seconds(1000));
  RC_ASSERT(net.anomalies().empty());
  for (SessionId id : ids) RC_ASSERT(net.forgotten(id));
  RC_ASSERT(net.engine().resources_count() == 0U);
}

// Reads until the session has nothing more to say at this instant.
std::string read_all(Loopback& net, SessionId id) {
  std::string output;
  for (std::string more = net.read(id); !more.empty(); more = net.read(id)) output += more;
  return output;
}

// Everything left runs out: reads at every step, time moves on until all waits have ended.
std::string settle(Loopback& net, SessionId id) {
  std::string output = read_all(net, id);
  for (int i = 0; i < 20; ++i) {
    net.advance(Duration::seconds(5));
    output += read_all(net, id);
  }
  return output;
}

RC_GTEST_PROP(SessionProperty, ChunkingAndReadTimingDoNotChangeTheReplies, ()) {
  LoopbackConfig config;
  config.session.pipeline_max = *rc::gen::inRange<std::size_t>(1, 4);
  config.session.output_max = *rc::gen::element<std::size_t>(1, 16, 4096);
  const auto script = *rc::gen::container<std::vector<std::string>>(
      rc::gen::exec([] { return random_valid_request(); }));
  std::string bytes;
  for (const std::string& piece : script) bytes += piece;

  Loopback whole(config);
  const SessionId a = whole.connect();
  whole.send(a, bytes);
  const std::string expected = settle(whole, a);

  Loopback chunked(config);
  const SessionId b = chunked.connect();
  std::string output;
  std::size_t at = 0;
  while (at < bytes.size()) {
    const std::size_t chunk = *rc::gen::inRange<std::size_t>(1, bytes.size() - at + 1);
    chunked.send(b, std::string_view(bytes).substr(at, chunk));
    at += chunk;
    if (*rc::gen::arbitrary<bool>()) output += chunked.read(b);
  }
  output += settle(chunked, b);

  RC_ASSERT(output == expected);
  const std::vector<std::string> lines = lines_of(expected);
  RC_ASSERT(lines.size() == script.size());  // one reply per request, none lost or doubled
  for (const std::string& line : lines) RC_ASSERT(is_valid_reply_line(line));
  RC_ASSERT(whole.anomalies().empty());
  RC_ASSERT(chunked.anomalies().empty());
  RC_ASSERT(whole.is_open(a) && chunked.is_open(b));
}

// ---- several shards: the production router between sessions and engines -------------------

TEST(ShardedLoopbackTest, ASessionUsesKeysOnEveryShardAndItsCloseReleasesThemAll) {
  LoopbackConfig config;
  config.shards = 3;
  Loopback net(config);
  const SessionId a = net.connect();  // shard 0
  const SessionId b = net.connect();  // shard 1
  std::string locks;
  for (int i = 0; i < 12; ++i) locks += request("l", "k" + std::to_string(i), "0");
  net.send(a, locks);
  const std::vector<std::string> granted = lines_of(net.read(a));
  ASSERT_EQ(granted.size(), 12U);
  for (const std::string& line : granted) EXPECT_EQ(line.rfind("ok ", 0), 0U) << line;
  std::size_t held = 0;
  for (std::size_t shard = 0; shard < 3; ++shard) {
    EXPECT_GT(net.engine(shard).resources_count(), 0U) << "shard " << shard << " got no key";
    held += net.engine(shard).resources_count();
  }
  EXPECT_EQ(held, 12U);

  // stats gathers every shard's part.
  net.send(b, kStats);
  const std::string stats = net.read(b);
  ASSERT_EQ(stats.rfind("ok ", 0), 0U) << stats;
  EXPECT_EQ(nlohmann::json::parse(stats.substr(3))["locks"].size(), 12U);

  // b waits on a key of another shard than its own; a's disconnect hands it over.
  net.send(b, request("l", "k5", "10"));
  EXPECT_EQ(net.read(b), "");
  net.disconnect(a);
  EXPECT_EQ(net.read(b).rfind("ok ", 0), 0U);
  EXPECT_TRUE(net.forgotten(a));
  for (std::size_t shard = 0; shard < 3; ++shard) {
    for (const auto& view : net.engine(shard).inspect()) {
      for (const auto& holder : view.holders) EXPECT_NE(holder.session, a) << "a still holds";
    }
  }
  EXPECT_TRUE(net.anomalies().empty()) << net.anomalies().front();
}

}  // namespace
}  // namespace turnstile::test
