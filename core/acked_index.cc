#include "core/acked_index.h"

#include "core/assert.h"

namespace turnstile::core {

std::optional<std::string> forgotten_entries(LogPosition last, LogPosition acknowledged) {
  if (last.index >= acknowledged.index) return std::nullopt;
  return "its log ends at index " + std::to_string(last.index) + " (term " +
         std::to_string(last.term) + "), but it acknowledged entries up to index " +
         std::to_string(acknowledged.index) + " (term " + std::to_string(acknowledged.term) +
         ") as stored: " + std::to_string(acknowledged.index - last.index) +
         " acknowledged entries are gone";
}

AckedIndex::AckedIndex(const SlotRecovery& recovery) {
  TS_ASSERT(recovery.outcome != SlotRecovery::Outcome::kRefused);
  if (recovery.outcome == SlotRecovery::Outcome::kRecovered) {
    durable_ = LogPosition{recovery.record.values[0], recovery.record.values[1]};
    seq_ = recovery.record.seq;
    durable_slot_ = recovery.slot;
  }
  wanted_ = durable_;
}

std::uint64_t AckedIndex::want(LogPosition position) {
  wanted_ = position;
  return ++tickets_;
}

std::optional<SlotWrite> AckedIndex::begin_write() {
  if (in_flight_ || durable_ticket_ == tickets_) return std::nullopt;
  TS_ASSERT(seq_ < UINT64_MAX);
  const SlotRecord record{seq_ + 1, {wanted_.index, wanted_.term}};
  in_flight_ = InFlight{plan_slot_write(kAckedFormat, durable_slot_, record), tickets_};
  return in_flight_->write;
}

void AckedIndex::end_write(bool ok) {
  TS_ASSERT(in_flight_.has_value());
  if (ok) {
    const SlotWrite& write = in_flight_->write;
    seq_ = write.record.seq;
    durable_ = LogPosition{write.record.values[0], write.record.values[1]};
    durable_slot_ = written_slot(kAckedFormat, write);
    durable_ticket_ = in_flight_->ticket;
  } else {
    ++writes_failed_;
  }
  in_flight_.reset();
}

}  // namespace turnstile::core
