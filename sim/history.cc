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
  std::int64_t limit = 1;  // capacity a grant needs (kNever: unchecked)
  // A grant of a read-write lock: a read slot needs no writer holding, a write slot nobody
  // holding (`limit` is not used then).
  enum class Mode : std::uint8_t { kCounted, kRead, kWrite } mode = Mode::kCounted;
  std::int64_t owner_closed_at = kNever;  // the granting (or adopting) connection's close
  bool adoption = false;  // a renewal that also moves the holder to the op's connection
  std::uint64_t id = 0;
};

struct Holder {
  core::Token token;
  bool shared = false;                    // a read slot of a read-write lock
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

  // Whether `holder` stands in the way of `op`'s grant.
  static bool blocks(const LinOp& op, const Holder& holder) {
    return op.mode != LinOp::Mode::kRead || !holder.shared;
  }

  // Whether `op` can be granted beside the holders of `state`.
  static bool fits(const LinOp& op, const State& state) {
    switch (op.mode) {
      case LinOp::Mode::kCounted:
        return op.limit == kNever || static_cast<std::int64_t>(state.size()) < op.limit;
      case LinOp::Mode::kRead:
        return std::none_of(state.begin(), state.end(),
                            [](const Holder& holder) { return !holder.shared; });
      case LinOp::Mode::kWrite:
        return state.empty();
    }
    return false;
  }

  bool grant(const LinOp& op, std::int64_t point, State& state, std::size_t remaining) {
    if (op.mode != LinOp::Mode::kCounted && !fits(op, state)) {
      // A read-write lock: every holder in the way (every holder for a writer, the writer for a
      // reader) must have vanished first, whatever the order: the grant comes at the latest of
      // their earliest instants.
      State next;
      std::int64_t at = point;
      for (const Holder& holder : state) {
        if (blocks(op, holder)) {
          at = std::max(at, holder.removable_from);
        } else {
          next.push_back(holder);
        }
      }
      if (at > op.ret) return false;
      return grant(op, at, next, remaining);
    }
    if (fits(op, state)) {
      State next = state;
      Holder holder;
      holder.token = op.token;
      holder.shared = op.mode == LinOp::Mode::kRead;
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
  return core::command_operation(command) == core::Operation::kRelease;
}
bool is_renew(core::Command command) {
  return core::command_operation(command) == core::Operation::kRenew;
}
bool is_enqueue(core::Command command) {
  return core::command_operation(command) == core::Operation::kEnqueue;
}
bool is_wait(core::Command command) {
  return core::command_operation(command) == core::Operation::kWait;
}
bool is_acquire(core::Command command) {
  const core::Operation operation = core::command_operation(command);
  return operation == core::Operation::kAcquire || operation == core::Operation::kEnqueue ||
         operation == core::Operation::kWait;
}

std::string partition_name(core::Namespace ns, const std::string& key) {
  switch (ns) {
    case core::Namespace::kLock:
      return "lock:" + key;
    case core::Namespace::kSemaphore:
      return "sem:" + key;
    case core::Namespace::kReadWrite:
      return "rw:" + key;
  }
  return "?:" + key;
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

std::uint64_t History::force_release(core::Namespace ns, const std::string& key,
                                     std::uint64_t fence, std::int64_t now_ns) {
  forces_.push_back(Force{ns, key, fence, now_ns, std::nullopt, false});
  return forces_.size();
}

void History::force_answered(std::uint64_t id, std::int64_t now_ns, bool freed_none) {
  TS_ASSERT(id >= 1 && id <= forces_.size());
  forces_[id - 1].return_ns = now_ns;
  forces_[id - 1].freed_none = freed_none;
}

namespace {

using TokenId = std::pair<std::uint64_t, std::uint64_t>;  // (fence, salt)

TokenId token_id(const core::Token& token) { return {token.fence.value, token.salt}; }

History::Partition partition_of(const History::Operation& operation) {
  return {operation.life,
          {core::command_namespace(operation.request.command), operation.request.key}};
}

}  // namespace

bool History::adopted(
    const Operation& operation, std::size_t index,
    const std::map<std::pair<std::uint64_t, std::uint64_t>, std::size_t>& first_grant) const {
  auto it = first_grant.find({operation.token->fence.value, operation.token->salt});
  if (it == first_grant.end() || it->second == index) return false;
  const Operation& first = operations_[it->second];
  return !operation.request.ref.empty() && first.request.ref == operation.request.ref;
}

// The first grant of a token, in a partition's order checks.
struct History::Granted {
  std::int64_t call = 0;
  std::int64_t ret = 0;
  std::uint64_t fence = 0;
  std::size_t index = 0;
};

// A two-phase waiter known to be queued: an `e` answered `queued` and the `w` granted after it.
struct History::Queued {
  std::int64_t queued_at = 0;  // the `e`'s return
  std::uint64_t fence = 0;     // the `w`'s grant
  std::size_t enqueue = 0;     // the `e`'s index
};

// Two-phase waiters known to be queued: an `e` answered `queued` (at its return) whose next `w`
// on the same connection and key returned a token: it waited in the queue from then until that
// grant. Every later `w` of the connection and key ends the pairing.
std::map<History::Partition, std::vector<History::Queued>> History::queued_waiters(
    const std::map<std::pair<std::uint64_t, std::uint64_t>, std::size_t>& first_grant) const {
  std::map<Partition, std::vector<Queued>> queued;
  std::map<std::pair<std::uint64_t, Partition>, std::size_t> open;  // (connection, key) -> `e`
  for (std::size_t i = 0; i < operations_.size(); ++i) {
    const Operation& operation = operations_[i];
    if (!operation.return_ns) continue;
    const core::Command command = operation.request.command;
    const std::pair<std::uint64_t, Partition> at{operation.connection, partition_of(operation)};
    if (is_enqueue(command)) {
      if (operation.status == "queued" && operation.request.ref.empty()) {
        open[at] = i;
      } else {
        open.erase(at);
      }
    } else if (is_wait(command)) {
      auto it = open.find(at);
      if (it == open.end()) continue;
      const Operation& enqueue = operations_[it->second];
      if (operation.token &&
          core::is_shared_command(command) == core::is_shared_command(enqueue.request.command)) {
        auto first = first_grant.find({operation.token->fence.value, operation.token->salt});
        if (first != first_grant.end() && first->second == i) {
          queued[at.second].push_back(
              Queued{*enqueue.return_ns, operation.token->fence.value, it->second});
        }
      }
      open.erase(it);
    }
  }
  return queued;
}

// Fences follow real time: a grant whose request was sent after another grant's reply came back
// has the larger fence (requests under a stable ref aside, as below). `by_call` and `by_ret` are
// the partition's grants sorted by call and by return.
bool History::check_fence_order(const std::string& name, const std::vector<Granted>& by_call,
                                const std::vector<Granted>& by_ret, Outcome& outcome) const {
  std::size_t next = 0;
  const Granted* highest = nullptr;
  for (const Granted& later : by_call) {
    for (; next < by_ret.size() && by_ret[next].ret < later.call; ++next) {
      if (highest == nullptr || by_ret[next].fence > highest->fence) highest = &by_ret[next];
    }
    // An acquire under a stable ref may return a slot of its ref granted before (to a request
    // whose reply was lost): an adoption, with an older fence. Left out.
    if (highest != nullptr && later.fence <= highest->fence &&
        operations_[later.index].request.ref.empty()) {
      outcome.invariant = "observed-fence-order";
      outcome.violation =
          name + ": op " + std::to_string(later.index + 1) + " (" +
          std::string(core::command_name(operations_[later.index].request.command)) +
          ", called at " + std::to_string(later.call) + ") was granted fence " +
          std::to_string(later.fence) + ", not above fence " + std::to_string(highest->fence) +
          " of op " + std::to_string(highest->index + 1) + ", answered at " +
          std::to_string(highest->ret);
      return true;
    }
  }
  return false;
}

// FIFO as the clients see it: a request sent after a waiter was seen queued is granted after
// that waiter (on a read-write lock: no reader overtakes a queued writer). Requests under a
// stable ref are left out: they may adopt an orphaned place ahead of the waiter.
bool History::check_fifo(const std::string& name, const Partition& partition,
                         const std::vector<Granted>& by_call, std::vector<Queued>& ahead,
                         Outcome& outcome) const {
  std::sort(ahead.begin(), ahead.end(),
            [](const Queued& a, const Queued& b) { return a.queued_at < b.queued_at; });
  std::size_t seen = 0;
  const Queued* blocking = nullptr;
  for (const Granted& later : by_call) {
    for (; seen < ahead.size() && ahead[seen].queued_at < later.call; ++seen) {
      if (blocking == nullptr || ahead[seen].fence > blocking->fence) blocking = &ahead[seen];
    }
    if (operations_[later.index].request.ref.empty() && blocking != nullptr &&
        later.fence < blocking->fence) {
      const Operation& enqueue = operations_[blocking->enqueue];
      const bool read_write = partition.second.first == core::Namespace::kReadWrite;
      outcome.invariant = read_write ? "rw-fifo" : "fifo";
      outcome.violation =
          name + ": op " + std::to_string(later.index + 1) + " (" +
          std::string(core::command_name(operations_[later.index].request.command)) +
          ", called at " + std::to_string(later.call) + ") was granted fence " +
          std::to_string(later.fence) + " before op " + std::to_string(blocking->enqueue + 1) +
          " (" + std::string(core::command_name(enqueue.request.command)) +
          ", answered queued at " + std::to_string(blocking->queued_at) + ") was granted fence " +
          std::to_string(blocking->fence);
      return true;
    }
  }
  return false;
}

bool History::check_order(
    const std::map<std::pair<std::uint64_t, std::uint64_t>, std::size_t>& first_grant,
    Outcome& outcome) const {
  // The first grant of every token, per partition (an adoption or the `w` after an `e` that was
  // answered `acquired` returns an earlier token: not a grant of its own).
  std::map<Partition, std::vector<Granted>> grants;
  for (const auto& [token, index] : first_grant) {
    const Operation& operation = operations_[index];
    grants[partition_of(operation)].push_back(
        Granted{operation.call_ns, *operation.return_ns, token.first, index});
  }
  std::map<Partition, std::vector<Queued>> queued = queued_waiters(first_grant);
  for (auto& [partition, list] : grants) {
    const std::string name = partition_name(partition.second.first, partition.second.second) +
                             " in life " + std::to_string(partition.first);
    std::vector<Granted> by_ret = list;
    std::sort(list.begin(), list.end(),
              [](const Granted& a, const Granted& b) { return a.call < b.call; });
    std::sort(by_ret.begin(), by_ret.end(),
              [](const Granted& a, const Granted& b) { return a.ret < b.ret; });
    if (check_fence_order(name, list, by_ret, outcome)) return true;
    auto waiters = queued.find(partition);
    if (waiters == queued.end()) continue;
    if (check_fifo(name, partition, list, waiters->second, outcome)) return true;
  }
  return false;
}

namespace {

// The lease a request asked for (the default when it named none), in seconds.
std::int64_t asked_lease_s(const core::Request& request) {
  return request.lease_s > 0 ? request.lease_s : kDefaultLeaseS;
}

// The lease a grant or renew answered carries (the default when it named none), in ns.
std::int64_t answered_lease_ns(const History::Operation& operation) {
  return (operation.lease_s > 0 ? operation.lease_s : kDefaultLeaseS) * kNsPerS;
}

// `token` may vanish from `from` on (the earliest such instant counts).
void may_vanish(std::map<TokenId, std::int64_t>& lost_release_at, TokenId token,
                std::int64_t from) {
  auto [it, inserted] = lost_release_at.emplace(token, from);
  if (!inserted) it->second = std::min(it->second, from);
}

// The operations just before the one that broke linearizability, up to it (`bad` of them).
std::string listing_before(const std::vector<LinOp>& ops, std::size_t bad) {
  std::string listing;
  for (std::size_t i = bad > 24 ? bad - 24 : 0; i < bad; ++i) {
    const LinOp& op = ops[i];
    static const char* const kNames[] = {"grant", "release-ok", "release-error", "renew-ok",
                                         "renew-error"};
    listing += "\n  op " + std::to_string(op.id) + " " + kNames[static_cast<int>(op.kind)] +
               (op.adoption ? " (adoption)" : "") + " [" + std::to_string(op.call) + ", " +
               std::to_string(op.ret) + "] fence " + std::to_string(op.token.fence.value) +
               " lease_ns " + std::to_string(op.lease_ns) + " limit " + std::to_string(op.limit) +
               " owner_closed_at " + std::to_string(op.owner_closed_at);
  }
  return listing;
}

// Searches one partition's operations (sorted here by call); false, with `outcome` filled in,
// when they do not linearize.
bool check_partition(const History::Partition& partition, std::vector<LinOp>& ops,
                     const std::map<TokenId, std::int64_t>& lost_release_at,
                     History::Outcome& outcome) {
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
    outcome.violation = partition_name(partition.second.first, partition.second.second) +
                        " in life " + std::to_string(partition.first) + ": " +
                        std::to_string(count) + " operations do not linearize; the first " +
                        std::to_string(bad) +
                        " already do not, ending with:" + listing_before(ops, bad);
    return false;
  }
  return true;
}

}  // namespace

struct History::Facts {
  std::map<TokenId, std::int64_t> lost_release_at;
  // Tokens granted per partition: a release or renew of any other token is trivially `error`.
  std::map<Partition, std::set<TokenId>> granted;
  // Tokens `e` answered `acquired`: the `w` that follows returns the same token and restarts its
  // lease, which is a renewal, not a second grant.
  // (Only an `e` that was the token's first grant: a later `e` that returns it adopted it.)
  std::set<TokenId> acquired_by_enqueue;
  // The first answered acquire that returned each token. A later acquire returning the same
  // token under the same stable ref adopted the orphaned slot: a renewal with a fresh lease.
  std::map<TokenId, std::size_t> first_grant;
};

struct History::Linearized {
  std::map<Partition, std::vector<LinOp>> partitions;
};

History::Outcome History::check() const {
  Outcome outcome;
  Facts facts;
  note_answers(facts);
  note_forced(facts);
  note_adoptable(facts);
  if (check_order(facts.first_grant, outcome)) return outcome;
  Linearized linearized;
  for (std::size_t i = 0; i < operations_.size(); ++i) {
    if (!add_op(i, facts, linearized, outcome)) return outcome;
  }
  for (auto& [partition, ops] : linearized.partitions) {
    if (!check_partition(partition, ops, facts.lost_release_at, outcome)) return outcome;
  }
  return outcome;
}

void History::note_answers(Facts& facts) const {
  for (std::size_t i = 0; i < operations_.size(); ++i) {
    const Operation& operation = operations_[i];
    const Partition partition = partition_of(operation);
    if (!operation.return_ns) {
      // An unanswered release may have released its token from its call on; an unanswered renew
      // may have shortened its lease to what it asked for, from its call on.
      std::optional<std::int64_t> from;
      if (is_release(operation.request.command)) {
        from = operation.call_ns;
      } else if (is_renew(operation.request.command)) {
        from = saturating_add(operation.call_ns, asked_lease_s(operation.request) * kNsPerS);
      }
      if (from && operation.request.token) {
        may_vanish(facts.lost_release_at, token_id(*operation.request.token), *from);
      }
      continue;
    }
    if (is_acquire(operation.request.command) && operation.token) {
      facts.granted[partition].insert(token_id(*operation.token));
      const bool first = facts.first_grant.emplace(token_id(*operation.token), i).second;
      if (first && is_enqueue(operation.request.command)) {
        facts.acquired_by_enqueue.insert(token_id(*operation.token));
      }
    }
  }
}

// A force-release may have freed a holder of its key (of its fence, when it names one) from
// its call on, unless its answer came before that holder's acquire was called.
void History::note_forced(Facts& facts) const {
  for (const Force& force : forces_) {
    if (force.freed_none) continue;
    for (const Operation& operation : operations_) {
      if (!operation.token || !is_acquire(operation.request.command) ||
          core::command_namespace(operation.request.command) != force.ns ||
          operation.request.key != force.key ||
          (force.fence != 0 && operation.token->fence.value != force.fence) ||
          (force.return_ns && *force.return_ns < operation.call_ns)) {
        continue;
      }
      may_vanish(facts.lost_release_at, token_id(*operation.token), force.call_ns);
    }
  }
}

// An unanswered acquire under a stable ref, or an enqueue answered `queued` (a close can hand
// its ref's slot to it for its `w`), may have adopted any slot of its ref on its key with the
// lease it asked for (docs/semantics.md, "Stable refs and orphans"): those holders may vanish
// from its call plus that lease on.
void History::note_adoptable(Facts& facts) const {
  for (const Operation& unanswered : operations_) {
    const core::Command command = unanswered.request.command;
    const bool queued = is_enqueue(command) && unanswered.status == "queued";
    if ((unanswered.return_ns && !queued) || unanswered.request.ref.empty() ||
        !is_acquire(command)) {
      continue;
    }
    const std::int64_t from =
        saturating_add(unanswered.call_ns, asked_lease_s(unanswered.request) * kNsPerS);
    for (const auto& [token, index] : facts.first_grant) {
      const Operation& granted_op = operations_[index];
      if (granted_op.request.ref != unanswered.request.ref ||
          granted_op.request.key != unanswered.request.key ||
          core::command_namespace(granted_op.request.command) !=
              core::command_namespace(unanswered.request.command)) {
        continue;
      }
      may_vanish(facts.lost_release_at, token, from);
    }
  }
}

bool History::add_op(std::size_t i, Facts& facts, Linearized& linearized, Outcome& outcome) const {
  const Operation& operation = operations_[i];
  if (!operation.return_ns) return true;
  const Partition partition = partition_of(operation);
  LinOp op;
  op.call = operation.call_ns;
  op.ret = *operation.return_ns;
  op.id = i + 1;
  const core::Command command = operation.request.command;
  const bool two_phase_wait = is_wait(command);
  const bool read_write = core::command_namespace(command) == core::Namespace::kReadWrite;
  if (operation.token && is_acquire(command) && adopted(operation, i, facts.first_grant)) {
    op.kind = Kind::kRenewOk;
    op.adoption = true;
    op.token = *operation.token;
    op.lease_ns = answered_lease_ns(operation);
    auto closed = closed_at_.find(operation.connection);
    if (closed != closed_at_.end()) op.owner_closed_at = closed->second;
  } else if (two_phase_wait && operation.token &&
             facts.acquired_by_enqueue.count(token_id(*operation.token)) != 0) {
    op.kind = Kind::kRenewOk;
    op.token = *operation.token;
    op.lease_ns = answered_lease_ns(operation);
  } else if (is_acquire(command)) {
    // timeout, queued, error (also for want of a durable fence): a definite non-grant.
    if (!operation.token) return true;
    op.kind = Kind::kGrant;
    op.token = *operation.token;
    op.lease_ns = answered_lease_ns(operation);
    op.limit = two_phase_wait ? kNever : operation.request.limit;
    if (read_write) {
      op.mode = core::is_shared_command(command) ? LinOp::Mode::kRead : LinOp::Mode::kWrite;
    }
    auto closed = closed_at_.find(operation.connection);
    if (closed != closed_at_.end()) op.owner_closed_at = closed->second;
  } else if (is_release(command) || is_renew(command)) {
    if (!operation.request.token) return true;
    const core::Token token = *operation.request.token;
    const bool ok = operation.status == "ok";
    if (!ok && facts.granted[partition].count(token_id(token)) == 0) return true;
    if (read_write) {
      switch (check_kind(operation, partition, facts, outcome)) {
        case KindCheck::kSame:
          break;
        case KindCheck::kOther:
          return true;
        case KindCheck::kBroken:
          return false;
      }
    }
    op.token = token;
    if (is_release(command)) {
      op.kind = ok ? Kind::kReleaseOk : Kind::kReleaseError;
    } else {
      op.kind = ok ? Kind::kRenewOk : Kind::kRenewError;
      op.lease_ns = (ok && operation.lease_s > 0 ? operation.lease_s : kDefaultLeaseS) * kNsPerS;
    }
  } else {
    return true;
  }
  linearized.partitions[partition].push_back(op);
  return true;
}

// `rr`/`rn` name only read slots, `wr`/`wn` only write slots: one of the other kind is
// answered `error` and changes nothing, so the model skips it.
History::KindCheck History::check_kind(const Operation& operation, const Partition& partition,
                                       const Facts& facts, Outcome& outcome) const {
  const core::Command command = operation.request.command;
  const core::Token token = *operation.request.token;
  auto first = facts.first_grant.find(token_id(token));
  if (first == facts.first_grant.end() ||
      core::is_shared_command(operations_[first->second].request.command) ==
          core::is_shared_command(command)) {
    return KindCheck::kSame;
  }
  if (operation.status != "ok") return KindCheck::kOther;
  outcome.invariant = "rw-kind";
  outcome.violation = partition_name(partition.second.first, partition.second.second) + ": " +
                      std::string(core::command_name(command)) + " of fence " +
                      std::to_string(token.fence.value) + ", granted by " +
                      std::string(core::command_name(operations_[first->second].request.command)) +
                      ", was answered ok";
  return KindCheck::kBroken;
}

}  // namespace turnstile::sim
