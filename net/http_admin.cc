// HttpServer's part of the admin routes and the token checks (docs/http-api.md, "Admin" and
// "Auth"): what core::HttpApi asks of the process for them. The log line of a refused token, the
// membership changes run on the cluster node and brought back to the shard's thread, and the log
// line of every force-release with who asked and what it freed.
#include <event2/keyvalq_struct.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "core/http_codec.h"
#include "net/clock.h"
#include "net/guard.h"
#include "net/http_server.h"
#include "net/http_server_internal.h"
#include "net/log.h"

namespace turnstile::net {

void HttpServer::auth_failed(const core::HttpApiRequest& request, std::string_view route) {
  shared_.auth_failures.fetch_add(1, std::memory_order_relaxed);
  if (const auto suppressed = auth_failure_log_limit().admit(host_.turn_now().ns())) {
    const std::string& peer = request.peer_address;
    log_event(LogLevel::kWarn, "auth_failure",
              "HTTP: " + std::string(request.method) + " " + std::string(route) +
                  ": unauthorized from " + peer,
              {{"transport", "http"},
               {"peer", peer},
               {"route", route},
               {"method", request.method},
               {"suppressed", *suppressed}});
  }
}

void HttpServer::change_membership(core::HttpTicket ticket, const core::MembershipChange& change) {
  // The answer comes on the raft thread (or at once): it is brought back to this shard's thread.
  // The server outlives the raft node (Server::run stops it before the shards are destroyed).
  Shard* host = &host_;
  auto done = [this, host, ticket](core::AdminChangeOutcome outcome) {
    host->post(message::Run{[this, ticket, outcome = std::move(outcome)] {
      guarded("HTTP admin reply", [&] {
        if (stopped_) return;
        api_.admin_done(ticket, outcome);
        flush();
        host_.settle();
      });
    }});
  };
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

void HttpServer::force_released(const std::string& peer, const core::Request& request,
                                const core::Reply& reply) {
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
              "admin: force-release of " + kind + " " + name + " (" + what + ") asked by " + peer +
                  " with the admin token: " + std::to_string(reply.seconds) + " freed" +
                  (reply.delay_cleared ? ", lock-delay cleared" : ""),
              {{"peer", peer},
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
              "admin: force-release of " + kind + " " + name + " (" + what + ") asked by " + peer +
                  " with the admin token: not done (" + status + ")",
              {{"peer", peer},
               {"kind", kind},
               {"key", name},
               {"fence", request.fence},
               {"outcome", status},
               {"freed", 0}});
  }
}

}  // namespace turnstile::net
