// core/http_codec.h: routing, percent-decoding, UTF-8 validation, body decoding, reply rendering
// and CORS, without a server; and the OpenAPI drift check of the endpoint table against
// docs/openapi.json.
#include "core/http_codec.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

namespace turnstile::core {
namespace {

using Json = nlohmann::json;

std::string bytes(std::initializer_list<int> values) {
  std::string out;
  for (int v : values) out.push_back(static_cast<char>(v));
  return out;
}

// ---- routing -----------------------------------------------------------------------------------

TEST(HttpCodec, RoutesMatchByMethodAndPathWithDecodedParameters) {
  HttpRouteMatch match = match_http_route("POST", "/v1/locks/build%2Djob/release");
  ASSERT_NE(match.spec, nullptr);
  EXPECT_EQ(match.spec->endpoint, HttpEndpoint::kLockRelease);
  EXPECT_EQ(match.params, std::vector<std::string>{"build-job"});

  match = match_http_route("DELETE", "/v1/sessions/0123");
  ASSERT_NE(match.spec, nullptr);
  EXPECT_EQ(match.spec->endpoint, HttpEndpoint::kSessionDelete);
  EXPECT_EQ(match.params, std::vector<std::string>{"0123"});

  match = match_http_route("GET", "/health");
  ASSERT_NE(match.spec, nullptr);
  EXPECT_TRUE(match.params.empty());
  EXPECT_FALSE(match.spec->needs_auth);
}

TEST(HttpCodec, AKnownPathWithAnotherMethodNamesTheMethodsItTakes) {
  HttpRouteMatch match = match_http_route("GET", "/v1/locks/k/release");
  EXPECT_EQ(match.spec, nullptr);
  EXPECT_EQ(match.allow, "POST");
  match = match_http_route("DELETE", "/v1/locks/k");  // an acquire, or an inspect
  EXPECT_EQ(match.spec, nullptr);
  EXPECT_EQ(match.allow, "POST, GET, HEAD");
  match = match_http_route("POST", "/v1/admin/rwlocks/k");
  EXPECT_EQ(match.spec, nullptr);
  EXPECT_EQ(match.allow, "DELETE");
  match = match_http_route("GET", "/v1/sessions/abc");
  EXPECT_EQ(match.spec, nullptr);
  EXPECT_EQ(match.allow, "DELETE");
  match = match_http_route("DELETE", "/v1/stats");
  EXPECT_EQ(match.allow, "GET, HEAD");
}

// HEAD takes the GET route of its path (RFC 9110: answered as GET, without the body); a path
// without GET answers it 405, and every reply to it has no body.
TEST(HttpCodec, HeadTakesTheGetRouteAndItsRepliesHaveNoBody) {
  for (const char* path : {"/health", "/ready", "/metrics", "/v1/openapi.json", "/v1/stats",
                           "/v1/locks/k", "/v1/semaphores/k", "/v1/rwlocks/k", "/v1/signals",
                           "/v1/readindex", "/v1/sessions/abc/events"}) {
    const HttpRouteMatch get = match_http_route("GET", path);
    const HttpRouteMatch head = match_http_route("HEAD", path);
    ASSERT_NE(head.spec, nullptr) << path;
    EXPECT_EQ(head.spec, get.spec) << path;
    EXPECT_EQ(head.params, get.params) << path;
    EXPECT_TRUE(head.head) << path;
    EXPECT_FALSE(get.head) << path;
    EXPECT_EQ(head.allow, "") << path;
  }
  HttpRouteMatch post_only = match_http_route("HEAD", "/v1/locks/k/release");
  EXPECT_EQ(post_only.spec, nullptr);
  EXPECT_EQ(post_only.allow, "POST");
  EXPECT_EQ(match_http_route("HEAD", "/v1/admin/locks/k").allow, "DELETE");
  EXPECT_EQ(match_http_route("HEAD", "/nope").allow, "");
  EXPECT_FALSE(http_reply_has_body("HEAD"));
  for (const char* method : {"GET", "POST", "DELETE", "OPTIONS", "PUT", "PATCH"}) {
    EXPECT_TRUE(http_reply_has_body(method)) << method;
  }
}

TEST(HttpCodec, UnknownPathsMatchNothing) {
  for (const char* path : {"", "/", "nope", "/nope", "/v1/locks", "/v1/locks/a/b/c", "/v1/locks/k/",
                           "/health/", "//health", "/v1/sessions/a/pong"}) {
    const HttpRouteMatch match = match_http_route("POST", path);
    EXPECT_EQ(match.spec, nullptr) << path;
    EXPECT_EQ(match.allow, "") << path;
  }
}

TEST(HttpCodec, PercentDecodingTakesTwoHexDigitsAndKeepsEverythingElse) {
  EXPECT_EQ(percent_decode("a%20b"), "a b");
  EXPECT_EQ(percent_decode("%41%6a%6A"), "Ajj");
  EXPECT_EQ(percent_decode("%00"), std::string(1, '\0'));
  EXPECT_EQ(percent_decode("%ff"), bytes({0xff}));
  EXPECT_EQ(percent_decode("%"), "%");
  EXPECT_EQ(percent_decode("%4"), "%4");
  EXPECT_EQ(percent_decode("a%zz"), "a%zz");
  EXPECT_EQ(percent_decode("%%41"), "%A");
  EXPECT_EQ(percent_decode("+"), "+");  // a path, not a form: '+' stays
}

// The read-write lock routes: each path names its endpoint and the engine command it sends.
TEST(HttpCodec, ReadWriteLockRoutesNameTheirEndpointAndCommand) {
  struct Route {
    const char* path;
    HttpEndpoint endpoint;
    Command command;
  };
  const Route routes[] = {
      {"/v1/rwlocks/cfg/read", HttpEndpoint::kReadAcquire, Command::kReadLock},
      {"/v1/rwlocks/cfg/read/release", HttpEndpoint::kReadRelease, Command::kReadRelease},
      {"/v1/rwlocks/cfg/read/renew", HttpEndpoint::kReadRenew, Command::kReadRenew},
      {"/v1/rwlocks/cfg/read/enqueue", HttpEndpoint::kReadEnqueue, Command::kReadEnqueue},
      {"/v1/rwlocks/cfg/read/wait", HttpEndpoint::kReadWait, Command::kReadWait},
      {"/v1/rwlocks/cfg/write", HttpEndpoint::kWriteAcquire, Command::kWriteLock},
      {"/v1/rwlocks/cfg/write/release", HttpEndpoint::kWriteRelease, Command::kWriteRelease},
      {"/v1/rwlocks/cfg/write/renew", HttpEndpoint::kWriteRenew, Command::kWriteRenew},
      {"/v1/rwlocks/cfg/write/enqueue", HttpEndpoint::kWriteEnqueue, Command::kWriteEnqueue},
      {"/v1/rwlocks/cfg/write/wait", HttpEndpoint::kWriteWait, Command::kWriteWait},
  };
  for (const Route& route : routes) {
    const HttpRouteMatch match = match_http_route("POST", route.path);
    ASSERT_NE(match.spec, nullptr) << route.path;
    EXPECT_EQ(match.spec->endpoint, route.endpoint) << route.path;
    EXPECT_EQ(match.params, std::vector<std::string>{"cfg"}) << route.path;
    EXPECT_TRUE(match.spec->needs_auth) << route.path;
    EXPECT_TRUE(match.spec->rate_limited) << route.path;
    EXPECT_EQ(http_endpoint_command(route.endpoint), route.command) << route.path;
    // POST only.
    const HttpRouteMatch get = match_http_route("GET", route.path);
    EXPECT_EQ(get.spec, nullptr) << route.path;
    EXPECT_EQ(get.allow, "POST") << route.path;
  }
  // The key is one percent-decoded segment, and may be a word the routes use.
  HttpRouteMatch match = match_http_route("POST", "/v1/rwlocks/read/write");
  ASSERT_NE(match.spec, nullptr);
  EXPECT_EQ(match.spec->endpoint, HttpEndpoint::kWriteAcquire);
  EXPECT_EQ(match.params, std::vector<std::string>{"read"});
  match = match_http_route("POST", "/v1/rwlocks/a%2Fb/read/wait");
  ASSERT_NE(match.spec, nullptr);
  EXPECT_EQ(match.spec->endpoint, HttpEndpoint::kReadWait);
  EXPECT_EQ(match.params, std::vector<std::string>{"a/b"});
  // GET /v1/rwlocks/{key} inspects, POST /v1/rwlocks/{key}/check checks: there is no POST on the
  // key itself (a read-write lock is taken on a side).
  const HttpRouteMatch bare = match_http_route("POST", "/v1/rwlocks/k");
  EXPECT_EQ(bare.spec, nullptr);
  EXPECT_EQ(bare.allow, "GET, HEAD");
  for (const char* path :
       {"/v1/rwlocks/k/", "/v1/rwlocks/k/read/", "/v1/rwlocks", "/v1/rwlocks/k/readers",
        "/v1/rwlocks/k/read/release/x", "/v1/rwlocks/k/release", "/v1/rwlocks/k/write/lock"}) {
    const HttpRouteMatch none = match_http_route("POST", path);
    EXPECT_EQ(none.spec, nullptr) << path;
    EXPECT_EQ(none.allow, "") << path;
  }
}

// Every lock, semaphore and read-write lock route sends the command of its resource and
// operation; no other endpoint sends one.
TEST(HttpCodec, OnlyTheKeyedEndpointsSendAnEngineCommand) {
  int keyed = 0;
  for (const HttpEndpointSpec& spec : kHttpEndpoints) {
    const std::optional<Command> command = http_endpoint_command(spec.endpoint);
    const std::string_view pattern = spec.pattern;
    const bool keyed_route =
        (pattern.starts_with("/v1/locks/{key}") || pattern.starts_with("/v1/semaphores/{key}") ||
         pattern.starts_with("/v1/rwlocks/{key}")) &&
        !pattern.ends_with("/check") && spec.method == "POST";
    EXPECT_EQ(command.has_value(), keyed_route) << pattern;
    // A session's command and a key command (check, inspect, force-release) never both.
    EXPECT_FALSE(command && http_key_command(spec.endpoint)) << pattern;
    if (!command) continue;
    ++keyed;
    Namespace expected = Namespace::kLock;
    if (pattern.starts_with("/v1/semaphores/")) expected = Namespace::kSemaphore;
    if (pattern.starts_with("/v1/rwlocks/")) expected = Namespace::kReadWrite;
    EXPECT_EQ(command_namespace(*command), expected) << pattern;
    EXPECT_EQ(is_shared_command(*command), pattern.find("{key}/read") != std::string_view::npos)
        << pattern;
    Operation operation = Operation::kAcquire;
    if (pattern.ends_with("/release")) operation = Operation::kRelease;
    if (pattern.ends_with("/renew")) operation = Operation::kRenew;
    if (pattern.ends_with("/enqueue")) operation = Operation::kEnqueue;
    if (pattern.ends_with("/wait")) operation = Operation::kWait;
    EXPECT_EQ(command_operation(*command), operation) << pattern;
  }
  EXPECT_EQ(keyed, 20);
}

// ---- fence check, inspect, force-release
// ---------------------------------------------------------

// Each route names its endpoint, its command, its namespace and its auth.
TEST(HttpCodecKeys, CheckInspectAndForceReleaseRoutesNameTheirCommandAndNamespace) {
  struct Route {
    const char* method;
    const char* path;
    HttpEndpoint endpoint;
    Command command;
    Namespace space;
    bool admin;
  };
  const Route routes[] = {
      {"POST", "/v1/locks/k%20x/check", HttpEndpoint::kLockCheck, Command::kCheck, Namespace::kLock,
       false},
      {"POST", "/v1/semaphores/k%20x/check", HttpEndpoint::kSemCheck, Command::kCheck,
       Namespace::kSemaphore, false},
      {"POST", "/v1/rwlocks/k%20x/check", HttpEndpoint::kReadWriteCheck, Command::kCheck,
       Namespace::kReadWrite, false},
      {"GET", "/v1/locks/k%20x", HttpEndpoint::kLockInspect, Command::kInspect, Namespace::kLock,
       false},
      {"GET", "/v1/semaphores/k%20x", HttpEndpoint::kSemInspect, Command::kInspect,
       Namespace::kSemaphore, false},
      {"GET", "/v1/rwlocks/k%20x", HttpEndpoint::kReadWriteInspect, Command::kInspect,
       Namespace::kReadWrite, false},
      {"DELETE", "/v1/admin/locks/k%20x", HttpEndpoint::kAdminLockRelease, Command::kForceRelease,
       Namespace::kLock, true},
      {"DELETE", "/v1/admin/semaphores/k%20x", HttpEndpoint::kAdminSemRelease,
       Command::kForceRelease, Namespace::kSemaphore, true},
      {"DELETE", "/v1/admin/rwlocks/k%20x", HttpEndpoint::kAdminReadWriteRelease,
       Command::kForceRelease, Namespace::kReadWrite, true},
  };
  for (const Route& route : routes) {
    const HttpRouteMatch match = match_http_route(route.method, route.path);
    ASSERT_NE(match.spec, nullptr) << route.path;
    EXPECT_EQ(match.spec->endpoint, route.endpoint) << route.path;
    EXPECT_EQ(match.params, std::vector<std::string>{"k x"}) << route.path;
    EXPECT_EQ(match.spec->needs_auth, !route.admin) << route.path;  // admin: the admin token
    EXPECT_TRUE(match.spec->rate_limited) << route.path;
    const std::optional<HttpKeyCommand> command = http_key_command(route.endpoint);
    ASSERT_TRUE(command.has_value()) << route.path;
    EXPECT_EQ(command->command, route.command) << route.path;
    EXPECT_EQ(command->space, route.space) << route.path;
    EXPECT_EQ(http_endpoint_command(route.endpoint), std::nullopt) << route.path;
  }
  int key_commands = 0;
  for (const HttpEndpointSpec& spec : kHttpEndpoints) {
    if (http_key_command(spec.endpoint)) ++key_commands;
  }
  EXPECT_EQ(key_commands, 9);
  // The session event stream.
  const HttpRouteMatch events = match_http_route("GET", "/v1/sessions/abc/events");
  ASSERT_NE(events.spec, nullptr);
  EXPECT_EQ(events.spec->endpoint, HttpEndpoint::kSessionEvents);
  EXPECT_EQ(events.params, std::vector<std::string>{"abc"});
  EXPECT_TRUE(events.spec->needs_auth);
  EXPECT_EQ(match_http_route("POST", "/v1/sessions/abc/events").allow, "GET, HEAD");
}

TEST(HttpCodecKeys, ACheckTakesATokenAsAReleaseDoes) {
  const std::string token = "0000000000000007abcdefabcdefabcd";
  auto decoded =
      decode_http_key_request(HttpEndpoint::kSemCheck, "jobs", R"({"token":")" + token + "\"}", "");
  ASSERT_TRUE(std::holds_alternative<Request>(decoded));
  const Request& request = std::get<Request>(decoded);
  EXPECT_EQ(request.command, Command::kCheck);
  EXPECT_EQ(request.space, Namespace::kSemaphore);
  EXPECT_EQ(request.key, "jobs");
  ASSERT_TRUE(request.token.has_value());
  EXPECT_EQ(request.token->to_string(), token);
  EXPECT_EQ(request_namespace(request), Namespace::kSemaphore);
  // A token the server could not have issued is simply not held (no token in the request).
  for (const char* text : {"nope", "0000000000000007ABCDEFABCDEFABCD", "00"}) {
    auto odd = decode_http_key_request(HttpEndpoint::kLockCheck, "k",
                                       std::string(R"({"token":")") + text + "\"}", "");
    ASSERT_TRUE(std::holds_alternative<Request>(odd)) << text;
    EXPECT_FALSE(std::get<Request>(odd).token.has_value()) << text;
  }
  // The field itself is checked as for a release: 400.
  for (const std::string& body :
       {std::string("{}"), std::string(""), std::string(R"({"token":7})"),
        std::string(R"({"token":""})"), std::string(R"({"token":"a b"})"),
        R"({"token":")" + std::string(257, 'a') + "\"}", std::string(R"({"token":"a","x":1})"),
        std::string("not json"), std::string("{\"token\":\"\xff\"}")}) {
    EXPECT_TRUE(std::holds_alternative<HttpBadRequest>(
        decode_http_key_request(HttpEndpoint::kReadWriteCheck, "k", body, "")))
        << body;
  }
  // The key is checked first.
  const auto bad_key = decode_http_key_request(HttpEndpoint::kLockCheck, "a b", "{}", "");
  ASSERT_TRUE(std::holds_alternative<HttpBadRequest>(bad_key));
  EXPECT_NE(std::get<HttpBadRequest>(bad_key).detail.find("whitespace"), std::string::npos);
  EXPECT_TRUE(std::holds_alternative<HttpBadRequest>(
      decode_http_key_request(HttpEndpoint::kLockCheck, std::string(257, 'k'), "{}", "")));
}

TEST(HttpCodecKeys, AnInspectTakesOnlyItsKeyAndAForceReleaseAFence) {
  auto inspect = decode_http_key_request(HttpEndpoint::kReadWriteInspect, "cfg", "ignored", "x=1");
  ASSERT_TRUE(std::holds_alternative<Request>(inspect));
  EXPECT_EQ(std::get<Request>(inspect).command, Command::kInspect);
  EXPECT_EQ(std::get<Request>(inspect).space, Namespace::kReadWrite);
  EXPECT_EQ(std::get<Request>(inspect).key, "cfg");
  EXPECT_TRUE(std::holds_alternative<HttpBadRequest>(
      decode_http_key_request(HttpEndpoint::kLockInspect, "", "", "")));

  const auto fence_of = [](std::string_view query) -> std::optional<std::uint64_t> {
    auto decoded = decode_http_key_request(HttpEndpoint::kAdminSemRelease, "k", "{}", query);
    if (std::holds_alternative<HttpBadRequest>(decoded)) return std::nullopt;
    EXPECT_EQ(std::get<Request>(decoded).command, Command::kForceRelease);
    EXPECT_EQ(std::get<Request>(decoded).space, Namespace::kSemaphore);
    return std::get<Request>(decoded).fence;
  };
  EXPECT_EQ(fence_of(""), 0U);  // every holder
  EXPECT_EQ(fence_of("other=5"), 0U);
  EXPECT_EQ(fence_of("fence=7"), 7U);
  EXPECT_EQ(fence_of("a=b&fence=%31%32&fence=99"), 12U);  // decoded; the first counts
  EXPECT_EQ(fence_of("fence=18446744073709551615"), UINT64_MAX);
  for (const char* bad : {"fence", "fence=", "fence=0", "fence=-1", "fence=1x", "fence=+1",
                          "fence=18446744073709551616", "fence=99999999999999999999", "fence=%37%",
                          "other=%zz&fence=7"}) {
    EXPECT_EQ(fence_of(bad), std::nullopt) << bad;  // a bad escape anywhere refuses the query
  }
}

// `clear_delay=true` (or false) asks a force-release to end the key's lock-delay too; any other
// value is a 400 that names the parameter, with or without a fence.
TEST(HttpCodecKeys, AForceReleaseMayClearTheLockDelay) {
  const auto decode = [](std::string_view query) {
    return decode_http_key_request(HttpEndpoint::kAdminLockRelease, "k", "", query);
  };
  const auto cleared = [&](std::string_view query) -> std::optional<bool> {
    auto decoded = decode(query);
    if (std::holds_alternative<HttpBadRequest>(decoded)) return std::nullopt;
    return std::get<Request>(decoded).clear_delay;
  };
  EXPECT_EQ(cleared(""), false);
  EXPECT_EQ(cleared("clear_delay=true"), true);
  EXPECT_EQ(cleared("clear_delay=false"), false);
  EXPECT_EQ(cleared("clear_delay=%74rue&clear_delay=nope"), true);  // decoded; the first counts
  auto both = decode("fence=9&clear_delay=true");
  ASSERT_TRUE(std::holds_alternative<Request>(both));
  EXPECT_EQ(std::get<Request>(both).fence, 9U);
  EXPECT_TRUE(std::get<Request>(both).clear_delay);
  for (const char* bad : {"clear_delay", "clear_delay=", "clear_delay=1", "clear_delay=TRUE",
                          "clear_delay=yes", "clear_delay=true%20", "fence=9&clear_delay=on"}) {
    auto decoded = decode(bad);
    ASSERT_TRUE(std::holds_alternative<HttpBadRequest>(decoded)) << bad;
    EXPECT_EQ(std::get<HttpBadRequest>(decoded).detail,
              "query parameter \"clear_delay\" must be true or false")
        << bad;
  }
  // A bad fence is still the fence's 400, whatever clear_delay says.
  auto bad_fence = decode("fence=0&clear_delay=true");
  ASSERT_TRUE(std::holds_alternative<HttpBadRequest>(bad_fence));
  EXPECT_NE(std::get<HttpBadRequest>(bad_fence).detail.find("\"fence\""), std::string::npos);

  // The reply says whether a delay was ended only when asked to end one.
  Request release;
  release.command = Command::kForceRelease;
  release.clear_delay = true;
  EXPECT_EQ(render_http_key_reply(release, Reply::force_released(0, true)).body,
            "{\"released\":0,\"delay_cleared\":true}\n");
  EXPECT_EQ(render_http_key_reply(release, Reply::force_released(1, false)).body,
            "{\"released\":1,\"delay_cleared\":false}\n");
}

TEST(HttpCodecKeys, RepliesRenderAsHeldReleasedOrTheInspection) {
  Request check;
  check.command = Command::kCheck;
  HttpResponse held = render_http_key_reply(check, Reply::renewed(12));
  EXPECT_EQ(held.code, 200);
  EXPECT_EQ(held.body, "{\"held\":true,\"remaining_s\":12}\n");
  HttpResponse not_held = render_http_key_reply(check, Reply::of(Status::kErrorLeaseExpired));
  EXPECT_EQ(not_held.code, 200);
  EXPECT_EQ(not_held.body, "{\"held\":false}\n");

  Request release;
  release.command = Command::kForceRelease;
  EXPECT_EQ(render_http_key_reply(release, Reply::delivered(2)).body, "{\"released\":2}\n");
  EXPECT_EQ(render_http_key_reply(release, Reply::delivered(0)).code, 200);

  Request inspect;
  inspect.command = Command::kInspect;
  const std::string found =
      R"({"kind":"lock","key":"k","exists":true,"limit":1,"holders":[{"fence":3,"session":5,)"
      R"("lease_expires_in_s":2.5}],"waiters":[]})";
  HttpResponse shown = render_http_key_reply(inspect, Reply::stats(found));
  EXPECT_EQ(shown.code, 200);
  EXPECT_EQ(shown.body, found + "\n");
  const std::string missing =
      R"({"kind":"sem","key":"k","exists":false,"limit":0,"holders":[],"waiters":[]})";
  HttpResponse unknown = render_http_key_reply(inspect, Reply::stats(missing));
  EXPECT_EQ(unknown.code, 404);
  EXPECT_EQ(unknown.body, missing + "\n");

  for (const Request& request : {check, release, inspect}) {
    const HttpResponse not_leader =
        render_http_key_reply(request, Reply::not_leader("10.0.0.2:6388"));
    EXPECT_EQ(not_leader.code, 503);
    EXPECT_EQ(not_leader.leader, "10.0.0.2:6388");
    EXPECT_EQ(render_http_key_reply(request, Reply::of(Status::kErrorDraining)).code, 503);
    EXPECT_EQ(render_http_key_reply(request, Reply::of(Status::kError)).code, 500);
    EXPECT_EQ(render_http_key_reply(request, Reply::of(Status::kTimeout)).code, 500);
  }
  EXPECT_EQ(render_http_key_reply(inspect, Reply::stats("not json")).code, 500);
}

// ---- lost slots
// -----------------------------------------------------------------------------------

TEST(HttpCodecLost, ALostLineIsParsedAndEveryOtherLineRefused) {
  const std::string token = "00000000000000ffabcdefabcdefabcd";
  const std::optional<LostSlot> slot = parse_lost_line("lost rw cfg " + token + " forced\n");
  ASSERT_TRUE(slot.has_value());
  EXPECT_EQ(*slot,
            (LostSlot{Namespace::kReadWrite, "cfg", *Token::parse(token), LossReason::kForced}));
  EXPECT_EQ(lost_line(*slot), "lost rw cfg " + token + " forced\n");  // reads back as itself
  EXPECT_EQ(parse_lost_line("lost lock k " + token + " expired"),
            (LostSlot{Namespace::kLock, "k", *Token::parse(token), LossReason::kExpired}));
  EXPECT_EQ(parse_lost_line("lost sem k " + token + " reclaimed")->reason, LossReason::kReclaimed);
  for (const std::string& line : std::vector<std::string>{
           std::string(""), std::string("lost"), "lost lock k " + token,
           "lost lock k " + token + " gone", "lost mutex k " + token + " forced",
           "lost lock k nothex forced", "lost lock  k " + token + " forced",
           "lost lock k " + token + " forced extra", "lost lock k " + token + " forced ",
           "lost lock k " + token + " forced \n", "sig lock k " + token + " forced",
           "lost lock k " + token + " forced\n\n"}) {
    EXPECT_EQ(parse_lost_line(line), std::nullopt) << line;
  }
}

TEST(HttpCodecLost, LossesRideOnABodyAndOnAnEvent) {
  const LostSlot a{Namespace::kLock, "k", *Token::parse("00000000000000ffabcdefabcdefabcd"),
                   LossReason::kExpired};
  const LostSlot b{Namespace::kSemaphore, "s<&>", *Token::parse("0000000000000100abcdefabcdefabcd"),
                   LossReason::kForced};
  const std::string body = "{\"status\":\"ok\",\"token\":\"t\",\"lease_ttl_s\":3}\n";
  EXPECT_EQ(http_body_with_lost(body, {}, 0), body);  // nothing new for a client that lost none
  EXPECT_EQ(http_body_with_lost(body, {a, b}, 0),
            "{\"status\":\"ok\",\"token\":\"t\",\"lease_ttl_s\":3,\"lost\":["
            "{\"kind\":\"lock\",\"key\":\"k\",\"token\":\"00000000000000ffabcdefabcdefabcd\","
            "\"reason\":\"expired\"},"
            "{\"kind\":\"sem\",\"key\":\"s<&>\",\"token\":\"0000000000000100abcdefabcdefabcd\","
            "\"reason\":\"forced\"}]}\n");
  const Json dropped = Json::parse(http_body_with_lost(body, {a}, 5));
  EXPECT_EQ(dropped["lost"].size(), 1U);
  EXPECT_EQ(dropped["lost_dropped"], 5);
  EXPECT_EQ(Json::parse(http_body_with_lost("{\"error\":\"not_held\"}\n", {a}, 0))["error"],
            "not_held");
  EXPECT_EQ(http_body_with_lost("", {a}, 0), "");  // a 204 has no body to carry them

  EXPECT_EQ(http_lost_event(a),
            "event: lost\ndata: {\"kind\":\"lock\",\"key\":\"k\",\"token\":"
            "\"00000000000000ffabcdefabcdefabcd\",\"reason\":\"expired\"}\n\n");
  // A key with bytes that are not UTF-8 still makes one line of valid JSON.
  const std::string odd =
      http_lost_event({Namespace::kLock, "k\xff", a.token, LossReason::kExpired});
  EXPECT_EQ(first_invalid_utf8(odd), std::nullopt);
  EXPECT_EQ(std::count(odd.begin(), odd.end(), '\n'), 3);
  EXPECT_EQ(http_stream_end_event("session_gone"),
            "event: end\ndata: {\"reason\":\"session_gone\"}\n\n");
}

// ---- UTF-8 -------------------------------------------------------------------------------------

TEST(HttpCodec, Utf8ValidationFollowsRfc3629) {
  EXPECT_EQ(first_invalid_utf8(""), std::nullopt);
  EXPECT_EQ(first_invalid_utf8("plain ascii {}"), std::nullopt);
  EXPECT_EQ(first_invalid_utf8(bytes({0xc3, 0xa9})), std::nullopt);              // é
  EXPECT_EQ(first_invalid_utf8(bytes({0xe2, 0x82, 0xac})), std::nullopt);        // €
  EXPECT_EQ(first_invalid_utf8(bytes({0xf0, 0x9f, 0x94, 0x92})), std::nullopt);  // a lock
  EXPECT_EQ(first_invalid_utf8(bytes({0xf4, 0x8f, 0xbf, 0xbf})), std::nullopt);  // U+10FFFF
  EXPECT_EQ(first_invalid_utf8(bytes({0xef, 0xbf, 0xbd})), std::nullopt);        // U+FFFD

  EXPECT_EQ(first_invalid_utf8(bytes({'a', 0xff})), 1U);
  EXPECT_EQ(first_invalid_utf8(bytes({0x80})), 0U);                    // a continuation first
  EXPECT_EQ(first_invalid_utf8(bytes({0xc3})), 0U);                    // cut short
  EXPECT_EQ(first_invalid_utf8(bytes({0xc3, 0x28})), 0U);              // not a continuation
  EXPECT_EQ(first_invalid_utf8(bytes({0xc0, 0xaf})), 0U);              // overlong '/'
  EXPECT_EQ(first_invalid_utf8(bytes({0xc1, 0xbf})), 0U);              // overlong
  EXPECT_EQ(first_invalid_utf8(bytes({0xe0, 0x80, 0xaf})), 0U);        // overlong
  EXPECT_EQ(first_invalid_utf8(bytes({0xed, 0xa0, 0x80})), 0U);        // a surrogate
  EXPECT_EQ(first_invalid_utf8(bytes({0xf0, 0x80, 0x80, 0xaf})), 0U);  // overlong
  EXPECT_EQ(first_invalid_utf8(bytes({0xf4, 0x90, 0x80, 0x80})), 0U);  // past U+10FFFF
  EXPECT_EQ(first_invalid_utf8(bytes({0xf5, 0x80, 0x80, 0x80})), 0U);
  EXPECT_EQ(first_invalid_utf8(bytes({0xe2, 0x82})), 0U);  // cut short
  EXPECT_EQ(first_invalid_utf8(bytes({'x', 'y', 0xe2, 0x82, 0x41})), 2U);
}

// Whatever bytes a client puts in a detail, the body is valid UTF-8 JSON that says the rest.
RC_GTEST_PROP(HttpCodec, EveryErrorBodyIsValidUtf8Json, (const std::string& detail)) {
  const std::string body = http_error_body("bad_request", detail);
  RC_ASSERT(first_invalid_utf8(body) == std::nullopt);
  RC_ASSERT(!body.empty() && body.back() == '\n');
  const Json parsed = Json::parse(body);
  RC_ASSERT(parsed.at("error") == "bad_request");
  if (!first_invalid_utf8(detail) && !detail.empty()) RC_ASSERT(parsed.at("detail") == detail);
}

// first_invalid_utf8 agrees with nlohmann's own decoder on every string.
RC_GTEST_PROP(HttpCodec, Utf8ValidationAgreesWithTheJsonParser, (const std::string& text)) {
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20) continue;
    quoted.push_back(c);
  }
  quoted.push_back('"');
  const bool ours = !first_invalid_utf8(quoted).has_value();
  const bool theirs = Json::accept(quoted);
  RC_ASSERT(ours == theirs);
}

// ---- decoding ----------------------------------------------------------------------------------

const std::string kHandle(32, 'a');

HttpSessionRequest decode_ok(HttpEndpoint endpoint, std::string_view key, std::string_view body) {
  auto decoded = decode_http_session_request(endpoint, key, body, kHandle);
  if (const auto* bad = std::get_if<HttpBadRequest>(&decoded)) {
    ADD_FAILURE() << "rejected: " << bad->detail;
    return {};
  }
  return std::get<HttpSessionRequest>(decoded);
}

std::string decode_bad(HttpEndpoint endpoint, std::string_view key, std::string_view body,
                       std::optional<std::string_view> header = kHandle) {
  auto decoded = decode_http_session_request(endpoint, key, body, header);
  if (!std::holds_alternative<HttpBadRequest>(decoded)) {
    ADD_FAILURE() << "accepted: " << body;
    return "";
  }
  return std::get<HttpBadRequest>(decoded).detail;
}

TEST(HttpCodec, BodiesBecomeEngineRequests) {
  HttpSessionRequest lock =
      decode_ok(HttpEndpoint::kLockAcquire, "k", R"({"acquire_timeout_s":5,"lease_ttl_s":30})");
  EXPECT_EQ(lock.handle, kHandle);
  EXPECT_EQ(lock.request.command, Command::kLock);
  EXPECT_EQ(lock.request.key, "k");
  EXPECT_EQ(lock.request.timeout_s, 5);
  EXPECT_EQ(lock.request.lease_s, 30);

  HttpSessionRequest sem = decode_ok(HttpEndpoint::kSemAcquire, "s", R"({"limit":3})");
  EXPECT_EQ(sem.request.command, Command::kSemLock);
  EXPECT_EQ(sem.request.limit, 3);
  EXPECT_EQ(sem.request.lease_s, 0);  // the server default

  HttpSessionRequest enqueue = decode_ok(HttpEndpoint::kLockEnqueue, "k", "  ");
  EXPECT_EQ(enqueue.request.command, Command::kEnqueue);

  HttpSessionRequest wait = decode_ok(HttpEndpoint::kSemWait, "k", R"({"timeout_s":7})");
  EXPECT_EQ(wait.request.command, Command::kSemWait);
  EXPECT_EQ(wait.request.timeout_s, 7);

  const std::string token = "0000000000000001abcdefabcdefabcd";
  HttpSessionRequest renew =
      decode_ok(HttpEndpoint::kLockRenew, "k", R"({"token":")" + token + R"(","lease_ttl_s":9})");
  EXPECT_EQ(renew.request.command, Command::kRenew);
  ASSERT_TRUE(renew.request.token.has_value());
  EXPECT_EQ(renew.request.token->to_string(), token);
  EXPECT_EQ(renew.request.lease_s, 9);
}

TEST(HttpCodec, ReadWriteLockBodiesBecomeEngineRequests) {
  const std::string token = "0000000000000001abcdefabcdefabcd";
  for (const bool read : {true, false}) {
    SCOPED_TRACE(read ? "read" : "write");
    const HttpSessionRequest acquire =
        decode_ok(read ? HttpEndpoint::kReadAcquire : HttpEndpoint::kWriteAcquire, "cfg",
                  R"({"acquire_timeout_s":5,"lease_ttl_s":30})");
    EXPECT_EQ(acquire.handle, kHandle);
    EXPECT_EQ(acquire.request.command, read ? Command::kReadLock : Command::kWriteLock);
    EXPECT_EQ(acquire.request.key, "cfg");
    EXPECT_EQ(acquire.request.timeout_s, 5);
    EXPECT_EQ(acquire.request.lease_s, 30);
    EXPECT_EQ(acquire.request.limit, 1);

    const HttpSessionRequest release =
        decode_ok(read ? HttpEndpoint::kReadRelease : HttpEndpoint::kWriteRelease, "cfg",
                  R"({"token":")" + token + R"("})");
    EXPECT_EQ(release.request.command, read ? Command::kReadRelease : Command::kWriteRelease);
    ASSERT_TRUE(release.request.token.has_value());
    EXPECT_EQ(release.request.token->to_string(), token);

    const HttpSessionRequest renew =
        decode_ok(read ? HttpEndpoint::kReadRenew : HttpEndpoint::kWriteRenew, "cfg",
                  R"({"token":")" + token + R"(","lease_ttl_s":9})");
    EXPECT_EQ(renew.request.command, read ? Command::kReadRenew : Command::kWriteRenew);
    ASSERT_TRUE(renew.request.token.has_value());
    EXPECT_EQ(renew.request.lease_s, 9);

    // An enqueue's body may be empty, as a lock's.
    const HttpEndpoint enqueue_endpoint =
        read ? HttpEndpoint::kReadEnqueue : HttpEndpoint::kWriteEnqueue;
    const HttpSessionRequest enqueue = decode_ok(enqueue_endpoint, "cfg", "");
    EXPECT_EQ(enqueue.request.command, read ? Command::kReadEnqueue : Command::kWriteEnqueue);
    EXPECT_EQ(enqueue.request.lease_s, 0);
    EXPECT_EQ(decode_ok(enqueue_endpoint, "cfg", R"({"lease_ttl_s":7})").request.lease_s, 7);

    const HttpSessionRequest wait = decode_ok(
        read ? HttpEndpoint::kReadWait : HttpEndpoint::kWriteWait, "cfg", R"({"timeout_s":4})");
    EXPECT_EQ(wait.request.command, read ? Command::kReadWait : Command::kWriteWait);
    EXPECT_EQ(wait.request.timeout_s, 4);
  }
}

TEST(HttpCodec, ReadWriteLockBodiesTakeOnlyTheirFields) {
  // A read-write lock has no limit; acquire takes no token; wait takes timeout_s only.
  EXPECT_EQ(decode_bad(HttpEndpoint::kReadAcquire, "k", R"({"limit":2})"),
            "unknown field \"limit\"");
  EXPECT_EQ(decode_bad(HttpEndpoint::kWriteEnqueue, "k", R"({"limit":2})"),
            "unknown field \"limit\"");
  EXPECT_EQ(decode_bad(HttpEndpoint::kWriteAcquire, "k", R"({"token":"x"})"),
            "unknown field \"token\"");
  EXPECT_EQ(decode_bad(HttpEndpoint::kReadWait, "k", R"({"acquire_timeout_s":1})"),
            "unknown field \"acquire_timeout_s\"");
  // Acquire, release, renew and wait need a body; release and renew need a token.
  EXPECT_EQ(decode_bad(HttpEndpoint::kWriteAcquire, "k", ""), "request body must be a JSON object");
  EXPECT_EQ(decode_bad(HttpEndpoint::kReadWait, "k", " "), "request body must be a JSON object");
  EXPECT_EQ(decode_bad(HttpEndpoint::kReadRelease, "k", "{}"), "field \"token\" must be a string");
  EXPECT_EQ(decode_bad(HttpEndpoint::kWriteRenew, "k", R"({"token":""})"),
            "token must not be empty");
  EXPECT_EQ(decode_bad(HttpEndpoint::kWriteRelease, "k", R"({"token":"a b"})"),
            "token must not contain whitespace");
  EXPECT_EQ(decode_bad(HttpEndpoint::kReadAcquire, "k", R"({"lease_ttl_s":9223372037})"),
            "field \"lease_ttl_s\" must be between 0 and 9223372036");
  // The key and the session header as for every keyed route.
  EXPECT_EQ(decode_bad(HttpEndpoint::kReadAcquire, "", "{}"), "key is empty");
  EXPECT_EQ(decode_bad(HttpEndpoint::kWriteWait, "a b", "{}"),
            "key contains whitespace (a space, tab, CR or LF)");
  EXPECT_EQ(decode_bad(HttpEndpoint::kReadAcquire, "k", "{}", std::nullopt),
            "missing X-Dflockd-Session header");
  EXPECT_EQ(decode_bad(HttpEndpoint::kWriteRelease, "k", R"({"token":"t"})", "nope"),
            "X-Dflockd-Session must be 32 lowercase hex characters");
  EXPECT_EQ(decode_bad(HttpEndpoint::kReadRenew, "k", "{\"token\":\"\xff\"}"),
            "request body is not valid UTF-8 (byte 10)");
  // A token that we could not have issued decodes (and then holds nothing: 404).
  EXPECT_FALSE(
      decode_ok(HttpEndpoint::kReadRelease, "k", R"({"token":"abc"})").request.token.has_value());
}

TEST(HttpCodec, BadInputIsRejectedWithADetailInAFixedOrder) {
  // The body's size first, then the key, the body, the session header.
  EXPECT_EQ(decode_bad(HttpEndpoint::kLockAcquire, "", std::string(kHttpBodyMax + 1, ' ')),
            "request body larger than 1 MiB");
  EXPECT_EQ(decode_bad(HttpEndpoint::kLockAcquire, "", "{}"), "key is empty");
  EXPECT_EQ(decode_bad(HttpEndpoint::kLockAcquire, std::string(257, 'k'), "{}"),
            "key is longer than 256 bytes");
  EXPECT_EQ(decode_bad(HttpEndpoint::kLockAcquire, "a b", "nonsense"),
            "key contains whitespace (a space, tab, CR or LF)");
  EXPECT_EQ(decode_bad(HttpEndpoint::kLockAcquire, "k", "{}", std::nullopt),
            "missing X-Dflockd-Session header");
  EXPECT_EQ(decode_bad(HttpEndpoint::kLockAcquire, "k", "{}", std::string(32, 'A')),
            "X-Dflockd-Session must be 32 lowercase hex characters");
  EXPECT_EQ(decode_bad(HttpEndpoint::kLockAcquire, "k", "[]"),
            "request body must be a JSON object");
  EXPECT_EQ(decode_bad(HttpEndpoint::kLockAcquire, "k", ""), "request body must be a JSON object");
  EXPECT_EQ(decode_bad(HttpEndpoint::kLockAcquire, "k", R"({"nope":1})"), "unknown field \"nope\"");
  EXPECT_EQ(decode_bad(HttpEndpoint::kLockAcquire, "k", R"({"lease_ttl_s":-1})"),
            "field \"lease_ttl_s\" must be between 0 and 9223372036");
  EXPECT_EQ(decode_bad(HttpEndpoint::kLockAcquire, "k", R"({"lease_ttl_s":1e3})"),
            "field \"lease_ttl_s\" must be an integer");
  EXPECT_EQ(decode_bad(HttpEndpoint::kSemAcquire, "k", R"({"limit":0})"),
            "field \"limit\" must be greater than 0");
  EXPECT_EQ(decode_bad(HttpEndpoint::kLockRelease, "k", R"({"token":7})"),
            "field \"token\" must be a string");
  EXPECT_EQ(decode_bad(HttpEndpoint::kLockRelease, "k", R"({"token":"a\tb"})"),
            "token must not contain whitespace");
  // Our words, not the parser's, and the field when there is one (core/json_error.h).
  EXPECT_EQ(decode_bad(HttpEndpoint::kLockAcquire, "k", "{} {}"),
            "request body is not valid JSON at byte 3: something follows the JSON value");
  EXPECT_EQ(decode_bad(HttpEndpoint::kLockRelease, "k", R"({"token":"\ud800"})"),
            "field \"token\": not valid JSON at byte 16: a \\u escape is half of a UTF-16 "
            "surrogate pair (U+D800 to U+DFFF) without the other half");
}

TEST(HttpCodec, InvalidUtf8AnywhereInABodyIsRejectedWithWhere) {
  // The bodies of issue 19, each of which aborted turnstiled.
  EXPECT_EQ(decode_bad(HttpEndpoint::kLockRelease, "k", "{\"token\":\"\xff\"}"),
            "request body is not valid UTF-8 (byte 10)");
  EXPECT_EQ(decode_bad(HttpEndpoint::kLockAcquire, "k", "{\"\xff\":1}"),
            "request body is not valid UTF-8 (byte 2)");
  EXPECT_EQ(decode_bad(HttpEndpoint::kLockAcquire, "k", "{\"acquire_timeout_s\":0,\"x\":\"\xc3\"}"),
            "request body is not valid UTF-8 (byte 28)");
  EXPECT_EQ(decode_bad(HttpEndpoint::kLockRenew, "k", "{\"token\":\"\xc3\x28\"}"),
            "request body is not valid UTF-8 (byte 10)");
  // Outside strings too.
  EXPECT_EQ(decode_bad(HttpEndpoint::kLockAcquire, "k", "\xef\xbb\xbf{}\xfe"),
            "request body is not valid UTF-8 (byte 5)");
  // Valid UTF-8 in an unknown field's name is echoed as it is.
  EXPECT_EQ(decode_bad(HttpEndpoint::kLockAcquire, "k", "{\"\xc3\xa9\":1}"),
            "unknown field \"\xc3\xa9\"");
}

TEST(HttpCodec, DeepNestingHugeNumbersAndDuplicateFields) {
  // Nesting a million deep inside a field: parsed without recursion, then refused by name.
  const std::string deep = "{\"x\":" + std::string(500'000, '[') + std::string(500'000, ']') + "}";
  EXPECT_EQ(decode_bad(HttpEndpoint::kLockAcquire, "k", deep), "unknown field \"x\"");
  EXPECT_NE(decode_bad(HttpEndpoint::kLockAcquire, "k", std::string(1'000'000, '['))
                .find("request body is not valid JSON at byte 1000000: the body ends before its "
                      "JSON value does"),
            std::string::npos);
  // Numbers past 64 bits parse as floating point: not an integer.
  EXPECT_EQ(decode_bad(HttpEndpoint::kLockAcquire, "k", R"({"lease_ttl_s":18446744073709551616})"),
            "field \"lease_ttl_s\" must be an integer");
  EXPECT_EQ(decode_bad(HttpEndpoint::kLockAcquire, "k", R"({"lease_ttl_s":18446744073709551615})"),
            "field \"lease_ttl_s\" must be between 0 and 9223372036");
  // A field given twice: the last one counts, as in Go's encoding/json.
  const HttpSessionRequest twice = decode_ok(HttpEndpoint::kLockAcquire, "k",
                                             R"({"acquire_timeout_s":1,"acquire_timeout_s":2})");
  EXPECT_EQ(twice.request.timeout_s, 2);
}

// ---- rendering ---------------------------------------------------------------------------------

TEST(HttpCodec, RepliesRenderToStatusCodesAndBodies) {
  Request lock;
  lock.command = Command::kLock;
  Request release;
  release.command = Command::kRelease;
  Request renew;
  renew.command = Command::kSemRenew;
  const Token token = Token::parse("0000000000000001abcdefabcdefabcd").value();

  Reply granted = Reply::of(Status::kOk);
  granted.token = token;
  granted.seconds = 30;
  EXPECT_EQ(render_http_reply(lock, granted).code, 200);
  EXPECT_EQ(render_http_reply(lock, granted).body,
            R"({"status":"ok","token":"0000000000000001abcdefabcdefabcd","lease_ttl_s":30})"
            "\n");
  EXPECT_EQ(render_http_reply(release, Reply::of(Status::kOk)).code, 204);
  EXPECT_EQ(render_http_reply(release, Reply::of(Status::kOk)).body, "");
  Reply renewed = Reply::of(Status::kOk);
  renewed.seconds = 12;
  EXPECT_EQ(render_http_reply(renew, renewed).body, "{\"remaining_s\":12}\n");
  EXPECT_EQ(render_http_reply(lock, Reply::of(Status::kTimeout)).body,
            "{\"status\":\"timeout\"}\n");
  EXPECT_EQ(render_http_reply(lock, Reply::of(Status::kQueued)).body, "{\"status\":\"queued\"}\n");

  const std::pair<Status, int> codes[] = {
      {Status::kErrorMaxLocks, 503},
      {Status::kErrorMaxWaiters, 503},
      {Status::kErrorLimitMismatch, 409},
      {Status::kErrorNotEnqueued, 409},
      {Status::kErrorAlreadyEnqueued, 409},
      {Status::kErrorLeaseExpired, 409},
      {Status::kErrorDraining, 503},
      {Status::kError, 503},
      {Status::kErrorAuth, 500},
  };
  for (const auto& [status, code] : codes) {
    const HttpResponse response = render_http_reply(lock, Reply::of(status));
    EXPECT_EQ(response.code, code) << status_name(status);
    EXPECT_TRUE(Json::parse(response.body).contains("error")) << response.body;
  }
  const HttpResponse not_leader = render_http_reply(lock, Reply::not_leader("10.0.0.2:6388"));
  EXPECT_EQ(not_leader.code, 503);
  EXPECT_EQ(not_leader.leader, "10.0.0.2:6388");
  EXPECT_EQ(render_http_reply(lock, Reply::of(Status::kTimeout)).leader, "");
  EXPECT_EQ(not_leader.body, "{\"error\":\"not_leader\",\"detail\":\"10.0.0.2:6388\"}\n");
  EXPECT_EQ(render_http_reply(release, Reply::of(Status::kError)).code, 404);  // not held
  EXPECT_EQ(render_http_reply(renew, Reply::of(Status::kError)).code, 404);
}

TEST(HttpCodec, ReadWriteLockRepliesRenderAsTheLockRoutesDo) {
  const Token token = Token::parse("0000000000000001abcdefabcdefabcd").value();
  auto request_of = [](Command command) {
    Request request;
    request.command = command;
    request.key = "cfg";
    return request;
  };
  Reply granted = Reply::granted(Status::kOk, token, 30);
  Reply acquired = Reply::granted(Status::kAcquired, token, 30);
  for (const bool read : {true, false}) {
    SCOPED_TRACE(read ? "read" : "write");
    const Command like = read ? Command::kReadLock : Command::kWriteLock;
    const Request acquire = request_of(like);
    const Request release = request_of(command_like(like, Operation::kRelease));
    const Request renew = request_of(command_like(like, Operation::kRenew));
    const Request enqueue = request_of(command_like(like, Operation::kEnqueue));
    const Request wait = request_of(command_like(like, Operation::kWait));
    EXPECT_EQ(render_http_reply(acquire, granted).code, 200);
    EXPECT_EQ(render_http_reply(acquire, granted).body,
              R"({"status":"ok","token":"0000000000000001abcdefabcdefabcd","lease_ttl_s":30})"
              "\n");
    EXPECT_EQ(render_http_reply(wait, granted).body, render_http_reply(acquire, granted).body);
    EXPECT_EQ(render_http_reply(acquire, Reply::of(Status::kTimeout)).body,
              "{\"status\":\"timeout\"}\n");
    EXPECT_EQ(render_http_reply(enqueue, acquired).body,
              R"({"status":"acquired","token":"0000000000000001abcdefabcdefabcd","lease_ttl_s":30})"
              "\n");
    EXPECT_EQ(render_http_reply(enqueue, Reply::of(Status::kQueued)).body,
              "{\"status\":\"queued\"}\n");
    const HttpResponse released = render_http_reply(release, Reply::of(Status::kOk));
    EXPECT_EQ(released.code, 204);
    EXPECT_EQ(released.body, "");
    EXPECT_EQ(render_http_reply(renew, Reply::renewed(12)).body, "{\"remaining_s\":12}\n");
    // A token of the other side (or none at all) is not held; the detail names the side.
    for (const Request& by_token : {release, renew}) {
      const HttpResponse refused = render_http_reply(by_token, Reply::of(Status::kError));
      EXPECT_EQ(refused.code, 404);
      const Json body = Json::parse(refused.body);
      EXPECT_EQ(body.at("error"), "not_held");
      EXPECT_NE(body.at("detail").get<std::string>().find(read ? "read token" : "write token"),
                std::string::npos)
          << refused.body;
    }
    // An acquire's bare error is the fence journal's, as for a lock.
    EXPECT_EQ(render_http_reply(acquire, Reply::of(Status::kError)).code, 503);
    const HttpResponse not_enqueued = render_http_reply(wait, Reply::of(Status::kErrorNotEnqueued));
    EXPECT_EQ(not_enqueued.code, 409);
    EXPECT_EQ(not_enqueued.body, "{\"error\":\"not_enqueued\"}\n");
    EXPECT_EQ(render_http_reply(enqueue, Reply::of(Status::kErrorAlreadyEnqueued)).code, 409);
    EXPECT_EQ(render_http_reply(acquire, Reply::of(Status::kErrorMaxLocks)).code, 503);
  }
}

TEST(HttpCodec, FixedBodies) {
  EXPECT_EQ(http_status_body("ok"), "{\"status\":\"ok\"}\n");
  EXPECT_EQ(http_error_body("not_found"), "{\"error\":\"not_found\"}\n");
  EXPECT_EQ(http_error_body("not_found", "no route for /\xff"),
            "{\"error\":\"not_found\",\"detail\":\"no route for /\xef\xbf\xbd\"}\n");
  EXPECT_EQ(http_session_created_body(kHandle, 20),
            "{\"session_id\":\"" + kHandle + "\",\"idle_timeout_s\":20}\n");
}

// ---- CORS --------------------------------------------------------------------------------------

TEST(HttpCodec, CorsEchoesListedOriginsOrAllowsAny) {
  const HttpCors none("");
  EXPECT_FALSE(none.enabled());
  EXPECT_TRUE(none.headers_for("https://a.example").empty());

  const HttpCors listed(" https://a.example , https://b.example,,");
  EXPECT_TRUE(listed.enabled());
  EXPECT_TRUE(listed.headers_for("https://c.example").empty());
  const auto headers = listed.headers_for("https://b.example");
  ASSERT_GE(headers.size(), 2U);
  EXPECT_EQ(headers[0].first, "Access-Control-Allow-Origin");
  EXPECT_EQ(headers[0].second, "https://b.example");
  EXPECT_EQ(headers[1].first, "Vary");

  const HttpCors any("*");
  const auto wildcard = any.headers_for("https://whoever.example");
  ASSERT_FALSE(wildcard.empty());
  EXPECT_EQ(wildcard[0].second, "*");
}

// ---- the admin routes --------------------------------------------------------------------------

TEST(HttpCodec, AdminAccessNeedsAConfiguredTokenAndTheRightBearer) {
  EXPECT_EQ(admin_access(std::nullopt, "Bearer anything"), AdminAccess::kDisabled);
  EXPECT_EQ(admin_access(std::string(), "Bearer "), AdminAccess::kDisabled);
  const std::optional<std::string> token = "s3cret";
  EXPECT_EQ(admin_access(token, ""), AdminAccess::kUnauthorized);
  EXPECT_EQ(admin_access(token, "Bearer s3cre"), AdminAccess::kUnauthorized);
  EXPECT_EQ(admin_access(token, "Bearer s3cret!"), AdminAccess::kUnauthorized);
  EXPECT_EQ(admin_access(token, "Basic s3cret"), AdminAccess::kUnauthorized);
  EXPECT_EQ(admin_access(token, "Bearer s3cret"), AdminAccess::kAllowed);
  EXPECT_EQ(admin_access(token, "bearer  s3cret "), AdminAccess::kAllowed);
}

TEST(HttpCodec, DecodesAnAddedVoter) {
  auto decoded = decode_admin_voter_add(
      R"({"id":4,"raft_address":"10.0.0.4:7000","client_address":"[fd00::4]:6388"})");
  ASSERT_TRUE(std::holds_alternative<AdminVoterAdd>(decoded));
  const AdminVoterAdd& add = std::get<AdminVoterAdd>(decoded);
  EXPECT_EQ(add.id, 4u);
  EXPECT_EQ(add.raft_address, "10.0.0.4:7000");
  EXPECT_EQ(add.client_address, "[fd00::4]:6388");

  auto refused = [](std::string_view body) {
    auto result = decode_admin_voter_add(body);
    return std::holds_alternative<HttpBadRequest>(result) ? std::get<HttpBadRequest>(result).detail
                                                          : std::string("accepted");
  };
  const std::string good_addresses = R"("raft_address":"h:1","client_address":"h:2")";
  EXPECT_NE(refused(""), "accepted");
  EXPECT_NE(refused("[]"), "accepted");
  EXPECT_NE(refused(R"({"id":0,)" + good_addresses + "}"), "accepted");
  EXPECT_NE(refused(R"({"id":-1,)" + good_addresses + "}"), "accepted");
  EXPECT_NE(refused(R"({"id":"4",)" + good_addresses + "}"), "accepted");
  EXPECT_NE(refused(R"({"id":9223372036854775808,)" + good_addresses + "}"), "accepted");
  EXPECT_EQ(refused(R"({"id":9223372036854775807,)" + good_addresses + "}"), "accepted");
  EXPECT_NE(refused(R"({"id":4,"extra":1,)" + good_addresses + "}"), "accepted");
  EXPECT_NE(refused(R"({"id":4,"raft_address":"h:1"})"), "accepted");
  for (const char* bad : {"h", "h:0", "h:65536", ":1", "h@x:1", "a,b:1", "0.0.0.0:1", "[::]:1",
                          "[fd00::1:1", "h:1x", "h h:1"}) {
    EXPECT_NE(
        refused(R"({"id":4,"raft_address":")" + std::string(bad) + R"(","client_address":"h:2"})"),
        "accepted")
        << bad;
  }
  EXPECT_NE(refused(R"({"id":4,"raft_address":"h:1","client_address":"h:1"})"), "accepted");
}

TEST(HttpCodec, DecodesAVoterIdOfThePath) {
  EXPECT_EQ(std::get<std::uint64_t>(decode_admin_voter_id("7")), 7u);
  EXPECT_EQ(std::get<std::uint64_t>(decode_admin_voter_id("9223372036854775807")),
            9223372036854775807u);
  for (const char* bad :
       {"", "0", "-1", "x", "1x", "9223372036854775808", "99999999999999999999"}) {
    EXPECT_TRUE(std::holds_alternative<HttpBadRequest>(decode_admin_voter_id(bad))) << bad;
  }
}

TEST(HttpCodec, RendersEveryAdminOutcome) {
  using Kind = AdminChangeOutcome::Kind;
  EXPECT_EQ(render_admin_outcome({Kind::kDone, "", "", {1, 2, 4}}).body, "{\"voters\":[1,2,4]}\n");
  const HttpResponse not_leader = render_admin_outcome({Kind::kNotLeader, "", "10.0.0.2:6388"});
  EXPECT_EQ(not_leader.code, 503);
  EXPECT_EQ(not_leader.leader, "10.0.0.2:6388");
  EXPECT_EQ(render_admin_outcome({Kind::kPending, "busy"}).code, 409);
  EXPECT_NE(render_admin_outcome({Kind::kPending, "busy"}).body.find("change_pending"),
            std::string::npos);
  EXPECT_EQ(render_admin_outcome({Kind::kUnknownId, "no"}).code, 404);
  EXPECT_EQ(render_admin_outcome({Kind::kRefused, "no"}).code, 400);
  EXPECT_EQ(render_admin_outcome({Kind::kFailed, "io"}).code, 500);
}

// ---- the OpenAPI document ----------------------------------------------------------------------

TEST(HttpCodec, EveryEndpointIsDocumentedAndEveryDocumentedRouteIsAnEndpoint) {
  std::ifstream file(TURNSTILE_DOCS_DIR "/openapi.json");
  ASSERT_TRUE(file) << "cannot read docs/openapi.json";
  std::stringstream text;
  text << file.rdbuf();
  const Json document = Json::parse(text.str());
  std::set<std::pair<std::string, std::string>> documented;
  for (const auto& [path, operations] : document.at("paths").items()) {
    for (const auto& [method, operation] : operations.items()) {
      std::string upper = method;
      for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      documented.emplace(upper, path);
    }
  }
  std::set<std::pair<std::string, std::string>> served;
  for (const HttpEndpointSpec& spec : kHttpEndpoints) {
    served.emplace(std::string(spec.method), std::string(spec.pattern));
  }
  EXPECT_EQ(served, documented);
}

}  // namespace
}  // namespace turnstile::core

namespace turnstile::core {
namespace {

// The signal routes take what a TCP client could send, by the TCP parser's rules.
TEST(HttpCodecSignals, APublishIsASignalRequestByTheWireRules) {
  const auto ok = decode_http_signal("jobs.7", R"({"payload":"  done  "})");
  ASSERT_TRUE(std::holds_alternative<Request>(ok));
  const Request& request = std::get<Request>(ok);
  EXPECT_EQ(request.command, Command::kSignal);
  EXPECT_EQ(request.key, "jobs.7");
  // Kept as sent, as TCP keeps the line: spaces at either end stay, inner ones too.
  EXPECT_EQ(request.text, "  done  ");
  const auto tabs = decode_http_signal("a", R"({"payload":"\tx \ty\t"})");
  ASSERT_TRUE(std::holds_alternative<Request>(tabs));
  EXPECT_EQ(std::get<Request>(tabs).text, "\tx \ty\t");
  for (const auto& [channel, body] : std::vector<std::pair<std::string, std::string>>{
           {"jobs.*", R"({"payload":"x"})"},                               // a wildcard channel
           {"a..b", R"({"payload":"x"})"},                                 // an empty token
           {"a", R"({"payload":"   "})"},                                  // a blank payload
           {"a", R"({"payload":"one\ntwo"})"},                             // two lines
           {"a", R"({})"},                                                 // no payload
           {"a", R"({"payload":7})"},                                      // not a string
           {"a", "not json"},                                              // not JSON
           {"a", R"({"payload":")" + std::string(65531, 'p') + R"("})"},   // over the cap
           {"a", R"({"payload":" )" + std::string(65530, 'p') + R"("})"},  // its space counts
       }) {
    EXPECT_TRUE(std::holds_alternative<HttpBadRequest>(decode_http_signal(channel, body)))
        << channel << " " << body.substr(0, 40);
  }
  EXPECT_TRUE(std::holds_alternative<Request>(
      decode_http_signal("a", R"({"payload":")" + std::string(65530, 'p') + R"("})")));
  EXPECT_EQ(http_delivered_body(3), "{\"delivered\":3}\n");
}

TEST(HttpCodecSignals, AStreamQueryIsAListenRequest) {
  const auto plain = decode_http_listen("pattern=jobs.%3E");
  ASSERT_TRUE(std::holds_alternative<Request>(plain));
  EXPECT_EQ(std::get<Request>(plain).command, Command::kListen);
  EXPECT_EQ(std::get<Request>(plain).key, "jobs.>");
  EXPECT_EQ(std::get<Request>(plain).text, "");
  const auto group = decode_http_listen("group=+w+&pattern=a.*&pattern=ignored");
  ASSERT_TRUE(std::holds_alternative<Request>(group));
  EXPECT_EQ(std::get<Request>(group).key, "a.*");
  EXPECT_EQ(std::get<Request>(group).text, "w");  // '+' is a space, trimmed
  for (const char* bad : {"", "group=g", "pattern=a.b*", "pattern=a..b", "pattern=a%20b"}) {
    EXPECT_TRUE(std::holds_alternative<HttpBadRequest>(decode_http_listen(bad))) << bad;
  }
  // A '%' that starts no escape is not part of a literal pattern: the query is refused.
  for (const char* bad :
       {"pattern=a%", "pattern=a%zz", "pattern=a%zz&pattern=b", "pattern=b&group=%g"}) {
    const auto decoded = decode_http_listen(bad);
    ASSERT_TRUE(std::holds_alternative<HttpBadRequest>(decoded)) << bad;
    EXPECT_NE(std::get<HttpBadRequest>(decoded).detail.find("'%' not followed by two hex digits"),
              std::string::npos)
        << bad;
  }
}

TEST(HttpCodecSignals, AnEventIsTheFrameAsGoWouldWriteItsJson) {
  EXPECT_EQ(http_signal_event("sig jobs.7 done\n"),
            "event: sig\ndata: {\"channel\":\"jobs.7\",\"payload\":\"done\"}\n\n");
  EXPECT_EQ(http_signal_event("sig c <a&b> \"q\" \\"),
            "event: sig\ndata: {\"channel\":\"c\",\"payload\":"
            "\"\\u003ca\\u0026b\\u003e \\\"q\\\" \\\\\"}\n\n");
  EXPECT_EQ(http_signal_event("sig c \xff"),
            "event: sig\ndata: {\"channel\":\"c\",\"payload\":\"\\ufffd\"}\n\n");
  EXPECT_EQ(http_signal_event("ok 1"), "");
}

}  // namespace
}  // namespace turnstile::core

namespace turnstile::core {
namespace {

// A refused signal stream: named by the cap that refused it.
TEST(HttpCodec, AListenRefusalNamesTheCapThatRefusedIt) {
  const HttpResponse total = render_http_listen_refusal(Status::kErrorMaxSubscriptions);
  EXPECT_EQ(total.code, 503);
  EXPECT_NE(total.body.find("\"error\":\"max_subscriptions_total\""), std::string::npos);
  const HttpResponse other = render_http_listen_refusal(Status::kError);
  EXPECT_EQ(other.code, 503);
  EXPECT_NE(other.body.find("\"error\":\"max_subscriptions\""), std::string::npos);
}

}  // namespace
}  // namespace turnstile::core
