// One line per event on stderr. Lines from different threads never interleave (each is written
// with a single write(2)).
//
// Two formats (--log-format, docs/configuration.md):
//   text  `<UTC time> <level> <message>`, then ` event=<name> key=value ...` for an event;
//         a value with a blank, a quote, a backslash, '=' or a control character is quoted,
//         with backslash escapes (quote, backslash, n, r, t, xHH).
//   json  one object per line: {"ts":"<UTC time>","level":"info","event":"<name>","msg":"...",
//         "key":value,...}; strings are JSON-escaped as core/json_text.h writes them (invalid UTF-8
//         becomes U+FFFD), integers and booleans are bare.
// Lines below the minimum level (--log-level, default info; --debug = debug) are not written.
// The event names and their fields are a stable interface: docs/operations.md lists them.
#pragma once

#include <chrono>
#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace turnstile::net {

enum class LogLevel { kDebug, kInfo, kWarn, kError };
enum class LogFormat { kText, kJson };

// Set once by main() before any thread starts; read by every thread.
void set_log_level(LogLevel minimum);
LogLevel log_level();
void set_log_format(LogFormat format);
LogFormat log_format();
bool log_enabled(LogLevel level);

// Kept for older callers: true = level debug, false = level info.
void set_debug_logging(bool enabled);
bool debug_logging();

// "debug", "info", "warn" (or "warning"), "error"; "text", "json". nullopt for anything else.
std::optional<LogLevel> parse_log_level(std::string_view text);
std::optional<LogFormat> parse_log_format(std::string_view text);
std::string_view log_level_name(LogLevel level);

// One key and its value: text (quoted in JSON), or a number or boolean (bare in JSON).
struct LogField {
  LogField(std::string_view field_key, std::string_view text)
      : key(field_key), value(text), bare(false) {}
  LogField(std::string_view field_key, const char* text)
      : key(field_key), value(text != nullptr ? text : ""), bare(false) {}
  LogField(std::string_view field_key, const std::string& text)
      : key(field_key), value(text), bare(false) {}
  LogField(std::string_view field_key, bool flag)
      : key(field_key), value(flag ? "true" : "false"), bare(true) {}
  template <std::integral Integer>
  requires(!std::same_as<Integer, bool> && !std::same_as<Integer, char>)
      LogField(std::string_view field_key, Integer number)
      : key(field_key), value(std::to_string(number)), bare(true) {}

  std::string_view key;  // [a-z0-9_], never "ts", "level", "event" or "msg"
  std::string value;
  bool bare;
};

// The whole line (with its '\n') for an event; `event` empty for a plain message. Pure, for tests.
std::string render_log_line(LogFormat format, std::string_view timestamp, LogLevel level,
                            std::string_view event, std::string_view message,
                            std::span<const LogField> fields);

// The current UTC time as written in lines: 2026-01-31T12:34:56.789Z.
std::string log_timestamp();

// A plain line (no event name).
void log_line(LogLevel level, std::string_view message);

// printf-style convenience for a plain line.
void logf(LogLevel level, const char* format, ...) __attribute__((format(printf, 2, 3)));

// An event with stable fields; `message` is the human sentence the text format shows first.
void log_event(LogLevel level, std::string_view event, std::string_view message,
               std::initializer_list<LogField> fields);

// At most one line per `interval` for a noisy event (auth failures): admit() says whether this
// occurrence gets its line, and how many were suppressed since the last line that was written.
// Safe from any thread.
class LogRateLimit {
 public:
  explicit LogRateLimit(std::chrono::nanoseconds interval) : interval_ns_(interval.count()) {}
  // `now_ns`: a monotonic reading. nullopt: suppress this one (it is counted).
  std::optional<std::uint64_t> admit(std::int64_t now_ns);

 private:
  std::mutex mutex_;
  const std::int64_t interval_ns_;
  std::optional<std::int64_t> last_ns_;
  std::uint64_t suppressed_ = 0;
};

// The limit of the auth_failure event, shared by the TCP and HTTP listeners: one line per 10 s.
LogRateLimit& auth_failure_log_limit();

}  // namespace turnstile::net
