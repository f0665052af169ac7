// Digest: XXH3-64 over the trace of a run, so that two runs of a seed can be compared in one
// number (docs/simulator.md, "deterministic replay").
//
// Thread affinity: single-threaded, owned by one run.
#pragma once

#include <xxhash.h>

#include <cstdint>
#include <string_view>

namespace turnstile::sim {

class Digest {
 public:
  Digest() : state_(XXH3_createState()) { XXH3_64bits_reset(state_); }
  ~Digest() { XXH3_freeState(state_); }
  Digest(const Digest&) = delete;
  Digest& operator=(const Digest&) = delete;
  void add(std::uint64_t value) { XXH3_64bits_update(state_, &value, sizeof value); }
  void add(std::string_view bytes) {
    add(static_cast<std::uint64_t>(bytes.size()));
    XXH3_64bits_update(state_, bytes.data(), bytes.size());
  }
  std::uint64_t value() const { return XXH3_64bits_digest(state_); }

 private:
  XXH3_state_t* state_;
};

}  // namespace turnstile::sim
