#include "tests/support/loopback.h"

#include <algorithm>
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
      salts_(config_.salt_seed),
      engine_(std::make_unique<core::Engine>(config_.engine, salts_)),
      now_(config_.start) {}

Loopback::~Loopback() = default;

core::SessionId Loopback::connect() {
  const core::SessionId id{next_id_++};
  Connection& connection = connections_[id.value];
  connection.session = std::make_unique<core::Session>(id, config_.session, now_);
  route();
  return id;
}

void Loopback::send(core::SessionId id, std::string_view bytes) {
  Connection* connection = find(id);
  if (connection == nullptr || !connection->session) return;
  connection->input.append(bytes);
  route();
}

std::string Loopback::read(core::SessionId id) {
  Connection* connection = find(id);
  if (connection == nullptr) return {};
  std::string text = std::move(connection->leftover_output);
  connection->leftover_output.clear();
  if (connection->session) {
    const std::string_view output = connection->session->output();
    text.append(output);
    connection->session->consume_output(output.size());
    route();  // room in the output buffer may let queued requests start
  }
  return text;
}

void Loopback::disconnect(core::SessionId id) {
  Connection* connection = find(id);
  if (connection == nullptr || !connection->session) return;
  connection->session->on_peer_closed(now_);
  route();
}

void Loopback::half_close(core::SessionId id) {
  Connection* connection = find(id);
  if (connection == nullptr || !connection->session) return;
  connection->session->on_peer_eof(now_);
  route();
}

void Loopback::close(core::SessionId id, core::CloseReason reason) {
  Connection* connection = find(id);
  if (connection == nullptr || !connection->session) return;
  connection->session->close(reason);
  route();
}

void Loopback::begin_drain() {
  for (auto& [value, connection] : connections_) {
    if (connection.session) connection.session->begin_drain(now_);
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
  return connection == nullptr ? nullptr : connection->session.get();
}

bool Loopback::is_open(core::SessionId id) const {
  const core::Session* found = session(id);
  return found != nullptr && !found->closed();
}

bool Loopback::forgotten(core::SessionId id) const {
  const Connection* connection = find(id);
  return connection != nullptr && !connection->session;
}

std::size_t Loopback::pending_input(core::SessionId id) const {
  const Connection* connection = find(id);
  return connection == nullptr ? 0 : connection->input.size();
}

std::int64_t Loopback::open_sessions() const {
  std::int64_t count = 0;
  for (const auto& [value, connection] : connections_) {
    if (connection.session && !connection.session->closed()) ++count;
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
    if (!connection.session) continue;
    core::Session& session = *connection.session;
    const core::SessionId id{value};

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

    if (session.closed() && !connection.engine_notified && !hold_close_notices_) {
      connection.engine_notified = true;
      progress = true;
      std::vector<core::Delivery> out;
      const bool dropped = engine_->close_session(now_, id, config_.auto_release, out);
      if (dropped) {
        if (!connection.awaiting_delivery || !session.in_flight()) {
          anomalies_.push_back(describe(id, "close_session dropped a request nobody parked"));
        } else {
          connection.awaiting_delivery = false;
          session.on_cancelled();
        }
      }
      deliver(out);
    }

    while (std::optional<core::Request> request = session.next_request(now_)) {
      progress = true;
      connection.routed.push_back(*request);
      std::vector<core::Delivery> out;
      if (core::is_engine_command(request->command)) {
        const core::Reply reply = engine_->handle(now_, id, *request, out);
        if (reply.status == core::Status::kParked) {
          connection.awaiting_delivery = true;
          session.on_parked();
        }
        deliver(out);
        if (reply.status != core::Status::kParked) session.on_reply(now_, reply);
      } else if (request->command == core::Command::kStats) {
        const core::StatsSnapshot snapshot = engine_->stats(now_, out);
        deliver(out);
        session.on_reply(now_,
                         core::Reply::stats(core::encode_stats_json(open_sessions(), snapshot)));
      } else {
        anomalies_.push_back(describe(id, "session routed a request it should answer itself"));
        session.on_reply(now_, core::Reply::of(core::Status::kError));
      }
      if (connection.awaiting_delivery) break;  // in flight until its delivery
    }

    if (session.finished() && connection.engine_notified) {
      connection.leftover_output.append(session.output());
      connection.session.reset();
      connection.input.clear();
      progress = true;
    }
  }
  return progress;
}

void Loopback::deliver(std::vector<core::Delivery>& out) {
  for (core::Delivery& delivery : out) {
    Connection* connection = find(delivery.session);
    if (connection == nullptr || !connection->session) {
      anomalies_.push_back(describe(delivery.session, "delivery for a forgotten session"));
      continue;
    }
    if (!connection->awaiting_delivery || !connection->session->in_flight()) {
      anomalies_.push_back(describe(delivery.session, "delivery with nothing parked"));
      continue;
    }
    if (delivery.reply.status == core::Status::kParked) {
      anomalies_.push_back(describe(delivery.session, "delivery of Reply::parked"));
      continue;
    }
    connection->awaiting_delivery = false;
    connection->session->on_reply(now_, delivery.reply);
  }
  out.clear();
}

void Loopback::fire_timers() {
  for (int round = 0; round < kTimerRoundsMax; ++round) {
    std::vector<core::Delivery> out;
    engine_->tick(now_, out);
    deliver(out);
    for (auto& [value, connection] : connections_) {
      if (connection.session) connection.session->on_timer(now_);
    }
    route();

    bool stale = false;
    for (const auto& [value, connection] : connections_) {
      if (!connection.session) continue;
      const std::optional<core::Instant> deadline = connection.session->next_deadline();
      if (deadline && *deadline <= now_) stale = true;
    }
    const std::optional<core::Instant> wake = engine_->next_wake();
    if (wake && *wake <= now_) stale = true;
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
    if (connection.session) consider(connection.session->next_deadline());
  }
  consider(engine_->next_wake());
  return earliest;
}

}  // namespace turnstile::test
