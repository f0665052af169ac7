#include "core/log_entry.h"

#include <algorithm>

#include "core/bytes.h"
#include "core/wire.h"

namespace turnstile::core {

namespace {

enum class Tag : std::uint8_t { kSubmit = 1, kClose = 2, kCancel = 3, kTick = 4 };

void write_request(ByteWriter& w, const Request& request) {
  w.u8(static_cast<std::uint8_t>(request.command));
  w.bytes(request.key);
  w.i64(request.timeout_s);
  w.i64(request.lease_s);
  w.i64(request.limit);
  w.u8(request.token ? 1 : 0);
  if (request.token) {
    w.u64(request.token->fence.value);
    w.u64(request.token->salt);
  }
  w.bytes(request.ref);
  w.u8(request.give_back ? 1 : 0);
  w.u8(static_cast<std::uint8_t>(request.space));
  w.u64(request.fence);
  w.u8(request.clear_delay ? 1 : 0);
}

// `version`: of the entry; version 2 had no give-back flag, version 3 no namespace and fence
// (check, inspect and force-release came with version 4), version 4 no clear-delay flag (a
// force-release of version 4 leaves the lock-delay alone, as it did then).
bool read_request(ByteReader& r, std::uint8_t version, Request& request) {
  std::uint8_t command = 0;
  std::uint8_t has_token = 0;
  if (!r.u8(command) || command > static_cast<std::uint8_t>(Command::kForceRelease)) return false;
  request.command = static_cast<Command>(command);
  if (!is_engine_command(request.command)) return false;
  // A barrier names no key; every other engine command names a valid one.
  if (!r.bytes(request.key)) return false;
  if (request.command == Command::kBarrier ? !request.key.empty()
                                           : key_problem(request.key).has_value()) {
    return false;
  }
  if (!r.i64(request.timeout_s) || !r.i64(request.lease_s) || !r.i64(request.limit)) return false;
  if (!timeout_in_bounds(request.timeout_s) || !lease_in_bounds(request.lease_s) ||
      !limit_in_bounds(request.limit)) {
    return false;
  }
  if (!r.u8(has_token) || has_token > 1) return false;
  if (has_token == 1) {
    Token token;
    if (!r.u64(token.fence.value) || !r.u64(token.salt)) return false;
    request.token = token;
  }
  if (!r.bytes(request.ref) || (!request.ref.empty() && !is_valid_stable_ref(request.ref))) {
    return false;
  }
  if (version >= 3) {
    std::uint8_t give_back = 0;
    if (!r.u8(give_back) || give_back > 1) return false;
    // Only a release gives back.
    if (give_back == 1 && command_operation(request.command) != Operation::kRelease) return false;
    request.give_back = give_back == 1;
  }
  if (version >= 4) {
    std::uint8_t space = 0;
    if (!r.u8(space) || space > static_cast<std::uint8_t>(Namespace::kReadWrite) ||
        !r.u64(request.fence)) {
      return false;
    }
    request.space = static_cast<Namespace>(space);
    // Only a force-release names a fence.
    if (request.fence != 0 && request.command != Command::kForceRelease) return false;
  }
  if (version >= 5) {
    std::uint8_t clear_delay = 0;
    if (!r.u8(clear_delay) || clear_delay > 1) return false;
    // Only a force-release clears a lock-delay.
    if (clear_delay == 1 && request.command != Command::kForceRelease) return false;
    request.clear_delay = clear_delay == 1;
  }
  return true;
}

}  // namespace

std::string encode_entry(const LogEntry& entry) {
  ByteWriter w;
  w.u8(kLogEntryVersion);
  w.i64(entry.time.ns());
  w.u64(entry.salt);
  w.u64(entry.commands.size());
  for (const LogCommand& command : entry.commands) {
    std::visit(
        [&w](const auto& c) {
          using C = std::decay_t<decltype(c)>;
          if constexpr (std::is_same_v<C, command::Submit>) {
            w.u8(static_cast<std::uint8_t>(Tag::kSubmit));
            w.u64(c.session.value);
            write_request(w, c.request);
          } else if constexpr (std::is_same_v<C, command::Close>) {
            w.u8(static_cast<std::uint8_t>(Tag::kClose));
            w.u64(c.session.value);
            w.u8(c.auto_release ? 1 : 0);
            w.i64(c.orphan_ttl.ns());
          } else if constexpr (std::is_same_v<C, command::Cancel>) {
            w.u8(static_cast<std::uint8_t>(Tag::kCancel));
            w.u64(c.session.value);
          } else {
            w.u8(static_cast<std::uint8_t>(Tag::kTick));
          }
        },
        command);
  }
  return w.take();
}

std::optional<LogEntry> decode_entry(std::string_view bytes) {
  ByteReader r(bytes);
  std::uint8_t version = 0;
  // Version 2 (before the give-back flag) is still read: a log written by it applies alike.
  if (!r.u8(version) || version < 2 || version > kLogEntryVersion) return std::nullopt;
  LogEntry entry;
  std::int64_t time = 0;
  std::uint64_t count = 0;
  if (!r.i64(time) || !r.u64(entry.salt) || !r.count(count, 1)) {
    return std::nullopt;  // every command takes at least one byte
  }
  entry.time = Instant::from_ns(time);
  entry.commands.reserve(static_cast<std::size_t>(count));
  for (std::uint64_t i = 0; i < count; ++i) {
    std::uint8_t tag = 0;
    if (!r.u8(tag)) return std::nullopt;
    switch (static_cast<Tag>(tag)) {
      case Tag::kSubmit: {
        command::Submit submit;
        if (!r.u64(submit.session.value) || submit.session.value == 0 ||
            !read_request(r, version, submit.request)) {
          return std::nullopt;
        }
        entry.commands.emplace_back(std::move(submit));
        break;
      }
      case Tag::kClose: {
        command::Close close;
        std::uint8_t auto_release = 0;
        std::int64_t orphan_ttl = 0;
        if (!r.u64(close.session.value) || close.session.value == 0 || !r.u8(auto_release) ||
            auto_release > 1 || !r.i64(orphan_ttl) || orphan_ttl < 0) {
          return std::nullopt;
        }
        close.auto_release = auto_release == 1;
        close.orphan_ttl = Duration::nanoseconds(orphan_ttl);
        entry.commands.emplace_back(close);
        break;
      }
      case Tag::kCancel: {
        command::Cancel cancel;
        if (!r.u64(cancel.session.value) || cancel.session.value == 0) return std::nullopt;
        entry.commands.emplace_back(cancel);
        break;
      }
      case Tag::kTick:
        entry.commands.emplace_back(command::Tick{});
        break;
      default:
        return std::nullopt;
    }
  }
  if (r.left() != 0) return std::nullopt;
  return entry;
}

void LogClock::take_over(Instant clock, Instant last_entry_time) {
  // An empty log starts at the leader's clock.
  const Instant start = last_entry_time == Instant::min() ? clock : last_entry_time;
  offset_ = start - clock;
  last_ = std::max(last_, start);
}

Instant LogClock::peek(Instant clock) const { return std::max(last_, clock + offset_); }

Instant LogClock::next(Instant clock) {
  last_ = std::max(last_, clock + offset_);
  return last_;
}

}  // namespace turnstile::core
