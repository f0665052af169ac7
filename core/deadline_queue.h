// DeadlineQueue: an indexed binary min-heap of deadlines, so that schedule, reschedule and cancel
// are all O(log n) and nothing stale is left behind (a release cancels its lease timer instead of
// leaving it to fire uselessly later).
//
// Each owner embeds a Timer, which records the owner's position in the heap; the queue keeps that
// position up to date as entries move. Entries are ordered by (instant, kind, sequence): at the
// same instant lower kinds come first, and among equals the earlier scheduled comes first, so the
// order is a pure function of the inputs.
//
// Thread affinity: owned by one engine.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/assert.h"
#include "core/time.h"

namespace turnstile::core {

class DeadlineQueue {
 public:
  // Lower kinds are processed first at the same instant.
  enum class Kind : std::uint8_t { kLeaseExpiry = 0, kWaitTimeout = 1, kIdleGc = 2 };

  class Timer {
   public:
    bool scheduled() const { return position_ != kUnscheduled; }

   private:
    friend class DeadlineQueue;
    static constexpr std::uint32_t kUnscheduled = UINT32_MAX;
    std::uint32_t position_ = kUnscheduled;
  };

  struct Due {
    Kind kind;
    void* owner;
  };

  // Schedules `timer` at `at`, or moves it there if it is already scheduled.
  void schedule(Timer& timer, Instant at, Kind kind, void* owner) {
    if (timer.scheduled()) {
      Entry& entry = heap_[timer.position_];
      TS_ASSERT(entry.timer == &timer);
      entry.at = at;
      entry.order = order_of(kind);
      entry.owner = owner;
      restore(timer.position_);
      return;
    }
    TS_ASSERT(heap_.size() < Timer::kUnscheduled);
    heap_.push_back(Entry{at, order_of(kind), owner, &timer});
    timer.position_ = static_cast<std::uint32_t>(heap_.size() - 1);
    sift_up(timer.position_);
  }

  void cancel(Timer& timer) {
    if (!timer.scheduled()) return;
    std::uint32_t position = timer.position_;
    TS_ASSERT(heap_[position].timer == &timer);
    timer.position_ = Timer::kUnscheduled;
    std::uint32_t last = static_cast<std::uint32_t>(heap_.size() - 1);
    if (position != last) {
      heap_[position] = heap_[last];
      heap_[position].timer->position_ = position;
      heap_.pop_back();
      restore(position);
    } else {
      heap_.pop_back();
    }
  }

  std::optional<Instant> next() const {
    if (heap_.empty()) return std::nullopt;
    return heap_.front().at;
  }

  // Removes and returns the earliest entry if it is due (at <= now).
  std::optional<Due> pop_due(Instant now) {
    if (heap_.empty() || heap_.front().at > now) return std::nullopt;
    Entry top = heap_.front();
    cancel(*top.timer);
    return Due{static_cast<Kind>(top.order >> kKindShift), top.owner};
  }

  std::size_t size() const { return heap_.size(); }

 private:
  static constexpr int kKindShift = 56;

  struct Entry {
    Instant at;
    std::uint64_t order;  // kind in the top byte, scheduling sequence below
    void* owner;
    Timer* timer;
  };

  std::uint64_t order_of(Kind kind) {
    ++sequence_;
    TS_ASSERT(sequence_ < (std::uint64_t{1} << kKindShift));
    return (static_cast<std::uint64_t>(kind) << kKindShift) | sequence_;
  }

  static bool before(const Entry& a, const Entry& b) {
    if (a.at != b.at) return a.at < b.at;
    return a.order < b.order;
  }

  void place(std::uint32_t position, const Entry& entry) {
    heap_[position] = entry;
    entry.timer->position_ = position;
  }

  void sift_up(std::uint32_t position) {
    Entry moving = heap_[position];
    while (position > 0) {
      std::uint32_t parent = (position - 1) / 2;
      if (!before(moving, heap_[parent])) break;
      place(position, heap_[parent]);
      position = parent;
    }
    place(position, moving);
  }

  void sift_down(std::uint32_t position) {
    Entry moving = heap_[position];
    const auto count = static_cast<std::uint32_t>(heap_.size());
    while (true) {
      std::uint32_t child = 2 * position + 1;
      if (child >= count) break;
      if (child + 1 < count && before(heap_[child + 1], heap_[child])) ++child;
      if (!before(heap_[child], moving)) break;
      place(position, heap_[child]);
      position = child;
    }
    place(position, moving);
  }

  void restore(std::uint32_t position) {
    if (position > 0 && before(heap_[position], heap_[(position - 1) / 2])) {
      sift_up(position);
    } else {
      sift_down(position);
    }
  }

  std::vector<Entry> heap_;
  std::uint64_t sequence_ = 0;
};

}  // namespace turnstile::core
