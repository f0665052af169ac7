// The daemon's clocks: the monotonic clock every core input is stamped with, and the wall clock
// that seeds the fence counter. The core never reads either; net/ reads them and passes them in.
#pragma once

#include <cstdint>
#include <ctime>

#include "core/time.h"

namespace turnstile::net {

inline core::Instant monotonic_now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return core::Instant::from_ns(static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 +
                                static_cast<std::int64_t>(ts.tv_nsec));
}

inline std::uint64_t wall_clock_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ULL +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

}  // namespace turnstile::net
