#include "net/shared_state.h"

#include <algorithm>

namespace turnstile::net {

SharedState::SharedState(const Config& server_config)
    : config(server_config),
      signals(core::SignalHubConfig{
          .max_subscriptions = static_cast<std::size_t>(server_config.max_subscriptions),
          .max_subscriptions_total =
              static_cast<std::size_t>(server_config.max_subscriptions_total),
          .queue_max = static_cast<std::size_t>(server_config.signal_queue)}),
      budget(server_config.max_locks) {
  for (int shard = 0; shard < std::max(server_config.threads, 1); ++shard) {
    tcp_latencies.push_back(std::make_unique<TcpLatencies>());
  }
}

bool SharedState::Budget::try_take() {
  std::int64_t used = used_.load(std::memory_order_relaxed);
  while (used < max_) {
    if (used_.compare_exchange_weak(used, used + 1, std::memory_order_relaxed)) return true;
  }
  return false;
}

void SharedState::Budget::give_back() { used_.fetch_sub(1, std::memory_order_relaxed); }

bool SharedState::admit(const std::string& ip) {
  const std::int64_t max_total = config.max_connections;
  std::int64_t open = connections_open.load(std::memory_order_relaxed);
  do {
    if (max_total > 0 && open >= max_total) return false;
  } while (!connections_open.compare_exchange_weak(open, open + 1, std::memory_order_relaxed));
  std::lock_guard<std::mutex> lock(per_ip_mutex);
  std::int64_t& count = per_ip[ip];
  if (config.max_connections_per_ip > 0 && count >= config.max_connections_per_ip) {
    if (count == 0) per_ip.erase(ip);
    connections_open.fetch_sub(1, std::memory_order_relaxed);
    return false;
  }
  ++count;
  return true;
}

TcpLatencyTotals SharedState::tcp_latency(core::Command command) const {
  TcpLatencyTotals totals;
  for (const auto& table : tcp_latencies) {
    (*table)[static_cast<std::size_t>(command)].add_to(totals);
  }
  return totals;
}

void TcpLatency::record(core::Duration elapsed) {
  const double seconds = elapsed.seconds_double();
  std::size_t bucket = 0;
  while (bucket < kLatencyBuckets.size() && seconds > kLatencyBuckets[bucket]) ++bucket;
  const auto bump = [](std::atomic<std::uint64_t>& value, std::uint64_t by) {
    value.store(value.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  };
  bump(by_bucket_[bucket], 1);
  bump(sum_ns_, static_cast<std::uint64_t>(std::max<std::int64_t>(elapsed.ns(), 0)));
}

void TcpLatency::add_to(TcpLatencyTotals& totals) const {
  std::uint64_t below = 0;
  for (std::size_t i = 0; i < by_bucket_.size(); ++i) {
    below += by_bucket_[i].load(std::memory_order_relaxed);
    if (i < totals.buckets.size()) totals.buckets[i] += below;
  }
  totals.count += below;
  totals.sum_ns += sum_ns_.load(std::memory_order_relaxed);
}

void SharedState::release(const std::string& ip) {
  connections_open.fetch_sub(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(per_ip_mutex);
  auto it = per_ip.find(ip);
  if (it != per_ip.end() && --it->second <= 0) per_ip.erase(it);
}

core::EngineConfig engine_config(const Config& config, std::uint64_t fence_floor) {
  core::EngineConfig engine;
  engine.default_lease_s = config.default_lease_ttl_s;
  engine.gc_max_idle = core::Duration::seconds(config.gc_max_idle_s);
  engine.lock_delay = core::Duration::seconds(config.lock_delay_s);
  engine.resources_max = config.max_locks;  // on one node superseded by the shared budget
  engine.waiters_max = config.max_waiters;
  engine.fence_floor = core::Fence{fence_floor};
  return engine;
}

}  // namespace turnstile::net
