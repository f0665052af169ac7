// turnstile-bench's HTTP sessions (http_session.h).
#include "bench/tools/http_session.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "bench/tools/bench_protocol.h"
#include "bench/tools/socket_steps.h"

namespace turnstile::bench {
namespace {

// One request and its whole response on a non-blocking socket, outside the load loop (HTTP
// session create and delete); waits at most 10 s.
struct Exchange {
  int status = 0;
  std::string body;
  std::string error;  // not empty: no usable response
};

Exchange http_exchange(int fd, const std::string& request) {
  Exchange result;
  std::size_t sent = 0;
  std::string in;
  const TimePoint deadline = Clock::now() + std::chrono::seconds(10);
  for (;;) {
    const bool sending = sent < request.size();
    char buffer[4096];
    const ssize_t n = sending
                          ? ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL)
                          : ::recv(fd, buffer, sizeof buffer, 0);
    if (n > 0 && sending) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n > 0) {
      in.append(buffer, static_cast<std::size_t>(n));
      const HttpResponse response = parse_http_response(in);
      if (response.state == HttpResponse::State::kMalformed) {
        result.error = "malformed HTTP response: " + in.substr(0, 200);
        return result;
      }
      if (response.state == HttpResponse::State::kComplete) {
        result.status = response.status;
        result.body = std::string(response.body);
        if (response.size != in.size()) result.error = "bytes after the response";
        return result;
      }
      continue;
    }
    result.error = n == 0 ? "server closed the connection"
                          : await_ready(fd, sending, deadline, "no response within 10 s");
    if (!result.error.empty()) return result;
  }
}

}  // namespace

std::string host_header(const Options& options) {
  const bool v6 = options.host.find(':') != std::string::npos;
  return (v6 ? "[" + options.host + "]" : options.host) + ":" + std::to_string(options.port);
}

std::string create_session(int fd, const Options& options) {
  const Exchange exchange =
      http_exchange(fd, "POST /v1/sessions HTTP/1.1\r\nHost: " + host_header(options) +
                            "\r\nContent-Length: 0\r\n\r\n");
  std::string error = exchange.error;
  if (error.empty()) {
    const nlohmann::json json = nlohmann::json::parse(exchange.body, nullptr, false);
    if (exchange.status == 200 && json.is_object() && json.contains("session_id") &&
        json["session_id"].is_string() && !json["session_id"].get<std::string>().empty()) {
      return json["session_id"].get<std::string>();
    }
    error = "answered " + std::to_string(exchange.status) + " " + exchange.body;
  }
  std::fprintf(stderr, "turnstile-bench: POST /v1/sessions: %s\n", error.c_str());
  return "";
}

void delete_sessions(const std::vector<std::string>& ids, const Options& options,
                     const LoopbackAddress& address, Shared& shared) {
  if (ids.empty()) return;
  int fd = -1;
  for (const std::string& id : ids) {
    if (fd < 0) fd = connect_to(address);
    if (fd < 0) {
      shared.report(shared.errors, std::string("session delete: connect: ") + std::strerror(errno));
      return;
    }
    const Exchange exchange = http_exchange(fd, "DELETE /v1/sessions/" + id +
                                                    " HTTP/1.1\r\nHost: " + host_header(options) +
                                                    "\r\nContent-Length: 0\r\n\r\n");
    if (!exchange.error.empty() || exchange.status != 204) {
      shared.report(shared.errors,
                    "DELETE /v1/sessions/" + id + ": " +
                        (exchange.error.empty()
                             ? "answered " + std::to_string(exchange.status) + " " + exchange.body
                             : exchange.error));
      ::close(fd);
      fd = -1;
    }
  }
  if (fd >= 0) ::close(fd);
}

}  // namespace turnstile::bench
