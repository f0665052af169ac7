#include "net/signal_peers.h"

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <variant>

#include "core/address.h"
#include "net/config.h"
#include "net/log.h"
#include "net/openssl_error.h"

namespace turnstile::net {

SignalPeersOptions signal_peers_options(const Config& config, bool tls) {
  SignalPeersOptions options;
  for (const Config::ClusterPeer& peer : config.cluster.peers) {
    if (peer.id == config.cluster.node_id) continue;
    options.peers.push_back({peer.id, peer.client_address});
  }
  options.auth_token = config.auth_token;
  options.tls = tls;
  if (tls) options.tls_trust_file = config.tls_cert;
  if (config.idle_timeout_s > 0) options.ping_interval_ms = config.idle_timeout_s * 1000 / 2;
  return options;
}

namespace {

timeval to_timeval(std::int64_t ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms % 1000) * 1000);
  return tv;
}

}  // namespace

struct SignalPeers::Impl {
  struct Link {
    Impl* impl = nullptr;
    std::uint64_t id = 0;
    std::string address;
    bufferevent* bev = nullptr;
    bool up = false;
    bool reported_down = false;  // the failure was logged; quiet until it comes back
    event* retry = nullptr;
    std::int64_t backoff_ms = 0;
  };

  explicit Impl(SignalPeersOptions options_in) : options(std::move(options_in)) {}

  SignalPeersOptions options;
  event_base* base = nullptr;
  SSL_CTX* tls = nullptr;
  int wake_fd = -1;
  event* wake = nullptr;
  event* ping = nullptr;
  std::vector<std::unique_ptr<Link>> links;
  std::thread thread;

  std::mutex mutex;
  std::deque<std::string> queue;   // frames `signal-peer\n<channel>\n<payload>\n`; guarded
  bool stopping = false;           // guarded
  std::vector<std::string> batch;  // the link thread's

  std::atomic<std::uint64_t> forwarded{0};
  std::atomic<std::uint64_t> dropped{0};
  std::atomic<std::uint64_t> peer_errors{0};
  std::atomic<std::uint64_t> connected{0};

  std::optional<std::string> set_up() {
    if (options.tls) {
      tls = SSL_CTX_new(TLS_client_method());
      if (tls == nullptr) return "TLS: cannot create a client context: " + openssl_error();
      SSL_CTX_set_min_proto_version(tls, TLS1_2_VERSION);
      SSL_CTX_set_verify(tls, SSL_VERIFY_PEER, nullptr);
      SSL_CTX_set_default_verify_paths(tls);
      if (!options.tls_trust_file.empty() &&
          SSL_CTX_load_verify_locations(tls, options.tls_trust_file.c_str(), nullptr) != 1) {
        return "TLS: cannot load " + options.tls_trust_file + ": " + openssl_error();
      }
    }
    base = event_base_new();
    if (base == nullptr) return std::string("cannot create an event base");
    wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd < 0) return std::string("cannot create an eventfd: ") + std::strerror(errno);
    wake = event_new(base, wake_fd, EV_READ | EV_PERSIST, &Impl::on_wake, this);
    event_add(wake, nullptr);
    if (options.ping_interval_ms > 0) {
      ping = event_new(base, -1, EV_PERSIST, &Impl::on_ping, this);
      const timeval period = to_timeval(options.ping_interval_ms);
      event_add(ping, &period);
    }
    for (const SignalPeersOptions::Peer& peer : options.peers) {
      auto link = std::make_unique<Link>();
      link->impl = this;
      link->id = peer.id;
      link->address = peer.client_address;
      link->retry = evtimer_new(base, &Impl::on_retry, link.get());
      links.push_back(std::move(link));
    }
    for (auto& link : links) connect(*link);
    return std::nullopt;
  }

  void tear_down() {
    for (auto& link : links) {
      if (link->bev != nullptr) bufferevent_free(link->bev);
      if (link->retry != nullptr) event_free(link->retry);
    }
    links.clear();
    if (ping != nullptr) event_free(ping);
    if (wake != nullptr) event_free(wake);
    if (wake_fd >= 0) ::close(wake_fd);
    if (base != nullptr) event_base_free(base);
    if (tls != nullptr) SSL_CTX_free(tls);
    ping = wake = nullptr;
    wake_fd = -1;
    base = nullptr;
    tls = nullptr;
  }

  void signal_wake() {
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t written = ::write(wake_fd, &one, sizeof one);
  }

  // ---- links ---------------------------------------------------------------------------------

  void connect(Link& link) {
    const auto parsed = core::parse_host_port(link.address);
    if (const auto* why = std::get_if<std::string>(&parsed)) {
      fail(link, "bad address (" + *why + ")");
      return;
    }
    const core::HostPort& address = std::get<core::HostPort>(parsed);
    const std::string& host = address.host;
    const std::string port = std::to_string(address.port);
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* found = nullptr;
    const int resolved = getaddrinfo(host.c_str(), port.c_str(), &hints, &found);
    if (resolved != 0 || found == nullptr) {
      fail(link, std::string("cannot resolve: ") + gai_strerror(resolved));
      return;
    }
    if (tls != nullptr) {
      SSL* ssl = SSL_new(tls);
      if (ssl == nullptr) {
        freeaddrinfo(found);
        fail(link, "TLS: " + openssl_error());
        return;
      }
      if (address.v6 || core::parse_ipv4(host)) {
        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host.c_str());
      } else {
        SSL_set_tlsext_host_name(ssl, host.c_str());
        SSL_set1_host(ssl, host.c_str());
      }
      link.bev = bufferevent_openssl_socket_new(base, -1, ssl, BUFFEREVENT_SSL_CONNECTING,
                                                BEV_OPT_CLOSE_ON_FREE);
      if (link.bev == nullptr) {
        SSL_free(ssl);
      } else {
        bufferevent_openssl_set_allow_dirty_shutdown(link.bev, 1);
      }
    } else {
      link.bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    }
    if (link.bev == nullptr) {
      freeaddrinfo(found);
      fail(link, "cannot create a bufferevent");
      return;
    }
    bufferevent_setcb(link.bev, &Impl::on_read, nullptr, &Impl::on_event, &link);
    bufferevent_enable(link.bev, EV_READ | EV_WRITE);
    const int started =
        bufferevent_socket_connect(link.bev, found->ai_addr, static_cast<int>(found->ai_addrlen));
    freeaddrinfo(found);
    if (started != 0) fail(link, "connect failed");
  }

  void on_up(Link& link) {
    link.up = true;
    connected.fetch_add(1, std::memory_order_relaxed);
    const evutil_socket_t fd = bufferevent_getfd(link.bev);
    if (fd >= 0) {
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    if (options.auth_token) {
      evbuffer* out = bufferevent_get_output(link.bev);
      evbuffer_add_printf(out, "auth\n_\n");
      evbuffer_add(out, options.auth_token->data(), options.auth_token->size());
      evbuffer_add(out, "\n", 1);
    }
    log_event(LogLevel::kInfo, "signal_peer_link",
              "signals: linked to node " + std::to_string(link.id) + " at " + link.address,
              {{"node_id", link.id}, {"address", link.address}, {"up", true}});
    link.reported_down = false;
  }

  // The link failed (or could not start): closed, and tried again after the back-off.
  void fail(Link& link, const std::string& why) {
    peer_errors.fetch_add(1, std::memory_order_relaxed);
    if (link.up) connected.fetch_sub(1, std::memory_order_relaxed);
    if (!link.reported_down) {
      log_event(LogLevel::kWarn, "signal_peer_link",
                "signals: no link to node " + std::to_string(link.id) + " at " + link.address +
                    " (" + why + "); signals for it are dropped",
                {{"node_id", link.id}, {"address", link.address}, {"up", false}, {"error", why}});
      link.reported_down = true;
    }
    link.up = false;
    if (link.bev != nullptr) {
      bufferevent_free(link.bev);
      link.bev = nullptr;
    }
    link.backoff_ms = link.backoff_ms == 0
                          ? options.reconnect_min_ms
                          : std::min(link.backoff_ms * 2, options.reconnect_max_ms);
    const timeval delay = to_timeval(link.backoff_ms);
    evtimer_add(link.retry, &delay);
  }

  // ---- callbacks (the link thread) -------------------------------------------------------------

  static void on_event(bufferevent*, short what, void* arg) {
    Link& link = *static_cast<Link*>(arg);
    if ((what & BEV_EVENT_CONNECTED) != 0) {
      link.impl->on_up(link);
      return;
    }
    std::string why = (what & BEV_EVENT_EOF) != 0 ? "closed by the peer" : "connection error";
    if ((what & BEV_EVENT_ERROR) != 0) {
      const int error = EVUTIL_SOCKET_ERROR();
      if (error != 0) why += std::string(": ") + evutil_socket_error_to_string(error);
      if (link.impl->tls != nullptr) {
        const unsigned long ssl_error = bufferevent_get_openssl_error(link.bev);
        if (ssl_error != 0) {
          char text[256];
          ERR_error_string_n(ssl_error, text, sizeof text);
          why += std::string(" (") + text + ")";
        }
      }
    }
    link.impl->fail(link, why);
  }

  // Replies: `ok` (auth, ping) and `ok <n>` (signal-peer) are fine; anything else is counted.
  static void on_read(bufferevent* bev, void* arg) {
    Link& link = *static_cast<Link*>(arg);
    evbuffer* in = bufferevent_get_input(bev);
    while (true) {
      std::size_t length = 0;
      char* line = evbuffer_readln(in, &length, EVBUFFER_EOL_LF);
      if (line == nullptr) break;
      const std::string_view text(line, length);
      if (text != "ok" && text.rfind("ok ", 0) != 0) {
        link.impl->peer_errors.fetch_add(1, std::memory_order_relaxed);
      } else {
        link.backoff_ms = 0;  // the member answers: a later failure starts the back-off afresh
      }
      std::free(line);
    }
  }

  static void on_retry(evutil_socket_t, short, void* arg) {
    Link& link = *static_cast<Link*>(arg);
    link.impl->connect(link);
  }

  static void on_ping(evutil_socket_t, short, void* arg) {
    Impl& impl = *static_cast<Impl*>(arg);
    for (auto& link : impl.links) {
      if (link->up) evbuffer_add(bufferevent_get_output(link->bev), "ping\n_\n_\n", 9);
    }
  }

  static void on_wake(evutil_socket_t fd, short, void* arg) {
    Impl& impl = *static_cast<Impl*>(arg);
    std::uint64_t value = 0;
    [[maybe_unused]] const ssize_t got = ::read(fd, &value, sizeof value);
    {
      const std::lock_guard lock(impl.mutex);
      if (impl.stopping) {
        event_base_loopbreak(impl.base);
        return;
      }
      impl.batch.assign(std::make_move_iterator(impl.queue.begin()),
                        std::make_move_iterator(impl.queue.end()));
      impl.queue.clear();
    }
    impl.send_batch();
  }

  void send_batch() {
    for (auto& link : links) {
      std::uint64_t sent = 0;
      std::uint64_t lost = 0;
      if (!link->up) {
        lost = batch.size();
      } else {
        evbuffer* out = bufferevent_get_output(link->bev);
        for (const std::string& frame : batch) {
          if (evbuffer_get_length(out) > options.backlog_max) {
            ++lost;
          } else {
            evbuffer_add(out, frame.data(), frame.size());
            ++sent;
          }
        }
      }
      forwarded.fetch_add(sent, std::memory_order_relaxed);
      dropped.fetch_add(lost, std::memory_order_relaxed);
    }
    batch.clear();
  }
};

SignalPeers::SignalPeers(SignalPeersOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

SignalPeers::~SignalPeers() { stop(); }

std::optional<std::string> SignalPeers::start() {
  if (std::optional<std::string> error = impl_->set_up()) {
    impl_->tear_down();
    return error;
  }
  Impl* impl = impl_.get();
  impl_->thread = std::thread([impl] {
    event_base_dispatch(impl->base);
    impl->tear_down();
  });
  return std::nullopt;
}

void SignalPeers::stop() {
  if (!impl_->thread.joinable()) return;
  {
    const std::lock_guard lock(impl_->mutex);
    impl_->stopping = true;
    impl_->queue.clear();
  }
  impl_->signal_wake();
  impl_->thread.join();
}

void SignalPeers::forward(std::string_view channel, std::string_view payload) {
  if (impl_->options.peers.empty()) return;
  {
    const std::lock_guard lock(impl_->mutex);
    if (impl_->stopping || impl_->wake_fd < 0) return;
    if (impl_->queue.size() >= impl_->options.queue_max) {
      impl_->dropped.fetch_add(impl_->options.peers.size(), std::memory_order_relaxed);
      return;
    }
    std::string frame;
    frame.reserve(13 + channel.size() + payload.size());
    frame.append("signal-peer\n").append(channel).append("\n").append(payload).append("\n");
    // One wake-up per batch: the thread takes the whole queue when it wakes.
    if (impl_->queue.empty()) impl_->signal_wake();
    impl_->queue.push_back(std::move(frame));
  }
}

SignalPeersCounters SignalPeers::counters() const {
  SignalPeersCounters counters;
  counters.forwarded = impl_->forwarded.load(std::memory_order_relaxed);
  counters.dropped = impl_->dropped.load(std::memory_order_relaxed);
  counters.peer_errors = impl_->peer_errors.load(std::memory_order_relaxed);
  counters.connected = impl_->connected.load(std::memory_order_relaxed);
  return counters;
}

}  // namespace turnstile::net
