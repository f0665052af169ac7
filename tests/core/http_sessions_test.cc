// Unit tests for core/http_sessions.h (reference 3.2, 3.3, 3.6) and Engine::cancel_parked: the
// HTTP session lifetime and reaper, per-session serialization, what a delete or a departed client
// does to a long poll, the rate limiter's token bucket and the bearer check. Time is injected.
#include "core/http_sessions.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/engine.h"
#include "core/random.h"
#include "testing/requests.h"

namespace turnstile::core {
namespace {

constexpr Instant secs(std::int64_t seconds) {
  return Instant::from_ns(0) + Duration::seconds(seconds);
}
constexpr Instant millis(std::int64_t ms) {
  return Instant::from_ns(0) + Duration::milliseconds(ms);
}

using test::enqueue_request;
using test::lock_request;

Token token(std::uint64_t fence) { return Token{Fence{fence}, 7}; }

HttpSessionsConfig config(std::int64_t idle_s, std::int64_t max = 0, std::int64_t per_ip = 0) {
  HttpSessionsConfig c;
  c.idle_timeout = Duration::seconds(idle_s);
  c.sessions_max = max;
  c.sessions_per_ip_max = per_ip;
  return c;
}

TEST(HttpSessionsTest, CreateTouchAndCaps) {
  HttpSessions sessions(config(20, /*max=*/2, /*per_ip=*/1));
  EXPECT_EQ(sessions.create(secs(0), SessionId{1}, "a", "10.0.0.1"), HttpCreate::kOk);
  EXPECT_EQ(sessions.create(secs(0), SessionId{2}, "b", "10.0.0.1"), HttpCreate::kMaxSessionsPerIp);
  EXPECT_EQ(sessions.create(secs(0), SessionId{3}, "c", "10.0.0.2"), HttpCreate::kOk);
  EXPECT_EQ(sessions.create(secs(0), SessionId{4}, "d", "10.0.0.3"), HttpCreate::kMaxSessions);
  EXPECT_EQ(sessions.live(), 2U);
  EXPECT_EQ(sessions.touch(secs(1), "a"), SessionId{1});
  EXPECT_FALSE(sessions.touch(secs(1), "zz").has_value());
  EXPECT_TRUE(sessions.remove("a"));
  EXPECT_FALSE(sessions.remove("a"));  // already gone: 410
  EXPECT_FALSE(sessions.touch(secs(1), "a").has_value());
  // The per-IP slot is free again.
  EXPECT_EQ(sessions.create(secs(2), SessionId{5}, "e", "10.0.0.1"), HttpCreate::kOk);
  EXPECT_EQ(sessions.take_closed(), (std::vector<SessionId>{SessionId{1}}));
}

// Two HttpSessions (two threads of a driver) sharing one quota: the caps hold for both together,
// and a session closed on either frees its place for both.
TEST(HttpSessionsTest, SharedQuotaCapsEveryHttpSessionsTogether) {
  SessionCaps caps(/*sessions_max=*/2, /*sessions_per_ip_max=*/1);
  HttpSessions first(config(20, 2, 1), &caps);
  HttpSessions second(config(20, 2, 1), &caps);
  EXPECT_EQ(first.create(secs(0), SessionId{1}, "a", "10.0.0.1"), HttpCreate::kOk);
  EXPECT_EQ(second.create(secs(0), SessionId{2}, "b", "10.0.0.1"), HttpCreate::kMaxSessionsPerIp);
  EXPECT_EQ(second.create(secs(0), SessionId{3}, "c", "10.0.0.2"), HttpCreate::kOk);
  EXPECT_EQ(first.create(secs(0), SessionId{5}, "e", "10.0.0.3"), HttpCreate::kMaxSessions);
  EXPECT_EQ(caps.live(), 2);
  EXPECT_EQ(first.live(), 1U);
  EXPECT_EQ(second.live(), 1U);
  EXPECT_TRUE(first.remove("a"));
  EXPECT_EQ(caps.live(), 1);
  EXPECT_EQ(second.create(secs(1), SessionId{7}, "g", "10.0.0.1"), HttpCreate::kOk);
  EXPECT_EQ(first.create(secs(1), SessionId{9}, "i", "10.0.0.4"), HttpCreate::kMaxSessions);
}

TEST(HttpSessionsTest, RequestsOnOneSessionAreSerialized) {
  HttpSessions sessions(config(20));
  ASSERT_EQ(sessions.create(secs(0), SessionId{1}, "a", "ip"), HttpCreate::kOk);
  ASSERT_TRUE(sessions.submit(secs(0), "a", 10, lock_request("k", 5)));
  ASSERT_TRUE(sessions.submit(secs(0), "a", 11, lock_request("j", 5)));
  std::vector<HttpRoute> routes = sessions.take_routes();
  ASSERT_EQ(routes.size(), 1U);  // the second waits for the first
  EXPECT_EQ(routes[0].request.key, "k");
  sessions.on_parked(SessionId{1});
  EXPECT_TRUE(sessions.take_routes().empty());
  sessions.on_reply(secs(1), SessionId{1}, Reply::granted(Status::kOk, token(1), 33));
  std::vector<HttpAnswer> answers = sessions.take_answers();
  ASSERT_EQ(answers.size(), 1U);
  EXPECT_EQ(answers[0].ticket, 10U);
  EXPECT_FALSE(answers[0].session_gone);
  routes = sessions.take_routes();
  ASSERT_EQ(routes.size(), 1U);
  EXPECT_EQ(routes[0].request.key, "j");
}

TEST(HttpSessionsTest, UnknownSessionIsGone) {
  HttpSessions sessions(config(20));
  EXPECT_FALSE(sessions.submit(secs(0), "nope", 1, lock_request("k", 0)));
}

TEST(HttpSessionsTest, DeleteWakesTheLongPollAtOnceAndDropsQueuedRequests) {
  HttpSessions sessions(config(20));
  ASSERT_EQ(sessions.create(secs(0), SessionId{1}, "a", "ip"), HttpCreate::kOk);
  ASSERT_TRUE(sessions.submit(secs(0), "a", 10, lock_request("k", 60)));
  ASSERT_TRUE(sessions.submit(secs(0), "a", 11, lock_request("j", 60)));
  (void)sessions.take_routes();
  sessions.on_parked(SessionId{1});
  ASSERT_TRUE(sessions.remove("a"));
  std::vector<HttpAnswer> answers = sessions.take_answers();
  ASSERT_EQ(answers.size(), 2U);
  EXPECT_EQ(answers[0].ticket, 10U);
  EXPECT_TRUE(answers[0].session_gone);
  EXPECT_EQ(answers[1].ticket, 11U);
  EXPECT_TRUE(answers[1].session_gone);
  EXPECT_EQ(sessions.take_closed(), (std::vector<SessionId>{SessionId{1}}));
  EXPECT_TRUE(sessions.take_cancels().empty());  // the close notice drops the parked request
  EXPECT_EQ(sessions.known(), 1U);               // until the engine accounts for it
  sessions.on_cancelled(SessionId{1});
  EXPECT_EQ(sessions.known(), 0U);
  EXPECT_FALSE(sessions.owns(SessionId{1}));
}

TEST(HttpSessionsTest, GrantRacingADeleteIsGivenBack) {
  HttpSessions sessions(config(20));
  ASSERT_EQ(sessions.create(secs(0), SessionId{1}, "a", "ip"), HttpCreate::kOk);
  ASSERT_TRUE(sessions.submit(secs(0), "a", 10, lock_request("k", 60)));
  (void)sessions.take_routes();
  ASSERT_TRUE(sessions.remove("a"));
  (void)sessions.take_answers();
  sessions.on_reply(secs(1), SessionId{1}, Reply::granted(Status::kOk, token(9), 33));
  EXPECT_TRUE(sessions.take_answers().empty());
  std::vector<HttpRoute> routes = sessions.take_routes();
  ASSERT_EQ(routes.size(), 1U);
  EXPECT_EQ(routes[0].request.command, Command::kRelease);
  EXPECT_EQ(routes[0].request.token, token(9));
  sessions.on_reply(secs(1), SessionId{1}, Reply::of(Status::kOk));
  EXPECT_EQ(sessions.known(), 0U);
}

TEST(HttpSessionsTest, ClientLeavingAParkedPollCancelsIt) {
  HttpSessions sessions(config(20));
  ASSERT_EQ(sessions.create(secs(0), SessionId{1}, "a", "ip"), HttpCreate::kOk);
  ASSERT_TRUE(sessions.submit(secs(0), "a", 10, lock_request("k", 60)));
  (void)sessions.take_routes();
  sessions.abandon(10);  // before the engine parked it
  EXPECT_TRUE(sessions.take_cancels().empty());
  sessions.on_parked(SessionId{1});
  EXPECT_EQ(sessions.take_cancels(), (std::vector<SessionId>{SessionId{1}}));
  sessions.on_cancelled(SessionId{1});
  EXPECT_TRUE(sessions.take_answers().empty());
  // The session lives on and serves the next request.
  ASSERT_TRUE(sessions.submit(secs(1), "a", 11, lock_request("k", 0)));
  EXPECT_EQ(sessions.take_routes().size(), 1U);
}

TEST(HttpSessionsTest, GrantRacingADepartedClientsCancelIsGivenBack) {
  HttpSessions sessions(config(20));
  ASSERT_EQ(sessions.create(secs(0), SessionId{1}, "a", "ip"), HttpCreate::kOk);
  Request semaphore = lock_request("s", 60);
  semaphore.command = Command::kSemLock;
  semaphore.limit = 2;
  ASSERT_TRUE(sessions.submit(secs(0), "a", 10, semaphore));
  (void)sessions.take_routes();
  sessions.on_parked(SessionId{1});
  sessions.abandon(10);
  EXPECT_EQ(sessions.take_cancels(), (std::vector<SessionId>{SessionId{1}}));
  // The grant was already on its way when the cancel reached the engine (which found nothing
  // parked): it is released, in the semaphore namespace, and nobody is answered.
  sessions.on_reply(secs(1), SessionId{1}, Reply::granted(Status::kOk, token(4), 33));
  EXPECT_TRUE(sessions.take_answers().empty());
  std::vector<HttpRoute> routes = sessions.take_routes();
  ASSERT_EQ(routes.size(), 1U);
  EXPECT_EQ(routes[0].request.command, Command::kSemRelease);
  EXPECT_EQ(routes[0].request.key, "s");
  EXPECT_EQ(routes[0].request.token, token(4));
  // A timeout that raced the cancel needs nothing given back.
  sessions.on_reply(secs(1), SessionId{1}, Reply::of(Status::kOk));
  ASSERT_TRUE(sessions.submit(secs(2), "a", 11, lock_request("k", 60)));
  (void)sessions.take_routes();
  sessions.abandon(11);
  sessions.on_reply(secs(3), SessionId{1}, Reply::of(Status::kTimeout));
  EXPECT_TRUE(sessions.take_routes().empty());
  EXPECT_TRUE(sessions.take_answers().empty());
}

TEST(HttpSessionsTest, ClientLeavingAnEnqueueTakesBackTheQueuedPlace) {
  HttpSessions sessions(config(20));
  ASSERT_EQ(sessions.create(secs(0), SessionId{1}, "a", "ip"), HttpCreate::kOk);
  ASSERT_TRUE(sessions.submit(secs(0), "a", 10, enqueue_request("k")));
  (void)sessions.take_routes();
  sessions.abandon(10);
  sessions.on_reply(secs(0), SessionId{1}, Reply::of(Status::kQueued));
  std::vector<HttpRoute> routes = sessions.take_routes();
  ASSERT_EQ(routes.size(), 1U);
  EXPECT_EQ(routes[0].request.command, Command::kWait);
  EXPECT_EQ(routes[0].request.timeout_s, 0);
  sessions.on_reply(secs(0), SessionId{1}, Reply::granted(Status::kOk, token(3), 33));
  routes = sessions.take_routes();
  ASSERT_EQ(routes.size(), 1U);
  EXPECT_EQ(routes[0].request.command, Command::kRelease);
}

// A read-write lock's grant nobody receives is released on its own side (rr for a read grant,
// wr for a write grant: the other side's release would not take it), and a queued place is
// taken back with a wait of its own side.
TEST(HttpSessionsTest, ReadWriteGrantsAndPlacesAreGivenBackOnTheirSide) {
  HttpSessions sessions(config(20));
  ASSERT_EQ(sessions.create(secs(0), SessionId{1}, "a", "ip"), HttpCreate::kOk);
  Request read = lock_request("k", 60);
  read.command = Command::kReadLock;
  ASSERT_TRUE(sessions.submit(secs(0), "a", 10, read));
  (void)sessions.take_routes();
  sessions.abandon(10);
  sessions.on_reply(secs(1), SessionId{1}, Reply::granted(Status::kOk, token(4), 33));
  std::vector<HttpRoute> routes = sessions.take_routes();
  ASSERT_EQ(routes.size(), 1U);
  EXPECT_EQ(routes[0].request.command, Command::kReadRelease);
  EXPECT_EQ(routes[0].request.key, "k");
  EXPECT_EQ(routes[0].request.token, token(4));
  sessions.on_reply(secs(1), SessionId{1}, Reply::of(Status::kOk));

  Request write = enqueue_request("k");
  write.command = Command::kWriteEnqueue;
  ASSERT_TRUE(sessions.submit(secs(1), "a", 11, write));
  (void)sessions.take_routes();
  sessions.abandon(11);
  sessions.on_reply(secs(1), SessionId{1}, Reply::of(Status::kQueued));
  routes = sessions.take_routes();
  ASSERT_EQ(routes.size(), 1U);
  EXPECT_EQ(routes[0].request.command, Command::kWriteWait);
  EXPECT_EQ(routes[0].request.timeout_s, 0);
  sessions.on_reply(secs(2), SessionId{1}, Reply::granted(Status::kOk, token(5), 33));
  routes = sessions.take_routes();
  ASSERT_EQ(routes.size(), 1U);
  EXPECT_EQ(routes[0].request.command, Command::kWriteRelease);
  EXPECT_EQ(routes[0].request.token, token(5));
}

TEST(HttpSessionsTest, ClientLeavingAQueuedRequestDropsIt) {
  HttpSessions sessions(config(20));
  ASSERT_EQ(sessions.create(secs(0), SessionId{1}, "a", "ip"), HttpCreate::kOk);
  ASSERT_TRUE(sessions.submit(secs(0), "a", 10, lock_request("k", 60)));
  ASSERT_TRUE(sessions.submit(secs(0), "a", 11, lock_request("j", 60)));
  (void)sessions.take_routes();
  sessions.abandon(11);
  sessions.on_reply(secs(1), SessionId{1}, Reply::of(Status::kTimeout));
  EXPECT_EQ(sessions.take_answers().size(), 1U);
  EXPECT_TRUE(sessions.take_routes().empty());
}

TEST(HttpSessionsTest, ReaperTakesSessionsIdleTwiceTheTimeoutAndNeverInFlight) {
  HttpSessions sessions(config(10));
  EXPECT_EQ(sessions.sweep_interval(), Duration::seconds(10));
  ASSERT_EQ(sessions.create(secs(0), SessionId{1}, "idle", "ip"), HttpCreate::kOk);
  ASSERT_EQ(sessions.create(secs(0), SessionId{2}, "busy", "ip"), HttpCreate::kOk);
  ASSERT_EQ(sessions.create(secs(0), SessionId{3}, "pinged", "ip"), HttpCreate::kOk);
  ASSERT_TRUE(sessions.submit(secs(0), "busy", 10, lock_request("k", 100)));
  EXPECT_EQ(sessions.reap(secs(20)), 0U);  // not more than 2 x 10 s
  EXPECT_TRUE(sessions.touch(secs(15), "pinged").has_value());
  EXPECT_EQ(sessions.reap(secs(21)), 1U);
  EXPECT_EQ(sessions.take_closed(), (std::vector<SessionId>{SessionId{1}}));
  EXPECT_EQ(sessions.reap(secs(36)), 1U);  // pinged at 15
  sessions.on_reply(secs(100), SessionId{2}, Reply::of(Status::kTimeout));
  EXPECT_EQ(sessions.reap(secs(120)), 0U);  // lastSeen refreshed when the request finished
  EXPECT_EQ(sessions.reap(secs(121)), 1U);
  EXPECT_EQ(sessions.live(), 0U);
}

TEST(HttpSessionsTest, ZeroIdleTimeoutNeverReaps) {
  HttpSessions sessions(config(0));
  EXPECT_EQ(sessions.sweep_interval(), Duration::seconds(10));
  ASSERT_EQ(sessions.create(secs(0), SessionId{1}, "a", "ip"), HttpCreate::kOk);
  EXPECT_EQ(sessions.reap(secs(1'000'000)), 0U);
  EXPECT_EQ(HttpSessions(config(100)).sweep_interval(), Duration::seconds(30));
}

TEST(EngineCancelParkedTest, WithdrawsTheWaiterAndPromotesTheNext) {
  SplitMix64 salts(1);
  Engine engine(EngineConfig{}, salts);
  std::vector<Delivery> out;
  const Reply held = engine.handle(secs(0), SessionId{1}, lock_request("k", 0), out);
  ASSERT_EQ(held.status, Status::kOk);
  ASSERT_EQ(engine.handle(secs(0), SessionId{2}, lock_request("k", 60), out).status,
            Status::kParked);
  ASSERT_EQ(engine.handle(secs(0), SessionId{3}, lock_request("k", 60), out).status,
            Status::kParked);
  EXPECT_TRUE(engine.cancel_parked(secs(1), SessionId{2}, out));
  EXPECT_FALSE(engine.cancel_parked(secs(1), SessionId{2}, out));  // nothing parked any more
  Request release;
  release.command = Command::kRelease;
  release.key = "k";
  release.token = held.token;
  EXPECT_EQ(engine.handle(secs(2), SessionId{1}, release, out).status, Status::kOk);
  ASSERT_EQ(out.size(), 1U);
  EXPECT_EQ(out[0].session, SessionId{3});  // session 2 left the queue
  EXPECT_TRUE(out[0].reply.is_grant());
}

TEST(EngineCancelParkedTest, CancelledWaitDropsTheTwoPhaseRecord) {
  SplitMix64 salts(1);
  Engine engine(EngineConfig{}, salts);
  std::vector<Delivery> out;
  ASSERT_EQ(engine.handle(secs(0), SessionId{1}, lock_request("k", 0), out).status, Status::kOk);
  ASSERT_EQ(engine.handle(secs(0), SessionId{2}, enqueue_request("k"), out).status,
            Status::kQueued);
  Request wait;
  wait.command = Command::kWait;
  wait.key = "k";
  wait.timeout_s = 60;
  ASSERT_EQ(engine.handle(secs(0), SessionId{2}, wait, out).status, Status::kParked);
  EXPECT_TRUE(engine.cancel_parked(secs(1), SessionId{2}, out));
  EXPECT_EQ(engine.handle(secs(1), SessionId{2}, wait, out).status, Status::kErrorNotEnqueued);
  EXPECT_EQ(engine.handle(secs(1), SessionId{2}, enqueue_request("k"), out).status,
            Status::kQueued);
}

TEST(RateLimiterTest, BucketStartsFullMinusOneAndRefillsContinuously) {
  RateLimiter limiter(/*rate_per_s=*/2, /*burst=*/3);
  EXPECT_TRUE(limiter.allow(millis(0), "a"));
  EXPECT_TRUE(limiter.allow(millis(0), "a"));
  EXPECT_TRUE(limiter.allow(millis(0), "a"));
  EXPECT_FALSE(limiter.allow(millis(0), "a"));
  EXPECT_TRUE(limiter.allow(millis(0), "b"));  // per IP
  EXPECT_FALSE(limiter.allow(millis(499), "a"));
  EXPECT_TRUE(limiter.allow(millis(500), "a"));  // 2 per second: one every 500 ms
  EXPECT_FALSE(limiter.allow(millis(500), "a"));
  EXPECT_TRUE(limiter.allow(secs(100), "a"));
  EXPECT_TRUE(limiter.allow(secs(100), "a"));
  EXPECT_TRUE(limiter.allow(secs(100), "a"));
  EXPECT_FALSE(limiter.allow(secs(100), "a"));  // never more than the burst
}

TEST(RateLimiterTest, ZeroRateAllowsEverythingAndIdleBucketsAreSwept) {
  RateLimiter off(0, 0);
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(off.allow(secs(0), "a"));
  RateLimiter limiter(1, 0);  // burst 0 = the rate
  EXPECT_TRUE(limiter.allow(secs(0), "a"));
  EXPECT_FALSE(limiter.allow(secs(0), "a"));
  EXPECT_TRUE(limiter.allow(secs(300), "b"));
  EXPECT_EQ(limiter.sweep(secs(600)), 0U);
  EXPECT_EQ(limiter.sweep(secs(601)), 1U);
  EXPECT_EQ(limiter.buckets(), 1U);
}

TEST(BearerTest, SchemeIsCaseInsensitiveAndValueTrimmed) {
  EXPECT_TRUE(bearer_matches("Bearer s3cret", "s3cret"));
  EXPECT_TRUE(bearer_matches("bearer   s3cret  ", "s3cret"));
  EXPECT_TRUE(bearer_matches("BEARER s3cret", "s3cret"));
  EXPECT_FALSE(bearer_matches("Bearer s3cre", "s3cret"));
  EXPECT_FALSE(bearer_matches("Basic s3cret", "s3cret"));
  EXPECT_FALSE(bearer_matches("Bearers3cret", "s3cret"));
  EXPECT_FALSE(bearer_matches("", "s3cret"));
  EXPECT_FALSE(bearer_matches("s3cret", "s3cret"));
}

// ---- lost slots and watches (docs/http-api.md, "Lost slots") ------------------------------------

LostSlot lost_slot(int i, LossReason reason = LossReason::kExpired) {
  return LostSlot{Namespace::kLock, "k" + std::to_string(i),
                  token(static_cast<std::uint64_t>(i + 1)), reason};
}

TEST(HttpSessionsLost, ASessionRemembersItsLatestLossesUntilTaken) {
  HttpSessions sessions(config(20));
  ASSERT_EQ(sessions.create(secs(0), SessionId{1}, "a", "ip"), HttpCreate::kOk);
  ASSERT_EQ(sessions.create(secs(0), SessionId{2}, "b", "ip"), HttpCreate::kOk);
  sessions.on_lost(SessionId{1}, lost_slot(0));
  sessions.on_lost(SessionId{1}, lost_slot(1, LossReason::kForced));
  sessions.on_lost(SessionId{9}, lost_slot(2));  // unknown: ignored
  EXPECT_TRUE(sessions.take_lost(SessionId{2}).slots.empty());
  HttpLosses taken = sessions.take_lost(SessionId{1});
  EXPECT_EQ(taken.slots, (std::vector<LostSlot>{lost_slot(0), lost_slot(1, LossReason::kForced)}));
  EXPECT_EQ(taken.dropped, 0U);
  EXPECT_TRUE(sessions.take_lost(SessionId{1}).slots.empty());  // taken once
  // The memory is bounded: the newest kLostRemembered are kept, the older ones only counted.
  const int total = static_cast<int>(HttpSessions::kLostRemembered) + 8;
  for (int i = 0; i < total; ++i) sessions.on_lost(SessionId{1}, lost_slot(i));
  taken = sessions.take_lost(SessionId{1});
  ASSERT_EQ(taken.slots.size(), HttpSessions::kLostRemembered);
  EXPECT_EQ(taken.slots.front(), lost_slot(8));
  EXPECT_EQ(taken.slots.back(), lost_slot(total - 1));
  EXPECT_EQ(taken.dropped, 8U);
  EXPECT_EQ(sessions.take_lost(SessionId{1}).dropped, 0U);
  // A closed session hears of nothing more.
  sessions.on_lost(SessionId{2}, lost_slot(3));
  ASSERT_TRUE(sessions.remove("b"));
  sessions.on_lost(SessionId{2}, lost_slot(4));
  EXPECT_TRUE(sessions.take_lost(SessionId{2}).slots.empty());
  EXPECT_TRUE(sessions.take_watch_events().empty());  // nobody watches
}

TEST(HttpSessionsLost, AWatcherHearsEachLossUntilReplacedClosedOrAbandoned) {
  HttpSessions sessions(config(20));
  ASSERT_EQ(sessions.create(secs(0), SessionId{1}, "a", "ip"), HttpCreate::kOk);
  EXPECT_FALSE(sessions.watch(secs(1), "zz", 10));  // unknown: 410
  ASSERT_TRUE(sessions.watch(secs(1), "a", 10));
  sessions.on_lost(SessionId{1}, lost_slot(0));
  std::vector<HttpWatchEvent> events = sessions.take_watch_events();
  ASSERT_EQ(events.size(), 2U);
  EXPECT_EQ(events[0].ticket, 10U);
  EXPECT_EQ(events[0].kind, HttpWatchEvent::Kind::kOpen);
  EXPECT_EQ(events[1].kind, HttpWatchEvent::Kind::kLost);
  EXPECT_EQ(events[1].slot, lost_slot(0));
  // The loss also waits for the next reply: the two channels are independent.
  EXPECT_EQ(sessions.take_lost(SessionId{1}).slots.size(), 1U);
  // A second watch replaces the first.
  ASSERT_TRUE(sessions.watch(secs(2), "a", 11));
  events = sessions.take_watch_events();
  ASSERT_EQ(events.size(), 2U);
  EXPECT_EQ(events[0].ticket, 10U);
  EXPECT_EQ(events[0].kind, HttpWatchEvent::Kind::kEnd);
  EXPECT_EQ(events[0].reason, "replaced");
  EXPECT_EQ(events[1].ticket, 11U);
  EXPECT_EQ(events[1].kind, HttpWatchEvent::Kind::kOpen);
  // Abandoned: it stops without an event.
  sessions.abandon(11);
  sessions.on_lost(SessionId{1}, lost_slot(1));
  EXPECT_TRUE(sessions.take_watch_events().empty());
  // A close ends the watch.
  ASSERT_TRUE(sessions.watch(secs(3), "a", 12));
  ASSERT_TRUE(sessions.remove("a"));
  events = sessions.take_watch_events();
  ASSERT_EQ(events.size(), 2U);
  EXPECT_EQ(events[1].ticket, 12U);
  EXPECT_EQ(events[1].kind, HttpWatchEvent::Kind::kEnd);
  EXPECT_EQ(events[1].reason, "session_gone");
  EXPECT_FALSE(sessions.watch(secs(4), "a", 13));
  EXPECT_EQ(sessions.known(), 0U);
}

TEST(HttpSessionsLost, AWatchRefreshesLastSeenOnceAndDoesNotKeepTheSessionAlive) {
  HttpSessions sessions(config(10));
  ASSERT_EQ(sessions.create(secs(0), SessionId{1}, "a", "ip"), HttpCreate::kOk);
  ASSERT_TRUE(sessions.watch(secs(15), "a", 10));
  EXPECT_EQ(sessions.reap(secs(30)), 0U);  // 15 s since the watch began
  EXPECT_EQ(sessions.reap(secs(36)), 1U);  // 21 s: reaped, watched or not
  std::vector<HttpWatchEvent> events = sessions.take_watch_events();
  ASSERT_EQ(events.size(), 2U);
  EXPECT_EQ(events[1].kind, HttpWatchEvent::Kind::kEnd);
}

}  // namespace
}  // namespace turnstile::core
