#include "core/wire.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstring>
#include <limits>
#include <system_error>

#include "core/assert.h"
#include "core/signal_pattern.h"

namespace turnstile::core {
namespace {

// ---- Whitespace, as Go's unicode.IsSpace sees it (strings.Fields / strings.TrimSpace) -----------
//
// Every multi-byte Unicode space starts with one of four lead bytes (C2, E1, E2, E3), so a byte
// table sorts almost every byte without decoding. Matching the encoded byte patterns is the same
// as decoding first: the patterns start with a lead byte, and continuation bytes (80..BF) can
// never be a lead byte, so a pattern cannot begin inside a valid rune; inside an invalid sequence
// Go advances one byte at a time, as this scan does. Invalid UTF-8 is never a space.

enum SpaceClass : std::uint8_t { kNotSpace = 0, kAsciiSpace = 1, kMaybeSpace = 2 };

constexpr std::array<std::uint8_t, 256> make_space_classes() {
  std::array<std::uint8_t, 256> classes{};
  for (char c : {'\t', '\n', '\v', '\f', '\r', ' '}) {
    classes[static_cast<unsigned char>(c)] = kAsciiSpace;
  }
  for (unsigned c : {0xC2u, 0xE1u, 0xE2u, 0xE3u}) classes[c] = kMaybeSpace;
  return classes;
}
constexpr std::array<std::uint8_t, 256> kSpaceClasses = make_space_classes();

inline unsigned char byte_at(std::string_view text, std::size_t i) {
  return static_cast<unsigned char>(text[i]);
}

// Length of the multi-byte space encoded at text[i], or 0.
std::size_t multibyte_space_at(std::string_view text, std::size_t i) {
  const std::size_t left = text.size() - i;
  switch (byte_at(text, i)) {
    case 0xC2:  // U+0085, U+00A0
      return left >= 2 && (byte_at(text, i + 1) == 0x85 || byte_at(text, i + 1) == 0xA0) ? 2 : 0;
    case 0xE1:  // U+1680
      return left >= 3 && byte_at(text, i + 1) == 0x9A && byte_at(text, i + 2) == 0x80 ? 3 : 0;
    case 0xE2: {
      if (left < 3) return 0;
      const unsigned char second = byte_at(text, i + 1);
      const unsigned char third = byte_at(text, i + 2);
      if (second == 0x80) {  // U+2000..U+200A, U+2028, U+2029, U+202F
        const bool space =
            (third >= 0x80 && third <= 0x8A) || third == 0xA8 || third == 0xA9 || third == 0xAF;
        return space ? 3 : 0;
      }
      return second == 0x81 && third == 0x9F ? 3 : 0;  // U+205F
    }
    case 0xE3:  // U+3000
      return left >= 3 && byte_at(text, i + 1) == 0x80 && byte_at(text, i + 2) == 0x80 ? 3 : 0;
    default:
      return 0;
  }
}

// Length of the whitespace rune starting at text[i], or 0.
inline std::size_t space_at(std::string_view text, std::size_t i) {
  const std::uint8_t space_class = kSpaceClasses[byte_at(text, i)];
  if (space_class != kMaybeSpace) return space_class;
  return multibyte_space_at(text, i);
}

// Length of the whitespace rune that ends just before text[end], or 0. Go decodes the last rune
// from its lead byte; a space pattern ending at `end` is exactly such a rune.
std::size_t space_ending_at(std::string_view text, std::size_t end) {
  if (end == 0) return 0;
  if (kSpaceClasses[byte_at(text, end - 1)] == kAsciiSpace) return 1;
  if (end >= 2 && multibyte_space_at(text.substr(0, end), end - 2) == 2) return 2;
  if (end >= 3 && multibyte_space_at(text.substr(0, end), end - 3) == 3) return 3;
  return 0;
}

// Go strings.TrimSpace.
std::string_view trim_space(std::string_view text) {
  std::size_t begin = 0;
  while (begin < text.size()) {
    const std::size_t length = space_at(text, begin);
    if (length == 0) break;
    begin += length;
  }
  std::size_t end = text.size();
  while (end > begin) {
    const std::size_t length = space_ending_at(text, end);
    if (length == 0) break;
    end -= length;
  }
  return text.substr(begin, end - begin);
}

// Go strings.Fields, stopping early: returns the number of fields, but at most fields_max + 1
// (more than fields_max is all a caller needs to know to reject the line).
constexpr std::size_t kFieldsMax = 3;
std::size_t split_fields(std::string_view text, std::array<std::string_view, kFieldsMax>& fields,
                         std::size_t fields_max) {
  std::size_t count = 0;
  std::size_t i = 0;
  const std::size_t size = text.size();
  while (true) {
    while (i < size) {
      const std::size_t length = space_at(text, i);
      if (length == 0) break;
      i += length;
    }
    if (i == size) return count;
    const std::size_t start = i;
    while (i < size && space_at(text, i) == 0) ++i;
    if (count == fields_max) return fields_max + 1;
    fields[count++] = text.substr(start, i - start);
  }
}

// ---- Integers, as Go's strconv.ParseInt(text, 10, 64) -------------------------------------------

bool parse_int64(std::string_view text, std::int64_t& out) {
  std::size_t i = 0;
  bool negative = false;
  if (!text.empty() && (text[0] == '+' || text[0] == '-')) {
    negative = text[0] == '-';
    i = 1;
  }
  if (i == text.size()) return false;
  // The magnitude of INT64_MIN is one more than INT64_MAX.
  const std::uint64_t magnitude_max =
      static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) + (negative ? 1 : 0);
  std::uint64_t magnitude = 0;
  for (; i < text.size(); ++i) {
    const unsigned digit = static_cast<unsigned>(byte_at(text, i)) - unsigned{'0'};
    if (digit > 9) return false;
    if (magnitude > (magnitude_max - digit) / 10) return false;
    magnitude = magnitude * 10 + digit;
  }
  if (!negative) {
    out = static_cast<std::int64_t>(magnitude);
  } else if (magnitude == magnitude_max) {
    out = std::numeric_limits<std::int64_t>::min();
  } else {
    out = -static_cast<std::int64_t>(magnitude);
  }
  return true;
}

// Parses one integer field and checks it with `in_bounds`; the two failures have distinct codes.
ProtocolError parse_bounded(std::string_view text, bool (*in_bounds)(std::int64_t),
                            ProtocolError range_error, std::int64_t& out) {
  if (!parse_int64(text, out)) return ProtocolError::kBadInteger;
  if (!in_bounds(out)) return range_error;
  return ProtocolError::kNone;
}

ProtocolError parse_timeout(std::string_view text, std::int64_t& out) {
  return parse_bounded(text, timeout_in_bounds, ProtocolError::kBadTimeout, out);
}
// On the wire a lease, when given, is at least 1 s: the server's default is asked for by leaving
// it out, never by 0.
ProtocolError parse_lease(std::string_view text, std::int64_t& out) {
  const ProtocolError error = parse_bounded(text, lease_in_bounds, ProtocolError::kBadLease, out);
  return error == ProtocolError::kNone && out == 0 ? ProtocolError::kBadLease : error;
}
ProtocolError parse_limit(std::string_view text, std::int64_t& out) {
  return parse_bounded(text, limit_in_bounds, ProtocolError::kBadLimit, out);
}

// ---- Requests -----------------------------------------------------------------------------------

std::string_view strip_cr(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

// The commands whose argument line may be long (Limits::long_line_max): auth's secret and
// the payload of signal and signal-peer.
bool is_long_arg_command(std::string_view command_line) {
  const std::string_view command = strip_cr(command_line);
  return command == "auth" || command == "signal" || command == "signal-peer";
}

// rl wl rr wr rn wn re we rw ww: `read` for the first letter r, then the operation's letter.
std::optional<Command> lookup_read_write(bool read, char operation) {
  switch (operation) {
    case 'l':
      return read ? Command::kReadLock : Command::kWriteLock;
    case 'r':
      return read ? Command::kReadRelease : Command::kWriteRelease;
    case 'n':
      return read ? Command::kReadRenew : Command::kWriteRenew;
    case 'e':
      return read ? Command::kReadEnqueue : Command::kWriteEnqueue;
    case 'w':
      return read ? Command::kReadWait : Command::kWriteWait;
    default:
      return std::nullopt;
  }
}

std::optional<Command> lookup_command(std::string_view text) {
  switch (text.size()) {
    case 1:
      switch (text[0]) {
        case 'l':
          return Command::kLock;
        case 'r':
          return Command::kRelease;
        case 'n':
          return Command::kRenew;
        case 'e':
          return Command::kEnqueue;
        case 'w':
          return Command::kWait;
        default:
          return std::nullopt;
      }
    case 2:
      if (text[0] == 'r' || text[0] == 'w') return lookup_read_write(text[0] == 'r', text[1]);
      if (text[0] != 's') return std::nullopt;
      switch (text[1]) {
        case 'l':
          return Command::kSemLock;
        case 'r':
          return Command::kSemRelease;
        case 'n':
          return Command::kSemRenew;
        case 'e':
          return Command::kSemEnqueue;
        case 'w':
          return Command::kSemWait;
        default:
          return std::nullopt;
      }
    case 4:
      if (text == "ping") return Command::kPing;
      if (text == "auth") return Command::kAuth;
      return std::nullopt;
    case 5:
      if (text == "stats") return Command::kStats;
      if (text == "check") return Command::kCheck;
      return std::nullopt;
    case 6:
      if (text == "listen") return Command::kListen;
      if (text == "signal") return Command::kSignal;
      return std::nullopt;
    case 8:
      if (text == "unlisten") return Command::kUnlisten;
      return std::nullopt;
    case 7:
      if (text == "barrier") return Command::kBarrier;
      if (text == "inspect") return Command::kInspect;
      return std::nullopt;
    case 10:
      if (text == "stable-ref") return Command::kStableRef;
      return std::nullopt;
    case 11:
      if (text == "signal-peer") return Command::kSignalPeer;
      if (text == "lost-notify") return Command::kLostNotify;
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

bool is_valid_key(std::string_view key) { return !key_problem(key).has_value(); }

// Resets `request` in place (rather than assigning a fresh Request) so that a caller reusing
// its ParseResult keeps the string capacity it already has.
void reset_request(Request& request, Command command) {
  request.command = command;
  request.key.clear();
  request.timeout_s = 0;
  request.lease_s = 0;
  request.limit = 1;
  request.token.reset();
  request.secret.clear();
  request.ref.clear();
  request.text.clear();
  request.space = Namespace::kLock;
  request.fence = 0;
  request.enable = false;
}

// The commands with a grammar of their own (no key, or a signal name, a ref or a word on their
// lines). nullopt for the rest, which name a key and take numeric fields.
std::optional<ProtocolError> build_own_grammar(Command command, std::string_view key,
                                               std::string_view arg, Request& request) {
  switch (command) {
    case Command::kPing:
    case Command::kStats:
    case Command::kBarrier:
      return ProtocolError::kNone;
    case Command::kAuth:
      request.secret.assign(trim_space(arg));
      return ProtocolError::kNone;
    case Command::kStableRef:
      // The key line carries the ref; spaces are allowed in it, other control bytes are not.
      if (!is_valid_stable_ref(key)) return ProtocolError::kBadArguments;
      request.ref.assign(key);
      return ProtocolError::kNone;
    case Command::kListen:
    case Command::kUnlisten:
      // dflockd: a bad pattern is `error` for unlisten too (v1.11.1).
      if (!is_valid_key(key) || check_signal_pattern(key) != SignalNameError::kNone) {
        return ProtocolError::kBadKey;
      }
      request.key.assign(key);
      request.text.assign(trim_space(arg));
      return ProtocolError::kNone;
    case Command::kLostNotify: {
      const std::string_view word = trim_space(arg);
      if (word != "on" && word != "off") return ProtocolError::kBadArguments;
      request.enable = word == "on";
      return ProtocolError::kNone;
    }
    case Command::kSignal:
    case Command::kSignalPeer: {
      if (!is_valid_key(key) || check_signal_channel(key) != SignalNameError::kNone) {
        return ProtocolError::kBadKey;
      }
      request.key.assign(key);
      // dflockd trims the line only to see that it is not blank; the payload is the line as it
      // came (its '\r' already gone), spaces at either end included.
      if (is_blank(arg) || arg.size() > signal_payload_max(key)) {
        return ProtocolError::kBadArguments;
      }
      request.text.assign(arg);
      return ProtocolError::kNone;
    }
    default:
      return std::nullopt;
  }
}

// check: <token> [<kind>]; inspect: [<kind>]
ProtocolError parse_check_fields(Command command, std::string_view arg, Request& request) {
  std::array<std::string_view, kFieldsMax> fields;
  const std::size_t token_fields = command == Command::kCheck ? 1 : 0;
  const std::size_t count = split_fields(arg, fields, token_fields + 1);
  if (count < token_fields) return ProtocolError::kEmptyToken;
  if (count > token_fields + 1) return ProtocolError::kBadArguments;
  if (token_fields == 1) request.token = Token::parse(fields[0]);
  if (count == token_fields + 1) {
    const std::optional<Namespace> space = parse_namespace_word(fields[token_fields]);
    if (!space) return ProtocolError::kBadArguments;
    request.space = *space;
  }
  return ProtocolError::kNone;
}

// The argument line of a lock, read-write or semaphore command, by its operation.
ProtocolError parse_operation_fields(Command command, std::string_view arg, Request& request) {
  std::array<std::string_view, kFieldsMax> fields;
  ProtocolError error = ProtocolError::kNone;
  const bool semaphore = command_namespace(command) == Namespace::kSemaphore;
  switch (command_operation(command)) {
    case Operation::kAcquire: {
      // l, rl, wl: <timeout> [<lease>]; sl: <timeout> <limit> [<lease>]
      const std::size_t min = semaphore ? 2 : 1;
      const std::size_t count = split_fields(arg, fields, min + 1);
      if (count < min || count > min + 1) return ProtocolError::kBadArguments;
      if ((error = parse_timeout(fields[0], request.timeout_s)) != ProtocolError::kNone) {
        return error;
      }
      if (semaphore && (error = parse_limit(fields[1], request.limit)) != ProtocolError::kNone) {
        return error;
      }
      if (count == min + 1) return parse_lease(fields[min], request.lease_s);
      return ProtocolError::kNone;
    }
    case Operation::kRelease: {
      // The whole trimmed line is the token, so an inner space makes it one that never matches.
      const std::string_view token = trim_space(arg);
      if (token.empty()) return ProtocolError::kEmptyToken;
      request.token = Token::parse(token);
      return ProtocolError::kNone;
    }
    case Operation::kRenew: {
      const std::size_t count = split_fields(arg, fields, 2);
      if (count == 0) return ProtocolError::kEmptyToken;
      if (count > 2) return ProtocolError::kBadArguments;
      request.token = Token::parse(fields[0]);
      if (count == 2) return parse_lease(fields[1], request.lease_s);
      return ProtocolError::kNone;
    }
    case Operation::kEnqueue: {
      // e, re, we: [<lease>]; se: <limit> [<lease>]
      const std::size_t min = semaphore ? 1 : 0;
      const std::size_t count = split_fields(arg, fields, min + 1);
      if (count < min || count > min + 1) return ProtocolError::kBadArguments;
      if (semaphore && (error = parse_limit(fields[0], request.limit)) != ProtocolError::kNone) {
        return error;
      }
      if (count == min + 1) return parse_lease(fields[min], request.lease_s);
      return ProtocolError::kNone;
    }
    case Operation::kWait: {
      const std::size_t count = split_fields(arg, fields, 1);
      if (count != 1) return ProtocolError::kBadArguments;
      return parse_timeout(fields[0], request.timeout_s);
    }
    case Operation::kOther:
      break;
  }
  TS_ASSERT(false);
}

// Validates the three lines (each already stripped of its '\r') in dflockd's order: command,
// key, then the argument fields left to right. Fills `request` as far as it got.
ProtocolError build_request(std::string_view command_text, std::string_view key,
                            std::string_view arg, Request& request) {
  const std::optional<Command> command = lookup_command(command_text);
  if (!command) {
    reset_request(request, Command::kPing);
    return ProtocolError::kUnknownCommand;
  }
  reset_request(request, *command);
  if (const std::optional<ProtocolError> error = build_own_grammar(*command, key, arg, request)) {
    return *error;
  }
  if (!is_valid_key(key)) return ProtocolError::kBadKey;
  request.key.assign(key);
  if (*command == Command::kCheck || *command == Command::kInspect) {
    return parse_check_fields(*command, arg, request);
  }
  return parse_operation_fields(*command, arg, request);
}

void emit_request(std::string_view command_line, std::string_view key_line,
                  std::string_view arg_line, std::optional<ParseResult>& out) {
  ParseResult& result = out ? *out : out.emplace();
  result.error =
      build_request(strip_cr(command_line), strip_cr(key_line), strip_cr(arg_line), result.request);
}

void emit_error(ProtocolError error, std::optional<ParseResult>& out) {
  ParseResult& result = out ? *out : out.emplace();
  result.error = error;
  reset_request(result.request, Command::kPing);
}

inline const char* find_newline(const char* begin, std::size_t length) {
  return static_cast<const char*>(std::memchr(begin, '\n', length));
}

// A buffer that grew for a long auth line is given back once the request is done, so that many
// idle connections do not each keep 64 KiB.
constexpr std::size_t kBufferKeepCapacity = 1024;

}  // namespace

bool is_blank(std::string_view text) { return trim_space(text).empty(); }

bool closes_connection(ProtocolError error) { return error == ProtocolError::kLineTooLong; }

std::string_view protocol_error_name(ProtocolError error) {
  switch (error) {
    case ProtocolError::kNone:
      return "none";
    case ProtocolError::kUnknownCommand:
      return "unknown_command";
    case ProtocolError::kBadInteger:
      return "bad_integer";
    case ProtocolError::kBadKey:
      return "bad_key";
    case ProtocolError::kBadTimeout:
      return "bad_timeout";
    case ProtocolError::kEmptyToken:
      return "empty_token";
    case ProtocolError::kBadArguments:
      return "bad_arguments";
    case ProtocolError::kBadLease:
      return "bad_lease";
    case ProtocolError::kLineTooLong:
      return "line_too_long";
    case ProtocolError::kBadLimit:
      return "bad_limit";
  }
  TS_ASSERT(false);
}

bool RequestParser::mid_request() const {
  return line_index_ != 0 || line_length_ != 0 || draining_;
}

std::size_t RequestParser::line_cap() const {
  if (line_index_ == 2 &&
      is_long_arg_command(std::string_view(buffer_).substr(0, command_length_))) {
    return limits_.long_line_max;
  }
  return limits_.line_max;
}

void RequestParser::reset() {
  line_index_ = 0;
  line_length_ = 0;
  command_length_ = 0;
  key_length_ = 0;
  draining_ = false;
  if (buffer_.capacity() > kBufferKeepCapacity) {
    std::string().swap(buffer_);
  } else {
    buffer_.clear();
  }
}

std::size_t RequestParser::parse(std::string_view input, std::optional<ParseResult>& out) {
  if (input.empty()) {
    out.reset();
    return 0;
  }
  if (!mid_request()) {
    // Fast path: the whole request is in `input`, so it is validated in place without a copy.
    // Each search is bounded by the line's cap + 1, so a line over its cap falls through to the
    // slow path, which drains it.
    const char* const begin = input.data();
    const char* const end = begin + input.size();
    const std::size_t line_max = limits_.line_max;
    const char* const command_end = find_newline(begin, std::min(input.size(), line_max + 1));
    if (command_end != nullptr) {
      const char* const key_begin = command_end + 1;
      const char* const key_end = find_newline(
          key_begin, std::min(static_cast<std::size_t>(end - key_begin), line_max + 1));
      if (key_end != nullptr) {
        const std::string_view command_line(begin, static_cast<std::size_t>(command_end - begin));
        const char* const arg_begin = key_end + 1;
        const std::size_t arg_cap =
            is_long_arg_command(command_line) ? limits_.long_line_max : line_max;
        const char* const arg_end = find_newline(
            arg_begin, std::min(static_cast<std::size_t>(end - arg_begin), arg_cap + 1));
        if (arg_end != nullptr) {
          emit_request(command_line,
                       std::string_view(key_begin, static_cast<std::size_t>(key_end - key_begin)),
                       std::string_view(arg_begin, static_cast<std::size_t>(arg_end - arg_begin)),
                       out);
          return static_cast<std::size_t>(arg_end + 1 - begin);
        }
      }
    }
  }
  return parse_buffered(input, out);
}

// The slow path: the request spans chunks (or has a line over its cap). Completed lines are kept
// back to back in buffer_ (no separators), the current line after them.
std::size_t RequestParser::parse_buffered(std::string_view input, std::optional<ParseResult>& out) {
  std::size_t consumed = 0;
  while (consumed < input.size()) {
    const char* const chunk_begin = input.data() + consumed;
    const std::size_t available = input.size() - consumed;
    const char* const newline = find_newline(chunk_begin, available);
    const std::size_t chunk =
        newline != nullptr ? static_cast<std::size_t>(newline - chunk_begin) : available;

    if (!draining_) {
      // Invariant while not draining: line_length_ <= line_cap().
      const std::size_t cap = line_cap();
      if (chunk > cap - line_length_) {
        // The line is over its cap: keep nothing more of this request, only look for its end.
        draining_ = true;
        buffer_.clear();
      } else {
        buffer_.append(chunk_begin, chunk);
        line_length_ += chunk;
      }
    }
    consumed += chunk;
    if (newline == nullptr) break;
    consumed += 1;  // the '\n'

    if (draining_) {
      reset();
      emit_error(ProtocolError::kLineTooLong, out);
      return consumed;
    }
    if (line_index_ == 0) {
      command_length_ = line_length_;
    } else if (line_index_ == 1) {
      key_length_ = line_length_;
    } else {
      const std::string_view lines(buffer_);
      emit_request(lines.substr(0, command_length_), lines.substr(command_length_, key_length_),
                   lines.substr(command_length_ + key_length_), out);
      reset();
      return consumed;
    }
    ++line_index_;
    line_length_ = 0;
  }
  out.reset();
  return consumed;
}

std::optional<std::string_view> key_problem(std::string_view key) {
  if (key.empty()) return "key is empty";
  if (key.size() > kKeyMaxBytes) return "key is longer than 256 bytes";
  if (key.find_first_of(" \t\r\n") != std::string_view::npos) {
    return "key contains whitespace (a space, tab, CR or LF)";
  }
  return std::nullopt;
}

namespace {

std::optional<std::int64_t> parse_count(std::string_view text) {
  std::int64_t value = 0;
  if (text.empty() || text.front() == '-') return std::nullopt;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::optional<Status> parse_status(std::string_view word) {
  for (int i = 0; i < static_cast<int>(Status::kParked); ++i) {
    const auto status = static_cast<Status>(i);
    if (status_name(status) == word) return status;
  }
  return std::nullopt;
}

}  // namespace

std::optional<Reply> decode_reply(Command command, std::string_view line) {
  const std::size_t space = line.find(' ');
  const std::string_view word = line.substr(0, space);
  const std::string_view rest =
      space == std::string_view::npos ? std::string_view() : line.substr(space + 1);
  const std::optional<Status> status = parse_status(word);
  if (!status) return std::nullopt;
  if (space == std::string_view::npos) {
    // A status alone: never the success shape of a command whose success carries fields.
    const Operation operation = command_operation(command);
    const bool grant = operation == Operation::kAcquire || operation == Operation::kWait;
    const bool fields_on_ok = grant || operation == Operation::kRenew ||
                              command == Command::kStats || command == Command::kSignal ||
                              command == Command::kSignalPeer || command == Command::kCheck ||
                              command == Command::kInspect || command == Command::kForceRelease;
    if (*status == Status::kOk && fields_on_ok) return std::nullopt;
    if (*status == Status::kAcquired) return std::nullopt;
    return Reply::of(*status);
  }
  if (*status == Status::kErrorNotLeader) return Reply::not_leader(std::string(rest));
  if (*status == Status::kOk && (command == Command::kStats || command == Command::kInspect)) {
    if (rest.empty()) return std::nullopt;
    return Reply::stats(std::string(rest));
  }
  if (*status == Status::kOk &&
      (command_operation(command) == Operation::kRenew || command == Command::kCheck)) {
    const std::optional<std::int64_t> ttl = parse_count(rest);
    if (!ttl) return std::nullopt;
    return Reply::renewed(*ttl);
  }
  if (*status == Status::kOk && (command == Command::kSignal || command == Command::kSignalPeer ||
                                 command == Command::kForceRelease)) {
    const std::optional<std::int64_t> count = parse_count(rest);
    if (!count) return std::nullopt;
    return Reply::delivered(*count);
  }
  const Operation operation = command_operation(command);
  const bool two_phase = operation == Operation::kEnqueue;
  const bool grant = operation == Operation::kAcquire || operation == Operation::kWait;
  if ((*status == Status::kOk && grant) || (*status == Status::kAcquired && two_phase)) {
    const std::size_t second = rest.find(' ');
    if (second == std::string_view::npos) return std::nullopt;
    const std::optional<Token> token = Token::parse(rest.substr(0, second));
    const std::optional<std::int64_t> lease = parse_count(rest.substr(second + 1));
    if (!token || !lease) return std::nullopt;
    return Reply::granted(*status, *token, *lease);
  }
  return std::nullopt;
}

}  // namespace turnstile::core
