// What turnstile-bench's two loads (the lock modes in lock_run.cc, the signal modes in
// signal_run.cc) share: the counters and first problems every thread reports to.
//
// Thread affinity: one Shared per run, written by every thread through report().
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace turnstile::bench {

// Counters and first messages shared by all threads.
struct Shared {
  std::atomic<std::uint64_t> errors{0};
  std::atomic<std::uint64_t> fence_violations{0};
  std::atomic<bool> stop{false};
  std::mutex messages_mutex;
  std::vector<std::string> messages;  // the first kMessagesMax problems, for the report
  static constexpr std::size_t kMessagesMax = 10;

  void report(std::atomic<std::uint64_t>& counter, const std::string& message) {
    counter.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard lock(messages_mutex);
    if (messages.size() < kMessagesMax) messages.push_back(message);
  }
};

}  // namespace turnstile::bench
