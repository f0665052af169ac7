// The lock modes' load (turnstile-bench --mode uncontended, shared, semaphore, pipelined, rwlock,
// rwlock-plain): the fence bookkeeping of every key, the connections with the replies they are
// owed, and Worker, the loop of one generator thread, which runs its connections' ops and checks
// every grant as it arrives (the fence checks of turnstile_bench.cc's header).
//
// Thread affinity: a Worker and its connections belong to its thread until run() returns; the
// KeyStates and Shared are shared by every thread, through atomics.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <queue>
#include <string>
#include <utility>
#include <vector>

#include "bench/tools/bench_options.h"
#include "bench/tools/bench_protocol.h"
#include "bench/tools/log_histogram.h"
#include "bench/tools/run_common.h"
#include "bench/tools/socket_steps.h"

namespace turnstile::bench {

// Fence bookkeeping for one key; shared by every worker using the key.
struct KeyState {
  std::atomic<std::uint64_t> max_received{0};   // largest fence any worker received
  std::atomic<std::uint64_t> last_recorded{0};  // lock modes: fence of the last recorded grant
  std::atomic<std::int64_t> holders{0};         // grants received and not yet released
  std::atomic<std::int64_t> readers{0};         // rwlock: read grants counted as holders are
  std::atomic<std::int64_t> writers{0};         // rwlock: write grants, likewise
};

// The rwlock modes' keys: every worker picks each op's key among them.
struct KeySet {
  std::vector<std::string> names;
  KeyState* states = nullptr;
};

struct Slot {
  std::string key;
  std::size_t key_index = 0;
  KeyState* state = nullptr;
  TokenText token{};
  std::uint64_t fence_floor = 0;  // max_received of the key when the acquire was sent
};

enum class Expect : std::uint8_t { kGrant, kRelease };

struct Connection {
  int fd = -1;
  int index = 0;  // worker index over all threads
  std::shared_ptr<const Protocol> protocol;
  std::string session_id;  // http: the worker's session
  std::vector<Slot> slots;
  std::string in;
  std::string out;
  std::size_t out_sent = 0;
  bool want_write = false;
  std::deque<std::pair<Expect, std::uint32_t>> expected;  // replies owed, in order
  bool holding = false;       // pipelined: the first acquire round has been answered
  bool releasing = false;     // non-pipelined: the release of the current op is in flight
  TimePoint op_start{};       // intended start of the current op or round
  TimePoint next_intended{};  // open loop: the start of the next op
  std::int64_t rounds_done = 0;
  bool active = true;
  // The rwlock modes:
  std::uint64_t random = 0;  // splitmix64 state: the worker's choices of key and kind
  bool op_write = false;     // the current op is a write
  bool hold_timer = false;   // its grant is held until a timer fires, then released
};

struct ThreadResult {
  LogHistogram histogram;
  std::uint64_t measured_ops = 0;
  TimePoint last_completion{};
  std::vector<std::pair<std::size_t, std::uint64_t>> fences;  // (key index, fence) for "unique"
  // The rwlock modes, over the measured ops:
  LogHistogram read_histogram;
  LogHistogram write_histogram;
  std::uint64_t read_grants = 0;   // rwlock: read grants received in the measured window
  std::uint64_t shared_reads = 0;  // ... of which while another reader of the key was counted
  std::int64_t max_readers = 0;    // most readers counted on one key at once (whole run)
};

// One generator thread's connections: an epoll set and a timerfd (the open loop's intended
// starts, the rwlock modes' holds) over its share of the workers.
class Worker {
 public:
  // `keys`, `read` and `write`: the rwlock modes only (the keys and the protocols of a read and
  // of a write).
  Worker(const Options& options, Shared& shared, std::vector<Connection> connections,
         const KeySet* keys = nullptr, std::shared_ptr<const Protocol> read = nullptr,
         std::shared_ptr<const Protocol> write = nullptr)
      : options_(options),
        shared_(shared),
        connections_(std::move(connections)),
        keys_(keys),
        read_protocol_(std::move(read)),
        write_protocol_(std::move(write)) {}

  std::atomic<std::uint64_t> ops_all{0};  // every completed op, warm-up included
  ThreadResult result;
  void run(TimePoint start, TimePoint warmup_end, std::optional<TimePoint> end);

  // Once every thread has left run(): a connection closed while another thread still runs would
  // hand its grants to that thread's connections (the server releases a closed connection's
  // locks), whose receipt would then find them still counted held.
  void close_connections();

 private:
  static constexpr std::uint64_t kTimerTag = UINT64_MAX;

  bool closed_loop() const { return options_.rate <= 0; }
  bool pipelined() const { return options_.mode == Mode::kPipelined; }
  bool read_write() const { return read_write_mode(options_); }
  bool rw_exclusion() const { return options_.mode == Mode::kReadWrite && !options_.no_exclusion; }

  // Starts the connection's next op now (closed loop, or open loop when already late) or at its
  // intended time.
  void schedule(Connection& connection, TimePoint now);

  void start_op(Connection& connection, TimePoint intended);

  // The rwlock modes: the op's key and whether it reads or writes, from the worker's own
  // generator (the same sequence in rwlock and rwlock-plain); its protocol follows.
  void choose_op(Connection& connection);

  // The holder count drops before the release is written: once written, the server may grant
  // the next acquirer, whose receipt must not find this grant still counted.
  void append_release(Connection& connection, std::uint32_t s);

  bool check_capacity() const { return !options_.no_exclusion; }
  bool check_order() const;
  void send_acquire(Connection& connection, std::uint32_t s);
  void flush(Connection& connection);
  void on_readable(Connection& connection);
  void on_grant(Connection& connection, std::uint32_t s, const Reply& reply);

  // rwlock: counts the grant as held by a reader or the writer of its key. Sequentially
  // consistent: of a reader and a writer counted at once, at least one sees the other.
  void count_rw_holder(const Connection& connection, const Slot& slot, std::uint64_t fence);

  // Every reply owed for the write just answered has arrived.
  void on_all_replied(Connection& connection);

  void release(Connection& connection);
  void complete_ops(Connection& connection, TimePoint now, std::size_t ops);
  void on_timer();
  void arm_timer();
  void fail(Connection& connection, const std::string& why);
  void deactivate(Connection& connection);
  static std::string first_line(const std::string& text);

  const Options& options_;
  Shared& shared_;
  std::vector<Connection> connections_;
  const KeySet* keys_;
  std::shared_ptr<const Protocol> read_protocol_;
  std::shared_ptr<const Protocol> write_protocol_;
  int epoll_fd_ = -1;
  int timer_fd_ = -1;
  std::size_t active_ = 0;
  TimePoint warmup_end_{};
  std::chrono::nanoseconds interval_{0};
  std::chrono::nanoseconds hold_{0};  // rwlock: how long a grant is held
  using Timer = std::pair<TimePoint, std::ptrdiff_t>;
  std::priority_queue<Timer, std::vector<Timer>, std::greater<>> timers_;
};

}  // namespace turnstile::bench
