// Unit tests for core/engine.h: one named test per rule of docs/semantics.md and per single-node
// engine item of dflockd's edge cases (reference section 7, docs/edge-cases.md; named EdgeNN_...).
//
// Every test drives one Engine through a fixture: `at(seconds)` sets the instant of the next
// inputs, `lock(session, key, timeout, lease)` and friends send one request and return its reply,
// and replies to parked requests collect in a list that `delivered_to(session)` and
// `take_deliveries()` read. Instants are seconds (or nanoseconds) from an origin at 0.
#include "core/engine.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "testing/requests.h"

namespace turnstile::core {

// Readable failure messages: GoogleTest finds these by argument-dependent lookup.
void PrintTo(const SessionId& session, std::ostream* os) { *os << "session " << session.value; }
void PrintTo(const Instant& instant, std::ostream* os) { *os << instant.ns() << "ns"; }
void PrintTo(const Fence& fence, std::ostream* os) { *os << "fence " << fence.value; }
void PrintTo(const Token& token, std::ostream* os) { *os << token.to_string(); }
void PrintTo(const Reply& reply, std::ostream* os) {
  *os << status_name(reply.status);
  if (reply.token) *os << ' ' << reply.token->to_string();
  if (reply.seconds >= 0) *os << ' ' << reply.seconds;
  if (!reply.payload.empty()) *os << ' ' << reply.payload;
}
void PrintTo(const Delivery& delivery, std::ostream* os) {
  *os << "to " << delivery.session.value << ": ";
  PrintTo(delivery.reply, os);
}
void PrintTo(const LockStats& entry, std::ostream* os) {
  *os << "{" << entry.key << " owner=" << entry.owner.value
      << " lease_expires_in_s=" << entry.lease_expires_in_s << " waiters=" << entry.waiters << "}";
}
void PrintTo(const SemaphoreStats& entry, std::ostream* os) {
  *os << "{" << entry.key << " limit=" << entry.limit << " holders=" << entry.holders
      << " waiters=" << entry.waiters << "}";
}
void PrintTo(const IdleStats& entry, std::ostream* os) {
  *os << "{" << entry.key << " idle_s=" << entry.idle_s << "}";
}

namespace {

constexpr std::uint64_t kU64Max = std::numeric_limits<std::uint64_t>::max();

constexpr Instant secs(std::int64_t seconds) {
  return Instant::from_ns(0) + Duration::seconds(seconds);
}
constexpr Instant millis(std::int64_t milliseconds) {
  return Instant::from_ns(0) + Duration::milliseconds(milliseconds);
}
constexpr Duration kNs = Duration::nanoseconds(1);

constexpr SessionId kS1{1};
constexpr SessionId kS2{2};
constexpr SessionId kS3{3};
constexpr SessionId kS4{4};
constexpr SessionId kS5{5};

constexpr Namespace kL = Namespace::kLock;
constexpr Namespace kSem = Namespace::kSemaphore;

std::string describe(const Reply& reply) {
  std::ostringstream text;
  PrintTo(reply, &text);
  return text.str();
}

std::string describe(const std::vector<Delivery>& deliveries) {
  std::ostringstream text;
  text << "[";
  for (const Delivery& delivery : deliveries) {
    text << " ";
    PrintTo(delivery, &text);
    text << ";";
  }
  text << " ]";
  return text.str();
}

// A reply with a status and nothing else (timeout, error, queued, ok of a release...).
Reply only(Status status) { return Reply::of(status); }

::testing::AssertionResult IsGrant(const Reply& reply, Status status, std::int64_t lease_s) {
  if (reply.status == status && reply.token.has_value() && reply.seconds == lease_s &&
      reply.payload.empty()) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "got `" << describe(reply) << "`, want `"
                                       << status_name(status) << " <token> " << lease_s << "`";
}
// `ok <token> <lease>`
::testing::AssertionResult IsOk(const Reply& reply, std::int64_t lease_s) {
  return IsGrant(reply, Status::kOk, lease_s);
}
// `acquired <token> <lease>`
::testing::AssertionResult IsAcquired(const Reply& reply, std::int64_t lease_s) {
  return IsGrant(reply, Status::kAcquired, lease_s);
}

Token token_of(const Reply& reply) {
  EXPECT_TRUE(reply.token.has_value()) << "no token in `" << describe(reply) << "`";
  return reply.token.value_or(Token{});
}

Token with_salt(Token token, std::uint64_t salt) {
  token.salt = salt;
  return token;
}

class EngineTest : public ::testing::Test {
 protected:
  EngineTest() { configure(EngineConfig{}); }

  // Replaces the engine with a fresh one (seeded salt source, no deliveries pending).
  void configure(const EngineConfig& config, std::uint64_t seed = 7) {
    engine_.reset();
    salt_ = std::make_unique<SplitMix64>(seed);
    engine_ = std::make_unique<Engine>(config, *salt_);
    deliveries_.clear();
    now_ = secs(0);
  }
  EngineConfig config_with_gc(Duration gc_max_idle) {
    EngineConfig config;
    config.gc_max_idle = gc_max_idle;
    return config;
  }

  Engine& engine() { return *engine_; }

  // The instant of the following inputs.
  void at(std::int64_t seconds) { now_ = secs(seconds); }
  void at(Instant instant) { now_ = instant; }

  Reply send(SessionId session, const Request& request) {
    return engine_->handle(now_, session, request, deliveries_);
  }

  // --- lock namespace ---
  Reply lock(SessionId session, std::string_view key, std::int64_t timeout_s,
             std::int64_t lease_s = 0) {
    return send(session, test::lock_request(std::string(key), timeout_s, lease_s));
  }
  Reply release(SessionId session, std::string_view key, std::optional<Token> token) {
    return send(session, test::release_request(std::string(key), token));
  }
  Reply renew(SessionId session, std::string_view key, std::optional<Token> token,
              std::int64_t lease_s = 0) {
    return send(session, test::renew_request(std::string(key), token, lease_s));
  }
  Reply enqueue(SessionId session, std::string_view key, std::int64_t lease_s = 0) {
    return send(session, test::enqueue_request(std::string(key), lease_s));
  }
  Reply wait(SessionId session, std::string_view key, std::int64_t timeout_s) {
    return send(session, test::wait_request(std::string(key), timeout_s));
  }

  // --- semaphore namespace ---
  Reply sem_lock(SessionId session, std::string_view key, std::int64_t timeout_s,
                 std::int64_t limit, std::int64_t lease_s = 0) {
    return send(session, test::sem_lock_request(std::string(key), timeout_s, limit, lease_s));
  }
  Reply sem_release(SessionId session, std::string_view key, std::optional<Token> token) {
    return send(session, test::release_request(std::string(key), token, Command::kSemRelease));
  }
  Reply sem_renew(SessionId session, std::string_view key, std::optional<Token> token,
                  std::int64_t lease_s = 0) {
    Request request = test::release_request(std::string(key), token, Command::kSemRenew);
    request.lease_s = lease_s;
    return send(session, request);
  }
  Reply sem_enqueue(SessionId session, std::string_view key, std::int64_t limit,
                    std::int64_t lease_s = 0) {
    return send(session, test::sem_enqueue_request(std::string(key), limit, lease_s));
  }
  Reply sem_wait(SessionId session, std::string_view key, std::int64_t timeout_s) {
    return send(session, test::wait_request(std::string(key), timeout_s, Command::kSemWait));
  }

  // --- other inputs ---
  // Returns whether a parked request of the session was dropped.
  bool close(SessionId session, bool auto_release = true) {
    return engine_->close_session(now_, session, auto_release, deliveries_);
  }
  void tick() { engine_->tick(now_, deliveries_); }
  // Returns whether the session's parked request was dropped.
  bool cancel_parked(SessionId session) {
    return engine_->cancel_parked(now_, session, deliveries_);
  }
  void tick_at(Instant instant) {
    at(instant);
    tick();
  }
  StatsSnapshot stats() { return engine_->stats(now_, deliveries_); }

  // --- deliveries ---
  std::vector<Delivery> take_deliveries() { return std::exchange(deliveries_, {}); }
  // The one reply delivered since the last look, which must be addressed to `session`.
  Reply delivered_to(SessionId session) {
    std::vector<Delivery> deliveries = take_deliveries();
    if (deliveries.size() != 1 || deliveries[0].session != session) {
      ADD_FAILURE() << "want exactly one delivery to session " << session.value << ", got "
                    << describe(deliveries);
      return Reply::parked();  // a reply no test expects
    }
    return deliveries[0].reply;
  }
  void expect_no_deliveries() {
    std::vector<Delivery> deliveries = take_deliveries();
    EXPECT_TRUE(deliveries.empty()) << "unexpected deliveries " << describe(deliveries);
  }

  // --- introspection ---
  std::optional<Engine::ResourceView> resource(Namespace ns, std::string_view key) const {
    for (Engine::ResourceView& view : engine_->inspect()) {
      if (view.ns == ns && view.key == key) return std::move(view);
    }
    return std::nullopt;
  }
  std::vector<Engine::HolderView> holders(Namespace ns, std::string_view key) const {
    auto view = resource(ns, key);
    return view ? view->holders : std::vector<Engine::HolderView>{};
  }
  std::vector<SessionId> holder_sessions(Namespace ns, std::string_view key) const {
    std::vector<SessionId> sessions;
    for (const auto& holder : holders(ns, key)) sessions.push_back(holder.session);
    return sessions;
  }
  std::vector<SessionId> waiters(Namespace ns, std::string_view key) const {
    auto view = resource(ns, key);
    return view ? view->waiters : std::vector<SessionId>{};
  }
  // The lease deadline of the holder with `token`, nullopt when no such holder exists.
  std::optional<Instant> deadline_of(Namespace ns, std::string_view key, Token token) const {
    for (const auto& holder : holders(ns, key)) {
      if (holder.token == token) return holder.deadline;
    }
    return std::nullopt;
  }
  // The token of the single holder of `key`.
  Token only_holder_token(Namespace ns, std::string_view key) const {
    auto all = holders(ns, key);
    EXPECT_EQ(all.size(), 1u) << "key " << key;
    return all.empty() ? Token{} : all[0].token;
  }
  std::size_t resources() const { return engine_->resources_count(); }

  Instant now_ = secs(0);
  std::vector<Delivery> deliveries_;

 private:
  std::unique_ptr<SplitMix64> salt_;
  std::unique_ptr<Engine> engine_;  // after salt_: destroyed before the source it uses
};

using SessionList = std::vector<SessionId>;

// ============================================================================================
// Resources: namespaces, creation, limits
// ============================================================================================

TEST_F(EngineTest, Edge15_LockAndSemaphoreWithSameKeyAreUnrelated) {
  Reply lock_grant = lock(kS1, "k", 0);
  ASSERT_TRUE(IsOk(lock_grant, 33));
  // A limit-1 semaphore named "k" is free although the lock "k" is held.
  Reply sem_grant = sem_lock(kS2, "k", 0, 1);
  ASSERT_TRUE(IsOk(sem_grant, 33));
  EXPECT_EQ(resources(), 2u);

  // A token only works in its own namespace.
  EXPECT_EQ(release(kS1, "k", sem_grant.token), only(Status::kError));
  EXPECT_EQ(sem_release(kS2, "k", lock_grant.token), only(Status::kError));
  EXPECT_EQ(renew(kS1, "k", sem_grant.token), only(Status::kError));
  EXPECT_EQ(sem_renew(kS2, "k", lock_grant.token), only(Status::kError));
  EXPECT_EQ(holder_sessions(kL, "k"), SessionList{kS1});
  EXPECT_EQ(holder_sessions(kSem, "k"), SessionList{kS2});

  EXPECT_EQ(release(kS1, "k", lock_grant.token), only(Status::kOk));
  EXPECT_EQ(sem_release(kS2, "k", sem_grant.token), only(Status::kOk));
}

TEST_F(EngineTest, Namespace_TwoPhaseRecordsAreSeparatePerNamespace) {
  EXPECT_TRUE(IsAcquired(enqueue(kS1, "k"), 33));
  EXPECT_TRUE(IsAcquired(sem_enqueue(kS1, "k", 2), 33));
  EXPECT_TRUE(IsOk(wait(kS1, "k", 0), 33));
  EXPECT_TRUE(IsOk(sem_wait(kS1, "k", 0), 33));
  EXPECT_EQ(wait(kS1, "k", 0), only(Status::kErrorNotEnqueued));
  EXPECT_EQ(sem_wait(kS1, "k", 0), only(Status::kErrorNotEnqueued));
}

TEST_F(EngineTest, Resources_OnlyAcquireAndEnqueueCreate) {
  Token bogus{Fence{1}, 1};
  EXPECT_EQ(release(kS1, "k", bogus), only(Status::kError));
  EXPECT_EQ(renew(kS1, "k", bogus), only(Status::kError));
  EXPECT_EQ(wait(kS1, "k", 0), only(Status::kErrorNotEnqueued));
  EXPECT_EQ(sem_release(kS1, "k", bogus), only(Status::kError));
  EXPECT_EQ(sem_renew(kS1, "k", bogus), only(Status::kError));
  EXPECT_EQ(sem_wait(kS1, "k", 0), only(Status::kErrorNotEnqueued));
  EXPECT_EQ(resources(), 0u);

  EXPECT_TRUE(IsOk(lock(kS1, "a", 0), 33));
  EXPECT_TRUE(IsOk(sem_lock(kS1, "b", 0, 2), 33));
  EXPECT_TRUE(IsAcquired(enqueue(kS1, "c"), 33));
  EXPECT_TRUE(IsAcquired(sem_enqueue(kS1, "d", 2), 33));
  EXPECT_EQ(resources(), 4u);
}

TEST_F(EngineTest, Limit_LockHasLimitOne) {
  EXPECT_TRUE(IsOk(lock(kS1, "k", 0), 33));
  EXPECT_EQ(lock(kS2, "k", 0), only(Status::kTimeout));
  auto view = resource(kL, "k");
  ASSERT_TRUE(view.has_value());
  EXPECT_EQ(view->limit, 1);
}

TEST_F(EngineTest, Limit_FirstCreatorFixesSemaphoreLimit) {
  EXPECT_TRUE(IsOk(sem_lock(kS1, "s", 0, 3), 33));
  EXPECT_TRUE(IsOk(sem_lock(kS2, "s", 0, 3), 33));
  EXPECT_TRUE(IsOk(sem_lock(kS3, "s", 0, 3), 33));
  EXPECT_EQ(sem_lock(kS4, "s", 0, 3), only(Status::kTimeout));
  auto view = resource(kSem, "s");
  ASSERT_TRUE(view.has_value());
  EXPECT_EQ(view->limit, 3);
  EXPECT_EQ(view->holders.size(), 3u);
}

TEST_F(EngineTest, Limit_OtherLimitGetsErrorLimitMismatchAndChangesNothing) {
  EXPECT_TRUE(IsOk(sem_lock(kS1, "s", 0, 2), 33));
  EXPECT_EQ(sem_lock(kS2, "s", 10, 3), only(Status::kErrorLimitMismatch));
  EXPECT_EQ(sem_lock(kS2, "s", 10, 1), only(Status::kErrorLimitMismatch));
  EXPECT_EQ(sem_enqueue(kS2, "s", 3), only(Status::kErrorLimitMismatch));
  EXPECT_EQ(waiters(kSem, "s"), SessionList{});
  EXPECT_EQ(holder_sessions(kSem, "s"), SessionList{kS1});
  // The mismatched enqueue left no two-phase record behind.
  EXPECT_EQ(sem_wait(kS2, "s", 0), only(Status::kErrorNotEnqueued));

  EXPECT_TRUE(IsOk(sem_lock(kS2, "s", 0, 2), 33));
  EXPECT_EQ(sem_lock(kS3, "s", 0, 2), only(Status::kTimeout));
  EXPECT_EQ(resource(kSem, "s")->limit, 2);
}

TEST_F(EngineTest, Limit_MismatchDoesNotTouchLastActivity) {
  configure(config_with_gc(Duration::seconds(10)));
  at(0);
  Reply grant = sem_lock(kS1, "s", 0, 2);
  EXPECT_EQ(sem_release(kS1, "s", grant.token), only(Status::kOk));
  at(5);
  EXPECT_EQ(sem_lock(kS1, "s", 0, 3), only(Status::kErrorLimitMismatch));
  tick_at(secs(10));
  EXPECT_EQ(resources(), 1u);
  tick_at(secs(10) + kNs);  // 10 s after the last accepted use at 0, not after the mismatch
  EXPECT_EQ(resources(), 0u);
}

TEST_F(EngineTest, Edge44_SemaphoreLimitUpToProtocolMaximumWorks) {
  EXPECT_TRUE(IsOk(sem_lock(kS1, "s", 0, kMaxSemaphoreLimit), 33));
  EXPECT_TRUE(IsOk(sem_lock(kS2, "s", 0, kMaxSemaphoreLimit), 33));
  EXPECT_EQ(resource(kSem, "s")->limit, kMaxSemaphoreLimit);
}

// ============================================================================================
// --max-locks
// ============================================================================================

TEST_F(EngineTest, Edge20_MaxLocksIsExactAcrossBothNamespaces) {
  EngineConfig config;
  config.resources_max = 3;
  configure(config);
  EXPECT_TRUE(IsOk(lock(kS1, "a", 0), 33));
  EXPECT_TRUE(IsOk(sem_lock(kS1, "a", 0, 2), 33));
  EXPECT_TRUE(IsAcquired(enqueue(kS1, "b"), 33));
  EXPECT_EQ(resources(), 3u);

  EXPECT_EQ(lock(kS2, "c", 0), only(Status::kErrorMaxLocks));
  EXPECT_EQ(lock(kS2, "c", 10), only(Status::kErrorMaxLocks));
  EXPECT_EQ(sem_lock(kS2, "b", 0, 2), only(Status::kErrorMaxLocks));
  EXPECT_EQ(enqueue(kS2, "c"), only(Status::kErrorMaxLocks));
  EXPECT_EQ(sem_enqueue(kS2, "c", 2), only(Status::kErrorMaxLocks));
  EXPECT_EQ(resources(), 3u);
  // A rejected enqueue leaves no record.
  EXPECT_EQ(wait(kS2, "c", 0), only(Status::kErrorNotEnqueued));
}

TEST_F(EngineTest, MaxLocks_ExistingResourcesWorkAtTheCap) {
  EngineConfig config;
  config.resources_max = 1;
  configure(config);
  Reply grant = lock(kS1, "a", 0);
  ASSERT_TRUE(IsOk(grant, 33));
  EXPECT_EQ(lock(kS2, "a", 0), only(Status::kTimeout));
  EXPECT_EQ(lock(kS2, "a", 10), Reply::parked());
  EXPECT_EQ(release(kS1, "a", grant.token), only(Status::kOk));
  EXPECT_TRUE(IsOk(delivered_to(kS2), 33));
  EXPECT_EQ(enqueue(kS3, "a"), only(Status::kQueued));
}

TEST_F(EngineTest, MaxLocks_IdleResourcesCountUntilCollected) {
  EngineConfig config;
  config.resources_max = 1;
  configure(config);
  Reply grant = lock(kS1, "a", 0);
  EXPECT_EQ(release(kS1, "a", grant.token), only(Status::kOk));
  EXPECT_EQ(lock(kS1, "b", 0), only(Status::kErrorMaxLocks));
  EXPECT_EQ(sem_lock(kS1, "a", 0, 1), only(Status::kErrorMaxLocks));
}

// Two engines sharing one budget (as the daemon's shards do) obey one exact cap together.
TEST(EngineBudgetTest, Edge20_SharedBudgetMakesMaxLocksExactAcrossEngines) {
  struct CountingBudget final : ResourceBudget {
    std::int64_t used = 0;
    std::int64_t max = 3;
    bool try_take() override { return used < max ? (++used, true) : false; }
    void give_back() override { --used; }
  } budget;
  EngineConfig config;
  config.resources_max = 1;  // ignored when a budget is given
  config.gc_max_idle = Duration::zero();
  SplitMix64 salts_a(1), salts_b(2);
  Engine a(config, salts_a, &budget);
  Engine b(config, salts_b, &budget);
  std::vector<Delivery> out;
  auto lock = [](std::string key) {
    Request request;
    request.command = Command::kLock;
    request.key = std::move(key);
    return request;
  };
  const Instant t0 = Instant::from_ns(0);
  EXPECT_EQ(a.handle(t0, SessionId{1}, lock("x"), out).status, Status::kOk);
  EXPECT_EQ(b.handle(t0, SessionId{2}, lock("y"), out).status, Status::kOk);
  Reply z = a.handle(t0, SessionId{1}, lock("z"), out);
  EXPECT_EQ(z.status, Status::kOk);
  EXPECT_EQ(b.handle(t0, SessionId{2}, lock("w"), out).status, Status::kErrorMaxLocks);
  EXPECT_EQ(budget.used, 3);
  Request release;
  release.command = Command::kRelease;
  release.key = "z";
  release.token = z.token;
  EXPECT_EQ(a.handle(t0, SessionId{1}, release, out).status, Status::kOk);
  a.tick(t0 + Duration::nanoseconds(1), out);  // z is collected and its room given back
  EXPECT_EQ(budget.used, 2);
  EXPECT_EQ(b.handle(t0 + Duration::nanoseconds(1), SessionId{2}, lock("w"), out).status,
            Status::kOk);
}

TEST_F(EngineTest, Edge21_GcLowersResourceCountSoTheCapFreesUp) {
  EngineConfig config;
  config.resources_max = 1;
  config.gc_max_idle = Duration::seconds(10);
  configure(config);
  at(0);
  Reply grant = lock(kS1, "a", 0);
  EXPECT_EQ(release(kS1, "a", grant.token), only(Status::kOk));
  at(10);
  EXPECT_EQ(lock(kS1, "b", 0), only(Status::kErrorMaxLocks));
  at(secs(10) + kNs);
  EXPECT_TRUE(IsOk(lock(kS1, "b", 0), 33));
  EXPECT_EQ(resources(), 1u);
  EXPECT_EQ(engine().counters().resources_collected, 1u);
}

// ============================================================================================
// Fast path, FIFO, try-once, --max-waiters
// ============================================================================================

TEST_F(EngineTest, FastPath_FreeLockGrantsWithServerDefaultLease) {
  at(2);
  Reply grant = lock(kS1, "k", 0);
  ASSERT_TRUE(IsOk(grant, 33));
  EXPECT_EQ(deadline_of(kL, "k", token_of(grant)), secs(35));
  EXPECT_EQ(holder_sessions(kL, "k"), SessionList{kS1});
}

TEST_F(EngineTest, FastPath_RequestLeaseIsUsedAndTimeoutDoesNotMatter) {
  at(2);
  Reply grant = lock(kS1, "k", 100, 7);
  ASSERT_TRUE(IsOk(grant, 7));
  EXPECT_EQ(deadline_of(kL, "k", token_of(grant)), secs(9));
}

TEST_F(EngineTest, FastPath_ConfiguredDefaultLease) {
  EngineConfig config;
  config.default_lease_s = 5;
  configure(config);
  EXPECT_TRUE(IsOk(lock(kS1, "k", 0), 5));
  EXPECT_TRUE(IsOk(sem_lock(kS1, "s", 0, 2), 5));
  EXPECT_TRUE(IsAcquired(enqueue(kS1, "e"), 5));
}

TEST_F(EngineTest, FastPath_SemaphoreGrantsUpToItsLimit) {
  Reply a = sem_lock(kS1, "s", 0, 2, 10);
  Reply b = sem_lock(kS1, "s", 0, 2, 20);  // one session may hold several slots
  ASSERT_TRUE(IsOk(a, 10));
  ASSERT_TRUE(IsOk(b, 20));
  EXPECT_NE(token_of(a), token_of(b));
  EXPECT_EQ(sem_lock(kS2, "s", 0, 2), only(Status::kTimeout));
  EXPECT_EQ(holder_sessions(kSem, "s"), (SessionList{kS1, kS1}));
}

TEST_F(EngineTest, Edge01_NewcomerNeverOvertakesWaiter) {
  Reply first = lock(kS1, "k", 0);
  EXPECT_EQ(lock(kS2, "k", 10), Reply::parked());
  EXPECT_EQ(lock(kS3, "k", 0), only(Status::kTimeout));
  EXPECT_EQ(lock(kS3, "k", 10), Reply::parked());
  EXPECT_EQ(waiters(kL, "k"), (SessionList{kS2, kS3}));

  EXPECT_EQ(release(kS1, "k", first.token), only(Status::kOk));
  Reply second = delivered_to(kS2);
  EXPECT_TRUE(IsOk(second, 33));
  EXPECT_EQ(lock(kS4, "k", 0), only(Status::kTimeout));
  EXPECT_EQ(release(kS2, "k", second.token), only(Status::kOk));
  EXPECT_TRUE(IsOk(delivered_to(kS3), 33));
}

TEST_F(EngineTest, Fifo_WaitersAreGrantedInArrivalOrder) {
  Reply a = sem_lock(kS1, "s", 0, 2);
  Reply b = sem_lock(kS1, "s", 0, 2);
  EXPECT_EQ(sem_lock(kS2, "s", 10, 2), Reply::parked());
  EXPECT_EQ(sem_lock(kS3, "s", 10, 2), Reply::parked());
  EXPECT_EQ(sem_lock(kS4, "s", 10, 2), Reply::parked());
  EXPECT_EQ(waiters(kSem, "s"), (SessionList{kS2, kS3, kS4}));

  EXPECT_EQ(sem_release(kS1, "s", b.token), only(Status::kOk));
  EXPECT_TRUE(IsOk(delivered_to(kS2), 33));
  EXPECT_EQ(sem_release(kS1, "s", a.token), only(Status::kOk));
  EXPECT_TRUE(IsOk(delivered_to(kS3), 33));
  EXPECT_EQ(waiters(kSem, "s"), SessionList{kS4});
}

TEST_F(EngineTest, Fifo_QueuedTwoPhaseWaiterBlocksNewcomer) {
  Reply first = lock(kS1, "k", 0);
  EXPECT_EQ(enqueue(kS2, "k"), only(Status::kQueued));
  EXPECT_EQ(lock(kS3, "k", 0), only(Status::kTimeout));
  EXPECT_EQ(enqueue(kS3, "k"), only(Status::kQueued));
  EXPECT_EQ(waiters(kL, "k"), (SessionList{kS2, kS3}));
  EXPECT_EQ(release(kS1, "k", first.token), only(Status::kOk));
  EXPECT_EQ(holder_sessions(kL, "k"), SessionList{kS2});
  EXPECT_EQ(lock(kS4, "k", 0), only(Status::kTimeout));
}

TEST_F(EngineTest, Fifo_SemaphoreQueueIsEmptyWheneverCapacityIsFree) {
  Reply a = sem_lock(kS1, "s", 0, 2);
  EXPECT_TRUE(IsOk(sem_lock(kS2, "s", 0, 2), 33));  // free slot, empty queue: fast path
  EXPECT_EQ(sem_lock(kS3, "s", 10, 2), Reply::parked());
  EXPECT_EQ(sem_release(kS1, "s", a.token), only(Status::kOk));
  EXPECT_TRUE(IsOk(delivered_to(kS3), 33));  // the freed slot went to the waiter at once
  EXPECT_EQ(waiters(kSem, "s"), SessionList{});
  EXPECT_EQ(sem_lock(kS4, "s", 0, 2), only(Status::kTimeout));
}

TEST_F(EngineTest, Lock_NotReentrantSameSessionQueuesBehindItself) {
  at(0);
  Reply grant = lock(kS1, "k", 0, 10);
  EXPECT_EQ(lock(kS1, "k", 0), only(Status::kTimeout));
  EXPECT_EQ(lock(kS1, "k", 30, 10), Reply::parked());
  EXPECT_EQ(waiters(kL, "k"), SessionList{kS1});
  tick_at(secs(10));
  Reply second = delivered_to(kS1);
  EXPECT_TRUE(IsOk(second, 10));
  EXPECT_NE(token_of(second), token_of(grant));
}

TEST_F(EngineTest, TryOnce_TimeoutZeroOnBusyLockAnswersTimeoutAndQueuesNothing) {
  at(0);
  lock(kS1, "k", 0, 10);
  EXPECT_EQ(lock(kS2, "k", 0), only(Status::kTimeout));
  EXPECT_EQ(waiters(kL, "k"), SessionList{});
  EXPECT_TRUE(IsOk(sem_lock(kS2, "s", 0, 1), 33));
  EXPECT_EQ(sem_lock(kS3, "s", 0, 1), only(Status::kTimeout));
  EXPECT_EQ(waiters(kSem, "s"), SessionList{});
  EXPECT_EQ(engine().next_wake(), secs(10));  // only the lease, no wait timeout
}

TEST_F(EngineTest, MaxWaiters_FullQueueRejectsNewWaiter) {
  EngineConfig config;
  config.waiters_max = 2;
  configure(config);
  lock(kS1, "k", 0);
  EXPECT_EQ(lock(kS2, "k", 10), Reply::parked());
  EXPECT_EQ(enqueue(kS3, "k"), only(Status::kQueued));
  EXPECT_EQ(lock(kS4, "k", 10), only(Status::kErrorMaxWaiters));
  EXPECT_EQ(enqueue(kS4, "k"), only(Status::kErrorMaxWaiters));
  EXPECT_EQ(waiters(kL, "k"), (SessionList{kS2, kS3}));
  // The rejected enqueue left no record.
  EXPECT_EQ(wait(kS4, "k", 0), only(Status::kErrorNotEnqueued));
}

TEST_F(EngineTest, MaxWaiters_TimeoutZeroWithFullQueueGetsErrorMaxWaiters) {
  EngineConfig config;
  config.waiters_max = 1;
  configure(config);
  lock(kS1, "k", 0);
  EXPECT_EQ(lock(kS2, "k", 0), only(Status::kTimeout));  // queue not full yet
  EXPECT_EQ(lock(kS2, "k", 10), Reply::parked());
  EXPECT_EQ(lock(kS3, "k", 0), only(Status::kErrorMaxWaiters));
}

TEST_F(EngineTest, MaxWaiters_AppliesToSemaphores) {
  EngineConfig config;
  config.waiters_max = 1;
  configure(config);
  sem_lock(kS1, "s", 0, 1);
  EXPECT_EQ(sem_lock(kS2, "s", 10, 1), Reply::parked());
  EXPECT_EQ(sem_lock(kS3, "s", 10, 1), only(Status::kErrorMaxWaiters));
  EXPECT_EQ(sem_enqueue(kS3, "s", 1), only(Status::kErrorMaxWaiters));
}

TEST_F(EngineTest, MaxWaiters_ZeroMeansUnlimited) {
  lock(kS1, "k", 0);
  for (std::uint64_t session = 2; session < 200; ++session) {
    ASSERT_EQ(enqueue(SessionId{session}, "k"), only(Status::kQueued)) << session;
  }
  EXPECT_EQ(waiters(kL, "k").size(), 198u);
}

// ============================================================================================
// Parked acquire: grant, timeout, deadlines
// ============================================================================================

TEST_F(EngineTest, Parked_GrantedOnReleaseWithItsOwnLeaseRunningFromDelivery) {
  at(0);
  Reply first = lock(kS1, "k", 0, 10);
  at(1);
  EXPECT_EQ(lock(kS2, "k", 30, 20), Reply::parked());
  expect_no_deliveries();
  at(3);
  EXPECT_EQ(release(kS3, "k", first.token), only(Status::kOk));
  Reply second = delivered_to(kS2);
  ASSERT_TRUE(IsOk(second, 20));
  EXPECT_GT(token_of(second).fence, token_of(first).fence);
  EXPECT_EQ(deadline_of(kL, "k", token_of(second)), secs(23));
  EXPECT_EQ(holder_sessions(kL, "k"), SessionList{kS2});
  EXPECT_EQ(waiters(kL, "k"), SessionList{});
}

TEST_F(EngineTest, Parked_GrantedOnExpiryWithDefaultLeaseFromThatInstant) {
  at(0);
  lock(kS1, "k", 0, 10);
  at(1);
  EXPECT_EQ(lock(kS2, "k", 30), Reply::parked());
  tick_at(secs(10) - kNs);
  expect_no_deliveries();
  tick_at(secs(10));
  Reply second = delivered_to(kS2);
  ASSERT_TRUE(IsOk(second, 33));
  EXPECT_EQ(deadline_of(kL, "k", token_of(second)), secs(43));
  EXPECT_EQ(engine().counters().lease_expiries, 1u);
}

TEST_F(EngineTest, Parked_GrantedWhenHolderSessionCloses) {
  at(0);
  lock(kS1, "k", 0, 10);
  EXPECT_EQ(lock(kS2, "k", 30, 5), Reply::parked());
  at(4);
  close(kS1, /*auto_release=*/true);
  Reply second = delivered_to(kS2);
  ASSERT_TRUE(IsOk(second, 5));
  EXPECT_EQ(deadline_of(kL, "k", token_of(second)), secs(9));
}

TEST_F(EngineTest, Parked_SemaphoreGrantedOnRelease) {
  Reply a = sem_lock(kS1, "s", 0, 1, 10);
  EXPECT_EQ(sem_lock(kS2, "s", 30, 1, 4), Reply::parked());
  EXPECT_EQ(sem_release(kS1, "s", a.token), only(Status::kOk));
  EXPECT_TRUE(IsOk(delivered_to(kS2), 4));
}

TEST_F(EngineTest, Parked_TimesOutAtArrivalPlusTimeoutAndLeavesTheQueue) {
  at(0);
  Reply first = lock(kS1, "k", 0, 100);
  at(1);
  EXPECT_EQ(lock(kS2, "k", 5), Reply::parked());
  tick_at(secs(6) - kNs);
  expect_no_deliveries();
  tick_at(secs(6));
  EXPECT_EQ(delivered_to(kS2), only(Status::kTimeout));
  EXPECT_EQ(waiters(kL, "k"), SessionList{});
  EXPECT_EQ(engine().counters().wait_timeouts, 1u);
  // The timed-out waiter is never granted afterwards.
  EXPECT_EQ(release(kS1, "k", first.token), only(Status::kOk));
  expect_no_deliveries();
  EXPECT_EQ(holders(kL, "k").size(), 0u);
}

TEST_F(EngineTest, Deadline_LeaseExpiresExactlyAtItsDeadline) {
  at(0);
  Reply grant = lock(kS1, "k", 0, 10);
  tick_at(secs(10) - kNs);
  EXPECT_TRUE(deadline_of(kL, "k", token_of(grant)).has_value());
  tick_at(secs(10));
  EXPECT_FALSE(deadline_of(kL, "k", token_of(grant)).has_value());
  EXPECT_EQ(engine().counters().lease_expiries, 1u);
}

TEST_F(EngineTest, Deadline_ExpiryBeatsTimeoutAtTheSameInstant) {
  at(0);
  lock(kS1, "k", 0, 10);
  at(5);
  EXPECT_EQ(lock(kS2, "k", 5), Reply::parked());  // times out at 10, when the lease ends
  tick_at(secs(10));
  EXPECT_TRUE(IsOk(delivered_to(kS2), 33));
  EXPECT_EQ(engine().counters().wait_timeouts, 0u);
  tick_at(secs(11));
  expect_no_deliveries();
}

TEST_F(EngineTest, Deadline_ExpiryBeatsTwoPhaseWaitTimeoutAtTheSameInstant) {
  at(0);
  lock(kS1, "k", 0, 10);
  EXPECT_EQ(enqueue(kS2, "k", 7), only(Status::kQueued));
  at(5);
  EXPECT_EQ(wait(kS2, "k", 5), Reply::parked());
  tick_at(secs(10));
  EXPECT_TRUE(IsOk(delivered_to(kS2), 7));
}

TEST_F(EngineTest, Deadline_DueDeadlinesAreProcessedInOrderOfInstant) {
  at(0);
  lock(kS1, "k", 0, 10);
  at(3);
  EXPECT_EQ(lock(kS2, "k", 5), Reply::parked());  // times out at 8
  at(4);
  EXPECT_EQ(lock(kS3, "k", 20), Reply::parked());  // times out at 24
  tick_at(secs(12));  // 8 (timeout of S2) then 10 (lease of S1, granted to S3)
  std::vector<Delivery> deliveries = take_deliveries();
  ASSERT_EQ(deliveries.size(), 2u) << describe(deliveries);
  EXPECT_EQ(deliveries[0], (Delivery{kS2, only(Status::kTimeout)}));
  EXPECT_EQ(deliveries[1].session, kS3);
  EXPECT_TRUE(IsOk(deliveries[1].reply, 33));
}

TEST_F(EngineTest, Deadline_AnyInputProcessesDueDeadlinesFirst) {
  at(0);
  lock(kS1, "k", 0, 10);
  EXPECT_EQ(lock(kS2, "k", 30), Reply::parked());
  at(10);
  EXPECT_TRUE(IsOk(lock(kS3, "other", 0), 33));  // a request on another key
  EXPECT_TRUE(IsOk(delivered_to(kS2), 33));
  at(11);
  close(kS4);  // an unknown session closing
  expect_no_deliveries();
}

TEST_F(EngineTest, Edge08_ExpiredLeaseIsReclaimedOnAcquireWithoutATick) {
  at(0);
  lock(kS1, "k", 0, 10);
  at(10);
  EXPECT_TRUE(IsOk(lock(kS2, "k", 0), 33));
  EXPECT_EQ(holder_sessions(kL, "k"), SessionList{kS2});
}

// ---- deadlines_per_call: a storm of deadlines is worked off a few per call ----------------------

class DeadlineStormTest : public EngineTest {
 protected:
  // Ten locks k0..k9, each held by its own session with a 10 s lease taken at 0, and a limit of
  // three deadlines per call; the leases are all due from 10 on.
  void SetUp() override {
    EngineConfig config;
    config.deadlines_per_call = 3;
    configure(config);
    at(0);
    for (std::uint64_t i = 0; i < 10; ++i) {
      tokens_.push_back(token_of(lock(holder(i), key(i), 0, 10)));
    }
  }
  static SessionId holder(std::uint64_t i) { return SessionId{100 + i}; }
  static std::string key(std::uint64_t i) { return "k" + std::to_string(i); }
  std::uint64_t expiries() { return engine().counters().lease_expiries; }
  bool behind() {
    const std::optional<Instant> wake = engine().next_wake();
    return wake && *wake <= engine().now();
  }
  std::vector<Token> tokens_;
};

TEST_F(DeadlineStormTest, EachTickProcessesAtMostTheLimitAndLeavesTheRestDue) {
  tick_at(secs(20));
  EXPECT_EQ(expiries(), 3u);
  EXPECT_TRUE(behind());
  tick();
  EXPECT_EQ(expiries(), 6u);
  tick();
  tick();
  EXPECT_EQ(expiries(), 10u);
  EXPECT_FALSE(behind());  // what is left is the GC of the ten idle locks, 60 s on
}

TEST_F(DeadlineStormTest, ARequestSeesItsOwnResourceAsIfEverythingDueWereProcessed) {
  at(20);
  // k9's lease is the last in processing order: three others expire, then k9's own.
  EXPECT_TRUE(IsOk(lock(kS1, key(9), 0), 33));  // granted at once, not "timeout"
  EXPECT_EQ(expiries(), 4u);
  EXPECT_TRUE(behind());
  // The expired holder of k8 (not yet processed) cannot release or renew either.
  EXPECT_EQ(release(holder(8), key(8), tokens_[8]), only(Status::kError));
  EXPECT_EQ(renew(holder(7), key(7), tokens_[7]), only(Status::kError));
  EXPECT_EQ(holder_sessions(kL, key(9)), SessionList{kS1});
}

TEST_F(DeadlineStormTest, AWaiterIsGrantedWhenARequestBringsItsResourceUpToDate) {
  at(5);
  EXPECT_EQ(lock(kS2, key(9), 60), Reply::parked());
  at(20);
  // Any request naming k9 hands it on; the three expiries ahead of it are processed too.
  EXPECT_EQ(release(kS3, key(9), std::nullopt), only(Status::kError));
  std::vector<Delivery> deliveries = take_deliveries();
  ASSERT_EQ(deliveries.size(), 1u) << describe(deliveries);
  EXPECT_EQ(deliveries[0].session, kS2);
  EXPECT_TRUE(IsOk(deliveries[0].reply, 33));
  EXPECT_EQ(expiries(), 4u);
}

TEST_F(DeadlineStormTest, ADueTimeoutOrGrantWinsOverCancellingTheParkedRequest) {
  at(5);
  EXPECT_TRUE(IsOk(lock(kS1, "long", 0, 100), 100));
  EXPECT_EQ(lock(kS2, "long", 6), Reply::parked());   // times out at 11, after the ten leases
  EXPECT_EQ(lock(kS3, key(9), 60), Reply::parked());  // granted at 10, after nine leases
  at(20);
  EXPECT_FALSE(cancel_parked(kS2));
  EXPECT_EQ(delivered_to(kS2), only(Status::kTimeout));
  EXPECT_FALSE(cancel_parked(kS3));
  EXPECT_TRUE(IsOk(delivered_to(kS3), 33));
}

TEST_F(DeadlineStormTest, StatsProcessesEverythingDue) {
  at(20);
  const StatsSnapshot snapshot = stats();
  EXPECT_EQ(expiries(), 10u);
  EXPECT_TRUE(snapshot.locks.empty());
  EXPECT_EQ(snapshot.idle_locks.size(), 10u);
}

TEST_F(DeadlineStormTest, FencesStayStrictlyIncreasingWhateverTheProcessingOrder) {
  at(5);
  for (std::uint64_t i = 0; i < 10; ++i)
    EXPECT_EQ(lock(SessionId{200 + i}, key(i), 60), Reply::parked());
  at(20);
  lock(kS1, key(9), 0);  // k9 first: its waiter gets the next fence before k3..k8's waiters
  for (int i = 0; i < 4; ++i) tick();
  std::vector<Delivery> deliveries = take_deliveries();
  ASSERT_EQ(deliveries.size(), 10u) << describe(deliveries);
  EXPECT_EQ(deliveries[3].session, SessionId{209});
  std::uint64_t last = tokens_.back().fence.value;
  for (const Delivery& delivery : deliveries) {
    ASSERT_TRUE(delivery.reply.token.has_value());
    EXPECT_GT(delivery.reply.token->fence.value, last);
    last = delivery.reply.token->fence.value;
  }
}

TEST_F(EngineTest, Edge46_WaiterTimingOutMidQueueKeepsFifoForTheRest) {
  at(0);
  Reply first = lock(kS1, "k", 0, 100);
  EXPECT_EQ(lock(kS2, "k", 50), Reply::parked());
  EXPECT_EQ(lock(kS3, "k", 5), Reply::parked());
  EXPECT_EQ(lock(kS4, "k", 50), Reply::parked());
  tick_at(secs(5));
  EXPECT_EQ(delivered_to(kS3), only(Status::kTimeout));
  EXPECT_EQ(waiters(kL, "k"), (SessionList{kS2, kS4}));
  at(6);
  EXPECT_EQ(release(kS1, "k", first.token), only(Status::kOk));
  Reply second = delivered_to(kS2);
  EXPECT_EQ(release(kS2, "k", second.token), only(Status::kOk));
  EXPECT_TRUE(IsOk(delivered_to(kS4), 33));
  EXPECT_EQ(waiters(kL, "k"), SessionList{});
}

TEST_F(EngineTest, Edge23_HugeTimeoutAndLeaseSaturateInsteadOfWrapping) {
  at(1000);
  Reply grant = lock(kS1, "k", 0, kMaxSeconds);
  ASSERT_TRUE(IsOk(grant, kMaxSeconds));
  EXPECT_EQ(deadline_of(kL, "k", token_of(grant)), Instant::max());
  EXPECT_EQ(lock(kS2, "k", kMaxSeconds), Reply::parked());
  tick_at(secs(1'000'000'000));
  expect_no_deliveries();
  EXPECT_EQ(holder_sessions(kL, "k"), SessionList{kS1});
  EXPECT_EQ(waiters(kL, "k"), SessionList{kS2});
  EXPECT_EQ(renew(kS1, "k", grant.token, kMaxSeconds), Reply::renewed(kMaxSeconds));
  EXPECT_EQ(deadline_of(kL, "k", token_of(grant)), Instant::max());
}

// ============================================================================================
// Release and renew
// ============================================================================================

TEST_F(EngineTest, Release_AnySessionWithTheTokenMayRelease) {
  Reply grant = lock(kS1, "k", 0);
  EXPECT_EQ(release(kS2, "k", grant.token), only(Status::kOk));
  EXPECT_EQ(holders(kL, "k").size(), 0u);
  EXPECT_EQ(release(kS1, "k", grant.token), only(Status::kError));  // already gone
}

TEST_F(EngineTest, Release_SemaphoreSlotByToken) {
  Reply a = sem_lock(kS1, "s", 0, 2);
  Reply b = sem_lock(kS2, "s", 0, 2);
  EXPECT_EQ(sem_release(kS3, "s", b.token), only(Status::kOk));
  EXPECT_EQ(holder_sessions(kSem, "s"), SessionList{kS1});
  EXPECT_TRUE(deadline_of(kSem, "s", token_of(a)).has_value());
}

TEST_F(EngineTest, Release_UnknownMalformedOrForeignTokenIsErrorAndChangesNothing) {
  Reply a = lock(kS1, "a", 0);
  Reply b = lock(kS1, "b", 0);
  EXPECT_EQ(release(kS1, "a", std::nullopt), only(Status::kError));           // malformed
  EXPECT_EQ(release(kS1, "a", b.token), only(Status::kError));                // other key
  EXPECT_EQ(release(kS1, "a", with_salt(token_of(a), token_of(a).salt + 1)),  // wrong salt
            only(Status::kError));
  EXPECT_EQ(release(kS1, "zzz", a.token), only(Status::kError));  // unknown key
  EXPECT_EQ(holder_sessions(kL, "a"), SessionList{kS1});
  EXPECT_EQ(holder_sessions(kL, "b"), SessionList{kS1});
}

TEST_F(EngineTest, Renew_WithoutLeaseReturnsServerDefaultTtl) {
  at(0);
  Reply grant = lock(kS1, "k", 0, 10);
  at(4);
  EXPECT_EQ(renew(kS1, "k", grant.token), Reply::renewed(33));
  EXPECT_EQ(deadline_of(kL, "k", token_of(grant)), secs(37));
}

TEST_F(EngineTest, Renew_WithLeaseReturnsItAndCountsFromNow) {
  at(0);
  Reply grant = lock(kS1, "k", 0, 10);
  at(4);
  EXPECT_EQ(renew(kS1, "k", grant.token, 5), Reply::renewed(5));  // may also shorten
  EXPECT_EQ(deadline_of(kL, "k", token_of(grant)), secs(9));
  tick_at(secs(9));
  EXPECT_FALSE(deadline_of(kL, "k", token_of(grant)).has_value());
}

TEST_F(EngineTest, Renew_AnySessionWithTheTokenMayRenew) {
  at(0);
  Reply grant = lock(kS1, "k", 0, 10);
  Reply slot = sem_lock(kS1, "s", 0, 3, 10);
  at(2);
  EXPECT_EQ(renew(kS2, "k", grant.token, 20), Reply::renewed(20));
  EXPECT_EQ(sem_renew(kS2, "s", slot.token, 30), Reply::renewed(30));
  EXPECT_EQ(deadline_of(kL, "k", token_of(grant)), secs(22));
  EXPECT_EQ(deadline_of(kSem, "s", token_of(slot)), secs(32));
}

TEST_F(EngineTest, Edge02_RenewAfterExpiryIsErrorAndNeverRevives) {
  at(0);
  Reply grant = lock(kS1, "k", 0, 10);
  at(10);  // no tick in between: the lease ended exactly now
  EXPECT_EQ(renew(kS1, "k", grant.token, 100), only(Status::kError));
  EXPECT_EQ(holders(kL, "k").size(), 0u);
  EXPECT_EQ(release(kS1, "k", grant.token), only(Status::kError));
  EXPECT_TRUE(IsOk(lock(kS2, "k", 0), 33));
}

TEST_F(EngineTest, Renew_ExpiredLeaseAlreadyPassedToWaiterStaysWithIt) {
  at(0);
  Reply grant = lock(kS1, "k", 0, 10);
  EXPECT_EQ(lock(kS2, "k", 30), Reply::parked());
  at(12);
  EXPECT_EQ(renew(kS1, "k", grant.token), only(Status::kError));
  EXPECT_TRUE(IsOk(delivered_to(kS2), 33));
  EXPECT_EQ(holder_sessions(kL, "k"), SessionList{kS2});
}

TEST_F(EngineTest, Renew_UnknownMalformedOrForeignTokenIsError) {
  Reply a = lock(kS1, "a", 0);
  Reply b = lock(kS1, "b", 0);
  EXPECT_EQ(renew(kS1, "a", std::nullopt), only(Status::kError));
  EXPECT_EQ(renew(kS1, "a", b.token), only(Status::kError));
  EXPECT_EQ(renew(kS1, "a", with_salt(token_of(a), ~token_of(a).salt)), only(Status::kError));
  EXPECT_EQ(renew(kS1, "zzz", a.token), only(Status::kError));
  EXPECT_EQ(deadline_of(kL, "a", token_of(a)), secs(33));
}

TEST_F(EngineTest, Edge32_BogusReleaseAndRenewDoNotTouchLastActivity) {
  configure(config_with_gc(Duration::seconds(10)));
  at(0);
  Reply grant = lock(kS1, "k", 0);
  Reply slot = sem_lock(kS1, "k", 0, 2);
  EXPECT_EQ(release(kS1, "k", grant.token), only(Status::kOk));
  EXPECT_EQ(sem_release(kS1, "k", slot.token), only(Status::kOk));
  at(5);
  EXPECT_EQ(release(kS2, "k", grant.token), only(Status::kError));   // stale
  EXPECT_EQ(release(kS2, "k", std::nullopt), only(Status::kError));  // malformed
  EXPECT_EQ(renew(kS2, "k", grant.token), only(Status::kError));
  EXPECT_EQ(renew(kS2, "k", Token{Fence{1}, 2}), only(Status::kError));
  EXPECT_EQ(sem_release(kS2, "k", slot.token), only(Status::kError));
  EXPECT_EQ(sem_renew(kS2, "k", std::nullopt), only(Status::kError));
  tick_at(secs(10));
  EXPECT_EQ(resources(), 2u);
  tick_at(secs(10) + kNs);  // collected on time, as if the bogus requests never happened
  EXPECT_EQ(resources(), 0u);
}

TEST_F(EngineTest, LastActivity_RejectedWaitAndLimitMismatchDoNotTouch) {
  configure(config_with_gc(Duration::seconds(10)));
  at(0);
  Reply grant = lock(kS1, "k", 0);
  Reply slot = sem_lock(kS1, "s", 0, 2);
  EXPECT_EQ(release(kS1, "k", grant.token), only(Status::kOk));
  EXPECT_EQ(sem_release(kS1, "s", slot.token), only(Status::kOk));
  at(5);
  EXPECT_EQ(wait(kS2, "k", 0), only(Status::kErrorNotEnqueued));  // no record: rejected
  EXPECT_EQ(sem_wait(kS2, "s", 3), only(Status::kErrorNotEnqueued));
  EXPECT_EQ(sem_lock(kS2, "s", 0, 3).status, Status::kErrorLimitMismatch);
  EXPECT_EQ(sem_enqueue(kS2, "s", 3).status, Status::kErrorLimitMismatch);
  tick_at(secs(10));
  EXPECT_EQ(resources(), 2u);
  tick_at(secs(10) + kNs);  // collected on time, as if the rejected requests never happened
  EXPECT_EQ(resources(), 0u);
}

TEST_F(EngineTest, LastActivity_SuccessfulReleaseTouches) {
  configure(config_with_gc(Duration::seconds(10)));
  at(0);
  Reply grant = lock(kS1, "k", 0, 100);
  at(5);
  EXPECT_EQ(release(kS1, "k", grant.token), only(Status::kOk));
  tick_at(secs(15));
  EXPECT_EQ(resources(), 1u);
  tick_at(secs(15) + kNs);
  EXPECT_EQ(resources(), 0u);
}

TEST_F(EngineTest, LastActivity_SuccessfulRenewTouches) {
  configure(config_with_gc(Duration::seconds(10)));
  at(0);
  Reply grant = lock(kS1, "k", 0, 3);
  at(2);
  EXPECT_EQ(renew(kS1, "k", grant.token, 3), Reply::renewed(3));  // lease ends at 5
  tick_at(secs(12));
  EXPECT_EQ(resources(), 1u);
  tick_at(secs(12) + kNs);
  EXPECT_EQ(resources(), 0u);
}

TEST_F(EngineTest, LastActivity_AcquireThatTimesOutStillTouches) {
  configure(config_with_gc(Duration::seconds(5)));
  at(0);
  lock(kS1, "k", 0, 10);
  at(8);
  EXPECT_EQ(lock(kS2, "k", 0), only(Status::kTimeout));
  tick_at(secs(13));  // the lease ended at 10; idle since 8
  EXPECT_EQ(resources(), 1u);
  tick_at(secs(13) + kNs);
  EXPECT_EQ(resources(), 0u);
}

TEST_F(EngineTest, Edge41_ReleaseAnswersOkEvenWhenPromotingTheNextWaiterFails) {
  EngineConfig config;
  config.fence_floor = Fence{kU64Max - 1};
  configure(config);
  Reply grant = lock(kS1, "k", 0);
  ASSERT_TRUE(IsOk(grant, 33));
  EXPECT_EQ(lock(kS2, "k", 30), Reply::parked());
  EXPECT_EQ(release(kS1, "k", grant.token), only(Status::kOk));
  EXPECT_EQ(delivered_to(kS2), only(Status::kError));
}

// ============================================================================================
// Two-phase acquire (e / w)
// ============================================================================================

TEST_F(EngineTest, TwoPhase_EnqueueFastPathAnswersAcquiredWithLeaseAlreadyRunning) {
  at(1);
  Reply grant = enqueue(kS1, "k", 10);
  ASSERT_TRUE(IsAcquired(grant, 10));
  EXPECT_EQ(deadline_of(kL, "k", token_of(grant)), secs(11));
  EXPECT_EQ(lock(kS2, "k", 0), only(Status::kTimeout));
  tick_at(secs(11));
  EXPECT_EQ(holders(kL, "k").size(), 0u);
}

TEST_F(EngineTest, TwoPhase_EnqueueOnBusyResourceAnswersQueued) {
  lock(kS1, "k", 0);
  EXPECT_EQ(enqueue(kS2, "k"), only(Status::kQueued));
  EXPECT_EQ(waiters(kL, "k"), SessionList{kS2});
  expect_no_deliveries();
}

TEST_F(EngineTest, TwoPhase_SecondEnqueueIsAlreadyEnqueuedWhileWaiting) {
  lock(kS1, "k", 0);
  EXPECT_EQ(enqueue(kS2, "k"), only(Status::kQueued));
  EXPECT_EQ(enqueue(kS2, "k"), only(Status::kErrorAlreadyEnqueued));
  EXPECT_EQ(waiters(kL, "k"), SessionList{kS2});
}

TEST_F(EngineTest, TwoPhase_SecondEnqueueIsAlreadyEnqueuedWhileGranted) {
  Reply grant = enqueue(kS1, "k");
  ASSERT_TRUE(IsAcquired(grant, 33));
  EXPECT_EQ(enqueue(kS1, "k"), only(Status::kErrorAlreadyEnqueued));
  EXPECT_EQ(holder_sessions(kL, "k"), SessionList{kS1});
  EXPECT_EQ(waiters(kL, "k"), SessionList{});
}

TEST_F(EngineTest, TwoPhase_EnqueueIsPerSessionAndResource) {
  EXPECT_TRUE(IsAcquired(enqueue(kS1, "a"), 33));
  EXPECT_TRUE(IsAcquired(enqueue(kS1, "b"), 33));
  EXPECT_EQ(enqueue(kS2, "a"), only(Status::kQueued));
}

TEST_F(EngineTest, TwoPhase_WaitWithoutRecordIsNotEnqueued) {
  EXPECT_EQ(wait(kS1, "k", 0), only(Status::kErrorNotEnqueued));
  lock(kS1, "k", 0);
  EXPECT_EQ(wait(kS1, "k", 10), only(Status::kErrorNotEnqueued));  // holding via l is no record
  EXPECT_TRUE(IsAcquired(enqueue(kS2, "other"), 33));
  EXPECT_EQ(wait(kS3, "other", 10), only(Status::kErrorNotEnqueued));      // w from another session
  EXPECT_EQ(sem_wait(kS2, "other", 10), only(Status::kErrorNotEnqueued));  // other namespace
}

TEST_F(EngineTest, TwoPhase_WaitOnGrantedRecordRestartsLease) {
  at(0);
  Reply grant = enqueue(kS1, "k", 10);
  at(4);
  Reply waited = wait(kS1, "k", 0);
  EXPECT_EQ(waited, Reply::granted(Status::kOk, token_of(grant), 10));
  EXPECT_EQ(deadline_of(kL, "k", token_of(grant)), secs(14));
}

TEST_F(EngineTest, TwoPhase_WaitTwiceIsNotEnqueued) {
  Reply grant = enqueue(kS1, "k");
  EXPECT_TRUE(IsOk(wait(kS1, "k", 5), 33));
  EXPECT_EQ(wait(kS1, "k", 5), only(Status::kErrorNotEnqueued));
  EXPECT_EQ(holder_sessions(kL, "k"), SessionList{kS1});  // still held after the second w
  EXPECT_EQ(release(kS1, "k", grant.token), only(Status::kOk));
}

TEST_F(EngineTest, TwoPhase_EnqueueAllowedAgainAfterSuccessfulWait) {
  Reply grant = enqueue(kS1, "k");
  EXPECT_TRUE(IsOk(wait(kS1, "k", 0), 33));
  // The record is gone; e again joins the queue behind its own holding.
  EXPECT_EQ(enqueue(kS1, "k"), only(Status::kQueued));
  EXPECT_EQ(release(kS1, "k", grant.token), only(Status::kOk));
  EXPECT_TRUE(IsOk(wait(kS1, "k", 0), 33));
}

TEST_F(EngineTest, Edge09_WaitAfterPromotedGrantExpiredIsLeaseExpiredThenEnqueueAllowed) {
  at(0);
  lock(kS1, "k", 0, 5);
  EXPECT_EQ(enqueue(kS2, "k", 5), only(Status::kQueued));
  tick_at(secs(5));  // S1's lease ends; S2 is promoted, lease until 10
  expect_no_deliveries();
  EXPECT_EQ(holder_sessions(kL, "k"), SessionList{kS2});
  tick_at(secs(10));  // S2 never sent w; its lease ends
  EXPECT_EQ(holders(kL, "k").size(), 0u);
  at(12);
  EXPECT_EQ(wait(kS2, "k", 10), only(Status::kErrorLeaseExpired));
  EXPECT_EQ(wait(kS2, "k", 10), only(Status::kErrorNotEnqueued));
  EXPECT_TRUE(IsAcquired(enqueue(kS2, "k", 5), 5));
}

TEST_F(EngineTest, TwoPhase_WaitAfterFastPathGrantExpiredIsLeaseExpired) {
  at(0);
  enqueue(kS1, "k", 5);
  at(5);
  EXPECT_EQ(wait(kS1, "k", 0), only(Status::kErrorLeaseExpired));
  EXPECT_EQ(wait(kS1, "k", 0), only(Status::kErrorNotEnqueued));
}

TEST_F(EngineTest, TwoPhase_EnqueueDiscardsExpiredRecord) {
  at(0);
  enqueue(kS1, "k", 5);
  at(6);
  Reply again = enqueue(kS1, "k", 5);
  ASSERT_TRUE(IsAcquired(again, 5));
  EXPECT_EQ(wait(kS1, "k", 0), Reply::granted(Status::kOk, token_of(again), 5));
}

TEST_F(EngineTest, TwoPhase_WaitTimeoutZeroOnWaitingRecordLeavesQueue) {
  Reply first = lock(kS1, "k", 0);
  EXPECT_EQ(enqueue(kS2, "k"), only(Status::kQueued));
  EXPECT_EQ(wait(kS2, "k", 0), only(Status::kTimeout));
  EXPECT_EQ(waiters(kL, "k"), SessionList{});
  EXPECT_EQ(wait(kS2, "k", 0), only(Status::kErrorNotEnqueued));
  EXPECT_EQ(release(kS1, "k", first.token), only(Status::kOk));
  EXPECT_EQ(holders(kL, "k").size(), 0u);  // nobody was promoted
  EXPECT_TRUE(IsAcquired(enqueue(kS2, "k"), 33));
}

TEST_F(EngineTest, TwoPhase_ParkedWaitTimesOutAndRemovesWaiterAndRecord) {
  at(0);
  lock(kS1, "k", 0, 100);
  EXPECT_EQ(enqueue(kS2, "k"), only(Status::kQueued));
  at(1);
  EXPECT_EQ(wait(kS2, "k", 5), Reply::parked());
  tick_at(secs(6) - kNs);
  expect_no_deliveries();
  tick_at(secs(6));
  EXPECT_EQ(delivered_to(kS2), only(Status::kTimeout));
  EXPECT_EQ(waiters(kL, "k"), SessionList{});
  EXPECT_EQ(wait(kS2, "k", 5), only(Status::kErrorNotEnqueued));
  EXPECT_EQ(enqueue(kS2, "k"), only(Status::kQueued));
}

TEST_F(EngineTest, TwoPhase_ParkedWaitIsGrantedWithTheEnqueueLease) {
  at(0);
  Reply first = lock(kS1, "k", 0, 100);
  EXPECT_EQ(enqueue(kS2, "k", 20), only(Status::kQueued));
  at(1);
  EXPECT_EQ(wait(kS2, "k", 30), Reply::parked());
  at(2);
  EXPECT_EQ(release(kS1, "k", first.token), only(Status::kOk));
  Reply granted = delivered_to(kS2);
  ASSERT_TRUE(IsOk(granted, 20));
  EXPECT_EQ(deadline_of(kL, "k", token_of(granted)), secs(22));
  EXPECT_EQ(wait(kS2, "k", 30), only(Status::kErrorNotEnqueued));
}

TEST_F(EngineTest, TwoPhase_ReleaseOfPendingGrantRemovesRecord) {
  Reply grant = enqueue(kS1, "k");
  EXPECT_EQ(release(kS2, "k", grant.token), only(Status::kOk));
  EXPECT_EQ(wait(kS1, "k", 0), only(Status::kErrorNotEnqueued));
  EXPECT_TRUE(IsAcquired(enqueue(kS1, "k"), 33));
}

TEST_F(EngineTest, TwoPhase_ReleaseOfPromotedUnwaitedGrantRemovesRecord) {
  Reply first = lock(kS1, "k", 0);
  EXPECT_EQ(enqueue(kS2, "k"), only(Status::kQueued));
  EXPECT_EQ(release(kS1, "k", first.token), only(Status::kOk));
  Token promoted = only_holder_token(kL, "k");
  EXPECT_EQ(release(kS3, "k", promoted), only(Status::kOk));
  EXPECT_EQ(wait(kS2, "k", 0), only(Status::kErrorNotEnqueued));
}

TEST_F(EngineTest, Edge22_PromotedTwoPhaseWaiterRecordSwitchesToGranted) {
  at(0);
  Reply first = lock(kS1, "k", 0, 100);
  EXPECT_EQ(enqueue(kS2, "k", 20), only(Status::kQueued));
  at(3);
  EXPECT_EQ(release(kS1, "k", first.token), only(Status::kOk));
  expect_no_deliveries();  // S2 has not sent w: nothing to deliver
  Token promoted = only_holder_token(kL, "k");
  EXPECT_GT(promoted.fence, token_of(first).fence);
  EXPECT_EQ(holder_sessions(kL, "k"), SessionList{kS2});
  EXPECT_EQ(deadline_of(kL, "k", promoted), secs(23));  // the lease runs from the promotion
  EXPECT_EQ(enqueue(kS2, "k"), only(Status::kErrorAlreadyEnqueued));
  at(5);
  EXPECT_EQ(wait(kS2, "k", 0), Reply::granted(Status::kOk, promoted, 20));
  EXPECT_EQ(deadline_of(kL, "k", promoted), secs(25));
}

TEST_F(EngineTest, Edge22_PromotedTwoPhaseGrantExpiringNeverBlocksEnqueueForever) {
  at(0);
  lock(kS1, "k", 0, 5);
  EXPECT_EQ(enqueue(kS2, "k", 5), only(Status::kQueued));
  tick_at(secs(5));   // S1's lease ends; S2 is promoted
  tick_at(secs(10));  // S2 never sent w; its lease ends
  EXPECT_EQ(holders(kL, "k").size(), 0u);
  EXPECT_TRUE(IsAcquired(enqueue(kS2, "k", 5), 5));
}

TEST_F(EngineTest, TwoPhase_SemaphoreEnqueueAndWait) {
  Reply a = sem_enqueue(kS1, "s", 2, 10);
  ASSERT_TRUE(IsAcquired(a, 10));
  EXPECT_TRUE(IsAcquired(sem_enqueue(kS2, "s", 2), 33));
  EXPECT_EQ(sem_enqueue(kS3, "s", 2, 7), only(Status::kQueued));
  EXPECT_EQ(sem_enqueue(kS3, "s", 2), only(Status::kErrorAlreadyEnqueued));
  EXPECT_EQ(sem_wait(kS3, "s", 10), Reply::parked());
  EXPECT_EQ(sem_release(kS1, "s", a.token), only(Status::kOk));
  EXPECT_TRUE(IsOk(delivered_to(kS3), 7));
  EXPECT_EQ(sem_wait(kS3, "s", 10), only(Status::kErrorNotEnqueued));
  EXPECT_TRUE(IsOk(sem_wait(kS2, "s", 0), 33));
}

// ============================================================================================
// Closed sessions
// ============================================================================================

TEST_F(EngineTest, Close_ParkedRequestIsDroppedWithoutReply) {
  at(0);
  Reply first = lock(kS1, "k", 0, 100);
  EXPECT_EQ(lock(kS2, "k", 10), Reply::parked());
  at(1);
  EXPECT_TRUE(close(kS2));  // the driver must complete the dropped request itself
  expect_no_deliveries();
  EXPECT_EQ(waiters(kL, "k"), SessionList{});
  tick_at(secs(20));  // past the dropped request's timeout
  expect_no_deliveries();
  EXPECT_EQ(release(kS1, "k", first.token), only(Status::kOk));
  expect_no_deliveries();
  EXPECT_EQ(holders(kL, "k").size(), 0u);
}

TEST_F(EngineTest, Close_ParkedWaitIsDroppedWithoutReply) {
  Reply first = lock(kS1, "k", 0);
  EXPECT_EQ(enqueue(kS2, "k"), only(Status::kQueued));
  EXPECT_EQ(wait(kS2, "k", 10), Reply::parked());
  EXPECT_TRUE(close(kS2, /*auto_release=*/false));
  EXPECT_EQ(release(kS1, "k", first.token), only(Status::kOk));
  expect_no_deliveries();
  EXPECT_EQ(holders(kL, "k").size(), 0u);
}

TEST_F(EngineTest, Edge17_WaitersAndRecordsRemovedEvenWithoutAutoRelease) {
  Reply a = lock(kS1, "a", 0);
  EXPECT_EQ(enqueue(kS2, "a"), only(Status::kQueued));  // waiting record
  Reply b = enqueue(kS2, "b");                          // granted record
  ASSERT_TRUE(IsAcquired(b, 33));
  Reply c = sem_lock(kS1, "c", 0, 1);
  EXPECT_EQ(sem_lock(kS2, "c", 10, 1), Reply::parked());  // parked waiter
  close(kS2, /*auto_release=*/false);
  expect_no_deliveries();
  EXPECT_EQ(waiters(kL, "a"), SessionList{});
  EXPECT_EQ(waiters(kSem, "c"), SessionList{});
  EXPECT_EQ(holder_sessions(kL, "b"), SessionList{kS2});  // no auto-release: still held
  EXPECT_EQ(release(kS1, "a", a.token), only(Status::kOk));
  EXPECT_EQ(holders(kL, "a").size(), 0u);
  EXPECT_EQ(sem_release(kS1, "c", c.token), only(Status::kOk));
  expect_no_deliveries();
}

TEST_F(EngineTest, Close_RemovesGrantedTwoPhaseRecordSoItCannotPinTheResource) {
  configure(config_with_gc(Duration::seconds(10)));
  at(0);
  EXPECT_TRUE(IsAcquired(enqueue(kS1, "k", 5), 5));
  close(kS1, /*auto_release=*/false);
  EXPECT_EQ(holder_sessions(kL, "k"), SessionList{kS1});  // no auto-release: still held
  tick_at(secs(5));  // the lease ends; no record is left to become expired
  tick_at(secs(10) + kNs);
  EXPECT_EQ(resources(), 0u);  // compare Gc_ExpiredTwoPhaseRecordKeepsResource...
}

TEST_F(EngineTest, Close_AutoReleaseReleasesHoldingsAndPromotes) {
  lock(kS1, "a", 0);
  sem_lock(kS1, "s", 0, 2);
  sem_lock(kS1, "s", 0, 2);
  enqueue(kS1, "e");
  EXPECT_EQ(lock(kS2, "a", 10), Reply::parked());
  EXPECT_EQ(enqueue(kS3, "e"), only(Status::kQueued));
  close(kS1, /*auto_release=*/true);
  EXPECT_TRUE(IsOk(delivered_to(kS2), 33));
  EXPECT_EQ(holder_sessions(kL, "a"), SessionList{kS2});
  EXPECT_EQ(holders(kSem, "s").size(), 0u);
  EXPECT_EQ(holder_sessions(kL, "e"), SessionList{kS3});  // promoted, record granted
  EXPECT_TRUE(IsOk(wait(kS3, "e", 0), 33));
}

TEST_F(EngineTest, Close_WithoutAutoReleaseHoldingsLiveUntilLeaseEnd) {
  at(0);
  lock(kS1, "k", 0, 10);
  EXPECT_EQ(lock(kS2, "k", 30), Reply::parked());
  at(2);
  close(kS1, /*auto_release=*/false);
  expect_no_deliveries();
  EXPECT_EQ(holder_sessions(kL, "k"), SessionList{kS1});
  tick_at(secs(10));
  EXPECT_TRUE(IsOk(delivered_to(kS2), 33));
}

TEST_F(EngineTest, Close_WithoutAutoReleaseHoldingCanBeReleasedOrRenewedByToken) {
  at(0);
  Reply grant = lock(kS1, "k", 0, 10);
  EXPECT_EQ(lock(kS2, "k", 30), Reply::parked());
  close(kS1, /*auto_release=*/false);
  at(1);
  EXPECT_EQ(renew(kS3, "k", grant.token, 10), Reply::renewed(10));
  EXPECT_EQ(release(kS3, "k", grant.token), only(Status::kOk));
  EXPECT_TRUE(IsOk(delivered_to(kS2), 33));
}

TEST_F(EngineTest, Close_PromotesSemaphoreWaitersInFifoOrder) {
  sem_lock(kS1, "s", 0, 2);
  sem_lock(kS1, "s", 0, 2);
  EXPECT_EQ(sem_lock(kS2, "s", 10, 2), Reply::parked());
  EXPECT_EQ(sem_lock(kS3, "s", 10, 2), Reply::parked());
  EXPECT_EQ(sem_lock(kS4, "s", 10, 2), Reply::parked());
  close(kS1);
  std::vector<Delivery> deliveries = take_deliveries();
  ASSERT_EQ(deliveries.size(), 2u) << describe(deliveries);
  EXPECT_EQ(deliveries[0].session, kS2);
  EXPECT_EQ(deliveries[1].session, kS3);
  EXPECT_LT(token_of(deliveries[0].reply).fence, token_of(deliveries[1].reply).fence);
  EXPECT_EQ(waiters(kSem, "s"), SessionList{kS4});
}

TEST_F(EngineTest, Close_ReportsWhetherAParkedRequestWasDropped) {
  Reply first = lock(kS1, "k", 0);
  EXPECT_EQ(enqueue(kS2, "k"), only(Status::kQueued));  // queued, not parked
  EXPECT_FALSE(close(kS2));
  EXPECT_EQ(lock(kS3, "k", 10), Reply::parked());
  EXPECT_EQ(release(kS1, "k", first.token), only(Status::kOk));
  EXPECT_TRUE(IsOk(delivered_to(kS3), 33));
  EXPECT_FALSE(close(kS3));  // its request was answered: nothing parked any more
  EXPECT_FALSE(close(kS1));
}

TEST_F(EngineTest, Close_UnknownSessionIsHarmless) {
  EXPECT_FALSE(close(kS5, true));
  EXPECT_FALSE(close(kS5, false));
  expect_no_deliveries();
  EXPECT_EQ(resources(), 0u);
}

TEST_F(EngineTest, Edge03_CloseOfSessionHoldingNothingStillRemovesItsWaiters) {
  lock(kS1, "a", 0);
  lock(kS1, "b", 0);
  EXPECT_EQ(enqueue(kS2, "b"), only(Status::kQueued));
  EXPECT_EQ(lock(kS2, "a", 10), Reply::parked());
  close(kS2, /*auto_release=*/true);
  EXPECT_EQ(waiters(kL, "a"), SessionList{});
  EXPECT_EQ(waiters(kL, "b"), SessionList{});
}

TEST_F(EngineTest, Edge14_ClosedSessionsWaiterIsSkipped) {
  Reply first = lock(kS1, "k", 0);
  EXPECT_EQ(lock(kS2, "k", 10), Reply::parked());
  EXPECT_EQ(enqueue(kS3, "k"), only(Status::kQueued));
  EXPECT_EQ(lock(kS4, "k", 10), Reply::parked());
  close(kS2);
  close(kS3, /*auto_release=*/false);
  EXPECT_EQ(waiters(kL, "k"), SessionList{kS4});
  EXPECT_EQ(release(kS1, "k", first.token), only(Status::kOk));
  EXPECT_TRUE(IsOk(delivered_to(kS4), 33));
}

TEST_F(EngineTest, Edge19_GrantDeliveredToAClosedSessionPassesOnWhenGivenBackByToken) {
  Reply first = lock(kS1, "k", 0);
  EXPECT_EQ(lock(kS2, "k", 10), Reply::parked());
  EXPECT_EQ(lock(kS3, "k", 10), Reply::parked());
  EXPECT_EQ(release(kS1, "k", first.token), only(Status::kOk));
  Reply raced = delivered_to(kS2);  // S2 is already gone; its session layer gives it back
  EXPECT_EQ(release(kS2, "k", raced.token), only(Status::kOk));
  EXPECT_TRUE(IsOk(delivered_to(kS3), 33));
}

TEST_F(EngineTest, Edge19_GrantDeliveredToAClosedSessionPassesOnWithAutoRelease) {
  Reply first = lock(kS1, "k", 0);
  EXPECT_EQ(lock(kS2, "k", 10), Reply::parked());
  EXPECT_EQ(lock(kS3, "k", 10), Reply::parked());
  EXPECT_EQ(release(kS1, "k", first.token), only(Status::kOk));
  EXPECT_TRUE(IsOk(delivered_to(kS2), 33));
  close(kS2, /*auto_release=*/true);
  EXPECT_TRUE(IsOk(delivered_to(kS3), 33));
}

TEST_F(EngineTest, Edge35_ClosedSessionsPromotedTwoPhaseGrantPassesToNextWaiter) {
  Reply first = lock(kS1, "k", 0);
  EXPECT_EQ(enqueue(kS2, "k"), only(Status::kQueued));
  EXPECT_EQ(lock(kS3, "k", 10), Reply::parked());
  EXPECT_EQ(release(kS1, "k", first.token), only(Status::kOk));
  expect_no_deliveries();  // S2 promoted, record granted, no w yet
  close(kS2, /*auto_release=*/true);
  EXPECT_TRUE(IsOk(delivered_to(kS3), 33));
}

// ============================================================================================
// Garbage collection
// ============================================================================================

TEST_F(EngineTest, Gc_DeletesOnlyWhenIdleStrictlyLongerThanMaxIdle) {
  configure(config_with_gc(Duration::seconds(10)));
  at(0);
  Reply grant = lock(kS1, "k", 0);
  EXPECT_EQ(release(kS1, "k", grant.token), only(Status::kOk));
  tick_at(secs(10));
  EXPECT_EQ(resources(), 1u);
  EXPECT_EQ(engine().counters().resources_collected, 0u);
  tick_at(secs(10) + kNs);
  EXPECT_EQ(resources(), 0u);
  EXPECT_EQ(engine().counters().resources_collected, 1u);
}

TEST_F(EngineTest, Gc_UseWhileIdleDefersCollectionToStrictlyAfterTheNewLastUse) {
  configure(config_with_gc(Duration::seconds(10)));
  at(0);
  Reply first = lock(kS1, "k", 0);
  EXPECT_EQ(release(kS1, "k", first.token), only(Status::kOk));  // collectable after 10 s
  at(secs(0) + kNs);
  Reply second = lock(kS1, "k", 0);
  EXPECT_EQ(release(kS1, "k", second.token), only(Status::kOk));  // last use now 1 ns later
  tick_at(secs(10) + kNs);                                        // idle exactly 10 s: not yet
  EXPECT_EQ(resources(), 1u);
  tick_at(secs(10) + kNs + kNs);
  EXPECT_EQ(resources(), 0u);
}

TEST_F(EngineTest, Edge07_GcMaxIdleZeroPrunesNextInstant) {
  configure(config_with_gc(Duration::zero()));
  at(0);
  Reply grant = lock(kS1, "k", 0);
  EXPECT_EQ(release(kS1, "k", grant.token), only(Status::kOk));
  tick();
  EXPECT_EQ(resources(), 1u);
  tick_at(secs(0) + kNs);
  EXPECT_EQ(resources(), 0u);
}

TEST_F(EngineTest, Gc_CollectedKeyForgetsItsLimit) {
  configure(config_with_gc(Duration::seconds(10)));
  at(0);
  Reply grant = sem_lock(kS1, "s", 0, 3);
  EXPECT_EQ(sem_release(kS1, "s", grant.token), only(Status::kOk));
  at(11);
  EXPECT_TRUE(IsOk(sem_lock(kS1, "s", 0, 2), 33));
  EXPECT_EQ(resource(kSem, "s")->limit, 2);
}

TEST_F(EngineTest, Gc_NeverWhileHeld) {
  configure(config_with_gc(Duration::seconds(10)));
  at(0);
  lock(kS1, "k", 0, 100);
  sem_lock(kS1, "s", 0, 2, 100);
  enqueue(kS1, "e", 100);
  tick_at(secs(99));
  EXPECT_EQ(resources(), 3u);
}

TEST_F(EngineTest, Gc_RunsAfterALeaseExpiryAtTheSameInstant) {
  configure(config_with_gc(Duration::seconds(5)));
  at(0);
  lock(kS1, "k", 0, 10);  // last use at 0; a lease ending is no use
  tick_at(secs(10));
  EXPECT_EQ(resources(), 0u);
}

TEST_F(EngineTest, Gc_ExpiredTwoPhaseRecordKeepsResourceUntilDiscardedByWait) {
  configure(config_with_gc(Duration::seconds(10)));
  at(0);
  enqueue(kS1, "k", 5);
  tick_at(secs(100));
  EXPECT_EQ(resources(), 1u);
  EXPECT_EQ(wait(kS1, "k", 0), only(Status::kErrorLeaseExpired));
  tick_at(secs(111));
  EXPECT_EQ(resources(), 0u);
}

TEST_F(EngineTest, Gc_ExpiredTwoPhaseRecordKeepsResourceUntilSessionCloses) {
  configure(config_with_gc(Duration::seconds(10)));
  at(0);
  enqueue(kS1, "k", 5);
  tick_at(secs(100));
  EXPECT_EQ(resources(), 1u);
  close(kS1, /*auto_release=*/false);
  tick_at(secs(101));
  EXPECT_EQ(resources(), 0u);
}

// ============================================================================================
// Fences and tokens
// ============================================================================================

TEST_F(EngineTest, Fence_FirstFenceIsFloorPlusOne) {
  EngineConfig config;
  config.fence_floor = Fence{1000};
  configure(config);
  EXPECT_EQ(engine().last_fence(), Fence{1000});
  Reply grant = lock(kS1, "k", 0);
  EXPECT_EQ(token_of(grant).fence, Fence{1001});
  EXPECT_EQ(engine().last_fence(), Fence{1001});
  EXPECT_EQ(engine().counters().grants, 1u);
}

TEST_F(EngineTest, Fence_StrictlyIncreasesAcrossKeysGrantsPromotionsAndSemaphoreSlots) {
  EngineConfig config;
  config.fence_floor = Fence{1'700'000'000'000'000'000};
  configure(config);
  std::vector<Fence> fences;
  auto record = [&](const Reply& reply) { fences.push_back(token_of(reply).fence); };
  at(0);
  Reply a = lock(kS1, "a", 0, 10);
  record(a);
  record(sem_lock(kS1, "s", 0, 3, 10));
  record(sem_lock(kS2, "s", 0, 3, 10));
  Reply s3 = sem_lock(kS3, "s", 0, 3, 10);
  record(s3);
  record(enqueue(kS1, "b", 10));
  record(sem_enqueue(kS4, "s2", 2, 10));
  EXPECT_EQ(lock(kS2, "a", 30), Reply::parked());
  EXPECT_EQ(enqueue(kS3, "a"), only(Status::kQueued));
  EXPECT_EQ(sem_lock(kS4, "s", 30, 3), Reply::parked());
  at(1);
  EXPECT_EQ(release(kS1, "a", a.token), only(Status::kOk));
  record(delivered_to(kS2));  // promotion of a parked request
  EXPECT_EQ(sem_release(kS3, "s", s3.token), only(Status::kOk));
  record(delivered_to(kS4));
  tick_at(secs(11));  // the leases granted at 0 end at 10; nobody waits for them
  expect_no_deliveries();
  tick_at(secs(34));  // S2's lease on a (granted at 1) ends; S3's two-phase waiter is promoted
  fences.push_back(only_holder_token(kL, "a").fence);
  for (std::size_t i = 1; i < fences.size(); ++i) {
    EXPECT_LT(fences[i - 1], fences[i]) << "grant " << i;
  }
  EXPECT_EQ(fences.front(), Fence{1'700'000'000'000'000'001});
  EXPECT_EQ(engine().last_fence(), fences.back());
  EXPECT_EQ(engine().counters().grants, fences.size());
}

TEST_F(EngineTest, Token_WireFormatIs32LowercaseHexWithBigEndianFence) {
  EngineConfig config;
  config.fence_floor = Fence{0x0123456789abcdeeULL};
  configure(config);
  Reply grant = lock(kS1, "k", 0);
  Token token = token_of(grant);
  EXPECT_EQ(token.fence, Fence{0x0123456789abcdefULL});
  std::string text = token.to_string();
  ASSERT_EQ(text.size(), 32u);
  EXPECT_EQ(text.substr(0, 16), "0123456789abcdef");
  for (char c : text) {
    EXPECT_TRUE((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) << text;
  }
  EXPECT_EQ(Token::parse(text), token);
  EXPECT_EQ(release(kS1, "k", Token::parse(text)), only(Status::kOk));
}

TEST_F(EngineTest, Token_SaltComesFromTheInjectedSource) {
  configure(EngineConfig{}, /*seed=*/1);
  Token first = token_of(lock(kS1, "a", 0));
  configure(EngineConfig{}, /*seed=*/1);
  Token again = token_of(lock(kS1, "a", 0));
  configure(EngineConfig{}, /*seed=*/2);
  Token other = token_of(lock(kS1, "a", 0));
  EXPECT_EQ(first, again);
  EXPECT_EQ(first.fence, other.fence);
  EXPECT_NE(first.salt, other.salt);
}

TEST_F(EngineTest, Edge40_FenceNeverWrapsFastPathGetsError) {
  EngineConfig config;
  config.fence_floor = Fence{kU64Max - 2};
  configure(config);
  EXPECT_EQ(token_of(lock(kS1, "a", 0)).fence, Fence{kU64Max - 1});
  EXPECT_EQ(token_of(sem_lock(kS1, "b", 0, 2)).fence, Fence{kU64Max});
  EXPECT_EQ(sem_lock(kS2, "b", 0, 2), only(Status::kError));
  EXPECT_EQ(lock(kS2, "c", 0), only(Status::kError));
  EXPECT_EQ(enqueue(kS2, "d"), only(Status::kError));
  EXPECT_EQ(sem_enqueue(kS2, "e", 3), only(Status::kError));
  EXPECT_EQ(engine().last_fence(), Fence{kU64Max});
  EXPECT_EQ(engine().counters().grants, 2u);
  EXPECT_GE(engine().counters().fence_exhausted, 4u);
  EXPECT_EQ(holders(kSem, "b").size(), 1u);
  // A refused two-phase fast path leaves no record.
  EXPECT_EQ(wait(kS2, "d", 0), only(Status::kErrorNotEnqueued));
}

TEST_F(EngineTest, Fence_ExhaustedParkedWaiterAtHeadGetsError) {
  EngineConfig config;
  config.fence_floor = Fence{kU64Max - 1};
  configure(config);
  Reply grant = lock(kS1, "k", 0);
  EXPECT_EQ(token_of(grant).fence, Fence{kU64Max});
  EXPECT_EQ(lock(kS2, "k", 30), Reply::parked());
  EXPECT_EQ(lock(kS3, "k", 30), Reply::parked());
  EXPECT_EQ(release(kS1, "k", grant.token), only(Status::kOk));
  std::vector<Delivery> deliveries = take_deliveries();
  EXPECT_EQ(deliveries,
            (std::vector<Delivery>{{kS2, only(Status::kError)}, {kS3, only(Status::kError)}}))
      << describe(deliveries);
  EXPECT_EQ(waiters(kL, "k"), SessionList{});
  EXPECT_EQ(holders(kL, "k").size(), 0u);
  EXPECT_EQ(engine().last_fence(), Fence{kU64Max});
}

TEST_F(EngineTest, Fence_ExhaustedTwoPhaseWaiterAtHeadLosesItsRecord) {
  EngineConfig config;
  config.fence_floor = Fence{kU64Max - 1};
  configure(config);
  Reply grant = lock(kS1, "k", 0);
  EXPECT_EQ(enqueue(kS2, "k"), only(Status::kQueued));
  EXPECT_EQ(release(kS1, "k", grant.token), only(Status::kOk));
  expect_no_deliveries();  // not parked: nothing to answer
  EXPECT_EQ(waiters(kL, "k"), SessionList{});
  EXPECT_EQ(wait(kS2, "k", 10), only(Status::kErrorNotEnqueued));
}

// ============================================================================================
// Clock regressions
// ============================================================================================

TEST_F(EngineTest, Clock_RegressionIsCountedAndTreatedAsTheLargestInstant) {
  at(10);
  lock(kS1, "a", 0, 5);
  EXPECT_EQ(engine().counters().clock_regressions, 0u);
  at(4);
  Reply grant = lock(kS1, "b", 0, 5);
  EXPECT_EQ(engine().counters().clock_regressions, 1u);
  EXPECT_EQ(engine().now(), secs(10));
  EXPECT_EQ(deadline_of(kL, "b", token_of(grant)), secs(15));
  tick();
  close(kS2);
  stats();
  EXPECT_EQ(engine().counters().clock_regressions, 4u);
  at(10);
  tick();  // equal is no regression
  EXPECT_EQ(engine().counters().clock_regressions, 4u);
}

TEST_F(EngineTest, Clock_RegressionDoesNotReviveALease) {
  at(0);
  Reply grant = lock(kS1, "k", 0, 10);
  tick_at(secs(10));
  at(5);
  EXPECT_EQ(renew(kS1, "k", grant.token), only(Status::kError));
  EXPECT_EQ(release(kS1, "k", grant.token), only(Status::kError));
  EXPECT_EQ(holders(kL, "k").size(), 0u);
}

TEST_F(EngineTest, Clock_RegressionDoesNotExtendALease) {
  at(0);
  Reply grant = lock(kS1, "k", 0, 10);
  tick_at(secs(8));
  at(2);
  EXPECT_EQ(renew(kS1, "k", grant.token, 5), Reply::renewed(5));
  EXPECT_EQ(deadline_of(kL, "k", token_of(grant)), secs(13));  // 8 + 5, not 2 + 5 or later
}

// Regression (found by EngineModel with clock jumps near the end of time): a GC timer that
// saturated at Instant::max() re-armed itself at the same instant, and advance() never returned.
TEST_F(EngineTest, Clock_NearTheEndOfTimeDoesNotHang) {
  at(Instant::max() - kNs);
  EXPECT_EQ(lock(kS1, "k", 0, 1).status, Status::kOk);
  tick_at(Instant::max());
  EXPECT_EQ(resources(), 1u);  // never idle for longer than gc_max_idle: time has run out
  tick_at(Instant::max());
  EXPECT_EQ(lock(kS2, "k", 0, 1).status, Status::kOk);  // the lease ended at the saturated deadline
}

TEST_F(EngineTest, Clock_RegressionDoesNotMoveWaitDeadlines) {
  at(0);
  lock(kS1, "k", 0, 100);
  at(5);
  EXPECT_EQ(lock(kS2, "k", 5), Reply::parked());  // times out at 10
  at(1);
  EXPECT_EQ(enqueue(kS3, "k"), only(Status::kQueued));
  EXPECT_EQ(wait(kS3, "k", 5), Reply::parked());  // arrives "at 5": times out at 10 as well
  tick_at(secs(10) - kNs);
  expect_no_deliveries();
  tick_at(secs(10));
  std::vector<Delivery> deliveries = take_deliveries();
  ASSERT_EQ(deliveries.size(), 2u) << describe(deliveries);
  EXPECT_EQ(deliveries[0].reply, only(Status::kTimeout));
  EXPECT_EQ(deliveries[1].reply, only(Status::kTimeout));
}

// ============================================================================================
// next_wake and tick
// ============================================================================================

TEST_F(EngineTest, NextWake_NothingWhenIdle) {
  EXPECT_FALSE(engine().next_wake().has_value());
  configure(config_with_gc(Duration::seconds(10)));
  at(0);
  Reply grant = lock(kS1, "k", 0);
  EXPECT_EQ(release(kS1, "k", grant.token), only(Status::kOk));
  ASSERT_TRUE(engine().next_wake().has_value());
  tick_at(*engine().next_wake());
  EXPECT_EQ(resources(), 0u);
  EXPECT_FALSE(engine().next_wake().has_value());
}

TEST_F(EngineTest, NextWake_ReportsTheEarliestDeadline) {
  configure(config_with_gc(Duration::seconds(60)));
  at(0);
  Reply grant = lock(kS1, "k", 0, 10);
  EXPECT_EQ(engine().next_wake(), secs(10));  // the lease; a held resource has no GC due
  at(1);
  EXPECT_EQ(lock(kS2, "k", 5), Reply::parked());
  EXPECT_EQ(engine().next_wake(), secs(6));  // the wait timeout
  tick_at(secs(6));
  EXPECT_EQ(delivered_to(kS2), only(Status::kTimeout));
  EXPECT_EQ(engine().next_wake(), secs(10));
  at(7);
  EXPECT_EQ(release(kS1, "k", grant.token), only(Status::kOk));
  EXPECT_EQ(engine().next_wake(), secs(67) + kNs);  // GC: idle strictly longer than 60 s
}

TEST_F(EngineTest, NextWake_TickAtItDoesTheWork) {
  at(0);
  lock(kS1, "k", 0, 10);
  EXPECT_EQ(lock(kS2, "k", 30), Reply::parked());
  ASSERT_EQ(engine().next_wake(), secs(10));
  tick_at(*engine().next_wake());
  EXPECT_TRUE(IsOk(delivered_to(kS2), 33));
  EXPECT_EQ(engine().next_wake(), secs(43));
}

TEST_F(EngineTest, Tick_BeforeAnyDeadlineDoesNothing) {
  at(0);
  Reply grant = lock(kS1, "k", 0, 10);
  tick_at(secs(5));
  expect_no_deliveries();
  EXPECT_EQ(deadline_of(kL, "k", token_of(grant)), secs(10));
  EXPECT_EQ(engine().now(), secs(5));
}

// ============================================================================================
// Stats
// ============================================================================================

TEST_F(EngineTest, Stats_HeldLockShowsOwnerLeaseRemainingAndWaiters) {
  at(0);
  lock(kS1, "k", 0, 10);
  EXPECT_EQ(lock(kS2, "k", 30), Reply::parked());
  EXPECT_EQ(enqueue(kS3, "k"), only(Status::kQueued));
  at(millis(2500));
  StatsSnapshot snapshot = stats();
  ASSERT_EQ(snapshot.locks.size(), 1u);
  EXPECT_EQ(snapshot.locks[0].key, "k");
  EXPECT_EQ(snapshot.locks[0].owner, kS1);
  EXPECT_DOUBLE_EQ(snapshot.locks[0].lease_expires_in_s, 7.5);
  EXPECT_EQ(snapshot.locks[0].waiters, 2);
  EXPECT_TRUE(snapshot.semaphores.empty());
  EXPECT_TRUE(snapshot.idle_locks.empty());
  EXPECT_TRUE(snapshot.idle_semaphores.empty());
  EXPECT_FALSE(snapshot.truncated);
}

TEST_F(EngineTest, Stats_SemaphoreWithLimitOneIsListedAsLock) {
  at(0);
  sem_lock(kS2, "s1", 0, 1, 10);
  sem_lock(kS2, "s2", 0, 2, 10);
  StatsSnapshot snapshot = stats();
  EXPECT_EQ(snapshot.locks, (std::vector<LockStats>{{"s1", kS2, 10.0, 0}}));
  EXPECT_EQ(snapshot.semaphores, (std::vector<SemaphoreStats>{{"s2", 2, 1, 0}}));
}

TEST_F(EngineTest, Stats_SemaphoreShowsLimitHoldersAndWaiters) {
  sem_lock(kS1, "s", 0, 2);
  sem_lock(kS2, "s", 0, 2);
  EXPECT_EQ(sem_lock(kS3, "s", 10, 2), Reply::parked());
  EXPECT_EQ(stats().semaphores, (std::vector<SemaphoreStats>{{"s", 2, 2, 1}}));
}

TEST_F(EngineTest, Stats_WaiterOnlyLockNeverArisesSoOwnerIsTheHolder) {
  // A lock's queue is non-empty only while it is held, so owner_conn_id 0 (waiters, no holder)
  // is never reported: the holder survives as owner even after its session closed.
  at(0);
  lock(kS1, "k", 0, 10);
  EXPECT_EQ(enqueue(kS2, "k"), only(Status::kQueued));
  close(kS1, /*auto_release=*/false);
  StatsSnapshot snapshot = stats();
  EXPECT_EQ(snapshot.locks, (std::vector<LockStats>{{"k", kS1, 10.0, 1}}));
  tick_at(secs(10));
  snapshot = stats();
  EXPECT_EQ(snapshot.locks, (std::vector<LockStats>{{"k", kS2, 33.0, 0}}));
}

TEST_F(EngineTest, Stats_IdleResourcesShowIdleSeconds) {
  at(1);
  Reply a = lock(kS1, "k", 0);
  EXPECT_EQ(release(kS1, "k", a.token), only(Status::kOk));
  at(2);
  Reply b = sem_lock(kS1, "s", 0, 2);
  EXPECT_EQ(sem_release(kS1, "s", b.token), only(Status::kOk));
  at(millis(4500));
  StatsSnapshot snapshot = stats();
  EXPECT_EQ(snapshot.idle_locks, (std::vector<IdleStats>{{"k", 3.5}}));
  EXPECT_EQ(snapshot.idle_semaphores, (std::vector<IdleStats>{{"s", 2.5}}));
  EXPECT_TRUE(snapshot.locks.empty());
  EXPECT_TRUE(snapshot.semaphores.empty());
}

TEST_F(EngineTest, Stats_ExpiredTwoPhaseRecordResourceIsIdle) {
  at(0);
  enqueue(kS1, "k", 5);
  at(8);
  StatsSnapshot snapshot = stats();
  EXPECT_TRUE(snapshot.locks.empty());
  EXPECT_EQ(snapshot.idle_locks, (std::vector<IdleStats>{{"k", 8.0}}));
}

TEST_F(EngineTest, Edge15_StatsShowKeysWithoutNamespace) {
  lock(kS1, "k", 0);
  sem_lock(kS1, "k", 0, 2);
  StatsSnapshot snapshot = stats();
  ASSERT_EQ(snapshot.locks.size(), 1u);
  ASSERT_EQ(snapshot.semaphores.size(), 1u);
  EXPECT_EQ(snapshot.locks[0].key, "k");
  EXPECT_EQ(snapshot.semaphores[0].key, "k");
}

TEST_F(EngineTest, Stats_ArraysAreSortedByKey) {
  for (std::string_view key : {"m", "b", "z", "a"}) {
    lock(kS1, key, 0);
    sem_lock(kS1, key, 0, 3);
    Reply idle_lock = lock(kS1, std::string(key) + "-idle", 0);
    release(kS1, std::string(key) + "-idle", idle_lock.token);
    Reply idle_sem = sem_lock(kS1, std::string(key) + "-idle", 0, 3);
    sem_release(kS1, std::string(key) + "-idle", idle_sem.token);
  }
  StatsSnapshot snapshot = stats();
  std::vector<std::string> want = {"a", "b", "m", "z"};
  std::vector<std::string> want_idle = {"a-idle", "b-idle", "m-idle", "z-idle"};
  std::vector<std::string> locks, semaphores, idle_locks, idle_semaphores;
  for (const auto& entry : snapshot.locks) locks.push_back(entry.key);
  for (const auto& entry : snapshot.semaphores) semaphores.push_back(entry.key);
  for (const auto& entry : snapshot.idle_locks) idle_locks.push_back(entry.key);
  for (const auto& entry : snapshot.idle_semaphores) idle_semaphores.push_back(entry.key);
  EXPECT_EQ(locks, want);
  EXPECT_EQ(semaphores, want);
  EXPECT_EQ(idle_locks, want_idle);
  EXPECT_EQ(idle_semaphores, want_idle);
  EXPECT_FALSE(snapshot.truncated);
}

TEST_F(EngineTest, Stats_ArraysAreCutAtEntriesMaxAndMarkedTruncated) {
  EngineConfig config;
  config.stats_entries_max = 2;
  configure(config);
  for (std::string_view key : {"c", "a", "b"}) lock(kS1, key, 0);
  sem_lock(kS1, "s", 0, 2);
  StatsSnapshot snapshot = stats();
  ASSERT_EQ(snapshot.locks.size(), 2u);
  EXPECT_EQ(snapshot.locks[0].key, "a");
  EXPECT_EQ(snapshot.locks[1].key, "b");
  EXPECT_EQ(snapshot.semaphores.size(), 1u);
  EXPECT_TRUE(snapshot.truncated);
  // The totals (what /metrics reports) count every key, past the cut too.
  EXPECT_EQ(snapshot.totals.locks_held, 3);
  EXPECT_EQ(snapshot.totals.semaphore_holders, 1);

  Reply c = release(kS1, "c", only_holder_token(kL, "c"));
  EXPECT_EQ(c, only(Status::kOk));
  snapshot = stats();
  EXPECT_EQ(snapshot.locks.size(), 2u);
  EXPECT_EQ(snapshot.idle_locks.size(), 1u);
  EXPECT_FALSE(snapshot.truncated);
}

TEST_F(EngineTest, Stats_AdvancesTimeFirst) {
  at(0);
  lock(kS1, "k", 0, 10);
  EXPECT_EQ(lock(kS2, "k", 30, 20), Reply::parked());
  at(10);
  StatsSnapshot snapshot = stats();
  EXPECT_TRUE(IsOk(delivered_to(kS2), 20));
  EXPECT_EQ(snapshot.locks, (std::vector<LockStats>{{"k", kS2, 20.0, 0}}));
}

// ============================================================================================
// Determinism
// ============================================================================================

// Drives an engine through a fixed script touching every kind of input and returns every reply
// and delivery as text.
std::vector<std::string> run_script(std::uint64_t seed) {
  SplitMix64 salt(seed);
  EngineConfig config;
  config.gc_max_idle = Duration::seconds(3);
  config.fence_floor = Fence{5000};
  Engine engine(config, salt);
  std::vector<std::string> transcript;
  std::vector<Delivery> out;
  auto note = [&](const Reply& reply) {
    transcript.push_back(describe(reply));
    transcript.push_back(describe(out));
    out.clear();
  };
  auto request = [&](std::int64_t at_ms, std::uint64_t session, Command command, std::string key,
                     std::int64_t timeout_s, std::int64_t limit, std::int64_t lease_s,
                     std::optional<Token> token = std::nullopt) {
    Request r = test::keyed_request(command, key);
    r.timeout_s = timeout_s;
    r.limit = limit;
    r.lease_s = lease_s;
    r.token = token;
    Reply reply = engine.handle(millis(at_ms), SessionId{session}, r, out);
    note(reply);
    return reply;
  };
  Reply a = request(0, 1, Command::kLock, "a", 0, 1, 2);
  request(100, 2, Command::kLock, "a", 10, 1, 4);
  request(200, 3, Command::kEnqueue, "a", 0, 1, 0);
  request(300, 4, Command::kSemLock, "s", 0, 2, 1);
  Reply s = request(400, 5, Command::kSemLock, "s", 0, 2, 1);
  request(500, 6, Command::kSemLock, "s", 5, 2, 3);
  request(600, 1, Command::kRelease, "a", 0, 1, 0, a.token);
  request(700, 5, Command::kSemRenew, "s", 0, 1, 9, s.token);
  engine.tick(millis(2500), out);
  note(Reply::of(Status::kOk));
  request(2600, 3, Command::kWait, "a", 20, 1, 0);
  engine.close_session(millis(3000), SessionId{2}, true, out);
  note(Reply::of(Status::kOk));
  engine.tick(millis(40'000), out);
  note(Reply::of(Status::kOk));
  request(40'100, 7, Command::kSemEnqueue, "s", 0, 4, 0);
  transcript.push_back(std::to_string(engine.last_fence().value));
  transcript.push_back(std::to_string(engine.resources_count()));
  return transcript;
}

TEST(EngineDeterminism, SameSeedAndInputsGiveIdenticalReplies) {
  std::vector<std::string> first = run_script(42);
  std::vector<std::string> second = run_script(42);
  EXPECT_EQ(first, second);
  EXPECT_NE(first, run_script(43));  // the salts differ
}

}  // namespace
}  // namespace turnstile::core
