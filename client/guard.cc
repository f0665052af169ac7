#include "client/guard.h"

#include <condition_variable>
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
  }
  return "unknown";
}

struct Guard::State {
  Connection connection;
  core::Namespace space = core::Namespace::kLock;
  RwMode mode = RwMode::kWrite;  // kReadWrite: which kind of slot
  std::string key;
  std::int64_t limit = 1;
  GuardOptions options;
  Grant grant;

  mutable std::mutex mutex;
  std::condition_variable changed;
  GuardState state = GuardState::kHeld;  // guarded by mutex
  std::optional<LossEvent> loss;         // guarded by mutex
  bool stopping = false;                 // guarded by mutex
  Clock::time_point renewed_at;          // when the running lease began (local, conservative)
  Clock::time_point lease_deadline;      // renewed_at + lease
  std::thread renewer;

  ~State() { stop(); }

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
    changed.notify_all();
    if (renewer.joinable()) renewer.join();
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
    changed.notify_all();
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

  void renew_loop() {
    std::mt19937_64 random{std::random_device{}()};
    std::unique_lock lock(mutex);
    while (!stopping && state == GuardState::kHeld) {
      const Clock::time_point next =
          options.renew ? renewed_at + renew_interval(random) : lease_deadline;
      if (changed.wait_until(lock, next, [&] { return stopping; })) break;
      if (!options.renew || Clock::now() >= lease_deadline) {
        lock.unlock();
        declare_lost(LossReason::kLeaseExpired,
                     make_error(ErrorCode::kLeaseExpired, "the lease ended without a renewal"));
        return;
      }
      const Clock::time_point sent_at = Clock::now();
      const Clock::time_point deadline = lease_deadline;
      lock.unlock();

      // Wait for the reply until the lease ends, no longer: past it the lock may be someone
      // else's whatever the server says later. Rounded up, so that a reply that never comes is
      // noticed at or after the deadline and reported as the lease expiring (truncating made it
      // end up to a millisecond early, and read as a connection failure).
      // With failover riding, half of it: the other half is for finding the next leader.
      const auto reply_wait =
          std::max(Milliseconds{1}, std::chrono::ceil<Milliseconds>(deadline - sent_at));
      connection.set_reply_timeout(options.reconnect ? std::max(Milliseconds{1}, reply_wait / 2)
                                                     : reply_wait);
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
        {
          // Released meanwhile (release() stops this thread first): release() owns the end of
          // the guard now, and nothing was lost.
          std::lock_guard guard(mutex);
          if (stopping) return;
        }
        const Error& error = renewed.error();
        LossReason reason = LossReason::kConnectionFailed;
        if (error.code == ErrorCode::kProtocol) reason = LossReason::kRenewRefused;
        if (Clock::now() >= deadline) reason = LossReason::kLeaseExpired;
        declare_lost(reason, error);
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
