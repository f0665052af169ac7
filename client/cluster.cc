#include "client/cluster.h"

#include <utility>

#include "client/placement.h"
#include "core/assert.h"

namespace turnstile::client {

Cluster::Cluster(std::vector<Endpoint> servers, ConnectOptions options)
    : servers_(std::move(servers)), options_(std::move(options)) {
  TS_ASSERT(!servers_.empty());
}

const Endpoint& Cluster::server_for(std::string_view key) const {
  return servers_[server_index(key, servers_.size())];
}

Result<Connection> Cluster::connect_for(std::string_view key) const {
  if (auto valid = validate_key(key); !valid) return valid.error();
  return Connection::connect(server_for(key), options_);
}

namespace {

// Connects to the server of `key` and runs `take` (an acquire or an enqueue) there.
template <typename Take>
auto on_server_of(const Cluster& cluster, std::string_view key, Take take)
    -> decltype(take(std::declval<Connection>())) {
  auto connection = cluster.connect_for(key);
  if (!connection) return connection.error();
  return take(std::move(*connection));
}

}  // namespace

Result<Lock> Cluster::lock(std::string key, GuardOptions options) const {
  return on_server_of(*this, key, [&](Connection connection) {
    return Lock::acquire(std::move(connection), key, std::move(options));
  });
}

Result<Semaphore> Cluster::semaphore(std::string key, std::int64_t limit,
                                     GuardOptions options) const {
  return on_server_of(*this, key, [&](Connection connection) {
    return Semaphore::acquire(std::move(connection), key, limit, std::move(options));
  });
}

Result<PendingLock> Cluster::enqueue_lock(std::string key, GuardOptions options) const {
  return on_server_of(*this, key, [&](Connection connection) {
    return Lock::enqueue(std::move(connection), key, std::move(options));
  });
}

Result<PendingSemaphore> Cluster::enqueue_semaphore(std::string key, std::int64_t limit,
                                                    GuardOptions options) const {
  return on_server_of(*this, key, [&](Connection connection) {
    return Semaphore::enqueue(std::move(connection), key, limit, std::move(options));
  });
}

Result<RwLock> Cluster::rw_lock(std::string key, RwMode mode, GuardOptions options) const {
  return on_server_of(*this, key, [&](Connection connection) {
    return RwLock::acquire(std::move(connection), key, mode, std::move(options));
  });
}

Result<PendingRwLock> Cluster::enqueue_rw_lock(std::string key, RwMode mode,
                                               GuardOptions options) const {
  return on_server_of(*this, key, [&](Connection connection) {
    return RwLock::enqueue(std::move(connection), key, mode, std::move(options));
  });
}

}  // namespace turnstile::client
