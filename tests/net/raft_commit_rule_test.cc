// net/raft_commit_rule.h: a leader counts a follower's acknowledgement towards a commit only up
// to the commit index unless the acknowledged entry is of the leader's own term (Raft's rule that
// libraft 0.15 leaves out), and reads entry terms from raft's circular in-memory log correctly.
// That the rule keeps a fixture cluster alive where libraft 0.15 alone overwrites committed
// entries is proven by the cluster profiles and their canary (turnstile-sim-canary-raft).
#include "net/raft_commit_rule.h"

#include <gtest/gtest.h>

#include <vector>

namespace turnstile::net {
namespace {

TEST(CommitRule, AnAcknowledgedEntryOfTheLeadersTermCounts) {
  EXPECT_EQ(countable_ack(/*current_term=*/5, /*commit_index=*/10, /*acknowledged=*/14, 5), 14U);
}

TEST(CommitRule, AnAcknowledgedEntryOfAnEarlierTermCountsOnlyUpToTheCommitIndex) {
  EXPECT_EQ(countable_ack(5, 10, 14, 4), 10U);
  EXPECT_EQ(countable_ack(5, 10, 14, std::nullopt), 10U);
}

TEST(CommitRule, WhatIsCommittedAlreadyIsLeftAsItIs) {
  EXPECT_EQ(countable_ack(5, 10, 9, 2), 9U);
  EXPECT_EQ(countable_ack(5, 10, 10, 2), 10U);
}

TEST(CommitRule, TermsAreReadFromTheCircularLogAcrossItsWrap) {
  // Slots 0..3 of a 4-slot buffer; the used slots run from 2 around to 1: indexes 11, 12, 13.
  std::vector<raft_entry> entries(4);
  entries[2].term = 7;
  entries[3].term = 8;
  entries[0].term = 9;
  raft r{};
  r.log.entries = entries.data();
  r.log.size = 4;
  r.log.front = 2;
  r.log.back = 1;
  r.log.offset = 10;
  EXPECT_EQ(term_in_log(&r, 11), 7U);
  EXPECT_EQ(term_in_log(&r, 12), 8U);
  EXPECT_EQ(term_in_log(&r, 13), 9U);
  EXPECT_EQ(term_in_log(&r, 14), std::nullopt);  // not appended yet
  EXPECT_EQ(term_in_log(&r, 10), std::nullopt);  // in the snapshot
  r.log.size = 0;
  EXPECT_EQ(term_in_log(&r, 11), std::nullopt);  // an empty log
}

}  // namespace
}  // namespace turnstile::net
