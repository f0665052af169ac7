// Addresses written as text: the one parser of `host:port` for every flag, configuration field,
// HTTP body and client argument that names a server (docs/configuration.md, "Addresses").
//
// Thread affinity: pure functions, safe anywhere.
//
// The grammar, and nothing else:
//   address = host ":" port | "[" ipv6 "]" ":" port
//   host    = an IPv4 literal (four decimal parts 0..255, no leading zeros)
//           | a host name (letters, digits, '-', '.', '_'; at most 253 bytes; not all digits and
//             dots, which makes it an IPv4 literal)
//   ipv6    = an IPv6 literal (RFC 4291 text, '::' at most once, an IPv4 tail allowed; no zone)
//   port    = 1..65535 in decimal digits only (leading zeros allowed): no sign, no blanks
// An IPv6 literal outside brackets is refused: in "::1:7000" nobody can tell where the address
// ends. The host is never empty.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

namespace turnstile::core {

struct HostPort {
  std::string host;  // without brackets; as written (not lower-cased, not compressed)
  std::uint16_t port = 0;
  bool v6 = false;  // the host is an IPv6 literal

  // "host:port", or "[v6]:port" for an IPv6 literal.
  std::string text() const;
  // 0.0.0.0 or the IPv6 unspecified address however it is written ("::", "[0:0::0]"): a host
  // to listen on, never one another machine can connect to.
  bool is_wildcard() const;
  bool operator==(const HostPort&) const = default;
};

// What a caller accepts beyond the grammar above.
struct AddressOptions {
  // The port may be left out ("host", "[v6]", and a bare IPv6 literal "::1", which is then
  // unambiguous): it is `default_port`. For a client's command line, where the port has a
  // well-known default. 0: the port is required.
  std::uint16_t default_port = 0;
};

// The address, or why `text` is not one, in words a user can act on ("the port must be between 1
// and 65535", "an IPv6 address goes in brackets: [v6]:port").
[[nodiscard]] std::variant<HostPort, std::string> parse_host_port(std::string_view text,
                                                                  AddressOptions options = {});

// The 16 bytes of an IPv6 literal (without brackets), or nullopt when `text` is not one.
std::optional<std::array<std::uint8_t, 16>> parse_ipv6(std::string_view text);
// The 4 bytes of an IPv4 literal, or nullopt when `text` is not one.
std::optional<std::array<std::uint8_t, 4>> parse_ipv4(std::string_view text);

}  // namespace turnstile::core
