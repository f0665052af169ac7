// NodeProcess: one life of a simulated turnstiled cluster node, above raft: its client sessions
// (core::Session, one per connection), its router in cluster mode (core::Router with
// RouterConfig::replicated, one shard) and its core::ClusterLeader over the node's replica. The
// daemon runs the same three across threads (net/tcp_connections.cc, net/shard.cc,
// net/cluster_node.cc); here one thread moves their messages at once, in a fixed order. A crash
// loses the object; the replica and raft's log belong to the RaftCluster and survive it.
//
// The driver (sim/cluster_run.cc) gives it what raft says (lead, follow, every applied entry),
// proposes the entries it takes, and carries bytes between its connections and the simulated
// clients. Every session id carries the life's tag (RouterConfig::session_tag), so a later life
// never mistakes an earlier life's sessions for its own.
//
// Thread affinity: single-threaded, owned by one run.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/cluster_leader.h"
#include "core/log_entry.h"
#include "core/replica.h"
#include "core/router.h"
#include "core/session.h"
#include "core/session_port.h"
#include "core/time.h"
#include "core/types.h"

namespace turnstile::sim {

class NodeProcess {
 public:
  // `leader` says how the node closes sessions (auto-release, orphan time); its shards and
  // session tag are set here (one shard, `session_tag`).
  NodeProcess(std::uint32_t session_tag, const core::Replica& replica,
              core::ClusterLeaderConfig leader);
  ~NodeProcess();
  NodeProcess(const NodeProcess&) = delete;
  NodeProcess& operator=(const NodeProcess&) = delete;

  // ---- raft's side -------------------------------------------------------------------------
  // The node is ready in `term` (it leads and applied its barrier): it leads from now, once per
  // term. A term it stopped leading in (follow, a refused proposal) is not led again.
  void lead(core::Instant now, std::uint64_t term);
  // It no longer leads; `leader_address` is the new leader's client address, if known.
  void follow(std::string leader_address);
  // The term it leads in; 0 while following.
  std::uint64_t leading_term() const { return leading_term_; }
  void applied(const core::LogEntry& entry, const core::AppliedEntry& applied);
  std::optional<core::LogEntry> take_entry(core::Instant now, std::uint64_t salt) {
    return leader_.take_entry(now, salt);
  }

  // ---- the clients' side -------------------------------------------------------------------
  // A client connects: a new session.
  core::SessionId connect(core::Instant now);
  // Bytes from the client (the session takes them in order; what it cannot take yet waits here).
  void send(core::Instant now, core::SessionId session, std::string_view bytes);
  // The client closed or reset its connection.
  void disconnect(core::Instant now, core::SessionId session);
  // Reply bytes for the client, taken.
  std::string take_output(core::SessionId session);
  // Sessions whose close the router heard since the last call (for the History).
  std::vector<core::SessionId> take_closed();

  // Moves every message between the sessions, the router and the leader until nothing moves.
  void pump(core::Instant now);
  // Driver-contract violations only this driver sees (events for unknown sessions, a loop that
  // does not settle): empty when well. core::SessionPort asserts the rest.
  const std::vector<std::string>& anomalies() const { return anomalies_; }
  // Sessions not forgotten yet.
  std::size_t sessions() const { return connections_.size(); }

 private:
  struct Connection {
    std::unique_ptr<core::SessionPort> port;
    std::string input;   // bytes the session did not take yet
    std::string output;  // reply bytes the client did not take yet
  };

  bool pump_once(core::Instant now);
  void on_event(core::Instant now, core::SessionEvent& event);
  std::int64_t open_sessions() const;

  core::Router router_;
  core::ClusterLeader leader_;
  std::uint64_t leading_term_ = 0;
  std::uint64_t last_term_led_ = 0;
  std::map<std::uint64_t, Connection> connections_;  // by session id
  std::vector<core::SessionId> closed_;
  std::vector<std::string> anomalies_;
};

}  // namespace turnstile::sim
