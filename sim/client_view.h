// ClientView: what a simulated client knows from the replies it read: the tokens it holds, per
// key, and the keys it enqueued (two-phase) and when; for read-write locks, also which of them
// are read slots. Every simulated TCP client (sim/tcp_client.h), of the single-node workload and
// of the cluster profiles, keeps one and hands it every reply.
//
// Thread affinity: a plain value.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>

#include "core/protocol.h"
#include "sim/checker.h"
#include "sim/history.h"

namespace turnstile::sim {

struct ClientView {
  std::map<ResourceKey, core::Token> held;
  std::map<ResourceKey, std::int64_t> enqueued;  // -> call time of its `e`
  // Read-write keys whose token in `held` is a read slot, and whose `re`/`we` in `enqueued` was
  // an `re`.
  std::set<ResourceKey> held_shared;
  std::set<ResourceKey> enqueued_shared;

  // The reply to `request` (sent at `sent_ns`, History operation `op`, 0 when not recorded):
  // a grant is held, an `ok` release lets go, a renew that fails means the lease ended (unless it
  // named the other kind of a read-write slot, which fails whatever the lease), a `queued`
  // enqueue is remembered, and a two-phase wait's call is widened to its `e` (the grant may have
  // happened any time after it). Returns the token the reply granted, if any.
  std::optional<core::Token> on_reply(const core::Request& request, const core::Reply& reply,
                                      std::int64_t sent_ns, std::uint64_t op, History& history);

  // The connection is gone: what was enqueued on it is too.
  void forget_enqueued() {
    enqueued.clear();
    enqueued_shared.clear();
  }
};

}  // namespace turnstile::sim
