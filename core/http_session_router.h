// HttpSessionRouter: one shard's part of the HTTP API's session operations, from the client's
// request to the session's home shard and back. It is to HTTP sessions what core::Router is to a
// session's engine requests, and it sits on top of that Router.
//
// An HTTP session is homed on the shard that created it: its SessionId comes from that shard's
// Router, and its handle (the 32 hex digits clients see) is drawn so that home_of(handle) names
// that shard. Its state (core::HttpSessions: serialization, lastSeen, the reaper, what a delete or
// a departed client does to a long poll) lives on the home shard only. A request may arrive on a
// connection held by any shard (its origin): the origin hands it here under a ticket; when the
// session is homed elsewhere it travels to the home shard (http_message::Forward), runs there as
// if its client were connected there, and its answer travels back (http_message::Answer). A client
// that leaves is reported to wherever its request is (abandon; http_message::Abandon); an engine
// reply that was already on its way back when its client left is given back at home
// (http_message::GiveBack), so a grant nobody received never pins a key.
//
// Every decision of that path is made here, once; the drivers only move bytes and messages:
//
//   turnstiled (net/http_server.cc)   evhttp requests in, HTTP responses out, messages through
//                                     the shards' mailboxes;
//   turnstile-sim                     simulated HTTP clients, messages through its event queue.
//
// Inputs: a client's request (create, submit, remove, ping, abandon), a message from another
// shard (receive), the router's events for sessions homed here (on_session_event), time (reap).
// Outputs, taken by the driver after each input: replies for tickets held on this shard
// (take_replies: an HTTP status and a JSON body, empty for 204) and messages for other shards
// (take_outbox: deliver each to the HttpSessionRouter of `to`, in order per pair of shards).
// Requests, cancels and close notices for the engines go into the Router given at construction;
// the driver drains it as usual.
//
// Rules:
//  * Tickets are unique across shards (new_ticket: ≡ index + 1 modulo the shard count), so a
//    forwarded request keeps its ticket on its session's home shard.
//  * Every ticket handed to submit, remove or ping gets exactly one reply, unless it is
//    abandoned first; an abandoned ticket gets none. Every Forward gets exactly one Answer (a
//    withdrawn one when the Abandon overtook it), so the origin forgets every ticket.
//  * A remove's effects (the long poll's 410, the close notices) are issued before its 204.
//  * While draining, creates, submits and watches are refused with 503 `draining`, on the origin
//    and on the home shard alike; pings and deletes still work.
//  * Lost slots (docs/http-api.md, "Lost slots"): a kLost router event for a session homed here
//    is remembered by its HttpSessions; the session's next reply that has a body carries what it
//    lost since its previous one ("lost":[...]), and its watcher, if any, hears of it at once.
//  * A watch (GET /v1/sessions/{id}/events, watch()) is a ticket that gets either one reply (410
//    session_gone, 503 draining) or a kOpen watch event, then kLost events, then at most one
//    kEnd (none once abandoned), all taken with take_watch_events on the origin. A forwarded
//    watch's events travel back as http_message::Watched, in order; its Answer is the kEnd, or
//    the refusal, or a withdrawn Answer after an Abandon.
//
// Thread affinity: one HttpSessionRouter belongs to its shard's thread; messages cross threads
// only through the driver.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "core/http_codec.h"
#include "core/http_sessions.h"
#include "core/protocol.h"
#include "core/random.h"
#include "core/router.h"
#include "core/time.h"
#include "core/types.h"

namespace turnstile::core {

// The messages between shards' HttpSessionRouters.
namespace http_message {
enum class Op : std::uint8_t { kSubmit, kRemove, kPing, kWatch };
struct Forward {  // to the session's home shard
  std::size_t origin = 0;
  HttpTicket ticket = 0;
  Op op = Op::kSubmit;
  std::string handle;
  Request request;  // kSubmit
  Instant started;  // when the origin received it
};
struct Answer {  // to the origin: exactly one for every Forward
  HttpTicket ticket = 0;
  int code = 0;  // 0: no answer, the request was withdrawn (its client left)
  std::string body;
  Request request;             // the forwarded request (kSubmit)
  std::optional<Reply> reply;  // the engine's reply the body renders, if it is one
};
struct Abandon {  // to the home shard: the client of a forwarded request left
  HttpTicket ticket = 0;
};
struct GiveBack {  // to the home shard: an engine reply whose client had left when it came back
  std::string handle;
  Request request;
  Reply reply;
};
struct Watched {  // to the origin: an event of a forwarded watch (a kEnd ends it, as an Answer)
  HttpWatchEvent event;
};
}  // namespace http_message

using HttpMessage = std::variant<http_message::Forward, http_message::Answer, http_message::Abandon,
                                 http_message::GiveBack, http_message::Watched>;

// A message for the HttpSessionRouter of shard `to`.
struct HttpEnvelope {
  std::size_t to = 0;
  HttpMessage message;
};

// The response for a ticket held on this shard.
struct HttpReply {
  HttpTicket ticket = 0;
  HttpResponse outcome;
};

class HttpSessionRouter {
 public:
  // `router` is this shard's, `quota` as for HttpSessions (may be null); both outlive this.
  HttpSessionRouter(const HttpSessionsConfig& config, HttpSessionQuota* quota, Router& router);
  HttpSessionRouter(const HttpSessionRouter&) = delete;
  HttpSessionRouter& operator=(const HttpSessionRouter&) = delete;

  // The shard a session handle (32 lowercase hex digits) is homed on, of `shards`: its first
  // eight hex digits as a number (random bits, so sessions spread evenly), modulo `shards`.
  static std::size_t home_of(std::string_view handle, std::size_t shards);

  // A ticket for a client's request held on this shard, unique across shards.
  HttpTicket new_ticket();

  // From now on, creates and submits are refused with 503 `draining`.
  void begin_drain() { draining_ = true; }
  bool draining() const { return draining_; }

  // ---- a client's requests, on the shard that holds its connection ---------------------------
  // POST /session: a new session homed here (the handle drawn from `random`), with the stable ref
  // of its body (empty: none), or 503 for draining and the caps. Answered at once.
  HttpResponse create(Instant now, RandomSource& random, const std::string& ip,
                      const std::string& stable_ref = {});
  // An engine command on the session `handle` (decoded and validated by the driver); its reply
  // comes later under `ticket`.
  void submit(Instant now, HttpTicket ticket, const std::string& handle, const Request& request);
  // DELETE /session/{id} (204, or 410 session_gone), under `ticket`.
  void remove(Instant now, HttpTicket ticket, const std::string& handle);
  // POST /session/{id}/ping (204, or 410 session_gone), under `ticket`.
  void ping(Instant now, HttpTicket ticket, const std::string& handle);
  // GET /v1/sessions/{id}/events, under `ticket`: watch events (take_watch_events), or one reply
  // (410 session_gone, 503 draining). abandon(ticket) stops it.
  void watch(Instant now, HttpTicket ticket, const std::string& handle);
  // The client of `ticket` left; unknown or answered tickets are ignored.
  void abandon(Instant now, HttpTicket ticket);

  // ---- any shard -----------------------------------------------------------------------------
  void receive(Instant now, HttpMessage message);
  // A router event (kReply, kParked, kCancelled, kLost) for a session homed here.
  void on_session_event(Instant now, const SessionEvent& event);
  bool owns(SessionId session) const { return sessions_.owns(session); }
  // Closes the sessions idle for too long (HttpSessions::reap); how many.
  std::size_t reap(Instant now);
  Duration sweep_interval() const { return sessions_.sweep_interval(); }
  // Live sessions homed here.
  std::size_t live() const { return sessions_.live(); }
  // Sessions known here (live, or closed with work in flight): for tests and the simulator.
  std::size_t known() const { return sessions_.known(); }
  // Forwarded requests whose Answer has not come back (their clients waiting, or gone).
  std::size_t awaiting_answers() const { return forwarded_out_.size(); }

  // ---- outputs -------------------------------------------------------------------------------
  std::vector<HttpReply> take_replies();
  std::vector<HttpEnvelope> take_outbox();
  // Events of the watches whose tickets are held on this shard, in order.
  std::vector<HttpWatchEvent> take_watch_events();

 private:
  // Runs a request whose session is homed here; `origin` is the shard that holds its ticket,
  // `started` when its client sent it.
  void run_here(Instant now, Instant started, std::size_t origin, http_message::Op op,
                HttpTicket ticket, const std::string& handle, const Request& request);
  // Hands the request to the home shard of `handle`; false when that is this shard.
  bool forward_if_elsewhere(const http_message::Forward& forward);
  // The response for `ticket`, whose client is on shard `origin`.
  // `request` and `reply` when it renders an engine reply (a grant may have to be given back).
  void respond(std::size_t origin, HttpTicket ticket, HttpResponse outcome,
               const Request& request = {}, const std::optional<Reply>& reply = std::nullopt);
  void send(std::size_t to, HttpMessage message);
  // Carries HttpSessions' effects out: answers, routes, close notices, cancels, watch events.
  void collect(Instant now);
  // A watch event for the watch `event.ticket` running here, to wherever its client is.
  void deliver_watch_event(HttpWatchEvent event);

  HttpSessionsConfig config_;
  Router& router_;
  HttpSessions sessions_;
  bool draining_ = false;
  HttpTicket next_ticket_;
  // Home side: tickets of forwarded requests running here -> their origin shard.
  std::unordered_map<HttpTicket, std::size_t> forwarded_in_;
  // Origin side: tickets of requests this shard forwarded, until their Answer comes back.
  struct Out {
    std::size_t home = 0;
    std::string handle;
    bool abandoned = false;  // the client left: the answer goes nowhere
  };
  std::unordered_map<HttpTicket, Out> forwarded_out_;
  // Home side: the watches running here (their tickets) -> the shard that holds their client.
  std::unordered_map<HttpTicket, std::size_t> watches_;
  std::vector<HttpReply> replies_;
  std::vector<HttpEnvelope> outbox_;
  std::vector<HttpWatchEvent> watch_events_;
};

}  // namespace turnstile::core
