// AckedFile: the daemon's acknowledged-index record (core/acked_index.h), the file
// `turnstile-acknowledged` in the raft directory, written on libuv's thread pool so that the raft
// thread never waits on the disk for it.
//
// read() runs before raft touches the directory: it recovers the file (absent: nothing recorded
// yet; damaged: the node must not start). The file is created by the first write (both slots in
// one write, then a sync of the file and of the directory). Each later write is a pwrite of one
// slot and an fdatasync. A failed write is logged and answered only after a pause, so that the
// wrapper's retry does not spin on a failing disk (the stall watchdog of net/raft_node.cc then
// sees that nothing is stored).
//
// Thread affinity: read() anywhere; write() and the destructor on the loop's thread. A write in
// flight keeps the loop running until it is answered.
#pragma once

#include <uv.h>

#include <atomic>
#include <functional>
#include <string>
#include <variant>

#include "core/slot_record.h"
#include "net/raft_acked_record.h"

namespace turnstile::net {

inline constexpr const char* kAckedFileName = "turnstile-acknowledged";
// Where a new record file is written whole before it is renamed to kAckedFileName (a dot file:
// the directory checks pass over it).
inline constexpr const char* kAckedFreshName = ".turnstile-acknowledged.new";

class AckedFile final : public AckedStore {
 public:
  using LogFn = std::function<void(const std::string&)>;

  // What the file in `dir` says, or why it cannot be read (one line naming the file).
  static std::variant<core::SlotRecovery, std::string> read(const std::string& dir);

  AckedFile(uv_loop_t* loop, std::string dir, LogFn log);
  ~AckedFile() override;
  AckedFile(const AckedFile&) = delete;
  AckedFile& operator=(const AckedFile&) = delete;

  void write(const core::SlotWrite& write, std::function<void(bool ok)> done) override;

  // Tests: the next `n` writes fail as a disk error would.
  void fail_next_writes(unsigned n) { failures_to_inject_.store(n); }
  std::uint64_t writes() const { return writes_; }

 private:
  struct Job;
  static void run_job(uv_work_t* work);
  static void after_job(uv_work_t* work, int status);

  uv_loop_t* loop_;
  const std::string dir_;
  const std::string path_;
  LogFn log_;
  int fd_ = -1;  // opened by the first write, on the pool's thread
  std::atomic<unsigned> failures_to_inject_{0};
  std::uint64_t writes_ = 0;
  std::uint64_t failures_ = 0;
};

}  // namespace turnstile::net
