// Reading the head of an HTTP/1.x response: its status code and its header fields. The CLI's
// cluster commands read the admin routes' answers with it, and the integration tests the HTTP
// API's; each caller frames the body itself (to EOF, or by Content-Length on a kept-alive
// connection).
//
// Thread affinity: a pure function, safe anywhere.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace turnstile::client {

struct HttpResponseHead {
  int status = 0;  // the three digits after "HTTP/1.x "
  // Names lower-cased, values without the blanks around them; a repeated name keeps its last
  // value. A line without a colon is skipped.
  std::map<std::string, std::string> headers;
  std::size_t size = 0;  // bytes of the head with its closing blank line: where the body starts
};

// The head at the start of `bytes`. nullopt when `bytes` does not start with "HTTP/1.", the
// status code is not three digits, or the blank line that ends the head has not arrived yet.
std::optional<HttpResponseHead> parse_http_response_head(std::string_view bytes);

}  // namespace turnstile::client
