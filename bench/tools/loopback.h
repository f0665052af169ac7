// The load tools (turnstile-bench, turnstile-renew-load) aim only at loopback: they generate
// enough load to hurt, so they refuse any other address.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>

namespace turnstile::bench {

struct LoopbackAddress {
  sockaddr_storage address{};
  socklen_t length = 0;
};

// `host` (an IPv4 or IPv6 loopback literal, or "localhost") and `port` as a socket address;
// false, with `error` saying why, for any other host.
inline bool loopback_address(const std::string& host, int port, LoopbackAddress& out,
                             std::string& error) {
  out = LoopbackAddress{};
  const std::string literal = host == "localhost" ? "127.0.0.1" : host;
  const auto port_bytes = htons(static_cast<std::uint16_t>(port));
  auto* v4 = reinterpret_cast<sockaddr_in*>(&out.address);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&out.address);
  bool loopback = false;
  if (inet_pton(AF_INET, literal.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = port_bytes;
    out.length = sizeof(sockaddr_in);
    loopback = (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
  } else if (inet_pton(AF_INET6, literal.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = port_bytes;
    out.length = sizeof(sockaddr_in6);
    loopback = IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr);
  } else {
    error = "--host must be a loopback IP literal or localhost: " + host;
    return false;
  }
  if (!loopback) {
    error = "not a loopback address: " + host;
    return false;
  }
  return true;
}

}  // namespace turnstile::bench
