// The signal modes' run (turnstile-bench --mode signal-emit, signal-fanout; run_common.h).
// signal-emit and signal-fanout are one load with different defaults: --workers signalling
// connections ("publishers") each loop `signal\n<channel>\n<payload>\n` and wait for its
// `ok <n>`, while --listeners connections, subscribed to the channel before the first signal,
// are drained by --listener-threads threads of their own (each an epoll set over its share,
// non-blocking reads, counting the `sig ` lines and keeping nothing). At the end the publishers
// stop signalling and wait for their last replies, then the listeners read until they have
// received as many frames as the replies counted deliveries (or until 1 s passes without a
// frame): the two totals must agree.
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bench/tools/bench_protocol.h"
#include "bench/tools/run_common.h"

namespace turnstile::bench {
namespace {

using std::chrono::duration_cast;
using std::chrono::nanoseconds;

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
      for (const epoll_event& event : poll_once(epoll_fd_, events)) {
        Emitter& emitter = emitters_[event.data.u64];
        if (!emitter.active) continue;
        on_ready(
            event, emitter.active, [&] { flush(emitter); }, [&] { on_readable(emitter); });
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

// A connection to the target; -1 after printing why not.
int connect_or_report(const Options& options, const LoopbackAddress& address, const char* what) {
  const int fd = connect_to(address);
  if (fd < 0) {
    std::fprintf(stderr, "turnstile-bench: connect %s to %s:%d: %s\n", what, options.host.c_str(),
                 options.port, std::strerror(errno));
  }
  return fd;
}

// Connects --listeners listeners and subscribes each to `pattern`: every one has its `ok` before
// the first signal. False, with every listener closed, after printing why not.
bool connect_listeners(const Options& options, const LoopbackAddress& address,
                       const std::string& pattern, std::vector<int>& fds) {
  const std::string listen = listen_request(pattern);
  for (int l = 0; l < options.listeners; ++l) {
    const int fd = connect_or_report(options, address, "a listener");
    if (fd < 0) {
      close_all(fds);
      return false;
    }
    std::string line;
    std::string error;
    if (!exchange_line(fd, listen, Clock::now() + std::chrono::seconds(10), line, error) ||
        line != "ok") {
      std::fprintf(stderr, "turnstile-bench: listen %s: %s\n", pattern.c_str(),
                   error.empty() ? ("answered \"" + line + "\"").c_str() : error.c_str());
      ::close(fd);
      close_all(fds);
      return false;
    }
    fds.push_back(fd);
  }
  return true;
}

// The signalling connections; false, with every connection closed, after printing why not.
bool connect_publishers(const Options& options, const LoopbackAddress& address,
                        const std::vector<int>& listener_fds, std::vector<int>& fds) {
  for (int w = 0; w < options.workers; ++w) {
    const int fd = connect_or_report(options, address, "a publisher");
    if (fd < 0) {
      close_all(listener_fds);
      close_all(fds);
      return false;
    }
    fds.push_back(fd);
  }
  return true;
}

// The publisher threads (--threads) and the listener-reading threads (--listener-threads), each
// dealt its share of the connections in turn.
struct SignalThreads {
  std::vector<std::unique_ptr<Publisher>> publishers;
  std::vector<std::unique_ptr<ListenerReader>> readers;

  std::uint64_t frames_so_far() const {
    std::uint64_t frames = 0;
    for (const auto& reader : readers) frames += reader->frames_all.load(std::memory_order_relaxed);
    return frames;
  }
  std::uint64_t signals_so_far() const {
    std::uint64_t signals = 0;
    for (const auto& publisher : publishers) {
      signals += publisher->signals_all.load(std::memory_order_relaxed);
    }
    return signals;
  }
};

SignalThreads deal(const Options& options, Shared& shared, const std::vector<int>& emitter_fds,
                   const std::vector<int>& listener_fds, const std::string& request) {
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
  SignalThreads threads;
  for (auto& emitters : per_thread) {
    threads.publishers.push_back(
        std::make_unique<Publisher>(options, shared, std::move(emitters), request));
  }
  for (auto& listeners : per_reader) {
    threads.readers.push_back(std::make_unique<ListenerReader>(shared, std::move(listeners)));
  }
  return threads;
}

// Every reply is in: the listeners read until they have as many frames as the replies
// counted, then 100 ms more (a frame too many would show), or until 1 s without a frame.
void await_frames(const SignalThreads& threads, std::uint64_t deliveries_all) {
  std::uint64_t seen = threads.frames_so_far();
  TimePoint last_progress = Clock::now();
  const TimePoint give_up = last_progress + std::chrono::seconds(10);
  while (seen < deliveries_all && Clock::now() - last_progress < std::chrono::seconds(1) &&
         Clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const std::uint64_t now_seen = threads.frames_so_far();
    if (now_seen != seen) last_progress = Clock::now();
    seen = now_seen;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
}

// Runs the readers and the publishers until the publishers are done, then the readers until
// the frames are in (await_frames). Every reply's delivery count, summed.
std::uint64_t drive(const Options& options, const RunWindow& window, const SignalThreads& threads,
                    const Shared& shared) {
  std::atomic<bool> readers_stop{false};
  std::vector<std::thread> reader_threads;
  for (const auto& reader : threads.readers) {
    reader_threads.emplace_back([&reader, window, &readers_stop] {
      reader->run(window.warmup_end, window.end, readers_stop);
    });
  }
  std::vector<std::thread> publisher_threads;
  for (const auto& publisher : threads.publishers) {
    publisher_threads.emplace_back(
        [&publisher, window] { publisher->run(window.warmup_end, window.end); });
  }
  std::uint64_t last_signals = 0;
  std::uint64_t last_frames = 0;
  Progress progress(options, [&](int second, double span_s, TimePoint now, bool show) {
    const std::uint64_t signals = threads.signals_so_far();
    const std::uint64_t frames = threads.frames_so_far();
    const double signal_rate = static_cast<double>(signals - last_signals) / span_s;
    const double frame_rate = static_cast<double>(frames - last_frames) / span_s;
    last_signals = signals;
    last_frames = frames;
    if (show) {
      std::fprintf(stderr, "turnstile-bench: %ds %s%.0f signals/s, %.0f frames/s, errors %llu\n",
                   second, now < window.warmup_end ? "(warm-up) " : "", signal_rate, frame_rate,
                   static_cast<unsigned long long>(shared.errors.load()));
    }
  });
  for (std::thread& thread : publisher_threads) thread.join();
  std::uint64_t deliveries_all = 0;
  for (const auto& publisher : threads.publishers) {
    deliveries_all += publisher->result.deliveries_all;
  }
  await_frames(threads, deliveries_all);
  readers_stop.store(true);
  for (std::thread& thread : reader_threads) thread.join();
  progress.stop();
  return deliveries_all;
}

// Every publisher's and every reader's counts together.
struct SignalTotals {
  LogHistogram histogram;
  std::uint64_t signals = 0;     // measured
  std::uint64_t deliveries = 0;  // measured
  std::uint64_t signals_all = 0;
  std::uint64_t deliveries_all = 0;
  std::uint64_t min_delivered = UINT64_MAX;
  std::uint64_t max_delivered = 0;
  std::uint64_t frames_all = 0;
  std::uint64_t frames = 0;  // measured
  std::uint64_t other_lines = 0;
  int listeners_closed = 0;
  double elapsed_s = 0;

  double per_s(std::uint64_t count) const {
    return elapsed_s > 0 ? static_cast<double>(count) / elapsed_s : 0.0;
  }
};

// The totals; reports listener lines that are not frames, and frames that do not match the
// deliveries the replies counted.
SignalTotals collect(const RunWindow& window, const SignalThreads& threads,
                     std::uint64_t deliveries_all, Shared& shared) {
  SignalTotals totals;
  totals.deliveries_all = deliveries_all;
  TimePoint last_completion = window.warmup_end;
  for (const auto& publisher : threads.publishers) {
    const PublisherResult& result = publisher->result;
    totals.histogram.add(result.histogram);
    totals.signals += result.measured_signals;
    totals.deliveries += result.measured_deliveries;
    totals.signals_all += publisher->signals_all.load();
    totals.min_delivered = std::min(totals.min_delivered, result.min_delivered);
    totals.max_delivered = std::max(totals.max_delivered, result.max_delivered);
    last_completion = std::max(last_completion, result.last_completion);
  }
  if (totals.signals_all == 0) totals.min_delivered = 0;
  for (const auto& reader : threads.readers) {
    totals.frames_all += reader->frames_all.load();
    totals.frames += reader->frames_window;
    totals.other_lines += reader->other_lines;
    totals.listeners_closed += reader->closed;
  }
  if (totals.other_lines > 0) {
    shared.report(shared.errors, "listeners received " + std::to_string(totals.other_lines) +
                                     " lines that are not `sig ` frames");
  }
  if (totals.frames_all != deliveries_all) {
    shared.report(shared.errors, "listeners received " + std::to_string(totals.frames_all) +
                                     " frames, the replies counted " +
                                     std::to_string(deliveries_all) + " deliveries");
  }
  totals.elapsed_s = measured_seconds(window, last_completion);
  return totals;
}

nlohmann::json result_json(const Options& options, const SignalTotals& totals,
                           const Shared& shared) {
  return {
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
      {"elapsed_s", totals.elapsed_s},
      {"ops", totals.signals},
      {"ops_all", totals.signals_all},
      {"ops_per_s", totals.per_s(totals.signals)},
      {"deliveries", totals.deliveries},
      {"deliveries_per_s", totals.per_s(totals.deliveries)},
      {"frames", totals.frames},
      {"frames_per_s", totals.per_s(totals.frames)},
      {"deliveries_all", totals.deliveries_all},
      {"frames_all", totals.frames_all},
      {"delivered_per_signal", {{"min", totals.min_delivered}, {"max", totals.max_delivered}}},
      {"listeners_closed", totals.listeners_closed},
      {"latency_us", latency_json(totals.histogram)},
      {"errors", shared.errors.load()},
      {"messages", shared.messages},
  };
}

void print_result(const Options& options, const SignalTotals& totals, const Shared& shared) {
  std::printf(
      "turnstile-bench %s: %d workers on %d threads, %d listeners (%s pattern) on %d threads, "
      "against %s:%d (closed loop)\n",
      options.mode_name.c_str(), options.workers, options.threads, options.listeners,
      options.wildcard ? "wildcard" : "exact", options.listener_threads, options.host.c_str(),
      options.port);
  std::printf("  %llu ops in %.3f s: %.0f ops/s (op = signal + its reply)\n",
              static_cast<unsigned long long>(totals.signals), totals.elapsed_s,
              totals.per_s(totals.signals));
  print_latency(totals.histogram);
  std::printf(
      "  deliveries %llu: %.0f/s (replies' counts, %llu..%llu per signal); frames "
      "received %llu: %.0f/s\n",
      static_cast<unsigned long long>(totals.deliveries), totals.per_s(totals.deliveries),
      static_cast<unsigned long long>(totals.min_delivered),
      static_cast<unsigned long long>(totals.max_delivered),
      static_cast<unsigned long long>(totals.frames), totals.per_s(totals.frames));
  std::printf("  whole run: replies counted %llu deliveries, listeners received %llu frames\n",
              static_cast<unsigned long long>(totals.deliveries_all),
              static_cast<unsigned long long>(totals.frames_all));
  std::printf("  errors %llu, listeners closed by the server %d\n",
              static_cast<unsigned long long>(shared.errors.load()), totals.listeners_closed);
  print_messages(shared);
}

}  // namespace

int run_signals(const Options& options, nlohmann::json& out) {
  const LoopbackAddress address = resolve_loopback(options.host, options.port);
  // Names are unique per run: no other run's listener or signal meets this one's.
  const std::string prefix = run_prefix() + options.mode_name;
  const std::string channel = prefix + ".ch";
  const std::string pattern = options.wildcard ? prefix + ".*" : channel;
  const std::string request =
      signal_request(channel, std::string(static_cast<std::size_t>(options.payload_bytes), 'x'));
  std::vector<int> listener_fds;
  std::vector<int> emitter_fds;
  if (!connect_listeners(options, address, pattern, listener_fds) ||
      !connect_publishers(options, address, listener_fds, emitter_fds)) {
    return 1;
  }
  Shared shared;
  const SignalThreads threads = deal(options, shared, emitter_fds, listener_fds, request);
  const RunWindow window = run_window(options, Clock::now());
  const std::uint64_t deliveries_all = drive(options, window, threads, shared);
  const SignalTotals totals = collect(window, threads, deliveries_all, shared);
  out = result_json(options, totals, shared);
  if (!options.json) print_result(options, totals, shared);
  return shared.errors.load() == 0 ? 0 : 1;
}

}  // namespace turnstile::bench
