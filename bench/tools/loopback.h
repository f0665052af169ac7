// The load tools (turnstile-bench, turnstile-renew-load) aim only at loopback: they generate
// enough load to hurt, so they refuse any other address. connect_to() opens their connections.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

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

// A TCP connection to `address` with TCP_NODELAY, non-blocking once connected; -1 (errno set)
// when it cannot connect.
inline int connect_to(const LoopbackAddress& address) {
  const int fd = ::socket(address.address.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address.address), address.length) != 0) {
    ::close(fd);
    return -1;
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  const int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  return fd;
}

}  // namespace turnstile::bench
