// Cluster mode with real processes (docs/cluster.md): three turnstiled nodes on loopback, each
// with its own temporary raft directory. Followers redirect with `error_not_leader <leader>`; the
// leader grants; a holder keeps its lock and its token through a kill -9 of the leader and
// renews with the next one, while others still wait; fences keep rising; a node stopped with
// SIGSTOP does not stop the other two; a killed node restarts from its directory and follows.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/harness.h"

namespace turnstile::integration {
namespace {

constexpr std::size_t kNodes = 3;
const std::string kNoToken(32, '0');

// A port nobody listens on now (the kernel's pick for port 0, released at once).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    throw std::runtime_error("no free port");
  }
  const int port = ntohs(address.sin_port);
  ::close(fd);
  return port;
}

// One HTTP/1.1 POST on its own connection; the whole response (status line, headers, body).
std::string http_post(int port, const std::string& path, const std::string& body,
                      const std::string& session) {
  Client http(port);
  std::string request = "POST " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n";
  if (!session.empty()) request += "X-Dflockd-Session: " + session + "\r\n";
  request += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
             "\r\n\r\n" + body;
  if (!http.send(request)) return "<send failed>";
  return http.pending(3s);
}

std::uint64_t fence_of(const std::string& grant) {
  // "ok <16 hex fence><16 hex salt> <lease>"
  return std::stoull(grant.substr(3, 16), nullptr, 16);
}

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string peers;
    for (std::size_t i = 0; i < kNodes; ++i) {
      client_ports_[i] = free_port();
      raft_ports_[i] = free_port();
      http_ports_[i] = free_port();
      if (!peers.empty()) peers += ",";
      peers += std::to_string(i + 1) + "=127.0.0.1:" + std::to_string(raft_ports_[i]) +
               "@127.0.0.1:" + std::to_string(client_ports_[i]);
    }
    peers_ = peers;
    for (std::size_t i = 0; i < kNodes; ++i) start(i);
  }

  void start(std::size_t i) {
    DaemonOptions options;
    options.args = {"--port",
                    std::to_string(client_ports_[i]),
                    "--threads",
                    "2",
                    "--raft-dir",
                    dirs_[i].path(),
                    "--node-id",
                    std::to_string(i + 1),
                    "--raft-addr",
                    "127.0.0.1:" + std::to_string(raft_ports_[i]),
                    "--cluster-peers",
                    peers_,
                    "--cluster-bootstrap",
                    "--cluster-secret",
                    "integration-secret",
                    "--http-port",
                    std::to_string(http_ports_[i])};
    nodes_[i] = std::make_unique<Daemon>(options);
  }

  std::string address(std::size_t i) const {
    return "127.0.0.1:" + std::to_string(client_ports_[i]);
  }

  // The node that takes a mutating request (a renew of no token: `error`, changing nothing),
  // among the live ones, waiting up to `timeout` for one.
  std::optional<std::size_t> leader(std::chrono::milliseconds timeout = 15s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      for (std::size_t i = 0; i < kNodes; ++i) {
        if (nodes_[i] == nullptr || stopped_[i]) continue;
        Client client(client_ports_[i]);
        const std::string reply = client.request("n", "probe", kNoToken);
        if (reply == "error") return i;
      }
      std::this_thread::sleep_for(100ms);
    }
    return std::nullopt;
  }

  std::array<TempDir, kNodes> dirs_;
  std::array<int, kNodes> client_ports_{};
  std::array<int, kNodes> raft_ports_{};
  std::array<int, kNodes> http_ports_{};
  std::string peers_;
  std::array<std::unique_ptr<Daemon>, kNodes> nodes_;
  std::array<bool, kNodes> stopped_{};
};

TEST_F(ClusterTest, FollowersRedirectToTheLeaderWhichGrants) {
  const std::optional<std::size_t> leader_index = leader();
  ASSERT_TRUE(leader_index);
  for (std::size_t i = 0; i < kNodes; ++i) {
    Client client(client_ports_[i]);
    const std::string reply = client.request("l", "job", "0 30");
    if (i == *leader_index) {
      EXPECT_EQ(reply.substr(0, 3), "ok ") << reply;
    } else {
      EXPECT_EQ(reply, "error_not_leader " + address(*leader_index));
      // Reads work on every node.
      EXPECT_EQ(client.request("stats", "_", "_").substr(0, 4), "ok {");
      EXPECT_EQ(client.request("ping", "_", "_"), "ok");
      // HTTP: 503 not_leader, with the leader's address in X-Dflockd-Leader. Sessions are
      // local: a follower makes one.
      const std::string created = http_post(http_ports_[i], "/v1/sessions", "", "");
      const std::size_t at = created.find("\"session_id\":\"");
      ASSERT_NE(at, std::string::npos) << created;
      const std::string session = created.substr(at + 14, 32);
      const std::string response =
          http_post(http_ports_[i], "/v1/locks/job", R"({"acquire_timeout_s":0})", session);
      EXPECT_EQ(response.substr(0, 12), "HTTP/1.1 503") << response;
      EXPECT_NE(response.find("X-Dflockd-Leader: " + address(*leader_index)), std::string::npos)
          << response;
      EXPECT_NE(response.find("\"not_leader\""), std::string::npos) << response;
    }
  }
}

TEST_F(ClusterTest, AHolderKeepsItsLockAndTokenThroughAKillOfTheLeader) {
  const std::optional<std::size_t> first = leader();
  ASSERT_TRUE(first);
  Client holder(client_ports_[*first]);
  const std::string grant = holder.request("l", "job", "0 30");
  ASSERT_EQ(grant.substr(0, 3), "ok ") << grant;
  const std::string token = grant.substr(3, 32);
  Client waiter(client_ports_[*first]);
  ASSERT_TRUE(waiter.send("l\njob\n60 30\n"));  // parks behind the holder

  nodes_[*first]->signal(SIGKILL);
  ASSERT_TRUE(nodes_[*first]->wait_exit(5s));
  stopped_[*first] = true;
  const std::optional<std::size_t> next = leader();
  ASSERT_TRUE(next);
  ASSERT_NE(*next, *first);

  // The holder renews with the new leader, by its token: the lock and the token survived.
  Client renewer(client_ports_[*next]);
  EXPECT_EQ(renewer.request("n", "job", token + " 30"), "ok 30");
  // Others still cannot take it.
  Client other(client_ports_[*next]);
  EXPECT_EQ(other.request("l", "job", "1 30", 5s), "timeout");
  EXPECT_EQ(renewer.request("r", "job", token), "ok");
  const std::string after = other.request("l", "job", "0 30");
  ASSERT_EQ(after.substr(0, 3), "ok ") << after;
  EXPECT_GT(fence_of(after), fence_of(grant));  // fences rise across the failover

  // The killed node restarts from its directory, catches up and follows.
  start(*first);
  stopped_[*first] = false;
  const auto deadline = std::chrono::steady_clock::now() + 15s;
  std::string reply;
  while (std::chrono::steady_clock::now() < deadline) {
    Client client(client_ports_[*first]);
    reply = client.request("l", "job", "0 30");
    if (reply == "error_not_leader " + address(*next)) break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(reply, "error_not_leader " + address(*next));
}

TEST_F(ClusterTest, AStoppedFollowerDoesNotStopTheOtherTwo) {
  const std::optional<std::size_t> leader_index = leader();
  ASSERT_TRUE(leader_index);
  const std::size_t follower = (*leader_index + 1) % kNodes;
  nodes_[follower]->signal(SIGSTOP);
  Client client(client_ports_[*leader_index]);
  for (int i = 0; i < 20; ++i) {
    const std::string reply = client.request("l", "k" + std::to_string(i), "0 30");
    EXPECT_EQ(reply.substr(0, 3), "ok ") << reply;
  }
  nodes_[follower]->signal(SIGCONT);
  // It comes back as a follower of the same leader.
  const auto deadline = std::chrono::steady_clock::now() + 15s;
  std::string reply;
  while (std::chrono::steady_clock::now() < deadline) {
    Client other(client_ports_[follower]);
    reply = other.request("l", "x", "0 30");
    if (reply == "error_not_leader " + address(*leader_index)) break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(reply, "error_not_leader " + address(*leader_index));
}

}  // namespace
}  // namespace turnstile::integration
