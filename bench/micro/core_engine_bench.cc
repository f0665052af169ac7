// Microbenchmarks of the engine alone, on one thread: no sockets, no parsing.
// Run: ./build/bench/core_bench --benchmark_filter=Engine --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <mutex>
#include <string>
#include <vector>

#include "core/engine.h"
#include "core/fence.h"

namespace turnstile::core {
namespace {

Request make(Command command, std::string key) {
  Request request;
  request.command = command;
  request.key = std::move(key);
  return request;
}

// The daemon's fence source with an instant disk: a FenceJournal behind a mutex, as every shard
// of turnstiled shares it, whose writes are durable at once. What it adds to a grant is what the
// journal costs the hot path; the fsync itself runs off it, on the journal thread.
class LockedJournal final : public FenceSource {
 public:
  LockedJournal() : journal_(FenceJournalConfig{}, recover_journal({}), 1'767'225'600'000'000'000) {
    make_durable();
  }
  FenceBlock take(std::uint64_t want) override {
    std::lock_guard lock(mutex_);
    const FenceBlock block = journal_.take(want);
    if (journal_.write_wanted()) make_durable();
    return block;
  }

 private:
  void make_durable() {
    if (auto write = journal_.begin_write()) journal_.end_write(write->seq, true);
  }
  std::mutex mutex_;
  FenceJournal journal_;
};

// One key per worker, each acquire immediately followed by its release: the fast path.
void uncontended_acquire_release(benchmark::State& state, FenceSource* fences) {
  const auto workers = static_cast<int>(state.range(0));
  SplitMix64 salts(1);
  Engine engine(EngineConfig{}, salts, nullptr, fences);
  std::vector<Delivery> out;
  std::vector<Request> acquires;
  std::vector<Request> releases;
  for (int i = 0; i < workers; ++i) {
    Request acquire = make(Command::kLock, "bench_" + std::to_string(i));
    acquire.timeout_s = 10;
    acquire.lease_s = 10;
    acquires.push_back(acquire);
    releases.push_back(make(Command::kRelease, acquire.key));
  }
  std::int64_t now_ns = 0;
  int worker = 0;
  for (auto _ : state) {
    now_ns += 1000;
    const Instant now = Instant::from_ns(now_ns);
    const SessionId session{static_cast<std::uint64_t>(worker) + 1};
    Reply granted = engine.handle(now, session, acquires[static_cast<std::size_t>(worker)], out);
    Request& release = releases[static_cast<std::size_t>(worker)];
    release.token = granted.token;
    Reply released = engine.handle(now, session, release, out);
    benchmark::DoNotOptimize(released);
    if (++worker == workers) worker = 0;
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["pairs_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
void BM_EngineUncontendedAcquireRelease(benchmark::State& state) {
  uncontended_acquire_release(state, nullptr);
}
BENCHMARK(BM_EngineUncontendedAcquireRelease)->Arg(1)->Arg(100)->Arg(10000);

// The same with fences drawn from the fence journal (--fence-state-file).
void BM_EngineUncontendedAcquireReleaseJournal(benchmark::State& state) {
  LockedJournal journal;
  uncontended_acquire_release(state, &journal);
}
BENCHMARK(BM_EngineUncontendedAcquireReleaseJournal)->Arg(1)->Arg(100)->Arg(10000);

// Many sessions queued on one key: each release hands the lock to the head waiter (a Delivery)
// and the releasing session queues again at the tail. One iteration = one hand-off.
void BM_EngineContendedHandoff(benchmark::State& state) {
  const auto sessions = static_cast<std::uint64_t>(state.range(0));
  SplitMix64 salts(2);
  Engine engine(EngineConfig{}, salts);
  std::vector<Delivery> out;
  Request acquire = make(Command::kLock, "hot");
  acquire.timeout_s = 1000;
  Request release = make(Command::kRelease, "hot");
  const Instant now = Instant::from_ns(1);
  Reply first = engine.handle(now, SessionId{1}, acquire, out);
  SessionId holder{1};
  Token token = *first.token;
  for (std::uint64_t s = 2; s <= sessions; ++s) {
    benchmark::DoNotOptimize(engine.handle(now, SessionId{s}, acquire, out));
  }
  for (auto _ : state) {
    out.clear();
    release.token = token;
    benchmark::DoNotOptimize(engine.handle(now, holder, release, out));
    Reply requeued = engine.handle(now, holder, acquire, out);
    benchmark::DoNotOptimize(requeued);
    holder = out.front().session;
    token = *out.front().reply.token;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EngineContendedHandoff)->Arg(2)->Arg(100);

// A semaphore of limit 10 shared by 100 sessions: releases promote queued sessions.
void BM_EngineSemaphore(benchmark::State& state) {
  constexpr std::uint64_t kSessions = 100;
  SplitMix64 salts(3);
  Engine engine(EngineConfig{}, salts);
  std::vector<Delivery> out;
  Request acquire = make(Command::kSemLock, "pool");
  acquire.timeout_s = 1000;
  acquire.limit = 10;
  Request release = make(Command::kSemRelease, "pool");
  const Instant now = Instant::from_ns(1);
  std::vector<std::pair<SessionId, Token>> holders;
  for (std::uint64_t s = 1; s <= kSessions; ++s) {
    Reply reply = engine.handle(now, SessionId{s}, acquire, out);
    if (reply.token) holders.emplace_back(SessionId{s}, *reply.token);
  }
  std::size_t next = 0;
  for (auto _ : state) {
    out.clear();
    auto [session, token] = holders[next];
    release.token = token;
    benchmark::DoNotOptimize(engine.handle(now, session, release, out));
    benchmark::DoNotOptimize(engine.handle(now, session, acquire, out));
    holders[next] = {out.front().session, *out.front().reply.token};
    if (++next == holders.size()) next = 0;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EngineSemaphore);

// Leases that run out: every acquire is left to expire, so time advancing does the work.
void BM_EngineLeaseExpiry(benchmark::State& state) {
  SplitMix64 salts(4);
  Engine engine(EngineConfig{}, salts);
  std::vector<Delivery> out;
  std::vector<Request> acquires;
  for (int i = 0; i < 1024; ++i) {
    Request acquire = make(Command::kLock, "expiring_" + std::to_string(i));
    acquire.lease_s = 1;
    acquires.push_back(acquire);
  }
  std::int64_t now_ns = 0;
  std::size_t i = 0;
  for (auto _ : state) {
    // Each step moves time by 1 ms; a key comes round again after 1.024 s, when the 1 s lease
    // it was granted last time has just expired.
    now_ns += 1'000'000;
    benchmark::DoNotOptimize(
        engine.handle(Instant::from_ns(now_ns), SessionId{1}, acquires[i], out));
    if (++i == acquires.size()) i = 0;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EngineLeaseExpiry);

// A storm: 100,000 leases that end at the same instant, worked off by ticks until none is left
// due. The argument is deadlines_per_call (0: no limit, one tick does them all); the time per
// expiry shows what the limit costs in throughput.
void BM_EngineExpiryStorm(benchmark::State& state) {
  constexpr int kLeases = 100'000;
  EngineConfig config;
  config.deadlines_per_call =
      state.range(0) == 0 ? SIZE_MAX : static_cast<std::size_t>(state.range(0));
  std::vector<Request> acquires;
  for (int i = 0; i < kLeases; ++i) {
    Request acquire = make(Command::kLock, "storm_" + std::to_string(i));
    acquire.lease_s = 1;
    acquires.push_back(acquire);
  }
  std::int64_t now_ns = 0;
  SplitMix64 salts(5);
  Engine engine(config, salts);
  std::vector<Delivery> out;
  std::uint64_t calls = 0;
  for (auto _ : state) {
    state.PauseTiming();
    for (std::size_t i = 0; i < acquires.size(); ++i) {
      engine.handle(Instant::from_ns(now_ns), SessionId{i + 1}, acquires[i], out);
    }
    now_ns += 2'000'000'000;
    state.ResumeTiming();
    const Instant now = Instant::from_ns(now_ns);
    do {
      engine.tick(now, out);
      ++calls;
    } while (engine.next_wake() && *engine.next_wake() <= now);
  }
  state.SetItemsProcessed(state.iterations() * kLeases);
  state.counters["ticks_per_storm"] =
      static_cast<double>(calls) / static_cast<double>(state.iterations());
}
BENCHMARK(BM_EngineExpiryStorm)->Arg(0)->Arg(8)->Arg(32)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace turnstile::core
