// Model-based property test of core::Engine against testing/reference_model.h, plus plain
// scenarios that check the reference model itself against docs/semantics.md.
//
// The property drives both with the same random sequence of requests, closed sessions, ticks
// and stats calls, with time moving forward by nanoseconds, seconds or days and sometimes
// backward, through testing/engine_differential.h: after every step it demands identical
// replies, deliveries (compared per session), counters, fences, resources and queues, and checks
// the engine's own invariants. fuzz/fuzz_engine.cc runs the same comparison with libFuzzer
// choosing the steps.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/engine.h"
#include "core/protocol.h"
#include "core/stats.h"
#include "core/time.h"
#include "core/types.h"
#include "testing/engine_differential.h"
#include "testing/reference_model.h"
#include "testing/requests.h"

namespace turnstile::test {
namespace {

using core::Command;
using core::Delivery;
using core::Duration;
using core::Engine;
using core::EngineConfig;
using core::Fence;
using core::Instant;
using core::Namespace;
using core::Reply;
using core::Request;
using core::SessionId;
using core::Status;
using core::Token;
using differential::ConfigChoice;
using differential::kKeys;
using differential::kMaxFence;
using differential::kSecondNs;
using differential::kSlots;
using differential::Step;
using differential::StepKind;
using differential::TokenPick;

// ---- generated inputs ---------------------------------------------------------------------------

rc::Gen<std::int64_t> gen_advance_ns() {
  using rc::gen::elementOf;
  using rc::gen::inRange;
  using rc::gen::just;
  return rc::gen::weightedOneOf<std::int64_t>({
      {14, just<std::int64_t>(0)},
      {6, inRange<std::int64_t>(1, 1000)},
      {8, elementOf(
              std::vector<std::int64_t>{kSecondNs, kSecondNs - 1, kSecondNs + 1, kSecondNs / 2})},
      {3, rc::gen::map(inRange<std::int64_t>(2, 7), [](std::int64_t s) { return s * kSecondNs; })},
      {2, inRange<std::int64_t>(kSecondNs, 7 * kSecondNs)},
      {1, inRange<std::int64_t>(1'000'000'000'000, 1'000'000'000'000'000)},
      {2, inRange<std::int64_t>(-3 * kSecondNs, 0)},
      {1, elementOf(std::vector<std::int64_t>{-1, -kSecondNs, -1'000'000'000'000'000})},
  });
}

rc::Gen<Step> gen_step() {
  using rc::gen::inRange;
  using rc::gen::set;
  return rc::gen::build<Step>(
      set(&Step::kind, rc::gen::weightedElement<StepKind>({{44, StepKind::kRequest},
                                                           {3, StepKind::kTick},
                                                           {3, StepKind::kClose},
                                                           {2, StepKind::kStats}})),
      set(&Step::advance_ns, gen_advance_ns()), set(&Step::slot, inRange<std::size_t>(0, kSlots)),
      set(&Step::command,
          rc::gen::weightedElement<Command>(
              {{10, Command::kLock},       {10, Command::kSemLock},     {7, Command::kRelease},
               {7, Command::kSemRelease},  {4, Command::kRenew},        {4, Command::kSemRenew},
               {6, Command::kEnqueue},     {6, Command::kSemEnqueue},   {6, Command::kWait},
               {6, Command::kSemWait},     {8, Command::kReadLock},     {4, Command::kWriteLock},
               {5, Command::kReadRelease}, {3, Command::kWriteRelease}, {2, Command::kReadRenew},
               {2, Command::kWriteRenew},  {3, Command::kReadEnqueue},  {3, Command::kWriteEnqueue},
               {3, Command::kReadWait},    {3, Command::kWriteWait},    {4, Command::kCheck},
               {3, Command::kForceRelease}})),
      set(&Step::key, inRange<std::size_t>(0, kKeys)),
      set(&Step::timeout_s,
          rc::gen::weightedOneOf<std::int64_t>(
              {{8, inRange<std::int64_t>(0, 4)}, {1, inRange<std::int64_t>(10, 31)}})),
      set(&Step::lease_s,
          rc::gen::weightedOneOf<std::int64_t>({{3, rc::gen::just<std::int64_t>(0)},
                                                {6, inRange<std::int64_t>(1, 6)},
                                                {1, inRange<std::int64_t>(30, 61)}})),
      set(&Step::limit, rc::gen::weightedOneOf<std::int64_t>({{6, rc::gen::just<std::int64_t>(0)},
                                                              {2, inRange<std::int64_t>(1, 4)}})),
      set(&Step::token_pick, rc::gen::weightedElement<TokenPick>({{10, TokenPick::kSameKey},
                                                                  {4, TokenPick::kAny},
                                                                  {2, TokenPick::kForgedSalt},
                                                                  {1, TokenPick::kRandom},
                                                                  {1, TokenPick::kMalformed}})),
      set(&Step::token_index, inRange<std::size_t>(0, 4)),
      set(&Step::auto_release, rc::gen::arbitrary<bool>()),
      set(&Step::space,
          rc::gen::element(Namespace::kLock, Namespace::kSemaphore, Namespace::kReadWrite)));
}

rc::Gen<ConfigChoice> gen_config() {
  using rc::gen::inRange;
  using rc::gen::set;
  return rc::gen::build<ConfigChoice>(
      set(&ConfigChoice::default_lease_s, inRange<std::int64_t>(1, 6)),
      set(&ConfigChoice::gc_max_idle_ns,
          rc::gen::elementOf(std::vector<std::int64_t>{0, 1, kSecondNs / 2, kSecondNs,
                                                       2 * kSecondNs, 3 * kSecondNs})),
      set(&ConfigChoice::resources_max,
          rc::gen::weightedOneOf<std::int64_t>(
              {{2, inRange<std::int64_t>(1, 7)}, {1, rc::gen::just<std::int64_t>(1'048'576)}})),
      set(&ConfigChoice::waiters_max, inRange<std::int64_t>(0, 4)),
      set(&ConfigChoice::fence_floor,
          rc::gen::weightedOneOf<std::uint64_t>(
              {{12, inRange<std::uint64_t>(0, 1'000'000)},
               {1, rc::gen::map(inRange<std::uint64_t>(0, 6),
                                [](std::uint64_t back) { return kMaxFence - back; })}})),
      set(&ConfigChoice::stats_entries_max,
          rc::gen::weightedOneOf<std::size_t>(
              {{3, rc::gen::just<std::size_t>(10'000)}, {1, inRange<std::size_t>(1, 4)}})),
      set(&ConfigChoice::deadlines_per_call,
          rc::gen::weightedElement<std::size_t>({{2, 32}, {1, 1}, {1, 2}, {1, 3}})),
      set(&ConfigChoice::start_ns, inRange<std::int64_t>(-1'000'000'000'000, 1'000'000'000'000)),
      set(&ConfigChoice::near_max_jumps, rc::gen::weightedElement<bool>({{19, false}, {1, true}})),
      set(&ConfigChoice::last_key_limit,
          rc::gen::weightedElement<std::int64_t>({{3, static_cast<std::int64_t>(kKeys)}, {1, 17}})),
      set(&ConfigChoice::salt_seed, rc::gen::arbitrary<std::uint64_t>()),
      set(&ConfigChoice::lock_delay_ns,
          rc::gen::weightedElement<std::int64_t>(
              {{3, 0}, {1, 1}, {1, kSecondNs / 2}, {1, kSecondNs}, {1, 2 * kSecondNs}})));
}

// With TURNSTILE_MODEL_COVERAGE=1 the property prints how often each (command, reply) and each
// delivery occurred, to check that the generator reaches the interesting paths.
bool coverage_wanted() {
  static const bool wanted = [] {
    const char* value = std::getenv("TURNSTILE_MODEL_COVERAGE");
    return value != nullptr && std::string(value) == "1";
  }();
  return wanted;
}
struct PrintedCoverage : differential::Coverage {
  ~PrintedCoverage() {
    if (coverage_wanted()) print(stdout);
  }
};
PrintedCoverage coverage;

RC_GTEST_PROP(EngineModel, EngineMatchesReferenceModel, ()) {
  ConfigChoice choice = *gen_config();
  // Up to 150 steps (rapidcheck's size, 0..100, scaled): long enough for leases to expire,
  // queues to drain and keys to be collected and re-created within one case.
  std::vector<Step> steps = *rc::gen::scale(1.5, rc::gen::container<std::vector<Step>>(gen_step()));
  // Any divergence or broken invariant ends the case with RC_FAIL and the trace of the run so far.
  std::ostringstream trace;
  differential::Options options;
  options.fail = [&trace](const std::string& what) {
    RC_FAIL(trace.str() + "\nDIVERGENCE: " + what);
  };
  options.trace = &trace;
  options.coverage = coverage_wanted() ? &coverage : nullptr;
  differential::EngineDifferential harness(choice, std::move(options));
  for (std::size_t i = 0; i < steps.size(); ++i) harness.apply(i, steps[i]);
}

}  // namespace
}  // namespace turnstile::test

// ---- the reference model on hand-written scenarios ------------------------------------------
//
// The property above only shows that engine and model agree; these pin the model itself to
// docs/semantics.md, so that a shared misreading cannot pass unnoticed.

namespace turnstile::test {
namespace {

Instant at_ms(std::int64_t ms) { return Instant::from_ns(1'000'000'000'000 + ms * 1'000'000); }
SessionId session(std::uint64_t id) { return SessionId{id}; }

using test::enqueue_request;
using test::lock_request;
using test::release_request;
using test::renew_request;
using test::sem_enqueue_request;
using test::sem_lock_request;
using test::wait_request;

EngineConfig small_config() {
  EngineConfig config;
  config.default_lease_s = 33;
  config.gc_max_idle = Duration::seconds(60);
  config.fence_floor = Fence{1000};
  return config;
}

// Holders of one resource as (session, deadline) pairs, in grant order.
std::vector<std::pair<SessionId, Instant>> holders_of(const ReferenceModel& model, Namespace ns,
                                                      const std::string& key) {
  std::vector<std::pair<SessionId, Instant>> result;
  for (const auto& view : model.inspect()) {
    if (view.ns != ns || view.key != key) continue;
    for (const auto& holder : view.holders) result.emplace_back(holder.session, holder.deadline);
  }
  return result;
}
std::vector<SessionId> queue_of(const ReferenceModel& model, Namespace ns, const std::string& key) {
  for (const auto& view : model.inspect()) {
    if (view.ns == ns && view.key == key) return view.waiters;
  }
  return {};
}

TEST(ReferenceModel, FastPathQueueAndFifoPromotion) {
  ReferenceModel model(small_config(), 7);
  std::vector<Delivery> out;
  Reply first = model.handle(at_ms(0), session(1), lock_request("a", 0, 10), out);
  ASSERT_EQ(first.status, Status::kOk);
  ASSERT_TRUE(first.token.has_value());
  EXPECT_EQ(first.token->fence, Fence{1001});
  EXPECT_EQ(first.seconds, 10);
  EXPECT_EQ(model.handle(at_ms(0), session(2), lock_request("a", 5), out).status, Status::kParked);
  EXPECT_EQ(model.handle(at_ms(0), session(3), lock_request("a", 5, 4), out).status,
            Status::kParked);
  // A newcomer never overtakes the queue, and timeout 0 does not queue.
  EXPECT_EQ(model.handle(at_ms(0), session(4), lock_request("a", 0), out).status, Status::kTimeout);
  EXPECT_EQ(queue_of(model, Namespace::kLock, "a"),
            (std::vector<SessionId>{session(2), session(3)}));
  EXPECT_TRUE(out.empty());

  EXPECT_EQ(model.handle(at_ms(1000), session(4), release_request("a", first.token), out).status,
            Status::kOk);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].session, session(2));
  EXPECT_EQ(out[0].reply.status, Status::kOk);
  EXPECT_EQ(out[0].reply.token->fence, Fence{1002});
  EXPECT_EQ(out[0].reply.seconds, 33);  // no lease given: the server default
  EXPECT_EQ(holders_of(model, Namespace::kLock, "a"),
            (std::vector<std::pair<SessionId, Instant>>{{session(2), at_ms(34'000)}}));
  Token second = *out[0].reply.token;
  out.clear();
  // A released token is gone: releasing it again is an error and changes nothing.
  EXPECT_EQ(model.handle(at_ms(1000), session(1), release_request("a", first.token), out).status,
            Status::kError);
  EXPECT_EQ(model.handle(at_ms(2000), session(1), release_request("a", second), out).status,
            Status::kOk);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].session, session(3));
  EXPECT_EQ(out[0].reply.seconds, 4);
  EXPECT_EQ(model.last_fence(), Fence{1003});
}

TEST(ReferenceModel, LeaseExpiryBeatsWaitTimeoutAtTheSameInstant) {
  ReferenceModel model(small_config(), 7);
  std::vector<Delivery> out;
  ASSERT_EQ(model.handle(at_ms(0), session(1), lock_request("a", 0, 2), out).status, Status::kOk);
  ASSERT_EQ(model.handle(at_ms(0), session(2), lock_request("a", 2), out).status, Status::kParked);
  ASSERT_EQ(model.handle(at_ms(0), session(3), lock_request("b", 0, 2), out).status, Status::kOk);
  ASSERT_EQ(model.handle(at_ms(0), session(4), lock_request("b", 1), out).status, Status::kParked);
  EXPECT_EQ(model.next_wake(), at_ms(1000));
  model.tick(at_ms(2000), out);
  // s2's timeout and s1's lease end together: the grant wins. s4's timeout came first.
  ASSERT_EQ(out.size(), 2u);
  std::map<SessionId, Status> statuses;
  for (const Delivery& delivery : out) statuses[delivery.session] = delivery.reply.status;
  EXPECT_EQ(statuses[session(2)], Status::kOk);
  EXPECT_EQ(statuses[session(4)], Status::kTimeout);
  EXPECT_EQ(model.counters().lease_expiries, 2u);
  EXPECT_EQ(model.counters().wait_timeouts, 1u);
}

TEST(ReferenceModel, LeaseOfAWaiterPromotedLateRunsFromNow) {
  ReferenceModel model(small_config(), 7);
  std::vector<Delivery> out;
  ASSERT_EQ(model.handle(at_ms(0), session(1), lock_request("a", 0, 1), out).status, Status::kOk);
  ASSERT_EQ(model.handle(at_ms(0), session(2), lock_request("a", 3, 1), out).status,
            Status::kParked);
  // The engine learns of time only at 2.5 s: s1's lease ended at 1 s, and s2's grant is made
  // (and delivered) at 2.5 s with a whole lease, not one that ended at 2 s.
  model.tick(at_ms(2500), out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].reply.status, Status::kOk);
  EXPECT_EQ(holders_of(model, Namespace::kLock, "a"),
            (std::vector<std::pair<SessionId, Instant>>{{session(2), at_ms(3500)}}));
}

TEST(ReferenceModel, GarbageCollectionNeedsStrictlyMoreThanMaxIdle) {
  EngineConfig config = small_config();
  config.gc_max_idle = Duration::seconds(2);
  ReferenceModel model(config, 7);
  std::vector<Delivery> out;
  Reply granted = model.handle(at_ms(0), session(1), sem_lock_request("a", 0, 2, 10), out);
  ASSERT_EQ(granted.status, Status::kOk);
  ASSERT_EQ(model
                .handle(at_ms(500), session(1),
                        release_request("a", granted.token, Command::kSemRelease), out)
                .status,
            Status::kOk);
  // A bogus release neither succeeds nor touches the resource.
  ASSERT_EQ(model
                .handle(at_ms(1500), session(1),
                        release_request("a", Token{Fence{1}, 1}, Command::kSemRelease), out)
                .status,
            Status::kError);
  EXPECT_EQ(model.next_wake(), at_ms(2500) + Duration::nanoseconds(1));
  model.tick(at_ms(2500), out);
  EXPECT_EQ(model.resources_count(), 1u);
  model.tick(at_ms(2500) + Duration::nanoseconds(1), out);
  EXPECT_EQ(model.resources_count(), 0u);
  EXPECT_EQ(model.counters().resources_collected, 1u);
  // The limit went with it.
  EXPECT_EQ(model.handle(at_ms(3000), session(1), sem_lock_request("a", 0, 3), out).status,
            Status::kOk);
}

TEST(ReferenceModel, LimitsMaxLocksAndMaxWaiters) {
  EngineConfig config = small_config();
  config.resources_max = 2;
  config.waiters_max = 1;
  ReferenceModel model(config, 7);
  std::vector<Delivery> out;
  EXPECT_EQ(model.handle(at_ms(0), session(1), sem_lock_request("a", 0, 2), out).status,
            Status::kOk);
  EXPECT_EQ(model.handle(at_ms(0), session(1), sem_lock_request("a", 0, 3), out).status,
            Status::kErrorLimitMismatch);
  // The same key in the lock namespace is another resource.
  EXPECT_EQ(model.handle(at_ms(0), session(1), lock_request("a", 0), out).status, Status::kOk);
  EXPECT_EQ(model.handle(at_ms(0), session(1), lock_request("b", 0), out).status,
            Status::kErrorMaxLocks);
  EXPECT_EQ(model.handle(at_ms(0), session(2), sem_lock_request("a", 0, 2), out).status,
            Status::kOk);
  EXPECT_EQ(model.handle(at_ms(0), session(3), sem_lock_request("a", 1, 2), out).status,
            Status::kParked);
  EXPECT_EQ(model.handle(at_ms(0), session(4), sem_lock_request("a", 1, 2), out).status,
            Status::kErrorMaxWaiters);
  EXPECT_EQ(model.handle(at_ms(0), session(4), sem_enqueue_request("a", 2), out).status,
            Status::kErrorMaxWaiters);
  EXPECT_EQ(model.resources_count(), 2u);
}

TEST(ReferenceModel, TwoPhaseAcquireWaitAndExpiredRecord) {
  ReferenceModel model(small_config(), 7);
  std::vector<Delivery> out;
  Reply acquired = model.handle(at_ms(0), session(1), enqueue_request("a", 5), out);
  ASSERT_EQ(acquired.status, Status::kAcquired);
  EXPECT_EQ(model.handle(at_ms(0), session(1), enqueue_request("a", 5), out).status,
            Status::kErrorAlreadyEnqueued);
  Reply waited = model.handle(at_ms(3000), session(1), wait_request("a", 0), out);
  EXPECT_EQ(waited.status, Status::kOk);
  EXPECT_EQ(waited.token, acquired.token);
  EXPECT_EQ(waited.seconds, 5);
  // `w` restarted the lease.
  EXPECT_EQ(holders_of(model, Namespace::kLock, "a"),
            (std::vector<std::pair<SessionId, Instant>>{{session(1), at_ms(8000)}}));
  EXPECT_EQ(model.handle(at_ms(3000), session(1), wait_request("a", 0), out).status,
            Status::kErrorNotEnqueued);

  // Queued, then w with timeout 0 gives up and forgets the record.
  EXPECT_EQ(model.handle(at_ms(3000), session(2), enqueue_request("a"), out).status,
            Status::kQueued);
  EXPECT_EQ(model.handle(at_ms(3000), session(2), wait_request("a", 0), out).status,
            Status::kTimeout);
  EXPECT_EQ(model.handle(at_ms(3000), session(2), wait_request("a", 1), out).status,
            Status::kErrorNotEnqueued);

  // Queued, granted silently on release, lease runs out before w: error_lease_expired, once.
  EXPECT_EQ(model.handle(at_ms(3000), session(3), enqueue_request("a", 2), out).status,
            Status::kQueued);
  EXPECT_EQ(model.handle(at_ms(4000), session(1), release_request("a", acquired.token), out).status,
            Status::kOk);
  EXPECT_TRUE(out.empty());  // nothing is parked: the grant waits for w
  EXPECT_EQ(holders_of(model, Namespace::kLock, "a"),
            (std::vector<std::pair<SessionId, Instant>>{{session(3), at_ms(6000)}}));
  EXPECT_EQ(model.handle(at_ms(6000), session(3), wait_request("a", 1), out).status,
            Status::kErrorLeaseExpired);
  EXPECT_EQ(model.handle(at_ms(6000), session(3), wait_request("a", 1), out).status,
            Status::kErrorNotEnqueued);
  EXPECT_EQ(model.handle(at_ms(6000), session(3), enqueue_request("a"), out).status,
            Status::kAcquired);

  // Queued and parked on w: the grant is delivered to w.
  Reply held = model.handle(at_ms(7000), session(4), lock_request("b", 0), out);
  EXPECT_EQ(model.handle(at_ms(7000), session(5), enqueue_request("b", 3), out).status,
            Status::kQueued);
  EXPECT_EQ(model.handle(at_ms(7000), session(5), wait_request("b", 9), out).status,
            Status::kParked);
  EXPECT_EQ(model.handle(at_ms(8000), session(4), release_request("b", held.token), out).status,
            Status::kOk);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].session, session(5));
  EXPECT_EQ(out[0].reply.seconds, 3);
  out.clear();
  EXPECT_EQ(model.handle(at_ms(8000), session(5), wait_request("b", 0), out).status,
            Status::kErrorNotEnqueued);
}

TEST(ReferenceModel, ReleaseByAnyoneDropsAGrantedRecord) {
  ReferenceModel model(small_config(), 7);
  std::vector<Delivery> out;
  Reply acquired = model.handle(at_ms(0), session(1), sem_enqueue_request("a", 2), out);
  ASSERT_EQ(acquired.status, Status::kAcquired);
  EXPECT_EQ(model
                .handle(at_ms(0), session(2),
                        release_request("a", acquired.token, Command::kSemRelease), out)
                .status,
            Status::kOk);
  EXPECT_EQ(model.handle(at_ms(0), session(1), wait_request("a", 0, Command::kSemWait), out).status,
            Status::kErrorNotEnqueued);
}

// docs/semantics.md, e step 1: an expired record is discarded only once the request passes the
// find-or-create and limit checks; a rejected request changes nothing.
TEST(ReferenceModel, RejectedEnqueueKeepsAnExpiredRecord) {
  ReferenceModel model(small_config(), 7);
  std::vector<Delivery> out;
  ASSERT_EQ(model.handle(at_ms(0), session(1), sem_enqueue_request("b", 2, 1), out).status,
            Status::kAcquired);
  model.tick(at_ms(1000), out);  // the lease ends before sw: the record is expired
  EXPECT_EQ(model.handle(at_ms(1000), session(1), sem_enqueue_request("b", 1), out).status,
            Status::kErrorLimitMismatch);
  EXPECT_EQ(
      model.handle(at_ms(1000), session(1), wait_request("b", 0, Command::kSemWait), out).status,
      Status::kErrorLeaseExpired);
  // Accepted, the next se discards it and starts afresh.
  model.tick(at_ms(2000), out);
  ASSERT_EQ(model.handle(at_ms(2000), session(2), sem_enqueue_request("c", 2, 1), out).status,
            Status::kAcquired);
  model.tick(at_ms(3000), out);
  EXPECT_EQ(model.handle(at_ms(3000), session(2), sem_enqueue_request("c", 2), out).status,
            Status::kAcquired);
}

// A w without a record touches nothing, so it cannot keep an idle resource alive; a w that finds
// its record (even an expired one) touches it.
TEST(ReferenceModel, WaitTouchesOnlyWithARecord) {
  EngineConfig config = small_config();
  config.gc_max_idle = Duration::seconds(1);
  ReferenceModel model(config, 7);
  std::vector<Delivery> out;
  Reply held = model.handle(at_ms(0), session(1), lock_request("a", 0, 10), out);
  ASSERT_EQ(model.handle(at_ms(0), session(1), release_request("a", held.token), out).status,
            Status::kOk);
  EXPECT_EQ(model.handle(at_ms(900), session(2), wait_request("a", 0), out).status,
            Status::kErrorNotEnqueued);
  model.tick(at_ms(1000) + Duration::nanoseconds(1), out);
  EXPECT_EQ(model.resources_count(), 0u);

  ASSERT_EQ(model.handle(at_ms(2000), session(1), enqueue_request("b", 1), out).status,
            Status::kAcquired);
  model.tick(at_ms(3000), out);  // expired record: b stays
  EXPECT_EQ(model.handle(at_ms(3500), session(1), wait_request("b", 0), out).status,
            Status::kErrorLeaseExpired);
  model.tick(at_ms(4500), out);
  EXPECT_EQ(model.resources_count(), 1u);  // touched at 3.5 s
  model.tick(at_ms(4500) + Duration::nanoseconds(1), out);
  EXPECT_EQ(model.resources_count(), 0u);
}

TEST(ReferenceModel, FenceExhaustion) {
  EngineConfig config = small_config();
  config.fence_floor = Fence{kMaxFence - 1};
  ReferenceModel model(config, 7);
  std::vector<Delivery> out;
  Reply last = model.handle(at_ms(0), session(1), lock_request("a", 0), out);
  ASSERT_EQ(last.status, Status::kOk);
  EXPECT_EQ(last.token->fence, Fence{kMaxFence});
  EXPECT_EQ(model.handle(at_ms(0), session(2), lock_request("a", 5), out).status, Status::kParked);
  EXPECT_EQ(model.handle(at_ms(0), session(3), enqueue_request("a"), out).status, Status::kQueued);
  // A new key could never be granted, so it is not created.
  EXPECT_EQ(model.handle(at_ms(0), session(4), lock_request("b", 5), out).status, Status::kError);
  EXPECT_EQ(model.resources_count(), 1u);
  EXPECT_EQ(model.handle(at_ms(1000), session(1), release_request("a", last.token), out).status,
            Status::kOk);
  // Both waiters leave the queue; the parked one is told.
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].session, session(2));
  EXPECT_EQ(out[0].reply.status, Status::kError);
  EXPECT_TRUE(queue_of(model, Namespace::kLock, "a").empty());
  EXPECT_EQ(model.handle(at_ms(1000), session(3), wait_request("a", 1), out).status,
            Status::kErrorNotEnqueued);
  EXPECT_EQ(model.counters().fence_exhausted, 3u);
  EXPECT_EQ(model.last_fence(), Fence{kMaxFence});
}

TEST(ReferenceModel, ClockRegressionNeitherMovesNorExtendsLeases) {
  ReferenceModel model(small_config(), 7);
  std::vector<Delivery> out;
  Reply granted = model.handle(at_ms(10'000), session(1), lock_request("a", 0, 2), out);
  ASSERT_EQ(granted.status, Status::kOk);
  // 10 s in the past counts as 10 s: the renew's lease runs from the largest instant seen.
  Reply renewed = model.handle(at_ms(0), session(1), renew_request("a", granted.token, 5), out);
  EXPECT_EQ(renewed, Reply::renewed(5));
  EXPECT_EQ(model.counters().clock_regressions, 1u);
  EXPECT_EQ(model.now(), at_ms(10'000));
  EXPECT_EQ(holders_of(model, Namespace::kLock, "a"),
            (std::vector<std::pair<SessionId, Instant>>{{session(1), at_ms(15'000)}}));
  model.tick(at_ms(15'000), out);
  EXPECT_TRUE(holders_of(model, Namespace::kLock, "a").empty());
  // An ended lease is never revived.
  EXPECT_EQ(model.handle(at_ms(15'000), session(1), renew_request("a", granted.token), out).status,
            Status::kError);
}

TEST(ReferenceModel, RenewUsesTheRequestOrServerDefaultLease) {
  EngineConfig config = small_config();
  config.default_lease_s = 7;
  ReferenceModel model(config, 7);
  std::vector<Delivery> out;
  Reply granted = model.handle(at_ms(0), session(1), lock_request("a", 0, 3), out);
  EXPECT_EQ(model.handle(at_ms(1000), session(2), renew_request("a", granted.token), out),
            Reply::renewed(7));
  EXPECT_EQ(
      model.handle(at_ms(1000), session(2), renew_request("a", Token{granted.token->fence, 1}), out)
          .status,
      Status::kError);
  EXPECT_EQ(model.handle(at_ms(1000), session(2), renew_request("a", std::nullopt), out).status,
            Status::kError);
}

TEST(ReferenceModel, ClosedSessionLeavesQueuesAndReleasesOnlyWithAutoRelease) {
  ReferenceModel model(small_config(), 7);
  std::vector<Delivery> out;
  Reply held_a = model.handle(at_ms(0), session(1), lock_request("a", 0, 10), out);
  Reply held_b = model.handle(at_ms(0), session(1), lock_request("b", 0, 10), out);
  ASSERT_EQ(held_a.status, Status::kOk);
  ASSERT_EQ(held_b.status, Status::kOk);
  EXPECT_EQ(model.handle(at_ms(0), session(2), lock_request("a", 5), out).status, Status::kParked);
  EXPECT_EQ(model.handle(at_ms(0), session(3), enqueue_request("a"), out).status, Status::kQueued);
  EXPECT_EQ(model.handle(at_ms(0), session(4), lock_request("b", 9), out).status, Status::kParked);
  model.close_session(at_ms(1000), session(2), true, out);
  EXPECT_TRUE(out.empty());  // a dropped parked request gets no reply
  EXPECT_EQ(queue_of(model, Namespace::kLock, "a"), (std::vector<SessionId>{session(3)}));

  // Without auto-release s1 keeps its locks until their leases end.
  ReferenceModel copy = model;
  copy.close_session(at_ms(1000), session(1), false, out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(holders_of(copy, Namespace::kLock, "a").size(), 1u);
  copy.tick(at_ms(10'000), out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].session, session(4));
  out.clear();

  // With auto-release both locks pass on: s3 (two-phase, silently), s4 (parked).
  model.close_session(at_ms(1000), session(1), true, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].session, session(4));
  EXPECT_EQ(holders_of(model, Namespace::kLock, "a"),
            (std::vector<std::pair<SessionId, Instant>>{{session(3), at_ms(34'000)}}));
  EXPECT_EQ(model.handle(at_ms(1000), session(3), wait_request("a", 0), out).status, Status::kOk);
}

TEST(ReferenceModel, StatsClassifiesByLimitAndSortsByKey) {
  ReferenceModel model(small_config(), 7);
  std::vector<Delivery> out;
  ASSERT_EQ(model.handle(at_ms(0), session(1), lock_request("m", 0, 10), out).status, Status::kOk);
  ASSERT_EQ(model.handle(at_ms(0), session(2), lock_request("m", 30), out).status, Status::kParked);
  Reply sem = model.handle(at_ms(0), session(3), sem_lock_request("k", 0, 2), out);
  ASSERT_EQ(sem.status, Status::kOk);
  ASSERT_EQ(model
                .handle(at_ms(1000), session(3),
                        release_request("k", sem.token, Command::kSemRelease), out)
                .status,
            Status::kOk);
  ASSERT_EQ(model.handle(at_ms(1000), session(3), sem_lock_request("z", 0, 1), out).status,
            Status::kOk);
  core::StatsSnapshot stats = model.stats(at_ms(4000), out);
  core::StatsSnapshot expected;
  expected.locks = {core::LockStats{"m", session(1), 6.0, 1},
                    core::LockStats{"z", session(3), 30.0, 0}};
  expected.idle_semaphores = {core::IdleStats{"k", 3.0}};
  expected.counters.grants = 3;  // m, k and z; nothing expired or timed out yet
  expected.totals.locks_held = 2;
  expected.totals.lock_waiters = 1;
  EXPECT_EQ(stats, expected);
}

}  // namespace
}  // namespace turnstile::test
