// Disk: the simulated disk under the fence state file (--fence-state-file): its durable bytes,
// the write in the page cache whose fsync has not returned, and what a crash or a failed sync
// leaves behind (nothing, a torn prefix with old bytes or garbage after it, or the whole write).
// Every outcome is drawn from the seed's disk stream (dice()), the sync latencies and failures the
// server's journal driver draws included, so a seed replays exactly.
//
// Thread affinity: single-threaded, owned by one run.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/fence.h"
#include "sim/digest.h"
#include "sim/prng.h"
#include "sim/settings.h"

namespace turnstile::sim {

class Disk {
 public:
  // `digest` and `coverage` are the run's: what happened to each write is part of the trace.
  Disk(std::uint64_t seed, Digest& digest, std::map<std::string, std::uint64_t>& coverage);

  std::vector<std::uint8_t> bytes;          // durable; empty: no file (or an empty one)
  std::optional<core::JournalWrite> dirty;  // written, fsync in progress
  std::uint64_t synced_writes = 0;          // writes to this file acknowledged durable

  Prng& dice() { return prng_; }
  void apply(const core::JournalWrite& write);  // the write's bytes reach the disk
  void tear(const core::JournalWrite& write);   // a prefix does, the rest is old or garbage
  void fail(const core::JournalWrite& write);   // the sync failed: the slot may be torn
  void crash();                                 // the un-synced write is lost, torn or whole

 private:
  Prng prng_;
  Digest& digest_;
  std::map<std::string, std::uint64_t>& coverage_;
};

}  // namespace turnstile::sim
