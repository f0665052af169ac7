// JSON text: the one UTF-8 check and the one JSON string writer of the project, used by the HTTP
// codec (signal events, so that what a Go client decodes is what it would decode from dflockd)
// and by the daemon's JSON log lines.
//
// Thread affinity: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace turnstile::core {

// The length of the well-formed UTF-8 sequence at text[i] (1 for ASCII), or 0 when there is none
// (RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF). `i` < text.size().
std::size_t utf8_length_at(std::string_view text, std::size_t i);

// Appends `text` as a JSON string, quotes included, the way Go's encoding/json (json.Marshal)
// writes it: `"` `\` and \b \f \n \r \t with a backslash; other control bytes, `<`, `>` and `&`
// as \u00XX; U+2028 and U+2029 as \u2028 and \u2029; each byte that starts no well-formed UTF-8
// sequence as \ufffd. The result is valid JSON and valid UTF-8 whatever `text` holds.
void append_json_string(std::string& out, std::string_view text);

}  // namespace turnstile::core
