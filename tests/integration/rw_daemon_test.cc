// Read-write locks, check, inspect, lost-notify and --lock-delay over real sockets against one
// turnstiled (docs/protocol.md, "Beyond dflockd"; docs/semantics.md). The connections of one
// test land on different shards (--threads 4), so every rule is seen across threads too.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/harness.h"

namespace turnstile::integration {
namespace {

// The token of a grant reply `ok <token> <lease>` (or `acquired ...`), or "" when it is not one.
std::string token_of(const std::string& reply) {
  const std::size_t first = reply.find(' ');
  if (first == std::string::npos) return "";
  const std::size_t second = reply.find(' ', first + 1);
  if (second == std::string::npos || second - first - 1 != 32) return "";
  return reply.substr(first + 1, 32);
}

class ReadWriteDaemonTest : public ::testing::Test {
 protected:
  std::unique_ptr<Client> client() { return std::make_unique<Client>(daemon_.port()); }
  Daemon daemon_{{"--threads", "4", "--lock-delay", "1"}};
};

TEST_F(ReadWriteDaemonTest, ReadersShareWritersExcludeAndAQueuedWriterBlocksLaterReaders) {
  auto r1 = client();
  auto r2 = client();
  auto writer = client();
  auto late = client();
  const std::string t1 = token_of(r1->request("rl", "res", "0 20"));
  const std::string t2 = token_of(r2->request("rl", "res", "0 20"));
  ASSERT_FALSE(t1.empty());
  ASSERT_FALSE(t2.empty());
  writer->send("wl\nres\n10 20\n");  // parks behind the readers
  EXPECT_FALSE(writer->read_line(300ms));
  EXPECT_EQ(late->request("rl", "res", "0"), "timeout");  // behind the queued writer
  late->send("rl\nres\n10\n");
  EXPECT_EQ(r1->request("rr", "res", t1), "ok");
  EXPECT_FALSE(writer->read_line(200ms));  // one reader still holds it
  EXPECT_EQ(r2->request("rr", "res", t2), "ok");
  const std::optional<std::string> granted = writer->read_line(5s);
  ASSERT_TRUE(granted);
  const std::string wt = token_of(*granted);
  ASSERT_FALSE(wt.empty()) << *granted;
  EXPECT_GT(wt, t2);
  EXPECT_FALSE(late->read_line(200ms));  // the writer holds it alone
  EXPECT_EQ(writer->request("wr", "res", wt), "ok");
  const std::optional<std::string> reader = late->read_line(5s);
  ASSERT_TRUE(reader);
  EXPECT_GT(token_of(*reader), wt);
}

TEST_F(ReadWriteDaemonTest, WireRulesOfTheNewCommands) {
  auto c = client();
  EXPECT_EQ(c->request("rl", "k", ""), "error");       // a timeout is needed
  EXPECT_EQ(c->request("wl", "k", "1 2 3"), "error");  // too many fields
  EXPECT_EQ(c->request("rl", "k", "0 0"), "error");    // lease 0
  EXPECT_EQ(c->request("rr", "k", ""), "error");       // empty token
  EXPECT_EQ(c->request("rw", "k", "1"), "error_not_enqueued");
  EXPECT_EQ(c->request("check", "k", ""), "error");
  EXPECT_EQ(c->request("check", "k", std::string(32, 'a') + " nope"), "error");
  EXPECT_EQ(c->request("check", "k", "short"), "error_lease_expired");
  EXPECT_EQ(c->request("inspect", "k", "bogus"), "error");
  EXPECT_EQ(c->request("lost-notify", "_", ""), "error");
  EXPECT_EQ(c->request("ping", "_", ""), "ok");  // every error above kept the connection
  const std::string t = token_of(c->request("wl", "k", "0 9"));
  ASSERT_FALSE(t.empty());
  EXPECT_EQ(c->request("rr", "k", t), "error");  // the wrong kind of token
  EXPECT_EQ(c->request("rn", "k", t), "error");
  EXPECT_EQ(c->request("r", "k", t), "error");  // the lock namespace
  EXPECT_EQ(c->request("wn", "k", t + " 20"), "ok 20");
  EXPECT_EQ(c->request("check", "k", t + " rw"), "ok 20");
  const std::string stats = c->request("stats", "_", "");
  EXPECT_NE(stats.find("\"rw_locks\":[{\"key\":\"k\",\"readers\":0"), std::string::npos) << stats;
  EXPECT_EQ(c->request("wr", "k", t), "ok");
  EXPECT_EQ(c->request("check", "k", t + " rw"), "error_lease_expired");
}

TEST_F(ReadWriteDaemonTest, InspectShowsFencesAndTheQueueNeverTokens) {
  auto holder = client();
  auto waiter = client();
  const std::string t = token_of(holder->request("l", "job", "0 30"));
  ASSERT_FALSE(t.empty());
  waiter->send("l\njob\n20\n");
  std::this_thread::sleep_for(200ms);
  const std::string shown = holder->request("inspect", "job", "");
  ASSERT_EQ(shown.rfind("ok {", 0), 0u) << shown;
  EXPECT_NE(shown.find("\"kind\":\"lock\",\"key\":\"job\",\"exists\":true"), std::string::npos)
      << shown;
  EXPECT_NE(shown.find("\"fence\":" + std::to_string(std::stoull(t.substr(0, 16), nullptr, 16))),
            std::string::npos)
      << shown;
  EXPECT_NE(shown.find("\"waiters\":[{\"session\":"), std::string::npos) << shown;
  EXPECT_EQ(shown.find(t), std::string::npos);
  EXPECT_NE(holder->request("inspect", "nothing", "sem").find("\"exists\":false"),
            std::string::npos);
}

TEST_F(ReadWriteDaemonTest, AnOptedInHolderIsToldOfItsExpiredLeaseOthersAreNot) {
  auto told = client();
  auto silent = client();
  ASSERT_EQ(told->request("lost-notify", "_", "on"), "ok");
  const std::string a = token_of(told->request("sl", "pool", "0 3 1"));
  const std::string b = token_of(silent->request("sl", "pool", "0 3 1"));
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(b.empty());
  const std::optional<std::string> line = told->read_line(5s);
  ASSERT_TRUE(line);
  EXPECT_EQ(*line, "lost sem pool " + a + " expired");
  EXPECT_FALSE(silent->read_line(500ms));
  // Renewed in time, a slot is no loss; and off stops the lines.
  const std::string c = token_of(told->request("rl", "r", "0 1"));
  EXPECT_EQ(told->request("rn", "r", c + " 30"), "ok 30");
  EXPECT_EQ(told->request("lost-notify", "_", "off"), "ok");
  EXPECT_FALSE(told->read_line(1500ms));
}

TEST_F(ReadWriteDaemonTest, LockDelayHoldsAKeyAfterADisconnectButNotAfterARelease) {
  auto next = client();
  {
    auto gone = client();
    ASSERT_FALSE(token_of(gone->request("l", "d", "0 30")).empty());
  }  // disconnects holding it: auto-release, then the 1 s delay
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(next->request("l", "d", "0"), "timeout");
  const auto asked = std::chrono::steady_clock::now();
  const std::string granted = next->request("l", "d", "5");
  EXPECT_FALSE(token_of(granted).empty()) << granted;
  EXPECT_GE(std::chrono::steady_clock::now() - asked, 600ms);
  // A release hands on at once.
  auto other = client();
  other->send("l\nd\n5\n");
  EXPECT_EQ(next->request("r", "d", token_of(granted)), "ok");
  const std::optional<std::string> handed = other->read_line(300ms);
  ASSERT_TRUE(handed);
  EXPECT_FALSE(token_of(*handed).empty());
}

}  // namespace
}  // namespace turnstile::integration
