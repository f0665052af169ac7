#pragma once

// Why a request body is not JSON, in turnstile's own words (the detail of an HTTP 400). The
// parser's exception text is never shown to a client: it is the library's wording, it changes
// between versions, and it quotes the input back in its own escaping. Instead the body is read
// again event by event to find the field whose value was being read, and the problem is named
// from a fixed list.
#include <string>
#include <string_view>

namespace turnstile::core {

// `body` is valid UTF-8 that nlohmann's strict parser refused. For example
//   field "payload": not valid JSON at byte 19: a \u escape is half of a UTF-16 surrogate pair
// or, outside any field's value, "request body is not valid JSON at byte 5: ...".
std::string describe_json_error(std::string_view body);

}  // namespace turnstile::core
