// Listeners and fan-out: see signal_hub.h.
#include "core/signal_hub.h"

#include <algorithm>
#include <tuple>

#include "core/signal_pattern.h"

namespace turnstile::core {

Status SignalHub::listen(SessionId session, std::string_view pattern, std::string_view group) {
  // A duplicate is no new subscription, so it is `ok` even at the cap.
  if (index_.has(pattern, group, session.value)) return Status::kOk;
  if (config_.max_subscriptions != 0 && index_.count(session.value) >= config_.max_subscriptions) {
    ++counters_.refused_per_session;
    return Status::kError;
  }
  if (config_.max_subscriptions_total != 0 && index_.size() >= config_.max_subscriptions_total) {
    ++counters_.refused_total;
    return Status::kErrorMaxSubscriptions;
  }
  (void)index_.add(pattern, group, session.value);
  return Status::kOk;
}

void SignalHub::unlisten(SessionId session, std::string_view pattern, std::string_view group) {
  (void)index_.remove(pattern, group, session.value);
  if (index_.count(session.value) == 0) queued_.erase(session.value);
}

std::size_t SignalHub::publish(std::string_view channel, std::string_view payload,
                               SignalFanout& out) {
  out.deliver.clear();
  out.close.clear();
  ++counters_.published;
  const std::size_t queue_max = config_.queue_max;
  const std::size_t transit_max = queue_max * kTransitFactor;
  const auto queued = [this](SignalIndex::Listener who) -> std::size_t {
    const auto it = queued_.find(who);
    return it == queued_.end() ? 0 : it->second;
  };
  index_.plan(
      channel,
      [&](SignalIndex::Listener who) {
        const std::size_t now = queued(who);
        return now >= transit_max ? 0 : transit_max - now;
      },
      plan_, [&](SignalIndex::Listener who) { return queued(who) < queue_max; });
  if (plan_.deliver.empty() && plan_.close.empty()) {
    out.frame.reset();
    return 0;
  }
  std::string frame;
  frame.reserve(channel.size() + payload.size() + 6);
  append_signal_frame(channel, payload, frame);
  out.frame = std::make_shared<const std::string>(std::move(frame));
  for (const SignalIndex::Listener who : plan_.deliver) {
    ++queued_[who];
    out.deliver.push_back(SessionId{who});
  }
  for (const SignalIndex::Listener who : plan_.close) {
    (void)index_.remove_all(who);
    queued_.erase(who);
    out.close.push_back(SessionId{who});
  }
  counters_.delivered += plan_.deliver.size();
  counters_.slow_consumers += plan_.close.size();
  return plan_.deliver.size();
}

void SignalHub::written(SessionId session, std::size_t frames) {
  const auto it = queued_.find(session.value);
  if (it == queued_.end()) return;  // it stopped listening, or its frames were counted out
  it->second -= std::min(frames, it->second);
}

void SignalHub::close(SessionId session) {
  (void)index_.remove_all(session.value);
  queued_.erase(session.value);
}

std::vector<SignalChannelStats> SignalHub::channels() {
  std::vector<SignalChannelStats> out;
  index_.for_each([&out](const SignalIndex::Subscribers& subscribers) {
    out.push_back({*subscribers.pattern, *subscribers.group,
                   static_cast<std::int64_t>(subscribers.members->size())});
  });
  std::sort(out.begin(), out.end(), [](const SignalChannelStats& a, const SignalChannelStats& b) {
    return std::tie(a.pattern, a.group) < std::tie(b.pattern, b.group);
  });
  return out;
}

SignalCounters SignalHub::counters() {
  SignalCounters counters = counters_;
  counters.subscriptions = static_cast<std::int64_t>(index_.size());
  return counters;
}

std::size_t SignalHub::queued(SessionId session) const {
  const auto it = queued_.find(session.value);
  return it == queued_.end() ? 0 : it->second;
}

}  // namespace turnstile::core
