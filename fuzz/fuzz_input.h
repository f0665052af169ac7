// FuzzInput: reads the fuzzer's bytes as a stream of small decisions, so that every harness
// decodes its input the same way and a short input is a short, readable scenario.
//
// Reading past the end yields zeros (and empty byte strings): every input is valid and decodes
// to a finite scenario, and libFuzzer's mutations of the tail never make the head unreadable.
//
// Thread affinity: a plain value owned by one call of LLVMFuzzerTestOneInput.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace turnstile::fuzz {

class FuzzInput {
 public:
  FuzzInput(const std::uint8_t* data, std::size_t size)
      : bytes_(reinterpret_cast<const char*>(data), size) {}

  bool empty() const { return position_ >= bytes_.size(); }
  std::size_t remaining() const { return empty() ? 0 : bytes_.size() - position_; }

  std::uint8_t byte() {
    if (empty()) return 0;
    return static_cast<std::uint8_t>(bytes_[position_++]);
  }
  // A value in [0, bound), bound <= 256 (one byte of input).
  std::size_t below(std::size_t bound) { return bound == 0 ? 0 : byte() % bound; }
  bool flag() { return (byte() & 1) != 0; }
  std::uint64_t u64() {
    std::uint64_t value = 0;
    for (int i = 0; i < 8; ++i) value = (value << 8) | byte();
    return value;
  }
  // Up to `max` raw bytes (fewer at the end of the input).
  std::string_view bytes(std::size_t max) {
    std::size_t length = max < remaining() ? max : remaining();
    std::string_view result = bytes_.substr(position_, length);
    position_ += length;
    return result;
  }
  // Everything not read yet.
  std::string_view rest() { return bytes(remaining()); }

 private:
  std::string_view bytes_;
  std::size_t position_ = 0;
};

// A broken property: prints what broke, then aborts so libFuzzer saves the input as a crash.
[[noreturn]] inline void fail(const char* harness, const std::string_view what) {
  std::fprintf(stderr, "%s: FAILED: %.*s\n", harness, static_cast<int>(what.size()), what.data());
  std::abort();
}

}  // namespace turnstile::fuzz
