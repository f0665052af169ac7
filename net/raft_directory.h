// What a raft directory holds, checked before libraft reads a byte of it.
//
// libraft 0.15's loader is not a safe judge of damage: it drops the entries after a bad checksum
// in an open segment (even with auto-recovery off) whether they were acknowledged or not, aborts
// with a double free on an open segment cut short, spins for ever on a snapshot cut short, and
// renames and truncates files while it loads them. So the node reads the directory first, with
// the format libraft 0.15 writes (docs/cluster.md, "A damaged raft directory"):
//
//   segment    = format u64 LE (8) = 1 | batch ...          an open segment: then zeros to its
//                                                           preallocated size
//   batch      = crc32 of header (4) | crc32 of data (4) | header | data
//   header     = entries count u64 LE (8) | per entry: term u64 LE (8) | type (1) | 0 (3) |
//                data size u32 LE (4)
//   data       = each entry's bytes (sizes multiples of 8)
//   crc32      = polynomial 0x04C11DB7, not reflected, initial value 0, no final xor
//   snapshot   = "snapshot-TERM-INDEX-MS" (the state, an LZ4 frame with a content checksum) and
//                ".meta" beside it: format u64 LE = 1 | crc32 u64 LE (of the rest) |
//                configuration index u64 LE | configuration length u64 LE | configuration
//
// and refuses anything damaged: every closed segment whole and in an unbroken chain from the
// newest snapshot, terms that never go down, every snapshot whole, open segments of their full
// size. The one damage it lets through is a bad batch at the very end of the newest open
// segment's entries above what the node acknowledged (core/acked_index.h): a write cut short by
// a crash, never reported stored, which libraft then drops.
//
// Thread affinity: any; it reads files and keeps nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/acked_index.h"

namespace turnstile::net {

// The size libraft preallocates an open segment to (raft_uv_set_segment_size, set by RaftNode).
inline constexpr std::size_t kRaftSegmentBytes = std::size_t{8} << 20;

// What the directory holds by name, read before raft touches it: raft's own loader deletes a
// metadata file it cannot read (it takes it for a torn write), and raft_bootstrap only asks
// whether the metadata holds a term.
struct DirectoryState {
  bool empty = true;      // no file at all (dot files aside): a new node's directory
  bool log = false;       // segments or snapshots
  bool metadata = false;  // metadata1 or metadata2 has the size of a metadata file
};
std::optional<DirectoryState> inspect_directory(const std::string& dir, std::string* error);

// The one message for a directory that does not load: what is wrong, and what to do. Never "fix"
// it: the entries a repair would drop may be committed.
std::string damaged_directory(const std::string& dir, const std::string& detail);

// libraft's checksum.
std::uint32_t raft_crc32(std::span<const std::uint8_t> bytes, std::uint32_t crc = 0);

// One segment's bytes, read batch by batch.
struct SegmentScan {
  enum class End {
    kWhole,     // every byte accounted for (an open segment: the rest is zeros)
    kUnused,    // an open segment never written (all zeros)
    kBadBatch,  // a batch whose checksum, count or sizes are wrong: damage or a torn write
    kCut,       // the bytes end inside a batch (the file was cut)
    kBadFormat  // not a segment of the format libraft 0.15 writes
  };
  End end = End::kWhole;
  std::uint64_t entries = 0;     // in the batches before `end`
  std::uint64_t first_term = 0;  // of the first of them (0: none)
  std::uint64_t last_term = 0;   // of the last of them
  bool terms_ordered = true;     // terms never go down inside the segment
  std::size_t end_offset = 0;    // where the whole batches end
  std::string problem;           // for anything but kWhole and kUnused
};
SegmentScan scan_segment(std::span<const std::uint8_t> bytes, bool open);

// nullopt if a snapshot's .meta file is whole, else what is wrong.
std::optional<std::string> check_snapshot_meta(std::span<const std::uint8_t> bytes);
// nullopt if a snapshot's data is whole (an LZ4 frame decodes to its end, with its checksums), or
// is not compressed at all; else what is wrong.
std::optional<std::string> check_snapshot_data(std::span<const std::uint8_t> bytes);

// The verdict on a directory that holds a log.
struct LogCheck {
  core::LogPosition last;          // the last entry raft will load
  std::vector<std::string> notes;  // worth a log line (a torn tail dropped, no record yet)
  std::optional<std::string> refusal;
};
// `acknowledged`: what core::AckedIndex recovered (nullopt: the directory has no record yet, as
// one written before turnstile kept it).
LogCheck check_log_files(const std::string& dir, std::optional<core::LogPosition> acknowledged);

}  // namespace turnstile::net
