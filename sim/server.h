// ServerProcess: the simulated turnstiled, one process life after another. A life owns its
// sessions (core::Session per accepted connection), one core::Router and core::Engine per shard,
// the mailboxes between the shards, its timer, its monotonic clock (with the clock-back fault's
// lag) and, with the fence journal, the core::FenceJournal on the simulated disk; a crash loses
// all of it and schedules the next life. Across lives it keeps the life count, the pause state
// (a SIGSTOPped process handles no event until paused_until()) and the largest fence ever handed
// out.
//
// It talks to: the Network (it is its Listener: clients' connects reach accept(); it reads and
// writes the connections' segments), the Disk under the fence state file, the Checker (every
// engine call, every grant, every forgotten session), the History (lives, closed connections)
// and the RunContext (time, the queue, the digest, coverage, failures). It knows nothing of the
// clients.
//
// Thread affinity: single-threaded, owned by one run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/engine.h"
#include "core/fence.h"
#include "core/random.h"
#include "core/router.h"
#include "core/time.h"
#include "sim/checker.h"
#include "sim/context.h"
#include "sim/disk.h"
#include "sim/history.h"
#include "sim/loss_checker.h"
#include "sim/network.h"
#include "sim/prng.h"

namespace turnstile::sim {

// A life's state, shared by the files of ServerProcess and defined in sim/server_life.h.
namespace server_life {
struct Hop;
struct ServerSession;
struct Process;
}  // namespace server_life

class ServerProcess final : public core::EngineObserver, public Listener {
 public:
  // `faults` is the run's fault stream: the delays before a crashed process starts again are
  // drawn from it, in turn with the fault injector's draws.
  ServerProcess(RunContext& run, Network& network, Disk& disk, Checker& checker, History& history,
                LossChecker& losses, Prng& faults);
  ~ServerProcess() override;
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  bool running() const { return process_ != nullptr; }
  std::uint64_t life() const { return life_; }  // the current life, or the last one while down

  // Starts a new life (journal recovery first, when there is one). It may not come up: it can die
  // during its start-up write (a restart is scheduled) or break an invariant.
  void start();
  void crash();  // loses the life and schedules the next
  void pump();   // runs the sessions until nothing moves, then arms the timer

  // The events of the server process.
  void on_net_to_server(std::uint64_t connection);
  void on_hop(std::uint64_t life, std::size_t from, std::size_t to);
  void on_timer(std::uint64_t life);
  void on_restart();
  void on_journal_synced(std::uint64_t life, std::uint64_t seq);
  void on_journal_retry(std::uint64_t life);
  void on_http_to_server(std::uint64_t exchange);
  void on_http_gone(std::uint64_t exchange);

  // After every event: the journal write it wants, if any, and the engines' invariants.
  void kick_journal();
  void check_invariants();

  // Pauses (SIGSTOP, a GC pause): the process handles nothing until paused_until().
  std::int64_t paused_until() const { return paused_until_; }
  bool paused() const { return paused_until_ > run_.now; }
  void pause_until(std::int64_t until);  // schedules the Unpause
  void resume() { paused_until_ = 0; }   // healed: runs now
  // The monotonic clock's lag behind virtual time (the clock-back fault); 0 while down.
  std::int64_t clock_back() const;
  void step_clock_back(std::int64_t by);

  void harvest_counters();  // adds the engines' counters to the coverage
  // At the end of a run whose clients all closed: no session left, nothing held or waited for.
  void check_final();
  // The server end of a connection, for a liveness failure: ", session 7 open in-flight ...".
  std::string describe_session(std::uint64_t session) const;

  // Listener: a client's connection reaches the process (a session on the next shard in turn).
  std::optional<Accepted> accept(std::uint64_t connection) override;
  // core::EngineObserver: every engine call the routers make.
  void on_engine_call(std::size_t shard, const core::Request* request, const core::Reply* reply,
                      const std::vector<core::Delivery>& deliveries) override {
    observe_call(shard, deliveries, reply, request);
  }

 private:
  using Hop = server_life::Hop;
  using ServerSession = server_life::ServerSession;
  using Process = server_life::Process;

  core::Instant server_now() const;
  bool pump_session(std::uint64_t id, ServerSession& ss);
  void route(std::uint64_t id, ServerSession& ss, const core::Request& request);
  void post(std::size_t from, std::size_t to, Hop hop);
  // Sends the router's messages on their way and hands its events to the sessions.
  void drain_router(std::size_t shard);
  void on_session_event(std::size_t shard, core::SessionEvent& event);
  // Sessions not closed: the `connections` a stats reply reports.
  std::int64_t open_sessions() const;
  // The shard's HTTP API and its session router, as the daemon's HTTP server runs them.
  void start_http(std::size_t shard);
  // Carries the shard's HTTP API's effects out; true when anything moved (or its router has work
  // again).
  bool drain_http(std::size_t shard);
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
  // Its parts; each false once the life cannot start: a refused file may be recreated only
  // before any write was synced, a recovered ceiling must cover every fence handed out, and the
  // start-up reservation must become durable before the process dies.
  bool recreate_refused(const core::JournalRecovery& recovery);
  bool check_recovered(const core::JournalRecovery& recovery);
  bool reserve_at_start_up(core::FenceJournal& journal);
  void on_fences_taken(core::FenceBlock block);

  RunContext& run_;
  Network& network_;
  Disk& disk_;
  Checker& checker_;
  History& history_;
  LossChecker& losses_;
  Prng& faults_;
  Prng clocks_;      // each life's monotonic clock origin
  Prng salts_prng_;  // the engines' token salts
  std::unique_ptr<core::RandomSource> salts_;

  std::unique_ptr<Process> process_;  // null while crashed
  std::uint64_t life_ = 0;
  std::int64_t paused_until_ = 0;  // the process is stopped until then
  // The largest fence any journal handed out, over every life (0: none yet).
  std::uint64_t fences_handed_max_ = 0;
};

}  // namespace turnstile::sim
