// What an operator sees of a cluster (docs/cluster.md, "Observing a cluster"), with three real
// turnstiled nodes on loopback: `stats` (TCP and HTTP) carries a `cluster` object on every node,
// /metrics the turnstile_raft_* families, and /ready is 200 only while the node knows a leader.
// One node alone keeps its stats line and its metrics as they were.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "tests/integration/cluster_harness.h"
#include "tests/integration/harness.h"

namespace turnstile::integration {
namespace {

using Json = nlohmann::json;

constexpr std::size_t kNodes = 3;
// The samples of a Prometheus text page without labels ("name value"), by name.
std::map<std::string, double> samples(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#' || line.find('{') != std::string::npos) continue;
    const std::size_t space = line.find(' ');
    if (space == std::string::npos) continue;
    out[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return out;
}

// The `stats` reply's JSON over TCP ("ok {...}").
Json tcp_stats(int port) {
  Client client(port);
  const std::string reply = client.request("stats", "_", "_");
  if (reply.substr(0, 3) != "ok ") return Json();
  return Json::parse(reply.substr(3));
}

class ClusterObservabilityTest : public ::testing::Test {
 protected:
  // Every node's stats `cluster` object, once every node names `leader` as its leader and has
  // applied something (waiting up to 10 s for each).
  std::array<Json, kNodes> clusters_agreeing_on(std::size_t leader_index) {
    std::array<Json, kNodes> clusters;
    for (std::size_t i = 0; i < kNodes; ++i) {
      eventually(
          [&] {
            const Json stats = tcp_stats(cluster_.client_port(i));
            if (!stats.is_object() || !stats.contains("cluster")) return false;
            clusters[i] = stats["cluster"];
            // A follower learns the commit index with the leader's next heartbeat.
            return clusters[i]["leader_id"] == leader_index + 1 &&
                   clusters[i]["applied_index"].get<std::uint64_t>() >= 1;
          },
          10s);
    }
    return clusters;
  }

  LoopbackCluster cluster_;
};

TEST_F(ClusterObservabilityTest, StatsCarryTheClusterObjectOnEveryNode) {
  const std::optional<std::size_t> leader_index = cluster_.leader();
  ASSERT_TRUE(leader_index);
  const std::array<Json, kNodes> clusters = clusters_agreeing_on(*leader_index);
  for (std::size_t i = 0; i < kNodes; ++i) {
    SCOPED_TRACE("node " + std::to_string(i + 1));
    const Json& cluster = clusters[i];
    ASSERT_TRUE(cluster.is_object()) << cluster;
    EXPECT_EQ(cluster["node_id"], i + 1);
    EXPECT_EQ(cluster["role"], i == *leader_index ? "leader" : "follower");
    EXPECT_EQ(cluster["leader_id"], *leader_index + 1);
    EXPECT_EQ(cluster["leader_address"], cluster_.address(*leader_index));
    EXPECT_EQ(cluster["voters"], Json::array({1, 2, 3}));
    EXPECT_GE(cluster["term"].get<std::uint64_t>(), 1u);
    EXPECT_EQ(cluster["term"], clusters[*leader_index]["term"]);
    EXPECT_GE(cluster["commit_index"].get<std::uint64_t>(), 1u);
    EXPECT_GE(cluster["last_index"].get<std::uint64_t>(),
              cluster["commit_index"].get<std::uint64_t>());
    EXPECT_GE(cluster["applied_index"].get<std::uint64_t>(), 1u);
    EXPECT_TRUE(cluster["snapshot_index"].is_number_unsigned()) << cluster;
    // The cluster object comes after dflockd's fields, which stay as they were.
    const Json stats = tcp_stats(cluster_.client_port(i));
    for (const char* field :
         {"connections", "locks", "semaphores", "idle_locks", "idle_semaphores", "truncated"}) {
      EXPECT_TRUE(stats.contains(field)) << field;
    }
  }
  // The HTTP stats route answers the same object.
  const std::size_t follower = (*leader_index + 1) % kNodes;
  const HttpResult response = http_request(cluster_.http_port(follower), "GET", "/v1/stats");
  ASSERT_EQ(response.status, 200) << response.body;
  const Json cluster = Json::parse(response.body)["cluster"];
  EXPECT_EQ(cluster["node_id"], follower + 1);
  EXPECT_EQ(cluster["role"], "follower");
  EXPECT_EQ(cluster["leader_id"], *leader_index + 1);
  EXPECT_EQ(cluster["leader_address"], cluster_.address(*leader_index));
}

TEST_F(ClusterObservabilityTest, MetricsShowRaftOnEveryNode) {
  const std::optional<std::size_t> leader_index = cluster_.leader();
  ASSERT_TRUE(leader_index);
  clusters_agreeing_on(*leader_index);
  double leaders = 0;
  for (std::size_t i = 0; i < kNodes; ++i) {
    SCOPED_TRACE("node " + std::to_string(i + 1));
    // A follower applies the leader's probe once a heartbeat tells it the commit index.
    HttpResult response;
    std::map<std::string, double> metrics;
    eventually(
        [&] {
          response = http_request(cluster_.http_port(i), "GET", "/metrics");
          metrics = samples(response.body);
          return metrics["turnstile_raft_entries_applied_total"] >= 1;
        },
        5s);
    ASSERT_EQ(response.status, 200);
    for (const char* name :
         {"turnstile_raft_term", "turnstile_raft_commit_index", "turnstile_raft_last_index",
          "turnstile_raft_applied_index", "turnstile_raft_snapshot_index",
          "turnstile_raft_is_leader", "turnstile_raft_leader_known", "turnstile_raft_voters",
          "turnstile_raft_proposals_total", "turnstile_raft_apply_calls_total",
          "turnstile_raft_entries_applied_total", "turnstile_raft_leadership_changes_total",
          "turnstile_raft_apply_latency_seconds_sum",
          "turnstile_raft_apply_latency_seconds_count"}) {
      EXPECT_TRUE(metrics.contains(name)) << name << "\n" << response.body;
    }
    EXPECT_NE(response.body.find("# TYPE turnstile_raft_term gauge\n"), std::string::npos);
    EXPECT_NE(response.body.find("# TYPE turnstile_raft_proposals_total counter\n"),
              std::string::npos);
    EXPECT_NE(response.body.find("# TYPE turnstile_raft_apply_latency_seconds histogram\n"),
              std::string::npos);
    EXPECT_NE(response.body.find("turnstile_raft_apply_latency_seconds_bucket{le=\"+Inf\"} "),
              std::string::npos);
    EXPECT_GE(metrics["turnstile_raft_term"], 1);
    EXPECT_GE(metrics["turnstile_raft_commit_index"], 1);
    EXPECT_GE(metrics["turnstile_raft_last_index"], metrics["turnstile_raft_commit_index"]);
    EXPECT_GE(metrics["turnstile_raft_applied_index"], 1);
    EXPECT_EQ(metrics["turnstile_raft_leader_known"], 1);
    EXPECT_EQ(metrics["turnstile_raft_voters"], 3);
    EXPECT_EQ(metrics["turnstile_ready"], 1);
    EXPECT_GE(metrics["turnstile_raft_entries_applied_total"], 1);
    leaders += metrics["turnstile_raft_is_leader"];
    if (i == *leader_index) {
      EXPECT_EQ(metrics["turnstile_raft_is_leader"], 1);
      EXPECT_GE(metrics["turnstile_raft_proposals_total"], 1);
      EXPECT_GE(metrics["turnstile_raft_apply_calls_total"], 1);
      EXPECT_LE(metrics["turnstile_raft_apply_calls_total"],
                metrics["turnstile_raft_proposals_total"]);
      EXPECT_GE(metrics["turnstile_raft_leadership_changes_total"], 1);
      // The probe was proposed and applied here: it was timed.
      EXPECT_GE(metrics["turnstile_raft_apply_latency_seconds_count"], 1);
      EXPECT_GT(metrics["turnstile_raft_apply_latency_seconds_sum"], 0);
    } else {
      EXPECT_EQ(metrics["turnstile_raft_is_leader"], 0);
    }
  }
  EXPECT_EQ(leaders, 1);
}

TEST_F(ClusterObservabilityTest, ReadyOnlyWhileALeaderIsKnown) {
  const std::optional<std::size_t> leader_index = cluster_.leader();
  ASSERT_TRUE(leader_index);
  for (std::size_t i = 0; i < kNodes; ++i) {
    EXPECT_TRUE(eventually(
        [&] { return http_request(cluster_.http_port(i), "GET", "/ready").status == 200; }, 10s))
        << "node " << i + 1;
  }

  // Two of three gone: the survivor learns that nobody leads once its election timeout passes
  // (a leader steps down when it cannot reach a majority), and is no longer ready.
  const std::size_t survivor = (*leader_index + 1) % kNodes;
  for (std::size_t i = 0; i < kNodes; ++i) {
    if (i == survivor) continue;
    ASSERT_TRUE(cluster_.kill(i));
  }
  HttpResult ready;
  EXPECT_TRUE(eventually(
      [&] {
        ready = http_request(cluster_.http_port(survivor), "GET", "/ready");
        return ready.status == 503;
      },
      15s));
  EXPECT_EQ(Json::parse(ready.body), Json({{"status", "no_leader"}}));
  // /health does not depend on raft; stats and metrics still answer and say why.
  EXPECT_EQ(http_request(cluster_.http_port(survivor), "GET", "/health").status, 200);
  const HttpResult metrics = http_request(cluster_.http_port(survivor), "GET", "/metrics");
  ASSERT_EQ(metrics.status, 200);
  std::map<std::string, double> values = samples(metrics.body);
  EXPECT_EQ(values["turnstile_ready"], 0);
  EXPECT_EQ(values["turnstile_raft_leader_known"], 0);
  EXPECT_EQ(values["turnstile_raft_is_leader"], 0);
  const Json stats = tcp_stats(cluster_.client_port(survivor));
  ASSERT_TRUE(stats.contains("cluster")) << stats;
  EXPECT_EQ(stats["cluster"]["leader_id"], 0);
  EXPECT_EQ(stats["cluster"]["leader_address"], "");
  EXPECT_NE(stats["cluster"]["role"], "leader");
}

// One node alone: no cluster object, no raft metrics, /ready as before.
TEST(SingleNodeObservability, StatsAndMetricsHaveNoClusterParts) {
  const int http_port = unused_loopback_port();
  Daemon daemon({"--http-port", std::to_string(http_port)});
  const Json stats = tcp_stats(daemon.port());
  ASSERT_TRUE(stats.is_object());
  EXPECT_FALSE(stats.contains("cluster")) << stats;
  EXPECT_TRUE(
      eventually([&] { return http_request(http_port, "GET", "/ready").status == 200; }, 5s));
  const HttpResult metrics = http_request(http_port, "GET", "/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_EQ(metrics.body.find("turnstile_raft_"), std::string::npos);
  EXPECT_EQ(samples(metrics.body)["turnstile_ready"], 1);
}

}  // namespace
}  // namespace turnstile::integration
