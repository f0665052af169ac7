// What turnstile-bench's two loads share (run_common.h).
#include "bench/tools/run_common.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <utility>

namespace turnstile::bench {

RunWindow run_window(const Options& options, TimePoint start) {
  const auto seconds = [](double s) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(s));
  };
  RunWindow window{start, start + seconds(options.warmup_s), std::nullopt};
  if (options.rounds == 0) window.end = window.warmup_end + seconds(options.duration_s);
  return window;
}

double measured_seconds(const RunWindow& window, TimePoint last_completion) {
  const TimePoint measured_end = window.end ? *window.end : last_completion;
  return std::chrono::duration<double>(measured_end - window.warmup_end).count();
}

std::string run_prefix() {
  std::random_device random_device;
  return "tb-" + std::to_string(getpid()) + "-" + std::to_string(random_device() % 1000000) + "-";
}

Progress::Progress(const Options& options, Tick tick)
    : thread_([this, show = options.progress, tick = std::move(tick)] {
        TimePoint last = Clock::now();
        int second = 0;
        while (!done_.load()) {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          const TimePoint now = Clock::now();
          if (now - last < std::chrono::seconds(1)) continue;
          ++second;
          const double span_s = std::chrono::duration<double>(now - last).count();
          last = now;
          tick(second, span_s, now, show && second > 3);
        }
      }) {}

void Progress::stop() {
  done_.store(true);
  if (thread_.joinable()) thread_.join();
}

double to_us(std::uint64_t ns) { return static_cast<double>(ns) / 1000.0; }

nlohmann::json latency_json(const LogHistogram& histogram) {
  return {{"p50", to_us(histogram.value_at_quantile(0.50))},
          {"p90", to_us(histogram.value_at_quantile(0.90))},
          {"p99", to_us(histogram.value_at_quantile(0.99))},
          {"p999", to_us(histogram.value_at_quantile(0.999))},
          {"max", to_us(histogram.max())},
          {"mean", histogram.mean() / 1000.0}};
}

void print_latency(const LogHistogram& histogram) {
  std::printf("  latency us: p50 %.1f  p90 %.1f  p99 %.1f  p99.9 %.1f  max %.1f\n",
              to_us(histogram.value_at_quantile(0.50)), to_us(histogram.value_at_quantile(0.90)),
              to_us(histogram.value_at_quantile(0.99)), to_us(histogram.value_at_quantile(0.999)),
              to_us(histogram.max()));
}

void print_messages(const Shared& shared) {
  for (const std::string& message : shared.messages) std::printf("  ! %s\n", message.c_str());
}

}  // namespace turnstile::bench
