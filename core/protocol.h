// The typed vocabulary of the dflockd line protocol: what a client can ask (Request) and what the
// server answers (Reply). The wire codec (wire.h) turns bytes into Requests and Replies into
// bytes; the engine (engine.h) turns Requests into Replies. Both are plain values, so a Request
// can be logged, replayed or (later) replicated.
//
// Thread affinity: plain values, safe anywhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/types.h"

namespace turnstile::core {

enum class Command : std::uint8_t {
  kLock,        // l    key  <timeout> [<lease>]
  kRelease,     // r    key  <token>
  kRenew,       // n    key  <token> [<lease>]
  kEnqueue,     // e    key  [<lease>]
  kWait,        // w    key  <timeout>
  kSemLock,     // sl   key  <timeout> <limit> [<lease>]
  kSemRelease,  // sr   key  <token>
  kSemRenew,    // sn   key  <token> [<lease>]
  kSemEnqueue,  // se   key  <limit> [<lease>]
  kSemWait,     // sw   key  <timeout>
  kPing,        // ping _    _
  kStats,       // stats _   _
  kAuth,        // auth _    <secret>
  // Cluster surface (docs/cluster.md), answered on one node too:
  kBarrier,    // barrier    _      _   `ok` once everything before it is applied
  kStableRef,  // stable-ref <ref>  _   binds the connection's stable ref (answered by the session)
  // Signals (docs/protocol.md, "Signals"; dflockd v1.11-v1.16), answered by the signal hub:
  kListen,    // listen   <pattern> [<group>]
  kUnlisten,  // unlisten <pattern> [<group>]
  kSignal,    // signal   <channel> <payload>   `ok <n>`: n deliveries
  // Cluster mode (docs/cluster.md, "Signals in a cluster"): a signal forwarded by another node.
  // Like signal, but delivered to this node's listeners only and never forwarded again.
  kSignalPeer,  // signal-peer <channel> <payload>   `ok <n>`: n deliveries here
  // Read-write locks (docs/protocol.md, "Read-write locks"; the command names of dflockd's
  // experimental branch), in their own namespace: arguments and replies as for l, r, n, e, w.
  kReadLock,      // rl key <timeout> [<lease>]
  kWriteLock,     // wl key <timeout> [<lease>]
  kReadRelease,   // rr key <token>
  kWriteRelease,  // wr key <token>
  kReadRenew,     // rn key <token> [<lease>]
  kWriteRenew,    // wn key <token> [<lease>]
  kReadEnqueue,   // re key [<lease>]
  kWriteEnqueue,  // we key [<lease>]
  kReadWait,      // rw key <timeout>
  kWriteWait,     // ww key <timeout>
  // Beyond dflockd (docs/protocol.md). A `kind` word names the namespace: lock (the default),
  // sem or rw (Request::space).
  kCheck,       // check   key <token> [<kind>]   `ok <ttl>` while the token holds the key, else
                //                                 `error_lease_expired` (a fence check)
  kInspect,     // inspect key [<kind>]           `ok <json>`: holders and waiters of the key
  kLostNotify,  // lost-notify _ on|off           `ok`; with on, the connection is told of every
                //                                 slot it loses (`lost ...` push lines)
  // An operator's force-release (HTTP DELETE /v1/admin/..., never on the TCP wire): frees every
  // holder of the key, or the one whose fence is Request::fence, and with Request::clear_delay
  // ends its lock-delay.  `ok <n>`: n freed (Reply::delay_cleared: a lock-delay was ended).
  kForceRelease,  // the last: kCommandCount counts up to it
};

// How many commands there are: tables indexed by Command have this many rows.
inline constexpr std::size_t kCommandCount = static_cast<std::size_t>(Command::kForceRelease) + 1;

// What an engine command does to its resource, whatever its namespace.
enum class Operation : std::uint8_t {
  kAcquire,  // l, sl, rl, wl
  kRelease,  // r, sr, rr, wr
  kRenew,    // n, sn, rn, wn
  kEnqueue,  // e, se, re, we
  kWait,     // w, sw, rw, ww
  kOther,    // everything else
};
Operation command_operation(Command command);
// rl, rr, rn, re, rw: a shared (read) slot of a read-write lock. Every other keyed command takes
// or names an exclusive slot (a semaphore's slots are counted, not shared).
bool is_shared_command(Command command);
// The command of `operation` in the namespace (and, for read-write locks, the mode) of `like`.
Command command_like(Command like, Operation operation);
// The wire word of a namespace in check, inspect and `lost` lines: lock, sem or rw.
std::string_view namespace_word(Namespace ns);
std::optional<Namespace> parse_namespace_word(std::string_view word);

// The wire word of a command (`l`, `sl`, `stats`, ...); empty for a value that is not a Command.
constexpr std::string_view command_name(Command command) {
  switch (command) {
    case Command::kLock:
      return "l";
    case Command::kRelease:
      return "r";
    case Command::kRenew:
      return "n";
    case Command::kEnqueue:
      return "e";
    case Command::kWait:
      return "w";
    case Command::kSemLock:
      return "sl";
    case Command::kSemRelease:
      return "sr";
    case Command::kSemRenew:
      return "sn";
    case Command::kSemEnqueue:
      return "se";
    case Command::kSemWait:
      return "sw";
    case Command::kPing:
      return "ping";
    case Command::kStats:
      return "stats";
    case Command::kAuth:
      return "auth";
    case Command::kBarrier:
      return "barrier";
    case Command::kStableRef:
      return "stable-ref";
    case Command::kListen:
      return "listen";
    case Command::kUnlisten:
      return "unlisten";
    case Command::kSignal:
      return "signal";
    case Command::kSignalPeer:
      return "signal-peer";
    case Command::kReadLock:
      return "rl";
    case Command::kWriteLock:
      return "wl";
    case Command::kReadRelease:
      return "rr";
    case Command::kWriteRelease:
      return "wr";
    case Command::kReadRenew:
      return "rn";
    case Command::kWriteRenew:
      return "wn";
    case Command::kReadEnqueue:
      return "re";
    case Command::kWriteEnqueue:
      return "we";
    case Command::kReadWait:
      return "rw";
    case Command::kWriteWait:
      return "ww";
    case Command::kCheck:
      return "check";
    case Command::kInspect:
      return "inspect";
    case Command::kLostNotify:
      return "lost-notify";
    case Command::kForceRelease:
      return "force-release";
  }
  return {};  // not a Command
}

// The sentinel of kCommandCount: a command added to Command must be named above (-Wswitch makes
// that an error), and then these fail until kCommandCount counts it too.
static_assert(!command_name(static_cast<Command>(kCommandCount - 1)).empty());
static_assert(command_name(static_cast<Command>(kCommandCount)).empty(),
              "a Command follows kForceRelease: kCommandCount must count up to it");

// True for the commands the engine answers (everything keyed, and barrier); ping, stats, auth and
// stable-ref are answered by the session and its driver.
bool is_engine_command(Command command);
// listen, unlisten, signal and signal-peer: answered by the signal hub (core/signal_hub.h).
bool is_signal_command(Command command);
// What a session hands its driver to route (core/router.h): an engine command, stats or a signal
// command. The rest (ping, auth, stable-ref) the session answers itself.
bool is_routed_command(Command command);
Namespace command_namespace(Command command);

// Numeric bounds of the protocol (reference 1.3).
inline constexpr std::int64_t kMaxSeconds = 9'223'372'036;  // INT64_MAX / 1e9
inline constexpr std::int64_t kMaxSemaphoreLimit = 1'048'576;
// The one rule for a request's numbers, whichever way it came (TCP, HTTP, the replicated log,
// the client library): a wait of 0..kMaxSeconds, a lease of 0 (the server's default) or
// 1..kMaxSeconds, a semaphore limit of 1..kMaxSemaphoreLimit. Each door words its own refusal.
constexpr bool timeout_in_bounds(std::int64_t s) { return s >= 0 && s <= kMaxSeconds; }
constexpr bool lease_in_bounds(std::int64_t s) { return s >= 0 && s <= kMaxSeconds; }
constexpr bool limit_in_bounds(std::int64_t n) { return n >= 1 && n <= kMaxSemaphoreLimit; }
// A stable ref (reference 1.3): 1 to 64 bytes, each printable ASCII (0x20-0x7E).
inline constexpr std::size_t kMaxStableRefBytes = 64;
bool is_valid_stable_ref(std::string_view ref);

struct Request {
  Command command = Command::kPing;
  std::string key;             // without namespace prefix; empty for ping/stats/auth
  std::int64_t timeout_s = 0;  // l, sl, w, sw: 0..kMaxSeconds; 0 = try once
  std::int64_t lease_s = 0;    // l, sl, n, sn, e, se: 1..kMaxSeconds, or 0 = server default
  std::int64_t limit = 1;      // sl, se: 1..kMaxSemaphoreLimit; 1 for locks
  // r, sr, n, sn: the presented token, or nullopt when the text cannot be a token we issued
  // (wrong length, upper case, inner space...). Such a token never matches.
  std::optional<Token> token;
  std::string secret;  // auth: the trimmed secret
  // stable-ref: the ref. Engine commands: the session's stable ref, empty when it has none; with
  // it the engine keeps the session's slots for a while after it closes (--orphan-ttl), and an
  // acquire or enqueue with the same ref takes them back (docs/semantics.md, "Stable refs").
  std::string ref;
  // listen, unlisten: the queue group (the trimmed argument line), empty for none. signal: the
  // payload (the argument line as it came, spaces at either end kept; never blank).
  std::string text;
  // check, inspect, force-release: the namespace of the key.
  Namespace space = Namespace::kLock;
  // force-release: the fence of the one holder to free; 0 frees every holder.
  std::uint64_t fence = 0;
  // force-release: also end the key's running lock-delay, and start none for the holders it
  // frees, so that the queue moves on at once (docs/http-api.md, "Admin force-release").
  bool clear_delay = false;
  // lost-notify: on (true) or off.
  bool enable = false;
  // r, sr: a give-back (release_of) by a session that closed before its grant reached it. It
  // releases the token only while the giving session still holds it: a slot its close already
  // handed on (to a waiter with its stable ref) or that another session adopted stays where it
  // is. Never on the wire.
  bool give_back = false;

  bool operator==(const Request&) const = default;
};

// The namespace a keyed request names: its command's, or for check, inspect and force-release
// the one Request::space says.
Namespace request_namespace(const Request& request);

// The release (`r` or `sr`, a give-back) of the grant `token` that answered `granted_request`: how
// a session hands back a grant nobody will receive (its client left, or its request was
// abandoned).
Request release_of(const Request& granted_request, const Token& token);

enum class Status : std::uint8_t {
  kOk,
  kAcquired,
  kQueued,
  kTimeout,
  kError,
  kErrorAuth,
  kErrorMaxLocks,
  kErrorMaxWaiters,
  kErrorLimitMismatch,
  kErrorNotEnqueued,
  kErrorAlreadyEnqueued,
  kErrorLeaseExpired,
  kErrorDraining,
  // Cluster mode (docs/cluster.md): this node does not lead; `payload` is the leader's client
  // address (host:port), empty while no leader is known. On the wire: `error_not_leader [addr]`.
  kErrorNotLeader,
  // A listen the server-wide subscription cap refused (--max-subscriptions-total; ours, not
  // dflockd's: its only cap is per connection, answered `error`).
  kErrorMaxSubscriptions,
  // Not a wire status: the engine parked the request; its reply comes later as a Delivery.
  kParked,
};

std::string_view status_name(Status status);

// One reply line. Which fields are present depends on the shape:
//   status only                ok | queued | timeout | error...
//   token + seconds            ok <token> <lease> | acquired <token> <lease>
//   seconds only               ok <ttl>            (renew)
//                              ok <n>              (signal: its deliveries)
//                              ok <n>              (force-release: the holders it freed, and
//                                                   delay_cleared, never on the wire)
//   payload                    ok <json>           (stats)
//                              error_not_leader <host:port>   (cluster mode; payload may be empty)
struct Reply {
  Status status = Status::kError;
  std::optional<Token> token;
  // The lease of a grant, the new ttl of a renew, or a signal's deliveries; -1 when absent.
  std::int64_t seconds = -1;
  std::string payload;  // stats JSON
  // A force-release with Request::clear_delay: it ended a running lock-delay of the key. Only the
  // HTTP reply says so ({"released":N,"delay_cleared":true}); a force-release is never on the wire.
  bool delay_cleared = false;

  static Reply of(Status status) { return Reply{status, std::nullopt, -1, {}, false}; }
  static Reply granted(Status status, Token token, std::int64_t lease_s) {
    return Reply{status, token, lease_s, {}, false};
  }
  static Reply renewed(std::int64_t ttl_s) {
    return Reply{Status::kOk, std::nullopt, ttl_s, {}, false};
  }
  static Reply delivered(std::int64_t count) {
    return Reply{Status::kOk, std::nullopt, count, {}, false};
  }
  static Reply force_released(std::int64_t count, bool delay_cleared) {
    return Reply{Status::kOk, std::nullopt, count, {}, delay_cleared};
  }
  static Reply stats(std::string json) {
    return Reply{Status::kOk, std::nullopt, -1, std::move(json), false};
  }
  static Reply parked() { return of(Status::kParked); }
  static Reply not_leader(std::string leader_address) {
    return Reply{Status::kErrorNotLeader, std::nullopt, -1, std::move(leader_address), false};
  }

  bool is_grant() const { return token.has_value(); }
  bool operator==(const Reply&) const = default;
};

}  // namespace turnstile::core
