// --fence-state-file against a real turnstiled: fences keep increasing per key across kill -9
// under load, restarts with another --threads and a wall clock set back; a second daemon on the
// same file is refused; files we cannot trust are refused and left untouched; a graceful
// shutdown leaves a file that recovers; a new file is created 0600 with both slots.
//
// TURNSTILE_JOURNAL_RESTARTS sets how many kill -9 restarts the load test makes (default 5; the
// long run uses 100 or more).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "core/fence.h"
#include "tests/integration/harness.h"

namespace turnstile::integration {
namespace {

using Clock = std::chrono::steady_clock;

std::unique_ptr<Daemon> start_daemon(std::vector<std::string> args, bool wait = true) {
  DaemonOptions options;
  options.args = std::move(args);
  options.wait_until_listening = wait;
  return std::make_unique<Daemon>(std::move(options));
}

std::unique_ptr<Daemon> start_journaled(const std::string& file, int threads,
                                        std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--fence-state-file", file, "--threads",
                                   std::to_string(threads)};
  args.insert(args.end(), extra.begin(), extra.end());
  return start_daemon(std::move(args));
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

core::JournalRecovery recover_file(const std::string& path) {
  const std::string bytes = read_file(path);
  return core::recover_journal(std::span<const std::uint8_t>(
      reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()));
}

// The fence of an "ok <token> <lease>" reply; nullopt for any other reply.
std::optional<unsigned long long> granted_fence(const std::string& reply) {
  static const std::regex kGrant("^ok ([0-9a-f]{32}) [0-9]+$");
  std::smatch match;
  if (!std::regex_match(reply, match, kGrant)) return std::nullopt;
  return fence_of(match[1].str());
}

// Acquires and releases `key` once; the fence, or a test failure.
unsigned long long grant_once(Client& client, const std::string& key) {
  const std::string reply = client.request("l", key, "5");
  const std::vector<std::string> parts = fields(reply);
  const auto fence = granted_fence(reply);
  if (!fence || parts.size() != 3) {
    ADD_FAILURE() << "expected a grant for " << key << ", got '" << reply << "'";
    return 0;
  }
  EXPECT_EQ(client.request("r", key, parts[1]), "ok");
  return *fence;
}

// Exits with status 1 (a start-up refusal) within 10 s, never having listened.
void expect_refused(Daemon& daemon) {
  const std::optional<int> status = daemon.wait_exit(10s);
  ASSERT_TRUE(status.has_value()) << "still running:\n" << daemon.log_text();
  EXPECT_TRUE(WIFEXITED(*status)) << daemon.log_text();
  EXPECT_EQ(WEXITSTATUS(*status), 1) << daemon.log_text();
  EXPECT_EQ(daemon.port(), 0) << "it listened:\n" << daemon.log_text();
}

int restarts_wanted() {
  const char* text = std::getenv("TURNSTILE_JOURNAL_RESTARTS");
  if (text == nullptr || *text == '\0') return 5;
  return std::max(1, std::atoi(text));
}

// ---- a: kill -9 under load, restarted many times on the same file ---------------------------

struct Observed {
  std::string key;
  unsigned long long fence;
};

// One client hammering acquire+release on a few lock keys and a semaphore key until the daemon
// dies or `stop` is set. Every granted fence is appended to `out` in the order this client got it.
// A grant may also be refused with `error` when a tiny --test-fence-range runs out before the next
// reservation is durable; those are counted in `refused`.
void hammer(int port, int worker, const std::atomic<bool>& stop, std::atomic<long>& grants,
            std::atomic<long>& refused, std::vector<Observed>& out) {
  static const char* const kLockKeys[] = {"lock-a", "lock-b", "lock-c"};
  std::unique_ptr<Client> client;
  try {
    client = std::make_unique<Client>(port);
  } catch (const std::exception&) {
    return;  // killed before we connected
  }
  for (unsigned i = static_cast<unsigned>(worker); !stop.load(); ++i) {
    const bool semaphore = i % 4 == 3;
    const std::string key = semaphore ? "sem" : kLockKeys[i % 3];
    const std::string reply =
        client->request(semaphore ? "sl" : "l", key, semaphore ? "2 2" : "2", 3s);
    if (reply == "timeout") continue;
    if (reply == "error") {
      refused.fetch_add(1);
      continue;
    }
    const auto fence = granted_fence(reply);
    if (!fence) return;  // the daemon is gone (or something is wrong: the fence check will tell)
    out.push_back({key, *fence});
    grants.fetch_add(1);
    const std::string token = fields(reply)[1];
    if (client->request(semaphore ? "sr" : "r", key, token, 3s) != "ok") return;
  }
}

TEST(FenceJournal, KillNineUnderLoadRestartedManyTimesFencesAlwaysIncrease) {
  TempDir dir;
  const std::string file = dir.file("fences");
  const int restarts = restarts_wanted();
  const int thread_counts[] = {1, 2, 4};
  constexpr int kWorkers = 4;
  std::mt19937 random(20261121);

  std::map<std::string, unsigned long long> max_before_life;  // per key, over earlier lives
  long total_grants = 0;
  long total_refused = 0;  // grants refused for want of a durable fence (tiny ranges only)
  const auto started = Clock::now();
  for (int life = 0; life <= restarts; ++life) {
    // Odd lives run an hour behind the wall clock: they start from the recovered ceiling, even
    // lives from the wall clock; without the journal the odd lives would hand out lower fences.
    // Every other pair of lives reserves only 512 fences at a time, so the journal thread writes
    // while the load runs and the kill can land in the middle of a write.
    std::vector<std::string> extra = {"--test-wall-clock-offset-s", life % 2 == 1 ? "-3600" : "0"};
    if (life % 4 >= 2) extra.insert(extra.end(), {"--test-fence-range", "512"});
    auto daemon = start_journaled(file, thread_counts[life % 3], extra);
    std::atomic<bool> stop{false};
    std::atomic<long> grants{0};
    std::atomic<long> refused{0};
    std::vector<std::vector<Observed>> seen(kWorkers);
    std::vector<std::thread> workers;
    for (int w = 0; w < kWorkers; ++w) {
      workers.emplace_back(hammer, daemon->port(), w, std::cref(stop), std::ref(grants),
                           std::ref(refused), std::ref(seen[static_cast<std::size_t>(w)]));
    }
    // Let some load through, then kill at a random-ish moment while requests are in flight.
    EXPECT_TRUE(eventually([&] { return grants.load() >= 20; }, 10s)) << "life " << life;
    std::this_thread::sleep_for(milliseconds(std::uniform_int_distribution<int>(0, 150)(random)));
    bool exited = true;
    if (life < restarts) {
      daemon->signal(SIGKILL);
      exited = daemon->wait_exit(5s).has_value();
    }
    stop = true;
    for (std::thread& worker : workers) worker.join();  // before any ASSERT can return
    ASSERT_TRUE(exited) << "life " << life;
    if (life == restarts) {
      EXPECT_TRUE(daemon->stop().has_value());
    }

    // Every fence of this life is above every fence of every earlier life, per key; each
    // client's successive grants on a key increase; and no fence is ever seen twice.
    std::map<std::string, unsigned long long> max_this_life;
    for (const std::vector<Observed>& observed : seen) {
      std::map<std::string, unsigned long long> last_of_worker;
      for (const Observed& grant : observed) {
        auto before = max_before_life.find(grant.key);
        if (before != max_before_life.end()) {
          ASSERT_GT(grant.fence, before->second)
              << "life " << life << " key " << grant.key << ": a fence went back";
        }
        auto last = last_of_worker.find(grant.key);
        if (last != last_of_worker.end()) {
          ASSERT_GT(grant.fence, last->second) << "life " << life << " key " << grant.key;
        }
        last_of_worker[grant.key] = grant.fence;
        max_this_life[grant.key] = std::max(max_this_life[grant.key], grant.fence);
        ++total_grants;
      }
    }
    for (const auto& [key, fence] : max_this_life) max_before_life[key] = fence;
    total_refused += refused.load();
    ASSERT_EQ(max_before_life.size(), 4U) << "life " << life << ": every key was granted";
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  std::printf("fence journal: %d kill -9 restarts, %ld grants, %ld refused, %.1f s\n", restarts,
              total_grants, total_refused, seconds);
}

// ---- b: the wall clock set back --------------------------------------------------------------

TEST(FenceJournal, RestartWithTheWallClockSetBackStillGoesUp) {
  TempDir dir;
  const std::string file = dir.file("fences");
  unsigned long long highest = 0;
  {
    auto daemon = start_journaled(file, 2);
    Client client(daemon->port());
    for (const char* key : {"a", "b", "c"}) highest = std::max(highest, grant_once(client, key));
    daemon->signal(SIGKILL);
    ASSERT_TRUE(daemon->wait_exit(5s).has_value());
  }
  for (const char* offset : {"-3600", "-86400"}) {
    auto daemon = start_journaled(file, 1, {"--test-wall-clock-offset-s", offset});
    ASSERT_TRUE(daemon->wait_for_log("fence state file .*: recovered", 5s)) << daemon->log_text();
    Client client(daemon->port());
    unsigned long long highest_now = 0;
    for (const char* key : {"a", "b", "c"}) {
      const unsigned long long fence = grant_once(client, key);
      EXPECT_GT(fence, highest) << "offset " << offset << " key " << key;
      highest_now = std::max(highest_now, fence);
    }
    highest = highest_now;
    EXPECT_TRUE(daemon->stop().has_value());
  }
}

// The control: without the journal the offset really does move fences back, so the test above
// would fail if the journal did not hold them up.
TEST(FenceJournal, ControlWithoutTheFileTheClockOffsetLowersFences) {
  unsigned long long before = 0;
  {
    auto daemon = start_daemon({});
    Client client(daemon->port());
    before = grant_once(client, "k");
    EXPECT_TRUE(daemon->stop().has_value());
  }
  auto daemon = start_daemon({"--test-wall-clock-offset-s", "-3600"});
  Client client(daemon->port());
  const unsigned long long after = grant_once(client, "k");
  EXPECT_LT(after, before);
  EXPECT_GT(before - after, 3'500'000'000'000ULL);  // about an hour of nanoseconds
}

// ---- c: one daemon per file ------------------------------------------------------------------

TEST(FenceJournal, SecondDaemonOnTheSameFileIsRefusedWhileTheFirstKeepsServing) {
  TempDir dir;
  const std::string file = dir.file("fences");
  auto first = start_journaled(file, 1);
  Client client(first->port());
  const unsigned long long fence = grant_once(client, "k");

  auto second = start_daemon({"--fence-state-file", file}, /*wait=*/false);
  expect_refused(*second);
  EXPECT_TRUE(second->wait_for_log("fence state file " + file +
                                       " is locked by another process \\(is another turnstiled "
                                       "using it\\?\\)",
                                   1s))
      << second->log_text();

  EXPECT_TRUE(first->running());
  EXPECT_GT(grant_once(client, "k"), fence);
  Client another(first->port());
  EXPECT_GT(grant_once(another, "k"), fence);

  // The lock goes with the first daemon: once it exits, a new one starts on the file.
  client.close();
  another.close();
  EXPECT_TRUE(first->stop().has_value());
  auto third = start_journaled(file, 1);
  Client third_client(third->port());
  EXPECT_GT(grant_once(third_client, "k"), fence);
}

// ---- d: files we cannot trust are refused and left alone -------------------------------------

struct BadFile {
  std::string name;
  std::string contents;
  std::string problem;  // a regex the refusal line must match after the path
};

TEST(FenceJournal, UntrustworthyFilesAreRefusedWithTheFileAndTheProblemNamed) {
  TempDir dir;
  std::string big(1 << 20, 'x');
  const std::vector<BadFile> cases = {
      {"ten-bytes", std::string(10, '\x01'),
       "is 10 bytes long, but a fence state file is empty or "
       "exactly 64 bytes"},
      {"sixty-five-bytes", std::string(65, '\0'), "is 65 bytes long"},
      {"one-mebibyte", big, "is 1048576 bytes long"},
      {"both-slots-corrupt", std::string(64, '\x5a'),
       "holds no valid record \\(both slots are torn or corrupt\\)"},
  };
  for (const BadFile& bad : cases) {
    SCOPED_TRACE(bad.name);
    const std::string path = dir.write(bad.name, bad.contents);
    auto daemon = start_daemon({"--fence-state-file", path}, /*wait=*/false);
    expect_refused(*daemon);
    const auto line = daemon->wait_for_log("fence state file " + path + " " + bad.problem, 1s);
    ASSERT_TRUE(line.has_value()) << daemon->log_text();
    EXPECT_NE(line->find("docs/fence-journal.md"), std::string::npos) << *line;
    EXPECT_EQ(read_file(path), bad.contents) << "the refused file was changed";
  }
  // Both slots with a valid magic but a broken checksum: still corrupt.
  core::JournalRecordBytes record = core::encode_journal_record({7, 123456789});
  record[30] ^= 0x01;
  std::string contents(record.begin(), record.end());
  contents += contents;
  const std::string path = dir.write("bad-checksums", contents);
  auto daemon = start_daemon({"--fence-state-file", path}, /*wait=*/false);
  expect_refused(*daemon);
  EXPECT_TRUE(daemon->wait_for_log("fence state file " + path + " holds no valid record", 1s))
      << daemon->log_text();
  EXPECT_EQ(read_file(path), contents);
}

TEST(FenceJournal, AFileThatCannotBeOpenedIsRefused) {
  TempDir dir;
  const std::string path = dir.file("missing-directory/fences");
  auto daemon = start_daemon({"--fence-state-file", path}, /*wait=*/false);
  expect_refused(*daemon);
  EXPECT_TRUE(daemon->wait_for_log(
      "fence state file " + path + " cannot be opened: No such file or directory", 1s))
      << daemon->log_text();
}

// ---- e: graceful shutdown --------------------------------------------------------------------

TEST(FenceJournal, GracefulShutdownLeavesAFileThatRecoversAndARestartGoesAbove) {
  TempDir dir;
  const std::string file = dir.file("fences");
  unsigned long long highest = 0;
  {
    auto daemon = start_journaled(file, 4);
    std::vector<std::unique_ptr<Client>> clients;
    for (int i = 0; i < 4; ++i) clients.push_back(std::make_unique<Client>(daemon->port()));
    for (int round = 0; round < 50; ++round) {
      for (std::size_t i = 0; i < clients.size(); ++i) {
        highest = std::max(highest, grant_once(*clients[i], "key-" + std::to_string(round % 7)));
      }
    }
    clients.clear();
    const std::optional<int> status = daemon->stop(10s);
    ASSERT_TRUE(status.has_value());
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << daemon->log_text();
  }
  const core::JournalRecovery recovery = recover_file(file);
  ASSERT_EQ(recovery.outcome, core::JournalRecovery::Outcome::kRecovered) << recovery.problem;
  EXPECT_GE(recovery.record.ceiling, highest) << "a fence above the durable ceiling was granted";

  auto daemon = start_journaled(file, 3);
  EXPECT_TRUE(daemon->wait_for_log("fence state file " + file + ": recovered \\(seq " +
                                       std::to_string(recovery.record.seq) + ", ceiling " +
                                       std::to_string(recovery.record.ceiling) + "\\)",
                                   5s))
      << daemon->log_text();
  Client client(daemon->port());
  for (int i = 0; i < 7; ++i) {
    EXPECT_GT(grant_once(client, "key-" + std::to_string(i)), recovery.record.ceiling);
  }
}

// ---- running reservations that fail --------------------------------------------------------

// With a 64-fence range the journal reserves again after 32 grants; the first three of those
// writes fail (injected EIO). Grants beyond the durable ceiling then fail with `error` and the
// log says why; the writer retries with back-off, grants resume, and fences never go back, also
// across a kill -9.
TEST(FenceJournal, FailedReservationsFailGrantsWithErrorUntilAWriteSucceeds) {
  TempDir dir;
  const std::string file = dir.file("fences");
  unsigned long long highest = 0;
  {
    auto daemon =
        start_journaled(file, 1, {"--test-fence-range", "64", "--test-fence-write-failures", "3"});
    Client client(daemon->port());
    int granted = 0;
    int refused = 0;
    const auto deadline = Clock::now() + 20s;
    // Grant until a refusal has been seen and grants have resumed after it.
    while (Clock::now() < deadline && (refused == 0 || granted < 100)) {
      const std::string reply = client.request("l", "k", "5");
      if (reply == "error") {
        ++refused;
        EXPECT_LE(granted, 64) << "grants beyond the first durable range before any refusal";
        std::this_thread::sleep_for(10ms);
        continue;
      }
      const auto fence = granted_fence(reply);
      ASSERT_TRUE(fence.has_value()) << reply;
      EXPECT_GT(*fence, highest);
      highest = *fence;
      ++granted;
      ASSERT_EQ(client.request("r", "k", fields(reply)[1]), "ok");
    }
    EXPECT_GT(refused, 0) << "no grant was refused while the reservation kept failing";
    EXPECT_GE(granted, 100) << "grants did not resume after the write succeeded";
    EXPECT_TRUE(daemon->wait_for_log(
        "fence state file .*: cannot reserve fences beyond [0-9]+: fsync: Input/output error "
        "\\(injected by --test-fence-write-failures\\); grants that need a new fence fail "
        "with error until a write succeeds",
        1s))
        << daemon->log_text();
    EXPECT_TRUE(daemon->wait_for_log("fence state file .*: written again; durable ceiling", 1s))
        << daemon->log_text();
    daemon->signal(SIGKILL);
    ASSERT_TRUE(daemon->wait_exit(5s).has_value());
  }
  const core::JournalRecovery recovery = recover_file(file);
  ASSERT_EQ(recovery.outcome, core::JournalRecovery::Outcome::kRecovered) << recovery.problem;
  EXPECT_GE(recovery.record.ceiling, highest);
  auto daemon = start_journaled(file, 2);
  Client client(daemon->port());
  EXPECT_GT(grant_once(client, "k"), highest);
}

// ---- f: a new file ---------------------------------------------------------------------------

TEST(FenceJournal, NewFileIsCreated0600WithBothSlotsBeforeTheFirstGrant) {
  TempDir dir;
  const std::string file = dir.file("fences");
  const mode_t old_umask = umask(0);  // the mode must come from the daemon, not the umask
  auto daemon = start_journaled(file, 2);
  umask(old_umask);
  ASSERT_TRUE(daemon->wait_for_log("fence state file " + file +
                                       ": fresh; fences start at [0-9]+; "
                                       "durable ceiling [0-9]+",
                                   1s))
      << daemon->log_text();

  // Listening already means durable: the file holds a valid record before any grant.
  struct stat info {};
  ASSERT_EQ(stat(file.c_str(), &info), 0);
  EXPECT_TRUE(S_ISREG(info.st_mode));
  EXPECT_EQ(info.st_mode & 07777, 0600U);
  EXPECT_EQ(info.st_size, 64);
  const core::JournalRecovery recovery = recover_file(file);
  ASSERT_EQ(recovery.outcome, core::JournalRecovery::Outcome::kRecovered) << recovery.problem;
  EXPECT_EQ(recovery.record.seq, 1U);
  EXPECT_EQ(recovery.slot, 0);

  Client client(daemon->port());
  EXPECT_LE(grant_once(client, "k"), recovery.record.ceiling);
}

}  // namespace
}  // namespace turnstile::integration
