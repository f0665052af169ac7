#include "sim/tcp_client.h"

#include <iterator>
#include <utility>

#include "core/wire.h"

namespace turnstile::sim {

namespace {

using core::Command;
using core::Namespace;

// The read-write keys of `slots` (held or enqueued).
template <typename Map>
std::vector<ResourceKey> read_write_keys(const Map& slots) {
  std::vector<ResourceKey> keys;
  for (const auto& [key, value] : slots) {
    if (key.first == Namespace::kReadWrite) keys.push_back(key);
  }
  return keys;
}

}  // namespace

TcpClientModel::TcpClientModel(Prng& prng, RequestMix mix, History& history,
                               std::map<std::string, std::uint64_t>& coverage, Fail fail)
    : prng_(prng),
      mix_(std::move(mix)),
      history_(history),
      coverage_(coverage),
      fail_(std::move(fail)) {}

std::int64_t TcpClientModel::draw(const Draw& draw) {
  if (draw.zero_permille > 0 && prng_.chance(draw.zero_permille)) return 0;
  return prng_.between(draw.low, draw.high);
}

bool TcpClientModel::kind(bool shared, bool other_kind) {
  if (!other_kind) return shared;
  ++coverage_["rw-other-kind"];
  return !shared;
}

std::int64_t TcpClientModel::limit_of(const std::string& key) const {
  if (mix_.semaphore_limit > 0) return mix_.semaphore_limit;
  // Fixed per key so that limit mismatches are the exception the workload makes on purpose.
  return 1 + static_cast<std::int64_t>(key.back() - '0' + 1) % 3;
}

// ---- what a client asks -------------------------------------------------------------------------

bool TcpClientModel::pick(TcpClient& client, Outstanding& out, std::string& bytes) {
  const bool picked = mix_.rw_permille > 0 && prng_.chance(mix_.rw_permille)
                          ? pick_rw(client, out, bytes)
                          : pick_plain(client, out, bytes);
  out.request.ref = client.ref;  // the session's, for the History (the wire does not carry it)
  return picked;
}

bool TcpClientModel::pick_plain(TcpClient& client, Outstanding& out, std::string& bytes) {
  const std::uint64_t dice = prng_.below(1000);
  const bool semaphore = prng_.chance(mix_.semaphore_permille);
  const std::int64_t ahead_lease = mix_.draws_ahead ? draw(mix_.lease) : 0;
  core::Request& request = out.request;
  if (dice < mix_.malformed_below) {
    pick_malformed(out, bytes);
  } else if (dice < mix_.too_long_below) {
    out.malformed = true;
    out.closes = true;
    bytes = "l\n" + std::string(300, 'k') + "\n1\n";
  } else if (dice < mix_.ping_stats_below) {
    const bool ping = mix_.ping_permille > 0 && prng_.chance(mix_.ping_permille);
    request.command = ping ? Command::kPing : Command::kStats;
  } else if (dice < mix_.lock_below) {
    pick_lock(client, request, semaphore, ahead_lease);
  } else if (dice < mix_.release_below) {
    return pick_release(client, out, bytes, semaphore);
  } else if (dice < mix_.renew_below) {
    return pick_renew(client, request, ahead_lease);
  } else if (dice < mix_.enqueue_below) {
    pick_enqueue(request, semaphore, ahead_lease);
  } else {
    pick_wait(client, request, semaphore);
  }
  return true;
}

void TcpClientModel::pick_malformed(Outstanding& out, std::string& bytes) {
  // One request's worth of lines, answered `error`.
  static const char* const kMalformed[] = {"x\ny\nz\n",     "l\n\n5\n",    "l\nk\n-1\n",
                                           "sl\nk\n1 0\n",  "l\nk\nabc\n", "r\nk\n\n",
                                           "n\nk\ntok 0\n", "l\nk a\n1\n", "w\nk\n1 2 3\n"};
  out.malformed = true;
  bytes = kMalformed[prng_.below(std::size(kMalformed))];
}

void TcpClientModel::pick_lock(TcpClient& client, core::Request& request, bool semaphore,
                               std::int64_t lease_ahead) {
  ResourceKey key = mix_.pick_key(semaphore);
  // A client with a ref comes back for what it held on an earlier connection: the same token, if
  // its slot was kept (adoption), or a new grant, or none.
  if (!client.ref.empty() && prng_.chance(400)) {
    for (const auto& [held_key, token] : client.view.held) {
      if (client.held_on[held_key] != client.connection) {
        key = held_key;
        ++coverage_["adopt-try"];
        break;
      }
    }
  }
  request.command = key.first == Namespace::kSemaphore ? Command::kSemLock : Command::kLock;
  request.key = key.second;
  request.timeout_s = draw(mix_.lock_timeout);
  request.lease_s = lease(lease_ahead);
  if (key.first == Namespace::kSemaphore) {
    request.limit = limit_of(key.second);
    if (mix_.limit_mismatch_permille > 0 && prng_.chance(mix_.limit_mismatch_permille)) {
      request.limit += 1;  // a mismatch
    }
  }
}

bool TcpClientModel::pick_release(TcpClient& client, Outstanding& out, std::string& bytes,
                                  bool semaphore) {
  // Mostly a token held, sometimes a stale, foreign or malformed one.
  const std::map<ResourceKey, core::Token>& held = client.view.held;
  auto any_held = [&] {
    return std::next(held.begin(), static_cast<long>(prng_.below(held.size())));
  };
  auto chosen = held.end();
  if (mix_.draws_ahead) {
    if (!held.empty()) chosen = any_held();
    if (chosen != held.end() && !prng_.chance(mix_.release_held_permille)) chosen = held.end();
  } else if (!held.empty() && prng_.chance(mix_.release_held_permille)) {
    chosen = any_held();
  }
  ResourceKey key;
  std::optional<core::Token> token;
  if (chosen != held.end()) {
    key = chosen->first;
    token = chosen->second;
  } else {
    if (token_pool_.empty() && mix_.bad_token_permille == 0) return false;
    key = mix_.pick_key(semaphore);
    if (!token_pool_.empty()) token = token_pool_[prng_.below(token_pool_.size())];
  }
  out.request.command =
      key.first == Namespace::kSemaphore ? Command::kSemRelease : Command::kRelease;
  out.request.key = key.second;
  set_release_token(out, bytes, key.second, token);
  return true;
}

void TcpClientModel::set_release_token(Outstanding& out, std::string& bytes, const std::string& key,
                                       const std::optional<core::Token>& token) {
  if (!token || (mix_.bad_token_permille > 0 && prng_.chance(mix_.bad_token_permille))) {
    out.malformed = true;  // not a token we could have issued: `error`, nothing changes
    bytes = std::string(core::command_name(out.request.command)) + "\n" + key + "\nNOT-A-TOKEN\n";
  } else {
    out.request.token = token;
  }
}

bool TcpClientModel::pick_renew(TcpClient& client, core::Request& request,
                                std::int64_t lease_ahead) {
  // Renew a token held (sometimes too late: leases are short and think time is long), from
  // whichever connection the client has now.
  if (client.view.held.empty()) {
    if (!mix_.idle_renew_pings) return false;
    request.command = Command::kPing;
    return true;
  }
  auto it =
      std::next(client.view.held.begin(), static_cast<long>(prng_.below(client.view.held.size())));
  request.command = it->first.first == Namespace::kSemaphore ? Command::kSemRenew : Command::kRenew;
  request.key = it->first.second;
  request.token = it->second;
  request.lease_s = lease(lease_ahead);
  return true;
}

void TcpClientModel::pick_enqueue(core::Request& request, bool semaphore,
                                  std::int64_t lease_ahead) {
  // Two-phase step one.
  const ResourceKey key = mix_.pick_key(semaphore);
  request.command = semaphore ? Command::kSemEnqueue : Command::kEnqueue;
  request.key = key.second;
  request.lease_s = lease(lease_ahead);
  if (semaphore) request.limit = limit_of(key.second);
}

void TcpClientModel::pick_wait(TcpClient& client, core::Request& request, bool semaphore) {
  // Two-phase step two: mostly for a key we enqueued.
  const std::map<ResourceKey, std::int64_t>& enqueued = client.view.enqueued;
  ResourceKey key;
  if (mix_.draws_ahead) key = mix_.pick_key(semaphore);
  if (!enqueued.empty() && prng_.chance(900)) {
    key = std::next(enqueued.begin(), static_cast<long>(prng_.below(enqueued.size())))->first;
  } else if (!mix_.draws_ahead) {
    key = mix_.pick_key(semaphore);
  }
  request.command = key.first == Namespace::kSemaphore ? Command::kSemWait : Command::kWait;
  request.key = key.second;
  request.timeout_s = draw(mix_.wait_timeout);
}

// Read-write locks: rl wl rr wr rn wn re we rw ww; releases, renewals and waits mostly of what the
// client holds or enqueued, with its kind, now and then of the other kind (answered `error`,
// changing nothing).
bool TcpClientModel::pick_rw(TcpClient& client, Outstanding& out, std::string& bytes) {
  const std::string ahead_key = mix_.draws_ahead ? mix_.pick_key(false).second : std::string();
  const bool read = prng_.chance(600);
  const bool other_kind = prng_.chance(80);
  const std::int64_t ahead_lease = mix_.draws_ahead ? draw(mix_.lease) : 0;
  const std::uint64_t dice = prng_.below(1000);
  core::Request& request = out.request;
  if (dice < mix_.rw_lock_below) {
    request.command = read ? Command::kReadLock : Command::kWriteLock;
    request.key = rw_key(ahead_key);
    request.timeout_s = draw(mix_.lock_timeout);
    request.lease_s = lease(ahead_lease);
  } else if (dice < mix_.rw_release_below) {
    return pick_rw_release(client, out, bytes, read, other_kind, ahead_key);
  } else if (dice < mix_.rw_renew_below) {
    return pick_rw_renew(client, request, other_kind, ahead_lease);
  } else if (dice < mix_.rw_enqueue_below) {
    request.command = read ? Command::kReadEnqueue : Command::kWriteEnqueue;
    request.key = rw_key(ahead_key);
    request.lease_s = lease(ahead_lease);
  } else {
    pick_rw_wait(client, request, read, other_kind, ahead_key);
  }
  return true;
}

bool TcpClientModel::pick_rw_release(TcpClient& client, Outstanding& out, std::string& bytes,
                                     bool read, bool other_kind, const std::string& ahead_key) {
  // Mostly a slot we hold, with its own kind; sometimes the other kind (`error`, and the slot
  // stays), a stale or foreign token, or a malformed one.
  const std::vector<ResourceKey> held = read_write_keys(client.view.held);
  ResourceKey target;
  std::optional<core::Token> token;
  bool shared = read;
  if (!held.empty() && prng_.chance(mix_.rw_release_held_permille)) {
    target = held[prng_.below(held.size())];
    token = client.view.held.at(target);
    shared = kind(client.view.held_shared.count(target) != 0, other_kind);
  } else {
    if (token_pool_.empty() && mix_.bad_token_permille == 0) return false;
    target = {Namespace::kReadWrite, rw_key(ahead_key)};
    if (!token_pool_.empty()) token = token_pool_[prng_.below(token_pool_.size())];
  }
  out.request.command = shared ? Command::kReadRelease : Command::kWriteRelease;
  out.request.key = target.second;
  set_release_token(out, bytes, target.second, token);
  return true;
}

bool TcpClientModel::pick_rw_renew(TcpClient& client, core::Request& request, bool other_kind,
                                   std::int64_t lease_ahead) {
  // Renew a slot we hold (sometimes too late, sometimes naming the other kind).
  const std::vector<ResourceKey> held = read_write_keys(client.view.held);
  if (held.empty()) {
    if (!mix_.idle_renew_pings) return false;
    request.command = Command::kPing;
    return true;
  }
  const ResourceKey target = held[prng_.below(held.size())];
  const bool shared = kind(client.view.held_shared.count(target) != 0, other_kind);
  request.command = shared ? Command::kReadRenew : Command::kWriteRenew;
  request.key = target.second;
  request.token = client.view.held.at(target);
  request.lease_s = lease(lease_ahead);
  return true;
}

void TcpClientModel::pick_rw_wait(TcpClient& client, core::Request& request, bool read,
                                  bool other_kind, const std::string& ahead_key) {
  // Two-phase step two: mostly for a read-write key we enqueued, with its kind.
  const std::vector<ResourceKey> enqueued = read_write_keys(client.view.enqueued);
  ResourceKey target;
  bool shared = read;
  if (!enqueued.empty() && prng_.chance(900)) {
    target = enqueued[prng_.below(enqueued.size())];
    shared = kind(client.view.enqueued_shared.count(target) != 0, other_kind);
  } else {
    target = {Namespace::kReadWrite, rw_key(ahead_key)};
  }
  request.command = shared ? Command::kReadWait : Command::kWriteWait;
  request.key = target.second;
  request.timeout_s = draw(mix_.wait_timeout);
}

// ---- what a client makes of a reply -------------------------------------------------------------

void TcpClientModel::record_call(TcpClient& client, Outstanding& out, std::int64_t now) {
  out.sent_at = now;
  if (out.malformed || !core::is_engine_command(out.request.command)) return;
  out.op = history_.call(client.id, client.connection, out.request, now);
  if (!mix_.remembers_slots) return;
  const core::Operation operation = core::command_operation(out.request.command);
  if (operation == core::Operation::kAcquire || operation == core::Operation::kEnqueue ||
      operation == core::Operation::kWait) {
    const std::string key =
        key_word({core::command_namespace(out.request.command), out.request.key});
    client.slots.asked_here.insert(key);
    client.slots.asked_ever.insert(key);
  }
}

std::optional<core::Reply> TcpClientModel::decode(const Outstanding& out, std::string_view line) {
  if (out.malformed) {
    if (line != "error") fail_("protocol", "malformed request answered " + std::string(line));
    return std::nullopt;
  }
  std::optional<core::Reply> reply = core::decode_reply(out.request.command, line);
  if (!reply) {
    fail_("protocol", std::string(core::command_name(out.request.command)) + " answered " +
                          std::string(line) + ", which is no reply to it");
  }
  return reply;
}

void TcpClientModel::take_reply(TcpClient& client, const Outstanding& out, const core::Reply& reply,
                                std::int64_t now) {
  const core::Request& request = out.request;
  const ResourceKey key{core::command_namespace(request.command), request.key};
  std::optional<core::Token> before;
  if (auto it = client.view.held.find(key); it != client.view.held.end()) before = it->second;
  const std::optional<core::Token> granted =
      client.view.on_reply(request, reply, out.sent_at, out.op, history_);
  if (reply.token && key.first == Namespace::kReadWrite) {
    ++coverage_[core::is_shared_command(request.command) ? "rw-read-granted" : "rw-write-granted"];
  }
  if (mix_.remembers_slots) {
    auto slot_of = [&](const core::Token& token) {
      return key_word(key) + " " + token.to_string();
    };
    if (granted) client.slots.granted.insert(slot_of(*granted));
    if (request.token && reply.status == core::Status::kOk &&
        core::command_operation(request.command) == core::Operation::kRelease) {
      client.slots.released.insert(slot_of(*request.token));
    }
  }
  if (granted) {
    if (before == granted && client.held_on[key] != client.connection) ++coverage_["adopted"];
    client.held_on[key] = client.connection;
    keep_token(*granted);
  }
  if (out.op != 0) {
    history_.complete(out.op, now, std::string(core::status_name(reply.status)), reply.token,
                      reply.seconds);
  }
}

void TcpClientModel::keep_token(const core::Token& token) {
  token_pool_.push_back(token);
  if (token_pool_.size() > mix_.token_pool_max) {
    token_pool_.erase(token_pool_.begin(),
                      token_pool_.begin() + static_cast<long>(mix_.token_pool_max / 2));
  }
}

std::string TcpClientModel::key_word(const ResourceKey& key) {
  return std::string(core::namespace_word(key.first)) + " " + key.second;
}

std::string TcpClientModel::describe(const Outstanding& out) {
  if (out.ref_line) return "stable-ref";
  if (out.notify_line) return "lost-notify";
  if (out.malformed) return "malformed";
  return std::string(core::command_name(out.request.command)) + " " + out.request.key +
         " timeout " + std::to_string(out.request.timeout_s);
}

}  // namespace turnstile::sim
