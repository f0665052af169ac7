// Randomness as an input. The engine draws token salts from a RandomSource it is given: the
// daemon hands it one seeded from the OS, tests and the simulator hand it a seeded SplitMix64 so
// that runs replay bit for bit.
//
// Thread affinity: a source belongs to the thread that owns its engine.
#pragma once

#include <cstdint>

namespace turnstile::core {

class RandomSource {
 public:
  virtual ~RandomSource() = default;
  virtual std::uint64_t next_u64() = 0;
};

// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, and the same sequence on every compiler.
// Not for secrets: its output is predictable from its seed.
class SplitMix64 final : public RandomSource {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next_u64() override {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

 private:
  std::uint64_t state_;
};

}  // namespace turnstile::core
