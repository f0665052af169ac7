// What the `turnstile` tool's commands share (cli.h is the tool itself): the common options
// (--server, --servers, TLS, auth, --json), usage errors, error reporting with exit codes, and
// the entry points of the commands that live in files of their own (cli_run.cc: `run`;
// cli_admin.cc: `cluster` and `admin`). For the CLI's files only: not part of the library, not
// installed.
//
// Thread affinity: as cli.h (one thread, before any other starts).
#pragma once

#include <chrono>
#include <cstddef>
#include <cxxopts.hpp>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "client/connection.h"
#include "client/result.h"

namespace turnstile::client::cli {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// Thrown for bad flags or arguments; run_cli prints it and exits kExitUsage.
struct UsageError {
  std::string message;
};

// The common options, read once (read_common in cli.cc).
struct Common {
  std::vector<Endpoint> servers;  // --server (each key on one), or the --servers members
  bool replicated = false;        // --servers: one replicated cluster
  ConnectOptions connect;
  bool json = false;
  std::string command;
};

// Reports an error on stderr (and, with --json, as a JSON line on stdout); returns its exit code.
int fail(const Common& common, const Error& error, const std::string& context = {});

// `text` without the blanks (space, tab, CR, LF) at either end.
std::string trim(std::string text);

// --name, a whole number of seconds, not negative.
Seconds seconds_option(const cxxopts::ParseResult& parsed, const std::string& name);

// --name, which must be given.
std::string required(const cxxopts::ParseResult& parsed, const std::string& name);

// What acquire, release, renew and run work on: --key K (a lock, or with --semaphore a
// semaphore), --read K or --write K (a read-write lock in that mode).
struct Target {
  std::string key;
  std::optional<RwMode> mode;  // set for --read and --write
};

Target read_target(const cxxopts::ParseResult& parsed);

// The connection `key` is taken on: the replicated cluster's leader (--servers, found within the
// connect timeout plus 15 s for an election), or the key's server (--server). `where` names it
// for error messages.
Result<Connection> connect_for(const Common& common, std::string_view key, std::string& where);

// The words after the command (and after `--`): `least` to `most` of them, named by `names`.
void expect_arguments(const std::vector<std::string>& arguments, std::size_t least,
                      std::size_t most, const std::string& names);

// The kind word that may follow the key (check, admin show, admin release): lock (the default),
// sem or rw, the wire's words.
core::Namespace kind_argument(const std::vector<std::string>& arguments, std::size_t index);

// --- `run` (cli_run.cc): takes the lock, runs `command` (the words after `--`) while it holds it.
int do_run(const cxxopts::ParseResult& parsed, const Common& common,
           std::vector<std::string> command);

// --- `cluster` and `admin` (cli_admin.cc)
int do_cluster_status(const Common& common);
int do_cluster(const cxxopts::ParseResult& parsed, const Common& common,
               const std::string& subcommand);
int do_admin_show(const Common& common, const std::vector<std::string>& arguments);
int do_admin_release(const cxxopts::ParseResult& parsed, const Common& common,
                     const std::vector<std::string>& arguments);

}  // namespace turnstile::client::cli
