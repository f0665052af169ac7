// turnstile-http-refserver: the do-nothing evhttp server. It answers the HTTP API requests that
// turnstile-bench --transport http sends, at once, with canned bodies of the right shape and no
// lock state, on libevent's evhttp as turnstiled's HTTP API is. What it costs per request is the
// floor any evhttp server on this machine pays (evhttp's parsing, its allocations and its
// bufferevent system calls); bench/tools/http_vs_tcp.py --http-floor measures it beside turnstiled.
//
//   POST   /v1/sessions              -> 200 {"session_id":"<32 hex>","idle_timeout_s":20}
//   DELETE /v1/sessions/{id}         -> 204
//   POST   /v1/locks/{key}           -> 200 {"status":"ok","token":"<32 hex>","lease_ttl_s":33}
//   POST   /v1/locks/{key}/release   -> 204
//   anything else                    -> 404 {"error":"not_found"}
// Tokens carry a fence from one process-wide counter (as turnstile-refserver's), so
// turnstile-bench's fence checks pass. Request bodies are not read.
//
// Threads: --threads event loops, each with its own event_base and evhttp, all accepting from
// one listening socket (each through its own descriptor), as turnstiled's shards do. Loopback
// only. Prints "listening on ADDR:PORT" on stdout once it accepts (--port 0: ephemeral).
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "bench/reference/reference_server_args.h"

namespace turnstile::bench {
namespace {

std::atomic<std::uint64_t> g_fence{0};

void send(evhttp_request* request, int code, std::string_view body) {
  evkeyvalq* headers = evhttp_request_get_output_headers(request);
  if (!body.empty()) evhttp_add_header(headers, "Content-Type", "application/json");
  evbuffer* buffer = evhttp_request_get_output_buffer(request);
  evbuffer_add(buffer, body.data(), body.size());
  evhttp_send_reply(request, code, nullptr, nullptr);
}

void on_request(evhttp_request* request, void*) {
  const std::string_view path = evhttp_request_get_uri(request);
  const evhttp_cmd_type method = evhttp_request_get_command(request);
  if (method == EVHTTP_REQ_POST && path == "/v1/sessions") {
    send(request, 200,
         "{\"session_id\":\"5a1b5a1b5a1b5a1b5a1b5a1b5a1b5a1b\",\"idle_timeout_s\":20}\n");
  } else if (method == EVHTTP_REQ_DELETE && path.starts_with("/v1/sessions/")) {
    send(request, 204, "");
  } else if (method == EVHTTP_REQ_POST && path.starts_with("/v1/locks/") &&
             path.ends_with("/release")) {
    send(request, 204, "");
  } else if (method == EVHTTP_REQ_POST && path.starts_with("/v1/locks/")) {
    static constexpr char kHex[] = "0123456789abcdef";
    const std::uint64_t fence = g_fence.fetch_add(1, std::memory_order_relaxed) + 1;
    char body[] =
        "{\"status\":\"ok\",\"token\":\"0000000000000000"
        "5a1b5a1b5a1b5a1b"
        "\",\"lease_ttl_s\":33}\n";
    char* token = body + std::strlen("{\"status\":\"ok\",\"token\":\"");
    for (int i = 0; i < 16; ++i) token[i] = kHex[(fence >> (60 - 4 * i)) & 0xf];
    send(request, 200, body);
  } else {
    send(request, 404, "{\"error\":\"not_found\"}\n");
  }
}

void serve(int listen_fd) {
  event_config* config = event_config_new();
  event_config_set_flag(config, EVENT_BASE_FLAG_NOLOCK);
  // Coalesces the read/write interest changes evhttp makes per request into at most one
  // epoll_ctl per loop turn (turnstiled's shards use it too).
  event_config_set_flag(config, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
  event_base* base = event_base_new_with_config(config);
  event_config_free(config);
  evhttp* http = evhttp_new(base);
  evhttp_set_gencb(http, &on_request, nullptr);
  if (base == nullptr || http == nullptr || evhttp_accept_socket(http, listen_fd) != 0) {
    std::fprintf(stderr, "turnstile-http-refserver: cannot start an event loop\n");
    std::exit(1);
  }
  event_base_dispatch(base);
}

}  // namespace
}  // namespace turnstile::bench

int main(int argc, char** argv) {
  return turnstile::bench::run_reference_server(
      argc, argv, "turnstile-http-refserver", 8089, /*lock_options=*/false,
      [](int fd, const turnstile::bench::ReferenceServerArgs&) { turnstile::bench::serve(fd); });
}
