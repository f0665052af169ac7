#include "sim/cluster_run.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/acked_index.h"
#include "core/cluster_leader.h"
#include "core/log_entry.h"
#include "core/protocol.h"
#include "core/wire.h"
#include "sim/checker.h"
#include "sim/client_view.h"
#include "sim/cluster_node.h"
#include "sim/digest.h"
#include "sim/history.h"
#include "sim/prng.h"
#include "sim/raft_cluster.h"
#include "sim/raft_disk.h"
#include "sim/settings.h"

namespace turnstile::sim {

namespace {

using core::Command;
using core::Namespace;
using core::Request;
using core::SessionId;

constexpr std::uint64_t kClients = 10;
constexpr std::int64_t kNsPerMs = 1'000'000;
// Node i's client address, as error_not_leader names it.
constexpr int kClientPortBase = 7000;
constexpr unsigned kHealedWaitMs = 20'000;  // after the heal, every request must be answered

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

// The per-node engine checker's settings: one engine (the replica's), auto-release as the run.
Settings replica_checker_settings(bool auto_release) {
  Settings settings;
  settings.shards = 1;
  settings.auto_release = auto_release;
  return settings;
}

// What a cluster seed draws from its swarm stream (the others keep their draws): the share of
// client requests that are read-write lock commands (half of the seeds) and the lock-delay of
// every replica's engine (one seed in four; every replica gets the same, as every node of a
// cluster is started with the same --lock-delay).
struct ClusterShape {
  std::uint64_t rw_permille = 0;
  std::int64_t lock_delay_ms = 0;
  std::uint64_t lost_notify_permille = 0;  // clients that send lost-notify _ on
};

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

class ClusterRun final : public RaftCluster::Host {
 public:
  explicit ClusterRun(const Options& options)
      : options_(options),
        nodes_(options.profile == "cluster-5" ? 5U : 3U),
        work_(options.seed, kWorkload),
        losses_(options.seed, kLosses),
        faults_(options.seed, kFaults),
        disk_(options.seed, kDisk),
        salts_(options.seed, kSalts),
        shape_(draw_shape(options.seed)),
        cluster_(nodes_, options.seed, replica_engine_config(shape_)) {
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
    clients_.resize(kClients);
    for (std::uint64_t i = 0; i < kClients; ++i) {
      clients_[i].id = i;
      // Clients 0 to 5 carry a stable ref, two clients to a ref, so that one client's orphans can
      // be adopted by the other (docs/semantics.md, "Stable refs and orphans"); 6 to 9 carry none.
      if (i < 6) clients_[i].ref = "ref-" + std::to_string(i % 3);
      clients_[i].lost_notify =
          shape_.lost_notify_permille > 0 && losses_.chance(shape_.lost_notify_permille);
    }
    cluster_.set_host(this);
  }

  Result run() {
    result_.settings =
        "nodes=" + std::to_string(nodes_) +
        " auto_release=" + (leader_config_.auto_release ? "1" : "0") +
        " orphan_ttl_s=" + std::to_string(leader_config_.orphan_ttl.ns() / 1'000'000'000);
    if (shape_.rw_permille > 0)
      result_.settings += " rw_permille=" + std::to_string(shape_.rw_permille);
    if (shape_.lock_delay_ms > 0) {
      result_.settings += " lock_delay_ms=" + std::to_string(shape_.lock_delay_ms);
    }
    if (shape_.lost_notify_permille > 0) {
      result_.settings += " lost_notify_permille=" + std::to_string(shape_.lost_notify_permille);
    }
    for (std::uint64_t step = 0; step < options_.events && result_.ok; ++step) {
      // Clients ask first; a fault, if any, strikes 0 to 40 ms later, while their entries may
      // still be on their way to a majority.
      const std::int64_t acting = work_.between(1, 3);
      for (std::int64_t i = 0; i < acting && result_.ok; ++i) {
        client_act(clients_[work_.below(kClients)]);
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
    if (result_.ok) heal_and_converge();
    if (result_.ok) check_history();
    result_.coverage["snapshot-taken"] = cluster_.snapshots_taken();
    result_.coverage["snapshot-restored"] = cluster_.snapshots_restored();
    result_.coverage["raft-compacted-answer"] = cluster_.compacted_answers();
    result_.digest = digest_.value();
    return result_;
  }

  // ---- RaftCluster::Host ---------------------------------------------------------------------

  void on_applied(unsigned node, const core::LogEntry& entry,
                  const core::AppliedEntry& applied) override {
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
  void trace_applied(unsigned node, const core::LogEntry& entry) const {
    std::string text;
    for (const core::LogCommand& command : entry.commands) {
      if (const auto* submit = std::get_if<core::command::Submit>(&command)) {
        text += " submit " + std::to_string(submit->session.value) + " " +
                std::string(core::command_name(submit->request.command)) + " " +
                submit->request.key;
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
      for (SessionId waiter : view.waiters) text += " " + std::to_string(waiter.value);
    }
    std::printf("%lld node %u applies entry at %lld:%s\n",
                static_cast<long long>(now_ns() / kNsPerMs), node,
                static_cast<long long>(entry.time.ns() / kNsPerMs), text.c_str());
  }

  void on_restored(unsigned node) override {
    // The state jumped ahead: the FIFO check starts again from it.
    checkers_[node] = make_checker();
  }

  void after_step() override {
    if (!result_.ok) return;
    for (unsigned node = 0; node < nodes_; ++node) drive(node);
  }

 private:
  struct Outstanding {
    Request request;
    bool ref_line = false;     // the stable-ref line, answered `ok`
    bool notify_line = false;  // the lost-notify line, answered `ok`
    std::uint64_t op = 0;      // the History's operation; 0: not recorded
    std::int64_t sent_ns = 0;
  };
  struct Client {
    std::uint64_t id = 0;
    std::string ref;               // empty: none
    std::optional<unsigned> node;  // connected to
    SessionId session;
    std::uint64_t connection = 0;  // the History's id of the connection
    std::string input;
    std::optional<Outstanding> pending;
    ClientView view;                               // tokens held, keys enqueued
    std::map<ResourceKey, std::uint64_t> held_on;  // the connection each grant came on
    std::optional<unsigned> hint;                  // the leader an error_not_leader named
    bool stopped = false;                          // healed: nothing new
    // lost-notify: whether the client asks on every connection, and whether this connection's
    // `ok` came; the lines read on this connection; every slot the client was granted, and
    // those it released `ok` ("<kind> <key> <token>"); the keys it asked for on this connection
    // and on any ("<kind> <key>": a two-phase grant its `w` never collected holds a token the
    // client does not know).
    bool lost_notify = false;
    bool notify_on = false;
    std::set<std::string> lost_lines;
    std::set<std::string> granted_slots;
    std::set<std::string> released_slots;
    std::set<std::string> asked_here;
    std::set<std::string> asked_ever;
  };

  std::int64_t now_ns() const { return cluster_.now().ns(); }

  void fail(const std::string& invariant, const std::string& detail) {
    if (!result_.ok) return;
    result_.ok = false;
    result_.invariant = invariant;
    result_.detail = detail;
  }

  std::unique_ptr<Checker> make_checker() {
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
  std::unique_ptr<NodeProcess> start_process(unsigned node) {
    const std::uint32_t tag = 1 + node + nodes_ * static_cast<std::uint32_t>(lives_[node]++);
    return std::make_unique<NodeProcess>(tag, cluster_.replica(node), leader_config_);
  }

  // ---- the nodes' processes ------------------------------------------------------------------

  // What raft says reaches the node's process; its messages move; the entries it takes are
  // proposed; its replies reach its clients.
  void drive(unsigned node) {
    NodeProcess* process = processes_[node].get();
    if (process == nullptr) return;
    const core::Instant now = cluster_.now();
    if (cluster_.ready(node)) {
      const std::uint64_t term = cluster_.term(node);
      if (process->leading_term() != term) {
        process->lead(now, term);
        if (process->leading_term() == term) {
          if (options_.trace)
            std::printf("%lld node %u leads term %llu\n",
                        static_cast<long long>(now_ns() / kNsPerMs), node,
                        static_cast<unsigned long long>(term));
          ++result_.coverage["lead"];
          digest_.add(0x1ead00 + node);
        }
      }
    } else {
      const std::optional<unsigned> leader = cluster_.leader();
      process->follow(leader && *leader != node ? client_address(*leader) : std::string());
    }
    process->pump(now);
    while (std::optional<core::LogEntry> entry = process->take_entry(now, salts_.next())) {
      const std::uint64_t index = cluster_.propose(node, *entry);
      if (index == 0) {
        // Raft refused: the node no longer leads, whatever it was told last.
        ++result_.coverage["refused"];
        process->follow({});
        break;
      }
      digest_.add(index);
      ++result_.coverage["proposed"];
    }
    process->pump(now);
    for (SessionId closed : process->take_closed()) {
      auto it = history_connections_.find(closed.value);
      if (it != history_connections_.end()) history_.connection_closed(it->second, now_ns());
    }
    for (Client& client : clients_) {
      if (client.node != node || !result_.ok) continue;
      client.input += process->take_output(client.session);
      std::size_t newline = 0;
      while (client.node == node && (newline = client.input.find('\n')) != std::string::npos) {
        const std::string line = client.input.substr(0, newline);
        client.input.erase(0, newline + 1);
        client_line(client, line);
      }
    }
  }

  unsigned alive_count() const {
    unsigned alive = 0;
    for (unsigned i = 0; i < nodes_; ++i) alive += cluster_.alive(i) ? 1 : 0;
    return alive;
  }

  // Kills a live node (the leader half the time), keeping a majority alive most of the time. Its
  // process dies with it: its clients' connections break.
  void kill_one() {
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
    for (Client& client : clients_) {
      if (client.node == *victim) connection_lost(client);
    }
    digest_.add(0xdead00 + *victim);
    ++result_.crashes;
  }

  void revive_one() { revive(static_cast<unsigned>(faults_.below(nodes_))); }

  void revive(unsigned node) {
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
  static std::uint64_t recorded(const RaftDisk& disk) {
    const core::SlotRecovery recovery = core::recover_slots(core::kAckedFormat, disk.record_file());
    if (recovery.outcome == core::SlotRecovery::Outcome::kRefused) return 0;
    return core::AckedIndex(recovery).durable().index;
  }

  void damage_disk(unsigned node) {
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
  bool restart(unsigned node) {
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
      std::printf("%lld node %u refused to start: %s\n",
                  static_cast<long long>(now_ns() / kNsPerMs), node, refusal.c_str());
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

  // ---- the clients ---------------------------------------------------------------------------

  ResourceKey pick_key(bool semaphore) {
    return {semaphore ? Namespace::kSemaphore : Namespace::kLock,
            (semaphore ? "s" : "k") + std::to_string(work_.below(3))};
  }

  void client_act(Client& client) {
    if (client.stopped) return;
    if (!client.node) {
      connect(client);
      return;
    }
    if (client.pending) {
      if (work_.chance(30)) {
        ++result_.coverage["vanish-while-waiting"];
        disconnect(client);
      }
      return;
    }
    if (work_.chance(40)) {
      disconnect(client);
      return;
    }
    Outstanding out;
    Request& request = out.request;
    if (shape_.rw_permille > 0 && work_.chance(shape_.rw_permille)) {
      if (!pick_rw_request(client, request)) return;
      request.ref = client.ref;  // the session's, for the History (the wire does not carry it)
      send(client, std::move(out));
      return;
    }
    const std::uint64_t dice = work_.below(1000);
    const bool semaphore = work_.chance(350);
    const std::int64_t lease = work_.between(1, 5);
    auto any_held = [&]() -> std::optional<std::pair<ResourceKey, core::Token>> {
      if (client.view.held.empty()) return std::nullopt;
      auto it = client.view.held.begin();
      std::advance(it, static_cast<long>(work_.below(client.view.held.size())));
      return *it;
    };
    if (dice < 40) {
      request.command = Command::kStats;
    } else if (dice < 450) {
      ResourceKey key = pick_key(semaphore);
      // A client with a ref comes back for what it held on an earlier connection: the same
      // token, if its slot was kept (adoption), or a new grant, or none.
      if (!client.ref.empty() && work_.chance(400)) {
        for (const auto& [held_key, token] : client.view.held) {
          if (client.held_on[held_key] != client.connection) {
            key = held_key;
            ++result_.coverage["adopt-try"];
            break;
          }
        }
      }
      request.command = key.first == Namespace::kSemaphore ? Command::kSemLock : Command::kLock;
      request.key = key.second;
      request.limit = key.first == Namespace::kSemaphore ? 2 : 1;
      request.timeout_s = work_.chance(300) ? 0 : work_.between(1, 3);
      request.lease_s = lease;
    } else if (dice < 650) {
      // Release: mostly a token held, now and then a stale or foreign one.
      std::optional<std::pair<ResourceKey, core::Token>> held = any_held();
      ResourceKey key;
      core::Token token;
      if (held && work_.chance(850)) {
        key = held->first;
        token = held->second;
      } else if (!token_pool_.empty()) {
        key = pick_key(semaphore);
        token = token_pool_[work_.below(token_pool_.size())];
      } else {
        return;
      }
      request.command =
          key.first == Namespace::kSemaphore ? Command::kSemRelease : Command::kRelease;
      request.key = key.second;
      request.token = token;
    } else if (dice < 780) {
      // Renew a token held, from whichever connection the client has now.
      std::optional<std::pair<ResourceKey, core::Token>> held = any_held();
      if (!held) return;
      request.command =
          held->first.first == Namespace::kSemaphore ? Command::kSemRenew : Command::kRenew;
      request.key = held->first.second;
      request.token = held->second;
      request.lease_s = lease;
    } else if (dice < 900) {
      const ResourceKey key = pick_key(semaphore);
      request.command = semaphore ? Command::kSemEnqueue : Command::kEnqueue;
      request.key = key.second;
      request.limit = semaphore ? 2 : 1;
      request.lease_s = lease;
    } else {
      ResourceKey key = pick_key(semaphore);
      if (!client.view.enqueued.empty() && work_.chance(900)) {
        auto it = client.view.enqueued.begin();
        std::advance(it, static_cast<long>(work_.below(client.view.enqueued.size())));
        key = it->first;
      }
      request.command = key.first == Namespace::kSemaphore ? Command::kSemWait : Command::kWait;
      request.key = key.second;
      request.timeout_s = work_.between(0, 2);
    }
    request.ref = client.ref;  // the session's, for the History (the wire does not carry it)
    send(client, std::move(out));
  }

  // A read-write lock command (rl wl rr wr rn wn re we rw ww) on one of three keys: releases,
  // renewals and waits mostly of what the client holds or enqueued, with its kind, now and then
  // of the other kind (answered `error`, changing nothing). False: nothing to send.
  bool pick_rw_request(Client& client, Request& request) {
    const std::string key = "k" + std::to_string(work_.below(3));
    const bool read = work_.chance(600);
    const bool other_kind = work_.chance(80);
    const std::int64_t lease = work_.between(1, 5);
    std::vector<ResourceKey> held;
    for (const auto& [held_key, token] : client.view.held) {
      if (held_key.first == Namespace::kReadWrite) held.push_back(held_key);
    }
    auto kind_of = [&](bool shared) {
      if (other_kind) ++result_.coverage["rw-other-kind"];
      return other_kind ? !shared : shared;
    };
    const std::uint64_t dice = work_.below(1000);
    if (dice < 400) {
      request.command = read ? Command::kReadLock : Command::kWriteLock;
      request.key = key;
      request.timeout_s = work_.chance(300) ? 0 : work_.between(1, 3);
      request.lease_s = lease;
    } else if (dice < 620) {
      ResourceKey target{Namespace::kReadWrite, key};
      core::Token token;
      bool shared = read;
      if (!held.empty() && work_.chance(850)) {
        target = held[work_.below(held.size())];
        token = client.view.held.at(target);
        shared = kind_of(client.view.held_shared.count(target) != 0);
      } else if (!token_pool_.empty()) {
        token = token_pool_[work_.below(token_pool_.size())];
      } else {
        return false;
      }
      request.command = shared ? Command::kReadRelease : Command::kWriteRelease;
      request.key = target.second;
      request.token = token;
    } else if (dice < 740) {
      if (held.empty()) return false;
      const ResourceKey target = held[work_.below(held.size())];
      request.command = kind_of(client.view.held_shared.count(target) != 0) ? Command::kReadRenew
                                                                            : Command::kWriteRenew;
      request.key = target.second;
      request.token = client.view.held.at(target);
      request.lease_s = lease;
    } else if (dice < 880) {
      request.command = read ? Command::kReadEnqueue : Command::kWriteEnqueue;
      request.key = key;
      request.lease_s = lease;
    } else {
      ResourceKey target{Namespace::kReadWrite, key};
      bool shared = read;
      std::vector<ResourceKey> enqueued;
      for (const auto& [enqueued_key, since] : client.view.enqueued) {
        if (enqueued_key.first == Namespace::kReadWrite) enqueued.push_back(enqueued_key);
      }
      if (!enqueued.empty() && work_.chance(900)) {
        target = enqueued[work_.below(enqueued.size())];
        shared = kind_of(client.view.enqueued_shared.count(target) != 0);
      }
      request.command = shared ? Command::kReadWait : Command::kWriteWait;
      request.key = target.second;
      request.timeout_s = work_.between(0, 2);
    }
    return true;
  }

  void connect(Client& client) {
    unsigned node = client.hint.value_or(static_cast<unsigned>(work_.below(nodes_)));
    client.hint.reset();
    if (!processes_[node]) {
      ++result_.coverage["connect-refused"];
      return;
    }
    client.node = node;
    client.session = processes_[node]->connect(cluster_.now());
    client.connection = ++connections_;
    history_connections_[client.session.value] = client.connection;
    ++result_.coverage["connect"];
    digest_.add(0xc0ec00 + node);
    client.notify_on = false;
    client.lost_lines.clear();
    client.asked_here.clear();
    if (!client.ref.empty()) {
      Outstanding out;
      out.ref_line = true;
      out.request.command = Command::kStableRef;
      out.request.ref = client.ref;
      send(client, std::move(out));
    } else {
      send_lost_notify(client);
    }
  }

  // `lost-notify _ on`, first on the connection (after its stable-ref line), from a client that
  // asks for them.
  void send_lost_notify(Client& client) {
    if (!client.lost_notify) return;
    Outstanding out;
    out.notify_line = true;
    out.request.command = Command::kLostNotify;
    out.request.key = "_";
    out.request.enable = true;
    ++result_.coverage["lost-notify-connection"];
    send(client, std::move(out));
  }

  // A `lost <kind> <key> <token> <reason>` line: on a connection that asked (its `ok` came
  // first), for a slot the client was granted and did not release `ok` (expired), or one granted
  // to a client of its stable ref (reclaimed), once per connection; never `forced` (the cluster
  // profiles have no operator).
  void client_lost_line(Client& client, const std::string& line) {
    auto bad = [&](const std::string& why) {
      fail("lost-notify", "client " + std::to_string(client.id) + " read `" + line + "`: " + why);
    };
    if (!client.notify_on) return bad("its connection never asked for lost lines");
    const std::size_t reason_at = line.rfind(' ');
    const std::string slot = line.substr(5, reason_at - 5);  // "<kind> <key> <token>"
    const std::string reason = line.substr(reason_at + 1);
    const std::string key = slot.substr(0, slot.rfind(' '));  // "<kind> <key>"
    if (!client.lost_lines.insert(line).second) return bad("a second time on one connection");
    if (reason == "expired") {
      if (client.granted_slots.count(slot) == 0 && client.asked_here.count(key) == 0) {
        return bad("a slot it was never granted, on a key it did not ask for on this connection");
      }
      if (client.released_slots.count(slot) != 0) return bad("a slot it released");
      ++result_.coverage["lost-expired"];
      return;
    }
    if (reason == "reclaimed") {
      for (const Client& other : clients_) {
        if (!client.ref.empty() && other.ref == client.ref &&
            (other.granted_slots.count(slot) != 0 || other.asked_ever.count(key) != 0)) {
          ++result_.coverage["lost-reclaimed"];
          return;
        }
      }
      return bad("a slot of a key no client of its stable ref asked for");
    }
    bad("a reason a cluster without an operator never has");
  }

  void send(Client& client, Outstanding out) {
    std::string bytes;
    core::encode_request(out.request, bytes);
    out.sent_ns = now_ns();
    if (core::is_engine_command(out.request.command)) {
      out.op = history_.call(client.id, client.connection, out.request, out.sent_ns);
      const core::Operation operation = core::command_operation(out.request.command);
      if (operation == core::Operation::kAcquire || operation == core::Operation::kEnqueue ||
          operation == core::Operation::kWait) {
        const std::string key =
            std::string(core::namespace_word(core::command_namespace(out.request.command))) + " " +
            out.request.key;
        client.asked_here.insert(key);
        client.asked_ever.insert(key);
      }
    }
    digest_.add(bytes);
    if (options_.trace) {
      std::printf(
          "%lld client %llu node %u session %llx sends %s %s\n",
          static_cast<long long>(now_ns() / kNsPerMs), static_cast<unsigned long long>(client.id),
          *client.node, static_cast<unsigned long long>(client.session.value),
          std::string(core::command_name(out.request.command)).c_str(), out.request.key.c_str());
    }
    client.pending = std::move(out);
    processes_[*client.node]->send(cluster_.now(), client.session, bytes);
    drive(*client.node);  // the node proposes its entry at once, as turnstiled does
  }

  // The client closes its connection; what it held stays its own (by token) as the node's
  // --auto-release-on-disconnect and --orphan-ttl say.
  void disconnect(Client& client) {
    if (!client.node) return;
    if (NodeProcess* process = processes_[*client.node].get()) {
      process->disconnect(cluster_.now(), client.session);
    }
    if (options_.trace)
      std::printf("%lld client %llu disconnects\n", static_cast<long long>(now_ns() / kNsPerMs),
                  static_cast<unsigned long long>(client.id));
    connection_lost(client);
    digest_.add(0xd15c00 + client.id);
  }

  // The connection is gone (closed, or the node died): a request in flight stays indefinite.
  void connection_lost(Client& client) {
    client.node.reset();
    client.pending.reset();
    client.input.clear();
    client.view.forget_enqueued();
  }

  void client_line(Client& client, const std::string& line) {
    if (line.rfind("lost ", 0) == 0) {
      client_lost_line(client, line);
      return;
    }
    if (!client.pending) {
      fail("protocol",
           "client " + std::to_string(client.id) + " got an unsolicited reply: " + line);
      return;
    }
    const Outstanding out = std::move(*client.pending);
    client.pending.reset();
    if (options_.trace) {
      std::printf("%lld client %llu node %u gets %s (op %llu)\n",
                  static_cast<long long>(now_ns() / kNsPerMs),
                  static_cast<unsigned long long>(client.id), client.node.value_or(99),
                  line.c_str(), static_cast<unsigned long long>(out.op));
    }
    const Request& request = out.request;
    if (out.ref_line) {
      if (line != "ok") fail("protocol", "stable-ref answered " + line);
      send_lost_notify(client);
      return;
    }
    if (out.notify_line) {
      if (line != "ok") fail("protocol", "lost-notify answered " + line);
      client.notify_on = true;
      return;
    }
    const std::optional<core::Reply> reply = core::decode_reply(request.command, line);
    if (!reply) {
      fail("protocol", std::string(core::command_name(request.command)) + " answered " + line +
                           ", which is no reply to it");
      return;
    }
    if (reply->status == core::Status::kErrorNotLeader) {
      // Its outcome is unknown (an entry in flight may still commit): it stays indefinite. The
      // client goes to the leader named, if any.
      ++result_.coverage["not-leader"];
      if (!reply->payload.empty()) ++result_.coverage["not-leader-named"];
      client.hint = node_of_address(reply->payload, nodes_);
      disconnect(client);
      return;
    }
    const ResourceKey key{core::command_namespace(request.command), request.key};
    const std::optional<core::Token> before = held_token(client, key);
    const std::optional<core::Token> granted =
        client.view.on_reply(request, *reply, out.sent_ns, out.op, history_);
    if (reply->token && key.first == Namespace::kReadWrite) {
      ++result_.coverage[core::is_shared_command(request.command) ? "rw-read-granted"
                                                                  : "rw-write-granted"];
    }
    auto slot_of = [&](const core::Token& token) {
      return std::string(core::namespace_word(key.first)) + " " + key.second + " " +
             token.to_string();
    };
    if (granted) client.granted_slots.insert(slot_of(*granted));
    if (request.token && reply->status == core::Status::kOk &&
        core::command_operation(request.command) == core::Operation::kRelease) {
      client.released_slots.insert(slot_of(*request.token));
    }
    if (granted) {
      if (before == granted && client.held_on[key] != client.connection) {
        ++result_.coverage["adopted"];
      }
      client.held_on[key] = client.connection;
      token_pool_.push_back(*granted);
      if (token_pool_.size() > 64) token_pool_.erase(token_pool_.begin(), token_pool_.begin() + 32);
    }
    if (out.op != 0) {
      history_.complete(out.op, now_ns(), std::string(core::status_name(reply->status)),
                        reply->token, reply->seconds);
    }
  }

  static std::optional<core::Token> held_token(const Client& client, const ResourceKey& key) {
    auto it = client.view.held.find(key);
    if (it == client.view.held.end()) return std::nullopt;
    return it->second;
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
    for (unsigned node = 0; node < nodes_ && result_.ok; ++node) {
      if (processes_[node] && !processes_[node]->anomalies().empty()) {
        fail("driver-contract",
             "node " + std::to_string(node) + ": " + processes_[node]->anomalies().front());
      }
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

  // Every fault heals and clients stop asking: within kHealedWaitMs every request is answered,
  // and every replica reaches the same state.
  void heal_and_converge() {
    heal_links();
    for (unsigned node = 0; node < nodes_; ++node) revive(node);
    for (Client& client : clients_) client.stopped = true;
    const std::optional<unsigned> ready = cluster_.step_until_ready(30'000);
    if (!ready) {
      fail("liveness", "no leader ready 30 s after every fault healed");
      return;
    }
    for (unsigned waited = 0; waited < kHealedWaitMs && waiting_client(); waited += 100) {
      cluster_.step_for(100);
    }
    if (const Client* client = waiting_client()) {
      const Outstanding& out = *client->pending;
      fail("liveness", "client " + std::to_string(client->id) + " still waits for " +
                           (out.ref_line ? std::string("stable-ref")
                                         : std::string(core::command_name(out.request.command)) +
                                               " " + out.request.key) +
                           " (sent at " + std::to_string(out.sent_ns / kNsPerMs) + " ms) on node " +
                           std::to_string(*client->node) + " " +
                           std::to_string(kHealedWaitMs / 1000) + " s after the heal");
      return;
    }
    // A revived node can unseat the leader once more while the cluster settles: three tries for
    // every replica to apply what a ready leader has.
    bool caught_up = false;
    for (int attempt = 0; attempt < 3 && !caught_up; ++attempt) {
      const std::optional<unsigned> leader = cluster_.step_until_ready(30'000);
      caught_up = leader && cluster_.step_until_applied(cluster_.last_index(*leader), 30'000) &&
                  cluster_.ready(*leader);
    }
    if (!caught_up) {
      std::string state;
      for (unsigned node = 0; node < nodes_; ++node) {
        state += "; node " + std::to_string(node) + (cluster_.alive(node) ? "" : " down") +
                 (cluster_.ready(node) ? " ready" : "") + " term " +
                 std::to_string(cluster_.term(node)) + " applied " +
                 std::to_string(cluster_.applied(node)) + " last " +
                 std::to_string(cluster_.last_index(node));
      }
      fail("liveness",
           "a healed cluster's replicas did not catch up with a leader in 30 s, three times" +
               state);
      return;
    }
    // Every replica at the leader's last entry (the leader may still be proposing ticks: a few
    // rounds until they all stand at one index) holds the same state.
    // A node that refused to start is out of the cluster; the others are compared with the first
    // that runs.
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

  const Client* waiting_client() const {
    for (const Client& client : clients_) {
      if (client.node && client.pending) return &client;
    }
    return nullptr;
  }

  // What the clients saw, key by key, linearizes against the lock model (sim/history.h).
  void check_history() {
    const History::Outcome outcome = history_.check();
    result_.keys_checked = outcome.keys_checked;
    result_.inconclusive = outcome.inconclusive;
    result_.operations_checked = outcome.operations;
    if (!outcome.violation.empty()) fail(outcome.invariant, outcome.violation);
  }

  Options options_;
  unsigned nodes_;
  Prng work_;
  Prng losses_;  // which clients ask for lost-notify
  Prng faults_;
  Prng disk_;  // crashes rather than pauses, and the damage a crashed node's disk takes
  Prng salts_;
  ClusterShape shape_;  // before cluster_, whose replicas' engines it configures
  RaftCluster cluster_;
  core::ClusterLeaderConfig leader_config_;
  Settings checker_settings_ = replica_checker_settings(true);
  bool checker_failed_ = false;
  std::vector<std::unique_ptr<NodeProcess>> processes_;  // null while the node is down
  std::vector<std::uint64_t> lives_;                     // per node: processes started
  std::vector<std::unique_ptr<Checker>> checkers_;       // per node: its replica's engine
  std::vector<Client> clients_;
  std::vector<core::Token> token_pool_;  // tokens seen, for stale and foreign releases
  History history_;
  std::uint64_t connections_ = 0;
  std::map<std::uint64_t, std::uint64_t> history_connections_;  // session id -> connection
  Digest digest_;
  Result result_;
  std::set<std::pair<unsigned, unsigned>> cut_;
  std::set<unsigned> damaged_;  // crashed nodes whose disk lost what they acknowledged
  std::set<unsigned> refused_;  // nodes that refused to start: down for good
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
};

}  // namespace

bool is_cluster_profile(const std::string& profile) {
  return profile == "cluster-3" || profile == "cluster-5";
}

Result run_cluster_simulation(const Options& options) { return ClusterRun(options).run(); }

}  // namespace turnstile::sim
