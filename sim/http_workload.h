// HttpWorkload: the simulated HTTP API clients (profile http). Each keeps one HTTP session and
// sends every request as a new HTTP connection that any shard's thread may accept, so most of
// its requests reach a shard that is not the session's home and are forwarded there: the path
// core::HttpSessionRouter decides. It locks and releases locks and semaphores (long polls with
// timeouts), renews, pings (also while a long poll waits, from a second connection), deletes its
// session now and then, and sometimes stops waiting for a response and closes the connection
// (the server then abandons the request). A 410 or a reset (the process died) means the session
// is gone: the client creates another. In the drain phase every client deletes its session, so
// that the end of the run can check that no shard still knows a session or a forwarded request.
//
// It owns the HTTP clients; it talks to the Network (HTTP exchanges) and the RunContext. It knows
// nothing of the server process.
//
// Thread affinity: single-threaded, owned by one run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/types.h"
#include "sim/context.h"
#include "sim/network.h"
#include "sim/prng.h"

namespace turnstile::sim {

class HttpWorkload {
 public:
  HttpWorkload(RunContext& run, Network& network);

  // Creates the clients (settings.http_clients, maybe none) and schedules each one's first act.
  void start();
  // The events of the HTTP clients.
  void on_act(std::size_t client);
  void on_result(std::uint64_t exchange);
  void on_give_up(std::size_t client, std::uint64_t exchange);

  // The liveness phase: nothing new. Draining: every client deletes its session.
  void stop();
  void drain();

  // Liveness: a description of the first client still waiting for a response, if any.
  std::optional<std::string> first_waiting() const;
  // At the end of a run: every client deleted its session and has nothing in flight.
  void check_final();

 private:
  // What a client knows of its session's tokens, to check the "lost" arrays of its replies
  // (docs/http-api.md, "Lost slots"). Reset with the session.
  struct Tokens {
    std::map<std::string, std::string> granted;  // token -> key ("sem:" prefix), seen granted
    std::set<std::string> released;              // released by this client (204 or 200)
    std::set<std::string> reported;              // announced lost in a reply
    std::set<std::string> abandoned_keys;        // keys of lock requests it stopped waiting for
    // A reply that may have carried losses never reached the client (it stopped waiting), or
    // one said some were dropped: silence about a loss proves nothing after that.
    bool may_have_missed = false;
  };

  struct Client {
    std::size_t id = 0;
    std::string handle;                             // empty: no session
    std::map<std::uint64_t, HttpCall> outstanding;  // by exchange
    std::map<std::string, core::Token> held;        // lock keys ("sem:" prefix for semaphores)
    Tokens tokens;
    bool stopped = false;
  };

  // The request a real client writes for `call`.
  static core::HttpApiRequest http_request(const HttpCall& call);
  void send(Client& client, HttpCall call);
  void session_gone(Client& client);
  core::Request pick_request(Client& client);
  // Checks the "lost" array of a reply to `client`'s session; false after a failure.
  bool check_lost(Client& client, const std::string& body);
  // A renew or release of `token` answered lease_expired: the session must have heard why.
  void check_loss_announced(Client& client, const std::string& token, const std::string& body);
  // A protocol failure: `what` about a reply with `code` and `body` to `client`.
  void bad(const Client& client, const std::string& what, int code, const std::string& body);
  // The reply to `client`'s lock, release or renew `request` on its current session.
  void on_request_answered(Client& client, const core::Request& request, int code,
                           const std::string& body);

  RunContext& run_;
  Network& network_;
  Prng prng_;  // the seed's HTTP workload stream
  std::vector<Client> clients_;
  std::map<std::uint64_t, std::size_t> exchanges_;  // exchange -> client
};

}  // namespace turnstile::sim
