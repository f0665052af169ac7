// Addresses on the raft port: the raft addresses of the cluster's configuration, and the key that
// names one source of incoming connections for the handshake slots (core/handshake_slots.h).
//
// Thread affinity: plain functions, safe anywhere.
#pragma once

#include <sys/socket.h>

#include <optional>
#include <string>
#include <string_view>

namespace turnstile::net {

struct HostPort {
  std::string host;
  std::string port;
};

// "host:port" or "[v6]:port" (core/address.h has the grammar): the host without brackets.
std::optional<HostPort> split_host_port(std::string_view address);

// A server's address in raft's configuration is its raft address, optionally followed by '@' and
// the client address its clients are sent to ("10.0.0.4:7000@10.0.0.4:6388"; docs/cluster.md).
// The transport dials the part before '@'.
std::string_view dial_address(std::string_view configured);

// Whether `configured` is such an address: host:port, optionally followed by '@' and host:port.
bool valid_configured_address(std::string_view configured);

// A numeric IPv4 or IPv6 host and its port as a socket address; false for a name (it needs the
// resolver).
bool parse_numeric(const HostPort& hp, sockaddr_storage* out);

// "host:port" or "[v6]:port" of a socket address, for the log; "?" for another family.
std::string address_name(const sockaddr* addr);

// The source an incoming connection from `addr` counts against: its IPv4 address ("192.0.2.7"),
// or the /64 of its IPv6 address ("2001:db8:0:1::/64": one site's usual allocation, so that one
// host cannot pose as many sources). An IPv4-mapped IPv6 address is its IPv4 address. Empty for
// another family.
std::string source_key(const sockaddr* addr);

// The source key of a configured raft address (dial_address() applies) whose host is numeric;
// nullopt for a name (its key is known once it is resolved) or a malformed address.
std::optional<std::string> source_key_of(std::string_view configured);

}  // namespace turnstile::net
