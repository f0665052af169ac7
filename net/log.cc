#include "net/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <string>

namespace turnstile::net {
namespace {
std::atomic<LogLevel> g_level{LogLevel::kInfo};
std::atomic<LogFormat> g_format{LogFormat::kText};

constexpr char kHex[] = "0123456789abcdef";

// The length of the valid UTF-8 sequence at the start of `text`, 0 when it is not one.
std::size_t utf8_sequence(std::string_view text) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(0);
  std::size_t length = 0;
  unsigned min = 0;
  unsigned code = 0;
  if (lead < 0x80) return 1;
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2;
    code = lead & 0x1fU;
    min = 0x80;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    code = lead & 0x0fU;
    min = 0x800;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    code = lead & 0x07U;
    min = 0x10000;
  } else {
    return 0;
  }
  if (text.size() < length) return 0;
  for (std::size_t i = 1; i < length; ++i) {
    if ((byte(i) & 0xc0U) != 0x80) return 0;
    code = (code << 6) | (byte(i) & 0x3fU);
  }
  if (code < min || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return 0;
  return length;
}

// A JSON string, quotes included.
void append_json_string(std::string& out, std::string_view text) {
  out.push_back('"');
  while (!text.empty()) {
    const auto c = static_cast<unsigned char>(text.front());
    if (c >= 0x80) {
      const std::size_t length = utf8_sequence(text);
      if (length == 0) {
        out.append("\\ufffd");
        text.remove_prefix(1);
      } else {
        out.append(text.substr(0, length));
        text.remove_prefix(length);
      }
      continue;
    }
    text.remove_prefix(1);
    switch (c) {
      case '"':
        out.append("\\\"");
        break;
      case '\\':
        out.append("\\\\");
        break;
      case '\n':
        out.append("\\n");
        break;
      case '\r':
        out.append("\\r");
        break;
      case '\t':
        out.append("\\t");
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out.append("\\u00");
          out.push_back(kHex[c >> 4]);
          out.push_back(kHex[c & 0xf]);
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out.push_back('"');
}

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
