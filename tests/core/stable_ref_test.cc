// Stable refs and orphans in the engine (docs/semantics.md, "Stable refs and orphans"): a session
// that sent a stable ref and closes with a positive orphan time leaves its holders and waiters
// orphaned under the ref; an acquire or enqueue of the same key with the same ref adopts them.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/engine.h"
#include "core/protocol.h"
#include "core/random.h"

namespace turnstile::core {
namespace {

Instant secs(std::int64_t s) { return Instant::from_ns(s * 1'000'000'000); }
constexpr Duration kOrphanTtl = Duration::seconds(30);

class StableRefTest : public ::testing::Test {
 protected:
  StableRefTest() : engine_(std::make_unique<Engine>(EngineConfig{}, salts_)) {}

  Reply send(std::uint64_t session, Command command, const std::string& key, const std::string& ref,
             std::int64_t timeout_s = 0, std::int64_t lease_s = 0) {
    Request request;
    request.command = command;
    request.key = key;
    request.ref = ref;
    request.timeout_s = timeout_s;
    request.lease_s = lease_s;
    if (command == Command::kSemLock || command == Command::kSemEnqueue) request.limit = 2;
    return engine_->handle(now_, SessionId{session}, request, out_);
  }
  Reply lock(std::uint64_t session, const std::string& ref, std::int64_t timeout_s = 0,
             std::int64_t lease_s = 0) {
    return send(session, Command::kLock, "k", ref, timeout_s, lease_s);
  }
  Reply release(std::uint64_t session, const Token& token) {
    Request request;
    request.command = Command::kRelease;
    request.key = "k";
    request.token = token;
    return engine_->handle(now_, SessionId{session}, request, out_);
  }
  bool close(std::uint64_t session, bool auto_release = true, Duration ttl = kOrphanTtl) {
    return engine_->close_session(now_, SessionId{session}, auto_release, out_, ttl);
  }
  void tick_at(std::int64_t s) {
    now_ = secs(s);
    engine_->tick(now_, out_);
  }
  std::vector<SessionId> waiters() const {
    for (const Engine::ResourceView& view : engine_->inspect()) {
      if (view.key == "k") return view.waiters;
    }
    return {};
  }
  std::size_t holders() const {
    for (const Engine::ResourceView& view : engine_->inspect()) {
      if (view.key == "k") return view.holders.size();
    }
    return 0;
  }
  std::vector<Delivery> take() { return std::exchange(out_, {}); }
  static Request lock_request() {
    Request request;
    request.command = Command::kLock;
    request.key = "k";
    return request;
  }

  SplitMix64 salts_{11};
  std::unique_ptr<Engine> engine_;
  Instant now_ = secs(1);
  std::vector<Delivery> out_;
};

TEST_F(StableRefTest, AHolderComesBackWithTheSameToken) {
  const Reply first = lock(1, "job-a", 0, 60);
  ASSERT_TRUE(first.is_grant());
  EXPECT_FALSE(close(1));
  EXPECT_EQ(holders(), 1u);  // kept, not released
  now_ = secs(5);
  // Another ref cannot take it: it waits like anyone.
  EXPECT_EQ(lock(2, "job-b").status, Status::kTimeout);
  const Reply again = lock(3, "job-a", 0, 20);
  ASSERT_TRUE(again.is_grant());
  EXPECT_EQ(*again.token, *first.token);
  EXPECT_EQ(again.seconds, 20);  // a fresh lease
  EXPECT_EQ(release(3, *again.token).status, Status::kOk);
  EXPECT_EQ(holders(), 0u);
}

TEST_F(StableRefTest, AWaiterComesBackToItsPlace) {
  ASSERT_TRUE(lock(1, "").is_grant());
  EXPECT_EQ(lock(2, "w2", 100).status, Status::kParked);
  EXPECT_EQ(lock(3, "", 100).status, Status::kParked);
  EXPECT_TRUE(close(2));  // its parked request is dropped unanswered, its place is kept
  EXPECT_TRUE(take().empty());
  EXPECT_EQ(waiters(), (std::vector<SessionId>{SessionId{2}, SessionId{3}}));
  // Back under a new session: the same (first) place, parked again.
  EXPECT_EQ(lock(4, "w2", 100).status, Status::kParked);
  EXPECT_EQ(waiters(), (std::vector<SessionId>{SessionId{4}, SessionId{3}}));
  const Token held = engine_->inspect()[0].holders[0].token;
  EXPECT_EQ(release(1, held).status, Status::kOk);
  const std::vector<Delivery> granted = take();
  ASSERT_EQ(granted.size(), 1u);
  EXPECT_EQ(granted[0].session, SessionId{4});
  EXPECT_TRUE(granted[0].reply.is_grant());
}

TEST_F(StableRefTest, AnOrphanedWaiterAtTheHeadIsGrantedAndKept) {
  const Reply first = lock(1, "");
  ASSERT_TRUE(first.is_grant());
  EXPECT_EQ(lock(2, "w2", 100).status, Status::kParked);
  close(2);
  EXPECT_EQ(release(1, *first.token).status, Status::kOk);
  EXPECT_TRUE(take().empty());  // granted to the orphan: nobody to tell
  EXPECT_EQ(holders(), 1u);
  EXPECT_EQ(lock(5, "other").status, Status::kTimeout);
  const Reply adopted = send(6, Command::kEnqueue, "k", "w2");
  EXPECT_EQ(adopted.status, Status::kAcquired);  // an enqueue adopts the slot two-phase
  const Reply waited = send(6, Command::kWait, "k", "w2", 5);
  ASSERT_TRUE(waited.is_grant());
  EXPECT_EQ(*waited.token, *adopted.token);
}

TEST_F(StableRefTest, OrphansEndWithTheirTime) {
  ASSERT_TRUE(lock(1, "h", 0, 3600).is_grant());
  EXPECT_EQ(lock(2, "w", 100).status, Status::kParked);
  now_ = secs(10);
  close(2);  // the waiter's orphan time ends at 40
  close(1);  // with auto-release, the holder's at 40 too (not at its lease end)
  tick_at(39);
  EXPECT_EQ(holders(), 1u);
  EXPECT_EQ(waiters().size(), 1u);
  tick_at(41);
  EXPECT_EQ(holders(), 0u);
  EXPECT_TRUE(waiters().empty());
  EXPECT_TRUE(take().empty());  // nobody is told: both sessions are gone
  // Too late: a fresh lock, another token.
  EXPECT_TRUE(lock(3, "h").is_grant());
}

TEST_F(StableRefTest, WithoutAutoReleaseAHolderKeepsItsWholeLease) {
  ASSERT_TRUE(lock(1, "h", 0, 3600).is_grant());
  close(1, /*auto_release=*/false);
  tick_at(100);  // past the orphan time, within the lease
  EXPECT_EQ(holders(), 1u);
  EXPECT_TRUE(lock(2, "h").is_grant());  // still adoptable
}

TEST_F(StableRefTest, ALiveOwnersSlotIsNeverTaken) {
  ASSERT_TRUE(lock(1, "same").is_grant());
  // The same ref from another live session: it waits, it does not adopt.
  EXPECT_EQ(lock(2, "same").status, Status::kTimeout);
  EXPECT_EQ(holders(), 1u);
}

TEST_F(StableRefTest, WithoutARefOrWithoutATimeCloseIsAsBefore) {
  ASSERT_TRUE(lock(1, "").is_grant());
  close(1);
  EXPECT_EQ(holders(), 0u);
  ASSERT_TRUE(lock(2, "r").is_grant());
  close(2, true, Duration::zero());
  EXPECT_EQ(holders(), 0u);
}

TEST_F(StableRefTest, TryOnceGivesAnAdoptedPlaceUp) {
  const Reply first = lock(1, "");
  EXPECT_EQ(lock(2, "w", 100).status, Status::kParked);
  close(2);
  EXPECT_EQ(lock(3, "w", 0).status, Status::kTimeout);
  EXPECT_TRUE(waiters().empty());
  EXPECT_EQ(release(1, *first.token).status, Status::kOk);
  EXPECT_EQ(holders(), 0u);
}

TEST_F(StableRefTest, SnapshotsKeepOrphansAndRefs) {
  const Reply first = lock(1, "h");
  EXPECT_EQ(lock(2, "w", 100).status, Status::kParked);
  EXPECT_EQ(lock(7, "live", 100).status, Status::kParked);
  close(1, false);
  close(2);
  const std::string saved = engine_->save();
  SplitMix64 other_salts{11};
  Engine restored(EngineConfig{}, other_salts);
  ASSERT_TRUE(restored.restore(saved));
  EXPECT_EQ(restored.save(), saved);
  // The restored engine adopts as the original does.
  Request request;
  request.command = Command::kLock;
  request.key = "k";
  request.ref = "h";
  const Reply adopted = restored.handle(now_, SessionId{9}, request, out_);
  ASSERT_TRUE(adopted.is_grant());
  EXPECT_EQ(*adopted.token, *first.token);
  // Session 7's ref came through: closing it there orphans its place too.
  restored.close_session(now_, SessionId{7}, true, out_, kOrphanTtl);
  EXPECT_EQ(restored.inspect()[0].waiters.size(), 2u);
}

// A replica restored from a snapshot must close a session exactly as one that was not: the
// session's own lists are in the order it acted, which a snapshot does not keep, so orphans are
// made in an order of their own (found by the cluster-3 simulation as replica divergence).
TEST_F(StableRefTest, OrphansAreMadeInTheSameOrderAfterARestore) {
  // Resources a, b, c created in that order; session 9 (ref "r") waits on c, then a, then b and
  // holds d, then e.
  for (const char* key : {"a", "b", "c"}) {
    ASSERT_TRUE(send(1, Command::kSemLock, key, "", 0).is_grant());
    ASSERT_TRUE(send(2, Command::kSemLock, key, "", 0).is_grant());
  }
  for (const char* key : {"c", "a", "b"}) {
    EXPECT_EQ(send(9, Command::kSemEnqueue, key, "r").status, Status::kQueued);
  }
  ASSERT_TRUE(send(9, Command::kLock, "e", "r").is_grant());
  ASSERT_TRUE(send(9, Command::kLock, "d", "r").is_grant());
  SplitMix64 other_salts{11};
  Engine restored(EngineConfig{}, other_salts);
  ASSERT_TRUE(restored.restore(engine_->save()));
  close(9);
  std::vector<Delivery> out;
  restored.close_session(now_, SessionId{9}, true, out, kOrphanTtl);
  EXPECT_EQ(restored.save(), engine_->save());
}

// A client that reconnects before its old session is seen to close queues behind its own slot
// under the same ref: the close hands the slot to it at once, same token.
TEST_F(StableRefTest, AComebackAlreadyWaitingGetsTheSlotAtTheClose) {
  const Reply first = lock(1, "job");
  ASSERT_TRUE(first.is_grant());
  EXPECT_EQ(lock(3, "", 100).status, Status::kParked);  // a stranger, first in the queue
  EXPECT_EQ(lock(2, "job", 100).status, Status::kParked);
  EXPECT_FALSE(close(1));
  const std::vector<Delivery> granted = take();
  ASSERT_EQ(granted.size(), 1u);
  EXPECT_EQ(granted[0].session, SessionId{2});
  ASSERT_TRUE(granted[0].reply.is_grant());
  EXPECT_EQ(*granted[0].reply.token, *first.token);
  EXPECT_EQ(waiters(), (std::vector<SessionId>{SessionId{3}}));
}

// The race the simulator's cluster profiles found: a grant reaches a session that has just
// closed, its close hands the slot to a waiter with the same ref, and then the closed session's
// give-back (release_of) arrives. It must not take the slot from the new owner, who was told it
// holds the lock.
TEST_F(StableRefTest, AGiveBackDoesNotTakeASlotTheCloseHandedOn) {
  const Reply first = lock(1, "job");
  ASSERT_TRUE(first.is_grant());
  EXPECT_EQ(lock(2, "job", 100).status, Status::kParked);
  EXPECT_FALSE(close(1));
  ASSERT_EQ(take().size(), 1u);  // handed to session 2, same token
  const Request give_back = release_of(lock_request(), *first.token);
  EXPECT_TRUE(give_back.give_back);
  EXPECT_EQ(engine_->handle(now_, SessionId{1}, give_back, out_).status, Status::kError);
  EXPECT_EQ(holders(), 1u);
  // The token itself still works for its holder, from any session.
  EXPECT_EQ(release(7, *first.token).status, Status::kOk);
  EXPECT_EQ(holders(), 0u);
}

TEST_F(StableRefTest, AGiveBackReleasesWhatItsSessionStillHolds) {
  const Reply first = lock(1, "job");
  ASSERT_TRUE(first.is_grant());
  const Request give_back = release_of(lock_request(), *first.token);
  EXPECT_EQ(engine_->handle(now_, SessionId{1}, give_back, out_).status, Status::kOk);
  EXPECT_EQ(holders(), 0u);
}

TEST_F(StableRefTest, AComebackQueuedTwoPhaseGetsTheSlotForItsWait) {
  const Reply first = lock(1, "job");
  ASSERT_TRUE(first.is_grant());
  EXPECT_EQ(send(2, Command::kEnqueue, "k", "job").status, Status::kQueued);
  close(1);
  EXPECT_TRUE(take().empty());
  const Reply waited = send(2, Command::kWait, "k", "job", 5);
  ASSERT_TRUE(waited.is_grant());
  EXPECT_EQ(*waited.token, *first.token);
}

TEST_F(StableRefTest, BarrierIsAnsweredOkAndChangesNothing) {
  ASSERT_TRUE(lock(1, "").is_grant());
  const std::string before = engine_->save();
  Request barrier;
  barrier.command = Command::kBarrier;
  EXPECT_EQ(engine_->handle(now_, SessionId{2}, barrier, out_).status, Status::kOk);
  EXPECT_EQ(engine_->save(), before);
}

}  // namespace
}  // namespace turnstile::core
