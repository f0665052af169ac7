// net/guard.h: what escapes a libevent callback's work is caught and logged, never rethrown.
#include "net/guard.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace turnstile::net {
namespace {

TEST(Guard, WorkThatReturnsIsReportedAsDone) {
  int runs = 0;
  EXPECT_TRUE(guarded("test", [&] { ++runs; }));
  EXPECT_EQ(runs, 1);
}

TEST(Guard, AnExceptionIsLoggedWithWhereAndWhat) {
  testing::internal::CaptureStderr();
  const bool done = guarded("HTTP request", [] { throw std::runtime_error("boom"); });
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_FALSE(done);
  EXPECT_NE(log.find(" error HTTP request: unexpected exception: boom"), std::string::npos) << log;
}

TEST(Guard, AnythingThrownIsCaught) {
  testing::internal::CaptureStderr();
  EXPECT_FALSE(guarded("shard message", [] { throw 42; }));
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("shard message: unexpected exception of an unknown type"), std::string::npos)
      << log;
}

}  // namespace
}  // namespace turnstile::net
