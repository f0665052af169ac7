// The CLI's HTTP call (cli_http.h): resolve and connect with a deadline, send the request, read
// the answer to EOF, and take its status line and headers apart (http_response.h).
#include "client/cli_http.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string_view>

#include "client/http_response.h"

namespace turnstile::client::cli {
namespace {

// A socket descriptor that closes itself.
struct OwnedFd {
  int fd = -1;
  ~OwnedFd() {
    if (fd >= 0) ::close(fd);
  }
};

bool wait_for(int fd, short events, Milliseconds wait) {
  pollfd poll_fd{fd, events, 0};
  return ::poll(&poll_fd, 1, static_cast<int>(wait.count())) == 1;
}

// Connects `socket` to `server` (its first address), waiting at most `connect_timeout`.
Result<void> connect_to(OwnedFd& socket, const Endpoint& server, Milliseconds connect_timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(server.port);
  if (getaddrinfo(server.host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr) {
    return Error{ErrorCode::kConnect, "cannot resolve " + server.host};
  }
  const int fd = ::socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, 0);
  socket.fd = fd;
  int flags = fd >= 0 ? ::fcntl(fd, F_GETFL) : -1;
  bool connected = flags >= 0 && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
  if (connected && ::connect(fd, found->ai_addr, found->ai_addrlen) != 0) {
    int error = 0;
    socklen_t length = sizeof error;
    connected = errno == EINPROGRESS && wait_for(fd, POLLOUT, connect_timeout) &&
                ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error == 0;
  }
  freeaddrinfo(found);
  if (!connected) return Error{ErrorCode::kConnect, "cannot connect to " + server.to_string()};
  return {};
}

Result<void> send_request(int fd, const std::string& request, Milliseconds timeout) {
  std::size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!wait_for(fd, POLLOUT, timeout)) return Error{ErrorCode::kTimeout, "send timed out"};
    } else {
      return Error{ErrorCode::kIo, "send failed: " + std::string(std::strerror(errno))};
    }
  }
  return {};
}

// The answer's bytes, up to EOF (or, when they do not start like HTTP, as soon as that shows).
Result<std::string> read_response(int fd, Milliseconds timeout) {
  std::string response;
  char buffer[4096];
  while (true) {
    if (!wait_for(fd, POLLIN, timeout)) return Error{ErrorCode::kTimeout, "no answer in time"};
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return Error{ErrorCode::kIo, "read failed: " + std::string(std::strerror(errno))};
    }
    response.append(buffer, static_cast<std::size_t>(n));
    if (response.size() > (1u << 20)) return Error{ErrorCode::kProtocol, "answer too long"};
    // Not HTTP (the TCP port, say, which keeps the connection open): say so at once.
    const std::string_view start = "HTTP/1.";
    if (response.compare(0, std::min(response.size(), start.size()), start, 0,
                         std::min(response.size(), start.size())) != 0) {
      break;
    }
  }
  return response;
}

}  // namespace

Result<HttpAnswer> http_call(const Endpoint& server, const std::string& method,
                             const std::string& path, const std::string& token,
                             const std::string& body, Milliseconds connect_timeout,
                             Milliseconds timeout) {
  OwnedFd socket;
  if (auto connected = connect_to(socket, server, connect_timeout); !connected) {
    return connected.error();
  }
  std::string request =
      method + " " + path + " HTTP/1.1\r\nHost: " + server.to_string() +
      "\r\nConnection: close\r\nAuthorization: Bearer " + token +
      "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\n\r\n" + body;
  if (auto sent = send_request(socket.fd, request, timeout); !sent) return sent.error();
  auto response = read_response(socket.fd, timeout);
  if (!response) return response.error();
  const std::optional<HttpResponseHead> head = parse_http_response_head(*response);
  if (!head) {
    return Error{ErrorCode::kProtocol, "not an HTTP answer (is --server the HTTP address?)"};
  }
  HttpAnswer answer;
  answer.status = head->status;
  answer.body = response->substr(head->size);
  if (const auto leader = head->headers.find("x-dflockd-leader"); leader != head->headers.end()) {
    answer.leader = leader->second;
  }
  return answer;
}

}  // namespace turnstile::client::cli
