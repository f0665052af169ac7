// The query of an operator's force-release, DELETE /v1/admin/{locks,semaphores,rwlocks}/{key}
// (docs/http-api.md, "Admin force-release"): which holders to free, and whether to end the key's
// lock-delay. Read with parse_http_query (core/http_query.h); a query that cannot be read, or
// a parameter with a bad value, is refused whole, so that the request changes nothing.
//
// Thread affinity: pure functions.
#pragma once

#include <cstdint>
#include <string_view>
#include <variant>

#include "core/http_query.h"

namespace turnstile::core {

struct ForceReleaseQuery {
  // `fence=N`, N a decimal 1..2^64-1: only the holder with that fence is freed; 0 (absent):
  // every holder.
  std::uint64_t fence = 0;
  // `clear_delay=true` (or `false`, the default): also end the key's running lock-delay and
  // start none for the holders freed.
  bool clear_delay = false;
};

// The first `fence` and the first `clear_delay` count; other names are ignored.
std::variant<HttpQueryError, ForceReleaseQuery> parse_force_release_query(std::string_view query);

}  // namespace turnstile::core
