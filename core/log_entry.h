// LogEntry: one entry of the replicated log of a turnstiled cluster (docs/cluster.md). Every
// change to the lock state goes through the log as commands, and every replica applies the same
// entries to the same state (core/replica.h), so an entry carries everything that would
// otherwise differ between machines: the time at which its commands happen (the leader's clock,
// never behind an earlier entry, also across leaders) and the seed of the random half of every
// token it mints.
//
// The encoding is ours and versioned: a version byte, then little-endian integers and
// length-prefixed strings. decode_entry() takes any bytes (a corrupt log, a hostile peer) and
// answers nullopt for anything that is not exactly one well-formed entry; it never trusts a length
// it has not checked against what is left.
//
// Thread affinity: plain values and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/protocol.h"
#include "core/time.h"
#include "core/types.h"

namespace turnstile::core {

// What the routers of one node would do to the engine, as log commands.
namespace command {
struct Submit {  // a session's engine command (is_engine_command)
  SessionId session;
  Request request;
  bool operator==(const Submit&) const = default;
};
struct Close {  // the session is gone (Engine::close_session)
  SessionId session;
  bool auto_release = true;
  // The leader's --orphan-ttl, in the entry so that every replica keeps orphans alike whatever
  // its own flags say.
  Duration orphan_ttl = Duration::zero();
  bool operator==(const Close&) const = default;
};
struct Cancel {  // its parked request is withdrawn (Engine::cancel_parked)
  SessionId session;
  bool operator==(const Cancel&) const = default;
};
struct Tick {  // the deadlines due at the entry's time (leases, wait timeouts, GC)
  bool operator==(const Tick&) const = default;
};
}  // namespace command

using LogCommand = std::variant<command::Submit, command::Close, command::Cancel, command::Tick>;

struct LogEntry {
  Instant time;            // when every command of the entry happens
  std::uint64_t salt = 0;  // seeds the random half of the tokens the entry mints
  std::vector<LogCommand> commands;
  bool operator==(const LogEntry&) const = default;
};

// Version 5 added a force-release's clear-delay flag; versions 2 to 4 are still read.
inline constexpr std::uint8_t kLogEntryVersion = 5;

std::string encode_entry(const LogEntry& entry);
// The entry `bytes` encode, or nullopt when they are not exactly one well-formed entry of a
// version this build reads (a Submit must carry an engine command with a valid key).
std::optional<LogEntry> decode_entry(std::string_view bytes);

// LogClock: the time a leader writes into its entries (docs/cluster.md, "Time").
//
// Time in the log pauses while the cluster has no leader: a new leader continues from the last
// entry's time and adds only what its own clock has advanced since it took over. So the election
// gap costs no holder any lease time (a holder cannot renew while there is no leader, and must not
// lose its lock for it), leaders' clocks never have to agree, and time in the log never goes
// backwards. The price: a lease can outlive its TTL in real time by the length of the leaderless
// gaps it spans; fences, not leases, protect a resource from a holder that has lost its lock.
class LogClock {
 public:
  // This node became leader when its clock read `clock`, over a log whose last entry is at
  // `last_entry_time` (Instant::min() for an empty log).
  void take_over(Instant clock, Instant last_entry_time);
  // The time of the next entry, its clock reading `clock` (never behind an earlier result, also
  // when the clock steps back).
  Instant next(Instant clock);
  // What next(clock) would return, without taking it.
  Instant peek(Instant clock) const;
  // The clock reading at which log time reaches `log_time` (for a driver that waits for a
  // deadline in log time).
  Instant clock_at(Instant log_time) const { return log_time - offset_; }

 private:
  Duration offset_ = Duration::zero();  // log time = clock + offset_
  Instant last_ = Instant::min();
};

}  // namespace turnstile::core
