// The commit rule of Raft that libraft 0.15 (Debian 12's libraft-dev) leaves out, put back from
// outside the library.
//
// Raft commits an entry of an earlier term only together with an entry of the leader's own term:
// a leader never commits an old entry because a majority holds it (Raft thesis §3.6.2, Figure 8;
// canonical/raft issue #220, fixed after 0.15). libraft 0.15 commits by counting alone. Then a
// node holding a conflicting entry of a later term can still be elected and overwrite what was
// committed; the nodes that applied it refuse the overwrite and shut down ("conflicting terms ...
// -> shutdown"), and a 3-node cluster is gone. turnstile-sim's cluster profiles found this
// (seed 227 of cluster-3 at 10,000 steps) before the rule was installed.
//
// The library decides commits from the followers' AppendEntries results, which reach it through
// its raft_io's receive callback. install_commit_rule() wraps that callback: while a node leads,
// a result that acknowledges an entry of an earlier term above the commit index is reported to
// raft as acknowledging only the commit index. The follower's progress is learned again from
// its next result, which acknowledges the leader's own entries (every turnstile leader proposes
// a barrier as soon as it leads), and those commit everything before them, as Raft requires.
//
// A second gap, on the follower's side (turnstile-sim seed 270 of cluster-3 at 20,000 steps): a
// libraft 0.15 follower answers an AppendEntries with the index of the last entry it has stored,
// including entries of an old term beyond those the leader's message covered. A new leader whose
// log is shorter then counts the follower's own stale entry at that index as a copy of its own
// new one, commits it without a majority holding it, and a later leader overwrites it. So the
// wrapper also reads each AppendEntries (and InstallSnapshot) a follower receives and, when the
// follower's log holds the entry the message follows, records that its log is the leader's up to
// the message's last entry; a success result the follower sends in that term reports at most
// that index. The leader then resends from there, and the follower's stale entries are replaced
// before they count.
//
// A third gap, where the two meet (turnstile-sim seed 31000290 of cluster-3 at 20,000 steps): a
// libraft 0.15 follower rejects an AppendEntries whose previous entry it has compacted into its
// snapshot, as if it lacked it, and answers an InstallSnapshot older than its own snapshot with
// success. A leader whose snapshot ends before the follower's then loops for ever: it walks back
// to its snapshot, sends it, learns the follower matches to that snapshot's end (the cap above),
// sends the entries after it, and the follower rejects them again. Everything a follower has
// compacted was applied, so committed, so it is in the log of every later leader (Raft's Leader
// Completeness): the wrapper answers such a rejection with success at the follower's snapshot
// end, and counts its snapshot as matched when an older one arrives. The leader goes on from
// there.
//
// Nothing else changes: the log, the votes and every other message go through untouched.
//
// One path for every driver: the simulator installs it on the fixture's nodes and the daemon on
// its libuv node.
//
// Thread affinity: install before raft_start, on the thread that runs the raft instance; the
// wrapper runs on that thread.
#pragma once

#include <cstdint>
#include <optional>

extern "C" {
#include <raft.h>
}

namespace turnstile::net {

// The pure rule: the index a leader of `current_term` may count as acknowledged by a follower
// that reported `acknowledged`, given the term of that entry in the leader's log (nullopt when
// the leader no longer holds it, which happens only below the commit index).
std::uint64_t countable_ack(std::uint64_t current_term, std::uint64_t commit_index,
                            std::uint64_t acknowledged, std::optional<std::uint64_t> entry_term);

// A prefix of a follower's log known to be the log of the leader of `term`.
struct MatchedPrefix {
  std::uint64_t term = 0;
  std::uint64_t index = 0;
};

// A follower's record of the longest such prefix for the newest term it heard of.
class FollowerMatch {
 public:
  void learn(MatchedPrefix seen);
  // The last index a success result of `term` may report, given the last index stored.
  std::uint64_t reportable(std::uint64_t term, std::uint64_t last_stored) const;

 private:
  std::uint64_t term_ = 0;
  std::uint64_t index_ = 0;
};

// The success a follower gives instead of libraft 0.15's rejection of an AppendEntries that
// follows entry `rejected`, when that entry lies inside its snapshot (which ends at
// `snapshot_last_index`; `last_stored` is the last index it has stored): its snapshot's end, the
// prefix of its log every later leader shares. nullopt for a real mismatch, which is left alone.
std::optional<std::uint64_t> compacted_previous_answer(std::uint64_t rejected,
                                                       std::uint64_t snapshot_last_index,
                                                       std::uint64_t last_stored);

// What a follower whose own snapshot ends at `snapshot_last_index` learns of the leader of
// `seen.term` from that leader's snapshot, which ends at `seen.index`: its log is the leader's up
// to the later of the two ends.
MatchedPrefix snapshot_match(MatchedPrefix seen, std::uint64_t snapshot_last_index);

// Whether `r`'s log (or its snapshot's last entry) holds entry `index` of `term`; index 0 always.
bool holds_entry(const raft* r, std::uint64_t index, std::uint64_t term);

// The term of entry `index` in raft's in-memory log, if it holds it.
std::optional<std::uint64_t> term_in_log(const raft* r, std::uint64_t index);

// Makes `r` (initialized, not started) apply the rule. `r->io` must stay the same afterwards.
void install_commit_rule(raft* r);

// How many acknowledgements the rule has held back, on every node of this process.
std::uint64_t commit_rule_holds();

// How many rejections of a compacted previous entry it has answered with success.
std::uint64_t commit_rule_compacted_answers();

}  // namespace turnstile::net
