// The two sides of a shard's thread: the loop (net/shard.h) and the hosts of sessions on it (the
// TCP connections, net/tcp_connections.h, and the HTTP API, net/http_server.h).
//
// A host owns some of the shard's sessions. It submits their requests, cancels and closes to the
// shard's router, and the shard hands it back the router's events for them. It calls settle()
// after each event of its own (a socket, a timer), so that the router's output is delivered and
// every host serviced before the loop goes on; the shard never calls into a host's type, only
// through these interfaces, so no host's header is included by the shard's code.
//
// Thread affinity: every call on the shard's own thread.
#pragma once

#include <event2/event.h>

#include <cstddef>

#include "core/router.h"
#include "core/time.h"
#include "core/types.h"

namespace turnstile::net {

// What the shard's loop offers the hosts on its thread.
class ShardLoop {
 public:
  virtual ~ShardLoop() = default;
  virtual std::size_t index() const = 0;
  virtual event_base* base() const = 0;
  virtual core::Router& router() = 0;
  // The instant of this loop turn: the monotonic clock read once per turn (Shard::turn_now).
  virtual core::Instant turn_now() = 0;
  // After an event of the host's own: router output delivered, hosts serviced, timers re-armed.
  virtual void settle() = 0;
};

// A host of sessions.
class SessionHost {
 public:
  virtual ~SessionHost() = default;
  virtual bool owns(core::SessionId session) const = 0;
  // A router event for one of its sessions: a reply, a parked notice, a cancellation, stats.
  virtual void on_session_event(core::Instant now, core::SessionEvent& event) = 0;
};

}  // namespace turnstile::net
