#include "core/session_port.h"

#include <utility>

#include "core/assert.h"
#include "core/stats.h"

namespace turnstile::core {

SessionPort::SessionPort(SessionId id, const SessionConfig& config, Instant now)
    : session_(id, config, now) {}

Delivered SessionPort::deliver(Instant now, const SessionEvent& event, std::int64_t open_sessions) {
  Delivered delivered;
  delivered.kind = event.kind;
  switch (event.kind) {
    case SessionEvent::Kind::kSignal:
      session_.push_signal(*event.frame);
      return delivered;
    case SessionEvent::Kind::kLost:
      session_.push_lost(*event.frame);
      return delivered;
    case SessionEvent::Kind::kSlowConsumer:
      session_.close(CloseReason::kSlowConsumer);
      return delivered;
    default:
      break;
  }
  // The rest concern the request in flight.
  TS_ASSERT(session_.in_flight());
  switch (event.kind) {
    case SessionEvent::Kind::kParked:
      TS_ASSERT(!parked_);
      parked_ = true;
      session_.on_parked();
      break;
    case SessionEvent::Kind::kCancelled:
      TS_ASSERT(parked_);
      parked_ = false;
      session_.on_cancelled();
      break;
    case SessionEvent::Kind::kReply:
      TS_ASSERT(event.reply.status != Status::kParked);
      delivered.after_park = parked_;
      parked_ = false;
      delivered.command = routed_command_;
      delivered.latency = now - routed_at_;
      session_.on_reply(now, event.reply);
      break;
    default:
      TS_ASSERT(event.kind == SessionEvent::Kind::kStats);
      delivered.command = routed_command_;
      delivered.latency = now - routed_at_;
      session_.on_reply(now, Reply::stats(encode_stats_json(open_sessions, event.stats)));
      break;
  }
  return delivered;
}

PortEffects SessionPort::pump(Instant now) {
  PortEffects effects;
  // One request at most: once routed it is in flight, and the session starts nothing more until
  // its reply (a give-back after close is in flight the same way).
  if (std::optional<Request> request = session_.next_request(now)) {
    TS_ASSERT(is_routed_command(request->command));
    routed_command_ = request->command;
    routed_at_ = now;
    effects.request = std::move(request);
  }
  if (session_.closed() && !close_told_) {
    close_told_ = true;
    effects.close = true;
  }
  effects.frames_written = session_.take_frames_written();
  effects.next_deadline = session_.next_deadline();
  effects.finished = close_told_ && session_.finished();
  return effects;
}

std::string SessionPort::take_output() {
  std::string bytes(session_.output());
  session_.consume_output(bytes.size());
  session_.after_write();
  return bytes;
}

}  // namespace turnstile::core
