#include "core/address.h"

#include <algorithm>
#include <vector>

namespace turnstile::core {
namespace {

using Result = std::variant<HostPort, std::string>;

constexpr std::string_view kShape = "not host:port or [v6]:port";
constexpr std::size_t kHostNameMax = 253;  // bytes: the most DNS allows in a name

Result failure(std::string_view why) { return Result(std::in_place_index<1>, std::string(why)); }

bool is_digit(char c) { return c >= '0' && c <= '9'; }

int hex_value(char c) {
  if (is_digit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// 1..65535 in decimal digits only (leading zeros change nothing: "07000" is 7000); nullopt for
// anything else.
std::optional<std::uint16_t> parse_port(std::string_view text) {
  if (text.empty() || !std::all_of(text.begin(), text.end(), is_digit)) return std::nullopt;
  unsigned value = 0;
  for (const char c : text) {
    value = value * 10 + static_cast<unsigned>(c - '0');
    if (value > 65535) return std::nullopt;
  }
  if (value < 1) return std::nullopt;
  return static_cast<std::uint16_t>(value);
}

// The groups of one side of an IPv6 literal's "::" ("" has none), appended to `groups`; an IPv4
// tail counts as two groups and is allowed only where `v4_tail_allowed` (the literal's end).
bool parse_ipv6_groups(std::string_view text, bool v4_tail_allowed,
                       std::vector<std::uint16_t>& groups) {
  if (text.empty()) return true;
  while (true) {
    const std::size_t colon = text.find(':');
    const std::string_view piece = text.substr(0, colon);
    const bool last = colon == std::string_view::npos;
    if (last && v4_tail_allowed && piece.find('.') != std::string_view::npos) {
      const auto v4 = parse_ipv4(piece);
      if (!v4) return false;
      groups.push_back(static_cast<std::uint16_t>((*v4)[0] << 8 | (*v4)[1]));
      groups.push_back(static_cast<std::uint16_t>((*v4)[2] << 8 | (*v4)[3]));
      return true;
    }
    if (piece.empty() || piece.size() > 4) return false;
    unsigned value = 0;
    for (const char c : piece) {
      const int digit = hex_value(c);
      if (digit < 0) return false;
      value = value * 16 + static_cast<unsigned>(digit);
    }
    groups.push_back(static_cast<std::uint16_t>(value));
    if (last) return true;
    text = text.substr(colon + 1);
  }
}

bool is_host_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '-' || c == '.' ||
         c == '_';
}

}  // namespace

std::optional<std::array<std::uint8_t, 4>> parse_ipv4(std::string_view text) {
  std::array<std::uint8_t, 4> bytes{};
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    const std::size_t dot = text.find('.');
    if ((i == 3) != (dot == std::string_view::npos)) return std::nullopt;
    const std::string_view part = text.substr(0, dot);
    // No leading zeros: "010" would be 8 to some readers and 10 to others.
    if (part.empty() || part.size() > 3 || (part.size() > 1 && part.front() == '0') ||
        !std::all_of(part.begin(), part.end(), is_digit)) {
      return std::nullopt;
    }
    unsigned value = 0;
    for (const char c : part) value = value * 10 + static_cast<unsigned>(c - '0');
    if (value > 255) return std::nullopt;
    bytes[i] = static_cast<std::uint8_t>(value);
    if (i < 3) text = text.substr(dot + 1);
  }
  return bytes;
}

std::optional<std::array<std::uint8_t, 16>> parse_ipv6(std::string_view text) {
  std::vector<std::uint16_t> head;
  std::vector<std::uint16_t> tail;
  const std::size_t gap = text.find("::");
  if (gap == std::string_view::npos) {
    if (!parse_ipv6_groups(text, true, head) || head.size() != 8) return std::nullopt;
  } else {
    const std::string_view after = text.substr(gap + 2);
    if (after.find("::") != std::string_view::npos) return std::nullopt;
    if (!parse_ipv6_groups(text.substr(0, gap), false, head) ||
        !parse_ipv6_groups(after, true, tail) || head.size() + tail.size() > 7) {
      return std::nullopt;
    }
  }
  std::array<std::uint16_t, 8> groups{};
  std::copy(head.begin(), head.end(), groups.begin());
  std::copy(tail.begin(), tail.end(), groups.end() - static_cast<std::ptrdiff_t>(tail.size()));
  std::array<std::uint8_t, 16> bytes{};
  for (std::size_t i = 0; i < groups.size(); ++i) {
    bytes[2 * i] = static_cast<std::uint8_t>(groups[i] >> 8);
    bytes[2 * i + 1] = static_cast<std::uint8_t>(groups[i] & 0xff);
  }
  return bytes;
}

std::string HostPort::text() const {
  std::string out;
  if (v6) out += '[';
  out += host;
  if (v6) out += ']';
  out.append(":").append(std::to_string(port));
  return out;
}

bool HostPort::is_wildcard() const {
  if (!v6) return host == "0.0.0.0";
  const auto bytes = parse_ipv6(host);
  return bytes && std::all_of(bytes->begin(), bytes->end(), [](std::uint8_t b) { return b == 0; });
}

Result parse_host_port(std::string_view text, AddressOptions options) {
  if (text.empty()) return failure("empty, not host:port or [v6]:port");
  const bool port_optional = options.default_port != 0;
  HostPort address;
  std::string_view host;
  std::optional<std::string_view> port;
  if (text.front() == '[') {
    const std::size_t close = text.find(']');
    if (close == std::string_view::npos) return failure(kShape);
    host = text.substr(1, close - 1);
    const std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return failure(kShape);
      port = rest.substr(1);
    } else if (!port_optional) {
      return failure(kShape);
    }
    if (host.empty()) return failure("empty host");
    if (!parse_ipv6(host)) return failure("not an IPv6 address in the brackets");
    address.v6 = true;
  } else if (port_optional && std::count(text.begin(), text.end(), ':') > 1 && parse_ipv6(text)) {
    host = text;  // a bare IPv6 literal: with no port to take, it is unambiguous
    address.v6 = true;
  } else {
    const std::size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) {
      if (!port_optional) return failure(kShape);
      host = text;
    } else {
      host = text.substr(0, colon);
      port = text.substr(colon + 1);
    }
    if (host.empty()) return failure("empty host");
    if (host.find(':') != std::string_view::npos) {
      return failure("an IPv6 address goes in brackets: [v6]:port");
    }
    if (host.size() > kHostNameMax || !std::all_of(host.begin(), host.end(), is_host_name_char)) {
      return failure("the host must be an IP address or a host name (letters, digits, - . _)");
    }
    const bool numeric =
        std::all_of(host.begin(), host.end(), [](char c) { return is_digit(c) || c == '.'; });
    if (numeric && !parse_ipv4(host)) return failure("not an IPv4 address");
  }
  if (port) {
    const std::optional<std::uint16_t> number = parse_port(*port);
    if (!number) return failure("the port must be between 1 and 65535");
    address.port = *number;
  } else {
    address.port = options.default_port;
  }
  address.host = std::string(host);
  return Result(std::in_place_index<0>, std::move(address));
}

}  // namespace turnstile::core
