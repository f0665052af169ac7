// turnstile-bench's command line: the modes, the transports and every option with its default
// (the --help text is in bench_options.cc). parse_options() checks the combination and fills in
// the mode's defaults; a usage error exits 2.
//
// Thread affinity: an Options is immutable once parsed and read by every thread.
#pragma once

#include <cstdint>
#include <string>

namespace turnstile::bench {

enum class Mode {
  kUncontended,
  kShared,
  kSemaphore,
  kPipelined,
  kSignalEmit,
  kSignalFanout,
  kReadWrite,
  kReadWritePlain,
};
enum class Transport { kTcp, kHttp };

struct Options {
  Mode mode = Mode::kUncontended;
  std::string mode_name = "uncontended";
  std::string host = "127.0.0.1";
  int port = 6388;
  Transport transport = Transport::kTcp;
  int http_port = 0;             // 0: --port
  std::int64_t lease_ttl_s = 0;  // http: lease_ttl_s of each acquire; 0 = the server default
  int workers = 10;
  int threads = 1;
  double duration_s = 5;
  std::int64_t rounds = 0;  // > 0: each worker does this many ops per key instead of a duration
  double warmup_s = 1;
  double rate = 0;  // ops per second over all workers; 0 = closed loop
  std::int64_t timeout_s = 30;
  std::int64_t limit = 10;
  int keys_per_connection = 1;
  bool json = false;
  bool progress = true;
  bool no_exclusion = false;  // the server does not enforce lock or semaphore capacity
  // The signal modes:
  bool workers_given = false;
  int listeners = 0;         // 0: the mode's default (signal-emit 1, signal-fanout 1000)
  int listener_threads = 0;  // 0: the mode's default (signal-emit 1, signal-fanout 2)
  bool wildcard = false;     // --pattern wildcard: listen on `<prefix>.*`, not the channel
  int payload_bytes = 16;
  bool versus_uncontended = false;  // signal-emit: run the uncontended mode first, and the ratio
  bool signal_options = false;      // any of the options above was given
  // The read-write modes:
  int keys = 4;               // keys every worker picks from
  double read_percent = 95;   // share of the ops that are reads
  double hold_us = 200;       // a grant is held this long before its release is written
  std::uint64_t seed = 1;     // of every worker's choice of keys and of reads or writes
  bool versus_plain = false;  // rwlock: run rwlock-plain first, and the ratio
  bool rw_options = false;    // any of the options above was given
};

inline bool read_write_mode(const Options& options) {
  return options.mode == Mode::kReadWrite || options.mode == Mode::kReadWritePlain;
}

inline bool signal_mode(const Options& options) {
  return options.mode == Mode::kSignalEmit || options.mode == Mode::kSignalFanout;
}

// Prints "turnstile-bench: <message> (see --help)" and exits 2.
[[noreturn]] void usage_error(const std::string& message);

// The options of argv; --help prints the help and exits 0.
Options parse_options(int argc, char** argv);

}  // namespace turnstile::bench
