// Engine::Impl's stable refs (docs/semantics.md, "Stable refs and orphans"): the holders and
// waiters a closed session leaves orphaned under its ref, in an order every replica agrees on,
// and their adoption by a later session with the same ref.

#include <algorithm>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/engine_internal.h"

namespace turnstile::core {

// Keeps `holder` (already without an owner) for `ref`; its lease ends no later than `until`.
void Engine::Impl::orphan_holder(Holder& holder, std::string ref, std::optional<Instant> until) {
  holder.ref = std::move(ref);
  ++holder.resource->orphans;
  if (until && *until < holder.deadline) {
    holder.deadline = *until;
    deadlines.schedule(holder.timer, holder.deadline, DeadlineQueue::Kind::kLeaseExpiry, &holder);
  }
}

// Keeps `waiter`'s place in the queue for `ref` until `until`; its request, if parked, is gone.
void Engine::Impl::orphan_waiter(Waiter& waiter, const std::string& ref, Instant until) {
  waiter.owner->waiters.remove(&waiter);
  if (waiter.owner->parked == &waiter) waiter.owner->parked = nullptr;
  waiter.owner = nullptr;
  waiter.parked = false;
  waiter.two_phase = false;
  waiter.ref = ref;
  ++waiter.resource->orphans;
  deadlines.schedule(waiter.timer, until, DeadlineQueue::Kind::kWaitTimeout, &waiter);
}

// A session's waiters by (resource creation, place in the queue), or its holders by (resource
// creation, fence): an order that does not depend on the order the session acted in.
std::vector<Waiter*> Engine::Impl::in_canonical_order(
    const IntrusiveList<Waiter, &Waiter::in_session>& list) {
  std::vector<std::pair<std::pair<std::uint64_t, std::size_t>, Waiter*>> keyed;
  for (Waiter* w = list.front(); w != nullptr; w = std::remove_cvref_t<decltype(list)>::next(w)) {
    std::size_t place = 0;
    for (Waiter* q = w->resource->waiters.front(); q != w;
         q = decltype(w->resource->waiters)::next(q)) {
      ++place;
    }
    keyed.push_back({{w->resource->serial, place}, w});
  }
  std::sort(keyed.begin(), keyed.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Waiter*> ordered;
  for (const auto& [key, waiter] : keyed) ordered.push_back(waiter);
  return ordered;
}

std::vector<Holder*> Engine::Impl::in_canonical_order(
    const IntrusiveList<Holder, &Holder::in_session>& list) {
  std::vector<Holder*> ordered;
  for (Holder* h = list.front(); h != nullptr; h = std::remove_cvref_t<decltype(list)>::next(h)) {
    ordered.push_back(h);
  }
  std::sort(ordered.begin(), ordered.end(), [](const Holder* a, const Holder* b) {
    return std::pair(a->resource->serial, a->token.fence.value) <
           std::pair(b->resource->serial, b->token.fence.value);
  });
  return ordered;
}

// An orphan is adopted only by a request for the same kind of slot: a read request never
// takes back a write slot, nor the reverse.
Holder* Engine::Impl::find_orphan_holder(Resource& resource, std::string_view ref, bool shared) {
  for (Holder* h = resource.holders.front(); h != nullptr;
       h = decltype(resource.holders)::next(h)) {
    if (h->owner == nullptr && h->ref == ref && h->shared == shared) return h;
  }
  return nullptr;
}

Waiter* Engine::Impl::find_orphan_waiter(Resource& resource, std::string_view ref, bool shared) {
  for (Waiter* w = resource.waiters.front(); w != nullptr;
       w = decltype(resource.waiters)::next(w)) {
    if (w->owner == nullptr && w->ref == ref && w->shared == shared) return w;
  }
  return nullptr;
}

// A client that came back before its old session was seen to close is already waiting on the
// key under the same ref (behind its own slot): the orphan goes to it at once, as its adoption
// would, instead of making it wait out the orphan time.
void Engine::Impl::hand_to_waiting_ref(Holder& holder, std::vector<Delivery>& out) {
  Resource& resource = *holder.resource;
  Waiter* waiter = resource.waiters.front();
  while (waiter != nullptr && (waiter->owner == nullptr || waiter->owner->ref != holder.ref ||
                               waiter->shared != holder.shared)) {
    waiter = decltype(resource.waiters)::next(waiter);
  }
  if (waiter == nullptr) return;
  SessionState& state = *waiter->owner;
  adopt_holder(holder, waiter->session, state, waiter->lease_s);
  if (waiter->parked) {
    out.push_back(
        Delivery{waiter->session, Reply::granted(Status::kOk, holder.token, holder.lease_s)});
    if (waiter->two_phase) erase_record(state, resource);
  } else {
    holder.two_phase_pending = true;
    state.records.at(&resource) = TwoPhaseRecord{TwoPhaseRecord::State::kGranted, nullptr, &holder};
  }
  remove_waiter(waiter);
}

// The session takes the orphaned holder back: the same token, a fresh lease.
void Engine::Impl::adopt_holder(Holder& holder, SessionId session, SessionState& state,
                                std::int64_t lease_s) {
  holder.ref.clear();
  --holder.resource->orphans;
  holder.session = session;
  holder.owner = &state;
  state.holders.push_back(&holder);
  holder.two_phase_pending = false;
  holder.lease_s = lease_s;
  holder.deadline = deadline_after(lease_s);
  deadlines.schedule(holder.timer, holder.deadline, DeadlineQueue::Kind::kLeaseExpiry, &holder);
}

// The session takes the orphaned place in the queue back.
void Engine::Impl::adopt_waiter(Waiter& waiter, SessionId session, SessionState& state,
                                std::int64_t lease_s, bool two_phase) {
  waiter.ref.clear();
  --waiter.resource->orphans;
  waiter.session = session;
  waiter.owner = &state;
  state.waiters.push_back(&waiter);
  waiter.lease_s = lease_s;
  waiter.two_phase = two_phase;
  deadlines.cancel(waiter.timer);
}
}  // namespace turnstile::core
