// RaftNode (net/raft_node.h), the log's entries: proposals framed and batched into one
// raft_apply (one disk write, one fsync), barriers, and the state machine's side of raft (apply,
// which answers each proposal by its index; snapshot; restore).
#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "net/raft_node_impl.h"

namespace turnstile::net {

using raft_node_detail::fail_op;
using raft_node_detail::Op;

namespace {

// raft 0.15 sends an AppendEntries' entries back to back, unpadded, but its receiver skips to
// the next multiple of 8 bytes after each entry: an entry whose length is not a multiple of 8
// reaches the followers shifted into garbage. So every command travels framed: the command, then
// 1 to 8 bytes of padding to a multiple of 8, the last of which says how many there are.
std::size_t framed_size(std::size_t command_size) { return (command_size / 8 + 1) * 8; }

void frame(const std::string& command, unsigned char* out) {
  const std::size_t size = framed_size(command.size());
  std::memcpy(out, command.data(), command.size());
  std::memset(out + command.size(), 0, size - command.size());
  out[size - 1] = static_cast<unsigned char>(size - command.size());
}

std::optional<std::string_view> unframe(const raft_buffer& buf) {
  if (buf.len < 8 || buf.len % 8 != 0) return std::nullopt;
  const auto* bytes = static_cast<const unsigned char*>(buf.base);
  const std::size_t padding = bytes[buf.len - 1];
  if (padding < 1 || padding > 8) return std::nullopt;
  return std::string_view(static_cast<const char*>(buf.base), buf.len - padding);
}

}  // namespace

void RaftNode::Impl::submit_batch(std::vector<Op>& ops, std::size_t begin, std::size_t end) {
  std::vector<Op*> batch;
  for (std::size_t i = begin; i < end; ++i) {
    if (ops[i].command.empty()) {
      fail_op(ops[i], "empty command");
    } else {
      batch.push_back(&ops[i]);
    }
  }
  if (batch.empty()) return;
  if (!leads()) {
    const std::string error = not_leader_error();
    for (Op* op : batch) fail_op(*op, error);
    return;
  }
  // raft takes the entries' memory (raft_malloc'd) when raft_apply succeeds.
  std::vector<raft_buffer> bufs(batch.size());
  for (std::size_t k = 0; k < batch.size(); ++k) {
    const std::string& command = batch[k]->command;
    bufs[k].len = framed_size(command.size());
    bufs[k].base = raft_malloc(bufs[k].len);
    if (bufs[k].base == nullptr) {
      for (std::size_t j = 0; j < k; ++j) raft_free(bufs[j].base);
      for (Op* op : batch) fail_op(*op, "out of memory");
      return;
    }
    frame(command, static_cast<unsigned char*>(bufs[k].base));
  }
  ApplyRequest* request = hold(std::make_unique<ApplyRequest>());
  request->raft.data = request;
  request->batch = ++next_batch_;
  request->n = static_cast<unsigned>(batch.size());
  const int rc = raft_apply(&raft_, &request->raft, bufs.data(), request->n, &Impl::on_applied);
  if (rc != 0) {
    release(request);
    if (rc == RAFT_NOTLEADER) {
      for (raft_buffer& buf : bufs) raft_free(buf.base);  // refused before raft took them
    } else {
      // raft 0.15 may have freed them already (it discards what it appended): leak rather than
      // free twice. This is an out-of-memory or disk failure path.
      log_("raft_apply failed: " + describe(rc));
    }
    const std::string error = describe(rc);
    for (Op* op : batch) fail_op(*op, error);
    return;
  }
  // raft completes the request when the FIRST entry is applied; each entry is answered from
  // fsm_apply instead, by index.
  request->first = request->raft.index;
  for (std::size_t k = 0; k < batch.size(); ++k) {
    pending_.insert_or_assign(request->first + k, Pending{raft_.current_term, request->batch,
                                                          std::move(batch[k]->index_done)});
  }
  proposals_ += batch.size();
  ++apply_calls_;
}

void RaftNode::Impl::on_applied(RaftApply* req, int status, void*) {
  auto* request = static_cast<ApplyRequest*>(req->data);
  Impl* self = request->impl;
  std::unique_ptr<Request> owned = self->release(request);
  // Success needs nothing here (fsm_apply answered the first entry and answers the others as
  // they are applied). A failure answers those of the batch still waiting.
  if (status != 0) {
    self->fail_batch(request->batch, request->first, request->n, self->describe(status));
  }
}

void RaftNode::Impl::fail_batch(std::uint64_t batch, std::uint64_t first, unsigned n,
                                const std::string& error) {
  for (std::uint64_t index = first; index < first + n; ++index) {
    auto it = pending_.find(index);
    if (it == pending_.end() || it->second.batch != batch) continue;
    RaftNode::IndexDone done = std::move(it->second.done);
    pending_.erase(it);
    if (done) done(0, error);
  }
}

void RaftNode::Impl::fail_pending(const std::string& error) {
  std::map<std::uint64_t, Pending> all;
  all.swap(pending_);
  for (auto& [index, pending] : all) {
    if (pending.done) pending.done(0, error);
  }
}

void RaftNode::Impl::submit_barrier(Op& op) {
  if (!leads()) {
    fail_op(op, not_leader_error());
    return;
  }
  BarrierRequest* request = hold(std::make_unique<BarrierRequest>());
  request->raft.data = request;
  request->done = std::move(op.index_done);
  request->term = raft_.current_term;
  const int rc = raft_barrier(&raft_, &request->raft, &Impl::on_barrier);
  if (rc != 0) release(request)->abandon(describe(rc));
}

void RaftNode::Impl::on_barrier(RaftBarrier* req, int status) {
  auto* request = static_cast<BarrierRequest*>(req->data);
  Impl* self = request->impl;
  std::unique_ptr<Request> owned = self->release(request);
  if (request->done) {
    if (status == 0) {
      request->done(req->index, "");
    } else {
      request->done(0, self->describe(status));
    }
    return;
  }
  // The barrier of a new leader: once it is applied, every entry of earlier terms is too.
  if (status == 0 && self->leads() && self->raft_.current_term == request->term &&
      self->leader_term_ == request->term && !self->ready_) {
    self->ready_ = true;
    self->log_("leads in term " + std::to_string(request->term));
    self->fsm_.leadership_changed(true);
  } else if (self->leader_term_ == request->term) {
    self->ready_barrier_sent_ = false;  // still leading this term: try again next turn
  }
}

// --- the state machine's side -------------------------------------------------------------------

int RaftNode::Impl::fsm_apply(raft_fsm* fsm, const raft_buffer* buf, void** result) {
  auto* self = static_cast<Impl*>(fsm->data);
  *result = nullptr;
  // raft counts the entry as applied only after this returns.
  const std::uint64_t index = raft_last_applied(&self->raft_) + 1;
  if (const std::optional<std::string_view> command = unframe(*buf)) {
    self->fsm_.apply(index, *command);
  } else {
    // Not written by a RaftNode. Every replica holds the same bytes and skips them alike.
    self->log_("entry " + std::to_string(index) + " is not a framed command: skipped");
  }
  auto it = self->pending_.find(index);
  if (it != self->pending_.end()) {
    Pending pending = std::move(it->second);
    self->pending_.erase(it);
    // Ours only if this node still leads in the term it appended the entry in: a leader never
    // rewrites its own log, but a new leader may have replaced that index with its own entry.
    if (raft_state(&self->raft_) == RAFT_LEADER && self->raft_.current_term == pending.term) {
      if (pending.done) pending.done(index, "");
    } else if (pending.done) {
      pending.done(0, "leadership lost; the outcome is unknown");
    }
  }
  return 0;
}

int RaftNode::Impl::fsm_snapshot(raft_fsm* fsm, raft_buffer* bufs[], unsigned* n_bufs) {
  auto* self = static_cast<Impl*>(fsm->data);
  const std::string state = self->fsm_.snapshot();
  // raft frees both the array and the data (raft_free) once the snapshot is written.
  auto* array = static_cast<raft_buffer*>(raft_malloc(sizeof(raft_buffer)));
  if (array == nullptr) return RAFT_NOMEM;
  array[0].len = state.size();
  array[0].base = raft_malloc(std::max<std::size_t>(state.size(), 1));
  if (array[0].base == nullptr) {
    raft_free(array);
    return RAFT_NOMEM;
  }
  std::memcpy(array[0].base, state.data(), state.size());
  *bufs = array;
  *n_bufs = 1;
  return 0;
}

int RaftNode::Impl::fsm_restore(raft_fsm* fsm, raft_buffer* buf) {
  auto* self = static_cast<Impl*>(fsm->data);
  if (!self->fsm_.restore(std::string_view(static_cast<const char*>(buf->base), buf->len))) {
    self->restore_refused_ = true;
    self->log_("the state machine refused a snapshot of " + std::to_string(buf->len) + " bytes");
    return RAFT_MALFORMED;  // raft keeps the buffer
  }
  raft_free(buf->base);  // on success the buffer is ours to free
  return 0;
}

}  // namespace turnstile::net
