// The signal commands end to end in the core, without sockets: sessions, routers over several
// shards and the one signal hub, wired by the loopback driver (testing/loopback.h), with real
// request and reply bytes. core/signal_hub.h has the rules.
#include "core/signal_hub.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/router.h"
#include "testing/loopback.h"

namespace turnstile::core {
namespace {

using test::Loopback;
using test::LoopbackConfig;

std::string request(std::string_view command, std::string_view key, std::string_view arg) {
  return std::string(command) + "\n" + std::string(key) + "\n" + std::string(arg) + "\n";
}

LoopbackConfig shards(std::size_t count, SignalHubConfig signals = {}) {
  LoopbackConfig config;
  config.shards = count;
  config.signals = signals;
  return config;
}

TEST(SignalHub, ASignalReachesListenersOnEveryShardOnce) {
  Loopback loop(shards(3));
  std::vector<SessionId> listeners;
  for (int i = 0; i < 3; ++i) {
    listeners.push_back(loop.connect());  // one per shard, in turn
    loop.send(listeners.back(), request("listen", "jobs.*", ""));
    loop.send(listeners.back(), request("listen", "jobs.>", ""));  // the same connection again
    EXPECT_EQ(loop.read(listeners.back()), "ok\nok\n");
  }
  const SessionId publisher = loop.connect();
  loop.send(publisher, request("signal", "jobs.7", "  done at 12:00 "));
  EXPECT_EQ(loop.read(publisher), "ok 3\n");
  for (const SessionId listener : listeners) {
    EXPECT_EQ(loop.read(listener), "sig jobs.7   done at 12:00 \n");  // the payload as sent
  }
  loop.send(publisher, request("signal", "other", "x"));
  EXPECT_EQ(loop.read(publisher), "ok 0\n");
  EXPECT_TRUE(loop.anomalies().empty());
}

TEST(SignalHub, FramesComeBetweenARequestAndItsReplyInOrder) {
  Loopback loop(shards(2));
  const SessionId holder = loop.connect();
  const SessionId listener = loop.connect();
  const SessionId publisher = loop.connect();
  loop.send(holder, request("l", "k", "0"));
  const std::string grant = loop.read(holder);
  ASSERT_EQ(grant.rfind("ok ", 0), 0U);
  const std::string token = grant.substr(3, 32);
  loop.send(listener, request("listen", "news", ""));
  loop.send(listener, request("l", "k", "10"));  // waits for the holder
  EXPECT_EQ(loop.read(listener), "ok\n");
  for (const char* payload : {"one", "two", "three"}) {
    loop.send(publisher, request("signal", "news", payload));
  }
  EXPECT_EQ(loop.read(publisher), "ok 1\nok 1\nok 1\n");
  EXPECT_EQ(loop.read(listener), "sig news one\nsig news two\nsig news three\n");
  loop.send(holder, request("r", "k", token));
  EXPECT_EQ(loop.read(holder), "ok\n");
  EXPECT_EQ(loop.read(listener).rfind("ok ", 0), 0U);  // the grant, after the frames
  EXPECT_TRUE(loop.anomalies().empty());
}

TEST(SignalHub, AListenerThatSignalsItsOwnChannelHasTheFrameBeforeTheCount) {
  Loopback loop(shards(1));
  const SessionId both = loop.connect();
  loop.send(both, request("listen", "self", ""));
  loop.send(both, request("signal", "self", "hi"));
  EXPECT_EQ(loop.read(both), "ok\nsig self hi\nok 1\n");
}

TEST(SignalHub, TheReferenceStepsDeDuplicatePlainListenersButNotGroups) {
  Loopback loop(shards(2));
  const SessionId plain = loop.connect();
  loop.send(plain, request("listen", "a.b", ""));
  loop.send(plain, request("listen", "a.*", ""));
  loop.send(plain, request("listen", "a.>", "g"));  // the only member of g: it gets one more
  EXPECT_EQ(loop.read(plain), "ok\nok\nok\n");
  const SessionId publisher = loop.connect();
  loop.send(publisher, request("signal", "a.b", "p"));
  EXPECT_EQ(loop.read(publisher), "ok 2\n");
  EXPECT_EQ(loop.read(plain), "sig a.b p\nsig a.b p\n");
}

TEST(SignalHub, AQueueGroupSpansShardsAndTakesTurns) {
  Loopback loop(shards(3));
  std::vector<SessionId> members;
  for (int i = 0; i < 3; ++i) {
    members.push_back(loop.connect());
    loop.send(members.back(), request("listen", "work", "pool"));
    EXPECT_EQ(loop.read(members.back()), "ok\n");
  }
  const SessionId publisher = loop.connect();
  for (int i = 0; i < 30; ++i) loop.send(publisher, request("signal", "work", std::to_string(i)));
  std::string replies;
  for (int i = 0; i < 30; ++i) replies += "ok 1\n";
  EXPECT_EQ(loop.read(publisher), replies);
  for (const SessionId member : members) {
    const std::string frames = loop.read(member);
    EXPECT_EQ(std::count(frames.begin(), frames.end(), '\n'), 10) << frames;
  }
}

TEST(SignalHub, TheCapCountsDistinctSubscriptionsAndADuplicateIsFree) {
  Loopback loop(shards(1, SignalHubConfig{.max_subscriptions = 2, .queue_max = 64}));
  const SessionId c = loop.connect();
  loop.send(c, request("listen", "a", ""));
  loop.send(c, request("listen", "a", "g"));
  loop.send(c, request("listen", "b", ""));  // a third
  loop.send(c, request("listen", "a", ""));  // a duplicate, at the cap
  loop.send(c, request("unlisten", "a", "g"));
  loop.send(c, request("listen", "b", ""));
  loop.send(c, request("unlisten", "never", ""));
  EXPECT_EQ(loop.read(c), "ok\nok\nerror\nok\nok\nok\nok\n");
  EXPECT_EQ(loop.signals().counters().subscriptions, 2);
}

// The server-wide cap counts every session's subscriptions together: past it a listen is
// error_max_subscriptions (the per-session cap is checked first and answers error); a duplicate
// is free; an unlisten or a close makes room again. Each refusal is counted by its cap.
TEST(SignalHub, TheServerWideCapCountsEverySessionAndIsAnsweredByName) {
  Loopback loop(shards(
      2, SignalHubConfig{.max_subscriptions = 2, .max_subscriptions_total = 3, .queue_max = 64}));
  const SessionId a = loop.connect();
  const SessionId b = loop.connect();
  loop.send(a, request("listen", "x", ""));
  loop.send(a, request("listen", "y", "g"));
  EXPECT_EQ(loop.read(a), "ok\nok\n");
  loop.send(b, request("listen", "x", ""));
  loop.send(b, request("listen", "z", ""));  // the fourth in all
  loop.send(b, request("listen", "x", ""));  // a duplicate, at the cap
  EXPECT_EQ(loop.read(b), "ok\nerror_max_subscriptions\nok\n");
  loop.send(a, request("listen", "w", ""));  // past a's own cap: that one answers
  EXPECT_EQ(loop.read(a), "error\n");
  loop.send(a, request("unlisten", "y", "g"));
  loop.send(b, request("listen", "z", ""));  // room again
  loop.send(b, request("listen", "v", ""));  // b's own cap now
  EXPECT_EQ(loop.read(a), "ok\n");
  EXPECT_EQ(loop.read(b), "ok\nerror\n");
  const SessionId c = loop.connect();
  loop.send(c, request("listen", "q", ""));
  EXPECT_EQ(loop.read(c), "error_max_subscriptions\n");
  loop.close(a);
  loop.send(c, request("listen", "q", ""));
  EXPECT_EQ(loop.read(c), "ok\n");
  const SignalCounters counters = loop.signals().counters();
  EXPECT_EQ(counters.subscriptions, 3);
  EXPECT_EQ(counters.refused_total, 2u);
  EXPECT_EQ(counters.refused_per_session, 2u);
}

TEST(SignalHub, BadNamesAreErrorsAndChangeNothing) {
  Loopback loop(shards(1));
  const SessionId c = loop.connect();
  loop.send(c, request("listen", "a.b*", ""));
  loop.send(c, request("unlisten", "a.>.b", ""));
  loop.send(c, request("signal", "a.*", "x"));
  loop.send(c, request("signal", "a", " "));
  loop.send(c, request("ping", "_", ""));
  EXPECT_EQ(loop.read(c), "error\nerror\nerror\nerror\nok\n");
  EXPECT_EQ(loop.signals().counters().subscriptions, 0);
  EXPECT_EQ(loop.signals().counters().published, 0U);
}

TEST(SignalHub, ASlowConsumerIsClosedAndAReaderKeepsItsPlace) {
  Loopback loop(shards(2, SignalHubConfig{.max_subscriptions = 0, .queue_max = 2}));
  const SessionId slow = loop.connect();
  const SessionId reader = loop.connect();
  loop.send(slow, request("listen", "t", ""));
  loop.send(reader, request("listen", "t", ""));
  EXPECT_EQ(loop.read(reader), "ok\n");  // `slow` never reads
  const SessionId publisher = loop.connect();
  std::string counts;
  for (int i = 0; i < 6; ++i) {
    loop.send(publisher, request("signal", "t", std::to_string(i)));
    counts += loop.read(publisher);
    EXPECT_EQ(loop.read(reader), "sig t " + std::to_string(i) + "\n");
  }
  // The slow one's `ok` and two frames wait unread; the third frame finds its queue full and
  // closes it; then only the reader is left.
  EXPECT_EQ(counts, "ok 2\nok 2\nok 2\nok 1\nok 1\nok 1\n");
  EXPECT_FALSE(loop.is_open(slow));
  EXPECT_EQ(loop.read(slow), "");                           // its backlog is dropped, not sent
  EXPECT_EQ(loop.signals().counters().slow_consumers, 1U);  // the session closed as one
  EXPECT_EQ(loop.signals().counters().subscriptions, 1);
  EXPECT_TRUE(loop.anomalies().empty());
}

TEST(SignalHub, AGroupPassesOverAMemberThatDoesNotKeepUp) {
  Loopback loop(shards(2, SignalHubConfig{.max_subscriptions = 0, .queue_max = 1}));
  const SessionId stuck = loop.connect();
  const SessionId reader = loop.connect();
  loop.send(stuck, request("listen", "q", "g"));
  loop.send(reader, request("listen", "q", "g"));
  EXPECT_EQ(loop.read(reader), "ok\n");
  const SessionId publisher = loop.connect();
  std::string frames;
  for (int i = 0; i < 6; ++i) {
    loop.send(publisher, request("signal", "q", std::to_string(i)));
    EXPECT_EQ(loop.read(publisher), "ok 1\n");
    frames += loop.read(reader);
  }
  // The stuck member took its turn once; after that its unwritten frame makes the group pick
  // the reader every time, so the stuck one is never pushed past its queue.
  EXPECT_EQ(frames, "sig q 1\nsig q 2\nsig q 3\nsig q 4\nsig q 5\n");
  EXPECT_TRUE(loop.is_open(stuck));
  EXPECT_EQ(loop.read(stuck), "ok\nsig q 0\n");
}

// Frames the hub planned and nobody reported written (on their way, or waiting) are bounded:
// past queue_max * kTransitFactor a plain listener is closed, and so is the member whose turn it
// was in a group where nobody has room left.
TEST(SignalHub, FramesInTransitAreBounded) {
  SignalHub hub(SignalHubConfig{.max_subscriptions = 0, .queue_max = 1});
  const SessionId plain{1};
  const SessionId member{2};
  ASSERT_EQ(hub.listen(plain, "c", ""), Status::kOk);
  ASSERT_EQ(hub.listen(member, "c", "g"), Status::kOk);
  SignalFanout out;
  for (std::size_t i = 0; i < kTransitFactor; ++i) {
    ASSERT_EQ(hub.publish("c", "p", out), 2U);
    ASSERT_TRUE(out.close.empty());
  }
  hub.written(member, 1);  // one frame of the member's left: it has room for one more
  EXPECT_EQ(hub.publish("c", "p", out), 1U);
  EXPECT_EQ(out.close, std::vector<SessionId>{plain});
  EXPECT_EQ(hub.publish("c", "p", out), 0U);
  EXPECT_EQ(out.close, std::vector<SessionId>{member});
  EXPECT_EQ(hub.counters().subscriptions, 0);
  EXPECT_EQ(hub.counters().slow_consumers, 2U);
}

// A listener that has gone before anyone noticed (its close not yet told to the router: the
// daemon learns it at its next read or write) still has frames planned for it, but its closed
// session takes none of them: nothing is copied into its output, and the reader beside it is
// served as usual. The hub's transit bound caps what it plans for it meanwhile; once the close
// is known, the hub forgets it at once.
TEST(SignalHub, AListenerThatHasGoneCostsNoOutputAndTheTransitBoundCapsItsFrames) {
  Loopback loop(shards(2, SignalHubConfig{.max_subscriptions = 0, .queue_max = 1}));
  const SessionId gone = loop.connect();
  const SessionId reader = loop.connect();
  const SessionId publisher = loop.connect();
  loop.send(gone, request("listen", "t", ""));
  loop.send(reader, request("listen", "t", ""));
  EXPECT_EQ(loop.read(reader), "ok\n");
  loop.hold_close_notices(true);
  loop.disconnect(gone);
  ASSERT_FALSE(loop.is_open(gone));
  for (std::size_t i = 0; i < kTransitFactor; ++i) {
    loop.send(publisher, request("signal", "t", std::to_string(i)));
    ASSERT_EQ(loop.read(publisher), "ok 2\n") << i;
    ASSERT_EQ(loop.read(reader), "sig t " + std::to_string(i) + "\n");
    ASSERT_NE(loop.session(gone), nullptr);
    EXPECT_EQ(loop.session(gone)->output(), "");
    EXPECT_EQ(loop.session(gone)->unwritten_frames(), 0U);
  }
  EXPECT_EQ(loop.signals().queued(gone), kTransitFactor);
  // Past the bound the hub closes it itself: no frame more is planned for it.
  loop.send(publisher, request("signal", "t", "past"));
  EXPECT_EQ(loop.read(publisher), "ok 1\n");
  EXPECT_EQ(loop.read(reader), "sig t past\n");
  EXPECT_EQ(loop.signals().queued(gone), 0U);
  EXPECT_EQ(loop.signals().counters().subscriptions, 1);
  loop.hold_close_notices(false);
  loop.send(publisher, request("signal", "t", "after"));
  EXPECT_EQ(loop.read(publisher), "ok 1\n");
  EXPECT_EQ(loop.read(reader), "sig t after\n");
  EXPECT_EQ(loop.read(gone), "");
  EXPECT_TRUE(loop.anomalies().empty());
}

TEST(SignalHub, ClosingAConnectionDropsItsSubscriptionsAndStatsListsTheRest) {
  Loopback loop(shards(2));
  const SessionId gone = loop.connect();
  const SessionId stays = loop.connect();
  const SessionId observer = loop.connect();
  loop.send(observer, request("stats", "_", ""));
  EXPECT_EQ(loop.read(observer).find("signal_channels"), std::string::npos);
  loop.send(gone, request("listen", "x.>", ""));
  loop.send(stays, request("listen", "x.>", ""));
  loop.send(stays, request("listen", "x.y", "workers"));
  loop.send(observer, request("stats", "_", ""));
  EXPECT_NE(loop.read(observer).find(R"("signal_channels":[{"pattern":"x.>","listeners":2},)"
                                     R"({"pattern":"x.y","group":"workers","listeners":1}])"),
            std::string::npos);
  loop.disconnect(gone);
  loop.send(observer, request("stats", "_", ""));
  EXPECT_NE(loop.read(observer).find(R"("signal_channels":[{"pattern":"x.>","listeners":1},)"),
            std::string::npos);
  loop.send(observer, request("signal", "x.y", "p"));
  EXPECT_EQ(loop.read(observer), "ok 2\n");
  EXPECT_EQ(loop.signals().counters().subscriptions, 2);
}

// A hub that records what the router hands on to the other nodes of a cluster (forward()).
class ForwardingHub final : public SignalBroker {
 public:
  Status listen(SessionId session, std::string_view pattern, std::string_view group) override {
    return hub_.listen(session, pattern, group);
  }
  void unlisten(SessionId session, std::string_view pattern, std::string_view group) override {
    hub_.unlisten(session, pattern, group);
  }
  std::size_t publish(std::string_view channel, std::string_view payload,
                      SignalFanout& out) override {
    return hub_.publish(channel, payload, out);
  }
  void written(SessionId session, std::size_t frames) override { hub_.written(session, frames); }
  void close(SessionId session) override { hub_.close(session); }
  std::vector<SignalChannelStats> channels() override { return hub_.channels(); }
  SignalCounters counters() override { return hub_.counters(); }
  void forward(std::string_view channel, std::string_view payload) override {
    forwarded.emplace_back(channel, payload);
  }

  std::vector<std::pair<std::string, std::string>> forwarded;

 private:
  SignalHub hub_{SignalHubConfig{}};
};

// Cluster mode (docs/cluster.md, "Signals in a cluster"): a client's `signal` is published here
// and handed to forward() once; a `signal-peer` (from another node) is published here only, so
// that no signal goes round the cluster twice. Both count this node's deliveries.
TEST(SignalHub, ASignalIsForwardedOnceAndASignalPeerNever) {
  ForwardingHub hub;
  RouterConfig config;
  config.replicated = true;
  config.signals = &hub;
  Router router(config);
  const Instant now = Instant::from_ns(1'000'000'000);
  const SessionId listener = router.new_session_id();
  const SessionId publisher = router.new_session_id();
  const auto reply_of = [&](SessionId session) {
    for (const SessionEvent& event : router.take_events()) {
      if (event.session == session && event.kind == SessionEvent::Kind::kReply) return event.reply;
    }
    return Reply::of(Status::kParked);
  };
  Request listen;
  listen.command = Command::kListen;
  listen.key = "jobs.*";
  router.submit(now, listener, listen);
  EXPECT_EQ(reply_of(listener), Reply::of(Status::kOk));

  Request signal;
  signal.command = Command::kSignal;
  signal.key = "jobs.1";
  signal.text = "done";
  router.submit(now, publisher, signal);
  EXPECT_EQ(reply_of(publisher), Reply::delivered(1));
  ASSERT_EQ(hub.forwarded.size(), 1U);
  EXPECT_EQ(hub.forwarded[0], std::make_pair(std::string("jobs.1"), std::string("done")));

  Request peer = signal;
  peer.command = Command::kSignalPeer;
  peer.text = "from another node";
  router.submit(now, publisher, peer);
  EXPECT_EQ(reply_of(publisher), Reply::delivered(1));
  EXPECT_EQ(hub.forwarded.size(), 1U);

  // A signal nobody here listens to is forwarded all the same: listeners elsewhere may want it.
  signal.key = "other";
  router.submit(now, publisher, signal);
  EXPECT_EQ(reply_of(publisher), Reply::delivered(0));
  EXPECT_EQ(hub.forwarded.size(), 2U);
  EXPECT_TRUE(router.take_outbox().empty());
}

// The same over real request bytes: signal-peer answers with this process's deliveries, like
// signal.
TEST(SignalHub, SignalPeerIsPublishedLikeASignal) {
  Loopback loop(shards(2));
  const SessionId listener = loop.connect();
  const SessionId publisher = loop.connect();
  loop.send(listener, request("listen", "jobs.>", ""));
  EXPECT_EQ(loop.read(listener), "ok\n");
  loop.send(publisher, request("signal-peer", "jobs.7", " forwarded "));
  EXPECT_EQ(loop.read(publisher), "ok 1\n");
  EXPECT_EQ(loop.read(listener), "sig jobs.7  forwarded \n");  // the payload as sent
  loop.send(publisher, request("signal-peer", "jobs.*", "x"));
  EXPECT_EQ(loop.read(publisher), "error\n");
  EXPECT_TRUE(loop.anomalies().empty());
}

}  // namespace
}  // namespace turnstile::core
