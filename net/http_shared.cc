#include "net/http_shared.h"

#include <utility>

namespace turnstile::net {

HttpShared::HttpShared(const Config& config)
    : config_(config),
      quota_(config.http_max_sessions, config.http_max_sessions_per_ip),
      limiter_(config.http_rate_limit_per_ip, config.http_rate_limit_burst) {}

core::HttpCreate HttpShared::Quota::take(const std::string& ip) {
  std::lock_guard<std::mutex> lock(mutex_);
  return caps_.take(ip);
}

void HttpShared::Quota::give_back(const std::string& ip) {
  std::lock_guard<std::mutex> lock(mutex_);
  caps_.give_back(ip);
}

bool HttpShared::rate_allow(core::Instant now, const std::string& ip) {
  std::lock_guard<std::mutex> lock(limiter_mutex_);
  return limiter_.allow(now, ip);
}

void HttpShared::rate_sweep(core::Instant now) {
  std::lock_guard<std::mutex> lock(limiter_mutex_);
  limiter_.sweep(now);
}

bool HttpShared::admit_connection(const std::string& ip) {
  std::lock_guard<std::mutex> lock(connections_mutex_);
  std::int64_t& count = connections_per_ip_[ip];
  if (config_.http_max_connections_per_ip > 0 && count >= config_.http_max_connections_per_ip) {
    if (count == 0) connections_per_ip_.erase(ip);
    return false;
  }
  ++count;
  return true;
}

void HttpShared::release_connection(const std::string& ip) {
  std::lock_guard<std::mutex> lock(connections_mutex_);
  auto count = connections_per_ip_.find(ip);
  if (count != connections_per_ip_.end() && --count->second <= 0) connections_per_ip_.erase(count);
}

void HttpShared::record(std::string_view method, std::string_view route, int code, double seconds) {
  std::lock_guard<std::mutex> lock(metrics_mutex_);
  RequestCounter& counter = requests_[std::make_tuple(method, route, code)];
  ++counter.count;
  counter.seconds_sum += seconds;
  Histogram& histogram = latency_[route];
  for (std::size_t i = 0; i < kLatencyBuckets.size(); ++i) {
    if (seconds <= kLatencyBuckets[i]) ++histogram.buckets[i];
  }
  ++histogram.count;
  histogram.sum += seconds;
}

void HttpShared::read_metrics(
    std::map<std::tuple<std::string_view, std::string_view, int>, RequestCounter>& requests,
    std::map<std::string_view, Histogram>& latency) {
  std::lock_guard<std::mutex> lock(metrics_mutex_);
  requests = requests_;
  latency = latency_;
}

}  // namespace turnstile::net
