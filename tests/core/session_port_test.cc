// SessionPort (core/session_port.h): the effects a pump asks for, what deliver does with each
// router event, and the router contract it asserts in every build.
#include "core/session_port.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace turnstile::core {
namespace {

const Instant kStart = Instant::from_ns(1'000'000'000);

SessionEvent event_of(SessionEvent::Kind kind, SessionId session) {
  SessionEvent event;
  event.kind = kind;
  event.session = session;
  return event;
}

SessionEvent reply_event(SessionId session, Reply reply) {
  SessionEvent event = event_of(SessionEvent::Kind::kReply, session);
  event.reply = std::move(reply);
  return event;
}

class SessionPortTest : public ::testing::Test {
 protected:
  SessionPort port{SessionId{7}, SessionConfig{}, kStart};

  // Sends a line and returns the request the pump routes.
  Request route(const std::string& bytes, Instant now = kStart) {
    EXPECT_EQ(port.session().on_bytes(now, bytes), bytes.size());
    PortEffects effects = port.pump(now);
    EXPECT_TRUE(effects.request.has_value());
    return effects.request.value_or(Request{});
  }
};

TEST_F(SessionPortTest, RoutesOneRequestAtATimeAndAnswersPingItself) {
  port.session().on_bytes(kStart, "ping\n\n\nl\nk\n5\nl\nj\n5\n");
  PortEffects first = port.pump(kStart);
  ASSERT_TRUE(first.request.has_value());
  EXPECT_EQ(first.request->command, Command::kLock);
  EXPECT_EQ(first.request->key, "k");
  EXPECT_EQ(port.session().output(), "ok\n");  // the ping, answered by the session itself
  EXPECT_FALSE(first.close);
  EXPECT_FALSE(first.finished);
  // The second lock waits for the first one's reply.
  EXPECT_FALSE(port.pump(kStart).request.has_value());

  port.deliver(kStart, reply_event(port.id(), Reply::granted(Status::kOk, Token{1}, 30)), 0);
  const PortEffects second = port.pump(kStart);
  ASSERT_TRUE(second.request.has_value());
  EXPECT_EQ(second.request->key, "j");
}

TEST_F(SessionPortTest, DeliverReportsTheCommandItsLatencyAndWhetherItWasParked) {
  route("l\nk\n5\n");
  port.deliver(kStart, event_of(SessionEvent::Kind::kParked, port.id()), 0);
  EXPECT_TRUE(port.parked());
  const Instant later = kStart + Duration::milliseconds(250);
  const Delivered delivered =
      port.deliver(later, reply_event(port.id(), Reply::granted(Status::kOk, Token{3}, 30)), 0);
  EXPECT_EQ(delivered.kind, SessionEvent::Kind::kReply);
  EXPECT_TRUE(delivered.after_park);
  EXPECT_EQ(delivered.command, Command::kLock);
  EXPECT_EQ(delivered.latency, Duration::milliseconds(250));
  EXPECT_FALSE(port.parked());

  route("r\nk\n3\n", later);
  const Delivered plain = port.deliver(later, reply_event(port.id(), Reply::of(Status::kOk)), 0);
  EXPECT_FALSE(plain.after_park);
  EXPECT_EQ(plain.command, Command::kRelease);
}

TEST_F(SessionPortTest, StatsAreRenderedWithTheDriversCountOfOpenSessions) {
  route("stats\n_\n_\n");
  port.deliver(kStart, event_of(SessionEvent::Kind::kStats, port.id()), 42);
  EXPECT_NE(std::string(port.session().output()).find("\"connections\":42"), std::string::npos)
      << port.session().output();
}

TEST_F(SessionPortTest, TheCloseIsToldOnceAndTheSessionFinishesAfterIt) {
  port.session().on_peer_closed(kStart);
  const PortEffects first = port.pump(kStart);
  EXPECT_TRUE(first.close);
  EXPECT_TRUE(first.finished);
  EXPECT_TRUE(port.close_told());
  EXPECT_FALSE(port.pump(kStart).close);
}

TEST_F(SessionPortTest, AGrantThatRacedTheCloseIsGivenBackAfterTheCloseNotice) {
  route("l\nk\n5\n");
  port.session().on_peer_closed(kStart);
  const PortEffects closing = port.pump(kStart);
  EXPECT_TRUE(closing.close);
  EXPECT_FALSE(closing.finished);  // its request is still in flight
  port.deliver(kStart, reply_event(port.id(), Reply::granted(Status::kOk, Token{9}, 30)), 0);
  const PortEffects give_back = port.pump(kStart);
  ASSERT_TRUE(give_back.request.has_value());
  EXPECT_EQ(give_back.request->command, Command::kRelease);
  EXPECT_EQ(give_back.request->token, Token{9});
  EXPECT_FALSE(give_back.close);
}

TEST_F(SessionPortTest, PushedFramesAreCountedOnceWrittenAndASlowConsumerIsClosed) {
  SessionEvent signal = event_of(SessionEvent::Kind::kSignal, port.id());
  signal.frame = std::make_shared<const std::string>("sig a b\n");
  port.deliver(kStart, signal, 0);
  EXPECT_EQ(port.take_output(), "sig a b\n");
  EXPECT_EQ(port.pump(kStart).frames_written, 1U);

  port.deliver(kStart, event_of(SessionEvent::Kind::kSlowConsumer, port.id()), 0);
  EXPECT_EQ(port.session().close_reason(), CloseReason::kSlowConsumer);
  EXPECT_TRUE(port.pump(kStart).close);
}

TEST_F(SessionPortTest, TheNextDeadlineIsTheSessions) {
  SessionConfig config;
  config.idle_timeout = Duration::seconds(5);
  SessionPort idle(SessionId{8}, config, kStart);
  EXPECT_EQ(idle.pump(kStart).next_deadline, idle.session().next_deadline());
  EXPECT_TRUE(idle.pump(kStart).next_deadline.has_value());
}

// The router's contract, asserted in every build type.
using SessionPortDeathTest = SessionPortTest;

TEST_F(SessionPortDeathTest, AReplyWithNothingInFlightAborts) {
  EXPECT_DEATH(port.deliver(kStart, reply_event(port.id(), Reply::of(Status::kOk)), 0),
               "assertion failed");
}

TEST_F(SessionPortDeathTest, ParkedTwiceAborts) {
  route("l\nk\n5\n");
  port.deliver(kStart, event_of(SessionEvent::Kind::kParked, port.id()), 0);
  EXPECT_DEATH(port.deliver(kStart, event_of(SessionEvent::Kind::kParked, port.id()), 0),
               "assertion failed");
}

TEST_F(SessionPortDeathTest, ACancellationOfNothingParkedAborts) {
  route("l\nk\n5\n");
  EXPECT_DEATH(port.deliver(kStart, event_of(SessionEvent::Kind::kCancelled, port.id()), 0),
               "assertion failed");
}

TEST_F(SessionPortDeathTest, AParkedReplyAborts) {
  route("l\nk\n5\n");
  EXPECT_DEATH(port.deliver(kStart, reply_event(port.id(), Reply::parked()), 0),
               "assertion failed");
}

}  // namespace
}  // namespace turnstile::core
