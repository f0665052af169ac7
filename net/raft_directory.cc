#include "net/raft_directory.h"

#include <lz4frame.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <memory>
#include <tuple>

namespace turnstile::net {

namespace {

namespace fs = std::filesystem;

bool all_digits(std::string_view text) {
  return !text.empty() &&
         std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::uint64_t get64(std::span<const std::uint8_t> bytes, std::size_t at) {
  std::uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | bytes[at + static_cast<std::size_t>(i)];
  return value;
}

std::uint32_t get32(std::span<const std::uint8_t> bytes, std::size_t at) {
  std::uint32_t value = 0;
  for (int i = 3; i >= 0; --i) value = (value << 8) | bytes[at + static_cast<std::size_t>(i)];
  return value;
}

bool all_zero(std::span<const std::uint8_t> bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](std::uint8_t b) { return b == 0; });
}

std::array<std::uint32_t, 256> crc_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t crc = i << 24;
    for (int bit = 0; bit < 8; ++bit)
      crc = (crc & 0x80000000U) ? (crc << 1) ^ 0x04C11DB7U : crc << 1;
    table[i] = crc;
  }
  return table;
}

std::optional<std::vector<std::uint8_t>> read_file(const fs::path& path, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  std::vector<std::uint8_t> bytes;
  if (in) {
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (!in && !in.eof()) {
    *error = "cannot read " + path.string();
    return std::nullopt;
  }
  return bytes;
}

std::uint64_t pad8(std::uint64_t n) { return (n + 7) / 8 * 8; }

// The batch at `offset` of a segment: its entries and where it ends, or why it is not a batch.
struct Batch {
  SegmentScan::End end = SegmentScan::End::kWhole;
  std::uint64_t entries = 0;
  std::uint64_t first_term = 0;
  std::uint64_t last_term = 0;
  bool terms_ordered = true;
  std::size_t next = 0;
  std::string problem;
};

Batch read_batch(std::span<const std::uint8_t> bytes, std::size_t offset, bool open) {
  using End = SegmentScan::End;
  Batch batch;
  const std::size_t size = bytes.size();
  // Running off the end of a closed segment means it was cut; an open one is preallocated, so
  // there the bytes themselves are wrong.
  const End overrun = open ? End::kBadBatch : End::kCut;
  const auto fail = [&](End end, std::string problem) {
    batch.end = end;
    batch.problem = "the batch at byte " + std::to_string(offset) + " " + problem;
    return batch;
  };
  if (size - offset < 16) return fail(overrun, "is cut short");
  const std::uint64_t count = get64(bytes, offset + 8);
  if (count == 0) return fail(End::kBadBatch, "holds no entries");
  if (count > (size - offset - 16) / 16) return fail(overrun, "claims more entries than fit");
  const std::size_t header_end = offset + 16 + static_cast<std::size_t>(count) * 16;
  const std::span<const std::uint8_t> header = bytes.subspan(offset + 8, header_end - offset - 8);
  if (raft_crc32(header) != get32(bytes, offset)) {
    return fail(End::kBadBatch, "fails its header checksum");
  }
  std::uint64_t data_size = 0;
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::size_t at = offset + 16 + static_cast<std::size_t>(i) * 16;
    const std::uint64_t term = get64(bytes, at);
    if (term == 0) return fail(End::kBadBatch, "holds an entry of term 0");
    if (i == 0) batch.first_term = term;
    if (term < batch.last_term) batch.terms_ordered = false;
    batch.last_term = term;
    data_size += pad8(get32(bytes, at + 12));
  }
  if (data_size > size - header_end) return fail(overrun, "claims more data than fits");
  const std::span<const std::uint8_t> data =
      bytes.subspan(header_end, static_cast<std::size_t>(data_size));
  if (raft_crc32(data) != get32(bytes, offset + 4)) {
    return fail(End::kBadBatch, "fails its data checksum");
  }
  batch.entries = count;
  batch.next = header_end + static_cast<std::size_t>(data_size);
  return batch;
}

}  // namespace

std::optional<DirectoryState> inspect_directory(const std::string& dir, std::string* error) {
  constexpr std::uintmax_t kMetadataSize = 32;  // format, version, term, vote: 4 x 8 bytes
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    *error = "raft directory " + dir + " does not exist (a new node needs an empty one)";
    return std::nullopt;
  }
  DirectoryState state;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name.front() == '.') continue;
    state.empty = false;
    const std::size_t dash = name.find('-');
    if (name.rfind("open-", 0) == 0 || name.rfind("snapshot-", 0) == 0 ||
        (dash != std::string::npos && all_digits(name.substr(0, dash)) &&
         all_digits(name.substr(dash + 1)))) {
      state.log = true;
    }
    if ((name == "metadata1" || name == "metadata2") && it->file_size(ec) == kMetadataSize && !ec) {
      state.metadata = true;
    }
  }
  if (ec) {
    *error = "raft directory " + dir + " cannot be read: " + ec.message();
    return std::nullopt;
  }
  return state;
}

std::string damaged_directory(const std::string& dir, const std::string& detail) {
  return "raft directory " + dir + " is damaged or unreadable (" + detail +
         "): check its permissions and the disk; if it is damaged, remove this node from the "
         "cluster and re-add it as a new member with an empty directory (it then catches up from "
         "the others), or restore the directory from a backup";
}

std::uint32_t raft_crc32(std::span<const std::uint8_t> bytes, std::uint32_t crc) {
  static const std::array<std::uint32_t, 256> table = crc_table();
  for (const std::uint8_t byte : bytes) crc = (crc << 8) ^ table[((crc >> 24) ^ byte) & 0xFFU];
  return crc;
}

SegmentScan scan_segment(std::span<const std::uint8_t> bytes, bool open) {
  SegmentScan scan;
  if (bytes.size() < 8) {
    scan.end = SegmentScan::End::kCut;
    scan.problem = "it is shorter than its format field";
    return scan;
  }
  const std::uint64_t format = get64(bytes, 0);
  if (open && format == 0 && all_zero(bytes)) {
    scan.end = SegmentScan::End::kUnused;
    return scan;
  }
  if (format != 1) {
    scan.end = SegmentScan::End::kBadFormat;
    scan.problem = "its format is " + std::to_string(format) + ", not 1";
    return scan;
  }
  std::size_t offset = 8;
  while (offset < bytes.size()) {
    // An open segment's entries end where its zeros begin.
    if (open && bytes.size() - offset >= 16 && all_zero(bytes.subspan(offset, 16))) {
      if (all_zero(bytes.subspan(offset))) break;
      scan.end = SegmentScan::End::kBadBatch;
      scan.problem = "bytes after the end of its entries at byte " + std::to_string(offset);
      return scan;
    }
    const Batch batch = read_batch(bytes, offset, open);
    if (!batch.problem.empty()) {
      scan.end = batch.end;
      scan.problem = batch.problem;
      return scan;
    }
    if (scan.entries == 0) scan.first_term = batch.first_term;
    if (!batch.terms_ordered || batch.first_term < scan.last_term) scan.terms_ordered = false;
    scan.last_term = batch.last_term;
    scan.entries += batch.entries;
    offset = batch.next;
    scan.end_offset = offset;
  }
  if (scan.end_offset == 0) scan.end_offset = 8;
  return scan;
}

std::optional<std::string> check_snapshot_meta(std::span<const std::uint8_t> bytes) {
  if (bytes.size() < 32) return "it is shorter than its header";
  if (get64(bytes, 0) != 1) return "its format is not 1";
  const std::uint64_t length = get64(bytes, 24);
  if (length == 0 || length > bytes.size() - 32) return "its configuration length is wrong";
  const std::uint32_t crc = raft_crc32(bytes.subspan(16, 16 + static_cast<std::size_t>(length)));
  if (crc != get64(bytes, 8)) return "it fails its checksum";
  return std::nullopt;
}

std::optional<std::string> check_snapshot_data(std::span<const std::uint8_t> bytes) {
  constexpr std::array<std::uint8_t, 4> kLz4Magic{0x04, 0x22, 0x4D, 0x18};
  if (bytes.empty()) return "it is empty";
  if (bytes.size() < 4 || !std::equal(kLz4Magic.begin(), kLz4Magic.end(), bytes.begin())) {
    return std::nullopt;  // stored uncompressed: the state machine's restore checks it
  }
  LZ4F_dctx* raw = nullptr;
  if (LZ4F_isError(LZ4F_createDecompressionContext(&raw, LZ4F_VERSION))) {
    return "it cannot be checked (no LZ4 context)";
  }
  const std::unique_ptr<LZ4F_dctx, decltype(&LZ4F_freeDecompressionContext)> dctx(
      raw, &LZ4F_freeDecompressionContext);
  std::vector<std::uint8_t> out(std::size_t{1} << 20);
  std::size_t at = 0;
  for (;;) {
    std::size_t in_size = bytes.size() - at;
    std::size_t out_size = out.size();
    const std::size_t hint =
        LZ4F_decompress(dctx.get(), out.data(), &out_size, bytes.data() + at, &in_size, nullptr);
    if (LZ4F_isError(hint)) {
      return std::string("its LZ4 frame is damaged (") + LZ4F_getErrorName(hint) + ")";
    }
    at += in_size;
    if (hint == 0) break;  // the frame ended, its checksums held
    // No input left, or none taken and nothing produced: the frame was cut short.
    if (at == bytes.size() && out_size < out.size()) return "its LZ4 frame is cut short";
    if (in_size == 0 && out_size == 0) return "its LZ4 frame is cut short";
  }
  if (at != bytes.size()) return "bytes follow the end of its LZ4 frame";
  return std::nullopt;
}

namespace {

struct Segment {
  std::uint64_t first = 0;  // closed: first index; open: the counter
  std::uint64_t last = 0;   // closed only
  fs::path path;
};

struct Snapshot {
  std::uint64_t term = 0;
  std::uint64_t index = 0;
  std::uint64_t ms = 0;
  fs::path path;  // the data file; ".meta" beside it
};

struct Listing {
  std::vector<Segment> closed;
  std::vector<Segment> open;
  std::vector<Snapshot> snapshots;
};

std::optional<std::uint64_t> number(std::string_view text) {
  if (!all_digits(text) || text.size() > 19) return std::nullopt;
  return std::stoull(std::string(text));
}

void list_entry(const fs::path& path, Listing* listing) {
  const std::string name = path.filename().string();
  const std::size_t dash = name.find('-');
  if (name.rfind("open-", 0) == 0) {
    if (const auto counter = number(name.substr(5))) listing->open.push_back({*counter, 0, path});
  } else if (name.rfind("snapshot-", 0) == 0 && name.size() > 5 &&
             name.substr(name.size() - 5) == ".meta") {
    const std::string rest = name.substr(9, name.size() - 14);
    const std::size_t a = rest.find('-');
    const std::size_t b = a == std::string::npos ? a : rest.find('-', a + 1);
    if (b == std::string::npos) return;
    const auto term = number(rest.substr(0, a));
    const auto index = number(rest.substr(a + 1, b - a - 1));
    const auto ms = number(rest.substr(b + 1));
    if (term && index && ms) {
      listing->snapshots.push_back(
          {*term, *index, *ms, path.parent_path() / name.substr(0, name.size() - 5)});
    }
  } else if (dash != std::string::npos) {
    const auto first = number(name.substr(0, dash));
    const auto last = number(name.substr(dash + 1));
    if (first && last) listing->closed.push_back({*first, *last, path});
  }
}

std::optional<std::string> check_snapshot(const Snapshot& snapshot) {
  std::string error;
  const auto meta = read_file(fs::path(snapshot.path.string() + ".meta"), &error);
  if (!meta) return error;
  if (auto problem = check_snapshot_meta(*meta)) {
    return snapshot.path.filename().string() + ".meta: " + *problem;
  }
  std::error_code ec;
  if (!fs::exists(snapshot.path, ec)) return snapshot.path.filename().string() + " is missing";
  const auto data = read_file(snapshot.path, &error);
  if (!data) return error;
  if (auto problem = check_snapshot_data(*data)) {
    return snapshot.path.filename().string() + ": " + *problem;
  }
  return std::nullopt;
}

// Walks the log in index order, from the newest snapshot through the closed segments and the
// open ones, and says where it ends.
class LogWalk {
 public:
  LogWalk(LogCheck* check, std::optional<core::LogPosition> acknowledged)
      : check_(check), acknowledged_(acknowledged) {}

  bool snapshots(std::vector<Snapshot>* all);
  bool closed(std::vector<Segment>* all);
  bool open(std::vector<Segment>* all);
  core::LogPosition last() const {
    if (next_ - 1 > snapshot_.index) return {next_ - 1, last_term_};
    return snapshot_;
  }

 private:
  bool refuse(std::string why) {
    check_->refusal = std::move(why);
    return false;
  }
  bool take(const SegmentScan& scan, const std::string& name) {
    if (!scan.terms_ordered || (scan.entries > 0 && scan.first_term < last_term_)) {
      return refuse(name + ": the terms of its entries go down");
    }
    if (scan.entries > 0) last_term_ = scan.last_term;
    next_ += scan.entries;
    return true;
  }

  LogCheck* check_;
  std::optional<core::LogPosition> acknowledged_;
  core::LogPosition snapshot_;  // the newest snapshot's last entry; {0, 0}: none
  std::uint64_t next_ = 1;      // the index of the next entry of the walk
  std::uint64_t last_term_ = 0;
};

bool LogWalk::snapshots(std::vector<Snapshot>* all) {
  std::sort(all->begin(), all->end(), [](const Snapshot& a, const Snapshot& b) {
    return std::tie(a.term, a.index, a.ms) < std::tie(b.term, b.index, b.ms);
  });
  for (const Snapshot& snapshot : *all) {
    if (auto problem = check_snapshot(snapshot)) return refuse(*problem);
  }
  if (!all->empty()) snapshot_ = {all->back().index, all->back().term};
  return true;
}

bool LogWalk::closed(std::vector<Segment>* all) {
  std::sort(all->begin(), all->end(),
            [](const Segment& a, const Segment& b) { return a.first < b.first; });
  std::string error;
  for (const Segment& segment : *all) {
    const std::string name = segment.path.filename().string();
    if (segment.last < segment.first) return refuse(name + ": its name is not a range");
    if (&segment == &all->front()) {
      // The chain starts at the first entry, or at or below the one after the snapshot.
      if (segment.first > snapshot_.index + 1 || (snapshot_.index == 0 && segment.first != 1)) {
        return refuse("entries " + std::to_string(snapshot_.index + 1) + " to " +
                      std::to_string(segment.first - 1) + " are missing");
      }
      next_ = segment.first;
    } else if (segment.first != next_) {
      return refuse("entries " + std::to_string(next_) + " to " +
                    std::to_string(segment.first - 1) + " are missing (" + name + ")");
    }
    const auto bytes = read_file(segment.path, &error);
    if (!bytes) return refuse(error);
    const SegmentScan scan = scan_segment(*bytes, false);
    if (scan.end != SegmentScan::End::kWhole) return refuse(name + ": " + scan.problem);
    if (scan.entries != segment.last - segment.first + 1) {
      return refuse(name + " holds " + std::to_string(scan.entries) + " entries, not " +
                    std::to_string(segment.last - segment.first + 1));
    }
    if (!take(scan, name)) return false;
  }
  if (all->empty()) next_ = snapshot_.index + 1;
  return true;
}

bool LogWalk::open(std::vector<Segment>* all) {
  std::sort(all->begin(), all->end(),
            [](const Segment& a, const Segment& b) { return a.first < b.first; });
  std::string error;
  std::optional<std::string> torn;  // the torn write seen, in an earlier open segment
  for (const Segment& segment : *all) {
    const std::string name = segment.path.filename().string();
    const auto bytes = read_file(segment.path, &error);
    if (!bytes) return refuse(error);
    if (bytes->size() < kRaftSegmentBytes) {
      return refuse(name + " holds " + std::to_string(bytes->size()) + " bytes, less than the " +
                    std::to_string(kRaftSegmentBytes) + " raft gives an open segment: it was cut");
    }
    const SegmentScan scan = scan_segment(*bytes, true);
    if (scan.end == SegmentScan::End::kUnused) continue;
    if (torn) return refuse(*torn + ", yet " + name + " after it holds entries");
    if (scan.end == SegmentScan::End::kCut || scan.end == SegmentScan::End::kBadFormat) {
      return refuse(name + ": " + scan.problem);
    }
    if (!take(scan, name)) return false;
    if (scan.end == SegmentScan::End::kBadBatch) {
      torn = name + ": " + scan.problem;
      const std::uint64_t kept = next_ - 1;
      if (!acknowledged_) {
        check_->notes.push_back(*torn +
                                "; with no record of what this node acknowledged, it is "
                                "taken for a write cut short by a crash, and raft drops it");
      } else if (kept >= acknowledged_->index) {
        check_->notes.push_back(*torn + ", above the entries this node acknowledged (up to " +
                                std::to_string(acknowledged_->index) +
                                "): a write cut short by a crash; raft drops it");
      } else {
        return refuse(*torn + ", among entries this node acknowledged as stored (it keeps " +
                      std::to_string(kept) + " of " + std::to_string(acknowledged_->index) + ")");
      }
    }
  }
  return true;
}

}  // namespace

LogCheck check_log_files(const std::string& dir, std::optional<core::LogPosition> acknowledged) {
  LogCheck check;
  Listing listing;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    list_entry(it->path(), &listing);
  }
  if (ec) {
    check.refusal = "it cannot be read: " + ec.message();
    return check;
  }
  LogWalk walk(&check, acknowledged);
  if (!walk.snapshots(&listing.snapshots) || !walk.closed(&listing.closed) ||
      !walk.open(&listing.open)) {
    return check;
  }
  check.last = walk.last();
  if (!acknowledged) {
    if (check.last.index > 1) {  // more than the bootstrap configuration
      check.notes.push_back(
          "no record of what this node acknowledged (a directory from before "
          "turnstile kept one): the record starts with the next entry stored");
    }
  } else if (auto forgotten = core::forgotten_entries(check.last, *acknowledged)) {
    check.refusal = *forgotten;
  }
  return check;
}

}  // namespace turnstile::net
