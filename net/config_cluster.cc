// The cross-flag rules of cluster mode (net/config_internal.h, docs/cluster.md "Flags"): every
// cluster flag needs --raft-dir; cluster mode needs its node id, raft address and secret, a raft
// port of its own, and an address to send clients to.
#include <string>

#include "net/config_internal.h"

namespace turnstile::net::config_internal {
namespace {

// Single-node mode: a cluster flag given is an error. The first one given, in --help order,
// names the problem.
std::optional<ConfigExit> check_no_cluster_flags(const std::vector<Given>& given) {
  for (const Setting& setting : settings()) {
    if (!setting.cluster) continue;
    for (const Given& g : given) {
      if (g.setting != &setting) continue;
      std::string message = "--" + std::string(setting.flag);
      if (!g.env_name.empty()) message += " (from " + g.env_name + ")";
      return usage_error(message + " needs --raft-dir (cluster mode)");
    }
  }
  return std::nullopt;
}

// What cluster mode needs besides --raft-dir, and the rules between its own flags.
std::optional<ConfigExit> check_required(const Config& config) {
  const Config::Cluster& cluster = config.cluster;
  if (!config.fence_state_file.empty()) {
    return usage_error(
        "--fence-state-file cannot be used in cluster mode: the fence counter is replicated in "
        "the raft log and its snapshots");
  }
  if (cluster.node_id == 0) return usage_error("cluster mode (--raft-dir) needs --node-id");
  if (cluster.raft_addr.empty()) return usage_error("cluster mode (--raft-dir) needs --raft-addr");
  if (!cluster.secret) {
    return usage_error(
        "cluster mode needs --cluster-secret or --cluster-secret-file: nodes authenticate each "
        "other with it");
  }
  if (cluster.heartbeat_timeout_ms >= cluster.election_timeout_ms) {
    return usage_error("--raft-heartbeat-timeout-ms (" +
                       std::to_string(cluster.heartbeat_timeout_ms) +
                       ") must be less than --raft-election-timeout-ms (" +
                       std::to_string(cluster.election_timeout_ms) + ")");
  }
  if (cluster.bootstrap && cluster.peers.empty()) {
    return usage_error(
        "--cluster-bootstrap needs --cluster-peers: the voters of the initial configuration");
  }
  return std::nullopt;
}

// This node's entry in --cluster-peers; nullptr when the list does not name it (or is empty).
const Config::ClusterPeer* find_self(const Config::Cluster& cluster) {
  const Config::ClusterPeer* self = nullptr;
  for (const Config::ClusterPeer& peer : cluster.peers) {
    if (peer.id == cluster.node_id) self = &peer;
  }
  return self;
}

// A --cluster-peers given lists this node, with --raft-addr as its raft address.
std::optional<ConfigExit> check_self(const Config::Cluster& cluster,
                                     const Config::ClusterPeer* self) {
  if (cluster.peers.empty()) return std::nullopt;
  if (self == nullptr) {
    return usage_error("--cluster-peers does not list --node-id " +
                       std::to_string(cluster.node_id) + " (the list must include this node)");
  }
  if (self->raft_address != cluster.raft_addr) {
    return usage_error("--raft-addr " + cluster.raft_addr + " differs from node " +
                       std::to_string(cluster.node_id) + "'s raft address in --cluster-peers (" +
                       self->raft_address + ")");
  }
  return std::nullopt;
}

// Raft needs a port of its own: not the TCP listener's, nor the HTTP API's. A wildcard
// listener takes the port on every address.
std::optional<ConfigExit> check_raft_port(const Config& config) {
  const Config::Cluster& cluster = config.cluster;
  const HostPort raft = std::get<HostPort>(parse_host_port(cluster.raft_addr));
  const auto overlaps = [&](const std::string& host, int port) {
    if (port != raft.port) return false;
    bool v6 = false;
    const auto canonical = canonical_host(host, v6);
    if (!canonical) return false;
    HostPort listener{*canonical, port, v6, ""};
    return is_wildcard(listener) || (listener.host == raft.host && listener.v6 == raft.v6);
  };
  if (overlaps(config.host, config.port)) {
    return usage_error("--raft-addr " + cluster.raft_addr +
                       " is the address of the TCP listener (--host " + config.host + ", --port " +
                       std::to_string(config.port) + "): raft needs a port of its own");
  }
  if (config.http_port != 0 && overlaps(config.http_host, config.http_port)) {
    return usage_error("--raft-addr " + cluster.raft_addr +
                       " is the address of the HTTP API (--http-host " + config.http_host +
                       ", --http-port " + std::to_string(config.http_port) +
                       "): raft needs a port of its own");
  }
  return std::nullopt;
}

// The advertised client address: the flag, else this node's in --cluster-peers, else the TCP
// listener's when that is an address clients can connect to.
std::optional<ConfigExit> fill_advertise_addr(Config& config, const Config::ClusterPeer* self) {
  Config::Cluster& cluster = config.cluster;
  if (cluster.advertise_addr.empty() && self != nullptr) {
    cluster.advertise_addr = self->client_address;
  }
  if (!cluster.advertise_addr.empty()) return std::nullopt;
  const std::string needs =
      "cluster mode needs --advertise-addr (the client address other nodes send clients to): ";
  const std::string not_listed = ", and this node is not in --cluster-peers";
  if (config.port == 0) {
    return usage_error(needs + "--port 0 is picked at start-up" + not_listed);
  }
  bool v6 = false;
  const auto host = canonical_host(config.host, v6);
  auto listener = parse_reachable_address(host ? join_host_port(*host, v6, config.port)
                                               : config.host + ":" + std::to_string(config.port));
  if (const auto* problem = std::get_if<std::string>(&listener)) {
    return usage_error(needs + "--host " + quote(config.host) + " is not usable (" + *problem +
                       ")" + not_listed);
  }
  cluster.advertise_addr = std::get<HostPort>(listener).text;
  return std::nullopt;
}

}  // namespace

std::optional<ConfigExit> check_cluster(const std::vector<Given>& given, Config& config) {
  if (!config.cluster.enabled()) return check_no_cluster_flags(given);
  if (auto error = check_required(config)) return error;
  const Config::ClusterPeer* self = find_self(config.cluster);
  if (auto error = check_self(config.cluster, self)) return error;
  if (auto error = check_raft_port(config)) return error;
  return fill_advertise_addr(config, self);
}

}  // namespace turnstile::net::config_internal
