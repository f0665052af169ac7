#include "sim/cluster_run.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "core/log_entry.h"
#include "core/protocol.h"
#include "sim/cluster_world.h"

namespace turnstile::sim {

namespace {

// Node i's client address, as error_not_leader names it.
constexpr int kClientPortBase = 7000;

// The per-node engine checker's settings: one engine (the replica's), auto-release as the run.
Settings replica_checker_settings(bool auto_release) {
  Settings settings;
  settings.shards = 1;
  settings.auto_release = auto_release;
  return settings;
}

ClusterShape draw_shape(std::uint64_t seed) {
  Prng swarm(seed, kSwarm);
  ClusterShape shape;
  if (swarm.chance(500)) shape.rw_permille = static_cast<std::uint64_t>(swarm.between(100, 500));
  if (swarm.chance(250)) shape.lock_delay_ms = swarm.between(50, 800);
  // Drawn last, so that the draws above stay what they were.
  if (swarm.chance(800)) {
    shape.lost_notify_permille = static_cast<std::uint64_t>(swarm.between(200, 1000));
  }
  return shape;
}

core::EngineConfig replica_engine_config(const ClusterShape& shape) {
  core::EngineConfig config;
  config.lock_delay = core::Duration::milliseconds(shape.lock_delay_ms);
  return config;
}

}  // namespace

std::string client_address(unsigned node) {
  return "127.0.0.1:" + std::to_string(kClientPortBase + static_cast<int>(node));
}

std::optional<unsigned> node_of_address(const std::string& address, unsigned nodes) {
  const std::size_t colon = address.rfind(':');
  if (colon == std::string::npos) return std::nullopt;
  const int port = std::atoi(address.c_str() + colon + 1);
  if (port < kClientPortBase || port >= kClientPortBase + static_cast<int>(nodes)) {
    return std::nullopt;
  }
  return static_cast<unsigned>(port - kClientPortBase);
}

ClusterRun::ClusterRun(const Options& options)
    : options_(options),
      nodes_(options.profile == "cluster-5" ? 5U : 3U),
      work_(options.seed, kWorkload),
      losses_(options.seed, kLosses),
      faults_(options.seed, kFaults),
      disk_(options.seed, kDisk),
      salts_(options.seed, kSalts),
      shape_(draw_shape(options.seed)),
      cluster_(nodes_, options.seed, replica_engine_config(shape_)),
      checker_settings_(replica_checker_settings(true)),
      model_(work_, request_mix(), history_, result_.coverage,
             [this](const std::string& invariant, const std::string& detail) {
               fail(invariant, detail);
             }) {
  // Drawn from the seed, not its streams: auto-release on three seeds in four; orphans kept
  // for 0, 1 or 2 s.
  leader_config_.auto_release = options.seed % 4 != 0;
  leader_config_.orphan_ttl =
      core::Duration::seconds(static_cast<std::int64_t>(options.seed / 4 % 3));
  checker_settings_.auto_release = leader_config_.auto_release;
  checker_settings_.lock_delay_ms = shape_.lock_delay_ms;
  leader_config_.max_in_flight = 1;  // as turnstiled's nodes (net/cluster_node.cc)
  for (unsigned node = 0; node < nodes_; ++node) {
    lives_.push_back(0);
    processes_.push_back(start_process(node));
    checkers_.push_back(make_checker());
  }
  clients_.resize(kClusterClients);
  for (std::uint64_t i = 0; i < kClusterClients; ++i) {
    clients_[i].id = i;
    // Clients 0 to 5 carry a stable ref, two clients to a ref, so that one client's orphans can
    // be adopted by the other (docs/semantics.md, "Stable refs and orphans"); 6 to 9 carry none.
    if (i < 6) clients_[i].ref = "ref-" + std::to_string(i % 3);
    clients_[i].lost_notify =
        shape_.lost_notify_permille > 0 && losses_.chance(shape_.lost_notify_permille);
  }
  cluster_.set_host(this);
}

std::string ClusterRun::describe_settings() const {
  std::string text =
      "nodes=" + std::to_string(nodes_) +
      " auto_release=" + (leader_config_.auto_release ? "1" : "0") +
      " orphan_ttl_s=" + std::to_string(leader_config_.orphan_ttl.ns() / 1'000'000'000);
  if (shape_.rw_permille > 0) text += " rw_permille=" + std::to_string(shape_.rw_permille);
  if (shape_.lock_delay_ms > 0) text += " lock_delay_ms=" + std::to_string(shape_.lock_delay_ms);
  if (shape_.lost_notify_permille > 0) {
    text += " lost_notify_permille=" + std::to_string(shape_.lost_notify_permille);
  }
  return text;
}

Result ClusterRun::run() {
  result_.settings = describe_settings();
  for (std::uint64_t step = 0; step < options_.events && result_.ok; ++step) this->step();
  if (result_.ok) heal_and_converge();
  if (result_.ok) check_history();
  result_.coverage["snapshot-taken"] = cluster_.snapshots_taken();
  result_.coverage["snapshot-restored"] = cluster_.snapshots_restored();
  result_.coverage["raft-compacted-answer"] = cluster_.compacted_answers();
  result_.digest = digest_.value();
  return result_;
}

void ClusterRun::step() {
  // Clients ask first; a fault, if any, strikes 0 to 40 ms later, while their entries may still
  // be on their way to a majority.
  const std::int64_t acting = work_.between(1, 3);
  for (std::int64_t i = 0; i < acting && result_.ok; ++i) {
    client_act(clients_[work_.below(kClusterClients)]);
  }
  cluster_.propose_barriers();
  const unsigned span = static_cast<unsigned>(work_.between(0, 300));
  const std::uint64_t dice = faults_.below(1000);
  const unsigned before = dice < 80 ? static_cast<unsigned>(faults_.between(0, 40)) : 0;
  cluster_.step_for(std::min(before, span));
  if (dice < 20) {
    kill_one();
  } else if (dice < 45) {
    revive_one();
  } else if (dice < 60) {
    cut_one();
  } else if (dice < 80) {
    heal_links();
  }
  cluster_.step_for(span - std::min(before, span));
  ++result_.events_run;
  check();
}

// ---- RaftCluster::Host -------------------------------------------------------------------------

void ClusterRun::on_applied(unsigned node, const core::LogEntry& entry,
                            const core::AppliedEntry& applied) {
  if (processes_[node]) processes_[node]->applied(entry, applied);
  if (options_.trace && cluster_.ready(node)) trace_applied(node, entry);
  // What the entry's requests were answered: clean releases, cleared lock-delays.
  for (std::size_t i = 0; i < entry.commands.size() && i < applied.results.size(); ++i) {
    const auto* submit = std::get_if<core::command::Submit>(&entry.commands[i]);
    if (submit != nullptr)
      checkers_[node]->observe_answer(submit->request, applied.results[i].reply);
  }
  // FIFO, live holders within the limit, read-write exclusion, rising fences and the
  // lock-delay, entry by entry, on every replica.
  checkers_[node]->check_engine(0, cluster_.replica(node).engine(), now_ns());
}

// --trace: what the leader applied, and then every resource's holders and waiters.
void ClusterRun::trace_applied(unsigned node, const core::LogEntry& entry) const {
  std::string text;
  for (const core::LogCommand& command : entry.commands) {
    if (const auto* submit = std::get_if<core::command::Submit>(&command)) {
      text += " submit " + std::to_string(submit->session.value) + " " +
              std::string(core::command_name(submit->request.command)) + " " + submit->request.key;
    } else if (const auto* close = std::get_if<core::command::Close>(&command)) {
      text += " close " + std::to_string(close->session.value);
    } else {
      text += std::holds_alternative<core::command::Tick>(command) ? " tick" : " cancel";
    }
    text += ";";
  }
  for (const core::Engine::ResourceView& view : cluster_.replica(node).engine().inspect()) {
    text += " | " + key_name({view.ns, view.key}) + " held";
    for (const core::Engine::HolderView& holder : view.holders) {
      text += " " + std::to_string(holder.token.fence.value) + "@" +
              std::to_string(holder.session.value) + " until " +
              std::to_string(holder.deadline.ns() / kNsPerMs);
    }
    text += " waiting";
    for (core::SessionId waiter : view.waiters) text += " " + std::to_string(waiter.value);
  }
  std::printf("%lld node %u applies entry at %lld:%s\n",
              static_cast<long long>(now_ns() / kNsPerMs), node,
              static_cast<long long>(entry.time.ns() / kNsPerMs), text.c_str());
}

void ClusterRun::on_restored(unsigned node) {
  // The state jumped ahead: the FIFO check starts again from it.
  checkers_[node] = make_checker();
}

void ClusterRun::after_step() {
  if (!result_.ok) return;
  for (unsigned node = 0; node < nodes_; ++node) drive(node);
}

void ClusterRun::fail(const std::string& invariant, const std::string& detail) {
  if (!result_.ok) return;
  result_.ok = false;
  result_.invariant = invariant;
  result_.detail = detail;
}

std::unique_ptr<Checker> ClusterRun::make_checker() {
  auto checker =
      std::make_unique<Checker>(checker_settings_, checker_failed_, result_.grants_seen,
                                [this](const std::string& invariant, const std::string& detail) {
                                  checker_failed_ = true;
                                  fail(invariant, detail);
                                });
  checker->new_life(0, true);  // a cluster has one life
  checker->count_into(&result_.coverage);
  return checker;
}

// A new life of `node`'s process: its sessions carry a tag no other life of any node has.
std::unique_ptr<NodeProcess> ClusterRun::start_process(unsigned node) {
  const std::uint32_t tag = 1 + node + nodes_ * static_cast<std::uint32_t>(lives_[node]++);
  return std::make_unique<NodeProcess>(tag, cluster_.replica(node), leader_config_);
}

// ---- the nodes' processes ----------------------------------------------------------------------

// What raft says reaches the node's process; its messages move; the entries it takes are
// proposed; its replies reach its clients.
void ClusterRun::drive(unsigned node) {
  NodeProcess* process = processes_[node].get();
  if (process == nullptr) return;
  lead_or_follow(node, *process);
  process->pump(cluster_.now());
  propose_entries(node, *process);
  process->pump(cluster_.now());
  deliver_output(node, *process);
}

void ClusterRun::lead_or_follow(unsigned node, NodeProcess& process) {
  const core::Instant now = cluster_.now();
  if (!cluster_.ready(node)) {
    const std::optional<unsigned> leader = cluster_.leader();
    process.follow(leader && *leader != node ? client_address(*leader) : std::string());
    return;
  }
  const std::uint64_t term = cluster_.term(node);
  if (process.leading_term() == term) return;
  process.lead(now, term);
  if (process.leading_term() != term) return;
  if (options_.trace) {
    std::printf("%lld node %u leads term %llu\n", static_cast<long long>(now_ns() / kNsPerMs), node,
                static_cast<unsigned long long>(term));
  }
  ++result_.coverage["lead"];
  digest_.add(0x1ead00 + node);
}

void ClusterRun::propose_entries(unsigned node, NodeProcess& process) {
  const core::Instant now = cluster_.now();
  while (std::optional<core::LogEntry> entry = process.take_entry(now, salts_.next())) {
    const std::uint64_t index = cluster_.propose(node, *entry);
    if (index == 0) {
      // Raft refused: the node no longer leads, whatever it was told last.
      ++result_.coverage["refused"];
      process.follow({});
      break;
    }
    digest_.add(index);
    ++result_.coverage["proposed"];
  }
}

void ClusterRun::deliver_output(unsigned node, NodeProcess& process) {
  for (core::SessionId closed : process.take_closed()) {
    auto it = history_connections_.find(closed.value);
    if (it != history_connections_.end()) history_.connection_closed(it->second, now_ns());
  }
  for (ClusterClient& client : clients_) {
    if (client.node != node || !result_.ok) continue;
    client.input += process.take_output(client.session);
    std::size_t newline = 0;
    while (client.node == node && (newline = client.input.find('\n')) != std::string::npos) {
      const std::string line = client.input.substr(0, newline);
      client.input.erase(0, newline + 1);
      client_line(client, line);
    }
  }
}

bool is_cluster_profile(const std::string& profile) {
  return profile == "cluster-3" || profile == "cluster-5";
}

Result run_cluster_simulation(const Options& options) { return ClusterRun(options).run(); }

}  // namespace turnstile::sim
