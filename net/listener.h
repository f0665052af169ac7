// The listening socket of each of turnstiled's listeners, the protocol's (net/server.h) and the
// HTTP API's (net/http_server.h), made one way: the configured host resolved (numeric port), a
// non-blocking close-on-exec socket with SO_REUSEADDR bound to its first address, listening with
// a backlog of 1024. A failure is logged as a listen_failed event; the caller logs the success,
// in its own words.
//
// Thread affinity: the main thread, at start-up.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace turnstile::net {

struct ListenerSpec {
  std::string_view host_flag;     // named when the host does not resolve: "--host", "--http-host"
  std::string_view protocol;      // the listen_failed event's protocol field: "tcp", "http"
  std::string_view purpose = "";  // "cannot listen <purpose>on ...": "" or "for HTTP "
  std::string host;
  int port = 0;
  // SO_KEEPALIVE, which the accepted connections inherit (the protocol listener sets it, as
  // libevent's evconnlistener_new_bind did when it made that socket).
  bool keepalive = false;
};

struct ListeningSocket {
  int fd = -1;          // the caller's to close
  std::string address;  // where it is bound: "ip:port" or "[v6]:port" (the port picked for 0)
};

// nullopt when the host does not resolve or the socket cannot listen (logged).
std::optional<ListeningSocket> open_listening_socket(const ListenerSpec& spec);

}  // namespace turnstile::net
