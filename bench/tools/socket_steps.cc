// The socket steps of turnstile-bench's loads (socket_steps.h).
#include "bench/tools/socket_steps.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "bench/tools/bench_options.h"

namespace turnstile::bench {

void fatal(const char* what) {
  std::fprintf(stderr, "turnstile-bench: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

LoopbackAddress resolve_loopback(const std::string& host, int port) {
  LoopbackAddress resolved;
  std::string error;
  if (!loopback_address(host, port, resolved, error)) usage_error(error);
  return resolved;
}

void epoll_add(int epoll_fd, int fd, std::uint64_t tag) {
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = tag;
  epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &event);
}

std::span<const epoll_event> poll_once(int epoll_fd, std::vector<epoll_event>& events) {
  const int count = epoll_wait(epoll_fd, events.data(), static_cast<int>(events.size()), 50);
  if (count < 0) {
    if (errno == EINTR) return {};
    fatal("epoll_wait");
  }
  return {events.data(), static_cast<std::size_t>(count)};
}

std::string send_pending(int fd, std::string_view out, std::size_t& sent) {
  while (sent < out.size()) {
    const ssize_t written = ::send(fd, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (written < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return std::string("send: ") + std::strerror(errno);
    }
    sent += static_cast<std::size_t>(written);
  }
  return {};
}

void watch_writes(int epoll_fd, int fd, std::uint64_t tag, bool pending, bool& watching) {
  if (pending == watching) return;
  watching = pending;
  epoll_event event{};
  event.events = EPOLLIN | (pending ? EPOLLOUT : 0u);
  event.data.u64 = tag;
  epoll_ctl(epoll_fd, EPOLL_CTL_MOD, fd, &event);
}

std::string receive_available(int fd, std::string& in) {
  char buffer[65536];
  for (;;) {
    const ssize_t got = ::recv(fd, buffer, sizeof buffer, 0);
    if (got > 0) {
      in.append(buffer, static_cast<std::size_t>(got));
      if (static_cast<std::size_t>(got) < sizeof buffer) return {};
      continue;
    }
    if (got == 0) return "server closed the connection";
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return {};
    return std::string("recv: ") + std::strerror(errno);
  }
}

std::string await_ready(int fd, bool sending, TimePoint deadline, std::string_view late) {
  if (errno == EINTR) return {};
  if (errno != EAGAIN && errno != EWOULDBLOCK) {
    return std::string(sending ? "send: " : "recv: ") + std::strerror(errno);
  }
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return std::string(late);
  pollfd waiting{fd, static_cast<short>(sending ? POLLOUT : POLLIN), 0};
  ::poll(&waiting, 1, static_cast<int>(left));
  return {};
}

void raise_descriptor_limit(std::uint64_t needed) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= needed) return;
  const rlim_t wanted =
      limit.rlim_max == RLIM_INFINITY ? needed : std::min<rlim_t>(needed, limit.rlim_max);
  if (wanted > limit.rlim_cur) {
    limit.rlim_cur = wanted;
    (void)setrlimit(RLIMIT_NOFILE, &limit);
  }
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < needed) {
    std::fprintf(
        stderr,
        "turnstile-bench: warning: %llu descriptors needed, the limit is %llu (hard %llu)\n",
        static_cast<unsigned long long>(needed), static_cast<unsigned long long>(limit.rlim_cur),
        static_cast<unsigned long long>(limit.rlim_max));
  }
}

}  // namespace turnstile::bench
