#include "core/http_sessions.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "core/assert.h"

namespace turnstile::core {
namespace {

constexpr Duration kMaxSweepInterval = Duration::seconds(30);
constexpr Duration kSweepWithoutTimeout = Duration::seconds(10);
constexpr Duration kBucketIdle = Duration::seconds(600);
constexpr std::int64_t kNano = 1'000'000'000;

}  // namespace

struct HttpSessions::Session {
  SessionId id;
  std::string handle;
  std::string ip;
  std::string stable_ref;
  Instant last_seen;
  bool closed = false;
  struct Pending {
    HttpTicket ticket = 0;  // 0: a give-back of our own, answered to nobody
    Request request;
  };
  std::deque<Pending> queue;  // submitted, not started, in arrival order
  std::optional<Pending> in_flight;
  bool in_flight_parked = false;
  bool in_flight_abandoned = false;  // answered already (session gone) or its client left
  bool cancel_sent = false;
  std::deque<Request> give_backs;  // run before anything else in the queue
  std::deque<LostSlot> lost;       // at most kLostRemembered, oldest first
  std::uint64_t lost_dropped = 0;  // lost slots pushed out of `lost` since it was last taken
  HttpTicket watcher = 0;          // 0: nobody watches
};

HttpCreate SessionCaps::take(const std::string& ip) {
  if (sessions_max_ > 0 && live_ >= sessions_max_) return HttpCreate::kMaxSessions;
  std::int64_t& per_ip = per_ip_[ip];
  if (sessions_per_ip_max_ > 0 && per_ip >= sessions_per_ip_max_) {
    if (per_ip == 0) per_ip_.erase(ip);
    return HttpCreate::kMaxSessionsPerIp;
  }
  ++per_ip;
  ++live_;
  return HttpCreate::kOk;
}

void SessionCaps::give_back(const std::string& ip) {
  auto it = per_ip_.find(ip);
  TS_ASSERT(it != per_ip_.end() && live_ > 0);
  --live_;
  if (--it->second <= 0) per_ip_.erase(it);
}

HttpSessions::HttpSessions(const HttpSessionsConfig& config, HttpSessionQuota* shared_quota)
    : config_(config),
      own_caps_(config.sessions_max, config.sessions_per_ip_max),
      quota_(shared_quota != nullptr ? shared_quota : &own_caps_) {}
HttpSessions::~HttpSessions() = default;

HttpCreate HttpSessions::create(Instant now, SessionId id, const std::string& handle,
                                const std::string& ip, const std::string& stable_ref) {
  TS_ASSERT(id.value != 0);
  const HttpCreate taken = quota_->take(ip);
  if (taken != HttpCreate::kOk) return taken;
  auto session = std::make_unique<Session>();
  session->id = id;
  session->handle = handle;
  session->ip = ip;
  session->stable_ref = stable_ref;
  session->last_seen = now;
  by_id_[id.value] = session.get();
  const bool inserted = by_handle_.emplace(handle, std::move(session)).second;
  TS_ASSERT(inserted);
  ++live_;
  return HttpCreate::kOk;
}

std::optional<SessionId> HttpSessions::touch(Instant now, std::string_view handle) {
  auto it = by_handle_.find(std::string(handle));
  if (it == by_handle_.end() || it->second->closed) return std::nullopt;
  it->second->last_seen = std::max(it->second->last_seen, now);
  return it->second->id;
}

bool HttpSessions::submit(Instant now, std::string_view handle, HttpTicket ticket,
                          const Request& request) {
  TS_ASSERT(ticket != 0);
  TS_ASSERT(is_engine_command(request.command));
  auto it = by_handle_.find(std::string(handle));
  if (it == by_handle_.end() || it->second->closed) return false;
  Session& session = *it->second;
  session.last_seen = std::max(session.last_seen, now);
  session.queue.push_back(Session::Pending{ticket, request});
  session.queue.back().request.ref = session.stable_ref;
  by_ticket_[ticket] = &session;
  pump(session);
  return true;
}

void HttpSessions::pump(Session& session) {
  if (session.in_flight) return;
  if (!session.give_backs.empty()) {
    session.in_flight = Session::Pending{0, std::move(session.give_backs.front())};
    session.give_backs.pop_front();
  } else if (!session.closed && !session.queue.empty()) {
    session.in_flight = std::move(session.queue.front());
    session.queue.pop_front();
  } else {
    return;
  }
  session.in_flight_parked = false;
  session.in_flight_abandoned = session.in_flight->ticket == 0;
  session.cancel_sent = false;
  routes_.push_back(HttpRoute{session.id, session.in_flight->request});
}

bool HttpSessions::remove(std::string_view handle) {
  auto it = by_handle_.find(std::string(handle));
  if (it == by_handle_.end() || it->second->closed) return false;
  close(*it->second);
  return true;
}

void HttpSessions::close(Session& session) {
  TS_ASSERT(!session.closed);
  session.closed = true;
  --live_;
  quota_->give_back(session.ip);
  // The long poll (or any request) in flight wakes at once; its engine outcome, when it comes,
  // goes nowhere (a grant is given back).
  if (session.in_flight && !session.in_flight_abandoned) {
    answers_.push_back(HttpAnswer{session.in_flight->ticket, true, Reply{},
                                  session.in_flight->request, session.id});
    by_ticket_.erase(session.in_flight->ticket);
    session.in_flight_abandoned = true;
  }
  for (Session::Pending& pending : session.queue) {
    answers_.push_back(HttpAnswer{pending.ticket, true, Reply{}, pending.request, session.id});
    by_ticket_.erase(pending.ticket);
  }
  session.queue.clear();
  if (session.watcher != 0) {
    watch_events_.push_back(
        HttpWatchEvent{session.watcher, HttpWatchEvent::Kind::kEnd, {}, "session_gone"});
    watchers_.erase(session.watcher);
    session.watcher = 0;
  }
  session.lost.clear();
  session.lost_dropped = 0;
  closed_.push_back(session.id);
  maybe_forget(session);
}

void HttpSessions::maybe_forget(Session& session) {
  if (!session.closed || session.in_flight || !session.give_backs.empty()) return;
  by_id_.erase(session.id.value);
  by_handle_.erase(session.handle);  // destroys session
}

void HttpSessions::abandon(HttpTicket ticket) {
  if (auto watched = watchers_.find(ticket); watched != watchers_.end()) {
    watched->second->watcher = 0;
    watchers_.erase(watched);
    return;
  }
  auto it = by_ticket_.find(ticket);
  if (it == by_ticket_.end()) return;
  Session& session = *it->second;
  by_ticket_.erase(it);
  if (session.in_flight && session.in_flight->ticket == ticket) {
    session.in_flight_abandoned = true;
    if (session.in_flight_parked && !session.cancel_sent) {
      session.cancel_sent = true;
      cancels_.push_back(session.id);
    }
    return;
  }
  auto queued = std::find_if(session.queue.begin(), session.queue.end(),
                             [ticket](const Session::Pending& p) { return p.ticket == ticket; });
  if (queued != session.queue.end()) session.queue.erase(queued);
}

void HttpSessions::on_parked(SessionId id) {
  auto it = by_id_.find(id.value);
  if (it == by_id_.end() || !it->second->in_flight) return;
  Session& session = *it->second;
  session.in_flight_parked = true;
  // Abandoned before the engine parked it: cancel now. A closed session's parked request is
  // dropped by the close notice instead.
  if (session.in_flight_abandoned && !session.closed && !session.cancel_sent) {
    session.cancel_sent = true;
    cancels_.push_back(session.id);
  }
}

void HttpSessions::give_back(Session& session, const Request& request, const Reply& reply) {
  if (reply.is_grant()) {
    session.give_backs.push_back(release_of(request, *reply.token));
  } else if (reply.status == Status::kQueued &&
             command_operation(request.command) == Operation::kEnqueue) {
    // A queued enqueue nobody will wait for: a wait with timeout 0 takes back a grant that came
    // in between (and the waiter otherwise); its grant, if any, is released in turn.
    Request wait;
    wait.command = command_like(request.command, Operation::kWait);
    wait.key = request.key;
    wait.timeout_s = 0;
    session.give_backs.push_back(wait);
  }
}

void HttpSessions::give_back(std::string_view handle, const Request& request, const Reply& reply) {
  auto it = by_handle_.find(std::string(handle));
  if (it == by_handle_.end()) return;
  give_back(*it->second, request, reply);
  pump(*it->second);
}

void HttpSessions::on_reply(Instant now, SessionId id, const Reply& reply) {
  auto it = by_id_.find(id.value);
  if (it == by_id_.end() || !it->second->in_flight) return;
  Session& session = *it->second;
  Session::Pending done = std::move(*session.in_flight);
  session.in_flight.reset();
  if (session.in_flight_abandoned) {
    give_back(session, done.request, reply);
  } else {
    by_ticket_.erase(done.ticket);
    answers_.push_back(HttpAnswer{done.ticket, false, reply, done.request, session.id});
  }
  session.last_seen = std::max(session.last_seen, now);
  pump(session);
  maybe_forget(session);
}

void HttpSessions::on_cancelled(SessionId id) {
  auto it = by_id_.find(id.value);
  if (it == by_id_.end() || !it->second->in_flight) return;
  Session& session = *it->second;
  // Only an abandoned or closed request is ever dropped by its engine; it has no one to answer.
  TS_ASSERT(session.in_flight_abandoned);
  session.in_flight.reset();
  pump(session);
  maybe_forget(session);
}

void HttpSessions::on_lost(SessionId id, const LostSlot& slot) {
  auto it = by_id_.find(id.value);
  if (it == by_id_.end() || it->second->closed) return;
  Session& session = *it->second;
  session.lost.push_back(slot);
  if (session.lost.size() > kLostRemembered) {
    session.lost.pop_front();
    ++session.lost_dropped;
  }
  if (session.watcher != 0) {
    watch_events_.push_back(HttpWatchEvent{session.watcher, HttpWatchEvent::Kind::kLost, slot, {}});
  }
}

HttpLosses HttpSessions::take_lost(SessionId id) {
  auto it = by_id_.find(id.value);
  if (it == by_id_.end()) return {};
  Session& session = *it->second;
  HttpLosses losses{
      {std::make_move_iterator(session.lost.begin()), std::make_move_iterator(session.lost.end())},
      session.lost_dropped};
  session.lost.clear();
  session.lost_dropped = 0;
  return losses;
}

bool HttpSessions::watch(Instant now, std::string_view handle, HttpTicket ticket) {
  TS_ASSERT(ticket != 0);
  auto it = by_handle_.find(std::string(handle));
  if (it == by_handle_.end() || it->second->closed) return false;
  Session& session = *it->second;
  session.last_seen = std::max(session.last_seen, now);
  if (session.watcher != 0) {
    watch_events_.push_back(
        HttpWatchEvent{session.watcher, HttpWatchEvent::Kind::kEnd, {}, "replaced"});
    watchers_.erase(session.watcher);
  }
  session.watcher = ticket;
  watchers_[ticket] = &session;
  watch_events_.push_back(HttpWatchEvent{ticket, HttpWatchEvent::Kind::kOpen, {}, {}});
  return true;
}

std::size_t HttpSessions::reap(Instant now) {
  if (config_.idle_timeout <= Duration::zero()) return 0;
  const Duration limit = config_.idle_timeout + config_.idle_timeout;
  std::vector<Session*> idle;
  for (auto& [handle, session] : by_handle_) {
    if (session->closed || session->in_flight || !session->queue.empty()) continue;
    if (now - session->last_seen > limit) idle.push_back(session.get());
  }
  // Deterministic order: by session id.
  std::sort(idle.begin(), idle.end(),
            [](const Session* a, const Session* b) { return a->id < b->id; });
  for (Session* session : idle) close(*session);
  return idle.size();
}

Duration HttpSessions::sweep_interval() const {
  if (config_.idle_timeout <= Duration::zero()) return kSweepWithoutTimeout;
  return std::min(config_.idle_timeout, kMaxSweepInterval);
}

std::vector<HttpAnswer> HttpSessions::take_answers() { return std::exchange(answers_, {}); }
std::vector<HttpRoute> HttpSessions::take_routes() { return std::exchange(routes_, {}); }
std::vector<SessionId> HttpSessions::take_closed() { return std::exchange(closed_, {}); }
std::vector<SessionId> HttpSessions::take_cancels() { return std::exchange(cancels_, {}); }
std::vector<HttpWatchEvent> HttpSessions::take_watch_events() {
  return std::exchange(watch_events_, {});
}

bool HttpSessions::owns(SessionId session) const { return by_id_.count(session.value) != 0; }
std::size_t HttpSessions::known() const { return by_handle_.size(); }

// ---- RateLimiter ------------------------------------------------------------------------------

RateLimiter::RateLimiter(std::int64_t rate_per_s, std::int64_t burst)
    : rate_per_s_(rate_per_s), burst_(burst > 0 ? burst : rate_per_s) {}

bool RateLimiter::allow(Instant now, const std::string& ip) {
  if (rate_per_s_ <= 0) return true;
  const std::int64_t capacity = detail::saturating_mul(burst_, kNano);
  auto [it, inserted] = buckets_.try_emplace(ip);
  Bucket& bucket = it->second;
  if (inserted) {
    bucket.nanotokens = capacity;
    bucket.refilled = now;
  } else if (now > bucket.refilled) {
    const std::int64_t elapsed_ns = (now - bucket.refilled).ns();
    // rate tokens per second = rate nanotokens per nanosecond.
    const std::int64_t added = detail::saturating_mul(elapsed_ns, rate_per_s_);
    bucket.nanotokens = std::min(capacity, detail::saturating_add(bucket.nanotokens, added));
    bucket.refilled = now;
  }
  if (bucket.nanotokens < kNano) return false;
  bucket.nanotokens -= kNano;
  return true;
}

std::size_t RateLimiter::sweep(Instant now) {
  return static_cast<std::size_t>(std::erase_if(
      buckets_, [now](const auto& entry) { return now - entry.second.refilled > kBucketIdle; }));
}

// ---- bearer auth ------------------------------------------------------------------------------

bool bearer_matches(std::string_view header, std::string_view secret) {
  auto is_space = [](char c) { return c == ' ' || c == '\t'; };
  while (!header.empty() && is_space(header.front())) header.remove_prefix(1);
  std::string_view presented;
  constexpr std::string_view kScheme = "bearer";
  bool scheme_ok = header.size() > kScheme.size() && is_space(header[kScheme.size()]);
  for (std::size_t i = 0; scheme_ok && i < kScheme.size(); ++i) {
    const char c = header[i];
    const char lower = c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
    scheme_ok = lower == kScheme[i];
  }
  if (scheme_ok) {
    presented = header.substr(kScheme.size());
    while (!presented.empty() && is_space(presented.front())) presented.remove_prefix(1);
    while (!presented.empty() && is_space(presented.back())) presented.remove_suffix(1);
  }
  // Constant time in the secret's length whatever was presented.
  unsigned diff = presented.size() == secret.size() && scheme_ok ? 0U : 1U;
  for (std::size_t i = 0; i < secret.size(); ++i) {
    const unsigned char got = i < presented.size() ? static_cast<unsigned char>(presented[i]) : 0;
    diff |= static_cast<unsigned>(got ^ static_cast<unsigned char>(secret[i]));
  }
  return diff == 0;
}

}  // namespace turnstile::core
