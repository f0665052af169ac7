// HttpServer: the HTTP REST API (docs/http-api.md; reference section 3) on libevent's evhttp.
//
// Every shard runs one, on its own event_base, and they all accept from the one listening
// socket, so HTTP connections spread over the shards' threads as TCP connections do. A request
// is parsed and validated on the shard that holds its connection; a session operation then goes
// to that shard's core::HttpSessionRouter, which decides everything else: which shard a session
// is homed on, forwarding a request there and its answer back, the session's life (reaper,
// serialization, what a delete or a departed client does to a long poll), and the route of its
// engine requests through the home shard's core::Router (ShardService), as for a TCP connection.
// The session caps are counted by a core::SessionCaps and the rate limit by a core::RateLimiter
// that all shards share (HttpShared, behind locks). This class parses and validates requests,
// writes the responses, and moves bytes, messages and time.
//
// Signals (docs/http-api.md, "Signals"): a POST publishes through the shard's router under a
// session id of its own, answered by the router's reply at once. A GET /v1/signals stream is one
// router session that listens to one pattern: its frames are written as Server-Sent Events and
// reported to the router once they have left the connection's output buffer, so the hub's
// --signal-queue closes a stream that does not read, as it closes a TCP listener. The stream ends
// (router().close, once) when its client leaves, a write makes no progress for 30 s, the hub
// names it a slow consumer, or the server drains or stops.
//
// Session event streams (docs/http-api.md, "Lost slots"): GET /v1/sessions/{id}/events is a
// watch of core::HttpSessionRouter (the session may live on another shard); its events are
// written as Server-Sent Events on a stream built as a signal stream is (the ping interval, the
// write deadline, the output bound), which ends when the watch does (the session closed, or a
// newer stream replaced it) or as a signal stream ends; the desk is then told (abandon).
//
// Fence checks, inspection and force-release (docs/http-api.md) go to the engines under a
// request session of their own, as stats requests do; a force-release (admin token) is logged
// with who asked and what it freed, whether or not its client waited for the answer.
//
// Thread affinity: everything runs on the hosting shard's thread (construct and listen() on the
// main thread before the shard starts); HttpShared is for every shard's thread.
#pragma once

#include <event2/event.h>
#include <event2/http.h>
#include <openssl/ssl.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/http_codec.h"
#include "core/http_session_router.h"
#include "core/http_sessions.h"
#include "core/stats.h"
#include "net/crypto_random.h"
#include "net/http_shared.h"
#include "net/shard.h"

namespace turnstile::net {

class HttpServer final : public ShardService {
 public:
  HttpServer(Shard& host, SharedState& shared, HttpShared& http_shared);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds --http-host:--http-port and logs "HTTP API listening on ADDR (http|https)": the
  // listening socket, or -1 when it cannot (the reason is logged).
  static int open_listener(const Config& config, bool tls);
  // Serves the listening socket `fd` (its own descriptor: every shard's is a dup of one socket).
  bool listen(int fd);

  // ShardService: from the hosting shard.
  bool owns(core::SessionId session) const override;
  void on_session_event(core::Instant now, core::SessionEvent& event) override;
  void on_message(ServiceMessage& message) override;
  void begin_drain() override;
  void stop() override;  // closes the listener and every HTTP connection

 private:
  struct Pending;
  struct Stream;
  static void on_request(evhttp_request* request, void* self);
  static void on_connection_closed(evhttp_connection* connection, void* self);
  static void on_auth_delay(evutil_socket_t, short, void* self);
  static void on_sweep(evutil_socket_t, short, void* self);
  static void on_probe(evutil_socket_t, short, void* self);
  static bufferevent* make_tls_bufferevent(event_base* base, void* self);

  void handle(evhttp_request* request);
  // The peer's IP, counted against --http-max-connections-per-ip on a connection's first request;
  // nullopt once the request is answered 503 for being over it.
  std::optional<std::string> admit_peer(evhttp_request* request, std::string_view method,
                                        core::Instant started);
  // CORS headers for an allowed Origin; true when the request was a preflight, answered 204.
  bool answer_cors(evhttp_request* request, std::string_view method, core::Instant started);
  void fail(evhttp_request* request);
  void probe();
  void connection_closed(evhttp_connection* connection);
  void auth_delay_over(std::uint64_t ticket);
  // A 401, sent after kAuthFailureDelay (a guesser gets one try per delay per connection).
  void reply_unauthorized_later(evhttp_request* request, std::string_view route,
                                std::string_view method, core::Instant started);
  // The admin routes (cluster mode): membership changes, answered when the raft node is done.
  void handle_admin(evhttp_request* request, const core::HttpEndpointSpec& spec,
                    const std::vector<std::string>& params, std::string_view method,
                    core::Instant started);
  // The admin token: true when it is right; otherwise the request is answered (403 with the
  // routes off, 401 after the delay).
  bool admin_allowed(evhttp_request* request, const core::HttpEndpointSpec& spec,
                     std::string_view method, core::Instant started);
  // A membership change: hand leadership over, add a voter or remove one.
  struct MembershipChange {
    bool transfer = false;
    std::optional<core::AdminVoterAdd> add;
    std::uint64_t remove_id = 0;
  };
  // The change a request asks for, or nullopt once it is answered 400.
  std::optional<MembershipChange> decode_membership_change(evhttp_request* request,
                                                           const core::HttpEndpointSpec& spec,
                                                           const std::vector<std::string>& params,
                                                           std::string_view method,
                                                           core::Instant started);
  void run_membership_change(const MembershipChange& change, ClusterService::AdminDone done);
  void finish_admin(std::uint64_t ticket, const core::AdminChangeOutcome& outcome);
  // A fence check, an inspect or (`admin_peer` not empty: who asked) a force-release: the engine
  // request under a session of its own, answered from finish_key.
  void run_key_request(evhttp_request* request, const core::HttpEndpointSpec& spec,
                       const std::string& key, std::string_view method, core::Instant started,
                       std::string admin_peer = {});
  struct KeyRequest {
    std::uint64_t ticket = 0;  // its Pending; 0 once its client left
    core::Request request;
    std::string admin_peer;  // a force-release: who asked (host:port)
  };
  void finish_key(KeyRequest& key, const core::Reply& reply);
  void withdraw(std::uint64_t ticket, Pending& pending);
  void dispatch_route(evhttp_request* request, const core::HttpEndpointSpec& spec,
                      const std::vector<std::string>& params, std::string_view method,
                      core::Instant started);
  // GET /health, /ready, /openapi.json: answered at once.
  void reply_probe(evhttp_request* request, const core::HttpEndpointSpec& spec,
                   std::string_view method, core::Instant started);
  // GET /v1/stats, /metrics, /v1/readindex: one request under a session of its own (stats to
  // every engine, a barrier through the log), answered by its reply.
  void run_one_shot(evhttp_request* request, const core::HttpEndpointSpec& spec,
                    std::string_view method, core::Instant started);
  void create_session(evhttp_request* request, const core::HttpEndpointSpec& spec,
                      std::string_view method, core::Instant started);
  void delete_or_ping_session(evhttp_request* request, const core::HttpEndpointSpec& spec,
                              const std::string& handle, std::string_view method,
                              core::Instant started);
  void handle_session_request(evhttp_request* request, const core::HttpEndpointSpec& spec,
                              const std::string& key, std::string_view method,
                              core::Instant started);
  std::uint64_t add_pending(evhttp_request* request, Pending pending);
  void drop_pending(std::uint64_t ticket);
  // Carries the session router's effects out: responses for this shard's clients, messages for
  // other shards; and reports the live sessions' count.
  void flush();
  // A session operation under a new pending ticket: `run` hands it to desk_.
  template <typename Run>
  void run_session_request(evhttp_request* request, std::string_view route, std::string_view method,
                           core::Instant started, Run run);
  void finish_stats(std::uint64_t ticket, Pending& pending, const core::StatsSnapshot& snapshot);

  // ---- signals
  // POST /v1/signals/{channel}: a kSignal request under a fresh session id (a kSignal Pending).
  void publish_signal(evhttp_request* request, const core::HttpEndpointSpec& spec,
                      const std::string& channel, std::string_view method, core::Instant started);
  // GET /v1/signals: a kListen request for a new stream's session.
  void open_stream(evhttp_request* request, const core::HttpEndpointSpec& spec,
                   std::string_view method, core::Instant started);
  void on_stream_event(core::Instant now, Stream& stream, core::SessionEvent& event);
  // GET /v1/sessions/{id}/events: a stream for a watch of the session `handle`.
  void open_watch(evhttp_request* request, const core::HttpEndpointSpec& spec,
                  const std::string& handle, std::string_view method, core::Instant started);
  // The desk's answer to a watch: a refusal (`reply`), or its events.
  void refuse_watch(Stream& stream, const core::HttpResponse& outcome);
  void on_watch_event(core::HttpWatchEvent& event);
  // The listen was answered `ok`: the 200 head, `:ok`, the ping timer, the write deadline.
  void start_stream(Stream& stream);
  // A HEAD of a stream route whose request passed the GET's checks: 200 with the stream's headers,
  // no body, and no stream opened.
  void reply_stream_head(evhttp_request* request, std::string_view route, std::string_view method,
                         core::Instant started);
  // Hands `bytes` (`frames` of them signal frames) to the stream's connection; false when the
  // stream is gone (its connection failed) or over its output bound (it is then ending).
  bool write_stream(core::SessionId id, std::string_view bytes, std::size_t frames);
  // The stream's session leaves the router now; its HTTP side ends in end_streams_'s callback,
  // outside the router's event delivery: `abort` closes the connection, else the chunked reply
  // ends cleanly.
  void end_stream(Stream& stream, bool abort);
  void finish_ending_streams();
  // Forgets a stream whose connection is going away (its client left, or libevent failed it).
  void drop_stream(evhttp_connection* connection);
  static void on_stream_ping(evutil_socket_t, short, void* self);
  static void on_stream_drained(evhttp_connection* connection, void* self);
  static void on_end_streams(evutil_socket_t, short, void* self);
  // Every second: a stream whose connection took none of its waiting bytes for 30 s is closed
  // (the write deadline). True when one was.
  bool watch_streams(core::Instant now);
  static void on_stream_watch(evutil_socket_t, short, void* self);

  // `route` and `method` name static strings (a route pattern, "unmatched", "preflight"; a method
  // name): they label the metrics.
  void reply(evhttp_request* request, int code, std::string_view body, std::string_view route,
             std::string_view method, core::Instant started,
             const char* content_type = "application/json");
  void finish_read_index(std::uint64_t ticket, Pending& pending, const core::Reply& reply);
  void reply_to(Pending& pending, int code, const std::string& body);
  // The one place a core::HttpResponse is written: its code, its body and, when it names one, the
  // leader in X-Dflockd-Leader (a 503 not_leader in cluster mode).
  void reply_to(Pending& pending, const core::HttpResponse& response);
  void reply_error(evhttp_request* request, int code, const std::string& error,
                   const std::string& detail, std::string_view route, std::string_view method,
                   core::Instant started);
  // /ready and turnstile_ready: not draining, and in cluster mode a leader is known.
  bool ready() const;

  Shard& host_;
  SharedState& shared_;
  HttpShared& http_shared_;
  const Config& config_;
  evhttp* http_ = nullptr;
  event* sweep_ = nullptr;
  event* probe_ = nullptr;  // watches the sockets of waiting requests for a departed client
  CryptoRandom random_;     // session ids are capabilities too
  core::HttpSessionRouter desk_;
  std::int64_t live_reported_ = 0;  // desk_.live() as last added to SharedState
  core::HttpCors cors_;
  bool draining_ = false;
  bool stopped_ = false;
  bool flushing_ = false;
  // The request on_request is handling until it is answered or pending (fail() answers it).
  evhttp_request* unanswered_ = nullptr;
  core::Instant started_at_;
  core::Instant last_rate_sweep_;  // buckets idle 10 min are dropped every 5 min

  // Tickets come from desk_.new_ticket(): unique across shards.
  std::unordered_map<std::uint64_t, std::unique_ptr<Pending>> pending_;
  std::unordered_map<evhttp_connection*, std::vector<std::uint64_t>> by_connection_;
  // The own sessions of stats, metrics, readindex and signal-publish requests -> their ticket.
  std::unordered_map<std::uint64_t, std::uint64_t> stats_tickets_;
  // Signal streams by session id, and by connection (one stream at most per connection: it holds
  // its connection until it ends).
  std::unordered_map<std::uint64_t, std::unique_ptr<Stream>> streams_;
  std::unordered_map<evhttp_connection*, std::uint64_t> stream_of_connection_;
  // The last signal frame written to a stream and its Server-Sent Event: a signal's frame is one
  // shared string for all its listeners, so a fan-out to many streams of this thread encodes it
  // once. Holding the frame keeps its address from being reused by another.
  std::shared_ptr<const std::string> sse_frame_;
  std::shared_ptr<const std::string> sse_event_;
  // Session event streams: their watch tickets (while the watch runs) -> their stream's id.
  std::unordered_map<std::uint64_t, std::uint64_t> stream_of_watch_;
  // Fence checks, inspects and force-releases by their own session's id, until the engine's
  // reply (kept when the client leaves: a force-release is logged all the same).
  std::unordered_map<std::uint64_t, KeyRequest> key_requests_;
  std::vector<std::uint64_t> streams_ending_;  // for end_streams_
  event* end_streams_ = nullptr;
  event* stream_watch_ = nullptr;
  bool in_router_event_ = false;  // inside on_session_event: no settle() from a close callback
  std::unordered_map<evhttp_connection*, std::string> connection_ip_;
};

}  // namespace turnstile::net
