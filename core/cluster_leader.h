// ClusterLeader: the replicated end of a node's routers in cluster mode (docs/cluster.md).
//
// In cluster mode the shards' routers (core/router.h, RouterConfig::replicated) send every engine
// request, cancel, close notice and stats request to one endpoint instead of their own engines:
// this object, which lives beside the node's core::Replica on the thread that applies the log. It
// turns requests into log commands, batches them into entries for the driver to propose, and
// turns what applying an entry gave into the routers' messages for this node's sessions. It
// decides nothing about consensus: the driver (turnstiled's raft thread, the simulator) proposes
// the entries it takes, says when this node leads and when it stops, and hands it every entry the
// replica applied, in log order. The same code runs in both drivers.
//
// Rules:
//  * Only a ready leader takes requests: this node leads and has applied an entry of its own term
//    (a barrier), so the replica holds everything committed before. Otherwise an engine request
//    is answered `error_not_leader` with the leader's client address (empty when unknown).
//  * Requests become commands in arrival order; take_entry() puts every command received since
//    the last entry (at most max_commands) into one entry, so that many requests share one
//    append and one fsync. It adds a Tick when a deadline of the replica is due at the entry's
//    time, so that leases, wait timeouts and GC happen at the same log position on every node.
//  * At most max_in_flight entries are proposed and not yet applied: while that many are, the
//    commands wait, and the next entry takes all of them. Each entry costs every node a fixed
//    amount of work (an append, its fsync, the messages between the nodes, the hand-offs between
//    threads), so under load fewer, bigger entries cost less CPU per request; with nothing in
//    flight a command is proposed at once, so a lone request waits for nothing.
//  * The entries this node proposes come back applied in the order it proposed them; each is
//    recognised by its salt and time. Every other applied entry (an earlier leader's) only
//    produces the replies to parked requests of this node's sessions that are still waiting.
//  * Taking over (lead): every session the replica knows that is not a live session of this node
//    is closed without releasing anything (Close, auto_release off). Its waiters leave the queues
//    and its holders become orphans whose leases run on: a holder renews or releases by token
//    from any session with the new leader, so leases survive failover. A session of this node
//    that closed while it did not lead is closed as --auto-release-on-disconnect says.
//  * Stepping down (follow): every request of this node in flight or parked is answered
//    `error_not_leader`. Its outcome is unknown (an entry in flight may still commit under the
//    next leader); the client finds the leader and asks again.
//  * Stats answer from the replica as of its last applied entry, on every node, with the raft
//    status the driver last gave (set_cluster_status) as the reply's `cluster` object.
//
// Session ids carry this process's tag (RouterConfig::session_tag); sessions of other tags are
// other processes' and never get a message from here.
//
// Thread affinity: one thread (the one that applies the log); no locking.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/log_entry.h"
#include "core/replica.h"
#include "core/router.h"
#include "core/stats.h"
#include "core/time.h"

namespace turnstile::core {

struct ClusterLeaderConfig {
  std::size_t shards = 1;                  // the node's routers (endpoints 0 .. shards-1)
  std::uint32_t session_tag = 0;           // this process's tag (RouterConfig::session_tag)
  bool auto_release = true;                // --auto-release-on-disconnect
  Duration orphan_ttl = Duration::zero();  // --orphan-ttl (carried in every Close)
  std::size_t max_commands = 1024;         // per entry (>= 1)
  std::size_t max_in_flight = 0;           // entries taken and not applied; 0: no limit
  std::size_t stats_entries_max = EngineConfig{}.stats_entries_max;
};

class ClusterLeader {
 public:
  ClusterLeader(const ClusterLeaderConfig& config, const Replica& replica);
  ClusterLeader(const ClusterLeader&) = delete;
  ClusterLeader& operator=(const ClusterLeader&) = delete;

  // ---- leadership (from the driver) ------------------------------------------------------------
  // This node leads and has applied an entry of its term; its clock reads `clock`. The log's
  // clock goes on from the replica's time (core::LogClock), and the sessions of the replica that
  // are not live here are queued to be closed.
  void lead(Instant clock);
  // This node no longer leads; `leader_address` is the new leader's client address if known.
  void follow(std::string leader_address);
  // The leader's client address changed while following (for error_not_leader).
  void set_leader_address(std::string leader_address);
  bool leading() const { return leading_; }
  // What stats replies carry as `cluster` from now on (the driver refreshes it before it hands
  // over stats requests; nullopt: none, as in the simulator).
  void set_cluster_status(std::optional<ClusterStatus> status) {
    cluster_status_ = std::move(status);
  }

  // ---- from the routers
  // --------------------------------------------------------------------------
  void receive(RouterMessage message);

  // ---- proposals
  // --------------------------------------------------------------------------------- The next
  // entry to propose, when this node leads and has commands, or a deadline of the replica is due by
  // the entry's time; `salt` seeds its tokens (a fresh random number). nullopt otherwise, and while
  // max_in_flight entries are in flight. The driver proposes it at once, and asks again after each
  // applied(): an entry applied may let the next one go.
  std::optional<LogEntry> take_entry(Instant clock, std::uint64_t salt);
  // The clock reading at which take_entry() will have a Tick to propose (nullopt: no deadline,
  // or not leading, or a Tick is in flight, or max_in_flight entries are).
  std::optional<Instant> next_tick_clock() const;
  // Entries taken but not applied yet.
  std::size_t in_flight() const { return in_flight_.size(); }
  // max_in_flight entries are in flight: take_entry() gives nothing before the next applied()
  // (or follow()), so the driver need not look for new commands before then.
  bool in_flight_full() const {
    return config_.max_in_flight != 0 && in_flight_.size() >= config_.max_in_flight;
  }

  // ---- applied entries (every node, in log order) ---------------------------------------------
  // The replica applied `entry` and it gave `applied`.
  void applied(const LogEntry& entry, const AppliedEntry& applied);

  // ---- outputs
  // ----------------------------------------------------------------------------------- Messages
  // for this node's routers (Envelope::to is the shard).
  std::vector<Envelope> take_outbox();

 private:
  // Where the result of one command of a proposed entry goes.
  struct Origin {
    enum class Kind : std::uint8_t { kSubmit, kClose, kCancel, kTick, kTakeover };
    Kind kind = Kind::kTick;
    SessionId session;
  };
  struct Batch {
    std::uint64_t salt = 0;
    Instant time;
    std::vector<Origin> origins;
  };
  // The canary kAckBeforeCommit (core/canary.h): answers the batch's requests from what applying
  // `entry` would give, before it commits.
  void answer_before_commit(const LogEntry& entry, Batch& batch);
  struct Pending {
    LogCommand command;
    Origin origin;
  };

  bool own(SessionId session) const { return session_tag(session) == config_.session_tag; }
  void to_owner(SessionId session, RouterMessage message);
  void not_leader(SessionId session);
  void answer(const Origin& origin, const CommandResult& result);

  ClusterLeaderConfig config_;
  const Replica& replica_;
  bool leading_ = false;
  std::string leader_address_;
  std::optional<ClusterStatus> cluster_status_;
  LogClock clock_;
  std::deque<Pending> pending_;  // commands not yet in an entry
  std::deque<Batch> in_flight_;  // entries proposed, not yet applied
  bool tick_in_flight_ = false;
  // This node's sessions that sent a state-leaving request and have not closed (live here).
  std::unordered_set<std::uint64_t> live_;
  // This node's sessions that closed while it did not lead: closed when it leads.
  std::unordered_set<std::uint64_t> closed_following_;
  // Sessions of this node with a request in flight or parked: only they get replies.
  std::unordered_set<std::uint64_t> awaiting_;
  std::vector<Envelope> outbox_;
};

}  // namespace turnstile::core
