// The `turnstile` CLI against a real turnstiled: every subcommand, the documented exit codes, and
// `run`: the lock held for the command's lifetime, the fence in its environment, exit codes and
// signals passed through, signals forwarded, the command terminated when the lock is lost; and
// read-write locks (`--read`, `--write`): readers run together, a writer alone; `check`, `admin
// show` and `admin release`, and a run ended at once by a force-release (lost-notify).
#include "client/cli.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "client/connection.h"
#include "client/signal_connection.h"
#include "tests/integration/cluster_harness.h"
#include "tests/integration/harness.h"

extern char** environ;

namespace turnstile::client {
namespace {

using integration::CertificateFiles;
using integration::Daemon;
using integration::eventually;
using integration::TempDir;
using namespace std::chrono_literals;
using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string read_file(const std::string& path) {
  std::ifstream file(path);
  std::stringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// One `turnstile` process in its own process group, stdout and stderr to files. The destructor
// SIGKILLs the whole group if it is still running, and reaps it.
class Cli {
 public:
  Cli(const TempDir& dir, std::vector<std::string> args) {
    static int counter = 0;
    const std::string tag = std::to_string(++counter);
    out_path_ = dir.file("out" + tag);
    err_path_ = dir.file("err" + tag);
    args.insert(args.begin(), TURNSTILE_CLI_PATH);
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_addopen(&actions, 2, err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawnattr_t attributes;
    posix_spawnattr_init(&attributes);
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attributes, 0);
    const int spawned = posix_spawn(&pid_, argv[0], &actions, &attributes, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
    if (spawned != 0) throw std::runtime_error("spawn turnstile failed");
  }
  ~Cli() {
    if (!status_) {
      ::kill(-pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
  }
  Cli(const Cli&) = delete;
  Cli& operator=(const Cli&) = delete;

  pid_t pid() const { return pid_; }
  void signal(int number) { ::kill(pid_, number); }

  // The exit code (128+N for a signal death), or -1 if it did not exit in time.
  int wait(std::chrono::milliseconds timeout = 30s) {
    const auto deadline = Clock::now() + timeout;
    while (!status_) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        status_ = status;
        break;
      }
      if (Clock::now() >= deadline) return -1;
      std::this_thread::sleep_for(10ms);
    }
    if (WIFEXITED(*status_)) return WEXITSTATUS(*status_);
    return 128 + WTERMSIG(*status_);
  }
  std::string out() const { return read_file(out_path_); }
  std::string err() const { return read_file(err_path_); }

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
  std::string out_path_;
  std::string err_path_;
};

std::string server(const Daemon& daemon) { return "127.0.0.1:" + std::to_string(daemon.port()); }

// Runs to completion; returns {exit code, stdout, stderr}.
struct Outcome {
  int code;
  std::string out;
  std::string err;
};
Outcome run_cli(const TempDir& dir, std::vector<std::string> args) {
  Cli cli(dir, std::move(args));
  const int code = cli.wait(60s);
  return {code, cli.out(), cli.err()};
}

// The error code of a refused lock call.
ErrorCode code_of_lock(const Result<Grant>& result) {
  EXPECT_FALSE(result.ok());
  return result.ok() ? ErrorCode::kIo : result.error().code;
}

Connection connect_to(const Daemon& daemon) {
  auto connection =
      Connection::connect(Endpoint{"127.0.0.1", static_cast<std::uint16_t>(daemon.port())});
  if (!connection) throw std::runtime_error(connection.error().to_string());
  return std::move(*connection);
}

// Runs `args` with --json, which the server must refuse with a plain `error` (a token that matches
// no holder): exit 1 and {"error":"protocol"} on stdout.
void expect_refused(const TempDir& dir, std::vector<std::string> args) {
  args.push_back("--json");
  const Outcome outcome = run_cli(dir, std::move(args));
  EXPECT_EQ(outcome.code, kExitError) << outcome.err;
  EXPECT_EQ(Json::parse(outcome.out, nullptr, false).value("error", ""), "protocol") << outcome.out;
}

TEST(TurnstileCli, PingStatsAcquireRenewRelease) {
  Daemon daemon({"--auto-release-on-disconnect=false"});
  TempDir dir;
  const Outcome ping = run_cli(dir, {"ping", "--server", server(daemon)});
  EXPECT_EQ(ping.code, kExitOk) << ping.err;
  EXPECT_NE(ping.out.find(server(daemon) + " ok"), std::string::npos) << ping.out;

  const Outcome acquired =
      run_cli(dir, {"acquire", "-s", server(daemon), "--key", "job", "--lease", "30", "--json"});
  ASSERT_EQ(acquired.code, kExitOk) << acquired.err;
  const Json grant = Json::parse(acquired.out);
  EXPECT_EQ(grant["key"], "job");
  EXPECT_EQ(grant["lease_s"], 30);
  const std::string token = grant["token"];
  EXPECT_EQ(grant["fence"].get<std::uint64_t>(), *integration::fence_of(token));

  const Outcome stats = run_cli(dir, {"stats", "-s", server(daemon), "--json"});
  ASSERT_EQ(stats.code, kExitOk) << stats.err;
  EXPECT_EQ(Json::parse(stats.out)["stats"]["locks"][0]["key"], "job");
  const Outcome plain_stats = run_cli(dir, {"stats", "-s", server(daemon)});
  EXPECT_EQ(Json::parse(plain_stats.out)["locks"].size(), 1U);

  // Held (auto-release is off): another acquire times out.
  const Outcome busy =
      run_cli(dir, {"acquire", "-s", server(daemon), "--key", "job", "--timeout", "0"});
  EXPECT_EQ(busy.code, kExitTimedOut) << busy.err;

  const Outcome renewed =
      run_cli(dir, {"renew", "-s", server(daemon), "--key", "job", "--token", token, "-l", "45"});
  EXPECT_EQ(renewed.code, kExitOk) << renewed.err;
  EXPECT_EQ(renewed.out, "45\n");
  const Outcome released =
      run_cli(dir, {"release", "-s", server(daemon), "--key", "job", "--token", token});
  EXPECT_EQ(released.code, kExitOk) << released.err;
  EXPECT_EQ(released.out, "ok\n");
  expect_refused(dir, {"release", "-s", server(daemon), "--key", "job", "--token", token});

  // Semaphores.
  const Outcome slot = run_cli(
      dir, {"acquire", "-s", server(daemon), "--key", "pool", "--semaphore", "2", "--json"});
  ASSERT_EQ(slot.code, kExitOk) << slot.err;
  const std::string slot_token = Json::parse(slot.out)["token"];
  EXPECT_EQ(run_cli(dir, {"renew", "-s", server(daemon), "--key", "pool", "--token", slot_token,
                          "--semaphore"})
                .code,
            kExitOk);
  EXPECT_EQ(run_cli(dir, {"release", "-s", server(daemon), "--key", "pool", "--token", slot_token,
                          "--semaphore"})
                .code,
            kExitOk);
}

TEST(TurnstileCli, ReadWriteAcquireRenewRelease) {
  Daemon daemon({"--auto-release-on-disconnect=false"});
  TempDir dir;
  const Outcome first =
      run_cli(dir, {"acquire", "-s", server(daemon), "--read", "doc", "--lease", "30", "--json"});
  ASSERT_EQ(first.code, kExitOk) << first.err;
  const Json grant = Json::parse(first.out);
  EXPECT_EQ(grant["key"], "doc");
  EXPECT_EQ(grant["mode"], "read");
  const std::string token = grant["token"];
  // Readers share: a second read lock is granted while the first is held.
  const Outcome second = run_cli(dir, {"acquire", "-s", server(daemon), "--read", "doc"});
  ASSERT_EQ(second.code, kExitOk) << second.err;
  const std::string second_token = second.out.substr(0, second.out.find(' '));
  ASSERT_EQ(second_token.size(), 32U) << second.out;
  // A writer is not.
  EXPECT_EQ(run_cli(dir, {"acquire", "-s", server(daemon), "--write", "doc", "-t", "0"}).code,
            kExitTimedOut);
  // The lock with the same name is another key space: free.
  EXPECT_EQ(run_cli(dir, {"acquire", "-s", server(daemon), "--key", "doc", "-t", "0"}).code,
            kExitOk);

  const Outcome renewed =
      run_cli(dir, {"renew", "-s", server(daemon), "--read", "doc", "--token", token, "-l", "45"});
  EXPECT_EQ(renewed.code, kExitOk) << renewed.err;
  EXPECT_EQ(renewed.out, "45\n");
  // A read token is not released as a write lock (nor as a lock), and stays held.
  expect_refused(dir, {"release", "-s", server(daemon), "--write", "doc", "--token", token});
  expect_refused(dir, {"release", "-s", server(daemon), "--key", "doc", "--token", token});
  expect_refused(dir, {"renew", "-s", server(daemon), "--write", "doc", "--token", token});
  for (const std::string& held : {token, second_token}) {
    const Outcome released =
        run_cli(dir, {"release", "-s", server(daemon), "--read", "doc", "--token", held});
    EXPECT_EQ(released.code, kExitOk) << released.err;
    EXPECT_EQ(released.out, "ok\n");
  }
  const Outcome writer =
      run_cli(dir, {"acquire", "-s", server(daemon), "--write", "doc", "-t", "0", "--json"});
  ASSERT_EQ(writer.code, kExitOk) << writer.err;
  EXPECT_EQ(Json::parse(writer.out)["mode"], "write");
  EXPECT_GT(Json::parse(writer.out)["fence"].get<std::uint64_t>(),
            grant["fence"].get<std::uint64_t>());

  // One of --key, --read and --write; no --semaphore with a read-write lock.
  EXPECT_EQ(run_cli(dir, {"acquire", "-s", server(daemon), "--key", "a", "--read", "a"}).code,
            kExitUsage);
  EXPECT_EQ(run_cli(dir, {"acquire", "-s", server(daemon), "--read", "a", "--write", "a"}).code,
            kExitUsage);
  EXPECT_EQ(run_cli(dir, {"acquire", "-s", server(daemon), "--read", "a", "--semaphore", "2"}).code,
            kExitUsage);
  EXPECT_EQ(
      run_cli(dir, {"release", "-s", server(daemon), "--read", "a", "--token", "NOTHEX"}).code,
      kExitUsage);
  EXPECT_EQ(run_cli(dir, {"acquire", "-s", server(daemon), "--write", "a b"}).code, kExitUsage);
  const Outcome help = run_cli(dir, {"run", "--help"});
  EXPECT_EQ(help.code, kExitOk);
  EXPECT_NE(help.out.find("--read"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("--write"), std::string::npos) << help.out;
}

TEST(TurnstileCli, SeveralServers) {
  Daemon first;
  Daemon second;
  TempDir dir;
  const Outcome ping = run_cli(dir, {"ping", "-s", server(first), "-s", server(second)});
  EXPECT_EQ(ping.code, kExitOk) << ping.err;
  EXPECT_NE(ping.out.find(server(first) + " ok"), std::string::npos) << ping.out;
  EXPECT_NE(ping.out.find(server(second) + " ok"), std::string::npos) << ping.out;
  // zlib.crc32: "a" % 2 == 1, "hello" % 2 == 0.
  for (const auto& [key, expected] : {std::pair{"a", server(second)}, {"hello", server(first)}}) {
    const Outcome acquired = run_cli(
        dir, {"acquire", "-s", server(first), "-s", server(second), "--key", key, "--json"});
    ASSERT_EQ(acquired.code, kExitOk) << acquired.err;
    EXPECT_EQ(Json::parse(acquired.out)["server"], expected) << key;
  }
}

TEST(TurnstileCli, ExitCodes) {
  TempDir dir;
  // Could not connect: nothing listens on the port of a stopped daemon.
  std::string dead_server;
  {
    Daemon dead;
    dead_server = server(dead);
  }
  const Outcome refused = run_cli(dir, {"ping", "-s", dead_server});
  EXPECT_EQ(refused.code, kExitNoConnection) << refused.err;
  EXPECT_EQ(run_cli(dir, {"run", "-s", dead_server, "-k", "k", "--", "true"}).code,
            kExitNoConnection);

  EXPECT_EQ(run_cli(dir, {}).code, kExitUsage);
  EXPECT_EQ(run_cli(dir, {"frobnicate"}).code, kExitUsage);
  EXPECT_EQ(run_cli(dir, {"acquire"}).code, kExitUsage);  // no --key
  EXPECT_EQ(run_cli(dir, {"acquire", "-k", "a b"}).code, kExitUsage);
  EXPECT_EQ(run_cli(dir, {"release", "-k", "a", "--token", "NOTHEX"}).code, kExitUsage);
  EXPECT_EQ(run_cli(dir, {"run", "-k", "a"}).code, kExitUsage);  // no command
  EXPECT_EQ(run_cli(dir, {"ping", "--bogus"}).code, kExitUsage);
  EXPECT_EQ(run_cli(dir, {"ping", "-s", "host:notaport"}).code, kExitUsage);
  EXPECT_EQ(run_cli(dir, {"--help"}).code, kExitOk);

  // Timed out waiting.
  Daemon daemon;
  Connection holder = connect_to(daemon);
  ASSERT_TRUE(holder.lock("held", 0s).ok());
  const auto started = Clock::now();
  const Outcome waited =
      run_cli(dir, {"run", "-s", server(daemon), "-k", "held", "-t", "1", "--", "true"});
  EXPECT_EQ(waited.code, kExitTimedOut) << waited.err;
  EXPECT_GE(Clock::now() - started, 900ms);

  // Auth.
  Daemon guarded({"--auth-token", "s3cret"});
  const std::string right = dir.write("right", "s3cret\n");
  const std::string wrong = dir.write("wrong", "nope\n");
  EXPECT_EQ(run_cli(dir, {"ping", "-s", server(guarded), "--auth-token-file", right}).code,
            kExitOk);
  EXPECT_EQ(run_cli(dir, {"ping", "-s", server(guarded), "--auth-token-file", wrong}).code,
            kExitAuth);
}

TEST(TurnstileCli, RunPassesTheLockAndPropagatesTheExitCode) {
  Daemon daemon;
  TempDir dir;
  const Outcome outcome =
      run_cli(dir, {"run", "-s", server(daemon), "-k", "nightly", "--", "sh", "-c",
                    "echo \"$TURNSTILE_KEY $TURNSTILE_FENCE $TURNSTILE_TOKEN\"; exit 7"});
  EXPECT_EQ(outcome.code, 7) << outcome.err;
  std::istringstream fields(outcome.out);
  std::string key, fence, token;
  fields >> key >> fence >> token;
  EXPECT_EQ(key, "nightly");
  ASSERT_EQ(token.size(), 32U) << outcome.out;
  EXPECT_EQ(std::stoull(fence), *integration::fence_of(token));
  // Released when the command ended.
  Connection other = connect_to(daemon);
  EXPECT_TRUE(other.lock("nightly", 0s).ok());
  ASSERT_TRUE(other.ping().ok());

  EXPECT_EQ(run_cli(dir, {"run", "-s", server(daemon), "-k", "x", "--", "true"}).code, 0);
  EXPECT_EQ(
      run_cli(dir, {"run", "-s", server(daemon), "-k", "x", "--", "sh", "-c", "kill -9 $$"}).code,
      128 + SIGKILL);
  EXPECT_EQ(run_cli(dir, {"run", "-s", server(daemon), "-k", "x", "--", "/no/such/command"}).code,
            kExitNotFound);
  // A semaphore run.
  EXPECT_EQ(run_cli(dir, {"run", "-s", server(daemon), "-k", "pool", "--semaphore", "3", "--", "sh",
                          "-c", "test -n \"$TURNSTILE_TOKEN\""})
                .code,
            0);
}

TEST(TurnstileCli, SecondRunWaitsForTheFirst) {
  Daemon daemon;
  TempDir dir;
  const std::string first_script = "echo $TURNSTILE_FENCE > '" + dir.file("a_fence") +
                                   "'; date +%s%N > '" + dir.file("a_start") + "'; sleep 2; " +
                                   "date +%s%N > '" + dir.file("a_end") + "'";
  const std::string second_script = "echo $TURNSTILE_FENCE > '" + dir.file("b_fence") +
                                    "'; date +%s%N > '" + dir.file("b_start") + "'";
  Cli first(dir, {"run", "-s", server(daemon), "-k", "serial", "--", "sh", "-c", first_script});
  ASSERT_TRUE(eventually([&] { return exists(dir.file("a_start")); }, 20s));
  Cli second(dir, {"run", "-s", server(daemon), "-k", "serial", "-t", "60", "--", "sh", "-c",
                   second_script});
  EXPECT_EQ(first.wait(), 0) << first.err();
  EXPECT_EQ(second.wait(), 0) << second.err();
  const long long first_end = std::stoll(read_file(dir.file("a_end")));
  const long long second_start = std::stoll(read_file(dir.file("b_start")));
  EXPECT_GE(second_start, first_end);
  EXPECT_GT(std::stoull(read_file(dir.file("b_fence"))),
            std::stoull(read_file(dir.file("a_fence"))));
}

// A command that marks `mine` and then waits about `seconds` for `other` to appear: it exits 0 if
// it appeared, 3 if not.
std::string meet_script(const std::string& mine, const std::string& other, int seconds = 10) {
  return "echo \"$TURNSTILE_KEY $TURNSTILE_FENCE\" > '" + mine + "'; i=0; while [ ! -e '" + other +
         "' ]; do sleep 0.05; i=$((i+1)); [ $i -gt " + std::to_string(seconds * 20) +
         " ] && exit 3; done; exit 0";
}

TEST(TurnstileCli, RunReadLetsTwoCommandsRunAtOnce) {
  Daemon daemon;
  TempDir dir;
  const std::string a = dir.file("a"), b = dir.file("b");
  Cli first(dir, {"run", "-s", server(daemon), "--read", "shared", "-t", "30", "--", "sh", "-c",
                  meet_script(a, b)});
  Cli second(dir, {"run", "-s", server(daemon), "--read", "shared", "-t", "30", "--", "sh", "-c",
                   meet_script(b, a)});
  EXPECT_EQ(first.wait(), 0) << first.err();
  EXPECT_EQ(second.wait(), 0) << second.err();
  EXPECT_EQ(read_file(a).substr(0, 7), "shared ") << read_file(a);
  // The same two as writers cannot meet: the second waits until the first has given up.
  const std::string c = dir.file("c"), d = dir.file("d");
  Cli writer(dir, {"run", "-s", server(daemon), "--write", "shared", "-t", "30", "--", "sh", "-c",
                   meet_script(c, d, 2)});
  ASSERT_TRUE(eventually([&] { return exists(c); }, 20s));
  Cli other(dir, {"run", "-s", server(daemon), "--write", "shared", "-t", "30", "--", "sh", "-c",
                  meet_script(d, c, 2)});
  EXPECT_EQ(writer.wait(), 3) << writer.err();  // gave up waiting for the other
  EXPECT_EQ(other.wait(), 0) << other.err();    // started after: the first's mark was there
}

TEST(TurnstileCli, RunWriteWaitsForTheReadersAndKeepsLaterReadersOut) {
  Daemon daemon;
  TempDir dir;
  const auto stamp = [&](const std::string& name) {
    return "date +%s%N > '" + dir.file(name) + "'";
  };
  // A reader holds the key for 2 s; a writer queues behind it; a reader that comes after the
  // writer queued waits for the writer (no reader overtakes a queued writer).
  Cli reader(dir, {"run", "-s", server(daemon), "--read", "rw", "--", "sh", "-c",
                   stamp("r_start") + "; sleep 2; " + stamp("r_end")});
  ASSERT_TRUE(eventually([&] { return exists(dir.file("r_start")); }, 20s));
  Cli writer(dir, {"run", "-s", server(daemon), "--write", "rw", "-t", "60", "--", "sh", "-c",
                   stamp("w_start") + "; sleep 1; " + stamp("w_end")});
  Connection observer = connect_to(daemon);
  ASSERT_TRUE(eventually(
      [&] {
        auto stats = observer.stats();
        return stats && stats->json.find("\"waiters\":1") != std::string::npos;
      },
      20s));
  Cli late(dir, {"run", "-s", server(daemon), "--read", "rw", "-t", "60", "--", "sh", "-c",
                 stamp("l_start")});
  EXPECT_EQ(reader.wait(), 0) << reader.err();
  EXPECT_EQ(writer.wait(), 0) << writer.err();
  EXPECT_EQ(late.wait(), 0) << late.err();
  const auto at = [&](const std::string& name) { return std::stoll(read_file(dir.file(name))); };
  EXPECT_GE(at("w_start"), at("r_end"));
  EXPECT_GE(at("l_start"), at("w_end"));
}

TEST(TurnstileCli, RunReadEndsWithTheLockLostWhenItsTokenIsReleased) {
  Daemon daemon;
  TempDir dir;
  const std::string token_file = dir.file("token");
  Cli cli(dir, {"run", "-s", server(daemon), "--read", "fragile", "--lease", "2", "--", "sh", "-c",
                "echo $TURNSTILE_TOKEN > '" + token_file + "'; exec sleep 60"});
  ASSERT_TRUE(eventually([&] { return read_file(token_file).size() == 33; }, 20s));
  auto token = parse_token(read_file(token_file).substr(0, 32));
  ASSERT_TRUE(token.ok());
  Connection other = connect_to(daemon);
  // Not a write token: refused, the run goes on.
  const auto wrong_kind = other.rw_release("fragile", RwMode::kWrite, *token);
  ASSERT_FALSE(wrong_kind.ok());
  EXPECT_EQ(wrong_kind.error().code, ErrorCode::kProtocol);
  EXPECT_EQ(cli.wait(1500ms), -1) << cli.err();
  // Released as what it is: the next renew is refused, the command is ended.
  ASSERT_TRUE(other.rw_release("fragile", RwMode::kRead, *token).ok());
  EXPECT_EQ(cli.wait(20s), kExitLockLost) << cli.err();
  EXPECT_NE(cli.err().find("lost the lock on fragile (renew_refused)"), std::string::npos)
      << cli.err();
}

TEST(TurnstileCli, SignalsReachTheCommand) {
  Daemon daemon;
  TempDir dir;
  for (const auto& [number, name, code] :
       {std::tuple{SIGTERM, "TERM", 42}, std::tuple{SIGHUP, "HUP", 43},
        std::tuple{SIGINT, "INT", 44}}) {
    const std::string ready = dir.file(std::string("ready_") + name);
    const std::string script = std::string("trap 'exit ") + std::to_string(code) + "' " + name +
                               "; echo > '" + ready + "'; while :; do sleep 0.1; done";
    Cli cli(dir, {"run", "-s", server(daemon), "-k", "signalled", "--", "sh", "-c", script});
    ASSERT_TRUE(eventually([&] { return exists(ready); }, 20s));
    cli.signal(number);
    EXPECT_EQ(cli.wait(), code) << name << ": " << cli.err();
  }
}

TEST(TurnstileCli, LostLockTerminatesTheCommand) {
  Daemon daemon;
  TempDir dir;
  const std::string ready = dir.file("ready");
  Cli cli(dir, {"run", "-s", server(daemon), "-k", "fragile", "--lease", "2", "--", "sh", "-c",
                "echo > '" + ready + "'; exec sleep 60"});
  ASSERT_TRUE(eventually([&] { return exists(ready); }, 20s));
  const auto stalled = Clock::now();
  daemon.signal(SIGSTOP);  // no renewal is answered: the lease runs out
  const int code = cli.wait(30s);
  daemon.signal(SIGCONT);
  EXPECT_EQ(code, kExitLockLost) << cli.err();
  EXPECT_LT(Clock::now() - stalled, 20s);
  EXPECT_NE(cli.err().find("lost the lock"), std::string::npos) << cli.err();
}

TEST(TurnstileCli, LostLockKillsACommandThatIgnoresSigterm) {
  auto daemon = std::make_unique<Daemon>();
  TempDir dir;
  const std::string ready = dir.file("ready");
  Cli cli(dir,
          {"run", "-s", server(*daemon), "-k", "stubborn", "--lease", "2", "--grace", "1", "--",
           "sh", "-c", "trap '' TERM; echo > '" + ready + "'; while :; do sleep 0.1; done"});
  ASSERT_TRUE(eventually([&] { return exists(ready); }, 20s));
  daemon.reset();  // server gone: the connection fails
  EXPECT_EQ(cli.wait(30s), kExitLockLost) << cli.err();
  EXPECT_NE(cli.err().find("SIGKILL"), std::string::npos) << cli.err();
}

TEST(TurnstileCli, NoKillOnLossLetsTheCommandFinish) {
  auto daemon = std::make_unique<Daemon>();
  TempDir dir;
  const std::string ready = dir.file("ready");
  const std::string finished = dir.file("finished");
  Cli cli(dir, {"run", "-s", server(*daemon), "-k", "lenient", "--lease", "2", "--no-kill-on-loss",
                "--", "sh", "-c", "echo > '" + ready + "'; sleep 3; echo > '" + finished + "'"});
  ASSERT_TRUE(eventually([&] { return exists(ready); }, 20s));
  daemon.reset();
  EXPECT_EQ(cli.wait(30s), kExitLockLost) << cli.err();
  EXPECT_TRUE(exists(finished));
}

constexpr const char* kAdminToken = "admin-s3cret";

std::string http_server(const integration::HttpDaemon& daemon) {
  return "127.0.0.1:" + std::to_string(daemon.http_port);
}

TEST(TurnstileCli, RunEndsTheCommandAtOnceWhenItsLockIsForceReleased) {
  integration::HttpDaemon daemon({"--admin-token", kAdminToken});
  TempDir dir;
  const std::string ready = dir.file("ready");
  // A 30 s lease is renewed after about 15 s: only the server's push explains an end within
  // seconds of the force-release.
  Cli cli(dir, {"run", "-s", server(*daemon.daemon), "-k", "forced", "--lease", "30", "--", "sh",
                "-c", "echo > '" + ready + "'; exec sleep 60"});
  ASSERT_TRUE(eventually([&] { return exists(ready); }, 20s));
  EXPECT_EQ(cli.wait(500ms), -1) << cli.err();
  const auto forced = Clock::now();
  const Outcome released = run_cli(
      dir, {"admin", "release", "-s", http_server(daemon), "forced", "--admin-token", kAdminToken});
  ASSERT_EQ(released.code, kExitOk) << released.err;
  EXPECT_EQ(released.out, "released 1\n");
  EXPECT_EQ(cli.wait(10s), kExitLockLost) << cli.err();
  EXPECT_LT(Clock::now() - forced, 3s);
  EXPECT_NE(cli.err().find("lost the lock on forced (force_released): sending SIGTERM"),
            std::string::npos)
      << cli.err();
}

TEST(TurnstileCli, CheckSaysWhetherATokenHoldsTheKey) {
  Daemon daemon;
  TempDir dir;
  Connection holder = connect_to(daemon);
  auto grant = holder.lock("fenced", 0s, 40s);
  auto slot = holder.sem_lock("fenced", 0s, 2, 40s);
  ASSERT_TRUE(grant.ok());
  ASSERT_TRUE(slot.ok());
  const std::string token = grant->token.to_string();
  const Outcome held = run_cli(dir, {"check", "-s", server(daemon), "fenced", token});
  EXPECT_EQ(held.code, kExitOk) << held.err;
  const int left = std::stoi(held.out);
  EXPECT_GE(left, 35) << held.out;
  EXPECT_LE(left, 40) << held.out;
  const Outcome as_lock = run_cli(dir, {"check", "-s", server(daemon), "fenced", token, "lock"});
  EXPECT_EQ(as_lock.code, kExitOk) << as_lock.err;
  const Outcome json = run_cli(dir, {"check", "-s", server(daemon), "--json", "fenced", token});
  EXPECT_EQ(json.code, kExitOk) << json.err;
  EXPECT_EQ(Json::parse(json.out)["held"], true) << json.out;
  EXPECT_GE(Json::parse(json.out)["seconds_left"].get<int>(), 35) << json.out;
  // The semaphore's token holds the semaphore, not the lock (and the reverse).
  EXPECT_EQ(
      run_cli(dir, {"check", "-s", server(daemon), "fenced", slot->token.to_string(), "sem"}).code,
      kExitOk);
  const Outcome wrong_kind = run_cli(dir, {"check", "-s", server(daemon), "fenced", token, "sem"});
  EXPECT_EQ(wrong_kind.code, kExitError);
  EXPECT_NE(wrong_kind.err.find("not held"), std::string::npos) << wrong_kind.err;
  EXPECT_EQ(run_cli(dir, {"check", "-s", server(daemon), "fenced", token, "rw"}).code, kExitError);
  // Released: not held any more.
  ASSERT_TRUE(holder.release("fenced", grant->token).ok());
  const Outcome gone = run_cli(dir, {"check", "-s", server(daemon), "--json", "fenced", token});
  EXPECT_EQ(gone.code, kExitError);
  EXPECT_EQ(Json::parse(gone.out)["held"], false) << gone.out;
  // Usage: a token that is no token, a kind that is no kind, a word missing or too many.
  EXPECT_EQ(run_cli(dir, {"check", "-s", server(daemon), "fenced", "NOTHEX"}).code, kExitUsage);
  EXPECT_EQ(run_cli(dir, {"check", "-s", server(daemon), "fenced", token, "mutex"}).code,
            kExitUsage);
  EXPECT_EQ(run_cli(dir, {"check", "-s", server(daemon), "fenced"}).code, kExitUsage);
  EXPECT_EQ(run_cli(dir, {"check", "-s", server(daemon), "fenced", token, "lock", "x"}).code,
            kExitUsage);
}

TEST(TurnstileCli, AdminShowPrintsHoldersAndWaiters) {
  Daemon daemon;
  TempDir dir;
  Connection first = connect_to(daemon);
  Connection second = connect_to(daemon);
  Connection writer = connect_to(daemon);
  auto one = first.rw_lock("catalog", RwMode::kRead, 0s, 60s);
  auto two = second.rw_lock("catalog", RwMode::kRead, 0s, 60s);
  ASSERT_TRUE(one.ok());
  ASSERT_TRUE(two.ok());
  auto queued = writer.rw_enqueue("catalog", RwMode::kWrite);
  ASSERT_TRUE(queued.ok());
  ASSERT_FALSE(queued->acquired.has_value());

  const Outcome json =
      run_cli(dir, {"admin", "show", "-s", server(daemon), "--json", "catalog", "rw"});
  ASSERT_EQ(json.code, kExitOk) << json.err;
  const Json shown = Json::parse(json.out);
  EXPECT_EQ(shown["ok"], true);
  const Json& inspection = shown["inspect"];
  EXPECT_EQ(inspection["kind"], "rw");
  EXPECT_EQ(inspection["key"], "catalog");
  ASSERT_EQ(inspection["holders"].size(), 2U) << json.out;
  EXPECT_EQ(inspection["holders"][0]["fence"].get<std::uint64_t>(), one->fence());
  EXPECT_EQ(inspection["holders"][1]["fence"].get<std::uint64_t>(), two->fence());
  EXPECT_EQ(inspection["holders"][0]["mode"], "read");
  ASSERT_EQ(inspection["waiters"].size(), 1U) << json.out;
  EXPECT_EQ(inspection["waiters"][0]["mode"], "write");
  EXPECT_EQ(json.out.find(one->token.to_string()), std::string::npos) << "fences, not tokens";

  const Outcome text = run_cli(dir, {"admin", "show", "-s", server(daemon), "catalog", "rw"});
  ASSERT_EQ(text.code, kExitOk) << text.err;
  EXPECT_EQ(text.out.rfind("rw catalog: 2 holders (limit 1), 1 waiting\n", 0), 0U) << text.out;
  EXPECT_NE(text.out.find("holder  fence " + std::to_string(one->fence())), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("holder  fence " + std::to_string(two->fence())), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("waiter  #1  session "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("  write\n"), std::string::npos) << text.out;
  // The lock named catalog is another key: nobody there.
  const Outcome lock = run_cli(dir, {"admin", "show", "-s", server(daemon), "catalog"});
  ASSERT_EQ(lock.code, kExitOk) << lock.err;
  EXPECT_EQ(lock.out, "lock catalog: not held, nobody waiting\n");
  EXPECT_EQ(run_cli(dir, {"admin", "show", "-s", server(daemon), "catalog", "rwlock"}).code,
            kExitUsage);
  EXPECT_EQ(run_cli(dir, {"admin", "show", "-s", server(daemon)}).code, kExitUsage);
  EXPECT_EQ(run_cli(dir, {"admin", "frob", "-s", server(daemon), "catalog"}).code, kExitUsage);
}

// A mistaken --lock-delay of a day: a force-release starts it, and only --clear-delay ends it
// (issue 37 point 5); the next acquire is then granted at once, with a higher fence.
TEST(TurnstileCli, AdminReleaseWithClearDelayEndsTheLockDelay) {
  integration::HttpDaemon daemon({"--admin-token", kAdminToken, "--lock-delay", "86400"});
  TempDir dir;
  const std::string http = http_server(daemon);
  Connection holder = connect_to(*daemon.daemon);
  Connection other = connect_to(*daemon.daemon);
  auto grant = holder.lock("delayed", 0s, 60s);
  ASSERT_TRUE(grant.ok());
  const Outcome forced =
      run_cli(dir, {"admin", "release", "-s", http, "delayed", "--admin-token", kAdminToken});
  ASSERT_EQ(forced.code, kExitOk) << forced.err;
  EXPECT_EQ(forced.out, "released 1\n");
  // Nobody holds it, but the day-long delay the force started keeps it.
  EXPECT_EQ(code_of_lock(other.lock("delayed", 0s)), ErrorCode::kTimeout);
  const Outcome cleared = run_cli(dir, {"admin", "release", "-s", http, "delayed", "--clear-delay",
                                        "--admin-token", kAdminToken, "--json"});
  ASSERT_EQ(cleared.code, kExitOk) << cleared.err;
  EXPECT_EQ(Json::parse(cleared.out),
            (Json{{"ok", true}, {"released", 0}, {"delay_cleared", true}}))
      << cleared.out;
  auto next = other.lock("delayed", 0s, 60s);
  ASSERT_TRUE(next.ok()) << next.error().to_string();
  EXPECT_GT(next->fence(), grant->fence());
  // Freeing a holder with --clear-delay starts no delay; with nothing running it says so.
  const Outcome again = run_cli(dir, {"admin", "release", "-s", http, "delayed", "--clear-delay",
                                      "--admin-token", kAdminToken});
  ASSERT_EQ(again.code, kExitOk) << again.err;
  EXPECT_EQ(again.out, "released 1, no lock-delay was running\n");
  EXPECT_TRUE(holder.lock("delayed", 0s, 60s).ok());
}

TEST(TurnstileCli, AdminReleaseNeedsTheTokenAndFreesTheKey) {
  integration::HttpDaemon daemon({"--admin-token", kAdminToken});
  TempDir dir;
  const std::string http = http_server(daemon);
  Connection holder = connect_to(*daemon.daemon);
  Connection other = connect_to(*daemon.daemon);
  auto grant = holder.lock("stuck/job", 0s, 60s);
  ASSERT_TRUE(grant.ok());
  // No token: usage, before anything is sent. A wrong token: refused (77). Either way still held.
  EXPECT_EQ(run_cli(dir, {"admin", "release", "-s", http, "stuck/job"}).code, kExitUsage);
  const Outcome wrong =
      run_cli(dir, {"admin", "release", "-s", http, "stuck/job", "--admin-token", "nope"});
  EXPECT_EQ(wrong.code, kExitAuth) << wrong.err;
  EXPECT_EQ(code_of_lock(other.lock("stuck/job", 0s)), ErrorCode::kTimeout);
  // A fence nobody holds frees nothing.
  const Outcome missed =
      run_cli(dir, {"admin", "release", "-s", http, "stuck/job", "lock", "--fence",
                    std::to_string(grant->fence() + 1), "--admin-token", kAdminToken, "--json"});
  EXPECT_EQ(missed.code, kExitOk) << missed.err;
  EXPECT_EQ(Json::parse(missed.out), (Json{{"ok", true}, {"released", 0}})) << missed.out;
  EXPECT_EQ(code_of_lock(other.lock("stuck/job", 0s)), ErrorCode::kTimeout);
  // The token from the environment; the key needs percent-encoding on the way.
  Outcome freed;
  {
    ::setenv("TURNSTILE_ADMIN_TOKEN", kAdminToken, 1);
    freed = run_cli(dir, {"admin", "release", "-s", http, "stuck/job"});
    ::unsetenv("TURNSTILE_ADMIN_TOKEN");
  }
  EXPECT_EQ(freed.code, kExitOk) << freed.err;
  EXPECT_EQ(freed.out, "released 1\n");
  auto next = other.lock("stuck/job", 0s);
  ASSERT_TRUE(next.ok()) << next.error().to_string();
  EXPECT_GT(next->fence(), grant->fence());
  EXPECT_EQ(holder.release("stuck/job", grant->token).error().code, ErrorCode::kLeaseExpired);

  // Semaphores: --fence frees that holder alone.
  Connection a = connect_to(*daemon.daemon);
  Connection b = connect_to(*daemon.daemon);
  auto slot_a = a.sem_lock("pool", 0s, 2, 60s);
  auto slot_b = b.sem_lock("pool", 0s, 2, 60s);
  ASSERT_TRUE(slot_a.ok());
  ASSERT_TRUE(slot_b.ok());
  const Outcome one = run_cli(dir, {"admin", "release", "-s", http, "pool", "sem", "--fence",
                                    std::to_string(slot_a->fence()), "--admin-token", kAdminToken});
  EXPECT_EQ(one.code, kExitOk) << one.err;
  EXPECT_EQ(one.out, "released 1\n");
  EXPECT_EQ(a.check(core::Namespace::kSemaphore, "pool", slot_a->token).error().code,
            ErrorCode::kLeaseExpired);
  EXPECT_TRUE(b.check(core::Namespace::kSemaphore, "pool", slot_b->token).ok());
  EXPECT_EQ(run_cli(dir, {"admin", "release", "-s", http, "pool", "sem", "--fence", "0",
                          "--admin-token", kAdminToken})
                .code,
            kExitUsage);
  EXPECT_EQ(
      run_cli(dir, {"admin", "release", "-s", http, "pool", "--tls", "--admin-token", kAdminToken})
          .code,
      kExitUsage);
}

TEST(TurnstileCli, RunOverTls) {
  TempDir dir;
  const CertificateFiles files = integration::write_self_signed_certificate(dir.path());
  Daemon daemon({"--tls-cert", files.certificate_path, "--tls-key", files.key_path});
  const Outcome ok = run_cli(dir, {"run", "-s", server(daemon), "--tls-ca", files.certificate_path,
                                   "--tls-server-name", "localhost", "-k", "secure", "--", "true"});
  EXPECT_EQ(ok.code, 0) << ok.err;
  const Outcome unverified = run_cli(dir, {"ping", "-s", server(daemon), "--tls-ca",
                                           files.certificate_path});  // name 127.0.0.1 not in SAN
  EXPECT_EQ(unverified.code, kExitNoConnection) << unverified.err;
}

// --- listen, emit

SignalConnection signal_connection_to(const Daemon& daemon) {
  auto connection =
      SignalConnection::connect(Endpoint{"127.0.0.1", static_cast<std::uint16_t>(daemon.port())});
  if (!connection) throw std::runtime_error(connection.error().to_string());
  return std::move(*connection);
}

// Emits on `warmup` until the `listen` process counts as a listener (one delivery), so later
// signals reach it.
bool listener_ready(SignalConnection& emitter, const std::string& warmup) {
  return eventually(
      [&] {
        auto delivered = emitter.emit(warmup, "warmup");
        return delivered.ok() && *delivered == 1;
      },
      20s);
}

TEST(TurnstileCli, EmitPrintsTheDeliveryCount) {
  Daemon daemon;
  TempDir dir;
  SignalConnection listener = signal_connection_to(daemon);
  ASSERT_TRUE(listener.listen("cli.*").ok());
  const Outcome one = run_cli(dir, {"emit", "-s", server(daemon), "cli.orders", "order 7"});
  EXPECT_EQ(one.code, kExitOk) << one.err;
  EXPECT_EQ(one.out, "1\n");
  auto received = listener.next(5s);
  ASSERT_TRUE(received.ok() && received->has_value());
  EXPECT_EQ(**received, (Signal{"cli.orders", "order 7"}));

  const Outcome json = run_cli(dir, {"emit", "-s", server(daemon), "--json", "cli.x", "y"});
  EXPECT_EQ(json.code, kExitOk) << json.err;
  EXPECT_EQ(Json::parse(json.out), (Json{{"ok", true}, {"delivered", 1}}));
  const Outcome nobody = run_cli(dir, {"emit", "-s", server(daemon), "elsewhere", "z"});
  EXPECT_EQ(nobody.code, kExitOk) << nobody.err;
  EXPECT_EQ(nobody.out, "0\n");
  // A payload that begins with '-' goes after `--`.
  const Outcome dashed = run_cli(dir, {"emit", "-s", server(daemon), "--", "cli.neg", "-5"});
  EXPECT_EQ(dashed.code, kExitOk) << dashed.err;
  EXPECT_EQ(dashed.out, "1\n");

  // Refused before connecting: a wildcard channel, a blank payload, a missing word.
  const Outcome wildcard = run_cli(dir, {"emit", "-s", server(daemon), "cli.*", "x"});
  EXPECT_EQ(wildcard.code, kExitUsage);
  EXPECT_NE(wildcard.err.find("channel"), std::string::npos) << wildcard.err;
  EXPECT_EQ(run_cli(dir, {"emit", "-s", server(daemon), "cli.x", ""}).code, kExitUsage);
  EXPECT_EQ(run_cli(dir, {"emit", "-s", server(daemon), "cli.x"}).code, kExitUsage);
  EXPECT_EQ(run_cli(dir, {"listen", "-s", server(daemon), "a..b"}).code, kExitUsage);
  EXPECT_EQ(run_cli(dir, {"listen", "-s", server(daemon), "-s", server(daemon), "a"}).code,
            kExitUsage);
  Daemon dead;
  const int dead_port = dead.port();
  ASSERT_TRUE(dead.stop().has_value());
  EXPECT_EQ(run_cli(dir, {"emit", "-s", "127.0.0.1:" + std::to_string(dead_port), "a", "b"}).code,
            kExitNoConnection);
}

TEST(TurnstileCli, ListenPrintsSignalsUntilSigterm) {
  Daemon daemon;
  TempDir dir;
  Cli cli(dir, {"listen", "-s", server(daemon), "cli.>"});
  SignalConnection emitter = signal_connection_to(daemon);
  ASSERT_TRUE(listener_ready(emitter, "cli.warmup")) << cli.err();
  EXPECT_EQ(*emitter.emit("cli.orders.eu", "order 42 paid"), 1);
  EXPECT_TRUE(eventually(
      [&] { return cli.out().find("cli.orders.eu order 42 paid\n") != std::string::npos; }, 10s))
      << cli.out();
  cli.signal(SIGTERM);
  EXPECT_EQ(cli.wait(10s), kExitOk) << cli.err();
  // Every line is `<channel> <payload>`.
  std::stringstream lines(cli.out());
  for (std::string line; std::getline(lines, line);) {
    EXPECT_TRUE(line == "cli.warmup warmup" || line == "cli.orders.eu order 42 paid") << line;
  }

  // SIGINT ends it the same way, and a queue group is honoured.
  Cli grouped(dir, {"listen", "-s", server(daemon), "--group", "g", "cli.>"});
  ASSERT_TRUE(listener_ready(emitter, "cli.other")) << grouped.err();
  grouped.signal(SIGINT);
  EXPECT_EQ(grouped.wait(10s), kExitOk) << grouped.err();
}

TEST(TurnstileCli, ListenJsonPrintsValidJson) {
  Daemon daemon;
  TempDir dir;
  Cli cli(dir, {"listen", "-s", server(daemon), "--json", "ev.*"});
  SignalConnection emitter = signal_connection_to(daemon);
  ASSERT_TRUE(listener_ready(emitter, "ev.warmup")) << cli.err();
  const std::string payload = R"({"say":"hi "there"","path":"C:\tmp"})";
  EXPECT_EQ(*emitter.emit("ev.json", payload), 1);
  EXPECT_TRUE(eventually([&] { return cli.out().find("ev.json") != std::string::npos; }, 10s))
      << cli.out();
  cli.signal(SIGTERM);
  EXPECT_EQ(cli.wait(10s), kExitOk) << cli.err();
  std::stringstream lines(cli.out());
  bool found = false;
  for (std::string line; std::getline(lines, line);) {
    const Json parsed = Json::parse(line, nullptr, false);
    ASSERT_TRUE(parsed.is_object()) << line;
    EXPECT_EQ(parsed.size(), 2U) << line;
    if (parsed["channel"] == "ev.json") {
      EXPECT_EQ(parsed["payload"], payload);
      found = true;
    }
  }
  EXPECT_TRUE(found) << cli.out();
}

TEST(TurnstileCli, ListenFailsWhenTheServerGoes) {
  auto daemon = std::make_unique<Daemon>();
  TempDir dir;
  Cli cli(dir, {"listen", "-s", server(*daemon), "gone.*"});
  SignalConnection emitter = signal_connection_to(*daemon);
  ASSERT_TRUE(listener_ready(emitter, "gone.warmup")) << cli.err();
  emitter.close();
  daemon.reset();  // stopped: the listener is drained and closed
  const int code = cli.wait(20s);
  EXPECT_NE(code, kExitOk);
  EXPECT_NE(code, -1);
  EXPECT_NE(cli.err().find("turnstile listen"), std::string::npos) << cli.err();
}

// --servers: the nodes of one replicated cluster (three real nodes on loopback).
std::string members_of(const integration::LoopbackCluster& cluster) {
  std::string list;
  for (std::size_t i = 0; i < cluster.size(); ++i) {
    list += (i == 0 ? "" : ",") + cluster.address(i);
  }
  return list;
}

TEST(TurnstileCli, ServersFindTheClusterLeader) {
  // Without auto-release the lock outlives the acquire command's connection.
  integration::LoopbackCluster cluster({.nodes = 3,
                                        .voters = 3,
                                        .extra_args = {"--auto-release-on-disconnect=false"},
                                        .start_attempts = 3});
  const std::optional<std::size_t> leader = cluster.leader();
  ASSERT_TRUE(leader);
  TempDir dir;
  const Outcome acquired =
      run_cli(dir, {"acquire", "--servers", members_of(cluster), "--key", "job", "--json"});
  ASSERT_EQ(acquired.code, kExitOk) << acquired.err;
  const Json grant = Json::parse(acquired.out);
  EXPECT_EQ(grant["server"], cluster.address(*leader));
  const std::string token = grant["token"];
  EXPECT_EQ(
      run_cli(dir, {"renew", "--servers", members_of(cluster), "--key", "job", "--token", token})
          .code,
      kExitOk);
  EXPECT_EQ(
      run_cli(dir, {"release", "--servers", members_of(cluster), "--key", "job", "--token", token})
          .code,
      kExitOk);
  // Every node answers ping.
  EXPECT_EQ(run_cli(dir, {"ping", "--servers", members_of(cluster)}).code, kExitOk);
  EXPECT_EQ(run_cli(dir, {"ping", "--servers", members_of(cluster), "-s", cluster.address(0)}).code,
            kExitUsage);
  EXPECT_EQ(run_cli(dir, {"ping", "--servers", ","}).code, kExitUsage);

  // cluster status: every node's view, one of them leading.
  const Outcome status = run_cli(dir, {"cluster", "status", "--servers", members_of(cluster)});
  ASSERT_EQ(status.code, kExitOk) << status.err;
  EXPECT_NE(status.out.find(cluster.address(*leader) + " node " + std::to_string(*leader + 1) +
                            " leader term"),
            std::string::npos)
      << status.out;
  EXPECT_EQ(std::count(status.out.begin(), status.out.end(), '\n'), 3) << status.out;
  const Outcome status_json =
      run_cli(dir, {"cluster", "status", "-S", members_of(cluster), "--json"});
  ASSERT_EQ(status_json.code, kExitOk) << status_json.err;
  EXPECT_EQ(Json::parse(status_json.out.substr(0, status_json.out.find('\n')))["cluster"]["voters"],
            Json::parse("[1,2,3]"));
  // A node down: status says so and exits 1.
  ASSERT_TRUE(cluster.kill((*leader + 1) % cluster.size()));
  EXPECT_EQ(run_cli(dir, {"cluster", "status", "--servers", members_of(cluster)}).code,
            kExitNoConnection);
}

TEST(TurnstileCli, RunKeepsTheCommandThroughAFailover) {
  integration::LoopbackCluster cluster;
  const std::optional<std::size_t> first = cluster.leader();
  ASSERT_TRUE(first);
  TempDir dir;
  const std::string ready = dir.file("ready");
  const std::string finished = dir.file("finished");
  Cli cli(dir, {"run", "--servers", members_of(cluster), "-k", "nightly", "--lease", "4", "--",
                "sh", "-c", "echo > '" + ready + "'; sleep 8; echo > '" + finished + "'"});
  ASSERT_TRUE(eventually([&] { return exists(ready); }, 20s));
  ASSERT_TRUE(cluster.kill(*first));
  EXPECT_EQ(cli.wait(40s), kExitOk) << cli.err();
  EXPECT_TRUE(exists(finished));
  EXPECT_NE(cli.err().find("now renewed with the leader"), std::string::npos) << cli.err();
}

TEST(TurnstileCli, RunEndsTheCommandWhenTheClusterLosesItsMajority) {
  integration::LoopbackCluster cluster;
  const std::optional<std::size_t> first = cluster.leader();
  ASSERT_TRUE(first);
  TempDir dir;
  const std::string ready = dir.file("ready");
  Cli cli(dir, {"run", "--servers", members_of(cluster), "-k", "nightly", "--lease", "3", "--",
                "sh", "-c", "echo > '" + ready + "'; exec sleep 60"});
  ASSERT_TRUE(eventually([&] { return exists(ready); }, 20s));
  ASSERT_TRUE(cluster.kill(*first));
  ASSERT_TRUE(cluster.kill((*first + 1) % cluster.size()));
  EXPECT_EQ(cli.wait(30s), kExitLockLost) << cli.err();
  EXPECT_NE(cli.err().find("lost the lock"), std::string::npos) << cli.err();
}

}  // namespace
}  // namespace turnstile::client
