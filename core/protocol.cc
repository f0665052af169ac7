#include "core/protocol.h"

#include "core/assert.h"

namespace turnstile::core {

bool is_engine_command(Command command) {
  return command != Command::kPing && command != Command::kStats && command != Command::kAuth &&
         command != Command::kStableRef && command != Command::kLostNotify &&
         !is_signal_command(command);
}

bool is_signal_command(Command command) {
  return command == Command::kListen || command == Command::kUnlisten ||
         command == Command::kSignal || command == Command::kSignalPeer;
}

bool is_routed_command(Command command) {
  return is_engine_command(command) || is_signal_command(command) || command == Command::kStats;
}

bool is_valid_stable_ref(std::string_view ref) {
  if (ref.empty() || ref.size() > kMaxStableRefBytes) return false;
  for (const char c : ref) {
    if (c < 0x20 || c > 0x7E) return false;
  }
  return true;
}

Request release_of(const Request& granted_request, const Token& token) {
  Request release;
  release.command = command_like(granted_request.command, Operation::kRelease);
  release.key = granted_request.key;
  release.token = token;
  release.give_back = true;
  return release;
}

Namespace command_namespace(Command command) {
  switch (command) {
    case Command::kSemLock:
    case Command::kSemRelease:
    case Command::kSemRenew:
    case Command::kSemEnqueue:
    case Command::kSemWait:
      return Namespace::kSemaphore;
    case Command::kReadLock:
    case Command::kWriteLock:
    case Command::kReadRelease:
    case Command::kWriteRelease:
    case Command::kReadRenew:
    case Command::kWriteRenew:
    case Command::kReadEnqueue:
    case Command::kWriteEnqueue:
    case Command::kReadWait:
    case Command::kWriteWait:
      return Namespace::kReadWrite;
    default:
      return Namespace::kLock;
  }
}

Operation command_operation(Command command) {
  switch (command) {
    case Command::kLock:
    case Command::kSemLock:
    case Command::kReadLock:
    case Command::kWriteLock:
      return Operation::kAcquire;
    case Command::kRelease:
    case Command::kSemRelease:
    case Command::kReadRelease:
    case Command::kWriteRelease:
      return Operation::kRelease;
    case Command::kRenew:
    case Command::kSemRenew:
    case Command::kReadRenew:
    case Command::kWriteRenew:
      return Operation::kRenew;
    case Command::kEnqueue:
    case Command::kSemEnqueue:
    case Command::kReadEnqueue:
    case Command::kWriteEnqueue:
      return Operation::kEnqueue;
    case Command::kWait:
    case Command::kSemWait:
    case Command::kReadWait:
    case Command::kWriteWait:
      return Operation::kWait;
    default:
      return Operation::kOther;
  }
}

Namespace request_namespace(const Request& request) {
  switch (request.command) {
    case Command::kCheck:
    case Command::kInspect:
    case Command::kForceRelease:
      return request.space;
    default:
      return command_namespace(request.command);
  }
}

std::string_view namespace_word(Namespace ns) {
  switch (ns) {
    case Namespace::kLock:
      return "lock";
    case Namespace::kSemaphore:
      return "sem";
    case Namespace::kReadWrite:
      return "rw";
  }
  TS_ASSERT(false);
}

std::optional<Namespace> parse_namespace_word(std::string_view word) {
  for (Namespace ns : {Namespace::kLock, Namespace::kSemaphore, Namespace::kReadWrite}) {
    if (word == namespace_word(ns)) return ns;
  }
  return std::nullopt;
}

bool is_shared_command(Command command) {
  return command == Command::kReadLock || command == Command::kReadRelease ||
         command == Command::kReadRenew || command == Command::kReadEnqueue ||
         command == Command::kReadWait;
}

Command command_like(Command like, Operation operation) {
  // Rows: lock, semaphore, read, write; columns in Operation order.
  static constexpr Command kTable[4][5] = {
      {Command::kLock, Command::kRelease, Command::kRenew, Command::kEnqueue, Command::kWait},
      {Command::kSemLock, Command::kSemRelease, Command::kSemRenew, Command::kSemEnqueue,
       Command::kSemWait},
      {Command::kReadLock, Command::kReadRelease, Command::kReadRenew, Command::kReadEnqueue,
       Command::kReadWait},
      {Command::kWriteLock, Command::kWriteRelease, Command::kWriteRenew, Command::kWriteEnqueue,
       Command::kWriteWait},
  };
  TS_ASSERT(operation != Operation::kOther && command_operation(like) != Operation::kOther);
  std::size_t row = 0;
  switch (command_namespace(like)) {
    case Namespace::kLock:
      row = 0;
      break;
    case Namespace::kSemaphore:
      row = 1;
      break;
    case Namespace::kReadWrite:
      row = is_shared_command(like) ? 2 : 3;
      break;
  }
  return kTable[row][static_cast<std::size_t>(operation)];
}

std::string_view status_name(Status status) {
  switch (status) {
    case Status::kOk:
      return "ok";
    case Status::kAcquired:
      return "acquired";
    case Status::kQueued:
      return "queued";
    case Status::kTimeout:
      return "timeout";
    case Status::kError:
      return "error";
    case Status::kErrorAuth:
      return "error_auth";
    case Status::kErrorMaxLocks:
      return "error_max_locks";
    case Status::kErrorMaxWaiters:
      return "error_max_waiters";
    case Status::kErrorLimitMismatch:
      return "error_limit_mismatch";
    case Status::kErrorNotEnqueued:
      return "error_not_enqueued";
    case Status::kErrorAlreadyEnqueued:
      return "error_already_enqueued";
    case Status::kErrorLeaseExpired:
      return "error_lease_expired";
    case Status::kErrorDraining:
      return "error_draining";
    case Status::kErrorNotLeader:
      return "error_not_leader";
    case Status::kErrorMaxSubscriptions:
      return "error_max_subscriptions";
    case Status::kParked:
      return "parked";
  }
  TS_ASSERT(false);
}

}  // namespace turnstile::core
