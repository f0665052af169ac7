#include "testing/engine_differential.h"

#include <algorithm>
#include <cstdlib>
#include <iomanip>
#include <sstream>
#include <tuple>

namespace turnstile::test::differential {

using core::Engine;
using core::Instant;
using core::Reply;
using core::SessionId;
using core::Token;

// ---- formatting ---------------------------------------------------------------------------------

std::string short_token(const Token& token) { return "f" + std::to_string(token.fence.value); }

std::string format_reply(const Reply& reply) {
  std::string text(core::status_name(reply.status));
  if (reply.token) text += " " + short_token(*reply.token);
  if (reply.seconds >= 0) text += " " + std::to_string(reply.seconds);
  return text;
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

bool takes_timeout(core::Command command) {
  const core::Operation operation = core::command_operation(command);
  return operation == core::Operation::kAcquire || operation == core::Operation::kWait;
}
bool takes_lease(core::Command command) {
  const core::Operation operation = core::command_operation(command);
  return operation == core::Operation::kAcquire || operation == core::Operation::kRenew ||
         operation == core::Operation::kEnqueue;
}
bool takes_limit(core::Command command) {
  return command == core::Command::kSemLock || command == core::Command::kSemEnqueue;
}
bool takes_token(core::Command command) {
  const core::Operation operation = core::command_operation(command);
  return operation == core::Operation::kRelease || operation == core::Operation::kRenew ||
         command == core::Command::kCheck || command == core::Command::kForceRelease;
}

// ---- inputs -------------------------------------------------------------------------------------

std::ostream& operator<<(std::ostream& out, const ConfigChoice& c) {
  return out << "{default_lease_s=" << c.default_lease_s
             << " gc_max_idle=" << format_ns(c.gc_max_idle_ns)
             << " resources_max=" << c.resources_max << " waiters_max=" << c.waiters_max
             << " fence_floor=" << c.fence_floor << " stats_entries_max=" << c.stats_entries_max
             << " deadlines_per_call=" << c.deadlines_per_call
             << " lock_delay=" << format_ns(c.lock_delay_ns)
             << " last_key_limit=" << c.last_key_limit << " start=" << c.start_ns
             << "ns near_max_jumps=" << c.near_max_jumps << " salt_seed=" << c.salt_seed << "}";
}

core::EngineConfig engine_config(const ConfigChoice& choice) {
  core::EngineConfig config;
  config.default_lease_s = choice.default_lease_s;
  config.gc_max_idle = core::Duration::nanoseconds(choice.gc_max_idle_ns);
  config.resources_max = choice.resources_max;
  config.waiters_max = choice.waiters_max;
  config.fence_floor = core::Fence{choice.fence_floor};
  config.stats_entries_max = choice.stats_entries_max;
  config.deadlines_per_call = choice.deadlines_per_call;
  config.lock_delay = core::Duration::nanoseconds(choice.lock_delay_ns);
  return config;
}

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
  out << core::command_name(step.command) << " " << kKeyNames[step.key % kKeys];
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

void Coverage::print(std::FILE* out) const {
  for (const auto& [what, count] : counts) {
    std::fprintf(out, "%10llu  %s\n", static_cast<unsigned long long>(count), what.c_str());
  }
}

// ---- the harness --------------------------------------------------------------------------------

namespace {

std::string format_deliveries(const std::map<SessionId, Reply>& deliveries) {
  std::string text;
  for (const auto& [session, reply] : deliveries) {
    text += " s" + std::to_string(session.value) + "<-" + format_reply(reply);
  }
  return text;
}

}  // namespace

EngineDifferential::EngineDifferential(const ConfigChoice& choice, Options options)
    : choice_(choice),
      options_(std::move(options)),
      config_(engine_config(choice)),
      engine_salts_(choice.salt_seed),
      engine_(config_, engine_salts_),
      model_(config_, choice.salt_seed ^ 0x5bd1e9955bd1e995ULL),
      clock_(Instant::from_ns(choice.start_ns)),
      last_fence_(config_.fence_floor) {
  for (std::size_t slot = 0; slot < kSlots; ++slot) sessions_[slot] = SessionId{slot + 1};
  if (options_.trace != nullptr) *options_.trace << "config " << choice << "\n";
}

void EngineDifferential::fail(const std::string& what) const {
  if (options_.fail) options_.fail(what);
  std::fprintf(stderr, "engine differential: FAILED: %s\n", what.c_str());
  std::abort();  // the callback must not return; keeps [[noreturn]] honest
}

std::string EngineDifferential::where() const { return "step " + std::to_string(index_); }

std::string EngineDifferential::at(Instant instant) const {
  return format_ns((instant - Instant::from_ns(choice_.start_ns)).ns());
}

// Keys a, b, c are usually semaphores of limit 1, 2 and 3; in some cases c has a limit large
// enough for the engine to index its holders by fence.
std::int64_t EngineDifferential::usual_limit(std::size_t key) const {
  return key == kKeys - 1 ? choice_.last_key_limit : static_cast<std::int64_t>(key) + 1;
}

std::optional<std::size_t> EngineDifferential::free_slot(std::size_t preferred) const {
  for (std::size_t i = 0; i < kSlots; ++i) {
    const std::size_t slot = (preferred + i) % kSlots;
    if (!parked_.contains(sessions_[slot])) return slot;
  }
  return std::nullopt;
}

// Moves the driver's clock by the step's advance; returns the new now.
Instant EngineDifferential::advance_clock(const Step& step) {
  core::Duration delta = core::Duration::nanoseconds(step.advance_ns);
  if (choice_.near_max_jumps && step.advance_ns >= 1'000'000'000'000) {
    delta = delta + delta;
    for (int i = 0; i < 11; ++i) delta = delta + delta;  // x4096, saturating
  }
  clock_ = clock_ + delta;
  return clock_;
}

void EngineDifferential::apply(std::size_t index, const Step& step) {
  const Instant now = advance_clock(step);
  index_ = index;
  std::ostream* const trace = options_.trace;
  if (trace != nullptr) *trace << "#" << index << " t=" << at(now) << " ";

  StepResult result;
  // The state before this step is the state after the last one.
  const std::vector<Engine::ResourceView> before = std::move(view_);
  const std::map<SessionId, ResourceId> parked_before = parked_;

  StepKind kind = step.kind;
  const std::optional<std::size_t> slot = free_slot(step.slot % kSlots);
  if (kind == StepKind::kRequest && !slot) {
    if (trace != nullptr) *trace << "(every session parked) ";
    kind = StepKind::kTick;
  }

  switch (kind) {
    case StepKind::kRequest:
      apply_request(now, *slot, step, result);
      break;
    case StepKind::kClose:
      apply_close(now, step, result);
      break;
    case StepKind::kTick:
      if (trace != nullptr) *trace << "tick";
      engine_.tick(now, result.engine_out);
      model_.tick(now, result.model_out);
      break;
    case StepKind::kStats: {
      if (trace != nullptr) *trace << "stats";
      const core::StatsSnapshot engine_stats = engine_.stats(now, result.engine_out);
      const core::StatsSnapshot model_stats = model_.stats(now, result.model_out);
      compare_stats(engine_stats, model_stats);
      break;
    }
  }

  const std::map<SessionId, Reply> engine_deliveries = check_deliveries(kind, result);
  if (result.closing) check_close(result);

  view_ = engine_.inspect();
  std::sort(view_.begin(), view_.end(), [](const auto& a, const auto& b) {
    return std::tie(a.ns, a.key) < std::tie(b.ns, b.key);
  });
  compare_losses();
  compare_state();
  check_engine_invariants(before, parked_before, engine_deliveries, result.requested,
                          result.requested_command, result.engine_reply);
}

// The request a step sends, before any token is chosen for it.
core::Request EngineDifferential::make_request(const Step& step) const {
  core::Request request;
  request.command = step.command;
  request.key = kKeyNames[step.key % kKeys];
  if (takes_timeout(step.command)) request.timeout_s = step.timeout_s;
  if (takes_lease(step.command)) request.lease_s = step.lease_s;
  request.limit = 1;
  if (takes_limit(step.command)) {
    request.limit = step.limit > 0 ? step.limit : usual_limit(step.key % kKeys);
  }
  request.space = step.space;
  return request;
}

void EngineDifferential::trace_request(SessionId session, const Step& step,
                                       const core::Request& request) const {
  std::ostream& trace = *options_.trace;
  trace << "s" << session.value << " " << core::command_name(step.command) << " " << request.key;
  if (takes_timeout(step.command)) trace << " timeout=" << request.timeout_s;
  if (takes_limit(step.command)) trace << " limit=" << request.limit;
  if (takes_lease(step.command)) trace << " lease=" << request.lease_s;
  if (takes_token(step.command)) {
    trace << " token=" << (request.token ? short_token(*request.token) : "<malformed>");
    if (request.token) trace << "/" << (request.token->salt & 0xffff);
  }
}

void EngineDifferential::apply_request(Instant now, std::size_t slot, const Step& step,
                                       StepResult& result) {
  const SessionId session = sessions_[slot];
  result.requester = session;
  core::Request request = make_request(step);
  ResourceId resource{core::request_namespace(request), request.key};
  result.requested = resource;
  result.requested_command = step.command;
  core::Request model_request = request;
  if (takes_token(step.command)) {
    auto [engine_token, model_token] = pick_token(step, resource);
    if (step.command == core::Command::kForceRelease) {
      // Every holder, or the one with the picked token's fence (the same number in both).
      const std::uint64_t fence =
          step.token_index % 2 == 0 || !engine_token ? 0 : engine_token->fence.value;
      request.fence = fence;
      model_request.fence = fence;
      request.space = model_request.space = step.space;
      // Now and then it also ends the key's lock-delay.
      request.clear_delay = model_request.clear_delay = step.token_index % 4 >= 2;
    } else {
      request.token = engine_token;
      model_request.token = model_token;
    }
  }
  std::ostream* const trace = options_.trace;
  if (trace != nullptr) trace_request(session, step, request);
  const Reply engine_reply = engine_.handle(now, session, request, result.engine_out);
  result.engine_reply = engine_reply;
  const Reply model_reply = model_.handle(now, session, model_request, result.model_out);
  if (trace != nullptr) {
    *trace << " -> " << format_reply(engine_reply);
    if (!(engine_reply.status == model_reply.status)) {
      *trace << " (model " << format_reply(model_reply) << ")";
    }
  }
  compare_replies(engine_reply, model_reply, std::nullopt);
  if (options_.coverage != nullptr) {
    count(std::string(core::command_name(step.command)) + " -> " +
          std::string(core::status_name(engine_reply.status)));
  }
  if (engine_reply.token) reveal(*engine_reply.token, resource);
  if (engine_reply.status == core::Status::kParked) parked_[session] = resource;
}

void EngineDifferential::apply_close(Instant now, const Step& step, StepResult& result) {
  const std::size_t close_slot = step.slot % kSlots;
  const SessionId session = sessions_[close_slot];
  if (options_.trace != nullptr) {
    *options_.trace << "close s" << session.value << " auto_release=" << step.auto_release;
  }
  result.engine_dropped = engine_.close_session(now, session, step.auto_release, result.engine_out);
  result.model_dropped = model_.close_session(now, session, step.auto_release, result.model_out);
  // Deliveries of this step may still reach it: deadlines are processed before the close.
  result.closing = session;
  sessions_[close_slot] = SessionId{next_session_++};
}

// Deliveries: the same replies to the same sessions, in any order, each answering a parked
// request. Returns the engine's.
std::map<SessionId, Reply> EngineDifferential::check_deliveries(StepKind kind,
                                                                const StepResult& result) {
  const std::map<SessionId, Reply> engine_deliveries = by_session(result.engine_out, "engine");
  const std::map<SessionId, Reply> model_deliveries = by_session(result.model_out, "model");
  std::ostream* const trace = options_.trace;
  if (trace != nullptr) {
    if (!engine_deliveries.empty()) *trace << " |" << format_deliveries(engine_deliveries);
    *trace << "\n";
  }
  auto deliveries_differ = [&] {
    return where() + ": deliveries differ: engine" + format_deliveries(engine_deliveries) +
           "; model" + format_deliveries(model_deliveries);
  };
  check(engine_deliveries.size() == model_deliveries.size(), deliveries_differ);
  for (const auto& [session, reply] : engine_deliveries) {
    auto model_it = model_deliveries.find(session);
    check(model_it != model_deliveries.end(), deliveries_differ);
    compare_replies(reply, model_it->second, session);
    check(reply.status == core::Status::kOk || reply.status == core::Status::kTimeout ||
              reply.status == core::Status::kError,
          [&, &delivered = reply] {
            return where() + ": unexpected delivery status " + format_reply(delivered);
          });
    // Only a parked request is answered later, and only once.
    auto parked_it = parked_.find(session);
    check(parked_it != parked_.end(), [&, to = session] {
      return where() + ": delivery to s" + std::to_string(to.value) +
             ", which has no parked request";
    });
    check(!result.requester || *result.requester != session ||
              result.engine_reply.status == core::Status::kParked,
          [&] { return where() + ": delivery to the requesting session"; });
    if (reply.token) reveal(*reply.token, parked_it->second);
    parked_.erase(parked_it);
    if (options_.coverage != nullptr) {
      count("delivery " + std::string(core::status_name(reply.status)) +
            (kind == StepKind::kClose ? " (before close)" : ""));
    }
  }
  return engine_deliveries;
}

// The closed session's request was dropped unanswered iff it was still parked once this step's
// deliveries (made before the close) are accounted for.
void EngineDifferential::check_close(const StepResult& result) {
  const bool still_parked = parked_.contains(*result.closing);
  check(result.engine_dropped == result.model_dropped && result.engine_dropped == still_parked,
        [&] {
          return where() +
                 ": close_session reported dropped=" + std::to_string(result.engine_dropped) +
                 ", model " + std::to_string(result.model_dropped) + ", parked " +
                 std::to_string(still_parked);
        });
  parked_.erase(*result.closing);
}

// Chooses the token an r/n presents: {to the engine, to the model}.
std::pair<std::optional<Token>, std::optional<Token>> EngineDifferential::pick_token(
    const Step& step, const ResourceId& resource) {
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
      const Token token{core::Fence{last_fence_.value - index}, 0xfeedfacecafebeefULL + index};
      return {token, token};
    }
    case TokenPick::kMalformed:
      break;
  }
  return {std::nullopt, std::nullopt};
}

namespace {

std::string reply_where(const std::string& step, std::optional<SessionId> delivered_to) {
  return delivered_to ? step + " delivery to s" + std::to_string(delivered_to->value)
                      : step + " reply";
}

}  // namespace

// Pairs an engine token with a model token, or checks an existing pairing.
void EngineDifferential::pair_tokens(const Token& engine_token, const Token& model_token,
                                     std::optional<SessionId> delivered_to) {
  auto engine_it = engine_to_model_.find(key_of(engine_token));
  auto model_it = model_to_engine_.find(key_of(model_token));
  if (engine_it != engine_to_model_.end() || model_it != model_to_engine_.end()) {
    check(engine_it != engine_to_model_.end() && model_it != model_to_engine_.end() &&
              engine_it->second == model_token,
          [&] {
            return reply_where(where(), delivered_to) + ": token pairing broken (engine " +
                   engine_token.to_string() + ", model " + model_token.to_string() + ")";
          });
    return;
  }
  // Both number grants with the same counter, so the fences agree too.
  check(engine_token.fence == model_token.fence, [&] {
    return reply_where(where(), delivered_to) + ": fence differs: engine " +
           short_token(engine_token) + ", model " + short_token(model_token);
  });
  engine_to_model_[key_of(engine_token)] = model_token;
  model_to_engine_[key_of(model_token)] = engine_token;
}

void EngineDifferential::compare_replies(const Reply& engine_reply, const Reply& model_reply,
                                         std::optional<SessionId> delivered_to) {
  const bool same = engine_reply.status == model_reply.status &&
                    engine_reply.seconds == model_reply.seconds &&
                    engine_reply.payload == model_reply.payload &&
                    engine_reply.token.has_value() == model_reply.token.has_value();
  check(same, [&] {
    return reply_where(where(), delivered_to) + ": engine replied '" + format_reply(engine_reply) +
           "', model '" + format_reply(model_reply) + "'";
  });
  if (engine_reply.token) pair_tokens(*engine_reply.token, *model_reply.token, delivered_to);
}

void EngineDifferential::reveal(const Token& engine_token, const ResourceId& resource) {
  const bool known = std::any_of(revealed_.begin(), revealed_.end(),
                                 [&](const auto& entry) { return entry.first == engine_token; });
  if (!known) revealed_.emplace_back(engine_token, resource);
}

std::map<SessionId, Reply> EngineDifferential::by_session(
    const std::vector<core::Delivery>& deliveries, const char* who) const {
  std::map<SessionId, Reply> result;
  for (const core::Delivery& delivery : deliveries) {
    const bool inserted = result.emplace(delivery.session, delivery.reply).second;
    check(inserted, [&] {
      return where() + ": " + who + " delivered twice to s" +
             std::to_string(delivery.session.value) + " in one step";
    });
  }
  return result;
}

void EngineDifferential::compare_stats(const core::StatsSnapshot& engine_stats,
                                       const core::StatsSnapshot& model_stats) const {
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
    out << "] rw_locks[";
    for (const auto& e : s.rw_locks) {
      out << e.key << ":" << e.readers << "/" << e.writer.value << "/" << e.lease_expires_in_s
          << "/" << e.waiters << " ";
    }
    out << "] idle_rw_locks[";
    for (const auto& e : s.idle_rw_locks) out << e.key << ":" << e.idle_s << " ";
    out << "] truncated=" << s.truncated << " grants=" << s.counters.grants
        << " lease_expiries=" << s.counters.lease_expiries
        << " wait_timeouts=" << s.counters.wait_timeouts
        << " fence_exhausted=" << s.counters.fence_exhausted << " totals=" << s.totals.locks_held
        << "/" << s.totals.lock_waiters << "/" << s.totals.semaphore_holders << "/"
        << s.totals.semaphore_waiters << "/" << s.totals.rw_readers << "/" << s.totals.rw_writers
        << "/" << s.totals.rw_waiters;
    return out.str();
  };
  check(engine_stats == model_stats, [&] {
    return where() + ": stats differ:\n  engine " + describe(engine_stats) + "\n  model  " +
           describe(model_stats);
  });
}

void EngineDifferential::compare_losses() {
  const std::vector<core::Loss> engine_losses = engine_.take_losses();
  const std::vector<core::Loss> model_losses = model_.take_losses();
  auto describe = [](const std::vector<core::Loss>& losses) {
    std::string text;
    for (const core::Loss& loss : losses) {
      text += " s" + std::to_string(loss.session.value) + "/" +
              std::string(core::namespace_word(loss.slot.ns)) + ":" + loss.slot.key + "/" +
              short_token(loss.slot.token) + "/" +
              std::string(core::loss_reason_name(loss.slot.reason));
    }
    return text;
  };
  auto differ = [&] {
    return where() + ": losses differ: engine [" + describe(engine_losses) + " ], model [" +
           describe(model_losses) + " ]";
  };
  check(engine_losses.size() == model_losses.size(), differ);
  for (std::size_t i = 0; i < engine_losses.size(); ++i) {
    const core::Loss& e = engine_losses[i];
    const core::Loss& m = model_losses[i];
    check(e.session == m.session && e.slot.ns == m.slot.ns && e.slot.key == m.slot.key &&
              e.slot.reason == m.slot.reason && e.slot.token.fence == m.slot.token.fence,
          differ);
    auto paired = engine_to_model_.find(key_of(e.slot.token));
    check(paired == engine_to_model_.end() || paired->second == m.slot.token, differ);
    count(std::string("loss ") + std::string(core::loss_reason_name(e.slot.reason)));
  }
}

void EngineDifferential::count_step_coverage() {
  const core::EngineCounters& ec = engine_.counters();
  count("~steps");
  if (engine_.last_fence().value == kMaxFence) count("~steps with fences exhausted");
  if (ec.clock_regressions > 0) count("~steps after a clock regression");
  count("~counter lease_expiries", ec.lease_expiries - seen_counters_.lease_expiries);
  count("~counter wait_timeouts", ec.wait_timeouts - seen_counters_.wait_timeouts);
  count("~counter resources_collected",
        ec.resources_collected - seen_counters_.resources_collected);
  count("~counter fence_exhausted", ec.fence_exhausted - seen_counters_.fence_exhausted);
  seen_counters_ = ec;
}

// The clock, the counters and the next wake-up of both implementations.
void EngineDifferential::compare_counters() const {
  const core::EngineCounters& ec = engine_.counters();
  const core::EngineCounters& mc = model_.counters();
  check(engine_.now() == model_.now(), [&] {
    return where() + ": now differs: engine " + at(engine_.now()) + ", model " + at(model_.now());
  });
  auto counter = [&](const char* name, std::uint64_t e, std::uint64_t m) {
    check(e == m, [&] {
      return where() + ": counter " + name + " differs: engine " + std::to_string(e) + ", model " +
             std::to_string(m);
    });
  };
  counter("clock_regressions", ec.clock_regressions, mc.clock_regressions);
  counter("grants", ec.grants, mc.grants);
  counter("lease_expiries", ec.lease_expiries, mc.lease_expiries);
  counter("wait_timeouts", ec.wait_timeouts, mc.wait_timeouts);
  counter("resources_collected", ec.resources_collected, mc.resources_collected);
  counter("fence_exhausted", ec.fence_exhausted, mc.fence_exhausted);
  counter("forced_releases", ec.forced_releases, mc.forced_releases);
  counter("last_fence", engine_.last_fence().value, model_.last_fence().value);
  counter("resources_count", engine_.resources_count(), model_.resources_count());

  // The engine may wake earlier than needed (a GC timer armed before the resource was used
  // again fires and re-arms), never later.
  const std::optional<Instant> engine_wake = engine_.next_wake();
  const std::optional<Instant> model_wake = model_.next_wake();
  check(!model_wake || (engine_wake && *engine_wake <= *model_wake), [&] {
    return where() + ": next_wake differs: engine " + (engine_wake ? at(*engine_wake) : "none") +
           ", model " + (model_wake ? at(*model_wake) : "none");
  });
}

}  // namespace turnstile::test::differential
