// RaftCluster: the replicated core (core/replica.h) on canonical raft's deterministic test fixture
// (raft/fixture.h): N nodes, each a raft instance with an in-memory log and network and a
// core::Replica as its state machine (snapshotted with Replica::save), all stepped in one thread in
// fixture time. It is the first part of the cluster simulation of docs/cluster.md: the consensus,
// the elections and the log are the library's; what this adds is the state machine,
// the leaders' barriers, the entries a driver proposes on a node and the faults it asks for (kill
// and revive, disconnect and reconnect). Who makes the entries is the driver's business: in the
// cluster profiles, each node's core::ClusterLeader (sim/cluster_node.h), as in turnstiled.
//
// Each node's disk is a RaftDisk (sim/raft_disk.h) under the acknowledged-index record that
// turnstiled keeps (net/raft_acked_record.h): kill() and revive() pause a node and let it go on
// with its memory (a stopped process, a cut network); crash() and restart() end its process and
// start a new one from what its disk holds, which may have been damaged meanwhile.
//
// A node that becomes leader first commits a barrier, so that it has applied every entry of
// earlier terms; only then is it ready() to take requests.
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

extern "C" {
#include <raft.h>
}

namespace turnstile::sim {

class RaftDisk;

class RaftCluster {
 public:
  // What the driver of the nodes' processes (sim/cluster_run.cc) hears from the cluster.
  class Host {
   public:
    virtual ~Host() = default;
    // `node`'s replica applied `entry`, which gave `applied` (barriers are not reported).
    virtual void on_applied(unsigned node, const core::LogEntry& entry,
                            const core::AppliedEntry& applied) = 0;
    // `node`'s replica restored a snapshot (its state jumped ahead).
    virtual void on_restored(unsigned node) = 0;
    // After every step of the fixture (a message delivered, a timer fired, a disk write done):
    // the driver moves its processes' messages and proposes their entries.
    virtual void after_step() = 0;
  };

  // `nodes` voters (1 to 5), every one running a Replica of `engine`; the nodes' message latencies
  // (5 to 24 ms) are drawn from `seed`.
  RaftCluster(unsigned nodes, std::uint64_t seed, const core::EngineConfig& engine = {});
  ~RaftCluster();
  RaftCluster(const RaftCluster&) = delete;
  RaftCluster& operator=(const RaftCluster&) = delete;

  // Who hears of applied entries and steps (null: nobody). Set before the first step.
  void set_host(Host* host) { host_ = host; }

  unsigned nodes() const { return static_cast<unsigned>(nodes_.size()); }
  // The fixture's global time as an Instant (every node's clock).
  core::Instant now() const;

  // The node raft names leader, if it is alive.
  std::optional<unsigned> leader() const;
  // Whether `node` leads and has applied a barrier of its current term: every entry committed
  // before is applied on it, so it may take requests (core::ClusterLeader::lead).
  bool ready(unsigned node) const;
  std::uint64_t term(unsigned node) const;
  std::uint64_t last_index(unsigned node) const;
  // Every live leader that has not proposed a barrier in its current term proposes one (the
  // commit rule's builds do so after every step as well).
  void propose_barriers();

  // Appends `entry` to `node`'s log. Returns its index, or 0 when raft refused it (the node does
  // not lead).
  std::uint64_t propose(unsigned node, const core::LogEntry& entry);
  // Steps until some node is ready (at most `max_ms` of fixture time); that node, or nullopt.
  std::optional<unsigned> step_until_ready(unsigned max_ms);
  // Steps until every live node has applied `index` (at most `max_ms` of fixture time).
  bool step_until_applied(std::uint64_t index, unsigned max_ms = 10'000);
  // Steps the fixture for `ms` of its time.
  void step_for(unsigned ms);

  void kill(unsigned node);
  void revive(unsigned node);  // a killed node, not a crashed one
  // Ends `node`'s process: what its disk had not stored is lost, its raft instance closes.
  void crash(unsigned node);
  // Starts a crashed node again from its disk, with a fresh replica. Empty when it runs; else
  // why it refused to start (its log lost entries it acknowledged, a snapshot is cut short): it
  // stays down, as turnstiled exits 65.
  std::string restart(unsigned node);
  bool crashed(unsigned node) const;
  // What a crashed node's raft had heard was stored when it crashed: the last entry it may have
  // acknowledged to a leader (or counted as a leader).
  std::uint64_t acknowledged(unsigned node) const;
  // A crashed node's disk, to damage before restart().
  RaftDisk& disk(unsigned node);
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
  // Rejections of an entry a follower had compacted that the commit rule answered with success
  // (net/raft_commit_rule.h), since this cluster was made.
  std::uint64_t compacted_answers() const;

 private:
  struct Node;
  struct Fixture;
  struct Callbacks;  // the state machine's C callbacks

  raft* instance(unsigned node) const;
  void configure(unsigned node);  // snapshots, the commit rule and the acknowledged record

  core::EngineConfig engine_;
  unsigned election_timeout_ms_ = 0;  // the fixture's, set again on a restarted instance
  unsigned heartbeat_timeout_ms_ = 0;
  std::unique_ptr<Fixture> fixture_;
  std::vector<std::unique_ptr<Node>> nodes_;
  Host* host_ = nullptr;
  // propose_barriers calls (the raft canary's pace). Declared in every build: the canary
  // compiles only raft_cluster.cc with its definition, so the layout must not depend on it.
  std::uint64_t barrier_calls_ = 0;
  std::uint64_t rejected_ = 0;
  std::uint64_t snapshots_taken_ = 0;
  std::uint64_t snapshots_restored_ = 0;
  std::uint64_t compacted_answers_before_ = 0;  // the process-wide count when this was made
};

}  // namespace turnstile::sim
