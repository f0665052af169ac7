// HandshakeSlots: which unfinished incoming raft handshakes a node holds, so that strangers who
// open connections to the raft port and say nothing cannot keep the cluster's own nodes out.
//
// A connection takes a slot when it is accepted and gives it back (release()) once it has proved
// it knows the cluster secret, or when it is closed. The policy:
//
//   - at most `capacity` slots are held at once;
//   - at most `per_source_max` of them by one source (an opaque key: the driver decides what one
//     source is, e.g. one IPv4 address or one IPv6 /64);
//   - `reserved_for_known` of them are never held by strangers. A source is known once learn()
//     named it (the driver names its configured peers' addresses, the addresses it dials and the
//     sources of connections that proved the secret); every other source is a stranger;
//   - when there is no room, the new connection takes the slot of the oldest unfinished one: of
//     its own source, when that source holds its limit; else of the oldest stranger. A known
//     source finding every slot held takes the oldest stranger's slot, or if none, the oldest
//     slot. A stranger is refused only when there is no room and no stranger holds a slot;
//   - every slot has a deadline, `first_message` after its admission: a connection that has not
//     sent its first handshake message by then is closed. The driver enforces it with the
//     deadline admit() hands out.
//
// So a known source is always admitted, no stranger's admission ever takes a known source's slot,
// and a flood of strangers costs at most `capacity` connections at a time, each for at most
// `first_message`. A stranger that shares a source with a peer (the same host, the same NAT)
// counts as that peer; it can take that source's slots in turn, never more than the source's
// share, and a peer's handshake, which ends in a round trip, only loses its slot to
// `per_source_max` newer connections from its own source within that time.
//
// Invariants (checked): held() <= capacity; held_by_strangers() <= capacity - reserved_for_known;
// held_from(s) <= per_source_max for every s.
//
// Pure and single-threaded: the raft transport (net/raft_transport.cc) drives it with the loop's
// time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "core/time.h"

namespace turnstile::core {

struct HandshakeSlotsConfig {
  std::size_t capacity = 64;            // unfinished handshakes held at once, >= 1
  std::size_t per_source_max = 8;       // of them from one source, >= 1
  std::size_t reserved_for_known = 16;  // of them never held by strangers, <= capacity
  std::size_t known_max = 1024;         // sources remembered as known; later ones are not
  Duration first_message = Duration::milliseconds(500);  // from admission to the first message
};

// A held slot's id: never 0, never reused.
using HandshakeSlot = std::uint64_t;

struct [[nodiscard]] HandshakeAdmission {
  bool admitted = false;
  HandshakeSlot slot = 0;  // when admitted, for release()
  Instant deadline;        // when admitted: the first message must be in by then
  // A slot taken back to make room (already released): the driver closes its connection.
  std::optional<HandshakeSlot> evicted;
  bool known = false;  // whether the source was known
};

class HandshakeSlots {
 public:
  explicit HandshakeSlots(HandshakeSlotsConfig config = {});

  // `source` is a peer's from now on; false when it could not be remembered (known_max reached).
  bool learn(std::string_view source);
  bool is_known(std::string_view source) const;

  // A connection from `source` was accepted at `now`.
  HandshakeAdmission admit(std::string_view source, Instant now);
  // The connection holding `slot` finished its handshake or was closed. A slot that is not held
  // (it was evicted, or released already) is ignored.
  void release(HandshakeSlot slot);

  std::size_t held() const { return held_.size(); }
  std::size_t held_by_strangers() const;
  std::size_t held_from(std::string_view source) const;
  std::size_t known_count() const { return known_.size(); }
  const HandshakeSlotsConfig& config() const { return config_; }

 private:
  struct Held {
    std::string source;
    Instant deadline;
  };
  using HeldMap = std::map<HandshakeSlot, Held>;  // by id: oldest first

  // The oldest held slot matching `pick`, or end().
  template <typename Pick>
  HeldMap::iterator oldest(Pick pick);
  void drop(HeldMap::iterator it);
  void check() const;

  HandshakeSlotsConfig config_;
  HeldMap held_;
  std::map<std::string, std::size_t, std::less<>> per_source_;  // held slots per source, > 0
  std::set<std::string, std::less<>> known_;
  HandshakeSlot next_slot_ = 1;
};

}  // namespace turnstile::core
