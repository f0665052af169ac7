// FaultInjector: the faults of a seed's faulty phase (docs/simulator.md, "What is simulated"). At
// each of its turns, spaced by the seed's fault interval, it picks one of the faults the swarm
// settings switched on and that can happen now: a crash of the server process, a pause (SIGSTOP)
// or a long stop that ends every lease at once, an hour's step of the wall clock, a backward step
// of the process's monotonic clock, or the reset of one client's connection. It heals, drawing no
// more, once the liveness phase begins.
//
// It owns nothing but its turns (one Fault event always pending until the run heals). It talks to
// the ServerProcess (crash, pause, clock back), the Workload (one client's connection reset) and
// the RunContext (the wall clock, the digest, the coverage); it draws from the seed's fault
// stream, which the server process's restart delays share.
//
// Thread affinity: single-threaded, owned by one run.
#pragma once

#include "sim/context.h"
#include "sim/prng.h"
#include "sim/server.h"
#include "sim/workload.h"

namespace turnstile::sim {

class FaultInjector {
 public:
  FaultInjector(RunContext& run, ServerProcess& server, Workload& workload, Prng& faults)
      : run_(run), server_(server), workload_(workload), faults_(faults) {}

  void start();     // schedules the first turn
  void on_fault();  // a turn: schedules the next, then injects one fault (if any can happen)

 private:
  RunContext& run_;
  ServerProcess& server_;
  Workload& workload_;
  Prng& faults_;
};

}  // namespace turnstile::sim
