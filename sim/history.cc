#include "sim/history.h"

#include <algorithm>
#include <limits>
#include <set>
#include <string_view>
#include <utility>

#include "core/assert.h"

namespace turnstile::sim {
namespace {

constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kNsPerS = 1'000'000'000;
constexpr std::int64_t kDefaultLeaseS = 33;  // core::EngineConfig's default, which the sim uses
constexpr std::uint64_t kStepBudget = 200'000;

enum class Kind : std::uint8_t { kGrant, kReleaseOk, kReleaseError, kRenewOk, kRenewError };

struct LinOp {
  std::int64_t call = 0;
  std::int64_t ret = 0;
  Kind kind = Kind::kGrant;
  core::Token token;
  std::int64_t lease_ns = 0;
  std::int64_t limit = 1;                 // capacity a grant needs (kNever: unchecked)
  std::int64_t owner_closed_at = kNever;  // the granting (or adopting) connection's close
  bool adoption = false;  // a renewal that also moves the holder to the op's connection
  std::uint64_t id = 0;
};

struct Holder {
  core::Token token;
  std::int64_t removable_from = kNever;   // the holder may vanish at or after this instant
  std::int64_t owner_closed_at = kNever;  // its owner's connection closed then (auto-release)
  bool operator<(const Holder& other) const {
    return std::pair(token.fence.value, token.salt) <
           std::pair(other.token.fence.value, other.token.salt);
  }
};

using State = std::vector<Holder>;  // sorted by token

std::int64_t saturating_add(std::int64_t a, std::int64_t b) {
  return a > kNever - b ? kNever : a + b;
}

class Search {
 public:
  Search(std::vector<LinOp> ops,
         const std::map<std::pair<std::uint64_t, std::uint64_t>, std::int64_t>& lost_release_at)
      : ops_(std::move(ops)), lost_release_at_(lost_release_at), done_(ops_.size(), false) {}

  // 1: linearizable, 0: not, -1: budget exhausted.
  int run() {
    State state;
    const bool ok = dfs(state, std::numeric_limits<std::int64_t>::min(), ops_.size());
    if (steps_ > kStepBudget) return -1;
    return ok ? 1 : 0;
  }

 private:
  std::int64_t removable(const core::Token& token, std::int64_t from) const {
    auto it = lost_release_at_.find({token.fence.value, token.salt});
    return it == lost_release_at_.end() ? from : std::min(from, it->second);
  }

  std::string memo_key(const State& state, std::int64_t t) const {
    std::string key;
    key.reserve(done_.size() / 8 + 16 + state.size() * 24);
    unsigned char byte = 0;
    for (std::size_t i = 0; i < done_.size(); ++i) {
      if (done_[i]) byte = static_cast<unsigned char>(byte | (1u << (i % 8)));
      if (i % 8 == 7 || i + 1 == done_.size()) {
        key.push_back(static_cast<char>(byte));
        byte = 0;
      }
    }
    auto append = [&](std::uint64_t value) {
      key.append(reinterpret_cast<const char*>(&value), sizeof value);
    };
    append(static_cast<std::uint64_t>(t));
    for (const Holder& holder : state) {
      append(holder.token.fence.value);
      append(holder.token.salt);
      append(static_cast<std::uint64_t>(holder.removable_from));
      append(static_cast<std::uint64_t>(holder.owner_closed_at));
    }
    return key;
  }

  bool dfs(State& state, std::int64_t t, std::size_t remaining) {
    if (remaining == 0) return true;
    if (++steps_ > kStepBudget) return true;  // give up (reported as inconclusive)
    std::string key = memo_key(state, t);
    if (failed_.count(key) != 0) return false;
    std::int64_t min_ret = kNever;
    for (std::size_t i = 0; i < ops_.size(); ++i) {
      if (!done_[i]) min_ret = std::min(min_ret, ops_[i].ret);
    }
    for (std::size_t i = 0; i < ops_.size(); ++i) {
      if (done_[i]) continue;
      const LinOp& op = ops_[i];
      if (op.call > min_ret) break;  // sorted by call
      const std::int64_t point = std::max(t, op.call);
      if (point > op.ret) continue;
      done_[i] = true;
      if (try_op(op, point, state, remaining)) return true;
      done_[i] = false;
    }
    failed_.insert(std::move(key));
    return false;
  }

  // Applies `op` at `point` (or later, when a holder must have vanished first) and recurses.
  bool try_op(const LinOp& op, std::int64_t point, State& state, std::size_t remaining) {
    auto find = [&](const core::Token& token) {
      return std::find_if(state.begin(), state.end(),
                          [&](const Holder& holder) { return holder.token == token; });
    };
    auto it = find(op.token);
    switch (op.kind) {
      case Kind::kGrant: {
        if (it != state.end()) return false;  // a token is granted once
        return grant(op, point, state, remaining);
      }
      case Kind::kReleaseOk:
      case Kind::kRenewOk: {
        if (it == state.end()) return false;
        State next = state;
        auto held = next.begin() + (it - state.begin());
        if (op.kind == Kind::kReleaseOk) {
          next.erase(held);
        } else {
          if (op.adoption) held->owner_closed_at = op.owner_closed_at;
          held->removable_from = std::min(
              removable(held->token, saturating_add(point, op.lease_ns)), held->owner_closed_at);
        }
        return dfs(next, point, remaining - 1);
      }
      case Kind::kReleaseError:
      case Kind::kRenewError: {
        if (it == state.end()) return dfs(state, point, remaining - 1);
        // Held in the model: it must have vanished first (lease end, close, lost release).
        const std::int64_t at = std::max(point, it->removable_from);
        if (at > op.ret) return false;
        State next = state;
        next.erase(next.begin() + (it - state.begin()));
        return dfs(next, at, remaining - 1);
      }
    }
    return false;
  }

  bool grant(const LinOp& op, std::int64_t point, State& state, std::size_t remaining) {
    if (op.limit == kNever || static_cast<std::int64_t>(state.size()) < op.limit) {
      State next = state;
      Holder holder;
      holder.token = op.token;
      holder.removable_from =
          std::min(removable(op.token, saturating_add(point, op.lease_ns)), op.owner_closed_at);
      holder.owner_closed_at = op.owner_closed_at;
      next.insert(std::upper_bound(next.begin(), next.end(), holder), holder);
      return dfs(next, point, remaining - 1);
    }
    // Full: some holder must have vanished first. Try each, at the earliest instant it may.
    for (std::size_t h = 0; h < state.size(); ++h) {
      const std::int64_t at = std::max(point, state[h].removable_from);
      if (at > op.ret) continue;
      State next = state;
      next.erase(next.begin() + static_cast<std::ptrdiff_t>(h));
      if (grant(op, at, next, remaining)) return true;
    }
    return false;
  }

  std::vector<LinOp> ops_;
  const std::map<std::pair<std::uint64_t, std::uint64_t>, std::int64_t>& lost_release_at_;
  std::vector<bool> done_;
  std::set<std::string> failed_;
  std::uint64_t steps_ = 0;
};

bool is_release(core::Command command) {
  return command == core::Command::kRelease || command == core::Command::kSemRelease;
}
bool is_renew(core::Command command) {
  return command == core::Command::kRenew || command == core::Command::kSemRenew;
}
bool is_acquire(core::Command command) {
  using core::Command;
  return command == Command::kLock || command == Command::kSemLock ||
         command == Command::kEnqueue || command == Command::kSemEnqueue ||
         command == Command::kWait || command == Command::kSemWait;
}

}  // namespace

std::uint64_t History::call(std::uint64_t client, std::uint64_t connection,
                            const core::Request& request, std::int64_t now_ns) {
  Operation operation;
  operation.client = client;
  operation.connection = connection;
  operation.life = life_;
  operation.request = request;
  operation.call_ns = now_ns;
  operations_.push_back(std::move(operation));
  return operations_.size();
}

void History::complete(std::uint64_t op, std::int64_t now_ns, const std::string& status,
                       std::optional<core::Token> token, std::int64_t seconds) {
  TS_ASSERT(op >= 1 && op <= operations_.size());
  Operation& operation = operations_[op - 1];
  operation.return_ns = now_ns;
  operation.status = status;
  operation.token = token;
  operation.lease_s = seconds;
}

void History::widen_call(std::uint64_t op, std::int64_t call_ns) {
  TS_ASSERT(op >= 1 && op <= operations_.size());
  Operation& operation = operations_[op - 1];
  operation.call_ns = std::min(operation.call_ns, call_ns);
}

void History::connection_closed(std::uint64_t connection, std::int64_t now_ns) {
  closed_at_.emplace(connection, now_ns);
}

bool History::adopted(
    const Operation& operation, std::size_t index,
    const std::map<std::pair<std::uint64_t, std::uint64_t>, std::size_t>& first_grant) const {
  auto it = first_grant.find({operation.token->fence.value, operation.token->salt});
  if (it == first_grant.end() || it->second == index) return false;
  const Operation& first = operations_[it->second];
  return !operation.request.ref.empty() && first.request.ref == operation.request.ref;
}

History::Outcome History::check() const {
  Outcome outcome;
  using Partition = std::pair<std::uint64_t, std::pair<core::Namespace, std::string>>;
  std::map<Partition, std::vector<LinOp>> partitions;
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::int64_t> lost_release_at;
  // Tokens granted per partition: a release or renew of any other token is trivially `error`.
  std::map<Partition, std::set<std::pair<std::uint64_t, std::uint64_t>>> granted;
  // Tokens `e` answered `acquired`: the `w` that follows returns the same token and restarts its
  // lease, which is a renewal, not a second grant.
  // (Only an `e` that was the token's first grant: a later `e` that returns it adopted it.)
  std::set<std::pair<std::uint64_t, std::uint64_t>> acquired_by_enqueue;
  // The first answered acquire that returned each token. A later acquire returning the same
  // token under the same stable ref adopted the orphaned slot: a renewal with a fresh lease.
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::size_t> first_grant;
  for (std::size_t i = 0; i < operations_.size(); ++i) {
    const Operation& operation = operations_[i];
    const Partition partition{
        operation.life,
        {core::command_namespace(operation.request.command), operation.request.key}};
    if (!operation.return_ns) {
      // An unanswered release may have released its token from its call on; an unanswered renew
      // may have shortened its lease to what it asked for, from its call on.
      std::optional<std::int64_t> from;
      if (is_release(operation.request.command)) {
        from = operation.call_ns;
      } else if (is_renew(operation.request.command)) {
        const std::int64_t lease_s =
            operation.request.lease_s > 0 ? operation.request.lease_s : kDefaultLeaseS;
        from = saturating_add(operation.call_ns, lease_s * kNsPerS);
      }
      if (from && operation.request.token) {
        const auto token =
            std::pair(operation.request.token->fence.value, operation.request.token->salt);
        auto [it, inserted] = lost_release_at.emplace(token, *from);
        if (!inserted) it->second = std::min(it->second, *from);
      }
      continue;
    }
    if (is_acquire(operation.request.command) && operation.token) {
      granted[partition].insert({operation.token->fence.value, operation.token->salt});
      const bool first =
          first_grant.emplace(std::pair(operation.token->fence.value, operation.token->salt), i)
              .second;
      const core::Command command = operation.request.command;
      if (first && (command == core::Command::kEnqueue || command == core::Command::kSemEnqueue)) {
        acquired_by_enqueue.insert({operation.token->fence.value, operation.token->salt});
      }
    }
  }
  // An unanswered acquire under a stable ref, or an enqueue answered `queued` (a close can hand
  // its ref's slot to it for its `w`), may have adopted any slot of its ref on its key with the
  // lease it asked for (docs/semantics.md, "Stable refs and orphans"): those holders may vanish
  // from its call plus that lease on.
  for (const Operation& unanswered : operations_) {
    const core::Command command = unanswered.request.command;
    const bool queued =
        (command == core::Command::kEnqueue || command == core::Command::kSemEnqueue) &&
        unanswered.status == "queued";
    if ((unanswered.return_ns && !queued) || unanswered.request.ref.empty() ||
        !is_acquire(command)) {
      continue;
    }
    const std::int64_t lease_s =
        unanswered.request.lease_s > 0 ? unanswered.request.lease_s : kDefaultLeaseS;
    const std::int64_t from = saturating_add(unanswered.call_ns, lease_s * kNsPerS);
    for (const auto& [token, index] : first_grant) {
      const Operation& granted_op = operations_[index];
      if (granted_op.request.ref != unanswered.request.ref ||
          granted_op.request.key != unanswered.request.key ||
          core::command_namespace(granted_op.request.command) !=
              core::command_namespace(unanswered.request.command)) {
        continue;
      }
      auto [it, inserted] = lost_release_at.emplace(token, from);
      if (!inserted) it->second = std::min(it->second, from);
    }
  }
  for (std::size_t i = 0; i < operations_.size(); ++i) {
    const Operation& operation = operations_[i];
    if (!operation.return_ns) continue;
    const Partition partition{
        operation.life,
        {core::command_namespace(operation.request.command), operation.request.key}};
    LinOp op;
    op.call = operation.call_ns;
    op.ret = *operation.return_ns;
    op.id = i + 1;
    const core::Command command = operation.request.command;
    const bool is_wait = command == core::Command::kWait || command == core::Command::kSemWait;
    if (operation.token && is_acquire(command) && adopted(operation, i, first_grant)) {
      op.kind = Kind::kRenewOk;
      op.adoption = true;
      op.token = *operation.token;
      op.lease_ns = (operation.lease_s > 0 ? operation.lease_s : kDefaultLeaseS) * kNsPerS;
      auto closed = closed_at_.find(operation.connection);
      if (closed != closed_at_.end()) op.owner_closed_at = closed->second;
    } else if (is_wait && operation.token &&
               acquired_by_enqueue.count({operation.token->fence.value, operation.token->salt}) !=
                   0) {
      op.kind = Kind::kRenewOk;
      op.token = *operation.token;
      op.lease_ns = (operation.lease_s > 0 ? operation.lease_s : kDefaultLeaseS) * kNsPerS;
    } else if (is_acquire(command)) {
      // timeout, queued, error (also for want of a durable fence): a definite non-grant.
      if (!operation.token) continue;
      op.kind = Kind::kGrant;
      op.token = *operation.token;
      op.lease_ns = (operation.lease_s > 0 ? operation.lease_s : kDefaultLeaseS) * kNsPerS;
      const bool two_phase_wait =
          command == core::Command::kWait || command == core::Command::kSemWait;
      op.limit = two_phase_wait ? kNever : operation.request.limit;
      auto closed = closed_at_.find(operation.connection);
      if (closed != closed_at_.end()) op.owner_closed_at = closed->second;
    } else if (is_release(command) || is_renew(command)) {
      if (!operation.request.token) continue;
      const core::Token token = *operation.request.token;
      const bool ok = operation.status == "ok";
      if (!ok && granted[partition].count({token.fence.value, token.salt}) == 0) continue;
      op.token = token;
      if (is_release(command)) {
        op.kind = ok ? Kind::kReleaseOk : Kind::kReleaseError;
      } else {
        op.kind = ok ? Kind::kRenewOk : Kind::kRenewError;
        op.lease_ns = (ok && operation.lease_s > 0 ? operation.lease_s : kDefaultLeaseS) * kNsPerS;
      }
    } else {
      continue;
    }
    partitions[partition].push_back(op);
  }
  for (auto& [partition, ops] : partitions) {
    std::stable_sort(ops.begin(), ops.end(),
                     [](const LinOp& a, const LinOp& b) { return a.call < b.call; });
    ++outcome.keys_checked;
    outcome.operations += ops.size();
    const std::size_t count = ops.size();
    const int verdict = Search(ops, lost_release_at).run();
    if (verdict < 0) {
      ++outcome.inconclusive;
    } else if (verdict == 0) {
      // The shortest prefix (by call) that does not linearize ends at the operation that broke
      // it: list the operations just before it, up to it.
      std::size_t good = 0;  // a prefix that linearizes (or is undecided)
      std::size_t bad = count;
      while (bad - good > 1) {
        const std::size_t middle = good + (bad - good) / 2;
        const std::vector<LinOp> prefix(ops.begin(), ops.begin() + static_cast<long>(middle));
        (Search(prefix, lost_release_at).run() == 0 ? bad : good) = middle;
      }
      std::string listing;
      for (std::size_t i = bad > 24 ? bad - 24 : 0; i < bad; ++i) {
        const LinOp& op = ops[i];
        static const char* const kNames[] = {"grant", "release-ok", "release-error", "renew-ok",
                                             "renew-error"};
        listing += "\n  op " + std::to_string(op.id) + " " + kNames[static_cast<int>(op.kind)] +
                   (op.adoption ? " (adoption)" : "") + " [" + std::to_string(op.call) + ", " +
                   std::to_string(op.ret) + "] fence " + std::to_string(op.token.fence.value) +
                   " lease_ns " + std::to_string(op.lease_ns) + " limit " +
                   std::to_string(op.limit) + " owner_closed_at " +
                   std::to_string(op.owner_closed_at);
      }
      outcome.violation =
          std::string(partition.second.first == core::Namespace::kLock ? "lock:" : "sem:") +
          partition.second.second + " in life " + std::to_string(partition.first) + ": " +
          std::to_string(count) + " operations do not linearize; the first " + std::to_string(bad) +
          " already do not, ending with:" + listing;
      return outcome;
    }
  }
  return outcome;
}

}  // namespace turnstile::sim
