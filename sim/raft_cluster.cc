#include "sim/raft_cluster.h"

#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <type_traits>
#include <utility>

#include "core/assert.h"
#include "net/raft_commit_rule.h"

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
    node.results[index] = node.replica->apply(node.replica->applied_index() + 1, *entry);
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
    return 0;
  }
  // The fixture's in-memory disk (libraft 0.15) keeps its persisted entries in an array that it
  // indexes from log index 1 even after an installed snapshot has emptied it, so a later
  // truncation of a conflicting suffix copies from past the array's end (found by the cluster
  // profiles under valgrind: heap corruption). Those entries are read back only when a node
  // starts, which happens once here (a revived node keeps its memory), so the simulator makes
  // that truncation a no-op; raft's own in-memory log, from which the replicas apply, is
  // truncated as usual.
  static int keep_persisted_entries(raft_io*, raft_index) { return 0; }
  // After every fixture step: a node that has just begun to lead (a new term) proposes a barrier
  // at once, as turnstiled's nodes do. It is the entry of its own term that commits the entries
  // of earlier terms in its log under Raft's commit rule (net/raft_commit_rule.h).
  static void on_step(raft_fixture* f, raft_fixture_event*) {
    static_assert(std::is_standard_layout_v<Fixture>);
    RaftCluster& cluster = *reinterpret_cast<Fixture*>(f)->cluster;
    for (auto& node : cluster.nodes_) {
      raft* r = raft_fixture_get(f, node->index);
      if (!raft_fixture_alive(f, node->index) || raft_state(r) != RAFT_LEADER ||
          r->current_term == node->barrier_term) {
        continue;
      }
      auto* barrier = new BarrierRequest();
      if (raft_barrier(r, barrier, &barrier_done) != 0) {
        delete barrier;
        continue;  // tried again after the next step
      }
      node->barrier_term = r->current_term;
    }
  }
  // raft_apply's and raft_barrier's completion: the request was ours to free.
  static void applied(ApplyRequest* request, int, void*) { delete request; }
  static void barrier_done(BarrierRequest* request, int) { delete request; }
};

RaftCluster::RaftCluster(unsigned nodes, std::uint64_t seed, const core::EngineConfig& engine)
    : fixture_(std::make_unique<Fixture>()) {
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
    nodes_.push_back(std::move(node));
  }
  raft_configuration configuration;
  TS_ASSERT(raft_fixture_configuration(f, nodes, &configuration) == 0);
  TS_ASSERT(raft_fixture_bootstrap(f, &configuration) == 0);
  raft_configuration_close(&configuration);
  for (unsigned i = 0; i < nodes; ++i) {
    raft* r = raft_fixture_get(f, i);
    // Snapshots often, so that logs stay short and lagging nodes catch up from snapshots.
    r->io->truncate = &Callbacks::keep_persisted_entries;
#ifndef TURNSTILE_CANARY_SKIP_COMMIT_RULE
    // CANARY: only turnstile-sim-canary-raft runs libraft 0.15 as it is: without the commit
    // rule, and with leaders that propose a barrier only when elect() asks for one (below).
    net::install_commit_rule(r);
#endif
    raft_set_snapshot_threshold(r, kSnapshotThreshold);
    raft_set_snapshot_trailing(r, kSnapshotTrailing);
    // Message latency from the seed (the library draws each election timeout itself: fixing
    // them would let two nodes split their votes forever).
    raft_fixture_set_network_latency(f, i, 5 + static_cast<unsigned>((seed + i * 7) % 20));
  }
  fixture_->cluster = this;
#ifndef TURNSTILE_CANARY_SKIP_COMMIT_RULE
  raft_fixture_hook(f, &Callbacks::on_step);
#endif
  TS_ASSERT(raft_fixture_start(f) == 0);
}

RaftCluster::~RaftCluster() { raft_fixture_close(&fixture_->f); }

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

void RaftCluster::follow_leadership() {
  // A leader that lost its office and won it back is a new leader of a new term: it has no entry
  // of that term until it commits a barrier again (and, under the commit rule, commits nothing
  // before that).
  if (ready_leader_ &&
      (leader() != ready_leader_ ||
       raft_fixture_get(&fixture_->f, *ready_leader_)->current_term != ready_term_)) {
    ready_leader_.reset();
  }
}

void debug_dump(raft_fixture* f, unsigned n) {
  for (unsigned i = 0; i < n; ++i) {
    raft* r = raft_fixture_get(f, i);
    raft_id id = 0;
    const char* a = nullptr;
    raft_leader(r, &id, &a);
    fprintf(stderr,
            "node %u alive %d state %d term %llu leader %llu last %llu applied %llu commit %llu "
            "snap %llu time %llu timer %llu\n",
            i, raft_fixture_alive(f, i), raft_state(r), (unsigned long long)r->current_term,
            (unsigned long long)id, (unsigned long long)raft_last_index(r),
            (unsigned long long)raft_last_applied(r), (unsigned long long)r->commit_index,
            (unsigned long long)r->log.snapshot.last_index,
            (unsigned long long)raft_fixture_time(f), (unsigned long long)r->election_timer_start);
    for (unsigned j = 0; j < n; ++j)
      if (j != i) fprintf(stderr, "   sat %u->%u %d\n", i, j, raft_fixture_saturated(f, i, j));
  }
}
std::optional<unsigned> RaftCluster::elect(unsigned max_ms) {
  raft_fixture* f = &fixture_->f;
  follow_leadership();
  if (ready_leader_) return ready_leader_;
  auto has_live_leader = [](raft_fixture*, void* arg) -> bool {
    return static_cast<const RaftCluster*>(arg)->leader().has_value();
  };
  const raft_time start = raft_fixture_time(f);
  auto left = [&] {
    const raft_time spent = raft_fixture_time(f) - start;
    return spent >= max_ms ? 0U : max_ms - static_cast<unsigned>(spent);
  };
  // The fixture names a leader only while every live node connected to it follows it, so a node
  // revived a moment ago can unseat it until it has heard from the leader: try again while there
  // is time.
  while (left() > 0) {
    if (!has_live_leader(f, this) && !raft_fixture_step_until(f, has_live_leader, this, left())) {
      if (max_ms >= 30000) debug_dump(f, nodes());
      return std::nullopt;
    }
    const unsigned index = *leader();
    raft* r = raft_fixture_get(f, index);
    auto* barrier = new BarrierRequest();
    if (raft_barrier(r, barrier, &Callbacks::barrier_done) != 0) {
      delete barrier;
      raft_fixture_step(f);
      continue;
    }
    const raft_index barrier_index = raft_last_index(r);
    if (!raft_fixture_step_until_applied(f, index, barrier_index, left())) return std::nullopt;
    if (leader() != index) continue;
    // Every entry of earlier terms is applied here now: the log's clock goes on from the last.
    clock_ = core::LogClock{};
    clock_.take_over(now(), nodes_[index]->replica->time());
    ready_leader_ = index;
    ready_term_ = r->current_term;
    return index;
  }
  if (max_ms >= 30000) debug_dump(f, nodes());
  return std::nullopt;
}

std::uint64_t RaftCluster::propose(std::vector<core::LogCommand> commands, std::uint64_t salt) {
  follow_leadership();
  if (!ready_leader_) return 0;
  core::LogEntry entry;
  entry.time = clock_.next(now());
  entry.salt = salt;
  entry.commands = std::move(commands);
  const std::string bytes = core::encode_entry(entry);
  raft_buffer buffer;
  buffer.len = bytes.size();
  buffer.base = raft_malloc(bytes.size());
  TS_ASSERT(buffer.base != nullptr);
  std::memcpy(buffer.base, bytes.data(), bytes.size());
  raft* r = raft_fixture_get(&fixture_->f, *ready_leader_);
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
  const bool done =
      reached(&fixture_->f, &goal) || raft_fixture_step_until(&fixture_->f, reached, &goal, max_ms);
  follow_leadership();
  return done;
}

void RaftCluster::step_for(unsigned ms) {
  raft_fixture_step_until_elapsed(&fixture_->f, ms);
  follow_leadership();
}

void RaftCluster::kill(unsigned node) {
  raft_fixture_kill(&fixture_->f, node);
  follow_leadership();
}

void RaftCluster::revive(unsigned node) { raft_fixture_revive(&fixture_->f, node); }

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
  return raft_last_applied(raft_fixture_get(&fixture_->f, node));
}

const core::AppliedEntry* RaftCluster::result(unsigned node, std::uint64_t index) const {
  const auto& results = nodes_.at(node)->results;
  auto it = results.find(index);
  return it == results.end() ? nullptr : &it->second;
}

}  // namespace turnstile::sim
