// HttpSessions: the HTTP API's sessions (reference 3.3, 3.6), independent of sockets and
// threads. An HTTP session stands in for a TCP connection: it has a SessionId from the same space,
// its requests reach the same engines and wait in the same FIFO queues. This type makes every
// decision about a session's life; the driver (net/http_server.cc) moves requests, engine
// replies and time in, and carries the effects out:
//
//   submit(ticket, request)  -->  [per-session queue]  --routes-->  engine
//   engine reply (on_reply)  -->  answers (ticket, reply)  -->  HTTP response
//
// Rules:
//  * Requests on one session are serialized: one is in flight at a time, the rest wait in
//    arrival order (dflockd's per-session mutex). A session has at most one parked request, as
//    the engine requires.
//  * lastSeen is refreshed on every lookup (submit, ping) and when a request finishes. A
//    session idle for longer than 2 x idle_timeout with nothing in flight or queued is reaped by
//    reap(), which the driver calls every sweep_interval(). A zero idle timeout never reaps.
//  * Deleting (or reaping) a session closes it at once: every queued request and the request in
//    flight are answered `session_gone` immediately (a long poll wakes at once); the driver then
//    sends the engines the same close notice as for a TCP disconnect, which drops the parked
//    request, the waiters and two-phase records, and (with auto-release) the holdings.
//  * A client that goes away (abandon) loses its request: a queued one is dropped; one in flight
//    is marked abandoned, and a parked one is cancelled in its engine (the driver routes a
//    cancel). A reply that reaches an abandoned or closed request is never answered; a grant is
//    given back (released) so it goes to the next waiter, and a `queued` enqueue is followed by
//    a wait with timeout 0 whose grant, if any, is given back too (reference 3.6).
//  * Caps: sessions_max and sessions_per_ip_max (0 = unlimited) are checked on create, by the
//    HttpSessions' own SessionCaps or by an HttpSessionQuota it shares with the HttpSessions of
//    other threads (a driver with one HttpSessions per thread: the caps are for the process).
//  * Lost slots (docs/http-api.md, "Lost slots"): a slot the session lost without releasing it
//    (on_lost) is remembered until the session's next answer with a body takes it (take_lost);
//    at most kLostRemembered of them, the oldest dropped first and counted. It also goes at once
//    to the session's watcher, if it has one: the ticket of one event stream (watch), whose
//    events the driver takes (take_watch_events). A new watch replaces the watcher (the old one
//    ends, "replaced"); a close ends it ("session_gone"); an abandoned watch ticket just stops.
//    A watch refreshes lastSeen once, when it starts; the stream does not keep the session alive.
//
// Thread affinity: one thread owns an HttpSessions; it has no internal locking.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/loss.h"
#include "core/protocol.h"
#include "core/time.h"
#include "core/types.h"

namespace turnstile::core {

struct HttpSessionsConfig {
  Duration idle_timeout = Duration::seconds(20);  // zero: never reaped
  std::int64_t sessions_max = 0;                  // 0 = unlimited
  std::int64_t sessions_per_ip_max = 0;           // 0 = unlimited
};

// One HTTP request, as the driver names it. Never 0.
using HttpTicket = std::uint64_t;

enum class HttpCreate : std::uint8_t { kOk, kMaxSessions, kMaxSessionsPerIp };

// Counts live sessions against the caps (0 = unlimited). Every decision about the caps is here;
// a driver that shares one quota between threads only adds a lock around it.
class HttpSessionQuota {
 public:
  // Takes a place for a new session of a client at `ip`, or names the cap that refuses it.
  virtual HttpCreate take(const std::string& ip) = 0;
  // A session of `ip` closed.
  virtual void give_back(const std::string& ip) = 0;

 protected:
  ~HttpSessionQuota() = default;
};

class SessionCaps final : public HttpSessionQuota {
 public:
  SessionCaps(std::int64_t sessions_max, std::int64_t sessions_per_ip_max)
      : sessions_max_(sessions_max), sessions_per_ip_max_(sessions_per_ip_max) {}
  HttpCreate take(const std::string& ip) override;
  void give_back(const std::string& ip) override;
  std::int64_t live() const { return live_; }

 private:
  std::int64_t sessions_max_;
  std::int64_t sessions_per_ip_max_;
  std::int64_t live_ = 0;
  std::unordered_map<std::string, std::int64_t> per_ip_;
};

// What the driver writes back for a ticket: the engine's reply, or 410 session_gone.
struct HttpAnswer {
  HttpTicket ticket = 0;
  bool session_gone = false;
  Reply reply;  // when !session_gone
  Request request;
  SessionId session = {};  // whose request it answers (take_lost)
};

// The slots a session lost since they were last taken, oldest first, and how many more it lost
// that it no longer remembered (kLostRemembered).
struct HttpLosses {
  std::vector<LostSlot> slots;
  std::uint64_t dropped = 0;
};

// An event for the watcher of a session (an event stream, GET /v1/sessions/{id}/events).
struct HttpWatchEvent {
  enum class Kind : std::uint8_t {
    kOpen,  // the watch is in place: what the session loses from now on comes to it
    kLost,  // `slot` was lost
    kEnd,   // the watch is over (`reason`: "session_gone" or "replaced"); nothing follows
  };
  HttpTicket ticket = 0;
  Kind kind = Kind::kOpen;
  LostSlot slot = {};       // kLost
  std::string reason = {};  // kEnd
};

// A request to route to the engine that owns its key, on behalf of `session`.
struct HttpRoute {
  SessionId session;
  Request request;
};

class HttpSessions {
 public:
  // The caps of `config` are counted by `shared_quota` when given (it must outlive this), else
  // by a SessionCaps of this HttpSessions alone.
  explicit HttpSessions(const HttpSessionsConfig& config, HttpSessionQuota* shared_quota = nullptr);
  ~HttpSessions();
  HttpSessions(const HttpSessions&) = delete;
  HttpSessions& operator=(const HttpSessions&) = delete;

  // A new session with the driver's `id` (from the engines' SessionId space) and `handle` (the
  // 32-hex id clients see), for a client at `ip`, with its stable ref (empty: none), which every
  // engine request of the session carries (Request::ref).
  HttpCreate create(Instant now, SessionId id, const std::string& handle, const std::string& ip,
                    const std::string& stable_ref = {});
  // The live session named `handle`; refreshes its lastSeen. nullopt when unknown or closed.
  std::optional<SessionId> touch(Instant now, std::string_view handle);
  // Queues `request` (an engine command) on the live session `handle`; false when the session
  // is unknown or closed (answer 410 session_gone).
  bool submit(Instant now, std::string_view handle, HttpTicket ticket, const Request& request);
  // Closes the live session `handle` (DELETE); false when unknown or already closed.
  bool remove(std::string_view handle);
  // The client of `ticket` went away; unknown or finished tickets are ignored.
  void abandon(HttpTicket ticket);
  // An engine reply that reached no client after all (its answer was on its way to another thread
  // when the client left): a grant is given back, a queued enqueue withdrawn, as for an abandoned
  // request. Ignored when the session `handle` is forgotten.
  void give_back(std::string_view handle, const Request& request, const Reply& reply);

  // Engine outcomes for the request in flight of `session` (unknown sessions are ignored).
  void on_parked(SessionId session);
  void on_reply(Instant now, SessionId session, const Reply& reply);
  // The engine dropped the request in flight unanswered (cancelled, or the session closed).
  void on_cancelled(SessionId session);

  // ---- lost slots
  static constexpr std::size_t kLostRemembered = 32;
  // `session` lost `slot` (ignored for an unknown or closed session).
  void on_lost(SessionId session, const LostSlot& slot);
  // What `session` lost since the last call, and forgets it.
  HttpLosses take_lost(SessionId session);
  // Makes `ticket` the watcher of the live session `handle` (a kOpen event; the previous
  // watcher's kEnd "replaced" first); false when the session is unknown or closed (410). The
  // watch ends with the session, or when a later watch replaces it; abandon(ticket) stops it
  // without an event.
  bool watch(Instant now, std::string_view handle, HttpTicket ticket);

  // Closes every live session idle for more than 2 x idle_timeout with nothing in flight or
  // queued. Returns how many.
  std::size_t reap(Instant now);
  // How often the driver calls reap(): min(idle timeout, 30 s), or 10 s without a timeout.
  Duration sweep_interval() const;

  // Effects, in order; the driver takes them after each call.
  std::vector<HttpAnswer> take_answers();
  std::vector<HttpRoute> take_routes();
  // Sessions just closed: send the engines they touched a close notice.
  std::vector<SessionId> take_closed();
  // Sessions whose parked request must be cancelled in the engine that holds it.
  std::vector<SessionId> take_cancels();
  std::vector<HttpWatchEvent> take_watch_events();

  bool owns(SessionId session) const;
  std::size_t live() const { return live_; }
  // Sessions known (live, or closed with work still in flight): for tests.
  std::size_t known() const;

 private:
  struct Session;
  void pump(Session& session);
  void close(Session& session);
  void maybe_forget(Session& session);
  void give_back(Session& session, const Request& request, const Reply& reply);

  HttpSessionsConfig config_;
  std::unordered_map<std::string, std::unique_ptr<Session>> by_handle_;
  std::unordered_map<std::uint64_t, Session*> by_id_;
  std::unordered_map<HttpTicket, Session*> by_ticket_;
  std::unordered_map<HttpTicket, Session*> watchers_;  // a watch's ticket -> its live session
  SessionCaps own_caps_;
  HttpSessionQuota* quota_;  // &own_caps_ or the shared quota
  std::size_t live_ = 0;     // this HttpSessions' live sessions
  std::vector<HttpAnswer> answers_;
  std::vector<HttpRoute> routes_;
  std::vector<SessionId> closed_;
  std::vector<SessionId> cancels_;
  std::vector<HttpWatchEvent> watch_events_;
};

// A token bucket per client IP (reference 3.2): `rate` tokens per second up to `burst`; a new IP
// starts with burst - 1 tokens (its first request took one). Buckets idle for 10 minutes are
// dropped by sweep(). Tokens are counted in nanotokens, so refill is exact integer arithmetic.
class RateLimiter {
 public:
  RateLimiter(std::int64_t rate_per_s, std::int64_t burst);
  // True when `ip` may make a request at `now` (and takes a token).
  bool allow(Instant now, const std::string& ip);
  // Drops buckets untouched for 10 minutes; returns how many.
  std::size_t sweep(Instant now);
  std::size_t buckets() const { return buckets_.size(); }

 private:
  struct Bucket {
    std::int64_t nanotokens = 0;  // tokens x 1e9
    Instant refilled;
  };
  std::int64_t rate_per_s_;
  std::int64_t burst_;
  std::unordered_map<std::string, Bucket> buckets_;
};

// Checks an Authorization header against the bearer secret (reference 3.2): scheme matched
// case-insensitively, value trimmed, compared in constant time.
bool bearer_matches(std::string_view header, std::string_view secret);

}  // namespace turnstile::core
