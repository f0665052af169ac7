// Operating a cluster with real processes (docs/cluster.md): a damaged raft directory refuses to
// start and says what to do; voters are added and removed at run time through the admin routes,
// one change at a time; a leader that removes itself steps down and the removed nodes leave the
// others' terms alone; SIGTERM on the leader hands leadership over before the process exits 0.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/cluster_harness.h"
#include "tests/integration/harness.h"

namespace turnstile::integration {
namespace {

namespace fs = std::filesystem;

constexpr std::size_t kMaxNodes = 5;
const std::string kAdminToken = "integration-admin-token";

// One HTTP/1.1 request on its own connection; `token` empty: no Authorization header.
HttpResult http(int port, const std::string& method, const std::string& path,
                const std::string& body, const std::string& token,
                std::chrono::milliseconds timeout = 5s) {
  std::vector<std::string> headers;
  if (!token.empty()) headers.push_back("Authorization: Bearer " + token);
  return http_request(port, method, path, body, headers, timeout);
}

class ClusterOpsTest : public ::testing::Test {
 protected:
  // Waits until node i answers a lock request `error_not_leader <leader's address>`.
  bool follows(std::size_t i, std::size_t leader_index, std::chrono::milliseconds timeout = 15s) {
    std::string reply;
    const bool ok = eventually(
        [&] {
          Client client(cluster_.client_port(i));
          reply = client.request("l", "follow-probe", "0 30");
          return reply == "error_not_leader " + cluster_.address(leader_index);
        },
        timeout);
    EXPECT_TRUE(ok) << "node " << i + 1 << ": " << reply;
    return ok;
  }

  std::string add_body(std::size_t i) const {
    return R"({"id":)" + std::to_string(i + 1) + R"(,"raft_address":")" + cluster_.raft_address(i) +
           R"(","client_address":")" + cluster_.address(i) + R"("})";
  }

  // Lines that say an election happened on node i, from line `from` on.
  std::size_t elections_since(std::size_t i, std::size_t from) const {
    std::size_t count = 0;
    const std::vector<std::string> lines = cluster_.node(i).log();
    for (std::size_t k = from; k < lines.size(); ++k) {
      if (lines[k].find("leads in term") != std::string::npos ||
          lines[k].find("no longer leads") != std::string::npos) {
        ++count;
      }
    }
    return count;
  }

  // Nodes 0..2 are the initial voters (bootstrapped); the others start empty, to be added.
  LoopbackCluster cluster_{
      {.nodes = kMaxNodes, .voters = 3, .extra_args = {"--admin-token", kAdminToken}}};
};

// ---- a damaged raft directory ------------------------------------------------------------------

void truncate_file(const fs::path& path, std::uintmax_t size) { fs::resize_file(path, size); }

void corrupt_middle(const fs::path& path) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  const auto size = static_cast<std::streamoff>(fs::file_size(path));
  for (std::streamoff at = size / 2; at < size / 2 + 16 && at < size; ++at) {
    file.seekg(at);
    const int byte = file.get();
    file.seekp(at);
    file.put(static_cast<char>(byte ^ 0x5a));
  }
}

TEST_F(ClusterOpsTest, ADamagedRaftDirectoryRefusesToStartAndSaysWhatToDo) {
  const std::optional<std::size_t> leader_index = cluster_.leader();
  ASSERT_TRUE(leader_index);
  Client client(cluster_.client_port(*leader_index));
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(client.request("l", "k" + std::to_string(i), "0 30").substr(0, 3), "ok ");
  }
  const std::size_t follower = (*leader_index + 1) % 3;
  ASSERT_TRUE(follows(follower, *leader_index));
  const std::optional<int> stopped = cluster_.stop(follower);
  ASSERT_TRUE(stopped);
  const fs::path dir = cluster_.raft_dir(follower);
  const fs::path saved = dir.string() + "-saved";
  fs::copy(dir, saved);

  // The largest log file, a segment: some of its bytes flipped.
  fs::path segment;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("metadata", 0) == 0 || name.rfind("snapshot", 0) == 0) continue;
    if (segment.empty() || entry.file_size() > fs::file_size(segment)) segment = entry.path();
  }
  ASSERT_FALSE(segment.empty());

  struct Damage {
    std::string what;
    std::function<void()> apply;
  };
  const std::vector<Damage> damages = {
      {"a segment with flipped bytes", [&] { corrupt_middle(segment); }},
      {"a segment cut short", [&] { truncate_file(segment, fs::file_size(segment) - 7); }},
      {"both metadata files cut short",
       [&] {
         truncate_file(dir / "metadata1", 10);
         if (fs::exists(dir / "metadata2")) truncate_file(dir / "metadata2", 10);
       }},
  };
  for (const Damage& damage : damages) {
    SCOPED_TRACE(damage.what);
    fs::remove_all(dir);
    fs::copy(saved, dir);
    damage.apply();
    std::map<std::string, std::uintmax_t> before;
    for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
      before[entry.path().filename().string()] = entry.file_size();
    }
    cluster_.start(follower, false);
    const std::optional<int> status = cluster_.node(follower).wait_exit(15s);
    ASSERT_TRUE(status) << cluster_.node(follower).log_text();
    // 65: a supervisor must not start it again (docs/cluster.md, "A damaged directory").
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 65) << *status;
    const std::string log = cluster_.node(follower).log_text();
    EXPECT_NE(log.find("is damaged or unreadable"), std::string::npos) << log;
    EXPECT_NE(log.find("re-add it as a new member with an empty directory"), std::string::npos)
        << log;
    // Nothing was repaired: the files are as the damage left them.
    std::map<std::string, std::uintmax_t> after;
    for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
      after[entry.path().filename().string()] = entry.file_size();
    }
    EXPECT_EQ(before, after);
  }

  // Restored from the copy (a backup of a stopped node), it starts and follows again.
  fs::remove_all(dir);
  fs::copy(saved, dir);
  fs::remove_all(saved);
  cluster_.start(follower);
  EXPECT_TRUE(follows(follower, *leader_index));
}

// ---- adding and removing voters ----------------------------------------------------------------

TEST_F(ClusterOpsTest, AddsAndRemovesVotersOneChangeAtATime) {
  const std::optional<std::size_t> first = cluster_.leader();
  ASSERT_TRUE(first);
  const std::size_t follower = (*first + 1) % 3;
  const std::size_t other = (*first + 2) % 3;
  Client holder(cluster_.client_port(*first));
  const std::string grant = holder.request("l", "job", "0 60");
  ASSERT_EQ(grant.substr(0, 3), "ok ") << grant;
  const std::string token = grant.substr(3, 32);

  // The token is checked first: missing or wrong, 401.
  EXPECT_EQ(http(cluster_.http_port(*first), "POST", "/v1/admin/voters", add_body(3), "").status,
            401);
  EXPECT_EQ(
      http(cluster_.http_port(*first), "POST", "/v1/admin/voters", add_body(3), "wrong").status,
      401);
  EXPECT_EQ(http(cluster_.http_port(*first), "DELETE", "/v1/admin/voters/2", "", "wrong").status,
            401);
  // Bad bodies and ids: 400.
  EXPECT_EQ(http(cluster_.http_port(*first), "POST", "/v1/admin/voters", R"({"id":0})", kAdminToken)
                .status,
            400);
  EXPECT_EQ(
      http(cluster_.http_port(*first), "POST", "/v1/admin/voters",
           R"({"id":4,"raft_address":"127.0.0.1","client_address":"127.0.0.1:1"})", kAdminToken)
          .status,
      400);
  EXPECT_EQ(
      http(cluster_.http_port(*first), "DELETE", "/v1/admin/voters/x1", "", kAdminToken).status,
      400);
  EXPECT_EQ(
      http(cluster_.http_port(*first), "DELETE", "/v1/admin/voters/9", "", kAdminToken).status,
      404);
  // Another member's raft address: refused up front, and the configuration keeps no spare.
  const HttpResult taken = http(cluster_.http_port(*first), "POST", "/v1/admin/voters",
                                R"({"id":9,"raft_address":")" + cluster_.raft_address(1) +
                                    R"(","client_address":"127.0.0.1:1"})",
                                kAdminToken);
  EXPECT_EQ(taken.status, 409) << taken.raw;
  EXPECT_TRUE(taken.has("address_taken")) << taken.raw;
  EXPECT_TRUE(taken.has("is taken by node 2")) << taken.raw;
  EXPECT_EQ(
      http(cluster_.http_port(*first), "DELETE", "/v1/admin/voters/9", "", kAdminToken).status,
      404);
  // A follower sends the client to the leader.
  const HttpResult on_follower =
      http(cluster_.http_port(follower), "POST", "/v1/admin/voters", add_body(3), kAdminToken);
  EXPECT_EQ(on_follower.status, 503) << on_follower.raw;
  EXPECT_TRUE(on_follower.has("X-Dflockd-Leader: " + cluster_.address(*first))) << on_follower.raw;
  EXPECT_TRUE(on_follower.has("not_leader")) << on_follower.raw;

  // Node 4 is added before it runs: its promotion waits for it, and meanwhile any other change
  // is refused with 409.
  std::future<HttpResult> adding = std::async(std::launch::async, [&] {
    return http(cluster_.http_port(*first), "POST", "/v1/admin/voters", add_body(3), kAdminToken,
                60s);
  });
  ASSERT_TRUE(cluster_.node(*first).wait_for_log("admin request: add voter 4", 5s).has_value());
  std::this_thread::sleep_for(200ms);
  const HttpResult second_add =
      http(cluster_.http_port(*first), "POST", "/v1/admin/voters", add_body(4), kAdminToken);
  EXPECT_EQ(second_add.status, 409) << second_add.raw;
  const HttpResult second_removal =
      http(cluster_.http_port(*first), "DELETE", "/v1/admin/voters/" + std::to_string(follower + 1),
           "", kAdminToken);
  EXPECT_EQ(second_removal.status, 409) << second_removal.raw;
  EXPECT_TRUE(second_removal.has("change_pending")) << second_removal.raw;

  cluster_.start(3);
  ASSERT_EQ(adding.wait_for(60s), std::future_status::ready);
  const HttpResult added = adding.get();
  EXPECT_EQ(added.status, 200) << added.raw;
  EXPECT_TRUE(added.has(R"({"voters":[1,2,3,4]})")) << added.raw;

  // Node 4 caught up: it knows the leader's client address (from raft's configuration; it was
  // given no --cluster-peers) and its replica holds the lock granted before it joined.
  EXPECT_TRUE(follows(3, *first));
  EXPECT_TRUE(eventually(
      [&] {
        Client client(cluster_.client_port(3));
        return client.request("stats", "_", "_").find("\"job\"") != std::string::npos;
      },
      10s));

  // A follower is removed, and left running: it does not disturb the others.
  const HttpResult removed =
      http(cluster_.http_port(*first), "DELETE", "/v1/admin/voters/" + std::to_string(follower + 1),
           "", kAdminToken, 30s);
  EXPECT_EQ(removed.status, 200) << removed.raw;
  cluster_.mark_removed(follower);
  std::array<std::size_t, kMaxNodes> lines{};
  for (std::size_t i : {*first, other, std::size_t{3}}) lines[i] = cluster_.node(i).log_size();
  std::this_thread::sleep_for(4s);  // a few election timeouts (1 to 2 s each)
  for (std::size_t i : {*first, other, std::size_t{3}}) {
    EXPECT_EQ(elections_since(i, lines[i]), 0u) << "node " << i + 1;
  }
  ASSERT_EQ(cluster_.leader(), first);

  // The three voters left keep the state through a kill of the leader: node 4 is one of the two
  // that elect the next.
  ASSERT_TRUE(cluster_.kill(*first));
  const std::optional<std::size_t> next = cluster_.leader();
  ASSERT_TRUE(next);
  EXPECT_TRUE(*next == other || *next == 3) << *next;
  Client renewer(cluster_.client_port(*next));
  EXPECT_EQ(renewer.request("n", "job", token + " 30"), "ok 30");
}

TEST_F(ClusterOpsTest, ALeaderThatRemovesItselfStepsDownAndStaysQuiet) {
  const std::optional<std::size_t> first = cluster_.leader();
  ASSERT_TRUE(first);
  Client holder(cluster_.client_port(*first));
  const std::string grant = holder.request("l", "job", "0 60");
  ASSERT_EQ(grant.substr(0, 3), "ok ") << grant;
  const std::string token = grant.substr(3, 32);

  const HttpResult removed =
      http(cluster_.http_port(*first), "DELETE", "/v1/admin/voters/" + std::to_string(*first + 1),
           "", kAdminToken, 30s);
  EXPECT_EQ(removed.status, 200) << removed.raw;
  cluster_.mark_removed(*first);
  EXPECT_TRUE(cluster_.node(*first).wait_for_log("no longer leads", 5s).has_value());

  // The other two elect a leader among themselves, with the state.
  const std::optional<std::size_t> next = cluster_.leader();
  ASSERT_TRUE(next);
  ASSERT_NE(*next, *first);
  Client renewer(cluster_.client_port(*next));
  EXPECT_EQ(renewer.request("n", "job", token + " 30"), "ok 30");

  // The removed node runs on, and the others' terms stay as they are.
  std::array<std::size_t, kMaxNodes> lines{};
  for (std::size_t i = 0; i < 3; ++i) lines[i] = cluster_.node(i).log_size();
  std::this_thread::sleep_for(5s);
  EXPECT_TRUE(cluster_.node(*first).running());
  for (std::size_t i = 0; i < 3; ++i) {
    if (i == *first) continue;
    EXPECT_EQ(elections_since(i, lines[i]), 0u) << "node " << i + 1;
  }
  EXPECT_EQ(cluster_.leader(), next);
  // It no longer takes writes.
  Client stray(cluster_.client_port(*first));
  EXPECT_EQ(stray.request("l", "other", "0 30").substr(0, 16), "error_not_leader");
}

// ---- the CLI
// -------------------------------------------------------------------------------------

struct CliResult {
  int code = -1;
  std::string output;  // stdout and stderr
};

CliResult cli(const std::string& arguments, const std::string& environment = "") {
  // The host's own token never leaks in: only `environment` sets one.
  const std::string command = "env -u TURNSTILE_ADMIN_TOKEN " + environment + " " +
                              TURNSTILE_CLI_PATH + " " + arguments + " 2>&1";
  CliResult result;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) result.output.append(buffer, n);
  const int status = ::pclose(pipe);
  result.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

TEST_F(ClusterOpsTest, TheCliAddsAndRemovesAVoter) {
  const std::optional<std::size_t> first = cluster_.leader();
  ASSERT_TRUE(first);
  const std::size_t follower = (*first + 1) % 3;
  auto server = [&](std::size_t i) {
    return "--server 127.0.0.1:" + std::to_string(cluster_.http_port(i));
  };
  const std::string add = "cluster add-voter --id 4 --raft-address " + cluster_.raft_address(3) +
                          " --client-address " + cluster_.address(3);

  const CliResult wrong = cli(add + " " + server(*first) + " --admin-token wrong");
  EXPECT_EQ(wrong.code, 77) << wrong.output;
  const CliResult missing = cli(add + " " + server(*first));
  EXPECT_EQ(missing.code, 64) << missing.output;
  const CliResult on_follower = cli(add + " " + server(follower) + " --admin-token " + kAdminToken);
  EXPECT_EQ(on_follower.code, 1) << on_follower.output;
  EXPECT_NE(on_follower.output.find(cluster_.address(*first)), std::string::npos)
      << on_follower.output;

  cluster_.start(3);
  const CliResult added = cli(add + " " + server(*first) + " --admin-token " + kAdminToken);
  EXPECT_EQ(added.code, 0) << added.output;
  EXPECT_EQ(added.output, "voters: 1 2 3 4\n");
  EXPECT_TRUE(follows(3, *first));

  const CliResult removed = cli("cluster remove --id 4 " + server(*first) + " --json",
                                "TURNSTILE_ADMIN_TOKEN=" + kAdminToken);
  EXPECT_EQ(removed.code, 0) << removed.output;
  EXPECT_EQ(removed.output, "{\"ok\":true,\"voters\":[1,2,3]}\n");
}

// ---- leadership transfer -----------------------------------------------------------------------

TEST_F(ClusterOpsTest, TheAdminRouteAndTheCliHandLeadershipOver) {
  const std::optional<std::size_t> first = cluster_.leader();
  ASSERT_TRUE(first);
  Client holder(cluster_.client_port(*first));
  const std::string grant = holder.request("l", "job", "0 60");
  ASSERT_EQ(grant.substr(0, 3), "ok ") << grant;
  const std::string token = grant.substr(3, 32);
  const std::size_t follower = (*first + 1) % 3;
  const std::string route = "/v1/admin/leader/transfer";

  EXPECT_EQ(http(cluster_.http_port(*first), "POST", route, "", "").status, 401);
  const HttpResult on_follower = http(cluster_.http_port(follower), "POST", route, "", kAdminToken);
  EXPECT_EQ(on_follower.status, 503) << on_follower.raw;
  EXPECT_NE(on_follower.raw.find("X-Dflockd-Leader: " + cluster_.address(*first)),
            std::string::npos)
      << on_follower.raw;

  const HttpResult moved = http(cluster_.http_port(*first), "POST", route, "", kAdminToken, 10s);
  ASSERT_EQ(moved.status, 200) << moved.raw;
  EXPECT_NE(moved.raw.find("\"transferred\":true"), std::string::npos) << moved.raw;
  const std::optional<std::size_t> second = cluster_.leader();
  ASSERT_TRUE(second);
  EXPECT_NE(*second, *first);
  // The holder's lock and token survive the hand-over.
  Client renewer(cluster_.client_port(*second));
  EXPECT_EQ(renewer.request("n", "job", token + " 30"), "ok 30");

  // The CLI: `cluster transfer` against the new leader's HTTP address.
  const CliResult cli_moved =
      cli("cluster transfer --server 127.0.0.1:" + std::to_string(cluster_.http_port(*second)) +
              " --json",
          "TURNSTILE_ADMIN_TOKEN=" + kAdminToken);
  EXPECT_EQ(cli_moved.code, 0) << cli_moved.output;
  // The old leader may not know the new one yet when it answers: the address may be empty.
  EXPECT_EQ(cli_moved.output.rfind("{\"leader\":\"", 0), 0U) << cli_moved.output;
  EXPECT_NE(cli_moved.output.find("\"ok\":true}"), std::string::npos) << cli_moved.output;
  const std::optional<std::size_t> third = cluster_.leader();
  ASSERT_TRUE(third);
  EXPECT_NE(*third, *second);
  EXPECT_EQ(renewer.request("n", "job", token + " 30"),
            "error_not_leader " + cluster_.address(*third));
}

// ---- SIGTERM on the leader ---------------------------------------------------------------------

TEST_F(ClusterOpsTest, SigtermOnTheLeaderHandsLeadershipOverBeforeItExits) {
  const std::optional<std::size_t> first = cluster_.leader();
  ASSERT_TRUE(first);
  Client holder(cluster_.client_port(*first));
  const std::string grant = holder.request("l", "job", "0 60");
  ASSERT_EQ(grant.substr(0, 3), "ok ") << grant;
  const std::string token = grant.substr(3, 32);
  // The holder stays connected: the old leader's drain closes its connection after it stopped
  // leading, so the lock outlives it (closing it first would race its release with the signal).

  const auto signalled = std::chrono::steady_clock::now();
  cluster_.terminate(*first);
  const std::optional<std::size_t> next = cluster_.leader(10s, 10ms);
  const auto took = std::chrono::steady_clock::now() - signalled;
  ASSERT_TRUE(next);
  EXPECT_NE(*next, *first);
  // A kill -9 costs at least one election timeout (1 s here) before anyone even stands.
  EXPECT_LT(took, 1000ms) << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                          << " ms";
  const std::optional<int> status = cluster_.node(*first).wait_exit(10s);
  ASSERT_TRUE(status);
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *status;
  EXPECT_TRUE(cluster_.node(*first).wait_for_log("leadership handed over", 0s).has_value());
  Client renewer(cluster_.client_port(*next));
  EXPECT_EQ(renewer.request("n", "job", token + " 30"), "ok 30");
}

// ---- a full disk (docs/cluster.md, "A full disk") ----------------------------------------------

bool exited_with(const std::optional<int>& status, int code) {
  return status && WIFEXITED(*status) && WEXITSTATUS(*status) == code;
}

TEST(ClusterDiskTest, ANodeWhoseDiskRunsLowLeavesAndStartsAgainOnlyOnceThereIsRoom) {
  {
    TempDir probe;
    if (const std::optional<std::string> why = mount_small_disk(probe.path(), 1 << 20)) {
      GTEST_SKIP() << why->c_str() << " (the test needs root)";
    }
    unmount_small_disk(probe.path());
  }
  // Every node's directory on its own 96 MiB tmpfs; --raft-min-free-mb stays at its 64.
  std::set<std::string> mounted;
  LoopbackClusterOptions options;
  options.on_new_dir = [&mounted](const std::string& dir) {
    if (!mount_small_disk(dir, std::uint64_t{96} << 20)) mounted.insert(dir);
  };
  options.on_drop_dir = [&mounted](const std::string& dir) {
    if (mounted.erase(dir) > 0) unmount_small_disk(dir);
  };
  LoopbackCluster cluster(options);
  const std::optional<std::size_t> first = cluster.leader();
  ASSERT_TRUE(first);
  ASSERT_EQ(mounted.count(cluster.raft_dir(*first)), 1u);
  Client holder(cluster.client_port(*first));
  const std::string grant = holder.request("l", "job", "0 60");
  ASSERT_EQ(grant.substr(0, 3), "ok ") << grant;
  const std::string token = grant.substr(3, 32);

  // 16 MiB left: below the minimum, though raft could still write. The leader hands over and
  // exits 1.
  const std::string dir = cluster.raft_dir(*first);
  fill_disk(dir, "filler", std::uint64_t{16} << 20);
  const std::optional<int> status = cluster.node(*first).wait_exit(10s);
  EXPECT_TRUE(exited_with(status, 1)) << cluster.node(*first).log_text();
  EXPECT_TRUE(cluster.node(*first)
                  .wait_for_log("raft log cannot be written much longer: only 1[0-9] MiB free", 0s)
                  .has_value());
  EXPECT_TRUE(cluster.node(*first).wait_for_log("leadership handed over", 0s).has_value());
  const std::optional<std::size_t> next = cluster.leader();
  ASSERT_TRUE(next);
  EXPECT_NE(*next, *first);
  Client renewer(cluster.client_port(*next));
  EXPECT_EQ(renewer.request("n", "job", token + " 30"), "ok 30");

  // A restart is refused while the disk stays full, and touches nothing.
  cluster.start(*first, false);
  EXPECT_TRUE(exited_with(cluster.node(*first).wait_exit(10s), 1));
  EXPECT_TRUE(cluster.node(*first).wait_for_log("free some space first", 0s).has_value())
      << cluster.node(*first).log_text();

  // With room again it starts, and follows the new leader with the state.
  std::filesystem::remove(dir + "/filler");
  cluster.start(*first);
  EXPECT_TRUE(eventually(
      [&] {
        Client client(cluster.client_port(*first));
        return client.request("l", "probe", "0 30") == "error_not_leader " + cluster.address(*next);
      },
      15s));
  EXPECT_TRUE(eventually(
      [&] {
        Client client(cluster.client_port(*first));
        return client.request("stats", "_", "_").find("\"job\"") != std::string::npos;
      },
      10s));
}

}  // namespace
}  // namespace turnstile::integration
