// Which shard owns a key. Production (turnstiled) and the simulator place keys with this one
// rule, so a key always lives on one engine and its fences strictly increase.
//
// Thread affinity: a pure function, safe anywhere.
#pragma once

#include <cstddef>
#include <string_view>

#include "core/types.h"

namespace turnstile::core {

// XXH3 of the namespaced key (a namespace byte, then the key bytes) modulo `shards` (>= 1).
std::size_t shard_of(Namespace ns, std::string_view key, std::size_t shards);

}  // namespace turnstile::core
