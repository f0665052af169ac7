// Model-based property test of core::Engine against tests/support/reference_model.h, plus plain
// scenarios that check the reference model itself against docs/semantics.md.
//
// The property drives both with the same random sequence of requests, closed sessions, ticks
// and stats calls, with time moving forward by nanoseconds, seconds or days and sometimes
// backward. After every step it demands identical replies, deliveries (compared per session),
// counters, fences, resources and queues, and checks the engine's own invariants. Tokens differ
// only in their salt: they are paired up the first time both implementations hand one to the
// same session in the same step, and the test translates engine tokens into model tokens when
// it presents one to `r`/`n`.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iomanip>
#include <limits>
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>
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
#include "tests/support/reference_model.h"

namespace turnstile::test {
namespace {

using core::Command;
using core::Delivery;
using core::Duration;
using core::Engine;
using core::EngineConfig;
using core::EngineCounters;
using core::Fence;
using core::Instant;
using core::Namespace;
using core::Reply;
using core::Request;
using core::SessionId;
using core::Status;
using core::Token;

constexpr std::int64_t kSecondNs = 1'000'000'000;
constexpr std::uint64_t kMaxFence = std::numeric_limits<std::uint64_t>::max();
constexpr int kSlots = 4;
constexpr int kKeys = 3;
const std::array<std::string, kKeys> kKeyNames = {"a", "b", "c"};

// ---- formatting ---------------------------------------------------------------------------------

// A token shown by its fence only (the salt differs between engine and model by design).
std::string short_token(const Token& token) {
  std::ostringstream out;
  out << "f" << token.fence.value;
  return out.str();
}

std::string format_reply(const Reply& reply) {
  std::ostringstream out;
  out << core::status_name(reply.status);
  if (reply.token) out << " " << short_token(*reply.token);
  if (reply.seconds >= 0) out << " " << reply.seconds;
  return out.str();
}

std::string format_ns(std::int64_t ns) {
  std::ostringstream out;
  if (ns < 0) out << "-";
  std::uint64_t magnitude =
      ns < 0 ? static_cast<std::uint64_t>(-(ns + 1)) + 1 : static_cast<std::uint64_t>(ns);
  out << magnitude / 1'000'000'000 << "." << std::setw(9) << std::setfill('0')
      << magnitude % 1'000'000'000 << "s";
  return out.str();
}

bool takes_timeout(Command command) {
  return command == Command::kLock || command == Command::kSemLock || command == Command::kWait ||
         command == Command::kSemWait;
}
bool takes_lease(Command command) {
  return command == Command::kLock || command == Command::kSemLock || command == Command::kRenew ||
         command == Command::kSemRenew || command == Command::kEnqueue ||
         command == Command::kSemEnqueue;
}
bool takes_limit(Command command) {
  return command == Command::kSemLock || command == Command::kSemEnqueue;
}
bool takes_token(Command command) {
  return command == Command::kRelease || command == Command::kSemRelease ||
         command == Command::kRenew || command == Command::kSemRenew;
}

// ---- generated inputs ---------------------------------------------------------------------------

struct ConfigChoice {
  std::int64_t default_lease_s = 3;
  std::int64_t gc_max_idle_ns = kSecondNs;
  std::int64_t resources_max = 4;
  std::int64_t waiters_max = 0;
  std::uint64_t fence_floor = 0;
  std::size_t stats_entries_max = 10'000;
  std::int64_t start_ns = 0;
  bool near_max_jumps = false;          // huge steps are multiplied so that the clock saturates
  std::int64_t last_key_limit = kKeys;  // the usual semaphore limit of the last key
  std::uint64_t salt_seed = 1;
};

std::ostream& operator<<(std::ostream& out, const ConfigChoice& c) {
  return out << "{default_lease_s=" << c.default_lease_s
             << " gc_max_idle=" << format_ns(c.gc_max_idle_ns)
             << " resources_max=" << c.resources_max << " waiters_max=" << c.waiters_max
             << " fence_floor=" << c.fence_floor << " stats_entries_max=" << c.stats_entries_max
             << " last_key_limit=" << c.last_key_limit << " start=" << c.start_ns
             << "ns near_max_jumps=" << c.near_max_jumps << " salt_seed=" << c.salt_seed << "}";
}

enum class StepKind : std::uint8_t { kRequest, kClose, kTick, kStats };
// Which token an r/n presents.
enum class TokenPick : std::uint8_t {
  kSameKey,     // one revealed for this key and namespace, recent first
  kAny,         // one revealed for any key
  kForgedSalt,  // a revealed token's fence with another salt
  kRandom,      // a well-formed token nobody was given
  kMalformed,   // text that is not a token (Request::token is nullopt)
};

struct Step {
  StepKind kind = StepKind::kTick;
  std::int64_t advance_ns = 0;  // the driver's clock moves by this (negative: backward)
  int slot = 0;                 // session slot; a closed slot gets a fresh session id
  Command command = Command::kLock;
  int key = 0;
  std::int64_t timeout_s = 0;
  std::int64_t lease_s = 0;
  std::int64_t limit = 0;  // 0: the key's usual limit (key index + 1)
  TokenPick token_pick = TokenPick::kSameKey;
  int token_index = 0;
  bool auto_release = true;
};

std::ostream& operator<<(std::ostream& out, const Step& step) {
  out << "{" << (step.advance_ns >= 0 ? "+" : "") << format_ns(step.advance_ns) << " slot"
      << step.slot << " ";
  switch (step.kind) {
    case StepKind::kTick:
      return out << "tick}";
    case StepKind::kStats:
      return out << "stats}";
    case StepKind::kClose:
      return out << "close auto_release=" << step.auto_release << "}";
    case StepKind::kRequest:
      break;
  }
  out << core::command_name(step.command) << " " << kKeyNames[static_cast<std::size_t>(step.key)];
  if (takes_timeout(step.command)) out << " timeout=" << step.timeout_s;
  if (takes_limit(step.command)) out << " limit=" << step.limit;
  if (takes_lease(step.command)) out << " lease=" << step.lease_s;
  if (takes_token(step.command)) {
    static constexpr std::array<const char*, 5> kPickNames = {"same_key", "any", "forged_salt",
                                                              "random", "malformed"};
    out << " token=" << kPickNames[static_cast<std::size_t>(step.token_pick)] << "#"
        << step.token_index;
  }
  return out << "}";
}

rc::Gen<std::int64_t> gen_advance_ns() {
  using rc::gen::elementOf;
  using rc::gen::inRange;
  using rc::gen::just;
  return rc::gen::weightedOneOf<std::int64_t>({
      {14, just<std::int64_t>(0)},
      {6, inRange<std::int64_t>(1, 1000)},
      {8, elementOf(
              std::vector<std::int64_t>{kSecondNs, kSecondNs - 1, kSecondNs + 1, kSecondNs / 2})},
      {3, rc::gen::map(inRange<std::int64_t>(2, 7), [](std::int64_t s) { return s * kSecondNs; })},
      {2, inRange<std::int64_t>(kSecondNs, 7 * kSecondNs)},
      {1, inRange<std::int64_t>(1'000'000'000'000, 1'000'000'000'000'000)},
      {2, inRange<std::int64_t>(-3 * kSecondNs, 0)},
      {1, elementOf(std::vector<std::int64_t>{-1, -kSecondNs, -1'000'000'000'000'000})},
  });
}

rc::Gen<Step> gen_step() {
  using rc::gen::inRange;
  using rc::gen::set;
  return rc::gen::build<Step>(
      set(&Step::kind, rc::gen::weightedElement<StepKind>({{44, StepKind::kRequest},
                                                           {3, StepKind::kTick},
                                                           {3, StepKind::kClose},
                                                           {2, StepKind::kStats}})),
      set(&Step::advance_ns, gen_advance_ns()), set(&Step::slot, inRange(0, kSlots)),
      set(&Step::command, rc::gen::weightedElement<Command>({{10, Command::kLock},
                                                             {10, Command::kSemLock},
                                                             {7, Command::kRelease},
                                                             {7, Command::kSemRelease},
                                                             {4, Command::kRenew},
                                                             {4, Command::kSemRenew},
                                                             {6, Command::kEnqueue},
                                                             {6, Command::kSemEnqueue},
                                                             {6, Command::kWait},
                                                             {6, Command::kSemWait}})),
      set(&Step::key, inRange(0, kKeys)),
      set(&Step::timeout_s,
          rc::gen::weightedOneOf<std::int64_t>(
              {{8, inRange<std::int64_t>(0, 4)}, {1, inRange<std::int64_t>(10, 31)}})),
      set(&Step::lease_s,
          rc::gen::weightedOneOf<std::int64_t>({{3, rc::gen::just<std::int64_t>(0)},
                                                {6, inRange<std::int64_t>(1, 6)},
                                                {1, inRange<std::int64_t>(30, 61)}})),
      set(&Step::limit, rc::gen::weightedOneOf<std::int64_t>({{6, rc::gen::just<std::int64_t>(0)},
                                                              {2, inRange<std::int64_t>(1, 4)}})),
      set(&Step::token_pick, rc::gen::weightedElement<TokenPick>({{10, TokenPick::kSameKey},
                                                                  {4, TokenPick::kAny},
                                                                  {2, TokenPick::kForgedSalt},
                                                                  {1, TokenPick::kRandom},
                                                                  {1, TokenPick::kMalformed}})),
      set(&Step::token_index, inRange(0, 4)), set(&Step::auto_release, rc::gen::arbitrary<bool>()));
}

rc::Gen<ConfigChoice> gen_config() {
  using rc::gen::inRange;
  using rc::gen::set;
  return rc::gen::build<ConfigChoice>(
      set(&ConfigChoice::default_lease_s, inRange<std::int64_t>(1, 6)),
      set(&ConfigChoice::gc_max_idle_ns,
          rc::gen::elementOf(std::vector<std::int64_t>{0, 1, kSecondNs / 2, kSecondNs,
                                                       2 * kSecondNs, 3 * kSecondNs})),
      set(&ConfigChoice::resources_max,
          rc::gen::weightedOneOf<std::int64_t>(
              {{2, inRange<std::int64_t>(1, 7)}, {1, rc::gen::just<std::int64_t>(1'048'576)}})),
      set(&ConfigChoice::waiters_max, inRange<std::int64_t>(0, 4)),
      set(&ConfigChoice::fence_floor,
          rc::gen::weightedOneOf<std::uint64_t>(
              {{12, inRange<std::uint64_t>(0, 1'000'000)},
               {1, rc::gen::map(inRange<std::uint64_t>(0, 6),
                                [](std::uint64_t back) { return kMaxFence - back; })}})),
      set(&ConfigChoice::stats_entries_max,
          rc::gen::weightedOneOf<std::size_t>(
              {{3, rc::gen::just<std::size_t>(10'000)}, {1, inRange<std::size_t>(1, 4)}})),
      set(&ConfigChoice::start_ns, inRange<std::int64_t>(-1'000'000'000'000, 1'000'000'000'000)),
      set(&ConfigChoice::near_max_jumps, rc::gen::weightedElement<bool>({{19, false}, {1, true}})),
      set(&ConfigChoice::last_key_limit,
          rc::gen::weightedElement<std::int64_t>({{3, kKeys}, {1, 17}})),
      set(&ConfigChoice::salt_seed, rc::gen::arbitrary<std::uint64_t>()));
}

EngineConfig engine_config(const ConfigChoice& choice) {
  EngineConfig config;
  config.default_lease_s = choice.default_lease_s;
  config.gc_max_idle = Duration::nanoseconds(choice.gc_max_idle_ns);
  config.resources_max = choice.resources_max;
  config.waiters_max = choice.waiters_max;
  config.fence_floor = Fence{choice.fence_floor};
  config.stats_entries_max = choice.stats_entries_max;
  return config;
}

// With TURNSTILE_MODEL_COVERAGE=1 the property prints how often each (command, reply) and each
// delivery occurred, to check that the generator reaches the interesting paths.
struct Coverage {
  std::map<std::string, std::uint64_t> counts;
  ~Coverage() {
    const char* wanted = std::getenv("TURNSTILE_MODEL_COVERAGE");
    if (wanted == nullptr || std::string(wanted) != "1") return;
    for (const auto& [what, count] : counts)
      std::printf("%10llu  %s\n", static_cast<unsigned long long>(count), what.c_str());
  }
};
Coverage coverage;

// ---- the harness --------------------------------------------------------------------------------

using TokenKey = std::pair<std::uint64_t, std::uint64_t>;
TokenKey key_of(const Token& token) { return {token.fence.value, token.salt}; }

struct ResourceId {
  Namespace ns = Namespace::kLock;
  std::string key;
  auto operator<=>(const ResourceId&) const = default;
};

// Drives an Engine and a ReferenceModel side by side; any divergence or broken invariant ends
// the case with RC_FAIL and the trace of the run so far.
class Harness {
 public:
  explicit Harness(const ConfigChoice& choice)
      : choice_(choice),
        config_(engine_config(choice)),
        engine_salts_(choice.salt_seed),
        engine_(config_, engine_salts_),
        model_(config_, choice.salt_seed ^ 0x5bd1e9955bd1e995ULL),
        clock_(Instant::from_ns(choice.start_ns)),
        last_fence_(config_.fence_floor) {
    for (int slot = 0; slot < kSlots; ++slot) {
      sessions_[static_cast<std::size_t>(slot)] = SessionId{static_cast<std::uint64_t>(slot + 1)};
    }
    trace_ << "config " << choice << "\n";
  }

  void run(const std::vector<Step>& steps) {
    for (std::size_t i = 0; i < steps.size(); ++i) apply(i, steps[i]);
  }

 private:
  [[noreturn]] void fail(const std::string& what) {
    std::string message = trace_.str() + "\nDIVERGENCE: " + what;
    RC_FAIL(message);
    std::abort();  // RC_FAIL throws; keeps [[noreturn]] honest
  }
  void expect(bool condition, const std::string& what) {
    if (!condition) fail(what);
  }

  std::string at(Instant instant) const { return format_ns((instant - start()).ns()); }
  Instant start() const { return Instant::from_ns(choice_.start_ns); }

  // Keys a, b, c are usually semaphores of limit 1, 2 and 3; in some cases c has a limit large
  // enough for the engine to index its holders by fence.
  std::int64_t usual_limit(int key) const {
    return key == kKeys - 1 ? choice_.last_key_limit : key + 1;
  }

  std::optional<std::size_t> free_slot(int preferred) const {
    for (int i = 0; i < kSlots; ++i) {
      auto slot = static_cast<std::size_t>((preferred + i) % kSlots);
      if (!parked_.contains(sessions_[slot])) return slot;
    }
    return std::nullopt;
  }

  // Chooses the token an r/n presents: {to the engine, to the model}.
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
    auto index = static_cast<std::size_t>(step.token_index);
    switch (pick) {
      case TokenPick::kSameKey:
      case TokenPick::kAny: {
        Token engine_token = candidates[candidates.size() - 1 - index % candidates.size()];
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
        Token token{Fence{last_fence_.value - index}, 0xfeedfacecafebeefULL + index};
        return {token, token};
      }
      case TokenPick::kMalformed:
        return {std::nullopt, std::nullopt};
    }
    return {std::nullopt, std::nullopt};
  }

  // Pairs an engine token with a model token, or checks an existing pairing.
  void pair_tokens(const Token& engine_token, const Token& model_token, const std::string& where) {
    auto engine_it = engine_to_model_.find(key_of(engine_token));
    auto model_it = model_to_engine_.find(key_of(model_token));
    if (engine_it != engine_to_model_.end() || model_it != model_to_engine_.end()) {
      expect(engine_it != engine_to_model_.end() && model_it != model_to_engine_.end() &&
                 engine_it->second == model_token,
             where + ": token pairing broken (engine " + engine_token.to_string() + ", model " +
                 model_token.to_string() + ")");
      return;
    }
    // Both number grants with the same counter, so the fences agree too.
    expect(engine_token.fence == model_token.fence, where + ": fence differs: engine " +
                                                        short_token(engine_token) + ", model " +
                                                        short_token(model_token));
    engine_to_model_[key_of(engine_token)] = model_token;
    model_to_engine_[key_of(model_token)] = engine_token;
  }

  void compare_replies(const Reply& engine_reply, const Reply& model_reply,
                       const std::string& where) {
    bool same = engine_reply.status == model_reply.status &&
                engine_reply.seconds == model_reply.seconds &&
                engine_reply.payload == model_reply.payload &&
                engine_reply.token.has_value() == model_reply.token.has_value();
    expect(same, where + ": engine replied '" + format_reply(engine_reply) + "', model '" +
                     format_reply(model_reply) + "'");
    if (engine_reply.token) pair_tokens(*engine_reply.token, *model_reply.token, where);
  }

  void reveal(const Token& engine_token, const ResourceId& resource) {
    bool known = std::any_of(revealed_.begin(), revealed_.end(),
                             [&](const auto& entry) { return entry.first == engine_token; });
    if (!known) revealed_.emplace_back(engine_token, resource);
  }

  std::map<SessionId, Reply> by_session(const std::vector<Delivery>& deliveries, const char* who) {
    std::map<SessionId, Reply> result;
    for (const Delivery& delivery : deliveries) {
      bool inserted = result.emplace(delivery.session, delivery.reply).second;
      expect(inserted, std::string(who) + " delivered twice to session " +
                           std::to_string(delivery.session.value) + " in one step");
    }
    return result;
  }

  std::string format_deliveries(const std::map<SessionId, Reply>& deliveries) const {
    std::string text;
    for (const auto& [session, reply] : deliveries) {
      text += " s" + std::to_string(session.value) + "<-" + format_reply(reply);
    }
    return text;
  }

  void apply(std::size_t index, const Step& step) {
    Duration delta = Duration::nanoseconds(step.advance_ns);
    if (choice_.near_max_jumps && step.advance_ns >= 1'000'000'000'000) {
      delta = Duration::nanoseconds(step.advance_ns) + Duration::nanoseconds(step.advance_ns);
      for (int i = 0; i < 11; ++i) delta = delta + delta;  // x4096, saturating
    }
    clock_ = clock_ + delta;
    Instant now = clock_;
    std::string where = "step " + std::to_string(index);
    trace_ << "#" << index << " t=" << at(now) << " ";

    std::vector<Delivery> engine_out;
    std::vector<Delivery> model_out;
    std::optional<SessionId> requester;
    std::optional<ResourceId> requested;
    std::optional<Command> requested_command;
    std::optional<SessionId> closing;
    bool engine_dropped = false;
    bool model_dropped = false;
    Reply engine_reply = Reply::of(Status::kOk);
    const std::vector<Engine::ResourceView> before = engine_.inspect();
    const std::map<SessionId, ResourceId> parked_before = parked_;

    StepKind kind = step.kind;
    std::optional<std::size_t> slot = free_slot(step.slot);
    if (kind == StepKind::kRequest && !slot) {
      trace_ << "(every session parked) ";
      kind = StepKind::kTick;
    }

    switch (kind) {
      case StepKind::kRequest: {
        SessionId session = sessions_[*slot];
        requester = session;
        Request request;
        request.command = step.command;
        request.key = kKeyNames[static_cast<std::size_t>(step.key)];
        if (takes_timeout(step.command)) request.timeout_s = step.timeout_s;
        if (takes_lease(step.command)) request.lease_s = step.lease_s;
        request.limit = 1;
        if (takes_limit(step.command))
          request.limit = step.limit > 0 ? step.limit : usual_limit(step.key);
        ResourceId resource{core::command_namespace(step.command), request.key};
        requested = resource;
        requested_command = step.command;
        Request model_request = request;
        if (takes_token(step.command)) {
          auto [engine_token, model_token] = pick_token(step, resource);
          request.token = engine_token;
          model_request.token = model_token;
        }
        trace_ << "s" << session.value << " " << core::command_name(step.command) << " "
               << request.key;
        if (takes_timeout(step.command)) trace_ << " timeout=" << request.timeout_s;
        if (takes_limit(step.command)) trace_ << " limit=" << request.limit;
        if (takes_lease(step.command)) trace_ << " lease=" << request.lease_s;
        if (takes_token(step.command)) {
          trace_ << " token=" << (request.token ? short_token(*request.token) : "<malformed>");
          if (request.token) trace_ << "/" << (request.token->salt & 0xffff);
        }
        engine_reply = engine_.handle(now, session, request, engine_out);
        Reply model_reply = model_.handle(now, session, model_request, model_out);
        trace_ << " -> " << format_reply(engine_reply);
        if (!(engine_reply.status == model_reply.status)) {
          trace_ << " (model " << format_reply(model_reply) << ")";
        }
        compare_replies(engine_reply, model_reply, where + " reply");
        ++coverage.counts[std::string(core::command_name(step.command)) + " -> " +
                          std::string(core::status_name(engine_reply.status))];
        if (engine_reply.token) reveal(*engine_reply.token, resource);
        if (engine_reply.status == Status::kParked) parked_[session] = resource;
        break;
      }
      case StepKind::kClose: {
        auto close_slot = static_cast<std::size_t>(step.slot);
        SessionId session = sessions_[close_slot];
        trace_ << "close s" << session.value << " auto_release=" << step.auto_release;
        engine_dropped = engine_.close_session(now, session, step.auto_release, engine_out);
        model_dropped = model_.close_session(now, session, step.auto_release, model_out);
        // Deliveries of this step may still reach it: deadlines are processed before the close.
        closing = session;
        sessions_[close_slot] = SessionId{next_session_++};
        break;
      }
      case StepKind::kTick:
        trace_ << "tick";
        engine_.tick(now, engine_out);
        model_.tick(now, model_out);
        break;
      case StepKind::kStats: {
        trace_ << "stats";
        core::StatsSnapshot engine_stats = engine_.stats(now, engine_out);
        core::StatsSnapshot model_stats = model_.stats(now, model_out);
        compare_stats(engine_stats, model_stats, where);
        break;
      }
    }

    // Deliveries: the same replies to the same sessions, in any order.
    std::map<SessionId, Reply> engine_deliveries = by_session(engine_out, "engine");
    std::map<SessionId, Reply> model_deliveries = by_session(model_out, "model");
    if (!engine_deliveries.empty()) trace_ << " |" << format_deliveries(engine_deliveries);
    trace_ << "\n";
    expect(engine_deliveries.size() == model_deliveries.size(),
           where + ": deliveries differ: engine" + format_deliveries(engine_deliveries) +
               "; model" + format_deliveries(model_deliveries));
    for (const auto& [session, reply] : engine_deliveries) {
      auto model_it = model_deliveries.find(session);
      expect(model_it != model_deliveries.end(),
             where + ": deliveries differ: engine" + format_deliveries(engine_deliveries) +
                 "; model" + format_deliveries(model_deliveries));
      compare_replies(reply, model_it->second,
                      where + " delivery to s" + std::to_string(session.value));
      expect(reply.status == Status::kOk || reply.status == Status::kTimeout ||
                 reply.status == Status::kError,
             where + ": unexpected delivery status " + format_reply(reply));
      // Only a parked request is answered later, and only once.
      auto parked_it = parked_.find(session);
      expect(parked_it != parked_.end(), where + ": delivery to s" + std::to_string(session.value) +
                                             ", which has no parked request");
      expect(!requester || *requester != session || engine_reply.status == Status::kParked,
             where + ": delivery to the requesting session");
      if (reply.token) reveal(*reply.token, parked_it->second);
      parked_.erase(parked_it);
      ++coverage.counts["delivery " + std::string(core::status_name(reply.status)) +
                        (kind == StepKind::kClose ? " (before close)" : "")];
    }
    if (closing) {
      // Its request was dropped unanswered iff it was still parked once this step's deliveries
      // (made before the close) are accounted for.
      bool still_parked = parked_.contains(*closing);
      expect(engine_dropped == model_dropped && engine_dropped == still_parked,
             where + ": close_session reported dropped=" + std::to_string(engine_dropped) +
                 ", model " + std::to_string(model_dropped) + ", parked " +
                 std::to_string(still_parked));
      parked_.erase(*closing);
    }

    compare_state(where);
    check_engine_invariants(where, before, parked_before, engine_deliveries, requested,
                            requested_command, engine_reply);
  }

  void compare_stats(const core::StatsSnapshot& engine_stats,
                     const core::StatsSnapshot& model_stats, const std::string& where) {
    auto describe = [](const core::StatsSnapshot& s) {
      std::ostringstream out;
      out << "locks[";
      for (const auto& e : s.locks) {
        out << e.key << ":" << e.owner.value << "/" << e.lease_expires_in_s << "/" << e.waiters
            << " ";
      }
      out << "] semaphores[";
      for (const auto& e : s.semaphores) {
        out << e.key << ":" << e.limit << "/" << e.holders << "/" << e.waiters << " ";
      }
      out << "] idle_locks[";
      for (const auto& e : s.idle_locks) out << e.key << ":" << e.idle_s << " ";
      out << "] idle_semaphores[";
      for (const auto& e : s.idle_semaphores) out << e.key << ":" << e.idle_s << " ";
      out << "] truncated=" << s.truncated;
      return out.str();
    };
    expect(engine_stats == model_stats, where + ": stats differ:\n  engine " +
                                            describe(engine_stats) + "\n  model  " +
                                            describe(model_stats));
  }

  // Holders of one resource as comparable rows: (session, deadline, fence, paired model token).
  using HolderRow = std::tuple<std::uint64_t, std::int64_t, std::uint64_t, std::optional<TokenKey>>;

  void compare_state(const std::string& where) {
    const EngineCounters& counters = engine_.counters();
    coverage.counts["~steps"] += 1;
    if (engine_.last_fence().value == kMaxFence) ++coverage.counts["~steps with fences exhausted"];
    if (counters.clock_regressions > 0) ++coverage.counts["~steps after a clock regression"];
    coverage.counts["~counter lease_expiries"] +=
        counters.lease_expiries - seen_counters_.lease_expiries;
    coverage.counts["~counter wait_timeouts"] +=
        counters.wait_timeouts - seen_counters_.wait_timeouts;
    coverage.counts["~counter resources_collected"] +=
        counters.resources_collected - seen_counters_.resources_collected;
    coverage.counts["~counter fence_exhausted"] +=
        counters.fence_exhausted - seen_counters_.fence_exhausted;
    seen_counters_ = counters;
    expect(engine_.now() == model_.now(),
           where + ": now differs: engine " + at(engine_.now()) + ", model " + at(model_.now()));
    const EngineCounters& ec = engine_.counters();
    const EngineCounters& mc = model_.counters();
    auto counter = [&](const char* name, std::uint64_t e, std::uint64_t m) {
      expect(e == m, where + ": counter " + name + " differs: engine " + std::to_string(e) +
                         ", model " + std::to_string(m));
    };
    counter("clock_regressions", ec.clock_regressions, mc.clock_regressions);
    counter("grants", ec.grants, mc.grants);
    counter("lease_expiries", ec.lease_expiries, mc.lease_expiries);
    counter("wait_timeouts", ec.wait_timeouts, mc.wait_timeouts);
    counter("resources_collected", ec.resources_collected, mc.resources_collected);
    counter("fence_exhausted", ec.fence_exhausted, mc.fence_exhausted);
    counter("last_fence", engine_.last_fence().value, model_.last_fence().value);
    counter("resources_count", engine_.resources_count(), model_.resources_count());

    // The engine may wake earlier than needed (a GC timer armed before the resource was used
    // again fires and re-arms), never later.
    std::optional<Instant> engine_wake = engine_.next_wake();
    std::optional<Instant> model_wake = model_.next_wake();
    expect(!model_wake || (engine_wake && *engine_wake <= *model_wake),
           where + ": next_wake differs: engine " + (engine_wake ? at(*engine_wake) : "none") +
               ", model " + (model_wake ? at(*model_wake) : "none"));

    std::vector<Engine::ResourceView> engine_view = engine_.inspect();
    std::sort(engine_view.begin(), engine_view.end(), [](const auto& a, const auto& b) {
      return std::tie(a.ns, a.key) < std::tie(b.ns, b.key);
    });
    std::vector<Engine::ResourceView> model_view = model_.inspect();
    auto names = [](const std::vector<Engine::ResourceView>& views) {
      std::string text;
      for (const auto& view : views) {
        text += (view.ns == Namespace::kLock ? " lock:" : " sem:") + view.key;
      }
      return text;
    };
    expect(
        engine_view.size() == model_view.size(),
        where + ": resources differ: engine" + names(engine_view) + "; model" + names(model_view));
    for (std::size_t r = 0; r < engine_view.size(); ++r) {
      const Engine::ResourceView& e = engine_view[r];
      const Engine::ResourceView& m = model_view[r];
      std::string name = (e.ns == Namespace::kLock ? "lock:" : "sem:") + e.key;
      expect(e.ns == m.ns && e.key == m.key, where + ": resources differ: engine" +
                                                 names(engine_view) + "; model" +
                                                 names(model_view));
      expect(e.limit == m.limit, where + ": " + name + " limit differs");
      std::string engine_queue;
      for (SessionId s : e.waiters) engine_queue += " s" + std::to_string(s.value);
      std::string model_queue;
      for (SessionId s : m.waiters) model_queue += " s" + std::to_string(s.value);
      expect(e.waiters == m.waiters, where + ": " + name + " queue differs: engine [" +
                                         engine_queue + " ], model [" + model_queue + " ]");
      std::vector<HolderRow> engine_rows;
      for (const auto& holder : e.holders) {
        expect(holder.ns == e.ns && holder.key == e.key,
               where + ": engine holder listed under the wrong resource");
        std::optional<TokenKey> paired;
        auto it = engine_to_model_.find(key_of(holder.token));
        if (it != engine_to_model_.end()) paired = key_of(it->second);
        engine_rows.emplace_back(holder.session.value, holder.deadline.ns(),
                                 holder.token.fence.value, paired);
      }
      std::vector<HolderRow> model_rows;
      for (const auto& holder : m.holders) {
        std::optional<TokenKey> paired;
        if (model_to_engine_.contains(key_of(holder.token))) paired = key_of(holder.token);
        model_rows.emplace_back(holder.session.value, holder.deadline.ns(),
                                holder.token.fence.value, paired);
      }
      std::sort(engine_rows.begin(), engine_rows.end());
      std::sort(model_rows.begin(), model_rows.end());
      auto rows = [this](const std::vector<HolderRow>& list) {
        std::string text;
        for (const auto& [session, deadline, fence, paired] : list) {
          text += " s" + std::to_string(session) + "/f" + std::to_string(fence) + "/until " +
                  at(Instant::from_ns(deadline)) + (paired ? "" : "/unrevealed");
        }
        return text;
      };
      expect(engine_rows == model_rows, where + ": " + name + " holders differ: engine [" +
                                            rows(engine_rows) + " ], model [" + rows(model_rows) +
                                            " ]");
    }

    // The test's own bookkeeping of parked sessions agrees with the model.
    for (SessionId session : sessions_) {
      expect(model_.is_parked(session) == parked_.contains(session),
             where + ": parked bookkeeping of s" + std::to_string(session.value) +
                 " disagrees with the model");
    }
  }

  // Invariants of the engine alone (engine.h), independent of the model.
  void check_engine_invariants(const std::string& where,
                               const std::vector<Engine::ResourceView>& before,
                               const std::map<SessionId, ResourceId>& parked_before,
                               const std::map<SessionId, Reply>& deliveries,
                               const std::optional<ResourceId>& requested,
                               const std::optional<Command>& requested_command,
                               const Reply& engine_reply) {
    std::vector<Engine::ResourceView> after = engine_.inspect();
    Fence last = engine_.last_fence();
    bool exhausted = last.value == kMaxFence;
    std::set<std::uint64_t> fences;
    std::uint64_t newest_seen = max_fence_seen_;
    for (const auto& view : after) {
      std::string name = (view.ns == Namespace::kLock ? "lock:" : "sem:") + view.key;
      expect(static_cast<std::int64_t>(view.holders.size()) <= view.limit,
             where + ": " + name + " has more holders than its limit");
      expect(view.waiters.empty() || static_cast<std::int64_t>(view.holders.size()) == view.limit ||
                 exhausted,
             where + ": " + name + " has waiters while not full");
      for (const auto& holder : view.holders) {
        // A deadline saturated at the end of time cannot lie after `now` once time has run out.
        expect(holder.deadline > engine_.now() || holder.deadline == Instant::max(),
               where + ": " + name + " holder s" + std::to_string(holder.session.value) +
                   " outlived its lease deadline " + at(holder.deadline));
        std::uint64_t fence = holder.token.fence.value;
        expect(fence <= last.value, where + ": holder fence above last_fence");
        expect(fence > config_.fence_floor.value, where + ": holder fence not above the floor");
        expect(fences.insert(fence).second, where + ": two holders share a fence");
        if (!seen_tokens_.contains(key_of(holder.token))) {
          expect(fence > max_fence_seen_, where + ": new token " + short_token(holder.token) +
                                              " is not above every earlier fence");
          newest_seen = std::max(newest_seen, fence);
        }
      }
    }
    for (const auto& [session, reply] : deliveries) {
      if (!reply.token) continue;
      if (!seen_tokens_.contains(key_of(*reply.token))) {
        expect(reply.token->fence.value > max_fence_seen_,
               where + ": delivered token is not above every earlier fence");
        newest_seen = std::max(newest_seen, reply.token->fence.value);
      }
    }
    if (engine_reply.token && !seen_tokens_.contains(key_of(*engine_reply.token))) {
      expect(engine_reply.token->fence.value > max_fence_seen_,
             where + ": granted token is not above every earlier fence");
      newest_seen = std::max(newest_seen, engine_reply.token->fence.value);
    }
    for (const auto& view : after) {
      for (const auto& holder : view.holders) seen_tokens_.insert(key_of(holder.token));
    }
    for (const auto& [session, reply] : deliveries) {
      if (reply.token) seen_tokens_.insert(key_of(*reply.token));
    }
    if (engine_reply.token) seen_tokens_.insert(key_of(*engine_reply.token));
    max_fence_seen_ = newest_seen;

    expect(last >= last_fence_, where + ": last_fence went backward");
    expect(last.value - last_fence_.value == engine_.counters().grants - grants_,
           where + ": last_fence moved by a different amount than the grants counter");
    last_fence_ = last;
    grants_ = engine_.counters().grants;

    // FIFO: queues keep their order, and a waiter is granted only once every waiter ahead of it
    // has left the queue.
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
      ResourceId id{view.ns, view.key};
      std::vector<SessionId> old_queue = queue_of(before, id);
      std::vector<SessionId> survivors = view.waiters;
      // The request of this step joins the tail when it is queued (e/se) or parks (l/sl).
      bool appended =
          requested && *requested == id &&
          (engine_reply.status == Status::kQueued ||
           (engine_reply.status == Status::kParked && requested_command &&
            (*requested_command == Command::kLock || *requested_command == Command::kSemLock)));
      if (appended && !survivors.empty()) survivors.pop_back();
      std::string name = (view.ns == Namespace::kLock ? "lock:" : "sem:") + view.key;
      expect(is_subsequence(survivors, old_queue, 0), where + ": " + name + " queue reordered");
      for (const auto& [session, reply] : deliveries) {
        if (!reply.token) continue;
        auto parked_it = parked_before.find(session);
        if (parked_it == parked_before.end() || !(parked_it->second == id)) continue;
        auto last_position = std::find(old_queue.rbegin(), old_queue.rend(), session);
        expect(last_position != old_queue.rend(), where + ": " + name + " granted s" +
                                                      std::to_string(session.value) +
                                                      ", which was not queued");
        std::size_t position = static_cast<std::size_t>(old_queue.rend() - last_position) - 1;
        expect(is_subsequence(survivors, old_queue, position + 1),
               where + ": " + name + " granted s" + std::to_string(session.value) +
                   " ahead of a waiter still queued");
      }
    }
  }

  ConfigChoice choice_;
  EngineConfig config_;
  core::SplitMix64 engine_salts_;
  Engine engine_;
  ReferenceModel model_;
  Instant clock_;
  std::array<SessionId, kSlots> sessions_{};
  std::uint64_t next_session_ = kSlots + 1;
  std::map<SessionId, ResourceId> parked_;  // sessions with a parked request, and where
  std::map<TokenKey, Token> engine_to_model_;
  std::map<TokenKey, Token> model_to_engine_;
  std::vector<std::pair<Token, ResourceId>> revealed_;  // engine tokens clients were given
  std::set<TokenKey> seen_tokens_;                      // engine tokens observed anywhere
  std::uint64_t max_fence_seen_ = 0;
  Fence last_fence_;
  std::uint64_t grants_ = 0;
  EngineCounters seen_counters_;
  std::ostringstream trace_;
};

RC_GTEST_PROP(EngineModel, EngineMatchesReferenceModel, ()) {
  ConfigChoice choice = *gen_config();
  // Up to 150 steps (rapidcheck's size, 0..100, scaled): long enough for leases to expire,
  // queues to drain and keys to be collected and re-created within one case.
  std::vector<Step> steps = *rc::gen::scale(1.5, rc::gen::container<std::vector<Step>>(gen_step()));
  Harness harness(choice);
  harness.run(steps);
}

}  // namespace
}  // namespace turnstile::test

// ---- the reference model on hand-written scenarios ------------------------------------------
//
// The property above only shows that engine and model agree; these pin the model itself to
// docs/semantics.md, so that a shared misreading cannot pass unnoticed.

namespace turnstile::test {
namespace {

Instant at_ms(std::int64_t ms) { return Instant::from_ns(1'000'000'000'000 + ms * 1'000'000); }
SessionId session(std::uint64_t id) { return SessionId{id}; }

Request lock(const std::string& key, std::int64_t timeout_s, std::int64_t lease_s = 0) {
  Request request;
  request.command = Command::kLock;
  request.key = key;
  request.timeout_s = timeout_s;
  request.lease_s = lease_s;
  return request;
}
Request sem_lock(const std::string& key, std::int64_t timeout_s, std::int64_t limit,
                 std::int64_t lease_s = 0) {
  Request request = lock(key, timeout_s, lease_s);
  request.command = Command::kSemLock;
  request.limit = limit;
  return request;
}
Request release(const std::string& key, std::optional<Token> token,
                Command command = Command::kRelease) {
  Request request;
  request.command = command;
  request.key = key;
  request.token = token;
  return request;
}
Request renew(const std::string& key, std::optional<Token> token, std::int64_t lease_s = 0) {
  Request request = release(key, token, Command::kRenew);
  request.lease_s = lease_s;
  return request;
}
Request enqueue(const std::string& key, std::int64_t lease_s = 0) {
  Request request;
  request.command = Command::kEnqueue;
  request.key = key;
  request.lease_s = lease_s;
  return request;
}
Request sem_enqueue(const std::string& key, std::int64_t limit, std::int64_t lease_s = 0) {
  Request request = enqueue(key, lease_s);
  request.command = Command::kSemEnqueue;
  request.limit = limit;
  return request;
}
Request wait(const std::string& key, std::int64_t timeout_s, Command command = Command::kWait) {
  Request request;
  request.command = command;
  request.key = key;
  request.timeout_s = timeout_s;
  return request;
}

EngineConfig small_config() {
  EngineConfig config;
  config.default_lease_s = 33;
  config.gc_max_idle = Duration::seconds(60);
  config.fence_floor = Fence{1000};
  return config;
}

// Holders of one resource as (session, deadline) pairs, in grant order.
std::vector<std::pair<SessionId, Instant>> holders_of(const ReferenceModel& model, Namespace ns,
                                                      const std::string& key) {
  std::vector<std::pair<SessionId, Instant>> result;
  for (const auto& view : model.inspect()) {
    if (view.ns != ns || view.key != key) continue;
    for (const auto& holder : view.holders) result.emplace_back(holder.session, holder.deadline);
  }
  return result;
}
std::vector<SessionId> queue_of(const ReferenceModel& model, Namespace ns, const std::string& key) {
  for (const auto& view : model.inspect()) {
    if (view.ns == ns && view.key == key) return view.waiters;
  }
  return {};
}

TEST(ReferenceModel, FastPathQueueAndFifoPromotion) {
  ReferenceModel model(small_config(), 7);
  std::vector<Delivery> out;
  Reply first = model.handle(at_ms(0), session(1), lock("a", 0, 10), out);
  ASSERT_EQ(first.status, Status::kOk);
  ASSERT_TRUE(first.token.has_value());
  EXPECT_EQ(first.token->fence, Fence{1001});
  EXPECT_EQ(first.seconds, 10);
  EXPECT_EQ(model.handle(at_ms(0), session(2), lock("a", 5), out).status, Status::kParked);
  EXPECT_EQ(model.handle(at_ms(0), session(3), lock("a", 5, 4), out).status, Status::kParked);
  // A newcomer never overtakes the queue, and timeout 0 does not queue.
  EXPECT_EQ(model.handle(at_ms(0), session(4), lock("a", 0), out).status, Status::kTimeout);
  EXPECT_EQ(queue_of(model, Namespace::kLock, "a"),
            (std::vector<SessionId>{session(2), session(3)}));
  EXPECT_TRUE(out.empty());

  EXPECT_EQ(model.handle(at_ms(1000), session(4), release("a", first.token), out).status,
            Status::kOk);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].session, session(2));
  EXPECT_EQ(out[0].reply.status, Status::kOk);
  EXPECT_EQ(out[0].reply.token->fence, Fence{1002});
  EXPECT_EQ(out[0].reply.seconds, 33);  // no lease given: the server default
  EXPECT_EQ(holders_of(model, Namespace::kLock, "a"),
            (std::vector<std::pair<SessionId, Instant>>{{session(2), at_ms(34'000)}}));
  Token second = *out[0].reply.token;
  out.clear();
  // A released token is gone: releasing it again is an error and changes nothing.
  EXPECT_EQ(model.handle(at_ms(1000), session(1), release("a", first.token), out).status,
            Status::kError);
  EXPECT_EQ(model.handle(at_ms(2000), session(1), release("a", second), out).status, Status::kOk);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].session, session(3));
  EXPECT_EQ(out[0].reply.seconds, 4);
  EXPECT_EQ(model.last_fence(), Fence{1003});
}

TEST(ReferenceModel, LeaseExpiryBeatsWaitTimeoutAtTheSameInstant) {
  ReferenceModel model(small_config(), 7);
  std::vector<Delivery> out;
  ASSERT_EQ(model.handle(at_ms(0), session(1), lock("a", 0, 2), out).status, Status::kOk);
  ASSERT_EQ(model.handle(at_ms(0), session(2), lock("a", 2), out).status, Status::kParked);
  ASSERT_EQ(model.handle(at_ms(0), session(3), lock("b", 0, 2), out).status, Status::kOk);
  ASSERT_EQ(model.handle(at_ms(0), session(4), lock("b", 1), out).status, Status::kParked);
  EXPECT_EQ(model.next_wake(), at_ms(1000));
  model.tick(at_ms(2000), out);
  // s2's timeout and s1's lease end together: the grant wins. s4's timeout came first.
  ASSERT_EQ(out.size(), 2u);
  std::map<SessionId, Status> statuses;
  for (const Delivery& delivery : out) statuses[delivery.session] = delivery.reply.status;
  EXPECT_EQ(statuses[session(2)], Status::kOk);
  EXPECT_EQ(statuses[session(4)], Status::kTimeout);
  EXPECT_EQ(model.counters().lease_expiries, 2u);
  EXPECT_EQ(model.counters().wait_timeouts, 1u);
}

TEST(ReferenceModel, LeaseOfAWaiterPromotedLateRunsFromNow) {
  ReferenceModel model(small_config(), 7);
  std::vector<Delivery> out;
  ASSERT_EQ(model.handle(at_ms(0), session(1), lock("a", 0, 1), out).status, Status::kOk);
  ASSERT_EQ(model.handle(at_ms(0), session(2), lock("a", 3, 1), out).status, Status::kParked);
  // The engine learns of time only at 2.5 s: s1's lease ended at 1 s, and s2's grant is made
  // (and delivered) at 2.5 s with a whole lease, not one that ended at 2 s.
  model.tick(at_ms(2500), out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].reply.status, Status::kOk);
  EXPECT_EQ(holders_of(model, Namespace::kLock, "a"),
            (std::vector<std::pair<SessionId, Instant>>{{session(2), at_ms(3500)}}));
}

TEST(ReferenceModel, GarbageCollectionNeedsStrictlyMoreThanMaxIdle) {
  EngineConfig config = small_config();
  config.gc_max_idle = Duration::seconds(2);
  ReferenceModel model(config, 7);
  std::vector<Delivery> out;
  Reply granted = model.handle(at_ms(0), session(1), sem_lock("a", 0, 2, 10), out);
  ASSERT_EQ(granted.status, Status::kOk);
  ASSERT_EQ(
      model.handle(at_ms(500), session(1), release("a", granted.token, Command::kSemRelease), out)
          .status,
      Status::kOk);
  // A bogus release neither succeeds nor touches the resource.
  ASSERT_EQ(model
                .handle(at_ms(1500), session(1),
                        release("a", Token{Fence{1}, 1}, Command::kSemRelease), out)
                .status,
            Status::kError);
  EXPECT_EQ(model.next_wake(), at_ms(2500) + Duration::nanoseconds(1));
  model.tick(at_ms(2500), out);
  EXPECT_EQ(model.resources_count(), 1u);
  model.tick(at_ms(2500) + Duration::nanoseconds(1), out);
  EXPECT_EQ(model.resources_count(), 0u);
  EXPECT_EQ(model.counters().resources_collected, 1u);
  // The limit went with it.
  EXPECT_EQ(model.handle(at_ms(3000), session(1), sem_lock("a", 0, 3), out).status, Status::kOk);
}

TEST(ReferenceModel, LimitsMaxLocksAndMaxWaiters) {
  EngineConfig config = small_config();
  config.resources_max = 2;
  config.waiters_max = 1;
  ReferenceModel model(config, 7);
  std::vector<Delivery> out;
  EXPECT_EQ(model.handle(at_ms(0), session(1), sem_lock("a", 0, 2), out).status, Status::kOk);
  EXPECT_EQ(model.handle(at_ms(0), session(1), sem_lock("a", 0, 3), out).status,
            Status::kErrorLimitMismatch);
  // The same key in the lock namespace is another resource.
  EXPECT_EQ(model.handle(at_ms(0), session(1), lock("a", 0), out).status, Status::kOk);
  EXPECT_EQ(model.handle(at_ms(0), session(1), lock("b", 0), out).status, Status::kErrorMaxLocks);
  EXPECT_EQ(model.handle(at_ms(0), session(2), sem_lock("a", 0, 2), out).status, Status::kOk);
  EXPECT_EQ(model.handle(at_ms(0), session(3), sem_lock("a", 1, 2), out).status, Status::kParked);
  EXPECT_EQ(model.handle(at_ms(0), session(4), sem_lock("a", 1, 2), out).status,
            Status::kErrorMaxWaiters);
  EXPECT_EQ(model.handle(at_ms(0), session(4), sem_enqueue("a", 2), out).status,
            Status::kErrorMaxWaiters);
  EXPECT_EQ(model.resources_count(), 2u);
}

TEST(ReferenceModel, TwoPhaseAcquireWaitAndExpiredRecord) {
  ReferenceModel model(small_config(), 7);
  std::vector<Delivery> out;
  Reply acquired = model.handle(at_ms(0), session(1), enqueue("a", 5), out);
  ASSERT_EQ(acquired.status, Status::kAcquired);
  EXPECT_EQ(model.handle(at_ms(0), session(1), enqueue("a", 5), out).status,
            Status::kErrorAlreadyEnqueued);
  Reply waited = model.handle(at_ms(3000), session(1), wait("a", 0), out);
  EXPECT_EQ(waited.status, Status::kOk);
  EXPECT_EQ(waited.token, acquired.token);
  EXPECT_EQ(waited.seconds, 5);
  // `w` restarted the lease.
  EXPECT_EQ(holders_of(model, Namespace::kLock, "a"),
            (std::vector<std::pair<SessionId, Instant>>{{session(1), at_ms(8000)}}));
  EXPECT_EQ(model.handle(at_ms(3000), session(1), wait("a", 0), out).status,
            Status::kErrorNotEnqueued);

  // Queued, then w with timeout 0 gives up and forgets the record.
  EXPECT_EQ(model.handle(at_ms(3000), session(2), enqueue("a"), out).status, Status::kQueued);
  EXPECT_EQ(model.handle(at_ms(3000), session(2), wait("a", 0), out).status, Status::kTimeout);
  EXPECT_EQ(model.handle(at_ms(3000), session(2), wait("a", 1), out).status,
            Status::kErrorNotEnqueued);

  // Queued, granted silently on release, lease runs out before w: error_lease_expired, once.
  EXPECT_EQ(model.handle(at_ms(3000), session(3), enqueue("a", 2), out).status, Status::kQueued);
  EXPECT_EQ(model.handle(at_ms(4000), session(1), release("a", acquired.token), out).status,
            Status::kOk);
  EXPECT_TRUE(out.empty());  // nothing is parked: the grant waits for w
  EXPECT_EQ(holders_of(model, Namespace::kLock, "a"),
            (std::vector<std::pair<SessionId, Instant>>{{session(3), at_ms(6000)}}));
  EXPECT_EQ(model.handle(at_ms(6000), session(3), wait("a", 1), out).status,
            Status::kErrorLeaseExpired);
  EXPECT_EQ(model.handle(at_ms(6000), session(3), wait("a", 1), out).status,
            Status::kErrorNotEnqueued);
  EXPECT_EQ(model.handle(at_ms(6000), session(3), enqueue("a"), out).status, Status::kAcquired);

  // Queued and parked on w: the grant is delivered to w.
  Reply held = model.handle(at_ms(7000), session(4), lock("b", 0), out);
  EXPECT_EQ(model.handle(at_ms(7000), session(5), enqueue("b", 3), out).status, Status::kQueued);
  EXPECT_EQ(model.handle(at_ms(7000), session(5), wait("b", 9), out).status, Status::kParked);
  EXPECT_EQ(model.handle(at_ms(8000), session(4), release("b", held.token), out).status,
            Status::kOk);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].session, session(5));
  EXPECT_EQ(out[0].reply.seconds, 3);
  out.clear();
  EXPECT_EQ(model.handle(at_ms(8000), session(5), wait("b", 0), out).status,
            Status::kErrorNotEnqueued);
}

TEST(ReferenceModel, ReleaseByAnyoneDropsAGrantedRecord) {
  ReferenceModel model(small_config(), 7);
  std::vector<Delivery> out;
  Reply acquired = model.handle(at_ms(0), session(1), sem_enqueue("a", 2), out);
  ASSERT_EQ(acquired.status, Status::kAcquired);
  EXPECT_EQ(
      model.handle(at_ms(0), session(2), release("a", acquired.token, Command::kSemRelease), out)
          .status,
      Status::kOk);
  EXPECT_EQ(model.handle(at_ms(0), session(1), wait("a", 0, Command::kSemWait), out).status,
            Status::kErrorNotEnqueued);
}

// docs/semantics.md, e step 1: an expired record is discarded only once the request passes the
// find-or-create and limit checks; a rejected request changes nothing.
TEST(ReferenceModel, RejectedEnqueueKeepsAnExpiredRecord) {
  ReferenceModel model(small_config(), 7);
  std::vector<Delivery> out;
  ASSERT_EQ(model.handle(at_ms(0), session(1), sem_enqueue("b", 2, 1), out).status,
            Status::kAcquired);
  model.tick(at_ms(1000), out);  // the lease ends before sw: the record is expired
  EXPECT_EQ(model.handle(at_ms(1000), session(1), sem_enqueue("b", 1), out).status,
            Status::kErrorLimitMismatch);
  EXPECT_EQ(model.handle(at_ms(1000), session(1), wait("b", 0, Command::kSemWait), out).status,
            Status::kErrorLeaseExpired);
  // Accepted, the next se discards it and starts afresh.
  model.tick(at_ms(2000), out);
  ASSERT_EQ(model.handle(at_ms(2000), session(2), sem_enqueue("c", 2, 1), out).status,
            Status::kAcquired);
  model.tick(at_ms(3000), out);
  EXPECT_EQ(model.handle(at_ms(3000), session(2), sem_enqueue("c", 2), out).status,
            Status::kAcquired);
}

// A w without a record touches nothing, so it cannot keep an idle resource alive; a w that finds
// its record (even an expired one) touches it.
TEST(ReferenceModel, WaitTouchesOnlyWithARecord) {
  EngineConfig config = small_config();
  config.gc_max_idle = Duration::seconds(1);
  ReferenceModel model(config, 7);
  std::vector<Delivery> out;
  Reply held = model.handle(at_ms(0), session(1), lock("a", 0, 10), out);
  ASSERT_EQ(model.handle(at_ms(0), session(1), release("a", held.token), out).status, Status::kOk);
  EXPECT_EQ(model.handle(at_ms(900), session(2), wait("a", 0), out).status,
            Status::kErrorNotEnqueued);
  model.tick(at_ms(1000) + Duration::nanoseconds(1), out);
  EXPECT_EQ(model.resources_count(), 0u);

  ASSERT_EQ(model.handle(at_ms(2000), session(1), enqueue("b", 1), out).status, Status::kAcquired);
  model.tick(at_ms(3000), out);  // expired record: b stays
  EXPECT_EQ(model.handle(at_ms(3500), session(1), wait("b", 0), out).status,
            Status::kErrorLeaseExpired);
  model.tick(at_ms(4500), out);
  EXPECT_EQ(model.resources_count(), 1u);  // touched at 3.5 s
  model.tick(at_ms(4500) + Duration::nanoseconds(1), out);
  EXPECT_EQ(model.resources_count(), 0u);
}

TEST(ReferenceModel, FenceExhaustion) {
  EngineConfig config = small_config();
  config.fence_floor = Fence{kMaxFence - 1};
  ReferenceModel model(config, 7);
  std::vector<Delivery> out;
  Reply last = model.handle(at_ms(0), session(1), lock("a", 0), out);
  ASSERT_EQ(last.status, Status::kOk);
  EXPECT_EQ(last.token->fence, Fence{kMaxFence});
  EXPECT_EQ(model.handle(at_ms(0), session(2), lock("a", 5), out).status, Status::kParked);
  EXPECT_EQ(model.handle(at_ms(0), session(3), enqueue("a"), out).status, Status::kQueued);
  // A new key could never be granted, so it is not created.
  EXPECT_EQ(model.handle(at_ms(0), session(4), lock("b", 5), out).status, Status::kError);
  EXPECT_EQ(model.resources_count(), 1u);
  EXPECT_EQ(model.handle(at_ms(1000), session(1), release("a", last.token), out).status,
            Status::kOk);
  // Both waiters leave the queue; the parked one is told.
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].session, session(2));
  EXPECT_EQ(out[0].reply.status, Status::kError);
  EXPECT_TRUE(queue_of(model, Namespace::kLock, "a").empty());
  EXPECT_EQ(model.handle(at_ms(1000), session(3), wait("a", 1), out).status,
            Status::kErrorNotEnqueued);
  EXPECT_EQ(model.counters().fence_exhausted, 3u);
  EXPECT_EQ(model.last_fence(), Fence{kMaxFence});
}

TEST(ReferenceModel, ClockRegressionNeitherMovesNorExtendsLeases) {
  ReferenceModel model(small_config(), 7);
  std::vector<Delivery> out;
  Reply granted = model.handle(at_ms(10'000), session(1), lock("a", 0, 2), out);
  ASSERT_EQ(granted.status, Status::kOk);
  // 10 s in the past counts as 10 s: the renew's lease runs from the largest instant seen.
  Reply renewed = model.handle(at_ms(0), session(1), renew("a", granted.token, 5), out);
  EXPECT_EQ(renewed, Reply::renewed(5));
  EXPECT_EQ(model.counters().clock_regressions, 1u);
  EXPECT_EQ(model.now(), at_ms(10'000));
  EXPECT_EQ(holders_of(model, Namespace::kLock, "a"),
            (std::vector<std::pair<SessionId, Instant>>{{session(1), at_ms(15'000)}}));
  model.tick(at_ms(15'000), out);
  EXPECT_TRUE(holders_of(model, Namespace::kLock, "a").empty());
  // An ended lease is never revived.
  EXPECT_EQ(model.handle(at_ms(15'000), session(1), renew("a", granted.token), out).status,
            Status::kError);
}

TEST(ReferenceModel, RenewUsesTheRequestOrServerDefaultLease) {
  EngineConfig config = small_config();
  config.default_lease_s = 7;
  ReferenceModel model(config, 7);
  std::vector<Delivery> out;
  Reply granted = model.handle(at_ms(0), session(1), lock("a", 0, 3), out);
  EXPECT_EQ(model.handle(at_ms(1000), session(2), renew("a", granted.token), out),
            Reply::renewed(7));
  EXPECT_EQ(
      model.handle(at_ms(1000), session(2), renew("a", Token{granted.token->fence, 1}), out).status,
      Status::kError);
  EXPECT_EQ(model.handle(at_ms(1000), session(2), renew("a", std::nullopt), out).status,
            Status::kError);
}

TEST(ReferenceModel, ClosedSessionLeavesQueuesAndReleasesOnlyWithAutoRelease) {
  ReferenceModel model(small_config(), 7);
  std::vector<Delivery> out;
  Reply held_a = model.handle(at_ms(0), session(1), lock("a", 0, 10), out);
  Reply held_b = model.handle(at_ms(0), session(1), lock("b", 0, 10), out);
  ASSERT_EQ(held_a.status, Status::kOk);
  ASSERT_EQ(held_b.status, Status::kOk);
  EXPECT_EQ(model.handle(at_ms(0), session(2), lock("a", 5), out).status, Status::kParked);
  EXPECT_EQ(model.handle(at_ms(0), session(3), enqueue("a"), out).status, Status::kQueued);
  EXPECT_EQ(model.handle(at_ms(0), session(4), lock("b", 9), out).status, Status::kParked);
  model.close_session(at_ms(1000), session(2), true, out);
  EXPECT_TRUE(out.empty());  // a dropped parked request gets no reply
  EXPECT_EQ(queue_of(model, Namespace::kLock, "a"), (std::vector<SessionId>{session(3)}));

  // Without auto-release s1 keeps its locks until their leases end.
  ReferenceModel copy = model;
  copy.close_session(at_ms(1000), session(1), false, out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(holders_of(copy, Namespace::kLock, "a").size(), 1u);
  copy.tick(at_ms(10'000), out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].session, session(4));
  out.clear();

  // With auto-release both locks pass on: s3 (two-phase, silently), s4 (parked).
  model.close_session(at_ms(1000), session(1), true, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].session, session(4));
  EXPECT_EQ(holders_of(model, Namespace::kLock, "a"),
            (std::vector<std::pair<SessionId, Instant>>{{session(3), at_ms(34'000)}}));
  EXPECT_EQ(model.handle(at_ms(1000), session(3), wait("a", 0), out).status, Status::kOk);
}

TEST(ReferenceModel, StatsClassifiesByLimitAndSortsByKey) {
  ReferenceModel model(small_config(), 7);
  std::vector<Delivery> out;
  ASSERT_EQ(model.handle(at_ms(0), session(1), lock("m", 0, 10), out).status, Status::kOk);
  ASSERT_EQ(model.handle(at_ms(0), session(2), lock("m", 30), out).status, Status::kParked);
  Reply sem = model.handle(at_ms(0), session(3), sem_lock("k", 0, 2), out);
  ASSERT_EQ(sem.status, Status::kOk);
  ASSERT_EQ(
      model.handle(at_ms(1000), session(3), release("k", sem.token, Command::kSemRelease), out)
          .status,
      Status::kOk);
  ASSERT_EQ(model.handle(at_ms(1000), session(3), sem_lock("z", 0, 1), out).status, Status::kOk);
  core::StatsSnapshot stats = model.stats(at_ms(4000), out);
  core::StatsSnapshot expected;
  expected.locks = {core::LockStats{"m", session(1), 6.0, 1},
                    core::LockStats{"z", session(3), 30.0, 0}};
  expected.idle_semaphores = {core::IdleStats{"k", 3.0}};
  EXPECT_EQ(stats, expected);
}

}  // namespace
}  // namespace turnstile::test
