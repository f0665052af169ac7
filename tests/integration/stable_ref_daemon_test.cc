// Stable refs and --orphan-ttl with real processes (commit 9320bbc): a session that bound a ref
// with `stable-ref` (TCP) or {"stable_ref"} (HTTP session create) leaves its holders and its
// waiters' places orphaned under the ref when it closes, and a new session with the same ref
// takes them back: the same token with a fresh lease, or the same place in the queue. Without
// --orphan-ttl a close releases as before. Also `barrier` and GET /v1/readindex on one node and
// in a cluster of three, and the cluster's failover: a new leader keeps the old leader's holders
// and ref'd waiters for their refs. (Named _daemon_test: tests/core/stable_ref_test.cc is the
// engine's unit test, and test executables are named after their files.)
//
// Single-node tests that must know a close reached the engine run with --threads 1: the router
// then closes the session in the engine before the connection count drops, so a `stats` that
// shows the lower count comes after the close.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/cluster_harness.h"
#include "tests/integration/harness.h"

namespace turnstile::integration {
namespace {

using Json = nlohmann::json;

// ---- helpers -----------------------------------------------------------------------------------

// "ok <32 hex> <lease>": the token, or "" when the reply is not a grant.
std::string token_of(const std::string& reply) {
  static const std::regex kGrant("^ok ([0-9a-f]{32}) [0-9]+$");
  std::smatch match;
  if (!std::regex_match(reply, match, kGrant)) return "";
  return match[1].str();
}

Json tcp_stats(int port) {
  Client client(port);
  const std::string reply = client.request("stats", "_", "_");
  if (reply.rfind("ok ", 0) != 0) return Json();
  return Json::parse(reply.substr(3));
}

// The `locks` entry of `key` in stats, or null.
Json lock_stats(int port, const std::string& key) {
  const Json stats = tcp_stats(port);
  if (!stats.is_object()) return Json();
  for (const Json& lock : stats["locks"]) {
    if (lock["key"] == key) return lock;
  }
  return Json();
}

std::int64_t waiters_of(int port, const std::string& key) {
  const Json lock = lock_stats(port, key);
  return lock.is_object() ? lock["waiters"].get<std::int64_t>() : 0;
}

// Waits until the server counts `others` connections besides the stats probe's own.
bool connections_drop_to(int port, std::int64_t others) {
  return eventually(
      [&] {
        const Json stats = tcp_stats(port);
        return stats.is_object() && stats["connections"].get<std::int64_t>() == others + 1;
      },
      5s);
}

// A connection that bound `ref` (asserting the `ok`).
Client with_ref(int port, const std::string& ref) {
  Client client(port);
  const std::string reply = client.request("stable-ref", ref, "_");
  EXPECT_EQ(reply, "ok") << "stable-ref " << ref;
  return client;
}

struct HttpResponse : HttpResult {
  Json json() const {
    try {
      return Json::parse(body);
    } catch (const Json::exception&) {
      return Json();
    }
  }
};

// One HTTP/1.1 request on its own connection (Connection: close), read until the server closes.
HttpResponse http_call(int port, const std::string& method, const std::string& path,
                       const std::string& body = "", const std::string& session = "") {
  std::vector<std::string> headers;
  if (!session.empty()) headers.push_back("X-Dflockd-Session: " + session);
  return HttpResponse{http_request(port, method, path, body, headers)};
}

// ---- one node ----------------------------------------------------------------------------------

TEST(StableRef, AHolderIsKeptForItsRefAndTakenBackWithTheSameToken) {
  Daemon server({"--orphan-ttl", "30"});
  const int port = server.port();
  std::string token;
  {
    Client a = with_ref(port, "job-1");
    const std::string grant = a.request("l", "k", "0 60");
    token = token_of(grant);
    ASSERT_FALSE(token.empty()) << grant;
    a.close();
  }
  // Orphaned with auto-release on: kept for the orphan time at most, so its lease (60 s) drops to
  // 30 s once the close has reached the engine.
  ASSERT_TRUE(eventually(
      [&] {
        const Json lock = lock_stats(port, "k");
        return lock.is_object() && lock["lease_expires_in_s"].get<double>() <= 30.5;
      },
      5s))
      << lock_stats(port, "k");
  Client b(port);  // no ref: the slot is kept, not given away
  EXPECT_EQ(b.request("l", "k", "0"), "timeout");
  Client c = with_ref(port, "job-1");
  const std::string again = c.request("l", "k", "0 45");
  EXPECT_EQ(again, "ok " + token + " 45");  // the same token, a fresh lease
  const Json lock = lock_stats(port, "k");
  ASSERT_TRUE(lock.is_object());
  EXPECT_GT(lock["lease_expires_in_s"].get<double>(), 40.0);
  EXPECT_EQ(c.request("r", "k", token), "ok");
  EXPECT_FALSE(token_of(b.request("l", "k", "0")).empty());
}

TEST(StableRef, AWaiterKeepsItsPlaceInTheQueueForItsRef) {
  Daemon server({"--orphan-ttl", "30", "--threads", "1"});
  const int port = server.port();
  Client holder(port);  // no ref
  const std::string token = token_of(holder.request("l", "k", "0"));
  ASSERT_FALSE(token.empty());
  Client a = with_ref(port, "w1");
  ASSERT_TRUE(a.send(frame("l", "k", "100")));
  ASSERT_TRUE(eventually([&] { return waiters_of(port, "k") == 1; }, 5s));
  Client d(port);  // no ref, behind a
  ASSERT_TRUE(d.send(frame("l", "k", "100")));
  ASSERT_TRUE(eventually([&] { return waiters_of(port, "k") == 2; }, 5s));
  a.close();
  ASSERT_TRUE(connections_drop_to(port, 2));  // holder and d
  EXPECT_EQ(waiters_of(port, "k"), 2);        // a's place is still in the queue
  Client a2 = with_ref(port, "w1");
  ASSERT_TRUE(a2.send(frame("l", "k", "100")));
  // Taken back, not queued anew behind d. (A release that comes first hands the slot to the
  // orphaned place, which a2 then adopts: the outcome is the same.)
  ASSERT_TRUE(eventually([&] { return waiters_of(port, "k") == 2; }, 5s));
  EXPECT_EQ(holder.request("r", "k", token), "ok");
  const std::optional<std::string> granted = a2.read_line(5s);
  ASSERT_TRUE(granted);
  const std::string a2_token = token_of(*granted);
  EXPECT_FALSE(a2_token.empty()) << *granted;
  EXPECT_FALSE(d.read_line(300ms)) << "d was granted before a2";
  EXPECT_EQ(a2.request("r", "k", a2_token), "ok");
  const std::optional<std::string> d_granted = d.read_line(5s);
  ASSERT_TRUE(d_granted);
  EXPECT_FALSE(token_of(*d_granted).empty()) << *d_granted;
}

TEST(StableRef, WithoutAnOrphanTimeACloseReleasesAtOnce) {
  Daemon server({"--threads", "1"});
  const int port = server.port();
  {
    Client a = with_ref(port, "job-1");
    ASSERT_FALSE(token_of(a.request("l", "k", "0 60")).empty());
    a.close();
  }
  ASSERT_TRUE(connections_drop_to(port, 0));
  Client other(port);
  EXPECT_FALSE(token_of(other.request("l", "k", "0")).empty());
}

TEST(StableRef, OrphansEndWithTheirTime) {
  Daemon server({"--orphan-ttl", "2", "--threads", "1"});
  const int port = server.port();
  // A holder: kept 2 s (not its 60 s lease), then the next waiter has it.
  {
    Client a = with_ref(port, "x");
    ASSERT_FALSE(token_of(a.request("l", "k", "0 60")).empty());
    Client d(port);
    ASSERT_TRUE(d.send(frame("l", "k", "30")));
    ASSERT_TRUE(eventually([&] { return waiters_of(port, "k") == 1; }, 5s));
    a.close();
    EXPECT_FALSE(d.read_line(500ms)) << "released at once, not kept";
    const std::optional<std::string> granted = d.read_line(10s);
    ASSERT_TRUE(granted);
    EXPECT_FALSE(token_of(*granted).empty()) << *granted;
    Client late = with_ref(port, "x");
    EXPECT_EQ(late.request("l", "k", "0"), "timeout");  // nothing left to take back
  }
  ASSERT_TRUE(connections_drop_to(port, 0));
  // A place in the queue: dropped after 2 s, and the queue moves on without it.
  Client holder(port);
  const std::string token = token_of(holder.request("l", "q", "0"));
  ASSERT_FALSE(token.empty());
  Client a = with_ref(port, "y");
  ASSERT_TRUE(a.send(frame("l", "q", "100")));
  ASSERT_TRUE(eventually([&] { return waiters_of(port, "q") == 1; }, 5s));
  Client d(port);
  ASSERT_TRUE(d.send(frame("l", "q", "100")));
  ASSERT_TRUE(eventually([&] { return waiters_of(port, "q") == 2; }, 5s));
  a.close();
  ASSERT_TRUE(connections_drop_to(port, 2));
  EXPECT_EQ(waiters_of(port, "q"), 2);
  EXPECT_TRUE(eventually([&] { return waiters_of(port, "q") == 1; }, 10s));
  EXPECT_EQ(holder.request("r", "q", token), "ok");
  const std::optional<std::string> granted = d.read_line(5s);
  ASSERT_TRUE(granted);
  EXPECT_FALSE(token_of(*granted).empty()) << *granted;
}

TEST(StableRef, AnOrphanedPlaceThatReachesTheHeadKeepsTheSlotForItsRef) {
  Daemon server({"--orphan-ttl", "2", "--threads", "1"});
  const int port = server.port();
  Client holder(port);
  const std::string token = token_of(holder.request("l", "k", "0"));
  ASSERT_FALSE(token.empty());
  {
    Client a = with_ref(port, "z");
    ASSERT_TRUE(a.send(frame("l", "k", "100")));
    ASSERT_TRUE(eventually([&] { return waiters_of(port, "k") == 1; }, 5s));
    a.close();
  }
  Client d(port);
  ASSERT_TRUE(d.send(frame("l", "k", "100")));
  ASSERT_TRUE(eventually([&] { return waiters_of(port, "k") == 2; }, 5s));
  ASSERT_TRUE(connections_drop_to(port, 2));
  // The release hands the slot to the orphaned place: d still waits, until the orphan time ends.
  EXPECT_EQ(holder.request("r", "k", token), "ok");
  EXPECT_FALSE(d.read_line(500ms)) << "the orphaned place was skipped";
  const std::optional<std::string> granted = d.read_line(10s);
  ASSERT_TRUE(granted);
  EXPECT_FALSE(token_of(*granted).empty()) << *granted;

  // Within the orphan time the ref takes the granted slot: the token of the grant, ahead of e.
  const std::string token2 = token_of(holder.request("l", "k2", "0"));
  ASSERT_FALSE(token2.empty());
  {
    Client a = with_ref(port, "z2");
    ASSERT_TRUE(a.send(frame("l", "k2", "100")));
    ASSERT_TRUE(eventually([&] { return waiters_of(port, "k2") == 1; }, 5s));
    a.close();
  }
  Client e(port);
  ASSERT_TRUE(e.send(frame("l", "k2", "100")));
  ASSERT_TRUE(eventually([&] { return waiters_of(port, "k2") == 2; }, 5s));
  ASSERT_TRUE(connections_drop_to(port, 3));  // holder, d, e
  EXPECT_EQ(holder.request("r", "k2", token2), "ok");
  Client a2 = with_ref(port, "z2");
  const std::string taken = a2.request("l", "k2", "0");
  const std::string taken_token = token_of(taken);
  ASSERT_FALSE(taken_token.empty()) << taken;
  EXPECT_GT(fence_of(taken_token), fence_of(token2));  // granted at the release, not before
  EXPECT_FALSE(e.read_line(300ms));
  EXPECT_EQ(a2.request("r", "k2", taken_token), "ok");
  EXPECT_TRUE(e.read_line(5s));
}

TEST(StableRef, ASemaphoreHolderIsTakenBackWithItsToken) {
  Daemon server({"--orphan-ttl", "30", "--threads", "1"});
  const int port = server.port();
  Client other(port);
  ASSERT_FALSE(token_of(other.request("sl", "s", "0 2")).empty());
  std::string token;
  {
    Client a = with_ref(port, "sem");
    token = token_of(a.request("sl", "s", "0 2"));
    ASSERT_FALSE(token.empty());
    a.close();
  }
  ASSERT_TRUE(connections_drop_to(port, 1));
  Client third(port);
  EXPECT_EQ(third.request("sl", "s", "0 2"), "timeout");  // both slots still held
  Client a2 = with_ref(port, "sem");
  EXPECT_EQ(a2.request("sl", "s", "0 2 7"), "ok " + token + " 7");
  EXPECT_EQ(a2.request("sr", "s", token), "ok");
  EXPECT_FALSE(token_of(third.request("sl", "s", "0 2")).empty());
}

TEST(StableRef, EnqueueTakesBackAHolderAndAPlace) {
  Daemon server({"--orphan-ttl", "30", "--threads", "1"});
  const int port = server.port();
  // A holder granted to `e`: a new `e` with the ref answers `acquired` with the same token.
  {
    Client a = with_ref(port, "e1");
    const std::string acquired = a.request("e", "k", "60");
    ASSERT_EQ(acquired.rfind("acquired ", 0), 0u) << acquired;
    const std::string token = acquired.substr(9, 32);
    a.close();
    ASSERT_TRUE(connections_drop_to(port, 0));
    Client a2 = with_ref(port, "e1");
    EXPECT_EQ(a2.request("e", "k", "20"), "acquired " + token + " 20");
    EXPECT_EQ(a2.request("w", "k", "1"), "ok " + token + " 20");
    EXPECT_EQ(a2.request("r", "k", token), "ok");
  }
  ASSERT_TRUE(connections_drop_to(port, 0));
  // A place taken by `e`: a new `e` with the ref answers `queued` and keeps it, ahead of d.
  Client holder(port);
  const std::string token = token_of(holder.request("l", "q", "0"));
  ASSERT_FALSE(token.empty());
  Client a = with_ref(port, "e2");
  EXPECT_EQ(a.request("e", "q", ""), "queued");
  Client d(port);
  ASSERT_TRUE(d.send(frame("l", "q", "100")));
  ASSERT_TRUE(eventually([&] { return waiters_of(port, "q") == 2; }, 5s));
  a.close();
  ASSERT_TRUE(connections_drop_to(port, 2));
  Client a2 = with_ref(port, "e2");
  EXPECT_EQ(a2.request("e", "q", ""), "queued");
  EXPECT_EQ(waiters_of(port, "q"), 2);
  EXPECT_EQ(holder.request("r", "q", token), "ok");
  const std::string waited = a2.request("w", "q", "5");
  const std::string a2_token = token_of(waited);
  EXPECT_FALSE(a2_token.empty()) << waited;
  EXPECT_FALSE(d.read_line(300ms)) << "d was granted before a2";
  EXPECT_EQ(a2.request("r", "q", a2_token), "ok");
  EXPECT_TRUE(d.read_line(5s));
}

TEST(StableRef, WithoutAutoReleaseAHolderIsKeptForItsWholeLease) {
  Daemon server({"--orphan-ttl", "1", "--auto-release-on-disconnect=false", "--threads", "1"});
  const int port = server.port();
  std::string token;
  {
    Client a = with_ref(port, "job");
    token = token_of(a.request("l", "k", "0 60"));
    ASSERT_FALSE(token.empty());
    a.close();
  }
  ASSERT_TRUE(connections_drop_to(port, 0));
  // Past the orphan time: still kept (the lease is not cut), and still the ref's to take back.
  ASSERT_TRUE(eventually(
      [&] {
        const Json lock = lock_stats(port, "k");
        return lock.is_object() && lock["lease_expires_in_s"].get<double>() < 58.5;
      },
      5s));
  const Json lock = lock_stats(port, "k");
  ASSERT_TRUE(lock.is_object());
  EXPECT_GT(lock["lease_expires_in_s"].get<double>(), 50.0);
  Client other(port);
  EXPECT_EQ(other.request("l", "k", "0"), "timeout");
  Client a2 = with_ref(port, "job");
  EXPECT_EQ(token_of(a2.request("l", "k", "0")), token);
}

TEST(StableRef, ProtocolRefBindingAndBarrier) {
  Daemon server;
  const int port = server.port();
  Client bound = with_ref(port, "first");
  EXPECT_EQ(bound.request("stable-ref", "second", "_"), "error");  // bound once
  EXPECT_EQ(bound.request("stable-ref", "first", "_"), "error");
  EXPECT_EQ(bound.request("ping", "_", "_"), "ok");

  Client client(port);
  EXPECT_EQ(client.request("stable-ref", std::string(65, 'x'), "_"), "error");
  EXPECT_EQ(client.request("stable-ref", "tab\there", "_"), "error");
  EXPECT_EQ(client.request("ping", "_", "_"), "ok");  // the connection stays open
  EXPECT_EQ(client.request("stable-ref", std::string(64, 'x'), "_"), "ok");
  EXPECT_EQ(client.request("barrier", "_", "_"), "ok");
  EXPECT_FALSE(token_of(client.request("l", "k", "0")).empty());
  EXPECT_EQ(client.request("barrier", "_", "_"), "ok");
}

TEST(StableRef, HttpSessionsTakeAStableRef) {
  HttpDaemon server({"--orphan-ttl", "30"});
  const int port = server.http_port;
  const HttpResponse with = http_call(port, "POST", "/v1/sessions", R"({"stable_ref":"x"})");
  EXPECT_EQ(with.status, 200) << with.body;
  EXPECT_EQ(with.json().value("session_id", "").size(), 32u) << with.body;
  const HttpResponse empty = http_call(port, "POST", "/v1/sessions", R"({"stable_ref":""})");
  EXPECT_EQ(empty.status, 400) << empty.body;
  EXPECT_EQ(empty.json().value("error", ""), "bad_request") << empty.body;
  const HttpResponse too_long =
      http_call(port, "POST", "/v1/sessions", R"({"stable_ref":")" + std::string(65, 'x') + "\"}");
  EXPECT_EQ(too_long.status, 400) << too_long.body;
  const HttpResponse bogus = http_call(port, "POST", "/v1/sessions", R"({"bogus":1})");
  EXPECT_EQ(bogus.status, 400) << bogus.body;
  EXPECT_EQ(bogus.json().value("error", ""), "bad_request") << bogus.body;
  const HttpResponse plain = http_call(port, "POST", "/v1/sessions");
  EXPECT_EQ(plain.status, 200) << plain.body;

  const HttpResponse read_index = http_call(port, "GET", "/v1/readindex");
  EXPECT_EQ(read_index.status, 404) << read_index.body;
  EXPECT_EQ(read_index.json().value("error", ""), "cluster_disabled") << read_index.body;

  // Adoption over HTTP: session 1 (ref "h") acquires, is deleted; session 2 (ref "h") gets the
  // same token.
  const std::string first = http_call(port, "POST", "/v1/sessions", R"({"stable_ref":"h"})")
                                .json()
                                .value("session_id", "");
  ASSERT_EQ(first.size(), 32u);
  const HttpResponse acquired =
      http_call(port, "POST", "/v1/locks/k", R"({"acquire_timeout_s":0})", first);
  ASSERT_EQ(acquired.status, 200) << acquired.body;
  const std::string token = acquired.json().value("token", "");
  ASSERT_EQ(token.size(), 32u) << acquired.body;
  EXPECT_EQ(http_call(port, "DELETE", "/v1/sessions/" + first).status, 204);
  const std::string other = http_call(port, "POST", "/v1/sessions").json().value("session_id", "");
  ASSERT_EQ(other.size(), 32u);
  const std::string second = http_call(port, "POST", "/v1/sessions", R"({"stable_ref":"h"})")
                                 .json()
                                 .value("session_id", "");
  ASSERT_EQ(second.size(), 32u);
  // The delete reaches the engine asynchronously: until then the first session still owns the
  // lock and a try-once acquire times out, changing nothing.
  Json retaken;
  ASSERT_TRUE(eventually(
      [&] {
        retaken =
            http_call(port, "POST", "/v1/locks/k", R"({"acquire_timeout_s":0})", second).json();
        return retaken.value("status", "") == "ok";
      },
      5s))
      << retaken;
  EXPECT_EQ(retaken.value("token", ""), token) << retaken;
  // Without the ref the lock is not to be had.
  const HttpResponse refused =
      http_call(port, "POST", "/v1/locks/k", R"({"acquire_timeout_s":0})", other);
  EXPECT_EQ(refused.json().value("status", ""), "timeout") << refused.body;
}

TEST(StableRef, AnHttpLongPollKeepsItsPlaceForItsRef) {
  HttpDaemon server({"--orphan-ttl", "30", "--threads", "1"});
  const int port = server.daemon->port();
  const int http_port = server.http_port;
  Client holder(port);
  const std::string token = token_of(holder.request("l", "k", "0"));
  ASSERT_FALSE(token.empty());
  const std::string first = http_call(http_port, "POST", "/v1/sessions", R"({"stable_ref":"poll"})")
                                .json()
                                .value("session_id", "");
  ASSERT_EQ(first.size(), 32u);
  // A lock with a 60 s lease: its lease drops to the orphan time when the close reaches the
  // engine (one shard: the waiter is orphaned in the same step).
  ASSERT_EQ(http_call(http_port, "POST", "/v1/locks/signal",
                      R"({"acquire_timeout_s":0,"lease_ttl_s":60})", first)
                .json()
                .value("status", ""),
            "ok");
  Client poll(http_port);
  const std::string body = R"({"acquire_timeout_s":60})";
  ASSERT_TRUE(poll.send("POST /v1/locks/k HTTP/1.1\r\nHost: x\r\nX-Dflockd-Session: " + first +
                        "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body));
  ASSERT_TRUE(eventually([&] { return waiters_of(port, "k") == 1; }, 5s));
  Client d(port);  // TCP, no ref, behind the long poll
  ASSERT_TRUE(d.send(frame("l", "k", "100")));
  ASSERT_TRUE(eventually([&] { return waiters_of(port, "k") == 2; }, 5s));
  EXPECT_EQ(http_call(http_port, "DELETE", "/v1/sessions/" + first).status, 204);
  ASSERT_TRUE(eventually(
      [&] {
        const Json lock = lock_stats(port, "signal");
        return lock.is_object() && lock["lease_expires_in_s"].get<double>() <= 30.5;
      },
      5s));
  EXPECT_EQ(waiters_of(port, "k"), 2);
  const std::string second =
      http_call(http_port, "POST", "/v1/sessions", R"({"stable_ref":"poll"})")
          .json()
          .value("session_id", "");
  ASSERT_EQ(second.size(), 32u);
  Client poll2(http_port);
  ASSERT_TRUE(poll2.send("POST /v1/locks/k HTTP/1.1\r\nHost: x\r\nX-Dflockd-Session: " + second +
                         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body));
  ASSERT_TRUE(eventually([&] { return waiters_of(port, "k") == 2; }, 5s));
  EXPECT_EQ(holder.request("r", "k", token), "ok");
  std::string answer;
  ASSERT_TRUE(eventually(
      [&] {
        answer += poll2.pending(100ms);
        return answer.find("\"token\"") != std::string::npos;
      },
      5s))
      << answer;
  EXPECT_NE(answer.find("\"status\":\"ok\""), std::string::npos) << answer;
  EXPECT_FALSE(d.read_line(300ms)) << "d was granted before the ref's place";
}

// ---- a cluster of three ------------------------------------------------------------------------

constexpr std::size_t kNodes = 3;

class StableRefClusterTest : public ::testing::Test {
 protected:
  LoopbackCluster cluster_{{.extra_args = {"--orphan-ttl", "30"}}};
};

TEST_F(StableRefClusterTest, BarrierAndReadIndexAnswerOnTheLeaderAndRedirectOnFollowers) {
  const std::optional<std::size_t> leader_index = cluster_.leader(20s);
  ASSERT_TRUE(leader_index);
  const std::string expected = "error_not_leader " + cluster_.address(*leader_index);
  for (std::size_t i = 0; i < kNodes; ++i) {
    SCOPED_TRACE("node " + std::to_string(i + 1));
    if (i == *leader_index) {
      Client client(cluster_.client_port(i));
      EXPECT_EQ(client.request("barrier", "_", "_"), "ok");
      const HttpResponse response = http_call(cluster_.http_port(i), "GET", "/v1/readindex");
      EXPECT_EQ(response.status, 200) << response.body;
      EXPECT_EQ(response.json().value("status", ""), "ok") << response.body;
      continue;
    }
    // A follower learns the leader's address with its heartbeats.
    std::string reply;
    EXPECT_TRUE(eventually(
        [&] {
          Client client(cluster_.client_port(i));
          reply = client.request("barrier", "_", "_");
          return reply == expected;
        },
        10s))
        << reply;
    HttpResponse response;
    EXPECT_TRUE(eventually(
        [&] {
          response = http_call(cluster_.http_port(i), "GET", "/v1/readindex");
          return response.status == 503;
        },
        10s))
        << response.status << " " << response.body;
    EXPECT_EQ(response.json().value("error", ""), "not_leader") << response.body;
    EXPECT_EQ(response.headers["x-dflockd-leader"], cluster_.address(*leader_index));
  }
}

TEST_F(StableRefClusterTest, RefsTakeBackHoldersAndPlacesFromTheNewLeader) {
  const std::optional<std::size_t> first = cluster_.leader(20s);
  ASSERT_TRUE(first);
  const int old_port = cluster_.client_port(*first);
  Client a = with_ref(old_port, "r1");
  const std::string grant = a.request("l", "k", "0 60");
  const std::string token = token_of(grant);
  ASSERT_FALSE(token.empty()) << grant;
  Client b = with_ref(old_port, "r2");
  ASSERT_TRUE(b.send(frame("l", "k", "60")));  // parks behind a
  // Applied on the leader, so committed: the next leader has it.
  ASSERT_TRUE(eventually([&] { return waiters_of(old_port, "k") == 1; }, 5s));

  ASSERT_TRUE(cluster_.kill(*first));
  const std::optional<std::size_t> next = cluster_.leader(20s);
  ASSERT_TRUE(next);
  ASSERT_NE(*next, *first);
  const int port = cluster_.client_port(*next);

  // a's holder was kept for r1 (with its lease): the ref takes it back, same token.
  Client a2 = with_ref(port, "r1");
  const std::string again = a2.request("l", "k", "0");
  EXPECT_EQ(token_of(again), token) << again;
  Client c(port);  // no ref: nothing to take
  EXPECT_EQ(c.request("l", "k", "0"), "timeout");
  // A waiter without a ref queues behind b's kept place.
  Client waiter(port);
  ASSERT_TRUE(waiter.send(frame("l", "k", "30")));
  ASSERT_TRUE(eventually([&] { return waiters_of(port, "k") == 2; }, 5s));
  Client b2 = with_ref(port, "r2");
  ASSERT_TRUE(b2.send(frame("l", "k", "30")));  // takes b's place back
  ASSERT_TRUE(eventually([&] { return waiters_of(port, "k") == 2; }, 5s));
  EXPECT_EQ(a2.request("r", "k", token), "ok");
  const std::optional<std::string> granted = b2.read_line(10s);
  ASSERT_TRUE(granted);
  const std::string b2_token = token_of(*granted);
  EXPECT_FALSE(b2_token.empty()) << *granted;
  EXPECT_FALSE(waiter.read_line(300ms)) << "the waiter without a ref went before b's place";
  EXPECT_EQ(b2.request("r", "k", b2_token), "ok");
  const std::optional<std::string> last = waiter.read_line(10s);
  ASSERT_TRUE(last);
  EXPECT_FALSE(token_of(*last).empty()) << *last;

  // The killed node restarts from its directory (orphans in its log and snapshots) and follows.
  cluster_.start(*first);
  std::string reply;
  EXPECT_TRUE(eventually(
      [&] {
        Client client(cluster_.client_port(*first));
        reply = client.request("barrier", "_", "_");
        return reply == "error_not_leader " + cluster_.address(*next);
      },
      15s))
      << reply;
}

}  // namespace
}  // namespace turnstile::integration
