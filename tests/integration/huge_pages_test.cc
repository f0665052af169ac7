// turnstiled keeps its heap in transparent huge pages (net/huge_pages.h): it restarts itself
// once with GLIBC_TUNABLES set, and --huge-pages=false leaves glibc's defaults.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "tests/integration/harness.h"

namespace turnstile::integration {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream file(path);
  return std::string((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
}

// The kernel's transparent-huge-page mode in brackets ("[madvise]"), or empty if unknown.
std::string thp_mode() {
  const std::string text = read_file("/sys/kernel/mm/transparent_hugepage/enabled");
  const auto open = text.find('[');
  const auto close = text.find(']', open);
  if (open == std::string::npos || close == std::string::npos) return "";
  return text.substr(open, close - open + 1);
}

// AnonHugePages of the process, in KiB.
long anon_huge_kib(pid_t pid) {
  const std::string text = read_file("/proc/" + std::to_string(pid) + "/smaps_rollup");
  const auto at = text.find("AnonHugePages:");
  if (at == std::string::npos) return -1;
  return std::stol(text.substr(at + std::string("AnonHugePages:").size()));
}

// Holds `n` locks on one connection, 1,000 requests per write.
void hold_locks(Client& client, int n) {
  for (int done = 0; done < n; done += 1000) {
    std::string batch;
    for (int i = done; i < done + 1000; ++i) batch += frame("l", "huge-" + std::to_string(i), "0");
    ASSERT_TRUE(client.send(batch));
    for (int i = 0; i < 1000; ++i) {
      const auto line = client.read_line();
      ASSERT_TRUE(line && line->rfind("ok ", 0) == 0) << (line ? *line : "no reply");
    }
  }
}

TEST(HugePages, HeldLocksLiveInHugePages) {
  const std::string mode = thp_mode();
  if (mode != "[madvise]" && mode != "[always]") {
    GTEST_SKIP() << "transparent huge pages are " << (mode.empty() ? "unknown" : mode);
  }
  Daemon daemon;
  // Restarted once with the tunables: the same pid, and the new image says so.
  ASSERT_TRUE(daemon.wait_for_log(
      "info GLIBC_TUNABLES=glibc.malloc.hugetlb=1:glibc.malloc.arena_max=1$", 5s));
  // The restart keeps the program's name (not "exe", after /proc/self/exe): ps, top, ss and
  // `pgrep -x turnstiled` read it.
  EXPECT_EQ(read_file("/proc/" + std::to_string(daemon.pid()) + "/comm"), "turnstiled\n");
  Client client(daemon.port());
  hold_locks(client, 40'000);  // about 12 MiB of heap
  EXPECT_GE(anon_huge_kib(daemon.pid()), 2048)
      << read_file("/proc/" + std::to_string(daemon.pid()) + "/smaps_rollup");
  EXPECT_EQ(client.request("ping", "_", ""), "ok");
}

TEST(HugePages, OffLeavesGlibcsDefaults) {
  Daemon daemon({"--huge-pages=false"});
  Client client(daemon.port());
  hold_locks(client, 40'000);
  EXPECT_EQ(daemon.log_text().find("GLIBC_TUNABLES"), std::string::npos) << daemon.log_text();
  // Under "madvise" only what glibc advises gets huge pages, and without the tunables it
  // advises nothing.
  if (thp_mode() == "[madvise]") {
    EXPECT_EQ(anon_huge_kib(daemon.pid()), 0);
  }
}

TEST(HugePages, AnOperatorsOwnSettingIsKept) {
  DaemonOptions options;
  options.env = {"GLIBC_TUNABLES=glibc.malloc.hugetlb=0"};
  Daemon daemon(options);
  EXPECT_TRUE(daemon.wait_for_log("info GLIBC_TUNABLES=glibc.malloc.hugetlb=0$", 5s))
      << daemon.log_text();
}

}  // namespace
}  // namespace turnstile::integration
