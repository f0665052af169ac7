// Engine::Impl's snapshots: the whole state, so that an engine restored from it answers every
// later input exactly as this one would; the configuration is not in it (the restoring engine
// brings its own). This file turns the live state into a SnapshotImage and back; the byte
// format is core/engine_snapshot.{h,cc} and docs/snapshot-format.md.

#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "core/engine_internal.h"

namespace turnstile::core {

static_assert(static_cast<int>(TwoPhaseRecord::State::kWaiting) ==
                  static_cast<int>(SnapshotRecordState::kWaiting) &&
              static_cast<int>(TwoPhaseRecord::State::kGranted) ==
                  static_cast<int>(SnapshotRecordState::kGranted) &&
              static_cast<int>(TwoPhaseRecord::State::kExpired) ==
                  static_cast<int>(SnapshotRecordState::kExpired));

SnapshotImage::Resource Engine::Impl::image_of(const Resource& resource) const {
  SnapshotImage::Resource image{resource.ns,
                                std::string(resource.key),
                                resource.limit,
                                resource.serial,
                                resource.last_activity,
                                deadlines.slot(resource.gc_timer),
                                deadlines.slot(resource.delay_timer),
                                resource.forced_fences,
                                {},
                                {}};
  for (const Holder* h = resource.holders.front(); h != nullptr;
       h = decltype(resource.holders)::next(h)) {
    const auto flags = static_cast<std::uint8_t>(
        (h->owner != nullptr ? kHolderOwned : 0) |
        (h->two_phase_pending ? kHolderTwoPhasePending : 0) |
        (!h->ref.empty() ? kHolderOrphan : 0) | (h->shared ? kHolderShared : 0));
    image.holders.push_back(SnapshotImage::Holder{h->token, h->session, flags, h->ref, h->lease_s,
                                                  h->deadline, deadlines.slot(h->timer)});
  }
  for (const Waiter* waiter = resource.waiters.front(); waiter != nullptr;
       waiter = decltype(resource.waiters)::next(waiter)) {
    const auto flags = static_cast<std::uint8_t>((waiter->two_phase ? kWaiterTwoPhase : 0) |
                                                 (waiter->parked ? kWaiterParked : 0) |
                                                 (!waiter->ref.empty() ? kWaiterOrphan : 0));
    image.waiters.push_back(SnapshotImage::Waiter{waiter->session, waiter->lease_s, flags,
                                                  waiter->shared, waiter->ref, waiter->since,
                                                  deadlines.slot(waiter->timer)});
  }
  return image;
}

std::string Engine::Impl::save() const {
  SnapshotImage image;
  image.now = now;
  image.last_fence = last_fence;
  image.block_next = block_next;
  image.block_left = block_left;
  image.counters = counters;
  image.next_serial = next_serial;
  image.sequence = deadlines.sequence();
  image.resources.reserve(resources_count());
  for (const ResourceMap& map : resources) {
    map.for_each([&](const std::string&, const Resource& resource) {
      image.resources.push_back(image_of(resource));
    });
  }
  for (const auto& [session, state] : sessions) {
    for (const auto& [resource, record] : state.records) {
      image.records.push_back(SnapshotImage::Record{
          session, resource->serial, static_cast<SnapshotRecordState>(record.state)});
    }
    if (!state.ref.empty()) image.refs.push_back(SnapshotImage::Ref{session, state.ref});
  }
  return encode_snapshot(std::move(image));
}

// Restores a snapshot of save() into this engine, which has had no input yet. Every rule the
// engine's own operations keep is checked before anything is built (decode_snapshot), so that
// bytes from a corrupt file or a hostile peer are refused (false) and never reach an
// assertion; on false the engine is unchanged.
bool Engine::Impl::restore(std::string_view bytes) {
  TS_ASSERT(fences == nullptr && now == Instant::min() && resources_count() == 0 &&
            sessions.empty() && deadlines.size() == 0);
  SnapshotImage image;
  const std::int64_t resources_max = budget == nullptr ? config.resources_max : INT64_MAX;
  if (!decode_snapshot(bytes, resources_max, image)) return false;
  if (budget != nullptr) {
    for (std::uint64_t taken = 0; taken < image.resources.size(); ++taken) {
      if (!budget->try_take()) {
        for (; taken > 0; --taken) budget->give_back();
        return false;
      }
    }
  }

  // Valid: build it.
  now = image.now;
  last_fence = image.last_fence;
  block_next = image.block_next;
  block_left = image.block_left;
  counters = image.counters;
  next_serial = image.next_serial;
  deadlines.set_sequence(image.sequence);
  RestoredNodes nodes;
  for (SnapshotImage::Resource& resource_image : image.resources) {
    restore_resource(resource_image, nodes);
  }
  for (const SnapshotImage::Record& record : image.records) {
    Resource* resource = nodes.resource_of.at(record.serial);
    TwoPhaseRecord restored{static_cast<TwoPhaseRecord::State>(record.state), nullptr, nullptr};
    if (record.state == SnapshotRecordState::kWaiting) {
      restored.waiter = nodes.two_phase.at(record.session).at(record.serial);
    } else if (record.state == SnapshotRecordState::kGranted) {
      restored.holder = nodes.pending.at(record.session).at(record.serial);
    }
    add_record(session_state(SessionId{record.session}), *resource, restored);
  }
  for (SnapshotImage::Ref& ref : image.refs) {
    session_state(SessionId{ref.session}).ref = std::move(ref.ref);
  }
  return true;
}

void Engine::Impl::restore_resource(const SnapshotImage::Resource& image, RestoredNodes& nodes) {
  auto& [stored_key, resource] = resources[ns_index(image.ns)].add(image.key);
  resource.ns = image.ns;
  resource.key = stored_key;
  resource.limit = image.limit;
  resource.serial = image.serial;
  resource.last_activity = image.last_activity;
  if (indexes_holders(image.ns, image.limit)) {
    resource.holders_by_fence = std::make_unique<std::unordered_map<std::uint64_t, Holder*>>();
  }
  if (image.gc) deadlines.reinstate(resource.gc_timer, *image.gc, &resource);
  if (image.delay) deadlines.reinstate(resource.delay_timer, *image.delay, &resource);
  resource.forced_fences = image.forced_fences;
  nodes.resource_of.emplace(image.serial, &resource);
  for (const SnapshotImage::Holder& held : image.holders) {
    Holder* holder = restore_holder(resource, held);
    if (holder->two_phase_pending) nodes.pending[held.session.value][image.serial] = holder;
  }
  for (const SnapshotImage::Waiter& queued : image.waiters) {
    Waiter* waiter = restore_waiter(resource, queued);
    if (waiter->two_phase) nodes.two_phase[queued.session.value][image.serial] = waiter;
  }
}

Holder* Engine::Impl::restore_holder(Resource& resource, const SnapshotImage::Holder& held) {
  Holder* holder = holder_pool.make();
  holder->token = held.token;
  holder->session = held.session;
  holder->owner = (held.flags & kHolderOwned) != 0 ? &session_state(held.session) : nullptr;
  holder->resource = &resource;
  holder->lease_s = held.lease_s;
  holder->deadline = held.deadline;
  holder->two_phase_pending = (held.flags & kHolderTwoPhasePending) != 0;
  holder->shared = (held.flags & kHolderShared) != 0;
  holder->ref = held.ref;
  if (!holder->ref.empty()) ++resource.orphans;
  resource.holders.push_back(holder);
  if (holder->owner != nullptr) holder->owner->holders.push_back(holder);
  if (resource.holders_by_fence) {
    resource.holders_by_fence->emplace(holder->token.fence.value, holder);
  }
  deadlines.reinstate(holder->timer, *held.slot, holder);
  return holder;
}

Waiter* Engine::Impl::restore_waiter(Resource& resource, const SnapshotImage::Waiter& queued) {
  if (queued.flags == kWaiterOrphan) {
    Waiter* waiter = waiter_pool.make();
    waiter->session = queued.session;
    waiter->resource = &resource;
    waiter->lease_s = queued.lease_s;
    waiter->shared = queued.shared;
    waiter->since = queued.since;
    waiter->ref = queued.ref;
    ++resource.orphans;
    resource.waiters.push_back(waiter);
    deadlines.reinstate(waiter->timer, *queued.slot, waiter);
    return waiter;
  }
  SessionState& owner = session_state(queued.session);
  Waiter* waiter = add_waiter(resource, queued.session, owner, queued.lease_s,
                              (queued.flags & kWaiterTwoPhase) != 0, queued.shared);
  waiter->since = queued.since;
  if ((queued.flags & kWaiterParked) != 0) {
    waiter->parked = true;
    owner.parked = waiter;
    deadlines.reinstate(waiter->timer, *queued.slot, waiter);
  }
  return waiter;
}
}  // namespace turnstile::core
