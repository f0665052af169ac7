// turnstiled: the turnstile lock server. See README.md and docs/configuration.md.
#include <thread>

#include "net/config.h"
#include "net/log.h"
#include "net/server.h"

int main(int argc, char** argv) {
  using namespace turnstile::net;
  std::vector<std::string> args(argv + 1, argv + argc);
  const int cores = static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
  ConfigResult parsed = parse_config(args, process_environment(), cores);
  if (auto* exit = std::get_if<ConfigExit>(&parsed)) {
    std::fprintf(exit->code == 0 ? stdout : stderr, "%s\n", exit->message.c_str());
    return exit->code;
  }
  Config config = std::get<Config>(std::move(parsed));
  set_debug_logging(config.debug);
  logf(LogLevel::kInfo, "%s starting", version_string().c_str());
  Server server(std::move(config));
  return server.run();
}
