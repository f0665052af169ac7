#include "net/http_server.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/keyvalq_struct.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string_view>
#include <tuple>
#include <utility>

#include "core/assert.h"
#include "core/http_codec.h"
#include "core/routing.h"
#include "net/clock.h"
#include "net/cluster_node.h"
#include "net/guard.h"
#include "net/listener.h"
#include "net/log.h"
#include "net/metrics_text.h"

namespace turnstile::net {
namespace {

// The request's body, contiguous (at most kBodyReadMax bytes: evhttp refuses longer ones itself).
std::string_view request_body(evhttp_request* request) {
  evbuffer* input = evhttp_request_get_input_buffer(request);
  const std::size_t length = evbuffer_get_length(input);
  if (length == 0) return {};
  return {reinterpret_cast<const char*>(evbuffer_pullup(input, -1)), length};
}

#include "net/openapi_json.inc"  // kOpenApiJson: docs/openapi.json, embedded at configure time

constexpr const char* kJsonType = "application/json";
// Bodies up to this are read (and answered 400 when over core::kHttpBodyMax, as dflockd); beyond
// it libevent refuses the request itself (413) before reading it.
constexpr std::size_t kBodyReadMax = 2 * core::kHttpBodyMax;
constexpr core::Duration kAuthFailureDelay = core::Duration::milliseconds(100);
constexpr core::Duration kRateSweepInterval = core::Duration::seconds(300);
// How often the sockets of requests waiting for an engine are checked for EOF (libevent 2.1's
// evhttp does not read a connection while its request is being answered, so it would not notice
// a client that left; dflockd's watcher polls every 50 ms too).
constexpr core::Duration kProbeInterval = core::Duration::milliseconds(50);
// A signal stream whose connection takes no bytes for this long while some wait is closed
// (dflockd's deadline on every SSE write), checked this often.
constexpr core::Duration kStreamWriteDeadline = core::Duration::seconds(30);
constexpr core::Duration kStreamWatchInterval = core::Duration::seconds(1);
// A backstop beside the hub's --signal-queue: a stream with more than this waiting in its
// connection's output buffer is closed as a slow consumer.
constexpr std::size_t kStreamOutputMax = 16 * 1024 * 1024;  // bytes

std::string_view method_name(evhttp_cmd_type type) {
  switch (type) {
    case EVHTTP_REQ_GET:
      return "GET";
    case EVHTTP_REQ_POST:
      return "POST";
    case EVHTTP_REQ_DELETE:
      return "DELETE";
    case EVHTTP_REQ_OPTIONS:
      return "OPTIONS";
    case EVHTTP_REQ_PUT:
      return "PUT";
    case EVHTTP_REQ_PATCH:
      return "PATCH";
    case EVHTTP_REQ_HEAD:
      return "HEAD";
    default:
      return "OTHER";
  }
}

}  // namespace

struct HttpServer::Pending {
  enum class Kind { kSession, kStats, kMetrics, kReadIndex, kAuthDelay, kAdmin, kSignal, kKey };
  Kind kind = Kind::kSession;
  evhttp_request* request = nullptr;
  evhttp_connection* connection = nullptr;
  std::string_view method;  // static strings, as for reply()
  std::string_view route;
  core::Instant started;
  event* timer = nullptr;  // kAuthDelay
  std::unique_ptr<std::pair<HttpServer*, std::uint64_t>> timer_arg;
  // kStats, kMetrics, kReadIndex, kSignal, kKey: the request's own session
  core::SessionId stats_session;

  static Pending of(Kind kind, std::string_view method, std::string_view route,
                    core::Instant started) {
    Pending pending;
    pending.kind = kind;
    pending.method = method;
    pending.route = route;
    pending.started = started;
    return pending;
  }
};

// A GET /v1/signals stream: one router session, one subscription, one chunked response. Or a
// GET /v1/sessions/{id}/events stream: a watch of the desk (`watch`), with an id of the router's
// that the router never hears of.
struct HttpServer::Stream {
  core::SessionId session;
  core::HttpTicket watch = 0;  // a session event stream: its watch ticket
  bool watch_over = false;     // the desk ended or refused the watch, or was told it ended
  evhttp_request* request = nullptr;
  evhttp_connection* connection = nullptr;
  std::string_view method;  // static strings, as for reply()
  std::string_view route;
  core::Instant started;
  bool open = false;           // the 200 head and `:ok` are sent
  bool listening = false;      // its listen was `ok`: the router must hear of its close, once
  bool ending = false;         // in streams_ending_
  bool abort = false;          // ending by closing the connection (not a clean end of the reply)
  std::size_t unreported = 0;  // frames handed to the connection, not yet reported written
  // The write deadline: bytes handed to the connection's output buffer so far, how many of them
  // had left it at the last check, and when that last grew (or the buffer was empty).
  std::size_t handed = 0;
  std::size_t drained = 0;
  core::Instant last_progress;
  std::string backlog;  // events for it before it opened (the listen answers first)
  std::size_t backlog_frames = 0;
  event* ping = nullptr;
  std::unique_ptr<std::pair<HttpServer*, std::uint64_t>> ping_arg;
};

// ---- HttpServer --------------------------------------------------------------------------------

HttpServer::HttpServer(Shard& host, SharedState& shared, HttpShared& http_shared)
    : host_(host),
      shared_(shared),
      http_shared_(http_shared),
      config_(shared.config),
      desk_(
          [&] {
            core::HttpSessionsConfig config;
            config.idle_timeout =
                core::Duration::seconds(shared.config.http_session_idle_timeout_s);
            config.sessions_max = shared.config.http_max_sessions;
            config.sessions_per_ip_max = shared.config.http_max_sessions_per_ip;
            return config;
          }(),
          &http_shared.quota(), host.router()),
      cors_(shared.config.http_cors_allowed_origins),
      started_at_(monotonic_now()),
      last_rate_sweep_(started_at_) {
  host_.set_service(this);
}

HttpServer::~HttpServer() {
  stop();
  host_.set_service(nullptr);
}

bufferevent* HttpServer::make_tls_bufferevent(event_base* base, void* self) {
  auto* server = static_cast<HttpServer*>(self);
  SSL* ssl = SSL_new(server->shared_.tls);
  bufferevent* bev = bufferevent_openssl_socket_new(base, -1, ssl, BUFFEREVENT_SSL_ACCEPTING,
                                                    BEV_OPT_CLOSE_ON_FREE);
  if (bev != nullptr) bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
  return bev;
}

int HttpServer::open_listener(const Config& config, bool tls) {
  ListenerSpec spec;
  spec.host_flag = "--http-host";
  spec.protocol = "http";
  spec.purpose = "for HTTP ";
  spec.host = config.http_host;
  spec.port = config.http_port;
  const std::optional<ListeningSocket> listening = open_listening_socket(spec);
  if (!listening) return -1;
  const char* protocol = tls ? "https" : "http";
  log_event(LogLevel::kInfo, "listen",
            "HTTP API listening on " + listening->address + " (" + protocol + ")",
            {{"protocol", protocol}, {"address", listening->address}, {"shards", config.threads}});
  return listening->fd;
}

bool HttpServer::listen(int fd) {
  http_ = evhttp_new(host_.base());
  if (http_ == nullptr) {
    ::close(fd);
    return false;
  }
  evhttp_set_gencb(http_, &HttpServer::on_request, this);
  evhttp_set_allowed_methods(http_, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_DELETE |
                                        EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PUT | EVHTTP_REQ_PATCH |
                                        EVHTTP_REQ_HEAD);
  evhttp_set_max_body_size(http_, static_cast<ev_ssize_t>(kBodyReadMax));
  evhttp_set_timeout(http_, static_cast<int>(std::min<std::int64_t>(config_.read_timeout_s, 120)));
  evhttp_set_default_content_type(http_, kJsonType);
  if (shared_.tls != nullptr) evhttp_set_bevcb(http_, &HttpServer::make_tls_bufferevent, this);
  // Every shard's evhttp watches the same listening socket (through its own descriptor); a new
  // connection goes to whichever accepts it first.
  if (evhttp_accept_socket(http_, fd) != 0) {
    logf(LogLevel::kError, "cannot serve HTTP on shard %zu: %s", host_.index(),
         std::strerror(errno));
    ::close(fd);
    return false;
  }
  sweep_ = event_new(host_.base(), -1, EV_PERSIST, &HttpServer::on_sweep, this);
  const timeval interval = to_timeval(desk_.sweep_interval());
  event_add(sweep_, &interval);
  probe_ = event_new(host_.base(), -1, EV_PERSIST, &HttpServer::on_probe, this);
  const timeval probe = to_timeval(kProbeInterval);
  event_add(probe_, &probe);
  end_streams_ = event_new(host_.base(), -1, 0, &HttpServer::on_end_streams, this);
  stream_watch_ = event_new(host_.base(), -1, EV_PERSIST, &HttpServer::on_stream_watch, this);
  const timeval watch = to_timeval(kStreamWatchInterval);
  event_add(stream_watch_, &watch);
  return true;
}

void HttpServer::stop() {
  if (stopped_) return;
  stopped_ = true;
  for (auto& [ticket, pending] : pending_) {
    if (pending->timer != nullptr) event_free(pending->timer);
    pending->timer = nullptr;
  }
  if (sweep_ != nullptr) event_free(sweep_);
  sweep_ = nullptr;
  if (probe_ != nullptr) event_free(probe_);
  probe_ = nullptr;
  // The hub (shared by every shard) forgets the streams' subscriptions.
  for (auto& [id, stream] : streams_) {
    if (stream->listening) host_.router().close(monotonic_now(), stream->session);
    if (stream->ping != nullptr) event_free(stream->ping);
  }
  streams_.clear();
  stream_of_connection_.clear();
  stream_of_watch_.clear();
  streams_ending_.clear();
  if (end_streams_ != nullptr) event_free(end_streams_);
  end_streams_ = nullptr;
  if (stream_watch_ != nullptr) event_free(stream_watch_);
  stream_watch_ = nullptr;
  // evhttp_free frees every connection and the requests on them; forget them first so the
  // close callbacks find nothing to do.
  pending_.clear();
  by_connection_.clear();
  if (http_ != nullptr) evhttp_free(http_);
  http_ = nullptr;
}

void HttpServer::begin_drain() {
  draining_ = true;
  desk_.begin_drain();
  // Signal and session event streams end cleanly (the last chunk is sent); new ones are refused.
  for (auto& [id, stream] : streams_) end_stream(*stream, /*abort=*/false);
  flush();  // the desk hears of the watches that ended
}

void HttpServer::on_sweep(evutil_socket_t, short, void* self) {
  auto* server = static_cast<HttpServer*>(self);
  guarded("HTTP session sweep", [server] {
    const core::Instant now = server->host_.turn_now();
    const std::size_t reaped = server->desk_.reap(now);
    if (reaped > 0) logf(LogLevel::kDebug, "HTTP: reaped %zu idle sessions", reaped);
    if (now - server->last_rate_sweep_ >= kRateSweepInterval) {
      server->http_shared_.rate_sweep(now);
      server->last_rate_sweep_ = now;
    }
    server->flush();
    server->host_.settle();
  });
}

void HttpServer::on_probe(evutil_socket_t, short, void* self) {
  auto* server = static_cast<HttpServer*>(self);
  guarded("HTTP client probe", [server] { server->probe(); });
}

void HttpServer::probe() {
  std::vector<evhttp_connection*> gone;
  for (const auto& [connection, tickets] : by_connection_) {
    bufferevent* bev = evhttp_connection_get_bufferevent(connection);
    const evutil_socket_t fd = bev != nullptr ? bufferevent_getfd(bev) : -1;
    if (fd < 0) continue;
    char byte = 0;
    const ssize_t got = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      gone.push_back(connection);
    }
  }
  for (evhttp_connection* connection : gone) {
    // Frees the requests on it; on_connection_closed abandons them first.
    if (by_connection_.count(connection) != 0) evhttp_connection_free(connection);
  }
}

// ---- responses ---------------------------------------------------------------------------------

void HttpServer::reply(evhttp_request* request, int code, std::string_view body,
                       std::string_view route, std::string_view method, core::Instant started,
                       const char* content_type) {
  if (request == unanswered_) unanswered_ = nullptr;
  http_shared_.record(method, route, code, (host_.turn_now() - started).seconds_double());
  evkeyvalq* headers = evhttp_request_get_output_headers(request);
  // evhttp adds its default type (application/json) itself to a response that has a body.
  if (!body.empty() && std::string_view(content_type) != kJsonType) {
    evhttp_remove_header(headers, "Content-Type");
    evhttp_add_header(headers, "Content-Type", content_type);
  }
  evhttp_add_header(headers, "X-Content-Type-Options", "nosniff");
  if (core::http_reply_has_body(method_name(evhttp_request_get_command(request)))) {
    evbuffer_add(evhttp_request_get_output_buffer(request), body.data(), body.size());
  } else {
    // HEAD: the GET's headers without its body. evhttp adds neither the length nor the default
    // type to a HEAD reply, so both are set here.
    if (!body.empty() && evhttp_find_header(headers, "Content-Type") == nullptr) {
      evhttp_add_header(headers, "Content-Type", content_type);
    }
    evhttp_remove_header(headers, "Content-Length");
    evhttp_add_header(headers, "Content-Length", std::to_string(body.size()).c_str());
  }
  evhttp_send_reply(request, code, nullptr, nullptr);
}

void HttpServer::reply_error(evhttp_request* request, int code, const std::string& error,
                             const std::string& detail, std::string_view route,
                             std::string_view method, core::Instant started) {
  reply(request, code, core::http_error_body(error, detail), route, method, started);
}

std::uint64_t HttpServer::add_pending(evhttp_request* request, Pending pending) {
  const std::uint64_t ticket = desk_.new_ticket();
  if (request == unanswered_) unanswered_ = nullptr;  // answered later, from pending_
  pending.request = request;
  pending.connection = evhttp_request_get_connection(request);
  if (pending.connection != nullptr) by_connection_[pending.connection].push_back(ticket);
  pending_.emplace(ticket, std::make_unique<Pending>(std::move(pending)));
  return ticket;
}

void HttpServer::drop_pending(std::uint64_t ticket) {
  auto it = pending_.find(ticket);
  if (it == pending_.end()) return;
  if (it->second->connection != nullptr) {
    auto list = by_connection_.find(it->second->connection);
    if (list != by_connection_.end()) {
      std::erase(list->second, ticket);
      if (list->second.empty()) by_connection_.erase(list);
    }
  }
  if (it->second->timer != nullptr) event_free(it->second->timer);
  pending_.erase(it);
}

// The client closed its connection. Requests still waiting on it are abandoned (a long poll is
// withdrawn from its queue; any grant that races in is given back by core::HttpSessions).
void HttpServer::on_connection_closed(evhttp_connection* connection, void* self) {
  auto* server = static_cast<HttpServer*>(self);
  guarded("HTTP connection close", [&] { server->connection_closed(connection); });
}

void HttpServer::connection_closed(evhttp_connection* connection) {
  if (stopped_) return;
  auto ip = connection_ip_.find(connection);
  if (ip != connection_ip_.end()) {
    http_shared_.release_connection(ip->second);
    connection_ip_.erase(ip);
  }
  drop_stream(connection);
  auto it = by_connection_.find(connection);
  if (it == by_connection_.end()) return;
  const std::vector<std::uint64_t> tickets = it->second;
  by_connection_.erase(it);
  for (std::uint64_t ticket : tickets) {
    auto found = pending_.find(ticket);
    if (found == pending_.end()) continue;
    Pending& pending = *found->second;
    pending.connection = nullptr;
    withdraw(ticket, pending);
    logf(LogLevel::kDebug, "HTTP: client left during %.*s %.*s",
         static_cast<int>(pending.method.size()), pending.method.data(),
         static_cast<int>(pending.route.size()), pending.route.data());
    // A request libevent has detached from its connection is ours to free; one still attached
    // is freed by libevent with the connection.
    if (evhttp_request_get_connection(pending.request) == nullptr) {
      evhttp_send_reply(pending.request, 499, nullptr, nullptr);
    }
    if (pending.timer != nullptr) event_free(pending.timer);
    pending.timer = nullptr;
    pending_.erase(found);
  }
  flush();
  // A write inside a router event can fail its connection at once (TLS): the shard's settle()
  // in progress delivers what this produced, in order.
  if (!in_router_event_) host_.settle();
}

// Whoever would answer a pending request is told it no longer needs to: a session operation is
// abandoned (core::HttpSessionRouter withdraws a long poll wherever it waits; a grant that races
// in is given back), a stats request stops collecting parts.
void HttpServer::withdraw(std::uint64_t ticket, Pending& pending) {
  if (pending.kind == Pending::Kind::kSession) desk_.abandon(host_.turn_now(), ticket);
  if (pending.kind == Pending::Kind::kStats || pending.kind == Pending::Kind::kMetrics ||
      pending.kind == Pending::Kind::kReadIndex || pending.kind == Pending::Kind::kSignal) {
    stats_tickets_.erase(pending.stats_session.value);
  }
  if (pending.kind == Pending::Kind::kKey) {
    // The engine's reply still comes (and a force-release is still logged); it answers nobody.
    auto key = key_requests_.find(pending.stats_session.value);
    if (key != key_requests_.end()) key->second.ticket = 0;
  }
}

void HttpServer::on_auth_delay(evutil_socket_t, short, void* self) {
  const auto [server, ticket] = *static_cast<std::pair<HttpServer*, std::uint64_t>*>(self);
  guarded("HTTP auth delay", [server, ticket] { server->auth_delay_over(ticket); });
}

void HttpServer::auth_delay_over(std::uint64_t ticket) {
  auto it = pending_.find(ticket);
  if (it == pending_.end()) return;
  Pending& pending = *it->second;
  // libevent measures timeouts from the time it cached at the start of the loop turn that armed
  // the timer, so the timer can fire a few milliseconds before the delay has passed since the
  // request arrived. The promise is at least the full delay: wait out the rest.
  const core::Duration waited = host_.turn_now() - pending.started;
  if (waited < kAuthFailureDelay) {
    const timeval rest = to_timeval(kAuthFailureDelay - waited);
    evtimer_add(pending.timer, &rest);
    return;
  }
  reply_error(pending.request, 401, "unauthorized", "", pending.route, pending.method,
              pending.started);
  drop_pending(ticket);  // frees the timer and its argument
}

// ---- requests ----------------------------------------------------------------------------------

void HttpServer::on_request(evhttp_request* request, void* self) {
  auto* server = static_cast<HttpServer*>(self);
  server->unanswered_ = request;
  if (!guarded("HTTP request", [&] { server->handle(request); })) server->fail(request);
  server->unanswered_ = nullptr;
  guarded("HTTP request", [server] {
    server->flush();
    server->host_.settle();
  });
}

// Handling `request` threw: it gets a 500 (with the error line in the log), unless it was answered
// before the throw; a pending one is withdrawn first.
void HttpServer::fail(evhttp_request* request) {
  guarded("HTTP 500", [&] {
    std::uint64_t ticket = 0;  // tickets start at 1
    if (request != unanswered_) {
      for (const auto& [candidate, pending] : pending_) {
        if (pending->request == request) ticket = candidate;
      }
      if (ticket == 0) return;  // answered already
      withdraw(ticket, *pending_.at(ticket));
    }
    const std::string_view method = method_name(evhttp_request_get_command(request));
    reply_error(request, 500, "internal", "the server failed to handle this request", "unmatched",
                method, host_.turn_now());
    if (ticket != 0) drop_pending(ticket);
  });
}

void HttpServer::handle(evhttp_request* request) {
  const core::Instant started = host_.turn_now();
  const std::string_view method = method_name(evhttp_request_get_command(request));
  evkeyvalq* in = evhttp_request_get_input_headers(request);
  evkeyvalq* out = evhttp_request_get_output_headers(request);
  evhttp_connection* connection = evhttp_request_get_connection(request);

  // Per-IP transport cap, counted per connection on its first request.
  std::string ip = "unknown";
  if (connection != nullptr) {
    auto known = connection_ip_.find(connection);
    if (known != connection_ip_.end()) {
      ip = known->second;
    } else {
      char* address = nullptr;
      ev_uint16_t port = 0;
      evhttp_connection_get_peer(connection, &address, &port);
      ip = address != nullptr ? address : "unknown";
      if (!http_shared_.admit_connection(ip)) {
        evhttp_add_header(out, "Connection", "close");
        reply_error(request, 503, "max_connections_per_ip", "", "unmatched", method, started);
        return;
      }
      connection_ip_.emplace(connection, ip);
      evhttp_connection_set_closecb(connection, &HttpServer::on_connection_closed, this);
    }
  }

  const evhttp_uri* uri = evhttp_request_get_evhttp_uri(request);
  const char* raw_path = uri != nullptr ? evhttp_uri_get_path(uri) : nullptr;
  const std::string path = raw_path != nullptr ? raw_path : "/";

  // CORS (reference 3.2): before everything else.
  const char* origin = evhttp_find_header(in, "Origin");
  if (cors_.enabled() && origin != nullptr) {
    for (const auto& [name, value] : cors_.headers_for(origin)) {
      evhttp_add_header(out, std::string(name).c_str(), value.c_str());
    }
    if (method == "OPTIONS" && evhttp_find_header(in, "Access-Control-Request-Method") != nullptr) {
      reply(request, 204, "", "preflight", method, started);
      return;
    }
  }

  // Route lookup: 404 for an unknown path, 405 (with Allow) for a known path and another method.
  core::HttpRouteMatch matched = core::match_http_route(method, path);
  const core::HttpEndpointSpec* spec = matched.spec;
  const std::string& allow = matched.allow;
  const std::string_view route = spec != nullptr ? spec->pattern : "unmatched";

  // Rate limit, then auth, then the router's 404/405 (reference 3.1's handler order).
  const bool exempt = spec != nullptr && !spec->rate_limited;
  if (!exempt && !http_shared_.rate_allow(started, ip)) {
    reply_error(request, 429, "rate_limited", "", route, method, started);
    return;
  }
  const bool needs_auth = spec == nullptr || spec->needs_auth;
  if (config_.auth_token && needs_auth) {
    const char* header = evhttp_find_header(in, "Authorization");
    if (!core::bearer_matches(header != nullptr ? header : "", *config_.auth_token)) {
      reply_unauthorized_later(request, route, method, started);
      return;
    }
  }
  if (spec == nullptr) {
    if (!allow.empty()) {
      evhttp_add_header(out, "Allow", allow.c_str());
      reply_error(request, 405, "method_not_allowed",
                  std::string(method) + " is not allowed on " + path, route, method, started);
    } else {
      reply_error(request, 404, "not_found", "no route for " + path, route, method, started);
    }
    return;
  }
  dispatch_route(request, *spec, matched.params, method, started);
}

void HttpServer::reply_unauthorized_later(evhttp_request* request, std::string_view route,
                                          std::string_view method, core::Instant started) {
  shared_.auth_failures.fetch_add(1, std::memory_order_relaxed);
  if (const auto suppressed = auth_failure_log_limit().admit(started.ns())) {
    char* address = nullptr;
    ev_uint16_t port = 0;
    evhttp_connection* connection = evhttp_request_get_connection(request);
    if (connection != nullptr) evhttp_connection_get_peer(connection, &address, &port);
    const std::string peer = address != nullptr ? address : "unknown";
    log_event(
        LogLevel::kWarn, "auth_failure",
        "HTTP: " + std::string(method) + " " + std::string(route) + ": unauthorized from " + peer,
        {{"transport", "http"},
         {"peer", peer},
         {"route", route},
         {"method", method},
         {"suppressed", *suppressed}});
  }
  Pending pending = Pending::of(Pending::Kind::kAuthDelay, method, route, started);
  const std::uint64_t ticket = add_pending(request, std::move(pending));
  Pending& added = *pending_[ticket];
  added.timer_arg = std::make_unique<std::pair<HttpServer*, std::uint64_t>>(this, ticket);
  event* timer = evtimer_new(host_.base(), &HttpServer::on_auth_delay, added.timer_arg.get());
  added.timer = timer;
  const timeval delay = to_timeval(kAuthFailureDelay);
  evtimer_add(timer, &delay);
}

void HttpServer::dispatch_route(evhttp_request* request, const core::HttpEndpointSpec& spec,
                                const std::vector<std::string>& params, std::string_view method,
                                core::Instant started) {
  const std::string_view route = spec.pattern;
  const core::Instant now = started;
  switch (spec.endpoint) {
    case core::HttpEndpoint::kHealth:
      if (shared_.starting.load(std::memory_order_relaxed)) {
        reply(request, 503, core::http_status_body("starting"), route, method, started);
      } else {
        reply(request, 200, core::http_status_body("ok"), route, method, started);
      }
      return;
    case core::HttpEndpoint::kReady:
      if (draining_) {
        reply(request, 503, core::http_status_body("draining"), route, method, started);
      } else if (!ready()) {
        reply(request, 503, core::http_status_body("no_leader"), route, method, started);
      } else {
        reply(request, 200, core::http_status_body("ok"), route, method, started);
      }
      return;
    case core::HttpEndpoint::kOpenApi:
      evhttp_add_header(evhttp_request_get_output_headers(request), "Cache-Control",
                        "public, max-age=60");
      reply(request, 200, std::string(kOpenApiJson), route, method, started);
      return;
    case core::HttpEndpoint::kStats:
    case core::HttpEndpoint::kMetrics: {
      Pending pending =
          Pending::of(spec.endpoint == core::HttpEndpoint::kStats ? Pending::Kind::kStats
                                                                  : Pending::Kind::kMetrics,
                      method, route, started);
      pending.stats_session = host_.router().new_session_id();
      const core::SessionId stats_session = pending.stats_session;
      const std::uint64_t ticket = add_pending(request, std::move(pending));
      stats_tickets_[stats_session.value] = ticket;
      core::Request stats;
      stats.command = core::Command::kStats;
      host_.router().submit(now, stats_session, stats);
      return;
    }
    case core::HttpEndpoint::kReadIndex: {
      // A linearizable read point: a barrier through the log, answered once it is applied.
      if (!shared_.config.cluster.enabled()) {
        reply_error(request, 404, "cluster_disabled", "readindex needs cluster mode", route, method,
                    started);
        return;
      }
      Pending pending = Pending::of(Pending::Kind::kReadIndex, method, route, started);
      pending.stats_session = host_.router().new_session_id();
      const core::SessionId session = pending.stats_session;
      stats_tickets_[session.value] = add_pending(request, std::move(pending));
      core::Request barrier;
      barrier.command = core::Command::kBarrier;
      host_.router().submit(now, session, barrier);
      return;
    }
    case core::HttpEndpoint::kSessionCreate: {
      const std::string_view body = request_body(request);
      std::variant<core::HttpBadRequest, std::string> stable_ref =
          core::decode_http_session_create(body);
      if (const auto* bad = std::get_if<core::HttpBadRequest>(&stable_ref)) {
        reply_error(request, 400, "bad_request", bad->detail, route, method, started);
        return;
      }
      char* address = nullptr;
      ev_uint16_t port = 0;
      evhttp_connection* connection = evhttp_request_get_connection(request);
      if (connection != nullptr) evhttp_connection_get_peer(connection, &address, &port);
      const core::HttpOutcome outcome =
          desk_.create(now, random_, address != nullptr ? address : "unknown",
                       std::get<std::string>(stable_ref));
      flush();  // counts the new session before the client can see it
      reply(request, outcome.code, outcome.body, route, method, started);
      return;
    }
    case core::HttpEndpoint::kSessionDelete:
    case core::HttpEndpoint::kSessionPing: {
      const std::string& handle = params.at(0);
      if (!core::is_session_handle(handle)) {
        reply_error(request, 400, "bad_request", "session id must be 32 lowercase hex characters",
                    route, method, started);
        return;
      }
      const bool remove = spec.endpoint == core::HttpEndpoint::kSessionDelete;
      run_session_request(request, route, method, started, [&](core::HttpTicket ticket) {
        if (remove) {
          desk_.remove(now, ticket, handle);
        } else {
          desk_.ping(now, ticket, handle);
        }
      });
      return;
    }
    case core::HttpEndpoint::kSessionEvents:
      open_watch(request, spec, params.at(0), method, started);
      return;
    case core::HttpEndpoint::kLockCheck:
    case core::HttpEndpoint::kSemCheck:
    case core::HttpEndpoint::kReadWriteCheck:
    case core::HttpEndpoint::kLockInspect:
    case core::HttpEndpoint::kSemInspect:
    case core::HttpEndpoint::kReadWriteInspect:
      run_key_request(request, spec, params.at(0), method, started);
      return;
    case core::HttpEndpoint::kAdminVoterAdd:
    case core::HttpEndpoint::kAdminVoterRemove:
    case core::HttpEndpoint::kAdminLeaderTransfer:
    case core::HttpEndpoint::kAdminLockRelease:
    case core::HttpEndpoint::kAdminSemRelease:
    case core::HttpEndpoint::kAdminReadWriteRelease:
      handle_admin(request, spec, params, method, started);
      return;
    case core::HttpEndpoint::kSignalPublish:
      publish_signal(request, spec, params.at(0), method, started);
      return;
    case core::HttpEndpoint::kSignalStream:
      open_stream(request, spec, method, started);
      return;
    default:
      handle_session_request(request, spec, params.at(0), method, started);
      return;
  }
}

void HttpServer::handle_admin(evhttp_request* request, const core::HttpEndpointSpec& spec,
                              const std::vector<std::string>& params, std::string_view method,
                              core::Instant started) {
  const std::string_view route = spec.pattern;
  const char* header =
      evhttp_find_header(evhttp_request_get_input_headers(request), "Authorization");
  ClusterNode* node = shared_.cluster_node;
  // A force-release works on one node too; the membership routes need cluster mode.
  const std::optional<core::HttpKeyCommand> force_release = core::http_key_command(spec.endpoint);
  const core::AdminAccess access =
      node == nullptr && !force_release
          ? core::AdminAccess::kDisabled
          : core::admin_access(config_.cluster.admin_token, header != nullptr ? header : "");
  if (access == core::AdminAccess::kDisabled) {
    reply_error(request, 403, "admin_disabled",
                force_release ? "the admin routes are off: they need --admin-token"
                              : "the membership routes are off: they need cluster mode and "
                                "--admin-token",
                route, method, started);
    return;
  }
  if (access == core::AdminAccess::kUnauthorized) {
    reply_unauthorized_later(request, route, method, started);
    return;
  }
  if (force_release) {
    char* address = nullptr;
    ev_uint16_t port = 0;
    evhttp_connection* connection = evhttp_request_get_connection(request);
    if (connection != nullptr) evhttp_connection_get_peer(connection, &address, &port);
    std::string peer = address != nullptr ? address : "unknown";
    if (peer.find(':') != std::string::npos) peer = "[" + peer + "]";
    run_key_request(request, spec, params.at(0), method, started,
                    peer + ":" + std::to_string(port));
    return;
  }
  std::optional<core::AdminVoterAdd> add;
  std::uint64_t remove_id = 0;
  const bool transfer = spec.endpoint == core::HttpEndpoint::kAdminLeaderTransfer;
  if (transfer) {
    // No body to read: the leader picks the most up-to-date voter.
  } else if (spec.endpoint == core::HttpEndpoint::kAdminVoterAdd) {
    const std::string_view body = request_body(request);
    auto decoded = core::decode_admin_voter_add(body);
    if (const auto* bad = std::get_if<core::HttpBadRequest>(&decoded)) {
      reply_error(request, 400, "bad_request", bad->detail, route, method, started);
      return;
    }
    add = std::get<core::AdminVoterAdd>(decoded);
  } else {
    auto decoded = core::decode_admin_voter_id(params.at(0));
    if (const auto* bad = std::get_if<core::HttpBadRequest>(&decoded)) {
      reply_error(request, 400, "bad_request", bad->detail, route, method, started);
      return;
    }
    remove_id = std::get<std::uint64_t>(decoded);
  }
  Pending pending = Pending::of(Pending::Kind::kAdmin, method, route, started);
  const std::uint64_t ticket = add_pending(request, std::move(pending));
  // The answer comes on the raft thread (or at once): it is brought back to this shard's thread.
  // The server outlives the raft node (Server::run stops it before the shards are destroyed).
  Shard* host = &host_;
  auto done = [this, host, ticket](core::AdminChangeOutcome outcome) {
    host->post(message::Run{[this, ticket, outcome = std::move(outcome)] {
      guarded("HTTP admin reply", [&] {
        finish_admin(ticket, outcome);
        flush();
        host_.settle();
      });
    }});
  };
  if (transfer) {
    log_event(LogLevel::kInfo, "admin_cluster_request",
              "cluster: admin request: hand leadership to another voter",
              {{"action", "leader_transfer"}});
    if (node->status().role != core::RaftRole::kLeader) {
      done(core::AdminChangeOutcome{
          core::AdminChangeOutcome::Kind::kNotLeader, "", node->leader_client_address(), {}});
      return;
    }
    node->transfer_leadership([node, done](bool ok) {
      if (ok) {
        done(core::AdminChangeOutcome{
            core::AdminChangeOutcome::Kind::kTransferred, "", node->leader_client_address(), {}});
      } else {
        done(core::AdminChangeOutcome{
            core::AdminChangeOutcome::Kind::kFailed,
            "no other voter took over within an election timeout; this node still leads",
            "",
            {}});
      }
    });
  } else if (add) {
    log_event(LogLevel::kInfo, "admin_cluster_request",
              "cluster: admin request: add voter " + std::to_string(add->id) + " (raft " +
                  add->raft_address + ", clients " + add->client_address + ")",
              {{"action", "add_voter"},
               {"node_id", add->id},
               {"raft_address", add->raft_address},
               {"client_address", add->client_address}});
    node->add_voter(*add, std::move(done));
  } else {
    log_event(LogLevel::kInfo, "admin_cluster_request",
              "cluster: admin request: remove voter " + std::to_string(remove_id),
              {{"action", "remove_voter"}, {"node_id", remove_id}});
    node->remove_voter(remove_id, std::move(done));
  }
}

void HttpServer::finish_admin(std::uint64_t ticket, const core::AdminChangeOutcome& outcome) {
  auto it = pending_.find(ticket);
  if (it == pending_.end() || stopped_) return;  // its client left
  Pending& pending = *it->second;
  const core::HttpResponse response = core::render_admin_outcome(outcome);
  if (!response.leader.empty()) {
    evhttp_add_header(evhttp_request_get_output_headers(pending.request), "X-Dflockd-Leader",
                      response.leader.c_str());
  }
  reply(pending.request, response.code, response.body, pending.route, pending.method,
        pending.started);
  drop_pending(ticket);
}

namespace {

// A key as a log line shows it: bytes outside printable ASCII as \xNN (a key has no whitespace,
// but may hold any other byte).
std::string printable_key(std::string_view key) {
  std::string out;
  for (const char c : key) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x21 && byte <= 0x7e && c != '\\') {
      out += c;
    } else {
      char escaped[5];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
      out += escaped;
    }
  }
  return out;
}

}  // namespace

void HttpServer::run_key_request(evhttp_request* request, const core::HttpEndpointSpec& spec,
                                 const std::string& key, std::string_view method,
                                 core::Instant started, std::string admin_peer) {
  const std::string_view route = spec.pattern;
  const evhttp_uri* uri = evhttp_request_get_evhttp_uri(request);
  const char* query = uri != nullptr ? evhttp_uri_get_query(uri) : nullptr;
  std::variant<core::HttpBadRequest, core::Request> decoded = core::decode_http_key_request(
      spec.endpoint, key, request_body(request), query != nullptr ? query : "");
  if (const auto* bad = std::get_if<core::HttpBadRequest>(&decoded)) {
    reply_error(request, 400, "bad_request", bad->detail, route, method, started);
    return;
  }
  const core::Request engine_request = std::get<core::Request>(std::move(decoded));
  Pending pending = Pending::of(Pending::Kind::kKey, method, route, started);
  pending.stats_session = host_.router().new_session_id();
  const core::SessionId session = pending.stats_session;
  const std::uint64_t ticket = add_pending(request, std::move(pending));
  key_requests_[session.value] = KeyRequest{ticket, engine_request, std::move(admin_peer)};
  host_.router().submit(started, session, engine_request);
}

void HttpServer::finish_key(KeyRequest& key, const core::Reply& reply) {
  const core::Request& request = key.request;
  if (!key.admin_peer.empty()) {
    const std::string what =
        (request.fence == 0 ? std::string("every holder")
                            : "the holder with fence " + std::to_string(request.fence)) +
        (request.clear_delay ? ", clearing the lock-delay" : "");
    const std::string kind(core::namespace_word(request.space));
    const std::string name = printable_key(request.key);
    if (reply.status == core::Status::kOk) {
      http_shared_.forced_releases.fetch_add(
          static_cast<std::uint64_t>(std::max<std::int64_t>(reply.seconds, 0)),
          std::memory_order_relaxed);
      log_event(LogLevel::kWarn, "admin_force_release",
                "admin: force-release of " + kind + " " + name + " (" + what + ") asked by " +
                    key.admin_peer + " with the admin token: " + std::to_string(reply.seconds) +
                    " freed" + (reply.delay_cleared ? ", lock-delay cleared" : ""),
                {{"peer", key.admin_peer},
                 {"kind", kind},
                 {"key", name},
                 {"fence", request.fence},
                 {"clear_delay", request.clear_delay},
                 {"outcome", "ok"},
                 {"freed", reply.seconds},
                 {"delay_cleared", reply.delay_cleared}});
    } else {
      const std::string status(core::status_name(reply.status));
      log_event(LogLevel::kWarn, "admin_force_release",
                "admin: force-release of " + kind + " " + name + " (" + what + ") asked by " +
                    key.admin_peer + " with the admin token: not done (" + status + ")",
                {{"peer", key.admin_peer},
                 {"kind", kind},
                 {"key", name},
                 {"fence", request.fence},
                 {"outcome", status},
                 {"freed", 0}});
    }
  }
  if (key.ticket == 0) return;  // its client left
  auto found = pending_.find(key.ticket);
  if (found == pending_.end()) return;
  Pending& pending = *found->second;
  const core::HttpResponse response = core::render_http_key_reply(request, reply);
  if (!response.leader.empty()) {
    evhttp_add_header(evhttp_request_get_output_headers(pending.request), "X-Dflockd-Leader",
                      response.leader.c_str());
  }
  reply_to(pending, response.code, response.body);
  drop_pending(key.ticket);
}

void HttpServer::handle_session_request(evhttp_request* request, const core::HttpEndpointSpec& spec,
                                        const std::string& key, std::string_view method,
                                        core::Instant started) {
  const std::string_view route = spec.pattern;
  const std::string_view body = request_body(request);
  const char* header = evhttp_find_header(evhttp_request_get_input_headers(request),
                                          core::kHttpSessionHeader.data());
  auto decoded = core::decode_http_session_request(
      spec.endpoint, key, body,
      header != nullptr ? std::optional<std::string_view>(header) : std::nullopt);
  if (const auto* bad = std::get_if<core::HttpBadRequest>(&decoded)) {
    reply_error(request, 400, "bad_request", bad->detail, route, method, started);
    return;
  }
  const auto& [handle, engine_request] = std::get<core::HttpSessionRequest>(decoded);
  run_session_request(request, route, method, started, [&](core::HttpTicket ticket) {
    desk_.submit(started, ticket, handle, engine_request);
  });
}

template <typename Run>
void HttpServer::run_session_request(evhttp_request* request, std::string_view route,
                                     std::string_view method, core::Instant started, Run run) {
  Pending pending = Pending::of(Pending::Kind::kSession, method, route, started);
  run(add_pending(request, std::move(pending)));
  flush();  // answers at once what needs no engine and no other shard
}

// ---- engine outcomes ---------------------------------------------------------------------------

bool HttpServer::owns(core::SessionId session) const {
  return desk_.owns(session) || stats_tickets_.count(session.value) != 0 ||
         streams_.count(session.value) != 0 || key_requests_.count(session.value) != 0;
}

void HttpServer::on_session_event(core::Instant now, core::SessionEvent& event) {
  in_router_event_ = true;
  struct Reset {
    bool& flag;
    ~Reset() { flag = false; }
  } reset{in_router_event_};
  auto stream = streams_.find(event.session.value);
  if (stream != streams_.end()) {
    on_stream_event(now, *stream->second, event);
    return;
  }
  if (auto key = key_requests_.find(event.session.value); key != key_requests_.end()) {
    if (event.kind != core::SessionEvent::Kind::kReply) return;  // never parks, holds nothing
    KeyRequest done = std::move(key->second);
    key_requests_.erase(key);
    finish_key(done, event.reply);
    return;
  }
  auto it = stats_tickets_.find(event.session.value);
  if (event.kind != core::SessionEvent::Kind::kStats && it == stats_tickets_.end()) {
    desk_.on_session_event(now, event);
    flush();
    return;
  }
  if (it == stats_tickets_.end()) return;  // its client left
  const std::uint64_t ticket = it->second;
  stats_tickets_.erase(it);
  auto found = pending_.find(ticket);
  TS_ASSERT(found != pending_.end());
  if (found->second->kind == Pending::Kind::kReadIndex) {
    finish_read_index(ticket, *found->second, event.reply);
  } else if (found->second->kind == Pending::Kind::kSignal) {
    if (event.reply.status == core::Status::kOk) {
      reply_to(*found->second, 200, core::http_delivered_body(event.reply.seconds));
    } else {
      reply_to(*found->second, 500,
               core::http_error_body("internal", "the signal could not be published"));
    }
    drop_pending(ticket);
  } else {
    finish_stats(ticket, *found->second, event.stats);
  }
}

void HttpServer::finish_read_index(std::uint64_t ticket, Pending& pending,
                                   const core::Reply& reply) {
  if (reply.status == core::Status::kOk) {
    reply_to(pending, 200, core::http_status_body("ok"));
  } else if (reply.status == core::Status::kErrorNotLeader) {
    if (!reply.payload.empty()) {
      evhttp_add_header(evhttp_request_get_output_headers(pending.request), "X-Dflockd-Leader",
                        reply.payload.c_str());
    }
    reply_to(pending, 503, core::http_error_body("not_leader", reply.payload));
  } else {
    reply_to(pending, 500, core::http_error_body("internal", "the barrier was not applied"));
  }
  drop_pending(ticket);
}

void HttpServer::reply_to(Pending& pending, int code, const std::string& body) {
  reply(pending.request, code, body, pending.route, pending.method, pending.started);
}

void HttpServer::on_message(ServiceMessage& message) {
  desk_.receive(host_.turn_now(), std::move(message));
  flush();
}

void HttpServer::finish_stats(std::uint64_t ticket, Pending& pending,
                              const core::StatsSnapshot& snapshot) {
  if (pending.kind == Pending::Kind::kStats) {
    const std::int64_t connections = shared_.connections_open.load(std::memory_order_relaxed) +
                                     shared_.http_sessions_live.load(std::memory_order_relaxed);
    reply(pending.request, 200, core::encode_stats_json(connections, snapshot) + "\n",
          pending.route, pending.method, pending.started);
  } else {
    // The text is rendered before reply() counts this request: a scrape is not in its own
    // text, only in the next one (as Prometheus's promhttp counts its handler after it served).
    reply(pending.request, 200,
          metrics_text({snapshot, shared_, http_shared_, ready(), host_.turn_now() - started_at_}),
          pending.route, pending.method, pending.started,
          "text/plain; version=0.0.4; charset=utf-8");
  }
  drop_pending(ticket);
}

void HttpServer::flush() {
  if (flushing_ || stopped_) return;
  flushing_ = true;
  // Reset however this returns: an exception that guarded() catches must not stop every later
  // flush.
  struct Reset {
    bool& flag;
    ~Reset() { flag = false; }
  } reset{flushing_};
  // A response can close its connection, whose close callback abandons other tickets: loop until
  // nothing is left.
  while (true) {
    std::vector<core::HttpEnvelope> outbox = desk_.take_outbox();
    std::vector<core::HttpReply> replies = desk_.take_replies();
    std::vector<core::HttpWatchEvent> watched = desk_.take_watch_events();
    if (outbox.empty() && replies.empty() && watched.empty()) break;
    for (core::HttpEnvelope& envelope : outbox) {
      if (std::holds_alternative<core::http_message::Forward>(envelope.message)) {
        http_shared_.forwarded.fetch_add(1, std::memory_order_relaxed);
      }
      shared_.shards[envelope.to]->post(std::move(envelope.message));
    }
    for (core::HttpReply& answer : replies) {
      if (auto watch = stream_of_watch_.find(answer.ticket); watch != stream_of_watch_.end()) {
        refuse_watch(*streams_.at(watch->second), answer.outcome);
        continue;
      }
      auto it = pending_.find(answer.ticket);
      if (it == pending_.end()) continue;  // its client left
      Pending& pending = *it->second;
      if (!answer.outcome.leader.empty()) {
        evhttp_add_header(evhttp_request_get_output_headers(pending.request), "X-Dflockd-Leader",
                          answer.outcome.leader.c_str());
      }
      reply(pending.request, answer.outcome.code, answer.outcome.body, pending.route,
            pending.method, pending.started);
      drop_pending(answer.ticket);
    }
    for (core::HttpWatchEvent& event : watched) on_watch_event(event);
  }
  const auto live = static_cast<std::int64_t>(desk_.live());
  shared_.http_sessions_live.fetch_add(live - live_reported_, std::memory_order_relaxed);
  live_reported_ = live;
}

// ---- signals -----------------------------------------------------------------------------------

void HttpServer::publish_signal(evhttp_request* request, const core::HttpEndpointSpec& spec,
                                const std::string& channel, std::string_view method,
                                core::Instant started) {
  const std::string_view route = spec.pattern;
  const std::string_view body = request_body(request);
  std::variant<core::HttpBadRequest, core::Request> decoded =
      core::decode_http_signal(channel, body);
  if (const auto* bad = std::get_if<core::HttpBadRequest>(&decoded)) {
    reply_error(request, 400, "bad_request", bad->detail, route, method, started);
    return;
  }
  if (draining_) {
    reply_error(request, 503, "draining", "", route, method, started);
    return;
  }
  // A session of its own that only signals: the router keeps no state for it (nothing to close).
  Pending pending = Pending::of(Pending::Kind::kSignal, method, route, started);
  pending.stats_session = host_.router().new_session_id();
  const core::SessionId session = pending.stats_session;
  stats_tickets_[session.value] = add_pending(request, std::move(pending));
  host_.router().submit(started, session, std::get<core::Request>(decoded));
}

void HttpServer::open_stream(evhttp_request* request, const core::HttpEndpointSpec& spec,
                             std::string_view method, core::Instant started) {
  const std::string_view route = spec.pattern;
  const evhttp_uri* uri = evhttp_request_get_evhttp_uri(request);
  const char* query = uri != nullptr ? evhttp_uri_get_query(uri) : nullptr;
  std::variant<core::HttpBadRequest, core::Request> decoded =
      core::decode_http_listen(query != nullptr ? query : "");
  if (const auto* bad = std::get_if<core::HttpBadRequest>(&decoded)) {
    reply_error(request, 400, "bad_request", bad->detail, route, method, started);
    return;
  }
  evhttp_connection* connection = evhttp_request_get_connection(request);
  if (draining_ || connection == nullptr) {
    reply_error(request, 503, "draining", "", route, method, started);
    return;
  }
  if (!core::http_reply_has_body(method)) {
    reply_stream_head(request, route, method, started);
    return;
  }
  auto stream = std::make_unique<Stream>();
  stream->session = host_.router().new_session_id();
  stream->request = request;
  stream->connection = connection;
  stream->method = method;
  stream->route = route;
  stream->started = started;
  const core::SessionId session = stream->session;
  if (request == unanswered_) unanswered_ = nullptr;  // answered from streams_
  stream_of_connection_[connection] = session.value;
  streams_.emplace(session.value, std::move(stream));
  // Answered at once by the hub; the reply comes to on_stream_event in this turn's settle().
  host_.router().submit(started, session, std::get<core::Request>(decoded));
}

void HttpServer::open_watch(evhttp_request* request, const core::HttpEndpointSpec& spec,
                            const std::string& handle, std::string_view method,
                            core::Instant started) {
  const std::string_view route = spec.pattern;
  if (!core::is_session_handle(handle)) {
    reply_error(request, 400, "bad_request", "session id must be 32 lowercase hex characters",
                route, method, started);
    return;
  }
  evhttp_connection* connection = evhttp_request_get_connection(request);
  if (draining_ || connection == nullptr) {
    reply_error(request, 503, "draining", "", route, method, started);
    return;
  }
  // A HEAD waits for the desk too: the session's shard says whether its GET would open (200,
  // kOpen below) or be refused (410), and the HEAD answers the same without a body.
  auto stream = std::make_unique<Stream>();
  stream->session = host_.router().new_session_id();  // its id here; the router never sees it
  stream->watch = desk_.new_ticket();
  stream->request = request;
  stream->connection = connection;
  stream->method = method;
  stream->route = route;
  stream->started = started;
  const std::uint64_t id = stream->session.value;
  const core::HttpTicket ticket = stream->watch;
  if (request == unanswered_) unanswered_ = nullptr;  // answered from streams_
  stream_of_connection_[connection] = id;
  stream_of_watch_[ticket] = id;
  streams_.emplace(id, std::move(stream));
  // The session may live on another shard: the answer (a refusal, or kOpen) comes in a flush.
  desk_.watch(started, ticket, handle);
  flush();
}

void HttpServer::refuse_watch(Stream& stream, const core::HttpOutcome& outcome) {
  stream_of_watch_.erase(stream.watch);
  stream.watch_over = true;
  if (stream.open || stream.ending) return;  // a stream the desk already opened is not refused
  reply(stream.request, outcome.code, outcome.body, stream.route, stream.method, stream.started);
  const std::uint64_t id = stream.session.value;
  stream_of_connection_.erase(stream.connection);
  streams_.erase(id);  // destroys `stream`
}

void HttpServer::on_watch_event(core::HttpWatchEvent& event) {
  auto watch = stream_of_watch_.find(event.ticket);
  if (watch == stream_of_watch_.end()) return;  // its stream ended meanwhile
  Stream& stream = *streams_.at(watch->second);
  switch (event.kind) {
    case core::HttpWatchEvent::Kind::kOpen: {
      if (stream.open || stream.ending) return;
      if (core::http_reply_has_body(stream.method)) {
        start_stream(stream);
        return;
      }
      // A HEAD: the stream's head, and the watch goes again at once.
      stream_of_watch_.erase(watch);
      stream.watch_over = true;
      desk_.abandon(host_.turn_now(), stream.watch);
      reply_stream_head(stream.request, stream.route, stream.method, stream.started);
      const std::uint64_t id = stream.session.value;
      stream_of_connection_.erase(stream.connection);
      streams_.erase(id);  // destroys `stream`
      return;
    }
    case core::HttpWatchEvent::Kind::kLost:
      if (stream.open && !stream.ending) {
        (void)write_stream(stream.session, core::http_lost_event(event.slot), 0);
      }
      return;
    case core::HttpWatchEvent::Kind::kEnd: {
      stream_of_watch_.erase(watch);
      stream.watch_over = true;
      const std::uint64_t id = stream.session.value;
      if (stream.open && !stream.ending &&
          !write_stream(stream.session, core::http_stream_end_event(event.reason), 0)) {
        return;  // the write ended it
      }
      auto still = streams_.find(id);
      if (still != streams_.end()) end_stream(*still->second, /*abort=*/false);
      return;
    }
  }
}

void HttpServer::on_stream_event(core::Instant, Stream& stream, core::SessionEvent& event) {
  switch (event.kind) {
    case core::SessionEvent::Kind::kReply: {
      if (stream.open || stream.ending) return;
      if (event.reply.status == core::Status::kOk) {
        stream.listening = true;
        start_stream(stream);
        return;
      }
      // The hub refused the subscription. A stream holds one, which --max-subscriptions (a cap
      // per session, at least 1 when set) always allows; --max-subscriptions-total may not.
      const core::HttpResponse refused = core::render_http_listen_refusal(event.reply.status);
      reply(stream.request, refused.code, refused.body, stream.route, stream.method,
            stream.started);
      const std::uint64_t id = stream.session.value;
      stream_of_connection_.erase(stream.connection);
      streams_.erase(id);  // destroys `stream`
      return;
    }
    case core::SessionEvent::Kind::kSignal: {
      if (stream.ending) return;  // the router has forgotten it
      if (event.frame != sse_frame_ || sse_event_ == nullptr) {
        sse_frame_ = event.frame;
        sse_event_ = std::make_shared<const std::string>(core::http_signal_event(*event.frame));
      }
      const std::shared_ptr<const std::string> held = sse_event_;  // kept while it is written
      const std::string& sse = *held;
      if (sse.empty()) {
        host_.router().signals_written(stream.session, 1);  // not a frame: nothing to write
        return;
      }
      if (!stream.open) {
        stream.backlog += sse;
        ++stream.backlog_frames;
        return;
      }
      (void)write_stream(stream.session, sse, 1);
      return;
    }
    case core::SessionEvent::Kind::kSlowConsumer:
      log_event(
          LogLevel::kInfo, "slow_consumer",
          "HTTP: signal stream " + std::to_string(stream.session.value) +
              " closed, a slow signal consumer",
          {{"transport", "http"}, {"session", stream.session.value}, {"reason", "signal_queue"}});
      end_stream(stream, /*abort=*/true);
      return;
    default:
      return;  // a stream sends nothing else
  }
}

void HttpServer::reply_stream_head(evhttp_request* request, std::string_view route,
                                   std::string_view method, core::Instant started) {
  evkeyvalq* headers = evhttp_request_get_output_headers(request);
  evhttp_add_header(headers, "Content-Type", "text/event-stream");
  evhttp_add_header(headers, "Cache-Control", "no-cache");
  evhttp_add_header(headers, "X-Content-Type-Options", "nosniff");
  if (request == unanswered_) unanswered_ = nullptr;
  http_shared_.record(method, route, 200, (host_.turn_now() - started).seconds_double());
  evhttp_send_reply(request, 200, "OK", nullptr);
}

void HttpServer::start_stream(Stream& stream) {
  evkeyvalq* headers = evhttp_request_get_output_headers(stream.request);
  evhttp_remove_header(headers, "Content-Type");
  evhttp_add_header(headers, "Content-Type", "text/event-stream");
  evhttp_add_header(headers, "Cache-Control", "no-cache");
  evhttp_add_header(headers, "X-Content-Type-Options", "nosniff");
  http_shared_.record(stream.method, stream.route, 200,
                      (host_.turn_now() - stream.started).seconds_double());
  bufferevent* bev = evhttp_connection_get_bufferevent(stream.connection);
  const std::size_t before = bev != nullptr ? evbuffer_get_length(bufferevent_get_output(bev)) : 0;
  evhttp_send_reply_start(stream.request, 200, "OK");
  stream.open = true;
  stream.last_progress = host_.turn_now();
  if (bev != nullptr) {
    const std::size_t after = evbuffer_get_length(bufferevent_get_output(bev));
    stream.handed += after > before ? after - before : 0;
    // evhttp's timeouts would end the stream after --read-timeout without a byte from the
    // client (it sends nothing more; its leaving is still seen), and every chunk would restart
    // its write timeout: none. on_stream_watch keeps the write deadline.
    bufferevent_set_timeouts(bev, nullptr, nullptr);
  }
  stream.ping_arg =
      std::make_unique<std::pair<HttpServer*, std::uint64_t>>(this, stream.session.value);
  stream.ping =
      event_new(host_.base(), -1, EV_PERSIST, &HttpServer::on_stream_ping, stream.ping_arg.get());
  const timeval interval = to_timeval(core::Duration::seconds(config_.http_sse_ping_interval_s));
  event_add(stream.ping, &interval);
  std::string first = ":ok\n\n";
  first += stream.backlog;
  const std::size_t frames = stream.backlog_frames;
  stream.backlog.clear();
  stream.backlog_frames = 0;
  (void)write_stream(stream.session, first, frames);
}

bool HttpServer::write_stream(core::SessionId id, std::string_view bytes, std::size_t frames) {
  auto it = streams_.find(id.value);
  if (it == streams_.end()) return false;
  Stream& stream = *it->second;
  if (!stream.open || stream.ending) return false;
  bufferevent* bev = evhttp_connection_get_bufferevent(stream.connection);
  if (bev != nullptr && evbuffer_get_length(bufferevent_get_output(bev)) > kStreamOutputMax) {
    log_event(
        LogLevel::kInfo, "slow_consumer",
        "HTTP: event stream " + std::to_string(id.value) + " closed, its client does not read",
        {{"transport", "http"}, {"session", id.value}, {"reason", "output_full"}});
    end_stream(stream, /*abort=*/true);
    return false;
  }
  // Counted first: the drained callback can run inside the write (a TLS write goes out at once).
  stream.unreported += frames;
  evbuffer* chunk = evbuffer_new();
  if (chunk == nullptr) throw std::bad_alloc();
  evbuffer_add(chunk, bytes.data(), bytes.size());
  const std::size_t before = bev != nullptr ? evbuffer_get_length(bufferevent_get_output(bev)) : 0;
  evhttp_send_reply_chunk_with_cb(stream.request, chunk, &HttpServer::on_stream_drained, this);
  evbuffer_free(chunk);
  it = streams_.find(id.value);
  if (it == streams_.end()) return false;  // the write failed its connection
  // The chunk with its framing (a part written out at once is not counted: progress is then
  // seen later, never early).
  const std::size_t after = bev != nullptr ? evbuffer_get_length(bufferevent_get_output(bev)) : 0;
  it->second->handed += after > before ? after - before : 0;
  return true;
}

void HttpServer::on_stream_watch(evutil_socket_t, short, void* self) {
  auto* server = static_cast<HttpServer*>(self);
  guarded("HTTP signal stream watch", [server] {
    if (server->watch_streams(server->host_.turn_now())) {
      server->flush();
      server->host_.settle();
    }
  });
}

bool HttpServer::watch_streams(core::Instant now) {
  bool ended = false;
  for (auto& [id, stream] : streams_) {
    if (!stream->open || stream->ending) continue;
    bufferevent* bev = evhttp_connection_get_bufferevent(stream->connection);
    if (bev == nullptr) continue;
    const std::size_t waiting = evbuffer_get_length(bufferevent_get_output(bev));
    const std::size_t drained = stream->handed > waiting ? stream->handed - waiting : 0;
    if (waiting == 0 || drained > stream->drained) {
      stream->drained = std::max(stream->drained, drained);
      stream->last_progress = now;
      continue;
    }
    if (now - stream->last_progress >= kStreamWriteDeadline) {
      log_event(LogLevel::kInfo, "slow_consumer",
                "HTTP: event stream " + std::to_string(id) + " closed, no write progress for 30 s",
                {{"transport", "http"}, {"session", id}, {"reason", "no_write_progress"}});
      end_stream(*stream, /*abort=*/true);
      ended = true;
    }
  }
  return ended;
}

// Every byte handed to the connection has left it: the frames among them are written.
void HttpServer::on_stream_drained(evhttp_connection* connection, void* self) {
  auto* server = static_cast<HttpServer*>(self);
  guarded("HTTP signal stream", [&] {
    auto it = server->stream_of_connection_.find(connection);
    if (it == server->stream_of_connection_.end()) return;
    Stream& stream = *server->streams_.at(it->second);
    if (!stream.listening || stream.unreported == 0) return;
    server->host_.router().signals_written(stream.session, stream.unreported);
    stream.unreported = 0;
  });
}

void HttpServer::on_stream_ping(evutil_socket_t, short, void* arg) {
  const auto [server, id] = *static_cast<std::pair<HttpServer*, std::uint64_t>*>(arg);
  guarded("HTTP signal stream ping", [server, id] {
    auto it = server->streams_.find(id);
    if (it == server->streams_.end()) return;
    // Whatever the client sent since is not a request (evhttp reads no more on this connection):
    // dropped, so that it cannot pile up.
    if (bufferevent* bev = evhttp_connection_get_bufferevent(it->second->connection);
        bev != nullptr) {
      evbuffer* input = bufferevent_get_input(bev);
      evbuffer_drain(input, evbuffer_get_length(input));
    }
    (void)server->write_stream(core::SessionId{id}, ":ping\n\n", 0);
    server->flush();
    server->host_.settle();
  });
}

void HttpServer::end_stream(Stream& stream, bool abort) {
  stream.abort = stream.abort || abort;
  if (stream.ending) return;
  stream.ending = true;
  if (stream.listening) {
    host_.router().close(host_.turn_now(), stream.session);
    stream.listening = false;
  }
  if (stream.watch != 0 && !stream.watch_over) {
    // The desk stops the watch; the caller flushes what that produced.
    stream.watch_over = true;
    stream_of_watch_.erase(stream.watch);
    desk_.abandon(host_.turn_now(), stream.watch);
  }
  if (stream.ping != nullptr) event_free(stream.ping);
  stream.ping = nullptr;
  streams_ending_.push_back(stream.session.value);
  if (end_streams_ != nullptr) event_active(end_streams_, EV_TIMEOUT, 0);
}

void HttpServer::on_end_streams(evutil_socket_t, short, void* self) {
  auto* server = static_cast<HttpServer*>(self);
  guarded("HTTP signal stream end", [server] {
    server->finish_ending_streams();
    server->flush();
    server->host_.settle();
  });
}

void HttpServer::finish_ending_streams() {
  std::vector<std::uint64_t> ending;
  ending.swap(streams_ending_);
  for (const std::uint64_t id : ending) {
    auto it = streams_.find(id);
    if (it == streams_.end()) continue;  // its connection closed meanwhile
    const std::unique_ptr<Stream> stream = std::move(it->second);
    streams_.erase(it);
    stream_of_connection_.erase(stream->connection);
    if (!stream->open) {
      reply_error(stream->request, 503, "draining", "", stream->route, stream->method,
                  stream->started);
    } else if (stream->abort) {
      // Frees the request too; the close callback finds no stream.
      evhttp_connection_free(stream->connection);
    } else {
      // The last chunk; the connection may stay, with evhttp's timeout back for what follows.
      evhttp_connection_set_timeout(stream->connection, static_cast<int>(std::min<std::int64_t>(
                                                            config_.read_timeout_s, 120)));
      evhttp_send_reply_end(stream->request);
    }
  }
}

void HttpServer::drop_stream(evhttp_connection* connection) {
  auto it = stream_of_connection_.find(connection);
  if (it == stream_of_connection_.end()) return;
  const std::uint64_t id = it->second;
  stream_of_connection_.erase(it);
  auto found = streams_.find(id);
  if (found == streams_.end()) return;
  const std::unique_ptr<Stream> stream = std::move(found->second);
  streams_.erase(found);
  if (stream->listening) host_.router().close(host_.turn_now(), stream->session);
  if (stream->watch != 0 && !stream->watch_over) {
    stream_of_watch_.erase(stream->watch);
    desk_.abandon(host_.turn_now(), stream->watch);
  }
  if (stream->ping != nullptr) event_free(stream->ping);
  // libevent detaches a reply in progress from a connection it fails (the client left): that
  // request is ours to free. One still attached goes with the connection.
  if (evhttp_request_get_connection(stream->request) == nullptr) {
    evhttp_request_free(stream->request);
  }
  logf(LogLevel::kDebug, "HTTP: event stream %llu ended, its connection closed",
       static_cast<unsigned long long>(id));
}

// ---- metrics -----------------------------------------------------------------------------------

bool HttpServer::ready() const {
  // A cluster node that knows no leader can take no request that changes anything.
  return !draining_ && (shared_.cluster == nullptr || shared_.cluster->leader_known());
}

}  // namespace turnstile::net
