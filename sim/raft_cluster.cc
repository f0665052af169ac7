#include "sim/raft_cluster.h"

#include <cstring>
#include <map>
#include <string>
#include <utility>

#include "core/assert.h"

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

// The request types share their names with the functions that take them.
using ApplyRequest = struct raft_apply;
using BarrierRequest = struct raft_barrier;

}  // namespace

struct RaftCluster::Fixture {
  raft_fixture f{};
};

struct RaftCluster::Node {
  RaftCluster* cluster = nullptr;
  unsigned index = 0;
  raft_fsm fsm{};
  std::unique_ptr<core::Replica> replica;
  std::map<std::uint64_t, core::AppliedEntry> results;  // by raft index
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
  // Snapshots are not taken yet (the threshold is out of reach); should raft ask, it is refused.
  static int snapshot(raft_fsm*, raft_buffer**, unsigned*) { return RAFT_NOTFOUND; }
  static int restore(raft_fsm*, raft_buffer*) { return RAFT_NOTFOUND; }
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
    raft_set_snapshot_threshold(r, ~0U);
    // Message latency from the seed (the library draws each election timeout itself: fixing
    // them would let two nodes split their votes forever).
    raft_fixture_set_network_latency(f, i, 5 + static_cast<unsigned>((seed + i * 7) % 20));
  }
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
  if (ready_leader_ && leader() != ready_leader_) ready_leader_.reset();
}

std::optional<unsigned> RaftCluster::elect(unsigned max_ms) {
  raft_fixture* f = &fixture_->f;
  follow_leadership();
  if (ready_leader_) return ready_leader_;
  auto has_live_leader = [](raft_fixture*, void* arg) -> bool {
    return static_cast<const RaftCluster*>(arg)->leader().has_value();
  };
  if (!has_live_leader(f, this) && !raft_fixture_step_until(f, has_live_leader, this, max_ms)) {
    return std::nullopt;
  }
  const unsigned index = *leader();
  raft* r = raft_fixture_get(f, index);
  auto* barrier = new BarrierRequest();
  if (raft_barrier(r, barrier, &Callbacks::barrier_done) != 0) {
    delete barrier;
    return std::nullopt;
  }
  const raft_index barrier_index = raft_last_index(r);
  if (!raft_fixture_step_until_applied(f, index, barrier_index, max_ms) || leader() != index) {
    return std::nullopt;
  }
  // Every entry of earlier terms is applied here now: the log's clock goes on from the last.
  clock_ = core::LogClock{};
  clock_.take_over(now(), nodes_[index]->replica->time());
  ready_leader_ = index;
  return index;
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
