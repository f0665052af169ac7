// HttpServer's Server-Sent Event streams: GET /v1/signals (a router session that listens to one
// pattern) and GET /v1/sessions/{id}/events (a watch of core::HttpSessionRouter). Opening one,
// writing its events as chunks, the ping timer, the write deadline, reporting written frames to
// the router, and ending it (net/http_server.h describes the rules).
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/keyvalq_struct.h>

#include <algorithm>
#include <new>
#include <string>
#include <variant>
#include <vector>

#include "core/http_codec.h"
#include "net/clock.h"
#include "net/guard.h"
#include "net/http_server.h"
#include "net/http_server_internal.h"
#include "net/log.h"

namespace turnstile::net {

void HttpServer::open_stream_route(evhttp_request* request, const core::HttpApi::StreamRoute& route,
                                   std::string_view method, core::Instant started) {
  evkeyvalq* out = evhttp_request_get_output_headers(request);
  for (const auto& [name, value] : route.headers) {
    evhttp_add_header(out, name.c_str(), value.c_str());
  }
  if (route.spec->endpoint == core::HttpEndpoint::kSignalStream) {
    open_stream(request, *route.spec, method, started);
  } else {
    open_watch(request, *route.spec, route.params.at(0), method, started);
  }
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

void HttpServer::refuse_watch(Stream& stream, const core::HttpResponse& outcome) {
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

}  // namespace turnstile::net
