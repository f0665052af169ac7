// Cluster: a list of independent servers with keys placed on them the way the dflockd clients
// place them (placement.h): the server at CRC-32(key) mod the number of servers. Each server owns
// its keys outright; there is no replication or failover (a key whose server is down cannot be
// locked).
//
// Thread affinity: const methods are safe from any thread; each call opens its own connection.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "client/connection.h"
#include "client/guard.h"
#include "client/result.h"

namespace turnstile::client {

class Cluster {
 public:
  // Precondition: servers is not empty.
  explicit Cluster(std::vector<Endpoint> servers, ConnectOptions options = {});

  const std::vector<Endpoint>& servers() const { return servers_; }
  const ConnectOptions& options() const { return options_; }
  const Endpoint& server_for(std::string_view key) const;

  // A new connection to the server that owns `key`.
  Result<Connection> connect_for(std::string_view key) const;

  // Connects to the key's server and acquires there (guard.h).
  Result<Lock> lock(std::string key, GuardOptions options = {}) const;
  Result<Semaphore> semaphore(std::string key, std::int64_t limit, GuardOptions options = {}) const;
  Result<PendingLock> enqueue_lock(std::string key, GuardOptions options = {}) const;
  Result<PendingSemaphore> enqueue_semaphore(std::string key, std::int64_t limit,
                                             GuardOptions options = {}) const;
  Result<RwLock> rw_lock(std::string key, RwMode mode, GuardOptions options = {}) const;
  Result<PendingRwLock> enqueue_rw_lock(std::string key, RwMode mode,
                                        GuardOptions options = {}) const;

 private:
  std::vector<Endpoint> servers_;
  ConnectOptions options_;
};

}  // namespace turnstile::client
