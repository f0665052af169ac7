#include "sim/network.h"

#include <algorithm>
#include <utility>

namespace turnstile::sim {

Network::Network(const Settings& settings, std::uint64_t seed, EventQueue& queue,
                 const std::int64_t& now)
    : settings_(settings), prng_(seed, kNetwork), queue_(queue), now_(now) {}

std::optional<std::uint64_t> Network::connect(std::size_t client) {
  if (listener_ == nullptr) return std::nullopt;
  const std::uint64_t id = next_id_;
  const std::optional<Listener::Accepted> accepted = listener_->accept(id);
  if (!accepted) return std::nullopt;
  ++next_id_;
  Link& link = connections_[id];
  link.ends.client = client;
  link.ends.life = accepted->life;
  link.ends.session = accepted->session;
  return id;
}

void Network::send_to_server(std::uint64_t id, SegmentKind kind, std::string bytes) {
  send(connections_[id].to_server, event::NetToServer{id}, kind, std::move(bytes));
}

void Network::send_to_client(std::uint64_t id, SegmentKind kind, std::string bytes) {
  send(connections_[id].to_client, event::NetToClient{id}, kind, std::move(bytes));
}

void Network::send(Pipe& pipe, EventPayload arrival, SegmentKind kind, std::string bytes) {
  auto push = [&](SegmentKind segment_kind, std::string payload) {
    const std::int64_t delay = prng_.between(1, settings_.net_delay_max_us) * kUs;
    const std::int64_t at = std::max(pipe.last_at, now_ + delay);
    pipe.last_at = at;
    pipe.segments.push_back(Segment{at, segment_kind, std::move(payload)});
    queue_.schedule(at, arrival);
  };
  if (kind != SegmentKind::kData) {
    push(kind, {});
    return;
  }
  std::size_t offset = 0;
  while (offset < bytes.size()) {
    std::size_t length = bytes.size() - offset;
    if (settings_.fragment && prng_.chance(300)) {
      length = static_cast<std::size_t>(prng_.below(length)) + 1;
    }
    push(SegmentKind::kData, bytes.substr(offset, length));
    offset += length;
  }
}

std::optional<Segment> Network::take(Pipe& pipe) {
  if (pipe.segments.empty() || pipe.segments.front().at > now_) return std::nullopt;
  Segment segment = std::move(pipe.segments.front());
  pipe.segments.pop_front();
  return segment;
}

std::optional<Segment> Network::take_to_server(std::uint64_t id) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return std::nullopt;
  return take(it->second.to_server);
}

std::optional<Segment> Network::take_to_client(std::uint64_t id) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return std::nullopt;
  return take(it->second.to_client);
}

std::size_t Network::in_flight_to_server(std::uint64_t id) const {
  auto it = connections_.find(id);
  return it == connections_.end() ? 0 : it->second.to_server.segments.size();
}

std::size_t Network::in_flight_to_client(std::uint64_t id) const {
  auto it = connections_.find(id);
  return it == connections_.end() ? 0 : it->second.to_client.segments.size();
}

void Network::crash(std::uint64_t life) {
  for (auto& [id, link] : connections_) {
    if (link.ends.life != life) continue;
    link.to_server.segments.clear();
    link.to_client.segments.clear();
    send(link.to_client, event::NetToClient{id}, SegmentKind::kReset, {});
  }
  for (auto& [id, exchange] : exchanges_) {
    if (exchange.life != life || exchange.responded || exchange.closed) continue;
    http_respond(id, HttpResult{true, {}});
  }
}

std::int64_t Network::http_delay(Exchange& exchange) {
  const std::int64_t delay = prng_.between(1, settings_.net_delay_max_us) * kUs;
  exchange.last_at = std::max(exchange.last_at, now_ + delay);
  return exchange.last_at;
}

std::uint64_t Network::http_send(HttpCall call) {
  const std::uint64_t id = next_exchange_++;
  Exchange& exchange = exchanges_[id];
  exchange.call = std::move(call);
  queue_.schedule(http_delay(exchange), event::HttpToServer{id});
  return id;
}

void Network::http_taken(std::uint64_t exchange, std::uint64_t life) {
  exchanges_.at(exchange).life = life;
}

void Network::http_respond(std::uint64_t id, HttpResult result) {
  Exchange& exchange = exchanges_.at(id);
  if (exchange.responded) return;
  exchange.responded = true;
  if (exchange.closed) return;  // nobody reads it
  exchange.result = std::move(result);
  queue_.schedule(http_delay(exchange), event::HttpToClient{id});
}

void Network::http_close(std::uint64_t id) {
  Exchange& exchange = exchanges_.at(id);
  exchange.closed = true;
  exchange.result.reset();
  if (exchange.responded) {
    exchanges_.erase(id);
    return;
  }
  queue_.schedule(http_delay(exchange), event::HttpGone{id});
}

std::optional<HttpResult> Network::http_take_result(std::uint64_t id) {
  auto it = exchanges_.find(id);
  if (it == exchanges_.end() || !it->second.result || it->second.closed) return std::nullopt;
  std::optional<HttpResult> result = std::move(it->second.result);
  exchanges_.erase(it);
  return result;
}

bool Network::http_open(std::uint64_t id) const {
  auto it = exchanges_.find(id);
  return it != exchanges_.end() && !it->second.responded && !it->second.closed;
}

std::int64_t Network::hop_delay() { return prng_.between(0, settings_.hop_delay_max_us) * kUs; }

}  // namespace turnstile::sim
