// RaftCluster: the replicated core (core/replica.h) on canonical raft's deterministic test fixture
// (raft/fixture.h): N nodes, each a raft instance with an in-memory log and network and a
// core::Replica as its state machine (snapshotted with Replica::save), all stepped in one thread in
// fixture time. It is the first part of the cluster simulation of docs/cluster.md: the consensus,
// the elections and the log are the library's; what this adds is the state machine, the leader's
// proposals (each with its LogClock time and a token salt) and the faults a caller asks for (kill
// and revive, disconnect and reconnect).
//
// A node that becomes leader first commits a barrier, so that it has applied every entry of
// earlier terms, and only then takes over the log's clock from the last applied entry: time in
// the log pauses while there is no leader and never goes backwards.
//
// Thread affinity: single-threaded; the fixture is not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/engine.h"
#include "core/log_entry.h"
#include "core/replica.h"
#include "core/time.h"

namespace turnstile::sim {

class RaftCluster {
 public:
  // `nodes` voters (1 to 5), every one running a Replica of `engine`; the nodes' message latencies
  // (5 to 24 ms) are drawn from `seed`.
  RaftCluster(unsigned nodes, std::uint64_t seed, const core::EngineConfig& engine = {});
  ~RaftCluster();
  RaftCluster(const RaftCluster&) = delete;
  RaftCluster& operator=(const RaftCluster&) = delete;

  unsigned nodes() const { return static_cast<unsigned>(nodes_.size()); }
  // The fixture's global time as an Instant (every node's clock).
  core::Instant now() const;

  // Steps until some node is leader and has applied a barrier of its term (at most `max_ms` of
  // fixture time); the leader's index, or nullopt.
  std::optional<unsigned> elect(unsigned max_ms = 10'000);
  // The current leader's index, if any.
  std::optional<unsigned> leader() const;

  // Proposes one entry of `commands` on the leader, at its log clock's time, with token salt
  // `salt`. Returns its index, or 0 when there is no ready leader or raft refused it.
  std::uint64_t propose(std::vector<core::LogCommand> commands, std::uint64_t salt);
  // Steps until every live node has applied `index` (at most `max_ms` of fixture time).
  bool step_until_applied(std::uint64_t index, unsigned max_ms = 10'000);
  // Steps the fixture for `ms` of its time.
  void step_for(unsigned ms);

  void kill(unsigned node);
  void revive(unsigned node);
  void disconnect(unsigned a, unsigned b);
  void reconnect(unsigned a, unsigned b);
  bool alive(unsigned node) const;
  // A live node whose raft instance stopped itself (it met an entry that conflicts with one it
  // had committed): never, while the commit rule holds (net/raft_commit_rule.h).
  bool shut_down(unsigned node) const;

  const core::Replica& replica(unsigned node) const;
  std::uint64_t applied(unsigned node) const;
  // What applying the entry at raft index `index` gave on `node` (the last 4,096 entries are
  // kept); null when that node has not applied it, or it was a barrier.
  const core::AppliedEntry* result(unsigned node, std::uint64_t index) const;
  // Entries or snapshots any node could not decode or restore (a broken log): always 0.
  std::uint64_t rejected() const { return rejected_; }
  // Snapshots taken and restored across all nodes (raft takes one every 64 entries; a node that
  // lags more than 16 entries behind the last one restores it).
  std::uint64_t snapshots_taken() const { return snapshots_taken_; }
  std::uint64_t snapshots_restored() const { return snapshots_restored_; }

 private:
  struct Node;
  struct Fixture;
  struct Callbacks;  // the state machine's C callbacks
  // The leader or its term changed: forget the ready one; a new one becomes ready once its
  // barrier applied.
  void follow_leadership();

  std::unique_ptr<Fixture> fixture_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::optional<unsigned> ready_leader_;  // the leader whose barrier is applied
  std::uint64_t ready_term_ = 0;          // the term in which it committed that barrier
  core::LogClock clock_;
  std::uint64_t rejected_ = 0;
  std::uint64_t snapshots_taken_ = 0;
  std::uint64_t snapshots_restored_ = 0;
};

}  // namespace turnstile::sim
