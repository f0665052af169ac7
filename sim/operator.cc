#include "sim/operator.h"

#include <optional>
#include <string>

#include "core/http_api.h"
#include "core/http_request_encode.h"

namespace turnstile::sim {

Operator::Operator(RunContext& run, Network& network, History& history, const Workload& workload)
    : run_(run),
      network_(network),
      history_(history),
      workload_(workload),
      prng_(run.options.seed, kLosses + 1) {}

void Operator::start() {
  if (run_.settings.force_interval_ms > 0) {
    run_.schedule(prng_.between(1, run_.settings.force_interval_ms) * kMs, event::OperatorAct{});
  }
}

void Operator::on_act() {
  if (stopped_) return;
  run_.schedule(run_.now + prng_.between(1, 2 * run_.settings.force_interval_ms) * kMs,
                event::OperatorAct{});
  Sent sent;
  HttpCall& call = sent.call;
  call.op = HttpOp::kAdminRelease;
  call.shard = static_cast<std::size_t>(prng_.below(run_.settings.shards));
  ResourceKey key;
  std::uint64_t fence = 0;
  const std::optional<std::pair<ResourceKey, std::uint64_t>> held =
      prng_.chance(800) ? workload_.pick_held(prng_) : std::nullopt;
  if (held) {
    key = held->first;
    if (prng_.chance(500)) fence = held->second;
  } else {
    static const core::Namespace kSpaces[] = {core::Namespace::kLock, core::Namespace::kSemaphore,
                                              core::Namespace::kReadWrite};
    key.first = kSpaces[prng_.below(3)];
    key.second = (prng_.chance(700) ? "h" : "c") + std::to_string(prng_.below(3));
    if (prng_.chance(200)) fence = prng_.between(1, 1'000'000);  // most likely held by nobody
  }
  static const char* kRoutes[] = {"/v1/admin/locks/", "/v1/admin/semaphores/",
                                  "/v1/admin/rwlocks/"};
  core::HttpApiRequest& http = call.http;
  http.method = "DELETE";
  http.path = kRoutes[static_cast<int>(key.first == core::Namespace::kLock        ? 0
                                       : key.first == core::Namespace::kSemaphore ? 1
                                                                                  : 2)] +
              core::percent_encode(key.second);
  http.peer_address = "10.9.9.9";  // the operator's own machine
  http.peer_port = 9999;
  std::string& query = http.query;
  if (fence != 0) query = "fence=" + std::to_string(fence);
  sent.by_fence = fence != 0;
  // Three in ten also end the key's lock-delay; a few ask in a word the route does not take.
  if (prng_.chance(300)) {
    sent.clear_delay = true;
    query += std::string(query.empty() ? "" : "&") + "clear_delay=true";
  } else if (prng_.chance(20)) {
    query += std::string(query.empty() ? "" : "&") + "clear_delay=1";
    sent.expected_code = 400;
  }
  if (prng_.chance(30)) {
    query = prng_.chance(500) ? "fence=0" : "fence=x1";
    sent.expected_code = 400;
  }
  http.authorization = std::string("Bearer ") + kAdminToken;
  if (prng_.chance(50)) {
    http.authorization =
        prng_.chance(500) ? std::optional<std::string>("Bearer wrong") : std::nullopt;
    sent.expected_code = 401;
  }
  sent.at = run_.now;
  sent.force = history_.force_release(key.first, key.second, fence, run_.now);
  run_.digest.add(key.second);
  run_.digest.add(query);
  const std::uint64_t exchange = network_.http_send(call);
  outstanding_.emplace(exchange, std::move(sent));
}

void Operator::on_result(std::uint64_t exchange) {
  std::optional<HttpResult> result = network_.http_take_result(exchange);
  if (!result) return;
  auto it = outstanding_.find(exchange);
  const Sent sent = std::move(it->second);
  outstanding_.erase(it);
  if (result->reset) return;  // the process died with it, or was not up: maybe done, maybe not
  const core::HttpResponse& outcome = result->outcome;
  history_.force_answered(sent.force, run_.now, outcome.code != 200);
  const std::string what = "DELETE " + sent.call.http.path + "?" + sent.call.http.query;
  if (outcome.code != sent.expected_code) {
    run_.fail("force-release", what + " answered " + std::to_string(outcome.code) + " " +
                                   outcome.body + ", not " + std::to_string(sent.expected_code));
    return;
  }
  // A wrong token is answered no sooner than the delay, so that a stranger cannot try tokens
  // quickly (the server's clock may lag, never run ahead).
  if (outcome.code == 401 && run_.now - sent.at < core::kAuthFailureDelay.ns()) {
    run_.fail("auth-delay", what + " answered 401 after " +
                                std::to_string((run_.now - sent.at) / kMs) + " ms, not " +
                                std::to_string(core::kAuthFailureDelay.ns() / kMs));
    return;
  }
  if (outcome.code != 200) {
    ++run_.result.coverage[outcome.code == 401 ? "force-release-401" : "force-release-400"];
    return;
  }
  // {"released":N}, and with clear_delay {"released":N,"delay_cleared":true|false}
  const std::string prefix = "{\"released\":";
  std::uint64_t freed = 0;
  bool ok = outcome.body.rfind(prefix, 0) == 0;
  std::size_t at = prefix.size();
  ok = ok && at < outcome.body.size() && outcome.body[at] >= '0' && outcome.body[at] <= '9';
  while (ok && at < outcome.body.size() && outcome.body[at] >= '0' && outcome.body[at] <= '9') {
    freed = freed * 10 + static_cast<std::uint64_t>(outcome.body[at++] - '0');
  }
  const std::string rest = ok ? outcome.body.substr(at) : std::string();
  if (sent.clear_delay) {
    const bool cleared = rest == ",\"delay_cleared\":true}\n";
    ok = ok && (cleared || rest == ",\"delay_cleared\":false}\n");
    if (ok) {
      ++run_.result.coverage[cleared ? "force-release-delay-cleared" : "force-release-no-delay"];
    }
  } else {
    ok = ok && rest == "}\n";
  }
  if (!ok || (sent.by_fence && freed > 1)) {
    run_.fail("force-release", what + " answered " + outcome.body);
    return;
  }
  ++run_.result.coverage["force-release"];
  run_.result.coverage["force-release-freed"] += freed;
}

std::optional<std::string> Operator::first_waiting() const {
  if (outstanding_.empty()) return std::nullopt;
  return "the operator's DELETE " + outstanding_.begin()->second.call.http.path +
         " is still unanswered";
}

}  // namespace turnstile::sim
