// Router: one shard's part of the path from a session to the engine that owns its key, and back.
//
// The key space is split over `shards` engines (core::shard_of). A session (a TCP connection, an
// HTTP session, a simulated client) lives on one shard, its owner (session id % shards). Its
// requests go to the engine that owns their key; replies, parked notices, cancellations and stats
// parts come back to the owner; when it closes, exactly the shards it sent requests to are told.
// Every such decision is made here, once, and every driver moves the router's messages:
//
//   turnstiled (net/)   between shard threads (mailbox + eventfd), one Router per shard;
//   turnstile-sim       through its event queue, with delays, drops and crashes;
//   testing       in a loop.
//
// Inputs: a session's request, cancel or close on its owner's router (submit, cancel, close); a
// message from another shard (receive); time (tick). Outputs, taken by the driver after each
// input: messages for other shards (take_outbox: deliver each to the router of `to`, in order per
// pair of shards) and events for sessions owned by this shard (take_events, in order).
//
// Rules:
//  * A session has at most one request in flight (core::Session guarantees it); its reply, or
//    its parked notice followed later by its reply, or its cancellation comes back as an event.
//  * stats goes to every engine; the parts are merged here and come back as one kStats event,
//    with the signal hub's channels.
//  * listen, unlisten and signal are answered by the process's one signal hub
//    (core/signal_hub.h) at once. A signal's frame goes to each shard that owns a session it
//    is for in one message (SignalFrames) and comes out as a kSignal event per session, in
//    order; a slow consumer's owner gets a kSlowConsumer event and closes it. Frames that reach
//    the owner after the session's close() are dropped there. The owner reports
//    the frames it wrote to the socket (signals_written), which frees room in the hub. A
//    `signal` is then handed to the hub's forward() (the other nodes of a cluster); a
//    `signal-peer`, which came from another node, is published here only.
//  * A slot an open session lost without releasing it (Engine::take_losses: an expired lease, a
//    force-release, a reclaimed orphan) goes to the session's owner as a kLost event with its
//    `lost` line, while the session is open there; the session pushes it if it asked.
//  * Pushed events (kSignal, kSlowConsumer, kLost) are for open sessions only: one queued before
//    the session's close() and not yet taken is dropped by take_events, so a driver that forgets
//    a session when it closes it never hears of it again.
//  * close() sends one close notice to every shard where the session may have left state (it
//    sent an acquire, an enqueue or a wait there; a release or a renew acts on a token and leaves
//    none), and forgets the session's routing state. An engine that drops the session's parked
//    request on that notice answers with a cancellation, so every routed request is accounted for
//    once. A release submitted after close() (a session giving back a grant that raced its close)
//    therefore creates no routing state again.
//  * The router has no clock, no threads and no I/O; given the same inputs it produces the same
//    outputs.
//
// Thread affinity: one Router belongs to its shard's thread; messages cross threads only through
// the driver.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "core/engine.h"
#include "core/protocol.h"
#include "core/session.h"
#include "core/signal_hub.h"
#include "core/stats.h"
#include "core/time.h"
#include "core/types.h"

namespace turnstile::core {

// The messages between shards' routers. Each names the session it concerns.
namespace message {
struct EngineRequest {  // to the shard that owns the key
  SessionId session;
  Request request;
};
struct EngineReply {  // to the session's owner: an immediate reply, or the outcome of a parked one
  SessionId session;
  Reply reply;
};
struct Parked {  // to the session's owner: its request waits in the engine
  SessionId session;
};
struct CloseSession {  // to every shard the session touched
  SessionId session;
};
struct Cancelled {  // to the session's owner: the engine dropped its parked request
  SessionId session;
};
struct StatsRequest {  // to every shard
  SessionId session;
};
struct StatsPart {  // to the session's owner
  SessionId session;
  StatsSnapshot snapshot;
};
struct CancelParked {  // to the shard holding the session's parked request
  SessionId session;
};
struct SignalFrames {  // to the owner of the sessions: one signal's frame for each of them
  std::shared_ptr<const std::string> frame;
  std::vector<SessionId> sessions;
};
struct SlowConsumer {  // to the session's owner: close it, its signal queue is full
  SessionId session;
};
struct Lost {  // to the session's owner: it lost a slot (Engine::take_losses); the `lost` line
  SessionId session;
  std::shared_ptr<const std::string> line;
};
}  // namespace message

using RouterMessage = std::variant<message::EngineRequest, message::EngineReply, message::Parked,
                                   message::CloseSession, message::Cancelled, message::StatsRequest,
                                   message::StatsPart, message::CancelParked, message::SignalFrames,
                                   message::SlowConsumer, message::Lost>;

// A message for the router of shard `to`.
struct Envelope {
  std::size_t to = 0;
  RouterMessage message;
};

// Something that happened to a session owned by this shard.
struct SessionEvent {
  enum class Kind : std::uint8_t {
    kReply,      // `reply` answers the request in flight
    kParked,     // the request in flight waits in its engine
    kCancelled,  // the request in flight was dropped unanswered (the session closed or cancelled)
    kStats,      // `stats` holds every engine's part, merged
    kSignal,     // `frame` is a signal for it: push it to the peer now
    kSlowConsumer,  // its signal queue was full: close it
    kLost,          // `frame` is a `lost ...` line: push it if the session asked (lost-notify)
  };
  Kind kind = Kind::kReply;
  SessionId session;
  Reply reply;
  StatsSnapshot stats;
  std::shared_ptr<const std::string> frame = nullptr;  // kSignal, kLost
};

// A driver applies events with core::SessionPort::deliver (core/session_port.h).

// What a driver that checks the engines (the simulator) sees of every engine call: the request
// (null for a close, a cancel, a tick or stats), its immediate reply (null likewise) and the
// deliveries it produced.
class EngineObserver {
 public:
  virtual ~EngineObserver() = default;
  virtual void on_engine_call(std::size_t shard, const Request* request, const Reply* reply,
                              const std::vector<Delivery>& deliveries) = 0;
};

struct RouterConfig {
  std::size_t index = 0;     // this shard
  std::size_t shards = 1;    // >= 1
  bool auto_release = true;  // --auto-release-on-disconnect: a close releases what it holds
  // --orphan-ttl: how long a closed session's places are kept for its stable ref
  // (Engine::close_session); zero: not kept.
  Duration orphan_ttl = Duration::zero();
  std::size_t stats_entries_max = EngineConfig{}.stats_entries_max;
  // Cluster mode (docs/cluster.md): the key space lives in one replicated engine, not in the
  // shards' engines. Every engine request, cancel, close notice and stats request goes to the
  // endpoint `shards` (one past the last shard: the node's core::ClusterLeader), and the router
  // never calls an engine of its own.
  bool replicated = false;
  // Put in the top 24 bits of every session id this router makes (below them: sequence * shards
  // + index, 40 bits), so that ids stay unique across the processes of a cluster over time.
  // 0 on one node.
  std::uint32_t session_tag = 0;
  // The process's signal hub, shared by every shard's router (each call on it is whole: the
  // daemon locks it). Null: listen, unlisten and signal are answered `error`.
  SignalBroker* signals = nullptr;
};

// Session ids: a 24-bit tag above a 40-bit number whose remainder by the shard count is the
// owning shard.
inline constexpr int kSessionTagShift = 40;
inline constexpr std::uint64_t kSessionNumberMask = (std::uint64_t{1} << kSessionTagShift) - 1;
inline std::size_t session_owner(SessionId session, std::size_t shards) {
  return static_cast<std::size_t>((session.value & kSessionNumberMask) % shards);
}
inline std::uint32_t session_tag(SessionId session) {
  return static_cast<std::uint32_t>(session.value >> kSessionTagShift);
}

class Router {
 public:
  // `observer` may be null.
  Router(const RouterConfig& config, Engine& engine, EngineObserver* observer = nullptr);
  // A router in cluster mode (config.replicated): it has no engine of its own.
  explicit Router(const RouterConfig& config);
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  std::size_t index() const { return config_.index; }
  std::size_t shards() const { return config_.shards; }
  // The engine of this shard (not in cluster mode).
  Engine& engine() { return *engine_; }
  // Where engine requests go in cluster mode: the endpoint after the last shard.
  std::size_t replicated_endpoint() const { return config_.shards; }

  // A new session id owned by this shard: the tag, then sequence * shards + index, sequence
  // from 1.
  SessionId new_session_id();
  std::size_t owner_of(SessionId session) const { return session_owner(session, config_.shards); }
  // The shard whose engine owns the key of an engine command (the replicated endpoint in
  // cluster mode).
  std::size_t shard_of(const Request& request) const;

  // ---- a session owned by this shard ---------------------------------------------------------
  // Its request: an engine command goes to the engine that owns the key, kStats to every engine.
  void submit(Instant now, SessionId session, const Request& request);
  // Withdraws its parked request, if any (an HTTP client left its long poll): a kCancelled event
  // follows when the engine dropped it; when a grant won the race its reply comes as usual.
  void cancel(Instant now, SessionId session);
  // It closed: the close notices go out and its routing state is forgotten. Its request in
  // flight, if any, still ends in exactly one event (a reply or a cancellation).
  void close(Instant now, SessionId session);
  // The driver wrote `frames` of the session's signal frames to its peer.
  void signals_written(SessionId session, std::size_t frames);

  // Whether `command` can leave state of its session in an engine (a holder, a waiter, a
  // two-phase record): only then must that engine hear of the session's close.
  static bool leaves_session_state(Command command);

  // ---- any shard -----------------------------------------------------------------------------
  void receive(Instant now, RouterMessage message);
  // The engine's deadlines (leases, wait timeouts, GC) due at `now` (none in cluster mode: the
  // leader proposes them).
  void tick(Instant now);
  std::optional<Instant> next_wake() const {
    return engine_ != nullptr ? engine_->next_wake() : std::nullopt;
  }

  // ---- outputs -------------------------------------------------------------------------------
  std::vector<Envelope> take_outbox();
  std::vector<SessionEvent> take_events();
  bool idle() const { return outbox_.empty() && events_.empty(); }

 private:
  struct Route {
    std::vector<bool> touched;  // shards sent an engine request
    std::size_t target = 0;     // the shard of the last engine request
    bool listened = false;      // it subscribed to signals: the hub must hear of its close
  };
  struct StatsGather {
    std::size_t parts_left = 0;
    StatsSnapshot snapshot;
  };

  void run_engine_request(Instant now, SessionId session, const Request& request);
  void run_signal_request(SessionId session, const Request& request);
  // A signal's frames and slow consumers, to their sessions' owners.
  void fan_out(SignalFanout& fanout);
  // Whether `session`, owned here, has listened and not closed. A signal planned before its
  // close reached the hub may still bring it frames; they are dropped.
  bool listened(SessionId session) const;
  void close_here(Instant now, SessionId session);
  void cancel_here(Instant now, SessionId session);
  void stats_here(Instant now, SessionId session);
  void add_stats_part(SessionId session, StatsSnapshot&& part);
  // Sends the engine's deliveries, and the losses it reports, to their sessions' owners.
  void dispatch(std::vector<Delivery>& deliveries);
  // A message for the owner of `session`: an event here when that is this shard.
  void to_owner(SessionId session, RouterMessage message);
  void send(std::size_t to, RouterMessage message);
  void observe(const Request* request, const Reply* reply, const std::vector<Delivery>& out);

  // The endpoints a session can touch: the shards, or the replicated endpoint alone.
  std::size_t endpoints() const { return config_.replicated ? config_.shards + 1 : config_.shards; }

  RouterConfig config_;
  Engine* engine_;  // null in cluster mode
  EngineObserver* observer_;
  std::uint64_t next_sequence_ = 1;
  std::unordered_map<std::uint64_t, Route> routes_;       // sessions owned here, by id
  std::unordered_map<std::uint64_t, StatsGather> stats_;  // stats requests being gathered
  std::vector<Delivery> scratch_;
  SignalFanout fanout_;
  std::vector<std::vector<SessionId>> frames_by_shard_;  // fan_out()'s, kept for their capacity
  std::vector<Envelope> outbox_;
  std::vector<SessionEvent> events_;
  bool closed_since_take_ = false;  // close() ran since take_events(): check pushed events
};

}  // namespace turnstile::core
