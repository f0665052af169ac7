// Operator: an administrator who force-releases keys now and then (Settings::force_interval_ms)
// through the HTTP admin route, DELETE /v1/admin/{locks,semaphores,rwlocks}/{key}[?fence=N],
// with the admin token (or, now and then, a wrong one: 401, nothing freed). It mostly aims at a
// slot some client holds (and then half the time at its fence alone), otherwise at any key;
// three in ten also end the key's lock-delay (clear_delay=true, which the Checker is told of);
// a few of its queries are malformed (400). It checks each response's code and body.
//
// It owns its requests in flight; it talks to the Network (HTTP exchanges) and reads what the
// Workload's clients hold (as an operator reads the clients' logs); it tells the History of each
// force-release, which may free holders before their leases end. It knows nothing of the server
// process.
//
// Thread affinity: single-threaded, owned by one run.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "sim/context.h"
#include "sim/history.h"
#include "sim/network.h"
#include "sim/prng.h"
#include "sim/workload.h"

namespace turnstile::sim {

class Operator {
 public:
  Operator(RunContext& run, Network& network, History& history, const Workload& workload);

  void start();  // the first act, when the seed has an operator
  void on_act();
  bool owns(std::uint64_t exchange) const { return outstanding_.count(exchange) != 0; }
  void on_result(std::uint64_t exchange);
  void stop() { stopped_ = true; }  // the liveness phase: nothing new
  // Liveness: a request still unanswered.
  std::optional<std::string> first_waiting() const;

 private:
  struct Sent {
    HttpCall call;
    int expected_code = 200;
    std::uint64_t force = 0;   // its History id
    bool by_fence = false;     // aimed at one holder's fence: frees at most one
    bool clear_delay = false;  // asked to end the key's lock-delay too
    std::int64_t at = 0;       // when it was sent
  };
  RunContext& run_;
  Network& network_;
  History& history_;  // a force-release may free holders early
  const Workload& workload_;
  Prng prng_;
  bool stopped_ = false;
  std::map<std::uint64_t, Sent> outstanding_;  // by exchange
};

}  // namespace turnstile::sim
