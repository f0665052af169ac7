// The `turnstile` command-line tool (docs/cli.md): acquire, release, renew, stats, ping, check,
// run, listen, emit, cluster, admin.
//
// Thread affinity: run_cli is called once, from main, before any other thread exists (`run`
// blocks signals process-wide before it starts the renewal thread; `listen` blocks SIGINT and
// SIGTERM before it starts the connection's I/O thread).
#pragma once

namespace turnstile::client {

// Exit codes, documented in docs/cli.md. `run` otherwise exits with its command's code.
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;          // any other failure (refused, I/O, bad reply)
inline constexpr int kExitUsage = 64;         // bad flags or arguments (sysexits EX_USAGE)
inline constexpr int kExitNoConnection = 69;  // could not connect, or TLS failed (EX_UNAVAILABLE)
inline constexpr int kExitTimedOut = 75;      // timed out waiting for the lock (EX_TEMPFAIL)
inline constexpr int kExitLockLost = 76;      // run: the lock was lost while the command ran
inline constexpr int kExitAuth = 77;          // the auth token was refused (EX_NOPERM)
inline constexpr int kExitCannotExecute = 126;
inline constexpr int kExitNotFound = 127;

int run_cli(int argc, char** argv);

}  // namespace turnstile::client
