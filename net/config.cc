// turnstiled's flag and environment parsing (net/config.h). cxxopts splits the command line;
// every value is taken as text and converted by net/config_values.cc, so each setting has one
// conversion and one error format whether it came from a flag or from the environment. The
// settings table is net/config_settings.cc, the secrets net/config_secrets.cc and the cluster
// checks net/config_cluster.cc.
#include "net/config.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cxxopts.hpp>
#include <string_view>
#include <utility>
#include <vector>

#include "net/config_internal.h"

#ifndef TURNSTILE_VERSION
#error "TURNSTILE_VERSION must be defined (net/CMakeLists.txt passes the CMake project version)"
#endif

namespace turnstile::net {
namespace config_internal {
namespace {

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

// Every setting is a flag taking text (a boolean one takes "true" when it has no value), so
// that each value is converted by apply, whether it came from a flag or from the environment.
void add_flags(cxxopts::Options& options) {
  auto adder = options.add_options();
  for (const Setting& setting : settings()) {
    auto value = cxxopts::value<std::string>();
    if (!takes_value(setting)) value->implicit_value("true");
    adder(std::string(setting.flag), std::string(setting.help), value);
  }
  adder("h,help", "print help", cxxopts::value<std::string>()->implicit_value("true"));
  adder("version", "print version", cxxopts::value<std::string>()->implicit_value("true"));
}

cxxopts::ParseResult parse_flags(cxxopts::Options& options, const std::vector<std::string>& args) {
  const std::vector<std::string> normalized = normalize_dashes(args);
  std::vector<const char*> argv;
  argv.reserve(normalized.size() + 1);
  argv.push_back(kProgram.data());
  for (const std::string& arg : normalized) argv.push_back(arg.c_str());
  return options.parse(static_cast<int>(argv.size()), argv.data());
}

// A stray argument is an error; --help and --version answer and exit. nullopt: go on.
std::optional<ConfigExit> exit_early(const cxxopts::ParseResult& parsed, const Config& defaults) {
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
  return std::nullopt;
}

// Every setting but the secrets, from its flag, else from the environment; each one given joins
// `given`.
std::optional<ConfigExit> apply_settings(const cxxopts::ParseResult& parsed, const EnvLookup& env,
                                         Config& config, std::vector<Given>& given) {
  for (const Setting& setting : settings()) {
    if (setting.kind == Kind::kSecret || setting.kind == Kind::kSecretFile) continue;
    std::optional<Source> source;
    if (parsed.count(std::string(setting.flag)) != 0) {
      source = Source{parsed[std::string(setting.flag)].as<std::string>(), ""};
    } else {
      source = from_environment(setting, env, /*empty_is_value=*/false);
    }
    if (!source) continue;
    if (auto error = apply(setting, *source, config)) return error;
    given.push_back(Given{&setting, source->env_name});
  }
  return std::nullopt;
}

ConfigResult parse_checked(const std::vector<std::string>& args, const EnvLookup& env, int cores) {
  Config config;
  config.threads = static_cast<int>(std::clamp<std::int64_t>(cores, 1, kMaxThreads));
  const Config defaults = config;

  cxxopts::Options options{std::string(kProgram)};
  add_flags(options);
  const cxxopts::ParseResult parsed = parse_flags(options, args);
  if (auto exit = exit_early(parsed, defaults)) return std::move(*exit);

  std::vector<Given> given;
  if (auto error = apply_settings(parsed, env, config, given)) return std::move(*error);
  if (auto error = resolve_secrets(parsed, env, config, given)) return std::move(*error);

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
  if (config.debug) config.log_level = "debug";
  if (config.http_rate_limit_burst == 0)
    config.http_rate_limit_burst = config.http_rate_limit_per_ip;
  if (auto error = check_cluster(given, config)) return std::move(*error);
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
}  // namespace config_internal

using config_internal::dashed;
using config_internal::is_loopback_host;
using config_internal::kProgram;
using config_internal::quote;
using config_internal::quoted_name;
using config_internal::usage_error;

ConfigResult parse_config(const std::vector<std::string>& args, const EnvLookup& env, int cores) {
  try {
    return config_internal::parse_checked(args, env, cores);
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