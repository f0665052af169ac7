// Engine::Impl and time: advance() moves time forward and processes due deadlines in order,
// settle() brings one resource up to date, and the deadlines themselves: a lease that ends (and
// the loss it reports), a lock-delay that starts and ends, a wait that times out, an idle
// resource that is collected.

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "core/engine_internal.h"
#include "core/loss.h"

namespace turnstile::core {

// Moves time to `input_now` (never backward) and processes due deadlines in (instant, kind,
// sequence) order, at most `limit` of them that change something: a GC timer of a resource in
// use again only re-arms itself and is not counted. What is left stays due (next_wake() <= now)
// for the next call. Returns whether some was left.
bool Engine::Impl::advance(Instant input_now, std::vector<Delivery>& out, std::size_t limit) {
  if (input_now < now) {
    ++counters.clock_regressions;
  } else {
    now = input_now;
  }
  for (std::size_t done = 0; done < limit;) {
    std::optional<DeadlineQueue::Due> due = deadlines.pop_due(now);
    if (!due) return false;
    if (process(*due, out)) ++done;
  }
  return behind();
}

// Processes one deadline already taken off the queue; false when it changed nothing.
bool Engine::Impl::process(const DeadlineQueue::Due& due, std::vector<Delivery>& out) {
  switch (due.kind) {
    case DeadlineQueue::Kind::kLeaseExpiry:
      expire(static_cast<Holder*>(due.owner), out);
      return true;
    case DeadlineQueue::Kind::kDelayEnd:
      end_delay(static_cast<Resource*>(due.owner), out);
      return true;
    case DeadlineQueue::Kind::kWaitTimeout:
      time_out(static_cast<Waiter*>(due.owner), out);
      return true;
    case DeadlineQueue::Kind::kIdleGc:
      return collect(static_cast<Resource*>(due.owner), due.at);
  }
  TS_ASSERT(false);
}

// Whether advance() left due deadlines behind.
bool Engine::Impl::behind() const {
  const std::optional<Instant> next = deadlines.next();
  return next && *next <= now;
}

// Brings one resource up to date while others may still be behind: every due deadline of the
// resource (its holders' leases, its parked waiters' timeouts, its GC) is processed, in the
// order advance() would have taken them. Deadlines of different resources never affect each
// other, so a request sees its resource exactly as it would after a full advance; only fence
// numbers (taken in processing order) and the moment other resources' deliveries leave
// differ. The resource may be collected on the way.
void Engine::Impl::settle(Resource* resource, std::vector<Delivery>& out) {
  if (resource == nullptr) return;
  holder_pool.keep_all(true);
  waiter_pool.keep_all(true);
  settle_passes(resource, out);
  holder_pool.keep_all(false);
  waiter_pool.keep_all(false);
}

void Engine::Impl::settle_passes(Resource* resource, std::vector<Delivery>& out) {
  struct Item {
    DeadlineQueue::Slot slot;
    DeadlineQueue::Timer* timer;
    DeadlineQueue::Kind kind;
    void* owner;
  };
  std::vector<Item> items;
  auto consider = [&](DeadlineQueue::Timer& timer, DeadlineQueue::Kind kind, void* owner) {
    const std::optional<DeadlineQueue::Slot> slot = deadlines.slot(timer);
    if (slot && slot->at <= now) items.push_back(Item{*slot, &timer, kind, owner});
  };
  // A pass processes what was due when it began; an expiry can make the resource collectable
  // with its GC instant already past, which the next pass takes. Grants and re-armed GC timers
  // land after `now`, so passes end.
  while (true) {
    items.clear();
    for (Holder* h = resource->holders.front(); h != nullptr;
         h = decltype(resource->holders)::next(h)) {
      consider(h->timer, DeadlineQueue::Kind::kLeaseExpiry, h);
    }
    for (Waiter* w = resource->waiters.front(); w != nullptr;
         w = decltype(resource->waiters)::next(w)) {
      consider(w->timer, DeadlineQueue::Kind::kWaitTimeout, w);
    }
    consider(resource->delay_timer, DeadlineQueue::Kind::kDelayEnd, resource);
    consider(resource->gc_timer, DeadlineQueue::Kind::kIdleGc, resource);
    if (items.empty()) break;
    std::sort(items.begin(), items.end(),
              [](const Item& a, const Item& b) { return a.slot < b.slot; });
    for (const Item& item : items) {
      // Taken or moved by an earlier item (a waiter granted before its timeout; a holder node
      // recycled into a new grant): its slot is gone. Recycled nodes stay allocated until
      // settle() ends, so reading the timer is safe.
      if (deadlines.slot(*item.timer) != item.slot) continue;
      deadlines.cancel(*item.timer);
      const bool changed = process({item.kind, item.owner, item.slot.at}, out);
      if (changed && item.kind == DeadlineQueue::Kind::kIdleGc) return;  // it is gone
    }
  }
}

// Arms the resource's GC timer when it has just become collectable. A timer that fires on a
// resource in use again does nothing; the next time the resource empties it is armed anew.
// GC timers of the same instant are ranked by creation order, so that a call that stops part
// way (advance's limit) leaves the same resources behind on every run.
void Engine::Impl::arm_gc(Resource& resource) {
  if (!resource.collectable() || resource.gc_timer.scheduled()) return;
  deadlines.schedule(resource.gc_timer, gc_due(resource), DeadlineQueue::Kind::kIdleGc, &resource,
                     resource.serial);
}

// The first instant at which the resource has been idle for longer than gc_max_idle.
Instant Engine::Impl::gc_due(const Resource& resource) const {
  return resource.last_activity + config.gc_max_idle + Duration::nanoseconds(1);
}

// The GC timer armed for `armed_for` fired. Returns true when the resource was deleted.
bool Engine::Impl::collect(Resource* resource, Instant armed_for) {
  if (!resource->collectable()) return false;
  if (gc_due(*resource) > armed_for) {
    // Touched since the timer was armed: its GC instant is later. Re-armed there even when that
    // is already past, so that it takes its place among the other due deadlines (a call that
    // stops part way must not have collected it ahead of them).
    arm_gc(*resource);
    return false;
  }
  // When gc_due saturates at the end of time it is not later than now, and the resource can
  // never become old enough.
  if (now - resource->last_activity <= config.gc_max_idle) return false;
  ++counters.resources_collected;
  resources[ns_index(resource->ns)].erase(*resource);
  if (budget != nullptr) budget->give_back();
  return true;
}

void Engine::Impl::expire(Holder* holder, std::vector<Delivery>& out) {
  ++counters.lease_expiries;
  Resource& resource = *holder->resource;
  report_loss(*holder, holder->owner != nullptr ? LossReason::kExpired : LossReason::kReclaimed);
  if (holder->two_phase_pending && holder->owner != nullptr) {
    TwoPhaseRecord& record = holder->owner->records.at(&resource);
    record = TwoPhaseRecord{TwoPhaseRecord::State::kExpired, nullptr, nullptr};
  }
  remove_holder(holder);
  start_delay(resource);
  promote(resource, out);
  arm_gc(resource);
}

// The holder's slot is gone without its release: its session, if still open, hears of it; an
// orphan kept for a stable ref is told to the open sessions with that ref, in id order.
void Engine::Impl::report_loss(const Holder& holder, LossReason reason) {
  const Resource& resource = *holder.resource;
  auto lost_by = [&](SessionId session) {
    losses.push_back(
        Loss{session, LostSlot{resource.ns, std::string(resource.key), holder.token, reason}});
  };
  if (holder.owner != nullptr) {
    lost_by(holder.session);
    return;
  }
  if (holder.ref.empty()) return;  // its session closed and nobody can claim it
  std::vector<std::uint64_t> ids;
  for (const auto& [id, state] : sessions) {
    if (state.ref == holder.ref) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  for (std::uint64_t id : ids) lost_by(SessionId{id});
}

// A holder left without releasing (its lease ran out, or its session closed holding it): with
// a lock-delay, the key grants nothing until the delay is over (docs/semantics.md, "Lock-delay"),
// so that writes the old holder still has in flight land before the next holder starts.
void Engine::Impl::start_delay(Resource& resource) {
  if (config.lock_delay <= Duration::zero()) return;
  const Instant until = now + config.lock_delay;
  const std::optional<DeadlineQueue::Slot> slot = deadlines.slot(resource.delay_timer);
  if (slot && slot->at >= until) return;
  deadlines.cancel(resource.gc_timer);  // not collectable while the delay lasts
  deadlines.schedule(resource.delay_timer, until, DeadlineQueue::Kind::kDelayEnd, &resource);
}

void Engine::Impl::end_delay(Resource* resource, std::vector<Delivery>& out) {
  promote(*resource, out);
  arm_gc(*resource);
}

void Engine::Impl::time_out(Waiter* waiter, std::vector<Delivery>& out) {
  Resource& resource = *waiter->resource;
  if (waiter->owner != nullptr) {
    ++counters.wait_timeouts;
    out.push_back(Delivery{waiter->session, Reply::of(Status::kTimeout)});
    if (waiter->two_phase) erase_record(*waiter->owner, resource);
  }  // else an orphan's time ended: nobody is waiting for a reply
  remove_waiter(waiter);
  promote(resource, out);
  arm_gc(resource);
}
}  // namespace turnstile::core
