// LogHistogram: a log-bucketed latency histogram in the style of HdrHistogram.
//
// Values are non-negative integers (turnstile-bench records nanoseconds). Values below
// 2 * kSubBuckets are counted exactly; above that every power-of-two range [2^e, 2^(e+1)) is cut
// into kSubBuckets equal buckets, so a reported percentile is off from the true sample by less
// than 1 / kSubBuckets of it (0.4% with 256). Values at or above 2^kMaxExponent land in the last
// bucket; the exact maximum is kept separately.
//
// Thread affinity: none; one histogram per thread, merged with add() after the run.
// Invariant: total_count_ == sum of counts_.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <vector>

namespace turnstile::bench {

class LogHistogram {
 public:
  static constexpr int kSubBucketBits = 8;
  static constexpr std::uint64_t kSubBuckets = std::uint64_t{1} << kSubBucketBits;
  static constexpr int kMaxExponent = 44;  // 2^44 ns is about 4.9 hours
  static constexpr std::size_t kBucketCount =
      2 * kSubBuckets + (kMaxExponent - kSubBucketBits - 1) * kSubBuckets;

  LogHistogram() : counts_(kBucketCount, 0) {}

  void record(std::uint64_t value) {
    ++counts_[index_of(value)];
    ++total_count_;
    max_ = std::max(max_, value);
    min_ = std::min(min_, value);
    sum_ += static_cast<double>(value);
  }

  void add(const LogHistogram& other) {
    for (std::size_t i = 0; i < kBucketCount; ++i) counts_[i] += other.counts_[i];
    total_count_ += other.total_count_;
    max_ = std::max(max_, other.max_);
    min_ = std::min(min_, other.min_);
    sum_ += other.sum_;
  }

  std::uint64_t count() const { return total_count_; }
  std::uint64_t max() const { return total_count_ == 0 ? 0 : max_; }
  std::uint64_t min() const { return total_count_ == 0 ? 0 : min_; }
  double mean() const { return total_count_ == 0 ? 0.0 : sum_ / static_cast<double>(total_count_); }

  // The value at quantile q (0..1): the midpoint of the bucket holding the ceil(q * count)-th
  // smallest sample, clamped to the exact min and max.
  std::uint64_t value_at_quantile(double q) const {
    if (total_count_ == 0) return 0;
    q = std::clamp(q, 0.0, 1.0);
    auto rank = static_cast<std::uint64_t>(q * static_cast<double>(total_count_) + 0.5);
    rank = std::clamp<std::uint64_t>(rank, 1, total_count_);
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < kBucketCount; ++i) {
      seen += counts_[i];
      if (seen >= rank) return std::clamp(midpoint_of(i), min(), max());
    }
    return max();
  }

  static std::size_t index_of(std::uint64_t value) {
    if (value < 2 * kSubBuckets) return static_cast<std::size_t>(value);
    const int exponent = static_cast<int>(std::bit_width(value)) - 1;  // >= kSubBucketBits + 1
    if (exponent >= kMaxExponent) return kBucketCount - 1;
    const int shift = exponent - kSubBucketBits;
    const std::uint64_t sub = (value >> shift) - kSubBuckets;  // 0 .. kSubBuckets-1
    return static_cast<std::size_t>(
        2 * kSubBuckets + static_cast<std::uint64_t>(exponent - kSubBucketBits - 1) * kSubBuckets +
        sub);
  }

  // The smallest value that maps to bucket `index` and the bucket's width.
  static std::uint64_t lowest_of(std::size_t index) {
    if (index < 2 * kSubBuckets) return index;
    const std::uint64_t rest = index - 2 * kSubBuckets;
    const int exponent = static_cast<int>(rest / kSubBuckets) + kSubBucketBits + 1;
    const int shift = exponent - kSubBucketBits;
    return (kSubBuckets + rest % kSubBuckets) << shift;
  }
  static std::uint64_t width_of(std::size_t index) {
    if (index < 2 * kSubBuckets) return 1;
    const std::uint64_t rest = index - 2 * kSubBuckets;
    const int exponent = static_cast<int>(rest / kSubBuckets) + kSubBucketBits + 1;
    return std::uint64_t{1} << (exponent - kSubBucketBits);
  }
  static std::uint64_t midpoint_of(std::size_t index) {
    return lowest_of(index) + width_of(index) / 2;
  }

 private:
  std::vector<std::uint64_t> counts_;
  std::uint64_t total_count_ = 0;
  std::uint64_t max_ = 0;
  std::uint64_t min_ = UINT64_MAX;
  double sum_ = 0;
};

}  // namespace turnstile::bench
