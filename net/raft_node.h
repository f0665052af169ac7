// RaftNode: one canonical-raft server (Debian libraft-dev 0.15, libuv back end) for turnstiled's
// cluster mode. It runs on its own thread with its own uv loop and knows nothing of locks: what
// the log means is the RaftStateMachine's business. The daemon's libevent threads talk to it only
// through the thread-safe calls below, which queue work for the raft thread (a mutex-protected
// queue and a uv_async_t wake-up).
//
// Storage: the data directory holds raft's own files (metadata1/2, segments, snapshots). start()
// loads it; a directory that does not load refuses start-up with a message that says what to do.
// Nothing here ever deletes or rewrites a file to make a damaged directory load: raft's
// auto-recovery, which drops a corrupt open segment and with it entries that may be committed,
// is turned off, and a directory whose two metadata files are both unreadable is refused before
// raft sees it (raft would delete them and forget its term and vote). Each command is stored
// framed (padded to a multiple of 8 bytes, which raft 0.15's network encoding needs); the state
// machine sees the command alone.
//
// Network: raft's traffic goes over TCP through our own transport (net/raft_transport.h), which
// authenticates every stream with the cluster secret before raft sees a byte of it.
//
// Proposals: propose() calls queued between two wake-ups of the raft thread go to raft as ONE
// raft_apply with several entries, so that they share one disk write and one fsync.
//
// The process must ignore SIGPIPE (turnstiled does): libuv writes to sockets with plain writev.
//
// Thread affinity: start(), stop() and the destructor on one owning thread (never the raft
// thread); propose(), barrier(), status(), transfer_leadership(), add_voter(), remove_voter()
// from any thread, the raft thread included. Every callback, and every RaftStateMachine call,
// runs on the raft thread: keep them short (they hold up heartbeats) and do not throw from them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/stats.h"

namespace turnstile::net {

struct RaftPeer {
  std::uint64_t id = 0;  // >= 1, unique in the cluster, never reused
  // host:port ([v6]:port) where that node listens for raft traffic, optionally followed by '@'
  // and its client address (stored in the configuration as given; only the part before '@' is
  // dialed).
  std::string raft_address;
};

struct RaftNodeConfig {
  std::uint64_t id = 0;
  // Where this node listens for raft traffic, as the other nodes reach it (host:port). It is
  // stored in the cluster's configuration, so it must be the same string the peers were given.
  std::string raft_address;
  // Where to bind, when it differs from raft_address (e.g. 0.0.0.0:7000 behind NAT); empty: bind
  // raft_address itself.
  std::string bind_address;
  std::string dir;  // the data directory; it must exist
  // The first voters, this node included. Read only when `bootstrap` is set and the directory
  // holds no file at all; afterwards the configuration lives in the log (add_voter,
  // remove_voter). So every node of a new cluster may start with bootstrap set and the same
  // peers, every time: a directory with state in it is never bootstrapped again.
  std::vector<RaftPeer> peers;
  bool bootstrap = false;
  // Every node of a cluster has the same secret: it authenticates every raft connection. Empty:
  // no authentication at all (the handshake still runs, with an empty key). Tests only.
  std::string secret;
  // Snapshots: one after every snapshot_threshold applied entries; the snapshot_trailing last
  // entries stay in the log, so that a follower that is only a little behind gets entries, not
  // the whole snapshot.
  unsigned snapshot_threshold = 1024;
  unsigned snapshot_trailing = 256;
  // The election timeout is raft's base: each wait is drawn between it and twice it.
  unsigned election_timeout_ms = 1000;
  unsigned heartbeat_timeout_ms = 100;
  // A peer that does not complete the handshake in this time is disconnected (and a connection
  // attempt that does not complete it is abandoned and retried). An incoming connection must
  // send its first message sooner: within 500 ms, or this if it is shorter.
  unsigned handshake_timeout_ms = 5000;
  // How long raft waits before it reconnects to a peer it could not reach.
  unsigned connect_retry_ms = 1000;
  // A node whose log has entries it has not stored, and whose stored index has not moved for this
  // long, reports it once (RaftStateMachine::log_cannot_be_written): its disk is full or failing.
  unsigned log_write_stall_ms = 5000;
  // start() gives up when the directory has not loaded in this long (a disk that hangs, or a file
  // libraft cannot finish reading): the raft thread is then left as it is, and the process must
  // exit (RaftNode::stuck()).
  unsigned start_timeout_ms = 120000;
  // Below this many free bytes in `dir`, start() refuses and a running node reports it once
  // (RaftStateMachine::log_cannot_be_written), before raft's own writes fail: libraft 0.15 fails
  // badly on a full disk (a leader stops storing its log but goes on leading, or the process
  // crashes in the library). 0: no check.
  std::uint64_t min_free_bytes = std::uint64_t{64} << 20;
  // Pre-vote (raft thesis 9.6): a node that was cut off, or removed, cannot depose a working
  // leader by starting elections in higher terms.
  bool pre_vote = true;
  // One line per event worth an operator's attention (refused peers, refused snapshots, ...).
  // Called on the raft thread. Empty: stderr.
  std::function<void(std::string)> log;
};

// What the log means. Every call comes from the raft thread, one at a time, never concurrently.
// RaftNode replays: after start() the state machine sees restore() of the newest snapshot in the
// directory (if any), then apply() of every committed entry after it. So give start() a state
// machine in its initial (empty) state.
class RaftStateMachine {
 public:
  virtual ~RaftStateMachine() = default;
  // A committed command, in log order, on every node. `index` is its raft index (gaps are the
  // entries that are raft's own: configuration changes and barriers).
  virtual void apply(std::uint64_t index, std::string_view command) = 0;
  // The whole state as bytes; raft writes them to disk and sends them to a follower that is too
  // far behind. Taken synchronously on the raft thread: it must be fast.
  virtual std::string snapshot() = 0;
  // Replace the whole state with a snapshot's bytes. False refuses them: the node then cannot
  // start (at start-up), or stays behind (a snapshot from the leader), and says so in the log.
  virtual bool restore(std::string_view bytes) = 0;
  // true once this node leads AND has applied a barrier of its own term, so that every entry
  // committed by earlier leaders is in the state machine (raft thesis 6.4): only then may a
  // leader answer from its state. false when it stops leading (only after a true).
  virtual void leadership_changed(bool /*leader*/) {}
  // The log cannot be written much longer: the directory's free space fell below
  // RaftNodeConfig::min_free_bytes, or nothing was stored for RaftNodeConfig::log_write_stall_ms
  // although entries wait (raft 0.15 reports no error for a leader's failed log write: it only
  // stops storing, while its heartbeats keep the others from electing another leader).
  // `why` says which, for the log. Called once.
  virtual void log_cannot_be_written(const std::string& /*why*/) {}
};

struct RaftStatus {
  std::uint64_t id = 0;
  std::uint64_t leader_id = 0;  // 0: no leader known
  std::uint64_t term = 0;
  std::uint64_t commit_index = 0;
  std::uint64_t last_index = 0;
  std::uint64_t snapshot_index = 0;  // last index covered by the newest snapshot, 0: none
  std::uint64_t applied_index = 0;
  core::RaftRole role = core::RaftRole::kUnavailable;
  std::string leader_raft_address;
  std::vector<std::uint64_t> voters;  // the current configuration's voters, ascending
  // Every server of the current configuration (voters, spares, standbys), by id, with its address
  // as stored there: "raftHost:port", or "raftHost:port@clientHost:port" for a node added with
  // its client address (add_voter).
  std::vector<RaftPeer> servers;
  // Counters since start(): commands handed to raft, and the raft_apply calls that carried them
  // (fewer calls than commands is batching at work).
  std::uint64_t proposals = 0;
  std::uint64_t raft_apply_calls = 0;
};

class RaftNode {
 public:
  // `fsm` must outlive the node.
  RaftNode(RaftNodeConfig config, RaftStateMachine& fsm);
  ~RaftNode();  // stop()
  RaftNode(const RaftNode&) = delete;
  RaftNode& operator=(const RaftNode&) = delete;

  // Loads the directory, bootstraps it when asked and empty, listens, and starts the raft thread.
  // nullopt on success, else one human-readable line (bad configuration, damaged directory,
  // address in use, ...). A node runs once: after stop(), or after start() failed, make a new
  // one.
  std::optional<std::string> start();
  // After start() failed: whether the directory is damaged, or its log lost entries this node
  // acknowledged (net/raft_directory.h): starting again cannot help; an operator must act.
  bool directory_damaged() const;
  // After start() failed: whether it gave up waiting for the directory to load
  // (RaftNodeConfig::start_timeout_ms). The raft thread still runs: the process must exit, and
  // this node is never destroyed (the thread uses it).
  bool stuck() const;

  // The outcome of a request, on the raft thread: the entry's raft index and an empty error, or
  // index 0 and why not. A proposal that fails with "leadership lost" may still be committed by
  // the next leader: its outcome is unknown, and only a later read of the state can tell.
  using IndexDone = std::function<void(std::uint64_t index, std::string error)>;

  // Appends `command` (not empty) to the log; `done` runs after it is committed and applied on
  // this node, or fails (e.g. "not leader; the leader is node 2 at 10.0.0.2:7000"). Commands from
  // one thread are appended in the order of the calls. Before start() succeeded or after stop(),
  // `done` runs at once on the calling thread with an error.
  void propose(std::string command, IndexDone done);
  // A barrier entry: `done` runs once it and everything before it are applied on this node.
  void barrier(IndexDone done);

  // A copy of what the raft thread last recorded (refreshed on every turn of its loop).
  RaftStatus status() const;

  // Hands leadership to the voter whose log is the most up to date. `done(true)` once that node
  // leads; false if this node does not lead, or the transfer did not happen within an election
  // timeout.
  void transfer_leadership(std::function<void(bool ok)> done);

  // Membership, one change at a time (a second one while one is pending is refused). add_voter
  // adds the node as a spare, then promotes it to voter once it has caught up with the log; if
  // the promotion fails the node stays a spare and add_voter may be retried. The new node must be
  // running, from an empty directory, without bootstrap. `raft_address` may carry the node's
  // client address after an '@' ("10.0.0.4:7000@10.0.0.4:6388"): it is stored in the
  // configuration (RaftStatus::servers) and the transport dials the part before the '@'.
  // remove_voter may remove the leader itself: raft (0.15, as Raft's section 4.2.2 says) keeps it
  // leading until the configuration without it is committed, then it steps down, and the others
  // elect a leader among themselves. A removed node that learned of its removal never stands for
  // election; one that did not is kept from raising the others' terms by pre-vote and by their
  // refusing votes while they hear from a leader. `done` gets an empty error on success.
  using ErrorDone = std::function<void(std::string error)>;
  void add_voter(std::uint64_t id, std::string raft_address, ErrorDone done);
  void remove_voter(std::uint64_t id, ErrorDone done);

  // Any thread: runs `fn` on the raft thread, in order with the other requests (dropped when the
  // node is not running). The state machine's owner uses it to reach what only that thread may
  // touch.
  void run(std::function<void()> fn);
  // On the raft thread only: runs `fn` there once after `delay_ms`, replacing the previous one.
  void wake_after(std::uint64_t delay_ms, std::function<void()> fn);

  // Closes raft (pending requests fail with an error), the sockets and the loop, and joins the
  // raft thread. Idempotent. From the raft thread itself (a callback) it only asks: the owner's
  // stop() or destructor then waits.
  void stop();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace turnstile::net
