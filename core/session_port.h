// SessionPort: the one way a driver moves a core::Session's traffic to and from its router.
//
// A session (core/session.h) decides the protocol of one connection; its router (core/router.h)
// carries its requests to engines and brings events back. Between the two, every driver (the
// daemon's TCP connections, the simulator's single-node and cluster servers, testing/loopback)
// did the same few things, and they are written here once:
//
//   router events  --deliver(event)-->  session: a reply, a parked notice, a cancellation, stats
//                                       (rendered with the driver's count of open sessions), a
//                                       signal frame, a `lost` line, a slow-consumer close
//   session        --pump(now)------->  effects, as values: the request to route, that the router
//                                       must be told of the close (once), the pushed frames the
//                                       socket took (Router::signals_written), the next deadline,
//                                       and whether the driver may forget the session
//
// Moving bytes stays the driver's: it offers input to session().on_bytes, writes output() to its
// socket, calls session().consume_output and, when the socket took all it would, after_write();
// a driver whose socket takes everything at once uses take_output().
//
// The router's contract with a session is checked on every event, in every build (TS_ASSERT): a
// reply, a parked notice, a cancellation or stats only while a request is in flight; a parked
// notice only once per request; a cancellation only of a parked request; never Reply::parked as
// a reply; a session routes only what core::is_routed_command says it must not answer itself.
//
// Thread affinity: one port belongs to its session's thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "core/protocol.h"
#include "core/router.h"
#include "core/session.h"
#include "core/time.h"
#include "core/types.h"

namespace turnstile::core {

// What one pump() asks of the driver, in this order.
struct PortEffects {
  std::optional<Request> request;        // route it: Router::submit(now, id, *request)
  bool close = false;                    // then Router::close(now, id): the session has closed
  std::size_t frames_written = 0;        // non-zero: Router::signals_written(id, frames_written)
  std::optional<Instant> next_deadline;  // call session().on_timer(now) then pump() again
  bool finished = false;                 // closed, told and settled: the driver may forget it
};

// What one deliver() did, for the driver's metrics and coverage.
struct Delivered {
  SessionEvent::Kind kind = SessionEvent::Kind::kReply;
  bool after_park = false;  // kReply: it ends a parked wait (an engine's delivery)
  // kReply and kStats: the request answered and how long it was routed.
  Command command = Command::kLock;
  Duration latency = Duration::zero();
};

class SessionPort {
 public:
  SessionPort(SessionId id, const SessionConfig& config, Instant now);

  SessionId id() const { return session_.id(); }
  Session& session() { return session_; }
  const Session& session() const { return session_; }

  // A router event for this session (Router::take_events). `open_sessions` is the count a stats
  // reply reports; it is read for kStats only.
  Delivered deliver(Instant now, const SessionEvent& event, std::int64_t open_sessions);

  // Runs the session as far as it goes now: what it answers itself goes to output(); what must
  // be routed comes back in the effects.
  PortEffects pump(Instant now);

  // For a driver whose socket takes every byte at once: the whole output, consumed, and the
  // socket's check of the signal backlog (Session::after_write) done. The frames this wrote are
  // counted in the next pump()'s frames_written.
  std::string take_output();

  bool parked() const { return parked_; }
  // The router has been told of the close (a pump returned close).
  bool close_told() const { return close_told_; }

 private:
  Session session_;
  bool parked_ = false;      // the request in flight waits in its engine
  bool close_told_ = false;  // a pump returned close
  Command routed_command_ = Command::kLock;
  Instant routed_at_;
};

}  // namespace turnstile::core
