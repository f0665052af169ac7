// core/http_session_router.h: an HTTP session lives on its home shard; a request that arrives on
// any other shard travels there and its answer comes back under the same ticket; deletes,
// departed clients, draining and unknown sessions behave the same wherever the client is. Each
// shard here is an engine, its Router and its HttpSessionRouter, and the test moves their
// messages in a FIFO loop, as the drivers do.
#include "core/http_session_router.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "core/random.h"
#include "core/routing.h"
#include "testing/requests.h"

namespace turnstile::core {
namespace {

using test::lock_request;

class Cluster {
 public:
  explicit Cluster(std::size_t shards, HttpSessionsConfig config = {}) {
    for (std::size_t i = 0; i < shards; ++i) {
      salts_.push_back(std::make_unique<SplitMix64>(i + 1));
      engines_.push_back(std::make_unique<Engine>(EngineConfig{}, *salts_.back()));
      RouterConfig router;
      router.index = i;
      router.shards = shards;
      routers_.push_back(std::make_unique<Router>(router, *engines_.back()));
      desks_.push_back(std::make_unique<HttpSessionRouter>(config, nullptr, *routers_.back()));
    }
  }

  HttpSessionRouter& desk(std::size_t shard) { return *desks_.at(shard); }
  Engine& engine(std::size_t shard) { return *engines_.at(shard); }

  // A new session homed on `shard`; its handle.
  std::string create(std::size_t shard) {
    const HttpResponse outcome = desk(shard).create(now_, random_, "10.0.0.1");
    EXPECT_EQ(outcome.code, 200) << outcome.body;
    const std::string marker = "\"session_id\":\"";
    const std::size_t at = outcome.body.find(marker);
    EXPECT_NE(at, std::string::npos) << outcome.body;
    return outcome.body.substr(at + marker.size(), 32);
  }

  // Moves every message until all shards are idle; replies are kept by ticket.
  void settle() {
    while (true) {
      bool moved = false;
      for (std::size_t i = 0; i < routers_.size(); ++i) {
        for (Envelope& envelope : routers_[i]->take_outbox()) {
          router_queue_.push_back(std::move(envelope));
          moved = true;
        }
        for (SessionEvent& event : routers_[i]->take_events()) {
          EXPECT_TRUE(desks_[i]->owns(event.session));
          desks_[i]->on_session_event(now_, event);
          moved = true;
        }
        for (HttpEnvelope& envelope : desks_[i]->take_outbox()) {
          http_queue_.push_back(std::move(envelope));
          ++http_messages_;
          moved = true;
        }
        for (HttpReply& reply : desks_[i]->take_replies()) {
          EXPECT_EQ(replies_.count(reply.ticket), 0U) << "ticket answered twice";
          order_.push_back(reply.ticket);
          replies_[reply.ticket] = {i, reply.outcome};
          moved = true;
        }
        for (HttpWatchEvent& event : desks_[i]->take_watch_events()) {
          watched_[event.ticket].push_back({i, std::move(event)});
          moved = true;
        }
      }
      if (!router_queue_.empty()) {
        Envelope envelope = std::move(router_queue_.front());
        router_queue_.pop_front();
        routers_.at(envelope.to)->receive(now_, std::move(envelope.message));
        moved = true;
      }
      if (!http_queue_.empty()) {
        HttpEnvelope envelope = std::move(http_queue_.front());
        http_queue_.pop_front();
        desks_.at(envelope.to)->receive(now_, std::move(envelope.message));
        moved = true;
      }
      if (!moved) return;
    }
  }

  struct Answered {
    std::size_t shard = 0;        // where the reply came out
    HttpResponse outcome{0, {}};  // code 0: no reply
  };
  // The reply for `ticket` (code 0 when none).
  Answered reply(HttpTicket ticket) const {
    auto it = replies_.find(ticket);
    return it == replies_.end() ? Answered{} : it->second;
  }
  const std::vector<HttpTicket>& order() const { return order_; }
  struct Watched {
    std::size_t shard = 0;  // where the event came out
    HttpWatchEvent event;
  };
  // The watch events of `ticket` so far, and forgets them.
  std::vector<Watched> take_watched(HttpTicket ticket) {
    std::vector<Watched> out = std::move(watched_[ticket]);
    watched_.erase(ticket);
    return out;
  }
  // Every engine's timers run at now_ (an expired lease is then a loss).
  void tick() {
    for (auto& router : routers_) router->tick(now_);
  }
  std::size_t http_messages() const { return http_messages_; }

  // A key whose engine is `shard`.
  std::string key_on(std::size_t shard) const {
    for (int i = 0;; ++i) {
      std::string key = "key-" + std::to_string(i);
      if (shard_of(Namespace::kLock, key, routers_.size()) == shard) return key;
    }
  }

  Instant now_ = Instant::from_ns(1'000'000'000'000);

 private:
  SplitMix64 random_{42};
  std::vector<std::unique_ptr<SplitMix64>> salts_;
  std::vector<std::unique_ptr<Engine>> engines_;
  std::vector<std::unique_ptr<Router>> routers_;
  std::vector<std::unique_ptr<HttpSessionRouter>> desks_;
  std::deque<Envelope> router_queue_;
  std::deque<HttpEnvelope> http_queue_;
  std::map<HttpTicket, Answered> replies_;
  std::map<HttpTicket, std::vector<Watched>> watched_;
  std::vector<HttpTicket> order_;
  std::size_t http_messages_ = 0;
};

std::size_t holders(Engine& engine, const std::string& key) {
  for (const Engine::ResourceView& view : engine.inspect()) {
    if (view.key == key) return view.holders.size();
  }
  return 0;
}

std::size_t waiters(Engine& engine, const std::string& key) {
  for (const Engine::ResourceView& view : engine.inspect()) {
    if (view.key == key) return view.waiters.size();
  }
  return 0;
}

TEST(HttpSessionRouter, HomeOfReadsTheFirstEightHexDigits) {
  EXPECT_EQ(HttpSessionRouter::home_of("00000000ffffffffffffffffffffffff", 4), 0U);
  EXPECT_EQ(HttpSessionRouter::home_of("00000007ffffffffffffffffffffffff", 4), 3U);
  EXPECT_EQ(HttpSessionRouter::home_of("0000000affffffffffffffffffffffff", 3), 1U);
  EXPECT_EQ(HttpSessionRouter::home_of("ffffffff000000000000000000000000", 1), 0U);
}

TEST(HttpSessionRouter, CreateHomesTheSessionOnItsShard) {
  Cluster cluster(3);
  for (std::size_t shard = 0; shard < 3; ++shard) {
    for (int i = 0; i < 5; ++i) {
      const std::string handle = cluster.create(shard);
      EXPECT_EQ(HttpSessionRouter::home_of(handle, 3), shard) << handle;
    }
    EXPECT_EQ(cluster.desk(shard).live(), 5U);
  }
}

TEST(HttpSessionRouter, TicketsAreUniqueAcrossShards) {
  Cluster cluster(3);
  std::set<HttpTicket> seen;
  for (int i = 0; i < 10; ++i) {
    for (std::size_t shard = 0; shard < 3; ++shard) {
      const HttpTicket ticket = cluster.desk(shard).new_ticket();
      EXPECT_NE(ticket, 0U);
      EXPECT_TRUE(seen.insert(ticket).second) << ticket;
    }
  }
}

TEST(HttpSessionRouter, ARequestOnAnotherShardRunsAtHomeAndIsAnsweredWhereItArrived) {
  Cluster cluster(3);
  const std::string handle = cluster.create(0);
  const std::string key = cluster.key_on(2);  // the engine is a third shard
  const HttpTicket ticket = cluster.desk(1).new_ticket();
  cluster.desk(1).submit(cluster.now_, ticket, handle, lock_request(key, 0));
  EXPECT_EQ(cluster.desk(1).awaiting_answers(), 1U);
  cluster.settle();
  const Cluster::Answered answer = cluster.reply(ticket);
  EXPECT_EQ(answer.shard, 1U);
  EXPECT_EQ(answer.outcome.code, 200);
  EXPECT_NE(answer.outcome.body.find("\"token\""), std::string::npos) << answer.outcome.body;
  EXPECT_EQ(holders(cluster.engine(2), key), 1U);
  EXPECT_EQ(cluster.desk(1).awaiting_answers(), 0U);
  EXPECT_EQ(cluster.http_messages(), 2U);  // the forward and its answer
}

TEST(HttpSessionRouter, ALocalRequestSendsNoHttpMessage) {
  Cluster cluster(2);
  const std::string handle = cluster.create(1);
  const HttpTicket ticket = cluster.desk(1).new_ticket();
  cluster.desk(1).submit(cluster.now_, ticket, handle, lock_request(cluster.key_on(0), 0));
  cluster.settle();
  EXPECT_EQ(cluster.reply(ticket).outcome.code, 200);
  EXPECT_EQ(cluster.http_messages(), 0U);
}

TEST(HttpSessionRouter, AnUnknownSessionIs410LocallyAndWhenForwarded) {
  Cluster cluster(2);
  std::string unknown(32, '0');  // homed on shard 0
  const HttpTicket local = cluster.desk(0).new_ticket();
  const HttpTicket remote = cluster.desk(1).new_ticket();
  const HttpTicket ping = cluster.desk(1).new_ticket();
  cluster.desk(0).submit(cluster.now_, local, unknown, lock_request("k", 0));
  cluster.desk(1).submit(cluster.now_, remote, unknown, lock_request("k", 0));
  cluster.desk(1).ping(cluster.now_, ping, unknown);
  cluster.settle();
  for (HttpTicket ticket : {local, remote, ping}) {
    EXPECT_EQ(cluster.reply(ticket).outcome.code, 410);
    EXPECT_NE(cluster.reply(ticket).outcome.body.find("session_gone"), std::string::npos);
  }
}

TEST(HttpSessionRouter, ARemoteDeleteAnswersTheLongPoll410BeforeIts204) {
  Cluster cluster(2);
  const std::string holder = cluster.create(0);
  const std::string waiter = cluster.create(0);
  const std::string key = cluster.key_on(1);
  const HttpTicket first = cluster.desk(0).new_ticket();
  cluster.desk(0).submit(cluster.now_, first, holder, lock_request(key, 0));
  cluster.settle();
  ASSERT_EQ(cluster.reply(first).outcome.code, 200);
  // The waiter's long poll arrives on shard 1, its delete on shard 1 too.
  const HttpTicket poll = cluster.desk(1).new_ticket();
  cluster.desk(1).submit(cluster.now_, poll, waiter, lock_request(key, 30));
  cluster.settle();
  EXPECT_EQ(cluster.reply(poll).outcome.code, 0);  // parked
  const HttpTicket remove = cluster.desk(1).new_ticket();
  cluster.desk(1).remove(cluster.now_, remove, waiter);
  cluster.settle();
  EXPECT_EQ(cluster.reply(poll).outcome.code, 410);
  EXPECT_EQ(cluster.reply(remove).outcome.code, 204);
  const std::vector<HttpTicket>& order = cluster.order();
  const auto at = [&](HttpTicket t) { return std::find(order.begin(), order.end(), t); };
  EXPECT_LT(at(poll), at(remove));
  EXPECT_EQ(cluster.desk(0).live(), 1U);
  EXPECT_EQ(waiters(cluster.engine(1), key), 0U);  // the close took the waiter out
}

TEST(HttpSessionRouter, AClientLeavingAForwardedLongPollWithdrawsItAtHome) {
  Cluster cluster(2);
  const std::string holder = cluster.create(0);
  const std::string waiter = cluster.create(0);
  const std::string key = cluster.key_on(0);
  const HttpTicket first = cluster.desk(0).new_ticket();
  cluster.desk(0).submit(cluster.now_, first, holder, lock_request(key, 0));
  cluster.settle();
  const HttpTicket poll = cluster.desk(1).new_ticket();
  cluster.desk(1).submit(cluster.now_, poll, waiter, lock_request(key, 30));
  cluster.settle();
  cluster.desk(1).abandon(cluster.now_, poll);
  EXPECT_EQ(cluster.desk(1).awaiting_answers(), 1U);  // until the home confirms
  cluster.settle();
  EXPECT_EQ(cluster.desk(1).awaiting_answers(), 0U);
  EXPECT_EQ(cluster.reply(poll).outcome.code, 0);  // never answered
  EXPECT_EQ(waiters(cluster.engine(0), key), 0U) << "the long poll still waits";
  // The session is still usable from anywhere.
  const HttpTicket ping = cluster.desk(1).new_ticket();
  cluster.desk(1).ping(cluster.now_, ping, waiter);
  cluster.settle();
  EXPECT_EQ(cluster.reply(ping).outcome.code, 204);
}

TEST(HttpSessionRouter, AnAnswerRacingItsAbandonIsDropped) {
  Cluster cluster(2);
  const std::string handle = cluster.create(0);
  const HttpTicket ticket = cluster.desk(1).new_ticket();
  cluster.desk(1).submit(cluster.now_, ticket, handle, lock_request(cluster.key_on(0), 0));
  cluster.desk(1).abandon(cluster.now_, ticket);  // before the forward even arrived
  cluster.settle();
  EXPECT_EQ(cluster.reply(ticket).outcome.code, 0);
  // The grant that raced the abandon was given back, and the origin forgot the ticket.
  EXPECT_EQ(holders(cluster.engine(0), cluster.key_on(0)), 0U);
  EXPECT_EQ(cluster.desk(1).awaiting_answers(), 0U);
}

TEST(HttpSessionRouter, DrainingRefusesCreatesAndSubmitsButNotPingsOrDeletes) {
  Cluster cluster(2);
  const std::string handle = cluster.create(0);
  cluster.desk(0).begin_drain();
  SplitMix64 random(7);
  EXPECT_EQ(cluster.desk(0).create(cluster.now_, random, "ip").code, 503);
  const HttpTicket local = cluster.desk(0).new_ticket();
  cluster.desk(0).submit(cluster.now_, local, handle, lock_request("k", 0));
  // Shard 1 is not draining, but the session's home is: the home refuses.
  const HttpTicket remote = cluster.desk(1).new_ticket();
  cluster.desk(1).submit(cluster.now_, remote, handle, lock_request("k", 0));
  const HttpTicket ping = cluster.desk(1).new_ticket();
  cluster.desk(1).ping(cluster.now_, ping, handle);
  cluster.settle();
  EXPECT_EQ(cluster.reply(local).outcome.code, 503);
  EXPECT_NE(cluster.reply(local).outcome.body.find("draining"), std::string::npos);
  EXPECT_EQ(cluster.reply(remote).outcome.code, 503);
  EXPECT_EQ(cluster.reply(ping).outcome.code, 204);
  const HttpTicket remove = cluster.desk(1).new_ticket();
  cluster.desk(1).remove(cluster.now_, remove, handle);
  cluster.settle();
  EXPECT_EQ(cluster.reply(remove).outcome.code, 204);
  EXPECT_EQ(cluster.desk(0).live(), 0U);
}

TEST(HttpSessionRouter, ReapedSessionsCloseInTheEnginesTheyTouched) {
  HttpSessionsConfig config;
  config.idle_timeout = Duration::seconds(1);
  Cluster cluster(2, config);
  const std::string handle = cluster.create(0);
  const std::string key = cluster.key_on(1);
  const HttpTicket ticket = cluster.desk(1).new_ticket();
  cluster.desk(1).submit(cluster.now_, ticket, handle, lock_request(key, 0));
  cluster.settle();
  ASSERT_EQ(holders(cluster.engine(1), key), 1U);
  cluster.now_ = cluster.now_ + Duration::seconds(3);
  EXPECT_EQ(cluster.desk(0).reap(cluster.now_), 1U);
  cluster.settle();
  EXPECT_EQ(holders(cluster.engine(1), key), 0U);  // auto-release on close
  EXPECT_EQ(cluster.desk(0).live(), 0U);
}

// ---- lost slots (docs/http-api.md, "Lost slots") ------------------------------------------------

// The token of a grant's body.
std::string token_of(const std::string& body) {
  const std::string marker = "\"token\":\"";
  const std::size_t at = body.find(marker);
  return at == std::string::npos ? "" : body.substr(at + marker.size(), 32);
}

TEST(HttpSessionRouter, ALossRidesOnTheSessionsNextReplyWithABody) {
  Cluster cluster(2);
  const std::string handle = cluster.create(0);
  const std::string other = cluster.create(0);
  const std::string key = cluster.key_on(1);
  // Every request arrives on shard 1: the losses are kept at home and travel in the answers.
  const auto run = [&](const std::string& on, const Request& request) {
    const HttpTicket ticket = cluster.desk(1).new_ticket();
    cluster.desk(1).submit(cluster.now_, ticket, on, request);
    cluster.settle();
    return cluster.reply(ticket).outcome;
  };
  const HttpResponse granted = run(handle, lock_request(key, 0, /*lease_s=*/1));
  ASSERT_EQ(granted.code, 200);
  const std::string token = token_of(granted.body);
  ASSERT_EQ(token.size(), 32U);
  const HttpResponse kept = run(handle, lock_request("kept", 0, 60));
  ASSERT_EQ(kept.code, 200);
  EXPECT_EQ(kept.body.find("lost"), std::string::npos) << kept.body;
  cluster.now_ = cluster.now_ + Duration::seconds(2);
  cluster.tick();
  cluster.settle();
  // A release answers 204: no body to carry the loss, which waits for the next one.
  const HttpResponse released =
      run(handle, test::release_request("kept", Token::parse(token_of(kept.body))));
  EXPECT_EQ(released.code, 204);
  EXPECT_EQ(released.body, "");
  const HttpResponse next = run(handle, lock_request("again", 0));
  EXPECT_EQ(next.code, 200);
  EXPECT_NE(next.body.find("\"lost\":[{\"kind\":\"lock\",\"key\":\"" + key + "\",\"token\":\"" +
                           token + "\",\"reason\":\"expired\"}]"),
            std::string::npos)
      << next.body;
  // Once only, and only to the session that lost it.
  const HttpResponse after = run(handle, lock_request("again", 0));
  EXPECT_EQ(after.body.find("lost"), std::string::npos) << after.body;
  const HttpResponse bystander = run(other, lock_request("free", 0));
  EXPECT_EQ(bystander.body.find("lost"), std::string::npos) << bystander.body;
}

TEST(HttpSessionRouter, AForwardedWatchHearsTheLossesOfItsSessionAndItsEnd) {
  Cluster cluster(2);
  const std::string handle = cluster.create(0);
  const std::string key = cluster.key_on(1);
  const HttpTicket watch = cluster.desk(1).new_ticket();
  cluster.desk(1).watch(cluster.now_, watch, handle);
  cluster.settle();
  std::vector<Cluster::Watched> events = cluster.take_watched(watch);
  ASSERT_EQ(events.size(), 1U);
  EXPECT_EQ(events[0].shard, 1U);  // where its client is
  EXPECT_EQ(events[0].event.kind, HttpWatchEvent::Kind::kOpen);
  EXPECT_EQ(cluster.desk(1).awaiting_answers(), 1U);  // a running watch

  const HttpTicket grant = cluster.desk(0).new_ticket();
  cluster.desk(0).submit(cluster.now_, grant, handle, lock_request(key, 0, 1));
  cluster.settle();
  const std::string token = token_of(cluster.reply(grant).outcome.body);
  cluster.now_ = cluster.now_ + Duration::seconds(2);
  cluster.tick();
  cluster.settle();
  events = cluster.take_watched(watch);
  ASSERT_EQ(events.size(), 1U);
  EXPECT_EQ(events[0].shard, 1U);
  EXPECT_EQ(events[0].event.kind, HttpWatchEvent::Kind::kLost);
  EXPECT_EQ(events[0].event.slot,
            (LostSlot{Namespace::kLock, key, *Token::parse(token), LossReason::kExpired}));

  const HttpTicket remove = cluster.desk(0).new_ticket();
  cluster.desk(0).remove(cluster.now_, remove, handle);
  cluster.settle();
  events = cluster.take_watched(watch);
  ASSERT_EQ(events.size(), 1U);
  EXPECT_EQ(events[0].event.kind, HttpWatchEvent::Kind::kEnd);
  EXPECT_EQ(events[0].event.reason, "session_gone");
  EXPECT_EQ(cluster.reply(watch).outcome.code, 0);    // a watch is never answered too
  EXPECT_EQ(cluster.desk(1).awaiting_answers(), 0U);  // the end is its answer
}

TEST(HttpSessionRouter, AWatchIsReplacedByTheNextAndStopsWhenItsClientLeaves) {
  Cluster cluster(2);
  const std::string handle = cluster.create(0);
  const HttpTicket first = cluster.desk(0).new_ticket();  // local
  cluster.desk(0).watch(cluster.now_, first, handle);
  const HttpTicket second = cluster.desk(1).new_ticket();  // forwarded
  cluster.desk(1).watch(cluster.now_, second, handle);
  cluster.settle();
  std::vector<Cluster::Watched> events = cluster.take_watched(first);
  ASSERT_EQ(events.size(), 2U);
  EXPECT_EQ(events[0].event.kind, HttpWatchEvent::Kind::kOpen);
  EXPECT_EQ(events[1].event.kind, HttpWatchEvent::Kind::kEnd);
  EXPECT_EQ(events[1].event.reason, "replaced");
  ASSERT_EQ(cluster.take_watched(second).size(), 1U);
  // The client of the forwarded one leaves: the home stops it and confirms.
  cluster.desk(1).abandon(cluster.now_, second);
  cluster.settle();
  EXPECT_EQ(cluster.desk(1).awaiting_answers(), 0U);
  EXPECT_EQ(cluster.reply(second).outcome.code, 0);
  // Nothing more comes to it: not a loss, not the session's end.
  const HttpTicket grant = cluster.desk(0).new_ticket();
  cluster.desk(0).submit(cluster.now_, grant, handle, lock_request(cluster.key_on(0), 0, 1));
  cluster.settle();
  cluster.now_ = cluster.now_ + Duration::seconds(2);
  cluster.tick();
  const HttpTicket remove = cluster.desk(1).new_ticket();
  cluster.desk(1).remove(cluster.now_, remove, handle);
  cluster.settle();
  EXPECT_TRUE(cluster.take_watched(second).empty());
  EXPECT_TRUE(cluster.take_watched(first).empty());
}

TEST(HttpSessionRouter, AWatchOfAnUnknownSessionIs410AndDrainingRefusesIt) {
  Cluster cluster(2);
  const std::string unknown(32, '0');  // homed on shard 0
  const HttpTicket local = cluster.desk(0).new_ticket();
  const HttpTicket remote = cluster.desk(1).new_ticket();
  cluster.desk(0).watch(cluster.now_, local, unknown);
  cluster.desk(1).watch(cluster.now_, remote, unknown);
  cluster.settle();
  EXPECT_EQ(cluster.reply(local).outcome.code, 410);
  EXPECT_EQ(cluster.reply(remote).outcome.code, 410);
  EXPECT_TRUE(cluster.take_watched(local).empty());
  EXPECT_TRUE(cluster.take_watched(remote).empty());
  EXPECT_EQ(cluster.desk(1).awaiting_answers(), 0U);
  const std::string handle = cluster.create(0);
  cluster.desk(0).begin_drain();
  const HttpTicket home = cluster.desk(0).new_ticket();
  const HttpTicket away = cluster.desk(1).new_ticket();
  cluster.desk(0).watch(cluster.now_, home, handle);
  cluster.desk(1).watch(cluster.now_, away, handle);  // the draining home refuses it
  cluster.settle();
  EXPECT_EQ(cluster.reply(home).outcome.code, 503);
  EXPECT_EQ(cluster.reply(away).outcome.code, 503);
  EXPECT_EQ(cluster.desk(1).awaiting_answers(), 0U);
}

}  // namespace
}  // namespace turnstile::core
