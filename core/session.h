// Session: one connection's protocol state, independent of sockets and threads.
//
// A driver (the daemon, the simulator, a test, a fuzzer) moves bytes and time in and effects
// out; the session makes every protocol decision:
//
//   bytes  --on_bytes-->  [parser -> queue of parsed requests (bounded)]
//                              | next_request(): the head, when nothing is in flight
//                              v
//   driver routes an engine command to the engine that owns its key, a stats request to all
//   engines; the reply comes back through on_reply()  -->  reply bytes in output()
//
// Rules it enforces (reference 1.1, 1.6, 1.8; compatibility.md section 2):
//  * Requests are answered strictly in order, one in flight at a time, any number pipelined.
//    ping, protocol errors, auth and draining are answered by the session itself.
//  * Auth: with a secret configured, the first request must be `auth` with that secret
//    (compared in constant time, whatever arrived). Success: `ok`. Anything else: after a
//    100 ms delay, `error_auth`, then close. `auth` later, or without a secret: `error`.
//  * A protocol error answers `error`; the line-too-long error closes after it (1.6).
//  * `stable-ref <ref>` binds the connection's stable ref once (`ok`; a second one is `error`,
//    as in dflockd); every engine request of the session carries it from then on (Request::ref).
//  * Bounds: parsed-but-unanswered requests are capped at `pipeline_max`; beyond that on_bytes
//    stops consuming, so the driver stops reading (backpressure). Reply bytes waiting for the
//    socket are capped at `output_max`: past it no new request starts until the driver drains.
//  * Read timeout: once the first byte of a request has arrived, the whole request must arrive
//    within `read_timeout` (0 = no limit); otherwise `error` and close. Idle timeout: with no
//    partial request, nothing queued and nothing in flight for `idle_timeout` (0 = never), the
//    session closes without a reply.
//  * Draining (graceful shutdown): a request in flight finishes first; then the session answers
//    `error_draining` (the reply the client reads for its next request) and closes. Queued
//    requests are not started. An idle session is answered and closed as soon as draining
//    begins, so shutdown never waits for idle clients.
//  * After close (peer EOF or a closing error) a request still in flight stays accounted for:
//    when its reply arrives it is dropped, and if it was a grant the session asks the driver to
//    give the token back (release_of, a release marked give_back), so a grant that raced the close
//    goes to the next waiter; the engine ignores it if the slot has moved on to another session.
//
// Thread affinity: one session belongs to one thread (its connection's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>

#include "core/protocol.h"
#include "core/time.h"
#include "core/types.h"
#include "core/wire.h"

namespace turnstile::core {

struct SessionConfig {
  std::optional<std::string> auth_secret;  // nullopt: no auth handshake
  Duration auth_failure_delay = Duration::milliseconds(100);
  Duration read_timeout = Duration::seconds(23);  // zero: no limit
  Duration idle_timeout = Duration::zero();       // zero: never
  std::size_t pipeline_max = 128;                 // parsed requests waiting their turn
  std::size_t output_max = 256 * 1024;            // reply bytes waiting for the socket
  // Signal frames the socket would not take; more close the session as a slow consumer
  // (--signal-queue).
  std::size_t signal_queue_max = 64;
  RequestParser::Limits parser_limits;
};

// Why a session ended.
enum class CloseReason : std::uint8_t {
  kNone,
  kPeerClosed,   // EOF or reset from the peer
  kLineTooLong,  // protocol error that closes
  kAuthFailed,
  kReadTimeout,
  kIdleTimeout,
  kDraining,
  kDriver,        // the driver closed it (write timeout, write error, shutdown deadline)
  kSlowConsumer,  // its signal frames were not read fast enough (core/signal_hub.h)
};

std::string_view close_reason_name(CloseReason reason);

class Session {
 public:
  Session(SessionId id, const SessionConfig& config, Instant now);

  SessionId id() const { return id_; }

  // Bytes from the peer. Returns how many were consumed: fewer than offered when the pipeline
  // is full (the driver keeps the rest and offers them again after progress) or the session is
  // closed (input after close is ignored and reported as consumed).
  std::size_t on_bytes(Instant now, std::string_view bytes);

  // The connection broke (reset, read error): nothing more can be read or written.
  void on_peer_closed(Instant now);

  // The peer finished sending (EOF) but may still read. Requests already received are answered
  // in order; a request that is or becomes parked is cancelled (the peer is not going to wait
  // for it: reference 2.9's peer-close watcher); once nothing is left the session closes, and the
  // driver flushes output() before closing the connection.
  void on_peer_eof(Instant now);

  // The request in flight has been parked by its engine (Reply::parked).
  void on_parked();

  // The driver closes the session (write timeout, write error, forced shutdown).
  void close(CloseReason reason);

  // Graceful shutdown has begun.
  void begin_drain(Instant now);

  // Time passed: fires the auth delay, the read timeout and the idle timeout when due.
  void on_timer(Instant now);
  // A request has been arriving for longer than the read timeout, as the driver sees it below
  // the session (a TLS record trickled byte by byte, which the session never sees): the same
  // outcome as the session's own read timeout.
  void on_read_timeout(Instant now);
  // The earliest instant on_timer has something to do, if any.
  std::optional<Instant> next_deadline() const;

  // The next request the driver must route: an engine command or a stats request (answered
  // with Reply::stats), or, after close, the give-back release of a grant that raced the close
  // (answer it with anything; the reply is dropped). nullopt when there is nothing to route now.
  // Once returned, the request is in flight until on_reply.
  std::optional<Request> next_request(Instant now);

  // The reply to the request in flight.
  void on_reply(Instant now, const Reply& reply);
  // The request in flight was dropped unanswered because the session closed
  // (Engine::close_session returned true).
  void on_cancelled();

  // A signal's push frame (`sig <channel> <payload>\n`): it goes into the output at once, between
  // two replies, whatever is in flight; output_max does not hold it back (after_write() bounds
  // the frames). Dropped once the session is closed.
  void push_signal(std::string_view frame);
  // A `lost ...` line (core::lost_line): pushed like a signal frame, between two replies, when
  // the client asked for them with `lost-notify on`; dropped otherwise, or once closed. Not a
  // signal frame: it does not count against signal_queue_max.
  void push_lost(std::string_view line);
  // The driver has written all the peer's socket would take. More than signal_queue_max frames
  // still unwritten make a slow consumer: the session closes (CloseReason::kSlowConsumer) and
  // drops its output, so a client that does not read is not sent its backlog.
  void after_write();
  // How many pushed frames consume_output() has seen written in full since the last call.
  std::size_t take_frames_written();
  // Pushed frames not yet written in full.
  std::size_t unwritten_frames() const { return frame_ends_.size(); }

  // Reply bytes for the socket, and how many of them the driver has written.
  std::string_view output() const { return std::string_view(output_).substr(output_sent_); }
  void consume_output(std::size_t bytes);

  // True once the session will not produce more output: the driver closes the connection after
  // flushing output(). The engines must be told (Engine::close_session) once, when this first
  // becomes true.
  bool closed() const { return close_reason_ != CloseReason::kNone; }
  CloseReason close_reason() const { return close_reason_; }
  // True when the session is closed and nothing is in flight or waiting to be given back: the
  // driver may forget it.
  bool finished() const;

  bool in_flight() const { return in_flight_.has_value(); }
  // The peer sends nothing more (EOF) or the session is closed: the driver stops reading the
  // connection for good. An EOF is reported once; reading again would only see it again.
  bool input_ended() const { return peer_eof_ || closed(); }
  bool authenticated() const { return authenticated_; }
  std::size_t queued_requests() const { return queue_.size(); }
  // Bytes of an incomplete request held by the parser (bounded by the parser limits).
  std::size_t buffered_input_bytes() const { return parser_.buffered_bytes(); }

 private:
  void pump(Instant now);
  void answer(const Reply& reply);
  void answer_status(Status status) { answer(Reply::of(status)); }
  bool output_full() const { return output_.size() - output_sent_ >= config_.output_max; }
  void finish_close(CloseReason reason);

  SessionId id_;
  SessionConfig config_;
  RequestParser parser_;
  std::deque<ParseResult> queue_;     // parsed, not started, in arrival order
  std::optional<Request> ready_;      // the head request, waiting for next_request()
  std::optional<Request> in_flight_;  // routed, reply pending
  bool in_flight_parked_ = false;     // the engine parked it
  bool peer_eof_ = false;             // the peer sends nothing more
  std::optional<Request> give_back_;  // a release to route after close
  CloseReason close_when_done_ = CloseReason::kNone;  // answer `error` and close once idle
  std::string output_;
  std::size_t output_sent_ = 0;
  std::uint64_t output_base_ = 0;         // bytes of output written and dropped from output_
  std::deque<std::uint64_t> frame_ends_;  // where each pushed, unwritten frame ends (absolute)
  std::size_t frames_written_ = 0;        // for take_frames_written()
  bool authenticated_ = false;
  bool draining_ = false;
  std::optional<Instant> auth_failure_at_;     // when to send error_auth and close
  std::optional<Instant> request_started_at_;  // first byte of the partial request
  Instant last_activity_;
  std::string stable_ref_;    // bound by `stable-ref`; sent with every engine request
  bool lost_notify_ = false;  // `lost-notify on`: push `lost` lines
  CloseReason close_reason_ = CloseReason::kNone;
};

}  // namespace turnstile::core
