#include "core/http_session_router.h"

#include <cstdio>
#include <utility>

#include "core/assert.h"
#include "core/canary.h"
#include "core/http_codec.h"

namespace turnstile::core {

namespace {

HttpResponse error(int code, std::string_view error, std::string_view detail = {}) {
  return HttpResponse{code, http_error_body(error, detail), {}};
}

}  // namespace

HttpSessionRouter::HttpSessionRouter(const HttpSessionsConfig& config, HttpSessionQuota* quota,
                                     Router& router)
    : config_(config),
      router_(router),
      sessions_(config, quota),
      next_ticket_(router.index() + 1) {}

std::size_t HttpSessionRouter::home_of(std::string_view handle, std::size_t shards) {
  TS_ASSERT(shards > 0);
  std::uint32_t value = 0;
  for (char c : handle.substr(0, 8)) {
    value = value * 16 + static_cast<std::uint32_t>(c <= '9' ? c - '0' : c - 'a' + 10);
  }
  return value % shards;
}

HttpTicket HttpSessionRouter::new_ticket() {
  const HttpTicket ticket = next_ticket_;
  next_ticket_ += router_.shards();
  return ticket;
}

// ---- a client's requests -----------------------------------------------------------------------

HttpResponse HttpSessionRouter::create(Instant now, RandomSource& random, const std::string& ip,
                                       const std::string& stable_ref) {
  if (draining_) return error(503, "draining");
  // A random handle whose home is this shard: one try in shard-count, on average.
  std::string handle;
  do {
    handle.clear();
    for (int i = 0; i < 2; ++i) {
      char hex[17];
      std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(random.next_u64()));
      handle += hex;
    }
  } while (home_of(handle, router_.shards()) != router_.index());
  switch (sessions_.create(now, router_.new_session_id(), handle, ip, stable_ref)) {
    case HttpCreate::kMaxSessions:
      return error(503, "max_sessions");
    case HttpCreate::kMaxSessionsPerIp:
      return error(503, "max_sessions_per_ip");
    case HttpCreate::kOk:
      break;
  }
  return HttpResponse{
      200, http_session_created_body(handle, config_.idle_timeout.whole_seconds()), {}};
}

void HttpSessionRouter::submit(Instant now, HttpTicket ticket, const std::string& handle,
                               const Request& request) {
  if (draining_) {
    replies_.push_back(HttpReply{ticket, error(503, "draining")});
    return;
  }
  if (forward_if_elsewhere(
          {router_.index(), ticket, http_message::Op::kSubmit, handle, request, now})) {
    return;
  }
  run_here(now, now, router_.index(), http_message::Op::kSubmit, ticket, handle, request);
}

void HttpSessionRouter::remove(Instant now, HttpTicket ticket, const std::string& handle) {
  if (forward_if_elsewhere({router_.index(), ticket, http_message::Op::kRemove, handle, {}, now})) {
    return;
  }
  run_here(now, now, router_.index(), http_message::Op::kRemove, ticket, handle, {});
}

void HttpSessionRouter::ping(Instant now, HttpTicket ticket, const std::string& handle) {
  if (forward_if_elsewhere({router_.index(), ticket, http_message::Op::kPing, handle, {}, now})) {
    return;
  }
  run_here(now, now, router_.index(), http_message::Op::kPing, ticket, handle, {});
}

void HttpSessionRouter::watch(Instant now, HttpTicket ticket, const std::string& handle) {
  if (draining_) {
    replies_.push_back(HttpReply{ticket, error(503, "draining")});
    return;
  }
  if (forward_if_elsewhere({router_.index(), ticket, http_message::Op::kWatch, handle, {}, now})) {
    return;
  }
  run_here(now, now, router_.index(), http_message::Op::kWatch, ticket, handle, {});
}

void HttpSessionRouter::abandon(Instant now, HttpTicket ticket) {
  auto out = forwarded_out_.find(ticket);
  if (out != forwarded_out_.end()) {
    if (!out->second.abandoned) send(out->second.home, http_message::Abandon{ticket});
    out->second.abandoned = true;
    return;
  }
  watches_.erase(ticket);
  sessions_.abandon(ticket);
  collect(now);
}

bool HttpSessionRouter::forward_if_elsewhere(const http_message::Forward& forward) {
  const std::size_t home = home_of(forward.handle, router_.shards());
  if (home == router_.index()) return false;
  forwarded_out_[forward.ticket] = Out{home, forward.handle, false};
  send(home, forward);
  return true;
}

void HttpSessionRouter::run_here(Instant now, Instant started, std::size_t origin,
                                 http_message::Op op, HttpTicket ticket, const std::string& handle,
                                 const Request& request) {
  switch (op) {
    case http_message::Op::kSubmit:
      if (origin != router_.index()) forwarded_in_[ticket] = origin;
      if (!sessions_.submit(started, handle, ticket, request)) {
        forwarded_in_.erase(ticket);
        respond(origin, ticket, error(410, "session_gone"));
        return;
      }
      break;
    case http_message::Op::kRemove:
    case http_message::Op::kPing: {
      const bool found = op == http_message::Op::kRemove ? sessions_.remove(handle)
                                                         : sessions_.touch(now, handle).has_value();
      // A remove's effects (a long poll's 410, the close notices) go out before its 204.
      collect(now);
      respond(origin, ticket, found ? HttpResponse{204, "", {}} : error(410, "session_gone"));
      return;
    }
    case http_message::Op::kWatch:
      if (!sessions_.watch(now, handle, ticket)) {
        respond(origin, ticket, error(410, "session_gone"));
        return;
      }
      watches_[ticket] = origin;
      break;
  }
  collect(now);
}

void HttpSessionRouter::deliver_watch_event(HttpWatchEvent event) {
  auto watch = watches_.find(event.ticket);
  if (watch == watches_.end()) return;  // abandoned meanwhile
  const std::size_t origin = watch->second;
  if (event.kind == HttpWatchEvent::Kind::kEnd) watches_.erase(watch);
  if (origin == router_.index()) {
    watch_events_.push_back(std::move(event));
  } else {
    send(origin, http_message::Watched{std::move(event)});
  }
}

void HttpSessionRouter::respond(std::size_t origin, HttpTicket ticket, HttpResponse outcome,
                                const Request& request, const std::optional<Reply>& reply) {
  if (origin == router_.index()) {
    replies_.push_back(HttpReply{ticket, std::move(outcome)});
  } else {
    send(origin,
         http_message::Answer{ticket, outcome.code, std::move(outcome.body), request, reply});
  }
}

// ---- any shard ---------------------------------------------------------------------------------

void HttpSessionRouter::receive(Instant now, HttpMessage message) {
  std::visit(
      [&](auto& m) {
        using M = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<M, http_message::Forward>) {
          // Home side: a draining home refuses new work as the origin would.
          if ((m.op == http_message::Op::kSubmit || m.op == http_message::Op::kWatch) &&
              draining_) {
            respond(m.origin, m.ticket, error(503, "draining"));
            return;
          }
          // A submit counts from when its client sent it; a ping touches the session now.
          run_here(now, m.op == http_message::Op::kSubmit ? m.started : now, m.origin, m.op,
                   m.ticket, m.handle, m.request);
        } else if constexpr (std::is_same_v<M, http_message::Answer>) {
          // Origin side: answered, unless its client left meanwhile; then a grant goes back.
          auto out = forwarded_out_.find(m.ticket);
          if (out == forwarded_out_.end()) return;
          if (out->second.abandoned) {
            if (m.reply)
              send(out->second.home,
                   http_message::GiveBack{out->second.handle, m.request, *m.reply});
          } else {
            TS_ASSERT(m.code != 0);
            // The leader's address travels in the reply it renders (HttpResponse::leader).
            std::string leader;
            if (m.reply && m.reply->status == Status::kErrorNotLeader) leader = m.reply->payload;
            replies_.push_back(
                HttpReply{m.ticket, HttpResponse{m.code, std::move(m.body), std::move(leader)}});
          }
          forwarded_out_.erase(out);
        } else if constexpr (std::is_same_v<M, http_message::Abandon>) {
          // Home side: the client of a forwarded watch left: the watch stops, withdrawn.
          if (auto watch = watches_.find(m.ticket); watch != watches_.end()) {
            const std::size_t origin = watch->second;
            watches_.erase(watch);
            sessions_.abandon(m.ticket);
            send(origin, http_message::Answer{m.ticket, 0, {}, {}, std::nullopt});
            collect(now);
            return;
          }
          // Home side: the client of a forwarded request left. Still here: withdrawn, and the
          // origin is told so; answered already: the origin gives the answer back.
          auto in = forwarded_in_.find(m.ticket);
          if (in == forwarded_in_.end()) return;
          [[maybe_unused]] const std::size_t origin = in->second;
          forwarded_in_.erase(in);
          sessions_.abandon(m.ticket);
          // (The canary, core/canary.h, leaves the origin waiting: the simulator must see.)
          if constexpr (!canary::kHttpSkipWithdrawn) {
            send(origin, http_message::Answer{m.ticket, 0, {}, {}, std::nullopt});
          }
          collect(now);
        } else if constexpr (std::is_same_v<M, http_message::Watched>) {
          // Origin side: an event of a forwarded watch, for its client unless it left; a kEnd
          // is the watch's Answer.
          auto out = forwarded_out_.find(m.event.ticket);
          if (out == forwarded_out_.end()) return;
          const bool end = m.event.kind == HttpWatchEvent::Kind::kEnd;
          if (!out->second.abandoned) watch_events_.push_back(std::move(m.event));
          if (end) forwarded_out_.erase(out);
        } else {
          static_assert(std::is_same_v<M, http_message::GiveBack>);
          sessions_.give_back(m.handle, m.request, m.reply);
          collect(now);
        }
      },
      message);
}

void HttpSessionRouter::on_session_event(Instant now, const SessionEvent& event) {
  switch (event.kind) {
    case SessionEvent::Kind::kParked:
      sessions_.on_parked(event.session);
      break;
    case SessionEvent::Kind::kReply:
      sessions_.on_reply(now, event.session, event.reply);
      break;
    case SessionEvent::Kind::kCancelled:
      sessions_.on_cancelled(event.session);
      break;
    case SessionEvent::Kind::kStats:
      TS_ASSERT(false && "stats are not a session operation");
      break;
    case SessionEvent::Kind::kSignal:
    case SessionEvent::Kind::kSlowConsumer:
      TS_ASSERT(false && "an HTTP session never listens");
      break;
    case SessionEvent::Kind::kLost:
      // The `lost` line of a slot the session lost: for its next reply and its watcher.
      if (event.frame != nullptr) {
        if (const std::optional<LostSlot> slot = parse_lost_line(*event.frame)) {
          sessions_.on_lost(event.session, *slot);
        }
      }
      break;
  }
  collect(now);
}

std::size_t HttpSessionRouter::reap(Instant now) {
  const std::size_t reaped = sessions_.reap(now);
  collect(now);
  return reaped;
}

void HttpSessionRouter::collect(Instant now) {
  while (true) {
    std::vector<HttpAnswer> answers = sessions_.take_answers();
    std::vector<HttpRoute> routes = sessions_.take_routes();
    std::vector<SessionId> closed = sessions_.take_closed();
    std::vector<SessionId> cancels = sessions_.take_cancels();
    std::vector<HttpWatchEvent> watched = sessions_.take_watch_events();
    if (answers.empty() && routes.empty() && closed.empty() && cancels.empty() && watched.empty()) {
      return;
    }
    for (HttpWatchEvent& event : watched) deliver_watch_event(std::move(event));
    for (const HttpAnswer& answer : answers) {
      std::size_t origin = router_.index();
      auto in = forwarded_in_.find(answer.ticket);
      if (in != forwarded_in_.end()) {
        origin = in->second;
        forwarded_in_.erase(in);
      }
      if (answer.session_gone) {
        respond(origin, answer.ticket,
                error(410, "session_gone", "the session was deleted or expired"));
      } else {
        HttpResponse response = render_http_reply(answer.request, answer.reply);
        // What the session lost since its previous reply rides on this one, unless it has no
        // body (a 204): then on the next. (A forwarded answer whose client left meanwhile takes
        // them along; the session's event stream has them all the same.)
        // (The canary, core/canary.h, never attaches them: the simulator must see.)
        if (!canary::kHttpDropLost && !response.body.empty()) {
          HttpLosses losses = sessions_.take_lost(answer.session);
          if (!losses.slots.empty() || losses.dropped > 0) {
            response.body = http_body_with_lost(response.body, losses.slots, losses.dropped);
          }
        }
        respond(origin, answer.ticket,
                HttpResponse{response.code, std::move(response.body), std::move(response.leader)},
                answer.request, answer.reply);
      }
    }
    for (SessionId session : closed) router_.close(now, session);
    for (SessionId session : cancels) router_.cancel(now, session);
    for (const HttpRoute& route : routes) router_.submit(now, route.session, route.request);
  }
}

// Built in place: GCC 12 warns of a maybe-uninitialized variant member for a braced temporary.
void HttpSessionRouter::send(std::size_t to, HttpMessage message) {
  HttpEnvelope& envelope = outbox_.emplace_back();
  envelope.to = to;
  envelope.message = std::move(message);
}

std::vector<HttpReply> HttpSessionRouter::take_replies() {
  std::vector<HttpReply> out;
  out.swap(replies_);
  return out;
}

std::vector<HttpWatchEvent> HttpSessionRouter::take_watch_events() {
  std::vector<HttpWatchEvent> out;
  out.swap(watch_events_);
  return out;
}

std::vector<HttpEnvelope> HttpSessionRouter::take_outbox() {
  std::vector<HttpEnvelope> out;
  out.swap(outbox_);
  return out;
}

}  // namespace turnstile::core
