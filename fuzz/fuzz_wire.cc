// Fuzzes the request parser (core/wire.h) with arbitrary bytes cut into arbitrary chunks.
//
// Input: byte 0 picks line_max, byte 1 long_line_max, byte 2 how the stream is chunked, bytes
// 3..10 seed the chunk sizes; the rest is the byte stream a client sends.
//
// Checks:
//  * parse() never consumes more than it is offered, and consumes everything when no request
//    completes; a completed request leaves nothing buffered;
//  * buffered_bytes() <= 2 * line_max + max(line_max, long_line_max) at every step (wire.h's
//    bound; its opening comment's long_line_max + 2 * line_max holds only when long_line_max >=
//    line_max, as in the daemon, and this harness also tries smaller auth caps);
//  * the whole stream at once and the chunked stream give the same results, in order, and the
//    same state at the end;
//  * every request it accepts re-encodes (encode_request) to bytes that parse back to the same
//    request (releases, renewals and check, r/sr/rr/wr/n/sn/rn/wn/check, only when their token
//    is a real token: others cannot be encoded).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/protocol.h"
#include "core/random.h"
#include "core/wire.h"
#include "fuzz/fuzz_input.h"

namespace turnstile::fuzz {
namespace {

using core::ParseResult;
using core::RequestParser;

constexpr const char* kHarness = "fuzz_wire";

void check(bool condition, const char* what) {
  if (!condition) fail(kHarness, what);
}

std::size_t pick_line_max(std::uint8_t choice) {
  if (choice >= 0xc0) return 256;  // the daemon's cap
  return 1 + choice % 40;
}

std::size_t pick_long_line_max(std::uint8_t choice) {
  if (choice >= 0xc0) return 64 * 1024;
  return 1 + choice % 80;
}

struct Outcome {
  std::vector<ParseResult> results;
  bool mid_request = false;
  std::size_t buffered_bytes = 0;
};

// Feeds one chunk to the parser until it is used up, recording every result and checking the
// per-call contract. With `reuse` the caller's ParseResult stays in `slot` between calls, as the
// session does to spare allocations; without, each call starts from nullopt.
void feed(RequestParser& parser, const RequestParser::Limits& limits, std::string_view chunk,
          bool reuse, std::optional<ParseResult>& slot, Outcome& outcome) {
  const std::size_t bound = 2 * limits.line_max + std::max(limits.line_max, limits.long_line_max);
  while (!chunk.empty()) {
    if (!reuse) slot.reset();
    std::size_t consumed = parser.parse(chunk, slot);
    check(consumed <= chunk.size(), "parse consumed more than it was offered");
    check(parser.buffered_bytes() <= bound, "parser buffers more than its bound");
    if (slot) {
      check(consumed > 0, "a request completed without consuming a byte");
      check(!parser.mid_request(), "mid_request() right after a completed request");
      check(parser.buffered_bytes() == 0, "bytes buffered right after a completed request");
      outcome.results.push_back(*slot);
    } else {
      check(consumed == chunk.size(), "parse stopped early without completing a request");
    }
    chunk.remove_prefix(consumed);
  }
}

bool same_result(const ParseResult& a, const ParseResult& b) {
  if (a.error != b.error) return false;
  return !a.ok() || a.request == b.request;
}

bool has_token_argument(core::Command command) {
  const core::Operation operation = core::command_operation(command);
  return operation == core::Operation::kRelease || operation == core::Operation::kRenew ||
         command == core::Command::kCheck;
}

void check_round_trip(const ParseResult& result, const RequestParser::Limits& limits) {
  if (!result.ok()) return;
  const core::Request& request = result.request;
  if (has_token_argument(request.command) && !request.token) return;
  std::string encoded;
  core::encode_request(request, encoded);
  RequestParser parser(limits);
  std::optional<ParseResult> again;
  std::size_t consumed = parser.parse(encoded, again);
  check(consumed == encoded.size(), "re-encoded request not consumed whole");
  check(again.has_value(), "re-encoded request did not complete");
  check(again->ok(), "re-encoded request does not parse");
  check(again->request == request, "re-encoded request parses to a different request");
}

}  // namespace
}  // namespace turnstile::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace turnstile::fuzz;
  FuzzInput input(data, size);
  RequestParser::Limits limits;
  limits.line_max = pick_line_max(input.byte());
  limits.long_line_max = pick_long_line_max(input.byte());
  const std::uint8_t chunking = input.byte();
  turnstile::core::SplitMix64 sizes(input.u64());
  const std::string_view stream = input.rest();

  // The whole stream in one call after another.
  Outcome whole;
  {
    RequestParser parser(limits);
    std::optional<ParseResult> slot;
    feed(parser, limits, stream, /*reuse=*/true, slot, whole);
    whole.mid_request = parser.mid_request();
    whole.buffered_bytes = parser.buffered_bytes();
  }

  // The same stream in chunks: one byte at a time, or random sizes up to a chosen maximum.
  Outcome chunked;
  {
    RequestParser parser(limits);
    std::optional<ParseResult> slot;
    const std::size_t chunk_max = chunking % 4 == 0 ? 1 : 1 + (chunking >> 2);
    std::string_view rest = stream;
    while (!rest.empty()) {
      std::size_t length = 1 + static_cast<std::size_t>(sizes.next_u64() % chunk_max);
      if (length > rest.size()) length = rest.size();
      // A chunk is a copy, so a parser that kept a view into an earlier chunk reads freed memory.
      std::string chunk(rest.substr(0, length));
      feed(parser, limits, chunk, /*reuse=*/(chunking & 1) != 0, slot, chunked);
      rest.remove_prefix(length);
    }
    chunked.mid_request = parser.mid_request();
    chunked.buffered_bytes = parser.buffered_bytes();
  }

  check(whole.results.size() == chunked.results.size(),
        "whole and chunked input give a different number of results");
  for (std::size_t i = 0; i < whole.results.size(); ++i) {
    check(same_result(whole.results[i], chunked.results[i]),
          "whole and chunked input give different results");
    check_round_trip(whole.results[i], limits);
  }
  check(whole.mid_request == chunked.mid_request, "whole and chunked end in a different state");
  check(whole.buffered_bytes == chunked.buffered_bytes,
        "whole and chunked end with different bytes buffered");
  return 0;
}
