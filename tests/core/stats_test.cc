// Tests of the stats snapshot merge and its JSON line (reference 1.7).
#include "core/stats.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace turnstile::core {
namespace {

LockStats lock(std::string key, std::uint64_t owner = 1, double lease_s = 10,
               std::int64_t waiters = 0) {
  return LockStats{std::move(key), SessionId{owner}, lease_s, waiters};
}
SemaphoreStats semaphore(std::string key, std::int64_t limit = 3, std::int64_t holders = 1,
                         std::int64_t waiters = 0) {
  return SemaphoreStats{std::move(key), limit, holders, waiters};
}
IdleStats idle(std::string key, double idle_s = 1.5) { return IdleStats{std::move(key), idle_s}; }

std::vector<std::string> keys_of(const auto& entries) {
  std::vector<std::string> keys;
  for (const auto& entry : entries) keys.push_back(entry.key);
  return keys;
}

using Keys = std::vector<std::string>;

// ---- JSON ---------------------------------------------------------------------------------------

TEST(StatsJson, EmptySnapshotHasEmptyArraysNeverNull) {
  EXPECT_EQ(encode_stats_json(0, StatsSnapshot{}),
            R"({"connections":0,"locks":[],"semaphores":[],"idle_locks":[],)"
            R"("idle_semaphores":[],"truncated":false})");
}

// docs/compatibility.md: signal_channels only while something listens (an idle server answers
// dflockd v2.1's line), after idle_semaphores and before truncated; `group` only for a group.
TEST(StatsJson, SignalChannelsAppearOnlyWhileSomethingListens) {
  StatsSnapshot snapshot;
  EXPECT_EQ(encode_stats_json(1, snapshot).find("signal_channels"), std::string::npos);
  snapshot.signal_channels.push_back(SignalChannelStats{"jobs.*", "", 2});
  snapshot.signal_channels.push_back(SignalChannelStats{"jobs.>", "workers", 3});
  EXPECT_EQ(encode_stats_json(1, snapshot),
            R"({"connections":1,"locks":[],"semaphores":[],"idle_locks":[],)"
            R"("idle_semaphores":[],"signal_channels":[{"pattern":"jobs.*","listeners":2},)"
            R"({"pattern":"jobs.>","group":"workers","listeners":3}],"truncated":false})");
}

TEST(StatsJson, FieldsComeInDflockdsOrder) {
  StatsSnapshot snapshot;
  snapshot.locks.push_back(lock("a", 7, 12.5, 2));
  snapshot.semaphores.push_back(semaphore("s", 4, 3, 1));
  snapshot.idle_locks.push_back(idle("b", 3.25));
  snapshot.idle_semaphores.push_back(idle("t", 0.5));
  snapshot.truncated = true;
  EXPECT_EQ(encode_stats_json(3, snapshot),
            R"({"connections":3,)"
            R"("locks":[{"key":"a","owner_conn_id":7,"lease_expires_in_s":12.5,"waiters":2}],)"
            R"("semaphores":[{"key":"s","limit":4,"holders":3,"waiters":1}],)"
            R"("idle_locks":[{"key":"b","idle_s":3.25}],)"
            R"("idle_semaphores":[{"key":"t","idle_s":0.5}],)"
            R"("truncated":true})");
}

TEST(StatsJson, IsOneCompactLine) {
  StatsSnapshot snapshot;
  snapshot.locks.push_back(lock("line\nbreak"));
  const std::string json = encode_stats_json(1, snapshot);
  EXPECT_EQ(json.find('\n'), std::string::npos);
  EXPECT_EQ(json.find(": "), std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(json)["locks"][0]["key"], "line\nbreak");
}

TEST(StatsJson, SecondsAreFloatsAndOwnerIsAFull64BitInteger) {
  StatsSnapshot snapshot;
  snapshot.locks.push_back(lock("a", 0xFEDCBA9876543210, 0, 0));
  snapshot.idle_locks.push_back(idle("b", 2));
  const nlohmann::json json = nlohmann::json::parse(encode_stats_json(1, snapshot));
  EXPECT_TRUE(json["locks"][0]["lease_expires_in_s"].is_number_float());
  EXPECT_TRUE(json["idle_locks"][0]["idle_s"].is_number_float());
  EXPECT_EQ(json["locks"][0]["owner_conn_id"].get<std::uint64_t>(), 0xFEDCBA9876543210u);
}

TEST(StatsJson, LeaseIsClampedAtZero) {
  StatsSnapshot snapshot;
  snapshot.locks.push_back(lock("a", 1, -0.25, 0));
  const nlohmann::json json = nlohmann::json::parse(encode_stats_json(1, snapshot));
  EXPECT_EQ(json["locks"][0]["lease_expires_in_s"].get<double>(), 0.0);
}

TEST(StatsJson, LockWithWaitersButNoHolderShowsOwnerZero) {
  StatsSnapshot snapshot;
  snapshot.locks.push_back(lock("a", 0, 0, 3));
  EXPECT_EQ(encode_stats_json(1, snapshot),
            R"({"connections":1,)"
            R"("locks":[{"key":"a","owner_conn_id":0,"lease_expires_in_s":0.0,"waiters":3}],)"
            R"("semaphores":[],"idle_locks":[],"idle_semaphores":[],"truncated":false})");
}

TEST(StatsJson, KeysAreEscapedAndInvalidUtf8IsReplaced) {
  // Keys are client bytes; the JSON must stay valid whatever they hold (Go's encoder replaces
  // invalid UTF-8 with U+FFFD too).
  StatsSnapshot snapshot;
  snapshot.locks.push_back(lock("q\"b\\\x01"));
  snapshot.idle_locks.push_back(idle("bad\xff"));
  const std::string json = encode_stats_json(1, snapshot);
  EXPECT_NE(json.find(R"("key":"q\"b\\\u0001")"), std::string::npos) << json;
  EXPECT_NE(json.find("\"key\":\"bad\xef\xbf\xbd\""), std::string::npos) << json;
  EXPECT_TRUE(nlohmann::json::accept(json));
}

// Cluster mode adds one object after dflockd's fields; without it the line is exactly as before.
TEST(StatsJson, ClusterObjectComesLastWithEveryField) {
  StatsSnapshot snapshot;
  snapshot.cluster =
      ClusterStatus{2, RaftRole::kFollower, 7, 1, "10.0.0.1:6388", 41, 42, 32, 40, {1, 2, 3}};
  EXPECT_EQ(encode_stats_json(0, snapshot),
            R"({"connections":0,"locks":[],"semaphores":[],"idle_locks":[],)"
            R"("idle_semaphores":[],"truncated":false,)"
            R"("cluster":{"node_id":2,"role":"follower","term":7,"leader_id":1,)"
            R"("leader_address":"10.0.0.1:6388","commit_index":41,"last_index":42,)"
            R"("snapshot_index":32,"applied_index":40,"voters":[1,2,3]}})");
}

TEST(StatsJson, EveryRaftRoleHasItsWord) {
  const std::pair<RaftRole, const char*> kWords[] = {{RaftRole::kUnavailable, "unavailable"},
                                                     {RaftRole::kFollower, "follower"},
                                                     {RaftRole::kCandidate, "candidate"},
                                                     {RaftRole::kLeader, "leader"}};
  for (const auto& [role, word] : kWords) {
    StatsSnapshot snapshot;
    snapshot.cluster = ClusterStatus{};
    snapshot.cluster->role = role;
    EXPECT_EQ(nlohmann::json::parse(encode_stats_json(0, snapshot))["cluster"]["role"], word);
  }
}

TEST(StatsJson, ClusterWithoutLeaderHasIdZeroAndEmptyAddressAndVotersAnArray) {
  StatsSnapshot snapshot;
  snapshot.cluster = ClusterStatus{};
  const nlohmann::json cluster = nlohmann::json::parse(encode_stats_json(0, snapshot))["cluster"];
  EXPECT_EQ(cluster["role"], "unavailable");
  EXPECT_EQ(cluster["leader_id"], 0);
  EXPECT_EQ(cluster["leader_address"], "");
  EXPECT_TRUE(cluster["voters"].is_array());
  EXPECT_TRUE(cluster["voters"].empty());
}

TEST(StatsJson, ClusterObjectSurvivesTruncation) {
  StatsSnapshot snapshot;
  for (int i = 0; i < 100; ++i) snapshot.locks.push_back(lock("key" + std::to_string(100 + i)));
  snapshot.cluster = ClusterStatus{3, RaftRole::kLeader, 2, 3, "h:1", 5, 5, 0, 5, {1, 2, 3}};
  const std::string json = encode_stats_json(1, snapshot, 600);
  EXPECT_LE(json.size(), 600u);
  const nlohmann::json parsed = nlohmann::json::parse(json);
  EXPECT_TRUE(parsed["truncated"].get<bool>());
  EXPECT_EQ(parsed["cluster"]["node_id"], 3);
  EXPECT_EQ(parsed["cluster"]["voters"], nlohmann::json::array({1, 2, 3}));
}

// ---- merge_stats --------------------------------------------------------------------------------

TEST(StatsMerge, EntriesFromEveryPartAreSortedByKey) {
  StatsSnapshot total;
  StatsSnapshot first;
  first.locks = {lock("m"), lock("c")};
  first.semaphores = {semaphore("z"), semaphore("b")};
  first.idle_locks = {idle("y"), idle("x")};
  first.idle_semaphores = {idle("q")};
  StatsSnapshot second;
  second.locks = {lock("a"), lock("n")};
  second.semaphores = {semaphore("c")};
  second.idle_semaphores = {idle("p"), idle("r")};
  merge_stats(total, std::move(first), 100);
  merge_stats(total, std::move(second), 100);
  EXPECT_EQ(keys_of(total.locks), (Keys{"a", "c", "m", "n"}));
  EXPECT_EQ(keys_of(total.semaphores), (Keys{"b", "c", "z"}));
  EXPECT_EQ(keys_of(total.idle_locks), (Keys{"x", "y"}));
  EXPECT_EQ(keys_of(total.idle_semaphores), (Keys{"p", "q", "r"}));
  EXPECT_FALSE(total.truncated);
}

TEST(StatsMerge, ResultDoesNotDependOnMergeOrder) {
  // A lock and a limit-1 semaphore may share a key (separate namespaces, both listed as locks);
  // ties are broken on the other fields so the output is deterministic.
  const auto part_a = [] {
    StatsSnapshot part;
    part.locks = {lock("k", 5, 1, 0), lock("b")};
    part.idle_locks = {idle("i", 2)};
    return part;
  };
  const auto part_b = [] {
    StatsSnapshot part;
    part.locks = {lock("k", 9, 3, 1)};
    part.idle_locks = {idle("i", 1)};
    return part;
  };
  StatsSnapshot ab;
  merge_stats(ab, part_a(), 10);
  merge_stats(ab, part_b(), 10);
  StatsSnapshot ba;
  merge_stats(ba, part_b(), 10);
  merge_stats(ba, part_a(), 10);
  EXPECT_EQ(ab, ba);
  EXPECT_EQ(encode_stats_json(1, ab), encode_stats_json(1, ba));
}

TEST(StatsMerge, ArraysAreCutToEntriesMaxKeepingTheFirstKeys) {
  StatsSnapshot total;
  StatsSnapshot first;
  first.locks = {lock("d"), lock("b"), lock("f")};
  StatsSnapshot second;
  second.locks = {lock("a"), lock("e"), lock("c")};
  merge_stats(total, std::move(first), 4);
  EXPECT_FALSE(total.truncated);
  merge_stats(total, std::move(second), 4);
  EXPECT_EQ(keys_of(total.locks), (Keys{"a", "b", "c", "d"}));
  EXPECT_TRUE(total.truncated);
}

TEST(StatsMerge, EachArrayIsCutSeparately) {
  StatsSnapshot total;
  StatsSnapshot part;
  part.semaphores = {semaphore("a"), semaphore("b")};
  part.idle_semaphores = {idle("a"), idle("b"), idle("c")};
  merge_stats(total, std::move(part), 2);
  EXPECT_EQ(keys_of(total.semaphores), (Keys{"a", "b"}));
  EXPECT_EQ(keys_of(total.idle_semaphores), (Keys{"a", "b"}));
  EXPECT_TRUE(total.truncated);
}

TEST(StatsMerge, ExactlyEntriesMaxIsNotTruncated) {
  StatsSnapshot total;
  StatsSnapshot part;
  part.idle_locks = {idle("a"), idle("b")};
  merge_stats(total, std::move(part), 2);
  EXPECT_EQ(total.idle_locks.size(), 2u);
  EXPECT_FALSE(total.truncated);
}

TEST(StatsMerge, TruncationOfAPartCarriesOver) {
  StatsSnapshot total;
  StatsSnapshot part;
  part.truncated = true;  // the engine already cut its own list
  merge_stats(total, std::move(part), 100);
  EXPECT_TRUE(total.truncated);
  StatsSnapshot clean;
  merge_stats(total, std::move(clean), 100);
  EXPECT_TRUE(total.truncated);  // stays set
}

TEST(StatsMerge, AClusterStatusInAPartIsKept) {
  StatsSnapshot total;
  StatsSnapshot part;
  part.cluster = ClusterStatus{1, RaftRole::kLeader, 4, 1, "h:1", 9, 9, 0, 9, {1}};
  const ClusterStatus expected = *part.cluster;
  merge_stats(total, std::move(part), 100);
  ASSERT_TRUE(total.cluster);
  EXPECT_EQ(*total.cluster, expected);
  StatsSnapshot without;  // a part without one (a shard's engine) leaves it
  merge_stats(total, std::move(without), 100);
  EXPECT_EQ(total.cluster, expected);
}

TEST(StatsMerge, UnsortedTotalIsSortedFirst) {
  StatsSnapshot total;
  total.locks = {lock("z"), lock("a")};
  StatsSnapshot part;
  part.locks = {lock("m")};
  merge_stats(total, std::move(part), 100);
  EXPECT_EQ(keys_of(total.locks), (Keys{"a", "m", "z"}));
}

TEST(StatsMerge, ClassificationByLimitLeavesLimitOneInLocks) {
  // A limit-1 resource created with `sl` is reported by the engine as a LockStats: it shows
  // under "locks", with its holder, next to a lock of the same key.
  StatsSnapshot total;
  StatsSnapshot part;
  part.locks = {lock("k", 4, 2, 0), lock("k", 5, 7, 1)};
  part.semaphores = {semaphore("k", 2, 1, 0)};
  merge_stats(total, std::move(part), 10);
  const nlohmann::json json = nlohmann::json::parse(encode_stats_json(2, total));
  ASSERT_EQ(json["locks"].size(), 2u);
  EXPECT_EQ(json["locks"][0]["owner_conn_id"], 4);
  EXPECT_EQ(json["locks"][1]["owner_conn_id"], 5);
  ASSERT_EQ(json["semaphores"].size(), 1u);
  EXPECT_EQ(json["semaphores"][0]["limit"], 2);
}

TEST(StatsMergeDeathTest, LimitOneSemaphoreEntryIsAProgrammerError) {
  // Classification is the engine's job (a SemaphoreStats cannot carry the holder and lease a
  // lock entry shows), so a limit-1 semaphore entry reaching the merge is a bug.
  StatsSnapshot total;
  StatsSnapshot part;
  part.semaphores = {semaphore("k", 1, 1, 0)};
  EXPECT_DEATH(merge_stats(total, std::move(part), 10), "assertion failed");
}

}  // namespace
}  // namespace turnstile::core

namespace turnstile::core {
namespace {

// The Python and TypeScript dflockd clients reject reply lines over 1 MiB: a stats reply with
// many long keys is cut to fit, sorted prefix first, and marked truncated.
TEST(StatsJson, LongReplyIsCutBelowTheClientLineLimit) {
  StatsSnapshot snapshot;
  for (int i = 0; i < 10'000; ++i) {
    const std::string key = std::string(200, 'k') + std::to_string(100'000 + i);
    snapshot.locks.push_back(LockStats{key, SessionId{7}, 1.5, 0});
    snapshot.idle_semaphores.push_back(IdleStats{key, 2.5});
  }
  const std::string whole = encode_stats_json(1, snapshot, SIZE_MAX);
  ASSERT_GT(whole.size(), kStatsJsonBytesMax);
  const std::string json = encode_stats_json(1, snapshot);
  EXPECT_LE(json.size(), kStatsJsonBytesMax);
  const auto parsed = nlohmann::json::parse(json);
  EXPECT_TRUE(parsed["truncated"].get<bool>());
  ASSERT_FALSE(parsed["locks"].empty());
  EXPECT_EQ(parsed["locks"][0]["key"], snapshot.locks[0].key);  // the first keys are kept
  EXPECT_EQ(nlohmann::json::parse(whole)["truncated"].get<bool>(), false);
}

TEST(StatsJson, ShortReplyIsUntouchedByTheLimit) {
  StatsSnapshot snapshot;
  snapshot.locks.push_back(LockStats{"a", SessionId{1}, 1.0, 2});
  EXPECT_EQ(encode_stats_json(1, snapshot), encode_stats_json(1, snapshot, SIZE_MAX));
}

}  // namespace
}  // namespace turnstile::core
