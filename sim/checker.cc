#include "sim/checker.h"

#include <algorithm>
#include <optional>

#include "core/routing.h"

namespace turnstile::sim {
namespace {

using core::Namespace;
using core::SessionId;

std::string join(const std::vector<std::uint64_t>& values) {
  std::string text = "[";
  for (std::uint64_t value : values) {
    if (text.size() > 1) text += ',';
    text += std::to_string(value);
  }
  return text + "]";
}

// FIFO on a read-write lock is reported as rw-fifo: a reader that overtakes a queued writer
// breaks it.
const char* fifo_name(const ResourceKey& key) {
  return key.first == Namespace::kReadWrite ? "rw-fifo" : "fifo";
}

}  // namespace

std::string key_name(const ResourceKey& key) {
  switch (key.first) {
    case Namespace::kLock:
      return "lock:" + key.second;
    case Namespace::kSemaphore:
      return "sem:" + key.second;
    case Namespace::kReadWrite:
      return "rw:" + key.second;
  }
  return "?:" + key.second;
}

Checker::Checker(const Settings& settings, const bool& failed, std::uint64_t& grants_seen,
                 Fail fail)
    : settings_(settings), failed_(failed), grants_seen_(grants_seen), fail_(std::move(fail)) {}

void Checker::new_life(std::uint64_t life, bool across_lives) {
  life_ = life;
  across_lives_ = across_lives;
  seen_tokens_.clear();
  max_fence_life_.clear();
  delay_until_.clear();
  released_.clear();
  cleared_.clear();
  previous_.assign(settings_.shards, {});
  forgotten_.clear();
}

void Checker::observe_grant(ResourceKey key, core::Token token, std::string path) {
  observed_.emplace_back(std::move(key), token);
  observed_paths_.push_back(std::move(path));
}

void Checker::observe_answer(const core::Request& request, const core::Reply& reply) {
  if (reply.status != core::Status::kOk) return;
  if (request.token && core::command_operation(request.command) == core::Operation::kRelease) {
    released_.insert({{core::command_namespace(request.command), request.key},
                      {request.token->fence.value, request.token->salt}});
  }
  if (request.command == core::Command::kForceRelease && request.clear_delay) {
    cleared_.insert({request.space, request.key});
  }
}

void Checker::clear_observed() {
  observed_.clear();
  observed_paths_.clear();
  released_.clear();
  cleared_.clear();
}

void Checker::count(const char* name) {
  if (coverage_ != nullptr) ++(*coverage_)[name];
}

void Checker::check_engine(std::size_t shard, const core::Engine& engine, std::int64_t now) {
  if (failed_) return;
  Call call;
  take_observed(call);
  if (!check_resources(shard, engine, now, call)) return;
  if (!check_fences(shard, now, call)) return;
  if (!check_lock_delay(shard, engine, call)) return;
  for (const auto& [key, before] : previous_[shard]) {
    if (!check_queue(key, before, now, call)) return;
  }
  previous_[shard] = std::move(call.current);
}

void Checker::take_observed(Call& call) {
  for (std::size_t i = 0; i < observed_.size(); ++i) {
    const auto& [key, token] = observed_[i];
    if (seen_tokens_.count({token.fence.value, token.salt}) == 0) {
      call.fresh[key].push_back(token);
      call.source[token.fence.value] = "a " + observed_paths_[i];
    }
  }
  observed_.clear();
  observed_paths_.clear();
  call.released.swap(released_);
  call.cleared.swap(cleared_);
}

bool Checker::check_resources(std::size_t shard, const core::Engine& engine, std::int64_t now,
                              Call& call) {
  for (const core::Engine::ResourceView& view : engine.inspect()) {
    const ResourceKey key{view.ns, view.key};
    if (core::shard_of(view.ns, view.key, settings_.shards) != shard) {
      fail_("routing", key_name(key) + " lives on shard " + std::to_string(shard));
      return false;
    }
    if (!check_holders(key, view, engine, call)) return false;
    if (view.ns == Namespace::kReadWrite && !check_read_write(key, view, now)) return false;
    if (!snapshot_key(key, view, call)) return false;
  }
  return true;
}

bool Checker::check_holders(const ResourceKey& key, const core::Engine::ResourceView& view,
                            const core::Engine& engine, Call& call) {
  std::int64_t live = 0;
  for (const auto& holder : view.holders) {
    if (holder.deadline > engine.now()) ++live;
    if (seen_tokens_.count({holder.token.fence.value, holder.token.salt}) == 0) {
      call.fresh[key].push_back(holder.token);
      call.source[holder.token.fence.value] =
          "a holder of session " + std::to_string(holder.session.value);
      call.fresh_holders[key].insert(holder.session.value);
      call.fresh_refs[key][holder.session.value] = holder.ref;
    }
    if (forgotten_.count(holder.session.value) != 0 && settings_.auto_release) {
      fail_("leak",
            key_name(key) + " held by forgotten session " + std::to_string(holder.session.value));
      return false;
    }
  }
  // (A read-write lock's limit is 1, for its writer: readers share it, checked below.)
  if (view.ns != Namespace::kReadWrite && live > view.limit) {
    fail_("mutual-exclusion", key_name(key) + " has " + std::to_string(live) +
                                  " live holders, limit " + std::to_string(view.limit));
    return false;
  }
  return true;
}

bool Checker::check_read_write(const ResourceKey& key, const core::Engine::ResourceView& view,
                               std::int64_t now) {
  // A writer holds alone: the engine admits it only to an empty key and nobody beside it
  // (its lease may have run out with the expiry not processed yet: it still holds).
  std::size_t writers = 0;
  for (const auto& holder : view.holders) writers += holder.shared ? 0 : 1;
  if (writers > 0 && view.holders.size() > 1) {
    fail_("rw-exclusion", key_name(key) + " has a writer beside " +
                              std::to_string(view.holders.size() - 1) + " other holders at " +
                              std::to_string(now));
    return false;
  }
  // The head of the queue waits only for what the key cannot grant now: a writer while
  // anyone holds, a reader while a writer holds; or while a lock-delay runs.
  if (!view.waiters.empty() && !view.delayed_until) {
    const bool head_reads = !view.waiters_shared.empty() && view.waiters_shared.front();
    const bool admitted = view.holders.empty() || (head_reads && writers == 0);
    if (admitted) {
      fail_("rw-fifo",
            key_name(key) + ": the head of the queue, session " +
                std::to_string(view.waiters.front().value) + " (" +
                (head_reads ? "a reader" : "a writer") + "), waits while the key could grant it (" +
                std::to_string(view.holders.size()) + " readers hold) at " + std::to_string(now));
      return false;
    }
  }
  return true;
}

bool Checker::snapshot_key(const ResourceKey& key, const core::Engine::ResourceView& view,
                           Call& call) {
  KeySnapshot& snapshot = call.current[key];
  snapshot.limit = view.limit;
  for (const auto& holder : view.holders) {
    snapshot.holders.push_back(HolderSnapshot{holder.token, holder.shared});
  }
  snapshot.orphaned = view.waiters_orphaned;
  snapshot.refs = view.waiter_refs;
  for (SessionId waiter : view.waiters) {
    if (forgotten_.count(waiter.value) != 0) {
      fail_("leak",
            key_name(key) + " has a waiter of forgotten session " + std::to_string(waiter.value));
      return false;
    }
    snapshot.waiters.push_back(waiter.value);
  }
  return true;
}

// Fences: every new grant beats every earlier grant of the key.
bool Checker::check_fences(std::size_t shard, std::int64_t now, Call& call) {
  for (auto& [key, tokens] : call.fresh) {
    std::sort(tokens.begin(), tokens.end(),
              [](const core::Token& x, const core::Token& y) { return x.fence < y.fence; });
    tokens.erase(std::unique(tokens.begin(), tokens.end()), tokens.end());
    for (const core::Token& token : tokens) {
      const std::uint64_t fence = token.fence.value;
      std::uint64_t& life_max = max_fence_life_[key];
      std::uint64_t& ever_max = max_fence_ever_[key];
      if (fence <= life_max) {
        fail_("fence-monotonic", key_name(key) + " fence " + std::to_string(fence) + " (seen in " +
                                     call.source[fence] + " on shard " + std::to_string(shard) +
                                     ") after " + std::to_string(life_max) + " in life " +
                                     std::to_string(life_) + " at " + std::to_string(now));
        return false;
      }
      if (across_lives_ && fence <= ever_max) {
        fail_("fence-monotonic-across-restarts", key_name(key) + " fence " + std::to_string(fence) +
                                                     " after " + std::to_string(ever_max) +
                                                     " from an earlier life");
        return false;
      }
      life_max = fence;
      ever_max = std::max(ever_max, fence);
      seen_tokens_.insert({fence, token.salt});
      ++grants_seen_;
      if (key.first == Namespace::kReadWrite) count("rw-grant-checked");
    }
  }
  return true;
}

// Lock-delay (docs/semantics.md, "Lock-delay"): a holder of the previous check that is gone
// now, without a release answered `ok` in this call, left without releasing (its lease ended,
// or its session closed with auto-release). The key then grants nothing for the delay from
// the engine's now of this call. A grant in a later call before that instant breaks the rule;
// a grant in this same call does when it could not have held the key together with the holder
// that left (so it came after it): any lock, a semaphore of limit 1, a writer, or a reader
// where a writer left. A force-release with clear_delay ends the key's delay and starts none
// for the holders it freed, so the key may grant in that same call.
bool Checker::check_lock_delay(std::size_t shard, const core::Engine& engine, Call& call) {
  const std::int64_t delay_ns = settings_.lock_delay_ms * kMs;
  if (delay_ns <= 0) return true;
  const std::int64_t now_ns = engine.now().ns();
  Departures left;
  find_departures(shard, call, left);
  for (const ResourceKey& key : call.cleared) {
    if (delay_until_.erase(key) != 0) count("lock-delay-cleared");
  }
  for (const auto& [key, tokens] : call.fresh) {
    auto until = delay_until_.find(key);
    if (until != delay_until_.end() && now_ns < until->second) {
      fail_("lock-delay",
            key_name(key) + " granted fence " + std::to_string(tokens.front().fence.value) + " (" +
                call.source[tokens.front().fence.value] + ") at engine time " +
                std::to_string(now_ns) + ", while a lock-delay holds it until " +
                std::to_string(until->second) + " (a holder left without releasing; " +
                std::to_string(until->second - now_ns) + " ns before it ends)");
      return false;
    }
    if (until != delay_until_.end()) count("lock-delay-grant-after");
    auto gone = left.holders.find(key);
    if (gone == left.holders.end()) continue;
    if (!check_grants_after_departure(key, tokens, gone->second, left.limit[key], call, now_ns,
                                      delay_ns)) {
      return false;
    }
  }
  for (const auto& [key, holders] : left.holders) {
    std::int64_t& until = delay_until_[key];
    until = std::max(until, now_ns + delay_ns);
    count("lock-delay-left");
  }
  return true;
}

// The holders of the previous check that are gone now without a clean release or a cleared
// delay, per key, with the key's limit then.
void Checker::find_departures(std::size_t shard, const Call& call, Departures& left) const {
  for (const auto& [key, before] : previous_[shard]) {
    auto after = call.current.find(key);
    for (const HolderSnapshot& holder : before.holders) {
      const std::pair<std::uint64_t, std::uint64_t> id{holder.token.fence.value, holder.token.salt};
      bool still = false;
      if (after != call.current.end()) {
        for (const HolderSnapshot& now_holder : after->second.holders) {
          still = still || now_holder.token == holder.token;
        }
      }
      if (still || call.released.count({key, id}) != 0 || call.cleared.count(key) != 0) continue;
      left.holders[key].push_back(holder);
      left.limit[key] = before.limit;
    }
  }
}

// The grants of `key` in the call in which `gone` left it without releasing: each must have
// been able to hold the key together with every one of them.
bool Checker::check_grants_after_departure(const ResourceKey& key,
                                           const std::vector<core::Token>& tokens,
                                           const std::vector<HolderSnapshot>& gone,
                                           std::int64_t limit, Call& call, std::int64_t now_ns,
                                           std::int64_t delay_ns) {
  const auto current_it = call.current.find(key);
  for (const core::Token& token : tokens) {
    // The grant's kind, if it still holds; unknown: it may have been a reader.
    std::optional<bool> shared;
    if (current_it != call.current.end()) {
      for (const HolderSnapshot& holder : current_it->second.holders) {
        if (holder.token == token) shared = holder.shared;
      }
    }
    for (const HolderSnapshot& holder : gone) {
      bool together = false;  // whether the grant could have come while `holder` held
      switch (key.first) {
        case Namespace::kLock:
          together = false;
          break;
        case Namespace::kSemaphore:
          together = limit > 1;
          break;
        case Namespace::kReadWrite:
          together = holder.shared && shared.value_or(true);
          break;
      }
      if (!together) {
        fail_("lock-delay", key_name(key) + " granted fence " + std::to_string(token.fence.value) +
                                " (" + call.source[token.fence.value] + ") at engine time " +
                                std::to_string(now_ns) + " in the call in which holder " +
                                std::to_string(holder.token.fence.value) +
                                " left without releasing, which starts a lock-delay of " +
                                std::to_string(delay_ns) + " ns");
        return false;
      }
    }
  }
  return true;
}

// Which of the waiters `w` of the previous check still wait in the queue `r` of this one.
// A session granted in this call that is in the queue again joined anew (a session may queue
// behind its own grant: locks are not re-entrant), so it does not count as still waiting.
// So did one now behind a session that was behind it (a queue never reorders who stays in
// it): it was granted and left in this call, then asked again (several commands in one
// cluster entry).
std::set<std::uint64_t> Checker::still_waiting(const std::vector<std::uint64_t>& w,
                                               const std::vector<std::uint64_t>& r,
                                               const std::set<std::uint64_t>& granted) {
  std::map<std::uint64_t, std::size_t> was_at;
  for (std::size_t i = 0; i < w.size(); ++i) was_at[w[i]] = i;
  auto rejoined = [&](std::size_t at) {
    auto self = was_at.find(r[at]);
    if (self == was_at.end()) return false;
    for (std::size_t j = 0; j < at; ++j) {
      auto other = was_at.find(r[j]);
      if (other != was_at.end() && other->second > self->second) return true;
    }
    return false;
  };
  std::set<std::uint64_t> still;
  for (std::size_t at = 0; at < r.size(); ++at) {
    if (granted.count(r[at]) == 0 && !rejoined(at)) still.insert(r[at]);
  }
  return still;
}

// FIFO: a waiter is granted only after every waiter ahead of it left the queue.
bool Checker::check_queue(const ResourceKey& key, const KeySnapshot& before, std::int64_t now,
                          Call& call) {
  const std::vector<std::uint64_t>& w = before.waiters;
  if (w.empty()) return true;
  std::set<std::uint64_t> distinct(w.begin(), w.end());
  if (distinct.size() != w.size()) return true;  // one session twice: ambiguous, skip
  auto it = call.current.find(key);
  const std::vector<std::uint64_t> empty;
  const std::vector<std::uint64_t>& r = it == call.current.end() ? empty : it->second.waiters;
  const std::set<std::uint64_t>& granted = call.fresh_holders[key];
  const std::set<std::uint64_t> still = still_waiting(w, r, granted);
  std::size_t first_still = w.size();
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (still.count(w[i]) != 0) {
      first_still = i;
      break;
    }
  }
  // A close hands its slot to a waiter with the same stable ref, wherever it waits: a waiter
  // granted behind the first that still waits is in order if a waiter of its ref ahead of it
  // left the queue in the same step.
  auto handed_on = [&](std::size_t i) {
    if (i >= before.refs.size() || before.refs[i].empty()) return false;
    for (std::size_t j = 0; j < i; ++j) {
      if (still.count(w[j]) == 0 && before.refs[j] == before.refs[i]) return true;
    }
    return false;
  };
  for (std::size_t i = first_still + 1; i < w.size(); ++i) {
    if (still.count(w[i]) == 0 && granted.count(w[i]) != 0 && !handed_on(i)) {
      fail_(fifo_name(key), key_name(key) + ": session " + std::to_string(w[i]) +
                                " was granted while session " + std::to_string(w[first_still]) +
                                ", ahead of it, still waits; queue before " + join(w) + " after " +
                                join(r) + " at " + std::to_string(now));
      return false;
    }
  }
  return check_newcomers(key, before, still, first_still, call);
}

// A session granted in this call that was not in the queue before, while an earlier waiter
// still waits, broke FIFO, unless it took the place of a waiter that left.
bool Checker::check_newcomers(const ResourceKey& key, const KeySnapshot& before,
                              const std::set<std::uint64_t>& still, std::size_t first_still,
                              Call& call) {
  const std::vector<std::uint64_t>& w = before.waiters;
  const std::set<std::uint64_t> distinct(w.begin(), w.end());
  const std::set<std::uint64_t>& granted = call.fresh_holders[key];
  // A newcomer may have adopted an orphaned waiter's place ahead of the first that still waits
  // (docs/semantics.md, "Stable refs and orphans"): then its grant keeps the queue's order.
  bool orphan_left_ahead = false;
  for (std::size_t i = 0; i < first_still && i < before.orphaned.size(); ++i) {
    orphan_left_ahead = orphan_left_ahead || before.orphaned[i];
  }
  // A newcomer may have been handed a slot granted this step to a waiter of its own stable ref
  // whose session then closed.
  auto ref_left = [&](std::uint64_t session) {
    const std::string& ref = call.fresh_refs[key][session];
    if (ref.empty()) return false;
    for (std::size_t j = 0; j < w.size() && j < before.refs.size(); ++j) {
      if (still.count(w[j]) == 0 && before.refs[j] == ref) return true;
    }
    return false;
  };
  for (std::uint64_t session : granted) {
    if (first_still < w.size() && distinct.count(session) == 0 && !orphan_left_ahead &&
        !ref_left(session)) {
      fail_(fifo_name(key), key_name(key) + ": newcomer session " + std::to_string(session) +
                                " was granted while session " + std::to_string(w[first_still]) +
                                " still waits");
      return false;
    }
  }
  return true;
}

}  // namespace turnstile::sim
