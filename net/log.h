// One line per event on stderr: `<UTC time> <level> <message>`. Lines from different threads
// never interleave (each is written with a single write(2)). Debug lines only with --debug.
#pragma once

#include <string_view>

namespace turnstile::net {

enum class LogLevel { kDebug, kInfo, kWarn, kError };

void set_debug_logging(bool enabled);
bool debug_logging();

void log_line(LogLevel level, std::string_view message);

// printf-style convenience.
void logf(LogLevel level, const char* format, ...) __attribute__((format(printf, 2, 3)));

}  // namespace turnstile::net
