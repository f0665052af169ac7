#include "client/members.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <random>
#include <thread>
#include <utility>

#include "core/assert.h"

namespace turnstile::client {
namespace {

using Clock = std::chrono::steady_clock;

std::string random_ref() {
  std::random_device device;
  const std::uint64_t bits = (std::uint64_t{device()} << 32) ^ device();
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(bits));
  return std::string("turnstile-client-") + hex;
}

}  // namespace

struct Members::Shared {
  std::vector<Endpoint> members;
  ConnectOptions options;
  FailoverOptions failover;
  mutable std::mutex mutex;
  std::optional<Endpoint> leader;                  // guarded by mutex
  std::vector<Endpoint> silent;                    // guarded by mutex; see connect_leader()
  std::mt19937_64 random{std::random_device{}()};  // guarded by mutex

  // One node: connect, bind the ref, `barrier`. `hint` gets the leader a follower named.
  Result<Connection> try_node(const Endpoint& node, Clock::time_point deadline,
                              std::optional<Endpoint>& hint) const {
    ConnectOptions bounded = options;
    const auto left = std::chrono::ceil<Milliseconds>(deadline - Clock::now());
    const Milliseconds probe = std::min(left, failover.probe_timeout);
    bounded.connect_timeout = std::clamp(probe, Milliseconds{1}, options.connect_timeout);
    bounded.reply_timeout = std::clamp(probe, Milliseconds{1}, options.reply_timeout);
    auto connection = Connection::connect(node, bounded);
    if (!connection) return connection.error();
    if (auto bound = connection->stable_ref(failover.stable_ref); !bound) return bound.error();
    if (auto barrier = connection->barrier(); !barrier) {
      if (barrier.error().code == ErrorCode::kNotLeader) hint = connection->leader_hint();
      return barrier.error();
    }
    connection->set_reply_timeout(options.reply_timeout);
    return connection;
  }

  // The order of one round: the last leader first, then the members; those that did not answer
  // in the last round (a stopped or unreachable node costs a whole probe_timeout) after the
  // others.
  std::vector<Endpoint> round_order() const {
    std::optional<Endpoint> last_leader;
    std::vector<Endpoint> silent_before;
    {
      std::lock_guard lock(mutex);
      last_leader = leader;
      silent_before = silent;
    }
    auto was_silent = [&](const Endpoint& node) {
      return std::find(silent_before.begin(), silent_before.end(), node) != silent_before.end();
    };
    std::vector<Endpoint> order;
    auto add = [&order](const Endpoint& node) {
      if (std::find(order.begin(), order.end(), node) == order.end()) order.push_back(node);
    };
    if (last_leader && !was_silent(*last_leader)) add(*last_leader);
    for (const Endpoint& member : members) {
      if (!was_silent(member)) add(member);
    }
    for (const Endpoint& node : silent_before) add(node);
    return order;
  }

  // Puts the leader `hint` that order[i] named next in the round. A hint to a node tried already
  // in this round is not followed: a follower that has not seen the election yet names the old,
  // stopped leader, and a node that names itself (or two that name each other) would keep the
  // round from ever reaching the rest.
  static void follow_hint(std::vector<Endpoint>& order, std::size_t i,
                          std::optional<Endpoint> hint) {
    if (hint && std::find(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                          *hint) != order.begin() + static_cast<std::ptrdiff_t>(i) + 1) {
      hint.reset();
    }
    if (hint && std::find(order.begin() + static_cast<std::ptrdiff_t>(i) + 1, order.end(), *hint) ==
                    order.end()) {
      order.insert(order.begin() + static_cast<std::ptrdiff_t>(i) + 1, *hint);
    } else if (hint) {
      // Already due later in this round: move it next.
      auto at = std::find(order.begin() + static_cast<std::ptrdiff_t>(i) + 1, order.end(), *hint);
      std::rotate(order.begin() + static_cast<std::ptrdiff_t>(i) + 1, at, at + 1);
    }
  }

  Result<Connection> connect_leader(Clock::time_point deadline) {
    Error last = make_error(ErrorCode::kConnect, "no member was tried");
    Milliseconds backoff = failover.first_backoff;
    for (;;) {
      std::vector<Endpoint> order = round_order();
      std::vector<Endpoint> silent_now;  // did not answer in this round
      for (std::size_t i = 0; i < order.size() && Clock::now() < deadline; ++i) {
        std::optional<Endpoint> hint;
        auto connection = try_node(order[i], deadline, hint);
        if (connection) {
          std::lock_guard lock(mutex);
          leader = order[i];
          std::erase(silent, order[i]);
          return connection;
        }
        last = connection.error();
        if (connection.error().code != ErrorCode::kNotLeader) silent_now.push_back(order[i]);
        follow_hint(order, i, hint);
      }
      const Clock::time_point now = Clock::now();
      {
        std::lock_guard lock(mutex);
        silent = silent_now;
      }
      if (now >= deadline) return last;
      Milliseconds sleep;
      {
        std::lock_guard lock(mutex);
        leader.reset();
        std::uniform_int_distribution<std::int64_t> half_to_all(backoff.count() / 2,
                                                                backoff.count());
        sleep = Milliseconds{half_to_all(random)};
      }
      std::this_thread::sleep_until(std::min(deadline, now + sleep));
      backoff = std::min(failover.max_backoff, backoff * 2);
    }
  }

  // GuardOptions::reconnect for the guards made here: shares this state, so it outlives Members.
  static GuardOptions riding(const std::shared_ptr<Shared>& shared, GuardOptions options) {
    options.reconnect = [shared](Clock::time_point deadline) {
      return shared->connect_leader(deadline);
    };
    return options;
  }

  // Connects to the leader and runs `acquire` there, again on the next leader while the outcome
  // is unknown, until leader_timeout plus the acquire's own timeout have passed.
  template <typename Acquire>
  auto acquire_on_leader(Seconds acquire_timeout, Acquire acquire)
      -> decltype(acquire(std::declval<Connection>())) {
    const Clock::time_point deadline = Clock::now() + failover.leader_timeout + acquire_timeout;
    for (;;) {
      auto connection = connect_leader(deadline);
      if (!connection) return connection.error();
      auto acquired = acquire(std::move(*connection));
      if (acquired || !node_could_not_answer(acquired.error().code) || Clock::now() >= deadline) {
        return acquired;
      }
      std::lock_guard lock(mutex);
      leader.reset();
    }
  }
};

Members::Members(std::vector<Endpoint> members, ConnectOptions options, FailoverOptions failover)
    : shared_(std::make_shared<Shared>()) {
  TS_ASSERT(!members.empty());
  shared_->members = std::move(members);
  shared_->options = std::move(options);
  shared_->failover = std::move(failover);
  if (shared_->failover.stable_ref.empty()) shared_->failover.stable_ref = random_ref();
}

const std::vector<Endpoint>& Members::members() const { return shared_->members; }
const std::string& Members::stable_ref() const { return shared_->failover.stable_ref; }

std::optional<Endpoint> Members::last_leader() const {
  std::lock_guard lock(shared_->mutex);
  return shared_->leader;
}

Result<Connection> Members::connect_leader(Milliseconds timeout) const {
  return shared_->connect_leader(Clock::now() + timeout);
}

Result<Lock> Members::lock(std::string key, GuardOptions options) const {
  options = Shared::riding(shared_, std::move(options));
  return shared_->acquire_on_leader(options.timeout, [&](Connection connection) {
    return Lock::acquire(std::move(connection), key, options);
  });
}

Result<Semaphore> Members::semaphore(std::string key, std::int64_t limit,
                                     GuardOptions options) const {
  options = Shared::riding(shared_, std::move(options));
  return shared_->acquire_on_leader(options.timeout, [&](Connection connection) {
    return Semaphore::acquire(std::move(connection), key, limit, options);
  });
}

Result<RwLock> Members::rw_lock(std::string key, RwMode mode, GuardOptions options) const {
  options = Shared::riding(shared_, std::move(options));
  return shared_->acquire_on_leader(options.timeout, [&](Connection connection) {
    return RwLock::acquire(std::move(connection), key, mode, options);
  });
}

}  // namespace turnstile::client
