#include "net/cluster_node.h"

#include <cstdlib>
#include <utility>

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
  raft.log = [](std::string line) { log_line(LogLevel::kWarn, "raft: " + line); };
  return raft;
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

void ClusterNode::stop() { raft_->stop(); }

std::string ClusterNode::leader_client_address() const {
  const RaftStatus status = raft_->status();
  if (status.leader_id == 0) return {};
  if (status.leader_id == config_.cluster.node_id) return config_.cluster.advertise_addr;
  for (const RaftPeer& server : status.servers) {
    const std::size_t at = server.raft_address.find('@');
    if (server.id == status.leader_id && at != std::string::npos) {
      return server.raft_address.substr(at + 1);
    }
  }
  for (const Config::ClusterPeer& peer : config_.cluster.peers) {
    if (peer.id == status.leader_id) return peer.client_address;
  }
  return {};
}

bool ClusterNode::refuse_change(AdminDone& done) {
  if (raft_->status().role != "leader") {
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
    } else if (error.find("already") != std::string::npos) {
      outcome.kind = Kind::kRefused;
    } else {
      outcome.kind = Kind::kFailed;
    }
    logf(outcome.kind == Kind::kDone ? LogLevel::kInfo : LogLevel::kWarn,
         "cluster: membership change of node %llu: %s", static_cast<unsigned long long>(id),
         error.empty() ? "done" : error.c_str());
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

void ClusterNode::post(core::RouterMessage message) {
  bool was_empty = false;
  {
    std::lock_guard lock(mailbox_mutex_);
    was_empty = mailbox_.empty();
    mailbox_.push_back(std::move(message));
  }
  // One drain for everything that arrives before the raft thread gets to it: one entry.
  if (was_empty) raft_->run([this] { drain(); });
}

// ---- the raft thread
// -----------------------------------------------------------------------------

void ClusterNode::drain() {
  std::vector<core::RouterMessage> messages;
  {
    std::lock_guard lock(mailbox_mutex_);
    messages.swap(mailbox_);
  }
  if (!leader_.leading()) leader_.set_leader_address(leader_client_address());
  for (core::RouterMessage& message : messages) leader_.receive(std::move(message));
  flush();
}

void ClusterNode::flush() {
  const core::Instant now = monotonic_now();
  while (std::optional<core::LogEntry> entry = leader_.take_entry(now, salts_.next_u64())) {
    // The outcome comes back through apply(); a refusal means this node lost its leadership,
    // which leadership_changed(false) reports too.
    raft_->propose(core::encode_entry(*entry), [](std::uint64_t, const std::string&) {});
  }
  for (core::Envelope& envelope : leader_.take_outbox()) {
    shared_.shards.at(envelope.to)->post(std::move(envelope.message));
  }
  if (const std::optional<core::Instant> wake = leader_.next_tick_clock()) {
    const core::Duration wait = *wake > now ? *wake - now : core::Duration::zero();
    // Whole milliseconds, rounded up, so that the deadline is due when the timer fires.
    const std::int64_t ms = (wait.ns() + 999'999) / 1'000'000;
    raft_->wake_after(static_cast<std::uint64_t>(ms), [this] { flush(); });
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
  leader_.applied(*entry, applied);
  flush();
}

std::string ClusterNode::snapshot() { return replica_.save(); }

bool ClusterNode::restore(std::string_view bytes) { return replica_.restore(bytes); }

void ClusterNode::leadership_changed(bool leader) {
  if (leader) {
    leader_.lead(monotonic_now());
    logf(LogLevel::kInfo, "cluster: node %llu leads",
         static_cast<unsigned long long>(config_.cluster.node_id));
  } else {
    leader_.follow(leader_client_address());
    logf(LogLevel::kInfo, "cluster: node %llu follows",
         static_cast<unsigned long long>(config_.cluster.node_id));
  }
  flush();
}

}  // namespace turnstile::net
