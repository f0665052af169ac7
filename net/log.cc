#include "net/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <string>

#include "core/json_text.h"

namespace turnstile::net {
namespace {
using core::append_json_string;
std::atomic<LogLevel> g_level{LogLevel::kInfo};
std::atomic<LogFormat> g_format{LogFormat::kText};

constexpr char kHex[] = "0123456789abcdef";

// A text-format value: bare when it is a plain word, else quoted with escapes.
void append_text_value(std::string& out, std::string_view value) {
  bool plain = !value.empty();
  for (char c : value) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte <= 0x20 || byte == 0x7f || c == '"' || c == '=' || c == '\\') plain = false;
  }
  if (plain) {
    out.append(value);
    return;
  }
  out.push_back('"');
  for (char c : value) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (c == '\n') {
      out.append("\\n");
    } else if (c == '\r') {
      out.append("\\r");
    } else if (c == '\t') {
      out.append("\\t");
    } else if (byte < 0x20 || byte == 0x7f) {
      out.append("\\x");
      out.push_back(kHex[byte >> 4]);
      out.push_back(kHex[byte & 0xf]);
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
}

void write_line(const std::string& line) {
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}
}  // namespace

void set_log_level(LogLevel minimum) { g_level.store(minimum, std::memory_order_relaxed); }
LogLevel log_level() { return g_level.load(std::memory_order_relaxed); }
void set_log_format(LogFormat format) { g_format.store(format, std::memory_order_relaxed); }
LogFormat log_format() { return g_format.load(std::memory_order_relaxed); }
bool log_enabled(LogLevel level) { return level >= log_level(); }

void set_debug_logging(bool enabled) {
  set_log_level(enabled ? LogLevel::kDebug : LogLevel::kInfo);
}
bool debug_logging() { return log_enabled(LogLevel::kDebug); }

std::optional<LogLevel> parse_log_level(std::string_view text) {
  if (text == "debug") return LogLevel::kDebug;
  if (text == "info") return LogLevel::kInfo;
  if (text == "warn" || text == "warning") return LogLevel::kWarn;
  if (text == "error") return LogLevel::kError;
  return std::nullopt;
}

std::optional<LogFormat> parse_log_format(std::string_view text) {
  if (text == "text") return LogFormat::kText;
  if (text == "json") return LogFormat::kJson;
  return std::nullopt;
}

std::string_view log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
  }
  return "?";
}

std::string render_log_line(LogFormat format, std::string_view timestamp, LogLevel level,
                            std::string_view event, std::string_view message,
                            std::span<const LogField> fields) {
  std::string line;
  line.reserve(message.size() + 64 + fields.size() * 24);
  if (format == LogFormat::kJson) {
    line.append("{\"ts\":");
    append_json_string(line, timestamp);
    line.append(",\"level\":");
    append_json_string(line, log_level_name(level));
    if (!event.empty()) {
      line.append(",\"event\":");
      append_json_string(line, event);
    }
    line.append(",\"msg\":");
    append_json_string(line, message);
    for (const LogField& field : fields) {
      line.push_back(',');
      append_json_string(line, field.key);
      line.push_back(':');
      if (field.bare) {
        line.append(field.value);
      } else {
        append_json_string(line, field.value);
      }
    }
    line.append("}\n");
    return line;
  }
  line.append(timestamp).append(" ").append(log_level_name(level));
  if (!message.empty()) line.append(" ");
  for (char c : message) line.push_back(c == '\n' || c == '\r' ? ' ' : c);  // one event, one line
  if (!event.empty()) {
    line.append(" event=");
    append_text_value(line, event);
  }
  for (const LogField& field : fields) {
    line.append(" ").append(field.key).append("=");
    append_text_value(line, field.value);
  }
  line.push_back('\n');
  return line;
}

std::string log_timestamp() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  tm utc{};
  gmtime_r(&ts.tv_sec, &utc);
  char stamp[80];
  std::snprintf(stamp, sizeof stamp, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                ts.tv_nsec / 1'000'000);
  return stamp;
}

void log_line(LogLevel level, std::string_view message) {
  if (!log_enabled(level)) return;
  write_line(render_log_line(log_format(), log_timestamp(), level, "", message, {}));
}

void logf(LogLevel level, const char* format, ...) {
  if (!log_enabled(level)) return;
  char buffer[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof buffer, format, args);
  va_end(args);
  log_line(level, buffer);
}

void log_event(LogLevel level, std::string_view event, std::string_view message,
               std::initializer_list<LogField> fields) {
  if (!log_enabled(level)) return;
  write_line(render_log_line(log_format(), log_timestamp(), level, event, message,
                             std::span<const LogField>(fields.begin(), fields.size())));
}

std::optional<std::uint64_t> LogRateLimit::admit(std::int64_t now_ns) {
  std::lock_guard lock(mutex_);
  if (last_ns_ && now_ns - *last_ns_ < interval_ns_) {
    ++suppressed_;
    return std::nullopt;
  }
  last_ns_ = now_ns;
  const std::uint64_t suppressed = suppressed_;
  suppressed_ = 0;
  return suppressed;
}

LogRateLimit& auth_failure_log_limit() {
  static LogRateLimit limit(std::chrono::seconds(10));
  return limit;
}

}  // namespace turnstile::net
