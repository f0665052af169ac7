#include "core/http_codec.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <span>

#include "core/address.h"
#include "core/assert.h"
#include "core/http_force_query.h"
#include "core/http_query.h"
#include "core/http_sessions.h"
#include "core/json_error.h"
#include "core/json_text.h"
#include "core/signal_pattern.h"
#include "core/wire.h"

namespace turnstile::core {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::size_t kTokenMax = 256;  // bytes

bool is_space_byte(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// Never throws: a string that came from a client may hold bytes that are not UTF-8, and
// nlohmann's default is to throw on them; they become U+FFFD instead, as Go's encoding/json does.
std::string json_line(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
}

// Takes the next '/'-separated segment off the front of `path` (which starts after a '/').
std::string_view next_segment(std::string_view& path) {
  const std::size_t slash = path.find('/');
  const std::string_view segment = path.substr(0, slash);
  path.remove_prefix(slash == std::string_view::npos ? path.size() : slash + 1);
  return segment;
}

// Matches `path` against a route pattern, segment by segment, without allocating unless there
// are parameters; the parameters (percent-decoded) go to `params`.
bool match(std::string_view pattern, std::string_view path, std::vector<std::string>& params) {
  if (path.empty() || path.front() != '/' || pattern.empty()) return false;
  pattern.remove_prefix(1);  // every pattern starts with '/'
  path.remove_prefix(1);
  std::vector<std::string> found;
  while (true) {
    const bool pattern_last = pattern.find('/') == std::string_view::npos;
    const bool path_last = path.find('/') == std::string_view::npos;
    const std::string_view part = next_segment(pattern);
    const std::string_view segment = next_segment(path);
    if (part.starts_with("{")) {
      found.push_back(percent_decode(segment));
    } else if (part != segment) {
      return false;
    }
    if (pattern_last || path_last) {
      if (pattern_last != path_last) return false;
      break;
    }
  }
  params = std::move(found);
  return true;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::optional<HttpBadRequest> check_key(std::string_view key) {
  if (const std::optional<std::string_view> problem = key_problem(key)) {
    return HttpBadRequest{std::string(*problem)};
  }
  return std::nullopt;
}

// Reads one integer field of `body` (omitted: 0) within [min, max].
std::optional<HttpBadRequest> read_int(const Json& body, const char* field, std::int64_t min,
                                       std::int64_t max, std::int64_t& out) {
  out = 0;
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer()) {
    return HttpBadRequest{std::string("field \"") + field + "\" must be an integer"};
  }
  bool in_range = false;
  if (it->is_number_unsigned()) {
    const auto value = it->get<std::uint64_t>();
    in_range = value <= static_cast<std::uint64_t>(max) && static_cast<std::int64_t>(value) >= min;
    if (in_range) out = static_cast<std::int64_t>(value);
  } else {
    const auto value = it->get<std::int64_t>();
    in_range = value >= min && value <= max;
    if (in_range) out = value;
  }
  if (!in_range) {
    return HttpBadRequest{std::string("field \"") + field + "\" must be between " +
                          std::to_string(min) + " and " + std::to_string(max)};
  }
  return std::nullopt;
}

// The JSON object of a body whose fields are all among `allowed` (empty entries are unused), or
// why it is not one. A blank body is {} when `blank_allowed`, else not an object.
std::variant<HttpBadRequest, Json> parse_object(std::string_view body,
                                                std::span<const std::string_view> allowed,
                                                bool blank_allowed) {
  if (body.size() > kHttpBodyMax) return HttpBadRequest{"request body larger than 1 MiB"};
  if (std::all_of(body.begin(), body.end(), is_space_byte)) {
    if (!blank_allowed) return HttpBadRequest{"request body must be a JSON object"};
    return Json::object();
  }
  if (const std::optional<std::size_t> bad = first_invalid_utf8(body)) {
    return HttpBadRequest{"request body is not valid UTF-8 (byte " + std::to_string(*bad) + ")"};
  }
  // Strict: a second value after the first is an error. The parser's own message never reaches
  // the client (core/json_error.h).
  Json json = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return HttpBadRequest{describe_json_error(body)};
  if (!json.is_object()) return HttpBadRequest{"request body must be a JSON object"};
  for (const auto& field : json.items()) {
    const std::string& name = field.key();
    if (std::none_of(allowed.begin(), allowed.end(),
                     [&](std::string_view a) { return !a.empty() && name == a; })) {
      return HttpBadRequest{"unknown field \"" + name + "\""};
    }
  }
  return json;
}

// The "token" field of a release, renew or check body into request.token: a string of 1..256 bytes
// without whitespace. A token the server could not have issued (Token::parse refuses it) becomes
// nullopt, which never matches: not held.
std::optional<HttpBadRequest> read_token(const Json& body, Request& request) {
  auto it = body.find("token");
  if (it == body.end() || !it->is_string()) {
    return HttpBadRequest{"field \"token\" must be a string"};
  }
  const std::string& text = it->get_ref<const std::string&>();
  if (text.empty()) return HttpBadRequest{"token must not be empty"};
  if (text.size() > kTokenMax) return HttpBadRequest{"token longer than 256 bytes"};
  if (std::any_of(text.begin(), text.end(), [](char c) { return is_space_byte(c) || c == '\0'; })) {
    return HttpBadRequest{"token must not contain whitespace"};
  }
  request.token = Token::parse(text);
  return std::nullopt;
}

// The keyed endpoints: a row per kind of resource (named by one of its commands), a column per
// operation of kKeyedOperations; command_like() gives the command of each cell.
constexpr std::array<Operation, 5> kKeyedOperations = {Operation::kAcquire, Operation::kRelease,
                                                       Operation::kRenew, Operation::kEnqueue,
                                                       Operation::kWait};
struct KeyedRoutes {
  Command like;
  std::array<HttpEndpoint, 5> by_operation;
};
constexpr std::array<KeyedRoutes, 4> kKeyedRoutes = {{
    {Command::kLock,
     {HttpEndpoint::kLockAcquire, HttpEndpoint::kLockRelease, HttpEndpoint::kLockRenew,
      HttpEndpoint::kLockEnqueue, HttpEndpoint::kLockWait}},
    {Command::kSemLock,
     {HttpEndpoint::kSemAcquire, HttpEndpoint::kSemRelease, HttpEndpoint::kSemRenew,
      HttpEndpoint::kSemEnqueue, HttpEndpoint::kSemWait}},
    {Command::kReadLock,
     {HttpEndpoint::kReadAcquire, HttpEndpoint::kReadRelease, HttpEndpoint::kReadRenew,
      HttpEndpoint::kReadEnqueue, HttpEndpoint::kReadWait}},
    {Command::kWriteLock,
     {HttpEndpoint::kWriteAcquire, HttpEndpoint::kWriteRelease, HttpEndpoint::kWriteRenew,
      HttpEndpoint::kWriteEnqueue, HttpEndpoint::kWriteWait}},
}};

// Parses and validates the body of a keyed endpoint into the engine request for `command`. The
// fields follow from what the command does; a semaphore's acquire and enqueue also take its
// limit, which makes the enqueue's body required (a lock's and a read-write lock's may be empty).
std::optional<HttpBadRequest> parse_body(Command command, std::string_view body, Request& request) {
  request.command = command;
  const Operation operation = command_operation(command);
  const bool limited = command_namespace(command) == Namespace::kSemaphore &&
                       (operation == Operation::kAcquire || operation == Operation::kEnqueue);
  std::array<std::string_view, 3> allowed{};  // the fields this endpoint takes; unused slots empty
  switch (operation) {
    case Operation::kAcquire:
      allowed = {"acquire_timeout_s", "lease_ttl_s", limited ? "limit" : ""};
      break;
    case Operation::kRelease:
      allowed = {"token"};
      break;
    case Operation::kRenew:
      allowed = {"token", "lease_ttl_s"};
      break;
    case Operation::kEnqueue:
      allowed = {"lease_ttl_s", limited ? "limit" : ""};
      break;
    case Operation::kWait:
      allowed = {"timeout_s"};
      break;
    case Operation::kOther:
      TS_ASSERT(false);  // only the keyed endpoints come here
  }
  const bool body_optional = operation == Operation::kEnqueue && !limited;
  std::variant<HttpBadRequest, Json> parsed = parse_object(body, allowed, body_optional);
  if (auto* bad = std::get_if<HttpBadRequest>(&parsed)) return std::move(*bad);
  const Json json = std::move(std::get<Json>(parsed));
  std::int64_t value = 0;
  if (json.contains("acquire_timeout_s") || json.contains("timeout_s")) {
    const char* field = json.contains("timeout_s") ? "timeout_s" : "acquire_timeout_s";
    if (auto bad = read_int(json, field, 0, kMaxSeconds, value)) return bad;
    request.timeout_s = value;
  }
  if (auto bad = read_int(json, "lease_ttl_s", 0, kMaxSeconds, value)) return bad;
  request.lease_s = value;  // 0 = the server default
  if (limited) {
    if (auto bad = read_int(json, "limit", 0, kMaxSemaphoreLimit, value)) return bad;
    if (value <= 0) return HttpBadRequest{"field \"limit\" must be greater than 0"};
    request.limit = value;
  }
  if (operation == Operation::kRelease || operation == Operation::kRenew) {
    return read_token(json, request);
  }
  return std::nullopt;
}

}  // namespace

std::optional<Command> http_endpoint_command(HttpEndpoint endpoint) {
  for (const KeyedRoutes& routes : kKeyedRoutes) {
    for (std::size_t i = 0; i < routes.by_operation.size(); ++i) {
      if (routes.by_operation[i] == endpoint) {
        return command_like(routes.like, kKeyedOperations[i]);
      }
    }
  }
  return std::nullopt;
}

HttpRouteMatch match_http_route(std::string_view method, std::string_view path) {
  HttpRouteMatch result;
  result.head = method == "HEAD";
  const std::string_view wanted = result.head ? std::string_view("GET") : method;
  const auto allow = [&result](std::string_view name) {
    if (result.allow.find(name) != std::string::npos) return;
    if (!result.allow.empty()) result.allow += ", ";
    result.allow += name;
  };
  for (const HttpEndpointSpec& candidate : kHttpEndpoints) {
    std::vector<std::string> found;
    if (!match(candidate.pattern, path, found)) continue;
    if (candidate.method == wanted) {
      result.spec = &candidate;
      result.params = std::move(found);
      result.allow.clear();
      return result;
    }
    allow(candidate.method);
    if (candidate.method == "GET") allow("HEAD");
  }
  return result;
}

bool http_reply_has_body(std::string_view method) { return method != "HEAD"; }

std::string percent_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size()) {
      const int high = hex_value(text[i + 1]);
      const int low = hex_value(text[i + 2]);
      if (high >= 0 && low >= 0) {
        out.push_back(static_cast<char>(high * 16 + low));
        i += 2;
        continue;
      }
    }
    out.push_back(text[i]);
  }
  return out;
}

std::optional<std::size_t> first_invalid_utf8(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t length = utf8_length_at(text, i);
    if (length == 0) return i;
    i += length;
  }
  return std::nullopt;
}

bool is_session_handle(std::string_view text) {
  if (text.size() != 32) return false;
  return std::all_of(text.begin(), text.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::variant<HttpBadRequest, HttpSessionRequest> decode_http_session_request(
    HttpEndpoint endpoint, std::string_view key, std::string_view body,
    std::optional<std::string_view> session_header) {
  if (body.size() > kHttpBodyMax) return HttpBadRequest{"request body larger than 1 MiB"};
  HttpSessionRequest decoded;
  if (auto bad = check_key(key)) return *bad;
  decoded.request.key = std::string(key);
  const std::optional<Command> command = http_endpoint_command(endpoint);
  TS_ASSERT(command.has_value());  // only the keyed endpoints come here
  if (auto bad = parse_body(*command, body, decoded.request)) return *bad;
  if (!session_header) return HttpBadRequest{"missing X-Dflockd-Session header"};
  if (!is_session_handle(*session_header)) {
    return HttpBadRequest{"X-Dflockd-Session must be 32 lowercase hex characters"};
  }
  decoded.handle = std::string(*session_header);
  return decoded;
}

std::variant<HttpBadRequest, std::string> decode_http_session_create(std::string_view body) {
  constexpr std::array<std::string_view, 1> kFields = {"stable_ref"};
  std::variant<HttpBadRequest, Json> parsed = parse_object(body, kFields, /*blank_allowed=*/true);
  if (auto* bad = std::get_if<HttpBadRequest>(&parsed)) return std::move(*bad);
  const Json& json = std::get<Json>(parsed);
  auto it = json.find("stable_ref");
  if (it == json.end()) return std::string();
  if (!it->is_string()) return HttpBadRequest{"field \"stable_ref\" must be a string"};
  const std::string& ref = it->get_ref<const std::string&>();
  if (!is_valid_stable_ref(ref)) {
    return HttpBadRequest{"stable_ref must be 1 to 64 printable ASCII characters"};
  }
  return ref;
}

HttpResponse render_http_reply(const Request& request, const Reply& reply) {
  const Operation operation = command_operation(request.command);
  switch (reply.status) {
    case Status::kOk:
      if (operation == Operation::kRelease) return {204, ""};
      if (operation == Operation::kRenew) {
        return {200, json_line(Json{{"remaining_s", reply.seconds}})};
      }
      if (reply.token) {
        return {200, json_line(Json{{"status", "ok"},
                                    {"token", reply.token->to_string()},
                                    {"lease_ttl_s", reply.seconds}})};
      }
      return {200, http_status_body("ok")};
    case Status::kAcquired:
      return {200, json_line(Json{{"status", "acquired"},
                                  {"token", reply.token ? reply.token->to_string() : ""},
                                  {"lease_ttl_s", reply.seconds}})};
    case Status::kQueued:
      return {200, http_status_body("queued")};
    case Status::kTimeout:
      return {200, http_status_body("timeout")};
    case Status::kError:
      if (operation == Operation::kRelease || operation == Operation::kRenew) {
        // A read-write lock's side is part of the check: rr and rn take only read tokens, wr and
        // wn only the write token.
        std::string_view detail = "the token does not hold this key (or its lease ended)";
        if (command_namespace(request.command) == Namespace::kReadWrite) {
          detail = is_shared_command(request.command)
                       ? "the token is not a read token holding this key (or its lease ended)"
                       : "the token is not the write token holding this key (or its lease ended)";
        }
        return {404, http_error_body("not_held", detail)};
      }
      return {503, http_error_body("fence_persistence",
                                   "no fence available: the fence journal is "
                                   "not durable or the fence space is used up")};
    case Status::kErrorMaxLocks:
      return {503, http_error_body("max_locks")};
    case Status::kErrorMaxWaiters:
      return {503, http_error_body("max_waiters")};
    case Status::kErrorLimitMismatch:
      return {409, http_error_body("limit_mismatch")};
    case Status::kErrorNotEnqueued:
      return {409, http_error_body("not_enqueued")};
    case Status::kErrorAlreadyEnqueued:
      return {409, http_error_body("already_enqueued")};
    case Status::kErrorLeaseExpired:
      return {409, http_error_body("lease_expired")};
    case Status::kErrorDraining:
      return {503, http_error_body("draining")};
    case Status::kErrorNotLeader:
      return {503, http_error_body("not_leader", reply.payload), reply.payload};
    case Status::kErrorMaxSubscriptions:
      return render_http_listen_refusal(reply.status);
    case Status::kErrorAuth:
    case Status::kParked:
      break;
  }
  return {500, http_error_body("internal", status_name(reply.status))};
}

std::string http_error_body(std::string_view error, std::string_view detail) {
  Json body = {{"error", error}};
  if (!detail.empty()) body["detail"] = detail;
  return json_line(body);
}

std::string http_status_body(std::string_view status) {
  return json_line(Json{{"status", status}});
}

std::string http_session_created_body(std::string_view handle, std::int64_t idle_timeout_s) {
  return json_line(Json{{"session_id", handle}, {"idle_timeout_s", idle_timeout_s}});
}

// ---- signals ------------------------------------------------------------------------------------

namespace {

bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

std::string_view trim_ascii_space(std::string_view text) {
  while (!text.empty() && is_ascii_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_ascii_space(text.back())) text.remove_suffix(1);
  return text;
}

// The request a TCP client sends as the lines `command`, `key`, `arg`, read by the TCP request
// parser; `key` is valid and `arg` one line (the caller checked both). The parser trims `arg` as
// Go's strings.TrimSpace does; the ASCII whitespace dropped here first is a part of that.
ParseResult wire_request(std::string_view command, std::string_view key, std::string_view arg) {
  std::string text;
  text.reserve(command.size() + key.size() + arg.size() + 3);
  text.append(command).append(1, '\n').append(key).append(1, '\n').append(arg).append(1, '\n');
  RequestParser parser;
  std::optional<ParseResult> out;
  std::string_view input = text;
  while (!input.empty() && !out) {
    const std::size_t used = parser.parse(input, out);
    if (used == 0) break;
    input.remove_prefix(used);
  }
  if (!out) return ParseResult{ProtocolError::kBadArguments, Request{}};
  return std::move(*out);
}

std::optional<HttpBadRequest> check_signal_name(std::string_view what, std::string_view name,
                                                SignalNameError error) {
  if (const std::optional<std::string_view> problem = key_problem(name)) {
    return HttpBadRequest{std::string(what) + ": " + std::string(*problem)};
  }
  if (error != SignalNameError::kNone) {
    return HttpBadRequest{std::string(what) + ": " + std::string(signal_name_error_text(error))};
  }
  return std::nullopt;
}

}  // namespace

std::variant<HttpBadRequest, Request> decode_http_signal(std::string_view channel,
                                                         std::string_view body) {
  if (auto bad = check_signal_name("channel", channel, check_signal_channel(channel))) return *bad;
  constexpr std::array<std::string_view, 1> kFields = {"payload"};
  std::variant<HttpBadRequest, Json> parsed = parse_object(body, kFields, /*blank_allowed=*/false);
  if (auto* bad = std::get_if<HttpBadRequest>(&parsed)) return std::move(*bad);
  const Json& json = std::get<Json>(parsed);
  auto it = json.find("payload");
  if (it == json.end() || !it->is_string()) {
    return HttpBadRequest{"field \"payload\" must be a string"};
  }
  // The payload is kept as sent, spaces at either end included, as the TCP `signal` keeps its
  // line; a payload of nothing but white space is blank.
  const std::string_view payload = it->get_ref<const std::string&>();
  if (payload.find('\n') != std::string_view::npos) {
    return HttpBadRequest{"payload must be one line"};
  }
  ParseResult result = wire_request("signal", channel, payload);
  if (!result.ok()) {
    const std::size_t max = signal_payload_max(channel);
    if (payload.size() <= max) return HttpBadRequest{"payload must not be blank"};
    return HttpBadRequest{"payload longer than " + std::to_string(max) +
                          " bytes, the most a signal on this channel carries"};
  }
  return std::move(result.request);
}

HttpResponse render_http_listen_refusal(Status status) {
  if (status == Status::kErrorMaxSubscriptions) {
    return {503, http_error_body("max_subscriptions_total",
                                 "the server holds as many signal subscriptions as "
                                 "--max-subscriptions-total allows")};
  }
  return {503, http_error_body("max_subscriptions", "the signal hub refused the listen")};
}

std::variant<HttpBadRequest, Request> decode_http_listen(std::string_view query) {
  std::variant<HttpQueryError, std::vector<HttpQueryPair>> pairs = parse_http_query(query);
  if (const auto* bad = std::get_if<HttpQueryError>(&pairs)) return HttpBadRequest{bad->detail};
  const std::optional<std::string> pattern =
      first_query_value(std::get<std::vector<HttpQueryPair>>(pairs), "pattern");
  const std::optional<std::string> group =
      first_query_value(std::get<std::vector<HttpQueryPair>>(pairs), "group");
  if (!pattern || pattern->empty()) return HttpBadRequest{"missing query parameter \"pattern\""};
  if (auto bad = check_signal_name("pattern", *pattern, check_signal_pattern(*pattern))) {
    return *bad;
  }
  const std::string_view trimmed = trim_ascii_space(group ? *group : std::string_view());
  if (trimmed.find('\n') != std::string_view::npos) return HttpBadRequest{"group must be one line"};
  ParseResult result = wire_request("listen", *pattern, trimmed);
  if (!result.ok()) return HttpBadRequest{"group longer than 256 bytes"};
  return std::move(result.request);
}

std::string http_delivered_body(std::int64_t delivered) {
  return json_line(Json{{"delivered", delivered}});
}

std::string http_signal_event(std::string_view frame) {
  if (!frame.empty() && frame.back() == '\n') frame.remove_suffix(1);
  const std::optional<SignalFrame> signal = parse_signal_frame(frame);
  if (!signal) return {};
  std::string event;
  event.reserve(frame.size() + 48);
  event += "event: sig\ndata: {\"channel\":";
  append_json_string(event, signal->channel);
  event += ",\"payload\":";
  append_json_string(event, signal->payload);
  event += "}\n\n";
  return event;
}

// ---- fence checks, inspection, force-release ---------------------------------------------------

namespace {

struct KeyRoute {
  HttpEndpoint endpoint;
  Command command;
  Namespace space;
};
constexpr std::array<KeyRoute, 9> kKeyRoutes = {{
    {HttpEndpoint::kLockCheck, Command::kCheck, Namespace::kLock},
    {HttpEndpoint::kSemCheck, Command::kCheck, Namespace::kSemaphore},
    {HttpEndpoint::kReadWriteCheck, Command::kCheck, Namespace::kReadWrite},
    {HttpEndpoint::kLockInspect, Command::kInspect, Namespace::kLock},
    {HttpEndpoint::kSemInspect, Command::kInspect, Namespace::kSemaphore},
    {HttpEndpoint::kReadWriteInspect, Command::kInspect, Namespace::kReadWrite},
    {HttpEndpoint::kAdminLockRelease, Command::kForceRelease, Namespace::kLock},
    {HttpEndpoint::kAdminSemRelease, Command::kForceRelease, Namespace::kSemaphore},
    {HttpEndpoint::kAdminReadWriteRelease, Command::kForceRelease, Namespace::kReadWrite},
}};

}  // namespace

std::optional<HttpKeyCommand> http_key_command(HttpEndpoint endpoint) {
  for (const KeyRoute& route : kKeyRoutes) {
    if (route.endpoint == endpoint) return HttpKeyCommand{route.command, route.space};
  }
  return std::nullopt;
}

std::variant<HttpBadRequest, Request> decode_http_key_request(HttpEndpoint endpoint,
                                                              std::string_view key,
                                                              std::string_view body,
                                                              std::string_view query) {
  const std::optional<HttpKeyCommand> command = http_key_command(endpoint);
  TS_ASSERT(command.has_value());  // only these endpoints come here
  if (body.size() > kHttpBodyMax) return HttpBadRequest{"request body larger than 1 MiB"};
  if (auto bad = check_key(key)) return *bad;
  Request request;
  request.command = command->command;
  request.space = command->space;
  request.key = std::string(key);
  switch (command->command) {
    case Command::kCheck: {
      constexpr std::array<std::string_view, 1> kFields = {"token"};
      std::variant<HttpBadRequest, Json> parsed =
          parse_object(body, kFields, /*blank_allowed=*/false);
      if (auto* bad = std::get_if<HttpBadRequest>(&parsed)) return std::move(*bad);
      if (auto bad = read_token(std::get<Json>(parsed), request)) return *bad;
      break;
    }
    case Command::kForceRelease: {
      std::variant<HttpQueryError, ForceReleaseQuery> parsed = parse_force_release_query(query);
      if (auto* bad = std::get_if<HttpQueryError>(&parsed)) {
        return HttpBadRequest{std::move(bad->detail)};
      }
      request.fence = std::get<ForceReleaseQuery>(parsed).fence;
      request.clear_delay = std::get<ForceReleaseQuery>(parsed).clear_delay;
      break;
    }
    default:
      break;  // an inspect: the key is all it takes
  }
  return request;
}

HttpResponse render_http_key_reply(const Request& request, const Reply& reply) {
  switch (reply.status) {
    case Status::kErrorNotLeader:
      return {503, http_error_body("not_leader", reply.payload), reply.payload};
    case Status::kErrorDraining:
      return {503, http_error_body("draining")};
    default:
      break;
  }
  switch (request.command) {
    case Command::kCheck:
      if (reply.status == Status::kOk && reply.seconds >= 0) {
        return {200, json_line(Json{{"held", true}, {"remaining_s", reply.seconds}})};
      }
      if (reply.status == Status::kErrorLeaseExpired) {
        return {200, json_line(Json{{"held", false}})};
      }
      break;
    case Command::kInspect: {
      if (reply.status != Status::kOk) break;
      const Json inspection = Json::parse(reply.payload.begin(), reply.payload.end(), nullptr,
                                          /*allow_exceptions=*/false);
      if (!inspection.is_object()) break;
      auto exists = inspection.find("exists");
      const bool found = exists != inspection.end() && exists->is_boolean() && exists->get<bool>();
      return {found ? 200 : 404, json_line(inspection)};
    }
    case Command::kForceRelease:
      if (reply.status == Status::kOk && reply.seconds >= 0) {
        Json body{{"released", reply.seconds}};
        // Asked to clear the lock-delay: whether one was running (and now is not).
        if (request.clear_delay) body["delay_cleared"] = reply.delay_cleared;
        return {200, json_line(body)};
      }
      break;
    default:
      break;
  }
  return {500, http_error_body("internal", status_name(reply.status))};
}

// ---- lost slots ---------------------------------------------------------------------------------

namespace {

Json lost_json(const LostSlot& slot) {
  return Json{{"kind", namespace_word(slot.ns)},
              {"key", slot.key},
              {"token", slot.token.to_string()},
              {"reason", loss_reason_name(slot.reason)}};
}

}  // namespace

std::string http_body_with_lost(std::string_view body, const std::vector<LostSlot>& lost,
                                std::uint64_t dropped) {
  if (lost.empty() && dropped == 0) return std::string(body);
  Json json = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return std::string(body);
  Json slots = Json::array();
  for (const LostSlot& slot : lost) slots.push_back(lost_json(slot));
  json["lost"] = std::move(slots);
  if (dropped > 0) json["lost_dropped"] = dropped;
  return json_line(json);
}

std::string http_lost_event(const LostSlot& slot) {
  return "event: lost\ndata: " + json_line(lost_json(slot)) + "\n";
}

std::string http_stream_end_event(std::string_view reason) {
  return "event: end\ndata: " + json_line(Json{{"reason", reason}}) + "\n";
}

// ---- the admin routes ---------------------------------------------------------------------------

namespace {

constexpr std::uint64_t kMaxNodeId = (std::uint64_t{1} << 63) - 1;
// A voter's raft address is stored in raft's configuration as "raft@client" (docs/cluster.md),
// and a node sends its own raft address in a 256-byte handshake field: both stay well below.
constexpr std::size_t kAddressMax = 120;  // bytes

// An address of the grammar of core/address.h that other nodes can reach: never a wildcard.
// '@' and ',' never appear (the grammar has no place for them): they separate the parts of a
// stored address and of --cluster-peers.
std::optional<std::string> address_problem(std::string_view address) {
  if (address.empty() || address.size() > kAddressMax) return "must be 1 to 120 bytes";
  auto parsed = parse_host_port(address);
  if (auto* why = std::get_if<std::string>(&parsed)) return "is not an address: " + *why;
  if (std::get<HostPort>(parsed).is_wildcard()) return "has a wildcard host: no node can reach it";
  return std::nullopt;
}

}  // namespace

AdminAccess admin_access(const std::optional<std::string>& admin_token,
                         std::string_view authorization_header) {
  if (!admin_token || admin_token->empty()) return AdminAccess::kDisabled;
  return bearer_matches(authorization_header, *admin_token) ? AdminAccess::kAllowed
                                                            : AdminAccess::kUnauthorized;
}

std::variant<HttpBadRequest, AdminVoterAdd> decode_admin_voter_add(std::string_view body) {
  constexpr std::array<std::string_view, 3> kFields = {"id", "raft_address", "client_address"};
  std::variant<HttpBadRequest, Json> parsed = parse_object(body, kFields, /*blank_allowed=*/false);
  if (auto* bad = std::get_if<HttpBadRequest>(&parsed)) return std::move(*bad);
  const Json json = std::move(std::get<Json>(parsed));
  AdminVoterAdd add;
  auto id = json.find("id");
  if (id == json.end() || !id->is_number_unsigned() || id->get<std::uint64_t>() == 0 ||
      id->get<std::uint64_t>() > kMaxNodeId) {
    return HttpBadRequest{"field \"id\" must be an integer between 1 and 2^63-1"};
  }
  add.id = id->get<std::uint64_t>();
  for (const char* name : {"raft_address", "client_address"}) {
    auto it = json.find(name);
    if (it == json.end() || !it->is_string()) {
      return HttpBadRequest{std::string("field \"") + name + "\" must be a string host:port"};
    }
    const std::string& text = it->get_ref<const std::string&>();
    if (const std::optional<std::string> problem = address_problem(text)) {
      return HttpBadRequest{std::string("field \"") + name + "\" " + *problem};
    }
    (std::string_view(name) == "raft_address" ? add.raft_address : add.client_address) = text;
  }
  if (add.raft_address == add.client_address) {
    return HttpBadRequest{"raft_address and client_address must differ"};
  }
  return add;
}

std::variant<HttpBadRequest, std::uint64_t> decode_admin_voter_id(std::string_view text) {
  const HttpBadRequest bad{"the voter id must be a decimal integer between 1 and 2^63-1"};
  if (text.empty() || text.size() > 19) return bad;
  std::uint64_t id = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return bad;
    id = id * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (id == 0 || id > kMaxNodeId) return bad;
  return id;
}

HttpResponse render_admin_outcome(const AdminChangeOutcome& outcome) {
  switch (outcome.kind) {
    case AdminChangeOutcome::Kind::kDone:
      return {200, json_line(Json{{"voters", outcome.voters}})};
    case AdminChangeOutcome::Kind::kTransferred:
      return {200, json_line(Json{{"transferred", true}, {"leader", outcome.leader}})};
    case AdminChangeOutcome::Kind::kNotLeader:
      return {503, http_error_body("not_leader", outcome.leader), outcome.leader};
    case AdminChangeOutcome::Kind::kPending:
      return {409, http_error_body("change_pending", outcome.detail)};
    case AdminChangeOutcome::Kind::kUnknownId:
      return {404, http_error_body("unknown_voter", outcome.detail)};
    case AdminChangeOutcome::Kind::kRefused:
      return {400, http_error_body("bad_request", outcome.detail)};
    case AdminChangeOutcome::Kind::kAddressTaken:
      return {409, http_error_body("address_taken", outcome.detail)};
    case AdminChangeOutcome::Kind::kFailed:
      break;
  }
  return {500, http_error_body("change_failed", outcome.detail)};
}

HttpCors::HttpCors(std::string_view allowed_origins) {
  while (!allowed_origins.empty()) {
    const std::size_t comma = allowed_origins.find(',');
    std::string_view origin = allowed_origins.substr(0, comma);
    while (!origin.empty() && is_space_byte(origin.front())) origin.remove_prefix(1);
    while (!origin.empty() && is_space_byte(origin.back())) origin.remove_suffix(1);
    if (origin == "*") any_ = true;
    if (!origin.empty()) origins_.emplace_back(origin);
    if (comma == std::string_view::npos) break;
    allowed_origins.remove_prefix(comma + 1);
  }
}

std::vector<std::pair<std::string_view, std::string>> HttpCors::headers_for(
    std::string_view origin) const {
  std::vector<std::pair<std::string_view, std::string>> headers;
  const bool allowed =
      any_ || std::find(origins_.begin(), origins_.end(), origin) != origins_.end();
  if (!allowed) return headers;
  if (any_) {
    headers.emplace_back("Access-Control-Allow-Origin", "*");
  } else {
    headers.emplace_back("Access-Control-Allow-Origin", std::string(origin));
    headers.emplace_back("Vary", "Origin");
  }
  headers.emplace_back("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
  headers.emplace_back("Access-Control-Allow-Headers",
                       "Authorization, Content-Type, X-Dflockd-Session");
  headers.emplace_back("Access-Control-Max-Age", "300");
  return headers;
}

}  // namespace turnstile::core
