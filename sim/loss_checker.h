// LossChecker: lost-notify and admin force-release, checked from the engine to the client
// (docs/simulator.md, "Lost slots and force-release").
//
//  1. The truth, from the engines: after every engine call, the holders that left without a
//     release answered `ok` in that call. A holder of a TCP session that its shard has not been
//     told is closed lost its slot; the reason is `expired` when its lease had ended by the
//     engine's now, `forced` when the call was a force-release of its key (and of its fence, when
//     one was given). Every such loss must come out of that shard's router as a `Lost` message in
//     the same call, with that line, and no other loss may (for an open TCP session).
//  2. The owner: a `Lost` message that reaches the owner of a session whose router still knows it
//     becomes a kLost event. One pushed into an open session that asked for them (the client sent
//     `lost-notify _ on`) is owed to its connection.
//  3. The client: every `lost` line it reads was owed to its connection (so it names a slot the
//     connection lost, with the right key, token and reason, and comes once); a connection that
//     never asked reads none; when the server closes a connection in order (a FIN), every line owed
//     to it has arrived.
//  4. Force-release: every later grant of a key in the life has a fence above every holder forced
//     out of it, and a release or renewal of a forced-out token answers `error_lease_expired`
//     while the engine remembers it (the last 16 per key, while the key exists).
//
// Thread affinity: single-threaded, owned by one run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/engine.h"
#include "core/protocol.h"
#include "sim/checker.h"
#include "sim/context.h"

namespace turnstile::sim {

class LossChecker {
 public:
  explicit LossChecker(RunContext& run) : run_(run) {}

  // ---- the clients
  // Connection `connection` sent `lost-notify _ on` as its first request.
  void opted_in(std::uint64_t connection);
  bool is_opted_in(std::uint64_t connection) const { return opted_.count(connection) != 0; }
  // A `lost` line (without its newline) that `client` read on `connection`.
  void line_received(std::size_t client, std::uint64_t connection, std::string_view line);
  // The connection is over for its client: `orderly` when the server's FIN reached it (every
  // byte sent before it has arrived), false after a reset.
  void connection_ended(std::uint64_t connection, bool orderly);

  // ---- the server
  void new_life(std::size_t shards);
  void tcp_session(std::uint64_t session) { tcp_sessions_.insert(session); }
  // The engine of `shard` is told next that `session` closed (or its owner forgot it).
  void session_closed_at(std::size_t shard, std::uint64_t session);
  // A grant one engine call made (its reply, or a delivery to a parked request).
  struct Grant {
    std::uint64_t session = 0;
    core::Token token;
    ResourceKey key;
  };
  // Right after every engine call on `shard`, with the grants it made.
  void on_engine_call(std::size_t shard, const core::Engine& engine, const core::Request* request,
                      const core::Reply* reply, const std::vector<Grant>& grants);
  // A `Lost` message the router of `shard` made (to an owner elsewhere, or an event here).
  void generated(std::size_t shard, std::uint64_t session, const std::string& line);
  // A line pushed into the open session of `connection`, which asked for them.
  void owe(std::uint64_t connection, const std::string& line);
  // After every event: every loss the engines made was reported.
  void check_settled();

 private:
  struct Holder {
    ResourceKey key;
    std::uint64_t session = 0;
    std::int64_t deadline_ns = 0;
  };
  struct Expected {
    std::uint64_t session = 0;
    std::vector<std::string> lines;  // one per reason allowed
    std::vector<bool> forced;        // per line: its reason is `forced`
    ResourceKey key;
    std::uint64_t fence = 0;
  };
  struct ShardState {
    std::map<std::pair<std::uint64_t, std::uint64_t>, Holder> holders;  // by (fence, salt)
    std::map<ResourceKey, bool> keys;  // every resource, and whether GC could collect it
    std::uint64_t collected = 0;       // the engine's resources_collected
    std::set<std::uint64_t> closed;    // sessions this shard's engine was told closed
    std::vector<Expected> expected;    // losses its router has not reported yet
    // Per key: the fences forced out that the engine must still remember (last 16), and those
    // that may have been forced or expired (a lease that ended in the force-release's call).
    std::map<ResourceKey, std::deque<std::uint64_t>> forced;
    std::map<ResourceKey, std::set<std::uint64_t>> maybe_forced;
    // The engine's fences minted and last fence after the last call.
    std::uint64_t grants = 0;
    std::uint64_t last_fence = 0;
    // Holders a force-release call granted and forced out in one go (a waiter promoted as the
    // call began), which no snapshot shows: per key, the fence they are above and how many
    // losses their router still owes.
    struct Unseen {
      ResourceKey key;
      std::uint64_t above = 0;
      std::uint64_t count = 0;
    };
    std::vector<Unseen> unseen;
  };
  void remember_forced(ShardState& state, const ResourceKey& key, std::uint64_t fence);
  // One engine call as on_engine_call sees it: what was asked and answered, the grants the
  // driver saw leave it, and the engine right after it.
  struct Call {
    const core::Request* request = nullptr;
    const core::Reply* reply = nullptr;
    const std::vector<Grant>& grants;
    std::int64_t now = 0;
    std::map<std::pair<std::uint64_t, std::uint64_t>, Holder> holders = {};  // by (fence, salt)
    std::map<ResourceKey, bool> keys = {};  // every resource, and whether GC could collect it
    core::Operation operation = core::Operation::kOther;
    bool force = false;                                      // a force-release
    std::pair<std::uint64_t, std::uint64_t> released{0, 0};  // a release answered `ok`
  };
  void forget_collected(ShardState& state, const Call& call, std::uint64_t collected);
  // Each false once it reported a broken invariant.
  bool check_departures(ShardState& state, const Call& call);
  bool check_grants_after_force(const ShardState& state, const Call& call);
  bool check_forced_token(const ShardState& state, const Call& call);
  void note_unseen(ShardState& state, const Call& call, std::uint64_t grants_now);

  RunContext& run_;
  std::vector<ShardState> shards_;
  std::set<std::uint64_t> tcp_sessions_;             // this life
  std::map<ResourceKey, std::uint64_t> forced_max_;  // this life: the largest fence forced out
  std::set<std::uint64_t> opted_;
  std::map<std::uint64_t, std::multiset<std::string>> owed_;  // by connection
};

}  // namespace turnstile::sim
