// The simulator's events and its queue: virtual time moves from one event to the next, in order
// of (time, sequence), so that two events at one instant run in the order they were scheduled and
// every run of a seed is the same.
//
// Thread affinity: single-threaded, owned by one run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <queue>
#include <variant>
#include <vector>

namespace turnstile::sim {

namespace event {
struct ClientAct {  // a client does its next thing
  std::size_t client;
};
struct NetToServer {  // the next segment of a connection reaches the server
  std::uint64_t connection;
};
struct NetToClient {  // ... reaches the client
  std::uint64_t connection;
};
struct Hop {  // a router message between two shards of one process life arrives
  std::uint64_t life;
  std::size_t from;
  std::size_t to;
};
struct ServerTimer {  // the process's earliest session or engine deadline
  std::uint64_t life;
};
struct Fault {};          // the fault injector's next turn
struct Restart {};        // a crashed process starts again
struct Unpause {};        // a paused (SIGSTOPped) process runs again
struct LivenessStart {};  // the healed phase's window ends
struct JournalSynced {    // a journal write's fsync completes
  std::uint64_t life;
  std::uint64_t seq;
};
struct JournalRetry {  // the back-off after a failed journal write ends
  std::uint64_t life;
};
struct HttpAct {  // an HTTP client does its next thing
  std::size_t client;
};
struct HttpToServer {  // an HTTP request reaches the server
  std::uint64_t exchange;
};
struct HttpToClient {  // its response (or a reset) reaches the client
  std::uint64_t exchange;
};
struct HttpGone {  // the client of an HTTP request closed its connection before the response
  std::uint64_t exchange;
};
struct HttpGiveUp {  // an HTTP client stops waiting for a response
  std::size_t client;
  std::uint64_t exchange;
};
struct OperatorAct {};  // the operator's next force-release
}  // namespace event

using EventPayload =
    std::variant<event::ClientAct, event::NetToServer, event::NetToClient, event::Hop,
                 event::ServerTimer, event::Fault, event::Restart, event::Unpause,
                 event::LivenessStart, event::JournalSynced, event::JournalRetry, event::HttpAct,
                 event::HttpToServer, event::HttpToClient, event::HttpGone, event::HttpGiveUp,
                 event::OperatorAct>;

struct Event {
  std::int64_t at = 0;  // virtual nanoseconds
  std::uint64_t sequence = 0;
  EventPayload what;
  bool operator>(const Event& other) const {
    return at != other.at ? at > other.at : sequence > other.sequence;
  }
  // Events of the server process: a paused process handles none of them until it runs again.
  bool server_side() const {
    return std::holds_alternative<event::NetToServer>(what) ||
           std::holds_alternative<event::Hop>(what) ||
           std::holds_alternative<event::ServerTimer>(what) ||
           std::holds_alternative<event::JournalSynced>(what) ||
           std::holds_alternative<event::JournalRetry>(what) ||
           std::holds_alternative<event::HttpToServer>(what) ||
           std::holds_alternative<event::HttpGone>(what);
  }
};

class EventQueue {
 public:
  void schedule(std::int64_t at, EventPayload what) {
    queue_.push(Event{at, next_sequence_++, std::move(what)});
  }
  // An event put back for later (a paused process): a new sequence, so it runs after those
  // already at that instant.
  void defer(Event event, std::int64_t to) {
    event.at = to;
    event.sequence = next_sequence_++;
    queue_.push(std::move(event));
  }
  bool empty() const { return queue_.empty(); }
  Event pop() {
    Event event = queue_.top();
    queue_.pop();
    return event;
  }

 private:
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> queue_;
  std::uint64_t next_sequence_ = 0;
};

}  // namespace turnstile::sim
