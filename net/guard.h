// guarded(): the boundary between libevent and our code.
//
// libevent is C: an exception that unwound into it would end the process (std::terminate), and
// with it every session and every lock its clients hold, whatever the one request that threw.
// So every callback libevent makes into turnstiled runs its work through guarded(), which logs
// what escapes as an error and tells the caller, who decides what the event's client gets (an
// HTTP 500, a closed connection). Nothing here is expected to throw: this is the net under it.
//
// Thread affinity: any.
#pragma once

#include <exception>
#include <utility>

#include "net/log.h"

namespace turnstile::net {

// Runs `work`; false (and an error line naming `where`) when an exception escaped it.
template <typename Work>
bool guarded(const char* where, Work&& work) noexcept {
  try {
    std::forward<Work>(work)();
    return true;
  } catch (const std::exception& e) {
    logf(LogLevel::kError, "%s: unexpected exception: %s", where, e.what());
  } catch (...) {
    logf(LogLevel::kError, "%s: unexpected exception of an unknown type", where);
  }
  return false;
}

}  // namespace turnstile::net
