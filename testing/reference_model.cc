#include "testing/reference_model.h"

#include <algorithm>
#include <limits>
#include <tuple>
#include <utility>

#include "core/assert.h"

namespace turnstile::test {

using core::Command;
using core::Delivery;
using core::Duration;
using core::Instant;
using core::Namespace;
using core::Reply;
using core::Request;
using core::SessionId;
using core::Status;
using core::Token;

namespace {
constexpr std::uint64_t kLastFence = std::numeric_limits<std::uint64_t>::max();
}  // namespace

ReferenceModel::ReferenceModel(const core::EngineConfig& config, std::uint64_t salt_seed)
    : config_(config), salts_(salt_seed), last_fence_(config.fence_floor.value) {}

// ---- time ---------------------------------------------------------------------------------------

bool ReferenceModel::gc_candidate(const Resource& resource) const {
  if (!resource.holders.empty() || !resource.waiters.empty() || resource.delay_until) {
    return false;
  }
  for (const Record& record : records_) {
    if (record.ns == resource.ns && record.key == resource.key) return false;
  }
  return true;
}

std::optional<Instant> ReferenceModel::gc_instant(const Resource& resource) const {
  if (!gc_candidate(resource)) return std::nullopt;
  const Instant at = resource.last_activity + config_.gc_max_idle + Duration::nanoseconds(1);
  // Near the end of time the sum saturates: an instant at which the resource still would not
  // have been idle for longer than gc_max_idle is no GC instant at all.
  if (!(at - resource.last_activity > config_.gc_max_idle)) return std::nullopt;
  return at;
}

std::optional<ReferenceModel::Due> ReferenceModel::earliest_due(
    std::optional<std::size_t> only) const {
  std::optional<Due> best;
  auto consider = [&best](const Due& due) {
    if (!best ||
        std::tie(due.at, due.kind, due.serial) < std::tie(best->at, best->kind, best->serial)) {
      best = due;
    }
  };
  for (std::size_t r = 0; r < resources_.size(); ++r) {
    if (only && r != *only) continue;
    const Resource& resource = resources_[r];
    for (std::size_t h = 0; h < resource.holders.size(); ++h) {
      const Holder& holder = resource.holders[h];
      if (holder.deadline <= now_) consider(Due{holder.deadline, 0, holder.serial, r, h});
    }
    if (resource.delay_until && *resource.delay_until <= now_) {
      consider(Due{*resource.delay_until, 1, resource.delay_serial, r, 0});
    }
    for (std::size_t w = 0; w < resource.waiters.size(); ++w) {
      const Waiter& waiter = resource.waiters[w];
      if (waiter.parked && waiter.timeout_deadline <= now_) {
        consider(Due{waiter.timeout_deadline, 2, waiter.serial, r, w});
      }
    }
    // Literally "now - last_activity > gc_max_idle".
    if (gc_candidate(resource) && now_ - resource.last_activity > config_.gc_max_idle) {
      consider(Due{*gc_instant(resource), 3, 0, r, 0});
    }
  }
  return best;
}

void ReferenceModel::advance(Instant now, std::vector<Delivery>& out, std::size_t limit) {
  if (now < now_) {
    ++counters_.clock_regressions;
  } else {
    now_ = now;
  }
  for (std::size_t done = 0; done < limit; ++done) {
    std::optional<Due> due = earliest_due(std::nullopt);
    if (!due) break;
    process(*due, out);
  }
}

void ReferenceModel::settle(Namespace ns, const std::string& key, std::vector<Delivery>& out) {
  while (true) {
    std::optional<std::size_t> index = find_resource(ns, key);
    if (!index) return;
    std::optional<Due> due = earliest_due(index);
    if (!due) return;
    process(*due, out);
  }
}

void ReferenceModel::process(const Due& due, std::vector<Delivery>& out) {
  Resource& resource = resources_[due.resource_index];
  if (due.kind == 0) {
    Token token = resource.holders[due.item_index].token;
    const SessionId holder_session = resource.holders[due.item_index].session;
    if (std::find(closed_.begin(), closed_.end(), holder_session) == closed_.end()) {
      losses_.push_back(core::Loss{holder_session, core::LostSlot{resource.ns, resource.key, token,
                                                                  core::LossReason::kExpired}});
    }
    resource.holders.erase(resource.holders.begin() + static_cast<std::ptrdiff_t>(due.item_index));
    ++counters_.lease_expiries;
    for (Record& record : records_) {
      if (record.state == RecordState::kGranted && record.token == token) {
        record.state = RecordState::kExpired;
      }
    }
    start_delay(resource);
    promote(due.resource_index, out);
  } else if (due.kind == 1) {
    resource.delay_until.reset();
    promote(due.resource_index, out);
  } else if (due.kind == 2) {
    Waiter waiter = resource.waiters[due.item_index];
    resource.waiters.erase(resource.waiters.begin() + static_cast<std::ptrdiff_t>(due.item_index));
    ++counters_.wait_timeouts;
    out.push_back(Delivery{waiter.session, Reply::of(Status::kTimeout)});
    if (waiter.two_phase) erase_record(waiter.session, resource.ns, resource.key);
    promote(due.resource_index, out);
  } else {
    resources_.erase(resources_.begin() + static_cast<std::ptrdiff_t>(due.resource_index));
    ++counters_.resources_collected;
  }
}

std::optional<Instant> ReferenceModel::next_wake() const {
  std::optional<Instant> best;
  auto consider = [&best](Instant at) {
    if (!best || at < *best) best = at;
  };
  for (const Resource& resource : resources_) {
    for (const Holder& holder : resource.holders) consider(holder.deadline);
    for (const Waiter& waiter : resource.waiters) {
      if (waiter.parked) consider(waiter.timeout_deadline);
    }
    if (resource.delay_until) consider(*resource.delay_until);
    if (std::optional<Instant> at = gc_instant(resource)) consider(*at);
  }
  return best;
}

// ---- grants -------------------------------------------------------------------------------------

bool ReferenceModel::fences_exhausted() const { return last_fence_ == kLastFence; }

Token ReferenceModel::mint() {
  TS_ASSERT(!fences_exhausted());
  ++last_fence_;
  ++counters_.grants;
  return Token{core::Fence{last_fence_}, salts_.next_u64()};
}

std::int64_t ReferenceModel::lease_or_default(std::int64_t lease_s) const {
  return lease_s > 0 ? lease_s : config_.default_lease_s;
}

bool ReferenceModel::admits(const Resource& resource, bool shared) {
  if (resource.delay_until) return false;
  if (resource.ns != Namespace::kReadWrite) {
    return static_cast<std::int64_t>(resource.holders.size()) < resource.limit;
  }
  if (resource.holders.empty()) return true;
  if (!shared) return false;
  for (const Holder& holder : resource.holders) {
    if (!holder.shared) return false;
  }
  return true;
}

void ReferenceModel::start_delay(Resource& resource) {
  if (config_.lock_delay <= Duration::zero()) return;
  const Instant until = now_ + config_.lock_delay;
  if (resource.delay_until && *resource.delay_until >= until) return;
  resource.delay_until = until;
  resource.delay_serial = next_serial();
}

void ReferenceModel::promote(std::size_t resource_index, std::vector<Delivery>& out) {
  Resource& resource = resources_[resource_index];
  while (!resource.waiters.empty() && admits(resource, resource.waiters.front().shared)) {
    Waiter waiter = resource.waiters.front();
    resource.waiters.erase(resource.waiters.begin());
    if (fences_exhausted()) {
      ++counters_.fence_exhausted;
      if (waiter.parked) out.push_back(Delivery{waiter.session, Reply::of(Status::kError)});
      if (waiter.two_phase) erase_record(waiter.session, resource.ns, resource.key);
      continue;
    }
    Token token = mint();
    resource.holders.push_back(Holder{token, waiter.session,
                                      now_ + Duration::seconds(waiter.lease_s), next_serial(),
                                      waiter.shared});
    if (waiter.parked) {
      out.push_back(Delivery{waiter.session, Reply::granted(Status::kOk, token, waiter.lease_s)});
      if (waiter.two_phase) erase_record(waiter.session, resource.ns, resource.key);
    } else {
      // Only a two-phase waiter sits in a queue without a parked request.
      TS_ASSERT(waiter.two_phase);
      std::optional<std::size_t> record = find_record(waiter.session, resource.ns, resource.key);
      TS_ASSERT(record.has_value());
      TS_ASSERT(records_[*record].state == RecordState::kWaiting);
      records_[*record].state = RecordState::kGranted;
      records_[*record].token = token;
    }
  }
}

// ---- lookups ------------------------------------------------------------------------------------

std::optional<std::size_t> ReferenceModel::find_resource(Namespace ns,
                                                         const std::string& key) const {
  for (std::size_t r = 0; r < resources_.size(); ++r) {
    if (resources_[r].ns == ns && resources_[r].key == key) return r;
  }
  return std::nullopt;
}

ReferenceModel::Found ReferenceModel::find_or_create(Namespace ns, const std::string& key,
                                                     std::int64_t limit) {
  if (std::optional<std::size_t> index = find_resource(ns, key)) {
    if (resources_[*index].limit != limit) return Found{std::nullopt, Status::kErrorLimitMismatch};
    return Found{index, Status::kOk};
  }
  if (static_cast<std::int64_t>(resources_.size()) >= config_.resources_max) {
    return Found{std::nullopt, Status::kErrorMaxLocks};
  }
  if (fences_exhausted()) {
    // A resource that could never be granted is not created (docs/semantics.md).
    ++counters_.fence_exhausted;  // the grant it would have tried
    return Found{std::nullopt, Status::kError};
  }
  Resource resource;
  resource.ns = ns;
  resource.key = key;
  resource.limit = limit;
  resource.last_activity = now_;
  resources_.push_back(std::move(resource));
  return Found{resources_.size() - 1, Status::kOk};
}

std::optional<std::size_t> ReferenceModel::find_record(SessionId session, Namespace ns,
                                                       const std::string& key) const {
  for (std::size_t i = 0; i < records_.size(); ++i) {
    if (records_[i].session == session && records_[i].ns == ns && records_[i].key == key) return i;
  }
  return std::nullopt;
}

void ReferenceModel::erase_record(SessionId session, Namespace ns, const std::string& key) {
  std::erase_if(records_, [&](const Record& record) {
    return record.session == session && record.ns == ns && record.key == key;
  });
}

bool ReferenceModel::is_parked(SessionId session) const {
  for (const Resource& resource : resources_) {
    for (const Waiter& waiter : resource.waiters) {
      if (waiter.session == session && waiter.parked) return true;
    }
  }
  return false;
}

// ---- inputs -------------------------------------------------------------------------------------

Reply ReferenceModel::handle(Instant now, SessionId session, const Request& request,
                             std::vector<Delivery>& out) {
  TS_ASSERT(core::is_engine_command(request.command));
  TS_ASSERT(!is_parked(session));
  advance(now, out, config_.deadlines_per_call);
  Namespace ns = core::request_namespace(request);
  settle(ns, request.key, out);
  switch (core::command_operation(request.command)) {
    case core::Operation::kAcquire:
      return acquire(session, ns, request);
    case core::Operation::kEnqueue:
      return enqueue(session, ns, request);
    case core::Operation::kWait:
      return wait(session, ns, request, out);
    case core::Operation::kRelease:
      return release(ns, request, out);
    case core::Operation::kRenew:
      return renew(ns, request);
    case core::Operation::kOther:
      if (request.command == Command::kCheck) return check(ns, request);
      if (request.command == Command::kForceRelease) return force_release(ns, request, out);
      break;
  }
  TS_ASSERT(false);
}

Reply ReferenceModel::acquire(SessionId session, Namespace ns, const Request& request) {
  const std::int64_t limit = ns == Namespace::kSemaphore ? request.limit : 1;
  const bool shared = core::is_shared_command(request.command);
  Found found = find_or_create(ns, request.key, limit);
  if (!found.index) return Reply::of(found.error);
  Resource& resource = resources_[*found.index];
  resource.last_activity = now_;
  std::int64_t lease_s = lease_or_default(request.lease_s);
  if (resource.waiters.empty() && admits(resource, shared)) {
    if (fences_exhausted()) {
      ++counters_.fence_exhausted;
      return Reply::of(Status::kError);
    }
    Token token = mint();
    resource.holders.push_back(
        Holder{token, session, now_ + Duration::seconds(lease_s), next_serial(), shared});
    return Reply::granted(Status::kOk, token, lease_s);
  }
  if (config_.waiters_max > 0 &&
      static_cast<std::int64_t>(resource.waiters.size()) >= config_.waiters_max) {
    return Reply::of(Status::kErrorMaxWaiters);
  }
  if (request.timeout_s == 0) return Reply::of(Status::kTimeout);
  resource.waiters.push_back(Waiter{session, lease_s, false, true,
                                    now_ + Duration::seconds(request.timeout_s), next_serial(),
                                    shared, now_});
  return Reply::parked();
}

Reply ReferenceModel::enqueue(SessionId session, Namespace ns, const Request& request) {
  if (std::optional<std::size_t> record = find_record(session, ns, request.key)) {
    if (records_[*record].state != RecordState::kExpired) {
      return Reply::of(Status::kErrorAlreadyEnqueued);
    }
    // An expired record does not count; it is discarded once the request passes step 2.
  }
  const std::int64_t limit = ns == Namespace::kSemaphore ? request.limit : 1;
  const bool shared = core::is_shared_command(request.command);
  Found found = find_or_create(ns, request.key, limit);
  if (!found.index) return Reply::of(found.error);
  erase_record(session, ns, request.key);  // an expired one, if any
  Resource& resource = resources_[*found.index];
  resource.last_activity = now_;
  std::int64_t lease_s = lease_or_default(request.lease_s);
  if (resource.waiters.empty() && admits(resource, shared)) {
    if (fences_exhausted()) {
      ++counters_.fence_exhausted;
      return Reply::of(Status::kError);
    }
    Token token = mint();
    resource.holders.push_back(
        Holder{token, session, now_ + Duration::seconds(lease_s), next_serial(), shared});
    records_.push_back(
        Record{session, ns, request.key, RecordState::kGranted, token, lease_s, shared});
    return Reply::granted(Status::kAcquired, token, lease_s);
  }
  if (config_.waiters_max > 0 &&
      static_cast<std::int64_t>(resource.waiters.size()) >= config_.waiters_max) {
    return Reply::of(Status::kErrorMaxWaiters);
  }
  resource.waiters.push_back(Waiter{session, lease_s, true, false, Instant{}, 0, shared, now_});
  records_.push_back(
      Record{session, ns, request.key, RecordState::kWaiting, Token{}, lease_s, shared});
  return Reply::of(Status::kQueued);
}

Reply ReferenceModel::wait(SessionId session, Namespace ns, const Request& request,
                           std::vector<Delivery>& out) {
  std::optional<std::size_t> record_index = find_record(session, ns, request.key);
  if (!record_index) return Reply::of(Status::kErrorNotEnqueued);  // touches nothing
  // rw waits for what re asked, ww for what we asked; an expired record answers either.
  if (records_[*record_index].state != RecordState::kExpired &&
      records_[*record_index].shared != core::is_shared_command(request.command)) {
    return Reply::of(Status::kErrorNotEnqueued);  // touches nothing
  }
  // A w that finds its record, in any state, touches the resource.
  std::optional<std::size_t> resource_index = find_resource(ns, request.key);
  TS_ASSERT(resource_index.has_value());  // a record keeps its resource alive
  resources_[*resource_index].last_activity = now_;
  Record record = records_[*record_index];
  if (record.state == RecordState::kExpired) {
    records_.erase(records_.begin() + static_cast<std::ptrdiff_t>(*record_index));
    return Reply::of(Status::kErrorLeaseExpired);
  }
  Resource& resource = resources_[*resource_index];
  if (record.state == RecordState::kGranted) {
    records_.erase(records_.begin() + static_cast<std::ptrdiff_t>(*record_index));
    Holder* holder = nullptr;
    for (Holder& candidate : resource.holders) {
      if (candidate.token == record.token) holder = &candidate;
    }
    TS_ASSERT(holder != nullptr);  // release drops the record, expiry marks it expired
    holder->deadline = now_ + Duration::seconds(record.lease_s);
    holder->serial = next_serial();
    return Reply::granted(Status::kOk, record.token, record.lease_s);
  }
  // Waiting: its waiter is in the queue.
  std::optional<std::size_t> waiter_index;
  for (std::size_t w = 0; w < resource.waiters.size(); ++w) {
    if (resource.waiters[w].session == session && resource.waiters[w].two_phase) waiter_index = w;
  }
  TS_ASSERT(waiter_index.has_value());
  if (request.timeout_s == 0) {
    resource.waiters.erase(resource.waiters.begin() + static_cast<std::ptrdiff_t>(*waiter_index));
    records_.erase(records_.begin() + static_cast<std::ptrdiff_t>(*record_index));
    promote(*resource_index, out);
    return Reply::of(Status::kTimeout);
  }
  Waiter& waiter = resource.waiters[*waiter_index];
  waiter.parked = true;
  waiter.timeout_deadline = now_ + Duration::seconds(request.timeout_s);
  waiter.serial = next_serial();
  return Reply::parked();
}

Reply ReferenceModel::release(Namespace ns, const Request& request, std::vector<Delivery>& out) {
  std::optional<std::size_t> resource_index = find_resource(ns, request.key);
  if (!resource_index || !request.token) return Reply::of(Status::kError);
  Resource& resource = resources_[*resource_index];
  for (std::size_t h = 0; h < resource.holders.size(); ++h) {
    if (resource.holders[h].token != *request.token) continue;
    // rr releases only a read slot, wr only a write slot.
    if (resource.holders[h].shared != core::is_shared_command(request.command)) break;
    resource.holders.erase(resource.holders.begin() + static_cast<std::ptrdiff_t>(h));
    std::erase_if(records_, [&](const Record& record) {
      return record.state == RecordState::kGranted && record.token == *request.token;
    });
    resource.last_activity = now_;
    promote(*resource_index, out);
    return Reply::of(Status::kOk);
  }
  return Reply::of(unheld(resource, *request.token));
}

Reply ReferenceModel::renew(Namespace ns, const Request& request) {
  std::optional<std::size_t> resource_index = find_resource(ns, request.key);
  if (!resource_index || !request.token) return Reply::of(Status::kError);
  Resource& resource = resources_[*resource_index];
  for (Holder& holder : resource.holders) {
    if (holder.token != *request.token) continue;
    if (holder.shared != core::is_shared_command(request.command)) break;
    std::int64_t lease_s = lease_or_default(request.lease_s);
    holder.deadline = now_ + Duration::seconds(lease_s);
    holder.serial = next_serial();
    resource.last_activity = now_;
    return Reply::renewed(lease_s);
  }
  return Reply::of(unheld(resource, *request.token));
}

core::Status ReferenceModel::unheld(const Resource& resource, const Token& token) {
  for (std::uint64_t fence : resource.forced_fences) {
    if (fence == token.fence.value) return Status::kErrorLeaseExpired;
  }
  return Status::kError;
}

Reply ReferenceModel::check(Namespace ns, const Request& request) const {
  std::optional<std::size_t> resource_index = find_resource(ns, request.key);
  if (!resource_index || !request.token) return Reply::of(Status::kErrorLeaseExpired);
  for (const Holder& holder : resources_[*resource_index].holders) {
    if (holder.token != *request.token) continue;
    const std::int64_t left = (holder.deadline - now_).ns();
    const std::int64_t second = Duration::seconds(1).ns();
    return Reply::renewed((left + second - 1) / second);
  }
  return Reply::of(Status::kErrorLeaseExpired);
}

Reply ReferenceModel::force_release(Namespace ns, const Request& request,
                                    std::vector<Delivery>& out) {
  std::optional<std::size_t> resource_index = find_resource(ns, request.key);
  if (!resource_index) return Reply::delivered(0);
  Resource& resource = resources_[*resource_index];
  std::int64_t freed = 0;
  for (std::size_t h = 0; h < resource.holders.size();) {
    const Holder holder = resource.holders[h];
    if (request.fence != 0 && holder.token.fence.value != request.fence) {
      ++h;
      continue;
    }
    ++freed;
    ++counters_.forced_releases;
    if (std::find(closed_.begin(), closed_.end(), holder.session) == closed_.end()) {
      losses_.push_back(core::Loss{holder.session, core::LostSlot{ns, resource.key, holder.token,
                                                                  core::LossReason::kForced}});
    }
    for (Record& record : records_) {
      if (record.state == RecordState::kGranted && record.token == holder.token) {
        record.state = RecordState::kExpired;
      }
    }
    resource.forced_fences.push_back(holder.token.fence.value);
    resource.holders.erase(resource.holders.begin() + static_cast<std::ptrdiff_t>(h));
  }
  // clear_delay: a running lock-delay ends (also when nobody was freed), and none starts.
  const bool clear = request.clear_delay && resource.delay_until.has_value();
  if (freed == 0 && !clear) return Reply::delivered(0);
  while (resource.forced_fences.size() > 16) {
    resource.forced_fences.erase(resource.forced_fences.begin());
  }
  resource.last_activity = now_;
  if (clear) {
    resource.delay_until.reset();
  } else if (!request.clear_delay) {
    start_delay(resource);
  }
  promote(*resource_index, out);
  return Reply::force_released(freed, clear);
}

std::vector<core::Loss> ReferenceModel::take_losses() {
  std::vector<core::Loss> taken;
  taken.swap(losses_);
  return taken;
}

bool ReferenceModel::close_session(Instant now, SessionId session, bool auto_release,
                                   std::vector<Delivery>& out) {
  advance(now, out, config_.deadlines_per_call);
  closed_.push_back(session);
  const bool dropped_parked = is_parked(session);
  std::vector<std::size_t> touched;
  for (std::size_t r = 0; r < resources_.size(); ++r) {
    Resource& resource = resources_[r];
    std::size_t removed = std::erase_if(
        resource.waiters, [&](const Waiter& waiter) { return waiter.session == session; });
    if (auto_release) {
      const std::size_t released = std::erase_if(
          resource.holders, [&](const Holder& holder) { return holder.session == session; });
      if (released > 0) start_delay(resource);  // it left without releasing
      removed += released;
    }
    if (removed > 0) touched.push_back(r);
  }
  std::erase_if(records_, [&](const Record& record) { return record.session == session; });
  for (std::size_t r : touched) promote(r, out);
  return dropped_parked;
}

void ReferenceModel::tick(Instant now, std::vector<Delivery>& out) {
  advance(now, out, config_.deadlines_per_call);
}

namespace {

// Sorted by key; the spec leaves ties (the same key in both namespaces) open, so they are
// ordered by the remaining fields, as core/stats.cc does.
void sort_stats(core::StatsSnapshot& snapshot) {
  std::sort(snapshot.locks.begin(), snapshot.locks.end(), [](const auto& a, const auto& b) {
    return std::tie(a.key, a.owner, a.lease_expires_in_s, a.waiters) <
           std::tie(b.key, b.owner, b.lease_expires_in_s, b.waiters);
  });
  std::sort(snapshot.semaphores.begin(), snapshot.semaphores.end(),
            [](const auto& a, const auto& b) {
              return std::tie(a.key, a.limit, a.holders, a.waiters) <
                     std::tie(b.key, b.limit, b.holders, b.waiters);
            });
  auto by_key_then_idle = [](const core::IdleStats& a, const core::IdleStats& b) {
    return std::tie(a.key, a.idle_s) < std::tie(b.key, b.idle_s);
  };
  std::sort(snapshot.idle_locks.begin(), snapshot.idle_locks.end(), by_key_then_idle);
  std::sort(snapshot.idle_semaphores.begin(), snapshot.idle_semaphores.end(), by_key_then_idle);
  std::sort(snapshot.idle_rw_locks.begin(), snapshot.idle_rw_locks.end(), by_key_then_idle);
  std::sort(snapshot.rw_locks.begin(), snapshot.rw_locks.end(), [](const auto& a, const auto& b) {
    return std::tie(a.key, a.readers, a.writer, a.lease_expires_in_s, a.waiters) <
           std::tie(b.key, b.readers, b.writer, b.lease_expires_in_s, b.waiters);
  });
}

}  // namespace

core::StatsSnapshot ReferenceModel::stats(Instant now, std::vector<Delivery>& out) {
  advance(now, out, std::numeric_limits<std::size_t>::max());
  std::vector<const Resource*> sorted;
  for (const Resource& resource : resources_) sorted.push_back(&resource);
  std::sort(sorted.begin(), sorted.end(), [](const Resource* a, const Resource* b) {
    return std::tie(a->key, a->ns) < std::tie(b->key, b->ns);
  });
  core::StatsSnapshot snapshot;
  for (const Resource* resource : sorted) add_stats_entry(*resource, snapshot);
  sort_stats(snapshot);
  snapshot.totals = core::totals_of(snapshot);  // before the lists are cut
  auto cut = [&](auto& entries) {
    if (entries.size() > config_.stats_entries_max) {
      entries.resize(config_.stats_entries_max);
      snapshot.truncated = true;
    }
  };
  cut(snapshot.locks);
  cut(snapshot.semaphores);
  cut(snapshot.idle_locks);
  cut(snapshot.idle_semaphores);
  cut(snapshot.rw_locks);
  cut(snapshot.idle_rw_locks);
  snapshot.counters = core::StatsCounters{counters_.grants, counters_.lease_expiries,
                                          counters_.wait_timeouts, counters_.fence_exhausted};
  return snapshot;
}

// Adds the resource to the list of the snapshot its kind and state belong in.
void ReferenceModel::add_stats_entry(const Resource& resource,
                                     core::StatsSnapshot& snapshot) const {
  bool idle = resource.holders.empty() && resource.waiters.empty();
  auto waiters = static_cast<std::int64_t>(resource.waiters.size());
  if (resource.ns == Namespace::kReadWrite) {
    if (idle) {
      snapshot.idle_rw_locks.push_back(
          core::IdleStats{resource.key, (now_ - resource.last_activity).seconds_double()});
      return;
    }
    core::ReadWriteStats entry{resource.key, 0, SessionId{0}, 0.0, waiters};
    std::optional<Instant> soonest;
    for (const Holder& holder : resource.holders) {
      if (holder.shared) {
        ++entry.readers;
      } else {
        entry.writer = holder.session;
      }
      if (!soonest || holder.deadline < *soonest) soonest = holder.deadline;
    }
    if (soonest) entry.lease_expires_in_s = std::max(0.0, (*soonest - now_).seconds_double());
    snapshot.rw_locks.push_back(entry);
  } else if (idle) {
    core::IdleStats entry{resource.key, (now_ - resource.last_activity).seconds_double()};
    (resource.limit == 1 ? snapshot.idle_locks : snapshot.idle_semaphores).push_back(entry);
  } else if (resource.limit == 1) {
    core::LockStats entry{resource.key, SessionId{0}, 0.0, waiters};
    if (!resource.holders.empty()) {
      entry.owner = resource.holders.front().session;
      entry.lease_expires_in_s =
          std::max(0.0, (resource.holders.front().deadline - now_).seconds_double());
    }
    snapshot.locks.push_back(entry);
  } else {
    snapshot.semaphores.push_back(core::SemaphoreStats{
        resource.key, resource.limit, static_cast<std::int64_t>(resource.holders.size()), waiters});
  }
}

std::vector<core::Engine::ResourceView> ReferenceModel::inspect() const {
  std::vector<core::Engine::ResourceView> views;
  for (const Resource& resource : resources_) {
    core::Engine::ResourceView view;
    view.ns = resource.ns;
    view.key = resource.key;
    view.limit = resource.limit;
    for (const Holder& holder : resource.holders) {
      view.holders.push_back(core::Engine::HolderView{resource.ns,
                                                      resource.key,
                                                      holder.token,
                                                      holder.session,
                                                      holder.deadline,
                                                      {},
                                                      holder.shared});
    }
    for (const Waiter& waiter : resource.waiters) {
      view.waiters.push_back(waiter.session);
      view.waiters_shared.push_back(waiter.shared);
      view.waiters_since.push_back(waiter.since);
    }
    view.delayed_until = resource.delay_until;
    views.push_back(std::move(view));
  }
  std::sort(views.begin(), views.end(), [](const auto& a, const auto& b) {
    return std::tie(a.ns, a.key) < std::tie(b.ns, b.key);
  });
  return views;
}

}  // namespace turnstile::test
