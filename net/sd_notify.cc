#include "net/sd_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>

namespace turnstile::net {

bool notify_socket(const std::string& socket_path, std::string_view state) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (socket_path.empty() || socket_path.size() > sizeof(address.sun_path) - 1) return false;
  if (socket_path[0] != '/' && socket_path[0] != '@') return false;
  std::memcpy(address.sun_path, socket_path.data(), socket_path.size());
  // An abstract socket's name starts with a NUL byte and is exactly as long as given.
  if (socket_path[0] == '@') address.sun_path[0] = '\0';
  const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + socket_path.size());
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const ssize_t sent = ::sendto(fd, state.data(), state.size(), MSG_NOSIGNAL,
                                reinterpret_cast<const sockaddr*>(&address), length);
  ::close(fd);
  return sent == static_cast<ssize_t>(state.size());
}

bool notify_service_manager(std::string_view state) {
  const char* path = std::getenv("NOTIFY_SOCKET");
  if (path == nullptr || *path == '\0') return false;
  return notify_socket(path, state);
}

}  // namespace turnstile::net
