// Cluster mode with real processes (docs/cluster.md): three turnstiled nodes on loopback, each
// with its own temporary raft directory. Followers redirect with `error_not_leader <leader>`; the
// leader grants; a holder keeps its lock and its token through a kill -9 of the leader and
// renews with the next one, while others still wait; fences keep rising; a node stopped with
// SIGSTOP does not stop the other two; a killed node restarts from its directory and follows.
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/cluster_harness.h"
#include "tests/integration/harness.h"

namespace turnstile::integration {
namespace {

constexpr std::size_t kNodes = 3;

class ClusterTest : public ::testing::Test {
 protected:
  LoopbackCluster cluster_;
};

TEST_F(ClusterTest, FollowersRedirectToTheLeaderWhichGrants) {
  const std::optional<std::size_t> leader_index = cluster_.leader();
  ASSERT_TRUE(leader_index);
  for (std::size_t i = 0; i < kNodes; ++i) {
    Client client(cluster_.client_port(i));
    const std::string reply = client.request("l", "job", "0 30");
    if (i == *leader_index) {
      EXPECT_EQ(reply.substr(0, 3), "ok ") << reply;
    } else {
      EXPECT_EQ(reply, "error_not_leader " + cluster_.address(*leader_index));
      // Reads work on every node.
      EXPECT_EQ(client.request("stats", "_", "_").substr(0, 4), "ok {");
      EXPECT_EQ(client.request("ping", "_", "_"), "ok");
      // HTTP: 503 not_leader, with the leader's address in X-Dflockd-Leader. Sessions are
      // local: a follower makes one.
      const std::string created = http_request(cluster_.http_port(i), "POST", "/v1/sessions").raw;
      const std::size_t at = created.find("\"session_id\":\"");
      ASSERT_NE(at, std::string::npos) << created;
      const std::string session = created.substr(at + 14, 32);
      const std::string response =
          http_request(cluster_.http_port(i), "POST", "/v1/locks/job", R"({"acquire_timeout_s":0})",
                       {"X-Dflockd-Session: " + session})
              .raw;
      EXPECT_EQ(response.substr(0, 12), "HTTP/1.1 503") << response;
      EXPECT_NE(response.find("X-Dflockd-Leader: " + cluster_.address(*leader_index)),
                std::string::npos)
          << response;
      EXPECT_NE(response.find("\"not_leader\""), std::string::npos) << response;
    }
  }
}

TEST_F(ClusterTest, AHolderKeepsItsLockAndTokenThroughAKillOfTheLeader) {
  const std::optional<std::size_t> first = cluster_.leader();
  ASSERT_TRUE(first);
  Client holder(cluster_.client_port(*first));
  const std::string grant = holder.request("l", "job", "0 30");
  ASSERT_EQ(grant.substr(0, 3), "ok ") << grant;
  const std::string token = grant.substr(3, 32);
  Client waiter(cluster_.client_port(*first));
  ASSERT_TRUE(waiter.send("l\njob\n60 30\n"));  // parks behind the holder

  ASSERT_TRUE(cluster_.kill(*first));
  const std::optional<std::size_t> next = cluster_.leader();
  ASSERT_TRUE(next);
  ASSERT_NE(*next, *first);

  // The holder renews with the new leader, by its token: the lock and the token survived.
  Client renewer(cluster_.client_port(*next));
  EXPECT_EQ(renewer.request("n", "job", token + " 30"), "ok 30");
  // Others still cannot take it.
  Client other(cluster_.client_port(*next));
  EXPECT_EQ(other.request("l", "job", "1 30", 5s), "timeout");
  EXPECT_EQ(renewer.request("r", "job", token), "ok");
  const std::string after = other.request("l", "job", "0 30");
  ASSERT_EQ(after.substr(0, 3), "ok ") << after;
  EXPECT_GT(fence_of(after.substr(3, 32)).value(),
            fence_of(token).value());  // fences rise across the failover

  // The killed node restarts from its directory, catches up and follows.
  cluster_.start(*first);
  const auto deadline = std::chrono::steady_clock::now() + 15s;
  std::string reply;
  while (std::chrono::steady_clock::now() < deadline) {
    Client client(cluster_.client_port(*first));
    reply = client.request("l", "job", "0 30");
    if (reply == "error_not_leader " + cluster_.address(*next)) break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(reply, "error_not_leader " + cluster_.address(*next));
}

TEST_F(ClusterTest, AStoppedFollowerDoesNotStopTheOtherTwo) {
  const std::optional<std::size_t> leader_index = cluster_.leader();
  ASSERT_TRUE(leader_index);
  const std::size_t follower = (*leader_index + 1) % kNodes;
  cluster_.sigstop(follower);
  Client client(cluster_.client_port(*leader_index));
  for (int i = 0; i < 20; ++i) {
    const std::string reply = client.request("l", "k" + std::to_string(i), "0 30");
    EXPECT_EQ(reply.substr(0, 3), "ok ") << reply;
  }
  cluster_.sigcont(follower);
  // It comes back as a follower of the same leader.
  const auto deadline = std::chrono::steady_clock::now() + 15s;
  std::string reply;
  while (std::chrono::steady_clock::now() < deadline) {
    Client other(cluster_.client_port(follower));
    reply = other.request("l", "x", "0 30");
    if (reply == "error_not_leader " + cluster_.address(*leader_index)) break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(reply, "error_not_leader " + cluster_.address(*leader_index));
}

}  // namespace
}  // namespace turnstile::integration
