// The cluster profiles of turnstile-sim (`cluster-3`, `cluster-5`; docs/simulator.md): a
// RaftCluster (sim/raft_cluster.h) of 3 or 5 replicas driven by a seed. Simulated sessions propose
// log commands (locks and semaphores, blocking or not, two-phase, releases and renewals with
// their own, stale and foreign tokens, cancels and closes) through whichever node leads; the leader
// proposes a tick at the engine's next deadline; faults kill and revive nodes (the leader
// included), cut and heal links, and let fixture time run. After every step every live replica is
// checked: replicas at the same applied index have the same digest, no resource has more holders
// than its limit, every grant's fence is above every earlier grant's on its key across every
// failover, no entry or snapshot was refused. Raft snapshots the replicas every 64 entries and
// nodes that fall behind restore one. At the end every fault heals and every replica must reach the
// same digest.
//
// Thread affinity: single-threaded; one run owns everything it creates.
#pragma once

#include <string>

#include "sim/run.h"

namespace turnstile::sim {

// Whether `profile` is a cluster profile (run by run_cluster_simulation).
bool is_cluster_profile(const std::string& profile);

// Runs one seed of a cluster profile: options.events steps, then the heal.
Result run_cluster_simulation(const Options& options);

}  // namespace turnstile::sim
