// ServerProcess, the HTTP side: each shard's core::HttpApi, the daemon's HTTP API itself, with
// its HttpSessionRouter (its "desk"), fed the requests the simulated clients and the operator
// write (sim/http_workload.h, sim/operator.h), the exchanges the clients gave up, and the APIs'
// responses and messages on their way out (sim/server.h).
#include <string>
#include <utility>

#include "core/http_api.h"
#include "core/http_session_router.h"
#include "sim/server.h"
#include "sim/server_life.h"

namespace turnstile::sim {

using core::Instant;

void ServerProcess::start_http(std::size_t shard) {
  Process& p = *process_;
  if (!p.http_host) {
    p.http_host = std::make_unique<server_life::HttpHost>(run_, [this] {
      std::int64_t live = 0;
      for (const auto& desk : process_->desks) live += static_cast<std::int64_t>(desk->live());
      return open_sessions() + live;
    });
  }
  core::HttpSessionsConfig sessions;
  sessions.idle_timeout = core::Duration::milliseconds(run_.settings.http_idle_timeout_ms);
  p.desks.push_back(
      std::make_unique<core::HttpSessionRouter>(sessions, nullptr, *p.routers[shard]));
  core::HttpApiConfig api;
  api.admin_token = kAdminToken;
  p.apis.push_back(std::make_unique<core::HttpApi>(api, *p.desks.back(), *p.routers[shard],
                                                   *p.http_host, *salts_));
}

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
  Process& p = *process_;
  const std::size_t shard = call.shard % run_.settings.shards;
  core::HttpApi& api = *p.apis[shard];
  ++run_.result
        .coverage[call.op == HttpOp::kAdminRelease ? "admin-request"
                                                   : "http-" + std::string(call.http.method)];
  if (call.op != HttpOp::kCreate && call.op != HttpOp::kAdminRelease &&
      core::HttpSessionRouter::home_of(call.handle, run_.settings.shards) != shard) {
    ++run_.result.coverage["http-forwarded"];
  }
  core::HttpApiRequest request = call.http;
  request.ticket = api.new_ticket();
  p.http_tickets[request.ticket] = exchange;
  p.http_exchanges[exchange] = {shard, request.ticket};
  const std::optional<core::HttpApi::StreamRoute> stream = api.handle(server_now(), request);
  if (stream) {
    run_.fail("driver-contract", "a stream request from a client that opens none");
    return;
  }
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
      process_->apis[shard]->client_left(server_now(), ticket);
      drain_router(shard);
      pump();
    }
  }
  network_.http_forget(exchange);
}

bool ServerProcess::drain_http(std::size_t shard) {
  core::HttpApi& api = *process_->apis[shard];
  std::vector<core::HttpEnvelope> outbox = api.take_outbox();
  std::vector<core::HttpApiResponse> responses = api.take_responses();
  const bool moved = !outbox.empty() || !responses.empty() || !process_->routers[shard]->idle();
  for (core::HttpEnvelope& envelope : outbox) {
    post(shard, envelope.to, Hop{0, std::move(envelope.message)});
  }
  for (core::HttpApiResponse& response : responses) {
    auto it = process_->http_tickets.find(response.ticket);
    if (it == process_->http_tickets.end()) {
      run_.fail("driver-contract",
                "an HTTP response for unknown ticket " + std::to_string(response.ticket));
      return false;
    }
    const std::uint64_t exchange = it->second;
    process_->http_tickets.erase(it);
    process_->http_exchanges.erase(exchange);
    run_.digest.add(static_cast<std::uint64_t>(response.response.code));
    network_.http_respond(exchange, HttpResult{false, std::move(response.response)});
  }
  return moved;
}

}  // namespace turnstile::sim
