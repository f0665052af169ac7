// The client library against a real turnstiled on loopback: every call and every typed error,
// TLS and auth, IPv6, placement over two servers, the RAII guards' renewal, release and loss,
// read-write locks (readers share, a writer waits for them, a token only in its own mode), the
// fence check and inspect, and lost-notify (pushes between a request and its reply, on an idle
// connection, and a force-released guard told at once).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "client/cluster.h"
#include "client/connection.h"
#include "client/guard.h"
#include "client/placement.h"
#include "tests/integration/harness.h"

namespace turnstile::client {
namespace {

using integration::CertificateFiles;
using integration::Daemon;
using integration::DaemonOptions;
using integration::eventually;
using integration::TempDir;
using integration::unused_loopback_port;
using integration::write_self_signed_certificate;
using namespace std::chrono_literals;
using Json = nlohmann::json;

Endpoint local(const Daemon& daemon) {
  return Endpoint{"127.0.0.1", static_cast<std::uint16_t>(daemon.port())};
}

Connection connect_or_die(const Endpoint& endpoint, const ConnectOptions& options = {}) {
  auto connection = Connection::connect(endpoint, options);
  if (!connection) throw std::runtime_error("connect: " + connection.error().to_string());
  return std::move(*connection);
}

template <typename T>
ErrorCode code_of(const Result<T>& result) {
  EXPECT_FALSE(result.ok());
  return result.ok() ? ErrorCode::kIo : result.error().code;
}

GuardOptions options_with(Seconds timeout, Seconds lease = 0s) {
  GuardOptions options;
  options.timeout = timeout;
  options.lease = lease;
  return options;
}

// The stats entry of `key` in the server's `array` ("locks", "semaphores" or "rw_locks", which
// is absent while there are none), read over a connection of its own; null when there is none.
Json stats_entry(const Daemon& daemon, const std::string& array, const std::string& key) {
  Connection observer = connect_or_die(local(daemon));
  auto stats = observer.stats();
  if (!stats) return Json();
  const Json parsed = Json::parse(stats->json);  // kept alive: the loop reads into it
  if (!parsed.contains(array)) return Json();
  for (const Json& entry : parsed[array]) {
    if (entry["key"] == key) return entry;
  }
  return Json();
}

// Waits until the server has `waiters` waiters queued on lock `key`.
bool lock_waiters_reach(const Daemon& daemon, const std::string& key, std::int64_t waiters) {
  return eventually(
      [&] {
        const Json entry = stats_entry(daemon, "locks", key);
        return !entry.is_null() && entry["waiters"] == waiters;
      },
      10s);
}

// Waits until the server shows read-write lock `key` with `readers` readers and `waiters` queued.
bool rw_lock_reaches(const Daemon& daemon, const std::string& key, std::int64_t readers,
                     std::int64_t waiters) {
  return eventually(
      [&] {
        const Json entry = stats_entry(daemon, "rw_locks", key);
        return !entry.is_null() && entry["readers"] == readers && entry["waiters"] == waiters;
      },
      10s);
}

// Counts a guard's successful renewals (GuardOptions::on_renewed), from its renewal thread.
struct RenewalCounter {
  std::atomic<int> count{0};
  std::function<void(Seconds)> callback() {
    return [this](Seconds) { ++count; };
  }
  // Waits for `n` renewals in all.
  bool reach(int n, std::chrono::milliseconds timeout = 20s) {
    return eventually([&] { return count.load() >= n; }, timeout);
  }
};

TEST(ClientConnection, PingAndStats) {
  Daemon daemon;
  Connection connection = connect_or_die(local(daemon));
  EXPECT_TRUE(connection.is_open());
  EXPECT_TRUE(connection.ping().ok());
  auto held = connection.lock("stats-key", 0s, 20s);
  ASSERT_TRUE(held.ok());
  auto stats = connection.stats();
  ASSERT_TRUE(stats.ok()) << stats.error().to_string();
  const Json json = Json::parse(stats->json);
  ASSERT_EQ(json["locks"].size(), 1U);
  EXPECT_EQ(json["locks"][0]["key"], "stats-key");
}

TEST(ClientConnection, LockRenewReleaseAndFences) {
  Daemon daemon;
  Connection a = connect_or_die(local(daemon));
  Connection b = connect_or_die(local(daemon));
  auto first = a.lock("k", 0s, 7s);
  ASSERT_TRUE(first.ok()) << first.error().to_string();
  EXPECT_EQ(first->lease, 7s);
  EXPECT_EQ(first->fence(), first->token.fence.value);
  EXPECT_EQ(code_of(b.lock("k", 0s)), ErrorCode::kTimeout);  // held: try once
  auto renewed = a.renew("k", first->token, 11s);
  ASSERT_TRUE(renewed.ok());
  EXPECT_EQ(*renewed, 11s);
  auto default_renew = a.renew("k", first->token);
  ASSERT_TRUE(default_renew.ok());
  EXPECT_EQ(*default_renew, 33s);  // the server's default lease
  EXPECT_TRUE(a.release("k", first->token).ok());
  // A token that matches no holder: plain `error`.
  EXPECT_EQ(code_of(a.release("k", first->token)), ErrorCode::kProtocol);
  EXPECT_EQ(code_of(a.renew("k", first->token)), ErrorCode::kProtocol);
  auto second = b.lock("k", 0s);
  ASSERT_TRUE(second.ok());
  EXPECT_GT(second->fence(), first->fence());
  EXPECT_EQ(second->lease, 33s);
}

TEST(ClientConnection, BlockingLockWaitsForTheRelease) {
  Daemon daemon;
  Connection a = connect_or_die(local(daemon));
  auto held = a.lock("k", 0s);
  ASSERT_TRUE(held.ok());
  std::thread releaser([&] {
    EXPECT_TRUE(lock_waiters_reach(daemon, "k", 1));  // b is queued
    EXPECT_TRUE(a.release("k", held->token).ok());
  });
  Connection b = connect_or_die(local(daemon));
  auto waited = b.lock("k", 30s);
  releaser.join();
  ASSERT_TRUE(waited.ok()) << waited.error().to_string();
  EXPECT_GT(waited->fence(), held->fence());
  // A real timeout: held by b, a waits 1 s.
  EXPECT_EQ(code_of(a.lock("k", 1s)), ErrorCode::kTimeout);
}

TEST(ClientConnection, Semaphores) {
  Daemon daemon;
  Connection a = connect_or_die(local(daemon));
  Connection b = connect_or_die(local(daemon));
  auto one = a.sem_lock("s", 0s, 2, 9s);
  auto two = b.sem_lock("s", 0s, 2);
  ASSERT_TRUE(one.ok());
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(one->lease, 9s);
  EXPECT_EQ(code_of(a.sem_lock("s", 0s, 2)), ErrorCode::kTimeout);
  EXPECT_EQ(code_of(a.sem_lock("s", 0s, 3)), ErrorCode::kLimitMismatch);
  auto renewed = a.sem_renew("s", one->token, 5s);
  ASSERT_TRUE(renewed.ok());
  EXPECT_EQ(*renewed, 5s);
  EXPECT_TRUE(a.sem_release("s", one->token).ok());
  EXPECT_EQ(code_of(a.sem_release("s", one->token)), ErrorCode::kProtocol);
  // The lock namespace is separate: the same key is free there.
  EXPECT_TRUE(a.lock("s", 0s).ok());
}

TEST(ClientConnection, TwoPhaseAndItsErrors) {
  Daemon daemon;
  Connection a = connect_or_die(local(daemon));
  Connection b = connect_or_die(local(daemon));
  auto acquired = a.enqueue("k", 20s);
  ASSERT_TRUE(acquired.ok());
  ASSERT_TRUE(acquired->acquired.has_value());
  EXPECT_EQ(acquired->acquired->lease, 20s);
  EXPECT_EQ(code_of(a.enqueue("k")), ErrorCode::kAlreadyEnqueued);
  auto queued = b.enqueue("k");
  ASSERT_TRUE(queued.ok());
  EXPECT_FALSE(queued->acquired.has_value());
  auto mine = a.wait("k", 5s);
  ASSERT_TRUE(mine.ok());
  EXPECT_EQ(mine->token, acquired->acquired->token);
  std::thread releaser([&] {
    EXPECT_TRUE(lock_waiters_reach(daemon, "k", 1));  // b's wait is parked
    EXPECT_TRUE(a.release("k", mine->token).ok());
  });
  auto theirs = b.wait("k", 30s);
  releaser.join();
  ASSERT_TRUE(theirs.ok()) << theirs.error().to_string();
  EXPECT_GT(theirs->fence(), mine->fence());
  EXPECT_EQ(code_of(b.wait("k", 1s)), ErrorCode::kNotEnqueued);
  // Semaphore two-phase: acquired at once, then a timeout for a queued waiter.
  auto slot = a.sem_enqueue("s", 1);
  ASSERT_TRUE(slot.ok());
  ASSERT_TRUE(slot->acquired.has_value());
  EXPECT_EQ(code_of(a.sem_enqueue("s", 2)), ErrorCode::kAlreadyEnqueued);
  EXPECT_EQ(code_of(b.sem_enqueue("s", 2)), ErrorCode::kLimitMismatch);
  auto queued_slot = b.sem_enqueue("s", 1);
  ASSERT_TRUE(queued_slot.ok());
  EXPECT_FALSE(queued_slot->acquired.has_value());
  EXPECT_EQ(code_of(b.sem_wait("s", 0s)), ErrorCode::kTimeout);
  EXPECT_EQ(code_of(b.sem_wait("s", 0s)), ErrorCode::kNotEnqueued);
  EXPECT_TRUE(a.sem_wait("s", 1s).ok());
}

TEST(ClientConnection, LeaseExpiredBeforeWait) {
  Daemon daemon;
  Connection a = connect_or_die(local(daemon));
  auto acquired = a.enqueue("k", 1s);
  ASSERT_TRUE(acquired.ok());
  ASSERT_TRUE(acquired->acquired.has_value());
  // The lease ends on the server: the lock has no holder any more.
  ASSERT_TRUE(eventually(
      [&] {
        const Json entry = stats_entry(daemon, "locks", "k");
        return entry.is_null() || entry["owner_conn_id"] == 0;
      },
      10s));
  EXPECT_EQ(code_of(a.wait("k", 1s)), ErrorCode::kLeaseExpired);
}

TEST(ClientConnection, MaxLocksAndMaxWaiters) {
  Daemon daemon({"--max-locks", "1", "--max-waiters", "1"});
  Connection a = connect_or_die(local(daemon));
  Connection b = connect_or_die(local(daemon));
  Connection c = connect_or_die(local(daemon));
  auto held = a.lock("only", 0s);
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(code_of(a.lock("another", 0s)), ErrorCode::kMaxLocks);
  auto queued = b.enqueue("only");
  ASSERT_TRUE(queued.ok());
  EXPECT_EQ(code_of(c.lock("only", 5s)), ErrorCode::kMaxWaiters);
}

TEST(ClientConnection, InvalidArgumentsAreRefusedBeforeSending) {
  Daemon daemon;
  Connection connection = connect_or_die(local(daemon));
  EXPECT_EQ(code_of(connection.lock("a\nr\nvictim", 0s)), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(connection.lock("", 0s)), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(connection.lock(std::string(257, 'k'), 0s)), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(connection.lock("k", -1s)), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(connection.lock("k", 0s, -5s)), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(connection.sem_lock("k", 0s, 0)), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(connection.sem_enqueue("k", 1'048'577)), ErrorCode::kInvalidArgument);
  // Nothing was sent: the connection is in step and the longest key works.
  EXPECT_TRUE(connection.ping().ok());
  EXPECT_TRUE(connection.lock(std::string(256, 'k'), 0s).ok());
}

// --- read-write locks

TEST(ClientRwConnection, ReadersShareAndAWriterWaitsForThemAll) {
  Daemon daemon;
  Connection a = connect_or_die(local(daemon));
  Connection b = connect_or_die(local(daemon));
  Connection c = connect_or_die(local(daemon));
  Connection d = connect_or_die(local(daemon));
  auto first = a.rw_lock("doc", RwMode::kRead, 0s, 20s);
  auto second = b.rw_lock("doc", RwMode::kRead, 0s);
  ASSERT_TRUE(first.ok()) << first.error().to_string();
  ASSERT_TRUE(second.ok()) << second.error().to_string();  // readers share: granted at once
  EXPECT_EQ(first->lease, 20s);
  EXPECT_NE(first->token, second->token);
  EXPECT_EQ(stats_entry(daemon, "rw_locks", "doc")["readers"], 2);
  EXPECT_EQ(code_of(c.rw_lock("doc", RwMode::kWrite, 0s)), ErrorCode::kTimeout);
  // Read-write locks are a key space of their own: the lock "doc" is free.
  EXPECT_TRUE(d.lock("doc", 0s).ok());

  std::atomic<bool> written{false};
  std::optional<Result<Grant>> writer;
  std::thread writing([&] {
    writer.emplace(c.rw_lock("doc", RwMode::kWrite, 30s));
    written = true;
  });
  ASSERT_TRUE(rw_lock_reaches(daemon, "doc", 2, 1));
  // A queued writer keeps a later reader out: no reader overtakes it.
  EXPECT_EQ(code_of(d.rw_lock("doc", RwMode::kRead, 0s)), ErrorCode::kTimeout);
  EXPECT_TRUE(a.rw_release("doc", RwMode::kRead, first->token).ok());
  // One reader still holds it: the writer still waits.
  EXPECT_TRUE(rw_lock_reaches(daemon, "doc", 1, 1));
  EXPECT_FALSE(written.load());
  EXPECT_TRUE(b.rw_release("doc", RwMode::kRead, second->token).ok());
  writing.join();
  ASSERT_TRUE(writer->ok()) << writer->error().to_string();
  EXPECT_GT((*writer)->fence(), first->fence());
  EXPECT_GT((*writer)->fence(), second->fence());
  // The writer holds it alone: neither a reader nor another writer gets in.
  EXPECT_EQ(code_of(a.rw_lock("doc", RwMode::kRead, 0s)), ErrorCode::kTimeout);
  EXPECT_EQ(code_of(b.rw_lock("doc", RwMode::kWrite, 0s)), ErrorCode::kTimeout);
  auto renewed = c.rw_renew("doc", RwMode::kWrite, (*writer)->token, 9s);
  ASSERT_TRUE(renewed.ok()) << renewed.error().to_string();
  EXPECT_EQ(*renewed, 9s);
  EXPECT_TRUE(c.rw_release("doc", RwMode::kWrite, (*writer)->token).ok());
  EXPECT_TRUE(a.rw_lock("doc", RwMode::kRead, 0s).ok());
}

TEST(ClientRwConnection, ATokenIsReleasedAndRenewedOnlyInItsOwnMode) {
  Daemon daemon;
  Connection a = connect_or_die(local(daemon));
  Connection b = connect_or_die(local(daemon));
  auto read = a.rw_lock("k", RwMode::kRead, 0s);
  ASSERT_TRUE(read.ok()) << read.error().to_string();
  EXPECT_EQ(code_of(a.rw_release("k", RwMode::kWrite, read->token)), ErrorCode::kProtocol);
  EXPECT_EQ(code_of(a.rw_renew("k", RwMode::kWrite, read->token)), ErrorCode::kProtocol);
  EXPECT_EQ(code_of(a.release("k", read->token)), ErrorCode::kProtocol);  // the lock namespace
  // The refused releases changed nothing: still read-held.
  EXPECT_EQ(code_of(b.rw_lock("k", RwMode::kWrite, 0s)), ErrorCode::kTimeout);
  auto renewed = a.rw_renew("k", RwMode::kRead, read->token, 12s);
  ASSERT_TRUE(renewed.ok()) << renewed.error().to_string();
  EXPECT_EQ(*renewed, 12s);
  EXPECT_TRUE(a.rw_release("k", RwMode::kRead, read->token).ok());
  EXPECT_EQ(code_of(a.rw_release("k", RwMode::kRead, read->token)), ErrorCode::kProtocol);

  auto write = b.rw_lock("k", RwMode::kWrite, 0s);
  ASSERT_TRUE(write.ok()) << write.error().to_string();
  EXPECT_EQ(code_of(b.rw_release("k", RwMode::kRead, write->token)), ErrorCode::kProtocol);
  EXPECT_EQ(code_of(b.rw_renew("k", RwMode::kRead, write->token)), ErrorCode::kProtocol);
  EXPECT_EQ(code_of(a.rw_lock("k", RwMode::kRead, 0s)), ErrorCode::kTimeout);
  EXPECT_TRUE(b.rw_release("k", RwMode::kWrite, write->token).ok());
  EXPECT_TRUE(a.rw_lock("k", RwMode::kRead, 0s).ok());

  // Refused before sending; the connection stays in step.
  EXPECT_EQ(code_of(a.rw_lock("a b", RwMode::kRead, 0s)), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(a.rw_lock("k", RwMode::kWrite, -1s)), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(a.rw_enqueue("k", RwMode::kRead, -1s)), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(a.rw_wait("", RwMode::kRead, 0s)), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(a.ping().ok());
}

TEST(ClientRwConnection, TwoPhaseWaitsOnlyInTheModeItEnqueued) {
  Daemon daemon;
  Connection a = connect_or_die(local(daemon));
  Connection b = connect_or_die(local(daemon));
  auto enqueued = a.rw_enqueue("k", RwMode::kRead, 15s);
  ASSERT_TRUE(enqueued.ok()) << enqueued.error().to_string();
  ASSERT_TRUE(enqueued->acquired.has_value());
  EXPECT_EQ(enqueued->acquired->lease, 15s);
  EXPECT_EQ(code_of(a.rw_wait("k", RwMode::kWrite, 1s)), ErrorCode::kNotEnqueued);
  auto mine = a.rw_wait("k", RwMode::kRead, 1s);
  ASSERT_TRUE(mine.ok()) << mine.error().to_string();
  EXPECT_EQ(mine->token, enqueued->acquired->token);
  auto queued = b.rw_enqueue("k", RwMode::kWrite);
  ASSERT_TRUE(queued.ok()) << queued.error().to_string();
  EXPECT_FALSE(queued->acquired.has_value());
  EXPECT_EQ(code_of(b.rw_wait("k", RwMode::kWrite, 0s)), ErrorCode::kTimeout);
  EXPECT_EQ(code_of(b.rw_wait("k", RwMode::kWrite, 0s)), ErrorCode::kNotEnqueued);
}

TEST(ClientConnection, ConnectFailures) {
  auto refused = Connection::connect(Endpoint{"127.0.0.1", unused_loopback_port()});
  EXPECT_EQ(code_of(refused), ErrorCode::kConnect);
  auto unresolvable = Connection::connect(Endpoint{"no-such-host.invalid", 6388});
  EXPECT_EQ(code_of(unresolvable), ErrorCode::kConnect);
  Connection never_opened;
  EXPECT_FALSE(never_opened.is_open());
  EXPECT_EQ(code_of(never_opened.ping()), ErrorCode::kIo);
}

TEST(ClientConnection, Ipv6Literal) {
  DaemonOptions options;
  options.host = "::1";
  options.wait_until_listening = false;
  Daemon daemon(options);
  if (!daemon.wait_listening(10s)) GTEST_SKIP() << "no IPv6 loopback here";
  auto endpoint = parse_endpoint("[::1]:" + std::to_string(daemon.port()));
  ASSERT_TRUE(endpoint.ok());
  Connection connection = connect_or_die(*endpoint);
  EXPECT_TRUE(connection.lock("v6", 0s).ok());
}

TEST(ClientConnection, Auth) {
  Daemon daemon({"--auth-token", "s3cret"});
  ConnectOptions right;
  right.auth_token = "s3cret";
  Connection connection = connect_or_die(local(daemon), right);
  EXPECT_TRUE(connection.ping().ok());
  ConnectOptions wrong;
  wrong.auth_token = "guess";
  EXPECT_EQ(code_of(Connection::connect(local(daemon), wrong)), ErrorCode::kAuth);
  // No token: the first request is refused with error_auth, and the connection closes.
  Connection anonymous = connect_or_die(local(daemon));
  EXPECT_EQ(code_of(anonymous.ping()), ErrorCode::kAuth);
  EXPECT_FALSE(anonymous.is_open());
  ConnectOptions injected;
  injected.auth_token = "a\nping";
  EXPECT_EQ(code_of(Connection::connect(local(daemon), injected)), ErrorCode::kInvalidArgument);
}

TEST(ClientConnection, TlsVerifiesTheCertificateAndName) {
  TempDir dir;
  const CertificateFiles files = write_self_signed_certificate(dir.path(), "localhost");
  Daemon daemon({"--tls-cert", files.certificate_path, "--tls-key", files.key_path});
  ASSERT_TRUE(daemon.tls());
  ConnectOptions trusted;
  trusted.tls = TlsOptions{files.certificate_path, "localhost"};
  Connection connection = connect_or_die(local(daemon), trusted);
  auto grant = connection.lock("tls-key", 0s);
  ASSERT_TRUE(grant.ok());
  EXPECT_TRUE(connection.release("tls-key", grant->token).ok());
  auto stats = connection.stats();
  EXPECT_TRUE(stats.ok());

  ConnectOptions wrong_name = trusted;
  wrong_name.tls->server_name = "elsewhere.example";
  EXPECT_EQ(code_of(Connection::connect(local(daemon), wrong_name)), ErrorCode::kTls);
  ConnectOptions ip_name = trusted;
  ip_name.tls->server_name = "";  // 127.0.0.1: the certificate has no IP SAN
  EXPECT_EQ(code_of(Connection::connect(local(daemon), ip_name)), ErrorCode::kTls);
  ConnectOptions untrusted;
  untrusted.tls = TlsOptions{"", "localhost"};  // the system store does not know our CA
  EXPECT_EQ(code_of(Connection::connect(local(daemon), untrusted)), ErrorCode::kTls);
  // A plain client against the TLS listener gets no reply it understands.
  ConnectOptions plain;
  plain.reply_timeout = 2s;
  auto plain_connection = Connection::connect(local(daemon), plain);
  if (plain_connection.ok()) {
    EXPECT_FALSE(plain_connection->ping().ok());
  }
}

TEST(ClientConnection, DrainingIsReported) {
  auto daemon = std::make_unique<Daemon>();
  Connection connection = connect_or_die(local(*daemon));
  ASSERT_TRUE(connection.ping().ok());
  daemon->signal(SIGTERM);
  ASSERT_TRUE(daemon->wait_exit(10s).has_value());
  const auto result = connection.ping();
  EXPECT_EQ(code_of(result), ErrorCode::kDraining) << result.error().to_string();
  EXPECT_FALSE(connection.is_open());
  EXPECT_EQ(code_of(connection.ping()), ErrorCode::kIo);
}

TEST(ClientCluster, KeysGoToTheirCrc32Server) {
  Daemon first;
  Daemon second;
  Cluster cluster({local(first), local(second)});
  // From zlib.crc32: "a" -> 1, "hello" -> 0, "build-job" -> 1, "nightly" -> 0 (mod 2).
  const std::vector<std::pair<std::string, std::size_t>> placed = {
      {"a", 1}, {"hello", 0}, {"build-job", 1}, {"nightly", 0}};
  std::vector<Lock> held;
  for (const auto& [key, index] : placed) {
    EXPECT_EQ(cluster.server_for(key), cluster.servers()[index]) << key;
    auto lock = cluster.lock(key, options_with(0s));
    ASSERT_TRUE(lock.ok()) << lock.error().to_string();
    EXPECT_EQ(lock->endpoint(), cluster.servers()[index]);
    held.push_back(std::move(*lock));
  }
  for (std::size_t index = 0; index < 2; ++index) {
    Connection observer = connect_or_die(cluster.servers()[index]);
    const Json stats = Json::parse(observer.stats()->json);
    std::vector<std::string> keys;
    for (const Json& entry : stats["locks"]) keys.push_back(entry["key"]);
    std::vector<std::string> expected;
    for (const auto& [key, where] : placed) {
      if (where == index) expected.push_back(key);
    }
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(keys, expected) << "server " << index;
  }
  EXPECT_EQ(code_of(cluster.lock("bad key")), ErrorCode::kInvalidArgument);
}

// --- guards -----------------------------------------------------------------------------------

TEST(ClientLockGuard, RenewalKeepsAShortLeaseAlive) {
  Daemon daemon;
  std::atomic<int> losses{0};
  RenewalCounter renewals;
  GuardOptions options;
  options.lease = 1s;
  options.on_lost = [&](const LossEvent&) { ++losses; };
  options.on_renewed = renewals.callback();
  const auto acquired_at = std::chrono::steady_clock::now();
  auto lock = Lock::acquire(connect_or_die(local(daemon)), "renewed", options);
  ASSERT_TRUE(lock.ok()) << lock.error().to_string();
  EXPECT_EQ(lock->lease(), 1s);
  EXPECT_EQ(lock->token_string().size(), 32U);
  Connection other = connect_or_die(local(daemon));
  // Renewed at about half the lease: after four renewals the first lease has ended twice over,
  // and the lock is still held, on the server too.
  for (int i = 1; i <= 4; ++i) {
    ASSERT_TRUE(renewals.reach(i)) << "renewal " << i;
    EXPECT_TRUE(lock->held());
    EXPECT_EQ(code_of(other.lock("renewed", 0s)), ErrorCode::kTimeout) << "after renewal " << i;
  }
  EXPECT_GE(std::chrono::steady_clock::now() - acquired_at, 1500ms);
  EXPECT_EQ(losses.load(), 0);
  const std::uint64_t fence = lock->fence();
  EXPECT_TRUE(lock->release().ok());
  EXPECT_EQ(lock->state(), GuardState::kReleased);
  EXPECT_TRUE(lock->release().ok());  // idempotent
  auto next = other.lock("renewed", 0s);
  ASSERT_TRUE(next.ok());
  EXPECT_GT(next->fence(), fence);
}

TEST(ClientLockGuard, ReleasesOnDestruction) {
  Daemon daemon;
  Connection other = connect_or_die(local(daemon));
  {
    auto lock = Lock::acquire(connect_or_die(local(daemon)), "scoped");
    ASSERT_TRUE(lock.ok());
    EXPECT_EQ(code_of(other.lock("scoped", 0s)), ErrorCode::kTimeout);
    Lock moved = std::move(*lock);  // the moved-to guard owns the lock now
    EXPECT_TRUE(moved.held());
  }
  EXPECT_TRUE(other.lock("scoped", 0s).ok());
}

TEST(ClientLockGuard, AcquireTimesOut) {
  Daemon daemon;
  Connection holder = connect_or_die(local(daemon));
  ASSERT_TRUE(holder.lock("busy", 0s).ok());
  const auto started = std::chrono::steady_clock::now();
  auto lock = Lock::acquire(connect_or_die(local(daemon)), "busy", options_with(1s));
  EXPECT_EQ(code_of(lock), ErrorCode::kTimeout);
  EXPECT_GE(std::chrono::steady_clock::now() - started, 900ms);
  GuardOptions bad;
  bad.renew_ratio = 1.5;
  EXPECT_EQ(code_of(Lock::acquire(connect_or_die(local(daemon)), "x", bad)),
            ErrorCode::kInvalidArgument);
}

struct LossRecorder {
  std::mutex mutex;
  std::vector<LossEvent> events;
  std::function<void(const LossEvent&)> callback() {
    return [this](const LossEvent& event) {
      std::lock_guard lock(mutex);
      events.push_back(event);
    };
  }
  std::size_t count() {
    std::lock_guard lock(mutex);
    return events.size();
  }
  LossEvent first() {
    std::lock_guard lock(mutex);
    return events.front();
  }
};

TEST(ClientLockGuard, ServerRestartFiresTheCallback) {
  auto daemon = std::make_unique<Daemon>();
  LossRecorder recorder;
  GuardOptions options;
  options.lease = 2s;
  options.on_lost = recorder.callback();
  auto lock = Lock::acquire(connect_or_die(local(*daemon)), "restart", options);
  ASSERT_TRUE(lock.ok());
  daemon.reset();  // SIGTERM: the server drains and closes the connection
  daemon = std::make_unique<Daemon>();
  ASSERT_TRUE(eventually([&] { return recorder.count() > 0; }, 15s));
  EXPECT_EQ(lock->state(), GuardState::kLost);
  ASSERT_TRUE(lock->loss().has_value());
  EXPECT_EQ(lock->loss()->reason, LossReason::kConnectionFailed);
  // release() stops the renewal thread: after it, no callback can come, and there was one.
  EXPECT_EQ(lock->release().error().code, ErrorCode::kLeaseExpired);
  EXPECT_EQ(recorder.count(), 1U);
}

TEST(ClientLockGuard, StalledServerExpiresTheLease) {
  Daemon daemon;
  LossRecorder recorder;
  GuardOptions options;
  options.lease = 2s;
  options.on_lost = recorder.callback();
  auto lock = Lock::acquire(connect_or_die(local(daemon)), "stalled", options);
  ASSERT_TRUE(lock.ok());
  daemon.signal(SIGSTOP);  // renewals get no reply: the local lease deadline passes
  const bool lost = eventually([&] { return recorder.count() > 0; }, 15s);
  daemon.signal(SIGCONT);
  ASSERT_TRUE(lost);
  EXPECT_EQ(recorder.first().reason, LossReason::kLeaseExpired);
  EXPECT_FALSE(lock->held());
  // The server agrees: the lock is free again.
  Connection other = connect_or_die(local(daemon));
  EXPECT_TRUE(other.lock("stalled", 10s).ok());
}

TEST(ClientLockGuard, WithoutRenewalTheLeaseEndsAndIsReported) {
  Daemon daemon;
  LossRecorder recorder;
  GuardOptions options;
  options.lease = 1s;
  options.renew = false;
  // Without the server's push: with it, the push of the server's own expiry and the local
  // deadline (counted from the grant's arrival) race, and either may be reported first.
  options.lost_notify = false;
  options.on_lost = recorder.callback();
  auto lock = Lock::acquire(connect_or_die(local(daemon)), "unrenewed", options);
  ASSERT_TRUE(lock.ok());
  ASSERT_TRUE(eventually([&] { return recorder.count() > 0; }, 10s));
  EXPECT_EQ(recorder.first().reason, LossReason::kLeaseExpired);
  EXPECT_EQ(lock->state(), GuardState::kLost);
}

TEST(ClientLockGuard, RefusedRenewalIsALoss) {
  Daemon daemon;
  LossRecorder recorder;
  GuardOptions options;
  options.lease = 2s;
  options.on_lost = recorder.callback();
  auto lock = Lock::acquire(connect_or_die(local(daemon)), "stolen", options);
  ASSERT_TRUE(lock.ok());
  // Anyone holding the token may release: the next renewal finds no holder.
  Connection other = connect_or_die(local(daemon));
  ASSERT_TRUE(other.release("stolen", lock->token()).ok());
  ASSERT_TRUE(eventually([&] { return recorder.count() > 0; }, 10s));
  EXPECT_EQ(recorder.first().reason, LossReason::kRenewRefused);
  EXPECT_EQ(recorder.first().error.code, ErrorCode::kProtocol);
}

TEST(ClientSemaphoreGuard, SlotsAreLimited) {
  Daemon daemon;
  RenewalCounter first_renewals;
  RenewalCounter second_renewals;
  GuardOptions options;
  options.timeout = 0s;
  options.lease = 1s;
  options.on_renewed = first_renewals.callback();
  auto one = Semaphore::acquire(connect_or_die(local(daemon)), "pool", 2, options);
  options.on_renewed = second_renewals.callback();
  auto two = Semaphore::acquire(connect_or_die(local(daemon)), "pool", 2, options);
  ASSERT_TRUE(one.ok());
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(one->limit(), 2);
  options.on_renewed = nullptr;
  EXPECT_EQ(code_of(Semaphore::acquire(connect_or_die(local(daemon)), "pool", 2, options)),
            ErrorCode::kTimeout);
  // Renewed past two leases, both slots.
  ASSERT_TRUE(first_renewals.reach(4));
  ASSERT_TRUE(second_renewals.reach(4));
  EXPECT_TRUE(one->held());
  EXPECT_TRUE(two->held());
  EXPECT_EQ(code_of(Semaphore::acquire(connect_or_die(local(daemon)), "pool", 2, options)),
            ErrorCode::kTimeout);
  EXPECT_TRUE(one->release().ok());
  auto three = Semaphore::acquire(connect_or_die(local(daemon)), "pool", 2, options);
  EXPECT_TRUE(three.ok());
}

TEST(ClientTwoPhaseGuard, EnqueueThenWait) {
  Daemon daemon;
  RenewalCounter renewals;
  GuardOptions renewed = options_with(10s, 1s);
  renewed.on_renewed = renewals.callback();
  auto first = Lock::enqueue(connect_or_die(local(daemon)), "tp", renewed);
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(first->acquired());
  auto second = Lock::enqueue(connect_or_die(local(daemon)), "tp", options_with(10s, 2s));
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(second->acquired());
  auto held = first->wait(5s);
  ASSERT_TRUE(held.ok()) << held.error().to_string();
  EXPECT_EQ(code_of(first->wait(1s)), ErrorCode::kNotEnqueued);  // spent
  // Renewal runs for the two-phase grant too: renewed past its 1 s lease, still held.
  ASSERT_TRUE(renewals.reach(3));
  EXPECT_TRUE(held->held());
  EXPECT_EQ(stats_entry(daemon, "locks", "tp")["owner_conn_id"] != 0, true);
  const std::uint64_t fence = held->fence();
  std::thread releaser([&] {
    EXPECT_TRUE(lock_waiters_reach(daemon, "tp", 1));  // second's wait is parked
    EXPECT_TRUE(held->release().ok());
  });
  auto next = second->wait(30s);
  releaser.join();
  ASSERT_TRUE(next.ok()) << next.error().to_string();
  EXPECT_GT(next->fence(), fence);

  auto semaphore = Semaphore::enqueue(connect_or_die(local(daemon)), "tps", 1, {});
  ASSERT_TRUE(semaphore.ok());
  ASSERT_TRUE(semaphore->acquired());
  auto queued = Semaphore::enqueue(connect_or_die(local(daemon)), "tps", 1, {});
  ASSERT_TRUE(queued.ok());
  EXPECT_EQ(code_of(queued->wait(0s)), ErrorCode::kTimeout);
  auto slot = semaphore->wait(1s);
  ASSERT_TRUE(slot.ok());
  EXPECT_EQ(slot->limit(), 1);
}

TEST(ClientRwLockGuard, ReadersShareAndRenewThenAWriterTakesIt) {
  Daemon daemon;
  const Cluster cluster({local(daemon)});
  RenewalCounter first_renewals;
  RenewalCounter second_renewals;
  GuardOptions options = options_with(0s, 1s);
  options.on_renewed = first_renewals.callback();
  auto one = cluster.rw_lock("catalog", RwMode::kRead, options);
  options.on_renewed = second_renewals.callback();
  auto two = RwLock::acquire(connect_or_die(local(daemon)), "catalog", RwMode::kRead, options);
  ASSERT_TRUE(one.ok()) << one.error().to_string();
  ASSERT_TRUE(two.ok()) << two.error().to_string();
  EXPECT_EQ(one->mode(), RwMode::kRead);
  EXPECT_EQ(one->lease(), 1s);
  Connection other = connect_or_die(local(daemon));
  // Both renewed past several leases, and both still hold: a writer cannot get in.
  for (int i = 1; i <= 3; ++i) {
    ASSERT_TRUE(first_renewals.reach(i)) << "renewal " << i;
    ASSERT_TRUE(second_renewals.reach(i)) << "renewal " << i;
    EXPECT_TRUE(one->held());
    EXPECT_TRUE(two->held());
    EXPECT_EQ(code_of(other.rw_lock("catalog", RwMode::kWrite, 0s)), ErrorCode::kTimeout);
  }
  EXPECT_EQ(stats_entry(daemon, "rw_locks", "catalog")["readers"], 2);
  EXPECT_TRUE(one->release().ok());
  EXPECT_EQ(one->state(), GuardState::kReleased);
  EXPECT_EQ(stats_entry(daemon, "rw_locks", "catalog")["readers"], 1);
  EXPECT_EQ(code_of(other.rw_lock("catalog", RwMode::kWrite, 0s)), ErrorCode::kTimeout);
  const std::uint64_t fence = std::max(one->fence(), two->fence());
  EXPECT_TRUE(two->release().ok());
  auto writer = RwLock::acquire(connect_or_die(local(daemon)), "catalog", RwMode::kWrite,
                                options_with(0s, 1s));
  ASSERT_TRUE(writer.ok()) << writer.error().to_string();
  EXPECT_EQ(writer->mode(), RwMode::kWrite);
  EXPECT_GT(writer->fence(), fence);
  EXPECT_EQ(code_of(cluster.rw_lock("catalog", RwMode::kRead, options_with(0s))),
            ErrorCode::kTimeout);
  EXPECT_EQ(code_of(cluster.rw_lock("bad key", RwMode::kRead)), ErrorCode::kInvalidArgument);
}

TEST(ClientRwLockGuard, ReleasesOnDestruction) {
  // Without auto-release, only the guard's own `wr` can free the key.
  Daemon daemon({"--auto-release-on-disconnect=false"});
  Connection other = connect_or_die(local(daemon));
  {
    auto writer = RwLock::acquire(connect_or_die(local(daemon)), "scoped", RwMode::kWrite);
    ASSERT_TRUE(writer.ok()) << writer.error().to_string();
    EXPECT_EQ(code_of(other.rw_lock("scoped", RwMode::kRead, 0s)), ErrorCode::kTimeout);
  }
  auto reader = other.rw_lock("scoped", RwMode::kRead, 0s);
  ASSERT_TRUE(reader.ok()) << reader.error().to_string();
  EXPECT_TRUE(other.rw_release("scoped", RwMode::kRead, reader->token).ok());
}

TEST(ClientRwLockGuard, RefusedRenewalIsALoss) {
  Daemon daemon;
  LossRecorder recorder;
  RenewalCounter renewals;
  GuardOptions options;
  options.lease = 2s;
  options.on_lost = recorder.callback();
  options.on_renewed = renewals.callback();
  auto reader = RwLock::acquire(connect_or_die(local(daemon)), "stolen", RwMode::kRead, options);
  ASSERT_TRUE(reader.ok()) << reader.error().to_string();
  Connection other = connect_or_die(local(daemon));
  // Released in the wrong mode: refused, and the guard keeps renewing.
  EXPECT_EQ(code_of(other.rw_release("stolen", RwMode::kWrite, reader->token())),
            ErrorCode::kProtocol);
  ASSERT_TRUE(renewals.reach(1));
  EXPECT_TRUE(reader->held());
  EXPECT_EQ(recorder.count(), 0U);
  // Released in its mode by someone else: the next renewal is refused.
  ASSERT_TRUE(other.rw_release("stolen", RwMode::kRead, reader->token()).ok());
  ASSERT_TRUE(eventually([&] { return recorder.count() > 0; }, 10s));
  EXPECT_EQ(recorder.first().reason, LossReason::kRenewRefused);
  EXPECT_EQ(recorder.first().error.code, ErrorCode::kProtocol);
  EXPECT_EQ(reader->state(), GuardState::kLost);
  EXPECT_EQ(reader->release().error().code, ErrorCode::kLeaseExpired);
}

TEST(ClientRwLockGuard, EnqueueThenWait) {
  Daemon daemon;
  const Cluster cluster({local(daemon)});
  auto first = cluster.enqueue_rw_lock("tp", RwMode::kWrite, options_with(10s, 2s));
  ASSERT_TRUE(first.ok()) << first.error().to_string();
  EXPECT_TRUE(first->acquired());
  auto second =
      RwLock::enqueue(connect_or_die(local(daemon)), "tp", RwMode::kRead, options_with(10s, 2s));
  ASSERT_TRUE(second.ok()) << second.error().to_string();
  EXPECT_FALSE(second->acquired());
  auto held = first->wait(5s);
  ASSERT_TRUE(held.ok()) << held.error().to_string();
  EXPECT_EQ(held->mode(), RwMode::kWrite);
  EXPECT_EQ(code_of(first->wait(1s)), ErrorCode::kNotEnqueued);  // spent
  const std::uint64_t fence = held->fence();
  std::thread releaser([&] {
    EXPECT_TRUE(rw_lock_reaches(daemon, "tp", 0, 1));  // the reader is queued
    EXPECT_TRUE(held->release().ok());
  });
  auto next = second->wait(30s);
  releaser.join();
  ASSERT_TRUE(next.ok()) << next.error().to_string();
  EXPECT_EQ(next->mode(), RwMode::kRead);
  EXPECT_GT(next->fence(), fence);
  EXPECT_TRUE(next->held());
}

// --- check, inspect, lost-notify ------------------------------------------------------------

TEST(ClientConnection, CheckAndInspect) {
  Daemon daemon;
  Connection holder = connect_or_die(local(daemon));
  Connection other = connect_or_die(local(daemon));
  auto grant = holder.lock("fenced", 0s, 20s);
  ASSERT_TRUE(grant.ok()) << grant.error().to_string();
  // Any connection may check a token: the seconds its lease has left.
  auto left = other.check(core::Namespace::kLock, "fenced", grant->token);
  ASSERT_TRUE(left.ok()) << left.error().to_string();
  EXPECT_GE(*left, 19s);
  EXPECT_LE(*left, 20s);
  // The same key in the other key spaces is another resource: not held there.
  EXPECT_EQ(code_of(other.check(core::Namespace::kSemaphore, "fenced", grant->token)),
            ErrorCode::kLeaseExpired);
  EXPECT_EQ(code_of(other.check(core::Namespace::kReadWrite, "fenced", grant->token)),
            ErrorCode::kLeaseExpired);
  EXPECT_EQ(code_of(other.check(core::Namespace::kLock, "bad key", grant->token)),
            ErrorCode::kInvalidArgument);

  auto queued = other.enqueue("fenced");
  ASSERT_TRUE(queued.ok());
  ASSERT_FALSE(queued->acquired.has_value());
  auto inspected = other.inspect(core::Namespace::kLock, "fenced");
  ASSERT_TRUE(inspected.ok()) << inspected.error().to_string();
  const Json json = Json::parse(inspected->json);
  EXPECT_EQ(json["kind"], "lock");
  EXPECT_EQ(json["key"], "fenced");
  EXPECT_EQ(json["exists"], true);
  ASSERT_EQ(json["holders"].size(), 1U);
  EXPECT_EQ(json["holders"][0]["fence"].get<std::uint64_t>(), grant->fence());
  EXPECT_EQ(json["waiters"].size(), 1U);
  EXPECT_EQ(inspected->json.find(grant->token.to_string()), std::string::npos)
      << "inspect shows fences, never whole tokens";

  ASSERT_TRUE(holder.release("fenced", grant->token).ok());
  EXPECT_EQ(code_of(other.check(core::Namespace::kLock, "fenced", grant->token)),
            ErrorCode::kLeaseExpired);
  auto nothing = other.inspect(core::Namespace::kSemaphore, "nothing");
  ASSERT_TRUE(nothing.ok()) << nothing.error().to_string();
  EXPECT_EQ(Json::parse(nothing->json)["exists"], false);
}

TEST(ClientLostNotify, ParsesOnlyWellFormedLostLines) {
  const std::string token =
      "0000000000000001"
      "00000000000000ab";
  auto notice = core::parse_lost_line("lost rw cat/1 " + token + " forced");
  ASSERT_TRUE(notice.has_value());
  EXPECT_EQ(notice->ns, core::Namespace::kReadWrite);
  EXPECT_EQ(notice->key, "cat/1");
  EXPECT_EQ(notice->token.to_string(), token);
  EXPECT_EQ(notice->token.fence.value, 1U);
  EXPECT_EQ(notice->reason, core::LossReason::kForced);
  EXPECT_EQ(core::parse_lost_line("lost sem k " + token + " reclaimed")->reason,
            core::LossReason::kReclaimed);
  EXPECT_EQ(core::parse_lost_line("lost lock k " + token + " expired")->ns, core::Namespace::kLock);
  EXPECT_EQ(core::parse_lost_line("lost lock k " + token + " expired\n")->reason,
            core::LossReason::kExpired);
  const std::vector<std::string> bad_lines = {"lost lock k " + token,
                                              "lost lock k " + token + " expired x",
                                              "lost mutex k " + token + " expired",
                                              "lost lock k " + token + " stolen",
                                              "lost lock k NOTATOKEN expired",
                                              "lost  lock k " + token + " expired",
                                              "sig lock k " + token + " expired",
                                              "ok"};
  for (const std::string& bad : bad_lines) {
    EXPECT_FALSE(core::parse_lost_line(bad).has_value()) << bad;
  }
}

TEST(ClientLostNotify, AnExpiryIsPushedBetweenARequestAndItsReply) {
  Daemon daemon;
  Connection holder = connect_or_die(local(daemon));
  Connection plain = connect_or_die(local(daemon));
  Connection other = connect_or_die(local(daemon));
  ASSERT_TRUE(other.lock("busy", 0s).ok());
  ASSERT_TRUE(holder.enable_lost_notify().ok());
  EXPECT_TRUE(holder.lost_notify_enabled());
  EXPECT_FALSE(plain.lost_notify_enabled());
  auto short_lease = holder.lock("short", 0s, 1s);
  auto unnotified = plain.lock("short-plain", 0s, 1s);
  ASSERT_TRUE(short_lease.ok());
  ASSERT_TRUE(unnotified.ok());
  // Both wait 3 s on "busy" while their 1 s leases run out: the `lost` line reaches the holder
  // before its `timeout` reply, and is taken aside; the connection that did not ask gets none.
  std::thread waiting([&] { EXPECT_EQ(code_of(plain.lock("busy", 3s)), ErrorCode::kTimeout); });
  EXPECT_EQ(code_of(holder.lock("busy", 3s)), ErrorCode::kTimeout);
  waiting.join();
  const std::vector<LostNotice> notices = holder.take_lost_notices();
  ASSERT_EQ(notices.size(), 1U);
  EXPECT_EQ(notices[0].ns, core::Namespace::kLock);
  EXPECT_EQ(notices[0].key, "short");
  EXPECT_EQ(notices[0].token, short_lease->token);
  EXPECT_EQ(notices[0].reason, core::LossReason::kExpired);
  EXPECT_TRUE(holder.take_lost_notices().empty());
  EXPECT_TRUE(plain.take_lost_notices().empty());
  EXPECT_TRUE(holder.ping().ok());
  EXPECT_TRUE(plain.ping().ok());
}

TEST(ClientLostNotify, AHandlerGetsThePushesOfAnIdleConnectionUntilItTurnsThemOff) {
  Daemon daemon;
  Connection holder = connect_or_die(local(daemon));
  std::vector<LostNotice> seen;
  ASSERT_TRUE(
      holder.enable_lost_notify([&](const LostNotice& notice) { seen.push_back(notice); }).ok());
  auto slot = holder.sem_lock("pool", 0s, 3, 1s);
  auto reader = holder.rw_lock("doc", RwMode::kRead, 0s, 1s);
  ASSERT_TRUE(slot.ok());
  ASSERT_TRUE(reader.ok());
  auto none = holder.poll_lost_notices(200ms);
  ASSERT_TRUE(none.ok()) << none.error().to_string();
  EXPECT_EQ(*none, 0U);
  // Both leases end after a second; nothing is sent meanwhile, the pushes are read as they come.
  ASSERT_TRUE(eventually(
      [&] {
        auto polled = holder.poll_lost_notices(500ms);
        EXPECT_TRUE(polled.ok());
        return seen.size() >= 2;
      },
      10s));
  ASSERT_EQ(seen.size(), 2U);
  std::sort(seen.begin(), seen.end(),
            [](const LostNotice& a, const LostNotice& b) { return a.key < b.key; });
  EXPECT_EQ(seen[0].ns, core::Namespace::kReadWrite);
  EXPECT_EQ(seen[0].key, "doc");
  EXPECT_EQ(seen[0].token, reader->token);
  EXPECT_EQ(seen[1].ns, core::Namespace::kSemaphore);
  EXPECT_EQ(seen[1].key, "pool");
  EXPECT_EQ(seen[1].token, slot->token);
  EXPECT_TRUE(holder.take_lost_notices().empty());  // the handler took them

  // Off: the next loss is not pushed (an unasked line would be an error here).
  ASSERT_TRUE(holder.disable_lost_notify().ok());
  EXPECT_FALSE(holder.lost_notify_enabled());
  ASSERT_TRUE(holder.lock("quiet", 0s, 1s).ok());
  auto quiet = holder.poll_lost_notices(2500ms);
  ASSERT_TRUE(quiet.ok()) << quiet.error().to_string();
  EXPECT_EQ(*quiet, 0U);
  EXPECT_EQ(seen.size(), 2U);
  EXPECT_TRUE(holder.ping().ok());
}

constexpr const char* kAdminToken = "admin-s3cret";

// The operator's force-release of `key` over HTTP (DELETE /v1/admin/<resource>/<key>).
integration::HttpResult force_release(const integration::HttpDaemon& server,
                                      const std::string& resource, const std::string& key) {
  return integration::http_request(server.http_port, "DELETE", "/v1/admin/" + resource + "/" + key,
                                   "", {std::string("Authorization: Bearer ") + kAdminToken});
}

// A 30 s lease renewed after 27 s: a loss reported within a second or two can only be the push.
GuardOptions slow_renewals(LossRecorder& recorder) {
  GuardOptions options;
  options.timeout = 0s;
  options.lease = 30s;
  options.renew_ratio = 0.9;
  options.renew_jitter = 0;
  options.on_lost = recorder.callback();
  return options;
}

TEST(ClientLostNotify, AForceReleaseReachesEveryKindOfGuardAtOnce) {
  integration::HttpDaemon server({"--admin-token", kAdminToken});
  const Endpoint endpoint = local(*server.daemon);
  LossRecorder lock_losses;
  LossRecorder slot_losses;
  LossRecorder reader_losses;
  auto lock = Lock::acquire(connect_or_die(endpoint), "forced", slow_renewals(lock_losses));
  auto slot = Semaphore::acquire(connect_or_die(endpoint), "forced", 2, slow_renewals(slot_losses));
  auto reader = RwLock::acquire(connect_or_die(endpoint), "forced", RwMode::kRead,
                                slow_renewals(reader_losses));
  ASSERT_TRUE(lock.ok()) << lock.error().to_string();
  ASSERT_TRUE(slot.ok()) << slot.error().to_string();
  ASSERT_TRUE(reader.ok()) << reader.error().to_string();
  const struct {
    const char* resource;
    Guard* guard;
    LossRecorder* losses;
  } cases[] = {{"locks", &*lock, &lock_losses},
               {"semaphores", &*slot, &slot_losses},
               {"rwlocks", &*reader, &reader_losses}};
  for (const auto& [resource, guard, losses] : cases) {
    EXPECT_TRUE(guard->held()) << resource;
    const auto started = std::chrono::steady_clock::now();
    const integration::HttpResult answer = force_release(server, resource, "forced");
    ASSERT_EQ(answer.status, 200) << resource << ": " << answer.raw;
    EXPECT_EQ(Json::parse(answer.body)["released"], 1) << resource;
    ASSERT_TRUE(eventually([&] { return losses->count() > 0; }, 10s)) << resource;
    EXPECT_LT(std::chrono::steady_clock::now() - started, 2s) << resource;
    EXPECT_EQ(losses->first().reason, LossReason::kForceReleased) << resource;
    EXPECT_EQ(losses->first().error.code, ErrorCode::kLeaseExpired) << resource;
    EXPECT_EQ(guard->state(), GuardState::kLost) << resource;
    EXPECT_EQ(guard->release().error().code, ErrorCode::kLeaseExpired) << resource;
    EXPECT_EQ(losses->count(), 1U) << resource;
  }
}

TEST(ClientLostNotify, WithoutItAForcedOutGuardLearnsOnlyAtItsRenewal) {
  integration::HttpDaemon server({"--admin-token", kAdminToken});
  LossRecorder losses;
  GuardOptions options = slow_renewals(losses);
  options.lease = 3s;  // renewed after 2.7 s
  options.lost_notify = false;
  const auto acquired_at = std::chrono::steady_clock::now();
  auto lock = Lock::acquire(connect_or_die(local(*server.daemon)), "forced", options);
  ASSERT_TRUE(lock.ok()) << lock.error().to_string();
  ASSERT_EQ(force_release(server, "locks", "forced").status, 200);
  std::this_thread::sleep_for(500ms);  // a push would have come by now
  EXPECT_EQ(losses.count(), 0U);
  EXPECT_TRUE(lock->held());
  ASSERT_TRUE(eventually([&] { return losses.count() > 0; }, 10s));
  EXPECT_GE(std::chrono::steady_clock::now() - acquired_at, 2s);
  // The renewal of a forced-out token: `error_lease_expired`.
  EXPECT_EQ(losses.first().reason, LossReason::kRenewRefused);
  EXPECT_EQ(losses.first().error.code, ErrorCode::kLeaseExpired);
}

}  // namespace
}  // namespace turnstile::client
