#include "tests/integration/cluster_harness.h"

#include <signal.h>

#include <cstdio>
#include <set>
#include <stdexcept>
#include <thread>

namespace turnstile::integration {

LoopbackCluster::LoopbackCluster(LoopbackClusterOptions options)
    : options_(std::move(options)),
      ports_(options_.nodes),
      dirs_(options_.nodes),
      nodes_(options_.nodes),
      down_(options_.nodes, false),
      removed_(options_.nodes, false) {
  if (options_.voters > options_.nodes) throw std::invalid_argument("more voters than nodes");
  for (int attempt = 1;; ++attempt) {
    pick_ports();
    try {
      for (std::size_t i = 0; i < options_.nodes; ++i) dirs_[i] = std::make_unique<TempDir>();
      for (std::size_t i = 0; i < options_.voters; ++i) start(i);
      for (std::size_t i = 0; i < options_.voters; ++i) {
        // The HTTP port is bound after the client port's listening line.
        if (!nodes_[i]->wait_for_log("HTTP API listening", 10s)) {
          throw std::runtime_error("node " + std::to_string(i + 1) + ": no HTTP API");
        }
      }
      return;
    } catch (const std::runtime_error& e) {
      if (attempt >= options_.start_attempts) throw;
      std::fprintf(stderr, "cluster start failed (attempt %d), retrying: %s\n", attempt, e.what());
      for (std::unique_ptr<Daemon>& node : nodes_) node.reset();
    }
  }
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
  if (i < options_.voters) {
    options.args.insert(options.args.end(), {"--cluster-peers", peers_, "--cluster-bootstrap"});
  }
  options.args.insert(options.args.end(), options_.extra_args.begin(), options_.extra_args.end());
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
