#include "sim/loss_checker.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <limits>
#include <optional>

namespace turnstile::sim {

namespace {

// Fences a key's engine remembers forced out (core/engine.cc, kForcedRemembered).
constexpr std::size_t kForcedRemembered = 16;

std::string line_of(const ResourceKey& key, const core::Token& token, std::string_view reason) {
  std::string line = "lost ";
  line += core::namespace_word(key.first);
  line += ' ';
  line += key.second;
  line += ' ';
  line += token.to_string();
  line += ' ';
  line += reason;
  line += '\n';
  return line;
}

std::string shown(std::string_view line) {
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  return std::string(line);
}

}  // namespace

// ---- the clients ------------------------------------------------------------------------------

void LossChecker::opted_in(std::uint64_t connection) {
  opted_.insert(connection);
  ++run_.result.coverage["lost-notify-connection"];
}

void LossChecker::line_received(std::size_t client, std::uint64_t connection,
                                std::string_view line) {
  const std::string text = std::string(line) + '\n';
  if (!is_opted_in(connection)) {
    run_.fail("lost-notify",
              "client " + std::to_string(client) + " did not ask for lost lines on connection " +
                  std::to_string(connection) + " but read `" + std::string(line) + "`");
    return;
  }
  auto owed = owed_.find(connection);
  auto it = owed == owed_.end() ? decltype(owed->second.end()){} : owed->second.find(text);
  if (owed == owed_.end() || it == owed->second.end()) {
    run_.fail("lost-notify", "client " + std::to_string(client) + " read `" + std::string(line) +
                                 "` on connection " + std::to_string(connection) +
                                 ", a slot it did not lose so (or a line it already read)");
    return;
  }
  owed->second.erase(it);
  ++run_.result.coverage["lost-line-read"];
}

void LossChecker::connection_ended(std::uint64_t connection, bool orderly) {
  auto owed = owed_.find(connection);
  if (orderly && owed != owed_.end() && !owed->second.empty()) {
    run_.fail("lost-notify", "connection " + std::to_string(connection) +
                                 " was closed by the server in order, and `" +
                                 shown(*owed->second.begin()) +
                                 "`, pushed into its session before, never arrived (" +
                                 std::to_string(owed->second.size()) + " lines missing)");
    return;
  }
  if (owed != owed_.end()) owed_.erase(owed);
  opted_.erase(connection);
}

// ---- the server -------------------------------------------------------------------------------

void LossChecker::new_life(std::size_t shards) {
  shards_.assign(shards, ShardState{});
  tcp_sessions_.clear();
  forced_max_.clear();
}

void LossChecker::session_closed_at(std::size_t shard, std::uint64_t session) {
  if (shard < shards_.size()) shards_[shard].closed.insert(session);
}

void LossChecker::remember_forced(ShardState& state, const ResourceKey& key, std::uint64_t fence) {
  std::deque<std::uint64_t>& fences = state.forced[key];
  fences.push_back(fence);
  while (fences.size() > kForcedRemembered) fences.pop_front();
}

void LossChecker::on_engine_call(std::size_t shard, const core::Engine& engine,
                                 const core::Request* request, const core::Reply* reply,
                                 const std::vector<Grant>& grants) {
  if (run_.failed || shard >= shards_.size()) return;
  ShardState& state = shards_[shard];
  Call call{request, reply, grants};
  call.now = engine.now().ns();
  for (const core::Engine::ResourceView& view : engine.inspect()) {
    const ResourceKey key{view.ns, view.key};
    call.keys[key] = view.holders.empty() && view.waiters.empty();
    for (const core::Engine::HolderView& holder : view.holders) {
      call.holders[{holder.token.fence.value, holder.token.salt}] =
          Holder{key, holder.session.value, holder.deadline.ns()};
    }
  }
  call.operation =
      request != nullptr ? core::command_operation(request->command) : core::Operation::kOther;
  call.force = request != nullptr && request->command == core::Command::kForceRelease;
  // A release answered `ok`: its holder left cleanly.
  if (request != nullptr && reply != nullptr && request->token &&
      call.operation == core::Operation::kRelease && reply->status == core::Status::kOk) {
    call.released = {request->token->fence.value, request->token->salt};
  }
  const std::uint64_t collected = engine.counters().resources_collected;
  forget_collected(state, call, collected);
  if (!check_departures(state, call)) return;
  if (!check_grants_after_force(state, call)) return;
  if (!check_forced_token(state, call)) return;
  const std::uint64_t grants_now = engine.counters().grants;
  if (call.force) note_unseen(state, call, grants_now);
  // A key gone after the call (collected once its force-release left it empty) forgets too.
  for (auto it = state.forced.begin(); it != state.forced.end();) {
    it = call.keys.count(it->first) == 0 ? state.forced.erase(it) : std::next(it);
  }
  state.grants = grants_now;
  state.last_fence = engine.last_fence().value;
  state.holders = std::move(call.holders);
  state.keys = std::move(call.keys);
  state.collected = collected;
}

// A key the engine collected forgets its forced-out fences. A call that collected anything may
// have collected, and made again, any key that was empty at some point of it: every key but
// one that kept a holder from before the call to after it. (Collections come first in a call,
// before its request: a force-release's fences, recorded below, are never collected in it.)
void LossChecker::forget_collected(ShardState& state, const Call& call, std::uint64_t collected) {
  std::set<ResourceKey> kept;
  for (const auto& [id, holder] : state.holders) {
    if (call.holders.count(id) != 0) kept.insert(holder.key);
  }
  for (const auto& entry : state.keys) {
    const ResourceKey& key = entry.first;
    if (call.keys.count(key) == 0 || (collected != state.collected && kept.count(key) == 0)) {
      state.forced.erase(key);
      state.maybe_forced.erase(key);
    }
  }
}

// The holders that left: those seen after the last call, and those granted in this one (a
// waiter promoted as the call began, when a lease ran out, and then forced out by it).
bool LossChecker::check_departures(ShardState& state, const Call& call) {
  const core::Request* request = call.request;
  std::map<std::pair<std::uint64_t, std::uint64_t>, Holder> before = state.holders;
  for (const Grant& grant : call.grants) {
    before.emplace(std::pair(grant.token.fence.value, grant.token.salt),
                   Holder{grant.key, grant.session, std::numeric_limits<std::int64_t>::max()});
  }
  for (const auto& [id, holder] : before) {
    if (call.holders.count(id) != 0 || id == call.released) continue;
    const core::Token token{core::Fence{id.first}, id.second};
    const bool expired = holder.deadline_ns <= call.now;
    const bool forced = call.force && request->space == holder.key.first &&
                        request->key == holder.key.second &&
                        (request->fence == 0 || request->fence == id.first);
    if (forced) {
      forced_max_[holder.key] = std::max(forced_max_[holder.key], id.first);
      if (expired) {
        state.maybe_forced[holder.key].insert(id.first);
      } else {
        remember_forced(state, holder.key, id.first);
      }
    }
    if (tcp_sessions_.count(holder.session) == 0 || state.closed.count(holder.session) != 0) {
      continue;  // an HTTP session's, or one whose close this engine heard: not pushed
    }
    if (!expired && !forced) {
      run_.fail("lost-notify", key_name(holder.key) + ": the slot of fence " +
                                   std::to_string(id.first) + " of open session " +
                                   std::to_string(holder.session) +
                                   " left without a release, a lease that ended or a "
                                   "force-release of it");
      return false;
    }
    Expected expected{holder.session, {}, {}, holder.key, id.first};
    if (expired) {
      expected.lines.push_back(line_of(holder.key, token, "expired"));
      expected.forced.push_back(false);
    }
    if (forced) {
      expected.lines.push_back(line_of(holder.key, token, "forced"));
      expected.forced.push_back(true);
    }
    state.expected.push_back(std::move(expected));
  }
  return true;
}

// Every grant of a key after a force-release of it has a larger fence than the forced-out.
bool LossChecker::check_grants_after_force(const ShardState& state, const Call& call) {
  for (const auto& [id, holder] : call.holders) {
    if (state.holders.count(id) != 0) continue;
    auto max = forced_max_.find(holder.key);
    if (max == forced_max_.end()) continue;
    ++run_.result.coverage["force-release-grant-after"];
    if (id.first <= max->second) {
      run_.fail("force-release-fence", key_name(holder.key) + " granted fence " +
                                           std::to_string(id.first) + " after fence " +
                                           std::to_string(max->second) + " was forced out");
      return false;
    }
  }
  return true;
}

// A release or renewal of a forced-out token the engine remembers: error_lease_expired.
bool LossChecker::check_forced_token(const ShardState& state, const Call& call) {
  const core::Request* request = call.request;
  const core::Reply* reply = call.reply;
  if (request != nullptr && reply != nullptr && request->token &&
      (call.operation == core::Operation::kRelease || call.operation == core::Operation::kRenew)) {
    const ResourceKey key{core::command_namespace(request->command), request->key};
    const std::uint64_t fence = request->token->fence.value;
    auto forced = state.forced.find(key);
    if (forced != state.forced.end() &&
        std::find(forced->second.begin(), forced->second.end(), fence) != forced->second.end() &&
        call.keys.count(key) != 0) {
      ++run_.result.coverage["forced-token-checked"];
      if (reply->status != core::Status::kErrorLeaseExpired) {
        run_.fail("force-release-token",
                  std::string(core::command_name(request->command)) + " " + key_name(key) +
                      " of forced-out fence " + std::to_string(fence) + " answered " +
                      std::string(core::status_name(reply->status)) + ", not error_lease_expired");
        return false;
      }
    }
  }
  return true;
}

// A force-release call that minted more fences than it shows (new holders, deliveries) granted
// some to two-phase waiters and forced them out in the same call: each owes a `forced` loss on
// the key.
void LossChecker::note_unseen(ShardState& state, const Call& call, std::uint64_t grants_now) {
  // Those still holding, and those delivered to parked requests (judged above), are seen.
  std::uint64_t present = 0;
  for (const auto& [id, holder] : call.holders) present += id.first > state.last_fence ? 1 : 0;
  for (const Grant& grant : call.grants) {
    const bool gone = call.holders.count({grant.token.fence.value, grant.token.salt}) == 0;
    present += gone && grant.token.fence.value > state.last_fence ? 1 : 0;
  }
  const std::uint64_t minted = grants_now - state.grants;
  if (minted > present) {
    state.unseen.push_back(
        {ResourceKey{call.request->space, call.request->key}, state.last_fence, minted - present});
  }
}

void LossChecker::generated(std::size_t shard, std::uint64_t session, const std::string& line) {
  if (run_.failed || shard >= shards_.size()) return;
  ShardState& state = shards_[shard];
  for (auto it = state.expected.begin(); it != state.expected.end(); ++it) {
    if (it->session != session) continue;
    for (std::size_t i = 0; i < it->lines.size(); ++i) {
      if (it->lines[i] != line) continue;
      if (it->forced[i]) {
        auto maybe = state.maybe_forced.find(it->key);
        if (maybe != state.maybe_forced.end()) maybe->second.erase(it->fence);
        remember_forced(state, it->key, it->fence);
      }
      const std::size_t space = line.rfind(' ');
      ++run_.result.coverage["lost-" + shown(line.substr(space + 1))];
      state.expected.erase(it);
      return;
    }
  }
  // One of the holders a force-release granted and forced out in one call.
  const std::string suffix = " forced\n";
  const std::size_t token_at =
      line.size() - std::min(line.size(), suffix.size() + core::Token::kWireLength);
  if (line.size() > suffix.size() + core::Token::kWireLength &&
      line.compare(line.size() - suffix.size(), suffix.size(), suffix) == 0) {
    const std::optional<core::Token> token =
        core::Token::parse(std::string_view(line).substr(token_at, core::Token::kWireLength));
    for (auto it = state.unseen.begin(); token && it != state.unseen.end(); ++it) {
      const std::string prefix =
          "lost " + std::string(core::namespace_word(it->key.first)) + " " + it->key.second + " ";
      if (line.compare(0, prefix.size(), prefix) != 0 || prefix.size() != token_at ||
          token->fence.value <= it->above) {
        continue;
      }
      remember_forced(state, it->key, token->fence.value);
      forced_max_[it->key] = std::max(forced_max_[it->key], token->fence.value);
      ++run_.result.coverage["lost-forced"];
      ++run_.result.coverage["lost-forced-at-grant"];
      if (--it->count == 0) state.unseen.erase(it);
      return;
    }
  }
  if (tcp_sessions_.count(session) == 0 || state.closed.count(session) != 0) return;
  run_.fail("lost-notify", "shard " + std::to_string(shard) + " reported `" + shown(line) +
                               "` to open session " + std::to_string(session) +
                               ", which lost no such slot");
}

void LossChecker::owe(std::uint64_t connection, const std::string& line) {
  owed_[connection].insert(line);
  ++run_.result.coverage["lost-line-pushed"];
}

void LossChecker::check_settled() {
  if (run_.failed) return;
  for (std::size_t shard = 0; shard < shards_.size(); ++shard) {
    if (!shards_[shard].unseen.empty()) {
      const ShardState::Unseen& unseen = shards_[shard].unseen.front();
      run_.fail("lost-notify", key_name(unseen.key) + " on shard " + std::to_string(shard) + ": " +
                                   std::to_string(unseen.count) +
                                   " holders granted and forced out in one call were never "
                                   "reported lost");
      return;
    }
    if (shards_[shard].expected.empty()) continue;
    const Expected& expected = shards_[shard].expected.front();
    run_.fail("lost-notify", "open session " + std::to_string(expected.session) + " lost `" +
                                 shown(expected.lines.front()) + "` on shard " +
                                 std::to_string(shard) + " and its router never reported it");
    return;
  }
}

}  // namespace turnstile::sim
