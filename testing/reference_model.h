// ReferenceModel: a second, deliberately naive implementation of docs/semantics.md, used by
// tests/core/engine_model_test.cc to check the real Engine step by step.
//
// It is written to be obviously correct, not fast: state is plain vectors scanned linearly, and
// time is processed literally as the spec words it. Before every input, `now` becomes
// max(now, largest now seen); then, repeatedly, every due deadline is collected by a full scan
// (holder lease deadlines, kind 0; the end of a resource's lock-delay, kind 1; parked waiters'
// timeouts, kind 2; GC eligibility of an empty resource without a lock-delay, kind 3, due when
// now - last_activity > gc_max_idle, i.e. at last_activity + gc_max_idle + 1ns), the earliest by
// (instant, kind) is processed, and the scan
// starts again, until config.deadlines_per_call deadlines were processed; a request then
// processes, the same way, every due deadline of the resource it names (stats: every deadline).
// Only then is the input applied. A read-write lock grants the head of its queue while nobody
// holds it, or while readers hold it and the head is a reader; a lock-delay grants nothing.
// Everything happens at `now`: a waiter promoted
// while deadlines are processed gets `now + lease` (its lease runs from the delivery), even
// when the lease it replaces ended earlier.
//
// Tokens carry the model's own fences (a counter starting at config.fence_floor) and salts from
// its own SplitMix64, so they need not equal the engine's: the test pairs them up.
//
// Where the spec leaves a choice open, the model reads it as follows (the engine agrees):
//  * ties between deadlines of the same instant and kind go to the deadline set (granted,
//    renewed, restarted, parked) earlier; only the fence numbering depends on it;
//  * stats entries with the same key (one per namespace) are ordered by their other fields;
//  * counters: wait_timeouts counts parked requests that timed out (not `timeout` replies to
//    timeout 0), fence_exhausted counts every grant refused for want of a fence.
//
// Thread affinity: single-threaded test helper.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/engine.h"
#include "core/protocol.h"
#include "core/random.h"
#include "core/stats.h"
#include "core/time.h"
#include "core/types.h"

namespace turnstile::test {

class ReferenceModel {
 public:
  ReferenceModel(const core::EngineConfig& config, std::uint64_t salt_seed);

  // Same contracts as core::Engine.
  core::Reply handle(core::Instant now, core::SessionId session, const core::Request& request,
                     std::vector<core::Delivery>& out);
  // Returns true when a parked request of the session was dropped unanswered.
  bool close_session(core::Instant now, core::SessionId session, bool auto_release,
                     std::vector<core::Delivery>& out);
  void tick(core::Instant now, std::vector<core::Delivery>& out);
  core::StatsSnapshot stats(core::Instant now, std::vector<core::Delivery>& out);

  // The earliest pending deadline of any kind (a GC instant may lie in the past when a resource
  // became empty long after its last activity); nullopt when nothing is pending.
  std::optional<core::Instant> next_wake() const;
  core::Instant now() const { return now_; }
  const core::EngineCounters& counters() const { return counters_; }
  std::size_t resources_count() const { return resources_.size(); }
  core::Fence last_fence() const { return core::Fence{last_fence_}; }
  // Every resource sorted by (namespace, key); holders in grant order, waiters in queue order.
  std::vector<core::Engine::ResourceView> inspect() const;
  // Whether `session` has a request parked (test bookkeeping cross-check).
  bool is_parked(core::SessionId session) const;
  // Number of two-phase records (waiting, granted or expired) held by anyone.
  std::size_t records_count() const { return records_.size(); }
  // Same contract as core::Engine::take_losses (no stable refs here: only expiries and
  // force-releases of holders whose session has not closed).
  std::vector<core::Loss> take_losses();

 private:
  struct Holder {
    core::Token token;
    core::SessionId session;
    core::Instant deadline;
    std::uint64_t serial = 0;  // when the deadline was last set (orders equal deadlines)
    bool shared = false;       // a read slot
  };
  struct Waiter {
    core::SessionId session;
    std::int64_t lease_s = 0;        // the lease its grant will carry
    bool two_phase = false;          // enqueued by e/se (it has a record)
    bool parked = false;             // a l/sl/w/sw request waits on it
    core::Instant timeout_deadline;  // meaningful only when parked
    std::uint64_t serial = 0;        // when the timeout was set (orders equal deadlines)
    bool shared = false;             // waits for a read slot
    core::Instant since;             // when it joined the queue
  };
  struct Resource {
    core::Namespace ns;
    std::string key;
    std::int64_t limit = 1;
    std::vector<Holder> holders;  // grant order
    std::vector<Waiter> waiters;  // queue order, head first
    core::Instant last_activity;
    std::optional<core::Instant> delay_until;  // a lock-delay not yet over
    std::uint64_t delay_serial = 0;            // when it was set (orders equal deadlines)
    std::vector<std::uint64_t> forced_fences;  // the last 16 holders forced out, oldest first
  };
  enum class RecordState { kWaiting, kGranted, kExpired };
  struct Record {
    core::SessionId session;
    core::Namespace ns;
    std::string key;
    RecordState state = RecordState::kWaiting;
    core::Token token;         // kGranted / kExpired: the token of the grant
    std::int64_t lease_s = 0;  // the lease given at e/se
    bool shared = false;       // re (a read slot) rather than we
  };
  struct Due {
    core::Instant at;
    int kind = 0;  // 0 lease expiry, 1 lock-delay end, 2 wait timeout, 3 garbage collection
    std::uint64_t serial = 0;
    std::size_t resource_index = 0;
    std::size_t item_index = 0;  // holder or waiter index
  };

  // Processes the earliest due deadlines, at most `limit` of them.
  void advance(core::Instant now, std::vector<core::Delivery>& out, std::size_t limit);
  // Processes every due deadline of one resource, earliest first.
  void settle(core::Namespace ns, const std::string& key, std::vector<core::Delivery>& out);
  void process(const Due& due, std::vector<core::Delivery>& out);
  // The earliest due deadline, of every resource or only of resources_[*only].
  std::optional<Due> earliest_due(std::optional<std::size_t> only) const;
  std::optional<core::Instant> gc_instant(const Resource& resource) const;
  bool gc_candidate(const Resource& resource) const;
  void promote(std::size_t resource_index, std::vector<core::Delivery>& out);
  void add_stats_entry(const Resource& resource, core::StatsSnapshot& snapshot) const;
  // Whether the resource could grant a slot of this kind now, its queue aside.
  static bool admits(const Resource& resource, bool shared);
  // A holder of the resource left without releasing: the lock-delay starts (if configured).
  void start_delay(Resource& resource);
  std::uint64_t next_serial() { return ++serial_; }
  bool fences_exhausted() const;
  core::Token mint();
  std::int64_t lease_or_default(std::int64_t lease_s) const;

  std::optional<std::size_t> find_resource(core::Namespace ns, const std::string& key) const;
  // Index of the resource, or the error status that refuses it. Does not touch.
  struct Found {
    std::optional<std::size_t> index;
    core::Status error = core::Status::kError;
  };
  Found find_or_create(core::Namespace ns, const std::string& key, std::int64_t limit);
  std::optional<std::size_t> find_record(core::SessionId session, core::Namespace ns,
                                         const std::string& key) const;
  void erase_record(core::SessionId session, core::Namespace ns, const std::string& key);

  core::Reply acquire(core::SessionId session, core::Namespace ns, const core::Request& request);
  core::Reply enqueue(core::SessionId session, core::Namespace ns, const core::Request& request);
  core::Reply wait(core::SessionId session, core::Namespace ns, const core::Request& request,
                   std::vector<core::Delivery>& out);
  core::Reply release(core::Namespace ns, const core::Request& request,
                      std::vector<core::Delivery>& out);
  core::Reply renew(core::Namespace ns, const core::Request& request);
  core::Reply check(core::Namespace ns, const core::Request& request) const;
  core::Reply force_release(core::Namespace ns, const core::Request& request,
                            std::vector<core::Delivery>& out);
  // What a release or renewal of a token that holds nothing gets.
  static core::Status unheld(const Resource& resource, const core::Token& token);

  core::EngineConfig config_;
  core::SplitMix64 salts_;
  core::Instant now_ = core::Instant::min();
  std::uint64_t last_fence_ = 0;
  core::EngineCounters counters_;
  std::vector<Resource> resources_;  // creation order
  std::vector<Record> records_;
  std::uint64_t serial_ = 0;
  std::vector<core::SessionId> closed_;  // sessions closed so far
  std::vector<core::Loss> losses_;
};

}  // namespace turnstile::test
