// The /metrics page in Prometheus's text format (version 0.0.4): the server's gauges and
// counters, every shard's HTTP requests and latencies, the TCP request latencies by command and,
// in cluster mode, the raft families (docs/operations.md lists them all).
//
// Thread affinity: the caller's thread; the sources are read through their own locks and atomics.
#pragma once

#include <string>

#include "core/stats.h"
#include "core/time.h"
#include "net/http_shared.h"
#include "net/shared_state.h"

namespace turnstile::net {

struct MetricsSources {
  const core::StatsSnapshot& snapshot;  // every shard's engines, merged (its totals are whole)
  SharedState& shared;
  HttpShared& http;
  bool ready = false;  // accepting work (and, in a cluster, knowing a leader)
  core::Duration uptime;
};

std::string metrics_text(const MetricsSources& sources);

}  // namespace turnstile::net
