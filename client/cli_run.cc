// The CLI's `run` command (cli_common.h): takes the lock (on a helper thread, so a signal while
// waiting still ends the tool at once), runs the command with the lock's identity in its
// environment, forwards signals to it, and on a lost lock sends it SIGTERM, then SIGKILL after
// the grace period. Exits with the command's code (kExitLockLost when the lock was lost).
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "client/cli.h"
#include "client/cli_common.h"
#include "client/cluster.h"
#include "client/guard.h"
#include "client/members.h"

extern char** environ;

namespace turnstile::client::cli {
namespace {

struct RunOptions {
  std::string key;
  Seconds timeout{10};
  Seconds lease{0};
  std::optional<std::int64_t> limit;
  std::optional<RwMode> mode;  // --read or --write: a read-write lock
  double grace_s = 10;
  bool kill_on_loss = true;
  std::vector<std::string> command;
};

RunOptions read_run_options(const cxxopts::ParseResult& parsed, std::vector<std::string> command) {
  RunOptions run;
  const Target target = read_target(parsed);
  run.key = target.key;
  run.mode = target.mode;
  run.timeout = seconds_option(parsed, "timeout");
  run.lease = seconds_option(parsed, "lease");
  if (parsed.count("semaphore") != 0) run.limit = parsed["semaphore"].as<std::int64_t>();
  run.grace_s = parsed["grace"].as<double>();
  if (!(run.grace_s >= 0 && run.grace_s < 86400)) throw UsageError{"--grace out of range"};
  run.kill_on_loss = parsed.count("no-kill-on-loss") == 0;
  run.command = std::move(command);
  if (run.command.empty()) throw UsageError{"run needs a command after `--`"};
  return run;
}

constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

int exit_status_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return kExitError;
}

// What `run` waits on: the signals it handles (at signal_fd), the guard's loss (lost_fd) and the
// end of the acquisition (acquired_fd); `original` is the signal mask the command gets.
struct RunEvents {
  sigset_t original;
  int signal_fd = -1;
  int lost_fd = -1;
  int acquired_fd = -1;
};

// Blocks the signals we handle before any thread starts, so they all arrive at the signalfd.
// False when a descriptor could not be made (errno says why).
bool open_run_events(RunEvents& events) {
  sigset_t handled;
  sigemptyset(&handled);
  for (int number : kForwardedSignals) sigaddset(&handled, number);
  sigaddset(&handled, SIGCHLD);
  pthread_sigmask(SIG_BLOCK, &handled, &events.original);
  events.signal_fd = signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK);
  events.lost_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  events.acquired_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  return events.signal_fd >= 0 && events.lost_fd >= 0 && events.acquired_fd >= 0;
}

void notify(int event_fd) {
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t written = ::write(event_fd, &one, sizeof one);
}

GuardOptions guard_options(const RunOptions& run, int lost_fd) {
  GuardOptions options;
  options.timeout = run.timeout;
  options.lease = run.lease;
  options.on_lost = [lost_fd](const LossEvent&) { notify(lost_fd); };
  // With --servers the guard follows the cluster's leader through failovers (members.h); the
  // command keeps running while the lease holds, and a loss still ends it as below.
  options.on_failover = [](const Endpoint& node) {
    std::cerr << "turnstile run: the lock is now renewed with the leader at " << node.to_string()
              << "\n";
  };
  return options;
}

// Takes the lock, semaphore or read-write lock of `run`, on the cluster's leader (--servers) or
// on the key's server.
Result<Guard> take_guard(const Common& common, const RunOptions& run, const GuardOptions& options) {
  const Cluster cluster(common.servers, common.connect);
  const Members members(common.servers, common.connect);
  Result<Guard> result = make_error(ErrorCode::kIo, "not acquired");
  const auto take = [&](auto guard) {
    result = guard ? Result<Guard>(Guard(std::move(*guard))) : Result<Guard>(guard.error());
  };
  if (run.limit) {
    take(common.replicated ? members.semaphore(run.key, *run.limit, options)
                           : cluster.semaphore(run.key, *run.limit, options));
  } else if (run.mode) {
    take(common.replicated ? members.rw_lock(run.key, *run.mode, options)
                           : cluster.rw_lock(run.key, *run.mode, options));
  } else {
    take(common.replicated ? members.lock(run.key, options) : cluster.lock(run.key, options));
  }
  return result;
}

// Acquires on a helper thread so that a signal while we wait still ends us at once.
Result<Guard> acquire_interruptibly(const Common& common, const RunOptions& run,
                                    const GuardOptions& options, const RunEvents& events) {
  std::optional<Result<Guard>> acquired;
  std::thread acquirer([&] {
    acquired.emplace(take_guard(common, run, options));
    notify(events.acquired_fd);
  });
  while (true) {
    pollfd fds[2] = {{events.acquired_fd, POLLIN, 0}, {events.signal_fd, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) continue;
    if ((fds[0].revents & POLLIN) != 0) break;
    signalfd_siginfo info{};
    while (::read(events.signal_fd, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
      if (info.ssi_signo == SIGCHLD) continue;
      // Interrupted while waiting: leave now; closing the socket withdraws us from the queue.
      std::cerr << "turnstile run: interrupted by signal " << info.ssi_signo
                << " while waiting for " << run.key << "\n";
      std::cerr.flush();
      std::_Exit(128 + static_cast<int>(info.ssi_signo));
    }
  }
  acquirer.join();
  return std::move(*acquired);
}

// The command's environment: ours, plus the lock's identity.
std::vector<std::string> command_environment(const RunOptions& run, const Guard& guard) {
  std::vector<std::string> environment;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    if (text.starts_with("TURNSTILE_KEY=") || text.starts_with("TURNSTILE_TOKEN=") ||
        text.starts_with("TURNSTILE_FENCE=") || text.starts_with("TURNSTILE_SERVER=")) {
      continue;
    }
    environment.emplace_back(text);
  }
  environment.push_back("TURNSTILE_KEY=" + run.key);
  environment.push_back("TURNSTILE_TOKEN=" + guard.token_string());
  environment.push_back("TURNSTILE_FENCE=" + std::to_string(guard.fence()));
  environment.push_back("TURNSTILE_SERVER=" + guard.endpoint().to_string());
  return environment;
}

// Starts the command with the signal mask `mask`; posix_spawnp's result (0: started as `child`).
int spawn_command(const RunOptions& run, const Guard& guard, const sigset_t& mask, pid_t& child) {
  std::vector<std::string> environment = command_environment(run, guard);
  std::vector<char*> envp;
  for (std::string& entry : environment) envp.push_back(entry.data());
  envp.push_back(nullptr);
  std::vector<std::string> arguments = run.command;
  std::vector<char*> argv;
  for (std::string& argument : arguments) argv.push_back(argument.data());
  argv.push_back(nullptr);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK);
  posix_spawnattr_setsigmask(&attributes, &mask);
  const int spawned = posix_spawnp(&child, argv[0], nullptr, &attributes, argv.data(), envp.data());
  posix_spawnattr_destroy(&attributes);
  return spawned;
}

// What happened while the command ran.
struct Supervised {
  int status = 0;     // the command's wait status
  bool lost = false;  // the lock was lost
};

// Waits for the command to end: forwards our signals to it, and when the lock is lost sends it
// SIGTERM (unless --no-kill-on-loss) and SIGKILL after the grace period.
Supervised supervise(const RunOptions& run, const Guard& guard, const RunEvents& events,
                     pid_t child) {
  Supervised outcome;
  std::optional<Clock::time_point> kill_at;
  bool exited = false;
  while (!exited) {
    int wait_ms = -1;
    if (kill_at) {
      wait_ms = static_cast<int>(std::max<std::int64_t>(
          0, std::chrono::duration_cast<Milliseconds>(*kill_at - Clock::now()).count() + 1));
    }
    pollfd fds[2] = {{events.signal_fd, POLLIN, 0}, {events.lost_fd, POLLIN, 0}};
    ::poll(fds, 2, wait_ms);
    if (kill_at && Clock::now() >= *kill_at) {
      std::cerr << "turnstile run: command still running after the grace period: SIGKILL\n";
      ::kill(child, SIGKILL);
      kill_at.reset();
    }
    std::uint64_t count = 0;
    if (::read(events.lost_fd, &count, sizeof count) == static_cast<ssize_t>(sizeof count) &&
        !outcome.lost) {
      outcome.lost = true;
      const auto loss = guard.loss();
      std::cerr << "turnstile run: lost the lock on " << run.key << " ("
                << (loss ? loss_reason_name(loss->reason) : "unknown") << ")"
                << (run.kill_on_loss ? ": sending SIGTERM to the command" : "") << "\n";
      if (run.kill_on_loss) {
        ::kill(child, SIGTERM);
        kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(run.grace_s));
      }
    }
    signalfd_siginfo info{};
    while (::read(events.signal_fd, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
      if (info.ssi_signo == SIGCHLD) continue;
      // A terminal's signal (SI_KERNEL) already reached the whole foreground process group,
      // the command included; forwarding it again would deliver it twice.
      if (info.ssi_code == SI_KERNEL) continue;
      ::kill(child, static_cast<int>(info.ssi_signo));
    }
    if (::waitpid(child, &outcome.status, WNOHANG) == child) exited = true;
  }
  return outcome;
}

}  // namespace

int do_run(const cxxopts::ParseResult& parsed, const Common& common,
           std::vector<std::string> command) {
  const RunOptions run = read_run_options(parsed, std::move(command));
  if (auto valid = validate_key(run.key); !valid) return fail(common, valid.error());
  RunEvents events;
  if (!open_run_events(events)) {
    return fail(common, make_error(ErrorCode::kIo, std::strerror(errno)), "run");
  }
  const GuardOptions options = guard_options(run, events.lost_fd);
  const std::string where =
      common.replicated ? std::string("the cluster's leader")
                        : Cluster(common.servers, common.connect).server_for(run.key).to_string();
  Result<Guard> acquired = acquire_interruptibly(common, run, options, events);
  if (!acquired.ok()) {
    return fail(common, acquired.error(), run.key + " on " + where);
  }
  Guard guard = std::move(acquired.value());
  pid_t child = -1;
  if (const int spawned = spawn_command(run, guard, events.original, child); spawned != 0) {
    std::cerr << "turnstile run: " << run.command[0] << ": " << std::strerror(spawned) << "\n";
    (void)guard.release();
    return spawned == ENOENT ? kExitNotFound : kExitCannotExecute;
  }
  const Supervised outcome = supervise(run, guard, events, child);
  const auto released = guard.release();
  if (outcome.lost) return kExitLockLost;
  if (!released) {
    std::cerr << "turnstile run: release failed: " << released.error().to_string() << "\n";
  }
  return exit_status_code(outcome.status);
}

}  // namespace turnstile::client::cli
