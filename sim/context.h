// RunContext: what every part of one run shares (docs/simulator.md, "How it is built"): the
// options and the seed's settings, the event queue and virtual time, the digest of the trace, the
// result being filled in (coverage, crashes, grants seen), the first broken invariant, the phase
// of the run (faulty, liveness, draining) and the simulated wall clock.
//
// It is a leaf: it knows none of the parts. The parts (the server process, the workload, the fault
// injector) each hold a reference to it; the world (sim/simulator.cc) owns it and them.
//
// Thread affinity: single-threaded, owned by one run.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "sim/digest.h"
#include "sim/event.h"
#include "sim/run.h"
#include "sim/settings.h"

namespace turnstile::sim {

struct RunContext {
  RunContext(const Options& run_options, Settings run_settings)
      : options(run_options), settings(std::move(run_settings)) {}

  const Options options;
  const Settings settings;

  EventQueue queue;
  std::int64_t now = 0;  // virtual nanoseconds: the time of the event being handled
  Digest digest;
  Result result;
  bool failed = false;  // an invariant broke: the run stops at the end of this event

  // The phases after the faulty one: in liveness faults have healed and clients issue nothing
  // new; in draining they close their connections.
  bool liveness = false;
  bool draining = false;

  // The simulated wall clock: kWallStart + now + wall_offset (the wall-step fault moves it).
  std::int64_t wall_offset = 0;
  bool wall_went_back = false;  // a backward wall step happened at some point

  std::int64_t wall_ns() const { return kWallStart + now + wall_offset; }
  void schedule(std::int64_t at, EventPayload what) { queue.schedule(at, std::move(what)); }
  // Records the first broken invariant; later ones are ignored.
  void fail(const std::string& invariant, const std::string& detail) {
    if (failed) return;
    failed = true;
    result.ok = false;
    result.invariant = invariant;
    result.detail = detail;
  }
};

}  // namespace turnstile::sim
