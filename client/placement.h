// Placement of keys over several servers, as the dflockd clients do it (Python
// `stable_hash_shard`, and the Go and TypeScript clients): the server at index
// CRC-32/IEEE(key bytes) mod server count. Every client of a deployment must list the servers in
// the same order for a key to land on the same server.
//
// Thread affinity: pure functions, safe anywhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace turnstile::client {

// CRC-32 as zlib's crc32() and Go's crc32.ChecksumIEEE compute it (reflected polynomial
// 0xEDB88320, initial value and final xor 0xFFFFFFFF). crc32_ieee("123456789") == 0xCBF43926.
std::uint32_t crc32_ieee(std::string_view bytes);

// The index of the server that owns `key`. Precondition: server_count > 0.
std::size_t server_index(std::string_view key, std::size_t server_count);

}  // namespace turnstile::client
