// HEAD over the HTTP API (docs/http-api.md, "HEAD"): a real turnstiled with --http-port, one
// keep-alive HTTP/1.1 connection per test, the HEAD request pipelined with a GET behind it. A
// HEAD is answered as its GET is, status and headers, Content-Length the GET body's, but without
// the body; so the reply after it on the same connection is read from its first byte.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>

#include "client/http_response.h"
#include "core/http_codec.h"
#include "tests/integration/harness.h"

namespace turnstile::integration {
namespace {

// One keep-alive connection read by hand: a head, then exactly the body bytes the caller says.
class Connection {
 public:
  explicit Connection(int port) {
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
  ~Connection() { ::close(fd_); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  void send(const std::string& method, const std::string& target) {
    const std::string request = method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    std::size_t sent = 0;
    while (sent < request.size()) {
      const ssize_t n = ::send(fd_, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      ASSERT_GT(n, 0);
      sent += static_cast<std::size_t>(n);
    }
  }

  // The next head on the connection, removed from what was read; nullopt after 10 s without one
  // or when the bytes there are not a response head.
  std::optional<client::HttpResponseHead> head() {
    while (buffer_.find("\r\n\r\n") == std::string::npos) {
      if (!fill()) return std::nullopt;
    }
    std::optional<client::HttpResponseHead> parsed = client::parse_http_response_head(buffer_);
    if (parsed) buffer_.erase(0, parsed->size);
    return parsed;
  }

  // The next `size` bytes.
  std::string body(std::size_t size) {
    while (buffer_.size() < size) {
      if (!fill()) break;
    }
    const std::string taken = buffer_.substr(0, size);
    buffer_.erase(0, taken.size());
    return taken;
  }

  // A GET read whole: its head and its body (framed by Content-Length).
  std::pair<client::HttpResponseHead, std::string> get(const std::string& target) {
    send("GET", target);
    std::optional<client::HttpResponseHead> got = head();
    if (!got) return {};
    return {*got, body(length(*got))};
  }

  static std::size_t length(const client::HttpResponseHead& head) {
    const auto found = head.headers.find("content-length");
    return found == head.headers.end() ? 0 : std::stoul(found->second);
  }

  // What has arrived and is not read yet, after a short wait for more.
  std::string unread() {
    while (fill(std::chrono::milliseconds(200))) {
    }
    return buffer_;
  }

 private:
  bool fill(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return false;
    char chunk[65536];
    const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
    if (n <= 0) return false;
    buffer_.append(chunk, static_cast<std::size_t>(n));
    return true;
  }

  int fd_ = -1;
  std::string buffer_;
};

std::string header(const client::HttpResponseHead& head, const std::string& name) {
  const auto found = head.headers.find(name);
  return found == head.headers.end() ? "" : found->second;
}

// HEAD `target` and then GET /health on one connection: the HEAD's head is `status` with the
// Content-Length `length`, no body follows it, and the /health reply is read whole after it.
void expect_head(Connection& connection, const std::string& target, int status,
                 std::size_t length) {
  connection.send("HEAD", target);
  connection.send("GET", "/health");
  const std::optional<client::HttpResponseHead> head = connection.head();
  ASSERT_TRUE(head) << target;
  EXPECT_EQ(head->status, status) << target;
  EXPECT_EQ(header(*head, "content-length"), std::to_string(length)) << target;
  EXPECT_EQ(header(*head, "x-content-type-options"), "nosniff") << target;
  const std::optional<client::HttpResponseHead> next = connection.head();
  ASSERT_TRUE(next) << "after HEAD " << target << ": " << connection.unread();
  EXPECT_EQ(next->status, 200) << target;
  EXPECT_EQ(connection.body(Connection::length(*next)), "{\"status\":\"ok\"}\n") << target;
}

TEST(HttpHead, AGetRouteAnswersHeadAsGetWithoutTheBody) {
  HttpDaemon server;
  Connection connection(server.http_port);
  for (const std::string target :
       {"/health", "/ready", "/v1/openapi.json", "/v1/locks/k", "/v1/semaphores/k", "/v1/rwlocks/k",
        "/v1/signals?pattern=a..b", "/v1/sessions/xyz/events"}) {
    const auto [get, body] = connection.get(target);
    ASSERT_GT(get.status, 0) << target;
    ASSERT_FALSE(body.empty()) << target;
    expect_head(connection, target, get.status, body.size());
  }
  // The GET's headers come with it.
  connection.send("HEAD", "/v1/openapi.json");
  const std::optional<client::HttpResponseHead> openapi = connection.head();
  ASSERT_TRUE(openapi);
  EXPECT_EQ(header(*openapi, "content-type"), "application/json");
  EXPECT_EQ(header(*openapi, "cache-control"), "public, max-age=60");
  // /v1/stats is answered later, through the engine; its length is the body's too (stats
  // change between two calls, so it is only checked to be there and not sent).
  connection.send("HEAD", "/v1/stats");
  connection.send("GET", "/health");
  const std::optional<client::HttpResponseHead> stats = connection.head();
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->status, 200);
  EXPECT_GT(Connection::length(*stats), 2U);
  const std::optional<client::HttpResponseHead> after = connection.head();
  ASSERT_TRUE(after) << connection.unread();
  EXPECT_EQ(connection.body(Connection::length(*after)), "{\"status\":\"ok\"}\n");
}

TEST(HttpHead, ErrorsToHeadHaveTheirLengthAndNoBody) {
  HttpDaemon server;
  Connection connection(server.http_port);
  expect_head(connection, "/nope", 404,
              core::http_error_body("not_found", "no route for /nope").size());
  const std::string post_only = "/v1/locks/k/release";
  expect_head(
      connection, post_only, 405,
      core::http_error_body("method_not_allowed", "HEAD is not allowed on " + post_only).size());
  connection.send("HEAD", post_only);
  const std::optional<client::HttpResponseHead> refused = connection.head();
  ASSERT_TRUE(refused);
  EXPECT_EQ(header(*refused, "allow"), "POST");
  EXPECT_EQ(header(*refused, "content-type"), "application/json");
  // A GET path lists HEAD beside it.
  const auto [wrong, body] = [&] {
    connection.send("DELETE", "/v1/stats");
    std::optional<client::HttpResponseHead> got = connection.head();
    return std::pair{got.value_or(client::HttpResponseHead{}),
                     got ? connection.body(Connection::length(*got)) : ""};
  }();
  EXPECT_EQ(wrong.status, 405) << body;
  EXPECT_EQ(header(wrong, "allow"), "GET, HEAD");
}

TEST(HttpHead, AStreamRouteChecksTheRequestAndOpensNoStream) {
  HttpDaemon server;
  Connection connection(server.http_port);
  connection.send("HEAD", "/v1/signals?pattern=news.*");
  connection.send("GET", "/health");
  const std::optional<client::HttpResponseHead> head = connection.head();
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(header(*head, "content-type"), "text/event-stream");
  EXPECT_EQ(header(*head, "cache-control"), "no-cache");
  // No stream: the next reply is /health's, and the connection serves more.
  const std::optional<client::HttpResponseHead> next = connection.head();
  ASSERT_TRUE(next) << connection.unread();
  EXPECT_EQ(next->status, 200);
  EXPECT_EQ(connection.body(Connection::length(*next)), "{\"status\":\"ok\"}\n");
  Client tcp(server.daemon->port());
  EXPECT_EQ(tcp.request("signal", "news.eu", "x"), "ok 0");  // nobody listens
  EXPECT_EQ(connection.get("/ready").first.status, 200);
}

// A session's event stream is answered as its GET would be: 410 for a session that does not
// exist (a HEAD once answered 200 there), the stream's head for one that does, with no stream
// left open and the session's own stream still free to open.
TEST(HttpHead, ASessionsEventStreamAnswersHeadAsItsGetWould) {
  HttpDaemon server;
  Connection connection(server.http_port);
  const std::string gone = "/v1/sessions/0123456789abcdef0123456789abcdef/events";
  const auto [refused, refusal] = connection.get(gone);
  ASSERT_EQ(refused.status, 410) << refusal;
  expect_head(connection, gone, 410, refusal.size());

  const HttpResult created = http_request(server.http_port, "POST", "/v1/sessions");
  ASSERT_EQ(created.status, 200) << created.raw;
  const std::string id = nlohmann::json::parse(created.body).value("session_id", "");
  connection.send("HEAD", "/v1/sessions/" + id + "/events");
  connection.send("GET", "/health");
  const std::optional<client::HttpResponseHead> head = connection.head();
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(header(*head, "content-type"), "text/event-stream");
  const std::optional<client::HttpResponseHead> next = connection.head();
  ASSERT_TRUE(next) << connection.unread();
  EXPECT_EQ(connection.body(Connection::length(*next)), "{\"status\":\"ok\"}\n");
  // The HEAD's watch is gone: deleting the session ends nothing on this connection, which
  // still serves.
  EXPECT_EQ(http_request(server.http_port, "DELETE", "/v1/sessions/" + id).status, 204);
  EXPECT_EQ(connection.get("/ready").first.status, 200);
}

}  // namespace
}  // namespace turnstile::integration
