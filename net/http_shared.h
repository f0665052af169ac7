// HttpShared: what the HttpServers of every shard share (net/http_server.h): the HTTP session
// caps and the per-IP rate limit, which are for the whole process, the per-IP connection counts,
// and every shard's request counters and latencies for /metrics. Each part has its own lock,
// held briefly.
//
// Thread affinity: any shard's thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>

#include "core/http_sessions.h"
#include "core/time.h"
#include "net/config.h"
#include "net/shared_state.h"

namespace turnstile::net {

// What the HttpServers of every shard share: the caps and the rate limit are for the process,
// and /metrics reports every shard's requests. Each part has its own lock, held briefly.
class HttpShared {
 public:
  explicit HttpShared(const Config& config);
  HttpShared(const HttpShared&) = delete;
  HttpShared& operator=(const HttpShared&) = delete;

  // core::SessionCaps for every shard's core::HttpSessions.
  core::HttpSessionQuota& quota() { return quota_; }
  bool rate_allow(core::Instant now, const std::string& ip);
  void rate_sweep(core::Instant now);
  // Per-IP HTTP connections (--http-max-connections-per-ip): false when `ip` is at the cap.
  bool admit_connection(const std::string& ip);
  void release_connection(const std::string& ip);

  // Metrics: every HTTP request, by method, route pattern and status, and its latency.
  struct RequestCounter {
    std::uint64_t count = 0;
    double seconds_sum = 0;
  };
  struct Histogram {
    std::array<std::uint64_t, kLatencyBuckets.size()> buckets{};
    std::uint64_t count = 0;
    double sum = 0;
  };
  // `method` and `route` must be static strings.
  void record(std::string_view method, std::string_view route, int code, double seconds);
  // A copy, for /metrics.
  void read_metrics(
      std::map<std::tuple<std::string_view, std::string_view, int>, RequestCounter>& requests,
      std::map<std::string_view, Histogram>& latency);

  std::atomic<std::uint64_t> forwarded{0};  // requests answered by another shard's HttpServer
  // Holders freed by admin force-releases (DELETE /v1/admin/...) this server answered.
  std::atomic<std::uint64_t> forced_releases{0};

 private:
  class Quota final : public core::HttpSessionQuota {
   public:
    Quota(std::int64_t max, std::int64_t per_ip) : caps_(max, per_ip) {}
    core::HttpCreate take(const std::string& ip) override;
    void give_back(const std::string& ip) override;

   private:
    std::mutex mutex_;
    core::SessionCaps caps_;
  };

  const Config& config_;
  Quota quota_;
  std::mutex limiter_mutex_;
  core::RateLimiter limiter_;
  std::mutex connections_mutex_;
  std::unordered_map<std::string, std::int64_t> connections_per_ip_;
  std::mutex metrics_mutex_;
  std::map<std::tuple<std::string_view, std::string_view, int>, RequestCounter> requests_;
  std::map<std::string_view, Histogram> latency_;  // by route pattern
};

}  // namespace turnstile::net
