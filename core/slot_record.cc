#include "core/slot_record.h"

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

}  // namespace

SlotBytes encode_slot(const SlotFormat& format, const SlotRecord& record) {
  TS_ASSERT(format.values >= 1 && format.values <= kSlotValuesMax);
  SlotBytes out;
  out.size = format.slot_bytes();
  std::uint8_t* bytes = out.bytes.data();
  std::memcpy(bytes, format.magic.data(), format.magic.size());
  put_u64_be(bytes + 8, record.seq);
  for (std::size_t i = 0; i < format.values; ++i) put_u64_be(bytes + 16 + 8 * i, record.values[i]);
  const std::size_t body = out.size - 8;
  put_u64_be(bytes + body, XXH3_64bits(bytes, body));
  return out;
}

std::optional<SlotRecord> decode_slot(const SlotFormat& format,
                                      std::span<const std::uint8_t> slot) {
  if (slot.size() != format.slot_bytes()) return std::nullopt;
  if (std::memcmp(slot.data(), format.magic.data(), format.magic.size()) != 0) {
    return std::nullopt;
  }
  const std::size_t body = slot.size() - 8;
  if (get_u64_be(slot.data() + body) != XXH3_64bits(slot.data(), body)) return std::nullopt;
  SlotRecord record;
  record.seq = get_u64_be(slot.data() + 8);
  for (std::size_t i = 0; i < format.values; ++i) {
    record.values[i] = get_u64_be(slot.data() + 16 + 8 * i);
  }
  if (record.seq == 0) return std::nullopt;
  return record;
}

SlotRecovery recover_slots(const SlotFormat& format, std::span<const std::uint8_t> file) {
  SlotRecovery recovery;
  if (file.empty()) return recovery;  // kFresh
  const std::size_t slot_bytes = format.slot_bytes();
  if (file.size() != format.file_bytes()) {
    recovery.outcome = SlotRecovery::Outcome::kRefused;
    recovery.problem = "is " + std::to_string(file.size()) + " bytes long, but " + format.what +
                       " is empty or exactly " + std::to_string(format.file_bytes()) + " bytes";
    return recovery;
  }
  for (int slot = 0; slot < 2; ++slot) {
    const auto record =
        decode_slot(format, file.subspan(static_cast<std::size_t>(slot) * slot_bytes, slot_bytes));
    if (!record) continue;
    // The newest record wins; should two ever share a seq, the higher first value is the safe one
    // (a fence ceiling, an acknowledged index).
    const bool newer =
        recovery.slot < 0 || record->seq > recovery.record.seq ||
        (record->seq == recovery.record.seq && record->values[0] > recovery.record.values[0]);
    if (newer) {
      recovery.outcome = SlotRecovery::Outcome::kRecovered;
      recovery.record = *record;
      recovery.slot = slot;
    }
  }
  if (recovery.slot < 0) {
    recovery.outcome = SlotRecovery::Outcome::kRefused;
    recovery.problem = "holds no valid record (both slots are torn or corrupt)";
  }
  return recovery;
}

SlotWrite plan_slot_write(const SlotFormat& format, int durable_slot, const SlotRecord& record) {
  TS_ASSERT(durable_slot >= -1 && durable_slot <= 1);
  SlotWrite write;
  write.record = record;
  const SlotBytes encoded = encode_slot(format, record);
  std::copy(encoded.bytes.begin(), encoded.bytes.begin() + static_cast<long>(encoded.size),
            write.bytes.begin());
  if (durable_slot < 0) {
    // The file is empty: write both slots at once (the second stays invalid) so that it is never
    // a size recovery refuses once the write is durable.
    write.offset = 0;
    write.size = format.file_bytes();
    write.creates_file = true;
  } else {
    write.offset = static_cast<std::uint64_t>(1 - durable_slot) * format.slot_bytes();
    write.size = format.slot_bytes();
  }
  return write;
}

}  // namespace turnstile::core
