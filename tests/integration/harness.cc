#include "tests/integration/harness.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <utility>

#include "client/http_response.h"

extern char** environ;

namespace turnstile::integration {
namespace {

// The daemon closes connections that tests are still writing to (that is what many of them
// check). OpenSSL writes through plain write(2), so a SIGPIPE would end the test binary
// silently: every binary linked with the harness ignores it.
const bool kSigpipeIgnored = [] {
  std::signal(SIGPIPE, SIG_IGN);
  return true;
}();

using Clock = std::chrono::steady_clock;

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1'000'000));
}

bool has_flag(const std::vector<std::string>& args, const std::string& name) {
  for (const std::string& arg : args) {
    if (arg == name || arg.rfind(name + "=", 0) == 0) return true;
  }
  return false;
}

bool is_config_variable(const char* entry) {
  return std::strncmp(entry, "TURNSTILE_", 10) == 0 || std::strncmp(entry, "DFLOCKD_", 8) == 0;
}

}  // namespace

const char* turnstiled_path() {
  // TURNSTILED_UNDER_TEST runs the tests against another build (to show a test fails on the code
  // before a fix).
  if (const char* other = std::getenv("TURNSTILED_UNDER_TEST"); other != nullptr && *other) {
    return other;
  }
  return TURNSTILED_PATH;
}

// ---- Daemon -----------------------------------------------------------------------------------

namespace {
DaemonOptions with_args(std::vector<std::string> args) {
  DaemonOptions options;
  options.args = std::move(args);
  return options;
}
}  // namespace

Daemon::Daemon(std::vector<std::string> args) : Daemon(with_args(std::move(args))) {}

Daemon::Daemon(DaemonOptions options) {
  start(options);
  if (options.wait_until_listening && !wait_listening(options.startup_timeout)) {
    signal(SIGKILL);
    wait_exit(5s);
    if (reader_.joinable()) reader_.join();
    if (read_fd_ >= 0) ::close(read_fd_);
    throw std::runtime_error("turnstiled did not report listening within " +
                             std::to_string(options.startup_timeout.count()) + " ms; log:\n" +
                             log_text());
  }
}

void Daemon::start(const DaemonOptions& options) {
  // Everything the child needs is built before fork: after it, only async-signal-safe calls.
  std::vector<std::string> argv_storage{turnstiled_path()};
  if (!has_flag(options.args, "--host") && !options.host.empty()) {
    argv_storage.insert(argv_storage.end(), {"--host", options.host});
  }
  if (!has_flag(options.args, "--port")) argv_storage.insert(argv_storage.end(), {"--port", "0"});
  argv_storage.insert(argv_storage.end(), options.args.begin(), options.args.end());
  std::vector<char*> argv;
  for (std::string& arg : argv_storage) argv.push_back(arg.data());
  argv.push_back(nullptr);

  std::vector<std::string> env_storage;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    if (!is_config_variable(*entry)) env_storage.emplace_back(*entry);
  }
  env_storage.insert(env_storage.end(), options.env.begin(), options.env.end());
  std::vector<char*> envp;
  for (std::string& entry : env_storage) envp.push_back(entry.data());
  envp.push_back(nullptr);

  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    throw std::runtime_error(std::string("pipe2: ") + std::strerror(errno));
  }
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child < 0) {
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  }
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    setpgid(0, 0);  // signals aimed at the test's process group (Ctrl-C) do not reach it
    const int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    dup2(pipe_fds[1], STDOUT_FILENO);
    dup2(pipe_fds[1], STDERR_FILENO);
    close_range(3, ~0U, 0);  // no test socket or pipe of the parent leaks into the daemon
    execve(argv[0], argv.data(), envp.data());
    static const char kExecFailed[] = "harness: execve of turnstiled failed\n";
    ssize_t ignored = write(STDERR_FILENO, kExecFailed, sizeof kExecFailed - 1);
    (void)ignored;
    _exit(127);
  }
  ::close(pipe_fds[1]);
  pid_ = child;
  read_fd_ = pipe_fds[0];
  reader_ = std::thread([this] { read_loop(read_fd_); });
}

Daemon::~Daemon() {
  if (::testing::Test::HasFailure()) {
    std::fprintf(stderr, "---- turnstiled (pid %d) log, for the failed test ----\n%s----\n",
                 static_cast<int>(pid_), log_text().c_str());
  }
  if (!status_ && pid_ > 0) {
    signal(SIGTERM);
    if (!wait_exit(5s)) {
      signal(SIGKILL);
      int status = 0;
      while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
      status_ = status;
    }
  }
  if (reader_.joinable()) reader_.join();
  if (read_fd_ >= 0) ::close(read_fd_);
}

void Daemon::read_loop(int fd) {
  std::string partial;
  char chunk[4096];
  while (true) {
    const ssize_t got = ::read(fd, chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    partial.append(chunk, static_cast<std::size_t>(got));
    std::size_t start = 0;
    std::vector<std::string> complete;
    for (std::size_t end; (end = partial.find('\n', start)) != std::string::npos; start = end + 1) {
      complete.push_back(partial.substr(start, end - start));
    }
    partial.erase(0, start);
    if (complete.empty()) continue;
    std::lock_guard<std::mutex> lock(mutex_);
    for (std::string& line : complete) {
      parse_listening(line);
      lines_.push_back(std::move(line));
    }
    changed_.notify_all();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (!partial.empty()) lines_.push_back(std::move(partial));
  eof_ = true;
  changed_.notify_all();
}

void Daemon::parse_listening(const std::string& line) {
  static const std::regex kListening(R"(listening on (\S+):(\d+) \((tcp|tls), (\d+) shards\))");
  std::smatch match;
  if (port_ != 0 || !std::regex_search(line, match, kListening)) return;
  std::string host = match[1].str();
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  listen_host_ = host;
  port_ = std::stoi(match[2].str());
  tls_ = match[3].str() == "tls";
  shards_ = std::stoi(match[4].str());
}

int Daemon::port() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return port_;
}

std::string Daemon::listen_host() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return listen_host_;
}

bool Daemon::tls() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return tls_;
}

int Daemon::shards() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return shards_;
}

bool Daemon::wait_listening(milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  return changed_.wait_for(lock, timeout, [this] { return port_ != 0 || eof_; }) && port_ != 0;
}

std::vector<std::string> Daemon::log() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return lines_;
}

std::string Daemon::log_text() const {
  std::string text;
  for (const std::string& line : log()) text.append(line).append("\n");
  return text;
}

std::size_t Daemon::log_size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return lines_.size();
}

std::optional<std::string> Daemon::wait_for_log(const std::regex& pattern, milliseconds timeout,
                                                std::size_t from_line) const {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto deadline = Clock::now() + timeout;
  std::size_t next = from_line;
  while (true) {
    for (; next < lines_.size(); ++next) {
      if (std::regex_search(lines_[next], pattern)) return lines_[next];
    }
    if (eof_) return std::nullopt;
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout) {
      for (; next < lines_.size(); ++next) {
        if (std::regex_search(lines_[next], pattern)) return lines_[next];
      }
      return std::nullopt;
    }
  }
}

std::optional<std::string> Daemon::wait_for_log(const std::string& pattern, milliseconds timeout,
                                                std::size_t from_line) const {
  return wait_for_log(std::regex(pattern), timeout, from_line);
}

void Daemon::signal(int signal_number) {
  if (pid_ > 0 && !status_) ::kill(pid_, signal_number);
}

bool Daemon::try_reap(int flags) {
  if (status_) return true;
  int status = 0;
  pid_t got;
  do {
    got = waitpid(pid_, &status, flags);
  } while (got < 0 && errno == EINTR);
  if (got == pid_) {
    status_ = status;
    return true;
  }
  return false;
}

std::optional<int> Daemon::wait_exit(milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!try_reap(WNOHANG)) {
    if (Clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(2ms);
  }
  return status_;
}

std::optional<int> Daemon::stop(milliseconds timeout) {
  signal(SIGTERM);
  return wait_exit(timeout);
}

bool Daemon::running() { return !try_reap(WNOHANG); }

// ---- Client -----------------------------------------------------------------------------------

Client::Client(int port, ClientOptions options) : Client("127.0.0.1", port, std::move(options)) {}

Client::Client(const std::string& host, int port, ClientOptions options)
    : options_(std::move(options)) {
  connect_to(host, port);
  if (options_.tls) {
    try {
      tls_handshake(options_.tls_server_name);
    } catch (...) {
      close();
      throw;
    }
  }
}

Client::~Client() { close(); }

Client::Client(Client&& other) noexcept { *this = std::move(other); }

Client& Client::operator=(Client&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = std::exchange(other.fd_, -1);
    options_ = other.options_;
    tls_context_ = std::exchange(other.tls_context_, nullptr);
    tls_ = std::exchange(other.tls_, nullptr);
    buffer_ = std::move(other.buffer_);
    eof_ = other.eof_;
    reset_ = other.reset_;
  }
  return *this;
}

void Client::connect_to(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  const int error = getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
  if (error != 0 || found == nullptr) {
    throw std::runtime_error("cannot resolve " + host + ": " + gai_strerror(error));
  }
  fd_ = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd_ < 0) {
    freeaddrinfo(found);
    throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  }
  if (options_.receive_buffer_bytes > 0) {
    setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &options_.receive_buffer_bytes,
               sizeof options_.receive_buffer_bytes);
  }
  const int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  int result = ::connect(fd_, found->ai_addr, found->ai_addrlen);
  freeaddrinfo(found);
  if (result != 0 && errno == EINPROGRESS) {
    pollfd waiting{fd_, POLLOUT, 0};
    const auto deadline = Clock::now() + options_.connect_timeout;
    int ready;
    do {
      ready = poll(&waiting, 1, remaining_ms(deadline));
    } while (ready < 0 && errno == EINTR);
    int socket_error = ETIMEDOUT;
    socklen_t length = sizeof socket_error;
    if (ready == 1) getsockopt(fd_, SOL_SOCKET, SO_ERROR, &socket_error, &length);
    result = socket_error == 0 ? 0 : -1;
    errno = socket_error;
  }
  if (result != 0) {
    const std::string reason = std::strerror(errno);
    ::close(fd_);
    fd_ = -1;
    throw std::runtime_error("cannot connect to " + host + ":" + service + ": " + reason);
  }
}

void Client::tls_handshake(const std::string& server_name) {
  tls_context_ = SSL_CTX_new(TLS_client_method());
  if (tls_context_ == nullptr) throw std::runtime_error("SSL_CTX_new failed");
  SSL_CTX_set_verify(tls_context_, SSL_VERIFY_NONE, nullptr);
  tls_ = SSL_new(tls_context_);
  SSL_set_fd(tls_, fd_);
  if (!server_name.empty()) SSL_set_tlsext_host_name(tls_, server_name.c_str());
  const auto deadline = Clock::now() + options_.connect_timeout;
  while (true) {
    const int result = SSL_connect(tls_);
    if (result == 1) return;
    const int error = SSL_get_error(tls_, result);
    short events = 0;
    if (error == SSL_ERROR_WANT_READ) events = POLLIN;
    if (error == SSL_ERROR_WANT_WRITE) events = POLLOUT;
    if (events == 0 || Clock::now() >= deadline) {
      char text[256] = "timeout";
      if (events == 0) ERR_error_string_n(ERR_get_error(), text, sizeof text);
      throw std::runtime_error(std::string("TLS handshake failed: ") + text);
    }
    pollfd waiting{fd_, events, 0};
    poll(&waiting, 1, remaining_ms(deadline));
  }
}

bool Client::send(std::string_view bytes) {
  if (fd_ < 0) return false;
  const auto deadline = Clock::now() + options_.send_timeout;
  while (!bytes.empty()) {
    short wait_events = POLLOUT;
    if (tls_ != nullptr) {
      const int written = SSL_write(tls_, bytes.data(), static_cast<int>(bytes.size()));
      if (written > 0) {
        bytes.remove_prefix(static_cast<std::size_t>(written));
        continue;
      }
      const int error = SSL_get_error(tls_, written);
      if (error == SSL_ERROR_WANT_READ) {
        wait_events = POLLIN;
      } else if (error != SSL_ERROR_WANT_WRITE) {
        return false;
      }
    } else {
      const ssize_t written = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (written > 0) {
        bytes.remove_prefix(static_cast<std::size_t>(written));
        continue;
      }
      if (written < 0 && errno == EINTR) continue;
      if (written < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return false;
    }
    if (Clock::now() >= deadline) return false;
    pollfd waiting{fd_, wait_events, 0};
    poll(&waiting, 1, remaining_ms(deadline));
  }
  return true;
}

bool Client::fill(milliseconds timeout) {
  if (fd_ < 0 || eof_) return false;
  const auto deadline = Clock::now() + timeout;
  char chunk[16384];
  while (true) {
    short wait_events = POLLIN;
    if (tls_ != nullptr) {
      const int got = SSL_read(tls_, chunk, sizeof chunk);
      if (got > 0) {
        buffer_.append(chunk, static_cast<std::size_t>(got));
        return true;
      }
      const int error = SSL_get_error(tls_, got);
      if (error == SSL_ERROR_WANT_WRITE) {
        wait_events = POLLOUT;
      } else if (error != SSL_ERROR_WANT_READ) {
        if (error == SSL_ERROR_SYSCALL && errno == ECONNRESET) reset_ = true;
        eof_ = true;  // close_notify, dirty close or error: nothing more will come
        return false;
      }
    } else {
      const ssize_t got = ::recv(fd_, chunk, sizeof chunk, 0);
      if (got > 0) {
        buffer_.append(chunk, static_cast<std::size_t>(got));
        return true;
      }
      if (got == 0) {
        eof_ = true;
        return false;
      }
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        if (errno == ECONNRESET) reset_ = true;
        eof_ = true;
        return false;
      }
    }
    const int wait_ms = remaining_ms(deadline);
    if (wait_ms == 0 && Clock::now() >= deadline) return false;
    pollfd waiting{fd_, wait_events, 0};
    if (poll(&waiting, 1, wait_ms) == 0) return false;
  }
}

std::optional<std::string> Client::read_line(milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    const std::size_t end = buffer_.find('\n');
    if (end != std::string::npos) {
      std::string line = buffer_.substr(0, end);
      buffer_.erase(0, end + 1);
      return line;
    }
    if (eof_ || fd_ < 0 || Clock::now() >= deadline) return std::nullopt;
    fill(milliseconds(remaining_ms(deadline)));
  }
}

std::string Client::request(std::string_view command, std::string_view key, std::string_view arg,
                            milliseconds timeout) {
  if (!send(frame(command, key, arg))) return "<send failed>";
  std::optional<std::string> line = read_line(timeout);
  if (line) return *line;
  return eof_ ? "<closed>" : "<timeout>";
}

bool Client::closed_by_peer(milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!eof_ && fd_ >= 0 && Clock::now() < deadline) fill(milliseconds(remaining_ms(deadline)));
  return eof_;
}

std::string Client::pending(milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  do {
    fill(milliseconds(remaining_ms(deadline)));
  } while (!eof_ && fd_ >= 0 && Clock::now() < deadline);
  return std::exchange(buffer_, std::string());
}

void Client::shutdown_write() {
  if (fd_ < 0) return;
  if (tls_ != nullptr) SSL_shutdown(tls_);  // close_notify: TLS's end of input
  ::shutdown(fd_, SHUT_WR);
}

void Client::close() {
  if (tls_ != nullptr) {
    if (fd_ >= 0 && !eof_) SSL_shutdown(tls_);
    SSL_free(tls_);
    tls_ = nullptr;
  }
  if (tls_context_ != nullptr) {
    SSL_CTX_free(tls_context_);
    tls_context_ = nullptr;
  }
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

void Client::abort() {
  if (fd_ >= 0) {
    const linger hard{1, 0};
    setsockopt(fd_, SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
  }
  if (tls_ != nullptr) {
    SSL_free(tls_);
    tls_ = nullptr;
  }
  close();
}

// ---- files -------------------------------------------------------------------------------------

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base != nullptr && *base != '\0' ? base : "/tmp") +
                        "/turnstile-integration-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    throw std::runtime_error(std::string("mkdtemp: ") + std::strerror(errno));
  }
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::string TempDir::write(const std::string& name, const std::string& contents) const {
  const std::string path = file(name);
  std::ofstream out(path, std::ios::binary);
  out << contents;
  return path;
}

CertificateFiles write_self_signed_certificate(const std::string& directory,
                                               const std::string& common_name) {
  EVP_PKEY* key = EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256");
  X509* certificate = X509_new();
  if (key == nullptr || certificate == nullptr) {
    EVP_PKEY_free(key);
    X509_free(certificate);
    throw std::runtime_error("cannot create a key or certificate");
  }
  X509_set_version(certificate, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(certificate), 1);
  X509_gmtime_adj(X509_getm_notBefore(certificate), -3600);
  X509_gmtime_adj(X509_getm_notAfter(certificate), 24 * 3600);
  X509_set_pubkey(certificate, key);
  X509_NAME* name = X509_get_subject_name(certificate);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1,
                             0);
  X509_set_issuer_name(certificate, name);
  const std::string san = "DNS:" + common_name;
  X509_EXTENSION* extension =
      X509V3_EXT_conf_nid(nullptr, nullptr, NID_subject_alt_name, san.c_str());
  if (extension != nullptr) {
    X509_add_ext(certificate, extension, -1);
    X509_EXTENSION_free(extension);
  }
  const bool signed_ok = X509_sign(certificate, key, EVP_sha256()) > 0;
  CertificateFiles files{directory + "/cert.pem", directory + "/key.pem"};
  bool written = false;
  if (signed_ok) {
    FILE* cert_file = std::fopen(files.certificate_path.c_str(), "w");
    FILE* key_file = std::fopen(files.key_path.c_str(), "w");
    written = cert_file != nullptr && key_file != nullptr &&
              PEM_write_X509(cert_file, certificate) == 1 &&
              PEM_write_PrivateKey(key_file, key, nullptr, nullptr, 0, nullptr, nullptr) == 1;
    if (cert_file != nullptr) std::fclose(cert_file);
    if (key_file != nullptr) std::fclose(key_file);
  }
  X509_free(certificate);
  EVP_PKEY_free(key);
  if (!written) throw std::runtime_error("cannot write a self-signed certificate");
  return files;
}

// ---- helpers ----------------------------------------------------------------------------------

std::string frame(std::string_view command, std::string_view key, std::string_view arg) {
  std::string bytes;
  bytes.reserve(command.size() + key.size() + arg.size() + 3);
  bytes.append(command).append("\n").append(key).append("\n").append(arg).append("\n");
  return bytes;
}

std::vector<std::string> fields(const std::string& reply) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t end = reply.find(' ', start);
    out.push_back(reply.substr(start, end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

std::optional<unsigned long long> fence_of(const std::string& token) {
  if (token.size() != 32) return std::nullopt;
  for (char c : token) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return std::nullopt;
  }
  return std::stoull(token.substr(0, 16), nullptr, 16);
}

HttpResult http_request(int port, std::string_view method, std::string_view path,
                        std::string_view body, const std::vector<std::string>& headers,
                        milliseconds timeout) {
  Client http(port);
  std::string request = std::string(method) + " " + std::string(path) +
                        " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n";
  for (const std::string& header : headers) request += header + "\r\n";
  if (method != "GET" || !body.empty()) {
    request +=
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  request += "\r\n";
  request += body;
  HttpResult reply;
  if (!http.send(request)) return reply;
  reply.raw = http.pending(timeout);
  std::optional<client::HttpResponseHead> head = client::parse_http_response_head(reply.raw);
  if (!head) return reply;
  reply.status = head->status;
  reply.headers = std::move(head->headers);
  reply.body = reply.raw.substr(head->size);
  return reply;
}

HttpDaemon::HttpDaemon(std::vector<std::string> args) {
  for (int attempt = 0; attempt < 5; ++attempt) {
    http_port = unused_loopback_port();
    std::vector<std::string> all = args;
    all.push_back("--http-port=" + std::to_string(http_port));
    daemon = std::make_unique<Daemon>(all);
    if (daemon->wait_for_log("HTTP API listening on 127\\.0\\.0\\.1:" + std::to_string(http_port),
                             10s)) {
      return;
    }
    daemon.reset();
  }
  throw std::runtime_error("the HTTP API did not start");
}

std::uint16_t unused_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("socket() failed");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  ::close(fd);
  if (!ok) throw std::runtime_error("cannot bind an ephemeral loopback port");
  return ntohs(address.sin_port);
}

}  // namespace turnstile::integration
