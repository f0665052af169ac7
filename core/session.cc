#include "core/session.h"

#include <algorithm>

#include "core/assert.h"

namespace turnstile::core {
namespace {

// Compares a presented secret with the configured one in time that depends only on the
// configured secret's length, never on where the first difference is.
bool constant_time_equal(std::string_view presented, std::string_view expected) {
  unsigned diff = presented.size() == expected.size() ? 0U : 1U;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const unsigned char got = i < presented.size() ? static_cast<unsigned char>(presented[i]) : 0;
    diff |= static_cast<unsigned>(got ^ static_cast<unsigned char>(expected[i]));
  }
  return diff == 0;
}

}  // namespace

std::string_view close_reason_name(CloseReason reason) {
  switch (reason) {
    case CloseReason::kNone:
      return "none";
    case CloseReason::kPeerClosed:
      return "peer_closed";
    case CloseReason::kLineTooLong:
      return "line_too_long";
    case CloseReason::kAuthFailed:
      return "auth_failed";
    case CloseReason::kReadTimeout:
      return "read_timeout";
    case CloseReason::kIdleTimeout:
      return "idle_timeout";
    case CloseReason::kDraining:
      return "draining";
    case CloseReason::kDriver:
      return "driver";
    case CloseReason::kSlowConsumer:
      return "slow_consumer";
  }
  TS_ASSERT(false);
}

Session::Session(SessionId id, const SessionConfig& config, Instant now)
    : id_(id), config_(config), parser_(config.parser_limits), last_activity_(now) {
  TS_ASSERT(id.value != 0);
  TS_ASSERT(config.pipeline_max >= 1 && config.output_max >= 1);
  authenticated_ = !config_.auth_secret.has_value();
}

std::size_t Session::on_bytes(Instant now, std::string_view bytes) {
  // Input after close, while an auth failure is pending, or after a read timeout cannot change
  // anything: swallow it so the driver keeps no buffer for it.
  if (closed() || peer_eof_ || auth_failure_at_ || close_when_done_ != CloseReason::kNone) {
    return bytes.size();
  }
  std::size_t consumed = 0;
  std::optional<ParseResult> result;
  // Parse while there is room, answer what can be answered, and go on while answering made
  // room again (a run of pings, say), so a driver never waits on a session that could proceed.
  while (!closed() && consumed < bytes.size() && queue_.size() < config_.pipeline_max) {
    while (consumed < bytes.size() && queue_.size() < config_.pipeline_max) {
      consumed += parser_.parse(bytes.substr(consumed), result);
      if (!result) continue;
      request_started_at_.reset();
      const bool closing = !result->ok() && closes_connection(result->error);
      queue_.push_back(std::move(*result));
      result.reset();
      if (closing) {
        consumed = bytes.size();  // nothing after a closing error will be read
        break;
      }
    }
    if (consumed > 0) last_activity_ = now;
    pump(now);
  }
  if (parser_.mid_request() && !request_started_at_) request_started_at_ = now;
  if (consumed > 0) last_activity_ = now;
  pump(now);
  return consumed;
}

void Session::on_peer_closed(Instant /*now*/) {
  finish_close(CloseReason::kPeerClosed);
  output_base_ += output_.size() - output_sent_;
  output_.clear();  // nobody is left to read it
  output_sent_ = 0;
  frame_ends_.clear();
}

void Session::on_peer_eof(Instant now) {
  if (closed()) return;
  peer_eof_ = true;
  request_started_at_.reset();  // an incomplete request will never complete
  if (in_flight_ && in_flight_parked_) {
    finish_close(CloseReason::kPeerClosed);
    return;
  }
  pump(now);
}

void Session::on_parked() {
  TS_ASSERT(in_flight_.has_value());
  in_flight_parked_ = true;
  if (peer_eof_ && !closed()) finish_close(CloseReason::kPeerClosed);
}

void Session::close(CloseReason reason) { finish_close(reason); }

void Session::begin_drain(Instant now) {
  draining_ = true;
  pump(now);
}

void Session::on_timer(Instant now) {
  if (closed()) return;
  if (auth_failure_at_ && now >= *auth_failure_at_) {
    answer_status(Status::kErrorAuth);
    finish_close(CloseReason::kAuthFailed);
    return;
  }
  if (request_started_at_ && config_.read_timeout > Duration::zero() &&
      now - *request_started_at_ >= config_.read_timeout) {
    on_read_timeout(now);
    return;
  }
  if (config_.idle_timeout > Duration::zero() && !parser_.mid_request() && queue_.empty() &&
      !ready_ && !in_flight_ && !auth_failure_at_ && now - last_activity_ >= config_.idle_timeout) {
    finish_close(CloseReason::kIdleTimeout);
  }
}

void Session::on_read_timeout(Instant now) {
  if (closed() || auth_failure_at_ || close_when_done_ != CloseReason::kNone) return;
  request_started_at_.reset();
  if (!authenticated_ && queue_.empty() && !ready_ && !in_flight_) {
    // A handshake that never completes is an auth failure (edge case 5): same delay, same
    // constant-time comparison, `error_auth`.
    (void)constant_time_equal(std::string_view(), *config_.auth_secret);
    auth_failure_at_ = now + config_.auth_failure_delay;
    return;
  }
  // Earlier pipelined requests are still answered first; then `error` and close.
  close_when_done_ = CloseReason::kReadTimeout;
  pump(now);
}

std::optional<Instant> Session::next_deadline() const {
  if (closed()) return std::nullopt;
  if (auth_failure_at_) return auth_failure_at_;
  std::optional<Instant> earliest;
  auto consider = [&earliest](Instant at) {
    if (!earliest || at < *earliest) earliest = at;
  };
  if (request_started_at_ && config_.read_timeout > Duration::zero() &&
      close_when_done_ == CloseReason::kNone) {
    consider(*request_started_at_ + config_.read_timeout);
  }
  if (config_.idle_timeout > Duration::zero() && !parser_.mid_request() && queue_.empty() &&
      !ready_ && !in_flight_) {
    consider(last_activity_ + config_.idle_timeout);
  }
  return earliest;
}

std::optional<Request> Session::next_request(Instant now) {
  if (in_flight_) return std::nullopt;
  if (give_back_) {
    in_flight_ = std::move(give_back_);
    give_back_.reset();
    return in_flight_;
  }
  pump(now);
  if (!ready_) return std::nullopt;
  in_flight_ = std::move(ready_);
  ready_.reset();
  return in_flight_;
}

void Session::on_reply(Instant now, const Reply& reply) {
  TS_ASSERT(in_flight_.has_value());
  TS_ASSERT(reply.status != Status::kParked);
  Request request = std::move(*in_flight_);
  in_flight_.reset();
  in_flight_parked_ = false;
  if (closed()) {
    // Nobody will read this reply. A grant must not be lost with it: give the token back so the
    // next waiter gets the slot. (A give-back is a release, whose reply is never a grant.)
    if (reply.is_grant()) give_back_ = release_of(request, *reply.token);
    return;
  }
  answer(reply);
  last_activity_ = now;
  pump(now);
}

void Session::on_cancelled() {
  TS_ASSERT(in_flight_.has_value());
  TS_ASSERT(closed());
  in_flight_.reset();
  in_flight_parked_ = false;
}

void Session::push_signal(std::string_view frame) {
  if (closed()) return;
  output_.append(frame);
  frame_ends_.push_back(output_base_ + output_.size());
}

void Session::push_lost(std::string_view line) {
  if (closed() || !lost_notify_) return;
  output_.append(line);
}

void Session::after_write() {
  if (closed() || frame_ends_.size() <= config_.signal_queue_max) return;
  finish_close(CloseReason::kSlowConsumer);
  output_base_ += output_sent_;
  output_.clear();
  output_sent_ = 0;
  frame_ends_.clear();
}

std::size_t Session::take_frames_written() {
  const std::size_t written = frames_written_;
  frames_written_ = 0;
  return written;
}

void Session::consume_output(std::size_t bytes) {
  TS_ASSERT(bytes <= output_.size() - output_sent_);
  output_sent_ += bytes;
  const std::uint64_t sent = output_base_ + output_sent_;
  while (!frame_ends_.empty() && frame_ends_.front() <= sent) {
    frame_ends_.pop_front();
    ++frames_written_;
  }
  if (output_sent_ == output_.size()) {
    output_base_ += output_.size();
    output_.clear();
    output_sent_ = 0;
  } else if (output_sent_ >= 64 * 1024 && output_sent_ * 2 >= output_.size()) {
    output_base_ += output_sent_;
    output_.erase(0, output_sent_);
    output_sent_ = 0;
  }
}

bool Session::finished() const { return closed() && !in_flight_ && !give_back_; }

// Answers what the session can answer itself and stages the next request for the driver, in
// order, until something has to wait: a request in flight, a full output buffer, an auth delay.
void Session::pump(Instant now) {
  while (!closed() && !ready_ && !in_flight_ && !auth_failure_at_ && !output_full()) {
    if (draining_) {
      // Nothing is in flight: whatever the client sends next is answered by this line.
      answer_status(Status::kErrorDraining);
      finish_close(CloseReason::kDraining);
      return;
    }
    if (queue_.empty()) {
      if (close_when_done_ != CloseReason::kNone) {
        answer_status(Status::kError);
        finish_close(close_when_done_);
      } else if (peer_eof_) {
        finish_close(CloseReason::kPeerClosed);  // everything received has been answered
      }
      return;
    }
    ParseResult head = std::move(queue_.front());
    queue_.pop_front();
    last_activity_ = now;  // answering a request is activity: the idle period starts after it

    if (!authenticated_) {
      // The first request must be a valid `auth` with the right secret. The comparison runs
      // whatever arrived, so a failure takes as long as a mismatch.
      const bool is_auth = head.ok() && head.request.command == Command::kAuth;
      const bool match = constant_time_equal(is_auth ? head.request.secret : std::string_view(),
                                             *config_.auth_secret);
      if (is_auth && match) {
        authenticated_ = true;
        answer_status(Status::kOk);
        continue;
      }
      queue_.clear();
      auth_failure_at_ = now + config_.auth_failure_delay;
      return;
    }
    if (!head.ok()) {
      answer_status(Status::kError);
      if (closes_connection(head.error)) {
        finish_close(CloseReason::kLineTooLong);
        return;
      }
      continue;
    }
    switch (head.request.command) {
      case Command::kPing:
        answer_status(Status::kOk);
        continue;
      case Command::kAuth:
        answer_status(Status::kError);  // already authenticated, or no secret configured
        continue;
      case Command::kLostNotify:
        lost_notify_ = head.request.enable;
        answer_status(Status::kOk);
        continue;
      case Command::kStableRef:
        if (!stable_ref_.empty()) {
          answer_status(Status::kError);  // bound already: an identity does not change
        } else {
          stable_ref_ = std::move(head.request.ref);
          answer_status(Status::kOk);
        }
        continue;
      default:
        if (is_engine_command(head.request.command)) head.request.ref = stable_ref_;
        ready_ = std::move(head.request);
        return;
    }
  }
}

void Session::answer(const Reply& reply) {
  TS_ASSERT(reply.status != Status::kParked);
  encode_reply(reply, output_);
}

void Session::finish_close(CloseReason reason) {
  if (closed()) return;
  close_reason_ = reason;
  queue_.clear();
  ready_.reset();
  auth_failure_at_.reset();
  request_started_at_.reset();
  close_when_done_ = CloseReason::kNone;
}

}  // namespace turnstile::core
