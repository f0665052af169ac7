// The state of one life of the simulated turnstiled (the Process a ServerProcess holds, its
// sessions and the messages between its shards), and the engines' resource budget and fence
// source: what the files of ServerProcess share (sim/server.cc: lives, TCP sessions, routers and
// timers; sim/server_http.cc: the HTTP side; sim/server_journal.cc: the fence journal on its
// disk). Only those files include it. It stands below sim/server.h, which names these types
// without their definitions.
//
// Thread affinity: single-threaded, owned by one run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "core/assert.h"
#include "core/engine.h"
#include "core/fence.h"
#include "core/http_api.h"
#include "core/http_session_router.h"
#include "core/router.h"
#include "core/session_port.h"
#include "sim/context.h"
#include "sim/signal_checker.h"

namespace turnstile::sim {
namespace server_life {

// The resource budget shared by the shards of one process (--max-locks).
class Budget final : public core::ResourceBudget {
 public:
  explicit Budget(std::int64_t max) : max_(max) {}
  bool try_take() override {
    if (used_ >= max_) return false;
    ++used_;
    return true;
  }
  void give_back() override {
    TS_ASSERT(used_ > 0);
    --used_;
  }

 private:
  std::int64_t max_;
  std::int64_t used_ = 0;
};

// The engines' FenceSource: the process's FenceJournal, with every block it hands out reported to
// the server (which checks it against the disk and every earlier block).
class JournalSource final : public core::FenceSource {
 public:
  JournalSource(core::FenceJournal& journal, std::function<void(core::FenceBlock)> on_take)
      : journal_(journal), on_take_(std::move(on_take)) {}
  core::FenceBlock take(std::uint64_t want) override {
    const core::FenceBlock block = journal_.take(want);
    on_take_(block);
    return block;
  }

 private:
  core::FenceJournal& journal_;
  std::function<void(core::FenceBlock)> on_take_;
};

// What the process's HTTP APIs ask of it: a single node, up, with no rate limit; the metrics and
// the OpenAPI document are stand-ins (the daemon's are net/ text, not decisions).
class HttpHost final : public core::HttpApiHost {
 public:
  HttpHost(RunContext& run, std::function<std::int64_t()> connections)
      : run_(run), connections_(std::move(connections)) {}
  bool rate_allow(core::Instant, const std::string&) override { return true; }
  bool starting() const override { return false; }
  bool cluster_mode() const override { return false; }
  bool leader_known() const override { return true; }
  std::int64_t connections() const override { return connections_(); }
  std::string metrics_text(const core::StatsSnapshot&, bool ready) override {
    return std::string("turnstile_ready ") + (ready ? "1" : "0") + "\n";
  }
  std::string_view openapi_json() const override { return "{}"; }
  void auth_failed(const core::HttpApiRequest&, std::string_view) override {
    ++run_.result.coverage["http-auth-failure"];
  }
  void force_released(const std::string&, const core::Request&, const core::Reply&) override {
    ++run_.result.coverage["force-release-reported"];
  }
  void change_membership(core::HttpTicket, const core::MembershipChange&) override {
    TS_ASSERT(false);  // not in cluster mode: refused with 403 before
  }

 private:
  RunContext& run_;
  std::function<std::int64_t()> connections_;
};

// A router message on its way between two shards (core/router.h).
struct Hop {
  std::int64_t at = 0;
  std::variant<core::RouterMessage, core::HttpMessage> message;
};

struct ServerSession {
  std::unique_ptr<core::SessionPort> port;
  std::uint64_t connection = 0;
  std::size_t owner = 0;
  std::string input;                  // bytes the session has not taken yet
  int close_notices = 0;              // its close notices still on their way to other shards
  std::set<std::size_t> shards_used;  // for the coverage only (the router keeps its own)
  bool socket_open = true;            // false after a reset or once the server closed the socket
  bool fin_sent = false;
  std::string inflight_key;  // key of the engine request in flight (namespace in inflight_ns)
  core::Namespace inflight_ns = core::Namespace::kLock;
};

struct Process {
  std::uint64_t life = 0;
  std::int64_t mono_origin = 0;  // Instant = mono_origin + virtual time - mono_back
  std::int64_t mono_back = 0;    // a monotonic clock reading behind (the clock-back fault)
  std::unique_ptr<Budget> budget;
  std::unique_ptr<core::FenceJournal> journal;  // null without the fence journal
  std::unique_ptr<JournalSource> fence_source;  // the engines' view of `journal`
  bool journal_backoff = false;                 // a failed write is retried after a pause
  std::vector<std::unique_ptr<core::Engine>> engines;
  // The process's listeners (core/signal_hub.h), checked on every signal: lost with the
  // process, as the daemon's are.
  std::unique_ptr<SignalChecker> signals;
  std::vector<std::unique_ptr<core::Router>> routers;  // one per engine; destroyed first
  // With HTTP clients or an operator: the HTTP API of each shard and its session router (both
  // destroyed before the routers), HTTP requests being answered (by ticket, and the shard and
  // ticket of each exchange), and the session sweep's next turn.
  std::unique_ptr<HttpHost> http_host;
  std::vector<std::unique_ptr<core::HttpSessionRouter>> desks;
  std::vector<std::unique_ptr<core::HttpApi>> apis;
  std::map<core::HttpTicket, std::uint64_t> http_tickets;
  std::map<std::uint64_t, std::pair<std::size_t, core::HttpTicket>> http_exchanges;
  // The line of a `Lost` message being handed to its owner's router (on_hop), and whether the
  // router made an event of it.
  const std::string* arriving_lost = nullptr;
  bool arrived_lost = false;
  std::optional<core::Instant> next_sweep;
  std::map<std::uint64_t, ServerSession> sessions;
  std::map<std::pair<std::size_t, std::size_t>, std::deque<Hop>> channels;
  std::size_t next_owner = 0;
  std::optional<std::int64_t> timer_at;
};

}  // namespace server_life
}  // namespace turnstile::sim
