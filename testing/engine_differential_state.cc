// EngineDifferential's state checks (testing/engine_differential.h): after a step, every
// resource's limit, queue, holders and lock-delay compared between the engine and the reference
// model, the engine's own invariants, and FIFO order across a step. The steps themselves and the
// comparison of replies, stats, losses and counters are in testing/engine_differential.cc.
#include <algorithm>
#include <string>
#include <vector>

#include "testing/engine_differential.h"

namespace turnstile::test::differential {

using core::Engine;
using core::Instant;
using core::Reply;
using core::SessionId;
using core::Token;

namespace {

std::string resource_name(const Engine::ResourceView& view) {
  switch (view.ns) {
    case core::Namespace::kLock:
      return "lock:" + view.key;
    case core::Namespace::kSemaphore:
      return "sem:" + view.key;
    case core::Namespace::kReadWrite:
      return "rw:" + view.key;
  }
  return view.key;
}

std::string format_modes(const std::vector<bool>& shared) {
  std::string text;
  for (bool reader : shared) text += reader ? " r" : " w";
  return text;
}

std::string format_sessions(const std::vector<SessionId>& sessions) {
  std::string text;
  for (SessionId s : sessions) text += " s" + std::to_string(s.value);
  return text;
}

}  // namespace

// The limit, queue and lock-delay of one resource, which both implementations name alike.
void EngineDifferential::compare_resource(const Engine::ResourceView& e,
                                          const Engine::ResourceView& m) const {
  check(e.limit == m.limit, [&] { return where() + ": " + resource_name(e) + " limit differs"; });
  check(e.waiters == m.waiters, [&] {
    return where() + ": " + resource_name(e) + " queue differs: engine [" +
           format_sessions(e.waiters) + " ], model [" + format_sessions(m.waiters) + " ]";
  });
  check(e.waiters_shared == m.waiters_shared, [&] {
    return where() + ": " + resource_name(e) + " queue modes differ: engine [" +
           format_modes(e.waiters_shared) + " ], model [" + format_modes(m.waiters_shared) + " ]";
  });
  check(e.waiters_since == m.waiters_since,
        [&] { return where() + ": " + resource_name(e) + " queue arrival times differ"; });
  check(e.delayed_until == m.delayed_until, [&] {
    return where() + ": " + resource_name(e) + " lock-delay differs: engine " +
           (e.delayed_until ? at(*e.delayed_until) : "none") + ", model " +
           (m.delayed_until ? at(*m.delayed_until) : "none");
  });
}

// The holders of one resource, with each engine token paired to the model's.
void EngineDifferential::compare_holders(const Engine::ResourceView& e,
                                         const Engine::ResourceView& m) const {
  std::vector<HolderRow> engine_rows;
  for (const auto& holder : e.holders) {
    check(holder.ns == e.ns && holder.key == e.key,
          [&] { return where() + ": engine holder listed under the wrong resource"; });
    std::optional<TokenKey> paired;
    auto it = engine_to_model_.find(key_of(holder.token));
    if (it != engine_to_model_.end()) paired = key_of(it->second);
    engine_rows.emplace_back(holder.session.value, holder.deadline.ns(), holder.token.fence.value,
                             paired, holder.shared);
  }
  std::vector<HolderRow> model_rows;
  for (const auto& holder : m.holders) {
    std::optional<TokenKey> paired;
    if (model_to_engine_.contains(key_of(holder.token))) paired = key_of(holder.token);
    model_rows.emplace_back(holder.session.value, holder.deadline.ns(), holder.token.fence.value,
                            paired, holder.shared);
  }
  std::sort(engine_rows.begin(), engine_rows.end());
  std::sort(model_rows.begin(), model_rows.end());
  check(engine_rows == model_rows, [&] {
    auto rows = [this](const std::vector<HolderRow>& list) {
      std::string text;
      for (const auto& [session, deadline, fence, paired, shared] : list) {
        text += " s" + std::to_string(session) + "/f" + std::to_string(fence) + "/until " +
                at(Instant::from_ns(deadline)) + (paired ? "" : "/unrevealed") +
                (shared ? "/read" : "");
      }
      return text;
    };
    return where() + ": " + resource_name(e) + " holders differ: engine [" + rows(engine_rows) +
           " ], model [" + rows(model_rows) + " ]";
  });
}

void EngineDifferential::compare_state() {
  if (options_.coverage != nullptr) count_step_coverage();
  compare_counters();

  const std::vector<Engine::ResourceView>& engine_view = view_;
  const std::vector<Engine::ResourceView> model_view = model_.inspect();
  auto names = [](const std::vector<Engine::ResourceView>& views) {
    std::string text;
    for (const auto& view : views) text += " " + resource_name(view);
    return text;
  };
  auto resources_differ = [&] {
    return where() + ": resources differ: engine" + names(engine_view) + "; model" +
           names(model_view);
  };
  check(engine_view.size() == model_view.size(), resources_differ);
  for (std::size_t r = 0; r < engine_view.size(); ++r) {
    const Engine::ResourceView& e = engine_view[r];
    const Engine::ResourceView& m = model_view[r];
    check(e.ns == m.ns && e.key == m.key, resources_differ);
    compare_resource(e, m);
    compare_holders(e, m);
  }

  // The harness's own bookkeeping of parked sessions agrees with the model.
  for (SessionId session : sessions_) {
    check(model_.is_parked(session) == parked_.contains(session), [&] {
      return where() + ": parked bookkeeping of s" + std::to_string(session.value) +
             " disagrees with the model";
    });
  }
}

// A token not seen before must carry a fence above every earlier one; `newest_seen` keeps the
// highest such fence of this step.
void EngineDifferential::check_fresh(const Token& token, const char* what,
                                     std::uint64_t& newest_seen) const {
  if (seen_tokens_.contains(key_of(token))) return;
  check(token.fence.value > max_fence_seen_, [&] {
    return where() + ": " + what + " " + short_token(token) + " is not above every earlier fence";
  });
  newest_seen = std::max(newest_seen, token.fence.value);
}

// One resource after the step: its holders within its limit, waiters only while the head is
// blocked, and holder fences in range, unique (`fences` collects them) and fresh. `settled`: no
// deadline of it may be left behind.
void EngineDifferential::check_resource_invariants(const Engine::ResourceView& view, bool settled,
                                                   std::set<std::uint64_t>& fences,
                                                   std::uint64_t& newest_seen) const {
  const core::Fence last = engine_.last_fence();
  const bool exhausted = last.value == kMaxFence;
  const bool read_write = view.ns == core::Namespace::kReadWrite;
  const auto readers = static_cast<std::int64_t>(std::count_if(
      view.holders.begin(), view.holders.end(), [](const auto& h) { return h.shared; }));
  const auto holders = static_cast<std::int64_t>(view.holders.size());
  // A read-write lock has readers or one writer; anything else has at most its limit.
  check(read_write ? readers == holders || holders == 1 : holders <= view.limit && readers == 0,
        [&] {
          return where() + ": " + resource_name(view) + " has " + std::to_string(holders) +
                 " holders (" + std::to_string(readers) + " readers) against its limit";
        });
  // Waiters queue only while the head cannot be granted: the resource is full, a writer holds
  // it or waits at the head behind readers, or a lock-delay holds the key.
  const bool head_blocked =
      view.waiters.empty() || view.delayed_until.has_value() ||
      (read_write ? holders > 0 && (readers < holders || !view.waiters_shared.front())
                  : holders == view.limit);
  check(head_blocked || exhausted, [&] {
    return where() + ": " + resource_name(view) + " has waiters its holders would admit";
  });
  for (const auto& holder : view.holders) {
    // A deadline saturated at the end of time cannot lie after `now` once time has run out.
    check(!settled || holder.deadline > engine_.now() || holder.deadline == Instant::max(), [&] {
      return where() + ": " + resource_name(view) + " holder s" +
             std::to_string(holder.session.value) + " outlived its lease deadline " +
             at(holder.deadline);
    });
    const std::uint64_t fence = holder.token.fence.value;
    check(fence <= last.value, [&] { return where() + ": holder fence above last_fence"; });
    check(fence > config_.fence_floor.value,
          [&] { return where() + ": holder fence not above the floor"; });
    check(fences.insert(fence).second, [&] { return where() + ": two holders share a fence"; });
    check_fresh(holder.token, "new token", newest_seen);
  }
}

// Invariants of the engine alone (engine.h), independent of the model.
void EngineDifferential::check_engine_invariants(
    const std::vector<Engine::ResourceView>& before,
    const std::map<SessionId, ResourceId>& parked_before,
    const std::map<SessionId, Reply>& deliveries, const std::optional<ResourceId>& requested,
    const std::optional<core::Command>& requested_command, const Reply& engine_reply) {
  const std::vector<Engine::ResourceView>& after = view_;
  const core::Fence last = engine_.last_fence();
  std::set<std::uint64_t> fences;
  std::uint64_t newest_seen = max_fence_seen_;
  // Deadlines may be left behind by deadlines_per_call, never on the resource a request named.
  const std::optional<Instant> wake = engine_.next_wake();
  const bool behind = wake && *wake <= engine_.now();
  for (const auto& view : after) {
    const bool settled =
        !behind || (requested && requested->ns == view.ns && requested->key == view.key);
    check_resource_invariants(view, settled, fences, newest_seen);
  }
  for (const auto& [session, reply] : deliveries) {
    if (reply.token) check_fresh(*reply.token, "delivered token", newest_seen);
  }
  if (engine_reply.token) check_fresh(*engine_reply.token, "granted token", newest_seen);
  for (const auto& view : after) {
    for (const auto& holder : view.holders) seen_tokens_.insert(key_of(holder.token));
  }
  for (const auto& [session, reply] : deliveries) {
    if (reply.token) seen_tokens_.insert(key_of(*reply.token));
  }
  if (engine_reply.token) seen_tokens_.insert(key_of(*engine_reply.token));
  max_fence_seen_ = newest_seen;

  check(last >= last_fence_, [&] { return where() + ": last_fence went backward"; });
  check(last.value - last_fence_.value == engine_.counters().grants - grants_, [&] {
    return where() + ": last_fence moved by a different amount than the grants counter";
  });
  last_fence_ = last;
  grants_ = engine_.counters().grants;

  check_fifo(before, parked_before, deliveries, requested, requested_command, engine_reply);
}

namespace {

std::vector<SessionId> queue_of(const std::vector<Engine::ResourceView>& views, core::Namespace ns,
                                const std::string& key) {
  for (const auto& view : views) {
    if (view.ns == ns && view.key == key) return view.waiters;
  }
  return std::vector<SessionId>{};
}

// True if `small` appears in order within `big` from index `from` on.
bool is_subsequence(const std::vector<SessionId>& small, const std::vector<SessionId>& big,
                    std::size_t from) {
  std::size_t j = from;
  for (SessionId s : small) {
    while (j < big.size() && big[j] != s) ++j;
    if (j == big.size()) return false;
    ++j;
  }
  return true;
}

}  // namespace

// FIFO: queues keep their order, and a waiter is granted only once every waiter ahead of it
// has left the queue.
void EngineDifferential::check_fifo(const std::vector<Engine::ResourceView>& before,
                                    const std::map<SessionId, ResourceId>& parked_before,
                                    const std::map<SessionId, Reply>& deliveries,
                                    const std::optional<ResourceId>& requested,
                                    const std::optional<core::Command>& requested_command,
                                    const Reply& engine_reply) const {
  for (const auto& view : view_) {
    const ResourceId id{view.ns, view.key};
    const std::vector<SessionId> old_queue = queue_of(before, view.ns, view.key);
    std::vector<SessionId> survivors = view.waiters;
    // The request of this step joins the tail when it is queued (e/se) or parks (l/sl).
    const bool appended =
        requested && *requested == id &&
        (engine_reply.status == core::Status::kQueued ||
         (engine_reply.status == core::Status::kParked && requested_command &&
          core::command_operation(*requested_command) == core::Operation::kAcquire));
    if (appended && !survivors.empty()) survivors.pop_back();
    check(is_subsequence(survivors, old_queue, 0),
          [&] { return where() + ": " + resource_name(view) + " queue reordered"; });
    for (const auto& [session, reply] : deliveries) {
      if (!reply.token) continue;
      auto parked_it = parked_before.find(session);
      if (parked_it == parked_before.end() || !(parked_it->second == id)) continue;
      auto last_position = std::find(old_queue.rbegin(), old_queue.rend(), session);
      check(last_position != old_queue.rend(), [&, granted = session] {
        return where() + ": " + resource_name(view) + " granted s" + std::to_string(granted.value) +
               ", which was not queued";
      });
      const auto position = static_cast<std::size_t>(old_queue.rend() - last_position) - 1;
      check(is_subsequence(survivors, old_queue, position + 1), [&, granted = session] {
        return where() + ": " + resource_name(view) + " granted s" + std::to_string(granted.value) +
               " ahead of a waiter still queued";
      });
    }
  }
}

}  // namespace turnstile::test::differential
