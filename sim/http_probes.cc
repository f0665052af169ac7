#include "sim/http_probes.h"

#include <array>
#include <string_view>

namespace turnstile::sim {

namespace {

struct Route {
  std::string_view method;
  std::string_view path;  // "{key}" is one of the clients' keys
  std::string_view body;  // "{token}" is the client's token
  std::vector<int> codes;
};

// Inspection answers 404 for a key not in use; the membership routes need cluster mode (403).
// A signal's payload is "s0": the TCP clients listening to ">" take it as one of the signals
// sent (sim/workload.cc numbers theirs from s1).
const std::array<Route, 21> kRoutes = {{
    {"GET", "/health", "", {200}},
    {"GET", "/ready", "", {200}},
    {"GET", "/v1/openapi.json", "", {200}},
    {"GET", "/v1/stats", "", {200}},
    {"HEAD", "/v1/stats", "", {200}},
    {"GET", "/metrics", "", {200}},
    {"GET", "/v1/readindex", "", {404}},
    {"GET", "/v1/locks/{key}", "", {200, 404}},
    {"GET", "/v1/semaphores/{key}", "", {200, 404}},
    {"GET", "/v1/rwlocks/{key}", "", {200, 404}},
    {"POST", "/v1/locks/{key}/check", "{\"token\":\"{token}\"}", {200}},
    {"POST", "/v1/semaphores/{key}/check", "{\"token\":\"{token}\"}", {200}},
    {"POST", "/v1/rwlocks/{key}/check", "{\"token\":\"{token}\"}", {200}},
    {"POST", "/v1/locks/{key}/check", "{\"token\":7}", {400}},
    {"POST", "/v1/signals/{key}.news", "{\"payload\":\"s0\"}", {200}},
    {"POST", "/v1/admin/voters", "{}", {403}},
    {"DELETE", "/v1/admin/voters/2", "", {403}},
    {"POST", "/v1/admin/leader/transfer", "", {403}},
    {"GET", "/v1/nothing/here", "", {404}},
    {"PUT", "/v1/locks/{key}", "", {405}},
    {"POST", "/v1/sessions/0123/ping", "", {400}},
}};

std::string replace(std::string_view text, std::string_view marker, const std::string& with) {
  std::string out(text);
  const std::size_t at = out.find(marker);
  if (at != std::string::npos) out.replace(at, marker.size(), with);
  return out;
}

}  // namespace

HttpProbe pick_http_probe(Prng& prng, const std::string& token) {
  const Route& route = kRoutes[prng.below(kRoutes.size())];
  const std::string key = "h" + std::to_string(prng.below(3));
  HttpProbe probe;
  probe.request.method = route.method;
  probe.request.path = replace(route.path, "{key}", key);
  probe.request.body = replace(route.body, "{token}", token.empty() ? std::string(32, '0') : token);
  probe.codes = route.codes;
  probe.name = std::string(route.method) + " " + std::string(route.path);
  return probe;
}

}  // namespace turnstile::sim
