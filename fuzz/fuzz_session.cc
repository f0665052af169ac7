// Fuzzes whole sessions: a few connections to one engine through test::Loopback (the
// single-threaded driver of testing/loopback.h), fed raw bytes, well-formed requests
// (with tokens the server handed out), time steps, disconnects, half-closes, driver closes,
// drains and reads, all decoded from the input.
//
// Input: bytes 0..5 choose the session and engine configuration (auth, timeouts, pipeline and
// output caps, line caps, auto-release, engine limits); then one action per byte (see `Action`),
// each followed by its operands.
//
// Checks, after every action: no driver-contract anomaly in the Loopback; every reply line read
// is a well-formed status line; each live session's parser, pipeline and output buffers stay
// within their caps. At the end every connection is broken and time runs out: every session must
// be finished and the engine must hold nothing.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/protocol.h"
#include "core/session.h"
#include "core/signal_pattern.h"
#include "core/time.h"
#include "core/types.h"
#include "fuzz/fuzz_input.h"
#include "testing/loopback.h"

namespace turnstile::fuzz {
namespace {

using core::Duration;
using core::SessionId;

constexpr const char* kHarness = "fuzz_session";
constexpr std::size_t kConnectionsMax = 6;
constexpr std::size_t kActionsMax = 4000;
constexpr std::size_t kTokensKept = 8;
// Slack over output_max: a reply that arrives for the request in flight is appended even when
// the buffer is full (the cap only stops new requests), plus a draining or closing `error`. With
// at most 8 resources of keys <= 256 bytes, the largest reply (stats) stays far below this.
constexpr std::size_t kOutputSlackBytes = 8192;
const std::string kSecret = "s3cret";

bool tracing() {
  static const bool enabled = [] {
    const char* wanted = std::getenv("TURNSTILE_FUZZ_TRACE");
    return wanted != nullptr && std::string(wanted) == "1";
  }();
  return enabled;
}

// With TURNSTILE_FUZZ_TRACE=1, prints what a session was sent or answered, escaped.
void trace(SessionId id, const char* direction, std::string_view bytes) {
  if (!tracing()) return;
  std::string text;
  for (char c : bytes) {
    if (c == '\n') {
      text += "\\n";
    } else if (c >= 0x20 && c < 0x7f) {
      text += c;
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", static_cast<unsigned char>(c));
      text += escaped;
    }
  }
  std::fprintf(stderr, "s%llu %s %s\n", static_cast<unsigned long long>(id.value), direction,
               text.c_str());
}

void check(bool condition, const std::string_view what) {
  if (!condition) fail(kHarness, what);
}

enum class Action : std::uint8_t {
  kRawBytes,
  kRequest,
  kRequest2,  // twice the weight of raw bytes: well-formed requests reach the engine
  kAdvance,
  kRead,
  kConnect,
  kEnd,   // disconnect, half-close or driver close
  kRare,  // drain, close-notice hold toggling
  kCount,
};

bool is_token(std::string_view text) { return core::Token::parse(text).has_value(); }

// A reply line (without its '\n') as the session may write it: a reply to some command
// (core::decode_reply), with stats JSON that parses, or a signal's push frame.
bool valid_reply_line(std::string_view line) {
  if (const std::optional<core::SignalFrame> frame = core::parse_signal_frame(line)) {
    return core::check_signal_channel(frame->channel) == core::SignalNameError::kNone;
  }
  for (int command = 0; command <= static_cast<int>(core::Command::kSignalPeer); ++command) {
    const std::optional<core::Reply> reply =
        core::decode_reply(static_cast<core::Command>(command), line);
    if (!reply) continue;
    if (!reply->payload.empty() && !nlohmann::json::accept(reply->payload)) continue;
    return true;
  }
  return false;
}

class Scenario {
 public:
  explicit Scenario(FuzzInput& input) : input_(input), config_(config(input)), loopback_(config_) {
    ids_.push_back(loopback_.connect());
  }

  void run() {
    for (std::size_t i = 0; i < kActionsMax && !input_.empty(); ++i) {
      step();
      check_bounds();
    }
    // Every connection breaks; then time runs out, so every lease, timeout and GC falls due.
    for (SessionId id : ids_) {
      loopback_.disconnect(id);
      read_and_check(id);
      check_bounds();
    }
    loopback_.hold_close_notices(false);
    loopback_.advance(Duration::max());
    check_bounds();
    for (SessionId id : ids_) {
      check(loopback_.forgotten(id), "a session is not finished after every connection broke");
      read_and_check(id);
    }
    check(loopback_.engine().resources_count() == 0,
          "the engine still holds resources after every session closed and time ran out");
    check(loopback_.engine().inspect().empty(), "the engine still lists resources");
    check(loopback_.signals().counters().subscriptions == 0,
          "the signal hub still has subscriptions after every session closed");
  }

 private:
  static test::LoopbackConfig config(FuzzInput& input) {
    test::LoopbackConfig config;
    const std::uint8_t flags = input.byte();
    if ((flags & 1) != 0) config.session.auth_secret = kSecret;
    config.auto_release = (flags & 2) == 0;
    config.session.read_timeout = (flags & 4) != 0 ? Duration::seconds(2) : Duration::zero();
    config.session.idle_timeout = (flags & 8) != 0 ? Duration::seconds(5) : Duration::zero();
    config.session.auth_failure_delay = Duration::milliseconds((flags & 16) != 0 ? 100 : 0);
    config.session.pipeline_max = 1 + input.below(8);
    config.session.output_max = 1 + input.below(256) * 4;
    const std::uint8_t lines = input.byte();
    config.session.parser_limits.line_max = (lines & 0x80) != 0 ? 256 : 4 + (lines & 0x3f);
    config.session.parser_limits.long_line_max = (lines & 0x40) != 0 ? 64 * 1024 : 256;
    const std::uint8_t engine = input.byte();
    config.engine.resources_max = 1 + (engine & 7);
    config.engine.waiters_max = (engine >> 3) & 3;
    config.engine.default_lease_s = 1 + ((engine >> 5) & 3);
    config.engine.gc_max_idle = Duration::seconds(static_cast<std::int64_t>(input.below(4)));
    config.salt_seed = input.byte();
    config.signals.max_subscriptions = input.below(4);
    config.signals.queue_max = 1 + input.below(4);
    return config;
  }

  SessionId pick_session() { return ids_[input_.below(ids_.size())]; }

  std::string pick_token() {
    if (tokens_.empty() || input_.below(8) == 0) return "0123456789abcdef0123456789abcdef";
    return tokens_[input_.below(tokens_.size())];
  }

  // A well-formed request (or one with a nearly-right field) from a small vocabulary.
  std::string request() {
    static const std::vector<std::string> kKeys = {"a", "b", "c"};
    static const std::vector<std::string> kSeconds = {"0", "1", "3", "9223372036", "-1"};
    const std::string& key = kKeys[input_.below(kKeys.size())];
    const std::string& timeout = kSeconds[input_.below(3)];
    const std::string lease = input_.flag() ? "" : " " + kSeconds[1 + input_.below(4)];
    const std::string limit = std::to_string(1 + input_.below(3));
    static const std::vector<std::string> kPatterns = {"a", "a.*", "a.>", "*", ">", "a.b*"};
    static const std::vector<std::string> kChannels = {"a", "a.b", "a.b.c", "b", "a.*"};
    const std::string& pattern = kPatterns[input_.below(kPatterns.size())];
    const std::string group = input_.flag() ? "" : "g" + std::to_string(input_.below(2));
    // 29 kinds: the first 19 as before the read-write locks (a byte below 19 picks the same
    // request as it did), then rl wl rr wr rn wn re we rw ww.
    const std::size_t kind = input_.below(29);
    if (kind >= 19) return read_write_request(kind, key, timeout, lease);
    switch (kind) {
      case 0:
        return "l\n" + key + "\n" + timeout + lease + "\n";
      case 1:
        return "sl\n" + key + "\n" + timeout + " " + limit + lease + "\n";
      case 2:
        return "r\n" + key + "\n" + pick_token() + "\n";
      case 3:
        return "sr\n" + key + "\n" + pick_token() + "\n";
      case 4:
        return "n\n" + key + "\n" + pick_token() + lease + "\n";
      case 5:
        return "sn\n" + key + "\n" + pick_token() + lease + "\n";
      case 6:
        return "e\n" + key + "\n" + lease + "\n";
      case 7:
        return "se\n" + key + "\n" + limit + lease + "\n";
      case 8:
        return "w\n" + key + "\n" + timeout + "\n";
      case 9:
        return "sw\n" + key + "\n" + timeout + "\n";
      case 10:
        return "ping\n_\n_\n";
      case 11:
        return "stats\n_\n\n";
      case 12:
        return "auth\n_\n" + (input_.flag() ? kSecret : std::string("wrong")) + "\n";
      case 13:
        return "l\r\n" + key + "\r\n" + timeout + lease + "\r\n";
      case 14:
        return "l\n" + std::string(300, 'k') + "\n1\n";
      case 15:
        return "listen\n" + pattern + "\n" + group + "\n";
      case 16:
        return "unlisten\n" + pattern + "\n" + group + "\n";
      case 17:
        return (input_.flag() ? "signal\n" : "signal-peer\n") +
               kChannels[input_.below(kChannels.size())] + "\n" +
               (input_.below(8) == 0 ? std::string(" ") : "p" + std::to_string(input_.below(9))) +
               "\n";
      default:
        return "x\n" + key + "\n\n";
    }
  }

  // Request kinds 19 to 28: rl wl rr wr rn wn re we rw ww.
  std::string read_write_request(std::size_t kind, const std::string& key,
                                 const std::string& timeout, const std::string& lease) {
    switch (kind) {
      case 19:
        return "rl\n" + key + "\n" + timeout + lease + "\n";
      case 20:
        return "wl\n" + key + "\n" + timeout + lease + "\n";
      case 21:
        return "rr\n" + key + "\n" + pick_token() + "\n";
      case 22:
        return "wr\n" + key + "\n" + pick_token() + "\n";
      case 23:
        return "rn\n" + key + "\n" + pick_token() + lease + "\n";
      case 24:
        return "wn\n" + key + "\n" + pick_token() + lease + "\n";
      case 25:
        return "re\n" + key + "\n" + lease + "\n";
      case 26:
        return "we\n" + key + "\n" + lease + "\n";
      case 27:
        return "rw\n" + key + "\n" + timeout + "\n";
      case 28:
      default:
        return "ww\n" + key + "\n" + timeout + "\n";
    }
  }

  void step() {
    switch (static_cast<Action>(input_.below(static_cast<std::size_t>(Action::kCount)))) {
      case Action::kRawBytes: {
        SessionId id = pick_session();
        std::string_view bytes = input_.bytes(1 + input_.below(32));
        trace(id, "<<", bytes);
        loopback_.send(id, bytes);
        break;
      }
      case Action::kRequest:
      case Action::kRequest2: {
        SessionId id = pick_session();
        std::string bytes = request();
        // Sometimes only part of it, so requests straddle sends and time steps.
        if (input_.below(4) == 0) bytes.resize(input_.below(bytes.size() + 1));
        trace(id, "<<", bytes);
        loopback_.send(id, bytes);
        break;
      }
      case Action::kAdvance: {
        static const std::vector<std::int64_t> kSteps_ms = {0,    1,    99,     100,      1000,
                                                            2000, 5000, 33'000, 3'600'000};
        const std::int64_t step_ms = kSteps_ms[input_.below(kSteps_ms.size())];
        if (tracing()) std::fprintf(stderr, "advance %lld ms\n", static_cast<long long>(step_ms));
        loopback_.advance(Duration::milliseconds(step_ms));
        break;
      }
      case Action::kRead:
        read_and_check(pick_session());
        break;
      case Action::kConnect:
        if (ids_.size() < kConnectionsMax) ids_.push_back(loopback_.connect());
        break;
      case Action::kEnd:
        end_connection();
        break;
      case Action::kRare:
        rare_action();
        break;
      case Action::kCount:
        break;
    }
  }

  // A disconnect, a half-close or a driver close.
  void end_connection() {
    SessionId id = pick_session();
    const std::size_t how = input_.below(3);
    if (tracing()) {
      static const char* const kHow[] = {"disconnect", "half-close", "driver close"};
      std::fprintf(stderr, "s%llu %s\n", static_cast<unsigned long long>(id.value), kHow[how]);
    }
    switch (how) {
      case 0:
        loopback_.disconnect(id);
        break;
      case 1:
        loopback_.half_close(id);
        break;
      default:
        loopback_.close(id);
        break;
    }
  }

  // A drain, a close-notice hold toggled, or a step of a few nanoseconds.
  void rare_action() {
    switch (input_.below(8)) {
      case 0:
        if (tracing()) std::fprintf(stderr, "begin drain\n");
        loopback_.begin_drain();
        break;
      case 1:
      case 2:
        hold_ = !hold_;
        loopback_.hold_close_notices(hold_);
        break;
      default:
        loopback_.advance(Duration::nanoseconds(1 + static_cast<std::int64_t>(input_.below(256))));
        break;
    }
  }

  void read_and_check(SessionId id) {
    std::string text = loopback_.read(id);
    if (!text.empty()) trace(id, ">>", text);
    check(text.empty() || text.back() == '\n', "output ends in a partial line");
    std::string_view rest = text;
    while (!rest.empty()) {
      std::size_t end = rest.find('\n');
      std::string_view line = rest.substr(0, end);
      if (!valid_reply_line(line)) fail(kHarness, "malformed reply line: " + std::string(line));
      std::size_t space = line.find(' ');
      if (space != std::string_view::npos && is_token(line.substr(space + 1, 32))) {
        if (tokens_.size() == kTokensKept) tokens_.erase(tokens_.begin());
        tokens_.emplace_back(line.substr(space + 1, 32));
      }
      rest.remove_prefix(end + 1);
    }
  }

  void check_bounds() {
    const std::vector<std::string>& anomalies = loopback_.anomalies();
    if (!anomalies.empty()) fail(kHarness, "loopback anomaly: " + anomalies.front());
    const core::SessionConfig& session_config = config_.session;
    const std::size_t input_bound =
        2 * session_config.parser_limits.line_max +
        std::max(session_config.parser_limits.line_max, session_config.parser_limits.long_line_max);
    for (SessionId id : ids_) {
      const core::Session* session = loopback_.session(id);
      if (session == nullptr) continue;
      check(session->buffered_input_bytes() <= input_bound, "parser holds more than its bound");
      check(session->queued_requests() <= session_config.pipeline_max,
            "more requests queued than pipeline_max");
      // Signal frames come on top, at most queue_max of them unread, each one line.
      const std::size_t frames_bound =
          config_.signals.queue_max * (session_config.parser_limits.long_line_max + 300);
      check(
          session->output().size() <= session_config.output_max + kOutputSlackBytes + frames_bound,
          "output grows past output_max");
    }
  }

  FuzzInput& input_;
  test::LoopbackConfig config_;
  test::Loopback loopback_;
  std::vector<SessionId> ids_;
  std::vector<std::string> tokens_;  // tokens seen in replies, newest last
  bool hold_ = false;
};

}  // namespace
}  // namespace turnstile::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  turnstile::fuzz::FuzzInput input(data, size);
  turnstile::fuzz::Scenario scenario(input);
  scenario.run();
  return 0;
}
