// Engine::Impl's keyed requests of a client: acquire (l, sl, rl, wl), the two-phase enqueue and
// wait (e/w, se/sw, re/rw, we/ww), release and renew. A read-write lock takes the same paths,
// with `shared` choosing a read or a write slot (Resource::admits).

#include <algorithm>
#include <vector>

#include "core/engine_internal.h"

namespace turnstile::core {

std::int64_t Engine::Impl::lease_of(const Request& request) const {
  return request.lease_s > 0 ? request.lease_s : config.default_lease_s;
}

Reply Engine::Impl::acquire(SessionId session, Namespace ns, const Request& request,
                            std::vector<Delivery>& out) {
  const std::int64_t limit = ns == Namespace::kSemaphore ? request.limit : 1;
  const bool shared = is_shared_command(request.command);
  const std::int64_t lease_s = lease_of(request);
  Status status = Status::kError;
  Resource* resource = find_or_create(ns, request, limit, status);
  if (resource == nullptr) return Reply::of(status);
  resource->last_activity = now;
  SessionState& state = session_state(session);
  TS_ASSERT(state.parked == nullptr);
  if (!request.ref.empty()) {
    if (state.ref.empty()) state.ref = request.ref;
    if (resource->orphans > 0) {
      if (Holder* holder = find_orphan_holder(*resource, request.ref, shared)) {
        adopt_holder(*holder, session, state, lease_s);
        return Reply::granted(Status::kOk, holder->token, lease_s);
      }
      if (Waiter* waiter = find_orphan_waiter(*resource, request.ref, shared)) {
        adopt_waiter(*waiter, session, state, lease_s, /*two_phase=*/false);
        if (request.timeout_s == 0) {
          // Try-once gives the place up. If it was a writer's at the head of a read-write
          // lock that readers hold, the readers behind it move up.
          remove_waiter(waiter);
          promote(*resource, out);
          return Reply::of(Status::kTimeout);
        }
        park(waiter, request.timeout_s);
        return Reply::parked();
      }
    }
  }

  if (resource->waiters.empty() && resource->admits(shared)) {
    Holder* holder = grant(*resource, session, &state, lease_s, shared);
    if (holder == nullptr) {
      arm_gc(*resource);
      return Reply::of(Status::kError);
    }
    return Reply::granted(Status::kOk, holder->token, lease_s);
  }
  if (queue_full(*resource)) return Reply::of(Status::kErrorMaxWaiters);
  if (request.timeout_s == 0) return Reply::of(Status::kTimeout);
  park(add_waiter(*resource, session, state, lease_s, /*two_phase=*/false, shared),
       request.timeout_s);
  return Reply::parked();
}

bool Engine::Impl::queue_full(const Resource& resource) const {
  return config.waiters_max > 0 &&
         static_cast<std::int64_t>(resource.waiters.size()) >= config.waiters_max;
}

Reply Engine::Impl::enqueue(SessionId session, Namespace ns, const Request& request) {
  const std::int64_t limit = ns == Namespace::kSemaphore ? request.limit : 1;
  const bool shared = is_shared_command(request.command);
  const std::int64_t lease_s = lease_of(request);
  if (Resource* existing = find(ns, request.key); existing != nullptr) {
    if (const TwoPhaseRecord* record = find_record(session, *existing);
        record != nullptr && record->state != TwoPhaseRecord::State::kExpired) {
      return Reply::of(Status::kErrorAlreadyEnqueued);
    }
  }
  Status status = Status::kError;
  Resource* resource = find_or_create(ns, request, limit, status);
  if (resource == nullptr) return Reply::of(status);
  resource->last_activity = now;
  SessionState& state = session_state(session);
  TS_ASSERT(state.parked == nullptr);
  if (state.records.contains(resource)) erase_record(state, *resource);  // an expired record
  if (!request.ref.empty()) {
    if (state.ref.empty()) state.ref = request.ref;
    if (resource->orphans > 0) {
      if (Holder* holder = find_orphan_holder(*resource, request.ref, shared)) {
        adopt_holder(*holder, session, state, lease_s);
        holder->two_phase_pending = true;
        add_record(state, *resource, {TwoPhaseRecord::State::kGranted, nullptr, holder});
        return Reply::granted(Status::kAcquired, holder->token, lease_s);
      }
      if (Waiter* waiter = find_orphan_waiter(*resource, request.ref, shared)) {
        adopt_waiter(*waiter, session, state, lease_s, /*two_phase=*/true);
        add_record(state, *resource, {TwoPhaseRecord::State::kWaiting, waiter, nullptr});
        return Reply::of(Status::kQueued);
      }
    }
  }

  if (resource->waiters.empty() && resource->admits(shared)) {
    Holder* holder = grant(*resource, session, &state, lease_s, shared);
    if (holder == nullptr) {
      arm_gc(*resource);
      return Reply::of(Status::kError);
    }
    holder->two_phase_pending = true;
    add_record(state, *resource, {TwoPhaseRecord::State::kGranted, nullptr, holder});
    return Reply::granted(Status::kAcquired, holder->token, lease_s);
  }
  if (queue_full(*resource)) return Reply::of(Status::kErrorMaxWaiters);
  Waiter* waiter = add_waiter(*resource, session, state, lease_s, /*two_phase=*/true, shared);
  add_record(state, *resource, {TwoPhaseRecord::State::kWaiting, waiter, nullptr});
  return Reply::of(Status::kQueued);
}

Reply Engine::Impl::wait(SessionId session, Namespace ns, const Request& request,
                         std::vector<Delivery>& out) {
  Resource* resource = find(ns, request.key);
  if (resource == nullptr) return Reply::of(Status::kErrorNotEnqueued);
  auto state_it = sessions.find(session.value);
  if (state_it == sessions.end()) return Reply::of(Status::kErrorNotEnqueued);
  SessionState& state = state_it->second;
  TS_ASSERT(state.parked == nullptr);
  auto record_it = state.records.find(resource);
  if (record_it == state.records.end()) return Reply::of(Status::kErrorNotEnqueued);
  TwoPhaseRecord record = record_it->second;
  // A read-write lock's `rw` waits for what `re` asked, `ww` for what `we` asked.
  const bool shared = is_shared_command(request.command);
  if ((record.waiter != nullptr && record.waiter->shared != shared) ||
      (record.holder != nullptr && record.holder->shared != shared)) {
    return Reply::of(Status::kErrorNotEnqueued);
  }
  resource->last_activity = now;

  switch (record.state) {
    case TwoPhaseRecord::State::kExpired:
      erase_record(state, *resource);
      arm_gc(*resource);
      return Reply::of(Status::kErrorLeaseExpired);
    case TwoPhaseRecord::State::kGranted: {
      Holder* holder = record.holder;
      erase_record(state, *resource);
      holder->two_phase_pending = false;
      holder->deadline = deadline_after(holder->lease_s);  // the lease restarts at delivery
      deadlines.schedule(holder->timer, holder->deadline, DeadlineQueue::Kind::kLeaseExpiry,
                         holder);
      return Reply::granted(Status::kOk, holder->token, holder->lease_s);
    }
    case TwoPhaseRecord::State::kWaiting:
      if (request.timeout_s == 0) {
        erase_record(state, *resource);
        remove_waiter(record.waiter);
        promote(*resource, out);
        arm_gc(*resource);
        return Reply::of(Status::kTimeout);
      }
      park(record.waiter, request.timeout_s);
      return Reply::parked();
  }
  TS_ASSERT(false);
}

Reply Engine::Impl::release(SessionId session, Namespace ns, const Request& request,
                            std::vector<Delivery>& out) {
  Resource* resource = find(ns, request.key);
  if (resource == nullptr || !request.token) return Reply::of(Status::kError);
  Holder* holder = find_holder(*resource, *request.token);
  if (holder == nullptr) return Reply::of(unheld_status(*resource, *request.token));
  if (holder->shared != is_shared_command(request.command)) return Reply::of(Status::kError);
  // A give-back takes back only what its closed session still holds: not a slot its close
  // handed to a waiter with its stable ref, nor one another session adopted since.
  if (request.give_back && holder->session != session) return Reply::of(Status::kError);
  if (holder->two_phase_pending && holder->owner != nullptr) {
    erase_record(*holder->owner, *resource);
  }
  remove_holder(holder);
  resource->last_activity = now;
  promote(*resource, out);
  arm_gc(*resource);
  return Reply::of(Status::kOk);
}

Reply Engine::Impl::renew(Namespace ns, const Request& request) {
  Resource* resource = find(ns, request.key);
  if (resource == nullptr || !request.token) return Reply::of(Status::kError);
  Holder* holder = find_holder(*resource, *request.token);
  if (holder == nullptr) return Reply::of(unheld_status(*resource, *request.token));
  if (holder->shared != is_shared_command(request.command)) return Reply::of(Status::kError);
  const std::int64_t ttl_s = lease_of(request);
  holder->deadline = deadline_after(ttl_s);
  deadlines.schedule(holder->timer, holder->deadline, DeadlineQueue::Kind::kLeaseExpiry, holder);
  resource->last_activity = now;
  return Reply::renewed(ttl_s);
}

// What a release or renewal of a token that holds nothing is told: error_lease_expired when an
// operator forced that holder out, error otherwise (dflockd's answer to a token it does not
// know).
Status Engine::Impl::unheld_status(const Resource& resource, const Token& token) {
  const bool forced = std::find(resource.forced_fences.begin(), resource.forced_fences.end(),
                                token.fence.value) != resource.forced_fences.end();
  return forced ? Status::kErrorLeaseExpired : Status::kError;
}
}  // namespace turnstile::core
