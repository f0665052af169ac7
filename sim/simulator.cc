// The world of one run: it owns the parts (sim/context.h, network.h, disk.h, checker.h,
// history.h, server.h, workload.h, http_workload.h, faults.h), wires them, and runs the loop that
// hands each event to its part, defers the server process's events while it is paused, and moves
// the run through its phases: faulty, liveness (healed; every request must be answered), draining
// (every connection must close), then the final checks. The parts talk through the event queue and
// the Network; none calls back into the world.
#include "sim/simulator.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "sim/checker.h"
#include "sim/cluster_run.h"
#include "sim/context.h"
#include "sim/disk.h"
#include "sim/event.h"
#include "sim/faults.h"
#include "sim/history.h"
#include "sim/http_workload.h"
#include "sim/loss_checker.h"
#include "sim/network.h"
#include "sim/operator.h"
#include "sim/prng.h"
#include "sim/server.h"
#include "sim/settings.h"
#include "sim/workload.h"

namespace turnstile::sim {
namespace {

class World final {
 public:
  World(const Options& options, Settings settings)
      : run_(options, std::move(settings)),
        faults_prng_(options.seed, kFaults),
        network_(run_.settings, options.seed, run_.queue, run_.now),
        disk_(options.seed, run_.digest, run_.result.coverage),
        checker_(run_.settings, run_.failed, run_.result.grants_seen,
                 [this](const std::string& invariant, const std::string& detail) {
                   run_.fail(invariant, detail);
                 }),
        losses_(run_),
        server_(run_, network_, disk_, checker_, history_, losses_, faults_prng_),
        workload_(run_, network_, history_, losses_),
        http_(run_, network_),
        operator_(run_, network_, history_, workload_),
        faults_(run_, server_, workload_, faults_prng_) {
    checker_.count_into(&run_.result.coverage);
  }

  Result run();

 private:
  void dispatch(const Event& event);
  void heal();            // the liveness phase begins
  void check_liveness();  // its window is over: no client may still wait
  void check_final();

  RunContext run_;
  // The seed's fault stream: the injector's choices and the server's restart delays, in turn.
  Prng faults_prng_;
  Network network_;  // after run_, which it keeps references into
  Disk disk_;        // likewise
  Checker checker_;
  History history_;
  LossChecker losses_;
  ServerProcess server_;  // registers as the network's listener
  Workload workload_;
  HttpWorkload http_;
  Operator operator_;
  FaultInjector faults_;
  std::uint64_t events_ = 0;
  std::int64_t liveness_deadline_ = 0;
};

void World::dispatch(const Event& event) {
  std::visit(
      [this](const auto& e) {
        using E = std::decay_t<decltype(e)>;
        if constexpr (std::is_same_v<E, event::ClientAct>) {
          workload_.on_act(e.client);
        } else if constexpr (std::is_same_v<E, event::NetToServer>) {
          server_.on_net_to_server(e.connection);
        } else if constexpr (std::is_same_v<E, event::NetToClient>) {
          workload_.on_net_to_client(e.connection);
        } else if constexpr (std::is_same_v<E, event::Hop>) {
          server_.on_hop(e.life, e.from, e.to);
        } else if constexpr (std::is_same_v<E, event::ServerTimer>) {
          server_.on_timer(e.life);
        } else if constexpr (std::is_same_v<E, event::Fault>) {
          faults_.on_fault();
        } else if constexpr (std::is_same_v<E, event::Restart>) {
          server_.on_restart();
        } else if constexpr (std::is_same_v<E, event::JournalSynced>) {
          server_.on_journal_synced(e.life, e.seq);
        } else if constexpr (std::is_same_v<E, event::JournalRetry>) {
          server_.on_journal_retry(e.life);
        } else if constexpr (std::is_same_v<E, event::HttpAct>) {
          http_.on_act(e.client);
        } else if constexpr (std::is_same_v<E, event::HttpToServer>) {
          server_.on_http_to_server(e.exchange);
        } else if constexpr (std::is_same_v<E, event::HttpToClient>) {
          if (operator_.owns(e.exchange)) {
            operator_.on_result(e.exchange);
          } else {
            http_.on_result(e.exchange);
          }
        } else if constexpr (std::is_same_v<E, event::OperatorAct>) {
          operator_.on_act();
        } else if constexpr (std::is_same_v<E, event::HttpGone>) {
          server_.on_http_gone(e.exchange);
        } else if constexpr (std::is_same_v<E, event::HttpGiveUp>) {
          http_.on_give_up(e.client, e.exchange);
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
        if constexpr (std::is_same_v<E, event::ClientAct> || std::is_same_v<E, event::HttpAct>) {
          return e.client;
        }
        if constexpr (std::is_same_v<E, event::HttpToServer> ||
                      std::is_same_v<E, event::HttpToClient> ||
                      std::is_same_v<E, event::HttpGone> || std::is_same_v<E, event::HttpGiveUp>) {
          return e.exchange;
        }
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
  run_.result.settings = run_.settings.describe();
  server_.start();
  workload_.start();
  http_.start();
  operator_.start();
  faults_.start();

  std::int64_t drain_deadline = 0;
  while (!run_.failed && !run_.queue.empty()) {
    Event event = run_.queue.pop();
    // A stopped process handles nothing; its events wait for it (in their order).
    if (event.server_side() && server_.paused_until() > event.at) {
      run_.queue.defer(std::move(event), server_.paused_until());
      continue;
    }
    run_.now = event.at;
    ++events_;
    const std::uint64_t field = first_field(event.what);
    run_.digest.add(static_cast<std::uint64_t>(event.at));
    run_.digest.add(static_cast<std::uint64_t>(event.what.index()) << 32 | field);
    if (run_.options.trace) {
      std::printf("%lld ev %zu %llu\n", static_cast<long long>(run_.now), event.what.index(),
                  static_cast<unsigned long long>(field));
    }
    dispatch(event);
    if (run_.failed) break;
    server_.kick_journal();
    server_.check_invariants();

    if (!run_.liveness && events_ >= run_.options.events) heal();
    if (run_.liveness && !run_.draining && run_.now >= liveness_deadline_) {
      check_liveness();
      run_.draining = true;
      drain_deadline = run_.now + kDrainWindow;
      workload_.drain();
      http_.drain();
    }
    if (run_.draining && run_.now >= drain_deadline) break;
  }
  server_.harvest_counters();
  if (!run_.failed) check_final();
  if (!run_.failed) {
    const History::Outcome outcome = history_.check();
    run_.result.keys_checked = outcome.keys_checked;
    run_.result.inconclusive = outcome.inconclusive;
    run_.result.operations_checked = outcome.operations;
    if (!outcome.violation.empty()) run_.fail(outcome.invariant, outcome.violation);
  }
  run_.result.events_run = events_;
  run_.result.digest = run_.digest.value();
  return run_.result;
}

// Heal: no more faults, the process runs, clients issue nothing new.
void World::heal() {
  run_.liveness = true;
  // Events a pause deferred stay scheduled at its end: the window starts from there.
  const std::int64_t resumed_at = std::max(run_.now, server_.paused_until());
  server_.resume();
  if (!server_.running()) server_.start();
  workload_.stop();
  http_.stop();
  operator_.stop();
  liveness_deadline_ = resumed_at + kLivenessWindow;
  run_.schedule(liveness_deadline_, event::LivenessStart{});
  if (server_.running()) server_.pump();
}

void World::check_liveness() {
  std::optional<std::string> http = http_.first_waiting();
  if (!http) http = operator_.first_waiting();
  if (http) {
    run_.fail("liveness",
              *http + " after " + std::to_string(kLivenessWindow / kS) + " s of healed time");
    return;
  }
  const std::optional<Workload::Waiting> waiting = workload_.first_waiting(server_.life());
  if (!waiting) return;
  run_.fail("liveness", "client " + std::to_string(waiting->client) + " still waits for " +
                            std::to_string(waiting->replies) + " replies after " +
                            std::to_string(kLivenessWindow / kS) + " s of healed time; " +
                            waiting->connection + server_.describe_session(waiting->session));
}

void World::check_final() {
  workload_.check_final();
  if (!run_.failed) http_.check_final();
  if (!run_.failed) server_.check_final();
}

}  // namespace

const std::vector<std::string>& profile_names() { return kProfiles; }

bool is_profile(const std::string& name) {
  return std::find(kProfiles.begin(), kProfiles.end(), name) != kProfiles.end();
}

Result run_simulation(const Options& options) {
  if (is_cluster_profile(options.profile)) return run_cluster_simulation(options);
  World world(options, choose_settings(options.seed, options.profile));
  return world.run();
}

}  // namespace turnstile::sim