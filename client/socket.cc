// Socket (socket.h): sends and reads over plain TCP or TLS, each bounded by a deadline.
#include "client/socket.h"

#include <openssl/err.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace turnstile::client::detail {
namespace {

// Milliseconds left until `deadline`, clamped to [0, INT_MAX] for poll().
int poll_timeout(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<Milliseconds>(deadline - Clock::now()).count() + 1;
  if (left <= 0) return 0;
  return left > 1'000'000'000 ? 1'000'000'000 : static_cast<int>(left);
}

}  // namespace

bool wait_fd(int fd, short events, Clock::time_point deadline) {
  while (true) {
    pollfd entry{fd, events, 0};
    const int ready = ::poll(&entry, 1, poll_timeout(deadline));
    if (ready > 0) return true;
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0 && Clock::now() < deadline) continue;
    return false;
  }
}

std::string errno_text(int error_number) { return std::strerror(error_number); }

std::string openssl_errors() {
  std::string text;
  while (const unsigned long code = ERR_get_error()) {
    char buffer[256];
    ERR_error_string_n(code, buffer, sizeof buffer);
    if (!text.empty()) text += "; ";
    text += buffer;
  }
  return text.empty() ? std::string("unknown TLS error") : text;
}

void Socket::close() {
  if (tls != nullptr) {
    SSL_free(tls);
    tls = nullptr;
  }
  if (tls_context != nullptr) {
    SSL_CTX_free(tls_context);
    tls_context = nullptr;
  }
  if (fd >= 0) {
    ::close(fd);
    fd = -1;
  }
}

Result<void> Socket::send_all(std::string_view bytes, Clock::time_point deadline) {
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    const std::size_t chunk = bytes.size() - sent;
    short want = POLLOUT;
    if (tls != nullptr) {
      ERR_clear_error();
      const int written = SSL_write(tls, bytes.data() + sent,
                                    static_cast<int>(chunk > 1U << 30 ? 1U << 30 : chunk));
      if (written > 0) {
        sent += static_cast<std::size_t>(written);
        continue;
      }
      const int error = SSL_get_error(tls, written);
      if (error == SSL_ERROR_WANT_READ) {
        want = POLLIN;
      } else if (error != SSL_ERROR_WANT_WRITE) {
        return make_error(ErrorCode::kIo, "TLS write failed: " + openssl_errors());
      }
    } else {
      const ssize_t written = ::send(fd, bytes.data() + sent, chunk, MSG_NOSIGNAL);
      if (written > 0) {
        sent += static_cast<std::size_t>(written);
        continue;
      }
      if (written < 0 && errno == EINTR) continue;
      if (written < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
        return make_error(ErrorCode::kIo, "send: " + errno_text(errno));
      }
    }
    if (!wait_fd(fd, want, deadline)) return make_error(ErrorCode::kIo, "send timed out");
  }
  return {};
}

Result<void> Socket::fill(std::string& buffer, Clock::time_point deadline, bool* timed_out) {
  char chunk[16384];
  while (true) {
    short want = POLLIN;
    if (tls != nullptr) {
      ERR_clear_error();
      const int received = SSL_read(tls, chunk, sizeof chunk);
      if (received > 0) {
        buffer.append(chunk, static_cast<std::size_t>(received));
        return {};
      }
      const int error = SSL_get_error(tls, received);
      if (error == SSL_ERROR_ZERO_RETURN) {
        return make_error(ErrorCode::kIo, "connection closed by the server");
      }
      if (error == SSL_ERROR_WANT_WRITE) {
        want = POLLOUT;
      } else if (error != SSL_ERROR_WANT_READ) {
        return make_error(ErrorCode::kIo, "connection closed or failed (TLS)");
      }
    } else {
      const ssize_t received = ::recv(fd, chunk, sizeof chunk, 0);
      if (received > 0) {
        buffer.append(chunk, static_cast<std::size_t>(received));
        return {};
      }
      if (received == 0) return make_error(ErrorCode::kIo, "connection closed by the server");
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        return make_error(ErrorCode::kIo, "recv: " + errno_text(errno));
      }
    }
    if (!wait_fd(fd, want, deadline)) {
      if (timed_out != nullptr) *timed_out = true;
      return make_error(ErrorCode::kIo, "no reply from the server in time");
    }
  }
}

}  // namespace turnstile::client::detail
