// SignalHub: every listener of a process and every signal's fan-out (docs/protocol.md, "Signals";
// dflockd v1.11-v1.16). One hub serves all shards: a signal is matched once, against one index
// (core/signal_index.h), and the router (core/router.h) sends each shard with a listener one
// message holding the frame and the sessions it goes to. So a signal costs one lookup and one
// hand-off per shard that has a matching listener, and a queue group is one group across shards,
// with one round-robin.
//
// Rules (the reference's, and our bounds):
//  * listen: `ok`; a duplicate (same pattern and group) changes nothing and does not count
//    against either cap. Past the session's `max_subscriptions`, `error` (dflockd's answer);
//    past `max_subscriptions_total`, every session's together, `error_max_subscriptions` (ours:
//    a bound on the memory all listeners hold). unlisten: `ok`, subscribed or not.
//  * signal: the reference's four delivery steps (SignalIndex::plan). Its reply counts the
//    deliveries, group deliveries included.
//  * Slow consumers, in two places. A connection may hold at most `queue_max` frames it could
//    not write to its socket yet; one more closes it (core::Session, SessionConfig::
//    signal_queue_max: dflockd's rule, measured where the frames wait). Its driver writes it as
//    soon as more than `queue_max` frames wait, not at the end of its loop turn, so a listener
//    that has gone or does not read costs its thread at most that many frames beyond what its
//    socket took, however many reach it at once; what reaches it after its close is dropped
//    (core::Router, Session::push_signal). The hub counts, per listener, the frames it planned
//    that its driver has not reported written (written()): those waiting at the connection and
//    those still on their way across threads. A group passes over a member with `queue_max` or
//    more of them while another member keeps up. A listener with `queue_max * kTransitFactor` of
//    them is closed here (a plain one, or a group's member whose turn it was when no member had
//    room): frames pile up in the server's own pipes, so memory stays bounded even for a
//    listener whose thread cannot keep up. Their subscriptions go at once, so they receive
//    nothing more.
//  * close: a session's subscriptions go with it.
//
// SignalBroker is what a router calls. SignalHub is it, single-threaded like the rest of the core
// (the simulator and the tests use it as it is); the daemon puts a lock around one hub that all
// its shards share (net/signal_bus.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/protocol.h"
#include "core/signal_index.h"
#include "core/stats.h"
#include "core/types.h"

namespace turnstile::core {

struct SignalHubConfig {
  std::size_t max_subscriptions = 0;  // per session; 0: no cap (--max-subscriptions)
  // In all, every session's together; 0: no cap (--max-subscriptions-total).
  std::size_t max_subscriptions_total = 0;
  std::size_t queue_max = 64;  // frames not yet written, per listener (--signal-queue)
};

// Frames on their way to a listener, or waiting at it, beyond which the hub closes it: this many
// times its queue.
inline constexpr std::size_t kTransitFactor = 64;

// One signal's outcome: its frame, who gets it (in delivery order; a session twice when a group
// picked it beside its plain subscription) and who is closed as a slow consumer.
struct SignalFanout {
  std::shared_ptr<const std::string> frame;  // `sig <channel> <payload>\n`
  std::vector<SessionId> deliver;
  std::vector<SessionId> close;
};

// Counters for /metrics.
struct SignalCounters {
  std::int64_t subscriptions = 0;    // now
  std::uint64_t published = 0;       // signals
  std::uint64_t delivered = 0;       // frames queued for listeners
  std::uint64_t slow_consumers = 0;  // listeners closed because their queue was full (here, or by
                                     // their session: note_slow_consumer)
  std::uint64_t refused_per_session = 0;  // listens past max_subscriptions
  std::uint64_t refused_total = 0;        // listens past max_subscriptions_total
};

class SignalBroker {
 public:
  virtual ~SignalBroker() = default;
  // `pattern` valid (core/signal_pattern.h), `group` empty for none. kOk, kError (the session's
  // cap) or kErrorMaxSubscriptions (the server's).
  virtual Status listen(SessionId session, std::string_view pattern, std::string_view group) = 0;
  virtual void unlisten(SessionId session, std::string_view pattern, std::string_view group) = 0;
  // `channel` valid; fills `out` and returns the number of deliveries.
  virtual std::size_t publish(std::string_view channel, std::string_view payload,
                              SignalFanout& out) = 0;
  // `frames` of the session's frames left for its socket.
  virtual void written(SessionId session, std::size_t frames) = 0;
  virtual void close(SessionId session) = 0;
  // Every pattern and group with its listener count, sorted (stats' signal_channels).
  virtual std::vector<SignalChannelStats> channels() = 0;
  virtual SignalCounters counters() = 0;
  // A signal published here by a client (`signal`, not `signal-peer`), after publish(): for the
  // other nodes of a cluster (docs/cluster.md, "Signals in a cluster"). Asynchronous: nothing of
  // it is in the reply's count. By default nothing: one node, the simulator, the tests.
  virtual void forward(std::string_view channel, std::string_view payload) {
    (void)channel;
    (void)payload;
  }
};

class SignalHub final : public SignalBroker {
 public:
  explicit SignalHub(const SignalHubConfig& config) : config_(config) {}

  Status listen(SessionId session, std::string_view pattern, std::string_view group) override;
  void unlisten(SessionId session, std::string_view pattern, std::string_view group) override;
  std::size_t publish(std::string_view channel, std::string_view payload,
                      SignalFanout& out) override;
  void written(SessionId session, std::size_t frames) override;
  void close(SessionId session) override;
  std::vector<SignalChannelStats> channels() override;
  SignalCounters counters() override;

  // A session closed itself as a slow consumer (counted in counters().slow_consumers).
  void note_slow_consumer() { ++counters_.slow_consumers; }
  // Frames of `session` not yet written (0 for a session that does not listen).
  std::size_t queued(SessionId session) const;

 private:
  SignalHubConfig config_;
  SignalIndex index_;
  std::unordered_map<std::uint64_t, std::size_t> queued_;  // listeners with frames in flight
  SignalIndex::Plan plan_;
  SignalCounters counters_;
};

}  // namespace turnstile::core
