#include "sim/workload.h"

#include <deque>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "core/protocol.h"
#include "core/signal_pattern.h"
#include "core/wire.h"
#include "sim/client_view.h"

namespace turnstile::sim {

using core::Namespace;

struct Workload::Outstanding {
  core::Request request;
  bool malformed = false;
  bool closes = false;  // a line-too-long request: `error`, then the server closes
  std::int64_t sent_at = 0;
  std::uint64_t op = 0;  // history operation, 0 when not recorded
};

struct Workload::Client {
  std::uint64_t id = 0;
  std::uint64_t connection = 0;  // 0: not connected
  bool half_closed = false;
  std::string input;  // reply bytes not yet split into lines
  std::deque<Outstanding> pending;
  ClientView view;       // tokens held, keys enqueued
  bool stopped = false;  // liveness phase: no new work
  // Signals on this connection: what it listens to now (as sent), and every pattern it ever
  // sent a listen for (frames already on their way may come after an unlisten).
  std::set<std::pair<std::string, std::string>> listening;
  std::set<std::string> patterns_sent;
  // lost-notify: the client sends `lost-notify _ on` first on every connection.
  bool lost_notify = false;
};

// ---- the clients
// ---------------------------------------------------------------------------------

Workload::Workload(RunContext& run, Network& network, History& history, LossChecker& losses)
    : run_(run),
      network_(network),
      history_(history),
      losses_(losses),
      prng_(run.options.seed, kWorkload),
      losses_prng_(run.options.seed, kLosses) {}

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

std::int64_t Workload::semaphore_limit(const std::string& key) const {
  // Fixed per key so that limit mismatches are the exception the workload makes on purpose.
  return 1 + static_cast<std::int64_t>(key.back() - '0' + 1) % 3;
}

void Workload::client_send(Client& client, Outstanding outstanding, std::string bytes) {
  outstanding.sent_at = run_.now;
  if (!outstanding.malformed && core::is_engine_command(outstanding.request.command)) {
    outstanding.op = history_.call(client.id, client.connection, outstanding.request, run_.now);
  }
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
    const std::optional<std::uint64_t> connected = network_.connect(client.id);
    if (!connected) return;
    const std::uint64_t id = *connected;
    client.connection = id;
    run_.digest.add(id);
    // lost-notify on, first, from a client that asks; now and then an explicit off from one
    // that does not.
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
    return;
  }
  if (client.half_closed) return;
  const std::size_t depth_max = run_.settings.pipelining ? 3 : 1;
  if (client.pending.size() >= depth_max) return;
  if (client.pending.empty() && prng_.chance(run_.settings.vanish_permille)) {
    client_disconnect(client, prng_.chance(600));
    return;
  }
  if (!client.pending.empty() && run_.settings.fault_disconnect &&
      prng_.chance(run_.settings.vanish_permille)) {
    client_disconnect(client, prng_.chance(600));  // vanish while queued or parked
    return;
  }

  Outstanding out;
  core::Request& request = out.request;
  std::string bytes;
  if (run_.settings.signal_permille > 0 && prng_.chance(run_.settings.signal_permille)) {
    pick_signal_request(client, request);
    core::encode_request(request, bytes);
    run_.digest.add(bytes);
    client_send(client, std::move(out), std::move(bytes));
    return;
  }
  if (run_.settings.rw_permille > 0 && prng_.chance(run_.settings.rw_permille)) {
    pick_rw_request(client, out, bytes);
    if (bytes.empty()) core::encode_request(request, bytes);
    run_.digest.add(bytes);
    client_send(client, std::move(out), std::move(bytes));
    return;
  }
  const std::uint64_t dice = prng_.below(1000);
  const bool semaphore = prng_.chance(400);
  auto lease = [&]() -> std::int64_t { return prng_.chance(300) ? 0 : prng_.between(1, 8); };
  if (dice < 30) {
    // Malformed: one request's worth of lines, answered `error`.
    static const char* const kMalformed[] = {"x\ny\nz\n",     "l\n\n5\n",    "l\nk\n-1\n",
                                             "sl\nk\n1 0\n",  "l\nk\nabc\n", "r\nk\n\n",
                                             "n\nk\ntok 0\n", "l\nk a\n1\n", "w\nk\n1 2 3\n"};
    out.malformed = true;
    bytes = kMalformed[prng_.below(std::size(kMalformed))];
  } else if (dice < 36) {
    out.malformed = true;
    out.closes = true;
    bytes = "l\n" + std::string(300, 'k') + "\n1\n";
  } else if (dice < 60) {
    request.command = prng_.chance(900) ? core::Command::kPing : core::Command::kStats;
  } else if (dice < 420) {
    const ResourceKey key = pick_key(semaphore);
    request.command = semaphore ? core::Command::kSemLock : core::Command::kLock;
    request.key = key.second;
    request.timeout_s = prng_.chance(250) ? 0 : prng_.between(1, 4);
    request.lease_s = lease();
    if (semaphore) {
      request.limit = semaphore_limit(key.second);
      if (prng_.chance(20)) request.limit += 1;  // a mismatch
    }
  } else if (dice < 620) {
    // Release: mostly a token we hold, sometimes a stale, foreign or malformed one.
    ResourceKey key;
    std::optional<core::Token> token;
    if (!client.view.held.empty() && prng_.chance(800)) {
      auto it = client.view.held.begin();
      std::advance(it, static_cast<long>(prng_.below(client.view.held.size())));
      key = it->first;
      token = it->second;
    } else {
      key = pick_key(semaphore);
      if (!token_pool_.empty()) token = token_pool_[prng_.below(token_pool_.size())];
    }
    request.command =
        key.first == Namespace::kSemaphore ? core::Command::kSemRelease : core::Command::kRelease;
    request.key = key.second;
    if (!token || prng_.chance(30)) {
      out.malformed = true;  // not a token we could have issued: `error`, nothing changes
      bytes =
          std::string(core::command_name(request.command)) + "\n" + key.second + "\nNOT-A-TOKEN\n";
    } else {
      request.token = token;
    }
  } else if (dice < 720) {
    // Renew (sometimes too late: leases are short and think time is long).
    if (client.view.held.empty()) {
      request.command = core::Command::kPing;
    } else {
      auto it = client.view.held.begin();
      std::advance(it, static_cast<long>(prng_.below(client.view.held.size())));
      request.command = it->first.first == Namespace::kSemaphore ? core::Command::kSemRenew
                                                                 : core::Command::kRenew;
      request.key = it->first.second;
      request.token = it->second;
      request.lease_s = lease();
    }
  } else if (dice < 850) {
    // Two-phase step one.
    const ResourceKey key = pick_key(semaphore);
    request.command = semaphore ? core::Command::kSemEnqueue : core::Command::kEnqueue;
    request.key = key.second;
    request.lease_s = lease();
    if (semaphore) request.limit = semaphore_limit(key.second);
  } else {
    // Two-phase step two: mostly for a key we enqueued.
    ResourceKey key;
    if (!client.view.enqueued.empty() && prng_.chance(900)) {
      auto it = client.view.enqueued.begin();
      std::advance(it, static_cast<long>(prng_.below(client.view.enqueued.size())));
      key = it->first;
    } else {
      key = pick_key(semaphore);
    }
    request.command =
        key.first == Namespace::kSemaphore ? core::Command::kSemWait : core::Command::kWait;
    request.key = key.second;
    request.timeout_s = prng_.chance(250) ? 0 : prng_.between(1, 4);
  }
  if (bytes.empty()) core::encode_request(request, bytes);
  run_.digest.add(bytes);
  client_send(client, std::move(out), std::move(bytes));
}

void Workload::pick_rw_request(Client& client, Outstanding& out, std::string& bytes) {
  using core::Command;
  core::Request& request = out.request;
  auto lease = [&]() -> std::int64_t { return prng_.chance(300) ? 0 : prng_.between(1, 8); };
  auto timeout = [&]() -> std::int64_t { return prng_.chance(250) ? 0 : prng_.between(1, 4); };
  auto key = [&]() { return ResourceKey{Namespace::kReadWrite, pick_key(false).second}; };
  // The read-write slots the client holds.
  std::vector<ResourceKey> held;
  for (const auto& [held_key, token] : client.view.held) {
    if (held_key.first == Namespace::kReadWrite) held.push_back(held_key);
  }
  const bool read = prng_.chance(600);
  const bool other_kind = prng_.chance(80);  // a release, renewal or wait of the other kind
  const std::uint64_t dice = prng_.below(1000);
  if (dice < 380) {
    request.command = read ? Command::kReadLock : Command::kWriteLock;
    request.key = key().second;
    request.timeout_s = timeout();
    request.lease_s = lease();
  } else if (dice < 580) {
    // Release: mostly a slot we hold, with its own kind; sometimes the other kind (`error`, and
    // the slot stays), a stale or foreign token, or a malformed one.
    ResourceKey target;
    std::optional<core::Token> token;
    bool shared = read;
    if (!held.empty() && prng_.chance(850)) {
      target = held[prng_.below(held.size())];
      token = client.view.held.at(target);
      shared = client.view.held_shared.count(target) != 0;
      if (other_kind) {
        shared = !shared;
        ++run_.result.coverage["rw-other-kind"];
      }
    } else {
      target = key();
      if (!token_pool_.empty()) token = token_pool_[prng_.below(token_pool_.size())];
    }
    request.command = shared ? Command::kReadRelease : Command::kWriteRelease;
    request.key = target.second;
    if (!token || prng_.chance(30)) {
      out.malformed = true;  // not a token we could have issued: `error`, nothing changes
      bytes = std::string(core::command_name(request.command)) + "\n" + target.second +
              "\nNOT-A-TOKEN\n";
    } else {
      request.token = token;
    }
  } else if (dice < 680) {
    // Renew a slot we hold (sometimes too late, sometimes naming the other kind).
    if (held.empty()) {
      request.command = Command::kPing;
      return;
    }
    const ResourceKey target = held[prng_.below(held.size())];
    bool shared = client.view.held_shared.count(target) != 0;
    if (other_kind) {
      shared = !shared;
      ++run_.result.coverage["rw-other-kind"];
    }
    request.command = shared ? Command::kReadRenew : Command::kWriteRenew;
    request.key = target.second;
    request.token = client.view.held.at(target);
    request.lease_s = lease();
  } else if (dice < 840) {
    request.command = read ? Command::kReadEnqueue : Command::kWriteEnqueue;
    request.key = key().second;
    request.lease_s = lease();
  } else {
    // Two-phase step two: mostly for a read-write key we enqueued, with its kind.
    ResourceKey target;
    bool shared = read;
    std::vector<ResourceKey> enqueued;
    for (const auto& [enqueued_key, since] : client.view.enqueued) {
      if (enqueued_key.first == Namespace::kReadWrite) enqueued.push_back(enqueued_key);
    }
    if (!enqueued.empty() && prng_.chance(900)) {
      target = enqueued[prng_.below(enqueued.size())];
      shared = client.view.enqueued_shared.count(target) != 0;
      if (other_kind) {
        shared = !shared;
        ++run_.result.coverage["rw-other-kind"];
      }
    } else {
      target = key();
    }
    request.command = shared ? Command::kReadWait : Command::kWriteWait;
    request.key = target.second;
    request.timeout_s = timeout();
  }
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
  const core::Request& request = outstanding.request;
  if (outstanding.malformed) {
    if (line != "error") run_.fail("protocol", "malformed request answered " + std::string(line));
    return;
  }
  const std::optional<core::Reply> reply = core::decode_reply(request.command, line);
  if (!reply) {
    run_.fail("protocol", std::string(core::command_name(request.command)) + " answered " +
                              std::string(line) + ", which is no reply to it");
    return;
  }
  const std::optional<core::Token> granted =
      client.view.on_reply(request, *reply, outstanding.sent_at, outstanding.op, history_);
  if (granted) token_pool_.push_back(*granted);
  if (reply->token && core::command_namespace(request.command) == Namespace::kReadWrite) {
    ++run_.result.coverage[core::is_shared_command(request.command) ? "rw-read-granted"
                                                                    : "rw-write-granted"];
  }
  if (token_pool_.size() > 256) token_pool_.erase(token_pool_.begin(), token_pool_.begin() + 128);
  if (outstanding.op != 0) {
    history_.complete(outstanding.op, run_.now, std::string(core::status_name(reply->status)),
                      reply->token, reply->seconds);
  }
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
  text += first.malformed
              ? std::string("malformed")
              : std::string(core::command_name(first.request.command)) + " " + first.request.key +
                    " timeout " + std::to_string(first.request.timeout_s);
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
