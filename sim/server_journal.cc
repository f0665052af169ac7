// ServerProcess, the fence journal on the simulated disk: each life's recovery and first
// durable reservation (as the daemon makes them before it accepts anything), the writes the
// journal wants while the life runs, and the check of every fence block the engines take
// against the disk and every earlier block (sim/server.h).
#include <optional>
#include <string>

#include "sim/server.h"
#include "sim/server_life.h"

namespace turnstile::sim {

std::unique_ptr<core::FenceJournal> ServerProcess::open_journal(std::int64_t wall_ns) {
  core::FenceJournalConfig config;
  config.range = run_.settings.journal_range;
  while (!run_.failed) {
    const core::JournalRecovery recovery = core::recover_journal(disk_.bytes);
    run_.digest.add(static_cast<std::uint64_t>(recovery.outcome) + 0x5ec0);
    run_.digest.add(recovery.record.ceiling);
    if (recovery.outcome == core::JournalRecovery::Outcome::kRefused) {
      if (!recreate_refused(recovery)) return nullptr;
      continue;
    }
    if (!check_recovered(recovery)) return nullptr;
    auto journal =
        std::make_unique<core::FenceJournal>(config, recovery, static_cast<std::uint64_t>(wall_ns));
    if (journal->exhausted()) {
      run_.fail("fence-journal", "the fence space is used up at start-up");
      return nullptr;
    }
    if (!reserve_at_start_up(*journal)) return nullptr;
    return journal;
  }
  return nullptr;
}

bool ServerProcess::recreate_refused(const core::JournalRecovery& recovery) {
  // Only a creation torn before it was ever synced may leave a file recovery refuses; nothing
  // was handed out from it, so the operator may delete it and start afresh.
  if (disk_.synced_writes > 0) {
    run_.fail("fence-journal-recovery", "the fence state file " + recovery.problem + " after " +
                                            std::to_string(disk_.synced_writes) + " synced writes");
    return false;
  }
  ++run_.result.coverage["journal-refused-recreated"];
  disk_.bytes.clear();
  return true;
}

bool ServerProcess::check_recovered(const core::JournalRecovery& recovery) {
  if (recovery.outcome == core::JournalRecovery::Outcome::kRecovered) {
    ++run_.result.coverage["journal-recovered"];
    if (recovery.record.ceiling < fences_handed_max_) {
      run_.fail("fence-journal-recovery",
                "recovered ceiling " + std::to_string(recovery.record.ceiling) + " below fence " +
                    std::to_string(fences_handed_max_) + " handed out before");
      return false;
    }
  } else if (disk_.synced_writes > 0) {
    run_.fail("fence-journal-recovery", "the fence state file is empty after " +
                                            std::to_string(disk_.synced_writes) + " synced writes");
    return false;
  }
  return true;
}

bool ServerProcess::reserve_at_start_up(core::FenceJournal& journal) {
  // The daemon makes the first reservation durable before it accepts a connection; a failed
  // write is retried, and the process may die while it writes.
  while (!run_.failed) {
    const std::optional<core::JournalWrite> write = journal.begin_write();
    if (!write) {
      run_.fail("fence-journal", "no reservation wanted at start-up");
      return false;
    }
    ++run_.result.coverage["journal-write"];
    run_.digest.add(write->seq);
    run_.digest.add(write->ceiling);
    const bool first_start = life_ == 0;
    if (!run_.liveness && run_.settings.fault_crash &&
        disk_.dice().chance(first_start ? 250 : 100)) {
      disk_.dirty = *write;
      disk_.crash();
      ++run_.result.coverage["crash-at-start-up"];
      ++run_.result.crashes;
      run_.digest.add(0xc0ffee5);
      run_.schedule(run_.now + faults_.between(1, 500) * kMs, event::Restart{});
      return false;
    }
    if (!run_.liveness && disk_.dice().chance(run_.settings.journal_fail_permille)) {
      disk_.fail(*write);
      journal.end_write(write->seq, false);
      continue;
    }
    disk_.apply(*write);
    ++disk_.synced_writes;
    journal.end_write(write->seq, true);
    return true;
  }
  return false;
}

void ServerProcess::kick_journal() {
  if (!process_ || !process_->journal || process_->journal_backoff || paused_until_ > run_.now)
    return;
  const std::optional<core::JournalWrite> write = process_->journal->begin_write();
  if (!write) return;
  ++run_.result.coverage["journal-write"];
  disk_.dirty = *write;
  run_.digest.add(write->seq);
  run_.digest.add(write->ceiling);
  run_.schedule(run_.now + disk_.dice().between(1, run_.settings.journal_sync_max_us) * kUs,
                event::JournalSynced{life_, write->seq});
}

void ServerProcess::on_journal_synced(std::uint64_t life, std::uint64_t seq) {
  if (!process_ || life != life_ || !disk_.dirty || disk_.dirty->seq != seq) return;
  const core::JournalWrite write = *disk_.dirty;
  disk_.dirty.reset();
  // Faults heal in the liveness phase: every write succeeds then.
  if (!run_.liveness && disk_.dice().chance(run_.settings.journal_fail_permille)) {
    disk_.fail(write);
    process_->journal->end_write(seq, false);
    process_->journal_backoff = true;
    run_.schedule(run_.now + disk_.dice().between(1, 200) * kMs, event::JournalRetry{life_});
    run_.digest.add(0xfa11);
    return;
  }
  disk_.apply(write);
  ++disk_.synced_writes;
  process_->journal->end_write(seq, true);
  run_.digest.add(0x5ced);
}

void ServerProcess::on_fences_taken(core::FenceBlock block) {
  run_.digest.add(block.first);
  run_.digest.add(block.count);
  if (block.count == 0) {
    ++run_.result.coverage["fence-source-empty"];
    return;
  }
  ++run_.result.coverage["fence-block"];
  const std::uint64_t last = block.first + (block.count - 1);
  if (last < block.first) {
    run_.fail("fence-journal", "block " + std::to_string(block.first) + "+" +
                                   std::to_string(block.count) + " wraps");
    return;
  }
  if (fences_handed_max_ != 0 && block.first <= fences_handed_max_) {
    run_.fail("fence-journal-monotonic", "block from " + std::to_string(block.first) +
                                             " after fence " + std::to_string(fences_handed_max_) +
                                             " was handed out (life " + std::to_string(life_) +
                                             ")");
    return;
  }
  // Only fences at or below a ceiling that is durable on the disk may be handed out.
  const core::JournalRecovery recovery = core::recover_journal(disk_.bytes);
  if (recovery.outcome != core::JournalRecovery::Outcome::kRecovered ||
      recovery.record.ceiling < last) {
    run_.fail("fence-journal-durable",
              "block up to " + std::to_string(last) + " handed out while the disk holds " +
                  (recovery.outcome == core::JournalRecovery::Outcome::kRecovered
                       ? "ceiling " + std::to_string(recovery.record.ceiling)
                       : std::string("no valid record")));
    return;
  }
  fences_handed_max_ = last;
}

void ServerProcess::on_journal_retry(std::uint64_t life) {
  if (process_ && life == life_) process_->journal_backoff = false;
}

}  // namespace turnstile::sim
