#include "net/raft_address.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <uv.h>

#include <cstring>
#include <variant>

#include "core/address.h"

namespace turnstile::net {

std::optional<HostPort> split_host_port(std::string_view address) {
  const auto parsed = core::parse_host_port(address);
  const auto* parts = std::get_if<core::HostPort>(&parsed);
  if (parts == nullptr) return std::nullopt;
  return HostPort{parts->host, std::to_string(parts->port)};
}

std::string_view dial_address(std::string_view configured) {
  return configured.substr(0, configured.find('@'));
}

bool valid_configured_address(std::string_view configured) {
  const std::size_t at = configured.find('@');
  return split_host_port(dial_address(configured)) &&
         (at == std::string_view::npos || split_host_port(configured.substr(at + 1)));
}

bool parse_numeric(const HostPort& hp, sockaddr_storage* out) {
  const int port = std::stoi(hp.port);
  std::memset(out, 0, sizeof *out);
  if (uv_ip4_addr(hp.host.c_str(), port, reinterpret_cast<sockaddr_in*>(out)) == 0) return true;
  if (uv_ip6_addr(hp.host.c_str(), port, reinterpret_cast<sockaddr_in6*>(out)) == 0) return true;
  return false;
}

std::string address_name(const sockaddr* addr) {
  char host[INET6_ADDRSTRLEN] = {0};
  if (addr->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(addr);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    return std::string(host) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (addr->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(addr);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    return "[" + std::string(host) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  return "?";
}

std::string source_key(const sockaddr* addr) {
  char text[INET6_ADDRSTRLEN] = {0};
  if (addr->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(addr);
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
    return text;
  }
  if (addr->sa_family != AF_INET6) return "";
  const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr;
  if (IN6_IS_ADDR_V4MAPPED(&a)) {
    in_addr v4{};
    std::memcpy(&v4, a.s6_addr + 12, sizeof v4);
    inet_ntop(AF_INET, &v4, text, sizeof text);
    return text;
  }
  in6_addr prefix{};
  std::memcpy(prefix.s6_addr, a.s6_addr, 8);  // the /64: the rest stays zero
  inet_ntop(AF_INET6, &prefix, text, sizeof text);
  return std::string(text) + "/64";
}

std::optional<std::string> source_key_of(std::string_view configured) {
  const std::optional<HostPort> hp = split_host_port(dial_address(configured));
  sockaddr_storage addr{};
  if (!hp || !parse_numeric(*hp, &addr)) return std::nullopt;
  return source_key(reinterpret_cast<const sockaddr*>(&addr));
}

}  // namespace turnstile::net
