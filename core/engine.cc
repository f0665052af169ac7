#include "core/engine.h"

#include <algorithm>
#include <array>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/assert.h"
#include "core/deadline_queue.h"
#include "core/engine_snapshot.h"
#include "core/intrusive_list.h"
#include "core/wire.h"

namespace turnstile::core {
namespace {

struct Resource;
struct SessionState;

// One granted slot of a resource. Lives in its resource's holder list and, while its session is
// open, in the session's holder list.
struct Holder {
  Token token;
  SessionId session;
  SessionState* owner = nullptr;  // null once orphaned (session closed without auto-release)
  Resource* resource = nullptr;
  std::int64_t lease_s = 0;  // lease of the grant; `w` restarts it with this
  Instant deadline;
  DeadlineQueue::Timer timer;  // lease expiry
  ListLink<Holder> in_resource;
  ListLink<Holder> in_session;
  bool two_phase_pending = false;  // granted to an `e` whose `w` has not come yet
  bool shared = false;             // a read slot of a read-write lock
  // Set while orphaned under a stable ref (its session closed with --orphan-ttl): an acquire or
  // enqueue of the same key with this ref adopts the holder, token and all.
  std::string ref;
};

// One place in a resource's FIFO queue.
struct Waiter {
  SessionId session;
  SessionState* owner = nullptr;
  Resource* resource = nullptr;
  std::int64_t lease_s = 0;
  bool two_phase = false;      // queued by `e`
  bool parked = false;         // a blocking l/sl/w/sw is waiting on it
  bool shared = false;         // waits for a read slot of a read-write lock
  Instant since;               // when it joined the queue
  DeadlineQueue::Timer timer;  // timeout of the parked request, or the end of an orphan's time
  // Set while orphaned under a stable ref (owner is null): the place in the queue is kept until
  // the timer fires, for an acquire or enqueue with this ref to adopt.
  std::string ref;
  ListLink<Waiter> in_resource;
  ListLink<Waiter> in_session;
};

// Two-phase state of one (session, resource) pair.
struct TwoPhaseRecord {
  enum class State : std::uint8_t { kWaiting, kGranted, kExpired };
  State state = State::kWaiting;
  Waiter* waiter = nullptr;  // kWaiting
  Holder* holder = nullptr;  // kGranted
};

// Semaphores above this limit index their holders by fence, so that release and renew stay O(1)
// however many holders there are; smaller resources scan their short holder list.
constexpr std::int64_t kIndexedHoldersAbove = 16;

struct Resource {
  Namespace ns = Namespace::kLock;
  std::string_view key;  // the map node's key, stable while the resource exists
  std::int64_t limit = 1;
  std::uint64_t serial = 0;  // creation order: a deterministic order between resources
  Instant last_activity;
  IntrusiveList<Holder, &Holder::in_resource> holders;
  IntrusiveList<Waiter, &Waiter::in_resource> waiters;
  std::uint32_t records = 0;  // two-phase records naming this resource
  std::uint32_t orphans = 0;  // holders and waiters orphaned under a stable ref
  // Fences of the latest holders an operator forced out (at most kForcedRemembered): their
  // release or renewal is answered error_lease_expired rather than error.
  std::vector<std::uint64_t> forced_fences;
  DeadlineQueue::Timer gc_timer;
  // Scheduled while a lock-delay holds the key: nothing is granted until it fires.
  DeadlineQueue::Timer delay_timer;
  std::unique_ptr<std::unordered_map<std::uint64_t, Holder*>> holders_by_fence;

  // Whether a slot of the kind asked for (shared: a read slot) can be granted now, queue aside.
  // A read-write lock admits readers while no writer holds it, and a writer only alone.
  bool admits(bool shared) const {
    if (delay_timer.scheduled()) return false;
    if (ns != Namespace::kReadWrite) return static_cast<std::int64_t>(holders.size()) < limit;
    return holders.empty() || (shared && holders.front()->shared);
  }
  // Whether the head of the queue could be granted now (false for an empty queue).
  bool head_admitted() const { return !waiters.empty() && admits(waiters.front()->shared); }
  bool idle() const { return holders.empty() && waiters.empty(); }
  bool collectable() const { return idle() && records == 0 && !delay_timer.scheduled(); }
};

struct SessionState {
  IntrusiveList<Holder, &Holder::in_session> holders;
  IntrusiveList<Waiter, &Waiter::in_session> waiters;
  Waiter* parked = nullptr;
  std::unordered_map<Resource*, TwoPhaseRecord> records;
  std::string ref;  // the session's stable ref (Request::ref), empty when it has none
};

// Recycles nodes so that the steady state of acquire/release allocates nothing.
template <typename T>
class NodePool {
 public:
  NodePool() = default;
  NodePool(const NodePool&) = delete;
  NodePool& operator=(const NodePool&) = delete;
  ~NodePool() {
    for (T* node : free_) delete node;
  }
  T* make() {
    if (free_.empty()) return new T();
    T* node = free_.back();
    free_.pop_back();
    *node = T();
    return node;
  }
  void recycle(T* node) {
    if (free_.size() < kFreeMax || keep_all_) {
      free_.push_back(node);
    } else {
      delete node;
    }
  }
  // While on, no node is freed, so that a pointer taken before its node was recycled can still
  // be read (Engine::Impl::settle checks whether its timer moved). Turning it off frees what the
  // pool keeps beyond its cap.
  void keep_all(bool on) {
    keep_all_ = on;
    while (!keep_all_ && free_.size() > kFreeMax) {
      delete free_.back();
      free_.pop_back();
    }
  }

 private:
  static constexpr std::size_t kFreeMax = 4096;
  std::vector<T*> free_;
  bool keep_all_ = false;
};

std::size_t hash_key(std::string_view key) {
  return static_cast<std::size_t>(XXH3_64bits(key.data(), key.size()));
}

// A key with its hash, so that a lookup hashes the key once (ResourceMap picks the segment with
// the hash, and the segment's buckets use it again).
struct HashedKey {
  std::string_view key;
  std::size_t hash;
};

struct KeyHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view key) const { return hash_key(key); }
  std::size_t operator()(const HashedKey& hashed) const { return hashed.hash; }
};

struct KeyEqual {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const { return a == b; }
  bool operator()(const HashedKey& a, std::string_view b) const { return a.key == b; }
  bool operator()(std::string_view a, const HashedKey& b) const { return a == b.key; }
};

// The resources of one namespace, in 256 hash maps chosen by the top byte of the key's hash.
// A hash map that grows rehashes all of itself at once, relinking every node: one map of 350,000
// keys took 66 ms to grow on this project's machine, a stall for every connection of the shard.
// Each segment holds 1/256 of the keys and grows in 1/256 of the time.
class ResourceMap {
 public:
  using Segment = std::unordered_map<std::string, Resource, KeyHash, KeyEqual>;

  Resource* find(std::string_view key) {
    const HashedKey hashed{key, hash_key(key)};
    Segment& segment = segment_of(hashed.hash);
    auto it = segment.find(hashed);
    return it == segment.end() ? nullptr : &it->second;
  }

  // Adds a resource for a key that has none; returns it and its stored key.
  std::pair<const std::string, Resource>& add(std::string_view key) {
    auto [it, inserted] = segment_of(hash_key(key)).try_emplace(std::string(key));
    TS_ASSERT(inserted);
    ++size_;
    return *it;
  }

  void erase(const Resource& resource) {
    const HashedKey hashed{resource.key, hash_key(resource.key)};
    Segment& segment = segment_of(hashed.hash);
    auto it = segment.find(hashed);
    TS_ASSERT(it != segment.end() && &it->second == &resource);
    segment.erase(it);
    --size_;
  }

  std::size_t size() const { return size_; }

  // Calls f(key, resource) for every resource, in no particular order.
  template <typename F>
  void for_each(F&& f) {
    for (Segment& segment : segments_) {
      for (auto& [key, resource] : segment) f(key, resource);
    }
  }
  template <typename F>
  void for_each(F&& f) const {
    for (const Segment& segment : segments_) {
      for (const auto& [key, resource] : segment) f(key, resource);
    }
  }

 private:
  Segment& segment_of(std::size_t hash) { return segments_[hash >> (8 * sizeof(std::size_t) - 8)]; }

  std::array<Segment, 256> segments_;
  std::size_t size_ = 0;
};

std::size_t ns_index(Namespace ns) { return static_cast<std::size_t>(ns); }
constexpr std::size_t kNamespaces = 3;

// Read-write locks and large semaphores index their holders by fence (see kIndexedHoldersAbove).
bool indexes_holders(Namespace ns, std::int64_t limit) {
  return ns == Namespace::kReadWrite || limit > kIndexedHoldersAbove;
}

}  // namespace

struct Engine::Impl {
  Impl(const EngineConfig& engine_config, RandomSource& salts, ResourceBudget* resource_budget,
       FenceSource* fence_source)
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

  ~Impl() {
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

  EngineConfig config;
  RandomSource& salt_source;
  ResourceBudget* budget;  // null: resources_max applies to this engine alone
  FenceSource* fences;     // null: fences count up from fence_floor
  Instant now = Instant::min();
  Fence last_fence;          // the last fence minted
  std::uint64_t block_next;  // the next fence of the current block, valid while block_left > 0
  std::uint64_t block_left;
  EngineCounters counters;
  ResourceMap resources[kNamespaces];
  std::uint64_t next_serial = 0;
  std::unordered_map<std::uint64_t, SessionState> sessions;
  DeadlineQueue deadlines;
  NodePool<Holder> holder_pool;
  NodePool<Waiter> waiter_pool;
  std::vector<Loss> losses;  // for take_losses()

  // ---- time ---------------------------------------------------------------------------------

  // Moves time to `input_now` (never backward) and processes due deadlines in (instant, kind,
  // sequence) order, at most `limit` of them that change something: a GC timer of a resource in
  // use again only re-arms itself and is not counted. What is left stays due (next_wake() <= now)
  // for the next call. Returns whether some was left.
  bool advance(Instant input_now, std::vector<Delivery>& out, std::size_t limit) {
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
  bool process(const DeadlineQueue::Due& due, std::vector<Delivery>& out) {
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
  bool behind() const {
    const std::optional<Instant> next = deadlines.next();
    return next && *next <= now;
  }

  // Brings one resource up to date while others may still be behind: every due deadline of the
  // resource (its holders' leases, its parked waiters' timeouts, its GC) is processed, in the
  // order advance() would have taken them. Deadlines of different resources never affect each
  // other, so a request sees its resource exactly as it would after a full advance; only fence
  // numbers (taken in processing order) and the moment other resources' deliveries leave
  // differ. The resource may be collected on the way.
  void settle(Resource* resource, std::vector<Delivery>& out) {
    if (resource == nullptr) return;
    holder_pool.keep_all(true);
    waiter_pool.keep_all(true);
    settle_passes(resource, out);
    holder_pool.keep_all(false);
    waiter_pool.keep_all(false);
  }

  void settle_passes(Resource* resource, std::vector<Delivery>& out) {
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

  Instant deadline_after(std::int64_t seconds) const { return now + Duration::seconds(seconds); }

  // ---- resources ----------------------------------------------------------------------------

  std::size_t resources_count() const {
    std::size_t count = 0;
    for (const ResourceMap& map : resources) count += map.size();
    return count;
  }

  Resource* find(Namespace ns, std::string_view key) { return resources[ns_index(ns)].find(key); }

  Resource* create(Namespace ns, std::string_view key, std::int64_t limit) {
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

  // Arms the resource's GC timer when it has just become collectable. A timer that fires on a
  // resource in use again does nothing; the next time the resource empties it is armed anew.
  // GC timers of the same instant are ranked by creation order, so that a call that stops part
  // way (advance's limit) leaves the same resources behind on every run.
  void arm_gc(Resource& resource) {
    if (!resource.collectable() || resource.gc_timer.scheduled()) return;
    deadlines.schedule(resource.gc_timer, gc_due(resource), DeadlineQueue::Kind::kIdleGc, &resource,
                       resource.serial);
  }

  // The first instant at which the resource has been idle for longer than gc_max_idle.
  Instant gc_due(const Resource& resource) const {
    return resource.last_activity + config.gc_max_idle + Duration::nanoseconds(1);
  }

  // The GC timer armed for `armed_for` fired. Returns true when the resource was deleted.
  bool collect(Resource* resource, Instant armed_for) {
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

  // ---- holders and waiters ------------------------------------------------------------------

  SessionState& session_state(SessionId session) {
    TS_ASSERT(session.value != 0);
    return sessions[session.value];
  }

  // Whether a fence can be minted now, taking the next block from the source when the current
  // one is used up.
  bool fence_available() {
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
  std::optional<Token> mint() {
    if (!fence_available()) {
      ++counters.fence_exhausted;
      return std::nullopt;
    }
    last_fence.value = block_next++;  // wraps only past the last fence, which is never minted
    --block_left;
    ++counters.grants;
    return Token{last_fence, salt_source.next_u64()};
  }

  Holder* grant(Resource& resource, SessionId session, SessionState* owner, std::int64_t lease_s,
                bool shared) {
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

  Holder* find_holder(Resource& resource, const Token& token) {
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

  void remove_holder(Holder* holder) {
    Resource& resource = *holder->resource;
    if (!holder->ref.empty()) --resource.orphans;
    resource.holders.remove(holder);
    if (holder->owner != nullptr) holder->owner->holders.remove(holder);
    if (resource.holders_by_fence) resource.holders_by_fence->erase(holder->token.fence.value);
    deadlines.cancel(holder->timer);
    holder_pool.recycle(holder);
  }

  Waiter* add_waiter(Resource& resource, SessionId session, SessionState& owner,
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

  void park(Waiter* waiter, std::int64_t timeout_s) {
    TS_ASSERT(waiter->owner->parked == nullptr);
    waiter->parked = true;
    waiter->owner->parked = waiter;
    deadlines.schedule(waiter->timer, deadline_after(timeout_s), DeadlineQueue::Kind::kWaitTimeout,
                       waiter);
  }

  void remove_waiter(Waiter* waiter) {
    if (!waiter->ref.empty()) --waiter->resource->orphans;
    waiter->resource->waiters.remove(waiter);
    if (waiter->owner != nullptr) {
      waiter->owner->waiters.remove(waiter);
      if (waiter->owner->parked == waiter) waiter->owner->parked = nullptr;
    }
    deadlines.cancel(waiter->timer);
    waiter_pool.recycle(waiter);
  }

  void add_record(SessionState& state, Resource& resource, TwoPhaseRecord record) {
    auto [it, inserted] = state.records.emplace(&resource, record);
    TS_ASSERT(inserted);
    ++resource.records;
  }

  void erase_record(SessionState& state, Resource& resource) {
    std::size_t erased = state.records.erase(&resource);
    TS_ASSERT(erased == 1);
    --resource.records;
  }

  // ---- stable refs (docs/semantics.md, "Stable refs and orphans") ----------------------------

  // Keeps `holder` (already without an owner) for `ref`; its lease ends no later than `until`.
  void orphan_holder(Holder& holder, std::string ref, std::optional<Instant> until) {
    holder.ref = std::move(ref);
    ++holder.resource->orphans;
    if (until && *until < holder.deadline) {
      holder.deadline = *until;
      deadlines.schedule(holder.timer, holder.deadline, DeadlineQueue::Kind::kLeaseExpiry, &holder);
    }
  }

  // Keeps `waiter`'s place in the queue for `ref` until `until`; its request, if parked, is gone.
  void orphan_waiter(Waiter& waiter, const std::string& ref, Instant until) {
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
  static std::vector<Waiter*> in_canonical_order(
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
  static std::vector<Holder*> in_canonical_order(
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
  Holder* find_orphan_holder(Resource& resource, std::string_view ref, bool shared) {
    for (Holder* h = resource.holders.front(); h != nullptr;
         h = decltype(resource.holders)::next(h)) {
      if (h->owner == nullptr && h->ref == ref && h->shared == shared) return h;
    }
    return nullptr;
  }

  Waiter* find_orphan_waiter(Resource& resource, std::string_view ref, bool shared) {
    for (Waiter* w = resource.waiters.front(); w != nullptr;
         w = decltype(resource.waiters)::next(w)) {
      if (w->owner == nullptr && w->ref == ref && w->shared == shared) return w;
    }
    return nullptr;
  }

  // A client that came back before its old session was seen to close is already waiting on the
  // key under the same ref (behind its own slot): the orphan goes to it at once, as its adoption
  // would, instead of making it wait out the orphan time.
  void hand_to_waiting_ref(Holder& holder, std::vector<Delivery>& out) {
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
      state.records.at(&resource) =
          TwoPhaseRecord{TwoPhaseRecord::State::kGranted, nullptr, &holder};
    }
    remove_waiter(waiter);
  }

  // The session takes the orphaned holder back: the same token, a fresh lease.
  void adopt_holder(Holder& holder, SessionId session, SessionState& state, std::int64_t lease_s) {
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
  void adopt_waiter(Waiter& waiter, SessionId session, SessionState& state, std::int64_t lease_s,
                    bool two_phase) {
    waiter.ref.clear();
    --waiter.resource->orphans;
    waiter.session = session;
    waiter.owner = &state;
    state.waiters.push_back(&waiter);
    waiter.lease_s = lease_s;
    waiter.two_phase = two_phase;
    deadlines.cancel(waiter.timer);
  }

  // Hands free capacity to the head of the queue, in order, until the resource is full or the
  // queue is empty.
  void promote(Resource& resource, std::vector<Delivery>& out) {
    while (resource.head_admitted()) {
      Waiter* waiter = resource.waiters.front();
#ifdef TURNSTILE_CANARY_SKIP_FIFO
      // CANARY, never defined in a real build: only sim/'s turnstile-sim-canary compiles it, to
      // prove that the simulator catches a broken FIFO. Grants the tail instead of the head.
      while (decltype(resource.waiters)::next(waiter) != nullptr) {
        waiter = decltype(resource.waiters)::next(waiter);
      }
#endif
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

  // ---- deadlines ----------------------------------------------------------------------------

  void expire(Holder* holder, std::vector<Delivery>& out) {
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
  void report_loss(const Holder& holder, LossReason reason) {
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
  void start_delay(Resource& resource) {
    if (config.lock_delay <= Duration::zero()) return;
    const Instant until = now + config.lock_delay;
    const std::optional<DeadlineQueue::Slot> slot = deadlines.slot(resource.delay_timer);
    if (slot && slot->at >= until) return;
    deadlines.cancel(resource.gc_timer);  // not collectable while the delay lasts
    deadlines.schedule(resource.delay_timer, until, DeadlineQueue::Kind::kDelayEnd, &resource);
  }

  void end_delay(Resource* resource, std::vector<Delivery>& out) {
    promote(*resource, out);
    arm_gc(*resource);
  }

  void time_out(Waiter* waiter, std::vector<Delivery>& out) {
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

  // ---- requests -----------------------------------------------------------------------------

  std::int64_t lease_of(const Request& request) const {
    return request.lease_s > 0 ? request.lease_s : config.default_lease_s;
  }

  // Finds the resource, or creates it when the limits allow. On failure `status` says why.
  Resource* find_or_create(Namespace ns, const Request& request, std::int64_t limit,
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

  Reply acquire(SessionId session, Namespace ns, const Request& request,
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

  bool queue_full(const Resource& resource) const {
    return config.waiters_max > 0 &&
           static_cast<std::int64_t>(resource.waiters.size()) >= config.waiters_max;
  }

  Reply enqueue(SessionId session, Namespace ns, const Request& request) {
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

  const TwoPhaseRecord* find_record(SessionId session, Resource& resource) const {
    auto state = sessions.find(session.value);
    if (state == sessions.end()) return nullptr;
    auto record = state->second.records.find(&resource);
    return record == state->second.records.end() ? nullptr : &record->second;
  }

  Reply wait(SessionId session, Namespace ns, const Request& request, std::vector<Delivery>& out) {
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

  Reply release(SessionId session, Namespace ns, const Request& request,
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

  Reply renew(Namespace ns, const Request& request) {
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
  static Status unheld_status(const Resource& resource, const Token& token) {
    const bool forced = std::find(resource.forced_fences.begin(), resource.forced_fences.end(),
                                  token.fence.value) != resource.forced_fences.end();
    return forced ? Status::kErrorLeaseExpired : Status::kError;
  }

  // check: whether `token` holds the key now; `ok <seconds left, rounded up>` if so. Touches
  // nothing.
  Reply check(Namespace ns, const Request& request) {
    Resource* resource = find(ns, request.key);
    const Holder* holder =
        resource != nullptr && request.token ? find_holder(*resource, *request.token) : nullptr;
    if (holder == nullptr) return Reply::of(Status::kErrorLeaseExpired);
    const std::int64_t left_ns = (holder->deadline - now).ns();
    const std::int64_t second = Duration::seconds(1).ns();
    return Reply::renewed(left_ns / second + (left_ns % second != 0 ? 1 : 0));
  }

  // inspect: the key's holders and waiters as JSON (core/stats.h). Touches nothing.
  Reply inspect_key(Namespace ns, const Request& request) {
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
  Reply force_release(Namespace ns, const Request& request, std::vector<Delivery>& out) {
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

  bool cancel_parked(SessionId session, std::vector<Delivery>& out) {
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

  bool close_session(SessionId session, bool auto_release, Duration orphan_ttl,
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
    // Creation order, not pointer or hash order, decides who is promoted first, so fences are
    // minted in the same order on every run.
    std::sort(touched.begin(), touched.end(),
              [](const Resource* a, const Resource* b) { return a->serial < b->serial; });
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    // The session left without releasing: lock-delays start, in creation order too (their
    // timers' order must not depend on the order the session acted in, which a snapshot loses).
    std::sort(released.begin(), released.end(),
              [](const Resource* a, const Resource* b) { return a->serial < b->serial; });
    released.erase(std::unique(released.begin(), released.end()), released.end());
#ifdef TURNSTILE_CANARY_SKIP_CLOSE_DELAY
    // CANARY, never defined in a real build: only sim/'s turnstile-sim-canary-lock-delay compiles
    // it, to prove that the simulator catches a skipped lock-delay. A close starts none.
    released.clear();
#endif
    for (Resource* resource : released) start_delay(*resource);
    for (Resource* resource : touched) {
      promote(*resource, out);
      arm_gc(*resource);
    }
    return dropped_parked;
  }

  StatsSnapshot stats() const {
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
          part.semaphores.push_back(SemaphoreStats{
              key, resource.limit, static_cast<std::int64_t>(resource.holders.size()),
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

  // ---- snapshots ----------------------------------------------------------------------------
  //
  // The whole state, so that an engine restored from it answers every later input exactly as
  // this one would; the configuration is not in it (the restoring engine brings its own). The
  // byte format is core/engine_snapshot.h and docs/snapshot-format.md.

  static_assert(static_cast<int>(TwoPhaseRecord::State::kWaiting) ==
                    static_cast<int>(SnapshotRecordState::kWaiting) &&
                static_cast<int>(TwoPhaseRecord::State::kGranted) ==
                    static_cast<int>(SnapshotRecordState::kGranted) &&
                static_cast<int>(TwoPhaseRecord::State::kExpired) ==
                    static_cast<int>(SnapshotRecordState::kExpired));

  SnapshotImage::Resource image_of(const Resource& resource) const {
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

  std::string save() const {
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
  bool restore(std::string_view bytes) {
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

  // What restore_resource built, for the two-phase records to name: resources by serial, and
  // by (session, serial) the holders awaiting their `w` and the two-phase waiters.
  struct RestoredNodes {
    std::unordered_map<std::uint64_t, Resource*> resource_of;
    std::unordered_map<std::uint64_t, std::unordered_map<std::uint64_t, Holder*>> pending;
    std::unordered_map<std::uint64_t, std::unordered_map<std::uint64_t, Waiter*>> two_phase;
  };

  void restore_resource(const SnapshotImage::Resource& image, RestoredNodes& nodes) {
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

  Holder* restore_holder(Resource& resource, const SnapshotImage::Holder& held) {
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

  Waiter* restore_waiter(Resource& resource, const SnapshotImage::Waiter& queued) {
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

  std::vector<ResourceView> inspect() const {
    std::vector<ResourceView> views;
    for (const ResourceMap& map : resources) {
      map.for_each([&](const std::string& key, const Resource& resource) {
        ResourceView view{resource.ns, key, resource.limit, {}, {}, {}, {}, {}, {}, {}};
        for (const Holder* h = resource.holders.front(); h != nullptr;
             h = decltype(resource.holders)::next(h)) {
          view.holders.push_back(HolderView{resource.ns, key, h->token, h->session, h->deadline,
                                            h->owner != nullptr ? h->owner->ref : h->ref,
                                            h->shared});
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
};

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
