// turnstile-idle-memory-probe: how long this machine takes to touch memory again after it sat
// idle. It writes --mib MiB, touches every page once at once (the baseline), sleeps --idle-s
// seconds, then touches every page again, timing each touch. On a machine whose hypervisor
// reclaims or write-protects idle guest memory, the second pass is slow, and some single page
// touches take hundreds of microseconds: that is what a server pays when a million leases that
// sat untouched for their whole lease expire together (docs/benchmarks.md, expiry stall).
//
//   turnstile-idle-memory-probe [--mib 400] [--idle-s 15]
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

}  // namespace

int main(int argc, char** argv) {
  long mib = 400;
  long idle_s = 15;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--mib") {
      mib = parse("--mib", argv[i + 1]);
    } else if (flag == "--idle-s") {
      idle_s = parse("--idle-s", argv[i + 1]);
    } else {
      std::fprintf(stderr, "usage: turnstile-idle-memory-probe [--mib 400] [--idle-s 15]\n");
      return 2;
    }
  }
  constexpr std::size_t kPage = 4096;
  std::vector<unsigned char> memory(static_cast<std::size_t>(mib) << 20, 1);
  const std::size_t pages = memory.size() / kPage;
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
