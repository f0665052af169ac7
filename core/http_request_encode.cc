#include "core/http_request_encode.h"

#include <cstdio>

#include "core/assert.h"
#include "core/http_codec.h"

namespace turnstile::core {

std::string percent_encode(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const bool plain = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                       c == '-' || c == '.' || c == '_' || c == '~';
    if (plain) {
      out += c;
      continue;
    }
    char escaped[4];
    std::snprintf(escaped, sizeof escaped, "%%%02X", static_cast<unsigned char>(c));
    out += escaped;
  }
  return out;
}

HttpRequestLine encode_http_session_request(const Request& request) {
  const HttpEndpointSpec* route = nullptr;
  for (const HttpEndpointSpec& spec : kHttpEndpoints) {
    if (http_endpoint_command(spec.endpoint) == request.command) route = &spec;
  }
  TS_ASSERT(route != nullptr);
  HttpRequestLine line;
  line.method = route->method;
  const std::string_view pattern = route->pattern;
  const std::size_t at = pattern.find("{key}");
  line.path = std::string(pattern.substr(0, at)) + percent_encode(request.key) +
              std::string(pattern.substr(at + 5));
  const auto number = [](std::string_view name, std::int64_t value) {
    return "\"" + std::string(name) + "\":" + std::to_string(value);
  };
  const std::string token =
      "\"token\":\"" + (request.token ? request.token->to_string() : std::string("x")) + "\"";
  const bool semaphore = command_namespace(request.command) == Namespace::kSemaphore;
  const std::string limit = semaphore ? "," + number("limit", request.limit) : "";
  switch (command_operation(request.command)) {
    case Operation::kAcquire:
      line.body = "{" + number("acquire_timeout_s", request.timeout_s) + "," +
                  number("lease_ttl_s", request.lease_s) + limit + "}";
      break;
    case Operation::kRelease:
      line.body = "{" + token + "}";
      break;
    case Operation::kRenew:
      line.body = "{" + token + "," + number("lease_ttl_s", request.lease_s) + "}";
      break;
    case Operation::kEnqueue:
      line.body = "{" + number("lease_ttl_s", request.lease_s) + limit + "}";
      break;
    case Operation::kWait:
      line.body = "{" + number("timeout_s", request.timeout_s) + "}";
      break;
    case Operation::kOther:
      TS_ASSERT(false);
  }
  return line;
}

}  // namespace turnstile::core
