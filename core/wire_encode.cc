// The wire codec's writing half (core/wire.h): a reply as the line a server sends, and a request
// as the three lines a client sends, each the shortest form that parses back to it. The reading
// half is wire.cc.
#include <charconv>
#include <cstdint>
#include <string>
#include <system_error>

#include "core/assert.h"
#include "core/protocol.h"
#include "core/wire.h"

namespace turnstile::core {
namespace {

// Appends the decimal form of `value`.
void append_int(std::int64_t value, std::string& out) {
  char digits[24];
  const auto [end, error] = std::to_chars(digits, digits + sizeof(digits), value);
  TS_ASSERT(error == std::errc());
  out.append(digits, static_cast<std::size_t>(end - digits));
}

void append_token(const Token& token, std::string& out) {
  char hex[Token::kWireLength];
  token.write_hex(hex);
  out.append(hex, sizeof(hex));
}

// The second line of a request: its key (a stable ref's, the ref), or '_' for none.
void append_key_line(const Request& request, std::string& out) {
  if (request.command == Command::kStableRef) {
    out.append(request.ref);
  } else if ((is_engine_command(request.command) && request.command != Command::kBarrier) ||
             is_signal_command(request.command)) {
    out.append(request.key);
  } else {
    out.push_back('_');
  }
}

void append_lease(const Request& request, std::string& out) {
  if (request.lease_s > 0) {
    out.push_back(' ');
    append_int(request.lease_s, out);
  }
}

// The argument line of a command that is none of a key's slot operations (Operation::kOther).
void append_other_arguments(const Request& request, std::string& out) {
  switch (request.command) {
    case Command::kBarrier:
    case Command::kStableRef:
      out.push_back('_');
      break;
    case Command::kAuth:
      out.append(request.secret);
      break;
    // The kind is left out when it is the default (lock), so an encoding is never longer
    // than the shortest request that parses to it and fits under the same line cap.
    case Command::kCheck:
      TS_ASSERT(request.token.has_value());
      append_token(*request.token, out);
      if (request.space != Namespace::kLock) {
        out.push_back(' ');
        out.append(namespace_word(request.space));
      }
      break;
    case Command::kInspect:
      if (request.space != Namespace::kLock) out.append(namespace_word(request.space));
      break;
    case Command::kLostNotify:
      out.append(request.enable ? "on" : "off");
      break;
    case Command::kForceRelease:
      // Never sent: an operator's request arrives over HTTP. Written for logs and tests.
      out.append(std::to_string(request.fence));
      out.push_back(' ');
      out.append(namespace_word(request.space));
      break;
    case Command::kListen:
    case Command::kUnlisten:
    case Command::kSignal:
    case Command::kSignalPeer:
      out.append(request.text);
      // The parser strips one '\r' from every line, so a payload that itself ends in '\r'
      // goes with one more, as a client must have sent it.
      if (!request.text.empty() && request.text.back() == '\r') out.push_back('\r');
      break;
    default:
      break;  // ping, stats
  }
}

// The third line of a request: its arguments.
void append_arguments(const Request& request, std::string& out) {
  const bool semaphore = command_namespace(request.command) == Namespace::kSemaphore;
  switch (command_operation(request.command)) {
    case Operation::kAcquire:
      append_int(request.timeout_s, out);
      if (semaphore) {
        out.push_back(' ');
        append_int(request.limit, out);
      }
      append_lease(request, out);
      break;
    case Operation::kRelease:
      TS_ASSERT(request.token.has_value());
      append_token(*request.token, out);
      break;
    case Operation::kRenew:
      TS_ASSERT(request.token.has_value());
      append_token(*request.token, out);
      append_lease(request, out);
      break;
    case Operation::kEnqueue:
      if (semaphore) {
        append_int(request.limit, out);
        append_lease(request, out);
      } else if (request.lease_s > 0) {
        append_int(request.lease_s, out);
      }
      break;
    case Operation::kWait:
      append_int(request.timeout_s, out);
      break;
    case Operation::kOther:
      append_other_arguments(request, out);
      break;
  }
}

}  // namespace

void encode_reply(const Reply& reply, std::string& out) {
  // kParked is the engine's internal "answer later"; putting it on the wire is a bug.
  TS_ASSERT(reply.status != Status::kParked);
  out.append(status_name(reply.status));
  if (reply.token) {
    TS_ASSERT(reply.seconds >= 0);
    out.push_back(' ');
    append_token(*reply.token, out);
    out.push_back(' ');
    append_int(reply.seconds, out);
  } else if (reply.seconds >= 0) {
    out.push_back(' ');
    append_int(reply.seconds, out);
  } else if (!reply.payload.empty()) {
    // A reply is exactly one line; compact JSON escapes its newlines.
    TS_ASSERT(reply.payload.find('\n') == std::string::npos);
    out.push_back(' ');
    out.append(reply.payload);
  }
  out.push_back('\n');
}

void encode_request(const Request& request, std::string& out) {
  out.append(command_name(request.command));
  out.push_back('\n');
  append_key_line(request, out);
  out.push_back('\n');
  append_arguments(request, out);
  out.push_back('\n');
}

}  // namespace turnstile::core
