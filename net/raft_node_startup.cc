// RaftNode (net/raft_node.h), the raft thread's start-up and shutdown: the data directory checked
// before libraft reads a byte of it (net/raft_directory.h), raft opened on it with our transport,
// commit rule and acknowledged-index record, bootstrapped when asked and empty, and the loop's
// handles opened; at the end, raft closed and everything it never answered failed.
#include <string>
#include <utility>
#include <variant>

#include "net/raft_acked_record.h"
#include "net/raft_commit_rule.h"
#include "net/raft_node_impl.h"

namespace turnstile::net {

using raft_node_detail::fail_op;
using raft_node_detail::Op;

namespace {

std::string uv_error(int code) { return uv_strerror(code); }

}  // namespace

// The one message for a directory that does not load, from what raft says.
static std::string damaged_directory(const std::string& dir, std::string detail, int rv) {
  if (detail.empty()) detail = raft_strerror(rv);
  return damaged_directory(dir, detail);
}

void RaftNode::Impl::run() {
  raft_thread_.store(std::this_thread::get_id());
  std::optional<std::string> error = open();
  opened_.set_value(error);
  if (error) return;
  uv_run(&loop_, UV_RUN_DEFAULT);
  finish();
}

std::string RaftNode::Impl::start_error(int rv) const {
  const std::string& dir = config_.dir;
  std::string detail = raft_errmsg(raft());
  if (detail.empty()) detail = raft_strerror(rv);
  if (!transport_->listen_error().empty()) return transport_->listen_error();
  if (restore_refused_) {
    return "raft directory " + dir +
           ": the state machine refused its newest snapshot (a snapshot from another version?): "
           "restore the directory from a backup, or remove this node from the cluster and re-add "
           "it with an empty directory";
  }
  // raft reports a damaged file as RAFT_CORRUPT (so does the acknowledged-index check of its
  // load), or as RAFT_IOERR when it is cut short ("short read"): the code does not tell damage
  // from an unreadable disk, raft's message does.
  if (rv == RAFT_CORRUPT) damaged_.store(true);
  return damaged_directory(dir, detail, rv);
}

// Everything libraft would read, checked before it reads a byte (net/raft_directory.h): a node
// whose directory is damaged, or whose log ends below what it acknowledged, does not start.
std::optional<std::string> RaftNode::Impl::check_directory(const DirectoryState& directory) {
  const auto refuse = [this](const std::string& detail) {
    damaged_.store(true);
    return damaged_directory(config_.dir, detail);
  };
  if (directory.log && !directory.metadata) {
    // raft would delete both as torn writes and start from term 0 with no vote: the node could
    // vote twice in a term.
    return refuse("metadata1 and metadata2 are both missing or damaged, but the log is not");
  }
  std::variant<core::SlotRecovery, std::string> record = AckedFile::read(config_.dir);
  if (auto* error = std::get_if<std::string>(&record)) return *error;
  recovery_ = std::get<core::SlotRecovery>(record);
  if (recovery_.outcome == core::SlotRecovery::Outcome::kRefused) {
    return refuse(std::string(kAckedFileName) + ": " + recovery_.problem);
  }
  std::optional<core::LogPosition> acknowledged;
  if (recovery_.outcome == core::SlotRecovery::Outcome::kRecovered) {
    acknowledged = core::AckedIndex(recovery_).durable();
  }
  if (directory.empty || (!directory.log && !acknowledged)) return std::nullopt;
  const LogCheck check = check_log_files(config_.dir, acknowledged);
  if (check.refusal) return refuse(*check.refusal);
  for (const std::string& note : check.notes) log_(config_.dir + ": " + note);
  return std::nullopt;
}

std::optional<std::string> RaftNode::Impl::open() {
  std::string error;
  const std::optional<DirectoryState> directory = inspect_directory(config_.dir, &error);
  if (!directory) return error;
  if (std::optional<std::string> refusal = check_directory(*directory)) return refusal;
  // Only a directory with nothing in it gets the initial configuration.
  const bool bootstrap = config_.bootstrap && directory->empty;

  if (std::optional<std::string> failure = open_io()) return failure;
  if (std::optional<std::string> failure = init_raft()) return failure;
  configure_raft();
  if (bootstrap) {
    if (std::optional<std::string> failure = bootstrap_raft()) return failure;
  }
  const int rc = raft_start(&raft_);
  if (rc != 0) return fail_open(start_error(rc), true);
  open_handles();
  return std::nullopt;
}

std::optional<std::string> RaftNode::Impl::open_io() {
  int rc = uv_loop_init(&loop_);
  if (rc != 0) return "cannot create the raft event loop: " + uv_error(rc);
  transport_ = std::make_unique<RaftTransport>(&loop_, config_.secret, config_.bind_address,
                                               config_.handshake_timeout_ms, log_);
  rc = raft_uv_init(&io_, &loop_, config_.dir.c_str(), transport_->raft());
  if (rc != 0) {
    return fail_open(
        "raft directory " + config_.dir + ": " + io_.errmsg + " (" + raft_strerror(rc) + ")",
        false);
  }
  // Never "recover" a damaged log by dropping its tail: those entries may be committed.
  raft_uv_set_auto_recovery(&io_, false);
  // check_log_files() holds open segments to the size raft gives them.
  raft_uv_set_segment_size(&io_, kRaftSegmentBytes);
  raft_uv_set_connect_retry_delay(&io_, config_.connect_retry_ms);
  return std::nullopt;
}

std::optional<std::string> RaftNode::Impl::init_raft() {
  raft_fsm_.version = 1;
  raft_fsm_.data = this;
  raft_fsm_.apply = &Impl::fsm_apply;
  raft_fsm_.snapshot = &Impl::fsm_snapshot;
  raft_fsm_.restore = &Impl::fsm_restore;
  const int rc = raft_init(&raft_, &io_, &raft_fsm_, config_.id, config_.raft_address.c_str());
  if (rc != 0) {
    std::string detail = raft_errmsg(&raft_);
    if (detail.empty()) detail = io_.errmsg;
    raft_uv_close(&io_);
    if (rc == RAFT_NOTFOUND || rc == RAFT_INVALID || rc == RAFT_NAMETOOLONG) {  // no such dir
      return fail_open("raft directory " + config_.dir + ": " + detail, false);
    }
    return fail_open(damaged_directory(config_.dir, detail, rc), false);
  }
  raft_.data = this;
  return std::nullopt;
}

void RaftNode::Impl::configure_raft() {
  // libraft 0.15 commits an entry of an earlier term by counting replicas alone (Raft's Figure 8);
  // the rule puts Raft's own back. It needs every new leader to commit an entry of its term at
  // once, which the barrier of track_leadership() is.
  install_commit_rule(&raft_);
  // Nothing is reported stored before the record of it is durable (net/raft_acked_record.h).
  acked_index_ = std::make_unique<core::AckedIndex>(recovery_);
  acked_file_ = std::make_unique<AckedFile>(&loop_, config_.dir, log_);
  install_acked_record(&raft_, acked_index_.get(), acked_file_.get());
  raft_set_election_timeout(&raft_, config_.election_timeout_ms);
  raft_set_heartbeat_timeout(&raft_, config_.heartbeat_timeout_ms);
  raft_set_snapshot_threshold(&raft_, config_.snapshot_threshold);
  raft_set_snapshot_trailing(&raft_, config_.snapshot_trailing);
  raft_set_pre_vote(&raft_, config_.pre_vote);
}

std::optional<std::string> RaftNode::Impl::bootstrap_raft() {
  raft_configuration configuration;
  raft_configuration_init(&configuration);
  int rc = 0;
  for (const RaftPeer& peer : config_.peers) {
    rc = raft_configuration_add(&configuration, peer.id, peer.raft_address.c_str(), RAFT_VOTER);
    if (rc != 0) break;
  }
  if (rc == 0) rc = raft_bootstrap(&raft_, &configuration);
  raft_configuration_close(&configuration);
  if (rc != 0) {
    return fail_open("cannot bootstrap raft directory " + config_.dir + ": " + raft_errmsg(&raft_) +
                         " (" + raft_strerror(rc) + ")",
                     true);
  }
  return std::nullopt;
}

void RaftNode::Impl::open_handles() {
  uv_async_init(&loop_, &async_, &Impl::on_async);
  async_.data = this;
  uv_check_init(&loop_, &check_);
  check_.data = this;
  uv_check_start(&check_, &Impl::on_check);
  uv_timer_init(&loop_, &wake_timer_);
  wake_timer_.data = this;
  refresh_status();
  std::lock_guard lock(mutex_);
  accepting_ = true;
  if (stop_requested_) uv_async_send(&async_);
}

// Undo a failed open(): close what was opened and run the loop until it is all closed.
std::optional<std::string> RaftNode::Impl::fail_open(const std::string& error,
                                                     bool raft_initialized) {
  if (raft_initialized) {
    raft_close(&raft_, &Impl::on_raft_closed);
    uv_run(&loop_, UV_RUN_DEFAULT);
    raft_uv_close(&io_);
  } else {
    transport_->close_unused();
    uv_run(&loop_, UV_RUN_DEFAULT);
  }
  acked_file_.reset();
  transport_.reset();
  uv_loop_close(&loop_);
  return error;
}

void RaftNode::Impl::begin_shutdown() {
  if (closing_) return;
  closing_ = true;
  std::vector<Op> rest;
  {
    std::lock_guard lock(mutex_);
    accepting_ = false;
    rest.swap(queue_);
  }
  for (Op& op : rest) fail_op(op, "raft node is stopping");
  uv_close(reinterpret_cast<uv_handle_t*>(&async_), nullptr);
  uv_check_stop(&check_);
  uv_close(reinterpret_cast<uv_handle_t*>(&check_), nullptr);
  uv_timer_stop(&wake_timer_);
  uv_close(reinterpret_cast<uv_handle_t*>(&wake_timer_), nullptr);
  wake_fn_ = nullptr;
  if (ready_) {
    ready_ = false;
    fsm_.leadership_changed(false);
  }
  raft_close(&raft_, &Impl::on_raft_closed);
}

void RaftNode::Impl::on_raft_closed(struct raft* r) {
  auto* self = static_cast<Impl*>(r->data);
  self->raft_closed_ = true;
}

// After the loop ended: everything raft never answered gets its error, then the loop goes.
void RaftNode::Impl::finish() {
  if (!raft_closed_) log_("the raft loop ended before raft closed");
  fail_pending("raft node stopped; the outcome is unknown");
  while (!requests_.empty()) {
    std::unique_ptr<Request> request = std::move(requests_.begin()->second);
    requests_.erase(requests_.begin());
    request->abandon("raft node stopped");
  }
  deferred_.clear();
  raft_uv_close(&io_);
  acked_file_.reset();
  transport_.reset();
  if (uv_loop_close(&loop_) != 0) log_("raft loop closed with handles still open");
  std::lock_guard lock(mutex_);
  status_.role = core::RaftRole::kUnavailable;
  status_.leader_id = 0;
  status_.leader_raft_address.clear();
}

}  // namespace turnstile::net
