// Read-write locks, the fence check, inspect, lock-delay and lost-notify in a cluster: three
// turnstiled nodes on loopback, every one with --lock-delay 1. Everything goes through the
// replicated log, so the leader answers and the followers redirect; a leader that is killed
// hands a read-write lock's holders to the next one, fences and all.
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/cluster_harness.h"
#include "tests/integration/harness.h"

namespace turnstile::integration {
namespace {

std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at < line.size()) {
    const std::size_t space = line.find(' ', at);
    out.push_back(line.substr(at, space - at));
    if (space == std::string::npos) break;
    at = space + 1;
  }
  return out;
}

// The token of a grant reply `ok <token> <lease>`, or "" when it is not one.
std::string token_of(const std::string& reply) {
  const std::vector<std::string> w = words(reply);
  return w.size() == 3 && (w[0] == "ok" || w[0] == "acquired") ? w[1] : "";
}

class ClusterReadWriteTest : public ::testing::Test {
 protected:
  std::unique_ptr<Client> client_of(std::size_t node) {
    return std::make_unique<Client>(cluster_.client_port(node));
  }

  LoopbackCluster cluster_{{.extra_args = {"--lock-delay", "1"}}};
};

TEST_F(ClusterReadWriteTest, TheLeaderServesReadWriteLocksAndFollowersRedirect) {
  const std::optional<std::size_t> leader = cluster_.leader();
  ASSERT_TRUE(leader);
  const std::size_t follower = (*leader + 1) % cluster_.size();
  auto on_follower = client_of(follower);
  EXPECT_EQ(on_follower->request("rl", "k", "0").rfind("error_not_leader", 0), 0u);
  EXPECT_EQ(on_follower->request("check", "k", std::string(32, '0')).rfind("error_not_leader", 0),
            0u);

  auto a = client_of(*leader);
  auto b = client_of(*leader);
  auto w = client_of(*leader);
  const std::string ra = token_of(a->request("rl", "k", "0 30"));
  const std::string rb = token_of(b->request("rl", "k", "0 30"));
  ASSERT_FALSE(ra.empty());
  ASSERT_FALSE(rb.empty());
  EXPECT_GT(rb, ra);  // fences lead the token, in hex of fixed width
  EXPECT_EQ(w->request("wl", "k", "0"), "timeout");
  EXPECT_EQ(w->request("we", "k", "30"), "queued");
  // A reader after the queued writer waits behind it.
  auto late = client_of(*leader);
  EXPECT_EQ(late->request("rl", "k", "0"), "timeout");

  EXPECT_EQ(a->request("check", "k", ra + " rw"), "ok 30");
  EXPECT_EQ(a->request("check", "k", ra), "error_lease_expired");  // the lock namespace
  const std::string shown = a->request("inspect", "k", "rw");
  EXPECT_NE(shown.find("\"mode\":\"read\""), std::string::npos) << shown;
  EXPECT_NE(shown.find("\"mode\":\"write\""), std::string::npos) << shown;

  EXPECT_EQ(a->request("wr", "k", ra), "error");  // a read token is no write token
  EXPECT_EQ(a->request("rr", "k", ra), "ok");
  EXPECT_EQ(b->request("rr", "k", rb), "ok");
  const std::string granted = w->request("ww", "k", "5");
  const std::string wt = token_of(granted);
  ASSERT_FALSE(wt.empty()) << granted;
  EXPECT_GT(wt, rb);
  EXPECT_EQ(w->request("wr", "k", wt), "ok");
}

TEST_F(ClusterReadWriteTest, AnExpiredLeaseIsPushedToAnOptedInHolderAndHoldsTheKeyForTheDelay) {
  const std::optional<std::size_t> leader = cluster_.leader();
  ASSERT_TRUE(leader);
  auto holder = client_of(*leader);
  auto quiet = client_of(*leader);
  ASSERT_EQ(holder->request("lost-notify", "_", "on"), "ok");
  const std::string token = token_of(holder->request("l", "k", "0 1"));
  ASSERT_FALSE(token.empty());
  ASSERT_FALSE(token_of(quiet->request("l", "other", "0 1")).empty());
  const std::optional<std::string> pushed = holder->read_line(5s);
  ASSERT_TRUE(pushed);
  EXPECT_EQ(*pushed, "lost lock k " + token + " expired");
  EXPECT_FALSE(quiet->read_line(500ms));  // it did not ask
  // The lease ended less than the 1 s delay ago (a tick of the log apart, at most).
  auto next = client_of(*leader);
  const auto until = std::chrono::steady_clock::now() + 5s;
  std::string reply;
  int refused = 0;
  while (std::chrono::steady_clock::now() < until) {
    reply = next->request("l", "k", "0");
    if (reply != "timeout") break;
    ++refused;
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_FALSE(token_of(reply).empty()) << reply;
  EXPECT_GT(refused, 0) << "granted at once after an expiry: no lock-delay";
}

TEST_F(ClusterReadWriteTest, ReadersKeepTheirSlotsAcrossAKillOfTheLeader) {
  const std::optional<std::size_t> leader = cluster_.leader();
  ASSERT_TRUE(leader);
  auto a = client_of(*leader);
  const std::string ra = token_of(a->request("rl", "k", "0 60"));
  ASSERT_FALSE(ra.empty());
  ASSERT_TRUE(cluster_.kill(*leader));
  const std::optional<std::size_t> next = cluster_.leader(30s);
  ASSERT_TRUE(next);
  auto b = client_of(*next);
  // The reader's slot survived: another reader shares it, a writer waits, and the old token
  // still renews and checks.
  EXPECT_FALSE(token_of(b->request("rl", "k", "0 60")).empty());
  EXPECT_EQ(b->request("wl", "k", "0"), "timeout");
  EXPECT_EQ(b->request("check", "k", ra + " rw").rfind("ok ", 0), 0u);
  EXPECT_EQ(b->request("rn", "k", ra + " 60"), "ok 60");
}

}  // namespace
}  // namespace turnstile::integration
