#include "client/cli.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cxxopts.hpp>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "client/cli_common.h"
#include "client/cluster.h"
#include "client/connection.h"
#include "client/members.h"
#include "client/signal_connection.h"

namespace turnstile::client::cli {
namespace {

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

}  // namespace

int fail(const Common& common, const Error& error, const std::string& context) {
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

namespace {

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

}  // namespace

std::string trim(std::string text) {
  const auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!text.empty() && is_space(text.back())) text.pop_back();
  std::size_t start = 0;
  while (start < text.size() && is_space(text[start])) ++start;
  return text.substr(start);
}

namespace {

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

}  // namespace

Seconds seconds_option(const cxxopts::ParseResult& parsed, const std::string& name) {
  const std::int64_t value = parsed[name].as<std::int64_t>();
  if (value < 0) throw UsageError{"--" + name + " must not be negative"};
  return Seconds{value};
}

std::string required(const cxxopts::ParseResult& parsed, const std::string& name) {
  if (parsed.count(name) == 0) throw UsageError{"--" + name + " is required"};
  return parsed[name].as<std::string>();
}

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

namespace {

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

}  // namespace

void expect_arguments(const std::vector<std::string>& arguments, std::size_t least,
                      std::size_t most, const std::string& names) {
  if (arguments.size() < least || arguments.size() > most) throw UsageError{"expected " + names};
}

namespace {

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

}  // namespace

// --- check
// -------------------------------------------------------------------------------------------------

core::Namespace kind_argument(const std::vector<std::string>& arguments, std::size_t index) {
  if (arguments.size() <= index) return core::Namespace::kLock;
  const std::optional<core::Namespace> space = core::parse_namespace_word(arguments[index]);
  if (!space) throw UsageError{"the kind is lock, sem or rw, not '" + arguments[index] + "'"};
  return *space;
}

namespace {

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

// The command argv[1] names (with argv[2] for cluster and admin: "cluster add-voter"), or a usage
// error. `first_option`: the index of its first option.
std::string command_name(int argc, char** argv, int& first_option) {
  std::string command = argv[1];
  first_option = 2;
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
  return command;
}

// Everything after `--` is the command `run` runs; cxxopts sees only what comes before. Appends
// the arguments from `first` on before `--` to `own`, those after it to `rest`; true when there
// was a `--`.
bool split_at_separator(int argc, char** argv, int first, std::vector<char*>& own,
                        std::vector<std::string>& rest) {
  bool after_separator = false;
  for (int i = first; i < argc; ++i) {
    if (after_separator) {
      rest.emplace_back(argv[i]);
    } else if (std::string(argv[i]) == "--") {
      after_separator = true;
    } else {
      own.push_back(argv[i]);
    }
  }
  return after_separator;
}

// Runs `command` with its options read. `words`: the words it takes (listen, emit, check, admin),
// or the command `run` runs.
int run_command(const std::string& command, const cxxopts::ParseResult& parsed,
                const Common& common, std::vector<std::string> words) {
  if (command == "acquire") return do_acquire(parsed, common);
  if (command == "release") return do_release_or_renew(parsed, common, false);
  if (command == "renew") return do_release_or_renew(parsed, common, true);
  if (command == "stats") return do_stats_or_ping(common, true);
  if (command == "ping") return do_stats_or_ping(common, false);
  if (command == "listen") return do_listen(parsed, common, words);
  if (command == "emit") return do_emit(common, words);
  if (command == "check") return do_check(common, words);
  if (command == "admin show") return do_admin_show(common, words);
  if (command == "admin release") return do_admin_release(parsed, common, words);
  if (command == "cluster status") return do_cluster_status(common);
  if (command.starts_with("cluster ")) return do_cluster(parsed, common, command.substr(8));
  return do_run(parsed, common, std::move(words));
}

int dispatch(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help" ||
      std::string(argv[1]) == "help") {
    std::cout << kUsage;
    return argc < 2 ? kExitUsage : kExitOk;
  }
  int first_option = 2;
  const std::string command = command_name(argc, argv, first_option);
  std::vector<char*> own{argv[0]};
  std::vector<std::string> rest;
  const bool after_separator = split_at_separator(argc, argv, first_option, own, rest);
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
  std::vector<std::string> words = takes_words ? parsed.unmatched() : std::vector<std::string>{};
  words.insert(words.end(), rest.begin(), rest.end());
  return run_command(command, parsed, common, std::move(words));
}

}  // namespace
}  // namespace turnstile::client::cli

namespace turnstile::client {

int run_cli(int argc, char** argv) {
  try {
    return cli::dispatch(argc, argv);
  } catch (const cli::UsageError& error) {
    std::cerr << "turnstile: " << error.message << "\n(see turnstile --help)\n";
    return kExitUsage;
  } catch (const cxxopts::exceptions::exception& error) {
    std::cerr << "turnstile: " << error.what() << "\n(see turnstile --help)\n";
    return kExitUsage;
  }
}

}  // namespace turnstile::client
