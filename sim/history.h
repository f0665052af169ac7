// History: what the simulated clients saw, per operation: call time, return time (or none: the
// connection was lost first, an indefinite outcome), the request and the reply. At the end of a
// run it checks each key's history, per server life, for linearizability (porcupine-style
// search with memoization) against a lock/semaphore model with leases:
//
//  * a grant adds its token (capacity permitting); release/renew `ok` need the token held;
//    release/renew `error` need it not held;
//  * a holder MAY vanish (never must) once its lease can have ended (earliest grant point +
//    lease), once its session's close reached the server (auto-release), once an unanswered
//    release of its token was sent, or once the lease an unanswered renew asked for (maybe a
//    shorter one) can have ended: the model allows, it never forces, so it has no false alarms;
//  * an unanswered (indefinite) acquire is left out: a holder nobody knows the token of can only
//    make grants harder, so leaving it out only widens what the model accepts;
//  * an acquire answered without a token (`timeout`, `queued`, or `error`: a full queue, the
//    lock budget, no durable fence from the fence journal) is a definite non-grant: it changes
//    no holder, and the model asks nothing of it;
//  * an acquire that returns a token an earlier acquire under the same stable ref was granted
//    adopted that orphaned slot (docs/semantics.md, "Stable refs and orphans"): a renewal of
//    the token with a fresh lease, not a second grant; under another ref or none it would be a
//    second grant, which the model refuses;
//  * an unanswered acquire under a stable ref, or an enqueue under one answered `queued`, may
//    have adopted a slot of its ref on its key with the lease it asked for: such a holder may
//    vanish from that acquire's call plus its lease;
//  * a crash ends a life: its histories are checked separately (a cluster is one life);
//  * read-write locks: a read grant needs no writer holding, a write grant nobody holding (the
//    `rw`/`ww` of a two-phase pair too: the kind is in the command); a release or renewal of the
//    other kind (`rr` of a write token...) is answered `error` and changes nothing, and one
//    answered `ok` breaks `rw-kind`.
//
// Before the search, two order checks on the answered grants (first grants only: an adoption,
// or the `w` after an `e` answered `acquired`, returns an earlier token), per life and key:
//
//  * observed-fence-order: a grant whose request was sent after another grant's reply arrived
//    has the larger fence (unless it was sent under a stable ref: it may adopt a slot of its ref
//    granted earlier to a request whose reply was lost);
//  * fifo (rw-fifo on a read-write lock): a two-phase waiter is known to be queued from the
//    return of its `e` answered `queued` until the grant its next `w` on that connection
//    returned; a request sent after that return (a `w`'s call is its `e`'s) is granted a larger
//    fence than the waiter, so no reader overtakes a queued writer. Requests under a stable ref
//    are left out (they may adopt an orphaned place ahead).
//
// Thread affinity: single-threaded, owned by one simulation run.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/protocol.h"
#include "core/types.h"

namespace turnstile::sim {

class History {
 public:
  struct Operation {
    std::uint64_t client = 0;
    std::uint64_t connection = 0;
    std::uint64_t life = 0;
    core::Request request;
    std::int64_t call_ns = 0;
    std::optional<std::int64_t> return_ns;  // nullopt: never answered (indefinite)
    std::string status;                     // the reply's first word
    std::optional<core::Token> token;       // the token a grant carried
    std::int64_t lease_s = 0;               // the lease a grant or renew carried
  };

  void new_life(std::uint64_t life) { life_ = life; }
  // Returns the operation's id (never 0).
  std::uint64_t call(std::uint64_t client, std::uint64_t connection, const core::Request& request,
                     std::int64_t now_ns);
  void complete(std::uint64_t op, std::int64_t now_ns, const std::string& status,
                std::optional<core::Token> token, std::int64_t seconds);
  // A two-phase grant (w answered with a token) may have happened as early as its `e`.
  void widen_call(std::uint64_t op, std::int64_t call_ns);
  // The server learned that the connection closed (its holdings may be released from then on).
  void connection_closed(std::uint64_t connection, std::int64_t now_ns);
  // An operator's force-release of a key (every holder, or the one whose fence is `fence`; 0:
  // every one), sent at `now_ns`: a holder of that key granted before its answer came may vanish
  // from its call on. Returns its id for force_answered.
  std::uint64_t force_release(core::Namespace ns, const std::string& key, std::uint64_t fence,
                              std::int64_t now_ns);
  // Its answer came at `now_ns`; `freed_none`: it was refused (401, 400) and freed nothing.
  void force_answered(std::uint64_t id, std::int64_t now_ns, bool freed_none);

  struct Outcome {
    std::string invariant = "linearizability";  // what the violation breaks
    std::string violation;                      // empty when every key's history linearizes
    std::uint64_t keys_checked = 0;             // (life, key) partitions searched
    std::uint64_t inconclusive = 0;             // partitions whose search hit the step budget
    std::uint64_t operations = 0;               // operations that took part
  };
  Outcome check() const;

  using Partition = std::pair<std::uint64_t, std::pair<core::Namespace, std::string>>;  // life, key

 private:
  struct Facts;       // what every answered or unanswered operation tells about the tokens
  struct Linearized;  // the operations the model searches, per partition
  enum class KindCheck : std::uint8_t { kSame, kOther, kBroken };

  void note_answers(Facts& facts) const;
  void note_forced(Facts& facts) const;
  void note_adoptable(Facts& facts) const;
  // Adds the index-th operation to its partition if the model takes part in it; false, with
  // `outcome` filled in, when it breaks rw-kind.
  bool add_op(std::size_t i, Facts& facts, Linearized& linearized, Outcome& outcome) const;
  // A read-write release or renew: whether it names a slot of its own kind (kSame), of the other
  // kind and was refused (kOther: skipped), or of the other kind and answered ok (kBroken).
  KindCheck check_kind(const Operation& operation, const Partition& partition, const Facts& facts,
                       Outcome& outcome) const;
  // Whether `operation` (the index-th) returned a token that an earlier acquire under the same
  // stable ref was granted: it adopted that orphaned slot.
  bool adopted(
      const Operation& operation, std::size_t index,
      const std::map<std::pair<std::uint64_t, std::uint64_t>, std::size_t>& first_grant) const;

  // The order checks on the answered grants (observed-fence-order, fifo, rw-fifo; see the top of
  // this file): true, with `outcome` filled in, when one breaks.
  bool check_order(
      const std::map<std::pair<std::uint64_t, std::uint64_t>, std::size_t>& first_grant,
      Outcome& outcome) const;
  struct Granted;
  struct Queued;
  std::map<Partition, std::vector<Queued>> queued_waiters(
      const std::map<std::pair<std::uint64_t, std::uint64_t>, std::size_t>& first_grant) const;
  // These two: true, with `outcome` filled in, when the check breaks.
  bool check_fence_order(const std::string& name, const std::vector<Granted>& by_call,
                         const std::vector<Granted>& by_ret, Outcome& outcome) const;
  bool check_fifo(const std::string& name, const Partition& partition,
                  const std::vector<Granted>& by_call, std::vector<Queued>& ahead,
                  Outcome& outcome) const;

  std::uint64_t life_ = 0;
  std::vector<Operation> operations_;  // index = id - 1
  std::map<std::uint64_t, std::int64_t> closed_at_;
  struct Force {
    core::Namespace ns = core::Namespace::kLock;
    std::string key;
    std::uint64_t fence = 0;
    std::int64_t call_ns = 0;
    std::optional<std::int64_t> return_ns;
    bool freed_none = false;
  };
  std::vector<Force> forces_;  // index = id - 1
};

}  // namespace turnstile::sim
