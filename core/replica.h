// Replica: the replicated state machine of a turnstiled cluster (docs/cluster.md): one
// core::Engine for the whole key space, changed only by applying log entries (core/log_entry.h)
// in log order. Everything an application depends on comes from the entry: its time (never behind
// the last entry's) and the seed of the token salts it mints; the fence counter lives in the
// engine. So every replica that applies the same entries holds the same state and mints the same
// tokens, and digest() is equal at equal applied index.
//
// A Submit from a session whose request is parked breaks the engine's contract (a leader's
// sessions never send one); it is answered `error` and changes nothing, on every replica alike.
//
// What applying produces is the same on every replica; only the leader has the sessions to hand
// it to: the reply of each Submit (Reply::parked() when it waits), whether a Close or a Cancel
// dropped a parked request, and the replies to parked requests that the entry caused.
//
// Thread affinity: one thread at a time; no locking.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/engine.h"
#include "core/log_entry.h"
#include "core/random.h"
#include "core/time.h"

namespace turnstile::core {

// The result of one command of an entry, in the entry's order.
struct CommandResult {
  Reply reply;                  // Submit: its reply, or Reply::parked()
  bool dropped_parked = false;  // Close, Cancel: a parked request of the session was dropped
};

struct AppliedEntry {
  std::vector<CommandResult> results;  // one per command
  std::vector<Delivery> deliveries;    // replies to parked requests, in the order they happened
  std::vector<Loss> losses;            // slots lost by open sessions (Engine::take_losses)
};

class Replica {
 public:
  // Fences count up from config.fence_floor (FenceSource is not used: the counter is state).
  explicit Replica(const EngineConfig& config);
  ~Replica();
  Replica(const Replica&) = delete;
  Replica& operator=(const Replica&) = delete;

  // Applies the entry at log index `index`. An index at or below applied_index() was applied
  // already (a replay after a restart) and changes nothing: the result is empty.
  AppliedEntry apply(std::uint64_t index, const LogEntry& entry);

  std::uint64_t applied_index() const { return applied_index_; }
  // The time of the last entry applied (Instant::min() before the first).
  Instant time() const { return time_; }
  // When the engine next has a deadline due: the leader proposes an entry with a Tick then.
  std::optional<Instant> next_wake() const { return engine_->next_wake(); }
  const Engine& engine() const { return *engine_; }

  // Snapshots (raft's, docs/cluster.md): the applied index, the time and the engine's state
  // (Engine::save). A replica restored from one applies every later entry exactly as this one.
  std::string save() const;
  // Replaces this replica's state with a snapshot of save(); false, changing nothing, for bytes
  // that are not one (corrupt, truncated, of another version).
  bool restore(std::string_view bytes);

  // A hash of the replica's observable state: the applied index and time, the last fence, and
  // every resource with its holders (tokens, sessions, deadlines) and its waiters in order,
  // taken in key order.
  std::uint64_t digest() const;

 private:
  // The token salts of one entry: a SplitMix64 stream seeded by the entry.
  class EntrySalts final : public RandomSource {
   public:
    void seed(std::uint64_t seed) { state_ = SplitMix64(seed); }
    std::uint64_t next_u64() override { return state_.next_u64(); }

   private:
    SplitMix64 state_{0};
  };

  EngineConfig config_;
  EntrySalts salts_;
  std::unique_ptr<Engine> engine_;
  std::uint64_t applied_index_ = 0;
  Instant time_ = Instant::min();
};

}  // namespace turnstile::core
