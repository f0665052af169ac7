// turnstile-bench: a load generator that speaks only the wire protocol (or the HTTP API), so it
// measures any server at a loopback address (turnstiled, the do-nothing reference server,
// dflockd).
//
// Each worker is one TCP connection (with --transport http, one HTTP/1.1 keep-alive connection
// and one HTTP session, created at start-up and deleted at the end). Generator threads (--threads)
// each own an epoll set and a share of the connections, so one thread drives many connections and
// the generator is not the bottleneck. An op is one acquire plus its release.
//
// Modes:
//   uncontended  a key per worker: `l key T`, then `r key token`.
//   shared       every worker on one key: blocking `l key T`, FIFO hand-off by the server.
//   semaphore    every worker on one key: `sl key T L`, then `sr key token`.
//   pipelined    K keys per connection (--keys-per-connection): first K acquires in one write,
//                then each round writes, for every key, its release and its next acquire in one
//                write. A round completes K ops; each op's latency is the round trip of its round.
//   signal-emit  --workers connections each loop `signal\n<channel>\n<payload>\n` and wait for
//                `ok <n>`; one listener connection (--listeners), subscribed to the channel
//                first, is read by a thread of its own that counts and discards the `sig` frames.
//                An op is one signal and its reply.
//   signal-fanout  the same with --listeners 1000 and --workers 4 by default: a few publishers
//                signal as fast as the replies come back, and --listener-threads epoll threads
//                drain the listeners. Reports signals/s, deliveries/s (the replies' counts) and
//                the frames the listeners received, and checks that the two totals agree.
//                --pattern wildcard listens on `<prefix>.*` instead of the channel itself.
//                With --versus-uncontended, signal-emit first runs the uncontended mode with the
//                same workers, threads and times, and reports the ratio of their ops/s.
//   rwlock       read-write locks: every worker on --keys keys (4); each op picks a key and is a
//                read (`rl key T`, then `rr key token`) with probability --read-percent (95),
//                otherwise a write (`wl` / `wr`); the grant is held --hold-us microseconds (200)
//                before its release is written, so that readers of a key overlap. The choices
//                come from a generator per worker seeded by --seed and the worker's index, so
//                every run with the same options makes the same sequence of ops.
//   rwlock-plain the same load on plain locks: `l` / `r` for reads and writes alike.
//                With --versus-plain, rwlock first runs rwlock-plain with the same options, and
//                reports the ratio rwlock ops/s / rwlock-plain ops/s.
// Transports: tcp (the line protocol, --port) or http (the HTTP REST API, --http-port; modes
// uncontended, shared and semaphore): acquire = POST /v1/locks/{key} (or /v1/semaphores/{key}),
// release = POST .../release, on the worker's session; the same fence checks apply.
// Closed loop: every worker starts its next op when the last one completes (--workers,
// --duration or --rounds, --warmup). Open loop (--rate R): ops start at fixed intended times,
// R per second over all workers, and latency is measured from the intended start, so a stalled
// server is charged for the ops it delayed (no coordinated omission).
//
// Fence checks (token = 16 hex digits of big-endian fence, then 16 of salt):
//   causal    every grant's fence is greater than the largest fence of the same key received by
//             any worker before its acquire was sent (a grant received earlier was issued
//             earlier, so the server must have issued a larger fence since). Always.
//   capacity  a grant is counted as held from its receipt until just before its release is
//             written; more than 1 (lock) or L (semaphore) counted at once means the server
//             granted past its capacity (the server's own holder set can only be larger).
//   order     lock modes: grants of a key are recorded as they are received, before the release
//             is written; the holder being exclusive, recording order is grant order, and each
//             recorded fence must be greater than the one recorded before it.
//   unique    semaphore mode, rwlock, and with --no-exclusion: no fence is granted twice for
//             one key (checked after the run).
//   rwlock    exclusion: per key, the readers and writers counted held as for capacity; a
//             write grant that finds anyone else counted, or a read grant that finds a writer,
//             is a violation. write order: a write grant's fence must exceed every fence of its
//             key received so far (everyone before it released before the server granted it).
// --no-exclusion drops capacity, order, the rwlock exclusion and write order: for the do-nothing
// reference server, which grants every acquire at once, so several "holders" overlap and their
// replies race between threads.
// Signal modes: every reply must be `ok <n>`, every listener line a `sig ` frame, no listener may
// be closed by the server, and the listeners must receive exactly as many frames as the replies
// counted deliveries.
// Exit status: 0 when no reply was unexpected and no fence check failed; 1 otherwise; 2 on a
// usage error.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <queue>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "bench/tools/bench_options.h"
#include "bench/tools/bench_protocol.h"
#include "bench/tools/http_session.h"
#include "bench/tools/log_histogram.h"
#include "bench/tools/loopback.h"
#include "bench/tools/run_common.h"
#include "bench/tools/socket_steps.h"

namespace turnstile::bench {
namespace {

using std::chrono::duration_cast;
using std::chrono::nanoseconds;

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

// splitmix64: the next number of `state`.
std::uint64_t next_random(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

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

  void run(TimePoint start, TimePoint warmup_end, std::optional<TimePoint> end) {
    warmup_end_ = warmup_end;
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (epoll_fd_ < 0 || timer_fd_ < 0) fatal("epoll/timerfd");
    epoll_add(epoll_fd_, timer_fd_, kTimerTag);
    for (std::size_t i = 0; i < connections_.size(); ++i) {
      epoll_add(epoll_fd_, connections_[i].fd, i);
    }
    const double interval_s =
        options_.rate > 0 ? static_cast<double>(options_.workers) / options_.rate : 0;
    interval_ = duration_cast<nanoseconds>(std::chrono::duration<double>(interval_s));
    hold_ = read_write() ? duration_cast<nanoseconds>(
                               std::chrono::duration<double, std::micro>(options_.hold_us))
                         : nanoseconds(0);
    for (Connection& connection : connections_) {
      // Open loop: worker i starts at i/R seconds, then every N/R seconds.
      connection.next_intended =
          start + duration_cast<nanoseconds>(std::chrono::duration<double>(
                      options_.rate > 0 ? connection.index / options_.rate : 0.0));
      schedule(connection, start);
    }
    arm_timer();

    std::vector<epoll_event> events(256);
    active_ = connections_.size();
    while (active_ > 0 && !shared_.stop.load(std::memory_order_relaxed)) {
      if (end && Clock::now() >= *end) break;
      const int count = epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), 50);
      if (count < 0) {
        if (errno == EINTR) continue;
        fatal("epoll_wait");
      }
      for (int i = 0; i < count; ++i) {
        const epoll_event& event = events[static_cast<std::size_t>(i)];
        if (event.data.u64 == kTimerTag) {
          on_timer();
          continue;
        }
        Connection& connection = connections_[event.data.u64];
        if (!connection.active) continue;
        if (event.events & EPOLLOUT) flush(connection);
        if (connection.active && (event.events & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
          on_readable(connection);
        }
      }
    }
    ::close(timer_fd_);
    ::close(epoll_fd_);
  }

  // Once every thread has left run(): a connection closed while another thread still runs would
  // hand its grants to that thread's connections (the server releases a closed connection's
  // locks), whose receipt would then find them still counted held.
  void close_connections() {
    for (Connection& connection : connections_) {
      if (connection.fd >= 0) ::close(connection.fd);
      connection.fd = -1;
    }
  }

 private:
  static constexpr std::uint64_t kTimerTag = UINT64_MAX;

  bool closed_loop() const { return options_.rate <= 0; }
  bool pipelined() const { return options_.mode == Mode::kPipelined; }
  bool read_write() const { return read_write_mode(options_); }
  bool rw_exclusion() const { return options_.mode == Mode::kReadWrite && !options_.no_exclusion; }

  // Starts the connection's next op now (closed loop, or open loop when already late) or at its
  // intended time.
  void schedule(Connection& connection, TimePoint now) {
    if (options_.rounds > 0 && connection.rounds_done >= options_.rounds) {
      deactivate(connection);
      return;
    }
    if (closed_loop()) {
      start_op(connection, now);
      return;
    }
    if (connection.next_intended <= now) {
      start_op(connection, connection.next_intended);
    } else {
      const bool earliest = timers_.empty() || connection.next_intended < timers_.top().first;
      timers_.emplace(connection.next_intended, &connection - connections_.data());
      if (earliest) arm_timer();
    }
  }

  void start_op(Connection& connection, TimePoint intended) {
    connection.op_start = intended;
    connection.next_intended += interval_;
    if (read_write()) choose_op(connection);
    if (!pipelined() || !connection.holding) {
      for (std::uint32_t s = 0; s < connection.slots.size(); ++s) send_acquire(connection, s);
    } else {
      for (std::uint32_t s = 0; s < connection.slots.size(); ++s) {
        append_release(connection, s);
        send_acquire(connection, s);
      }
    }
    flush(connection);
  }

  // The rwlock modes: the op's key and whether it reads or writes, from the worker's own
  // generator (the same sequence in rwlock and rwlock-plain); its protocol follows.
  void choose_op(Connection& connection) {
    const std::uint64_t pick = next_random(connection.random);
    const std::uint64_t kind = next_random(connection.random);
    const auto key_index = static_cast<std::size_t>(pick % keys_->names.size());
    // 53 random bits as a fraction in [0, 1).
    const double draw = static_cast<double>(kind >> 11) * 0x1.0p-53;
    connection.op_write = draw * 100 >= options_.read_percent;
    Slot& slot = connection.slots[0];
    slot.key_index = key_index;
    slot.key = keys_->names[key_index];
    slot.state = &keys_->states[key_index];
    connection.protocol = connection.op_write ? write_protocol_ : read_protocol_;
  }

  // The holder count drops before the release is written: once written, the server may grant
  // the next acquirer, whose receipt must not find this grant still counted.
  void append_release(Connection& connection, std::uint32_t s) {
    Slot& slot = connection.slots[s];
    if (rw_exclusion()) {
      (connection.op_write ? slot.state->writers : slot.state->readers).fetch_sub(1);
    } else if (check_capacity()) {
      slot.state->holders.fetch_sub(1, std::memory_order_acq_rel);
    }
    connection.protocol->append_release(connection.out, slot.key, slot.token);
    connection.expected.emplace_back(Expect::kRelease, s);
  }

  bool check_capacity() const { return !options_.no_exclusion; }
  bool check_order() const {
    return !options_.no_exclusion && options_.mode != Mode::kSemaphore &&
           options_.mode != Mode::kReadWrite;
  }

  void send_acquire(Connection& connection, std::uint32_t s) {
    Slot& slot = connection.slots[s];
    slot.fence_floor = slot.state->max_received.load(std::memory_order_acquire);
    connection.protocol->append_acquire(connection.out, slot.key);
    connection.expected.emplace_back(Expect::kGrant, s);
  }

  void flush(Connection& connection) {
    if (const std::string error = send_pending(connection.fd, connection.out, connection.out_sent);
        !error.empty()) {
      fail(connection, error);
      return;
    }
    const bool pending = connection.out_sent < connection.out.size();
    if (!pending) {
      connection.out.clear();
      connection.out_sent = 0;
    }
    watch_writes(epoll_fd_, connection.fd,
                 static_cast<std::uint64_t>(&connection - connections_.data()), pending,
                 connection.want_write);
  }

  void on_readable(Connection& connection) {
    if (const std::string error = receive_available(connection.fd, connection.in); !error.empty()) {
      fail(connection, error);
      return;
    }
    std::size_t offset = 0;
    while (connection.active && offset < connection.in.size()) {
      if (connection.expected.empty()) {
        fail(connection, "unsolicited reply: " + first_line(connection.in.substr(offset)));
        return;
      }
      const auto [expect, s] = connection.expected.front();
      const std::string_view input = std::string_view(connection.in).substr(offset);
      Reply reply;
      const Protocol& protocol = *connection.protocol;
      const std::size_t used = expect == Expect::kGrant ? protocol.parse_grant(input, reply)
                                                        : protocol.parse_release(input, reply);
      if (used == 0) break;
      offset += used;
      connection.expected.pop_front();
      if (!reply.ok) {
        fail(connection, std::string(expect == Expect::kGrant ? "acquire" : "release") + " of " +
                             connection.slots[s].key + " answered \"" +
                             (reply.text.empty() ? std::string(reply.line) : reply.text) + "\"");
        return;
      }
      if (expect == Expect::kGrant) on_grant(connection, s, reply);
      if (connection.expected.empty()) on_all_replied(connection);
    }
    if (connection.active) connection.in.erase(0, offset);
  }

  void on_grant(Connection& connection, std::uint32_t s, const Reply& reply) {
    Slot& slot = connection.slots[s];
    slot.token = reply.token;
    KeyState& key = *slot.state;
    if (reply.fence <= slot.fence_floor) {
      shared_.report(shared_.fence_violations,
                     "fence " + std::to_string(reply.fence) + " of " + slot.key + " is not above " +
                         std::to_string(slot.fence_floor) +
                         ", a fence received before its acquire was sent");
    }
    std::uint64_t seen = key.max_received.load(std::memory_order_acquire);
    if (rw_exclusion() && connection.op_write && reply.fence <= seen) {
      shared_.report(shared_.fence_violations,
                     "write grant of " + slot.key + " has fence " + std::to_string(reply.fence) +
                         ", not above fence " + std::to_string(seen) + " received before it");
    }
    while (seen < reply.fence &&
           !key.max_received.compare_exchange_weak(seen, reply.fence, std::memory_order_acq_rel)) {
    }
    if (rw_exclusion()) {
      count_rw_holder(connection, slot, reply.fence);
    } else if (check_capacity()) {
      const std::int64_t capacity = options_.mode == Mode::kSemaphore ? options_.limit : 1;
      const std::int64_t holders = key.holders.fetch_add(1, std::memory_order_acq_rel) + 1;
      if (holders > capacity) {
        shared_.report(shared_.fence_violations,
                       "grant of " + slot.key + " (fence " + std::to_string(reply.fence) +
                           ") makes " + std::to_string(holders) + " holders at once, capacity " +
                           std::to_string(capacity));
      }
    }
    if (!check_order()) {
      result.fences.emplace_back(slot.key_index, reply.fence);
    } else {
      const std::uint64_t previous = key.last_recorded.exchange(reply.fence);
      if (reply.fence <= previous) {
        shared_.report(shared_.fence_violations, "fence " + std::to_string(reply.fence) + " of " +
                                                     slot.key + " granted after fence " +
                                                     std::to_string(previous));
      }
    }
  }

  // rwlock: counts the grant as held by a reader or the writer of its key. Sequentially
  // consistent: of a reader and a writer counted at once, at least one sees the other.
  void count_rw_holder(const Connection& connection, const Slot& slot, std::uint64_t fence) {
    KeyState& key = *slot.state;
    std::int64_t readers = 0;
    std::int64_t writers = 0;
    if (connection.op_write) {
      writers = key.writers.fetch_add(1) + 1;
      readers = key.readers.load();
    } else {
      readers = key.readers.fetch_add(1) + 1;
      writers = key.writers.load();
      if (Clock::now() >= warmup_end_) {
        ++result.read_grants;
        if (readers > 1) ++result.shared_reads;
      }
      result.max_readers = std::max(result.max_readers, readers);
    }
    if (writers > 1 || (writers == 1 && readers > 0)) {
      shared_.report(shared_.fence_violations,
                     std::string(connection.op_write ? "write" : "read") + " grant of " + slot.key +
                         " (fence " + std::to_string(fence) + ") makes " + std::to_string(writers) +
                         " writers and " + std::to_string(readers) + " readers at once");
    }
  }

  // Every reply owed for the write just answered has arrived.
  void on_all_replied(Connection& connection) {
    const TimePoint now = Clock::now();
    if (pipelined()) {
      if (!connection.holding) {
        connection.holding = true;  // the first round only acquires: no op completes
      } else {
        complete_ops(connection, now, connection.slots.size());
      }
      schedule(connection, now);
      return;
    }
    if (!connection.releasing) {
      if (hold_ > nanoseconds(0)) {
        // rwlock: the grant is held; the timer releases it.
        connection.hold_timer = true;
        const bool earliest = timers_.empty() || now + hold_ < timers_.top().first;
        timers_.emplace(now + hold_, &connection - connections_.data());
        if (earliest) arm_timer();
        return;
      }
      release(connection);
      return;
    }
    connection.releasing = false;
    complete_ops(connection, now, 1);
    schedule(connection, now);
  }

  void release(Connection& connection) {
    connection.releasing = true;
    append_release(connection, 0);
    flush(connection);
  }

  void complete_ops(Connection& connection, TimePoint now, std::size_t ops) {
    ++connection.rounds_done;
    ops_all.fetch_add(ops, std::memory_order_relaxed);
    if (now < warmup_end_) return;
    const auto latency_ns = static_cast<std::uint64_t>(
        std::max<std::int64_t>(0, duration_cast<nanoseconds>(now - connection.op_start).count()));
    for (std::size_t i = 0; i < ops; ++i) result.histogram.record(latency_ns);
    if (read_write()) {
      (connection.op_write ? result.write_histogram : result.read_histogram).record(latency_ns);
    }
    result.measured_ops += ops;
    result.last_completion = std::max(result.last_completion, now);
  }

  void on_timer() {
    std::uint64_t expirations = 0;
    [[maybe_unused]] ssize_t ignored = ::read(timer_fd_, &expirations, sizeof expirations);
    const TimePoint now = Clock::now();
    while (!timers_.empty() && timers_.top().first <= now) {
      Connection& connection = connections_[static_cast<std::size_t>(timers_.top().second)];
      const TimePoint intended = timers_.top().first;
      timers_.pop();
      if (!connection.active) continue;
      if (connection.hold_timer) {
        connection.hold_timer = false;
        release(connection);
      } else {
        start_op(connection, intended);
      }
    }
    arm_timer();
  }

  void arm_timer() {
    itimerspec spec{};
    if (!timers_.empty()) {
      const auto ns = duration_cast<nanoseconds>(timers_.top().first.time_since_epoch()).count();
      spec.it_value.tv_sec = static_cast<time_t>(ns / 1000000000);
      spec.it_value.tv_nsec = static_cast<long>(ns % 1000000000);
      if (spec.it_value.tv_sec == 0 && spec.it_value.tv_nsec == 0) spec.it_value.tv_nsec = 1;
    }
    timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &spec, nullptr);
  }

  void fail(Connection& connection, const std::string& why) {
    shared_.report(shared_.errors, "worker " + std::to_string(connection.index) + ": " + why);
    deactivate(connection);
  }

  void deactivate(Connection& connection) {
    if (!connection.active) return;
    connection.active = false;
    --active_;
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, connection.fd, nullptr);
  }

  static std::string first_line(const std::string& text) {
    return text.substr(0, std::min(text.find('\n'), std::size_t{80}));
  }

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
  nanoseconds interval_{0};
  nanoseconds hold_{0};  // rwlock: how long a grant is held
  using Timer = std::pair<TimePoint, std::ptrdiff_t>;
  std::priority_queue<Timer, std::vector<Timer>, std::greater<>> timers_;
};

double to_us(std::uint64_t ns) { return static_cast<double>(ns) / 1000.0; }

// The rwlock modes: the load's parameters and, over the measured ops, the reads and writes with
// their latencies, and how often a read grant found another reader of its key holding.
void add_read_write_result(const Options& options,
                           const std::vector<std::unique_ptr<Worker>>& workers, double elapsed_s,
                           nlohmann::json& out) {
  LogHistogram reads;
  LogHistogram writes;
  std::uint64_t read_grants = 0;
  std::uint64_t shared_reads = 0;
  std::int64_t max_readers = 0;
  for (const auto& worker : workers) {
    reads.add(worker->result.read_histogram);
    writes.add(worker->result.write_histogram);
    read_grants += worker->result.read_grants;
    shared_reads += worker->result.shared_reads;
    max_readers = std::max(max_readers, worker->result.max_readers);
  }
  const auto latency = [](const LogHistogram& histogram) {
    return nlohmann::json{{"p50", to_us(histogram.value_at_quantile(0.50))},
                          {"p99", to_us(histogram.value_at_quantile(0.99))},
                          {"max", to_us(histogram.max())}};
  };
  const auto per_s = [elapsed_s](std::uint64_t count) {
    return elapsed_s > 0 ? static_cast<double>(count) / elapsed_s : 0.0;
  };
  const bool counted = options.mode == Mode::kReadWrite && !options.no_exclusion;
  out["read_write"] = {
      {"plain_locks", options.mode == Mode::kReadWritePlain},
      {"keys", options.keys},
      {"read_percent", options.read_percent},
      {"hold_us", options.hold_us},
      {"seed", options.seed},
      {"reads", reads.count()},
      {"writes", writes.count()},
      {"reads_per_s", per_s(reads.count())},
      {"writes_per_s", per_s(writes.count())},
      {"read_latency_us", latency(reads)},
      {"write_latency_us", latency(writes)},
  };
  if (counted) {
    out["read_write"]["read_grants"] = read_grants;
    out["read_write"]["shared_read_grants"] = shared_reads;
    out["read_write"]["max_readers_at_once"] = max_readers;
  }
}

void print_read_write_result(const nlohmann::json& out) {
  const nlohmann::json& rw = out["read_write"];
  std::printf(
      "  %s: %d keys, %.4g%% reads, held %.4g us; reads %llu (%.0f/s), writes %llu (%.0f/s)\n",
      rw["plain_locks"].get<bool>() ? "plain locks (l/r for every op)" : "read-write locks",
      rw["keys"].get<int>(), rw["read_percent"].get<double>(), rw["hold_us"].get<double>(),
      static_cast<unsigned long long>(rw["reads"].get<std::uint64_t>()),
      rw["reads_per_s"].get<double>(),
      static_cast<unsigned long long>(rw["writes"].get<std::uint64_t>()),
      rw["writes_per_s"].get<double>());
  std::printf(
      "  read latency us: p50 %.1f  p99 %.1f; write latency us: p50 %.1f  p99 %.1f\n",
      rw["read_latency_us"]["p50"].get<double>(), rw["read_latency_us"]["p99"].get<double>(),
      rw["write_latency_us"]["p50"].get<double>(), rw["write_latency_us"]["p99"].get<double>());
  if (rw.contains("read_grants")) {
    const auto grants = rw["read_grants"].get<std::uint64_t>();
    const auto shared_reads = rw["shared_read_grants"].get<std::uint64_t>();
    std::printf(
        "  read grants that found another reader holding: %llu of %llu (%.1f%%); at most %lld "
        "readers of one key at once\n",
        static_cast<unsigned long long>(shared_reads), static_cast<unsigned long long>(grants),
        grants > 0 ? 100.0 * static_cast<double>(shared_reads) / static_cast<double>(grants) : 0.0,
        static_cast<long long>(rw["max_readers_at_once"].get<std::int64_t>()));
  }
}

// The lock and semaphore modes: one run, its result in `out` (printed as text unless --json).
// The exit status.
int run(const Options& options, nlohmann::json& out) {
  const LoopbackAddress address = resolve_loopback(options.host, options.port);

  // Keys are unique per run so a run never meets locks left behind by an earlier one.
  std::random_device random_device;
  const bool http = options.transport == Transport::kHttp;
  const std::string prefix = "tb-" + std::to_string(getpid()) + "-" +
                             std::to_string(random_device() % 1000000) + "-" +
                             (http ? "http-" : "") + options.mode_name + "-";
  const bool one_key = options.mode == Mode::kShared || options.mode == Mode::kSemaphore;
  const bool read_write = read_write_mode(options);
  const int keys_per_connection = options.keys_per_connection;
  const std::size_t key_count =
      one_key      ? 1
      : read_write ? static_cast<std::size_t>(options.keys)
                   : static_cast<std::size_t>(options.workers) * keys_per_connection;
  auto keys = std::make_unique<KeyState[]>(key_count);

  const std::int64_t limit = options.mode == Mode::kSemaphore ? options.limit : 0;
  const auto line_protocol = std::make_shared<const LineProtocol>(options.timeout_s, limit);
  // The rwlock modes: every op picks one of the keys; a read and a write have protocols of their
  // own (one and the same, `l` / `r`, in rwlock-plain).
  KeySet key_set;
  std::shared_ptr<const Protocol> read_protocol = line_protocol;
  std::shared_ptr<const Protocol> write_protocol = line_protocol;
  if (read_write) {
    for (std::size_t k = 0; k < key_count; ++k) key_set.names.push_back(prefix + std::to_string(k));
    key_set.states = keys.get();
    if (options.mode == Mode::kReadWrite) {
      const std::string timeout = std::to_string(options.timeout_s);
      read_protocol = std::make_shared<const LineProtocol>("rl", "rr", timeout);
      write_protocol = std::make_shared<const LineProtocol>("wl", "wr", timeout);
    }
  }
  Shared shared;
  std::vector<std::string> sessions;  // http: every worker's session, deleted at the end
  std::vector<std::vector<Connection>> per_thread(static_cast<std::size_t>(options.threads));
  for (int w = 0; w < options.workers; ++w) {
    Connection connection;
    connection.index = w;
    connection.fd = connect_to(address);
    if (connection.fd < 0) {
      std::fprintf(stderr, "turnstile-bench: connect to %s:%d: %s\n", options.host.c_str(),
                   options.port, std::strerror(errno));
      delete_sessions(sessions, options, address, shared);
      return 1;
    }
    if (http) {
      connection.session_id = create_session(connection.fd, options);
      if (connection.session_id.empty()) {
        delete_sessions(sessions, options, address, shared);
        return 1;
      }
      sessions.push_back(connection.session_id);
      connection.protocol =
          std::make_shared<const HttpProtocol>(host_header(options), connection.session_id,
                                               options.timeout_s, options.lease_ttl_s, limit);
    } else {
      connection.protocol = line_protocol;
    }
    // Worker w's choices: the seed and w, mixed; the first op draws from them (choose_op).
    connection.random = options.seed * 0x100000001b3ULL + static_cast<std::uint64_t>(w);
    for (int k = 0; k < keys_per_connection; ++k) {
      Slot slot;
      // rwlock: key 0 until the first op picks one.
      const std::size_t key_index =
          one_key || read_write
              ? 0
              : static_cast<std::size_t>(w) * static_cast<std::size_t>(keys_per_connection) +
                    static_cast<std::size_t>(k);
      slot.key_index = key_index;
      slot.key = prefix + (one_key ? std::string("shared") : std::to_string(key_index));
      slot.state = &keys[key_index];
      connection.slots.push_back(std::move(slot));
    }
    per_thread[static_cast<std::size_t>(w % options.threads)].push_back(std::move(connection));
  }

  std::vector<std::unique_ptr<Worker>> workers;
  for (auto& connections : per_thread) {
    workers.push_back(std::make_unique<Worker>(options, shared, std::move(connections), &key_set,
                                               read_protocol, write_protocol));
  }
  const auto seconds = [](double s) {
    return duration_cast<nanoseconds>(std::chrono::duration<double>(s));
  };
  const TimePoint start = Clock::now() + std::chrono::milliseconds(5);
  const TimePoint warmup_end = start + seconds(options.warmup_s);
  std::optional<TimePoint> end;
  if (options.rounds == 0) end = warmup_end + seconds(options.duration_s);
  std::vector<std::thread> threads;
  for (auto& worker : workers) {
    threads.emplace_back(
        [&worker, start, warmup_end, end] { worker->run(start, warmup_end, end); });
  }

  // Progress: a line a second once the run has lasted more than 3 seconds.
  std::atomic<bool> done{false};
  std::thread progress([&] {
    std::uint64_t last_ops = 0;
    TimePoint last = Clock::now();
    int second = 0;
    while (!done.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const TimePoint now = Clock::now();
      if (now - last < std::chrono::seconds(1)) continue;
      ++second;
      std::uint64_t ops = 0;
      for (auto& worker : workers) ops += worker->ops_all.load(std::memory_order_relaxed);
      const double rate =
          static_cast<double>(ops - last_ops) / std::chrono::duration<double>(now - last).count();
      last_ops = ops;
      last = now;
      if (options.progress && second > 3) {
        std::fprintf(stderr,
                     "turnstile-bench: %ds %s%.0f ops/s, errors %llu, fence violations %llu\n",
                     second, now < warmup_end ? "(warm-up) " : "", rate,
                     static_cast<unsigned long long>(shared.errors.load()),
                     static_cast<unsigned long long>(shared.fence_violations.load()));
      }
    }
  });
  for (std::thread& thread : threads) thread.join();
  for (auto& worker : workers) worker->close_connections();
  done.store(true);
  progress.join();
  delete_sessions(sessions, options, address, shared);

  LogHistogram histogram;
  std::uint64_t measured_ops = 0;
  std::uint64_t ops_all = 0;
  TimePoint last_completion = warmup_end;
  std::vector<std::pair<std::size_t, std::uint64_t>> fences;
  for (auto& worker : workers) {
    histogram.add(worker->result.histogram);
    measured_ops += worker->result.measured_ops;
    ops_all += worker->ops_all.load();
    last_completion = std::max(last_completion, worker->result.last_completion);
    fences.insert(fences.end(), worker->result.fences.begin(), worker->result.fences.end());
  }
  std::sort(fences.begin(), fences.end());
  const auto duplicate = std::adjacent_find(fences.begin(), fences.end());
  if (duplicate != fences.end()) {
    shared.report(shared.fence_violations,
                  "fence " + std::to_string(duplicate->second) + " granted twice for one key");
  }
  const TimePoint measured_end = end ? *end : last_completion;
  const double elapsed_s = std::chrono::duration<double>(measured_end - warmup_end).count();
  const double ops_per_s = elapsed_s > 0 ? static_cast<double>(measured_ops) / elapsed_s : 0;
  const char* checks = options.no_exclusion               ? "causal+unique"
                       : options.mode == Mode::kSemaphore ? "causal+capacity+unique"
                       : options.mode == Mode::kReadWrite ? "causal+exclusion+write-order+unique"
                                                          : "causal+capacity+order";
  const std::uint64_t errors = shared.errors.load();
  const std::uint64_t violations = shared.fence_violations.load();

  out = {
      {"mode", options.mode_name},
      {"transport", http ? "http" : "tcp"},
      {"host", options.host},
      {"port", options.port},
      {"workers", options.workers},
      {"threads", options.threads},
      {"keys_per_connection", keys_per_connection},
      {"rate", options.rate},
      {"loop", options.rate > 0 ? "open" : "closed"},
      {"warmup_s", options.warmup_s},
      {"elapsed_s", elapsed_s},
      {"ops", measured_ops},
      {"ops_all", ops_all},
      {"ops_per_s", ops_per_s},
      {"latency_us",
       {{"p50", to_us(histogram.value_at_quantile(0.50))},
        {"p90", to_us(histogram.value_at_quantile(0.90))},
        {"p99", to_us(histogram.value_at_quantile(0.99))},
        {"p999", to_us(histogram.value_at_quantile(0.999))},
        {"max", to_us(histogram.max())},
        {"mean", histogram.mean() / 1000.0}}},
      {"errors", errors},
      {"fence_violations", violations},
      {"fence_checks", checks},
      {"messages", shared.messages},
  };
  if (read_write) add_read_write_result(options, workers, elapsed_s, out);
  if (!options.json) {
    std::printf("turnstile-bench %s%s: %d workers on %d threads against %s:%d (%s loop)\n",
                http ? "http " : "", options.mode_name.c_str(), options.workers, options.threads,
                options.host.c_str(), options.port, options.rate > 0 ? "open" : "closed");
    std::printf("  %llu ops in %.3f s: %.0f ops/s (op = acquire + %srelease)\n",
                static_cast<unsigned long long>(measured_ops), elapsed_s, ops_per_s,
                read_write && options.hold_us > 0 ? "hold + " : "");
    std::printf("  latency us: p50 %.1f  p90 %.1f  p99 %.1f  p99.9 %.1f  max %.1f\n",
                to_us(histogram.value_at_quantile(0.50)), to_us(histogram.value_at_quantile(0.90)),
                to_us(histogram.value_at_quantile(0.99)), to_us(histogram.value_at_quantile(0.999)),
                to_us(histogram.max()));
    if (read_write) print_read_write_result(out);
    std::printf("  errors %llu, fence violations %llu (checks: %s)\n",
                static_cast<unsigned long long>(errors),
                static_cast<unsigned long long>(violations), checks);
    for (const std::string& message : shared.messages) std::printf("  ! %s\n", message.c_str());
  }
  return errors == 0 && violations == 0 ? 0 : 1;
}

// ---- the signal modes ---------------------------------------------------------------------------
// signal-emit and signal-fanout are one load with different defaults: --workers signalling
// connections ("publishers") each loop `signal\n<channel>\n<payload>\n` and wait for its
// `ok <n>`, while --listeners connections, subscribed to the channel before the first signal,
// are drained by --listener-threads threads of their own (each an epoll set over its share,
// non-blocking reads, counting the `sig ` lines and keeping nothing). At the end the publishers
// stop signalling and wait for their last replies, then the listeners read until they have
// received as many frames as the replies counted deliveries (or until 1 s passes without a
// frame): the two totals must agree.

// One signalling connection: one signal in flight at a time.
struct Emitter {
  int fd = -1;
  int index = 0;  // publisher index over all threads
  std::string in;
  std::size_t out_sent = 0;  // bytes of the request written; the request is sent when equal
  bool want_write = false;
  bool in_flight = false;
  TimePoint sent_at{};
  std::int64_t signals_done = 0;
  bool active = true;
};

struct PublisherResult {
  LogHistogram histogram;
  std::uint64_t measured_signals = 0;     // replies received in the measured window
  std::uint64_t measured_deliveries = 0;  // the sum of their counts
  std::uint64_t deliveries_all = 0;       // every reply's count, warm-up and drain included
  std::uint64_t min_delivered = UINT64_MAX;
  std::uint64_t max_delivered = 0;
  TimePoint last_completion{};
};

// One generator thread's publishers: an epoll set, a closed loop per connection.
class Publisher {
 public:
  Publisher(const Options& options, Shared& shared, std::vector<Emitter> emitters,
            const std::string& request)
      : options_(options), shared_(shared), emitters_(std::move(emitters)), request_(request) {}

  std::atomic<std::uint64_t> signals_all{0};  // every reply, warm-up included
  PublisherResult result;

  void run(TimePoint warmup_end, std::optional<TimePoint> end) {
    warmup_end_ = warmup_end;
    end_ = end;
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    if (epoll_fd_ < 0) fatal("epoll_create1");
    for (std::size_t i = 0; i < emitters_.size(); ++i) epoll_add(epoll_fd_, emitters_[i].fd, i);
    active_ = emitters_.size();
    TimePoint now = Clock::now();
    for (Emitter& emitter : emitters_) next(emitter, now);
    TimePoint next_check = now + kCheckEvery;
    std::vector<epoll_event> events(256);
    while (active_ > 0) {
      now = Clock::now();
      if (!stopping_ && end_ && now >= *end_) {
        // The end: no new signal; the ones in flight get until drain_deadline_ for their reply.
        stopping_ = true;
        drain_deadline_ = now + std::chrono::seconds(std::min<std::int64_t>(options_.timeout_s, 5));
        for (Emitter& emitter : emitters_) {
          if (!emitter.in_flight) deactivate(emitter);
        }
        continue;
      }
      if (now >= next_check) {
        check_stalls(now);
        next_check = now + kCheckEvery;
      }
      const int count = epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), 50);
      if (count < 0) {
        if (errno == EINTR) continue;
        fatal("epoll_wait");
      }
      for (int i = 0; i < count; ++i) {
        const epoll_event& event = events[static_cast<std::size_t>(i)];
        Emitter& emitter = emitters_[event.data.u64];
        if (!emitter.active) continue;
        if (event.events & EPOLLOUT) flush(emitter);
        if (emitter.active && (event.events & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
          on_readable(emitter);
        }
      }
    }
    for (Emitter& emitter : emitters_) {
      if (emitter.fd >= 0) ::close(emitter.fd);
      emitter.fd = -1;
    }
    ::close(epoll_fd_);
  }

 private:
  static constexpr auto kCheckEvery = std::chrono::milliseconds(100);

  // Sends the next signal, or retires the emitter when it is done.
  void next(Emitter& emitter, TimePoint now) {
    if (stopping_ || (options_.rounds > 0 && emitter.signals_done >= options_.rounds)) {
      deactivate(emitter);
      return;
    }
    emitter.in_flight = true;
    emitter.sent_at = now;
    emitter.out_sent = 0;
    flush(emitter);
  }

  void flush(Emitter& emitter) {
    if (const std::string error = send_pending(emitter.fd, request_, emitter.out_sent);
        !error.empty()) {
      fail(emitter, error);
      return;
    }
    watch_writes(epoll_fd_, emitter.fd, static_cast<std::uint64_t>(&emitter - emitters_.data()),
                 emitter.out_sent < request_.size(), emitter.want_write);
  }

  void on_readable(Emitter& emitter) {
    if (const std::string error = receive_available(emitter.fd, emitter.in); !error.empty()) {
      fail(emitter, error);
      return;
    }
    const TimePoint now = Clock::now();
    std::size_t offset = 0;
    for (;;) {
      const std::size_t newline = emitter.in.find('\n', offset);
      if (newline == std::string::npos) break;
      const std::string_view line = std::string_view(emitter.in).substr(offset, newline - offset);
      offset = newline + 1;
      const std::optional<std::uint64_t> delivered = parse_delivered(line);
      if (!emitter.in_flight || !delivered) {
        fail(emitter,
             std::string(emitter.in_flight ? "signal answered \"" : "unsolicited line \"") +
                 std::string(line.substr(0, 80)) + "\"");
        return;
      }
      complete(emitter, *delivered, now);
    }
    emitter.in.erase(0, offset);
    if (emitter.in.size() > 4096) {
      fail(emitter, "a reply line longer than 4096 bytes");
      return;
    }
    if (!emitter.in_flight) next(emitter, now);
  }

  void complete(Emitter& emitter, std::uint64_t delivered, TimePoint now) {
    emitter.in_flight = false;
    ++emitter.signals_done;
    signals_all.fetch_add(1, std::memory_order_relaxed);
    result.deliveries_all += delivered;
    result.min_delivered = std::min(result.min_delivered, delivered);
    result.max_delivered = std::max(result.max_delivered, delivered);
    if (now < warmup_end_ || (end_ && now >= *end_)) return;
    result.histogram.record(static_cast<std::uint64_t>(
        std::max<std::int64_t>(0, duration_cast<nanoseconds>(now - emitter.sent_at).count())));
    ++result.measured_signals;
    result.measured_deliveries += delivered;
    result.last_completion = std::max(result.last_completion, now);
  }

  // A signal unanswered after --timeout seconds, or after the drain deadline, fails its emitter.
  void check_stalls(TimePoint now) {
    const auto limit = std::chrono::seconds(options_.timeout_s);
    for (Emitter& emitter : emitters_) {
      if (!emitter.active || !emitter.in_flight) continue;
      if (now - emitter.sent_at > limit || (stopping_ && now >= drain_deadline_)) {
        fail(emitter,
             "no reply to a signal within " +
                 std::to_string(
                     duration_cast<std::chrono::milliseconds>(now - emitter.sent_at).count()) +
                 " ms");
      }
    }
  }

  void fail(Emitter& emitter, const std::string& why) {
    shared_.report(shared_.errors, "publisher " + std::to_string(emitter.index) + ": " + why);
    deactivate(emitter);
  }

  void deactivate(Emitter& emitter) {
    if (!emitter.active) return;
    emitter.active = false;
    --active_;
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, emitter.fd, nullptr);
  }

  const Options& options_;
  Shared& shared_;
  std::vector<Emitter> emitters_;
  const std::string& request_;
  int epoll_fd_ = -1;
  std::size_t active_ = 0;
  TimePoint warmup_end_{};
  std::optional<TimePoint> end_;
  bool stopping_ = false;
  TimePoint drain_deadline_{};
};

// One listener-reading thread: an epoll set over its share of the listeners; counts the frames
// and keeps nothing.
class ListenerReader {
 public:
  ListenerReader(Shared& shared, std::vector<std::pair<int, int>> listeners)  // (fd, index)
      : shared_(shared), listeners_(std::move(listeners)), counters_(listeners_.size()) {}

  std::atomic<std::uint64_t> frames_all{0};
  std::uint64_t frames_window = 0;  // received in [warmup_end, end); read after the join
  std::uint64_t other_lines = 0;    // read after the join
  int closed = 0;                   // listeners the server closed; read after the join

  void run(TimePoint warmup_end, std::optional<TimePoint> end, const std::atomic<bool>& stop) {
    const int epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    if (epoll_fd < 0) fatal("epoll_create1");
    for (std::size_t i = 0; i < listeners_.size(); ++i) epoll_add(epoll_fd, listeners_[i].first, i);
    std::vector<char> buffer(1 << 16);
    std::vector<epoll_event> events(512);
    while (!stop.load(std::memory_order_relaxed)) {
      const int count = epoll_wait(epoll_fd, events.data(), static_cast<int>(events.size()), 50);
      if (count < 0 && errno != EINTR) fatal("epoll_wait");
      std::uint64_t frames = 0;
      for (int i = 0; i < count; ++i) {
        const std::size_t at = events[static_cast<std::size_t>(i)].data.u64;
        frames += drain(at, buffer, epoll_fd);
      }
      if (frames == 0) continue;
      frames_all.fetch_add(frames, std::memory_order_relaxed);
      const TimePoint now = Clock::now();
      if (now >= warmup_end && (!end || now < *end)) frames_window += frames;
    }
    for (std::size_t i = 0; i < listeners_.size(); ++i) {
      other_lines += counters_[i].others;
      if (listeners_[i].first >= 0) ::close(listeners_[i].first);
      listeners_[i].first = -1;
    }
    ::close(epoll_fd);
  }

 private:
  // Reads listener `at` until the socket is empty; the frames it completed.
  std::uint64_t drain(std::size_t at, std::vector<char>& buffer, int epoll_fd) {
    auto& [fd, index] = listeners_[at];
    if (fd < 0) return 0;
    FrameCounter& counter = counters_[at];
    const std::uint64_t before = counter.frames;
    for (;;) {
      const ssize_t got = ::recv(fd, buffer.data(), buffer.size(), 0);
      if (got > 0) {
        counter.feed(buffer.data(), static_cast<std::size_t>(got));
        if (static_cast<std::size_t>(got) < buffer.size()) break;
        continue;
      }
      if (got < 0 && errno == EINTR) continue;
      if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      ++closed;
      shared_.report(shared_.errors,
                     "listener " + std::to_string(index) + ": " +
                         (got == 0 ? std::string("the server closed the connection (too slow a "
                                                 "consumer for --signal-queue?)")
                                   : std::string("recv: ") + std::strerror(errno)));
      epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
      ::close(fd);
      fd = -1;
      break;
    }
    return counter.frames - before;
  }

  Shared& shared_;
  std::vector<std::pair<int, int>> listeners_;
  std::vector<FrameCounter> counters_;
};

// Sends `request` whole on the non-blocking `fd` and reads one reply line (without its newline),
// before `deadline`; false with `error` set when that fails.
bool exchange_line(int fd, const std::string& request, TimePoint deadline, std::string& line,
                   std::string& error) {
  std::size_t sent = 0;
  line.clear();
  for (;;) {
    const bool sending = sent < request.size();
    char byte = 0;
    const ssize_t n = sending
                          ? ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL)
                          : ::recv(fd, &byte, 1, 0);  // one byte: nothing after the line is taken
    if (n > 0 && sending) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n > 0) {
      if (byte == '\n') {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        return true;
      }
      if (line.size() < 200) line += byte;
      continue;
    }
    error = n == 0 ? "server closed the connection"
                   : await_ready(fd, sending, deadline, "no reply within 10 s");
    if (!error.empty()) return false;
  }
}

void close_all(const std::vector<int>& fds) {
  for (const int fd : fds) ::close(fd);
}

// A signal mode: one run, its result in `out` (printed as text unless --json). The exit status.
int run_signals(const Options& options, nlohmann::json& out) {
  const LoopbackAddress address = resolve_loopback(options.host, options.port);
  // Names are unique per run: no other run's listener or signal meets this one's.
  std::random_device random_device;
  const std::string prefix = "tb-" + std::to_string(getpid()) + "-" +
                             std::to_string(random_device() % 1000000) + "-" + options.mode_name;
  const std::string channel = prefix + ".ch";
  const std::string pattern = options.wildcard ? prefix + ".*" : channel;
  const std::string request =
      signal_request(channel, std::string(static_cast<std::size_t>(options.payload_bytes), 'x'));

  // Listeners first: every one has its `ok` before the first signal.
  std::vector<int> listener_fds;
  std::vector<int> emitter_fds;
  const auto connect_or_fail = [&](const char* what) {
    const int fd = connect_to(address);
    if (fd < 0) {
      std::fprintf(stderr, "turnstile-bench: connect %s to %s:%d: %s\n", what, options.host.c_str(),
                   options.port, std::strerror(errno));
    }
    return fd;
  };
  const std::string listen = listen_request(pattern);
  for (int l = 0; l < options.listeners; ++l) {
    const int fd = connect_or_fail("a listener");
    std::string line;
    std::string error;
    if (fd >= 0 &&
        (!exchange_line(fd, listen, Clock::now() + std::chrono::seconds(10), line, error) ||
         line != "ok")) {
      std::fprintf(stderr, "turnstile-bench: listen %s: %s\n", pattern.c_str(),
                   error.empty() ? ("answered \"" + line + "\"").c_str() : error.c_str());
      ::close(fd);
      close_all(listener_fds);
      return 1;
    }
    if (fd < 0) {
      close_all(listener_fds);
      return 1;
    }
    listener_fds.push_back(fd);
  }
  for (int w = 0; w < options.workers; ++w) {
    const int fd = connect_or_fail("a publisher");
    if (fd < 0) {
      close_all(listener_fds);
      close_all(emitter_fds);
      return 1;
    }
    emitter_fds.push_back(fd);
  }

  Shared shared;
  std::vector<std::vector<Emitter>> per_thread(static_cast<std::size_t>(options.threads));
  for (int w = 0; w < options.workers; ++w) {
    Emitter emitter;
    emitter.fd = emitter_fds[static_cast<std::size_t>(w)];
    emitter.index = w;
    per_thread[static_cast<std::size_t>(w % options.threads)].push_back(std::move(emitter));
  }
  std::vector<std::vector<std::pair<int, int>>> per_reader(
      static_cast<std::size_t>(options.listener_threads));
  for (int l = 0; l < options.listeners; ++l) {
    per_reader[static_cast<std::size_t>(l % options.listener_threads)].emplace_back(
        listener_fds[static_cast<std::size_t>(l)], l);
  }
  std::vector<std::unique_ptr<Publisher>> publishers;
  for (auto& emitters : per_thread) {
    publishers.push_back(
        std::make_unique<Publisher>(options, shared, std::move(emitters), request));
  }
  std::vector<std::unique_ptr<ListenerReader>> readers;
  for (auto& listeners : per_reader) {
    readers.push_back(std::make_unique<ListenerReader>(shared, std::move(listeners)));
  }

  const auto seconds = [](double s) {
    return duration_cast<nanoseconds>(std::chrono::duration<double>(s));
  };
  const TimePoint start = Clock::now();
  const TimePoint warmup_end = start + seconds(options.warmup_s);
  std::optional<TimePoint> end;
  if (options.rounds == 0) end = warmup_end + seconds(options.duration_s);
  std::atomic<bool> readers_stop{false};
  std::vector<std::thread> reader_threads;
  for (auto& reader : readers) {
    reader_threads.emplace_back(
        [&reader, warmup_end, end, &readers_stop] { reader->run(warmup_end, end, readers_stop); });
  }
  std::vector<std::thread> publisher_threads;
  for (auto& publisher : publishers) {
    publisher_threads.emplace_back(
        [&publisher, warmup_end, end] { publisher->run(warmup_end, end); });
  }
  const auto frames_so_far = [&readers] {
    std::uint64_t frames = 0;
    for (auto& reader : readers) frames += reader->frames_all.load(std::memory_order_relaxed);
    return frames;
  };

  // Progress: a line a second once the run has lasted more than 3 seconds.
  std::atomic<bool> done{false};
  std::thread progress([&] {
    std::uint64_t last_signals = 0;
    std::uint64_t last_frames = 0;
    TimePoint last = Clock::now();
    int second = 0;
    while (!done.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const TimePoint now = Clock::now();
      if (now - last < std::chrono::seconds(1)) continue;
      ++second;
      std::uint64_t signals = 0;
      for (auto& publisher : publishers) {
        signals += publisher->signals_all.load(std::memory_order_relaxed);
      }
      const std::uint64_t frames = frames_so_far();
      const double span = std::chrono::duration<double>(now - last).count();
      const double signal_rate = static_cast<double>(signals - last_signals) / span;
      const double frame_rate = static_cast<double>(frames - last_frames) / span;
      last_signals = signals;
      last_frames = frames;
      last = now;
      if (options.progress && second > 3) {
        std::fprintf(stderr, "turnstile-bench: %ds %s%.0f signals/s, %.0f frames/s, errors %llu\n",
                     second, now < warmup_end ? "(warm-up) " : "", signal_rate, frame_rate,
                     static_cast<unsigned long long>(shared.errors.load()));
      }
    }
  });
  for (std::thread& thread : publisher_threads) thread.join();

  // Every reply is in: the listeners read until they have as many frames as the replies
  // counted, then 100 ms more (a frame too many would show), or until 1 s without a frame.
  std::uint64_t deliveries_all = 0;
  for (auto& publisher : publishers) deliveries_all += publisher->result.deliveries_all;
  {
    std::uint64_t seen = frames_so_far();
    TimePoint last_progress = Clock::now();
    const TimePoint give_up = last_progress + std::chrono::seconds(10);
    while (seen < deliveries_all && Clock::now() - last_progress < std::chrono::seconds(1) &&
           Clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      const std::uint64_t now_seen = frames_so_far();
      if (now_seen != seen) last_progress = Clock::now();
      seen = now_seen;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  readers_stop.store(true);
  for (std::thread& thread : reader_threads) thread.join();
  done.store(true);
  progress.join();

  LogHistogram histogram;
  std::uint64_t signals = 0;
  std::uint64_t deliveries = 0;
  std::uint64_t signals_all = 0;
  std::uint64_t min_delivered = UINT64_MAX;
  std::uint64_t max_delivered = 0;
  TimePoint last_completion = warmup_end;
  for (auto& publisher : publishers) {
    const PublisherResult& result = publisher->result;
    histogram.add(result.histogram);
    signals += result.measured_signals;
    deliveries += result.measured_deliveries;
    signals_all += publisher->signals_all.load();
    min_delivered = std::min(min_delivered, result.min_delivered);
    max_delivered = std::max(max_delivered, result.max_delivered);
    last_completion = std::max(last_completion, result.last_completion);
  }
  if (signals_all == 0) min_delivered = 0;
  std::uint64_t frames_all = 0;
  std::uint64_t frames = 0;
  std::uint64_t other_lines = 0;
  int listeners_closed = 0;
  for (auto& reader : readers) {
    frames_all += reader->frames_all.load();
    frames += reader->frames_window;
    other_lines += reader->other_lines;
    listeners_closed += reader->closed;
  }
  if (other_lines > 0) {
    shared.report(shared.errors, "listeners received " + std::to_string(other_lines) +
                                     " lines that are not `sig ` frames");
  }
  if (frames_all != deliveries_all) {
    shared.report(shared.errors, "listeners received " + std::to_string(frames_all) +
                                     " frames, the replies counted " +
                                     std::to_string(deliveries_all) + " deliveries");
  }
  const TimePoint measured_end = end ? *end : last_completion;
  const double elapsed_s = std::chrono::duration<double>(measured_end - warmup_end).count();
  const auto per_s = [elapsed_s](std::uint64_t count) {
    return elapsed_s > 0 ? static_cast<double>(count) / elapsed_s : 0.0;
  };
  const std::uint64_t errors = shared.errors.load();
  out = {
      {"mode", options.mode_name},
      {"transport", "tcp"},
      {"host", options.host},
      {"port", options.port},
      {"workers", options.workers},
      {"threads", options.threads},
      {"listeners", options.listeners},
      {"listener_threads", options.listener_threads},
      {"pattern", options.wildcard ? "wildcard" : "exact"},
      {"payload_bytes", options.payload_bytes},
      {"loop", "closed"},
      {"warmup_s", options.warmup_s},
      {"elapsed_s", elapsed_s},
      {"ops", signals},
      {"ops_all", signals_all},
      {"ops_per_s", per_s(signals)},
      {"deliveries", deliveries},
      {"deliveries_per_s", per_s(deliveries)},
      {"frames", frames},
      {"frames_per_s", per_s(frames)},
      {"deliveries_all", deliveries_all},
      {"frames_all", frames_all},
      {"delivered_per_signal", {{"min", min_delivered}, {"max", max_delivered}}},
      {"listeners_closed", listeners_closed},
      {"latency_us",
       {{"p50", to_us(histogram.value_at_quantile(0.50))},
        {"p90", to_us(histogram.value_at_quantile(0.90))},
        {"p99", to_us(histogram.value_at_quantile(0.99))},
        {"p999", to_us(histogram.value_at_quantile(0.999))},
        {"max", to_us(histogram.max())},
        {"mean", histogram.mean() / 1000.0}}},
      {"errors", errors},
      {"messages", shared.messages},
  };
  if (!options.json) {
    std::printf(
        "turnstile-bench %s: %d workers on %d threads, %d listeners (%s pattern) on %d threads, "
        "against %s:%d (closed loop)\n",
        options.mode_name.c_str(), options.workers, options.threads, options.listeners,
        options.wildcard ? "wildcard" : "exact", options.listener_threads, options.host.c_str(),
        options.port);
    std::printf("  %llu ops in %.3f s: %.0f ops/s (op = signal + its reply)\n",
                static_cast<unsigned long long>(signals), elapsed_s, per_s(signals));
    std::printf("  latency us: p50 %.1f  p90 %.1f  p99 %.1f  p99.9 %.1f  max %.1f\n",
                to_us(histogram.value_at_quantile(0.50)), to_us(histogram.value_at_quantile(0.90)),
                to_us(histogram.value_at_quantile(0.99)), to_us(histogram.value_at_quantile(0.999)),
                to_us(histogram.max()));
    std::printf(
        "  deliveries %llu: %.0f/s (replies' counts, %llu..%llu per signal); frames "
        "received %llu: %.0f/s\n",
        static_cast<unsigned long long>(deliveries), per_s(deliveries),
        static_cast<unsigned long long>(min_delivered),
        static_cast<unsigned long long>(max_delivered), static_cast<unsigned long long>(frames),
        per_s(frames));
    std::printf("  whole run: replies counted %llu deliveries, listeners received %llu frames\n",
                static_cast<unsigned long long>(deliveries_all),
                static_cast<unsigned long long>(frames_all));
    std::printf("  errors %llu, listeners closed by the server %d\n",
                static_cast<unsigned long long>(errors), listeners_closed);
    for (const std::string& message : shared.messages) std::printf("  ! %s\n", message.c_str());
  }
  return errors == 0 ? 0 : 1;
}

int main_of(const Options& options) {
  // Every connection is a descriptor, and the signal modes add their listeners.
  raise_descriptor_limit(static_cast<std::uint64_t>(options.workers) +
                         static_cast<std::uint64_t>(signal_mode(options) ? options.listeners : 0) +
                         64);
  nlohmann::json out;
  if (options.versus_plain) {
    // The same load on plain locks first (the same seed: the same ops), then on rw locks.
    Options plain = options;
    plain.mode = Mode::kReadWritePlain;
    plain.mode_name = "rwlock-plain";
    nlohmann::json baseline;
    const int baseline_status = run(plain, baseline);
    if (baseline.is_null()) return 1;
    const int status = run(options, out);
    if (out.is_null()) return 1;
    const double base = baseline["ops_per_s"].get<double>();
    const double ratio = base > 0 ? out["ops_per_s"].get<double>() / base : 0.0;
    out["versus_plain"] = {{"ratio", ratio}, {"plain", baseline}};
    if (options.json) {
      std::printf("%s\n", out.dump().c_str());
    } else {
      std::printf("  rwlock ops/s / rwlock-plain ops/s: %.3f (%.0f / %.0f)\n", ratio,
                  out["ops_per_s"].get<double>(), base);
    }
    return status == 0 && baseline_status == 0 ? 0 : 1;
  }
  if (!signal_mode(options)) {
    const int status = run(options, out);
    if (options.json && !out.is_null()) std::printf("%s\n", out.dump().c_str());
    return status;
  }
  int baseline_status = 0;
  nlohmann::json baseline;
  if (options.versus_uncontended) {
    Options uncontended = options;
    uncontended.mode = Mode::kUncontended;
    uncontended.mode_name = "uncontended";
    baseline_status = run(uncontended, baseline);
    if (baseline.is_null()) return 1;
  }
  const int status = run_signals(options, out);
  if (options.versus_uncontended && !out.is_null()) {
    const double base = baseline["ops_per_s"].get<double>();
    const double ratio = base > 0 ? out["ops_per_s"].get<double>() / base : 0.0;
    out["versus_uncontended"] = {{"ratio", ratio}, {"uncontended", baseline}};
    if (!options.json) {
      std::printf("  %s ops/s / uncontended ops/s: %.3f (%.0f / %.0f)\n", options.mode_name.c_str(),
                  ratio, out["ops_per_s"].get<double>(), base);
    }
  }
  if (options.json && !out.is_null()) std::printf("%s\n", out.dump().c_str());
  return status == 0 && baseline_status == 0 ? 0 : 1;
}

}  // namespace
}  // namespace turnstile::bench

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  const turnstile::bench::Options options = turnstile::bench::parse_options(argc, argv);
  return turnstile::bench::main_of(options);
}
