// Unit tests of the soak's parts (docs/soak.md): the fault schedule is a pure function of its
// inputs and keeps to its bounds, and the protected resource and the history's fence-order check
// catch what they are there to catch.
#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/soak/history.h"
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

Call grant(std::size_t worker, const std::string& key, double sent, double answered,
           std::uint64_t fence) {
  Call call;
  call.worker = worker;
  call.kind = "lock (guard)";
  call.key = key;
  call.sent_s = sent;
  call.answered_s = answered;
  call.outcome = "ok";
  call.fence = fence;
  return call;
}

TEST(SoakHistory, FencesRiseInRealTimeOrderPerKey) {
  History history;
  history.add(grant(1, "k", 0.0, 1.0, 10));
  history.add(grant(2, "k", 0.5, 2.0, 11));  // overlapping the first: any order is fine
  history.add(grant(3, "k", 0.6, 1.5, 9));
  history.add(grant(3, "other", 3.0, 3.5, 1));  // another key's fences are its own
  history.add(grant(4, "k", 2.5, 3.0, 12));     // sent after all three answered: above them
  EXPECT_TRUE(history.check_fence_order().empty());

  history.add(grant(5, "k", 3.1, 3.2, 11));  // sent after 12 was answered, yet below it
  const std::vector<std::string> breaches = history.check_fence_order();
  ASSERT_EQ(breaches.size(), 1u);
  EXPECT_NE(breaches[0].find("worker 5's grant"), std::string::npos) << breaches[0];
  EXPECT_NE(breaches[0].find("not above fence 12 granted to worker 4"), std::string::npos)
      << breaches[0];
}

TEST(SoakHistory, AWorkerMayTakeBackItsOwnSlotButNobodyElseMayHaveItsFence) {
  History history;
  history.add(grant(1, "s", 0.0, 1.0, 10));
  history.add(grant(2, "s", 1.1, 1.2, 11));
  history.add(grant(1, "s", 2.0, 2.1, 10));  // worker 1 back under its ref: its own slot
  EXPECT_TRUE(history.check_fence_order().empty());
  history.add(grant(3, "s", 3.0, 3.1, 10));  // somebody else with that fence
  EXPECT_EQ(history.check_fence_order().size(), 1u);
}

TEST(SoakHistory, WritesOneJsonObjectPerCall) {
  History history;
  Call call = grant(2, "a\"b", 1.25, 1.5, 7);
  history.add(call);
  call.fence = 0;
  call.kind = "release (guard)";
  call.outcome = "not_leader";
  history.add(call);
  std::ostringstream out;
  history.write_jsonl(out);
  EXPECT_EQ(out.str(),
            "{\"worker\":2,\"kind\":\"lock (guard)\",\"key\":\"a\\\"b\",\"sent_s\":1.250000,"
            "\"answered_s\":1.500000,\"outcome\":\"ok\",\"fence\":7}\n"
            "{\"worker\":2,\"kind\":\"release (guard)\",\"key\":\"a\\\"b\",\"sent_s\":1.250000,"
            "\"answered_s\":1.500000,\"outcome\":\"not_leader\",\"fence\":0}\n");
}

}  // namespace
}  // namespace turnstile::soak
