// Endpoint: where a server is (host:port) and how to reach it (ConnectOptions: the connect and
// reply timeouts, TLS, the auth token), with the parsers of a server's address as a user writes
// it and as a server names its leader. Connection (connection.h) connects with these.
//
// Thread affinity: plain values; the parsers are safe from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "client/result.h"

namespace turnstile::client {

using Seconds = std::chrono::seconds;
using Milliseconds = std::chrono::milliseconds;

inline constexpr std::uint16_t kDefaultPort = 6388;

// host:port. `host` is a name or an IP literal, without brackets.
struct Endpoint {
  std::string host;
  std::uint16_t port = kDefaultPort;

  // "host:port", with brackets around an IPv6 literal ("[::1]:6388").
  std::string to_string() const;
  bool operator==(const Endpoint&) const = default;
};

// Parses "host:port", "[v6]:port", "host" or "[v6]" (port 6388), or a bare IPv6 literal "::1"
// (the grammar of core/address.h, with the port optional).
Result<Endpoint> parse_endpoint(std::string_view text);
// The address a server names in `error_not_leader <addr>`: "host:port" or "[v6]:port" (the
// grammar of core/address.h, port required), at most 255 bytes; nullopt for anything else (a
// hostile or broken server's reply is never handed to the resolver).
std::optional<Endpoint> parse_leader_address(std::string_view text);

struct TlsOptions {
  // PEM file of the CA certificates to trust; empty: the system's default trust store.
  std::string ca_file;
  // Name the certificate must carry (DNS SAN/CN, or an IP SAN for an IP literal); empty: the
  // endpoint's host. Also sent as SNI when it is not an IP literal.
  std::string server_name;
};

struct ConnectOptions {
  Milliseconds connect_timeout{5000};  // TCP connect + TLS handshake + auth, in total
  Milliseconds reply_timeout{10000};   // wait for a reply, beyond a blocking request's timeout
  std::optional<TlsOptions> tls;       // nullopt: plain TCP
  std::string auth_token;              // empty: no `auth`; else sent first, `ok` required
};

}  // namespace turnstile::client
