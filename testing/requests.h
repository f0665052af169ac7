// Requests as the tests write them: one constructor per kind of engine command, so that a test
// names what it sends and nothing else. Header-only.
//
// Thread affinity: plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "core/protocol.h"
#include "core/types.h"

namespace turnstile::test {

// `l key timeout [lease]`; lease 0 is the server's default.
inline core::Request lock_request(std::string key, std::int64_t timeout_s,
                                  std::int64_t lease_s = 0) {
  core::Request request;
  request.command = core::Command::kLock;
  request.key = std::move(key);
  request.timeout_s = timeout_s;
  request.lease_s = lease_s;
  return request;
}

// `sl key timeout limit [lease]`.
inline core::Request sem_lock_request(std::string key, std::int64_t timeout_s, std::int64_t limit,
                                      std::int64_t lease_s = 0) {
  core::Request request = lock_request(std::move(key), timeout_s, lease_s);
  request.command = core::Command::kSemLock;
  request.limit = limit;
  return request;
}

// `r key token` (or another command that presents a token: `sr`, `n`, `sn`).
inline core::Request release_request(std::string key, std::optional<core::Token> token,
                                     core::Command command = core::Command::kRelease) {
  core::Request request;
  request.command = command;
  request.key = std::move(key);
  request.token = token;
  return request;
}

// `n key token [lease]`.
inline core::Request renew_request(std::string key, std::optional<core::Token> token,
                                   std::int64_t lease_s = 0) {
  core::Request request = release_request(std::move(key), token, core::Command::kRenew);
  request.lease_s = lease_s;
  return request;
}

}  // namespace turnstile::test
