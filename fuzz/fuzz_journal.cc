// Fuzzing of the fence journal (core/fence.h): its recovery on arbitrary bytes, and the journal
// itself driven through writes that succeed, fail or tear, crashes and restarts.
//
// Part 1, recovery: the whole input, and its first 64 bytes, are read as a fence state file.
// recover_journal must not crash; an empty file is fresh; a recovered file is 64 bytes, its record
// re-encodes to exactly the bytes of its slot, and the other slot holds no newer valid record; a
// refused file has a problem text and, when it is 64 bytes long, no valid slot. Every 32-byte
// slot that decodes re-encodes to its own bytes.
//
// Part 2, the journal: the input is also read as a scenario (fuzz/fuzz_input.h). 3 bytes choose
// the reservation range (2 to 2^16, or 2^22, or close to 2^64) and 8 more the first wall clock;
// then each step is an operation byte plus operands: take a block of 1..255 fences (or a huge
// want); start the write the journal wants; the write's sync succeeds; it fails (a prefix of it,
// or all of it, may reach the disk, the rest of its range old bytes or bytes from the input);
// the process crashes (the un-synced write is lost, torn at a byte offset from the input, or
// written whole) and restarts with a wall clock from the input (a step forward or back by up to
// about 4.9 hours, any 64-bit value, or a few short of the largest). Checks: every fence handed
// out, over every life, is above every fence handed out before and never wraps; every block lies
// at or below the ceiling of the newest valid record on the disk, and the journal's own durable
// ceiling; a write goes to the slot not holding the newest durable record (the whole file when it
// is new) with the next seq and a ceiling not below the durable one; recovery refuses only a file
// whose creation was torn before any write to it was synced (nothing was handed out from it;
// the harness then deletes it, as an operator would), and a recovered ceiling is never below a
// fence handed out. A tear whose bytes would complete a valid record never written (a checksum
// collision, which the fuzzer can steer into and a disk cannot) reaches nothing instead.
// TURNSTILE_FUZZ_TRACE=1 prints every step to stderr.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/fence.h"
#include "fuzz/fuzz_input.h"

namespace turnstile::fuzz {
namespace {

using core::FenceBlock;
using core::FenceJournal;
using core::JournalRecovery;
using core::JournalWrite;

constexpr const char* kHarness = "fuzz_journal";
constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
constexpr std::size_t kStepsMax = 2'000;

bool tracing() {
  static const bool enabled = [] {
    const char* wanted = std::getenv("TURNSTILE_FUZZ_TRACE");
    return wanted != nullptr && std::string(wanted) == "1";
  }();
  return enabled;
}

// The line is built only when tracing.
template <typename Line>
void trace(const Line& line) {
  if (tracing()) std::fprintf(stderr, "%s\n", std::string(line()).c_str());
}

void check(bool condition, const char* what) {
  if (!condition) fail(kHarness, what);
}
// The message is built only when the check fails.
template <typename Message>
void check(bool condition, const Message& what) {
  if (!condition) fail(kHarness, what());
}

// ---- part 1: recovery of arbitrary bytes -------------------------------------------------------

void check_slot(std::span<const std::uint8_t> slot) {
  const std::optional<core::JournalRecord> record = core::decode_journal_record(slot);
  if (!record) return;
  check(record->seq >= 1, "a slot decoded with seq 0");
  const core::JournalRecordBytes again = core::encode_journal_record(*record);
  check(std::equal(again.begin(), again.end(), slot.begin(), slot.end()),
        "a decoded slot does not re-encode to its bytes");
}

void check_recovery(std::span<const std::uint8_t> file) {
  const JournalRecovery recovery = core::recover_journal(file);
  if (file.size() == core::kJournalFileBytes) {
    check_slot(file.subspan(0, core::kJournalRecordBytes));
    check_slot(file.subspan(core::kJournalRecordBytes));
  }
  switch (recovery.outcome) {
    case JournalRecovery::Outcome::kFresh:
      check(file.empty(), "a non-empty file recovered as fresh");
      break;
    case JournalRecovery::Outcome::kRecovered: {
      check(file.size() == core::kJournalFileBytes, "a file of the wrong size recovered");
      check(recovery.slot == 0 || recovery.slot == 1, "recovered from no slot");
      check(recovery.record.seq >= 1, "recovered seq 0");
      const std::size_t at = static_cast<std::size_t>(recovery.slot) * core::kJournalRecordBytes;
      const core::JournalRecordBytes bytes = core::encode_journal_record(recovery.record);
      check(std::equal(bytes.begin(), bytes.end(), file.begin() + static_cast<std::ptrdiff_t>(at),
                       file.begin() + static_cast<std::ptrdiff_t>(at + core::kJournalRecordBytes)),
            "the recovered record does not re-encode to the bytes of its slot");
      const std::size_t other_at = core::kJournalRecordBytes - at;
      const std::optional<core::JournalRecord> other =
          core::decode_journal_record(file.subspan(other_at, core::kJournalRecordBytes));
      if (other) {
        check(other->seq < recovery.record.seq ||
                  (other->seq == recovery.record.seq && other->ceiling <= recovery.record.ceiling),
              "recovery did not take the newest record");
      }
      break;
    }
    case JournalRecovery::Outcome::kRefused:
      check(!recovery.problem.empty(), "a refusal without a problem text");
      check(!file.empty(), "an empty file refused");
      if (file.size() == core::kJournalFileBytes) {
        check(!core::decode_journal_record(file.subspan(0, core::kJournalRecordBytes)) &&
                  !core::decode_journal_record(file.subspan(core::kJournalRecordBytes)),
              "a file with a valid slot refused");
      }
      break;
  }
}

// ---- part 2: the journal through writes, failures, tears, crashes and restarts ----------------

class Scenario {
 public:
  explicit Scenario(FuzzInput& input) : input_(input) {}

  void run() {
    const std::uint8_t range_kind = input_.byte();
    const std::uint16_t range_low = static_cast<std::uint16_t>(input_.byte() << 8 | input_.byte());
    if (range_kind >= 0xf0) {
      config_.range = kMax - (range_kind & 0x0f);  // close to the whole space
    } else if (range_kind >= 0xc0) {
      config_.range = std::uint64_t{1} << 22;  // the daemon's default
    } else {
      config_.range = 2 + range_low;
    }
    wall_ = input_.u64();
    trace([&] {
      return "range " + std::to_string(config_.range) + " wall " + std::to_string(wall_);
    });
    start();
    for (std::size_t step = 0; step < kStepsMax && !input_.empty(); ++step) {
      const std::uint8_t op = input_.byte();
      switch (op % 8) {
        case 0:
        case 1:
        case 2:
          take(op);
          break;
        case 3:
          begin();
          break;
        case 4:
        case 5:
          synced();
          break;
        case 6:
          failed();
          break;
        case 7:
          crash();
          break;
      }
    }
  }

 private:
  // The ceiling of the newest valid record on the disk, if any.
  std::optional<std::uint64_t> disk_ceiling() const {
    const JournalRecovery recovery = core::recover_journal(disk_);
    if (recovery.outcome != JournalRecovery::Outcome::kRecovered) return std::nullopt;
    return recovery.record.ceiling;
  }

  void start() {
    JournalRecovery recovery = core::recover_journal(disk_);
    if (recovery.outcome == JournalRecovery::Outcome::kRefused) {
      check(synced_writes_ == 0 && !handed_any_,
            [&] { return "recovery refused a file that had synced writes: " + recovery.problem; });
      check(!recovery.problem.empty(), "a refusal without a problem text");
      trace([&] { return "start: refused (" + recovery.problem + "), file deleted"; });
      disk_.clear();
      recovery = core::recover_journal(disk_);
    }
    if (recovery.outcome == JournalRecovery::Outcome::kRecovered) {
      check(!handed_any_ || recovery.record.ceiling >= handed_max_, [&] {
        return "recovered ceiling " + std::to_string(recovery.record.ceiling) + " below fence " +
               std::to_string(handed_max_) + " handed out";
      });
    } else {
      check(synced_writes_ == 0, "a file with synced writes recovered as fresh");
    }
    acked_slot_ = recovery.outcome == JournalRecovery::Outcome::kRecovered ? recovery.slot : -1;
    acked_seq_ = recovery.outcome == JournalRecovery::Outcome::kRecovered ? recovery.record.seq : 0;
    journal_ = std::make_unique<FenceJournal>(config_, recovery, wall_);
    trace([&] {
      return "start: " +
             std::string(recovery.outcome == JournalRecovery::Outcome::kFresh ? "fresh"
                                                                              : "recovered") +
             " ceiling " + std::to_string(recovery.record.ceiling) + " handed " +
             std::to_string(journal_->last_handed_out()) +
             (journal_->exhausted() ? " exhausted" : "");
    });
    check(journal_->last_handed_out() >= wall_, "the counter starts below the wall clock");
    check(journal_->durable_ceiling() == journal_->last_handed_out(),
          "fences are durable before the first reservation");
    if (recovery.outcome == JournalRecovery::Outcome::kRecovered) {
      check(journal_->last_handed_out() >= recovery.record.ceiling,
            "the counter starts below the recovered ceiling");
    }
    if (journal_->exhausted()) {
      check(!journal_->write_wanted(), "an exhausted journal wants a write");
    }
    // Nothing may be handed out before a reservation is durable.
    check(journal_->take(1).count == 0, "a fence handed out before the first durable write");
  }

  void take(std::uint8_t op) {
    const std::uint64_t want = (op & 0x80) != 0 && (op & 0x40) != 0
                                   ? kMax - input_.below(4)
                                   : 1 + static_cast<std::uint64_t>(input_.below(255));
    const std::uint64_t durable = journal_->durable_ceiling();
    const FenceBlock block = journal_->take(want);
    trace([&] {
      return "take " + std::to_string(want) + ": " + std::to_string(block.first) + "+" +
             std::to_string(block.count);
    });
    if (block.count == 0) return;
    check(block.count <= want, "a block larger than wanted");
    check(block.first >= 1 && block.count - 1 <= kMax - block.first, "a block wraps");
    const std::uint64_t last = block.first + (block.count - 1);
    check(!handed_any_ || block.first > handed_max_, [&] {
      return "fence " + std::to_string(block.first) + " handed out after " +
             std::to_string(handed_max_);
    });
    check(last <= durable, "a block above the journal's durable ceiling");
    const std::optional<std::uint64_t> on_disk = disk_ceiling();
    check(on_disk && last <= *on_disk, "a block above the ceiling on the disk");
    check(journal_->last_handed_out() == last, "last_handed_out is not the block's last fence");
    handed_any_ = true;
    handed_max_ = last;
  }

  void begin() {
    const bool wanted = journal_->write_wanted();
    const std::optional<JournalWrite> write = journal_->begin_write();
    check(wanted == write.has_value(), "begin_write disagrees with write_wanted");
    if (!write) return;
    check(!dirty_, "a second write while one is in flight");
    check(!journal_->write_wanted(), "a write wanted while one is in flight");
    check(write->ceiling >= journal_->durable_ceiling(), "a reservation below the durable ceiling");
    check(write->ceiling > journal_->last_handed_out() || journal_->last_handed_out() == kMax,
          "a reservation that leaves no fence");
    check(write->seq == acked_seq_ + 1, "a write whose seq does not follow the durable one");
    check(write->creates_file == (acked_slot_ < 0), "creates_file while a record is durable");
    if (write->creates_file) {
      check(write->offset == 0 && write->size == core::kJournalFileBytes,
            "a creating write that is not the whole file");
    } else {
      check(write->size == core::kJournalRecordBytes &&
                (write->offset == 0 || write->offset == core::kJournalRecordBytes),
            "a write that is not one slot");
      check(write->offset != static_cast<std::uint64_t>(acked_slot_) * core::kJournalRecordBytes,
            "a write over the newest durable record");
    }
    const std::optional<core::JournalRecord> record =
        core::decode_journal_record(std::span(write->bytes).subspan(0, core::kJournalRecordBytes));
    check(record && record->seq == write->seq && record->ceiling == write->ceiling,
          "the write's bytes do not hold its record");
    trace([&] {
      return "begin seq " + std::to_string(write->seq) + " ceiling " +
             std::to_string(write->ceiling) + " offset " + std::to_string(write->offset) +
             (write->creates_file ? " creates" : "");
    });
    dirty_ = write;
  }

  void apply(const JournalWrite& write) {
    const std::size_t end = static_cast<std::size_t>(write.offset) + write.size;
    if (disk_.size() < end) disk_.resize(end, 0);
    std::copy(write.bytes.begin(), write.bytes.begin() + static_cast<std::ptrdiff_t>(write.size),
              disk_.begin() + static_cast<std::ptrdiff_t>(write.offset));
  }

  // A prefix of the write reaches the disk (all of it when `whole`); the rest of its range keeps
  // the old bytes or takes bytes from the input; a new file may or may not reach its full length.
  void tear(const JournalWrite& write) {
    const std::vector<std::uint8_t> before = disk_;
    const std::size_t offset = static_cast<std::size_t>(write.offset);
    const std::size_t prefix = input_.below(write.size + 1);
    const std::uint8_t how = input_.byte();
    if (disk_.size() < offset + prefix) disk_.resize(offset + prefix, 0);
    std::copy(write.bytes.begin(), write.bytes.begin() + static_cast<std::ptrdiff_t>(prefix),
              disk_.begin() + static_cast<std::ptrdiff_t>(offset));
    const std::size_t end = offset + write.size;
    if (write.creates_file && (how & 1) != 0 && disk_.size() < end) disk_.resize(end, 0);
    if ((how & 2) != 0) {
      for (std::size_t i = offset + prefix; i < std::min(end, disk_.size()); ++i) {
        disk_[i] = input_.byte();
      }
    }
    trace([&] {
      return "  torn at " + std::to_string(prefix) + " of " + std::to_string(write.size) +
             ", file " + std::to_string(disk_.size()) + " bytes";
    });
    if (forges_a_record(write, before)) {
      // The tear completed a valid record that was never written. Only a 64-bit checksum
      // collision does that (2^-64 per torn slot on a disk), but the fuzzer steers bytes into one
      // through its comparison feedback, which would test a model no disk follows. Such a tear
      // counts as one that reached nothing: the file keeps its old bytes.
      disk_ = before;
      trace([] { return std::string("  the tear forged a record: the write reached nothing"); });
    }
  }

  // True when a slot the write covers now decodes as a valid record whose bytes are neither the
  // write's own nor what the slot held before.
  bool forges_a_record(const JournalWrite& write, const std::vector<std::uint8_t>& before) const {
    if (disk_.size() != core::kJournalFileBytes) return false;
    for (std::size_t slot = 0; slot < 2; ++slot) {
      const std::size_t at = slot * core::kJournalRecordBytes;
      const std::size_t slot_end = at + core::kJournalRecordBytes;
      if (slot_end <= write.offset || at >= write.offset + write.size) continue;
      const auto bytes = std::span(disk_).subspan(at, core::kJournalRecordBytes);
      if (!core::decode_journal_record(bytes)) continue;
      const bool written =
          at >= write.offset && slot_end <= write.offset + write.size &&
          std::equal(bytes.begin(), bytes.end(),
                     write.bytes.begin() + static_cast<std::ptrdiff_t>(at - write.offset));
      const bool old =
          before.size() >= slot_end &&
          std::equal(bytes.begin(), bytes.end(), before.begin() + static_cast<std::ptrdiff_t>(at));
      if (!written && !old) return true;
    }
    return false;
  }

  void synced() {
    if (!dirty_) return;
    const JournalWrite write = *dirty_;
    dirty_.reset();
    apply(write);
    ++synced_writes_;
    acked_slot_ = static_cast<int>(write.offset / core::kJournalRecordBytes);
    acked_seq_ = write.seq;
    journal_->end_write(write.seq, true);
    trace([&] { return "synced seq " + std::to_string(write.seq); });
    check(journal_->durable_ceiling() == write.ceiling, "a synced write did not move the ceiling");
    check(!journal_->write_in_flight(), "a write still in flight after end_write");
  }

  void failed() {
    if (!dirty_) return;
    const JournalWrite write = *dirty_;
    dirty_.reset();
    const std::uint64_t durable = journal_->durable_ceiling();
    trace([&] { return "failed seq " + std::to_string(write.seq); });
    if (input_.flag()) tear(write);
    journal_->end_write(write.seq, false);
    check(journal_->durable_ceiling() == durable, "a failed write moved the ceiling");
  }

  void crash() {
    const std::uint8_t how = input_.byte();
    trace([] { return std::string("crash"); });
    if (dirty_) {
      const JournalWrite write = *dirty_;
      dirty_.reset();
      switch (how % 3) {
        case 0:
          trace([] { return std::string("  the un-synced write is lost"); });
          break;
        case 1:
          tear(write);
          break;
        case 2:
          trace([] { return std::string("  the un-synced write reached the disk whole"); });
          apply(write);
          break;
      }
    }
    journal_.reset();
    // The next life's wall clock: forward, back (up to ~4.9 h each), anything, or near the top.
    switch ((how >> 2) % 4) {
      case 0:
        wall_ = wall_ + std::min<std::uint64_t>(kMax - wall_, input_.u64() >> 20);
        break;
      case 1:
        wall_ = wall_ - std::min<std::uint64_t>(wall_, input_.u64() >> 20);
        break;
      case 2:
        wall_ = input_.u64();
        break;
      case 3:
        wall_ = kMax - input_.below(8);
        break;
    }
    trace([&] { return "restart at wall " + std::to_string(wall_); });
    start();
  }

  FuzzInput& input_;
  core::FenceJournalConfig config_;
  std::uint64_t wall_ = 0;
  std::vector<std::uint8_t> disk_;  // the durable bytes of the fence state file
  std::optional<JournalWrite> dirty_;
  int acked_slot_ = -1;  // the slot of the newest record acknowledged durable (or recovered)
  std::uint64_t acked_seq_ = 0;
  std::uint64_t synced_writes_ = 0;  // writes to the current file acknowledged durable
  bool handed_any_ = false;
  std::uint64_t handed_max_ = 0;  // the largest fence handed out in any life
  std::unique_ptr<FenceJournal> journal_;
};

}  // namespace
}  // namespace turnstile::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace turnstile::fuzz;
  const std::span<const std::uint8_t> bytes(data, size);
  check_recovery(bytes);
  if (size > turnstile::core::kJournalFileBytes) {
    check_recovery(bytes.subspan(0, turnstile::core::kJournalFileBytes));
  }
  FuzzInput input(data, size);
  Scenario(input).run();
  return 0;
}
