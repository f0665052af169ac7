// Engine's insides, shared by the files that implement it (engine.h's Engine::Impl): the nodes
// (holders, waiters, two-phase records, resources, sessions), the resource map, and the state
// machine's members, each group defined in the file named above it. Private to those files:
// nothing outside core/engine*.cc includes it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/assert.h"
#include "core/deadline_queue.h"
#include "core/engine.h"
#include "core/engine_snapshot.h"
#include "core/intrusive_list.h"

namespace turnstile::core {
namespace engine_internal {

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

inline std::size_t hash_key(std::string_view key) {
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

inline std::size_t ns_index(Namespace ns) { return static_cast<std::size_t>(ns); }
constexpr std::size_t kNamespaces = 3;

// Read-write locks and large semaphores index their holders by fence (see kIndexedHoldersAbove).
inline bool indexes_holders(Namespace ns, std::int64_t limit) {
  return ns == Namespace::kReadWrite || limit > kIndexedHoldersAbove;
}

}  // namespace engine_internal

using engine_internal::Holder;
using engine_internal::indexes_holders;
using engine_internal::kNamespaces;
using engine_internal::NodePool;
using engine_internal::ns_index;
using engine_internal::Resource;
using engine_internal::ResourceMap;
using engine_internal::SessionState;
using engine_internal::TwoPhaseRecord;
using engine_internal::Waiter;

struct Engine::Impl {
  // ---- lifetime, the queue moving on, sessions leaving (engine.cc) ----------------------------
  Impl(const EngineConfig& engine_config, RandomSource& salts, ResourceBudget* resource_budget,
       FenceSource* fence_source);
  ~Impl();
  void promote(Resource& resource, std::vector<Delivery>& out);
  bool cancel_parked(SessionId session, std::vector<Delivery>& out);
  bool close_session(SessionId session, bool auto_release, Duration orphan_ttl,
                     std::vector<Delivery>& out);
  void promote_after_close(std::vector<Resource*> touched, std::vector<Resource*> released,
                           std::vector<Delivery>& out);

  // ---- time and its deadlines: leases ending, lock-delays, wait timeouts, GC (engine_time.cc) --
  bool advance(Instant input_now, std::vector<Delivery>& out, std::size_t limit);
  bool process(const DeadlineQueue::Due& due, std::vector<Delivery>& out);
  bool behind() const;
  void settle(Resource* resource, std::vector<Delivery>& out);
  void settle_passes(Resource* resource, std::vector<Delivery>& out);
  void arm_gc(Resource& resource);
  Instant gc_due(const Resource& resource) const;
  bool collect(Resource* resource, Instant armed_for);
  void expire(Holder* holder, std::vector<Delivery>& out);
  void report_loss(const Holder& holder, LossReason reason);
  void start_delay(Resource& resource);
  void end_delay(Resource* resource, std::vector<Delivery>& out);
  void time_out(Waiter* waiter, std::vector<Delivery>& out);

  // ---- resources, fences, holders, waiters, two-phase records (engine_slots.cc) ---------------
  Resource* find(Namespace ns, std::string_view key) { return resources[ns_index(ns)].find(key); }
  Instant deadline_after(std::int64_t seconds) const { return now + Duration::seconds(seconds); }
  std::size_t resources_count() const;
  Resource* create(Namespace ns, std::string_view key, std::int64_t limit);
  SessionState& session_state(SessionId session);
  bool fence_available();
  std::optional<Token> mint();
  Holder* grant(Resource& resource, SessionId session, SessionState* owner, std::int64_t lease_s,
                bool shared);
  Holder* find_holder(Resource& resource, const Token& token);
  void remove_holder(Holder* holder);
  Waiter* add_waiter(Resource& resource, SessionId session, SessionState& owner,
                     std::int64_t lease_s, bool two_phase, bool shared);
  void park(Waiter* waiter, std::int64_t timeout_s);
  void remove_waiter(Waiter* waiter);
  void add_record(SessionState& state, Resource& resource, TwoPhaseRecord record);
  void erase_record(SessionState& state, Resource& resource);
  Resource* find_or_create(Namespace ns, const Request& request, std::int64_t limit,
                           Status& status);
  const TwoPhaseRecord* find_record(SessionId session, Resource& resource) const;

  // ---- stable refs and orphans (engine_orphans.cc) --------------------------------------------
  void orphan_holder(Holder& holder, std::string ref, std::optional<Instant> until);
  void orphan_waiter(Waiter& waiter, const std::string& ref, Instant until);
  static std::vector<Waiter*> in_canonical_order(
      const IntrusiveList<Waiter, &Waiter::in_session>& list);
  static std::vector<Holder*> in_canonical_order(
      const IntrusiveList<Holder, &Holder::in_session>& list);
  Holder* find_orphan_holder(Resource& resource, std::string_view ref, bool shared);
  Waiter* find_orphan_waiter(Resource& resource, std::string_view ref, bool shared);
  void hand_to_waiting_ref(Holder& holder, std::vector<Delivery>& out);
  void adopt_holder(Holder& holder, SessionId session, SessionState& state, std::int64_t lease_s);
  void adopt_waiter(Waiter& waiter, SessionId session, SessionState& state, std::int64_t lease_s,
                    bool two_phase);

  // ---- a client's keyed requests: acquire, enqueue and wait, release, renew (engine_requests.cc)
  std::int64_t lease_of(const Request& request) const;
  Reply acquire(SessionId session, Namespace ns, const Request& request,
                std::vector<Delivery>& out);
  bool queue_full(const Resource& resource) const;
  Reply enqueue(SessionId session, Namespace ns, const Request& request);
  Reply wait(SessionId session, Namespace ns, const Request& request, std::vector<Delivery>& out);
  Reply release(SessionId session, Namespace ns, const Request& request,
                std::vector<Delivery>& out);
  Reply renew(Namespace ns, const Request& request);
  static Status unheld_status(const Resource& resource, const Token& token);

  // ---- check, inspect, force-release, stats (engine_admin.cc) ---------------------------------
  Reply check(Namespace ns, const Request& request);
  Reply inspect_key(Namespace ns, const Request& request);
  Reply force_release(Namespace ns, const Request& request, std::vector<Delivery>& out);
  StatsSnapshot stats() const;
  std::vector<ResourceView> inspect() const;

  // ---- snapshots (engine_save.cc) -------------------------------------------------------------
  // What restore_resource built, for the two-phase records to name: resources by serial, and
  // by (session, serial) the holders awaiting their `w` and the two-phase waiters.
  struct RestoredNodes {
    std::unordered_map<std::uint64_t, Resource*> resource_of;
    std::unordered_map<std::uint64_t, std::unordered_map<std::uint64_t, Holder*>> pending;
    std::unordered_map<std::uint64_t, std::unordered_map<std::uint64_t, Waiter*>> two_phase;
  };
  SnapshotImage::Resource image_of(const Resource& resource) const;
  std::string save() const;
  bool restore(std::string_view bytes);
  void restore_resource(const SnapshotImage::Resource& image, RestoredNodes& nodes);
  Holder* restore_holder(Resource& resource, const SnapshotImage::Holder& held);
  Waiter* restore_waiter(Resource& resource, const SnapshotImage::Waiter& queued);

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
};

}  // namespace turnstile::core
