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

Result<Lock> Cluster::lock(std::string key, GuardOptions options) const {
  auto connection = connect_for(key);
  if (!connection) return connection.error();
  return Lock::acquire(std::move(*connection), std::move(key), std::move(options));
}

Result<Semaphore> Cluster::semaphore(std::string key, std::int64_t limit,
                                     GuardOptions options) const {
  auto connection = connect_for(key);
  if (!connection) return connection.error();
  return Semaphore::acquire(std::move(*connection), std::move(key), limit, std::move(options));
}

Result<PendingLock> Cluster::enqueue_lock(std::string key, GuardOptions options) const {
  auto connection = connect_for(key);
  if (!connection) return connection.error();
  return Lock::enqueue(std::move(*connection), std::move(key), std::move(options));
}

Result<PendingSemaphore> Cluster::enqueue_semaphore(std::string key, std::int64_t limit,
                                                    GuardOptions options) const {
  auto connection = connect_for(key);
  if (!connection) return connection.error();
  return Semaphore::enqueue(std::move(*connection), std::move(key), limit, std::move(options));
}

}  // namespace turnstile::client
