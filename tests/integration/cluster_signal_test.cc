// Signals across a cluster (docs/cluster.md, "Signals in a cluster"): three turnstiled nodes on
// loopback with an auth token. A signal published on any node, leader or follower, reaches the
// listeners of every node; the publisher's `ok <n>` counts its own node's listeners only;
// `signal-peer` stays on the node it is sent to; a stopped node misses what is published while it
// is down, and its listeners get later signals once its links are back.
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/cluster_harness.h"
#include "tests/integration/harness.h"

namespace turnstile::integration {
namespace {

constexpr std::size_t kNodes = 3;
constexpr const char* kToken = "cluster-signal-token";
constexpr milliseconds kLinkWait = 20s;

// A client of node `port`, authenticated (in TLS, without verification, when `tls`).
std::unique_ptr<Client> client_of(int port, bool tls = false) {
  ClientOptions options;
  options.tls = tls;
  auto client = std::make_unique<Client>(port, options);
  const std::string reply = client->request("auth", "_", kToken);
  if (reply != "ok") ADD_FAILURE() << "auth answered " << reply;
  return client;
}

// A client of node `port` that listens to `jobs.*` and to `probe` (await_links's channel).
std::unique_ptr<Client> listener_of(int port, bool tls = false) {
  auto client = client_of(port, tls);
  EXPECT_EQ(client->request("listen", "jobs.*", ""), "ok");
  EXPECT_EQ(client->request("listen", "probe", ""), "ok");
  return client;
}

// The next line of `client` that is not a probe frame, or "<none>" after `timeout`.
std::string next_frame(Client& client, milliseconds timeout = 10s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const auto left =
        std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left <= 0ms) return "<none>";
    std::optional<std::string> line = client.read_line(left);
    if (!line) return "<none>";
    if (line->rfind("sig probe ", 0) != 0) return *line;
  }
}

// Publishes `probe` with `publisher` every 200 ms until each of `listeners` (listening to it) has
// received one: the publisher's node has its links to their nodes up. Later probe frames are
// skipped by next_frame.
void await_links(Client& publisher, const std::vector<Client*>& listeners) {
  std::vector<bool> reached(listeners.size(), false);
  const auto deadline = std::chrono::steady_clock::now() + kLinkWait;
  int round = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string reply = publisher.request("signal", "probe", std::to_string(round++));
    ASSERT_EQ(reply.rfind("ok ", 0), 0U) << reply;
    bool all = true;
    for (std::size_t i = 0; i < listeners.size(); ++i) {
      while (!reached[i]) {
        std::optional<std::string> line = listeners[i]->read_line(i == 0 ? 200ms : 20ms);
        if (!line) break;
        if (line->rfind("sig probe ", 0) == 0) reached[i] = true;
      }
      all = all && reached[i];
    }
    if (all) return;
  }
  FAIL() << "a listener got no probe within " << kLinkWait.count() << " ms";
}

class ClusterSignalTest : public ::testing::Test {
 protected:
  // The node whose `barrier` is answered `ok`, asked with the token (LoopbackCluster::leader()
  // asks without one).
  std::optional<std::size_t> leader() {
    const auto deadline = std::chrono::steady_clock::now() + 15s;
    while (std::chrono::steady_clock::now() < deadline) {
      for (std::size_t node = 0; node < kNodes; ++node) {
        auto client = client_of(cluster_.client_port(node));
        if (client->request("barrier", "_", "_", 3s) == "ok") return node;
      }
      std::this_thread::sleep_for(100ms);
    }
    return std::nullopt;
  }

  void await_links(std::size_t from, const std::vector<Client*>& listeners) {
    auto publisher = client_of(cluster_.client_port(from));
    SCOPED_TRACE("links of node " + std::to_string(from));
    integration::await_links(*publisher, listeners);
  }

  LoopbackCluster cluster_{{.extra_args = {"--auth-token", kToken}}};
};

TEST_F(ClusterSignalTest, ASignalOnAnyNodeReachesTheListenersOfEveryNode) {
  const std::optional<std::size_t> leader = this->leader();
  ASSERT_TRUE(leader);
  // One listener per node, and a second one on every node.
  std::vector<std::unique_ptr<Client>> listeners;
  std::vector<Client*> all;
  for (std::size_t node = 0; node < kNodes; ++node) {
    for (int copy = 0; copy < 2; ++copy) {
      listeners.push_back(listener_of(cluster_.client_port(node)));
      all.push_back(listeners.back().get());
    }
  }
  // The leader first, then the followers: a follower's signal reaches the leader's listeners and
  // the other follower's.
  std::vector<std::size_t> publishers = {*leader};
  for (std::size_t node = 0; node < kNodes; ++node) {
    if (node != *leader) publishers.push_back(node);
  }
  for (const std::size_t from : publishers) {
    SCOPED_TRACE("published on node " + std::to_string(from) +
                 (from == *leader ? " (leader)" : " (follower)"));
    await_links(from, all);
    auto publisher = client_of(cluster_.client_port(from));
    const std::string payload = "done by " + std::to_string(from);
    // The count is this node's listeners only: the others get theirs asynchronously.
    EXPECT_EQ(publisher->request("signal", "jobs.7", payload), "ok 2");
    for (std::size_t i = 0; i < all.size(); ++i) {
      EXPECT_EQ(next_frame(*all[i]), "sig jobs.7 " + payload) << "listener " << i;
    }
    // In order, whatever node they come from.
    for (int n = 0; n < 5; ++n) {
      EXPECT_EQ(publisher->request("signal", "jobs." + std::to_string(n), "p"), "ok 2");
    }
    for (std::size_t i = 0; i < all.size(); ++i) {
      for (int n = 0; n < 5; ++n) {
        EXPECT_EQ(next_frame(*all[i]), "sig jobs." + std::to_string(n) + " p") << "listener " << i;
      }
    }
  }
  // Every node has its two links up and has forwarded (its probes and signals), none dropped.
  for (std::size_t node = 0; node < kNodes; ++node) {
    const HttpResult metrics = http_request(cluster_.http_port(node), "GET", "/metrics", "",
                                            {std::string("Authorization: Bearer ") + kToken});
    ASSERT_EQ(metrics.status, 200) << "node " << node;
    EXPECT_NE(metrics.body.find("\nturnstile_signal_peer_links 2\n"), std::string::npos)
        << metrics.body;
    EXPECT_NE(metrics.body.find("\nturnstile_signal_forward_dropped_total 0\n"), std::string::npos);
    EXPECT_EQ(metrics.body.find("\nturnstile_signal_forwarded_total 0\n"), std::string::npos);
    EXPECT_NE(metrics.body.find("\nturnstile_signal_forwarded_total "), std::string::npos);
  }
}

TEST_F(ClusterSignalTest, SignalPeerReachesOnlyTheListenersOfItsNode) {
  std::vector<std::unique_ptr<Client>> listeners;
  std::vector<Client*> all;
  for (std::size_t node = 0; node < kNodes; ++node) {
    listeners.push_back(listener_of(cluster_.client_port(node)));
    all.push_back(listeners.back().get());
  }
  await_links(1, all);
  auto publisher = client_of(cluster_.client_port(1));
  EXPECT_EQ(publisher->request("signal-peer", "jobs.1", "here only"), "ok 1");
  EXPECT_EQ(publisher->request("signal-peer", "jobs.*", "x"), "error");
  // A signal after it goes everywhere; on the other nodes it is the first frame (after probes):
  // the signal-peer never left node 1.
  EXPECT_EQ(publisher->request("signal", "jobs.2", "everywhere"), "ok 1");
  EXPECT_EQ(next_frame(*all[1]), "sig jobs.1 here only");
  for (std::size_t node = 0; node < kNodes; ++node) {
    EXPECT_EQ(next_frame(*all[node]), "sig jobs.2 everywhere") << "node " << node;
  }
}

TEST_F(ClusterSignalTest, AStoppedNodeMissesSignalsAndGetsLaterOnesOnceItsLinksAreBack) {
  std::vector<std::unique_ptr<Client>> listeners;
  for (std::size_t node = 0; node < kNodes; ++node) {
    listeners.push_back(listener_of(cluster_.client_port(node)));
  }
  await_links(0, {listeners[1].get(), listeners[2].get()});
  await_links(1, {listeners[0].get(), listeners[2].get()});

  ASSERT_TRUE(cluster_.stop(2));
  EXPECT_TRUE(listeners[2]->closed_by_peer(5s));
  // The two others still exchange signals, both ways.
  auto on0 = client_of(cluster_.client_port(0));
  auto on1 = client_of(cluster_.client_port(1));
  EXPECT_EQ(on0->request("signal", "jobs.a", "from 0"), "ok 1");
  EXPECT_EQ(on1->request("signal", "jobs.b", "from 1"), "ok 1");
  // Signals from two nodes are in order per node, not across nodes.
  const std::set<std::string> both = {"sig jobs.a from 0", "sig jobs.b from 1"};
  for (std::size_t node = 0; node < 2; ++node) {
    EXPECT_EQ((std::set<std::string>{next_frame(*listeners[node]), next_frame(*listeners[node])}),
              both)
        << "node " << node;
  }

  // Back: a new listener there gets later signals once the links to it are up again, from
  // either node, and what the restarted node publishes reaches the others.
  cluster_.start(2);
  listeners[2] = listener_of(cluster_.client_port(2));
  await_links(0, {listeners[2].get()});
  await_links(1, {listeners[2].get()});
  await_links(2, {listeners[0].get(), listeners[1].get()});
  EXPECT_EQ(on0->request("signal", "jobs.c", "after"), "ok 1");
  EXPECT_EQ(next_frame(*listeners[2]), "sig jobs.c after");
  auto on2 = client_of(cluster_.client_port(2));
  EXPECT_EQ(on2->request("signal", "jobs.d", "from 2"), "ok 1");
  EXPECT_EQ(next_frame(*listeners[2]), "sig jobs.d from 2");
  for (std::size_t node = 0; node < 2; ++node) {
    const std::set<std::string> expected = {"sig jobs.c after", "sig jobs.d from 2"};
    EXPECT_EQ((std::set<std::string>{next_frame(*listeners[node]), next_frame(*listeners[node])}),
              expected)
        << "node " << node;
  }
}

// TLS listeners: the links are TLS too, and check the members' certificate against this node's
// own (--tls-cert) and the address they are reached at (127.0.0.1).
class ClusterSignalTlsTest : public ::testing::Test {
 protected:
  static std::vector<std::string> tls_args(const TempDir& dir) {
    // The helper writes `DNS:<name>` as the subject alternative name; the comma adds the IP the
    // links check.
    const CertificateFiles files =
        write_self_signed_certificate(dir.path(), "localhost,IP:127.0.0.1");
    return {"--auth-token",         kToken,      "--tls-cert",
            files.certificate_path, "--tls-key", files.key_path};
  }

  TempDir dir_;
  LoopbackCluster cluster_{{.extra_args = tls_args(dir_)}};
};

TEST_F(ClusterSignalTlsTest, ASignalCrossesTlsLinks) {
  std::vector<std::unique_ptr<Client>> listeners;
  for (std::size_t node = 0; node < kNodes; ++node) {
    listeners.push_back(listener_of(cluster_.client_port(node), true));
  }
  auto publisher = client_of(cluster_.client_port(1), true);
  await_links(*publisher, {listeners[0].get(), listeners[2].get()});
  EXPECT_EQ(publisher->request("signal", "jobs.u", "over tls"), "ok 1");
  for (std::size_t node = 0; node < kNodes; ++node) {
    EXPECT_EQ(next_frame(*listeners[node]), "sig jobs.u over tls") << "node " << node;
  }
}

}  // namespace
}  // namespace turnstile::integration
