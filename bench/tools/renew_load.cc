// turnstile-renew-load: many connections, each holding one lock and renewing it at a steady
// rate, as cheaply as a client can (one thread, one epoll set). It is the background load of
// `bench/tools/scale_probe.py renewing`: the probe measures an extra client's latency while this
// runs, so the load must cost the shared CPUs as little as possible (a Python loop doing the same
// used several times the CPU; docs/benchmark-history.md).
//
//   turnstile-renew-load --port P --connections N --lease S --rate R [--key-prefix K]
//
// It connects N times, acquires key K<i> on connection i with a lease of S seconds, prints
// "holding N" on stdout once every grant has arrived, then sends renewals (`n K<i> token S`) in
// open loop, R per second over all connections in turn (connection k % N renews the k-th time),
// until SIGINT or SIGTERM. --rate 0 only holds. It then prints one JSON line:
//   {"connections":N,"renewals_sent":..,"renewals_ok":..,"renewals_failed":..,"seconds":..}
// and exits 0 when every renewal sent was answered `ok`, 1 otherwise, 2 on a usage error.
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "bench/tools/bench_protocol.h"
#include "bench/tools/loopback.h"

namespace turnstile::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string host = "127.0.0.1";
  int port = 6388;
  int connections = 1000;
  std::int64_t lease_s = 10;
  double rate = 0;  // renewals per second over all connections; 0 = hold only
  std::string key_prefix = "renewing-";
};

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "turnstile-renew-load: %s\n", message.c_str());
  std::exit(2);
}

Options parse_options(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage_error("missing value for " + flag);
    const std::string value = argv[++i];
    if (value.empty()) usage_error("empty value for " + flag);
    char* end = nullptr;
    if (flag == "--host") {
      options.host = value;
    } else if (flag == "--port") {
      options.port = static_cast<int>(std::strtol(value.c_str(), &end, 10));
    } else if (flag == "--connections") {
      options.connections = static_cast<int>(std::strtol(value.c_str(), &end, 10));
    } else if (flag == "--lease") {
      options.lease_s = std::strtoll(value.c_str(), &end, 10);
    } else if (flag == "--rate") {
      options.rate = std::strtod(value.c_str(), &end);
    } else if (flag == "--key-prefix") {
      options.key_prefix = value;
    } else {
      usage_error("unknown option " + flag);
    }
    if (end != nullptr && *end != '\0') usage_error("bad value for " + flag + ": " + value);
  }
  if (options.port < 1 || options.port > 65535) usage_error("--port must be 1..65535");
  if (options.connections < 1 || options.connections > 1000000) {
    usage_error("--connections must be 1..1000000");
  }
  if (options.lease_s < 1) usage_error("--lease must be >= 1");
  if (!(options.rate >= 0)) usage_error("--rate must be >= 0");
  return options;
}

struct Connection {
  int fd = -1;
  std::string key;
  TokenText token{};
  std::string in;
  bool granted = false;
};

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop.store(true); }

// Writes all of `data` to a socket that is normally writable at once (a few dozen bytes on a
// connection with nothing else in flight); waits out a full send buffer.
bool send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<std::size_t>(n));
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      usleep(100);
    } else {
      return false;
    }
  }
  return true;
}

// The load: the connections, their grants, then the renewals until SIGINT or SIGTERM.
class RenewLoad {
 public:
  explicit RenewLoad(const Options& options)
      : options_(options), connections_(static_cast<std::size_t>(options.connections)) {}

  // The exit status.
  int run() {
    const LoopbackAddress address = resolve(options_);
    struct sigaction action {};
    action.sa_handler = on_signal;  // no SA_RESTART: epoll_wait returns EINTR
    sigaction(SIGINT, &action, nullptr);
    sigaction(SIGTERM, &action, nullptr);
    epoll_ = epoll_create1(EPOLL_CLOEXEC);
    if (!connect_all(address) || !await_grants()) return 1;
    std::printf("holding %zu\n", granted_);
    std::fflush(stdout);
    const Clock::time_point start = Clock::now();
    renew_until_stopped(start);
    drain();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::printf(
        "{\"connections\":%zu,\"renewals_sent\":%llu,\"renewals_ok\":%llu,"
        "\"renewals_failed\":%llu,\"seconds\":%.3f}\n",
        connections_.size(), static_cast<unsigned long long>(sent_),
        static_cast<unsigned long long>(ok_), static_cast<unsigned long long>(failed_), seconds);
    if (!first_failure_.empty()) {
      std::fprintf(stderr, "turnstile-renew-load: first failure: %s\n", first_failure_.c_str());
    }
    for (Connection& c : connections_) ::close(c.fd);
    ::close(epoll_);
    return failed_ == 0 && ok_ == sent_ ? 0 : 1;
  }

 private:
  static LoopbackAddress resolve(const Options& options) {
    LoopbackAddress address;
    std::string error;
    if (!loopback_address(options.host, options.port, address, error)) usage_error(error);
    return address;
  }

  // Connects every connection and sends its acquire; false after printing why not.
  bool connect_all(const LoopbackAddress& address) {
    for (std::size_t i = 0; i < connections_.size(); ++i) {
      Connection& c = connections_[i];
      c.key = options_.key_prefix + std::to_string(i);
      c.fd = connect_to(address);
      if (c.fd < 0) {
        std::fprintf(stderr, "turnstile-renew-load: connection %zu: %s\n", i, std::strerror(errno));
        return false;
      }
      epoll_event event{};
      event.events = EPOLLIN;
      event.data.u64 = i;
      epoll_ctl(epoll_, EPOLL_CTL_ADD, c.fd, &event);
      out_.clear();
      out_ += "l\n" + c.key + "\n0 " + std::to_string(options_.lease_s) + "\n";
      if (!send_all(c.fd, out_)) {
        std::fprintf(stderr, "turnstile-renew-load: cannot send on connection %zu\n", i);
        return false;
      }
    }
    return true;
  }

  // Until every grant has arrived (or a signal stops the wait); false after 10 s without a reply.
  bool await_grants() {
    while (granted_ < connections_.size() && !g_stop.load()) {
      const int n = epoll_wait(epoll_, events_, kEvents, 10000);
      if (n == 0) {
        std::fprintf(stderr, "turnstile-renew-load: %zu of %zu grants after 10 s\n", granted_,
                     connections_.size());
        return false;
      }
      take_events(n);
    }
    return true;
  }

  // Open loop: the k-th renewal is due k / rate seconds after the start.
  void renew_until_stopped(Clock::time_point start) {
    const std::string lease = std::to_string(options_.lease_s);
    while (!g_stop.load()) {
      const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      const auto due = options_.rate > 0 ? static_cast<std::uint64_t>(elapsed * options_.rate) : 0;
      for (; sent_ < due; ++sent_) {
        Connection& c = connections_[sent_ % connections_.size()];
        out_.clear();
        out_ += "n\n" + c.key + "\n";
        out_.append(c.token.data(), c.token.size());
        out_ += " " + lease + "\n";
        if (!send_all(c.fd, out_)) {
          ++failed_;
          if (first_failure_.empty()) first_failure_ = "cannot send on " + c.key;
        }
      }
      // Sleep until the next renewal is due (whole milliseconds: epoll_wait's resolution), or
      // until replies arrive.
      int timeout_ms = 100;
      if (options_.rate > 0) {
        const double next = static_cast<double>(sent_ + 1) / options_.rate - elapsed;
        timeout_ms = next <= 0 ? 0 : static_cast<int>(next * 1000) + 1;
      }
      take_events(epoll_wait(epoll_, events_, kEvents, timeout_ms));
    }
  }

  // Collects the replies still in flight, for at most a second.
  void drain() {
    const Clock::time_point drain_end = Clock::now() + std::chrono::seconds(1);
    while (ok_ + failed_ < sent_ && Clock::now() < drain_end) {
      take_events(epoll_wait(epoll_, events_, kEvents, 50));
    }
  }

  void take_events(int n) {
    for (int e = 0; e < n; ++e) on_readable(events_[e].data.u64);
  }

  // Reads what connection i has and takes every whole reply line from it.
  void on_readable(std::size_t i) {
    Connection& c = connections_[i];
    char buffer[4096];
    for (;;) {
      const ssize_t n = ::recv(c.fd, buffer, sizeof buffer, 0);
      if (n > 0) {
        c.in.append(buffer, static_cast<std::size_t>(n));
        continue;
      }
      if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        if (first_failure_.empty()) first_failure_ = "connection " + c.key + " closed";
        ++failed_;
        epoll_ctl(epoll_, EPOLL_CTL_DEL, c.fd, nullptr);
      }
      break;
    }
    std::size_t end;
    while ((end = c.in.find('\n')) != std::string::npos) {
      take_line(c, end);
      c.in.erase(0, end + 1);
    }
  }

  // The reply line c.in[0, end): the grant of the acquire, then the renewals' `ok <lease>`.
  void take_line(Connection& c, std::size_t end) {
    if (!c.granted) {
      Reply reply;
      protocol_.parse_grant(c.in, reply);
      if (!reply.ok) {
        std::fprintf(stderr, "turnstile-renew-load: acquire of %s: %.*s\n", c.key.c_str(),
                     static_cast<int>(reply.line.size()), reply.line.data());
        std::exit(1);
      }
      c.token = reply.token;
      c.granted = true;
      ++granted_;
    } else if (std::string_view(c.in.data(), end).substr(0, 3) == "ok ") {
      ++ok_;
    } else {
      ++failed_;
      if (first_failure_.empty()) first_failure_ = c.key + ": " + c.in.substr(0, end);
    }
  }

  static constexpr int kEvents = 256;
  const Options& options_;
  std::vector<Connection> connections_;
  const LineProtocol protocol_{0, 0};
  int epoll_ = -1;
  std::string out_;
  std::uint64_t sent_ = 0, ok_ = 0, failed_ = 0;
  std::size_t granted_ = 0;
  std::string first_failure_;
  epoll_event events_[kEvents];
};

}  // namespace
}  // namespace turnstile::bench

int main(int argc, char** argv) {
  const turnstile::bench::Options options = turnstile::bench::parse_options(argc, argv);
  return turnstile::bench::RenewLoad(options).run();
}
