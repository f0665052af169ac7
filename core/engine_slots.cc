// Engine::Impl's bookkeeping of slots: finding and creating resources, minting fences and
// tokens, adding and removing holders and waiters, parking a request, and the two-phase records
// of (session, resource) pairs.

#include <memory>
#include <optional>
#include <unordered_map>

#include "core/engine_internal.h"

namespace turnstile::core {

std::size_t Engine::Impl::resources_count() const {
  std::size_t count = 0;
  for (const ResourceMap& map : resources) count += map.size();
  return count;
}

Resource* Engine::Impl::create(Namespace ns, std::string_view key, std::int64_t limit) {
  auto& [stored_key, resource] = resources[ns_index(ns)].add(key);
  resource.ns = ns;
  resource.key = stored_key;
  resource.limit = limit;
  resource.serial = ++next_serial;
  resource.last_activity = now;
  if (indexes_holders(ns, limit)) {
    resource.holders_by_fence = std::make_unique<std::unordered_map<std::uint64_t, Holder*>>();
  }
  return &resource;
}

SessionState& Engine::Impl::session_state(SessionId session) {
  TS_ASSERT(session.value != 0);
  return sessions[session.value];
}

// Whether a fence can be minted now, taking the next block from the source when the current
// one is used up.
bool Engine::Impl::fence_available() {
  if (block_left > 0) return true;
  if (fences == nullptr) return false;  // UINT64_MAX reached: the space is used up
  const FenceBlock block = fences->take(config.fence_block);
  if (block.count == 0) return false;
  TS_ASSERT(block.first > last_fence.value && block.count - 1 <= UINT64_MAX - block.first);
  block_next = block.first;
  block_left = block.count;
  return true;
}

// Mints the next token, or nullopt when no fence is available (it never wraps).
std::optional<Token> Engine::Impl::mint() {
  if (!fence_available()) {
    ++counters.fence_exhausted;
    return std::nullopt;
  }
  last_fence.value = block_next++;  // wraps only past the last fence, which is never minted
  --block_left;
  ++counters.grants;
  return Token{last_fence, salt_source.next_u64()};
}

Holder* Engine::Impl::grant(Resource& resource, SessionId session, SessionState* owner,
                            std::int64_t lease_s, bool shared) {
  TS_ASSERT(resource.admits(shared));
  std::optional<Token> token = mint();
  if (!token) return nullptr;
  Holder* holder = holder_pool.make();
  holder->token = *token;
  holder->session = session;
  holder->owner = owner;
  holder->resource = &resource;
  holder->lease_s = lease_s;
  holder->shared = shared;
  holder->deadline = deadline_after(lease_s);
  resource.holders.push_back(holder);
  if (owner != nullptr) owner->holders.push_back(holder);
  if (resource.holders_by_fence) resource.holders_by_fence->emplace(token->fence.value, holder);
  deadlines.schedule(holder->timer, holder->deadline, DeadlineQueue::Kind::kLeaseExpiry, holder);
  return holder;
}

Holder* Engine::Impl::find_holder(Resource& resource, const Token& token) {
  Holder* found = nullptr;
  if (resource.holders_by_fence) {
    auto it = resource.holders_by_fence->find(token.fence.value);
    if (it != resource.holders_by_fence->end()) found = it->second;
  } else {
    for (Holder* h = resource.holders.front(); h != nullptr;
         h = decltype(resource.holders)::next(h)) {
      if (h->token.fence == token.fence) {
        found = h;
        break;
      }
    }
  }
  // The fence is public (it is in every token, and predictable); the salt is the secret part.
  // Compare it without an early exit.
  if (found == nullptr || ((found->token.salt ^ token.salt) != 0)) return nullptr;
  return found;
}

void Engine::Impl::remove_holder(Holder* holder) {
  Resource& resource = *holder->resource;
  if (!holder->ref.empty()) --resource.orphans;
  resource.holders.remove(holder);
  if (holder->owner != nullptr) holder->owner->holders.remove(holder);
  if (resource.holders_by_fence) resource.holders_by_fence->erase(holder->token.fence.value);
  deadlines.cancel(holder->timer);
  holder_pool.recycle(holder);
}

Waiter* Engine::Impl::add_waiter(Resource& resource, SessionId session, SessionState& owner,
                                 std::int64_t lease_s, bool two_phase, bool shared) {
  Waiter* waiter = waiter_pool.make();
  waiter->session = session;
  waiter->owner = &owner;
  waiter->resource = &resource;
  waiter->lease_s = lease_s;
  waiter->two_phase = two_phase;
  waiter->shared = shared;
  waiter->since = now;
  resource.waiters.push_back(waiter);
  owner.waiters.push_back(waiter);
  return waiter;
}

void Engine::Impl::park(Waiter* waiter, std::int64_t timeout_s) {
  TS_ASSERT(waiter->owner->parked == nullptr);
  waiter->parked = true;
  waiter->owner->parked = waiter;
  deadlines.schedule(waiter->timer, deadline_after(timeout_s), DeadlineQueue::Kind::kWaitTimeout,
                     waiter);
}

void Engine::Impl::remove_waiter(Waiter* waiter) {
  if (!waiter->ref.empty()) --waiter->resource->orphans;
  waiter->resource->waiters.remove(waiter);
  if (waiter->owner != nullptr) {
    waiter->owner->waiters.remove(waiter);
    if (waiter->owner->parked == waiter) waiter->owner->parked = nullptr;
  }
  deadlines.cancel(waiter->timer);
  waiter_pool.recycle(waiter);
}

void Engine::Impl::add_record(SessionState& state, Resource& resource, TwoPhaseRecord record) {
  auto [it, inserted] = state.records.emplace(&resource, record);
  TS_ASSERT(inserted);
  ++resource.records;
}

void Engine::Impl::erase_record(SessionState& state, Resource& resource) {
  std::size_t erased = state.records.erase(&resource);
  TS_ASSERT(erased == 1);
  --resource.records;
}

// Finds the resource, or creates it when the limits allow. On failure `status` says why.
Resource* Engine::Impl::find_or_create(Namespace ns, const Request& request, std::int64_t limit,
                                       Status& status) {
  Resource* resource = find(ns, request.key);
  if (resource == nullptr) {
    const bool room = budget != nullptr
                          ? budget->try_take()
                          : static_cast<std::int64_t>(resources_count()) < config.resources_max;
    if (!room) {
      status = Status::kErrorMaxLocks;
      return nullptr;
    }
    if (!fence_available()) {
      // Creating a resource that could not be granted would only leave litter behind.
      if (budget != nullptr) budget->give_back();
      ++counters.fence_exhausted;
      status = Status::kError;
      return nullptr;
    }
    return create(ns, request.key, limit);
  }
  if (resource->limit != limit) {
    status = Status::kErrorLimitMismatch;
    return nullptr;
  }
  return resource;
}

const TwoPhaseRecord* Engine::Impl::find_record(SessionId session, Resource& resource) const {
  auto state = sessions.find(session.value);
  if (state == sessions.end()) return nullptr;
  auto record = state->second.records.find(&resource);
  return record == state->second.records.end() ? nullptr : &record->second;
}
}  // namespace turnstile::core
