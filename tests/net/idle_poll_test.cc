// IdlePoll's adaptive window (net/idle_poll.h).
#include "net/idle_poll.h"

#include <gtest/gtest.h>

namespace turnstile::net {
namespace {

core::Duration us(std::int64_t n) { return core::Duration::nanoseconds(n * 1000); }

TEST(IdlePoll, StartsClosedSoAnIdleServerSleepsAtOnce) {
  IdlePoll poll(us(100));
  EXPECT_EQ(poll.window(), core::Duration::zero());
}

TEST(IdlePoll, ShortSleepsGrowTheWindowByDoublingUpToTheMaximum) {
  IdlePoll poll(us(100));
  poll.on_woken(us(40));  // work came 40 us after the last event: polling would have caught it
  EXPECT_EQ(poll.window(), core::Duration::nanoseconds(12'500));  // max / 8 to start
  poll.on_woken(us(40));
  EXPECT_EQ(poll.window(), us(25));
  poll.on_woken(us(40));
  EXPECT_EQ(poll.window(), us(50));
  poll.on_woken(us(100));  // exactly the maximum still counts as short
  EXPECT_EQ(poll.window(), us(100));
  poll.on_woken(us(10));
  EXPECT_EQ(poll.window(), us(100));  // never beyond the maximum
}

TEST(IdlePoll, LongSleepsHalveTheWindowThenCloseIt) {
  IdlePoll poll(us(100));
  for (int i = 0; i < 4; ++i) poll.on_woken(us(1));
  ASSERT_EQ(poll.window(), us(100));
  poll.on_woken(us(5000));  // nothing came for 5 ms: the polling was wasted
  EXPECT_EQ(poll.window(), us(50));
  poll.on_woken(core::Duration::seconds(1));
  EXPECT_EQ(poll.window(), us(25));
  poll.on_woken(core::Duration::seconds(1));
  EXPECT_EQ(poll.window(), core::Duration::nanoseconds(12'500));
  poll.on_woken(core::Duration::seconds(1));
  EXPECT_EQ(poll.window(), core::Duration::zero());  // below max / 8: off
  poll.on_woken(core::Duration::seconds(1));
  EXPECT_EQ(poll.window(), core::Duration::zero());
}

TEST(IdlePoll, RequestsFurtherApartThanTheMaximumNeverTurnPollingOn) {
  IdlePoll poll(us(100));
  for (int i = 0; i < 1000; ++i) poll.on_woken(us(101));
  EXPECT_EQ(poll.window(), core::Duration::zero());
}

TEST(IdlePoll, ZeroMaximumNeverPolls) {
  IdlePoll poll(core::Duration::zero());
  for (int i = 0; i < 10; ++i) poll.on_woken(core::Duration::zero());
  EXPECT_EQ(poll.window(), core::Duration::zero());
}

}  // namespace
}  // namespace turnstile::net
