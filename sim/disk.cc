#include "sim/disk.h"

#include <algorithm>
#include <cstddef>

namespace turnstile::sim {

Disk::Disk(std::uint64_t seed, Digest& digest, std::map<std::string, std::uint64_t>& coverage)
    : prng_(seed, kDisk), digest_(digest), coverage_(coverage) {}

void Disk::apply(const core::JournalWrite& write) {
  const std::size_t end = static_cast<std::size_t>(write.offset) + write.size;
  if (bytes.size() < end) bytes.resize(end, 0);
  std::copy(write.bytes.begin(), write.bytes.begin() + static_cast<std::ptrdiff_t>(write.size),
            bytes.begin() + static_cast<std::ptrdiff_t>(write.offset));
}

void Disk::tear(const core::JournalWrite& write) {
  const std::size_t offset = static_cast<std::size_t>(write.offset);
  const std::size_t prefix = static_cast<std::size_t>(prng_.below(write.size));
  const std::size_t end = offset + write.size;
  std::vector<std::uint8_t>& file = bytes;
  if (file.size() < offset + prefix) file.resize(offset + prefix, 0);
  std::copy(write.bytes.begin(), write.bytes.begin() + static_cast<std::ptrdiff_t>(prefix),
            file.begin() + static_cast<std::ptrdiff_t>(offset));
  // A new file may have reached its full length (a hole of zeros) without all of its data.
  if (write.creates_file && file.size() < end && prng_.chance(500)) file.resize(end, 0);
  // The rest of the range keeps its old bytes, or holds garbage.
  if (prng_.chance(400)) {
    for (std::size_t i = offset + prefix; i < std::min(end, file.size()); ++i) {
      file[i] = static_cast<std::uint8_t>(prng_.below(256));
    }
  }
  digest_.add(prefix);
  digest_.add(static_cast<std::uint64_t>(file.size()));
}

void Disk::fail(const core::JournalWrite& write) {
  ++coverage_["journal-write-failed"];
  // Some of its bytes may have reached the disk before the error: the slot it aimed at (never
  // the one holding the newest durable record) may be torn.
  if (prng_.chance(500)) {
    ++coverage_["journal-torn-on-failure"];
    tear(write);
  }
}

void Disk::crash() {
  if (!dirty) return;
  const core::JournalWrite write = *dirty;
  dirty.reset();
  const std::uint64_t dice = prng_.below(1000);
  if (dice < 400) {
    ++coverage_["journal-lost-at-crash"];  // the page cache is gone
  } else if (dice < 850) {
    ++coverage_["journal-torn-at-crash"];
    tear(write);
  } else {
    ++coverage_["journal-landed-at-crash"];  // written back before the sync returned
    apply(write);
  }
  digest_.add(dice);
}

}  // namespace turnstile::sim
