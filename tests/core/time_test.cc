// Unit tests for core/time.h: Instant and Duration arithmetic saturates instead of wrapping.
#include "core/time.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "core/protocol.h"

namespace turnstile::core {
namespace {

constexpr std::int64_t kI64Max = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kI64Min = std::numeric_limits<std::int64_t>::min();

TEST(DurationTest, ConstructorsScaleToNanoseconds) {
  EXPECT_EQ(Duration::nanoseconds(7).ns(), 7);
  EXPECT_EQ(Duration::milliseconds(7).ns(), 7'000'000);
  EXPECT_EQ(Duration::seconds(7).ns(), 7'000'000'000);
  EXPECT_EQ(Duration::zero().ns(), 0);
  EXPECT_EQ(Duration().ns(), 0);
  EXPECT_EQ(Duration::max().ns(), kI64Max);
}

TEST(DurationTest, LargestProtocolSecondsFitWithoutSaturating) {
  EXPECT_EQ(Duration::seconds(kMaxSeconds).ns(), kMaxSeconds * 1'000'000'000);
  EXPECT_LT(Duration::seconds(kMaxSeconds), Duration::max());
}

TEST(DurationTest, ConstructorsSaturate) {
  EXPECT_EQ(Duration::seconds(kMaxSeconds + 1), Duration::max());
  EXPECT_EQ(Duration::seconds(kI64Max), Duration::max());
  EXPECT_EQ(Duration::seconds(kI64Min).ns(), kI64Min);
  EXPECT_EQ(Duration::milliseconds(kI64Max), Duration::max());
  EXPECT_EQ(Duration::milliseconds(-kI64Max).ns(), kI64Min);
}

TEST(DurationTest, WholeSecondsRoundTowardZero) {
  EXPECT_EQ(Duration::milliseconds(1999).whole_seconds(), 1);
  EXPECT_EQ(Duration::milliseconds(-1999).whole_seconds(), -1);
  EXPECT_EQ(Duration::nanoseconds(999'999'999).whole_seconds(), 0);
  EXPECT_EQ(Duration::seconds(33).whole_seconds(), 33);
}

TEST(DurationTest, SecondsDouble) {
  EXPECT_DOUBLE_EQ(Duration::milliseconds(2500).seconds_double(), 2.5);
  EXPECT_DOUBLE_EQ(Duration::milliseconds(-250).seconds_double(), -0.25);
}

TEST(DurationTest, AdditionAndSubtractionSaturate) {
  EXPECT_EQ(Duration::seconds(2) + Duration::seconds(3), Duration::seconds(5));
  EXPECT_EQ(Duration::seconds(2) - Duration::seconds(3), Duration::seconds(-1));
  EXPECT_EQ(Duration::max() + Duration::nanoseconds(1), Duration::max());
  EXPECT_EQ((Duration::nanoseconds(kI64Min) - Duration::nanoseconds(1)).ns(), kI64Min);
  EXPECT_EQ((Duration::nanoseconds(kI64Min) + Duration::nanoseconds(-1)).ns(), kI64Min);
  // Subtracting the most negative duration from a non-negative one saturates.
  EXPECT_EQ(Duration::zero() - Duration::nanoseconds(kI64Min), Duration::max());
  EXPECT_EQ(Duration::seconds(1) - Duration::nanoseconds(kI64Min), Duration::max());
}

// x - INT64_MIN is representable for every negative x; negating INT64_MIN is not, so the
// subtraction must not be computed as x + (-INT64_MIN).
TEST(DurationTest, SubtractingTheMostNegativeDurationIsExact) {
  EXPECT_EQ((Duration::nanoseconds(-1) - Duration::nanoseconds(kI64Min)).ns(), kI64Max);
  EXPECT_EQ((Duration::nanoseconds(kI64Min) - Duration::nanoseconds(kI64Min)).ns(), 0);
  EXPECT_EQ((Instant::from_ns(kI64Min) - Instant::from_ns(kI64Min)).ns(), 0);
}

TEST(DurationTest, Ordering) {
  EXPECT_LT(Duration::nanoseconds(-1), Duration::zero());
  EXPECT_LT(Duration::milliseconds(999), Duration::seconds(1));
  EXPECT_EQ(Duration::milliseconds(1000), Duration::seconds(1));
}

TEST(InstantTest, ArithmeticWithDurations) {
  Instant t = Instant::from_ns(1'000);
  EXPECT_EQ((t + Duration::nanoseconds(5)).ns(), 1'005);
  EXPECT_EQ((t - Duration::nanoseconds(5)).ns(), 995);
  EXPECT_EQ(Instant::from_ns(1'005) - t, Duration::nanoseconds(5));
  EXPECT_EQ(t - Instant::from_ns(1'005), Duration::nanoseconds(-5));
  EXPECT_EQ(Instant().ns(), 0);
}

TEST(InstantTest, LateInstantPlusHugeTimeoutPinsAtMaxInsteadOfWrapping) {
  Instant late = Instant::from_ns(0) + Duration::seconds(1'000'000);
  Instant deadline = late + Duration::seconds(kMaxSeconds);
  EXPECT_EQ(deadline, Instant::max());
  EXPECT_GT(deadline, late);
  EXPECT_EQ(Instant::max() + Duration::nanoseconds(1), Instant::max());
}

TEST(InstantTest, SubtractionSaturatesAtBothEnds) {
  EXPECT_EQ(Instant::min() - Duration::nanoseconds(1), Instant::min());
  EXPECT_EQ(Instant::min() + Duration::nanoseconds(-1), Instant::min());
  EXPECT_EQ(Instant::max() - Duration::nanoseconds(kI64Min), Instant::max());
  EXPECT_EQ(Instant::max() - Instant::min(), Duration::max());
  EXPECT_EQ((Instant::min() - Instant::max()).ns(), kI64Min);
}

TEST(InstantTest, Ordering) {
  EXPECT_LT(Instant::min(), Instant::from_ns(0));
  EXPECT_LT(Instant::from_ns(0), Instant::max());
  EXPECT_LT(Instant::from_ns(5), Instant::from_ns(5) + Duration::nanoseconds(1));
  EXPECT_EQ(Instant::from_ns(5), Instant::from_ns(5));
}

TEST(TimeTest, UsableInConstantExpressions) {
  constexpr Instant kDeadline = Instant::from_ns(0) + Duration::seconds(3);
  static_assert(kDeadline.ns() == 3'000'000'000);
  static_assert((Instant::max() + Duration::seconds(1)) == Instant::max());
  static_assert(Duration::seconds(kMaxSeconds + 1) == Duration::max());
  SUCCEED();
}

}  // namespace
}  // namespace turnstile::core
