// ClusterRun: one seed of a cluster profile (sim/cluster_run.h), inside. Its parts live in files
// of their own: the run, the replicas' host callbacks and the nodes' processes
// (sim/cluster_run.cc); the clients (sim/cluster_clients.cc, on the shared client model of
// sim/tcp_client.h); the faults: kills, crashes and damaged disks, revivals, partitions
// (sim/cluster_faults.cc); the checks after every step and the heal at the end
// (sim/cluster_checks.cc).
//
// Thread affinity: single-threaded; one run owns everything it creates.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/cluster_leader.h"
#include "core/log_entry.h"
#include "sim/checker.h"
#include "sim/cluster_node.h"
#include "sim/digest.h"
#include "sim/history.h"
#include "sim/prng.h"
#include "sim/raft_cluster.h"
#include "sim/raft_disk.h"
#include "sim/run.h"
#include "sim/settings.h"
#include "sim/tcp_client.h"

namespace turnstile::sim {

constexpr std::uint64_t kClusterClients = 10;
constexpr std::int64_t kNsPerMs = 1'000'000;
constexpr unsigned kHealedWaitMs = 20'000;  // after the heal, every request must be answered

// Node `node`'s client address, as error_not_leader names it, and back.
std::string client_address(unsigned node);
std::optional<unsigned> node_of_address(const std::string& address, unsigned nodes);

// What a cluster seed draws from its swarm stream (the others keep their draws): the share of
// client requests that are read-write lock commands (half of the seeds) and the lock-delay of
// every replica's engine (one seed in four; every replica gets the same, as every node of a
// cluster is started with the same --lock-delay).
struct ClusterShape {
  std::uint64_t rw_permille = 0;
  std::int64_t lock_delay_ms = 0;
  std::uint64_t lost_notify_permille = 0;  // clients that send lost-notify _ on
};

// A cluster client: the shared client (sim/tcp_client.h) on a session of one node's process. It
// follows error_not_leader to the leader named.
struct ClusterClient : TcpClient {
  std::optional<unsigned> node;  // connected to
  core::SessionId session;
  std::optional<unsigned> hint;  // the leader an error_not_leader named
  // lost-notify: whether this connection's `ok` came, and the lines read on it.
  bool notify_on = false;
  std::set<std::string> lost_lines;
};

class ClusterRun final : public RaftCluster::Host {
 public:
  explicit ClusterRun(const Options& options);

  Result run();

  // ---- RaftCluster::Host (sim/cluster_run.cc)
  void on_applied(unsigned node, const core::LogEntry& entry,
                  const core::AppliedEntry& applied) override;
  void on_restored(unsigned node) override;
  void after_step() override;

 private:
  std::int64_t now_ns() const { return cluster_.now().ns(); }
  void fail(const std::string& invariant, const std::string& detail);
  std::string describe_settings() const;
  // One step: clients ask, and a fault, if any, strikes.
  void step();
  // --trace: what the leader applied, and then every resource's holders and waiters.
  void trace_applied(unsigned node, const core::LogEntry& entry) const;
  std::unique_ptr<Checker> make_checker();
  // A new life of `node`'s process: its sessions carry a tag no other life of any node has.
  std::unique_ptr<NodeProcess> start_process(unsigned node);
  // What raft says reaches the node's process; its messages move; the entries it takes are
  // proposed; its replies reach its clients.
  void drive(unsigned node);
  void lead_or_follow(unsigned node, NodeProcess& process);
  void propose_entries(unsigned node, NodeProcess& process);
  void deliver_output(unsigned node, NodeProcess& process);

  // ---- the faults (sim/cluster_faults.cc)
  unsigned alive_count() const;
  void kill_one();
  void revive_one() { revive(static_cast<unsigned>(faults_.below(nodes_))); }
  void revive(unsigned node);
  // The index of the entry `disk`'s acknowledged-index record holds (0 for none).
  static std::uint64_t recorded(const RaftDisk& disk);
  void damage_disk(unsigned node);
  bool restart(unsigned node);
  void cut_one();
  void heal_links();

  // ---- the clients (sim/cluster_clients.cc)
  RequestMix request_mix();
  void client_act(ClusterClient& client);
  void connect(ClusterClient& client);
  void send_lost_notify(ClusterClient& client);
  void client_lost_line(ClusterClient& client, const std::string& line);
  void send(ClusterClient& client, Outstanding out);
  void disconnect(ClusterClient& client);
  void connection_lost(ClusterClient& client);
  void client_line(ClusterClient& client, const std::string& line);
  // error_not_leader: the client goes to the leader named, if any.
  void follow_not_leader(ClusterClient& client, const core::Reply& reply);
  const ClusterClient* waiting_client() const;

  // ---- the checks (sim/cluster_checks.cc)
  void check();
  void check_replica(unsigned node);
  void observe_grants(unsigned node);
  void note_grant(unsigned node, std::uint64_t index, const core::Token& token);
  void check_holder_fences(unsigned node, const core::Engine::ResourceView& view);
  void heal_and_converge();
  bool wait_for_answers();
  bool catch_up();
  void converge();
  void check_history();

  Options options_;
  unsigned nodes_;
  Prng work_;
  Prng losses_;  // which clients ask for lost-notify
  Prng faults_;
  Prng disk_;  // crashes rather than pauses, and the damage a crashed node's disk takes
  Prng salts_;
  ClusterShape shape_;  // before cluster_, whose replicas' engines it configures
  RaftCluster cluster_;
  core::ClusterLeaderConfig leader_config_;
  Settings checker_settings_;
  bool checker_failed_ = false;
  std::vector<std::unique_ptr<NodeProcess>> processes_;  // null while the node is down
  std::vector<std::uint64_t> lives_;                     // per node: processes started
  std::vector<std::unique_ptr<Checker>> checkers_;       // per node: its replica's engine
  std::vector<ClusterClient> clients_;
  History history_;
  std::uint64_t connections_ = 0;
  std::map<std::uint64_t, std::uint64_t> history_connections_;  // session id -> connection
  Digest digest_;
  Result result_;
  std::set<std::pair<unsigned, unsigned>> cut_;
  std::set<unsigned> damaged_;  // crashed nodes whose disk lost what they acknowledged
  std::set<unsigned> refused_;  // nodes that refused to start: down for good
  std::map<std::uint64_t, std::uint64_t> digests_;  // applied index -> digest
  std::map<unsigned, std::uint64_t> grants_checked_;
  struct FenceSeen {
    std::uint64_t index = 0;  // the entry that minted it
    std::uint64_t salt = 0;
  };
  std::map<std::uint64_t, FenceSeen> fences_;  // every fence seen, by value
  struct KeyFences {
    std::uint64_t max = 0;
    std::set<std::uint64_t> seen;
  };
  std::map<std::tuple<unsigned, core::Namespace, std::string>, KeyFences> key_fences_;
  TcpClientModel model_;  // last: it holds on to history_ and result_; draws from work_
};

}  // namespace turnstile::sim
