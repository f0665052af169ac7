// Fences handed to engines in blocks, and the journal that makes them outlive the process.
//
// An Engine mints fences one by one from a block it takes from a FenceSource. With several shards
// every engine takes its blocks from one source, so per key (a key lives on one shard) fences
// increase, and across the whole process every block is above every earlier one.
//
// FenceJournal is the source behind `--fence-state-file`. It is a pure state machine: it decides
// which fences may be handed out (only those at or below a ceiling that is durable on disk), when
// to reserve the next range (ahead of need, so that a grant does not wait on disk in the common
// case), and which bytes to write where; the driver (net/ or the simulator) does the writing and
// reports back. The file format and the recovery rules are documented byte by byte in
// docs/fence-journal.md:
//
//   file   = slot 0 (32 bytes) | slot 1 (32 bytes)           64 bytes; an empty file is new
//   record = magic "tsfence1" (8) | seq u64 BE (8) | ceiling u64 BE (8) | XXH3-64 of bytes 0..23
//            as u64 BE (8)
//
// (the two-slot layout of core/slot_record.h, with one value: the ceiling)
//
// Each write goes to the slot that does not hold the newest durable record, then is synced;
// recovery takes the valid record with the highest seq. A record with ceiling C promises that no
// fence above C was ever handed out, so a restart starts above max(C, wall clock).
//
// Thread affinity: FenceJournal is single-threaded; the daemon guards it with a mutex (it is
// touched once per block of fences, not per grant).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace turnstile::core {

// Fences first .. first + count - 1; empty when count is 0. Never wraps past UINT64_MAX.
struct FenceBlock {
  std::uint64_t first = 0;
  std::uint64_t count = 0;
  bool operator==(const FenceBlock&) const = default;
};

// Where engines get their fences. The daemon backs it with a locked FenceJournal.
class FenceSource {
 public:
  virtual ~FenceSource() = default;
  // Up to `want` (>= 1) fences, every one above every fence this source handed out before; an
  // empty block when none can be handed out now (not yet durable, or the space is used up).
  virtual FenceBlock take(std::uint64_t want) = 0;
};

inline constexpr std::size_t kJournalRecordBytes = 32;
inline constexpr std::size_t kJournalFileBytes = 2 * kJournalRecordBytes;
inline constexpr std::array<char, 8> kJournalMagic = {'t', 's', 'f', 'e', 'n', 'c', 'e', '1'};

struct JournalRecord {
  std::uint64_t seq = 0;  // >= 1; the newest record has the highest
  std::uint64_t ceiling = 0;
  bool operator==(const JournalRecord&) const = default;
};

using JournalRecordBytes = std::array<std::uint8_t, kJournalRecordBytes>;

JournalRecordBytes encode_journal_record(const JournalRecord& record);
// nullopt unless the magic and checksum match and seq >= 1: a torn or corrupt slot.
std::optional<JournalRecord> decode_journal_record(std::span<const std::uint8_t> slot);

// What the bytes of a fence state file say.
struct JournalRecovery {
  enum class Outcome { kFresh, kRecovered, kRefused };
  Outcome outcome = Outcome::kFresh;
  JournalRecord record;  // kRecovered: the newest valid record
  int slot = -1;         // kRecovered: the slot that holds it
  std::string problem;   // kRefused: what is wrong, for a message that also names the file
};

// An empty file is fresh; 64 bytes with at least one valid slot are recovered; anything else is
// refused (fail closed: a fence promise we cannot read is not one we may forget).
JournalRecovery recover_journal(std::span<const std::uint8_t> file);

// One write the driver must make durable: `size` bytes of `bytes` at `offset`, then sync. When
// `creates_file` is set the file was empty: the driver also syncs the parent directory.
struct JournalWrite {
  std::uint64_t seq = 0;
  std::uint64_t ceiling = 0;
  std::uint64_t offset = 0;
  std::size_t size = 0;
  std::array<std::uint8_t, kJournalFileBytes> bytes{};
  bool creates_file = false;
};

struct FenceJournalConfig {
  // How far ahead of the fences handed out a reservation reaches. A restart skips at most this
  // many fences (plus one half), which is nothing in a 64-bit space.
  std::uint64_t range = std::uint64_t{1} << 22;
};

class FenceJournal final : public FenceSource {
 public:
  // Starts from what recovery found (fresh or recovered; never refused) and the wall clock in
  // nanoseconds. The counter starts at max(persisted ceiling, wall_ns); nothing is handed out
  // until the first reservation (see begin_write) is durable.
  FenceJournal(const FenceJournalConfig& config, const JournalRecovery& recovery,
               std::uint64_t wall_ns);

  // True when no fence is left at all (the counter starts at UINT64_MAX): refuse to start.
  bool exhausted() const;

  FenceBlock take(std::uint64_t want) override;

  // The write to make now, if one is wanted (the durable headroom is under half a range, or
  // nothing is durable yet) and none is in flight. It is in flight until end_write.
  std::optional<JournalWrite> begin_write();
  // The write became durable (ok) or failed; after a failure the slot it aimed at may be torn,
  // so the next write goes to the same slot, and the durable ceiling is unchanged.
  void end_write(std::uint64_t seq, bool ok);

  // Whether begin_write would return a write.
  bool write_wanted() const;
  bool write_in_flight() const { return in_flight_.has_value(); }
  std::uint64_t durable_ceiling() const { return durable_; }
  std::uint64_t last_handed_out() const { return handed_; }
  std::uint64_t writes_failed() const { return writes_failed_; }

 private:
  FenceJournalConfig config_;
  std::uint64_t handed_;   // every fence handed out is <= handed_ (it starts at the floor)
  std::uint64_t durable_;  // fences <= durable_ may be handed out
  std::uint64_t seq_;      // the newest durable record's seq (0: none)
  int durable_slot_;       // the slot holding it (-1: the file is still empty)
  std::optional<JournalWrite> in_flight_;
  std::uint64_t writes_failed_ = 0;
};

}  // namespace turnstile::core
