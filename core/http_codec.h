// The HTTP codec: the pure half of the HTTP REST API (docs/http-api.md). Given what evhttp
// parsed off the wire (a method, a path, a few headers, a body) it finds the endpoint, validates
// the input and builds the engine request; given an engine reply it builds the status code and
// the JSON body. net/http_server.cc only moves bytes, time and messages around it, and
// fuzz/fuzz_http.cc drives it with arbitrary input.
//
// Rules it keeps:
//  * Nothing here throws on any input. Client bytes are never trusted to be UTF-8: a body that is
//    not valid UTF-8 is a 400 with a detail saying where, and every body this codec writes is
//    valid UTF-8 JSON (a client byte that is not UTF-8 and ends up in a detail, a path say,
//    becomes U+FFFD).
//  * One table of endpoints (kHttpEndpoints) serves the router, the metrics labels and the
//    OpenAPI drift test (tests/core/http_codec_test.cc), so the routes served and
//    docs/openapi.json cannot drift apart unnoticed.
//
// Thread affinity: free functions and constants, safe anywhere; HttpCors is immutable once built.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "core/loss.h"
#include "core/protocol.h"

namespace turnstile::core {

enum class HttpEndpoint {
  kHealth,
  kReady,
  kMetrics,
  kOpenApi,
  kStats,
  kSessionCreate,
  kSessionDelete,
  kSessionPing,
  kLockAcquire,
  kLockRelease,
  kLockRenew,
  kLockEnqueue,
  kLockWait,
  kSemAcquire,
  kSemRelease,
  kSemRenew,
  kSemEnqueue,
  kSemWait,
  kReadAcquire,  // the read (shared) side of a read-write lock
  kReadRelease,
  kReadRenew,
  kReadEnqueue,
  kReadWait,
  kWriteAcquire,  // the write (exclusive) side
  kWriteRelease,
  kWriteRenew,
  kWriteEnqueue,
  kWriteWait,
  kReadIndex,
  kAdminVoterAdd,
  kAdminVoterRemove,
  kAdminLeaderTransfer,
  kSignalPublish,
  kSignalStream,
  // Fence checks, inspection and an operator's force-release, one per kind of resource
  // ("Fence check", "Inspecting a key", "Admin force-release" in docs/http-api.md).
  kLockCheck,
  kSemCheck,
  kReadWriteCheck,
  kLockInspect,
  kSemInspect,
  kReadWriteInspect,
  kAdminLockRelease,
  kAdminSemRelease,
  kAdminReadWriteRelease,
  kSessionEvents,  // the SSE stream of a session's lost slots ("Lost slots")
};

struct HttpEndpointSpec {
  std::string_view method;   // GET, POST or DELETE
  std::string_view pattern;  // path with {key} / {id} parameters, as in the OpenAPI document
  HttpEndpoint endpoint;
  // Bearer auth when --auth-token is set. The admin routes take the admin token instead (in the
  // same Authorization header), so they do not take this one.
  bool needs_auth;
  bool rate_limited;
};

inline constexpr std::array<HttpEndpointSpec, 44> kHttpEndpoints = {{
    {"GET", "/health", HttpEndpoint::kHealth, false, false},
    {"GET", "/ready", HttpEndpoint::kReady, false, false},
    {"GET", "/metrics", HttpEndpoint::kMetrics, true, true},
    {"GET", "/v1/openapi.json", HttpEndpoint::kOpenApi, false, true},
    {"GET", "/v1/stats", HttpEndpoint::kStats, true, true},
    {"POST", "/v1/sessions", HttpEndpoint::kSessionCreate, true, true},
    {"DELETE", "/v1/sessions/{id}", HttpEndpoint::kSessionDelete, true, true},
    {"POST", "/v1/sessions/{id}/ping", HttpEndpoint::kSessionPing, true, true},
    {"GET", "/v1/sessions/{id}/events", HttpEndpoint::kSessionEvents, true, true},
    {"POST", "/v1/locks/{key}", HttpEndpoint::kLockAcquire, true, true},
    {"POST", "/v1/locks/{key}/release", HttpEndpoint::kLockRelease, true, true},
    {"POST", "/v1/locks/{key}/renew", HttpEndpoint::kLockRenew, true, true},
    {"POST", "/v1/locks/{key}/enqueue", HttpEndpoint::kLockEnqueue, true, true},
    {"POST", "/v1/locks/{key}/wait", HttpEndpoint::kLockWait, true, true},
    {"POST", "/v1/locks/{key}/check", HttpEndpoint::kLockCheck, true, true},
    {"GET", "/v1/locks/{key}", HttpEndpoint::kLockInspect, true, true},
    {"POST", "/v1/semaphores/{key}", HttpEndpoint::kSemAcquire, true, true},
    {"POST", "/v1/semaphores/{key}/release", HttpEndpoint::kSemRelease, true, true},
    {"POST", "/v1/semaphores/{key}/renew", HttpEndpoint::kSemRenew, true, true},
    {"POST", "/v1/semaphores/{key}/enqueue", HttpEndpoint::kSemEnqueue, true, true},
    {"POST", "/v1/semaphores/{key}/wait", HttpEndpoint::kSemWait, true, true},
    {"POST", "/v1/semaphores/{key}/check", HttpEndpoint::kSemCheck, true, true},
    {"GET", "/v1/semaphores/{key}", HttpEndpoint::kSemInspect, true, true},
    {"POST", "/v1/rwlocks/{key}/read", HttpEndpoint::kReadAcquire, true, true},
    {"POST", "/v1/rwlocks/{key}/read/release", HttpEndpoint::kReadRelease, true, true},
    {"POST", "/v1/rwlocks/{key}/read/renew", HttpEndpoint::kReadRenew, true, true},
    {"POST", "/v1/rwlocks/{key}/read/enqueue", HttpEndpoint::kReadEnqueue, true, true},
    {"POST", "/v1/rwlocks/{key}/read/wait", HttpEndpoint::kReadWait, true, true},
    {"POST", "/v1/rwlocks/{key}/write", HttpEndpoint::kWriteAcquire, true, true},
    {"POST", "/v1/rwlocks/{key}/write/release", HttpEndpoint::kWriteRelease, true, true},
    {"POST", "/v1/rwlocks/{key}/write/renew", HttpEndpoint::kWriteRenew, true, true},
    {"POST", "/v1/rwlocks/{key}/write/enqueue", HttpEndpoint::kWriteEnqueue, true, true},
    {"POST", "/v1/rwlocks/{key}/write/wait", HttpEndpoint::kWriteWait, true, true},
    {"POST", "/v1/rwlocks/{key}/check", HttpEndpoint::kReadWriteCheck, true, true},
    {"GET", "/v1/rwlocks/{key}", HttpEndpoint::kReadWriteInspect, true, true},
    {"POST", "/v1/signals/{channel}", HttpEndpoint::kSignalPublish, true, true},
    {"GET", "/v1/signals", HttpEndpoint::kSignalStream, true, true},
    {"GET", "/v1/readindex", HttpEndpoint::kReadIndex, true, true},
    {"POST", "/v1/admin/voters", HttpEndpoint::kAdminVoterAdd, false, true},
    {"DELETE", "/v1/admin/voters/{id}", HttpEndpoint::kAdminVoterRemove, false, true},
    {"POST", "/v1/admin/leader/transfer", HttpEndpoint::kAdminLeaderTransfer, false, true},
    {"DELETE", "/v1/admin/locks/{key}", HttpEndpoint::kAdminLockRelease, false, true},
    {"DELETE", "/v1/admin/semaphores/{key}", HttpEndpoint::kAdminSemRelease, false, true},
    {"DELETE", "/v1/admin/rwlocks/{key}", HttpEndpoint::kAdminReadWriteRelease, false, true},
}};

inline constexpr std::size_t kHttpBodyMax = 1024 * 1024;  // bytes (reference 3.1)
inline constexpr std::string_view kHttpSessionHeader = "X-Dflockd-Session";

// The endpoint a method and path name, with the path's parameters percent-decoded; or, when
// there is none, the methods the path takes (for a 405's Allow header; empty: 404).
//
// HEAD (RFC 9110 9.3.2) takes the GET route of its path and is answered as that GET is, with the
// same status and headers, Content-Length the GET body's, but no body; `head` says so. A HEAD of
// a stream (signals, session events) checks the request as the GET does and opens no stream. A
// path that takes GET lists HEAD after it in Allow. A HEAD answered with an error (404, 405, 401,
// 429, ...) has no body either: every reply to a HEAD is headers only (http_reply_has_body).
struct HttpRouteMatch {
  const HttpEndpointSpec* spec = nullptr;
  std::vector<std::string> params;
  std::string allow;  // "GET, HEAD, POST"
  bool head = false;  // the request was a HEAD, matched to its GET route
};
HttpRouteMatch match_http_route(std::string_view method, std::string_view path);
// False for a reply to `method` HEAD: its headers go, with the Content-Length its body would have,
// and the body does not.
bool http_reply_has_body(std::string_view method);

// %XX (two hex digits) becomes the byte it names; anything else, a lone '%' included, is kept.
std::string percent_decode(std::string_view text);

// The byte offset of the first byte that is not part of a well-formed UTF-8 sequence
// (overlong forms, surrogates and code points past U+10FFFF included), or nullopt.
std::optional<std::size_t> first_invalid_utf8(std::string_view text);

// A session handle as clients see it: 32 lowercase hex digits.
bool is_session_handle(std::string_view text);

// A validation failure: 400 bad_request with this detail.
struct HttpBadRequest {
  std::string detail;
};

// The engine command a keyed endpoint (a lock, semaphore or read-write lock route, the ones with
// a {key}) sends, or nullopt for every other endpoint.
std::optional<Command> http_endpoint_command(HttpEndpoint endpoint);

// A lock, semaphore or read-write lock request of a session, decoded and validated.
struct HttpSessionRequest {
  std::string handle;  // the X-Dflockd-Session header
  Request request;
};

// Decodes a request to one of the keyed endpoints (http_endpoint_command is not nullopt): the body
// (at most kHttpBodyMax bytes, a JSON object with only the fields the endpoint takes), the key and
// the session header (nullopt when absent), checked in that order.
std::variant<HttpBadRequest, HttpSessionRequest> decode_http_session_request(
    HttpEndpoint endpoint, std::string_view key, std::string_view body,
    std::optional<std::string_view> session_header);

// The body of POST /v1/sessions: empty, `{}`, or `{"stable_ref": "<ref>"}` (1 to 64 printable
// ASCII bytes, as the TCP `stable-ref`). The ref, empty when none is given.
std::variant<HttpBadRequest, std::string> decode_http_session_create(std::string_view body);

// A status code and the body that goes with it (a JSON line, or empty).
struct HttpResponse {
  int code = 500;
  std::string body;
  // Cluster mode: the leader's client address for `503 not_leader`, sent as X-Dflockd-Leader
  // (docs/cluster.md); empty otherwise.
  std::string leader = {};
};

// The response to an engine reply (reference 3.4, 3.5) for `request`.
HttpResponse render_http_reply(const Request& request, const Reply& reply);

// {"error":E} or {"error":E,"detail":D} and a newline.
std::string http_error_body(std::string_view error, std::string_view detail = {});
// {"status":S} and a newline.
std::string http_status_body(std::string_view status);
// The body that answers a session's creation.
std::string http_session_created_body(std::string_view handle, std::int64_t idle_timeout_s);

// ---- signals (docs/http-api.md, "Signals"; dflockd v1.15-v1.16) ----------------------------
//
// What HTTP accepts is exactly what a TCP client could send: the request is checked by the TCP
// request parser (core/wire.h), so the channel, pattern, payload and group rules are the
// protocol's (docs/protocol.md, "Signals"). The payload and the group must be one line (a line
// break inside is a 400); the payload is kept as sent, the group's ASCII whitespace around it is
// dropped.

// POST /v1/signals/{channel}: the channel (the path's, percent-decoded) and the body
// {"payload":"..."} as a kSignal request (key the channel, text the payload as sent).
std::variant<HttpBadRequest, Request> decode_http_signal(std::string_view channel,
                                                         std::string_view body);
// GET /v1/signals?pattern=P[&group=G]: the query string (without the '?'; empty when none) as a
// kListen request (key the pattern, text the trimmed group, empty for none). Names and values are
// percent-decoded with '+' as a space; the first value of a name counts.
std::variant<HttpBadRequest, Request> decode_http_listen(std::string_view query);
// The answer to such a stream when the hub refuses its listen (`status` not kOk): 503
// max_subscriptions_total past --max-subscriptions-total, else 503 max_subscriptions.
HttpResponse render_http_listen_refusal(Status status);
// {"delivered":N} and a newline: the answer to a published signal.
std::string http_delivered_body(std::int64_t delivered);
// The Server-Sent Event for one push frame (`sig <channel> <payload>`, with or without its
// '\n'): `event: sig\ndata: {"channel":"..","payload":".."}\n\n`, the JSON written as Go's
// encoding/json writes it (`<`, `>`, `&`, U+2028 and U+2029 escaped as \u003c and so on, a byte
// that is not UTF-8 as \ufffd). Empty when `frame` is not a push frame.
std::string http_signal_event(std::string_view frame);

// ---- fence checks, inspection, force-release (docs/http-api.md) -----------------------------
//
// These act on a key, not for a session: they need no X-Dflockd-Session (one given is ignored)
// and the server sends each under a request session of its own, as it sends a stats request.

// The engine command an endpoint of these sends (kCheck, kInspect or kForceRelease) and the
// namespace of its key (Request::space); nullopt for every other endpoint.
struct HttpKeyCommand {
  Command command = Command::kCheck;
  Namespace space = Namespace::kLock;
};
std::optional<HttpKeyCommand> http_key_command(HttpEndpoint endpoint);

// Decodes a request to one of those endpoints into its engine request, checking the key (the
// path's, percent-decoded; the TCP key rule) first:
//  * a check's body is {"token":"..."}, the token checked as for a release (a string of 1..256
//    bytes without whitespace; one the server could not have issued is simply not held);
//  * a force-release's query (`query`, without the '?') may say `fence=N`, N a decimal 1..2^64-1:
//    only the holder with that fence is freed; without it every holder is; and `clear_delay=true`
//    (or false): also end the key's lock-delay (core/http_force_query.h). Other query names are
//    ignored; the body is ignored;
//  * an inspect takes nothing but its key (body and query are ignored).
std::variant<HttpBadRequest, Request> decode_http_key_request(HttpEndpoint endpoint,
                                                              std::string_view key,
                                                              std::string_view body,
                                                              std::string_view query);

// The response to the engine's reply to such a request:
//   check          200 {"held":true,"remaining_s":N} while the token holds the key (N the seconds
//                  left, rounded up), else 200 {"held":false}
//   inspect        200 with the engine's JSON (core/stats.h KeyInspection) and a newline; 404 with
//                  the same JSON when its "exists" is false (the key is not in use)
//   force-release  200 {"released":N}, N the holders freed; with clear_delay=true
//                  {"released":N,"delay_cleared":B}, B whether a running lock-delay was ended
// and, for all three, 503 not_leader (HttpResponse::leader) or 503 draining as for a lock call.
HttpResponse render_http_key_reply(const Request& request, const Reply& reply);

// ---- lost slots of HTTP sessions (docs/http-api.md, "Lost slots") ---------------------------

// `body` (a JSON object on one line, as this codec writes them) with "lost":[{"kind","key",
// "token","reason"}...] added, and "lost_dropped":N when `dropped` > 0 (slots the session lost
// that no longer fitted in what it remembers). `body` itself when `lost` is empty and `dropped` 0,
// or when it is not a JSON object.
std::string http_body_with_lost(std::string_view body, const std::vector<LostSlot>& lost,
                                std::uint64_t dropped);
// The Server-Sent Event of a lost slot: `event: lost\ndata: {"kind","key","token","reason"}\n\n`.
std::string http_lost_event(const LostSlot& slot);
// The last event of a session's event stream: `event: end\ndata: {"reason":"<reason>"}\n\n`.
std::string http_stream_end_event(std::string_view reason);

// ---- the admin routes (docs/http-api.md "Admin routes"; docs/cluster.md) ---------------------

// Who may use the admin routes: the Authorization header against --admin-token, compared in
// constant time (bearer_matches).
enum class AdminAccess {
  kDisabled,      // no admin token is configured (the membership routes: or no cluster mode):
                  // 403 admin_disabled
  kUnauthorized,  // a missing or wrong token: 401
  kAllowed,
};
AdminAccess admin_access(const std::optional<std::string>& admin_token,
                         std::string_view authorization_header);

// POST /v1/admin/voters: {"id": N, "raft_address": "host:port", "client_address": "host:port"}.
struct AdminVoterAdd {
  std::uint64_t id = 0;        // 1..2^63-1
  std::string raft_address;    // where the node listens for raft traffic
  std::string client_address;  // where its clients connect (error_not_leader, X-Dflockd-Leader)
};
std::variant<HttpBadRequest, AdminVoterAdd> decode_admin_voter_add(std::string_view body);
// DELETE /v1/admin/voters/{id}: the path's id, 1..2^63-1 in decimal.
std::variant<HttpBadRequest, std::uint64_t> decode_admin_voter_id(std::string_view text);

// A membership change's outcome, as the cluster node reports it.
struct AdminChangeOutcome {
  enum class Kind {
    kDone,          // 200, with the voters after the change
    kTransferred,   // 200 {"transferred":true,"leader":...}: another node leads (`leader` its
                    // address)
    kNotLeader,     // 503 not_leader (X-Dflockd-Leader: `leader` when known)
    kPending,       // 409 change_pending: one change at a time
    kUnknownId,     // 404 unknown_voter: DELETE of a node that is not in the configuration
    kRefused,       // 400 bad_request: the change makes no sense (an id already a voter, ...)
    kAddressTaken,  // 409 address_taken: another member has the new voter's raft address
    kFailed,        // 500 change_failed: raft could not make it (the detail says why)
  };
  Kind kind = Kind::kFailed;
  std::string detail = {};
  std::string leader = {};                 // kNotLeader: the leader's client address, if known
  std::vector<std::uint64_t> voters = {};  // kDone: ascending
};
HttpResponse render_admin_outcome(const AdminChangeOutcome& outcome);

// CORS (reference 3.2): the response headers a request from an Origin gets.
class HttpCors {
 public:
  // `allowed_origins`: a comma-separated list (spaces around entries ignored); "*" allows any.
  explicit HttpCors(std::string_view allowed_origins);
  bool enabled() const { return !origins_.empty(); }
  // The headers to add to the response to a request from `origin` (none when it is not allowed).
  std::vector<std::pair<std::string_view, std::string>> headers_for(std::string_view origin) const;

 private:
  std::vector<std::string> origins_;
  bool any_ = false;
};

}  // namespace turnstile::core
