// Worker, the loop of one lock-mode generator thread (lock_worker.h): scheduling each op, the
// wire exchange of its acquire and release, and the fence checks of every grant.
#include "bench/tools/lock_worker.h"

#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace turnstile::bench {
namespace {

using std::chrono::duration_cast;
using std::chrono::nanoseconds;

// splitmix64: the next number of `state`.
std::uint64_t next_random(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

void Worker::run(TimePoint start, TimePoint warmup_end, std::optional<TimePoint> end) {
  warmup_end_ = warmup_end;
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (epoll_fd_ < 0 || timer_fd_ < 0) fatal("epoll/timerfd");
  epoll_add(epoll_fd_, timer_fd_, kTimerTag);
  for (std::size_t i = 0; i < connections_.size(); ++i) {
    epoll_add(epoll_fd_, connections_[i].fd, i);
  }
  const double interval_s =
      options_.rate > 0 ? static_cast<double>(options_.workers) / options_.rate : 0;
  interval_ = duration_cast<nanoseconds>(std::chrono::duration<double>(interval_s));
  hold_ =
      read_write()
          ? duration_cast<nanoseconds>(std::chrono::duration<double, std::micro>(options_.hold_us))
          : nanoseconds(0);
  for (Connection& connection : connections_) {
    // Open loop: worker i starts at i/R seconds, then every N/R seconds.
    connection.next_intended =
        start + duration_cast<nanoseconds>(std::chrono::duration<double>(
                    options_.rate > 0 ? connection.index / options_.rate : 0.0));
    schedule(connection, start);
  }
  arm_timer();

  std::vector<epoll_event> events(256);
  active_ = connections_.size();
  while (active_ > 0) {
    if (end && Clock::now() >= *end) break;
    for (const epoll_event& event : poll_once(epoll_fd_, events)) {
      if (event.data.u64 == kTimerTag) {
        on_timer();
        continue;
      }
      Connection& connection = connections_[event.data.u64];
      if (!connection.active) continue;
      on_ready(
          event, connection.active, [&] { flush(connection); }, [&] { on_readable(connection); });
    }
  }
  ::close(timer_fd_);
  ::close(epoll_fd_);
}

void Worker::close_connections() {
  for (Connection& connection : connections_) {
    if (connection.fd >= 0) ::close(connection.fd);
    connection.fd = -1;
  }
}

void Worker::schedule(Connection& connection, TimePoint now) {
  if (options_.rounds > 0 && connection.rounds_done >= options_.rounds) {
    deactivate(connection);
    return;
  }
  if (closed_loop()) {
    start_op(connection, now);
    return;
  }
  if (connection.next_intended <= now) {
    start_op(connection, connection.next_intended);
  } else {
    const bool earliest = timers_.empty() || connection.next_intended < timers_.top().first;
    timers_.emplace(connection.next_intended, &connection - connections_.data());
    if (earliest) arm_timer();
  }
}

void Worker::start_op(Connection& connection, TimePoint intended) {
  connection.op_start = intended;
  connection.next_intended += interval_;
  if (read_write()) choose_op(connection);
  if (!pipelined() || !connection.holding) {
    for (std::uint32_t s = 0; s < connection.slots.size(); ++s) send_acquire(connection, s);
  } else {
    for (std::uint32_t s = 0; s < connection.slots.size(); ++s) {
      append_release(connection, s);
      send_acquire(connection, s);
    }
  }
  flush(connection);
}

void Worker::choose_op(Connection& connection) {
  const std::uint64_t pick = next_random(connection.random);
  const std::uint64_t kind = next_random(connection.random);
  const auto key_index = static_cast<std::size_t>(pick % keys_->names.size());
  // 53 random bits as a fraction in [0, 1).
  const double draw = static_cast<double>(kind >> 11) * 0x1.0p-53;
  connection.op_write = draw * 100 >= options_.read_percent;
  Slot& slot = connection.slots[0];
  slot.key_index = key_index;
  slot.key = keys_->names[key_index];
  slot.state = &keys_->states[key_index];
  connection.protocol = connection.op_write ? write_protocol_ : read_protocol_;
}

void Worker::append_release(Connection& connection, std::uint32_t s) {
  Slot& slot = connection.slots[s];
  if (rw_exclusion()) {
    (connection.op_write ? slot.state->writers : slot.state->readers).fetch_sub(1);
  } else if (check_capacity()) {
    slot.state->holders.fetch_sub(1, std::memory_order_acq_rel);
  }
  connection.protocol->append_release(connection.out, slot.key, slot.token);
  connection.expected.emplace_back(Expect::kRelease, s);
}

bool Worker::check_order() const {
  return !options_.no_exclusion && options_.mode != Mode::kSemaphore &&
         options_.mode != Mode::kReadWrite;
}

void Worker::send_acquire(Connection& connection, std::uint32_t s) {
  Slot& slot = connection.slots[s];
  slot.fence_floor = slot.state->max_received.load(std::memory_order_acquire);
  connection.protocol->append_acquire(connection.out, slot.key);
  connection.expected.emplace_back(Expect::kGrant, s);
}

void Worker::flush(Connection& connection) {
  if (const std::string error = send_pending(connection.fd, connection.out, connection.out_sent);
      !error.empty()) {
    fail(connection, error);
    return;
  }
  const bool pending = connection.out_sent < connection.out.size();
  if (!pending) {
    connection.out.clear();
    connection.out_sent = 0;
  }
  watch_writes(epoll_fd_, connection.fd,
               static_cast<std::uint64_t>(&connection - connections_.data()), pending,
               connection.want_write);
}

void Worker::on_readable(Connection& connection) {
  if (const std::string error = receive_available(connection.fd, connection.in); !error.empty()) {
    fail(connection, error);
    return;
  }
  std::size_t offset = 0;
  while (connection.active && offset < connection.in.size()) {
    if (connection.expected.empty()) {
      fail(connection, "unsolicited reply: " + first_line(connection.in.substr(offset)));
      return;
    }
    const auto [expect, s] = connection.expected.front();
    const std::string_view input = std::string_view(connection.in).substr(offset);
    Reply reply;
    const Protocol& protocol = *connection.protocol;
    const std::size_t used = expect == Expect::kGrant ? protocol.parse_grant(input, reply)
                                                      : protocol.parse_release(input, reply);
    if (used == 0) break;
    offset += used;
    connection.expected.pop_front();
    if (!reply.ok) {
      fail(connection, std::string(expect == Expect::kGrant ? "acquire" : "release") + " of " +
                           connection.slots[s].key + " answered \"" +
                           (reply.text.empty() ? std::string(reply.line) : reply.text) + "\"");
      return;
    }
    if (expect == Expect::kGrant) on_grant(connection, s, reply);
    if (connection.expected.empty()) on_all_replied(connection);
  }
  if (connection.active) connection.in.erase(0, offset);
}

void Worker::on_grant(Connection& connection, std::uint32_t s, const Reply& reply) {
  Slot& slot = connection.slots[s];
  slot.token = reply.token;
  KeyState& key = *slot.state;
  if (reply.fence <= slot.fence_floor) {
    shared_.report(shared_.fence_violations, "fence " + std::to_string(reply.fence) + " of " +
                                                 slot.key + " is not above " +
                                                 std::to_string(slot.fence_floor) +
                                                 ", a fence received before its acquire was sent");
  }
  std::uint64_t seen = key.max_received.load(std::memory_order_acquire);
  if (rw_exclusion() && connection.op_write && reply.fence <= seen) {
    shared_.report(shared_.fence_violations,
                   "write grant of " + slot.key + " has fence " + std::to_string(reply.fence) +
                       ", not above fence " + std::to_string(seen) + " received before it");
  }
  while (seen < reply.fence &&
         !key.max_received.compare_exchange_weak(seen, reply.fence, std::memory_order_acq_rel)) {
  }
  if (rw_exclusion()) {
    count_rw_holder(connection, slot, reply.fence);
  } else if (check_capacity()) {
    const std::int64_t capacity = options_.mode == Mode::kSemaphore ? options_.limit : 1;
    const std::int64_t holders = key.holders.fetch_add(1, std::memory_order_acq_rel) + 1;
    if (holders > capacity) {
      shared_.report(shared_.fence_violations,
                     "grant of " + slot.key + " (fence " + std::to_string(reply.fence) +
                         ") makes " + std::to_string(holders) + " holders at once, capacity " +
                         std::to_string(capacity));
    }
  }
  if (!check_order()) {
    result.fences.emplace_back(slot.key_index, reply.fence);
  } else {
    const std::uint64_t previous = key.last_recorded.exchange(reply.fence);
    if (reply.fence <= previous) {
      shared_.report(shared_.fence_violations, "fence " + std::to_string(reply.fence) + " of " +
                                                   slot.key + " granted after fence " +
                                                   std::to_string(previous));
    }
  }
}

void Worker::count_rw_holder(const Connection& connection, const Slot& slot, std::uint64_t fence) {
  KeyState& key = *slot.state;
  std::int64_t readers = 0;
  std::int64_t writers = 0;
  if (connection.op_write) {
    writers = key.writers.fetch_add(1) + 1;
    readers = key.readers.load();
  } else {
    readers = key.readers.fetch_add(1) + 1;
    writers = key.writers.load();
    if (Clock::now() >= warmup_end_) {
      ++result.read_grants;
      if (readers > 1) ++result.shared_reads;
    }
    result.max_readers = std::max(result.max_readers, readers);
  }
  if (writers > 1 || (writers == 1 && readers > 0)) {
    shared_.report(shared_.fence_violations,
                   std::string(connection.op_write ? "write" : "read") + " grant of " + slot.key +
                       " (fence " + std::to_string(fence) + ") makes " + std::to_string(writers) +
                       " writers and " + std::to_string(readers) + " readers at once");
  }
}

void Worker::on_all_replied(Connection& connection) {
  const TimePoint now = Clock::now();
  if (pipelined()) {
    if (!connection.holding) {
      connection.holding = true;  // the first round only acquires: no op completes
    } else {
      complete_ops(connection, now, connection.slots.size());
    }
    schedule(connection, now);
    return;
  }
  if (!connection.releasing) {
    if (hold_ > nanoseconds(0)) {
      // rwlock: the grant is held; the timer releases it.
      connection.hold_timer = true;
      const bool earliest = timers_.empty() || now + hold_ < timers_.top().first;
      timers_.emplace(now + hold_, &connection - connections_.data());
      if (earliest) arm_timer();
      return;
    }
    release(connection);
    return;
  }
  connection.releasing = false;
  complete_ops(connection, now, 1);
  schedule(connection, now);
}

void Worker::release(Connection& connection) {
  connection.releasing = true;
  append_release(connection, 0);
  flush(connection);
}

void Worker::complete_ops(Connection& connection, TimePoint now, std::size_t ops) {
  ++connection.rounds_done;
  ops_all.fetch_add(ops, std::memory_order_relaxed);
  if (now < warmup_end_) return;
  const auto latency_ns = static_cast<std::uint64_t>(
      std::max<std::int64_t>(0, duration_cast<nanoseconds>(now - connection.op_start).count()));
  for (std::size_t i = 0; i < ops; ++i) result.histogram.record(latency_ns);
  if (read_write()) {
    (connection.op_write ? result.write_histogram : result.read_histogram).record(latency_ns);
  }
  result.measured_ops += ops;
  result.last_completion = std::max(result.last_completion, now);
}

void Worker::on_timer() {
  std::uint64_t expirations = 0;
  [[maybe_unused]] ssize_t ignored = ::read(timer_fd_, &expirations, sizeof expirations);
  const TimePoint now = Clock::now();
  while (!timers_.empty() && timers_.top().first <= now) {
    Connection& connection = connections_[static_cast<std::size_t>(timers_.top().second)];
    const TimePoint intended = timers_.top().first;
    timers_.pop();
    if (!connection.active) continue;
    if (connection.hold_timer) {
      connection.hold_timer = false;
      release(connection);
    } else {
      start_op(connection, intended);
    }
  }
  arm_timer();
}

void Worker::arm_timer() {
  itimerspec spec{};
  if (!timers_.empty()) {
    const auto ns = duration_cast<nanoseconds>(timers_.top().first.time_since_epoch()).count();
    spec.it_value.tv_sec = static_cast<time_t>(ns / 1000000000);
    spec.it_value.tv_nsec = static_cast<long>(ns % 1000000000);
    if (spec.it_value.tv_sec == 0 && spec.it_value.tv_nsec == 0) spec.it_value.tv_nsec = 1;
  }
  timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &spec, nullptr);
}

void Worker::fail(Connection& connection, const std::string& why) {
  shared_.report(shared_.errors, "worker " + std::to_string(connection.index) + ": " + why);
  deactivate(connection);
}

void Worker::deactivate(Connection& connection) {
  if (!connection.active) return;
  connection.active = false;
  --active_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, connection.fd, nullptr);
}

std::string Worker::first_line(const std::string& text) {
  return text.substr(0, std::min(text.find('\n'), std::size_t{80}));
}
}  // namespace turnstile::bench
