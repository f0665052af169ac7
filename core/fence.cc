#include "core/fence.h"

#include <algorithm>
#include <cstring>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/assert.h"

namespace turnstile::core {

namespace {

void put_u64_be(std::uint8_t* out, std::uint64_t value) {
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<std::uint8_t>(value & 0xff);
    value >>= 8;
  }
}

std::uint64_t get_u64_be(const std::uint8_t* in) {
  std::uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value = (value << 8) | in[i];
  return value;
}

std::uint64_t checksum(const std::uint8_t* record) { return XXH3_64bits(record, 24); }

std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) {
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

}  // namespace

JournalRecordBytes encode_journal_record(const JournalRecord& record) {
  JournalRecordBytes bytes{};
  std::memcpy(bytes.data(), kJournalMagic.data(), kJournalMagic.size());
  put_u64_be(bytes.data() + 8, record.seq);
  put_u64_be(bytes.data() + 16, record.ceiling);
  put_u64_be(bytes.data() + 24, checksum(bytes.data()));
  return bytes;
}

std::optional<JournalRecord> decode_journal_record(std::span<const std::uint8_t> slot) {
  if (slot.size() != kJournalRecordBytes) return std::nullopt;
  if (std::memcmp(slot.data(), kJournalMagic.data(), kJournalMagic.size()) != 0) {
    return std::nullopt;
  }
  if (get_u64_be(slot.data() + 24) != checksum(slot.data())) return std::nullopt;
  JournalRecord record{get_u64_be(slot.data() + 8), get_u64_be(slot.data() + 16)};
  if (record.seq == 0) return std::nullopt;
  return record;
}

JournalRecovery recover_journal(std::span<const std::uint8_t> file) {
  JournalRecovery recovery;
  if (file.empty()) return recovery;  // kFresh
  if (file.size() != kJournalFileBytes) {
    recovery.outcome = JournalRecovery::Outcome::kRefused;
    recovery.problem = "is " + std::to_string(file.size()) +
                       " bytes long, but a fence state file " + "is empty or exactly " +
                       std::to_string(kJournalFileBytes) + " bytes";
    return recovery;
  }
  for (int slot = 0; slot < 2; ++slot) {
    const auto record = decode_journal_record(
        file.subspan(static_cast<std::size_t>(slot) * kJournalRecordBytes, kJournalRecordBytes));
    if (!record) continue;
    // The newest record wins; should two ever share a seq, the higher ceiling is the safe one.
    const bool newer =
        recovery.slot < 0 || record->seq > recovery.record.seq ||
        (record->seq == recovery.record.seq && record->ceiling > recovery.record.ceiling);
    if (newer) {
      recovery.outcome = JournalRecovery::Outcome::kRecovered;
      recovery.record = *record;
      recovery.slot = slot;
    }
  }
  if (recovery.slot < 0) {
    recovery.outcome = JournalRecovery::Outcome::kRefused;
    recovery.problem = "holds no valid record (both slots are torn or corrupt)";
  }
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
  const JournalRecordBytes record = encode_journal_record({write.seq, write.ceiling});
  if (durable_slot_ < 0) {
    // The file is empty: write both slots at once (slot 1 stays invalid) so that it is never a
    // size recovery refuses once the write is durable.
    write.offset = 0;
    write.size = kJournalFileBytes;
    write.creates_file = true;
    std::copy(record.begin(), record.end(), write.bytes.begin());
  } else {
    write.offset = static_cast<std::uint64_t>(1 - durable_slot_) * kJournalRecordBytes;
    write.size = kJournalRecordBytes;
    std::copy(record.begin(), record.end(), write.bytes.begin());
  }
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
