// HttpServer: the HTTP REST API (docs/http-api.md; reference section 3) on libevent's evhttp.
//
// It runs on the thread of one shard (shard 0), on that shard's event_base. Its sessions are
// sessions like TCP connections: ids from that shard's SessionId sequence, requests routed to
// the engine that owns each key (through the shards' mailboxes), replies and parked outcomes
// coming back like a TCP connection's. Every decision about a session (lifetime, reaper,
// serialization, what a delete or a departed client does to a long poll) is made by
// core::HttpSessions; the rate limit by core::RateLimiter. This class parses and validates
// requests, maps replies to JSON and status codes, and moves bytes and time.
//
// Thread affinity: everything runs on the hosting shard's thread (construct and listen() on the
// main thread before the shard starts).
#pragma once

#include <event2/event.h>
#include <event2/http.h>
#include <openssl/ssl.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/http_sessions.h"
#include "core/stats.h"
#include "net/crypto_random.h"
#include "net/http_routes.h"
#include "net/shard.h"

namespace turnstile::net {

class HttpServer {
 public:
  HttpServer(Shard& host, SharedState& shared);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds --http-host:--http-port and logs "HTTP API listening on ADDR (http|https)"; false when
  // it cannot (the reason is logged).
  bool listen();

  // From the hosting shard.
  bool owns(core::SessionId session) const;
  void on_parked(core::SessionId session);
  void on_reply(core::SessionId session, const core::Reply& reply);
  void on_cancelled(core::SessionId session);
  void on_stats_part(core::SessionId session, core::StatsSnapshot&& part);
  void begin_drain();
  void stop();  // closes the listener and every HTTP connection

 private:
  struct Pending;
  static void on_request(evhttp_request* request, void* self);
  static void on_connection_closed(evhttp_connection* connection, void* self);
  static void on_auth_delay(evutil_socket_t, short, void* self);
  static void on_sweep(evutil_socket_t, short, void* self);
  static void on_probe(evutil_socket_t, short, void* self);
  static bufferevent* make_tls_bufferevent(event_base* base, void* self);

  void handle(evhttp_request* request);
  void dispatch_route(evhttp_request* request, const HttpRouteSpec& spec,
                      const std::vector<std::string>& params, const std::string& method,
                      core::Instant started);
  void handle_session_request(evhttp_request* request, const HttpRouteSpec& spec,
                              const std::string& key, const std::string& method,
                              core::Instant started);
  std::uint64_t add_pending(evhttp_request* request, Pending pending);
  void drop_pending(std::uint64_t ticket);
  // Carries core::HttpSessions' effects out: answers, routes, close notices, cancels.
  void flush();
  void answer(std::uint64_t ticket, const core::HttpAnswer& answer);
  void finish_stats(std::uint64_t ticket, Pending& pending);

  void reply(evhttp_request* request, int code, const std::string& body, const std::string& route,
             const std::string& method, core::Instant started,
             const char* content_type = "application/json");
  void reply_error(evhttp_request* request, int code, const std::string& error,
                   const std::string& detail, const std::string& route, const std::string& method,
                   core::Instant started);
  void record(const std::string& method, const std::string& route, int code,
              core::Duration elapsed);
  std::string metrics_text(const core::StatsSnapshot& snapshot);

  Shard& host_;
  SharedState& shared_;
  const Config& config_;
  evhttp* http_ = nullptr;
  event* sweep_ = nullptr;
  event* probe_ = nullptr;  // watches the sockets of waiting requests for a departed client
  CryptoRandom random_;     // session ids are capabilities too
  core::HttpSessions sessions_;
  core::RateLimiter limiter_;
  std::vector<std::string> cors_origins_;
  bool cors_any_ = false;
  bool draining_ = false;
  bool stopped_ = false;
  bool flushing_ = false;
  core::Instant started_at_;
  core::Instant last_rate_sweep_;  // buckets idle 10 min are dropped every 5 min

  std::uint64_t next_ticket_ = 1;
  std::unordered_map<std::uint64_t, std::unique_ptr<Pending>> pending_;
  std::unordered_map<evhttp_connection*, std::vector<std::uint64_t>> by_connection_;
  std::unordered_map<std::uint64_t, std::uint64_t> stats_tickets_;  // stats session -> ticket
  // Per-session bookkeeping the core does not need: shards touched (close notice) and the shard
  // of the request in flight (cancel).
  std::unordered_map<std::uint64_t, std::vector<bool>> touched_;
  std::unordered_map<std::uint64_t, std::size_t> in_flight_target_;
  std::unordered_map<evhttp_connection*, std::string> connection_ip_;
  std::unordered_map<std::string, std::int64_t> connections_per_ip_;

  // Metrics (this thread only).
  struct RequestCounter {
    std::uint64_t count = 0;
    double seconds_sum = 0;
  };
  std::map<std::tuple<std::string, std::string, int>, RequestCounter> requests_;
  struct Histogram {
    std::array<std::uint64_t, kLatencyBuckets.size()> buckets{};
    std::uint64_t count = 0;
    double sum = 0;
  };
  std::map<std::string, Histogram> latency_;  // by route pattern
};

}  // namespace turnstile::net
