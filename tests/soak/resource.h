// The soak's protected resource (docs/soak.md): what a user guards with a lock or a semaphore,
// checked the way a user would check it, by the fencing token (docs/semantics.md). One object per
// key; a worker enters it only while its guard says held, and leaves before it releases.
//
// It refuses an entry whose fence does not fit (a lock: not strictly above every fence it
// accepted; a semaphore: a fence it has seen before) and reports it, and it reports more than
// `limit` holders inside at once. Either is a safety violation of the lock service.
//
// One exception, which the service documents: a client that comes back under its stable ref
// takes back its own orphaned slot with the same token (docs/semantics.md, "Stable refs"), so the
// same owner may enter again with the fence it entered with last, once it has left. That is the
// same grant going on, not a second holder; it is counted (readoptions()), not refused.
//
// Thread affinity: every method may be called from several threads at once.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace turnstile::soak {

// Every violation of the run, in the order found (printed as they happen, listed at the end).
class Violations {
 public:
  void add(std::string what);
  std::vector<std::string> all() const;
  std::size_t count() const;

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> found_;
};

class ProtectedResource {
 public:
  // limit 1 with `fences_increase`: a lock's resource; else a semaphore's with `limit` slots.
  ProtectedResource(std::string key, std::int64_t limit, bool fences_increase,
                    Violations& violations);

  // true: inside (call leave() later). false: refused, a violation was reported, not inside.
  // `owner` names the client (its stable ref).
  bool enter(std::uint64_t fence, const std::string& owner);
  void leave(std::uint64_t fence);

  std::uint64_t entries() const;
  std::uint64_t readoptions() const;
  std::int64_t inside() const;

 private:
  const std::string key_;
  const std::int64_t limit_;
  const bool fences_increase_;
  Violations& violations_;
  mutable std::mutex mutex_;
  std::uint64_t highest_ = 0;                   // the highest fence accepted (locks)
  std::map<std::uint64_t, std::string> owner_;  // every fence accepted, and who entered with it
  std::multiset<std::uint64_t> inside_;         // the fences inside now
  std::uint64_t entries_ = 0;
  std::uint64_t readoptions_ = 0;
};

}  // namespace turnstile::soak
