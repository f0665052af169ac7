// Which shard owns a key. Production (turnstiled) and the simulator place keys with this one
// rule, so a key always lives on one engine and its fences strictly increase.
//
// Thread affinity: a pure function, safe anywhere.
#pragma once

#include <cstddef>
#include <string_view>

#include "core/types.h"

namespace turnstile::core {

// XXH3-64 of the key bytes, seeded by the namespace (locks and semaphores of the same name are
// different resources and may land on different shards), modulo `shards` (>= 1; one shard takes
// every key without hashing).
std::size_t shard_of(Namespace ns, std::string_view key, std::size_t shards);

}  // namespace turnstile::core
