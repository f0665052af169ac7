#include "testing/loopback.h"

#include <algorithm>
#include <deque>
#include <utility>

#include "core/protocol.h"
#include "core/stats.h"

namespace turnstile::test {
namespace {

// A routing loop that has not settled after this many passes is spinning: a driver bug or a
// session that reports progress forever.
constexpr int kRoutePassesMax = 1'000'000;
// Rounds of on_timer/tick at one instant before a deadline that stays due is reported.
constexpr int kTimerRoundsMax = 8;

std::string describe(core::SessionId id, std::string_view what) {
  return "session " + std::to_string(id.value) + ": " + std::string(what);
}

}  // namespace

Loopback::Loopback(LoopbackConfig config)
    : config_(std::move(config)),
      signals_(std::make_unique<core::SignalHub>(config_.signals)),
      now_(config_.start) {
  // One setting, as --signal-queue is for the daemon: the hub's queue and the session's.
  config_.session.signal_queue_max = config_.signals.queue_max;
  for (std::size_t shard = 0; shard < std::max<std::size_t>(config_.shards, 1); ++shard) {
    // Shard 0 draws the salts of a one-shard loopback as before: runs replay bit for bit.
    salts_.push_back(std::make_unique<core::SplitMix64>(config_.salt_seed + shard));
    engines_.push_back(std::make_unique<core::Engine>(config_.engine, *salts_.back()));
    core::RouterConfig router;
    router.index = shard;
    router.shards = std::max<std::size_t>(config_.shards, 1);
    router.auto_release = config_.auto_release;
    router.stats_entries_max = config_.engine.stats_entries_max;
    router.signals = signals_.get();
    routers_.push_back(std::make_unique<core::Router>(router, *engines_.back()));
  }
}

Loopback::~Loopback() = default;

core::SessionId Loopback::connect() {
  const std::size_t shard = next_shard_;
  next_shard_ = (next_shard_ + 1) % routers_.size();
  const core::SessionId id = routers_[shard]->new_session_id();
  Connection& connection = connections_[id.value];
  connection.port = std::make_unique<core::SessionPort>(id, config_.session, now_);
  connection.shard = shard;
  route();
  return id;
}

void Loopback::send(core::SessionId id, std::string_view bytes) {
  Connection* connection = find(id);
  if (connection == nullptr || !connection->port) return;
  connection->input.append(bytes);
  route();
}

std::string Loopback::read(core::SessionId id) {
  Connection* connection = find(id);
  if (connection == nullptr) return {};
  std::string text = std::move(connection->leftover_output);
  connection->leftover_output.clear();
  if (connection->port) {
    core::Session& session = connection->port->session();
    text.append(session.output());
    session.consume_output(session.output().size());
    route();  // room in the output buffer may let queued requests start
  }
  return text;
}

void Loopback::disconnect(core::SessionId id) {
  Connection* connection = find(id);
  if (connection == nullptr || !connection->port) return;
  connection->port->session().on_peer_closed(now_);
  route();
}

void Loopback::half_close(core::SessionId id) {
  Connection* connection = find(id);
  if (connection == nullptr || !connection->port) return;
  connection->port->session().on_peer_eof(now_);
  route();
}

void Loopback::close(core::SessionId id, core::CloseReason reason) {
  Connection* connection = find(id);
  if (connection == nullptr || !connection->port) return;
  connection->port->session().close(reason);
  route();
}

void Loopback::begin_drain() {
  for (auto& [value, connection] : connections_) {
    if (connection.port) connection.port->session().begin_drain(now_);
  }
  route();
}

void Loopback::advance(core::Duration by) {
  const core::Instant target = now_ + by;
  while (true) {
    const std::optional<core::Instant> next = next_event_after_now();
    if (!next || *next > target) break;
    now_ = *next;
    fire_timers();
  }
  now_ = target;
  fire_timers();
}

void Loopback::hold_close_notices(bool hold) {
  hold_close_notices_ = hold;
  route();
}

const core::Session* Loopback::session(core::SessionId id) const {
  const Connection* connection = find(id);
  return connection == nullptr || !connection->port ? nullptr : &connection->port->session();
}

bool Loopback::is_open(core::SessionId id) const {
  const core::Session* found = session(id);
  return found != nullptr && !found->closed();
}

bool Loopback::forgotten(core::SessionId id) const {
  const Connection* connection = find(id);
  return connection != nullptr && !connection->port;
}

std::size_t Loopback::pending_input(core::SessionId id) const {
  const Connection* connection = find(id);
  return connection == nullptr ? 0 : connection->input.size();
}

std::int64_t Loopback::open_sessions() const {
  std::int64_t count = 0;
  for (const auto& [value, connection] : connections_) {
    if (connection.port && !connection.port->session().closed()) ++count;
  }
  return count;
}

const std::vector<core::Request>& Loopback::routed(core::SessionId id) const {
  static const std::vector<core::Request> kNone;
  const Connection* connection = find(id);
  return connection == nullptr ? kNone : connection->routed;
}

Loopback::Connection* Loopback::find(core::SessionId id) {
  auto it = connections_.find(id.value);
  return it == connections_.end() ? nullptr : &it->second;
}

const Loopback::Connection* Loopback::find(core::SessionId id) const {
  auto it = connections_.find(id.value);
  return it == connections_.end() ? nullptr : &it->second;
}

void Loopback::route() {
  for (int pass = 0; pass < kRoutePassesMax; ++pass) {
    if (!route_once()) return;
  }
  anomalies_.push_back("routing loop did not settle");
}

bool Loopback::route_once() {
  bool progress = false;
  for (auto& [value, connection] : connections_) {
    if (!connection.port) continue;
    core::Session& session = connection.port->session();
    const core::SessionId id{value};
    core::Router& router = *routers_[connection.shard];

    if (!connection.input.empty()) {
      const std::size_t used = session.on_bytes(now_, connection.input);
      if (used > connection.input.size()) {
        anomalies_.push_back(describe(id, "on_bytes consumed more than offered"));
        connection.input.clear();
      } else if (used > 0) {
        connection.input.erase(0, used);
        progress = true;
      }
    }

    // A peer that did not read is a socket that took nothing: the signal backlog is checked.
    session.after_write();
    core::PortEffects effects = connection.port->pump(now_);
    if (effects.request) {
      progress = true;
      connection.routed.push_back(*effects.request);
      router.submit(now_, id, *effects.request);
    }
    if (effects.close) connection.close_pending = true;
    if (connection.close_pending && !hold_close_notices_) {
      connection.close_pending = false;
      connection.router_notified = true;
      progress = true;
      if (session.close_reason() == core::CloseReason::kSlowConsumer) {
        signals_->note_slow_consumer();
      }
      router.close(now_, id);
    }
    if (effects.frames_written != 0) router.signals_written(id, effects.frames_written);

    if (effects.finished && connection.router_notified) {
      connection.leftover_output.append(session.output());
      connection.port.reset();
      connection.input.clear();
      progress = true;
    }
  }
  if (move_messages()) progress = true;
  return progress;
}

bool Loopback::move_messages() {
  bool moved = false;
  std::deque<core::Envelope> queue;
  while (true) {
    for (auto& router : routers_) {
      for (core::Envelope& envelope : router->take_outbox()) queue.push_back(std::move(envelope));
    }
    if (queue.empty()) break;
    core::Envelope envelope = std::move(queue.front());
    queue.pop_front();
    routers_.at(envelope.to)->receive(now_, std::move(envelope.message));
    moved = true;
  }
  for (auto& router : routers_) {
    for (core::SessionEvent& event : router->take_events()) {
      apply(event);
      moved = true;
    }
  }
  return moved;
}

void Loopback::apply(core::SessionEvent& event) {
  Connection* connection = find(event.session);
  if (connection == nullptr || !connection->port) {
    anomalies_.push_back(describe(event.session, "router event for a forgotten session"));
    return;
  }
  (void)connection->port->deliver(now_, event, open_sessions());
}

void Loopback::fire_timers() {
  for (int round = 0; round < kTimerRoundsMax; ++round) {
    for (auto& router : routers_) router->tick(now_);
    move_messages();
    for (auto& [value, connection] : connections_) {
      if (connection.port) connection.port->session().on_timer(now_);
    }
    route();

    bool stale = false;
    for (const auto& [value, connection] : connections_) {
      if (!connection.port) continue;
      const std::optional<core::Instant> deadline = connection.port->session().next_deadline();
      if (deadline && *deadline <= now_) stale = true;
    }
    for (const auto& router : routers_) {
      const std::optional<core::Instant> wake = router->next_wake();
      if (wake && *wake <= now_) stale = true;
    }
    if (!stale) return;
  }
  anomalies_.push_back("a deadline stays due after on_timer and tick");
}

std::optional<core::Instant> Loopback::next_event_after_now() {
  std::optional<core::Instant> earliest;
  auto consider = [&](std::optional<core::Instant> at) {
    if (at && *at > now_ && (!earliest || *at < *earliest)) earliest = at;
  };
  for (const auto& [value, connection] : connections_) {
    if (connection.port) consider(connection.port->session().next_deadline());
  }
  for (const auto& router : routers_) consider(router->next_wake());
  return earliest;
}

}  // namespace turnstile::test
