#include "net/metrics_text.h"

#include <array>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string_view>
#include <tuple>

#include "core/protocol.h"
#include "net/signal_peers.h"

namespace turnstile::net {
namespace {

std::string prometheus_escape(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// One histogram's lines in the request-latency buckets (cumulative counts). `labels`: the
// series' labels, escaped and joined (`path="/v1/stats"`), or empty.
void append_histogram(std::string& text, const std::string& name, const std::string& labels,
                      const std::array<std::uint64_t, kLatencyBuckets.size()>& buckets,
                      std::uint64_t count, double sum) {
  const std::string open = labels.empty() ? "{" : "{" + labels + ",";
  const std::string only = labels.empty() ? "" : "{" + labels + "}";
  char number[64];
  for (std::size_t i = 0; i < kLatencyBuckets.size(); ++i) {
    std::snprintf(number, sizeof number, "%g", kLatencyBuckets[i]);
    text += name + "_bucket" + open + "le=\"" + number + "\"} " + std::to_string(buckets[i]) + "\n";
  }
  text += name + "_bucket" + open + "le=\"+Inf\"} " + std::to_string(count) + "\n";
  std::snprintf(number, sizeof number, "%.9g", sum);
  text += name + "_sum" + only + " " + number + "\n";
  text += name + "_count" + only + " " + std::to_string(count) + "\n";
}

// Cluster mode's turnstile_raft_* families (docs/cluster.md, "Observing a cluster").
std::string raft_metrics_text(const ClusterMetrics& metrics) {
  std::string text;
  const auto family = [&text](const char* name, const char* type, const char* help,
                              std::uint64_t value) {
    text += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" +
            name + " " + std::to_string(value) + "\n";
  };
  const RaftStatus& raft = metrics.raft;
  family("turnstile_raft_term", "gauge", "this node's current raft term", raft.term);
  family("turnstile_raft_commit_index", "gauge", "highest log index known to be committed",
         raft.commit_index);
  family("turnstile_raft_last_index", "gauge", "index of the last entry in this node's log",
         raft.last_index);
  family("turnstile_raft_applied_index", "gauge", "highest log index applied on this node",
         raft.applied_index);
  family("turnstile_raft_snapshot_index", "gauge",
         "last index covered by this node's newest snapshot (0: none)", raft.snapshot_index);
  family("turnstile_raft_is_leader", "gauge", "1 while raft says this node leads",
         raft.role == core::RaftRole::kLeader ? 1 : 0);
  family("turnstile_raft_leader_known", "gauge", "1 while this node knows a leader",
         raft.leader_id != 0 ? 1 : 0);
  family("turnstile_raft_voters", "gauge", "voters in the current configuration",
         raft.voters.size());
  family("turnstile_raft_proposals_total", "counter", "commands this node handed to raft",
         raft.proposals);
  family("turnstile_raft_apply_calls_total", "counter",
         "raft_apply calls that carried them (fewer than proposals: batching)",
         raft.raft_apply_calls);
  family("turnstile_raft_entries_applied_total", "counter",
         "log entries of the lock service applied on this node", metrics.entries_applied);
  family("turnstile_raft_leadership_changes_total", "counter",
         "times this node started or stopped leading", metrics.leadership_changes);

  const TcpLatencyTotals& latency = metrics.apply_latency;
  text +=
      "# HELP turnstile_raft_apply_latency_seconds on the leader, from proposing an entry to "
      "applying it\n"
      "# TYPE turnstile_raft_apply_latency_seconds histogram\n";
  append_histogram(text, "turnstile_raft_apply_latency_seconds", "", latency.buckets, latency.count,
                   static_cast<double>(latency.sum_ns) / 1e9);
  return text;
}

// The page being written, with one line maker per family type.
class Page {
 public:
  void gauge(const char* name, const char* help, double value) {
    char line[256];
    std::snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s gauge\n%s %.17g\n", name, help, name,
                  name, value);
    text += line;
  }
  void counter(const char* name, const char* help, std::uint64_t value) {
    text += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n" + name +
            " " + std::to_string(value) + "\n";
  }
  // One series of a histogram family whose HELP and TYPE lines are already written.
  template <typename Buckets>
  void histogram(const std::string& name, const std::string& label, std::string_view value,
                 const Buckets& buckets, std::uint64_t count, double sum) {
    append_histogram(text, name, label + "=\"" + prometheus_escape(value) + "\"", buckets, count,
                     sum);
  }

  std::string text;
};

void engine_gauges(Page& page, const MetricsSources& sources) {
  // Over every key: the snapshot's lists stop at 10,000 entries each, its totals do not.
  const core::StatsTotals& totals = sources.snapshot.totals;
  SharedState& shared = sources.shared;
  const auto sessions =
      static_cast<double>(shared.http_sessions_live.load(std::memory_order_relaxed));
  const auto tcp = static_cast<double>(shared.connections_open.load(std::memory_order_relaxed));
  page.gauge("turnstile_ready",
             shared.cluster == nullptr
                 ? "1 while the server accepts work, 0 while draining"
                 : "1 while the server accepts work and knows a leader, 0 while draining or "
                   "leaderless",
             sources.ready ? 1 : 0);
  page.gauge("turnstile_uptime_seconds", "seconds since start", sources.uptime.seconds_double());
  page.gauge("turnstile_connections", "TCP connections plus live HTTP sessions", tcp + sessions);
  page.gauge("turnstile_http_sessions", "live HTTP sessions", sessions);
  page.gauge("turnstile_locks_held", "locks with a holder", static_cast<double>(totals.locks_held));
  page.gauge("turnstile_lock_waiters", "waiters queued on locks",
             static_cast<double>(totals.lock_waiters));
  page.gauge("turnstile_semaphore_holders", "holders of semaphores (limit > 1)",
             static_cast<double>(totals.semaphore_holders));
  page.gauge("turnstile_semaphore_waiters", "waiters queued on semaphores (limit > 1)",
             static_cast<double>(totals.semaphore_waiters));
  page.gauge("turnstile_rwlock_readers", "read tokens held on read-write locks",
             static_cast<double>(totals.rw_readers));
  page.gauge("turnstile_rwlock_writers", "read-write locks held by a writer",
             static_cast<double>(totals.rw_writers));
  page.gauge("turnstile_rwlock_waiters", "readers and writers queued on read-write locks",
             static_cast<double>(totals.rw_waiters));
}

void signal_families(Page& page, SharedState& shared) {
  const core::SignalCounters signals = shared.signals.counters();
  page.gauge("turnstile_signal_listeners",
             "signal subscriptions (pattern and group) of open connections",
             static_cast<double>(signals.subscriptions));
  page.counter("turnstile_signals_published_total", "signal commands answered", signals.published);
  page.counter("turnstile_signal_deliveries_total", "signal frames queued for listeners",
               signals.delivered);
  page.counter("turnstile_signal_slow_consumers_total",
               "listeners closed because their signal queue was full", signals.slow_consumers);
  page.text +=
      "# HELP turnstile_signal_listens_refused_total listens refused by a subscription cap: "
      "--max-subscriptions (connection) or --max-subscriptions-total (server)\n"
      "# TYPE turnstile_signal_listens_refused_total counter\n"
      "turnstile_signal_listens_refused_total{cap=\"connection\"} " +
      std::to_string(signals.refused_per_session) +
      "\n"
      "turnstile_signal_listens_refused_total{cap=\"server\"} " +
      std::to_string(signals.refused_total) + "\n";
  if (const std::optional<SignalPeersCounters> peers = shared.signals.peer_counters()) {
    page.gauge("turnstile_signal_peer_links", "links to the other members that forward signals",
               static_cast<double>(peers->connected));
    page.counter("turnstile_signal_forwarded_total", "signal copies sent to other members",
                 peers->forwarded);
    page.counter("turnstile_signal_forward_dropped_total",
                 "signal copies not sent to a member (link down, backed up, or queue full)",
                 peers->dropped);
  }
}

void server_counters(Page& page, const MetricsSources& sources) {
  const core::StatsCounters& counters = sources.snapshot.counters;
  page.counter("turnstile_grants_total", "grants (each mints a fence), by this node's engines",
               counters.grants);
  page.counter("turnstile_lease_expiries_total", "holders whose lease ran out before a release",
               counters.lease_expiries);
  page.counter("turnstile_wait_timeouts_total", "waiters whose timeout ran out before a grant",
               counters.wait_timeouts);
  page.counter("turnstile_fence_exhausted_total",
               "grants refused for want of a fence (the fence journal has none durable yet)",
               counters.fence_exhausted);
  page.counter("turnstile_auth_failures_total",
               "requests refused for a wrong or missing auth or admin token (TCP and HTTP)",
               sources.shared.auth_failures.load(std::memory_order_relaxed));
  page.gauge("turnstile_max_connections", "the TCP connection cap (--max-connections); 0: none",
             static_cast<double>(sources.shared.config.max_connections));
  page.counter("turnstile_forced_releases_total",
               "holders freed by admin force-releases (DELETE /v1/admin/...) this server answered",
               sources.http.forced_releases.load(std::memory_order_relaxed));
}

void http_families(Page& page, HttpShared& http) {
  page.text +=
      "# HELP turnstile_http_forwarded_total HTTP requests answered by the thread that is home to "
      "their session, not the one that read them\n"
      "# TYPE turnstile_http_forwarded_total counter\n"
      "turnstile_http_forwarded_total " +
      std::to_string(http.forwarded.load(std::memory_order_relaxed)) + "\n";
  std::map<std::tuple<std::string_view, std::string_view, int>, HttpShared::RequestCounter>
      requests;
  std::map<std::string_view, HttpShared::Histogram> latency;
  http.read_metrics(requests, latency);
  page.text +=
      "# HELP turnstile_http_requests_total HTTP requests by method, route pattern and status\n"
      "# TYPE turnstile_http_requests_total counter\n";
  for (const auto& [labels, requests_of] : requests) {
    const auto& [method, route, code] = labels;
    page.text += "turnstile_http_requests_total{method=\"" + prometheus_escape(method) +
                 "\",path=\"" + prometheus_escape(route) + "\",status=\"" + std::to_string(code) +
                 "\"} " + std::to_string(requests_of.count) + "\n";
  }
  page.text +=
      "# HELP turnstile_http_request_duration_seconds HTTP request latency by route pattern "
      "(long polls included)\n"
      "# TYPE turnstile_http_request_duration_seconds histogram\n";
  for (const auto& [route, histogram] : latency) {
    page.histogram("turnstile_http_request_duration_seconds", "path", route, histogram.buckets,
                   histogram.count, histogram.sum);
  }
}

void tcp_latency_family(Page& page, const SharedState& shared) {
  page.text +=
      "# HELP turnstile_tcp_request_duration_seconds TCP request latency by command, from the "
      "request being routed to its reply (blocking acquires included)\n"
      "# TYPE turnstile_tcp_request_duration_seconds histogram\n";
  for (std::size_t command = 0; command < SharedState::kCommands; ++command) {
    const TcpLatencyTotals latency = shared.tcp_latency(static_cast<core::Command>(command));
    if (latency.count == 0) continue;
    page.histogram("turnstile_tcp_request_duration_seconds", "command",
                   std::string(core::command_name(static_cast<core::Command>(command))),
                   latency.buckets, latency.count, static_cast<double>(latency.sum_ns) / 1e9);
  }
}

}  // namespace

std::string metrics_text(const MetricsSources& sources) {
  Page page;
  engine_gauges(page, sources);
  signal_families(page, sources.shared);
  server_counters(page, sources);
  http_families(page, sources.http);
  tcp_latency_family(page, sources.shared);
  if (sources.shared.cluster != nullptr)
    page.text += raft_metrics_text(sources.shared.cluster->metrics());
  return page.text;
}

}  // namespace turnstile::net
