#include "net/tcp_connections.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <utility>

#include "core/assert.h"
#include "core/stats.h"
#include "net/clock.h"
#include "net/deadline_timer.h"
#include "net/guard.h"
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
  session.signal_queue_max = static_cast<std::size_t>(config.signal_queue);
  return session;
}

}  // namespace

// ---- Connection --------------------------------------------------------------------------------

// One client connection on its shard: the socket (a bufferevent, plain or TLS), the core session
// that makes every protocol decision, and the bookkeeping for routing and close notices.
struct Connection {
  Connection(TcpConnections& owner, core::SessionId id, bufferevent* socket, std::string ip,
             const core::SessionConfig& config, core::Instant now)
      : table(owner),
        port(id, config, now),
        session(port.session()),
        bev(socket),
        timer(owner.loop_.base(), &Connection::on_timer, this),
        peer_ip(std::move(ip)) {}

  TcpConnections& table;
  core::SessionPort port;  // the session and its router traffic
  core::Session& session;  // port's
  bufferevent* bev;        // null once the socket is closed
  DeadlineTimer timer;     // the session's next deadline
  std::string peer_ip;
  bool eof_pending = false;  // EOF seen with request bytes still buffered
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
  bool write_pending = false;  // in the table's to_write_ list

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
    connection->table.dirty_.push_back(connection);
    connection->table.loop_.settle();
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
    const core::Instant now = connection->table.loop_.turn_now();
    const core::Duration read_timeout =
        core::Duration::seconds(connection->table.shared_.config.read_timeout_s);
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
    connection->table.dirty_.push_back(connection);
    connection->table.loop_.settle();
  });
}

void Connection::on_read(bufferevent*, void* self) {
  auto* connection = static_cast<Connection*>(self);
  guard(connection, [&] {
    connection->table.dirty_.push_back(connection);
    connection->table.loop_.settle();
  });
}

void Connection::on_readable(evutil_socket_t fd, short, void* self) {
  auto* connection = static_cast<Connection*>(self);
  guard(connection, [&] {
    TcpConnections& owner = connection->table;
    evbuffer* input = bufferevent_get_input(connection->bev);
    const std::size_t buffered = evbuffer_get_length(input);
    ssize_t got = -1;
    int read_errno = EAGAIN;
    if (buffered == 0) {
      got = owner.read_direct(*connection, fd);
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
      owner.watch_reads(*connection, false);
    } else if (got < 0 && read_errno != EAGAIN && read_errno != EWOULDBLOCK &&
               read_errno != EINTR) {
      connection->abort = true;
      connection->session.on_peer_closed(owner.loop_.turn_now());
      owner.watch_reads(*connection, false);
    }
    if (evbuffer_get_length(input) >= kSocketInputMax) owner.watch_reads(*connection, false);
    owner.dirty_.push_back(connection);
    owner.loop_.settle();
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
    connection->table.dirty_.push_back(connection);
    connection->table.loop_.settle();
  });
}

void Connection::on_event(bufferevent*, short events, void* self) {
  auto* connection = static_cast<Connection*>(self);
  guard(connection, [&] {
    const core::Instant now = connection->table.loop_.turn_now();
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
    connection->table.dirty_.push_back(connection);
    connection->table.loop_.settle();
  });
}

void Connection::on_timer(evutil_socket_t, short, void* self) {
  auto* connection = static_cast<Connection*>(self);
  guard(connection, [&] {
    connection->timer.fired();
    connection->session.on_timer(connection->table.loop_.turn_now());
    connection->table.dirty_.push_back(connection);
    connection->table.loop_.settle();
  });
}

// ---- the table ----------------------------------------------------------------------------------

TcpConnections::TcpConnections(ShardLoop& loop, SharedState& shared,
                               SharedState::TcpLatencies& latency)
    : loop_(loop),
      shared_(shared),
      latency_(latency),
      read_scratch_(std::make_unique_for_overwrite<char[]>(kSocketInputMax)) {}

TcpConnections::~TcpConnections() { clear(); }

void TcpConnections::clear() {
  for (auto& [id, connection] : connections_) {
    if (connection->tls_guard != nullptr) event_free(connection->tls_guard);
    if (connection->reader != nullptr) event_free(connection->reader);
    if (connection->bev != nullptr) bufferevent_free(connection->bev);
  }
  connections_.clear();
  dirty_.clear();
  serviced_.clear();
  to_write_.clear();
}

void TcpConnections::accept(int fd, const std::string& peer_ip, bool draining) {
  bufferevent* bev = nullptr;
  SSL* ssl = nullptr;
  if (shared_.tls != nullptr) {
    ssl = SSL_new(shared_.tls);
    bev = bufferevent_openssl_socket_new(loop_.base(), fd, ssl, BUFFEREVENT_SSL_ACCEPTING,
                                         BEV_OPT_CLOSE_ON_FREE);
    if (bev != nullptr) bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
  } else {
    bev = bufferevent_socket_new(loop_.base(), fd, BEV_OPT_CLOSE_ON_FREE);
  }
  if (bev == nullptr) {
    logf(LogLevel::kWarn, "cannot set up a connection from %s", peer_ip.c_str());
    ::close(fd);
    shared_.release(peer_ip);
    return;
  }
  const core::SessionId id = loop_.router().new_session_id();
  const core::Instant now = loop_.turn_now();
  auto connection =
      std::make_unique<Connection>(*this, id, bev, peer_ip, session_config(shared_.config), now);
  Connection* raw = connection.get();
  connections_.emplace(id.value, std::move(connection));
  sockets_open_.fetch_add(1, std::memory_order_relaxed);
  if (ssl != nullptr) {
    raw->ssl = ssl;
    raw->tls_guard = evtimer_new(loop_.base(), &Connection::on_tls_guard, raw);
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
    raw->reader = event_new(loop_.base(), fd, EV_READ | EV_PERSIST, &Connection::on_readable, raw);
    watch_reads(*raw, true);
  } else {
    bufferevent_setwatermark(bev, EV_READ, 0, kSocketInputMax);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
  }
  logf(LogLevel::kDebug, "session %llu: connected from %s",
       static_cast<unsigned long long>(id.value), peer_ip.c_str());
  if (draining) raw->session.begin_drain(now);
  dirty_.push_back(raw);
}

Connection* TcpConnections::find(core::SessionId session) const {
  auto it = connections_.find(session.value);
  return it == connections_.end() ? nullptr : it->second.get();
}

bool TcpConnections::owns(core::SessionId session) const { return find(session) != nullptr; }

void TcpConnections::on_session_event(core::Instant now, core::SessionEvent& event) {
  Connection* connection = find(event.session);
  TS_ASSERT(connection != nullptr);  // the shard asked owns() first
  core::Session& session = connection->session;
  // A slow consumer's frames pile up unread: close it at once, without flushing them.
  if (event.kind == core::SessionEvent::Kind::kSlowConsumer) connection->abort = true;
  const std::int64_t open = event.kind != core::SessionEvent::Kind::kStats
                                ? 0
                                : shared_.connections_open.load(std::memory_order_relaxed) +
                                      shared_.http_sessions_live.load(std::memory_order_relaxed);
  const core::Delivered delivered = connection->port.deliver(now, event, open);
  if (delivered.kind == core::SessionEvent::Kind::kReply ||
      delivered.kind == core::SessionEvent::Kind::kStats) {
    latency_[static_cast<std::size_t>(delivered.command)].record(delivered.latency);
  }
  // Past its queue, the frames go to the socket now rather than at the end of the turn: a
  // listener that reads keeps up, one that does not (or has gone) is closed here, after
  // `--signal-queue` frames more than its socket took, instead of having every frame of the
  // turn copied into its output (frames from a busy publisher or another shard's mailbox can
  // be thousands of 64 KiB each), and the frames after its close cost nothing.
  if (event.kind == core::SessionEvent::Kind::kSignal && !session.closed() &&
      connection->bev != nullptr && !connection->abort &&
      session.unwritten_frames() > static_cast<std::size_t>(shared_.config.signal_queue)) {
    if (connection->direct_write && !connection->write_event_on &&
        evbuffer_get_length(bufferevent_get_output(connection->bev)) == 0) {
      write_now(*connection);
    } else {
      flush_output(*connection);  // a full output buffer makes the session check its queue
    }
  }
  dirty_.push_back(connection);
}

void TcpConnections::begin_drain(core::Instant now) {
  for (auto& [id, connection] : connections_) {
    connection->session.begin_drain(now);
    dirty_.push_back(connection.get());
  }
}

void TcpConnections::close_all() {
  for (auto& [id, connection] : connections_) {
    if (connection->bev != nullptr) close_socket(*connection);
  }
}

void TcpConnections::service_dirty(core::Instant now) {
  std::vector<Connection*> dirty;
  dirty.swap(dirty_);
  std::sort(dirty.begin(), dirty.end());
  dirty.erase(std::unique(dirty.begin(), dirty.end()), dirty.end());
  for (Connection* connection : dirty) service(*connection, now);
  serviced_.insert(serviced_.end(), dirty.begin(), dirty.end());
}

void TcpConnections::write_replies() {
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

void TcpConnections::forget_finished() {
  std::sort(serviced_.begin(), serviced_.end());
  serviced_.erase(std::unique(serviced_.begin(), serviced_.end()), serviced_.end());
  for (Connection* connection : serviced_) {
    if (connection->bev != nullptr || !connection->port.close_told() ||
        !connection->session.finished()) {
      continue;
    }
    if (connection->tls_guard != nullptr) event_free(connection->tls_guard);
    // Its replies may still wait for the end of the turn (a reset read in the same turn).
    if (connection->write_pending) std::erase(to_write_, connection);
    connections_.erase(connection->session.id().value);  // destroys *connection
  }
  serviced_.clear();
}

void TcpConnections::watch_reads(Connection& connection, bool on) {
  if (connection.reader == nullptr || connection.reading == on) return;
  connection.reading = on;
  if (on) {
    event_add(connection.reader, nullptr);
  } else {
    event_del(connection.reader);
  }
}

void TcpConnections::feed_input(Connection& connection, core::Instant now) {
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

ssize_t TcpConnections::read_direct(Connection& connection, int fd) {
  const ssize_t got = ::read(fd, read_scratch_.get(), kSocketInputMax);
  if (got <= 0) return got;  // errno as read() left it
  const std::string_view bytes(read_scratch_.get(), static_cast<std::size_t>(got));
  const std::size_t used = connection.session.on_bytes(loop_.turn_now(), bytes);
  if (used < bytes.size()) {
    // The session's pipeline is full: the rest waits in the input buffer (feed_input).
    evbuffer* input = bufferevent_get_input(connection.bev);
    evbuffer_unfreeze(input, 0);
    evbuffer_add(input, bytes.data() + used, bytes.size() - used);
    evbuffer_freeze(input, 0);
  }
  return got;
}

void TcpConnections::flush_output(Connection& connection) {
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
  // The output buffer is full (or TLS writes it): what the session still holds is backlog.
  if (evbuffer_get_length(output) >= kSocketOutputMax) connection.session.after_write();
  report_frames_written(connection);
}

void TcpConnections::report_frames_written(Connection& connection) {
  const std::size_t frames = connection.session.take_frames_written();
  if (frames != 0) loop_.router().signals_written(connection.session.id(), frames);
}

void TcpConnections::write_now(Connection& connection) {
  evbuffer* output = bufferevent_get_output(connection.bev);
  const evutil_socket_t fd = bufferevent_getfd(connection.bev);
  core::Session& session = connection.session;
  const auto peer_gone = [&] {
    // EPIPE, ECONNRESET...: as when libevent reports a socket error.
    connection.abort = true;
    session.on_peer_closed(loop_.turn_now());
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
  session.after_write();  // a signal backlog the socket would not take closes it
  report_frames_written(connection);
}

void TcpConnections::service(Connection& connection, core::Instant now) {
  core::Session& session = connection.session;
  std::optional<core::Instant> next_deadline;
  bool progress = true;
  while (progress) {
    progress = false;
    if (connection.bev != nullptr && !connection.abort) {
      feed_input(connection, now);
      const std::size_t before = session.output().size();
      flush_output(connection);
      progress = session.output().size() != before;
    }
    // The pump first answers what the session answers itself (a ping, a protocol error that may
    // close it); those bytes must reach flush_output too, or a session whose output was full
    // could close with its last reply never written, and its socket never closed.
    const std::size_t before_requests = session.output().size();
    core::PortEffects effects = connection.port.pump(now);
    if (effects.request) {
      loop_.router().submit(now, session.id(), *effects.request);
      progress = true;
    }
    if (session.output().size() != before_requests) progress = true;
    if (effects.close) notify_close(connection, now);
    if (effects.frames_written != 0) {
      loop_.router().signals_written(session.id(), effects.frames_written);
    }
    next_deadline = effects.next_deadline;
    // The router's events for this connection are applied by settle(), which services it again.
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

  connection.timer.arm(next_deadline, now);
}

void TcpConnections::notify_close(Connection& connection, core::Instant now) {
  const core::Session& session = connection.session;
  if (session.close_reason() == core::CloseReason::kSlowConsumer) {
    log_event(LogLevel::kInfo, "slow_consumer",
              "session " + std::to_string(session.id().value) + ": closed, a slow signal consumer",
              {{"transport", "tcp"},
               {"session", session.id().value},
               {"peer", connection.peer_ip},
               {"reason", "signal_queue"}});
    shared_.signals.note_slow_consumer();
  } else if (session.close_reason() == core::CloseReason::kAuthFailed) {
    shared_.auth_failures.fetch_add(1, std::memory_order_relaxed);
    if (const auto suppressed = auth_failure_log_limit().admit(now.ns())) {
      log_event(LogLevel::kWarn, "auth_failure",
                "session " + std::to_string(session.id().value) + ": auth failed from " +
                    connection.peer_ip,
                {{"transport", "tcp"}, {"peer", connection.peer_ip}, {"suppressed", *suppressed}});
    }
  }
  loop_.router().close(now, session.id());
}

void TcpConnections::close_socket(Connection& connection) {
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
