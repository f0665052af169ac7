// Time as the core sees it: values handed in by whoever drives the core, never read from a clock.
//
// Instant is a point on a monotonic timeline (nanoseconds from an arbitrary origin chosen by the
// driver); Duration is a signed span of nanoseconds. They are distinct types so that a deadline
// cannot be passed where a timeout is expected. Arithmetic saturates instead of overflowing:
// a timeout of 9223372036 s added to a late Instant pins at Instant::max(), it never wraps into
// the past.
//
// Thread affinity: plain values, safe anywhere.
#pragma once

#include <compare>
#include <cstdint>
#include <limits>

namespace turnstile::core {

namespace detail {
constexpr std::int64_t saturating_add(std::int64_t a, std::int64_t b) {
  std::int64_t result = 0;
  if (__builtin_add_overflow(a, b, &result)) {
    return b > 0 ? std::numeric_limits<std::int64_t>::max()
                 : std::numeric_limits<std::int64_t>::min();
  }
  return result;
}
constexpr std::int64_t saturating_sub(std::int64_t a, std::int64_t b) {
  std::int64_t result = 0;
  if (__builtin_sub_overflow(a, b, &result)) {
    return b < 0 ? std::numeric_limits<std::int64_t>::max()
                 : std::numeric_limits<std::int64_t>::min();
  }
  return result;
}
constexpr std::int64_t saturating_mul(std::int64_t a, std::int64_t b) {
  std::int64_t result = 0;
  if (__builtin_mul_overflow(a, b, &result)) {
    return (a < 0) != (b < 0) ? std::numeric_limits<std::int64_t>::min()
                              : std::numeric_limits<std::int64_t>::max();
  }
  return result;
}
}  // namespace detail

class Duration {
 public:
  constexpr Duration() = default;
  static constexpr Duration nanoseconds(std::int64_t ns) { return Duration(ns); }
  static constexpr Duration milliseconds(std::int64_t ms) {
    return Duration(detail::saturating_mul(ms, 1'000'000));
  }
  static constexpr Duration seconds(std::int64_t s) {
    return Duration(detail::saturating_mul(s, 1'000'000'000));
  }
  static constexpr Duration zero() { return Duration(0); }
  static constexpr Duration max() { return Duration(std::numeric_limits<std::int64_t>::max()); }

  constexpr std::int64_t ns() const { return ns_; }
  // Whole seconds, rounded toward zero.
  constexpr std::int64_t whole_seconds() const { return ns_ / 1'000'000'000; }
  constexpr double seconds_double() const { return static_cast<double>(ns_) / 1e9; }

  constexpr Duration operator+(Duration other) const {
    return Duration(detail::saturating_add(ns_, other.ns_));
  }
  constexpr Duration operator-(Duration other) const {
    return Duration(detail::saturating_sub(ns_, other.ns_));
  }
  constexpr auto operator<=>(const Duration&) const = default;

 private:
  constexpr explicit Duration(std::int64_t ns) : ns_(ns) {}
  std::int64_t ns_ = 0;
};

class Instant {
 public:
  constexpr Instant() = default;
  static constexpr Instant from_ns(std::int64_t ns) { return Instant(ns); }
  static constexpr Instant min() { return Instant(std::numeric_limits<std::int64_t>::min()); }
  static constexpr Instant max() { return Instant(std::numeric_limits<std::int64_t>::max()); }

  constexpr std::int64_t ns() const { return ns_; }

  constexpr Instant operator+(Duration d) const {
    return Instant(detail::saturating_add(ns_, d.ns()));
  }
  constexpr Instant operator-(Duration d) const {
    return Instant(detail::saturating_sub(ns_, d.ns()));
  }
  constexpr Duration operator-(Instant other) const {
    return Duration::nanoseconds(detail::saturating_sub(ns_, other.ns_));
  }
  constexpr auto operator<=>(const Instant&) const = default;

 private:
  constexpr explicit Instant(std::int64_t ns) : ns_(ns) {}
  std::int64_t ns_ = 0;
};

}  // namespace turnstile::core
