// The byte format of an engine snapshot (Engine::save, Engine::restore), apart from the engine:
// a SnapshotImage is the engine's whole state as plain values, encode_snapshot writes it and
// decode_snapshot reads it back, refusing any bytes that break a rule the engine's own
// operations keep. The layout, field by field, is docs/snapshot-format.md.
//
// Private to the engine (core/engine_save.cc builds an image from its state and its state from an
// image); nothing outside core/ includes it.
//
// Thread affinity: plain values and pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/deadline_queue.h"
#include "core/engine_counters.h"
#include "core/protocol.h"
#include "core/types.h"

namespace turnstile::core {

inline constexpr std::uint8_t kSnapshotVersion = 3;

// A resource remembers the fences of this many latest holders an operator forced out.
inline constexpr std::size_t kForcedRemembered = 16;

inline constexpr std::uint8_t kHolderOwned = 1, kHolderTwoPhasePending = 2, kHolderOrphan = 4,
                              kHolderShared = 8;
inline constexpr std::uint8_t kWaiterTwoPhase = 1, kWaiterParked = 2, kWaiterOrphan = 4,
                              kWaiterShared = 8;

// Numbered as the engine's TwoPhaseRecord::State (core/engine_save.cc checks it).
enum class SnapshotRecordState : std::uint8_t { kWaiting = 0, kGranted = 1, kExpired = 2 };

struct SnapshotImage {
  using Slot = std::optional<DeadlineQueue::Slot>;  // empty: the timer is not scheduled
  struct Holder {
    Token token;
    SessionId session;
    std::uint8_t flags = 0;  // kHolder*
    std::string ref;         // set exactly when kHolderOrphan is
    std::int64_t lease_s = 0;
    Instant deadline;
    Slot slot;  // lease expiry
  };
  struct Waiter {
    SessionId session;
    std::int64_t lease_s = 0;
    std::uint8_t flags = 0;  // kWaiter* without kWaiterShared, which is `shared`
    bool shared = false;
    std::string ref;  // set exactly when kWaiterOrphan is
    Instant since;
    Slot slot;  // timeout of the parked request, or the end of an orphan's time
  };
  struct Resource {
    Namespace ns = Namespace::kLock;
    std::string key;
    std::int64_t limit = 1;
    std::uint64_t serial = 0;
    Instant last_activity;
    Slot gc;
    Slot delay;
    std::vector<std::uint64_t> forced_fences;
    std::vector<Holder> holders;  // in list order
    std::vector<Waiter> waiters;  // in queue order
  };
  struct Record {
    std::uint64_t session = 0;
    std::uint64_t serial = 0;  // of the resource
    SnapshotRecordState state = SnapshotRecordState::kWaiting;
  };
  struct Ref {
    std::uint64_t session = 0;
    std::string ref;
  };

  Instant now;
  Fence last_fence;
  std::uint64_t block_next = 0;
  std::uint64_t block_left = 0;
  EngineCounters counters;
  std::uint64_t next_serial = 0;
  std::uint64_t sequence = 0;  // of the deadline queue
  std::vector<Resource> resources;
  std::vector<Record> records;
  std::vector<Ref> refs;
};

// The snapshot's bytes. The image's resources, records and refs may come in any order: they are
// written in the format's order (resources by serial, records by (session, serial), refs by
// session).
std::string encode_snapshot(SnapshotImage image);

// Reads a snapshot of encode_snapshot (this version or version 2) into `image`; false, with
// `image` unspecified, for bytes that are truncated, run on, or break any rule of the engine.
// More than `resources_max` resources are refused too.
[[nodiscard]] bool decode_snapshot(std::string_view bytes, std::int64_t resources_max,
                                   SnapshotImage& image);

}  // namespace turnstile::core
