// RaftNode::Impl, the raft node's insides (net/raft_node.h), declared for the files that define
// them; nothing outside net/raft_node*.cc and net/raft_membership.cc, net/raft_proposals.cc
// includes it. The work is cut by job:
//   net/raft_node.cc          the owner thread: configuration check, start(), stop(), the queue
//                             of work items, and RaftNode's calls
//   net/raft_node_startup.cc  the raft thread's start-up (the directory, raft, the loop) and
//                             shutdown
//   net/raft_node_turns.cc    the raft thread's turns: the queue served, leadership tracked and
//                             transferred, the log's writes watched, the status refreshed
//   net/raft_proposals.cc     what goes into the log (batched proposals, barriers) and what comes
//                             out of it (the state machine's apply, snapshot and restore)
//   net/raft_membership.cc    membership changes: add_voter, remove_voter
//
// Thread affinity: as RaftNode's (net/raft_node.h): the members under "Shared" under mutex_, the
// raft thread's alone on that thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "net/raft_acked_file.h"
#include "net/raft_directory.h"
#include "net/raft_node.h"
#include "net/raft_transport.h"

namespace turnstile::net {

namespace raft_node_detail {

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

// Answers `op` with `error` (a kRun is dropped: there is no raft thread to run it on).
void fail_op(Op& op, const std::string& error);

}  // namespace raft_node_detail

class RaftNode::Impl {
 public:
  using Op = raft_node_detail::Op;
  using LogFn = std::function<void(const std::string&)>;
  // The request types share their names with the functions that take them.
  using RaftApply = struct raft_apply;
  using RaftBarrier = struct raft_barrier;
  using RaftChange = struct raft_change;
  using RaftTransfer = struct raft_transfer;

  Impl(RaftNodeConfig config, RaftStateMachine& fsm);
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

  // The owner thread (net/raft_node.cc).
  std::optional<std::string> check_config() const;

  // The raft thread's start-up and shutdown (net/raft_node_startup.cc).
  void run();
  std::optional<std::string> check_directory(const DirectoryState& directory);
  std::optional<std::string> open();
  // open()'s steps, in order. Each that fails has undone what was opened (fail_open()).
  std::optional<std::string> open_io();  // the loop, the transport, raft's disk and network I/O
  std::optional<std::string> init_raft();
  void configure_raft();  // the commit rule, the acknowledged index, the timeouts
  std::optional<std::string> bootstrap_raft();  // the initial configuration (config_.peers)
  void open_handles();                          // the loop's handles; then the queue is served
  std::optional<std::string> fail_open(const std::string& error, bool raft_initialized);
  std::string start_error(int rv) const;
  void finish();
  void begin_shutdown();
  static void on_raft_closed(struct raft* r);

  // The raft thread's turns (net/raft_node_turns.cc).
  static void on_async(uv_async_t* handle);
  static void on_check(uv_check_t* handle);
  void process(std::vector<Op>& ops);
  void submit_transfer(Op& op);
  static void on_transferred(RaftTransfer* req);
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

  // The log's entries: proposals and barriers in, the state machine's side out
  // (net/raft_proposals.cc).
  void submit_batch(std::vector<Op>& ops, std::size_t begin, std::size_t end);
  void submit_barrier(Op& op);
  static void on_applied(RaftApply* req, int status, void* result);
  static void on_barrier(RaftBarrier* req, int status);
  void fail_batch(std::uint64_t batch, std::uint64_t first, unsigned n, const std::string& error);
  void fail_pending(const std::string& error);
  static int fsm_apply(raft_fsm* fsm, const raft_buffer* buf, void** result);
  static int fsm_snapshot(raft_fsm* fsm, raft_buffer* bufs[], unsigned* n_bufs);
  static int fsm_restore(raft_fsm* fsm, raft_buffer* buf);

  // Membership changes (net/raft_membership.cc).
  // One membership change at a time, and only on the leader: true (and `op` answered) if not.
  bool refuse_membership_change(Op& op);
  void submit_add_voter(Op& op);
  void submit_remove_voter(Op& op);
  void start_assign(ChangeRequest* request);
  static void on_changed(RaftChange* req, int status);
  void finish_change(ChangeRequest* request, const std::string& error);

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

}  // namespace turnstile::net
