// Prng: the simulator's own random number generator (xoshiro256**, seeded through SplitMix64).
//
// Every choice the simulator makes comes from one of these, derived from the run's 64-bit seed,
// one stream per subsystem, so that a change in how often one subsystem draws does not shift the
// choices of another. Integer-only helpers: the same sequence on every compiler and platform
// (no std:: distributions, no floating point).
//
// Thread affinity: single-threaded, like the whole simulator.
#pragma once

#include <cstdint>

#include "core/assert.h"

namespace turnstile::sim {

class Prng {
 public:
  // `stream` separates subsystems drawing from the same seed.
  Prng(std::uint64_t seed, std::uint64_t stream) {
    std::uint64_t x = seed ^ (stream * 0xd1342543de82ef95ULL);
    for (std::uint64_t& word : state_) word = splitmix(x);
  }

  std::uint64_t next() {
    const std::uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const std::uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }

  // Uniform in [0, n); n > 0. Lemire's multiply-shift with rejection, so no modulo bias.
  std::uint64_t below(std::uint64_t n) {
    TS_ASSERT(n > 0);
    const std::uint64_t threshold = (0 - n) % n;
    while (true) {
      const unsigned __int128 product = static_cast<unsigned __int128>(next()) * n;
      if (static_cast<std::uint64_t>(product) >= threshold) {
        return static_cast<std::uint64_t>(product >> 64);
      }
    }
  }
  // Uniform in [low, high].
  std::int64_t between(std::int64_t low, std::int64_t high) {
    TS_ASSERT(low <= high);
    return low + static_cast<std::int64_t>(below(static_cast<std::uint64_t>(high - low) + 1));
  }
  // True with probability permille / 1000.
  bool chance(std::uint64_t permille) { return below(1000) < permille; }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static std::uint64_t splitmix(std::uint64_t& x) {
    std::uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  std::uint64_t state_[4];
};

}  // namespace turnstile::sim
