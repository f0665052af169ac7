// Engine::Impl's operator commands and reports: check, inspect (one key, as JSON),
// force-release, stats (every resource) and inspect() (every holder and waiter, for tests and
// the simulator).

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/engine_internal.h"
#include "core/stats.h"

namespace turnstile::core {

// check: whether `token` holds the key now; `ok <seconds left, rounded up>` if so. Touches
// nothing.
Reply Engine::Impl::check(Namespace ns, const Request& request) {
  Resource* resource = find(ns, request.key);
  const Holder* holder =
      resource != nullptr && request.token ? find_holder(*resource, *request.token) : nullptr;
  if (holder == nullptr) return Reply::of(Status::kErrorLeaseExpired);
  const std::int64_t left_ns = (holder->deadline - now).ns();
  const std::int64_t second = Duration::seconds(1).ns();
  return Reply::renewed(left_ns / second + (left_ns % second != 0 ? 1 : 0));
}

// inspect: the key's holders and waiters as JSON (core/stats.h). Touches nothing.
Reply Engine::Impl::inspect_key(Namespace ns, const Request& request) {
  KeyInspection inspection;
  inspection.kind = std::string(namespace_word(ns));
  inspection.key = request.key;
  const Resource* resource = find(ns, request.key);
  if (resource != nullptr) {
    inspection.exists = true;
    inspection.limit = resource->limit;
    for (const Holder* h = resource->holders.front(); h != nullptr;
         h = decltype(resource->holders)::next(h)) {
      inspection.holders.push_back(
          KeyInspection::Holder{h->token.fence.value, h->session,
                                std::max(Duration::zero(), h->deadline - now).seconds_double(),
                                h->shared, h->owner == nullptr});
    }
    for (const Waiter* w = resource->waiters.front(); w != nullptr;
         w = decltype(resource->waiters)::next(w)) {
      inspection.waiters.push_back(KeyInspection::Waiter{
          w->session, std::max(Duration::zero(), now - w->since).seconds_double(), w->shared,
          w->owner == nullptr});
    }
    if (const std::optional<DeadlineQueue::Slot> delay = deadlines.slot(resource->delay_timer)) {
      inspection.lock_delay_left_s = std::max(Duration::zero(), delay->at - now).seconds_double();
    }
  }
  return Reply::stats(encode_inspection_json(inspection));
}

// force-release: frees every holder of the key (or the one whose fence is request.fence) as if
// its lease had ended now: its token stops working (error_lease_expired), its open session
// hears of the loss, the lock-delay starts and the queue moves on. `ok <n>`: n freed. With
// request.clear_delay no lock-delay starts for them, and a running one ends (whether or not
// anyone was freed: a key nobody holds may still be delayed): Reply::delay_cleared says so.
Reply Engine::Impl::force_release(Namespace ns, const Request& request,
                                  std::vector<Delivery>& out) {
  Resource* resource = find(ns, request.key);
  if (resource == nullptr) return Reply::delivered(0);
  std::vector<Holder*> victims;
  for (Holder* h = resource->holders.front(); h != nullptr;
       h = decltype(resource->holders)::next(h)) {
    if (request.fence == 0 || h->token.fence.value == request.fence) victims.push_back(h);
  }
  const bool clear = request.clear_delay && resource->delay_timer.scheduled();
  if (victims.empty() && !clear) return Reply::delivered(0);
  for (Holder* holder : victims) {
    ++counters.forced_releases;
    report_loss(*holder, LossReason::kForced);
    if (holder->two_phase_pending && holder->owner != nullptr) {
      holder->owner->records.at(resource) =
          TwoPhaseRecord{TwoPhaseRecord::State::kExpired, nullptr, nullptr};
    }
    resource->forced_fences.push_back(holder->token.fence.value);
    remove_holder(holder);
  }
  if (resource->forced_fences.size() > kForcedRemembered) {
    resource->forced_fences.erase(
        resource->forced_fences.begin(),
        resource->forced_fences.end() - static_cast<std::ptrdiff_t>(kForcedRemembered));
  }
  resource->last_activity = now;
  if (clear) {
    deadlines.cancel(resource->delay_timer);
  } else if (!request.clear_delay) {
    start_delay(*resource);
  }
  promote(*resource, out);
  arm_gc(*resource);
  return Reply::force_released(static_cast<std::int64_t>(victims.size()), clear);
}

StatsSnapshot Engine::Impl::stats() const {
  StatsSnapshot part;
  for (const ResourceMap& map : resources) {
    map.for_each([&](const std::string& key, const Resource& resource) {
      const bool busy = !resource.idle();
      if (resource.ns == Namespace::kReadWrite) {
        if (!busy) {
          part.idle_rw_locks.push_back(
              IdleStats{key, (now - resource.last_activity).seconds_double()});
          return;
        }
        ReadWriteStats entry;
        entry.key = key;
        entry.waiters = static_cast<std::int64_t>(resource.waiters.size());
        std::optional<Instant> soonest;
        for (const Holder* h = resource.holders.front(); h != nullptr;
             h = decltype(resource.holders)::next(h)) {
          if (h->shared) {
            ++entry.readers;
          } else {
            entry.writer = h->session;
          }
          if (!soonest || h->deadline < *soonest) soonest = h->deadline;
        }
        if (soonest) {
          entry.lease_expires_in_s = std::max(Duration::zero(), *soonest - now).seconds_double();
        }
        part.rw_locks.push_back(std::move(entry));
      } else if (resource.limit == 1) {
        if (busy) {
          const Holder* holder = resource.holders.front();
          LockStats entry;
          entry.key = key;
          entry.waiters = static_cast<std::int64_t>(resource.waiters.size());
          if (holder != nullptr) {
            entry.owner = holder->session;
            entry.lease_expires_in_s =
                std::max(Duration::zero(), holder->deadline - now).seconds_double();
          }
          part.locks.push_back(std::move(entry));
        } else {
          part.idle_locks.push_back(
              IdleStats{key, (now - resource.last_activity).seconds_double()});
        }
      } else if (busy) {
        part.semaphores.push_back(
            SemaphoreStats{key, resource.limit, static_cast<std::int64_t>(resource.holders.size()),
                           static_cast<std::int64_t>(resource.waiters.size())});
      } else {
        part.idle_semaphores.push_back(
            IdleStats{key, (now - resource.last_activity).seconds_double()});
      }
    });
  }
  part.counters = StatsCounters{counters.grants, counters.lease_expiries, counters.wait_timeouts,
                                counters.fence_exhausted};
  part.totals = totals_of(part);  // every key's, before merge_stats cuts the lists
  StatsSnapshot sorted;
  merge_stats(sorted, std::move(part), config.stats_entries_max);
  return sorted;
}

std::vector<Engine::ResourceView> Engine::Impl::inspect() const {
  std::vector<ResourceView> views;
  for (const ResourceMap& map : resources) {
    map.for_each([&](const std::string& key, const Resource& resource) {
      ResourceView view{resource.ns, key, resource.limit, {}, {}, {}, {}, {}, {}, {}};
      for (const Holder* h = resource.holders.front(); h != nullptr;
           h = decltype(resource.holders)::next(h)) {
        view.holders.push_back(HolderView{resource.ns, key, h->token, h->session, h->deadline,
                                          h->owner != nullptr ? h->owner->ref : h->ref, h->shared});
      }
      if (const std::optional<DeadlineQueue::Slot> delay = deadlines.slot(resource.delay_timer)) {
        view.delayed_until = delay->at;
      }
      for (const Waiter* w = resource.waiters.front(); w != nullptr;
           w = decltype(resource.waiters)::next(w)) {
        view.waiters.push_back(w->session);
        view.waiters_orphaned.push_back(w->owner == nullptr);
        view.waiter_refs.push_back(w->owner != nullptr ? w->owner->ref : w->ref);
        view.waiters_shared.push_back(w->shared);
        view.waiters_since.push_back(w->since);
      }
      views.push_back(std::move(view));
    });
  }
  std::sort(views.begin(), views.end(), [](const ResourceView& a, const ResourceView& b) {
    return std::pair(a.ns, std::string_view(a.key)) < std::pair(b.ns, std::string_view(b.key));
  });
  return views;
}
}  // namespace turnstile::core
