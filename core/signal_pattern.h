// Signal channels and listen patterns (docs/protocol.md, "Signals"; dflockd v1.11-v1.16): names
// of dot-separated tokens, NATS-style. A channel is literal. A pattern's token may also be `*`
// (exactly one channel token) or, as its last token only, `>` (one or more trailing tokens).
// Wildcards are whole tokens: `a.b*` and `a.>.b` are not patterns.
//
// These rules come on top of the key rule every key line follows (core/wire.h: non-empty, no
// whitespace, at most 256 bytes). Not in dflockd's published rules, and ours: an empty token
// (`a..b`, `.a`, `a.`) is refused in a pattern and in a channel alike, since no token can ever
// match it on the other side's terms.
//
// signal_pattern_matches() is the reference's rule, token by token, for one pattern. The index
// the server matches with (core/signal_index.h) is tested against it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace turnstile::core {

enum class SignalNameError : std::uint8_t {
  kNone,
  kEmptyToken,         // "a..b", ".a", "a."
  kPartialWildcard,    // "a.b*", "a.*x", ">b": a wildcard inside a longer token
  kTailNotLast,        // "a.>.b"
  kWildcardInChannel,  // a channel with `*` or `>` anywhere
};

// The dot-separated tokens of a name, empty ones included ("a..b" is "a", "", "b").
std::vector<std::string_view> signal_tokens(std::string_view name);

// Why `pattern` is not a listen pattern, or kNone.
SignalNameError check_signal_pattern(std::string_view pattern);
// Why `channel` is not a signal channel, or kNone.
SignalNameError check_signal_channel(std::string_view channel);
// Words for the error line ("empty token", ...); "" for kNone.
std::string_view signal_name_error_text(SignalNameError error);

// Whether a valid `pattern` matches a valid `channel`: `>` matches when at least one channel
// token remains; otherwise the token counts must be equal and each token equal or `*`.
bool signal_pattern_matches(std::string_view pattern, std::string_view channel);

// Whether a valid pattern holds a wildcard token (`*` or `>`).
bool signal_pattern_has_wildcard(std::string_view pattern);

// The push frame a listener receives, `sig <channel> <payload>\n`, holds at most this many bytes
// before its '\n' (the 64 KiB line dflockd's clients read), so a signal's payload is capped by its
// channel's length.
inline constexpr std::size_t kSignalFrameMax = 65536;
std::size_t signal_payload_max(std::string_view channel);
// Appends the push frame of a signal.
void append_signal_frame(std::string_view channel, std::string_view payload, std::string& out);
// The channel and payload of a push frame line (without its '\n'); nullopt when `line` is not
// one (it does not start with `sig `, or has no payload).
struct SignalFrame {
  std::string channel;
  std::string payload;
};
std::optional<SignalFrame> parse_signal_frame(std::string_view line);

}  // namespace turnstile::core
