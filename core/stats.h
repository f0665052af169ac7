// What `stats` reports (reference 1.7): a snapshot of one engine's resources, snapshots merged
// across engines, and the JSON line the protocol sends.
//
// JSON layout, fields in this order, arrays always present (never null), keys without their
// internal namespace:
//   {"connections":N,
//    "locks":[{"key","owner_conn_id","lease_expires_in_s","waiters"}...],
//    "semaphores":[{"key","limit","holders","waiters"}...],
//    "idle_locks":[{"key","idle_s"}...],
//    "idle_semaphores":[{"key","idle_s"}...],
//    "truncated":bool}                       <- turnstile's addition, after dflockd's fields
// A resource is classified by its limit: limit 1 is a lock even when `sl` created it. Entries are
// sorted by key, so the output is deterministic. Each array holds at most `entries_max` entries,
// and the whole line at most kStatsJsonBytesMax bytes; `truncated` says whether anything was cut.
//
// Thread affinity: plain values, safe anywhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
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

struct IdleStats {
  std::string key;
  double idle_s = 0;  // seconds since the resource was last used
  bool operator==(const IdleStats&) const = default;
};

struct StatsSnapshot {
  std::vector<LockStats> locks;
  std::vector<SemaphoreStats> semaphores;
  std::vector<IdleStats> idle_locks;
  std::vector<IdleStats> idle_semaphores;
  bool truncated = false;
  bool operator==(const StatsSnapshot&) const = default;
};

// Moves the entries of `part` into `total`, keeps every array sorted by key and cut to
// `entries_max` entries (setting `truncated` when something was cut).
void merge_stats(StatsSnapshot& total, StatsSnapshot&& part, std::size_t entries_max);

// Longest stats JSON we send: the Python and TypeScript dflockd clients reject reply lines over
// 1 MiB (1048576 bytes), so the whole line, "ok " and "\n" included, stays below that.
inline constexpr std::size_t kStatsJsonBytesMax = 1'000'000;

// The compact one-line JSON above (no trailing newline), written with nlohmann::json. When it
// would exceed `bytes_max`, every array keeps only its first half (by key) until it fits, and
// `truncated` is true.
std::string encode_stats_json(std::int64_t connections, const StatsSnapshot& snapshot,
                              std::size_t bytes_max = kStatsJsonBytesMax);

}  // namespace turnstile::core
