#include "net/shard.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <vector>

#include "core/assert.h"
#include "core/routing.h"
#include "net/clock.h"
#include "net/deadline_timer.h"
#include "net/guard.h"
#include "net/idle_poll.h"
#include "net/log.h"

namespace turnstile::net {
namespace {

// Reply bytes handed to a socket's output buffer at most; the rest waits in the session, which
// then stops starting requests (core::SessionConfig::output_max).
constexpr std::size_t kSocketOutputMax = 256 * 1024;
// Request bytes buffered from a socket before libevent stops reading it (backpressure).
constexpr std::size_t kSocketInputMax = 64 * 1024;

core::SessionConfig session_config(const Config& config) {
  core::SessionConfig session;
  session.auth_secret = config.auth_token;
  session.read_timeout = core::Duration::seconds(config.read_timeout_s);
  session.idle_timeout = core::Duration::seconds(config.idle_timeout_s);
  return session;
}

core::EngineConfig engine_config(const Config& config, std::uint64_t fence_floor) {
  core::EngineConfig engine;
  engine.default_lease_s = config.default_lease_ttl_s;
  engine.gc_max_idle = core::Duration::seconds(config.gc_max_idle_s);
  engine.resources_max = config.max_locks;  // superseded by the shared budget
  engine.waiters_max = config.max_waiters;
  engine.fence_floor = core::Fence{fence_floor};
  return engine;
}

}  // namespace

// ---- SharedState -----------------------------------------------------------------------------

bool SharedState::Budget::try_take() {
  std::int64_t used = used_.load(std::memory_order_relaxed);
  while (used < max_) {
    if (used_.compare_exchange_weak(used, used + 1, std::memory_order_relaxed)) return true;
  }
  return false;
}

void SharedState::Budget::give_back() { used_.fetch_sub(1, std::memory_order_relaxed); }

bool SharedState::admit(const std::string& ip) {
  const std::int64_t max_total = config.max_connections;
  std::int64_t open = connections_open.load(std::memory_order_relaxed);
  do {
    if (max_total > 0 && open >= max_total) return false;
  } while (!connections_open.compare_exchange_weak(open, open + 1, std::memory_order_relaxed));
  std::lock_guard<std::mutex> lock(per_ip_mutex);
  std::int64_t& count = per_ip[ip];
  if (config.max_connections_per_ip > 0 && count >= config.max_connections_per_ip) {
    if (count == 0) per_ip.erase(ip);
    connections_open.fetch_sub(1, std::memory_order_relaxed);
    return false;
  }
  ++count;
  return true;
}

SharedState::TcpLatencyTotals SharedState::tcp_latency(core::Command command) const {
  TcpLatencyTotals totals;
  for (const Shard* shard : shards) shard->tcp_latency(command).add_to(totals);
  return totals;
}

void TcpLatency::record(core::Duration elapsed) {
  const double seconds = elapsed.seconds_double();
  std::size_t bucket = 0;
  while (bucket < kLatencyBuckets.size() && seconds > kLatencyBuckets[bucket]) ++bucket;
  const auto bump = [](std::atomic<std::uint64_t>& value, std::uint64_t by) {
    value.store(value.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  };
  bump(by_bucket_[bucket], 1);
  bump(sum_ns_, static_cast<std::uint64_t>(std::max<std::int64_t>(elapsed.ns(), 0)));
}

void TcpLatency::add_to(SharedState::TcpLatencyTotals& totals) const {
  std::uint64_t below = 0;
  for (std::size_t i = 0; i < by_bucket_.size(); ++i) {
    below += by_bucket_[i].load(std::memory_order_relaxed);
    if (i < totals.buckets.size()) totals.buckets[i] += below;
  }
  totals.count += below;
  totals.sum_ns += sum_ns_.load(std::memory_order_relaxed);
}

void SharedState::release(const std::string& ip) {
  connections_open.fetch_sub(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(per_ip_mutex);
  auto it = per_ip.find(ip);
  if (it != per_ip.end() && --it->second <= 0) per_ip.erase(it);
}

// ---- Connection --------------------------------------------------------------------------------

// One client connection on its shard: the socket (a bufferevent, plain or TLS), the core session
// that makes every protocol decision, and the bookkeeping for routing and close notices.
struct Connection {
  Connection(Shard& owner, core::SessionId id, bufferevent* socket, std::string ip,
             const core::SessionConfig& config, core::Instant now)
      : shard(owner),
        session(id, config, now),
        bev(socket),
        timer(owner.base_, &Connection::on_timer, this),
        peer_ip(std::move(ip)) {}

  Shard& shard;
  core::Session session;
  bufferevent* bev;     // null once the socket is closed
  DeadlineTimer timer;  // the session's next deadline
  std::string peer_ip;
  bool close_notified = false;  // the router was told (Router::close)
  bool eof_pending = false;     // EOF seen with request bytes still buffered
  // TLS only: the session cannot see a handshake or a record that arrives byte by byte, so a
  // guard timer holds them to --read-timeout (see on_tls_guard).
  SSL* ssl = nullptr;
  event* tls_guard = nullptr;
  bool handshake_done = false;
  std::optional<core::Instant> tls_partial_since;
  bool abort = false;  // the socket failed: close without flushing
  // Plain TCP writes its replies itself at the end of the loop turn (write_now, straight from the
  // session's output), so the replies of one turn (pipelined requests) cost one send and no
  // epoll_ctl, and no connection's write wakes its client before the turn's reads are done;
  // libevent's write event (and the output evbuffer) is used only while the kernel refuses bytes
  // (a slow reader), which is also when --write-timeout runs. TLS leaves writing to
  // bufferevent_openssl.
  bool direct_write = false;
  bool write_event_on = false;
  // Plain TCP also reads the socket itself (on_readable, without the FIONREAD ioctl libevent makes
  // before each read): into the shard's buffer, handed straight to the session, when nothing is
  // buffered; the bytes the session leaves, up to kSocketInputMax, wait in the bufferevent's
  // input. The bufferevent's own reading stays off.
  event* reader = nullptr;
  bool reading = false;
  bool write_pending = false;  // in the shard's to_write_ list
  // The request in flight, for the latency histogram (/metrics).
  core::Command routed_command = core::Command::kPing;
  core::Instant routed_at;

  static void on_read(bufferevent*, void* self);
  static void on_readable(evutil_socket_t fd, short, void* self);
  static void on_write(bufferevent*, void* self);
  static void on_event(bufferevent*, short events, void* self);
  static void on_timer(evutil_socket_t, short, void* self);
  static void on_tls_guard(evutil_socket_t, short, void* self);
  // Runs a callback's work (net/guard.h); when it throws, this client is closed (its session
  // ends as a driver close) and the shard goes on serving the others.
  template <typename Work>
  static void guard(Connection* connection, Work&& work);
};

template <typename Work>
void Connection::guard(Connection* connection, Work&& work) {
  if (guarded("connection event", std::forward<Work>(work))) return;
  guarded("closing a connection after an exception", [connection] {
    connection->abort = true;
    connection->session.close(core::CloseReason::kDriver);
    connection->shard.dirty_.push_back(connection);
    connection->shard.settle();
  });
}

// Checks a TLS connection every quarter read-timeout. A handshake not done within the read
// timeout is dropped. After it, a partial record that OpenSSL has held for a read timeout, with
// no request of the session's under way, counts as the session's read timeout: the session's
// own timer only starts at the first decrypted byte, which a trickled record never delivers.
void Connection::on_tls_guard(evutil_socket_t, short, void* self) {
  auto* connection = static_cast<Connection*>(self);
  guard(connection, [&] {
    if (connection->bev == nullptr) return;
    const core::Instant now = connection->shard.turn_now();
    const core::Duration read_timeout =
        core::Duration::seconds(connection->shard.shared_.config.read_timeout_s);
    if (!connection->handshake_done) {
      logf(LogLevel::kDebug, "session %llu: TLS handshake not done within the read timeout",
           static_cast<unsigned long long>(connection->session.id().value));
      connection->abort = true;
      connection->session.close(core::CloseReason::kReadTimeout);
    } else if (SSL_has_pending(connection->ssl) == 1) {
      if (!connection->tls_partial_since) {
        connection->tls_partial_since = now;
      } else if (now - *connection->tls_partial_since >= read_timeout) {
        connection->session.on_read_timeout(now);
      }
    } else {
      connection->tls_partial_since.reset();
    }
    if (!connection->session.closed()) {
      const timeval period = to_timeval(core::Duration::nanoseconds(read_timeout.ns() / 4));
      evtimer_add(connection->tls_guard, &period);
    }
    connection->shard.dirty_.push_back(connection);
    connection->shard.settle();
  });
}

void Connection::on_read(bufferevent*, void* self) {
  auto* connection = static_cast<Connection*>(self);
  guard(connection, [&] {
    connection->shard.dirty_.push_back(connection);
    connection->shard.settle();
  });
}

void Connection::on_readable(evutil_socket_t fd, short, void* self) {
  auto* connection = static_cast<Connection*>(self);
  guard(connection, [&] {
    Shard& shard = connection->shard;
    evbuffer* input = bufferevent_get_input(connection->bev);
    const std::size_t buffered = evbuffer_get_length(input);
    ssize_t got = -1;
    int read_errno = EAGAIN;
    if (buffered == 0) {
      got = shard.read_direct(*connection, fd);
      read_errno = errno;
    } else if (buffered < kSocketInputMax) {
      // Behind earlier bytes the session has not taken yet: append to them.
      // A socket bufferevent keeps its input's end frozen except while libevent itself reads.
      evbuffer_unfreeze(input, 0);
      evbuffer_iovec space[2];
      const int count = evbuffer_reserve_space(
          input, static_cast<ev_ssize_t>(kSocketInputMax - buffered), space, 2);
      iovec vectors[2];
      for (int i = 0; i < count; ++i) vectors[i] = iovec{space[i].iov_base, space[i].iov_len};
      got = count > 0 ? ::readv(fd, vectors, count) : -1;
      read_errno = errno;
      if (got > 0) {
        auto left = static_cast<std::size_t>(got);
        int used = 0;
        for (; used < count && left > 0; ++used) {
          space[used].iov_len = std::min(space[used].iov_len, left);
          left -= space[used].iov_len;
        }
        evbuffer_commit_space(input, space, used);
      }
      evbuffer_freeze(input, 0);
    }
    if (got == 0) {
      connection->eof_pending = true;  // delivered to the session once buffered input is taken
      shard.watch_reads(*connection, false);
    } else if (got < 0 && read_errno != EAGAIN && read_errno != EWOULDBLOCK &&
               read_errno != EINTR) {
      connection->abort = true;
      connection->session.on_peer_closed(shard.turn_now());
      shard.watch_reads(*connection, false);
    }
    if (evbuffer_get_length(input) >= kSocketInputMax) shard.watch_reads(*connection, false);
    shard.dirty_.push_back(connection);
    shard.settle();
  });
}

void Connection::on_write(bufferevent*, void* self) {
  auto* connection = static_cast<Connection*>(self);
  guard(connection, [&] {
    if (connection->direct_write && connection->write_event_on) {
      // libevent drained what the kernel refused earlier: direct writes again.
      bufferevent_disable(connection->bev, EV_WRITE);
      connection->write_event_on = false;
    }
    connection->shard.dirty_.push_back(connection);
    connection->shard.settle();
  });
}

void Connection::on_event(bufferevent*, short events, void* self) {
  auto* connection = static_cast<Connection*>(self);
  guard(connection, [&] {
    const core::Instant now = connection->shard.turn_now();
    if ((events & BEV_EVENT_CONNECTED) != 0) {
      connection->handshake_done = true;  // TLS: the handshake completed
    } else if ((events & BEV_EVENT_EOF) != 0 && (events & BEV_EVENT_WRITING) != 0) {
      // bufferevent_openssl reports a write that failed (EPIPE, ECONNRESET) as an EOF while writing
      // when dirty shutdowns are allowed: the peer is gone, as for an error.
      connection->abort = true;
      connection->session.on_peer_closed(now);
    } else if ((events & BEV_EVENT_EOF) != 0) {
      connection->eof_pending = true;  // delivered to the session once buffered input is taken
      // bufferevent_openssl stops writing as well as reading when its peer's close_notify (or a
      // dirty shutdown) arrives, and adds its write event back only when bytes are added to an
      // empty output. Replies still owed to the half-closed peer would wait for ever: write on.
      if (connection->ssl != nullptr) bufferevent_enable(connection->bev, EV_WRITE);
    } else if ((events & BEV_EVENT_ERROR) != 0) {
      connection->abort = true;
      connection->session.on_peer_closed(now);
    } else if ((events & BEV_EVENT_TIMEOUT) != 0 && (events & BEV_EVENT_WRITING) != 0) {
      logf(LogLevel::kDebug, "session %llu: write timeout, closing",
           static_cast<unsigned long long>(connection->session.id().value));
      connection->abort = true;
      connection->session.close(core::CloseReason::kDriver);
    }
    connection->shard.dirty_.push_back(connection);
    connection->shard.settle();
  });
}

void Connection::on_timer(evutil_socket_t, short, void* self) {
  auto* connection = static_cast<Connection*>(self);
  guard(connection, [&] {
    connection->timer.fired();
    connection->session.on_timer(connection->shard.turn_now());
    connection->shard.dirty_.push_back(connection);
    connection->shard.settle();
  });
}

// ---- Shard ------------------------------------------------------------------------------------

Shard::Shard(std::size_t index, SharedState& shared, std::uint64_t fence_floor,
             core::FenceSource* fences)
    : index_(index),
      shared_(shared),
      engine_(engine_config(shared.config, fence_floor), salts_, &shared.budget, fences),
      router_(core::RouterConfig{index, static_cast<std::size_t>(shared.config.threads),
                                 shared.config.auto_release_on_disconnect,
                                 core::EngineConfig{}.stats_entries_max},
              engine_),
      read_scratch_(std::make_unique_for_overwrite<char[]>(kSocketInputMax)) {
  event_config* config = event_config_new();
  event_config_set_flag(config, EVENT_BASE_FLAG_NOLOCK);  // one thread owns this base
  // evhttp turns a connection's read and write interest off and on around every request (four
  // epoll_ctl calls); with the changelist, changes within one loop turn cost at most one. No
  // descriptor on a shard's base is a dup of another on the same base (the caveat of this flag).
  event_config_set_flag(config, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
  base_ = event_base_new_with_config(config);
  event_config_free(config);
  TS_ASSERT(base_ != nullptr);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  TS_ASSERT(wake_fd_ >= 0);
  mailbox_event_ = event_new(base_, wake_fd_, EV_READ | EV_PERSIST, &Shard::on_mailbox, this);
  event_add(mailbox_event_, nullptr);
  engine_timer_.emplace(base_, &Shard::on_engine_timer, this);
}

Shard::~Shard() {
  for (auto& [id, connection] : connections_) {
    if (connection->tls_guard != nullptr) event_free(connection->tls_guard);
    if (connection->reader != nullptr) event_free(connection->reader);
    if (connection->bev != nullptr) bufferevent_free(connection->bev);
  }
  connections_.clear();
  engine_timer_.reset();
  event_free(mailbox_event_);
  close(wake_fd_);
  event_base_free(base_);
}

void Shard::start() {
  thread_ = std::thread([this] { run(); });
}

void Shard::join() {
  if (thread_.joinable()) thread_.join();
}

void Shard::pin_to_cpu() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) {
    logf(LogLevel::kWarn, "shard %zu: cannot read its CPU set: %s", index_, std::strerror(errno));
    return;
  }
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &allowed)) cpus.push_back(cpu);
  }
  if (cpus.empty()) return;
  const int cpu = cpus[index_ % cpus.size()];
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  if (sched_setaffinity(0, sizeof one, &one) != 0) {
    logf(LogLevel::kWarn, "shard %zu: cannot pin to CPU %d: %s", index_, cpu, std::strerror(errno));
    return;
  }
  logf(LogLevel::kInfo, "shard %zu runs on CPU %d only (--pin-threads)", index_, cpu);
}

void Shard::run() {
  if (shared_.config.pin_threads) pin_to_cpu();
  // Each turn: the mailbox, then one non-blocking pass over ready sockets and due timers. After
  // the last event the shard polls for IdlePoll's window (yielding the CPU between polls), then
  // sleeps in epoll_wait; only a sleeping shard needs its eventfd written (post()).
  //
  // Each turn reads the clock once (turn_now(), at its first use) and handles every event of the
  // turn at that instant. The reading that starts a turn also ends the one before, which is how
  // long turns are measured (note_turn).
  IdlePoll poll(core::Duration::nanoseconds(shared_.config.idle_poll_us * 1000));
  turn_now_.reset();
  core::Instant last_event = turn_now();
  core::Instant turn_start = last_event;
  std::uint64_t turn_events = 0;  // settle() calls of the turn that began at turn_start
  while (!stopped_) {
    turn_now_.reset();
    const core::Instant start = turn_now();
    if (turn_events > 0) {
      note_turn(turn_start, start, turn_events);
      last_event = start;
    }
    turn_start = start;
    const std::uint64_t events_before = events_;
    defer_writes_ = true;
    drain_mailbox();
    event_base_loop(base_, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    defer_writes_ = false;
    if (!to_write_.empty()) guarded("shard settle", [this] { settle(); });
    turn_events = events_ - events_before;
    if (turn_events > 0) continue;
    if (start - last_event < poll.window()) {
      sched_yield();
      continue;
    }
    asleep_.store(true);
    bool empty = false;
    {
      std::lock_guard<std::mutex> lock(mailbox_mutex_);
      empty = mailbox_.empty();
    }
    // The events after the wake are handled at a fresh reading, taken by the first of them.
    turn_now_.reset();
    const std::uint64_t events_before_sleep = events_;
    if (empty) {
      defer_writes_ = true;
      event_base_loop(base_, EVLOOP_ONCE);
      defer_writes_ = false;
      if (!to_write_.empty()) guarded("shard settle", [this] { settle(); });
    }
    asleep_.store(false);
    const core::Instant woken = turn_now();
    poll.on_woken(woken - last_event);
    last_event = woken;
    turn_start = woken;
    turn_events = events_ - events_before_sleep;
  }
  logf(LogLevel::kInfo, "shard %zu: longest loop turn %.2f ms, %llu over 10 ms", index_,
       longest_turn_.seconds_double() * 1000, static_cast<unsigned long long>(long_turns_));
}

core::Instant Shard::turn_now() {
  if (!turn_now_) turn_now_ = monotonic_now();
  return *turn_now_;
}

void Shard::note_turn(core::Instant start, core::Instant end, std::uint64_t events) {
  const core::Duration took = end - start;
  longest_turn_ = std::max(longest_turn_, took);
  if (took <= core::Duration::milliseconds(10)) return;
  ++long_turns_;
  if (took > unlogged_longest_) {
    unlogged_longest_ = took;
    unlogged_longest_events_ = events;
  }
  if (end - long_turn_logged_ < core::Duration::seconds(1)) return;
  long_turn_logged_ = end;
  logf(LogLevel::kWarn, "shard %zu: a loop turn took %.2f ms, %llu events (%llu over 10 ms so far)",
       index_, unlogged_longest_.seconds_double() * 1000,
       static_cast<unsigned long long>(unlogged_longest_events_),
       static_cast<unsigned long long>(long_turns_));
  unlogged_longest_ = core::Duration::zero();
}

void Shard::drain_mailbox() {
  {
    std::lock_guard<std::mutex> lock(mailbox_mutex_);
    if (mailbox_.empty()) return;
    processing_.swap(mailbox_);
  }
  for (Message& message : processing_) {
    guarded("shard message", [&] { handle(message); });
  }
  processing_.clear();
  guarded("shard settle", [this] { settle(); });
}

void Shard::post(Message message) {
  bool was_empty = false;
  {
    std::lock_guard<std::mutex> lock(mailbox_mutex_);
    was_empty = mailbox_.empty();
    mailbox_.push_back(std::move(message));
  }
  // The shard sets asleep_ before its last look at the mailbox and sleeps only if that look found
  // it empty; both sides use sequentially consistent operations, so either the shard sees this
  // message or this thread sees asleep_ and wakes it. An awake shard drains the mailbox every
  // turn, and it drains all of it, so one eventfd write per batch suffices.
  if (was_empty && asleep_.load()) {
    const std::uint64_t one = 1;
    ssize_t written = ::write(wake_fd_, &one, sizeof one);
    (void)written;  // EAGAIN means the counter is already non-zero: the shard will wake anyway
  }
}

void Shard::on_mailbox(evutil_socket_t fd, short, void* self) {
  auto* shard = static_cast<Shard*>(self);
  std::uint64_t count = 0;
  ssize_t got = ::read(fd, &count, sizeof count);
  (void)got;
  shard->drain_mailbox();
}

void Shard::on_engine_timer(evutil_socket_t, short, void* self) {
  auto* shard = static_cast<Shard*>(self);
  shard->engine_timer_->fired();
  guarded("engine timer", [shard] {
    shard->router_.tick(shard->turn_now());
    shard->settle();
  });
}

void Shard::handle(Message& message) {
  std::visit([this](auto& m) { handle(m); }, message);
}

void Shard::handle(message::NewConnection& m) {
  bufferevent* bev = nullptr;
  SSL* ssl = nullptr;
  if (shared_.tls != nullptr) {
    ssl = SSL_new(shared_.tls);
    bev = bufferevent_openssl_socket_new(base_, m.fd, ssl, BUFFEREVENT_SSL_ACCEPTING,
                                         BEV_OPT_CLOSE_ON_FREE);
    if (bev != nullptr) bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
  } else {
    bev = bufferevent_socket_new(base_, m.fd, BEV_OPT_CLOSE_ON_FREE);
  }
  if (bev == nullptr) {
    logf(LogLevel::kWarn, "cannot set up a connection from %s", m.peer_ip.c_str());
    ::close(m.fd);
    shared_.release(m.peer_ip);
    return;
  }
  const core::SessionId id = router_.new_session_id();
  const core::Instant now = turn_now();
  auto connection =
      std::make_unique<Connection>(*this, id, bev, m.peer_ip, session_config(shared_.config), now);
  Connection* raw = connection.get();
  connections_.emplace(id.value, std::move(connection));
  sockets_open_.fetch_add(1, std::memory_order_relaxed);
  if (ssl != nullptr) {
    raw->ssl = ssl;
    raw->tls_guard = evtimer_new(base_, &Connection::on_tls_guard, raw);
    const timeval first =
        to_timeval(core::Duration::seconds(shared_.config.read_timeout_s));  // handshake limit
    evtimer_add(raw->tls_guard, &first);
  }
  bufferevent_setcb(bev, &Connection::on_read, &Connection::on_write, &Connection::on_event, raw);
  if (shared_.config.write_timeout_s > 0) {
    const timeval write_timeout =
        to_timeval(core::Duration::seconds(shared_.config.write_timeout_s));
    bufferevent_set_timeouts(bev, nullptr, &write_timeout);
  }
  raw->direct_write = ssl == nullptr;
  if (raw->direct_write) {
    bufferevent_disable(bev, EV_READ | EV_WRITE);  // a new bufferevent has EV_WRITE on
    raw->reader = event_new(base_, m.fd, EV_READ | EV_PERSIST, &Connection::on_readable, raw);
    watch_reads(*raw, true);
  } else {
    bufferevent_setwatermark(bev, EV_READ, 0, kSocketInputMax);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
  }
  logf(LogLevel::kDebug, "session %llu: connected from %s",
       static_cast<unsigned long long>(id.value), m.peer_ip.c_str());
  if (draining_) raw->session.begin_drain(now);
  dirty_.push_back(raw);
}

void Shard::handle(core::RouterMessage& m) { router_.receive(turn_now(), std::move(m)); }

void Shard::handle(ServiceMessage& m) {
  if (service_ != nullptr) service_->on_message(m);
}

void Shard::handle(message::Drain&) {
  draining_ = true;
  if (service_ != nullptr) service_->begin_drain();
  const core::Instant now = turn_now();
  for (auto& [id, connection] : connections_) {
    connection->session.begin_drain(now);
    dirty_.push_back(connection.get());
  }
}

void Shard::handle(message::Stop&) {
  for (auto& [id, connection] : connections_) {
    if (connection->bev != nullptr) close_socket(*connection);
  }
  if (service_ != nullptr) service_->stop();
  stopped_ = true;
  event_base_loopbreak(base_);
}

// ---- the router's output
// -------------------------------------------------------------------------

Connection* Shard::find(core::SessionId session) {
  auto it = connections_.find(session.value);
  return it == connections_.end() ? nullptr : it->second.get();
}

void Shard::deliver_router_output(core::Instant now) {
  for (core::Envelope& envelope : router_.take_outbox()) {
    shared_.shards[envelope.to]->post(std::move(envelope.message));
  }
  for (core::SessionEvent& event : router_.take_events()) on_session_event(now, event);
}

void Shard::on_session_event(core::Instant now, core::SessionEvent& event) {
  Connection* connection = find(event.session);
  if (connection == nullptr) {
    if (service_ != nullptr && service_->owns(event.session)) {
      service_->on_session_event(now, event);
    } else {
      logf(LogLevel::kWarn, "router event for unknown session %llu dropped",
           static_cast<unsigned long long>(event.session.value));
    }
    return;
  }
  core::Session& session = connection->session;
  switch (event.kind) {
    case core::SessionEvent::Kind::kParked:
      session.on_parked();
      break;
    case core::SessionEvent::Kind::kCancelled:
      session.on_cancelled();
      break;
    case core::SessionEvent::Kind::kReply:
    case core::SessionEvent::Kind::kStats: {
      const auto command = static_cast<std::size_t>(connection->routed_command);
      if (command < tcp_latency_.size()) {
        tcp_latency_[command].record(now - connection->routed_at);
      }
      if (event.kind == core::SessionEvent::Kind::kStats) {
        const std::int64_t open = shared_.connections_open.load(std::memory_order_relaxed) +
                                  shared_.http_sessions_live.load(std::memory_order_relaxed);
        session.on_reply(now, core::Reply::stats(core::encode_stats_json(open, event.stats)));
      } else {
        session.on_reply(now, event.reply);
      }
      break;
    }
  }
  dirty_.push_back(connection);
}

// ---- connection servicing ---------------------------------------------------------------------

void Shard::settle() {
  ++events_;
  // Local replies and dirty connections may create more of each; go until both are empty.
  std::vector<Connection*> serviced;
  while (true) {
    while (!router_.idle() || !dirty_.empty()) {
      deliver_router_output(turn_now());
      std::vector<Connection*> dirty;
      dirty.swap(dirty_);
      std::sort(dirty.begin(), dirty.end());
      dirty.erase(std::unique(dirty.begin(), dirty.end()), dirty.end());
      for (Connection* connection : dirty) service(*connection);
      serviced.insert(serviced.end(), dirty.begin(), dirty.end());
    }
    // Everything this turn produced is answered: each connection's replies leave in one write.
    if (to_write_.empty() || defer_writes_) break;
    std::vector<Connection*> writes;
    writes.swap(to_write_);
    for (Connection* connection : writes) {
      connection->write_pending = false;
      if (connection->bev == nullptr || connection->abort || connection->write_event_on) continue;
      write_now(*connection);
      // Service it again when the write failed, when the session has more output than one
      // flush takes (a large stats reply), or when a closing session's last bytes just left.
      // Also when it has requests or bytes waiting that a full output held back.
      if (connection->abort || connection->session.closed() ||
          !connection->session.output().empty() || connection->session.queued_requests() > 0 ||
          evbuffer_get_length(bufferevent_get_input(connection->bev)) > 0) {
        dirty_.push_back(connection);
      }
    }
  }
  // Forget connections whose socket is closed and whose session has settled everything. Only a
  // connection serviced just now can have reached that state, so only those are looked at: the
  // cost of an event never depends on how many connections the shard holds.
  std::sort(serviced.begin(), serviced.end());
  serviced.erase(std::unique(serviced.begin(), serviced.end()), serviced.end());
  for (Connection* connection : serviced) {
    if (connection->bev != nullptr || !connection->session.finished() ||
        !connection->close_notified) {
      continue;
    }
    if (connection->tls_guard != nullptr) event_free(connection->tls_guard);
    // Its replies may still wait for the end of the turn (a reset read in the same turn).
    if (connection->write_pending) std::erase(to_write_, connection);
    connections_.erase(connection->session.id().value);  // destroys *connection
  }
  arm_engine_timer();
}

void Shard::arm_engine_timer() { engine_timer_->arm(router_.next_wake(), turn_now()); }

void Shard::watch_reads(Connection& connection, bool on) {
  if (connection.reader == nullptr || connection.reading == on) return;
  connection.reading = on;
  if (on) {
    event_add(connection.reader, nullptr);
  } else {
    event_del(connection.reader);
  }
}

void Shard::feed_input(Connection& connection, core::Instant now) {
  evbuffer* input = bufferevent_get_input(connection.bev);
  while (evbuffer_get_length(input) > 0) {
    evbuffer_iovec chunk{};
    if (evbuffer_peek(input, -1, nullptr, &chunk, 1) < 1) break;
    const std::size_t used = connection.session.on_bytes(
        now, std::string_view(static_cast<const char*>(chunk.iov_base), chunk.iov_len));
    evbuffer_drain(input, used);
    if (used < chunk.iov_len) break;  // the session's pipeline is full: leave the rest
  }
  if (connection.eof_pending && evbuffer_get_length(input) == 0) {
    connection.eof_pending = false;
    connection.session.on_peer_eof(now);
  }
  // Reading resumes once the input has room again (the session took bytes). An EOF is final:
  // the socket is never read again after it (a read would only report the EOF once more).
  if (!connection.eof_pending && !connection.abort && !connection.session.input_ended() &&
      evbuffer_get_length(input) < kSocketInputMax) {
    watch_reads(connection, true);
  }
}

ssize_t Shard::read_direct(Connection& connection, evutil_socket_t fd) {
  const ssize_t got = ::read(fd, read_scratch_.get(), kSocketInputMax);
  if (got <= 0) return got;  // errno as read() left it
  const std::string_view bytes(read_scratch_.get(), static_cast<std::size_t>(got));
  const std::size_t used = connection.session.on_bytes(turn_now(), bytes);
  if (used < bytes.size()) {
    // The session's pipeline is full: the rest waits in the input buffer (feed_input).
    evbuffer* input = bufferevent_get_input(connection.bev);
    evbuffer_unfreeze(input, 0);
    evbuffer_add(input, bytes.data() + used, bytes.size() - used);
    evbuffer_freeze(input, 0);
  }
  return got;
}

void Shard::flush_output(Connection& connection) {
  evbuffer* output = bufferevent_get_output(connection.bev);
  if (connection.direct_write && !connection.write_event_on && evbuffer_get_length(output) == 0) {
    // Nothing waits ahead of the session's bytes: write_now sends them from the session itself.
    if (!connection.session.output().empty() && !connection.write_pending) {
      connection.write_pending = true;
      to_write_.push_back(&connection);
    }
    return;
  }
  while (!connection.session.output().empty()) {
    const std::size_t queued = evbuffer_get_length(output);
    if (queued >= kSocketOutputMax) break;
    const std::string_view bytes = connection.session.output();
    const std::size_t take = std::min(bytes.size(), kSocketOutputMax - queued);
    evbuffer_add(output, bytes.data(), take);
    connection.session.consume_output(take);
  }
  if (connection.direct_write && !connection.write_event_on && !connection.write_pending &&
      evbuffer_get_length(output) > 0) {
    connection.write_pending = true;
    to_write_.push_back(&connection);
  }
}

void Shard::write_now(Connection& connection) {
  evbuffer* output = bufferevent_get_output(connection.bev);
  const evutil_socket_t fd = bufferevent_getfd(connection.bev);
  core::Session& session = connection.session;
  const auto peer_gone = [&] {
    // EPIPE, ECONNRESET...: as when libevent reports a socket error.
    connection.abort = true;
    session.on_peer_closed(turn_now());
  };
  if (evbuffer_get_length(output) == 0) {
    // The common case: the replies go from the session's buffer to the socket, no copy.
    while (!session.output().empty()) {
      const ssize_t wrote =
          ::send(fd, session.output().data(), session.output().size(), MSG_NOSIGNAL);
      if (wrote > 0) {
        session.consume_output(static_cast<std::size_t>(wrote));
      } else if (wrote < 0 && errno == EINTR) {
        continue;
      } else if (wrote < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
        return peer_gone();
      } else {
        break;  // the kernel takes no more now
      }
    }
    if (!session.output().empty()) {
      // The rest goes to libevent, which writes it as the socket drains.
      const std::size_t take = std::min(session.output().size(), kSocketOutputMax);
      evbuffer_add(output, session.output().data(), take);
      session.consume_output(take);
    }
  }
  while (evbuffer_get_length(output) > 0) {
    // A socket bufferevent keeps its output's front frozen except while libevent itself writes.
    evbuffer_unfreeze(output, 1);
    const int wrote = evbuffer_write(output, fd);
    const int write_errno = errno;
    evbuffer_freeze(output, 1);
    if (wrote > 0) continue;
    if (wrote < 0 && write_errno == EINTR) continue;
    if (wrote == 0 || write_errno == EAGAIN || write_errno == EWOULDBLOCK) break;
    return peer_gone();
  }
  if (evbuffer_get_length(output) > 0) {
    // A slow reader: libevent writes the rest when the socket drains, under --write-timeout.
    bufferevent_enable(connection.bev, EV_WRITE);
    connection.write_event_on = true;
  }
}

void Shard::service(Connection& connection) {
  core::Session& session = connection.session;
  const core::Instant now = turn_now();
  bool progress = true;
  while (progress) {
    progress = false;
    if (connection.bev != nullptr && !connection.abort) {
      feed_input(connection, now);
      const std::size_t before = session.output().size();
      flush_output(connection);
      progress = session.output().size() != before;
    }
    while (std::optional<core::Request> request = session.next_request(now)) {
      connection.routed_command = request->command;
      connection.routed_at = now;
      router_.submit(now, session.id(), *request);
      progress = true;
    }
    // The router's events for this connection are applied by settle(), which services it again.
  }

  if (session.closed() && !connection.close_notified) {
    connection.close_notified = true;
    router_.close(now, session.id());
  }

  if (connection.bev != nullptr && session.closed()) {
    const bool flushed = session.output().empty() &&
                         evbuffer_get_length(bufferevent_get_output(connection.bev)) == 0;
    if (flushed || connection.abort) {
      close_socket(connection);
    } else {
      bufferevent_disable(connection.bev, EV_READ);  // only the remaining replies go out
      watch_reads(connection, false);
    }
  }

  connection.timer.arm(session.next_deadline(), now);
}

void Shard::close_socket(Connection& connection) {
  logf(LogLevel::kDebug, "session %llu: closed (%s)",
       static_cast<unsigned long long>(connection.session.id().value),
       std::string(core::close_reason_name(connection.session.close_reason())).c_str());
  if (connection.reader != nullptr) event_free(connection.reader);
  connection.reader = nullptr;
  connection.reading = false;
  bufferevent_free(connection.bev);
  connection.bev = nullptr;
  connection.ssl = nullptr;  // freed with the bufferevent
  if (connection.tls_guard != nullptr) evtimer_del(connection.tls_guard);
  sockets_open_.fetch_sub(1, std::memory_order_relaxed);
  shared_.release(connection.peer_ip);
}

}  // namespace turnstile::net
