// SharedState: the little that a process's shards share, and the per-shard TCP latency tables
// that /metrics sums.
//
// Thread affinity: every member is safe from any thread (atomics, or behind a mutex), except
// that each TcpLatencies table is written by its own shard's thread only.
#pragma once

#include <openssl/ssl.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/engine.h"
#include "core/http_codec.h"
#include "core/protocol.h"
#include "core/router.h"
#include "core/time.h"
#include "net/config.h"
#include "net/raft_node.h"
#include "net/signal_bus.h"

namespace turnstile::net {

class ClusterNode;
class Shard;

// Request latencies (seconds): the Prometheus histogram buckets shared by TCP and HTTP.
inline constexpr std::array<double, 14> kLatencyBuckets = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 30};

// TCP request latency of one command over every shard, for /metrics: cumulative buckets. (The
// cluster node's apply latency uses the same two types.)
struct TcpLatencyTotals {
  std::array<std::uint64_t, kLatencyBuckets.size()> buckets{};
  std::uint64_t count = 0;
  std::uint64_t sum_ns = 0;
};

// Request latencies of one command on one shard. One writer (the shard's thread), so a record is
// a few plain stores to lines no other core writes; /metrics reads them from another thread.
class TcpLatency {
 public:
  void record(core::Duration elapsed);
  // Adds these counts to `totals` (cumulative buckets).
  void add_to(TcpLatencyTotals& totals) const;

 private:
  // By the first bucket bound that holds the latency; the last counts those above every bound.
  std::array<std::atomic<std::uint64_t>, kLatencyBuckets.size() + 1> by_bucket_{};
  std::atomic<std::uint64_t> sum_ns_{0};
};

// What /metrics and /ready read of a cluster node (docs/cluster.md, "Observing a cluster").
struct ClusterMetrics {
  RaftStatus raft = {};
  std::uint64_t entries_applied = 0;     // log entries of ours applied since start
  std::uint64_t leadership_changes = 0;  // times this node started or stopped leading
  // On the leader: from proposing an entry to applying it, in the request-latency buckets.
  TcpLatencyTotals apply_latency = {};
};

// The node in cluster mode (net/cluster_node.h), as the rest of the daemon sees it: where the
// shards' routers send what is for the replicated endpoint (a core::Router in replicated mode),
// what /metrics and /ready read, and the admin routes' membership changes. Every call may come
// from any shard's thread; the admin calls answer through `done` on the raft thread (or at once).
class ClusterService {
 public:
  virtual ~ClusterService() = default;
  // Takes every message of `messages` (left empty), in order: one lock, and at most one wake-up
  // of the endpoint's thread, for all of them.
  virtual void post(std::vector<core::RouterMessage>& messages) = 0;
  virtual ClusterMetrics metrics() const = 0;
  // A leader is known (RaftStatus::leader_id != 0): what /ready asks.
  virtual bool leader_known() const = 0;

  // ---- the admin routes (docs/cluster.md, "Changing the membership")
  virtual RaftStatus status() const = 0;
  // The leader's client address, as the X-Dflockd-Leader header names it ("" when unknown).
  virtual std::string leader_client_address() const = 0;
  using AdminDone = std::function<void(core::AdminChangeOutcome)>;
  virtual void add_voter(const core::AdminVoterAdd& voter, AdminDone done) = 0;
  virtual void remove_voter(std::uint64_t id, AdminDone done) = 0;
  // True once another voter leads; false when none took over within an election timeout.
  virtual void transfer_leadership(std::function<void(bool)> done) = 0;
};

// What all shards share. Counters are atomics; the per-IP table is behind a mutex (touched only
// when a connection opens or closes).
struct SharedState {
  static constexpr std::size_t kCommands = core::kCommandCount;
  using TcpLatencies = std::array<TcpLatency, kCommands>;  // by core::Command

  explicit SharedState(const Config& server_config);

  const Config& config;
  std::vector<Shard*> shards;  // filled by the server as it creates them
  // Cluster mode (docs/cluster.md): the node's replicated end, where the shards' routers send
  // their engine requests; null on one node. Set before the shards start.
  ClusterService* cluster = nullptr;
  // The top bits of this process's session ids (core::RouterConfig::session_tag): random and
  // non-zero in cluster mode, 0 on one node.
  std::uint32_t session_tag = 0;
  // Cluster mode: true while the raft directory loads (the shards already serve; /health answers
  // 503 "starting" until the node can serve).
  std::atomic<bool> starting{false};
  SSL_CTX* tls = nullptr;  // non-null: every connection is TLS
  // Every listener of this process, for every shard's router (core/signal_hub.h).
  SignalBus signals;
  std::atomic<std::int64_t> connections_open{0};
  std::atomic<std::int64_t> http_sessions_live{0};  // counted in stats `connections`
  // Requests refused for a wrong or missing auth or admin token, TCP and HTTP (/metrics).
  std::atomic<std::uint64_t> auth_failures{0};

  // One table per shard (config.threads of them), each written by its shard's thread.
  std::vector<std::unique_ptr<TcpLatencies>> tcp_latencies;
  TcpLatencyTotals tcp_latency(core::Command command) const;

  // --max-locks, exact across shards.
  class Budget final : public core::ResourceBudget {
   public:
    explicit Budget(std::int64_t max) : max_(max) {}
    bool try_take() override;
    void give_back() override;

   private:
    std::int64_t max_;
    std::atomic<std::int64_t> used_{0};
  } budget;

  // Per-IP connection counts for --max-connections-per-ip.
  std::mutex per_ip_mutex;
  std::unordered_map<std::string, std::int64_t> per_ip;

  // Reserves a slot for a new connection from `ip`; false when a cap is reached.
  bool admit(const std::string& ip);
  void release(const std::string& ip);

  SharedState(const SharedState&) = delete;
  SharedState& operator=(const SharedState&) = delete;
};

// The engine settings of the daemon's flags, for the shards' engines and a cluster node's replica.
// Fences count up from `fence_floor` (the journal's floor on one node; 0 for a replica, whose
// counter is replicated state).
core::EngineConfig engine_config(const Config& config, std::uint64_t fence_floor = 0);

}  // namespace turnstile::net
