// EngineDifferential: drives core::Engine and test::ReferenceModel (reference_model.h) with the
// same steps and compares everything after every step. Shared by the rapidcheck property in
// tests/core/engine_model_test.cc (which generates the steps) and the libFuzzer harness
// fuzz/fuzz_engine.cc (which decodes them from bytes).
//
// A step is a request from one of kSlots session slots on one of kKeys keys, a closed session, a
// tick or a stats call, after the driver's clock moves by nanoseconds to days (sometimes
// backward). After every step the harness demands identical replies, deliveries (compared per
// session), close_session results, counters, now, last fence, resources with their limits, queues
// and holders, and stats; the engine may wake earlier than the model, never later. It also checks
// the engine's own invariants (engine.h), independent of the model: holders <= limit, waiters
// only when full or when fences are exhausted, live leases, fences unique and strictly increasing,
// FIFO queues. Tokens differ only in their salt: they are paired up the first time both
// implementations hand one to the same session in the same step, and the harness translates
// engine tokens into model tokens when it presents one to `r`/`n`.
//
// Failures go to Options::fail with a message naming the step and what differs; the callback
// must not return (the property throws through RC_FAIL, the fuzzer aborts). Messages are built
// only when a check fails, so a passing step costs no formatting. Options::trace, when set,
// receives a line per step (the scenario so far, to read a failure); Options::coverage, when set,
// counts how often each (command, reply) and delivery occurred.
//
// Thread affinity: single-threaded test helper.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <ostream>
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
#include "testing/reference_model.h"

namespace turnstile::test::differential {

inline constexpr std::int64_t kSecondNs = 1'000'000'000;
inline constexpr std::uint64_t kMaxFence = std::numeric_limits<std::uint64_t>::max();
inline constexpr std::size_t kSlots = 4;
inline constexpr std::size_t kKeys = 3;
inline const std::array<std::string, kKeys> kKeyNames = {"a", "b", "c"};

// ---- formatting ---------------------------------------------------------------------------------

// A token shown by its fence only (the salt differs between engine and model by design).
std::string short_token(const core::Token& token);
std::string format_reply(const core::Reply& reply);
// Nanoseconds as seconds with 9 decimals ("-1.000000000s").
std::string format_ns(std::int64_t ns);

bool takes_timeout(core::Command command);
bool takes_lease(core::Command command);
bool takes_limit(core::Command command);
bool takes_token(core::Command command);

// ---- inputs -------------------------------------------------------------------------------------

struct ConfigChoice {
  std::int64_t default_lease_s = 3;
  std::int64_t gc_max_idle_ns = kSecondNs;
  std::int64_t resources_max = 4;
  std::int64_t waiters_max = 0;
  std::uint64_t fence_floor = 0;
  std::size_t stats_entries_max = 10'000;
  std::size_t deadlines_per_call = 32;  // small values leave deadlines behind for later calls
  std::int64_t start_ns = 0;
  bool near_max_jumps = false;  // huge steps are multiplied so that the clock saturates
  std::int64_t last_key_limit = static_cast<std::int64_t>(kKeys);  // usual limit of the last key
  std::uint64_t salt_seed = 1;
  std::int64_t lock_delay_ns = 0;  // EngineConfig::lock_delay
};

std::ostream& operator<<(std::ostream& out, const ConfigChoice& choice);
core::EngineConfig engine_config(const ConfigChoice& choice);

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
  std::size_t slot = 0;         // session slot (< kSlots); a closed slot gets a fresh session id
  core::Command command = core::Command::kLock;
  std::size_t key = 0;  // < kKeys
  std::int64_t timeout_s = 0;
  std::int64_t lease_s = 0;
  std::int64_t limit = 0;  // 0: the key's usual limit (key index + 1)
  TokenPick token_pick = TokenPick::kSameKey;
  std::size_t token_index = 0;
  bool auto_release = true;
  // check and force-release: the namespace they name. A force-release frees every holder when
  // token_index is even, else the holder whose fence is the picked token's; it also clears the
  // key's lock-delay (Request::clear_delay) when token_index % 4 is 2 or 3.
  core::Namespace space = core::Namespace::kLock;
};

std::ostream& operator<<(std::ostream& out, const Step& step);

// ---- the harness --------------------------------------------------------------------------------

// How often each (command, reply), each delivery and a few counters occurred.
struct Coverage {
  std::map<std::string, std::uint64_t> counts;
  void print(std::FILE* out) const;
};

struct Options {
  // Called with what broke; must not return (throw or abort).
  std::function<void(const std::string& what)> fail;
  std::ostream* trace = nullptr;  // a line per step when set
  Coverage* coverage = nullptr;   // counted when set
};

class EngineDifferential {
 public:
  EngineDifferential(const ConfigChoice& choice, Options options);

  // Applies step number `index` to both implementations and checks everything.
  void apply(std::size_t index, const Step& step);

 private:
  using TokenKey = std::pair<std::uint64_t, std::uint64_t>;
  // Holders of one resource as comparable rows: (session, deadline, fence, paired model token,
  // read slot).
  using HolderRow =
      std::tuple<std::uint64_t, std::int64_t, std::uint64_t, std::optional<TokenKey>, bool>;

  struct ResourceId {
    core::Namespace ns = core::Namespace::kLock;
    std::string key;
    auto operator<=>(const ResourceId&) const = default;
  };

  static TokenKey key_of(const core::Token& token) { return {token.fence.value, token.salt}; }

  [[noreturn]] void fail(const std::string& what) const;
  // The message is built only when the check fails: checks run hundreds of times per step.
  template <typename Message>
  void check(bool condition, const Message& message) const {
    if (!condition) fail(message());
  }

  // What one step did to both implementations, for the checks that follow it.
  struct StepResult {
    std::vector<core::Delivery> engine_out;
    std::vector<core::Delivery> model_out;
    std::optional<core::SessionId> requester;
    std::optional<ResourceId> requested;
    std::optional<core::Command> requested_command;
    std::optional<core::SessionId> closing;
    bool engine_dropped = false;
    bool model_dropped = false;
    core::Reply engine_reply = core::Reply::of(core::Status::kOk);
  };

  core::Instant advance_clock(const Step& step);
  core::Request make_request(const Step& step) const;
  void trace_request(core::SessionId session, const Step& step, const core::Request& request) const;
  // A request from the session in `slot`, to both implementations.
  void apply_request(core::Instant now, std::size_t slot, const Step& step, StepResult& result);
  void apply_close(core::Instant now, const Step& step, StepResult& result);
  std::map<core::SessionId, core::Reply> check_deliveries(StepKind kind, const StepResult& result);
  void check_close(const StepResult& result);

  std::string where() const;
  std::string at(core::Instant instant) const;
  std::int64_t usual_limit(std::size_t key) const;
  std::optional<std::size_t> free_slot(std::size_t preferred) const;

  std::pair<std::optional<core::Token>, std::optional<core::Token>> pick_token(
      const Step& step, const ResourceId& resource);
  // `delivered_to`: the session of a delivery, nullopt for the direct reply.
  void pair_tokens(const core::Token& engine_token, const core::Token& model_token,
                   std::optional<core::SessionId> delivered_to);
  void compare_replies(const core::Reply& engine_reply, const core::Reply& model_reply,
                       std::optional<core::SessionId> delivered_to);
  void reveal(const core::Token& engine_token, const ResourceId& resource);
  std::map<core::SessionId, core::Reply> by_session(const std::vector<core::Delivery>& deliveries,
                                                    const char* who) const;
  void compare_stats(const core::StatsSnapshot& engine_stats,
                     const core::StatsSnapshot& model_stats) const;
  void count_step_coverage();
  void compare_counters() const;
  void compare_resource(const core::Engine::ResourceView& e,
                        const core::Engine::ResourceView& m) const;
  void compare_holders(const core::Engine::ResourceView& e,
                       const core::Engine::ResourceView& m) const;
  void compare_state();
  // The slots both lost in this step: the same sessions, keys, paired tokens and reasons.
  void compare_losses();
  void check_engine_invariants(const std::vector<core::Engine::ResourceView>& before,
                               const std::map<core::SessionId, ResourceId>& parked_before,
                               const std::map<core::SessionId, core::Reply>& deliveries,
                               const std::optional<ResourceId>& requested,
                               const std::optional<core::Command>& requested_command,
                               const core::Reply& engine_reply);
  void check_fresh(const core::Token& token, const char* what, std::uint64_t& newest_seen) const;
  void check_resource_invariants(const core::Engine::ResourceView& view, bool settled,
                                 std::set<std::uint64_t>& fences, std::uint64_t& newest_seen) const;
  void check_fifo(const std::vector<core::Engine::ResourceView>& before,
                  const std::map<core::SessionId, ResourceId>& parked_before,
                  const std::map<core::SessionId, core::Reply>& deliveries,
                  const std::optional<ResourceId>& requested,
                  const std::optional<core::Command>& requested_command,
                  const core::Reply& engine_reply) const;
  void count(const std::string& what, std::uint64_t by = 1) {
    if (options_.coverage != nullptr) options_.coverage->counts[what] += by;
  }

  ConfigChoice choice_;
  Options options_;
  core::EngineConfig config_;
  core::SplitMix64 engine_salts_;
  core::Engine engine_;
  ReferenceModel model_;
  core::Instant clock_;
  std::size_t index_ = 0;  // the step being applied, for messages
  std::array<core::SessionId, kSlots> sessions_{};
  std::uint64_t next_session_ = kSlots + 1;
  // The engine's resources after the last step, sorted by (namespace, key): inspect() is the
  // costliest call of a step, so it runs once per step.
  std::vector<core::Engine::ResourceView> view_;
  std::map<core::SessionId, ResourceId> parked_;  // sessions with a parked request, and where
  std::map<TokenKey, core::Token> engine_to_model_;
  std::map<TokenKey, core::Token> model_to_engine_;
  std::vector<std::pair<core::Token, ResourceId>> revealed_;  // engine tokens clients were given
  std::set<TokenKey> seen_tokens_;                            // engine tokens observed anywhere
  std::uint64_t max_fence_seen_ = 0;
  core::Fence last_fence_;
  std::uint64_t grants_ = 0;
  core::EngineCounters seen_counters_;  // for coverage
};

}  // namespace turnstile::test::differential
