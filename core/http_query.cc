#include "core/http_query.h"

#include <cstddef>

namespace turnstile::core {
namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// url.QueryUnescape: nullopt at a '%' that is not followed by two hex digits; `bad` is then its
// offset in `text`.
std::optional<std::string> query_unescape(std::string_view text, std::size_t& bad) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '+') {
      out.push_back(' ');
    } else if (c != '%') {
      out.push_back(c);
    } else {
      const int high = i + 1 < text.size() ? hex_digit(text[i + 1]) : -1;
      const int low = i + 2 < text.size() ? hex_digit(text[i + 2]) : -1;
      if (high < 0 || low < 0) {
        bad = i;
        return std::nullopt;
      }
      out.push_back(static_cast<char>(high * 16 + low));
      i += 2;
    }
  }
  return out;
}

}  // namespace

std::variant<HttpQueryError, std::vector<HttpQueryPair>> parse_http_query(std::string_view query) {
  std::vector<HttpQueryPair> pairs;
  std::size_t start = 0;  // of the current pair, in `query`
  while (start <= query.size()) {
    const std::size_t amp = query.find('&', start);
    const std::size_t end = amp == std::string_view::npos ? query.size() : amp;
    const std::string_view pair = query.substr(start, end - start);
    if (!pair.empty()) {
      const std::size_t equals = pair.find('=');
      const std::string_view name = pair.substr(0, equals);
      const std::string_view value =
          equals == std::string_view::npos ? std::string_view() : pair.substr(equals + 1);
      std::size_t bad = 0;
      std::optional<std::string> decoded_name = query_unescape(name, bad);
      std::optional<std::string> decoded_value;
      if (decoded_name) {
        decoded_value = query_unescape(value, bad);
        bad += equals + 1;
      }
      if (!decoded_name || !decoded_value) {
        return HttpQueryError{"query string has a '%' not followed by two hex digits (byte " +
                              std::to_string(start + bad) + ")"};
      }
      pairs.push_back(HttpQueryPair{std::move(*decoded_name), std::move(*decoded_value)});
    }
    if (amp == std::string_view::npos) break;
    start = amp + 1;
  }
  return pairs;
}

std::optional<std::string> first_query_value(const std::vector<HttpQueryPair>& pairs,
                                             std::string_view name) {
  for (const HttpQueryPair& pair : pairs) {
    if (pair.name == name) return pair.value;
  }
  return std::nullopt;
}

}  // namespace turnstile::core
