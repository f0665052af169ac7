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
      api_(
          [&] {
            core::HttpApiConfig config;
            config.auth_token = shared.config.auth_token;
            config.admin_token = shared.config.cluster.admin_token;
            config.cors_allowed_origins = shared.config.http_cors_allowed_origins;
            return config;
          }(),
          desk_, host.router(), *this, random_),
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
  api_timer_ = event_new(host_.base(), -1, 0, &HttpServer::on_api_deadline, this);
  end_streams_ = event_new(host_.base(), -1, 0, &HttpServer::on_end_streams, this);
  stream_watch_ = event_new(host_.base(), -1, EV_PERSIST, &HttpServer::on_stream_watch, this);
  const timeval watch = to_timeval(kStreamWatchInterval);
  event_add(stream_watch_, &watch);
  return true;
}

void HttpServer::stop() {
  if (stopped_) return;
  stopped_ = true;
  if (api_timer_ != nullptr) event_free(api_timer_);
  api_timer_ = nullptr;
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
  api_.begin_drain();
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
                       std::string_view content_type) {
  if (request == unanswered_) unanswered_ = nullptr;
  http_shared_.record(method, route, code, (host_.turn_now() - started).seconds_double());
  evkeyvalq* headers = evhttp_request_get_output_headers(request);
  const std::string type(content_type);
  // evhttp adds its default type (application/json) itself to a response that has a body.
  if (!body.empty() && content_type != kJsonType) {
    evhttp_remove_header(headers, "Content-Type");
    evhttp_add_header(headers, "Content-Type", type.c_str());
  }
  evhttp_add_header(headers, "X-Content-Type-Options", "nosniff");
  if (core::http_reply_has_body(method_name(evhttp_request_get_command(request)))) {
    evbuffer_add(evhttp_request_get_output_buffer(request), body.data(), body.size());
  } else {
    // HEAD: the GET's headers without its body. evhttp adds neither the length nor the default
    // type to a HEAD reply, so both are set here.
    if (!body.empty() && evhttp_find_header(headers, "Content-Type") == nullptr) {
      evhttp_add_header(headers, "Content-Type", type.c_str());
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

void HttpServer::write_response(evhttp_request* request, const core::HttpApiResponse& response) {
  evkeyvalq* out = evhttp_request_get_output_headers(request);
  for (const auto& [name, value] : response.headers) {
    evhttp_add_header(out, name.c_str(), value.c_str());
  }
  reply(request, response.response.code, response.response.body, response.route, response.method,
        response.started, response.content_type);
}

std::uint64_t HttpServer::add_pending(evhttp_request* request, std::string_view method,
                                      core::Instant started) {
  const std::uint64_t ticket = api_.new_ticket();
  if (request == unanswered_) unanswered_ = nullptr;  // answered later, from pending_
  auto pending = std::make_unique<Pending>();
  pending->request = request;
  pending->connection = evhttp_request_get_connection(request);
  pending->method = method;
  pending->started = started;
  if (pending->connection != nullptr) by_connection_[pending->connection].push_back(ticket);
  pending_.emplace(ticket, std::move(pending));
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
    api_.client_left(host_.turn_now(), ticket);
    logf(LogLevel::kDebug, "HTTP: client left during %.*s", static_cast<int>(pending.method.size()),
         pending.method.data());
    // A request libevent has detached from its connection is ours to free; one still attached
    // is freed by libevent with the connection.
    if (evhttp_request_get_connection(pending.request) == nullptr) {
      evhttp_send_reply(pending.request, 499, nullptr, nullptr);
    }
    pending_.erase(found);
  }
  flush();
  // A write inside a router event can fail its connection at once (TLS): the shard's settle()
  // in progress delivers what this produced, in order.
  if (!in_router_event_) host_.settle();
}

void HttpServer::on_api_deadline(evutil_socket_t, short, void* self) {
  auto* server = static_cast<HttpServer*>(self);
  guarded("HTTP API deadline", [server] {
    server->api_armed_.reset();
    // libevent measures timeouts from the time it cached at the start of the loop turn that armed
    // the timer, so it can fire a few milliseconds early; the API answers only what is due, and
    // flush() arms the timer again for the rest.
    server->api_.tick(server->host_.turn_now());
    server->flush();
    server->host_.settle();
  });
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
      api_.client_left(host_.turn_now(), ticket);
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

core::HttpApiRequest HttpServer::parse(evhttp_request* request, std::string_view method,
                                       const std::string& ip) {
  core::HttpApiRequest parsed;
  parsed.method = method;
  const evhttp_uri* uri = evhttp_request_get_evhttp_uri(request);
  const char* path = uri != nullptr ? evhttp_uri_get_path(uri) : nullptr;
  const char* query = uri != nullptr ? evhttp_uri_get_query(uri) : nullptr;
  parsed.path = path != nullptr ? path : "/";
  if (query != nullptr) parsed.query = query;
  parsed.body = std::string(request_body(request));
  evkeyvalq* in = evhttp_request_get_input_headers(request);
  auto header = [in](const char* name) -> std::optional<std::string> {
    const char* value = evhttp_find_header(in, name);
    return value != nullptr ? std::optional<std::string>(value) : std::nullopt;
  };
  parsed.authorization = header("Authorization");
  parsed.session = header(core::kHttpSessionHeader.data());
  parsed.origin = header("Origin");
  parsed.preflight = evhttp_find_header(in, "Access-Control-Request-Method") != nullptr;
  parsed.peer_address = ip;
  parsed.peer_port = peer_of(evhttp_request_get_connection(request)).port;
  return parsed;
}

void HttpServer::handle(evhttp_request* request) {
  const core::Instant started = host_.turn_now();
  const std::string_view method = method_name(evhttp_request_get_command(request));
  const std::optional<std::string> ip = admit_peer(request, method, started);
  if (!ip) return;  // over the per-IP connection cap: answered
  core::HttpApiRequest parsed = parse(request, method, *ip);
  parsed.ticket = add_pending(request, method, started);
  const std::optional<core::HttpApi::StreamRoute> stream = api_.handle(started, parsed);
  if (!stream) return;  // answered now, or in a later flush
  drop_pending(parsed.ticket);
  unanswered_ = request;  // the stream answers it (or fail() does)
  open_stream_route(request, *stream, method, started);
}

// ---- engine outcomes ---------------------------------------------------------------------------

bool HttpServer::owns(core::SessionId session) const {
  return api_.owns(session) || streams_.count(session.value) != 0;
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
  api_.on_session_event(now, event);
  flush();
}

void HttpServer::on_message(ServiceMessage& message) {
  api_.receive(host_.turn_now(), std::move(message));
  flush();
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
    std::vector<core::HttpEnvelope> outbox = api_.take_outbox();
    std::vector<core::HttpApiResponse> responses = api_.take_responses();
    std::vector<core::HttpWatchEvent> watched = api_.take_watch_events();
    if (outbox.empty() && responses.empty() && watched.empty()) break;
    // Counts a new session before its client can see it.
    const auto live = static_cast<std::int64_t>(desk_.live());
    shared_.http_sessions_live.fetch_add(live - live_reported_, std::memory_order_relaxed);
    live_reported_ = live;
    for (core::HttpEnvelope& envelope : outbox) {
      if (std::holds_alternative<core::http_message::Forward>(envelope.message)) {
        http_shared_.forwarded.fetch_add(1, std::memory_order_relaxed);
      }
      shared_.shards[envelope.to]->post(std::move(envelope.message));
    }
    for (core::HttpApiResponse& response : responses) {
      if (auto watch = stream_of_watch_.find(response.ticket); watch != stream_of_watch_.end()) {
        refuse_watch(*streams_.at(watch->second), response.response);
        continue;
      }
      auto it = pending_.find(response.ticket);
      if (it == pending_.end()) continue;  // its client left
      write_response(it->second->request, response);
      drop_pending(response.ticket);
    }
    for (core::HttpWatchEvent& event : watched) on_watch_event(event);
  }
  const auto live = static_cast<std::int64_t>(desk_.live());
  shared_.http_sessions_live.fetch_add(live - live_reported_, std::memory_order_relaxed);
  live_reported_ = live;
  const std::optional<core::Instant> next = api_.next_deadline();
  if (next && api_timer_ != nullptr && (!api_armed_ || *next < *api_armed_)) {
    const core::Duration wait = *next - host_.turn_now();
    const timeval in = to_timeval(wait.ns() > 0 ? wait : core::Duration::milliseconds(1));
    evtimer_add(api_timer_, &in);
    api_armed_ = next;
  }
}

// ---- what the API asks of the process ----------------------------------------------------------

bool HttpServer::rate_allow(core::Instant now, const std::string& ip) {
  return http_shared_.rate_allow(now, ip);
}

bool HttpServer::starting() const { return shared_.starting.load(std::memory_order_relaxed); }

bool HttpServer::cluster_mode() const { return shared_.cluster != nullptr; }

bool HttpServer::leader_known() const {
  // A cluster node that knows no leader can take no request that changes anything.
  return shared_.cluster == nullptr || shared_.cluster->leader_known();
}

std::int64_t HttpServer::connections() const {
  return shared_.connections_open.load(std::memory_order_relaxed) +
         shared_.http_sessions_live.load(std::memory_order_relaxed);
}

std::string HttpServer::metrics_text(const core::StatsSnapshot& snapshot, bool ready) {
  return net::metrics_text(
      {snapshot, shared_, http_shared_, ready, host_.turn_now() - started_at_});
}

std::string_view HttpServer::openapi_json() const { return kOpenApiJson; }

}  // namespace turnstile::net
