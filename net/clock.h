// The daemon's clocks: the monotonic clock every core input is stamped with, and the wall clock
// that seeds the fence counter. The core never reads either; net/ reads them and passes them in.
#pragma once

#include <sys/time.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <ctime>

#include "core/time.h"

namespace turnstile::net {

// --test-monotonic-offset-s, in nanoseconds (0 outside tests): added to every monotonic reading,
// so that processes on one machine read different monotonic clocks, as on different machines.
// Set once by main() before any thread starts.
inline std::atomic<std::int64_t> test_monotonic_offset_ns{0};

inline core::Instant monotonic_now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return core::Instant::from_ns(static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 +
                                static_cast<std::int64_t>(ts.tv_nsec) +
                                test_monotonic_offset_ns.load(std::memory_order_relaxed));
}

inline std::uint64_t wall_clock_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ULL +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

// The wall clock shifted by `offset_s` seconds (--test-wall-clock-offset-s, 0 outside tests),
// clamped to the u64 range. |offset_s| is bounded by the config (a century), so the offset in
// nanoseconds fits an int64.
inline std::uint64_t shifted_wall_clock_ns(std::int64_t offset_s) {
  const std::uint64_t wall_ns = wall_clock_ns();
  const std::int64_t offset_ns = offset_s * 1'000'000'000;
  if (offset_ns >= 0) {
    const auto up = static_cast<std::uint64_t>(offset_ns);
    return wall_ns > UINT64_MAX - up ? UINT64_MAX : wall_ns + up;
  }
  const auto down = static_cast<std::uint64_t>(-offset_ns);
  return wall_ns < down ? 0 : wall_ns - down;
}

// A libevent timer delay, rounded up to whole microseconds (a timer must not fire before its
// deadline by the rounding); negative durations (a deadline already passed) become zero.
inline timeval to_timeval(core::Duration duration) {
  std::int64_t ns = std::max<std::int64_t>(duration.ns(), 0);
  if (ns % 1000 != 0 && ns < INT64_MAX - 1000) ns += 1000 - ns % 1000;
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
  tv.tv_usec = static_cast<suseconds_t>((ns % 1'000'000'000) / 1000);
  return tv;
}

}  // namespace turnstile::net
