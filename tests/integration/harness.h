// Integration-test harness: start a real turnstiled and talk to it over real sockets.
//
//  * Daemon starts the binary named by TURNSTILED_PATH (set by CMake) in a child process, reads
//    its stderr (and stdout) through a pipe on a reader thread that keeps every line, waits for
//    the "listening on HOST:PORT (tcp|tls, N shards)" line and parses the port from it. Its
//    destructor always stops the child: SIGTERM, up to 5 s, then SIGKILL, then reaps it. The
//    child also gets SIGKILL if the thread that started it dies (PR_SET_PDEATHSIG), so a crashed
//    test leaves no daemon behind: start and destroy a Daemon on the same thread. The child runs
//    in its own process group, so only signal() (or its pid) reaches it.
//  * Client is one TCP (or TLS) connection with deadlines on every read and write. Its socket is
//    non-blocking underneath; every call takes an explicit timeout and never blocks past it.
//
// When the running test has failed by the time a Daemon is destroyed, its log is printed to
// stderr, so a failure report always shows what the daemon saw.
//
// Failures to start (no listening line within the timeout, exec failure, connect failure) throw
// std::runtime_error with the daemon's log in the message; GoogleTest reports that as a failure.
//
// Every binary linked with the harness ignores SIGPIPE: the daemon closes connections tests are
// still writing to, and OpenSSL writes with plain write(2).
//
// Thread affinity: a Daemon's and a Client's methods may be called from one thread at a time
// (log(), wait_for_log() and port() are safe from any thread).
#pragma once

#include <openssl/ssl.h>
#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace turnstile::integration {

using std::chrono::milliseconds;
using namespace std::chrono_literals;

// Path of the turnstiled binary under test: $TURNSTILED_UNDER_TEST when set, else the
// TURNSTILED_PATH compile definition.
const char* turnstiled_path();

struct DaemonOptions {
  // Flags appended after `--host <host> --port 0`. A `--host`/`--port` flag (or `--host=...`,
  // `--port=...`) here replaces the harness's own.
  std::vector<std::string> args;
  std::string host = "127.0.0.1";
  // Extra environment entries, "NAME=value", added to the inherited environment. Inherited
  // TURNSTILE_* and DFLOCKD_* variables are removed first, so the host's settings never leak in.
  std::vector<std::string> env;
  // false: return as soon as the process runs (for tests of startup failures; port() is then 0
  // until a listening line is seen, use wait_listening()).
  bool wait_until_listening = true;
  milliseconds startup_timeout = 10s;
};

class Daemon {
 public:
  explicit Daemon(std::vector<std::string> args = {});
  explicit Daemon(DaemonOptions options);
  ~Daemon();  // SIGTERM, ≤ 5 s, SIGKILL; always reaped; log printed if the test failed
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  pid_t pid() const { return pid_; }
  // The port from the listening line (0 until it is seen).
  int port() const;
  // The address from the listening line without brackets ("127.0.0.1", "::1"); empty until seen.
  std::string listen_host() const;
  bool tls() const;    // the listening line said "tls"
  int shards() const;  // N from the listening line

  // Waits for the listening line; false if it did not come (or the process exited) in time.
  bool wait_listening(milliseconds timeout);

  // Every line written so far (stderr and stdout, in arrival order, without the '\n').
  std::vector<std::string> log() const;
  std::string log_text() const;  // the same, '\n'-joined: for failure messages
  // The first line at index >= from_line that matches `pattern` (std::regex_search), waiting up
  // to `timeout` for it to be written.
  std::optional<std::string> wait_for_log(const std::regex& pattern, milliseconds timeout,
                                          std::size_t from_line = 0) const;
  std::optional<std::string> wait_for_log(const std::string& pattern, milliseconds timeout,
                                          std::size_t from_line = 0) const;
  std::size_t log_size() const;  // number of lines so far, for from_line

  // kill(pid, signal); no effect once the process has been reaped.
  void signal(int signal_number);
  // Waits for the process to exit; its raw wait status (WIFEXITED...), or nullopt on timeout.
  // Once reaped, returns the same status every time.
  std::optional<int> wait_exit(milliseconds timeout);
  // SIGTERM then wait_exit(timeout): the clean-shutdown path. nullopt if it did not exit in time
  // (the destructor will then kill it).
  std::optional<int> stop(milliseconds timeout = 5s);
  bool running();  // not yet exited (reaps it if it has)

 private:
  void start(const DaemonOptions& options);
  void read_loop(int fd);
  void parse_listening(const std::string& line);
  bool try_reap(int flags);

  pid_t pid_ = -1;
  std::optional<int> status_;
  std::thread reader_;
  int read_fd_ = -1;

  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::vector<std::string> lines_;  // guarded by mutex_
  bool eof_ = false;                // guarded by mutex_
  int port_ = 0;                    // guarded by mutex_
  std::string listen_host_;         // guarded by mutex_
  bool tls_ = false;                // guarded by mutex_
  int shards_ = 0;                  // guarded by mutex_
};

struct ClientOptions {
  int receive_buffer_bytes = 0;  // > 0: SO_RCVBUF set before connect (a slow reader)
  bool tls = false;              // TLS client, no certificate verification
  std::string tls_server_name;   // SNI, when tls
  milliseconds connect_timeout = 5s;
  milliseconds send_timeout = 5s;
};

class Client {
 public:
  // Connects to host:port (IPv4 or IPv6 literal); throws std::runtime_error on failure.
  explicit Client(int port, ClientOptions options = {});
  Client(const std::string& host, int port, ClientOptions options = {});
  ~Client();
  Client(Client&& other) noexcept;
  Client& operator=(Client&& other) noexcept;
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Writes every byte (or fails): false on error or when send_timeout passes.
  bool send(std::string_view bytes);
  // The next '\n'-terminated line without its '\n' (a '\r' before it is kept). nullopt on
  // timeout, EOF (eof() then true) or error; a partial line stays buffered.
  std::optional<std::string> read_line(milliseconds timeout = 5s);
  // send("cmd\nkey\narg\n") then read_line(timeout). On no reply returns "<timeout>",
  // "<closed>" (EOF or error) or "<send failed>", so test output shows what happened.
  std::string request(std::string_view command, std::string_view key, std::string_view arg,
                      milliseconds timeout = 5s);
  // Waits for EOF (or a reset) from the server. Bytes that arrive meanwhile stay readable.
  bool closed_by_peer(milliseconds timeout);
  // Reads until `timeout` passes or EOF, then returns (and forgets) every byte received and not
  // yet returned by read_line. pending(0ms) takes what has already arrived.
  std::string pending(milliseconds timeout = 0ms);
  bool eof() const { return eof_; }
  bool reset() const { return reset_; }  // the peer reset the connection

  void shutdown_write();  // half-close: the server sees EOF, we can still read
  void close();           // orderly close (FIN)
  void abort();           // close with SO_LINGER 0: the server sees a reset
  int fd() const { return fd_; }

 private:
  // Reads what is available within `timeout` into buffer_; false on timeout, EOF or error.
  bool fill(milliseconds timeout);
  void connect_to(const std::string& host, int port);
  void tls_handshake(const std::string& server_name);

  int fd_ = -1;
  ClientOptions options_;
  SSL_CTX* tls_context_ = nullptr;
  SSL* tls_ = nullptr;
  std::string buffer_;
  bool eof_ = false;
  bool reset_ = false;
};

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  // Writes `contents` to file(name) and returns that path.
  std::string write(const std::string& name, const std::string& contents) const;

 private:
  std::string path_;
};

// A self-signed certificate (EC P-256, valid from an hour ago for a day, CN and SAN
// `common_name`) and its private key, written as PEM into `directory`.
struct CertificateFiles {
  std::string certificate_path;
  std::string key_path;
};
CertificateFiles write_self_signed_certificate(const std::string& directory,
                                               const std::string& common_name = "localhost");

// Request bytes: "cmd\nkey\narg\n".
std::string frame(std::string_view command, std::string_view key, std::string_view arg);

// Splits a reply on single spaces: "ok abc 33" -> {"ok", "abc", "33"}.
std::vector<std::string> fields(const std::string& reply);

// The fence of a 32-hex token (its first 16 hex digits, big-endian); nullopt if malformed.
std::optional<unsigned long long> fence_of(const std::string& token);

// The answer to one HTTP/1.1 request (http_request).
struct HttpResult {
  int status = 0;                              // 0: no complete response head
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;                            // everything after the head
  std::string raw;                             // every byte received
  bool has(std::string_view text) const { return raw.find(text) != std::string::npos; }
  // The value of header `name` (lower-case), "" when absent.
  std::string header(const std::string& name) const {
    const auto found = headers.find(name);
    return found == headers.end() ? "" : found->second;
  }
};

// One HTTP/1.1 request to 127.0.0.1:port on its own connection (`Connection: close`), read until
// the server closes it or `timeout` passes. `headers` are extra "Name: value" lines. A request
// that is not a GET, or has a body, carries `Content-Type: application/json` and its length.
HttpResult http_request(int port, std::string_view method, std::string_view path,
                        std::string_view body = "", const std::vector<std::string>& headers = {},
                        milliseconds timeout = 5s);

// A daemon with the HTTP API on a loopback port: `args` and `--http-port=<a free port>`, started
// again on another port (five times at most) when another process takes the port meanwhile.
// Throws std::runtime_error when the HTTP API never starts.
struct HttpDaemon {
  explicit HttpDaemon(std::vector<std::string> args = {});
  int http_port = 0;
  std::unique_ptr<Daemon> daemon;  // TCP on daemon->port()
};

// A loopback port nothing listens on right now (bound, then closed). Another process may take it
// before the caller does; callers that bind it retry.
std::uint16_t unused_loopback_port();

// Polls `condition` every 5 ms until it holds or `timeout` passes; returns its last value.
template <typename Condition>
bool eventually(Condition condition, milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (condition()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
}

}  // namespace turnstile::integration
