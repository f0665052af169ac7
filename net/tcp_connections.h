// TcpConnections: a shard's TCP (and TLS) connections, each a core::SessionPort over a bufferevent.
//
// It moves bytes and time into the sessions and their replies out: plain TCP reads into one
// shard-wide buffer and writes straight from a session's output at the end of the loop turn; TLS
// goes through bufferevent_openssl. A session's requests, its close and its stats go to the
// shard's router (net/session_host.h); the router's events for it come back through
// on_session_event. Every protocol decision is the session's.
//
// The shard drives it from settle(): service_dirty() while events touch connections,
// write_replies() at the end of the turn, forget_finished() last.
//
// Thread affinity: the shard's thread (construct it before the shard's thread starts).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/router.h"
#include "core/session.h"
#include "core/session_port.h"
#include "net/session_host.h"
#include "net/shared_state.h"

namespace turnstile::net {

struct Connection;

class TcpConnections final : public SessionHost {
 public:
  TcpConnections(ShardLoop& loop, SharedState& shared, SharedState::TcpLatencies& latency);
  ~TcpConnections() override;
  TcpConnections(const TcpConnections&) = delete;
  TcpConnections& operator=(const TcpConnections&) = delete;

  // A socket the acceptor handed to this shard (its slot in SharedState is already taken).
  void accept(int fd, const std::string& peer_ip, bool draining);

  bool owns(core::SessionId session) const override;
  void on_session_event(core::Instant now, core::SessionEvent& event) override;

  // Graceful shutdown: every session answers what is in flight, then error_draining.
  void begin_drain(core::Instant now);
  // The shard stops: every socket is closed at once.
  void close_all();
  // Frees every connection and its events (before the shard frees its event_base).
  void clear();

  // ---- the shard's settle() ------------------------------------------------------------------
  bool has_dirty() const { return !dirty_.empty(); }
  // Services every connection an event touched (and those it touches in turn): feeds input,
  // submits requests, moves replies towards the socket, tells the router of a close, closes
  // sockets once flushed.
  void service_dirty(core::Instant now);
  bool has_writes() const { return !to_write_.empty(); }
  // The end of the turn: each connection's replies leave in one write.
  void write_replies();
  // Forgets the connections serviced since the last call whose socket is closed and whose
  // session has settled everything (only those can have reached that state).
  void forget_finished();

  // Connections (sockets) still open; read by the server during drain.
  std::int64_t sockets_open() const { return sockets_open_.load(std::memory_order_relaxed); }

 private:
  friend struct Connection;

  Connection* find(core::SessionId session) const;
  void service(Connection& connection, core::Instant now);
  // The session closed: logs and counts why, and tells the router (once, as the port asks).
  void notify_close(Connection& connection, core::Instant now);
  void feed_input(Connection& connection, core::Instant now);
  // Plain TCP: starts or stops reading the socket (Connection::on_readable).
  void watch_reads(Connection& connection, bool on);
  // Plain TCP, nothing buffered ahead: reads into read_scratch_ and hands the bytes straight to
  // the session, buffering only what it leaves. Returns what read() returned; errno is read()'s
  // when that is -1.
  ssize_t read_direct(Connection& connection, int fd);
  void flush_output(Connection& connection);
  void write_now(Connection& connection);
  // Tells the router how many signal frames left the session's output (core/signal_hub.h).
  void report_frames_written(Connection& connection);
  void close_socket(Connection& connection);

  ShardLoop& loop_;
  SharedState& shared_;
  SharedState::TcpLatencies& latency_;
  std::unordered_map<std::uint64_t, std::unique_ptr<Connection>> connections_;
  std::vector<Connection*> dirty_;        // connections to service
  std::vector<Connection*> serviced_;     // serviced since forget_finished()
  std::vector<Connection*> to_write_;     // connections with replies to write (end of turn)
  std::unique_ptr<char[]> read_scratch_;  // read_direct's buffer: kSocketInputMax bytes
  std::atomic<std::int64_t> sockets_open_{0};
};

}  // namespace turnstile::net
