// The soak's protected resource: see resource.h.
#include "tests/soak/resource.h"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace turnstile::soak {

void Violations::add(std::string what) {
  // Printed at once too: a run that later hangs still shows what went wrong first.
  std::fprintf(stderr, "VIOLATION: %s\n", what.c_str());
  std::lock_guard lock(mutex_);
  found_.push_back(std::move(what));
}

std::vector<std::string> Violations::all() const {
  std::lock_guard lock(mutex_);
  return found_;
}

std::size_t Violations::count() const {
  std::lock_guard lock(mutex_);
  return found_.size();
}

ProtectedResource::ProtectedResource(std::string key, std::int64_t limit, bool fences_increase,
                                     Violations& violations)
    : key_(std::move(key)),
      limit_(limit),
      fences_increase_(fences_increase),
      violations_(violations) {}

bool ProtectedResource::enter(std::uint64_t fence, const std::string& owner) {
  std::string problem;
  bool entered = false;
  {
    std::lock_guard lock(mutex_);
    const auto before = owner_.find(fence);
    // The same owner back with its own slot's fence, which nobody holds inside now.
    const bool readopted = before != owner_.end() && before->second == owner &&
                           !inside_.contains(fence) && (!fences_increase_ || fence == highest_);
    if (before != owner_.end() && !readopted) {
      problem = "fence " + std::to_string(fence) + " entered again (first by " + before->second +
                ", now by " + owner + ")";
    } else if (fences_increase_ && fence < highest_) {
      problem = "fence " + std::to_string(fence) + " below the highest accepted " +
                std::to_string(highest_) + " (by " + owner + ")";
    } else {
      if (readopted) ++readoptions_;
      highest_ = std::max(highest_, fence);
      owner_.emplace(fence, owner);
      inside_.insert(fence);
      entered = true;
      ++entries_;
      if (static_cast<std::int64_t>(inside_.size()) > limit_) {
        problem = std::to_string(inside_.size()) + " holders inside at once (limit " +
                  std::to_string(limit_) + "), the last with fence " + std::to_string(fence);
      }
    }
  }
  if (problem.empty()) return true;
  violations_.add(key_ + ": " + problem);
  // Refused by fence: not inside. Over the limit: inside all the same (the caller leaves).
  return entered;
}

void ProtectedResource::leave(std::uint64_t fence) {
  std::lock_guard lock(mutex_);
  const auto found = inside_.find(fence);
  if (found != inside_.end()) inside_.erase(found);
}

std::uint64_t ProtectedResource::entries() const {
  std::lock_guard lock(mutex_);
  return entries_;
}

std::uint64_t ProtectedResource::readoptions() const {
  std::lock_guard lock(mutex_);
  return readoptions_;
}

std::int64_t ProtectedResource::inside() const {
  std::lock_guard lock(mutex_);
  return static_cast<std::int64_t>(inside_.size());
}

}  // namespace turnstile::soak
