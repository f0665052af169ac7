#include "client/result.h"

namespace turnstile::client {

bool node_could_not_answer(ErrorCode code) {
  return code == ErrorCode::kIo || code == ErrorCode::kNotLeader || code == ErrorCode::kDraining ||
         code == ErrorCode::kConnect;
}

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kTimeout:
      return "timeout";
    case ErrorCode::kMaxLocks:
      return "max_locks";
    case ErrorCode::kMaxWaiters:
      return "max_waiters";
    case ErrorCode::kLimitMismatch:
      return "limit_mismatch";
    case ErrorCode::kAlreadyEnqueued:
      return "already_enqueued";
    case ErrorCode::kNotEnqueued:
      return "not_enqueued";
    case ErrorCode::kLeaseExpired:
      return "lease_expired";
    case ErrorCode::kDraining:
      return "draining";
    case ErrorCode::kNotLeader:
      return "not_leader";
    case ErrorCode::kMaxSubscriptions:
      return "max_subscriptions";
    case ErrorCode::kAuth:
      return "auth";
    case ErrorCode::kProtocol:
      return "protocol";
    case ErrorCode::kIo:
      return "io";
    case ErrorCode::kConnect:
      return "connect";
    case ErrorCode::kTls:
      return "tls";
    case ErrorCode::kBadReply:
      return "bad_reply";
    case ErrorCode::kInvalidArgument:
      return "invalid_argument";
  }
  return "unknown";
}

std::string Error::to_string() const {
  std::string text(error_code_name(code));
  if (!message.empty()) text += ": " + message;
  return text;
}

}  // namespace turnstile::client
