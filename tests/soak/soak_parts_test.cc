// Unit tests of the soak's parts (docs/soak.md): the fault schedule is a pure function of its
// inputs and keeps to its bounds, and the protected resource catches what it is there to catch.
#include <gtest/gtest.h>

#include <map>

#include "tests/soak/resource.h"
#include "tests/soak/schedule.h"

namespace turnstile::soak {
namespace {

TEST(SoakSchedule, SameSeedSameSchedule) {
  const auto a = make_schedule(7, 3.0, 3);
  const auto b = make_schedule(7, 3.0, 3);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(describe(a[i]), describe(b[i]));
  const auto c = make_schedule(8, 3.0, 3);
  bool differs = a.size() != c.size();
  for (std::size_t i = 0; !differs && i < a.size(); ++i) differs = describe(a[i]) != describe(c[i]);
  EXPECT_TRUE(differs);
}

TEST(SoakSchedule, KeepsToItsBounds) {
  for (std::uint64_t seed = 1; seed <= 200; ++seed) {
    const auto schedule = make_schedule(seed, 2.0, 5);
    double previous = 0;
    for (const Fault& fault : schedule) {
      EXPECT_GE(fault.at_s - previous, 5.0);
      EXPECT_LT(fault.at_s - previous, 15.0);
      EXPECT_LT(fault.at_s, 120.0);
      EXPECT_LT(fault.node, 5u);
      switch (fault.kind) {
        case FaultKind::kStop:
          EXPECT_GE(fault.down_s, 3.0);
          EXPECT_LT(fault.down_s, 4.0);
          break;
        case FaultKind::kDiskFull:
          EXPECT_GE(fault.down_s, 2.0);
          EXPECT_LT(fault.down_s, 5.0);
          break;
        case FaultKind::kTransfer:
        case FaultKind::kReplace:
          EXPECT_EQ(fault.down_s, 0.0);
          break;
        case FaultKind::kKill:
        case FaultKind::kTerm:
        case FaultKind::kSkew:
          EXPECT_GE(fault.down_s, 1.0);
          EXPECT_LT(fault.down_s, 3.0);
          break;
      }
      if (fault.kind == FaultKind::kSkew) {
        EXPECT_GE(fault.monotonic_offset_s, 0);
        EXPECT_LE(fault.monotonic_offset_s, 30 * 86'400);
        EXPECT_GE(fault.wall_offset_s, -86'400);
        EXPECT_LE(fault.wall_offset_s, 86'400);
      } else {
        EXPECT_EQ(fault.monotonic_offset_s, 0);
        EXPECT_EQ(fault.wall_offset_s, 0);
      }
      if (!picks_a_member(fault.kind)) {
        EXPECT_TRUE(fault.on_leader);
      }
      previous = fault.at_s;
    }
    EXPECT_GE(schedule.size(), 7u);  // 120 s at most 15 s apart
  }
}

TEST(SoakSchedule, DrawsEveryKindOfFault) {
  std::map<FaultKind, int> kinds;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    for (const Fault& fault : make_schedule(seed, 10.0, 3)) ++kinds[fault.kind];
  }
  for (FaultKind kind : {FaultKind::kKill, FaultKind::kStop, FaultKind::kTerm, FaultKind::kTransfer,
                         FaultKind::kReplace, FaultKind::kDiskFull, FaultKind::kSkew}) {
    EXPECT_GT(kinds[kind], 0) << fault_kind_name(kind);
  }
}

TEST(SoakResource, LockRefusesAFenceNotAboveTheHighest) {
  Violations violations;
  ProtectedResource resource("k", 1, true, violations);
  EXPECT_TRUE(resource.enter(5, "a"));
  resource.leave(5);
  EXPECT_TRUE(resource.enter(9, "a"));
  resource.leave(9);
  EXPECT_EQ(violations.count(), 0u);
  EXPECT_FALSE(resource.enter(9, "b"));
  EXPECT_FALSE(resource.enter(6, "a"));
  EXPECT_EQ(violations.count(), 2u);
  EXPECT_EQ(resource.inside(), 0);
}

TEST(SoakResource, LockLetsTheSameOwnerBackWithItsOwnSlotOnly) {
  Violations violations;
  ProtectedResource resource("k", 1, true, violations);
  EXPECT_TRUE(resource.enter(4, "a"));
  resource.leave(4);
  EXPECT_TRUE(resource.enter(4, "a"));  // adopted its orphaned slot: same token
  EXPECT_EQ(resource.readoptions(), 1u);
  EXPECT_EQ(violations.count(), 0u);
  EXPECT_FALSE(resource.enter(4, "a"));  // but not while inside with it
  resource.leave(4);
  EXPECT_FALSE(resource.enter(4, "b"));  // nor anybody else
  EXPECT_EQ(violations.count(), 2u);
}

TEST(SoakResource, LockReportsTwoInside) {
  Violations violations;
  ProtectedResource resource("k", 1, true, violations);
  EXPECT_TRUE(resource.enter(1, "a"));
  EXPECT_TRUE(resource.enter(2, "a"));  // a higher fence, but the first holder has not left
  EXPECT_EQ(violations.count(), 1u);
  resource.leave(1);
  resource.leave(2);
  EXPECT_EQ(resource.inside(), 0);
}

TEST(SoakResource, SemaphoreTakesLimitHoldersInAnyOrderButNoFenceTwice) {
  Violations violations;
  ProtectedResource resource("s", 2, false, violations);
  EXPECT_TRUE(resource.enter(8, "a"));
  EXPECT_TRUE(resource.enter(7, "a"));  // granted first, entered second: fine for a semaphore
  EXPECT_EQ(violations.count(), 0u);
  EXPECT_TRUE(resource.enter(9, "a"));  // a third inside
  EXPECT_EQ(violations.count(), 1u);
  resource.leave(9);
  resource.leave(8);
  EXPECT_FALSE(resource.enter(8, "b"));
  EXPECT_EQ(violations.count(), 2u);
  resource.leave(7);
  EXPECT_EQ(resource.inside(), 0);
  EXPECT_EQ(resource.entries(), 3u);
}

}  // namespace
}  // namespace turnstile::soak
