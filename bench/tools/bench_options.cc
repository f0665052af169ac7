// turnstile-bench's option parsing (bench_options.h): --help, one flag at a time, then the checks
// of the combination, each group of options checked by a function of its own.
#include "bench/tools/bench_options.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <utility>

namespace turnstile::bench {

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "turnstile-bench: %s (see --help)\n", message.c_str());
  std::exit(2);
}

namespace {

void print_help() {
  std::printf(
      "usage: turnstile-bench [options]\n"
      "  --host ADDR               server address, loopback only (127.0.0.1)\n"
      "  --port N                  server port (6388)\n"
      "  --transport T             tcp (line protocol on --port) | http (REST API) (tcp)\n"
      "  --http-port N             HTTP API port for --transport http (default: --port)\n"
      "  --lease-ttl S             http: lease_ttl_s of each acquire (0 = server default)\n"
      "  --mode M                  uncontended | shared | semaphore | pipelined |\n"
      "                            signal-emit | signal-fanout | rwlock | rwlock-plain\n"
      "                            (uncontended)\n"
      "  --workers N               connections, one worker each (10)\n"
      "  --threads N               generator threads, each with its own epoll (1)\n"
      "  --duration S              measured seconds after the warm-up (5)\n"
      "  --rounds N                instead of a duration: ops per worker and key\n"
      "  --warmup S                seconds whose ops are not measured (1)\n"
      "  --rate R                  open loop: R ops/s over all workers (0 = closed loop)\n"
      "  --timeout S               timeout argument of each acquire (30)\n"
      "  --limit L                 semaphore limit for --mode semaphore (10)\n"
      "  --keys-per-connection K   pipelined mode: keys per connection (1)\n"
      "  --json                    print the result as one JSON object\n"
      "  --no-progress             no progress line on stderr\n"
      "  --no-exclusion            server grants without exclusion (the reference server):\n"
      "                            check only causal fence order and uniqueness\n"
      "Signal modes (op = one `signal` and its `ok <n>`; --workers connections signal one\n"
      "channel in a closed loop; --timeout S: a reply later than S seconds is an error):\n"
      "  --listeners L             connections listening to the channel (signal-emit 1,\n"
      "                            signal-fanout 1000); --workers defaults to 4 in signal-fanout\n"
      "  --listener-threads N      epoll threads reading the listeners (emit 1, fanout 2)\n"
      "  --pattern P               exact (listen on the channel) | wildcard (<prefix>.*) (exact)\n"
      "  --payload-bytes N         payload of each signal (16)\n"
      "  --versus-uncontended      signal-emit: first the uncontended mode with the same\n"
      "                            workers, threads and times, then the ratio of the ops/s\n"
      "Read-write modes (op = a read `rl`/`rr` or a write `wl`/`wr` on one of --keys keys;\n"
      "rwlock-plain: the same ops as `l`/`r`):\n"
      "  --keys K                  keys the workers pick from at random (4)\n"
      "  --read-percent P          share of the ops that are reads, 0..100 (95)\n"
      "  --hold-us U               microseconds a grant is held before its release (200)\n"
      "  --seed N                  seed of the workers' choices (1): same seed, same ops\n"
      "  --versus-plain            rwlock: first rwlock-plain with the same options, then\n"
      "                            the ratio of the ops/s\n"
      "Exit status: 0 = no unexpected reply and every fence check passed, 1 = not, 2 = usage.\n");
}

template <typename T>
T parse_number(const std::string& flag, const std::string& text) {
  T value{};
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end) usage_error("bad value for " + flag + ": " + text);
  return value;
}

double parse_double(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !(value >= 0)) {
    usage_error("bad value for " + flag + ": " + text);
  }
  return value;
}

constexpr std::pair<std::string_view, Mode> kModes[] = {
    {"uncontended", Mode::kUncontended}, {"shared", Mode::kShared},
    {"semaphore", Mode::kSemaphore},     {"pipelined", Mode::kPipelined},
    {"signal-emit", Mode::kSignalEmit},  {"signal-fanout", Mode::kSignalFanout},
    {"rwlock", Mode::kReadWrite},        {"rwlock-plain", Mode::kReadWritePlain},
};

// The flags without a value; false for any other flag.
bool parse_switch(const std::string& flag, Options& options) {
  if (flag == "--help" || flag == "-h") {
    print_help();
    std::exit(0);
  }
  if (flag == "--json") {
    options.json = true;
  } else if (flag == "--no-progress") {
    options.progress = false;
  } else if (flag == "--no-exclusion") {
    options.no_exclusion = true;
  } else if (flag == "--versus-plain") {
    options.versus_plain = true;
    options.rw_options = true;
  } else if (flag == "--versus-uncontended") {
    options.versus_uncontended = true;
    options.signal_options = true;
  } else {
    return false;
  }
  return true;
}

void parse_mode(const std::string& value, Options& options) {
  options.mode_name = value;
  const auto* found = std::find_if(std::begin(kModes), std::end(kModes),
                                   [&value](const auto& mode) { return mode.first == value; });
  if (found == std::end(kModes)) usage_error("unknown mode " + value);
  options.mode = found->second;
}

// The flags of every mode that take a value; false for any other flag.
bool parse_load_flag(const std::string& flag, const std::string& value, Options& options) {
  if (flag == "--host") {
    options.host = value;
  } else if (flag == "--port") {
    options.port = parse_number<int>(flag, value);
  } else if (flag == "--transport") {
    if (value == "tcp") {
      options.transport = Transport::kTcp;
    } else if (value == "http") {
      options.transport = Transport::kHttp;
    } else {
      usage_error("unknown transport " + value);
    }
  } else if (flag == "--http-port") {
    options.http_port = parse_number<int>(flag, value);
  } else if (flag == "--lease-ttl") {
    options.lease_ttl_s = parse_number<std::int64_t>(flag, value);
  } else if (flag == "--mode") {
    parse_mode(value, options);
  } else if (flag == "--workers") {
    options.workers = parse_number<int>(flag, value);
    options.workers_given = true;
  } else if (flag == "--threads") {
    options.threads = parse_number<int>(flag, value);
  } else if (flag == "--duration") {
    options.duration_s = parse_double(flag, value);
  } else if (flag == "--rounds") {
    options.rounds = parse_number<std::int64_t>(flag, value);
  } else if (flag == "--warmup") {
    options.warmup_s = parse_double(flag, value);
  } else if (flag == "--rate") {
    options.rate = parse_double(flag, value);
  } else if (flag == "--timeout") {
    options.timeout_s = parse_number<std::int64_t>(flag, value);
  } else if (flag == "--limit") {
    options.limit = parse_number<std::int64_t>(flag, value);
  } else if (flag == "--keys-per-connection") {
    options.keys_per_connection = parse_number<int>(flag, value);
  } else {
    return false;
  }
  return true;
}

// The flags of the signal and the read-write modes that take a value; false for any other flag.
bool parse_mode_flag(const std::string& flag, const std::string& value, Options& options) {
  if (flag == "--listeners") {
    options.listeners = parse_number<int>(flag, value);
    options.signal_options = true;
    if (options.listeners < 1) usage_error("--listeners must be 1..100000");
  } else if (flag == "--listener-threads") {
    options.listener_threads = parse_number<int>(flag, value);
    options.signal_options = true;
    if (options.listener_threads < 1) usage_error("--listener-threads must be 1..256");
  } else if (flag == "--pattern") {
    if (value != "exact" && value != "wildcard") usage_error("unknown pattern " + value);
    options.wildcard = value == "wildcard";
    options.signal_options = true;
  } else if (flag == "--payload-bytes") {
    options.payload_bytes = parse_number<int>(flag, value);
    options.signal_options = true;
  } else if (flag == "--keys") {
    options.keys = parse_number<int>(flag, value);
    options.rw_options = true;
  } else if (flag == "--read-percent") {
    options.read_percent = parse_double(flag, value);
    options.rw_options = true;
  } else if (flag == "--hold-us") {
    options.hold_us = parse_double(flag, value);
    options.rw_options = true;
  } else if (flag == "--seed") {
    options.seed = parse_number<std::uint64_t>(flag, value);
    options.rw_options = true;
  } else {
    return false;
  }
  return true;
}

// The options every mode has, and which modes the others belong to.
void check_load(Options& options) {
  if (options.mode == Mode::kSignalFanout && !options.workers_given) options.workers = 4;
  if (options.workers < 1 || options.workers > 100000) usage_error("--workers must be 1..100000");
  if (options.threads < 1 || options.threads > 256) usage_error("--threads must be 1..256");
  options.threads = std::min(options.threads, options.workers);
  if (options.port < 1 || options.port > 65535) usage_error("--port must be 1..65535");
  if (options.rounds < 0) usage_error("--rounds must be >= 0");
  if (options.limit < 1) usage_error("--limit must be >= 1");
  if (options.keys_per_connection < 1 || options.keys_per_connection > 64) {
    usage_error("--keys-per-connection must be 1..64");
  }
  if (options.keys_per_connection > 1 && options.mode != Mode::kPipelined) {
    usage_error("--keys-per-connection needs --mode pipelined");
  }
  if (options.rounds == 0 && options.duration_s <= 0) usage_error("--duration must be > 0");
  if (options.http_port < 0 || options.http_port > 65535) {
    usage_error("--http-port must be 1..65535");
  }
  if (options.lease_ttl_s < 0) usage_error("--lease-ttl must be >= 0");
  if (options.transport == Transport::kHttp) {
    if (options.mode == Mode::kPipelined) usage_error("--transport http has no pipelined mode");
    if (options.http_port > 0) options.port = options.http_port;
  }
  if (options.signal_options && !signal_mode(options)) {
    usage_error(
        "--listeners, --listener-threads, --pattern, --payload-bytes and "
        "--versus-uncontended need --mode signal-emit or signal-fanout");
  }
  if (options.rw_options && !read_write_mode(options)) {
    usage_error(
        "--keys, --read-percent, --hold-us, --seed and --versus-plain need --mode rwlock or "
        "rwlock-plain");
  }
}

void check_read_write(const Options& options) {
  if (options.transport != Transport::kTcp) usage_error("the rwlock modes are TCP only");
  if (options.keys < 1 || options.keys > 100000) usage_error("--keys must be 1..100000");
  if (options.read_percent > 100) usage_error("--read-percent must be 0..100");
  if (options.hold_us > 10e6) usage_error("--hold-us must be 0..10000000");
  if (options.versus_plain && options.mode != Mode::kReadWrite) {
    usage_error("--versus-plain needs --mode rwlock");
  }
}

// Also fills in the signal modes' defaults.
void check_signals(Options& options) {
  const bool emit = options.mode == Mode::kSignalEmit;
  if (options.transport != Transport::kTcp) usage_error("the signal modes are TCP only");
  if (options.rate > 0) usage_error("the signal modes are closed loop only (no --rate)");
  if (options.versus_uncontended && !emit) {
    usage_error("--versus-uncontended needs --mode signal-emit");
  }
  if (options.listeners == 0) options.listeners = emit ? 1 : 1000;
  if (options.listener_threads == 0) options.listener_threads = emit ? 1 : 2;
  if (options.listeners > 100000) usage_error("--listeners must be 1..100000");
  if (options.listener_threads > 256) usage_error("--listener-threads must be 1..256");
  options.listener_threads = std::min(options.listener_threads, options.listeners);
  if (options.payload_bytes < 1 || options.payload_bytes > 60000) {
    usage_error("--payload-bytes must be 1..60000");
  }
  if (options.timeout_s < 1) usage_error("--timeout must be >= 1 in the signal modes");
}

}  // namespace

Options parse_options(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (parse_switch(flag, options)) continue;
    if (i + 1 >= argc) usage_error("missing value for " + flag);
    const std::string value = argv[++i];
    if (!parse_load_flag(flag, value, options) && !parse_mode_flag(flag, value, options)) {
      usage_error("unknown option " + flag);
    }
  }
  check_load(options);
  if (read_write_mode(options)) check_read_write(options);
  if (signal_mode(options)) check_signals(options);
  return options;
}

}  // namespace turnstile::bench
