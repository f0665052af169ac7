#include "sim/cluster_node.h"

#include <utility>
#include <variant>

#include "core/stats.h"

namespace turnstile::sim {

namespace {

core::RouterConfig router_config(std::uint32_t session_tag,
                                 const core::ClusterLeaderConfig& leader) {
  core::RouterConfig config;
  config.index = 0;
  config.shards = 1;
  config.auto_release = leader.auto_release;
  config.orphan_ttl = leader.orphan_ttl;
  config.replicated = true;
  config.session_tag = session_tag;
  return config;
}

core::ClusterLeaderConfig with_tag(core::ClusterLeaderConfig leader, std::uint32_t session_tag) {
  leader.shards = 1;
  leader.session_tag = session_tag;
  return leader;
}

// No read or idle timeouts: a simulated client never stalls mid-request.
core::SessionConfig session_config() {
  core::SessionConfig config;
  config.read_timeout = core::Duration::zero();
  return config;
}

}  // namespace

NodeProcess::NodeProcess(std::uint32_t session_tag, const core::Replica& replica,
                         core::ClusterLeaderConfig leader)
    : router_(router_config(session_tag, leader)),
      leader_(with_tag(leader, session_tag), replica) {}

NodeProcess::~NodeProcess() = default;

void NodeProcess::lead(core::Instant now, std::uint64_t term) {
  if (term == leading_term_ || term <= last_term_led_) return;
  if (leading_term_ != 0) leader_.follow({});
  leader_.lead(now);
  leading_term_ = term;
  last_term_led_ = term;
}

void NodeProcess::follow(std::string leader_address) {
  if (leading_term_ == 0) {
    leader_.set_leader_address(std::move(leader_address));
    return;
  }
  leader_.follow(std::move(leader_address));
  leading_term_ = 0;
}

void NodeProcess::applied(const core::LogEntry& entry, const core::AppliedEntry& applied) {
  leader_.applied(entry, applied);
}

core::SessionId NodeProcess::connect(core::Instant now) {
  const core::SessionId id = router_.new_session_id();
  Connection& connection = connections_[id.value];
  connection.port = std::make_unique<core::SessionPort>(id, session_config(), now);
  return id;
}

void NodeProcess::send(core::Instant now, core::SessionId session, std::string_view bytes) {
  auto it = connections_.find(session.value);
  if (it == connections_.end()) return;
  it->second.input.append(bytes);
  pump(now);
}

void NodeProcess::disconnect(core::Instant now, core::SessionId session) {
  auto it = connections_.find(session.value);
  if (it == connections_.end()) return;
  it->second.input.clear();
  it->second.port->session().on_peer_closed(now);
  pump(now);
}

std::string NodeProcess::take_output(core::SessionId session) {
  auto it = connections_.find(session.value);
  if (it == connections_.end()) return {};
  std::string out;
  out.swap(it->second.output);
  return out;
}

std::vector<core::SessionId> NodeProcess::take_closed() {
  std::vector<core::SessionId> out;
  out.swap(closed_);
  return out;
}

void NodeProcess::pump(core::Instant now) {
  for (int pass = 0; pass < 10'000; ++pass) {
    if (!pump_once(now)) return;
  }
  anomalies_.push_back("the node's messages did not settle in 10,000 passes");
}

bool NodeProcess::pump_once(core::Instant now) {
  bool progress = false;
  for (auto it = connections_.begin(); it != connections_.end();) {
    const core::SessionId id{it->first};
    Connection& connection = it->second;
    core::Session& session = connection.port->session();
    if (!connection.input.empty()) {
      const std::size_t used = session.on_bytes(now, connection.input);
      if (used > 0) {
        connection.input.erase(0, used);
        progress = true;
      }
    }
    const core::PortEffects effects = connection.port->pump(now);
    if (effects.request) {
      router_.submit(now, id, *effects.request);
      progress = true;
    }
    if (effects.close) {
      router_.close(now, id);
      closed_.push_back(id);
      progress = true;
    }
    if (effects.frames_written != 0) router_.signals_written(id, effects.frames_written);
    if (!session.output().empty()) {
      connection.output.append(connection.port->take_output());
      progress = true;
    }
    if (effects.finished) {
      it = connections_.erase(it);
      progress = true;
      continue;
    }
    ++it;
  }
  // The router sends everything to the leader (the replicated endpoint), the leader everything
  // to the router (shard 0).
  for (core::Envelope& envelope : router_.take_outbox()) {
    leader_.receive(std::move(envelope.message));
    progress = true;
  }
  for (core::Envelope& envelope : leader_.take_outbox()) {
    router_.receive(now, std::move(envelope.message));
    progress = true;
  }
  for (core::SessionEvent& event : router_.take_events()) {
    on_event(now, event);
    progress = true;
  }
  return progress;
}

void NodeProcess::on_event(core::Instant now, core::SessionEvent& event) {
  auto it = connections_.find(event.session.value);
  if (it == connections_.end()) {
    anomalies_.push_back("a router event for unknown session " +
                         std::to_string(event.session.value));
    return;
  }
  (void)it->second.port->deliver(now, event, open_sessions());
}

std::int64_t NodeProcess::open_sessions() const {
  std::int64_t open = 0;
  for (const auto& [id, connection] : connections_) {
    open += connection.port->session().closed() ? 0 : 1;
  }
  return open;
}

}  // namespace turnstile::sim
