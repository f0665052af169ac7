#include "client/signal_connection.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "core/protocol.h"
#include "core/signal_pattern.h"
#include "core/wire.h"

namespace turnstile::client {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kGroupMaxBytes = 256;  // the server's line cap for the group's line
constexpr std::size_t kQuotedMax = 200;      // bytes of a server's line quoted in an error

bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r' || c == '\n';
}

// `line` for an error message, cut short when long.
std::string quoted(std::string_view line) {
  if (line.size() <= kQuotedMax) return "'" + std::string(line) + "'";
  return "'" + std::string(line.substr(0, kQuotedMax)) + "...'";
}

Error invalid(std::string message) {
  return make_error(ErrorCode::kInvalidArgument, std::move(message));
}

// Longer waits are taken as a year, which keeps the time arithmetic in range.
constexpr Milliseconds kYear{366LL * 24 * 3600 * 1000};

Milliseconds capped(Milliseconds duration) { return std::clamp(duration, Milliseconds{0}, kYear); }

// Now plus `timeout` (capped; a negative timeout is 0).
Clock::time_point deadline_after(Milliseconds timeout) { return Clock::now() + capped(timeout); }

// A request handed to the I/O thread, and its outcome.
struct Call {
  std::string bytes;                 // the encoded request
  std::optional<std::string> reply;  // its reply line, once it came
  std::optional<Error> error;        // or why none will come
  bool done = false;                 // reply or error set
};

}  // namespace

// --- argument checks
// ------------------------------------------------------------------------------

Result<void> validate_signal_pattern(std::string_view pattern) {
  if (const std::optional<std::string_view> problem = core::key_problem(pattern)) {
    return invalid("pattern: " + std::string(*problem));
  }
  if (const core::SignalNameError error = core::check_signal_pattern(pattern);
      error != core::SignalNameError::kNone) {
    return invalid("pattern " + quoted(pattern) + ": " +
                   std::string(core::signal_name_error_text(error)));
  }
  return {};
}

Result<void> validate_signal_channel(std::string_view channel) {
  if (const std::optional<std::string_view> problem = core::key_problem(channel)) {
    return invalid("channel: " + std::string(*problem));
  }
  if (const core::SignalNameError error = core::check_signal_channel(channel);
      error != core::SignalNameError::kNone) {
    return invalid("channel " + quoted(channel) + ": " +
                   std::string(core::signal_name_error_text(error)));
  }
  return {};
}

Result<void> validate_signal_group(std::string_view group) {
  if (group.size() > kGroupMaxBytes) {
    return invalid("group is longer than " + std::to_string(kGroupMaxBytes) + " bytes");
  }
  if (group.find_first_of("\r\n") != std::string_view::npos) {
    return invalid("group contains CR or LF");
  }
  if (!group.empty() && (is_ascii_space(group.front()) || is_ascii_space(group.back()))) {
    return invalid("group begins or ends with whitespace (the server trims it)");
  }
  return {};
}

Result<void> validate_signal_payload(std::string_view channel, std::string_view payload) {
  if (payload.empty()) return invalid("payload is empty");
  if (payload.find_first_of("\r\n") != std::string_view::npos) {
    return invalid("payload contains CR or LF");
  }
  // The server keeps white space at either end but refuses a payload of nothing else.
  if (core::is_blank(payload)) return invalid("payload is blank (nothing but white space)");
  const std::size_t max = core::signal_payload_max(channel);
  if (payload.size() > max) {
    return invalid("payload is " + std::to_string(payload.size()) + " bytes; at most " +
                   std::to_string(max) + " on channel " + quoted(channel));
  }
  return {};
}

// --- the connection
// -------------------------------------------------------------------------------

struct SignalConnection::State {
  // Used by the I/O thread only, once it has started; by stop() after it has been joined.
  Connection connection;
  Endpoint endpoint;
  SignalOptions options;
  int wake_fd = -1;  // eventfd: the outbox has a request, or stop() was called
  std::thread io;
  std::mutex stop_mutex;  // one stop() at a time

  mutable std::mutex mutex;
  std::condition_variable changed;
  // Guarded by mutex:
  std::deque<Signal> queue;
  std::uint64_t dropped = 0;
  std::deque<std::shared_ptr<Call>> outbox;  // requests the I/O thread has not sent yet
  bool stopping = false;
  bool open = true;
  std::optional<Error> failure;  // why the connection ended, once it has

  // A sent request waiting for its reply (nullptr call: a heartbeat ping). I/O thread only.
  struct Pending {
    std::shared_ptr<Call> call;
    Clock::time_point sent_at;
  };

  ~State() {
    if (wake_fd >= 0) ::close(wake_fd);
  }

  // The error a reply status stands for, as Connection reports it (a friend's private helper).
  static std::optional<Error> status_error(core::Status status) {
    return Connection::reply_status_error(status);
  }

  // The text of a line the server sent with no request waiting for it (`error_draining` as it
  // shuts down, say), as the error that ends the connection.
  static Error unsolicited(std::string_view line) {
    if (const std::optional<core::Reply> reply = core::decode_reply(core::Command::kPing, line)) {
      if (auto error = status_error(reply->status)) return *std::move(error);
    }
    return make_error(ErrorCode::kBadReply, "unsolicited line " + quoted(line));
  }

  void wake() const {
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t written = ::write(wake_fd, &one, sizeof one);
  }

  // Ends the connection with `error`: every call not answered yet gets it. I/O thread.
  void fail(const Error& error, std::deque<Pending>& pending,
            std::deque<std::shared_ptr<Call>>& unsent) {
    connection.close();
    const std::lock_guard lock(mutex);
    if (!failure) failure = error;
    open = false;
    const auto end_call = [&](const std::shared_ptr<Call>& call) {
      if (call != nullptr && !call->done) {
        call->error = *failure;
        call->done = true;
      }
    };
    for (const Pending& entry : pending) end_call(entry.call);
    for (const auto& call : unsent) end_call(call);
    for (const auto& call : outbox) end_call(call);
    pending.clear();
    unsent.clear();
    outbox.clear();
    changed.notify_all();
  }

  // One line from the server; the error that ends the connection, if it does.
  std::optional<Error> dispatch(std::string& line, std::deque<Pending>& pending) {
    if (line.starts_with("sig ")) {
      std::optional<core::SignalFrame> frame = core::parse_signal_frame(line);
      if (!frame) return make_error(ErrorCode::kBadReply, "malformed push frame " + quoted(line));
      const std::lock_guard lock(mutex);
      if (queue.size() >= options.queue_capacity) {
        ++dropped;
      } else {
        queue.push_back(Signal{std::move(frame->channel), std::move(frame->payload)});
        changed.notify_all();
      }
      return std::nullopt;
    }
    if (pending.empty()) return unsolicited(line);
    const std::shared_ptr<Call> call = std::move(pending.front().call);
    pending.pop_front();
    // `error_draining` (or `error_auth`) answers a request and then the server closes.
    const std::optional<core::Reply> reply = core::decode_reply(core::Command::kPing, line);
    std::optional<Error> closing;
    if (reply && (reply->status == core::Status::kErrorDraining ||
                  reply->status == core::Status::kErrorAuth)) {
      closing = status_error(reply->status);
    }
    if (call == nullptr) {  // the heartbeat's reply
      if (line == "ok") return std::nullopt;
      return closing ? closing : make_error(ErrorCode::kBadReply, "ping answered " + quoted(line));
    }
    const std::lock_guard lock(mutex);
    call->reply = std::move(line);
    call->done = true;
    changed.notify_all();
    return closing;
  }

  // Sends the calls taken from the outbox, in order; `last_sent` gets when the last one went. On a
  // failure the call that was not sent is put back in `unsent`, and the error returned.
  std::optional<Error> send_unsent(std::deque<Pending>& pending,
                                   std::deque<std::shared_ptr<Call>>& unsent,
                                   Clock::time_point& last_sent, Milliseconds reply_timeout) {
    while (!unsent.empty()) {
      const std::shared_ptr<Call> call = unsent.front();
      unsent.pop_front();
      if (auto sent = connection.send_bytes(call->bytes, reply_timeout); !sent) {
        unsent.push_front(call);
        return sent.error();
      }
      last_sent = Clock::now();
      pending.push_back(Pending{call, last_sent});
    }
    return std::nullopt;
  }

  // How long the I/O thread may sleep in poll() at `now`: until the oldest request's reply is
  // overdue, else until the next heartbeat is due, else (-1) until something happens.
  static int poll_wait_ms(const std::deque<Pending>& pending, Clock::time_point last_sent,
                          Clock::time_point now, Milliseconds reply_timeout,
                          Milliseconds heartbeat) {
    Clock::time_point wake_at = Clock::time_point::max();
    if (!pending.empty()) {
      wake_at = pending.front().sent_at + reply_timeout;
    } else if (heartbeat.count() > 0) {
      wake_at = last_sent + heartbeat;
    }
    if (wake_at == Clock::time_point::max()) return -1;
    const auto left = std::chrono::duration_cast<Milliseconds>(wake_at - now).count() + 1;
    return static_cast<int>(std::clamp<std::int64_t>(left, 0, 1'000'000'000));
  }

  // Reads the lines that have arrived (into `lines`, emptied first) and dispatches each; the
  // error that ends the connection, if one does.
  std::optional<Error> read_and_dispatch(std::vector<std::string>& lines,
                                         std::deque<Pending>& pending) {
    lines.clear();
    auto read = connection.read_lines(Milliseconds{0}, lines);
    for (std::string& line : lines) {
      if (auto error = dispatch(line, pending)) return error;
    }
    if (!read) return read.error();
    return std::nullopt;
  }

  // The I/O thread: sends requests and heartbeats, reads every line, until stop() or a failure.
  void run() {
    const Milliseconds reply_timeout = capped(options.connect.reply_timeout);
    const Milliseconds heartbeat = capped(options.heartbeat);
    const int fd = connection.native_handle();
    std::deque<Pending> pending;
    std::deque<std::shared_ptr<Call>> unsent;
    std::vector<std::string> lines;
    Clock::time_point last_sent = Clock::now();
    std::string ping;
    core::Request ping_request;
    ping_request.command = core::Command::kPing;
    core::encode_request(ping_request, ping);
    while (true) {
      bool stop_now = false;
      {
        const std::lock_guard lock(mutex);
        stop_now = stopping;
        if (!stop_now) unsent.swap(outbox);
      }
      if (stop_now) {
        fail(make_error(ErrorCode::kIo, "connection is closed"), pending, unsent);
        return;
      }
      if (auto error = send_unsent(pending, unsent, last_sent, reply_timeout)) {
        fail(*error, pending, unsent);
        return;
      }
      Clock::time_point now = Clock::now();
      if (heartbeat.count() > 0 && pending.empty() && now - last_sent >= heartbeat) {
        if (auto sent = connection.send_bytes(ping, reply_timeout); !sent) {
          fail(sent.error(), pending, unsent);
          return;
        }
        last_sent = now = Clock::now();
        pending.push_back(Pending{nullptr, last_sent});
      }
      if (!pending.empty() && now - pending.front().sent_at >= reply_timeout) {
        fail(make_error(ErrorCode::kIo, pending.front().call == nullptr
                                            ? "no answer to the heartbeat ping in time"
                                            : "no reply from the server in time"),
             pending, unsent);
        return;
      }
      const int wait_ms = poll_wait_ms(pending, last_sent, now, reply_timeout, heartbeat);
      pollfd fds[2] = {{fd, POLLIN, 0}, {wake_fd, POLLIN, 0}};
      if (::poll(fds, 2, wait_ms) < 0 && errno != EINTR) {
        fail(make_error(ErrorCode::kIo, "poll failed"), pending, unsent);
        return;
      }
      if ((fds[1].revents & POLLIN) != 0) {
        std::uint64_t count = 0;
        [[maybe_unused]] const ssize_t got = ::read(wake_fd, &count, sizeof count);
      }
      if ((fds[0].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      if (auto error = read_and_dispatch(lines, pending)) {
        fail(*error, pending, unsent);
        return;
      }
    }
  }

  // Hands `request` to the I/O thread and waits for its reply line.
  Result<std::string> call(const core::Request& request) {
    auto call = std::make_shared<Call>();
    core::encode_request(request, call->bytes);
    std::unique_lock lock(mutex);
    if (!open) return *failure;
    outbox.push_back(call);
    wake();
    // The I/O thread answers every request it took within the reply timeout (or fails the
    // connection, which answers it too); this wait is only a backstop.
    const auto deadline =
        deadline_after(2 * capped(options.connect.reply_timeout) + Milliseconds{1000});
    if (!changed.wait_until(lock, deadline, [&] { return call->done; })) {
      return make_error(ErrorCode::kIo, "no reply from the server in time");
    }
    if (call->error) return *call->error;
    return *std::move(call->reply);
  }

  void stop() {
    const std::lock_guard stopping_lock(stop_mutex);
    {
      const std::lock_guard lock(mutex);
      stopping = true;
    }
    wake();
    // The I/O thread ends every call it holds, closes the connection and records why.
    if (io.joinable()) io.join();
  }
};

Result<SignalConnection> SignalConnection::connect(const Endpoint& endpoint,
                                                   const SignalOptions& options) {
  if (options.queue_capacity == 0) return invalid("queue_capacity must be at least 1");
  if (options.heartbeat.count() < 0) return invalid("heartbeat must not be negative");
  auto connection = Connection::connect(endpoint, options.connect);
  if (!connection) return connection.error();
  auto state = std::make_unique<State>();
  state->wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (state->wake_fd < 0) return make_error(ErrorCode::kIo, "eventfd failed");
  state->connection = std::move(*connection);
  state->endpoint = endpoint;
  state->options = options;
  State* running = state.get();
  state->io = std::thread([running] { running->run(); });
  return SignalConnection(std::move(state));
}

SignalConnection::SignalConnection() = default;
SignalConnection::SignalConnection(std::unique_ptr<State> state) : state_(std::move(state)) {}
SignalConnection::~SignalConnection() { close(); }
SignalConnection::SignalConnection(SignalConnection&& other) noexcept = default;

SignalConnection& SignalConnection::operator=(SignalConnection&& other) noexcept {
  if (this != &other) {
    close();
    state_ = std::move(other.state_);
  }
  return *this;
}

bool SignalConnection::is_open() const {
  if (state_ == nullptr) return false;
  const std::lock_guard lock(state_->mutex);
  return state_->open;
}

const Endpoint& SignalConnection::endpoint() const {
  static const Endpoint kNone{};
  return state_ != nullptr ? state_->endpoint : kNone;
}

void SignalConnection::close() {
  if (state_ != nullptr) state_->stop();
}

namespace {

core::Request signal_request(core::Command command, std::string_view key, std::string_view text) {
  core::Request request;
  request.command = command;
  request.key = std::string(key);
  request.text = std::string(text);
  return request;
}

}  // namespace

#define TS_SIGNAL_CHECK(expression)                                       \
  do {                                                                    \
    if (auto checked_ = (expression); !checked_) return checked_.error(); \
  } while (false)

namespace {

// listen and unlisten: `ok`, or `error` (refused).
Result<void> subscription_call(SignalConnection::State* state, core::Command command,
                               std::string_view pattern, std::string_view group) {
  TS_SIGNAL_CHECK(validate_signal_pattern(pattern));
  TS_SIGNAL_CHECK(validate_signal_group(group));
  if (state == nullptr) return make_error(ErrorCode::kIo, "connection is closed");
  auto line = state->call(signal_request(command, pattern, group));
  if (!line) return line.error();
  const std::optional<core::Reply> reply = core::decode_reply(command, *line);
  if (!reply) return make_error(ErrorCode::kBadReply, "unexpected reply " + quoted(*line));
  if (reply->status == core::Status::kError) {
    return make_error(
        ErrorCode::kProtocol,
        "server replied 'error' to " + std::string(core::command_name(command)) +
            (command == core::Command::kListen
                 ? " (the pattern was refused, or this connection's --max-subscriptions is reached)"
                 : " (the pattern was refused)"));
  }
  if (auto error = SignalConnection::State::status_error(reply->status)) return *std::move(error);
  if (reply->status != core::Status::kOk || reply->seconds >= 0 || !reply->payload.empty()) {
    return make_error(ErrorCode::kBadReply, "unexpected reply " + quoted(*line));
  }
  return {};
}

}  // namespace

Result<void> SignalConnection::listen(std::string_view pattern, std::string_view group) {
  return subscription_call(state_.get(), core::Command::kListen, pattern, group);
}

Result<void> SignalConnection::unlisten(std::string_view pattern, std::string_view group) {
  return subscription_call(state_.get(), core::Command::kUnlisten, pattern, group);
}

Result<std::int64_t> SignalConnection::emit(std::string_view channel, std::string_view payload) {
  TS_SIGNAL_CHECK(validate_signal_channel(channel));
  TS_SIGNAL_CHECK(validate_signal_payload(channel, payload));
  if (state_ == nullptr) return make_error(ErrorCode::kIo, "connection is closed");
  auto line = state_->call(signal_request(core::Command::kSignal, channel, payload));
  if (!line) return line.error();
  const std::optional<core::Reply> reply = core::decode_reply(core::Command::kSignal, *line);
  if (!reply) return make_error(ErrorCode::kBadReply, "unexpected reply " + quoted(*line));
  if (auto error = SignalConnection::State::status_error(reply->status)) return *std::move(error);
  if (reply->status != core::Status::kOk || reply->seconds < 0) {
    return make_error(ErrorCode::kBadReply, "unexpected reply " + quoted(*line));
  }
  return reply->seconds;
}

#undef TS_SIGNAL_CHECK

Result<std::optional<Signal>> SignalConnection::next(Milliseconds timeout) {
  if (state_ == nullptr) return make_error(ErrorCode::kIo, "connection is closed");
  State& state = *state_;
  std::unique_lock lock(state.mutex);
  state.changed.wait_until(lock, deadline_after(timeout),
                           [&] { return !state.queue.empty() || !state.open; });
  if (!state.queue.empty()) {
    Signal signal = std::move(state.queue.front());
    state.queue.pop_front();
    return std::optional<Signal>(std::move(signal));
  }
  if (!state.open) return *state.failure;
  return std::optional<Signal>();
}

std::uint64_t SignalConnection::dropped() const {
  if (state_ == nullptr) return 0;
  const std::lock_guard lock(state_->mutex);
  return state_->dropped;
}

std::size_t SignalConnection::queued() const {
  if (state_ == nullptr) return 0;
  const std::lock_guard lock(state_->mutex);
  return state_->queue.size();
}

}  // namespace turnstile::client
