// ServerProcess, the HTTP side: HTTP exchanges reaching the process (session creation, and
// submit, ping and delete through the shard's HttpSessionRouter, its "desk"), the admin
// force-release as the daemon's HTTP server runs it, exchanges the client gave up, and the
// desks' replies and messages on their way out (sim/server.h).
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "core/http_codec.h"
#include "core/http_session_router.h"
#include "sim/server.h"
#include "sim/server_life.h"

namespace turnstile::sim {

using core::Instant;
using core::SessionId;

void ServerProcess::on_http_to_server(std::uint64_t exchange) {
  const HttpCall* found = network_.http_call(exchange);
  if (found == nullptr) return;
  const HttpCall call = *found;
  run_.digest.add(exchange);
  run_.digest.add(static_cast<std::uint64_t>(call.op));
  if (!process_) {  // nothing listens: the connection is refused
    network_.http_respond(exchange, HttpResult{true, {}});
    return;
  }
  network_.http_taken(exchange, life_);
  if (call.op == HttpOp::kAdminRelease) {
    admin_release(exchange, call);
    return;
  }
  Process& p = *process_;
  const std::size_t shard = call.shard % run_.settings.shards;
  core::HttpSessionRouter& desk = *p.desks[shard];
  const Instant now = server_now();
  if (call.op == HttpOp::kCreate) {
    ++run_.result.coverage["http-create"];
    core::HttpResponse outcome = desk.create(now, *salts_, "10.0.0." + std::to_string(call.client));
    run_.digest.add(static_cast<std::uint64_t>(outcome.code));
    network_.http_respond(exchange, HttpResult{false, std::move(outcome)});
    return;
  }
  if (core::HttpSessionRouter::home_of(call.handle, run_.settings.shards) != shard) {
    ++run_.result.coverage["http-forwarded"];
  }
  const core::HttpTicket ticket = desk.new_ticket();
  p.http_tickets[ticket] = exchange;
  p.http_exchanges[exchange] = {shard, ticket};
  switch (call.op) {
    case HttpOp::kSubmit:
      desk.submit(now, ticket, call.handle, call.request);
      break;
    case HttpOp::kPing:
      desk.ping(now, ticket, call.handle);
      break;
    case HttpOp::kRemove:
      ++run_.result.coverage["http-delete"];
      desk.remove(now, ticket, call.handle);
      break;
    case HttpOp::kCreate:
    case HttpOp::kAdminRelease:
      break;
  }
  drain_router(shard);
  pump();
}

void ServerProcess::admin_release(std::uint64_t exchange, const HttpCall& call) {
  ++run_.result.coverage["admin-request"];
  auto respond = [&](core::HttpResponse outcome) {
    run_.digest.add(static_cast<std::uint64_t>(outcome.code));
    network_.http_respond(exchange, HttpResult{false, std::move(outcome)});
  };
  const core::AdminAccess access =
      core::admin_access(std::optional<std::string>(kAdminToken), call.authorization);
  if (access != core::AdminAccess::kAllowed) {
    respond(core::HttpResponse{401, core::http_error_body("unauthorized")});
    return;
  }
  std::variant<core::HttpBadRequest, core::Request> decoded =
      core::decode_http_key_request(call.endpoint, call.key, "", call.query);
  if (const auto* bad = std::get_if<core::HttpBadRequest>(&decoded)) {
    respond(core::HttpResponse{400, core::http_error_body("bad_request", bad->detail)});
    return;
  }
  core::Request request = std::get<core::Request>(std::move(decoded));
  const std::size_t shard = call.shard % run_.settings.shards;
  const SessionId session = process_->routers[shard]->new_session_id();
  run_.digest.add(session.value);
  process_->key_requests[session.value] = {exchange, request};
  process_->routers[shard]->submit(server_now(), session, request);
  drain_router(shard);
  pump();
}

void ServerProcess::on_http_gone(std::uint64_t exchange) {
  if (process_) {
    auto it = process_->http_exchanges.find(exchange);
    if (it != process_->http_exchanges.end()) {
      const auto [shard, ticket] = it->second;
      process_->http_exchanges.erase(it);
      process_->http_tickets.erase(ticket);
      ++run_.result.coverage["http-abandon"];
      process_->desks[shard]->abandon(server_now(), ticket);
      drain_router(shard);
      pump();
    }
  }
  network_.http_forget(exchange);
}

bool ServerProcess::drain_desk(std::size_t shard) {
  core::HttpSessionRouter& desk = *process_->desks[shard];
  std::vector<core::HttpEnvelope> outbox = desk.take_outbox();
  std::vector<core::HttpReply> replies = desk.take_replies();
  const bool moved = !outbox.empty() || !replies.empty() || !process_->routers[shard]->idle();
  for (core::HttpEnvelope& envelope : outbox) {
    post(shard, envelope.to, Hop{0, std::move(envelope.message)});
  }
  for (core::HttpReply& reply : replies) {
    auto it = process_->http_tickets.find(reply.ticket);
    if (it == process_->http_tickets.end()) {
      run_.fail("driver-contract",
                "an HTTP reply for unknown ticket " + std::to_string(reply.ticket));
      return false;
    }
    const std::uint64_t exchange = it->second;
    process_->http_tickets.erase(it);
    process_->http_exchanges.erase(exchange);
    run_.digest.add(static_cast<std::uint64_t>(reply.outcome.code));
    network_.http_respond(exchange, HttpResult{false, std::move(reply.outcome)});
  }
  return moved;
}

}  // namespace turnstile::sim
