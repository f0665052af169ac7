// The HTTP sessions of turnstile-bench --transport http: every worker's connection creates one
// before the load (POST /v1/sessions) and they are all deleted after it (DELETE
// /v1/sessions/{id}), outside the load loop, one whole request and response at a time.
#pragma once

#include <string>
#include <vector>

#include "bench/tools/bench_options.h"
#include "bench/tools/loopback.h"
#include "bench/tools/run_common.h"

namespace turnstile::bench {

// The Host header of the target: host:port, an IPv6 host in brackets.
std::string host_header(const Options& options);

// POST /v1/sessions on the worker's connection; returns the session id, or "" after printing why.
std::string create_session(int fd, const Options& options);

// DELETE /v1/sessions/{id} for every worker's session, on one keep-alive connection of its own
// (the workers' connections may still owe a reply). Every delete must be answered 204.
void delete_sessions(const std::vector<std::string>& ids, const Options& options,
                     const LoopbackAddress& address, Shared& shared);

}  // namespace turnstile::bench
