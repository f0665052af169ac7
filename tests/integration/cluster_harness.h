// A cluster of turnstiled nodes on loopback for integration tests (docs/cluster.md): every node
// gets a client, a raft and an HTTP port (picked with unused_loopback_port()) and its own
// temporary raft directory. Nodes 0..voters-1 are the initial voters, started with
// `--cluster-peers <them> --cluster-bootstrap`; the others (up to `nodes`) start empty, to be
// added at run time. Every node runs with `--threads 2 --cluster-secret integration-secret`, its
// ports and directory, then the test's own `extra_args`.
//
// Ports are picked free and bound later by the daemons: another process may take one meanwhile,
// and a node then fails to start. The constructor retries such a start with new ports and new
// directories, up to `start_attempts` times, then throws std::runtime_error.
//
// A caller that wants something of every raft directory (the soak mounts a size-limited tmpfs on
// each, to fill one up) gives `on_new_dir`, called with the empty directory before a node first
// starts from it, and `on_drop_dir`, called once no node runs from it any more, before it is
// deleted.
//
// Construct, use and destroy it on one thread (Daemon's rule).
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tests/integration/harness.h"

namespace turnstile::integration {

struct LoopbackClusterOptions {
  std::size_t nodes = 3;   // nodes with ports and directories (node ids 1..nodes)
  std::size_t voters = 3;  // nodes 0..voters-1 bootstrap the cluster and start at construction
  std::vector<std::string> extra_args;  // appended to every node's flags
  int start_attempts = 3;
  std::function<void(const std::string& dir)> on_new_dir = nullptr;   // see the top of this file
  std::function<void(const std::string& dir)> on_drop_dir = nullptr;  // see the top of this file
};

// Small disks, for the full-disk tests: a tmpfs of `bytes` mounted on the existing directory
// `dir`. Needs root (CAP_SYS_ADMIN); nullopt once mounted, else why it could not be.
std::optional<std::string> mount_small_disk(const std::string& dir, std::uint64_t bytes);
// Lazily (MNT_DETACH), so that a process still in it cannot keep the mount.
void unmount_small_disk(const std::string& dir);
// Writes the file `dir`/`name` until the directory's free space is at most `leave` bytes (or
// the disk refuses); the bytes written.
std::uint64_t fill_disk(const std::string& dir, const std::string& name, std::uint64_t leave);

class LoopbackCluster {
 public:
  explicit LoopbackCluster(LoopbackClusterOptions options = {});
  ~LoopbackCluster();
  LoopbackCluster(const LoopbackCluster&) = delete;
  LoopbackCluster& operator=(const LoopbackCluster&) = delete;

  std::size_t size() const { return options_.nodes; }
  int client_port(std::size_t i) const { return ports_.at(i).client; }
  int raft_port(std::size_t i) const { return ports_.at(i).raft; }
  int http_port(std::size_t i) const { return ports_.at(i).http; }
  std::string address(std::size_t i) const;       // "127.0.0.1:<client port>"
  std::string raft_address(std::size_t i) const;  // "127.0.0.1:<raft port>"
  const std::string& raft_dir(std::size_t i) const { return dirs_.at(i)->path(); }
  // "1=127.0.0.1:R@127.0.0.1:P,..." of the initial voters.
  const std::string& peers() const { return peers_; }
  // The nodes' raft election timeout: the last --raft-election-timeout-ms of `extra_args`, else
  // the daemon's default (1000 ms). A follower stands for election after between one and two of
  // them without a leader.
  std::chrono::milliseconds election_timeout() const;

  // Node i's process (throws std::out_of_range if it was never started).
  Daemon& node(std::size_t i) const;

  // (Re)starts node i from its directory; `wait_until_listening` false returns at once (for a
  // start that is meant to fail). Throws like Daemon does.
  void start(std::size_t i, bool wait_until_listening = true);
  // SIGTERM and wait: Daemon::stop(). The node is left out of leader() from then on.
  std::optional<int> stop(std::size_t i, std::chrono::milliseconds timeout = 5s);
  // SIGTERM without waiting (a leader that hands over); left out of leader().
  void terminate(std::size_t i);
  // SIGKILL and wait up to 5 s; true once it exited. Left out of leader().
  bool kill(std::size_t i);
  // SIGSTOP (left out of leader()) and SIGCONT (back in).
  void sigstop(std::size_t i);
  void sigcont(std::size_t i);
  // stop() then start().
  void restart(std::size_t i);
  // Node i is no longer a voter but runs on: leader() leaves it out.
  void mark_removed(std::size_t i) { removed_.at(i) = true; }
  // Node i, which must not be running, gets a new empty directory and from then on starts as a
  // node to be added (without --cluster-peers and --cluster-bootstrap), like nodes from `voters`
  // on. Its removed mark goes.
  void wipe(std::size_t i);
  // Flags for node i alone, appended after `extra_args` from its next start on.
  void set_node_args(std::size_t i, std::vector<std::string> args) {
    node_args_.at(i) = std::move(args);
  }

  // The node whose `barrier` is answered `ok` (a ready leader: the barrier was proposed and
  // applied through the log), among the started, running nodes that were not stopped, killed or
  // removed, polling every `poll` up to `timeout`.
  std::optional<std::size_t> leader(std::chrono::milliseconds timeout = 15s,
                                    std::chrono::milliseconds poll = 100ms);

 private:
  struct Ports {
    int client = 0;
    int raft = 0;
    int http = 0;
  };
  void pick_ports();
  void make_dir(std::size_t i);
  void drop_dir(std::size_t i);
  bool asked_by_leader(std::size_t i);

  LoopbackClusterOptions options_;
  std::vector<Ports> ports_;
  std::vector<std::unique_ptr<TempDir>> dirs_;
  std::string peers_;
  std::vector<std::unique_ptr<Daemon>> nodes_;
  std::vector<bool> down_;
  std::vector<bool> removed_;
  std::vector<bool> joins_;  // starts without --cluster-peers and --cluster-bootstrap
  std::vector<std::vector<std::string>> node_args_;
};

}  // namespace turnstile::integration
