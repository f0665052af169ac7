// Engine's entry points (engine.h), and the queue moving on: promote() hands free capacity to the
// head of a queue, close_session() and cancel_parked() take a session's places out of them.
// The other members of Engine::Impl are in engine_*.cc (engine_internal.h names which file).
//
// Two canaries (core/canary.h: kSkipFifo, kSkipCloseDelay) compile this file alone with their
// macro; the code that tests their flags must stay in it.

#include "core/engine.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/canary.h"
#include "core/engine_internal.h"

namespace turnstile::core {

Engine::Impl::Impl(const EngineConfig& engine_config, RandomSource& salts,
                   ResourceBudget* resource_budget, FenceSource* fence_source)
    : config(engine_config),
      salt_source(salts),
      budget(resource_budget),
      fences(fence_source),
      last_fence(engine_config.fence_floor),
      block_next(engine_config.fence_floor.value + 1),
      block_left(fence_source != nullptr ? 0 : UINT64_MAX - engine_config.fence_floor.value) {
  TS_ASSERT(config.fence_block >= 1);
  TS_ASSERT(config.deadlines_per_call >= 1);
  TS_ASSERT(config.default_lease_s >= 1 && config.default_lease_s <= kMaxSeconds);
  TS_ASSERT(config.gc_max_idle >= Duration::zero());
  TS_ASSERT(config.resources_max >= 0 && config.waiters_max >= 0);
}

Engine::Impl::~Impl() {
  for (ResourceMap& map : resources) {
    map.for_each([this](const std::string&, Resource& resource) {
      if (budget != nullptr) budget->give_back();
      while (!resource.holders.empty()) {
        Holder* holder = resource.holders.front();
        resource.holders.remove(holder);
        delete holder;
      }
      while (!resource.waiters.empty()) {
        Waiter* waiter = resource.waiters.front();
        resource.waiters.remove(waiter);
        delete waiter;
      }
    });
  }
}

// Hands free capacity to the head of the queue, in order, until the resource is full or the
// queue is empty.
void Engine::Impl::promote(Resource& resource, std::vector<Delivery>& out) {
  while (resource.head_admitted()) {
    Waiter* waiter = resource.waiters.front();
    if constexpr (canary::kSkipFifo) {
      // CANARY (core/canary.h): grants the tail instead of the head.
      while (decltype(resource.waiters)::next(waiter) != nullptr) {
        waiter = decltype(resource.waiters)::next(waiter);
      }
    }
    if (waiter->owner == nullptr) {
      // An orphan reaches the head: the slot is granted to it and kept for its ref, until its
      // lease or its orphan time ends, whichever comes first.
      const std::optional<DeadlineQueue::Slot> until = deadlines.slot(waiter->timer);
      std::string ref;
      ref.swap(waiter->ref);
      --resource.orphans;  // the waiter's: it moves to the holder
      if (Holder* holder =
              grant(resource, waiter->session, nullptr, waiter->lease_s, waiter->shared)) {
        orphan_holder(*holder, std::move(ref),
                      until ? std::optional<Instant>(until->at) : std::nullopt);
      }
      remove_waiter(waiter);
      continue;
    }
    SessionState& state = *waiter->owner;
    Holder* holder = grant(resource, waiter->session, &state, waiter->lease_s, waiter->shared);
    if (holder == nullptr) {
      // No fence left: the waiter cannot ever be granted, so it is answered rather than left.
      if (waiter->parked) out.push_back(Delivery{waiter->session, Reply::of(Status::kError)});
      if (waiter->two_phase) erase_record(state, resource);
      remove_waiter(waiter);
      continue;
    }
    if (waiter->parked) {
      out.push_back(
          Delivery{waiter->session, Reply::granted(Status::kOk, holder->token, holder->lease_s)});
      if (waiter->two_phase) erase_record(state, resource);
    } else {
      TS_ASSERT(waiter->two_phase);
      holder->two_phase_pending = true;
      TwoPhaseRecord& record = state.records.at(&resource);
      record = TwoPhaseRecord{TwoPhaseRecord::State::kGranted, nullptr, holder};
    }
    remove_waiter(waiter);
  }
}

bool Engine::Impl::cancel_parked(SessionId session, std::vector<Delivery>& out) {
  auto it = sessions.find(session.value);
  if (it == sessions.end() || it->second.parked == nullptr) return false;
  // A timeout or grant that is already due wins over the cancel.
  if (behind()) settle(it->second.parked->resource, out);
  if (it->second.parked == nullptr) return false;
  Waiter* waiter = it->second.parked;
  Resource& resource = *waiter->resource;
  if (waiter->two_phase) erase_record(*waiter->owner, resource);
  remove_waiter(waiter);
  promote(resource, out);
  arm_gc(resource);
  return true;
}

bool Engine::Impl::close_session(SessionId session, bool auto_release, Duration orphan_ttl,
                                 std::vector<Delivery>& out) {
  auto it = sessions.find(session.value);
  if (it == sessions.end()) return false;
  SessionState& state = it->second;
  const bool dropped_parked = state.parked != nullptr;
  // With a stable ref and an orphan time, the session's places are kept for its ref.
  const bool keep = orphan_ttl > Duration::zero() && !state.ref.empty();
  const Instant until = now + orphan_ttl;
  std::vector<Resource*> touched;
  std::vector<Resource*> released;  // a holding of the session was released here
  // Waiters first, so that the releases below cannot promote this session's own waiters.
  if (keep) {
    // Their timers are scheduled in an order every replica agrees on, restored from a snapshot
    // or not (a session's own lists are in the order it acted, which a snapshot does not keep).
    for (Waiter* waiter : in_canonical_order(state.waiters)) {
      orphan_waiter(*waiter, state.ref, until);
    }
  }
  while (!state.waiters.empty()) {
    Waiter* waiter = state.waiters.front();
    touched.push_back(waiter->resource);
    remove_waiter(waiter);
  }
  for (auto& [resource, record] : state.records) {
    --resource->records;
    touched.push_back(resource);
  }
  state.records.clear();
  if (keep) {
    // Kept for the ref: with auto-release for the orphan time at most, without for its lease.
    // In canonical order, as the waiters above.
    for (Holder* holder : in_canonical_order(state.holders)) {
      state.holders.remove(holder);
      holder->owner = nullptr;
      holder->two_phase_pending = false;
      orphan_holder(*holder, state.ref,
                    auto_release ? std::optional<Instant>(until) : std::nullopt);
      hand_to_waiting_ref(*holder, out);
    }
  }
  while (!state.holders.empty()) {
    Holder* holder = state.holders.front();
    if (auto_release) {
      touched.push_back(holder->resource);
      released.push_back(holder->resource);
      remove_holder(holder);
    } else {
      state.holders.remove(holder);
      holder->owner = nullptr;
      holder->two_phase_pending = false;
    }
  }
  sessions.erase(it);
  promote_after_close(std::move(touched), std::move(released), out);
  return dropped_parked;
}

namespace {

// Sorts the resources into creation order and drops repeats.
void sort_by_creation(std::vector<Resource*>& resources) {
  std::sort(resources.begin(), resources.end(),
            [](const Resource* a, const Resource* b) { return a->serial < b->serial; });
  resources.erase(std::unique(resources.begin(), resources.end()), resources.end());
}

}  // namespace

// After a close: lock-delays start on the resources the session held (`released`), then the
// queues of all it was in (`touched`) move on.
void Engine::Impl::promote_after_close(std::vector<Resource*> touched,
                                       std::vector<Resource*> released,
                                       std::vector<Delivery>& out) {
  // Creation order, not pointer or hash order, decides who is promoted first, so fences are
  // minted in the same order on every run.
  sort_by_creation(touched);
  // The session left without releasing: lock-delays start, in creation order too (their
  // timers' order must not depend on the order the session acted in, which a snapshot loses).
  sort_by_creation(released);
  if constexpr (canary::kSkipCloseDelay) released.clear();  // CANARY (core/canary.h): no delay
  for (Resource* resource : released) start_delay(*resource);
  for (Resource* resource : touched) {
    promote(*resource, out);
    arm_gc(*resource);
  }
}

Engine::Engine(const EngineConfig& config, RandomSource& salt_source, ResourceBudget* budget,
               FenceSource* fences)
    : impl_(std::make_unique<Impl>(config, salt_source, budget, fences)) {}

Engine::~Engine() = default;

Reply Engine::handle(Instant now, SessionId session, const Request& request,
                     std::vector<Delivery>& out) {
  TS_ASSERT(is_engine_command(request.command));
  const Namespace ns = request_namespace(request);
  if (impl_->advance(now, out, impl_->config.deadlines_per_call)) {
    impl_->settle(impl_->find(ns, request.key), out);
  }
  switch (command_operation(request.command)) {
    case Operation::kAcquire:
      return impl_->acquire(session, ns, request, out);
    case Operation::kRelease:
      return impl_->release(session, ns, request, out);
    case Operation::kRenew:
      return impl_->renew(ns, request);
    case Operation::kEnqueue:
      return impl_->enqueue(session, ns, request);
    case Operation::kWait:
      return impl_->wait(session, ns, request, out);
    case Operation::kOther:
      switch (request.command) {
        case Command::kCheck:
          return impl_->check(ns, request);
        case Command::kInspect:
          return impl_->inspect_key(ns, request);
        case Command::kForceRelease:
          return impl_->force_release(ns, request, out);
        default:
          TS_ASSERT(request.command == Command::kBarrier);
          return Reply::of(Status::kOk);  // everything before it is done
      }
  }
  TS_ASSERT(false);
}

bool Engine::close_session(Instant now, SessionId session, bool auto_release,
                           std::vector<Delivery>& out, Duration orphan_ttl) {
  impl_->advance(now, out, impl_->config.deadlines_per_call);
  return impl_->close_session(session, auto_release, orphan_ttl, out);
}

bool Engine::cancel_parked(Instant now, SessionId session, std::vector<Delivery>& out) {
  impl_->advance(now, out, impl_->config.deadlines_per_call);
  return impl_->cancel_parked(session, out);
}

void Engine::tick(Instant now, std::vector<Delivery>& out) {
  impl_->advance(now, out, impl_->config.deadlines_per_call);
}

std::optional<Instant> Engine::next_wake() const { return impl_->deadlines.next(); }

StatsSnapshot Engine::stats(Instant now, std::vector<Delivery>& out) {
  impl_->advance(now, out, SIZE_MAX);  // it reports every resource: bring them all up to date
  return impl_->stats();
}

StatsSnapshot Engine::stats_view() const { return impl_->stats(); }

std::vector<SessionId> Engine::sessions() const {
  std::vector<SessionId> ids;
  for (const auto& [id, state] : impl_->sessions) {
    if (!state.holders.empty() || !state.waiters.empty() || !state.records.empty()) {
      ids.push_back(SessionId{id});
    }
  }
  std::sort(ids.begin(), ids.end(), [](SessionId a, SessionId b) { return a.value < b.value; });
  return ids;
}

Instant Engine::now() const { return impl_->now; }
const EngineCounters& Engine::counters() const { return impl_->counters; }
std::size_t Engine::resources_count() const { return impl_->resources_count(); }
Fence Engine::last_fence() const { return impl_->last_fence; }

bool Engine::has_parked(SessionId session) const {
  auto it = impl_->sessions.find(session.value);
  return it != impl_->sessions.end() && it->second.parked != nullptr;
}

std::vector<Loss> Engine::take_losses() {
  std::vector<Loss> taken;
  taken.swap(impl_->losses);
  return taken;
}

std::string Engine::save() const { return impl_->save(); }
bool Engine::restore(std::string_view bytes) { return impl_->restore(bytes); }

std::vector<Engine::ResourceView> Engine::inspect() const { return impl_->inspect(); }

}  // namespace turnstile::core
