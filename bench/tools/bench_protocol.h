// How turnstile-bench frames an acquire and a release and reads their replies. The load loop in
// lock_worker.cc only sees this interface: LineProtocol is the TCP wire protocol, and
// HttpProtocol the HTTP REST API (docs/http-api.md); nothing in the loop assumes lines. The signal
// modes' requests, their reply and the frame counter of their listeners are at the end.
//
// Thread affinity: implementations are immutable after construction. A LineProtocol is shared by
// every connection; an HttpProtocol carries one HTTP session id, so each connection has its own.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace turnstile::bench {

inline constexpr std::size_t kTokenLength = 32;
using TokenText = std::array<char, kTokenLength>;

// One parsed reply. `ok` is false for anything that is not the expected success reply; `line`
// then holds what arrived, for the error report.
struct Reply {
  bool ok = false;
  std::uint64_t fence = 0;  // grants only: the first 16 hex digits of the token, big-endian
  TokenText token{};        // grants only
  std::string_view line;    // valid until the input buffer changes
  std::string text;         // when not empty, what to report instead of `line` (HTTP errors)
};

inline int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// Fills reply.token and reply.fence from 32 lowercase hex digits; false when they are not.
inline bool parse_token(std::string_view hex, Reply& reply) {
  if (hex.size() != kTokenLength) return false;
  std::uint64_t fence = 0;
  for (std::size_t i = 0; i < kTokenLength; ++i) {
    const int digit = hex_value(hex[i]);
    if (digit < 0) return false;
    if (i < 16) fence = (fence << 4) | static_cast<std::uint64_t>(digit);
    reply.token[i] = hex[i];
  }
  reply.fence = fence;
  return true;
}

class Protocol {
 public:
  virtual ~Protocol() = default;
  virtual void append_acquire(std::string& out, std::string_view key) const = 0;
  virtual void append_release(std::string& out, std::string_view key,
                              const TokenText& token) const = 0;
  // Parse the reply at the front of `input`. Returns the bytes it took, or 0 when the reply is
  // not complete yet.
  virtual std::size_t parse_grant(std::string_view input, Reply& reply) const = 0;
  virtual std::size_t parse_release(std::string_view input, Reply& reply) const = 0;
};

// The dflockd line protocol: `l` / `r` for locks, `sl` / `sr` for semaphores, and the
// read-write locks' `rl` / `rr` (read) and `wl` / `wr` (write).
class LineProtocol final : public Protocol {
 public:
  // limit == 0 means locks (`l key timeout`), otherwise semaphores (`sl key timeout limit`).
  LineProtocol(std::int64_t timeout_s, std::int64_t limit)
      : LineProtocol(limit > 0 ? "sl" : "l", limit > 0 ? "sr" : "r",
                     std::to_string(timeout_s) +
                         (limit > 0 ? " " + std::to_string(limit) : std::string())) {}

  // `<acquire>\nkey\n<argument>\n` and `<release>\nkey\ntoken\n`, answered like `l` and `r`.
  LineProtocol(std::string_view acquire, std::string_view release, std::string argument)
      : acquire_(std::string(acquire) + "\n"),
        release_(std::string(release) + "\n"),
        argument_(std::move(argument)) {}

  void append_acquire(std::string& out, std::string_view key) const override {
    out += acquire_;
    out += key;
    out += '\n';
    out += argument_;
    out += '\n';
  }

  void append_release(std::string& out, std::string_view key,
                      const TokenText& token) const override {
    out += release_;
    out += key;
    out += '\n';
    out.append(token.data(), token.size());
    out += '\n';
  }

  // Expected: "ok <32 lowercase hex> <lease digits>".
  std::size_t parse_grant(std::string_view input, Reply& reply) const override {
    const std::size_t end = start_reply(input, reply);
    if (end == 0) return 0;
    const std::string_view line = reply.line;
    if (line.size() < 3 + kTokenLength + 2 || line.substr(0, 3) != "ok " ||
        line[3 + kTokenLength] != ' ' || !parse_token(line.substr(3, kTokenLength), reply)) {
      return end;
    }
    for (char c : line.substr(4 + kTokenLength)) {
      if (c < '0' || c > '9') return end;
    }
    reply.ok = true;
    return end;
  }

  std::size_t parse_release(std::string_view input, Reply& reply) const override {
    const std::size_t end = start_reply(input, reply);
    if (end == 0) return 0;
    reply.ok = reply.line == "ok";
    return end;
  }

 private:
  // Starts `reply` from the first line of `input` (without its CR LF); the bytes the line takes
  // with its newline, or 0 when no whole line has arrived yet.
  static std::size_t start_reply(std::string_view input, Reply& reply) {
    const std::size_t end = input.find('\n');
    if (end == std::string_view::npos) return 0;
    std::string_view line = input.substr(0, end);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    reply = Reply{};
    reply.line = line;
    return end + 1;
  }

  std::string acquire_;  // the command line, with its newline
  std::string release_;
  std::string argument_;
};

// One HTTP/1.1 response at the front of a buffer, parsed incrementally: status line, headers,
// then a body of Content-Length bytes (none for 1xx, 204 and 304). turnstiled answers through
// evhttp_send_reply, which always sets Content-Length, so a chunked reply is not expected and is
// reported as malformed.
struct HttpResponse {
  enum class State { kIncomplete, kComplete, kMalformed };
  State state = State::kIncomplete;
  int status = 0;
  std::string_view status_line;
  std::string_view body;
  std::size_t size = 0;  // bytes of the whole response, when complete
  bool close = false;    // "Connection: close"
};

inline bool equals_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

inline HttpResponse parse_http_response(std::string_view input) {
  HttpResponse response;
  const std::size_t head_end = input.find("\r\n\r\n");
  if (head_end == std::string_view::npos) {
    // A head this long without its end is not an answer from turnstiled.
    if (input.size() > 16384) response.state = HttpResponse::State::kMalformed;
    return response;
  }
  const std::string_view head = input.substr(0, head_end);
  std::size_t line_end = head.find("\r\n");
  response.status_line = head.substr(0, line_end);
  const std::string_view status = response.status_line;
  if (status.size() < 12 || status.substr(0, 7) != "HTTP/1." || status[8] != ' ' ||
      status[9] < '1' || status[9] > '5' || status[10] < '0' || status[10] > '9' ||
      status[11] < '0' || status[11] > '9') {
    response.state = HttpResponse::State::kMalformed;
    return response;
  }
  response.status = (status[9] - '0') * 100 + (status[10] - '0') * 10 + (status[11] - '0');
  std::optional<std::size_t> content_length;
  while (line_end != std::string_view::npos) {
    const std::size_t start = line_end + 2;
    line_end = head.find("\r\n", start);
    const std::string_view line = head.substr(
        start, line_end == std::string_view::npos ? std::string_view::npos : line_end - start);
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) {
      response.state = HttpResponse::State::kMalformed;
      return response;
    }
    const std::string_view name = line.substr(0, colon);
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
      value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
    if (equals_ignoring_case(name, "content-length")) {
      std::size_t length = 0;
      if (value.empty() || value.size() > 9) {
        response.state = HttpResponse::State::kMalformed;
        return response;
      }
      for (char c : value) {
        if (c < '0' || c > '9') {
          response.state = HttpResponse::State::kMalformed;
          return response;
        }
        length = length * 10 + static_cast<std::size_t>(c - '0');
      }
      content_length = length;
    } else if (equals_ignoring_case(name, "transfer-encoding")) {
      response.state = HttpResponse::State::kMalformed;  // chunked: not used by turnstiled
      return response;
    } else if (equals_ignoring_case(name, "connection")) {
      response.close = equals_ignoring_case(value, "close");
    }
  }
  const bool no_body = response.status < 200 || response.status == 204 || response.status == 304;
  const std::size_t body_length = no_body ? 0 : content_length.value_or(0);
  if (!no_body && !content_length) {
    response.state = HttpResponse::State::kMalformed;  // a body delimited by close: not expected
    return response;
  }
  const std::size_t body_start = head_end + 4;
  if (input.size() - body_start < body_length) return response;
  response.body = input.substr(body_start, body_length);
  response.size = body_start + body_length;
  response.state = HttpResponse::State::kComplete;
  return response;
}

// The HTTP REST API of turnstiled (docs/http-api.md) on one keep-alive connection and one HTTP
// session: acquire = POST /v1/locks/{key} {"acquire_timeout_s":T,"lease_ttl_s":L} answered
// 200 {"status":"ok","token":...}; release = POST /v1/locks/{key}/release {"token":...}
// answered 204. With a limit, /v1/semaphores/{key} and {"...","limit":L}.
class HttpProtocol final : public Protocol {
 public:
  // limit == 0 means locks, otherwise semaphores. lease_ttl_s == 0 is the server's default.
  HttpProtocol(std::string_view host, std::string_view session_id, std::int64_t timeout_s,
               std::int64_t lease_ttl_s, std::int64_t limit)
      : semaphore_(limit > 0) {
    headers_ = " HTTP/1.1\r\nHost: ";
    headers_ += host;
    headers_ += "\r\nX-Dflockd-Session: ";
    headers_ += session_id;
    headers_ += "\r\nContent-Type: application/json\r\nContent-Length: ";
    acquire_body_ = "{\"acquire_timeout_s\":" + std::to_string(timeout_s);
    if (semaphore_) acquire_body_ += ",\"limit\":" + std::to_string(limit);
    acquire_body_ += ",\"lease_ttl_s\":" + std::to_string(lease_ttl_s) + "}";
  }

  void append_acquire(std::string& out, std::string_view key) const override {
    out += semaphore_ ? "POST /v1/semaphores/" : "POST /v1/locks/";
    append_path_segment(out, key);
    out += headers_;
    out += std::to_string(acquire_body_.size());
    out += "\r\n\r\n";
    out += acquire_body_;
  }

  void append_release(std::string& out, std::string_view key,
                      const TokenText& token) const override {
    out += semaphore_ ? "POST /v1/semaphores/" : "POST /v1/locks/";
    append_path_segment(out, key);
    out += "/release";
    out += headers_;
    out += std::to_string(kTokenLength + 12);  // {"token":"<32 hex>"}
    out += "\r\n\r\n{\"token\":\"";
    out.append(token.data(), token.size());
    out += "\"}";
  }

  // Expected: 200 {"status":"ok","token":"<32 lowercase hex>","lease_ttl_s":N}. The exact bytes
  // turnstiled writes are matched first; anything else goes through a JSON parser.
  std::size_t parse_grant(std::string_view input, Reply& reply) const override {
    const HttpResponse response = parse_http_response(input);
    if (response.state == HttpResponse::State::kIncomplete) return 0;
    reply = Reply{};
    if (!accept(response, input, 200, reply)) return taken(response, input);
    constexpr std::string_view kPrefix = "{\"status\":\"ok\",\"token\":\"";
    const std::string_view body = response.body;
    if (body.substr(0, kPrefix.size()) == kPrefix && body.size() > kPrefix.size() + kTokenLength &&
        body[kPrefix.size() + kTokenLength] == '"' &&
        parse_token(body.substr(kPrefix.size(), kTokenLength), reply)) {
      reply.ok = true;
      return response.size;
    }
    const nlohmann::json json = nlohmann::json::parse(body, nullptr, false);
    if (json.is_object() && json.value("status", "") == "ok" && json.contains("token") &&
        json["token"].is_string() && parse_token(json["token"].get<std::string>(), reply)) {
      reply.ok = true;
    } else {
      reply.text = describe(response);
    }
    return response.size;
  }

  std::size_t parse_release(std::string_view input, Reply& reply) const override {
    const HttpResponse response = parse_http_response(input);
    if (response.state == HttpResponse::State::kIncomplete) return 0;
    reply = Reply{};
    reply.ok = accept(response, input, 204, reply);
    return taken(response, input);
  }

 private:
  // True for a complete response with the expected status; otherwise fills reply's report.
  static bool accept(const HttpResponse& response, std::string_view input, int expected,
                     Reply& reply) {
    reply.line = response.status_line;
    if (response.state == HttpResponse::State::kMalformed) {
      reply.text = "malformed HTTP response: " +
                   std::string(input.substr(0, std::min<std::size_t>(input.size(), 200)));
      return false;
    }
    if (response.status != expected || response.close) {
      reply.text = describe(response);
      return false;
    }
    return true;
  }

  // "HTTP/1.1 404 Not Found {"error":...}" without the body's trailing newline.
  static std::string describe(const HttpResponse& response) {
    std::string text = std::string(response.status_line) +
                       (response.close ? " (Connection: close) " : " ") +
                       std::string(response.body);
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    return text;
  }

  // Bytes a response takes; a malformed one takes the whole input (the connection is failed).
  static std::size_t taken(const HttpResponse& response, std::string_view input) {
    return response.state == HttpResponse::State::kComplete ? response.size : input.size();
  }

  // A key is one path segment: bytes outside RFC 3986's unreserved set are percent-encoded.
  static void append_path_segment(std::string& out, std::string_view key) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    for (char c : key) {
      const auto byte = static_cast<unsigned char>(c);
      if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
          c == '_' || c == '.' || c == '~') {
        out += c;
      } else {
        out += '%';
        out += kHex[byte >> 4];
        out += kHex[byte & 15];
      }
    }
  }

  bool semaphore_;
  std::string headers_;  // from " HTTP/1.1" to "Content-Length: "
  std::string acquire_body_;
};

// ---- signals (the signal modes: listen, signal, and the `sig` frames listeners receive) --------

// `listen\n<pattern>\n\n`: a plain subscription (no queue group), answered `ok`.
inline std::string listen_request(std::string_view pattern) {
  std::string out = "listen\n";
  out += pattern;
  out += "\n\n";
  return out;
}

// `signal\n<channel>\n<payload>\n`, answered `ok <n>`.
inline std::string signal_request(std::string_view channel, std::string_view payload) {
  std::string out = "signal\n";
  out += channel;
  out += '\n';
  out += payload;
  out += '\n';
  return out;
}

// The delivery count of a reply line (without its newline) `ok <n>`; nullopt for anything else.
inline std::optional<std::uint64_t> parse_delivered(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.size() < 4 || line.substr(0, 3) != "ok " || line.size() > 3 + 19) return std::nullopt;
  std::uint64_t count = 0;
  for (char c : line.substr(3)) {
    if (c < '0' || c > '9') return std::nullopt;
    count = count * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return count;
}

// Counts the '\n'-terminated lines of a listener's stream as they arrive, in pieces of any size:
// a line starting `sig ` is a frame, any other line is not. Only the first four bytes of a line
// are looked at; the rest is skipped with memchr.
struct FrameCounter {
  std::uint64_t frames = 0;
  std::uint64_t others = 0;  // complete lines that are not `sig ` frames
  std::uint8_t matched = 0;  // bytes of "sig " matched at the start of the current line
  bool other = false;        // the current line is not a frame

  void feed(const char* data, std::size_t size) {
    static constexpr char kPrefix[] = "sig ";
    const char* end = data + size;
    while (data < end) {
      if (!other && matched < 4) {
        if (*data == kPrefix[matched]) {
          ++matched;
          ++data;
          continue;
        }
        other = true;  // this byte may be the line's '\n': looked for below
      }
      const auto* newline =
          static_cast<const char*>(std::memchr(data, '\n', static_cast<std::size_t>(end - data)));
      if (newline == nullptr) return;
      if (other) {
        ++others;
      } else {
        ++frames;
      }
      data = newline + 1;
      matched = 0;
      other = false;
    }
  }
};

}  // namespace turnstile::bench
