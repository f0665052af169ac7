#include "client/guard.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <utility>

namespace turnstile::client {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

std::string_view loss_reason_name(LossReason reason) {
  switch (reason) {
    case LossReason::kRenewRefused:
      return "renew_refused";
    case LossReason::kConnectionFailed:
      return "connection_failed";
    case LossReason::kLeaseExpired:
      return "lease_expired";
    case LossReason::kServerExpired:
      return "server_expired";
    case LossReason::kForceReleased:
      return "force_released";
    case LossReason::kReclaimed:
      return "reclaimed";
  }
  return "unknown";
}

namespace {

LossReason loss_reason_of(core::LossReason cause) {
  switch (cause) {
    case core::LossReason::kExpired:
      return LossReason::kServerExpired;
    case core::LossReason::kForced:
      return LossReason::kForceReleased;
    case core::LossReason::kReclaimed:
      return LossReason::kReclaimed;
  }
  return LossReason::kServerExpired;
}

}  // namespace

struct Guard::State {
  Connection connection;
  core::Namespace space = core::Namespace::kLock;
  RwMode mode = RwMode::kWrite;  // kReadWrite: which kind of slot
  std::string key;
  std::int64_t limit = 1;
  GuardOptions options;
  Grant grant;

  mutable std::mutex mutex;
  GuardState state = GuardState::kHeld;  // guarded by mutex
  std::optional<LossEvent> loss;         // guarded by mutex
  bool stopping = false;                 // guarded by mutex
  std::optional<LostNotice> pushed;      // guarded by mutex: the server's `lost` for the grant
  Clock::time_point renewed_at;          // when the running lease began (local, conservative)
  Clock::time_point lease_deadline;      // renewed_at + lease
  // The connection accepted lost-notify: the renewal thread watches its socket too. Set before
  // the thread starts, then only by it (after a failover).
  bool pushes = false;
  int wake_fd = -1;  // eventfd: stop() makes it readable, which ends the renewal thread's wait
  std::thread renewer;

  ~State() {
    stop();
    if (wake_fd >= 0) ::close(wake_fd);
  }

  // Starts the lease clock at `granted_at` and the renewal thread.
  void start(const Grant& granted, Clock::time_point granted_at) {
    grant = granted;
    renewed_at = granted_at;
    lease_deadline = granted_at + grant.lease;
    renewer = std::thread([this] { renew_loop(); });
  }

  void stop() {
    {
      std::lock_guard lock(mutex);
      stopping = true;
    }
    if (wake_fd >= 0) {
      const std::uint64_t one = 1;
      [[maybe_unused]] const ssize_t written = ::write(wake_fd, &one, sizeof one);
    }
    if (renewer.joinable()) renewer.join();
  }

  // Asks `on` to push the loss of our slot (GuardOptions::lost_notify). A server that does not
  // know lost-notify refuses it (kProtocol) and the guard goes on without; any other error is
  // the connection's, and returned.
  Result<void> ask_for_pushes(Connection& on) {
    pushes = false;
    if (!options.lost_notify) return {};
    auto enabled = on.enable_lost_notify([this](const LostNotice& notice) { take_push(notice); });
    if (!enabled && enabled.error().code != ErrorCode::kProtocol) return enabled.error();
    pushes = enabled.ok();
    return {};
  }

  // A `lost` line, read by whichever thread was using the connection: kept if it names the grant
  // (the renewal thread reports it). `grant` is written only before the renewal thread starts.
  void take_push(const LostNotice& notice) {
    if (notice.token != grant.token || notice.key != key || notice.ns != space) return;
    std::lock_guard lock(mutex);
    pushed = notice;
  }

  // Reports the pushed loss of the grant, if the server sent one; false when it did not.
  bool report_pushed_loss() {
    std::optional<LostNotice> notice;
    {
      std::lock_guard lock(mutex);
      notice = pushed;
    }
    if (!notice) return false;
    declare_lost(loss_reason_of(notice->reason),
                 make_error(ErrorCode::kLeaseExpired,
                            "the server reported the slot lost (" +
                                std::string(core::loss_reason_name(notice->reason)) + ")"));
    return true;
  }

  enum class Woken : std::uint8_t {
    kStop,             // stop() was called
    kDue,              // `until` came
    kPushedLoss,       // the server pushed the loss of the grant
    kConnectionEnded,  // (pushes on) the server closed or drained the connection meanwhile
  };

  // Waits until `until`, stop(), or, while pushes are on, a `lost` line for the grant or the
  // connection's end, whichever comes first; `ended` gets the connection's error.
  Woken idle_until(Clock::time_point until, Error& ended) {
    while (true) {
      if (pushes) {
        auto polled = connection.poll_lost_notices(Milliseconds{0});
        if (!polled) {
          ended = polled.error();
          return Woken::kConnectionEnded;
        }
        std::lock_guard lock(mutex);
        if (pushed) return Woken::kPushedLoss;
      }
      const auto left = std::chrono::ceil<Milliseconds>(until - Clock::now()).count();
      pollfd fds[2] = {{wake_fd, POLLIN, 0}, {connection.native_handle(), POLLIN, 0}};
      const nfds_t count = pushes && fds[1].fd >= 0 ? 2 : 1;
      const int ready =
          ::poll(fds, count, static_cast<int>(std::clamp<std::int64_t>(left, 0, 1'000'000'000)));
      if (ready < 0 && errno != EINTR) std::this_thread::sleep_for(Milliseconds{1});
      if (ready > 0 && (fds[0].revents & POLLIN) != 0) return Woken::kStop;
      if (Clock::now() >= until) return Woken::kDue;
    }
  }

  Clock::duration renew_interval(std::mt19937_64& random) const {
    const double ratio =
        options.renew_ratio > 0 && options.renew_ratio < 1 ? options.renew_ratio : 0.5;
    const double jitter =
        options.renew_jitter >= 0 && options.renew_jitter < 1 ? options.renew_jitter : 0.0;
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    const double fraction = ratio * (1.0 - jitter * unit(random));
    const auto lease = std::chrono::duration_cast<Clock::duration>(grant.lease);
    return std::chrono::duration_cast<Clock::duration>(lease * fraction);
  }

  // The guard's commands in its namespace (and mode), on `on`.
  Result<Grant> acquire_on(Connection& on) {
    if (space == core::Namespace::kSemaphore) {
      return on.sem_lock(key, options.timeout, limit, options.lease);
    }
    if (space == core::Namespace::kReadWrite) {
      return on.rw_lock(key, mode, options.timeout, options.lease);
    }
    return on.lock(key, options.timeout, options.lease);
  }
  Result<EnqueueResult> enqueue_on(Connection& on) {
    if (space == core::Namespace::kSemaphore) return on.sem_enqueue(key, limit, options.lease);
    if (space == core::Namespace::kReadWrite) return on.rw_enqueue(key, mode, options.lease);
    return on.enqueue(key, options.lease);
  }
  Result<Grant> wait_on(Connection& on, Seconds timeout) {
    if (space == core::Namespace::kSemaphore) return on.sem_wait(key, timeout);
    if (space == core::Namespace::kReadWrite) return on.rw_wait(key, mode, timeout);
    return on.wait(key, timeout);
  }
  Result<Seconds> renew_on(Connection& on) {
    if (space == core::Namespace::kSemaphore) return on.sem_renew(key, grant.token, grant.lease);
    if (space == core::Namespace::kReadWrite) {
      return on.rw_renew(key, mode, grant.token, grant.lease);
    }
    return on.renew(key, grant.token, grant.lease);
  }
  Result<void> release_on(Connection& on) {
    if (space == core::Namespace::kSemaphore) return on.sem_release(key, grant.token);
    if (space == core::Namespace::kReadWrite) return on.rw_release(key, mode, grant.token);
    return on.release(key, grant.token);
  }

  void declare_lost(LossReason reason, Error error) {
    LossEvent event{reason, std::move(error)};
    {
      std::lock_guard lock(mutex);
      if (state != GuardState::kHeld) return;
      state = GuardState::kLost;
      loss = event;
    }
    connection.close();  // with auto-release this frees anything the server still holds
    if (options.on_lost) options.on_lost(event);
  }

  // After a node could not answer a renew: finds the leader (GuardOptions::reconnect) and renews
  // there by token, until `deadline` (the end of the lease). A holder's slot outlives its
  // connection and its leader (docs/cluster.md, "Failover"), so a lease renewed in time is kept.
  // Returns when that renew was sent and the lease it granted, having moved `connection` to the
  // new node; or the error that ends the guard.
  Result<std::pair<Clock::time_point, Seconds>> renew_after_failover(Clock::time_point deadline) {
    Error last = make_error(ErrorCode::kIo, "no leader answered");
    while (Clock::now() < deadline) {
      {
        std::lock_guard guard(mutex);
        if (stopping) return make_error(ErrorCode::kIo, "released while finding the leader");
      }
      auto fresh = options.reconnect(deadline);
      if (!fresh) return fresh.error();
      if (auto asked = ask_for_pushes(*fresh); !asked) {
        if (!node_could_not_answer(asked.error().code)) return asked.error();
        last = asked.error();
        continue;
      }
      const Clock::time_point sent_at = Clock::now();
      if (sent_at >= deadline) break;
      fresh->set_reply_timeout(
          std::max(Milliseconds{1}, std::chrono::ceil<Milliseconds>(deadline - sent_at)));
      auto renewed = renew_on(*fresh);
      if (renewed) {
        {
          std::lock_guard guard(mutex);
          connection = std::move(fresh).value();
        }
        if (options.on_failover) options.on_failover(connection.endpoint());
        return std::pair{sent_at, *renewed};
      }
      if (!node_could_not_answer(renewed.error().code)) return renewed.error();
      last = renewed.error();
    }
    return Error{ErrorCode::kIo,
                 "the lease ended before a leader renewed it (" + last.to_string() + ")"};
  }

  // Bounds the wait for the reply to a renew sent at `sent_at` by the end of the lease
  // (`deadline`), no longer: past it the lock may be someone else's whatever the server says
  // later. Rounded up, so that a reply that never comes is noticed at or after the deadline and
  // reported as the lease expiring (truncating made it end up to a millisecond early, and read as
  // a connection failure). With failover riding, half of it: the other half is for finding the
  // next leader.
  void bound_reply_wait(Clock::time_point sent_at, Clock::time_point deadline) {
    const auto reply_wait =
        std::max(Milliseconds{1}, std::chrono::ceil<Milliseconds>(deadline - sent_at));
    connection.set_reply_timeout(options.reconnect ? std::max(Milliseconds{1}, reply_wait / 2)
                                                   : reply_wait);
  }

  // After a renew failed with `error`, its lease ending at `deadline`: the guard is lost, for the
  // reason the server pushed if it did, else the one the failure shows.
  void end_after_failed_renew(const Error& error, Clock::time_point deadline) {
    {
      // Released meanwhile (release() stops this thread first): release() owns the end of
      // the guard now, and nothing was lost.
      std::lock_guard guard(mutex);
      if (stopping) return;
    }
    if (report_pushed_loss()) return;  // the reason the server gave, not its refusal
    LossReason reason = LossReason::kConnectionFailed;
    if (error.code == ErrorCode::kProtocol || error.code == ErrorCode::kLeaseExpired) {
      reason = LossReason::kRenewRefused;  // `error`, or `error_lease_expired` (forced out)
    }
    if (Clock::now() >= deadline) reason = LossReason::kLeaseExpired;
    declare_lost(reason, error);
  }

  void renew_loop() {
    std::mt19937_64 random{std::random_device{}()};
    std::unique_lock lock(mutex);
    while (!stopping && state == GuardState::kHeld) {
      const Clock::time_point next =
          options.renew ? renewed_at + renew_interval(random) : lease_deadline;
      lock.unlock();
      Error ended;
      const Woken woken = idle_until(next, ended);
      if (woken == Woken::kStop) return;
      if (woken == Woken::kPushedLoss) {
        report_pushed_loss();
        return;
      }
      // The connection ended between renewals: lost now (with auto-release the server freed the
      // slot), or, riding failovers, renewed on the next leader now (the renew on the closed
      // connection fails at once, as a node that could not answer).
      if (woken == Woken::kConnectionEnded && (!options.reconnect || !options.renew)) {
        declare_lost(LossReason::kConnectionFailed, ended);
        return;
      }
      lock.lock();
      if (!options.renew || Clock::now() >= lease_deadline) {
        lock.unlock();
        declare_lost(LossReason::kLeaseExpired,
                     make_error(ErrorCode::kLeaseExpired, "the lease ended without a renewal"));
        return;
      }
      const Clock::time_point sent_at = Clock::now();
      const Clock::time_point deadline = lease_deadline;
      lock.unlock();

      bound_reply_wait(sent_at, deadline);
      auto renewed = renew_on(connection);
      if (!renewed && options.reconnect && node_could_not_answer(renewed.error().code)) {
        auto moved = renew_after_failover(deadline);
        if (moved) {
          lock.lock();
          renewed_at = moved->first;
          lease_deadline = moved->first + moved->second;
          continue;
        }
        renewed = moved.error();
      }
      if (!renewed) {
        end_after_failed_renew(renewed.error(), deadline);
        return;
      }
      lock.lock();
      renewed_at = sent_at;
      lease_deadline = sent_at + *renewed;
      if (options.on_renewed) {
        lock.unlock();
        options.on_renewed(*renewed);
        lock.lock();
      }
    }
  }
};

Guard::Guard(std::unique_ptr<State> state) : state_(std::move(state)) {}
Guard::Guard(Guard&& other) noexcept = default;

Guard& Guard::operator=(Guard&& other) noexcept {
  if (this != &other) {
    (void)release();
    state_ = std::move(other.state_);
  }
  return *this;
}

Guard::~Guard() { (void)release(); }

const std::string& Guard::key() const { return state_->key; }
const core::Token& Guard::token() const { return state_->grant.token; }
std::string Guard::token_string() const { return state_->grant.token.to_string(); }
std::uint64_t Guard::fence() const { return state_->grant.fence(); }
Seconds Guard::lease() const { return state_->grant.lease; }
Endpoint Guard::endpoint() const {
  std::lock_guard lock(state_->mutex);
  return state_->connection.endpoint();
}

GuardState Guard::state() const {
  if (state_ == nullptr) return GuardState::kReleased;
  std::lock_guard lock(state_->mutex);
  return state_->state;
}

std::optional<LossEvent> Guard::loss() const {
  if (state_ == nullptr) return std::nullopt;
  std::lock_guard lock(state_->mutex);
  return state_->loss;
}

Result<void> Guard::release() {
  if (state_ == nullptr) return {};
  State& state = *state_;
  state.stop();
  GuardState previous;
  {
    std::lock_guard lock(state.mutex);
    previous = state.state;
    state.state = GuardState::kReleased;
  }
  if (previous == GuardState::kReleased) return {};
  if (previous == GuardState::kLost) {
    return make_error(ErrorCode::kLeaseExpired, "the lock had been lost");
  }
  state.connection.set_reply_timeout(Milliseconds{5000});
  auto released = state.release_on(state.connection);
  state.connection.close();
  if (released || !state.options.reconnect || !node_could_not_answer(released.error().code)) {
    return released;
  }
  // Failover riding: the node could not answer (it died or stopped leading), and the release may
  // not have been made. Release by token with the next leader while the lease lasts; otherwise
  // the slot would stay taken until its lease ends.
  Clock::time_point deadline;
  {
    std::lock_guard lock(state.mutex);
    deadline = state.lease_deadline;
  }
  while (Clock::now() < deadline) {
    auto fresh = state.options.reconnect(deadline);
    if (!fresh) break;
    fresh->set_reply_timeout(Milliseconds{5000});
    auto again = state.release_on(*fresh);
    if (again || !node_could_not_answer(again.error().code)) {
      if (!again && again.error().code == ErrorCode::kProtocol) {
        return make_error(ErrorCode::kProtocol,
                          "after a failover the token was no longer held: the first release went "
                          "through, or the lease had ended");
      }
      return again;
    }
    released = again;
  }
  return released;
}

namespace {

// What a guard holds: its namespace, and the limit (semaphores) or the mode (read-write locks).
struct Kind {
  core::Namespace space = core::Namespace::kLock;
  std::int64_t limit = 1;
  RwMode mode = RwMode::kWrite;

  static Kind lock() { return Kind{}; }
  static Kind semaphore(std::int64_t limit) {
    Kind kind;
    kind.space = core::Namespace::kSemaphore;
    kind.limit = limit;
    return kind;
  }
  static Kind rw(RwMode mode) {
    Kind kind;
    kind.space = core::Namespace::kReadWrite;
    kind.mode = mode;
    return kind;
  }
};

Result<void> check_options(const GuardOptions& options) {
  if (!(options.renew_ratio > 0 && options.renew_ratio < 1)) {
    return make_error(ErrorCode::kInvalidArgument, "renew_ratio must be in (0, 1)");
  }
  if (!(options.renew_jitter >= 0 && options.renew_jitter < 1)) {
    return make_error(ErrorCode::kInvalidArgument, "renew_jitter must be in [0, 1)");
  }
  return {};
}

Result<std::unique_ptr<Guard::State>> make_state(Connection connection, Kind kind, std::string key,
                                                 GuardOptions options) {
  if (auto checked = check_options(options); !checked) return checked.error();
  auto state = std::make_unique<Guard::State>();
  state->wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (state->wake_fd < 0) {
    return make_error(ErrorCode::kIo, std::string("eventfd: ") + std::strerror(errno));
  }
  state->connection = std::move(connection);
  state->space = kind.space;
  state->limit = kind.limit;
  state->mode = kind.mode;
  state->key = std::move(key);
  state->options = std::move(options);
  return state;
}

// Acquires (`l`, `sl`, `rl`, `wl`) on the state's connection and starts renewing; `wrap` (a
// lambda of the guard's class, which may call its constructor) makes the guard.
template <typename Wrap>
auto acquire_guard(Result<std::unique_ptr<Guard::State>> made, Wrap wrap)
    -> Result<decltype(wrap(std::move(*made)))> {
  if (!made) return made.error();
  std::unique_ptr<Guard::State> state = std::move(*made);
  if (auto asked = state->ask_for_pushes(state->connection); !asked) return asked.error();
  auto grant = state->acquire_on(state->connection);
  if (!grant) return grant.error();
  state->start(*grant, Clock::now());
  return wrap(std::move(state));
}

// Enqueues (`e`, `se`, `re`, `we`) on the state's connection; `wrap` makes the pending that
// waits later, from the state and whether the grant was immediate.
template <typename Wrap>
auto enqueue_pending(Result<std::unique_ptr<Guard::State>> made, Wrap wrap)
    -> Result<decltype(wrap(std::move(*made), false))> {
  if (!made) return made.error();
  std::unique_ptr<Guard::State> state = std::move(*made);
  if (auto asked = state->ask_for_pushes(state->connection); !asked) return asked.error();
  auto enqueued = state->enqueue_on(state->connection);
  if (!enqueued) return enqueued.error();
  const bool acquired = enqueued->acquired.has_value();
  return wrap(std::move(state), acquired);
}

}  // namespace

Result<Lock> Lock::acquire(Connection connection, std::string key, GuardOptions options) {
  return acquire_guard(
      make_state(std::move(connection), Kind::lock(), std::move(key), std::move(options)),
      [](std::unique_ptr<State> state) { return Lock(std::move(state)); });
}

Result<PendingLock> Lock::enqueue(Connection connection, std::string key, GuardOptions options) {
  return enqueue_pending(
      make_state(std::move(connection), Kind::lock(), std::move(key), std::move(options)),
      [](std::unique_ptr<State> state, bool acquired) {
        return PendingLock(std::move(state), acquired);
      });
}

Result<Semaphore> Semaphore::acquire(Connection connection, std::string key, std::int64_t limit,
                                     GuardOptions options) {
  return acquire_guard(
      make_state(std::move(connection), Kind::semaphore(limit), std::move(key), std::move(options)),
      [](std::unique_ptr<State> state) { return Semaphore(std::move(state)); });
}

Result<PendingSemaphore> Semaphore::enqueue(Connection connection, std::string key,
                                            std::int64_t limit, GuardOptions options) {
  return enqueue_pending(
      make_state(std::move(connection), Kind::semaphore(limit), std::move(key), std::move(options)),
      [](std::unique_ptr<State> state, bool acquired) {
        return PendingSemaphore(std::move(state), acquired);
      });
}

std::int64_t Semaphore::limit() const { return state_->limit; }

Result<RwLock> RwLock::acquire(Connection connection, std::string key, RwMode mode,
                               GuardOptions options) {
  return acquire_guard(
      make_state(std::move(connection), Kind::rw(mode), std::move(key), std::move(options)),
      [](std::unique_ptr<State> state) { return RwLock(std::move(state)); });
}

Result<PendingRwLock> RwLock::enqueue(Connection connection, std::string key, RwMode mode,
                                      GuardOptions options) {
  return enqueue_pending(
      make_state(std::move(connection), Kind::rw(mode), std::move(key), std::move(options)),
      [](std::unique_ptr<State> state, bool acquired) {
        return PendingRwLock(std::move(state), acquired);
      });
}

RwMode RwLock::mode() const { return state_->mode; }

Pending::Pending(std::unique_ptr<Guard::State> state, bool acquired)
    : state_(std::move(state)), acquired_(acquired) {}
Pending::Pending(Pending&&) noexcept = default;
Pending& Pending::operator=(Pending&&) noexcept = default;
Pending::~Pending() = default;

bool Pending::acquired() const { return acquired_; }

Result<std::unique_ptr<Guard::State>> Pending::wait_state(Seconds timeout) {
  if (state_ == nullptr) return make_error(ErrorCode::kNotEnqueued, "already waited");
  auto state = std::move(state_);
  auto grant = state->wait_on(state->connection, timeout);
  if (!grant) return grant.error();
  state->start(*grant, Clock::now());
  return state;
}

Result<Lock> PendingLock::wait(Seconds timeout) {
  auto state = wait_state(timeout);
  if (!state) return state.error();
  return Lock(std::move(*state));
}

Result<Semaphore> PendingSemaphore::wait(Seconds timeout) {
  auto state = wait_state(timeout);
  if (!state) return state.error();
  return Semaphore(std::move(*state));
}

Result<RwLock> PendingRwLock::wait(Seconds timeout) {
  auto state = wait_state(timeout);
  if (!state) return state.error();
  return RwLock(std::move(*state));
}

}  // namespace turnstile::client
