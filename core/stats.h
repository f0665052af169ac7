// What `stats` reports (reference 1.7): a snapshot of one engine's resources, snapshots merged
// across engines, and the JSON line the protocol sends.
//
// JSON layout, fields in this order, arrays present (never null; signal_channels see below), keys
// without their internal namespace:
//   {"connections":N,
//    "locks":[{"key","owner_conn_id","lease_expires_in_s","waiters"}...],
//    "semaphores":[{"key","limit","holders","waiters"}...],
//    "idle_locks":[{"key","idle_s"}...],
//    "idle_semaphores":[{"key","idle_s"}...],
//    "signal_channels":[{"pattern","group","listeners"}...],   <- dflockd v1.11-v1.16, only
//                                               while anything listens; "group" only for a
//                                               queue group's listeners
//    "rw_locks":[{"key","readers","writer_conn_id","lease_expires_in_s","waiters"}...],
//    "idle_rw_locks":[{"key","idle_s"}...],  <- turnstile's read-write locks, each array only
//                                               while it has entries
//    "truncated":bool,                       <- turnstile's addition, after dflockd's fields
//    "cluster":{"node_id","role","term","leader_id","leader_address","commit_index",
//               "last_index","snapshot_index","applied_index","voters":[ids...]}}
//                                            <- cluster mode only (docs/cluster.md); absent on
//                                               one node, whose line stays dflockd's
// A resource is classified by its limit: limit 1 is a lock even when `sl` created it. Entries are
// sorted by key, so the output is deterministic. Each array holds at most `entries_max` entries,
// and the whole line at most kStatsJsonBytesMax bytes; `truncated` says whether anything was cut.
//
// Thread affinity: plain values, safe anywhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/types.h"

namespace turnstile::core {

struct LockStats {
  std::string key;
  SessionId owner;                // 0 when the lock has waiters but no holder
  double lease_expires_in_s = 0;  // clamped >= 0; 0 when not held
  std::int64_t waiters = 0;
  bool operator==(const LockStats&) const = default;
};

struct SemaphoreStats {
  std::string key;
  std::int64_t limit = 0;
  std::int64_t holders = 0;
  std::int64_t waiters = 0;
  bool operator==(const SemaphoreStats&) const = default;
};

// The listeners of one signal pattern, plain (group empty) or in one queue group.
struct SignalChannelStats {
  std::string pattern;
  std::string group;
  std::int64_t listeners = 0;
  bool operator==(const SignalChannelStats&) const = default;
};

// A read-write lock in use: its readers, or its writer (never both), and its queue.
struct ReadWriteStats {
  std::string key;
  std::int64_t readers = 0;
  SessionId writer;               // 0 when no writer holds it
  double lease_expires_in_s = 0;  // the writer's, or the soonest reader's; 0 when not held
  std::int64_t waiters = 0;
  bool operator==(const ReadWriteStats&) const = default;
};

struct IdleStats {
  std::string key;
  double idle_s = 0;  // seconds since the resource was last used
  bool operator==(const IdleStats&) const = default;
};

// A node's part in raft: who leads, who follows, who stands for election, or none while raft is
// not running (starting, stopped or failed).
enum class RaftRole : std::uint8_t { kUnavailable, kFollower, kCandidate, kLeader };
// "unavailable", "follower", "candidate", "leader": the word `stats` and the CLI show.
std::string_view raft_role_name(RaftRole role);

// A cluster node's view of raft when it answered (net/raft_node.h RaftStatus, as the driver saw
// it): what an operator needs to tell which node leads and how far each one is.
struct ClusterStatus {
  std::uint64_t node_id = 0;
  RaftRole role = RaftRole::kUnavailable;
  std::uint64_t term = 0;
  std::uint64_t leader_id = 0;  // 0: no leader known
  std::string leader_address;   // the leader's client host:port; empty when none is known
  std::uint64_t commit_index = 0;
  std::uint64_t last_index = 0;
  std::uint64_t snapshot_index = 0;  // 0: no snapshot yet
  std::uint64_t applied_index = 0;
  std::vector<std::uint64_t> voters = {};  // ascending
  bool operator==(const ClusterStatus&) const = default;
};

// What the engines counted since they started, summed over them: for /metrics, not for `stats`
// (its JSON is dflockd's). In a cluster, what this node's replica applied.
struct StatsCounters {
  std::uint64_t grants = 0;           // fences minted
  std::uint64_t lease_expiries = 0;   // holders whose lease ran out
  std::uint64_t wait_timeouts = 0;    // waiters whose timeout ran out
  std::uint64_t fence_exhausted = 0;  // grants refused for want of a fence
  bool operator==(const StatsCounters&) const = default;
};

// Holders and waiters over every key, however many entries the snapshot's lists keep: what
// /metrics reports. totals_of() counts them from whole lists, before any cap cuts them.
struct StatsTotals {
  std::int64_t locks_held = 0;
  std::int64_t lock_waiters = 0;
  std::int64_t semaphore_holders = 0;
  std::int64_t semaphore_waiters = 0;
  std::int64_t rw_readers = 0;
  std::int64_t rw_writers = 0;
  std::int64_t rw_waiters = 0;
  void add(const StatsTotals& other);
  bool operator==(const StatsTotals&) const = default;
};

struct StatsSnapshot {
  std::vector<LockStats> locks;
  std::vector<SemaphoreStats> semaphores;
  std::vector<IdleStats> idle_locks;
  std::vector<IdleStats> idle_semaphores;
  std::vector<SignalChannelStats> signal_channels;  // by pattern, then group
  std::vector<ReadWriteStats> rw_locks;
  std::vector<IdleStats> idle_rw_locks;
  bool truncated = false;
  std::optional<ClusterStatus> cluster = {};  // cluster mode only
  StatsCounters counters;
  StatsTotals totals;
  bool operator==(const StatsSnapshot&) const = default;
};

// The totals of `snapshot`'s lists as they are (call it before they are cut).
StatsTotals totals_of(const StatsSnapshot& snapshot);

// One key as `inspect` (and GET /v1/locks/{key}) shows it. Holders show their fence, never their
// whole token: a token is a capability, its fence is public.
struct KeyInspection {
  struct Holder {
    std::uint64_t fence = 0;
    SessionId session;
    double lease_expires_in_s = 0;
    bool shared = false;    // a read slot of a read-write lock
    bool orphaned = false;  // kept for a stable ref after its session closed
  };
  struct Waiter {
    SessionId session;
    double waited_s = 0;  // since it joined the queue
    bool shared = false;
    bool orphaned = false;
  };
  std::string kind;  // lock, sem or rw
  std::string key;
  bool exists = false;
  std::int64_t limit = 0;
  std::vector<Holder> holders;  // in grant order
  std::vector<Waiter> waiters;  // in queue order
  std::optional<double> lock_delay_left_s;
};

// {"kind","key","exists","limit","holders":[{"fence","session","lease_expires_in_s"[,"mode"]
//  [,"orphaned":true]}...],"waiters":[{"session","waited_s"[,"mode"][,"orphaned":true]}...]
//  [,"lock_delay_left_s"]}; "mode" ("read" or "write") for read-write locks only.
std::string encode_inspection_json(const KeyInspection& inspection);

// Moves the entries of `part` into `total`, keeps every array sorted by key and cut to
// `entries_max` entries (setting `truncated` when something was cut). A `cluster` in `part`
// replaces the one in `total` (only the replicated endpoint sends one).
void merge_stats(StatsSnapshot& total, StatsSnapshot&& part, std::size_t entries_max);

// Longest stats JSON we send: the Python and TypeScript dflockd clients reject reply lines over
// 1 MiB (1048576 bytes), so the whole line, "ok " and "\n" included, stays below that.
inline constexpr std::size_t kStatsJsonBytesMax = 1'000'000;

// The compact one-line JSON above (no trailing newline), written with nlohmann::json. When it
// would exceed `bytes_max`, every array of resources keeps only its first half (by key) until it
// fits, and `truncated` is true; the `cluster` object is never cut.
std::string encode_stats_json(std::int64_t connections, const StatsSnapshot& snapshot,
                              std::size_t bytes_max = kStatsJsonBytesMax);

}  // namespace turnstile::core
