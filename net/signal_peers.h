// SignalPeers: a cluster node's links to the other members, for signals (docs/cluster.md,
// "Signals in a cluster"). Signals are not state: they do not go through raft. A signal a client
// publishes on this node (`signal`) is delivered here by the hub, then handed to forward(); this
// class sends it to every other member as `signal-peer <channel> <payload>` over an ordinary
// client connection to that member's client address, and the member delivers it to its own
// listeners only (core::Router never forwards a signal-peer, so nothing goes round twice).
//
// Rules:
//  * One link per other member of the start-up --cluster-peers (this node's id left out). A
//    member added or removed at run time is not followed: the list is the start-up one.
//  * A link connects, in TLS when this node's listener is TLS, and sends `auth` first when the
//    node has an --auth-token (every member is expected to share it). A link that fails or
//    breaks is tried again after a back-off (100 ms, doubling, at most 2 s).
//  * forward() is called from any shard's thread: it copies the signal into a bounded queue
//    (queue_max signals) and wakes the link thread; when the queue is full the signal is
//    dropped for every member. The thread writes each queued signal to every connected link,
//    pipelined, and reads the replies only to count errors.
//  * A signal for a member whose link is down, or whose link has more than backlog_max bytes not
//    yet taken by the kernel (a member that stopped reading), is dropped for that member.
//    Delivery is at most once, as for a listener that was not connected.
//  * With --idle-timeout, each link sends `ping` every half of it, so that members keep it.
//
// Counters (counters()) count copies: a signal sent to two members counts two.
//
// Thread affinity: forward() and counters() from any thread; the rest from the thread that owns
// the server (start(), stop(), the destructor).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace turnstile::net {

struct Config;

struct SignalPeersOptions {
  struct Peer {
    std::uint64_t id = 0;
    std::string client_address;  // canonical host:port or [v6]:port (net/config.h)
  };
  std::vector<Peer> peers;                // the other members
  std::optional<std::string> auth_token;  // sent as `auth` on every new link
  bool tls = false;                       // the links are TLS
  // Trusted besides the system's default certificates, when tls: this node's own certificate
  // chain (--tls-cert). A member's certificate must also name the host or IP it is reached at.
  std::string tls_trust_file;
  std::size_t queue_max = 4096;               // signals waiting for the link thread
  std::size_t backlog_max = 4 * 1024 * 1024;  // unsent bytes per link
  std::int64_t ping_interval_ms = 0;          // 0: no pings
  std::int64_t reconnect_min_ms = 100;        // back-off after a failure, doubling...
  std::int64_t reconnect_max_ms = 2000;       // ...up to this
};

// The options of a cluster node: the other members of config.cluster.peers, its auth token, TLS
// when the node's listener is (`tls`).
SignalPeersOptions signal_peers_options(const Config& config, bool tls);

struct SignalPeersCounters {
  std::uint64_t forwarded = 0;    // signal-peer requests written to a member's link
  std::uint64_t dropped = 0;      // copies not sent: the queue was full, the link down or backed up
  std::uint64_t peer_errors = 0;  // failed connects, broken links, replies that were not `ok`
  std::uint64_t connected = 0;    // links up now
};

class SignalPeers {
 public:
  explicit SignalPeers(SignalPeersOptions options);
  ~SignalPeers();  // stop()
  SignalPeers(const SignalPeers&) = delete;
  SignalPeers& operator=(const SignalPeers&) = delete;

  // Starts the link thread; an error text when it cannot (no event base, no TLS context).
  std::optional<std::string> start();
  // Stops the thread and closes the links; signals still queued are dropped (not counted).
  void stop();

  // Any thread: queue one signal for every other member.
  void forward(std::string_view channel, std::string_view payload);

  SignalPeersCounters counters() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace turnstile::net
