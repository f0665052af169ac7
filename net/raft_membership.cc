// RaftNode (net/raft_node.h), membership changes, one at a time and on the leader only:
// add_voter adds a node as a spare and promotes it to voter once raft added it; remove_voter
// removes one, the leader itself included.
#include <memory>
#include <string>
#include <utility>

#include "net/raft_address.h"
#include "net/raft_node_impl.h"

namespace turnstile::net {

using raft_node_detail::fail_op;
using raft_node_detail::Op;

bool RaftNode::Impl::refuse_membership_change(Op& op) {
  if (membership_busy_) {
    fail_op(op, "another membership change is in progress");
    return true;
  }
  if (!leads()) {
    fail_op(op, not_leader_error());
    return true;
  }
  return false;
}

void RaftNode::Impl::submit_add_voter(Op& op) {
  if (refuse_membership_change(op)) return;
  if (op.id == 0 || !valid_configured_address(op.address)) {
    fail_op(op,
            "a new voter needs an id of at least 1 and a host:port raft address (optionally "
            "followed by @host:port, its client address)");
    return;
  }
  const raft_server* existing = nullptr;
  for (unsigned i = 0; i < raft_.configuration.n; ++i) {
    const raft_server& server = raft_.configuration.servers[i];
    if (server.id == op.id) {
      existing = &server;
    } else if (dial_address(server.address) == dial_address(op.address)) {
      // raft would dial one of the two for both: the change could never complete.
      fail_op(op, "the raft address " + std::string(dial_address(op.address)) +
                      " is taken by node " + std::to_string(server.id) +
                      ": a new voter needs an address of its own");
      return;
    }
  }
  if (existing != nullptr && op.address != existing->address) {
    fail_op(op, "node " + std::to_string(op.id) + " is already in the configuration, at " +
                    existing->address);
    return;
  }
  if (existing != nullptr && existing->role == RAFT_VOTER) {
    fail_op(op, "node " + std::to_string(op.id) + " is already a voter");
    return;
  }
  ChangeRequest* request = hold(std::make_unique<ChangeRequest>());
  request->raft.data = request;
  request->id = op.id;
  request->address = op.address;
  request->done = std::move(op.error_done);
  membership_busy_ = true;
  if (existing != nullptr) {  // a spare from an earlier attempt: promote it
    start_assign(request);
    return;
  }
  request->stage = ChangeRequest::Stage::kAdd;
  const int rc = raft_add(&raft_, &request->raft, op.id, op.address.c_str(), &Impl::on_changed);
  if (rc != 0)
    finish_change(request, "cannot add node " + std::to_string(op.id) + ": " + describe(rc));
}

void RaftNode::Impl::start_assign(ChangeRequest* request) {
  const std::string spare = "node " + std::to_string(request->id) + " is a spare";
  if (closing_) {
    finish_change(request, spare + "; raft node is stopping");
    return;
  }
  if (!leads()) {
    finish_change(request, spare + " but could not be promoted: " + not_leader_error() +
                               "; retry add_voter on the leader");
    return;
  }
  request->stage = ChangeRequest::Stage::kAssign;
  const int rc = raft_assign(&raft_, &request->raft, request->id, RAFT_VOTER, &Impl::on_changed);
  if (rc != 0) {
    finish_change(request, spare + " but could not be promoted: " + describe(rc) +
                               "; retry add_voter, or remove_voter");
  }
}

void RaftNode::Impl::on_changed(RaftChange* req, int status) {
  auto* request = static_cast<ChangeRequest*>(req->data);
  Impl* self = request->impl;
  const std::string node = "node " + std::to_string(request->id);
  switch (request->stage) {
    case ChangeRequest::Stage::kAdd:
      if (status != 0) {
        self->finish_change(request, "cannot add " + node + ": " + self->describe(status));
      } else {
        // Promote it from the end of this loop turn, outside raft's callback.
        self->deferred_.push_back([self, request] { self->start_assign(request); });
      }
      return;
    case ChangeRequest::Stage::kAssign:
      self->finish_change(request, status == 0 ? ""
                                               : node + " is a spare but its promotion failed (" +
                                                     self->describe(status) +
                                                     "); retry add_voter, or remove_voter");
      return;
    case ChangeRequest::Stage::kRemove:
      self->finish_change(
          request, status == 0 ? "" : "cannot remove " + node + ": " + self->describe(status));
      return;
  }
}

void RaftNode::Impl::finish_change(ChangeRequest* request, const std::string& error) {
  std::unique_ptr<Request> owned = release(request);
  membership_busy_ = false;
  refresh_status();  // so that the caller's status() shows the new configuration
  if (error.empty()) {
    log_(std::string(request->stage == ChangeRequest::Stage::kRemove ? "removed" : "added") +
         " voter " + std::to_string(request->id));
  }
  if (request->done) request->done(error);
}

void RaftNode::Impl::submit_remove_voter(Op& op) {
  if (refuse_membership_change(op)) return;
  bool found = false;
  for (unsigned i = 0; i < raft_.configuration.n; ++i) {
    if (raft_.configuration.servers[i].id == op.id) found = true;
  }
  if (!found) {
    fail_op(op, "node " + std::to_string(op.id) + " is not in the configuration");
    return;
  }
  ChangeRequest* request = hold(std::make_unique<ChangeRequest>());
  request->raft.data = request;
  request->stage = ChangeRequest::Stage::kRemove;
  request->id = op.id;
  request->done = std::move(op.error_done);
  membership_busy_ = true;
  const int rc = raft_remove(&raft_, &request->raft, op.id, &Impl::on_changed);
  if (rc != 0) {
    finish_change(request, "cannot remove node " + std::to_string(op.id) + ": " + describe(rc));
  }
}

}  // namespace turnstile::net
