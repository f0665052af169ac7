// DeadlineTimer: a libevent timer armed for an instant of our monotonic clock (net/clock.h).
//
// Why not evtimer_add after every event: libevent takes a timer that is already due off its
// active list when it is added again (event_add on an active timeout reschedules it), so a driver
// that re-arms a timer after every event starves it for as long as another event comes first in
// every loop turn. A connection that kept reporting EOF once starved its own auth-failure timer
// that way for ever. This timer is armed only when the instant it should fire at changes.
//
// libevent measures timers on its cached, coarse clock, so a timer can fire a little before the
// instant it was armed for: the callback calls fired(), finds nothing due, and the next arm()
// sets it again for the rest of the wait.
//
// Thread affinity: the thread of the event_base.
#pragma once

#include <event2/event.h>

#include <optional>

#include "core/time.h"
#include "net/clock.h"

namespace turnstile::net {

class DeadlineTimer {
 public:
  DeadlineTimer() = default;
  DeadlineTimer(event_base* base, event_callback_fn callback, void* argument)
      : event_(evtimer_new(base, callback, argument)) {}
  ~DeadlineTimer() {
    if (event_ != nullptr) event_free(event_);
  }
  DeadlineTimer(const DeadlineTimer&) = delete;
  DeadlineTimer& operator=(const DeadlineTimer&) = delete;

  // Fires at `at` (nullopt: not at all); `now` is the caller's reading of the monotonic clock.
  void arm(std::optional<core::Instant> at, core::Instant now) {
    if (event_ == nullptr || at == armed_) return;
    armed_ = at;
    if (!at) {
      evtimer_del(event_);
      return;
    }
    const timeval delay = to_timeval(*at - now);
    evtimer_add(event_, &delay);
  }
  // The callback ran: the timer is no longer armed.
  void fired() { armed_.reset(); }
  void cancel() { arm(std::nullopt, core::Instant::min()); }

 private:
  event* event_ = nullptr;
  std::optional<core::Instant> armed_;
};

}  // namespace turnstile::net
