// SignalChecker: the simulated server's signal hub (core/signal_hub.h) with a check of every
// signal against a naive model of the subscriptions, kept from the same calls. On each signal:
//  * nothing goes to a session that has no matching subscription (a closed connection has none);
//  * a plain listener whose pattern matches gets it, or is closed as a slow consumer;
//  * no session gets it more often than its plain subscriptions (once) and its matching groups
//    (once each) allow;
//  * each matching queue group delivers to one of its members, or closes one;
//  * the count the reply carries is the number of deliveries.
// A violation fails the run ("signals").
//
// Thread affinity: single-threaded, owned by one server life.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/signal_hub.h"
#include "sim/context.h"

namespace turnstile::sim {

class SignalChecker final : public core::SignalBroker {
 public:
  explicit SignalChecker(RunContext& run) : run_(run), hub_(core::SignalHubConfig{}) {}

  core::Status listen(core::SessionId session, std::string_view pattern,
                      std::string_view group) override;
  void unlisten(core::SessionId session, std::string_view pattern, std::string_view group) override;
  std::size_t publish(std::string_view channel, std::string_view payload,
                      core::SignalFanout& out) override;
  void written(core::SessionId session, std::size_t frames) override {
    hub_.written(session, frames);
  }
  void close(core::SessionId session) override;
  std::vector<core::SignalChannelStats> channels() override { return hub_.channels(); }
  core::SignalCounters counters() override { return hub_.counters(); }

 private:
  using Subscription = std::pair<std::string, std::string>;  // pattern, group

  void fail(const std::string& what);

  RunContext& run_;
  core::SignalHub hub_;
  std::map<std::uint64_t, std::set<Subscription>> model_;
};

}  // namespace turnstile::sim
