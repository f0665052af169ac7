// The do-nothing replicated server's parts (turnstile-refserver --journal, --replicate-to,
// --replica): the least work any replicated lock server does per batch of requests, so that
// bench/tools/cluster_bench.py can measure a turnstiled cluster against it on the same machine in
// the same run.
//
// The leader (reference_server.cc) gathers the requests that arrive while a batch is in flight
// into the next batch: the raw request bytes in one frame (a 4-byte little-endian length, then the
// bytes). Starting a batch sends the frame to every replica and hands it to the leader's journal
// thread (JournalThread), which appends and fdatasyncs it while the event loop goes on reading
// requests; the batch commits once the leader's fdatasync returned and a majority of the cluster
// (the leader and (replicas + 1) / 2 replicas) has it, and only then the batch's canned replies go
// out. One batch is in flight at a time, as in turnstiled's cluster leader.
//
// A replica (run_replica) accepts one leader connection at a time; for the frames of each read it
// appends them to its journal, fdatasyncs once, and answers one byte per frame.
//
// What is not done: no state machine, no terms, no elections, no retransmission, no snapshots;
// nothing is read back. A lost replica link ends the leader.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "bench/reference/reference_server_args.h"

namespace turnstile::bench {

[[noreturn]] inline void replication_failure(const std::string& what) {
  std::fprintf(stderr, "turnstile-refserver: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(1);
}

// An append-only file in `dir` (journal-<pid>.dat) made durable with fdatasync.
class Journal {
 public:
  explicit Journal(const std::string& dir) {
    const std::string path = dir + "/journal-" + std::to_string(::getpid()) + ".dat";
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) replication_failure("cannot open " + path);
  }
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;
  ~Journal() { ::close(fd_); }

  // Appends `bytes` and returns once fdatasync does; exits on an I/O error.
  void append_durably(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t written = ::write(fd_, bytes.data(), bytes.size());
      if (written < 0 && errno == EINTR) continue;
      if (written <= 0) replication_failure("journal write");
      bytes.remove_prefix(static_cast<std::size_t>(written));
    }
    if (::fdatasync(fd_) != 0) replication_failure("journal fdatasync");
  }

 private:
  int fd_ = -1;
};

// A Journal on a thread of its own: append() hands it a frame and returns at once; once the frame
// is durable the thread makes done_fd() (an eventfd) readable. One frame at a time: append again
// only after take_done() said the last one is durable. Lives as long as the process.
class JournalThread {
 public:
  explicit JournalThread(const std::string& dir)
      : journal_(dir), done_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (done_fd_ < 0) replication_failure("eventfd");
    std::thread([this] { run(); }).detach();
  }
  JournalThread(const JournalThread&) = delete;
  JournalThread& operator=(const JournalThread&) = delete;

  void append(std::string frame) {
    {
      const std::lock_guard lock(mutex_);
      frame_ = std::move(frame);
      has_frame_ = true;
    }
    wake_.notify_one();
  }

  int done_fd() const { return done_fd_; }

  // Whether the frame handed over last became durable since the last call (reads the eventfd).
  bool take_done() {
    std::uint64_t count = 0;
    return ::read(done_fd_, &count, sizeof count) == sizeof count;
  }

 private:
  [[noreturn]] void run() {
    for (;;) {
      std::string frame;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [this] { return has_frame_; });
        frame.swap(frame_);
        has_frame_ = false;
      }
      journal_.append_durably(frame);
      const std::uint64_t one = 1;
      if (::write(done_fd_, &one, sizeof one) != sizeof one) replication_failure("eventfd write");
    }
  }

  Journal journal_;
  const int done_fd_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::string frame_;  // guarded by mutex_
  bool has_frame_ = false;
};

// `bytes` as one frame: a 4-byte little-endian length, then the bytes.
inline std::string batch_frame(std::string_view bytes) {
  const auto length = static_cast<std::uint32_t>(bytes.size());
  std::string frame(4, '\0');
  for (int i = 0; i < 4; ++i) frame[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  frame += bytes;
  return frame;
}

// The length of the whole frames at the front of `data`, and how many there are.
inline std::size_t whole_frames(std::string_view data, std::size_t* count) {
  std::size_t at = 0;
  *count = 0;
  while (data.size() - at >= 4) {
    std::uint32_t length = 0;
    for (int i = 0; i < 4; ++i) {
      length |= std::uint32_t{static_cast<unsigned char>(data[at + i])} << (8 * i);
    }
    if (data.size() - at - 4 < length) break;
    at += 4 + length;
    ++*count;
  }
  return at;
}

// "host:port,host:port" -> a connected non-blocking TCP_NODELAY socket to each (loopback only),
// retrying each for up to 10 s while nothing listens there yet. Exits when one cannot be reached.
inline std::vector<int> connect_replicas(const std::string& list) {
  std::vector<int> fds;
  std::size_t start = 0;
  while (start < list.size()) {
    std::size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    const std::string item = list.substr(start, end - start);
    start = end + 1;
    const std::size_t colon = item.rfind(':');
    int port = 0;
    sockaddr_storage address{};
    socklen_t length = 0;
    const char* port_text = item.c_str() + colon + 1;
    const auto parsed = std::from_chars(port_text, item.c_str() + item.size(), port);
    if (colon == std::string::npos || parsed.ec != std::errc() ||
        !loopback_address(item.substr(0, colon), port, &address, &length)) {
      errno = EINVAL;
      replication_failure("--replicate-to: not a loopback HOST:PORT: " + item);
    }
    int fd = -1;
    for (int attempt = 0; fd < 0; ++attempt) {
      fd = ::socket(address.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd >= 0 && ::connect(fd, reinterpret_cast<const sockaddr*>(&address), length) == 0) break;
      if (fd >= 0) ::close(fd);
      fd = -1;
      if (attempt == 200) replication_failure("cannot reach replica " + item);
      const timespec pause{0, 50'000'000};
      nanosleep(&pause, nullptr);
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    fds.push_back(fd);
  }
  return fds;
}

// A replica: serves one leader connection at a time on `listen_fd`, forever.
[[noreturn]] inline void run_replica(int listen_fd, const std::string& dir) {
  Journal journal(dir);
  std::string received;
  char buffer[65536];
  for (;;) {
    pollfd wait_for_leader{listen_fd, POLLIN, 0};
    ::poll(&wait_for_leader, 1, -1);
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    received.clear();
    for (;;) {
      const ssize_t got = ::recv(fd, buffer, sizeof buffer, 0);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;
      received.append(buffer, static_cast<std::size_t>(got));
      std::size_t frames = 0;
      const std::size_t whole = whole_frames(received, &frames);
      if (frames == 0) continue;
      journal.append_durably(std::string_view(received).substr(0, whole));
      received.erase(0, whole);
      const std::string acks(frames, 'a');
      if (::send(fd, acks.data(), acks.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(frames)) break;
    }
    ::close(fd);
  }
}

}  // namespace turnstile::bench
