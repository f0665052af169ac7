#include "sim/checker.h"

#include <algorithm>

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

}  // namespace

std::string key_name(const ResourceKey& key) {
  return std::string(key.first == Namespace::kLock ? "lock:" : "sem:") + key.second;
}

Checker::Checker(const Settings& settings, const bool& failed, std::uint64_t& grants_seen,
                 Fail fail)
    : settings_(settings), failed_(failed), grants_seen_(grants_seen), fail_(std::move(fail)) {}

void Checker::new_life(std::uint64_t life, bool across_lives) {
  life_ = life;
  across_lives_ = across_lives;
  seen_tokens_.clear();
  max_fence_life_.clear();
  previous_.assign(settings_.shards, {});
  forgotten_.clear();
}

void Checker::observe_grant(ResourceKey key, core::Token token, std::string path) {
  observed_.emplace_back(std::move(key), token);
  observed_paths_.push_back(std::move(path));
}

void Checker::clear_observed() {
  observed_.clear();
  observed_paths_.clear();
}

void Checker::check_engine(std::size_t shard, const core::Engine& engine, std::int64_t now) {
  if (failed_) return;
  std::map<ResourceKey, KeySnapshot> current;
  std::map<ResourceKey, std::vector<core::Token>> fresh;
  std::map<std::uint64_t, std::string> source;  // fence -> where the checker saw it first
  std::map<ResourceKey, std::set<std::uint64_t>> fresh_holders;  // sessions granted this call
  std::map<ResourceKey, std::map<std::uint64_t, std::string>> fresh_refs;  // their stable refs
  for (std::size_t i = 0; i < observed_.size(); ++i) {
    const auto& [key, token] = observed_[i];
    if (seen_tokens_.count({token.fence.value, token.salt}) == 0) {
      fresh[key].push_back(token);
      source[token.fence.value] = "a " + observed_paths_[i];
    }
  }
  observed_.clear();
  observed_paths_.clear();
  {
    for (const core::Engine::ResourceView& view : engine.inspect()) {
      const ResourceKey key{view.ns, view.key};
      if (core::shard_of(view.ns, view.key, settings_.shards) != shard) {
        fail_("routing", key_name(key) + " lives on shard " + std::to_string(shard));
        return;
      }
      std::int64_t live = 0;
      for (const auto& holder : view.holders) {
        if (holder.deadline > engine.now()) ++live;
        if (seen_tokens_.count({holder.token.fence.value, holder.token.salt}) == 0) {
          fresh[key].push_back(holder.token);
          source[holder.token.fence.value] =
              "a holder of session " + std::to_string(holder.session.value);
          fresh_holders[key].insert(holder.session.value);
          fresh_refs[key][holder.session.value] = holder.ref;
        }
        if (forgotten_.count(holder.session.value) != 0 && settings_.auto_release) {
          fail_("leak", key_name(key) + " held by forgotten session " +
                            std::to_string(holder.session.value));
          return;
        }
      }
      if (live > view.limit) {
        fail_("mutual-exclusion", key_name(key) + " has " + std::to_string(live) +
                                      " live holders, limit " + std::to_string(view.limit));
        return;
      }
      KeySnapshot& snapshot = current[key];
      snapshot.orphaned = view.waiters_orphaned;
      snapshot.refs = view.waiter_refs;
      for (SessionId waiter : view.waiters) {
        if (forgotten_.count(waiter.value) != 0) {
          fail_("leak", key_name(key) + " has a waiter of forgotten session " +
                            std::to_string(waiter.value));
          return;
        }
        snapshot.waiters.push_back(waiter.value);
      }
    }
  }
  // Fences: every new grant beats every earlier grant of the key.
  for (auto& [key, tokens] : fresh) {
    std::sort(tokens.begin(), tokens.end(),
              [](const core::Token& x, const core::Token& y) { return x.fence < y.fence; });
    tokens.erase(std::unique(tokens.begin(), tokens.end()), tokens.end());
    for (const core::Token& token : tokens) {
      const std::uint64_t fence = token.fence.value;
      std::uint64_t& life_max = max_fence_life_[key];
      std::uint64_t& ever_max = max_fence_ever_[key];
      if (fence <= life_max) {
        fail_("fence-monotonic", key_name(key) + " fence " + std::to_string(fence) + " (seen in " +
                                     source[fence] + " on shard " + std::to_string(shard) +
                                     ") after " + std::to_string(life_max) + " in life " +
                                     std::to_string(life_) + " at " + std::to_string(now));
        return;
      }
      if (across_lives_ && fence <= ever_max) {
        fail_("fence-monotonic-across-restarts", key_name(key) + " fence " + std::to_string(fence) +
                                                     " after " + std::to_string(ever_max) +
                                                     " from an earlier life");
        return;
      }
      life_max = fence;
      ever_max = std::max(ever_max, fence);
      seen_tokens_.insert({fence, token.salt});
      ++grants_seen_;
    }
  }
  // FIFO: a waiter is granted only after every waiter ahead of it left the queue.
  for (const auto& [key, before] : previous_[shard]) {
    const std::vector<std::uint64_t>& w = before.waiters;
    if (w.empty()) continue;
    std::set<std::uint64_t> distinct(w.begin(), w.end());
    if (distinct.size() != w.size()) continue;  // one session twice: ambiguous, skip
    auto it = current.find(key);
    const std::vector<std::uint64_t> empty;
    const std::vector<std::uint64_t>& r = it == current.end() ? empty : it->second.waiters;
    // Which of the earlier waiters are still waiting.
    // A session granted in this call that is in the queue again joined anew (a session may queue
    // behind its own grant: locks are not re-entrant), so it does not count as still waiting.
    const std::set<std::uint64_t>& granted = fresh_holders[key];
    std::set<std::uint64_t> still;
    for (std::uint64_t session : r) {
      if (granted.count(session) == 0) still.insert(session);
    }
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
        fail_("fifo", key_name(key) + ": session " + std::to_string(w[i]) +
                          " was granted while session " + std::to_string(w[first_still]) +
                          ", ahead of it, still waits; queue before " + join(w) + " after " +
                          join(r) + " at " + std::to_string(now));
        return;
      }
    }
    // A newcomer may have adopted an orphaned waiter's place ahead of the first that still waits
    // (docs/semantics.md, "Stable refs and orphans"): then its grant keeps the queue's order.
    bool orphan_left_ahead = false;
    for (std::size_t i = 0; i < first_still && i < before.orphaned.size(); ++i) {
      orphan_left_ahead = orphan_left_ahead || before.orphaned[i];
    }
    // A newcomer may have been handed a slot granted this step to a waiter of its own stable ref
    // whose session then closed.
    auto ref_left = [&](std::uint64_t session) {
      const std::string& ref = fresh_refs[key][session];
      if (ref.empty()) return false;
      for (std::size_t j = 0; j < w.size() && j < before.refs.size(); ++j) {
        if (still.count(w[j]) == 0 && before.refs[j] == ref) return true;
      }
      return false;
    };
    for (std::uint64_t session : granted) {
      if (first_still < w.size() && distinct.count(session) == 0 && !orphan_left_ahead &&
          !ref_left(session)) {
        fail_("fifo", key_name(key) + ": newcomer session " + std::to_string(session) +
                          " was granted while session " + std::to_string(w[first_still]) +
                          " still waits");
        return;
      }
    }
  }
  previous_[shard] = std::move(current);
}

}  // namespace turnstile::sim
