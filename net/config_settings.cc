// The settings table of turnstiled (net/config.h): every flag with its environment name, kind,
// bounds and field of Config, in --help order; and the --help text, written from it.
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>

#include "net/config_internal.h"

namespace turnstile::net::config_internal {
namespace {

// The largest seconds value whose nanosecond count fits in an int64 (reference 1.3, edge 23).
constexpr std::int64_t kMaxSeconds = 9'223'372'036;
// --test-wall-clock-offset-s: a century either way is more than any test needs, and keeps the
// offset in nanoseconds far from overflowing.
constexpr std::int64_t kMaxWallClockOffsetSeconds = 3'155'760'000;
// --test-monotonic-offset-s: up to a year ahead (a machine's uptime); never back, so that the
// shifted clock stays above zero.
constexpr std::int64_t kMaxMonotonicOffsetSeconds = 31'557'600;
// --test-fence-range: at most the production range, 2^22.
constexpr std::int64_t kMaxTestFenceRange = std::int64_t{1} << 22;

// raft takes the snapshot threshold and trailing count as `unsigned`.
constexpr std::int64_t kMaxRaftCount = std::numeric_limits<std::uint32_t>::max();

// Order is --help order; names, env names and bounds are reference section 4 plus the
// turnstile additions (--threads, --idle-poll-us, --pin-threads, --huge-pages, --idle-timeout).
const Setting kSettings[] = {
    {"host", "HOST", Kind::kText, "address", 0, 0, &Config::host,
     "address to listen on (IPv4, IPv6 or a host name)"},
    {"port", "PORT", Kind::kInteger, "int", 0, 65535, &Config::port,
     "TCP port to listen on; 0 picks an ephemeral port"},
    {"threads", "THREADS", Kind::kInteger, "int", 1, kMaxThreads, &Config::threads,
     "event-loop threads the key space is sharded over"},
    {"idle-poll-us", "IDLE_POLL_US", Kind::kInteger, "microseconds", 0, 10'000,
     &Config::idle_poll_us,
     "longest a thread keeps polling for work before it sleeps (adaptive); 0 = never polls"},
    {"pin-threads", "PIN_THREADS", Kind::kBool, "", 0, 0, &Config::pin_threads,
     "run each thread on one CPU of those allowed (thread i on the i-th, round robin)"},
    {"huge-pages", "HUGE_PAGES", Kind::kBool, "", 0, 0, &Config::huge_pages,
     "keep the heap in transparent huge pages (restarts once with GLIBC_TUNABLES set)"},
    {"default-lease-ttl", "DEFAULT_LEASE_TTL_S", Kind::kInteger, "seconds", 1, kMaxSeconds,
     &Config::default_lease_ttl_s, "lease given to an acquire that names none"},
    {"lease-sweep-interval", "LEASE_SWEEP_INTERVAL_S", Kind::kInteger, "seconds", 1, kMaxSeconds,
     &Config::lease_sweep_interval_s,
     "accepted for compatibility; bounds timer slack (expiry is event-driven)"},
    {"gc-interval", "GC_INTERVAL_S", Kind::kInteger, "seconds", 1, kMaxSeconds,
     &Config::gc_interval_s, "accepted for compatibility; collection is event-driven"},
    {"gc-max-idle", "GC_MAX_IDLE_S", Kind::kInteger, "seconds", 0, kMaxSeconds,
     &Config::gc_max_idle_s, "an unused key is collected once idle longer than this; 0 = at once"},
    {"lock-delay", "LOCK_DELAY_S", Kind::kInteger, "seconds", 0, 86'400, &Config::lock_delay_s,
     "after a holder leaves without releasing (lease expired, disconnected), its key grants "
     "nothing for this long; 0 = off"},
    {"max-locks", "MAX_LOCKS", Kind::kInteger, "int", 1, kInt64Max, &Config::max_locks,
     "most keys (locks and semaphores) held in memory at once, across all threads"},
    {"max-waiters", "MAX_WAITERS", Kind::kInteger, "int", 0, kInt64Max, &Config::max_waiters,
     "most queued waiters per key; 0 = unlimited"},
    {"max-subscriptions", "MAX_SUBSCRIPTIONS", Kind::kInteger, "int", 0, kInt64Max,
     &Config::max_subscriptions, "most signal subscriptions per connection; 0 = unlimited"},
    {"max-subscriptions-total", "MAX_SUBSCRIPTIONS_TOTAL", Kind::kInteger, "int", 0, kInt64Max,
     &Config::max_subscriptions_total,
     "most signal subscriptions of all connections together; 0 = unlimited"},
    {"signal-queue", "SIGNAL_QUEUE", Kind::kInteger, "frames", 1, 65536, &Config::signal_queue,
     "signal frames a listener may leave unread before it is closed as a slow consumer"},
    {"max-connections", "MAX_CONNECTIONS", Kind::kInteger, "int", 0, kInt64Max,
     &Config::max_connections, "most open connections; 0 = unlimited"},
    {"max-connections-per-ip", "MAX_CONNECTIONS_PER_IP", Kind::kInteger, "int", 0, kInt64Max,
     &Config::max_connections_per_ip, "most open connections from one IP address; 0 = unlimited"},
    {"read-timeout", "READ_TIMEOUT_S", Kind::kInteger, "seconds", 1, kMaxSeconds,
     &Config::read_timeout_s, "time for a request to arrive once its first byte is in"},
    {"idle-timeout", "IDLE_TIMEOUT_S", Kind::kInteger, "seconds", 0, kMaxSeconds,
     &Config::idle_timeout_s, "close a connection idle between requests this long; 0 = never"},
    {"write-timeout", "WRITE_TIMEOUT_S", Kind::kInteger, "seconds", 0, kMaxSeconds,
     &Config::write_timeout_s, "time for a reply to be written; 0 = no deadline"},
    {"shutdown-timeout", "SHUTDOWN_TIMEOUT_S", Kind::kInteger, "seconds", 0, kMaxSeconds,
     &Config::shutdown_timeout_s, "how long a graceful shutdown waits; 0 = forever"},
    {"auto-release-on-disconnect", "AUTO_RELEASE_ON_DISCONNECT", Kind::kBool, "", 0, 0,
     &Config::auto_release_on_disconnect, "release a connection's locks when it closes"},
    {"tls-cert", "TLS_CERT", Kind::kText, "path", 0, 0, &Config::tls_cert,
     "TLS certificate (PEM); needs --tls-key"},
    {"tls-key", "TLS_KEY", Kind::kText, "path", 0, 0, &Config::tls_key,
     "TLS private key (PEM); needs --tls-cert"},
    {"auth-token", "AUTH_TOKEN", Kind::kSecret, "token", 0, 0, std::monostate{},
     "shared secret clients must send with `auth` (visible in ps; prefer the file)"},
    {"auth-token-file", "AUTH_TOKEN_FILE", Kind::kSecretFile, "path", 0, 0, std::monostate{},
     "file holding the shared secret on one line"},
    {"fence-state-file", "FENCE_STATE_FILE", Kind::kText, "path", 0, 0, &Config::fence_state_file,
     "fence journal: fences keep increasing across restarts and clock steps; empty = off"},
    {"http-port", "HTTP_PORT", Kind::kInteger, "int", 0, 65535, &Config::http_port,
     "HTTP API port; 0 = HTTP off; must differ from --port"},
    {"http-host", "HTTP_HOST", Kind::kText, "address", 0, 0, &Config::http_host,
     "address the HTTP API listens on (default: --host)"},
    {"http-session-idle-timeout", "HTTP_SESSION_IDLE_S", Kind::kInteger, "seconds", 0, kMaxSeconds,
     &Config::http_session_idle_timeout_s,
     "HTTP sessions idle twice this long are reaped; 0 = never"},
    {"http-max-sessions", "HTTP_MAX_SESSIONS", Kind::kInteger, "int", 0, kInt64Max,
     &Config::http_max_sessions, "most live HTTP sessions; 0 = unlimited"},
    {"http-max-sessions-per-ip", "HTTP_MAX_SESSIONS_PER_IP", Kind::kInteger, "int", 0, kInt64Max,
     &Config::http_max_sessions_per_ip, "most live HTTP sessions per IP address; 0 = unlimited"},
    {"http-max-connections-per-ip", "HTTP_MAX_CONNECTIONS_PER_IP", Kind::kInteger, "int", 0,
     kInt64Max, &Config::http_max_connections_per_ip,
     "most open HTTP connections per IP address; 0 = unlimited"},
    {"http-rate-limit-per-ip", "HTTP_RATE_LIMIT_PER_IP", Kind::kInteger, "per-second", 0,
     1'000'000'000, &Config::http_rate_limit_per_ip,
     "HTTP requests per second per IP address (token bucket); 0 = unlimited"},
    {"http-rate-limit-burst", "HTTP_RATE_LIMIT_BURST", Kind::kInteger, "int", 0, 1'000'000'000,
     &Config::http_rate_limit_burst, "token bucket size of the HTTP rate limit; 0 = the rate"},
    {"http-cors-allowed-origins", "HTTP_CORS_ALLOWED_ORIGINS", Kind::kText, "origins", 0, 0,
     &Config::http_cors_allowed_origins, "comma list of origins allowed by CORS; * = any"},
    {"http-sse-ping-interval", "HTTP_SSE_PING_S", Kind::kInteger, "seconds", 1, 3600,
     &Config::http_sse_ping_interval_s, "a `:ping` comment on HTTP signal streams this often"},
    {"debug", "DEBUG", Kind::kBool, "", 0, 0, &Config::debug,
     "log at debug level (the same as --log-level debug)"},
    {"log-format", "LOG_FORMAT", Kind::kText, "text|json", 0, 0, &Config::log_format,
     "log lines on stderr as text, or as one JSON object per line"},
    {"log-level", "LOG_LEVEL", Kind::kText, "debug|info|warn|error", 0, 0, &Config::log_level,
     "the least important log lines written"},
    // Cluster mode (Config::Cluster, docs/cluster.md "Flags"): --raft-dir turns it on, and every
    // other cluster flag needs it.
    {"raft-dir", "RAFT_DIR", Kind::kText, "dir", 0, 0, &Config::Cluster::raft_dir,
     "turns cluster mode on: raft's data directory (log, snapshots); empty = single node"},
    {"node-id", "NODE_ID", Kind::kInteger, "id", 1, kInt64Max, &Config::Cluster::node_id,
     "cluster mode: this node's raft id; required", /*hidden=*/false, /*cluster=*/true},
    {"raft-addr", "RAFT_ADDR", Kind::kAddress, "host:port", 0, 0, &Config::Cluster::raft_addr,
     "cluster mode: where this node listens for raft traffic, as its peers reach it; required",
     /*hidden=*/false, /*cluster=*/true},
    {"cluster-peers", "CLUSTER_PEERS", Kind::kPeers, "id=raftHost:port@clientHost:port,...", 0, 0,
     std::monostate{}, "cluster mode: every voter of the initial cluster, this node included",
     /*hidden=*/false, /*cluster=*/true},
    {"advertise-addr", "ADVERTISE_ADDR", Kind::kAddress, "host:port", 0, 0,
     &Config::Cluster::advertise_addr,
     "cluster mode: the client address other nodes send clients to (error_not_leader)",
     /*hidden=*/false, /*cluster=*/true},
    {"cluster-bootstrap", "CLUSTER_BOOTSTRAP", Kind::kBool, "", 0, 0, &Config::Cluster::bootstrap,
     "cluster mode: write --cluster-peers as the initial configuration into an empty --raft-dir",
     /*hidden=*/false, /*cluster=*/true},
    {"orphan-ttl", "ORPHAN_TTL_S", Kind::kInteger, "seconds", 0, kMaxSeconds,
     &Config::Cluster::orphan_ttl_s,
     "how long the holders and waiters of a session with a stable ref are kept after it closes, "
     "for the ref to take back; 0 = off (cluster mode: the leader's value applies)",
     /*hidden=*/false, /*cluster=*/false},
    {"cluster-secret", "CLUSTER_SECRET", Kind::kSecret, "secret", 0, 0, std::monostate{},
     "cluster mode: shared secret the nodes authenticate each other with; required (visible in "
     "ps; prefer the file)",
     /*hidden=*/false, /*cluster=*/true},
    {"cluster-secret-file", "CLUSTER_SECRET_FILE", Kind::kSecretFile, "path", 0, 0,
     std::monostate{}, "cluster mode: file holding the cluster secret on one line",
     /*hidden=*/false, /*cluster=*/true},
    {"admin-token", "ADMIN_TOKEN", Kind::kSecret, "token", 0, 0, std::monostate{},
     "token of the HTTP admin routes (force-release; in cluster mode also membership changes); "
     "unset = admin routes off (visible in ps; prefer the file)",
     /*hidden=*/false, /*cluster=*/false},
    {"admin-token-file", "ADMIN_TOKEN_FILE", Kind::kSecretFile, "path", 0, 0, std::monostate{},
     "file holding the admin token on one line", /*hidden=*/false,
     /*cluster=*/false},
    {"raft-election-timeout-ms", "RAFT_ELECTION_TIMEOUT_MS", Kind::kInteger, "milliseconds", 100,
     60'000, &Config::Cluster::election_timeout_ms, "cluster mode: raft's election timeout",
     /*hidden=*/false, /*cluster=*/true},
    {"raft-heartbeat-timeout-ms", "RAFT_HEARTBEAT_TIMEOUT_MS", Kind::kInteger, "milliseconds", 10,
     10'000, &Config::Cluster::heartbeat_timeout_ms,
     "cluster mode: raft's heartbeat timeout; less than the election timeout", /*hidden=*/false,
     /*cluster=*/true},
    {"raft-snapshot-threshold", "RAFT_SNAPSHOT_THRESHOLD", Kind::kInteger, "entries", 16,
     kMaxRaftCount, &Config::Cluster::snapshot_threshold,
     "cluster mode: entries applied between two snapshots", /*hidden=*/false, /*cluster=*/true},
    {"raft-snapshot-trailing", "RAFT_SNAPSHOT_TRAILING", Kind::kInteger, "entries", 0,
     kMaxRaftCount, &Config::Cluster::snapshot_trailing,
     "cluster mode: entries kept in the log behind a snapshot", /*hidden=*/false,
     /*cluster=*/true},
    {"raft-min-free-mb", "RAFT_MIN_FREE_MB", Kind::kInteger, "MiB", 0, 1'048'576,
     &Config::Cluster::min_free_mb,
     "cluster mode: free space the raft directory needs; below it the node does not start, and a "
     "running node hands leadership over and exits 1; 0 = no check",
     /*hidden=*/false, /*cluster=*/true},
    {"raft-start-timeout-s", "RAFT_START_TIMEOUT_S", Kind::kInteger, "seconds", 1, 86'400,
     &Config::Cluster::start_timeout_s,
     "cluster mode: time the raft directory has to load; a node that takes longer exits 74",
     /*hidden=*/false, /*cluster=*/true},
    // The test hooks (Config::TestHooks): hidden from --help, and not read from the environment,
    // so a stray variable can never shift a production server's clock or fences.
    {"test-wall-clock-offset-s", "", Kind::kInteger, "seconds", -kMaxWallClockOffsetSeconds,
     kMaxWallClockOffsetSeconds, &Config::TestHooks::wall_clock_offset_s,
     "FOR TESTS ONLY: added to the wall clock that seeds fences (simulates a clock step)",
     /*hidden=*/true},
    {"test-monotonic-offset-s", "", Kind::kInteger, "seconds", 0, kMaxMonotonicOffsetSeconds,
     &Config::TestHooks::monotonic_offset_s,
     "FOR TESTS ONLY: added to every monotonic clock reading (as if on another machine)",
     /*hidden=*/true},
    {"test-fence-range", "", Kind::kInteger, "fences", 2, kMaxTestFenceRange,
     &Config::TestHooks::fence_range,
     "FOR TESTS ONLY: the fence journal's reservation range (default: the production 2^22)",
     /*hidden=*/true},
    {"test-fence-write-failures", "", Kind::kInteger, "n", 0, 1000,
     &Config::TestHooks::fence_write_failures,
     "FOR TESTS ONLY: fail the next n fence journal writes after start-up as if fsync failed",
     /*hidden=*/true},
};

std::string default_text(const Setting& setting, const Config& defaults) {
  if (setting.flag == "threads")
    return "number of cores (" + std::to_string(defaults.threads) + ")";
  if (setting.flag == "node-id") return "unset (required in cluster mode)";
  if (setting.flag == "raft-addr") return "unset (required in cluster mode)";
  if (setting.flag == "advertise-addr") {
    return "this node's client address in --cluster-peers, else --host:--port";
  }
  return std::visit(
      [&](auto member) -> std::string {
        using Member = decltype(member);
        if constexpr (std::is_same_v<Member, std::monostate>) {
          return "unset";
        } else if constexpr (std::is_same_v<Member, std::string Config::*>) {
          const std::string& value = defaults.*member;
          return value.empty() ? "unset" : value;
        } else if constexpr (std::is_same_v<Member, bool Config::*>) {
          return defaults.*member ? "true" : "false";
        } else if constexpr (std::is_same_v<Member, std::int64_t Config::TestHooks::*>) {
          return std::to_string(defaults.test.*member);
        } else if constexpr (std::is_same_v<Member, std::string Config::Cluster::*>) {
          const std::string& value = defaults.cluster.*member;
          return value.empty() ? "unset" : value;
        } else if constexpr (std::is_same_v<Member, bool Config::Cluster::*>) {
          return defaults.cluster.*member ? "true" : "false";
        } else if constexpr (std::is_same_v<Member, std::int64_t Config::Cluster::*> ||
                             std::is_same_v<Member, std::uint64_t Config::Cluster::*>) {
          return std::to_string(defaults.cluster.*member);
        } else {
          return std::to_string(defaults.*member);
        }
      },
      setting.target);
}

}  // namespace

std::span<const Setting> settings() { return kSettings; }

bool takes_value(const Setting& setting) { return setting.kind != Kind::kBool; }

const Setting* find_setting(std::string_view flag) {
  for (const Setting& setting : kSettings) {
    if (setting.flag == flag) return &setting;
  }
  return nullptr;
}

std::string usage_text(const Config& defaults) {
  std::string text =
      "Usage: turnstiled [flags]\n"
      "\n"
      "turnstile lock server, speaking the dflockd protocol.\n"
      "Each flag can also be set with TURNSTILE_<NAME> or DFLOCKD_<NAME>; a flag wins over\n"
      "TURNSTILE_<NAME>, which wins over DFLOCKD_<NAME>. Flags take --name value or --name=value;\n"
      "boolean flags take --name or --name=false.\n"
      "\n"
      "Flags:\n";
  // Appended piece by piece: GCC 12's -Wrestrict reports a false overlap in `"literal" +
  // std::string(...)` at -O2 and above (a Release build stopped on it).
  for (const Setting& setting : kSettings) {
    if (setting.hidden) continue;
    text.append("  --").append(setting.flag);
    if (setting.kind == Kind::kBool) {
      text.append("[=bool]");
    } else {
      text.append(" ").append(setting.value_name);
    }
    text.append("\n      ").append(setting.help);
    if (setting.kind == Kind::kInteger) {
      text.append(" (").append(std::to_string(setting.min)).append("..");
      if (setting.max != kInt64Max || setting.value_name == "id") {
        text.append(std::to_string(setting.max));
      }
      text.append(")");
    }
    if (setting.env.empty()) {
      text.append("\n      flag only");
    } else {
      text.append("\n      env ");
      for (std::string_view prefix : kEnvPrefixes) {
        text.append(prefix).append(setting.env);
        if (prefix == kEnvPrefixes[0]) text.append(", ");
      }
    }
    text.append("; default ").append(default_text(setting, defaults)).append("\n");
  }
  text +=
      "  --help, -h\n"
      "      print this help and exit\n"
      "  --version\n"
      "      print the version and exit\n"
      "\n"
      "Auth token sources, first match wins: --auth-token, --auth-token-file,\n"
      "TURNSTILE_AUTH_TOKEN, DFLOCKD_AUTH_TOKEN, TURNSTILE_AUTH_TOKEN_FILE,\n"
      "DFLOCKD_AUTH_TOKEN_FILE. The token is trimmed and must be one non-empty line.\n"
      "--cluster-secret and --admin-token are resolved the same way, with their own names.\n"
      "\n"
      "Cluster mode (docs/cluster.md): --raft-dir turns it on; every flag marked \"cluster mode\"\n"
      "needs it. Cluster mode needs --node-id, --raft-addr and a cluster secret.";
  return text;
}

}  // namespace turnstile::net::config_internal
