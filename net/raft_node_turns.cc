// RaftNode (net/raft_node.h), the raft thread's turns: the queued work served (the runs of
// proposals batched), leadership tracked (a new leader's barrier, the state machine told) and
// handed over (transfer_leadership), the log's writes watched (a full or stalled disk), and the
// status the other threads read refreshed.
#include <sys/statvfs.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <utility>

#include "net/raft_node_impl.h"

namespace turnstile::net {

using raft_node_detail::kMaxBatchBytes;
using raft_node_detail::kMaxBatchEntries;

namespace {

core::RaftRole role_of(int state) {
  switch (state) {
    case RAFT_FOLLOWER:
      return core::RaftRole::kFollower;
    case RAFT_CANDIDATE:
      return core::RaftRole::kCandidate;
    case RAFT_LEADER:
      return core::RaftRole::kLeader;
    default:
      return core::RaftRole::kUnavailable;
  }
}

}  // namespace

void RaftNode::Impl::on_async(uv_async_t* handle) {
  auto* self = static_cast<Impl*>(handle->data);
  std::vector<Op> ops;
  bool stop = false;
  {
    std::lock_guard lock(self->mutex_);
    ops.swap(self->queue_);
    stop = self->stop_requested_;
  }
  self->process(ops);
  if (stop) self->begin_shutdown();
}

void RaftNode::Impl::on_check(uv_check_t* handle) {
  auto* self = static_cast<Impl*>(handle->data);
  if (self->closing_) return;
  std::vector<std::function<void()>> work;
  work.swap(self->deferred_);
  for (std::function<void()>& w : work) w();
  self->track_leadership();
  self->watch_log_writes();
  self->refresh_status();
}

std::optional<std::uint64_t> RaftNode::Impl::free_bytes_below_minimum() const {
  if (config_.min_free_bytes == 0) return std::nullopt;
  struct statvfs fs {};
  if (::statvfs(config_.dir.c_str(), &fs) != 0) return std::nullopt;  // open() reports the dir
  const std::uint64_t free = static_cast<std::uint64_t>(fs.f_bavail) * fs.f_frsize;
  if (free >= config_.min_free_bytes) return std::nullopt;
  return free;
}

void RaftNode::Impl::watch_log_writes() {
  if (log_failure_reported_) return;
  const std::uint64_t now = uv_now(&loop_);
  std::string why;
  if (now >= next_space_check_ms_) {
    next_space_check_ms_ = now + kSpaceCheckMs;
    if (const std::optional<std::uint64_t> free = free_bytes_below_minimum()) {
      why = "only " + std::to_string(*free >> 20) + " MiB free in " + config_.dir + " (" +
            std::to_string(config_.min_free_bytes >> 20) + " MiB needed)";
    }
  }
  const raft_index stored = raft_.last_stored;
  const raft_index last = raft_last_index(&raft_);
  // raft's tick turns the loop at least every heartbeat timeout: a much longer gap between two
  // turns means this thread did not run (the process was stopped, or its machine paused), and a
  // thread that did not run has seen no slow disk. The stall is timed again from now.
  const std::uint64_t gap_ms = std::max<std::uint64_t>(1000, 2 * config_.heartbeat_timeout_ms);
  const bool resumed = last_turn_ms_ != 0 && now - last_turn_ms_ > gap_ms;
  last_turn_ms_ = now;
  if (resumed || last <= stored || stored != stall_stored_) {
    stall_stored_ = stored;
    stall_since_ms_ = now;
  } else if (why.empty() && now - stall_since_ms_ >= config_.log_write_stall_ms) {
    why = "nothing stored for " + std::to_string(now - stall_since_ms_) + " ms (stored up to " +
          std::to_string(stored) + " of " + std::to_string(last) + ")";
  }
  if (why.empty()) return;
  log_failure_reported_ = true;
  fsm_.log_cannot_be_written(why);
}

void RaftNode::Impl::process(std::vector<Op>& ops) {
  std::size_t i = 0;
  while (i < ops.size()) {
    if (ops[i].kind == Op::Kind::kPropose) {
      // The run of proposals from here, bounded: one raft_apply, one disk write.
      std::size_t end = i;
      std::size_t bytes = 0;
      while (end < ops.size() && ops[end].kind == Op::Kind::kPropose &&
             end - i < kMaxBatchEntries && bytes < kMaxBatchBytes) {
        bytes += ops[end].command.size();
        ++end;
      }
      submit_batch(ops, i, end);
      i = end;
      continue;
    }
    switch (ops[i].kind) {
      case Op::Kind::kBarrier:
        submit_barrier(ops[i]);
        break;
      case Op::Kind::kTransfer:
        submit_transfer(ops[i]);
        break;
      case Op::Kind::kAddVoter:
        submit_add_voter(ops[i]);
        break;
      case Op::Kind::kRemoveVoter:
        submit_remove_voter(ops[i]);
        break;
      case Op::Kind::kRun:
        ops[i].run();
        break;
      case Op::Kind::kPropose:
        break;
    }
    ++i;
  }
}

std::string RaftNode::Impl::not_leader_error() const {
  if (raft_state(raft()) == RAFT_LEADER) return "not leader: leadership is being transferred";
  raft_id id = 0;
  const char* address = nullptr;
  raft_leader(raft(), &id, &address);
  if (id == 0) return "not leader; no leader is known";
  return "not leader; the leader is node " + std::to_string(id) + " at " +
         (address != nullptr ? address : "?");
}

std::string RaftNode::Impl::describe(int status) const {
  switch (status) {
    case RAFT_NOTLEADER:
      return not_leader_error();
    case RAFT_LEADERSHIPLOST:
      return "leadership lost; the outcome is unknown";
    case RAFT_SHUTDOWN:
      return "raft node is stopping; the outcome is unknown";
    default: {
      std::string detail = raft_errmsg(raft());
      std::string text = raft_strerror(status);
      if (!detail.empty() && detail != text) text += " (" + detail + ")";
      return text;
    }
  }
}

void RaftNode::Impl::submit_transfer(Op& op) {
  if (!leads()) {
    if (op.bool_done) op.bool_done(false);
    return;
  }
  // The voter whose log matches ours furthest (raft's own choice, id 0, takes the first
  // up-to-date voter it finds, or else the last voter).
  raft_id target = 0;
  raft_index best = 0;
  for (unsigned i = 0; i < raft_.configuration.n; ++i) {
    const raft_server& server = raft_.configuration.servers[i];
    if (server.id == raft_.id || server.role != RAFT_VOTER) continue;
    const raft_index match = raft_.leader_state.progress[i].match_index;
    if (target == 0 || match > best) {
      target = server.id;
      best = match;
    }
  }
  TransferRequest* request = hold(std::make_unique<TransferRequest>());
  request->raft.data = request;
  request->target = target;
  request->done = std::move(op.bool_done);
  const int rc = raft_transfer(&raft_, &request->raft, target, &Impl::on_transferred);
  if (rc != 0) {
    log_("leadership transfer refused: " + describe(rc));
    release(request)->abandon("");
  }
}

void RaftNode::Impl::on_transferred(RaftTransfer* req) {
  auto* request = static_cast<TransferRequest*>(req->data);
  Impl* self = request->impl;
  std::unique_ptr<Request> owned = self->release(request);
  raft_id leader = 0;
  const char* address = nullptr;
  raft_leader(self->raft(), &leader, &address);
  const raft_id target = req->id != 0 ? req->id : request->target;
  const bool ok = leader != 0 && leader != self->raft_.id && leader == target;
  if (request->done) request->done(ok);
}

// raft has no state-change callback in 0.15: every loop turn compares. A new leader proposes a
// barrier at once: applied, it makes the leader ready (leadership_changed(true)); committed, it
// is the entry of the leader's own term without which the commit rule (net/raft_commit_rule.h)
// commits nothing of the earlier terms.
void RaftNode::Impl::track_leadership() {
  const bool leader = raft_state(&raft_) == RAFT_LEADER;
  const std::uint64_t term = raft_.current_term;
  if (leader) {
    if (leader_term_ != term) {
      leader_term_ = term;
      ready_barrier_sent_ = false;
      if (ready_) {
        ready_ = false;
        fsm_.leadership_changed(false);
      }
    }
    if (!ready_ && !ready_barrier_sent_ && raft_.transfer == nullptr) {
      BarrierRequest* request = hold(std::make_unique<BarrierRequest>());
      request->raft.data = request;
      request->term = term;
      if (raft_barrier(&raft_, &request->raft, &Impl::on_barrier) == 0) {
        ready_barrier_sent_ = true;
      } else {
        release(request);
      }
    }
    return;
  }
  if (leader_term_ == 0) return;
  // Stepped down. raft failed its own requests already; the entries of batches raft considered
  // done (their first entry applied) but not yet applied here are answered now.
  leader_term_ = 0;
  ready_barrier_sent_ = false;
  fail_pending("leadership lost; the outcome is unknown");
  if (ready_) {
    ready_ = false;
    log_("no longer leads (term " + std::to_string(term) + ")");
    fsm_.leadership_changed(false);
  }
}

void RaftNode::Impl::refresh_status() {
  raft_id leader = 0;
  const char* leader_address = nullptr;
  raft_leader(&raft_, &leader, &leader_address);
  if (raft_.configuration_index != status_config_index_ ||
      raft_.configuration_uncommitted_index != status_config_uncommitted_) {
    status_config_index_ = raft_.configuration_index;
    status_config_uncommitted_ = raft_.configuration_uncommitted_index;
    voters_.clear();
    servers_.clear();
    for (unsigned i = 0; i < raft_.configuration.n; ++i) {
      const raft_server& server = raft_.configuration.servers[i];
      if (server.role == RAFT_VOTER) voters_.push_back(server.id);
      servers_.push_back(RaftPeer{server.id, server.address != nullptr ? server.address : ""});
    }
    std::sort(voters_.begin(), voters_.end());
    std::sort(servers_.begin(), servers_.end(),
              [](const RaftPeer& a, const RaftPeer& b) { return a.id < b.id; });
    servers_changed_ = true;
    // The servers' hosts get the room the transport keeps for peers.
    std::vector<std::string> addresses;
    for (const RaftPeer& server : servers_) addresses.push_back(server.raft_address);
    transport_->learn_peers(addresses);
  }
  std::lock_guard lock(mutex_);
  status_.leader_id = leader;
  status_.term = raft_.current_term;
  status_.commit_index = raft_.commit_index;
  status_.last_index = raft_last_index(&raft_);
  status_.snapshot_index = raft_.log.snapshot.last_index;
  status_.applied_index = raft_last_applied(&raft_);
  status_.role = role_of(raft_state(&raft_));
  if (leader == 0 || leader_address == nullptr) {
    status_.leader_raft_address.clear();
  } else if (status_.leader_raft_address != leader_address) {
    status_.leader_raft_address = leader_address;
  }
  if (status_.voters != voters_) status_.voters = voters_;
  if (servers_changed_) {
    status_.servers = servers_;
    servers_changed_ = false;
  }
  status_.proposals = proposals_;
  status_.raft_apply_calls = apply_calls_;
}

}  // namespace turnstile::net
