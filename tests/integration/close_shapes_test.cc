// Every way a client can leave, in every state its session can be in (docs/reliability.md's "every
// close shape" row): {half-close, full close, reset} x {idle, auth pending (a wrong token, `ping`
// first, a malformed first request), pipelined, unread replies, parked, mid-request, draining}, on
// plain TCP and on TLS, with and without --auth-token.
//
// Each case starts its own daemon and checks three things:
//  * the reply owed is sent: after a half-close the client still reads every reply to what it
//    sent before its EOF (an auth failure's `error_auth` after the full 100 ms), then the
//    server's EOF; after a full close or a reset the session's effects are undone (its locks
//    released, its parked acquire withdrawn);
//  * the socket closes: no server-side socket is left on the port but those of clients still
//    connected (a socket in CLOSE-WAIT would be counted);
//  * the server goes back to idle: its CPU time over the next half second stays near zero (a
//    shard that re-reads an EOF in a loop burns most of a core).
// The draining case checks that the daemon exits as soon as the last session is gone, well
// before --shutdown-timeout.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/harness.h"

namespace turnstile::integration {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kSecret = "s3cret";

enum class Transport { kPlain, kTls };
enum class State {
  kIdle,
  kAuthWrongToken,
  kAuthNotAuth,  // issue 19's reproduction: `ping` first, as the README's nc example sends
  kAuthMalformed,
  kPipelined,
  kUnreadReplies,  // every request read, its replies waiting for a client that does not read
  kParked,
  kMidRequest,
  kDraining,
};
enum class Shape { kHalfClose, kFullClose, kReset };

struct Case {
  Transport transport;
  bool auth;
  State state;
  Shape shape;
};

const char* name_of(State state) {
  switch (state) {
    case State::kIdle:
      return "Idle";
    case State::kAuthWrongToken:
      return "AuthWrongToken";
    case State::kAuthNotAuth:
      return "AuthNotAuth";
    case State::kAuthMalformed:
      return "AuthMalformed";
    case State::kPipelined:
      return "Pipelined";
    case State::kUnreadReplies:
      return "UnreadReplies";
    case State::kParked:
      return "Parked";
    case State::kMidRequest:
      return "MidRequest";
    case State::kDraining:
      return "Draining";
  }
  return "?";
}

const char* name_of(Shape shape) {
  switch (shape) {
    case Shape::kHalfClose:
      return "HalfClose";
    case Shape::kFullClose:
      return "FullClose";
    case Shape::kReset:
      return "Reset";
  }
  return "?";
}

std::string case_name(const testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return std::string(c.transport == Transport::kTls ? "Tls" : "Plain") +
         (c.auth ? "Auth" : "Open") + "_" + name_of(c.state) + "_" + name_of(c.shape);
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (Transport transport : {Transport::kPlain, Transport::kTls}) {
    for (bool auth : {false, true}) {
      for (State state : {State::kIdle, State::kAuthWrongToken, State::kAuthNotAuth,
                          State::kAuthMalformed, State::kPipelined, State::kUnreadReplies,
                          State::kParked, State::kMidRequest, State::kDraining}) {
        const bool auth_state = state == State::kAuthWrongToken || state == State::kAuthNotAuth ||
                                state == State::kAuthMalformed;
        if (auth_state && !auth) continue;  // there is no handshake to fail
        for (Shape shape : {Shape::kHalfClose, Shape::kFullClose, Shape::kReset}) {
          cases.push_back({transport, auth, state, shape});
        }
      }
    }
  }
  return cases;
}

std::string read_text(const std::string& path) {
  std::ifstream file(path);
  return std::string((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
}

// User plus system CPU time of the whole process, in clock ticks.
long cpu_ticks(pid_t pid) {
  const std::string stat = read_text("/proc/" + std::to_string(pid) + "/stat");
  const std::size_t end_of_name = stat.rfind(')');
  if (end_of_name == std::string::npos) return -1;
  std::istringstream fields(stat.substr(end_of_name + 2));
  std::string field;
  long utime = 0;
  long stime = 0;
  // Fields after the name start at 3 (state); utime and stime are fields 14 and 15.
  for (int index = 3; index <= 15 && fields >> field; ++index) {
    if (index == 14) utime = std::stol(field);
    if (index == 15) stime = std::stol(field);
  }
  return utime + stime;
}

// Server-side TCP sockets on `port` that are not listening and not in TIME-WAIT: one per
// connection the server still holds, in whatever state (ESTABLISHED, CLOSE-WAIT, LAST-ACK...).
int server_sockets(int port) {
  int count = 0;
  for (const char* table : {"/proc/self/net/tcp", "/proc/self/net/tcp6"}) {
    std::istringstream lines(read_text(table));
    std::string line;
    std::getline(lines, line);  // the header
    while (std::getline(lines, line)) {
      std::istringstream fields(line);
      std::string slot;
      std::string local;
      std::string remote;
      std::string state;
      fields >> slot >> local >> remote >> state;
      const std::size_t colon = local.rfind(':');
      if (colon == std::string::npos) continue;
      if (std::stoi(local.substr(colon + 1), nullptr, 16) != port) continue;
      if (state == "0A" /* LISTEN */ || state == "06" /* TIME-WAIT */) continue;
      ++count;
    }
  }
  return count;
}

class CloseShapes : public testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const Case& c = GetParam();
    std::vector<std::string> args = {"--threads", "2", "--huge-pages=false", "--shutdown-timeout",
                                     "20"};
    if (c.transport == Transport::kTls) {
      const CertificateFiles files = write_self_signed_certificate(dir_.path());
      args.insert(args.end(), {"--tls-cert", files.certificate_path, "--tls-key", files.key_path});
    }
    if (c.auth) args.insert(args.end(), {"--auth-token", kSecret});
    // Draining: the holder is closed when the drain begins, and must not hand its lock to the
    // parked client (which would then be answered and closed before it can leave).
    if (c.state == State::kDraining) args.push_back("--auto-release-on-disconnect=false");
    daemon_.emplace(args);
  }

  // Every case ends with a server that stops at once on SIGTERM: no session it forgot keeps the
  // drain waiting for --shutdown-timeout.
  void TearDown() override {
    if (!daemon_ || !daemon_->running()) return;
    const auto signalled = Clock::now();
    const std::optional<int> status = daemon_->stop(5s);
    ASSERT_TRUE(status.has_value()) << "no exit within 5 s of SIGTERM";
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *status;
    EXPECT_LT(Clock::now() - signalled, 2s);
  }

  Client connect(int receive_buffer_bytes = 0) {
    ClientOptions options;
    options.tls = GetParam().transport == Transport::kTls;
    options.receive_buffer_bytes = receive_buffer_bytes;
    return Client(daemon_->port(), options);
  }

  // A connected client, authenticated when the daemon wants it.
  Client ready_client(int receive_buffer_bytes = 0) {
    Client client = connect(receive_buffer_bytes);
    if (GetParam().auth) {
      EXPECT_EQ(client.request("auth", "_", kSecret), "ok");
    }
    return client;
  }

  static void leave(Client& client, Shape shape) {
    switch (shape) {
      case Shape::kHalfClose:
        client.shutdown_write();
        break;
      case Shape::kFullClose:
        client.close();
        break;
      case Shape::kReset:
        client.abort();
        break;
    }
  }

  // After a half-close: exactly `owed` lines (a line ending in '*' matches any line with that
  // prefix), then the server's EOF.
  static void expect_owed_then_eof(Client& client, const std::vector<std::string>& owed) {
    for (const std::string& expected : owed) {
      const std::optional<std::string> line = client.read_line(3s);
      ASSERT_TRUE(line.has_value())
          << "no reply, expected " << expected << (client.eof() ? " (EOF)" : " (timeout)");
      if (!expected.empty() && expected.back() == '*') {
        EXPECT_EQ(line->rfind(expected.substr(0, expected.size() - 1), 0), 0U)
            << *line << " vs " << expected;
      } else {
        EXPECT_EQ(*line, expected);
      }
    }
    EXPECT_TRUE(client.closed_by_peer(3s)) << "the server did not close after the owed replies";
    EXPECT_EQ(client.pending(), "") << "bytes after the owed replies";
  }

  // The server holds sockets for exactly `clients` connections, and its CPU stays near idle.
  void expect_closed_and_idle(int clients) {
    const int port = daemon_->port();
    EXPECT_TRUE(eventually([&] { return server_sockets(port) == clients; }, 3s))
        << server_sockets(port) << " server sockets on the port, expected " << clients;
    expect_idle();
  }

  void expect_idle() {
    std::this_thread::sleep_for(100ms);  // let polling windows close
    const long before = cpu_ticks(daemon_->pid());
    std::this_thread::sleep_for(500ms);
    const long used = cpu_ticks(daemon_->pid()) - before;
    const long hz = sysconf(_SC_CLK_TCK);
    // An idle server sleeps in epoll_wait; a spinning shard would use ~250 ms of the 500.
    EXPECT_LE(used * 1000 / hz, 60) << "the server used " << used << " ticks of CPU in 500 ms idle";
    EXPECT_TRUE(daemon_->running());
  }

  // True once a fresh client gets `key` with a zero timeout (it then releases it).
  bool free_now(const std::string& key) {
    Client checker = ready_client();
    const std::string reply = checker.request("l", key, "0");
    if (reply.rfind("ok ", 0) != 0) return false;
    const std::vector<std::string> parts = fields(reply);
    return checker.request("r", key, parts.at(1)) == "ok";
  }

  TempDir dir_;
  std::optional<Daemon> daemon_;
};

// Keys spread over both shards, so that pipelined and parked requests cross shards.
std::vector<std::string> spread_keys() {
  std::vector<std::string> keys;
  for (int i = 0; i < 8; ++i) keys.push_back("close-shape-" + std::to_string(i));
  return keys;
}

TEST_P(CloseShapes, TheReplyOwedIsSentTheSocketClosesAndTheServerIdles) {
  const Case c = GetParam();
  const auto started = Clock::now();
  switch (c.state) {
    case State::kIdle: {
      Client client = ready_client();
      ASSERT_EQ(client.request("ping", "_", ""), "ok");
      leave(client, c.shape);
      if (c.shape == Shape::kHalfClose) expect_owed_then_eof(client, {});
      client.close();
      expect_closed_and_idle(0);
      break;
    }
    case State::kAuthWrongToken:
    case State::kAuthNotAuth:
    case State::kAuthMalformed: {
      Client client = connect();
      const std::string first = c.state == State::kAuthWrongToken ? frame("auth", "_", "wrong")
                                : c.state == State::kAuthNotAuth  ? frame("ping", "_", "_")
                                                                  : frame("zap", "_", "_");
      const auto sent = Clock::now();
      ASSERT_TRUE(client.send(first));
      leave(client, c.shape);
      if (c.shape == Shape::kHalfClose) {
        expect_owed_then_eof(client, {"error_auth"});
        EXPECT_GE(Clock::now() - sent, 100ms) << "error_auth before the 100 ms delay";
      }
      client.close();
      expect_closed_and_idle(0);
      break;
    }
    case State::kPipelined: {
      Client client = ready_client();
      std::string batch;
      std::vector<std::string> owed;
      for (const std::string& key : spread_keys()) {
        batch += frame("ping", "_", "") + frame("l", key, "0 30");
        owed.insert(owed.end(), {"ok", "ok *"});
      }
      ASSERT_TRUE(client.send(batch));
      leave(client, c.shape);
      if (c.shape == Shape::kHalfClose) expect_owed_then_eof(client, owed);
      client.close();
      // Whatever was granted went back with the connection (auto-release).
      for (const std::string& key : spread_keys()) {
        EXPECT_TRUE(eventually([&] { return free_now(key); }, 3s)) << key << " still held";
      }
      expect_closed_and_idle(0);
      break;
    }
    case State::kUnreadReplies: {
      // Stats replies of about 90 KiB each (1,000 locks held), 9 MiB in all: far more than the
      // socket buffers hold (a few MiB on loopback) while the client reads nothing.
      Client holder = ready_client();
      std::string locks;
      for (int i = 0; i < 1000; ++i) {
        locks += frame("l", "close-shape-held-" + std::to_string(i), "0");
      }
      ASSERT_TRUE(holder.send(locks));
      for (int i = 0; i < 1000; ++i) {
        ASSERT_EQ(holder.read_line().value_or("").rfind("ok ", 0), 0U);
      }
      Client client = ready_client(4096);
      std::string batch;
      std::vector<std::string> owed;
      for (int i = 0; i < 100; ++i) {
        batch += frame("stats", "_", "");
        owed.push_back("ok {*");
      }
      ASSERT_TRUE(client.send(batch));
      std::this_thread::sleep_for(200ms);  // every request read, the EOF too
      leave(client, c.shape);
      expect_idle();  // the replies wait; nothing spins meanwhile
      if (c.shape == Shape::kHalfClose) expect_owed_then_eof(client, owed);
      client.close();
      expect_closed_and_idle(1);  // the holder
      break;
    }
    case State::kParked: {
      Client holder = ready_client();
      const std::vector<std::string> keys = spread_keys();
      std::vector<std::string> tokens;
      for (const std::string& key : keys) {
        const std::string grant = holder.request("l", key, "0 30");
        ASSERT_EQ(grant.rfind("ok ", 0), 0U) << grant;
        tokens.push_back(fields(grant).at(1));
      }
      Client client = ready_client();
      ASSERT_TRUE(client.send(frame("l", keys[0], "30 30")));  // parks behind the holder
      ASSERT_TRUE(eventually(
          [&] {
            Client observer = ready_client();
            return observer.request("stats", "_", "").find("\"waiters\":1") != std::string::npos;
          },
          3s));
      leave(client, c.shape);
      if (c.shape == Shape::kHalfClose) expect_owed_then_eof(client, {});
      client.close();
      // The parked acquire was withdrawn: once the holder lets go, the key is free.
      ASSERT_TRUE(eventually(
          [&] {
            Client observer = ready_client();
            return observer.request("stats", "_", "").find("\"waiters\":1") == std::string::npos;
          },
          3s));
      ASSERT_EQ(holder.request("r", keys[0], tokens[0]), "ok");
      EXPECT_TRUE(free_now(keys[0]));
      expect_closed_and_idle(1);  // the holder
      break;
    }
    case State::kMidRequest: {
      Client client = ready_client();
      ASSERT_TRUE(client.send("l\nclose-shape-partial"));  // no newline: the request is unfinished
      leave(client, c.shape);
      if (c.shape == Shape::kHalfClose) expect_owed_then_eof(client, {});
      client.close();
      expect_closed_and_idle(0);
      break;
    }
    case State::kDraining: {
      Client holder = ready_client();
      const std::string grant = holder.request("l", "close-shape-drain", "0 30");
      ASSERT_EQ(grant.rfind("ok ", 0), 0U) << grant;
      Client client = ready_client();
      ASSERT_TRUE(client.send(frame("l", "close-shape-drain", "30 30")));
      std::this_thread::sleep_for(100ms);  // parked
      daemon_->signal(SIGTERM);
      // The idle holder is answered and closed at once; the parked client keeps the drain going.
      EXPECT_EQ(holder.read_line(3s), "error_draining");
      ASSERT_TRUE(daemon_->wait_for_log("draining", 3s));
      std::this_thread::sleep_for(100ms);
      const auto left = Clock::now();
      leave(client, c.shape);
      if (c.shape == Shape::kHalfClose) expect_owed_then_eof(client, {});
      client.close();
      holder.close();
      const std::optional<int> status = daemon_->wait_exit(5s);
      ASSERT_TRUE(status.has_value()) << "still draining 5 s after the last client left";
      EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *status;
      EXPECT_LT(Clock::now() - left, 3s);
      break;
    }
  }
  EXPECT_LT(Clock::now() - started, 15s);
}

INSTANTIATE_TEST_SUITE_P(EveryStateAndShape, CloseShapes, testing::ValuesIn(all_cases()),
                         case_name);

}  // namespace
}  // namespace turnstile::integration
