// The client's half of the HTTP codec: an engine request of a session as the HTTP request that
// asks for it (docs/http-api.md), the inverse of decode_http_session_request (core/http_codec.h).
// The simulator's HTTP clients and the tests write their requests with it, so what they send is
// what a real client sends: a method, a path with the key percent-encoded, and a JSON body.
//
// Thread affinity: free functions, safe anywhere.
#pragma once

#include <string>
#include <string_view>

#include "core/protocol.h"

namespace turnstile::core {

struct HttpRequestLine {
  std::string_view method;  // "POST"
  std::string path;         // "/v1/locks/<key>/renew"
  std::string body;         // "{...}"
};

// The request for a lock, semaphore or read-write lock command of a session (one with a keyed
// route: http_endpoint_command names it). The body carries every field the route takes.
HttpRequestLine encode_http_session_request(const Request& request);

// Every byte outside A-Z a-z 0-9 - . _ ~ as %XX: a path segment percent_decode reads back.
std::string percent_encode(std::string_view text);

}  // namespace turnstile::core
