// Shard: one thread, one event_base (created without internal locking), one core::Engine for
// the keys that hash to it (core::shard_of) with its core::Router, and the hosts of sessions on
// its thread: its TCP connections (net/tcp_connections.h) and, with --http-port, the HTTP API.
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

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "core/engine.h"
#include "core/http_session_router.h"
#include "core/router.h"
#include "net/crypto_random.h"
#include "net/deadline_timer.h"
#include "net/session_host.h"
#include "net/shared_state.h"
#include "net/tcp_connections.h"

namespace turnstile::net {

// Messages between shards: the router's (core/router.h), and the few that are the daemon's own.
namespace message {
struct NewConnection {
  int fd;
  std::string peer_ip;
};
struct Drain {};
struct Stop {};
// Work for this shard's thread from another thread (the cluster node's answer to an admin
// route's request, net/http_server.cc).
struct Run {
  std::function<void()> fn;
};
}  // namespace message

// Messages for the service a shard hosts besides its TCP connections: the HTTP API's session
// operations between shards (core/http_session_router.h).
using ServiceMessage = core::HttpMessage;

using Message = std::variant<message::NewConnection, core::RouterMessage, ServiceMessage,
                             message::Drain, message::Stop, message::Run>;

// A service that runs on a shard's thread beside its TCP connections (the HTTP API,
// net/http_server.h): a host of sessions (net/session_host.h) that also takes the messages other
// shards send it. Every call comes from the shard's thread.
class ShardService : public SessionHost {
 public:
  virtual void on_message(ServiceMessage& message) = 0;
  virtual void begin_drain() = 0;
  virtual void stop() = 0;  // closes the service's sockets; the shard is stopping
};

class Shard final : public ShardLoop {
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
  // Any thread: queue every message of `messages` (left empty), in order, and wake the shard once.
  void post(std::vector<core::RouterMessage>& messages);

  // Connections (sockets) still open on this shard; read by the server during drain.
  std::int64_t sockets_open() const { return tcp_.sockets_open(); }

  // ShardLoop, for the hosts on this shard's thread (its TCP connections, the HTTP API).
  std::size_t index() const override { return index_; }
  event_base* base() const override { return base_; }
  core::Router& router() override { return router_; }
  core::Instant turn_now() override;
  void settle() override;

  // The service on this shard's thread (the HTTP API), if any; set before the shard starts.
  void set_service(ShardService* service) { service_ = service; }

 private:
  void run();
  // --pin-threads: restricts this thread to the index_-th CPU of those the process may use.
  void pin_to_cpu();
  void drain_mailbox();  // handles every queued message, then settles
  void wake();           // after a post to an empty mailbox: the eventfd, if the shard sleeps
  static void on_mailbox(evutil_socket_t fd, short events, void* self);
  static void on_engine_timer(evutil_socket_t fd, short events, void* self);
  void handle(Message& message);
  void handle(message::NewConnection& m);
  void handle(core::RouterMessage& m);
  void handle(ServiceMessage& m);
  void handle(message::Drain& m);
  void handle(message::Stop& m);
  void handle(message::Run& m);

  // Sends the router's messages to their shards and hands its events to their sessions' hosts.
  void deliver_router_output(core::Instant now);
  void arm_engine_timer();

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
  std::vector<core::RouterMessage> to_cluster_;  // deliver_router_output()'s, posted together
  std::atomic<bool> asleep_{true};               // the loop may be blocked in epoll_wait (run())
  bool stopped_ = false;
  // Inside a loop turn: settle() leaves the connections' writes for the end of the turn (run()).
  bool defer_writes_ = false;
  std::uint64_t events_ = 0;  // settle() calls: one per event handled, so run() sees progress
  std::optional<core::Instant> turn_now_;  // this turn's clock reading, once taken
  // Stretches of work without a break (a loop turn, or an engine tick run from a sleep). Turns
  // over 10 ms are logged, at most one line a second giving the longest since the line before,
  // and the longest of all and the count over 10 ms when the shard stops: so a probe can tell a
  // shard that stalled from one that was not scheduled (bench/tools/scale_probe.py held-locks).
  core::Duration longest_turn_ = core::Duration::zero();
  std::uint64_t long_turns_ = 0;
  core::Duration unlogged_longest_ = core::Duration::zero();  // since the last line
  std::uint64_t unlogged_longest_events_ = 0;                 // handled in that turn
  core::Instant long_turn_logged_ = core::Instant::min();
  // `events`: the settle() calls of the turn (one per callback that did work).
  void note_turn(core::Instant start, core::Instant end, std::uint64_t events);

  TcpConnections tcp_;
  bool draining_ = false;
  ShardService* service_ = nullptr;  // the HTTP API, when it runs
};

}  // namespace turnstile::net
