// ServerProcess, its lives and its TCP side: a life's start (engines, routers, desks), its
// crash, the connections it accepts and their sessions, the routers' messages between the
// shards, the timer, and the checks after every event and at the end (sim/server.h). The HTTP
// side is in sim/server_http.cc, the fence journal in sim/server_journal.cc; the state they
// share in sim/server_life.h.
#include "sim/server.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <variant>

#include "core/assert.h"
#include "core/canary.h"
#include "core/http_codec.h"
#include "core/http_session_router.h"
#include "core/protocol.h"
#include "core/session.h"
#include "core/session_port.h"
#include "core/stats.h"
#include "core/types.h"
#include "sim/server_life.h"
#include "sim/signal_checker.h"

namespace turnstile::sim {

using core::Instant;
using core::Namespace;
using core::SessionId;

namespace {

// A salt source drawing from the run's salt stream.
class SaltSource final : public core::RandomSource {
 public:
  explicit SaltSource(Prng& prng) : prng_(prng) {}
  std::uint64_t next_u64() override { return prng_.next(); }

 private:
  Prng& prng_;
};

}  // namespace

// ---- the process across lives -------------------------------------------------------------------

ServerProcess::ServerProcess(RunContext& run, Network& network, Disk& disk, Checker& checker,
                             History& history, LossChecker& losses, Prng& faults)
    : run_(run),
      network_(network),
      disk_(disk),
      checker_(checker),
      history_(history),
      losses_(losses),
      faults_(faults),
      clocks_(run.options.seed, kClocks),
      salts_prng_(run.options.seed, kSalts),
      salts_(std::make_unique<SaltSource>(salts_prng_)) {
  network_.listen(this);
}

ServerProcess::~ServerProcess() { network_.listen(nullptr); }

Instant ServerProcess::server_now() const {
  return Instant::from_ns(process_->mono_origin + run_.now - process_->mono_back);
}

void ServerProcess::on_restart() {
  if (!process_) start();
}

void ServerProcess::on_timer(std::uint64_t life) {
  if (process_ && life == life_) on_server_timer();
}

void ServerProcess::pause_until(std::int64_t until) {
  paused_until_ = until;
  run_.schedule(paused_until_, event::Unpause{});
}

std::int64_t ServerProcess::clock_back() const { return process_ ? process_->mono_back : 0; }

void ServerProcess::step_clock_back(std::int64_t by) {
  if (process_) process_->mono_back += by;
}

// ---- the network --------------------------------------------------------------------------------

void ServerProcess::on_net_to_server(std::uint64_t connection_id) {
  std::optional<Segment> arrived = network_.take_to_server(connection_id);
  if (!arrived) return;
  const Segment& segment = *arrived;
  const Network::Connection& connection = network_.connection(connection_id);
  run_.digest.add(segment.bytes);
  run_.digest.add(static_cast<std::uint64_t>(segment.kind));
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
      if (!ss.input.empty()) ss.port->session().on_bytes(server_now(), ss.input);
      ss.input.clear();
      ss.port->session().on_peer_eof(server_now());
      break;
    case SegmentKind::kReset:
      ss.socket_open = false;
      ss.input.clear();
      ss.port->session().on_peer_closed(server_now());
      break;
  }
  pump();
}
// ---- a life's start and counters ----------------------------------------------------------------

void ServerProcess::start() {
  const std::int64_t wall_ns = run_.wall_ns();
  std::unique_ptr<core::FenceJournal> journal;
  if (run_.settings.fence_journal) {
    journal = open_journal(wall_ns);
    if (!journal) return;  // died during its start-up write, or an invariant broke
  }
  process_ = std::make_unique<Process>();
  process_->life = ++life_;
  process_->mono_origin = clocks_.between(1, 1'000'000) * kS;
  process_->budget = std::make_unique<server_life::Budget>(run_.settings.resources_max);
  core::EngineConfig config;
  config.gc_max_idle = core::Duration::milliseconds(run_.settings.gc_idle_ms);
  config.waiters_max = run_.settings.waiters_max;
  config.deadlines_per_call = run_.settings.deadlines_per_call;
  config.lock_delay = core::Duration::milliseconds(run_.settings.lock_delay_ms);
  if (journal) {
    // Every engine takes its fences in blocks from the one journal of the process.
    process_->journal = std::move(journal);
    process_->fence_source = std::make_unique<server_life::JournalSource>(
        *process_->journal, [this](core::FenceBlock block) { on_fences_taken(block); });
    config.fence_block = run_.settings.fence_block;
  } else {
    // Production without the fence journal: the counter starts at the wall clock
    // (docs/daemon.md).
    config.fence_floor = core::Fence{static_cast<std::uint64_t>(wall_ns)};
  }
  process_->signals = std::make_unique<SignalChecker>(run_);
  for (std::size_t shard = 0; shard < run_.settings.shards; ++shard) {
    process_->engines.push_back(std::make_unique<core::Engine>(
        config, *salts_, process_->budget.get(), process_->fence_source.get()));
    core::RouterConfig router;
    router.signals = process_->signals.get();
    router.index = shard;
    router.shards = run_.settings.shards;
    router.auto_release = run_.settings.auto_release;
    router.stats_entries_max = config.stats_entries_max;
    process_->routers.push_back(
        std::make_unique<core::Router>(router, *process_->engines.back(), this));
    if (run_.settings.http_clients > 0 || run_.settings.force_interval_ms > 0) start_http(shard);
  }
  if (!process_->desks.empty()) {
    process_->next_sweep = server_now() + process_->desks.front()->sweep_interval();
  }
  // With the fence journal, fences beat earlier lives' always; without it, only while the wall
  // clock never went back (docs/reliability.md).
  checker_.new_life(life_, run_.settings.fence_journal || !run_.wall_went_back);
  losses_.new_life(run_.settings.shards);
  history_.new_life(life_);
  run_.digest.add(static_cast<std::uint64_t>(wall_ns));
}

void ServerProcess::harvest_counters() {
  if (!process_) return;
  for (const auto& engine : process_->engines) {
    const core::EngineCounters& counters = engine->counters();
    run_.result.coverage["lease-expiry"] += counters.lease_expiries;
    run_.result.coverage["wait-timeout"] += counters.wait_timeouts;
    run_.result.coverage["gc"] += counters.resources_collected;
    run_.result.coverage["clock-regression"] += counters.clock_regressions;
    if (run_.settings.fence_journal)
      run_.result.coverage["grant-no-fence"] += counters.fence_exhausted;
  }
}

// ---- crashes, sessions, routers and timers ------------------------------------------------------

void ServerProcess::crash() {
  if (!process_) return;
  harvest_counters();
  ++run_.result.crashes;
  run_.digest.add(0xc0ffee);
  if (process_->journal) disk_.crash();
  network_.crash(life_);
  process_.reset();
  run_.schedule(run_.now + faults_.between(1, 500) * kMs, event::Restart{});
}

std::optional<Listener::Accepted> ServerProcess::accept(std::uint64_t connection_id) {
  if (!process_) return std::nullopt;
  Process& p = *process_;
  const std::size_t owner = p.next_owner;
  p.next_owner = (p.next_owner + 1) % run_.settings.shards;
  const std::uint64_t id = p.routers[owner]->new_session_id().value;
  ServerSession& ss = p.sessions[id];
  core::SessionConfig config;
  ss.port = std::make_unique<core::SessionPort>(SessionId{id}, config, server_now());
  ss.connection = connection_id;
  ss.owner = owner;
  losses_.tcp_session(id);
  return Accepted{life_, id};
}

void ServerProcess::post(std::size_t from, std::size_t to, Hop hop) {
  auto& channel = process_->channels[{from, to}];
  const std::int64_t delay = network_.hop_delay();
  hop.at = std::max(channel.empty() ? 0 : channel.back().at, run_.now + delay);
  run_.schedule(hop.at, event::Hop{life_, from, to});
  channel.push_back(std::move(hop));
}

void ServerProcess::route(std::uint64_t id, ServerSession& ss, const core::Request& request) {
  if (ss.port->session().closed()) ++run_.result.coverage["give-back"];
  if (core::is_engine_command(request.command)) {
    ss.inflight_key = request.key;
    ss.inflight_ns = core::command_namespace(request.command);
    const std::size_t target = process_->routers[ss.owner]->shard_of(request);
    if (target != ss.owner) ++run_.result.coverage["cross-shard-request"];
    if (ss.shards_used.insert(target).second && ss.shards_used.size() == 2) {
      ++run_.result.coverage["multi-shard-session"];
    }
  } else if (core::is_signal_command(request.command)) {
    ++run_.result.coverage[std::string(core::command_name(request.command))];
  } else {
    ++run_.result.coverage["stats"];
  }
  run_.digest.add(id);
  run_.digest.add(static_cast<std::uint64_t>(request.command));
  process_->routers[ss.owner]->submit(server_now(), SessionId{id}, request);
  drain_router(ss.owner);
}

void ServerProcess::observe_call(std::size_t shard, const std::vector<core::Delivery>& out,
                                 const core::Reply* reply, const core::Request* request) {
  std::vector<LossChecker::Grant> grants;
  for (const core::Delivery& delivery : out) {
    if (!delivery.reply.token) continue;
    auto it = process_->sessions.find(delivery.session.value);
    if (it == process_->sessions.end()) continue;  // reported by on_session_event
    const ResourceKey key{it->second.inflight_ns, it->second.inflight_key};
    checker_.observe_grant(key, *delivery.reply.token,
                           "delivery to session " + std::to_string(delivery.session.value));
    grants.push_back({delivery.session.value, *delivery.reply.token, key});
  }
  if (reply != nullptr && reply->token && request != nullptr) {
    const ResourceKey key{core::command_namespace(request->command), request->key};
    checker_.observe_grant(key, *reply->token, "reply");
  }
  if (reply != nullptr && request != nullptr) checker_.observe_answer(*request, *reply);
  losses_.on_engine_call(shard, *process_->engines[shard], request, reply, grants);
  checker_.check_engine(shard, *process_->engines[shard], run_.now);
}

void ServerProcess::drain_router(std::size_t shard) {
  core::Router& router = *process_->routers[shard];
  for (core::Envelope& envelope : router.take_outbox()) {
    // The checker treats a session as gone once its close notices have all arrived (a holder of
    // a forgotten session is a leak), so it counts them.
    if (const auto* close = std::get_if<core::message::CloseSession>(&envelope.message)) {
      auto it = process_->sessions.find(close->session.value);
      if (it != process_->sessions.end()) ++it->second.close_notices;
    }
    if (const auto* lost = std::get_if<core::message::Lost>(&envelope.message)) {
      losses_.generated(shard, lost->session.value, *lost->line);
    }
    post(shard, envelope.to, Hop{0, std::move(envelope.message)});
  }
  for (core::SessionEvent& event : router.take_events()) {
    if (event.kind == core::SessionEvent::Kind::kLost) {
      if (process_->arriving_lost != nullptr && event.frame.get() == process_->arriving_lost) {
        process_->arrived_lost = true;  // from another shard: made there
      } else {
        losses_.generated(shard, event.session.value, *event.frame);
      }
    }
    on_session_event(shard, event);
    if (!process_) return;
  }
  // The HTTP sessions' effects may put more work into the router: until neither moves.
  if (!process_->desks.empty() && drain_http(shard)) drain_router(shard);
}

void ServerProcess::on_session_event(std::size_t shard, core::SessionEvent& event) {
  if (!process_->apis.empty() && process_->apis[shard]->owns(event.session)) {
    process_->apis[shard]->on_session_event(server_now(), event);
    return;
  }
  const std::uint64_t id = event.session.value;
  auto it = process_->sessions.find(id);
  if (it == process_->sessions.end()) {
    run_.fail("driver-contract", "router event (kind " +
                                     std::to_string(static_cast<int>(event.kind)) +
                                     ") for unknown session " + std::to_string(id));
    return;
  }
  ServerSession& ss = it->second;
  if (event.kind == core::SessionEvent::Kind::kLost) {
    // Pushed into an open session that asked for them: its connection must read it.
    if (!ss.port->session().closed() && ss.socket_open && losses_.is_opted_in(ss.connection)) {
      losses_.owe(ss.connection, *event.frame);
    }
    if constexpr (core::canary::kDropLost) return;  // CANARY (core/canary.h): never reaches it
  }
  const core::Delivered delivered = ss.port->deliver(server_now(), event, open_sessions());
  switch (delivered.kind) {
    case core::SessionEvent::Kind::kSignal:
      ++run_.result.coverage["signal-frame"];
      break;
    case core::SessionEvent::Kind::kSlowConsumer:
      ++run_.result.coverage["slow-consumer"];
      break;
    case core::SessionEvent::Kind::kCancelled:
      ++run_.result.coverage["cancelled"];
      break;
    case core::SessionEvent::Kind::kReply:
      if (delivered.after_park) ++run_.result.coverage["delivery"];
      break;
    default:
      break;
  }
}

std::int64_t ServerProcess::open_sessions() const {
  std::int64_t open = 0;
  for (const auto& [id, ss] : process_->sessions) {
    if (!ss.port->session().closed()) ++open;
  }
  return open;
}

void ServerProcess::on_hop(std::uint64_t life, std::size_t from, std::size_t to) {
  if (!process_ || life != life_) return;
  auto& channel = process_->channels[{from, to}];
  if (channel.empty() || channel.front().at > run_.now) return;
  Hop hop = std::move(channel.front());
  channel.pop_front();
  if (auto* http = std::get_if<core::HttpMessage>(&hop.message)) {
    run_.digest.add(0x4770 + static_cast<std::uint64_t>(http->index()));
    process_->apis[to]->receive(server_now(), std::move(*http));
    drain_router(to);
    pump();
    return;
  }
  core::RouterMessage& message = std::get<core::RouterMessage>(hop.message);
  run_.digest.add(static_cast<std::uint64_t>(message.index()));
  std::visit(
      [this](const auto& m) {
        using M = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<M, core::message::SignalFrames>) {
          for (const SessionId session : m.sessions) run_.digest.add(session.value);
        } else {
          run_.digest.add(m.session.value);
        }
      },
      message);
  if (const auto* close = std::get_if<core::message::CloseSession>(&message)) {
    auto it = process_->sessions.find(close->session.value);
    if (it != process_->sessions.end()) --it->second.close_notices;
    losses_.session_closed_at(to, close->session.value);
  }
  std::shared_ptr<const std::string> lost_line;
  std::uint64_t lost_session = 0;
  if (const auto* lost = std::get_if<core::message::Lost>(&message)) {
    lost_line = lost->line;
    lost_session = lost->session.value;
    process_->arriving_lost = lost_line.get();
    process_->arrived_lost = false;
  }
  process_->routers[to]->receive(server_now(), std::move(message));
  drain_router(to);
  if (!process_) return;
  if (lost_line) {
    process_->arriving_lost = nullptr;
    // The owner's router drops a loss only for a session it has forgotten (closed there).
    auto it = process_->sessions.find(lost_session);
    if (!process_->arrived_lost && it != process_->sessions.end() &&
        !it->second.port->close_told()) {
      run_.fail("lost-notify", "the owner of open session " + std::to_string(lost_session) +
                                   " dropped `" + lost_line->substr(0, lost_line->size() - 1) +
                                   "`");
      return;
    }
  }
  pump();
}

bool ServerProcess::pump_session(std::uint64_t id, ServerSession& ss) {
  bool progress = false;
  core::Session& session = ss.port->session();
  if (!ss.input.empty()) {
    const std::size_t used = session.on_bytes(server_now(), ss.input);
    if (used > 0) {
      ss.input.erase(0, std::min(used, ss.input.size()));
      progress = true;
    }
  }
  const core::PortEffects effects = ss.port->pump(server_now());
  core::Router& router = *process_->routers[ss.owner];
  if (effects.request) {
    progress = true;
    route(id, ss, *effects.request);
  }
  if (effects.close) {
    history_.connection_closed(ss.connection, run_.now);
    progress = true;
    losses_.session_closed_at(ss.owner, id);
    router.close(server_now(), SessionId{id});
    drain_router(ss.owner);
  }
  if (effects.frames_written != 0) router.signals_written(SessionId{id}, effects.frames_written);
  if (ss.socket_open && !session.output().empty()) {
    // The simulated socket takes everything: never a backlog.
    network_.send_to_client(ss.connection, SegmentKind::kData, ss.port->take_output());
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

void ServerProcess::pump() {
  if (!process_) return;
  for (int pass = 0; pass < 10'000 && !run_.failed; ++pass) {
    bool progress = false;
    std::vector<std::uint64_t> forget;
    for (auto& [id, ss] : process_->sessions) {
      if (pump_session(id, ss)) progress = true;
      if (ss.port->close_told() && ss.port->session().finished() && ss.close_notices == 0) {
        forget.push_back(id);
      }
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
  if (!run_.failed) run_.fail("driver-contract", "routing loop did not settle");
}

void ServerProcess::on_server_timer() {
  Process& p = *process_;
  if (p.timer_at && *p.timer_at <= run_.now) p.timer_at.reset();
  for (std::size_t shard = 0; shard < run_.settings.shards; ++shard) {
    p.routers[shard]->tick(server_now());
    const std::optional<Instant> wake = p.routers[shard]->next_wake();
    if (wake && *wake <= p.engines[shard]->now()) ++run_.result.coverage["deadlines-left-behind"];
    drain_router(shard);
  }
  for (auto& [id, ss] : p.sessions) ss.port->session().on_timer(server_now());
  for (std::size_t shard = 0; shard < p.apis.size(); ++shard) {
    p.apis[shard]->tick(server_now());  // the 401s whose delay is over
    drain_router(shard);
  }
  // The HTTP session sweep (HttpSessions::reap), on every shard in turn.
  if (p.next_sweep && *p.next_sweep <= server_now()) {
    for (std::size_t shard = 0; shard < p.desks.size(); ++shard) {
      run_.result.coverage["http-reaped"] += p.desks[shard]->reap(server_now());
      drain_router(shard);
    }
    p.next_sweep = server_now() + p.desks.front()->sweep_interval();
  }
  pump();
}

void ServerProcess::arm_timer() {
  Process& p = *process_;
  std::optional<std::int64_t> next;
  auto consider = [&](std::optional<Instant> at) {
    if (!at) return;
    const std::int64_t virtual_at = std::max(at->ns() - p.mono_origin + p.mono_back, run_.now + 1);
    if (!next || virtual_at < *next) next = virtual_at;
  };
  for (const auto& engine : p.engines) consider(engine->next_wake());
  for (const auto& [id, ss] : p.sessions) consider(ss.port->session().next_deadline());
  consider(p.next_sweep);
  for (const auto& api : p.apis) consider(api->next_deadline());
  if (next && (!p.timer_at || *next < *p.timer_at)) {
    p.timer_at = next;
    run_.schedule(*next, event::ServerTimer{life_});
  }
}
// ---- checks -------------------------------------------------------------------------------------

void ServerProcess::check_invariants() {
  if (!process_) {
    checker_.clear_observed();
    return;
  }
  for (std::size_t shard = 0; shard < run_.settings.shards && !run_.failed; ++shard) {
    checker_.check_engine(shard, *process_->engines[shard], run_.now);
  }
  checker_.clear_observed();
  losses_.check_settled();
}
void ServerProcess::check_final() {
  if (!process_) return;
  for (std::size_t shard = 0; shard < process_->desks.size(); ++shard) {
    const core::HttpSessionRouter& desk = *process_->desks[shard];
    if (desk.known() != 0 || desk.awaiting_answers() != 0) {
      run_.fail("leak", "shard " + std::to_string(shard) + " still knows " +
                            std::to_string(desk.known()) + " HTTP sessions and awaits " +
                            std::to_string(desk.awaiting_answers()) +
                            " forwarded answers after every HTTP client deleted its session");
      return;
    }
  }
  if (!process_->http_exchanges.empty()) {
    run_.fail("leak",
              std::to_string(process_->http_exchanges.size()) + " HTTP requests never answered");
    return;
  }
  if (!process_->sessions.empty()) {
    run_.fail("leak", std::to_string(process_->sessions.size()) + " sessions never finished");
    return;
  }
  for (const auto& engine : process_->engines) {
    for (const core::Engine::ResourceView& view : engine->inspect()) {
      if (!view.holders.empty() || !view.waiters.empty()) {
        run_.fail("leak", key_name({view.ns, view.key}) + " still has " +
                              std::to_string(view.holders.size()) + " holders and " +
                              std::to_string(view.waiters.size()) +
                              " waiters after every session closed");
        return;
      }
    }
  }
}
std::string ServerProcess::describe_session(std::uint64_t session) const {
  if (!process_) return ", no process";
  auto it = process_->sessions.find(session);
  if (it == process_->sessions.end()) return ", server session forgotten";
  const ServerSession& ss = it->second;
  std::string text =
      ", session " + std::to_string(session) + (ss.port->session().closed() ? " closed" : " open") +
      (ss.port->session().in_flight() ? " in-flight" : "") + (ss.port->parked() ? " parked" : "") +
      " queued " + std::to_string(ss.port->session().queued_requests()) + " buffered " +
      std::to_string(ss.port->session().buffered_input_bytes()) + " input " +
      std::to_string(ss.input.size()) + (ss.socket_open ? " socket-open" : " socket-closed");
  for (std::size_t shard = 0; shard < run_.settings.shards; ++shard) {
    const core::Engine& engine = *process_->engines[shard];
    const std::optional<Instant> wake = engine.next_wake();
    text += "; shard " + std::to_string(shard) + " next wake " +
            (wake ? std::to_string(wake->ns() - process_->mono_origin) : std::string("none"));
    for (const core::Engine::ResourceView& view : engine.inspect()) {
      for (SessionId waiter : view.waiters) {
        if (waiter.value == session) text += ", waits on " + key_name({view.ns, view.key});
      }
      for (const auto& holder : view.holders) {
        if (holder.session.value == session) text += ", holds " + key_name({view.ns, view.key});
      }
    }
  }
  return text;
}

}  // namespace turnstile::sim
