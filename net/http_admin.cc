// HttpServer's admin routes and key requests (docs/http-api.md, "Admin" and "Fence checks"):
// the admin token check with its delay, voter changes and leader transfer on the cluster node,
// and the requests on one key that go to its engine under a request session of their own
// (check, inspect, force-release), with the log line of every force-release.
#include <event2/keyvalq_struct.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/http_codec.h"
#include "net/clock.h"
#include "net/guard.h"
#include "net/http_server.h"
#include "net/http_server_internal.h"
#include "net/log.h"

namespace turnstile::net {

void HttpServer::reply_unauthorized_later(evhttp_request* request, std::string_view route,
                                          std::string_view method, core::Instant started) {
  shared_.auth_failures.fetch_add(1, std::memory_order_relaxed);
  if (const auto suppressed = auth_failure_log_limit().admit(started.ns())) {
    const std::string peer = peer_of(evhttp_request_get_connection(request)).address;
    log_event(
        LogLevel::kWarn, "auth_failure",
        "HTTP: " + std::string(method) + " " + std::string(route) + ": unauthorized from " + peer,
        {{"transport", "http"},
         {"peer", peer},
         {"route", route},
         {"method", method},
         {"suppressed", *suppressed}});
  }
  Pending pending = Pending::of(Pending::Kind::kAuthDelay, method, route, started);
  const std::uint64_t ticket = add_pending(request, std::move(pending));
  Pending& added = *pending_[ticket];
  added.timer_arg = std::make_unique<std::pair<HttpServer*, std::uint64_t>>(this, ticket);
  event* timer = evtimer_new(host_.base(), &HttpServer::on_auth_delay, added.timer_arg.get());
  added.timer = timer;
  const timeval delay = to_timeval(kAuthFailureDelay);
  evtimer_add(timer, &delay);
}

void HttpServer::handle_admin(evhttp_request* request, const core::HttpEndpointSpec& spec,
                              const std::vector<std::string>& params, std::string_view method,
                              core::Instant started) {
  if (!admin_allowed(request, spec, method, started)) return;
  if (core::http_key_command(spec.endpoint)) {
    // A force-release, logged with who asked.
    const HttpPeer peer = peer_of(evhttp_request_get_connection(request));
    const std::string host =
        peer.address.find(':') != std::string::npos ? "[" + peer.address + "]" : peer.address;
    run_key_request(request, spec, params.at(0), method, started,
                    host + ":" + std::to_string(peer.port));
    return;
  }
  std::optional<MembershipChange> change =
      decode_membership_change(request, spec, params, method, started);
  if (!change) return;  // answered 400
  Pending pending = Pending::of(Pending::Kind::kAdmin, method, spec.pattern, started);
  const std::uint64_t ticket = add_pending(request, std::move(pending));
  // The answer comes on the raft thread (or at once): it is brought back to this shard's thread.
  // The server outlives the raft node (Server::run stops it before the shards are destroyed).
  Shard* host = &host_;
  run_membership_change(*change, [this, host, ticket](core::AdminChangeOutcome outcome) {
    host->post(message::Run{[this, ticket, outcome = std::move(outcome)] {
      guarded("HTTP admin reply", [&] {
        finish_admin(ticket, outcome);
        flush();
        host_.settle();
      });
    }});
  });
}

bool HttpServer::admin_allowed(evhttp_request* request, const core::HttpEndpointSpec& spec,
                               std::string_view method, core::Instant started) {
  const char* header =
      evhttp_find_header(evhttp_request_get_input_headers(request), "Authorization");
  // A force-release works on one node too; the membership routes need cluster mode.
  const bool force_release = core::http_key_command(spec.endpoint).has_value();
  const core::AdminAccess access =
      shared_.cluster == nullptr && !force_release
          ? core::AdminAccess::kDisabled
          : core::admin_access(config_.cluster.admin_token, header != nullptr ? header : "");
  if (access == core::AdminAccess::kDisabled) {
    reply_error(request, 403, "admin_disabled",
                force_release ? "the admin routes are off: they need --admin-token"
                              : "the membership routes are off: they need cluster mode and "
                                "--admin-token",
                spec.pattern, method, started);
    return false;
  }
  if (access == core::AdminAccess::kUnauthorized) {
    reply_unauthorized_later(request, spec.pattern, method, started);
    return false;
  }
  return true;
}

std::optional<HttpServer::MembershipChange> HttpServer::decode_membership_change(
    evhttp_request* request, const core::HttpEndpointSpec& spec,
    const std::vector<std::string>& params, std::string_view method, core::Instant started) {
  MembershipChange change;
  if (spec.endpoint == core::HttpEndpoint::kAdminLeaderTransfer) {
    change.transfer = true;  // no body to read: the leader picks the most up-to-date voter
    return change;
  }
  std::optional<core::HttpBadRequest> bad;
  if (spec.endpoint == core::HttpEndpoint::kAdminVoterAdd) {
    auto decoded = core::decode_admin_voter_add(request_body(request));
    if (const auto* refused = std::get_if<core::HttpBadRequest>(&decoded)) {
      bad = *refused;
    } else {
      change.add = std::get<core::AdminVoterAdd>(decoded);
    }
  } else {
    auto decoded = core::decode_admin_voter_id(params.at(0));
    if (const auto* refused = std::get_if<core::HttpBadRequest>(&decoded)) {
      bad = *refused;
    } else {
      change.remove_id = std::get<std::uint64_t>(decoded);
    }
  }
  if (bad) {
    reply_error(request, 400, "bad_request", bad->detail, spec.pattern, method, started);
    return std::nullopt;
  }
  return change;
}

void HttpServer::run_membership_change(const MembershipChange& change,
                                       ClusterService::AdminDone done) {
  ClusterService* node = shared_.cluster;
  if (change.transfer) {
    log_event(LogLevel::kInfo, "admin_cluster_request",
              "cluster: admin request: hand leadership to another voter",
              {{"action", "leader_transfer"}});
    if (node->status().role != core::RaftRole::kLeader) {
      done(core::AdminChangeOutcome{
          core::AdminChangeOutcome::Kind::kNotLeader, "", node->leader_client_address(), {}});
      return;
    }
    node->transfer_leadership([node, done](bool ok) {
      if (ok) {
        done(core::AdminChangeOutcome{
            core::AdminChangeOutcome::Kind::kTransferred, "", node->leader_client_address(), {}});
      } else {
        done(core::AdminChangeOutcome{
            core::AdminChangeOutcome::Kind::kFailed,
            "no other voter took over within an election timeout; this node still leads",
            "",
            {}});
      }
    });
  } else if (change.add) {
    const core::AdminVoterAdd& add = *change.add;
    log_event(LogLevel::kInfo, "admin_cluster_request",
              "cluster: admin request: add voter " + std::to_string(add.id) + " (raft " +
                  add.raft_address + ", clients " + add.client_address + ")",
              {{"action", "add_voter"},
               {"node_id", add.id},
               {"raft_address", add.raft_address},
               {"client_address", add.client_address}});
    node->add_voter(add, std::move(done));
  } else {
    log_event(LogLevel::kInfo, "admin_cluster_request",
              "cluster: admin request: remove voter " + std::to_string(change.remove_id),
              {{"action", "remove_voter"}, {"node_id", change.remove_id}});
    node->remove_voter(change.remove_id, std::move(done));
  }
}

void HttpServer::finish_admin(std::uint64_t ticket, const core::AdminChangeOutcome& outcome) {
  auto it = pending_.find(ticket);
  if (it == pending_.end() || stopped_) return;  // its client left
  reply_to(*it->second, core::render_admin_outcome(outcome));
  drop_pending(ticket);
}

namespace {

// A key as a log line shows it: bytes outside printable ASCII as \xNN (a key has no whitespace,
// but may hold any other byte).
std::string printable_key(std::string_view key) {
  std::string out;
  for (const char c : key) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x21 && byte <= 0x7e && c != '\\') {
      out += c;
    } else {
      char escaped[5];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
      out += escaped;
    }
  }
  return out;
}

}  // namespace

void HttpServer::run_key_request(evhttp_request* request, const core::HttpEndpointSpec& spec,
                                 const std::string& key, std::string_view method,
                                 core::Instant started, std::string admin_peer) {
  const std::string_view route = spec.pattern;
  const evhttp_uri* uri = evhttp_request_get_evhttp_uri(request);
  const char* query = uri != nullptr ? evhttp_uri_get_query(uri) : nullptr;
  std::variant<core::HttpBadRequest, core::Request> decoded = core::decode_http_key_request(
      spec.endpoint, key, request_body(request), query != nullptr ? query : "");
  if (const auto* bad = std::get_if<core::HttpBadRequest>(&decoded)) {
    reply_error(request, 400, "bad_request", bad->detail, route, method, started);
    return;
  }
  const core::Request engine_request = std::get<core::Request>(std::move(decoded));
  Pending pending = Pending::of(Pending::Kind::kKey, method, route, started);
  pending.stats_session = host_.router().new_session_id();
  const core::SessionId session = pending.stats_session;
  const std::uint64_t ticket = add_pending(request, std::move(pending));
  key_requests_[session.value] = KeyRequest{ticket, engine_request, std::move(admin_peer)};
  host_.router().submit(started, session, engine_request);
}

void HttpServer::finish_key(KeyRequest& key, const core::Reply& reply) {
  const core::Request& request = key.request;
  if (!key.admin_peer.empty()) {
    const std::string what =
        (request.fence == 0 ? std::string("every holder")
                            : "the holder with fence " + std::to_string(request.fence)) +
        (request.clear_delay ? ", clearing the lock-delay" : "");
    const std::string kind(core::namespace_word(request.space));
    const std::string name = printable_key(request.key);
    if (reply.status == core::Status::kOk) {
      http_shared_.forced_releases.fetch_add(
          static_cast<std::uint64_t>(std::max<std::int64_t>(reply.seconds, 0)),
          std::memory_order_relaxed);
      log_event(LogLevel::kWarn, "admin_force_release",
                "admin: force-release of " + kind + " " + name + " (" + what + ") asked by " +
                    key.admin_peer + " with the admin token: " + std::to_string(reply.seconds) +
                    " freed" + (reply.delay_cleared ? ", lock-delay cleared" : ""),
                {{"peer", key.admin_peer},
                 {"kind", kind},
                 {"key", name},
                 {"fence", request.fence},
                 {"clear_delay", request.clear_delay},
                 {"outcome", "ok"},
                 {"freed", reply.seconds},
                 {"delay_cleared", reply.delay_cleared}});
    } else {
      const std::string status(core::status_name(reply.status));
      log_event(LogLevel::kWarn, "admin_force_release",
                "admin: force-release of " + kind + " " + name + " (" + what + ") asked by " +
                    key.admin_peer + " with the admin token: not done (" + status + ")",
                {{"peer", key.admin_peer},
                 {"kind", kind},
                 {"key", name},
                 {"fence", request.fence},
                 {"outcome", status},
                 {"freed", 0}});
    }
  }
  if (key.ticket == 0) return;  // its client left
  auto found = pending_.find(key.ticket);
  if (found == pending_.end()) return;
  reply_to(*found->second, core::render_http_key_reply(request, reply));
  drop_pending(key.ticket);
}

}  // namespace turnstile::net
