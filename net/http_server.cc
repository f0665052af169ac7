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
#include "net/guard.h"
#include "net/http_server_internal.h"
#include "net/listener.h"
#include "net/log.h"
#include "net/metrics_text.h"

namespace turnstile::net {
namespace {

#include "net/openapi_json.inc"  // kOpenApiJson: docs/openapi.json, embedded at configure time

constexpr const char* kJsonType = "application/json";
// Bodies up to this are read (and answered 400 when over core::kHttpBodyMax, as dflockd); beyond
// it libevent refuses the request itself (413) before reading it.
constexpr std::size_t kBodyReadMax = 2 * core::kHttpBodyMax;
constexpr core::Duration kRateSweepInterval = core::Duration::seconds(300);
// How often the sockets of requests waiting for an engine are checked for EOF (libevent 2.1's
// evhttp does not read a connection while its request is being answered, so it would not notice
// a client that left; dflockd's watcher polls every 50 ms too).
constexpr core::Duration kProbeInterval = core::Duration::milliseconds(50);

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

std::optional<std::string> HttpServer::admit_peer(evhttp_request* request, std::string_view method,
                                                  core::Instant started) {
  evhttp_connection* connection = evhttp_request_get_connection(request);
  if (connection == nullptr) return std::string("unknown");
  // Per-IP transport cap, counted per connection on its first request.
  auto known = connection_ip_.find(connection);
  if (known != connection_ip_.end()) return known->second;
  std::string ip = peer_of(connection).address;
  if (!http_shared_.admit_connection(ip)) {
    evhttp_add_header(evhttp_request_get_output_headers(request), "Connection", "close");
    reply_error(request, 503, "max_connections_per_ip", "", "unmatched", method, started);
    return std::nullopt;
  }
  connection_ip_.emplace(connection, ip);
  evhttp_connection_set_closecb(connection, &HttpServer::on_connection_closed, this);
  return ip;
}

bool HttpServer::answer_cors(evhttp_request* request, std::string_view method,
                             core::Instant started) {
  // CORS (reference 3.2): before everything else.
  evkeyvalq* in = evhttp_request_get_input_headers(request);
  const char* origin = evhttp_find_header(in, "Origin");
  if (!cors_.enabled() || origin == nullptr) return false;
  evkeyvalq* out = evhttp_request_get_output_headers(request);
  for (const auto& [name, value] : cors_.headers_for(origin)) {
    evhttp_add_header(out, std::string(name).c_str(), value.c_str());
  }
  if (method == "OPTIONS" && evhttp_find_header(in, "Access-Control-Request-Method") != nullptr) {
    reply(request, 204, "", "preflight", method, started);
    return true;
  }
  return false;
}

void HttpServer::handle(evhttp_request* request) {
  const core::Instant started = host_.turn_now();
  const std::string_view method = method_name(evhttp_request_get_command(request));
  evkeyvalq* in = evhttp_request_get_input_headers(request);
  evkeyvalq* out = evhttp_request_get_output_headers(request);
  const std::optional<std::string> ip = admit_peer(request, method, started);
  if (!ip) return;  // over the per-IP connection cap: answered

  const evhttp_uri* uri = evhttp_request_get_evhttp_uri(request);
  const char* raw_path = uri != nullptr ? evhttp_uri_get_path(uri) : nullptr;
  const std::string path = raw_path != nullptr ? raw_path : "/";

  if (answer_cors(request, method, started)) return;  // a preflight

  // Route lookup: 404 for an unknown path, 405 (with Allow) for a known path and another method.
  core::HttpRouteMatch matched = core::match_http_route(method, path);
  const core::HttpEndpointSpec* spec = matched.spec;
  const std::string& allow = matched.allow;
  const std::string_view route = spec != nullptr ? spec->pattern : "unmatched";

  // Rate limit, then auth, then the router's 404/405 (reference 3.1's handler order).
  const bool exempt = spec != nullptr && !spec->rate_limited;
  if (!exempt && !http_shared_.rate_allow(started, *ip)) {
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

void HttpServer::dispatch_route(evhttp_request* request, const core::HttpEndpointSpec& spec,
                                const std::vector<std::string>& params, std::string_view method,
                                core::Instant started) {
  switch (spec.endpoint) {
    case core::HttpEndpoint::kHealth:
    case core::HttpEndpoint::kReady:
    case core::HttpEndpoint::kOpenApi:
      reply_probe(request, spec, method, started);
      return;
    case core::HttpEndpoint::kStats:
    case core::HttpEndpoint::kMetrics:
    case core::HttpEndpoint::kReadIndex:
      run_one_shot(request, spec, method, started);
      return;
    case core::HttpEndpoint::kSessionCreate:
      create_session(request, spec, method, started);
      return;
    case core::HttpEndpoint::kSessionDelete:
    case core::HttpEndpoint::kSessionPing:
      delete_or_ping_session(request, spec, params.at(0), method, started);
      return;
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

void HttpServer::reply_probe(evhttp_request* request, const core::HttpEndpointSpec& spec,
                             std::string_view method, core::Instant started) {
  const std::string_view route = spec.pattern;
  if (spec.endpoint == core::HttpEndpoint::kOpenApi) {
    evhttp_add_header(evhttp_request_get_output_headers(request), "Cache-Control",
                      "public, max-age=60");
    reply(request, 200, std::string(kOpenApiJson), route, method, started);
    return;
  }
  std::string_view status = "ok";
  if (spec.endpoint == core::HttpEndpoint::kHealth) {
    if (shared_.starting.load(std::memory_order_relaxed)) status = "starting";
  } else if (draining_) {
    status = "draining";
  } else if (!ready()) {
    status = "no_leader";
  }
  reply(request, status == "ok" ? 200 : 503, core::http_status_body(status), route, method,
        started);
}

void HttpServer::run_one_shot(evhttp_request* request, const core::HttpEndpointSpec& spec,
                              std::string_view method, core::Instant started) {
  core::Request one_shot;
  Pending::Kind kind = Pending::Kind::kStats;
  one_shot.command = core::Command::kStats;
  if (spec.endpoint == core::HttpEndpoint::kMetrics) {
    kind = Pending::Kind::kMetrics;
  } else if (spec.endpoint == core::HttpEndpoint::kReadIndex) {
    // A linearizable read point: a barrier through the log, answered once it is applied.
    if (!shared_.config.cluster.enabled()) {
      reply_error(request, 404, "cluster_disabled", "readindex needs cluster mode", spec.pattern,
                  method, started);
      return;
    }
    kind = Pending::Kind::kReadIndex;
    one_shot.command = core::Command::kBarrier;
  }
  // A session of its own, answered by the router's reply (or stats event) for it.
  Pending pending = Pending::of(kind, method, spec.pattern, started);
  pending.stats_session = host_.router().new_session_id();
  const core::SessionId session = pending.stats_session;
  stats_tickets_[session.value] = add_pending(request, std::move(pending));
  host_.router().submit(started, session, one_shot);
}

void HttpServer::create_session(evhttp_request* request, const core::HttpEndpointSpec& spec,
                                std::string_view method, core::Instant started) {
  std::variant<core::HttpBadRequest, std::string> stable_ref =
      core::decode_http_session_create(request_body(request));
  if (const auto* bad = std::get_if<core::HttpBadRequest>(&stable_ref)) {
    reply_error(request, 400, "bad_request", bad->detail, spec.pattern, method, started);
    return;
  }
  const HttpPeer peer = peer_of(evhttp_request_get_connection(request));
  const core::HttpResponse outcome =
      desk_.create(started, random_, peer.address, std::get<std::string>(stable_ref));
  flush();  // counts the new session before the client can see it
  reply(request, outcome.code, outcome.body, spec.pattern, method, started);
}

void HttpServer::delete_or_ping_session(evhttp_request* request, const core::HttpEndpointSpec& spec,
                                        const std::string& handle, std::string_view method,
                                        core::Instant started) {
  if (!core::is_session_handle(handle)) {
    reply_error(request, 400, "bad_request", "session id must be 32 lowercase hex characters",
                spec.pattern, method, started);
    return;
  }
  const bool remove = spec.endpoint == core::HttpEndpoint::kSessionDelete;
  run_session_request(request, spec.pattern, method, started, [&](core::HttpTicket ticket) {
    if (remove) {
      desk_.remove(started, ticket, handle);
    } else {
      desk_.ping(started, ticket, handle);
    }
  });
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
    reply_to(pending, core::HttpResponse{503, core::http_error_body("not_leader", reply.payload),
                                         reply.payload});
  } else {
    reply_to(pending, 500, core::http_error_body("internal", "the barrier was not applied"));
  }
  drop_pending(ticket);
}

void HttpServer::reply_to(Pending& pending, int code, const std::string& body) {
  reply(pending.request, code, body, pending.route, pending.method, pending.started);
}

void HttpServer::reply_to(Pending& pending, const core::HttpResponse& response) {
  if (!response.leader.empty()) {
    evhttp_add_header(evhttp_request_get_output_headers(pending.request), "X-Dflockd-Leader",
                      response.leader.c_str());
  }
  reply_to(pending, response.code, response.body);
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
      reply_to(*it->second, answer.outcome);
      drop_pending(answer.ticket);
    }
    for (core::HttpWatchEvent& event : watched) on_watch_event(event);
  }
  const auto live = static_cast<std::int64_t>(desk_.live());
  shared_.http_sessions_live.fetch_add(live - live_reported_, std::memory_order_relaxed);
  live_reported_ = live;
}

// ---- metrics -----------------------------------------------------------------------------------

bool HttpServer::ready() const {
  // A cluster node that knows no leader can take no request that changes anything.
  return !draining_ && (shared_.cluster == nullptr || shared_.cluster->leader_known());
}

}  // namespace turnstile::net
