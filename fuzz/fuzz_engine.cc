// Differential fuzzing of core::Engine against test::ReferenceModel (tests/support), the same
// comparison as tests/core/engine_model_test.cc with libFuzzer choosing the steps instead of
// rapidcheck.
//
// Input: the first bytes choose the configuration (default lease, GC idle time, resource and
// waiter caps, fence floor — sometimes just below the largest fence — stats caps, start instant,
// salt seed); then each step is a few bytes: what to do (a request from one of 4 session slots
// on one of 3 keys, a tick, a closed session, stats), how far the clock moves (nanoseconds to
// days, sometimes backward), and the request's fields. r/n present a token paired between the two
// implementations, a forged or random one, or a malformed one.
//
// After every step: identical replies, deliveries (compared per session), close_session results,
// counters, now, last fence, resources with their limits, queues and holders (tokens paired up
// the first time both hand one to the same session in the same step), stats; the engine wakes no
// later than the model; and the engine's own invariants (holders <= limit, waiters only when
// full, live leases, fences unique and strictly increasing, FIFO). Any difference aborts.
// TURNSTILE_FUZZ_TRACE=1 prints every step to stderr, to read a crash input as a scenario.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/engine.h"
#include "core/protocol.h"
#include "core/random.h"
#include "core/stats.h"
#include "core/time.h"
#include "core/types.h"
#include "fuzz/fuzz_input.h"
#include "tests/support/reference_model.h"

namespace turnstile::fuzz {
namespace {

using core::Command;
using core::Delivery;
using core::Duration;
using core::Engine;
using core::EngineConfig;
using core::Fence;
using core::Instant;
using core::Namespace;
using core::Reply;
using core::Request;
using core::SessionId;
using core::Status;
using core::Token;

constexpr const char* kHarness = "fuzz_engine";
constexpr std::int64_t kSecondNs = 1'000'000'000;
constexpr std::uint64_t kMaxFence = std::numeric_limits<std::uint64_t>::max();
constexpr std::size_t kSlots = 4;
constexpr std::size_t kKeys = 3;
constexpr std::size_t kStepsMax = 400;
const std::array<std::string, kKeys> kKeyNames = {"a", "b", "c"};

bool tracing() {
  static const bool enabled = [] {
    const char* wanted = std::getenv("TURNSTILE_FUZZ_TRACE");
    return wanted != nullptr && std::string(wanted) == "1";
  }();
  return enabled;
}

// The message is built only when the check fails: this runs several hundred times per step.
template <typename Message>
void check(bool condition, const Message& what) {
  if (!condition) fail(kHarness, what());
}

bool takes_timeout(Command c) {
  return c == Command::kLock || c == Command::kSemLock || c == Command::kWait ||
         c == Command::kSemWait;
}
bool takes_lease(Command c) {
  return c == Command::kLock || c == Command::kSemLock || c == Command::kRenew ||
         c == Command::kSemRenew || c == Command::kEnqueue || c == Command::kSemEnqueue;
}
bool takes_limit(Command c) { return c == Command::kSemLock || c == Command::kSemEnqueue; }
bool takes_token(Command c) {
  return c == Command::kRelease || c == Command::kSemRelease || c == Command::kRenew ||
         c == Command::kSemRenew;
}

std::string describe(const Reply& reply) {
  std::string text(core::status_name(reply.status));
  if (reply.token) text += " f" + std::to_string(reply.token->fence.value);
  if (reply.seconds >= 0) text += " " + std::to_string(reply.seconds);
  return text;
}

struct Choice {
  EngineConfig config;
  std::int64_t start_ns = 0;
  bool near_max_jumps = false;
  std::int64_t last_key_limit = kKeys;
  std::uint64_t salt_seed = 1;
};

Choice decode_choice(FuzzInput& input) {
  Choice choice;
  choice.config.default_lease_s = 1 + static_cast<std::int64_t>(input.below(6));
  static const std::array<std::int64_t, 6> kIdle = {
      0, 1, kSecondNs / 2, kSecondNs, 2 * kSecondNs, 3 * kSecondNs};
  choice.config.gc_max_idle = Duration::nanoseconds(kIdle[input.below(kIdle.size())]);
  const std::uint8_t caps = input.byte();
  choice.config.resources_max = (caps & 0x80) != 0 ? 1'048'576 : 1 + (caps & 7);
  choice.config.waiters_max = (caps >> 3) & 3;
  choice.config.stats_entries_max = (caps & 0x20) != 0 ? 1 + ((caps >> 3) & 3) : 10'000;
  choice.near_max_jumps = (caps & 0x40) != 0 && (caps & 7) == 0;
  const std::uint8_t fence = input.byte();
  choice.config.fence_floor =
      Fence{fence >= 0xf0 ? kMaxFence - (fence & 7) : static_cast<std::uint64_t>(fence) * 4099};
  choice.last_key_limit = input.flag() ? 17 : static_cast<std::int64_t>(kKeys);
  choice.start_ns =
      static_cast<std::int64_t>(input.u64() % 2'000'000'000'001ULL) - 1'000'000'000'000;
  choice.salt_seed = input.byte();
  return choice;
}

enum class StepKind : std::uint8_t { kRequest, kClose, kTick, kStats };
enum class TokenPick : std::uint8_t { kSameKey, kAny, kForgedSalt, kRandom, kMalformed };

struct Step {
  StepKind kind = StepKind::kTick;
  std::int64_t advance_ns = 0;
  std::size_t slot = 0;
  Command command = Command::kLock;
  std::size_t key = 0;
  std::int64_t timeout_s = 0;
  std::int64_t lease_s = 0;
  std::int64_t limit = 0;  // 0: the key's usual limit
  TokenPick token_pick = TokenPick::kSameKey;
  std::size_t token_index = 0;
  bool auto_release = true;
};

std::int64_t decode_advance(FuzzInput& input) {
  const std::uint8_t b = input.byte();
  const auto operand = static_cast<std::int64_t>(input.byte());
  switch (b % 16) {
    case 0:
    case 1:
    case 2:
    case 3:
    case 4:
      return 0;
    case 5:
    case 6:
      return 1 + operand * 4;
    case 7:
    case 8:
      return kSecondNs;
    case 9:
      return kSecondNs - 1;
    case 10:
      return kSecondNs + 1;
    case 11:
      return kSecondNs / 2;
    case 12:
      return (2 + operand % 5) * kSecondNs + (b >= 128 ? operand * 7'777'777 : 0);
    case 13:
      return 1'000'000'000'000 * (1 + operand * 3'900);
    case 14:
      return -operand * (kSecondNs / 85);
    default:
      return b >= 128 ? -1 : (b >= 64 ? -kSecondNs : -1'000'000'000'000'000);
  }
}

Step decode_step(FuzzInput& input) {
  Step step;
  const std::uint8_t what = input.byte();
  const std::uint8_t kind = what % 32;
  step.kind =
      kind < 26 ? StepKind::kRequest
                : (kind < 28 ? StepKind::kTick : (kind < 31 ? StepKind::kClose : StepKind::kStats));
  step.slot = (what >> 5) % kSlots;
  step.auto_release = (what & 0x80) == 0;
  step.advance_ns = decode_advance(input);
  if (step.kind != StepKind::kRequest) return step;
  static const std::array<Command, 10> kCommands = {
      Command::kLock,  Command::kSemLock,  Command::kRelease, Command::kSemRelease,
      Command::kRenew, Command::kSemRenew, Command::kEnqueue, Command::kSemEnqueue,
      Command::kWait,  Command::kSemWait};
  const std::uint8_t fields = input.byte();
  step.command = kCommands[fields % kCommands.size()];
  step.key = (fields / 10) % kKeys;
  const std::uint8_t numbers = input.byte();
  step.timeout_s = (numbers & 0x0f) < 14 ? (numbers & 0x0f) % 5 : 10 + (numbers >> 4);
  const std::uint8_t lease = input.byte();
  step.lease_s = lease % 10 < 3 ? 0 : (lease % 10 < 9 ? 1 + lease % 6 : 30 + lease % 32);
  step.limit = (numbers >> 4) < 12 ? 0 : 1 + (numbers >> 4) % 3;
  const std::uint8_t token = input.byte();
  static const std::array<TokenPick, 18> kPicks = {
      TokenPick::kSameKey, TokenPick::kSameKey,  TokenPick::kSameKey,    TokenPick::kSameKey,
      TokenPick::kSameKey, TokenPick::kSameKey,  TokenPick::kSameKey,    TokenPick::kSameKey,
      TokenPick::kSameKey, TokenPick::kSameKey,  TokenPick::kAny,        TokenPick::kAny,
      TokenPick::kAny,     TokenPick::kAny,      TokenPick::kForgedSalt, TokenPick::kForgedSalt,
      TokenPick::kRandom,  TokenPick::kMalformed};
  step.token_pick = kPicks[token % kPicks.size()];
  step.token_index = (token / 18) % 4;
  return step;
}

using TokenKey = std::pair<std::uint64_t, std::uint64_t>;
TokenKey key_of(const Token& token) { return {token.fence.value, token.salt}; }

struct ResourceId {
  Namespace ns = Namespace::kLock;
  std::string key;
  auto operator<=>(const ResourceId&) const = default;
};

class Differential {
 public:
  explicit Differential(const Choice& choice)
      : choice_(choice),
        engine_salts_(choice.salt_seed),
        engine_(choice.config, engine_salts_),
        model_(choice.config, choice.salt_seed ^ 0x5bd1e9955bd1e995ULL),
        clock_(Instant::from_ns(choice.start_ns)),
        last_fence_(choice.config.fence_floor) {
    for (std::size_t slot = 0; slot < kSlots; ++slot) sessions_[slot] = SessionId{slot + 1};
  }

  void apply(std::size_t index, const Step& step) {
    Duration delta = Duration::nanoseconds(step.advance_ns);
    if (choice_.near_max_jumps && step.advance_ns >= 1'000'000'000'000) {
      delta = delta + delta;
      for (int i = 0; i < 11; ++i) delta = delta + delta;  // x4096, saturating
    }
    clock_ = clock_ + delta;
    const Instant now = clock_;
    where_ = "step " + std::to_string(index);

    std::vector<Delivery> engine_out;
    std::vector<Delivery> model_out;
    std::optional<SessionId> requester;
    std::optional<ResourceId> requested;
    std::optional<SessionId> closing;
    bool engine_dropped = false;
    bool model_dropped = false;
    Reply engine_reply = Reply::of(Status::kOk);
    // The state before this step is the state after the last one (inspect() is the costliest
    // call of a step, so it runs once per step).
    const std::vector<Engine::ResourceView> before = std::move(view_);
    const std::map<SessionId, ResourceId> parked_before = parked_;

    StepKind kind = step.kind;
    std::optional<std::size_t> slot = free_slot(step.slot);
    if (kind == StepKind::kRequest && !slot) kind = StepKind::kTick;

    switch (kind) {
      case StepKind::kRequest: {
        const SessionId session = sessions_[*slot];
        requester = session;
        Request request;
        request.command = step.command;
        request.key = kKeyNames[step.key];
        if (takes_timeout(step.command)) request.timeout_s = step.timeout_s;
        if (takes_lease(step.command)) request.lease_s = step.lease_s;
        request.limit = 1;
        if (takes_limit(step.command)) {
          request.limit = step.limit > 0 ? step.limit : usual_limit(step.key);
        }
        ResourceId resource{core::command_namespace(step.command), request.key};
        requested = resource;
        Request model_request = request;
        if (takes_token(step.command)) {
          auto [engine_token, model_token] = pick_token(step, resource);
          request.token = engine_token;
          model_request.token = model_token;
        }
        engine_reply = engine_.handle(now, session, request, engine_out);
        const Reply model_reply = model_.handle(now, session, model_request, model_out);
        if (tracing()) {
          std::fprintf(
              stderr, "#%zu t=%lld s%llu %s %s timeout=%lld lease=%lld limit=%lld -> %s\n", index,
              static_cast<long long>(now.ns()), static_cast<unsigned long long>(session.value),
              std::string(core::command_name(step.command)).c_str(), request.key.c_str(),
              static_cast<long long>(request.timeout_s), static_cast<long long>(request.lease_s),
              static_cast<long long>(request.limit), describe(engine_reply).c_str());
        }
        compare_replies(engine_reply, model_reply, where_ + " reply");
        if (engine_reply.token) reveal(*engine_reply.token, resource);
        if (engine_reply.status == Status::kParked) parked_[session] = resource;
        break;
      }
      case StepKind::kClose: {
        const SessionId session = sessions_[step.slot];
        if (tracing()) {
          std::fprintf(stderr, "#%zu t=%lld close s%llu auto_release=%d\n", index,
                       static_cast<long long>(now.ns()),
                       static_cast<unsigned long long>(session.value), step.auto_release);
        }
        engine_dropped = engine_.close_session(now, session, step.auto_release, engine_out);
        model_dropped = model_.close_session(now, session, step.auto_release, model_out);
        closing = session;
        sessions_[step.slot] = SessionId{next_session_++};
        break;
      }
      case StepKind::kTick:
        if (tracing()) {
          std::fprintf(stderr, "#%zu t=%lld tick\n", index, static_cast<long long>(now.ns()));
        }
        engine_.tick(now, engine_out);
        model_.tick(now, model_out);
        break;
      case StepKind::kStats: {
        if (tracing()) {
          std::fprintf(stderr, "#%zu t=%lld stats\n", index, static_cast<long long>(now.ns()));
        }
        const core::StatsSnapshot engine_stats = engine_.stats(now, engine_out);
        const core::StatsSnapshot model_stats = model_.stats(now, model_out);
        check(engine_stats == model_stats, [&] { return where_ + ": stats differ"; });
        break;
      }
    }

    // Deliveries: the same replies to the same sessions, in any order.
    const std::map<SessionId, Reply> engine_deliveries = by_session(engine_out, "engine");
    const std::map<SessionId, Reply> model_deliveries = by_session(model_out, "model");
    check(engine_deliveries.size() == model_deliveries.size(),
          [&] { return where_ + ": deliveries differ"; });
    for (const auto& [session, reply] : engine_deliveries) {
      if (tracing()) {
        std::fprintf(stderr, "    -> s%llu %s\n", static_cast<unsigned long long>(session.value),
                     describe(reply).c_str());
      }
      auto model_it = model_deliveries.find(session);
      check(model_it != model_deliveries.end(), [&] { return where_ + ": deliveries differ"; });
      compare_replies(reply, model_it->second, where_ + " delivery");
      check(reply.status == Status::kOk || reply.status == Status::kTimeout ||
                reply.status == Status::kError,
            [&, &delivered = reply] {
              return where_ + ": unexpected delivery status " + describe(delivered);
            });
      auto parked_it = parked_.find(session);
      check(parked_it != parked_.end(),
            [&] { return where_ + ": delivery to a session with nothing parked"; });
      check(!requester || *requester != session || engine_reply.status == Status::kParked,
            [&] { return where_ + ": delivery to the requesting session"; });
      if (reply.token) reveal(*reply.token, parked_it->second);
      parked_.erase(parked_it);
    }
    if (closing) {
      const bool still_parked = parked_.contains(*closing);
      check(engine_dropped == model_dropped && engine_dropped == still_parked,
            [&] { return where_ + ": close_session's dropped result differs"; });
      parked_.erase(*closing);
    }

    view_ = engine_.inspect();
    std::sort(view_.begin(), view_.end(), [](const auto& a, const auto& b) {
      return std::tie(a.ns, a.key) < std::tie(b.ns, b.key);
    });
    compare_state(view_);
    check_invariants(view_, before, parked_before, engine_deliveries, requested, step.command,
                     engine_reply);
  }

 private:
  std::int64_t usual_limit(std::size_t key) const {
    return key == kKeys - 1 ? choice_.last_key_limit : static_cast<std::int64_t>(key) + 1;
  }

  std::optional<std::size_t> free_slot(std::size_t preferred) const {
    for (std::size_t i = 0; i < kSlots; ++i) {
      const std::size_t slot = (preferred + i) % kSlots;
      if (!parked_.contains(sessions_[slot])) return slot;
    }
    return std::nullopt;
  }

  // The token an r/n presents: {to the engine, to the model}.
  std::pair<std::optional<Token>, std::optional<Token>> pick_token(const Step& step,
                                                                   const ResourceId& resource) {
    TokenPick pick = step.token_pick;
    std::vector<Token> candidates;
    if (pick == TokenPick::kSameKey) {
      for (const auto& [token, where] : revealed_) {
        if (where == resource) candidates.push_back(token);
      }
      if (candidates.empty()) pick = TokenPick::kAny;
    }
    if (pick == TokenPick::kAny || pick == TokenPick::kForgedSalt) {
      for (const auto& revealed : revealed_) candidates.push_back(revealed.first);
      if (candidates.empty()) pick = TokenPick::kRandom;
    }
    const std::size_t index = step.token_index;
    switch (pick) {
      case TokenPick::kSameKey:
      case TokenPick::kAny: {
        const Token engine_token = candidates[candidates.size() - 1 - index % candidates.size()];
        return {engine_token, engine_to_model_.at(key_of(engine_token))};
      }
      case TokenPick::kForgedSalt: {
        Token engine_token = candidates[candidates.size() - 1 - index % candidates.size()];
        Token model_token = engine_to_model_.at(key_of(engine_token));
        engine_token.salt ^= 0x0123456789abcdefULL;
        model_token.salt ^= 0x0123456789abcdefULL;
        return {engine_token, model_token};
      }
      case TokenPick::kRandom: {
        const Token token{Fence{last_fence_.value - index}, 0xfeedfacecafebeefULL + index};
        return {token, token};
      }
      case TokenPick::kMalformed:
        break;
    }
    return {std::nullopt, std::nullopt};
  }

  void pair_tokens(const Token& engine_token, const Token& model_token, const std::string& where) {
    auto engine_it = engine_to_model_.find(key_of(engine_token));
    auto model_it = model_to_engine_.find(key_of(model_token));
    if (engine_it != engine_to_model_.end() || model_it != model_to_engine_.end()) {
      check(engine_it != engine_to_model_.end() && model_it != model_to_engine_.end() &&
                engine_it->second == model_token,
            [&] { return where + ": token pairing broken"; });
      return;
    }
    check(engine_token.fence == model_token.fence, [&] { return where + ": fence differs"; });
    engine_to_model_[key_of(engine_token)] = model_token;
    model_to_engine_[key_of(model_token)] = engine_token;
  }

  void compare_replies(const Reply& engine_reply, const Reply& model_reply,
                       const std::string& where) {
    const bool same = engine_reply.status == model_reply.status &&
                      engine_reply.seconds == model_reply.seconds &&
                      engine_reply.payload == model_reply.payload &&
                      engine_reply.token.has_value() == model_reply.token.has_value();
    check(same, [&] {
      return where + ": engine replied '" + describe(engine_reply) + "', model '" +
             describe(model_reply) + "'";
    });
    if (engine_reply.token) pair_tokens(*engine_reply.token, *model_reply.token, where);
  }

  void reveal(const Token& engine_token, const ResourceId& resource) {
    const bool known = std::any_of(revealed_.begin(), revealed_.end(),
                                   [&](const auto& entry) { return entry.first == engine_token; });
    if (!known) revealed_.emplace_back(engine_token, resource);
  }

  std::map<SessionId, Reply> by_session(const std::vector<Delivery>& deliveries, const char* who) {
    std::map<SessionId, Reply> result;
    for (const Delivery& delivery : deliveries) {
      check(result.emplace(delivery.session, delivery.reply).second,
            [&] { return where_ + ": " + who + " delivered twice to one session in one step"; });
    }
    return result;
  }

  using HolderRow = std::tuple<std::uint64_t, std::int64_t, std::uint64_t, std::optional<TokenKey>>;

  void compare_state(const std::vector<Engine::ResourceView>& engine_view) {
    check(engine_.now() == model_.now(), [&] { return where_ + ": now differs"; });
    const core::EngineCounters& e = engine_.counters();
    const core::EngineCounters& m = model_.counters();
    check(e.clock_regressions == m.clock_regressions,
          [&] { return where_ + ": clock_regressions differs"; });
    check(e.grants == m.grants, [&] { return where_ + ": grants differs"; });
    check(e.lease_expiries == m.lease_expiries,
          [&] { return where_ + ": lease_expiries differs"; });
    check(e.wait_timeouts == m.wait_timeouts, [&] { return where_ + ": wait_timeouts differs"; });
    check(e.resources_collected == m.resources_collected,
          [&] { return where_ + ": resources_collected differs"; });
    check(e.fence_exhausted == m.fence_exhausted,
          [&] { return where_ + ": fence_exhausted differs"; });
    check(engine_.last_fence() == model_.last_fence(),
          [&] { return where_ + ": last_fence differs"; });
    check(engine_.resources_count() == model_.resources_count(),
          [&] { return where_ + ": resources_count differs"; });

    // The engine may wake earlier than needed, never later.
    const std::optional<Instant> engine_wake = engine_.next_wake();
    const std::optional<Instant> model_wake = model_.next_wake();
    check(!model_wake || (engine_wake && *engine_wake <= *model_wake),
          [&] { return where_ + ": engine wakes later than the model"; });

    const std::vector<Engine::ResourceView> model_view = model_.inspect();
    check(engine_view.size() == model_view.size(), [&] { return where_ + ": resources differ"; });
    for (std::size_t r = 0; r < engine_view.size(); ++r) {
      const Engine::ResourceView& ev = engine_view[r];
      const Engine::ResourceView& mv = model_view[r];
      const std::string name = (ev.ns == Namespace::kLock ? "lock:" : "sem:") + ev.key;
      check(ev.ns == mv.ns && ev.key == mv.key, [&] { return where_ + ": resources differ"; });
      check(ev.limit == mv.limit, [&] { return where_ + ": " + name + " limit differs"; });
      check(ev.waiters == mv.waiters, [&] { return where_ + ": " + name + " queue differs"; });
      std::vector<HolderRow> engine_rows;
      for (const auto& holder : ev.holders) {
        check(holder.ns == ev.ns && holder.key == ev.key,
              [&] { return where_ + ": engine holder listed under the wrong resource"; });
        std::optional<TokenKey> paired;
        auto it = engine_to_model_.find(key_of(holder.token));
        if (it != engine_to_model_.end()) paired = key_of(it->second);
        engine_rows.emplace_back(holder.session.value, holder.deadline.ns(),
                                 holder.token.fence.value, paired);
      }
      std::vector<HolderRow> model_rows;
      for (const auto& holder : mv.holders) {
        std::optional<TokenKey> paired;
        if (model_to_engine_.contains(key_of(holder.token))) paired = key_of(holder.token);
        model_rows.emplace_back(holder.session.value, holder.deadline.ns(),
                                holder.token.fence.value, paired);
      }
      std::sort(engine_rows.begin(), engine_rows.end());
      std::sort(model_rows.begin(), model_rows.end());
      check(engine_rows == model_rows, [&] { return where_ + ": " + name + " holders differ"; });
    }
    for (SessionId session : sessions_) {
      check(model_.is_parked(session) == parked_.contains(session),
            [&] { return where_ + ": parked bookkeeping disagrees with the model"; });
    }
  }

  // The engine's own invariants (engine.h), independent of the model.
  void check_invariants(const std::vector<Engine::ResourceView>& after,
                        const std::vector<Engine::ResourceView>& before,
                        const std::map<SessionId, ResourceId>& parked_before,
                        const std::map<SessionId, Reply>& deliveries,
                        const std::optional<ResourceId>& requested, Command requested_command,
                        const Reply& engine_reply) {
    const Fence last = engine_.last_fence();
    const bool exhausted = last.value == kMaxFence;
    std::set<std::uint64_t> fences;
    std::uint64_t newest_seen = max_fence_seen_;
    auto fresh = [&](const Token& token, const char* what) {
      if (seen_tokens_.contains(key_of(token))) return;
      check(token.fence.value > max_fence_seen_,
            [&] { return where_ + ": " + what + " is not above every earlier fence"; });
      newest_seen = std::max(newest_seen, token.fence.value);
    };
    for (const auto& view : after) {
      const std::string name = (view.ns == Namespace::kLock ? "lock:" : "sem:") + view.key;
      check(static_cast<std::int64_t>(view.holders.size()) <= view.limit,
            [&] { return where_ + ": " + name + " has more holders than its limit"; });
      check(view.waiters.empty() || static_cast<std::int64_t>(view.holders.size()) == view.limit ||
                exhausted,
            [&] { return where_ + ": " + name + " has waiters while not full"; });
      for (const auto& holder : view.holders) {
        check(holder.deadline > engine_.now() || holder.deadline == Instant::max(),
              [&] { return where_ + ": " + name + " holder outlived its lease"; });
        const std::uint64_t fence = holder.token.fence.value;
        check(fence <= last.value, [&] { return where_ + ": holder fence above last_fence"; });
        check(fence > choice_.config.fence_floor.value,
              [&] { return where_ + ": holder fence not above floor"; });
        check(fences.insert(fence).second, [&] { return where_ + ": two holders share a fence"; });
        fresh(holder.token, "a new holder's token");
      }
    }
    for (const auto& [session, reply] : deliveries) {
      if (reply.token) fresh(*reply.token, "a delivered token");
    }
    if (engine_reply.token) fresh(*engine_reply.token, "a granted token");
    for (const auto& view : after) {
      for (const auto& holder : view.holders) seen_tokens_.insert(key_of(holder.token));
    }
    for (const auto& [session, reply] : deliveries) {
      if (reply.token) seen_tokens_.insert(key_of(*reply.token));
    }
    if (engine_reply.token) seen_tokens_.insert(key_of(*engine_reply.token));
    max_fence_seen_ = newest_seen;

    check(last >= last_fence_, [&] { return where_ + ": last_fence went backward"; });
    check(last.value - last_fence_.value == engine_.counters().grants - grants_, [&] {
      return where_ + ": last_fence moved by a different amount than the grants counter";
    });
    last_fence_ = last;
    grants_ = engine_.counters().grants;

    // FIFO: queues keep their order; a waiter is granted only once every waiter ahead has left.
    auto queue_of = [](const std::vector<Engine::ResourceView>& views, const ResourceId& id) {
      for (const auto& view : views) {
        if (view.ns == id.ns && view.key == id.key) return view.waiters;
      }
      return std::vector<SessionId>{};
    };
    auto is_subsequence = [](const std::vector<SessionId>& small, const std::vector<SessionId>& big,
                             std::size_t from) {
      std::size_t j = from;
      for (SessionId s : small) {
        while (j < big.size() && big[j] != s) ++j;
        if (j == big.size()) return false;
        ++j;
      }
      return true;
    };
    for (const auto& view : after) {
      const ResourceId id{view.ns, view.key};
      const std::vector<SessionId> old_queue = queue_of(before, id);
      std::vector<SessionId> survivors = view.waiters;
      const bool appended =
          requested && *requested == id &&
          (engine_reply.status == Status::kQueued ||
           (engine_reply.status == Status::kParked &&
            (requested_command == Command::kLock || requested_command == Command::kSemLock)));
      if (appended && !survivors.empty()) survivors.pop_back();
      check(is_subsequence(survivors, old_queue, 0), [&] { return where_ + ": queue reordered"; });
      for (const auto& [session, reply] : deliveries) {
        if (!reply.token) continue;
        auto parked_it = parked_before.find(session);
        if (parked_it == parked_before.end() || !(parked_it->second == id)) continue;
        auto last_position = std::find(old_queue.rbegin(), old_queue.rend(), session);
        check(last_position != old_queue.rend(),
              [&] { return where_ + ": granted a session not queued"; });
        const auto position = static_cast<std::size_t>(old_queue.rend() - last_position) - 1;
        check(is_subsequence(survivors, old_queue, position + 1),
              [&] { return where_ + ": granted a waiter ahead of one still queued"; });
      }
    }
  }

  Choice choice_;
  core::SplitMix64 engine_salts_;
  Engine engine_;
  test::ReferenceModel model_;
  Instant clock_;
  std::array<SessionId, kSlots> sessions_{};
  std::uint64_t next_session_ = kSlots + 1;
  std::string where_;
  std::vector<Engine::ResourceView> view_;  // the engine's resources after the last step
  std::map<SessionId, ResourceId> parked_;
  std::map<TokenKey, Token> engine_to_model_;
  std::map<TokenKey, Token> model_to_engine_;
  std::vector<std::pair<Token, ResourceId>> revealed_;  // engine tokens clients were given
  std::set<TokenKey> seen_tokens_;                      // engine tokens observed anywhere
  std::uint64_t max_fence_seen_ = 0;
  Fence last_fence_;
  std::uint64_t grants_ = 0;
};

}  // namespace
}  // namespace turnstile::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace turnstile::fuzz;
  FuzzInput input(data, size);
  const Choice choice = decode_choice(input);
  Differential differential(choice);
  for (std::size_t i = 0; i < kStepsMax && !input.empty(); ++i) {
    differential.apply(i, decode_step(input));
  }
  return 0;
}
