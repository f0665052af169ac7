// Making a listening socket for turnstiled's listeners (net/listener.h).
#include "net/listener.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "net/log.h"

namespace turnstile::net {
namespace {

constexpr int kBacklog = 1024;

std::string address_text(const sockaddr_storage& address) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&address);
    inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
    return "[" + std::string(text) + "]:" + std::to_string(ntohs(v6->sin6_port));
  }
  const auto* v4 = reinterpret_cast<const sockaddr_in*>(&address);
  inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
  return std::string(text) + ":" + std::to_string(ntohs(v4->sin_port));
}

// A socket bound to `address` and listening; -1 with errno set when a step fails.
int bind_and_listen(const addrinfo& address, bool keepalive) {
  const int fd = ::socket(address.ai_family, address.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const int one = 1;
  const bool ok = (!keepalive || setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one) == 0) &&
                  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
                  ::bind(fd, address.ai_addr, address.ai_addrlen) == 0 &&
                  ::listen(fd, kBacklog) == 0;
  if (ok) return fd;
  const int error = errno;
  ::close(fd);
  errno = error;
  return -1;
}

}  // namespace

std::optional<ListeningSocket> open_listening_socket(const ListenerSpec& spec) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(spec.port);
  const int error = getaddrinfo(spec.host.c_str(), port.c_str(), &hints, &found);
  if (error != 0 || found == nullptr) {
    log_event(LogLevel::kError, "listen_failed",
              "cannot resolve " + std::string(spec.host_flag) + " " + spec.host + ": " +
                  gai_strerror(error),
              {{"protocol", spec.protocol},
               {"host", spec.host},
               {"port", spec.port},
               {"error", gai_strerror(error)}});
    return std::nullopt;
  }
  const int fd = bind_and_listen(*found, spec.keepalive);
  const int listen_error = errno;
  freeaddrinfo(found);
  if (fd < 0) {
    const std::string why = std::strerror(listen_error);
    log_event(
        LogLevel::kError, "listen_failed",
        "cannot listen " + std::string(spec.purpose) + "on " + spec.host + " port " +
            std::to_string(spec.port) + ": " + why,
        {{"protocol", spec.protocol}, {"host", spec.host}, {"port", spec.port}, {"error", why}});
    return std::nullopt;
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
  return ListeningSocket{fd, address_text(bound)};
}

}  // namespace turnstile::net
