#include "net/shard.h"

#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <vector>

#include "core/assert.h"
#include "net/clock.h"
#include "net/guard.h"
#include "net/idle_poll.h"
#include "net/log.h"

namespace turnstile::net {
namespace {

core::RouterConfig router_config(std::size_t index, SharedState& shared) {
  core::RouterConfig router;
  router.index = index;
  router.shards = static_cast<std::size_t>(shared.config.threads);
  router.auto_release = shared.config.auto_release_on_disconnect;
  router.orphan_ttl = core::Duration::seconds(shared.config.cluster.orphan_ttl_s);
  router.replicated = shared.config.cluster.enabled();
  router.session_tag = shared.session_tag;
  router.signals = &shared.signals;
  return router;
}

}  // namespace

// ---- Shard ------------------------------------------------------------------------------------

Shard::Shard(std::size_t index, SharedState& shared, std::uint64_t fence_floor,
             core::FenceSource* fences)
    : index_(index),
      shared_(shared),
      engine_(engine_config(shared.config, fence_floor), salts_, &shared.budget, fences),
      // In cluster mode the router sends every engine request to the node's replicated end
      // (shared.cluster) and this shard's engine stays empty.
      router_(shared.config.cluster.enabled()
                  ? core::Router(router_config(index, shared))
                  : core::Router(router_config(index, shared), engine_)),
      tcp_(*this, shared, *shared.tcp_latencies.at(index)) {
  event_config* config = event_config_new();
  event_config_set_flag(config, EVENT_BASE_FLAG_NOLOCK);  // one thread owns this base
  // evhttp turns a connection's read and write interest off and on around every request (four
  // epoll_ctl calls); with the changelist, changes within one loop turn cost at most one. No
  // descriptor on a shard's base is a dup of another on the same base (the caveat of this flag).
  event_config_set_flag(config, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
  base_ = event_base_new_with_config(config);
  event_config_free(config);
  TS_ASSERT(base_ != nullptr);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  TS_ASSERT(wake_fd_ >= 0);
  mailbox_event_ = event_new(base_, wake_fd_, EV_READ | EV_PERSIST, &Shard::on_mailbox, this);
  event_add(mailbox_event_, nullptr);
  engine_timer_.emplace(base_, &Shard::on_engine_timer, this);
}

Shard::~Shard() {
  tcp_.clear();  // their events live on base_
  engine_timer_.reset();
  event_free(mailbox_event_);
  close(wake_fd_);
  event_base_free(base_);
}

void Shard::start() {
  thread_ = std::thread([this] { run(); });
}

void Shard::join() {
  if (thread_.joinable()) thread_.join();
}

void Shard::pin_to_cpu() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) {
    logf(LogLevel::kWarn, "shard %zu: cannot read its CPU set: %s", index_, std::strerror(errno));
    return;
  }
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &allowed)) cpus.push_back(cpu);
  }
  if (cpus.empty()) return;
  const int cpu = cpus[index_ % cpus.size()];
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  if (sched_setaffinity(0, sizeof one, &one) != 0) {
    logf(LogLevel::kWarn, "shard %zu: cannot pin to CPU %d: %s", index_, cpu, std::strerror(errno));
    return;
  }
  logf(LogLevel::kInfo, "shard %zu runs on CPU %d only (--pin-threads)", index_, cpu);
}

void Shard::run() {
  if (shared_.config.pin_threads) pin_to_cpu();
  // Each turn: the mailbox, then one non-blocking pass over ready sockets and due timers. After
  // the last event the shard polls for IdlePoll's window (yielding the CPU between polls), then
  // sleeps in epoll_wait; only a sleeping shard needs its eventfd written (post()).
  //
  // Each turn reads the clock once (turn_now(), at its first use) and handles every event of the
  // turn at that instant. The reading that starts a turn also ends the one before, which is how
  // long turns are measured (note_turn).
  IdlePoll poll(core::Duration::nanoseconds(shared_.config.idle_poll_us * 1000));
  turn_now_.reset();
  core::Instant last_event = turn_now();
  core::Instant turn_start = last_event;
  std::uint64_t turn_events = 0;  // settle() calls of the turn that began at turn_start
  while (!stopped_) {
    turn_now_.reset();
    const core::Instant start = turn_now();
    if (turn_events > 0) {
      note_turn(turn_start, start, turn_events);
      last_event = start;
    }
    turn_start = start;
    const std::uint64_t events_before = events_;
    defer_writes_ = true;
    drain_mailbox();
    event_base_loop(base_, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    defer_writes_ = false;
    if (tcp_.has_writes()) guarded("shard settle", [this] { settle(); });
    turn_events = events_ - events_before;
    if (turn_events > 0) continue;
    if (start - last_event < poll.window()) {
      sched_yield();
      continue;
    }
    asleep_.store(true);
    bool empty = false;
    {
      std::lock_guard<std::mutex> lock(mailbox_mutex_);
      empty = mailbox_.empty();
    }
    // The events after the wake are handled at a fresh reading, taken by the first of them.
    turn_now_.reset();
    const std::uint64_t events_before_sleep = events_;
    if (empty) {
      defer_writes_ = true;
      event_base_loop(base_, EVLOOP_ONCE);
      defer_writes_ = false;
      if (tcp_.has_writes()) guarded("shard settle", [this] { settle(); });
    }
    asleep_.store(false);
    const core::Instant woken = turn_now();
    poll.on_woken(woken - last_event);
    last_event = woken;
    turn_start = woken;
    turn_events = events_ - events_before_sleep;
  }
  logf(LogLevel::kInfo, "shard %zu: longest loop turn %.2f ms, %llu over 10 ms", index_,
       longest_turn_.seconds_double() * 1000, static_cast<unsigned long long>(long_turns_));
}

core::Instant Shard::turn_now() {
  if (!turn_now_) turn_now_ = monotonic_now();
  return *turn_now_;
}

void Shard::note_turn(core::Instant start, core::Instant end, std::uint64_t events) {
  const core::Duration took = end - start;
  longest_turn_ = std::max(longest_turn_, took);
  if (took <= core::Duration::milliseconds(10)) return;
  ++long_turns_;
  if (took > unlogged_longest_) {
    unlogged_longest_ = took;
    unlogged_longest_events_ = events;
  }
  if (end - long_turn_logged_ < core::Duration::seconds(1)) return;
  long_turn_logged_ = end;
  logf(LogLevel::kWarn, "shard %zu: a loop turn took %.2f ms, %llu events (%llu over 10 ms so far)",
       index_, unlogged_longest_.seconds_double() * 1000,
       static_cast<unsigned long long>(unlogged_longest_events_),
       static_cast<unsigned long long>(long_turns_));
  unlogged_longest_ = core::Duration::zero();
}

void Shard::drain_mailbox() {
  {
    std::lock_guard<std::mutex> lock(mailbox_mutex_);
    if (mailbox_.empty()) return;
    processing_.swap(mailbox_);
  }
  for (Message& message : processing_) {
    guarded("shard message", [&] { handle(message); });
  }
  processing_.clear();
  guarded("shard settle", [this] { settle(); });
}

void Shard::post(Message message) {
  bool was_empty = false;
  {
    std::lock_guard<std::mutex> lock(mailbox_mutex_);
    was_empty = mailbox_.empty();
    mailbox_.push_back(std::move(message));
  }
  if (was_empty) wake();
}

void Shard::post(std::vector<core::RouterMessage>& messages) {
  if (messages.empty()) return;
  bool was_empty = false;
  {
    std::lock_guard<std::mutex> lock(mailbox_mutex_);
    was_empty = mailbox_.empty();
    for (core::RouterMessage& message : messages) mailbox_.emplace_back(std::move(message));
  }
  messages.clear();
  if (was_empty) wake();
}

void Shard::wake() {
  // The shard sets asleep_ before its last look at the mailbox and sleeps only if that look found
  // it empty; both sides use sequentially consistent operations, so either the shard sees this
  // message or this thread sees asleep_ and wakes it. An awake shard drains the mailbox every
  // turn, and it drains all of it, so one eventfd write per batch suffices.
  if (asleep_.load()) {
    const std::uint64_t one = 1;
    ssize_t written = ::write(wake_fd_, &one, sizeof one);
    (void)written;  // EAGAIN means the counter is already non-zero: the shard will wake anyway
  }
}

void Shard::on_mailbox(evutil_socket_t fd, short, void* self) {
  auto* shard = static_cast<Shard*>(self);
  std::uint64_t count = 0;
  ssize_t got = ::read(fd, &count, sizeof count);
  (void)got;
  shard->drain_mailbox();
}

void Shard::on_engine_timer(evutil_socket_t, short, void* self) {
  auto* shard = static_cast<Shard*>(self);
  shard->engine_timer_->fired();
  guarded("engine timer", [shard] {
    shard->router_.tick(shard->turn_now());
    shard->settle();
  });
}

void Shard::handle(Message& message) {
  std::visit([this](auto& m) { handle(m); }, message);
}

void Shard::handle(message::NewConnection& m) { tcp_.accept(m.fd, m.peer_ip, draining_); }

void Shard::handle(core::RouterMessage& m) { router_.receive(turn_now(), std::move(m)); }

void Shard::handle(ServiceMessage& m) {
  if (service_ != nullptr) service_->on_message(m);
}

void Shard::handle(message::Drain&) {
  draining_ = true;
  if (service_ != nullptr) service_->begin_drain();
  tcp_.begin_drain(turn_now());
}

void Shard::handle(message::Stop&) {
  tcp_.close_all();
  if (service_ != nullptr) service_->stop();
  stopped_ = true;
  event_base_loopbreak(base_);
}

void Shard::handle(message::Run& m) {
  if (!stopped_ && m.fn) m.fn();
}

// ---- the router's output
// -------------------------------------------------------------------------

void Shard::deliver_router_output(core::Instant now) {
  for (core::Envelope& envelope : router_.take_outbox()) {
    if (envelope.to == router_.replicated_endpoint()) {
      to_cluster_.push_back(std::move(envelope.message));
    } else {
      shared_.shards[envelope.to]->post(std::move(envelope.message));
    }
  }
  // One lock and at most one wake-up of the raft thread for all of them.
  if (!to_cluster_.empty()) shared_.cluster->post(to_cluster_);
  for (core::SessionEvent& event : router_.take_events()) {
    if (tcp_.owns(event.session)) {
      tcp_.on_session_event(now, event);
    } else if (service_ != nullptr && service_->owns(event.session)) {
      service_->on_session_event(now, event);
    } else {
      logf(LogLevel::kWarn, "router event for unknown session %llu dropped",
           static_cast<unsigned long long>(event.session.value));
    }
  }
}

void Shard::settle() {
  ++events_;
  // Router output and connections to service may create more of each; go until both are done.
  while (true) {
    while (!router_.idle() || tcp_.has_dirty()) {
      deliver_router_output(turn_now());
      tcp_.service_dirty(turn_now());
    }
    // Everything this turn produced is answered: each connection's replies leave in one write.
    if (!tcp_.has_writes() || defer_writes_) break;
    tcp_.write_replies();
  }
  tcp_.forget_finished();
  arm_engine_timer();
}

void Shard::arm_engine_timer() { engine_timer_->arm(router_.next_wake(), turn_now()); }

}  // namespace turnstile::net
