// ClusterNode: turnstiled's cluster mode (docs/cluster.md) on one node. It owns the replicated
// state machine (core::Replica), its router end (core::ClusterLeader) and the raft server that
// orders the log (net/raft_node.h), and moves messages between them and the shards.
//
// Every piece of logic is the core's: the shards' routers (core::Router in replicated mode) send
// their sessions' engine requests, cancels, closes and stats requests here; ClusterLeader turns
// them into log entries and applied entries into replies; Replica applies the log. This class is
// only the driver: it runs all three on the raft thread (RaftNode::run), proposes the entries
// ClusterLeader takes, feeds it every applied entry and the leadership changes, wakes it at the
// replica's next deadline, and posts its messages to the shards' mailboxes.
//
// It also keeps what /metrics shows of it (docs/cluster.md, "Observing a cluster"): counters
// and the leader's apply latency, written on the raft thread only and read from any thread.
//
// Thread affinity: post(), status(), metrics(), leader_known() and leader_client_address() from
// any thread; start() and stop() on the main thread; everything else runs on the raft thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/cluster_leader.h"
#include "core/http_codec.h"
#include "core/replica.h"
#include "core/router.h"
#include "core/stats.h"
#include "core/time.h"
#include "net/config.h"
#include "net/crypto_random.h"
#include "net/raft_node.h"
#include "net/shared_state.h"

namespace turnstile::net {

// turnstiled's exit codes for a cluster node that cannot start (docs/cluster.md, "A damaged
// directory"): its raft directory is damaged or lost entries it acknowledged (EX_DATAERR: a
// supervisor must not restart it), or it did not load in --raft-start-timeout-s (EX_IOERR).
inline constexpr int kExitDamagedDirectory = 65;
inline constexpr int kExitStartTimedOut = 74;

class ClusterNode final : public RaftStateMachine, public ClusterService {
 public:
  // `session_tag`: the tag of this process's session ids (core::RouterConfig::session_tag).
  ClusterNode(const Config& config, SharedState& shared, std::uint32_t session_tag);
  ~ClusterNode() override;
  ClusterNode(const ClusterNode&) = delete;
  ClusterNode& operator=(const ClusterNode&) = delete;

  // Loads the raft directory and starts the raft thread; nullopt, or why it cannot start.
  std::optional<std::string> start();
  // After start() failed, the exit code that says why: 65 for a damaged raft directory (restarting
  // cannot help), 74 for one that did not load in time, else 1.
  int start_failure_exit_code() const;
  void stop();

  // Any thread: messages of a shard's router for the replicated endpoint (ClusterService).
  void post(std::vector<core::RouterMessage>& messages) override;

  RaftStatus status() const override { return raft_->status(); }
  ClusterMetrics metrics() const override;
  bool leader_known() const override { return raft_->status().leader_id != 0; }
  // The client address of the leader (this node's advertise address when it leads), empty when
  // no leader is known. It comes from the raft configuration when the leader was added with its
  // client address (POST /v1/admin/voters), else from --cluster-peers.
  std::string leader_client_address() const override;

  // Any thread: a membership change of the admin routes. One at a time on this node (a second one
  // while one is pending is kPending), and only on the leader (kNotLeader, with the leader's
  // client address). `done` runs once, on the raft thread or, when refused at once, on the
  // calling thread. An added node's client address is stored with its raft address in raft's
  // configuration ("raft@client"), so that every node can send clients to it.
  void add_voter(const core::AdminVoterAdd& voter, AdminDone done) override;
  void remove_voter(std::uint64_t id, AdminDone done) override;

  // Any thread: hands leadership to another voter (SIGTERM on the leader). `done(true)` once
  // another node leads; false when this node does not lead or the transfer did not happen within
  // an election timeout. Runs on the raft thread.
  void transfer_leadership(std::function<void(bool)> done) override;

  // Before start(): what to do when this node cannot go on (its raft log stopped being written).
  // Called once, on the raft thread.
  void on_fatal(std::function<void()> fatal) { on_fatal_ = std::move(fatal); }

 private:
  // RaftStateMachine, on the raft thread.
  void apply(std::uint64_t index, std::string_view command) override;
  std::string snapshot() override;
  bool restore(std::string_view bytes) override;
  void leadership_changed(bool leader) override;
  void log_cannot_be_written(const std::string& why) override;

  // Refuses a change at once (kNotLeader, kPending) or marks one pending: true when refused.
  bool refuse_change(AdminDone& done);
  RaftNode::ErrorDone change_done(std::uint64_t id, AdminDone done);

  // The mailbox, then flush(); every turn of the raft thread that may change what ClusterLeader
  // has to propose ends here (a post, an applied entry, a change of leadership, the deadline
  // wake-up).
  void drain();
  // The raft status as stats replies show it.
  core::ClusterStatus cluster_status() const;
  // Records the apply latency when `salt` is an entry this node proposed.
  void time_apply(std::uint64_t salt);
  // Proposes what ClusterLeader has, posts its messages to the shards, and sets the wake-up for
  // the replica's next deadline.
  void flush();

  const Config& config_;
  SharedState& shared_;
  core::Replica replica_;
  core::ClusterLeader leader_;
  CryptoRandom salts_;  // each entry's salt seeds its tokens: it must be unpredictable
  std::unique_ptr<RaftNode> raft_;

  std::atomic<bool> change_pending_{false};  // an admin membership change is in flight

  std::mutex mailbox_mutex_;
  std::vector<core::RouterMessage> mailbox_;  // guarded by mailbox_mutex_
  // Whether a post to an empty mailbox must wake the raft thread. False while this node leads
  // with its in-flight entries at the limit (ClusterLeader::in_flight_full): nothing it receives
  // could be proposed before one of them applies, and that apply (or stepping down) drains the
  // mailbox anyway. So under load the shards do not wake the raft thread once per request, only
  // the apply does, once per entry. Written by drain() before its last look at the mailbox; post()
  // reads it after queueing (both sequentially consistent), so either drain() sees the message or
  // post() sees true and wakes it.
  std::atomic<bool> wake_on_post_{true};
  // flush()'s messages for each shard, handed over one batch per shard.
  std::vector<std::vector<core::RouterMessage>> to_shards_;

  // The entries this node proposed and has not seen applied, oldest first: each one's salt and
  // the monotonic time it was proposed (for the apply latency). Cleared when it stops leading.
  struct Proposed {
    std::uint64_t salt = 0;
    core::Instant at;
  };
  std::deque<Proposed> proposed_;
  // For /metrics: written on the raft thread only, read anywhere.
  std::atomic<std::uint64_t> entries_applied_{0};
  std::atomic<std::uint64_t> leadership_changes_{0};
  TcpLatency apply_latency_;
  std::function<void()> on_fatal_;  // set before start(); called on the raft thread
};

}  // namespace turnstile::net
