// turnstiled: the turnstile lock server. See README.md and docs/configuration.md.
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "net/clock.h"
#include "net/config.h"
#include "net/huge_pages.h"
#include "net/log.h"
#include "net/server.h"

namespace {

using namespace turnstile::net;

std::optional<std::string> environment(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

// Executes this program again with the huge-page tunables (net/huge_pages.h) when they are
// wanted and not yet in force. Runs before any thread exists; returns only when no restart is
// needed or the restart failed (then the daemon runs on glibc's defaults).
void restart_with_huge_page_heap(const Config& config, char** argv) {
  std::ifstream file("/sys/kernel/mm/transparent_hugepage/enabled");
  const std::string thp_enabled((std::istreambuf_iterator<char>(file)),
                                std::istreambuf_iterator<char>());
  const std::optional<std::string> before = environment("GLIBC_TUNABLES");
  const std::optional<std::string> tunables =
      huge_page_tunables(config.huge_pages, thp_enabled, before);
  if (!tunables) return;
  if (setenv("GLIBC_TUNABLES", tunables->c_str(), 1) != 0) return;
  execv("/proc/self/exe", argv);
  const int error = errno;
  // Not restarted: put the variable back, so that the log line after this shows what is in force.
  if (before) {
    setenv("GLIBC_TUNABLES", before->c_str(), 1);
  } else {
    unsetenv("GLIBC_TUNABLES");
  }
  logf(LogLevel::kWarn, "cannot restart with GLIBC_TUNABLES=%s (%s): the heap stays in 4 KiB pages",
       tunables->c_str(), std::strerror(error));
}

// The kernel names a process after the file it executed, so the restart through /proc/self/exe
// would show as "exe" in ps, top and ss, and `pgrep -x turnstiled` would not find it. The name is
// set back to what the command line says (the kernel keeps its first 15 bytes). Executing the
// path /proc/self/exe links to instead would fail when the binary was replaced on disk meanwhile.
void keep_program_name(const char* argv0) {
  std::string_view name = argv0 != nullptr ? argv0 : "";
  const std::size_t slash = name.rfind('/');
  if (slash != std::string_view::npos) name.remove_prefix(slash + 1);
  if (name.empty()) return;
  const std::string copy(name.substr(0, 15));
  prctl(PR_SET_NAME, copy.c_str(), 0, 0, 0);
}

}  // namespace

int main(int argc, char** argv) {
  keep_program_name(argv[0]);
  std::vector<std::string> args(argv + 1, argv + argc);
  const int cores = static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
  ConfigResult parsed = parse_config(args, process_environment(), cores);
  if (auto* exit = std::get_if<ConfigExit>(&parsed)) {
    std::fprintf(exit->code == 0 ? stdout : stderr, "%s\n", exit->message.c_str());
    return exit->code;
  }
  Config config = std::get<Config>(std::move(parsed));
  set_log_format(parse_log_format(config.log_format).value_or(LogFormat::kText));
  set_log_level(parse_log_level(config.log_level).value_or(LogLevel::kInfo));
  restart_with_huge_page_heap(config, argv);
  {
    const std::string version = version_string();
    log_event(LogLevel::kInfo, "start", version + " starting",
              {{"version", version.substr(version.find(' ') + 1)},
               {"pid", static_cast<long long>(::getpid())},
               {"threads", config.threads},
               {"host", config.host},
               {"port", config.port},
               {"http_host", config.http_port != 0 ? config.http_host : std::string()},
               {"http_port", config.http_port},
               {"tls", !config.tls_cert.empty()},
               {"cluster", config.cluster.enabled()},
               {"node_id", config.cluster.node_id},
               {"log_level", config.log_level}});
  }
  if (config.test.monotonic_offset_s != 0) {
    test_monotonic_offset_ns = config.test.monotonic_offset_s * 1'000'000'000;
    logf(LogLevel::kWarn, "--test-monotonic-offset-s %lld is for tests only",
         static_cast<long long>(config.test.monotonic_offset_s));
  }
  if (const auto tunables = environment("GLIBC_TUNABLES")) {
    logf(LogLevel::kInfo, "GLIBC_TUNABLES=%s", tunables->c_str());
  }
  Server server(std::move(config));
  return server.run();
}
