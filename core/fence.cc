#include "core/fence.h"

#include <algorithm>
#include <cstring>

#include "core/assert.h"
#include "core/slot_record.h"

namespace turnstile::core {

namespace {

constexpr SlotFormat kFenceFormat{kJournalMagic, 1, "a fence state file"};

std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) {
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

}  // namespace

JournalRecordBytes encode_journal_record(const JournalRecord& record) {
  const SlotBytes slot = encode_slot(kFenceFormat, SlotRecord{record.seq, {record.ceiling, 0}});
  JournalRecordBytes bytes{};
  std::copy(slot.bytes.begin(), slot.bytes.begin() + kJournalRecordBytes, bytes.begin());
  return bytes;
}

std::optional<JournalRecord> decode_journal_record(std::span<const std::uint8_t> slot) {
  const std::optional<SlotRecord> record = decode_slot(kFenceFormat, slot);
  if (!record) return std::nullopt;
  return JournalRecord{record->seq, record->values[0]};
}

JournalRecovery recover_journal(std::span<const std::uint8_t> file) {
  const SlotRecovery slots = recover_slots(kFenceFormat, file);
  JournalRecovery recovery;
  switch (slots.outcome) {
    case SlotRecovery::Outcome::kFresh:
      recovery.outcome = JournalRecovery::Outcome::kFresh;
      break;
    case SlotRecovery::Outcome::kRecovered:
      recovery.outcome = JournalRecovery::Outcome::kRecovered;
      break;
    case SlotRecovery::Outcome::kRefused:
      recovery.outcome = JournalRecovery::Outcome::kRefused;
      break;
  }
  recovery.record = JournalRecord{slots.record.seq, slots.record.values[0]};
  recovery.slot = slots.slot;
  recovery.problem = slots.problem;
  return recovery;
}

FenceJournal::FenceJournal(const FenceJournalConfig& config, const JournalRecovery& recovery,
                           std::uint64_t wall_ns)
    : config_(config) {
  TS_ASSERT(config_.range >= 2);
  TS_ASSERT(recovery.outcome != JournalRecovery::Outcome::kRefused);
  const bool recovered = recovery.outcome == JournalRecovery::Outcome::kRecovered;
  const std::uint64_t persisted = recovered ? recovery.record.ceiling : 0;
  handed_ = std::max(persisted, wall_ns);
  durable_ = handed_;  // nothing may be handed out before the first reservation is durable
  seq_ = recovered ? recovery.record.seq : 0;
  durable_slot_ = recovered ? recovery.slot : -1;
}

bool FenceJournal::exhausted() const { return handed_ == UINT64_MAX; }

FenceBlock FenceJournal::take(std::uint64_t want) {
  TS_ASSERT(want >= 1);
  const std::uint64_t count = std::min(want, durable_ - handed_);
  if (count == 0) return FenceBlock{};
  const FenceBlock block{handed_ + 1, count};
  handed_ += count;
  return block;
}

bool FenceJournal::write_wanted() const {
  if (in_flight_ || durable_ == UINT64_MAX || seq_ == UINT64_MAX) return false;
  return seq_ == 0 || durable_ == handed_ || durable_ - handed_ < config_.range / 2;
}

std::optional<JournalWrite> FenceJournal::begin_write() {
  if (!write_wanted()) return std::nullopt;
  JournalWrite write;
  write.seq = seq_ + 1;
  write.ceiling = std::max(durable_, saturating_add(handed_, config_.range));
  const SlotWrite planned =
      plan_slot_write(kFenceFormat, durable_slot_, SlotRecord{write.seq, {write.ceiling, 0}});
  write.offset = planned.offset;
  write.size = planned.size;
  write.creates_file = planned.creates_file;
  std::copy(planned.bytes.begin(), planned.bytes.begin() + kJournalFileBytes, write.bytes.begin());
  in_flight_ = write;
  return write;
}

void FenceJournal::end_write(std::uint64_t seq, bool ok) {
  TS_ASSERT(in_flight_ && in_flight_->seq == seq);
  if (ok) {
    seq_ = in_flight_->seq;
    durable_ = in_flight_->ceiling;
    durable_slot_ = static_cast<int>(in_flight_->offset / kJournalRecordBytes);
  } else {
    ++writes_failed_;
  }
  in_flight_.reset();
}

}  // namespace turnstile::core
