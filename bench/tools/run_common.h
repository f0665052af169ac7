// What turnstile-bench's two loads (the lock modes in lock_run.cc, the signal modes in
// signal_run.cc) share: the counters and first problems every thread reports to, the run's
// timeline, the names unique to a run, the progress line, and the parts of the report both
// print. The two loads' entry points are declared at the end.
//
// Thread affinity: one Shared per run, written by every thread through report(); the rest is
// used by the thread that runs the load.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/tools/bench_options.h"
#include "bench/tools/log_histogram.h"
#include "bench/tools/socket_steps.h"

namespace turnstile::bench {

// Counters and first messages shared by all threads.
struct Shared {
  std::atomic<std::uint64_t> errors{0};
  std::atomic<std::uint64_t> fence_violations{0};
  std::mutex messages_mutex;
  std::vector<std::string> messages;  // the first kMessagesMax problems, for the report
  static constexpr std::size_t kMessagesMax = 10;

  void report(std::atomic<std::uint64_t>& counter, const std::string& message) {
    counter.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard lock(messages_mutex);
    if (messages.size() < kMessagesMax) messages.push_back(message);
  }
};

// A run's timeline: ops completed before warmup_end are not measured; without an end (--rounds)
// the run lasts until every worker has done its rounds.
struct RunWindow {
  TimePoint start;
  TimePoint warmup_end;
  std::optional<TimePoint> end;
};

// The window of a run starting at `start`: --warmup, then --duration unless --rounds.
RunWindow run_window(const Options& options, TimePoint start);

// The measured seconds: from the warm-up's end to the end, or with --rounds to the last
// completion.
double measured_seconds(const RunWindow& window, TimePoint last_completion);

// "tb-<pid>-<random>-": names start with it, so a run never meets the keys, listeners or
// signals of another.
std::string run_prefix();

// A progress line a second, once the run has lasted more than 3 seconds, from a thread of its own
// until stop(). tick(second, span_s, now, show) is called every second: it takes its counters'
// rates over the last span_s seconds and prints its line when `show` (not with --no-progress).
class Progress {
 public:
  using Tick = std::function<void(int second, double span_s, TimePoint now, bool show)>;
  Progress(const Options& options, Tick tick);
  ~Progress() { stop(); }
  void stop();

 private:
  std::atomic<bool> done_{false};
  std::thread thread_;
};

double to_us(std::uint64_t ns);

// {"p50","p90","p99","p999","max","mean"} of `histogram` (nanoseconds) in microseconds.
nlohmann::json latency_json(const LogHistogram& histogram);

// The text report's "  latency us: p50 ..." line.
void print_latency(const LogHistogram& histogram);

// The text report's last lines: every problem kept.
void print_messages(const Shared& shared);

// The lock modes (lock_run.cc) and the signal modes (signal_run.cc): one run, its result in `out`
// (printed as text unless --json; null when the run could not start). The exit status.
int run_locks(const Options& options, nlohmann::json& out);
int run_signals(const Options& options, nlohmann::json& out);

}  // namespace turnstile::bench
