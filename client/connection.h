// Connection: one TCP (or TLS) connection to a turnstile (or dflockd) server, and every command
// of the wire protocol as a typed call.
//
// Each call sends one request (three lines, encoded by core::encode_request) and reads its one
// reply line. A reply is waited for at most `reply_timeout`, plus the request's own timeout for
// the blocking commands (l, sl, rl, wl, w, sw, rw, ww). When no reply comes in time, or the
// connection fails, the call returns kIo and the connection is closed: a reply arriving later could
// otherwise be taken for the answer to the next request. `error_auth` and `error_draining` also
// close it (the server closes its side after sending them).
//
// Arguments are checked before anything is sent, with the server's rules (docs/protocol.md):
// a key is 1..256 bytes without space, tab, CR or LF; a token is 32 lowercase hex characters;
// timeouts are 0..9223372036 s, leases 1..9223372036 s (0 = the server's default), semaphore
// limits 1..1048576. A refused argument returns kInvalidArgument and sends nothing, so no key or
// token can inject a line into the stream.
//
// Locks belong to the connection that took them: with the server's default
// --auto-release-on-disconnect, closing (or destroying) the connection releases them.
//
// Lock-lost push (enable_lost_notify): once asked, the server writes a `lost <kind> <key> <token>
// <reason>` line whenever a slot this connection holds ends without its release (the lease ran
// out, an operator force-released it, an orphan of its stable ref was reclaimed). Such a line may
// arrive between a request and its reply; every read takes it aside (to the handler, or to the
// queue that take_lost_notices() empties) and goes on to the reply. A connection that never
// enables it reads exactly as before: nothing is pushed to it.
//
// Thread affinity: one thread at a time. A Connection is movable, not copyable.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "client/endpoint.h"
#include "client/result.h"
#include "core/loss.h"
#include "core/types.h"
#include "core/wire.h"

namespace turnstile::client {

class SignalConnection;

inline constexpr std::size_t kKeyMaxBytes = core::kKeyMaxBytes;  // core::key_problem's rule

// A grant: `ok <token> <lease>` (or `acquired <token> <lease>`).
struct Grant {
  core::Token token;
  Seconds lease{0};  // the lease the server granted, in whole seconds

  std::uint64_t fence() const { return token.fence.value; }
};

// The two modes of a read-write lock: kRead is shared (readers hold it together), kWrite is
// exclusive (a writer holds it alone). Read-write locks are a key space of their own, apart from
// locks and semaphores.
enum class RwMode : std::uint8_t { kRead, kWrite };

// "read" or "write".
std::string_view rw_mode_name(RwMode mode);

// The reply to `e` / `se` / `re` / `we`: granted at once (`acquired`, the lease is already running)
// or queued.
struct EnqueueResult {
  std::optional<Grant> acquired;  // nullopt: `queued`
};

// `stats`: the JSON object the server sent, as text.
struct StatsResult {
  std::string json;
};

// `inspect`: the key's holders and waiters, the JSON object the server sent, as text
// (docs/semantics.md, "inspect": kind, key, exists, limit, holders, waiters[, lock_delay_left_s]).
struct InspectResult {
  std::string json;
};

// One `lost <kind> <key> <token> <reason>` push line, read with core::parse_lost_line: the slot's
// namespace, key and token (its fence: token.fence), and why the server took it
// (core::LossReason: its lease ran out, an operator force-released it, or an orphan kept for
// this connection's stable ref ran out of time).
using LostNotice = core::LostSlot;

// Called with each `lost` line as it is read, on the thread that is reading (inside whichever
// call read it). It must not call the connection.
using LostHandler = std::function<void(const LostNotice&)>;

// Client-side argument checks, the server's rules (see the header comment).
Result<void> validate_key(std::string_view key);
Result<core::Token> parse_token(std::string_view text);
Result<void> validate_timeout(Seconds timeout);
Result<void> validate_lease(Seconds lease);  // 0 allowed: the server's default
Result<void> validate_limit(std::int64_t limit);

class Connection {
 public:
  // Connects, completes the TLS handshake and authenticates. Errors: kConnect (resolve, connect,
  // timeout), kTls (handshake, verification), kAuth (secret refused), kIo.
  static Result<Connection> connect(const Endpoint& endpoint, const ConnectOptions& options = {});

  Connection();
  ~Connection();
  Connection(Connection&& other) noexcept;
  Connection& operator=(Connection&& other) noexcept;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  bool is_open() const;
  const Endpoint& endpoint() const;
  void close();
  // Changes ConnectOptions::reply_timeout for later calls (the guards' renewal bounds each
  // renew by the time left on the lease).
  void set_reply_timeout(Milliseconds timeout);

  // Locks (`l r n e w`).
  Result<Grant> lock(std::string_view key, Seconds timeout, Seconds lease = Seconds{0});
  Result<void> release(std::string_view key, const core::Token& token);
  Result<Seconds> renew(std::string_view key, const core::Token& token, Seconds lease = Seconds{0});
  Result<EnqueueResult> enqueue(std::string_view key, Seconds lease = Seconds{0});
  Result<Grant> wait(std::string_view key, Seconds timeout);

  // Semaphores (`sl sr sn se sw`): `limit` holders at most; its creator fixes it.
  Result<Grant> sem_lock(std::string_view key, Seconds timeout, std::int64_t limit,
                         Seconds lease = Seconds{0});
  Result<void> sem_release(std::string_view key, const core::Token& token);
  Result<Seconds> sem_renew(std::string_view key, const core::Token& token,
                            Seconds lease = Seconds{0});
  Result<EnqueueResult> sem_enqueue(std::string_view key, std::int64_t limit,
                                    Seconds lease = Seconds{0});
  Result<Grant> sem_wait(std::string_view key, Seconds timeout);

  // Read-write locks (`rl wl`, `rr wr`, `rn wn`, `re we`, `rw ww`): `mode` picks the read or the
  // write form. Readers share the key; a writer holds it alone; the queue is FIFO, and a queued
  // writer keeps later readers waiting. A token is released or renewed only in the mode that
  // granted it (the other mode's command is refused: kProtocol), and rw_wait only follows an
  // rw_enqueue of the same mode (else kNotEnqueued).
  Result<Grant> rw_lock(std::string_view key, RwMode mode, Seconds timeout,
                        Seconds lease = Seconds{0});
  Result<void> rw_release(std::string_view key, RwMode mode, const core::Token& token);
  Result<Seconds> rw_renew(std::string_view key, RwMode mode, const core::Token& token,
                           Seconds lease = Seconds{0});
  Result<EnqueueResult> rw_enqueue(std::string_view key, RwMode mode, Seconds lease = Seconds{0});
  Result<Grant> rw_wait(std::string_view key, RwMode mode, Seconds timeout);

  Result<void> ping();
  Result<StatsResult> stats();

  // The server-side fence check (`check key <token> <kind>`): the seconds the token's lease has
  // left (rounded up) while it holds `key` in `space`; kLeaseExpired when it does not (never
  // granted, released, expired or forced out). In a cluster only the leader answers it.
  Result<Seconds> check(core::Namespace space, std::string_view key, const core::Token& token);
  // `inspect key <kind>`: the key's holders (by fence, never whole tokens) and waiters. Changes
  // nothing; a key that does not exist answers "exists":false.
  Result<InspectResult> inspect(core::Namespace space, std::string_view key);

  // `lost-notify _ on`: from the `ok` on, every slot this connection loses is pushed as a `lost`
  // line (see the header comment). Each one read goes to `handler`, or, without one, to a queue
  // of at most kLostQueueMax notices (later ones are dropped) that take_lost_notices() empties.
  // A server that does not know the command (dflockd) answers kProtocol, and nothing changes.
  Result<void> enable_lost_notify(LostHandler handler = {});
  // `lost-notify _ off`: nothing is pushed after its `ok`. The queue is kept.
  Result<void> disable_lost_notify();
  bool lost_notify_enabled() const;
  static constexpr std::size_t kLostQueueMax = 4096;
  std::vector<LostNotice> take_lost_notices();
  // Reads the push lines that arrive while no request is in flight, waiting at most `wait` for
  // the first: each goes to the handler or the queue. Returns how many were read (0 when none
  // came in time). A line that is not a push (`error_draining` at shutdown) or the connection
  // ending is returned as its error, and closes the connection, as the next call would report it.
  Result<std::size_t> poll_lost_notices(Milliseconds wait);

  // Cluster surface (docs/cluster.md), answered by one node too. `stable-ref <ref>`: binds the
  // connection's stable ref, once (1..64 bytes of 0x20-0x7E; anything else is kInvalidArgument
  // and sends nothing). `barrier`: ok once everything answered before it has taken effect; a
  // follower answers kNotLeader.
  Result<void> stable_ref(std::string_view ref);
  Result<void> barrier();
  // The leader named by the last `error_not_leader <host:port>` reply on this connection; nullopt
  // when none named one (or the address did not parse).
  std::optional<Endpoint> leader_hint() const;

  // Sends raw request bytes and reads one reply line, with a reply deadline of `timeout`. For
  // tests and tools; it does no validation.
  Result<std::string> raw_request(std::string_view bytes, Milliseconds timeout);

  struct Impl;  // implementation detail (connection.cc)

 private:
  // SignalConnection (signal_connection.h) connects, handshakes and authenticates through
  // connect(), then reads a stream where push frames and replies interleave, so it uses the
  // socket line by line instead of one request and its reply at a time.
  friend class SignalConnection;
  // A guard's renewal thread waits for `lost` pushes on the socket and for its own wake-up at
  // once (poll on native_handle() and an eventfd), then reads them with poll_lost_notices(0).
  friend class Guard;
  // The socket, for poll(); -1 when closed.
  int native_handle() const;
  // Sends `bytes` within `timeout`; closes the connection on failure.
  Result<void> send_bytes(std::string_view bytes, Milliseconds timeout);
  // Reads what has arrived, waiting at most `wait` for the first byte, and appends each complete
  // line (without its '\n' or a '\r' before it) to `lines`. Nothing arriving in time is no
  // error. Closes the connection on failure: EOF, an I/O or TLS error, a line over 2 MiB.
  Result<void> read_lines(Milliseconds wait, std::vector<std::string>& lines);
  // The typed error a reply status stands for (as every call reports it), or nullopt for ok,
  // acquired and queued.
  static std::optional<Error> reply_status_error(core::Status status);

  explicit Connection(std::unique_ptr<Impl> impl);
  Impl* open_impl();

  std::unique_ptr<Impl> impl_;
};

}  // namespace turnstile::client
