// Workload: the simulated clients. Each client connects, speaks the real wire protocol over its
// connection (locks, semaphores, read-write locks, two-phase enqueue/wait, releases and renewals
// with its own, stale, foreign or malformed tokens or of the other kind of read-write slot, pings,
// stats, malformed and oversized requests, signal listens and signals, pipelined when the seed
// says so), reads the replies, and now and then closes
// or resets its connection. Every call and its reply go to the History; every choice comes from the
// seed's workload stream.
//
// It owns the clients (their connections, requests in flight, tokens held, keys enqueued); what
// they ask and what they make of a reply is the shared client model (sim/tcp_client.h), which
// keeps the pool of tokens seen. It talks to the Network (connect, send, the segments that reach a
// client), the History and the RunContext. It knows nothing of the server process: a connect is
// accepted or not by whoever listens on the Network.
//
// Thread affinity: single-threaded, owned by one run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/protocol.h"
#include "core/types.h"
#include "sim/checker.h"
#include "sim/context.h"
#include "sim/history.h"
#include "sim/loss_checker.h"
#include "sim/network.h"
#include "sim/prng.h"
#include "sim/tcp_client.h"

namespace turnstile::sim {

class Workload {
 public:
  Workload(RunContext& run, Network& network, History& history, LossChecker& losses);
  ~Workload();
  Workload(const Workload&) = delete;
  Workload& operator=(const Workload&) = delete;

  // Creates the clients and schedules each one's first act.
  void start();
  // The events of the clients.
  void on_act(std::size_t client);
  void on_net_to_client(std::uint64_t connection);

  // The liveness phase: clients issue nothing new. Draining: each acts once more, right away
  // (and from then on closes its connection).
  void stop();
  void drain();

  std::size_t clients() const;
  // A slot some client holds now, and its fence, chosen with `prng` (the operator's aim).
  std::optional<std::pair<ResourceKey, std::uint64_t>> pick_held(Prng& prng) const;
  // The reset fault: `client`'s connection resets, if it has one it still writes to.
  void reset_connection(std::size_t client);

  // Liveness: the first client that still waits for replies on an open connection.
  struct Waiting {
    std::uint64_t client = 0;
    std::size_t replies = 0;
    // "first pending: ...; connection 3 life 2 (now 2), segments to server 0, to client 0"
    std::string connection;
    std::uint64_t session = 0;  // the server end of that connection
  };
  // `life_now`: the server's current life, for the description.
  std::optional<Waiting> first_waiting(std::uint64_t life_now) const;
  // At the end of a run: every client closed its connection.
  void check_final();

 private:
  struct Client;

  // What the clients ask, and with which odds (sim/tcp_client.h).
  RequestMix request_mix();
  void client_act(Client& client);
  // A client without a connection connects, and asks for lost-notify first if it does.
  void client_connect(Client& client);
  // Now and then a client closes or resets its connection, idle or while it waits.
  bool client_vanishes(Client& client);
  void client_send(Client& client, Outstanding outstanding, std::string bytes);
  void client_disconnect(Client& client, bool reset);
  void client_connection_lost(Client& client);
  void client_line(Client& client, std::string_view line);
  // Signals (Settings::signal_permille): a listen, an unlisten or a signal.
  void pick_signal_request(Client& client, core::Request& request);
  // A `sig` frame pushed to the client.
  void client_frame(Client& client, std::string_view line);
  ResourceKey pick_key(bool semaphore);
  std::string describe_connection(const Client& client, std::uint64_t life_now) const;

  RunContext& run_;
  Network& network_;
  LossChecker& losses_;
  Prng prng_;             // the seed's workload stream
  Prng losses_prng_;      // which clients ask for lost-notify (apart, so prng_ draws as before)
  TcpClientModel model_;  // draws from prng_
  std::vector<Client> clients_;
  std::uint64_t signals_sent_ = 0;  // payloads are "s<n>", n counting up
};

}  // namespace turnstile::sim
