// What the files of HttpServer share (net/http_server.h): a request waiting for its answer
// (Pending), a Server-Sent Event stream (Stream), the request body and peer, and the constants.
// net/http_server.cc takes requests and writes responses; net/http_admin.cc runs membership
// changes and logs force-releases; net/http_streams.cc runs the streams.
//
// Thread affinity: the hosting shard's thread, as HttpServer.
#pragma once

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "core/http_session_router.h"
#include "core/time.h"
#include "core/types.h"
#include "net/http_server.h"

namespace turnstile::net {

// The request's body, contiguous (at most kBodyReadMax bytes: evhttp refuses longer ones itself).
inline std::string_view request_body(evhttp_request* request) {
  evbuffer* input = evhttp_request_get_input_buffer(request);
  const std::size_t length = evbuffer_get_length(input);
  if (length == 0) return {};
  return {reinterpret_cast<const char*>(evbuffer_pullup(input, -1)), length};
}

// A connection's peer: its address ("unknown" when evhttp does not know it) and port.
struct HttpPeer {
  std::string address = "unknown";
  std::uint16_t port = 0;
};
inline HttpPeer peer_of(evhttp_connection* connection) {
  HttpPeer peer;
  char* address = nullptr;
  ev_uint16_t port = 0;
  if (connection != nullptr) evhttp_connection_get_peer(connection, &address, &port);
  if (address != nullptr) peer.address = address;
  peer.port = port;
  return peer;
}

// A stream whose connection takes no bytes for this long while some wait is closed (dflockd's
// deadline on every SSE write), checked this often.
inline constexpr core::Duration kStreamWriteDeadline = core::Duration::seconds(30);
inline constexpr core::Duration kStreamWatchInterval = core::Duration::seconds(1);
// A backstop beside the hub's --signal-queue: a stream with more than this waiting in its
// connection's output buffer is closed as a slow consumer.
inline constexpr std::size_t kStreamOutputMax = 16 * 1024 * 1024;  // bytes

// A request the API holds: where its response goes.
struct HttpServer::Pending {
  evhttp_request* request = nullptr;
  evhttp_connection* connection = nullptr;
  std::string_view method;  // a static string, as for reply()
  core::Instant started;
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

}  // namespace turnstile::net
