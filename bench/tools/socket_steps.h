// The socket steps turnstile-bench's loads share: the loopback target, the non-blocking send and
// receive of the load loops, the epoll bookkeeping around them, the wait of a blocking-style
// exchange outside the loops, and the descriptor limit all the connections need.
//
// Thread affinity: none; every function works on the descriptors it is given.
#pragma once

#include <sys/epoll.h>
#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "bench/tools/loopback.h"

namespace turnstile::bench {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;

// Prints "turnstile-bench: <what>: <errno text>" and exits 1.
[[noreturn]] void fatal(const char* what);

// Loopback only (bench/tools/loopback.h): the address, or a usage error.
LoopbackAddress resolve_loopback(const std::string& host, int port);

// Adds `fd` to `epoll_fd` for reading, with `tag` as its event data.
void epoll_add(int epoll_fd, int fd, std::uint64_t tag);

// One epoll_wait of `epoll_fd` for at most 50 ms into `events`: what came, in order (nothing when
// a signal interrupted it).
std::span<const epoll_event> poll_once(int epoll_fd, std::vector<epoll_event>& events);

// The steps of a ready connection, as both load loops take them: its pending output first, then
// (unless that retired it: `active`) what it can read, or its hang-up or error.
template <typename Flush, typename Read>
void on_ready(const epoll_event& event, const bool& active, Flush flush, Read read) {
  if (event.events & EPOLLOUT) flush();
  if (active && (event.events & (EPOLLIN | EPOLLHUP | EPOLLERR))) read();
}

// Sends `out` from `sent` on until the socket refuses more. An error text on failure, else "".
std::string send_pending(int fd, std::string_view out, std::size_t& sent);

// Watches `fd` for writability in `epoll_fd` exactly while `pending` (`watching` tracks it).
void watch_writes(int epoll_fd, int fd, std::uint64_t tag, bool pending, bool& watching);

// Appends what the socket has to `in`, until it would block. An error text on failure or when
// the server closed the connection, else "".
std::string receive_available(int fd, std::string& in);

// After a send (`sending`) or recv on the non-blocking `fd` failed with errno: waits until the
// socket is ready again and returns "" to retry, or returns why not to (the errno text, or
// `late` once `deadline` has passed).
std::string await_ready(int fd, bool sending, TimePoint deadline, std::string_view late);

// Raises the soft limit on open descriptors to what `needed` connections take, up to the hard
// limit; warns when that is not enough (the connects then fail and say so).
void raise_descriptor_limit(std::uint64_t needed);

}  // namespace turnstile::bench
