// The lock modes' run (turnstile-bench --mode uncontended, shared, semaphore, pipelined, rwlock,
// rwlock-plain; run_common.h): the run's keys and protocols, a connection (and with --transport
// http a session) per worker, the generator threads, then the totals, the "unique" check over
// every fence received, and the report.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bench/tools/http_session.h"
#include "bench/tools/lock_worker.h"
#include "bench/tools/run_common.h"

namespace turnstile::bench {
namespace {

// The keys of one run and the protocols that acquire them.
struct RunKeys {
  std::string prefix;    // unique to the run, so a run never meets locks left behind by another
  bool one_key = false;  // shared and semaphore: every worker on one key
  std::size_t count = 0;
  std::unique_ptr<KeyState[]> states;
  std::int64_t limit = 0;  // semaphore: the limit of each acquire; 0 = locks
  std::shared_ptr<const Protocol> line_protocol;
  // The rwlock modes: every op picks one of the keys; a read and a write have protocols of their
  // own (one and the same, `l` / `r`, in rwlock-plain).
  KeySet set;
  std::shared_ptr<const Protocol> read_protocol;
  std::shared_ptr<const Protocol> write_protocol;
};

RunKeys make_keys(const Options& options) {
  RunKeys keys;
  const bool http = options.transport == Transport::kHttp;
  keys.prefix = run_prefix() + (http ? "http-" : "") + options.mode_name + "-";
  keys.one_key = options.mode == Mode::kShared || options.mode == Mode::kSemaphore;
  keys.count = keys.one_key ? 1
               : read_write_mode(options)
                   ? static_cast<std::size_t>(options.keys)
                   : static_cast<std::size_t>(options.workers) *
                         static_cast<std::size_t>(options.keys_per_connection);
  keys.states = std::make_unique<KeyState[]>(keys.count);
  keys.limit = options.mode == Mode::kSemaphore ? options.limit : 0;
  keys.line_protocol = std::make_shared<const LineProtocol>(options.timeout_s, keys.limit);
  keys.read_protocol = keys.line_protocol;
  keys.write_protocol = keys.line_protocol;
  if (read_write_mode(options)) {
    for (std::size_t k = 0; k < keys.count; ++k) {
      keys.set.names.push_back(keys.prefix + std::to_string(k));
    }
    keys.set.states = keys.states.get();
    if (options.mode == Mode::kReadWrite) {
      const std::string timeout = std::to_string(options.timeout_s);
      keys.read_protocol = std::make_shared<const LineProtocol>("rl", "rr", timeout);
      keys.write_protocol = std::make_shared<const LineProtocol>("wl", "wr", timeout);
    }
  }
  return keys;
}

// Worker w's connection with its protocol and its slots, its session added to `sessions`;
// false after printing why not.
bool open_connection(const Options& options, const LoopbackAddress& address, RunKeys& keys, int w,
                     Connection& connection, std::vector<std::string>& sessions) {
  connection.index = w;
  connection.fd = connect_to(address);
  if (connection.fd < 0) {
    std::fprintf(stderr, "turnstile-bench: connect to %s:%d: %s\n", options.host.c_str(),
                 options.port, std::strerror(errno));
    return false;
  }
  if (options.transport == Transport::kHttp) {
    connection.session_id = create_session(connection.fd, options);
    if (connection.session_id.empty()) return false;
    sessions.push_back(connection.session_id);
    connection.protocol =
        std::make_shared<const HttpProtocol>(host_header(options), connection.session_id,
                                             options.timeout_s, options.lease_ttl_s, keys.limit);
  } else {
    connection.protocol = keys.line_protocol;
  }
  // Worker w's choices: the seed and w, mixed; the first op draws from them (choose_op).
  connection.random = options.seed * 0x100000001b3ULL + static_cast<std::uint64_t>(w);
  const auto per_connection = static_cast<std::size_t>(options.keys_per_connection);
  for (std::size_t k = 0; k < per_connection; ++k) {
    Slot slot;
    // rwlock: key 0 until the first op picks one.
    const std::size_t key_index = keys.one_key || read_write_mode(options)
                                      ? 0
                                      : static_cast<std::size_t>(w) * per_connection + k;
    slot.key_index = key_index;
    slot.key = keys.prefix + (keys.one_key ? std::string("shared") : std::to_string(key_index));
    slot.state = &keys.states[key_index];
    connection.slots.push_back(std::move(slot));
  }
  return true;
}

// A worker a thread, the connections dealt to them in turn; none (after deleting the sessions
// already created) when a connection fails.
std::vector<std::unique_ptr<Worker>> connect_workers(const Options& options,
                                                     const LoopbackAddress& address, RunKeys& keys,
                                                     Shared& shared,
                                                     std::vector<std::string>& sessions) {
  std::vector<std::vector<Connection>> per_thread(static_cast<std::size_t>(options.threads));
  for (int w = 0; w < options.workers; ++w) {
    Connection connection;
    if (!open_connection(options, address, keys, w, connection, sessions)) {
      delete_sessions(sessions, options, address, shared);
      return {};
    }
    per_thread[static_cast<std::size_t>(w % options.threads)].push_back(std::move(connection));
  }
  std::vector<std::unique_ptr<Worker>> workers;
  for (auto& connections : per_thread) {
    workers.push_back(std::make_unique<Worker>(options, shared, std::move(connections), &keys.set,
                                               keys.read_protocol, keys.write_protocol));
  }
  return workers;
}

// Runs every worker on a thread of its own until the window ends or every one is done.
void drive(const Options& options, const RunWindow& window,
           const std::vector<std::unique_ptr<Worker>>& workers, const Shared& shared) {
  std::vector<std::thread> threads;
  for (const auto& worker : workers) {
    threads.emplace_back(
        [&worker, window] { worker->run(window.start, window.warmup_end, window.end); });
  }
  std::uint64_t last_ops = 0;
  Progress progress(options, [&](int second, double span_s, TimePoint now, bool show) {
    std::uint64_t ops = 0;
    for (const auto& worker : workers) ops += worker->ops_all.load(std::memory_order_relaxed);
    const double rate = static_cast<double>(ops - last_ops) / span_s;
    last_ops = ops;
    if (show) {
      std::fprintf(stderr,
                   "turnstile-bench: %ds %s%.0f ops/s, errors %llu, fence violations %llu\n",
                   second, now < window.warmup_end ? "(warm-up) " : "", rate,
                   static_cast<unsigned long long>(shared.errors.load()),
                   static_cast<unsigned long long>(shared.fence_violations.load()));
    }
  });
  for (std::thread& thread : threads) thread.join();
  for (const auto& worker : workers) worker->close_connections();
  progress.stop();
}

// Every worker's measured ops together.
struct Totals {
  LogHistogram histogram;
  std::uint64_t measured_ops = 0;
  std::uint64_t ops_all = 0;
  double elapsed_s = 0;
};

// The totals; reports a fence granted twice for one key (the "unique" check).
Totals collect(const RunWindow& window, const std::vector<std::unique_ptr<Worker>>& workers,
               Shared& shared) {
  Totals totals;
  TimePoint last_completion = window.warmup_end;
  std::vector<std::pair<std::size_t, std::uint64_t>> fences;
  for (const auto& worker : workers) {
    totals.histogram.add(worker->result.histogram);
    totals.measured_ops += worker->result.measured_ops;
    totals.ops_all += worker->ops_all.load();
    last_completion = std::max(last_completion, worker->result.last_completion);
    fences.insert(fences.end(), worker->result.fences.begin(), worker->result.fences.end());
  }
  std::sort(fences.begin(), fences.end());
  const auto duplicate = std::adjacent_find(fences.begin(), fences.end());
  if (duplicate != fences.end()) {
    shared.report(shared.fence_violations,
                  "fence " + std::to_string(duplicate->second) + " granted twice for one key");
  }
  totals.elapsed_s = measured_seconds(window, last_completion);
  return totals;
}

// The rwlock modes: the load's parameters and, over the measured ops, the reads and writes with
// their latencies, and how often a read grant found another reader of its key holding.
void add_read_write_result(const Options& options,
                           const std::vector<std::unique_ptr<Worker>>& workers, double elapsed_s,
                           nlohmann::json& out) {
  LogHistogram reads;
  LogHistogram writes;
  std::uint64_t read_grants = 0;
  std::uint64_t shared_reads = 0;
  std::int64_t max_readers = 0;
  for (const auto& worker : workers) {
    reads.add(worker->result.read_histogram);
    writes.add(worker->result.write_histogram);
    read_grants += worker->result.read_grants;
    shared_reads += worker->result.shared_reads;
    max_readers = std::max(max_readers, worker->result.max_readers);
  }
  const auto latency = [](const LogHistogram& histogram) {
    return nlohmann::json{{"p50", to_us(histogram.value_at_quantile(0.50))},
                          {"p99", to_us(histogram.value_at_quantile(0.99))},
                          {"max", to_us(histogram.max())}};
  };
  const auto per_s = [elapsed_s](std::uint64_t count) {
    return elapsed_s > 0 ? static_cast<double>(count) / elapsed_s : 0.0;
  };
  const bool counted = options.mode == Mode::kReadWrite && !options.no_exclusion;
  out["read_write"] = {
      {"plain_locks", options.mode == Mode::kReadWritePlain},
      {"keys", options.keys},
      {"read_percent", options.read_percent},
      {"hold_us", options.hold_us},
      {"seed", options.seed},
      {"reads", reads.count()},
      {"writes", writes.count()},
      {"reads_per_s", per_s(reads.count())},
      {"writes_per_s", per_s(writes.count())},
      {"read_latency_us", latency(reads)},
      {"write_latency_us", latency(writes)},
  };
  if (counted) {
    out["read_write"]["read_grants"] = read_grants;
    out["read_write"]["shared_read_grants"] = shared_reads;
    out["read_write"]["max_readers_at_once"] = max_readers;
  }
}

void print_read_write_result(const nlohmann::json& out) {
  const nlohmann::json& rw = out["read_write"];
  std::printf(
      "  %s: %d keys, %.4g%% reads, held %.4g us; reads %llu (%.0f/s), writes %llu (%.0f/s)\n",
      rw["plain_locks"].get<bool>() ? "plain locks (l/r for every op)" : "read-write locks",
      rw["keys"].get<int>(), rw["read_percent"].get<double>(), rw["hold_us"].get<double>(),
      static_cast<unsigned long long>(rw["reads"].get<std::uint64_t>()),
      rw["reads_per_s"].get<double>(),
      static_cast<unsigned long long>(rw["writes"].get<std::uint64_t>()),
      rw["writes_per_s"].get<double>());
  std::printf(
      "  read latency us: p50 %.1f  p99 %.1f; write latency us: p50 %.1f  p99 %.1f\n",
      rw["read_latency_us"]["p50"].get<double>(), rw["read_latency_us"]["p99"].get<double>(),
      rw["write_latency_us"]["p50"].get<double>(), rw["write_latency_us"]["p99"].get<double>());
  if (rw.contains("read_grants")) {
    const auto grants = rw["read_grants"].get<std::uint64_t>();
    const auto shared_reads = rw["shared_read_grants"].get<std::uint64_t>();
    std::printf(
        "  read grants that found another reader holding: %llu of %llu (%.1f%%); at most %lld "
        "readers of one key at once\n",
        static_cast<unsigned long long>(shared_reads), static_cast<unsigned long long>(grants),
        grants > 0 ? 100.0 * static_cast<double>(shared_reads) / static_cast<double>(grants) : 0.0,
        static_cast<long long>(rw["max_readers_at_once"].get<std::int64_t>()));
  }
}

const char* fence_checks(const Options& options) {
  return options.no_exclusion               ? "causal+unique"
         : options.mode == Mode::kSemaphore ? "causal+capacity+unique"
         : options.mode == Mode::kReadWrite ? "causal+exclusion+write-order+unique"
                                            : "causal+capacity+order";
}

nlohmann::json result_json(const Options& options, const Totals& totals, const Shared& shared) {
  const double ops_per_s =
      totals.elapsed_s > 0 ? static_cast<double>(totals.measured_ops) / totals.elapsed_s : 0;
  return {
      {"mode", options.mode_name},
      {"transport", options.transport == Transport::kHttp ? "http" : "tcp"},
      {"host", options.host},
      {"port", options.port},
      {"workers", options.workers},
      {"threads", options.threads},
      {"keys_per_connection", options.keys_per_connection},
      {"rate", options.rate},
      {"loop", options.rate > 0 ? "open" : "closed"},
      {"warmup_s", options.warmup_s},
      {"elapsed_s", totals.elapsed_s},
      {"ops", totals.measured_ops},
      {"ops_all", totals.ops_all},
      {"ops_per_s", ops_per_s},
      {"latency_us", latency_json(totals.histogram)},
      {"errors", shared.errors.load()},
      {"fence_violations", shared.fence_violations.load()},
      {"fence_checks", fence_checks(options)},
      {"messages", shared.messages},
  };
}

void print_result(const Options& options, const Totals& totals, const nlohmann::json& out,
                  const Shared& shared) {
  const bool read_write = read_write_mode(options);
  std::printf("turnstile-bench %s%s: %d workers on %d threads against %s:%d (%s loop)\n",
              options.transport == Transport::kHttp ? "http " : "", options.mode_name.c_str(),
              options.workers, options.threads, options.host.c_str(), options.port,
              options.rate > 0 ? "open" : "closed");
  std::printf("  %llu ops in %.3f s: %.0f ops/s (op = acquire + %srelease)\n",
              static_cast<unsigned long long>(totals.measured_ops), totals.elapsed_s,
              out["ops_per_s"].get<double>(), read_write && options.hold_us > 0 ? "hold + " : "");
  print_latency(totals.histogram);
  if (read_write) print_read_write_result(out);
  std::printf("  errors %llu, fence violations %llu (checks: %s)\n",
              static_cast<unsigned long long>(shared.errors.load()),
              static_cast<unsigned long long>(shared.fence_violations.load()),
              fence_checks(options));
  print_messages(shared);
}

}  // namespace

int run_locks(const Options& options, nlohmann::json& out) {
  const LoopbackAddress address = resolve_loopback(options.host, options.port);
  RunKeys keys = make_keys(options);
  Shared shared;
  std::vector<std::string> sessions;  // http: every worker's session, deleted at the end
  const std::vector<std::unique_ptr<Worker>> workers =
      connect_workers(options, address, keys, shared, sessions);
  if (workers.empty()) return 1;
  const RunWindow window = run_window(options, Clock::now() + std::chrono::milliseconds(5));
  drive(options, window, workers, shared);
  delete_sessions(sessions, options, address, shared);

  const Totals totals = collect(window, workers, shared);
  out = result_json(options, totals, shared);
  if (read_write_mode(options)) add_read_write_result(options, workers, totals.elapsed_s, out);
  if (!options.json) print_result(options, totals, out, shared);
  return shared.errors.load() == 0 && shared.fence_violations.load() == 0 ? 0 : 1;
}

}  // namespace turnstile::bench
