#include "core/replica.h"

#include <algorithm>
#include <string>
#include <tuple>

#include "core/bytes.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace turnstile::core {

Replica::Replica(const EngineConfig& config)
    : config_(config), engine_(std::make_unique<Engine>(config, salts_)) {}

Replica::~Replica() = default;

AppliedEntry Replica::apply(std::uint64_t index, const LogEntry& entry) {
  AppliedEntry applied;
  if (index <= applied_index_) return applied;
  applied_index_ = index;
  // An entry is never behind the last one (next_entry_time); should one be, the replicas all hold
  // their time still alike, as the engine does for a clock that steps back.
  time_ = std::max(time_, entry.time);
  salts_.seed(entry.salt);
  applied.results.reserve(entry.commands.size());
  for (const LogCommand& command : entry.commands) {
    CommandResult result;
    std::visit(
        [&](const auto& c) {
          using C = std::decay_t<decltype(c)>;
          if constexpr (std::is_same_v<C, command::Submit>) {
            // A leader's sessions never send a request while one is parked (Engine::handle's
            // contract); a log that does is answered `error` alike on every replica.
            result.reply = engine_->has_parked(c.session)
                               ? Reply::of(Status::kError)
                               : engine_->handle(time_, c.session, c.request, applied.deliveries);
          } else if constexpr (std::is_same_v<C, command::Close>) {
            result.dropped_parked = engine_->close_session(time_, c.session, c.auto_release,
                                                           applied.deliveries, c.orphan_ttl);
          } else if constexpr (std::is_same_v<C, command::Cancel>) {
            result.dropped_parked = engine_->cancel_parked(time_, c.session, applied.deliveries);
          } else {
            // Every deadline due at the entry's time, however many: the same on every replica.
            do {
              engine_->tick(time_, applied.deliveries);
            } while (engine_->next_wake() && *engine_->next_wake() <= engine_->now());
          }
        },
        command);
    applied.results.push_back(std::move(result));
  }
  applied.losses = engine_->take_losses();
  return applied;
}

namespace {
constexpr std::uint8_t kReplicaSnapshotVersion = 1;
}  // namespace

std::string Replica::save() const {
  ByteWriter w;
  w.u8(kReplicaSnapshotVersion);
  w.u64(applied_index_);
  w.i64(time_.ns());
  w.bytes(engine_->save());
  return w.take();
}

bool Replica::restore(std::string_view bytes) {
  ByteReader r(bytes);
  std::uint8_t version = 0;
  std::uint64_t applied_index = 0;
  std::int64_t time = 0;
  std::string engine_bytes;
  if (!r.u8(version) || version != kReplicaSnapshotVersion || !r.u64(applied_index) ||
      !r.i64(time) || !r.bytes(engine_bytes) || r.left() != 0) {
    return false;
  }
  auto engine = std::make_unique<Engine>(config_, salts_);
  if (!engine->restore(engine_bytes)) return false;
  engine_ = std::move(engine);
  applied_index_ = applied_index;
  time_ = Instant::from_ns(time);
  return true;
}

std::uint64_t Replica::digest() const {
  XXH3_state_t hash;
  XXH3_state_t* state = &hash;
  XXH3_64bits_reset(state);
  auto add = [state](std::uint64_t value) { XXH3_64bits_update(state, &value, sizeof value); };
  auto add_bytes = [&](const std::string& bytes) {
    add(bytes.size());
    XXH3_64bits_update(state, bytes.data(), bytes.size());
  };
  add(applied_index_);
  add(static_cast<std::uint64_t>(time_.ns()));
  add(engine_->last_fence().value);
  std::vector<Engine::ResourceView> resources = engine_->inspect();
  std::sort(resources.begin(), resources.end(), [](const auto& a, const auto& b) {
    return std::tie(a.ns, a.key) < std::tie(b.ns, b.key);
  });
  for (const Engine::ResourceView& resource : resources) {
    add(static_cast<std::uint64_t>(resource.ns));
    add_bytes(resource.key);
    add(static_cast<std::uint64_t>(resource.limit));
    add(resource.holders.size());
    for (const Engine::HolderView& holder : resource.holders) {
      add(holder.token.fence.value);
      add(holder.token.salt);
      add(holder.session.value);
      add(static_cast<std::uint64_t>(holder.deadline.ns()));
    }
    add(resource.waiters.size());
    for (SessionId waiter : resource.waiters) add(waiter.value);
  }
  return XXH3_64bits_digest(state);
}

}  // namespace turnstile::core
