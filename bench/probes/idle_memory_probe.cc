// turnstile-idle-memory-probe: how long this machine takes to touch memory again after it sat
// idle. It writes --mib MiB, touches every page once at once (the baseline), sleeps --idle-s
// seconds, then touches every page again, timing each touch. On a machine whose hypervisor
// reclaims or write-protects idle guest memory, the second pass is slow, and some single page
// touches take hundreds of microseconds: that is what a server pays when a million leases that
// sat untouched for their whole lease expire together (docs/benchmark-history.md, "The expiry
// stall").
//
// With --watch-s S it instead looks for stalls that are not the program's own: for S seconds it
// only reads the clock in a loop, then for S seconds it also writes 16 random bytes of the --mib
// buffer per loop, like a server walking a large heap. Each loop is microseconds of work, so a
// gap between loops of milliseconds is time the thread did not get, and the thread's CPU clock
// says whether the guest saw it as its own CPU time (a hypervisor stall the guest cannot see,
// such as rebuilding page tables) or as time off the CPU (the guest scheduler).
//
//   turnstile-idle-memory-probe [--mib 400] [--idle-s 15]
//   turnstile-idle-memory-probe [--mib 400] --watch-s 30
#include <time.h>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

long parse(const char* flag, const char* text) {
  long value = 0;
  const char* end = text + std::strlen(text);
  auto [ptr, ec] = std::from_chars(text, end, value);
  if (ec != std::errc() || ptr != end || value <= 0) {
    std::fprintf(stderr, "turnstile-idle-memory-probe: bad %s %s\n", flag, text);
    std::exit(2);
  }
  return value;
}

struct Pass {
  double total_ms = 0;
  double worst_us = 0;
  std::size_t over_20us = 0;
};

Pass touch_every_page(std::vector<unsigned char>& memory, std::size_t page) {
  Pass pass;
  const auto began = Clock::now();
  for (std::size_t i = 0; i < memory.size(); i += page) {
    const auto before = Clock::now();
    memory[i] = static_cast<unsigned char>(memory[i] + 1);
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - before).count();
    if (us > pass.worst_us) pass.worst_us = us;
    if (us > 20) ++pass.over_20us;
  }
  pass.total_ms = std::chrono::duration<double, std::milli>(Clock::now() - began).count();
  return pass;
}

double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

struct Watch {
  std::uint64_t loops = 0;
  std::size_t over_1ms = 0;
  std::size_t over_5ms = 0;
  std::size_t over_10ms = 0;
  double worst_ms = 0;
  double worst_cpu_ms = 0;  // the thread's CPU time across the worst gap
};

// Loops for `seconds`, each loop reading both clocks and, when `touch`, writing 16 random bytes
// of `memory`; records the gaps between consecutive loops.
Watch watch(std::vector<unsigned char>& memory, double seconds, bool touch) {
  Watch result;
  std::uint64_t state = 0x9e3779b97f4a7c15ULL;
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  auto last = Clock::now();
  double last_cpu = thread_cpu_ms();
  while (last < end) {
    if (touch) {
      for (int i = 0; i < 16; ++i) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        unsigned char& byte = memory[state % memory.size()];
        byte = static_cast<unsigned char>(byte + 1);
      }
    }
    const auto now = Clock::now();
    const double cpu = thread_cpu_ms();
    const double gap_ms = std::chrono::duration<double, std::milli>(now - last).count();
    ++result.loops;
    if (gap_ms > 1) ++result.over_1ms;
    if (gap_ms > 5) ++result.over_5ms;
    if (gap_ms > 10) ++result.over_10ms;
    if (gap_ms > result.worst_ms) {
      result.worst_ms = gap_ms;
      result.worst_cpu_ms = cpu - last_cpu;
    }
    last = now;
    last_cpu = cpu;
  }
  return result;
}

void print_watch(const char* what, long seconds, const Watch& watched) {
  std::printf(
      "%-28s %3ld s: %10llu loops; gaps over 1 ms %5zu, over 5 ms %4zu, over 10 ms %4zu; "
      "worst %6.2f ms (thread CPU %6.2f ms of it)\n",
      what, seconds, static_cast<unsigned long long>(watched.loops), watched.over_1ms,
      watched.over_5ms, watched.over_10ms, watched.worst_ms, watched.worst_cpu_ms);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  long mib = 400;
  long idle_s = 15;
  long watch_s = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--mib") {
      mib = parse("--mib", argv[i + 1]);
    } else if (flag == "--idle-s") {
      idle_s = parse("--idle-s", argv[i + 1]);
    } else if (flag == "--watch-s") {
      watch_s = parse("--watch-s", argv[i + 1]);
    } else {
      std::fprintf(stderr,
                   "usage: turnstile-idle-memory-probe [--mib 400] [--idle-s 15 | --watch-s S]\n");
      return 2;
    }
  }
  constexpr std::size_t kPage = 4096;
  std::vector<unsigned char> memory(static_cast<std::size_t>(mib) << 20, 1);
  const std::size_t pages = memory.size() / kPage;
  if (watch_s > 0) {
    print_watch("clock only", watch_s, watch(memory, static_cast<double>(watch_s), false));
    char label[64];
    std::snprintf(label, sizeof label, "random writes, %ld MiB", mib);
    print_watch(label, watch_s, watch(memory, static_cast<double>(watch_s), true));
    return 0;
  }
  const Pass warm = touch_every_page(memory, kPage);
  std::this_thread::sleep_for(std::chrono::seconds(idle_s));
  const Pass idle = touch_every_page(memory, kPage);
  std::printf("%zu pages (%ld MiB)\n", pages, mib);
  std::printf(
      "touched again at once:   %8.1f ms (%.2f us/page), worst page %7.1f us, %zu over 20 us\n",
      warm.total_ms, warm.total_ms * 1000 / static_cast<double>(pages), warm.worst_us,
      warm.over_20us);
  std::printf(
      "touched after %3ld s idle: %8.1f ms (%.2f us/page), worst page %7.1f us, %zu over 20 us\n",
      idle_s, idle.total_ms, idle.total_ms * 1000 / static_cast<double>(pages), idle.worst_us,
      idle.over_20us);
  return 0;
}
