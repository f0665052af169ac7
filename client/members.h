// Members: the nodes of one replicated turnstiled cluster (docs/cluster.md), and the way to the one
// that leads. Unlike Cluster (cluster.h: independent servers, each key placed on one of them),
// every member holds every key and only the leader answers the keyed commands.
//
// connect_leader() connects to the leader it last found, then to the other members in order,
// those that did not answer in its previous round last. On each it binds the stable ref and asks
// `barrier`, waiting at most probe_timeout: `ok` comes from a leader that has applied an entry of
// its term. `error_not_leader <addr>` sends it to the node named next, unless that node was tried
// already in the same round (a follower that has not seen the election yet names the old,
// stopped leader; a node that names itself would hold the round forever); a follower that knows no
// leader names none, and the next member is tried. A round that found no leader is followed by a
// jittered sleep (first_backoff, doubling up to max_backoff, each sleep drawn from [half, all] of
// it), then another round, until the deadline. It sends nothing that changes state (stable-ref and
// barrier only), so trying several nodes never grants anything twice.
//
// The stable ref: FailoverOptions::stable_ref, or one made per Members object from random bytes
// ("turnstile-client-<16 hex>"). Every connection it makes carries it. After a failover (or any
// lost connection) a new connection with the same ref takes back the slots and queue places of
// the old one, when the servers run with --orphan-ttl (docs/semantics.md, "Stable refs"); the
// guards made here do that themselves (guard.h, GuardOptions::reconnect).
//
// Thread affinity: every method may be called from several threads at once; the guards hold a
// share of the object's state, so they may outlive it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "client/connection.h"
#include "client/guard.h"
#include "client/result.h"

namespace turnstile::client {

struct FailoverOptions {
  std::string stable_ref;              // empty: one made per Members object
  Milliseconds first_backoff{25};      // the first sleep after a round without a leader
  Milliseconds max_backoff{1000};      // the longest sleep between rounds
  Milliseconds leader_timeout{15000};  // how long lock() and semaphore() look for a leader
  // How long one node may take to connect and to answer stable-ref and barrier before the next
  // is tried: a stopped node (SIGSTOP, a hung machine) costs this much, not a whole reply timeout.
  Milliseconds probe_timeout{1000};
};

class Members {
 public:
  // Precondition: members is not empty.
  explicit Members(std::vector<Endpoint> members, ConnectOptions options = {},
                   FailoverOptions failover = {});

  const std::vector<Endpoint>& members() const;
  const std::string& stable_ref() const;
  // The leader found last, if any.
  std::optional<Endpoint> last_leader() const;

  // A connection to the leader with the stable ref bound, or the last error once `timeout` has
  // passed (kNotLeader: members answered but none led; kConnect: none could be reached).
  Result<Connection> connect_leader(Milliseconds timeout) const;

  // Acquires on the leader (guard.h) with GuardOptions::reconnect set to find the leader again,
  // so the guard rides through failovers. An acquire whose outcome is unknown (the connection
  // failed, or the node stopped leading) is sent again to the next leader under the same ref:
  // it takes back its own slot or queue place there, never a second one.
  Result<Lock> lock(std::string key, GuardOptions options = {}) const;
  Result<Semaphore> semaphore(std::string key, std::int64_t limit, GuardOptions options = {}) const;
  // A read or write lock (guard.h, RwLock), likewise: a read lock taken back under the same ref
  // stays a read lock, a write lock a write lock.
  Result<RwLock> rw_lock(std::string key, RwMode mode, GuardOptions options = {}) const;

  struct Shared;  // implementation detail (members.cc)

 private:
  std::shared_ptr<Shared> shared_;
};

}  // namespace turnstile::client
