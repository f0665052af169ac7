// core/http_api.h: the HTTP API's decisions on one shard — admission in reference 3.1's order
// (CORS, route, rate limit, token, 404/405), the delayed 401, probes, one-shot requests, key
// requests and the admin routes — driven as the daemon and the simulator drive it: an engine, its
// Router, an HttpSessionRouter and a host that answers what the API asks of the process.
#include "core/http_api.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/http_request_encode.h"
#include "core/random.h"
#include "testing/requests.h"

namespace turnstile::core {
namespace {

class FakeHost final : public HttpApiHost {
 public:
  bool rate_allow(Instant, const std::string& ip) override {
    ++rate_checks;
    return ip != "10.6.6.6";
  }
  bool starting() const override { return is_starting; }
  bool cluster_mode() const override { return cluster; }
  bool leader_known() const override { return leader; }
  std::int64_t connections() const override { return 7; }
  std::string metrics_text(const StatsSnapshot&, bool ready) override {
    return ready ? "ready 1\n" : "ready 0\n";
  }
  std::string_view openapi_json() const override { return "{\"openapi\":\"3.1.0\"}"; }
  void auth_failed(const HttpApiRequest&, std::string_view route) override {
    failed_routes.emplace_back(route);
  }
  void force_released(const std::string& peer, const Request&, const Reply& reply) override {
    forced.push_back(peer + " " + std::to_string(reply.seconds));
  }
  void change_membership(HttpTicket ticket, const MembershipChange& change) override {
    changes[ticket] = change;
  }

  int rate_checks = 0;
  bool is_starting = false;
  bool cluster = false;
  bool leader = true;
  std::vector<std::string> failed_routes;
  std::vector<std::string> forced;
  std::map<HttpTicket, MembershipChange> changes;
};

class HttpApiTest : public ::testing::Test {
 protected:
  explicit HttpApiTest(HttpApiConfig config = {}) : config_(std::move(config)) {}

  void SetUp() override {
    RouterConfig router;
    router_ = std::make_unique<Router>(router, engine_);
    desk_ = std::make_unique<HttpSessionRouter>(HttpSessionsConfig{}, nullptr, *router_);
    api_ = std::make_unique<HttpApi>(config_, *desk_, *router_, host_, random_);
  }

  // Sends `request` under a new ticket and moves everything until nothing moves: its ticket.
  HttpTicket send(HttpApiRequest request) {
    request.ticket = api_->new_ticket();
    streamed_ = api_->handle(now_, request);
    settle();
    return request.ticket;
  }
  HttpTicket send(std::string_view method, std::string path, std::string body = {}) {
    HttpApiRequest request;
    request.method = method;
    const std::size_t query = path.find('?');
    if (query != std::string::npos) {
      request.query = path.substr(query + 1);
      path.resize(query);
    }
    request.path = std::move(path);
    request.body = std::move(body);
    request.authorization = authorization_;
    request.peer_address = peer_;
    request.peer_port = 4242;
    return send(std::move(request));
  }

  void settle() {
    while (true) {
      bool moved = false;
      for (SessionEvent& event : router_->take_events()) {
        EXPECT_TRUE(api_->owns(event.session));
        api_->on_session_event(now_, event);
        moved = true;
      }
      EXPECT_TRUE(router_->take_outbox().empty());  // one shard
      EXPECT_TRUE(api_->take_outbox().empty());
      for (HttpApiResponse& response : api_->take_responses()) {
        EXPECT_EQ(responses_.count(response.ticket), 0U) << "answered twice";
        responses_[response.ticket] = std::move(response);
        moved = true;
      }
      if (!moved) return;
    }
  }

  void advance(Duration by) {
    now_ = now_ + by;
    api_->tick(now_);
    settle();
  }

  // The response to `ticket` (code 0: none yet).
  HttpApiResponse response(HttpTicket ticket) const {
    auto it = responses_.find(ticket);
    if (it != responses_.end()) return it->second;
    HttpApiResponse none;
    none.response.code = 0;
    return none;
  }
  static std::optional<std::string> header(const HttpApiResponse& response, std::string_view name) {
    for (const auto& [key, value] : response.headers) {
      if (key == name) return value;
    }
    return std::nullopt;
  }
  // A new session's handle.
  std::string create_session() {
    const HttpApiResponse created = response(send("POST", "/v1/sessions"));
    EXPECT_EQ(created.response.code, 200) << created.response.body;
    const std::string marker = "\"session_id\":\"";
    return created.response.body.substr(created.response.body.find(marker) + marker.size(), 32);
  }

  HttpApiConfig config_;
  FakeHost host_;
  SplitMix64 salts_{1};
  Engine engine_{EngineConfig{}, salts_};
  SplitMix64 random_{2};
  std::unique_ptr<Router> router_;
  std::unique_ptr<HttpSessionRouter> desk_;
  std::unique_ptr<HttpApi> api_;
  Instant now_ = Instant::from_ns(1'000'000'000);
  std::optional<std::string> authorization_;
  std::string peer_ = "10.0.0.1";
  std::optional<HttpApi::StreamRoute> streamed_;
  std::map<HttpTicket, HttpApiResponse> responses_;
};

HttpApiConfig with_tokens() {
  HttpApiConfig config;
  config.auth_token = "client-secret";
  config.admin_token = "admin-secret";
  config.cors_allowed_origins = "https://console.example";
  return config;
}

class HttpApiAuthTest : public HttpApiTest {
 protected:
  HttpApiAuthTest() : HttpApiTest(with_tokens()) {}
};

TEST_F(HttpApiTest, UnknownPathIs404AndAnotherMethodIs405WithAllow) {
  const HttpApiResponse missing = response(send("GET", "/nowhere"));
  EXPECT_EQ(missing.response.code, 404);
  EXPECT_EQ(missing.route, "unmatched");
  const HttpApiResponse wrong = response(send("PUT", "/v1/sessions"));
  EXPECT_EQ(wrong.response.code, 405);
  EXPECT_EQ(header(wrong, "Allow"), "POST");
}

TEST_F(HttpApiTest, TheRateLimitComesBeforeTheRouteAndProbesAreExempt) {
  peer_ = "10.6.6.6";  // over the host's limit
  EXPECT_EQ(response(send("GET", "/nowhere")).response.code, 429);
  EXPECT_EQ(response(send("POST", "/v1/sessions")).response.code, 429);
  EXPECT_EQ(response(send("GET", "/health")).response.code, 200);
}

TEST_F(HttpApiAuthTest, AWrongTokenIsAnswered401OnlyAfterTheDelay) {
  authorization_ = "Bearer guess";
  const HttpTicket ticket = send("POST", "/v1/sessions");
  EXPECT_EQ(response(ticket).response.code, 0);
  ASSERT_TRUE(api_->next_deadline().has_value());
  EXPECT_EQ(*api_->next_deadline(), now_ + kAuthFailureDelay);
  advance(kAuthFailureDelay - Duration::milliseconds(1));
  EXPECT_EQ(response(ticket).response.code, 0);
  advance(Duration::milliseconds(1));
  EXPECT_EQ(response(ticket).response.code, 401);
  EXPECT_EQ(host_.failed_routes, std::vector<std::string>{"/v1/sessions"});
  EXPECT_FALSE(api_->next_deadline().has_value());
}

TEST_F(HttpApiAuthTest, TheTokenIsCheckedBeforeTheRouteSoStrangersLearnNoPaths) {
  const HttpTicket ticket = send("GET", "/nowhere");
  advance(kAuthFailureDelay);
  EXPECT_EQ(response(ticket).response.code, 401);
  authorization_ = "Bearer client-secret";
  EXPECT_EQ(response(send("GET", "/nowhere")).response.code, 404);
}

TEST_F(HttpApiAuthTest, AClientThatLeavesDuringTheDelayGetsNothing) {
  const HttpTicket ticket = send("POST", "/v1/sessions");
  api_->client_left(now_, ticket);
  advance(kAuthFailureDelay);
  EXPECT_EQ(response(ticket).response.code, 0);
  EXPECT_EQ(api_->open(), 0U);
}

TEST_F(HttpApiAuthTest, APreflightFromAnAllowedOriginIs204WithCorsHeaders) {
  HttpApiRequest preflight;
  preflight.method = "OPTIONS";
  preflight.path = "/v1/locks/a";
  preflight.origin = "https://console.example";
  preflight.preflight = true;
  const HttpApiResponse answered = response(send(preflight));
  EXPECT_EQ(answered.response.code, 204);
  EXPECT_EQ(answered.route, "preflight");
  EXPECT_EQ(header(answered, "Access-Control-Allow-Origin"), "https://console.example");
  preflight.origin = "https://elsewhere.example";
  const HttpApiResponse stranger = response(send(preflight));  // answered, but not allowed
  EXPECT_EQ(stranger.response.code, 204);
  EXPECT_FALSE(header(stranger, "Access-Control-Allow-Origin").has_value());
}

TEST_F(HttpApiTest, ProbesSayStartingDrainingAndNoLeader) {
  EXPECT_EQ(response(send("GET", "/health")).response.code, 200);
  host_.is_starting = true;
  EXPECT_EQ(response(send("GET", "/health")).response.body, "{\"status\":\"starting\"}\n");
  host_.leader = false;
  EXPECT_EQ(response(send("GET", "/ready")).response.body, "{\"status\":\"no_leader\"}\n");
  api_->begin_drain();
  EXPECT_EQ(response(send("GET", "/ready")).response.body, "{\"status\":\"draining\"}\n");
  const HttpApiResponse openapi = response(send("GET", "/v1/openapi.json"));
  EXPECT_EQ(openapi.response.body, "{\"openapi\":\"3.1.0\"}");
  EXPECT_EQ(header(openapi, "Cache-Control"), "public, max-age=60");
}

TEST_F(HttpApiTest, StatsAndMetricsAreOneShotRequestsThroughTheRouter) {
  const HttpApiResponse stats = response(send("GET", "/v1/stats"));
  EXPECT_EQ(stats.response.code, 200);
  EXPECT_NE(stats.response.body.find("\"connections\":7"), std::string::npos)
      << stats.response.body;
  const HttpApiResponse metrics = response(send("GET", "/metrics"));
  EXPECT_EQ(metrics.response.body, "ready 1\n");
  EXPECT_EQ(metrics.content_type, kHttpMetricsType);
  EXPECT_EQ(response(send("GET", "/v1/readindex")).response.code, 404);  // not a cluster
}

TEST_F(HttpApiTest, ASessionLocksAndReleasesThroughTheDesk) {
  const std::string handle = create_session();
  HttpApiRequest lock;
  const HttpRequestLine line = encode_http_session_request(test::lock_request("job", 0, 10));
  lock.method = line.method;
  lock.path = line.path;
  lock.body = line.body;
  lock.session = handle;
  const HttpApiResponse granted = response(send(lock));
  EXPECT_EQ(granted.response.code, 200) << granted.response.body;
  EXPECT_EQ(granted.route, "/v1/locks/{key}");
  lock.session = std::string(32, 'a');  // no such session
  EXPECT_EQ(response(send(lock)).response.code, 410);
  lock.session.reset();
  EXPECT_EQ(response(send(lock)).response.code, 400);
  EXPECT_EQ(response(send("POST", "/v1/sessions/NOTHEX/ping")).response.code, 400);
}

TEST_F(HttpApiTest, TheAdminRoutesAreOffWithoutAnAdminToken) {
  const HttpApiResponse off = response(send("DELETE", "/v1/admin/locks/job"));
  EXPECT_EQ(off.response.code, 403);
  EXPECT_NE(off.response.body.find("admin_disabled"), std::string::npos);
  EXPECT_EQ(response(send("POST", "/v1/admin/leader/transfer")).response.code, 403);
}

TEST_F(HttpApiAuthTest, AForceReleaseIsReportedEvenWhenItsClientLeft) {
  authorization_ = "Bearer admin-secret";
  const HttpApiResponse freed = response(send("DELETE", "/v1/admin/locks/job?fence=x"));
  EXPECT_EQ(freed.response.code, 400);
  HttpApiRequest release;
  release.ticket = api_->new_ticket();
  release.method = "DELETE";
  release.path = "/v1/admin/locks/job";
  release.authorization = authorization_;
  release.peer_address = "::1";
  release.peer_port = 5000;
  EXPECT_FALSE(api_->handle(now_, release).has_value());
  api_->client_left(now_, release.ticket);
  settle();
  EXPECT_EQ(response(release.ticket).response.code, 0);
  EXPECT_EQ(host_.forced, std::vector<std::string>{"[::1]:5000 0"});
  authorization_ = "Bearer client-secret";  // the client token is not the admin token
  const HttpTicket refused = send("DELETE", "/v1/admin/locks/job");
  advance(kAuthFailureDelay);
  EXPECT_EQ(response(refused).response.code, 401);
}

TEST_F(HttpApiAuthTest, MembershipChangesGoToTheHostAndTheirOutcomeAnswers) {
  host_.cluster = true;
  authorization_ = "Bearer admin-secret";
  const HttpTicket ticket = send("DELETE", "/v1/admin/voters/3");
  ASSERT_EQ(host_.changes.count(ticket), 1U);
  EXPECT_EQ(host_.changes[ticket].remove_id, 3U);
  EXPECT_EQ(response(ticket).response.code, 0);
  api_->admin_done(
      ticket, AdminChangeOutcome{AdminChangeOutcome::Kind::kNotLeader, "", "10.0.0.9:6388", {}});
  settle();
  const HttpApiResponse answered = response(ticket);
  EXPECT_EQ(answered.response.code, 503);
  EXPECT_EQ(header(answered, "X-Dflockd-Leader"), "10.0.0.9:6388");
}

TEST_F(HttpApiAuthTest, StreamRoutesPassAdmissionThenGoBackToTheDriver) {
  HttpApiRequest stream;
  stream.method = "GET";
  stream.path = "/v1/signals";
  stream.query = "pattern=a.*";
  stream.origin = "https://console.example";
  stream.authorization = "Bearer client-secret";
  const HttpTicket ticket = send(stream);
  ASSERT_TRUE(streamed_.has_value());
  EXPECT_EQ(streamed_->spec->endpoint, HttpEndpoint::kSignalStream);
  EXPECT_FALSE(streamed_->headers.empty());  // CORS, for the stream's response
  EXPECT_EQ(response(ticket).response.code, 0);
  EXPECT_EQ(api_->open(), 0U);
  stream.authorization.reset();
  const HttpTicket refused = send(stream);
  EXPECT_FALSE(streamed_.has_value());
  advance(kAuthFailureDelay);
  EXPECT_EQ(response(refused).response.code, 401);
}

TEST(HttpRequestEncode, EverySessionCommandDecodesBackToItself) {
  for (const HttpEndpointSpec& spec : kHttpEndpoints) {
    const std::optional<Command> command = http_endpoint_command(spec.endpoint);
    if (!command) continue;
    Request request = test::keyed_request(*command, "a/key%with:odd~bytes");
    request.timeout_s = 3;
    request.lease_s = 9;
    request.token = Token::parse(std::string(32, 'b'));
    if (command_namespace(*command) == Namespace::kSemaphore) request.limit = 4;
    const HttpRequestLine line = encode_http_session_request(request);
    const HttpRouteMatch matched = match_http_route(line.method, line.path);
    ASSERT_NE(matched.spec, nullptr) << line.path;
    EXPECT_EQ(matched.spec->endpoint, spec.endpoint) << line.path;
    auto decoded = decode_http_session_request(spec.endpoint, matched.params.at(0), line.body,
                                               std::string(32, 'c'));
    ASSERT_TRUE(std::holds_alternative<HttpSessionRequest>(decoded))
        << line.path << " " << line.body << ": " << std::get<HttpBadRequest>(decoded).detail;
    const Request& back = std::get<HttpSessionRequest>(decoded).request;
    EXPECT_EQ(back.command, request.command);
    EXPECT_EQ(back.key, request.key);
  }
}

}  // namespace
}  // namespace turnstile::core
