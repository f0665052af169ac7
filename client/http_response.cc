#include "client/http_response.h"

#include <cctype>

namespace turnstile::client {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

std::string_view without_blanks(std::string_view text) {
  const auto is_blank = [](char c) { return c == ' ' || c == '\t'; };
  while (!text.empty() && is_blank(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_blank(text.back())) text.remove_suffix(1);
  return text;
}

}  // namespace

std::optional<HttpResponseHead> parse_http_response_head(std::string_view bytes) {
  // "HTTP/1.1 200 ...": the status code stands at 9 to 11.
  if (bytes.substr(0, 7) != "HTTP/1." || bytes.size() < 12 || !is_digit(bytes[9]) ||
      !is_digit(bytes[10]) || !is_digit(bytes[11])) {
    return std::nullopt;
  }
  const std::size_t head_end = bytes.find("\r\n\r\n");
  if (head_end == std::string_view::npos) return std::nullopt;
  HttpResponseHead head;
  head.status = (bytes[9] - '0') * 100 + (bytes[10] - '0') * 10 + (bytes[11] - '0');
  head.size = head_end + 4;
  std::size_t line_start = bytes.find("\r\n") + 2;  // after the status line
  while (line_start < head_end + 2) {
    const std::size_t line_end = bytes.find("\r\n", line_start);
    const std::string_view line = bytes.substr(line_start, line_end - line_start);
    line_start = line_end + 2;
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string name(line.substr(0, colon));
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    head.headers[name] = std::string(without_blanks(line.substr(colon + 1)));
  }
  return head;
}

}  // namespace turnstile::client
