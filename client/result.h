// Error and Result: how every client call reports its outcome, without exceptions.
//
// A call that can fail returns Result<T>: either the value or an Error whose code names the wire
// status (one code per dflockd error status, reference 1.5) or the local failure (connect, TLS,
// I/O, a reply we did not understand, an argument we refused to send).
//
// Thread affinity: plain values, safe anywhere.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace turnstile::client {

enum class ErrorCode : std::uint8_t {
  kTimeout,           // `timeout`: not granted within the request's timeout
  kMaxLocks,          // `error_max_locks`
  kMaxWaiters,        // `error_max_waiters`
  kLimitMismatch,     // `error_limit_mismatch`
  kAlreadyEnqueued,   // `error_already_enqueued`
  kNotEnqueued,       // `error_not_enqueued`
  kLeaseExpired,      // `error_lease_expired`
  kDraining,          // `error_draining` (the server then closes the connection)
  kNotLeader,         // `error_not_leader [addr]`: a cluster follower; the message names the leader
  kMaxSubscriptions,  // `error_max_subscriptions`: the server holds as many as it takes in all
  kAuth,              // `error_auth` (the server then closes the connection)
  kProtocol,          // plain `error`: malformed request, or a token that matches no holder
  kIo,                // the connection failed or closed, or no reply came in time
  kConnect,           // could not resolve or connect to the server
  kTls,               // TLS handshake or certificate verification failed
  kBadReply,          // the server sent a line we do not understand
  kInvalidArgument,   // refused before sending: bad key, token, limit, lease or timeout
};

std::string_view error_code_name(ErrorCode code);

// True when the error says the node could not answer (the connection failed or timed out, it is
// not the leader, it drains, it could not be reached), not that it refused the request: in a
// replicated cluster the request may go to the next leader (members.h, guard.h).
bool node_could_not_answer(ErrorCode code);

struct Error {
  ErrorCode code = ErrorCode::kIo;
  std::string message;  // human-readable detail; stable wording is not promised

  // "<code name>: <message>", or just the code name.
  std::string to_string() const;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::in_place_index<0>, std::move(value)) {}      // NOLINT: implicit
  Result(Error error) : state_(std::in_place_index<1>, std::move(error)) {}  // NOLINT: implicit

  bool ok() const { return state_.index() == 0; }
  explicit operator bool() const { return ok(); }

  // Precondition: ok() (value) or !ok() (error); std::bad_variant_access otherwise.
  T& value() & { return std::get<0>(state_); }
  const T& value() const& { return std::get<0>(state_); }
  T&& value() && { return std::get<0>(std::move(state_)); }
  const Error& error() const { return std::get<1>(state_); }

  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Error> state_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)) {}  // NOLINT: implicit

  bool ok() const { return !error_.has_value(); }
  explicit operator bool() const { return ok(); }
  const Error& error() const { return *error_; }

 private:
  std::optional<Error> error_;
};

inline Error make_error(ErrorCode code, std::string message = {}) {
  return Error{code, std::move(message)};
}

}  // namespace turnstile::client
