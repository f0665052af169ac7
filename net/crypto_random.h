// Token salts from OpenSSL's CSPRNG. A token is a capability (whoever presents it may release
// the lock), and its fence half is predictable, so its salt half must not be: a seeded PRNG such
// as SplitMix64 would let one observed token reveal the next. Bytes are drawn 4 KiB at a time.
//
// Thread affinity: one per shard; not thread-safe.
#pragma once

#include <openssl/rand.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "core/random.h"
#include "net/log.h"

namespace turnstile::net {

class CryptoRandom final : public core::RandomSource {
 public:
  std::uint64_t next_u64() override {
    if (used_ + sizeof(std::uint64_t) > buffer_.size()) refill();
    std::uint64_t value = 0;
    std::memcpy(&value, buffer_.data() + used_, sizeof value);
    used_ += sizeof value;
    return value;
  }

 private:
  void refill() {
    if (RAND_bytes(buffer_.data(), static_cast<int>(buffer_.size())) != 1) {
      // Without randomness tokens would be forgeable; refusing to go on is the only safe reply.
      log_line(LogLevel::kError, "OpenSSL RAND_bytes failed: cannot mint unpredictable tokens");
      std::abort();
    }
    used_ = 0;
  }

  std::array<unsigned char, 4096> buffer_{};
  std::size_t used_ = buffer_.size();
};

}  // namespace turnstile::net
