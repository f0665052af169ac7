#include "net/huge_pages.h"

namespace turnstile::net {

std::optional<std::string> huge_page_tunables(bool enabled, std::string_view thp_enabled,
                                              const std::optional<std::string>& current) {
  if (!enabled) return std::nullopt;
  // The kernel marks the mode in force with brackets: "always [madvise] never".
  const bool known = thp_enabled.find("[always]") != std::string_view::npos ||
                     thp_enabled.find("[madvise]") != std::string_view::npos;
  if (!known) return std::nullopt;
  if (current && current->find("glibc.malloc.hugetlb") != std::string::npos) return std::nullopt;
  if (!current || current->empty()) return std::string(kHugePageTunables);
  return *current + ":" + std::string(kHugePageTunables);
}

}  // namespace turnstile::net
