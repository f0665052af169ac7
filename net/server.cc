#include "net/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>

#include "net/clock.h"
#include "net/crypto_random.h"
#include "net/listener.h"
#include "net/log.h"
#include "net/openssl_error.h"
#include "net/sd_notify.h"

namespace turnstile::net {
namespace {

// How long SIGTERM on a cluster's leader waits for another node to take over before it drains
// (a transfer takes about one round trip; raft gives up on it after an election timeout).
constexpr core::Duration kTransferWait = core::Duration::seconds(2);

std::string ip_of(const sockaddr* address) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(address)->sin_addr, text, sizeof text);
  } else if (address->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr, text,
              sizeof text);
  } else {
    return "unknown";
  }
  return text;
}

}  // namespace

Server::Server(Config config) : config_(std::move(config)), shared_(config_) {
  base_ = event_base_new();
}

// With --fence-state-file the first reservation is durable here, before any shard or listener
// exists, so no grant can come before it.
bool Server::open_fence_file() {
  if (config_.fence_state_file.empty()) return true;
  FenceFile::TestOptions test;
  test.wall_clock_offset_s = config_.test.wall_clock_offset_s;
  test.range = static_cast<std::uint64_t>(config_.test.fence_range);
  test.write_failures = static_cast<std::uint64_t>(config_.test.fence_write_failures);
  auto opened = FenceFile::open(config_.fence_state_file, test);
  if (auto* refusal = std::get_if<std::string>(&opened)) {
    log_event(LogLevel::kError, "fence_journal_refused", *refusal,
              {{"path", config_.fence_state_file}});
    return false;
  }
  fence_file_ = std::move(std::get<std::unique_ptr<FenceFile>>(opened));  // logs fence_journal_open
  if (config_.test.wall_clock_offset_s != 0) {
    logf(LogLevel::kWarn, "--test-wall-clock-offset-s %lld is for tests only",
         static_cast<long long>(config_.test.wall_clock_offset_s));
  }
  return true;
}

void Server::create_shards() {
  // Without the journal, fences start above the wall clock (shifted only in tests).
  const std::uint64_t fence_floor =
      fence_file_ == nullptr ? shifted_wall_clock_ns(config_.test.wall_clock_offset_s) : 0;
  for (int i = 0; i < config_.threads; ++i) {
    shards_.push_back(std::make_unique<Shard>(static_cast<std::size_t>(i), shared_, fence_floor,
                                              fence_file_.get()));
    shared_.shards.push_back(shards_.back().get());
  }
}

Server::~Server() {
  shared_.signals.set_peers(nullptr);
  signal_peers_.reset();
  if (listener_ != nullptr) evconnlistener_free(listener_);
  if (accept_resume_ != nullptr) event_free(accept_resume_);
  if (drain_poll_ != nullptr) event_free(drain_poll_);
  if (transfer_poll_ != nullptr) event_free(transfer_poll_);
  for (event* signal_event : signals_) event_free(signal_event);
  http_.clear();  // their evhttps live on the shards' event_bases
  http_shared_.reset();
  shards_.clear();
  fence_file_.reset();  // after the engines that take from it; closing releases the lock
  if (shared_.tls != nullptr) SSL_CTX_free(shared_.tls);
  if (base_ != nullptr) event_base_free(base_);
}

bool Server::set_up_tls() {
  if (config_.tls_cert.empty()) return true;
  SSL_CTX* context = SSL_CTX_new(TLS_server_method());
  if (context == nullptr) {
    logf(LogLevel::kError, "TLS: cannot create a context: %s", openssl_error().c_str());
    return false;
  }
  SSL_CTX_set_min_proto_version(context, TLS1_2_VERSION);
  if (SSL_CTX_use_certificate_chain_file(context, config_.tls_cert.c_str()) != 1) {
    logf(LogLevel::kError, "TLS: cannot load certificate %s: %s", config_.tls_cert.c_str(),
         openssl_error().c_str());
    SSL_CTX_free(context);
    return false;
  }
  if (SSL_CTX_use_PrivateKey_file(context, config_.tls_key.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(context) != 1) {
    logf(LogLevel::kError, "TLS: cannot load key %s: %s", config_.tls_key.c_str(),
         openssl_error().c_str());
    SSL_CTX_free(context);
    return false;
  }
  shared_.tls = context;
  return true;
}

bool Server::listen() {
  ListenerSpec spec;
  spec.host_flag = "--host";
  spec.protocol = "tcp";
  spec.host = config_.host;
  spec.port = config_.port;
  spec.keepalive = true;
  const std::optional<ListeningSocket> listening = open_listening_socket(spec);
  if (!listening) return false;
  listener_ = evconnlistener_new(base_, &Server::on_accept, this, LEV_OPT_CLOSE_ON_FREE,
                                 /*backlog=*/0, listening->fd);  // 0: it listens already
  if (listener_ == nullptr) {
    logf(LogLevel::kError, "cannot accept connections on %s", listening->address.c_str());
    ::close(listening->fd);
    return false;
  }
  evconnlistener_set_error_cb(listener_, &Server::on_accept_error);
  const char* protocol = shared_.tls != nullptr ? "tls" : "tcp";
  log_event(LogLevel::kInfo, "listen",
            "listening on " + listening->address + " (" + protocol + ", " +
                std::to_string(config_.threads) + " shards)",
            {{"protocol", protocol}, {"address", listening->address}, {"shards", config_.threads}});
  return true;
}

// Cluster mode: the node (its raft thread starts later, in start_cluster).
void Server::create_cluster_node() {
  // Session ids carry a random tag of this process, so that they stay unique across the
  // cluster's processes and restarts (core::RouterConfig::session_tag).
  CryptoRandom random;
  do {
    shared_.session_tag = static_cast<std::uint32_t>(random.next_u64() & 0xffffff);
  } while (shared_.session_tag == 0);
  cluster_ = std::make_unique<ClusterNode>(config_, shared_, shared_.session_tag);
  // The way out an operator's SIGTERM takes (leadership handed over, connections drained),
  // taken from the raft thread: the signal reaches the main loop through libevent's own pipe.
  cluster_->on_fatal([this] {
    fatal_ = true;
    ::kill(::getpid(), SIGTERM);
  });
  shared_.cluster = cluster_.get();
}

bool Server::start_signal_peers() {
  if (cluster_ == nullptr) return true;
  // Signals do not go through raft: each member sends the others what its clients publish
  // (docs/cluster.md, "Signals in a cluster").
  signal_peers_ =
      std::make_unique<SignalPeers>(signal_peers_options(config_, shared_.tls != nullptr));
  if (std::optional<std::string> error = signal_peers_->start()) {
    logf(LogLevel::kError, "signals: %s", error->c_str());
    return false;
  }
  shared_.signals.set_peers(signal_peers_.get());
  return true;
}

bool Server::open_http() {
  if (config_.http_port == 0) return true;
  // The HTTP API runs on every shard's thread; it binds before they start.
  const int fd = HttpServer::open_listener(config_, shared_.tls != nullptr);
  if (fd < 0) return false;
  http_shared_ = std::make_unique<HttpShared>(config_);
  for (auto& shard : shards_) {
    const int own = shard->index() == 0 ? fd : ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    http_.push_back(std::make_unique<HttpServer>(*shard, shared_, *http_shared_));
    if (own < 0 || !http_.back()->listen(own)) return false;
  }
  return true;
}

void Server::add_events() {
  for (int signal_number : {SIGTERM, SIGINT}) {
    event* signal_event = evsignal_new(base_, signal_number, &Server::on_signal, this);
    event_add(signal_event, nullptr);
    signals_.push_back(signal_event);
  }
  accept_resume_ = evtimer_new(base_, &Server::on_accept_resume, this);
  drain_poll_ = evtimer_new(base_, &Server::on_drain_poll, this);
  transfer_poll_ = evtimer_new(base_, &Server::on_transfer_poll, this);
}

std::optional<int> Server::start_cluster() {
  if (std::optional<std::string> error = cluster_->start()) {
    const int code = cluster_->start_failure_exit_code();
    logf(LogLevel::kError, "cluster: %s (exit %d)", error->c_str(), code);
    stop_shards();
    if (code == kExitStartTimedOut) (void)cluster_.release();  // its raft thread still runs
    return code;
  }
  shared_.starting.store(false);
  log_event(LogLevel::kInfo, "cluster_start",
            "cluster: node " + std::to_string(config_.cluster.node_id) + " started (raft on " +
                config_.cluster.raft_addr + ", clients told " + config_.cluster.advertise_addr +
                ")",
            {{"node_id", config_.cluster.node_id},
             {"raft_address", config_.cluster.raft_addr},
             {"advertise_address", config_.cluster.advertise_addr}});
  return std::nullopt;
}

int Server::run() {
  std::signal(SIGPIPE, SIG_IGN);
  if (!open_fence_file()) return 1;
  if (config_.cluster.enabled()) create_cluster_node();
  create_shards();
  if (!set_up_tls() || !listen() || !start_signal_peers() || !open_http()) return 1;
  for (const std::string& warning : config_warnings(config_)) {
    log_event(LogLevel::kWarn, "config_warning", warning, {});
  }
  add_events();
  if (fence_file_ != nullptr) fence_file_->start_writer();
  if (cluster_ != nullptr) shared_.starting.store(true);
  for (auto& shard : shards_) shard->start();
  if (cluster_ != nullptr) {
    if (const std::optional<int> code = start_cluster()) return *code;
  }
  // Listeners bound, journal open, raft started: a Type=notify unit is ready (net/sd_notify.h).
  notify_service_manager("READY=1\nSTATUS=serving");
  event_base_dispatch(base_);
  stop_shards();
  shared_.signals.set_peers(nullptr);
  if (signal_peers_ != nullptr) signal_peers_->stop();
  if (cluster_ != nullptr) cluster_->stop();
  if (fence_file_ != nullptr) fence_file_->stop_writer();  // after a write in flight finishes
  log_event(fatal_ ? LogLevel::kError : LogLevel::kInfo, "stop",
            fatal_ ? "stopped: the cluster node could not go on" : "stopped",
            {{"exit_code", fatal_ ? 1 : 0}});
  return fatal_ ? 1 : 0;
}

void Server::on_accept(evconnlistener*, evutil_socket_t fd, sockaddr* address, int, void* self) {
  auto* server = static_cast<Server*>(self);
  server->accept_backoff_ = core::Duration::milliseconds(5);
  std::string ip = ip_of(address);
  if (server->shutting_down_ || !server->shared_.admit(ip)) {
    // Over a cap: refused at accept, with no reply (reference 1.6).
    logf(LogLevel::kDebug, "connection from %s refused: connection cap reached", ip.c_str());
    ::close(fd);
    return;
  }
  // Every reply is one small write that must leave at once: without TCP_NODELAY, Nagle holds a
  // second write back until the first is acknowledged, which costs a delayed ACK (~40 ms) when
  // pipelined replies span writes. Best effort: a failure only costs latency.
  const int one = 1;
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  Shard& shard = *server->shards_[server->next_shard_++ % server->shards_.size()];
  shard.post(message::NewConnection{fd, std::move(ip)});
}

// accept() failed (EMFILE, ENFILE, ENOBUFS...): pause accepting with a growing back-off instead
// of spinning on a listener that stays readable; existing connections are unaffected.
void Server::on_accept_error(evconnlistener* listener, void* self) {
  auto* server = static_cast<Server*>(self);
  const int error = EVUTIL_SOCKET_ERROR();
  const std::string why = evutil_socket_error_to_string(error);
  const long long pause_ms = static_cast<long long>(server->accept_backoff_.ns() / 1'000'000);
  log_event(LogLevel::kWarn, "accept_failed",
            "accept failed: " + why + "; pausing accepts for " + std::to_string(pause_ms) + " ms",
            {{"error", why}, {"pause_ms", pause_ms}});
  evconnlistener_disable(listener);
  const timeval delay = to_timeval(server->accept_backoff_);
  evtimer_add(server->accept_resume_, &delay);
  server->accept_backoff_ =
      std::min(server->accept_backoff_ + server->accept_backoff_, core::Duration::seconds(1));
}

void Server::on_accept_resume(evutil_socket_t, short, void* self) {
  auto* server = static_cast<Server*>(self);
  if (server->listener_ != nullptr && !server->shutting_down_) {
    evconnlistener_enable(server->listener_);
  }
}

void Server::on_signal(evutil_socket_t signal_number, short, void* self) {
  static_cast<Server*>(self)->begin_shutdown(static_cast<int>(signal_number));
}

void Server::begin_shutdown(int signal_number) {
  if (shutting_down_) {
    log_event(LogLevel::kWarn, "stop_now", "second signal: stopping now",
              {{"signal", signal_number}});
    event_base_loopbreak(base_);
    return;
  }
  shutting_down_ = true;
  notify_service_manager("STOPPING=1\nSTATUS=draining");
  if (cluster_ != nullptr && cluster_->status().role == core::RaftRole::kLeader) {
    // A leader that leaves hands its leadership over first: the others would otherwise wait an
    // election timeout to notice it is gone. Bounded: it drains anyway after kTransferWait.
    log_event(LogLevel::kInfo, "leader_handoff",
              "signal " + std::to_string(signal_number) +
                  ": handing leadership to another node before draining",
              {{"signal", signal_number}});
    auto result = std::make_shared<std::atomic<int>>(-1);
    transfer_result_ = result;
    cluster_->transfer_leadership([result](bool ok) { result->store(ok ? 1 : 0); });
    transfer_deadline_ = monotonic_now() + kTransferWait;
    on_transfer_poll(-1, 0, this);
    return;
  }
  log_event(LogLevel::kInfo, "drain",
            "signal " + std::to_string(signal_number) + ": draining (shutdown timeout " +
                std::to_string(config_.shutdown_timeout_s) + " s)",
            {{"signal", signal_number},
             {"shutdown_timeout_s", config_.shutdown_timeout_s},
             {"leader_handoff", "none"}});
  begin_drain();
}

void Server::on_transfer_poll(evutil_socket_t, short, void* self) {
  auto* server = static_cast<Server*>(self);
  const int result = server->transfer_result_->load();
  const auto drain = [server](LogLevel level, const char* message, const char* handoff) {
    log_event(
        level, "drain", message,
        {{"shutdown_timeout_s", server->config_.shutdown_timeout_s}, {"leader_handoff", handoff}});
  };
  if (result == 1) {
    drain(LogLevel::kInfo, "cluster: leadership handed over; draining", "done");
  } else if (result == 0) {
    drain(LogLevel::kWarn, "cluster: the leadership transfer failed; draining anyway", "failed");
  } else if (monotonic_now() >= server->transfer_deadline_) {
    drain(LogLevel::kWarn, "cluster: the leadership transfer did not finish in time; draining",
          "timeout");
  } else {
    const timeval poll = to_timeval(core::Duration::milliseconds(10));
    evtimer_add(server->transfer_poll_, &poll);
    return;
  }
  server->begin_drain();
}

void Server::begin_drain() {
  evconnlistener_free(listener_);
  listener_ = nullptr;
  if (config_.shutdown_timeout_s > 0) {
    shutdown_deadline_ = monotonic_now() + core::Duration::seconds(config_.shutdown_timeout_s);
  }
  for (auto& shard : shards_) shard->post(message::Drain{});
  on_drain_poll(-1, 0, this);
}

void Server::on_drain_poll(evutil_socket_t, short, void* self) {
  auto* server = static_cast<Server*>(self);
  std::int64_t open = 0;
  for (auto& shard : server->shards_) open += shard->sockets_open();
  if (open == 0) {
    log_event(LogLevel::kInfo, "drained", "drained", {});
    event_base_loopbreak(server->base_);
    return;
  }
  if (server->shutdown_deadline_ && monotonic_now() >= *server->shutdown_deadline_) {
    log_event(LogLevel::kWarn, "shutdown_timeout",
              "shutdown timeout: closing " + std::to_string(open) + " connections",
              {{"open_connections", open}});
    event_base_loopbreak(server->base_);
    return;
  }
  const timeval poll = to_timeval(core::Duration::milliseconds(20));
  evtimer_add(server->drain_poll_, &poll);
}

void Server::stop_shards() {
  for (auto& shard : shards_) shard->post(message::Stop{});
  for (auto& shard : shards_) shard->join();
}

}  // namespace turnstile::net
