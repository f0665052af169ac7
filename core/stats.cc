#include "core/stats.h"

#include <algorithm>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <tuple>
#include <utility>

#include "core/assert.h"

namespace turnstile::core {

std::string_view raft_role_name(RaftRole role) {
  switch (role) {
    case RaftRole::kFollower:
      return "follower";
    case RaftRole::kCandidate:
      return "candidate";
    case RaftRole::kLeader:
      return "leader";
    case RaftRole::kUnavailable:
      break;
  }
  return "unavailable";
}
namespace {

// Entries are ordered by key first; the other fields only break ties, which happen when a lock
// and a limit-1 semaphore share a key (they are both "locks" in stats). Without the tie-break the
// output would depend on the order the engines were merged in.
bool comes_before(const LockStats& a, const LockStats& b) {
  return std::tie(a.key, a.owner, a.lease_expires_in_s, a.waiters) <
         std::tie(b.key, b.owner, b.lease_expires_in_s, b.waiters);
}
bool comes_before(const SemaphoreStats& a, const SemaphoreStats& b) {
  return std::tie(a.key, a.limit, a.holders, a.waiters) <
         std::tie(b.key, b.limit, b.holders, b.waiters);
}
bool comes_before(const ReadWriteStats& a, const ReadWriteStats& b) {
  return std::tie(a.key, a.readers, a.writer, a.lease_expires_in_s, a.waiters) <
         std::tie(b.key, b.readers, b.writer, b.lease_expires_in_s, b.waiters);
}
bool comes_before(const IdleStats& a, const IdleStats& b) {
  return std::tie(a.key, a.idle_s) < std::tie(b.key, b.idle_s);
}

// Merges `part` into the sorted `total` and cuts it to `entries_max`. Returns whether it cut.
template <typename Entry>
bool merge_sorted(std::vector<Entry>& total, std::vector<Entry>&& part, std::size_t entries_max) {
  const auto less = [](const Entry& a, const Entry& b) { return comes_before(a, b); };
  // total is normally the output of an earlier merge and already sorted; a caller that filled
  // it by hand gets it sorted here rather than a silently wrong merge.
  if (!std::is_sorted(total.begin(), total.end(), less)) {
    std::sort(total.begin(), total.end(), less);
  }
  std::sort(part.begin(), part.end(), less);
  const auto middle = static_cast<std::ptrdiff_t>(total.size());
  total.insert(total.end(), std::make_move_iterator(part.begin()),
               std::make_move_iterator(part.end()));
  std::inplace_merge(total.begin(), total.begin() + middle, total.end(), less);
  part.clear();
  if (total.size() <= entries_max) return false;
  total.resize(entries_max);
  return true;
}

}  // namespace

void StatsTotals::add(const StatsTotals& other) {
  locks_held += other.locks_held;
  lock_waiters += other.lock_waiters;
  semaphore_holders += other.semaphore_holders;
  semaphore_waiters += other.semaphore_waiters;
  rw_readers += other.rw_readers;
  rw_writers += other.rw_writers;
  rw_waiters += other.rw_waiters;
}

StatsTotals totals_of(const StatsSnapshot& snapshot) {
  StatsTotals totals;
  for (const LockStats& lock : snapshot.locks) {
    if (lock.owner.value != 0) ++totals.locks_held;
    totals.lock_waiters += lock.waiters;
  }
  for (const SemaphoreStats& semaphore : snapshot.semaphores) {
    totals.semaphore_holders += semaphore.holders;
    totals.semaphore_waiters += semaphore.waiters;
  }
  for (const ReadWriteStats& lock : snapshot.rw_locks) {
    totals.rw_readers += lock.readers;
    if (lock.writer.value != 0) ++totals.rw_writers;
    totals.rw_waiters += lock.waiters;
  }
  return totals;
}

void merge_stats(StatsSnapshot& total, StatsSnapshot&& part, std::size_t entries_max) {
  // Classification by limit is the engine's job (a limit-1 semaphore is reported as a lock with
  // its holder and lease, which a SemaphoreStats cannot carry), so a limit-1 entry here is a bug.
  for (const SemaphoreStats& semaphore : part.semaphores) TS_ASSERT(semaphore.limit > 1);

  bool cut = false;
  cut |= merge_sorted(total.locks, std::move(part.locks), entries_max);
  cut |= merge_sorted(total.semaphores, std::move(part.semaphores), entries_max);
  cut |= merge_sorted(total.idle_locks, std::move(part.idle_locks), entries_max);
  cut |= merge_sorted(total.idle_semaphores, std::move(part.idle_semaphores), entries_max);
  cut |= merge_sorted(total.rw_locks, std::move(part.rw_locks), entries_max);
  cut |= merge_sorted(total.idle_rw_locks, std::move(part.idle_rw_locks), entries_max);
  // Only the part the signal hub adds has these (they are not split by key).
  for (SignalChannelStats& channel : part.signal_channels) {
    total.signal_channels.push_back(std::move(channel));
  }
  total.counters.grants += part.counters.grants;
  total.counters.lease_expiries += part.counters.lease_expiries;
  total.counters.wait_timeouts += part.counters.wait_timeouts;
  total.counters.fence_exhausted += part.counters.fence_exhausted;
  total.totals.add(part.totals);
  total.truncated = total.truncated || part.truncated || cut;
  if (part.cluster) total.cluster = std::move(part.cluster);
}

namespace {

using Json = nlohmann::ordered_json;

// Each list is built as an array from the start, so that an empty one is `[]`, never `null`.

Json locks_json(const std::vector<LockStats>& locks) {
  Json array = Json::array();
  for (const LockStats& lock : locks) {
    array.push_back(
        Json{{"key", lock.key},
             {"owner_conn_id", lock.owner.value},
             {"lease_expires_in_s", lock.lease_expires_in_s > 0 ? lock.lease_expires_in_s : 0.0},
             {"waiters", lock.waiters}});
  }
  return array;
}

Json semaphores_json(const std::vector<SemaphoreStats>& semaphores) {
  Json array = Json::array();
  for (const SemaphoreStats& semaphore : semaphores) {
    array.push_back(Json{{"key", semaphore.key},
                         {"limit", semaphore.limit},
                         {"holders", semaphore.holders},
                         {"waiters", semaphore.waiters}});
  }
  return array;
}

Json idle_json(const std::vector<IdleStats>& entries) {
  Json array = Json::array();
  for (const IdleStats& idle : entries) {
    array.push_back(Json{{"key", idle.key}, {"idle_s", idle.idle_s}});
  }
  return array;
}

Json channels_json(const std::vector<SignalChannelStats>& channels) {
  Json array = Json::array();
  for (const SignalChannelStats& channel : channels) {
    Json entry = Json::object();
    entry["pattern"] = channel.pattern;
    if (!channel.group.empty()) entry["group"] = channel.group;
    entry["listeners"] = channel.listeners;
    array.push_back(std::move(entry));
  }
  return array;
}

Json rw_locks_json(const std::vector<ReadWriteStats>& locks) {
  Json array = Json::array();
  for (const ReadWriteStats& lock : locks) {
    array.push_back(
        Json{{"key", lock.key},
             {"readers", lock.readers},
             {"writer_conn_id", lock.writer.value},
             {"lease_expires_in_s", lock.lease_expires_in_s > 0 ? lock.lease_expires_in_s : 0.0},
             {"waiters", lock.waiters}});
  }
  return array;
}

Json cluster_json(const ClusterStatus& cluster) {
  Json voters = Json::array();
  for (const std::uint64_t voter : cluster.voters) voters.push_back(voter);
  return Json{{"node_id", cluster.node_id},
              {"role", raft_role_name(cluster.role)},
              {"term", cluster.term},
              {"leader_id", cluster.leader_id},
              {"leader_address", cluster.leader_address},
              {"commit_index", cluster.commit_index},
              {"last_index", cluster.last_index},
              {"snapshot_index", cluster.snapshot_index},
              {"applied_index", cluster.applied_index},
              {"voters", std::move(voters)}};
}

std::string encode_stats_json_whole(std::int64_t connections, const StatsSnapshot& snapshot) {
  Json root = Json::object();
  root["connections"] = connections;
  root["locks"] = locks_json(snapshot.locks);
  root["semaphores"] = semaphores_json(snapshot.semaphores);
  root["idle_locks"] = idle_json(snapshot.idle_locks);
  root["idle_semaphores"] = idle_json(snapshot.idle_semaphores);
  // Only while something listens: a server nobody uses signals on answers dflockd v2's line.
  if (!snapshot.signal_channels.empty())
    root["signal_channels"] = channels_json(snapshot.signal_channels);
  // Likewise read-write locks: present only while there are some.
  if (!snapshot.rw_locks.empty()) root["rw_locks"] = rw_locks_json(snapshot.rw_locks);
  if (!snapshot.idle_rw_locks.empty()) root["idle_rw_locks"] = idle_json(snapshot.idle_rw_locks);
  root["truncated"] = snapshot.truncated;
  if (snapshot.cluster) root["cluster"] = cluster_json(*snapshot.cluster);
  // Keys are client bytes and need not be UTF-8; like Go's encoding/json, replace invalid
  // sequences with U+FFFD instead of failing (nlohmann's default is to throw).
  return root.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace

std::string encode_inspection_json(const KeyInspection& inspection) {
  const bool read_write = inspection.kind == "rw";
  Json holders = Json::array();
  for (const KeyInspection::Holder& holder : inspection.holders) {
    Json entry = Json{{"fence", holder.fence},
                      {"session", holder.session.value},
                      {"lease_expires_in_s", holder.lease_expires_in_s}};
    if (read_write) entry["mode"] = holder.shared ? "read" : "write";
    if (holder.orphaned) entry["orphaned"] = true;
    holders.push_back(std::move(entry));
  }
  Json waiters = Json::array();
  for (const KeyInspection::Waiter& waiter : inspection.waiters) {
    Json entry = Json{{"session", waiter.session.value}, {"waited_s", waiter.waited_s}};
    if (read_write) entry["mode"] = waiter.shared ? "read" : "write";
    if (waiter.orphaned) entry["orphaned"] = true;
    waiters.push_back(std::move(entry));
  }
  Json root = Json{{"kind", inspection.kind},       {"key", inspection.key},
                   {"exists", inspection.exists},   {"limit", inspection.limit},
                   {"holders", std::move(holders)}, {"waiters", std::move(waiters)}};
  if (inspection.lock_delay_left_s) root["lock_delay_left_s"] = *inspection.lock_delay_left_s;
  return root.dump(-1, ' ', false, Json::error_handler_t::replace);
}

namespace {

template <typename Entry>
void keep_first_half(std::vector<Entry>& entries) {
  entries.resize(entries.size() / 2);
}

}  // namespace

std::string encode_stats_json(std::int64_t connections, const StatsSnapshot& snapshot,
                              std::size_t bytes_max) {
  std::string json = encode_stats_json_whole(connections, snapshot);
  if (json.size() <= bytes_max) return json;
  // Too long for a client's reply-line limit: keep the first half of every array (they are
  // sorted by key) until it fits, and say so. Each pass halves the work of the next.
  StatsSnapshot cut = snapshot;
  cut.truncated = true;
  while (json.size() > bytes_max) {
    keep_first_half(cut.locks);
    keep_first_half(cut.semaphores);
    keep_first_half(cut.idle_locks);
    keep_first_half(cut.idle_semaphores);
    keep_first_half(cut.signal_channels);
    keep_first_half(cut.rw_locks);
    keep_first_half(cut.idle_rw_locks);
    json = encode_stats_json_whole(connections, cut);
    if (cut.locks.empty() && cut.semaphores.empty() && cut.idle_locks.empty() &&
        cut.idle_semaphores.empty() && cut.signal_channels.empty() && cut.rw_locks.empty() &&
        cut.idle_rw_locks.empty()) {
      break;  // the skeleton alone always fits any sensible limit
    }
  }
  return json;
}

}  // namespace turnstile::core
