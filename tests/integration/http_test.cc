// Integration tests of the HTTP API (docs/http-api.md; reference section 3): a real turnstiled
// with --http-port on 127.0.0.1, real HTTP/1.1 over loopback through the small keep-alive client
// below. Every endpoint, status code and error body; TCP and HTTP sessions on one FIFO queue; long
// polls woken by a release, a timeout and a session delete; a client leaving during a long poll;
// read-write locks (readers together, a queued writer ahead of later readers, two-phase, the
// side a token belongs to, what a deleted session gives back);
// the reaper; auth, rate limit, CORS; oversized and malformed bodies; /metrics as Prometheus
// text; and the OpenAPI drift check against docs/openapi.json and core/http_codec.h.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "client/http_response.h"
#include "core/http_codec.h"
#include "tests/integration/harness.h"

namespace turnstile::integration {
namespace {

using Json = nlohmann::json;

// HttpResult with its body parsed as JSON (null when the body is empty).
struct Response : HttpResult {
  Json json() const { return body.empty() ? Json() : Json::parse(body); }
};

// One HTTP/1.1 connection (keep-alive) with a deadline on every call.
class Http {
 public:
  explicit Http(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      throw std::runtime_error("cannot connect to the HTTP port");
    }
    const int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~Http() { close(); }
  Http(const Http&) = delete;
  Http& operator=(const Http&) = delete;

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd() const { return fd_; }

  bool send_request(const std::string& method, const std::string& path, const std::string& body,
                    const std::vector<std::string>& headers) {
    std::string request = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
    for (const std::string& header : headers) request += header + "\r\n";
    if (!body.empty() || method == "POST") {
      request += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    }
    request += "\r\n" + body;
    std::size_t sent = 0;
    while (sent < request.size()) {
      const ssize_t n = ::send(fd_, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<std::size_t>(n);
    }
    return true;
  }

  // The next response, its body framed by Content-Length; status 0 when it is not complete within
  // `timeout`.
  Response read_response(milliseconds timeout = 10s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (buffer_.find("\r\n\r\n") == std::string::npos) {
      if (!fill(deadline)) return Response{};
    }
    std::optional<client::HttpResponseHead> head = client::parse_http_response_head(buffer_);
    if (!head) return Response{};
    const auto length_header = head->headers.find("content-length");
    const std::size_t size =
        head->size + (length_header != head->headers.end() ? std::stoul(length_header->second) : 0);
    while (buffer_.size() < size) {
      if (!fill(deadline)) return Response{};
    }
    Response response;
    response.status = head->status;
    response.headers = std::move(head->headers);
    response.raw = buffer_.substr(0, size);
    response.body = response.raw.substr(head->size);
    buffer_.erase(0, size);
    return response;
  }

  Response request(const std::string& method, const std::string& path, const std::string& body = "",
                   const std::vector<std::string>& headers = {}, milliseconds timeout = 10s) {
    if (!send_request(method, path, body, headers)) return Response{};
    return read_response(timeout);
  }

 private:
  bool fill(std::chrono::steady_clock::time_point deadline) {
    const auto left =
        std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    char chunk[65536];
    const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
    if (n <= 0) return false;
    buffer_.append(chunk, static_cast<std::size_t>(n));
    return true;
  }

  int fd_ = -1;
  std::string buffer_;
};

// The harness's HttpDaemon with --debug, and calls to its API each on a connection of its own.
struct HttpServer : HttpDaemon {
  explicit HttpServer(std::vector<std::string> args = {})
      : HttpDaemon(with_debug(std::move(args))) {}
  static std::vector<std::string> with_debug(std::vector<std::string> args) {
    args.push_back("--debug");
    return args;
  }
  Response call(const std::string& method, const std::string& path, const std::string& body = "",
                const std::vector<std::string>& headers = {}, milliseconds timeout = 10s) const {
    Http http(http_port);
    return http.request(method, path, body, headers, timeout);
  }
  std::string new_session() const {
    const Response created = call("POST", "/v1/sessions");
    EXPECT_EQ(created.status, 200) << created.body;
    return created.json().value("session_id", "");
  }
  Json stats() const { return call("GET", "/v1/stats").json(); }
  std::int64_t waiters(const std::string& key) const {
    const Json all = stats();  // kept alive: the loop reads into it
    for (const Json& lock : all["locks"]) {
      if (lock["key"] == key) return lock["waiters"].get<std::int64_t>();
    }
    return 0;
  }
};

std::string session_header(const std::string& id) { return "X-Dflockd-Session: " + id; }

void expect_error(const Response& response, int status, const std::string& error) {
  EXPECT_EQ(response.status, status) << response.body;
  EXPECT_EQ(response.header("content-type"), "application/json");
  EXPECT_EQ(response.header("x-content-type-options"), "nosniff");
  ASSERT_FALSE(response.body.empty());
  EXPECT_EQ(response.body.back(), '\n');
  EXPECT_EQ(response.json().value("error", ""), error) << response.body;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// ---- endpoints ---------------------------------------------------------------------------------

TEST(HttpApi, HealthReadyStatsNotFoundAndMethodNotAllowed) {
  HttpServer server;
  Response health = server.call("GET", "/health");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.body, "{\"status\":\"ok\"}\n");
  EXPECT_EQ(health.header("content-type"), "application/json");
  Response ready = server.call("GET", "/ready");
  EXPECT_EQ(ready.status, 200);
  EXPECT_EQ(ready.body, "{\"status\":\"ok\"}\n");
  Response stats = server.call("GET", "/v1/stats");
  ASSERT_EQ(stats.status, 200);
  const Json json = stats.json();
  for (const char* field : {"locks", "semaphores", "idle_locks", "idle_semaphores"}) {
    EXPECT_TRUE(json[field].is_array()) << field;
  }
  EXPECT_EQ(json["connections"], 0);
  expect_error(server.call("GET", "/nope"), 404, "not_found");
  expect_error(server.call("GET", "/v1/locks/a/b/c"), 404, "not_found");
  Response wrong = server.call("GET", "/v1/locks/k/release");
  expect_error(wrong, 405, "method_not_allowed");
  EXPECT_EQ(wrong.header("allow"), "POST");
  EXPECT_EQ(server.call("PUT", "/v1/locks/k").header("allow"), "POST, GET, HEAD");
  EXPECT_EQ(server.call("DELETE", "/v1/stats").header("allow"), "GET, HEAD");
}

TEST(HttpApi, SessionCreatePingDelete) {
  HttpServer server({"--http-session-idle-timeout=7"});
  const Response created = server.call("POST", "/v1/sessions");
  ASSERT_EQ(created.status, 200);
  const std::string id = created.json()["session_id"];
  EXPECT_TRUE(std::regex_match(id, std::regex("[0-9a-f]{32}")));
  EXPECT_EQ(created.json()["idle_timeout_s"], 7);
  EXPECT_EQ(server.call("POST", "/v1/sessions/" + id + "/ping").status, 204);
  EXPECT_EQ(server.stats()["connections"], 1);  // TCP connections + live HTTP sessions
  EXPECT_EQ(server.call("DELETE", "/v1/sessions/" + id).status, 204);
  expect_error(server.call("DELETE", "/v1/sessions/" + id), 410, "session_gone");
  expect_error(server.call("POST", "/v1/sessions/" + id + "/ping"), 410, "session_gone");
  expect_error(server.call("DELETE", "/v1/sessions/XYZ"), 400, "bad_request");
  expect_error(server.call("POST", "/v1/sessions/" + std::string(32, 'A') + "/ping"), 400,
               "bad_request");
  EXPECT_EQ(server.stats()["connections"], 0);
  // Lock calls need a live session.
  expect_error(server.call("POST", "/v1/locks/k", "{}"), 400, "bad_request");
  expect_error(server.call("POST", "/v1/locks/k", "{}", {session_header("zz")}), 400,
               "bad_request");
  expect_error(server.call("POST", "/v1/locks/k", "{}", {session_header(id)}), 410, "session_gone");
}

TEST(HttpApi, LockAcquireRenewReleaseAndTimeout) {
  HttpServer server({"--default-lease-ttl=40"});
  const std::string a = server.new_session();
  const std::string b = server.new_session();
  Response acquired =
      server.call("POST", "/v1/locks/job", "{\"acquire_timeout_s\":0}", {session_header(a)});
  ASSERT_EQ(acquired.status, 200);
  const Json grant = acquired.json();
  EXPECT_EQ(grant["status"], "ok");
  EXPECT_EQ(grant["lease_ttl_s"], 40);  // lease omitted: the server default
  const std::string token = grant["token"];
  EXPECT_TRUE(std::regex_match(token, std::regex("[0-9a-f]{32}")));
  Response timeout =
      server.call("POST", "/v1/locks/job", "{\"acquire_timeout_s\":0}", {session_header(b)});
  EXPECT_EQ(timeout.status, 200);
  EXPECT_EQ(timeout.body, "{\"status\":\"timeout\"}\n");
  Response renewed =
      server.call("POST", "/v1/locks/job/renew", "{\"token\":\"" + token + "\",\"lease_ttl_s\":9}",
                  {session_header(b)});  // the token is the capability
  EXPECT_EQ(renewed.status, 200);
  EXPECT_EQ(renewed.body, "{\"remaining_s\":9}\n");
  Response renewed_default =
      server.call("POST", "/v1/locks/job/renew", "{\"token\":\"" + token + "\",\"lease_ttl_s\":0}",
                  {session_header(a)});
  EXPECT_EQ(renewed_default.json()["remaining_s"], 40);
  Response released = server.call("POST", "/v1/locks/job/release", "{\"token\":\"" + token + "\"}",
                                  {session_header(a)});
  EXPECT_EQ(released.status, 204);
  EXPECT_TRUE(released.body.empty());
  expect_error(server.call("POST", "/v1/locks/job/release", "{\"token\":\"" + token + "\"}",
                           {session_header(a)}),
               404, "not_held");
  expect_error(server.call("POST", "/v1/locks/job/renew", "{\"token\":\"" + token + "\"}",
                           {session_header(a)}),
               404, "not_held");
  expect_error(
      server.call("POST", "/v1/locks/job/release", "{\"token\":\"abc\"}", {session_header(a)}), 404,
      "not_held");
  Response leased = server.call("POST", "/v1/locks/job",
                                "{\"acquire_timeout_s\":0,\"lease_ttl_s\":5}", {session_header(b)});
  EXPECT_EQ(leased.json()["lease_ttl_s"], 5);
  // Locks and semaphores are separate namespaces.
  Response semaphore = server.call("POST", "/v1/semaphores/job",
                                   "{\"acquire_timeout_s\":0,\"limit\":2}", {session_header(a)});
  EXPECT_EQ(semaphore.json()["status"], "ok");
}

TEST(HttpApi, TwoPhaseEnqueueAndWait) {
  HttpServer server;
  const std::string a = server.new_session();
  const std::string b = server.new_session();
  Response first = server.call("POST", "/v1/locks/k/enqueue", "", {session_header(a)});
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(first.json()["status"], "acquired");
  const std::string token = first.json()["token"];
  EXPECT_EQ(first.json()["lease_ttl_s"], 33);
  Response queued =
      server.call("POST", "/v1/locks/k/enqueue", "{\"lease_ttl_s\":6}", {session_header(b)});
  EXPECT_EQ(queued.body, "{\"status\":\"queued\"}\n");
  expect_error(server.call("POST", "/v1/locks/k/enqueue", "{}", {session_header(b)}), 409,
               "already_enqueued");
  // b waits; a's release grants it.
  Http waiter(server.http_port);
  ASSERT_TRUE(
      waiter.send_request("POST", "/v1/locks/k/wait", "{\"timeout_s\":30}", {session_header(b)}));
  Response a_wait =
      server.call("POST", "/v1/locks/k/wait", "{\"timeout_s\":0}", {session_header(a)});
  EXPECT_EQ(a_wait.json()["status"], "ok");  // fast-path grant, delivered by wait
  EXPECT_EQ(
      server
          .call("POST", "/v1/locks/k/release", "{\"token\":\"" + token + "\"}", {session_header(a)})
          .status,
      204);
  Response granted = waiter.read_response();
  EXPECT_EQ(granted.status, 200);
  EXPECT_EQ(granted.json()["status"], "ok");
  EXPECT_EQ(granted.json()["lease_ttl_s"], 6);
  expect_error(server.call("POST", "/v1/locks/k/wait", "{\"timeout_s\":0}", {session_header(b)}),
               409, "not_enqueued");
}

TEST(HttpApi, SemaphoresLimitsAndMismatch) {
  HttpServer server;
  const std::string a = server.new_session();
  const std::string body = "{\"acquire_timeout_s\":0,\"limit\":2}";
  EXPECT_EQ(server.call("POST", "/v1/semaphores/s", body, {session_header(a)}).json()["status"],
            "ok");
  EXPECT_EQ(server.call("POST", "/v1/semaphores/s", body, {session_header(a)}).json()["status"],
            "ok");
  EXPECT_EQ(server.call("POST", "/v1/semaphores/s", body, {session_header(a)}).json()["status"],
            "timeout");
  expect_error(server.call("POST", "/v1/semaphores/s", "{\"acquire_timeout_s\":0,\"limit\":3}",
                           {session_header(a)}),
               409, "limit_mismatch");
  expect_error(
      server.call("POST", "/v1/semaphores/s", "{\"acquire_timeout_s\":0}", {session_header(a)}),
      400, "bad_request");
  expect_error(server.call("POST", "/v1/semaphores/s/enqueue", "", {session_header(a)}), 400,
               "bad_request");
  Response enqueued =
      server.call("POST", "/v1/semaphores/t/enqueue", "{\"limit\":3}", {session_header(a)});
  EXPECT_EQ(enqueued.json()["status"], "acquired");
  Response waited =
      server.call("POST", "/v1/semaphores/t/wait", "{\"timeout_s\":0}", {session_header(a)});
  EXPECT_EQ(waited.json()["status"], "ok");
  const Json stats = server.stats();
  ASSERT_EQ(stats["semaphores"].size(), 2U);
  EXPECT_EQ(stats["semaphores"][0]["key"], "s");
  EXPECT_EQ(stats["semaphores"][0]["holders"], 2);
}

TEST(HttpApi, MaxLocksAndMaxWaitersAre503) {
  HttpServer server({"--max-locks=1", "--max-waiters=1"});
  const std::string a = server.new_session();
  const std::string b = server.new_session();
  const std::string c = server.new_session();
  ASSERT_EQ(server.call("POST", "/v1/locks/one", "{}", {session_header(a)}).json()["status"], "ok");
  expect_error(server.call("POST", "/v1/locks/two", "{}", {session_header(a)}), 503, "max_locks");
  ASSERT_EQ(server.call("POST", "/v1/locks/one/enqueue", "", {session_header(b)}).json()["status"],
            "queued");
  expect_error(server.call("POST", "/v1/locks/one/enqueue", "", {session_header(c)}), 503,
               "max_waiters");
}

// With the fence journal unable to make a reservation durable, an acquire that needs a fence is
// 503 fence_persistence (reference 3.5); acquires resume once a write succeeds.
TEST(HttpApi, NoDurableFenceIs503FencePersistence) {
  TempDir dir;
  HttpServer server({"--fence-state-file", dir.file("fences"), "--test-fence-range", "4",
                     "--test-fence-write-failures", "1000"});
  const std::string a = server.new_session();
  int granted = 0;
  Response refused;
  for (int i = 0; i < 10 && refused.status == 0; ++i) {
    const Response acquired = server.call("POST", "/v1/locks/k", "{}", {session_header(a)});
    if (acquired.status != 200) {
      refused = acquired;
      break;
    }
    ++granted;
    const std::string token = acquired.json()["token"];
    ASSERT_EQ(
        server
            .call("POST", "/v1/locks/k/release", Json{{"token", token}}.dump(), {session_header(a)})
            .status,
        204);
  }
  EXPECT_LE(granted, 4) << "granted beyond the first durable range";
  expect_error(refused, 503, "fence_persistence");
  EXPECT_TRUE(server.daemon->wait_for_log("cannot reserve fences beyond", 2s));
}

// ---- validation --------------------------------------------------------------------------------

TEST(HttpApi, MalformedBodiesFieldsKeysAndTokensAre400WithDetail) {
  HttpServer server;
  const std::string a = server.new_session();
  const std::vector<std::string> session = {session_header(a)};
  auto bad = [&](const std::string& path, const std::string& body, const std::string& detail) {
    const Response response = server.call("POST", path, body, session);
    expect_error(response, 400, "bad_request");
    const std::string got = response.json().value("detail", "");
    EXPECT_NE(got.find(detail), std::string::npos) << path << " " << body << " -> " << got;
  };
  bad("/v1/locks/k", "{\"acquire_timeout_s\":1,\"nope\":2}", "unknown field \"nope\"");
  bad("/v1/locks/k", "{\"acquire_timeout_s\":1}{\"acquire_timeout_s\":2}",
      "request body is not valid JSON at byte 23: something follows the JSON value");
  bad("/v1/locks/k", "{\"acquire_timeout_s\":",
      "field \"acquire_timeout_s\": not valid JSON at byte 21: the body ends before its JSON value "
      "does");
  bad("/v1/locks/k", "{\"acquire_timeout_s\":1,\"lease_ttl_s\":\"\\ud800\"}",
      "field \"lease_ttl_s\": not valid JSON");
  bad("/v1/locks/k", "[1]", "JSON object");
  bad("/v1/locks/k", "", "JSON object");
  bad("/v1/locks/k", "{\"acquire_timeout_s\":-1}", "acquire_timeout_s");
  bad("/v1/locks/k", "{\"acquire_timeout_s\":9223372037}", "between 0 and 9223372036");
  bad("/v1/locks/k", "{\"acquire_timeout_s\":1.5}", "must be an integer");
  bad("/v1/locks/k", "{\"lease_ttl_s\":\"5\"}", "must be an integer");
  bad("/v1/locks/" + std::string(257, 'k'), "{}", "longer than 256");
  bad("/v1/locks/a%20b", "{}", "whitespace");
  bad("/v1/locks/k/release", "{\"token\":\"a b\"}", "whitespace");
  bad("/v1/locks/k/release", "{\"token\":\"\"}", "empty");
  bad("/v1/locks/k/release", "{}", "token");
  bad("/v1/locks/k/release", "{\"token\":\"" + std::string(257, 'a') + "\"}", "256");
  bad("/v1/locks/k/wait", "{\"acquire_timeout_s\":1}", "unknown field");
  bad("/v1/semaphores/k", "{\"limit\":0}", "limit");
  bad("/v1/semaphores/k", "{\"limit\":1048577}", "limit");
  // A body over 1 MiB.
  const std::string big = "{\"acquire_timeout_s\":1" + std::string(1024 * 1024, ' ') + "}";
  bad("/v1/locks/k", big, "larger than 1 MiB");
  // The session still works after all that.
  EXPECT_EQ(server.call("POST", "/v1/locks/k", "{}", session).json()["status"], "ok");
}

// Issue 19: invalid UTF-8 in a body aborted the daemon (nlohmann threw while writing the 400's
// detail, and nothing caught it), taking every lock holder with it. Each body of the report is now
// a 400 with a detail, changes nothing, and the daemon and its lock holders live on.
TEST(HttpApi, InvalidUtf8InABodyIsA400AndTheServerLivesOn) {
  HttpServer server({"--auth-token", "s3cret"});
  const std::vector<std::string> auth = {"Authorization: Bearer s3cret"};
  Client tcp(server.daemon->port());
  ASSERT_EQ(tcp.request("auth", "_", "s3cret"), "ok");
  const std::string grant = tcp.request("l", "utf8-held", "0 60");
  ASSERT_EQ(grant.rfind("ok ", 0), 0U) << grant;
  const Response created = server.call("POST", "/v1/sessions", "", auth);
  ASSERT_EQ(created.status, 200) << created.body;
  const std::string id = created.json().value("session_id", "");
  std::vector<std::string> headers = auth;
  headers.push_back(session_header(id));
  struct Case {
    std::string path;
    std::string body;
  };
  const Case cases[] = {
      {"/v1/locks/k/release", "{\"token\":\"\xff\"}"},
      {"/v1/locks/k", "{\"\xff\":1}"},
      {"/v1/locks/k", "{\"acquire_timeout_s\":0,\"x\":\"\xc3\"}"},
      {"/v1/locks/k/renew", "{\"token\":\"\xc3\x28\"}"},
      {"/v1/semaphores/k", "{\"limit\":2,\"\xed\xa0\x80\":1}"},  // a UTF-16 surrogate
      {"/v1/locks/k", "\xc0\xaf"},                               // an overlong '/'
  };
  for (const Case& c : cases) {
    const Response response = server.call("POST", c.path, c.body, headers);
    expect_error(response, 400, "bad_request");
    EXPECT_NE(response.json().value("detail", "").find("not valid UTF-8"), std::string::npos)
        << response.body;
  }
  // A path with bytes that are not UTF-8 gets a 404 whose detail is still valid JSON.
  const Response unknown = server.call("GET", "/\xff\xfe", "", auth);
  expect_error(unknown, 404, "not_found");
  // Nothing changed: k was never taken, the TCP holder still holds its lock, both APIs answer.
  EXPECT_EQ(server.call("POST", "/v1/locks/k", "{}", headers).json()["status"], "ok");
  EXPECT_EQ(tcp.request("n", "utf8-held", fields(grant).at(1) + " 60"), "ok 60");
  EXPECT_TRUE(server.daemon->running());
  EXPECT_FALSE(server.daemon->wait_for_log("terminate|exception", 0ms))
      << server.daemon->log_text();
}

// ---- TCP and HTTP share one FIFO queue -------------------------------------------------------

TEST(HttpApi, TcpAndHttpSessionsInterleaveInFifoOrder) {
  HttpServer server({"--threads=2"});
  Client tcp_holder(server.daemon->port());
  const std::vector<std::string> held = fields(tcp_holder.request("l", "shared", "0"));
  ASSERT_EQ(held.at(0), "ok");
  const std::string a = server.new_session();
  const std::string b = server.new_session();

  Http http_a(server.http_port);
  ASSERT_TRUE(http_a.send_request("POST", "/v1/locks/shared", "{\"acquire_timeout_s\":30}",
                                  {session_header(a)}));
  ASSERT_TRUE(eventually([&] { return server.waiters("shared") == 1; }, 5s));
  Client tcp_waiter(server.daemon->port());
  ASSERT_TRUE(tcp_waiter.send(frame("l", "shared", "30")));
  ASSERT_TRUE(eventually([&] { return server.waiters("shared") == 2; }, 5s));
  Http http_b(server.http_port);
  ASSERT_TRUE(http_b.send_request("POST", "/v1/locks/shared", "{\"acquire_timeout_s\":30}",
                                  {session_header(b)}));
  ASSERT_TRUE(eventually([&] { return server.waiters("shared") == 3; }, 5s));

  // Release by TCP: the HTTP session a is first.
  EXPECT_EQ(tcp_holder.request("r", "shared", held.at(1)), "ok");
  const Response a_grant = http_a.read_response();
  ASSERT_EQ(a_grant.json()["status"], "ok");
  const std::string a_token = a_grant.json()["token"];
  // Release by HTTP: the TCP waiter is next.
  EXPECT_EQ(server
                .call("POST", "/v1/locks/shared/release", "{\"token\":\"" + a_token + "\"}",
                      {session_header(a)})
                .status,
            204);
  const std::vector<std::string> tcp_grant = fields(tcp_waiter.read_line().value_or(""));
  ASSERT_EQ(tcp_grant.at(0), "ok");
  EXPECT_GT(fence_of(tcp_grant.at(1)).value(), fence_of(a_token).value());
  EXPECT_EQ(server.waiters("shared"), 1);
  // The TCP waiter disconnects while holding: auto-release grants HTTP session b.
  tcp_waiter.close();
  const Response b_grant = http_b.read_response();
  EXPECT_EQ(b_grant.json()["status"], "ok");
  EXPECT_GT(fence_of(b_grant.json()["token"]).value(), fence_of(tcp_grant.at(1)).value());
}

// ---- long polls --------------------------------------------------------------------------------

TEST(HttpApi, LongPollEndsOnTimeoutWith200) {
  HttpServer server;
  const std::string a = server.new_session();
  const std::string b = server.new_session();
  ASSERT_EQ(server.call("POST", "/v1/locks/k", "{}", {session_header(a)}).json()["status"], "ok");
  const auto started = std::chrono::steady_clock::now();
  Response timed_out =
      server.call("POST", "/v1/locks/k", "{\"acquire_timeout_s\":1}", {session_header(b)});
  EXPECT_EQ(timed_out.status, 200);
  EXPECT_EQ(timed_out.body, "{\"status\":\"timeout\"}\n");
  EXPECT_GE(std::chrono::steady_clock::now() - started, 900ms);
  EXPECT_EQ(server.waiters("k"), 0);
}

TEST(HttpApi, DeletingTheSessionWakesItsLongPollAtOnceAndReleasesItsLocks) {
  HttpServer server;
  const std::string a = server.new_session();
  const std::string b = server.new_session();
  const std::string c = server.new_session();
  ASSERT_EQ(server.call("POST", "/v1/locks/k", "{}", {session_header(a)}).json()["status"], "ok");
  ASSERT_EQ(server.call("POST", "/v1/locks/held-by-b", "{}", {session_header(b)}).json()["status"],
            "ok");
  Http poll(server.http_port);
  ASSERT_TRUE(
      poll.send_request("POST", "/v1/locks/k", "{\"acquire_timeout_s\":60}", {session_header(b)}));
  // Parked before the next request is sent: two connections may reach the session's home shard in
  // either order (one of them through another shard's server), so only then is the order known.
  ASSERT_TRUE(eventually([&] { return server.waiters("k") == 1; }, 5s));
  // A second request on the same session waits its turn (serialized) and is answered too.
  Http queued(server.http_port);
  ASSERT_TRUE(queued.send_request("POST", "/v1/locks/other", "{}", {session_header(b)}));
  const auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(server.call("DELETE", "/v1/sessions/" + b).status, 204);
  expect_error(poll.read_response(), 410, "session_gone");
  expect_error(queued.read_response(), 410, "session_gone");
  EXPECT_LT(std::chrono::steady_clock::now() - started, 5s);
  EXPECT_EQ(server.waiters("k"), 0);
  // b's lock was released with the session (auto-release).
  EXPECT_EQ(server.call("POST", "/v1/locks/held-by-b", "{}", {session_header(c)}).json()["status"],
            "ok");
}

TEST(HttpApi, RequestsOnOneSessionAreSerialized) {
  HttpServer server;
  const std::string a = server.new_session();
  const std::string b = server.new_session();
  ASSERT_EQ(server.call("POST", "/v1/locks/k", "{}", {session_header(a)}).json()["status"], "ok");
  Http poll(server.http_port);
  const auto poll_sent = std::chrono::steady_clock::now();
  ASSERT_TRUE(
      poll.send_request("POST", "/v1/locks/k", "{\"acquire_timeout_s\":2}", {session_header(b)}));
  ASSERT_TRUE(eventually([&] { return server.waiters("k") == 1; }, 5s));
  // b's next request (a free key) runs only once the long poll has ended, 2 s after it was
  // parked (which is after it was sent), however slow the machine.
  Response second = server.call("POST", "/v1/locks/free", "{}", {session_header(b)});
  EXPECT_EQ(second.json()["status"], "ok");
  EXPECT_GE(std::chrono::steady_clock::now() - poll_sent, 2s);
  EXPECT_EQ(poll.read_response().json()["status"], "timeout");
  // Another session is not held up by b's queue: a's request is answered at once.
  Http other(server.http_port);
  ASSERT_TRUE(
      other.send_request("POST", "/v1/locks/k", "{\"acquire_timeout_s\":30}", {session_header(b)}));
  ASSERT_TRUE(eventually([&] { return server.waiters("k") == 1; }, 5s));
  EXPECT_EQ(server.call("POST", "/v1/locks/a-free", "{}", {session_header(a)}).json()["status"],
            "ok");
}

TEST(HttpApi, ClientLeavingALongPollLeavesTheQueue) {
  HttpServer server({"--threads=2"});
  const std::string a = server.new_session();
  const std::string b = server.new_session();
  const std::string c = server.new_session();
  const Response held = server.call("POST", "/v1/locks/k", "{}", {session_header(a)});
  const std::string token = held.json()["token"];
  {
    Http leaving(server.http_port);
    ASSERT_TRUE(leaving.send_request("POST", "/v1/locks/k", "{\"acquire_timeout_s\":60}",
                                     {session_header(b)}));
    ASSERT_TRUE(eventually([&] { return server.waiters("k") == 1; }, 5s));
  }  // closed
  ASSERT_TRUE(eventually([&] { return server.waiters("k") == 0; }, 5s));
  Http next(server.http_port);
  ASSERT_TRUE(
      next.send_request("POST", "/v1/locks/k", "{\"acquire_timeout_s\":60}", {session_header(c)}));
  ASSERT_TRUE(eventually([&] { return server.waiters("k") == 1; }, 5s));
  EXPECT_EQ(
      server
          .call("POST", "/v1/locks/k/release", "{\"token\":\"" + token + "\"}", {session_header(a)})
          .status,
      204);
  EXPECT_EQ(next.read_response().json()["status"], "ok");
  // b's session lives on and serves its next request.
  EXPECT_EQ(server.call("POST", "/v1/locks/b-free", "{}", {session_header(b)}).json()["status"],
            "ok");
}

// Every shard serves HTTP on the one port; a session lives on the shard that created it, and a
// request that arrives on another shard's connection is forwarded there and answered back.
// Here every call is a new connection to a 4-shard daemon, so most calls are forwarded: a
// session's whole life (acquire, renew, release, ping, a long poll woken by a release, a client
// leaving its long poll, a long poll woken by a delete sent on yet another connection) behaves
// as on one shard, and /metrics counts the forwarded requests.
TEST(HttpApi, SessionsWorkFromConnectionsOnEveryShard) {
  HttpServer server({"--threads=4"});
  const std::string a = server.new_session();
  const std::string b = server.new_session();
  const std::string c = server.new_session();
  auto release = [&](const std::string& session, const std::string& token) {
    return server.call("POST", "/v1/locks/k/release", "{\"token\":\"" + token + "\"}",
                       {session_header(session)});
  };
  for (int round = 0; round < 8; ++round) {
    const Response held = server.call("POST", "/v1/locks/k", "{}", {session_header(a)});
    ASSERT_EQ(held.json().value("status", ""), "ok") << held.body;
    const std::string token = held.json()["token"];
    const Response renewed = server.call("POST", "/v1/locks/k/renew",
                                         "{\"token\":\"" + token + "\"}", {session_header(a)});
    EXPECT_EQ(renewed.status, 200) << renewed.body;
    EXPECT_EQ(release(a, token).status, 204);
    EXPECT_EQ(server.call("POST", "/v1/sessions/" + b + "/ping").status, 204);
  }
  // A long poll woken by a release.
  const std::string token =
      server.call("POST", "/v1/locks/k", "{}", {session_header(a)}).json()["token"];
  Http poll(server.http_port);
  ASSERT_TRUE(
      poll.send_request("POST", "/v1/locks/k", "{\"acquire_timeout_s\":60}", {session_header(b)}));
  ASSERT_TRUE(eventually([&] { return server.waiters("k") == 1; }, 5s));
  EXPECT_EQ(release(a, token).status, 204);
  const Response granted = poll.read_response();
  ASSERT_EQ(granted.json().value("status", ""), "ok") << granted.body;
  // A client leaving its long poll leaves the queue.
  {
    Http leaving(server.http_port);
    ASSERT_TRUE(leaving.send_request("POST", "/v1/locks/k", "{\"acquire_timeout_s\":60}",
                                     {session_header(c)}));
    ASSERT_TRUE(eventually([&] { return server.waiters("k") == 1; }, 5s));
  }
  ASSERT_TRUE(eventually([&] { return server.waiters("k") == 0; }, 5s));
  // A long poll woken by deleting its session.
  Http doomed(server.http_port);
  ASSERT_TRUE(doomed.send_request("POST", "/v1/locks/k", "{\"acquire_timeout_s\":60}",
                                  {session_header(c)}));
  ASSERT_TRUE(eventually([&] { return server.waiters("k") == 1; }, 5s));
  EXPECT_EQ(server.call("DELETE", "/v1/sessions/" + c).status, 204);
  expect_error(doomed.read_response(), 410, "session_gone");
  expect_error(server.call("POST", "/v1/sessions/" + c + "/ping"), 410, "session_gone");
  expect_error(server.call("POST", "/v1/locks/k", "{}", {session_header(c)}), 410, "session_gone");
  EXPECT_EQ(server.stats()["connections"], 2);
  // b still holds k: a's acquire times out.
  EXPECT_EQ(server.call("POST", "/v1/locks/k", "{\"acquire_timeout_s\":0}", {session_header(a)})
                .json()
                .value("status", ""),
            "timeout");
  const std::string metrics = server.call("GET", "/metrics").body;
  std::smatch forwarded;
  ASSERT_TRUE(std::regex_search(metrics, forwarded,
                                std::regex("\nturnstile_http_forwarded_total ([0-9]+)\n")));
  EXPECT_GT(std::stoll(forwarded[1]), 0) << "no request reached another shard's connection";
}

TEST(HttpApi, ClientLeavingAfterAnEnqueueGivesThePlaceBack) {
  HttpServer server;
  const std::string a = server.new_session();
  const std::string b = server.new_session();
  const Response held = server.call("POST", "/v1/locks/k", "{}", {session_header(a)});
  const std::string token = held.json()["token"];
  // b's enqueue is answered (queued) at once; a client leaving right after an answered
  // request does not undo it: the place is b's until b's session ends.
  EXPECT_EQ(server.call("POST", "/v1/locks/k/enqueue", "", {session_header(b)}).json()["status"],
            "queued");
  EXPECT_EQ(server.waiters("k"), 1);
  EXPECT_EQ(server.call("DELETE", "/v1/sessions/" + b).status, 204);
  EXPECT_EQ(server.waiters("k"), 0);
}

TEST(HttpApi, ReaperClosesIdleSessionsButNotOnesInALongPoll) {
  HttpServer server({"--http-session-idle-timeout=1"});
  const std::string idle = server.new_session();
  const std::string holder = server.new_session();
  const std::string polling = server.new_session();
  ASSERT_EQ(server.call("POST", "/v1/locks/k", "{}", {session_header(holder)}).json()["status"],
            "ok");
  Http poll(server.http_port);
  ASSERT_TRUE(poll.send_request("POST", "/v1/locks/k", "{\"acquire_timeout_s\":60}",
                                {session_header(polling)}));
  // The holder is idle for more than 2 x 1 s and reaped (within a 1 s sweep), which releases its
  // lock: the long poll, which is never reaped while in flight, gets the grant.
  const Response polled = poll.read_response(20s);
  EXPECT_EQ(polled.status, 200);
  EXPECT_EQ(polled.json().value("status", ""), "ok");
  // The polling session goes the same way once idle. Nothing is pinged before that: each shard
  // sweeps its own sessions on its own 1 s timer, so `idle` may still be alive when the holder's
  // shard has already reaped the holder, and a ping would count as activity and keep it.
  EXPECT_TRUE(eventually([&] { return server.stats()["connections"] == 0; }, 20s));
  for (const std::string& session : {idle, holder, polling}) {
    expect_error(server.call("POST", "/v1/sessions/" + session + "/ping"), 410, "session_gone");
  }
}

// ---- read-write locks --------------------------------------------------------------------------

// POST /v1/rwlocks/{key}/{route} on the session `id` (route: read, write/release, ...).
Response rw_call(const HttpServer& server, const std::string& id, const std::string& key,
                 const std::string& route, const std::string& body) {
  return server.call("POST", "/v1/rwlocks/" + key + "/" + route, body, {session_header(id)});
}

std::string token_body(const std::string& token) { return Json{{"token", token}}.dump(); }

// The grant in `response` (200, status ok or acquired): its token, "" when it is not one.
std::string granted_token(const Response& response, const std::string& status = "ok") {
  EXPECT_EQ(response.status, 200) << response.body;
  if (response.status != 200) return "";
  const Json json = response.json();
  EXPECT_EQ(json.value("status", ""), status) << response.body;
  if (json.value("status", "") != status) return "";
  return json.value("token", "");
}

// The stats entry of the read-write lock `key` (null when it is not in use).
Json rw_lock(const HttpServer& server, const std::string& key) {
  const Json all = server.stats();
  if (!all.contains("rw_locks")) return Json();
  for (const Json& lock : all["rw_locks"]) {
    if (lock["key"] == key) return lock;
  }
  return Json();
}

std::int64_t rw_number(const HttpServer& server, const std::string& key, const char* field) {
  const Json lock = rw_lock(server, key);
  return lock.is_null() ? 0 : lock[field].get<std::int64_t>();
}

TEST(HttpRwLocks, ReadersHoldTogetherAndAWriterWaitsForAllOfThemWithAHigherFence) {
  HttpServer server;
  const std::string a = server.new_session();
  const std::string b = server.new_session();
  const std::string w = server.new_session();
  // Two readers at once, each without waiting.
  const std::string first =
      granted_token(rw_call(server, a, "cfg", "read", "{\"acquire_timeout_s\":0}"));
  const std::string second =
      granted_token(rw_call(server, b, "cfg", "read", "{\"acquire_timeout_s\":0}"));
  ASSERT_FALSE(first.empty());
  ASSERT_FALSE(second.empty());
  EXPECT_NE(first, second);
  Json held = rw_lock(server, "cfg");
  ASSERT_FALSE(held.is_null()) << server.stats().dump();
  EXPECT_EQ(held["readers"], 2);
  EXPECT_EQ(held["writer_conn_id"], 0);
  // A writer is refused while they hold, and waits for both.
  EXPECT_EQ(rw_call(server, w, "cfg", "write", "{\"acquire_timeout_s\":0}").body,
            "{\"status\":\"timeout\"}\n");
  Http writer(server.http_port);
  ASSERT_TRUE(writer.send_request("POST", "/v1/rwlocks/cfg/write", "{\"acquire_timeout_s\":30}",
                                  {session_header(w)}));
  ASSERT_TRUE(eventually([&] { return rw_number(server, "cfg", "waiters") == 1; }, 5s));
  EXPECT_EQ(rw_call(server, a, "cfg", "read/release", token_body(first)).status, 204);
  held = rw_lock(server, "cfg");  // one reader left: the writer still waits
  EXPECT_EQ(held["readers"], 1);
  EXPECT_EQ(held["waiters"], 1);
  EXPECT_EQ(held["writer_conn_id"], 0);
  EXPECT_EQ(rw_call(server, b, "cfg", "read/release", token_body(second)).status, 204);
  const std::string written = granted_token(writer.read_response());
  ASSERT_FALSE(written.empty());
  EXPECT_GT(fence_of(written).value(), fence_of(first).value());
  EXPECT_GT(fence_of(written).value(), fence_of(second).value());
  held = rw_lock(server, "cfg");
  EXPECT_EQ(held["readers"], 0);
  EXPECT_NE(held["writer_conn_id"], 0);
  // While the writer holds, a reader is refused.
  EXPECT_EQ(rw_call(server, a, "cfg", "read", "{\"acquire_timeout_s\":0}").body,
            "{\"status\":\"timeout\"}\n");
  // Locks, semaphores and read-write locks are separate namespaces.
  EXPECT_EQ(server.call("POST", "/v1/locks/cfg", "{}", {session_header(a)}).json()["status"], "ok");
  EXPECT_EQ(rw_call(server, w, "cfg", "write/renew", "{\"token\":\"" + written + "\"}").status,
            200);
}

TEST(HttpRwLocks, AReaderAfterAQueuedWriterWaitsBehindIt) {
  HttpServer server;
  const std::string a = server.new_session();
  const std::string w = server.new_session();
  const std::string c = server.new_session();
  const std::string read_token =
      granted_token(rw_call(server, a, "k", "read", "{\"acquire_timeout_s\":0}"));
  ASSERT_FALSE(read_token.empty());
  Http writer(server.http_port);
  ASSERT_TRUE(writer.send_request("POST", "/v1/rwlocks/k/write", "{\"acquire_timeout_s\":30}",
                                  {session_header(w)}));
  ASSERT_TRUE(eventually([&] { return rw_number(server, "k", "waiters") == 1; }, 5s));
  // A reader holds, but a writer is queued: a later reader does not overtake it.
  EXPECT_EQ(rw_call(server, c, "k", "read", "{\"acquire_timeout_s\":0}").body,
            "{\"status\":\"timeout\"}\n");
  Http reader(server.http_port);
  ASSERT_TRUE(reader.send_request("POST", "/v1/rwlocks/k/read", "{\"acquire_timeout_s\":30}",
                                  {session_header(c)}));
  ASSERT_TRUE(eventually([&] { return rw_number(server, "k", "waiters") == 2; }, 5s));
  // The first reader leaves: the writer is next, the reader still waits.
  EXPECT_EQ(rw_call(server, a, "k", "read/release", token_body(read_token)).status, 204);
  const std::string write_token = granted_token(writer.read_response());
  ASSERT_FALSE(write_token.empty());
  EXPECT_EQ(rw_number(server, "k", "waiters"), 1);
  EXPECT_EQ(rw_number(server, "k", "readers"), 0);
  // The writer leaves: the reader is granted, with the highest fence.
  EXPECT_EQ(rw_call(server, w, "k", "write/release", token_body(write_token)).status, 204);
  const std::string late_read = granted_token(reader.read_response());
  ASSERT_FALSE(late_read.empty());
  EXPECT_GT(fence_of(write_token).value(), fence_of(read_token).value());
  EXPECT_GT(fence_of(late_read).value(), fence_of(write_token).value());
  EXPECT_EQ(rw_number(server, "k", "readers"), 1);
}

TEST(HttpRwLocks, ATokenOfTheWrongKindIsNotHeldAndChangesNothing) {
  HttpServer server;
  const std::string a = server.new_session();
  const std::string b = server.new_session();
  const std::string c = server.new_session();
  const std::string read_token =
      granted_token(rw_call(server, a, "r", "read", "{\"acquire_timeout_s\":0}"));
  const std::string write_token =
      granted_token(rw_call(server, b, "w", "write", "{\"acquire_timeout_s\":0}"));
  const std::string lock_token = granted_token(
      server.call("POST", "/v1/locks/r", "{\"acquire_timeout_s\":0}", {session_header(c)}));
  ASSERT_FALSE(read_token.empty());
  ASSERT_FALSE(write_token.empty());
  ASSERT_FALSE(lock_token.empty());
  // A read token on the write side, a write token on the read side, a lock's token on a
  // read-write lock and a read-write lock's token on a lock: none of them holds.
  struct Case {
    std::string path;
    std::string token;
  };
  const Case cases[] = {
      {"/v1/rwlocks/r/write/release", read_token}, {"/v1/rwlocks/r/write/renew", read_token},
      {"/v1/rwlocks/w/read/release", write_token}, {"/v1/rwlocks/w/read/renew", write_token},
      {"/v1/rwlocks/r/read/release", lock_token},  {"/v1/rwlocks/r/write/release", lock_token},
      {"/v1/locks/r/release", read_token},         {"/v1/locks/w/release", write_token},
  };
  for (const Case& refused : cases) {
    const Response response =
        server.call("POST", refused.path, token_body(refused.token), {session_header(a)});
    expect_error(response, 404, "not_held");
    EXPECT_FALSE(response.json().value("detail", "").empty()) << refused.path;
  }
  // Nothing changed: the reader and the writer still hold, the lock too.
  EXPECT_EQ(rw_number(server, "r", "readers"), 1);
  EXPECT_NE(rw_number(server, "w", "writer_conn_id"), 0);
  EXPECT_EQ(rw_call(server, c, "w", "read", "{\"acquire_timeout_s\":0}").body,
            "{\"status\":\"timeout\"}\n");
  EXPECT_EQ(rw_call(server, c, "r", "write", "{\"acquire_timeout_s\":0}").body,
            "{\"status\":\"timeout\"}\n");
  EXPECT_EQ(
      server.call("POST", "/v1/locks/r", "{\"acquire_timeout_s\":0}", {session_header(b)}).body,
      "{\"status\":\"timeout\"}\n");
  // The right side takes them.
  EXPECT_EQ(rw_call(server, a, "r", "read/renew", token_body(read_token)).status, 200);
  EXPECT_EQ(rw_call(server, a, "r", "read/release", token_body(read_token)).status, 204);
  EXPECT_EQ(rw_call(server, b, "w", "write/renew", token_body(write_token)).status, 200);
  EXPECT_EQ(rw_call(server, b, "w", "write/release", token_body(write_token)).status, 204);
  EXPECT_FALSE(
      granted_token(rw_call(server, c, "r", "write", "{\"acquire_timeout_s\":0}")).empty());
  EXPECT_FALSE(granted_token(rw_call(server, a, "w", "read", "{\"acquire_timeout_s\":0}")).empty());
}

TEST(HttpRwLocks, TwoPhaseEnqueueAndWaitForReadersAndWriters) {
  HttpServer server({"--default-lease-ttl=40"});
  const std::string a = server.new_session();
  const std::string b = server.new_session();
  const std::string w = server.new_session();
  const std::string c = server.new_session();
  // Two readers enqueue and are granted at once (an empty body is allowed).
  const Response a_enqueued = rw_call(server, a, "k", "read/enqueue", "");
  const std::string a_token = granted_token(a_enqueued, "acquired");
  EXPECT_EQ(a_enqueued.json()["lease_ttl_s"], 40);
  const std::string b_token =
      granted_token(rw_call(server, b, "k", "read/enqueue", "{}"), "acquired");
  ASSERT_FALSE(a_token.empty());
  ASSERT_FALSE(b_token.empty());
  // A writer is queued behind them, and once only.
  EXPECT_EQ(rw_call(server, w, "k", "write/enqueue", "{\"lease_ttl_s\":6}").body,
            "{\"status\":\"queued\"}\n");
  expect_error(rw_call(server, w, "k", "write/enqueue", "{}"), 409, "already_enqueued");
  // A reader is queued behind the writer.
  EXPECT_EQ(rw_call(server, c, "k", "read/enqueue", "").body, "{\"status\":\"queued\"}\n");
  EXPECT_EQ(rw_number(server, "k", "waiters"), 2);
  // A wait names the side that was enqueued.
  expect_error(rw_call(server, w, "k", "read/wait", "{\"timeout_s\":0}"), 409, "not_enqueued");
  expect_error(rw_call(server, c, "k", "write/wait", "{\"timeout_s\":0}"), 409, "not_enqueued");
  // The readers' waits deliver their fast-path grants.
  EXPECT_EQ(granted_token(rw_call(server, a, "k", "read/wait", "{\"timeout_s\":0}")), a_token);
  EXPECT_EQ(granted_token(rw_call(server, b, "k", "read/wait", "{\"timeout_s\":0}")), b_token);
  // The writer waits; the readers' releases grant it.
  Http writer(server.http_port);
  ASSERT_TRUE(writer.send_request("POST", "/v1/rwlocks/k/write/wait", "{\"timeout_s\":30}",
                                  {session_header(w)}));
  Http reader(server.http_port);
  ASSERT_TRUE(reader.send_request("POST", "/v1/rwlocks/k/read/wait", "{\"timeout_s\":30}",
                                  {session_header(c)}));
  EXPECT_EQ(rw_call(server, a, "k", "read/release", token_body(a_token)).status, 204);
  EXPECT_EQ(rw_call(server, b, "k", "read/release", token_body(b_token)).status, 204);
  const Response w_granted = writer.read_response();
  const std::string w_token = granted_token(w_granted);
  ASSERT_FALSE(w_token.empty());
  EXPECT_EQ(w_granted.json()["lease_ttl_s"], 6);
  EXPECT_GT(fence_of(w_token).value(), fence_of(b_token).value());
  // The reader behind the writer gets its grant once the writer leaves.
  EXPECT_EQ(rw_call(server, w, "k", "write/release", token_body(w_token)).status, 204);
  const std::string c_token = granted_token(reader.read_response());
  ASSERT_FALSE(c_token.empty());
  EXPECT_GT(fence_of(c_token).value(), fence_of(w_token).value());
  // Each two-phase record is used up by its grant.
  expect_error(rw_call(server, c, "k", "read/wait", "{\"timeout_s\":0}"), 409, "not_enqueued");
  expect_error(rw_call(server, w, "k", "write/wait", "{\"timeout_s\":0}"), 409, "not_enqueued");
}

TEST(HttpRwLocks, DeletingASessionGivesBackWhatItHoldsAndWhereItWaits) {
  HttpServer server;
  const std::string a = server.new_session();
  const std::string b = server.new_session();
  const std::string c = server.new_session();
  const std::string d = server.new_session();
  // a reads one key and writes another, and waits to write a third behind d.
  ASSERT_FALSE(granted_token(rw_call(server, a, "read-by-a", "read", "{}")).empty());
  ASSERT_FALSE(granted_token(rw_call(server, a, "written-by-a", "write", "{}")).empty());
  const std::string d_token = granted_token(rw_call(server, d, "read-by-d", "read", "{}"));
  ASSERT_FALSE(d_token.empty());
  Http a_poll(server.http_port);
  ASSERT_TRUE(a_poll.send_request("POST", "/v1/rwlocks/read-by-d/write",
                                  "{\"acquire_timeout_s\":60}", {session_header(a)}));
  ASSERT_TRUE(eventually([&] { return rw_number(server, "read-by-d", "waiters") == 1; }, 5s));
  // b waits to write what a reads; c waits to read what a writes.
  Http b_poll(server.http_port);
  ASSERT_TRUE(b_poll.send_request("POST", "/v1/rwlocks/read-by-a/write",
                                  "{\"acquire_timeout_s\":60}", {session_header(b)}));
  Http c_poll(server.http_port);
  ASSERT_TRUE(c_poll.send_request("POST", "/v1/rwlocks/written-by-a/read",
                                  "{\"acquire_timeout_s\":60}", {session_header(c)}));
  ASSERT_TRUE(eventually(
      [&] {
        return rw_number(server, "read-by-a", "waiters") == 1 &&
               rw_number(server, "written-by-a", "waiters") == 1;
      },
      5s));
  EXPECT_EQ(server.call("DELETE", "/v1/sessions/" + a).status, 204);
  expect_error(a_poll.read_response(), 410, "session_gone");
  EXPECT_FALSE(granted_token(b_poll.read_response()).empty());
  EXPECT_FALSE(granted_token(c_poll.read_response()).empty());
  // a's place behind d is gone: d's reader is alone, and another reader joins at once.
  EXPECT_EQ(rw_number(server, "read-by-d", "waiters"), 0);
  EXPECT_FALSE(
      granted_token(rw_call(server, b, "read-by-d", "read", "{\"acquire_timeout_s\":0}")).empty());
  EXPECT_EQ(rw_number(server, "read-by-d", "readers"), 2);
}

TEST(HttpRwLocks, AClientLeavingAWriteLongPollLetsTheReadersBehindItIn) {
  HttpServer server({"--threads=2"});
  const std::string a = server.new_session();
  const std::string w = server.new_session();
  const std::string c = server.new_session();
  ASSERT_FALSE(granted_token(rw_call(server, a, "k", "read", "{}")).empty());
  Http reader(server.http_port);
  {
    Http leaving(server.http_port);
    ASSERT_TRUE(leaving.send_request("POST", "/v1/rwlocks/k/write", "{\"acquire_timeout_s\":60}",
                                     {session_header(w)}));
    ASSERT_TRUE(eventually([&] { return rw_number(server, "k", "waiters") == 1; }, 5s));
    // c's read waits behind the queued writer.
    ASSERT_TRUE(reader.send_request("POST", "/v1/rwlocks/k/read", "{\"acquire_timeout_s\":60}",
                                    {session_header(c)}));
    ASSERT_TRUE(eventually([&] { return rw_number(server, "k", "waiters") == 2; }, 5s));
  }  // the writer's client leaves
  // The writer leaves the queue, so the reader joins the one that holds.
  EXPECT_FALSE(granted_token(reader.read_response()).empty());
  EXPECT_EQ(rw_number(server, "k", "readers"), 2);
  EXPECT_EQ(rw_number(server, "k", "waiters"), 0);
  // w's session lives on.
  EXPECT_EQ(rw_call(server, w, "k", "write", "{\"acquire_timeout_s\":0}").body,
            "{\"status\":\"timeout\"}\n");
}

// ---- auth, rate limit, caps, CORS ------------------------------------------------------------

TEST(HttpApi, BearerAuthOnEveryRouteButHealthReadyAndOpenApi) {
  HttpServer server({"--auth-token=s3cret"});
  EXPECT_EQ(server.call("GET", "/health").status, 200);
  EXPECT_EQ(server.call("GET", "/ready").status, 200);
  EXPECT_EQ(server.call("GET", "/v1/openapi.json").status, 200);
  for (const auto& [method, path] : std::vector<std::pair<std::string, std::string>>{
           {"GET", "/v1/stats"}, {"GET", "/metrics"}, {"POST", "/v1/sessions"}, {"GET", "/nope"}}) {
    const auto started = std::chrono::steady_clock::now();
    const Response denied = server.call(method, path, "", {"Authorization: Bearer wrong"});
    expect_error(denied, 401, "unauthorized");
    // At least the full 100 ms, counted by the server from the request's arrival.
    EXPECT_GE(std::chrono::steady_clock::now() - started, 100ms) << path;
  }
  expect_error(server.call("GET", "/v1/stats"), 401, "unauthorized");
  EXPECT_EQ(server.call("GET", "/v1/stats", "", {"Authorization: bearer  s3cret "}).status, 200);
  EXPECT_EQ(server.call("GET", "/metrics", "", {"Authorization: Bearer s3cret"}).status, 200);
  EXPECT_EQ(server.call("POST", "/v1/sessions", "", {"Authorization: BEARER s3cret"}).status, 200);
}

TEST(HttpApi, PerIpRateLimitAnswers429AndExemptsHealth) {
  HttpServer server({"--http-rate-limit-per-ip=1", "--http-rate-limit-burst=3"});
  Http http(server.http_port);
  int limited = 0;
  for (int i = 0; i < 20; ++i) {
    const Response response = http.request("GET", "/v1/stats");
    if (response.status == 429) {
      ++limited;
      EXPECT_EQ(response.json()["error"], "rate_limited");
    }
  }
  // 20 requests, a burst of 3 and a refill of 1/s: unless they took over 12 s, 5 are refused.
  EXPECT_GE(limited, 5);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(http.request("GET", "/health").status, 200);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(http.request("GET", "/ready").status, 200);
}

TEST(HttpApi, SessionCapsAre503) {
  HttpServer server({"--http-max-sessions=2", "--http-max-sessions-per-ip=1"});
  const std::string a = server.new_session();
  expect_error(server.call("POST", "/v1/sessions"), 503, "max_sessions_per_ip");
  EXPECT_EQ(server.call("DELETE", "/v1/sessions/" + a).status, 204);
  EXPECT_FALSE(server.new_session().empty());
}

TEST(HttpApi, CorsPreflightAndHeaders) {
  HttpServer server(
      {"--http-cors-allowed-origins=https://a.example, https://b.example", "--auth-token=s3cret"});
  // Preflight: 204 at once, before auth.
  const Response preflight =
      server.call("OPTIONS", "/v1/locks/k", "",
                  {"Origin: https://a.example", "Access-Control-Request-Method: POST"});
  EXPECT_EQ(preflight.status, 204);
  EXPECT_EQ(preflight.header("access-control-allow-origin"), "https://a.example");
  EXPECT_EQ(preflight.header("vary"), "Origin");
  EXPECT_EQ(preflight.header("access-control-allow-methods"), "GET, POST, DELETE, OPTIONS");
  EXPECT_EQ(preflight.header("access-control-allow-headers"),
            "Authorization, Content-Type, X-Dflockd-Session");
  EXPECT_EQ(preflight.header("access-control-max-age"), "300");
  const Response other = server.call("GET", "/health", "", {"Origin: https://evil.example"});
  EXPECT_EQ(other.status, 200);
  EXPECT_EQ(other.header("access-control-allow-origin"), "");
  const Response simple = server.call("GET", "/health", "", {"Origin: https://b.example"});
  EXPECT_EQ(simple.header("access-control-allow-origin"), "https://b.example");

  HttpServer any({"--http-cors-allowed-origins=*"});
  const Response wildcard = any.call("GET", "/health", "", {"Origin: https://x.example"});
  EXPECT_EQ(wildcard.header("access-control-allow-origin"), "*");
}

TEST(HttpApi, PerIpConnectionCap) {
  HttpServer server({"--http-max-connections-per-ip=1"});
  auto first = std::make_unique<Http>(server.http_port);
  EXPECT_EQ(first->request("GET", "/health").status, 200);  // kept open (keep-alive)
  Http second(server.http_port);
  const Response refused = second.request("GET", "/health");
  expect_error(refused, 503, "max_connections_per_ip");
  EXPECT_EQ(refused.header("connection"), "close");
  first.reset();
  EXPECT_TRUE(eventually([&] { return server.call("GET", "/health").status == 200; }, 5s));
}

TEST(HttpApi, TlsUsesTheSameCertificate) {
  TempDir directory;
  const CertificateFiles files = write_self_signed_certificate(directory.path());
  HttpServer server({"--tls-cert", files.certificate_path, "--tls-key", files.key_path});
  ASSERT_TRUE(server.daemon->wait_for_log("HTTP API listening on .* \\(https\\)", 1s));
  ClientOptions options;
  options.tls = true;
  Client https(server.http_port, options);
  ASSERT_TRUE(https.send("GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"));
  std::string received;
  EXPECT_TRUE(eventually(
      [&] {
        received += https.pending(50ms);
        return received.find("{\"status\":\"ok\"}") != std::string::npos;
      },
      5s))
      << received;
  EXPECT_EQ(received.rfind("HTTP/1.1 200 OK\r\n", 0), 0U) << received;
  // The TCP listener is TLS too.
  Client tcp(server.daemon->port(), options);
  EXPECT_EQ(tcp.request("ping", "_", "_"), "ok");
}

TEST(HttpApi, DrainAnswersReadyAndNewSessions503ThenStops) {
  HttpServer server;
  const std::string a = server.new_session();
  ASSERT_EQ(server.call("POST", "/v1/locks/k", "{}", {session_header(a)}).json()["status"], "ok");
  // A TCP request in flight keeps the daemon draining for up to 6 s.
  Client waiter(server.daemon->port());
  ASSERT_TRUE(waiter.send(frame("l", "k", "6")));
  ASSERT_TRUE(eventually([&] { return server.waiters("k") == 1; }, 5s));
  Http poll(server.http_port);
  const std::string b = server.new_session();
  ASSERT_TRUE(
      poll.send_request("POST", "/v1/locks/k", "{\"acquire_timeout_s\":60}", {session_header(b)}));
  ASSERT_TRUE(eventually([&] { return server.waiters("k") == 2; }, 5s));
  server.daemon->signal(SIGTERM);
  ASSERT_TRUE(server.daemon->wait_for_log("draining", 5s));
  const Response ready = server.call("GET", "/ready");
  EXPECT_EQ(ready.status, 503);
  EXPECT_EQ(ready.body, "{\"status\":\"draining\"}\n");
  expect_error(server.call("POST", "/v1/sessions"), 503, "draining");
  expect_error(server.call("POST", "/v1/locks/j", "{}", {session_header(a)}), 503, "draining");
  EXPECT_EQ(server.call("GET", "/health").status, 200);
  // The TCP request times out, its connection is answered error_draining and closed, and the
  // daemon stops; the HTTP long poll is cut (its connection closed) at the stop.
  EXPECT_EQ(waiter.read_line(10s), "timeout");
  const std::optional<int> status = server.daemon->wait_exit(10s);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0);
  EXPECT_EQ(poll.read_response(5s).status, 0);
}

// ---- metrics and OpenAPI ---------------------------------------------------------------------

TEST(HttpApi, MetricsParseAsPrometheusText) {
  HttpServer server;
  Client tcp(server.daemon->port());
  ASSERT_EQ(fields(tcp.request("l", "m", "0")).at(0), "ok");
  const std::string a = server.new_session();
  ASSERT_EQ(server.call("POST", "/v1/locks/n", "{}", {session_header(a)}).status, 200);
  Client listener(server.daemon->port());
  ASSERT_EQ(listener.request("listen", "news.*", ""), "ok");
  ASSERT_EQ(listener.request("listen", "news.*", "g"), "ok");
  ASSERT_EQ(tcp.request("signal", "news.eu", "p"), "ok 2");
  const Response metrics = server.call("GET", "/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_EQ(metrics.header("content-type").rfind("text/plain; version=0.0.4", 0), 0U);
  const std::regex sample(
      R"(^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})? -?[0-9.eE+-]+$|^[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})? \+Inf$)");
  const std::regex comment(R"(^# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .+$)");
  std::istringstream lines(metrics.body);
  std::string line;
  std::map<std::string, std::string> values;
  while (std::getline(lines, line)) {
    ASSERT_TRUE(std::regex_match(line, sample) || std::regex_match(line, comment)) << line;
    if (line[0] != '#') values[line.substr(0, line.rfind(' '))] = line.substr(line.rfind(' ') + 1);
  }
  EXPECT_EQ(values["turnstile_ready"], "1");
  EXPECT_EQ(values["turnstile_connections"], "3");  // two TCP connections + one HTTP session
  EXPECT_EQ(values["turnstile_http_sessions"], "1");
  EXPECT_EQ(values["turnstile_locks_held"], "2");
  EXPECT_EQ(values["turnstile_lock_waiters"], "0");
  EXPECT_EQ(values["turnstile_signal_listeners"], "2");
  EXPECT_EQ(values["turnstile_signals_published_total"], "1");
  EXPECT_EQ(values["turnstile_signal_deliveries_total"], "2");
  EXPECT_EQ(values["turnstile_signal_slow_consumers_total"], "0");
  EXPECT_TRUE(values.count("turnstile_uptime_seconds"));
  EXPECT_EQ(values["turnstile_http_requests_total{method=\"POST\",path=\"/v1/locks/"
                   "{key}\",status=\"200\"}"],
            "1");
  EXPECT_EQ(values["turnstile_tcp_request_duration_seconds_count{command=\"l\"}"], "1");
  // Every command has its histogram, the ones added after the first thirteen too.
  EXPECT_EQ(values["turnstile_tcp_request_duration_seconds_count{command=\"listen\"}"], "2");
  EXPECT_EQ(values["turnstile_tcp_request_duration_seconds_count{command=\"signal\"}"], "1");
  // Buckets are cumulative: the one fast request is in every bucket from its own up.
  EXPECT_EQ(values["turnstile_tcp_request_duration_seconds_bucket{command=\"l\",le=\"30\"}"], "1");
  EXPECT_EQ(values["turnstile_tcp_request_duration_seconds_bucket{command=\"l\",le=\"+Inf\"}"],
            "1");
  EXPECT_EQ(values["turnstile_http_request_duration_seconds_count{path=\"/v1/locks/{key}\"}"], "1");
  // A scrape is not in its own text, only in the next one.
  const std::string scrapes =
      "turnstile_http_requests_total{method=\"GET\",path=\"/metrics\",status=\"200\"} ";
  EXPECT_EQ(metrics.body.find(scrapes), std::string::npos);
  EXPECT_NE(server.call("GET", "/metrics").body.find(scrapes + "1\n"), std::string::npos);
}

TEST(HttpApi, OpenApiServedLiveMatchesDocsAndTheRoutes) {
  HttpServer server;
  const Response served = server.call("GET", "/v1/openapi.json");
  ASSERT_EQ(served.status, 200);
  EXPECT_EQ(served.header("cache-control"), "public, max-age=60");
  const std::string docs = read_file(TURNSTILE_DOCS_DIR "/openapi.json");
  ASSERT_FALSE(docs.empty());
  EXPECT_EQ(served.body, docs);  // byte for byte
  const Json document = Json::parse(docs);
  EXPECT_EQ(document["openapi"].get<std::string>().rfind("3.1", 0), 0U);

  // Every route the server has is documented, and every documented route is served.
  std::set<std::pair<std::string, std::string>> routes;
  for (const core::HttpEndpointSpec& spec : core::kHttpEndpoints) {
    routes.emplace(std::string(spec.method), std::string(spec.pattern));
  }
  std::set<std::pair<std::string, std::string>> documented;
  for (const auto& [path, operations] : document["paths"].items()) {
    for (const auto& [method, operation] : operations.items()) {
      std::string upper = method;
      for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      documented.emplace(upper, path);
    }
  }
  EXPECT_EQ(routes, documented);
  for (const auto& [method, pattern] : documented) {
    std::string path = std::regex_replace(pattern, std::regex(R"(\{key\})"), "drift-key");
    path = std::regex_replace(path, std::regex(R"(\{id\})"), std::string(32, '0'));
    const Response response = server.call(method, path, "{}");
    EXPECT_NE(response.status, 0) << method << " " << path;
    if (response.status == 404 || response.status == 405) {
      EXPECT_NE(response.json().value("error", ""), "not_found") << method << " " << path;
      EXPECT_NE(response.json().value("error", ""), "method_not_allowed") << method << " " << path;
    }
  }
}

// ---- signals (docs/http-api.md, "Signals") ------------------------------------------------------

// A GET /v1/signals stream on a connection of its own: the response head, then the event stream,
// de-chunked as it arrives. (Or any other event stream: AtPath.)
class SignalStream {
 public:
  struct AtPath {
    std::string path;
  };
  SignalStream(int port, const std::string& query)
      : SignalStream(port, AtPath{"/v1/signals" + query}) {}
  SignalStream(int port, const AtPath& at) : http_(port) {
    if (!http_.send_request("GET", at.path, "", {})) return;
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (!head_) {
      head_ = client::parse_http_response_head(raw_);
      if (!head_ && !fill(deadline)) return;
    }
    raw_.erase(0, head_->size);
    chunked_ = head_->headers.count("transfer-encoding") != 0;
    if (chunked_) dechunk();  // what came with the head
    if (!chunked_) {
      // Not a stream: a JSON error framed by Content-Length.
      const auto length = head_->headers.find("content-length");
      const std::size_t size = length != head_->headers.end() ? std::stoul(length->second) : 0;
      while (raw_.size() < size && fill(deadline)) {
      }
      body_ = raw_;
      raw_.clear();
    }
  }

  int status() const { return head_ ? head_->status : 0; }
  std::string header(const std::string& name) const {
    if (!head_) return "";
    const auto found = head_->headers.find(name);
    return found == head_->headers.end() ? "" : found->second;
  }
  const std::string& body() const { return body_; }
  Json json() const { return Json::parse(body_); }
  bool ended() const { return ended_; }  // the last chunk came, or the server closed

  // Reads until the stream's text holds `text` after what earlier calls consumed; the text up to
  // and including it is consumed. False when it does not come within `timeout`.
  bool expect(const std::string& text, milliseconds timeout = 5s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      const std::size_t at = body_.find(text, consumed_);
      if (at != std::string::npos) {
        consumed_ = at + text.size();
        return true;
      }
      if (ended_ || !fill(deadline)) return false;
    }
  }
  // The events (`event: sig` blocks) received within `timeout`, from the unconsumed text.
  std::vector<std::string> events(milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!ended_ && fill(deadline)) {
    }
    std::vector<std::string> out;
    std::size_t at = consumed_;
    while (true) {
      const std::size_t start = body_.find("event: sig\n", at);
      if (start == std::string::npos) break;
      const std::size_t end = body_.find("\n\n", start);
      if (end == std::string::npos) break;
      out.push_back(body_.substr(start, end + 2 - start));
      at = end + 2;
    }
    consumed_ = at;
    return out;
  }
  // Waits for the end of the stream.
  bool wait_end(milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!ended_) {
      if (!fill(deadline) && std::chrono::steady_clock::now() >= deadline) return false;
    }
    return true;
  }
  void close() { http_.close(); }

 private:
  // Reads once more (raw bytes, then de-chunks them); false on timeout or EOF.
  bool fill(std::chrono::steady_clock::time_point deadline) {
    const auto left =
        std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{http_.fd(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    char chunk[65536];
    const ssize_t n = ::recv(http_.fd(), chunk, sizeof chunk, 0);
    if (n <= 0) {
      ended_ = true;
      return false;
    }
    raw_.append(chunk, static_cast<std::size_t>(n));
    if (head_ && chunked_) dechunk();
    return true;
  }
  void dechunk() {
    while (true) {
      const std::size_t line_end = raw_.find("\r\n");
      if (line_end == std::string::npos) return;
      const std::size_t size = std::stoul(raw_.substr(0, line_end), nullptr, 16);
      if (raw_.size() < line_end + 2 + size + 2) return;
      body_ += raw_.substr(line_end + 2, size);
      raw_.erase(0, line_end + 2 + size + 2);
      if (size == 0) {
        ended_ = true;
        return;
      }
    }
  }

  Http http_;
  std::optional<client::HttpResponseHead> head_;
  bool chunked_ = false;
  bool ended_ = false;
  std::string raw_;
  std::string body_;
  std::size_t consumed_ = 0;
};

// stats' signal_channels over TCP (null when absent: nothing listens).
Json signal_channels(int tcp_port) {
  Client tcp(tcp_port);
  const std::string reply = tcp.request("stats", "_", "");
  if (reply.rfind("ok ", 0) != 0) return Json("bad stats reply: " + reply);
  const Json root = Json::parse(reply.substr(3));
  return root.contains("signal_channels") ? root["signal_channels"] : Json();
}

TEST(HttpSignals, PublishWithoutListenersDeliversZero) {
  HttpServer server;
  const Response published = server.call("POST", "/v1/signals/news.eu", "{\"payload\":\"hello\"}");
  EXPECT_EQ(published.status, 200) << published.body;
  EXPECT_EQ(published.header("content-type"), "application/json");
  EXPECT_EQ(published.body, "{\"delivered\":0}\n");
}

TEST(HttpSignals, StreamGetsSignalsFromTcpAndHttpJsonEscaped) {
  HttpServer server;
  SignalStream stream(server.http_port, "?pattern=news.*");
  ASSERT_EQ(stream.status(), 200);
  EXPECT_EQ(stream.header("content-type"), "text/event-stream");
  EXPECT_EQ(stream.header("cache-control"), "no-cache");
  ASSERT_TRUE(stream.expect(":ok\n\n"));
  EXPECT_EQ(stream.body().rfind(":ok\n\n", 0), 0U);  // the first thing on the stream

  Client tcp(server.daemon->port());
  EXPECT_EQ(tcp.request("signal", "news.eu", "he said \"hi\" <b>&</b> \\o/"), "ok 1");
  EXPECT_TRUE(
      stream.expect("event: sig\ndata: {\"channel\":\"news.eu\",\"payload\":\"he said \\\"hi\\\" "
                    "\\u003cb\\u003e\\u0026\\u003c/b\\u003e \\\\o/\"}\n\n"));

  // Over HTTP the payload is kept as sent, as on TCP: spaces at either end (U+2028 too), a
  // tab, a control byte and other UTF-8 all stay.
  const Response published =
      server.call("POST", "/v1/signals/news.us",
                  "{\"payload\":\"  tab\\there \\u2028 \\u0001 \\u00e9\\u2028 \"}");
  EXPECT_EQ(published.status, 200) << published.body;
  EXPECT_EQ(published.body, "{\"delivered\":1}\n");
  EXPECT_TRUE(
      stream.expect("event: sig\ndata: {\"channel\":\"news.us\",\"payload\":\"  tab\\there "
                    "\\u2028 \\u0001 \xc3\xa9\\u2028 \"}\n\n"));
  // And a TCP payload's spaces at either end reach the stream too.
  EXPECT_EQ(tcp.request("signal", "news.eu", "  both  "), "ok 1");
  EXPECT_TRUE(
      stream.expect("event: sig\ndata: {\"channel\":\"news.eu\",\"payload\":\"  both  \"}\n\n"));
  // A TCP payload is bytes: one that is not UTF-8 becomes \ufffd, byte by byte, as in Go.
  EXPECT_EQ(tcp.request("signal", "news.raw",
                        "a\xff\xc3"
                        "b\x7f"),
            "ok 1");
  EXPECT_TRUE(stream.expect(
      "event: sig\ndata: {\"channel\":\"news.raw\",\"payload\":\"a\\ufffd\\ufffdb\x7f\"}\n\n"));
  // Not matched by news.*: nothing more arrives.
  EXPECT_EQ(tcp.request("signal", "news.eu.extra", "x"), "ok 0");
  EXPECT_TRUE(stream.events(300ms).empty());
}

TEST(HttpSignals, TcpListenerGetsHttpSignal) {
  HttpServer server;
  Client tcp(server.daemon->port());
  ASSERT_EQ(tcp.request("listen", "jobs.>", ""), "ok");
  const Response published =
      server.call("POST", "/v1/signals/jobs.build.1", "{\"payload\":\"go now\"}");
  EXPECT_EQ(published.status, 200) << published.body;
  EXPECT_EQ(published.body, "{\"delivered\":1}\n");
  EXPECT_EQ(tcp.read_line(), "sig jobs.build.1 go now");
  // A percent-encoded channel is decoded, as a key is.
  EXPECT_EQ(server.call("POST", "/v1/signals/jobs.%62uild", "{\"payload\":\"p\"}").body,
            "{\"delivered\":1}\n");
  EXPECT_EQ(tcp.read_line(), "sig jobs.build p");
}

TEST(HttpSignals, QueueGroupOfStreamsDeliversToOneMember) {
  HttpServer server;
  SignalStream a(server.http_port, "?pattern=work.*&group=+pool+");
  SignalStream b(server.http_port, "?group=pool&pattern=work.%2A");
  ASSERT_TRUE(a.expect(":ok\n\n"));
  ASSERT_TRUE(b.expect(":ok\n\n"));
  const Json channels = signal_channels(server.daemon->port());
  EXPECT_EQ(channels, Json::parse(R"([{"pattern":"work.*","group":"pool","listeners":2}])"));
  for (int i = 0; i < 4; ++i) {
    const Response published = server.call("POST", "/v1/signals/work.item",
                                           "{\"payload\":\"n" + std::to_string(i) + "\"}");
    EXPECT_EQ(published.body, "{\"delivered\":1}\n");
  }
  const std::vector<std::string> to_a = a.events(500ms);
  const std::vector<std::string> to_b = b.events(100ms);
  EXPECT_EQ(to_a.size() + to_b.size(), 4U);
  EXPECT_EQ(to_a.size(), 2U);  // round-robin
  EXPECT_EQ(to_b.size(), 2U);
}

TEST(HttpSignals, InvalidPatternIs400AndSubscribesNothing) {
  HttpServer server;
  for (const char* query : {"", "?group=g", "?pattern=", "?pattern=a.>.b", "?pattern=a..b",
                            "?pattern=a.b*", "?pattern=a%20b", "?pattern=a&group=x%0Ay",
                            "?pattern=a%", "?pattern=a%zz", "?pattern=a%zz&pattern=b"}) {
    SignalStream stream(server.http_port, query);
    EXPECT_EQ(stream.status(), 400) << query;
    EXPECT_EQ(stream.header("content-type"), "application/json") << query;
    EXPECT_EQ(stream.json().value("error", ""), "bad_request") << query << " " << stream.body();
    EXPECT_FALSE(stream.json().value("detail", "").empty()) << query;
  }
  SignalStream long_group(server.http_port, "?pattern=a&group=" + std::string(257, 'g'));
  EXPECT_EQ(long_group.status(), 400);
  EXPECT_TRUE(signal_channels(server.daemon->port()).is_null());
  expect_error(server.call("POST", "/v1/signals"), 405, "method_not_allowed");
}

TEST(HttpSignals, InvalidChannelOrPayloadIs400) {
  HttpServer server;
  Client tcp(server.daemon->port());
  ASSERT_EQ(tcp.request("listen", ">", ""), "ok");
  for (const char* channel : {"a.*", "a.>", "a..b", ".a", "a%20b"}) {
    expect_error(server.call("POST", std::string("/v1/signals/") + channel, "{\"payload\":\"x\"}"),
                 400, "bad_request");
  }
  expect_error(server.call("POST", "/v1/signals/" + std::string(257, 'c'), "{\"payload\":\"x\"}"),
               400, "bad_request");
  for (const std::string body :
       {"", "{}", "{\"payload\":\"\"}", "{\"payload\":\"  \\t \"}", "{\"payload\":5}",
        "{\"payload\":null}", "{\"payload\":\"a\\nb\"}", "{\"payload\":\"x\",\"extra\":1}", "[]",
        "{\"payload\":\"x\"} {}"}) {
    expect_error(server.call("POST", "/v1/signals/c", body), 400, "bad_request");
  }
  // The payload cap: 65536 - len("sig ") - len("c") - 1 = 65530 bytes.
  expect_error(
      server.call("POST", "/v1/signals/c", "{\"payload\":\"" + std::string(65531, 'p') + "\"}"),
      400, "bad_request");
  EXPECT_EQ(
      server.call("POST", "/v1/signals/c", "{\"payload\":\"" + std::string(65530, 'p') + "\"}")
          .body,
      "{\"delivered\":1}\n");
  const std::optional<std::string> line = tcp.read_line();
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ(*line, "sig c " + std::string(65530, 'p'));
  EXPECT_EQ(tcp.pending(200ms), "");  // none of the refused ones was delivered
}

TEST(HttpSignals, ClosedStreamLeavesTheHub) {
  HttpServer server;
  {
    SignalStream stream(server.http_port, "?pattern=gone.x");
    ASSERT_TRUE(stream.expect(":ok\n\n"));
    EXPECT_EQ(signal_channels(server.daemon->port()),
              Json::parse(R"([{"pattern":"gone.x","listeners":1}])"));
    stream.close();
  }
  EXPECT_TRUE(eventually([&] { return signal_channels(server.daemon->port()).is_null(); }, 5s));
  EXPECT_EQ(server.call("POST", "/v1/signals/gone.x", "{\"payload\":\"p\"}").body,
            "{\"delivered\":0}\n");
}

TEST(HttpSignals, PingsKeepTheStreamPastTheReadTimeout) {
  HttpServer server({"--http-sse-ping-interval=1", "--read-timeout=1"});
  SignalStream stream(server.http_port, "?pattern=t");
  ASSERT_TRUE(stream.expect(":ok\n\n"));
  EXPECT_TRUE(stream.expect(":ping\n\n", 5s));
  EXPECT_TRUE(stream.expect(":ping\n\n", 5s));
  // Well past --read-timeout without a byte from the client, the stream still delivers.
  EXPECT_EQ(server.call("POST", "/v1/signals/t", "{\"payload\":\"late\"}").body,
            "{\"delivered\":1}\n");
  EXPECT_TRUE(stream.expect("data: {\"channel\":\"t\",\"payload\":\"late\"}\n\n"));
  EXPECT_FALSE(stream.ended());
}

TEST(HttpSignals, FramesWrittenOutFreeTheQueue) {
  HttpServer server({"--signal-queue=8"});
  SignalStream stream(server.http_port, "?pattern=steady");
  ASSERT_TRUE(stream.expect(":ok\n\n"));
  Client tcp(server.daemon->port());
  for (int i = 0; i < 50; ++i) {
    ASSERT_EQ(tcp.request("signal", "steady", "n" + std::to_string(i)), "ok 1") << i;
  }
  EXPECT_EQ(stream.events(500ms).size(), 50U);
  EXPECT_FALSE(stream.ended());
}

TEST(HttpSignals, StreamThatDoesNotReadIsClosedAsSlowConsumer) {
  HttpServer server({"--signal-queue=4"});
  SignalStream stream(server.http_port, "?pattern=flood");
  ASSERT_TRUE(stream.expect(":ok\n\n"));
  // The stream reads nothing more: once the socket buffers are full, frames stay in the server's
  // output buffer unwritten, the hub's queue of 4 fills, and the stream is closed.
  Client tcp(server.daemon->port());
  const std::string payload(60000, 'f');
  int sent = 0;
  std::string reply = "ok 1";
  while (reply == "ok 1" && sent < 2000) {
    reply = tcp.request("signal", "flood", payload);
    ++sent;
  }
  EXPECT_EQ(reply, "ok 0") << "after " << sent << " signals";
  EXPECT_TRUE(server.daemon->wait_for_log("signal stream [0-9]+ closed, a slow signal consumer", 5s)
                  .has_value());
  EXPECT_TRUE(signal_channels(server.daemon->port()).is_null());
  EXPECT_TRUE(stream.wait_end(10s));  // what was sent, then the connection closes
}

TEST(HttpSignals, DrainEndsStreams) {
  HttpServer server;
  SignalStream stream(server.http_port, "?pattern=d");
  ASSERT_TRUE(stream.expect(":ok\n\n"));
  server.daemon->signal(SIGTERM);
  EXPECT_TRUE(stream.wait_end(10s));
  EXPECT_TRUE(server.daemon->wait_exit(10s).has_value());
}

// ---- fence check, inspection, force-release (docs/http-api.md) ----------------------------------

const std::string kAdminToken = "integration-admin-token";
std::string admin_header(const std::string& token = kAdminToken) {
  return "Authorization: Bearer " + token;
}

// POST /v1/{kind}/{key}/check with the token: no session.
Response check(const HttpServer& server, const std::string& kind, const std::string& key,
               const std::string& token) {
  return server.call("POST", "/v1/" + kind + "/" + key + "/check", token_body(token));
}

Response force_release(const HttpServer& server, const std::string& path) {
  return server.call("DELETE", "/v1/admin/" + path, "", {admin_header()});
}

// The value of the sample `name` in /metrics ("" when absent).
std::string metric(const HttpServer& server, const std::string& name) {
  std::istringstream lines(server.call("GET", "/metrics").body);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(name + " ", 0) == 0) return line.substr(name.size() + 1);
  }
  return "";
}

const std::string kNotHeld = "{\"held\":false}\n";

TEST(HttpOperator, CheckSaysWhetherATokenHoldsItsKeyNow) {
  HttpServer server;
  const std::string a = server.new_session();
  const std::string lock = granted_token(
      server.call("POST", "/v1/locks/job", "{\"lease_ttl_s\":20}", {session_header(a)}));
  ASSERT_FALSE(lock.empty());
  const Response held = check(server, "locks", "job", lock);  // no session header
  EXPECT_EQ(held.status, 200);
  EXPECT_EQ(held.header("content-type"), "application/json");
  EXPECT_EQ(held.json()["held"], true);
  EXPECT_GE(held.json()["remaining_s"].get<std::int64_t>(), 19);
  EXPECT_LE(held.json()["remaining_s"].get<std::int64_t>(), 20);
  // The same token holds nothing in the other namespaces, nor on another key.
  EXPECT_EQ(check(server, "semaphores", "job", lock).body, kNotHeld);
  EXPECT_EQ(check(server, "rwlocks", "job", lock).body, kNotHeld);
  EXPECT_EQ(check(server, "locks", "other", lock).body, kNotHeld);
  // A string the server could not have issued is simply not held; a missing token is a 400.
  EXPECT_EQ(check(server, "locks", "job", "not-a-token").body, kNotHeld);
  expect_error(server.call("POST", "/v1/locks/job/check", "{}"), 400, "bad_request");
  expect_error(server.call("POST", "/v1/locks/job/check", "{\"token\":\"\"}"), 400, "bad_request");
  expect_error(server.call("POST", "/v1/locks/a%20b/check", token_body(lock)), 400, "bad_request");
  // Semaphore and read-write lock tokens, whatever shard their key is on.
  for (int i = 0; i < 4; ++i) {
    const std::string key = "pool" + std::to_string(i);
    const std::string sem = granted_token(
        server.call("POST", "/v1/semaphores/" + key, "{\"limit\":2}", {session_header(a)}));
    EXPECT_EQ(check(server, "semaphores", key, sem).json()["held"], true) << key;
    EXPECT_EQ(check(server, "locks", key, sem).body, kNotHeld) << key;
    const std::string reader = granted_token(rw_call(server, a, key, "read", "{}"));
    EXPECT_EQ(check(server, "rwlocks", key, reader).json()["held"], true) << key;
    ASSERT_EQ(rw_call(server, a, key, "read/release", token_body(reader)).status, 204);
    EXPECT_EQ(check(server, "rwlocks", key, reader).body, kNotHeld) << key;
  }
  // Released: no longer held.
  ASSERT_EQ(
      server.call("POST", "/v1/locks/job/release", token_body(lock), {session_header(a)}).status,
      204);
  EXPECT_EQ(check(server, "locks", "job", lock).body, kNotHeld);
  // Expired: no longer held either.
  const std::string brief = granted_token(
      server.call("POST", "/v1/locks/brief", "{\"lease_ttl_s\":1}", {session_header(a)}));
  EXPECT_EQ(check(server, "locks", "brief", brief).json()["held"], true);
  EXPECT_TRUE(
      eventually([&] { return check(server, "locks", "brief", brief).body == kNotHeld; }, 5s));
}

TEST(HttpOperator, InspectShowsHoldersByFenceAndWaitersInQueueOrder) {
  HttpServer server;
  const std::string a = server.new_session();
  const std::string b = server.new_session();
  const std::string c = server.new_session();
  const std::string held = granted_token(
      server.call("POST", "/v1/locks/q", "{\"lease_ttl_s\":60}", {session_header(a)}));
  ASSERT_FALSE(held.empty());
  Http poll_b(server.http_port);
  ASSERT_TRUE(poll_b.send_request("POST", "/v1/locks/q", "{\"acquire_timeout_s\":30}",
                                  {session_header(b)}));
  Json shown;
  ASSERT_TRUE(eventually(
      [&] {
        shown = server.call("GET", "/v1/locks/q").json();
        return shown["waiters"].size() == 1;
      },
      5s));
  const Json b_session = shown["waiters"][0]["session"];
  Http poll_c(server.http_port);
  ASSERT_TRUE(poll_c.send_request("POST", "/v1/locks/q", "{\"acquire_timeout_s\":30}",
                                  {session_header(c)}));
  ASSERT_TRUE(eventually(
      [&] { return server.call("GET", "/v1/locks/q").json()["waiters"].size() == 2; }, 5s));
  const Response inspected = server.call("GET", "/v1/locks/q");
  EXPECT_EQ(inspected.status, 200);
  EXPECT_EQ(inspected.body.find(held), std::string::npos);  // fences, never tokens
  Json json = inspected.json();
  EXPECT_EQ(json["kind"], "lock");
  EXPECT_EQ(json["key"], "q");
  EXPECT_EQ(json["exists"], true);
  EXPECT_EQ(json["limit"], 1);
  ASSERT_EQ(json["holders"].size(), 1U);
  EXPECT_EQ(json["holders"][0]["fence"].get<unsigned long long>(), fence_of(held).value());
  EXPECT_GT(json["holders"][0]["lease_expires_in_s"].get<double>(), 50);
  ASSERT_EQ(json["waiters"].size(), 2U);
  EXPECT_EQ(json["waiters"][0]["session"], b_session);  // in arrival order
  EXPECT_NE(json["waiters"][1]["session"], b_session);
  // The holder leaves: the first waiter holds, with its own fence.
  ASSERT_EQ(
      server.call("POST", "/v1/locks/q/release", token_body(held), {session_header(a)}).status,
      204);
  const std::string b_token = granted_token(poll_b.read_response());
  ASSERT_FALSE(b_token.empty());
  json = server.call("GET", "/v1/locks/q").json();
  ASSERT_EQ(json["holders"].size(), 1U);
  EXPECT_EQ(json["holders"][0]["fence"].get<unsigned long long>(), fence_of(b_token).value());
  EXPECT_EQ(json["holders"][0]["session"], b_session);
  EXPECT_EQ(json["waiters"].size(), 1U);
  // A key not in use: 404, with the same JSON saying so.
  const Response unknown = server.call("GET", "/v1/locks/never-used");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(unknown.header("content-type"), "application/json");
  EXPECT_EQ(unknown.json(), Json::parse(R"({"kind":"lock","key":"never-used","exists":false,)"
                                        R"("limit":0,"holders":[],"waiters":[]})"));
  expect_error(server.call("GET", "/v1/locks/a%20b"), 400, "bad_request");
  // A semaphore shows its limit; a read-write lock each holder's side; namespaces are apart. (c
  // still waits for q, and its requests wait behind that one: a's go at once.)
  ASSERT_FALSE(granted_token(
                   server.call("POST", "/v1/semaphores/pool", "{\"limit\":3}", {session_header(a)}))
                   .empty());
  json = server.call("GET", "/v1/semaphores/pool").json();
  EXPECT_EQ(json["kind"], "sem");
  EXPECT_EQ(json["limit"], 3);
  EXPECT_EQ(json["holders"].size(), 1U);
  ASSERT_FALSE(granted_token(rw_call(server, a, "cfg", "read", "{}")).empty());
  json = server.call("GET", "/v1/rwlocks/cfg").json();
  EXPECT_EQ(json["kind"], "rw");
  ASSERT_EQ(json["holders"].size(), 1U);
  EXPECT_EQ(json["holders"][0]["mode"], "read");
  EXPECT_EQ(server.call("GET", "/v1/locks/cfg").status, 404);
  EXPECT_EQ(server.call("GET", "/v1/locks/pool").status, 404);
}

TEST(HttpOperator, ForceReleaseNeedsTheAdminTokenAndHandsTheKeyToTheNextWaiter) {
  {
    HttpServer plain;  // no --admin-token
    expect_error(plain.call("DELETE", "/v1/admin/locks/k", "", {admin_header()}), 403,
                 "admin_disabled");
  }
  HttpServer server({"--admin-token=" + kAdminToken});
  const std::string a = server.new_session();
  const std::string b = server.new_session();
  const std::string forced = granted_token(
      server.call("POST", "/v1/locks/job", "{\"lease_ttl_s\":60}", {session_header(a)}));
  ASSERT_FALSE(forced.empty());
  Http waiter(server.http_port);
  ASSERT_TRUE(waiter.send_request("POST", "/v1/locks/job", "{\"acquire_timeout_s\":30}",
                                  {session_header(b)}));
  ASSERT_TRUE(eventually([&] { return server.waiters("job") == 1; }, 5s));
  // Without the admin token (or with the wrong one): 401, and nothing changes.
  expect_error(server.call("DELETE", "/v1/admin/locks/job"), 401, "unauthorized");
  expect_error(server.call("DELETE", "/v1/admin/locks/job", "", {admin_header("wrong")}), 401,
               "unauthorized");
  EXPECT_EQ(check(server, "locks", "job", forced).json()["held"], true);
  const std::size_t log_from = server.daemon->log_size();
  const Response released = force_release(server, "locks/job");
  EXPECT_EQ(released.status, 200);
  EXPECT_EQ(released.body, "{\"released\":1}\n");
  // The next waiter is granted, with a higher fence.
  const std::string next = granted_token(waiter.read_response());
  ASSERT_FALSE(next.empty());
  EXPECT_GT(fence_of(next).value(), fence_of(forced).value());
  EXPECT_EQ(check(server, "locks", "job", forced).body, kNotHeld);
  EXPECT_EQ(check(server, "locks", "job", next).json()["held"], true);
  // The forced token's release and renewal now fail.
  expect_error(
      server.call("POST", "/v1/locks/job/release", token_body(forced), {session_header(a)}), 409,
      "lease_expired");
  expect_error(server.call("POST", "/v1/locks/job/renew", token_body(forced), {session_header(a)}),
               409, "lease_expired");
  // Logged, with who asked.
  EXPECT_TRUE(server.daemon
                  ->wait_for_log(R"( warn admin: force-release of lock job \(every holder\) asked )"
                                 R"(by 127\.0\.0\.1:[0-9]+ with the admin token: 1 freed)",
                                 5s, log_from)
                  .has_value());
  // A key nobody holds: 0 freed. A bad fence: 400.
  EXPECT_EQ(force_release(server, "locks/nobody").body, "{\"released\":0}\n");
  expect_error(force_release(server, "locks/job?fence=x"), 400, "bad_request");
  expect_error(force_release(server, "locks/job?fence=0"), 400, "bad_request");
  EXPECT_EQ(metric(server, "turnstile_forced_releases_total"), "1");
}

// The counters an operator alerts on (ops/prometheus/turnstile-rules.yml): grants, lease
// expiries, wait timeouts, refused tokens, and the connection cap.
TEST(HttpOperator, MetricsCountExpiriesTimeoutsGrantsAndAuthFailures) {
  HttpServer server({"--admin-token=" + kAdminToken, "--max-connections=500"});
  EXPECT_EQ(metric(server, "turnstile_max_connections"), "500");
  EXPECT_EQ(metric(server, "turnstile_grants_total"), "0");
  const std::string a = server.new_session();
  const std::string b = server.new_session();
  ASSERT_FALSE(
      granted_token(server.call("POST", "/v1/locks/job",
                                "{\"acquire_timeout_s\":0,\"lease_ttl_s\":1}", {session_header(a)}))
          .empty());
  // b holds another key without a lease end in sight; a waits a second for it and gives up.
  ASSERT_FALSE(granted_token(server.call("POST", "/v1/locks/other-job", "{\"acquire_timeout_s\":0}",
                                         {session_header(b)}))
                   .empty());
  EXPECT_EQ(
      server.call("POST", "/v1/locks/other-job", "{\"acquire_timeout_s\":1}", {session_header(a)})
          .json()["status"],
      "timeout");
  // a's one-second lease on job has run out meanwhile.
  EXPECT_TRUE(
      eventually([&] { return metric(server, "turnstile_lease_expiries_total") == "1"; }, 10s));
  EXPECT_EQ(metric(server, "turnstile_wait_timeouts_total"), "1");
  EXPECT_EQ(metric(server, "turnstile_grants_total"), "2");
  EXPECT_EQ(metric(server, "turnstile_fence_exhausted_total"), "0");
  EXPECT_EQ(metric(server, "turnstile_auth_failures_total"), "0");
  expect_error(server.call("DELETE", "/v1/admin/locks/job"), 401, "unauthorized");
  expect_error(server.call("DELETE", "/v1/admin/locks/job", "", {admin_header("wrong")}), 401,
               "unauthorized");
  EXPECT_EQ(metric(server, "turnstile_auth_failures_total"), "2");
}

TEST(HttpOperator, ForceReleaseOfOneFenceFreesOneOfTwoReaders) {
  HttpServer server({"--admin-token=" + kAdminToken});
  const std::string a = server.new_session();
  const std::string b = server.new_session();
  const std::string first = granted_token(rw_call(server, a, "cfg", "read", "{}"));
  const std::string second = granted_token(rw_call(server, b, "cfg", "read", "{}"));
  ASSERT_FALSE(first.empty());
  ASSERT_FALSE(second.empty());
  EXPECT_EQ(metric(server, "turnstile_rwlock_readers"), "2");
  const std::string fence = std::to_string(fence_of(first).value());
  const std::size_t log_from = server.daemon->log_size();
  EXPECT_EQ(force_release(server, "rwlocks/cfg?fence=" + fence).body, "{\"released\":1}\n");
  EXPECT_EQ(check(server, "rwlocks", "cfg", first).body, kNotHeld);
  EXPECT_EQ(check(server, "rwlocks", "cfg", second).json()["held"], true);
  const Json json = server.call("GET", "/v1/rwlocks/cfg").json();
  ASSERT_EQ(json["holders"].size(), 1U);
  EXPECT_EQ(json["holders"][0]["fence"].get<unsigned long long>(), fence_of(second).value());
  EXPECT_EQ(json["holders"][0]["mode"], "read");
  EXPECT_TRUE(server.daemon
                  ->wait_for_log("admin: force-release of rw cfg \\(the holder with fence " +
                                     fence +
                                     "\\) asked by 127\\.0\\.0\\.1:[0-9]+ with the admin "
                                     "token: 1 freed",
                                 5s, log_from)
                  .has_value());
  // Once only; and the other kinds of the key are other resources.
  EXPECT_EQ(force_release(server, "rwlocks/cfg?fence=" + fence).body, "{\"released\":0}\n");
  EXPECT_EQ(force_release(server, "locks/cfg").body, "{\"released\":0}\n");
  EXPECT_EQ(force_release(server, "semaphores/cfg").body, "{\"released\":0}\n");
  EXPECT_EQ(metric(server, "turnstile_rwlock_readers"), "1");
  EXPECT_EQ(metric(server, "turnstile_rwlock_writers"), "0");
  EXPECT_EQ(metric(server, "turnstile_forced_releases_total"), "1");
  // The rest go at once without a fence.
  EXPECT_EQ(force_release(server, "rwlocks/cfg").body, "{\"released\":1}\n");
  EXPECT_EQ(check(server, "rwlocks", "cfg", second).body, kNotHeld);
}

// ---- lost slots of HTTP sessions (docs/http-api.md, "Lost slots") ------------------------------

TEST(HttpLost, ASessionsNextReplyCarriesTheSlotsItLost) {
  HttpServer server({"--admin-token=" + kAdminToken});
  const std::string a = server.new_session();
  const std::string b = server.new_session();
  const auto on = [&](const std::string& session, const std::string& path,
                      const std::string& body) {
    return server.call("POST", path, body, {session_header(session)});
  };
  const std::string brief = granted_token(on(a, "/v1/locks/brief", "{\"lease_ttl_s\":1}"));
  const std::string kept = granted_token(on(a, "/v1/locks/kept", "{\"lease_ttl_s\":60}"));
  const std::string forced = granted_token(on(a, "/v1/semaphores/pool", "{\"limit\":2}"));
  ASSERT_FALSE(brief.empty());
  ASSERT_FALSE(forced.empty());
  EXPECT_FALSE(on(a, "/v1/locks/x", "{}").json().contains("lost"));  // nothing lost yet
  ASSERT_TRUE(
      eventually([&] { return check(server, "locks", "brief", brief).body == kNotHeld; }, 5s));
  EXPECT_EQ(force_release(server, "semaphores/pool").body, "{\"released\":1}\n");
  // A release answers 204, without a body: the losses wait for the next reply with one.
  const Response released = on(a, "/v1/locks/kept/release", token_body(kept));
  EXPECT_EQ(released.status, 204);
  EXPECT_EQ(released.body, "");
  const Response next = on(a, "/v1/locks/other", "{}");
  ASSERT_EQ(next.status, 200);
  const Json json = next.json();
  EXPECT_EQ(json["status"], "ok");
  ASSERT_TRUE(json.contains("lost")) << next.body;
  EXPECT_EQ(json["lost"], Json::parse("[{\"kind\":\"lock\",\"key\":\"brief\",\"token\":\"" + brief +
                                      "\",\"reason\":\"expired\"},{\"kind\":\"sem\",\"key\":"
                                      "\"pool\",\"token\":\"" +
                                      forced + "\",\"reason\":\"forced\"}]"));
  EXPECT_FALSE(json.contains("lost_dropped"));
  // Once only, and never to a session that lost nothing.
  EXPECT_FALSE(on(a, "/v1/locks/other2", "{}").json().contains("lost"));
  EXPECT_FALSE(on(b, "/v1/locks/other3", "{}").json().contains("lost"));
  // An error reply carries them too.
  const std::string again = granted_token(on(a, "/v1/rwlocks/again/write", "{}"));
  EXPECT_EQ(force_release(server, "rwlocks/again").body, "{\"released\":1}\n");
  const Response refused = on(a, "/v1/rwlocks/again/write/renew", token_body(again));
  expect_error(refused, 409, "lease_expired");
  EXPECT_EQ(refused.json()["lost"], Json::parse("[{\"kind\":\"rw\",\"key\":\"again\",\"token\":\"" +
                                                again + "\",\"reason\":\"forced\"}]"));
}

TEST(HttpLost, TheSessionEventStreamDeliversLostSlots) {
  HttpServer server({"--admin-token=" + kAdminToken});
  expect_error(server.call("GET", "/v1/sessions/XYZ/events"), 400, "bad_request");
  expect_error(server.call("GET", "/v1/sessions/" + std::string(32, '0') + "/events"), 410,
               "session_gone");
  // Several sessions, so that streams and sessions meet on the same thread and on different ones.
  for (int i = 0; i < 4; ++i) {
    const std::string session = server.new_session();
    const std::string key = "k" + std::to_string(i);
    SignalStream stream(server.http_port,
                        SignalStream::AtPath{"/v1/sessions/" + session + "/events"});
    ASSERT_EQ(stream.status(), 200) << stream.body();
    EXPECT_EQ(stream.header("content-type"), "text/event-stream");
    EXPECT_EQ(stream.header("cache-control"), "no-cache");
    ASSERT_TRUE(stream.expect(":ok\n\n"));
    const std::string token =
        granted_token(server.call("POST", "/v1/locks/" + key, "{}", {session_header(session)}));
    ASSERT_FALSE(token.empty());
    EXPECT_EQ(force_release(server, "locks/" + key).body, "{\"released\":1}\n");
    EXPECT_TRUE(stream.expect("event: lost\ndata: {\"kind\":\"lock\",\"key\":\"" + key +
                              "\",\"token\":\"" + token + "\",\"reason\":\"forced\"}\n\n"))
        << stream.body();
    if (i == 0) {
      // An expired lease too.
      const std::string brief =
          granted_token(server.call("POST", "/v1/semaphores/brief",
                                    "{\"limit\":1,\"lease_ttl_s\":1}", {session_header(session)}));
      EXPECT_TRUE(
          stream.expect("event: lost\ndata: {\"kind\":\"sem\",\"key\":\"brief\",\"token\":\"" +
                            brief + "\",\"reason\":\"expired\"}\n\n",
                        5s))
          << stream.body();
    }
    // A newer stream of the session replaces this one.
    SignalStream newer(server.http_port,
                       SignalStream::AtPath{"/v1/sessions/" + session + "/events"});
    ASSERT_EQ(newer.status(), 200);
    ASSERT_TRUE(newer.expect(":ok\n\n"));
    EXPECT_TRUE(stream.expect("event: end\ndata: {\"reason\":\"replaced\"}\n\n"));
    EXPECT_TRUE(stream.wait_end(5s));
    // Deleting the session ends the newer one.
    EXPECT_EQ(server.call("DELETE", "/v1/sessions/" + session).status, 204);
    EXPECT_TRUE(newer.expect("event: end\ndata: {\"reason\":\"session_gone\"}\n\n"));
    EXPECT_TRUE(newer.wait_end(5s));
  }
}

TEST(HttpLost, AStreamWhoseClientLeftIsForgotten) {
  HttpServer server({"--admin-token=" + kAdminToken});
  const std::string session = server.new_session();
  {
    SignalStream stream(server.http_port,
                        SignalStream::AtPath{"/v1/sessions/" + session + "/events"});
    ASSERT_TRUE(stream.expect(":ok\n\n"));
  }
  // The session lives on, its losses still reach its replies, and a new stream opens.
  const std::string token =
      granted_token(server.call("POST", "/v1/locks/k", "{}", {session_header(session)}));
  EXPECT_EQ(force_release(server, "locks/k").body, "{\"released\":1}\n");
  SignalStream again(server.http_port, SignalStream::AtPath{"/v1/sessions/" + session + "/events"});
  ASSERT_TRUE(again.expect(":ok\n\n"));
  const Response next = server.call("POST", "/v1/locks/k", "{}", {session_header(session)});
  EXPECT_EQ(next.json()["lost"].size(), 1U) << next.body;
  EXPECT_EQ(server.call("POST", "/v1/sessions/" + session + "/ping").status, 204);
}

// A TCP connection that asked for lost-notify is told when an operator force-releases its lock
// over HTTP; one that did not ask is told nothing.
TEST(HttpLost, ATcpConnectionThatAskedIsToldOfAnAdminForceRelease) {
  HttpServer server({"--admin-token=" + kAdminToken});
  Client told(server.daemon->port());
  Client silent(server.daemon->port());
  ASSERT_EQ(told.request("lost-notify", "_", "on"), "ok");
  const std::vector<std::string> grant = fields(told.request("l", "k", "10"));
  ASSERT_EQ(grant.at(0), "ok");
  const std::vector<std::string> other = fields(silent.request("l", "k2", "10"));
  ASSERT_EQ(other.at(0), "ok");
  EXPECT_EQ(force_release(server, "locks/k").body, "{\"released\":1}\n");
  EXPECT_EQ(told.read_line(5s), "lost lock k " + grant.at(1) + " forced");
  EXPECT_EQ(force_release(server, "locks/k2").body, "{\"released\":1}\n");
  EXPECT_EQ(silent.pending(300ms), "");
  // Both go on; the forced tokens are refused as expired.
  EXPECT_EQ(told.request("r", "k", grant.at(1)), "error_lease_expired");
  EXPECT_EQ(silent.request("r", "k2", other.at(1)), "error_lease_expired");
}

}  // namespace
}  // namespace turnstile::integration
