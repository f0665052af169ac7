// HttpApi: one shard's HTTP REST API (docs/http-api.md), from a request its driver parsed off a
// connection to the response it writes back. Every decision between those two is made here, once,
// for both drivers:
//
//   turnstiled (net/http_server.cc)  evhttp requests in, responses out, the shards' mailboxes;
//   turnstile-sim (sim/server_http.cc)  simulated HTTP clients, messages through its queue.
//
// What it decides, in this order (reference 3.1's handler order): the CORS headers and a
// preflight's 204; the route (404, or 405 with Allow); the per-IP rate limit (429); the bearer
// token (401, answered kAuthFailureDelay later, so a stranger cannot try tokens quickly); then the
// route itself:
//  * probes (/health, /ready, /v1/openapi.json), answered at once;
//  * one-shot requests under a router session of their own: stats and metrics (a stats request to
//    every engine), readindex (a barrier through the log, cluster mode only) and a signal publish;
//  * session operations (create, delete, ping and every lock, semaphore and read-write call),
//    through the shard's HttpSessionRouter (core/http_session_router.h);
//  * requests on one key (check, inspect, force-release) under a session of their own;
//  * the admin routes: the admin token (403 when off, 401 after the delay), force-release, and
//    membership changes, which the host runs on its cluster node (HttpApiHost::change_membership;
//    the outcome comes back through admin_done).
// The two stream routes (GET /v1/signals, GET /v1/sessions/{id}/events) pass admission here and
// are then handed back to the driver (handle returns them), which runs the stream.
//
// Inputs: handle (a request, under a ticket from new_ticket), client_left, on_session_event (the
// router's events for sessions owns() names), receive (another shard's message), admin_done, and
// time (tick at next_deadline, reap at the desk's sweep interval). Outputs, taken by the driver
// after each input: responses (take_responses; each carries its headers, its content type and
// its metric labels), messages for other shards (take_outbox) and the watch events of session
// event streams (take_watch_events). Engine requests go into the Router given at construction;
// the driver drains it as usual.
//
// Rules:
//  * Every ticket handed to handle gets exactly one response, unless handle returned it as a
//    stream or its client left first (client_left); then it gets none.
//  * A response's headers are all it needs: CORS, Allow, Cache-Control and X-Dflockd-Leader (a
//    503 not_leader in cluster mode, written here and nowhere else).
//  * A force-release is reported to the host (force_released) when the engine answers, whether or
//    not its client is still there.
//
// Thread affinity: one HttpApi belongs to its shard's thread, as its HttpSessionRouter.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/http_codec.h"
#include "core/http_session_router.h"
#include "core/random.h"
#include "core/router.h"
#include "core/stats.h"
#include "core/time.h"

namespace turnstile::core {

// A wrong or missing token is answered after this long (as TCP's auth failure).
inline constexpr Duration kAuthFailureDelay = Duration::milliseconds(100);
inline constexpr std::string_view kHttpJsonType = "application/json";
inline constexpr std::string_view kHttpMetricsType = "text/plain; version=0.0.4; charset=utf-8";

// A request as its driver parsed it.
struct HttpApiRequest {
  HttpTicket ticket = 0;            // from HttpApi::new_ticket
  std::string_view method = "GET";  // "GET", "POST", ... ("OTHER" for the rest): static
  std::string path = "/";           // percent-encoded, without the query
  std::string query;                // without the '?'
  std::string body;                 // at most 2 × kHttpBodyMax bytes
  std::optional<std::string> authorization;
  std::optional<std::string> session;  // X-Dflockd-Session
  std::optional<std::string> origin;
  bool preflight = false;  // Access-Control-Request-Method is present
  std::string peer_address = "unknown";
  std::uint16_t peer_port = 0;
};

// The response to a request held on this shard.
struct HttpApiResponse {
  HttpTicket ticket = 0;
  HttpResponse response;
  std::string_view content_type = kHttpJsonType;
  std::vector<std::pair<std::string, std::string>> headers;
  // Labels for the metrics (static strings: a route pattern, "unmatched" or "preflight"; a
  // method), and when the request came.
  std::string_view route = "unmatched";
  std::string_view method = "GET";
  Instant started;
};

// A membership change an admin route asks for (cluster mode).
struct MembershipChange {
  bool transfer = false;  // hand leadership to the most up-to-date other voter
  std::optional<AdminVoterAdd> add;
  std::uint64_t remove_id = 0;  // a voter to remove (neither transfer nor add)
};

// What an HttpApi needs of the process around it.
class HttpApiHost {
 public:
  virtual ~HttpApiHost() = default;
  // The per-IP rate limit, shared by every shard: false when `ip` is over it.
  virtual bool rate_allow(Instant now, const std::string& ip) = 0;
  virtual bool starting() const = 0;      // /health answers "starting"
  virtual bool cluster_mode() const = 0;  // readindex and the membership routes need it
  virtual bool leader_known() const = 0;  // always true on a single node
  // The `connections` a stats body reports: TCP connections and live HTTP sessions.
  virtual std::int64_t connections() const = 0;
  virtual std::string metrics_text(const StatsSnapshot& snapshot, bool ready) = 0;
  virtual std::string_view openapi_json() const = 0;
  // A request refused for its token (counted and logged by the host), on `route`.
  virtual void auth_failed(const HttpApiRequest& request, std::string_view route) = 0;
  // The engine answered a force-release `peer` (host:port) asked for.
  virtual void force_released(const std::string& peer, const Request& request,
                              const Reply& reply) = 0;
  // Runs `change` on the cluster node; its outcome comes back as admin_done(ticket, ...).
  virtual void change_membership(HttpTicket ticket, const MembershipChange& change) = 0;
};

struct HttpApiConfig {
  std::optional<std::string> auth_token;   // --auth-token
  std::optional<std::string> admin_token;  // --admin-token
  std::string cors_allowed_origins;        // --http-cors-allowed-origins
};

class HttpApi {
 public:
  // `desk` and `router` are this shard's, `host` and `random` (session handles are capabilities)
  // outlive this.
  HttpApi(const HttpApiConfig& config, HttpSessionRouter& desk, Router& router, HttpApiHost& host,
          RandomSource& random);
  HttpApi(const HttpApi&) = delete;
  HttpApi& operator=(const HttpApi&) = delete;

  HttpTicket new_ticket() { return desk_.new_ticket(); }

  // A stream route whose request passed admission: the driver runs it (its ticket is its own).
  struct StreamRoute {
    const HttpEndpointSpec* spec = nullptr;
    std::vector<std::string> params;
    std::vector<std::pair<std::string, std::string>> headers;  // CORS, for its response
  };
  std::optional<StreamRoute> handle(Instant now, const HttpApiRequest& request);
  // The client of `ticket` left: whoever would answer it is told it need not (a long poll is
  // withdrawn; an engine reply still comes and answers nobody). Unknown tickets are ignored.
  void client_left(Instant now, HttpTicket ticket);
  // A router event for a session owns() names.
  bool owns(SessionId session) const;
  void on_session_event(Instant now, const SessionEvent& event);
  void receive(Instant now, HttpMessage message) { desk_.receive(now, std::move(message)); }
  void admin_done(HttpTicket ticket, const AdminChangeOutcome& outcome);
  // Answers the 401s whose delay is over; next_deadline is when the next one is.
  void tick(Instant now);
  std::optional<Instant> next_deadline() const;
  // From now on /ready says draining, and creates, submits, watches and publishes are refused.
  void begin_drain();
  bool draining() const { return draining_; }
  bool ready() const { return !draining_ && host_.leader_known(); }

  // ---- outputs -------------------------------------------------------------------------------
  // Responses in the order they were decided. A desk reply for a ticket handle did not take (a
  // session event stream's watch) comes with its ticket and the route "unmatched".
  std::vector<HttpApiResponse> take_responses();
  std::vector<HttpEnvelope> take_outbox() { return desk_.take_outbox(); }
  std::vector<HttpWatchEvent> take_watch_events() { return desk_.take_watch_events(); }
  HttpSessionRouter& desk() { return desk_; }
  // Requests waiting for an answer (not streams): for tests and the simulator's final check.
  std::size_t open() const { return open_.size(); }

 private:
  enum class Kind { kImmediate, kSession, kStats, kMetrics, kReadIndex, kSignal, kKey, kAdmin };
  struct Open {
    Kind kind = Kind::kImmediate;
    std::string_view route;
    std::string_view method;
    Instant started;
    std::vector<std::pair<std::string, std::string>> cors;
    SessionId session;  // one-shots and key requests: their own session
  };
  struct KeyRequest {
    HttpTicket ticket = 0;  // 0 once its client left
    Request request;
    std::string admin_peer;  // a force-release: who asked (host:port)
  };

  void respond(HttpTicket ticket, HttpResponse response,
               std::vector<std::pair<std::string, std::string>> headers = {},
               std::string_view content_type = kHttpJsonType);
  void respond_error(HttpTicket ticket, int code, std::string_view error,
                     std::string_view detail = {});
  // Admission: CORS, route, rate limit, token. The matched route, or nullopt once answered.
  std::optional<HttpRouteMatch> admit(Instant now, const HttpApiRequest& request);
  std::optional<StreamRoute> dispatch(Instant now, const HttpApiRequest& request,
                                      HttpRouteMatch matched);
  void reply_probe(HttpTicket ticket, HttpEndpoint endpoint);
  void run_one_shot(Instant now, HttpTicket ticket, Kind kind, const Request& request);
  void run_session_request(Instant now, const HttpApiRequest& request, const HttpEndpointSpec& spec,
                           const std::string& param);
  void run_key_request(Instant now, const HttpApiRequest& request, const HttpEndpointSpec& spec,
                       const std::string& key, std::string admin_peer);
  void run_admin(Instant now, const HttpApiRequest& request, const HttpEndpointSpec& spec,
                 const std::vector<std::string>& params);
  void unauthorized_later(Instant now, const HttpApiRequest& request);
  void finish_one_shot(HttpTicket ticket, Kind kind, const SessionEvent& event);
  void finish_key(KeyRequest& key, const Reply& reply);

  HttpSessionRouter& desk_;
  Router& router_;
  HttpApiHost& host_;
  RandomSource& random_;
  HttpApiConfig config_;
  HttpCors cors_;
  bool draining_ = false;
  std::unordered_map<HttpTicket, Open> open_;
  // One-shot requests' own sessions -> their tickets (erased when their client leaves).
  std::unordered_map<std::uint64_t, HttpTicket> one_shots_;
  // Key requests by their own session, until the engine's reply (kept when the client leaves: a
  // force-release is reported all the same).
  std::unordered_map<std::uint64_t, KeyRequest> key_requests_;
  // 401s waiting out their delay: when each is due, in ticket order.
  std::map<HttpTicket, Instant> delayed_;
  std::vector<HttpApiResponse> responses_;
};

}  // namespace turnstile::core
