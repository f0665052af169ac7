// net/raft_commit_rule.h: a leader counts a follower's acknowledgement towards a commit only up
// to the commit index unless the acknowledged entry is of the leader's own term (Raft's rule that
// libraft 0.15 leaves out), and reads entry terms from raft's circular in-memory log correctly.
// That the rule keeps a fixture cluster alive where libraft 0.15 alone overwrites committed
// entries is proven by the cluster profiles and their canary (turnstile-sim-canary-raft).
#include "net/raft_commit_rule.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

namespace turnstile::net {
namespace {

// A raft whose in-memory log is `entries`, a circular buffer whose used slots run from `front`
// up to (not including) `back`, holding the entries after index `offset`.
raft log_over(std::vector<raft_entry>& entries, std::size_t front, std::size_t back,
              raft_index offset) {
  raft r{};
  r.log.entries = entries.data();
  r.log.size = entries.size();
  r.log.front = front;
  r.log.back = back;
  r.log.offset = offset;
  return r;
}

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
  raft r = log_over(entries, /*front=*/2, /*back=*/1, /*offset=*/10);
  EXPECT_EQ(term_in_log(&r, 11), 7U);
  EXPECT_EQ(term_in_log(&r, 12), 8U);
  EXPECT_EQ(term_in_log(&r, 13), 9U);
  EXPECT_EQ(term_in_log(&r, 14), std::nullopt);  // not appended yet
  EXPECT_EQ(term_in_log(&r, 10), std::nullopt);  // in the snapshot
  r.log.size = 0;
  EXPECT_EQ(term_in_log(&r, 11), std::nullopt);  // an empty log
}

// The follower's side: a success result reports at most the prefix the leader of its term has
// been seen to share; the stale entries beyond it are not claimed as the leader's.
TEST(FollowerMatch, ASuccessResultClaimsOnlyWhatTheLeaderOfItsTermWasSeenToShare) {
  FollowerMatch match;
  // Nothing known of term 9: as raft reports it.
  EXPECT_EQ(match.reportable(9, 17335), 17335U);
  // A heartbeat of the term-9 leader that follows entry 17334: its log is the leader's to 17334,
  // and the follower's own 17335 (of an old term) is not acknowledged.
  match.learn({9, 17334});
  EXPECT_EQ(match.reportable(9, 17335), 17334U);
  EXPECT_EQ(match.reportable(9, 17000), 17000U);  // less stored than matched: what is stored
  // The leader's entry 17335 arrives: now it counts.
  match.learn({9, 17335});
  EXPECT_EQ(match.reportable(9, 17335), 17335U);
  // An older message of the same term does not shrink what is known.
  match.learn({9, 17300});
  EXPECT_EQ(match.reportable(9, 17335), 17335U);
  // A new term starts over from what its own leader shows; an older term is ignored.
  match.learn({10, 17200});
  EXPECT_EQ(match.reportable(10, 17335), 17200U);
  match.learn({9, 17400});
  EXPECT_EQ(match.reportable(10, 17335), 17200U);
}

TEST(FollowerMatch, TheEntryAMessageFollowsIsFoundInTheLogOrAtTheSnapshotsEnd) {
  std::vector<raft_entry> entries(4);
  entries[0].term = 3;  // index 11
  entries[1].term = 4;  // index 12
  raft r = log_over(entries, /*front=*/0, /*back=*/2, /*offset=*/10);
  r.log.snapshot.last_index = 10;
  r.log.snapshot.last_term = 2;
  EXPECT_TRUE(holds_entry(&r, 0, 0));
  EXPECT_TRUE(holds_entry(&r, 10, 2));
  EXPECT_FALSE(holds_entry(&r, 10, 3));
  EXPECT_TRUE(holds_entry(&r, 11, 3));
  EXPECT_TRUE(holds_entry(&r, 12, 4));
  EXPECT_FALSE(holds_entry(&r, 12, 3));  // a conflicting term: raft rejects it
  EXPECT_FALSE(holds_entry(&r, 13, 4));  // not stored
  EXPECT_FALSE(holds_entry(&r, 9, 2));   // inside the snapshot, term unknown: raft rejects it
}

// The follower's answer to libraft 0.15 rejecting an AppendEntries whose previous entry it has
// compacted: success at its snapshot's end, which every later leader shares.
TEST(CompactedPrevious, ARejectionOfAnEntryInsideTheSnapshotBecomesSuccessAtItsEnd) {
  // Snapshot to 200, stored to 230; the leader's message follows entry 150.
  EXPECT_EQ(compacted_previous_answer(/*rejected=*/150, /*snapshot_last_index=*/200,
                                      /*last_stored=*/230),
            200U);
  EXPECT_EQ(compacted_previous_answer(1, 200, 200), 200U);
}

TEST(CompactedPrevious, ARealMismatchOrAnInstallInProgressIsLeftAlone) {
  EXPECT_EQ(compacted_previous_answer(0, 200, 230), std::nullopt);    // not a rejection
  EXPECT_EQ(compacted_previous_answer(200, 200, 230), std::nullopt);  // raft knows that term
  EXPECT_EQ(compacted_previous_answer(215, 200, 230), std::nullopt);  // a mismatch after it
  EXPECT_EQ(compacted_previous_answer(240, 200, 230), std::nullopt);  // beyond the log
  EXPECT_EQ(compacted_previous_answer(150, 0, 230), std::nullopt);    // no snapshot at all
  // raft sets last_stored to 0 while it installs a snapshot: nothing stored to claim.
  EXPECT_EQ(compacted_previous_answer(150, 200, 0), std::nullopt);
}

TEST(CompactedPrevious, AnOlderSnapshotOfTheLeaderMatchesToTheFollowersOwnEnd) {
  EXPECT_EQ(snapshot_match({9, 128}, 192).index, 192U);
  EXPECT_EQ(snapshot_match({9, 128}, 192).term, 9U);
  EXPECT_EQ(snapshot_match({9, 256}, 192).index, 256U);  // a newer one: its own end
  // Then a success the follower sends in term 9 reports its log up to 192, not to 128, so the
  // leader's next message follows an entry the follower still holds.
  FollowerMatch match;
  match.learn(snapshot_match({9, 128}, 192));
  EXPECT_EQ(match.reportable(9, 230), 192U);
}

}  // namespace
}  // namespace turnstile::net
