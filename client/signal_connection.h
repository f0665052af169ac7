// SignalConnection: one TCP (or TLS) connection that listens for signals (docs/protocol.md,
// "Signals"; dflockd v1.11-v1.16 pub/sub) and emits them.
//
// The server writes a push frame, `sig <channel> <payload>\n`, to a listening connection whenever
// a signal it listens for is emitted, also between a request and its reply. So this connection
// is read all the time, by a thread of its own (the I/O thread), and never by the caller:
//
//   * Every line that starts with `sig ` is a push frame (core::parse_signal_frame). It goes into
//     a bounded queue (SignalOptions::queue_capacity, default 64) that next() takes from. A frame
//     that arrives while the queue is full is dropped and counted (dropped()): the socket is
//     never left unread because the caller is slow, so the server never closes the connection as
//     a slow consumer on the caller's account.
//   * Every other line is the reply to the oldest request still unanswered (replies come in
//     request order). listen, unlisten and emit hand their request to the I/O thread, which sends
//     it, and wait for its reply.
//   * After SignalOptions::heartbeat (default 15 s) with nothing sent, the I/O thread sends
//     `ping`, so a server that closes idle connections (turnstiled --idle-timeout, dflockd's read
//     timeout) keeps the listener. A reply (to a ping or a request) that does not come within
//     ConnectOptions::reply_timeout fails the connection: a dead server is noticed within
//     heartbeat + reply_timeout even when nobody emits.
//
// When the connection fails (the server closed it, an I/O error, `error_draining`, a reply not in
// time, a line we do not understand) it is closed, every call waiting for a reply returns that
// error, and next() returns it once the signals already queued have been taken.
//
// Names are checked before anything is sent (kInvalidArgument, nothing sent, the connection stays
// usable): patterns and channels with core/signal_pattern.h's rules and the key rules, groups and
// payloads so that they fit their line and reach the listener unchanged.
//
// Thread affinity: every method may be called from any thread, also concurrently (calls are
// answered in the order their requests were sent). A SignalConnection is movable, not copyable;
// destroying it (or close()) stops the I/O thread and closes the socket, which ends every
// subscription on the server.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "client/connection.h"
#include "client/result.h"

namespace turnstile::client {

// One received signal.
struct Signal {
  std::string channel;
  std::string payload;

  bool operator==(const Signal&) const = default;
};

struct SignalOptions {
  ConnectOptions connect;           // address family, TLS, auth, timeouts: as Connection's
  std::size_t queue_capacity = 64;  // received signals held for next(), at least 1
  Milliseconds heartbeat{15000};    // send `ping` after this long with nothing sent; 0 = never
};

// Client-side checks, the server's rules (see the header comment). Each is kInvalidArgument with
// a message that says what is wrong.
// A listen pattern: a key (1..256 bytes, no whitespace) of dot-separated non-empty tokens, `*`
// and a last `>` as whole tokens.
Result<void> validate_signal_pattern(std::string_view pattern);
// A channel: the same without wildcards.
Result<void> validate_signal_channel(std::string_view channel);
// A queue group: at most 256 bytes, no CR or LF, no whitespace at either end (the server trims
// the line); empty = no group.
Result<void> validate_signal_group(std::string_view group);
// A payload: not blank (white space at either end is kept, as the server keeps it), no CR or LF,
// at most
// core::signal_payload_max(channel) bytes (the push frame fits a 64 KiB line).
Result<void> validate_signal_payload(std::string_view channel, std::string_view payload);

class SignalConnection {
 public:
  // Connects, completes the TLS handshake and authenticates (as Connection::connect, with the
  // same errors), then starts the I/O thread. kInvalidArgument for a queue_capacity of 0 or a
  // negative heartbeat.
  static Result<SignalConnection> connect(const Endpoint& endpoint,
                                          const SignalOptions& options = {});

  SignalConnection();
  ~SignalConnection();
  SignalConnection(SignalConnection&& other) noexcept;
  SignalConnection& operator=(SignalConnection&& other) noexcept;
  SignalConnection(const SignalConnection&) = delete;
  SignalConnection& operator=(const SignalConnection&) = delete;

  // False once closed or failed.
  bool is_open() const;
  const Endpoint& endpoint() const;
  // Stops the I/O thread and closes the connection; signals still queued stay for next().
  void close();

  // `listen`: receive the signals whose channel `pattern` matches; with a group, as one member of
  // that queue group (each signal goes to one member). kProtocol when the server refuses it
  // (--max-subscriptions reached). Listening again with the same pattern and group is a no-op.
  Result<void> listen(std::string_view pattern, std::string_view group = {});
  // `unlisten`: ok also when nothing was subscribed.
  Result<void> unlisten(std::string_view pattern, std::string_view group = {});
  // `signal`: emits `payload` on `channel`; the number of deliveries it made (this connection's
  // own subscriptions included).
  Result<std::int64_t> emit(std::string_view channel, std::string_view payload);

  // The oldest queued signal, waiting up to `timeout` for one; nullopt when none came in time.
  // The connection's error once it has failed (or kIo once closed) and the queue is empty.
  Result<std::optional<Signal>> next(Milliseconds timeout);
  // Signals dropped because the queue was full, since connect.
  std::uint64_t dropped() const;
  // Signals queued now.
  std::size_t queued() const;

  struct State;  // implementation detail (signal_connection.cc)

 private:
  explicit SignalConnection(std::unique_ptr<State> state);

  std::unique_ptr<State> state_;
};

}  // namespace turnstile::client
