#include "core/http_force_query.h"

#include <optional>
#include <string>
#include <vector>

namespace turnstile::core {

std::variant<HttpQueryError, ForceReleaseQuery> parse_force_release_query(std::string_view query) {
  std::variant<HttpQueryError, std::vector<HttpQueryPair>> parsed = parse_http_query(query);
  if (auto* error = std::get_if<HttpQueryError>(&parsed)) return std::move(*error);
  const std::vector<HttpQueryPair>& pairs = std::get<std::vector<HttpQueryPair>>(parsed);
  ForceReleaseQuery out;
  if (const std::optional<std::string> found = first_query_value(pairs, "fence")) {
    const HttpQueryError bad{
        "query parameter \"fence\" must be a decimal integer between 1 and "
        "18446744073709551615"};
    const std::string& value = *found;
    if (value.empty() || value.size() > 20) return bad;
    std::uint64_t fence = 0;
    for (char c : value) {
      if (c < '0' || c > '9') return bad;
      const auto digit = static_cast<std::uint64_t>(c - '0');
      if (fence > (UINT64_MAX - digit) / 10) return bad;
      fence = fence * 10 + digit;
    }
    if (fence == 0) return bad;
    out.fence = fence;
  }
  if (const std::optional<std::string> found = first_query_value(pairs, "clear_delay")) {
    if (*found == "true") {
      out.clear_delay = true;
    } else if (*found != "false") {
      return HttpQueryError{"query parameter \"clear_delay\" must be true or false"};
    }
  }
  return out;
}

}  // namespace turnstile::core
