// ClusterRun's clients (sim/cluster_world.h): the shared client model (sim/tcp_client.h) on the
// sessions of the nodes' processes. A client connects to a node (the leader an error_not_leader
// named, or any), sends its stable-ref line and lost-notify line first, asks one request at a
// time, and checks the `lost` lines it reads.
#include <cstdio>
#include <string>
#include <utility>

#include "core/protocol.h"
#include "core/wire.h"
#include "sim/cluster_world.h"

namespace turnstile::sim {

using core::Command;
using core::Namespace;

// The cluster's mix: three keys of each kind, short leases, no malformed requests.
RequestMix ClusterRun::request_mix() {
  RequestMix mix;
  mix.pick_key = [this](bool semaphore) {
    return ResourceKey{semaphore ? Namespace::kSemaphore : Namespace::kLock,
                       (semaphore ? "s" : "k") + std::to_string(work_.below(3))};
  };
  mix.rw_permille = shape_.rw_permille;
  mix.ping_stats_below = 40;  // stats only
  mix.lock_below = 450;
  mix.release_below = 650;
  mix.renew_below = 780;
  mix.enqueue_below = 900;
  mix.rw_lock_below = 400;
  mix.rw_release_below = 620;
  mix.rw_renew_below = 740;
  mix.rw_enqueue_below = 880;
  mix.semaphore_permille = 350;
  mix.lease = {0, 1, 5};
  mix.lock_timeout = {300, 1, 3};
  mix.wait_timeout = {0, 0, 2};
  mix.semaphore_limit = 2;
  mix.release_held_permille = 850;
  mix.rw_release_held_permille = 850;
  mix.draws_ahead = true;
  mix.token_pool_max = 64;
  mix.remembers_slots = true;
  return mix;
}

void ClusterRun::client_act(ClusterClient& client) {
  if (client.stopped) return;
  if (!client.node) {
    connect(client);
    return;
  }
  if (!client.pending.empty()) {
    if (work_.chance(30)) {
      ++result_.coverage["vanish-while-waiting"];
      disconnect(client);
    }
    return;
  }
  if (work_.chance(40)) {
    disconnect(client);
    return;
  }
  Outstanding out;
  std::string bytes;  // stays empty: the cluster's mix sends no malformed requests
  if (model_.pick(client, out, bytes)) send(client, std::move(out));
}

void ClusterRun::connect(ClusterClient& client) {
  unsigned node = client.hint.value_or(static_cast<unsigned>(work_.below(nodes_)));
  client.hint.reset();
  if (!processes_[node]) {
    ++result_.coverage["connect-refused"];
    return;
  }
  client.node = node;
  client.session = processes_[node]->connect(cluster_.now());
  client.connection = ++connections_;
  history_connections_[client.session.value] = client.connection;
  ++result_.coverage["connect"];
  digest_.add(0xc0ec00 + node);
  client.notify_on = false;
  client.lost_lines.clear();
  client.slots.asked_here.clear();
  if (!client.ref.empty()) {
    Outstanding out;
    out.ref_line = true;
    out.request.command = Command::kStableRef;
    out.request.ref = client.ref;
    send(client, std::move(out));
  } else {
    send_lost_notify(client);
  }
}

// `lost-notify _ on`, first on the connection (after its stable-ref line), from a client that
// asks for them.
void ClusterRun::send_lost_notify(ClusterClient& client) {
  if (!client.lost_notify) return;
  Outstanding out;
  out.notify_line = true;
  out.request.command = Command::kLostNotify;
  out.request.key = "_";
  out.request.enable = true;
  ++result_.coverage["lost-notify-connection"];
  send(client, std::move(out));
}

// A `lost <kind> <key> <token> <reason>` line: on a connection that asked (its `ok` came
// first), for a slot the client was granted and did not release `ok` (expired), or one granted
// to a client of its stable ref (reclaimed), once per connection; never `forced` (the cluster
// profiles have no operator).
void ClusterRun::client_lost_line(ClusterClient& client, const std::string& line) {
  auto bad = [&](const std::string& why) {
    fail("lost-notify", "client " + std::to_string(client.id) + " read `" + line + "`: " + why);
  };
  if (!client.notify_on) return bad("its connection never asked for lost lines");
  const std::size_t reason_at = line.rfind(' ');
  const std::string slot = line.substr(5, reason_at - 5);  // "<kind> <key> <token>"
  const std::string reason = line.substr(reason_at + 1);
  const std::string key = slot.substr(0, slot.rfind(' '));  // "<kind> <key>"
  if (!client.lost_lines.insert(line).second) return bad("a second time on one connection");
  if (reason == "expired") {
    if (client.slots.granted.count(slot) == 0 && client.slots.asked_here.count(key) == 0) {
      return bad("a slot it was never granted, on a key it did not ask for on this connection");
    }
    if (client.slots.released.count(slot) != 0) return bad("a slot it released");
    ++result_.coverage["lost-expired"];
    return;
  }
  if (reason == "reclaimed") {
    for (const ClusterClient& other : clients_) {
      if (!client.ref.empty() && other.ref == client.ref &&
          (other.slots.granted.count(slot) != 0 || other.slots.asked_ever.count(key) != 0)) {
        ++result_.coverage["lost-reclaimed"];
        return;
      }
    }
    return bad("a slot of a key no client of its stable ref asked for");
  }
  bad("a reason a cluster without an operator never has");
}

void ClusterRun::send(ClusterClient& client, Outstanding out) {
  std::string bytes;
  core::encode_request(out.request, bytes);
  model_.record_call(client, out, now_ns());
  digest_.add(bytes);
  if (options_.trace) {
    std::printf(
        "%lld client %llu node %u session %llx sends %s %s\n",
        static_cast<long long>(now_ns() / kNsPerMs), static_cast<unsigned long long>(client.id),
        *client.node, static_cast<unsigned long long>(client.session.value),
        std::string(core::command_name(out.request.command)).c_str(), out.request.key.c_str());
  }
  client.pending.push_back(std::move(out));
  processes_[*client.node]->send(cluster_.now(), client.session, bytes);
  drive(*client.node);  // the node proposes its entry at once, as turnstiled does
}

// The client closes its connection; what it held stays its own (by token) as the node's
// --auto-release-on-disconnect and --orphan-ttl say.
void ClusterRun::disconnect(ClusterClient& client) {
  if (!client.node) return;
  if (NodeProcess* process = processes_[*client.node].get()) {
    process->disconnect(cluster_.now(), client.session);
  }
  if (options_.trace)
    std::printf("%lld client %llu disconnects\n", static_cast<long long>(now_ns() / kNsPerMs),
                static_cast<unsigned long long>(client.id));
  connection_lost(client);
  digest_.add(0xd15c00 + client.id);
}

// The connection is gone (closed, or the node died): a request in flight stays indefinite.
void ClusterRun::connection_lost(ClusterClient& client) {
  client.node.reset();
  client.pending.clear();
  client.input.clear();
  client.view.forget_enqueued();
}

void ClusterRun::client_line(ClusterClient& client, const std::string& line) {
  if (line.rfind("lost ", 0) == 0) {
    client_lost_line(client, line);
    return;
  }
  if (client.pending.empty()) {
    fail("protocol", "client " + std::to_string(client.id) + " got an unsolicited reply: " + line);
    return;
  }
  const Outstanding out = std::move(client.pending.front());
  client.pending.pop_front();
  if (options_.trace) {
    std::printf("%lld client %llu node %u gets %s (op %llu)\n",
                static_cast<long long>(now_ns() / kNsPerMs),
                static_cast<unsigned long long>(client.id), client.node.value_or(99), line.c_str(),
                static_cast<unsigned long long>(out.op));
  }
  if (out.ref_line) {
    if (line != "ok") fail("protocol", "stable-ref answered " + line);
    send_lost_notify(client);
    return;
  }
  if (out.notify_line) {
    if (line != "ok") fail("protocol", "lost-notify answered " + line);
    client.notify_on = true;
    return;
  }
  const std::optional<core::Reply> reply = model_.decode(out, line);
  if (!reply) return;
  if (reply->status == core::Status::kErrorNotLeader) {
    follow_not_leader(client, *reply);
    return;
  }
  model_.take_reply(client, out, *reply, now_ns());
}

void ClusterRun::follow_not_leader(ClusterClient& client, const core::Reply& reply) {
  // Its outcome is unknown (an entry in flight may still commit): it stays indefinite. The
  // client goes to the leader named, if any.
  ++result_.coverage["not-leader"];
  if (!reply.payload.empty()) ++result_.coverage["not-leader-named"];
  client.hint = node_of_address(reply.payload, nodes_);
  disconnect(client);
}

const ClusterClient* ClusterRun::waiting_client() const {
  for (const ClusterClient& client : clients_) {
    if (client.node && !client.pending.empty()) return &client;
  }
  return nullptr;
}

}  // namespace turnstile::sim
