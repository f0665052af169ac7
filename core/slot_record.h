// Two-slot record files: a small promise kept on disk so that a crash in the middle of a write
// never loses the previous one. The fence journal (core/fence.h) and the acknowledged-index
// record of a cluster node (core/acked_index.h) share this layout; each has its own magic and
// its own number of values.
//
//   file   = slot 0 | slot 1                                  an empty file is new
//   slot   = magic (8) | seq u64 BE (8) | value u64 BE (8) x n | XXH3-64 of the bytes before it,
//            as u64 BE (8)
//
// Each write goes to the slot that does not hold the newest durable record, then is synced;
// recovery takes the valid record with the highest seq. A new file is written whole (the second
// slot zero, so invalid), so that a durable file is never of a size recovery refuses.
//
// Pure and single-threaded: the driver does the reading, writing and syncing.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace turnstile::core {

inline constexpr std::size_t kSlotValuesMax = 2;
inline constexpr std::size_t kSlotBytesMax = 24 + 8 * kSlotValuesMax;

// What tells one kind of record file from another.
struct SlotFormat {
  std::array<char, 8> magic{};
  std::size_t values = 1;  // 1 .. kSlotValuesMax
  const char* what = "";   // for messages: "a fence state file"

  std::size_t slot_bytes() const { return 24 + 8 * values; }
  std::size_t file_bytes() const { return 2 * slot_bytes(); }
};

struct SlotRecord {
  std::uint64_t seq = 0;  // >= 1; the newest record has the highest
  std::array<std::uint64_t, kSlotValuesMax> values{};
  bool operator==(const SlotRecord&) const = default;
};

struct SlotBytes {
  std::array<std::uint8_t, kSlotBytesMax> bytes{};
  std::size_t size = 0;
  std::span<const std::uint8_t> span() const { return {bytes.data(), size}; }
};

SlotBytes encode_slot(const SlotFormat& format, const SlotRecord& record);
// nullopt unless the size, the magic and the checksum match and seq >= 1: a torn or corrupt slot.
std::optional<SlotRecord> decode_slot(const SlotFormat& format, std::span<const std::uint8_t> slot);

// What the bytes of a record file say.
struct SlotRecovery {
  enum class Outcome { kFresh, kRecovered, kRefused };
  Outcome outcome = Outcome::kFresh;
  SlotRecord record;    // kRecovered: the newest valid record
  int slot = -1;        // kRecovered: the slot that holds it
  std::string problem;  // kRefused: what is wrong, for a message that also names the file
};

// An empty file is fresh; a file of two slots with at least one valid is recovered; anything else
// is refused (fail closed: a promise we cannot read is not one we may forget). Of two valid slots
// with the same seq, the one with the higher first value wins.
SlotRecovery recover_slots(const SlotFormat& format, std::span<const std::uint8_t> file);

// One write the driver must make durable: `size` bytes of `bytes` at `offset`, then sync. When
// `creates_file` is set the file was empty: the driver also syncs the parent directory.
struct SlotWrite {
  SlotRecord record;
  std::uint64_t offset = 0;
  std::size_t size = 0;
  std::array<std::uint8_t, 2 * kSlotBytesMax> bytes{};
  bool creates_file = false;
};

// The write of `record` into a file whose newest durable record is in `durable_slot` (-1: the
// file is still empty).
SlotWrite plan_slot_write(const SlotFormat& format, int durable_slot, const SlotRecord& record);

// The slot a durable write went to.
inline int written_slot(const SlotFormat& format, const SlotWrite& write) {
  return static_cast<int>(write.offset / format.slot_bytes());
}

}  // namespace turnstile::core
