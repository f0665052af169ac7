#include "net/raft_node.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <utility>
#include <variant>

#include "net/raft_acked_file.h"
#include "net/raft_acked_record.h"
#include "net/raft_commit_rule.h"
#include "net/raft_directory.h"
#include "net/raft_transport.h"

namespace turnstile::net {

namespace {

// The request types share their names with the functions that take them.
using RaftApply = struct raft_apply;
using RaftBarrier = struct raft_barrier;
using RaftChange = struct raft_change;
using RaftTransfer = struct raft_transfer;

using LogFn = std::function<void(const std::string&)>;

std::string uv_error(int code) { return uv_strerror(code); }

// --- the node's work items --------------------------------------------------------------------

// Several proposals in one raft_apply: bounded, so that one disk write stays reasonable.
constexpr std::size_t kMaxBatchEntries = 1024;
constexpr std::size_t kMaxBatchBytes = 4 << 20;

struct Op {
  enum class Kind { kPropose, kBarrier, kTransfer, kAddVoter, kRemoveVoter, kRun };
  Kind kind = Kind::kPropose;
  std::string command;                  // kPropose
  std::uint64_t id = 0;                 // kAddVoter, kRemoveVoter
  std::string address;                  // kAddVoter
  RaftNode::IndexDone index_done;       // kPropose, kBarrier
  std::function<void(bool)> bool_done;  // kTransfer
  RaftNode::ErrorDone error_done;       // kAddVoter, kRemoveVoter
  std::function<void()> run;            // kRun
};

void fail_op(Op& op, const std::string& error) {
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

// ---------------------------------------------------------------------------------------------

class RaftNode::Impl {
 public:
  Impl(RaftNodeConfig config, RaftStateMachine& fsm) : config_(std::move(config)), fsm_(fsm) {
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
  ~Impl() { stop(); }

  std::optional<std::string> start();
  void stop();
  void enqueue(Op op);
  // On the raft thread: `fn` runs once after `delay_ms`, replacing what was set before.
  void wake_after(std::uint64_t delay_ms, std::function<void()> fn) {
    if (closing_) return;
    wake_fn_ = std::move(fn);
    uv_timer_start(&wake_timer_, &Impl::on_wake, delay_ms, 0);
  }
  static void on_wake(uv_timer_t* timer) {
    auto* self = static_cast<Impl*>(timer->data);
    std::function<void()> fn = std::move(self->wake_fn_);
    self->wake_fn_ = nullptr;
    if (fn) fn();
  }
  RaftStatus status() const {
    std::lock_guard lock(mutex_);
    return status_;
  }
  bool damaged() const { return damaged_.load(); }
  bool stuck() const { return stuck_.load(); }

 private:
  // A request raft holds (its callback frees it), or one of ours between two raft calls.
  struct Request {
    Impl* impl = nullptr;
    virtual ~Request() = default;
    // raft is closed and never called back: give the caller its answer.
    virtual void abandon(const std::string& error) = 0;
  };
  struct ApplyRequest final : Request {
    RaftApply raft{};
    std::uint64_t batch = 0;
    std::uint64_t first = 0;
    unsigned n = 0;
    void abandon(const std::string& error) override { impl->fail_batch(batch, first, n, error); }
  };
  struct BarrierRequest final : Request {
    RaftBarrier raft{};
    RaftNode::IndexDone done;  // empty: the barrier that makes a new leader ready
    std::uint64_t term = 0;
    void abandon(const std::string& error) override {
      if (done) done(0, error);
    }
  };
  struct ChangeRequest final : Request {
    enum class Stage { kAdd, kAssign, kRemove };
    RaftChange raft{};
    Stage stage = Stage::kAdd;
    std::uint64_t id = 0;
    std::string address;
    RaftNode::ErrorDone done;
    void abandon(const std::string& error) override {
      impl->membership_busy_ = false;
      if (done) done(error);
    }
  };
  struct TransferRequest final : Request {
    RaftTransfer raft{};
    std::uint64_t target = 0;
    std::function<void(bool)> done;
    void abandon(const std::string&) override {
      if (done) done(false);
    }
  };
  // A proposal whose entry is in the log, waiting to be applied.
  struct Pending {
    std::uint64_t term = 0;
    std::uint64_t batch = 0;
    RaftNode::IndexDone done;
  };

  template <typename R>
  R* hold(std::unique_ptr<R> request) {
    R* raw = request.get();
    raw->impl = this;
    requests_.emplace(raw, std::move(request));
    return raw;
  }
  std::unique_ptr<Request> release(Request* request) {
    auto it = requests_.find(request);
    if (it == requests_.end()) return nullptr;
    std::unique_ptr<Request> owned = std::move(it->second);
    requests_.erase(it);
    return owned;
  }

  std::optional<std::string> check_config() const;
  void run();
  std::optional<std::string> check_directory(const DirectoryState& directory);
  std::optional<std::string> open();
  std::optional<std::string> fail_open(const std::string& error, bool raft_initialized);
  std::string start_error(int rv) const;
  void finish();

  // The raft thread's turns.
  static void on_async(uv_async_t* handle);
  static void on_check(uv_check_t* handle);
  void process(std::vector<Op>& ops);
  void submit_batch(std::vector<Op>& ops, std::size_t begin, std::size_t end);
  void submit_barrier(Op& op);
  void submit_transfer(Op& op);
  // One membership change at a time, and only on the leader: true (and `op` answered) if not.
  bool refuse_membership_change(Op& op);
  void submit_add_voter(Op& op);
  void submit_remove_voter(Op& op);
  void start_assign(ChangeRequest* request);
  void finish_change(ChangeRequest* request, const std::string& error);
  void begin_shutdown();
  void refresh_status();
  void track_leadership();
  // On every loop turn: reports a log that cannot be written much longer (a full disk, or one
  // that stores nothing: RaftNodeConfig::min_free_bytes and log_write_stall_ms).
  void watch_log_writes();
  // The free bytes in the directory when they are below RaftNodeConfig::min_free_bytes.
  std::optional<std::uint64_t> free_bytes_below_minimum() const;

  bool leads() const { return raft_state(raft()) == RAFT_LEADER && raft_.transfer == nullptr; }
  struct raft* raft() const {
    return const_cast<struct raft*>(&raft_);
  }
  std::string not_leader_error() const;
  std::string describe(int status) const;
  void fail_batch(std::uint64_t batch, std::uint64_t first, unsigned n, const std::string& error);
  void fail_pending(const std::string& error);

  // raft's callbacks.
  static int fsm_apply(raft_fsm* fsm, const raft_buffer* buf, void** result);
  static int fsm_snapshot(raft_fsm* fsm, raft_buffer* bufs[], unsigned* n_bufs);
  static int fsm_restore(raft_fsm* fsm, raft_buffer* buf);
  static void on_applied(RaftApply* req, int status, void* result);
  static void on_barrier(RaftBarrier* req, int status);
  static void on_changed(RaftChange* req, int status);
  static void on_transferred(RaftTransfer* req);
  static void on_raft_closed(struct raft* r);

  const RaftNodeConfig config_;
  RaftStateMachine& fsm_;
  LogFn log_;

  // Owner thread.
  bool started_ = false;
  std::thread thread_;
  std::promise<std::optional<std::string>> opened_;

  // Shared, under mutex_.
  mutable std::mutex mutex_;
  std::vector<Op> queue_;
  bool accepting_ = false;  // the async handle is open: queue_ is served
  bool stop_requested_ = false;
  RaftStatus status_;

  std::atomic<std::thread::id> raft_thread_{};  // set by the raft thread, read by stop()
  mutable std::atomic<bool> damaged_{false};    // set before open() answers start()
  std::atomic<bool> stuck_{false};              // start() gave up waiting for open()

  // The raft thread's.
  uv_loop_t loop_{};
  uv_async_t async_{};
  uv_timer_t wake_timer_{};  // wake_after()
  std::function<void()> wake_fn_;
  uv_check_t check_{};
  std::unique_ptr<RaftTransport> transport_;
  raft_io io_{};
  raft_fsm raft_fsm_{};
  struct raft raft_ {};
  bool closing_ = false;
  bool raft_closed_ = false;
  bool restore_refused_ = false;
  core::SlotRecovery recovery_;  // what check_directory() read of the acknowledged-index file
  std::unique_ptr<core::AckedIndex> acked_index_;
  std::unique_ptr<AckedFile> acked_file_;
  std::unordered_map<Request*, std::unique_ptr<Request>> requests_;
  std::map<std::uint64_t, Pending> pending_;  // by raft index
  std::uint64_t next_batch_ = 0;
  std::uint64_t proposals_ = 0;
  std::uint64_t apply_calls_ = 0;
  bool membership_busy_ = false;
  std::vector<std::function<void()>> deferred_;  // run at the end of this loop turn
  std::uint64_t leader_term_ = 0;                // the term this node leads in, 0: not leading
  bool ready_ = false;  // leadership_changed(true) was said for leader_term_
  bool ready_barrier_sent_ = false;
  // watch_log_writes(): the stored index last seen to move, and since when (loop time, ms); when
  // the free space is looked at next.
  static constexpr std::uint64_t kSpaceCheckMs = 200;
  std::uint64_t stall_stored_ = 0;
  std::uint64_t stall_since_ms_ = 0;
  std::uint64_t last_turn_ms_ = 0;  // the loop time of the previous turn
  std::uint64_t next_space_check_ms_ = 0;
  bool log_failure_reported_ = false;
  raft_index status_config_index_ = ~raft_index{0};
  raft_index status_config_uncommitted_ = ~raft_index{0};
  std::vector<std::uint64_t> voters_;
  std::vector<RaftPeer> servers_;  // the configuration's servers, by id
  bool servers_changed_ = false;   // servers_ not yet copied to status_
};

// --- owner thread ---------------------------------------------------------------------------

// The one message for a directory that does not load, from what raft says.
static std::string damaged_directory(const std::string& dir, std::string detail, int rv) {
  if (detail.empty()) detail = raft_strerror(rv);
  return damaged_directory(dir, detail);
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
      const std::size_t at = peer.raft_address.find('@');
      if (!split_host_port(dial_address(peer.raft_address)) ||
          (at != std::string::npos && !split_host_port(peer.raft_address.substr(at + 1)))) {
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

// --- the raft thread: start-up and shutdown -----------------------------------------------------

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

  raft_fsm_.version = 1;
  raft_fsm_.data = this;
  raft_fsm_.apply = &Impl::fsm_apply;
  raft_fsm_.snapshot = &Impl::fsm_snapshot;
  raft_fsm_.restore = &Impl::fsm_restore;
  rc = raft_init(&raft_, &io_, &raft_fsm_, config_.id, config_.raft_address.c_str());
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

  if (bootstrap) {
    raft_configuration configuration;
    raft_configuration_init(&configuration);
    for (const RaftPeer& peer : config_.peers) {
      rc = raft_configuration_add(&configuration, peer.id, peer.raft_address.c_str(), RAFT_VOTER);
      if (rc != 0) break;
    }
    if (rc == 0) rc = raft_bootstrap(&raft_, &configuration);
    raft_configuration_close(&configuration);
    if (rc != 0) {
      return fail_open("cannot bootstrap raft directory " + config_.dir + ": " +
                           raft_errmsg(&raft_) + " (" + raft_strerror(rc) + ")",
                       true);
    }
  }
  rc = raft_start(&raft_);
  if (rc != 0) return fail_open(start_error(rc), true);

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
  return std::nullopt;
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

// --- the raft thread: turns -------------------------------------------------------------------

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
  const std::size_t at = op.address.find('@');
  if (op.id == 0 || !split_host_port(dial_address(op.address)) ||
      (at != std::string::npos && !split_host_port(op.address.substr(at + 1)))) {
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
