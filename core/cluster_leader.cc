#include "core/cluster_leader.h"

#include <memory>
#include <unordered_map>
#include <utility>

#include "core/assert.h"
#include "core/canary.h"

namespace turnstile::core {

namespace {
// CANARY (core/canary.h, kAckBeforeCommit): each leader's replica as it would be once the entries
// it proposed apply, kept beside the leader (the class's layout stays the same in every build).
std::unordered_map<const void*, std::unique_ptr<Replica>>& speculations() {
  static std::unordered_map<const void*, std::unique_ptr<Replica>> replicas;
  return replicas;
}
}  // namespace

ClusterLeader::ClusterLeader(const ClusterLeaderConfig& config, const Replica& replica)
    : config_(config), replica_(replica) {
  TS_ASSERT(config.shards >= 1 && config.max_commands >= 1);
}

// ---- leadership
// ----------------------------------------------------------------------------------

void ClusterLeader::lead(Instant clock) {
  TS_ASSERT(pending_.empty() && in_flight_.empty());
  leading_ = true;
  clock_ = LogClock{};
  clock_.take_over(clock, replica_.time());
  for (SessionId session : replica_.engine().sessions()) {
    if (own(session) && live_.contains(session.value)) continue;
    // Another process's session (its node no longer leads: its clients must find this one),
    // or one of ours that closed while we followed.
    const bool released = own(session) && config_.auto_release;
    pending_.push_back({command::Close{session, released, config_.orphan_ttl},
                        {Origin::Kind::kTakeover, session}});
  }
  closed_following_.clear();
}

void ClusterLeader::follow(std::string leader_address) {
  leading_ = false;
  leader_address_ = std::move(leader_address);
  for (std::uint64_t session : awaiting_) not_leader(SessionId{session});
  awaiting_.clear();
  // Commands not yet proposed are dropped; those proposed may still commit, unanswered here.
  for (const Pending& pending : pending_) {
    if (pending.origin.kind == Origin::Kind::kClose) {
      closed_following_.insert(pending.origin.session.value);
    }
  }
  pending_.clear();
  for (const Batch& batch : in_flight_) {
    for (const Origin& origin : batch.origins) {
      if (origin.kind == Origin::Kind::kClose) closed_following_.insert(origin.session.value);
    }
  }
  in_flight_.clear();
  tick_in_flight_ = false;
}

void ClusterLeader::set_leader_address(std::string leader_address) {
  leader_address_ = std::move(leader_address);
}

// ---- from the routers
// ----------------------------------------------------------------------------

void ClusterLeader::receive(RouterMessage message) {
  std::visit(
      [&](auto& m) {
        using M = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<M, message::EngineRequest>) {
          if (!leading_) {
            not_leader(m.session);
            return;
          }
          awaiting_.insert(m.session.value);
          if (Router::leaves_session_state(m.request.command)) live_.insert(m.session.value);
          pending_.push_back({command::Submit{m.session, std::move(m.request)},
                              {Origin::Kind::kSubmit, m.session}});
        } else if constexpr (std::is_same_v<M, message::CloseSession>) {
          live_.erase(m.session.value);
          if (!leading_) {
            closed_following_.insert(m.session.value);
            return;
          }
          pending_.push_back({command::Close{m.session, config_.auto_release, config_.orphan_ttl},
                              {Origin::Kind::kClose, m.session}});
        } else if constexpr (std::is_same_v<M, message::CancelParked>) {
          // Following, nothing of this node is parked: follow() answered it.
          if (!leading_) return;
          pending_.push_back({command::Cancel{m.session}, {Origin::Kind::kCancel, m.session}});
        } else if constexpr (std::is_same_v<M, message::StatsRequest>) {
          StatsSnapshot part;
          merge_stats(part, replica_.engine().stats_view(), config_.stats_entries_max);
          part.cluster = cluster_status_;
          to_owner(m.session, message::StatsPart{m.session, std::move(part)});
        } else {
          // Replies, parked notices, cancellations and stats parts go to routers, never here.
          TS_ASSERT(false);
        }
      },
      message);
}

// ---- proposals
// -----------------------------------------------------------------------------------

std::optional<LogEntry> ClusterLeader::take_entry(Instant clock, std::uint64_t salt) {
  if (!leading_) return std::nullopt;
  if (in_flight_full()) return std::nullopt;
  const std::optional<Instant> wake = replica_.next_wake();
  const bool tick = !tick_in_flight_ && wake && *wake <= clock_.peek(clock);
  if (pending_.empty() && !tick) return std::nullopt;
  LogEntry entry;
  entry.time = clock_.next(clock);
  entry.salt = salt;
  Batch batch;
  batch.salt = salt;
  batch.time = entry.time;
  if (tick) {
    entry.commands.emplace_back(command::Tick{});
    batch.origins.push_back({Origin::Kind::kTick, SessionId{}});
    tick_in_flight_ = true;
  }
  while (!pending_.empty() && entry.commands.size() < config_.max_commands) {
    entry.commands.push_back(std::move(pending_.front().command));
    batch.origins.push_back(pending_.front().origin);
    pending_.pop_front();
  }
  if constexpr (canary::kAckBeforeCommit) answer_before_commit(entry, batch);
  in_flight_.push_back(std::move(batch));
  return entry;
}

void ClusterLeader::answer_before_commit(const LogEntry& entry, Batch& batch) {
  // CANARY: the leader answers an entry's requests as soon as it proposes it, from what applying
  // it to its own replica would give, instead of once the entry is committed and applied. While
  // it keeps leading nobody can tell; when it loses an entry that never reached a majority, a
  // client holds a grant the cluster never made.
  std::unique_ptr<Replica>& speculative = speculations()[this];
  if (!speculative || in_flight_.empty()) {
    speculative = std::make_unique<Replica>(EngineConfig{});
    TS_ASSERT(speculative->restore(replica_.save()));
  }
  const AppliedEntry guessed = speculative->apply(speculative->applied_index() + 1, entry);
  for (std::size_t i = 0; i < batch.origins.size(); ++i) {
    if (batch.origins[i].kind == Origin::Kind::kTick) continue;
    answer(batch.origins[i], guessed.results[i]);
    batch.origins[i].kind = Origin::Kind::kTakeover;  // answered: nothing more when it applies
  }
}

std::optional<Instant> ClusterLeader::next_tick_clock() const {
  // With the in-flight entries at their limit, the next take_entry() after an applied() brings
  // the Tick if it is due by then.
  if (!leading_ || tick_in_flight_ || in_flight_full()) return std::nullopt;
  const std::optional<Instant> wake = replica_.next_wake();
  if (!wake) return std::nullopt;
  return clock_.clock_at(*wake);
}

// ---- applied entries
// -----------------------------------------------------------------------------

void ClusterLeader::applied(const LogEntry& entry, const AppliedEntry& applied) {
  if (!in_flight_.empty() && in_flight_.front().salt == entry.salt &&
      in_flight_.front().time == entry.time) {
    const Batch batch = std::move(in_flight_.front());
    in_flight_.pop_front();
    TS_ASSERT(batch.origins.size() == applied.results.size());
    for (std::size_t i = 0; i < batch.origins.size(); ++i) {
      answer(batch.origins[i], applied.results[i]);
    }
  }
  for (const Delivery& delivery : applied.deliveries) {
    // Only a request this node still waits for: not another process's session, nor one that
    // was answered error_not_leader when this node stepped down.
    if (!own(delivery.session) || awaiting_.erase(delivery.session.value) == 0) continue;
    to_owner(delivery.session, message::EngineReply{delivery.session, delivery.reply});
  }
  for (const Loss& loss : applied.losses) {
    if (!own(loss.session)) continue;
    to_owner(
        loss.session,
        message::Lost{loss.session, std::make_shared<const std::string>(lost_line(loss.slot))});
  }
}

void ClusterLeader::answer(const Origin& origin, const CommandResult& result) {
  const SessionId session = origin.session;
  switch (origin.kind) {
    case Origin::Kind::kSubmit:
      if (result.reply.status == Status::kParked) {
        to_owner(session, message::Parked{session});
      } else {
        awaiting_.erase(session.value);
        to_owner(session, message::EngineReply{session, result.reply});
      }
      return;
    case Origin::Kind::kClose:
    case Origin::Kind::kCancel:
      if (result.dropped_parked && awaiting_.erase(session.value) != 0) {
        to_owner(session, message::Cancelled{session});
      }
      return;
    case Origin::Kind::kTick:
      tick_in_flight_ = false;
      return;
    case Origin::Kind::kTakeover:
      return;
  }
}

// ---- outputs ------------------------------------------------------------------------------------

void ClusterLeader::not_leader(SessionId session) {
  to_owner(session, message::EngineReply{session, Reply::not_leader(leader_address_)});
}

void ClusterLeader::to_owner(SessionId session, RouterMessage message) {
  TS_ASSERT(own(session));
  Envelope& envelope = outbox_.emplace_back();
  envelope.to = session_owner(session, config_.shards);
  envelope.message = std::move(message);
}

std::vector<Envelope> ClusterLeader::take_outbox() {
  std::vector<Envelope> out;
  out.swap(outbox_);
  return out;
}

}  // namespace turnstile::core
