// client::Members against three real turnstiled nodes on loopback (client/members.h): it finds the
// leader from any member by following `error_not_leader`, binds its stable ref, gives up in time
// when nothing answers; a lock guard made through it keeps its lock, token and fence through a
// kill -9 of the leader (it renews with the next one), a read lock likewise, and it reports the
// loss when no leader comes back before its lease ends.
#include "client/members.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/cluster_harness.h"
#include "tests/integration/harness.h"

namespace turnstile::client {
namespace {

using integration::Client;
using integration::eventually;
using integration::LoopbackCluster;
using namespace std::chrono_literals;

Endpoint node(const LoopbackCluster& cluster, std::size_t i) {
  return Endpoint{"127.0.0.1", static_cast<std::uint16_t>(cluster.client_port(i))};
}

std::vector<Endpoint> all_nodes(const LoopbackCluster& cluster) {
  std::vector<Endpoint> nodes;
  for (std::size_t i = 0; i < cluster.size(); ++i) nodes.push_back(node(cluster, i));
  return nodes;
}

TEST(MembersTest, OnlyAnAddressWithAPortIsTakenAsTheLeaderAFollowerNames) {
  EXPECT_EQ(parse_leader_address("127.0.0.1:6388"), (Endpoint{"127.0.0.1", 6388}));
  EXPECT_EQ(parse_leader_address("[::1]:7000"), (Endpoint{"::1", 7000}));
  EXPECT_EQ(parse_leader_address("node-2.example:6388"), (Endpoint{"node-2.example", 6388}));
  // Not an address a server advertises: never followed, never resolved.
  for (const std::string& bad :
       {std::string(), std::string("host"), std::string("::1"), std::string("[::1]"),
        std::string("a b:1"), std::string("x:1:2"), std::string("host:99999"),
        std::string("host:0"), std::string("\xff\xfe[::zz]:99 junk"),
        std::string(300, 'a') + ":1"}) {
    EXPECT_FALSE(parse_leader_address(bad)) << bad;
  }
}

// A node on loopback that takes connections and never answers, as a stopped (SIGSTOP) one does,
// or that answers every request the way a follower that has not seen an election does: `ok` to
// stable-ref, `error_not_leader <named>` to anything else (port 0: itself, as a broken or hostile
// node might). It counts the connections it took.
class FakeNode {
 public:
  explicit FakeNode(std::optional<std::uint16_t> names = std::nullopt) : names_(names) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        ::listen(fd_, 16) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      throw std::runtime_error("FakeNode: no listening socket");
    }
    port_ = ntohs(address.sin_port);
    if (names_ == 0) names_ = port_;
    thread_ = std::thread([this] { run(); });
  }
  ~FakeNode() {
    stop_ = true;
    thread_.join();
    for (const int fd : open_) ::close(fd);
    ::close(fd_);
  }
  Endpoint endpoint() const { return Endpoint{"127.0.0.1", port_}; }
  std::uint16_t port() const { return port_; }
  int accepted() const { return accepted_.load(); }

 private:
  void run() {
    while (!stop_) {
      pollfd waiting{fd_, POLLIN, 0};
      if (::poll(&waiting, 1, 20) <= 0) continue;
      const int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      ++accepted_;
      open_.push_back(fd);  // a silent node keeps it open and never reads
      if (names_) answer(fd);
    }
  }
  // One connection, request by request (three lines each), until it closes.
  void answer(int fd) const {
    std::string buffer;
    char bytes[512];
    while (!stop_) {
      pollfd readable{fd, POLLIN, 0};
      if (::poll(&readable, 1, 20) <= 0) continue;
      const ssize_t n = ::read(fd, bytes, sizeof bytes);
      if (n <= 0) return;
      buffer.append(bytes, static_cast<std::size_t>(n));
      while (std::count(buffer.begin(), buffer.end(), '\n') >= 3) {
        const std::string command = buffer.substr(0, buffer.find('\n'));
        for (int line = 0; line < 3; ++line) buffer.erase(0, buffer.find('\n') + 1);
        const std::string reply =
            command == "stable-ref"
                ? "ok\n"
                : "error_not_leader 127.0.0.1:" + std::to_string(*names_) + "\n";
        if (::write(fd, reply.data(), reply.size()) < 0) return;
      }
    }
  }

  std::optional<std::uint16_t> names_;  // set before the thread starts
  int fd_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::vector<int> open_;  // the accepting thread's
  std::thread thread_;
};

TEST(MembersTest, AStoppedLeaderThatFollowersStillNameCostsOneProbeARound) {
  // The old leader is stopped; the one follower that answers has not seen the election and names
  // it; the new leader is a real node. Members lists them in that order.
  integration::Daemon leader;
  FakeNode stopped;
  FakeNode follower(stopped.port());
  FailoverOptions failover;
  failover.probe_timeout = Milliseconds{300};
  Members members({stopped.endpoint(), follower.endpoint(),
                   Endpoint{"127.0.0.1", static_cast<std::uint16_t>(leader.port())}},
                  {}, failover);
  auto connection = members.connect_leader(10s);
  ASSERT_TRUE(connection) << connection.error().to_string();
  EXPECT_EQ(connection->endpoint().port, leader.port());
  // Once: the follower's hint to it comes after it did not answer in this same round.
  EXPECT_EQ(stopped.accepted(), 1);
  EXPECT_EQ(follower.accepted(), 1);

  // The next round tries the nodes that answered first: the stopped one last, and not at all
  // when the leader answers.
  EXPECT_TRUE(members.connect_leader(10s));
  EXPECT_EQ(stopped.accepted(), 1);
}

TEST(MembersTest, ANodeThatNamesItselfDoesNotKeepTheOthersFromBeingTried) {
  integration::Daemon leader;
  FakeNode liar(std::uint16_t{0});
  Members members(
      {liar.endpoint(), Endpoint{"127.0.0.1", static_cast<std::uint16_t>(leader.port())}});
  auto connection = members.connect_leader(10s);
  ASSERT_TRUE(connection) << connection.error().to_string();
  EXPECT_EQ(connection->endpoint().port, leader.port());
  EXPECT_EQ(liar.accepted(), 1);
}

TEST(MembersTest, AFollowerNamesTheLeaderAndTheConnectionCarriesTheRef) {
  LoopbackCluster cluster;
  const std::optional<std::size_t> leader = cluster.leader();
  ASSERT_TRUE(leader);
  const std::size_t follower = (*leader + 1) % cluster.size();
  // Only a follower is listed: the leader is found through its answer.
  FailoverOptions failover;
  failover.stable_ref = "members-test";
  Members members({node(cluster, follower)}, {}, failover);
  EXPECT_EQ(members.stable_ref(), "members-test");
  auto connection = members.connect_leader(10s);
  ASSERT_TRUE(connection) << connection.error().to_string();
  EXPECT_EQ(connection->endpoint(), node(cluster, *leader));
  EXPECT_EQ(members.last_leader(), node(cluster, *leader));
  // The ref is bound already: a second one is refused.
  EXPECT_EQ(connection->stable_ref("again").error().code, ErrorCode::kProtocol);
  EXPECT_TRUE(connection->lock("job", Seconds{0}, Seconds{30}));
}

TEST(MembersTest, AMemberListWithNobodyListeningGivesUpAtTheDeadline) {
  FailoverOptions failover;
  failover.first_backoff = Milliseconds{10};
  Members members({Endpoint{"127.0.0.1", integration::unused_loopback_port()}}, {}, failover);
  EXPECT_FALSE(members.stable_ref().empty());  // made once per object
  const auto start = std::chrono::steady_clock::now();
  auto connection = members.connect_leader(300ms);
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(connection);
  EXPECT_EQ(connection.error().code, ErrorCode::kConnect);
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 5s);
  EXPECT_NE(Members({Endpoint{}}).stable_ref(), Members({Endpoint{}}).stable_ref());
}

// A guard made through Members, on a lock or (with `read`) a read lock, keeps its slot, token
// and fence through a kill -9 of the leader: it renews with the next leader, which a lease later
// still refuses the key to a writer (and grants a second reader beside a read lock), and hands the
// key on with a higher fence after the release.
void expect_the_guard_rides_through_a_kill_of_the_leader(bool read) {
  LoopbackCluster cluster;
  const std::optional<std::size_t> first = cluster.leader();
  ASSERT_TRUE(first);
  Members members(all_nodes(cluster));
  std::mutex mutex;
  std::vector<Endpoint> moved_to;
  std::atomic<bool> lost{false};
  GuardOptions options;
  options.timeout = Seconds{5};
  options.lease = Seconds{4};
  options.on_failover = [&](const Endpoint& to) {
    std::lock_guard lock(mutex);
    moved_to.push_back(to);
  };
  options.on_lost = [&](const LossEvent&) { lost = true; };
  const auto as_guard = [](auto made) {
    return made ? Result<Guard>(Guard(std::move(*made))) : Result<Guard>(made.error());
  };
  Result<Guard> guard = read ? as_guard(members.rw_lock("job", RwMode::kRead, options))
                             : as_guard(members.lock("job", options));
  ASSERT_TRUE(guard) << guard.error().to_string();
  EXPECT_EQ(guard->endpoint(), node(cluster, *first));
  const std::string token = guard->token_string();

  ASSERT_TRUE(cluster.kill(*first));
  const std::optional<std::size_t> next = cluster.leader();
  ASSERT_TRUE(next);
  // Within one lease the guard finds the new leader and renews there.
  ASSERT_TRUE(eventually(
      [&] {
        std::lock_guard lock(mutex);
        return !moved_to.empty();
      },
      8s));
  {
    std::lock_guard lock(mutex);
    EXPECT_EQ(moved_to.front(), node(cluster, *next));
  }
  EXPECT_TRUE(guard->held());
  EXPECT_FALSE(lost);
  EXPECT_EQ(guard->token_string(), token);
  EXPECT_EQ(guard->endpoint(), node(cluster, *next));
  // Two more leases later it still holds: nobody else can take the key to write.
  std::this_thread::sleep_for(5s);
  EXPECT_TRUE(guard->held());
  Client other(cluster.client_port(*next));
  if (read) {
    const std::string reader = other.request("rl", "job", "0 30");
    ASSERT_EQ(reader.substr(0, 3), "ok ") << reader;
    EXPECT_EQ(other.request("rr", "job", reader.substr(3, 32)), "ok");
  }
  const char* const exclusive = read ? "wl" : "l";
  EXPECT_EQ(other.request(exclusive, "job", "0 30"), "timeout");
  ASSERT_TRUE(guard->release());
  const std::string after = other.request(exclusive, "job", "0 30");
  ASSERT_EQ(after.substr(0, 3), "ok ") << after;
  EXPECT_GT(integration::fence_of(after.substr(3, 32)).value(),
            integration::fence_of(token).value());
}

TEST(MembersTest, ALockGuardKeepsItsLockAndTokenThroughAKillOfTheLeader) {
  expect_the_guard_rides_through_a_kill_of_the_leader(/*read=*/false);
}

TEST(MembersTest, AReadLockGuardKeepsItsLockAndTokenThroughAKillOfTheLeader) {
  expect_the_guard_rides_through_a_kill_of_the_leader(/*read=*/true);
}

TEST(MembersTest, AReleaseAfterTheLeaderDiedIsMadeWithTheNextLeader) {
  LoopbackCluster cluster;
  const std::optional<std::size_t> first = cluster.leader();
  ASSERT_TRUE(first);
  Members members(all_nodes(cluster));
  GuardOptions options;
  options.lease = Seconds{20};  // no renewal before the release below
  auto guard = members.lock("job", options);
  ASSERT_TRUE(guard) << guard.error().to_string();
  ASSERT_TRUE(cluster.kill(*first));
  const std::optional<std::size_t> next = cluster.leader();
  ASSERT_TRUE(next);
  // The connection to the old leader is dead: the release goes to the new one, by token.
  const auto released = guard->release();
  EXPECT_TRUE(released) << released.error().to_string();
  Client other(cluster.client_port(*next));
  EXPECT_EQ(other.request("l", "job", "0 30").substr(0, 3), "ok ");
}

TEST(MembersTest, AnAcquireWaitingWhenTheLeaderDiesIsAnsweredByTheNextLeader) {
  // With --orphan-ttl the waiter's place is kept for its stable ref, and the acquire sent again to
  // the next leader takes it back.
  LoopbackCluster cluster(
      {.nodes = 3, .voters = 3, .extra_args = {"--orphan-ttl", "30"}, .start_attempts = 3});
  const std::optional<std::size_t> first = cluster.leader();
  ASSERT_TRUE(first);
  Client holder(cluster.client_port(*first));
  const std::string grant = holder.request("l", "job", "0 30");
  ASSERT_EQ(grant.substr(0, 3), "ok ") << grant;
  const std::string token = grant.substr(3, 32);

  Members members(all_nodes(cluster));
  std::optional<Result<Lock>> waited;
  std::atomic<bool> done{false};
  std::thread waiter([&] {
    GuardOptions options;
    options.timeout = Seconds{30};
    options.lease = Seconds{10};
    waited.emplace(members.lock("job", options));
    done = true;
  });
  // Queued behind the holder on the first leader.
  ASSERT_TRUE(eventually(
      [&] {
        Client probe(cluster.client_port(*first));
        return probe.request("stats", "_", "_").find("\"waiters\":1") != std::string::npos;
      },
      10s));
  ASSERT_TRUE(cluster.kill(*first));
  const std::optional<std::size_t> next = cluster.leader();
  ASSERT_TRUE(next);
  std::this_thread::sleep_for(1s);
  EXPECT_FALSE(done) << "the acquire returned before the lock was free";
  // The holder lets go through the new leader: the waiter gets the lock.
  Client releaser(cluster.client_port(*next));
  EXPECT_EQ(releaser.request("r", "job", token), "ok");
  ASSERT_TRUE(eventually([&] { return done.load(); }, 15s));
  waiter.join();
  ASSERT_TRUE(*waited) << waited->error().to_string();
  EXPECT_EQ((*waited)->endpoint(), node(cluster, *next));
  EXPECT_GT((*waited)->fence(), integration::fence_of(token).value());
}

TEST(MembersTest, ALockGuardReportsTheLossWhenNoLeaderComesBackInItsLease) {
  LoopbackCluster cluster;
  const std::optional<std::size_t> first = cluster.leader();
  ASSERT_TRUE(first);
  Members members(all_nodes(cluster));
  std::atomic<bool> lost{false};
  GuardOptions options;
  options.timeout = Seconds{5};
  options.lease = Seconds{3};
  options.on_lost = [&](const LossEvent&) { lost = true; };
  auto guard = members.lock("job", options);
  ASSERT_TRUE(guard) << guard.error().to_string();
  // Two of three nodes down: no majority, no leader.
  ASSERT_TRUE(cluster.kill(*first));
  ASSERT_TRUE(cluster.kill((*first + 1) % cluster.size()));
  ASSERT_TRUE(eventually([&] { return lost.load(); }, 6s));
  EXPECT_EQ(guard->state(), GuardState::kLost);
  ASSERT_TRUE(guard->loss());
  EXPECT_EQ(guard->loss()->reason, LossReason::kLeaseExpired) << guard->loss()->error.to_string();
}

}  // namespace
}  // namespace turnstile::client
