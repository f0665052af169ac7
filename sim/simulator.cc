#include "sim/simulator.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/assert.h"
#include "core/engine.h"
#include "core/fence.h"
#include "core/protocol.h"
#include "core/random.h"
#include "core/router.h"
#include "core/routing.h"
#include "core/session.h"
#include "core/stats.h"
#include "core/time.h"
#include "core/types.h"
#include "core/wire.h"
#include "sim/checker.h"
#include "sim/digest.h"
#include "sim/disk.h"
#include "sim/event.h"
#include "sim/history.h"
#include "sim/network.h"
#include "sim/prng.h"
#include "sim/settings.h"

namespace turnstile::sim {
namespace {

using core::Instant;
using core::Namespace;
using core::SessionId;

// ---- the resource budget shared by the shards of one process (--max-locks) ---------------------

class Budget final : public core::ResourceBudget {
 public:
  explicit Budget(std::int64_t max) : max_(max) {}
  bool try_take() override {
    if (used_ >= max_) return false;
    ++used_;
    return true;
  }
  void give_back() override {
    TS_ASSERT(used_ > 0);
    --used_;
  }

 private:
  std::int64_t max_;
  std::int64_t used_ = 0;
};

// A salt source drawing from the run's salt stream.
class SaltSource final : public core::RandomSource {
 public:
  explicit SaltSource(Prng& prng) : prng_(prng) {}
  std::uint64_t next_u64() override { return prng_.next(); }

 private:
  Prng& prng_;
};

// ---- the server process --------------------------------------------------------------------

// A router message on its way between two shards (core/router.h).
struct Hop {
  std::int64_t at = 0;
  core::RouterMessage message;
};

struct ServerSession {
  std::unique_ptr<core::Session> session;
  std::uint64_t connection = 0;
  std::size_t owner = 0;
  std::string input;                  // bytes the session has not taken yet
  bool notified = false;              // the router was told of the close
  int close_notices = 0;              // its close notices still on their way to other shards
  std::set<std::size_t> shards_used;  // for the coverage only (the router keeps its own)
  bool awaiting_delivery = false;     // the request in flight is parked in an engine
  bool socket_open = true;            // false after a reset or once the server closed the socket
  bool fin_sent = false;
  std::string inflight_key;  // key of the engine request in flight (namespace in inflight_ns)
  Namespace inflight_ns = Namespace::kLock;
};

// The engines' FenceSource: the process's FenceJournal, with every block it hands out reported to
// the world (which checks it against the disk and every earlier block).
class JournalSource final : public core::FenceSource {
 public:
  JournalSource(core::FenceJournal& journal, std::function<void(core::FenceBlock)> on_take)
      : journal_(journal), on_take_(std::move(on_take)) {}
  core::FenceBlock take(std::uint64_t want) override {
    const core::FenceBlock block = journal_.take(want);
    on_take_(block);
    return block;
  }

 private:
  core::FenceJournal& journal_;
  std::function<void(core::FenceBlock)> on_take_;
};

struct Process {
  std::uint64_t life = 0;
  std::int64_t mono_origin = 0;  // Instant = mono_origin + virtual time - mono_back
  std::int64_t mono_back = 0;    // a monotonic clock reading behind (the clock-back fault)
  std::unique_ptr<Budget> budget;
  std::unique_ptr<core::FenceJournal> journal;  // null without the fence journal
  std::unique_ptr<JournalSource> fence_source;  // the engines' view of `journal`
  bool journal_backoff = false;                 // a failed write is retried after a pause
  std::vector<std::unique_ptr<core::Engine>> engines;
  std::vector<std::unique_ptr<core::Router>> routers;  // one per engine; destroyed first
  std::map<std::uint64_t, ServerSession> sessions;
  std::map<std::pair<std::size_t, std::size_t>, std::deque<Hop>> channels;
  std::size_t next_owner = 0;
  std::optional<std::int64_t> timer_at;
};

// ---- clients -------------------------------------------------------------------------------

struct Outstanding {
  core::Request request;
  bool malformed = false;
  bool closes = false;  // a line-too-long request: `error`, then the server closes
  std::int64_t sent_at = 0;
  std::uint64_t op = 0;  // history operation, 0 when not recorded
};

struct Client {
  std::uint64_t id = 0;
  std::uint64_t connection = 0;  // 0: not connected
  bool half_closed = false;
  std::string input;  // reply bytes not yet split into lines
  std::deque<Outstanding> pending;
  std::map<std::pair<Namespace, std::string>, core::Token> held;
  std::map<std::pair<Namespace, std::string>, std::int64_t> enqueued;  // -> call time of `e`
  bool stopped = false;  // liveness phase: no new work
};

// ---- the world -------------------------------------------------------------------------------

class World final : public core::EngineObserver {
 public:
  World(const Options& options, Settings settings)
      : options_(options),
        settings_(std::move(settings)),
        workload_(options.seed, kWorkload),
        faults_(options.seed, kFaults),
        clocks_(options.seed, kClocks),
        salts_prng_(options.seed, kSalts),
        salts_(salts_prng_),
        network_(settings_, options.seed, queue_, now_),
        disk_(options.seed, digest_, result_.coverage) {}

  Result run();

 private:
  // -- scheduling
  void schedule(std::int64_t at, EventPayload what) { queue_.schedule(at, std::move(what)); }
  void dispatch(const Event& event);

  // -- failure
  void fail(const std::string& invariant, const std::string& detail) {
    if (failed_) return;
    failed_ = true;
    result_.ok = false;
    result_.invariant = invariant;
    result_.detail = detail;
  }

  // -- network
  void on_net_to_server(std::uint64_t connection_id);
  void on_net_to_client(std::uint64_t connection_id);

  // -- server
  Instant server_now() const {
    return Instant::from_ns(process_->mono_origin + now_ - process_->mono_back);
  }
  void start_process();
  void crash();
  void harvest_counters();  // adds the engines' counters to the coverage
  std::uint64_t accept(std::uint64_t connection_id);
  void pump();
  bool pump_session(std::uint64_t id, ServerSession& ss);
  void route(std::uint64_t id, ServerSession& ss, const core::Request& request);
  void post(std::size_t from, std::size_t to, Hop hop);
  void on_hop(std::uint64_t life, std::size_t from, std::size_t to);
  // Sends the router's messages on their way and hands its events to the sessions.
  void drain_router(std::size_t shard);
  void on_session_event(core::SessionEvent& event);
  // core::EngineObserver: every engine call the routers make.
  void on_engine_call(std::size_t shard, const core::Request* request, const core::Reply* reply,
                      const std::vector<core::Delivery>& deliveries) override {
    observe_call(shard, deliveries, reply, request);
  }
  // Records the grants one engine call made (its reply and its Deliveries) for the fence check,
  // before they travel anywhere: fences are ordered by the call that minted them.
  void observe_call(std::size_t shard, const std::vector<core::Delivery>& out,
                    const core::Reply* reply, const core::Request* request);
  void on_server_timer();
  void arm_timer();

  // -- the fence journal and its disk
  // Recovers the journal from the disk and makes its first reservation durable, as the daemon
  // does before it accepts anything; null if the process died during that write (a restart is
  // scheduled) or an invariant broke.
  std::unique_ptr<core::FenceJournal> open_journal(std::int64_t wall_ns);
  void kick_journal();  // starts the write the journal wants, if any
  void on_journal_synced(std::uint64_t life, std::uint64_t seq);
  void on_fences_taken(core::FenceBlock block);

  // -- clients
  void client_act(Client& client);
  void client_send(Client& client, Outstanding outstanding, std::string bytes);
  void client_disconnect(Client& client, bool reset);
  void client_connection_lost(Client& client);
  void client_line(Client& client, std::string_view line);
  ResourceKey pick_key(bool semaphore);
  std::int64_t semaphore_limit(const std::string& key) const;

  // -- faults
  void on_fault();

  // -- checks
  void check_invariants();
  void check_final();
  std::string describe_connection(const Client& client);

  Options options_;
  Settings settings_;
  Prng workload_, faults_, clocks_, salts_prng_;
  SaltSource salts_;
  Digest digest_;
  Result result_;
  bool failed_ = false;

  EventQueue queue_;
  std::int64_t now_ = 0;
  Network network_;  // after queue_ and now_, which it keeps references to
  Disk disk_;        // after digest_ and result_, likewise
  std::uint64_t events_ = 0;

  std::int64_t wall_offset_ = 0;   // wall clock = kWallStart + now_ + wall_offset_
  bool wall_went_back_ = false;    // a backward wall step happened at some point
  std::int64_t paused_until_ = 0;  // the server process is stopped until then
  bool liveness_ = false;
  bool draining_ = false;

  // The largest fence any journal handed out, over every life (0: none yet).
  std::uint64_t fences_handed_max_ = 0;

  std::unique_ptr<Process> process_;  // null while crashed
  std::uint64_t life_ = 0;
  std::vector<Client> clients_;
  std::vector<core::Token> token_pool_;  // tokens seen anywhere, for foreign/stale releases

  Checker checker_{
      settings_, failed_, result_.grants_seen,
      [this](const std::string& invariant, const std::string& detail) { fail(invariant, detail); }};
  History history_;
};

// ---- network -------------------------------------------------------------------------------

void World::on_net_to_server(std::uint64_t connection_id) {
  std::optional<Segment> arrived = network_.take_to_server(connection_id);
  if (!arrived) return;
  const Segment& segment = *arrived;
  const Network::Connection& connection = network_.connection(connection_id);
  digest_.add(segment.bytes);
  digest_.add(static_cast<std::uint64_t>(segment.kind));
  if (!process_ || connection.life != life_) return;  // the process that accepted it is gone
  auto session_it = process_->sessions.find(connection.session);
  if (session_it == process_->sessions.end()) return;
  ServerSession& ss = session_it->second;
  if (!ss.socket_open) return;
  switch (segment.kind) {
    case SegmentKind::kData:
      ss.input += segment.bytes;
      break;
    case SegmentKind::kFin:
      // Bytes the session has not taken yet come first (the kernel buffer holds them).
      if (!ss.input.empty()) ss.session->on_bytes(server_now(), ss.input);
      ss.input.clear();
      ss.session->on_peer_eof(server_now());
      break;
    case SegmentKind::kReset:
      ss.socket_open = false;
      ss.input.clear();
      ss.session->on_peer_closed(server_now());
      break;
  }
  pump();
}

void World::on_net_to_client(std::uint64_t connection_id) {
  std::optional<Segment> arrived = network_.take_to_client(connection_id);
  if (!arrived) return;
  const Segment& segment = *arrived;
  const Network::Connection& connection = network_.connection(connection_id);
  digest_.add(segment.bytes);
  digest_.add(static_cast<std::uint64_t>(segment.kind));
  Client& client = clients_[connection.client];
  if (client.connection != connection_id) return;  // the client already dropped it
  if (segment.kind == SegmentKind::kData) {
    client.input += segment.bytes;
    std::size_t newline = 0;
    while (!failed_ && (newline = client.input.find('\n')) != std::string::npos) {
      const std::string line = client.input.substr(0, newline);
      client.input.erase(0, newline + 1);
      client_line(client, line);
    }
    return;
  }
  client_connection_lost(client);
}

// ---- server process ----------------------------------------------------------------------------

void World::start_process() {
  const std::int64_t wall_ns = kWallStart + now_ + wall_offset_;
  std::unique_ptr<core::FenceJournal> journal;
  if (settings_.fence_journal) {
    journal = open_journal(wall_ns);
    if (!journal) return;  // died during its start-up write, or an invariant broke
  }
  process_ = std::make_unique<Process>();
  process_->life = ++life_;
  process_->mono_origin = clocks_.between(1, 1'000'000) * kS;
  process_->budget = std::make_unique<Budget>(settings_.resources_max);
  core::EngineConfig config;
  config.gc_max_idle = core::Duration::milliseconds(settings_.gc_idle_ms);
  config.waiters_max = settings_.waiters_max;
  config.deadlines_per_call = settings_.deadlines_per_call;
  if (journal) {
    // Every engine takes its fences in blocks from the one journal of the process.
    process_->journal = std::move(journal);
    process_->fence_source = std::make_unique<JournalSource>(
        *process_->journal, [this](core::FenceBlock block) { on_fences_taken(block); });
    config.fence_block = settings_.fence_block;
  } else {
    // Production without the fence journal: the counter starts at the wall clock
    // (docs/daemon.md).
    config.fence_floor = core::Fence{static_cast<std::uint64_t>(wall_ns)};
  }
  for (std::size_t shard = 0; shard < settings_.shards; ++shard) {
    process_->engines.push_back(std::make_unique<core::Engine>(
        config, salts_, process_->budget.get(), process_->fence_source.get()));
    core::RouterConfig router;
    router.index = shard;
    router.shards = settings_.shards;
    router.auto_release = settings_.auto_release;
    router.stats_entries_max = config.stats_entries_max;
    process_->routers.push_back(
        std::make_unique<core::Router>(router, *process_->engines.back(), this));
  }
  // With the fence journal, fences beat earlier lives' always; without it, only while the wall
  // clock never went back (docs/reliability.md).
  checker_.new_life(life_, settings_.fence_journal || !wall_went_back_);
  history_.new_life(life_);
  digest_.add(static_cast<std::uint64_t>(wall_ns));
}

void World::harvest_counters() {
  if (!process_) return;
  for (const auto& engine : process_->engines) {
    const core::EngineCounters& counters = engine->counters();
    result_.coverage["lease-expiry"] += counters.lease_expiries;
    result_.coverage["wait-timeout"] += counters.wait_timeouts;
    result_.coverage["gc"] += counters.resources_collected;
    result_.coverage["clock-regression"] += counters.clock_regressions;
    if (settings_.fence_journal) result_.coverage["grant-no-fence"] += counters.fence_exhausted;
  }
}

// ---- the fence journal and the simulated disk
// ----------------------------------------------------

std::unique_ptr<core::FenceJournal> World::open_journal(std::int64_t wall_ns) {
  core::FenceJournalConfig config;
  config.range = settings_.journal_range;
  while (!failed_) {
    const core::JournalRecovery recovery = core::recover_journal(disk_.bytes);
    digest_.add(static_cast<std::uint64_t>(recovery.outcome) + 0x5ec0);
    digest_.add(recovery.record.ceiling);
    if (recovery.outcome == core::JournalRecovery::Outcome::kRefused) {
      // Only a creation torn before it was ever synced may leave a file recovery refuses; nothing
      // was handed out from it, so the operator may delete it and start afresh.
      if (disk_.synced_writes > 0) {
        fail("fence-journal-recovery", "the fence state file " + recovery.problem + " after " +
                                           std::to_string(disk_.synced_writes) + " synced writes");
        return nullptr;
      }
      ++result_.coverage["journal-refused-recreated"];
      disk_.bytes.clear();
      continue;
    }
    if (recovery.outcome == core::JournalRecovery::Outcome::kRecovered) {
      ++result_.coverage["journal-recovered"];
      if (recovery.record.ceiling < fences_handed_max_) {
        fail("fence-journal-recovery",
             "recovered ceiling " + std::to_string(recovery.record.ceiling) + " below fence " +
                 std::to_string(fences_handed_max_) + " handed out before");
        return nullptr;
      }
    } else if (disk_.synced_writes > 0) {
      fail("fence-journal-recovery", "the fence state file is empty after " +
                                         std::to_string(disk_.synced_writes) + " synced writes");
      return nullptr;
    }
    auto journal =
        std::make_unique<core::FenceJournal>(config, recovery, static_cast<std::uint64_t>(wall_ns));
    if (journal->exhausted()) {
      fail("fence-journal", "the fence space is used up at start-up");
      return nullptr;
    }
    // The daemon makes the first reservation durable before it accepts a connection; a failed
    // write is retried, and the process may die while it writes.
    while (!failed_) {
      const std::optional<core::JournalWrite> write = journal->begin_write();
      if (!write) {
        fail("fence-journal", "no reservation wanted at start-up");
        return nullptr;
      }
      ++result_.coverage["journal-write"];
      digest_.add(write->seq);
      digest_.add(write->ceiling);
      const bool first_start = life_ == 0;
      if (!liveness_ && settings_.fault_crash && disk_.dice().chance(first_start ? 250 : 100)) {
        disk_.dirty = *write;
        disk_.crash();
        ++result_.coverage["crash-at-start-up"];
        ++result_.crashes;
        digest_.add(0xc0ffee5);
        schedule(now_ + faults_.between(1, 500) * kMs, event::Restart{});
        return nullptr;
      }
      if (!liveness_ && disk_.dice().chance(settings_.journal_fail_permille)) {
        disk_.fail(*write);
        journal->end_write(write->seq, false);
        continue;
      }
      disk_.apply(*write);
      ++disk_.synced_writes;
      journal->end_write(write->seq, true);
      return journal;
    }
  }
  return nullptr;
}

void World::kick_journal() {
  if (!process_ || !process_->journal || process_->journal_backoff || paused_until_ > now_) return;
  const std::optional<core::JournalWrite> write = process_->journal->begin_write();
  if (!write) return;
  ++result_.coverage["journal-write"];
  disk_.dirty = *write;
  digest_.add(write->seq);
  digest_.add(write->ceiling);
  schedule(now_ + disk_.dice().between(1, settings_.journal_sync_max_us) * kUs,
           event::JournalSynced{life_, write->seq});
}

void World::on_journal_synced(std::uint64_t life, std::uint64_t seq) {
  if (!process_ || life != life_ || !disk_.dirty || disk_.dirty->seq != seq) return;
  const core::JournalWrite write = *disk_.dirty;
  disk_.dirty.reset();
  // Faults heal in the liveness phase: every write succeeds then.
  if (!liveness_ && disk_.dice().chance(settings_.journal_fail_permille)) {
    disk_.fail(write);
    process_->journal->end_write(seq, false);
    process_->journal_backoff = true;
    schedule(now_ + disk_.dice().between(1, 200) * kMs, event::JournalRetry{life_});
    digest_.add(0xfa11);
    return;
  }
  disk_.apply(write);
  ++disk_.synced_writes;
  process_->journal->end_write(seq, true);
  digest_.add(0x5ced);
}

void World::on_fences_taken(core::FenceBlock block) {
  digest_.add(block.first);
  digest_.add(block.count);
  if (block.count == 0) {
    ++result_.coverage["fence-source-empty"];
    return;
  }
  ++result_.coverage["fence-block"];
  const std::uint64_t last = block.first + (block.count - 1);
  if (last < block.first) {
    fail("fence-journal",
         "block " + std::to_string(block.first) + "+" + std::to_string(block.count) + " wraps");
    return;
  }
  if (fences_handed_max_ != 0 && block.first <= fences_handed_max_) {
    fail("fence-journal-monotonic", "block from " + std::to_string(block.first) + " after fence " +
                                        std::to_string(fences_handed_max_) +
                                        " was handed out (life " + std::to_string(life_) + ")");
    return;
  }
  // Only fences at or below a ceiling that is durable on the disk may be handed out.
  const core::JournalRecovery recovery = core::recover_journal(disk_.bytes);
  if (recovery.outcome != core::JournalRecovery::Outcome::kRecovered ||
      recovery.record.ceiling < last) {
    fail("fence-journal-durable",
         "block up to " + std::to_string(last) + " handed out while the disk holds " +
             (recovery.outcome == core::JournalRecovery::Outcome::kRecovered
                  ? "ceiling " + std::to_string(recovery.record.ceiling)
                  : std::string("no valid record")));
    return;
  }
  fences_handed_max_ = last;
}

void World::crash() {
  if (!process_) return;
  harvest_counters();
  ++result_.crashes;
  digest_.add(0xc0ffee);
  if (process_->journal) disk_.crash();
  network_.crash(life_);
  process_.reset();
  schedule(now_ + faults_.between(1, 500) * kMs, event::Restart{});
}

std::uint64_t World::accept(std::uint64_t connection_id) {
  Process& p = *process_;
  const std::size_t owner = p.next_owner;
  p.next_owner = (p.next_owner + 1) % settings_.shards;
  const std::uint64_t id = p.routers[owner]->new_session_id().value;
  ServerSession& ss = p.sessions[id];
  core::SessionConfig config;
  ss.session = std::make_unique<core::Session>(SessionId{id}, config, server_now());
  ss.connection = connection_id;
  ss.owner = owner;
  return id;
}

void World::post(std::size_t from, std::size_t to, Hop hop) {
  auto& channel = process_->channels[{from, to}];
  const std::int64_t delay = network_.hop_delay();
  hop.at = std::max(channel.empty() ? 0 : channel.back().at, now_ + delay);
  schedule(hop.at, event::Hop{life_, from, to});
  channel.push_back(std::move(hop));
}

void World::route(std::uint64_t id, ServerSession& ss, const core::Request& request) {
  if (ss.session->closed()) ++result_.coverage["give-back"];
  if (core::is_engine_command(request.command)) {
    ss.inflight_key = request.key;
    ss.inflight_ns = core::command_namespace(request.command);
    const std::size_t target = process_->routers[ss.owner]->shard_of(request);
    if (target != ss.owner) ++result_.coverage["cross-shard-request"];
    if (ss.shards_used.insert(target).second && ss.shards_used.size() == 2) {
      ++result_.coverage["multi-shard-session"];
    }
  } else {
    ++result_.coverage["stats"];
  }
  digest_.add(id);
  digest_.add(static_cast<std::uint64_t>(request.command));
  process_->routers[ss.owner]->submit(server_now(), SessionId{id}, request);
  drain_router(ss.owner);
}

void World::observe_call(std::size_t shard, const std::vector<core::Delivery>& out,
                         const core::Reply* reply, const core::Request* request) {
  for (const core::Delivery& delivery : out) {
    if (!delivery.reply.token) continue;
    auto it = process_->sessions.find(delivery.session.value);
    if (it == process_->sessions.end()) continue;  // reported by on_session_event
    checker_.observe_grant(ResourceKey{it->second.inflight_ns, it->second.inflight_key},
                           *delivery.reply.token,
                           "delivery to session " + std::to_string(delivery.session.value));
  }
  if (reply != nullptr && reply->token && request != nullptr) {
    checker_.observe_grant(ResourceKey{core::command_namespace(request->command), request->key},
                           *reply->token, "reply");
  }
  checker_.check_engine(shard, *process_->engines[shard], now_);
}

void World::drain_router(std::size_t shard) {
  core::Router& router = *process_->routers[shard];
  for (core::Envelope& envelope : router.take_outbox()) {
    // The checker treats a session as gone once its close notices have all arrived (a holder of
    // a forgotten session is a leak), so it counts them.
    if (const auto* close = std::get_if<core::message::CloseSession>(&envelope.message)) {
      auto it = process_->sessions.find(close->session.value);
      if (it != process_->sessions.end()) ++it->second.close_notices;
    }
    post(shard, envelope.to, Hop{0, std::move(envelope.message)});
  }
  for (core::SessionEvent& event : router.take_events()) on_session_event(event);
}

void World::on_session_event(core::SessionEvent& event) {
  const std::uint64_t id = event.session.value;
  auto it = process_->sessions.find(id);
  if (it == process_->sessions.end()) {
    fail("driver-contract", "router event for unknown session " + std::to_string(id));
    return;
  }
  ServerSession& ss = it->second;
  core::Session& session = *ss.session;
  if (!session.in_flight()) {
    fail("driver-contract", "router event with nothing in flight, session " + std::to_string(id));
    return;
  }
  switch (event.kind) {
    case core::SessionEvent::Kind::kParked:
      if (ss.awaiting_delivery)
        fail("driver-contract", "parked twice, session " + std::to_string(id));
      ss.awaiting_delivery = true;
      session.on_parked();
      break;
    case core::SessionEvent::Kind::kCancelled:
      if (!ss.awaiting_delivery) {
        fail("driver-contract", "a cancellation of nothing parked, session " + std::to_string(id));
        return;
      }
      ss.awaiting_delivery = false;
      session.on_cancelled();
      ++result_.coverage["cancelled"];
      break;
    case core::SessionEvent::Kind::kReply:
      if (event.reply.status == core::Status::kParked) {
        fail("driver-contract", "a reply of Reply::parked, session " + std::to_string(id));
        return;
      }
      if (ss.awaiting_delivery) ++result_.coverage["delivery"];
      ss.awaiting_delivery = false;
      session.on_reply(server_now(), event.reply);
      break;
    case core::SessionEvent::Kind::kStats: {
      std::int64_t open = 0;
      for (const auto& [other_id, other] : process_->sessions) {
        if (!other.session->closed()) ++open;
      }
      session.on_reply(server_now(),
                       core::Reply::stats(core::encode_stats_json(open, event.stats)));
      break;
    }
  }
}

void World::on_hop(std::uint64_t life, std::size_t from, std::size_t to) {
  if (!process_ || life != life_) return;
  auto& channel = process_->channels[{from, to}];
  if (channel.empty() || channel.front().at > now_) return;
  Hop hop = std::move(channel.front());
  channel.pop_front();
  digest_.add(static_cast<std::uint64_t>(hop.message.index()));
  std::visit([this](const auto& m) { digest_.add(m.session.value); }, hop.message);
  if (const auto* close = std::get_if<core::message::CloseSession>(&hop.message)) {
    auto it = process_->sessions.find(close->session.value);
    if (it != process_->sessions.end()) --it->second.close_notices;
  }
  process_->routers[to]->receive(server_now(), std::move(hop.message));
  drain_router(to);
  pump();
}

bool World::pump_session(std::uint64_t id, ServerSession& ss) {
  bool progress = false;
  core::Session& session = *ss.session;
  if (!ss.input.empty()) {
    const std::size_t used = session.on_bytes(server_now(), ss.input);
    if (used > 0) {
      ss.input.erase(0, std::min(used, ss.input.size()));
      progress = true;
    }
  }
  if (session.closed() && !ss.notified) {
    ss.notified = true;
    history_.connection_closed(ss.connection, now_);
    progress = true;
    process_->routers[ss.owner]->close(server_now(), SessionId{id});
    drain_router(ss.owner);
  }
  while (!failed_) {
    std::optional<core::Request> request = session.next_request(server_now());
    if (!request) break;
    progress = true;
    if (core::is_engine_command(request->command) || request->command == core::Command::kStats) {
      route(id, ss, *request);
    } else {
      fail("driver-contract", "session routed a request it should answer itself");
    }
  }
  if (ss.socket_open && !session.output().empty()) {
    const std::string bytes(session.output());
    session.consume_output(bytes.size());
    network_.send_to_client(ss.connection, SegmentKind::kData, bytes);
    progress = true;
  }
  if (session.closed() && ss.socket_open && !ss.fin_sent && session.output().empty()) {
    ss.fin_sent = true;
    ss.socket_open = false;
    network_.send_to_client(ss.connection, SegmentKind::kFin);
    progress = true;
  }
  return progress;
}

void World::pump() {
  if (!process_) return;
  for (int pass = 0; pass < 10'000 && !failed_; ++pass) {
    bool progress = false;
    std::vector<std::uint64_t> forget;
    for (auto& [id, ss] : process_->sessions) {
      if (pump_session(id, ss)) progress = true;
      if (ss.session->finished() && ss.notified && ss.close_notices == 0) forget.push_back(id);
    }
    for (std::uint64_t id : forget) {
      process_->sessions.erase(id);
      checker_.session_forgotten(id);
    }
    if (!progress) {
      arm_timer();
      return;
    }
  }
  if (!failed_) fail("driver-contract", "routing loop did not settle");
}

void World::on_server_timer() {
  Process& p = *process_;
  if (p.timer_at && *p.timer_at <= now_) p.timer_at.reset();
  for (std::size_t shard = 0; shard < settings_.shards; ++shard) {
    p.routers[shard]->tick(server_now());
    const std::optional<Instant> wake = p.routers[shard]->next_wake();
    if (wake && *wake <= p.engines[shard]->now()) ++result_.coverage["deadlines-left-behind"];
    drain_router(shard);
  }
  for (auto& [id, ss] : p.sessions) ss.session->on_timer(server_now());
  pump();
}

void World::arm_timer() {
  Process& p = *process_;
  std::optional<std::int64_t> next;
  auto consider = [&](std::optional<Instant> at) {
    if (!at) return;
    const std::int64_t virtual_at = std::max(at->ns() - p.mono_origin + p.mono_back, now_ + 1);
    if (!next || virtual_at < *next) next = virtual_at;
  };
  for (const auto& engine : p.engines) consider(engine->next_wake());
  for (const auto& [id, ss] : p.sessions) consider(ss.session->next_deadline());
  if (next && (!p.timer_at || *next < *p.timer_at)) {
    p.timer_at = next;
    schedule(*next, event::ServerTimer{life_});
  }
}

// ---- clients -------------------------------------------------------------------------------

ResourceKey World::pick_key(bool semaphore) {
  std::string key;
  if (workload_.chance(settings_.hot_permille)) {
    key = "h" + std::to_string(workload_.below(settings_.hot_keys));
  } else {
    key = "c" + std::to_string(workload_.below(settings_.cold_keys));
  }
  return {semaphore ? Namespace::kSemaphore : Namespace::kLock, key};
}

std::int64_t World::semaphore_limit(const std::string& key) const {
  // Fixed per key so that limit mismatches are the exception the workload makes on purpose.
  return 1 + static_cast<std::int64_t>(key.back() - '0' + 1) % 3;
}

void World::client_send(Client& client, Outstanding outstanding, std::string bytes) {
  outstanding.sent_at = now_;
  if (!outstanding.malformed && core::is_engine_command(outstanding.request.command)) {
    outstanding.op = history_.call(client.id, client.connection, outstanding.request, now_);
  }
  client.pending.push_back(std::move(outstanding));
  network_.send_to_server(client.connection, SegmentKind::kData, std::move(bytes));
}

void World::client_connection_lost(Client& client) {
  // Whatever was pending may or may not have happened.
  // Whatever was pending stays indefinite in the history.
  client.pending.clear();
  client.held.clear();
  client.enqueued.clear();
  client.input.clear();
  client.connection = 0;
  client.half_closed = false;
}

void World::client_disconnect(Client& client, bool reset) {
  digest_.add(reset ? 0x7e5e7 : 0xf1f1);
  if (reset) {
    network_.send_to_server(client.connection, SegmentKind::kReset);
    client_connection_lost(client);
  } else {
    network_.send_to_server(client.connection, SegmentKind::kFin);
    client.half_closed = true;  // reads on until the server closes
  }
}

void World::client_act(Client& client) {
  const std::int64_t think = workload_.between(0, 300) * kMs;
  if (client.stopped) {
    if (draining_ && client.connection != 0 && !client.half_closed) {
      client_disconnect(client, workload_.chance(500));
    }
    return;
  }
  schedule(now_ + think + 1, event::ClientAct{client.id});
  if (client.connection == 0) {
    if (!process_) return;
    const std::uint64_t id = network_.connect(client.id, life_);
    network_.connection(id).session = accept(id);
    client.connection = id;
    digest_.add(id);
    return;
  }
  if (client.half_closed) return;
  const std::size_t depth_max = settings_.pipelining ? 3 : 1;
  if (client.pending.size() >= depth_max) return;
  if (client.pending.empty() && workload_.chance(settings_.vanish_permille)) {
    client_disconnect(client, workload_.chance(600));
    return;
  }
  if (!client.pending.empty() && settings_.fault_disconnect &&
      workload_.chance(settings_.vanish_permille)) {
    client_disconnect(client, workload_.chance(600));  // vanish while queued or parked
    return;
  }

  Outstanding out;
  core::Request& request = out.request;
  std::string bytes;
  const std::uint64_t dice = workload_.below(1000);
  const bool semaphore = workload_.chance(400);
  auto lease = [&]() -> std::int64_t {
    return workload_.chance(300) ? 0 : workload_.between(1, 8);
  };
  if (dice < 30) {
    // Malformed: one request's worth of lines, answered `error`.
    static const char* const kMalformed[] = {"x\ny\nz\n",     "l\n\n5\n",    "l\nk\n-1\n",
                                             "sl\nk\n1 0\n",  "l\nk\nabc\n", "r\nk\n\n",
                                             "n\nk\ntok 0\n", "l\nk a\n1\n", "w\nk\n1 2 3\n"};
    out.malformed = true;
    bytes = kMalformed[workload_.below(std::size(kMalformed))];
  } else if (dice < 36) {
    out.malformed = true;
    out.closes = true;
    bytes = "l\n" + std::string(300, 'k') + "\n1\n";
  } else if (dice < 60) {
    request.command = workload_.chance(900) ? core::Command::kPing : core::Command::kStats;
  } else if (dice < 420) {
    const ResourceKey key = pick_key(semaphore);
    request.command = semaphore ? core::Command::kSemLock : core::Command::kLock;
    request.key = key.second;
    request.timeout_s = workload_.chance(250) ? 0 : workload_.between(1, 4);
    request.lease_s = lease();
    if (semaphore) {
      request.limit = semaphore_limit(key.second);
      if (workload_.chance(20)) request.limit += 1;  // a mismatch
    }
  } else if (dice < 620) {
    // Release: mostly a token we hold, sometimes a stale, foreign or malformed one.
    ResourceKey key;
    std::optional<core::Token> token;
    if (!client.held.empty() && workload_.chance(800)) {
      auto it = client.held.begin();
      std::advance(it, static_cast<long>(workload_.below(client.held.size())));
      key = it->first;
      token = it->second;
    } else {
      key = pick_key(semaphore);
      if (!token_pool_.empty()) token = token_pool_[workload_.below(token_pool_.size())];
    }
    request.command =
        key.first == Namespace::kSemaphore ? core::Command::kSemRelease : core::Command::kRelease;
    request.key = key.second;
    if (!token || workload_.chance(30)) {
      out.malformed = true;  // not a token we could have issued: `error`, nothing changes
      bytes =
          std::string(core::command_name(request.command)) + "\n" + key.second + "\nNOT-A-TOKEN\n";
    } else {
      request.token = token;
    }
  } else if (dice < 720) {
    // Renew (sometimes too late: leases are short and think time is long).
    if (client.held.empty()) {
      request.command = core::Command::kPing;
    } else {
      auto it = client.held.begin();
      std::advance(it, static_cast<long>(workload_.below(client.held.size())));
      request.command = it->first.first == Namespace::kSemaphore ? core::Command::kSemRenew
                                                                 : core::Command::kRenew;
      request.key = it->first.second;
      request.token = it->second;
      request.lease_s = lease();
    }
  } else if (dice < 850) {
    // Two-phase step one.
    const ResourceKey key = pick_key(semaphore);
    request.command = semaphore ? core::Command::kSemEnqueue : core::Command::kEnqueue;
    request.key = key.second;
    request.lease_s = lease();
    if (semaphore) request.limit = semaphore_limit(key.second);
  } else {
    // Two-phase step two: mostly for a key we enqueued.
    ResourceKey key;
    if (!client.enqueued.empty() && workload_.chance(900)) {
      auto it = client.enqueued.begin();
      std::advance(it, static_cast<long>(workload_.below(client.enqueued.size())));
      key = it->first;
    } else {
      key = pick_key(semaphore);
    }
    request.command =
        key.first == Namespace::kSemaphore ? core::Command::kSemWait : core::Command::kWait;
    request.key = key.second;
    request.timeout_s = workload_.chance(250) ? 0 : workload_.between(1, 4);
  }
  if (bytes.empty()) core::encode_request(request, bytes);
  digest_.add(bytes);
  client_send(client, std::move(out), std::move(bytes));
}

void World::client_line(Client& client, std::string_view line) {
  if (client.pending.empty()) {
    fail("protocol",
         "client " + std::to_string(client.id) + " got an unsolicited reply: " + std::string(line));
    return;
  }
  Outstanding outstanding = std::move(client.pending.front());
  client.pending.pop_front();
  const core::Request& request = outstanding.request;
  if (outstanding.malformed) {
    if (line != "error") fail("protocol", "malformed request answered " + std::string(line));
    return;
  }
  const std::optional<core::Reply> reply = core::decode_reply(request.command, line);
  if (!reply) {
    fail("protocol", std::string(core::command_name(request.command)) + " answered " +
                         std::string(line) + ", which is no reply to it");
    return;
  }
  const std::string status(core::status_name(reply->status));
  const std::optional<core::Token> token = reply->token;
  const ResourceKey key{core::command_namespace(request.command), request.key};
  using core::Command;
  switch (request.command) {
    case Command::kLock:
    case Command::kSemLock:
    case Command::kWait:
    case Command::kSemWait:
      if (request.command == Command::kWait || request.command == Command::kSemWait) {
        auto it = client.enqueued.find(key);
        if (it != client.enqueued.end()) {
          // A two-phase grant may have happened any time after its `e`.
          if (outstanding.op != 0) history_.widen_call(outstanding.op, it->second);
          client.enqueued.erase(it);
        }
      }
      if (token) {
        client.held[key] = *token;
        token_pool_.push_back(*token);
      }
      break;
    case Command::kEnqueue:
    case Command::kSemEnqueue:
      if (status == "acquired" && token) {
        client.held[key] = *token;
        token_pool_.push_back(*token);
      } else if (status == "queued") {
        client.enqueued[key] = outstanding.sent_at;
      }
      break;
    case Command::kRelease:
    case Command::kSemRelease:
      if (status == "ok") {
        auto it = client.held.find(key);
        if (it != client.held.end() && request.token && it->second == *request.token) {
          client.held.erase(it);
        }
      }
      break;
    case Command::kRenew:
    case Command::kSemRenew:
      if (status != "ok") client.held.erase(key);  // the lease ended
      break;
    default:
      break;
  }
  if (token_pool_.size() > 256) token_pool_.erase(token_pool_.begin(), token_pool_.begin() + 128);
  const std::int64_t seconds = reply->seconds;
  if (outstanding.op != 0) history_.complete(outstanding.op, now_, status, token, seconds);
}

// ---- faults --------------------------------------------------------------------------------

void World::on_fault() {
  if (liveness_) return;
  schedule(now_ + faults_.between(1, 2 * settings_.fault_interval_ms) * kMs, event::Fault{});
  std::vector<int> choices;
  if (settings_.fault_crash && process_) choices.push_back(0);
  if (settings_.fault_pause && process_ && paused_until_ <= now_) choices.push_back(1);
  if (settings_.fault_wall_step) choices.push_back(2);
  if (settings_.fault_expiry_burst && process_ && paused_until_ <= now_) choices.push_back(3);
  if (settings_.fault_disconnect) choices.push_back(4);
  if (settings_.fault_clock_back && process_ && process_->mono_back < 30 * kS) choices.push_back(5);
  if (choices.empty()) return;
  const int choice = choices[faults_.below(choices.size())];
  digest_.add(static_cast<std::uint64_t>(choice) + 0xfa000);
  static const char* const kFaultNames[] = {
      "crash", "pause", "wall-step", "expiry-burst", "disconnect-fault", "clock-back"};
  ++result_.coverage[kFaultNames[choice]];
  if (options_.trace) std::printf("%lld fault %d\n", static_cast<long long>(now_), choice);
  switch (choice) {
    case 0:
      crash();
      break;
    case 1:  // the process stops (a GC pause, SIGSTOP): its clock reads jump when it resumes
      paused_until_ = now_ + faults_.between(1, 2'000) * kMs;
      schedule(paused_until_, event::Unpause{});
      break;
    case 2: {  // the wall clock steps by an hour
      const bool back = faults_.chance(500);
      wall_offset_ += back ? -kHour : kHour;
      if (back) wall_went_back_ = true;
      break;
    }
    case 3:  // a long stop: every lease ends at once when the process resumes
      paused_until_ = now_ + faults_.between(30, 120) * kS;
      schedule(paused_until_, event::Unpause{});
      break;
    case 5:  // the monotonic clock steps back by up to 10 s and stays behind: the engines see
             // regressions, hold their time still until the readings catch up, and must neither
             // revive nor extend a lease. (It never jumps forward again: a forward jump ends
             // leases early in real time, which no lease service can prevent; fences guard that.)
      process_->mono_back += faults_.between(1, 10'000) * kMs;
      break;
    case 4: {  // a random client's connection resets
      Client& client = clients_[faults_.below(clients_.size())];
      if (client.connection != 0 && !client.half_closed) client_disconnect(client, true);
      break;
    }
    default:
      break;
  }
}

// ---- the run -------------------------------------------------------------------------------

void World::dispatch(const Event& event) {
  std::visit(
      [this](const auto& e) {
        using E = std::decay_t<decltype(e)>;
        if constexpr (std::is_same_v<E, event::ClientAct>) {
          client_act(clients_[e.client]);
        } else if constexpr (std::is_same_v<E, event::NetToServer>) {
          on_net_to_server(e.connection);
        } else if constexpr (std::is_same_v<E, event::NetToClient>) {
          on_net_to_client(e.connection);
        } else if constexpr (std::is_same_v<E, event::Hop>) {
          on_hop(e.life, e.from, e.to);
        } else if constexpr (std::is_same_v<E, event::ServerTimer>) {
          if (process_ && e.life == life_) on_server_timer();
        } else if constexpr (std::is_same_v<E, event::Fault>) {
          on_fault();
        } else if constexpr (std::is_same_v<E, event::Restart>) {
          if (!process_) start_process();
        } else if constexpr (std::is_same_v<E, event::JournalSynced>) {
          on_journal_synced(e.life, e.seq);
        } else if constexpr (std::is_same_v<E, event::JournalRetry>) {
          if (process_ && e.life == life_) process_->journal_backoff = false;
        } else {
          // Unpause and LivenessStart only wake the loop: their time is what counts.
          static_assert(std::is_same_v<E, event::Unpause> ||
                        std::is_same_v<E, event::LivenessStart>);
        }
      },
      event.what);
}

// The first number an event carries (a client, a connection, a life), for the digest and the
// trace; 0 for those that carry none.
std::uint64_t first_field(const EventPayload& what) {
  return std::visit(
      [](const auto& e) -> std::uint64_t {
        using E = std::decay_t<decltype(e)>;
        if constexpr (std::is_same_v<E, event::ClientAct>) return e.client;
        if constexpr (std::is_same_v<E, event::NetToServer> ||
                      std::is_same_v<E, event::NetToClient>) {
          return e.connection;
        }
        if constexpr (std::is_same_v<E, event::Hop> || std::is_same_v<E, event::ServerTimer> ||
                      std::is_same_v<E, event::JournalSynced> ||
                      std::is_same_v<E, event::JournalRetry>) {
          return e.life;
        }
        return 0;
      },
      what);
}

Result World::run() {
  result_.settings = settings_.describe();
  start_process();
  clients_.resize(settings_.clients);
  for (std::size_t i = 0; i < clients_.size(); ++i) {
    clients_[i].id = i;
    schedule(workload_.between(0, 100) * kMs, event::ClientAct{i});
  }
  schedule(faults_.between(1, settings_.fault_interval_ms) * kMs, event::Fault{});

  std::int64_t liveness_deadline = 0;
  std::int64_t drain_deadline = 0;
  while (!failed_ && !queue_.empty()) {
    Event event = queue_.pop();
    // A stopped process handles nothing; its events wait for it (in their order).
    if (event.server_side() && paused_until_ > event.at) {
      queue_.defer(std::move(event), paused_until_);
      continue;
    }
    now_ = event.at;
    ++events_;
    const std::uint64_t field = first_field(event.what);
    digest_.add(static_cast<std::uint64_t>(event.at));
    digest_.add(static_cast<std::uint64_t>(event.what.index()) << 32 | field);
    if (options_.trace) {
      std::printf("%lld ev %zu %llu\n", static_cast<long long>(now_), event.what.index(),
                  static_cast<unsigned long long>(field));
    }
    dispatch(event);
    if (failed_) break;
    kick_journal();
    check_invariants();

    if (!liveness_ && events_ >= options_.events) {
      // Heal: no more faults, the process runs, clients issue nothing new.
      liveness_ = true;
      // Events a pause deferred stay scheduled at its end: the window starts from there.
      const std::int64_t resumed_at = std::max(now_, paused_until_);
      paused_until_ = 0;
      if (!process_) start_process();
      for (Client& client : clients_) client.stopped = true;
      liveness_deadline = resumed_at + kLivenessWindow;
      schedule(liveness_deadline, event::LivenessStart{});
      if (process_) pump();
    }
    if (liveness_ && !draining_ && now_ >= liveness_deadline) {
      for (const Client& client : clients_) {
        if (client.connection != 0 && !client.pending.empty()) {
          fail("liveness", "client " + std::to_string(client.id) + " still waits for " +
                               std::to_string(client.pending.size()) + " replies after " +
                               std::to_string(kLivenessWindow / kS) + " s of healed time; " +
                               describe_connection(client));
          break;
        }
      }
      draining_ = true;
      drain_deadline = now_ + kDrainWindow;
      for (Client& client : clients_) schedule(now_ + 1, event::ClientAct{client.id});
    }
    if (draining_ && now_ >= drain_deadline) break;
  }
  harvest_counters();
  if (!failed_) check_final();
  if (!failed_) {
    const History::Outcome outcome = history_.check();
    result_.keys_checked = outcome.keys_checked;
    result_.inconclusive = outcome.inconclusive;
    result_.operations_checked = outcome.operations;
    if (!outcome.violation.empty()) fail("linearizability", outcome.violation);
  }
  result_.events_run = events_;
  result_.digest = digest_.value();
  return result_;
}

// ---- checks --------------------------------------------------------------------------------

void World::check_invariants() {
  if (!process_) {
    checker_.clear_observed();
    return;
  }
  for (std::size_t shard = 0; shard < settings_.shards && !failed_; ++shard) {
    checker_.check_engine(shard, *process_->engines[shard], now_);
  }
  checker_.clear_observed();
}

std::string World::describe_connection(const Client& client) {
  std::string text = "first pending: ";
  const Outstanding& first = client.pending.front();
  text += first.malformed
              ? std::string("malformed")
              : std::string(core::command_name(first.request.command)) + " " + first.request.key +
                    " timeout " + std::to_string(first.request.timeout_s);
  text += ", sent at " + std::to_string(first.sent_at);
  const Network::Connection& connection = network_.connection(client.connection);
  text += "; connection " + std::to_string(client.connection) + " life " +
          std::to_string(connection.life) + " (now " + std::to_string(life_) + ")";
  text += ", segments to server " +
          std::to_string(network_.in_flight_to_server(client.connection)) + ", to client " +
          std::to_string(network_.in_flight_to_client(client.connection));
  if (!process_) return text + ", no process";
  auto it = process_->sessions.find(connection.session);
  if (it == process_->sessions.end()) return text + ", server session forgotten";
  const ServerSession& ss = it->second;
  text += ", session " + std::to_string(connection.session) +
          (ss.session->closed() ? " closed" : " open") +
          (ss.session->in_flight() ? " in-flight" : "") + (ss.awaiting_delivery ? " parked" : "") +
          " queued " + std::to_string(ss.session->queued_requests()) + " buffered " +
          std::to_string(ss.session->buffered_input_bytes()) + " input " +
          std::to_string(ss.input.size()) + (ss.socket_open ? " socket-open" : " socket-closed");
  for (std::size_t shard = 0; shard < settings_.shards; ++shard) {
    const core::Engine& engine = *process_->engines[shard];
    const std::optional<Instant> wake = engine.next_wake();
    text += "; shard " + std::to_string(shard) + " next wake " +
            (wake ? std::to_string(wake->ns() - process_->mono_origin) : std::string("none"));
    for (const core::Engine::ResourceView& view : engine.inspect()) {
      for (SessionId waiter : view.waiters) {
        if (waiter.value == connection.session)
          text += ", waits on " + key_name({view.ns, view.key});
      }
      for (const auto& holder : view.holders) {
        if (holder.session.value == connection.session) {
          text += ", holds " + key_name({view.ns, view.key});
        }
      }
    }
  }
  return text;
}

void World::check_final() {
  for (const Client& client : clients_) {
    if (client.connection != 0) {
      fail("liveness", "client " + std::to_string(client.id) + " still connected at the end");
      return;
    }
  }
  if (!process_) return;
  if (!process_->sessions.empty()) {
    fail("leak", std::to_string(process_->sessions.size()) + " sessions never finished");
    return;
  }
  for (const auto& engine : process_->engines) {
    for (const core::Engine::ResourceView& view : engine->inspect()) {
      if (!view.holders.empty() || !view.waiters.empty()) {
        fail("leak", key_name({view.ns, view.key}) + " still has " +
                         std::to_string(view.holders.size()) + " holders and " +
                         std::to_string(view.waiters.size()) +
                         " waiters after every session closed");
        return;
      }
    }
  }
}

}  // namespace

const std::vector<std::string>& profile_names() { return kProfiles; }

bool is_profile(const std::string& name) {
  return std::find(kProfiles.begin(), kProfiles.end(), name) != kProfiles.end();
}

Result run_simulation(const Options& options) {
  World world(options, choose_settings(options.seed, options.profile));
  return world.run();
}

}  // namespace turnstile::sim
