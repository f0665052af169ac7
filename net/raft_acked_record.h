// The acknowledged-index record (core/acked_index.h) installed around libraft 0.15's disk I/O, so
// that a node never reports an entry stored before a record at or after it is durable, and a node
// whose log comes back shorter than what it reported refuses to start.
//
// raft reports entries stored (to its leader, or to itself as leader) from the completion of its
// raft_io's append. install_acked_record() wraps that raft_io:
//
//   load      after raft's own load, the loaded log's last position is held against the record
//             (core::forgotten_entries); a log that lost acknowledged entries fails the load with
//             RAFT_CORRUPT and the reason in io->errmsg, so raft_start fails;
//   append    the completion waits until a record of the append's last entry is durable;
//             completions reach raft in the order they came;
//   truncate  (raft drops entries that a new leader replaced) the record is first lowered to the
//             entry before the cut and made durable; until then this and every later request is
//             held back, in order, as behind a slow disk, so that the log never ends below a
//             durable record because of a truncation;
//   bootstrap the configuration entry it writes is recorded as acknowledged (index 1);
//   snapshot_put of a leader's snapshot that replaces the whole log: lowered first the same way
//             when the snapshot ends below the record; raised after it is stored otherwise.
//
// The record itself is written through an AckedStore: the daemon's file (net/raft_node.cc), the
// simulator's disk. Writes are grouped: while one is in flight, what completes meanwhile shares
// the next one, so under load the record costs one extra write per group of appends, not per
// append.
//
// One path for every driver: the simulator installs it on the fixture's nodes and the daemon on
// its libuv node.
//
// Thread affinity: install before raft_start, on the thread that runs the raft instance; the
// wrapper, and every AckedStore call, runs on that thread.
#pragma once

#include <cstdint>
#include <functional>

#include "core/acked_index.h"
#include "core/slot_record.h"

extern "C" {
#include <raft.h>
}

namespace turnstile::net {

// Where the record's writes go.
class AckedStore {
 public:
  virtual ~AckedStore() = default;
  // Make `write` durable (its bytes at its offset, then a sync; creates_file: the directory too).
  // `done(ok)` runs later on the raft thread, never from within this call. A store that fails
  // should not answer at once: the wrapper writes again as soon as it hears of the failure.
  virtual void write(const core::SlotWrite& write, std::function<void(bool ok)> done) = 0;
};

// Makes `r` (initialized, not started) keep `index` durable through `store` before it reports
// entries stored. `index` and `store` outlive raft's use of `r->io`; `r->io` must stay the same.
void install_acked_record(raft* r, core::AckedIndex* index, AckedStore* store);

// How many append completions the record has held back until a write was durable, on every node
// of this process (tests, metrics).
std::uint64_t acked_record_waits();

}  // namespace turnstile::net
