// turnstiled's secrets (net/config_internal.h): the auth token, the cluster secret and the admin
// token, each given as a value or as a file holding it, from a flag or from the environment.
// Secret values never appear in an error message.
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <cxxopts.hpp>
#include <string_view>
#include <utility>
#include <variant>

#include "net/config_internal.h"

namespace turnstile::net::config_internal {
namespace {

// A client sends the token as the argument line of `auth`, which holds at most 64 KiB
// (core::RequestParser::Limits::long_line_max): a longer token could never authenticate.
constexpr std::size_t kMaxAuthTokenBytes = 64 * 1024;
// Reading a token file stops here, so pointing the flag at /dev/zero cannot exhaust memory.
constexpr std::size_t kMaxAuthTokenFileBytes = 1024 * 1024;

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

// Secret precedence (reference section 4, edge 31), the same for the auth token, the cluster
// secret and the admin token: --<name> given explicitly, then --<name>-file, then the value
// variables, then the file variables; TURNSTILE_ before DFLOCKD_ within each. Only the winning
// source is read; it is recorded in `given`.
std::optional<ConfigExit> resolve_secret(const cxxopts::ParseResult& parsed, const EnvLookup& env,
                                         std::string_view name, std::optional<std::string>& out,
                                         std::vector<Given>& given) {
  const std::string value_flag(name);
  const std::string file_flag = value_flag + "-file";
  const Setting& value = *find_setting(value_flag);
  const Setting& file = *find_setting(file_flag);
  std::variant<std::string, ConfigExit> resolved;
  if (parsed.count(value_flag) != 0) {
    given.push_back(Given{&value, ""});
    resolved = token_from_value(value, Source{parsed[value_flag].as<std::string>(), ""});
  } else if (parsed.count(file_flag) != 0) {
    given.push_back(Given{&file, ""});
    resolved = token_from_file(file, Source{parsed[file_flag].as<std::string>(), ""});
  } else if (auto source = from_environment(value, env, /*empty_is_value=*/true)) {
    given.push_back(Given{&value, source->env_name});
    resolved = token_from_value(value, *source);
  } else if (auto file_source = from_environment(file, env, /*empty_is_value=*/true)) {
    given.push_back(Given{&file, file_source->env_name});
    resolved = token_from_file(file, *file_source);
  } else {
    return std::nullopt;
  }
  if (auto* error = std::get_if<ConfigExit>(&resolved)) return std::move(*error);
  out = std::move(std::get<std::string>(resolved));
  return std::nullopt;
}

}  // namespace

std::optional<ConfigExit> resolve_secrets(const cxxopts::ParseResult& parsed, const EnvLookup& env,
                                          Config& config, std::vector<Given>& given) {
  if (auto error = resolve_secret(parsed, env, "auth-token", config.auth_token, given)) {
    return error;
  }
  if (auto error = resolve_secret(parsed, env, "cluster-secret", config.cluster.secret, given)) {
    return error;
  }
  return resolve_secret(parsed, env, "admin-token", config.cluster.admin_token, given);
}

}  // namespace turnstile::net::config_internal
