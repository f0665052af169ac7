#include "sim/http_workload.h"

#include <algorithm>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>

#include "core/http_request_encode.h"
#include "core/protocol.h"
#include "sim/http_probes.h"

namespace turnstile::sim {

namespace {

// The value of "name":"..." in a JSON line, or empty. A reply's "lost" array (the slots its
// session lost, docs/http-api.md) comes after the reply's own fields and has tokens of its own:
// it is not read here (check_lost reads it).
std::string json_string(const std::string& full, std::string_view name) {
  const std::string body = full.substr(0, full.find(",\"lost\":"));
  const std::string marker = "\"" + std::string(name) + "\":\"";
  const std::size_t at = body.find(marker);
  if (at == std::string::npos) return {};
  const std::size_t start = at + marker.size();
  const std::size_t end = body.find('"', start);
  return end == std::string::npos ? std::string() : body.substr(start, end - start);
}

bool is_semaphore(const std::string& key) { return key.rfind("sem:", 0) == 0; }

}  // namespace

HttpWorkload::HttpWorkload(RunContext& run, Network& network)
    : run_(run), network_(network), prng_(run.options.seed, kHttpWorkload) {}

void HttpWorkload::start() {
  clients_.resize(run_.settings.http_clients);
  for (std::size_t i = 0; i < clients_.size(); ++i) {
    clients_[i].id = i;
    run_.schedule(prng_.between(0, 100) * kMs, event::HttpAct{i});
  }
}

void HttpWorkload::stop() {
  for (Client& client : clients_) client.stopped = true;
}

void HttpWorkload::drain() {
  for (Client& client : clients_) run_.schedule(run_.now + 1, event::HttpAct{client.id});
}

core::HttpApiRequest HttpWorkload::http_request(const HttpCall& call) {
  core::HttpApiRequest http = call.http;
  if (call.op != HttpOp::kProbe) http.method = "POST";
  http.peer_address = "10.0.0." + std::to_string(call.client);
  http.peer_port = static_cast<std::uint16_t>(40000 + call.client);
  const std::string session_path = "/v1/sessions/" + call.handle;
  switch (call.op) {
    case HttpOp::kCreate:
      http.path = "/v1/sessions";
      break;
    case HttpOp::kPing:
      http.path = session_path + "/ping";
      break;
    case HttpOp::kRemove:
      http.method = "DELETE";
      http.path = session_path;
      break;
    case HttpOp::kSubmit: {
      core::HttpRequestLine line = core::encode_http_session_request(call.request);
      http.method = line.method;
      http.path = std::move(line.path);
      http.body = std::move(line.body);
      http.session = call.handle;
      break;
    }
    case HttpOp::kAdminRelease:  // the operator's (sim/operator.h)
    case HttpOp::kProbe:         // written by pick_http_probe
      break;
  }
  return http;
}

void HttpWorkload::send(Client& client, HttpCall call) {
  call.client = client.id;
  call.shard = static_cast<std::size_t>(prng_.below(run_.settings.shards));
  call.http = http_request(call);
  const HttpOp op = call.op;
  const std::uint64_t exchange = network_.http_send(call);
  client.outstanding.emplace(exchange, std::move(call));
  exchanges_[exchange] = client.id;
  run_.digest.add(exchange);
  // Some clients stop waiting and close the connection (never while creating or deleting: the
  // end of the run relies on every client knowing whether it has a session).
  if (op != HttpOp::kCreate && op != HttpOp::kRemove && !client.stopped &&
      prng_.chance(run_.settings.http_give_up_permille)) {
    run_.schedule(run_.now + prng_.between(1, 3'000) * kMs, event::HttpGiveUp{client.id, exchange});
  }
}

void HttpWorkload::session_gone(Client& client) {
  client.handle.clear();
  client.held.clear();
  client.tokens = Tokens{};
}

bool HttpWorkload::check_lost(Client& client, const std::string& body) {
  if (body.find("\"lost") == std::string::npos) return true;
  const nlohmann::json json = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  auto bad = [&](const std::string& what) {
    run_.fail("http-lost",
              "HTTP client " + std::to_string(client.id) + ": " + what + " (body " + body + ")");
    return false;
  };
  if (!json.is_object()) return bad("a reply with losses that is not a JSON object");
  Tokens& tokens = client.tokens;
  if (const auto dropped = json.find("lost_dropped"); dropped != json.end()) {
    if (!dropped->is_number_unsigned() || dropped->get<std::uint64_t>() == 0) {
      return bad("a lost_dropped that is not a positive count");
    }
    tokens.may_have_missed = true;
    ++run_.result.coverage["http-lost-dropped"];
  }
  const auto lost = json.find("lost");
  if (lost == json.end()) return true;
  if (!lost->is_array() || lost->empty()) return bad("a lost that is not a list of losses");
  for (const nlohmann::json& slot : *lost) {
    if (!slot.is_object()) return bad("a loss that is not an object");
    const std::string kind = slot.value("kind", "");
    const std::string token = slot.value("token", "");
    const std::string reason = slot.value("reason", "");
    // The client takes locks and semaphores only.
    if (kind != "lock" && kind != "sem") return bad("a loss of kind '" + kind + "'");
    const std::string key = (kind == "sem" ? "sem:" : "") + slot.value("key", "");
    const auto granted = tokens.granted.find(token);
    if (granted == tokens.granted.end() ? tokens.abandoned_keys.count(key) == 0
                                        : granted->second != key) {
      return bad("a loss of a token the session was never granted on that key");
    }
    if (tokens.released.count(token) != 0) return bad("a loss of a token it had released");
    if (!tokens.reported.insert(token).second) return bad("the same loss announced twice");
    // Only an operator forces a slot out; an HTTP session has no stable ref to reclaim.
    if (reason == "forced") {
      if (run_.settings.force_interval_ms == 0) return bad("a forced loss with no operator");
    } else if (reason != "expired") {
      return bad("a loss for the reason '" + reason + "'");
    }
    ++run_.result.coverage["http-lost-" + reason];
  }
  return true;
}

void HttpWorkload::check_loss_announced(Client& client, const std::string& token,
                                        const std::string& body) {
  if (client.tokens.may_have_missed) {
    ++run_.result.coverage["http-lease-expired-unchecked"];
    return;
  }
  if (client.tokens.reported.count(token) == 0) {
    run_.fail("http-lost", "HTTP client " + std::to_string(client.id) + ": token " + token +
                               " answered lease_expired and its loss was never announced (body " +
                               body + ")");
    return;
  }
  ++run_.result.coverage["http-lease-expired-announced"];
}

core::Request HttpWorkload::pick_request(Client& client) {
  core::Request request;
  const std::uint64_t dice = prng_.below(1000);
  if (dice < 350 && !client.held.empty()) {
    auto it = client.held.begin();
    std::advance(it, static_cast<long>(prng_.below(client.held.size())));
    const bool semaphore = is_semaphore(it->first);
    request.key = semaphore ? it->first.substr(4) : it->first;
    request.token = it->second;
    if (dice < 250) {
      request.command = semaphore ? core::Command::kSemRelease : core::Command::kRelease;
    } else {
      request.command = semaphore ? core::Command::kSemRenew : core::Command::kRenew;
      request.lease_s = prng_.between(1, 8);
    }
    return request;
  }
  const bool semaphore = prng_.chance(300);
  request.command = semaphore ? core::Command::kSemLock : core::Command::kLock;
  request.key = "h" + std::to_string(prng_.below(3));
  request.timeout_s = prng_.chance(300) ? 0 : prng_.between(1, 3);
  request.lease_s = prng_.chance(200) ? 0 : prng_.between(1, 8);
  if (semaphore) request.limit = 2;
  return request;
}

void HttpWorkload::on_act(std::size_t index) {
  Client& client = clients_[index];
  if (client.stopped) {
    // Draining: delete the session (a long poll still waiting gets its 410), once.
    if (!run_.draining || client.handle.empty()) return;
    for (const auto& [exchange, call] : client.outstanding) {
      if (call.op == HttpOp::kRemove) return;
    }
    send(client, HttpCall{0, 0, HttpOp::kRemove, client.handle, {}});
    return;
  }
  run_.schedule(run_.now + prng_.between(0, 300) * kMs + 1, event::HttpAct{client.id});
  if (client.handle.empty()) {
    if (client.outstanding.empty()) send(client, HttpCall{0, 0, HttpOp::kCreate, {}, {}});
    return;
  }
  if (client.outstanding.size() >= 2) return;
  if (!client.outstanding.empty()) {
    // A second connection while the first waits: the session serializes them.
    if (prng_.chance(300)) send(client, HttpCall{0, 0, HttpOp::kPing, client.handle, {}});
    return;
  }
  const std::uint64_t dice = prng_.below(1000);
  if (dice < 60) {
    send(client, HttpCall{0, 0, HttpOp::kPing, client.handle, {}});
  } else if (dice < 90) {
    send(client, HttpCall{0, 0, HttpOp::kRemove, client.handle, {}});
  } else if (dice < 170) {
    const std::string token = client.held.empty() ? "" : client.held.begin()->second.to_string();
    HttpProbe probe = pick_http_probe(prng_, token);
    HttpCall call{0, 0, HttpOp::kProbe, {}, {}};
    call.http = std::move(probe.request);
    call.codes = std::move(probe.codes);
    call.probe = std::move(probe.name);
    send(client, std::move(call));
  } else {
    send(client, HttpCall{0, 0, HttpOp::kSubmit, client.handle, pick_request(client)});
  }
}

void HttpWorkload::on_give_up(std::size_t index, std::uint64_t exchange) {
  Client& client = clients_[index];
  const auto it = client.outstanding.find(exchange);
  if (it == client.outstanding.end()) return;  // answered already
  const HttpCall& call = it->second;
  if (call.op == HttpOp::kSubmit && call.handle == client.handle) {
    // Its reply, and the losses it might have carried, will not reach this client; a lock it
    // asked for may be granted to its session all the same.
    client.tokens.may_have_missed = true;
    const core::Command command = call.request.command;
    if (command == core::Command::kLock || command == core::Command::kSemLock) {
      client.tokens.abandoned_keys.insert((command == core::Command::kSemLock ? "sem:" : "") +
                                          call.request.key);
    }
  }
  client.outstanding.erase(it);
  exchanges_.erase(exchange);
  ++run_.result.coverage["http-give-up"];
  network_.http_close(exchange);
}

void HttpWorkload::on_result(std::uint64_t exchange) {
  auto owner = exchanges_.find(exchange);
  if (owner == exchanges_.end()) return;
  std::optional<HttpResult> result = network_.http_take_result(exchange);
  if (!result) return;
  Client& client = clients_[owner->second];
  exchanges_.erase(owner);
  auto it = client.outstanding.find(exchange);
  const HttpCall call = std::move(it->second);
  client.outstanding.erase(it);
  const int code = result->outcome.code;
  const std::string& body = result->outcome.body;
  run_.digest.add(static_cast<std::uint64_t>(result->reset ? 1 : code));
  if (result->reset) {
    // The process died with the request: and with it every session.
    ++run_.result.coverage["http-reset"];
    session_gone(client);
    return;
  }
  if (call.op == HttpOp::kProbe) {
    if (std::find(call.codes.begin(), call.codes.end(), code) == call.codes.end()) {
      return bad(client, call.probe + " answered", code, body);
    }
    ++run_.result.coverage["http-route " + call.probe];
    return;
  }
  if (code == 410) {
    // Deleted, reaped or lost with a process: only a session this client no longer uses, or the
    // one it uses (then it is gone for good).
    if (call.handle == client.handle) session_gone(client);
    ++run_.result.coverage["http-session-gone"];
    return;
  }
  switch (call.op) {
    case HttpOp::kCreate:
      if (code != 200) return bad(client, "create refused", code, body);
      client.handle = json_string(body, "session_id");
      if (client.handle.size() != 32) return bad(client, "no session id", code, body);
      return;
    case HttpOp::kPing:
      if (code != 204) bad(client, "ping answered", code, body);
      return;
    case HttpOp::kRemove:
      if (code != 204) return bad(client, "delete answered", code, body);
      if (call.handle == client.handle) session_gone(client);
      return;
    case HttpOp::kSubmit:
      break;
    case HttpOp::kAdminRelease:  // the operator's (sim/operator.h)
    case HttpOp::kProbe:         // answered above
      return bad(client, "an unexpected request of an HTTP client", code, body);
  }
  if (call.handle != client.handle) return;  // an answer for a session given up since
  if (!check_lost(client, body)) return;
  on_request_answered(client, call.request, code, body);
}

void HttpWorkload::bad(const Client& client, const std::string& what, int code,
                       const std::string& body) {
  run_.fail("http-protocol", "HTTP client " + std::to_string(client.id) + ": " + what + " (code " +
                                 std::to_string(code) + ", body " + body + ")");
}

void HttpWorkload::on_request_answered(Client& client, const core::Request& request, int code,
                                       const std::string& body) {
  const std::string key =
      (core::command_namespace(request.command) == core::Namespace::kSemaphore ? "sem:" : "") +
      request.key;
  const std::string sent_token = request.token ? request.token->to_string() : std::string();
  const bool lease_expired = code == 409 && json_string(body, "error") == "lease_expired";
  switch (request.command) {
    case core::Command::kLock:
    case core::Command::kSemLock: {
      if (code != 200) {
        if (code != 503 && code != 409) bad(client, "lock answered", code, body);
        return;
      }
      const std::string text = json_string(body, "token");
      if (text.empty()) {
        if (json_string(body, "status") != "timeout") {
          bad(client, "lock answered without a token", code, body);
        }
        return;
      }
      const std::optional<core::Token> token = core::Token::parse(text);
      if (!token) return bad(client, "unreadable token", code, body);
      client.held[key] = *token;
      client.tokens.granted[text] = key;
      ++run_.result.coverage["http-grant"];
      return;
    }
    case core::Command::kRelease:
    case core::Command::kSemRelease:
      // 409 lease_expired: the operator forced the slot out (sim/operator.h).
      if (code != 204 && code != 200 && code != 404 &&
          !(code == 409 && run_.settings.force_interval_ms > 0)) {
        return bad(client, "release answered", code, body);
      }
      if (code == 204 || code == 200) client.tokens.released.insert(sent_token);
      if (lease_expired) check_loss_announced(client, sent_token, body);
      client.held.erase(key);
      return;
    case core::Command::kRenew:
    case core::Command::kSemRenew:
      if (code != 200) client.held.erase(key);  // the lease ended
      if (code != 200 && code != 404 && code != 409) bad(client, "renew answered", code, body);
      if (lease_expired) check_loss_announced(client, sent_token, body);
      return;
    default:
      return bad(client, "a request the client never sends", code, body);
  }
}

std::optional<std::string> HttpWorkload::first_waiting() const {
  for (const Client& client : clients_) {
    if (client.outstanding.empty()) continue;
    const auto& [exchange, call] = *client.outstanding.begin();
    return "HTTP client " + std::to_string(client.id) + " still waits for " +
           std::to_string(client.outstanding.size()) + " responses (exchange " +
           std::to_string(exchange) + ", op " + std::to_string(static_cast<int>(call.op)) +
           " on shard " + std::to_string(call.shard) + ")";
  }
  return std::nullopt;
}

void HttpWorkload::check_final() {
  for (const Client& client : clients_) {
    if (!client.handle.empty() || !client.outstanding.empty()) {
      run_.fail("liveness", "HTTP client " + std::to_string(client.id) +
                                " still has its session or a request at the end");
      return;
    }
  }
}

}  // namespace turnstile::sim
