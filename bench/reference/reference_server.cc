// turnstile-refserver: the do-nothing reference server. It frames requests exactly as turnstiled
// does (three '\n'-terminated lines, one trailing '\r' stripped) and answers each one at once with
// a canned reply of the right shape, keeping no lock state. What it costs per request is the
// floor any server on this machine pays for sockets and framing; turnstile-bench measures both and
// bench/tools/compare.py reports turnstiled as a ratio of it.
//
//   l sl w sw -> ok <32 hex token> 33        e se -> acquired <32 hex token> 33
//   r sr      -> ok                          n sn -> ok 33
//   and the read-write locks' commands like the lock commands of the same operation:
//   rl wl rw ww -> ok <32 hex token> 33      re we -> acquired <32 hex token> 33
//   rr wr       -> ok                        rn wn -> ok 33
//   ping auth -> ok                          stats -> ok {}
//   listen unlisten -> ok                    signal -> ok 0
//   anything else -> error
// A `signal` is delivered to nobody (`ok 0`) and no `sig` frame is ever written: the floor of a
// signal's request and reply, not of its fan-out (turnstile-bench's signal-emit mode).
// Tokens carry a fence from one process-wide counter, so fences of every key strictly increase
// and turnstile-bench's fence checks pass; that counter is the only state beyond the framing.
// The lease is always 33 (the default lease turnstiled reports when none is requested).
//
// --hand-off L (with --threads 1): the floor of a FIFO hand-off instead of the floor of framing.
// Acquires (l, sl) are granted at most L at a time over all keys together and wait in arrival
// order beyond that; a release (r, sr) by a connection that holds a grant answers ok and grants
// the first waiter, whose reply leaves at the end of the epoll pass; a connection that closes
// gives back its grants and its places in the line. e, se, w and sw answer error, and so does a
// release by a connection that holds nothing; so do the read-write commands (a FIFO semaphore is
// no floor of a read-write lock). A connection is expected to send nothing while its
// acquire waits (turnstile-bench's workers do not). It is the least work any server does to hand
// one hot key from client to client, so turnstile-bench's shared (L 1) and semaphore (L = its
// --limit) modes against it bound what turnstiled can reach in those modes on this machine.
//
// --idle-poll-us N: after its last event a loop polls epoll without blocking for N
// microseconds, yielding the CPU between polls, before it sleeps (turnstiled's shards do the same,
// 100 us by default); 0, the default, sleeps at once.
//
// --journal DIR [--replicate-to HOST:PORT,...] (with --threads 1): the do-nothing replicated
// server. Replies wait until the batch of requests they answer is durable: appended and
// fdatasynced in DIR, and, with --replicate-to, also held by a majority of the cluster those
// replicas and this leader make. --replica DIR runs such a replica on --port instead
// (reference_replication.h says what each does and what none of them does).
//
// Threads: --threads event loops, each with its own epoll set; they share the listening socket
// (EPOLLEXCLUSIVE) and a connection stays on the thread that accepted it. Loopback only. Prints
// "listening on ADDR:PORT" on stdout once it accepts (use --port 0 for an ephemeral port).
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bench/reference/reference_replication.h"
#include "bench/reference/reference_server_args.h"

namespace turnstile::bench {
namespace {

std::atomic<std::uint64_t> g_fence{0};

struct Connection {
  int fd = -1;
  int line = 0;  // which line of the request is being read: 0 command, 1 key, 2 arg
  std::uint8_t command_length = 0;  // bytes of the command line seen so far (capped)
  char command[10] = {};            // the first bytes of the command line ("unlisten\r" fits)
  std::string pending;              // reply bytes the socket did not take yet
  // --hand-off only:
  int holds = 0;        // grants this connection holds
  int queued = 0;       // its places in the line
  std::string granted;  // grants issued to it by another connection's release, not yet sent
  // --journal only:
  int replica = -1;  // >= 0: not a client but the link to that replica; kJournalDone: see below
  std::uint64_t acked = 0;     // replica links: batches the replica has acknowledged
  std::string held;            // replies to requests of the batch being gathered
  std::string held_in_flight;  // replies to requests of the batch in flight
};

constexpr std::uint8_t kCommandMax = sizeof(Connection::command);
// Connection::replica of the journal thread's eventfd (not a connection; --journal only).
constexpr int kJournalDone = -2;

// Appends a grant with the next fence: "<status> <token> 33\n".
void append_grant(std::string& out, std::string_view status) {
  static constexpr char kHex[] = "0123456789abcdef";
  const std::uint64_t fence = g_fence.fetch_add(1, std::memory_order_relaxed) + 1;
  char token[32];
  for (int i = 0; i < 16; ++i) token[i] = kHex[(fence >> (60 - 4 * i)) & 0xf];
  std::memcpy(token + 16, "5a1b5a1b5a1b5a1b", 16);
  out += status;
  out += ' ';
  out.append(token, sizeof token);
  out += " 33\n";
}

// Appends the canned reply to the command `name`.
void append_canned_reply(std::string& out, std::string_view name) {
  if (name == "l" || name == "sl" || name == "w" || name == "sw" || name == "rl" || name == "wl" ||
      name == "rw" || name == "ww") {
    append_grant(out, "ok");
  } else if (name == "e" || name == "se" || name == "re" || name == "we") {
    append_grant(out, "acquired");
  } else if (name == "r" || name == "sr" || name == "rr" || name == "wr" || name == "ping" ||
             name == "auth" || name == "listen" || name == "unlisten") {
    out += "ok\n";
  } else if (name == "signal") {
    out += "ok 0\n";
  } else if (name == "n" || name == "sn" || name == "rn" || name == "wn") {
    out += "ok 33\n";
  } else if (name == "stats") {
    out += "ok {}\n";
  } else {
    out += "error\n";
  }
}

std::int64_t monotonic_ns() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return std::int64_t{now.tv_sec} * 1000000000 + now.tv_nsec;
}

class Loop {
 public:
  Loop(int listen_fd, const ReferenceServerArgs& args)
      : listen_fd_(listen_fd),
        hand_off_limit_(args.hand_off),
        idle_poll_ns_(std::int64_t{args.idle_poll_us} * 1000) {
    if (!args.journal_dir.empty()) journal_.emplace(args.journal_dir);
    for (const int fd : connect_replicas(args.replicate_to)) {
      auto* link = new Connection;
      link->fd = fd;
      link->replica = static_cast<int>(replicas_.size());
      replicas_.push_back(link);
    }
    majority_of_replicas_ = static_cast<int>(replicas_.size() + 1) / 2;
  }

  void run() {
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    epoll_event event{};
    event.events = EPOLLIN | EPOLLEXCLUSIVE;
    event.data.ptr = nullptr;  // the listener
    if (epoll_fd_ < 0 || epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &event) != 0) {
      std::perror("turnstile-refserver: epoll");
      std::exit(1);
    }
    for (Connection* link : replicas_) {
      event.events = EPOLLIN;
      event.data.ptr = link;
      epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, link->fd, &event);
    }
    if (journal_) {
      journal_done_.fd = journal_->done_fd();
      journal_done_.replica = kJournalDone;
      event.events = EPOLLIN;
      event.data.ptr = &journal_done_;
      epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, journal_done_.fd, &event);
    }
    epoll_event events[256];
    std::int64_t last_event = monotonic_ns();
    for (;;) {
      const bool polling = idle_poll_ns_ > 0 && monotonic_ns() - last_event < idle_poll_ns_;
      const int count = epoll_wait(epoll_fd_, events, 256, polling ? 0 : -1);
      if (count > 0 && idle_poll_ns_ > 0) {
        last_event = monotonic_ns();  // no clock read at all when not polling
      } else if (count <= 0 && polling) {
        sched_yield();
      }
      for (int i = 0; i < count; ++i) {
        auto* connection = static_cast<Connection*>(events[i].data.ptr);
        if (connection == nullptr) {
          accept_all();
        } else if (events[i].events & EPOLLOUT && !connection->pending.empty()) {
          flush_pending(*connection);
        } else if (connection->replica >= 0) {
          read_acks(*connection);
        } else if (connection->replica == kJournalDone) {
          journal_durable_ = journal_->take_done() || journal_durable_;
          commit_if_replicated();
        } else {
          serve(*connection);
        }
      }
      send_grants();
      if (journal_) start_batch();
    }
  }

 private:
  void accept_all() {
    for (;;) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      auto* connection = new Connection;
      connection->fd = fd;
      epoll_event event{};
      event.events = EPOLLIN;
      event.data.ptr = connection;
      epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event);
    }
  }

  void serve(Connection& connection) {
    out_.clear();
    for (;;) {
      const ssize_t got = ::recv(connection.fd, buffer_, sizeof buffer_, 0);
      if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
        close_connection(connection);
        return;
      }
      if (got < 0) break;
      if (journal_) gathering_.append(buffer_, static_cast<std::size_t>(got));
      frame(connection, buffer_, static_cast<std::size_t>(got));
      if (static_cast<std::size_t>(got) < sizeof buffer_) break;
    }
    if (!journal_) {
      deliver(connection, out_);
    } else if (!out_.empty()) {
      if (connection.held.empty()) gathered_.push_back(&connection);
      connection.held += out_;  // to be sent when the batch these requests go in commits
    }
  }

  // --journal: sends the requests gathered since the last batch started to every replica and
  // makes them durable here, unless a batch is still in flight.
  void start_batch() {
    if (batch_in_flight_ || gathered_.empty()) return;
    const std::string frame = batch_frame(gathering_);
    gathering_.clear();
    ++batches_started_;
    for (Connection* link : replicas_) deliver(*link, frame);
    journal_durable_ = false;
    journal_->append(frame);
    for (Connection* connection : gathered_) connection->held_in_flight.swap(connection->held);
    in_flight_.swap(gathered_);
    gathered_.clear();
    batch_in_flight_ = true;
    commit_if_replicated();
  }

  // Sends the replies of the batch in flight once it is durable here and a majority of the
  // replicas has it.
  void commit_if_replicated() {
    int have = 0;
    for (const Connection* link : replicas_) have += link->acked >= batches_started_ ? 1 : 0;
    if (!batch_in_flight_ || !journal_durable_ || have < majority_of_replicas_) return;
    batch_in_flight_ = false;
    std::vector<Connection*> answered;
    answered.swap(in_flight_);
    for (Connection* connection : answered) {
      std::string replies;
      replies.swap(connection->held_in_flight);
      deliver(*connection, replies);  // a close here erases it from in_flight_, now empty
    }
  }

  // A replica's acknowledgements: one byte per batch.
  void read_acks(Connection& link) {
    char acks[256];
    const ssize_t got = ::recv(link.fd, acks, sizeof acks, 0);
    if (got < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (got <= 0) replication_failure("lost replica " + std::to_string(link.replica));
    link.acked += static_cast<std::uint64_t>(got);
    commit_if_replicated();
  }

  // Sends `bytes` to the connection, after whatever it still has pending; what the socket does
  // not take waits for EPOLLOUT. May close the connection.
  void deliver(Connection& connection, const std::string& bytes) {
    if (bytes.empty()) return;
    if (!connection.pending.empty()) {
      connection.pending += bytes;  // still blocked on an earlier write: keep the order
      return;
    }
    const ssize_t sent = ::send(connection.fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    const std::size_t done = sent > 0 ? static_cast<std::size_t>(sent) : 0;
    if (sent < 0 && errno != EAGAIN) {
      close_connection(connection);
      return;
    }
    if (done < bytes.size()) {
      connection.pending.assign(bytes, done);
      watch_output(connection, true);
    }
  }

  // --hand-off: the reply to `name` from `connection`, appended to out_.
  void append_hand_off_reply(Connection& connection, std::string_view name) {
    if (name == "l" || name == "sl") {
      if (held_ < hand_off_limit_) {
        ++held_;
        ++connection.holds;
        append_grant(out_, "ok");
      } else {
        waiting_.push_back(&connection);
        ++connection.queued;
      }
    } else if ((name == "r" || name == "sr") && connection.holds > 0) {
      --connection.holds;
      --held_;
      out_ += "ok\n";
      grant_waiters();
    } else if (name == "ping" || name == "auth") {
      out_ += "ok\n";
    } else {
      out_ += "error\n";
    }
  }

  // Grants to the first waiters while there is room; their replies leave in send_grants().
  void grant_waiters() {
    while (held_ < hand_off_limit_ && !waiting_.empty()) {
      Connection& next = *waiting_.front();
      waiting_.pop_front();
      --next.queued;
      ++next.holds;
      ++held_;
      if (next.granted.empty()) woken_.push_back(&next);
      append_grant(next.granted, "ok");
    }
  }

  // The end of an epoll pass: every grant issued by a release goes out.
  void send_grants() {
    while (!woken_.empty()) {
      Connection& connection = *woken_.back();
      woken_.pop_back();
      std::string granted;
      granted.swap(connection.granted);
      deliver(connection, granted);  // a close here grants on, to connections still in woken_
    }
  }

  // Walks the bytes: only the command line is looked at; key and argument lines are skipped.
  void frame(Connection& connection, const char* data, std::size_t size) {
    const char* end = data + size;
    while (data < end) {
      const auto* newline =
          static_cast<const char*>(std::memchr(data, '\n', static_cast<std::size_t>(end - data)));
      const char* line_end = newline != nullptr ? newline : end;
      if (connection.line == 0) {
        for (const char* p = data; p < line_end; ++p) {
          if (connection.command_length < kCommandMax) {
            connection.command[connection.command_length] = *p;
          }
          if (connection.command_length <= kCommandMax) ++connection.command_length;
        }
      }
      if (newline == nullptr) return;
      data = newline + 1;
      if (++connection.line < 3) continue;
      std::size_t length = connection.command_length;
      const bool overflow = length > kCommandMax;
      if (!overflow && length > 0 && connection.command[length - 1] == '\r') --length;
      const std::string_view name =
          overflow ? std::string_view("?") : std::string_view(connection.command, length);
      if (hand_off_limit_ > 0) {
        append_hand_off_reply(connection, name);
      } else {
        append_canned_reply(out_, name);
      }
      connection.line = 0;
      connection.command_length = 0;
    }
  }

  void flush_pending(Connection& connection) {
    const ssize_t sent =
        ::send(connection.fd, connection.pending.data(), connection.pending.size(), MSG_NOSIGNAL);
    if (sent < 0 && errno != EAGAIN) {
      close_connection(connection);
      return;
    }
    if (sent > 0) connection.pending.erase(0, static_cast<std::size_t>(sent));
    if (connection.pending.empty()) watch_output(connection, false);
  }

  void watch_output(Connection& connection, bool on) {
    epoll_event event{};
    event.events = EPOLLIN | (on ? EPOLLOUT : 0u);
    event.data.ptr = &connection;
    epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, connection.fd, &event);
  }

  void close_connection(Connection& connection) {
    if (connection.replica >= 0) replication_failure("lost replica link");
    ::close(connection.fd);  // also removes it from the epoll set
    if (journal_) {
      const auto is_this = [&connection](const Connection* c) { return c == &connection; };
      std::erase_if(gathered_, is_this);
      std::erase_if(in_flight_, is_this);
    }
    if (hand_off_limit_ > 0) {
      const auto is_this = [&connection](const Connection* c) { return c == &connection; };
      if (connection.queued > 0) std::erase_if(waiting_, is_this);
      if (!connection.granted.empty()) std::erase_if(woken_, is_this);
      held_ -= connection.holds;
      grant_waiters();
    }
    delete &connection;
  }

  int listen_fd_;
  const int hand_off_limit_;         // --hand-off; 0: every acquire is granted at once
  const std::int64_t idle_poll_ns_;  // --idle-poll-us
  int epoll_fd_ = -1;
  char buffer_[65536];
  std::string out_;
  // --hand-off only:
  int held_ = 0;                     // grants held over all connections
  std::deque<Connection*> waiting_;  // acquires waiting, in arrival order
  std::vector<Connection*> woken_;   // connections with grants to send at the end of the pass
  // --journal only:
  std::optional<JournalThread> journal_;
  Connection journal_done_;             // stands for the journal thread's eventfd in epoll
  bool journal_durable_ = false;        // the batch in flight is durable here
  std::vector<Connection*> replicas_;   // the links to --replicate-to, in its order
  int majority_of_replicas_ = 0;        // acknowledgements a batch needs besides the journal
  std::string gathering_;               // request bytes of the batch being gathered
  std::vector<Connection*> gathered_;   // clients with replies in `held`
  std::vector<Connection*> in_flight_;  // clients with replies in `held_in_flight`
  std::uint64_t batches_started_ = 0;
  bool batch_in_flight_ = false;
};

}  // namespace
}  // namespace turnstile::bench

int main(int argc, char** argv) {
  return turnstile::bench::run_reference_server(
      argc, argv, "turnstile-refserver", 6389, /*lock_options=*/true,
      [](int fd, const turnstile::bench::ReferenceServerArgs& args) {
        if (!args.replica_dir.empty()) turnstile::bench::run_replica(fd, args.replica_dir);
        turnstile::bench::Loop(fd, args).run();
      });
}
