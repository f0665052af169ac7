// Shard: one thread, one event_base (created without internal locking), one core::Engine for
// the keys that hash to it (core::shard_of) with its core::Router, and the connections accepted
// onto it.
//
// A connection's session lives on its shard. Every decision about where a request, a reply, a
// close notice, a cancellation or a stats part goes is the router's (core/router.h); the shard
// only moves the router's messages between threads (post(): a mailbox and an eventfd) and hands
// its events to the sessions they are for: its TCP connections, or the service it hosts (the
// HTTP API, a ShardService). Shards share nothing but their mailboxes and the few counters in
// SharedState.
//
// Thread affinity: everything but post() runs on the shard's own thread.
#pragma once

#include <event2/event.h>
#include <openssl/ssl.h>
#include <sys/socket.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <variant>
#include <vector>

#include "core/engine.h"
#include "core/router.h"
#include "core/session.h"
#include "core/stats.h"
#include "net/config.h"
#include "net/crypto_random.h"
#include "net/deadline_timer.h"

namespace turnstile::net {

class Shard;

// Request latencies (seconds): the Prometheus histogram buckets shared by TCP and HTTP.
inline constexpr std::array<double, 14> kLatencyBuckets = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 30};

// What all shards share. Counters are atomics; the per-IP table is behind a mutex (touched only
// when a connection opens or closes).
struct SharedState {
  explicit SharedState(const Config& server_config)
      : config(server_config), budget(server_config.max_locks) {}

  const Config& config;
  std::vector<Shard*> shards;
  SSL_CTX* tls = nullptr;  // non-null: every connection is TLS
  std::atomic<std::int64_t> connections_open{0};
  std::atomic<std::int64_t> http_sessions_live{0};  // counted in stats `connections`

  // TCP request latency of one command over every shard, for /metrics: cumulative buckets.
  static constexpr std::size_t kCommands = 13;
  struct TcpLatencyTotals {
    std::array<std::uint64_t, kLatencyBuckets.size()> buckets{};
    std::uint64_t count = 0;
    std::uint64_t sum_ns = 0;
  };
  TcpLatencyTotals tcp_latency(core::Command command) const;

  // --max-locks, exact across shards.
  class Budget final : public core::ResourceBudget {
   public:
    explicit Budget(std::int64_t max) : max_(max) {}
    bool try_take() override;
    void give_back() override;

   private:
    std::int64_t max_;
    std::atomic<std::int64_t> used_{0};
  } budget;

  // Per-IP connection counts for --max-connections-per-ip.
  std::mutex per_ip_mutex;
  std::unordered_map<std::string, std::int64_t> per_ip;

  // Reserves a slot for a new connection from `ip`; false when a cap is reached.
  bool admit(const std::string& ip);
  void release(const std::string& ip);

  SharedState(const SharedState&) = delete;
  SharedState& operator=(const SharedState&) = delete;
};

// Messages between shards: the router's (core/router.h), and the few that are the daemon's own.
namespace message {
struct NewConnection {
  int fd;
  std::string peer_ip;
};
// An HTTP request for a session homed on another shard (net/http_server.h), forwarded to that
// shard's HttpServer; its answer goes back to the `origin` shard, whose HttpServer holds the
// client's request under the same ticket.
enum class HttpForwardKind : std::uint8_t { kSubmit, kDelete, kPing };
struct HttpForward {
  std::size_t origin;
  std::uint64_t ticket;
  HttpForwardKind kind;
  std::string handle;
  core::Request request;  // kSubmit
  core::Instant started;
};
struct HttpForwardAnswer {
  std::uint64_t ticket;
  int code;
  std::string body;  // a JSON line, or empty (204)
};
struct HttpAbandon {  // the client of a forwarded request left
  std::uint64_t ticket;
};
struct Drain {};
struct Stop {};
}  // namespace message

// Messages for the service a shard hosts besides its TCP connections (the HTTP API).
using ServiceMessage =
    std::variant<message::HttpForward, message::HttpForwardAnswer, message::HttpAbandon>;

using Message = std::variant<message::NewConnection, core::RouterMessage, ServiceMessage,
                             message::Drain, message::Stop>;

// A service that runs on a shard's thread beside its TCP connections (the HTTP API,
// net/http_server.h). It owns some of the shard's sessions: the shard hands it the router's events
// for them, and the messages other shards send it. Every call comes from the shard's thread; the
// shard calls settle() itself after each, and the service calls Shard::settle() after each event
// of its own.
class ShardService {
 public:
  virtual ~ShardService() = default;
  virtual bool owns(core::SessionId session) const = 0;
  virtual void on_session_event(core::Instant now, core::SessionEvent& event) = 0;
  virtual void on_message(ServiceMessage& message) = 0;
  virtual void begin_drain() = 0;
  virtual void stop() = 0;  // closes the service's sockets; the shard is stopping
};

struct Connection;

// Request latencies of one command on one shard. One writer (the shard's thread), so a record is
// a few plain stores to lines no other core writes; /metrics reads them from another thread.
class TcpLatency {
 public:
  void record(core::Duration elapsed);
  // Adds these counts to `totals` (cumulative buckets).
  void add_to(SharedState::TcpLatencyTotals& totals) const;

 private:
  // By the first bucket bound that holds the latency; the last counts those above every bound.
  std::array<std::atomic<std::uint64_t>, kLatencyBuckets.size() + 1> by_bucket_{};
  std::atomic<std::uint64_t> sum_ns_{0};
};

class Shard {
 public:
  // Fences: from `fences` when given (the fence journal, shared by every shard), else counting up
  // from `fence_floor`.
  Shard(std::size_t index, SharedState& shared, std::uint64_t fence_floor,
        core::FenceSource* fences);
  ~Shard();
  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;

  void start();  // runs the event loop on a new thread
  void join();

  // Any thread: queue a message and wake the shard.
  void post(Message message);

  std::size_t index() const { return index_; }
  const TcpLatency& tcp_latency(core::Command command) const {
    return tcp_latency_[static_cast<std::size_t>(command)];
  }
  // Connections (sockets) still open on this shard; read by the server during drain.
  std::int64_t sockets_open() const { return sockets_open_.load(std::memory_order_relaxed); }

  // For the service on this shard's thread (the HTTP API), and for it only on that thread.
  event_base* base() const { return base_; }
  void set_service(ShardService* service) { service_ = service; }
  // Routes the requests, cancels and closes of the service's sessions (core/router.h); their
  // events come back through ShardService::on_session_event.
  core::Router& router() { return router_; }
  // After any event: router outputs delivered, connections serviced, the engine timer re-armed.
  void settle();
  // The instant of this loop turn: the monotonic clock (net/clock.h) read once per turn, at the
  // first call; every event of the turn is handled at it.
  core::Instant turn_now();

 private:
  friend struct Connection;

  void run();
  // --pin-threads: restricts this thread to the index_-th CPU of those the process may use.
  void pin_to_cpu();
  void drain_mailbox();  // handles every queued message, then settles
  static void on_mailbox(evutil_socket_t fd, short events, void* self);
  static void on_engine_timer(evutil_socket_t fd, short events, void* self);
  void handle(Message& message);
  void handle(message::NewConnection& m);
  void handle(core::RouterMessage& m);
  void handle(ServiceMessage& m);
  void handle(message::Drain& m);
  void handle(message::Stop& m);

  // Sends the router's messages to their shards and hands its events to their sessions.
  void deliver_router_output(core::Instant now);
  void on_session_event(core::Instant now, core::SessionEvent& event);
  Connection* find(core::SessionId session);
  void arm_engine_timer();

  // Connection lifecycle (shard thread): feed input to the session, route its requests, move
  // its replies to the socket, send close notices, close the socket once flushed.
  void service(Connection& connection);
  void feed_input(Connection& connection, core::Instant now);
  // Plain TCP: starts or stops reading the socket (Connection::on_readable).
  void watch_reads(Connection& connection, bool on);
  // Plain TCP, nothing buffered ahead: reads into read_scratch_ and hands the bytes straight to
  // the session, buffering only what it leaves. Returns what read() returned; errno is read()'s
  // when that is -1.
  ssize_t read_direct(Connection& connection, evutil_socket_t fd);
  void flush_output(Connection& connection);
  void write_now(Connection& connection);
  void close_socket(Connection& connection);

  std::size_t index_;
  SharedState& shared_;
  CryptoRandom salts_;  // token salts must be unpredictable: a token is a capability
  core::Engine engine_;
  core::Router router_;
  event_base* base_ = nullptr;
  event* mailbox_event_ = nullptr;
  std::optional<DeadlineTimer> engine_timer_;  // the engine's next wake (Engine::next_wake)
  int wake_fd_ = -1;
  std::thread thread_;

  std::mutex mailbox_mutex_;
  std::vector<Message> mailbox_;  // guarded by mailbox_mutex_
  std::vector<Message> processing_;
  std::atomic<bool> asleep_{true};  // the loop may be blocked in epoll_wait (run())
  bool stopped_ = false;
  // Inside a loop turn: settle() leaves to_write_ for the end of the turn (run()).
  bool defer_writes_ = false;
  std::uint64_t events_ = 0;  // settle() calls: one per event handled, so run() sees progress
  std::optional<core::Instant> turn_now_;  // this turn's clock reading, once taken
  // Stretches of work without a break (a loop turn, or an engine tick run from a sleep). Turns
  // over 10 ms are logged, at most one line a second giving the longest since the line before,
  // and the longest of all and the count over 10 ms when the shard stops: so a probe can tell a
  // shard that stalled from one that was not scheduled (bench/scale_probe.py held-locks).
  core::Duration longest_turn_ = core::Duration::zero();
  std::uint64_t long_turns_ = 0;
  core::Duration unlogged_longest_ = core::Duration::zero();  // since the last line
  std::uint64_t unlogged_longest_events_ = 0;                 // handled in that turn
  core::Instant long_turn_logged_ = core::Instant::min();
  // `events`: the settle() calls of the turn (one per callback that did work).
  void note_turn(core::Instant start, core::Instant end, std::uint64_t events);

  std::unordered_map<std::uint64_t, std::unique_ptr<Connection>> connections_;
  std::vector<Connection*> dirty_;        // connections to service in settle()
  std::vector<Connection*> to_write_;     // connections with replies to write (end of turn)
  std::unique_ptr<char[]> read_scratch_;  // read_direct's buffer: kSocketInputMax bytes
  bool draining_ = false;
  ShardService* service_ = nullptr;  // the HTTP API, when it runs
  std::atomic<std::int64_t> sockets_open_{0};
  std::array<TcpLatency, SharedState::kCommands> tcp_latency_{};
};

}  // namespace turnstile::net
