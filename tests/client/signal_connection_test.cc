// SignalConnection against a real turnstiled on loopback: listen and emit round trips, queue
// groups, unlisten, push frames interleaved with replies on one connection, the bounded queue
// dropping and counting, names refused before anything is sent, the heartbeat that keeps a
// listener through --idle-timeout, the server closing, and TLS.
#include "client/signal_connection.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "client/connection.h"
#include "core/signal_pattern.h"
#include "tests/integration/harness.h"

namespace turnstile::client {
namespace {

using integration::CertificateFiles;
using integration::Daemon;
using integration::eventually;
using integration::TempDir;
using integration::write_self_signed_certificate;
using namespace std::chrono_literals;

Endpoint local(const Daemon& daemon) {
  return Endpoint{"127.0.0.1", static_cast<std::uint16_t>(daemon.port())};
}

SignalConnection connect_or_die(const Daemon& daemon, const SignalOptions& options = {}) {
  auto connection = SignalConnection::connect(local(daemon), options);
  if (!connection) throw std::runtime_error("connect: " + connection.error().to_string());
  return std::move(*connection);
}

// The next signal, or a failed expectation (and an empty Signal) when none came within 5 s.
Signal next_signal(SignalConnection& connection) {
  auto next = connection.next(5s);
  EXPECT_TRUE(next.ok()) << (next.ok() ? "" : next.error().to_string());
  if (!next.ok() || !next->has_value()) {
    ADD_FAILURE() << "no signal within 5 s";
    return Signal{};
  }
  return **next;
}

// True when no signal arrives within `wait`.
bool nothing_within(SignalConnection& connection, std::chrono::milliseconds wait) {
  auto next = connection.next(wait);
  return next.ok() && !next->has_value();
}

TEST(SignalConnection, ListenAndEmitRoundTrip) {
  Daemon daemon;
  SignalConnection listener = connect_or_die(daemon);
  SignalConnection emitter = connect_or_die(daemon);
  ASSERT_TRUE(listener.listen("orders.*").ok());
  ASSERT_TRUE(listener.listen("audit.>").ok());

  auto delivered = emitter.emit("orders.eu", "order 42 paid");
  ASSERT_TRUE(delivered.ok()) << delivered.error().to_string();
  EXPECT_EQ(*delivered, 1);
  EXPECT_EQ(next_signal(listener), (Signal{"orders.eu", "order 42 paid"}));

  EXPECT_EQ(*emitter.emit("audit.login.alice", "{\"ok\":true}"), 1);
  EXPECT_EQ(next_signal(listener), (Signal{"audit.login.alice", "{\"ok\":true}"}));

  // No pattern matches: no delivery, nothing received.
  EXPECT_EQ(*emitter.emit("orders.eu.late", "x"), 0);
  EXPECT_EQ(*emitter.emit("other", "x"), 0);
  EXPECT_TRUE(nothing_within(listener, 200ms));

  // A duplicate listen is a no-op: still one delivery.
  ASSERT_TRUE(listener.listen("orders.*").ok());
  EXPECT_EQ(*emitter.emit("orders.us", "y"), 1);
  EXPECT_EQ(next_signal(listener), (Signal{"orders.us", "y"}));
  EXPECT_EQ(listener.dropped(), 0U);
  EXPECT_EQ(listener.endpoint(), local(daemon));
  EXPECT_TRUE(listener.is_open());
}

TEST(SignalConnection, QueueGroupDeliversToOneMemberInTurn) {
  Daemon daemon;
  SignalConnection first = connect_or_die(daemon);
  SignalConnection second = connect_or_die(daemon);
  SignalConnection plain = connect_or_die(daemon);
  SignalConnection emitter = connect_or_die(daemon);
  ASSERT_TRUE(first.listen("jobs.*", "workers").ok());
  ASSERT_TRUE(second.listen("jobs.*", "workers").ok());
  ASSERT_TRUE(plain.listen("jobs.*").ok());

  std::map<std::string, int> per_member;
  for (int i = 0; i < 4; ++i) {
    const std::string payload = "job-" + std::to_string(i);
    auto delivered = emitter.emit("jobs.build", payload);
    ASSERT_TRUE(delivered.ok()) << delivered.error().to_string();
    EXPECT_EQ(*delivered, 2);  // the plain listener and one member of the group
    EXPECT_EQ(next_signal(plain).payload, payload);
  }
  for (SignalConnection* member : {&first, &second}) {
    for (int i = 0; i < 2; ++i) {
      const Signal signal = next_signal(*member);
      EXPECT_EQ(signal.channel, "jobs.build");
      ++per_member[signal.payload];
    }
    EXPECT_TRUE(nothing_within(*member, 100ms));
  }
  // Round-robin: each member got two, and every job went to exactly one member.
  EXPECT_EQ(per_member.size(), 4U);
  for (const auto& [payload, count] : per_member) EXPECT_EQ(count, 1) << payload;
}

TEST(SignalConnection, UnlistenStopsDelivery) {
  Daemon daemon;
  SignalConnection listener = connect_or_die(daemon);
  SignalConnection emitter = connect_or_die(daemon);
  ASSERT_TRUE(listener.listen("news.>").ok());
  ASSERT_TRUE(listener.listen("news.>", "g").ok());
  EXPECT_EQ(*emitter.emit("news.sport", "a"), 2);  // plainly and in the group: twice
  EXPECT_EQ(next_signal(listener).payload, "a");
  EXPECT_EQ(next_signal(listener).payload, "a");

  ASSERT_TRUE(listener.unlisten("news.>").ok());
  EXPECT_EQ(*emitter.emit("news.sport", "b"), 1);  // the group subscription remains
  EXPECT_EQ(next_signal(listener).payload, "b");
  ASSERT_TRUE(listener.unlisten("news.>", "g").ok());
  EXPECT_EQ(*emitter.emit("news.sport", "c"), 0);
  EXPECT_TRUE(nothing_within(listener, 200ms));
  // Unlistening what is not subscribed is ok too.
  EXPECT_TRUE(listener.unlisten("never.subscribed").ok());
}

TEST(SignalConnection, FramesInterleaveWithRepliesOnOneConnection) {
  Daemon daemon;
  SignalConnection connection = connect_or_die(daemon);
  ASSERT_TRUE(connection.listen("self.>").ok());
  // Its own emit is delivered to itself: the frame and the reply share the stream.
  for (int i = 0; i < 20; ++i) {
    auto delivered = connection.emit("self.echo", "n" + std::to_string(i));
    ASSERT_TRUE(delivered.ok()) << delivered.error().to_string();
    EXPECT_EQ(*delivered, 1);
  }
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(next_signal(connection), (Signal{"self.echo", "n" + std::to_string(i)}));
  }

  // A flood from another connection while this one makes requests: every reply is still read
  // as its request's, every frame lands in the queue in order.
  SignalOptions roomy;
  roomy.queue_capacity = 1024;
  SignalConnection busy = connect_or_die(daemon, roomy);
  ASSERT_TRUE(busy.listen("flood.*").ok());
  SignalConnection flooder = connect_or_die(daemon);
  std::atomic<bool> flood_ok{true};
  std::thread flood([&] {
    for (int i = 0; i < 300; ++i) {
      auto delivered = flooder.emit("flood.x", std::to_string(i));
      if (!delivered.ok() || *delivered != 1) flood_ok = false;
    }
  });
  for (int i = 0; i < 100; ++i) {
    auto delivered = busy.emit("nobody.listens", "q");
    ASSERT_TRUE(delivered.ok()) << delivered.error().to_string();
    EXPECT_EQ(*delivered, 0);
    ASSERT_TRUE(busy.listen("flood.*").ok());
  }
  flood.join();
  EXPECT_TRUE(flood_ok);
  for (int i = 0; i < 300; ++i) {
    ASSERT_EQ(next_signal(busy), (Signal{"flood.x", std::to_string(i)}));
  }
  EXPECT_EQ(busy.dropped(), 0U);
}

TEST(SignalConnection, FullQueueDropsAndCounts) {
  Daemon daemon;
  SignalOptions small;
  small.queue_capacity = 2;
  SignalConnection listener = connect_or_die(daemon, small);
  SignalConnection emitter = connect_or_die(daemon);
  ASSERT_TRUE(listener.listen("tick").ok());
  for (int i = 0; i < 5; ++i) EXPECT_EQ(*emitter.emit("tick", std::to_string(i)), 1);
  // Nobody takes from the queue: the I/O thread keeps reading and drops the surplus.
  EXPECT_TRUE(eventually([&] { return listener.dropped() == 3; }, 5s)) << listener.dropped();
  EXPECT_EQ(listener.queued(), 2U);
  EXPECT_EQ(next_signal(listener).payload, "0");
  EXPECT_EQ(next_signal(listener).payload, "1");
  EXPECT_TRUE(nothing_within(listener, 100ms));
  // The connection is still fine.
  EXPECT_TRUE(listener.is_open());
  EXPECT_EQ(*emitter.emit("tick", "later"), 1);
  EXPECT_EQ(next_signal(listener).payload, "later");
  EXPECT_EQ(listener.dropped(), 3U);
}

TEST(SignalConnection, InvalidNamesAreRefusedBeforeSending) {
  Daemon daemon;
  SignalConnection connection = connect_or_die(daemon);
  const auto refused = [](const Result<void>& result, const std::string& words) {
    EXPECT_FALSE(result.ok());
    if (result.ok()) return;
    EXPECT_EQ(result.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(result.error().message.find(words), std::string::npos) << result.error().message;
  };
  refused(connection.listen("a..b"), "empty token");
  refused(connection.listen("a."), "empty token");
  refused(connection.listen("a.b*"),
          std::string(core::signal_name_error_text(core::SignalNameError::kPartialWildcard)));
  refused(connection.listen("a.>.b"),
          std::string(core::signal_name_error_text(core::SignalNameError::kTailNotLast)));
  refused(connection.listen(""), "pattern");
  refused(connection.listen("two words"), "pattern");
  refused(connection.listen(std::string(257, 'k')), "pattern");
  refused(connection.unlisten("x..y"), "empty token");
  refused(connection.listen("ok", "bad\ngroup"), "CR or LF");
  refused(connection.listen("ok", " padded"), "whitespace");
  refused(connection.listen("ok", std::string(257, 'g')), "longer than 256");

  const auto refused_emit = [](const Result<std::int64_t>& result, const std::string& words) {
    EXPECT_FALSE(result.ok());
    if (result.ok()) return;
    EXPECT_EQ(result.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(result.error().message.find(words), std::string::npos) << result.error().message;
  };
  refused_emit(connection.emit("a.*", "x"), "channel");
  refused_emit(connection.emit("a.>", "x"), "channel");
  refused_emit(connection.emit("a..b", "x"), "empty token");
  refused_emit(connection.emit("a", ""), "empty");
  refused_emit(connection.emit("a", "line\nbreak"), "CR or LF");
  refused_emit(connection.emit("a", " \t "), "blank");
  const std::string channel = "big";
  refused_emit(connection.emit(channel, std::string(core::signal_payload_max(channel) + 1, 'p')),
               "at most");

  // Nothing was sent: the connection is open and in step, and the largest payload passes.
  ASSERT_TRUE(connection.listen(channel).ok());
  const std::string largest(core::signal_payload_max(channel), 'p');
  auto delivered = connection.emit(channel, largest);
  ASSERT_TRUE(delivered.ok()) << delivered.error().to_string();
  EXPECT_EQ(*delivered, 1);
  EXPECT_EQ(next_signal(connection).payload, largest);
  // Spaces at either end of a payload are sent and delivered as they are.
  delivered = connection.emit(channel, "  padded\t");
  ASSERT_TRUE(delivered.ok()) << delivered.error().to_string();
  EXPECT_EQ(next_signal(connection).payload, "  padded\t");

  // Options checked at connect.
  SignalOptions no_queue;
  no_queue.queue_capacity = 0;
  auto refused_connect = SignalConnection::connect(local(daemon), no_queue);
  ASSERT_FALSE(refused_connect.ok());
  EXPECT_EQ(refused_connect.error().code, ErrorCode::kInvalidArgument);
}

TEST(SignalConnection, ServerRefusalIsTyped) {
  Daemon daemon({"--max-subscriptions", "1"});
  SignalConnection connection = connect_or_die(daemon);
  ASSERT_TRUE(connection.listen("one").ok());
  auto second = connection.listen("two");
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error().code, ErrorCode::kProtocol);
  EXPECT_NE(second.error().message.find("max-subscriptions"), std::string::npos);
  // Still usable.
  EXPECT_EQ(*connection.emit("one", "x"), 1);
  EXPECT_EQ(next_signal(connection).payload, "x");
}

TEST(SignalConnection, HeartbeatKeepsAListenerThroughTheIdleTimeout) {
  Daemon daemon({"--idle-timeout", "1"});
  SignalOptions beating;
  beating.heartbeat = 300ms;
  SignalConnection kept = connect_or_die(daemon, beating);
  SignalOptions silent;
  silent.heartbeat = 0ms;
  SignalConnection dropped = connect_or_die(daemon, silent);
  ASSERT_TRUE(kept.listen("alive").ok());
  ASSERT_TRUE(dropped.listen("alive").ok());

  // The silent one is closed by the server after a second idle; next() says so.
  auto ended = dropped.next(5s);
  ASSERT_FALSE(ended.ok());
  EXPECT_EQ(ended.error().code, ErrorCode::kIo);
  EXPECT_FALSE(dropped.is_open());

  // The beating one listened first, so it has been a second past its last request too; a little
  // longer, in case the server's timers for the two run apart.
  std::this_thread::sleep_for(300ms);
  ASSERT_TRUE(kept.is_open());
  SignalConnection emitter = connect_or_die(daemon);
  EXPECT_EQ(*emitter.emit("alive", "still here"), 1);
  EXPECT_EQ(next_signal(kept).payload, "still here");
}

TEST(SignalConnection, ServerShutdownEndsTheConnection) {
  auto daemon = std::make_unique<Daemon>();
  SignalConnection listener = connect_or_die(*daemon);
  ASSERT_TRUE(listener.listen("x").ok());
  {
    SignalConnection emitter = connect_or_die(*daemon);
    EXPECT_EQ(*emitter.emit("x", "before"), 1);
  }
  ASSERT_TRUE(eventually([&] { return listener.queued() == 1; }, 5s));
  ASSERT_TRUE(daemon->stop().has_value());
  // The queued signal first, then the error: the server drained (or closed) the connection.
  EXPECT_EQ(next_signal(listener).payload, "before");
  auto ended = listener.next(5s);
  ASSERT_FALSE(ended.ok());
  EXPECT_TRUE(ended.error().code == ErrorCode::kDraining || ended.error().code == ErrorCode::kIo)
      << ended.error().to_string();
  EXPECT_FALSE(listener.is_open());
  // Calls after the failure report it at once.
  auto late = listener.emit("x", "after");
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.error().code, ended.error().code);
}

TEST(SignalConnection, CloseEndsSubscriptionsAndCalls) {
  Daemon daemon;
  SignalConnection listener = connect_or_die(daemon);
  SignalConnection emitter = connect_or_die(daemon);
  ASSERT_TRUE(listener.listen("gone").ok());
  listener.close();
  EXPECT_FALSE(listener.is_open());
  auto next = listener.next(10ms);
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.error().code, ErrorCode::kIo);
  EXPECT_FALSE(listener.listen("gone").ok());
  EXPECT_TRUE(eventually([&] { return *emitter.emit("gone", "x") == 0; }, 5s));

  // Moved-from and default-constructed objects are closed.
  SignalConnection moved = connect_or_die(daemon);
  SignalConnection target = std::move(moved);
  EXPECT_TRUE(target.is_open());
  EXPECT_FALSE(moved.is_open());  // NOLINT(bugprone-use-after-move): checked on purpose
  EXPECT_FALSE(SignalConnection().is_open());
}

TEST(SignalConnection, OverTls) {
  TempDir dir;
  const CertificateFiles files = write_self_signed_certificate(dir.path(), "localhost");
  Daemon daemon({"--tls-cert", files.certificate_path, "--tls-key", files.key_path});
  ASSERT_TRUE(daemon.tls());
  SignalOptions options;
  options.connect.tls = TlsOptions{files.certificate_path, "localhost"};
  SignalConnection listener = connect_or_die(daemon, options);
  SignalConnection emitter = connect_or_die(daemon, options);
  ASSERT_TRUE(listener.listen("secure.*").ok());
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(*emitter.emit("secure.ch", "m" + std::to_string(i)), 1);
  }
  for (int i = 0; i < 50; ++i) EXPECT_EQ(next_signal(listener).payload, "m" + std::to_string(i));
}

}  // namespace
}  // namespace turnstile::client
