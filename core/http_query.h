#pragma once

// The query string of an HTTP request (the part of the target after '?', without it), read as
// Go's net/url reads one: pairs split on '&', a pair's name and value split on its first '=',
// each unescaped as url.QueryUnescape does ('+' is a space, %XX the byte it names). An empty
// pair ("a=1&&b=2") is skipped.
//
// Where Go's url.Query silently drops a pair with a bad escape (a '%' not followed by two hex
// digits: "a%", "a%zz"), turnstile refuses the whole query: a request whose parameters cannot be
// read is answered 400 and changes nothing, rather than run as if a parameter were absent (for
// a force-release, an unread `fence` would mean "every holder").
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace turnstile::core {

struct HttpQueryPair {
  std::string name;
  std::string value;  // empty for a pair without '='
};

// What is wrong with a query: the detail of its 400.
struct HttpQueryError {
  std::string detail;
};

// The pairs of `query`, in order (a repeated name repeats), or the first bad escape.
std::variant<HttpQueryError, std::vector<HttpQueryPair>> parse_http_query(std::string_view query);

// The value of the first pair named `name`, or nullopt when there is none.
std::optional<std::string> first_query_value(const std::vector<HttpQueryPair>& pairs,
                                             std::string_view name);

}  // namespace turnstile::core
