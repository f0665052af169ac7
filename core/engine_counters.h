// EngineCounters: what an engine counted since it started. Its own header because both the engine
// (core/engine.h) and the snapshot format that carries the counters (core/engine_snapshot.h)
// need it, and the snapshot format sits below the engine.
//
// Thread affinity: a plain value.
#pragma once

#include <cstdint>

namespace turnstile::core {

struct EngineCounters {
  std::uint64_t clock_regressions = 0;  // inputs whose `now` was behind the largest seen
  std::uint64_t grants = 0;             // fences minted
  std::uint64_t lease_expiries = 0;
  std::uint64_t wait_timeouts = 0;
  std::uint64_t resources_collected = 0;
  // Grants refused because no fence was available: the space is used up, or the FenceSource
  // had none (with the fence journal: none durable yet).
  std::uint64_t fence_exhausted = 0;
  std::uint64_t forced_releases = 0;  // holders freed by an operator
};

}  // namespace turnstile::core
