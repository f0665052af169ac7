// Fuzzing of the replicated log's entries (core/log_entry.h) and their application
// (core/replica.h), as a follower meets them: bytes from a peer or from a disk.
//
// The input is cut into entries at each 0xff 0xfe pair (so that the fuzzer can grow a log of
// several). Each piece goes to decode_entry, which must not crash; a piece that decodes must
// re-encode to exactly its own bytes (one encoding per entry). The decoded entries are applied in
// order to two replicas, one of them given every entry twice (a replay after a restart): results,
// deliveries and digests must agree at every index, and a replay must change nothing. Whatever
// the commands, the engine's contracts must hold (a Submit while one is parked, a Cancel or Close
// of an unknown session, a Tick at any time, time going backwards).
//
// Snapshots: after every third entry a third replica is replaced by one restored from the first
// one's snapshot, and must go on exactly like it. A piece that is not an entry is offered to
// Replica::restore as a snapshot from a peer: it must be refused, or be a consistent state that
// saves back to the same bytes and applies the rest of the log without breaking a contract.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "core/log_entry.h"
#include "core/replica.h"

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_log: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace turnstile::core;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  Replica replica(EngineConfig{});
  Replica replayed(EngineConfig{});
  auto resumed = std::make_unique<Replica>(EngineConfig{});
  std::unique_ptr<Replica> offered;  // restored from a piece that is not an entry
  std::uint64_t index = 0;
  std::size_t start = 0;
  while (start <= input.size()) {
    std::size_t end = input.find("\xff\xfe", start);
    if (end == std::string_view::npos) end = input.size();
    const std::string_view piece = input.substr(start, end - start);
    start = end + 2;
    const std::optional<LogEntry> entry = decode_entry(piece);
    if (!entry) {
      auto candidate = std::make_unique<Replica>(EngineConfig{});
      if (candidate->restore(piece)) {
        // A snapshot of an older engine version is restored and saved in the current one, so
        // the bytes may change once; after that they must not.
        const std::string saved = candidate->save();
        auto again = std::make_unique<Replica>(EngineConfig{});
        check(again->restore(saved) && again->save() == saved,
              "a restored snapshot, saved, restores and saves to other bytes");
        offered = std::move(candidate);
      }
      continue;
    }
    // An entry of the current version re-encodes to its bytes (an older one to the current
    // encoding).
    if (static_cast<std::uint8_t>(piece[0]) == kLogEntryVersion) {
      check(encode_entry(*entry) == piece, "a decoded entry re-encodes to other bytes");
    }
    ++index;
    const AppliedEntry a = replica.apply(index, *entry);
    const AppliedEntry b = replayed.apply(index, *entry);
    check(a.results.size() == entry->commands.size(), "a result per command");
    check(a.deliveries == b.deliveries, "replicas delivered differently");
    for (std::size_t i = 0; i < a.results.size(); ++i) {
      check(a.results[i].reply == b.results[i].reply, "replicas replied differently");
      check(a.results[i].dropped_parked == b.results[i].dropped_parked,
            "replicas dropped differently");
    }
    check(replayed.apply(index, *entry).results.empty(), "a replay applied something");
    check(replica.digest() == replayed.digest(), "replica digests differ");
    const AppliedEntry c = resumed->apply(index, *entry);
    check(c.deliveries == a.deliveries, "a restored replica delivered differently");
    for (std::size_t i = 0; i < a.results.size(); ++i) {
      check(a.results[i].reply == c.results[i].reply, "a restored replica replied differently");
    }
    if (index % 3 == 0) {
      resumed = std::make_unique<Replica>(EngineConfig{});
      check(resumed->restore(replica.save()), "a replica's own snapshot was refused");
    }
    check(resumed->save() == replica.save(), "a restored replica holds another state");
    if (offered) offered->apply(offered->applied_index() + 1, *entry);
  }
  return 0;
}
