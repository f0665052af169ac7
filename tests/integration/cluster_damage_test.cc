// A cluster node and its disk, against real processes (docs/cluster.md, "A damaged raft
// directory"): a node whose raft log lost entries it acknowledged, or whose files are damaged or
// cut short, refuses to start with one line and exit code 65, and touches nothing; a lock it helped
// commit is never granted again while its lease runs; a directory that does not load in
// --raft-start-timeout-s ends the process with 74, and /health is not 200 before the node can
// serve; a leader stopped by SIGSTOP and resumed does not take the pause for a stalled disk.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/cluster_harness.h"
#include "tests/integration/harness.h"

namespace turnstile::integration {
namespace {

namespace fs = std::filesystem;

// The files of a raft directory by kind, newest last.
std::vector<fs::path> files(const fs::path& dir, const std::string& prefix) {
  std::vector<fs::path> out;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0 || name.ends_with(".meta")) continue;
    out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end(), [](const fs::path& a, const fs::path& b) {
    const std::string x = a.filename().string(), y = b.filename().string();
    return x.size() != y.size() ? x.size() < y.size() : x < y;
  });
  return out;
}

std::vector<char> read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

bool holds_entries(const fs::path& segment) {
  std::ifstream in(segment, std::ios::binary);
  char format = 0;
  in.get(format);
  return format != 0;
}

// The newest open segment that holds entries.
fs::path newest_used_open(const fs::path& dir) {
  fs::path newest;
  for (const fs::path& open : files(dir, "open-")) {
    if (holds_entries(open)) newest = open;
  }
  return newest;
}

// The closed segments: names of digits and one dash.
std::vector<fs::path> closed_segments(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const fs::path& path : files(dir, "0")) {
    if (path.filename().string().find('-') != std::string::npos) out.push_back(path);
  }
  return out;
}

void flip_byte(const fs::path& path, std::streamoff at) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekg(at);
  const int byte = file.get();
  file.seekp(at);
  file.put(static_cast<char>(byte ^ 0xFF));
}

std::map<std::string, std::uintmax_t> sizes(const fs::path& dir) {
  std::map<std::string, std::uintmax_t> out;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    out[entry.path().filename().string()] = entry.is_regular_file() ? entry.file_size() : 0;
  }
  return out;
}

class ClusterDamageTest : public ::testing::Test {
 protected:
  // `n` locks through the leader, each answered ok (committed by a majority).
  void lock_many(std::size_t leader, int n, const std::string& prefix) {
    Client client(cluster_.client_port(leader));
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(client.request("l", prefix + std::to_string(i), "0 600").substr(0, 3), "ok ");
    }
  }

  // Starts node i and expects it to refuse its directory: exit 65, the line, the files as they
  // were.
  void expect_refusal(std::size_t i, const std::string& detail) {
    const fs::path dir = cluster_.raft_dir(i);
    const auto before = sizes(dir);
    cluster_.start(i, false);
    const std::optional<int> status = cluster_.node(i).wait_exit(20s);
    ASSERT_TRUE(status) << "node " << i + 1 << " did not exit\n" << cluster_.node(i).log_text();
    const std::string log = cluster_.node(i).log_text();
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 65) << *status << "\n" << log;
    EXPECT_NE(log.find("is damaged or unreadable"), std::string::npos) << log;
    std::string listing;
    for (const auto& [name, size] : before) listing += name + " " + std::to_string(size) + "\n";
    EXPECT_NE(log.find(detail), std::string::npos) << log << "\n" << listing;
    EXPECT_NE(log.find("re-add it as a new member with an empty directory"), std::string::npos);
    EXPECT_EQ(sizes(dir), before);
  }

  // Follower i stopped after `n` locks it stored; a copy of its directory to damage again.
  fs::path stopped_follower_copy(std::size_t* follower, int n) {
    const std::optional<std::size_t> leader = cluster_.leader();
    EXPECT_TRUE(leader);
    if (!leader) return {};
    lock_many(*leader, n, "k");
    *follower = (*leader + 1) % 3;
    // The follower stored what the leader committed: it answers for the keys' holders.
    std::this_thread::sleep_for(500ms);
    EXPECT_TRUE(cluster_.kill(*follower));
    const fs::path dir = cluster_.raft_dir(*follower);
    const fs::path saved = dir.string() + "-saved";
    fs::remove_all(saved);
    fs::copy(dir, saved);
    return saved;
  }

  void restore(const fs::path& saved, std::size_t i) {
    const fs::path dir = cluster_.raft_dir(i);
    fs::remove_all(dir);
    fs::copy(saved, dir);
  }

  LoopbackCluster cluster_;
};

// The steps: a byte flipped in the acknowledged entries of one of the two nodes that
// committed a lock. That node must not start; the lock's holder keeps it.
TEST_F(ClusterDamageTest, ALockIsNeverGrantedTwiceAfterAFlippedByteInAcknowledgedEntries) {
  const std::optional<std::size_t> a = cluster_.leader();
  ASSERT_TRUE(a);
  const std::size_t b = (*a + 1) % 3, c = (*a + 2) % 3;
  ASSERT_TRUE(cluster_.kill(c));
  Client holder(cluster_.client_port(*a));
  const std::string granted = holder.request("l", "k", "0 600");
  ASSERT_EQ(granted.substr(0, 3), "ok ") << granted;
  ASSERT_TRUE(cluster_.kill(b));
  const fs::path open = newest_used_open(cluster_.raft_dir(b));
  ASSERT_FALSE(open.empty());
  flip_byte(open, 64);
  ASSERT_TRUE(cluster_.kill(*a));

  expect_refusal(b, "acknowledged");
  // The undamaged node and the third elect; the lock is still held.
  cluster_.start(*a);
  cluster_.start(c);
  const std::optional<std::size_t> leader = cluster_.leader(30s);
  ASSERT_TRUE(leader);
  Client other(cluster_.client_port(*leader));
  EXPECT_EQ(other.request("l", "k", "0 600"), "timeout");
}

// The record file is created whole beside its name and renamed, so a crash during its first
// write leaves a dot file, never a short `turnstile-acknowledged` that recovery would refuse
// (the simulator's torn writes found that). This checks the visible half: the file is whole and
// no dot file stays behind, and a dot file left by such a crash does not stop the node.
TEST_F(ClusterDamageTest, ALeftoverNewRecordFileDoesNotStopANode) {
  const std::optional<std::size_t> leader = cluster_.leader();
  ASSERT_TRUE(leader);
  lock_many(*leader, 3, "r");
  const std::size_t follower = (*leader + 1) % 3;
  std::this_thread::sleep_for(500ms);
  const fs::path dir = cluster_.raft_dir(follower);
  EXPECT_EQ(fs::file_size(dir / "turnstile-acknowledged"), 80U);
  EXPECT_FALSE(fs::exists(dir / ".turnstile-acknowledged.new"));
  ASSERT_TRUE(cluster_.kill(follower));
  {
    std::ofstream torn(dir / ".turnstile-acknowledged.new", std::ios::binary);
    torn << std::string(40, 'x');
  }
  cluster_.start(follower);
  std::this_thread::sleep_for(1s);
  EXPECT_FALSE(cluster_.node(follower).wait_exit(0ms)) << cluster_.node(follower).log_text();
  Client client(cluster_.client_port(*cluster_.leader()));
  EXPECT_EQ(client.request("l", "after", "0 600").substr(0, 3), "ok ");
}

TEST_F(ClusterDamageTest, EveryKindOfDamageToAFollowersLogRefusesToStart) {
  std::size_t follower = 0;
  const fs::path saved = stopped_follower_copy(&follower, 40);
  ASSERT_FALSE(saved.empty());
  const fs::path dir = cluster_.raft_dir(follower);
  struct Damage {
    std::string what;
    std::function<void()> apply;
    std::string detail;
  };
  const auto used = [&] { return newest_used_open(dir); };
  const std::vector<Damage> damages = {
      {"a byte flipped at 64 of the newest used open segment", [&] { flip_byte(used(), 64); },
       "acknowledged"},
      {"a byte flipped in the last batch",
       [&] {
         const std::vector<char> bytes = read_all(used());
         std::size_t end = bytes.size();
         while (end > 0 && bytes[end - 1] == 0) --end;
         flip_byte(used(), static_cast<std::streamoff>(end - 4));
       },
       "acknowledged"},
      {"the open segment zeroed",
       [&] {
         const fs::path open = used();
         const auto size = fs::file_size(open);
         fs::resize_file(open, 0);
         fs::resize_file(open, size);
       },
       "acknowledged"},
      {"the open segment deleted", [&] { fs::remove(used()); }, "acknowledged"},
      {"the open segment cut at 60", [&] { fs::resize_file(used(), 60); }, "it was cut"},
      {"the open segment cut at 200", [&] { fs::resize_file(used(), 200); }, "it was cut"},
      {"the open segment cut at its end - 1",
       [&] { fs::resize_file(used(), fs::file_size(used()) - 1); }, "it was cut"},
      {"the open segment cut at a batch boundary (its entries' end)",
       [&] {
         const std::vector<char> bytes = read_all(used());
         std::size_t end = bytes.size();
         while (end > 8 && bytes[end - 1] == 0) --end;
         fs::resize_file(used(), (end + 7) / 8 * 8);
       },
       "it was cut"},
      {"the newest closed segment deleted",
       [&] {
         const std::vector<fs::path> closed = closed_segments(dir);
         ASSERT_FALSE(closed.empty());
         fs::remove(closed.back());
       },
       "acknowledged"},
      {"the acknowledged-index record flipped in both slots",
       [&] {
         flip_byte(dir / "turnstile-acknowledged", 20);
         flip_byte(dir / "turnstile-acknowledged", 60);
       },
       "turnstile-acknowledged"},
  };
  for (const Damage& damage : damages) {
    SCOPED_TRACE(damage.what);
    restore(saved, follower);
    ASSERT_FALSE(used().empty());
    damage.apply();
    expect_refusal(follower, damage.detail);
  }
  // Undamaged, it starts and serves again.
  restore(saved, follower);
  cluster_.start(follower);
  EXPECT_TRUE(cluster_.leader(30s).has_value());
  fs::remove_all(saved);
}

TEST_F(ClusterDamageTest, ATruncatedSnapshotRefusesToStartAtOnce) {
  // Small snapshots, often.
  for (std::size_t i = 0; i < 3; ++i) {
    cluster_.set_node_args(i, {"--raft-snapshot-threshold", "16", "--raft-snapshot-trailing", "4"});
    cluster_.restart(i);
  }
  std::size_t follower = 0;
  const fs::path saved = stopped_follower_copy(&follower, 80);
  ASSERT_FALSE(saved.empty());
  const fs::path dir = cluster_.raft_dir(follower);
  const std::vector<fs::path> snapshots = files(dir, "snapshot-");
  ASSERT_FALSE(snapshots.empty()) << "no snapshot taken";
  const fs::path newest = snapshots.back();
  fs::resize_file(newest, fs::file_size(newest) / 2);
  const auto started = std::chrono::steady_clock::now();
  expect_refusal(follower, newest.filename().string());
  EXPECT_LT(std::chrono::steady_clock::now() - started, 10s);
  // Without its .meta the newest snapshot is not one: the entries it replaced are missing.
  restore(saved, follower);
  fs::remove(dir / (newest.filename().string() + ".meta"));
  expect_refusal(follower, "are missing");
  fs::remove_all(saved);
}

// A directory that cannot be read to its end (here a snapshot's .meta that is a pipe nobody
// writes):
// /health says 503 "starting" meanwhile, then the process exits 74 with one line.
TEST_F(ClusterDamageTest, ANodeThatCannotLoadItsDirectoryInTimeExits74) {
  std::size_t follower = 0;
  const fs::path saved = stopped_follower_copy(&follower, 10);
  ASSERT_FALSE(saved.empty());
  fs::remove_all(saved);
  const fs::path dir = cluster_.raft_dir(follower);
  const fs::path pipe = dir / "snapshot-1-2-3.meta";
  ASSERT_EQ(::mkfifo(pipe.c_str(), 0600), 0);
  cluster_.set_node_args(follower, {"--raft-start-timeout-s", "3"});
  cluster_.start(follower, false);
  Daemon& node = cluster_.node(follower);
  HttpResult health;
  EXPECT_TRUE(eventually(
      [&] {
        try {
          health = http_request(cluster_.http_port(follower), "GET", "/health", "", {}, 1s);
        } catch (const std::exception&) {
          return false;  // not listening yet
        }
        return health.status != 0;
      },
      3s))
      << node.log_text();
  EXPECT_EQ(health.status, 503) << health.raw;
  EXPECT_TRUE(health.has("starting")) << health.raw;
  const std::optional<int> status = node.wait_exit(15s);
  ASSERT_TRUE(status) << node.log_text();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 74) << *status << node.log_text();
  EXPECT_NE(node.log_text().find("did not finish loading in 3 s"), std::string::npos)
      << node.log_text();
  fs::remove(pipe);
}

// SIGSTOP of the leader for longer than the disk-stall window, under load, then SIGCONT: the
// pause is not a stalled disk, and the node goes on.
TEST_F(ClusterDamageTest, ALeaderPausedLongerThanTheStallWindowDoesNotExitWhenResumed) {
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const std::optional<std::size_t> leader = cluster_.leader();
    ASSERT_TRUE(leader);
    std::atomic<bool> done{false};
    std::thread load([&] {
      Client client(cluster_.client_port(*leader));
      for (int i = 0; !done.load(); ++i) {
        if (!client.send(
                frame("l", "p" + std::to_string(round) + "-" + std::to_string(i), "0 600"))) {
          break;
        }
        std::this_thread::sleep_for(2ms);
      }
    });
    std::this_thread::sleep_for(300ms);
    cluster_.sigstop(*leader);
    std::this_thread::sleep_for(5500ms);
    cluster_.sigcont(*leader);
    std::this_thread::sleep_for(1500ms);
    done.store(true);
    load.join();
    EXPECT_TRUE(cluster_.node(*leader).running()) << cluster_.node(*leader).log_text();
    EXPECT_EQ(cluster_.node(*leader).log_text().find("nothing stored for"), std::string::npos)
        << cluster_.node(*leader).log_text();
    ASSERT_TRUE(cluster_.leader(30s).has_value());
  }
}

}  // namespace
}  // namespace turnstile::integration
