// turnstiled's log as an operator's tools read it (docs/operations.md, "Log events"): with
// --log-format json every line on stderr is one JSON object, and the events that matter (start,
// listen, fence journal, auth failure, admin force-release, drain, stop) carry their fields. In
// the default text format the same events end with `event=<name> key=value ...`.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/harness.h"

namespace turnstile::integration {
namespace {

constexpr const char* kAdminToken = "admin-token-for-the-log-test";
constexpr const char* kAuthToken = "tcp-token-for-the-log-test";

// Every event named `name` among `objects`.
std::vector<nlohmann::json> events(const std::vector<nlohmann::json>& objects,
                                   const std::string& name) {
  std::vector<nlohmann::json> found;
  for (const nlohmann::json& object : objects) {
    if (object.value("event", "") == name) found.push_back(object);
  }
  return found;
}

TEST(JsonLogTest, EveryLineIsJsonAndTheOperatorEventsCarryTheirFields) {
  TempDir dir;
  const std::string fence_file = dir.file("fences");
  HttpDaemon http({"--log-format=json", "--threads=2", "--fence-state-file=" + fence_file,
                   std::string("--admin-token=") + kAdminToken,
                   std::string("--auth-token=") + kAuthToken});
  Daemon& daemon = *http.daemon;

  // An auth failure on TCP, and an admin force-release over HTTP.
  {
    Client bad(daemon.port());
    EXPECT_EQ(bad.request("auth", "_", "not-the-token"), "error_auth");
  }
  Client holder(daemon.port());
  ASSERT_EQ(holder.request("auth", "_", kAuthToken), "ok");
  ASSERT_EQ(holder.request("l", "job", "0 60").rfind("ok ", 0), 0U);
  const HttpResult forced = http_request(http.http_port, "DELETE", "/v1/admin/locks/job", "",
                                         {std::string("Authorization: Bearer ") + kAdminToken});
  ASSERT_EQ(forced.status, 200) << forced.raw;
  ASSERT_TRUE(daemon.wait_for_log("admin_force_release", 5s)) << daemon.log_text();

  const std::optional<int> status = daemon.stop(10s);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *status;

  std::vector<nlohmann::json> objects;
  for (const std::string& line : daemon.log()) {
    nlohmann::json object;
    ASSERT_NO_THROW(object = nlohmann::json::parse(line)) << "not JSON: " << line;
    ASSERT_TRUE(object.is_object()) << line;
    EXPECT_TRUE(object["ts"].is_string()) << line;
    EXPECT_TRUE(object["level"] == "debug" || object["level"] == "info" ||
                object["level"] == "warn" || object["level"] == "error")
        << line;
    EXPECT_TRUE(object["msg"].is_string()) << line;
    EXPECT_TRUE(!object.contains("event") || object["event"].is_string()) << line;
    objects.push_back(std::move(object));
  }
  ASSERT_FALSE(objects.empty());
  EXPECT_EQ(objects.front().value("event", ""), "start") << daemon.log_text();

  const auto start = events(objects, "start");
  ASSERT_EQ(start.size(), 1U) << daemon.log_text();
  EXPECT_TRUE(start[0]["version"].is_string());
  EXPECT_EQ(start[0]["pid"], daemon.pid());
  EXPECT_EQ(start[0]["threads"], 2);
  EXPECT_EQ(start[0]["http_port"], http.http_port);
  EXPECT_EQ(start[0]["cluster"], false);

  const auto listen = events(objects, "listen");
  ASSERT_EQ(listen.size(), 2U) << daemon.log_text();
  EXPECT_EQ(listen[0]["protocol"], "tcp");
  EXPECT_EQ(listen[0]["address"], "127.0.0.1:" + std::to_string(daemon.port()));
  EXPECT_EQ(listen[0]["shards"], 2);
  EXPECT_EQ(listen[1]["protocol"], "http");
  EXPECT_EQ(listen[1]["address"], "127.0.0.1:" + std::to_string(http.http_port));

  const auto journal = events(objects, "fence_journal_open");
  ASSERT_EQ(journal.size(), 1U) << daemon.log_text();
  EXPECT_EQ(journal[0]["path"], fence_file);
  EXPECT_EQ(journal[0]["recovered"], false);
  EXPECT_TRUE(journal[0]["first_fence"].is_number_unsigned());
  EXPECT_GT(journal[0]["durable_ceiling"].get<std::uint64_t>(),
            journal[0]["first_fence"].get<std::uint64_t>());

  const auto auth = events(objects, "auth_failure");
  ASSERT_EQ(auth.size(), 1U) << daemon.log_text();
  EXPECT_EQ(auth[0]["level"], "warn");
  EXPECT_EQ(auth[0]["transport"], "tcp");
  EXPECT_EQ(auth[0]["peer"], "127.0.0.1");
  EXPECT_EQ(auth[0]["suppressed"], 0);

  const auto force = events(objects, "admin_force_release");
  ASSERT_EQ(force.size(), 1U) << daemon.log_text();
  EXPECT_EQ(force[0]["kind"], "lock");
  EXPECT_EQ(force[0]["key"], "job");
  EXPECT_EQ(force[0]["fence"], 0);
  EXPECT_EQ(force[0]["outcome"], "ok");
  EXPECT_EQ(force[0]["freed"], 1);
  EXPECT_EQ(force[0]["peer"].get<std::string>().rfind("127.0.0.1:", 0), 0U) << force[0];

  const auto drain = events(objects, "drain");
  ASSERT_EQ(drain.size(), 1U) << daemon.log_text();
  EXPECT_EQ(drain[0]["signal"], SIGTERM);
  EXPECT_EQ(drain[0]["shutdown_timeout_s"], 30);
  EXPECT_EQ(drain[0]["leader_handoff"], "none");
  EXPECT_EQ(events(objects, "drained").size(), 1U) << daemon.log_text();
  const auto stop = events(objects, "stop");
  ASSERT_EQ(stop.size(), 1U) << daemon.log_text();
  EXPECT_EQ(stop[0]["exit_code"], 0);
  EXPECT_EQ(objects.back().value("event", ""), "stop") << daemon.log_text();
}

// A one-voter cluster node: cluster_start, then cluster_role when it leads.
TEST(JsonLogTest, ClusterEventsCarryNodeRoleAndTerm) {
  TempDir dir;
  const int raft_port = unused_loopback_port();
  const int client_port = unused_loopback_port();
  const std::string raft = "127.0.0.1:" + std::to_string(raft_port);
  const std::string client = "127.0.0.1:" + std::to_string(client_port);
  DaemonOptions options;
  options.args = {"--log-format=json",        "--port=" + std::to_string(client_port),
                  "--raft-dir=" + dir.path(), "--node-id=7",
                  "--raft-addr=" + raft,      "--cluster-peers=7=" + raft + "@" + client,
                  "--cluster-bootstrap",      "--cluster-secret=secret-of-the-log-test"};
  Daemon daemon(options);
  ASSERT_TRUE(daemon.wait_for_log(R"("event":"cluster_role")", 10s)) << daemon.log_text();
  ASSERT_TRUE(daemon.stop(10s).has_value());

  std::vector<nlohmann::json> objects;
  for (const std::string& line : daemon.log()) {
    ASSERT_NO_THROW(objects.push_back(nlohmann::json::parse(line))) << line;
  }
  const auto start = events(objects, "cluster_start");
  ASSERT_EQ(start.size(), 1U) << daemon.log_text();
  EXPECT_EQ(start[0]["node_id"], 7);
  EXPECT_EQ(start[0]["raft_address"], raft);
  EXPECT_EQ(start[0]["advertise_address"], client);
  const auto role = events(objects, "cluster_role");
  ASSERT_GE(role.size(), 1U) << daemon.log_text();
  EXPECT_EQ(role[0]["node_id"], 7);
  EXPECT_EQ(role[0]["role"], "leader");
  EXPECT_EQ(role[0]["leader_id"], 7);
  EXPECT_GE(role[0]["term"].get<std::uint64_t>(), 1U);
  // On SIGTERM a leader hands leadership over first; alone, it has no one to hand it to.
  const auto drain = events(objects, "drain");
  ASSERT_EQ(drain.size(), 1U) << daemon.log_text();
  EXPECT_NE(drain[0]["leader_handoff"], "none");
}

// Auth failures are rate-limited: one line per 10 s, the next one counts those left out.
TEST(JsonLogTest, AuthFailuresAreRateLimited) {
  Daemon daemon(std::vector<std::string>{"--log-format=json", "--auth-token=secret-of-the-test"});
  for (int i = 0; i < 5; ++i) {
    Client bad(daemon.port());
    EXPECT_EQ(bad.request("auth", "_", "wrong"), "error_auth");
  }
  int lines = 0;
  for (const std::string& line : daemon.log()) {
    if (nlohmann::json::parse(line).value("event", "") == "auth_failure") ++lines;
  }
  EXPECT_EQ(lines, 1) << daemon.log_text();
}

// --log-level error leaves out every info and warn line: a clean start and stop write nothing.
TEST(JsonLogTest, LogLevelErrorWritesNothingOnACleanRun) {
  DaemonOptions options;
  options.args = {"--log-level=error", "--log-format=json", "--huge-pages=false"};
  options.wait_until_listening = false;
  Daemon daemon(options);
  std::this_thread::sleep_for(500ms);
  ASSERT_TRUE(daemon.running());
  const std::optional<int> status = daemon.stop(10s);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *status;
  EXPECT_EQ(daemon.log_size(), 0U) << daemon.log_text();
}

// In the default text format an event keeps its sentence and adds its fields.
TEST(JsonLogTest, TextLinesEndWithTheEventFields) {
  Daemon daemon;
  EXPECT_TRUE(daemon.wait_for_log(
      R"(^\S+ info listening on 127\.0\.0\.1:[0-9]+ \(tcp, [0-9]+ shards\) event=listen )"
      R"(protocol=tcp address=127\.0\.0\.1:[0-9]+ shards=[0-9]+$)",
      0ms))
      << daemon.log_text();
  EXPECT_TRUE(
      daemon.wait_for_log(R"( info turnstiled \S+ starting event=start version=\S+ pid=)", 0ms))
      << daemon.log_text();
}

}  // namespace
}  // namespace turnstile::integration
