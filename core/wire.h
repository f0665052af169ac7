// The dflockd wire codec: an incremental request parser and the reply/request encoders.
//
// A request is three '\n'-terminated lines: command, key, argument. A reply is one line. The
// parser is fed arbitrary chunks (one byte at a time works) and yields one ParseResult per
// request: a typed Request, or a typed ProtocolError that says whether the connection must be
// closed after the `error` reply (reference 1.6). The numeric codes of the errors are dflockd's;
// they never appear on the wire, where every protocol error is the plain line `error`.
//
// Bounds: a line holds at most Limits::line_max bytes of payload (a trailing '\r' counts, the
// '\n' does not); the argument line of `auth` may hold up to Limits::long_line_max. A longer line
// is drained up to its '\n' without being stored and then reported as kLineTooLong, which closes.
// So the parser never holds more than long_line_max + line_max * 2 bytes, whatever it is fed.
//
// Thread affinity: a RequestParser belongs to one session; not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/protocol.h"

namespace turnstile::core {

enum class ProtocolError : std::uint8_t {
  kNone = 0,
  kUnknownCommand = 3,  // keep open
  kBadInteger = 4,      // keep open
  kBadKey = 5,          // keep open: empty, or contains space, \t, \r or \n
  kBadTimeout = 6,      // keep open: negative or > kMaxSeconds
  kEmptyToken = 7,      // keep open
  kBadArguments = 8,    // keep open: wrong field count
  kBadLease = 9,        // keep open: <= 0 or > kMaxSeconds
  kLineTooLong = 12,    // close (after draining the line)
  kBadLimit = 13,       // keep open: <= 0 or > kMaxSemaphoreLimit
};

// Whether the connection must be closed after answering `error` for this error.
bool closes_connection(ProtocolError error);
std::string_view protocol_error_name(ProtocolError error);

struct ParseResult {
  ProtocolError error = ProtocolError::kNone;  // kNone: `request` is valid
  Request request;                             // meaningful only when ok()

  bool ok() const { return error == ProtocolError::kNone; }
};

class RequestParser {
 public:
  struct Limits {
    std::size_t line_max = 256;
    std::size_t long_line_max = 64 * 1024;
  };

  RequestParser() = default;
  explicit RequestParser(Limits limits) : limits_(limits) {}

  // Consumes bytes of `input` until one request (or protocol error) is complete, or the input
  // runs out. Returns the number of bytes consumed. When a request completed, `out` holds it and
  // the bytes after it are left unconsumed, so a caller can stop taking requests at any point
  // (backpressure) without losing bytes; otherwise `out` is reset to nullopt. A ParseResult
  // left in `out` by the caller is reused in place, which spares its strings' allocations.
  std::size_t parse(std::string_view input, std::optional<ParseResult>& out);

  // True when some bytes of a request have arrived but the request is not complete yet.
  bool mid_request() const;

  // Bytes the parser is holding for an incomplete request (bounded, see above).
  std::size_t buffered_bytes() const { return buffer_.size(); }

 private:
  // The slow path, for a request that spans chunks or has a line over its cap.
  std::size_t parse_buffered(std::string_view input, std::optional<ParseResult>& out);
  // The cap of the line being read: long_line_max for the argument of `auth`, else line_max.
  std::size_t line_cap() const;
  // Forgets the request in progress (after it completed or was drained).
  void reset();

  Limits limits_;
  int line_index_ = 0;              // the line being read: 0 command, 1 key, 2 argument
  std::size_t line_length_ = 0;     // bytes of the current line consumed (stored) so far
  std::size_t command_length_ = 0;  // bytes of the completed command line at buffer_'s front
  std::size_t key_length_ = 0;      // bytes of the completed key line after it
  // The completed lines back to back (no '\n'), then the partial current one. Used only when a
  // request spans chunks; at most line_max * 2 + max(line_max, long_line_max) bytes.
  std::string buffer_;
  bool draining_ = false;  // the current line went over its cap; skipping to its '\n'
};

// The one rule for a key, on the wire, over HTTP and in the client: 1 to kKeyMaxBytes bytes,
// none of them a space, a tab, CR or LF. Any other byte (NUL, bytes that are not UTF-8) is part of
// the key. nullopt when `key` is valid, else what is wrong with it.
inline constexpr std::size_t kKeyMaxBytes = 256;  // the protocol's line cap
std::optional<std::string_view> key_problem(std::string_view key);

// True when `text` is nothing but white space as Go's strings.TrimSpace sees it (Unicode spaces
// included), or empty: a signal payload that is blank is refused, on the wire and in the client.
bool is_blank(std::string_view text);

// Appends the reply line (with its '\n') to `out`.
void encode_reply(const Reply& reply, std::string& out);

// The reply to a request of `command`, from one reply line (without its '\n'): the inverse of
// encode_reply, for clients and checkers. A status word alone (an error, `timeout`, `queued`, a
// bare `ok`), or `ok`/`acquired` with the fields that command's success carries: a token and a
// lease (l, sl, w, sw; e and se as `acquired`), a ttl (n, sn), the stats JSON (stats). nullopt for
// anything else, an unknown status included.
std::optional<Reply> decode_reply(Command command, std::string_view line);

// Appends the three request lines to `out`, in the canonical form a client sends: unused key
// is `_`, optional fields are left out when absent (lease_s == 0). A request without a token
// for r/sr/n/sn cannot be encoded (assertion).
void encode_request(const Request& request, std::string& out);

}  // namespace turnstile::core
