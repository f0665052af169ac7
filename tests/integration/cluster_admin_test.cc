// The operator's HTTP routes in a cluster (docs/http-api.md: "Fence check", "Inspecting a key",
// "Admin force-release"; docs/cluster.md), with three real turnstiled nodes on loopback, every
// one with the same --admin-token. The leader answers the check, the inspect and the
// force-release through the replicated log; a TCP holder that asked for lost-notify hears that
// it was forced out; the followers answer 503 not_leader with the leader's address and change
// nothing; and the force-release outlives a kill -9 of the leader that took it.
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <memory>
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

const std::string kAdminToken = "cluster-admin-token";
const std::string kNotHeld = "{\"held\":false}\n";

std::string bearer(const std::string& token = kAdminToken) {
  return "Authorization: Bearer " + token;
}

std::string token_body(const std::string& token) { return "{\"token\":\"" + token + "\"}"; }

// The token of a grant reply `ok <token> <lease>`, or "" when it is not one.
std::string token_of(const std::string& reply) {
  const std::vector<std::string> words = fields(reply);
  return words.size() == 3 && words[0] == "ok" ? words[1] : "";
}

unsigned long long fence(const std::string& token) { return fence_of(token).value_or(0); }

// The value of the unlabelled sample `name` in a /metrics page ("" when absent).
std::string metric(int http_port, const std::string& name) {
  std::istringstream lines(http_request(http_port, "GET", "/metrics").body);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(name + " ", 0) == 0) return line.substr(name.size() + 1);
  }
  return "";
}

Json json_of(const HttpResult& result) {
  return Json::parse(result.body, nullptr, /*allow_exceptions=*/false);
}

class ClusterAdminTest : public ::testing::Test {
 protected:
  std::unique_ptr<Client> client_of(std::size_t node) {
    return std::make_unique<Client>(cluster_.client_port(node));
  }
  HttpResult check(std::size_t node, const std::string& key, const std::string& token) {
    return http_request(cluster_.http_port(node), "POST", "/v1/locks/" + key + "/check",
                        token_body(token));
  }
  HttpResult inspect(std::size_t node, const std::string& key) {
    return http_request(cluster_.http_port(node), "GET", "/v1/locks/" + key);
  }
  HttpResult force_release(std::size_t node, const std::string& path,
                           const std::vector<std::string>& headers = {bearer()}) {
    return http_request(cluster_.http_port(node), "DELETE", "/v1/admin/" + path, "", headers);
  }
  // `result` is the follower's 503 not_leader naming the leader's client address.
  void expect_not_leader(const HttpResult& result, std::size_t leader) {
    EXPECT_EQ(result.status, 503) << result.raw;
    EXPECT_EQ(json_of(result)["error"], "not_leader") << result.raw;
    EXPECT_EQ(json_of(result)["detail"], cluster_.address(leader)) << result.raw;
    EXPECT_EQ(result.header("x-dflockd-leader"), cluster_.address(leader)) << result.raw;
  }
  // Waits until follower `node` names the leader (it learns it with a heartbeat).
  bool knows_leader(std::size_t node) {
    return eventually(
        [&] { return check(node, "k", std::string(32, '0')).header("x-dflockd-leader") != ""; },
        10s);
  }

  LoopbackCluster cluster_{{.extra_args = {"--admin-token", kAdminToken}}};
};

TEST_F(ClusterAdminTest, TheLeaderChecksInspectsAndForceReleasesThroughTheLog) {
  const std::optional<std::size_t> leader = cluster_.leader();
  ASSERT_TRUE(leader);
  const int http = cluster_.http_port(*leader);
  auto holder = client_of(*leader);
  ASSERT_EQ(holder->request("lost-notify", "_", "on"), "ok");
  const std::string forced = token_of(holder->request("l", "job", "0 60"));
  ASSERT_FALSE(forced.empty());
  auto waiter = client_of(*leader);
  ASSERT_TRUE(waiter->send(frame("l", "job", "30 60")));  // waits for the lock

  // Inspect: the holder by its fence, the waiter queued; never the token itself.
  HttpResult shown;
  ASSERT_TRUE(eventually(
      [&] {
        shown = inspect(*leader, "job");
        return json_of(shown)["waiters"].size() == 1;
      },
      5s))
      << shown.raw;
  EXPECT_EQ(shown.status, 200);
  EXPECT_EQ(shown.body.find(forced), std::string::npos);
  Json json = json_of(shown);
  EXPECT_EQ(json["kind"], "lock");
  EXPECT_EQ(json["exists"], true);
  ASSERT_EQ(json["holders"].size(), 1U) << shown.body;
  EXPECT_EQ(json["holders"][0]["fence"].get<unsigned long long>(), fence(forced));
  EXPECT_GT(json["holders"][0]["lease_expires_in_s"].get<double>(), 50);

  // Check: held, with its lease left.
  const HttpResult held = check(*leader, "job", forced);
  EXPECT_EQ(held.status, 200) << held.raw;
  EXPECT_EQ(json_of(held)["held"], true) << held.raw;
  EXPECT_GE(json_of(held)["remaining_s"].get<long long>(), 55) << held.raw;

  // No admin token, or a wrong one: 401, and nothing changes.
  HttpResult refused = force_release(*leader, "locks/job", {});
  EXPECT_EQ(refused.status, 401) << refused.raw;
  EXPECT_EQ(json_of(refused)["error"], "unauthorized");
  refused = force_release(*leader, "locks/job", {bearer("wrong")});
  EXPECT_EQ(refused.status, 401) << refused.raw;
  EXPECT_EQ(json_of(refused)["error"], "unauthorized");
  refused = force_release(*leader, "locks/job?fence=" + std::to_string(fence(forced)),
                          {bearer(kAdminToken + "x")});
  EXPECT_EQ(refused.status, 401) << refused.raw;
  EXPECT_EQ(json_of(check(*leader, "job", forced))["held"], true);
  EXPECT_EQ(holder->pending(200ms), "");  // no lost line
  EXPECT_EQ(waiter->pending(0ms), "");    // still waiting
  EXPECT_EQ(metric(http, "turnstile_forced_releases_total"), "0");

  // With the token: freed, once.
  const std::size_t log_from = cluster_.node(*leader).log_size();
  const HttpResult released = force_release(*leader, "locks/job");
  EXPECT_EQ(released.status, 200) << released.raw;
  EXPECT_EQ(released.body, "{\"released\":1}\n");
  EXPECT_EQ(holder->read_line(5s), "lost lock job " + forced + " forced");
  EXPECT_EQ(holder->request("n", "job", forced + " 60"), "error_lease_expired");
  EXPECT_EQ(holder->request("r", "job", forced), "error_lease_expired");
  EXPECT_EQ(check(*leader, "job", forced).body, kNotHeld);
  // The waiter holds now, with a higher fence.
  const std::optional<std::string> granted = waiter->read_line(5s);
  ASSERT_TRUE(granted);
  const std::string next = token_of(*granted);
  ASSERT_FALSE(next.empty()) << *granted;
  EXPECT_GT(fence(next), fence(forced));
  EXPECT_EQ(json_of(check(*leader, "job", next))["held"], true);
  json = json_of(inspect(*leader, "job"));
  ASSERT_EQ(json["holders"].size(), 1U) << json;
  EXPECT_EQ(json["holders"][0]["fence"].get<unsigned long long>(), fence(next));
  EXPECT_TRUE(json["waiters"].empty()) << json;
  EXPECT_TRUE(cluster_.node(*leader)
                  .wait_for_log(R"( warn admin: force-release of lock job \(every holder\) asked )"
                                R"(by 127\.0\.0\.1:[0-9]+ with the admin token: 1 freed)",
                                5s, log_from)
                  .has_value());
  EXPECT_EQ(metric(http, "turnstile_forced_releases_total"), "1");
  // The forced fence is gone: asking for it again frees nothing; the new holder stays.
  EXPECT_EQ(force_release(*leader, "locks/job?fence=" + std::to_string(fence(forced))).body,
            "{\"released\":0}\n");
  EXPECT_EQ(json_of(check(*leader, "job", next))["held"], true);
  // The new holder releases; a fresh grant's fence goes on rising.
  EXPECT_EQ(waiter->request("r", "job", next), "ok");
  const std::string later = token_of(client_of(*leader)->request("l", "job", "0 10"));
  ASSERT_FALSE(later.empty());
  EXPECT_GT(fence(later), fence(next));
}

TEST_F(ClusterAdminTest, FollowersAnswerNotLeaderAndChangeNothing) {
  const std::optional<std::size_t> leader = cluster_.leader();
  ASSERT_TRUE(leader);
  auto holder = client_of(*leader);
  ASSERT_EQ(holder->request("lost-notify", "_", "on"), "ok");
  const std::string token = token_of(holder->request("l", "job", "0 60"));
  ASSERT_FALSE(token.empty());
  const std::string fenced = "locks/job?fence=" + std::to_string(fence(token));

  for (std::size_t follower = 0; follower < cluster_.size(); ++follower) {
    if (follower == *leader) continue;
    SCOPED_TRACE("follower node " + std::to_string(follower + 1));
    ASSERT_TRUE(knows_leader(follower));
    expect_not_leader(check(follower, "job", token), *leader);
    expect_not_leader(inspect(follower, "job"), *leader);
    expect_not_leader(http_request(cluster_.http_port(follower), "GET", "/v1/semaphores/job"),
                      *leader);
    expect_not_leader(http_request(cluster_.http_port(follower), "POST", "/v1/rwlocks/job/check",
                                   token_body(token)),
                      *leader);
    // The admin token is checked first: without it a follower says 401, not where to go.
    HttpResult refused = force_release(follower, "locks/job", {});
    EXPECT_EQ(refused.status, 401) << refused.raw;
    EXPECT_EQ(refused.header("x-dflockd-leader"), "") << refused.raw;
    refused = force_release(follower, "locks/job", {bearer("wrong")});
    EXPECT_EQ(refused.status, 401) << refused.raw;
    // With it: 503 not_leader, every kind, with or without a fence.
    expect_not_leader(force_release(follower, "locks/job"), *leader);
    expect_not_leader(force_release(follower, fenced), *leader);
    expect_not_leader(force_release(follower, "semaphores/job"), *leader);
    expect_not_leader(force_release(follower, "rwlocks/job"), *leader);
    // A bad fence is refused before anything else is asked.
    EXPECT_EQ(force_release(follower, "locks/job?fence=0").status, 400);
    EXPECT_EQ(metric(cluster_.http_port(follower), "turnstile_forced_releases_total"), "0");
  }
  // Nothing changed: the holder still holds, heard nothing, and renews.
  const HttpResult held = check(*leader, "job", token);
  EXPECT_EQ(json_of(held)["held"], true) << held.raw;
  EXPECT_EQ(holder->pending(300ms), "");
  EXPECT_EQ(holder->request("n", "job", token + " 60"), "ok 60");
  EXPECT_EQ(json_of(inspect(*leader, "job"))["holders"][0]["fence"].get<unsigned long long>(),
            fence(token));
}

TEST_F(ClusterAdminTest, AForceReleaseOutlivesAKillOfTheLeader) {
  const std::optional<std::size_t> leader = cluster_.leader();
  ASSERT_TRUE(leader);
  auto holder = client_of(*leader);
  const std::string forced = token_of(holder->request("l", "job", "0 60"));
  ASSERT_FALSE(forced.empty());
  // A second key, held on and never forced: the kill alone changes no holder.
  const std::string kept = token_of(holder->request("l", "other", "0 60"));
  ASSERT_FALSE(kept.empty());
  ASSERT_EQ(force_release(*leader, "locks/job").body, "{\"released\":1}\n");
  ASSERT_EQ(check(*leader, "job", forced).body, kNotHeld);

  ASSERT_TRUE(cluster_.kill(*leader));
  const std::optional<std::size_t> next_leader = cluster_.leader(30s);
  ASSERT_TRUE(next_leader);
  ASSERT_NE(*next_leader, *leader);

  // The new leader applied the force-release from the log: the forced token holds nothing and
  // renews or releases nothing; the other key's holder is still there.
  EXPECT_EQ(check(*next_leader, "job", forced).body, kNotHeld);
  EXPECT_EQ(json_of(check(*next_leader, "other", kept))["held"], true);
  auto again = client_of(*next_leader);
  EXPECT_EQ(again->request("n", "job", forced + " 60"), "error_lease_expired");
  EXPECT_EQ(again->request("r", "job", forced), "error_lease_expired");
  EXPECT_EQ(again->request("check", "job", forced), "error_lease_expired");
  EXPECT_EQ(again->request("check", "other", kept).rfind("ok ", 0), 0U);
  // The key is free at once, and its next fence is above the forced one (and the kept one).
  const std::string next = token_of(again->request("l", "job", "0 60"));
  ASSERT_FALSE(next.empty());
  EXPECT_GT(fence(next), fence(forced));
  EXPECT_GT(fence(next), fence(kept));
  const Json json = json_of(inspect(*next_leader, "job"));
  ASSERT_EQ(json["holders"].size(), 1U) << json;
  EXPECT_EQ(json["holders"][0]["fence"].get<unsigned long long>(), fence(next));
  // And the new leader force-releases too.
  EXPECT_EQ(force_release(*next_leader, "locks/other").body, "{\"released\":1}\n");
  EXPECT_EQ(check(*next_leader, "other", kept).body, kNotHeld);
}

}  // namespace
}  // namespace turnstile::integration
