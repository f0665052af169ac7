#include "core/log_entry.h"

#include <algorithm>

#include "core/wire.h"

namespace turnstile::core {

namespace {

enum class Tag : std::uint8_t { kSubmit = 1, kClose = 2, kCancel = 3, kTick = 4 };

class Writer {
 public:
  void u8(std::uint8_t value) { out_.push_back(static_cast<char>(value)); }
  void u64(std::uint64_t value) {
    for (int i = 0; i < 8; ++i) u8(static_cast<std::uint8_t>(value >> (8 * i)));
  }
  void i64(std::int64_t value) { u64(static_cast<std::uint64_t>(value)); }
  void bytes(std::string_view value) {
    u64(value.size());
    out_.append(value);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool u8(std::uint8_t& value) {
    if (in_.empty()) return false;
    value = static_cast<std::uint8_t>(in_.front());
    in_.remove_prefix(1);
    return true;
  }
  bool u64(std::uint64_t& value) {
    if (in_.size() < 8) return false;
    value = 0;
    for (int i = 0; i < 8; ++i) {
      value |=
          static_cast<std::uint64_t>(static_cast<std::uint8_t>(in_[static_cast<std::size_t>(i)]))
          << (8 * i);
    }
    in_.remove_prefix(8);
    return true;
  }
  bool i64(std::int64_t& value) {
    std::uint64_t raw = 0;
    if (!u64(raw)) return false;
    value = static_cast<std::int64_t>(raw);
    return true;
  }
  bool bytes(std::string& value) {
    std::uint64_t size = 0;
    if (!u64(size) || size > in_.size()) return false;
    value.assign(in_.substr(0, static_cast<std::size_t>(size)));
    in_.remove_prefix(static_cast<std::size_t>(size));
    return true;
  }
  std::size_t left() const { return in_.size(); }

 private:
  std::string_view in_;
};

void write_request(Writer& w, const Request& request) {
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
}

bool read_request(Reader& r, Request& request) {
  std::uint8_t command = 0;
  std::uint8_t has_token = 0;
  if (!r.u8(command) || command > static_cast<std::uint8_t>(Command::kAuth)) return false;
  request.command = static_cast<Command>(command);
  if (!is_engine_command(request.command)) return false;
  if (!r.bytes(request.key) || key_problem(request.key)) return false;
  if (!r.i64(request.timeout_s) || !r.i64(request.lease_s) || !r.i64(request.limit)) return false;
  if (request.timeout_s < 0 || request.timeout_s > kMaxSeconds) return false;
  if (request.lease_s < 0 || request.lease_s > kMaxSeconds) return false;
  if (request.limit < 1 || request.limit > kMaxSemaphoreLimit) return false;
  if (!r.u8(has_token) || has_token > 1) return false;
  if (has_token == 1) {
    Token token;
    if (!r.u64(token.fence.value) || !r.u64(token.salt)) return false;
    request.token = token;
  }
  return true;
}

}  // namespace

std::string encode_entry(const LogEntry& entry) {
  Writer w;
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
  Reader r(bytes);
  std::uint8_t version = 0;
  if (!r.u8(version) || version != kLogEntryVersion) return std::nullopt;
  LogEntry entry;
  std::int64_t time = 0;
  std::uint64_t count = 0;
  if (!r.i64(time) || !r.u64(entry.salt) || !r.u64(count)) return std::nullopt;
  entry.time = Instant::from_ns(time);
  if (count > r.left()) return std::nullopt;  // every command takes at least one byte
  entry.commands.reserve(static_cast<std::size_t>(count));
  for (std::uint64_t i = 0; i < count; ++i) {
    std::uint8_t tag = 0;
    if (!r.u8(tag)) return std::nullopt;
    switch (static_cast<Tag>(tag)) {
      case Tag::kSubmit: {
        command::Submit submit;
        if (!r.u64(submit.session.value) || submit.session.value == 0 ||
            !read_request(r, submit.request)) {
          return std::nullopt;
        }
        entry.commands.emplace_back(std::move(submit));
        break;
      }
      case Tag::kClose: {
        command::Close close;
        std::uint8_t auto_release = 0;
        if (!r.u64(close.session.value) || close.session.value == 0 || !r.u8(auto_release) ||
            auto_release > 1) {
          return std::nullopt;
        }
        close.auto_release = auto_release == 1;
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

Instant LogClock::next(Instant clock) {
  last_ = std::max(last_, clock + offset_);
  return last_;
}

}  // namespace turnstile::core
