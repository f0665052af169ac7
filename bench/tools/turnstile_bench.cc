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

}  // namespace

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

namespace {

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
    const int baseline_status = run_locks(plain, baseline);
    if (baseline.is_null()) return 1;
    const int status = run_locks(options, out);
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
    const int status = run_locks(options, out);
    if (options.json && !out.is_null()) std::printf("%s\n", out.dump().c_str());
    return status;
  }
  int baseline_status = 0;
  nlohmann::json baseline;
  if (options.versus_uncontended) {
    Options uncontended = options;
    uncontended.mode = Mode::kUncontended;
    uncontended.mode_name = "uncontended";
    baseline_status = run_locks(uncontended, baseline);
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
