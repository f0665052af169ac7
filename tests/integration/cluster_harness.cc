#include "tests/integration/cluster_harness.h"

#include <signal.h>
#include <sys/mount.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>

namespace turnstile::integration {

std::optional<std::string> mount_small_disk(const std::string& dir, std::uint64_t bytes) {
  const std::string data = "size=" + std::to_string(bytes) + ",mode=0700";
  if (::mount("tmpfs", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, data.c_str()) != 0) {
    return "cannot mount a tmpfs on " + dir + ": " + std::strerror(errno);
  }
  return std::nullopt;
}

void unmount_small_disk(const std::string& dir) { ::umount2(dir.c_str(), MNT_DETACH); }

std::uint64_t fill_disk(const std::string& dir, const std::string& name, std::uint64_t leave) {
  std::ofstream out(dir + "/" + name, std::ios::binary | std::ios::app);
  const std::string chunk(64 * 1024, 'x');
  std::uint64_t written = 0;
  while (out) {
    struct statvfs fs {};
    if (::statvfs(dir.c_str(), &fs) != 0) break;
    const std::uint64_t free = static_cast<std::uint64_t>(fs.f_bavail) * fs.f_frsize;
    if (free <= leave) break;
    const std::uint64_t n = std::min<std::uint64_t>(chunk.size(), free - leave);
    out.write(chunk.data(), static_cast<std::streamsize>(n));
    out.flush();
    written += n;
  }
  return written;
}

LoopbackCluster::LoopbackCluster(LoopbackClusterOptions options)
    : options_(std::move(options)),
      ports_(options_.nodes),
      dirs_(options_.nodes),
      nodes_(options_.nodes),
      down_(options_.nodes, false),
      removed_(options_.nodes, false),
      joins_(options_.nodes, false),
      node_args_(options_.nodes) {
  if (options_.voters > options_.nodes) throw std::invalid_argument("more voters than nodes");
  for (std::size_t i = options_.voters; i < options_.nodes; ++i) joins_[i] = true;
  for (int attempt = 1;; ++attempt) {
    pick_ports();
    try {
      for (std::size_t i = 0; i < options_.nodes; ++i) make_dir(i);
      for (std::size_t i = 0; i < options_.voters; ++i) start(i);
      for (std::size_t i = 0; i < options_.voters; ++i) {
        // The HTTP port is bound after the client port's listening line.
        if (!nodes_[i]->wait_for_log("HTTP API listening", 10s)) {
          throw std::runtime_error("node " + std::to_string(i + 1) + ": no HTTP API");
        }
      }
      return;
    } catch (const std::runtime_error& e) {
      for (std::unique_ptr<Daemon>& node : nodes_) node.reset();
      for (std::size_t i = 0; i < options_.nodes; ++i) drop_dir(i);
      if (attempt >= options_.start_attempts) throw;
      std::fprintf(stderr, "cluster start failed (attempt %d), retrying: %s\n", attempt, e.what());
    }
  }
}

LoopbackCluster::~LoopbackCluster() {
  for (std::unique_ptr<Daemon>& node : nodes_) node.reset();
  for (std::size_t i = 0; i < options_.nodes; ++i) drop_dir(i);
}

void LoopbackCluster::make_dir(std::size_t i) {
  dirs_.at(i) = std::make_unique<TempDir>();
  if (options_.on_new_dir) options_.on_new_dir(dirs_[i]->path());
}

void LoopbackCluster::drop_dir(std::size_t i) {
  if (dirs_.at(i) == nullptr) return;
  if (options_.on_drop_dir) options_.on_drop_dir(dirs_[i]->path());
  dirs_[i].reset();
}

void LoopbackCluster::wipe(std::size_t i) {
  if (nodes_.at(i) != nullptr && nodes_[i]->running()) {
    throw std::logic_error("wipe of node " + std::to_string(i + 1) + ", which runs");
  }
  nodes_[i].reset();
  drop_dir(i);
  make_dir(i);
  joins_.at(i) = true;
  removed_.at(i) = false;
  down_.at(i) = true;
}

void LoopbackCluster::pick_ports() {
  std::set<int> taken;  // all distinct: the kernel may hand out a released port again
  auto pick = [&] {
    while (true) {
      const int port = unused_loopback_port();
      if (taken.insert(port).second) return port;
    }
  };
  for (Ports& ports : ports_) ports = Ports{pick(), pick(), pick()};
  peers_.clear();
  for (std::size_t i = 0; i < options_.voters; ++i) {
    if (!peers_.empty()) peers_ += ",";
    peers_ += std::to_string(i + 1) + "=" + raft_address(i) + "@" + address(i);
  }
}

std::string LoopbackCluster::address(std::size_t i) const {
  return "127.0.0.1:" + std::to_string(client_port(i));
}

std::string LoopbackCluster::raft_address(std::size_t i) const {
  return "127.0.0.1:" + std::to_string(raft_port(i));
}

std::chrono::milliseconds LoopbackCluster::election_timeout() const {
  std::chrono::milliseconds timeout = 1000ms;
  const std::vector<std::string>& args = options_.extra_args;
  for (std::size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--raft-election-timeout-ms") {
      timeout = std::chrono::milliseconds(std::stoi(args[i + 1]));
    }
  }
  return timeout;
}

Daemon& LoopbackCluster::node(std::size_t i) const {
  if (nodes_.at(i) == nullptr) throw std::out_of_range("node " + std::to_string(i + 1));
  return *nodes_[i];
}

void LoopbackCluster::start(std::size_t i, bool wait_until_listening) {
  DaemonOptions options;
  options.args = {"--port",           std::to_string(client_port(i)),
                  "--threads",        "2",
                  "--raft-dir",       raft_dir(i),
                  "--node-id",        std::to_string(i + 1),
                  "--raft-addr",      raft_address(i),
                  "--cluster-secret", "integration-secret",
                  "--http-port",      std::to_string(http_port(i))};
  if (!joins_.at(i)) {
    options.args.insert(options.args.end(), {"--cluster-peers", peers_, "--cluster-bootstrap"});
  }
  options.args.insert(options.args.end(), options_.extra_args.begin(), options_.extra_args.end());
  options.args.insert(options.args.end(), node_args_[i].begin(), node_args_[i].end());
  options.wait_until_listening = wait_until_listening;
  nodes_.at(i).reset();
  down_.at(i) = false;
  nodes_[i] = std::make_unique<Daemon>(options);
}

std::optional<int> LoopbackCluster::stop(std::size_t i, std::chrono::milliseconds timeout) {
  down_.at(i) = true;
  return node(i).stop(timeout);
}

void LoopbackCluster::terminate(std::size_t i) {
  node(i).signal(SIGTERM);
  down_.at(i) = true;
}

bool LoopbackCluster::kill(std::size_t i) {
  node(i).signal(SIGKILL);
  down_.at(i) = true;
  return node(i).wait_exit(5s).has_value();
}

void LoopbackCluster::sigstop(std::size_t i) {
  node(i).signal(SIGSTOP);
  down_.at(i) = true;
}

void LoopbackCluster::sigcont(std::size_t i) {
  node(i).signal(SIGCONT);
  down_.at(i) = false;
}

void LoopbackCluster::restart(std::size_t i) {
  stop(i);
  start(i);
}

bool LoopbackCluster::asked_by_leader(std::size_t i) {
  return nodes_[i] != nullptr && !down_[i] && !removed_[i] && nodes_[i]->running();
}

std::optional<std::size_t> LoopbackCluster::leader(std::chrono::milliseconds timeout,
                                                   std::chrono::milliseconds poll) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    for (std::size_t i = 0; i < options_.nodes; ++i) {
      if (!asked_by_leader(i)) continue;
      try {
        Client client(client_port(i));
        if (client.request("barrier", "_", "_", 3s) == "ok") return i;
      } catch (const std::runtime_error&) {
        // Not accepting connections (yet, or any more): not the leader now.
      }
    }
    std::this_thread::sleep_for(poll);
  }
  return std::nullopt;
}

}  // namespace turnstile::integration
