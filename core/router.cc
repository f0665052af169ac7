#include "core/router.h"

#include <utility>

#include "core/assert.h"
#include "core/canary.h"
#include "core/routing.h"

namespace turnstile::core {

Router::Router(const RouterConfig& config, Engine& engine, EngineObserver* observer)
    : config_(config), engine_(&engine), observer_(observer) {
  TS_ASSERT(config.shards >= 1 && config.index < config.shards && !config.replicated);
  TS_ASSERT(config.session_tag < (1U << (64 - kSessionTagShift)));
}

Router::Router(const RouterConfig& config) : config_(config), engine_(nullptr), observer_(nullptr) {
  TS_ASSERT(config.shards >= 1 && config.index < config.shards && config.replicated);
  TS_ASSERT(config.session_tag < (1U << (64 - kSessionTagShift)));
}

SessionId Router::new_session_id() {
  const std::uint64_t number = next_sequence_++ * config_.shards + config_.index;
  TS_ASSERT(number <= kSessionNumberMask);
  return SessionId{(std::uint64_t{config_.session_tag} << kSessionTagShift) | number};
}

std::size_t Router::shard_of(const Request& request) const {
  if (config_.replicated) return replicated_endpoint();
  return core::shard_of(request_namespace(request), request.key, config_.shards);
}

// ---- sessions owned here
// -------------------------------------------------------------------------

bool Router::leaves_session_state(Command command) {
  switch (command_operation(command)) {
    case Operation::kAcquire:
    case Operation::kEnqueue:
    case Operation::kWait:
      return true;
    default:
      return false;  // release and renew act on a token, whoever holds it
  }
}

void Router::submit(Instant now, SessionId session, const Request& request) {
  TS_ASSERT(owner_of(session) == config_.index);
  if (request.command == Command::kStats) {
    StatsGather& gather = stats_[session.value];
    TS_ASSERT(gather.parts_left == 0);  // one request in flight per session
    gather.snapshot = StatsSnapshot{};
    if (config_.replicated) {
      if (config_.signals != nullptr) {
        gather.snapshot.signal_channels = config_.signals->channels();
      }
      gather.parts_left = 1;
      send(replicated_endpoint(), message::StatsRequest{session});
      return;
    }
    if (config_.signals != nullptr) gather.snapshot.signal_channels = config_.signals->channels();
    gather.parts_left = config_.shards;
    for (std::size_t shard = 0; shard < config_.shards; ++shard) {
      if (shard == config_.index) {
        stats_here(now, session);
      } else {
        send(shard, message::StatsRequest{session});
      }
    }
    return;
  }
  if (is_signal_command(request.command)) {
    run_signal_request(session, request);
    return;
  }
  TS_ASSERT(is_engine_command(request.command));
  const std::size_t target = shard_of(request);
  if (leaves_session_state(request.command)) {
    Route& route = routes_[session.value];
    if (route.touched.empty()) route.touched.assign(endpoints(), false);
    route.touched[target] = true;
    route.target = target;
  }
  if (target == config_.index) {
    run_engine_request(now, session, request);
  } else {
    send(target, message::EngineRequest{session, request});
  }
}

void Router::cancel(Instant now, SessionId session) {
  TS_ASSERT(owner_of(session) == config_.index);
  auto it = routes_.find(session.value);
  if (it == routes_.end() || it->second.touched.empty()) return;  // never sent an engine request
  if (it->second.target == config_.index) {
    cancel_here(now, session);
  } else {
    send(it->second.target, message::CancelParked{session});
  }
}

void Router::close(Instant now, SessionId session) {
  TS_ASSERT(owner_of(session) == config_.index);
  auto it = routes_.find(session.value);
  if (it == routes_.end()) return;  // never sent an engine request nor listened: nobody knows it
  const std::vector<bool> touched = std::move(it->second.touched);
  if (it->second.listened) config_.signals->close(session);
  routes_.erase(it);
  closed_since_take_ = true;
  for (std::size_t shard = 0; shard < touched.size(); ++shard) {
    if (!touched[shard]) continue;
    if constexpr (canary::kRouterSkipClose) {
      // The canary (core/canary.h): the close notice never reaches the last shard of a
      // session that touched more than one. The simulator must notice.
      std::size_t last = 0;
      std::size_t count = 0;
      for (std::size_t s = 0; s < touched.size(); ++s) {
        if (touched[s]) {
          last = s;
          ++count;
        }
      }
      if (count > 1 && shard == last) continue;
    }
    if (shard == config_.index) {
      close_here(now, session);
    } else {
      send(shard, message::CloseSession{session});
    }
  }
}

void Router::signals_written(SessionId session, std::size_t frames) {
  if (frames != 0 && config_.signals != nullptr) config_.signals->written(session, frames);
}

// ---- messages ----------------------------------------------------------------------------------

void Router::receive(Instant now, RouterMessage message) {
  std::visit(
      [&](auto& m) {
        using M = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<M, message::EngineRequest>) {
          run_engine_request(now, m.session, m.request);
        } else if constexpr (std::is_same_v<M, message::CloseSession>) {
          close_here(now, m.session);
        } else if constexpr (std::is_same_v<M, message::CancelParked>) {
          cancel_here(now, m.session);
        } else if constexpr (std::is_same_v<M, message::StatsRequest>) {
          stats_here(now, m.session);
        } else if constexpr (std::is_same_v<M, message::EngineReply>) {
          events_.push_back({SessionEvent::Kind::kReply, m.session, std::move(m.reply), {}});
        } else if constexpr (std::is_same_v<M, message::Parked>) {
          events_.push_back({SessionEvent::Kind::kParked, m.session, Reply{}, {}});
        } else if constexpr (std::is_same_v<M, message::Cancelled>) {
          events_.push_back({SessionEvent::Kind::kCancelled, m.session, Reply{}, {}});
        } else if constexpr (std::is_same_v<M, message::SignalFrames>) {
          for (const SessionId to : m.sessions) {
            if (listened(to)) {
              events_.push_back({SessionEvent::Kind::kSignal, to, Reply{}, {}, m.frame});
            }
          }
        } else if constexpr (std::is_same_v<M, message::SlowConsumer>) {
          if (listened(m.session)) {
            events_.push_back({SessionEvent::Kind::kSlowConsumer, m.session, Reply{}, {}});
          }
        } else if constexpr (std::is_same_v<M, message::Lost>) {
          // A session that has closed here is forgotten: its loss has nobody to go to.
          if (routes_.contains(m.session.value)) {
            events_.push_back({SessionEvent::Kind::kLost, m.session, Reply{}, {}, m.line});
          }
        } else {
          static_assert(std::is_same_v<M, message::StatsPart>);
          add_stats_part(m.session, std::move(m.snapshot));
        }
      },
      message);
}

void Router::tick(Instant now) {
  if (engine_ == nullptr) return;
  engine_->tick(now, scratch_);
  observe(nullptr, nullptr, scratch_);
  dispatch(scratch_);
}

std::vector<Envelope> Router::take_outbox() {
  std::vector<Envelope> out;
  out.swap(outbox_);
  return out;
}

std::vector<SessionEvent> Router::take_events() {
  std::vector<SessionEvent> out;
  out.swap(events_);
  if (closed_since_take_) {
    // A session closed after a push for it was queued: the push has nobody to go to.
    std::erase_if(out, [this](const SessionEvent& event) {
      const bool pushed = event.kind == SessionEvent::Kind::kSignal ||
                          event.kind == SessionEvent::Kind::kSlowConsumer ||
                          event.kind == SessionEvent::Kind::kLost;
      return pushed && !routes_.contains(event.session.value);
    });
    closed_since_take_ = false;
  }
  return out;
}

// ---- the engine side ---------------------------------------------------------------------------

void Router::run_engine_request(Instant now, SessionId session, const Request& request) {
  TS_ASSERT(engine_ != nullptr);
  Reply reply = engine_->handle(now, session, request, scratch_);
  observe(&request, &reply, scratch_);
  if (reply.status == Status::kParked) {
    to_owner(session, message::Parked{session});
  } else {
    to_owner(session, message::EngineReply{session, std::move(reply)});
  }
  dispatch(scratch_);
}

// ---- the signal side ---------------------------------------------------------------------------

void Router::run_signal_request(SessionId session, const Request& request) {
  Reply reply = Reply::of(Status::kError);
  if (config_.signals != nullptr) {
    switch (request.command) {
      case Command::kListen:
        reply = Reply::of(config_.signals->listen(session, request.key, request.text));
        if (reply.status == Status::kOk) routes_[session.value].listened = true;
        break;
      case Command::kUnlisten:
        config_.signals->unlisten(session, request.key, request.text);
        reply = Reply::of(Status::kOk);
        break;
      default: {
        TS_ASSERT(request.command == Command::kSignal || request.command == Command::kSignalPeer);
        const std::size_t count = config_.signals->publish(request.key, request.text, fanout_);
        // The frames go first: a session that listens to what it signals has its frame before
        // the reply that counts it.
        fan_out(fanout_);
        // A client's signal goes on to the other nodes of a cluster; one that came from another
        // node (signal-peer) stops here, so no signal goes round twice.
        if (request.command == Command::kSignal) {
          config_.signals->forward(request.key, request.text);
        }
        reply = Reply::delivered(static_cast<std::int64_t>(count));
        break;
      }
    }
  }
  events_.push_back({SessionEvent::Kind::kReply, session, std::move(reply), {}});
}

bool Router::listened(SessionId session) const {
  const auto it = routes_.find(session.value);
  return it != routes_.end() && it->second.listened;
}

void Router::fan_out(SignalFanout& fanout) {
  if (fanout.deliver.empty() && fanout.close.empty()) return;
  frames_by_shard_.resize(config_.shards);
  for (const SessionId to : fanout.deliver) frames_by_shard_[owner_of(to)].push_back(to);
  for (std::size_t shard = 0; shard < config_.shards; ++shard) {
    std::vector<SessionId>& sessions = frames_by_shard_[shard];
    if (sessions.empty()) continue;
    if (shard == config_.index) {
      for (const SessionId to : sessions) {
        events_.push_back({SessionEvent::Kind::kSignal, to, Reply{}, {}, fanout.frame});
      }
      sessions.clear();
    } else {
      send(shard, message::SignalFrames{fanout.frame, std::move(sessions)});
      sessions = {};
    }
  }
  for (const SessionId slow : fanout.close) to_owner(slow, message::SlowConsumer{slow});
}

void Router::close_here(Instant now, SessionId session) {
  TS_ASSERT(engine_ != nullptr);
  const bool dropped =
      engine_->close_session(now, session, config_.auto_release, scratch_, config_.orphan_ttl);
  observe(nullptr, nullptr, scratch_);
  dispatch(scratch_);
  // The session's parked request here will never be answered: its owner completes it.
  if (dropped) to_owner(session, message::Cancelled{session});
}

void Router::cancel_here(Instant now, SessionId session) {
  TS_ASSERT(engine_ != nullptr);
  const bool dropped = engine_->cancel_parked(now, session, scratch_);
  observe(nullptr, nullptr, scratch_);
  dispatch(scratch_);
  if (dropped) to_owner(session, message::Cancelled{session});
}

void Router::stats_here(Instant now, SessionId session) {
  TS_ASSERT(engine_ != nullptr);
  StatsSnapshot snapshot = engine_->stats(now, scratch_);
  observe(nullptr, nullptr, scratch_);
  dispatch(scratch_);
  to_owner(session, message::StatsPart{session, std::move(snapshot)});
}

void Router::add_stats_part(SessionId session, StatsSnapshot&& part) {
  auto it = stats_.find(session.value);
  TS_ASSERT(it != stats_.end() && it->second.parts_left > 0);
  merge_stats(it->second.snapshot, std::move(part), config_.stats_entries_max);
  if (--it->second.parts_left > 0) return;
  events_.push_back({SessionEvent::Kind::kStats, session, Reply{}, std::move(it->second.snapshot)});
  stats_.erase(it);
}

void Router::dispatch(std::vector<Delivery>& deliveries) {
  for (Delivery& delivery : deliveries) {
    to_owner(delivery.session, message::EngineReply{delivery.session, std::move(delivery.reply)});
  }
  deliveries.clear();
  for (const Loss& loss : engine_->take_losses()) {
    to_owner(
        loss.session,
        message::Lost{loss.session, std::make_shared<const std::string>(lost_line(loss.slot))});
  }
}

void Router::to_owner(SessionId session, RouterMessage message) {
  const std::size_t owner = owner_of(session);
  if (owner == config_.index) {
    // Only the owner-side messages come here; they never need the time.
    receive(Instant::min(), std::move(message));
  } else {
    send(owner, std::move(message));
  }
}

void Router::send(std::size_t to, RouterMessage message) {
  Envelope& envelope = outbox_.emplace_back();
  envelope.to = to;
  envelope.message = std::move(message);
}

void Router::observe(const Request* request, const Reply* reply, const std::vector<Delivery>& out) {
  if (observer_ != nullptr) observer_->on_engine_call(config_.index, request, reply, out);
}

}  // namespace turnstile::core
