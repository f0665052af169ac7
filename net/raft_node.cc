// RaftNode (net/raft_node.h), the owner thread's side: the configuration's check, start() and
// stop(), the queue of work items the raft thread serves, and RaftNode's calls, each of which
// queues one. The raft thread's side is in the files net/raft_node_impl.h names.
#include "net/raft_node.h"

#include <unistd.h>

#include <chrono>
#include <future>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include "net/raft_address.h"
#include "net/raft_node_impl.h"

namespace turnstile::net {

using raft_node_detail::fail_op;
using raft_node_detail::Op;

void raft_node_detail::fail_op(Op& op, const std::string& error) {
  switch (op.kind) {
    case Op::Kind::kPropose:
    case Op::Kind::kBarrier:
      if (op.index_done) op.index_done(0, error);
      break;
    case Op::Kind::kTransfer:
      if (op.bool_done) op.bool_done(false);
      break;
    case Op::Kind::kAddVoter:
    case Op::Kind::kRemoveVoter:
      if (op.error_done) op.error_done(error);
      break;
    case Op::Kind::kRun:
      break;  // the node is not running: there is no raft thread to run it on
  }
}

// ---------------------------------------------------------------------------------------------

RaftNode::Impl::Impl(RaftNodeConfig config, RaftStateMachine& fsm)
    : config_(std::move(config)), fsm_(fsm) {
  if (config_.log) {
    log_ = [log = config_.log](const std::string& line) { log(line); };
  } else {
    log_ = [id = config_.id](const std::string& line) {
      const std::string out = "raft node " + std::to_string(id) + ": " + line + "\n";
      const ssize_t written = ::write(2, out.data(), out.size());
      (void)written;
    };
  }
  status_.id = config_.id;
}

std::optional<std::string> RaftNode::Impl::check_config() const {
  if (config_.id == 0) return "raft node id must be at least 1";
  if (!split_host_port(config_.raft_address)) {
    return "raft address '" + config_.raft_address + "' is not host:port";
  }
  if (config_.raft_address.size() > kRaftAddressMax) return "raft address is too long";
  if (!config_.bind_address.empty() && !split_host_port(config_.bind_address)) {
    return "raft bind address '" + config_.bind_address + "' is not host:port";
  }
  if (config_.dir.empty()) return "raft data directory not given";
  if (config_.heartbeat_timeout_ms == 0 ||
      config_.heartbeat_timeout_ms >= config_.election_timeout_ms) {
    return "the raft heartbeat timeout must be positive and shorter than the election timeout";
  }
  if (config_.snapshot_threshold == 0) return "the raft snapshot threshold must be positive";
  if (config_.handshake_timeout_ms == 0) return "the raft handshake timeout must be positive";
  if (config_.bootstrap) {
    std::set<std::uint64_t> ids;
    bool self = false;
    for (const RaftPeer& peer : config_.peers) {
      if (peer.id == 0 || !ids.insert(peer.id).second) {
        return "raft peers: ids must be unique and at least 1";
      }
      if (!valid_configured_address(peer.raft_address)) {
        return "raft peer " + std::to_string(peer.id) + ": address '" + peer.raft_address +
               "' is not host:port (optionally followed by @host:port)";
      }
      if (peer.id == config_.id) {
        if (dial_address(peer.raft_address) != config_.raft_address) {
          return "raft peers: this node's address differs from its raft address";
        }
        self = true;
      }
    }
    if (!self) return "raft peers: the initial voters must include this node";
  }
  return std::nullopt;
}

std::optional<std::string> RaftNode::Impl::start() {
  if (started_) return "this raft node was already started (a node runs once)";
  if (std::optional<std::string> error = check_config()) return error;
  if (const std::optional<std::uint64_t> free = free_bytes_below_minimum()) {
    return "only " + std::to_string(*free >> 20) + " MiB free in the raft directory " +
           config_.dir + ", below the " + std::to_string(config_.min_free_bytes >> 20) +
           " MiB it needs (--raft-min-free-mb): free some space first";
  }
  started_ = true;
  std::future<std::optional<std::string>> opened = opened_.get_future();
  thread_ = std::thread([this] { run(); });
  if (opened.wait_for(std::chrono::milliseconds(config_.start_timeout_ms)) !=
      std::future_status::ready) {
    stuck_.store(true);
    thread_.detach();
    return "raft directory " + config_.dir + " did not finish loading in " +
           std::to_string(config_.start_timeout_ms / 1000) +
           " s (--raft-start-timeout-s): the disk hangs, or a file in it cannot be read to its end";
  }
  std::optional<std::string> result = opened.get();
  if (result) thread_.join();
  return result;
}

void RaftNode::Impl::stop() {
  if (stuck_.load()) return;  // nothing answers on the raft thread
  {
    std::lock_guard lock(mutex_);
    stop_requested_ = true;
    if (accepting_) uv_async_send(&async_);
  }
  if (std::this_thread::get_id() == raft_thread_.load()) return;  // the owner's stop() joins
  if (thread_.joinable()) thread_.join();
}

void RaftNode::Impl::enqueue(Op op) {
  {
    std::lock_guard lock(mutex_);
    if (accepting_) {
      queue_.push_back(std::move(op));
      uv_async_send(&async_);
      return;
    }
  }
  fail_op(op, "raft node is not running");
}

// --- RaftNode ---------------------------------------------------------------------------------

RaftNode::RaftNode(RaftNodeConfig config, RaftStateMachine& fsm)
    : impl_(std::make_unique<Impl>(std::move(config), fsm)) {}

RaftNode::~RaftNode() {
  if (impl_->stuck()) (void)impl_.release();  // the raft thread still uses it
}

std::optional<std::string> RaftNode::start() { return impl_->start(); }

bool RaftNode::directory_damaged() const { return impl_->damaged(); }

bool RaftNode::stuck() const { return impl_->stuck(); }

void RaftNode::stop() { impl_->stop(); }

RaftStatus RaftNode::status() const { return impl_->status(); }

void RaftNode::propose(std::string command, IndexDone done) {
  Op op;
  op.kind = Op::Kind::kPropose;
  op.command = std::move(command);
  op.index_done = std::move(done);
  impl_->enqueue(std::move(op));
}

void RaftNode::barrier(IndexDone done) {
  Op op;
  op.kind = Op::Kind::kBarrier;
  op.index_done = std::move(done);
  impl_->enqueue(std::move(op));
}

void RaftNode::transfer_leadership(std::function<void(bool ok)> done) {
  Op op;
  op.kind = Op::Kind::kTransfer;
  op.bool_done = std::move(done);
  impl_->enqueue(std::move(op));
}

void RaftNode::add_voter(std::uint64_t id, std::string raft_address, ErrorDone done) {
  Op op;
  op.kind = Op::Kind::kAddVoter;
  op.id = id;
  op.address = std::move(raft_address);
  op.error_done = std::move(done);
  impl_->enqueue(std::move(op));
}

void RaftNode::run(std::function<void()> fn) {
  Op op;
  op.kind = Op::Kind::kRun;
  op.run = std::move(fn);
  impl_->enqueue(std::move(op));
}

void RaftNode::wake_after(std::uint64_t delay_ms, std::function<void()> fn) {
  impl_->wake_after(delay_ms, std::move(fn));
}

void RaftNode::remove_voter(std::uint64_t id, ErrorDone done) {
  Op op;
  op.kind = Op::Kind::kRemoveVoter;
  op.id = id;
  op.error_done = std::move(done);
  impl_->enqueue(std::move(op));
}

}  // namespace turnstile::net
