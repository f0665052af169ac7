// Throughput of the wire codec: the request parser on a pipelined stream (the target in
// docs/benchmarks.md is >= 500 MB/s on one thread) and the reply encoder.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/protocol.h"
#include "core/types.h"
#include "core/wire.h"

namespace turnstile::core {
namespace {

constexpr std::size_t kChunkBytes = 16 * 1024;  // what a session reads from a socket at once

// Acquire/release pairs over a few hundred keys, the shape of an uncontended benchmark client.
std::string make_stream(std::size_t bytes_min) {
  std::string stream;
  std::uint64_t i = 0;
  while (stream.size() < bytes_min) {
    const std::string key = "bench_" + std::to_string(i % 500);
    const Token token{Fence{i + 1}, 0x9e3779b97f4a7c15 * (i + 1)};
    stream += "l\n" + key + "\n10 33\n";
    stream += "r\n" + key + "\n" + token.to_string() + "\n";
    ++i;
  }
  return stream;
}

// Feeds `stream` in socket-sized chunks and takes every request, as a session does. The result
// object is the caller's, so `fresh_result` chooses between reusing it and starting each request
// with an empty one.
template <bool fresh_result>
void parse_stream(benchmark::State& state) {
  const std::string stream = make_stream(4 * 1024 * 1024);
  std::int64_t requests = 0;
  for (auto _ : state) {
    RequestParser parser;
    std::optional<ParseResult> out;
    for (std::size_t offset = 0; offset < stream.size(); offset += kChunkBytes) {
      std::string_view chunk = std::string_view(stream).substr(offset, kChunkBytes);
      while (!chunk.empty()) {
        if constexpr (fresh_result) out.reset();
        chunk.remove_prefix(parser.parse(chunk, out));
        if (!out) break;
        benchmark::DoNotOptimize(out->request.timeout_s);
        ++requests;
      }
    }
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(stream.size()));
  state.SetItemsProcessed(requests);
}

void BM_ParsePipelinedStream(benchmark::State& state) { parse_stream<false>(state); }
BENCHMARK(BM_ParsePipelinedStream);

void BM_ParsePipelinedStreamFreshResult(benchmark::State& state) { parse_stream<true>(state); }
BENCHMARK(BM_ParsePipelinedStreamFreshResult);

// The worst case for framing: every request arrives one byte at a time.
void BM_ParseOneByteAtATime(benchmark::State& state) {
  const std::string stream = make_stream(64 * 1024);
  for (auto _ : state) {
    RequestParser parser;
    std::optional<ParseResult> out;
    for (char c : stream) {
      (void)parser.parse(std::string_view(&c, 1), out);
      benchmark::DoNotOptimize(out);
    }
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(stream.size()));
}
BENCHMARK(BM_ParseOneByteAtATime);

// Encodes `reply` into a reused buffer, as a session does for every reply it writes.
void encode_repeatedly(benchmark::State& state, const Reply& reply) {
  std::string out;
  for (auto _ : state) {
    out.clear();
    encode_reply(reply, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}

void BM_EncodeGrantReply(benchmark::State& state) {
  encode_repeatedly(state, Reply::granted(Status::kOk, Token{Fence{42}, 0x0123456789abcdef}, 33));
}
BENCHMARK(BM_EncodeGrantReply);

void BM_EncodeStatusReply(benchmark::State& state) {
  encode_repeatedly(state, Reply::of(Status::kOk));
}
BENCHMARK(BM_EncodeStatusReply);

}  // namespace
}  // namespace turnstile::core
