// Unit tests for core/fence.h: the journal record format, recovery from every torn or corrupt
// state of the two slots, the reservation state machine, and engines drawing their fences in
// blocks from a source (docs/fence-journal.md).
#include "core/fence.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "core/engine.h"
#include "core/random.h"
#include "testing/requests.h"

namespace turnstile::core {
namespace {

constexpr std::uint64_t kU64Max = std::numeric_limits<std::uint64_t>::max();
constexpr std::uint64_t kWall = 1'767'225'600'000'000'000ULL;  // 2026-01-01 in ns

using Bytes = std::vector<std::uint8_t>;

Bytes file_of(std::optional<JournalRecord> slot0, std::optional<JournalRecord> slot1) {
  Bytes file(kJournalFileBytes, 0);
  if (slot0) {
    const auto bytes = encode_journal_record(*slot0);
    std::copy(bytes.begin(), bytes.end(), file.begin());
  }
  if (slot1) {
    const auto bytes = encode_journal_record(*slot1);
    std::copy(bytes.begin(), bytes.end(), file.begin() + kJournalRecordBytes);
  }
  return file;
}

// A file in memory that applies JournalWrites, whole or torn.
struct MemoryFile {
  Bytes bytes;
  // Applies the first `prefix` bytes of `write` (all of them by default).
  void apply(const JournalWrite& write, std::size_t prefix = SIZE_MAX) {
    const std::size_t n = std::min(prefix, write.size);
    if (bytes.size() < write.offset + n) bytes.resize(write.offset + n, 0);
    std::copy_n(write.bytes.begin(), n, bytes.begin() + static_cast<std::ptrdiff_t>(write.offset));
  }
};

// Makes the pending write of `journal` durable in `file`.
void sync(FenceJournal& journal, MemoryFile& file) {
  auto write = journal.begin_write();
  ASSERT_TRUE(write.has_value());
  file.apply(*write);
  journal.end_write(write->seq, true);
}

// A journal with `range` started on a new file at `wall`, its first reservation durable.
struct StartedJournal {
  StartedJournal(std::uint64_t range, std::uint64_t wall)
      : journal(FenceJournalConfig{range}, recover_journal({}), wall) {
    sync(journal, file);
  }
  FenceJournal journal;
  MemoryFile file;
};

// ---- format ------------------------------------------------------------------------------------

TEST(FenceFormat, RecordLayoutIsMagicSeqCeilingChecksumBigEndian) {
  const auto bytes = encode_journal_record({0x0102030405060708ULL, 0x1112131415161718ULL});
  EXPECT_EQ(std::string(bytes.begin(), bytes.begin() + 8), "tsfence1");
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(bytes[8 + static_cast<std::size_t>(i)], 0x01 + i);
    EXPECT_EQ(bytes[16 + static_cast<std::size_t>(i)], 0x11 + i);
  }
}

// The example in docs/fence-journal.md.
TEST(FenceFormat, DocumentedExampleRecord) {
  const std::vector<std::uint8_t> expected = {0x74, 0x73, 0x66, 0x65, 0x6e, 0x63, 0x65, 0x31,
                                              0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02,
                                              0x18, 0x86, 0x72, 0x51, 0xee, 0x3a, 0x00, 0x00,
                                              0xb1, 0xb8, 0xcb, 0x82, 0xb3, 0x68, 0x2f, 0xf9};
  const auto bytes = encode_journal_record({2, 1'767'225'600'004'194'304ULL});
  EXPECT_EQ(std::vector<std::uint8_t>(bytes.begin(), bytes.end()), expected);
}

RC_GTEST_PROP(FenceFormat, EncodeDecodeRoundTrip, ()) {
  const JournalRecord record{*rc::gen::inRange<std::uint64_t>(1, kU64Max),
                             *rc::gen::arbitrary<std::uint64_t>()};
  const auto bytes = encode_journal_record(record);
  RC_ASSERT(decode_journal_record(bytes) == std::optional<JournalRecord>(record));
}

RC_GTEST_PROP(FenceFormat, AnySingleByteChangeIsDetected, ()) {
  const JournalRecord record{*rc::gen::inRange<std::uint64_t>(1, kU64Max),
                             *rc::gen::arbitrary<std::uint64_t>()};
  auto bytes = encode_journal_record(record);
  const auto index = *rc::gen::inRange<std::size_t>(0, kJournalRecordBytes);
  const auto flip = *rc::gen::inRange<int>(1, 256);
  bytes[index] = static_cast<std::uint8_t>(bytes[index] ^ flip);
  RC_ASSERT(!decode_journal_record(bytes).has_value());
}

TEST(FenceFormat, SeqZeroAndWrongLengthsAreInvalid) {
  const auto zero = encode_journal_record({0, 5});
  EXPECT_FALSE(decode_journal_record(zero).has_value());
  const auto good = encode_journal_record({1, 5});
  EXPECT_FALSE(decode_journal_record(std::span(good).first(31)).has_value());
  EXPECT_FALSE(decode_journal_record(Bytes(kJournalRecordBytes, 0)).has_value());
}

// ---- recovery ----------------------------------------------------------------------------------

TEST(FenceRecovery, EmptyFileIsFresh) {
  EXPECT_EQ(recover_journal({}).outcome, JournalRecovery::Outcome::kFresh);
}

TEST(FenceRecovery, WrongSizeIsRefusedWithTheSize) {
  for (std::size_t size = 1; size <= 3 * kJournalFileBytes; ++size) {
    if (size == kJournalFileBytes) continue;
    Bytes file(size, 0);
    // Even a valid record at the front does not make a wrong-sized file acceptable.
    const auto record = encode_journal_record({1, 99});
    std::copy_n(record.begin(), std::min(size, record.size()), file.begin());
    const JournalRecovery recovery = recover_journal(file);
    ASSERT_EQ(recovery.outcome, JournalRecovery::Outcome::kRefused) << size;
    EXPECT_NE(recovery.problem.find(std::to_string(size) + " bytes"), std::string::npos)
        << recovery.problem;
  }
}

TEST(FenceRecovery, AllCorruptIsRefused) {
  const JournalRecovery zeros = recover_journal(Bytes(kJournalFileBytes, 0));
  EXPECT_EQ(zeros.outcome, JournalRecovery::Outcome::kRefused);
  EXPECT_NE(zeros.problem.find("no valid record"), std::string::npos);
  Bytes file = file_of(JournalRecord{3, 100}, JournalRecord{4, 200});
  file[20] ^= 1;
  file[kJournalRecordBytes + 31] ^= 0x80;
  EXPECT_EQ(recover_journal(file).outcome, JournalRecovery::Outcome::kRefused);
}

TEST(FenceRecovery, HighestSeqWinsInEitherSlotOrder) {
  const JournalRecovery a = recover_journal(file_of(JournalRecord{7, 700}, JournalRecord{8, 800}));
  ASSERT_EQ(a.outcome, JournalRecovery::Outcome::kRecovered);
  EXPECT_EQ(a.record, (JournalRecord{8, 800}));
  EXPECT_EQ(a.slot, 1);
  const JournalRecovery b = recover_journal(file_of(JournalRecord{8, 800}, JournalRecord{7, 700}));
  ASSERT_EQ(b.outcome, JournalRecovery::Outcome::kRecovered);
  EXPECT_EQ(b.record, (JournalRecord{8, 800}));
  EXPECT_EQ(b.slot, 0);
}

TEST(FenceRecovery, OneValidSlotIsEnough) {
  const JournalRecovery a = recover_journal(file_of(JournalRecord{5, 50}, std::nullopt));
  EXPECT_EQ(a.record, (JournalRecord{5, 50}));
  EXPECT_EQ(a.slot, 0);
  const JournalRecovery b = recover_journal(file_of(std::nullopt, JournalRecord{5, 50}));
  EXPECT_EQ(b.record, (JournalRecord{5, 50}));
  EXPECT_EQ(b.slot, 1);
}

TEST(FenceRecovery, EqualSeqTakesTheHigherCeiling) {
  const JournalRecovery a = recover_journal(file_of(JournalRecord{5, 60}, JournalRecord{5, 50}));
  EXPECT_EQ(a.record, (JournalRecord{5, 60}));
}

// Every write the journal makes, torn after every byte (the rest of the slot keeps its old bytes,
// or holds garbage): recovery always finds a record whose ceiling is at least every fence handed
// out before the crash, and a restart from it hands out only fences above all of them.
TEST(FenceRecovery, TornWriteAtEveryByteOffsetOfEachSlot) {
  FenceJournalConfig config;
  config.range = 16;
  FenceJournal journal(config, recover_journal({}), 1000);
  MemoryFile file;
  sync(journal, file);  // creation
  std::uint64_t max_handed = 0;
  int tears = 0;
  for (int round = 0; round < 6; ++round) {  // covers both slots, three times each
    // Hand out fences until the journal wants its next reservation.
    while (!journal.write_wanted()) {
      const FenceBlock block = journal.take(1);
      ASSERT_EQ(block.count, 1u);
      ASSERT_GT(block.first, max_handed);
      max_handed = block.first;
    }
    const auto write = journal.begin_write();
    ASSERT_TRUE(write.has_value());
    ASSERT_EQ(write->size, kJournalRecordBytes);
    for (std::size_t prefix = 0; prefix <= write->size; ++prefix) {
      for (const bool garbage_tail : {false, true}) {
        MemoryFile torn = file;
        torn.apply(*write, prefix);
        if (garbage_tail) {
          for (std::size_t i = prefix; i < write->size; ++i) {
            torn.bytes[write->offset + i] = static_cast<std::uint8_t>(0xa5 ^ i);
          }
        }
        const JournalRecovery recovery = recover_journal(torn.bytes);
        ASSERT_EQ(recovery.outcome, JournalRecovery::Outcome::kRecovered)
            << "round " << round << " prefix " << prefix;
        ASSERT_GE(recovery.record.ceiling, max_handed);
        // A restart with the wall clock far behind still starts above every fence handed out.
        FenceJournal restarted(config, recovery, 1);
        MemoryFile copy = torn;
        sync(restarted, copy);
        ASSERT_GT(restarted.take(1).first, max_handed);
        ++tears;
      }
    }
    file.apply(*write);
    journal.end_write(write->seq, true);
  }
  EXPECT_EQ(tears, 6 * 2 * static_cast<int>(kJournalRecordBytes + 1));
}

// The creating write covers the whole file; torn, it leaves a file recovery refuses (or an
// empty one), which is safe: nothing was handed out before it was durable.
TEST(FenceRecovery, TornCreationIsEmptyOrRefusedAndNothingWasHandedOut) {
  FenceJournal journal(FenceJournalConfig{}, recover_journal({}), kWall);
  const auto write = journal.begin_write();
  ASSERT_TRUE(write.has_value());
  EXPECT_TRUE(write->creates_file);
  EXPECT_EQ(write->size, kJournalFileBytes);
  EXPECT_EQ(journal.take(1).count, 0u);
  for (std::size_t prefix = 0; prefix < write->size; ++prefix) {
    MemoryFile torn;
    torn.apply(*write, prefix);
    const auto outcome = recover_journal(torn.bytes).outcome;
    EXPECT_EQ(outcome,
              prefix == 0 ? JournalRecovery::Outcome::kFresh : JournalRecovery::Outcome::kRefused);
  }
}

// ---- the reservation state machine -------------------------------------------------------------

TEST(FenceJournalMachine, NothingIsHandedOutBeforeTheFirstReservationIsDurable) {
  FenceJournal journal(FenceJournalConfig{}, recover_journal({}), kWall);
  EXPECT_TRUE(journal.write_wanted());
  EXPECT_EQ(journal.take(10).count, 0u);
  const auto write = journal.begin_write();
  ASSERT_TRUE(write.has_value());
  EXPECT_EQ(write->seq, 1u);
  EXPECT_EQ(write->ceiling, kWall + FenceJournalConfig{}.range);
  EXPECT_EQ(journal.take(10).count, 0u);  // in flight is not durable
  EXPECT_FALSE(journal.begin_write().has_value());
  journal.end_write(write->seq, true);
  EXPECT_EQ(journal.take(10), (FenceBlock{kWall + 1, 10}));
  EXPECT_EQ(journal.take(5), (FenceBlock{kWall + 11, 5}));
}

TEST(FenceJournalMachine, StartsAboveThePersistedCeilingOrTheWallClockWhicheverIsHigher) {
  MemoryFile file;
  file.bytes = file_of(JournalRecord{9, kWall + 500}, JournalRecord{8, kWall});
  {
    FenceJournal journal(FenceJournalConfig{}, recover_journal(file.bytes), kWall - 3600);
    sync(journal, file);
    EXPECT_EQ(journal.take(1).first, kWall + 501);  // the wall clock went back an hour
  }
  {
    FenceJournal journal(FenceJournalConfig{}, recover_journal(file.bytes), kWall + 10'000'000);
    sync(journal, file);
    EXPECT_EQ(journal.take(1).first, kWall + 10'000'001);
  }
}

TEST(FenceJournalMachine, ReservesTheNextRangeAtHalfAndWritesAlternateSlots) {
  StartedJournal started(100, 0);
  FenceJournal& journal = started.journal;
  MemoryFile& file = started.file;
  EXPECT_EQ(journal.durable_ceiling(), 100u);
  EXPECT_EQ(journal.take(50).count, 50u);  // 50 left: not yet under half
  EXPECT_FALSE(journal.write_wanted());
  EXPECT_EQ(journal.take(1).count, 1u);  // 49 left
  ASSERT_TRUE(journal.write_wanted());
  auto write = journal.begin_write();
  ASSERT_TRUE(write.has_value());
  EXPECT_EQ(write->seq, 2u);
  EXPECT_EQ(write->ceiling, 151u);
  EXPECT_EQ(write->offset, kJournalRecordBytes);  // slot 0 holds seq 1
  EXPECT_FALSE(write->creates_file);
  EXPECT_EQ(journal.take(100).count, 49u);  // the rest of the durable range meanwhile
  EXPECT_EQ(journal.take(1).count, 0u);
  file.apply(*write);
  journal.end_write(write->seq, true);
  EXPECT_EQ(journal.take(1), (FenceBlock{101, 1}));
  EXPECT_EQ(recover_journal(file.bytes).record, (JournalRecord{2, 151}));
  while (!journal.write_wanted()) journal.take(1);
  write = journal.begin_write();
  EXPECT_EQ(write->offset, 0u);  // back to slot 0
  EXPECT_EQ(write->seq, 3u);
}

TEST(FenceJournalMachine, AFailedWriteChangesNothingAndIsRetriedToTheSameSlot) {
  StartedJournal started(100, 0);
  FenceJournal& journal = started.journal;
  journal.take(60);
  auto write = journal.begin_write();
  ASSERT_TRUE(write.has_value());
  journal.end_write(write->seq, false);
  EXPECT_EQ(journal.writes_failed(), 1u);
  EXPECT_EQ(journal.durable_ceiling(), 100u);
  EXPECT_EQ(journal.take(100).count, 40u);
  EXPECT_EQ(journal.take(1).count, 0u);  // grants now fail until a write succeeds
  auto retry = journal.begin_write();
  ASSERT_TRUE(retry.has_value());
  EXPECT_EQ(retry->seq, write->seq);
  EXPECT_EQ(retry->offset, write->offset);
  EXPECT_EQ(retry->ceiling, 200u);
  journal.end_write(retry->seq, true);
  EXPECT_EQ(journal.take(1), (FenceBlock{101, 1}));
}

TEST(FenceJournalMachine, AFailedCreationIsRetriedAsACreation) {
  FenceJournal journal(FenceJournalConfig{}, recover_journal({}), kWall);
  auto write = journal.begin_write();
  journal.end_write(write->seq, false);
  auto retry = journal.begin_write();
  ASSERT_TRUE(retry.has_value());
  EXPECT_TRUE(retry->creates_file);
  EXPECT_EQ(retry->size, kJournalFileBytes);
}

TEST(FenceJournalMachine, NeverWrapsAtTheTopOfTheSpace) {
  MemoryFile file;
  file.bytes = file_of(JournalRecord{1, kU64Max - 10}, std::nullopt);
  FenceJournal journal(FenceJournalConfig{}, recover_journal(file.bytes), kWall);
  EXPECT_FALSE(journal.exhausted());
  auto write = journal.begin_write();
  EXPECT_EQ(write->ceiling, kU64Max);  // saturates
  journal.end_write(write->seq, true);
  EXPECT_EQ(journal.take(100), (FenceBlock{kU64Max - 9, 10}));
  EXPECT_EQ(journal.take(1).count, 0u);
  EXPECT_FALSE(journal.write_wanted());  // nothing above UINT64_MAX to reserve
  EXPECT_EQ(journal.last_handed_out(), kU64Max);
}

TEST(FenceJournalMachine, AJournalAtTheTopIsExhaustedAtStart) {
  const Bytes file = file_of(JournalRecord{4, kU64Max}, std::nullopt);
  FenceJournal journal(FenceJournalConfig{}, recover_journal(file), kWall);
  EXPECT_TRUE(journal.exhausted());
  EXPECT_EQ(journal.take(1).count, 0u);
  EXPECT_FALSE(journal.write_wanted());
}

// Random interleavings of takes, writes, failures and crashes (torn or not): fences handed out
// strictly increase across every restart, and recovery never refuses a file the journal wrote.
RC_GTEST_PROP(FenceJournalMachine, FencesIncreaseAcrossCrashesAndTornWrites, ()) {
  FenceJournalConfig config;
  config.range = *rc::gen::inRange<std::uint64_t>(2, 64);
  std::uint64_t wall = *rc::gen::inRange<std::uint64_t>(0, 1000);
  MemoryFile file;
  auto journal = std::make_unique<FenceJournal>(config, recover_journal(file.bytes), wall);
  std::uint64_t max_handed = 0;
  bool handed_any = false;
  const int steps = *rc::gen::inRange(1, 300);
  for (int step = 0; step < steps; ++step) {
    switch (*rc::gen::inRange(0, 5)) {
      case 0:
      case 1: {
        const FenceBlock block = journal->take(*rc::gen::inRange<std::uint64_t>(1, 20));
        if (block.count > 0) {
          RC_ASSERT(!handed_any || block.first > max_handed);
          max_handed = block.first + block.count - 1;
          handed_any = true;
        }
        break;
      }
      case 2: {
        if (auto write = journal->begin_write()) {
          const bool ok = *rc::gen::inRange(0, 8) != 0;
          // A failed write may have left part of itself behind.
          file.apply(*write, ok ? SIZE_MAX : *rc::gen::inRange<std::size_t>(0, write->size));
          journal->end_write(write->seq, ok);
        }
        break;
      }
      case 3: {  // crash, possibly in the middle of a write, then restart with a wall step
        if (auto write = journal->begin_write()) {
          file.apply(*write, *rc::gen::inRange<std::size_t>(0, write->size + 1));
        }
        const JournalRecovery recovery = recover_journal(file.bytes);
        if (recovery.outcome == JournalRecovery::Outcome::kRefused) {
          // Only a torn creation may be refused, and then nothing was ever handed out.
          RC_ASSERT(!handed_any);
          file.bytes.clear();
        }
        wall = *rc::gen::inRange<std::uint64_t>(0, 2000);
        journal = std::make_unique<FenceJournal>(config, recover_journal(file.bytes), wall);
        break;
      }
      default:
        break;
    }
  }
}

// ---- engines drawing from a source -------------------------------------------------------------

TEST(FenceEngine, EnginesSharingASourceNeverRepeatAndEachIncreases) {
  StartedJournal started(1000, 0);
  FenceJournal& journal = started.journal;
  SplitMix64 salts(1);
  EngineConfig engine_config;
  engine_config.fence_block = 3;
  Engine a(engine_config, salts, nullptr, &journal);
  Engine b(engine_config, salts, nullptr, &journal);
  std::vector<Delivery> out;
  std::vector<std::uint64_t> fences_a, fences_b;
  const Instant now = Instant::from_ns(0);
  for (int i = 0; i < 10; ++i) {
    for (auto [engine, fences] : {std::pair{&a, &fences_a}, std::pair{&b, &fences_b}}) {
      const Reply reply = engine->handle(now, SessionId{1}, test::lock_request("k", 0, 10), out);
      ASSERT_EQ(reply.status, Status::kOk);
      fences->push_back(reply.token->fence.value);
      ASSERT_EQ(
          engine->handle(now, SessionId{1}, test::release_request("k", reply.token), out).status,
          Status::kOk);
    }
  }
  EXPECT_TRUE(std::is_sorted(fences_a.begin(), fences_a.end()));
  EXPECT_TRUE(std::is_sorted(fences_b.begin(), fences_b.end()));
  std::vector<std::uint64_t> all = fences_a;
  all.insert(all.end(), fences_b.begin(), fences_b.end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end());
  EXPECT_EQ(fences_a.front(), 1u);
  EXPECT_EQ(fences_b.front(), 4u);  // the second block of 3
}

TEST(FenceEngine, NoDurableFenceFailsTheGrantAndAnswersTheWaiter) {
  FenceJournalConfig config;
  config.range = 4;
  FenceJournal journal(config, recover_journal({}), 0);
  SplitMix64 salts(1);
  EngineConfig engine_config;
  engine_config.fence_block = 1;
  Engine engine(engine_config, salts, nullptr, &journal);
  std::vector<Delivery> out;
  const Instant now = Instant::from_ns(0);
  Request lock = test::lock_request("k", 0, 10);
  // Nothing durable yet: the grant fails with error and leaves no resource behind.
  EXPECT_EQ(engine.handle(now, SessionId{1}, lock, out).status, Status::kError);
  EXPECT_EQ(engine.resources_count(), 0u);
  EXPECT_EQ(engine.counters().fence_exhausted, 1u);
  MemoryFile file;
  sync(journal, file);  // fences 1..4 durable
  const Reply first = engine.handle(now, SessionId{1}, lock, out);
  ASSERT_EQ(first.status, Status::kOk);
  lock.timeout_s = 10;
  EXPECT_EQ(engine.handle(now, SessionId{2}, lock, out).status, Status::kParked);
  journal.take(3);  // another engine drains the durable range
  EXPECT_EQ(engine.handle(now, SessionId{1}, test::release_request("k", first.token), out).status,
            Status::kOk);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].session, SessionId{2});
  EXPECT_EQ(out[0].reply.status, Status::kError);  // answered, not left waiting forever
}

}  // namespace
}  // namespace turnstile::core
