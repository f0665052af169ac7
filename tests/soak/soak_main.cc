// turnstile-soak: a chaos soak of real processes (docs/soak.md). It starts a replicated cluster of
// turnstiled nodes on loopback (tests/integration/cluster_harness.h), runs worker threads that
// lock and take semaphore slots through client::Members, writes to a protected resource per key
// while holding (tests/soak/resource.h), injects the faults of a seeded schedule
// (tests/soak/schedule.h), and exits 1 on any safety or liveness violation, printing the command
// that replays the schedule.
//
// Threads: the main thread owns the cluster (the harness wants one thread to start and stop its
// daemons) and injects the faults; the workers only talk to the nodes; a watchdog thread looks
// for acquires that do not return.
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "client/members.h"
#include "tests/integration/cluster_harness.h"
#include "tests/soak/history.h"
#include "tests/soak/resource.h"
#include "tests/soak/schedule.h"

namespace turnstile::soak {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;
using namespace std::chrono_literals;

struct Options {
  std::uint64_t seed = 1;
  double minutes = 2;
  std::size_t nodes = 3;
  std::size_t workers = 8;
  std::size_t keys = 4;
  bool verbose = false;
  std::string history;  // --history FILE: every call as JSON lines (history.h)
};

constexpr seconds kAcquireTimeout{5};  // guarded acquires
constexpr seconds kTryLease{3};        // plain `l key 0 3` tries, two-phase and dropped holds
constexpr seconds kTwoPhaseWait{2};    // `w key 2` after a `queued`
constexpr seconds kDropAcquire{2};     // `l key 2 3` of a hold that drops its connection
constexpr seconds kHangSlack{30};      // an acquire returns within its timeout plus this
constexpr int kOrphanTtlSeconds = 10;
const std::string kAdminToken = "soak-admin-token";
// Each node's raft directory is a tmpfs this big when the soak may mount one (root); a disk-full
// fault fills it to kFullDiskLeaves, below the daemons' --raft-min-free-mb of 64 MiB.
constexpr std::uint64_t kSmallDiskBytes = std::uint64_t{128} << 20;
constexpr std::uint64_t kFullDiskLeaves = std::uint64_t{16} << 20;

std::string replay_command(const Options& options) {
  char text[200];
  std::snprintf(text, sizeof text,
                "turnstile-soak --seed %llu --minutes %g --nodes %zu --workers %zu --keys %zu",
                static_cast<unsigned long long>(options.seed), options.minutes, options.nodes,
                options.workers, options.keys);
  return text;
}

[[noreturn]] void usage(const char* problem) {
  std::fprintf(stderr,
               "turnstile-soak: %s\nusage: turnstile-soak [--seed S] [--minutes M] [--nodes 3|5] "
               "[--workers N] [--keys K] [--history FILE] [--verbose]\n",
               problem);
  std::exit(2);
}

Options parse_options(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--verbose") {
      options.verbose = true;
      continue;
    }
    if (i + 1 >= argc) usage(("missing value after " + flag).c_str());
    const std::string value = argv[++i];
    if (flag == "--history") {
      options.history = value;
      continue;
    }
    char* end = nullptr;
    errno = 0;
    if (flag == "--minutes") {
      options.minutes = std::strtod(value.c_str(), &end);
      if (*end != '\0' || !(options.minutes > 0) || options.minutes > 24 * 60) {
        usage("--minutes takes a number of minutes above 0");
      }
      continue;
    }
    const unsigned long long number = std::strtoull(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || errno != 0) usage(("bad number for " + flag).c_str());
    if (flag == "--seed") {
      options.seed = number;
    } else if (flag == "--nodes") {
      if (number != 3 && number != 5) usage("--nodes takes 3 or 5");
      options.nodes = number;
    } else if (flag == "--workers") {
      if (number < 1 || number > 256) usage("--workers takes 1..256");
      options.workers = number;
    } else if (flag == "--keys") {
      if (number < 1 || number > 1000) usage("--keys takes 1..1000");
      options.keys = number;
    } else {
      usage(("unknown option " + flag).c_str());
    }
  }
  return options;
}

// A fault as it happened: when, what it hit, and the leases lost while it counted as active.
struct FaultRecord {
  Fault planned;
  std::string what;  // describe() plus the node it hit
  Clock::time_point began;
  std::optional<Clock::time_point> ended;  // repaired, and a leader answered again
  bool took_leader = false;
  std::optional<milliseconds> failover;  // fault to the first grant after it (took_leader)
  std::string first_grant;               // which kind of acquire made that grant
  std::optional<milliseconds> election;  // fault to another node answering `barrier` ok
  std::map<std::string, int> losses;     // by reason
  bool skipped = false;
};

// Everything the threads share. Counters under one mutex: a few hundred operations a second do
// not need more.
class Soak {
 public:
  Soak(Options options, Clock::time_point start) : options_(options), start_(start) {}

  const Options& options() const { return options_; }
  Violations& violations() { return violations_; }
  double at(Clock::time_point time) const {
    return std::chrono::duration<double>(time - start_).count();
  }

  void count(const std::string& kind, const std::string& outcome) {
    std::lock_guard lock(mutex_);
    ++ops_[kind][outcome];
  }

  // A call answered now: counted, and kept in the history (history.h). `fence`: a grant's.
  void record(std::size_t worker, const std::string& kind, const std::string& key,
              Clock::time_point sent, std::string_view outcome, std::uint64_t fence = 0) {
    const std::string text(outcome);
    count(kind, text);
    history_.add(Call{worker, kind, key, at(sent), at(Clock::now()), text, fence});
  }
  History& history() { return history_; }

  std::size_t begin_fault(const Fault& planned, std::string what, bool took_leader) {
    std::lock_guard lock(mutex_);
    FaultRecord record;
    record.planned = planned;
    record.what = std::move(what);
    record.began = Clock::now();
    record.took_leader = took_leader;
    faults_.push_back(std::move(record));
    if (options_.verbose) {
      std::printf("%7.1fs fault: %s\n", at(faults_.back().began), faults_.back().what.c_str());
      std::fflush(stdout);
    }
    return faults_.size() - 1;
  }
  void skip_fault(const Fault& planned, std::string why) {
    std::lock_guard lock(mutex_);
    FaultRecord record;
    record.planned = planned;
    record.what = describe(planned) + ": skipped, " + why;
    record.began = record.ended.emplace(Clock::now());
    record.skipped = true;
    faults_.push_back(std::move(record));
  }
  // Adds what happened to a fault's description ("; transfer refused: 409").
  void note(std::size_t index, const std::string& text) {
    std::lock_guard lock(mutex_);
    faults_.at(index).what += "; " + text;
  }
  void end_fault(std::size_t index) {
    std::lock_guard lock(mutex_);
    faults_.at(index).ended = Clock::now();
    if (options_.verbose) {
      std::printf("%7.1fs repaired: %s\n", at(*faults_[index].ended), faults_[index].what.c_str());
      std::fflush(stdout);
    }
  }

  // A grant whose acquire was sent at `sent` and answered at `now`: it closes every failover
  // whose fault came before the acquire was sent (a grant sent earlier may have been made by the
  // old leader).
  void granted(const std::string& kind, Clock::time_point sent, Clock::time_point now) {
    std::lock_guard lock(mutex_);
    for (FaultRecord& fault : faults_) {
      if (fault.took_leader && !fault.failover && fault.began <= sent) {
        fault.failover = std::chrono::duration_cast<milliseconds>(now - fault.began);
        fault.first_grant = kind;
      }
    }
  }
  void elected(std::size_t index) {
    std::lock_guard lock(mutex_);
    FaultRecord& fault = faults_.at(index);
    if (fault.election) return;
    fault.election = std::chrono::duration_cast<milliseconds>(Clock::now() - fault.began);
  }

  // A guard reported a loss. It belongs to a fault active at some time in the last lease
  // period; with none, it is a violation: a majority was up and the guard kept renewing.
  void lost(const std::string& key, seconds lease, const client::LossEvent& event) {
    const Clock::time_point now = Clock::now();
    const std::string reason(client::loss_reason_name(event.reason));
    bool attributed = false;
    {
      std::lock_guard lock(mutex_);
      ++losses_[reason];
      for (FaultRecord& fault : faults_) {
        if (fault.skipped) continue;
        if (fault.began <= now && (!fault.ended || *fault.ended + lease >= now)) {
          ++fault.losses[reason];
          attributed = true;
        }
      }
    }
    if (options_.verbose || !attributed) {
      std::fprintf(stderr, "%7.1fs lease lost on %s: %s (%s)\n", at(now), key.c_str(),
                   reason.c_str(), event.error.to_string().c_str());
    }
    if (!attributed) {
      violations_.add("lease lost with no fault in progress: " + key + " at " +
                      std::to_string(at(now)) + " s, " + reason + " (" + event.error.to_string() +
                      ")");
    }
  }

  void print_summary(const std::vector<const ProtectedResource*>& resources, double elapsed_s,
                     std::uint64_t guard_failovers, std::uint64_t lost_inside,
                     const std::optional<std::string>& no_small_disks);

 private:
  const Options options_;
  const Clock::time_point start_;
  Violations violations_;
  std::mutex mutex_;
  std::map<std::string, std::map<std::string, std::uint64_t>> ops_;
  std::vector<FaultRecord> faults_;
  std::map<std::string, std::uint64_t> losses_;
  History history_;
};

void Soak::print_summary(const std::vector<const ProtectedResource*>& resources, double elapsed_s,
                         std::uint64_t guard_failovers, std::uint64_t lost_inside,
                         const std::optional<std::string>& no_small_disks) {
  std::lock_guard lock(mutex_);
  std::printf(
      "\n== turnstile-soak summary: seed %llu, %g min planned, %.1f s run, %zu nodes, "
      "%zu workers, %zu keys ==\n",
      static_cast<unsigned long long>(options_.seed), options_.minutes, elapsed_s, options_.nodes,
      options_.workers, options_.keys);

  std::printf("\nfaults injected          count\n");
  std::map<std::string, int> by_kind;
  int skipped = 0;
  for (const FaultRecord& fault : faults_) {
    if (fault.skipped) {
      ++skipped;
      continue;
    }
    std::string kind(fault_kind_name(fault.planned.kind));
    if (picks_a_member(fault.planned.kind)) kind += fault.took_leader ? " (leader)" : " (follower)";
    ++by_kind[kind];
  }
  for (const auto& [kind, n] : by_kind) std::printf("  %-26s %5d\n", kind.c_str(), n);
  if (skipped > 0) std::printf("  %-26s %5d\n", "skipped at run time", skipped);
  if (no_small_disks) {
    std::printf("  disk full faults are skipped: %s (it needs root)\n", no_small_disks->c_str());
  }

  std::printf("\nops                      outcome              count\n");
  for (const auto& [kind, outcomes] : ops_) {
    for (const auto& [outcome, n] : outcomes) {
      std::printf("  %-22s %-18s %7llu\n", kind.c_str(), outcome.c_str(),
                  static_cast<unsigned long long>(n));
    }
  }
  std::uint64_t entries = 0, readoptions = 0;
  for (const auto& resource : resources) {
    entries += resource->entries();
    readoptions += resource->readoptions();
  }
  std::printf("  %-22s %-18s %7llu\n", "protected resource", "entries",
              static_cast<unsigned long long>(entries));
  std::printf("  %-22s %-18s %7llu\n", "protected resource", "own slot again",
              static_cast<unsigned long long>(readoptions));
  std::printf("  %-22s %-18s %7llu\n", "guards", "rode a failover",
              static_cast<unsigned long long>(guard_failovers));

  std::vector<long long> durations;
  int without_grant = 0;
  for (const FaultRecord& fault : faults_) {
    if (!fault.took_leader) continue;
    if (fault.failover) {
      durations.push_back(fault.failover->count());
    } else {
      ++without_grant;
    }
  }
  std::sort(durations.begin(), durations.end());
  std::vector<long long> elections;
  for (const FaultRecord& fault : faults_) {
    if (fault.election) elections.push_back(fault.election->count());
  }
  std::sort(elections.begin(), elections.end());
  std::printf("\nfailovers (fault to first grant after it; to a new leader answering barrier)\n");
  std::printf("  leader faults %zu, measured %zu",
              durations.size() + static_cast<std::size_t>(without_grant), durations.size());
  if (!durations.empty()) {
    std::printf(", p50 %lld ms, max %lld ms", durations[(durations.size() - 1) / 2],
                durations.back());
  }
  if (without_grant > 0) std::printf(", %d with no grant before the load stopped", without_grant);
  std::printf("\n  new leader seen %zu", elections.size());
  if (!elections.empty()) {
    std::printf(", p50 %lld ms, max %lld ms", elections[(elections.size() - 1) / 2],
                elections.back());
  }
  std::printf("\n");

  std::printf("\nleases lost by reason     count\n");
  if (losses_.empty()) std::printf("  (none)\n");
  for (const auto& [reason, n] : losses_) {
    std::printf("  %-22s %6llu\n", reason.c_str(), static_cast<unsigned long long>(n));
  }
  std::printf("  %-22s %6llu\n", "of them while inside",
              static_cast<unsigned long long>(lost_inside));

  std::printf("\nfault windows (start s, end s: what; failover; leases lost)\n");
  for (const FaultRecord& fault : faults_) {
    std::printf("  %7.1f %7.1f  %s", at(fault.began), fault.ended ? at(*fault.ended) : -1.0,
                fault.what.c_str());
    if (fault.election) {
      std::printf("; new leader after %lld ms", static_cast<long long>(fault.election->count()));
    }
    if (fault.failover) {
      std::printf("; first grant after %lld ms (%s)",
                  static_cast<long long>(fault.failover->count()), fault.first_grant.c_str());
    }
    for (const auto& [reason, n] : fault.losses) std::printf("; lost %d %s", n, reason.c_str());
    std::printf("\n");
  }

  const std::vector<std::string> found = violations_.all();
  std::printf("\nviolations: %zu\n", found.size());
  for (const std::string& violation : found) std::printf("  %s\n", violation.c_str());
  std::fflush(stdout);
}

// What the watchdog knows of one worker's acquire in flight.
struct InFlight {
  std::atomic<std::int64_t> started_ms{0};  // since the epoch of Clock; 0: none
  std::atomic<std::int64_t> limit_ms{0};
  std::atomic<bool> reported{false};
  std::atomic<bool> done{false};  // the worker returned
};

std::int64_t now_ms() {
  return std::chrono::duration_cast<milliseconds>(Clock::now().time_since_epoch()).count();
}

class Worker {
 public:
  Worker(Soak& soak, std::size_t index, std::vector<client::Endpoint> endpoints,
         std::vector<std::unique_ptr<ProtectedResource>>& locks,
         std::vector<std::unique_ptr<ProtectedResource>>& semaphores, std::atomic<bool>& stop,
         InFlight& in_flight)
      : soak_(soak),
        index_(index),
        members_(std::move(endpoints), connect_options(), client::FailoverOptions{}),
        random_(soak.options().seed * 1'000'003ULL + index),
        locks_(locks),
        semaphores_(semaphores),
        stop_(stop),
        in_flight_(in_flight) {}

  void run() {
    while (!stop_.load()) {
      const double pick = unit();
      if (pick < 0.40) {
        guarded(false);
      } else if (pick < 0.60) {
        guarded(true);
      } else if (pick < 0.75) {
        plain_try();
      } else if (pick < 0.90) {
        two_phase();
      } else {
        drop_while_holding();
      }
    }
    connection_.reset();
    in_flight_.done = true;
  }

  std::uint64_t guard_failovers() const { return guard_failovers_->load(); }
  std::uint64_t lost_inside() const { return lost_inside_; }

 private:
  static client::ConnectOptions connect_options() {
    client::ConnectOptions options;
    // Loopback answers in well under a second; a stopped leader should not hold a call for the
    // default 10 s.
    options.connect_timeout = 1000ms;
    options.reply_timeout = 2000ms;
    return options;
  }

  double unit() { return std::uniform_real_distribution<double>(0, 1)(random_); }
  std::size_t below(std::size_t n) {
    return std::uniform_int_distribution<std::size_t>(0, n - 1)(random_);
  }
  milliseconds between(int low_ms, int high_ms) {
    return milliseconds(std::uniform_int_distribution<int>(low_ms, high_ms)(random_));
  }

  void begin_acquire(seconds timeout) {
    in_flight_.limit_ms = std::chrono::duration_cast<milliseconds>(timeout + kHangSlack).count();
    in_flight_.reported = false;
    in_flight_.started_ms = now_ms();
  }
  void end_acquire(const std::string& kind, Clock::time_point sent, seconds timeout) {
    in_flight_.started_ms = 0;
    const auto took = Clock::now() - sent;
    if (took > timeout + kHangSlack && !in_flight_.reported.exchange(true)) {
      soak_.violations().add(
          kind + " took " + std::to_string(std::chrono::duration_cast<milliseconds>(took).count()) +
          " ms, beyond its timeout plus " + std::to_string(kHangSlack.count()) + " s");
    }
  }

  // Stays inside `resource` for `hold` or until the guard stops being held.
  void hold(ProtectedResource& resource, const client::Guard& guard, milliseconds hold_for) {
    if (guard.state() != client::GuardState::kHeld) return;
    if (!resource.enter(guard.fence(), members_.stable_ref())) return;
    const auto until = Clock::now() + hold_for;
    while (Clock::now() < until && guard.state() == client::GuardState::kHeld) {
      std::this_thread::sleep_for(2ms);
    }
    resource.leave(guard.fence());
    if (guard.state() == client::GuardState::kLost) ++lost_inside_;
  }

  void guarded(bool semaphore) {
    auto& resources = semaphore ? semaphores_ : locks_;
    const std::size_t index = below(resources.size());
    const std::string key = (semaphore ? "soak-sem-" : "soak-lock-") + std::to_string(index);
    const std::string kind = semaphore ? "semaphore (guard)" : "lock (guard)";
    const seconds lease{3 + static_cast<int>(below(3))};
    client::GuardOptions options;
    options.timeout = kAcquireTimeout;
    options.lease = lease;
    Soak* soak = &soak_;
    options.on_lost = [soak, key, lease](const client::LossEvent& event) {
      soak->lost(key, lease, event);
    };
    std::shared_ptr<std::atomic<std::uint64_t>> failovers = guard_failovers_;
    options.on_failover = [failovers](const client::Endpoint&) { ++*failovers; };

    const auto sent = Clock::now();
    begin_acquire(kAcquireTimeout);
    auto acquired = [&]() -> client::Result<client::Guard> {
      if (semaphore) {
        auto slot = members_.semaphore(key, 2, options);
        if (!slot) return slot.error();
        return client::Guard(std::move(*slot));
      }
      auto lock = members_.lock(key, options);
      if (!lock) return lock.error();
      return client::Guard(std::move(*lock));
    }();
    end_acquire(kind, sent, kAcquireTimeout);
    if (!acquired) {
      soak_.record(index_, kind, key, sent, client::error_code_name(acquired.error().code));
      return;
    }
    soak_.record(index_, kind, key, sent, "ok", acquired->fence());
    soak_.granted(kind, sent, Clock::now());
    // Most holds are short; one in ten outlasts the lease a few times over, so that guards renew
    // and ride through the faults that come meanwhile.
    const int lease_ms = static_cast<int>(lease.count()) * 1000;
    const bool long_hold = unit() < 0.1;
    if (long_hold) soak_.count(kind, "ok, long hold");
    hold(*resources[index], *acquired,
         long_hold ? between(lease_ms, 3 * lease_ms) : between(20, 300));
    const auto release_sent = Clock::now();
    const auto released = acquired->release();
    soak_.record(index_, "release (guard)", key, release_sent,
                 released ? "ok" : client::error_code_name(released.error().code));
  }

  // The worker's plain connection to the leader (stable ref bound), opened when it has none.
  bool ensure_connection(const std::string& kind) {
    if (connection_ && connection_->is_open()) return true;
    connection_.reset();
    auto connected = members_.connect_leader(3000ms);
    if (!connected) {
      soak_.count(kind,
                  "no leader: " + std::string(client::error_code_name(connected.error().code)));
      std::this_thread::sleep_for(50ms);
      return false;
    }
    connection_.emplace(std::move(*connected));
    return true;
  }

  // Inside the lock's resource for 20-50 ms with a grant that is not renewed, checked against its
  // lease first; then `r`.
  void short_hold(const std::string& kind, std::size_t index, const std::string& key,
                  const client::Grant& grant) {
    const auto lease_end = Clock::now() + grant.lease;
    if (resources_enter(*locks_[index], grant.fence())) {
      std::this_thread::sleep_for(between(20, 50));
      if (Clock::now() >= lease_end) soak_.count(kind, "held past its lease");
      locks_[index]->leave(grant.fence());
    }
    const auto release_sent = Clock::now();
    const auto released = connection_->release(key, grant.token);
    soak_.record(index_, "release (" + kind + ")", key, release_sent,
                 released ? "ok" : client::error_code_name(released.error().code));
    if (!released) connection_.reset();
  }

  // `e key 3`, then `w key 2` if queued, on the plain connection, as a user's two-phase acquire
  // would be written.
  void two_phase() {
    const std::size_t index = below(locks_.size());
    const std::string key = "soak-lock-" + std::to_string(index);
    if (!ensure_connection("two-phase")) return;
    const auto sent = Clock::now();
    begin_acquire(kTwoPhaseWait);
    auto enqueued = connection_->enqueue(key, kTryLease);
    std::optional<client::Grant> grant;
    std::optional<client::ErrorCode> failed;
    if (!enqueued) {
      failed = enqueued.error().code;
    } else if (enqueued->acquired) {
      grant = enqueued->acquired;
      soak_.count("two-phase", "acquired at enqueue");
    } else {
      auto waited = connection_->wait(key, kTwoPhaseWait);
      if (waited) {
        grant = *waited;
      } else {
        failed = waited.error().code;
      }
    }
    end_acquire("two-phase", sent, kTwoPhaseWait);
    if (failed) {
      soak_.record(index_, "two-phase", key, sent, client::error_code_name(*failed));
      if (*failed != client::ErrorCode::kTimeout) connection_.reset();
      return;
    }
    soak_.record(index_, "two-phase", key, sent, "ok", grant->fence());
    soak_.granted("two-phase", sent, Clock::now());
    short_hold("two-phase", index, key, *grant);
  }

  // `l key 2 3` on a connection of its own, a short stay inside the resource, then the connection
  // dropped without `r`, as a client that crashed: the lock is orphaned under the stable ref
  // until its lease ends or this worker takes it back (`own slot again`), and the next holder's
  // fence is above it.
  void drop_while_holding() {
    const std::size_t index = below(locks_.size());
    const std::string key = "soak-lock-" + std::to_string(index);
    auto connected = members_.connect_leader(3000ms);
    if (!connected) {
      soak_.count("dropped hold",
                  "no leader: " + std::string(client::error_code_name(connected.error().code)));
      std::this_thread::sleep_for(50ms);
      return;
    }
    const auto sent = Clock::now();
    begin_acquire(kDropAcquire);
    auto grant = connected->lock(key, kDropAcquire, kTryLease);
    end_acquire("dropped hold", sent, kDropAcquire);
    if (!grant) {
      soak_.record(index_, "dropped hold", key, sent, client::error_code_name(grant.error().code));
      return;
    }
    soak_.record(index_, "dropped hold", key, sent, "ok, then dropped", grant->fence());
    soak_.granted("dropped hold", sent, Clock::now());
    if (resources_enter(*locks_[index], grant->fence())) {
      std::this_thread::sleep_for(between(10, 30));
      locks_[index]->leave(grant->fence());
    }
    connected->close();
  }

  // `l key 0 lease` on a plain connection to the leader, as a user's try-lock would.
  void plain_try() {
    const std::size_t index = below(locks_.size());
    const std::string key = "soak-lock-" + std::to_string(index);
    if (!ensure_connection("try-lock")) return;
    const auto sent = Clock::now();
    begin_acquire(0s);
    auto grant = connection_->lock(key, 0s, kTryLease);
    end_acquire("try-lock", sent, 0s);
    if (!grant) {
      const client::ErrorCode code = grant.error().code;
      soak_.record(index_, "try-lock", key, sent, client::error_code_name(code));
      if (code != client::ErrorCode::kTimeout) connection_.reset();
      if (code == client::ErrorCode::kTimeout) std::this_thread::sleep_for(between(5, 30));
      return;
    }
    soak_.record(index_, "try-lock", key, sent, "ok", grant->fence());
    soak_.granted("try-lock", sent, Clock::now());
    // No renewal: a hold far shorter than the lease.
    short_hold("try-lock", index, key, *grant);
  }

  bool resources_enter(ProtectedResource& resource, std::uint64_t fence) {
    return resource.enter(fence, members_.stable_ref());
  }

  Soak& soak_;
  const std::size_t index_;
  client::Members members_;
  std::mt19937_64 random_;
  std::vector<std::unique_ptr<ProtectedResource>>& locks_;
  std::vector<std::unique_ptr<ProtectedResource>>& semaphores_;
  std::atomic<bool>& stop_;
  InFlight& in_flight_;
  std::optional<client::Connection> connection_;
  std::shared_ptr<std::atomic<std::uint64_t>> guard_failovers_ =
      std::make_shared<std::atomic<std::uint64_t>>(0);
  std::uint64_t lost_inside_ = 0;
};

void sleep_seconds(double s) {
  std::this_thread::sleep_for(
      std::chrono::duration_cast<milliseconds>(std::chrono::duration<double>(s)));
}

// Starts node i again from its directory; a start can fail when another process took a port.
bool restart(integration::LoopbackCluster& cluster, std::size_t i, Violations& violations) {
  for (int attempt = 1; attempt <= 3; ++attempt) {
    try {
      cluster.start(i);
      return true;
    } catch (const std::runtime_error& e) {
      std::fprintf(stderr, "restart of node %zu failed (attempt %d): %s\n", i + 1, attempt,
                   e.what());
      sleep_seconds(0.5);
    }
  }
  violations.add("node " + std::to_string(i + 1) + " did not start again from its directory");
  return false;
}

// Sleeps `down_s` from now. When the fault took the leader, it watches meanwhile for another node
// to answer `barrier` ok, and records when one does.
void wait_down(Soak& soak, integration::LoopbackCluster& cluster, std::size_t record,
               bool took_leader, double down_s) {
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(down_s));
  while (took_leader && Clock::now() < until) {
    const auto left = std::chrono::duration_cast<milliseconds>(until - Clock::now());
    if (cluster.leader(std::max(left, 1ms), 20ms)) {
      soak.elected(record);
      break;
    }
  }
  std::this_thread::sleep_until(until);
}

// The cluster as the fault injector sees it: the voters (node indexes, ascending) and the spare
// slot, which has ports and an empty directory and runs only while it is being added
// (FaultKind::kReplace). `no_small_disks`: why the raft directories are not size-limited, when
// they are not (disk-full faults are then skipped).
struct Stage {
  integration::LoopbackCluster& cluster;
  std::vector<std::size_t> voters;
  std::optional<std::size_t> spare;
  std::optional<std::string> no_small_disks;
};

integration::HttpResult admin(int port, std::string_view method, const std::string& path,
                              const std::string& body, milliseconds timeout) {
  return integration::http_request(port, method, path, body,
                                   {"Authorization: Bearer " + kAdminToken}, timeout);
}

std::string node_name(std::size_t i) { return "node " + std::to_string(i + 1); }

std::string http_outcome(const integration::HttpResult& result) {
  return std::to_string(result.status) + " " + result.body.substr(0, 200);
}

bool exited_with(const std::optional<int>& status, int code) {
  return status && WIFEXITED(*status) && WEXITSTATUS(*status) == code;
}

// Adds the spare as a voter, then removes `target`, which is wiped and becomes the spare.
void replace(Soak& soak, Stage& stage, std::size_t record, std::size_t target) {
  integration::LoopbackCluster& cluster = stage.cluster;
  const std::size_t spare = *stage.spare;
  if (!restart(cluster, spare, soak.violations())) return;
  std::optional<std::size_t> leader = cluster.leader(15s);
  if (!leader) {
    soak.violations().add("no leader to add " + node_name(spare) + " to");
    return;
  }
  const std::string body = R"({"id":)" + std::to_string(spare + 1) + R"(,"raft_address":")" +
                           cluster.raft_address(spare) + R"(","client_address":")" +
                           cluster.address(spare) + R"("})";
  const integration::HttpResult added =
      admin(cluster.http_port(*leader), "POST", "/v1/admin/voters", body, 60s);
  if (added.status != 200) {
    soak.violations().add("adding " + node_name(spare) + ": " + http_outcome(added));
    cluster.stop(spare, 10s);
    cluster.wipe(spare);
    return;
  }
  stage.voters.push_back(spare);
  std::sort(stage.voters.begin(), stage.voters.end());
  stage.spare.reset();
  soak.note(record, node_name(spare) + " added");

  leader = cluster.leader(15s);
  const integration::HttpResult removed =
      leader ? admin(cluster.http_port(*leader), "DELETE",
                     "/v1/admin/voters/" + std::to_string(target + 1), "", 30s)
             : integration::HttpResult{};
  if (removed.status != 200) {
    // The cluster goes on with one voter more and no spare: later replacements are skipped.
    soak.violations().add("removing " + node_name(target) + ": " + http_outcome(removed));
    return;
  }
  cluster.mark_removed(target);
  soak.note(record, node_name(target) + " removed");
  if (!cluster.stop(target, 10s)) cluster.kill(target);
  cluster.wipe(target);
  std::erase(stage.voters, target);
  stage.spare = target;
}

// Fills `target`'s directory: the node must leave with status 1 (docs/cluster.md, "A full
// disk"). Emptied and restarted after `down_s`.
void fill_up(Soak& soak, Stage& stage, std::size_t record, std::size_t target, bool took_leader,
             double down_s) {
  integration::LoopbackCluster& cluster = stage.cluster;
  const std::string dir = cluster.raft_dir(target);
  integration::fill_disk(dir, "soak-filler", kFullDiskLeaves);
  const std::optional<int> status = cluster.node(target).wait_exit(10s);
  if (!exited_with(status, 1)) {
    soak.violations().add(
        node_name(target) + ", its disk full, did not leave with exit status 1 within 10 s (" +
        (status ? "wait status " + std::to_string(*status) : "still running") + ")");
  }
  cluster.kill(target);  // reaped already, or still running: either way it is down now
  wait_down(soak, cluster, record, took_leader, down_s);
  std::filesystem::remove(dir + "/soak-filler");
  restart(cluster, target, soak.violations());
}

// Injects one fault, waits it out and repairs it; returns once a leader answers again.
void inject(Soak& soak, Stage& stage, const Fault& fault) {
  integration::LoopbackCluster& cluster = stage.cluster;
  const std::optional<std::size_t> leader = cluster.leader(15s);
  if (!leader) {
    soak.violations().add("no leader answered for 15 s with every node up, before " +
                          describe(fault));
    soak.skip_fault(fault, "no leader");
    return;
  }
  if (fault.kind == FaultKind::kDiskFull && stage.no_small_disks) {
    soak.skip_fault(fault, "no size-limited directories");
    return;
  }
  if (fault.kind == FaultKind::kReplace && !stage.spare) {
    soak.skip_fault(fault, "no spare node (an earlier removal failed)");
    return;
  }
  std::size_t target = *leader;
  if (picks_a_member(fault.kind) && !fault.on_leader) {
    target = stage.voters[fault.node % stage.voters.size()];
  }
  const bool took_leader = target == *leader;
  const std::string what =
      describe(fault) + " (" + node_name(target) + (took_leader ? ", the leader)" : ")");
  const std::size_t record = soak.begin_fault(fault, what, took_leader);
  switch (fault.kind) {
    case FaultKind::kKill:
      if (!cluster.kill(target)) soak.violations().add("node did not die of SIGKILL in 5 s");
      wait_down(soak, cluster, record, took_leader, fault.down_s);
      restart(cluster, target, soak.violations());
      break;
    case FaultKind::kStop:
      cluster.sigstop(target);
      wait_down(soak, cluster, record, took_leader, fault.down_s);
      cluster.sigcont(target);
      break;
    case FaultKind::kTerm:
      cluster.terminate(target);
      // It hands over before it exits: the next leader comes while it drains.
      if (cluster.leader(15s, 20ms)) soak.elected(record);
      if (!cluster.node(target).wait_exit(15s)) {
        soak.violations().add(node_name(target) + " did not exit within 15 s of SIGTERM");
        cluster.kill(target);
      }
      wait_down(soak, cluster, record, false, fault.down_s);
      restart(cluster, target, soak.violations());
      break;
    case FaultKind::kTransfer: {
      const integration::HttpResult moved =
          admin(cluster.http_port(target), "POST", "/v1/admin/leader/transfer", "", 10s);
      if (moved.status != 200) soak.note(record, "transfer refused: " + http_outcome(moved));
      if (cluster.leader(15s, 20ms)) soak.elected(record);
      break;
    }
    case FaultKind::kReplace:
      replace(soak, stage, record, target);
      break;
    case FaultKind::kDiskFull:
      fill_up(soak, stage, record, target, took_leader, fault.down_s);
      break;
    case FaultKind::kSkew:
      if (!cluster.kill(target)) soak.violations().add("node did not die of SIGKILL in 5 s");
      wait_down(soak, cluster, record, took_leader, fault.down_s);
      cluster.set_node_args(target,
                            {"--test-monotonic-offset-s", std::to_string(fault.monotonic_offset_s),
                             "--test-wall-clock-offset-s", std::to_string(fault.wall_offset_s)});
      restart(cluster, target, soak.violations());
      break;
  }
  if (!cluster.leader(20s)) {
    soak.violations().add("no leader answered within 20 s of repairing " + what);
  } else if (took_leader) {
    soak.elected(record);  // no other node led before the repair: the election came after it
  }
  soak.end_fault(record);
}

// The nodes' cluster and raft lines (their elections, their leads and follows), for finding out
// what a violation was. A restarted node's lines start at its last start.
void print_node_logs(integration::LoopbackCluster& cluster) {
  for (std::size_t i = 0; i < cluster.size(); ++i) {
    std::fprintf(stderr, "--- node %zu (since its last start) ---\n", i + 1);
    try {
      for (const std::string& line : cluster.node(i).log()) {
        if (line.find("cluster") != std::string::npos || line.find("raft") != std::string::npos) {
          std::fprintf(stderr, "%s\n", line.c_str());
        }
      }
    } catch (const std::out_of_range&) {
      std::fprintf(stderr, "(never started)\n");
    }
  }
}

// Wall-clock time, to set the soak's seconds beside the nodes' log lines.
std::string utc_now() {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  tm utc{};
  gmtime_r(&now.tv_sec, &utc);
  char text[64];
  std::snprintf(text, sizeof text, "%02d:%02d:%02d.%03ld UTC", utc.tm_hour, utc.tm_min, utc.tm_sec,
                now.tv_nsec / 1'000'000);
  return text;
}

int run(const Options& options) {
  const std::vector<Fault> schedule = make_schedule(options.seed, options.minutes, options.nodes);
  std::printf("turnstile-soak: seed %llu, %g min, %zu nodes, %zu workers, %zu keys, %zu faults\n",
              static_cast<unsigned long long>(options.seed), options.minutes, options.nodes,
              options.workers, options.keys, schedule.size());
  if (options.verbose) {
    for (const Fault& fault : schedule) std::printf("  planned: %s\n", describe(fault).c_str());
  }
  std::fflush(stdout);

  // Every raft directory on its own small tmpfs, when the soak may mount one.
  std::optional<std::string> no_small_disks;
  {
    integration::TempDir probe;
    no_small_disks = integration::mount_small_disk(probe.path(), 1 << 20);
    if (!no_small_disks) integration::unmount_small_disk(probe.path());
  }
  std::set<std::string> mounted;  // outlives the cluster, whose destructor unmounts
  integration::LoopbackClusterOptions cluster_options;
  cluster_options.nodes = options.nodes + 1;  // the last one is the spare (FaultKind::kReplace)
  cluster_options.voters = options.nodes;
  cluster_options.extra_args = {"--orphan-ttl", std::to_string(kOrphanTtlSeconds), "--admin-token",
                                kAdminToken};
  if (!no_small_disks) {
    cluster_options.on_new_dir = [&mounted](const std::string& dir) {
      if (!integration::mount_small_disk(dir, kSmallDiskBytes)) mounted.insert(dir);
    };
    cluster_options.on_drop_dir = [&mounted](const std::string& dir) {
      if (mounted.erase(dir) > 0) integration::unmount_small_disk(dir);
    };
  }
  integration::LoopbackCluster cluster(cluster_options);
  if (!cluster.leader(30s)) {
    std::fprintf(stderr, "turnstile-soak: the cluster elected no leader in 30 s\n");
    return 2;
  }
  Stage stage{cluster, {}, options.nodes, no_small_disks};
  for (std::size_t i = 0; i < options.nodes; ++i) stage.voters.push_back(i);
  std::vector<client::Endpoint> endpoints;
  for (std::size_t i = 0; i < cluster.size(); ++i) {
    client::Endpoint endpoint;
    endpoint.host = "127.0.0.1";
    endpoint.port = static_cast<std::uint16_t>(cluster.client_port(i));
    endpoints.push_back(endpoint);
  }

  const Clock::time_point start = Clock::now();
  std::printf("load starts at %s (t=0 below)\n", utc_now().c_str());
  std::fflush(stdout);
  Soak soak(options, start);
  std::vector<std::unique_ptr<ProtectedResource>> locks, semaphores;
  for (std::size_t k = 0; k < options.keys; ++k) {
    locks.push_back(std::make_unique<ProtectedResource>("soak-lock-" + std::to_string(k), 1, true,
                                                        soak.violations()));
  }
  for (std::size_t k = 0; k < std::max<std::size_t>(1, options.keys / 2); ++k) {
    semaphores.push_back(std::make_unique<ProtectedResource>("soak-sem-" + std::to_string(k), 2,
                                                             false, soak.violations()));
  }

  std::atomic<bool> stop{false};
  std::vector<std::unique_ptr<InFlight>> in_flight;
  std::vector<std::unique_ptr<Worker>> workers;
  std::vector<std::thread> threads;
  for (std::size_t w = 0; w < options.workers; ++w) {
    in_flight.push_back(std::make_unique<InFlight>());
    workers.push_back(
        std::make_unique<Worker>(soak, w, endpoints, locks, semaphores, stop, *in_flight.back()));
  }
  for (auto& worker : workers) threads.emplace_back([&worker] { worker->run(); });

  std::atomic<bool> watchdog_stop{false};
  std::thread watchdog([&] {
    while (!watchdog_stop.load()) {
      for (std::size_t w = 0; w < in_flight.size(); ++w) {
        InFlight& flight = *in_flight[w];
        const std::int64_t started = flight.started_ms.load();
        if (started != 0 && now_ms() - started > flight.limit_ms.load() &&
            !flight.reported.exchange(true)) {
          soak.violations().add("worker " + std::to_string(w) + ": an acquire has not returned " +
                                "within its timeout plus " + std::to_string(kHangSlack.count()) +
                                " s");
        }
      }
      std::this_thread::sleep_for(200ms);
    }
  });

  const auto end = start + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(options.minutes * 60));
  for (const Fault& fault : schedule) {
    const auto when = start + std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(fault.at_s));
    std::this_thread::sleep_until(when);
    // A fault still being repaired delays the next one: never two nodes down at once.
    inject(soak, stage, fault);
  }
  std::this_thread::sleep_until(end);

  stop = true;
  // Every worker returns within its longest call; beyond that it hangs, which the watchdog has
  // reported: the summary is printed and the process ends without waiting for it.
  const auto join_deadline = Clock::now() + kAcquireTimeout + kHangSlack + 10s;
  bool all_done = false;
  while (!all_done && Clock::now() < join_deadline) {
    all_done = true;
    for (const auto& flight : in_flight) all_done = all_done && flight->done.load();
    if (!all_done) std::this_thread::sleep_for(50ms);
  }
  const double elapsed_s = soak.at(Clock::now());
  watchdog_stop = true;
  watchdog.join();
  if (!all_done) soak.violations().add("a worker did not stop: an acquire hangs");

  for (const auto& resource : locks) {
    if (resource->inside() != 0)
      soak.violations().add("a lock's resource still has holders inside");
  }
  if (all_done && !cluster.leader(20s)) soak.violations().add("no leader at the end of the run");

  std::uint64_t guard_failovers = 0, lost_inside = 0;
  if (all_done) {
    for (std::thread& thread : threads) thread.join();
    for (const auto& worker : workers) {
      guard_failovers += worker->guard_failovers();
      lost_inside += worker->lost_inside();
    }
  }
  // The fence order in real time, over every grant of the run (history.h): only once the workers
  // stopped, since a hung one may still add.
  if (all_done) {
    for (std::string& breach : soak.history().check_fence_order()) {
      soak.violations().add(std::move(breach));
    }
  }
  std::vector<const ProtectedResource*> resources;
  for (const auto& resource : locks) resources.push_back(resource.get());
  for (const auto& resource : semaphores) resources.push_back(resource.get());
  soak.print_summary(resources, elapsed_s, guard_failovers, lost_inside, no_small_disks);
  const bool failed = soak.violations().count() > 0;
  if (failed || options.verbose) print_node_logs(cluster);
  const std::string history_path =
      !options.history.empty() ? options.history
      : failed                 ? "turnstile-soak-history-" + std::to_string(options.seed) + ".jsonl"
                               : "";
  if (!history_path.empty()) {
    std::ofstream out(history_path);
    soak.history().write_jsonl(out);
    std::printf("\nhistory: %zu calls written to %s%s\n", soak.history().size(),
                history_path.c_str(), out ? "" : " (the write FAILED)");
  }
  if (failed)
    std::printf("\nFAILED. Replay the fault schedule with:\n  %s\n",
                replay_command(options).c_str());
  else
    std::printf("\nPASSED (replay: %s)\n", replay_command(options).c_str());
  std::fflush(stdout);
  if (!all_done) {
    // The hung workers still use the cluster and their threads cannot be joined: end here. The
    // nodes get SIGKILL with this thread (PR_SET_PDEATHSIG, tests/integration/harness.h).
    for (std::size_t i = 0; i < cluster.size(); ++i) {
      try {
        cluster.kill(i);
      } catch (const std::out_of_range&) {
        // never started (the spare)
      }
    }
    for (const std::string& dir : mounted) integration::unmount_small_disk(dir);
    std::_Exit(1);
  }
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace turnstile::soak

int main(int argc, char** argv) {
  const turnstile::soak::Options options = turnstile::soak::parse_options(argc, argv);
  // The small disks' mounts are the soak's own, in a mount namespace of its own (when it may make
  // one: root): they go with the soak and its nodes however it ends, Ctrl-C and kill included.
  // Before any thread starts, so that every thread and node shares it.
  if (::unshare(CLONE_NEWNS) == 0) {
    ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr);
  }
  try {
    return turnstile::soak::run(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "turnstile-soak: %s\n", e.what());
    return 2;
  }
}
