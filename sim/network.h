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

  // A process life crashed: what its connections carried is lost, and each client gets a reset.
  void crash(std::uint64_t life);

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
  void send(Pipe& pipe, EventPayload arrival, SegmentKind kind, std::string bytes);
  std::optional<Segment> take(Pipe& pipe);

  const Settings& settings_;
  Prng prng_;
  EventQueue& queue_;
  const std::int64_t& now_;
  std::map<std::uint64_t, Link> connections_;
  std::uint64_t next_id_ = 1;
  Listener* listener_ = nullptr;
};

}  // namespace turnstile::sim
