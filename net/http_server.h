// HttpServer: the HTTP REST API (docs/http-api.md; reference section 3) on libevent's evhttp.
//
// Every shard runs one, on its own event_base, and they all accept from the one listening
// socket, so HTTP connections spread over the shards' threads as TCP connections do. What a
// request means is decided by the shard's core::HttpApi (core/http_api.h): admission, routes,
// one-shot and key requests, the admin routes and the session operations, which it hands to
// core::HttpSessionRouter. This class parses what evhttp read into a core::HttpApiRequest,
// writes the API's responses, carries its messages to other shards, runs its timer, counts the
// per-IP connections and renders the metrics text (net/metrics_text.cc); HttpShared (behind
// locks) holds what all shards share: the session caps, the rate limit, the request counters.
//
// Signal streams (docs/http-api.md, "Signals", net/http_streams.cc): a GET /v1/signals stream is
// one router session that listens to one pattern: its frames are written as Server-Sent Events
// and reported to the router once they have left the connection's output buffer, so the hub's
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
// The admin routes' membership changes run on the cluster node (net/http_admin.cc), and a
// force-release is logged there with who asked and what it freed.
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

#include "core/http_api.h"
#include "core/http_codec.h"
#include "core/http_session_router.h"
#include "core/http_sessions.h"
#include "core/stats.h"
#include "net/crypto_random.h"
#include "net/http_shared.h"
#include "net/shard.h"

namespace turnstile::net {

class HttpServer final : public ShardService, private core::HttpApiHost {
 public:
  HttpServer(Shard& host, SharedState& shared, HttpShared& http_shared);
  ~HttpServer() override;
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
  static void on_api_deadline(evutil_socket_t, short, void* self);
  static void on_sweep(evutil_socket_t, short, void* self);
  static void on_probe(evutil_socket_t, short, void* self);
  static bufferevent* make_tls_bufferevent(event_base* base, void* self);

  void handle(evhttp_request* request);
  // What evhttp parsed of `request`, for the API.
  core::HttpApiRequest parse(evhttp_request* request, std::string_view method,
                             const std::string& ip);
  // The peer's IP, counted against --http-max-connections-per-ip on a connection's first request;
  // nullopt once the request is answered 503 for being over it.
  std::optional<std::string> admit_peer(evhttp_request* request, std::string_view method,
                                        core::Instant started);
  void fail(evhttp_request* request);
  void probe();
  void connection_closed(evhttp_connection* connection);

  // core::HttpApiHost
  bool rate_allow(core::Instant now, const std::string& ip) override;
  bool starting() const override;
  bool cluster_mode() const override;
  bool leader_known() const override;
  std::int64_t connections() const override;
  std::string metrics_text(const core::StatsSnapshot& snapshot, bool ready) override;
  std::string_view openapi_json() const override;
  void auth_failed(const core::HttpApiRequest& request, std::string_view route) override;
  void force_released(const std::string& peer, const core::Request& request,
                      const core::Reply& reply) override;
  void change_membership(core::HttpTicket ticket, const core::MembershipChange& change) override;

  std::uint64_t add_pending(evhttp_request* request, std::string_view method,
                            core::Instant started);
  void drop_pending(std::uint64_t ticket);
  // Carries the API's effects out: responses for this shard's clients, messages for other shards,
  // watch events for the session event streams; reports the live sessions' count and arms the
  // API's deadline.
  void flush();
  void write_response(evhttp_request* request, const core::HttpApiResponse& response);

  // ---- streams (net/http_streams.cc)
  // A stream route the API admitted: a signal stream or a session event stream.
  void open_stream_route(evhttp_request* request, const core::HttpApi::StreamRoute& route,
                         std::string_view method, core::Instant started);
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
             std::string_view content_type = core::kHttpJsonType);
  void reply_error(evhttp_request* request, int code, const std::string& error,
                   const std::string& detail, std::string_view route, std::string_view method,
                   core::Instant started);

  Shard& host_;
  SharedState& shared_;
  HttpShared& http_shared_;
  const Config& config_;
  evhttp* http_ = nullptr;
  event* sweep_ = nullptr;
  event* probe_ = nullptr;      // watches the sockets of waiting requests for a departed client
  event* api_timer_ = nullptr;  // at api_.next_deadline()
  std::optional<core::Instant> api_armed_;  // what api_timer_ is armed for
  CryptoRandom random_;                     // session ids are capabilities too
  core::HttpSessionRouter desk_;
  core::HttpApi api_;
  std::int64_t live_reported_ = 0;  // desk_.live() as last added to SharedState
  bool draining_ = false;
  bool stopped_ = false;
  bool flushing_ = false;
  // The request on_request is handling until it is answered or pending (fail() answers it).
  evhttp_request* unanswered_ = nullptr;
  core::Instant started_at_;
  core::Instant last_rate_sweep_;  // buckets idle 10 min are dropped every 5 min

  // Requests the API holds, by their tickets (from api_.new_ticket(): unique across shards), and
  // by connection.
  std::unordered_map<std::uint64_t, std::unique_ptr<Pending>> pending_;
  std::unordered_map<evhttp_connection*, std::vector<std::uint64_t>> by_connection_;
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
  std::vector<std::uint64_t> streams_ending_;  // for end_streams_
  event* end_streams_ = nullptr;
  event* stream_watch_ = nullptr;
  bool in_router_event_ = false;  // inside on_session_event: no settle() from a close callback
  std::unordered_map<evhttp_connection*, std::string> connection_ip_;
};

}  // namespace turnstile::net
