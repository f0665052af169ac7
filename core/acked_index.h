// What a cluster node may have acknowledged as stored, kept on disk beside its raft log, so that
// a node whose log comes back shorter than what it promised refuses to start.
//
// Raft's safety rests on every voter remembering the entries it reported stored: a leader counts
// that report towards a commit. A log damaged on disk (a flipped byte, a file cut or deleted)
// loses entries; raft's own loader cannot tell such a loss from a write torn by a crash, which
// was never acknowledged and is safe to drop, so it drops both. This record tells them apart: a
// log that ends below the recorded position lost entries this node acknowledged.
//
// The record is the position (index and term) of the last entry of the newest stored append.
// Acknowledgements wait for it: the driver holds the append's completion until a record at or
// after it is durable (AckedIndex hands out tickets in the order of the completions). A log may
// still legitimately end below an earlier record after a new leader replaced entries that were
// never committed (raft truncates them) or a leader's snapshot replaced the log: the driver then
// lowers the record, durably, before the log is cut, so the log never ends below a durable record
// unless the disk lost entries.
//
// The file is the two-slot layout of core/slot_record.h with two values:
//   slot = magic "tsacked1" (8) | seq (8) | index (8) | term (8) | XXH3-64 (8)   40 bytes
// (docs/cluster.md, "A damaged raft directory").
//
// Pure and single-threaded: the raft wrapper (net/raft_acked_record.h) drives it, in the daemon
// and in the simulator alike.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/slot_record.h"

namespace turnstile::core {

inline constexpr SlotFormat kAckedFormat{
    {'t', 's', 'a', 'c', 'k', 'e', 'd', '1'}, 2, "an acknowledged-index file"};

struct LogPosition {
  std::uint64_t index = 0;
  std::uint64_t term = 0;
  bool operator==(const LogPosition&) const = default;
};

// The start rule. `last` is the last entry of the log as loaded (the snapshot's, when the log
// holds nothing after it; {0, 0} for an empty log), `acknowledged` the recorded position. Why the
// node must not start (its log ends below the recorded index), or nullopt.
std::optional<std::string> forgotten_entries(LogPosition last, LogPosition acknowledged);

class AckedIndex {
 public:
  // From what recovery found: fresh (no record yet: nothing acknowledged) or recovered. Never
  // refused: a file that does not recover stops the node before this exists.
  explicit AckedIndex(const SlotRecovery& recovery);

  // The newest durable position.
  LogPosition durable() const { return durable_; }
  // The newest position asked for (durable() when nothing waits).
  LogPosition wanted() const { return wanted_; }

  // The log's last stored entry is now `position`; what depends on it (an append's completion,
  // a snapshot install) waits for the returned ticket to be durable.
  std::uint64_t want(LogPosition position);
  bool is_durable(std::uint64_t ticket) const { return ticket <= durable_ticket_; }

  // The write to make now, if a wanted position is not durable yet and no write is in flight.
  std::optional<SlotWrite> begin_write();
  // The write in flight became durable (ok) or failed. After a failure the slot it aimed at may
  // be torn, so the next write goes to the same slot; what is durable is unchanged.
  void end_write(bool ok);
  bool write_in_flight() const { return in_flight_.has_value(); }
  std::uint64_t writes_failed() const { return writes_failed_; }

 private:
  struct InFlight {
    SlotWrite write;
    std::uint64_t ticket = 0;
  };

  LogPosition durable_;
  std::uint64_t seq_ = 0;      // the durable record's seq; 0: the file is empty
  int durable_slot_ = -1;      // the slot that holds it
  LogPosition wanted_;         // the newest position asked for
  std::uint64_t tickets_ = 0;  // tickets handed out; the newest is the wanted position's
  std::uint64_t durable_ticket_ = 0;
  std::optional<InFlight> in_flight_;
  std::uint64_t writes_failed_ = 0;
};

}  // namespace turnstile::core
