// Socket: the raw I/O under a Connection (connection.cc): one non-blocking TCP socket, with a
// TLS session over it or not. It sends all of a buffer and reads what has arrived, each bounded
// by a deadline. open_socket (endpoint.cc) connects it and completes the TLS handshake. Internal
// to the library: not installed.
//
// Thread affinity: one thread at a time.
#pragma once

#include <openssl/ssl.h>

#include <chrono>
#include <string>
#include <string_view>

#include "client/endpoint.h"
#include "client/result.h"

namespace turnstile::client::detail {

using Clock = std::chrono::steady_clock;

struct Socket {
  int fd = -1;
  SSL_CTX* tls_context = nullptr;
  SSL* tls = nullptr;

  Socket() = default;
  ~Socket() { close(); }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  void close();
  // Sends all of `bytes`, waiting for room at most until `deadline`.
  Result<void> send_all(std::string_view bytes, Clock::time_point deadline);
  // Appends at least one more received byte to `buffer`; an error on EOF, failure or deadline
  // (then, with `timed_out`, *timed_out is set).
  Result<void> fill(std::string& buffer, Clock::time_point deadline, bool* timed_out = nullptr);
  // Plaintext that TLS already took off the socket, which poll() does not see.
  bool tls_pending() const { return tls != nullptr && SSL_pending(tls) > 0; }
};

// Connects `socket` to `endpoint` (each of its addresses in turn), then, with options.tls,
// completes the TLS handshake, all by `deadline`. Errors: kConnect, kTls.
Result<void> open_socket(Socket& socket, const Endpoint& endpoint, const ConnectOptions& options,
                         Clock::time_point deadline);

// Waits for `events` on fd until the deadline; false on timeout.
bool wait_fd(int fd, short events, Clock::time_point deadline);

std::string errno_text(int error_number);
// The OpenSSL errors queued on this thread, "; "-separated (and the queue emptied).
std::string openssl_errors();

}  // namespace turnstile::client::detail
