// SignalBus: the daemon's one signal hub (core/signal_hub.h), shared by every shard's router
// behind a mutex. Each call is one short critical section: a listen or unlisten is a trie update,
// a signal one match and one plan, whatever the number of shards; the frames then go to the
// shards as the routers' messages, outside the lock. In cluster mode a client's signal then goes
// to the other members (forward(), net/signal_peers.h), outside the lock too.
//
// Thread affinity: any thread.
#pragma once

#include <atomic>
#include <mutex>
#include <optional>

#include "core/signal_hub.h"
#include "net/signal_peers.h"

namespace turnstile::net {

class SignalBus final : public core::SignalBroker {
 public:
  explicit SignalBus(const core::SignalHubConfig& config) : hub_(config) {}

  core::Status listen(core::SessionId session, std::string_view pattern,
                      std::string_view group) override {
    const std::lock_guard lock(mutex_);
    return hub_.listen(session, pattern, group);
  }
  void unlisten(core::SessionId session, std::string_view pattern,
                std::string_view group) override {
    const std::lock_guard lock(mutex_);
    hub_.unlisten(session, pattern, group);
  }
  std::size_t publish(std::string_view channel, std::string_view payload,
                      core::SignalFanout& out) override {
    const std::lock_guard lock(mutex_);
    return hub_.publish(channel, payload, out);
  }
  void written(core::SessionId session, std::size_t frames) override {
    const std::lock_guard lock(mutex_);
    hub_.written(session, frames);
  }
  void close(core::SessionId session) override {
    const std::lock_guard lock(mutex_);
    hub_.close(session);
  }
  std::vector<core::SignalChannelStats> channels() override {
    const std::lock_guard lock(mutex_);
    return hub_.channels();
  }
  core::SignalCounters counters() override {
    const std::lock_guard lock(mutex_);
    return hub_.counters();
  }
  void forward(std::string_view channel, std::string_view payload) override {
    if (SignalPeers* peers = peers_.load(std::memory_order_acquire)) {
      peers->forward(channel, payload);
    }
  }
  // Cluster mode: where forward() sends signals (null: nowhere). Set by the server before the
  // shards start, cleared after they stop.
  void set_peers(SignalPeers* peers) { peers_.store(peers, std::memory_order_release); }
  // The links' counters, for /metrics; nullopt on one node.
  std::optional<SignalPeersCounters> peer_counters() const {
    const SignalPeers* peers = peers_.load(std::memory_order_acquire);
    if (peers == nullptr) return std::nullopt;
    return peers->counters();
  }
  // A connection closed itself as a slow consumer (core::Session::push_signal), for /metrics.
  void note_slow_consumer() {
    const std::lock_guard lock(mutex_);
    hub_.note_slow_consumer();
  }

 private:
  std::mutex mutex_;
  core::SignalHub hub_;  // guarded by mutex_
  std::atomic<SignalPeers*> peers_{nullptr};
};

}  // namespace turnstile::net
