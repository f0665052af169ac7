// Unit tests of the engine's additions beyond dflockd (docs/semantics.md): read-write locks,
// lock-delay, the fence check, inspect, force-release and the losses a lost-notify connection is
// told of. One named test per rule; the model-based property (engine_model_test) covers their
// interleavings.
#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/engine.h"
#include "core/protocol.h"
#include "core/random.h"
#include "testing/requests.h"

namespace turnstile::core {
namespace {

constexpr Instant secs(std::int64_t seconds) {
  return Instant::from_ns(0) + Duration::seconds(seconds);
}
constexpr Instant millis(std::int64_t milliseconds) {
  return Instant::from_ns(0) + Duration::milliseconds(milliseconds);
}
SessionId s(std::uint64_t id) { return SessionId{id}; }

Request of_space(Command command, Namespace space) {
  Request request = test::keyed_request(command, "k");
  request.space = space;
  return request;
}

class EngineExtras : public ::testing::Test {
 protected:
  explicit EngineExtras(Duration lock_delay = Duration::zero()) {
    config_.lock_delay = lock_delay;
    engine_ = std::make_unique<Engine>(config_, salts_);
  }

  Reply send(Instant now, SessionId session, const Request& request) {
    return engine_->handle(now, session, request, out_);
  }
  void tick(Instant now) {
    while (true) {
      engine_->tick(now, out_);
      const std::optional<Instant> next = engine_->next_wake();
      if (!next || *next > now) return;
    }
  }
  // The delivery to `session` taken out of the pending ones, if any.
  std::optional<Reply> delivered_to(SessionId session) {
    for (auto it = out_.begin(); it != out_.end(); ++it) {
      if (it->session == session) {
        Reply reply = it->reply;
        out_.erase(it);
        return reply;
      }
    }
    return std::nullopt;
  }
  nlohmann::json inspect(Instant now, Namespace space, std::string key = "k") {
    Request request = of_space(Command::kInspect, space);
    request.key = std::move(key);
    const Reply reply = send(now, s(99), request);
    EXPECT_EQ(reply.status, Status::kOk);
    return nlohmann::json::parse(reply.payload);
  }

  EngineConfig config_;
  SplitMix64 salts_{7};
  std::unique_ptr<Engine> engine_;
  std::vector<Delivery> out_;
};

class EngineWithLockDelay : public EngineExtras {
 protected:
  EngineWithLockDelay() : EngineExtras(Duration::seconds(3)) {}
};

// ---- read-write locks ---------------------------------------------------------------------------

TEST_F(EngineExtras, ReadersShareAndEachGetsAHigherFence) {
  const Reply a = send(secs(0), s(1), test::lock_request("k", 0, 10, Command::kReadLock));
  const Reply b = send(secs(0), s(2), test::lock_request("k", 0, 10, Command::kReadLock));
  ASSERT_EQ(a.status, Status::kOk);
  ASSERT_EQ(b.status, Status::kOk);
  EXPECT_GT(b.token->fence, a.token->fence);
  EXPECT_EQ(a.seconds, 10);
}

TEST_F(EngineExtras, AWriterWaitsForTheReadersAndIsAloneWhenGranted) {
  const Reply a = send(secs(0), s(1), test::lock_request("k", 0, 10, Command::kReadLock));
  const Reply b = send(secs(0), s(2), test::lock_request("k", 0, 10, Command::kReadLock));
  EXPECT_EQ(send(secs(0), s(3), test::lock_request("k", 0, 10, Command::kWriteLock)).status,
            Status::kTimeout);
  EXPECT_EQ(send(secs(0), s(3), test::lock_request("k", 5, 10, Command::kWriteLock)).status,
            Status::kParked);
  EXPECT_EQ(send(secs(1), s(1), test::release_request("k", a.token, Command::kReadRelease)).status,
            Status::kOk);
  EXPECT_FALSE(delivered_to(s(3)));  // one reader still holds it
  EXPECT_EQ(send(secs(1), s(2), test::release_request("k", b.token, Command::kReadRelease)).status,
            Status::kOk);
  const std::optional<Reply> writer = delivered_to(s(3));
  ASSERT_TRUE(writer);
  EXPECT_EQ(writer->status, Status::kOk);
  EXPECT_GT(writer->token->fence, b.token->fence);
  // Nobody else while the writer holds it, readers included.
  EXPECT_EQ(send(secs(1), s(4), test::lock_request("k", 0, 10, Command::kReadLock)).status,
            Status::kTimeout);
  EXPECT_EQ(send(secs(1), s(5), test::lock_request("k", 0, 10, Command::kWriteLock)).status,
            Status::kTimeout);
}

TEST_F(EngineExtras, AReaderNeverOvertakesAQueuedWriter) {
  const Reply a = send(secs(0), s(1), test::lock_request("k", 0, 10, Command::kReadLock));
  EXPECT_EQ(send(secs(0), s(2), test::lock_request("k", 30, 10, Command::kWriteLock)).status,
            Status::kParked);
  // The lock is held by a reader only, but a writer waits: the new reader queues behind it.
  EXPECT_EQ(send(secs(0), s(3), test::lock_request("k", 0, 10, Command::kReadLock)).status,
            Status::kTimeout);
  EXPECT_EQ(send(secs(0), s(3), test::lock_request("k", 30, 10, Command::kReadLock)).status,
            Status::kParked);
  EXPECT_EQ(send(secs(0), s(4), test::lock_request("k", 30, 10, Command::kReadLock)).status,
            Status::kParked);
  EXPECT_EQ(send(secs(1), s(1), test::release_request("k", a.token, Command::kReadRelease)).status,
            Status::kOk);
  const std::optional<Reply> writer = delivered_to(s(2));
  ASSERT_TRUE(writer && writer->is_grant());
  EXPECT_TRUE(out_.empty());
  // The writer leaves: both readers behind it are granted together, in queue order.
  EXPECT_EQ(
      send(secs(2), s(2), test::release_request("k", writer->token, Command::kWriteRelease)).status,
      Status::kOk);
  const std::optional<Reply> r3 = delivered_to(s(3));
  const std::optional<Reply> r4 = delivered_to(s(4));
  ASSERT_TRUE(r3 && r3->is_grant() && r4 && r4->is_grant());
  EXPECT_LT(r3->token->fence, r4->token->fence);
  EXPECT_GT(r3->token->fence, writer->token->fence);
}

TEST_F(EngineExtras, ReadersAfterAWriterInTheQueueWaitForIt) {
  const Reply w = send(secs(0), s(1), test::lock_request("k", 0, 10, Command::kWriteLock));
  EXPECT_EQ(send(secs(0), s(2), test::lock_request("k", 30, 10, Command::kReadLock)).status,
            Status::kParked);
  EXPECT_EQ(send(secs(0), s(3), test::lock_request("k", 30, 10, Command::kWriteLock)).status,
            Status::kParked);
  EXPECT_EQ(send(secs(0), s(4), test::lock_request("k", 30, 10, Command::kReadLock)).status,
            Status::kParked);
  EXPECT_EQ(send(secs(1), s(1), test::release_request("k", w.token, Command::kWriteRelease)).status,
            Status::kOk);
  // Only the head reader: the writer behind it blocks the reader after it.
  ASSERT_TRUE(delivered_to(s(2)));
  EXPECT_TRUE(out_.empty());
}

TEST_F(EngineExtras, ReleaseAndRenewAcceptOnlyTheirKindOfToken) {
  const Reply r = send(secs(0), s(1), test::lock_request("k", 0, 10, Command::kReadLock));
  EXPECT_EQ(send(secs(0), s(1), test::release_request("k", r.token, Command::kWriteRelease)).status,
            Status::kError);
  EXPECT_EQ(send(secs(0), s(1), test::release_request("k", r.token, Command::kWriteRenew)).status,
            Status::kError);
  const Reply renewed =
      send(secs(0), s(1), test::release_request("k", r.token, Command::kReadRenew));
  EXPECT_EQ(renewed.status, Status::kOk);
  EXPECT_EQ(renewed.seconds, config_.default_lease_s);
  EXPECT_EQ(send(secs(0), s(1), test::release_request("k", r.token, Command::kReadRelease)).status,
            Status::kOk);
  // A lock token of the same key does not release the read-write lock, nor the reverse.
  const Reply lock = send(secs(0), s(2), test::lock_request("k", 0, 10, Command::kLock));
  EXPECT_EQ(
      send(secs(0), s(2), test::release_request("k", lock.token, Command::kReadRelease)).status,
      Status::kError);
}

TEST_F(EngineExtras, TwoPhaseReadAndWriteWaitOnlyForWhatTheyEnqueued) {
  const Reply w = send(secs(0), s(1), test::lock_request("k", 0, 10, Command::kWriteLock));
  EXPECT_EQ(send(secs(0), s(2), test::keyed_request(Command::kReadEnqueue, "k")).status,
            Status::kQueued);
  EXPECT_EQ(send(secs(0), s(2), test::keyed_request(Command::kWriteEnqueue, "k")).status,
            Status::kErrorAlreadyEnqueued);
  EXPECT_EQ(send(secs(0), s(2), test::wait_request("k", 0, Command::kWriteWait)).status,
            Status::kErrorNotEnqueued);
  EXPECT_EQ(send(secs(0), s(2), test::wait_request("k", 5, Command::kReadWait)).status,
            Status::kParked);
  EXPECT_EQ(send(secs(1), s(1), test::release_request("k", w.token, Command::kWriteRelease)).status,
            Status::kOk);
  const std::optional<Reply> granted = delivered_to(s(2));
  ASSERT_TRUE(granted && granted->is_grant());
  EXPECT_EQ(
      send(secs(1), s(2), test::release_request("k", granted->token, Command::kReadRelease)).status,
      Status::kOk);
  // A writer's enqueue that is granted at once answers `acquired`; ww takes it.
  const Reply acquired = send(secs(2), s(3), test::keyed_request(Command::kWriteEnqueue, "k"));
  EXPECT_EQ(acquired.status, Status::kAcquired);
  const Reply taken = send(secs(2), s(3), test::wait_request("k", 0, Command::kWriteWait));
  EXPECT_EQ(taken.status, Status::kOk);
  EXPECT_EQ(taken.token, acquired.token);
}

TEST_F(EngineExtras, StatsListReadWriteLocksOnlyWhenThereAreSome) {
  StatsSnapshot empty = engine_->stats(secs(0), out_);
  EXPECT_TRUE(empty.rw_locks.empty());
  EXPECT_TRUE(empty.idle_rw_locks.empty());
  send(secs(0), s(1), test::lock_request("k", 0, 10, Command::kReadLock));
  send(secs(0), s(2), test::lock_request("k", 0, 10, Command::kReadLock));
  send(secs(0), s(3), test::lock_request("k", 9, 10, Command::kWriteLock));
  const StatsSnapshot busy = engine_->stats(secs(1), out_);
  ASSERT_EQ(busy.rw_locks.size(), 1u);
  EXPECT_EQ(busy.rw_locks[0].key, "k");
  EXPECT_EQ(busy.rw_locks[0].readers, 2);
  EXPECT_EQ(busy.rw_locks[0].writer, SessionId{0});
  EXPECT_EQ(busy.rw_locks[0].waiters, 1);
  EXPECT_DOUBLE_EQ(busy.rw_locks[0].lease_expires_in_s, 9.0);
  EXPECT_TRUE(busy.locks.empty());
}

// ---- lock-delay ---------------------------------------------------------------------------------

TEST_F(EngineWithLockDelay, AnExpiredLeaseHoldsTheKeyForTheDelay) {
  send(secs(0), s(1), test::lock_request("k", 0, 5, Command::kLock));
  EXPECT_EQ(send(secs(0), s(2), test::lock_request("k", 30, 10, Command::kLock)).status,
            Status::kParked);
  tick(secs(5));  // the lease ends; nobody is granted for 3 s
  EXPECT_FALSE(delivered_to(s(2)));
  EXPECT_EQ(send(secs(6), s(3), test::lock_request("k", 0, 10, Command::kLock)).status,
            Status::kTimeout);
  tick(millis(7999));
  EXPECT_FALSE(delivered_to(s(2)));
  tick(secs(8));
  const std::optional<Reply> granted = delivered_to(s(2));
  ASSERT_TRUE(granted && granted->is_grant());
}

TEST_F(EngineWithLockDelay, ACleanReleaseGrantsAtOnce) {
  const Reply held = send(secs(0), s(1), test::lock_request("k", 0, 5, Command::kLock));
  EXPECT_EQ(send(secs(0), s(2), test::lock_request("k", 30, 10, Command::kLock)).status,
            Status::kParked);
  EXPECT_EQ(send(secs(1), s(1), test::release_request("k", held.token, Command::kRelease)).status,
            Status::kOk);
  ASSERT_TRUE(delivered_to(s(2)));
}

TEST_F(EngineWithLockDelay, ADisconnectThatReleasesStartsTheDelayAndWithoutReleaseTheLeaseDoes) {
  send(secs(0), s(1), test::lock_request("k", 0, 5, Command::kLock));
  engine_->close_session(secs(1), s(1), /*auto_release=*/true, out_);
  EXPECT_EQ(send(secs(1), s(2), test::lock_request("k", 0, 10, Command::kLock)).status,
            Status::kTimeout);
  EXPECT_EQ(send(secs(4), s(2), test::lock_request("k", 0, 10, Command::kLock)).status,
            Status::kOk);
}

TEST_F(EngineWithLockDelay, AWaiterWhoseTimeoutIsTheDelaysEndIsGranted) {
  send(secs(0), s(1), test::lock_request("k", 0, 2, Command::kLock));
  EXPECT_EQ(send(secs(0), s(2), test::lock_request("k", 5, 10, Command::kLock)).status,
            Status::kParked);
  tick(secs(2));  // the lease ends; the delay runs to 5
  EXPECT_FALSE(delivered_to(s(2)));
  tick(secs(5));  // the delay ends at 5 and the wait times out at 5: the grant wins
  const std::optional<Reply> reply = delivered_to(s(2));
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->status, Status::kOk);
}

TEST_F(EngineWithLockDelay, ADelayedKeyIsNotCollectedAndInspectShowsTheDelay) {
  send(secs(0), s(1), test::lock_request("k", 0, 1, Command::kReadLock));
  tick(secs(1));
  const nlohmann::json shown = inspect(secs(2), Namespace::kReadWrite);
  EXPECT_TRUE(shown["exists"]);
  EXPECT_DOUBLE_EQ(shown["lock_delay_left_s"].get<double>(), 2.0);
  EXPECT_EQ(engine_->resources_count(), 1u);
}

// ---- check, inspect, force-release, losses -----------------------------------------------------

TEST_F(EngineExtras, CheckAnswersWhetherTheTokenHoldsTheKeyNow) {
  const Reply held = send(secs(0), s(1), test::lock_request("k", 0, 10, Command::kLock));
  Request check = test::release_request("k", held.token, Command::kCheck);
  const Reply yes = send(millis(2500), s(7), check);
  EXPECT_EQ(yes.status, Status::kOk);
  EXPECT_EQ(yes.seconds, 8);  // 7.5 s left, rounded up
  Token forged = *held.token;
  forged.salt ^= 1;
  EXPECT_EQ(send(secs(3), s(7), test::release_request("k", forged, Command::kCheck)).status,
            Status::kErrorLeaseExpired);
  // The same key in another namespace is another resource.
  check.space = Namespace::kSemaphore;
  EXPECT_EQ(send(secs(3), s(7), check).status, Status::kErrorLeaseExpired);
  check.space = Namespace::kLock;
  EXPECT_EQ(send(secs(11), s(7), check).status, Status::kErrorLeaseExpired);  // expired
  EXPECT_EQ(engine_->counters().grants, 1u);
}

TEST_F(EngineExtras, CheckOfAReaderAndAWriter) {
  const Reply r = send(secs(0), s(1), test::lock_request("k", 0, 10, Command::kReadLock));
  Request check = test::release_request("k", r.token, Command::kCheck);
  check.space = Namespace::kReadWrite;
  EXPECT_EQ(send(secs(0), s(2), check).status, Status::kOk);
  EXPECT_EQ(send(secs(0), s(1), test::release_request("k", r.token, Command::kReadRelease)).status,
            Status::kOk);
  EXPECT_EQ(send(secs(0), s(2), check).status, Status::kErrorLeaseExpired);
}

TEST_F(EngineExtras, InspectListsHoldersByFenceAndWaitersInOrderWithTheirWait) {
  const Reply a = send(secs(0), s(1), test::lock_request("k", 0, 10, Command::kReadLock));
  send(secs(1), s(2), test::lock_request("k", 30, 10, Command::kWriteLock));
  send(secs(2), s(3), test::lock_request("k", 30, 10, Command::kReadLock));
  const nlohmann::json shown = inspect(secs(4), Namespace::kReadWrite);
  EXPECT_EQ(shown["kind"], "rw");
  ASSERT_EQ(shown["holders"].size(), 1u);
  EXPECT_EQ(shown["holders"][0]["fence"], a.token->fence.value);
  EXPECT_EQ(shown["holders"][0]["session"], 1);
  EXPECT_EQ(shown["holders"][0]["mode"], "read");
  EXPECT_DOUBLE_EQ(shown["holders"][0]["lease_expires_in_s"].get<double>(), 6.0);
  ASSERT_EQ(shown["waiters"].size(), 2u);
  EXPECT_EQ(shown["waiters"][0]["session"], 2);
  EXPECT_EQ(shown["waiters"][0]["mode"], "write");
  EXPECT_DOUBLE_EQ(shown["waiters"][0]["waited_s"].get<double>(), 3.0);
  EXPECT_EQ(shown["waiters"][1]["session"], 3);
  // The whole token never shows: only its fence.
  EXPECT_EQ(shown.dump().find(a.token->to_string()), std::string::npos);
  const nlohmann::json none = inspect(secs(4), Namespace::kLock, "nothing");
  EXPECT_FALSE(none["exists"]);
  EXPECT_TRUE(none["holders"].empty());
  EXPECT_EQ(engine_->resources_count(), 1u);  // inspect creates nothing
}

TEST_F(EngineExtras, ForceReleaseFreesTheHolderTellsItsSessionAndPromotes) {
  const Reply held = send(secs(0), s(1), test::lock_request("k", 0, 10, Command::kLock));
  EXPECT_EQ(send(secs(0), s(2), test::lock_request("k", 30, 10, Command::kLock)).status,
            Status::kParked);
  const Reply forced = send(secs(1), s(99), of_space(Command::kForceRelease, Namespace::kLock));
  EXPECT_EQ(forced.status, Status::kOk);
  EXPECT_EQ(forced.seconds, 1);
  const std::vector<Loss> losses = engine_->take_losses();
  ASSERT_EQ(losses.size(), 1u);
  EXPECT_EQ(losses[0],
            (Loss{s(1), LostSlot{Namespace::kLock, "k", *held.token, LossReason::kForced}}));
  EXPECT_EQ(lost_line(losses[0].slot), "lost lock k " + held.token->to_string() + " forced\n");
  const std::optional<Reply> next = delivered_to(s(2));
  ASSERT_TRUE(next && next->is_grant());
  EXPECT_GT(next->token->fence, held.token->fence);
  // The forced-out token is dead: renew and release say so.
  EXPECT_EQ(send(secs(2), s(1), test::release_request("k", held.token, Command::kRenew)).status,
            Status::kErrorLeaseExpired);
  EXPECT_EQ(send(secs(2), s(1), test::release_request("k", held.token, Command::kRelease)).status,
            Status::kErrorLeaseExpired);
  // A token that never held anything still gets dflockd's plain error.
  Token never = *held.token;
  never.fence.value += 100;
  EXPECT_EQ(send(secs(2), s(1), test::release_request("k", never, Command::kRelease)).status,
            Status::kError);
  EXPECT_EQ(engine_->counters().forced_releases, 1u);
}

TEST_F(EngineExtras, ForceReleaseOfOneFenceLeavesTheOtherHolders) {
  const Reply a = send(secs(0), s(1), test::lock_request("k", 0, 10, Command::kReadLock));
  const Reply b = send(secs(0), s(2), test::lock_request("k", 0, 10, Command::kReadLock));
  Request force = of_space(Command::kForceRelease, Namespace::kReadWrite);
  force.fence = b.token->fence.value;
  EXPECT_EQ(send(secs(1), s(99), force).seconds, 1);
  Request check = test::release_request("k", a.token, Command::kCheck);
  check.space = Namespace::kReadWrite;
  EXPECT_EQ(send(secs(1), s(99), check).status, Status::kOk);
  force.fence = 12345;  // nobody
  EXPECT_EQ(send(secs(1), s(99), force).seconds, 0);
  Request unknown = of_space(Command::kForceRelease, Namespace::kSemaphore);
  EXPECT_EQ(send(secs(1), s(99), unknown).seconds, 0);
  EXPECT_EQ(engine_->resources_count(), 1u);
}

// A lock-delay running on a key nobody holds (its lease ran out): a force-release with
// clear_delay ends it, and the waiter is granted at the same clock time, with a higher fence.
TEST_F(EngineWithLockDelay, ForceReleaseWithClearDelayEndsARunningDelayAndGrantsAtOnce) {
  const Reply held = send(secs(0), s(1), test::lock_request("k", 0, 2, Command::kLock));
  EXPECT_EQ(send(secs(0), s(2), test::lock_request("k", 30, 10, Command::kLock)).status,
            Status::kParked);
  tick(secs(2));  // the lease ends: the delay runs to 5
  EXPECT_FALSE(delivered_to(s(2)));
  Request force = of_space(Command::kForceRelease, Namespace::kLock);
  force.clear_delay = true;
  const Reply cleared = send(secs(2), s(99), force);
  EXPECT_EQ(cleared, Reply::force_released(0, true));
  const std::optional<Reply> next = delivered_to(s(2));
  ASSERT_TRUE(next && next->is_grant());
  EXPECT_GT(next->token->fence, held.token->fence);
  EXPECT_FALSE(inspect(secs(2), Namespace::kLock).contains("lock_delay_left_s"));
  // Nothing left to clear: the same request answers that it cleared nothing, and frees nobody
  // but the holder.
  EXPECT_EQ(send(secs(2), s(99), force), Reply::force_released(1, false));
  EXPECT_EQ(send(secs(2), s(99), force), Reply::force_released(0, false));
}

// Without clear_delay a force-release starts the lock-delay; with it, the holders it frees start
// none and the queue moves on at once. A fence naming nobody still clears a running delay.
TEST_F(EngineWithLockDelay, ForceReleaseWithClearDelayStartsNoDelayForWhomItFrees) {
  const Reply a = send(secs(0), s(1), test::lock_request("k", 0, 10, Command::kReadLock));
  EXPECT_EQ(send(secs(0), s(2), test::lock_request("k", 30, 10, Command::kWriteLock)).status,
            Status::kParked);
  Request force = of_space(Command::kForceRelease, Namespace::kReadWrite);
  force.fence = a.token->fence.value;
  EXPECT_EQ(send(secs(1), s(99), force), Reply::force_released(1, false));
  EXPECT_FALSE(delivered_to(s(2)));  // the delay the force started holds the writer
  force.fence = 12345;               // nobody
  force.clear_delay = true;
  EXPECT_EQ(send(secs(1), s(99), force), Reply::force_released(0, true));
  const std::optional<Reply> writer = delivered_to(s(2));
  ASSERT_TRUE(writer && writer->is_grant());
  EXPECT_EQ(send(secs(1), s(3), test::lock_request("k", 30, 10, Command::kWriteLock)).status,
            Status::kParked);
  force.fence = 0;
  EXPECT_EQ(send(secs(1), s(99), force), Reply::force_released(1, false));
  const std::optional<Reply> third = delivered_to(s(3));
  ASSERT_TRUE(third && third->is_grant());
  EXPECT_GT(third->token->fence, writer->token->fence);
  // A key that does not exist, or is not delayed, clears nothing.
  Request sem = of_space(Command::kForceRelease, Namespace::kSemaphore);
  sem.clear_delay = true;
  EXPECT_EQ(send(secs(1), s(99), sem), Reply::force_released(0, false));
}

TEST_F(EngineExtras, AnExpiredLeaseIsALossOfAnOpenSessionOnly) {
  const Reply a = send(secs(0), s(1), test::lock_request("k", 0, 2, Command::kLock));
  const Reply b = send(secs(0), s(2), test::lock_request("k", 0, 2, Command::kSemLock));
  (void)b;
  engine_->close_session(secs(1), s(2), /*auto_release=*/false, out_);  // b lives on, unowned
  tick(secs(2));
  const std::vector<Loss> losses = engine_->take_losses();
  ASSERT_EQ(losses.size(), 1u);
  EXPECT_EQ(losses[0],
            (Loss{s(1), LostSlot{Namespace::kLock, "k", *a.token, LossReason::kExpired}}));
  EXPECT_TRUE(engine_->take_losses().empty());
}

TEST_F(EngineExtras, AReleasedOrRenewedSlotIsNoLoss) {
  const Reply a = send(secs(0), s(1), test::lock_request("k", 0, 2, Command::kLock));
  send(secs(1), s(1), test::release_request("k", a.token, Command::kRenew));
  tick(secs(2));
  EXPECT_EQ(send(secs(2), s(1), test::release_request("k", a.token, Command::kRelease)).status,
            Status::kOk);
  tick(secs(40));
  EXPECT_TRUE(engine_->take_losses().empty());
}

TEST_F(EngineExtras, AnOrphanRunningOutIsReclaimedFromTheOpenSessionsWithItsRef) {
  Request held = test::lock_request("k", 0, 20, Command::kLock);
  held.ref = "worker-1";
  const Reply a = send(secs(0), s(1), held);
  engine_->close_session(secs(0), s(1), /*auto_release=*/true, out_, Duration::seconds(5));
  // The client is back under the same ref, waiting on another key, when the orphan time ends.
  Request other = test::lock_request("k", 0, 10, Command::kLock);
  other.key = "other";
  other.ref = "worker-1";
  send(secs(1), s(3), other);
  tick(secs(5));
  const std::vector<Loss> losses = engine_->take_losses();
  ASSERT_EQ(losses.size(), 1u);
  EXPECT_EQ(losses[0],
            (Loss{s(3), LostSlot{Namespace::kLock, "k", *a.token, LossReason::kReclaimed}}));
}

// ---- snapshots ----------------------------------------------------------------------------------

TEST_F(EngineWithLockDelay, ASnapshotKeepsModesDelaysAndForcedTokens) {
  const Reply r = send(secs(0), s(1), test::lock_request("k", 0, 20, Command::kReadLock));
  send(secs(1), s(2), test::lock_request("k", 30, 10, Command::kWriteLock));
  send(secs(2), s(3), test::lock_request("k", 30, 10, Command::kReadLock));
  const Reply l = send(secs(0), s(4), test::lock_request("k", 0, 2, Command::kLock));
  tick(secs(2));  // l expires: a 3 s lock-delay on lock:k
  Request force = of_space(Command::kForceRelease, Namespace::kReadWrite);
  const std::string before_force = engine_->save();
  SplitMix64 restored_salts = salts_;  // the same salts from here on
  Engine restored(config_, restored_salts);
  ASSERT_TRUE(restored.restore(before_force));
  EXPECT_EQ(restored.save(), before_force);
  std::vector<Delivery> restored_out;
  // Both go on alike: the force frees the reader, the writer is granted, the lock-delay ends.
  const Reply here = send(secs(3), s(9), force);
  const Reply there = restored.handle(secs(3), s(9), force, restored_out);
  EXPECT_EQ(here, there);
  EXPECT_EQ(engine_->save(), restored.save());
  std::vector<Delivery> later_here;
  std::vector<Delivery> later_there;
  engine_->tick(secs(5), later_here);
  restored.tick(secs(5), later_there);
  EXPECT_EQ(engine_->save(), restored.save());
  EXPECT_EQ(restored
                .handle(secs(5), s(1), test::release_request("k", r.token, Command::kReadRenew),
                        restored_out)
                .status,
            Status::kErrorLeaseExpired);
  (void)l;
}

}  // namespace
}  // namespace turnstile::core
