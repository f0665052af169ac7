// Matching one signal channel against many subscribed patterns (core/signal_index.h), on one
// thread. The target (issue 23): 100,000 patterns matched in at most 2 us.
// Run: ./build/bench/core_bench --benchmark_filter=Signal --benchmark_repetitions=5
//
// The subscriptions are what a fleet of services might hold: per service and region, an exact
// channel for each of a few events, a `*` over the events, a `>` over the region, and a queue
// group over the events; 1,000 services, so that a channel of one service is matched among all
// the others' patterns. The channel matched names an existing service, region and event, and
// matches 4 of them: the exact channel, the `*`, the `>` and the group.
#include <benchmark/benchmark.h>

#include <string>

#include "core/signal_index.h"

namespace turnstile::core {
namespace {

void fill(SignalIndex& index, std::int64_t patterns) {
  SignalIndex::Listener who = 0;
  for (std::int64_t i = 0; index.size() < static_cast<std::size_t>(patterns); ++i) {
    const std::string service = "svc" + std::to_string(i % 1000);
    const std::string region = "r" + std::to_string(i / 1000);
    const std::string stem = service + "." + region;
    index.add(stem + ".started", "", ++who);
    index.add(stem + ".stopped", "", ++who);
    index.add(stem + ".*", "", ++who);
    index.add(stem + ".>", "", ++who);
    index.add(stem + ".*", "workers", ++who);
  }
}

// Matches `channel` over and over among state.range(0) patterns.
void match_among(benchmark::State& state, const std::string& channel) {
  SignalIndex index;
  fill(index, state.range(0));
  SignalIndex::Matches matches;
  for (auto _ : state) {
    index.match(channel, matches);
    benchmark::DoNotOptimize(matches.exact.data());
  }
  index.match(channel, matches);
  state.counters["patterns"] = static_cast<double>(index.size());
  state.counters["matched"] =
      static_cast<double>(matches.exact.size() + matches.exact_groups.size() +
                          matches.wildcard.size() + matches.wildcard_groups.size());
}

void BM_SignalMatch(benchmark::State& state) { match_among(state, "svc42.r0.started"); }
BENCHMARK(BM_SignalMatch)->Arg(1'000)->Arg(10'000)->Arg(100'000);

// A channel that matches nothing: the cost of looking.
void BM_SignalMatchNothing(benchmark::State& state) { match_among(state, "svc42.r9999.started"); }
BENCHMARK(BM_SignalMatchNothing)->Arg(100'000);

}  // namespace
}  // namespace turnstile::core
