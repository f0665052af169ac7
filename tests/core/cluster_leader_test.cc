// core/cluster_leader.h: the replicated end of a node's routers in cluster mode. A follower
// answers error_not_leader with the leader's address; a leader batches many sessions' requests
// into one entry and answers each on its own shard; deadlines come as Tick entries at the
// replica's next deadline; stepping down answers what was in flight; taking over closes the
// sessions of other processes without releasing their holders (leases survive failover), and
// closes its own that left while it followed as --auto-release-on-disconnect says.
//
// The driver here is a loop: entries are applied by the node's own replica (and, where a test
// says so, by a second node's), in the order taken. Raft itself is the simulator's and the
// daemon's business.
#include "core/cluster_leader.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/replica.h"
#include "core/router.h"
#include "testing/requests.h"

namespace turnstile::core {
namespace {

using test::lock_request;
using test::release_request;

constexpr Instant kStart = Instant::from_ns(1'000'000'000'000);

// One node: its replica, its leader end and two shards' routers with tag `tag`.
struct Node {
  explicit Node(std::uint32_t tag, ClusterLeaderConfig config = {})
      : replica(EngineConfig{}), leader(with(config, tag), replica) {
    for (std::size_t i = 0; i < 2; ++i) {
      RouterConfig router;
      router.index = i;
      router.shards = 2;
      router.replicated = true;
      router.session_tag = tag;
      routers.push_back(std::make_unique<Router>(router));
    }
  }
  static ClusterLeaderConfig with(ClusterLeaderConfig config, std::uint32_t tag) {
    config.shards = 2;
    config.session_tag = tag;
    return config;
  }

  // Moves the routers' messages to the leader end and the leader's back to the routers.
  void pump() {
    for (auto& router : routers) {
      for (Envelope& envelope : router->take_outbox()) {
        EXPECT_EQ(envelope.to, router->replicated_endpoint());
        leader.receive(std::move(envelope.message));
      }
    }
    for (Envelope& envelope : leader.take_outbox()) {
      routers.at(envelope.to)->receive(Instant::min(), std::move(envelope.message));
    }
  }
  // Takes an entry (if any), applies it here and on `others`, and pumps. Its index, or 0.
  std::uint64_t step(Instant clock, std::vector<Node*> others = {}) {
    pump();
    const std::optional<LogEntry> entry = leader.take_entry(clock, ++salt);
    if (!entry) return 0;
    apply(*entry);
    for (Node* other : others) other->apply(*entry);
    return replica.applied_index();
  }
  void apply(const LogEntry& entry) {
    const AppliedEntry applied = replica.apply(replica.applied_index() + 1, entry);
    leader.applied(entry, applied);
    pump();
  }
  std::vector<SessionEvent> events(std::size_t shard) { return routers.at(shard)->take_events(); }

  Replica replica;
  ClusterLeader leader;
  std::vector<std::unique_ptr<Router>> routers;
  std::uint64_t salt = 0;
};

TEST(ClusterLeader, AFollowerAnswersNotLeaderWithTheLeadersAddress) {
  Node node(1);
  node.leader.follow("10.0.0.2:6388");
  const SessionId session = node.routers[0]->new_session_id();
  node.routers[0]->submit(kStart, session, lock_request("k", 0));
  node.pump();
  const std::vector<SessionEvent> events = node.events(0);
  ASSERT_EQ(events.size(), 1U);
  EXPECT_EQ(events[0].reply, Reply::not_leader("10.0.0.2:6388"));
  EXPECT_FALSE(node.leader.take_entry(kStart, 1));
  // Stats work on every node.
  Request stats;
  stats.command = Command::kStats;
  node.routers[1]->submit(kStart, node.routers[1]->new_session_id(), stats);
  node.pump();
  const std::vector<SessionEvent> stats_events = node.events(1);
  ASSERT_EQ(stats_events.size(), 1U);
  EXPECT_EQ(stats_events[0].kind, SessionEvent::Kind::kStats);
}

// Stats replies carry the raft status the driver last gave, as `cluster`; none until it gives one
// (the simulator never does).
TEST(ClusterLeader, StatsCarryTheClusterStatusTheDriverGave) {
  Node node(1);
  node.leader.follow("");
  Request stats;
  stats.command = Command::kStats;
  node.routers[0]->submit(kStart, node.routers[0]->new_session_id(), stats);
  node.pump();
  std::vector<SessionEvent> events = node.events(0);
  ASSERT_EQ(events.size(), 1U);
  EXPECT_FALSE(events[0].stats.cluster);

  ClusterStatus status;
  status.node_id = 2;
  status.role = RaftRole::kFollower;
  status.term = 3;
  status.leader_id = 1;
  status.leader_address = "10.0.0.1:6388";
  status.voters = {1, 2, 3};
  node.leader.set_cluster_status(status);
  node.routers[1]->submit(kStart, node.routers[1]->new_session_id(), stats);
  node.pump();
  events = node.events(1);
  ASSERT_EQ(events.size(), 1U);
  ASSERT_EQ(events[0].kind, SessionEvent::Kind::kStats);
  EXPECT_EQ(events[0].stats.cluster, status);
}

TEST(ClusterLeader, ALeaderBatchesRequestsIntoOneEntryAndAnswersEachOnItsShard) {
  Node node(1);
  node.leader.lead(kStart);
  const SessionId a = node.routers[0]->new_session_id();
  const SessionId b = node.routers[1]->new_session_id();
  const SessionId c = node.routers[1]->new_session_id();
  node.routers[0]->submit(kStart, a, lock_request("k", 0, 30));
  node.routers[1]->submit(kStart, b, lock_request("k", 10));
  node.routers[1]->submit(kStart, c, lock_request("other", 0));
  node.pump();
  const std::optional<LogEntry> entry = node.leader.take_entry(kStart, 7);
  ASSERT_TRUE(entry);
  EXPECT_EQ(entry->commands.size(), 3U);  // one entry, one append
  EXPECT_EQ(entry->time, kStart);
  node.apply(*entry);
  const std::vector<SessionEvent> first = node.events(0);
  ASSERT_EQ(first.size(), 1U);
  ASSERT_TRUE(first[0].reply.token);
  const std::vector<SessionEvent> second = node.events(1);
  ASSERT_EQ(second.size(), 2U);
  EXPECT_EQ(second[0].session, b);
  EXPECT_EQ(second[0].kind, SessionEvent::Kind::kParked);
  EXPECT_EQ(second[1].session, c);
  EXPECT_EQ(second[1].reply.status, Status::kOk);
  // a releases: b's parked request is granted, on its own shard.
  node.routers[0]->submit(kStart, a, release_request("k", first[0].reply.token));
  node.step(kStart + Duration::seconds(1));
  ASSERT_EQ(node.events(0).size(), 1U);
  const std::vector<SessionEvent> granted = node.events(1);
  ASSERT_EQ(granted.size(), 1U);
  EXPECT_EQ(granted[0].session, b);
  EXPECT_TRUE(granted[0].reply.token);
}

TEST(ClusterLeader, AnEntryHoldsAtMostMaxCommands) {
  ClusterLeaderConfig config;
  config.max_commands = 2;
  Node node(1, config);
  node.leader.lead(kStart);
  for (int i = 0; i < 5; ++i) {
    node.routers[0]->submit(kStart, node.routers[0]->new_session_id(),
                            lock_request("k" + std::to_string(i), 0));
  }
  node.pump();
  std::vector<std::size_t> sizes;
  while (const std::optional<LogEntry> entry = node.leader.take_entry(kStart, 1)) {
    sizes.push_back(entry->commands.size());
  }
  EXPECT_EQ(sizes, (std::vector<std::size_t>{2, 2, 1}));
  EXPECT_EQ(node.leader.in_flight(), 3U);
}

// A leader that keeps one entry in flight, as turnstiled's nodes do.
ClusterLeaderConfig one_in_flight() {
  ClusterLeaderConfig config;
  config.max_in_flight = 1;
  return config;
}

// With max_in_flight entries in flight, commands wait and the next entry takes all of them once
// one applies: under load, fewer and bigger entries. A lone command goes at once.
TEST(ClusterLeader, CommandsWaitWhileMaxInFlightEntriesAreInFlight) {
  Node node(1, one_in_flight());
  node.leader.lead(kStart);
  std::vector<SessionId> sessions;
  for (int i = 0; i < 5; ++i) sessions.push_back(node.routers[i % 2]->new_session_id());
  node.routers[0]->submit(kStart, sessions[0], lock_request("k0", 0));
  node.pump();
  const std::optional<LogEntry> first = node.leader.take_entry(kStart, 1);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->commands.size(), 1U);
  for (int i = 1; i < 5; ++i) {
    node.routers[i % 2]->submit(kStart, sessions[i], lock_request("k" + std::to_string(i), 0));
  }
  node.pump();
  EXPECT_FALSE(node.leader.take_entry(kStart, 2));  // one in flight: the four wait
  EXPECT_EQ(node.leader.in_flight(), 1U);
  node.apply(*first);
  EXPECT_EQ(node.events(0).size(), 1U);
  const std::optional<LogEntry> second = node.leader.take_entry(kStart, 3);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->commands.size(), 4U);
  EXPECT_FALSE(node.leader.take_entry(kStart, 4));
  node.apply(*second);
  EXPECT_EQ(node.events(0).size(), 2U);
  EXPECT_EQ(node.events(1).size(), 2U);
  EXPECT_EQ(node.leader.in_flight(), 0U);
}

// A holder of "k" for 30 s and a waiter on it for 2 s, both proposed and applied: the replica's
// next deadline is the waiter's timeout. Returns the waiter.
SessionId holder_and_waiter(Node& node) {
  const SessionId holder = node.routers[0]->new_session_id();
  const SessionId waiter = node.routers[0]->new_session_id();
  node.routers[0]->submit(kStart, holder, lock_request("k", 0, 30));
  node.routers[0]->submit(kStart, waiter, lock_request("k", 2));
  node.step(kStart);
  node.events(0);
  return waiter;
}

// The only event is `waiter`'s timeout.
void expect_timed_out(const std::vector<SessionEvent>& events, SessionId waiter) {
  ASSERT_EQ(events.size(), 1U);
  EXPECT_EQ(events[0].session, waiter);
  EXPECT_EQ(events[0].reply.status, Status::kTimeout);
}

// A deadline due while the limit holds comes with the next entry: no wake-up is asked for meanwhile
// (the driver takes the next entry after each applied()).
TEST(ClusterLeader, ATickDueWhileMaxInFlightEntriesAreInFlightComesWithTheNextEntry) {
  Node node(1, one_in_flight());
  node.leader.lead(kStart);
  const SessionId waiter = holder_and_waiter(node);
  ASSERT_EQ(node.leader.next_tick_clock(), kStart + Duration::seconds(2));
  node.routers[0]->submit(kStart, node.routers[0]->new_session_id(), lock_request("other", 0));
  node.pump();
  const std::optional<LogEntry> busy = node.leader.take_entry(kStart + Duration::seconds(1), 9);
  ASSERT_TRUE(busy);
  EXPECT_FALSE(node.leader.next_tick_clock());
  EXPECT_FALSE(node.leader.take_entry(kStart + Duration::seconds(3), 10));
  node.apply(*busy);
  node.events(0);
  const std::optional<LogEntry> tick = node.leader.take_entry(kStart + Duration::seconds(3), 11);
  ASSERT_TRUE(tick);
  ASSERT_EQ(tick->commands.size(), 1U);
  EXPECT_TRUE(std::holds_alternative<command::Tick>(tick->commands[0]));
  node.apply(*tick);
  expect_timed_out(node.events(0), waiter);
}

TEST(ClusterLeader, DeadlinesComeAsATickAtTheReplicasNextDeadline) {
  Node node(1);
  node.leader.lead(kStart);
  const SessionId waiter = holder_and_waiter(node);
  ASSERT_EQ(node.leader.next_tick_clock(), kStart + Duration::seconds(2));
  EXPECT_EQ(node.step(kStart + Duration::seconds(1)), 0U);  // nothing due yet
  ASSERT_NE(node.step(kStart + Duration::seconds(2)), 0U);
  expect_timed_out(node.events(0), waiter);
}

TEST(ClusterLeader, SteppingDownAnswersWhatIsInFlightAndParked) {
  Node node(1);
  node.leader.lead(kStart);
  const SessionId holder = node.routers[0]->new_session_id();
  const SessionId parked = node.routers[0]->new_session_id();
  const SessionId in_flight = node.routers[1]->new_session_id();
  node.routers[0]->submit(kStart, holder, lock_request("k", 0, 30));
  node.routers[0]->submit(kStart, parked, lock_request("k", 30));
  node.step(kStart);
  ASSERT_EQ(node.events(0).size(), 2U);  // granted, parked
  node.routers[1]->submit(kStart, in_flight, lock_request("other", 0));
  node.pump();
  const std::optional<LogEntry> proposed = node.leader.take_entry(kStart, 99);
  ASSERT_TRUE(proposed);
  node.leader.follow("10.0.0.3:6388");
  node.pump();
  const std::vector<SessionEvent> shard0 = node.events(0);
  ASSERT_EQ(shard0.size(), 1U);
  EXPECT_EQ(shard0[0].session, parked);
  EXPECT_EQ(shard0[0].reply, Reply::not_leader("10.0.0.3:6388"));
  const std::vector<SessionEvent> shard1 = node.events(1);
  ASSERT_EQ(shard1.size(), 1U);
  EXPECT_EQ(shard1[0].reply.status, Status::kErrorNotLeader);
  // The entry in flight commits after all (under the next leader): nobody is answered twice.
  node.apply(*proposed);
  EXPECT_TRUE(node.events(0).empty());
  EXPECT_TRUE(node.events(1).empty());
  // Nor is the parked request when the next leader's entry grants it.
  LogEntry next_leaders;
  next_leaders.time = kStart + Duration::seconds(2);
  next_leaders.salt = 1234;
  next_leaders.commands.push_back(command::Close{holder, true});
  node.apply(next_leaders);
  ASSERT_EQ(node.replica.engine().inspect().at(0).holders.at(0).session, parked);
  EXPECT_TRUE(node.events(0).empty());
}

TEST(ClusterLeader, TakingOverOrphansOtherProcessesHoldersAndDropsTheirWaiters) {
  Node old_leader(1);
  Node next(2);
  old_leader.leader.lead(kStart);
  const SessionId holder = old_leader.routers[0]->new_session_id();
  const SessionId waiter = old_leader.routers[1]->new_session_id();
  old_leader.routers[0]->submit(kStart, holder, lock_request("k", 0, 30));
  old_leader.routers[1]->submit(kStart, waiter, lock_request("k", 60));
  old_leader.step(kStart, {&next});
  const std::vector<SessionEvent> granted = old_leader.events(0);
  ASSERT_EQ(granted.size(), 1U);
  const Token token = *granted[0].reply.token;

  // The old leader is gone; the next one takes over and closes its sessions without releasing.
  next.leader.lead(kStart + Duration::seconds(5));
  ASSERT_NE(next.step(kStart + Duration::seconds(5)), 0U);
  EXPECT_TRUE(next.replica.engine().sessions().empty());
  const std::vector<Engine::ResourceView> views = next.replica.engine().inspect();
  ASSERT_EQ(views.size(), 1U);
  ASSERT_EQ(views[0].holders.size(), 1U);  // the holder kept its lock and its token
  EXPECT_EQ(views[0].holders[0].token, token);
  EXPECT_TRUE(views[0].waiters.empty());  // the waiter left the queue
  // It renews with the new leader from a new session, by token.
  const SessionId renewer = next.routers[0]->new_session_id();
  next.routers[0]->submit(kStart, renewer, release_request("k", token, Command::kRenew));
  next.step(kStart + Duration::seconds(6));
  const std::vector<SessionEvent> renewed = next.events(0);
  ASSERT_EQ(renewed.size(), 1U);
  EXPECT_EQ(renewed[0].reply.status, Status::kOk);
  EXPECT_GT(renewed[0].reply.seconds, 0);
}

TEST(ClusterLeader, ItsOwnSessionThatClosedWhileFollowingIsReleasedWhenItLeads) {
  Node node(1);
  node.leader.lead(kStart);
  const SessionId session = node.routers[0]->new_session_id();
  node.routers[0]->submit(kStart, session, lock_request("k", 0, 30));
  node.step(kStart);
  ASSERT_EQ(node.events(0).size(), 1U);
  node.leader.follow("");
  node.routers[0]->close(kStart, session);
  node.pump();
  node.leader.lead(kStart + Duration::seconds(1));
  ASSERT_NE(node.step(kStart + Duration::seconds(1)), 0U);
  const std::vector<Engine::ResourceView> views = node.replica.engine().inspect();
  ASSERT_EQ(views.size(), 1U);
  EXPECT_TRUE(views[0].holders.empty());  // auto-release on disconnect, as on one node
}

TEST(ClusterLeader, ClosingASessionWithAParkedRequestCancelsIt) {
  Node node(1);
  node.leader.lead(kStart);
  const SessionId holder = node.routers[0]->new_session_id();
  const SessionId waiter = node.routers[0]->new_session_id();
  node.routers[0]->submit(kStart, holder, lock_request("k", 0, 30));
  node.routers[0]->submit(kStart, waiter, lock_request("k", 30));
  node.step(kStart);
  ASSERT_EQ(node.events(0).size(), 2U);
  node.routers[0]->close(kStart, waiter);
  node.step(kStart);
  const std::vector<SessionEvent> events = node.events(0);
  ASSERT_EQ(events.size(), 1U);
  EXPECT_EQ(events[0].kind, SessionEvent::Kind::kCancelled);
  EXPECT_EQ(events[0].session, waiter);
}

TEST(ClusterLeader, AnotherLeadersEntriesReachOnlySessionsStillWaitingHere) {
  Node a(1);
  Node b(2);
  a.leader.lead(kStart);
  const SessionId holder = a.routers[0]->new_session_id();
  a.routers[0]->submit(kStart, holder, lock_request("k", 0, 30));
  a.step(kStart, {&b});
  ASSERT_EQ(a.events(0).size(), 1U);
  const SessionId waiter = a.routers[1]->new_session_id();
  a.routers[1]->submit(kStart, waiter, lock_request("k", 60));
  a.step(kStart, {&b});
  ASSERT_EQ(a.events(1).size(), 1U);  // parked
  // The holder goes: the waiter is granted, by a delivery on every replica.
  a.routers[0]->close(kStart, holder);
  a.step(kStart, {&b});
  const std::vector<SessionEvent> granted = a.events(1);
  ASSERT_EQ(granted.size(), 1U);
  EXPECT_TRUE(granted[0].reply.token);
  // b follows and applies a's entries: none of them is b's, and nothing reaches b's routers.
  EXPECT_TRUE(b.events(0).empty());
  EXPECT_TRUE(b.events(1).empty());
  EXPECT_EQ(a.replica.digest(), b.replica.digest());
}

}  // namespace
}  // namespace turnstile::core
