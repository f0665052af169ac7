// Server: the whole of turnstiled. The main thread runs the acceptor (listener, connection caps,
// accept back-off), signal handling and the shutdown sequence; each shard runs on its own thread.
//
// Shutdown (SIGTERM/SIGINT): stop accepting, drain every shard (requests in flight finish, every
// session is then answered error_draining and closed), wait until every socket is closed or
// --shutdown-timeout passes (0: no limit), then stop the shards and return.
//
// Thread affinity: construct and run() on the main thread.
#pragma once

#include <event2/event.h>
#include <event2/listener.h>
#include <openssl/ssl.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/time.h"
#include "net/cluster_node.h"
#include "net/config.h"
#include "net/fence_file.h"
#include "net/http_server.h"
#include "net/shard.h"
#include "net/signal_peers.h"

namespace turnstile::net {

class Server {
 public:
  explicit Server(Config config);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Opens the fence state file (when configured), listens, serves until a shutdown signal,
  // drains and returns the exit code (0, or 1 when the server could not start: the reason is
  // logged).
  int run();

 private:
  bool open_fence_file();
  void create_cluster_node();
  void create_shards();
  bool listen();
  bool set_up_tls();
  bool start_signal_peers();  // cluster mode
  bool open_http();           // with --http-port
  void add_events();
  // Cluster mode, once the shards run: starts raft. nullopt, or the exit code when it cannot.
  std::optional<int> start_cluster();
  static void on_accept(evconnlistener*, evutil_socket_t fd, sockaddr* address, int length,
                        void* self);
  static void on_accept_error(evconnlistener*, void* self);
  static void on_accept_resume(evutil_socket_t, short, void* self);
  static void on_signal(evutil_socket_t signal, short, void* self);
  static void on_drain_poll(evutil_socket_t, short, void* self);
  void begin_shutdown(int signal);
  // Cluster mode, on the leader: polls the leadership transfer that SIGTERM asked for, then
  // drains once it is done or kTransferWait has passed.
  static void on_transfer_poll(evutil_socket_t, short, void* self);
  void begin_drain();
  void stop_shards();

  Config config_;
  SharedState shared_;
  std::unique_ptr<FenceFile> fence_file_;  // with --fence-state-file; outlives the shards
  std::vector<std::unique_ptr<Shard>> shards_;
  std::unique_ptr<ClusterNode> cluster_;  // cluster mode; stopped after the shards
  // Cluster mode: signals to the other members (SharedState::signals forwards to it); stopped
  // after the shards.
  std::unique_ptr<SignalPeers> signal_peers_;
  // With --http-port: one HttpServer per shard, on its thread, freed before the shards.
  std::unique_ptr<HttpShared> http_shared_;
  std::vector<std::unique_ptr<HttpServer>> http_;
  event_base* base_ = nullptr;
  evconnlistener* listener_ = nullptr;
  event* accept_resume_ = nullptr;
  core::Duration accept_backoff_ = core::Duration::milliseconds(5);
  std::vector<event*> signals_;
  event* drain_poll_ = nullptr;
  event* transfer_poll_ = nullptr;
  core::Instant transfer_deadline_;
  // Set by the raft thread when the transfer is over (either way); read by the main thread.
  std::shared_ptr<std::atomic<int>> transfer_result_;  // -1: pending, 0: failed, 1: done
  std::optional<core::Instant> shutdown_deadline_;
  std::size_t next_shard_ = 0;
  bool shutting_down_ = false;
  // The cluster node cannot go on (ClusterNode::on_fatal): the process leaves as on SIGTERM, with
  // exit status 1 so that a supervisor restarts it. Set on the raft thread.
  std::atomic<bool> fatal_{false};
};

}  // namespace turnstile::net
