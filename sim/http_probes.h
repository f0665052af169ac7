// The HTTP routes a simulated client reaches beside its session's own (sim/http_workload.h):
// probes, stats and metrics, the OpenAPI document, inspection and fence checks of the keys the
// clients use, signal publishes, the membership routes (off on a single node), HEAD, and the
// router's 404 and 405. Each comes with the codes a correct server may answer it with.
//
// Thread affinity: free functions.
#pragma once

#include <string>
#include <vector>

#include "core/http_api.h"
#include "sim/prng.h"

namespace turnstile::sim {

struct HttpProbe {
  core::HttpApiRequest request;
  std::vector<int> codes;  // the answers a correct server may give
  std::string name;        // for the coverage
};

// One of the probes, drawn from `prng`; `token` is a token the client holds or last held (empty:
// none), which the fence checks ask about.
HttpProbe pick_http_probe(Prng& prng, const std::string& token);

}  // namespace turnstile::sim
