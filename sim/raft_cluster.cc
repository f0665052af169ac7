#include "sim/raft_cluster.h"

#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <type_traits>
#include <utility>

#include "core/acked_index.h"
#include "core/assert.h"
#include "core/canary.h"
#include "core/slot_record.h"
#include "net/raft_acked_record.h"
#include "net/raft_commit_rule.h"
#include "sim/raft_disk.h"

// canonical raft's headers have no extern "C" of their own.
extern "C" {
#include <raft.h>
#include <raft/fixture.h>
}

namespace turnstile::sim {

namespace {

// Fixture time is in milliseconds from 0; the replicas see it from a fixed start.
constexpr std::int64_t kStartNs = 1'000'000'000'000;
constexpr std::size_t kResultsKept = 4096;
// A snapshot every 64 entries, keeping the last 16 behind it in the log.
constexpr unsigned kSnapshotThreshold = 64;
constexpr unsigned kSnapshotTrailing = 16;

// The request types share their names with the functions that take them.
using ApplyRequest = struct raft_apply;
using BarrierRequest = struct raft_barrier;

}  // namespace

// The fixture first, so that the step hook, which is handed the fixture, finds its cluster.
struct RaftCluster::Fixture {
  raft_fixture f{};
  RaftCluster* cluster = nullptr;
};

struct RaftCluster::Node {
  RaftCluster* cluster = nullptr;
  unsigned index = 0;
  raft_fsm fsm{};
  std::unique_ptr<core::Replica> replica;
  std::map<std::uint64_t, core::AppliedEntry> results;  // by raft index
  std::uint64_t barrier_term = 0;  // the last term in which it led and proposed a barrier
  std::uint64_t ready_term = 0;    // the last term whose barrier it applied as leader
  std::uint64_t life = 0;  // bumped by kill and revive: a barrier of an earlier life is void
  std::unique_ptr<RaftDisk> disk;
  std::unique_ptr<core::AckedIndex> acked;  // the record's state, for this process
  bool crashed = false;                     // from crash() until a restart() that runs
  // What it showed when it crashed, while it is down.
  std::uint64_t crashed_term = 0;
  std::uint64_t crashed_last = 0;
  std::uint64_t crashed_applied = 0;
  std::uint64_t crashed_stored = 0;  // raft's last entry reported stored: what it acknowledged

  void new_life() {
    ++life;
    ready_term = 0;
    barrier_term = 0;
  }
};

// A barrier in flight: whose, of which term and life.
struct BarrierRequestOf {
  BarrierRequest raft{};  // first: the callback gets its address
  std::uint64_t term = 0;
  std::uint64_t life = 0;
};

struct RaftCluster::Callbacks {
  // raft_fsm.apply: a committed command entry, in log order, on every node.
  static int apply(raft_fsm* fsm, const raft_buffer* buf, void** result) {
    *result = nullptr;
    Node& node = *static_cast<Node*>(fsm->data);
    raft* r = raft_fixture_get(&node.cluster->fixture_->f, node.index);
    const std::uint64_t index = raft_last_applied(r) + 1;
    const std::optional<core::LogEntry> entry =
        core::decode_entry(std::string_view(static_cast<const char*>(buf->base), buf->len));
    if (!entry) {
      // A committed entry that does not decode is a broken log; the replica must not guess.
      ++node.cluster->rejected_;
      return 0;
    }
    const core::AppliedEntry& applied = node.results[index] =
        node.replica->apply(node.replica->applied_index() + 1, *entry);
    if (node.cluster->host_ != nullptr)
      node.cluster->host_->on_applied(node.index, *entry, applied);
    while (node.results.size() > kResultsKept) node.results.erase(node.results.begin());
    return 0;
  }
  // raft_fsm.snapshot: the replica's whole state in one buffer; raft owns (and frees) both the
  // array and the buffer.
  static int snapshot(raft_fsm* fsm, raft_buffer** bufs, unsigned* n_bufs) {
    const Node& node = *static_cast<Node*>(fsm->data);
    const std::string bytes = node.replica->save();
    auto* array = static_cast<raft_buffer*>(raft_malloc(sizeof(raft_buffer)));
    void* base = raft_malloc(bytes.size());
    if (array == nullptr || base == nullptr) {
      raft_free(array);
      raft_free(base);
      return RAFT_NOMEM;
    }
    std::memcpy(base, bytes.data(), bytes.size());
    array[0].base = base;
    array[0].len = bytes.size();
    *bufs = array;
    *n_bufs = 1;
    ++node.cluster->snapshots_taken_;
    return 0;
  }
  // raft_fsm.restore: a snapshot installed by the leader (or loaded at start) replaces the
  // replica's state; on success the buffer is ours to free. A snapshot that does not restore is
  // a broken log, counted like an entry that does not decode.
  static int restore(raft_fsm* fsm, raft_buffer* buf) {
    Node& node = *static_cast<Node*>(fsm->data);
    if (!node.replica->restore(std::string_view(static_cast<const char*>(buf->base), buf->len))) {
      ++node.cluster->rejected_;
      return RAFT_MALFORMED;
    }
    raft_free(buf->base);
    node.results.clear();  // entries it did not apply itself have no results here
    ++node.cluster->snapshots_restored_;
    if (node.cluster->host_ != nullptr) node.cluster->host_->on_restored(node.index);
    return 0;
  }
  // After every fixture step: a node that has just begun to lead (a new term) proposes a barrier
  // at once, as turnstiled's nodes do. It is the entry of its own term that commits the entries
  // of earlier terms in its log under Raft's commit rule (net/raft_commit_rule.h). Then the
  // driver moves its messages.
  static void on_step(raft_fixture* f, raft_fixture_event*) {
    static_assert(std::is_standard_layout_v<Fixture>);
    RaftCluster& cluster = *reinterpret_cast<Fixture*>(f)->cluster;
    // The disks first: what they finish is part of this step.
    for (auto& node : cluster.nodes_) node->disk->finish_due(raft_fixture_time(f));
    // CANARY (core/canary.h): turnstile-sim-canary-raft's leaders propose their barrier only
    // when the driver asks, once per simulation step (propose_barriers).
    if constexpr (!core::canary::kSkipCommitRule) cluster.propose_barriers();
    if (cluster.host_ != nullptr) cluster.host_->after_step();
  }
  // raft_apply's and raft_barrier's completion: the request was ours to free.
  static void applied(ApplyRequest* request, int, void*) { delete request; }
  // A leader's barrier applied (status 0): it is ready, if it still leads in the barrier's term
  // and was not killed since.
  static void barrier_done(BarrierRequest* request, int status) {
    static_assert(std::is_standard_layout_v<BarrierRequestOf>);
    auto* of = reinterpret_cast<BarrierRequestOf*>(request);
    auto* node = static_cast<Node*>(request->data);
    raft* r = raft_fixture_get(&node->cluster->fixture_->f, node->index);
    if (status == 0 && node->life == of->life && raft_state(r) == RAFT_LEADER &&
        r->current_term == of->term) {
      node->ready_term = of->term;
    }
    delete of;
  }
};

std::uint64_t RaftCluster::compacted_answers() const {
  return net::commit_rule_compacted_answers() - compacted_answers_before_;
}

RaftCluster::RaftCluster(unsigned nodes, std::uint64_t seed, const core::EngineConfig& engine)
    : engine_(engine),
      fixture_(std::make_unique<Fixture>()),
      compacted_answers_before_(net::commit_rule_compacted_answers()) {
  TS_ASSERT(nodes >= 1 && nodes <= 5);
  raft_fixture* f = &fixture_->f;
  TS_ASSERT(raft_fixture_initialize(f) == 0);
  for (unsigned i = 0; i < nodes; ++i) {
    auto node = std::make_unique<Node>();
    node->cluster = this;
    node->index = i;
    node->replica = std::make_unique<core::Replica>(engine);
    node->fsm.version = 1;
    node->fsm.data = node.get();
    node->fsm.apply = &Callbacks::apply;
    node->fsm.snapshot = &Callbacks::snapshot;
    node->fsm.restore = &Callbacks::restore;
    TS_ASSERT(raft_fixture_grow(f, &node->fsm) == 0);
    // Disk writes take 1 to 8 ms, from the seed.
    node->disk =
        std::make_unique<RaftDisk>(1 + static_cast<unsigned>((seed + i * 5) % 8), seed * 8 + i);
    node->disk->install(raft_fixture_get(f, i)->io);
    nodes_.push_back(std::move(node));
  }
  // The record goes on before the bootstrap, as in turnstiled: the configuration entry the
  // bootstrap writes is the first entry it records.
  for (unsigned i = 0; i < nodes; ++i) configure(i);
  raft_configuration configuration;
  TS_ASSERT(raft_fixture_configuration(f, nodes, &configuration) == 0);
  TS_ASSERT(raft_fixture_bootstrap(f, &configuration) == 0);
  raft_configuration_close(&configuration);
  election_timeout_ms_ = raft_fixture_get(f, 0)->election_timeout;
  heartbeat_timeout_ms_ = raft_fixture_get(f, 0)->heartbeat_timeout;
  for (unsigned i = 0; i < nodes; ++i) {
    // Message latency from the seed (the library draws each election timeout itself: fixing
    // them would let two nodes split their votes forever).
    raft_fixture_set_network_latency(f, i, 5 + static_cast<unsigned>((seed + i * 7) % 20));
  }
  fixture_->cluster = this;
  raft_fixture_hook(f, &Callbacks::on_step);
  TS_ASSERT(raft_fixture_start(f) == 0);
}

RaftCluster::~RaftCluster() { raft_fixture_close(&fixture_->f); }

raft* RaftCluster::instance(unsigned node) const { return raft_fixture_get(&fixture_->f, node); }

void RaftCluster::configure(unsigned index) {
  Node& node = *nodes_.at(index);
  raft* r = instance(index);
  // Snapshots often, so that logs stay short and lagging nodes catch up from snapshots.
  raft_set_snapshot_threshold(r, kSnapshotThreshold);
  raft_set_snapshot_trailing(r, kSnapshotTrailing);
  // CANARY (core/canary.h): only turnstile-sim-canary-raft runs libraft 0.15 as it is: without
  // the commit rule, and with leaders that propose their barrier only once per simulation step.
  if constexpr (!core::canary::kSkipCommitRule) net::install_commit_rule(r);
  const core::SlotRecovery recovery =
      core::recover_slots(core::kAckedFormat, node.disk->record_file());
  TS_ASSERT(recovery.outcome != core::SlotRecovery::Outcome::kRefused);
  node.acked = std::make_unique<core::AckedIndex>(recovery);
  // CANARY (core/canary.h): turnstile-sim-canary-acked starts a node whose log lost acknowledged
  // entries.
  if constexpr (!core::canary::kSkipAckedRecord) {
    net::install_acked_record(r, node.acked.get(), node.disk.get());
  }
}

core::Instant RaftCluster::now() const {
  return core::Instant::from_ns(
      kStartNs + static_cast<std::int64_t>(raft_fixture_time(&fixture_->f)) * 1'000'000);
}

std::optional<unsigned> RaftCluster::leader() const {
  // The fixture forgets a dead leader only at its next step; a dead node leads nothing.
  const unsigned index = raft_fixture_leader_index(&fixture_->f);
  if (index >= nodes() || !alive(index)) return std::nullopt;
  return index;
}

bool RaftCluster::ready(unsigned node) const {
  if (!alive(node)) return false;
  raft* r = raft_fixture_get(&fixture_->f, node);
  return raft_state(r) == RAFT_LEADER && r->current_term == nodes_.at(node)->ready_term;
}

std::uint64_t RaftCluster::term(unsigned node) const {
  if (nodes_.at(node)->crashed) return nodes_[node]->crashed_term;
  return raft_fixture_get(&fixture_->f, node)->current_term;
}

std::uint64_t RaftCluster::last_index(unsigned node) const {
  if (nodes_.at(node)->crashed) return nodes_[node]->crashed_last;
  return raft_last_index(raft_fixture_get(&fixture_->f, node));
}

void RaftCluster::propose_barriers() {
  // CANARY (core/canary.h): a leader's barrier comes late (on one call in 24, about 3.5 s of the
  // simulation's steps), as when a leader proposes one only when a request first needs it.
  if (core::canary::kSkipCommitRule && ++barrier_calls_ % 24 != 0) return;
  raft_fixture* f = &fixture_->f;
  for (auto& node : nodes_) {
    raft* r = raft_fixture_get(f, node->index);
    if (!raft_fixture_alive(f, node->index) || raft_state(r) != RAFT_LEADER ||
        r->current_term == node->barrier_term) {
      continue;
    }
    auto* barrier = new BarrierRequestOf();
    barrier->raft.data = node.get();
    barrier->term = r->current_term;
    barrier->life = node->life;
    if (raft_barrier(r, &barrier->raft, &Callbacks::barrier_done) != 0) {
      delete barrier;
      continue;  // tried again after the next step
    }
    node->barrier_term = r->current_term;
  }
}

std::optional<unsigned> RaftCluster::step_until_ready(unsigned max_ms) {
  // In steps of 50 ms, proposing the barriers of new leaders before each (the builds without the
  // commit rule propose them only here).
  for (unsigned waited = 0;; waited += 50) {
    for (unsigned i = 0; i < nodes(); ++i) {
      if (ready(i)) return i;
    }
    if (waited >= max_ms) return std::nullopt;
    propose_barriers();
    step_for(50);
  }
}

std::uint64_t RaftCluster::propose(unsigned node, const core::LogEntry& entry) {
  if (!alive(node)) return 0;
  const std::string bytes = core::encode_entry(entry);
  raft_buffer buffer;
  buffer.len = bytes.size();
  buffer.base = raft_malloc(bytes.size());
  TS_ASSERT(buffer.base != nullptr);
  std::memcpy(buffer.base, bytes.data(), bytes.size());
  raft* r = raft_fixture_get(&fixture_->f, node);
  auto* request = new ApplyRequest();
  if (raft_apply(r, request, &buffer, 1, &Callbacks::applied) != 0) {
    raft_free(buffer.base);
    delete request;
    return 0;
  }
  return raft_last_index(r);
}

bool RaftCluster::step_until_applied(std::uint64_t index, unsigned max_ms) {
  struct Goal {
    const RaftCluster* cluster;
    std::uint64_t index;
  } goal{this, index};
  auto reached = [](raft_fixture*, void* arg) -> bool {
    const Goal& g = *static_cast<const Goal*>(arg);
    for (unsigned i = 0; i < g.cluster->nodes(); ++i) {
      if (g.cluster->alive(i) && g.cluster->applied(i) < g.index) return false;
    }
    return true;
  };
  return reached(&fixture_->f, &goal) ||
         raft_fixture_step_until(&fixture_->f, reached, &goal, max_ms);
}

void RaftCluster::step_for(unsigned ms) { raft_fixture_step_until_elapsed(&fixture_->f, ms); }

// A killed node's process is gone: what it was ready for, and any barrier it had in flight, is
// forgotten; a revived one proposes a barrier of its own before it is ready again.
void RaftCluster::kill(unsigned node) {
  raft_fixture_kill(&fixture_->f, node);
  nodes_.at(node)->new_life();
}

void RaftCluster::revive(unsigned node) {
  TS_ASSERT(!nodes_.at(node)->crashed);
  raft_fixture_revive(&fixture_->f, node);
  nodes_.at(node)->new_life();
}

void RaftCluster::crash(unsigned index) {
  Node& node = *nodes_.at(index);
  if (node.crashed) return;
  raft* r = instance(index);
  raft_fixture_kill(&fixture_->f, index);
  node.crashed_term = r->current_term;
  node.crashed_last = raft_last_index(r);
  node.crashed_applied = raft_last_applied(r);
  node.crashed_stored = r->last_stored;
  // The instance stays as it was, frozen (the fixture still reads it): restart() closes it.
  node.disk->crash();
  node.crashed = true;
  node.new_life();
}

std::string RaftCluster::restart(unsigned index) {
  Node& node = *nodes_.at(index);
  TS_ASSERT(node.crashed);
  raft* r = instance(index);
  // The dead process's instance goes (what its disk never finished is answered canceled; the
  // stub answers at once, so it is closed on return), and a new one starts on the same raft_io.
  raft_close(r, nullptr);
  TS_ASSERT(raft_init(r, r->io, &node.fsm, index + 1, fixture_->f.servers[index].address) == 0);
  raft_set_election_timeout(r, election_timeout_ms_);
  raft_set_heartbeat_timeout(r, heartbeat_timeout_ms_);
  configure(index);
  // A new process: an empty replica, which the snapshot on disk, then the log, fill again.
  node.replica = std::make_unique<core::Replica>(engine_);
  node.results.clear();
  if (host_ != nullptr) host_->on_restored(index);
  r->io->errmsg[0] = '\0';
  node.disk->restarting();
  if (raft_start(r) != 0) {
    std::string why = r->io->errmsg[0] != '\0' ? r->io->errmsg : raft_errmsg(r);
    node.disk->crash();
    return why.empty() ? "raft_start failed" : why;
  }
  node.crashed = false;
  raft_fixture_revive(&fixture_->f, index);
  node.new_life();
  return {};
}

bool RaftCluster::crashed(unsigned node) const { return nodes_.at(node)->crashed; }

std::uint64_t RaftCluster::acknowledged(unsigned node) const {
  TS_ASSERT(nodes_.at(node)->crashed);
  return nodes_[node]->crashed_stored;
}

RaftDisk& RaftCluster::disk(unsigned node) { return *nodes_.at(node)->disk; }

void RaftCluster::disconnect(unsigned a, unsigned b) {
  raft_fixture_disconnect(&fixture_->f, a, b);
  raft_fixture_disconnect(&fixture_->f, b, a);
}

void RaftCluster::reconnect(unsigned a, unsigned b) {
  raft_fixture_reconnect(&fixture_->f, a, b);
  raft_fixture_reconnect(&fixture_->f, b, a);
}

bool RaftCluster::alive(unsigned node) const { return raft_fixture_alive(&fixture_->f, node); }

bool RaftCluster::shut_down(unsigned node) const {
  return alive(node) && raft_state(raft_fixture_get(&fixture_->f, node)) == RAFT_UNAVAILABLE;
}

const core::Replica& RaftCluster::replica(unsigned node) const { return *nodes_.at(node)->replica; }

std::uint64_t RaftCluster::applied(unsigned node) const {
  if (nodes_.at(node)->crashed) return nodes_[node]->crashed_applied;
  return raft_last_applied(raft_fixture_get(&fixture_->f, node));
}

const core::AppliedEntry* RaftCluster::result(unsigned node, std::uint64_t index) const {
  const auto& results = nodes_.at(node)->results;
  auto it = results.find(index);
  return it == results.end() ? nullptr : &it->second;
}

}  // namespace turnstile::sim
