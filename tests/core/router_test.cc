// core/router.h: requests reach the engine that owns their key and come back to the session's
// owner; stats gather every engine's part; close notices reach exactly the shards touched; a
// dropped parked request comes back as a cancellation. Shards here are routers with their own
// engines, and the test moves their messages in a FIFO loop, as the drivers do.
#include "core/router.h"

#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/random.h"
#include "core/routing.h"
#include "testing/requests.h"

namespace turnstile::core {
namespace {

using test::lock_request;

class Shards : public EngineObserver {
 public:
  explicit Shards(std::size_t count, bool auto_release = true) {
    for (std::size_t i = 0; i < count; ++i) {
      salts_.push_back(std::make_unique<SplitMix64>(i + 1));
      engines_.push_back(std::make_unique<Engine>(EngineConfig{}, *salts_.back()));
      RouterConfig config;
      config.index = i;
      config.shards = count;
      config.auto_release = auto_release;
      routers_.push_back(std::make_unique<Router>(config, *engines_.back(), this));
    }
  }

  Router& at(std::size_t shard) { return *routers_.at(shard); }
  Engine& engine(std::size_t shard) { return *engines_.at(shard); }

  // Moves messages until every router is idle; every message sent is recorded.
  void settle() {
    while (true) {
      bool moved = false;
      for (auto& router : routers_) {
        for (Envelope& envelope : router->take_outbox()) {
          sent_.push_back({router->index(), envelope.to, envelope.message.index()});
          queue_.push_back(std::move(envelope));
          moved = true;
        }
        for (SessionEvent& event : router->take_events()) {
          events_.push_back(std::move(event));
          moved = true;
        }
      }
      if (!queue_.empty()) {
        Envelope envelope = std::move(queue_.front());
        queue_.pop_front();
        routers_.at(envelope.to)->receive(now_, std::move(envelope.message));
        moved = true;
      }
      if (!moved) return;
    }
  }

  // A key whose engine is `shard` (of the lock namespace).
  std::string key_on(std::size_t shard, int n = 0) const {
    for (int i = 0;; ++i) {
      std::string key = "key-" + std::to_string(i);
      if (core::shard_of(Namespace::kLock, key, routers_.size()) == shard && n-- == 0) return key;
    }
  }

  void on_engine_call(std::size_t shard, const Request*, const Reply*,
                      const std::vector<Delivery>&) override {
    ++calls_[shard];
  }

  struct Sent {
    std::size_t from;
    std::size_t to;
    std::size_t kind;  // RouterMessage::index()
  };

  Instant now_ = Instant::from_ns(1'000'000'000'000);
  std::vector<SessionEvent> events_;
  std::vector<Sent> sent_;
  std::map<std::size_t, int> calls_;

 private:
  std::vector<std::unique_ptr<SplitMix64>> salts_;
  std::vector<std::unique_ptr<Engine>> engines_;
  std::vector<std::unique_ptr<Router>> routers_;
  std::deque<Envelope> queue_;
};

constexpr std::size_t kEngineRequest = 0;
constexpr std::size_t kEngineReply = 1;
constexpr std::size_t kParked = 2;
constexpr std::size_t kCloseSession = 3;

TEST(Router, SessionIdsNameTheirOwner) {
  Shards shards(3);
  EXPECT_EQ(shards.at(1).new_session_id().value, 4U);  // 1 * 3 + 1
  EXPECT_EQ(shards.at(1).new_session_id().value, 7U);
  EXPECT_EQ(shards.at(0).new_session_id().value, 3U);
  EXPECT_EQ(shards.at(2).owner_of(SessionId{7}), 1U);
}

TEST(Router, ARequestForAnotherShardsKeyIsAnsweredOnTheOwner) {
  Shards shards(2);
  const SessionId session = shards.at(0).new_session_id();
  shards.at(0).submit(shards.now_, session, lock_request(shards.key_on(1), 0));
  shards.settle();
  ASSERT_EQ(shards.events_.size(), 1U);
  EXPECT_EQ(shards.events_[0].kind, SessionEvent::Kind::kReply);
  EXPECT_EQ(shards.events_[0].session, session);
  EXPECT_TRUE(shards.events_[0].reply.is_grant());
  ASSERT_EQ(shards.sent_.size(), 2U);
  EXPECT_EQ(shards.sent_[0].kind, kEngineRequest);
  EXPECT_EQ(shards.sent_[0].to, 1U);
  EXPECT_EQ(shards.sent_[1].kind, kEngineReply);
  EXPECT_EQ(shards.sent_[1].to, 0U);
  EXPECT_EQ(shards.calls_[1], 1);
  EXPECT_EQ(shards.calls_[0], 0);
}

TEST(Router, ALocalKeyNeedsNoMessage) {
  Shards shards(2);
  const SessionId session = shards.at(1).new_session_id();
  shards.at(1).submit(shards.now_, session, lock_request(shards.key_on(1), 0));
  EXPECT_FALSE(shards.at(1).idle());  // the event is there before any message moves
  shards.settle();
  EXPECT_TRUE(shards.sent_.empty());
  ASSERT_EQ(shards.events_.size(), 1U);
  EXPECT_TRUE(shards.events_[0].reply.is_grant());
}

TEST(Router, AParkedRequestIsNoticedThenAnsweredOnItsOwner) {
  Shards shards(2);
  const std::string key = shards.key_on(1);
  const SessionId holder = shards.at(1).new_session_id();
  const SessionId waiter = shards.at(0).new_session_id();
  shards.at(1).submit(shards.now_, holder, lock_request(key, 0));
  shards.settle();
  const Token token = *shards.events_.at(0).reply.token;
  shards.at(0).submit(shards.now_, waiter, lock_request(key, 30));
  shards.settle();
  ASSERT_EQ(shards.events_.size(), 2U);
  EXPECT_EQ(shards.events_[1].kind, SessionEvent::Kind::kParked);
  EXPECT_EQ(shards.events_[1].session, waiter);
  EXPECT_EQ(shards.sent_.back().kind, kParked);

  Request release;
  release.command = Command::kRelease;
  release.key = key;
  release.token = token;
  shards.at(1).submit(shards.now_, holder, release);
  shards.settle();
  ASSERT_EQ(shards.events_.size(), 4U);
  EXPECT_EQ(shards.events_[2].session, holder);  // ok
  EXPECT_EQ(shards.events_[3].session, waiter);  // the grant, delivered across shards
  EXPECT_EQ(shards.events_[3].kind, SessionEvent::Kind::kReply);
  EXPECT_TRUE(shards.events_[3].reply.is_grant());
}

TEST(Router, StatsGathersEveryShardsPartIntoOneEvent) {
  Shards shards(3);
  for (std::size_t shard = 0; shard < 3; ++shard) {
    const SessionId holder = shards.at(shard).new_session_id();
    shards.at(shard).submit(shards.now_, holder, lock_request(shards.key_on(shard), 0));
  }
  shards.settle();
  shards.events_.clear();
  const SessionId asker = shards.at(2).new_session_id();
  Request stats;
  stats.command = Command::kStats;
  shards.at(2).submit(shards.now_, asker, stats);
  shards.settle();
  ASSERT_EQ(shards.events_.size(), 1U);
  EXPECT_EQ(shards.events_[0].kind, SessionEvent::Kind::kStats);
  EXPECT_EQ(shards.events_[0].session, asker);
  EXPECT_EQ(shards.events_[0].stats.locks.size(), 3U);
}

TEST(Router, CloseNoticesReachExactlyTheShardsTouched) {
  Shards shards(4);
  const SessionId session = shards.at(0).new_session_id();
  // Touches shards 1 and 3 (and not 0 or 2).
  shards.at(0).submit(shards.now_, session, lock_request(shards.key_on(1), 0));
  shards.settle();
  shards.at(0).submit(shards.now_, session, lock_request(shards.key_on(3), 0));
  shards.settle();
  shards.sent_.clear();
  shards.at(0).close(shards.now_, session);
  shards.settle();
  std::vector<std::size_t> told;
  for (const auto& sent : shards.sent_) {
    if (sent.kind == kCloseSession) told.push_back(sent.to);
  }
  EXPECT_EQ(told, (std::vector<std::size_t>{1, 3}));
  // Auto-release: both locks are free again.
  EXPECT_EQ(shards.engine(1).resources_count() + shards.engine(3).resources_count(), 2U);
  const SessionId other = shards.at(2).new_session_id();
  shards.events_.clear();
  shards.at(2).submit(shards.now_, other, lock_request(shards.key_on(1), 0));
  shards.settle();
  ASSERT_EQ(shards.events_.size(), 1U);
  EXPECT_TRUE(shards.events_[0].reply.is_grant());
  // A second close sends nothing: the session's routing state is gone.
  shards.sent_.clear();
  shards.at(0).close(shards.now_, session);
  shards.settle();
  EXPECT_TRUE(shards.sent_.empty());
}

TEST(Router, ReleasesAndRenewsLeaveNoRoutingStateAndCloseNoticesGoOnlyWhereStateMayBe) {
  Shards shards(2);
  const std::string there = shards.key_on(1);
  const SessionId holder = shards.at(0).new_session_id();
  const SessionId other = shards.at(0).new_session_id();
  shards.at(0).submit(shards.now_, holder, lock_request(there, 0));
  shards.settle();
  const Token token = *shards.events_.at(0).reply.token;
  // Another session renews and releases the holder's lock by token: it leaves nothing on shard 1.
  Request renew;
  renew.command = Command::kRenew;
  renew.key = there;
  renew.token = token;
  shards.at(0).submit(shards.now_, other, renew);
  shards.settle();
  Request release = renew;
  release.command = Command::kRelease;
  shards.at(0).submit(shards.now_, other, release);
  shards.settle();
  shards.sent_.clear();
  shards.at(0).close(shards.now_, other);
  shards.settle();
  EXPECT_TRUE(shards.sent_.empty()) << "a close notice for a session that left no state";
  // The holder's close still reaches shard 1; a release after it (a give-back) is routed and
  // leaves no state behind, so a second close sends nothing.
  shards.at(0).close(shards.now_, holder);
  shards.settle();
  ASSERT_EQ(shards.sent_.size(), 1U);
  EXPECT_EQ(shards.sent_[0].kind, kCloseSession);
  shards.at(0).submit(shards.now_, holder, release);
  shards.settle();
  shards.sent_.clear();
  shards.at(0).close(shards.now_, holder);
  shards.settle();
  EXPECT_TRUE(shards.sent_.empty());
}

TEST(Router, ClosingAParkedSessionCancelsItsRequestOnItsOwner) {
  Shards shards(2);
  const std::string key = shards.key_on(1);
  const SessionId holder = shards.at(1).new_session_id();
  const SessionId waiter = shards.at(0).new_session_id();
  shards.at(1).submit(shards.now_, holder, lock_request(key, 0));
  shards.at(0).submit(shards.now_, waiter, lock_request(key, 30));
  shards.settle();
  shards.events_.clear();
  shards.at(0).close(shards.now_, waiter);
  shards.settle();
  ASSERT_EQ(shards.events_.size(), 1U);
  EXPECT_EQ(shards.events_[0].kind, SessionEvent::Kind::kCancelled);
  EXPECT_EQ(shards.events_[0].session, waiter);
}

TEST(Router, CancelWithdrawsAParkedRequestAndOnlyThat) {
  Shards shards(2);
  const std::string key = shards.key_on(0);
  const SessionId holder = shards.at(0).new_session_id();
  const SessionId waiter = shards.at(1).new_session_id();
  shards.at(0).submit(shards.now_, holder, lock_request(key, 0));
  shards.at(1).submit(shards.now_, waiter, lock_request(key, 30));
  shards.settle();
  shards.events_.clear();
  shards.at(1).cancel(shards.now_, waiter);
  shards.settle();
  ASSERT_EQ(shards.events_.size(), 1U);
  EXPECT_EQ(shards.events_[0].kind, SessionEvent::Kind::kCancelled);
  // Nothing parked any more: a second cancel does nothing.
  shards.events_.clear();
  shards.at(1).cancel(shards.now_, waiter);
  shards.settle();
  EXPECT_TRUE(shards.events_.empty());
  // A session that never routed anything has nothing to cancel or close.
  const SessionId idle = shards.at(1).new_session_id();
  shards.at(1).cancel(shards.now_, idle);
  shards.at(1).close(shards.now_, idle);
  shards.settle();
  EXPECT_TRUE(shards.events_.empty());
}

TEST(Router, TickExpiresLeasesAndHandsTheLockOnAcrossShards) {
  Shards shards(2);
  const std::string key = shards.key_on(0);
  const SessionId holder = shards.at(0).new_session_id();
  const SessionId waiter = shards.at(1).new_session_id();
  shards.at(0).submit(shards.now_, holder, lock_request(key, 0, /*lease_s=*/5));
  shards.at(1).submit(shards.now_, waiter, lock_request(key, 60));
  shards.settle();
  shards.events_.clear();
  ASSERT_TRUE(shards.at(0).next_wake().has_value());
  shards.now_ = *shards.at(0).next_wake();
  shards.at(0).tick(shards.now_);
  shards.settle();
  // The grant to the waiter, and the holder (still open) hears of its lost slot: two shards,
  // in no particular order.
  ASSERT_EQ(shards.events_.size(), 2U);
  const bool grant_first = shards.events_[0].session == waiter;
  const SessionEvent& grant = shards.events_[grant_first ? 0 : 1];
  const SessionEvent& lost = shards.events_[grant_first ? 1 : 0];
  EXPECT_EQ(grant.kind, SessionEvent::Kind::kReply);
  EXPECT_EQ(grant.session, waiter);
  EXPECT_TRUE(grant.reply.is_grant());
  EXPECT_EQ(lost.kind, SessionEvent::Kind::kLost);
  EXPECT_EQ(lost.session, holder);
  ASSERT_NE(lost.frame, nullptr);
  EXPECT_EQ(lost.frame->rfind("lost lock " + key + " ", 0), 0U);
  EXPECT_EQ(lost.frame->substr(lost.frame->size() - 9), " expired\n");
}

TEST(Router, ALossOfAClosedSessionGoesNowhere) {
  Shards shards(2);
  const std::string key = shards.key_on(0);
  const SessionId holder = shards.at(1).new_session_id();
  shards.at(1).submit(shards.now_, holder, lock_request(key, 0, /*lease_s=*/5));
  shards.settle();
  shards.events_.clear();
  // Its owner forgets it at once; the engine's shard learns of the close a message later.
  shards.at(1).close(shards.now_, holder);
  shards.now_ = shards.now_ + Duration::seconds(5);
  shards.at(0).tick(shards.now_);
  shards.settle();
  EXPECT_TRUE(shards.events_.empty());
}

// The loss reaches the owner, and the owner closes the session before its driver takes the
// event: the driver, which forgot the session at its close, must not hear of it.
TEST(Router, ALossQueuedBeforeTheCloseIsDroppedAtTheClose) {
  Shards shards(2);
  const std::string key = shards.key_on(0);
  const SessionId holder = shards.at(1).new_session_id();
  const SessionId other = shards.at(1).new_session_id();
  shards.at(1).submit(shards.now_, holder, lock_request(key, 0, /*lease_s=*/5));
  shards.at(1).submit(shards.now_, other, lock_request(shards.key_on(0, 1), 0, /*lease_s=*/5));
  shards.settle();
  shards.events_.clear();
  shards.now_ = shards.now_ + Duration::seconds(5);
  shards.at(0).tick(shards.now_);
  for (Envelope& envelope : shards.at(0).take_outbox()) {
    ASSERT_EQ(envelope.to, 1U);
    shards.at(1).receive(shards.now_, std::move(envelope.message));
  }
  shards.at(1).close(shards.now_, holder);
  const std::vector<SessionEvent> events = shards.at(1).take_events();
  // The other session, still open, hears of its loss.
  ASSERT_EQ(events.size(), 1U);
  EXPECT_EQ(events[0].kind, SessionEvent::Kind::kLost);
  EXPECT_EQ(events[0].session, other);
}

}  // namespace
}  // namespace turnstile::core
