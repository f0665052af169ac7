#include "core/assert.h"

#include <cstdio>
#include <cstdlib>

namespace turnstile::core {
namespace {
AssertHook g_hook = nullptr;
}

AssertHook set_assert_hook(AssertHook hook) {
  AssertHook previous = g_hook;
  g_hook = hook;
  return previous;
}

void assert_fail(const char* condition, const char* file, int line) {
  std::fprintf(stderr, "turnstile: assertion failed: %s at %s:%d\n", condition, file, line);
  if (g_hook != nullptr) g_hook();
  std::fflush(stderr);
  std::abort();
}

}  // namespace turnstile::core
