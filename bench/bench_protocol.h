// How turnstile-bench frames an acquire and a release and reads their replies. The load loop in
// turnstile_bench.cc only sees this interface, so another transport (the HTTP API, once it
// exists) is one more implementation plus a mode name; nothing in the loop assumes lines.
//
// Thread affinity: implementations are immutable after construction and shared by all threads.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

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
};

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

// The dflockd line protocol: `l` / `r` for locks, `sl` / `sr` for semaphores.
class LineProtocol final : public Protocol {
 public:
  // limit == 0 means locks (`l key timeout`), otherwise semaphores (`sl key timeout limit`).
  LineProtocol(std::int64_t timeout_s, std::int64_t limit) : semaphore_(limit > 0) {
    argument_ = std::to_string(timeout_s);
    if (semaphore_) argument_ += " " + std::to_string(limit);
  }

  void append_acquire(std::string& out, std::string_view key) const override {
    out += semaphore_ ? "sl\n" : "l\n";
    out += key;
    out += '\n';
    out += argument_;
    out += '\n';
  }

  void append_release(std::string& out, std::string_view key,
                      const TokenText& token) const override {
    out += semaphore_ ? "sr\n" : "r\n";
    out += key;
    out += '\n';
    out.append(token.data(), token.size());
    out += '\n';
  }

  // Expected: "ok <32 lowercase hex> <lease digits>".
  std::size_t parse_grant(std::string_view input, Reply& reply) const override {
    const std::size_t end = input.find('\n');
    if (end == std::string_view::npos) return 0;
    std::string_view line = input.substr(0, end);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    reply = Reply{};
    reply.line = line;
    if (line.size() < 3 + kTokenLength + 2 || line.substr(0, 3) != "ok " ||
        line[3 + kTokenLength] != ' ') {
      return end + 1;
    }
    std::uint64_t fence = 0;
    for (std::size_t i = 0; i < kTokenLength; ++i) {
      const int digit = hex_value(line[3 + i]);
      if (digit < 0) return end + 1;
      if (i < 16) fence = (fence << 4) | static_cast<std::uint64_t>(digit);
      reply.token[i] = line[3 + i];
    }
    for (char c : line.substr(4 + kTokenLength)) {
      if (c < '0' || c > '9') return end + 1;
    }
    reply.fence = fence;
    reply.ok = true;
    return end + 1;
  }

  std::size_t parse_release(std::string_view input, Reply& reply) const override {
    const std::size_t end = input.find('\n');
    if (end == std::string_view::npos) return 0;
    std::string_view line = input.substr(0, end);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    reply = Reply{};
    reply.line = line;
    reply.ok = line == "ok";
    return end + 1;
  }

 private:
  static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  }

  bool semaphore_;
  std::string argument_;
};

}  // namespace turnstile::bench
