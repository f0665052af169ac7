// turnstile-sim: runs the deterministic simulator for one seed or a range of seeds.
//
//   turnstile-sim --seed S [--events N] [--profile NAME] [--trace]
//   turnstile-sim --seeds A..B | --seeds N  [--events N] [--profile NAME|all]
//   turnstile-sim --help
//
// One seed prints its swarm settings and ends with `digest <hex>`; a failure prints the broken
// invariant and the command that replays it, and exits 1.
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "core/assert.h"
#include "sim/simulator.h"

namespace {

using turnstile::sim::Options;
using turnstile::sim::Result;

// The run in progress, for the assertion hook (a core assertion prints the replay command too).
Options g_current;
// The program's name as invoked (turnstile-sim, or turnstile-sim-canary), for replay lines.
std::string g_program = "turnstile-sim";

void print_replay(const Options& options) {
  std::printf("replay: %s --seed %" PRIu64 " --events %" PRIu64 " --profile %s\n",
              g_program.c_str(), options.seed, options.events, options.profile.c_str());
  std::fflush(stdout);
}

void on_assert() {
  std::printf("FAILED: core assertion (see above)\n");
  print_replay(g_current);
}

bool parse_u64(std::string_view text, std::uint64_t& out) {
  if (text.empty()) return false;
  std::uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<std::uint64_t>(c - '0');
  }
  out = value;
  return true;
}

// On stderr with exit code 2 after a bad argument; on stdout with 0 for --help (from which the
// manual page is made, packaging/man.cmake).
int usage(std::FILE* out = stderr, int code = 2) {
  std::fprintf(out,
               "usage: turnstile-sim --seed S [--events N] [--profile NAME] [--trace]\n"
               "       turnstile-sim --seeds A..B|N [--events N] [--profile NAME|all]\n"
               "profiles: all");
  for (const std::string& name : turnstile::sim::profile_names()) {
    std::fprintf(out, " %s", name.c_str());
  }
  std::fprintf(out,
               "\n"
               "\n"
               "--events: events of the faulty phase (%" PRIu64
               "); the liveness phase follows.\n"
               "--profile: %s unless given; all (with --seeds) gives each seed a profile in turn.\n"
               "One seed prints its swarm settings and ends with `digest <hex>`; --seeds prints\n"
               "a line per seed, then a summary. A failure prints the broken invariant and the\n"
               "command that replays it, and the exit code is 1 (2 for a bad argument).\n",
               Options{}.events, Options{}.profile.c_str());
  return code;
}

void print_coverage(const std::map<std::string, std::uint64_t>& coverage) {
  std::printf("coverage");
  for (const auto& [name, count] : coverage) std::printf(" %s=%" PRIu64, name.c_str(), count);
  std::printf("\n");
}

// The command line: one seed, or the range first..last.
struct Command {
  Options options;
  bool many = false;
  std::uint64_t first = 1, last = 1;
};

// The program's name as invoked, without its directory.
void remember_program(int argc, char** argv) {
  if (argc > 0) {
    const std::string_view invoked = argv[0];
    const std::size_t slash = invoked.rfind('/');
    g_program = std::string(slash == std::string_view::npos ? invoked : invoked.substr(slash + 1));
  }
}

// `--seeds A..B` or `--seeds N` (1..N).
bool parse_seeds(std::string_view range, Command& command) {
  const std::size_t dots = range.find("..");
  if (dots == std::string_view::npos) {
    if (!parse_u64(range, command.last) || command.last == 0) return false;
    command.first = 1;
  } else if (!parse_u64(range.substr(0, dots), command.first) ||
             !parse_u64(range.substr(dots + 2), command.last) || command.last < command.first) {
    return false;
  }
  return true;
}

// Fills `command` from the arguments; returns the exit code when the program ends here (--help,
// a bad argument), nullopt to run.
std::optional<int> parse_command(int argc, char** argv, Command& command) {
  Options& options = command.options;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--help" || arg == "-h") {
      return usage(stdout, 0);
    } else if (arg == "--seed" && has_value) {
      if (!parse_u64(argv[++i], options.seed)) return usage();
    } else if (arg == "--events" && has_value) {
      if (!parse_u64(argv[++i], options.events)) return usage();
    } else if (arg == "--profile" && has_value) {
      options.profile = argv[++i];
    } else if (arg == "--seeds" && has_value) {
      command.many = true;
      if (!parse_seeds(argv[++i], command)) return usage();
    } else if (arg == "--trace") {
      options.trace = true;
    } else {
      return usage();
    }
  }
  const bool all_profiles = options.profile == "all";
  if (!all_profiles && !turnstile::sim::is_profile(options.profile)) return usage();
  if (all_profiles && !command.many) return usage();
  return std::nullopt;
}

// One seed: its settings, what it ran, and its digest or its failure.
int run_one(const Options& options) {
  g_current = options;
  const Result result = turnstile::sim::run_simulation(options);
  std::printf("seed %" PRIu64 " profile %s events %" PRIu64 "\n", options.seed,
              options.profile.c_str(), options.events);
  std::printf("settings %s\n", result.settings.c_str());
  std::printf("ran %" PRIu64 " events, %" PRIu64 " grants, %" PRIu64 " crashes\n",
              result.events_run, result.grants_seen, result.crashes);
  std::printf("linearizability: %" PRIu64 " key histories, %" PRIu64 " operations, %" PRIu64
              " inconclusive\n",
              result.keys_checked, result.operations_checked, result.inconclusive);
  print_coverage(result.coverage);
  if (!result.ok) {
    std::printf("FAILED: %s: %s\n", result.invariant.c_str(), result.detail.c_str());
    print_replay(options);
    return 1;
  }
  std::printf("digest %016" PRIx64 "\n", result.digest);
  return 0;
}

// A range of seeds: a line per seed, then a summary.
int run_many(const Command& command) {
  const Options& options = command.options;
  const bool all_profiles = options.profile == "all";
  const auto started = std::chrono::steady_clock::now();
  std::uint64_t seeds = 0, events = 0, grants = 0, failures = 0, inconclusive = 0;
  std::map<std::string, std::uint64_t> coverage;
  const auto& names = turnstile::sim::profile_names();
  for (std::uint64_t seed = command.first; seed <= command.last; ++seed) {
    Options run = options;
    run.seed = seed;
    if (all_profiles) run.profile = names[seed % names.size()];
    g_current = run;
    const Result result = turnstile::sim::run_simulation(run);
    ++seeds;
    events += result.events_run;
    grants += result.grants_seen;
    inconclusive += result.inconclusive;
    for (const auto& [name, count] : result.coverage) coverage[name] += count;
    if (!result.ok) {
      ++failures;
      std::printf("FAILED: %s: %s\n", result.invariant.c_str(), result.detail.c_str());
      print_replay(run);
    } else {
      std::printf("seed %" PRIu64 " %s digest %016" PRIx64 "\n", seed, run.profile.c_str(),
                  result.digest);
    }
    if (seed == command.last) break;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("summary: seeds %" PRIu64 " failed %" PRIu64 " events %" PRIu64 " grants %" PRIu64
              " inconclusive-histories %" PRIu64 " wall %.2f s events/s %.0f\n",
              seeds, failures, events, grants, inconclusive, seconds,
              seconds > 0 ? static_cast<double>(events) / seconds : 0.0);
  print_coverage(coverage);
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  remember_program(argc, argv);
  Command command;
  if (const std::optional<int> code = parse_command(argc, argv, command)) return *code;
  turnstile::core::set_assert_hook(on_assert);
  return command.many ? run_many(command) : run_one(command.options);
}
