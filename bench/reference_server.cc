// turnstile-refserver: the do-nothing reference server. It frames requests exactly as turnstiled
// does (three '\n'-terminated lines, one trailing '\r' stripped) and answers each one at once with
// a canned reply of the right shape, keeping no lock state. What it costs per request is the
// floor any server on this machine pays for sockets and framing; turnstile-bench measures both and
// bench/compare.py reports turnstiled as a ratio of it.
//
//   l sl w sw -> ok <32 hex token> 33        e se -> acquired <32 hex token> 33
//   r sr      -> ok                          n sn -> ok 33
//   ping auth -> ok                          stats -> ok {}
//   anything else -> error
// Tokens carry a fence from one process-wide counter, so fences of every key strictly increase
// and turnstile-bench's fence checks pass; that counter is the only state beyond the framing.
// The lease is always 33 (the default lease turnstiled reports when none is requested).
//
// Threads: --threads event loops, each with its own epoll set; they share the listening socket
// (EPOLLEXCLUSIVE) and a connection stays on the thread that accepted it. Loopback only. Prints
// "listening on ADDR:PORT" on stdout once it accepts (use --port 0 for an ephemeral port).
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "bench/reference_server_args.h"

namespace turnstile::bench {
namespace {

std::atomic<std::uint64_t> g_fence{0};

struct Connection {
  int fd = -1;
  int line = 0;  // which line of the request is being read: 0 command, 1 key, 2 arg
  std::uint8_t command_length = 0;  // bytes of the command line seen so far (capped)
  char command[8] = {};             // the first bytes of the command line
  std::string pending;              // reply bytes the socket did not take yet
};

constexpr std::uint8_t kCommandMax = sizeof(Connection::command);

// Appends the canned reply to the command in `command` (length `length`, '\r' already stripped).
void append_reply(std::string& out, const char* command, std::size_t length, bool overflow) {
  const std::string_view name =
      overflow ? std::string_view("?") : std::string_view(command, length);
  const auto grant = [&out](std::string_view status) {
    static constexpr char kHex[] = "0123456789abcdef";
    const std::uint64_t fence = g_fence.fetch_add(1, std::memory_order_relaxed) + 1;
    char token[32];
    for (int i = 0; i < 16; ++i) token[i] = kHex[(fence >> (60 - 4 * i)) & 0xf];
    std::memcpy(token + 16, "5a1b5a1b5a1b5a1b", 16);
    out += status;
    out += ' ';
    out.append(token, sizeof token);
    out += " 33\n";
  };
  if (name == "l" || name == "sl" || name == "w" || name == "sw") {
    grant("ok");
  } else if (name == "e" || name == "se") {
    grant("acquired");
  } else if (name == "r" || name == "sr" || name == "ping" || name == "auth") {
    out += "ok\n";
  } else if (name == "n" || name == "sn") {
    out += "ok 33\n";
  } else if (name == "stats") {
    out += "ok {}\n";
  } else {
    out += "error\n";
  }
}

class Loop {
 public:
  explicit Loop(int listen_fd) : listen_fd_(listen_fd) {}

  void run() {
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    epoll_event event{};
    event.events = EPOLLIN | EPOLLEXCLUSIVE;
    event.data.ptr = nullptr;  // the listener
    if (epoll_fd_ < 0 || epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &event) != 0) {
      std::perror("turnstile-refserver: epoll");
      std::exit(1);
    }
    epoll_event events[256];
    for (;;) {
      const int count = epoll_wait(epoll_fd_, events, 256, -1);
      for (int i = 0; i < count; ++i) {
        auto* connection = static_cast<Connection*>(events[i].data.ptr);
        if (connection == nullptr) {
          accept_all();
        } else if (events[i].events & EPOLLOUT && !connection->pending.empty()) {
          flush_pending(*connection);
        } else {
          serve(*connection);
        }
      }
    }
  }

 private:
  void accept_all() {
    for (;;) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      auto* connection = new Connection;
      connection->fd = fd;
      epoll_event event{};
      event.events = EPOLLIN;
      event.data.ptr = connection;
      epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event);
    }
  }

  void serve(Connection& connection) {
    out_.clear();
    for (;;) {
      const ssize_t got = ::recv(connection.fd, buffer_, sizeof buffer_, 0);
      if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
        close_connection(connection);
        return;
      }
      if (got < 0) break;
      frame(connection, buffer_, static_cast<std::size_t>(got));
      if (static_cast<std::size_t>(got) < sizeof buffer_) break;
    }
    if (out_.empty()) return;
    if (!connection.pending.empty()) {
      connection.pending += out_;  // still blocked on an earlier write: keep the order
      return;
    }
    const ssize_t sent = ::send(connection.fd, out_.data(), out_.size(), MSG_NOSIGNAL);
    const std::size_t done = sent > 0 ? static_cast<std::size_t>(sent) : 0;
    if (sent < 0 && errno != EAGAIN) {
      close_connection(connection);
      return;
    }
    if (done < out_.size()) {
      connection.pending.assign(out_, done);
      watch_output(connection, true);
    }
  }

  // Walks the bytes: only the command line is looked at; key and argument lines are skipped.
  void frame(Connection& connection, const char* data, std::size_t size) {
    const char* end = data + size;
    while (data < end) {
      const auto* newline =
          static_cast<const char*>(std::memchr(data, '\n', static_cast<std::size_t>(end - data)));
      const char* line_end = newline != nullptr ? newline : end;
      if (connection.line == 0) {
        for (const char* p = data; p < line_end; ++p) {
          if (connection.command_length < kCommandMax) {
            connection.command[connection.command_length] = *p;
          }
          if (connection.command_length <= kCommandMax) ++connection.command_length;
        }
      }
      if (newline == nullptr) return;
      data = newline + 1;
      if (++connection.line < 3) continue;
      std::size_t length = connection.command_length;
      const bool overflow = length > kCommandMax;
      if (!overflow && length > 0 && connection.command[length - 1] == '\r') --length;
      append_reply(out_, connection.command, length, overflow);
      connection.line = 0;
      connection.command_length = 0;
    }
  }

  void flush_pending(Connection& connection) {
    const ssize_t sent =
        ::send(connection.fd, connection.pending.data(), connection.pending.size(), MSG_NOSIGNAL);
    if (sent < 0 && errno != EAGAIN) {
      close_connection(connection);
      return;
    }
    if (sent > 0) connection.pending.erase(0, static_cast<std::size_t>(sent));
    if (connection.pending.empty()) watch_output(connection, false);
  }

  void watch_output(Connection& connection, bool on) {
    epoll_event event{};
    event.events = EPOLLIN | (on ? EPOLLOUT : 0u);
    event.data.ptr = &connection;
    epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, connection.fd, &event);
  }

  void close_connection(Connection& connection) {
    ::close(connection.fd);  // also removes it from the epoll set
    delete &connection;
  }

  int listen_fd_;
  int epoll_fd_ = -1;
  char buffer_[65536];
  std::string out_;
};

}  // namespace
}  // namespace turnstile::bench

int main(int argc, char** argv) {
  return turnstile::bench::run_reference_server(argc, argv, "turnstile-refserver", 6389,
                                                [](int fd) { turnstile::bench::Loop(fd).run(); });
}
