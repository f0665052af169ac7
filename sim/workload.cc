#include "sim/workload.h"

#include <iterator>
#include <set>
#include <string>
#include <utility>

#include "core/protocol.h"
#include "core/signal_pattern.h"
#include "core/wire.h"

namespace turnstile::sim {

using core::Namespace;

struct Workload::Client : TcpClient {
  bool half_closed = false;
  // Signals on this connection: what it listens to now (as sent), and every pattern it ever
  // sent a listen for (frames already on their way may come after an unlisten).
  std::set<std::pair<std::string, std::string>> listening;
  std::set<std::string> patterns_sent;
};

// ---- the clients
// ---------------------------------------------------------------------------------

Workload::Workload(RunContext& run, Network& network, History& history, LossChecker& losses)
    : run_(run),
      network_(network),
      losses_(losses),
      prng_(run.options.seed, kWorkload),
      losses_prng_(run.options.seed, kLosses),
      model_(prng_, request_mix(), history, run.result.coverage,
             [&run](const std::string& invariant, const std::string& detail) {
               run.fail(invariant, detail);
             }) {}

RequestMix Workload::request_mix() {
  RequestMix mix;
  mix.pick_key = [this](bool semaphore) { return pick_key(semaphore); };
  mix.rw_permille = run_.settings.rw_permille;
  mix.malformed_below = 30;
  mix.too_long_below = 36;
  mix.ping_stats_below = 60;
  mix.ping_permille = 900;
  mix.lock_below = 420;
  mix.release_below = 620;
  mix.renew_below = 720;
  mix.enqueue_below = 850;
  mix.rw_lock_below = 380;
  mix.rw_release_below = 580;
  mix.rw_renew_below = 680;
  mix.rw_enqueue_below = 840;
  mix.semaphore_permille = 400;
  mix.lease = {300, 1, 8};
  mix.lock_timeout = {250, 1, 4};
  mix.wait_timeout = {250, 1, 4};
  mix.limit_mismatch_permille = 20;
  mix.release_held_permille = 800;
  mix.rw_release_held_permille = 850;
  mix.bad_token_permille = 30;
  mix.idle_renew_pings = true;
  mix.token_pool_max = 256;
  return mix;
}

Workload::~Workload() = default;

void Workload::start() {
  clients_.resize(run_.settings.clients);
  for (std::size_t i = 0; i < clients_.size(); ++i) {
    clients_[i].id = i;
    clients_[i].lost_notify = run_.settings.lost_notify_permille > 0 &&
                              losses_prng_.chance(run_.settings.lost_notify_permille);
    run_.schedule(prng_.between(0, 100) * kMs, event::ClientAct{i});
  }
}

void Workload::on_act(std::size_t client) { client_act(clients_[client]); }

void Workload::stop() {
  for (Client& client : clients_) client.stopped = true;
}

void Workload::drain() {
  for (Client& client : clients_) run_.schedule(run_.now + 1, event::ClientAct{client.id});
}

std::size_t Workload::clients() const { return clients_.size(); }

std::optional<std::pair<ResourceKey, std::uint64_t>> Workload::pick_held(Prng& prng) const {
  std::vector<std::pair<ResourceKey, std::uint64_t>> held;
  for (const Client& client : clients_) {
    if (client.connection == 0) continue;
    for (const auto& [key, token] : client.view.held) held.emplace_back(key, token.fence.value);
  }
  if (held.empty()) return std::nullopt;
  return held[prng.below(held.size())];
}

void Workload::reset_connection(std::size_t index) {
  Client& client = clients_[index];
  if (client.connection != 0 && !client.half_closed) client_disconnect(client, true);
}

// ---- the network
// ---------------------------------------------------------------------------------

void Workload::on_net_to_client(std::uint64_t connection_id) {
  std::optional<Segment> arrived = network_.take_to_client(connection_id);
  if (!arrived) return;
  const Segment& segment = *arrived;
  const Network::Connection& connection = network_.connection(connection_id);
  run_.digest.add(segment.bytes);
  run_.digest.add(static_cast<std::uint64_t>(segment.kind));
  Client& client = clients_[connection.client];
  if (client.connection != connection_id) return;  // the client already dropped it
  if (segment.kind == SegmentKind::kData) {
    client.input += segment.bytes;
    std::size_t newline = 0;
    while (!run_.failed && (newline = client.input.find('\n')) != std::string::npos) {
      const std::string line = client.input.substr(0, newline);
      client.input.erase(0, newline + 1);
      client_line(client, line);
    }
    return;
  }
  losses_.connection_ended(connection_id, segment.kind == SegmentKind::kFin);
  client_connection_lost(client);
}

// ---- what a client does -------------------------------------------------------------------------

ResourceKey Workload::pick_key(bool semaphore) {
  std::string key;
  if (prng_.chance(run_.settings.hot_permille)) {
    key = "h" + std::to_string(prng_.below(run_.settings.hot_keys));
  } else {
    key = "c" + std::to_string(prng_.below(run_.settings.cold_keys));
  }
  return {semaphore ? Namespace::kSemaphore : Namespace::kLock, key};
}

void Workload::client_send(Client& client, Outstanding outstanding, std::string bytes) {
  model_.record_call(client, outstanding, run_.now);
  client.pending.push_back(std::move(outstanding));
  network_.send_to_server(client.connection, SegmentKind::kData, std::move(bytes));
}

void Workload::client_connection_lost(Client& client) {
  // Whatever was pending may or may not have happened.
  // Whatever was pending stays indefinite in the history.
  client.pending.clear();
  client.view.held.clear();
  client.view.forget_enqueued();
  client.listening.clear();
  client.patterns_sent.clear();
  client.input.clear();
  client.connection = 0;
  client.half_closed = false;
}

void Workload::client_disconnect(Client& client, bool reset) {
  run_.digest.add(reset ? 0x7e5e7 : 0xf1f1);
  if (reset) {
    network_.send_to_server(client.connection, SegmentKind::kReset);
    losses_.connection_ended(client.connection, false);
    client_connection_lost(client);
  } else {
    network_.send_to_server(client.connection, SegmentKind::kFin);
    client.half_closed = true;  // reads on until the server closes
  }
}

void Workload::client_act(Client& client) {
  const std::int64_t think = prng_.between(0, 300) * kMs;
  if (client.stopped) {
    if (run_.draining && client.connection != 0 && !client.half_closed) {
      client_disconnect(client, prng_.chance(500));
    }
    return;
  }
  run_.schedule(run_.now + think + 1, event::ClientAct{client.id});
  if (client.connection == 0) {
    client_connect(client);
    return;
  }
  if (client.half_closed) return;
  const std::size_t depth_max = run_.settings.pipelining ? 3 : 1;
  if (client.pending.size() >= depth_max) return;
  if (client_vanishes(client)) return;
  Outstanding out;
  std::string bytes;
  if (run_.settings.signal_permille > 0 && prng_.chance(run_.settings.signal_permille)) {
    pick_signal_request(client, out.request);
  } else {
    model_.pick(client, out, bytes);  // never empty-handed: idle renewals ping
  }
  if (bytes.empty()) core::encode_request(out.request, bytes);
  run_.digest.add(bytes);
  client_send(client, std::move(out), std::move(bytes));
}

void Workload::client_connect(Client& client) {
  const std::optional<std::uint64_t> connected = network_.connect(client.id);
  if (!connected) return;
  const std::uint64_t id = *connected;
  client.connection = id;
  run_.digest.add(id);
  // lost-notify on, first, from a client that asks; now and then an explicit off from one that
  // does not.
  if (client.lost_notify || losses_prng_.chance(100)) {
    Outstanding out;
    out.request.command = core::Command::kLostNotify;
    out.request.key = "_";
    out.request.enable = client.lost_notify;
    if (client.lost_notify) losses_.opted_in(id);
    std::string bytes;
    core::encode_request(out.request, bytes);
    run_.digest.add(bytes);
    client_send(client, std::move(out), std::move(bytes));
  }
}

bool Workload::client_vanishes(Client& client) {
  if (client.pending.empty() && prng_.chance(run_.settings.vanish_permille)) {
    client_disconnect(client, prng_.chance(600));
    return true;
  }
  if (!client.pending.empty() && run_.settings.fault_disconnect &&
      prng_.chance(run_.settings.vanish_permille)) {
    client_disconnect(client, prng_.chance(600));  // vanish while queued or parked
    return true;
  }
  return false;
}

void Workload::pick_signal_request(Client& client, core::Request& request) {
  static const char* const kPatterns[] = {"ev.a", "ev.*", "ev.>", "*.a", "ev.a.b", ">", "ev.*.b"};
  static const char* const kChannels[] = {"ev.a", "ev.b", "ev.a.b", "x.a", "ev.c.b"};
  const std::uint64_t kind = prng_.below(100);
  if (kind < 50) {
    request.command = core::Command::kSignal;
    request.key = kChannels[prng_.below(std::size(kChannels))];
    request.text = "s" + std::to_string(++signals_sent_);
    return;
  }
  if (kind < 65 && !client.listening.empty()) {
    auto it = client.listening.begin();
    std::advance(it, static_cast<long>(prng_.below(client.listening.size())));
    request.command = core::Command::kUnlisten;
    request.key = it->first;
    request.text = it->second;
    client.listening.erase(it);
    return;
  }
  request.command = core::Command::kListen;
  request.key = kPatterns[prng_.below(std::size(kPatterns))];
  request.text = prng_.chance(400) ? "g" + std::to_string(prng_.below(2)) : "";
  client.listening.emplace(request.key, request.text);
  client.patterns_sent.insert(request.key);
}

void Workload::client_frame(Client& client, std::string_view line) {
  const std::optional<core::SignalFrame> frame = core::parse_signal_frame(line);
  if (!frame) {
    run_.fail("signals",
              "client " + std::to_string(client.id) + " got a bad frame: " + std::string(line));
    return;
  }
  // A frame comes only for a signal sent, on a connection that listens to its channel.
  const bool sent = frame->payload.size() > 1 && frame->payload[0] == 's' &&
                    std::stoull(frame->payload.substr(1)) <= signals_sent_;
  bool matches = false;
  for (const std::string& pattern : client.patterns_sent) {
    matches = matches || core::signal_pattern_matches(pattern, frame->channel);
  }
  if (!sent || !matches) {
    run_.fail("signals", "client " + std::to_string(client.id) + " got " + std::string(line) +
                             (sent ? ", which none of its patterns match" : ", never sent"));
  }
  ++run_.result.coverage["signal-received"];
}

void Workload::client_line(Client& client, std::string_view line) {
  if (line.substr(0, 4) == "sig ") {
    client_frame(client, line);
    return;
  }
  if (line.substr(0, 5) == "lost ") {
    losses_.line_received(client.id, client.connection, line);
    return;
  }
  if (client.pending.empty()) {
    run_.fail("protocol", "client " + std::to_string(client.id) +
                              " got an unsolicited reply: " + std::string(line));
    return;
  }
  Outstanding outstanding = std::move(client.pending.front());
  client.pending.pop_front();
  const std::optional<core::Reply> reply = model_.decode(outstanding, line);
  if (reply) model_.take_reply(client, outstanding, *reply, run_.now);
}

// ---- checks -------------------------------------------------------------------------------------

std::optional<Workload::Waiting> Workload::first_waiting(std::uint64_t life_now) const {
  for (const Client& client : clients_) {
    if (client.connection != 0 && !client.pending.empty()) {
      return Waiting{client.id, client.pending.size(), describe_connection(client, life_now),
                     network_.connection(client.connection).session};
    }
  }
  return std::nullopt;
}

std::string Workload::describe_connection(const Client& client, std::uint64_t life_now) const {
  std::string text = "first pending: ";
  const Outstanding& first = client.pending.front();
  text += TcpClientModel::describe(first);
  text += ", sent at " + std::to_string(first.sent_at);
  const Network::Connection& connection = network_.connection(client.connection);
  text += "; connection " + std::to_string(client.connection) + " life " +
          std::to_string(connection.life) + " (now " + std::to_string(life_now) + ")";
  text += ", segments to server " +
          std::to_string(network_.in_flight_to_server(client.connection)) + ", to client " +
          std::to_string(network_.in_flight_to_client(client.connection));
  return text;
}

void Workload::check_final() {
  for (const Client& client : clients_) {
    if (client.connection != 0) {
      run_.fail("liveness", "client " + std::to_string(client.id) + " still connected at the end");
      return;
    }
  }
}

}  // namespace turnstile::sim
