// turnstiled's flag and environment parsing. cxxopts splits the command line; every value is
// taken as text and converted here, so each setting has one conversion and one error format
// whether it came from a flag or from the environment.
#include "net/config.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cxxopts.hpp>
#include <limits>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#ifndef TURNSTILE_VERSION
#error "TURNSTILE_VERSION must be defined (net/CMakeLists.txt passes the CMake project version)"
#endif

namespace turnstile::net {
namespace {

constexpr std::string_view kProgram = "turnstiled";
constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();
// The largest seconds value whose nanosecond count fits in an int64 (reference 1.3, edge 23).
constexpr std::int64_t kMaxSeconds = 9'223'372'036;
constexpr std::int64_t kMaxThreads = 1024;
// A client sends the token as the argument line of `auth`, which holds at most 64 KiB
// (core::RequestParser::Limits::auth_line_max): a longer token could never authenticate.
constexpr std::size_t kMaxAuthTokenBytes = 64 * 1024;
// Reading a token file stops here, so pointing the flag at /dev/zero cannot exhaust memory.
constexpr std::size_t kMaxAuthTokenFileBytes = 1024 * 1024;
constexpr std::size_t kQuotedValueMax = 64;
// --test-wall-clock-offset-s: a century either way is more than any test needs, and keeps the
// offset in nanoseconds far from overflowing.
constexpr std::int64_t kMaxWallClockOffsetSeconds = 3'155'760'000;
// --test-fence-range: at most the production range, 2^22.
constexpr std::int64_t kMaxTestFenceRange = std::int64_t{1} << 22;
constexpr std::string_view kEnvPrefixes[] = {"TURNSTILE_", "DFLOCKD_"};

enum class Kind { kText, kInteger, kBool, kAuthToken, kAuthTokenFile };

using Target =
    std::variant<std::monostate, std::string Config::*, int Config::*, std::int64_t Config::*,
                 bool Config::*, std::int64_t Config::TestHooks::*>;

struct Setting {
  std::string_view flag;  // without the leading "--"
  std::string_view env;   // after the TURNSTILE_ / DFLOCKD_ prefix; empty: flag only
  Kind kind;
  std::string_view value_name;  // shown in --help
  std::int64_t min;             // integers only
  std::int64_t max;
  Target target;
  std::string_view help;
  bool hidden = false;  // left out of --help (the test hooks, Config::TestHooks)
};

// Order is --help order; names, env names and bounds are reference section 4 plus the
// turnstile additions (--threads, --idle-poll-us, --pin-threads, --huge-pages, --idle-timeout).
const Setting kSettings[] = {
    {"host", "HOST", Kind::kText, "address", 0, 0, &Config::host,
     "address to listen on (IPv4, IPv6 or a host name)"},
    {"port", "PORT", Kind::kInteger, "int", 0, 65535, &Config::port,
     "TCP port to listen on; 0 picks an ephemeral port"},
    {"threads", "THREADS", Kind::kInteger, "int", 1, kMaxThreads, &Config::threads,
     "event-loop threads the key space is sharded over"},
    {"idle-poll-us", "IDLE_POLL_US", Kind::kInteger, "microseconds", 0, 10'000,
     &Config::idle_poll_us,
     "longest a thread keeps polling for work before it sleeps (adaptive); 0 = never polls"},
    {"pin-threads", "PIN_THREADS", Kind::kBool, "", 0, 0, &Config::pin_threads,
     "run each thread on one CPU of those allowed (thread i on the i-th, round robin)"},
    {"huge-pages", "HUGE_PAGES", Kind::kBool, "", 0, 0, &Config::huge_pages,
     "keep the heap in transparent huge pages (restarts once with GLIBC_TUNABLES set)"},
    {"default-lease-ttl", "DEFAULT_LEASE_TTL_S", Kind::kInteger, "seconds", 1, kMaxSeconds,
     &Config::default_lease_ttl_s, "lease given to an acquire that names none"},
    {"lease-sweep-interval", "LEASE_SWEEP_INTERVAL_S", Kind::kInteger, "seconds", 1, kMaxSeconds,
     &Config::lease_sweep_interval_s,
     "accepted for compatibility; bounds timer slack (expiry is event-driven)"},
    {"gc-interval", "GC_INTERVAL_S", Kind::kInteger, "seconds", 1, kMaxSeconds,
     &Config::gc_interval_s, "accepted for compatibility; collection is event-driven"},
    {"gc-max-idle", "GC_MAX_IDLE_S", Kind::kInteger, "seconds", 0, kMaxSeconds,
     &Config::gc_max_idle_s, "an unused key is collected once idle longer than this; 0 = at once"},
    {"max-locks", "MAX_LOCKS", Kind::kInteger, "int", 1, kInt64Max, &Config::max_locks,
     "most keys (locks and semaphores) held in memory at once, across all threads"},
    {"max-waiters", "MAX_WAITERS", Kind::kInteger, "int", 0, kInt64Max, &Config::max_waiters,
     "most queued waiters per key; 0 = unlimited"},
    {"max-connections", "MAX_CONNECTIONS", Kind::kInteger, "int", 0, kInt64Max,
     &Config::max_connections, "most open connections; 0 = unlimited"},
    {"max-connections-per-ip", "MAX_CONNECTIONS_PER_IP", Kind::kInteger, "int", 0, kInt64Max,
     &Config::max_connections_per_ip, "most open connections from one IP address; 0 = unlimited"},
    {"read-timeout", "READ_TIMEOUT_S", Kind::kInteger, "seconds", 1, kMaxSeconds,
     &Config::read_timeout_s, "time for a request to arrive once its first byte is in"},
    {"idle-timeout", "IDLE_TIMEOUT_S", Kind::kInteger, "seconds", 0, kMaxSeconds,
     &Config::idle_timeout_s, "close a connection idle between requests this long; 0 = never"},
    {"write-timeout", "WRITE_TIMEOUT_S", Kind::kInteger, "seconds", 0, kMaxSeconds,
     &Config::write_timeout_s, "time for a reply to be written; 0 = no deadline"},
    {"shutdown-timeout", "SHUTDOWN_TIMEOUT_S", Kind::kInteger, "seconds", 0, kMaxSeconds,
     &Config::shutdown_timeout_s, "how long a graceful shutdown waits; 0 = forever"},
    {"auto-release-on-disconnect", "AUTO_RELEASE_ON_DISCONNECT", Kind::kBool, "", 0, 0,
     &Config::auto_release_on_disconnect, "release a connection's locks when it closes"},
    {"tls-cert", "TLS_CERT", Kind::kText, "path", 0, 0, &Config::tls_cert,
     "TLS certificate (PEM); needs --tls-key"},
    {"tls-key", "TLS_KEY", Kind::kText, "path", 0, 0, &Config::tls_key,
     "TLS private key (PEM); needs --tls-cert"},
    {"auth-token", "AUTH_TOKEN", Kind::kAuthToken, "token", 0, 0, std::monostate{},
     "shared secret clients must send with `auth` (visible in ps; prefer the file)"},
    {"auth-token-file", "AUTH_TOKEN_FILE", Kind::kAuthTokenFile, "path", 0, 0, std::monostate{},
     "file holding the shared secret on one line"},
    {"fence-state-file", "FENCE_STATE_FILE", Kind::kText, "path", 0, 0, &Config::fence_state_file,
     "fence journal: fences keep increasing across restarts and clock steps; empty = off"},
    {"http-port", "HTTP_PORT", Kind::kInteger, "int", 0, 65535, &Config::http_port,
     "HTTP API port; 0 = HTTP off; must differ from --port"},
    {"http-host", "HTTP_HOST", Kind::kText, "address", 0, 0, &Config::http_host,
     "address the HTTP API listens on (default: --host)"},
    {"http-session-idle-timeout", "HTTP_SESSION_IDLE_S", Kind::kInteger, "seconds", 0, kMaxSeconds,
     &Config::http_session_idle_timeout_s,
     "HTTP sessions idle twice this long are reaped; 0 = never"},
    {"http-max-sessions", "HTTP_MAX_SESSIONS", Kind::kInteger, "int", 0, kInt64Max,
     &Config::http_max_sessions, "most live HTTP sessions; 0 = unlimited"},
    {"http-max-sessions-per-ip", "HTTP_MAX_SESSIONS_PER_IP", Kind::kInteger, "int", 0, kInt64Max,
     &Config::http_max_sessions_per_ip, "most live HTTP sessions per IP address; 0 = unlimited"},
    {"http-max-connections-per-ip", "HTTP_MAX_CONNECTIONS_PER_IP", Kind::kInteger, "int", 0,
     kInt64Max, &Config::http_max_connections_per_ip,
     "most open HTTP connections per IP address; 0 = unlimited"},
    {"http-rate-limit-per-ip", "HTTP_RATE_LIMIT_PER_IP", Kind::kInteger, "per-second", 0,
     1'000'000'000, &Config::http_rate_limit_per_ip,
     "HTTP requests per second per IP address (token bucket); 0 = unlimited"},
    {"http-rate-limit-burst", "HTTP_RATE_LIMIT_BURST", Kind::kInteger, "int", 0, 1'000'000'000,
     &Config::http_rate_limit_burst, "token bucket size of the HTTP rate limit; 0 = the rate"},
    {"http-cors-allowed-origins", "HTTP_CORS_ALLOWED_ORIGINS", Kind::kText, "origins", 0, 0,
     &Config::http_cors_allowed_origins, "comma list of origins allowed by CORS; * = any"},
    {"debug", "DEBUG", Kind::kBool, "", 0, 0, &Config::debug, "log at debug level"},
    // The test hooks (Config::TestHooks): hidden from --help, and not read from the environment,
    // so a stray variable can never shift a production server's clock or fences.
    {"test-wall-clock-offset-s", "", Kind::kInteger, "seconds", -kMaxWallClockOffsetSeconds,
     kMaxWallClockOffsetSeconds, &Config::TestHooks::wall_clock_offset_s,
     "FOR TESTS ONLY: added to the wall clock that seeds fences (simulates a clock step)",
     /*hidden=*/true},
    {"test-fence-range", "", Kind::kInteger, "fences", 2, kMaxTestFenceRange,
     &Config::TestHooks::fence_range,
     "FOR TESTS ONLY: the fence journal's reservation range (default: the production 2^22)",
     /*hidden=*/true},
    {"test-fence-write-failures", "", Kind::kInteger, "n", 0, 1000,
     &Config::TestHooks::fence_write_failures,
     "FOR TESTS ONLY: fail the next n fence journal writes after start-up as if fsync failed",
     /*hidden=*/true},
};

bool takes_value(const Setting& setting) { return setting.kind != Kind::kBool; }

const Setting* find_setting(std::string_view flag) {
  for (const Setting& setting : kSettings) {
    if (setting.flag == flag) return &setting;
  }
  return nullptr;
}

bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && is_ascii_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_ascii_space(text.back())) text.remove_suffix(1);
  return text;
}

std::string lowercase(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// Go's %q, roughly: the value stays on one line whatever it holds, and long values are cut.
std::string quote(std::string_view value) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  const bool cut = value.size() > kQuotedValueMax;
  for (char c : value.substr(0, kQuotedValueMax)) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (byte < 0x20 || byte == 0x7f) {
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 0xf];
    } else {
      out += c;
    }
  }
  out += cut ? "\"..." : "\"";
  return out;
}

// Where a value came from: the command line, or the named environment variable.
struct Source {
  std::string value;
  std::string env_name;  // empty: the flag
};

std::string fail_prefix() { return std::string(kProgram) + ": "; }

ConfigExit usage_error(std::string message) { return ConfigExit{2, fail_prefix() + message}; }

// `turnstiled: invalid value "abc" for --port (from TURNSTILE_PORT): not an integer`.
// Secrets pass show_value = false so they never reach a terminal or a log.
ConfigExit invalid_value(const Setting& setting, const Source& source, std::string_view reason,
                         bool show_value = true) {
  std::string message = "invalid value ";
  if (show_value) message += quote(source.value) + " ";
  message += "for --" + std::string(setting.flag);
  if (!source.env_name.empty()) message += " (from " + source.env_name + ")";
  message += ": ";
  message += reason;
  return usage_error(std::move(message));
}

// Decimal like Go's strconv.ParseInt(s, 10, 64): optional sign, digits, nothing else.
enum class IntegerParse { kOk, kNotInteger, kTooSmall, kTooLarge };

IntegerParse parse_int64(std::string_view text, std::int64_t& value) {
  std::string_view digits = text;
  if (!digits.empty() && (digits.front() == '+' || digits.front() == '-')) digits.remove_prefix(1);
  if (digits.empty() ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return IntegerParse::kNotInteger;
  }
  if (text.front() == '+') text.remove_prefix(1);
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error == std::errc::result_out_of_range) {
    return text.front() == '-' ? IntegerParse::kTooSmall : IntegerParse::kTooLarge;
  }
  if (error != std::errc() || end != text.data() + text.size()) return IntegerParse::kNotInteger;
  return IntegerParse::kOk;
}

std::string bounds_text(const Setting& setting) {
  const bool seconds = setting.value_name == "seconds";
  std::string text = setting.max == kInt64Max ? "must be >= " + std::to_string(setting.min)
                                              : "must be between " + std::to_string(setting.min) +
                                                    " and " + std::to_string(setting.max);
  if (seconds) text += " seconds";
  return text;
}

// Flag values take Go's strconv.ParseBool words (1, t, true, 0, f, false) and, like the
// environment, yes and no; all case-insensitive. Environment values take only
// 1/yes/true/0/no/false (reference section 4): anything else is an error.
std::optional<bool> parse_bool(std::string_view text, bool from_env) {
  const std::string word = lowercase(text);
  if (word == "1" || word == "true" || word == "yes") return true;
  if (word == "0" || word == "false" || word == "no") return false;
  if (!from_env && word == "t") return true;
  if (!from_env && word == "f") return false;
  return std::nullopt;
}

// Applies one non-secret setting from `source` to `config`; an error when the value is invalid.
std::optional<ConfigExit> apply(const Setting& setting, const Source& source, Config& config) {
  switch (setting.kind) {
    case Kind::kText: {
      std::string& field = config.*std::get<std::string Config::*>(setting.target);
      field = source.value;
      if ((setting.flag == "host" || setting.flag == "http-host") && field.empty()) {
        return invalid_value(setting, source,
                             "empty (use 0.0.0.0 or :: to listen on every address)");
      }
      return std::nullopt;
    }
    case Kind::kInteger: {
      std::int64_t value = 0;
      switch (parse_int64(source.value, value)) {
        case IntegerParse::kNotInteger:
          return invalid_value(setting, source, "not an integer");
        case IntegerParse::kTooSmall:
        case IntegerParse::kTooLarge:
          return invalid_value(setting, source, bounds_text(setting));
        case IntegerParse::kOk:
          break;
      }
      if (value < setting.min || value > setting.max) {
        return invalid_value(setting, source, bounds_text(setting));
      }
      if (std::holds_alternative<int Config::*>(setting.target)) {
        config.*std::get<int Config::*>(setting.target) = static_cast<int>(value);
      } else if (std::holds_alternative<std::int64_t Config::TestHooks::*>(setting.target)) {
        config.test.*std::get<std::int64_t Config::TestHooks::*>(setting.target) = value;
      } else {
        config.*std::get<std::int64_t Config::*>(setting.target) = value;
      }
      return std::nullopt;
    }
    case Kind::kBool: {
      const bool from_env = !source.env_name.empty();
      const std::optional<bool> value = parse_bool(source.value, from_env);
      if (!value) {
        return invalid_value(setting, source,
                             from_env ? "not a boolean (use 1/yes/true or 0/no/false)"
                                      : "not a boolean (use --" + std::string(setting.flag) +
                                            "=true or --" + std::string(setting.flag) + "=false)");
      }
      config.*std::get<bool Config::*>(setting.target) = *value;
      return std::nullopt;
    }
    case Kind::kAuthToken:
    case Kind::kAuthTokenFile:
      break;
  }
  return std::nullopt;
}

// The first of TURNSTILE_<NAME>, DFLOCKD_<NAME> that is set. An empty value counts as unset for
// ordinary settings (so `TURNSTILE_PORT=` in a compose file defers to the next source); for the
// auth-token variables it is a value, and an error, so a deployment that meant to set a secret
// never starts without one.
std::optional<Source> from_environment(const Setting& setting, const EnvLookup& env,
                                       bool empty_is_value) {
  if (setting.env.empty()) return std::nullopt;  // a flag-only setting
  for (std::string_view prefix : kEnvPrefixes) {
    std::string name = std::string(prefix) + std::string(setting.env);
    std::optional<std::string> value = env(name);
    if (value && (empty_is_value || !value->empty())) {
      return Source{std::move(*value), std::move(name)};
    }
  }
  return std::nullopt;
}

// A token must be non-empty after trimming, one line, and short enough to send.
std::optional<std::string> token_problem(std::string_view token, bool in_file) {
  if (token.empty()) return in_file ? "the file is empty" : "empty after trimming whitespace";
  if (token.find_first_of("\r\n") != std::string_view::npos) {
    return in_file ? "the file holds more than one line (the token must be one line)"
                   : "contains CR or LF (the token must be one line)";
  }
  if (token.size() > kMaxAuthTokenBytes) {
    return std::string(in_file ? "the token in the file is " : "") + "longer than " +
           std::to_string(kMaxAuthTokenBytes) + " bytes";
  }
  return std::nullopt;
}

// Reads at most kMaxAuthTokenFileBytes + 1 bytes; the error text carries strerror.
std::variant<std::string, std::string> read_small_file(const std::string& path) {
  using Result = std::variant<std::string, std::string>;
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    return Result(std::in_place_index<1>, std::string("cannot open: ") + std::strerror(errno));
  }
  std::string contents;
  char buffer[4096];
  while (contents.size() <= kMaxAuthTokenFileBytes) {
    const std::size_t count = std::fread(buffer, 1, sizeof buffer, file);
    contents.append(buffer, count);
    if (count < sizeof buffer) break;
  }
  const bool failed = std::ferror(file) != 0;
  const int error = errno;
  std::fclose(file);
  if (failed) {
    return Result(std::in_place_index<1>, std::string("cannot read: ") + std::strerror(error));
  }
  if (contents.size() > kMaxAuthTokenFileBytes) {
    return Result(std::in_place_index<1>,
                  "larger than " + std::to_string(kMaxAuthTokenFileBytes) + " bytes");
  }
  return Result(std::in_place_index<0>, std::move(contents));
}

std::variant<std::string, ConfigExit> token_from_value(const Setting& setting,
                                                       const Source& source) {
  const std::string_view token = trim(source.value);
  if (const auto problem = token_problem(token, /*in_file=*/false)) {
    return invalid_value(setting, source, *problem, /*show_value=*/false);
  }
  return std::string(token);
}

std::variant<std::string, ConfigExit> token_from_file(const Setting& setting,
                                                      const Source& source) {
  if (source.value.empty()) return invalid_value(setting, source, "empty path");
  auto contents = read_small_file(source.value);
  if (contents.index() == 1) return invalid_value(setting, source, std::get<1>(contents));
  const std::string_view token = trim(std::get<0>(contents));
  if (const auto problem = token_problem(token, /*in_file=*/true)) {
    return invalid_value(setting, source, *problem);
  }
  return std::string(token);
}

// Auth-token precedence (reference section 4, edge 31): --auth-token given explicitly, then
// --auth-token-file, then the token variables, then the file variables; TURNSTILE_ before
// DFLOCKD_ within each. Only the winning source is read.
std::optional<ConfigExit> resolve_auth_token(const cxxopts::ParseResult& parsed,
                                             const EnvLookup& env, Config& config) {
  const Setting& token = *find_setting("auth-token");
  const Setting& file = *find_setting("auth-token-file");
  std::variant<std::string, ConfigExit> resolved;
  if (parsed.count("auth-token") != 0) {
    resolved = token_from_value(token, Source{parsed["auth-token"].as<std::string>(), ""});
  } else if (parsed.count("auth-token-file") != 0) {
    resolved = token_from_file(file, Source{parsed["auth-token-file"].as<std::string>(), ""});
  } else if (auto source = from_environment(token, env, /*empty_is_value=*/true)) {
    resolved = token_from_value(token, *source);
  } else if (auto file_source = from_environment(file, env, /*empty_is_value=*/true)) {
    resolved = token_from_file(file, *file_source);
  } else {
    return std::nullopt;
  }
  if (auto* error = std::get_if<ConfigExit>(&resolved)) return std::move(*error);
  config.auth_token = std::move(std::get<std::string>(resolved));
  return std::nullopt;
}

// Go's flag package reads -name like --name; cxxopts reads -name as a group of one-letter
// flags. We have no one-letter flags but -h, so rewrite -name[=v] to --name[=v] (and -h[=v] to
// --help[=v]), so that an unknown -name is reported whole. Values of flags that take one are
// left alone (so `--host -debug` keeps "-debug" as the host), as is everything after "--".
std::vector<std::string> normalize_dashes(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  out.reserve(args.size());
  bool next_is_value = false;
  bool rest_is_positional = false;
  for (const std::string& arg : args) {
    if (next_is_value || rest_is_positional) {
      out.push_back(arg);
      next_is_value = false;
      continue;
    }
    if (arg == "--") {
      rest_is_positional = true;
      out.push_back(arg);
      continue;
    }
    std::string rewritten = arg;
    if (arg.size() >= 2 && arg[0] == '-' && arg[1] != '-') {
      const std::string name = arg.substr(1, arg.find('=') - 1);
      if (name == "h") {
        rewritten = "--help" + arg.substr(2);
      } else if (name.size() > 1) {
        rewritten = "-" + arg;
      }
    }
    if (rewritten.starts_with("--") && rewritten.find('=') == std::string::npos) {
      const Setting* setting = find_setting(std::string_view(rewritten).substr(2));
      next_is_value = setting != nullptr && takes_value(*setting);
    }
    out.push_back(std::move(rewritten));
  }
  return out;
}

std::string default_text(const Setting& setting, const Config& defaults) {
  if (setting.flag == "threads")
    return "number of cores (" + std::to_string(defaults.threads) + ")";
  return std::visit(
      [&](auto member) -> std::string {
        using Member = decltype(member);
        if constexpr (std::is_same_v<Member, std::monostate>) {
          return "unset";
        } else if constexpr (std::is_same_v<Member, std::string Config::*>) {
          const std::string& value = defaults.*member;
          return value.empty() ? "unset" : value;
        } else if constexpr (std::is_same_v<Member, bool Config::*>) {
          return defaults.*member ? "true" : "false";
        } else if constexpr (std::is_same_v<Member, std::int64_t Config::TestHooks::*>) {
          return std::to_string(defaults.test.*member);
        } else {
          return std::to_string(defaults.*member);
        }
      },
      setting.target);
}

std::string usage_text(const Config& defaults) {
  std::string text =
      "Usage: turnstiled [flags]\n"
      "\n"
      "turnstile lock server, speaking the dflockd protocol.\n"
      "Each flag can also be set with TURNSTILE_<NAME> or DFLOCKD_<NAME>; a flag wins over\n"
      "TURNSTILE_<NAME>, which wins over DFLOCKD_<NAME>. Flags take --name value or --name=value;\n"
      "boolean flags take --name or --name=false.\n"
      "\n"
      "Flags:\n";
  // Appended piece by piece: GCC 12's -Wrestrict reports a false overlap in `"literal" +
  // std::string(...)` at -O2 and above (a Release build stopped on it).
  for (const Setting& setting : kSettings) {
    if (setting.hidden) continue;
    text.append("  --").append(setting.flag);
    if (setting.kind == Kind::kBool) {
      text.append("[=bool]");
    } else {
      text.append(" ").append(setting.value_name);
    }
    text.append("\n      ").append(setting.help);
    if (setting.kind == Kind::kInteger) {
      text.append(" (").append(std::to_string(setting.min)).append("..");
      if (setting.max != kInt64Max) text.append(std::to_string(setting.max));
      text.append(")");
    }
    if (setting.env.empty()) {
      text.append("\n      flag only");
    } else {
      text.append("\n      env ");
      for (std::string_view prefix : kEnvPrefixes) {
        text.append(prefix).append(setting.env);
        if (prefix == kEnvPrefixes[0]) text.append(", ");
      }
    }
    text.append("; default ").append(default_text(setting, defaults)).append("\n");
  }
  text +=
      "  --help, -h\n"
      "      print this help and exit\n"
      "  --version\n"
      "      print the version and exit\n"
      "\n"
      "Auth token sources, first match wins: --auth-token, --auth-token-file,\n"
      "TURNSTILE_AUTH_TOKEN, DFLOCKD_AUTH_TOKEN, TURNSTILE_AUTH_TOKEN_FILE,\n"
      "DFLOCKD_AUTH_TOKEN_FILE. The token is trimmed and must be one non-empty line.";
  return text;
}

// The name cxxopts quotes in its messages (‘name’), or the whole message if it has none.
std::string quoted_name(const std::string& message) {
  static constexpr std::string_view kOpen = "\xe2\x80\x98";   // U+2018
  static constexpr std::string_view kClose = "\xe2\x80\x99";  // U+2019
  const std::size_t open = message.find(kOpen);
  if (open == std::string::npos) return message;
  const std::size_t start = open + kOpen.size();
  const std::size_t close = message.find(kClose, start);
  if (close == std::string::npos) return message;
  return message.substr(start, close - start);
}

std::string dashed(const std::string& name) { return (name.size() == 1 ? "-" : "--") + name; }

ConfigResult parse_checked(const std::vector<std::string>& args, const EnvLookup& env, int cores) {
  Config config;
  config.threads = static_cast<int>(std::clamp<std::int64_t>(cores, 1, kMaxThreads));
  const Config defaults = config;

  cxxopts::Options options{std::string(kProgram)};
  auto adder = options.add_options();
  for (const Setting& setting : kSettings) {
    auto value = cxxopts::value<std::string>();
    if (!takes_value(setting)) value->implicit_value("true");
    adder(std::string(setting.flag), std::string(setting.help), value);
  }
  adder("h,help", "print help", cxxopts::value<std::string>()->implicit_value("true"));
  adder("version", "print version", cxxopts::value<std::string>()->implicit_value("true"));

  const std::vector<std::string> normalized = normalize_dashes(args);
  std::vector<const char*> argv;
  argv.reserve(normalized.size() + 1);
  argv.push_back(kProgram.data());
  for (const std::string& arg : normalized) argv.push_back(arg.c_str());
  const cxxopts::ParseResult parsed = options.parse(static_cast<int>(argv.size()), argv.data());

  if (!parsed.unmatched().empty()) {
    const std::string& arg = parsed.unmatched().front();
    const bool looks_bool = parse_bool(arg, /*from_env=*/false).has_value();
    return usage_error("unexpected argument " + quote(arg) +
                       (looks_bool ? " (boolean flags take --name=false, not --name false)" : ""));
  }
  for (const char* name : {"help", "version"}) {
    if (parsed.count(name) == 0) continue;
    const std::string value = parsed[name].as<std::string>();
    const std::optional<bool> wanted = parse_bool(value, /*from_env=*/false);
    if (!wanted) {
      return usage_error("invalid value " + quote(value) + " for --" + name + ": not a boolean");
    }
    if (*wanted) {
      return ConfigExit{0,
                        std::string_view(name) == "help" ? usage_text(defaults) : version_string()};
    }
  }

  for (const Setting& setting : kSettings) {
    if (setting.kind == Kind::kAuthToken || setting.kind == Kind::kAuthTokenFile) continue;
    std::optional<Source> source;
    if (parsed.count(std::string(setting.flag)) != 0) {
      source = Source{parsed[std::string(setting.flag)].as<std::string>(), ""};
    } else {
      source = from_environment(setting, env, /*empty_is_value=*/false);
    }
    if (!source) continue;
    if (auto error = apply(setting, *source, config)) return std::move(*error);
  }
  if (auto error = resolve_auth_token(parsed, env, config)) return std::move(*error);

  // Edge 11: a certificate without its key (or the reverse) is a start-up error.
  if (config.tls_cert.empty() != config.tls_key.empty()) {
    return usage_error(config.tls_cert.empty() ? "--tls-key is set but --tls-cert is not"
                                               : "--tls-cert is set but --tls-key is not");
  }
  if (config.http_port != 0 && config.http_port == config.port) {
    return usage_error("--http-port must differ from --port (both are " +
                       std::to_string(config.port) + ")");
  }
  if (config.http_host.empty()) config.http_host = config.host;
  if (config.http_rate_limit_burst == 0)
    config.http_rate_limit_burst = config.http_rate_limit_per_ip;
  return config;
}

// The address a listener binds to is loopback-only: 127.0.0.0/8, ::1 (also IPv4-mapped
// ::ffff:127.x.y.z, and bracketed), or the name localhost.
bool is_loopback_host(std::string_view host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (lowercase(host) == "localhost") return true;
  const std::string text(host);
  in_addr v4{};
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    return reinterpret_cast<const unsigned char*>(&v4.s_addr)[0] == 127;
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    const unsigned char* bytes = v6.s6_addr;
    const auto zero = [](unsigned char b) { return b == 0; };
    if (std::all_of(bytes, bytes + 15, zero)) return bytes[15] == 1;  // ::1
    return std::all_of(bytes, bytes + 10, zero) && bytes[10] == 0xff && bytes[11] == 0xff &&
           bytes[12] == 127;  // ::ffff:127.0.0.0/104
  }
  return false;
}

}  // namespace

ConfigResult parse_config(const std::vector<std::string>& args, const EnvLookup& env, int cores) {
  try {
    return parse_checked(args, env, cores);
  } catch (const cxxopts::exceptions::no_such_option& e) {
    return usage_error("unknown flag " + dashed(quoted_name(e.what())));
  } catch (const cxxopts::exceptions::missing_argument& e) {
    return usage_error("flag needs an argument: " + dashed(quoted_name(e.what())));
  } catch (const cxxopts::exceptions::option_requires_argument& e) {
    return usage_error("flag needs an argument: " + dashed(quoted_name(e.what())));
  } catch (const cxxopts::exceptions::invalid_option_syntax& e) {
    return usage_error("bad flag syntax " + quote(quoted_name(e.what())));
  } catch (const cxxopts::exceptions::exception& e) {
    std::string message = e.what();
    std::replace(message.begin(), message.end(), '\n', ' ');
    return usage_error(message);
  }
}

EnvLookup process_environment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

std::vector<std::string> config_warnings(const Config& config) {
  std::vector<std::string> warnings;
  const bool tcp_loopback = is_loopback_host(config.host);
  const std::pair<std::string_view, std::int64_t> caps[] = {
      {"max-connections", config.max_connections},
      {"max-connections-per-ip", config.max_connections_per_ip},
      {"max-waiters", config.max_waiters},
  };
  std::vector<std::pair<std::string_view, std::int64_t>> http_caps;
  if (config.http_port != 0 && !is_loopback_host(config.http_host)) {
    http_caps = {{"http-max-sessions", config.http_max_sessions},
                 {"http-max-sessions-per-ip", config.http_max_sessions_per_ip},
                 {"http-max-connections-per-ip", config.http_max_connections_per_ip},
                 {"http-rate-limit-per-ip", config.http_rate_limit_per_ip}};
  }
  for (const auto& [flag, value] : caps) {
    if (value != 0 || tcp_loopback) continue;
    warnings.push_back("--" + std::string(flag) + " is 0 (unlimited) while listening on " +
                       quote(config.host) + ", which is not a loopback address; set a cap");
  }
  for (const auto& [flag, value] : http_caps) {
    if (value != 0) continue;
    warnings.push_back("--" + std::string(flag) +
                       " is 0 (unlimited) while the HTTP API listens on " +
                       quote(config.http_host) + ", which is not a loopback address; set a cap");
  }
  return warnings;
}

std::string version_string() { return std::string(kProgram) + " " + TURNSTILE_VERSION; }

}  // namespace turnstile::net
