#include "client/connection.h"

#include <poll.h>

#include <algorithm>
#include <charconv>
#include <utility>

#include "client/socket.h"
#include "core/http_codec.h"
#include "core/protocol.h"
#include "core/wire.h"

namespace turnstile::client {
namespace {

using detail::Clock;
using detail::wait_fd;

// A reply line longer than this is not something a server of ours sends (stats stays under
// 1,000,000 bytes, docs/protocol.md).
constexpr std::size_t kReplyLineMax = 2 * 1024 * 1024;
constexpr std::size_t kAuthSecretMax = 64 * 1024;

// The error a reply's status means, or nullopt when it is no error (ok, acquired, queued).
std::optional<Error> status_error(core::Status status) {
  struct Entry {
    core::Status status;
    ErrorCode code;
  };
  static constexpr Entry kErrors[] = {
      {core::Status::kTimeout, ErrorCode::kTimeout},
      {core::Status::kError, ErrorCode::kProtocol},
      {core::Status::kErrorAuth, ErrorCode::kAuth},
      {core::Status::kErrorMaxLocks, ErrorCode::kMaxLocks},
      {core::Status::kErrorMaxWaiters, ErrorCode::kMaxWaiters},
      {core::Status::kErrorLimitMismatch, ErrorCode::kLimitMismatch},
      {core::Status::kErrorNotEnqueued, ErrorCode::kNotEnqueued},
      {core::Status::kErrorAlreadyEnqueued, ErrorCode::kAlreadyEnqueued},
      {core::Status::kErrorLeaseExpired, ErrorCode::kLeaseExpired},
      {core::Status::kErrorDraining, ErrorCode::kDraining},
      {core::Status::kErrorNotLeader, ErrorCode::kNotLeader},
      {core::Status::kErrorMaxSubscriptions, ErrorCode::kMaxSubscriptions},
  };
  for (const Entry& entry : kErrors) {
    if (status == entry.status) {
      return make_error(entry.code,
                        "server replied '" + std::string(core::status_name(status)) + "'");
    }
  }
  return std::nullopt;
}

Error bad_reply(std::string_view line) {
  return make_error(ErrorCode::kBadReply, "unexpected reply '" + std::string(line) + "'");
}

// A grant (a token and its lease) out of a decoded reply.
Result<Grant> grant_from(const core::Reply& reply, std::string_view line) {
  if (!reply.token || reply.seconds < 0) return bad_reply(line);
  return Grant{*reply.token, Seconds{reply.seconds}};
}

}  // namespace

// --- argument checks
// ------------------------------------------------------------------------------

Result<void> validate_key(std::string_view key) {
  if (const std::optional<std::string_view> problem = core::key_problem(key)) {
    return make_error(ErrorCode::kInvalidArgument, std::string(*problem));
  }
  return {};
}

Result<core::Token> parse_token(std::string_view text) {
  auto token = core::Token::parse(text);
  if (!token) {
    return make_error(ErrorCode::kInvalidArgument, "a token is 32 lowercase hex characters");
  }
  return *token;
}

Result<void> validate_timeout(Seconds timeout) {
  if (!core::timeout_in_bounds(timeout.count())) {
    return make_error(ErrorCode::kInvalidArgument,
                      "timeout must be 0.." + std::to_string(core::kMaxSeconds) + " s");
  }
  return {};
}

Result<void> validate_lease(Seconds lease) {
  if (!core::lease_in_bounds(lease.count())) {
    return make_error(
        ErrorCode::kInvalidArgument,
        "lease must be 1.." + std::to_string(core::kMaxSeconds) + " s (0: server default)");
  }
  return {};
}

Result<void> validate_limit(std::int64_t limit) {
  if (!core::limit_in_bounds(limit)) {
    return make_error(ErrorCode::kInvalidArgument,
                      "limit must be 1.." + std::to_string(core::kMaxSemaphoreLimit));
  }
  return {};
}

// --- the connection
// -------------------------------------------------------------------------------

struct Connection::Impl {
  Endpoint endpoint;
  ConnectOptions options;
  detail::Socket socket;
  std::string buffer;                   // received bytes not yet returned as a line
  std::optional<Endpoint> leader_hint;  // from the last `error_not_leader <addr>`
  bool lost_notify = false;             // `lost-notify on` was sent: `lost` lines are pushes
  LostHandler lost_handler;             // empty: notices go to lost_queue
  std::vector<LostNotice> lost_queue;
  std::uint64_t pushes_read = 0;

  ~Impl() { close(); }

  void close() {
    socket.close();
    buffer.clear();
  }

  Result<std::string> read_line(Clock::time_point deadline) {
    std::size_t scanned = 0;
    while (true) {
      const std::size_t newline = buffer.find('\n', scanned);
      if (newline != std::string::npos) {
        std::string line = buffer.substr(0, newline);
        buffer.erase(0, newline + 1);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        return line;
      }
      scanned = buffer.size();
      if (buffer.size() > kReplyLineMax) {
        return make_error(ErrorCode::kBadReply, "reply line too long");
      }
      if (auto filled = socket.fill(buffer, deadline); !filled) return filled.error();
    }
  }

  // A `lost` line while lost-notify is on: handed to the handler (or the queue); true. False for
  // every other line, and for every line while lost-notify is off.
  bool take_push(std::string_view line) {
    if (!lost_notify || !line.starts_with("lost ")) return false;
    std::optional<LostNotice> notice = core::parse_lost_line(line);
    if (!notice) return false;  // no reply starts with `lost`: read on as a reply, a bad one
    ++pushes_read;
    if (lost_handler) {
      lost_handler(*notice);
    } else if (lost_queue.size() < kLostQueueMax) {
      lost_queue.push_back(*std::move(notice));
    }
    return true;
  }

  // The next line that is not a push: the reply.
  Result<std::string> read_reply_line(Clock::time_point deadline) {
    while (true) {
      auto line = read_line(deadline);
      if (!line || !take_push(*line)) return line;
    }
  }

  // Lines (or EOF) that arrived while no request was in flight: pushes (lost-notify), or
  // `error_draining` written to an idle connection at shutdown, or the server closing it. Pushes
  // are taken; anything else is reported before sending anything, so the next call tells the
  // caller what happened instead of failing obscurely.
  Result<void> check_unsolicited() {
    while (true) {
      if (buffer.find('\n') == std::string::npos) {
        pollfd entry{socket.fd, POLLIN, 0};
        if (::poll(&entry, 1, 0) <= 0 && !socket.tls_pending()) return {};
        bool timed_out = false;
        // Readable may be only TLS records without data (a TLS 1.3 session ticket): no error.
        if (auto filled = socket.fill(buffer, Clock::now(), &timed_out); !filled && !timed_out) {
          return filled.error();
        }
        if (buffer.find('\n') == std::string::npos) return {};
      }
      auto line = read_line(Clock::now());
      if (!line) return line.error();
      if (take_push(*line)) continue;
      // A line nobody asked for: the server says why it is closing (error_draining, say).
      const std::optional<core::Reply> reply = core::decode_reply(core::Command::kPing, *line);
      if (reply) {
        if (auto error = status_error(reply->status)) return *std::move(error);
      }
      return make_error(ErrorCode::kBadReply, "unsolicited line '" + *line + "'");
    }
  }

  // Sends `bytes`, reads one reply line. Closes the connection on any failure.
  Result<std::string> exchange(std::string_view bytes, Clock::time_point deadline) {
    if (socket.fd < 0) return make_error(ErrorCode::kIo, "connection is closed");
    if (auto early = check_unsolicited(); !early) {
      close();
      return early.error();
    }
    if (auto sent = socket.send_all(bytes, deadline); !sent) {
      close();
      return sent.error();
    }
    auto line = read_reply_line(deadline);
    if (!line) close();
    return line;
  }

  // Encodes and sends `request`; returns the reply line, or the typed error its status names.
  // `blocking`: the request's own timeout extends the reply deadline.
  Result<core::Reply> call(const core::Request& request, std::string& line_out) {
    std::string bytes;
    core::encode_request(request, bytes);
    auto wait = options.reply_timeout;
    if (request.timeout_s > 0) {
      // Cap at a year: a longer wait is effectively forever, and keeps the arithmetic in range.
      const std::int64_t capped = std::min<std::int64_t>(request.timeout_s, 366LL * 24 * 3600);
      wait += std::chrono::duration_cast<Milliseconds>(Seconds{capped});
    }
    auto line = exchange(bytes, Clock::now() + wait);
    if (!line) return line.error();
    line_out = std::move(*line);
    std::optional<core::Reply> reply = core::decode_reply(request.command, line_out);
    if (!reply) return bad_reply(line_out);
    if (auto error = status_error(reply->status)) {
      if (error->code == ErrorCode::kAuth || error->code == ErrorCode::kDraining) close();
      if (error->code == ErrorCode::kNotLeader) {
        leader_hint = parse_leader_address(reply->payload);
        error->message =
            reply->payload.empty()
                ? "server replied 'error_not_leader': no leader is known"
                : "server replied 'error_not_leader': the leader is at " + reply->payload;
      }
      return *std::move(error);
    }
    return *std::move(reply);
  }
};

Connection::Connection() = default;
Connection::Connection(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Connection::~Connection() = default;
Connection::Connection(Connection&& other) noexcept = default;
Connection& Connection::operator=(Connection&& other) noexcept = default;

Result<Connection> Connection::connect(const Endpoint& endpoint, const ConnectOptions& options) {
  if (options.auth_token.size() > kAuthSecretMax ||
      options.auth_token.find_first_of("\r\n") != std::string::npos) {
    return make_error(ErrorCode::kInvalidArgument,
                      "auth token must be at most 64 KiB with no CR or LF");
  }
  auto impl = std::make_unique<Impl>();
  impl->endpoint = endpoint;
  impl->options = options;
  const auto deadline = Clock::now() + options.connect_timeout;
  if (auto opened = detail::open_socket(impl->socket, endpoint, options, deadline); !opened) {
    return opened.error();
  }
  if (!options.auth_token.empty()) {
    core::Request request;
    request.command = core::Command::kAuth;
    request.secret = options.auth_token;
    std::string bytes;
    core::encode_request(request, bytes);
    auto line = impl->exchange(bytes, deadline + options.reply_timeout);
    if (!line) return line.error();
    if (*line != "ok") {
      if (*line == "error_auth") return make_error(ErrorCode::kAuth, "auth token refused");
      return bad_reply(*line);
    }
  }
  return Connection(std::move(impl));
}

bool Connection::is_open() const { return impl_ != nullptr && impl_->socket.fd >= 0; }

const Endpoint& Connection::endpoint() const {
  static const Endpoint kNone{};
  return impl_ != nullptr ? impl_->endpoint : kNone;
}

void Connection::close() {
  if (impl_ != nullptr) impl_->close();
}

void Connection::set_reply_timeout(Milliseconds timeout) {
  if (impl_ != nullptr) impl_->options.reply_timeout = timeout;
}

Connection::Impl* Connection::open_impl() { return impl_ != nullptr ? impl_.get() : nullptr; }

namespace {

core::Request make_request(core::Command command, std::string_view key) {
  core::Request request;
  request.command = command;
  request.key = std::string(key);
  return request;
}

}  // namespace

#define TS_CLIENT_CHECK(expression)                                       \
  do {                                                                    \
    if (auto checked_ = (expression); !checked_) return checked_.error(); \
  } while (false)

namespace {

Result<Grant> do_grant(Connection::Impl* impl, const core::Request& request) {
  if (impl == nullptr) return make_error(ErrorCode::kIo, "connection is closed");
  std::string line;
  auto reply = impl->call(request, line);
  if (!reply) return reply.error();
  if (reply->status != core::Status::kOk) return bad_reply(line);
  return grant_from(*reply, line);
}

Result<void> do_release(Connection::Impl* impl, const core::Request& request) {
  if (impl == nullptr) return make_error(ErrorCode::kIo, "connection is closed");
  std::string line;
  auto reply = impl->call(request, line);
  if (!reply) return reply.error();
  if (reply->status != core::Status::kOk || reply->token || reply->seconds >= 0 ||
      !reply->payload.empty()) {
    return bad_reply(line);
  }
  return {};
}

Result<Seconds> do_renew(Connection::Impl* impl, const core::Request& request) {
  if (impl == nullptr) return make_error(ErrorCode::kIo, "connection is closed");
  std::string line;
  auto reply = impl->call(request, line);
  if (!reply) return reply.error();
  if (reply->status != core::Status::kOk || reply->seconds < 0) return bad_reply(line);
  return Seconds{reply->seconds};
}

Result<EnqueueResult> do_enqueue(Connection::Impl* impl, const core::Request& request) {
  if (impl == nullptr) return make_error(ErrorCode::kIo, "connection is closed");
  std::string line;
  auto reply = impl->call(request, line);
  if (!reply) return reply.error();
  if (reply->status == core::Status::kQueued) return EnqueueResult{};
  if (reply->status != core::Status::kAcquired) return bad_reply(line);
  auto grant = grant_from(*reply, line);
  if (!grant) return grant.error();
  return EnqueueResult{*grant};
}

}  // namespace

namespace {

// The lock, semaphore and read-write forms of each command differ only in the command and the
// limit (a lock or a read-write lock is a resource of limit 1), so they share one of these.

Result<Grant> acquire_on(Connection::Impl* impl, core::Command command, std::string_view key,
                         Seconds timeout, std::int64_t limit, Seconds lease) {
  TS_CLIENT_CHECK(validate_key(key));
  TS_CLIENT_CHECK(validate_timeout(timeout));
  TS_CLIENT_CHECK(validate_limit(limit));
  TS_CLIENT_CHECK(validate_lease(lease));
  auto request = make_request(command, key);
  request.timeout_s = timeout.count();
  request.limit = limit;
  request.lease_s = lease.count();
  return do_grant(impl, request);
}

Result<void> release_on(Connection::Impl* impl, core::Command command, std::string_view key,
                        const core::Token& token) {
  TS_CLIENT_CHECK(validate_key(key));
  auto request = make_request(command, key);
  request.token = token;
  return do_release(impl, request);
}

Result<Seconds> renew_on(Connection::Impl* impl, core::Command command, std::string_view key,
                         const core::Token& token, Seconds lease) {
  TS_CLIENT_CHECK(validate_key(key));
  TS_CLIENT_CHECK(validate_lease(lease));
  auto request = make_request(command, key);
  request.token = token;
  request.lease_s = lease.count();
  return do_renew(impl, request);
}

Result<EnqueueResult> enqueue_on(Connection::Impl* impl, core::Command command,
                                 std::string_view key, std::int64_t limit, Seconds lease) {
  TS_CLIENT_CHECK(validate_key(key));
  TS_CLIENT_CHECK(validate_limit(limit));
  TS_CLIENT_CHECK(validate_lease(lease));
  auto request = make_request(command, key);
  request.limit = limit;
  request.lease_s = lease.count();
  return do_enqueue(impl, request);
}

Result<Grant> wait_on(Connection::Impl* impl, core::Command command, std::string_view key,
                      Seconds timeout) {
  TS_CLIENT_CHECK(validate_key(key));
  TS_CLIENT_CHECK(validate_timeout(timeout));
  auto request = make_request(command, key);
  request.timeout_s = timeout.count();
  return do_grant(impl, request);
}

}  // namespace

Result<Grant> Connection::lock(std::string_view key, Seconds timeout, Seconds lease) {
  return acquire_on(open_impl(), core::Command::kLock, key, timeout, 1, lease);
}

Result<Grant> Connection::sem_lock(std::string_view key, Seconds timeout, std::int64_t limit,
                                   Seconds lease) {
  return acquire_on(open_impl(), core::Command::kSemLock, key, timeout, limit, lease);
}

Result<void> Connection::release(std::string_view key, const core::Token& token) {
  return release_on(open_impl(), core::Command::kRelease, key, token);
}

Result<void> Connection::sem_release(std::string_view key, const core::Token& token) {
  return release_on(open_impl(), core::Command::kSemRelease, key, token);
}

Result<Seconds> Connection::renew(std::string_view key, const core::Token& token, Seconds lease) {
  return renew_on(open_impl(), core::Command::kRenew, key, token, lease);
}

Result<Seconds> Connection::sem_renew(std::string_view key, const core::Token& token,
                                      Seconds lease) {
  return renew_on(open_impl(), core::Command::kSemRenew, key, token, lease);
}

Result<EnqueueResult> Connection::enqueue(std::string_view key, Seconds lease) {
  return enqueue_on(open_impl(), core::Command::kEnqueue, key, 1, lease);
}

Result<EnqueueResult> Connection::sem_enqueue(std::string_view key, std::int64_t limit,
                                              Seconds lease) {
  return enqueue_on(open_impl(), core::Command::kSemEnqueue, key, limit, lease);
}

Result<Grant> Connection::wait(std::string_view key, Seconds timeout) {
  return wait_on(open_impl(), core::Command::kWait, key, timeout);
}

Result<Grant> Connection::sem_wait(std::string_view key, Seconds timeout) {
  return wait_on(open_impl(), core::Command::kSemWait, key, timeout);
}

namespace {

// The command of `operation` in the read-write namespace, in `mode`.
core::Command rw_command(RwMode mode, core::Operation operation) {
  return core::command_like(
      mode == RwMode::kRead ? core::Command::kReadLock : core::Command::kWriteLock, operation);
}

}  // namespace

std::string_view rw_mode_name(RwMode mode) { return mode == RwMode::kRead ? "read" : "write"; }

Result<Grant> Connection::rw_lock(std::string_view key, RwMode mode, Seconds timeout,
                                  Seconds lease) {
  return acquire_on(open_impl(), rw_command(mode, core::Operation::kAcquire), key, timeout, 1,
                    lease);
}

Result<void> Connection::rw_release(std::string_view key, RwMode mode, const core::Token& token) {
  return release_on(open_impl(), rw_command(mode, core::Operation::kRelease), key, token);
}

Result<Seconds> Connection::rw_renew(std::string_view key, RwMode mode, const core::Token& token,
                                     Seconds lease) {
  return renew_on(open_impl(), rw_command(mode, core::Operation::kRenew), key, token, lease);
}

Result<EnqueueResult> Connection::rw_enqueue(std::string_view key, RwMode mode, Seconds lease) {
  return enqueue_on(open_impl(), rw_command(mode, core::Operation::kEnqueue), key, 1, lease);
}

Result<Grant> Connection::rw_wait(std::string_view key, RwMode mode, Seconds timeout) {
  return wait_on(open_impl(), rw_command(mode, core::Operation::kWait), key, timeout);
}

Result<void> Connection::ping() {
  return do_release(open_impl(), make_request(core::Command::kPing, {}));
}

Result<void> Connection::stable_ref(std::string_view ref) {
  if (!core::is_valid_stable_ref(ref)) {
    return make_error(ErrorCode::kInvalidArgument, "a stable ref is 1..64 bytes of 0x20-0x7E");
  }
  core::Request request = make_request(core::Command::kStableRef, {});
  request.ref = std::string(ref);
  return do_release(open_impl(), request);
}

Result<void> Connection::barrier() {
  return do_release(open_impl(), make_request(core::Command::kBarrier, {}));
}

std::optional<Endpoint> Connection::leader_hint() const {
  return impl_ == nullptr ? std::nullopt : impl_->leader_hint;
}

namespace {

// A reply `ok <json object>` (stats, inspect): the JSON text.
Result<std::string> do_json(Connection::Impl* impl, const core::Request& request) {
  if (impl == nullptr) return make_error(ErrorCode::kIo, "connection is closed");
  std::string line;
  auto reply = impl->call(request, line);
  if (!reply) return reply.error();
  if (reply->payload.empty() || reply->payload.front() != '{') return bad_reply(line);
  return std::move(reply->payload);
}

}  // namespace

Result<StatsResult> Connection::stats() {
  auto json = do_json(open_impl(), make_request(core::Command::kStats, {}));
  if (!json) return json.error();
  return StatsResult{*std::move(json)};
}

Result<Seconds> Connection::check(core::Namespace space, std::string_view key,
                                  const core::Token& token) {
  TS_CLIENT_CHECK(validate_key(key));
  auto request = make_request(core::Command::kCheck, key);
  request.token = token;
  request.space = space;
  return do_renew(open_impl(), request);
}

Result<InspectResult> Connection::inspect(core::Namespace space, std::string_view key) {
  TS_CLIENT_CHECK(validate_key(key));
  auto request = make_request(core::Command::kInspect, key);
  request.space = space;
  auto json = do_json(open_impl(), request);
  if (!json) return json.error();
  return InspectResult{*std::move(json)};
}

Result<void> Connection::enable_lost_notify(LostHandler handler) {
  Impl* impl = open_impl();
  if (impl == nullptr) return make_error(ErrorCode::kIo, "connection is closed");
  auto request = make_request(core::Command::kLostNotify, {});
  request.enable = true;
  // On before the `ok`: a `lost` line read meanwhile (lost-notify was already on) is a push.
  const bool was_on = impl->lost_notify;
  LostHandler previous = std::exchange(impl->lost_handler, std::move(handler));
  impl->lost_notify = true;
  auto enabled = do_release(impl, request);
  if (!enabled) {
    impl->lost_notify = was_on;
    impl->lost_handler = std::move(previous);
  }
  return enabled;
}

Result<void> Connection::disable_lost_notify() {
  Impl* impl = open_impl();
  if (impl == nullptr) return make_error(ErrorCode::kIo, "connection is closed");
  auto request = make_request(core::Command::kLostNotify, {});
  request.enable = false;
  auto disabled = do_release(impl, request);
  if (disabled) impl->lost_notify = false;  // the lines before the `ok` were still pushes
  return disabled;
}

bool Connection::lost_notify_enabled() const { return impl_ != nullptr && impl_->lost_notify; }

std::vector<LostNotice> Connection::take_lost_notices() {
  if (impl_ == nullptr) return {};
  return std::exchange(impl_->lost_queue, {});
}

Result<std::size_t> Connection::poll_lost_notices(Milliseconds wait) {
  Impl* impl = open_impl();
  if (impl == nullptr || impl->socket.fd < 0)
    return make_error(ErrorCode::kIo, "connection is closed");
  const Clock::time_point deadline = Clock::now() + wait;
  const std::uint64_t before = impl->pushes_read;
  while (true) {
    if (auto early = impl->check_unsolicited(); !early) {
      impl->close();
      return early.error();
    }
    if (impl->pushes_read != before) return static_cast<std::size_t>(impl->pushes_read - before);
    if (Clock::now() >= deadline || !wait_fd(impl->socket.fd, POLLIN, deadline))
      return std::size_t{0};
  }
}

int Connection::native_handle() const { return impl_ != nullptr ? impl_->socket.fd : -1; }

Result<void> Connection::send_bytes(std::string_view bytes, Milliseconds timeout) {
  Impl* impl = open_impl();
  if (impl == nullptr || impl->socket.fd < 0)
    return make_error(ErrorCode::kIo, "connection is closed");
  auto sent = impl->socket.send_all(bytes, Clock::now() + timeout);
  if (!sent) impl->close();
  return sent;
}

Result<void> Connection::read_lines(Milliseconds wait, std::vector<std::string>& lines) {
  Impl* impl = open_impl();
  if (impl == nullptr || impl->socket.fd < 0)
    return make_error(ErrorCode::kIo, "connection is closed");
  bool timed_out = false;
  auto filled = impl->socket.fill(impl->buffer, Clock::now() + wait, &timed_out);
  if (!filled && !timed_out) {
    impl->close();
    return filled.error();
  }
  // Plaintext that TLS already took off the socket is not seen by poll(): read it now.
  while (filled && impl->socket.tls_pending()) {
    filled = impl->socket.fill(impl->buffer, Clock::now() + wait);
    if (!filled) {
      impl->close();
      return filled.error();
    }
  }
  std::size_t start = 0;
  for (std::size_t newline = impl->buffer.find('\n'); newline != std::string::npos;
       newline = impl->buffer.find('\n', start)) {
    std::size_t end = newline;
    if (end > start && impl->buffer[end - 1] == '\r') --end;
    lines.emplace_back(impl->buffer, start, end - start);
    start = newline + 1;
  }
  impl->buffer.erase(0, start);
  if (impl->buffer.size() > kReplyLineMax) {
    impl->close();
    return make_error(ErrorCode::kBadReply, "line from the server too long");
  }
  return {};
}

std::optional<Error> Connection::reply_status_error(core::Status status) {
  return status_error(status);
}

Result<std::string> Connection::raw_request(std::string_view bytes, Milliseconds timeout) {
  Impl* impl = open_impl();
  if (impl == nullptr) return make_error(ErrorCode::kIo, "connection is closed");
  return impl->exchange(bytes, Clock::now() + timeout);
}

#undef TS_CLIENT_CHECK

}  // namespace turnstile::client
