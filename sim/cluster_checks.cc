// ClusterRun's checks (sim/cluster_world.h): after every step, every live replica (one state per
// applied index, no resource over its limit, fences rising per key across every failover, one
// salt per fence); at the end, the heal: every request answered, every replica caught up and at
// one state, and the clients' history linearizable.
#include <algorithm>
#include <string>
#include <vector>

#include "core/protocol.h"
#include "sim/cluster_world.h"

namespace turnstile::sim {

// Checks every live replica after a step.
void ClusterRun::check() {
  if (cluster_.rejected() != 0) {
    fail("replica-rejected",
         std::to_string(cluster_.rejected()) + " entries or snapshots did not decode or restore");
    return;
  }
  for (unsigned node = 0; node < nodes_ && result_.ok; ++node) {
    if (cluster_.alive(node)) check_replica(node);
  }
  for (unsigned node = 0; node < nodes_ && result_.ok; ++node) {
    if (processes_[node] && !processes_[node]->anomalies().empty()) {
      fail("driver-contract",
           "node " + std::to_string(node) + ": " + processes_[node]->anomalies().front());
    }
  }
}

void ClusterRun::check_replica(unsigned node) {
  if (cluster_.shut_down(node)) {
    fail("raft-conflict",
         "node " + std::to_string(node) + " stopped: an entry it had committed was overwritten");
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
    // A read-write lock's limit (1) is its writer's; readers share it (the checkers of
    // on_applied hold a writer alone).
    if (view.ns != core::Namespace::kReadWrite &&
        static_cast<std::int64_t>(view.holders.size()) > view.limit) {
      fail("over-limit", key_name({view.ns, view.key}) + " has " +
                             std::to_string(view.holders.size()) + " holders on node " +
                             std::to_string(node));
      return;
    }
    check_holder_fences(node, view);
  }
  observe_grants(node);
}

// Every grant a node's replica made, in the order it applied them: fences rise per key, and
// every node sees the same grant at the same entry.
void ClusterRun::observe_grants(unsigned node) {
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
void ClusterRun::note_grant(unsigned node, std::uint64_t index, const core::Token& token) {
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
  }
}

// Fences rise per key on every replica: a holder this node has not shown before on a key has a
// fence above every holder it showed there before, across every failover.
void ClusterRun::check_holder_fences(unsigned node, const core::Engine::ResourceView& view) {
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

// Every fault heals and clients stop asking: within kHealedWaitMs every request is answered,
// and every replica reaches the same state.
void ClusterRun::heal_and_converge() {
  heal_links();
  for (unsigned node = 0; node < nodes_; ++node) revive(node);
  for (ClusterClient& client : clients_) client.stopped = true;
  const std::optional<unsigned> ready = cluster_.step_until_ready(30'000);
  if (!ready) {
    fail("liveness", "no leader ready 30 s after every fault healed");
    return;
  }
  if (wait_for_answers() && catch_up()) converge();
}

bool ClusterRun::wait_for_answers() {
  for (unsigned waited = 0; waited < kHealedWaitMs && waiting_client(); waited += 100) {
    cluster_.step_for(100);
  }
  const ClusterClient* client = waiting_client();
  if (client == nullptr) return true;
  const Outstanding& out = client->pending.front();
  fail("liveness", "client " + std::to_string(client->id) + " still waits for " +
                       TcpClientModel::describe(out) + " (sent at " +
                       std::to_string(out.sent_at / kNsPerMs) + " ms) on node " +
                       std::to_string(*client->node) + " " + std::to_string(kHealedWaitMs / 1000) +
                       " s after the heal");
  return false;
}

// A revived node can unseat the leader once more while the cluster settles: three tries for
// every replica to apply what a ready leader has.
bool ClusterRun::catch_up() {
  bool caught_up = false;
  for (int attempt = 0; attempt < 3 && !caught_up; ++attempt) {
    const std::optional<unsigned> leader = cluster_.step_until_ready(30'000);
    caught_up = leader && cluster_.step_until_applied(cluster_.last_index(*leader), 30'000) &&
                cluster_.ready(*leader);
  }
  if (caught_up) return true;
  std::string state;
  for (unsigned node = 0; node < nodes_; ++node) {
    state += "; node " + std::to_string(node) + (cluster_.alive(node) ? "" : " down") +
             (cluster_.ready(node) ? " ready" : "") + " term " +
             std::to_string(cluster_.term(node)) + " applied " +
             std::to_string(cluster_.applied(node)) + " last " +
             std::to_string(cluster_.last_index(node));
  }
  fail("liveness",
       "a healed cluster's replicas did not catch up with a leader in 30 s, three times" + state);
  return false;
}

// Every replica at the leader's last entry (the leader may still be proposing ticks: a few rounds
// until they all stand at one index) holds the same state. A node that refused to start is out of
// the cluster; the others are compared with the first that runs.
void ClusterRun::converge() {
  std::vector<unsigned> running;
  for (unsigned node = 0; node < nodes_; ++node) {
    if (refused_.count(node) == 0) running.push_back(node);
  }
  const unsigned first = running.front();
  bool level = false;
  for (int round = 0; round < 5 && !level && result_.ok; ++round) {
    std::uint64_t target = 0;
    for (unsigned node : running) target = std::max(target, cluster_.last_index(node));
    cluster_.step_until_applied(target, 10'000);
    level = true;
    for (unsigned node : running) {
      level = level && cluster_.applied(node) == cluster_.applied(first);
    }
  }
  if (!level) ++result_.coverage["converge-moving"];
  check();
  const std::uint64_t digest = cluster_.replica(first).digest();
  for (unsigned node : running) {
    if (!result_.ok) break;
    if (cluster_.applied(node) == cluster_.applied(first) &&
        cluster_.replica(node).digest() != digest) {
      fail("replica-divergence", "node " + std::to_string(node) + " differs after the heal");
    }
  }
  digest_.add(digest);
}

// What the clients saw, key by key, linearizes against the lock model (sim/history.h).
void ClusterRun::check_history() {
  const History::Outcome outcome = history_.check();
  result_.keys_checked = outcome.keys_checked;
  result_.inconclusive = outcome.inconclusive;
  result_.operations_checked = outcome.operations;
  if (!outcome.violation.empty()) fail(outcome.invariant, outcome.violation);
}

}  // namespace turnstile::sim
