// The raft node (net/raft_node.h): real nodes with their libuv threads, on loopback, each in its
// own temporary directory, talking through the authenticated transport.
#include "net/raft_node.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace turnstile::net {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// libuv writes to sockets with plain writev: a peer that closed would raise SIGPIPE (turnstiled
// ignores it, as every process that runs a RaftNode must).
class IgnoreSigpipe : public ::testing::Environment {
 public:
  void SetUp() override { std::signal(SIGPIPE, SIG_IGN); }
};
[[maybe_unused]] ::testing::Environment* const kIgnoreSigpipe =
    ::testing::AddGlobalTestEnvironment(new IgnoreSigpipe);

template <typename Predicate>
bool wait_until(Predicate predicate, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!predicate()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

// The state machine of the tests: the commands in order, with their indexes.
class ListMachine final : public RaftStateMachine {
 public:
  void apply(std::uint64_t index, std::string_view command) override {
    std::lock_guard lock(mutex_);
    if (!entries_.empty() && index <= entries_.back().first) ++order_violations_;
    entries_.emplace_back(index, std::string(command));
  }
  std::string snapshot() override {
    std::lock_guard lock(mutex_);
    std::string out;
    for (const auto& [index, command] : entries_) {
      out += std::to_string(index) + " " + std::to_string(command.size()) + " " + command;
    }
    return out;
  }
  bool restore(std::string_view bytes) override {
    std::vector<std::pair<std::uint64_t, std::string>> entries;
    std::istringstream in{std::string(bytes)};
    std::uint64_t index = 0;
    std::size_t size = 0;
    while (in >> index >> size) {
      in.get();
      std::string command(size, '\0');
      if (!in.read(command.data(), static_cast<std::streamsize>(size))) return false;
      entries.emplace_back(index, std::move(command));
    }
    if (!in.eof()) return false;
    std::lock_guard lock(mutex_);
    entries_ = std::move(entries);
    restored_sizes_.push_back(entries_.size());
    return true;
  }
  void leadership_changed(bool leader) override { ready_leader_ = leader; }

  std::vector<std::string> commands() const {
    std::lock_guard lock(mutex_);
    std::vector<std::string> out;
    for (const auto& entry : entries_) out.push_back(entry.second);
    return out;
  }
  std::size_t size() const {
    std::lock_guard lock(mutex_);
    return entries_.size();
  }
  std::string command_at(std::uint64_t index) const {
    std::lock_guard lock(mutex_);
    for (const auto& [i, command] : entries_) {
      if (i == index) return command;
    }
    return "<none>";
  }
  std::vector<std::size_t> restored_sizes() const {
    std::lock_guard lock(mutex_);
    return restored_sizes_;
  }
  int order_violations() const {
    std::lock_guard lock(mutex_);
    return order_violations_;
  }
  bool ready_leader() const { return ready_leader_; }

 private:
  mutable std::mutex mutex_;
  std::vector<std::pair<std::uint64_t, std::string>> entries_;
  std::vector<std::size_t> restored_sizes_;
  int order_violations_ = 0;
  std::atomic<bool> ready_leader_{false};
};

// A port on 127.0.0.1 that binds now, below the ephemeral range (so that no outgoing connection
// of ours takes it before the node listens), never the same twice in this process.
std::uint16_t free_port() {
  static std::mutex mutex;
  static std::set<std::uint16_t> given;
  static std::mt19937 rng(std::random_device{}());
  std::lock_guard lock(mutex);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const auto port = static_cast<std::uint16_t>(20000 + rng() % 12000);
    if (given.count(port) != 0) continue;
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    ::close(fd);
    if (free) {
      given.insert(port);
      return port;
    }
  }
  ADD_FAILURE() << "no free port";
  return 0;
}

struct Result {
  std::uint64_t index = 0;
  std::string error;
};

Result propose_sync(RaftNode& node, std::string command) {
  auto promise = std::make_shared<std::promise<Result>>();
  std::future<Result> future = promise->get_future();
  node.propose(std::move(command), [promise](std::uint64_t index, std::string error) {
    promise->set_value(Result{index, std::move(error)});
  });
  if (future.wait_for(20s) != std::future_status::ready) return Result{0, "test timeout"};
  return future.get();
}

std::string error_sync(const std::function<void(RaftNode::ErrorDone)>& call) {
  auto promise = std::make_shared<std::promise<std::string>>();
  std::future<std::string> future = promise->get_future();
  call([promise](std::string error) { promise->set_value(std::move(error)); });
  if (future.wait_for(30s) != std::future_status::ready) return "test timeout";
  return future.get();
}

struct Node {
  RaftNodeConfig config;
  std::unique_ptr<ListMachine> fsm;  // declared first: the node goes before its state machine
  std::unique_ptr<RaftNode> raft;
};

class RaftNodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "raft_node_test.XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
  }

  void TearDown() override {
    for (auto& [id, node] : nodes_) stop(id);
    nodes_.clear();
    std::error_code ignored;
    fs::remove_all(root_, ignored);
    if (HasFailure()) {
      std::lock_guard lock(log_mutex_);
      for (const std::string& line : log_) std::fprintf(stderr, "  log: %s\n", line.c_str());
    }
  }

  // A configuration for node `id` (its address picked and its directory made).
  RaftNodeConfig config(std::uint64_t id) {
    RaftNodeConfig c;
    c.id = id;
    c.raft_address = "127.0.0.1:" + std::to_string(free_port());
    c.dir = (root_ / ("node-" + std::to_string(id))).string();
    fs::create_directories(c.dir);
    c.secret = "the cluster secret";
    c.election_timeout_ms = 500;
    c.heartbeat_timeout_ms = 50;
    c.connect_retry_ms = 200;
    c.handshake_timeout_ms = 2000;
    c.log = [this, id](std::string line) {
      std::lock_guard lock(log_mutex_);
      log_.push_back("node " + std::to_string(id) + ": " + line);
    };
    return c;
  }

  // Configurations for nodes 1..n, bootstrapped with each other.
  std::vector<RaftNodeConfig> cluster_configs(int n) {
    std::vector<RaftNodeConfig> configs;
    std::vector<RaftPeer> peers;
    for (int i = 1; i <= n; ++i) {
      configs.push_back(config(static_cast<std::uint64_t>(i)));
      peers.push_back(RaftPeer{configs.back().id, configs.back().raft_address});
    }
    for (RaftNodeConfig& c : configs) {
      c.peers = peers;
      c.bootstrap = true;
    }
    return configs;
  }

  // Starts a node (a new RaftNode and an empty state machine) from `c`.
  std::optional<std::string> start(const RaftNodeConfig& c) {
    Node& node = nodes_[c.id];
    node.raft.reset();
    node.config = c;
    node.fsm = std::make_unique<ListMachine>();
    node.raft = std::make_unique<RaftNode>(c, *node.fsm);
    return node.raft->start();
  }

  // Starts every node of `configs`. A port probed free can be taken by a parallel test before
  // the node binds it; then every address is picked again (in `configs` too) and all restart.
  void start_cluster(std::vector<RaftNodeConfig>& configs) {
    for (int attempt = 1;; ++attempt) {
      std::optional<std::string> error;
      for (const RaftNodeConfig& c : configs) {
        error = start(c);
        if (error) break;
      }
      if (!error) return;
      const bool port_taken = error->find("address already in use") != std::string::npos;
      ASSERT_TRUE(port_taken && attempt < 5) << *error;
      for (const RaftNodeConfig& c : configs) {
        if (nodes_.count(c.id) != 0) stop(c.id);
      }
      std::vector<RaftPeer> peers;
      for (RaftNodeConfig& c : configs) {
        c.raft_address = "127.0.0.1:" + std::to_string(free_port());
        fs::remove_all(c.dir);
        fs::create_directories(c.dir);
        peers.push_back(RaftPeer{c.id, c.raft_address});
      }
      for (RaftNodeConfig& c : configs) c.peers = peers;
    }
  }
  void start_cluster(std::vector<RaftNodeConfig>&& configs) { start_cluster(configs); }

  void stop(std::uint64_t id) {
    Node& node = nodes_.at(id);
    if (node.raft) node.raft->stop();
    node.raft.reset();
  }

  RaftNode& raft(std::uint64_t id) { return *nodes_.at(id).raft; }
  ListMachine& fsm(std::uint64_t id) { return *nodes_.at(id).fsm; }

  // The leader that every running node among `ids` follows, once there is one; 0 on timeout.
  std::uint64_t wait_for_leader(const std::vector<std::uint64_t>& ids,
                                std::chrono::milliseconds timeout = 15s) {
    auto agreed = [&]() -> std::uint64_t {
      std::uint64_t leader = 0;
      for (std::uint64_t id : ids) {
        const RaftStatus s = raft(id).status();
        if (s.leader_id == 0 || (leader != 0 && s.leader_id != leader)) return 0;
        leader = s.leader_id;
      }
      if (std::find(ids.begin(), ids.end(), leader) == ids.end()) return 0;  // a stopped one
      return raft(leader).status().role == core::RaftRole::kLeader ? leader : 0;
    };
    wait_until([&] { return agreed() != 0; }, timeout);
    return agreed();
  }

  bool logged(const std::string& needle) {
    std::lock_guard lock(log_mutex_);
    for (const std::string& line : log_) {
      if (line.find(needle) != std::string::npos) return true;
    }
    return false;
  }

  fs::path root_;
  std::mutex log_mutex_;
  std::vector<std::string> log_;
  std::map<std::uint64_t, Node> nodes_;
};

std::vector<std::string> numbered(const std::string& prefix, int from, int to) {
  std::vector<std::string> out;
  for (int i = from; i < to; ++i) out.push_back(prefix + std::to_string(i));
  return out;
}

TEST_F(RaftNodeTest, ThreeNodesElectALeaderAndApplyEveryCommandInTheSameOrder) {
  start_cluster(cluster_configs(3));
  const std::uint64_t leader = wait_for_leader({1, 2, 3});
  ASSERT_NE(leader, 0u);
  EXPECT_TRUE(wait_until([&] { return fsm(leader).ready_leader(); }, 5s));
  EXPECT_EQ(raft(leader).status().voters, (std::vector<std::uint64_t>{1, 2, 3}));

  // From a thread of its own, as the daemon's shards will.
  std::mutex mutex;
  std::vector<std::string> errors;
  std::atomic<int> done{0};
  std::thread proposer([&] {
    for (const std::string& command : numbered("cmd-", 0, 100)) {
      raft(leader).propose(command, [&](std::uint64_t, std::string error) {
        if (!error.empty()) {
          std::lock_guard lock(mutex);
          errors.push_back(error);
        }
        ++done;
      });
    }
  });
  proposer.join();
  ASSERT_TRUE(wait_until([&] { return done == 100; }, 20s));
  EXPECT_TRUE(errors.empty()) << errors.front();
  for (std::uint64_t id : {1, 2, 3}) {
    EXPECT_TRUE(wait_until([&] { return fsm(id).size() == 100; }, 10s)) << "node " << id;
    EXPECT_EQ(fsm(id).commands(), numbered("cmd-", 0, 100)) << "node " << id;
    EXPECT_EQ(fsm(id).order_violations(), 0);
  }
}

TEST_F(RaftNodeTest, ConcurrentProposalsShareRaftApplyCallsAndGetDistinctIncreasingIndexes) {
  start_cluster(cluster_configs(3));
  const std::uint64_t leader = wait_for_leader({1, 2, 3});
  ASSERT_NE(leader, 0u);
  const RaftStatus before = raft(leader).status();

  constexpr int kThreads = 4;
  constexpr int kEach = 50;
  struct Answer {
    std::string command;
    std::uint64_t index;
    std::string error;
  };
  std::mutex mutex;
  std::vector<std::vector<Answer>> answers(kThreads);
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (const std::string& command : numbered("t" + std::to_string(t) + "-", 0, kEach)) {
        raft(leader).propose(command, [&, t, command](std::uint64_t index, std::string error) {
          std::lock_guard lock(mutex);
          answers[static_cast<std::size_t>(t)].push_back(Answer{command, index, error});
          ++done;
        });
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  ASSERT_TRUE(wait_until([&] { return done == kThreads * kEach; }, 20s));

  EXPECT_TRUE(wait_until(
      [&] { return raft(leader).status().proposals - before.proposals == kThreads * kEach; }, 5s));
  const RaftStatus after = raft(leader).status();
  EXPECT_LT(after.raft_apply_calls - before.raft_apply_calls, std::uint64_t{kThreads * kEach});
  std::set<std::uint64_t> indexes;
  std::lock_guard lock(mutex);
  for (int t = 0; t < kThreads; ++t) {
    const std::vector<Answer>& mine = answers[static_cast<std::size_t>(t)];
    ASSERT_EQ(mine.size(), std::size_t{kEach});
    std::uint64_t last = 0;
    for (const Answer& answer : mine) {
      EXPECT_EQ(answer.error, "");
      EXPECT_GT(answer.index, last) << "thread " << t;  // one thread's commands keep its order
      last = answer.index;
      indexes.insert(answer.index);
      // The index reported is the entry that holds this very command.
      EXPECT_EQ(fsm(leader).command_at(answer.index), answer.command);
    }
  }
  EXPECT_EQ(indexes.size(), std::size_t{kThreads * kEach});
  std::printf("200 proposals in %llu raft_apply calls\n",
              static_cast<unsigned long long>(after.raft_apply_calls - before.raft_apply_calls));
}

TEST_F(RaftNodeTest, AFollowerRefusesProposalsAndNamesTheLeaderWhichCanHandOver) {
  start_cluster(cluster_configs(3));
  const std::uint64_t leader = wait_for_leader({1, 2, 3});
  ASSERT_NE(leader, 0u);
  const std::uint64_t follower = leader == 1 ? 2 : 1;

  const Result refused = propose_sync(raft(follower), "no");
  EXPECT_EQ(refused.index, 0u);
  EXPECT_NE(refused.error.find("not leader"), std::string::npos) << refused.error;
  EXPECT_NE(refused.error.find("node " + std::to_string(leader)), std::string::npos)
      << refused.error;
  const RaftStatus status = raft(follower).status();
  EXPECT_EQ(status.role, core::RaftRole::kFollower);
  EXPECT_EQ(status.leader_id, leader);
  EXPECT_EQ(status.leader_raft_address, nodes_.at(leader).config.raft_address);
  EXPECT_EQ(fsm(follower).size(), 0u);

  // The leader's own proposals and barriers go through; then it hands over.
  const Result ok = propose_sync(raft(leader), "yes");
  EXPECT_EQ(ok.error, "");
  auto barrier = std::make_shared<std::promise<Result>>();
  raft(leader).barrier([barrier](std::uint64_t index, std::string error) {
    barrier->set_value(Result{index, error});
  });
  std::future<Result> barrier_future = barrier->get_future();
  ASSERT_EQ(barrier_future.wait_for(10s), std::future_status::ready);
  const Result barrier_result = barrier_future.get();
  EXPECT_EQ(barrier_result.error, "");
  EXPECT_GT(barrier_result.index, ok.index);
  auto follower_barrier = std::make_shared<std::promise<Result>>();
  raft(follower).barrier([follower_barrier](std::uint64_t index, std::string error) {
    follower_barrier->set_value(Result{index, error});
  });
  std::future<Result> follower_barrier_future = follower_barrier->get_future();
  ASSERT_EQ(follower_barrier_future.wait_for(10s), std::future_status::ready);
  EXPECT_NE(follower_barrier_future.get().error.find("not leader"), std::string::npos);

  auto transferred = std::make_shared<std::promise<bool>>();
  raft(leader).transfer_leadership([transferred](bool done) { transferred->set_value(done); });
  std::future<bool> transferred_future = transferred->get_future();
  ASSERT_EQ(transferred_future.wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(transferred_future.get());
  const std::uint64_t next = wait_for_leader({1, 2, 3});
  EXPECT_NE(next, 0u);
  EXPECT_NE(next, leader);
  EXPECT_TRUE(wait_until([&] { return !fsm(leader).ready_leader(); }, 5s));
  EXPECT_EQ(propose_sync(raft(next), "after").error, "");
}

TEST_F(RaftNodeTest, WhenTheLeaderStopsTheOthersGoOnAndItCatchesUpFromASnapshot) {
  std::vector<RaftNodeConfig> configs = cluster_configs(3);
  for (RaftNodeConfig& c : configs) {
    c.snapshot_threshold = 16;
    c.snapshot_trailing = 8;
  }
  start_cluster(configs);
  const std::uint64_t old_leader = wait_for_leader({1, 2, 3});
  ASSERT_NE(old_leader, 0u);
  for (const std::string& command : numbered("a-", 0, 20)) {
    ASSERT_EQ(propose_sync(raft(old_leader), command).error, "");
  }
  for (std::uint64_t id : {1, 2, 3}) {
    ASSERT_TRUE(wait_until([&] { return fsm(id).size() == 20; }, 10s)) << "node " << id;
  }

  stop(old_leader);
  std::vector<std::uint64_t> others;
  for (std::uint64_t id : {1, 2, 3}) {
    if (id != old_leader) others.push_back(id);
  }
  const std::uint64_t new_leader = wait_for_leader(others);
  ASSERT_NE(new_leader, 0u);
  ASSERT_NE(new_leader, old_leader);
  for (const std::string& command : numbered("b-", 0, 60)) {
    ASSERT_EQ(propose_sync(raft(new_leader), command).error, "");
  }
  std::vector<std::string> expected = numbered("a-", 0, 20);
  for (const std::string& command : numbered("b-", 0, 60)) expected.push_back(command);
  for (std::uint64_t id : others) {
    ASSERT_TRUE(wait_until([&] { return fsm(id).size() == 80; }, 10s)) << "node " << id;
  }
  // Its log no longer holds what the stopped node lacks: only a snapshot can catch it up.
  EXPECT_TRUE(wait_until([&] { return raft(new_leader).status().snapshot_index > 30; }, 5s));

  // The stopped node again, from its directory, with a new (empty) state machine.
  std::optional<std::string> error = start(configs[old_leader - 1]);
  ASSERT_FALSE(error) << *error;
  EXPECT_TRUE(wait_until([&] { return fsm(old_leader).size() == 80; }, 20s))
      << fsm(old_leader).size();
  EXPECT_EQ(fsm(old_leader).commands(), expected);
  for (std::uint64_t id : others) EXPECT_EQ(fsm(id).commands(), expected);
  // Restored from its own snapshot at start-up, then from the leader's, which held more.
  const std::vector<std::size_t> restored = fsm(old_leader).restored_sizes();
  ASSERT_FALSE(restored.empty());
  EXPECT_GT(*std::max_element(restored.begin(), restored.end()), 20u);
  EXPECT_EQ(fsm(old_leader).order_violations(), 0);
}

TEST_F(RaftNodeTest, ANodeWithAnotherSecretCannotJoinWhileTheOthersWork) {
  std::vector<RaftNodeConfig> configs = cluster_configs(3);
  configs[2].secret = "some other secret";
  start_cluster(configs);
  const std::uint64_t leader = wait_for_leader({1, 2});
  ASSERT_NE(leader, 0u);
  EXPECT_EQ(propose_sync(raft(leader), "hello").error, "");
  for (std::uint64_t id : {1, 2}) {
    EXPECT_TRUE(wait_until([&] { return fsm(id).size() == 1; }, 5s));
  }
  // Refusals are logged on both sides of the handshake.
  EXPECT_TRUE(wait_until([&] { return logged("authentication failed"); }, 5s));
  EXPECT_TRUE(logged("cluster secret"));
  // The outsider's election timeout ran out: it stands, and gets nowhere.
  EXPECT_TRUE(wait_until([&] { return raft(3).status().role == core::RaftRole::kCandidate; }, 10s));
  const RaftStatus outsider = raft(3).status();
  EXPECT_EQ(outsider.leader_id, 0u);
  EXPECT_NE(outsider.role, core::RaftRole::kLeader);
  EXPECT_EQ(fsm(3).size(), 0u);
  EXPECT_EQ(raft(leader).status().leader_id, leader);
}

// What a stranger can do to the raft port: connect and say nothing, or send junk.
TEST_F(RaftNodeTest, StrangersAreDroppedBeforeRaftSeesThem) {
  RaftNodeConfig c = config(1);
  c.peers = {RaftPeer{1, c.raft_address}};
  c.bootstrap = true;
  c.handshake_timeout_ms = 300;
  ASSERT_FALSE(start(c));
  ASSERT_EQ(wait_for_leader({1}), 1u);
  const std::uint16_t port = static_cast<std::uint16_t>(std::stoi(c.raft_address.substr(10)));
  auto dial = [&] {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
  };
  // Reads until the node closes the connection; the bytes it sent before.
  auto read_all = [](int fd) {
    std::string got;
    char buf[512];
    ssize_t n = 0;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) got.append(buf, static_cast<std::size_t>(n));
    return std::make_pair(got, n);
  };

  const int silent = dial();
  const auto start_wait = std::chrono::steady_clock::now();
  const auto [hello, end] = read_all(silent);
  EXPECT_EQ(end, 0) << "the node should close the connection, not time out the test's read";
  EXPECT_EQ(hello.size(), 48u);  // its challenge, then nothing more
  EXPECT_LT(std::chrono::steady_clock::now() - start_wait, 3s);
  ::close(silent);
  EXPECT_TRUE(wait_until([&] { return logged("did not complete within 300 ms"); }, 2s));

  const int junk = dial();
  const std::string garbage(344, 'x');
  EXPECT_EQ(::write(junk, garbage.data(), garbage.size()), 344);
  const auto [reply, junk_end] = read_all(junk);
  EXPECT_EQ(junk_end, 0);
  EXPECT_EQ(reply.size(), 48u);  // the challenge only: no answer to junk
  ::close(junk);
  EXPECT_TRUE(wait_until([&] { return logged("not a turnstile raft handshake"); }, 2s));

  // The node is unharmed.
  EXPECT_EQ(propose_sync(raft(1), "still here").error, "");
}

TEST_F(RaftNodeTest, AddsAFourthVoterThenRemovesItOneChangeAtATime) {
  start_cluster(cluster_configs(3));
  const std::uint64_t leader = wait_for_leader({1, 2, 3});
  ASSERT_NE(leader, 0u);
  ASSERT_EQ(propose_sync(raft(leader), "before").error, "");

  RaftNodeConfig fourth = config(4);  // an empty directory, no bootstrap
  ASSERT_FALSE(start(fourth));

  // The first change, and at once two more: while the first is pending they are refused.
  std::vector<std::shared_ptr<std::promise<std::string>>> changes;
  auto answer = [&] {
    changes.push_back(std::make_shared<std::promise<std::string>>());
    return [promise = changes.back()](std::string error) { promise->set_value(error); };
  };
  raft(leader).add_voter(4, fourth.raft_address, answer());
  raft(leader).add_voter(5, "127.0.0.1:9", answer());
  raft(leader).remove_voter(2, answer());
  std::vector<std::string> answers;
  for (auto& change : changes) {
    std::future<std::string> future = change->get_future();
    ASSERT_EQ(future.wait_for(30s), std::future_status::ready);
    answers.push_back(future.get());
  }
  EXPECT_EQ(answers[0], "");
  EXPECT_NE(answers[1].find("another membership change is in progress"), std::string::npos)
      << answers[1];
  EXPECT_NE(answers[2].find("another membership change is in progress"), std::string::npos)
      << answers[2];
  EXPECT_TRUE(wait_until(
      [&] {
        return raft(leader).status().voters == std::vector<std::uint64_t>{1, 2, 3, 4};
      },
      5s));

  // The new voter has the log, and takes part.
  ASSERT_EQ(propose_sync(raft(leader), "with four").error, "");
  EXPECT_TRUE(wait_until([&] { return fsm(4).size() == 2; }, 10s));
  EXPECT_EQ(fsm(4).commands(), (std::vector<std::string>{"before", "with four"}));
  EXPECT_TRUE(wait_until(
      [&] {
        return raft(4).status().voters == std::vector<std::uint64_t>{1, 2, 3, 4};
      },
      5s));
  EXPECT_EQ(raft(4).status().leader_id, leader);

  // Removing the fourth works.
  EXPECT_EQ(error_sync([&](RaftNode::ErrorDone done) { raft(leader).remove_voter(4, done); }), "");
  EXPECT_TRUE(wait_until(
      [&] {
        return raft(leader).status().voters == std::vector<std::uint64_t>{1, 2, 3};
      },
      5s));
  stop(4);
  ASSERT_EQ(propose_sync(raft(leader), "with three").error, "");
  for (std::uint64_t id : {1, 2, 3}) {
    EXPECT_TRUE(wait_until([&] { return fsm(id).size() == 3; }, 10s)) << "node " << id;
  }

  // The leader removes itself: it steps down once that is committed, and the other two elect one
  // of themselves.
  EXPECT_EQ(error_sync([&](RaftNode::ErrorDone done) { raft(leader).remove_voter(leader, done); }),
            "");
  std::vector<std::uint64_t> others;
  for (std::uint64_t id : {1, 2, 3}) {
    if (id != leader) others.push_back(id);
  }
  const std::uint64_t next = wait_for_leader(others);
  ASSERT_NE(next, 0u);
  EXPECT_NE(raft(leader).status().role, core::RaftRole::kLeader);
  EXPECT_EQ(raft(next).status().voters, others);
  ASSERT_EQ(propose_sync(raft(next), "with two").error, "");
}

// Every regular file under `dir`, with its bytes.
std::map<std::string, std::string> files_of(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    out[entry.path().filename().string()] = bytes.str();
  }
  return out;
}

TEST_F(RaftNodeTest, ADamagedSegmentRefusesStartAndTouchesNothing) {
  RaftNodeConfig c = config(1);
  c.peers = {RaftPeer{1, c.raft_address}};
  c.bootstrap = true;
  ASSERT_FALSE(start(c));
  ASSERT_EQ(wait_for_leader({1}), 1u);
  for (const std::string& command : numbered("entry-", 0, 30)) {
    ASSERT_EQ(propose_sync(raft(1), command).error, "");
  }
  stop(1);

  // The closed segment with the newest entries ("<first>-<last>"), cut in the middle.
  std::map<std::string, std::string> files = files_of(c.dir);
  const std::regex closed_segment("([0-9]+)-([0-9]+)");
  std::string victim;
  unsigned long long newest = 0;
  for (const auto& [name, bytes] : files) {
    std::smatch m;
    if (std::regex_match(name, m, closed_segment) && std::stoull(m[2]) >= newest) {
      newest = std::stoull(m[2]);
      victim = name;
    }
  }
  ASSERT_FALSE(victim.empty());
  ASSERT_GT(newest, 30u);
  fs::resize_file(fs::path(c.dir) / victim, files[victim].size() / 2);
  const std::map<std::string, std::string> damaged = files_of(c.dir);

  const std::optional<std::string> error = start(c);
  ASSERT_TRUE(error);
  EXPECT_NE(error->find("raft directory " + c.dir + " is damaged or unreadable"), std::string::npos)
      << *error;
  EXPECT_NE(error->find("re-add it as a new member"), std::string::npos) << *error;
  EXPECT_EQ(files_of(c.dir), damaged);  // nothing repaired, nothing deleted
  EXPECT_EQ(raft(1).status().role, core::RaftRole::kUnavailable);
  Result after = propose_sync(raft(1), "refused");
  EXPECT_NE(after.error.find("not running"), std::string::npos);
}

TEST_F(RaftNodeTest, DamagedMetadataRefusesStartAndTouchesNothing) {
  RaftNodeConfig c = config(1);
  c.peers = {RaftPeer{1, c.raft_address}};
  c.bootstrap = true;
  ASSERT_FALSE(start(c));
  ASSERT_EQ(wait_for_leader({1}), 1u);
  ASSERT_EQ(propose_sync(raft(1), "entry").error, "");
  stop(1);
  // Both metadata files torn: raft itself would delete them and forget the term and the vote.
  for (const char* name : {"metadata1", "metadata2"}) {
    std::ofstream(fs::path(c.dir) / name, std::ios::binary | std::ios::trunc) << "torn";
  }
  const std::map<std::string, std::string> damaged = files_of(c.dir);
  const std::optional<std::string> error = start(c);  // bootstrap is still asked for
  ASSERT_TRUE(error);
  EXPECT_NE(error->find("is damaged or unreadable (metadata1 and metadata2"), std::string::npos)
      << *error;
  EXPECT_EQ(files_of(c.dir), damaged);
}

TEST_F(RaftNodeTest, StartRefusesAnAddressInUseAndAMissingDirectory) {
  RaftNodeConfig first = config(1);
  first.peers = {RaftPeer{1, first.raft_address}};
  first.bootstrap = true;
  ASSERT_FALSE(start(first));
  RaftNodeConfig second = config(2);
  second.raft_address = first.raft_address;
  second.peers = {RaftPeer{2, second.raft_address}};
  second.bootstrap = true;
  const std::optional<std::string> in_use = start(second);
  ASSERT_TRUE(in_use);
  EXPECT_NE(in_use->find("cannot listen for raft traffic on " + first.raft_address),
            std::string::npos)
      << *in_use;

  RaftNodeConfig third = config(3);
  third.dir = (root_ / "missing").string();
  const std::optional<std::string> missing = start(third);
  ASSERT_TRUE(missing);
  EXPECT_NE(missing->find(third.dir + " does not exist"), std::string::npos) << *missing;
}

}  // namespace
}  // namespace turnstile::net
