// RAII guards over one held lock, semaphore slot or read-write lock (read or write), with
// background lease renewal.
//
//   auto connection = Connection::connect(endpoint);          // or Cluster::connect_for(key)
//   auto lock = Lock::acquire(std::move(*connection), "build-job", {.timeout = Seconds{30}});
//   if (!lock) { ... lock.error().code == ErrorCode::kTimeout ... }
//   write_with_fence(lock->fence());                           // u64 from the token
//   // ~Lock releases (r) and closes the connection.
//   auto reader = RwLock::acquire(std::move(*other), "catalog", RwMode::kRead, options);
//   // readers share "catalog"; a RwMode::kWrite guard holds it alone. ~RwLock sends rr (or wr).
//
// A guard owns its Connection: the lock lives and dies with it (the server's default
// --auto-release-on-disconnect), and nothing else can block the connection the renewals need.
//
// Renewal: each guard runs one renewal thread (a thread per guard keeps one guard's slow server
// from delaying another's renewals; guards are few per process). It renews the lease after
// `renew_ratio` of it has passed, made earlier (never later) by up to `renew_jitter` of that
// interval, so that many clients spread out without ever renewing late. Every renew asks for the
// lease of the original grant and waits for its reply at most until the current lease would end.
//
// Loss: the lock is lost when a renew is refused (`error`: the server no longer knows the token),
// when the connection fails (which, with auto-release, released it), or when the local lease
// deadline passes without a successful renew (a slow or stopped server). The local deadline is
// kept conservatively: a renew's lease counts from when it was sent, a grant's from when its reply
// arrived. On loss the state becomes kLost and `on_lost` is called once, on the renewal thread.
// The guard then does nothing more (no reconnect, no release).
//
// Lost-notify (GuardOptions::lost_notify, on by default): before it acquires, the guard asks its
// connection for `lost` pushes (Connection::enable_lost_notify), and between renewals its thread
// waits on the socket as well as on its clock. When the server pushes the loss of the guard's
// token (its lease ran out there, an operator force-released it, an orphan was reclaimed) the
// loss is reported at once, kServerExpired, kForceReleased or kReclaimed, instead of at the next
// renewal (up to renew_ratio of the lease later); a connection the server closes or drains
// between renewals is a loss at once too (with failover riding: a renewal on the next leader at
// once). A server without lost-notify (dflockd) refuses it, and the guard works as before.
//
// Failover (GuardOptions::reconnect, set by Members::lock and Members::semaphore, members.h): a
// renew waits for its reply at most half the time left on the lease. When it fails because the
// node could not answer (the connection failed or timed out, the node stopped leading or is
// draining), the guard asks `reconnect` for a connection to the leader and renews there by token:
// in a cluster a holder's slot outlives its connection and its leader, so a lease renewed in time
// is kept, same token and fence (docs/cluster.md, "Failover"). The guard goes on over the new
// connection and calls `on_failover`. A refused renew there is kRenewRefused; no leader before
// the lease ends, kLeaseExpired. Either way the loss is reported once, never silently. release()
// likewise goes to the next leader, by token, when the node could not answer it.
//
// Thread affinity: a guard's methods are called from one thread at a time; state(), held() and
// loss() may be called from any thread. `on_lost` runs on the renewal thread and must not call
// release() or destroy the guard.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "client/connection.h"
#include "client/result.h"
#include "core/types.h"

namespace turnstile::client {

enum class GuardState : std::uint8_t {
  kHeld,      // granted, and (as far as we know) the lease is running
  kLost,      // renewal failed or the lease ran out: someone else may hold it now
  kReleased,  // released by release() (or the guard was moved from)
};

enum class LossReason : std::uint8_t {
  kRenewRefused,      // the server answered a renew with an error (token unknown: lease ended)
  kConnectionFailed,  // the connection failed or closed, or the server is draining
  kLeaseExpired,      // the local lease deadline passed without a successful renew
  // Pushed by the server (lost-notify), reported as the `lost` line arrives:
  kServerExpired,  // `expired`: the lease ran out on the server
  kForceReleased,  // `forced`: an operator force-released it (HTTP DELETE /v1/admin/...)
  kReclaimed,      // `reclaimed`: an orphan kept for the guard's stable ref ran out of time
};

std::string_view loss_reason_name(LossReason reason);

struct LossEvent {
  LossReason reason = LossReason::kLeaseExpired;
  Error error;  // what the last renew (or the deadline) returned
};

struct GuardOptions {
  Seconds timeout{10};        // how long acquire (or wait) waits for the grant; 0 = try once
  Seconds lease{0};           // lease to ask for; 0 = the server's default
  double renew_ratio = 0.5;   // renew after this fraction of the lease, in (0, 1)
  double renew_jitter = 0.1;  // renew up to this fraction of that interval earlier, in [0, 1)
  bool renew = true;          // false: no renewals; the guard still reports the lease's end
  // Ask the server to push the loss of the slot (lost-notify), so that it is reported as it
  // happens; false: learn of a loss only when a renewal fails or the lease ends locally.
  bool lost_notify = true;
  std::function<void(const LossEvent&)> on_lost;  // called once, on the renewal thread
  // Called after each successful renew with the lease the server granted, on the renewal thread
  // (for logs and metrics; it must not call the guard's methods).
  std::function<void(Seconds lease)> on_renewed;
  // A connection to the cluster's leader with the guard's stable ref bound, or the error once
  // `deadline` passes; empty: no failover riding (the header comment says what it does).
  std::function<Result<Connection>(std::chrono::steady_clock::time_point deadline)> reconnect;
  // Called on the renewal thread each time the guard moved to a new connection after a failover
  // and kept its slot (same token), with the node it is on now.
  std::function<void(const Endpoint& node)> on_failover;
};

class Guard {
 public:
  Guard(Guard&& other) noexcept;
  Guard& operator=(Guard&& other) noexcept;
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;
  ~Guard();  // release(), ignoring its result

  const std::string& key() const;
  const core::Token& token() const;
  std::string token_string() const;
  std::uint64_t fence() const;  // the fencing number: strictly increasing per key
  Seconds lease() const;        // the lease granted (and asked for on every renew)
  Endpoint endpoint() const;    // the node the guard is on (it changes after a failover)

  GuardState state() const;
  bool held() const { return state() == GuardState::kHeld; }
  std::optional<LossEvent> loss() const;  // set once state() is kLost

  // Stops renewing, releases (`r`/`sr`/`rr`/`wr`) if still held, closes the connection. Errors:
  // what the release returned; kLeaseExpired if the lock had been lost; nothing if already
  // released.
  Result<void> release();

  struct State;  // implementation detail (guard.cc)

 protected:
  explicit Guard(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

class PendingLock;
class PendingSemaphore;
class PendingRwLock;

class Lock : public Guard {
 public:
  // `l key timeout [lease]` on `connection`, then background renewal.
  static Result<Lock> acquire(Connection connection, std::string key, GuardOptions options = {});
  // Two-phase, step one: `e key [lease]`. Wait with PendingLock::wait.
  static Result<PendingLock> enqueue(Connection connection, std::string key,
                                     GuardOptions options = {});

 private:
  friend class PendingLock;
  using Guard::Guard;
};

class Semaphore : public Guard {
 public:
  // `sl key timeout limit [lease]`: one of `limit` slots.
  static Result<Semaphore> acquire(Connection connection, std::string key, std::int64_t limit,
                                   GuardOptions options = {});
  static Result<PendingSemaphore> enqueue(Connection connection, std::string key,
                                          std::int64_t limit, GuardOptions options = {});
  std::int64_t limit() const;

 private:
  friend class PendingSemaphore;
  using Guard::Guard;
};

class RwLock : public Guard {
 public:
  // `rl`/`wl key timeout [lease]`: a read lock (shared with other readers) or a write lock
  // (alone), renewed with `rn`/`wn` and released with `rr`/`wr`.
  static Result<RwLock> acquire(Connection connection, std::string key, RwMode mode,
                                GuardOptions options = {});
  // Two-phase, step one: `re`/`we key [lease]`. Wait with PendingRwLock::wait (`rw`/`ww`).
  static Result<PendingRwLock> enqueue(Connection connection, std::string key, RwMode mode,
                                       GuardOptions options = {});
  RwMode mode() const;

 private:
  friend class PendingRwLock;
  using Guard::Guard;
};

// Two-phase acquisition between `e` and `w`: the place in the queue is held by the connection.
// Destroying it without waiting closes the connection, which gives the place (or the grant) up.
class Pending {
 public:
  Pending(Pending&&) noexcept;
  Pending& operator=(Pending&&) noexcept;
  ~Pending();

  // True when `e` answered `acquired`: the grant is already made and its lease running; wait()
  // then returns at once (and restarts the lease).
  bool acquired() const;

 protected:
  explicit Pending(std::unique_ptr<Guard::State> state, bool acquired);
  // `w`/`sw`/`rw`/`ww`: the state of a held guard, or the error (kTimeout, kLeaseExpired, ...). The
  // pending is spent afterwards either way (a second wait() returns kNotEnqueued).
  Result<std::unique_ptr<Guard::State>> wait_state(Seconds timeout);

  std::unique_ptr<Guard::State> state_;
  bool acquired_ = false;
};

class PendingLock : public Pending {
 public:
  Result<Lock> wait(Seconds timeout);

 private:
  friend class Lock;
  using Pending::Pending;
};

class PendingSemaphore : public Pending {
 public:
  Result<Semaphore> wait(Seconds timeout);

 private:
  friend class Semaphore;
  using Pending::Pending;
};

class PendingRwLock : public Pending {
 public:
  Result<RwLock> wait(Seconds timeout);

 private:
  friend class RwLock;
  using Pending::Pending;
};

}  // namespace turnstile::client
