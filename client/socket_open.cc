// Opening a Socket (socket.h) to an Endpoint (endpoint.h): the TCP connect, each of its addresses
// in turn, then the TLS handshake, all by one deadline.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <utility>

#include "client/endpoint.h"
#include "client/socket.h"

namespace turnstile::client {

namespace detail {
namespace {

bool is_ip_literal(const std::string& host) {
  in6_addr v6{};
  in_addr v4{};
  return inet_pton(AF_INET, host.c_str(), &v4) == 1 || inet_pton(AF_INET6, host.c_str(), &v6) == 1;
}

// Connects to each address of `endpoint` in turn until one answers, by `deadline`.
Result<void> connect_tcp(Socket& socket, const Endpoint& endpoint, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* addresses = nullptr;
  const std::string port = std::to_string(endpoint.port);
  const int resolved = ::getaddrinfo(endpoint.host.c_str(), port.c_str(), &hints, &addresses);
  if (resolved != 0) {
    return make_error(ErrorCode::kConnect,
                      "resolve " + endpoint.host + ": " + ::gai_strerror(resolved));
  }
  std::string last_error = "no address";
  for (addrinfo* address = addresses; address != nullptr; address = address->ai_next) {
    const int socket_fd =
        ::socket(address->ai_family, address->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                 address->ai_protocol);
    if (socket_fd < 0) {
      last_error = errno_text(errno);
      continue;
    }
    int result = ::connect(socket_fd, address->ai_addr, address->ai_addrlen);
    if (result != 0 && errno == EINPROGRESS) {
      if (wait_fd(socket_fd, POLLOUT, deadline)) {
        int socket_error = 0;
        socklen_t length = sizeof socket_error;
        ::getsockopt(socket_fd, SOL_SOCKET, SO_ERROR, &socket_error, &length);
        result = socket_error == 0 ? 0 : -1;
        errno = socket_error;
      } else {
        errno = ETIMEDOUT;
        result = -1;
      }
    }
    if (result == 0) {
      const int one = 1;
      ::setsockopt(socket_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      socket.fd = socket_fd;
      break;
    }
    last_error = errno_text(errno);
    ::close(socket_fd);
  }
  ::freeaddrinfo(addresses);
  if (socket.fd < 0) {
    return make_error(ErrorCode::kConnect, "connect " + endpoint.to_string() + ": " + last_error);
  }
  return {};
}

// The TLS handshake on the connected `socket`, verifying the certificate, by `deadline`.
Result<void> handshake(Socket& socket, const Endpoint& endpoint, const TlsOptions& tls_options,
                       Clock::time_point deadline) {
  ERR_clear_error();
  socket.tls_context = SSL_CTX_new(TLS_client_method());
  if (socket.tls_context == nullptr) return make_error(ErrorCode::kTls, openssl_errors());
  SSL_CTX_set_min_proto_version(socket.tls_context, TLS1_2_VERSION);
  SSL_CTX_set_verify(socket.tls_context, SSL_VERIFY_PEER, nullptr);
  const int loaded =
      tls_options.ca_file.empty()
          ? SSL_CTX_set_default_verify_paths(socket.tls_context)
          : SSL_CTX_load_verify_locations(socket.tls_context, tls_options.ca_file.c_str(), nullptr);
  if (loaded != 1) {
    return make_error(ErrorCode::kTls,
                      "load CA certificates '" + tls_options.ca_file + "': " + openssl_errors());
  }
  socket.tls = SSL_new(socket.tls_context);
  if (socket.tls == nullptr || SSL_set_fd(socket.tls, socket.fd) != 1) {
    return make_error(ErrorCode::kTls, openssl_errors());
  }
  const std::string name =
      tls_options.server_name.empty() ? endpoint.host : tls_options.server_name;
  if (is_ip_literal(name)) {
    if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(socket.tls), name.c_str()) != 1) {
      return make_error(ErrorCode::kTls, "bad IP for verification: " + name);
    }
  } else {
    SSL_set_tlsext_host_name(socket.tls, name.c_str());
    if (SSL_set1_host(socket.tls, name.c_str()) != 1) {
      return make_error(ErrorCode::kTls, "bad host name for verification: " + name);
    }
  }
  while (true) {
    const int result = SSL_connect(socket.tls);
    if (result == 1) return {};
    const int error = SSL_get_error(socket.tls, result);
    if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) {
      const short events = error == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
      if (!wait_fd(socket.fd, events, deadline)) {
        return make_error(ErrorCode::kTls, "TLS handshake timed out");
      }
      continue;
    }
    const long verify = SSL_get_verify_result(socket.tls);
    if (verify != X509_V_OK) {
      return make_error(ErrorCode::kTls, std::string("certificate verification failed: ") +
                                             X509_verify_cert_error_string(verify));
    }
    return make_error(ErrorCode::kTls, "TLS handshake failed: " + openssl_errors());
  }
}

}  // namespace

Result<void> open_socket(Socket& socket, const Endpoint& endpoint, const ConnectOptions& options,
                         Clock::time_point deadline) {
  if (auto connected = connect_tcp(socket, endpoint, deadline); !connected) return connected;
  if (options.tls) return handshake(socket, endpoint, *options.tls, deadline);
  return {};
}

}  // namespace detail
}  // namespace turnstile::client
