// The acknowledged-index record (core/acked_index.h) on the two-slot layout (core/slot_record.h):
// what it writes, what recovery makes of every torn or damaged file, and the start rule.
#include "core/acked_index.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/slot_record.h"

namespace turnstile::core {
namespace {

using File = std::vector<std::uint8_t>;

// Applies a write to a file's bytes, as the driver's pwrite would.
void apply(File* file, const SlotWrite& write, std::size_t bytes_written) {
  if (file->size() < write.offset + write.size) file->resize(write.offset + write.size, 0);
  for (std::size_t i = 0; i < bytes_written; ++i) (*file)[write.offset + i] = write.bytes[i];
}

// Makes every wanted position durable, writing into `file`.
void write_through(AckedIndex* index, File* file) {
  while (std::optional<SlotWrite> write = index->begin_write()) {
    apply(file, *write, write->size);
    index->end_write(true);
  }
}

TEST(AckedIndex, AFreshIndexWritesTheWholeFileFirstThenOneSlotAtATime) {
  AckedIndex index{SlotRecovery{}};
  EXPECT_EQ(index.durable(), (LogPosition{0, 0}));
  EXPECT_FALSE(index.begin_write().has_value());  // nothing wanted

  const std::uint64_t ticket = index.want({5, 1});
  EXPECT_FALSE(index.is_durable(ticket));
  std::optional<SlotWrite> first = index.begin_write();
  ASSERT_TRUE(first.has_value());
  EXPECT_TRUE(first->creates_file);
  EXPECT_EQ(first->offset, 0U);
  EXPECT_EQ(first->size, kAckedFormat.file_bytes());
  EXPECT_EQ(kAckedFormat.slot_bytes(), 40U);
  index.end_write(true);
  EXPECT_TRUE(index.is_durable(ticket));
  EXPECT_EQ(index.durable(), (LogPosition{5, 1}));

  index.want({9, 2});
  std::optional<SlotWrite> second = index.begin_write();
  ASSERT_TRUE(second.has_value());
  EXPECT_FALSE(second->creates_file);
  EXPECT_EQ(second->size, kAckedFormat.slot_bytes());
  // Never over the slot that holds the durable record.
  EXPECT_NE(written_slot(kAckedFormat, *second), written_slot(kAckedFormat, *first));
}

TEST(AckedIndex, PositionsWantedDuringAWriteShareTheNextOne) {
  AckedIndex index{SlotRecovery{}};
  const std::uint64_t a = index.want({1, 1});
  ASSERT_TRUE(index.begin_write().has_value());
  const std::uint64_t b = index.want({2, 1});
  const std::uint64_t c = index.want({3, 1});
  EXPECT_FALSE(index.begin_write().has_value());  // one write at a time
  index.end_write(true);
  EXPECT_TRUE(index.is_durable(a));
  EXPECT_FALSE(index.is_durable(b));
  std::optional<SlotWrite> next = index.begin_write();
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->record.values[0], 3U);  // the newest wanted, for both
  index.end_write(true);
  EXPECT_TRUE(index.is_durable(b));
  EXPECT_TRUE(index.is_durable(c));
  EXPECT_EQ(index.durable(), (LogPosition{3, 1}));
  EXPECT_FALSE(index.begin_write().has_value());
}

TEST(AckedIndex, AFailedWriteChangesNothingDurableAndIsMadeAgainToTheSameSlot) {
  File file;
  AckedIndex index{SlotRecovery{}};
  index.want({4, 1});
  write_through(&index, &file);
  const std::uint64_t ticket = index.want({8, 1});
  std::optional<SlotWrite> failed = index.begin_write();
  ASSERT_TRUE(failed.has_value());
  index.end_write(false);
  EXPECT_EQ(index.writes_failed(), 1U);
  EXPECT_FALSE(index.is_durable(ticket));
  EXPECT_EQ(index.durable(), (LogPosition{4, 1}));
  std::optional<SlotWrite> again = index.begin_write();
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->offset, failed->offset);
  apply(&file, *again, again->size);
  index.end_write(true);
  EXPECT_TRUE(index.is_durable(ticket));
}

TEST(AckedIndex, RecoveryFindsTheNewestDurableRecordAndGoesOnFromIt) {
  File file;
  AckedIndex index{SlotRecovery{}};
  for (std::uint64_t i = 1; i <= 5; ++i) {
    index.want({i * 10, i});
    write_through(&index, &file);
  }
  const SlotRecovery recovered = recover_slots(kAckedFormat, file);
  ASSERT_EQ(recovered.outcome, SlotRecovery::Outcome::kRecovered);
  AckedIndex again{recovered};
  EXPECT_EQ(again.durable(), (LogPosition{50, 5}));
  again.want({60, 6});
  write_through(&again, &file);
  EXPECT_EQ(AckedIndex(recover_slots(kAckedFormat, file)).durable(), (LogPosition{60, 6}));
}

TEST(AckedIndex, AWriteTornAtAnyByteLeavesThePreviousRecord) {
  File durable;
  AckedIndex index{SlotRecovery{}};
  index.want({10, 1});
  write_through(&index, &durable);
  index.want({20, 1});
  write_through(&index, &durable);
  index.want({30, 2});
  std::optional<SlotWrite> write = index.begin_write();
  ASSERT_TRUE(write.has_value());
  for (std::size_t cut = 0; cut < write->size; ++cut) {
    File torn = durable;
    apply(&torn, *write, cut);
    const SlotRecovery recovered = recover_slots(kAckedFormat, torn);
    ASSERT_EQ(recovered.outcome, SlotRecovery::Outcome::kRecovered) << "cut at " << cut;
    EXPECT_EQ(AckedIndex(recovered).durable(), (LogPosition{20, 1})) << "cut at " << cut;
  }
}

TEST(AckedIndex, AFileOfTheWrongSizeOrWithNoValidSlotIsRefused) {
  File file;
  AckedIndex index{SlotRecovery{}};
  index.want({10, 1});
  write_through(&index, &file);
  index.want({20, 1});
  write_through(&index, &file);

  File cut(file.begin(), file.end() - 1);
  EXPECT_EQ(recover_slots(kAckedFormat, cut).outcome, SlotRecovery::Outcome::kRefused);
  // A flipped byte in either slot leaves the other; in both, nothing is left: refused, not fresh.
  for (std::size_t at = 0; at < kAckedFormat.slot_bytes(); ++at) {
    File one = file;
    one[at] ^= 0x01;
    EXPECT_EQ(recover_slots(kAckedFormat, one).outcome, SlotRecovery::Outcome::kRecovered);
    File both = one;
    both[at + kAckedFormat.slot_bytes()] ^= 0x01;
    const SlotRecovery refused = recover_slots(kAckedFormat, both);
    EXPECT_EQ(refused.outcome, SlotRecovery::Outcome::kRefused) << "byte " << at;
    EXPECT_FALSE(refused.problem.empty());
  }
  // Another kind of record file is not this one.
  const SlotFormat other{{'t', 's', 'f', 'e', 'n', 'c', 'e', '9'}, 2, "another file"};
  EXPECT_EQ(recover_slots(other, file).outcome, SlotRecovery::Outcome::kRefused);
}

TEST(ForgottenEntries, ALogThatEndsBelowTheRecordedIndexLostAcknowledgedEntries) {
  EXPECT_FALSE(forgotten_entries({10, 2}, {10, 2}).has_value());
  EXPECT_FALSE(forgotten_entries({12, 3}, {10, 2}).has_value());
  EXPECT_FALSE(forgotten_entries({0, 0}, {0, 0}).has_value());
  const std::optional<std::string> why = forgotten_entries({7, 2}, {10, 2});
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("ends at index 7"), std::string::npos) << *why;
  EXPECT_NE(why->find("up to index 10"), std::string::npos) << *why;
  EXPECT_NE(why->find("3 acknowledged entries are gone"), std::string::npos) << *why;
  // A later term does not excuse it: a truncation lowers the record before it cuts the log.
  EXPECT_TRUE(forgotten_entries({7, 9}, {10, 2}).has_value());
  EXPECT_TRUE(forgotten_entries({0, 0}, {1, 1}).has_value());
}

}  // namespace
}  // namespace turnstile::core
