// DeadlineQueue: indexed binary min-heaps of deadlines, so that schedule, reschedule and cancel
// are all O(log n) and nothing stale is left behind (a release cancels its lease timer instead of
// leaving it to fire uselessly later).
//
// Each owner embeds a Timer, which records the owner's position in the heap; the queue keeps that
// position up to date as entries move. Entries are ordered by (instant, kind, sequence): at the
// same instant lower kinds come first, and among equals the earlier scheduled comes first (or the
// lower rank, for a kind scheduled with ranks), so the order is a pure function of the inputs.
//
// Thread affinity: owned by one engine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/assert.h"
#include "core/time.h"

namespace turnstile::core {

// The storage of one heap: an array that grows a segment of 4,096 entries at a time. A vector
// that doubles copies (and page-faults in) the whole heap at once: with 262,144 idle-GC timers
// that stalled a shard for about 5 ms, and the stall doubles with the heap. Indexing costs one
// shift and one mask more than a vector. Segments are kept when the heap shrinks.
template <typename T>
class SegmentedArray {
 public:
  T& operator[](std::size_t i) { return segments_[i >> kShift][i & kMask]; }
  const T& operator[](std::size_t i) const { return segments_[i >> kShift][i & kMask]; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T& front() { return (*this)[0]; }
  const T& front() const { return (*this)[0]; }
  void push_back(const T& value) {
    if ((size_ >> kShift) == segments_.size()) {
      segments_.push_back(std::unique_ptr<T[]>(new T[kSegment]));
    }
    (*this)[size_++] = value;
  }
  void pop_back() { --size_; }

 private:
  static constexpr std::size_t kShift = 12;
  static constexpr std::size_t kSegment = std::size_t{1} << kShift;
  static constexpr std::size_t kMask = kSegment - 1;
  std::vector<std::unique_ptr<T[]>> segments_;
  std::size_t size_ = 0;
};

class DeadlineQueue {
 public:
  // Lower kinds are processed first at the same instant.
  // A lock-delay's end (kDelayEnd) comes before wait timeouts, so that a waiter the end of the
  // delay grants at the instant its request times out is granted.
  enum class Kind : std::uint8_t { kLeaseExpiry = 0, kDelayEnd = 1, kWaitTimeout = 2, kIdleGc = 3 };

  class Timer {
   public:
    bool scheduled() const { return position_ != kUnscheduled; }

   private:
    friend class DeadlineQueue;
    static constexpr std::uint32_t kUnscheduled = UINT32_MAX;
    std::uint32_t position_ = kUnscheduled;
    Kind kind_ = Kind::kLeaseExpiry;
  };

  struct Due {
    Kind kind;
    void* owner;
    Instant at;  // the instant it was scheduled at
  };

  // Schedules `timer` at `at`, or moves it there if it is already scheduled. Entries of the same
  // instant and kind are taken in scheduling order, or by `rank` when one is given (lower first;
  // use it for every entry of that kind or for none).
  void schedule(Timer& timer, Instant at, Kind kind, void* owner,
                std::optional<std::uint64_t> rank = std::nullopt) {
    if (timer.scheduled() && timer.kind_ != kind) cancel(timer);
    Heap& heap = heap_of(kind);
    if (timer.scheduled()) {
      Entry& entry = heap[timer.position_];
      TS_ASSERT(entry.timer == &timer);
      entry.at = at;
      entry.order = order_of(kind, rank);
      entry.owner = owner;
      restore(heap, timer.position_);
      return;
    }
    TS_ASSERT(heap.size() < Timer::kUnscheduled);
    heap.push_back(Entry{at, order_of(kind, rank), owner, &timer});
    timer.kind_ = kind;
    timer.position_ = static_cast<std::uint32_t>(heap.size() - 1);
    sift_up(heap, timer.position_);
  }

  void cancel(Timer& timer) {
    if (!timer.scheduled()) return;
    Heap& heap = heap_of(timer.kind_);
    std::uint32_t position = timer.position_;
    TS_ASSERT(heap[position].timer == &timer);
    timer.position_ = Timer::kUnscheduled;
    std::uint32_t last = static_cast<std::uint32_t>(heap.size() - 1);
    if (position != last) {
      heap[position] = heap[last];
      heap[position].timer->position_ = position;
      heap.pop_back();
      restore(heap, position);
    } else {
      heap.pop_back();
    }
  }

  std::optional<Instant> next() const {
    const Entry* earliest = earliest_entry();
    if (earliest == nullptr) return std::nullopt;
    return earliest->at;
  }

  // Removes and returns the earliest entry if it is due (at <= now).
  std::optional<Due> pop_due(Instant now) {
    const Entry* earliest = earliest_entry();
    if (earliest == nullptr || earliest->at > now) return std::nullopt;
    Entry top = *earliest;
    cancel(*top.timer);
    return Due{static_cast<Kind>(top.order >> kKindShift), top.owner, top.at};
  }

  // Where a scheduled timer stands in the processing order: entries compare by (at, order). For a
  // kind scheduled without ranks `order` is new every time a timer is scheduled, so finding the
  // same slot later means the same entry, neither processed nor moved in between.
  struct Slot {
    Instant at;
    std::uint64_t order;
    bool operator==(const Slot&) const = default;
    bool operator<(const Slot& other) const {
      return at != other.at ? at < other.at : order < other.order;
    }
  };

  // The timer's slot, or nullopt when it is not scheduled.
  std::optional<Slot> slot(const Timer& timer) const {
    if (!timer.scheduled()) return std::nullopt;
    const Entry& entry = heaps_[static_cast<std::size_t>(timer.kind_)][timer.position_];
    return Slot{entry.at, entry.order};
  }

  // Snapshots (Engine::save and restore). The kind of a slot's entry, and the counter behind
  // the scheduling sequence: with both, a restored queue takes its entries in the same order.
  static Kind kind_of(const Slot& slot) { return static_cast<Kind>(slot.order >> kKindShift); }
  // The part of a slot's order below its kind: its scheduling sequence, or its rank.
  static std::uint64_t rank_of(const Slot& slot) {
    return slot.order & ((std::uint64_t{1} << kKindShift) - 1);
  }
  std::uint64_t sequence() const { return sequence_; }
  void set_sequence(std::uint64_t sequence) {
    TS_ASSERT(sequence < (std::uint64_t{1} << kKindShift));
    sequence_ = sequence;
  }
  // Schedules an unscheduled `timer` at exactly `slot` (a slot() taken from the saved queue).
  void reinstate(Timer& timer, Slot slot, void* owner) {
    TS_ASSERT(!timer.scheduled() && (slot.order >> kKindShift) < kKinds);
    const Kind kind = kind_of(slot);
    Heap& heap = heap_of(kind);
    TS_ASSERT(heap.size() < Timer::kUnscheduled);
    heap.push_back(Entry{slot.at, slot.order, owner, &timer});
    timer.kind_ = kind;
    timer.position_ = static_cast<std::uint32_t>(heap.size() - 1);
    sift_up(heap, timer.position_);
  }

  std::size_t size() const {
    std::size_t total = 0;
    for (const Heap& heap : heaps_) total += heap.size();
    return total;
  }

 private:
  static constexpr int kKindShift = 56;
  static constexpr std::size_t kKinds = 4;

  struct Entry {
    Instant at;
    std::uint64_t order;  // kind in the top byte, scheduling sequence below
    void* owner;
    Timer* timer;
  };
  // One heap per kind: idle-GC timers, far in the future and one per idle resource, would
  // otherwise sit in the same heap as the short lease timers that come and go on every acquire
  // and make each of those climb and descend the whole heap. The earliest entry overall is the
  // earliest of the tops, compared on the same (instant, kind, sequence) order.
  using Heap = SegmentedArray<Entry>;

  Heap& heap_of(Kind kind) { return heaps_[static_cast<std::size_t>(kind)]; }

  const Entry* earliest_entry() const {
    const Entry* earliest = nullptr;
    for (const Heap& heap : heaps_) {
      if (!heap.empty() && (earliest == nullptr || before(heap.front(), *earliest))) {
        earliest = &heap.front();
      }
    }
    return earliest;
  }

  std::uint64_t order_of(Kind kind, std::optional<std::uint64_t> rank) {
    std::uint64_t below = 0;
    if (rank) {
      below = *rank;
    } else {
      below = ++sequence_;
    }
    TS_ASSERT(below < (std::uint64_t{1} << kKindShift));
    return (static_cast<std::uint64_t>(kind) << kKindShift) | below;
  }

  static bool before(const Entry& a, const Entry& b) {
    if (a.at != b.at) return a.at < b.at;
    return a.order < b.order;
  }

  static void place(Heap& heap, std::uint32_t position, const Entry& entry) {
    heap[position] = entry;
    entry.timer->position_ = position;
  }

  static void sift_up(Heap& heap, std::uint32_t position) {
    Entry moving = heap[position];
    while (position > 0) {
      std::uint32_t parent = (position - 1) / 2;
      if (!before(moving, heap[parent])) break;
      place(heap, position, heap[parent]);
      position = parent;
    }
    place(heap, position, moving);
  }

  static void sift_down(Heap& heap, std::uint32_t position) {
    Entry moving = heap[position];
    const auto count = static_cast<std::uint32_t>(heap.size());
    while (true) {
      std::uint32_t child = 2 * position + 1;
      if (child >= count) break;
      if (child + 1 < count && before(heap[child + 1], heap[child])) ++child;
      if (!before(heap[child], moving)) break;
      place(heap, position, heap[child]);
      position = child;
    }
    place(heap, position, moving);
  }

  static void restore(Heap& heap, std::uint32_t position) {
    if (position > 0 && before(heap[position], heap[(position - 1) / 2])) {
      sift_up(heap, position);
    } else {
      sift_down(heap, position);
    }
  }

  Heap heaps_[kKinds];
  std::uint64_t sequence_ = 0;
};

}  // namespace turnstile::core
