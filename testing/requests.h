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

// Any command on a key, every other field at its default.
inline core::Request keyed_request(core::Command command, std::string key = {}) {
  core::Request request;
  request.command = command;
  request.key = std::move(key);
  return request;
}

// `l key timeout [lease]` (or another acquire: `rl`, `wl`...); lease 0 is the server's default.
inline core::Request lock_request(std::string key, std::int64_t timeout_s, std::int64_t lease_s = 0,
                                  core::Command command = core::Command::kLock) {
  core::Request request = keyed_request(command, std::move(key));
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
  core::Request request = keyed_request(command, std::move(key));
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

// `e key [lease]`.
inline core::Request enqueue_request(std::string key, std::int64_t lease_s = 0) {
  core::Request request = keyed_request(core::Command::kEnqueue, std::move(key));
  request.lease_s = lease_s;
  return request;
}

// `se key limit [lease]`.
inline core::Request sem_enqueue_request(std::string key, std::int64_t limit,
                                         std::int64_t lease_s = 0) {
  core::Request request = enqueue_request(std::move(key), lease_s);
  request.command = core::Command::kSemEnqueue;
  request.limit = limit;
  return request;
}

// `w key timeout` (or another wait: `sw`, `rw`...).
inline core::Request wait_request(std::string key, std::int64_t timeout_s,
                                  core::Command command = core::Command::kWait) {
  core::Request request = keyed_request(command, std::move(key));
  request.timeout_s = timeout_s;
  return request;
}

}  // namespace turnstile::test
