// The swarm settings of a seed: which shapes and faults a run gets (FoundationDB's BUGGIFY,
// TigerBeetle's swarm testing), drawn from the seed's own stream and the profile, and the time
// units and streams every part of the simulator shares.
//
// Thread affinity: values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace turnstile::sim {

inline constexpr std::int64_t kUs = 1'000;
inline constexpr std::int64_t kMs = 1'000'000;
inline constexpr std::int64_t kS = 1'000'000'000;
inline constexpr std::int64_t kHour = 3600 * kS;
// The wall clock at virtual time 0 (2026-01-01 in nanoseconds since the epoch).
inline constexpr std::int64_t kWallStart = 1'767'225'600 * kS;
// Virtual time the liveness phase allows for every pending request to be answered, then for
// everything to close.
inline constexpr std::int64_t kLivenessWindow = 120 * kS;
inline constexpr std::int64_t kDrainWindow = 200 * kS;
// The server's --admin-token, which the operator's force-releases carry.
inline constexpr const char* kAdminToken = "sim-admin-token";

// Subsystem streams of the seed.
enum Stream : std::uint64_t {
  kSwarm = 1,
  kNetwork,
  kWorkload,
  kFaults,
  kClocks,
  kSalts,
  kDisk,
  kHttpWorkload,
  kLosses  // which clients ask for lost-notify, and the operator's force-releases
};

inline const std::vector<std::string> kProfiles = {"default",          "crash-heavy", "clock-chaos",
                                                   "disconnect-storm", "contention",  "http",
                                                   "cluster-3",        "cluster-5"};

// ---- swarm settings: which faults and shapes a seed gets -----------------------------------

struct Settings {
  std::size_t shards = 1;
  std::size_t clients = 4;
  std::size_t hot_keys = 2;
  std::size_t cold_keys = 16;
  bool auto_release = true;
  std::int64_t waiters_max = 0;
  std::int64_t resources_max = 1'048'576;
  std::int64_t gc_idle_ms = 60'000;
  std::size_t deadlines_per_call = 8;  // EngineConfig::deadlines_per_call
  // BUGGIFY switches.
  bool fault_crash = false;
  bool fault_pause = false;
  bool fault_wall_step = false;
  bool fault_expiry_burst = false;
  bool fault_disconnect = false;
  bool fault_clock_back = false;
  bool fragment = false;
  bool pipelining = false;
  std::int64_t fault_interval_ms = 2'000;  // mean gap between fault events
  std::uint64_t vanish_permille = 10;      // per client action
  std::uint64_t hot_permille = 600;        // share of operations on hot keys
  std::int64_t net_delay_max_us = 2'000;
  std::int64_t hop_delay_max_us = 200;
  // The fence journal (--fence-state-file) on the simulated disk; off: fences start at the wall
  // clock of each process start.
  bool fence_journal = false;
  std::uint64_t journal_range = std::uint64_t{1} << 22;  // FenceJournalConfig::range
  std::uint64_t fence_block = 4096;                      // EngineConfig::fence_block
  std::uint64_t journal_fail_permille = 0;               // journal writes whose sync fails
  std::int64_t journal_sync_max_us = 2'000;              // write + fsync latency
  // HTTP API clients (profile http): each keeps one HTTP session and sends every request on a
  // new connection to any shard; some give up waiting (and close the connection) now and then.
  std::size_t http_clients = 0;
  std::int64_t http_idle_timeout_ms = 20'000;  // --http-session-idle-timeout
  std::uint64_t http_give_up_permille = 0;     // requests whose client stops waiting early
  // Signals (listen, unlisten, signal): the share of client requests that are signal commands;
  // 0: none. The signal hub's rules are checked on every signal (sim/signal_checker.h).
  std::uint64_t signal_permille = 0;
  // Read-write locks (rl wl rr wr rn wn re we rw ww): the share of client requests that are
  // read-write lock commands; 0: none. Checked by sim/checker.h and sim/history.h.
  std::uint64_t rw_permille = 0;
  // EngineConfig::lock_delay (--lock-delay) of every engine, in milliseconds; 0: off. The
  // checker holds the engines to it (sim/checker.h, "lock-delay").
  std::int64_t lock_delay_ms = 0;
  // lost-notify (single-node profiles): the share of TCP clients that send `lost-notify _ on`
  // first on every connection; 0: none does. The others never get a `lost` line.
  std::uint64_t lost_notify_permille = 0;
  // The operator (single-node profiles): the mean gap between its force-releases over HTTP
  // (DELETE /v1/admin/...), in milliseconds; 0: no operator.
  std::int64_t force_interval_ms = 0;

  // One line naming every choice, printed with each seed.
  std::string describe() const;
};

// The settings of `seed` under `profile` (one of kProfiles).
Settings choose_settings(std::uint64_t seed, const std::string& profile);

}  // namespace turnstile::sim
