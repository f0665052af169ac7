#include "net/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <string>

namespace turnstile::net {
namespace {
std::atomic<bool> g_debug{false};

const char* level_name(LogLevel level) {
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
}  // namespace

void set_debug_logging(bool enabled) { g_debug.store(enabled, std::memory_order_relaxed); }
bool debug_logging() { return g_debug.load(std::memory_order_relaxed); }

void log_line(LogLevel level, std::string_view message) {
  if (level == LogLevel::kDebug && !debug_logging()) return;
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  tm utc{};
  gmtime_r(&ts.tv_sec, &utc);
  char stamp[80];
  std::snprintf(stamp, sizeof stamp, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                ts.tv_nsec / 1'000'000);
  std::string line;
  line.reserve(message.size() + 64);
  line.append(stamp).append(" ").append(level_name(level)).append(" ");
  for (char c : message) line.push_back(c == '\n' ? ' ' : c);  // one event, one line
  line.push_back('\n');
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

void logf(LogLevel level, const char* format, ...) {
  if (level == LogLevel::kDebug && !debug_logging()) return;
  char buffer[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof buffer, format, args);
  va_end(args);
  log_line(level, buffer);
}

}  // namespace turnstile::net
