// Small value types that carry meaning, so that a session id cannot be passed where a fence is
// expected: SessionId, Fence, Token, and the two resource namespaces.
//
// Thread affinity: plain values, safe anywhere.
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace turnstile::core {

// One connection's identity (a TCP connection, an HTTP session or a simulated client). Never 0:
// 0 is what stats shows as the owner of a lock that has waiters but no holder.
struct SessionId {
  std::uint64_t value = 0;
  constexpr auto operator<=>(const SessionId&) const = default;
};

// A fencing token's number: strictly increasing per key over every grant.
struct Fence {
  std::uint64_t value = 0;
  constexpr auto operator<=>(const Fence&) const = default;
};

// Locks, semaphores and read-write locks live in separate key spaces: `l k`, `sl k` and `rl k`
// name three different resources.
enum class Namespace : std::uint8_t { kLock, kSemaphore, kReadWrite };

// The capability a grant hands out: 32 lowercase hex characters on the wire, the first 16 the
// big-endian fence, the last 16 a random salt. Whoever presents it may release or renew.
struct Token {
  Fence fence;
  std::uint64_t salt = 0;

  static constexpr std::size_t kWireLength = 32;

  // Writes exactly 32 lowercase hex characters to `out`.
  void write_hex(char* out) const;
  std::string to_string() const;
  // Accepts exactly 32 lowercase hex characters; anything else is not a token we could have
  // issued, so it is nullopt (and such a token never matches a holder).
  static std::optional<Token> parse(std::string_view text);

  constexpr bool operator==(const Token&) const = default;
};

}  // namespace turnstile::core
