#include "sim/signal_checker.h"

#include "core/signal_pattern.h"

namespace turnstile::sim {

core::Status SignalChecker::listen(core::SessionId session, std::string_view pattern,
                                   std::string_view group) {
  const core::Status status = hub_.listen(session, pattern, group);
  if (status == core::Status::kOk) {
    model_[session.value].emplace(std::string(pattern), std::string(group));
  } else {
    fail("a listen without a cap was refused");
  }
  return status;
}

void SignalChecker::unlisten(core::SessionId session, std::string_view pattern,
                             std::string_view group) {
  hub_.unlisten(session, pattern, group);
  auto it = model_.find(session.value);
  if (it == model_.end()) return;
  it->second.erase(Subscription(pattern, group));
  if (it->second.empty()) model_.erase(it);
}

void SignalChecker::close(core::SessionId session) {
  hub_.close(session);
  model_.erase(session.value);
}

std::size_t SignalChecker::publish(std::string_view channel, std::string_view payload,
                                   core::SignalFanout& out) {
  const std::size_t count = hub_.publish(channel, payload, out);
  if (count != out.deliver.size()) fail("the count differs from the deliveries");

  // What the model says may and must happen.
  std::map<std::uint64_t, std::size_t> allowed;  // deliveries each session may get
  std::set<std::uint64_t> plain;                 // sessions with a matching plain subscription
  std::map<Subscription, std::set<std::uint64_t>> groups;  // matching groups and their members
  for (const auto& [session, subscriptions] : model_) {
    for (const auto& [pattern, group] : subscriptions) {
      if (!core::signal_pattern_matches(pattern, channel)) continue;
      if (group.empty()) {
        if (plain.insert(session).second) ++allowed[session];
      } else {
        ++allowed[session];
        groups[{pattern, group}].insert(session);
      }
    }
  }
  std::map<std::uint64_t, std::size_t> got;
  for (const core::SessionId session : out.deliver) ++got[session.value];
  std::set<std::uint64_t> closed;
  for (const core::SessionId session : out.close) closed.insert(session.value);

  for (const auto& [session, times] : got) {
    if (times > allowed[session]) {
      fail("session " + std::to_string(session) + " got " + std::string(channel) + " " +
           std::to_string(times) + " times, more than its subscriptions allow");
    }
  }
  for (const std::uint64_t session : closed) {
    if (allowed.count(session) == 0) {
      fail("session " + std::to_string(session) + " was closed for a signal it does not get");
    }
  }
  for (const std::uint64_t session : plain) {
    if (got.count(session) == 0 && closed.count(session) == 0) {
      fail("plain listener " + std::to_string(session) + " missed " + std::string(channel));
    }
  }
  for (const auto& [subscription, members] : groups) {
    bool served = false;
    for (const std::uint64_t member : members) {
      served = served || got.count(member) != 0 || closed.count(member) != 0;
    }
    if (!served) {
      fail("group " + subscription.second + " of " + subscription.first + " missed " +
           std::string(channel));
    }
  }
  // The hub forgets a slow consumer at once; so does the model.
  for (const std::uint64_t session : closed) model_.erase(session);
  return count;
}

void SignalChecker::fail(const std::string& what) { run_.fail("signals", what); }

}  // namespace turnstile::sim
