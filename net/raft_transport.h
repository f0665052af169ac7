// RaftTransport: raft's transport interface (raft/uv.h) over TCP, with turnstile's authenticated
// handshake on every stream, for RaftNode (net/raft_node.h).
//
// Every new connection first runs a mutual challenge-response handshake keyed by the cluster
// secret (HMAC-SHA256 over both sides' nonces and the connecting node's identity); only an
// authenticated stream reaches raft. raft's stock TCP transport would read an unauthenticated
// peer's preamble itself, allocating whatever length that peer announces and waiting on it with
// no time limit; here a stranger is never read beyond one fixed-size handshake message.
//
// Unfinished incoming handshakes hold slots (core/handshake_slots.h; docs/cluster.md, "Strangers
// on the raft port"): 64 at most, 8 from one source, 16 of them only for the sources of known
// peers (the configuration's raft addresses, the addresses this node dials, the sources of
// connections that proved the secret); when there is no room the oldest unfinished one is closed.
// A connection must send its first message within 500 ms (or the handshake timeout, if shorter),
// and one whose first bytes are not the handshake's is closed at once.
//
// Thread affinity: the uv loop's thread only (construction and destruction included).
#pragma once

#include <uv.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/raft_handshake.h"
#include "net/raft_address.h"

// canonical raft's headers have no extern "C" of their own (uv.h has).
extern "C" {
#include <raft.h>
#include <raft/uv.h>
}

namespace turnstile::net {

// The longest raft address the handshake carries (its field holds this many bytes and a NUL).
constexpr std::size_t kRaftAddressMax = core::raft_handshake::kAddressMax;

class RaftTransport {
 public:
  using LogFn = std::function<void(const std::string&)>;

  // `secret` keys the handshake (empty: an empty key, tests only); `bind_address` empty: listen
  // on the address raft gives init(); `timeout_ms`: a handshake not completed in this time is
  // dropped.
  RaftTransport(uv_loop_t* loop, std::string secret, std::string bind_address, unsigned timeout_ms,
                LogFn log);
  ~RaftTransport();
  RaftTransport(const RaftTransport&) = delete;
  RaftTransport& operator=(const RaftTransport&) = delete;

  // What raft_uv_init takes.
  raft_uv_transport* raft();
  // Why listening failed, for the start-up error; empty if it did not.
  const std::string& listen_error() const;
  // When raft never took the transport (raft_init failed): close the listener handle so that
  // the loop can end.
  void close_unused();
  // The raft addresses of the configuration's servers: connections from their hosts count as a
  // known peer's. Addresses learned before are kept.
  void learn_peers(const std::vector<std::string>& configured);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace turnstile::net
