// Endpoint (endpoint.h): printing and parsing server addresses. Opening a socket to one is
// socket_open.cc's.
#include "client/endpoint.h"

#include <utility>
#include <variant>

#include "core/address.h"

namespace turnstile::client {

std::string Endpoint::to_string() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::optional<Endpoint> parse_leader_address(std::string_view text) {
  // A server's address is at most 120 bytes (docs/http-api.md); anything longer is not one, and
  // is not handed to the resolver. The port is required: a server always names it.
  constexpr std::size_t kMaxAddress = 255;
  if (text.size() > kMaxAddress) return std::nullopt;
  const auto parsed = core::parse_host_port(text);
  const auto* address = std::get_if<core::HostPort>(&parsed);
  if (address == nullptr) return std::nullopt;
  return Endpoint{address->host, address->port};
}

Result<Endpoint> parse_endpoint(std::string_view text) {
  auto parsed = core::parse_host_port(text, core::AddressOptions{kDefaultPort});
  if (const auto* why = std::get_if<std::string>(&parsed)) {
    return make_error(ErrorCode::kInvalidArgument,
                      "bad server address '" + std::string(text) + "': " + *why);
  }
  core::HostPort& address = std::get<core::HostPort>(parsed);
  return Endpoint{std::move(address.host), address.port};
}

}  // namespace turnstile::client
