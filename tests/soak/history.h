// The soak's record of every client call (docs/soak.md, "The history"): what was asked, of which
// key, by which worker, when it was sent and answered, how it ended, and the fence of a grant.
// Written out as JSON lines (`--history FILE`, or next to the soak on a violation), and checked
// at the end for the order of fences in real time:
//
//   a grant whose acquire was sent after another grant of the same key was answered carries a
//   higher fence, unless it is a worker taking back its own orphaned slot: a fence that worker
//   was granted before (docs/semantics.md, "Stable refs").
//
// The protected resources check fences as holders enter; this check also covers grants that
// never entered (a guard that lost its lease first, a hold that was dropped) and grants that
// entered different resources' views out of order.
//
// Thread affinity: add() may be called from several threads at once; the rest after they stopped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

namespace turnstile::soak {

struct Call {
  std::size_t worker = 0;
  std::string kind;   // "lock (guard)", "release (try-lock)", ...
  std::string key;    // the lock or semaphore key
  double sent_s = 0;  // seconds from the start of the load
  double answered_s = 0;
  std::string outcome;      // "ok" or the client's error code name
  std::uint64_t fence = 0;  // a grant's fence; 0 for anything else
};

class History {
 public:
  void add(Call call);
  std::size_t size() const;
  // One JSON object per line, in the order the calls were added.
  void write_jsonl(std::ostream& out) const;
  // Every breach of the real-time fence order above, described.
  std::vector<std::string> check_fence_order() const;

 private:
  mutable std::mutex mutex_;
  std::vector<Call> calls_;
};

}  // namespace turnstile::soak
