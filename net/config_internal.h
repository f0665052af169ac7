// What the files of turnstiled's configuration parsing (net/config.h) share, and nothing outside
// the turnstile_net_config library uses: the settings table (net/config_settings.cc), turning a
// value into a setting (net/config_values.cc), the secrets (net/config_secrets.cc) and the
// cluster checks (net/config_cluster.cc); net/config.cc parses the command line with them.
//
// Thread affinity: parsed once on the main thread before anything starts, like net/config.h.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "net/config.h"

namespace cxxopts {
class ParseResult;  // <cxxopts.hpp> is included only where the command line is read
}

namespace turnstile::net::config_internal {

constexpr std::string_view kProgram = "turnstiled";
constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kMaxThreads = 1024;
constexpr std::string_view kEnvPrefixes[] = {"TURNSTILE_", "DFLOCKD_"};

// ---- The settings table (net/config_settings.cc) ----------------------------------------------

// kText: any text. kAddress: host:port or [v6]:port, stored canonical (empty = unset).
// kPeers: --cluster-peers. kSecret, kSecretFile: a secret and the file holding it, resolved
// together (resolve_secret), never by apply.
enum class Kind { kText, kInteger, kBool, kAddress, kPeers, kSecret, kSecretFile };

using Target =
    std::variant<std::monostate, std::string Config::*, int Config::*, std::int64_t Config::*,
                 bool Config::*, std::int64_t Config::TestHooks::*, std::string Config::Cluster::*,
                 std::int64_t Config::Cluster::*, std::uint64_t Config::Cluster::*,
                 bool Config::Cluster::*>;

struct Setting {
  std::string_view flag;  // without the leading "--"
  std::string_view env;   // after the TURNSTILE_ / DFLOCKD_ prefix; empty: flag only
  Kind kind;
  std::string_view value_name;  // shown in --help
  std::int64_t min;             // integers only
  std::int64_t max;
  Target target;
  std::string_view help;
  bool hidden = false;   // left out of --help (the test hooks, Config::TestHooks)
  bool cluster = false;  // a cluster flag (Config::Cluster): needs --raft-dir
};

// Every setting, in --help order.
std::span<const Setting> settings();

bool takes_value(const Setting& setting);

const Setting* find_setting(std::string_view flag);

// The --help text; `defaults` gives the defaults it shows.
std::string usage_text(const Config& defaults);

// ---- Values (net/config_values.cc) ------------------------------------------------------------

std::string_view trim(std::string_view text);

std::string lowercase(std::string_view text);

// Go's %q, roughly: the value stays on one line whatever it holds, and long values are cut.
std::string quote(std::string_view value);

// Where a value came from: the command line, or the named environment variable.
struct Source {
  std::string value;
  std::string env_name;  // empty: the flag
};

ConfigExit usage_error(std::string message);

// `turnstiled: invalid value "abc" for --port (from TURNSTILE_PORT): not an integer`.
// Secrets pass show_value = false so they never reach a terminal or a log.
ConfigExit invalid_value(const Setting& setting, const Source& source, std::string_view reason,
                         bool show_value = true);

// Flag values take Go's strconv.ParseBool words (1, t, true, 0, f, false) and, like the
// environment, yes and no; all case-insensitive. Environment values take only
// 1/yes/true/0/no/false (reference section 4): anything else is an error.
std::optional<bool> parse_bool(std::string_view text, bool from_env);

// A host:port address: `host` is an IPv4 literal or a host name (lower case), or an IPv6
// literal (compressed by inet_ntop, without its brackets); `text` is the canonical form,
// `host:port` or `[v6]:port`.
struct HostPort {
  std::string host;
  int port = 0;
  bool v6 = false;
  std::string text;
};

bool is_wildcard(const HostPort& address);

std::string join_host_port(std::string_view host, bool v6, int port);

// The canonical form of a host: an IPv6 literal (bracketed or not) compressed, an IPv4 literal
// as is, anything else (a host name) in lower case; `v6` says which. nullopt: an IPv6-looking
// text (brackets or a colon) that is not an IPv6 literal.
std::optional<std::string> canonical_host(std::string_view host, bool& v6);

// An address of the grammar of core/address.h, in its canonical form; or why the text is not one.
std::variant<HostPort, std::string> parse_host_port(std::string_view text);

// A cluster address: host:port that others can connect to, so never a wildcard host.
std::variant<HostPort, std::string> parse_reachable_address(std::string_view text);

// Applies one non-secret setting from `source` to `config`; an error when the value is invalid.
std::optional<ConfigExit> apply(const Setting& setting, const Source& source, Config& config);

// The first of TURNSTILE_<NAME>, DFLOCKD_<NAME> that is set. An empty value counts as unset for
// ordinary settings (so `TURNSTILE_PORT=` in a compose file defers to the next source); for the
// auth-token variables it is a value, and an error, so a deployment that meant to set a secret
// never starts without one.
std::optional<Source> from_environment(const Setting& setting, const EnvLookup& env,
                                       bool empty_is_value);

// Which source gave a setting its value: the setting, and the variable (empty: the flag).
struct Given {
  const Setting* setting;
  std::string env_name;
};

// ---- Secrets (net/config_secrets.cc) -----------------------------------------------------------

// Resolves the auth token, the cluster secret and the admin token, each from the first of its
// sources that is set (resolve_secret has the order); the winning sources join `given`.
std::optional<ConfigExit> resolve_secrets(const cxxopts::ParseResult& parsed, const EnvLookup& env,
                                          Config& config, std::vector<Given>& given);

// ---- Cluster mode (net/config_cluster.cc) ------------------------------------------------------

// The cross-flag rules of cluster mode, after every value has been parsed on its own; fills in
// the default --advertise-addr.
std::optional<ConfigExit> check_cluster(const std::vector<Given>& given, Config& config);

}  // namespace turnstile::net::config_internal
