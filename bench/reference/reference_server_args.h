// The command line of the two do-nothing reference servers (turnstile-refserver,
// turnstile-http-refserver): --host (loopback only), --port, --threads, their listening
// socket, and the threads that serve it; turnstile-refserver also takes --hand-off and
// --idle-poll-us and the replicated server's --journal, --replicate-to, --replica
// (reference_server.cc).
//
// Thread affinity: call from main before any thread starts.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace turnstile::bench {

struct ReferenceServerArgs {
  std::string host = "127.0.0.1";
  int port = 0;
  int threads = 1;
  int hand_off = 0;      // turnstile-refserver only: grant at most this many at once; 0 = off
  int idle_poll_us = 0;  // turnstile-refserver only: poll this long before sleeping
  // turnstile-refserver only, the do-nothing replicated server (reference_replication.h):
  std::string journal_dir;   // --journal: answer once each batch is appended and fdatasynced here
  std::string replicate_to;  // --replicate-to H:P,...: ... and a majority of these replicas has it
  std::string replica_dir;   // --replica: be a replica, journaling the leader's batches here
  sockaddr_storage address{};  // host:port
  socklen_t address_length = 0;
};

// Fills `address` with host:port when host is a loopback address (127.x.y.z or ::1); false if not.
inline bool loopback_address(const std::string& host, int port, sockaddr_storage* address,
                             socklen_t* length) {
  *address = {};
  auto* v4 = reinterpret_cast<sockaddr_in*>(address);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(address);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1 &&
      (ntohl(v4->sin_addr.s_addr) >> 24) == 127) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<std::uint16_t>(port));
    *length = sizeof(sockaddr_in);
    return true;
  }
  if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1 &&
      IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr)) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<std::uint16_t>(port));
    *length = sizeof(sockaddr_in6);
    return true;
  }
  return false;
}

[[noreturn]] inline void reference_usage_error(const char* name, int default_port,
                                               bool lock_options, const std::string& message) {
  std::fprintf(stderr, "%s: %s\nusage: %s [--host 127.0.0.1] [--port %d] [--threads 1]%s\n", name,
               message.c_str(), name, default_port,
               lock_options
                   ? " [--hand-off L] [--idle-poll-us 0]\n"
                     "       [--journal DIR [--replicate-to HOST:PORT,...] | --replica DIR]"
                   : "");
  std::exit(2);
}

// Parses argv; on a bad argument prints the usage of `name` and exits with status 2.
// `lock_options`: whether --hand-off and --idle-poll-us are accepted.
inline ReferenceServerArgs parse_reference_server_args(int argc, char** argv, const char* name,
                                                       int default_port, bool lock_options) {
  ReferenceServerArgs args;
  args.port = default_port;
  const auto number = [&](const std::string& text) {
    int value = 0;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || ptr != text.data() + text.size()) {
      reference_usage_error(name, default_port, lock_options, "bad number " + text);
    }
    return value;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc)
      reference_usage_error(name, default_port, lock_options, "missing value for " + flag);
    const std::string value = argv[++i];
    if (flag == "--host") {
      args.host = value == "localhost" ? "127.0.0.1" : value;
    } else if (flag == "--port") {
      args.port = number(value);
    } else if (flag == "--threads") {
      args.threads = number(value);
    } else if (lock_options && flag == "--hand-off") {
      args.hand_off = number(value);
    } else if (lock_options && flag == "--idle-poll-us") {
      args.idle_poll_us = number(value);
    } else if (lock_options && flag == "--journal") {
      args.journal_dir = value;
    } else if (lock_options && flag == "--replicate-to") {
      args.replicate_to = value;
    } else if (lock_options && flag == "--replica") {
      args.replica_dir = value;
    } else {
      reference_usage_error(name, default_port, lock_options, "unknown option " + flag);
    }
  }
  if (args.port < 0 || args.port > 65535) {
    reference_usage_error(name, default_port, lock_options, "--port must be 0..65535");
  }
  if (args.threads < 1 || args.threads > 256) {
    reference_usage_error(name, default_port, lock_options, "--threads must be 1..256");
  }
  if (args.hand_off < 0 || args.hand_off > 1000000) {
    reference_usage_error(name, default_port, lock_options, "--hand-off must be 0..1000000");
  }
  if (args.hand_off > 0 && args.threads != 1) {
    reference_usage_error(name, default_port, lock_options, "--hand-off needs --threads 1");
  }
  const bool replicated = !args.journal_dir.empty() || !args.replica_dir.empty();
  if (replicated && (args.threads != 1 || args.hand_off > 0)) {
    reference_usage_error(name, default_port, lock_options,
                          "--journal and --replica need --threads 1 and no --hand-off");
  }
  if (!args.replicate_to.empty() && args.journal_dir.empty()) {
    reference_usage_error(name, default_port, lock_options, "--replicate-to needs --journal");
  }
  if (!args.replica_dir.empty() && !args.journal_dir.empty()) {
    reference_usage_error(name, default_port, lock_options, "--replica excludes --journal");
  }
  if (args.idle_poll_us < 0 || args.idle_poll_us > 1000000) {
    reference_usage_error(name, default_port, lock_options, "--idle-poll-us must be 0..1000000");
  }
  if (!loopback_address(args.host, args.port, &args.address, &args.address_length)) {
    reference_usage_error(name, default_port, lock_options,
                          "--host must be a loopback address: " + args.host);
  }
  return args;
}

// Binds and listens on args.address, then prints "listening on HOST:PORT (N threads)" on stdout
// (the ephemeral port for --port 0): the listening socket. On failure prints why and exits 1.
inline int listen_for_reference(const ReferenceServerArgs& args, const char* name) {
  const int fd = ::socket(args.address.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  const int one = 1;
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      ::bind(fd, reinterpret_cast<const sockaddr*>(&args.address), args.address_length) != 0 ||
      ::listen(fd, 4096) != 0) {
    std::fprintf(stderr, "%s: cannot listen on %s:%d: %s\n", name, args.host.c_str(), args.port,
                 std::strerror(errno));
    std::exit(1);
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
  const int port =
      ntohs(bound.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&bound)->sin_port
                                       : reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
  std::printf("listening on %s:%d (%d threads)\n", args.host.c_str(), port, args.threads);
  std::fflush(stdout);
  return fd;
}

// The whole main of a reference server: parses the command line (usage of `name`), ignores
// SIGPIPE, listens, and runs serve(fd, args) on --threads threads, the calling one included;
// each thread gets its own descriptor of the one listening socket. Returns only if every serve
// does.
template <typename Serve>
int run_reference_server(int argc, char** argv, const char* name, int default_port,
                         bool lock_options, Serve serve) {
  std::signal(SIGPIPE, SIG_IGN);
  const ReferenceServerArgs args =
      parse_reference_server_args(argc, argv, name, default_port, lock_options);
  const int listen_fd = listen_for_reference(args, name);
  std::vector<std::thread> loops;
  for (int t = 1; t < args.threads; ++t) {
    loops.emplace_back(
        [fd = ::fcntl(listen_fd, F_DUPFD_CLOEXEC, 0), &serve, &args] { serve(fd, args); });
  }
  serve(listen_fd, args);
  for (std::thread& loop : loops) loop.join();
  return 0;
}

}  // namespace turnstile::bench
