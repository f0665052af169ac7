// Engine: the lock and semaphore state machine for one shard of the key space.
//
// It owns resources (a lock is a resource with limit 1), their holders with lease deadlines,
// strict FIFO waiters, two-phase records per (session, resource), the fence counter of the
// shard and GC of idle resources. It never reads a clock: every input carries `now`, and the
// engine keeps the largest `now` it has seen, so a clock that steps back can neither revive nor
// extend a lease (regressions are counted). Given the same inputs it produces the same outputs,
// bit for bit. The full rules are in docs/semantics.md; the essentials:
//
//  * Every input first advances time: deadlines due at or before `now` are processed in order of
//    (instant, kind), lease expiries before wait timeouts before GC at the same instant, so a
//    grant that coincides with a timeout wins. Deadlines live in an indexed min-heap; nothing
//    sweeps over all keys. One call processes at most EngineConfig::deadlines_per_call of them;
//    a request then also processes every due deadline of the resource it names, so its reply is
//    what it would be had everything due been processed. The rest waits for the next call (the
//    driver sees next_wake() <= now() and ticks again after its I/O). stats() processes all.
//  * A newcomer never overtakes a waiter: the fast path needs free capacity AND an empty queue.
//  * Replies to parked requests (blocking l/sl/w/sw) leave through `out` as Deliveries, from
//    whichever call reaches them: a release, an expiry, a tick, a closed session.
//
// Invariants (checked by tests/core/engine_model_test.cc after every step):
//  * holders of a resource <= its limit; a queue is non-empty only while the resource is full
//    (unless the fence space is exhausted);
//  * every fence issued is greater than every fence issued before it by this engine;
//  * each session has at most one parked request.
//
// Thread affinity: one thread owns an Engine; it has no internal locking.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/engine_counters.h"
#include "core/fence.h"
#include "core/loss.h"
#include "core/protocol.h"
#include "core/random.h"
#include "core/stats.h"
#include "core/time.h"
#include "core/types.h"

namespace turnstile::core {

struct EngineConfig {
  std::int64_t default_lease_s = 33;             // lease when a request gives none
  Duration gc_max_idle = Duration::seconds(60);  // idle resources older than this are deleted
  std::int64_t resources_max = 1'048'576;        // --max-locks: resources in this engine, exact
  std::int64_t waiters_max = 0;                  // --max-waiters: per resource; 0 = unlimited
  Fence fence_floor{0};                          // every fence issued is > fence_floor
  std::uint64_t fence_block = 4096;              // fences taken from a FenceSource at a time
  std::size_t stats_entries_max = 10'000;        // per stats array
  // The most deadlines (lease expiries, wait timeouts, collections) one call processes beyond
  // those of the resource it names, so that a million leases ending together cannot hold the
  // shard for seconds; what is left stays due for the next call (next_wake() <= now()). >= 1.
  std::size_t deadlines_per_call = 8;
  // --lock-delay (docs/semantics.md, "Lock-delay"): after a holder leaves without releasing (its
  // lease ends, or its session closes holding it and auto-release frees it), the key grants
  // nothing for this long. A release, renewal or clean hand-over grants at once. Zero: off.
  Duration lock_delay = Duration::zero();
};

// A reply addressed to a session whose request was parked (or whose request is in flight).
struct Delivery {
  SessionId session;
  Reply reply;
  bool operator==(const Delivery&) const = default;
};

// Counts resources across all engines of a server, so that --max-locks is exact for the whole
// key space however it is sharded. The daemon backs it with an atomic counter; an engine given
// none counts its own resources against EngineConfig::resources_max.
class ResourceBudget {
 public:
  virtual ~ResourceBudget() = default;
  // Takes room for one more resource; false when the cap is reached.
  virtual bool try_take() = 0;
  virtual void give_back() = 0;
};

class Engine {
 public:
  // `salt_source` supplies the random half of every token; `budget`, when given, replaces
  // resources_max; `fences`, when given, supplies every fence in blocks of config.fence_block
  // (without one, fences count up from config.fence_floor to UINT64_MAX). All must outlive the
  // engine.
  Engine(const EngineConfig& config, RandomSource& salt_source, ResourceBudget* budget = nullptr,
         FenceSource* fences = nullptr);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Applies one keyed request (is_engine_command) from `session`. Returns its reply, or
  // Reply::parked() when it waits; the parked request's reply later reaches `out` as a Delivery.
  // Replies to other sessions' parked requests that this call causes are appended to `out`.
  // Contract: a session has at most one request parked at a time (the session layer processes
  // requests strictly in order).
  Reply handle(Instant now, SessionId session, const Request& request, std::vector<Delivery>& out);

  // The session is gone: its parked request is dropped unanswered, its waiters and two-phase
  // records are removed, and with `auto_release` its holdings are released (without, they live
  // on until released by token or until their lease ends). Unknown sessions are fine. Its
  // resources are not brought up to date first: a holding whose lease is due but was left for a
  // later call is released like any other, and a due timeout of its parked request is dropped
  // with it. Returns true when a parked request of the session was dropped: it will never be
  // answered, so the driver completes it on the session side (Session::on_cancelled).
  //
  // Stable refs (docs/semantics.md): when the session sent its stable ref (Request::ref) and
  // `orphan_ttl` is positive, its waiters keep their places and its holders their slots, orphaned
  // under the ref: a waiter until now + orphan_ttl, a holder until its lease ends (and, with
  // `auto_release`, no later than now + orphan_ttl). An acquire or enqueue of the same key with the
  // same ref adopts them: the same token with a fresh lease, or the same place in the queue. An
  // orphaned waiter that reaches the head is granted and kept the same way.
  bool close_session(Instant now, SessionId session, bool auto_release, std::vector<Delivery>& out,
                     Duration orphan_ttl = Duration::zero());

  // The session's parked request (a blocking l/sl/w/sw) is withdrawn unanswered, as if it had
  // timed out without a reply: its waiter leaves the queue (a `w` also loses its two-phase
  // record) and the next waiters are promoted. The session lives on. Returns true when a parked
  // request was dropped (the driver completes it on the session side); false when there was
  // none, e.g. because its grant or timeout is already on its way. Used when an HTTP client
  // disconnects during a long poll (reference 3.6).
  bool cancel_parked(Instant now, SessionId session, std::vector<Delivery>& out);

  // Advances time only (at most deadlines_per_call deadlines; call again while next_wake() is
  // not after now()).
  void tick(Instant now, std::vector<Delivery>& out);

  // The earliest instant at which the engine has work (a lease expiry, a wait timeout or a GC);
  // nullopt when it has none. The driver calls tick() at or after it.
  std::optional<Instant> next_wake() const;

  // Advances time, then reports every resource (see stats.h).
  StatsSnapshot stats(Instant now, std::vector<Delivery>& out);
  // Reports every resource as of now(), without advancing time: a replica's state may change only
  // by applying the log, so in cluster mode stats read it as of the last applied entry.
  StatsSnapshot stats_view() const;
  // The sessions that have state here (a holder, a waiter or a two-phase record), ascending.
  std::vector<SessionId> sessions() const;

  // The slots lost since the last call (lease expiries and force-releases of holders whose session
  // is open, orphans of a stable ref that open sessions have), in the order they were lost.
  std::vector<Loss> take_losses();

  // The largest `now` seen (Instant::min() before the first input).
  Instant now() const;
  const EngineCounters& counters() const;
  std::size_t resources_count() const;
  // The last fence issued (fence_floor before the first grant).
  Fence last_fence() const;
  // Whether `session` has a request parked (handle()'s contract forbids another request then).
  bool has_parked(SessionId session) const;

  // Snapshots of a replicated engine (core/replica.h): the whole state as bytes, such that an
  // engine restored from them answers every later input exactly as this one would (the same
  // replies, deliveries, tokens and deadline order). The configuration is not included. The
  // byte format is docs/snapshot-format.md.
  std::string save() const;
  // Restores bytes of save() into this engine, which must be new (no input yet) and have no
  // FenceSource. Bytes that are not a consistent snapshot (corrupt, truncated, hostile) are
  // refused with false and leave the engine as it was.
  bool restore(std::string_view bytes);

  // Test and simulator introspection: every holder and waiter, for invariant checks.
  struct HolderView {
    Namespace ns;
    std::string key;
    Token token;
    SessionId session;
    Instant deadline;
    std::string ref;      // its session's stable ref (or the orphan's); empty when it has none
    bool shared = false;  // a read slot of a read-write lock
  };
  struct ResourceView {
    Namespace ns;
    std::string key;
    std::int64_t limit;
    std::vector<HolderView> holders;
    std::vector<SessionId> waiters;  // queue order
    // Per waiter: orphaned (its session closed; kept for an acquire or enqueue with its ref).
    std::vector<bool> waiters_orphaned;
    // Per waiter: its stable ref (its session's, or the orphan's), empty when it has none.
    std::vector<std::string> waiter_refs;
    // Per waiter: whether it waits for a read slot of a read-write lock.
    std::vector<bool> waiters_shared;
    // Per waiter: when it joined the queue.
    std::vector<Instant> waiters_since;
    // While a lock-delay holds the key: when it ends.
    std::optional<Instant> delayed_until;
  };
  std::vector<ResourceView> inspect() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace turnstile::core
