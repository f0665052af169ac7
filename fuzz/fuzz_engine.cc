// Differential fuzzing of core::Engine against test::ReferenceModel (testing), the same
// comparison as tests/core/engine_model_test.cc (testing/engine_differential.h) with
// libFuzzer choosing the steps instead of rapidcheck.
//
// Input: the first bytes choose the configuration (default lease, GC idle time, resource and
// waiter caps, fence floor — sometimes just below the largest fence — stats caps, start instant,
// salt seed, deadlines per call and the lock-delay); then each step is a few bytes: what to do
// (a request from one of 4 session slots on one of 3 keys, a tick, a closed session, stats), how
// far the clock moves (nanoseconds to days, sometimes backward), and the request's fields. A
// request is a lock, semaphore or read-write lock command (rl wl rr wr rn wn re we rw ww). r/n
// (and sr/sn, rr/wr, rn/wn) present a token paired between the two implementations, a forged or
// random one, or a malformed one; a read-write release or renewal may name a token of the other
// kind.
//
// After every step EngineDifferential checks replies, deliveries, close_session results,
// counters, state, stats and the engine's own invariants; any difference aborts.
// TURNSTILE_FUZZ_TRACE=1 prints every step to stderr, to read a crash input as a scenario.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>
#include <utility>

#include "core/protocol.h"
#include "fuzz/fuzz_input.h"
#include "testing/engine_differential.h"

namespace turnstile::fuzz {
namespace {

using core::Command;
using test::differential::ConfigChoice;
using test::differential::EngineDifferential;
using test::differential::kKeys;
using test::differential::kMaxFence;
using test::differential::kSecondNs;
using test::differential::kSlots;
using test::differential::Step;
using test::differential::StepKind;
using test::differential::TokenPick;

constexpr const char* kHarness = "fuzz_engine";
constexpr std::size_t kStepsMax = 400;

bool tracing() {
  static const bool enabled = [] {
    const char* wanted = std::getenv("TURNSTILE_FUZZ_TRACE");
    return wanted != nullptr && std::string(wanted) == "1";
  }();
  return enabled;
}

ConfigChoice decode_choice(FuzzInput& input) {
  ConfigChoice choice;
  choice.default_lease_s = 1 + static_cast<std::int64_t>(input.below(6));
  static const std::array<std::int64_t, 6> kIdle = {
      0, 1, kSecondNs / 2, kSecondNs, 2 * kSecondNs, 3 * kSecondNs};
  choice.gc_max_idle_ns = kIdle[input.below(kIdle.size())];
  const std::uint8_t caps = input.byte();
  choice.resources_max = (caps & 0x80) != 0 ? 1'048'576 : 1 + (caps & 7);
  choice.waiters_max = (caps >> 3) & 3;
  choice.stats_entries_max =
      (caps & 0x20) != 0 ? 1 + static_cast<std::size_t>((caps >> 3) & 3) : 10'000;
  choice.near_max_jumps = (caps & 0x40) != 0 && (caps & 7) == 0;
  const std::uint8_t fence = input.byte();
  choice.fence_floor = fence >= 0xf0 ? kMaxFence - (fence & 7) : std::uint64_t{fence} * 4099;
  choice.last_key_limit = input.flag() ? 17 : static_cast<std::int64_t>(kKeys);
  choice.start_ns =
      static_cast<std::int64_t>(input.u64() % 2'000'000'000'001ULL) - 1'000'000'000'000;
  choice.salt_seed = input.byte();
  static const std::array<std::size_t, 4> kPerCall = {32, 1, 2, 3};
  // One byte: its low two bits the deadlines per call, the next three the lock-delay (off for
  // half of the values, so that a zero byte, as in the older seeds, keeps it off).
  const std::uint8_t timing = input.byte();
  choice.deadlines_per_call = kPerCall[timing % kPerCall.size()];
  static const std::array<std::int64_t, 8> kLockDelay = {
      0, 0, 0, 0, 1, kSecondNs / 2, kSecondNs, 2 * kSecondNs};
  choice.lock_delay_ns = kLockDelay[(timing / kPerCall.size()) % kLockDelay.size()];
  return choice;
}

std::int64_t decode_advance(FuzzInput& input) {
  const std::uint8_t b = input.byte();
  const auto operand = static_cast<std::int64_t>(input.byte());
  switch (b % 16) {
    case 0:
    case 1:
    case 2:
    case 3:
    case 4:
      return 0;
    case 5:
    case 6:
      return 1 + operand * 4;
    case 7:
    case 8:
      return kSecondNs;
    case 9:
      return kSecondNs - 1;
    case 10:
      return kSecondNs + 1;
    case 11:
      return kSecondNs / 2;
    case 12:
      return (2 + operand % 5) * kSecondNs + (b >= 128 ? operand * 7'777'777 : 0);
    case 13:
      return 1'000'000'000'000 * (1 + operand * 3'900);
    case 14:
      return -operand * (kSecondNs / 85);
    default:
      return b >= 128 ? -1 : (b >= 64 ? -kSecondNs : -1'000'000'000'000'000);
  }
}

Step decode_step(FuzzInput& input) {
  Step step;
  const std::uint8_t what = input.byte();
  const std::uint8_t kind = what % 32;
  step.kind =
      kind < 26 ? StepKind::kRequest
                : (kind < 28 ? StepKind::kTick : (kind < 31 ? StepKind::kClose : StepKind::kStats));
  step.slot = (what >> 5) % kSlots;
  step.auto_release = (what & 0x80) == 0;
  step.advance_ns = decode_advance(input);
  if (step.kind != StepKind::kRequest) return step;
  static const std::array<Command, 10> kCommands = {
      Command::kLock,  Command::kSemLock,  Command::kRelease, Command::kSemRelease,
      Command::kRenew, Command::kSemRenew, Command::kEnqueue, Command::kSemEnqueue,
      Command::kWait,  Command::kSemWait};
  // The same operations on a read-write lock, in the same order: rl for l, wl for sl, rr for r,
  // wr for sr...
  static const std::array<Command, 10> kReadWrite = {
      Command::kReadLock,  Command::kWriteLock,  Command::kReadRelease, Command::kWriteRelease,
      Command::kReadRenew, Command::kWriteRenew, Command::kReadEnqueue, Command::kWriteEnqueue,
      Command::kReadWait,  Command::kWriteWait};
  const std::uint8_t fields = input.byte();
  // A third of the values (60-89, 150-179, 240-255) pick a read-write lock command; the older
  // seeds, written with small values, decode as they did.
  const bool read_write = (fields / 30) % 3 == 2;
  step.command = (read_write ? kReadWrite : kCommands)[fields % kCommands.size()];
  step.key = (fields / 10) % kKeys;
  const std::uint8_t numbers = input.byte();
  step.timeout_s = (numbers & 0x0f) < 14 ? (numbers & 0x0f) % 5 : 10 + (numbers >> 4);
  const std::uint8_t lease = input.byte();
  step.lease_s = lease % 10 < 3 ? 0 : (lease % 10 < 9 ? 1 + lease % 6 : 30 + lease % 32);
  step.limit = (numbers >> 4) < 12 ? 0 : 1 + (numbers >> 4) % 3;
  const std::uint8_t token = input.byte();
  static const std::array<TokenPick, 18> kPicks = {
      TokenPick::kSameKey, TokenPick::kSameKey,  TokenPick::kSameKey,    TokenPick::kSameKey,
      TokenPick::kSameKey, TokenPick::kSameKey,  TokenPick::kSameKey,    TokenPick::kSameKey,
      TokenPick::kSameKey, TokenPick::kSameKey,  TokenPick::kAny,        TokenPick::kAny,
      TokenPick::kAny,     TokenPick::kAny,      TokenPick::kForgedSalt, TokenPick::kForgedSalt,
      TokenPick::kRandom,  TokenPick::kMalformed};
  step.token_pick = kPicks[token % kPicks.size()];
  step.token_index = (token / 18) % 4;
  return step;
}

}  // namespace
}  // namespace turnstile::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace turnstile::fuzz;
  FuzzInput input(data, size);
  turnstile::test::differential::Options options;
  options.fail = [](const std::string& what) { fail(kHarness, what); };
  if (tracing()) options.trace = &std::cerr;
  EngineDifferential differential(decode_choice(input), std::move(options));
  for (std::size_t i = 0; i < kStepsMax && !input.empty(); ++i) {
    differential.apply(i, decode_step(input));
  }
  return 0;
}
