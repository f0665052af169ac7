// Turning one setting's text into its value (net/config_internal.h): words, integers, booleans,
// host:port addresses and --cluster-peers, each with one conversion and one error format whether
// the text came from a flag or from the environment; and finding a setting in the environment.
#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstring>
#include <string_view>
#include <system_error>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "core/address.h"
#include "net/config_internal.h"

namespace turnstile::net::config_internal {
namespace {

constexpr std::size_t kQuotedValueMax = 64;

bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

std::string fail_prefix() { return std::string(kProgram) + ": "; }

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
  const bool unit = setting.value_name == "seconds" || setting.value_name == "milliseconds";
  // An id names its whole range, so that 0 and 2^63 get the same message.
  const bool open_ended = setting.max == kInt64Max && setting.value_name != "id";
  std::string text = open_ended ? "must be >= " + std::to_string(setting.min)
                                : "must be between " + std::to_string(setting.min) + " and " +
                                      std::to_string(setting.max);
  if (unit) text.append(" ").append(setting.value_name);
  return text;
}

}  // namespace

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

ConfigExit usage_error(std::string message) { return ConfigExit{2, fail_prefix() + message}; }

ConfigExit invalid_value(const Setting& setting, const Source& source, std::string_view reason,
                         bool show_value) {
  std::string message = "invalid value ";
  if (show_value) message += quote(source.value) + " ";
  message += "for --" + std::string(setting.flag);
  if (!source.env_name.empty()) message += " (from " + source.env_name + ")";
  message += ": ";
  message += reason;
  return usage_error(std::move(message));
}

std::optional<bool> parse_bool(std::string_view text, bool from_env) {
  const std::string word = lowercase(text);
  if (word == "1" || word == "true" || word == "yes") return true;
  if (word == "0" || word == "false" || word == "no") return false;
  if (!from_env && word == "t") return true;
  if (!from_env && word == "f") return false;
  return std::nullopt;
}

bool is_wildcard(const HostPort& address) {
  return address.host == "0.0.0.0" || (address.v6 && address.host == "::");
}

std::string join_host_port(std::string_view host, bool v6, int port) {
  std::string text;
  if (v6) text += '[';
  text += host;
  if (v6) text += ']';
  text.append(":").append(std::to_string(port));
  return text;
}

std::optional<std::string> canonical_host(std::string_view host, bool& v6) {
  const bool bracketed = host.size() >= 2 && host.front() == '[' && host.back() == ']';
  if (bracketed) host = host.substr(1, host.size() - 2);
  v6 = bracketed || host.find(':') != std::string_view::npos;
  if (!v6) return lowercase(host);
  const auto bytes = core::parse_ipv6(host);
  if (!bytes) return std::nullopt;
  in6_addr address{};
  std::memcpy(address.s6_addr, bytes->data(), bytes->size());
  char text[INET6_ADDRSTRLEN] = {};
  if (inet_ntop(AF_INET6, &address, text, sizeof text) == nullptr) return std::nullopt;
  return std::string(text);
}

std::variant<HostPort, std::string> parse_host_port(std::string_view text) {
  using Result = std::variant<HostPort, std::string>;
  auto parsed = core::parse_host_port(text);
  if (auto* why = std::get_if<std::string>(&parsed)) {
    return Result(std::in_place_index<1>, std::move(*why));
  }
  const core::HostPort& parts = std::get<core::HostPort>(parsed);
  HostPort address;
  address.port = parts.port;
  const auto canonical = canonical_host(parts.host, address.v6);
  address.host = canonical.value_or(parts.host);  // the parser took it: it is an IPv6 literal
  address.text = join_host_port(address.host, address.v6, address.port);
  return Result(std::in_place_index<0>, std::move(address));
}

std::variant<HostPort, std::string> parse_reachable_address(std::string_view text) {
  auto parsed = parse_host_port(text);
  if (const auto* address = std::get_if<HostPort>(&parsed); address && is_wildcard(*address)) {
    return std::variant<HostPort, std::string>(
        std::in_place_index<1>,
        address->host + " is a wildcard, not an address another machine can connect to");
  }
  return parsed;
}

namespace {

// --cluster-peers: `id=raftHost:port@clientHost:port` entries separated by commas, blanks
// around entries ignored; an empty list when the text is blank. Ids are 1..2^63-1 and unique,
// and every address (raft or client) appears once in the whole list.
std::variant<std::vector<Config::ClusterPeer>, std::string> parse_peers(std::string_view text) {
  using Result = std::variant<std::vector<Config::ClusterPeer>, std::string>;
  std::vector<Config::ClusterPeer> peers;
  if (trim(text).empty()) return peers;
  struct Use {
    std::string address;
    std::uint64_t id;
    std::string_view role;
  };
  std::vector<Use> uses;
  std::size_t number = 0;
  while (true) {
    ++number;
    const std::size_t comma = text.find(',');
    const std::string_view entry = trim(text.substr(0, comma));
    const std::string where = "entry " + std::to_string(number) +
                              (entry.empty() ? std::string(" is empty") : " " + quote(entry));
    if (entry.empty()) return Result(std::in_place_index<1>, where);
    const std::size_t equals = entry.find('=');
    const std::size_t at = entry.find('@');
    if (equals == std::string_view::npos || at == std::string_view::npos || at < equals ||
        entry.find('@', at + 1) != std::string_view::npos) {
      return Result(std::in_place_index<1>, where + ": expected id=raftHost:port@clientHost:port");
    }
    const std::string_view id_text = entry.substr(0, equals);
    std::int64_t id = 0;
    const bool digits = !id_text.empty() && std::all_of(id_text.begin(), id_text.end(), [](char c) {
      return c >= '0' && c <= '9';
    });
    if (!digits) return Result(std::in_place_index<1>, where + ": the id is not a number");
    if (parse_int64(id_text, id) != IntegerParse::kOk || id < 1) {
      return Result(std::in_place_index<1>,
                    where + ": the id must be between 1 and " + std::to_string(kInt64Max));
    }
    Config::ClusterPeer peer;
    peer.id = static_cast<std::uint64_t>(id);
    for (const Config::ClusterPeer& other : peers) {
      if (other.id == peer.id) {
        return Result(std::in_place_index<1>,
                      where + ": node id " + std::to_string(peer.id) + " is listed twice");
      }
    }
    for (const auto& [role, part, out] :
         {std::tuple{std::string_view("raft address"), entry.substr(equals + 1, at - equals - 1),
                     &peer.raft_address},
          std::tuple{std::string_view("client address"), entry.substr(at + 1),
                     &peer.client_address}}) {
      auto address = parse_reachable_address(part);
      if (const auto* problem = std::get_if<std::string>(&address)) {
        return Result(std::in_place_index<1>,
                      where + ": " + std::string(role) + " " + quote(part) + ": " + *problem);
      }
      *out = std::get<HostPort>(address).text;
      for (const Use& use : uses) {
        if (use.address != *out) continue;
        return Result(std::in_place_index<1>, where + ": " + std::string(role) + " " + *out +
                                                  " is already node " + std::to_string(use.id) +
                                                  "'s " + std::string(use.role));
      }
      uses.push_back(Use{*out, peer.id, role});
    }
    peers.push_back(std::move(peer));
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return peers;
}

// The setting's string field, in Config or in Config::Cluster.
std::string& text_field(const Setting& setting, Config& config) {
  if (const auto* member = std::get_if<std::string Config::Cluster::*>(&setting.target)) {
    return config.cluster.*(*member);
  }
  return config.*std::get<std::string Config::*>(setting.target);
}

bool& bool_field(const Setting& setting, Config& config) {
  if (const auto* member = std::get_if<bool Config::Cluster::*>(&setting.target)) {
    return config.cluster.*(*member);
  }
  return config.*std::get<bool Config::*>(setting.target);
}

// Stores an integer already checked against the setting's bounds, whichever field it names.
void store_integer(const Setting& setting, std::int64_t value, Config& config) {
  std::visit(
      [&](auto member) {
        using Member = decltype(member);
        if constexpr (std::is_same_v<Member, int Config::*>) {
          config.*member = static_cast<int>(value);
        } else if constexpr (std::is_same_v<Member, std::int64_t Config::*>) {
          config.*member = value;
        } else if constexpr (std::is_same_v<Member, std::int64_t Config::TestHooks::*>) {
          config.test.*member = value;
        } else if constexpr (std::is_same_v<Member, std::int64_t Config::Cluster::*>) {
          config.cluster.*member = value;
        } else if constexpr (std::is_same_v<Member, std::uint64_t Config::Cluster::*>) {
          config.cluster.*member = static_cast<std::uint64_t>(value);
        }
      },
      setting.target);
}

std::optional<ConfigExit> apply_text(const Setting& setting, const Source& source, Config& config) {
  std::string& field = text_field(setting, config);
  field = source.value;
  if ((setting.flag == "host" || setting.flag == "http-host") && field.empty()) {
    return invalid_value(setting, source, "empty (use 0.0.0.0 or :: to listen on every address)");
  }
  // The words net/log.h parses (parse_log_format, parse_log_level), in lower case.
  if (setting.flag == "log-format") {
    field = lowercase(field);
    if (field != "text" && field != "json") {
      return invalid_value(setting, source, "not a log format (use text or json)");
    }
  }
  if (setting.flag == "log-level") {
    field = lowercase(field);
    if (field == "warning") field = "warn";
    if (field != "debug" && field != "info" && field != "warn" && field != "error") {
      return invalid_value(setting, source, "not a log level (use debug, info, warn or error)");
    }
  }
  return std::nullopt;
}

std::optional<ConfigExit> apply_integer(const Setting& setting, const Source& source,
                                        Config& config) {
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
  store_integer(setting, value, config);
  return std::nullopt;
}

std::optional<ConfigExit> apply_bool(const Setting& setting, const Source& source, Config& config) {
  const bool from_env = !source.env_name.empty();
  const std::optional<bool> value = parse_bool(source.value, from_env);
  if (!value) {
    return invalid_value(setting, source,
                         from_env ? "not a boolean (use 1/yes/true or 0/no/false)"
                                  : "not a boolean (use --" + std::string(setting.flag) +
                                        "=true or --" + std::string(setting.flag) + "=false)");
  }
  bool_field(setting, config) = *value;
  return std::nullopt;
}

std::optional<ConfigExit> apply_address(const Setting& setting, const Source& source,
                                        Config& config) {
  std::string& field = text_field(setting, config);
  field.clear();  // empty = unset
  if (source.value.empty()) return std::nullopt;
  auto address = parse_reachable_address(source.value);
  if (const auto* problem = std::get_if<std::string>(&address)) {
    return invalid_value(setting, source, *problem);
  }
  field = std::get<HostPort>(address).text;
  return std::nullopt;
}

std::optional<ConfigExit> apply_peers(const Setting& setting, const Source& source,
                                      Config& config) {
  auto peers = parse_peers(source.value);
  if (const auto* problem = std::get_if<std::string>(&peers)) {
    // The entry at fault is quoted in the reason; the whole list would be cut anyway.
    return invalid_value(setting, source, *problem, /*show_value=*/false);
  }
  config.cluster.peers = std::move(std::get<0>(peers));
  return std::nullopt;
}

}  // namespace

std::optional<ConfigExit> apply(const Setting& setting, const Source& source, Config& config) {
  switch (setting.kind) {
    case Kind::kText:
      return apply_text(setting, source, config);
    case Kind::kInteger:
      return apply_integer(setting, source, config);
    case Kind::kBool:
      return apply_bool(setting, source, config);
    case Kind::kAddress:
      return apply_address(setting, source, config);
    case Kind::kPeers:
      return apply_peers(setting, source, config);
    case Kind::kSecret:
    case Kind::kSecretFile:
      break;
  }
  return std::nullopt;
}

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

}  // namespace turnstile::net::config_internal
