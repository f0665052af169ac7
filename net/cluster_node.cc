#include "net/cluster_node.h"

#include <algorithm>
#include <cstdlib>
#include <utility>
#include <variant>

#include "core/log_entry.h"
#include "net/clock.h"
#include "net/log.h"
#include "net/shard.h"
#include "net/shared_state.h"

namespace turnstile::net {
namespace {

core::ClusterLeaderConfig leader_config(const Config& config, std::uint32_t session_tag) {
  core::ClusterLeaderConfig leader;
  leader.shards = static_cast<std::size_t>(config.threads);
  leader.session_tag = session_tag;
  leader.auto_release = config.auto_release_on_disconnect;
  leader.orphan_ttl = core::Duration::seconds(config.cluster.orphan_ttl_s);
  // One entry in flight: what arrives meanwhile waits and goes in the next entry. Each entry
  // costs every node an append, an fsync and the messages and thread hand-offs between them, so
  // under load fewer, bigger entries cost less CPU per request (docs/benchmarks.md, "Cluster");
  // a request that finds nothing in flight is proposed at once.
  leader.max_in_flight = 1;
  return leader;
}

RaftNodeConfig raft_config(const Config& config) {
  const Config::Cluster& cluster = config.cluster;
  RaftNodeConfig raft;
  raft.id = cluster.node_id;
  raft.raft_address = cluster.raft_addr;
  raft.dir = cluster.raft_dir;
  // Each voter's client address travels in raft's configuration with its raft address
  // ("raft@client", RaftNode::add_voter), so that every node, one added later included, can
  // send clients to whichever node leads.
  for (const Config::ClusterPeer& peer : cluster.peers) {
    raft.peers.push_back(RaftPeer{peer.id, peer.raft_address + "@" + peer.client_address});
  }
  raft.bootstrap = cluster.bootstrap;
  raft.secret = cluster.secret.value_or("");
  raft.snapshot_threshold = static_cast<unsigned>(cluster.snapshot_threshold);
  raft.snapshot_trailing = static_cast<unsigned>(cluster.snapshot_trailing);
  raft.election_timeout_ms = static_cast<unsigned>(cluster.election_timeout_ms);
  raft.heartbeat_timeout_ms = static_cast<unsigned>(cluster.heartbeat_timeout_ms);
  // A healthy disk stores an entry in milliseconds; five election timeouts (5 s at least) of no
  // progress is a full or failing disk, not a slow one.
  raft.log_write_stall_ms = std::max(5000U, 5 * raft.election_timeout_ms);
  raft.min_free_bytes = static_cast<std::uint64_t>(cluster.min_free_mb) << 20;
  raft.start_timeout_ms = static_cast<unsigned>(cluster.start_timeout_s * 1000);
  raft.log = [](std::string line) { log_line(LogLevel::kWarn, "raft: " + line); };
  return raft;
}

// The client address of node `id`: this node's advertise address, the part after the '@' of its
// address in raft's configuration (nodes added at run time), or its --cluster-peers entry (a
// directory bootstrapped without client addresses); empty for 0 or an unknown node.
std::string client_address_of(const Config& config, const RaftStatus& status, std::uint64_t id) {
  if (id == 0) return {};
  if (id == config.cluster.node_id) return config.cluster.advertise_addr;
  for (const RaftPeer& server : status.servers) {
    const std::size_t at = server.raft_address.find('@');
    if (server.id == id && at != std::string::npos) return server.raft_address.substr(at + 1);
  }
  for (const Config::ClusterPeer& peer : config.cluster.peers) {
    if (peer.id == id) return peer.client_address;
  }
  return {};
}

}  // namespace

ClusterNode::ClusterNode(const Config& config, SharedState& shared, std::uint32_t session_tag)
    : config_(config),
      shared_(shared),
      replica_(engine_config(config)),
      leader_(leader_config(config, session_tag), replica_),
      raft_(std::make_unique<RaftNode>(raft_config(config), *this)) {}

ClusterNode::~ClusterNode() { stop(); }

std::optional<std::string> ClusterNode::start() {
  std::optional<std::string> error = raft_->start();
  // A message posted before the raft thread ran found nobody to drain it (RaftNode::run drops
  // work while the node is not running), and later posts see a mailbox that is not empty and
  // leave the drain to it: drain once now.
  if (!error) raft_->run([this] { drain(); });
  return error;
}

int ClusterNode::start_failure_exit_code() const {
  if (raft_->directory_damaged()) return kExitDamagedDirectory;
  if (raft_->stuck()) return kExitStartTimedOut;
  return 1;
}

void ClusterNode::stop() { raft_->stop(); }

std::string ClusterNode::leader_client_address() const {
  const RaftStatus status = raft_->status();
  return client_address_of(config_, status, status.leader_id);
}

ClusterMetrics ClusterNode::metrics() const {
  ClusterMetrics metrics;
  metrics.raft = raft_->status();
  metrics.entries_applied = entries_applied_.load(std::memory_order_relaxed);
  metrics.leadership_changes = leadership_changes_.load(std::memory_order_relaxed);
  apply_latency_.add_to(metrics.apply_latency);
  return metrics;
}

core::ClusterStatus ClusterNode::cluster_status() const {
  RaftStatus raft = raft_->status();
  core::ClusterStatus status;
  status.node_id = config_.cluster.node_id;
  status.role = raft.role;
  status.term = raft.term;
  status.leader_id = raft.leader_id;
  status.leader_address = client_address_of(config_, raft, raft.leader_id);
  status.commit_index = raft.commit_index;
  status.last_index = raft.last_index;
  status.snapshot_index = raft.snapshot_index;
  status.applied_index = raft.applied_index;
  status.voters = std::move(raft.voters);
  return status;
}

bool ClusterNode::refuse_change(AdminDone& done) {
  if (raft_->status().role != core::RaftRole::kLeader) {
    done(core::AdminChangeOutcome{core::AdminChangeOutcome::Kind::kNotLeader,
                                  "membership changes are made on the leader",
                                  leader_client_address()});
    return true;
  }
  if (change_pending_.exchange(true)) {
    done(core::AdminChangeOutcome{core::AdminChangeOutcome::Kind::kPending,
                                  "another membership change is in progress; retry when it is "
                                  "done"});
    return true;
  }
  return false;
}

// RaftNode answers in words; the few outcomes an admin client must tell apart are classified
// here by the prefixes RaftNode writes (net/raft_node.cc, submit_add_voter and the others).
RaftNode::ErrorDone ClusterNode::change_done(std::uint64_t id, AdminDone done) {
  return [this, id, done = std::move(done)](const std::string& error) {
    change_pending_.store(false);
    using Kind = core::AdminChangeOutcome::Kind;
    core::AdminChangeOutcome outcome;
    outcome.detail = error;
    if (error.empty()) {
      outcome.kind = Kind::kDone;
      outcome.voters = raft_->status().voters;
    } else if (error.starts_with("not leader") || error.starts_with("leadership lost")) {
      outcome.kind = Kind::kNotLeader;
      outcome.leader = leader_client_address();
    } else if (error.find("in progress") != std::string::npos) {
      outcome.kind = Kind::kPending;
    } else if (error.find("is not in the configuration") != std::string::npos) {
      outcome.kind = Kind::kUnknownId;
    } else if (error.find("is taken by node") != std::string::npos) {
      outcome.kind = Kind::kAddressTaken;
    } else if (error.find("already") != std::string::npos) {
      outcome.kind = Kind::kRefused;
    } else {
      outcome.kind = Kind::kFailed;
    }
    log_event(outcome.kind == Kind::kDone ? LogLevel::kInfo : LogLevel::kWarn,
              "cluster_membership_change",
              "cluster: membership change of node " + std::to_string(id) + ": " +
                  (error.empty() ? std::string("done") : error),
              {{"node_id", id}, {"outcome", error.empty() ? std::string("done") : error}});
    done(std::move(outcome));
  };
}

void ClusterNode::add_voter(const core::AdminVoterAdd& voter, AdminDone done) {
  if (refuse_change(done)) return;
  raft_->add_voter(voter.id, voter.raft_address + "@" + voter.client_address,
                   change_done(voter.id, std::move(done)));
}

void ClusterNode::remove_voter(std::uint64_t id, AdminDone done) {
  if (refuse_change(done)) return;
  if (id == config_.cluster.node_id) {
    logf(LogLevel::kInfo,
         "cluster: removing this node (the leader): it steps down once the change is committed");
  }
  raft_->remove_voter(id, change_done(id, std::move(done)));
}

void ClusterNode::transfer_leadership(std::function<void(bool)> done) {
  raft_->transfer_leadership(std::move(done));
}

void ClusterNode::post(std::vector<core::RouterMessage>& messages) {
  if (messages.empty()) return;
  // A stats request is answered from the replica, with no entry: it never waits for an apply.
  const bool stats = std::any_of(messages.begin(), messages.end(), [](const auto& message) {
    return std::holds_alternative<core::message::StatsRequest>(message);
  });
  bool was_empty = false;
  {
    std::lock_guard lock(mailbox_mutex_);
    was_empty = mailbox_.empty();
    if (was_empty) {
      mailbox_.swap(messages);
    } else {
      for (core::RouterMessage& message : messages) mailbox_.push_back(std::move(message));
    }
  }
  messages.clear();
  // One drain for everything that arrives before the raft thread gets to it: one entry. None
  // while an apply is bound to drain (wake_on_post_).
  if ((was_empty && wake_on_post_.load()) || stats) raft_->run([this] { drain(); });
}

// ---- the raft thread
// -----------------------------------------------------------------------------

void ClusterNode::drain() {
  std::vector<core::RouterMessage> messages;
  while (true) {
    {
      std::lock_guard lock(mailbox_mutex_);
      messages.swap(mailbox_);
    }
    if (!messages.empty() && !leader_.leading()) {
      leader_.set_leader_address(leader_client_address());
    }
    // Stats replies show raft as it is now; only read it when one is asked for.
    for (const core::RouterMessage& message : messages) {
      if (std::holds_alternative<core::message::StatsRequest>(message)) {
        leader_.set_cluster_status(cluster_status());
        break;
      }
    }
    for (core::RouterMessage& message : messages) leader_.receive(std::move(message));
    messages.clear();
    flush();
    const bool wake = !leader_.in_flight_full();
    wake_on_post_.store(wake);
    if (!wake) return;  // the next apply, or stepping down, drains
    // Posts that found wake_on_post_ false left their messages without waking anyone.
    std::lock_guard lock(mailbox_mutex_);
    if (mailbox_.empty()) return;
  }
}

void ClusterNode::flush() {
  const core::Instant now = monotonic_now();
  while (std::optional<core::LogEntry> entry = leader_.take_entry(now, salts_.next_u64())) {
    proposed_.push_back(Proposed{entry->salt, now});
    // The outcome comes back through apply(); a refusal means this node lost its leadership,
    // which leadership_changed(false) reports too. A refused entry is never timed.
    raft_->propose(core::encode_entry(*entry), [this, salt = entry->salt](
                                                   std::uint64_t, const std::string& error) {
      if (error.empty()) return;
      std::erase_if(proposed_, [salt](const Proposed& proposed) { return proposed.salt == salt; });
    });
  }
  std::vector<core::Envelope> outbox = leader_.take_outbox();
  if (!outbox.empty()) {
    to_shards_.resize(shared_.shards.size());
    for (core::Envelope& envelope : outbox) {
      to_shards_.at(envelope.to).push_back(std::move(envelope.message));
    }
    for (std::size_t shard = 0; shard < to_shards_.size(); ++shard) {
      if (!to_shards_[shard].empty()) shared_.shards[shard]->post(to_shards_[shard]);
    }
  }
  if (const std::optional<core::Instant> wake = leader_.next_tick_clock()) {
    const core::Duration wait = *wake > now ? *wake - now : core::Duration::zero();
    // Whole milliseconds, rounded up, so that the deadline is due when the timer fires.
    const std::int64_t ms = (wait.ns() + 999'999) / 1'000'000;
    raft_->wake_after(static_cast<std::uint64_t>(ms), [this] { drain(); });
  }
}

void ClusterNode::apply(std::uint64_t, std::string_view command) {
  const std::optional<core::LogEntry> entry = core::decode_entry(command);
  if (!entry) {
    // Only leaders write entries, with this encoding: one that does not decode is a damaged log
    // or a node of an incompatible version. Guessing would make this replica differ: stop.
    log_line(LogLevel::kError,
             "cluster: a committed log entry does not decode (a damaged raft directory, or a "
             "node of another version); stopping this node");
    std::abort();
  }
  const core::AppliedEntry applied = replica_.apply(replica_.applied_index() + 1, *entry);
  entries_applied_.fetch_add(1, std::memory_order_relaxed);
  time_apply(entry->salt);
  leader_.applied(*entry, applied);
  drain();
}

void ClusterNode::time_apply(std::uint64_t salt) {
  // Entries apply in the order they were proposed, so one of ours is normally at the front; those
  // before it (none, unless raft dropped one without saying) will never apply.
  const auto it = std::find_if(proposed_.begin(), proposed_.end(),
                               [salt](const Proposed& proposed) { return proposed.salt == salt; });
  if (it == proposed_.end()) return;  // another leader's entry
  apply_latency_.record(monotonic_now() - it->at);
  proposed_.erase(proposed_.begin(), it + 1);
}

std::string ClusterNode::snapshot() { return replica_.save(); }

bool ClusterNode::restore(std::string_view bytes) { return replica_.restore(bytes); }

void ClusterNode::log_cannot_be_written(const std::string& why) {
  log_event(LogLevel::kError, "raft_disk_low",
            "cluster: the raft log cannot be written much longer: " + why +
                "; this node leaves (it hands leadership over and exits with status 1)",
            {{"raft_dir", config_.cluster.raft_dir}, {"reason", why}});
  if (on_fatal_) on_fatal_();
}

void ClusterNode::leadership_changed(bool leader) {
  leadership_changes_.fetch_add(1, std::memory_order_relaxed);
  if (leader) {
    leader_.lead(monotonic_now());
  } else {
    proposed_.clear();  // what it proposed may still commit, under another leader's time
    leader_.follow(leader_client_address());
  }
  const RaftStatus status = raft_->status();  // as last refreshed: the term may lag by one turn
  const std::string node = std::to_string(config_.cluster.node_id);
  log_event(LogLevel::kInfo, "cluster_role",
            "cluster: node " + node + (leader ? " leads" : " follows"),
            {{"node_id", config_.cluster.node_id},
             {"role", leader ? "leader" : "follower"},
             {"term", status.term},
             {"leader_id", leader ? config_.cluster.node_id : status.leader_id}});
  drain();
}

}  // namespace turnstile::net
