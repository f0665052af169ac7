// turnstiled's flag and environment parsing. cxxopts splits the command line; every value is
// taken as text and converted here, so each setting has one conversion and one error format
// whether it came from a flag or from the environment.
#include "net/config.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cxxopts.hpp>
#include <limits>
#include <string_view>
#include <system_error>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "core/address.h"

#ifndef TURNSTILE_VERSION
#error "TURNSTILE_VERSION must be defined (net/CMakeLists.txt passes the CMake project version)"
#endif

namespace turnstile::net {
namespace {

constexpr std::string_view kProgram = "turnstiled";
constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();
// The largest seconds value whose nanosecond count fits in an int64 (reference 1.3, edge 23).
constexpr std::int64_t kMaxSeconds = 9'223'372'036;
constexpr std::int64_t kMaxThreads = 1024;
// A client sends the token as the argument line of `auth`, which holds at most 64 KiB
// (core::RequestParser::Limits::long_line_max): a longer token could never authenticate.
constexpr std::size_t kMaxAuthTokenBytes = 64 * 1024;
// Reading a token file stops here, so pointing the flag at /dev/zero cannot exhaust memory.
constexpr std::size_t kMaxAuthTokenFileBytes = 1024 * 1024;
constexpr std::size_t kQuotedValueMax = 64;
// --test-wall-clock-offset-s: a century either way is more than any test needs, and keeps the
// offset in nanoseconds far from overflowing.
constexpr std::int64_t kMaxWallClockOffsetSeconds = 3'155'760'000;
// --test-monotonic-offset-s: up to a year ahead (a machine's uptime); never back, so that the
// shifted clock stays above zero.
constexpr std::int64_t kMaxMonotonicOffsetSeconds = 31'557'600;
// --test-fence-range: at most the production range, 2^22.
constexpr std::int64_t kMaxTestFenceRange = std::int64_t{1} << 22;
constexpr std::string_view kEnvPrefixes[] = {"TURNSTILE_", "DFLOCKD_"};

// raft takes the snapshot threshold and trailing count as `unsigned`.
constexpr std::int64_t kMaxRaftCount = std::numeric_limits<std::uint32_t>::max();

// kText: any text. kAddress: host:port or [v6]:port, stored canonical (empty = unset).
// kPeers: --cluster-peers. kSecret, kSecretFile: a secret and the file holding it, resolved
// together (resolve_secret), never by apply.
enum class Kind { kText, kInteger, kBool, kAddress, kPeers, kSecret, kSecretFile };

using Target =
    std::variant<std::monostate, std::string Config::*, int Config::*, std::int64_t Config::*,
                 bool Config::*, std::int64_t Config::TestHooks::*, std::string Config::Cluster::*,
                 std::int64_t Config::Cluster::*, std::uint64_t Config::Cluster::*,
                 bool Config::Cluster::*>;

struct Setting {
  std::string_view flag;  // without the leading "--"
  std::string_view env;   // after the TURNSTILE_ / DFLOCKD_ prefix; empty: flag only
  Kind kind;
  std::string_view value_name;  // shown in --help
  std::int64_t min;             // integers only
  std::int64_t max;
  Target target;
  std::string_view help;
  bool hidden = false;   // left out of --help (the test hooks, Config::TestHooks)
  bool cluster = false;  // a cluster flag (Config::Cluster): needs --raft-dir
};

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

bool takes_value(const Setting& setting) { return setting.kind != Kind::kBool; }

const Setting* find_setting(std::string_view flag) {
  for (const Setting& setting : kSettings) {
    if (setting.flag == flag) return &setting;
  }
  return nullptr;
}

bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && is_ascii_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_ascii_space(text.back())) text.remove_suffix(1);
  return text;
}

std::string lowercase(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// Go's %q, roughly: the value stays on one line whatever it holds, and long values are cut.
std::string quote(std::string_view value) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  const bool cut = value.size() > kQuotedValueMax;
  for (char c : value.substr(0, kQuotedValueMax)) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (byte < 0x20 || byte == 0x7f) {
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 0xf];
    } else {
      out += c;
    }
  }
  out += cut ? "\"..." : "\"";
  return out;
}

// Where a value came from: the command line, or the named environment variable.
struct Source {
  std::string value;
  std::string env_name;  // empty: the flag
};

std::string fail_prefix() { return std::string(kProgram) + ": "; }

ConfigExit usage_error(std::string message) { return ConfigExit{2, fail_prefix() + message}; }

// `turnstiled: invalid value "abc" for --port (from TURNSTILE_PORT): not an integer`.
// Secrets pass show_value = false so they never reach a terminal or a log.
ConfigExit invalid_value(const Setting& setting, const Source& source, std::string_view reason,
                         bool show_value = true) {
  std::string message = "invalid value ";
  if (show_value) message += quote(source.value) + " ";
  message += "for --" + std::string(setting.flag);
  if (!source.env_name.empty()) message += " (from " + source.env_name + ")";
  message += ": ";
  message += reason;
  return usage_error(std::move(message));
}

// Decimal like Go's strconv.ParseInt(s, 10, 64): optional sign, digits, nothing else.
enum class IntegerParse { kOk, kNotInteger, kTooSmall, kTooLarge };

IntegerParse parse_int64(std::string_view text, std::int64_t& value) {
  std::string_view digits = text;
  if (!digits.empty() && (digits.front() == '+' || digits.front() == '-')) digits.remove_prefix(1);
  if (digits.empty() ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return IntegerParse::kNotInteger;
  }
  if (text.front() == '+') text.remove_prefix(1);
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error == std::errc::result_out_of_range) {
    return text.front() == '-' ? IntegerParse::kTooSmall : IntegerParse::kTooLarge;
  }
  if (error != std::errc() || end != text.data() + text.size()) return IntegerParse::kNotInteger;
  return IntegerParse::kOk;
}

std::string bounds_text(const Setting& setting) {
  const bool unit = setting.value_name == "seconds" || setting.value_name == "milliseconds";
  // An id names its whole range, so that 0 and 2^63 get the same message.
  const bool open_ended = setting.max == kInt64Max && setting.value_name != "id";
  std::string text = open_ended ? "must be >= " + std::to_string(setting.min)
                                : "must be between " + std::to_string(setting.min) + " and " +
                                      std::to_string(setting.max);
  if (unit) text.append(" ").append(setting.value_name);
  return text;
}

// Flag values take Go's strconv.ParseBool words (1, t, true, 0, f, false) and, like the
// environment, yes and no; all case-insensitive. Environment values take only
// 1/yes/true/0/no/false (reference section 4): anything else is an error.
std::optional<bool> parse_bool(std::string_view text, bool from_env) {
  const std::string word = lowercase(text);
  if (word == "1" || word == "true" || word == "yes") return true;
  if (word == "0" || word == "false" || word == "no") return false;
  if (!from_env && word == "t") return true;
  if (!from_env && word == "f") return false;
  return std::nullopt;
}

// A host:port address: `host` is an IPv4 literal or a host name (lower case), or an IPv6
// literal (compressed by inet_ntop, without its brackets); `text` is the canonical form,
// `host:port` or `[v6]:port`.
struct HostPort {
  std::string host;
  int port = 0;
  bool v6 = false;
  std::string text;
};

bool is_wildcard(const HostPort& address) {
  return address.host == "0.0.0.0" || (address.v6 && address.host == "::");
}

std::string join_host_port(std::string_view host, bool v6, int port) {
  std::string text;
  if (v6) text += '[';
  text += host;
  if (v6) text += ']';
  text.append(":").append(std::to_string(port));
  return text;
}

// The canonical form of a host: an IPv6 literal (bracketed or not) compressed, an IPv4 literal
// as is, anything else (a host name) in lower case; `v6` says which. nullopt: an IPv6-looking
// text (brackets or a colon) that is not an IPv6 literal.
std::optional<std::string> canonical_host(std::string_view host, bool& v6) {
  const bool bracketed = host.size() >= 2 && host.front() == '[' && host.back() == ']';
  if (bracketed) host = host.substr(1, host.size() - 2);
  v6 = bracketed || host.find(':') != std::string_view::npos;
  if (!v6) return lowercase(host);
  const auto bytes = core::parse_ipv6(host);
  if (!bytes) return std::nullopt;
  in6_addr address{};
  std::memcpy(address.s6_addr, bytes->data(), bytes->size());
  char text[INET6_ADDRSTRLEN] = {};
  if (inet_ntop(AF_INET6, &address, text, sizeof text) == nullptr) return std::nullopt;
  return std::string(text);
}

// An address of the grammar of core/address.h, in its canonical form; or why the text is not one.
std::variant<HostPort, std::string> parse_host_port(std::string_view text) {
  using Result = std::variant<HostPort, std::string>;
  auto parsed = core::parse_host_port(text);
  if (auto* why = std::get_if<std::string>(&parsed)) {
    return Result(std::in_place_index<1>, std::move(*why));
  }
  const core::HostPort& parts = std::get<core::HostPort>(parsed);
  HostPort address;
  address.port = parts.port;
  const auto canonical = canonical_host(parts.host, address.v6);
  address.host = canonical.value_or(parts.host);  // the parser took it: it is an IPv6 literal
  address.text = join_host_port(address.host, address.v6, address.port);
  return Result(std::in_place_index<0>, std::move(address));
}

// A cluster address: host:port that others can connect to, so never a wildcard host.
std::variant<HostPort, std::string> parse_reachable_address(std::string_view text) {
  auto parsed = parse_host_port(text);
  if (const auto* address = std::get_if<HostPort>(&parsed); address && is_wildcard(*address)) {
    return std::variant<HostPort, std::string>(
        std::in_place_index<1>,
        address->host + " is a wildcard, not an address another machine can connect to");
  }
  return parsed;
}

// --cluster-peers: `id=raftHost:port@clientHost:port` entries separated by commas, blanks
// around entries ignored; an empty list when the text is blank. Ids are 1..2^63-1 and unique,
// and every address (raft or client) appears once in the whole list.
std::variant<std::vector<Config::ClusterPeer>, std::string> parse_peers(std::string_view text) {
  using Result = std::variant<std::vector<Config::ClusterPeer>, std::string>;
  std::vector<Config::ClusterPeer> peers;
  if (trim(text).empty()) return peers;
  struct Use {
    std::string address;
    std::uint64_t id;
    std::string_view role;
  };
  std::vector<Use> uses;
  std::size_t number = 0;
  while (true) {
    ++number;
    const std::size_t comma = text.find(',');
    const std::string_view entry = trim(text.substr(0, comma));
    const std::string where = "entry " + std::to_string(number) +
                              (entry.empty() ? std::string(" is empty") : " " + quote(entry));
    if (entry.empty()) return Result(std::in_place_index<1>, where);
    const std::size_t equals = entry.find('=');
    const std::size_t at = entry.find('@');
    if (equals == std::string_view::npos || at == std::string_view::npos || at < equals ||
        entry.find('@', at + 1) != std::string_view::npos) {
      return Result(std::in_place_index<1>, where + ": expected id=raftHost:port@clientHost:port");
    }
    const std::string_view id_text = entry.substr(0, equals);
    std::int64_t id = 0;
    const bool digits = !id_text.empty() && std::all_of(id_text.begin(), id_text.end(), [](char c) {
      return c >= '0' && c <= '9';
    });
    if (!digits) return Result(std::in_place_index<1>, where + ": the id is not a number");
    if (parse_int64(id_text, id) != IntegerParse::kOk || id < 1) {
      return Result(std::in_place_index<1>,
                    where + ": the id must be between 1 and " + std::to_string(kInt64Max));
    }
    Config::ClusterPeer peer;
    peer.id = static_cast<std::uint64_t>(id);
    for (const Config::ClusterPeer& other : peers) {
      if (other.id == peer.id) {
        return Result(std::in_place_index<1>,
                      where + ": node id " + std::to_string(peer.id) + " is listed twice");
      }
    }
    for (const auto& [role, part, out] :
         {std::tuple{std::string_view("raft address"), entry.substr(equals + 1, at - equals - 1),
                     &peer.raft_address},
          std::tuple{std::string_view("client address"), entry.substr(at + 1),
                     &peer.client_address}}) {
      auto address = parse_reachable_address(part);
      if (const auto* problem = std::get_if<std::string>(&address)) {
        return Result(std::in_place_index<1>,
                      where + ": " + std::string(role) + " " + quote(part) + ": " + *problem);
      }
      *out = std::get<HostPort>(address).text;
      for (const Use& use : uses) {
        if (use.address != *out) continue;
        return Result(std::in_place_index<1>, where + ": " + std::string(role) + " " + *out +
                                                  " is already node " + std::to_string(use.id) +
                                                  "'s " + std::string(use.role));
      }
      uses.push_back(Use{*out, peer.id, role});
    }
    peers.push_back(std::move(peer));
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return peers;
}

// The setting's string field, in Config or in Config::Cluster.
std::string& text_field(const Setting& setting, Config& config) {
  if (const auto* member = std::get_if<std::string Config::Cluster::*>(&setting.target)) {
    return config.cluster.*(*member);
  }
  return config.*std::get<std::string Config::*>(setting.target);
}

bool& bool_field(const Setting& setting, Config& config) {
  if (const auto* member = std::get_if<bool Config::Cluster::*>(&setting.target)) {
    return config.cluster.*(*member);
  }
  return config.*std::get<bool Config::*>(setting.target);
}

// Stores an integer already checked against the setting's bounds, whichever field it names.
void store_integer(const Setting& setting, std::int64_t value, Config& config) {
  std::visit(
      [&](auto member) {
        using Member = decltype(member);
        if constexpr (std::is_same_v<Member, int Config::*>) {
          config.*member = static_cast<int>(value);
        } else if constexpr (std::is_same_v<Member, std::int64_t Config::*>) {
          config.*member = value;
        } else if constexpr (std::is_same_v<Member, std::int64_t Config::TestHooks::*>) {
          config.test.*member = value;
        } else if constexpr (std::is_same_v<Member, std::int64_t Config::Cluster::*>) {
          config.cluster.*member = value;
        } else if constexpr (std::is_same_v<Member, std::uint64_t Config::Cluster::*>) {
          config.cluster.*member = static_cast<std::uint64_t>(value);
        }
      },
      setting.target);
}

// Applies one non-secret setting from `source` to `config`; an error when the value is invalid.
std::optional<ConfigExit> apply(const Setting& setting, const Source& source, Config& config) {
  switch (setting.kind) {
    case Kind::kText: {
      std::string& field = text_field(setting, config);
      field = source.value;
      if ((setting.flag == "host" || setting.flag == "http-host") && field.empty()) {
        return invalid_value(setting, source,
                             "empty (use 0.0.0.0 or :: to listen on every address)");
      }
      // The words net/log.h parses (parse_log_format, parse_log_level), in lower case.
      if (setting.flag == "log-format") {
        field = lowercase(field);
        if (field != "text" && field != "json") {
          return invalid_value(setting, source, "not a log format (use text or json)");
        }
      }
      if (setting.flag == "log-level") {
        field = lowercase(field);
        if (field == "warning") field = "warn";
        if (field != "debug" && field != "info" && field != "warn" && field != "error") {
          return invalid_value(setting, source, "not a log level (use debug, info, warn or error)");
        }
      }
      return std::nullopt;
    }
    case Kind::kInteger: {
      std::int64_t value = 0;
      switch (parse_int64(source.value, value)) {
        case IntegerParse::kNotInteger:
          return invalid_value(setting, source, "not an integer");
        case IntegerParse::kTooSmall:
        case IntegerParse::kTooLarge:
          return invalid_value(setting, source, bounds_text(setting));
        case IntegerParse::kOk:
          break;
      }
      if (value < setting.min || value > setting.max) {
        return invalid_value(setting, source, bounds_text(setting));
      }
      store_integer(setting, value, config);
      return std::nullopt;
    }
    case Kind::kBool: {
      const bool from_env = !source.env_name.empty();
      const std::optional<bool> value = parse_bool(source.value, from_env);
      if (!value) {
        return invalid_value(setting, source,
                             from_env ? "not a boolean (use 1/yes/true or 0/no/false)"
                                      : "not a boolean (use --" + std::string(setting.flag) +
                                            "=true or --" + std::string(setting.flag) + "=false)");
      }
      bool_field(setting, config) = *value;
      return std::nullopt;
    }
    case Kind::kAddress: {
      std::string& field = text_field(setting, config);
      field.clear();  // empty = unset
      if (source.value.empty()) return std::nullopt;
      auto address = parse_reachable_address(source.value);
      if (const auto* problem = std::get_if<std::string>(&address)) {
        return invalid_value(setting, source, *problem);
      }
      field = std::get<HostPort>(address).text;
      return std::nullopt;
    }
    case Kind::kPeers: {
      auto peers = parse_peers(source.value);
      if (const auto* problem = std::get_if<std::string>(&peers)) {
        // The entry at fault is quoted in the reason; the whole list would be cut anyway.
        return invalid_value(setting, source, *problem, /*show_value=*/false);
      }
      config.cluster.peers = std::move(std::get<0>(peers));
      return std::nullopt;
    }
    case Kind::kSecret:
    case Kind::kSecretFile:
      break;
  }
  return std::nullopt;
}

// The first of TURNSTILE_<NAME>, DFLOCKD_<NAME> that is set. An empty value counts as unset for
// ordinary settings (so `TURNSTILE_PORT=` in a compose file defers to the next source); for the
// auth-token variables it is a value, and an error, so a deployment that meant to set a secret
// never starts without one.
std::optional<Source> from_environment(const Setting& setting, const EnvLookup& env,
                                       bool empty_is_value) {
  if (setting.env.empty()) return std::nullopt;  // a flag-only setting
  for (std::string_view prefix : kEnvPrefixes) {
    std::string name = std::string(prefix) + std::string(setting.env);
    std::optional<std::string> value = env(name);
    if (value && (empty_is_value || !value->empty())) {
      return Source{std::move(*value), std::move(name)};
    }
  }
  return std::nullopt;
}

// A token must be non-empty after trimming, one line, and short enough to send.
std::optional<std::string> token_problem(std::string_view token, bool in_file) {
  if (token.empty()) return in_file ? "the file is empty" : "empty after trimming whitespace";
  if (token.find_first_of("\r\n") != std::string_view::npos) {
    return in_file ? "the file holds more than one line (the token must be one line)"
                   : "contains CR or LF (the token must be one line)";
  }
  if (token.size() > kMaxAuthTokenBytes) {
    return std::string(in_file ? "the token in the file is " : "") + "longer than " +
           std::to_string(kMaxAuthTokenBytes) + " bytes";
  }
  return std::nullopt;
}

// Reads at most kMaxAuthTokenFileBytes + 1 bytes; the error text carries strerror.
std::variant<std::string, std::string> read_small_file(const std::string& path) {
  using Result = std::variant<std::string, std::string>;
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    return Result(std::in_place_index<1>, std::string("cannot open: ") + std::strerror(errno));
  }
  std::string contents;
  char buffer[4096];
  while (contents.size() <= kMaxAuthTokenFileBytes) {
    const std::size_t count = std::fread(buffer, 1, sizeof buffer, file);
    contents.append(buffer, count);
    if (count < sizeof buffer) break;
  }
  const bool failed = std::ferror(file) != 0;
  const int error = errno;
  std::fclose(file);
  if (failed) {
    return Result(std::in_place_index<1>, std::string("cannot read: ") + std::strerror(error));
  }
  if (contents.size() > kMaxAuthTokenFileBytes) {
    return Result(std::in_place_index<1>,
                  "larger than " + std::to_string(kMaxAuthTokenFileBytes) + " bytes");
  }
  return Result(std::in_place_index<0>, std::move(contents));
}

std::variant<std::string, ConfigExit> token_from_value(const Setting& setting,
                                                       const Source& source) {
  const std::string_view token = trim(source.value);
  if (const auto problem = token_problem(token, /*in_file=*/false)) {
    return invalid_value(setting, source, *problem, /*show_value=*/false);
  }
  return std::string(token);
}

std::variant<std::string, ConfigExit> token_from_file(const Setting& setting,
                                                      const Source& source) {
  if (source.value.empty()) return invalid_value(setting, source, "empty path");
  auto contents = read_small_file(source.value);
  if (contents.index() == 1) return invalid_value(setting, source, std::get<1>(contents));
  const std::string_view token = trim(std::get<0>(contents));
  if (const auto problem = token_problem(token, /*in_file=*/true)) {
    return invalid_value(setting, source, *problem);
  }
  return std::string(token);
}

// Which source gave a setting its value: the setting, and the variable (empty: the flag).
struct Given {
  const Setting* setting;
  std::string env_name;
};

// Secret precedence (reference section 4, edge 31), the same for the auth token, the cluster
// secret and the admin token: --<name> given explicitly, then --<name>-file, then the value
// variables, then the file variables; TURNSTILE_ before DFLOCKD_ within each. Only the winning
// source is read; it is recorded in `given`.
std::optional<ConfigExit> resolve_secret(const cxxopts::ParseResult& parsed, const EnvLookup& env,
                                         std::string_view name, std::optional<std::string>& out,
                                         std::vector<Given>& given) {
  const std::string value_flag(name);
  const std::string file_flag = value_flag + "-file";
  const Setting& value = *find_setting(value_flag);
  const Setting& file = *find_setting(file_flag);
  std::variant<std::string, ConfigExit> resolved;
  if (parsed.count(value_flag) != 0) {
    given.push_back(Given{&value, ""});
    resolved = token_from_value(value, Source{parsed[value_flag].as<std::string>(), ""});
  } else if (parsed.count(file_flag) != 0) {
    given.push_back(Given{&file, ""});
    resolved = token_from_file(file, Source{parsed[file_flag].as<std::string>(), ""});
  } else if (auto source = from_environment(value, env, /*empty_is_value=*/true)) {
    given.push_back(Given{&value, source->env_name});
    resolved = token_from_value(value, *source);
  } else if (auto file_source = from_environment(file, env, /*empty_is_value=*/true)) {
    given.push_back(Given{&file, file_source->env_name});
    resolved = token_from_file(file, *file_source);
  } else {
    return std::nullopt;
  }
  if (auto* error = std::get_if<ConfigExit>(&resolved)) return std::move(*error);
  out = std::move(std::get<std::string>(resolved));
  return std::nullopt;
}

// The cross-flag rules of cluster mode, after every value has been parsed on its own.
std::optional<ConfigExit> check_cluster(const std::vector<Given>& given, Config& config) {
  Config::Cluster& cluster = config.cluster;
  if (!cluster.enabled()) {
    // The first cluster flag given, in --help order, names the problem.
    for (const Setting& setting : kSettings) {
      if (!setting.cluster) continue;
      for (const Given& g : given) {
        if (g.setting != &setting) continue;
        std::string message = "--" + std::string(setting.flag);
        if (!g.env_name.empty()) message += " (from " + g.env_name + ")";
        return usage_error(message + " needs --raft-dir (cluster mode)");
      }
    }
    return std::nullopt;
  }
  if (!config.fence_state_file.empty()) {
    return usage_error(
        "--fence-state-file cannot be used in cluster mode: the fence counter is replicated in "
        "the raft log and its snapshots");
  }
  if (cluster.node_id == 0) return usage_error("cluster mode (--raft-dir) needs --node-id");
  if (cluster.raft_addr.empty()) return usage_error("cluster mode (--raft-dir) needs --raft-addr");
  if (!cluster.secret) {
    return usage_error(
        "cluster mode needs --cluster-secret or --cluster-secret-file: nodes authenticate each "
        "other with it");
  }
  if (cluster.heartbeat_timeout_ms >= cluster.election_timeout_ms) {
    return usage_error("--raft-heartbeat-timeout-ms (" +
                       std::to_string(cluster.heartbeat_timeout_ms) +
                       ") must be less than --raft-election-timeout-ms (" +
                       std::to_string(cluster.election_timeout_ms) + ")");
  }
  if (cluster.bootstrap && cluster.peers.empty()) {
    return usage_error(
        "--cluster-bootstrap needs --cluster-peers: the voters of the initial configuration");
  }
  const Config::ClusterPeer* self = nullptr;
  for (const Config::ClusterPeer& peer : cluster.peers) {
    if (peer.id == cluster.node_id) self = &peer;
  }
  if (!cluster.peers.empty()) {
    if (self == nullptr) {
      return usage_error("--cluster-peers does not list --node-id " +
                         std::to_string(cluster.node_id) + " (the list must include this node)");
    }
    if (self->raft_address != cluster.raft_addr) {
      return usage_error("--raft-addr " + cluster.raft_addr + " differs from node " +
                         std::to_string(cluster.node_id) + "'s raft address in --cluster-peers (" +
                         self->raft_address + ")");
    }
  }

  // Raft needs a port of its own: not the TCP listener's, nor the HTTP API's. A wildcard
  // listener takes the port on every address.
  const HostPort raft = std::get<HostPort>(parse_host_port(cluster.raft_addr));
  const auto overlaps = [&](const std::string& host, int port) {
    if (port != raft.port) return false;
    bool v6 = false;
    const auto canonical = canonical_host(host, v6);
    if (!canonical) return false;
    HostPort listener{*canonical, port, v6, ""};
    return is_wildcard(listener) || (listener.host == raft.host && listener.v6 == raft.v6);
  };
  if (overlaps(config.host, config.port)) {
    return usage_error("--raft-addr " + cluster.raft_addr +
                       " is the address of the TCP listener (--host " + config.host + ", --port " +
                       std::to_string(config.port) + "): raft needs a port of its own");
  }
  if (config.http_port != 0 && overlaps(config.http_host, config.http_port)) {
    return usage_error("--raft-addr " + cluster.raft_addr +
                       " is the address of the HTTP API (--http-host " + config.http_host +
                       ", --http-port " + std::to_string(config.http_port) +
                       "): raft needs a port of its own");
  }

  // The advertised client address: the flag, else this node's in --cluster-peers, else the TCP
  // listener's when that is an address clients can connect to.
  if (cluster.advertise_addr.empty() && self != nullptr) {
    cluster.advertise_addr = self->client_address;
  }
  if (cluster.advertise_addr.empty()) {
    const std::string needs =
        "cluster mode needs --advertise-addr (the client address other nodes send clients to): ";
    const std::string not_listed = ", and this node is not in --cluster-peers";
    if (config.port == 0) {
      return usage_error(needs + "--port 0 is picked at start-up" + not_listed);
    }
    bool v6 = false;
    const auto host = canonical_host(config.host, v6);
    auto listener = parse_reachable_address(host ? join_host_port(*host, v6, config.port)
                                                 : config.host + ":" + std::to_string(config.port));
    if (const auto* problem = std::get_if<std::string>(&listener)) {
      return usage_error(needs + "--host " + quote(config.host) + " is not usable (" + *problem +
                         ")" + not_listed);
    }
    cluster.advertise_addr = std::get<HostPort>(listener).text;
  }
  return std::nullopt;
}

// Go's flag package reads -name like --name; cxxopts reads -name as a group of one-letter
// flags. We have no one-letter flags but -h, so rewrite -name[=v] to --name[=v] (and -h[=v] to
// --help[=v]), so that an unknown -name is reported whole. Values of flags that take one are
// left alone (so `--host -debug` keeps "-debug" as the host), as is everything after "--".
std::vector<std::string> normalize_dashes(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  out.reserve(args.size());
  bool next_is_value = false;
  bool rest_is_positional = false;
  for (const std::string& arg : args) {
    if (next_is_value || rest_is_positional) {
      out.push_back(arg);
      next_is_value = false;
      continue;
    }
    if (arg == "--") {
      rest_is_positional = true;
      out.push_back(arg);
      continue;
    }
    std::string rewritten = arg;
    if (arg.size() >= 2 && arg[0] == '-' && arg[1] != '-') {
      const std::string name = arg.substr(1, arg.find('=') - 1);
      if (name == "h") {
        rewritten = "--help" + arg.substr(2);
      } else if (name.size() > 1) {
        rewritten = "-" + arg;
      }
    }
    if (rewritten.starts_with("--") && rewritten.find('=') == std::string::npos) {
      const Setting* setting = find_setting(std::string_view(rewritten).substr(2));
      next_is_value = setting != nullptr && takes_value(*setting);
    }
    out.push_back(std::move(rewritten));
  }
  return out;
}

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

// The name cxxopts quotes in its messages (‘name’), or the whole message if it has none.
std::string quoted_name(const std::string& message) {
  static constexpr std::string_view kOpen = "\xe2\x80\x98";   // U+2018
  static constexpr std::string_view kClose = "\xe2\x80\x99";  // U+2019
  const std::size_t open = message.find(kOpen);
  if (open == std::string::npos) return message;
  const std::size_t start = open + kOpen.size();
  const std::size_t close = message.find(kClose, start);
  if (close == std::string::npos) return message;
  return message.substr(start, close - start);
}

std::string dashed(const std::string& name) { return (name.size() == 1 ? "-" : "--") + name; }

ConfigResult parse_checked(const std::vector<std::string>& args, const EnvLookup& env, int cores) {
  Config config;
  config.threads = static_cast<int>(std::clamp<std::int64_t>(cores, 1, kMaxThreads));
  const Config defaults = config;

  cxxopts::Options options{std::string(kProgram)};
  auto adder = options.add_options();
  for (const Setting& setting : kSettings) {
    auto value = cxxopts::value<std::string>();
    if (!takes_value(setting)) value->implicit_value("true");
    adder(std::string(setting.flag), std::string(setting.help), value);
  }
  adder("h,help", "print help", cxxopts::value<std::string>()->implicit_value("true"));
  adder("version", "print version", cxxopts::value<std::string>()->implicit_value("true"));

  const std::vector<std::string> normalized = normalize_dashes(args);
  std::vector<const char*> argv;
  argv.reserve(normalized.size() + 1);
  argv.push_back(kProgram.data());
  for (const std::string& arg : normalized) argv.push_back(arg.c_str());
  const cxxopts::ParseResult parsed = options.parse(static_cast<int>(argv.size()), argv.data());

  if (!parsed.unmatched().empty()) {
    const std::string& arg = parsed.unmatched().front();
    const bool looks_bool = parse_bool(arg, /*from_env=*/false).has_value();
    return usage_error("unexpected argument " + quote(arg) +
                       (looks_bool ? " (boolean flags take --name=false, not --name false)" : ""));
  }
  for (const char* name : {"help", "version"}) {
    if (parsed.count(name) == 0) continue;
    const std::string value = parsed[name].as<std::string>();
    const std::optional<bool> wanted = parse_bool(value, /*from_env=*/false);
    if (!wanted) {
      return usage_error("invalid value " + quote(value) + " for --" + name + ": not a boolean");
    }
    if (*wanted) {
      return ConfigExit{0,
                        std::string_view(name) == "help" ? usage_text(defaults) : version_string()};
    }
  }

  std::vector<Given> given;
  for (const Setting& setting : kSettings) {
    if (setting.kind == Kind::kSecret || setting.kind == Kind::kSecretFile) continue;
    std::optional<Source> source;
    if (parsed.count(std::string(setting.flag)) != 0) {
      source = Source{parsed[std::string(setting.flag)].as<std::string>(), ""};
    } else {
      source = from_environment(setting, env, /*empty_is_value=*/false);
    }
    if (!source) continue;
    if (auto error = apply(setting, *source, config)) return std::move(*error);
    given.push_back(Given{&setting, source->env_name});
  }
  if (auto error = resolve_secret(parsed, env, "auth-token", config.auth_token, given)) {
    return std::move(*error);
  }
  if (auto error = resolve_secret(parsed, env, "cluster-secret", config.cluster.secret, given)) {
    return std::move(*error);
  }
  if (auto error = resolve_secret(parsed, env, "admin-token", config.cluster.admin_token, given)) {
    return std::move(*error);
  }

  // Edge 11: a certificate without its key (or the reverse) is a start-up error.
  if (config.tls_cert.empty() != config.tls_key.empty()) {
    return usage_error(config.tls_cert.empty() ? "--tls-key is set but --tls-cert is not"
                                               : "--tls-cert is set but --tls-key is not");
  }
  if (config.http_port != 0 && config.http_port == config.port) {
    return usage_error("--http-port must differ from --port (both are " +
                       std::to_string(config.port) + ")");
  }
  if (config.http_host.empty()) config.http_host = config.host;
  if (config.debug) config.log_level = "debug";
  if (config.http_rate_limit_burst == 0)
    config.http_rate_limit_burst = config.http_rate_limit_per_ip;
  if (auto error = check_cluster(given, config)) return std::move(*error);
  return config;
}

// The address a listener binds to is loopback-only: 127.0.0.0/8, ::1 (also IPv4-mapped
// ::ffff:127.x.y.z, and bracketed), or the name localhost.
bool is_loopback_host(std::string_view host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (lowercase(host) == "localhost") return true;
  const std::string text(host);
  in_addr v4{};
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    return reinterpret_cast<const unsigned char*>(&v4.s_addr)[0] == 127;
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    const unsigned char* bytes = v6.s6_addr;
    const auto zero = [](unsigned char b) { return b == 0; };
    if (std::all_of(bytes, bytes + 15, zero)) return bytes[15] == 1;  // ::1
    return std::all_of(bytes, bytes + 10, zero) && bytes[10] == 0xff && bytes[11] == 0xff &&
           bytes[12] == 127;  // ::ffff:127.0.0.0/104
  }
  return false;
}

}  // namespace

ConfigResult parse_config(const std::vector<std::string>& args, const EnvLookup& env, int cores) {
  try {
    return parse_checked(args, env, cores);
  } catch (const cxxopts::exceptions::no_such_option& e) {
    return usage_error("unknown flag " + dashed(quoted_name(e.what())));
  } catch (const cxxopts::exceptions::missing_argument& e) {
    return usage_error("flag needs an argument: " + dashed(quoted_name(e.what())));
  } catch (const cxxopts::exceptions::option_requires_argument& e) {
    return usage_error("flag needs an argument: " + dashed(quoted_name(e.what())));
  } catch (const cxxopts::exceptions::invalid_option_syntax& e) {
    return usage_error("bad flag syntax " + quote(quoted_name(e.what())));
  } catch (const cxxopts::exceptions::exception& e) {
    std::string message = e.what();
    std::replace(message.begin(), message.end(), '\n', ' ');
    return usage_error(message);
  }
}

EnvLookup process_environment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

std::vector<std::string> config_warnings(const Config& config) {
  std::vector<std::string> warnings;
  const bool tcp_loopback = is_loopback_host(config.host);
  const std::pair<std::string_view, std::int64_t> caps[] = {
      {"max-connections", config.max_connections},
      {"max-connections-per-ip", config.max_connections_per_ip},
      {"max-waiters", config.max_waiters},
  };
  std::vector<std::pair<std::string_view, std::int64_t>> http_caps;
  if (config.http_port != 0 && !is_loopback_host(config.http_host)) {
    http_caps = {{"http-max-sessions", config.http_max_sessions},
                 {"http-max-sessions-per-ip", config.http_max_sessions_per_ip},
                 {"http-max-connections-per-ip", config.http_max_connections_per_ip},
                 {"http-rate-limit-per-ip", config.http_rate_limit_per_ip}};
  }
  for (const auto& [flag, value] : caps) {
    if (value != 0 || tcp_loopback) continue;
    warnings.push_back("--" + std::string(flag) + " is 0 (unlimited) while listening on " +
                       quote(config.host) + ", which is not a loopback address; set a cap");
  }
  for (const auto& [flag, value] : http_caps) {
    if (value != 0) continue;
    warnings.push_back("--" + std::string(flag) +
                       " is 0 (unlimited) while the HTTP API listens on " +
                       quote(config.http_host) + ", which is not a loopback address; set a cap");
  }
  return warnings;
}

std::string version_string() { return std::string(kProgram) + " " + TURNSTILE_VERSION; }

}  // namespace turnstile::net
