// Loopback: a single-threaded driver that wires many core::Session objects to one or more
// engines through the production router (core/router.h) with a manual clock, the way the daemon
// wires connections to its shards, so that tests can speak the protocol with real bytes and no
// sockets.
//
// What it does for each session, in session-id order (std::map, so every run is the same):
//  * send() appends bytes to the connection's input; Session::on_bytes takes what it can, the
//    rest stays buffered here and is offered again after any progress (backpressure).
//  * The routing loop takes next_request() from each session and submits it to the router of its
//    shard (connections are spread over the shards in turn); it moves the routers' messages in
//    one FIFO queue until none is left, and applies their events to the sessions: a reply, a
//    parked notice, a cancellation, a stats snapshot (answered with encode_stats_json,
//    connections = sessions not closed), a signal frame, a slow consumer's close. When a session
//    first becomes closed() its router is
//    told (Router::close). Give-back requests of closed sessions are routed like any other. A
//    session is forgotten once finished(); its unread output is kept for read().
//  * advance() moves the clock to each session deadline and engine wake-up on the way, in
//    order, firing Session::on_timer and Router::tick at each, then to the target.
//
// Races: hold_close_notices(true) delays telling the router about closed sessions until
// hold_close_notices(false), so a grant can reach a session that has already closed (the
// "grant raced the close, give it back" path of core/session.h).
//
// The router's contract with each session is checked by core::SessionPort (an assertion). What
// only this driver can see (an event for a forgotten session, input the session took more of
// than offered, a deadline that on_timer/tick did not clear, a loop that does not settle) is
// recorded in anomalies() instead of crashing, so a test can assert it is empty.
//
// Thread affinity: single-threaded test helper.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/engine.h"
#include "core/random.h"
#include "core/router.h"
#include "core/session.h"
#include "core/session_port.h"
#include "core/signal_hub.h"
#include "core/time.h"
#include "core/types.h"

namespace turnstile::test {

struct LoopbackConfig {
  core::SessionConfig session;
  core::EngineConfig engine;
  bool auto_release = true;       // --auto-release-on-disconnect
  std::size_t shards = 1;         // engines, each with its router; connections go to each in turn
  core::SignalHubConfig signals;  // the one signal hub all routers share
  std::uint64_t salt_seed = 1;    // token salts, so runs replay bit for bit
  core::Instant start = core::Instant::from_ns(1'000'000'000'000);
};

class Loopback {
 public:
  explicit Loopback(LoopbackConfig config = {});
  ~Loopback();
  Loopback(const Loopback&) = delete;
  Loopback& operator=(const Loopback&) = delete;

  // Opens a connection on the next shard in turn: ids are 1, 2, 3... with one shard (in general
  // the router's sequence * shards + shard).
  core::SessionId connect();
  // Bytes from the peer. Ignored for a connection already forgotten.
  void send(core::SessionId id, std::string_view bytes);
  // Takes (and consumes) the reply bytes written so far.
  std::string read(core::SessionId id);
  // The connection broke (Session::on_peer_closed).
  void disconnect(core::SessionId id);
  // The peer finished sending but may still read (Session::on_peer_eof).
  void half_close(core::SessionId id);
  // The driver closes the session (Session::close), e.g. a write timeout.
  void close(core::SessionId id, core::CloseReason reason = core::CloseReason::kDriver);
  // Graceful shutdown begins: Session::begin_drain on every session.
  void begin_drain();
  // Moves the clock forward by `by`, firing every timer due on the way at its own instant.
  void advance(core::Duration by);

  // While held, sessions that close are not reported to the engine; releasing the hold reports
  // them (in id order) and routes what follows.
  void hold_close_notices(bool hold);

  // ---- introspection ---------------------------------------------------------------------
  core::Instant now() const { return now_; }
  core::Engine& engine(std::size_t shard = 0) { return *engines_.at(shard); }
  core::SignalHub& signals() { return *signals_; }
  // The session, or nullptr once it was forgotten (finished) or never existed.
  const core::Session* session(core::SessionId id) const;
  // True while the connection's session exists and is not closed.
  bool is_open(core::SessionId id) const;
  // True once the connection's session was forgotten (closed and finished).
  bool forgotten(core::SessionId id) const;
  // Bytes the driver holds because the session did not take them yet.
  std::size_t pending_input(core::SessionId id) const;
  // Sessions not closed: the `connections` of stats.
  std::int64_t open_sessions() const;
  // Every engine command routed so far, per session, in order (give-backs included).
  const std::vector<core::Request>& routed(core::SessionId id) const;
  // Driver-contract violations seen so far (empty when all is well).
  const std::vector<std::string>& anomalies() const { return anomalies_; }

 private:
  struct Connection {
    std::unique_ptr<core::SessionPort> port;  // null once forgotten
    std::size_t shard = 0;
    std::string input;             // bytes not yet taken by the session
    std::string leftover_output;   // unread output of a forgotten session
    bool close_pending = false;    // the port asked for Router::close; held back while held
    bool router_notified = false;  // Router::close was called
    std::vector<core::Request> routed;
  };

  Connection* find(core::SessionId id);
  const Connection* find(core::SessionId id) const;
  // Runs everything that can run now, until nothing changes.
  void route();
  // One pass over the sessions and the routers; true if anything happened.
  bool route_once();
  // Moves every router's messages until none is left, then applies their events.
  bool move_messages();
  void apply(core::SessionEvent& event);
  // Fires every session's on_timer and every router's tick at now_, then routes.
  void fire_timers();
  // The earliest session deadline or engine wake-up strictly after now_.
  std::optional<core::Instant> next_event_after_now();

  LoopbackConfig config_;
  std::vector<std::unique_ptr<core::SplitMix64>> salts_;
  std::vector<std::unique_ptr<core::Engine>> engines_;
  std::unique_ptr<core::SignalHub> signals_;
  std::vector<std::unique_ptr<core::Router>> routers_;
  core::Instant now_;
  std::size_t next_shard_ = 0;
  bool hold_close_notices_ = false;
  std::map<std::uint64_t, Connection> connections_;
  std::vector<std::string> anomalies_;
};

}  // namespace turnstile::test
