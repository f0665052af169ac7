// The deterministic simulator of turnstile: one server process of N shards (real core::Engine,
// core::Router, core::HttpSessionRouter and core::Session objects, keys placed with
// core::shard_of as in production) and simulated clients speaking the real wire protocol, or
// using HTTP sessions, through a simulated network, all in one thread with virtual time that
// jumps from event to event. Every choice derives from one 64-bit seed; the same seed gives the
// same trace and the same digest. See docs/simulator.md.
//
// Thread affinity: single-threaded; one run owns everything it creates.
#pragma once

#include <string>
#include <vector>

#include "sim/run.h"

namespace turnstile::sim {

// The profiles `--profile` accepts.
const std::vector<std::string>& profile_names();
bool is_profile(const std::string& name);

// Runs one seed to the end (or to the first broken invariant).
Result run_simulation(const Options& options);

}  // namespace turnstile::sim
