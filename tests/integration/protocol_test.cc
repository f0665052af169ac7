// The dflockd wire protocol against a real turnstiled over real sockets: every command and
// status string of reference 1.4-1.8, the 1.9 examples, FIFO order and fences across
// connections, lease expiry, disconnects, two-phase rules, sharding, half-close and limits.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/routing.h"
#include "core/types.h"
#include "tests/integration/harness.h"

namespace turnstile::integration {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

struct Grant {
  std::string token;
  long long lease_s = -1;
  unsigned long long fence = 0;
};

// Parses "<status> <32 hex> <lease>"; records a test failure when the reply has another shape.
Grant parse_grant(const std::string& reply, const std::string& status = "ok") {
  static const std::regex kGrant("^(ok|acquired) ([0-9a-f]{32}) ([0-9]+)$");
  std::smatch match;
  Grant grant;
  if (!std::regex_match(reply, match, kGrant) || match[1].str() != status) {
    ADD_FAILURE() << "expected '" << status << " <token> <lease>', got '" << reply << "'";
    return grant;
  }
  grant.token = match[2].str();
  grant.lease_s = std::stoll(match[3].str());
  grant.fence = fence_of(grant.token).value_or(0);
  return grant;
}

bool is_grant(const std::string& reply) {
  static const std::regex kGrant("^ok [0-9a-f]{32} [0-9]+$");
  return std::regex_match(reply, kGrant);
}

Json stats(Client& client) {
  const std::string reply = client.request("stats", "_", "");
  if (reply.rfind("ok ", 0) != 0) {
    ADD_FAILURE() << "stats reply: " << reply;
    return Json::object();
  }
  return Json::parse(reply.substr(3));
}

// The stats entry for `key` in `array`, or null.
Json entry(const Json& root, const std::string& array, const std::string& key) {
  if (!root.contains(array)) return nullptr;
  for (const Json& item : root[array]) {
    if (item.value("key", "") == key) return item;
  }
  return nullptr;
}

// Waiters queued on lock `key` (0 when the key is idle or unknown).
long long lock_waiters(Client& observer, const std::string& key) {
  const Json item = entry(stats(observer), "locks", key);
  return item.is_null() ? 0 : item["waiters"].get<long long>();
}

long long semaphore_waiters(Client& observer, const std::string& key) {
  const Json item = entry(stats(observer), "semaphores", key);
  return item.is_null() ? 0 : item["waiters"].get<long long>();
}

// Polls stats until lock `key` has `count` waiters; a test failure if it never does.
void await_lock_waiters(Client& observer, const std::string& key, long long count) {
  EXPECT_TRUE(eventually([&] { return lock_waiters(observer, key) == count; }, 3s))
      << "lock " << key << " never had " << count << " waiters; has "
      << lock_waiters(observer, key);
}

long long elapsed_ms(Clock::time_point since) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - since).count();
}

std::string lock_key_on_shard(std::size_t shard, std::size_t shards, const std::string& prefix,
                              int skip = 0) {
  for (int i = 0;; ++i) {
    const std::string key = prefix + std::to_string(i);
    if (core::shard_of(core::Namespace::kLock, key, shards) == shard && skip-- == 0) return key;
  }
}

// ---- single commands (reference 1.4) ---------------------------------------------------------

TEST(Protocol, PingAnswersOkWhateverTheKeyAndArgument) {
  Daemon daemon;
  Client client(daemon.port());
  EXPECT_EQ(client.request("ping", "_", ""), "ok");
  EXPECT_EQ(client.request("ping", "anything", "at all"), "ok");
}

TEST(Protocol, AcquireUsesTheDefaultLeaseAndRenewReturnsTheNewTtl) {
  Daemon daemon;
  Client client(daemon.port());
  const Grant grant = parse_grant(client.request("l", "k", "10"));
  EXPECT_EQ(grant.lease_s, 33);
  EXPECT_EQ(client.request("n", "k", grant.token + " 60"), "ok 60");
  EXPECT_EQ(client.request("n", "k", grant.token), "ok 33");  // server default, not 60
  EXPECT_EQ(client.request("r", "k", grant.token), "ok");
  EXPECT_EQ(client.request("r", "k", grant.token), "error");
  EXPECT_EQ(client.request("n", "k", grant.token), "error");
}

TEST(Protocol, AcquireWithLeaseAndDefaultLeaseFlag) {
  Daemon daemon({"--default-lease-ttl", "7"});
  Client client(daemon.port());
  EXPECT_EQ(parse_grant(client.request("l", "a", "10 5")).lease_s, 5);
  const Grant grant = parse_grant(client.request("l", "b", "10"));
  EXPECT_EQ(grant.lease_s, 7);
  EXPECT_EQ(client.request("n", "b", grant.token), "ok 7");
}

TEST(Protocol, TokensAreThirtyTwoLowercaseHexWithAFenceAboveTheWallClock) {
  Daemon daemon;
  Client client(daemon.port());
  const auto now_ns =
      static_cast<unsigned long long>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::system_clock::now().time_since_epoch())
                                          .count());
  const Grant grant = parse_grant(client.request("l", "k", "0"));
  // Fences start at the daemon's wall clock in ns (it started before `now_ns` was read).
  EXPECT_GT(grant.fence, now_ns - 60'000'000'000ULL);
}

TEST(Protocol, ReleaseAndRenewWithAWrongTokenAnswerError) {
  Daemon daemon;
  Client client(daemon.port());
  const Grant grant = parse_grant(client.request("l", "k", "0"));
  EXPECT_EQ(client.request("r", "k", std::string(32, '0')), "error");
  EXPECT_EQ(client.request("r", "other", grant.token), "error");     // unknown key
  EXPECT_EQ(client.request("sr", "k", grant.token), "error");        // other namespace
  EXPECT_EQ(client.request("n", "k", "not-a-token"), "error");       // never matches
  EXPECT_EQ(client.request("r", "k", grant.token + " x"), "error");  // inner space: whole line
  EXPECT_EQ(client.request("r", "k", grant.token), "ok");
}

TEST(Protocol, TimeoutZeroAnswersAtOnceAndAPositiveTimeoutWaitsItsSeconds) {
  Daemon daemon;
  Client holder(daemon.port());
  Client other(daemon.port());
  parse_grant(holder.request("l", "k", "0"));
  auto start = Clock::now();
  EXPECT_EQ(other.request("l", "k", "0"), "timeout");
  EXPECT_LT(elapsed_ms(start), 500);
  start = Clock::now();
  EXPECT_EQ(other.request("l", "k", "1"), "timeout");
  EXPECT_GE(elapsed_ms(start), 950);
  EXPECT_LT(elapsed_ms(start), 1800);
}

TEST(Protocol, LocksAreNotReentrant) {
  Daemon daemon;
  Client client(daemon.port());
  parse_grant(client.request("l", "k", "0"));
  EXPECT_EQ(client.request("l", "k", "0"), "timeout");
}

TEST(Protocol, EnqueueFastPathThenWaitReturnsTheSameToken) {
  Daemon daemon;
  Client client(daemon.port());
  const Grant acquired = parse_grant(client.request("e", "k", ""), "acquired");
  EXPECT_EQ(acquired.lease_s, 33);
  const Grant waited = parse_grant(client.request("w", "k", "1"));
  EXPECT_EQ(waited.token, acquired.token);
  EXPECT_EQ(waited.lease_s, 33);
  EXPECT_EQ(client.request("w", "k", "1"), "error_not_enqueued");  // the record is gone
  EXPECT_EQ(client.request("r", "k", acquired.token), "ok");
}

TEST(Protocol, EnqueueWithLeaseCarriesItIntoTheWaitReply) {
  Daemon daemon;
  Client holder(daemon.port());
  Client client(daemon.port());
  const Grant held = parse_grant(holder.request("l", "k", "0"));
  EXPECT_EQ(client.request("e", "k", "9"), "queued");
  EXPECT_EQ(holder.request("r", "k", held.token), "ok");
  // Promoted before `w`: the record is granted, `w` answers at once with the lease from `e`.
  const Grant waited = parse_grant(client.request("w", "k", "0"));
  EXPECT_EQ(waited.lease_s, 9);
  EXPECT_GT(waited.fence, held.fence);
}

TEST(Protocol, WaitParksUntilTheHolderReleases) {
  Daemon daemon;
  Client holder(daemon.port());
  Client client(daemon.port());
  Client observer(daemon.port());
  const Grant held = parse_grant(holder.request("l", "k", "0"));
  EXPECT_EQ(client.request("e", "k", ""), "queued");
  ASSERT_TRUE(client.send(frame("w", "k", "5")));
  EXPECT_EQ(client.read_line(200ms), std::nullopt);  // parked
  EXPECT_EQ(holder.request("r", "k", held.token), "ok");
  const std::optional<std::string> reply = client.read_line(2s);
  ASSERT_TRUE(reply);
  EXPECT_GT(parse_grant(*reply).fence, held.fence);
}

TEST(Protocol, WaitTimeoutLeavesTheQueueAndZeroTimeoutDoesTooAtOnce) {
  Daemon daemon;
  Client holder(daemon.port());
  Client client(daemon.port());
  Client observer(daemon.port());
  parse_grant(holder.request("l", "k", "0"));
  EXPECT_EQ(client.request("e", "k", ""), "queued");
  EXPECT_EQ(lock_waiters(observer, "k"), 1);
  EXPECT_EQ(client.request("w", "k", "0"), "timeout");
  EXPECT_EQ(lock_waiters(observer, "k"), 0);
  EXPECT_EQ(client.request("w", "k", "0"), "error_not_enqueued");
  EXPECT_EQ(client.request("e", "k", ""), "queued");
  const auto start = Clock::now();
  EXPECT_EQ(client.request("w", "k", "1"), "timeout");
  EXPECT_GE(elapsed_ms(start), 950);
  EXPECT_EQ(lock_waiters(observer, "k"), 0);
}

TEST(Protocol, EnqueueTwiceIsAlreadyEnqueued) {
  Daemon daemon;
  Client holder(daemon.port());
  Client client(daemon.port());
  parse_grant(holder.request("l", "k", "0"));
  EXPECT_EQ(client.request("e", "k", ""), "queued");
  EXPECT_EQ(client.request("e", "k", ""), "error_already_enqueued");
  Client fast(daemon.port());
  parse_grant(fast.request("e", "free", ""), "acquired");
  EXPECT_EQ(fast.request("e", "free", ""), "error_already_enqueued");
}

TEST(Protocol, WaitWithoutEnqueueIsNotEnqueued) {
  Daemon daemon;
  Client client(daemon.port());
  EXPECT_EQ(client.request("w", "k", "1"), "error_not_enqueued");
  EXPECT_EQ(client.request("sw", "k", "1"), "error_not_enqueued");
}

TEST(Protocol, ReleasingTheTokenOfAGrantedRecordMakesWaitNotEnqueued) {
  Daemon daemon;
  Client client(daemon.port());
  Client other(daemon.port());
  const Grant acquired = parse_grant(client.request("e", "k", ""), "acquired");
  EXPECT_EQ(other.request("r", "k", acquired.token), "ok");  // any connection may release
  EXPECT_EQ(client.request("w", "k", "1"), "error_not_enqueued");
}

// ---- semaphores ------------------------------------------------------------------------------

TEST(Protocol, SemaphoreAcquireRenewReleaseAndLimit) {
  Daemon daemon;
  Client a(daemon.port());
  Client b(daemon.port());
  Client c(daemon.port());
  const Grant first = parse_grant(a.request("sl", "s", "10 2"));
  const Grant second = parse_grant(b.request("sl", "s", "10 2 4"));
  EXPECT_EQ(first.lease_s, 33);
  EXPECT_EQ(second.lease_s, 4);
  EXPECT_GT(second.fence, first.fence);
  EXPECT_EQ(c.request("sl", "s", "0 2"), "timeout");
  EXPECT_EQ(c.request("sl", "s", "0 3"), "error_limit_mismatch");
  EXPECT_EQ(c.request("se", "s", "3"), "error_limit_mismatch");
  EXPECT_EQ(a.request("sn", "s", first.token + " 20"), "ok 20");
  EXPECT_EQ(a.request("sn", "s", first.token), "ok 33");
  EXPECT_EQ(c.request("sr", "s", first.token), "ok");
  EXPECT_EQ(c.request("sr", "s", first.token), "error");
  EXPECT_EQ(c.request("sn", "s", first.token), "error");
  EXPECT_TRUE(is_grant(c.request("sl", "s", "0 2")));
}

TEST(Protocol, SemaphoreTwoPhase) {
  Daemon daemon;
  Client a(daemon.port());
  Client b(daemon.port());
  Client observer(daemon.port());
  const Grant held = parse_grant(a.request("se", "s", "1 6"), "acquired");
  EXPECT_EQ(held.lease_s, 6);
  EXPECT_EQ(b.request("se", "s", "1 5"), "queued");
  EXPECT_EQ(b.request("se", "s", "1"), "error_already_enqueued");
  EXPECT_EQ(parse_grant(a.request("sw", "s", "1")).token, held.token);
  ASSERT_TRUE(b.send(frame("sw", "s", "5")));
  EXPECT_EQ(b.read_line(150ms), std::nullopt);
  EXPECT_EQ(a.request("sr", "s", held.token), "ok");
  const std::optional<std::string> reply = b.read_line(2s);
  ASSERT_TRUE(reply);
  const Grant waited = parse_grant(*reply);
  EXPECT_EQ(waited.lease_s, 5);
  EXPECT_GT(waited.fence, held.fence);
  EXPECT_EQ(b.request("sw", "s", "1"), "error_not_enqueued");
}

TEST(Protocol, LockAndSemaphoreNamespacesAreSeparate) {
  Daemon daemon;
  Client client(daemon.port());
  const Grant lock = parse_grant(client.request("l", "same", "0"));
  const Grant semaphore = parse_grant(client.request("sl", "same", "0 3"));
  EXPECT_EQ(client.request("r", "same", semaphore.token), "error");
  EXPECT_EQ(client.request("sr", "same", lock.token), "error");
  // A semaphore of limit 1 is listed with the locks (reference 1.7), but stays a semaphore.
  parse_grant(client.request("sl", "one", "0 1"));
  const Json root = stats(client);
  EXPECT_FALSE(entry(root, "locks", "same").is_null());
  EXPECT_FALSE(entry(root, "semaphores", "same").is_null());
  EXPECT_FALSE(entry(root, "locks", "one").is_null());
  EXPECT_EQ(client.request("r", "same", lock.token), "ok");
  EXPECT_EQ(client.request("sr", "same", semaphore.token), "ok");
}

// ---- limits
// --------------------------------------------------------------------------------------

TEST(Protocol, MaxWaitersRejectsTheWaiterPastTheCapForEveryAcquireKind) {
  Daemon daemon({"--max-waiters", "2"});
  Client holder(daemon.port());
  Client observer(daemon.port());
  parse_grant(holder.request("l", "k", "0"));
  Client w1(daemon.port());
  Client w2(daemon.port());
  ASSERT_TRUE(w1.send(frame("l", "k", "5")));
  EXPECT_EQ(w2.request("e", "k", ""), "queued");
  await_lock_waiters(observer, "k", 2);
  Client late(daemon.port());
  EXPECT_EQ(late.request("l", "k", "5"), "error_max_waiters");
  EXPECT_EQ(late.request("l", "k", "0"), "error_max_waiters");  // checked before timeout 0
  EXPECT_EQ(late.request("e", "k", ""), "error_max_waiters");
  // Per key: another key is unaffected.
  parse_grant(late.request("l", "other", "0"));
  // Semaphores too.
  parse_grant(holder.request("sl", "s", "0 1"));
  Client s1(daemon.port());
  Client s2(daemon.port());
  EXPECT_EQ(s1.request("se", "s", "1"), "queued");
  EXPECT_EQ(s2.request("se", "s", "1"), "queued");
  EXPECT_EQ(late.request("sl", "s", "5 1"), "error_max_waiters");
  EXPECT_EQ(late.request("se", "s", "1"), "error_max_waiters");
}

TEST(Protocol, MaxLocksIsExactAcrossShards) {
  Daemon daemon({"--threads", "4", "--max-locks", "10"});
  ASSERT_EQ(daemon.shards(), 4);
  Client client(daemon.port());
  std::set<std::size_t> shards_used;
  for (int i = 0; i < 10; ++i) {
    const std::string key = "key" + std::to_string(i);
    shards_used.insert(core::shard_of(core::Namespace::kLock, key, 4));
    EXPECT_TRUE(is_grant(client.request("l", key, "0"))) << key;
  }
  EXPECT_GE(shards_used.size(), 3U);  // the ten keys really are spread over the shards
  for (int i = 10; i < 30; ++i) {     // whichever shard the new key lands on
    EXPECT_EQ(client.request("l", "key" + std::to_string(i), "0"), "error_max_locks");
  }
  EXPECT_EQ(client.request("e", "new-e", ""), "error_max_locks");
  EXPECT_EQ(client.request("sl", "new-s", "0 2"), "error_max_locks");
  EXPECT_EQ(client.request("se", "new-se", "2"), "error_max_locks");
  // Existing keys are unaffected.
  EXPECT_EQ(client.request("l", "key3", "0"), "timeout");
  const Json root = stats(client);
  EXPECT_EQ(root["locks"].size(), 10U);
}

TEST(Protocol, MaxLocksCountsIdleKeysUntilCollected) {
  Daemon daemon({"--max-locks", "1", "--gc-interval", "1", "--gc-max-idle", "1"});
  Client client(daemon.port());
  const Grant grant = parse_grant(client.request("l", "a", "0"));
  EXPECT_EQ(client.request("r", "a", grant.token), "ok");
  EXPECT_EQ(client.request("l", "b", "0"), "error_max_locks");  // idle "a" still counts
  // Collected once idle for more than --gc-max-idle; then the budget is free again.
  EXPECT_TRUE(eventually([&] { return is_grant(client.request("l", "b", "0")); }, 3s));
}

// ---- auth (reference 1.8) ---------------------------------------------------------------------

TEST(Protocol, AuthWithTheRightSecretThenCommandsWork) {
  Daemon daemon({"--auth-token", "s3cret"});
  Client client(daemon.port());
  EXPECT_EQ(client.request("auth", "_", "s3cret"), "ok");
  EXPECT_EQ(client.request("ping", "_", ""), "ok");
  EXPECT_EQ(client.request("auth", "_", "s3cret"), "error");  // again: error, stays open
  EXPECT_EQ(client.request("ping", "_", ""), "ok");
}

TEST(Protocol, AuthWithAWrongSecretWaitsThenAnswersErrorAuthAndCloses) {
  Daemon daemon({"--auth-token", "s3cret"});
  Client client(daemon.port());
  const auto start = Clock::now();
  ASSERT_TRUE(client.send(frame("auth", "_", "wrong") + frame("ping", "_", "")));
  EXPECT_EQ(client.read_line(2s), "error_auth");
  EXPECT_GE(elapsed_ms(start), 90);
  EXPECT_TRUE(client.closed_by_peer(2s));
  EXPECT_EQ(client.pending(), "");  // the pipelined ping is discarded unanswered
}

TEST(Protocol, AnyOtherFirstRequestIsErrorAuth) {
  Daemon daemon({"--auth-token", "s3cret"});
  Client client(daemon.port());
  EXPECT_EQ(client.request("l", "k", "0"), "error_auth");
  EXPECT_TRUE(client.closed_by_peer(2s));
  Client malformed(daemon.port());
  EXPECT_EQ(malformed.request("nope", "k", "0"), "error_auth");
  EXPECT_TRUE(malformed.closed_by_peer(2s));
}

TEST(Protocol, AuthWithoutAConfiguredSecretIsErrorAndStaysOpen) {
  Daemon daemon;
  Client client(daemon.port());
  EXPECT_EQ(client.request("auth", "_", "anything"), "error");
  EXPECT_EQ(client.request("ping", "_", ""), "ok");
}

// ---- protocol errors (reference 1.3, 1.6): plain `error`, connection stays open -----------------

TEST(Protocol, ProtocolErrorsAnswerErrorAndKeepTheConnection) {
  Daemon daemon;
  Client client(daemon.port());
  const std::vector<std::vector<std::string>> requests = {
      {"x", "k", "1"},           // 3 unknown command
      {"l", "k", "soon"},        // 4 not an integer
      {"l", "", "1"},            // 5 empty key
      {"l", "a b", "1"},         // 5 space in key
      {"l", "k", "-1"},          // 6 negative timeout
      {"l", "k", "9223372037"},  // 6 timeout too large
      {"r", "k", ""},            // 7 empty token
      {"l", "k", "1 2 3"},       // 8 too many fields
      {"w", "k", ""},            // 8 empty wait argument
      {"e", "k", "1 2"},         // 8 `e` takes at most a lease
      {"l", "k", "1 0"},         // 9 lease 0
      {"sl", "k", "1 0"},        // 13 limit 0
      {"sl", "k", "1 1048577"},  // 13 limit too large
  };
  for (const auto& request : requests) {
    EXPECT_EQ(client.request(request[0], request[1], request[2]), "error")
        << request[0] << " / " << request[1] << " / " << request[2];
  }
  EXPECT_EQ(client.request("ping", "_", ""), "ok");
}

TEST(Protocol, CrlfLinesAreAccepted) {
  Daemon daemon;
  Client client(daemon.port());
  ASSERT_TRUE(client.send("l\r\nk\r\n0 5\r\n"));
  const Grant grant = parse_grant(client.read_line().value_or("<none>"));
  EXPECT_EQ(grant.lease_s, 5);
  ASSERT_TRUE(client.send("r\r\nk\r\n" + grant.token + "\r\n"));
  EXPECT_EQ(client.read_line(), "ok");
}

// ---- reference 1.9 examples
// -----------------------------------------------------------------------

TEST(Protocol, ReferenceExampleExchanges) {
  Daemon daemon;
  Client client(daemon.port());
  ASSERT_TRUE(client.send("l\nk\n10\n"));
  const Grant grant = parse_grant(client.read_line().value_or(""));
  EXPECT_EQ(grant.lease_s, 33);
  ASSERT_TRUE(client.send("n\nk\n" + grant.token + " 60\n"));
  EXPECT_EQ(client.read_line(), "ok 60");
  ASSERT_TRUE(client.send("r\nk\n" + grant.token + "\n"));
  EXPECT_EQ(client.read_line(), "ok");
  ASSERT_TRUE(client.send("e\nk\n\n"));
  const Grant acquired = parse_grant(client.read_line().value_or(""), "acquired");
  EXPECT_EQ(acquired.lease_s, 33);
  ASSERT_TRUE(client.send("w\nk\n10\n"));
  EXPECT_EQ(client.read_line(), "ok " + acquired.token + " 33");
  ASSERT_TRUE(client.send("r\nk\n" + acquired.token + "\n"));
  EXPECT_EQ(client.read_line(), "ok");
  // The key is now idle, so it is listed under idle_locks; the rest matches the example.
  ASSERT_TRUE(client.send("stats\n_\n\n"));
  const std::string reply = client.read_line().value_or("");
  EXPECT_TRUE(
      std::regex_match(reply, std::regex(R"(^ok \{"connections":1,"locks":\[\],"semaphores":\[\],)"
                                         R"("idle_locks":\[\{"key":"k","idle_s":[0-9.e+-]+\}\],)"
                                         R"("idle_semaphores":\[\](,"truncated":false)?\}$)")))
      << reply;
}

TEST(Protocol, StatsOfAFreshServerMatchesTheReferenceExample) {
  Daemon daemon;
  Client client(daemon.port());
  EXPECT_EQ(client.request("stats", "_", ""),
            R"(ok {"connections":1,"locks":[],"semaphores":[],"idle_locks":[],)"
            R"("idle_semaphores":[],"truncated":false})");
}

// ---- stats (reference 1.7)
// ------------------------------------------------------------------------

TEST(Protocol, StatsShapeFieldOrderAndConnectionCount) {
  Daemon daemon;
  Client holder(daemon.port());
  Client waiter(daemon.port());
  Client observer(daemon.port());
  const Grant lock = parse_grant(holder.request("l", "held", "0 20"));
  parse_grant(holder.request("sl", "sem", "0 3 20"));
  const Grant idle = parse_grant(holder.request("l", "idle", "0"));
  EXPECT_EQ(holder.request("r", "idle", idle.token), "ok");
  const Grant idle_semaphore = parse_grant(holder.request("sl", "idle-sem", "0 2"));
  EXPECT_EQ(holder.request("sr", "idle-sem", idle_semaphore.token), "ok");
  ASSERT_TRUE(waiter.send(frame("l", "held", "5")));
  await_lock_waiters(observer, "held", 1);

  const std::string reply = observer.request("stats", "_", "");
  ASSERT_EQ(reply.rfind("ok {\"connections\":", 0), 0U) << reply;
  // dflockd's fields in dflockd's order, then turnstile's addition.
  const std::vector<std::string> order = {
      "\"connections\":", "\"locks\":",           "\"semaphores\":",
      "\"idle_locks\":",  "\"idle_semaphores\":", "\"truncated\":"};
  std::size_t at = 0;
  for (const std::string& field : order) {
    const std::size_t found = reply.find(field, at);
    ASSERT_NE(found, std::string::npos) << field << " missing or out of order: " << reply;
    at = found;
  }
  const Json root = Json::parse(reply.substr(3));
  EXPECT_EQ(root["connections"], 3);
  const Json held = entry(root, "locks", "held");
  ASSERT_FALSE(held.is_null()) << reply;
  EXPECT_EQ(held.size(), 4U);
  EXPECT_TRUE(held["owner_conn_id"].is_number_integer());
  EXPECT_NE(held["owner_conn_id"], 0);
  EXPECT_GT(held["lease_expires_in_s"].get<double>(), 18.0);
  EXPECT_LE(held["lease_expires_in_s"].get<double>(), 20.0);
  EXPECT_EQ(held["waiters"], 1);
  const Json sem = entry(root, "semaphores", "sem");
  ASSERT_FALSE(sem.is_null()) << reply;
  EXPECT_EQ(sem, (Json{{"key", "sem"}, {"limit", 3}, {"holders", 1}, {"waiters", 0}}));
  const Json idle_lock = entry(root, "idle_locks", "idle");
  ASSERT_FALSE(idle_lock.is_null()) << reply;
  EXPECT_EQ(idle_lock.size(), 2U);
  EXPECT_GE(idle_lock["idle_s"].get<double>(), 0.0);
  EXPECT_FALSE(entry(root, "idle_semaphores", "idle-sem").is_null()) << reply;
  EXPECT_EQ(root["truncated"], false);

  // The connection count follows closes.
  waiter.close();
  EXPECT_TRUE(eventually([&] { return stats(observer)["connections"] == 2; }, 2s));
  EXPECT_EQ(holder.request("r", "held", lock.token), "ok");
}

TEST(Protocol, StatsKeysAreSortedAndTheSecondArgumentIsIgnored) {
  Daemon daemon({"--threads", "3"});
  Client client(daemon.port());
  for (const char* key : {"m", "b", "z", "a"}) parse_grant(client.request("l", key, "0"));
  const std::string underscore = client.request("stats", "_", "_");  // Python's framing
  ASSERT_EQ(underscore.rfind("ok ", 0), 0U);
  const Json root = Json::parse(underscore.substr(3));
  std::vector<std::string> keys;
  for (const Json& item : root["locks"]) keys.push_back(item["key"]);
  EXPECT_EQ(keys, (std::vector<std::string>{"a", "b", "m", "z"}));
}

// ---- FIFO and fences across connections ---------------------------------------------------------

TEST(Protocol, WaitersAreGrantedInArrivalOrderWithIncreasingFences) {
  Daemon daemon;
  Client holder(daemon.port());
  Client observer(daemon.port());
  Grant previous = parse_grant(holder.request("l", "fifo", "0"));
  std::vector<Client> waiters;
  for (int i = 0; i < 5; ++i) {
    waiters.emplace_back(daemon.port());
    ASSERT_TRUE(waiters.back().send(frame("l", "fifo", "10")));
    await_lock_waiters(observer, "fifo", i + 1);  // arrival order is now fixed
  }
  EXPECT_EQ(holder.request("r", "fifo", previous.token), "ok");
  for (std::size_t i = 0; i < waiters.size(); ++i) {
    const std::optional<std::string> reply = waiters[i].read_line(2s);
    ASSERT_TRUE(reply) << "waiter " << i << " was not granted";
    const Grant grant = parse_grant(*reply);
    EXPECT_GT(grant.fence, previous.fence) << "waiter " << i;
    for (std::size_t j = i + 1; j < waiters.size(); ++j) {
      EXPECT_EQ(waiters[j].read_line(0ms), std::nullopt) << "waiter " << j << " overtook " << i;
    }
    EXPECT_EQ(waiters[i].request("r", "fifo", grant.token), "ok");
    previous = grant;
  }
}

TEST(Protocol, ANewcomerNeverOvertakesAQueuedWaiter) {
  Daemon daemon;
  Client holder(daemon.port());
  Client queued(daemon.port());
  Client newcomer(daemon.port());
  const Grant held = parse_grant(holder.request("sl", "s", "0 2"));
  parse_grant(holder.request("sl", "s", "0 2"));
  EXPECT_EQ(queued.request("se", "s", "2"), "queued");
  EXPECT_EQ(holder.request("sr", "s", held.token), "ok");  // the slot goes to the queued one
  EXPECT_EQ(newcomer.request("sl", "s", "0 2"), "timeout");
  parse_grant(queued.request("sw", "s", "0"));
}

TEST(Protocol, FencesIncreaseAcrossFastPathEnqueueAndPromotion) {
  Daemon daemon;
  Client a(daemon.port());
  Client b(daemon.port());
  std::vector<unsigned long long> fences;
  const Grant first = parse_grant(a.request("l", "k", "0"));
  fences.push_back(first.fence);
  EXPECT_EQ(b.request("e", "k", ""), "queued");
  EXPECT_EQ(a.request("r", "k", first.token), "ok");
  const Grant promoted = parse_grant(b.request("w", "k", "1"));
  fences.push_back(promoted.fence);
  EXPECT_EQ(b.request("r", "k", promoted.token), "ok");
  const Grant enqueued = parse_grant(a.request("e", "k", ""), "acquired");
  fences.push_back(enqueued.fence);
  EXPECT_EQ(a.request("r", "k", enqueued.token), "ok");
  fences.push_back(parse_grant(b.request("l", "k", "0")).fence);
  for (std::size_t i = 1; i < fences.size(); ++i) EXPECT_GT(fences[i], fences[i - 1]) << i;
}

// ---- lease expiry
// ---------------------------------------------------------------------------------

TEST(Protocol, AnExpiredLeaseIsHandedToTheWaiterAtItsDeadline) {
  Daemon daemon;
  Client holder(daemon.port());
  Client waiter(daemon.port());
  const Grant held = parse_grant(holder.request("l", "k", "0 1"));
  const auto granted_at = Clock::now();
  ASSERT_TRUE(waiter.send(frame("l", "k", "5")));
  const std::optional<std::string> reply = waiter.read_line(3s);
  const long long waited_ms = elapsed_ms(granted_at);
  ASSERT_TRUE(reply);
  EXPECT_GT(parse_grant(*reply).fence, held.fence);
  EXPECT_GE(waited_ms, 900);
  EXPECT_LE(waited_ms, 1500) << "the lease should end at its deadline, not at a later sweep";
  // The expired lease is never revived.
  EXPECT_EQ(holder.request("n", "k", held.token), "error");
  EXPECT_EQ(holder.request("r", "k", held.token), "error");
}

TEST(Protocol, RenewKeepsTheLeaseAlive) {
  Daemon daemon;
  Client holder(daemon.port());
  Client other(daemon.port());
  const Grant held = parse_grant(holder.request("l", "k", "0 1"));
  for (int i = 0; i < 3; ++i) {
    std::this_thread::sleep_for(500ms);
    EXPECT_EQ(holder.request("n", "k", held.token + " 1"), "ok 1");
  }
  EXPECT_EQ(other.request("l", "k", "0"), "timeout");
  EXPECT_EQ(holder.request("r", "k", held.token), "ok");
}

// ---- disconnects (reference 2.9), with and without auto-release
// ----------------------------------

// Parameters: --auto-release-on-disconnect, and --threads (with 4, a connection's keys mostly
// live on other shards than the connection itself).
class Disconnect : public ::testing::TestWithParam<std::tuple<bool, int>> {
 protected:
  Disconnect()
      : daemon_({std::string("--auto-release-on-disconnect=") +
                     (std::get<0>(GetParam()) ? "true" : "false"),
                 "--threads", std::to_string(std::get<1>(GetParam()))}) {}
  bool auto_release() const { return std::get<0>(GetParam()); }
  Daemon daemon_;
};

TEST_P(Disconnect, WhileHolding) {
  Client holder(daemon_.port());
  Client waiter(daemon_.port());
  Client observer(daemon_.port());
  const Grant held = parse_grant(holder.request("l", "k", "0 30"));
  ASSERT_TRUE(waiter.send(frame("l", "k", "10")));
  await_lock_waiters(observer, "k", 1);
  holder.close();
  if (auto_release()) {
    const std::optional<std::string> reply = waiter.read_line(2s);
    ASSERT_TRUE(reply) << "the holder's lock was not released on disconnect";
    EXPECT_GT(parse_grant(*reply).fence, held.fence);
  } else {
    EXPECT_EQ(waiter.read_line(300ms), std::nullopt) << "released despite auto-release off";
    // The lock stays until released by token (from any connection) or its lease ends.
    EXPECT_EQ(observer.request("r", "k", held.token), "ok");
    const std::optional<std::string> reply = waiter.read_line(2s);
    ASSERT_TRUE(reply);
    EXPECT_TRUE(is_grant(*reply)) << *reply;
  }
}

TEST_P(Disconnect, WhileQueuedOnAcquire) {
  Client holder(daemon_.port());
  Client first(daemon_.port());
  Client second(daemon_.port());
  Client observer(daemon_.port());
  const Grant held = parse_grant(holder.request("l", "k", "0"));
  ASSERT_TRUE(first.send(frame("l", "k", "10")));
  await_lock_waiters(observer, "k", 1);
  ASSERT_TRUE(second.send(frame("l", "k", "10")));
  await_lock_waiters(observer, "k", 2);
  first.close();
  await_lock_waiters(observer, "k", 1);  // its waiter left the queue
  EXPECT_EQ(holder.request("r", "k", held.token), "ok");
  const std::optional<std::string> reply = second.read_line(2s);
  ASSERT_TRUE(reply);
  EXPECT_TRUE(is_grant(*reply)) << *reply;
}

TEST_P(Disconnect, WhileEnqueued) {
  Client holder(daemon_.port());
  Client enqueued(daemon_.port());
  Client observer(daemon_.port());
  const Grant held = parse_grant(holder.request("l", "k", "0"));
  EXPECT_EQ(enqueued.request("e", "k", ""), "queued");
  EXPECT_EQ(lock_waiters(observer, "k"), 1);
  enqueued.close();
  await_lock_waiters(observer, "k", 0);
  EXPECT_EQ(holder.request("r", "k", held.token), "ok");
  // Nobody was promoted: the key is free.
  EXPECT_TRUE(is_grant(observer.request("l", "k", "0")));
}

TEST_P(Disconnect, WhileParkedOnWait) {
  Client holder(daemon_.port());
  Client enqueued(daemon_.port());
  Client observer(daemon_.port());
  const Grant held = parse_grant(holder.request("l", "k", "0"));
  EXPECT_EQ(enqueued.request("e", "k", ""), "queued");
  ASSERT_TRUE(enqueued.send(frame("w", "k", "10")));
  EXPECT_EQ(enqueued.read_line(100ms), std::nullopt);
  enqueued.close();
  await_lock_waiters(observer, "k", 0);
  EXPECT_EQ(holder.request("r", "k", held.token), "ok");
  EXPECT_TRUE(is_grant(observer.request("l", "k", "0")));
}

TEST_P(Disconnect, AfterATwoPhaseGrantNotYetWaitedFor) {
  Client holder(daemon_.port());
  Client enqueued(daemon_.port());
  Client observer(daemon_.port());
  const Grant held = parse_grant(holder.request("l", "k", "0"));
  EXPECT_EQ(enqueued.request("e", "k", "30"), "queued");
  EXPECT_EQ(holder.request("r", "k", held.token), "ok");  // promoted: the record is granted
  const Json before = entry(stats(observer), "locks", "k");
  ASSERT_FALSE(before.is_null());
  EXPECT_NE(before["owner_conn_id"], 0);
  enqueued.close();
  if (auto_release()) {
    EXPECT_TRUE(eventually([&] { return is_grant(observer.request("l", "k", "0")); }, 2s));
  } else {
    std::this_thread::sleep_for(200ms);
    EXPECT_EQ(observer.request("l", "k", "0"), "timeout");  // held until its lease ends
  }
}

TEST_P(Disconnect, SemaphoreSlotsFollowTheSameRule) {
  Client holder(daemon_.port());
  Client waiter(daemon_.port());
  Client observer(daemon_.port());
  parse_grant(holder.request("sl", "s", "0 2 30"));
  parse_grant(holder.request("sl", "s", "0 2 30"));
  ASSERT_TRUE(waiter.send(frame("sl", "s", "10 2")));
  EXPECT_TRUE(eventually([&] { return semaphore_waiters(observer, "s") == 1; }, 2s));
  holder.close();
  const std::optional<std::string> reply = waiter.read_line(auto_release() ? 2s : 300ms);
  if (auto_release()) {
    ASSERT_TRUE(reply);
    EXPECT_TRUE(is_grant(*reply)) << *reply;
  } else {
    EXPECT_EQ(reply, std::nullopt);
  }
}

INSTANTIATE_TEST_SUITE_P(AutoRelease, Disconnect,
                         ::testing::Combine(::testing::Bool(), ::testing::Values(1, 4)),
                         [](const ::testing::TestParamInfo<std::tuple<bool, int>>& param_info) {
                           return std::string(std::get<0>(param_info.param) ? "On" : "Off") + "_" +
                                  std::to_string(std::get<1>(param_info.param)) + "threads";
                         });

// ---- two-phase across connections
// -----------------------------------------------------------------

TEST(Protocol, WaitFromAnotherConnectionIsNotEnqueued) {
  Daemon daemon;
  Client owner(daemon.port());
  Client other(daemon.port());
  Client holder(daemon.port());
  const Grant held = parse_grant(holder.request("l", "k", "0"));
  EXPECT_EQ(owner.request("e", "k", ""), "queued");
  EXPECT_EQ(other.request("w", "k", "1"), "error_not_enqueued");
  // The other connection may enqueue on its own; the records are per connection.
  EXPECT_EQ(other.request("e", "k", ""), "queued");
  EXPECT_EQ(holder.request("r", "k", held.token), "ok");
  parse_grant(owner.request("w", "k", "1"));
  EXPECT_EQ(other.request("w", "k", "0"), "timeout");  // still behind owner
  Client fast(daemon.port());
  parse_grant(fast.request("e", "free", ""), "acquired");
  EXPECT_EQ(other.request("w", "free", "1"), "error_not_enqueued");
}

// ---- sharding
// -------------------------------------------------------------------------------------

TEST(Protocol, ManyKeysOverFourShardsAreAcquiredReleasedAndListed) {
  Daemon daemon({"--threads", "4"});
  ASSERT_EQ(daemon.shards(), 4);
  Client client(daemon.port());
  std::vector<std::pair<std::string, std::string>> held;
  std::set<std::size_t> shards_used;
  for (int i = 0; i < 64; ++i) {
    const std::string key = "many-" + std::to_string(i);
    shards_used.insert(core::shard_of(core::Namespace::kLock, key, 4));
    held.emplace_back(key, parse_grant(client.request("l", key, "0")).token);
  }
  EXPECT_EQ(shards_used.size(), 4U);
  Json root = stats(client);
  EXPECT_EQ(root["locks"].size(), 64U);
  for (const auto& [key, token] : held) {
    EXPECT_FALSE(entry(root, "locks", key).is_null()) << key;
  }
  for (const auto& [key, token] : held) EXPECT_EQ(client.request("r", key, token), "ok") << key;
  root = stats(client);
  EXPECT_EQ(root["locks"].size(), 0U);
  EXPECT_EQ(root["idle_locks"].size(), 64U);
}

TEST(Protocol, ClosingAConnectionCleansUpOnEveryShardItTouched) {
  Daemon daemon({"--threads", "4"});
  Client leaver(daemon.port());
  Client other(daemon.port());
  Client observer(daemon.port());
  std::vector<std::string> held_keys;
  std::vector<std::string> waited_keys;
  for (std::size_t shard = 0; shard < 4; ++shard) {
    held_keys.push_back(lock_key_on_shard(shard, 4, "held-"));
    waited_keys.push_back(lock_key_on_shard(shard, 4, "waited-"));
    parse_grant(leaver.request("l", held_keys.back(), "0 30"));
    parse_grant(other.request("l", waited_keys.back(), "0 30"));
    EXPECT_EQ(leaver.request("e", waited_keys.back(), ""), "queued");
  }
  ASSERT_TRUE(leaver.send(frame("l", held_keys[0], "10")));  // parked behind itself
  leaver.close();
  for (const std::string& key : waited_keys) await_lock_waiters(observer, key, 0);
  for (const std::string& key : held_keys) {
    EXPECT_TRUE(eventually([&] { return is_grant(observer.request("l", key, "0")); }, 2s))
        << key << " still held after its holder disconnected";
  }
}

// ---- shards under load --------------------------------------------------------------------------

TEST(Protocol, EveryShardAnswersGrantsTimeoutsAndExpiries) {
  Daemon daemon({"--threads", "4"});
  std::vector<Client> holders;
  std::vector<Client> waiters;
  std::vector<Client> losers;
  std::vector<std::string> keys;
  for (std::size_t shard = 0; shard < 4; ++shard) {
    keys.push_back(lock_key_on_shard(shard, 4, "shard-"));
    holders.emplace_back(daemon.port());
    waiters.emplace_back(daemon.port());
    losers.emplace_back(daemon.port());
  }
  const auto start = Clock::now();
  for (std::size_t i = 0; i < 4; ++i) {
    parse_grant(holders[i].request("l", keys[i], "0 1"));      // expires after 1 s
    ASSERT_TRUE(losers[i].send(frame("sl", keys[i], "0 1")));  // another namespace: granted
    ASSERT_TRUE(waiters[i].send(frame("l", keys[i], "5")));
  }
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(is_grant(losers[i].read_line(2s).value_or(""))) << keys[i];
    EXPECT_EQ(losers[i].request("l", keys[i], "0"), "timeout") << keys[i];
  }
  for (std::size_t i = 0; i < 4; ++i) {
    const std::optional<std::string> reply = waiters[i].read_line(3s);
    ASSERT_TRUE(reply) << keys[i];
    EXPECT_TRUE(is_grant(*reply)) << keys[i] << ": " << *reply;
  }
  EXPECT_LT(elapsed_ms(start), 2000);
}

TEST(Protocol, MaxLocksIsExactUnderConcurrentCreation) {
  Daemon daemon({"--threads", "4", "--max-locks", "10"});
  constexpr int kClients = 8;
  constexpr int kKeysEach = 6;
  std::vector<int> granted(kClients, 0);
  std::vector<int> refused(kClients, 0);
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      std::optional<Client> connected;
      try {
        connected.emplace(daemon.port());
      } catch (const std::exception&) {
        return;  // counted as neither granted nor refused: the totals then fail
      }
      Client& client = *connected;
      std::string bytes;
      for (int k = 0; k < kKeysEach; ++k) {
        bytes += frame("l", "c" + std::to_string(c) + "-" + std::to_string(k), "0");
      }
      if (!client.send(bytes)) return;
      for (int k = 0; k < kKeysEach; ++k) {
        const std::string reply = client.read_line(5s).value_or("<none>");
        if (is_grant(reply)) {
          ++granted[static_cast<std::size_t>(c)];
        } else if (reply == "error_max_locks") {
          ++refused[static_cast<std::size_t>(c)];
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  int granted_total = 0;
  int refused_total = 0;
  for (int c = 0; c < kClients; ++c) {
    granted_total += granted[static_cast<std::size_t>(c)];
    refused_total += refused[static_cast<std::size_t>(c)];
  }
  EXPECT_EQ(granted_total, 10);
  EXPECT_EQ(refused_total, kClients * kKeysEach - 10);
}

TEST(Protocol, CollectedKeysGiveTheirBudgetBackToEveryShard) {
  Daemon daemon({"--threads", "4", "--max-locks", "8", "--gc-max-idle", "0"});
  Client client(daemon.port());
  // Fill the budget with keys spread over the shards, release them all, then create eight new
  // keys that all live on shard 0: the other shards must collect their idle keys by themselves.
  for (int i = 0; i < 8; ++i) {
    const std::string key = lock_key_on_shard(static_cast<std::size_t>(i % 4), 4, "first-", i / 4);
    const Grant grant = parse_grant(client.request("l", key, "0"));
    EXPECT_EQ(client.request("r", key, grant.token), "ok");
  }
  std::this_thread::sleep_for(100ms);
  for (int i = 0; i < 8; ++i) {
    const std::string key = lock_key_on_shard(0, 4, "second-", i);
    EXPECT_TRUE(is_grant(client.request("l", key, "0"))) << key;
  }
}

TEST(Protocol, ConcurrentConnectionsRespectMaxConnectionsExactly) {
  Daemon daemon({"--max-connections", "5", "--threads", "4"});
  std::vector<std::unique_ptr<Client>> clients(20);
  std::vector<std::thread> threads;
  std::vector<int> answered(20, 0);
  for (std::size_t i = 0; i < clients.size(); ++i) {
    threads.emplace_back([&, i] {
      try {
        clients[i] = std::make_unique<Client>(daemon.port());
        answered[i] = clients[i]->request("ping", "_", "", 2s) == "ok" ? 1 : 0;
      } catch (const std::exception&) {
        answered[i] = 0;  // refused at connect: also not served
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  int total = 0;
  for (int value : answered) total += value;
  EXPECT_EQ(total, 5);
}

// ---- ordering within one connection
// ---------------------------------------------------------------

TEST(Protocol, ABlockingRequestHoldsBackTheRequestsBehindIt) {
  Daemon daemon;
  Client holder(daemon.port());
  Client client(daemon.port());
  const Grant held = parse_grant(holder.request("l", "k", "0"));
  ASSERT_TRUE(client.send(frame("l", "k", "5") + frame("ping", "_", "") + frame("stats", "_", "")));
  EXPECT_EQ(client.read_line(300ms), std::nullopt);  // the ping waits behind the parked `l`
  EXPECT_EQ(holder.request("r", "k", held.token), "ok");
  EXPECT_TRUE(is_grant(client.read_line(2s).value_or("")));
  EXPECT_EQ(client.read_line(), "ok");
  EXPECT_EQ(client.read_line().value_or("").rfind("ok {", 0), 0U);
}

TEST(Protocol, AuthPipelinedWithTheFirstRequests) {
  Daemon daemon({"--auth-token", "s3cret", "--write-timeout", "0"});
  Client client(daemon.port());
  ASSERT_TRUE(
      client.send(frame("auth", "_", "s3cret") + frame("l", "k", "0") + frame("ping", "_", "")));
  EXPECT_EQ(client.read_line(), "ok");
  EXPECT_TRUE(is_grant(client.read_line().value_or("")));
  EXPECT_EQ(client.read_line(), "ok");
}

// ---- half-close (printf ... | nc -N)
// ---------------------------------------------------------------

TEST(Protocol, HalfCloseAfterRequestsStillGetsEveryReply) {
  Daemon daemon;
  Client client(daemon.port());
  ASSERT_TRUE(client.send(frame("ping", "_", "") + frame("l", "k", "0 5") +
                          frame("r", "k", "bogus") + frame("stats", "_", "")));
  client.shutdown_write();
  ASSERT_TRUE(client.closed_by_peer(3s));
  const std::string all = client.pending();
  std::vector<std::string> lines;
  for (std::size_t start = 0, end; (end = all.find('\n', start)) != std::string::npos;
       start = end + 1) {
    lines.push_back(all.substr(start, end - start));
  }
  ASSERT_EQ(lines.size(), 4U) << all;
  EXPECT_EQ(lines[0], "ok");
  EXPECT_EQ(parse_grant(lines[1]).lease_s, 5);
  EXPECT_EQ(lines[2], "error");
  EXPECT_EQ(lines[3].rfind("ok {", 0), 0U);
  EXPECT_EQ(all.back(), '\n');
}

TEST(Protocol, HalfCloseCancelsABlockingRequestThatWouldWait) {
  Daemon daemon;
  Client holder(daemon.port());
  Client observer(daemon.port());
  parse_grant(holder.request("l", "k", "0"));
  Client client(daemon.port());
  ASSERT_TRUE(client.send(frame("ping", "_", "") + frame("l", "k", "10") + frame("ping", "_", "")));
  client.shutdown_write();
  const auto start = Clock::now();
  ASSERT_TRUE(client.closed_by_peer(3s));
  EXPECT_LT(elapsed_ms(start), 2000);  // not after the 10 s timeout
  EXPECT_EQ(client.pending(), "ok\n");
  EXPECT_EQ(lock_waiters(observer, "k"), 0);
}

// ---- connection handling: caps, timeouts, framing limits, TLS
// ------------------------------------

TEST(Protocol, ConnectionsOverMaxConnectionsAreClosedWithoutAReply) {
  Daemon daemon({"--max-connections", "2"});
  Client first(daemon.port());
  Client second(daemon.port());
  EXPECT_EQ(first.request("ping", "_", ""), "ok");
  EXPECT_EQ(second.request("ping", "_", ""), "ok");
  Client third(daemon.port());
  third.send(frame("ping", "_", ""));
  EXPECT_TRUE(third.closed_by_peer(2s));
  EXPECT_EQ(third.pending(), "");
  // A slot frees when a connection closes.
  first.close();
  EXPECT_TRUE(eventually(
      [&] {
        Client again(daemon.port());
        return again.request("ping", "_", "", 1s) == "ok";
      },
      3s));
}

TEST(Protocol, MaxConnectionsPerIp) {
  Daemon daemon({"--max-connections-per-ip", "1"});
  Client first(daemon.port());
  EXPECT_EQ(first.request("ping", "_", ""), "ok");
  Client second(daemon.port());
  second.send(frame("ping", "_", ""));
  EXPECT_TRUE(second.closed_by_peer(2s));
  EXPECT_EQ(second.pending(), "");
}

TEST(Protocol, AnIdleHolderIsNotDroppedByTheReadTimeout) {
  // Deliberate difference from dflockd: --read-timeout runs only once a request has begun.
  Daemon daemon({"--read-timeout", "1"});
  Client holder(daemon.port());
  Client other(daemon.port());
  const Grant held = parse_grant(holder.request("l", "k", "0"));
  // A request begun after the grant and never finished is ended by the read timeout: the holder
  // has been quiet longer than that by then.
  Client partial(daemon.port());
  ASSERT_TRUE(partial.send("l\nk"));
  EXPECT_EQ(partial.read_line(10s), "error");
  EXPECT_TRUE(partial.closed_by_peer(5s));
  EXPECT_EQ(other.request("l", "k", "0"), "timeout");
  EXPECT_EQ(holder.request("r", "k", held.token), "ok");
}

TEST(Protocol, ReadTimeoutAnswersEarlierRequestsThenErrorAndCloses) {
  Daemon daemon({"--read-timeout", "1"});
  Client client(daemon.port());
  const auto start = Clock::now();
  ASSERT_TRUE(client.send(frame("ping", "_", "") + "l\nk\n"));  // the second never completes
  EXPECT_EQ(client.read_line(1s), "ok");
  EXPECT_EQ(client.read_line(3s), "error");
  EXPECT_GE(elapsed_ms(start), 900);
  EXPECT_TRUE(client.closed_by_peer(2s));
}

TEST(Protocol, IdleTimeoutClosesSilentlyAndReleasesTheLocks) {
  Daemon daemon({"--idle-timeout", "1"});
  Client holder(daemon.port());
  parse_grant(holder.request("l", "k", "0"));
  const auto start = Clock::now();
  EXPECT_TRUE(holder.closed_by_peer(3s));
  EXPECT_GE(elapsed_ms(start), 900);
  EXPECT_EQ(holder.pending(), "");
  Client observer(daemon.port());  // connected now, so not idle itself
  EXPECT_TRUE(eventually([&] { return is_grant(observer.request("l", "k", "0")); }, 2s));
}

TEST(Protocol, ALineOf256BytesIsAcceptedAndALongerOneClosesWithError) {
  Daemon daemon;
  Client client(daemon.port());
  const std::string key256(256, 'k');
  EXPECT_TRUE(is_grant(client.request("l", key256, "0")));
  ASSERT_TRUE(client.send(frame("ping", "_", "") + frame("l", std::string(257, 'k'), "0") +
                          frame("ping", "_", "")));
  EXPECT_EQ(client.read_line(), "ok");
  EXPECT_EQ(client.read_line(), "error");
  EXPECT_TRUE(client.closed_by_peer(2s));
  EXPECT_EQ(client.pending(), "");
}

TEST(Protocol, ManyPipelinedRequestsAreAnsweredInOrder) {
  Daemon daemon({"--threads", "4"});
  Client client(daemon.port());
  std::string bytes;
  for (int i = 0; i < 300; ++i) {
    bytes += frame("l", "p" + std::to_string(i), "0 30");
    bytes += frame("ping", "_", "");
  }
  ASSERT_TRUE(client.send(bytes));
  for (int i = 0; i < 300; ++i) {
    const std::optional<std::string> grant = client.read_line();
    ASSERT_TRUE(grant) << i;
    EXPECT_TRUE(is_grant(*grant)) << i << ": " << *grant;
    EXPECT_EQ(client.read_line(), "ok") << i;
  }
  EXPECT_EQ(stats(client)["locks"].size(), 300U);
}

TEST(Protocol, AuthTokenFromTheEnvironmentAndFromAFile) {
  DaemonOptions options;
  options.env = {"DFLOCKD_AUTH_TOKEN=from-env"};
  Daemon from_env(options);
  Client client(from_env.port());
  EXPECT_EQ(client.request("auth", "_", "from-env"), "ok");

  TempDir directory;
  {
    FILE* file = std::fopen(directory.file("token").c_str(), "w");
    ASSERT_NE(file, nullptr);
    std::fputs("  from-file \n", file);  // trimmed
    std::fclose(file);
  }
  Daemon from_file({"--auth-token-file", directory.file("token")});
  Client other(from_file.port());
  EXPECT_EQ(other.request("auth", "_", "from-file"), "ok");
}

TEST(Protocol, TlsListenerServesTheSameProtocol) {
  TempDir directory;
  const CertificateFiles files = write_self_signed_certificate(directory.path());
  Daemon daemon({"--tls-cert", files.certificate_path, "--tls-key", files.key_path});
  EXPECT_TRUE(daemon.tls());
  ClientOptions options;
  options.tls = true;
  options.tls_server_name = "localhost";
  Client client(daemon.port(), options);
  const Grant grant = parse_grant(client.request("l", "k", "0 5"));
  EXPECT_EQ(grant.lease_s, 5);
  EXPECT_EQ(client.request("r", "k", grant.token), "ok");
  // A plain-text client does not get a protocol reply from a TLS listener.
  Client plain(daemon.port());
  plain.send(frame("ping", "_", ""));
  EXPECT_NE(plain.read_line(1s), std::optional<std::string>("ok"));
}

TEST(Protocol, FencesKeepIncreasingAcrossARestart) {
  unsigned long long before = 0;
  {
    Daemon daemon;
    Client client(daemon.port());
    before = parse_grant(client.request("l", "k", "0")).fence;
  }
  Daemon restarted;
  Client client(restarted.port());
  const Grant after = parse_grant(client.request("l", "k", "0"));  // the old holder is gone
  EXPECT_GT(after.fence, before);
}

TEST(Protocol, HalfCloseWhileParkedCancelsTheWaiter) {
  Daemon daemon({"--threads", "4"});
  Client holder(daemon.port());
  Client observer(daemon.port());
  const Grant held = parse_grant(holder.request("l", "k", "0"));
  Client client(daemon.port());
  ASSERT_TRUE(client.send(frame("l", "k", "10")));
  await_lock_waiters(observer, "k", 1);
  client.shutdown_write();
  EXPECT_TRUE(client.closed_by_peer(2s));
  EXPECT_EQ(client.pending(), "");
  await_lock_waiters(observer, "k", 0);
  EXPECT_EQ(holder.request("r", "k", held.token), "ok");
  EXPECT_TRUE(is_grant(observer.request("l", "k", "0")));  // nobody was promoted
}

// ---- shutdown (error_draining) ------------------------------------------------------------------

TEST(Protocol, DrainAnswersIdleConnectionsErrorDrainingAndExitsCleanly) {
  Daemon daemon;
  Client idle(daemon.port());
  EXPECT_EQ(idle.request("ping", "_", ""), "ok");
  daemon.signal(SIGTERM);
  EXPECT_EQ(idle.read_line(3s), "error_draining");
  EXPECT_TRUE(idle.closed_by_peer(3s));
  const std::optional<int> status = daemon.wait_exit(5s);
  ASSERT_TRUE(status);
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *status;
}

TEST(Protocol, DrainLetsAParkedRequestFinishFirst) {
  Daemon daemon;
  Client holder(daemon.port());
  Client waiter(daemon.port());
  Client observer(daemon.port());
  parse_grant(holder.request("l", "k", "0 30"));
  ASSERT_TRUE(waiter.send(frame("l", "k", "1")));
  await_lock_waiters(observer, "k", 1);
  daemon.signal(SIGTERM);
  // The in-flight acquire is answered (a grant when the holder's drain released the lock, or
  // its timeout), and only then error_draining.
  const std::optional<std::string> first = waiter.read_line(3s);
  ASSERT_TRUE(first);
  EXPECT_TRUE(is_grant(*first) || *first == "timeout") << *first;
  EXPECT_EQ(waiter.read_line(3s), "error_draining");
  EXPECT_TRUE(waiter.closed_by_peer(3s));
  EXPECT_EQ(holder.read_line(3s), "error_draining");
  const std::optional<int> status = daemon.wait_exit(5s);
  ASSERT_TRUE(status);
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *status;
}

TEST(Protocol, ShutdownTimeoutBoundsAParkedRequest) {
  Daemon daemon({"--shutdown-timeout", "1"});
  Client holder(daemon.port());
  Client waiter(daemon.port());
  Client observer(daemon.port());
  parse_grant(holder.request("l", "k", "0 60"));
  // Parked behind a holder on a connection that is itself parked, so nothing frees the lock.
  ASSERT_TRUE(holder.send(frame("l", "other", "0") + frame("l", "k", "60")));
  ASSERT_TRUE(waiter.send(frame("l", "k", "60")));
  await_lock_waiters(observer, "k", 2);
  const auto start = Clock::now();
  daemon.signal(SIGINT);
  const std::optional<int> status = daemon.wait_exit(5s);
  ASSERT_TRUE(status) << daemon.log_text();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *status;
  EXPECT_GE(elapsed_ms(start), 900);
  EXPECT_LT(elapsed_ms(start), 3000);
  EXPECT_TRUE(waiter.closed_by_peer(1s));
}

TEST(Protocol, ASecondSignalStopsAtOnce) {
  Daemon daemon({"--shutdown-timeout", "0"});
  Client holder(daemon.port());
  Client waiter(daemon.port());
  Client observer(daemon.port());
  parse_grant(holder.request("l", "k", "0 60"));
  ASSERT_TRUE(holder.send(frame("l", "k", "60")));  // parked behind itself: never finishes
  await_lock_waiters(observer, "k", 1);
  daemon.signal(SIGTERM);
  EXPECT_TRUE(daemon.wait_for_log("draining", 2s));
  EXPECT_EQ(daemon.wait_exit(300ms), std::nullopt);  // shutdown timeout 0: waits forever
  daemon.signal(SIGTERM);
  const std::optional<int> status = daemon.wait_exit(3s);
  ASSERT_TRUE(status);
  EXPECT_TRUE(WIFEXITED(*status)) << *status;
}

TEST(Protocol, APortInUseFailsToStartWithExitCodeOne) {
  Daemon first;
  DaemonOptions options;
  options.args = {"--port", std::to_string(first.port())};
  options.wait_until_listening = false;
  Daemon second(options);
  const std::optional<int> status = second.wait_exit(5s);
  ASSERT_TRUE(status);
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 1) << *status;
  EXPECT_TRUE(second.wait_for_log("cannot listen", 1s)) << second.log_text();
  Client client(first.port());
  EXPECT_EQ(client.request("ping", "_", ""), "ok");
}

TEST(Protocol, ListensOnIpv6Loopback) {
  DaemonOptions options;
  options.host = "::1";
  std::unique_ptr<Daemon> daemon;
  try {
    daemon = std::make_unique<Daemon>(options);
  } catch (const std::exception& error) {
    GTEST_SKIP() << "no IPv6 loopback here: " << error.what();
  }
  EXPECT_EQ(daemon->listen_host(), "::1");
  Client client("::1", daemon->port());
  EXPECT_EQ(client.request("ping", "_", ""), "ok");
}

}  // namespace
// ---- --pin-threads ---------------------------------------------------------------------------

// The single CPU each thread of `pid` is allowed on, from /proc (threads allowed on more are
// left out).
std::multiset<int> single_cpu_threads(pid_t pid) {
  std::multiset<int> cpus;
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  for (const auto& task : std::filesystem::directory_iterator(dir)) {
    std::ifstream status(task.path() / "status");
    std::string line;
    while (std::getline(status, line)) {
      std::smatch match;
      if (std::regex_match(line, match, std::regex(R"(Cpus_allowed_list:\s*([0-9]+))"))) {
        cpus.insert(std::stoi(match[1]));
      }
    }
  }
  return cpus;
}

TEST(PinThreads, EachShardRunsOnItsOwnCpuAndServes) {
  Daemon daemon({"--threads", "2", "--pin-threads"});
  const std::regex pinned(R"(shard ([01]) runs on CPU ([0-9]+) only)");
  std::set<int> logged;
  for (const char* shard : {"shard 0 runs on CPU", "shard 1 runs on CPU"}) {
    const std::optional<std::string> line = daemon.wait_for_log(shard, 5s);
    ASSERT_TRUE(line.has_value()) << daemon.log_text();
    std::smatch match;
    ASSERT_TRUE(std::regex_search(*line, match, pinned)) << *line;
    logged.insert(std::stoi(match[2]));
  }
  // Two CPUs or more here (CI has two): the shards get different ones.
  if (std::thread::hardware_concurrency() >= 2) {
    EXPECT_EQ(logged.size(), 2U);
  }
  const std::multiset<int> on_one_cpu = single_cpu_threads(daemon.pid());
  for (int cpu : logged) EXPECT_EQ(on_one_cpu.count(cpu), 1U) << "CPU " << cpu;
  Client client(daemon.port());
  EXPECT_EQ(client.request("ping", "_", ""), "ok");
  const Grant grant = parse_grant(client.request("l", "pinned", "10"));
  EXPECT_EQ(client.request("r", "pinned", grant.token), "ok");
}

TEST(PinThreads, OffByDefault) {
  Daemon daemon({"--threads", "2"});
  Client client(daemon.port());
  EXPECT_EQ(client.request("ping", "_", ""), "ok");
  if (std::thread::hardware_concurrency() >= 2) {
    EXPECT_TRUE(single_cpu_threads(daemon.pid()).empty());
  }
  EXPECT_FALSE(daemon.wait_for_log("runs on CPU", 0ms).has_value());
}

}  // namespace turnstile::integration
