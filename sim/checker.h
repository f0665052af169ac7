// Checker: the invariants the simulator checks after every engine call and every event
// (docs/simulator.md, "Invariants"): every resource on the shard that owns it, no more live holders
// than the limit, no holder or waiter of a session that is gone, FIFO among waiters, and fences
// that rise per key within a process life and across lives. For read-write locks: a writer holds
// alone (rw-exclusion), and the head of a queue is never a reader that could share the key with
// its holders (rw-fifo). With a lock-delay: once a holder left without a release (its lease
// ended, or its session closed and auto-release freed it), the key grants nothing for the delay
// (lock-delay), unless an operator's force-release ended it (clear_delay).
//
// The driver tells it what it saw (grants on their way, sessions forgotten, a new process life)
// and hands it each engine to check right after a call into it; a broken invariant goes to the
// `fail` callback with its name and a detail. It reads the engines, never changes them.
//
// Thread affinity: single-threaded, owned by one run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/engine.h"
#include "core/types.h"
#include "sim/settings.h"

namespace turnstile::sim {

using ResourceKey = std::pair<core::Namespace, std::string>;
std::string key_name(const ResourceKey& key);  // "lock:k", "sem:k", "rw:k"

class Checker {
 public:
  using Fail = std::function<void(const std::string& invariant, const std::string& detail)>;
  // `failed`: the run's flag (nothing is checked once it is set); `grants_seen` counts the grants
  // checked.
  Checker(const Settings& settings, const bool& failed, std::uint64_t& grants_seen, Fail fail);

  // A process life begins; with `across_lives` its fences must also beat every earlier life's
  // (always with the fence journal; without it, only while the wall clock never went back).
  void new_life(std::uint64_t life, bool across_lives);
  // A grant the driver saw leave an engine call (its reply, or a delivery to a session whose
  // request in flight names `key`), and how it reached the driver: fences are ordered by the
  // call that minted them, before they travel anywhere.
  void observe_grant(ResourceKey key, core::Token token, std::string path);
  // A request answered in the call being checked, whichever driver saw it: a release answered
  // `ok` is a clean one (its holder left without a lock-delay); an operator's force-release with
  // clear_delay answered `ok` ends the key's lock-delay, and the holders it freed start none.
  void observe_answer(const core::Request& request, const core::Reply& reply);
  // Where to count what the read-write and lock-delay checks saw (null: nowhere).
  void count_into(std::map<std::string, std::uint64_t>* coverage) { coverage_ = coverage; }
  // Forgets what was observed and not checked (no process to check it against).
  void clear_observed();
  // A session the server forgot: it must hold nothing (with auto-release) and wait nowhere.
  void session_forgotten(std::uint64_t session) { forgotten_.insert(session); }
  // Checks `engine`, shard `shard`, right after a call into it, at virtual time `now`.
  void check_engine(std::size_t shard, const core::Engine& engine, std::int64_t now);

 private:
  struct HolderSnapshot {
    core::Token token;
    bool shared = false;
  };
  struct KeySnapshot {
    std::int64_t limit = 1;
    std::vector<HolderSnapshot> holders;
    std::vector<std::uint64_t> waiters;
    std::vector<bool> orphaned;     // per waiter
    std::vector<std::string> refs;  // per waiter: its stable ref, if any
  };
  // What one check_engine call works on.
  struct Call {
    std::map<ResourceKey, KeySnapshot> current;             // the engine as this call leaves it
    std::map<ResourceKey, std::vector<core::Token>> fresh;  // grants not checked before
    std::map<std::uint64_t, std::string> source;  // fence -> where the checker saw it first
    std::map<ResourceKey, std::set<std::uint64_t>> fresh_holders;  // sessions granted this call
    std::map<ResourceKey, std::map<std::uint64_t, std::string>> fresh_refs;  // their stable refs
    std::set<std::pair<ResourceKey, std::pair<std::uint64_t, std::uint64_t>>> released;
    std::set<ResourceKey> cleared;
  };
  // Holders that left a key without releasing in this call, and the key's limit before.
  struct Departures {
    std::map<ResourceKey, std::vector<HolderSnapshot>> holders;
    std::map<ResourceKey, std::int64_t> limit;
  };

  void count(const char* name);
  // Each check returns false once it reported a broken invariant.
  void take_observed(Call& call);
  bool check_resources(std::size_t shard, const core::Engine& engine, std::int64_t now, Call& call);
  bool check_holders(const ResourceKey& key, const core::Engine::ResourceView& view,
                     const core::Engine& engine, Call& call);
  bool check_read_write(const ResourceKey& key, const core::Engine::ResourceView& view,
                        std::int64_t now);
  bool snapshot_key(const ResourceKey& key, const core::Engine::ResourceView& view, Call& call);
  bool check_fences(std::size_t shard, std::int64_t now, Call& call);
  bool check_lock_delay(std::size_t shard, const core::Engine& engine, Call& call);
  void find_departures(std::size_t shard, const Call& call, Departures& left) const;
  bool check_grants_after_departure(const ResourceKey& key, const std::vector<core::Token>& tokens,
                                    const std::vector<HolderSnapshot>& gone, std::int64_t limit,
                                    Call& call, std::int64_t now_ns, std::int64_t delay_ns);
  static std::set<std::uint64_t> still_waiting(const std::vector<std::uint64_t>& w,
                                               const std::vector<std::uint64_t>& r,
                                               const std::set<std::uint64_t>& granted);
  bool check_queue(const ResourceKey& key, const KeySnapshot& before, std::int64_t now, Call& call);
  bool check_newcomers(const ResourceKey& key, const KeySnapshot& before,
                       const std::set<std::uint64_t>& still, std::size_t first_still, Call& call);

  const Settings& settings_;
  const bool& failed_;
  std::uint64_t& grants_seen_;
  Fail fail_;
  std::uint64_t life_ = 0;
  bool across_lives_ = true;
  std::vector<std::map<ResourceKey, KeySnapshot>> previous_;       // per shard
  std::set<std::pair<std::uint64_t, std::uint64_t>> seen_tokens_;  // (fence, salt) this life
  std::map<ResourceKey, std::uint64_t> max_fence_life_;
  std::map<ResourceKey, std::uint64_t> max_fence_ever_;
  std::vector<std::pair<ResourceKey, core::Token>> observed_;  // this event, by the driver
  std::vector<std::string> observed_paths_;                    // how each reached it
  std::set<std::uint64_t> forgotten_;                          // this life
  // Releases answered `ok` in the call being checked: (key, (fence, salt)).
  std::set<std::pair<ResourceKey, std::pair<std::uint64_t, std::uint64_t>>> released_;
  std::set<ResourceKey> cleared_;  // keys whose lock-delay the call being checked ended
  // Per key, this life: the engine instant (ns) before which it may grant nothing, because a
  // holder left it without a release.
  std::map<ResourceKey, std::int64_t> delay_until_;
  std::map<std::string, std::uint64_t>* coverage_ = nullptr;
};

}  // namespace turnstile::sim
