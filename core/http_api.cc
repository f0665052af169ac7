#include "core/http_api.h"

#include <utility>
#include <variant>

#include "core/assert.h"
#include "core/canary.h"
#include "core/http_sessions.h"

namespace turnstile::core {

namespace {

// host:port as a log line names a peer ([v6]:port).
std::string peer_name(const HttpApiRequest& request) {
  const std::string& address = request.peer_address;
  const std::string host = address.find(':') != std::string::npos ? "[" + address + "]" : address;
  return host + ":" + std::to_string(request.peer_port);
}

const char* kBadHandle = "session id must be 32 lowercase hex characters";

}  // namespace

HttpApi::HttpApi(const HttpApiConfig& config, HttpSessionRouter& desk, Router& router,
                 HttpApiHost& host, RandomSource& random)
    : desk_(desk),
      router_(router),
      host_(host),
      random_(random),
      config_(config),
      cors_(config.cors_allowed_origins) {}

// ---- responses ---------------------------------------------------------------------------------

void HttpApi::respond(HttpTicket ticket, HttpResponse response,
                      std::vector<std::pair<std::string, std::string>> headers,
                      std::string_view content_type) {
  auto it = open_.find(ticket);
  if (it == open_.end()) return;  // its client left
  Open& open = it->second;
  HttpApiResponse out;
  out.ticket = ticket;
  out.content_type = content_type;
  out.route = open.route;
  out.method = open.method;
  out.started = open.started;
  out.headers = std::move(open.cors);
  for (auto& header : headers) out.headers.push_back(std::move(header));
  if (!response.leader.empty()) out.headers.emplace_back("X-Dflockd-Leader", response.leader);
  out.response = std::move(response);
  open_.erase(it);
  responses_.push_back(std::move(out));
}

void HttpApi::respond_error(HttpTicket ticket, int code, std::string_view error,
                            std::string_view detail) {
  respond(ticket, HttpResponse{code, http_error_body(error, detail)});
}

std::vector<HttpApiResponse> HttpApi::take_responses() {
  for (HttpReply& reply : desk_.take_replies()) {
    if (open_.count(reply.ticket) != 0) {
      respond(reply.ticket, std::move(reply.outcome));
    } else {
      HttpApiResponse watch;  // a watch's refusal: the driver's stream takes it
      watch.ticket = reply.ticket;
      if (!reply.outcome.leader.empty()) {
        watch.headers.emplace_back("X-Dflockd-Leader", reply.outcome.leader);
      }
      watch.response = std::move(reply.outcome);
      responses_.push_back(std::move(watch));
    }
  }
  return std::exchange(responses_, {});
}

// ---- admission ---------------------------------------------------------------------------------

std::optional<HttpApi::StreamRoute> HttpApi::handle(Instant now, const HttpApiRequest& request) {
  TS_ASSERT(open_.count(request.ticket) == 0);
  Open& open = open_[request.ticket];
  open.method = request.method;
  open.started = now;
  std::optional<HttpRouteMatch> matched = admit(now, request);
  if (!matched) return std::nullopt;
  return dispatch(now, request, std::move(*matched));
}

std::optional<HttpRouteMatch> HttpApi::admit(Instant now, const HttpApiRequest& request) {
  const HttpTicket ticket = request.ticket;
  Open& open = open_.at(ticket);
  // CORS (reference 3.2): before everything else.
  if (cors_.enabled() && request.origin) {
    for (auto& [name, value] : cors_.headers_for(*request.origin)) {
      open.cors.emplace_back(std::string(name), std::move(value));
    }
    if (request.method == "OPTIONS" && request.preflight) {
      open.route = "preflight";
      respond(ticket, HttpResponse{204, ""});
      return std::nullopt;
    }
  }
  // Route lookup: 404 for an unknown path, 405 (with Allow) for a known path and another method.
  HttpRouteMatch matched = match_http_route(request.method, request.path);
  const HttpEndpointSpec* spec = matched.spec;
  open.route = spec != nullptr ? spec->pattern : "unmatched";
  // Rate limit, then auth, then the router's 404/405 (reference 3.1's handler order).
  const bool exempt = spec != nullptr && !spec->rate_limited;
  if (!exempt && !host_.rate_allow(now, request.peer_address)) {
    respond_error(ticket, 429, "rate_limited");
    return std::nullopt;
  }
  const bool needs_auth = spec == nullptr || spec->needs_auth;
  if (config_.auth_token && needs_auth &&
      !bearer_matches(request.authorization.value_or(""), *config_.auth_token)) {
    unauthorized_later(now, request);
    return std::nullopt;
  }
  if (spec == nullptr) {
    if (!matched.allow.empty()) {
      respond(ticket,
              HttpResponse{405, http_error_body("method_not_allowed", std::string(request.method) +
                                                                          " is not allowed on " +
                                                                          request.path)},
              {{"Allow", matched.allow}});
    } else {
      respond_error(ticket, 404, "not_found", "no route for " + request.path);
    }
    return std::nullopt;
  }
  return matched;
}

void HttpApi::unauthorized_later(Instant now, const HttpApiRequest& request) {
  Open& open = open_.at(request.ticket);
  host_.auth_failed(request, open.route);
  if constexpr (canary::kHttpNoAuthDelay) {  // CANARY (core/canary.h): answered at once
    respond_error(request.ticket, 401, "unauthorized");
    return;
  }
  delayed_[request.ticket] = now + kAuthFailureDelay;
}

void HttpApi::tick(Instant now) {
  for (auto it = delayed_.begin(); it != delayed_.end();) {
    if (it->second > now) {
      ++it;
      continue;
    }
    const HttpTicket ticket = it->first;
    it = delayed_.erase(it);
    respond_error(ticket, 401, "unauthorized");
  }
}

std::optional<Instant> HttpApi::next_deadline() const {
  std::optional<Instant> next;
  for (const auto& [ticket, due] : delayed_) {
    if (!next || due < *next) next = due;
  }
  return next;
}

// ---- routes ------------------------------------------------------------------------------------

std::optional<HttpApi::StreamRoute> HttpApi::dispatch(Instant now, const HttpApiRequest& request,
                                                      HttpRouteMatch matched) {
  const HttpEndpointSpec& spec = *matched.spec;
  const HttpTicket ticket = request.ticket;
  switch (spec.endpoint) {
    case HttpEndpoint::kHealth:
    case HttpEndpoint::kReady:
    case HttpEndpoint::kOpenApi:
      reply_probe(ticket, spec.endpoint);
      return std::nullopt;
    case HttpEndpoint::kStats:
    case HttpEndpoint::kMetrics: {
      Request stats;
      stats.command = Command::kStats;
      run_one_shot(now, ticket,
                   spec.endpoint == HttpEndpoint::kStats ? Kind::kStats : Kind::kMetrics, stats);
      return std::nullopt;
    }
    case HttpEndpoint::kReadIndex: {
      // A linearizable read point: a barrier through the log, answered once it is applied.
      if (!host_.cluster_mode()) {
        respond_error(ticket, 404, "cluster_disabled", "readindex needs cluster mode");
        return std::nullopt;
      }
      Request barrier;
      barrier.command = Command::kBarrier;
      run_one_shot(now, ticket, Kind::kReadIndex, barrier);
      return std::nullopt;
    }
    case HttpEndpoint::kSignalPublish: {
      std::variant<HttpBadRequest, Request> decoded =
          decode_http_signal(matched.params.at(0), request.body);
      if (const auto* bad = std::get_if<HttpBadRequest>(&decoded)) {
        respond_error(ticket, 400, "bad_request", bad->detail);
      } else if (draining_) {
        respond_error(ticket, 503, "draining");
      } else {
        run_one_shot(now, ticket, Kind::kSignal, std::get<Request>(decoded));
      }
      return std::nullopt;
    }
    case HttpEndpoint::kSignalStream:
    case HttpEndpoint::kSessionEvents: {
      StreamRoute stream{matched.spec, std::move(matched.params), std::move(open_.at(ticket).cors)};
      open_.erase(ticket);  // the driver's stream answers it
      return stream;
    }
    case HttpEndpoint::kLockCheck:
    case HttpEndpoint::kSemCheck:
    case HttpEndpoint::kReadWriteCheck:
    case HttpEndpoint::kLockInspect:
    case HttpEndpoint::kSemInspect:
    case HttpEndpoint::kReadWriteInspect:
      run_key_request(now, request, spec, matched.params.at(0), {});
      return std::nullopt;
    case HttpEndpoint::kAdminVoterAdd:
    case HttpEndpoint::kAdminVoterRemove:
    case HttpEndpoint::kAdminLeaderTransfer:
    case HttpEndpoint::kAdminLockRelease:
    case HttpEndpoint::kAdminSemRelease:
    case HttpEndpoint::kAdminReadWriteRelease:
      run_admin(now, request, spec, matched.params);
      return std::nullopt;
    default:
      run_session_request(now, request, spec,
                          matched.params.empty() ? std::string() : matched.params.at(0));
      return std::nullopt;
  }
}

void HttpApi::reply_probe(HttpTicket ticket, HttpEndpoint endpoint) {
  if (endpoint == HttpEndpoint::kOpenApi) {
    respond(ticket, HttpResponse{200, std::string(host_.openapi_json())},
            {{"Cache-Control", "public, max-age=60"}});
    return;
  }
  std::string_view status = "ok";
  if (endpoint == HttpEndpoint::kHealth) {
    if (host_.starting()) status = "starting";
  } else if (draining_) {
    status = "draining";
  } else if (!ready()) {
    status = "no_leader";
  }
  respond(ticket, HttpResponse{status == "ok" ? 200 : 503, http_status_body(status)});
}

void HttpApi::run_one_shot(Instant now, HttpTicket ticket, Kind kind, const Request& request) {
  Open& open = open_.at(ticket);
  open.kind = kind;
  open.session = router_.new_session_id();
  one_shots_[open.session.value] = ticket;
  router_.submit(now, open.session, request);
}

void HttpApi::run_session_request(Instant now, const HttpApiRequest& request,
                                  const HttpEndpointSpec& spec, const std::string& param) {
  const HttpTicket ticket = request.ticket;
  switch (spec.endpoint) {
    case HttpEndpoint::kSessionCreate: {
      std::variant<HttpBadRequest, std::string> stable_ref =
          decode_http_session_create(request.body);
      if (const auto* bad = std::get_if<HttpBadRequest>(&stable_ref)) {
        respond_error(ticket, 400, "bad_request", bad->detail);
        return;
      }
      respond(ticket,
              desk_.create(now, random_, request.peer_address, std::get<std::string>(stable_ref)));
      return;
    }
    case HttpEndpoint::kSessionDelete:
    case HttpEndpoint::kSessionPing:
      if (!is_session_handle(param)) {
        respond_error(ticket, 400, "bad_request", kBadHandle);
        return;
      }
      open_.at(ticket).kind = Kind::kSession;
      if (spec.endpoint == HttpEndpoint::kSessionDelete) {
        desk_.remove(now, ticket, param);
      } else {
        desk_.ping(now, ticket, param);
      }
      return;
    default:
      break;
  }
  auto decoded = decode_http_session_request(
      spec.endpoint, param, request.body,
      request.session ? std::optional<std::string_view>(*request.session) : std::nullopt);
  if (const auto* bad = std::get_if<HttpBadRequest>(&decoded)) {
    respond_error(ticket, 400, "bad_request", bad->detail);
    return;
  }
  const auto& [handle, engine_request] = std::get<HttpSessionRequest>(decoded);
  open_.at(ticket).kind = Kind::kSession;
  desk_.submit(now, ticket, handle, engine_request);
}

void HttpApi::run_key_request(Instant now, const HttpApiRequest& request,
                              const HttpEndpointSpec& spec, const std::string& key,
                              std::string admin_peer) {
  const HttpTicket ticket = request.ticket;
  std::variant<HttpBadRequest, Request> decoded =
      decode_http_key_request(spec.endpoint, key, request.body, request.query);
  if (const auto* bad = std::get_if<HttpBadRequest>(&decoded)) {
    respond_error(ticket, 400, "bad_request", bad->detail);
    return;
  }
  Open& open = open_.at(ticket);
  open.kind = Kind::kKey;
  open.session = router_.new_session_id();
  const Request& engine_request = std::get<Request>(decoded);
  key_requests_[open.session.value] = KeyRequest{ticket, engine_request, std::move(admin_peer)};
  router_.submit(now, open.session, engine_request);
}

void HttpApi::run_admin(Instant now, const HttpApiRequest& request, const HttpEndpointSpec& spec,
                        const std::vector<std::string>& params) {
  const HttpTicket ticket = request.ticket;
  // A force-release works on one node too; the membership routes need cluster mode.
  const bool force_release = http_key_command(spec.endpoint).has_value();
  const AdminAccess access =
      !host_.cluster_mode() && !force_release
          ? AdminAccess::kDisabled
          : admin_access(config_.admin_token, request.authorization.value_or(""));
  if (access == AdminAccess::kDisabled) {
    respond_error(ticket, 403, "admin_disabled",
                  force_release ? "the admin routes are off: they need --admin-token"
                                : "the membership routes are off: they need cluster mode and "
                                  "--admin-token");
    return;
  }
  if (access == AdminAccess::kUnauthorized) {
    unauthorized_later(now, request);
    return;
  }
  if (force_release) {
    run_key_request(now, request, spec, params.at(0), peer_name(request));
    return;
  }
  MembershipChange change;
  if (spec.endpoint == HttpEndpoint::kAdminLeaderTransfer) {
    change.transfer = true;  // no body to read: the leader picks the most up-to-date voter
  } else if (spec.endpoint == HttpEndpoint::kAdminVoterAdd) {
    auto decoded = decode_admin_voter_add(request.body);
    if (const auto* bad = std::get_if<HttpBadRequest>(&decoded)) {
      respond_error(ticket, 400, "bad_request", bad->detail);
      return;
    }
    change.add = std::get<AdminVoterAdd>(decoded);
  } else {
    auto decoded = decode_admin_voter_id(params.at(0));
    if (const auto* bad = std::get_if<HttpBadRequest>(&decoded)) {
      respond_error(ticket, 400, "bad_request", bad->detail);
      return;
    }
    change.remove_id = std::get<std::uint64_t>(decoded);
  }
  open_.at(ticket).kind = Kind::kAdmin;
  host_.change_membership(ticket, change);
}

void HttpApi::admin_done(HttpTicket ticket, const AdminChangeOutcome& outcome) {
  respond(ticket, render_admin_outcome(outcome));
}

// ---- engine outcomes ---------------------------------------------------------------------------

bool HttpApi::owns(SessionId session) const {
  return desk_.owns(session) || one_shots_.count(session.value) != 0 ||
         key_requests_.count(session.value) != 0;
}

void HttpApi::on_session_event(Instant now, const SessionEvent& event) {
  if (auto key = key_requests_.find(event.session.value); key != key_requests_.end()) {
    if (event.kind != SessionEvent::Kind::kReply) return;  // never parks, holds nothing
    KeyRequest done = std::move(key->second);
    key_requests_.erase(key);
    finish_key(done, event.reply);
    return;
  }
  auto it = one_shots_.find(event.session.value);
  if (it == one_shots_.end()) {
    // A stats event whose client left; every other event is a session's.
    if (event.kind != SessionEvent::Kind::kStats) desk_.on_session_event(now, event);
    return;
  }
  const HttpTicket ticket = it->second;
  one_shots_.erase(it);
  auto open = open_.find(ticket);
  TS_ASSERT(open != open_.end());
  finish_one_shot(ticket, open->second.kind, event);
}

void HttpApi::finish_one_shot(HttpTicket ticket, Kind kind, const SessionEvent& event) {
  const Reply& reply = event.reply;
  switch (kind) {
    case Kind::kReadIndex:
      if (reply.status == Status::kOk) {
        respond(ticket, HttpResponse{200, http_status_body("ok")});
      } else if (reply.status == Status::kErrorNotLeader) {
        respond(ticket,
                HttpResponse{503, http_error_body("not_leader", reply.payload), reply.payload});
      } else {
        respond_error(ticket, 500, "internal", "the barrier was not applied");
      }
      return;
    case Kind::kSignal:
      if (reply.status == Status::kOk) {
        respond(ticket, HttpResponse{200, http_delivered_body(reply.seconds)});
      } else {
        respond_error(ticket, 500, "internal", "the signal could not be published");
      }
      return;
    case Kind::kStats:
      respond(ticket,
              HttpResponse{200, encode_stats_json(host_.connections(), event.stats) + "\n"});
      return;
    case Kind::kMetrics:
      // The text is rendered before the driver counts this request: a scrape is not in its own
      // text, only in the next one (as Prometheus's promhttp counts its handler after it served).
      respond(ticket, HttpResponse{200, host_.metrics_text(event.stats, ready())}, {},
              kHttpMetricsType);
      return;
    default:
      TS_ASSERT(false);
  }
}

void HttpApi::finish_key(KeyRequest& key, const Reply& reply) {
  if (!key.admin_peer.empty()) host_.force_released(key.admin_peer, key.request, reply);
  if (key.ticket == 0) return;  // its client left
  respond(key.ticket, render_http_key_reply(key.request, reply));
}

void HttpApi::client_left(Instant now, HttpTicket ticket) {
  auto it = open_.find(ticket);
  if (it == open_.end()) return;
  const Open open = std::move(it->second);
  open_.erase(it);
  delayed_.erase(ticket);
  switch (open.kind) {
    case Kind::kSession:
      desk_.abandon(now, ticket);
      break;
    case Kind::kStats:
    case Kind::kMetrics:
    case Kind::kReadIndex:
    case Kind::kSignal:
      one_shots_.erase(open.session.value);
      break;
    case Kind::kKey:
      // The engine's reply still comes (and a force-release is still reported); it answers
      // nobody.
      if (auto key = key_requests_.find(open.session.value); key != key_requests_.end()) {
        key->second.ticket = 0;
      }
      break;
    case Kind::kImmediate:
    case Kind::kAdmin:
      break;  // admin_done finds nothing to answer
  }
}

void HttpApi::begin_drain() {
  draining_ = true;
  desk_.begin_drain();
}

}  // namespace turnstile::core
