// Always-on assertions for programmer errors (never for bad input from the network, which the
// parser rejects with a typed error). A failed check prints file, line and condition and aborts,
// in every build type. A driver (the simulator) may install a hook that prints extra context,
// such as the seed that reproduces the failure, before the abort.
#pragma once

namespace turnstile::core {

using AssertHook = void (*)();

// Installs a hook run after the failure message and before abort(); returns the previous one.
AssertHook set_assert_hook(AssertHook hook);

[[noreturn]] void assert_fail(const char* condition, const char* file, int line);

}  // namespace turnstile::core

#define TS_ASSERT(condition)                                          \
  do {                                                                \
    if (!(condition)) [[unlikely]] {                                  \
      ::turnstile::core::assert_fail(#condition, __FILE__, __LINE__); \
    }                                                                 \
  } while (false)
