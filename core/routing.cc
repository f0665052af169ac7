#include "core/routing.h"

#include <cstdint>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/assert.h"

namespace turnstile::core {

std::size_t shard_of(Namespace ns, std::string_view key, std::size_t shards) {
  TS_ASSERT(shards >= 1);
  if (shards == 1) return 0;
  // The namespace seeds the hash, so `l k` and `sl k` (different resources) may land apart.
  const auto seed = static_cast<XXH64_hash_t>(ns == Namespace::kLock ? 0x6c6f636b : 0x73656d61);
  const std::uint64_t hash = XXH3_64bits_withSeed(key.data(), key.size(), seed);
  return static_cast<std::size_t>(hash % shards);
}

}  // namespace turnstile::core
