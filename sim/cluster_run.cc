#include "sim/cluster_run.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/log_entry.h"
#include "core/protocol.h"
#include "sim/checker.h"
#include "sim/digest.h"
#include "sim/prng.h"
#include "sim/raft_cluster.h"
#include "sim/settings.h"

namespace turnstile::sim {

namespace {

using core::Command;
using core::Request;
using core::SessionId;

constexpr std::uint64_t kSessions = 8;  // sessions 1..8

class ClusterRun {
 public:
  explicit ClusterRun(const Options& options)
      : options_(options),
        nodes_(options.profile == "cluster-5" ? 5U : 3U),
        work_(options.seed, kWorkload),
        faults_(options.seed, kFaults),
        cluster_(nodes_, options.seed) {}

  Result run() {
    result_.settings = "nodes=" + std::to_string(nodes_);
    for (std::uint64_t step = 0; step < options_.events && result_.ok; ++step) {
      const std::uint64_t dice = faults_.below(1000);
      if (dice < 20) {
        kill_one();
      } else if (dice < 45) {
        revive_one();
      } else if (dice < 60) {
        cut_one();
      } else if (dice < 80) {
        heal_links();
      } else {
        propose();
      }
      cluster_.step_for(static_cast<unsigned>(work_.between(0, 300)));
      ++result_.events_run;
      check();
    }
    if (result_.ok) heal_and_converge();
    result_.coverage["snapshot-taken"] = cluster_.snapshots_taken();
    result_.coverage["snapshot-restored"] = cluster_.snapshots_restored();
    result_.digest = digest_.value();
    return result_;
  }

 private:
  void fail(const std::string& invariant, const std::string& detail) {
    if (!result_.ok) return;
    result_.ok = false;
    result_.invariant = invariant;
    result_.detail = detail;
  }

  unsigned alive_count() const {
    unsigned alive = 0;
    for (unsigned i = 0; i < nodes_; ++i) alive += cluster_.alive(i) ? 1 : 0;
    return alive;
  }

  // Kills a live node (the leader half the time), keeping a majority alive most of the time.
  void kill_one() {
    const unsigned majority = nodes_ / 2 + 1;
    if (alive_count() <= majority && !faults_.chance(100)) return;
    std::optional<unsigned> victim = cluster_.leader();
    if (!victim || faults_.chance(500)) victim = static_cast<unsigned>(faults_.below(nodes_));
    if (!cluster_.alive(*victim)) return;
    cluster_.kill(*victim);
    digest_.add(0xdead00 + *victim);
    ++result_.coverage[*victim == leader_seen_ ? "kill-leader" : "kill-follower"];
    ++result_.crashes;
  }

  void revive_one() {
    const unsigned node = static_cast<unsigned>(faults_.below(nodes_));
    if (cluster_.alive(node)) return;
    cluster_.revive(node);
    digest_.add(0xa11e00 + node);
    ++result_.coverage["revive"];
  }

  void cut_one() {
    const unsigned a = static_cast<unsigned>(faults_.below(nodes_));
    const unsigned b = static_cast<unsigned>(faults_.below(nodes_));
    if (a == b) return;
    cluster_.disconnect(a, b);
    cut_.insert({std::min(a, b), std::max(a, b)});
    digest_.add(0xc0700 + a * 8 + b);
    ++result_.coverage["partition"];
  }

  void heal_links() {
    for (const auto& [a, b] : cut_) cluster_.reconnect(a, b);
    if (!cut_.empty()) ++result_.coverage["heal"];
    cut_.clear();
  }

  std::string pick_key(bool semaphore) {
    return (semaphore ? "s" : "k") + std::to_string(work_.below(3));
  }

  // Commands of one entry, as the leader's sessions would send them: at most one per session, and
  // none from a session whose request is parked (its session layer holds them back).
  std::vector<core::LogCommand> pick_commands(unsigned leader) {
    std::vector<core::LogCommand> commands;
    const core::Replica& replica = cluster_.replica(leader);
    if (const auto wake = replica.next_wake(); wake && *wake <= cluster_.now()) {
      commands.emplace_back(core::command::Tick{});
      ++result_.coverage["tick"];
    }
    std::set<std::uint64_t> used;
    const std::int64_t count = work_.between(1, 4);
    for (std::int64_t i = 0; i < count; ++i) {
      const SessionId session{work_.below(kSessions) + 1};
      if (!used.insert(session.value).second) continue;
      const bool parked = replica.engine().has_parked(session);
      const std::uint64_t dice = work_.below(1000);
      if (parked) {
        if (dice < 300) {
          commands.emplace_back(core::command::Cancel{session});
          ++result_.coverage["cancel"];
        } else if (dice < 400) {
          commands.emplace_back(close_of(session, work_.chance(700)));
        }
        continue;
      }
      if (dice < 40) {
        commands.emplace_back(close_of(session, work_.chance(700)));
        continue;
      }
      const bool semaphore = work_.chance(350);
      Request request;
      request.key = pick_key(semaphore);
      request.limit = semaphore ? 2 : 1;
      if (dice < 550) {
        request.command = semaphore ? Command::kSemLock : Command::kLock;
        request.timeout_s = work_.chance(400) ? 0 : work_.between(1, 3);
        request.lease_s = work_.between(1, 5);
      } else if (dice < 750 && !tokens_.empty()) {
        const auto& [key, token] = tokens_[work_.below(tokens_.size())];
        request.key = key;
        request.command = key[0] == 's' ? Command::kSemRelease : Command::kRelease;
        request.token = token;
      } else if (dice < 850 && !tokens_.empty()) {
        const auto& [key, token] = tokens_[work_.below(tokens_.size())];
        request.key = key;
        request.command = key[0] == 's' ? Command::kSemRenew : Command::kRenew;
        request.token = token;
        request.lease_s = work_.between(1, 5);
      } else if (dice < 930) {
        request.command = semaphore ? Command::kSemEnqueue : Command::kEnqueue;
        request.lease_s = work_.between(1, 5);
      } else {
        request.command = semaphore ? Command::kSemWait : Command::kWait;
        request.timeout_s = work_.between(0, 2);
      }
      request.ref = stable_ref_of(session);
      commands.emplace_back(core::command::Submit{session, request});
    }
    return commands;
  }

  // Sessions 1 to 4 carry a stable ref, two sessions to a ref, so that one session's orphans are
  // adopted by the other (docs/semantics.md, "Stable refs and orphans"); 5 to 8 carry none. Drawn
  // from the session, not the seed's streams.
  static std::string stable_ref_of(SessionId session) {
    return session.value <= 4 ? "ref " + std::to_string(session.value % 2) : std::string();
  }

  // A close with the leader's orphan time: 0 to 2 s, by session (0 keeps nothing).
  core::LogCommand close_of(SessionId session, bool auto_release) {
    ++result_.coverage["close"];
    if (!stable_ref_of(session).empty() && session.value % 3 != 0) ++result_.coverage["orphan"];
    return core::command::Close{
        session, auto_release,
        core::Duration::seconds(static_cast<std::int64_t>(session.value % 3))};
  }

  void propose() {
    const std::optional<unsigned> leader = cluster_.elect(1'000);
    if (!leader) {
      ++result_.coverage["no-leader"];
      return;
    }
    if (leader_seen_ != *leader) {
      leader_seen_ = *leader;
      ++result_.coverage["leader-change"];
      digest_.add(0x1ead00 + *leader);
    }
    std::vector<core::LogCommand> commands = pick_commands(*leader);
    if (commands.empty()) return;
    const std::uint64_t index = cluster_.propose(std::move(commands), work_.next());
    if (index == 0) {
      ++result_.coverage["refused"];
      return;
    }
    digest_.add(index);
    ++result_.coverage["proposed"];
  }

  // Checks every live replica after a step.
  void check() {
    if (cluster_.rejected() != 0) {
      fail("replica-rejected",
           std::to_string(cluster_.rejected()) + " entries or snapshots did not decode or restore");
      return;
    }
    for (unsigned node = 0; node < nodes_ && result_.ok; ++node) {
      if (!cluster_.alive(node)) continue;
      if (cluster_.shut_down(node)) {
        fail("raft-conflict", "node " + std::to_string(node) +
                                  " stopped: an entry it had committed was overwritten");
        return;
      }
      const core::Replica& replica = cluster_.replica(node);
      const std::uint64_t applied = replica.applied_index();
      // Replicas at one applied index hold one state.
      const std::uint64_t digest = replica.digest();
      auto [it, first] = digests_.try_emplace(applied, digest);
      if (!first && it->second != digest) {
        fail("replica-divergence", "node " + std::to_string(node) + " at applied entry " +
                                       std::to_string(applied) + " differs from another");
        return;
      }
      for (const core::Engine::ResourceView& view : replica.engine().inspect()) {
        if (static_cast<std::int64_t>(view.holders.size()) > view.limit) {
          fail("over-limit", key_name({view.ns, view.key}) + " has " +
                                 std::to_string(view.holders.size()) + " holders on node " +
                                 std::to_string(node));
          return;
        }
        check_holder_fences(node, view);
      }
      observe_grants(node);
    }
  }

  // Every grant a node's replica made, in the order it applied them: fences rise per key, and
  // every node sees the same grant at the same entry.
  void observe_grants(unsigned node) {
    std::uint64_t& seen = grants_checked_[node];
    const std::uint64_t applied = cluster_.applied(node);
    for (std::uint64_t index = seen + 1; index <= applied; ++index) {
      const core::AppliedEntry* entry = cluster_.result(node, index);
      if (entry == nullptr) continue;  // a barrier
      // The entry's grants in the order they were minted (replies and deliveries interleave).
      std::vector<core::Token> tokens;
      for (const core::CommandResult& result : entry->results) {
        if (result.reply.token) tokens.push_back(*result.reply.token);
      }
      for (const core::Delivery& delivery : entry->deliveries) {
        if (delivery.reply.token) tokens.push_back(*delivery.reply.token);
      }
      std::sort(tokens.begin(), tokens.end(),
                [](const core::Token& a, const core::Token& b) { return a.fence < b.fence; });
      for (const core::Token& token : tokens) note_grant(node, index, token);
    }
    seen = applied;
  }

  // A token a node reported (a reply or a delivery) or holds: every node must give a fence the
  // same salt, and the leader's workload may release or renew it later.
  void note_grant(unsigned node, std::uint64_t index, const core::Token& token) {
    auto [it, fresh] = fences_.try_emplace(token.fence.value, FenceSeen{index, token.salt});
    if (!fresh && it->second.salt != token.salt) {
      fail("replica-divergence", "node " + std::to_string(node) + " has fence " +
                                     std::to_string(token.fence.value) + " with another salt");
      return;
    }
    if (fresh) {
      ++result_.grants_seen;
      digest_.add(token.fence.value);
      digest_.add(token.salt);
      if (node == leader_seen_) remember_token(token);
    }
  }

  // Fences rise per key on every replica: a holder this node has not shown before on a key has a
  // fence above every holder it showed there before, across every failover.
  void check_holder_fences(unsigned node, const core::Engine::ResourceView& view) {
    KeyFences& fences = key_fences_[{node, view.ns, view.key}];
    for (const core::Engine::HolderView& holder : view.holders) {
      note_grant(node, cluster_.replica(node).applied_index(), holder.token);
      const std::uint64_t fence = holder.token.fence.value;
      if (fences.seen.count(fence) != 0) continue;
      if (fence <= fences.max) {
        fail("fence-order", key_name({view.ns, view.key}) + " on node " + std::to_string(node) +
                                " granted fence " + std::to_string(fence) + " after fence " +
                                std::to_string(fences.max));
        return;
      }
      fences.max = fence;
      fences.seen.insert(fence);
    }
  }

  void remember_token(const core::Token& token) {
    // Which key it is for is not in the token: the workload releases and renews it on a key of
    // the same kind, so a stale or foreign token is tried too.
    const bool semaphore = work_.chance(350);
    tokens_.push_back({pick_key(semaphore), token});
    if (tokens_.size() > 64) tokens_.erase(tokens_.begin(), tokens_.begin() + 32);
  }

  // Every fault heals; the replicas must all reach the same state.
  void heal_and_converge() {
    heal_links();
    for (unsigned node = 0; node < nodes_; ++node) {
      if (!cluster_.alive(node)) cluster_.revive(node);
    }
    // A revived node can unseat the leader once more while the cluster settles, and the entry
    // that leader proposed is then lost: a new leader gets the next of three tries.
    bool applied = false;
    for (int attempt = 0; attempt < 3 && !applied; ++attempt) {
      if (!cluster_.elect(30'000)) {
        fail("liveness", "no leader 30 s after every fault healed");
        return;
      }
      const std::uint64_t index = cluster_.propose({core::command::Tick{}}, work_.next());
      applied = index != 0 && cluster_.step_until_applied(index, 30'000);
    }
    if (!applied) {
      fail("liveness", "a healed cluster did not apply an entry within 30 s, three times");
      return;
    }
    check();
    const std::uint64_t digest = cluster_.replica(0).digest();
    for (unsigned node = 1; node < nodes_ && result_.ok; ++node) {
      if (cluster_.replica(node).digest() != digest) {
        fail("replica-divergence", "node " + std::to_string(node) + " differs after the heal");
      }
    }
    digest_.add(digest);
  }

  Options options_;
  unsigned nodes_;
  Prng work_;
  Prng faults_;
  RaftCluster cluster_;
  Digest digest_;
  Result result_;
  std::optional<unsigned> leader_seen_;
  std::set<std::pair<unsigned, unsigned>> cut_;
  std::map<std::uint64_t, std::uint64_t> digests_;  // applied index -> digest
  std::map<unsigned, std::uint64_t> grants_checked_;
  struct FenceSeen {
    std::uint64_t index = 0;  // the entry that minted it
    std::uint64_t salt = 0;
  };
  std::map<std::uint64_t, FenceSeen> fences_;  // every fence seen, by value
  struct KeyFences {
    std::uint64_t max = 0;
    std::set<std::uint64_t> seen;
  };
  std::map<std::tuple<unsigned, core::Namespace, std::string>, KeyFences> key_fences_;
  std::vector<std::pair<std::string, core::Token>> tokens_;
};

}  // namespace

bool is_cluster_profile(const std::string& profile) {
  return profile == "cluster-3" || profile == "cluster-5";
}

Result run_cluster_simulation(const Options& options) { return ClusterRun(options).run(); }

}  // namespace turnstile::sim
