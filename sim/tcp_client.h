// The simulated wire-protocol client, written once for the single-node workload (sim/workload.h)
// and the cluster profiles (sim/cluster_run.h): what a client is (TcpClient: its connection's
// input, the requests it waits for, what it holds), what it asks (TcpClientModel::pick: locks,
// semaphores, read-write locks, two-phase enqueue/wait, releases and renewals with its own, stale,
// foreign or malformed tokens, pings and stats) and what it makes of a reply (decode and check it,
// update what the client holds, complete the History's operation, keep the tokens seen for stale
// and foreign releases).
//
// The two drivers differ on purpose only where RequestMix says so (the odds, the keys, the limits,
// whether a release may carry a malformed token) and in what stays theirs: how a client connects,
// sends and disconnects (the Network of a single node; a cluster node's process, following
// error_not_leader), signals (single node) and stable-ref and lost-notify lines (cluster).
//
// Thread affinity: single-threaded, owned by one run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/protocol.h"
#include "core/types.h"
#include "sim/checker.h"
#include "sim/client_view.h"
#include "sim/history.h"
#include "sim/prng.h"

namespace turnstile::sim {

// A request a client sent and waits for the reply to.
struct Outstanding {
  core::Request request;
  bool malformed = false;    // bytes that are no request: answered `error`
  bool closes = false;       // a line-too-long request: `error`, then the server closes
  bool ref_line = false;     // the stable-ref line, answered `ok` (cluster)
  bool notify_line = false;  // the lost-notify line, answered `ok` (cluster)
  std::int64_t sent_at = 0;  // virtual ns
  std::uint64_t op = 0;      // the History's operation; 0: not recorded
};

// What a client remembers of its slots when RequestMix::remembers_slots (the cluster's lost-line
// check): every slot it was granted and those it released `ok` ("<kind> <key> <token>"), the keys
// it asked for on this connection and on any ("<kind> <key>": a two-phase grant its `w` never
// collected holds a token the client does not know).
struct SlotMemory {
  std::set<std::string> granted;
  std::set<std::string> released;
  std::set<std::string> asked_here;
  std::set<std::string> asked_ever;
};

// One client; the drivers extend it with what is theirs (its connection's transport).
struct TcpClient {
  std::uint64_t id = 0;
  std::uint64_t connection = 0;  // the History's id of the connection; 0: not connected
  std::string input;             // reply bytes not yet split into lines
  std::deque<Outstanding> pending;
  ClientView view;           // tokens held, keys enqueued
  bool stopped = false;      // no new work
  bool lost_notify = false;  // asks for `lost` lines on every connection
  // The stable ref (empty: none). A client with one comes back, now and then, for what it held on
  // an earlier connection (adoption); held_on says the connection each grant came on.
  std::string ref;
  std::map<ResourceKey, std::uint64_t> held_on;
  SlotMemory slots;
};

// A number a request carries: 0 with `zero_permille`, else low..high. No draw for a zero chance
// of 0.
struct Draw {
  std::uint64_t zero_permille = 0;
  std::int64_t low = 0;
  std::int64_t high = 0;
};

// What a driver's clients ask, and how.
struct RequestMix {
  // The resource a request names: `semaphore` or not; read-write locks take the plain key's name.
  std::function<ResourceKey(bool semaphore)> pick_key;
  std::uint64_t rw_permille = 0;  // requests that are read-write lock commands
  // Plain requests: the dice (out of 1000) at and above which each kind stops; the rest waits.
  std::uint64_t malformed_below = 0;  // bytes that are no request
  std::uint64_t too_long_below = 0;   // a line too long: `error`, then the server closes
  std::uint64_t ping_stats_below = 0;
  std::uint64_t ping_permille = 0;  // of those, pings (0: stats, without a draw)
  std::uint64_t lock_below = 0;
  std::uint64_t release_below = 0;
  std::uint64_t renew_below = 0;
  std::uint64_t enqueue_below = 0;
  // Read-write requests: the same, from lock to enqueue; the rest waits.
  std::uint64_t rw_lock_below = 0;
  std::uint64_t rw_release_below = 0;
  std::uint64_t rw_renew_below = 0;
  std::uint64_t rw_enqueue_below = 0;
  std::uint64_t semaphore_permille = 0;
  Draw lease;
  Draw lock_timeout;
  Draw wait_timeout;
  // A semaphore's limit: this, or 0 for one fixed per key (1 to 3), mismatched now and then.
  std::int64_t semaphore_limit = 0;
  std::uint64_t limit_mismatch_permille = 0;
  // A release of a slot held, not a stale or foreign token: plain, and read-write.
  std::uint64_t release_held_permille = 0;
  std::uint64_t rw_release_held_permille = 0;
  // Releases that carry `NOT-A-TOKEN` (answered `error`). With 0, a client that holds nothing
  // and has seen no token sends no release.
  std::uint64_t bad_token_permille = 0;
  bool idle_renew_pings = false;  // a renew with nothing held is a ping (else nothing is sent)
  // The cluster profiles' stream order: what a request may need is drawn before it is known to be
  // needed (the read-write key and the lease up front, the held slot before whether to release
  // it, a wait's key before whether it is one enqueued). Their pinned seeds (the raft and acked
  // canaries) depend on it.
  bool draws_ahead = false;
  std::size_t token_pool_max = 256;  // tokens kept for stale and foreign releases
  bool remembers_slots = false;      // fill TcpClient::slots
};

class TcpClientModel {
 public:
  using Fail = std::function<void(const std::string& invariant, const std::string& detail)>;

  TcpClientModel(Prng& prng, RequestMix mix, History& history,
                 std::map<std::string, std::uint64_t>& coverage, Fail fail);

  // The client's next request, into `out` (and `bytes` for a malformed one, else left empty).
  // False: nothing to send.
  bool pick(TcpClient& client, Outstanding& out, std::string& bytes);
  // `out` goes out now: its History call, if it is an engine command.
  void record_call(TcpClient& client, Outstanding& out, std::int64_t now);
  // A reply line to `out`: `error` for a malformed request; else the reply decoded, or the
  // protocol invariant fails (nullopt).
  std::optional<core::Reply> decode(const Outstanding& out, std::string_view line);
  // What the decoded reply to `out` changes: what the client holds, its History operation's end,
  // the tokens seen.
  void take_reply(TcpClient& client, const Outstanding& out, const core::Reply& reply,
                  std::int64_t now);
  // "<kind> <key>": how SlotMemory names a key.
  static std::string key_word(const ResourceKey& key);
  // The first pending request, for a liveness failure: "l k1 timeout 3" or "malformed".
  static std::string describe(const Outstanding& out);

 private:
  bool pick_plain(TcpClient& client, Outstanding& out, std::string& bytes);
  void pick_malformed(Outstanding& out, std::string& bytes);
  void pick_lock(TcpClient& client, core::Request& request, bool semaphore, std::int64_t lease);
  bool pick_release(TcpClient& client, Outstanding& out, std::string& bytes, bool semaphore);
  bool pick_renew(TcpClient& client, core::Request& request, std::int64_t lease);
  void pick_enqueue(core::Request& request, bool semaphore, std::int64_t lease);
  void pick_wait(TcpClient& client, core::Request& request, bool semaphore);
  bool pick_rw(TcpClient& client, Outstanding& out, std::string& bytes);
  bool pick_rw_release(TcpClient& client, Outstanding& out, std::string& bytes, bool read,
                       bool other_kind, const std::string& ahead_key);
  bool pick_rw_renew(TcpClient& client, core::Request& request, bool other_kind,
                     std::int64_t lease);
  void pick_rw_wait(TcpClient& client, core::Request& request, bool read, bool other_kind,
                    const std::string& ahead_key);
  // A release of `key` with `token`, or `NOT-A-TOKEN` (none, or now and then).
  void set_release_token(Outstanding& out, std::string& bytes, const std::string& key,
                         const std::optional<core::Token>& token);
  std::int64_t draw(const Draw& draw);
  std::int64_t lease(std::int64_t ahead) { return mix_.draws_ahead ? ahead : draw(mix_.lease); }
  std::string rw_key(const std::string& ahead) {
    return mix_.draws_ahead ? ahead : mix_.pick_key(false).second;
  }
  // `shared`, or the other kind with `other_kind` (counted).
  bool kind(bool shared, bool other_kind);
  std::int64_t limit_of(const std::string& key) const;
  void keep_token(const core::Token& token);

  Prng& prng_;
  RequestMix mix_;
  History& history_;
  std::map<std::string, std::uint64_t>& coverage_;
  Fail fail_;
  std::vector<core::Token> token_pool_;  // tokens seen anywhere, for foreign/stale releases
};

}  // namespace turnstile::sim
