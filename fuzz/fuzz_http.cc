// Fuzzes the HTTP codec (core/http_codec.h) the way turnstiled drives it: find the endpoint,
// check the bearer token, add the CORS headers, decode a lock, semaphore or read-write lock
// request, a fence check, an inspect or a force-release, and render every reply the engine could
// give it.
//
// Input: a small HTTP request as text, so that the corpus reads as requests and the dictionary
// (fuzz/fuzz_http.dict: methods, routes, header and field names, bytes that are not UTF-8) helps:
//   METHOD SP PATH[?QUERY] LF
//   Name: value LF        (any number; X-Dflockd-Session, Authorization and Origin are used)
//   LF
//   BODY                  (everything after the blank line, any bytes)
//
// Checks:
//  * nothing throws (an exception reaches libFuzzer as a crash): in issue 19 a body with bytes
//    that are not UTF-8 made nlohmann throw while writing the 400's detail, and turnstiled abort;
//  * every body the codec writes is valid UTF-8 and parses as JSON (or is empty: a 204);
//  * an endpoint found has the method asked for (GET for a HEAD) and no Allow list; a path with
//    no endpoint for this method names only other methods in its Allow list;
//  * a signal published or a stream's query (its text given as the body) decodes to a request
//    the TCP parser would take, and its event is one line of JSON;
//  * a decoded request is one the engine may take: the command of its endpoint (of the right
//    namespace and, for a read-write lock, the right side), a key of 1..256 bytes without
//    whitespace, a 32-hex session handle, numbers in their documented ranges, and a body that
//    was valid UTF-8;
//  * a check, inspect or force-release decodes to its endpoint's command and namespace (a
//    check with a token field, a force-release with the query's fence), and every reply to it
//    renders as one JSON line; the body, read as a `lost` line, is either refused or yields a
//    slot whose event and whose "lost" array are JSON on one line.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "core/http_codec.h"
#include "core/http_sessions.h"
#include "core/protocol.h"
#include "core/signal_pattern.h"
#include "fuzz/fuzz_input.h"

namespace turnstile::fuzz {
namespace {

constexpr const char* kHarness = "fuzz_http";

void check(bool condition, const char* what) {
  if (!condition) fail(kHarness, what);
}

// A body the codec wrote: empty, or one JSON value on one line, valid UTF-8.
void check_body(const std::string& body) {
  if (body.empty()) return;
  check(!core::first_invalid_utf8(body).has_value(), "a body is not valid UTF-8");
  check(body.back() == '\n', "a body does not end its line");
  check(nlohmann::json::accept(body), "a body is not JSON");
}

struct HttpText {
  std::string_view method;
  std::string_view path;
  std::string_view query;  // after the first '?' of the request line's target
  std::optional<std::string_view> session;
  std::optional<std::string_view> authorization;
  std::optional<std::string_view> origin;
  std::string_view body;
};

std::string_view take_line(std::string_view& text) {
  const std::size_t end = text.find('\n');
  const std::string_view line = text.substr(0, end);
  text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
  return line;
}

HttpText read_request(std::string_view text) {
  HttpText request;
  std::string_view first = take_line(text);
  const std::size_t space = first.find(' ');
  request.method = first.substr(0, space);
  request.path = space == std::string_view::npos ? std::string_view() : first.substr(space + 1);
  if (const std::size_t mark = request.path.find('?'); mark != std::string_view::npos) {
    request.query = request.path.substr(mark + 1);
    request.path = request.path.substr(0, mark);
  }
  while (!text.empty()) {
    const std::string_view line = take_line(text);
    if (line.empty()) break;
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view name = line.substr(0, colon);
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    if (name == core::kHttpSessionHeader) request.session = value;
    if (name == "Authorization") request.authorization = value;
    if (name == "Origin") request.origin = value;
  }
  request.body = text;
  return request;
}

void check_decoded(const core::HttpEndpointSpec& spec, const core::HttpSessionRequest& decoded,
                   std::string_view body) {
  const core::Request& request = decoded.request;
  check(core::is_session_handle(decoded.handle), "a decoded handle is not 32 hex digits");
  check(!request.key.empty() && request.key.size() <= 256, "a decoded key has a bad length");
  for (char c : request.key) {
    check(c != ' ' && c != '\t' && c != '\r' && c != '\n', "a decoded key holds whitespace");
  }
  check(request.timeout_s >= 0 && request.timeout_s <= core::kMaxSeconds, "timeout out of range");
  check(request.lease_s >= 0 && request.lease_s <= core::kMaxSeconds, "lease out of range");
  check(request.command == core::http_endpoint_command(spec.endpoint),
        "a command that is not its endpoint's");
  const bool semaphore = spec.pattern.starts_with("/v1/semaphores/");
  const bool read_write = spec.pattern.starts_with("/v1/rwlocks/");
  check((core::command_namespace(request.command) == core::Namespace::kSemaphore) == semaphore,
        "a command of the wrong kind");
  check((core::command_namespace(request.command) == core::Namespace::kReadWrite) == read_write,
        "a command of the wrong kind");
  if (read_write) {
    check(core::is_shared_command(request.command) ==
              (spec.pattern.find("/{key}/read") != std::string_view::npos),
          "a read-write command of the wrong side");
  }
  if (request.command == core::Command::kSemLock || request.command == core::Command::kSemEnqueue) {
    check(request.limit >= 1 && request.limit <= core::kMaxSemaphoreLimit, "limit out of range");
  } else {
    check(request.limit == 1, "a limit on a request that takes none");
  }
  check(!core::first_invalid_utf8(body).has_value(), "a body that is not UTF-8 was accepted");
}

// Every reply the engine could give, rendered.
void render_all(const core::Request& request) {
  const core::Token token = core::Token::parse("0000000000000001abcdefabcdefabcd").value();
  for (int status = 0; status <= static_cast<int>(core::Status::kParked); ++status) {
    core::Reply reply = core::Reply::of(static_cast<core::Status>(status));
    reply.seconds = 30;
    if (reply.status == core::Status::kOk || reply.status == core::Status::kAcquired) {
      reply.token = token;
    }
    const core::HttpResponse response = core::render_http_reply(request, reply);
    check(response.code >= 200 && response.code < 600, "a status code out of range");
    check_body(response.body);
  }
}

// A check, inspect or force-release: decoded as turnstiled does, then every reply rendered.
void check_key_request(const core::HttpEndpointSpec& spec, const HttpText& http,
                       const std::string& key) {
  const std::optional<core::HttpKeyCommand> command = core::http_key_command(spec.endpoint);
  check(command.has_value(), "a key endpoint without its command");
  const auto decoded = core::decode_http_key_request(spec.endpoint, key, http.body, http.query);
  if (const auto* bad = std::get_if<core::HttpBadRequest>(&decoded)) {
    check(!bad->detail.empty(), "a 400 without a detail");
    check_body(core::http_error_body("bad_request", bad->detail));
    return;
  }
  const core::Request& request = std::get<core::Request>(decoded);
  check(request.command == command->command && request.space == command->space,
        "a key request of another command or namespace");
  check(core::request_namespace(request) == command->space, "a key request placed elsewhere");
  check(!request.key.empty() && request.key.size() <= 256, "a decoded key has a bad length");
  for (char c : request.key) {
    check(c != ' ' && c != '\t' && c != '\r' && c != '\n', "a decoded key holds whitespace");
  }
  check(request.fence == 0 || request.command == core::Command::kForceRelease,
        "a fence on a request that takes none");
  if (request.command == core::Command::kCheck) {
    check(!core::first_invalid_utf8(http.body).has_value(), "a body that is not UTF-8 accepted");
  } else {
    check(!request.token.has_value(), "a token on a request that takes none");
  }
  const core::Token token = core::Token::parse("0000000000000001abcdefabcdefabcd").value();
  for (int status = 0; status <= static_cast<int>(core::Status::kParked); ++status) {
    core::Reply reply = core::Reply::of(static_cast<core::Status>(status));
    reply.seconds = 3;
    for (const std::string& payload :
         {std::string(), std::string(http.body),
          nlohmann::json{{"kind", "lock"}, {"key", "k"}, {"exists", status % 2 == 0}}.dump()}) {
      reply.payload = payload;
      const core::HttpResponse response = core::render_http_key_reply(request, reply);
      check(response.code >= 200 && response.code < 600, "a status code out of range");
      check(!response.body.empty(), "a key reply without a body");
      check_body(response.body);
    }
    reply.token = token;
    check_body(core::render_http_key_reply(request, reply).body);
  }
}

// The body read as a `lost` push line: refused, or a slot that renders as JSON everywhere.
void check_lost_line(std::string_view text) {
  const std::optional<core::LostSlot> slot = core::parse_lost_line(text);
  if (!slot) return;
  check(core::lost_line(*slot) == std::string(text.substr(0, text.find('\n'))) + "\n",
        "a lost line that does not read back as itself");
  const std::string event = core::http_lost_event(*slot);
  constexpr std::string_view kHead = "event: lost\ndata: ";
  check(event.rfind(kHead, 0) == 0 && event.ends_with("\n\n"), "a lost event without its frame");
  check_body(event.substr(kHead.size(), event.size() - kHead.size() - 1));
  const std::string body = core::http_body_with_lost("{\"status\":\"ok\"}\n", {*slot, *slot}, 3);
  check_body(body);
  check(nlohmann::json::parse(body)["lost"].size() == 2, "a lost array without its slots");
}

// The CORS headers for the request's Origin stay on one line; the bearer check runs.
void check_headers(const HttpText& http) {
  static const core::HttpCors listed("https://a.example, https://b.example");
  static const core::HttpCors any("*");
  if (http.origin) {
    for (const auto& [name, value] : listed.headers_for(*http.origin)) {
      check(value.find_first_of("\r\n") == std::string::npos, "a CORS header value spans lines");
    }
    (void)any.headers_for(*http.origin);
  }
  if (http.authorization) (void)core::bearer_matches(*http.authorization, "s3cret");
}

// A path with no endpoint for this method: the Allow list, and the 404 or 405 the server sends.
void check_unrouted(const HttpText& http, const core::HttpRouteMatch& match) {
  std::string_view allow = match.allow;
  while (!allow.empty()) {
    const std::size_t comma = allow.find(", ");
    check(allow.substr(0, comma) != http.method, "the Allow list names the method asked for");
    allow.remove_prefix(comma == std::string_view::npos ? allow.size() : comma + 2);
  }
  check_body(core::http_error_body("not_found", "no route for " + std::string(http.path)));
  check_body(core::http_error_body(
      "method_not_allowed",
      std::string(http.method) + " is not allowed on " + std::string(http.path)));
}

// The body of a session create: a valid stable ref, or a 400 that says why.
void check_session_create(std::string_view body) {
  const auto ref = core::decode_http_session_create(body);
  if (const auto* bad = std::get_if<core::HttpBadRequest>(&ref)) {
    check(!bad->detail.empty(), "a 400 without a detail");
    check_body(core::http_error_body("bad_request", bad->detail));
  } else {
    const std::string& text = std::get<std::string>(ref);
    check(text.empty() || core::is_valid_stable_ref(text), "an invalid stable ref accepted");
  }
}

// A signal published (the path's channel, the body's payload) or a stream's query (the body
// stands in for it): a request the TCP parser would take, or a 400 that says why.
void check_signal_request(const core::HttpRouteMatch& match, const HttpText& http) {
  const bool publish = match.spec->endpoint == core::HttpEndpoint::kSignalPublish;
  const auto decoded = publish ? core::decode_http_signal(match.params.at(0), http.body)
                               : core::decode_http_listen(http.body);
  if (const auto* bad = std::get_if<core::HttpBadRequest>(&decoded)) {
    check(!bad->detail.empty(), "a 400 without a detail");
    check_body(core::http_error_body("bad_request", bad->detail));
    return;
  }
  const core::Request& request = std::get<core::Request>(decoded);
  check(publish ? core::check_signal_channel(request.key) == core::SignalNameError::kNone
                : core::check_signal_pattern(request.key) == core::SignalNameError::kNone,
        "a bad signal name accepted");
  if (publish) {
    check(!request.text.empty() && request.text.size() <= core::signal_payload_max(request.key),
          "a payload out of bounds accepted");
    std::string frame;
    core::append_signal_frame(request.key, request.text, frame);
    const std::string event = core::http_signal_event(frame);
    check(event.rfind("event: sig\ndata: ", 0) == 0, "an event without its head");
    check_body(event.substr(std::string_view("event: sig\ndata: ").size(),
                            event.size() - std::string_view("event: sig\ndata: ").size() - 1));
    check_body(core::http_delivered_body(7));
  }
}

// A lock, semaphore or read-write lock request of a session: decoded, checked, every reply
// rendered.
void check_session_request(const core::HttpRouteMatch& match, const HttpText& http) {
  check(match.params.size() == 1, "a keyed endpoint without its key");
  const auto decoded = core::decode_http_session_request(match.spec->endpoint, match.params.at(0),
                                                         http.body, http.session);
  if (const auto* bad = std::get_if<core::HttpBadRequest>(&decoded)) {
    check(!bad->detail.empty(), "a 400 without a detail");
    check_body(core::http_error_body("bad_request", bad->detail));
    return;
  }
  const auto& request = std::get<core::HttpSessionRequest>(decoded);
  check_decoded(*match.spec, request, http.body);
  render_all(request.request);
}

}  // namespace
}  // namespace turnstile::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace turnstile;
  using namespace turnstile::fuzz;
  const HttpText http = read_request(std::string_view(reinterpret_cast<const char*>(data), size));
  check_headers(http);
  check_lost_line(http.body);
  const core::HttpRouteMatch match = core::match_http_route(http.method, http.path);
  if (match.spec == nullptr) {
    check_unrouted(http, match);
    return 0;
  }
  check(match.spec->method == (match.head ? std::string_view("GET") : http.method),
        "an endpoint of another method");
  check(match.allow.empty(), "an Allow list beside an endpoint");
  const core::HttpEndpoint endpoint = match.spec->endpoint;
  if (endpoint == core::HttpEndpoint::kSessionCreate) {
    check_session_create(http.body);
  } else if (endpoint == core::HttpEndpoint::kSignalPublish ||
             endpoint == core::HttpEndpoint::kSignalStream) {
    check_signal_request(match, http);
  } else if (endpoint == core::HttpEndpoint::kSessionEvents) {
    check(match.params.size() == 1, "a session stream without its id");
    (void)core::is_session_handle(match.params.at(0));
  } else if (core::http_key_command(endpoint)) {
    check(match.params.size() == 1, "a key endpoint without its key");
    check(!core::http_endpoint_command(endpoint), "a key endpoint with a session's");
    check_key_request(*match.spec, http, match.params.at(0));
  } else if (core::http_endpoint_command(endpoint)) {
    check_session_request(match, http);
  }
  return 0;
}
