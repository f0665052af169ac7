// Network: the simulated TCP connections between the clients and the server process, and the
// delays of the messages between the process's shards.
//
// Each connection has two pipes of segments (data, FIN, reset), delivered in order per direction
// after a delay drawn from the seed's network stream, data cut into fragments when the seed says
// so. Sending schedules a NetToServer or NetToClient event; whoever handles that event takes the
// segment that has arrived (take_to_server / take_to_client). The network decides nothing about
// what a segment means.
//
// The server process listens through the Listener it registers (listen()); a client's connect()
// asks it to accept the new connection, so the clients need not know the server, nor the server
// the clients.
//
// Thread affinity: single-threaded, owned by one run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/http_api.h"
#include "core/http_codec.h"
#include "core/http_session_router.h"
#include "core/protocol.h"
#include "sim/event.h"
#include "sim/prng.h"
#include "sim/settings.h"

namespace turnstile::sim {

enum class SegmentKind : std::uint8_t { kData, kFin, kReset };

struct Segment {
  std::int64_t at = 0;
  SegmentKind kind = SegmentKind::kData;
  std::string bytes;
};

// The server process's listening socket.
class Listener {
 public:
  struct Accepted {
    std::uint64_t life = 0;     // the process life that accepted the connection
    std::uint64_t session = 0;  // its server-side session id
  };
  virtual ~Listener() = default;
  // Accepts connection `connection`; nullopt when nothing accepts now (no process is up).
  virtual std::optional<Accepted> accept(std::uint64_t connection) = 0;
};

// One HTTP request and its response, as on a connection of its own: the daemon's shards all
// accept from the one HTTP socket, so each request lands on a shard of the network's choosing
// (the client names it here, from its own stream). The server reads `http` only, the request as
// a real client writes it; the rest is what the client meant by it, for its own checks.
// kAdminRelease: the operator's DELETE /v1/admin/{locks,semaphores,rwlocks}/{key}[?query].
// kProbe: any other route (sim/http_probes.h), answered with one of `codes`.
enum class HttpOp : std::uint8_t { kCreate, kSubmit, kPing, kRemove, kAdminRelease, kProbe };
struct HttpCall {
  std::size_t client = 0;
  std::size_t shard = 0;  // the shard whose thread accepts the request's connection
  HttpOp op = HttpOp::kCreate;
  std::string handle;     // all but kCreate and kAdminRelease
  core::Request request;  // kSubmit
  core::HttpApiRequest http = {};
  std::vector<int> codes = {};  // kProbe
  std::string probe = {};       // kProbe: its route, for the coverage
};
struct HttpResult {
  bool reset = false;  // no response: the process died (or was not up) with the request
  core::HttpResponse outcome;
};

class Network {
 public:
  struct Connection {
    std::size_t client = 0;
    std::uint64_t life = 0;     // the server process it was accepted by
    std::uint64_t session = 0;  // the server-side session id
  };

  // `now` is the run's virtual time, read at every send.
  Network(const Settings& settings, std::uint64_t seed, EventQueue& queue, const std::int64_t& now);

  // Registers the listener connect() asks (null: none).
  void listen(Listener* listener) { listener_ = listener; }
  // A new connection of `client`, accepted by the listener: its id (from 1, consumed only by an
  // accepted connection); nullopt when nothing accepted it.
  std::optional<std::uint64_t> connect(std::size_t client);
  Connection& connection(std::uint64_t id) { return connections_.at(id).ends; }

  void send_to_server(std::uint64_t id, SegmentKind kind, std::string bytes = {});
  void send_to_client(std::uint64_t id, SegmentKind kind, std::string bytes = {});
  // The segment that has arrived at this event (nullopt: none due, or no such connection).
  std::optional<Segment> take_to_server(std::uint64_t id);
  std::optional<Segment> take_to_client(std::uint64_t id);
  std::size_t in_flight_to_server(std::uint64_t id) const;
  std::size_t in_flight_to_client(std::uint64_t id) const;

  // A process life crashed: what its connections carried is lost, and each client gets a reset
  // (HTTP requests it had taken too).
  void crash(std::uint64_t life);

  // ---- HTTP exchanges: HttpToServer, then HttpToClient (or HttpGone, the client left)
  std::uint64_t http_send(HttpCall call);  // its exchange id
  // The request of an exchange still open; null once its client closed it and the server heard
  // (a pause can hold the request back past the close: the healed process then runs the close
  // first, and the request finds nothing).
  const HttpCall* http_call(std::uint64_t exchange) const {
    auto it = exchanges_.find(exchange);
    return it == exchanges_.end() ? nullptr : &it->second.call;
  }
  void http_taken(std::uint64_t exchange, std::uint64_t life);  // the server took it, in `life`
  void http_respond(std::uint64_t exchange, HttpResult result);
  // The client closes the request's connection: the server hears of it (HttpGone), the client
  // never takes a response.
  void http_close(std::uint64_t exchange);
  // The response that reached the client at this event; the exchange is over.
  std::optional<HttpResult> http_take_result(std::uint64_t exchange);
  // The server is done with a closed exchange (HttpGone handled).
  void http_forget(std::uint64_t exchange) { exchanges_.erase(exchange); }
  // Whether the exchange is still open on the server side (taken, not responded, not closed).
  bool http_open(std::uint64_t exchange) const;

  // The delay of one message between two shards, from the same stream.
  std::int64_t hop_delay();

 private:
  struct Pipe {
    std::deque<Segment> segments;
    std::int64_t last_at = 0;  // arrivals in one direction keep their order
  };
  struct Link {
    Connection ends;
    Pipe to_server;
    Pipe to_client;
  };
  struct Exchange {
    HttpCall call;
    std::uint64_t life = 0;  // 0 until the server took it
    bool responded = false;
    bool closed = false;  // by the client
    std::optional<HttpResult> result;
    std::int64_t last_at = 0;  // its segments (request, response, close) keep their order
  };
  std::int64_t http_delay(Exchange& exchange);
  void send(Pipe& pipe, EventPayload arrival, SegmentKind kind, std::string bytes);
  std::optional<Segment> take(Pipe& pipe);

  const Settings& settings_;
  Prng prng_;
  EventQueue& queue_;
  const std::int64_t& now_;
  std::map<std::uint64_t, Link> connections_;
  std::map<std::uint64_t, Exchange> exchanges_;
  std::uint64_t next_exchange_ = 1;
  std::uint64_t next_id_ = 1;
  Listener* listener_ = nullptr;
};

}  // namespace turnstile::sim
