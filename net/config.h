// turnstiled's configuration: flags, then TURNSTILE_<NAME> environment variables, then
// DFLOCKD_<NAME> (so an existing dflockd deployment can switch binaries), then defaults
// (reference section 4, with the differences of compatibility.md section 2).
//
// Thread affinity: parsed once on the main thread before anything starts; read-only after.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace turnstile::net {

struct Config {
  std::string host = "127.0.0.1";
  int port = 6388;                          // 0..65535; 0 = pick an ephemeral port
  int threads = 0;                          // >= 1 after parsing (default: number of cores)
  std::int64_t idle_poll_us = 100;          // 0..10000; 0 = sleep at once (net/idle_poll.h)
  bool pin_threads = false;                 // shard i runs on the i-th allowed CPU only
  bool huge_pages = true;                   // heap in transparent huge pages (net/huge_pages.h)
  std::int64_t default_lease_ttl_s = 33;    // > 0
  std::int64_t lease_sweep_interval_s = 1;  // > 0; bounds timer slack (expiry is event-driven)
  std::int64_t gc_interval_s = 5;           // > 0; accepted for compatibility
  std::int64_t gc_max_idle_s = 60;          // >= 0
  std::int64_t max_locks = 1'048'576;       // > 0, across all shards, exact
  std::int64_t max_waiters = 0;             // >= 0 per key; 0 = unlimited
  std::int64_t max_connections = 0;         // >= 0; 0 = unlimited
  std::int64_t max_connections_per_ip = 0;  // >= 0; 0 = unlimited
  std::int64_t read_timeout_s = 23;         // > 0; time for one request to arrive
  std::int64_t idle_timeout_s = 0;          // >= 0; 0 = never (turnstile addition)
  std::int64_t write_timeout_s = 5;         // >= 0; 0 = no write deadline
  std::int64_t shutdown_timeout_s = 30;     // >= 0; 0 = wait forever
  bool auto_release_on_disconnect = true;
  std::string tls_cert;  // both or neither
  std::string tls_key;
  std::optional<std::string> auth_token;  // resolved secret (trimmed, non-empty, no CR/LF)
  std::string fence_state_file;           // the fence journal (docs/fence-journal.md); empty = off
  // The HTTP API (docs/http-api.md). http_port 0 = off; it must differ from port.
  int http_port = 0;                              // 0..65535
  std::string http_host;                          // empty after parsing only if unset: = host
  std::int64_t http_session_idle_timeout_s = 20;  // >= 0; sessions idle 2x this are reaped
  std::int64_t http_max_sessions = 0;             // >= 0; 0 = unlimited
  std::int64_t http_max_sessions_per_ip = 0;      // >= 0; 0 = unlimited
  std::int64_t http_max_connections_per_ip = 0;   // >= 0; 0 = unlimited
  std::int64_t http_rate_limit_per_ip = 0;        // requests per second per IP; 0 = off
  std::int64_t http_rate_limit_burst = 0;         // 0 = the rate
  std::string http_cors_allowed_origins;          // comma list; "*" = any; empty = no CORS
  bool debug = false;

  // Hooks that exist for the test suite only (tests/integration, tests/net), set by the
  // --test-* flags. They are flag only (no environment variable, so a stray variable can never
  // change a production server) and hidden from --help.
  struct TestHooks {
    // --test-wall-clock-offset-s: seconds added to the wall clock that seeds the fence counter,
    // so a test can restart the daemon "with the clock set back".
    std::int64_t wall_clock_offset_s = 0;
    // --test-fence-range: the journal's reservation range (0: the production 2^22), so that a
    // test reaches running reservations after a few grants.
    std::int64_t fence_range = 0;
    // --test-fence-write-failures: how many reservation writes after start-up fail as if fsync
    // had returned EIO.
    std::int64_t fence_write_failures = 0;
  };
  TestHooks test;
};

// What parsing decided: run with a Config, or exit (help, version, or a one-line error).
struct ConfigExit {
  int code = 0;         // 0 for --help/--version, 2 for a bad flag or value
  std::string message;  // printed to stdout (code 0) or stderr (code 2); no trailing newline
};

using ConfigResult = std::variant<Config, ConfigExit>;

// Reads an environment variable; nullopt when unset. Injected so tests control the environment.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

// Parses argv and the environment. `args` are the arguments after the program name
// (argv[1..argc)). `cores` is the default for --threads (clamped to 1..1024).
ConfigResult parse_config(const std::vector<std::string>& args, const EnvLookup& env, int cores);

// The process environment (getenv).
EnvLookup process_environment();

// Start-up warnings (reference section 4 "Other"): non-loopback bind with unbounded caps. One
// line per cap, without a program-name prefix; the caller logs them at warning level.
std::vector<std::string> config_warnings(const Config& config);

std::string version_string();

}  // namespace turnstile::net
