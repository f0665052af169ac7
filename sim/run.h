// What one simulator run is asked (Options) and what it answers (Result): the simulator's public
// types, apart from run_simulation() so that the parts of a run (sim/context.h) can hold them
// without including the world above them.
//
// Thread affinity: plain values.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace turnstile::sim {

struct Options {
  std::uint64_t seed = 1;
  std::uint64_t events = 20'000;  // events of the faulty phase; the liveness phase follows
  std::string profile = "default";
  bool trace = false;  // print every event (debugging a failing seed)
};

struct Result {
  bool ok = true;
  std::string invariant;  // the broken invariant when !ok
  std::string detail;
  std::string settings;           // the swarm settings chosen for the seed
  std::uint64_t digest = 0;       // XXH3 over the trace of every event
  std::uint64_t events_run = 0;   // all phases
  std::uint64_t grants_seen = 0;  // grants observed by the checker
  std::uint64_t crashes = 0;
  std::uint64_t keys_checked = 0;        // (life, key) histories checked for linearizability
  std::uint64_t inconclusive = 0;        // of those, searches that hit their step budget
  std::uint64_t operations_checked = 0;  // operations in those histories
  // How often rare paths were hit (FoundationDB's TEST() counters): give-backs, cancellations,
  // lease expiries, wait timeouts, GC, clock regressions, pauses, wall steps...
  std::map<std::string, std::uint64_t> coverage;
};

}  // namespace turnstile::sim
