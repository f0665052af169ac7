// turnstile-bench: a load generator that speaks only the wire protocol (or the HTTP API), so it
// measures any server at a loopback address (turnstiled, the do-nothing reference server,
// dflockd).
//
// Each worker is one TCP connection (with --transport http, one HTTP/1.1 keep-alive connection
// and one HTTP session, created at start-up and deleted at the end). Generator threads (--threads)
// each own an epoll set and a share of the connections, so one thread drives many connections and
// the generator is not the bottleneck. An op is one acquire plus its release.
//
// Modes:
//   uncontended  a key per worker: `l key T`, then `r key token`.
//   shared       every worker on one key: blocking `l key T`, FIFO hand-off by the server.
//   semaphore    every worker on one key: `sl key T L`, then `sr key token`.
//   pipelined    K keys per connection (--keys-per-connection): first K acquires in one write,
//                then each round writes, for every key, its release and its next acquire in one
//                write. A round completes K ops; each op's latency is the round trip of its round.
//   signal-emit  --workers connections each loop `signal\n<channel>\n<payload>\n` and wait for
//                `ok <n>`; one listener connection (--listeners), subscribed to the channel
//                first, is read by a thread of its own that counts and discards the `sig` frames.
//                An op is one signal and its reply.
//   signal-fanout  the same with --listeners 1000 and --workers 4 by default: a few publishers
//                signal as fast as the replies come back, and --listener-threads epoll threads
//                drain the listeners. Reports signals/s, deliveries/s (the replies' counts) and
//                the frames the listeners received, and checks that the two totals agree.
//                --pattern wildcard listens on `<prefix>.*` instead of the channel itself.
//                With --versus-uncontended, signal-emit first runs the uncontended mode with the
//                same workers, threads and times, and reports the ratio of their ops/s.
//   rwlock       read-write locks: every worker on --keys keys (4); each op picks a key and is a
//                read (`rl key T`, then `rr key token`) with probability --read-percent (95),
//                otherwise a write (`wl` / `wr`); the grant is held --hold-us microseconds (200)
//                before its release is written, so that readers of a key overlap. The choices
//                come from a generator per worker seeded by --seed and the worker's index, so
//                every run with the same options makes the same sequence of ops.
//   rwlock-plain the same load on plain locks: `l` / `r` for reads and writes alike.
//                With --versus-plain, rwlock first runs rwlock-plain with the same options, and
//                reports the ratio rwlock ops/s / rwlock-plain ops/s.
// Transports: tcp (the line protocol, --port) or http (the HTTP REST API, --http-port; modes
// uncontended, shared and semaphore): acquire = POST /v1/locks/{key} (or /v1/semaphores/{key}),
// release = POST .../release, on the worker's session; the same fence checks apply.
// Closed loop: every worker starts its next op when the last one completes (--workers,
// --duration or --rounds, --warmup). Open loop (--rate R): ops start at fixed intended times,
// R per second over all workers, and latency is measured from the intended start, so a stalled
// server is charged for the ops it delayed (no coordinated omission).
//
// Fence checks (token = 16 hex digits of big-endian fence, then 16 of salt):
//   causal    every grant's fence is greater than the largest fence of the same key received by
//             any worker before its acquire was sent (a grant received earlier was issued
//             earlier, so the server must have issued a larger fence since). Always.
//   capacity  a grant is counted as held from its receipt until just before its release is
//             written; more than 1 (lock) or L (semaphore) counted at once means the server
//             granted past its capacity (the server's own holder set can only be larger).
//   order     lock modes: grants of a key are recorded as they are received, before the release
//             is written; the holder being exclusive, recording order is grant order, and each
//             recorded fence must be greater than the one recorded before it.
//   unique    semaphore mode, rwlock, and with --no-exclusion: no fence is granted twice for
//             one key (checked after the run).
//   rwlock    exclusion: per key, the readers and writers counted held as for capacity; a
//             write grant that finds anyone else counted, or a read grant that finds a writer,
//             is a violation. write order: a write grant's fence must exceed every fence of its
//             key received so far (everyone before it released before the server granted it).
// --no-exclusion drops capacity, order, the rwlock exclusion and write order: for the do-nothing
// reference server, which grants every acquire at once, so several "holders" overlap and their
// replies race between threads.
// Signal modes: every reply must be `ok <n>`, every listener line a `sig ` frame, no listener may
// be closed by the server, and the listeners must receive exactly as many frames as the replies
// counted deliveries.
// Exit status: 0 when no reply was unexpected and no fence check failed; 1 otherwise; 2 on a
// usage error.
//
// This file is main: the --versus-* baselines around one run. The rest, by job: the options in
// bench_options.cc, the lock modes in lock_run.cc (the run) and lock_worker.cc (a generator
// thread's loop and the fence checks), the signal modes in signal_run.cc, what both share in
// run_common.cc, socket_steps.cc and http_session.cc, the wire formats in bench_protocol.h.
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "bench/tools/bench_options.h"
#include "bench/tools/run_common.h"
#include "bench/tools/socket_steps.h"

namespace turnstile::bench {
namespace {

// --versus-plain and --versus-uncontended: `out`'s ops/s over the baseline's, 0 without a
// baseline rate.
double ops_ratio(const nlohmann::json& out, const nlohmann::json& baseline) {
  const double base = baseline["ops_per_s"].get<double>();
  return base > 0 ? out["ops_per_s"].get<double>() / base : 0.0;
}

int main_of(const Options& options) {
  // Every connection is a descriptor, and the signal modes add their listeners.
  raise_descriptor_limit(static_cast<std::uint64_t>(options.workers) +
                         static_cast<std::uint64_t>(signal_mode(options) ? options.listeners : 0) +
                         64);
  nlohmann::json out;
  if (options.versus_plain) {
    // The same load on plain locks first (the same seed: the same ops), then on rw locks.
    Options plain = options;
    plain.mode = Mode::kReadWritePlain;
    plain.mode_name = "rwlock-plain";
    nlohmann::json baseline;
    const int baseline_status = run_locks(plain, baseline);
    if (baseline.is_null()) return 1;
    const int status = run_locks(options, out);
    if (out.is_null()) return 1;
    const double ratio = ops_ratio(out, baseline);
    out["versus_plain"] = {{"ratio", ratio}, {"plain", baseline}};
    if (options.json) {
      std::printf("%s\n", out.dump().c_str());
    } else {
      std::printf("  rwlock ops/s / rwlock-plain ops/s: %.3f (%.0f / %.0f)\n", ratio,
                  out["ops_per_s"].get<double>(), baseline["ops_per_s"].get<double>());
    }
    return status == 0 && baseline_status == 0 ? 0 : 1;
  }
  if (!signal_mode(options)) {
    const int status = run_locks(options, out);
    if (options.json && !out.is_null()) std::printf("%s\n", out.dump().c_str());
    return status;
  }
  int baseline_status = 0;
  nlohmann::json baseline;
  if (options.versus_uncontended) {
    Options uncontended = options;
    uncontended.mode = Mode::kUncontended;
    uncontended.mode_name = "uncontended";
    baseline_status = run_locks(uncontended, baseline);
    if (baseline.is_null()) return 1;
  }
  const int status = run_signals(options, out);
  if (options.versus_uncontended && !out.is_null()) {
    const double ratio = ops_ratio(out, baseline);
    out["versus_uncontended"] = {{"ratio", ratio}, {"uncontended", baseline}};
    if (!options.json) {
      std::printf("  %s ops/s / uncontended ops/s: %.3f (%.0f / %.0f)\n", options.mode_name.c_str(),
                  ratio, out["ops_per_s"].get<double>(), baseline["ops_per_s"].get<double>());
    }
  }
  if (options.json && !out.is_null()) std::printf("%s\n", out.dump().c_str());
  return status == 0 && baseline_status == 0 ? 0 : 1;
}

}  // namespace
}  // namespace turnstile::bench

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  const turnstile::bench::Options options = turnstile::bench::parse_options(argc, argv);
  return turnstile::bench::main_of(options);
}
