#include "client/cli.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cxxopts.hpp>
#include <fstream>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "client/cluster.h"
#include "client/connection.h"
#include "client/guard.h"
#include "client/http_response.h"
#include "client/members.h"
#include "client/signal_connection.h"

extern char** environ;

namespace turnstile::client {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kUsage =
    "usage: turnstile <command> [options]\n"
    "\n"
    "commands:\n"
    "  acquire --key K [--timeout S] [--lease S] [--semaphore LIMIT]\n"
    "  release --key K --token T [--semaphore]\n"
    "  renew   --key K --token T [--lease S] [--semaphore]\n"
    "          (a read-write lock: --read K or --write K in place of --key K)\n"
    "  stats\n"
    "  ping\n"
    "  check   KEY TOKEN [lock|sem|rw]   (the server-side fence check: exit 0 and the\n"
    "          seconds left while TOKEN holds KEY, exit 1 when it does not)\n"
    "  run     --key K [--timeout S] [--lease S] [--semaphore LIMIT] [--grace S]\n"
    "          [--no-kill-on-loss] -- command [args...]\n"
    "          (--read K: a read lock, shared with other readers; --write K: a write lock)\n"
    "  listen  PATTERN [--group G]   (one `<channel> <payload>` line per signal, until\n"
    "          SIGINT or SIGTERM)\n"
    "  emit    CHANNEL PAYLOAD   (prints the number of deliveries)\n"
    "  cluster status   (each node's view over its client port: role, term, leader,\n"
    "          indexes, voters; exits 1 unless every node answers and one leads)\n"
    "  cluster add --id N --raft-address H:P --client-address H:P   (or add-voter)\n"
    "  cluster remove --id N   (or remove-voter)\n"
    "  cluster transfer   (the leader hands leadership to another voter)\n"
    "          (--server is then the node's HTTP address; --admin-token or\n"
    "          TURNSTILE_ADMIN_TOKEN)\n"
    "  admin show    KEY [lock|sem|rw]   (holders by fence, and waiters, of one key)\n"
    "  admin release KEY [lock|sem|rw] [--fence N] [--clear-delay]   (force-release every\n"
    "          holder, or the one with fence N; --clear-delay also ends the key's\n"
    "          lock-delay; --server is the HTTP address; --admin-token or\n"
    "          TURNSTILE_ADMIN_TOKEN)\n"
    "\n"
    "common options: --server HOST:PORT (repeatable; default 127.0.0.1:6388), or\n"
    "  --servers H:P,H:P,... (the nodes of one replicated cluster: the leader is found and\n"
    "  followed through failovers), --tls, --tls-ca PATH, --tls-server-name NAME, "
    "--auth-token-file PATH, --connect-timeout S,\n"
    "  --json. `turnstile <command> --help` lists a command's options. See docs/cli.md.\n"
    "\n"
    "exit codes: 0 ok, 1 error (check: not held), 64 usage, 69 could not connect,\n"
    "  75 timed out waiting, 76 lock lost during run, 77 auth refused; run: the command's\n"
    "  code, 128+N if it was killed by signal N, 126/127 if it could not be executed / found.\n";

struct UsageError {
  std::string message;
};

int exit_code_for(const Error& error) {
  switch (error.code) {
    case ErrorCode::kTimeout:
      return kExitTimedOut;
    case ErrorCode::kConnect:
    case ErrorCode::kTls:
      return kExitNoConnection;
    case ErrorCode::kAuth:
      return kExitAuth;
    case ErrorCode::kInvalidArgument:
      return kExitUsage;
    default:
      return kExitError;
  }
}

struct Common {
  std::vector<Endpoint> servers;  // --server (each key on one), or the --servers members
  bool replicated = false;        // --servers: one replicated cluster
  ConnectOptions connect;
  bool json = false;
  std::string command;
};

// Reports an error on stderr (and, with --json, as a JSON line on stdout); returns its exit code.
int fail(const Common& common, const Error& error, const std::string& context = {}) {
  std::cerr << "turnstile " << common.command << ": " << (context.empty() ? "" : context + ": ")
            << error.to_string() << "\n";
  if (common.json) {
    Json out = {{"ok", false},
                {"error", std::string(error_code_name(error.code))},
                {"message", error.message}};
    std::cout << out.dump() << "\n";
  }
  return exit_code_for(error);
}

void add_common_options(cxxopts::Options& options) {
  options.add_options()("s,server", "server HOST:PORT, repeatable (keys are placed by CRC-32)",
                        cxxopts::value<std::vector<std::string>>())(
      // With a short name: cxxopts 3.0 keys an option by its long name followed by its short
      // one, so a bare "servers" would collide with "s,server".
      "S,servers", "the nodes of one replicated cluster, HOST:PORT,HOST:PORT,...",
      cxxopts::value<std::string>())("tls",
                                     "connect with TLS (system trust store unless --tls-ca)")(
      "tls-ca", "PEM file of CA certificates to trust (implies --tls)",
      cxxopts::value<std::string>())("tls-server-name",
                                     "name the certificate must carry (default: the host)",
                                     cxxopts::value<std::string>())(
      "auth-token-file", "file holding the auth token (one line)", cxxopts::value<std::string>())(
      "connect-timeout", "seconds to connect, handshake and authenticate",
      cxxopts::value<double>()->default_value("5"))("json", "machine-readable output")(
      "h,help", "print this help");
}

std::string trim(std::string text) {
  const auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!text.empty() && is_space(text.back())) text.pop_back();
  std::size_t start = 0;
  while (start < text.size() && is_space(text[start])) ++start;
  return text.substr(start);
}

Common read_common(const cxxopts::ParseResult& parsed, const std::string& command) {
  Common common;
  common.command = command;
  common.json = parsed.count("json") != 0;
  std::vector<std::string> servers{"127.0.0.1:6388"};
  if (parsed.count("server") != 0) servers = parsed["server"].as<std::vector<std::string>>();
  if (parsed.count("servers") != 0) {
    if (parsed.count("server") != 0) {
      throw UsageError{"--servers (one replicated cluster) and --server exclude each other"};
    }
    common.replicated = true;
    servers.clear();
    std::stringstream list(parsed["servers"].as<std::string>());
    for (std::string item; std::getline(list, item, ',');) {
      if (!item.empty()) servers.push_back(item);
    }
    if (servers.empty()) throw UsageError{"--servers lists no server"};
  }
  for (const std::string& text : servers) {
    auto endpoint = parse_endpoint(text);
    if (!endpoint) throw UsageError{endpoint.error().message};
    common.servers.push_back(*endpoint);
  }
  const double connect_s = parsed["connect-timeout"].as<double>();
  if (!(connect_s > 0 && connect_s < 86400)) throw UsageError{"--connect-timeout out of range"};
  common.connect.connect_timeout = Milliseconds{static_cast<std::int64_t>(connect_s * 1000)};
  if (parsed.count("tls") != 0 || parsed.count("tls-ca") != 0 ||
      parsed.count("tls-server-name") != 0) {
    TlsOptions tls;
    if (parsed.count("tls-ca") != 0) tls.ca_file = parsed["tls-ca"].as<std::string>();
    if (parsed.count("tls-server-name") != 0) {
      tls.server_name = parsed["tls-server-name"].as<std::string>();
    }
    common.connect.tls = tls;
  }
  if (parsed.count("auth-token-file") != 0) {
    const std::string path = parsed["auth-token-file"].as<std::string>();
    std::ifstream file(path, std::ios::binary);
    if (!file) throw UsageError{"cannot read --auth-token-file " + path};
    std::stringstream contents;
    contents << file.rdbuf();
    common.connect.auth_token = trim(contents.str());
    if (common.connect.auth_token.empty()) throw UsageError{"the auth token file is empty"};
  }
  return common;
}

Seconds seconds_option(const cxxopts::ParseResult& parsed, const std::string& name) {
  const std::int64_t value = parsed[name].as<std::int64_t>();
  if (value < 0) throw UsageError{"--" + name + " must not be negative"};
  return Seconds{value};
}

std::string required(const cxxopts::ParseResult& parsed, const std::string& name) {
  if (parsed.count(name) == 0) throw UsageError{"--" + name + " is required"};
  return parsed[name].as<std::string>();
}

// What acquire, release, renew and run work on: --key K (a lock, or with --semaphore a
// semaphore), --read K or --write K (a read-write lock in that mode).
struct Target {
  std::string key;
  std::optional<RwMode> mode;  // set for --read and --write
};

Target read_target(const cxxopts::ParseResult& parsed) {
  const bool key = parsed.count("key") != 0;
  const bool read = parsed.count("read") != 0;
  const bool write = parsed.count("write") != 0;
  if (int{key} + int{read} + int{write} != 1) {
    throw UsageError{"give one of --key, --read and --write"};
  }
  if (key) return Target{parsed["key"].as<std::string>(), std::nullopt};
  if (parsed.count("semaphore") != 0) {
    throw UsageError{"--semaphore goes with --key, not with --read or --write"};
  }
  const RwMode mode = read ? RwMode::kRead : RwMode::kWrite;
  return Target{parsed[std::string(rw_mode_name(mode))].as<std::string>(), mode};
}

// The connection `key` is taken on: the replicated cluster's leader (--servers, found within the
// connect timeout plus 15 s for an election), or the key's server (--server). `where` names it
// for error messages.
Result<Connection> connect_for(const Common& common, std::string_view key, std::string& where) {
  if (common.replicated) {
    where = "the cluster's leader";
    const Members members(common.servers, common.connect);
    return members.connect_leader(common.connect.connect_timeout + Milliseconds{15000});
  }
  const Cluster cluster(common.servers, common.connect);
  where = cluster.server_for(key).to_string();
  return cluster.connect_for(key);
}

// --- acquire, release, renew, stats, ping
// ---------------------------------------------------------

int do_acquire(const cxxopts::ParseResult& parsed, const Common& common) {
  const auto [key, mode] = read_target(parsed);
  if (auto valid = validate_key(key); !valid) return fail(common, valid.error());
  const Seconds timeout = seconds_option(parsed, "timeout");
  const Seconds lease = seconds_option(parsed, "lease");
  std::string where;
  auto connection = connect_for(common, key, where);
  if (!connection) return fail(common, connection.error(), where);
  Result<Grant> grant = make_error(ErrorCode::kIo, "not sent");
  if (mode) {
    grant = connection->rw_lock(key, *mode, timeout, lease);
  } else if (parsed.count("semaphore") != 0) {
    grant = connection->sem_lock(key, timeout, parsed["semaphore"].as<std::int64_t>(), lease);
  } else {
    grant = connection->lock(key, timeout, lease);
  }
  if (!grant) return fail(common, grant.error(), key);
  if (common.json) {
    Json out = {{"ok", true},
                {"key", key},
                {"token", grant->token.to_string()},
                {"fence", grant->fence()},
                {"lease_s", grant->lease.count()},
                {"server", connection->endpoint().to_string()}};
    if (mode) out["mode"] = rw_mode_name(*mode);
    std::cout << out.dump() << "\n";
  } else {
    std::cout << grant->token.to_string() << " " << grant->fence() << " " << grant->lease.count()
              << "\n";
  }
  return kExitOk;
}

int do_release_or_renew(const cxxopts::ParseResult& parsed, const Common& common, bool renew) {
  const auto [key, mode] = read_target(parsed);
  if (auto valid = validate_key(key); !valid) return fail(common, valid.error());
  auto token = parse_token(required(parsed, "token"));
  if (!token) return fail(common, token.error());
  const bool semaphore = parsed.count("semaphore") != 0;
  std::string where;
  auto connection = connect_for(common, key, where);
  if (!connection) return fail(common, connection.error(), where);
  if (!renew) {
    Result<void> released;
    if (mode) {
      released = connection->rw_release(key, *mode, *token);
    } else {
      released =
          semaphore ? connection->sem_release(key, *token) : connection->release(key, *token);
    }
    if (!released) return fail(common, released.error(), key);
    std::cout << (common.json ? Json{{"ok", true}}.dump() : "ok") << "\n";
    return kExitOk;
  }
  const Seconds lease = seconds_option(parsed, "lease");
  Result<Seconds> renewed = make_error(ErrorCode::kIo, "not sent");
  if (mode) {
    renewed = connection->rw_renew(key, *mode, *token, lease);
  } else {
    renewed = semaphore ? connection->sem_renew(key, *token, lease)
                        : connection->renew(key, *token, lease);
  }
  if (!renewed) return fail(common, renewed.error(), key);
  if (common.json) {
    std::cout << Json{{"ok", true}, {"lease_s", renewed->count()}}.dump() << "\n";
  } else {
    std::cout << renewed->count() << "\n";
  }
  return kExitOk;
}

int do_stats_or_ping(const Common& common, bool stats) {
  int worst = kExitOk;
  for (const Endpoint& endpoint : common.servers) {
    const std::string name = endpoint.to_string();
    auto connection = Connection::connect(endpoint, common.connect);
    if (!connection) {
      worst = std::max(worst, fail(common, connection.error(), name));
      continue;
    }
    const auto started = Clock::now();
    if (stats) {
      auto result = connection->stats();
      if (!result) {
        worst = std::max(worst, fail(common, result.error(), name));
        continue;
      }
      if (common.json) {
        std::cout
            << Json{{"ok", true}, {"server", name}, {"stats", Json::parse(result->json)}}.dump()
            << "\n";
      } else if (common.servers.size() == 1) {
        std::cout << result->json << "\n";
      } else {
        std::cout << name << " " << result->json << "\n";
      }
    } else {
      auto result = connection->ping();
      if (!result) {
        worst = std::max(worst, fail(common, result.error(), name));
        continue;
      }
      const double rtt_ms =
          std::chrono::duration<double, std::milli>(Clock::now() - started).count();
      if (common.json) {
        std::cout << Json{{"ok", true}, {"server", name}, {"rtt_ms", rtt_ms}}.dump() << "\n";
      } else {
        char text[64];
        std::snprintf(text, sizeof text, "%.3f", rtt_ms);
        std::cout << name << " ok " << text << " ms\n";
      }
    }
  }
  return worst;
}

// --- listen, emit
// ---------------------------------------------------------------------------------

// Signals are served by each server on its own: listen and emit talk to exactly one.
const Endpoint& signal_server(const Common& common) {
  if (common.replicated || common.servers.size() != 1) {
    throw UsageError{common.command + " talks to one server: give one --server"};
  }
  return common.servers.front();
}

// The words after the command (and after `--`): `least` to `most` of them, named by `names`.
void expect_arguments(const std::vector<std::string>& arguments, std::size_t least,
                      std::size_t most, const std::string& names) {
  if (arguments.size() < least || arguments.size() > most) throw UsageError{"expected " + names};
}

int do_listen(const cxxopts::ParseResult& parsed, const Common& common,
              const std::vector<std::string>& arguments) {
  expect_arguments(arguments, 1, 1, "one PATTERN");
  const std::string& pattern = arguments.front();
  const std::string group = parsed.count("group") != 0 ? parsed["group"].as<std::string>() : "";
  if (auto valid = validate_signal_pattern(pattern); !valid) return fail(common, valid.error());
  if (auto valid = validate_signal_group(group); !valid) return fail(common, valid.error());
  const Endpoint& server = signal_server(common);
  // Block SIGINT and SIGTERM before the connection's I/O thread starts, so they stay pending for
  // this thread to collect between signals (and the thread never takes them).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  SignalOptions options;
  options.connect = common.connect;
  auto connection = SignalConnection::connect(server, options);
  if (!connection) return fail(common, connection.error(), server.to_string());
  if (auto listening = connection->listen(pattern, group); !listening) {
    return fail(common, listening.error(), pattern);
  }
  std::uint64_t dropped_reported = 0;
  while (true) {
    const timespec no_wait{0, 0};
    if (::sigtimedwait(&stop_signals, nullptr, &no_wait) > 0) return kExitOk;
    auto next = connection->next(Milliseconds{200});
    if (!next) return fail(common, next.error(), server.to_string());
    if (const std::uint64_t dropped = connection->dropped(); dropped != dropped_reported) {
      std::cerr << "turnstile listen: " << dropped - dropped_reported
                << " signals dropped (the queue was full)\n";
      dropped_reported = dropped;
    }
    if (!next->has_value()) continue;
    const Signal& signal = **next;
    if (common.json) {
      // Replace bytes that are not UTF-8 (the wire does not promise any encoding).
      std::cout << Json{{"channel", signal.channel}, {"payload", signal.payload}}.dump(
                       -1, ' ', false, Json::error_handler_t::replace)
                << std::endl;
    } else {
      std::cout << signal.channel << " " << signal.payload << std::endl;
    }
  }
}

int do_emit(const Common& common, const std::vector<std::string>& arguments) {
  expect_arguments(arguments, 2, 2, "CHANNEL and PAYLOAD");
  const std::string& channel = arguments[0];
  const std::string& payload = arguments[1];
  if (auto valid = validate_signal_channel(channel); !valid) return fail(common, valid.error());
  if (auto valid = validate_signal_payload(channel, payload); !valid) {
    return fail(common, valid.error());
  }
  const Endpoint& server = signal_server(common);
  SignalOptions options;
  options.connect = common.connect;
  auto connection = SignalConnection::connect(server, options);
  if (!connection) return fail(common, connection.error(), server.to_string());
  auto delivered = connection->emit(channel, payload);
  if (!delivered) return fail(common, delivered.error(), channel);
  if (common.json) {
    std::cout << Json{{"ok", true}, {"delivered", *delivered}}.dump() << "\n";
  } else {
    std::cout << *delivered << "\n";
  }
  return kExitOk;
}

// --- check, admin show
// ------------------------------------------------------------------------------------------

// The kind word that may follow the key (check, admin show, admin release): lock (the default),
// sem or rw, the wire's words.
core::Namespace kind_argument(const std::vector<std::string>& arguments, std::size_t index) {
  if (arguments.size() <= index) return core::Namespace::kLock;
  const std::optional<core::Namespace> space = core::parse_namespace_word(arguments[index]);
  if (!space) throw UsageError{"the kind is lock, sem or rw, not '" + arguments[index] + "'"};
  return *space;
}

// `check KEY TOKEN [kind]`: exit 0 printing the seconds left while TOKEN holds KEY, 1 when not.
int do_check(const Common& common, const std::vector<std::string>& arguments) {
  expect_arguments(arguments, 2, 3, "KEY TOKEN [lock|sem|rw]");
  const std::string& key = arguments[0];
  const core::Namespace space = kind_argument(arguments, 2);
  if (auto valid = validate_key(key); !valid) return fail(common, valid.error());
  auto token = parse_token(arguments[1]);
  if (!token) return fail(common, token.error());
  std::string where;
  auto connection = connect_for(common, key, where);
  if (!connection) return fail(common, connection.error(), where);
  auto left = connection->check(space, key, *token);
  if (!left && left.error().code == ErrorCode::kLeaseExpired) {
    std::cerr << "turnstile check: " << key << ": not held by this token\n";
    if (common.json) {
      std::cout << Json{{"ok", false},
                        {"held", false},
                        {"error", std::string(error_code_name(ErrorCode::kLeaseExpired))},
                        {"message", "not held by this token"}}
                       .dump()
                << "\n";
    }
    return kExitError;
  }
  if (!left) return fail(common, left.error(), key);
  if (common.json) {
    std::cout << Json{{"ok", true}, {"held", true}, {"seconds_left", left->count()}}.dump() << "\n";
  } else {
    std::cout << left->count() << "\n";
  }
  return kExitOk;
}

std::string one_decimal(double value) {
  char text[64];
  std::snprintf(text, sizeof text, "%.1f", value);
  return text;
}

// The inspect JSON as lines a person reads: a summary, one line per holder (grant order) and per
// waiter (queue order), and the lock-delay.
void print_inspection(const Json& inspection) {
  const std::string kind = inspection.value("kind", std::string("?"));
  const std::string key = inspection.value("key", std::string("?"));
  const Json holders = inspection.value("holders", Json::array());
  const Json waiters = inspection.value("waiters", Json::array());
  if (!inspection.value("exists", false)) {
    std::cout << kind << " " << key << ": not held, nobody waiting\n";
    return;
  }
  std::cout << kind << " " << key << ": " << holders.size() << " holder"
            << (holders.size() == 1 ? "" : "s") << " (limit " << inspection.value("limit", 0)
            << "), " << waiters.size() << " waiting\n";
  const auto extras = [](const Json& entry) {
    std::string text;
    if (entry.contains("mode")) text += "  " + entry.value("mode", std::string());
    if (entry.value("orphaned", false)) text += "  orphaned";
    return text;
  };
  for (const Json& holder : holders) {
    std::cout << "  holder  fence " << holder.value("fence", std::uint64_t{0}) << "  session "
              << holder.value("session", std::uint64_t{0}) << "  lease left "
              << one_decimal(holder.value("lease_expires_in_s", 0.0)) << " s" << extras(holder)
              << "\n";
  }
  std::size_t place = 0;
  for (const Json& waiter : waiters) {
    std::cout << "  waiter  #" << ++place << "  session "
              << waiter.value("session", std::uint64_t{0}) << "  waited "
              << one_decimal(waiter.value("waited_s", 0.0)) << " s" << extras(waiter) << "\n";
  }
  if (inspection.contains("lock_delay_left_s")) {
    std::cout << "  lock-delay left " << one_decimal(inspection.value("lock_delay_left_s", 0.0))
              << " s\n";
  }
}

// `admin show KEY [kind]`: the key's holders and waiters (`inspect`).
int do_admin_show(const Common& common, const std::vector<std::string>& arguments) {
  expect_arguments(arguments, 1, 2, "KEY [lock|sem|rw]");
  const std::string& key = arguments[0];
  const core::Namespace space = kind_argument(arguments, 1);
  if (auto valid = validate_key(key); !valid) return fail(common, valid.error());
  std::string where;
  auto connection = connect_for(common, key, where);
  if (!connection) return fail(common, connection.error(), where);
  auto inspected = connection->inspect(space, key);
  if (!inspected) return fail(common, inspected.error(), key);
  const Json inspection = Json::parse(inspected->json, nullptr, false);
  if (!inspection.is_object()) {
    return fail(common, make_error(ErrorCode::kBadReply, "inspect sent no JSON object"), key);
  }
  if (common.json) {
    std::cout << Json{{"ok", true},
                      {"server", connection->endpoint().to_string()},
                      {"inspect", inspection}}
                     .dump(-1, ' ', false, Json::error_handler_t::replace)
              << "\n";
  } else {
    print_inspection(inspection);
  }
  return kExitOk;
}

// --- run
// ------------------------------------------------------------------------------------------

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

constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

int exit_status_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return kExitError;
}

int do_run(const Common& common, const RunOptions& run) {
  if (auto valid = validate_key(run.key); !valid) return fail(common, valid.error());
  // Block the signals we handle before any thread starts, so they all arrive at the signalfd.
  sigset_t handled;
  sigemptyset(&handled);
  for (int number : kForwardedSignals) sigaddset(&handled, number);
  sigaddset(&handled, SIGCHLD);
  sigset_t original;
  pthread_sigmask(SIG_BLOCK, &handled, &original);
  const int signal_fd = signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK);
  const int lost_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  const int acquired_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (signal_fd < 0 || lost_fd < 0 || acquired_fd < 0) {
    return fail(common, make_error(ErrorCode::kIo, std::strerror(errno)), "run");
  }

  GuardOptions options;
  options.timeout = run.timeout;
  options.lease = run.lease;
  options.on_lost = [lost_fd](const LossEvent&) {
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t written = ::write(lost_fd, &one, sizeof one);
  };

  // With --servers the guard follows the cluster's leader through failovers (members.h); the
  // command keeps running while the lease holds, and a loss still ends it as below.
  options.on_failover = [](const Endpoint& node) {
    std::cerr << "turnstile run: the lock is now renewed with the leader at " << node.to_string()
              << "\n";
  };
  // Acquire on a helper thread so that a signal while we wait still ends us at once.
  const Cluster cluster(common.servers, common.connect);
  const Members members(common.servers, common.connect);
  const std::string where = common.replicated ? std::string("the cluster's leader")
                                              : cluster.server_for(run.key).to_string();
  std::optional<Result<Guard>> acquired;
  std::thread acquirer([&] {
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
    acquired.emplace(std::move(result));
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t written = ::write(acquired_fd, &one, sizeof one);
  });
  while (true) {
    pollfd fds[2] = {{acquired_fd, POLLIN, 0}, {signal_fd, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) continue;
    if ((fds[0].revents & POLLIN) != 0) break;
    signalfd_siginfo info{};
    while (::read(signal_fd, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
      if (info.ssi_signo == SIGCHLD) continue;
      // Interrupted while waiting: leave now; closing the socket withdraws us from the queue.
      std::cerr << "turnstile run: interrupted by signal " << info.ssi_signo
                << " while waiting for " << run.key << "\n";
      std::cerr.flush();
      std::_Exit(128 + static_cast<int>(info.ssi_signo));
    }
  }
  acquirer.join();
  if (!acquired->ok()) {
    return fail(common, acquired->error(), run.key + " on " + where);
  }
  Guard guard = std::move(acquired->value());

  // The command's environment: ours, plus the lock's identity.
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
  posix_spawnattr_setsigmask(&attributes, &original);
  pid_t child = -1;
  const int spawned = posix_spawnp(&child, argv[0], nullptr, &attributes, argv.data(), envp.data());
  posix_spawnattr_destroy(&attributes);
  if (spawned != 0) {
    std::cerr << "turnstile run: " << run.command[0] << ": " << std::strerror(spawned) << "\n";
    (void)guard.release();
    return spawned == ENOENT ? kExitNotFound : kExitCannotExecute;
  }

  bool lost = false;
  std::optional<Clock::time_point> kill_at;
  int status = 0;
  bool exited = false;
  while (!exited) {
    int wait_ms = -1;
    if (kill_at) {
      wait_ms = static_cast<int>(std::max<std::int64_t>(
          0, std::chrono::duration_cast<Milliseconds>(*kill_at - Clock::now()).count() + 1));
    }
    pollfd fds[2] = {{signal_fd, POLLIN, 0}, {lost_fd, POLLIN, 0}};
    ::poll(fds, 2, wait_ms);
    if (kill_at && Clock::now() >= *kill_at) {
      std::cerr << "turnstile run: command still running after the grace period: SIGKILL\n";
      ::kill(child, SIGKILL);
      kill_at.reset();
    }
    std::uint64_t count = 0;
    if (::read(lost_fd, &count, sizeof count) == static_cast<ssize_t>(sizeof count) && !lost) {
      lost = true;
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
    while (::read(signal_fd, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
      if (info.ssi_signo == SIGCHLD) continue;
      // A terminal's signal (SI_KERNEL) already reached the whole foreground process group,
      // the command included; forwarding it again would deliver it twice.
      if (info.ssi_code == SI_KERNEL) continue;
      ::kill(child, static_cast<int>(info.ssi_signo));
    }
    if (::waitpid(child, &status, WNOHANG) == child) exited = true;
  }
  const auto released = guard.release();
  if (lost) return kExitLockLost;
  if (!released) {
    std::cerr << "turnstile run: release failed: " << released.error().to_string() << "\n";
  }
  return exit_status_code(status);
}

// --- cluster add-voter, remove-voter: the admin routes, over plain HTTP/1.1
// ------------------------------------------------------

struct HttpAnswer {
  int status = 0;
  std::string leader;  // X-Dflockd-Leader
  std::string body;
};

// One request on its own connection (Connection: close), read to EOF. `timeout` bounds the
// connect and then every wait for bytes: adding a voter answers once it has caught up.
Result<HttpAnswer> http_call(const Endpoint& server, const std::string& method,
                             const std::string& path, const std::string& token,
                             const std::string& body, Milliseconds connect_timeout,
                             Milliseconds timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(server.port);
  if (getaddrinfo(server.host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr) {
    return Error{ErrorCode::kConnect, "cannot resolve " + server.host};
  }
  const int fd = ::socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, 0);
  struct Close {
    int fd;
    ~Close() {
      if (fd >= 0) ::close(fd);
    }
  } closer{fd};
  auto wait_for = [fd](short events, Milliseconds wait) {
    pollfd poll_fd{fd, events, 0};
    return ::poll(&poll_fd, 1, static_cast<int>(wait.count())) == 1;
  };
  int flags = fd >= 0 ? ::fcntl(fd, F_GETFL) : -1;
  bool connected = flags >= 0 && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
  if (connected && ::connect(fd, found->ai_addr, found->ai_addrlen) != 0) {
    int error = 0;
    socklen_t length = sizeof error;
    connected = errno == EINPROGRESS && wait_for(POLLOUT, connect_timeout) &&
                ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error == 0;
  }
  freeaddrinfo(found);
  if (!connected) return Error{ErrorCode::kConnect, "cannot connect to " + server.to_string()};
  std::string request =
      method + " " + path + " HTTP/1.1\r\nHost: " + server.to_string() +
      "\r\nConnection: close\r\nAuthorization: Bearer " + token +
      "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\n\r\n" + body;
  std::size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!wait_for(POLLOUT, timeout)) return Error{ErrorCode::kTimeout, "send timed out"};
    } else {
      return Error{ErrorCode::kIo, "send failed: " + std::string(std::strerror(errno))};
    }
  }
  std::string response;
  char buffer[4096];
  while (true) {
    if (!wait_for(POLLIN, timeout)) return Error{ErrorCode::kTimeout, "no answer in time"};
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return Error{ErrorCode::kIo, "read failed: " + std::string(std::strerror(errno))};
    }
    response.append(buffer, static_cast<std::size_t>(n));
    if (response.size() > (1u << 20)) return Error{ErrorCode::kProtocol, "answer too long"};
    // Not HTTP (the TCP port, say, which keeps the connection open): say so at once.
    const std::string_view start = "HTTP/1.";
    if (response.compare(0, std::min(response.size(), start.size()), start, 0,
                         std::min(response.size(), start.size())) != 0) {
      break;
    }
  }
  const std::optional<HttpResponseHead> head = parse_http_response_head(response);
  if (!head) {
    return Error{ErrorCode::kProtocol, "not an HTTP answer (is --server the HTTP address?)"};
  }
  HttpAnswer answer;
  answer.status = head->status;
  answer.body = response.substr(head->size);
  if (const auto leader = head->headers.find("x-dflockd-leader"); leader != head->headers.end()) {
    answer.leader = leader->second;
  }
  return answer;
}

// `cluster status`: every node's `stats` cluster object, one line (or JSON object) per node.
// Exit 0 when every node answered and exactly one of them says it leads; else 1.
int do_cluster_status(const Common& common) {
  int worst = kExitOk;
  int leaders = 0;
  for (const Endpoint& endpoint : common.servers) {
    const std::string name = endpoint.to_string();
    auto connection = Connection::connect(endpoint, common.connect);
    auto stats = connection ? connection->stats() : Result<StatsResult>(connection.error());
    if (!stats) {
      worst = std::max(worst, fail(common, stats.error(), name));
      continue;
    }
    const Json parsed = Json::parse(stats->json, nullptr, false);
    if (!parsed.is_object() || !parsed.contains("cluster") || !parsed["cluster"].is_object()) {
      worst = std::max(worst,
                       fail(common, make_error(ErrorCode::kBadReply, "not a cluster node"), name));
      continue;
    }
    const Json& node = parsed["cluster"];
    if (node.value("role", std::string()) == "leader") ++leaders;
    if (common.json) {
      std::cout << Json{{"ok", true}, {"server", name}, {"cluster", node}}.dump() << "\n";
      continue;
    }
    std::cout << name << " node " << node.value("node_id", 0) << " "
              << node.value("role", std::string("?")) << " term " << node.value("term", 0)
              << " leader " << node.value("leader_id", 0) << " ("
              << node.value("leader_address", std::string()) << ") commit "
              << node.value("commit_index", 0) << " applied " << node.value("applied_index", 0)
              << " voters " << node.value("voters", Json::array()).dump() << "\n";
  }
  if (worst == kExitOk && leaders != 1) {
    std::cerr << "turnstile cluster status: " << leaders << " nodes say they lead, not 1\n";
    worst = kExitError;
  }
  return worst;
}

// The token of the HTTP admin routes: --admin-token, else TURNSTILE_ADMIN_TOKEN. A usage error
// without one, with a byte that cannot go in a header, or with --tls (the routes are plain HTTP).
std::string admin_token(const cxxopts::ParseResult& parsed, const Common& common) {
  std::string token;
  if (parsed.count("admin-token") != 0) {
    token = parsed["admin-token"].as<std::string>();
  } else if (const char* env = std::getenv("TURNSTILE_ADMIN_TOKEN"); env != nullptr) {
    token = env;
  }
  token = trim(token);
  if (token.empty()) throw UsageError{"--admin-token (or TURNSTILE_ADMIN_TOKEN) is required"};
  for (const char c : token) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      throw UsageError{"the admin token holds a control character"};
    }
  }
  if (common.connect.tls) throw UsageError{common.command + " speaks plain HTTP: no --tls"};
  return token;
}

// An admin route's answer other than 200, reported with its exit code: 77 for a refused token,
// 1 otherwise (a follower's 503 names the leader's client address).
int http_failure(const Common& common, const HttpAnswer& answer, const Endpoint& server) {
  const Json json = Json::parse(answer.body, nullptr, false);
  std::string message = "HTTP " + std::to_string(answer.status);
  if (json.is_object()) {
    message += " " + json.value("error", std::string());
    if (json.contains("detail") && json["detail"].is_string()) {
      message += ": " + json["detail"].get<std::string>();
    }
  }
  if (answer.status == 503 && !answer.leader.empty()) {
    message += " (the leader's client address is " + answer.leader +
               ": run this against the leader's HTTP address)";
  }
  ErrorCode code = ErrorCode::kProtocol;
  if (answer.status == 401 || answer.status == 403) code = ErrorCode::kAuth;
  if (answer.status == 503) code = ErrorCode::kNotLeader;
  return fail(common, Error{code, message}, server.to_string());
}

// --timeout of the admin commands, in milliseconds.
Milliseconds admin_timeout(const cxxopts::ParseResult& parsed) {
  const double timeout_s = parsed["timeout"].as<double>();
  if (!(timeout_s > 0 && timeout_s < 86400)) throw UsageError{"--timeout out of range"};
  return Milliseconds{static_cast<std::int64_t>(timeout_s * 1000)};
}

int do_cluster(const cxxopts::ParseResult& parsed, const Common& common,
               const std::string& subcommand) {
  const std::string token = admin_token(parsed, common);
  std::string method = "POST";
  std::string path = "/v1/admin/leader/transfer";
  std::string body;
  const std::int64_t id = subcommand == "transfer" ? 0 : parsed["id"].as<std::int64_t>();
  if (subcommand != "transfer" && id < 1) throw UsageError{"--id must be at least 1"};
  if (subcommand == "remove-voter") {
    method = "DELETE";
    path = "/v1/admin/voters/" + std::to_string(id);
  } else if (subcommand == "add-voter") {
    method = "POST";
    path = "/v1/admin/voters";
    body = Json{{"id", id},
                {"raft_address", required(parsed, "raft-address")},
                {"client_address", required(parsed, "client-address")}}
               .dump();
  }
  const Milliseconds timeout = admin_timeout(parsed);
  const Endpoint& server = common.servers.front();
  auto answer =
      http_call(server, method, path, token, body, common.connect.connect_timeout, timeout);
  if (!answer) return fail(common, answer.error(), server.to_string());
  Json json = Json::parse(answer->body, nullptr, false);
  if (answer->status == 200 && subcommand == "transfer") {
    const std::string leader = json.value("leader", std::string());
    if (common.json) {
      std::cout << Json{{"ok", true}, {"leader", leader}}.dump() << "\n";
    } else {
      std::cout << "leader: " << (leader.empty() ? "another node (not known here yet)" : leader)
                << "\n";
    }
    return kExitOk;
  }
  if (answer->status == 200) {
    if (common.json) {
      std::cout << Json{{"ok", true}, {"voters", json.value("voters", Json::array())}}.dump()
                << "\n";
    } else {
      std::cout << "voters:";
      for (const Json& voter : json.value("voters", Json::array())) std::cout << " " << voter;
      std::cout << "\n";
    }
    return kExitOk;
  }
  return http_failure(common, *answer, server);
}

// A key as one path segment: every byte but A-Z a-z 0-9 - . _ ~ percent-encoded.
std::string path_segment(std::string_view key) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string segment;
  for (const char c : key) {
    const bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                            (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' || c == '~';
    if (unreserved) {
      segment.push_back(c);
    } else {
      const auto byte = static_cast<unsigned char>(c);
      segment.push_back('%');
      segment.push_back(kHex[byte >> 4]);
      segment.push_back(kHex[byte & 0xf]);
    }
  }
  return segment;
}

// `admin release KEY [kind] [--fence N] [--clear-delay]`: DELETE
// /v1/admin/<locks|semaphores|rwlocks>/KEY[?fence=N][&clear_delay=true], the operator's
// force-release of every holder of KEY, or of the one with fence N; with --clear-delay it also
// ends the key's running lock-delay (docs/http-api.md, "Admin force-release").
int do_admin_release(const cxxopts::ParseResult& parsed, const Common& common,
                     const std::vector<std::string>& arguments) {
  expect_arguments(arguments, 1, 2, "KEY [lock|sem|rw]");
  const std::string& key = arguments[0];
  const core::Namespace space = kind_argument(arguments, 1);
  if (auto valid = validate_key(key); !valid) return fail(common, valid.error());
  std::string path = "/v1/admin/locks/";
  if (space == core::Namespace::kSemaphore) path = "/v1/admin/semaphores/";
  if (space == core::Namespace::kReadWrite) path = "/v1/admin/rwlocks/";
  path += path_segment(key);
  if (parsed.count("fence") != 0) {
    const std::uint64_t fence = parsed["fence"].as<std::uint64_t>();
    if (fence == 0) throw UsageError{"--fence must be at least 1 (leave it out for every holder)"};
    path += "?fence=" + std::to_string(fence);
  }
  const bool clear_delay = parsed.count("clear-delay") != 0 && parsed["clear-delay"].as<bool>();
  if (clear_delay) path += path.find('?') == std::string::npos ? "?" : "&";
  if (clear_delay) path += "clear_delay=true";
  const std::string token = admin_token(parsed, common);
  const Milliseconds timeout = admin_timeout(parsed);
  const Endpoint& server = common.servers.front();
  auto answer =
      http_call(server, "DELETE", path, token, "", common.connect.connect_timeout, timeout);
  if (!answer) return fail(common, answer.error(), server.to_string());
  if (answer->status != 200) return http_failure(common, *answer, server);
  const Json json = Json::parse(answer->body, nullptr, false);
  if (!json.is_object() || !json.contains("released") || !json["released"].is_number_unsigned()) {
    return fail(common, make_error(ErrorCode::kBadReply, "no count of released holders"),
                server.to_string());
  }
  const std::uint64_t released = json["released"].get<std::uint64_t>();
  const bool cleared = json.value("delay_cleared", false) == true;
  if (common.json) {
    Json out{{"ok", true}, {"released", released}};
    if (clear_delay) out["delay_cleared"] = cleared;
    std::cout << out.dump() << "\n";
  } else {
    std::cout << "released " << released;
    if (clear_delay)
      std::cout << (cleared ? ", lock-delay cleared" : ", no lock-delay was running");
    std::cout << "\n";
  }
  return kExitOk;
}

cxxopts::Options command_options(const std::string& command) {
  cxxopts::Options options("turnstile " + command);
  add_common_options(options);
  auto add = options.add_options();
  if (command == "acquire" || command == "run" || command == "release" || command == "renew") {
    add("read", "read-write lock key, read mode (shared with other readers); not with --key",
        cxxopts::value<std::string>())(
        "write", "read-write lock key, write mode (exclusive); not with --key",
        cxxopts::value<std::string>());
  }
  if (command == "acquire" || command == "run") {
    add("k,key", "lock key", cxxopts::value<std::string>())(
        "t,timeout", "seconds to wait for the lock (0: try once)",
        cxxopts::value<std::int64_t>()->default_value("10"))(
        "l,lease", "lease in seconds (0: the server's default)",
        cxxopts::value<std::int64_t>()->default_value("0"))(
        "semaphore", "a semaphore with this many slots instead of a lock",
        cxxopts::value<std::int64_t>());
  }
  if (command == "run") {
    add("grace", "seconds between SIGTERM and SIGKILL when the lock is lost",
        cxxopts::value<double>()->default_value("10"))(
        "no-kill-on-loss", "let the command run on when the lock is lost");
  }
  if (command == "release" || command == "renew") {
    add("k,key", "lock key", cxxopts::value<std::string>())("token", "the grant's token",
                                                            cxxopts::value<std::string>())(
        "semaphore", "the token is a semaphore's (sr/sn)");
  }
  if (command == "renew") {
    add("l,lease", "new lease in seconds (0: the server's default)",
        cxxopts::value<std::int64_t>()->default_value("0"));
  }
  if (command == "listen") options.custom_help("[OPTION...] PATTERN");
  if (command == "emit") options.custom_help("[OPTION...] CHANNEL PAYLOAD");
  if (command == "check") options.custom_help("[OPTION...] KEY TOKEN [lock|sem|rw]");
  if (command == "admin show") options.custom_help("[OPTION...] KEY [lock|sem|rw]");
  if (command == "admin release") {
    options.custom_help("[OPTION...] KEY [lock|sem|rw]");
    add("fence", "free only the holder with this fence (default: every holder)",
        cxxopts::value<std::uint64_t>())("clear-delay",
                                         "also end the key's running lock-delay (and start none)",
                                         cxxopts::value<bool>()->default_value("false"))(
        "admin-token", "the server's admin token (else TURNSTILE_ADMIN_TOKEN)",
        cxxopts::value<std::string>())("timeout", "seconds to wait for the answer",
                                       cxxopts::value<double>()->default_value("10"));
  }
  if (command == "listen") {
    add("g,group", "listen as a member of this queue group (each signal goes to one member)",
        cxxopts::value<std::string>());
  }
  if (command == "cluster add-voter" || command == "cluster remove-voter") {
    add("id", "the node's raft id", cxxopts::value<std::int64_t>()->default_value("0"));
  }
  if (command == "cluster add-voter" || command == "cluster remove-voter" ||
      command == "cluster transfer") {
    add("admin-token", "the cluster's admin token (else TURNSTILE_ADMIN_TOKEN)",
        cxxopts::value<std::string>())(
        "timeout", "seconds to wait for the answer (adding waits for the node to catch up)",
        cxxopts::value<double>()->default_value("60"));
  }
  if (command == "cluster add-voter") {
    add("raft-address", "where the new node listens for raft traffic (its --raft-addr)",
        cxxopts::value<std::string>())("client-address",
                                       "where its clients connect (its --advertise-addr)",
                                       cxxopts::value<std::string>());
  }
  return options;
}

int dispatch(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help" ||
      std::string(argv[1]) == "help") {
    std::cout << kUsage;
    return argc < 2 ? kExitUsage : kExitOk;
  }
  std::string command = argv[1];
  int first_option = 2;
  if (command == "cluster") {
    std::string subcommand = argc > 2 ? argv[2] : "";
    if (subcommand == "add") subcommand = "add-voter";
    if (subcommand == "remove") subcommand = "remove-voter";
    if (subcommand != "status" && subcommand != "add-voter" && subcommand != "remove-voter" &&
        subcommand != "transfer") {
      throw UsageError{"cluster takes status, add, remove or transfer"};
    }
    command += " " + subcommand;
    first_option = 3;
  } else if (command == "admin") {
    const std::string subcommand = argc > 2 ? argv[2] : "";
    if (subcommand != "show" && subcommand != "release") {
      throw UsageError{"admin takes show or release"};
    }
    command += " " + subcommand;
    first_option = 3;
  } else if (command != "acquire" && command != "release" && command != "renew" &&
             command != "stats" && command != "ping" && command != "run" && command != "listen" &&
             command != "emit" && command != "check") {
    throw UsageError{"unknown command '" + command + "'"};
  }
  // Everything after `--` is the command `run` runs; cxxopts sees only what comes before.
  std::vector<char*> own{argv[0]};
  std::vector<std::string> rest;
  bool after_separator = false;
  for (int i = first_option; i < argc; ++i) {
    if (after_separator) {
      rest.emplace_back(argv[i]);
    } else if (std::string(argv[i]) == "--") {
      after_separator = true;
    } else {
      own.push_back(argv[i]);
    }
  }
  // listen, emit, check and admin take words (PATTERN; CHANNEL PAYLOAD; KEY ...), also after
  // `--` (a payload or a key that begins with '-').
  const bool takes_words = command == "listen" || command == "emit" || command == "check" ||
                           command.starts_with("admin ");
  if (after_separator && command != "run" && !takes_words) {
    throw UsageError{"`--` is only for run, listen, emit, check and admin"};
  }
  cxxopts::Options options = command_options(command);
  const cxxopts::ParseResult parsed = options.parse(static_cast<int>(own.size()), own.data());
  if (parsed.count("help") != 0) {
    std::cout << options.help() << "\n";
    return kExitOk;
  }
  if (!parsed.unmatched().empty() && !takes_words) {
    throw UsageError{"unexpected argument '" + parsed.unmatched().front() + "'"};
  }
  const Common common = read_common(parsed, command);
  if (command == "acquire") return do_acquire(parsed, common);
  if (command == "release") return do_release_or_renew(parsed, common, false);
  if (command == "renew") return do_release_or_renew(parsed, common, true);
  if (command == "stats") return do_stats_or_ping(common, true);
  if (command == "ping") return do_stats_or_ping(common, false);
  if (takes_words) {
    std::vector<std::string> words = parsed.unmatched();
    words.insert(words.end(), rest.begin(), rest.end());
    if (command == "listen") return do_listen(parsed, common, words);
    if (command == "emit") return do_emit(common, words);
    if (command == "check") return do_check(common, words);
    if (command == "admin show") return do_admin_show(common, words);
    return do_admin_release(parsed, common, words);
  }
  if (command == "cluster status") return do_cluster_status(common);
  if (command.starts_with("cluster ")) return do_cluster(parsed, common, command.substr(8));

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
  run.command = std::move(rest);
  if (run.command.empty()) throw UsageError{"run needs a command after `--`"};
  return do_run(common, run);
}

}  // namespace

int run_cli(int argc, char** argv) {
  try {
    return dispatch(argc, argv);
  } catch (const UsageError& error) {
    std::cerr << "turnstile: " << error.message << "\n(see turnstile --help)\n";
    return kExitUsage;
  } catch (const cxxopts::exceptions::exception& error) {
    std::cerr << "turnstile: " << error.what() << "\n(see turnstile --help)\n";
    return kExitUsage;
  }
}

}  // namespace turnstile::client
