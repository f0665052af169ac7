// ClusterRun's faults (sim/cluster_world.h): kills (the leader half the time), crashes onto
// disks that may be damaged meanwhile, revivals and restarts, cut and healed links.
#include <algorithm>
#include <cstdio>
#include <iterator>
#include <string>
#include <tuple>

#include "core/acked_index.h"
#include "sim/cluster_world.h"

namespace turnstile::sim {

unsigned ClusterRun::alive_count() const {
  unsigned alive = 0;
  for (unsigned i = 0; i < nodes_; ++i) alive += cluster_.alive(i) ? 1 : 0;
  return alive;
}

// Kills a live node (the leader half the time), keeping a majority alive most of the time. Its
// process dies with it: its clients' connections break.
void ClusterRun::kill_one() {
  const unsigned majority = nodes_ / 2 + 1;
  if (alive_count() <= majority && !faults_.chance(100)) return;
  std::optional<unsigned> victim = cluster_.leader();
  if (!victim || faults_.chance(500)) victim = static_cast<unsigned>(faults_.below(nodes_));
  if (!cluster_.alive(*victim)) return;
  ++result_.coverage[cluster_.ready(*victim) ? "kill-leader" : "kill-follower"];
  // Half the kills stop the process with its memory (SIGSTOP, a cut network); half end it, and
  // it starts again later from its disk, which may be damaged meanwhile.
  if (disk_.chance(500)) {
    cluster_.crash(*victim);
    ++result_.coverage["crash"];
    if (options_.trace) {
      std::printf("%lld node %u crashed\n", static_cast<long long>(now_ns() / kNsPerMs), *victim);
    }
    damage_disk(*victim);
  } else {
    cluster_.kill(*victim);
  }
  if (options_.trace)
    std::printf("%lld node %u killed\n", static_cast<long long>(now_ns() / kNsPerMs), *victim);
  processes_[*victim].reset();
  for (ClusterClient& client : clients_) {
    if (client.node == *victim) connection_lost(client);
  }
  digest_.add(0xdead00 + *victim);
  ++result_.crashes;
}

void ClusterRun::revive(unsigned node) {
  if (cluster_.alive(node) || refused_.count(node) != 0) return;
  if (cluster_.crashed(node)) {
    if (!restart(node)) return;
  } else {
    cluster_.revive(node);
  }
  processes_[node] = start_process(node);
  digest_.add(0xa11e00 + node);
  ++result_.coverage["revive"];
}

// While a crashed node is down, its disk may take the damage turnstiled's can (docs/cluster.md,
// "A damaged raft directory"): acknowledged entries lost (a flipped byte or a cut in their
// batch), the newest snapshot cut short, or only a tail it never acknowledged lost (a write torn
// by the crash). A node that lost what it acknowledged must refuse to start; as many nodes may
// be lost so as a majority stays.
// The index of the entry `disk`'s acknowledged-index record holds (0 for none).
std::uint64_t ClusterRun::recorded(const RaftDisk& disk) {
  const core::SlotRecovery recovery = core::recover_slots(core::kAckedFormat, disk.record_file());
  if (recovery.outcome == core::SlotRecovery::Outcome::kRefused) return 0;
  return core::AckedIndex(recovery).durable().index;
}

void ClusterRun::damage_disk(unsigned node) {
  if (!disk_.chance(250)) return;
  RaftDisk& disk = cluster_.disk(node);
  // Raft's own view, not the record's: the damage must not depend on what it is meant to catch.
  const std::uint64_t acked = cluster_.acknowledged(node);
  const std::uint64_t above =
      std::max<std::uint64_t>(disk.snapshot_index().value_or(0), disk.first_index() - 1);
  const std::uint64_t last = disk.last_index();
  const bool may_lose_node = refused_.size() + damaged_.size() < (nodes_ - 1) / 2;
  const std::uint64_t kind = disk_.below(3);
  std::string what;
  if (may_lose_node && kind == 0 && std::min(acked, last) > above) {
    const std::uint64_t from = above + 1 + disk_.below(std::min(acked, last) - above);
    disk.lose_from(from);
    what = "lost acknowledged entries from " + std::to_string(from);
    damaged_.insert(node);
  } else if (may_lose_node && kind == 1 && disk.cut_snapshot()) {
    what = "snapshot cut short";
    damaged_.insert(node);
  } else if (const std::uint64_t kept = std::max({acked, above, recorded(disk)}); last > kept) {
    // A write torn by the crash lies above what the record holds too: an entry is recorded
    // only once its own write was synced, so losing it is damage, which the node may refuse.
    const std::uint64_t from = kept + 1 + disk_.below(last - kept);
    disk.lose_from(from);
    what = "lost an unacknowledged tail from " + std::to_string(from);
  } else {
    return;
  }
  ++result_.coverage[damaged_.count(node) != 0 ? "disk-damaged" : "disk-torn-tail"];
  digest_.add(0xd15c00 + node);
  if (options_.trace) {
    std::printf("%lld node %u disk: %s (acknowledged %llu)\n",
                static_cast<long long>(now_ns() / kNsPerMs), node, what.c_str(),
                static_cast<unsigned long long>(acked));
  }
}

// A crashed node starts again from its disk. One whose disk lost what it acknowledged refuses,
// and stays down (its operator would replace it); refusing anything else is a bug.
bool ClusterRun::restart(unsigned node) {
  const std::string refusal = cluster_.restart(node);
  if (refusal.empty()) {
    if (damaged_.erase(node) != 0) ++result_.coverage["disk-damaged-started"];
    // Its replica applies the log again from the snapshot on its disk, or from the start: the
    // per-node orders start again (a fence it never showed may come after a higher one).
    grants_checked_.erase(node);
    for (auto it = key_fences_.begin(); it != key_fences_.end();) {
      it = std::get<0>(it->first) == node ? key_fences_.erase(it) : std::next(it);
    }
    if (options_.trace) {
      std::printf("%lld node %u restarted from its disk\n",
                  static_cast<long long>(now_ns() / kNsPerMs), node);
    }
    ++result_.coverage["restart"];
    return true;
  }
  if (options_.trace) {
    std::printf("%lld node %u refused to start: %s\n", static_cast<long long>(now_ns() / kNsPerMs),
                node, refusal.c_str());
  }
  if (damaged_.erase(node) == 0) {
    fail("disk",
         "node " + std::to_string(node) +
             " refused to start although its disk lost nothing it acknowledged: " + refusal);
    return false;
  }
  refused_.insert(node);
  ++result_.coverage["disk-refused"];
  digest_.add(0x5ef00 + node);
  return false;
}

void ClusterRun::cut_one() {
  const unsigned a = static_cast<unsigned>(faults_.below(nodes_));
  const unsigned b = static_cast<unsigned>(faults_.below(nodes_));
  if (a == b) return;
  cluster_.disconnect(a, b);
  cut_.insert({std::min(a, b), std::max(a, b)});
  digest_.add(0xc0700 + a * 8 + b);
  ++result_.coverage["partition"];
}

void ClusterRun::heal_links() {
  for (const auto& [a, b] : cut_) cluster_.reconnect(a, b);
  if (!cut_.empty()) ++result_.coverage["heal"];
  cut_.clear();
}

}  // namespace turnstile::sim
