// IdlePoll: how long a shard keeps polling for work after its last event before it sleeps.
//
// A shard that sleeps in epoll_wait is woken by the kernel when a socket or its mailbox becomes
// ready. On a virtual machine whose idle vCPUs halt, that wake-up goes through the hypervisor and
// can cost tens of microseconds, and a lock hand-off waits for it on every grant (the next
// holder's release arrives a round trip later, often just after the shard went to sleep). So for
// a short window after its last event a shard keeps polling (its mailbox, and epoll without
// blocking, yielding the CPU between polls) and only then sleeps.
//
// The window adapts, like Linux's guest halt-polling governor, so polling costs CPU only when it
// pays off:
//  * a sleep that ended within `max` of the last event (the work came soon after the window
//    closed) grows the window: doubled, starting at max / 8;
//  * a sleep that lasted longer than `max` (nothing was coming) halves it, down to zero;
//  * work that arrives while polling leaves it as it is.
// An idle server therefore sleeps at once after its last event, and a lightly loaded one, whose
// requests are further apart than `max`, polls not at all. `max` is --idle-poll-us; zero turns
// polling off.
//
// Pure bookkeeping (no clock reads): the shard's loop passes the durations in.
#pragma once

#include <algorithm>

#include "core/time.h"

namespace turnstile::net {

class IdlePoll {
 public:
  explicit IdlePoll(core::Duration max) : max_(std::max(max, core::Duration::zero())) {}

  // How long to keep polling after the last event before sleeping.
  core::Duration window() const { return window_; }

  // The shard slept and was woken `idle` after its last event (polling plus sleeping).
  void on_woken(core::Duration idle) {
    if (max_ <= core::Duration::zero()) return;
    if (idle <= max_) {
      const core::Duration start = core::Duration::nanoseconds(max_.ns() / 8);
      window_ = window_ <= core::Duration::zero()
                    ? start
                    : std::min(max_, core::Duration::nanoseconds(window_.ns() * 2));
    } else {
      window_ = core::Duration::nanoseconds(window_.ns() / 2);
      if (window_ < core::Duration::nanoseconds(max_.ns() / 8)) window_ = core::Duration::zero();
    }
  }

 private:
  core::Duration max_;
  core::Duration window_ = core::Duration::zero();
};

}  // namespace turnstile::net
