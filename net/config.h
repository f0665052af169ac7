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
  std::int64_t lock_delay_s = 0;            // 0..86400; 0 = off
  std::int64_t max_locks = 1'048'576;       // > 0, across all shards, exact
  std::int64_t max_waiters = 0;             // >= 0 per key; 0 = unlimited
  std::int64_t max_connections = 0;         // >= 0; 0 = unlimited
  std::int64_t max_subscriptions = 0;       // >= 0 signal subscriptions per connection; 0 = any
  std::int64_t max_subscriptions_total = 100'000;  // >= 0, every connection's; 0 = any
  std::int64_t signal_queue = 64;                  // 1..65536 unwritten signal frames per listener
  std::int64_t max_connections_per_ip = 0;         // >= 0; 0 = unlimited
  std::int64_t read_timeout_s = 23;                // > 0; time for one request to arrive
  std::int64_t idle_timeout_s = 0;                 // >= 0; 0 = never (turnstile addition)
  std::int64_t write_timeout_s = 5;                // >= 0; 0 = no write deadline
  std::int64_t shutdown_timeout_s = 30;            // >= 0; 0 = wait forever
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
  std::int64_t http_sse_ping_interval_s = 15;     // 1..3600; `:ping` on signal streams
  bool debug = false;                             // --debug: an alias of --log-level debug
  std::string log_format = "text";                // "text" or "json" (net/log.h)
  std::string log_level = "info";  // "debug", "info", "warn" or "error"; --debug makes it debug

  // One voter of the initial cluster, from --cluster-peers (`id=raftHost:port@clientHost:port`).
  // Addresses are kept in canonical form: `host:port` or `[v6]:port`, the port in decimal without
  // leading zeros, host names and IPv6 literals in lower case, IPv6 literals compressed.
  struct ClusterPeer {
    std::uint64_t id = 0;        // 1..2^63-1, unique in the list
    std::string raft_address;    // where the other nodes reach this voter's raft traffic
    std::string client_address;  // where clients reach it (the TCP protocol listener)
    bool operator==(const ClusterPeer&) const = default;
  };

  // Cluster mode (docs/cluster.md, "Flags"). Every field but raft_dir is a cluster flag: giving
  // one without --raft-dir is an error, so in single-node mode all of them keep their defaults.
  // Parsed and validated here; turnstiled does not act on them yet (the daemon wiring comes
  // later).
  struct Cluster {
    // --raft-dir: where raft keeps its log, snapshots and metadata. Empty = single node (the
    // default); non-empty turns cluster mode on.
    std::string raft_dir;
    // --node-id: this node's raft id, 1..2^63-1. Required in cluster mode (0 only when off).
    std::uint64_t node_id = 0;
    // --raft-addr: where this node listens for raft traffic, as its peers reach it (canonical
    // host:port, never a wildcard host). Required in cluster mode. Differs from the TCP and HTTP
    // listeners' addresses.
    std::string raft_addr;
    // --cluster-peers: every voter of the initial cluster, this node included, in the order
    // given. Empty = not given. When given, it lists node_id, with raft_addr as its raft address;
    // ids, and all the addresses in it (raft and client), are distinct.
    std::vector<ClusterPeer> peers;
    // --advertise-addr: the client address other nodes tell clients to go to
    // (`error_not_leader <addr>`). Never empty in cluster mode after parsing: by default this
    // node's client address in peers, else --host:--port (an error when --host is a wildcard
    // such as 0.0.0.0 or ::, or --port is 0: then the flag is required).
    std::string advertise_addr;
    // --cluster-bootstrap: write the initial configuration (peers) into an empty raft_dir.
    // Requires peers.
    bool bootstrap = false;
    // --orphan-ttl: seconds an orphaned holder or waiter is kept for its session to come back;
    // 0..9223372036, 0 = off. Must be the same on every node.
    std::int64_t orphan_ttl_s = 0;
    // --cluster-secret / --cluster-secret-file: the secret the nodes authenticate each other
    // with; resolved like auth_token (trimmed, non-empty, one line). Required in cluster mode.
    std::optional<std::string> secret;
    // --admin-token / --admin-token-file: the token of the HTTP admin routes (force-release;
    // in cluster mode also the membership changes); resolved like auth_token. Unset = the admin
    // routes are off. Allowed without cluster mode (it lives here for history).
    std::optional<std::string> admin_token;
    // --raft-election-timeout-ms: 100..60000.
    std::int64_t election_timeout_ms = 1000;
    // --raft-heartbeat-timeout-ms: 10..10000, and less than election_timeout_ms.
    std::int64_t heartbeat_timeout_ms = 100;
    // --raft-snapshot-threshold: entries applied between two snapshots; 16..4294967295 (raft
    // takes an unsigned).
    std::int64_t snapshot_threshold = 8192;
    // --raft-snapshot-trailing: entries kept in the log behind a snapshot; 0..4294967295.
    std::int64_t snapshot_trailing = 1024;
    // --raft-min-free-mb: below this much free space in raft_dir the node does not start, and a
    // running node leaves (docs/cluster.md, "A full disk"); 0..1048576, 0 = no check.
    std::int64_t min_free_mb = 64;
    // --raft-start-timeout-s: a node whose raft directory has not loaded in this long exits 74
    // (docs/cluster.md, "A damaged raft directory"); 1..86400.
    std::int64_t start_timeout_s = 120;

    bool enabled() const { return !raft_dir.empty(); }
  };
  Cluster cluster;

  // Hooks that exist for the test suite only (tests/integration, tests/net), set by the
  // --test-* flags. They are flag only (no environment variable, so a stray variable can never
  // change a production server) and hidden from --help.
  struct TestHooks {
    // --test-wall-clock-offset-s: seconds added to the wall clock that seeds the fence counter,
    // so a test can restart the daemon "with the clock set back".
    std::int64_t wall_clock_offset_s = 0;
    // --test-monotonic-offset-s: seconds added to every monotonic reading of the process, so
    // that the nodes of a loopback cluster read clocks as far apart as separate machines would.
    std::int64_t monotonic_offset_s = 0;
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
