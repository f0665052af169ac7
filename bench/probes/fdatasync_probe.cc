// turnstile-fdatasync-probe: how long this disk takes to make a small append durable, the floor
// under every raft commit. In each --dir it appends a --block-bytes block (4 KiB by default, about
// one raft entry) to a file of its own and fdatasyncs it, --count times, and prints the p50, p99,
// mean and max of one append+fdatasync in microseconds.
//
// With two --dir it runs two such writers in parallel, one thread each, started together each
// round: a raft commit on a leader and one follower with both directories on the same disk. Each
// round's time is from the earlier start to the later finish (the per-round max); the round's p50
// is the fsync part of one commit's floor.
//
// --preallocate fallocates the whole file first and then overwrites it in place, so fdatasync has
// no size change to write (as a log that preallocates its segments); without it every append
// grows the file. --loopback-rtt N also measures N round trips of a 64-byte message over a TCP
// connection on 127.0.0.1 (TCP_NODELAY, one echo thread): the network part of the floor.
//
//   turnstile-fdatasync-probe --dir /tmp/a [--dir /tmp/b] [--count 1000] [--block-bytes 4096]
//                             [--warmup 20] [--preallocate] [--loopback-rtt 2000] [--json]
//
// The file (fdatasync-probe-<pid>-<n>.dat) is removed at the end.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "turnstile-fdatasync-probe: %s\n", what.c_str());
  std::exit(1);
}

long parse(const char* flag, const char* text, long min) {
  long value = 0;
  const char* end = text + std::strlen(text);
  auto [ptr, ec] = std::from_chars(text, end, value);
  if (ec != std::errc() || ptr != end || value < min) {
    std::fprintf(stderr, "turnstile-fdatasync-probe: bad %s %s\n", flag, text);
    std::exit(2);
  }
  return value;
}

double us_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

struct Stats {
  double p50 = 0, p99 = 0, mean = 0, min = 0, max = 0;
  std::size_t n = 0;
};

// Nearest-rank percentiles.
Stats stats_of(std::vector<double> v) {
  Stats s;
  s.n = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto rank = [&](double q) {
    const auto i = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
    return v[std::min(v.size() - 1, i == 0 ? 0 : i - 1)];
  };
  s.p50 = rank(0.50);
  s.p99 = rank(0.99);
  s.min = v.front();
  s.max = v.back();
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  return s;
}

std::string json_of(const Stats& s) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "{\"n\":%zu,\"p50_us\":%.1f,\"p99_us\":%.1f,\"mean_us\":%.1f,\"min_us\":%.1f,"
                "\"max_us\":%.1f}",
                s.n, s.p50, s.p99, s.mean, s.min, s.max);
  return buf;
}

std::string text_of(const Stats& s) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "p50 %.1f us  p99 %.1f us  mean %.1f us  min %.1f  max %.1f",
                s.p50, s.p99, s.mean, s.min, s.max);
  return buf;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out + "\"";
}

// One writer: its file, opened (and preallocated) before the timed loop.
struct Writer {
  std::string dir;
  std::string path;
  int fd = -1;
  bool preallocate = false;
  std::size_t block = 4096;
  std::size_t next = 0;  // blocks written
  std::vector<char> data;
  std::vector<Clock::time_point> starts, ends;

  void open_file(std::size_t index, std::size_t blocks) {
    path =
        dir + "/fdatasync-probe-" + std::to_string(getpid()) + "-" + std::to_string(index) + ".dat";
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) die("cannot create " + path + ": " + std::strerror(errno));
    data.assign(block, 'x');
    if (preallocate) {
      const int rc = posix_fallocate(fd, 0, static_cast<off_t>(blocks * block));
      if (rc != 0) die("fallocate " + path + ": " + std::strerror(rc));
      if (::fsync(fd) != 0) die("fsync " + path + ": " + std::strerror(errno));
    }
    // Make the new file's directory entry durable too, so the first timed append pays no more
    // than the others.
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
  }

  // One append (a pwrite at the end) and its fdatasync.
  void append_one() {
    data[0] = static_cast<char>('a' + next % 26);
    const auto offset = static_cast<off_t>(next * block);
    std::size_t done = 0;
    while (done < block) {
      const ssize_t n =
          ::pwrite(fd, data.data() + done, block - done, offset + static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) die("write " + path + ": " + std::strerror(errno));
      done += static_cast<std::size_t>(n);
    }
    if (::fdatasync(fd) != 0) die("fdatasync " + path + ": " + std::strerror(errno));
    ++next;
  }

  void close_file() {
    if (fd >= 0) ::close(fd);
    ::unlink(path.c_str());
  }
};

// N round trips of 64 bytes over one loopback TCP connection, echoed by a thread.
Stats loopback_rtt(long count) {
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listener, 1) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    die(std::string("loopback listener: ") + std::strerror(errno));
  }
  constexpr std::size_t kMessage = 64;
  auto read_full = [](int fd, char* buf, std::size_t n) {
    std::size_t got = 0;
    while (got < n) {
      const ssize_t r = ::read(fd, buf + got, n - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      got += static_cast<std::size_t>(r);
    }
    return true;
  };
  std::thread echo([&] {
    const int fd = ::accept(listener, nullptr, nullptr);
    if (fd < 0) return;
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char buf[kMessage];
    while (read_full(fd, buf, kMessage)) {
      if (::write(fd, buf, kMessage) != static_cast<ssize_t>(kMessage)) break;
    }
    ::close(fd);
  });
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    die(std::string("loopback connect: ") + std::strerror(errno));
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  char buf[kMessage] = {};
  std::vector<double> samples;
  samples.reserve(static_cast<std::size_t>(count));
  const long warmup = std::min(count, 100L);
  for (long i = 0; i < warmup + count; ++i) {
    const auto before = Clock::now();
    if (::write(fd, buf, kMessage) != static_cast<ssize_t>(kMessage) ||
        !read_full(fd, buf, kMessage)) {
      die("loopback round trip failed");
    }
    if (i >= warmup) samples.push_back(us_between(before, Clock::now()));
  }
  ::close(fd);
  echo.join();
  ::close(listener);
  return stats_of(std::move(samples));
}

void usage() {
  std::fprintf(stderr,
               "usage: turnstile-fdatasync-probe --dir DIR [--dir DIR2] [--count N (1000)]\n"
               "         [--block-bytes B (4096)] [--warmup W (20)] [--preallocate]\n"
               "         [--loopback-rtt N (0)] [--json]\n"
               "One --dir: append B bytes and fdatasync, N times. Two: two writers in\n"
               "parallel, one per directory, started together each round; the round is the\n"
               "later finish. Prints p50/p99/mean/min/max in microseconds.\n");
}

// The command line.
struct Probe {
  std::vector<std::string> dirs;
  long count = 1000, block = 4096, warmup = 20, rtt_count = 0;
  bool json = false, preallocate = false;
};

// The options of argv; --help exits 0 and a usage error 2, both after printing the usage.
Probe parse_options(int argc, char** argv) {
  Probe probe;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      usage();
      std::exit(0);
    }
    if (flag == "--json") {
      probe.json = true;
      continue;
    }
    if (flag == "--preallocate") {
      probe.preallocate = true;
      continue;
    }
    const char* value = i + 1 < argc ? argv[++i] : nullptr;
    if (value != nullptr && flag == "--dir") {
      probe.dirs.emplace_back(value);
    } else if (value != nullptr && flag == "--count") {
      probe.count = parse("--count", value, 1);
    } else if (value != nullptr && flag == "--block-bytes") {
      probe.block = parse("--block-bytes", value, 1);
    } else if (value != nullptr && flag == "--warmup") {
      probe.warmup = parse("--warmup", value, 0);
    } else if (value != nullptr && flag == "--loopback-rtt") {
      probe.rtt_count = parse("--loopback-rtt", value, 0);
    } else {
      usage();
      std::exit(2);
    }
  }
  if (probe.dirs.empty() || probe.dirs.size() > 2) {
    usage();
    std::exit(2);
  }
  return probe;
}

// A writer per --dir, its file open, with room for `total` rounds of timestamps.
std::vector<Writer> open_writers(const Probe& probe, std::size_t total) {
  std::vector<Writer> writers(probe.dirs.size());
  for (std::size_t w = 0; w < writers.size(); ++w) {
    writers[w].dir = probe.dirs[w];
    writers[w].preallocate = probe.preallocate;
    writers[w].block = static_cast<std::size_t>(probe.block);
    writers[w].starts.resize(total);
    writers[w].ends.resize(total);
    writers[w].open_file(w, total);
  }
  return writers;
}

// `total` rounds of one append+fdatasync per writer.
void run_rounds(std::vector<Writer>& writers, std::size_t total) {
  if (writers.size() == 1) {
    for (std::size_t r = 0; r < total; ++r) {
      writers[0].starts[r] = Clock::now();
      writers[0].append_one();
      writers[0].ends[r] = Clock::now();
    }
    return;
  }
  // Both threads wait at the barrier, then each appends and syncs; the next round begins
  // when both have finished.
  std::barrier round_start(2);
  auto run = [&](Writer& w) {
    for (std::size_t r = 0; r < total; ++r) {
      round_start.arrive_and_wait();
      w.starts[r] = Clock::now();
      w.append_one();
      w.ends[r] = Clock::now();
    }
  };
  std::thread other([&] { run(writers[1]); });
  run(writers[0]);
  other.join();
}

// The measured rounds' times: each writer's, and each round's from the earlier start to the
// later finish.
struct Samples {
  std::vector<std::vector<double>> each;
  std::vector<double> rounds;
};

Samples samples_of(const std::vector<Writer>& writers, std::size_t warmup, std::size_t total) {
  Samples samples;
  samples.each.resize(writers.size());
  for (std::size_t r = warmup; r < total; ++r) {
    Clock::time_point first = writers[0].starts[r], last = writers[0].ends[r];
    for (std::size_t w = 0; w < writers.size(); ++w) {
      samples.each[w].push_back(us_between(writers[w].starts[r], writers[w].ends[r]));
      first = std::min(first, writers[w].starts[r]);
      last = std::max(last, writers[w].ends[r]);
    }
    samples.rounds.push_back(us_between(first, last));
  }
  return samples;
}

// `rtt` is printed when --loopback-rtt asked for it.
void print_json(const Probe& probe, const Samples& samples, const Stats& round, const Stats& rtt) {
  std::string out = "{\"block_bytes\":" + std::to_string(probe.block) +
                    ",\"count\":" + std::to_string(probe.count) +
                    ",\"preallocate\":" + (probe.preallocate ? "true" : "false") + ",\"writers\":[";
  for (std::size_t w = 0; w < probe.dirs.size(); ++w) {
    if (w) out += ",";
    std::string s = json_of(stats_of(samples.each[w]));
    out += "{\"dir\":" + json_string(probe.dirs[w]) + "," + s.substr(1);
  }
  out += "],\"round\":" + json_of(round);
  if (probe.rtt_count > 0) out += ",\"loopback_rtt\":" + json_of(rtt);
  out += "}";
  std::printf("%s\n", out.c_str());
}

void print_text(const Probe& probe, const Samples& samples, const Stats& round, const Stats& rtt) {
  const std::size_t writers = probe.dirs.size();
  std::printf("%ld x (%ld-byte %s + fdatasync), %zu writer%s\n", probe.count, probe.block,
              probe.preallocate ? "overwrite of a preallocated file" : "append", writers,
              writers == 1 ? "" : "s in parallel");
  for (std::size_t w = 0; w < writers; ++w) {
    std::printf("writer %s: %s\n", probe.dirs[w].c_str(),
                text_of(stats_of(samples.each[w])).c_str());
  }
  if (writers > 1) std::printf("round (later finish): %s\n", text_of(round).c_str());
  if (probe.rtt_count > 0) std::printf("loopback TCP round trip: %s\n", text_of(rtt).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const Probe probe = parse_options(argc, argv);
  const auto total = static_cast<std::size_t>(probe.warmup + probe.count);
  std::vector<Writer> writers = open_writers(probe, total);
  run_rounds(writers, total);
  const Samples samples = samples_of(writers, static_cast<std::size_t>(probe.warmup), total);
  for (Writer& w : writers) w.close_file();

  const Stats round = stats_of(samples.rounds);
  const Stats rtt = probe.rtt_count > 0 ? loopback_rtt(probe.rtt_count) : Stats{};
  if (probe.json) {
    print_json(probe, samples, round, rtt);
  } else {
    print_text(probe, samples, round, rtt);
  }
  return 0;
}
