// FenceFile: the driver of `--fence-state-file`. It owns the file (opened O_CLOEXEC, mode 0600,
// held under an exclusive flock for the life of the process), the core::FenceJournal that decides
// what to write, and the journal writer thread that makes reservations durable.
//
// Start-up (open()): lock the file, read and recover it (core::recover_journal), seed the journal
// with the wall clock, and make the first reservation durable synchronously, so that nothing is
// granted from a ceiling that is not on disk. Any problem refuses start-up with one line that
// names the file.
//
// Running: every shard's engine takes its blocks of fences through take(), which holds the mutex
// only to ask the journal; when the journal wants its next reservation written, take() wakes the
// writer thread, which writes and syncs outside the mutex. The journal reserves a range ahead of
// need, so a grant never waits on disk in the common case. When a write fails the writer logs why
// and retries with back-off (50 ms doubling to 1 s); meanwhile grants that need a fence beyond
// the durable ceiling fail with `error`.
//
// Shutdown: stop_writer() lets a write in flight finish, then joins the writer; the destructor
// also closes the file, which releases the lock.
//
// Thread affinity: open(), start_writer(), stop_writer() and the destructor on the main thread;
// take() from any shard thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <variant>

#include "core/fence.h"

namespace turnstile::net {

class FenceFile final : public core::FenceSource {
 public:
  // Knobs for tests only (--test-*): all zero in production.
  struct TestOptions {
    std::int64_t wall_clock_offset_s = 0;  // added to the wall clock that seeds the counter
    std::uint64_t range = 0;               // the reservation range; 0: the production one
    std::uint64_t write_failures = 0;      // the next n writes after start-up fail (EIO)
  };

  // A ready FenceFile (its first reservation durable), or the one-line reason start-up must be
  // refused.
  static std::variant<std::unique_ptr<FenceFile>, std::string> open(const std::string& path,
                                                                    const TestOptions& test);

  ~FenceFile() override;
  FenceFile(const FenceFile&) = delete;
  FenceFile& operator=(const FenceFile&) = delete;

  core::FenceBlock take(std::uint64_t want) override;

  void start_writer();
  // Waits for a write in flight, then stops the writer thread. Call after the shards stopped.
  void stop_writer();

  // One line for the start-up log: the file, recovered or fresh, the starting fence, the
  // durable ceiling.
  const std::string& startup_summary() const { return startup_summary_; }

 private:
  FenceFile(std::string path, int fd, const core::JournalRecovery& recovery, std::uint64_t wall_ns,
            const TestOptions& test);

  // pwrite of every byte, fsync, and (creates_file) fsync of the parent directory. False with
  // `error` (the step and strerror) on failure.
  bool write_durably(const core::JournalWrite& write, std::string& error) const;
  // open()'s last steps: the first reservation made durable (nullopt, or why not, to follow the
  // file's name), then the start-up summary made and logged.
  std::optional<std::string> reserve_first();
  void log_startup(const std::string& name, const core::JournalRecovery& recovery,
                   std::uint64_t first_fence);
  void writer_loop();

  const std::string path_;
  int fd_ = -1;
  std::string startup_summary_;

  std::mutex mutex_;
  std::condition_variable wake_;
  core::FenceJournal journal_;            // guarded by mutex_
  bool stopping_ = false;                 // guarded by mutex_
  std::uint64_t injected_failures_left_;  // writer thread only
  std::thread writer_;
};

}  // namespace turnstile::net
