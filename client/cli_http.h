// The CLI's HTTP call: one request to a node's HTTP address, over plain HTTP/1.1, for the admin
// routes (`cluster add/remove/transfer`, `admin release`; docs/http-api.md). For the CLI's files
// only: not part of the library, not installed.
//
// Thread affinity: any thread; each call opens and closes its own connection.
#pragma once

#include <string>

#include "client/connection.h"
#include "client/result.h"

namespace turnstile::client::cli {

struct HttpAnswer {
  int status = 0;
  std::string leader;  // X-Dflockd-Leader
  std::string body;
};

// One request on its own connection (Connection: close), read to EOF. `timeout` bounds the
// connect and then every wait for bytes: adding a voter answers once it has caught up.
Result<HttpAnswer> http_call(const Endpoint& server, const std::string& method,
                             const std::string& path, const std::string& token,
                             const std::string& body, Milliseconds connect_timeout,
                             Milliseconds timeout);

}  // namespace turnstile::client::cli
