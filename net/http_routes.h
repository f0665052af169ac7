// The HTTP API's routes (docs/http-api.md, reference 3.4): one table that the router, the
// metrics labels and the OpenAPI drift test (tests/net/http_routes_test.cc) all read, so the
// routes served and docs/openapi.json cannot drift apart unnoticed.
//
// Thread affinity: constants, safe anywhere.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

namespace turnstile::net {

enum class HttpRoute {
  kHealth,
  kReady,
  kMetrics,
  kOpenApi,
  kStats,
  kSessionCreate,
  kSessionDelete,
  kSessionPing,
  kLockAcquire,
  kLockRelease,
  kLockRenew,
  kLockEnqueue,
  kLockWait,
  kSemAcquire,
  kSemRelease,
  kSemRenew,
  kSemEnqueue,
  kSemWait,
};

struct HttpRouteSpec {
  std::string_view method;   // GET, POST or DELETE
  std::string_view pattern;  // path with {key} / {id} parameters, as in the OpenAPI document
  HttpRoute route;
  bool needs_auth;  // bearer auth when --auth-token is set
  bool rate_limited;
};

inline constexpr std::array<HttpRouteSpec, 18> kHttpRoutes = {{
    {"GET", "/health", HttpRoute::kHealth, false, false},
    {"GET", "/ready", HttpRoute::kReady, false, false},
    {"GET", "/metrics", HttpRoute::kMetrics, true, true},
    {"GET", "/v1/openapi.json", HttpRoute::kOpenApi, false, true},
    {"GET", "/v1/stats", HttpRoute::kStats, true, true},
    {"POST", "/v1/sessions", HttpRoute::kSessionCreate, true, true},
    {"DELETE", "/v1/sessions/{id}", HttpRoute::kSessionDelete, true, true},
    {"POST", "/v1/sessions/{id}/ping", HttpRoute::kSessionPing, true, true},
    {"POST", "/v1/locks/{key}", HttpRoute::kLockAcquire, true, true},
    {"POST", "/v1/locks/{key}/release", HttpRoute::kLockRelease, true, true},
    {"POST", "/v1/locks/{key}/renew", HttpRoute::kLockRenew, true, true},
    {"POST", "/v1/locks/{key}/enqueue", HttpRoute::kLockEnqueue, true, true},
    {"POST", "/v1/locks/{key}/wait", HttpRoute::kLockWait, true, true},
    {"POST", "/v1/semaphores/{key}", HttpRoute::kSemAcquire, true, true},
    {"POST", "/v1/semaphores/{key}/release", HttpRoute::kSemRelease, true, true},
    {"POST", "/v1/semaphores/{key}/renew", HttpRoute::kSemRenew, true, true},
    {"POST", "/v1/semaphores/{key}/enqueue", HttpRoute::kSemEnqueue, true, true},
    {"POST", "/v1/semaphores/{key}/wait", HttpRoute::kSemWait, true, true},
}};

}  // namespace turnstile::net
