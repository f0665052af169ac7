// The raft directory check (net/raft_directory.h) on files written here in libraft 0.15's format:
// every kind of damage is told from a whole directory and from a write torn by a crash. (The
// raft node's tests check it against files libraft itself wrote.)
#include "net/raft_directory.h"

#include <gtest/gtest.h>
#include <lz4frame.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace turnstile::net {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

void put64(Bytes* out, std::uint64_t value) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<std::uint8_t>(value >> (8 * i)));
}
void put32(Bytes* out, std::uint32_t value) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<std::uint8_t>(value >> (8 * i)));
}

// One batch of entries, each {term, data size}.
Bytes batch(const std::vector<std::pair<std::uint64_t, std::uint32_t>>& entries) {
  Bytes header;
  put64(&header, entries.size());
  Bytes data;
  for (const auto& [term, size] : entries) {
    put64(&header, term);
    header.push_back(1);  // a command
    header.insert(header.end(), 3, 0);
    put32(&header, size);
    for (std::uint32_t i = 0; i < (size + 7) / 8 * 8; ++i) {
      data.push_back(static_cast<std::uint8_t>(i < size ? 'a' + i % 26 : 0));
    }
  }
  Bytes out;
  put32(&out, raft_crc32(header));
  put32(&out, raft_crc32(data));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

Bytes segment(const std::vector<Bytes>& batches, bool open) {
  Bytes out;
  put64(&out, 1);
  for (const Bytes& b : batches) out.insert(out.end(), b.begin(), b.end());
  if (open) out.resize(kRaftSegmentBytes, 0);
  return out;
}

// `n` entries of term `term` in batches of two.
std::vector<Bytes> batches_of(std::uint64_t n, std::uint64_t term) {
  std::vector<Bytes> out;
  for (std::uint64_t i = 0; i < n; i += 2) {
    if (i + 1 < n) {
      out.push_back(batch({{term, 13}, {term, 16}}));
    } else {
      out.push_back(batch({{term, 5}}));
    }
  }
  return out;
}

Bytes meta_file(const Bytes& configuration) {
  Bytes rest;
  put64(&rest, 1);  // the configuration's index
  put64(&rest, configuration.size());
  rest.insert(rest.end(), configuration.begin(), configuration.end());
  Bytes out;
  put64(&out, 1);
  put64(&out, raft_crc32(rest));
  out.insert(out.end(), rest.begin(), rest.end());
  return out;
}

Bytes lz4_frame(const Bytes& content) {
  LZ4F_preferences_t preferences{};
  preferences.frameInfo.contentChecksumFlag = LZ4F_contentChecksumEnabled;
  preferences.frameInfo.contentSize = content.size();
  Bytes out(LZ4F_compressFrameBound(content.size(), &preferences));
  const std::size_t n =
      LZ4F_compressFrame(out.data(), out.size(), content.data(), content.size(), &preferences);
  EXPECT_FALSE(LZ4F_isError(n));
  out.resize(n);
  return out;
}

Bytes state_bytes(std::size_t n) {
  Bytes content(n);
  for (std::size_t i = 0; i < n; ++i) content[i] = static_cast<std::uint8_t>((i * 7919) >> 5);
  return content;
}

class Directory : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("turnstile-raft-dir-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write(const std::string& name, const Bytes& bytes) {
    std::ofstream out(dir_ / name, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
  }
  void snapshot(const std::string& name, const Bytes& data) {
    write(name, data);
    write(name + ".meta", meta_file(Bytes(56, 7)));
  }
  LogCheck check(std::optional<core::LogPosition> acknowledged) {
    return check_log_files(dir_.string(), acknowledged);
  }

  fs::path dir_;
};

TEST(RaftCrc32, IsTheUnreflectedCrcWithNoInitialValueNorFinalXor) {
  const std::string text = "123456789";
  const Bytes bytes(text.begin(), text.end());
  // CRC-32/POSIX's polynomial, not reflected, with neither an initial value nor a final xor.
  EXPECT_EQ(raft_crc32(bytes), 0x89A1897FU);
  EXPECT_EQ(raft_crc32(Bytes{}), 0U);
  // Chained over two halves as over the whole.
  const Bytes a(bytes.begin(), bytes.begin() + 4), b(bytes.begin() + 4, bytes.end());
  EXPECT_EQ(raft_crc32(b, raft_crc32(a)), raft_crc32(bytes));
}

TEST(ScanSegment, AWholeClosedSegmentCountsItsEntriesAndTerms) {
  const Bytes bytes = segment({batch({{2, 8}, {2, 13}}), batch({{3, 1}})}, false);
  const SegmentScan scan = scan_segment(bytes, false);
  EXPECT_EQ(scan.end, SegmentScan::End::kWhole) << scan.problem;
  EXPECT_EQ(scan.entries, 3U);
  EXPECT_EQ(scan.first_term, 2U);
  EXPECT_EQ(scan.last_term, 3U);
  EXPECT_TRUE(scan.terms_ordered);
  EXPECT_EQ(scan.end_offset, bytes.size());
}

TEST(ScanSegment, AnOpenSegmentEndsAtItsZerosAndAnUnusedOneIsAllZeros) {
  const Bytes used = segment(batches_of(5, 1), true);
  const SegmentScan scan = scan_segment(used, true);
  EXPECT_EQ(scan.end, SegmentScan::End::kWhole) << scan.problem;
  EXPECT_EQ(scan.entries, 5U);
  EXPECT_EQ(scan_segment(Bytes(kRaftSegmentBytes, 0), true).end, SegmentScan::End::kUnused);
  // A stray byte after the end of the entries is a damaged tail, not the end.
  Bytes stray = used;
  stray[kRaftSegmentBytes - 100] = 1;
  const SegmentScan damaged = scan_segment(stray, true);
  EXPECT_EQ(damaged.end, SegmentScan::End::kBadBatch);
  EXPECT_EQ(damaged.entries, 5U);
}

TEST(ScanSegment, AFlippedByteAnywhereInABatchStopsTheScanBeforeIt) {
  const std::vector<Bytes> batches = batches_of(6, 4);
  const Bytes whole = segment(batches, true);
  const std::size_t second = 8 + batches[0].size();
  const std::size_t third = second + batches[1].size();
  for (std::size_t at = second; at < third; ++at) {
    Bytes flipped = whole;
    flipped[at] ^= 0x10;
    const SegmentScan scan = scan_segment(flipped, true);
    EXPECT_EQ(scan.end, SegmentScan::End::kBadBatch) << "byte " << at;
    EXPECT_EQ(scan.entries, 2U) << "byte " << at;
    EXPECT_EQ(scan.end_offset, second) << "byte " << at;
    EXPECT_FALSE(scan.problem.empty());
  }
}

TEST(ScanSegment, AClosedSegmentCutInsideABatchIsCutAndAWrongFormatIsRefused) {
  const std::vector<Bytes> batches = batches_of(4, 1);
  const Bytes whole = segment(batches, false);
  const std::size_t second = 8 + batches[0].size();
  for (std::size_t size = second + 1; size < whole.size(); ++size) {
    const Bytes cut(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(size));
    const SegmentScan scan = scan_segment(cut, false);
    EXPECT_EQ(scan.end, SegmentScan::End::kCut) << "size " << size;
    EXPECT_EQ(scan.entries, 2U);
  }
  EXPECT_EQ(scan_segment(Bytes(whole.begin(), whole.begin() + 5), false).end,
            SegmentScan::End::kCut);
  Bytes format = whole;
  format[0] = 2;
  EXPECT_EQ(scan_segment(format, false).end, SegmentScan::End::kBadFormat);
}

TEST(ScanSegment, TermsThatGoDownAreSeen) {
  const SegmentScan scan = scan_segment(segment({batch({{5, 8}}), batch({{4, 8}})}, false), false);
  EXPECT_EQ(scan.end, SegmentScan::End::kWhole);
  EXPECT_FALSE(scan.terms_ordered);
}

TEST(SnapshotFiles, AWholeMetaFilePassesAndAnyFlippedOrMissingByteFails) {
  const Bytes meta = meta_file(Bytes(56, 3));
  EXPECT_FALSE(check_snapshot_meta(meta).has_value());
  for (std::size_t at = 0; at < meta.size(); ++at) {
    Bytes flipped = meta;
    flipped[at] ^= 0x04;
    EXPECT_TRUE(check_snapshot_meta(flipped).has_value()) << "byte " << at;
  }
  EXPECT_TRUE(check_snapshot_meta(Bytes(meta.begin(), meta.end() - 1)).has_value());
  EXPECT_TRUE(check_snapshot_meta(Bytes(meta.begin(), meta.begin() + 20)).has_value());
}

TEST(SnapshotFiles, AnLz4FrameMustDecodeToItsEndWithItsChecksum) {
  const Bytes frame = lz4_frame(state_bytes(3 << 20));
  EXPECT_FALSE(check_snapshot_data(frame).has_value());
  for (std::size_t size : {frame.size() / 2, frame.size() - 1, std::size_t{7}, std::size_t{20}}) {
    const Bytes cut(frame.begin(), frame.begin() + static_cast<std::ptrdiff_t>(size));
    const std::optional<std::string> problem = check_snapshot_data(cut);
    EXPECT_TRUE(problem.has_value()) << "cut to " << size;
  }
  Bytes flipped = frame;
  flipped[frame.size() / 3] ^= 0x01;
  EXPECT_TRUE(check_snapshot_data(flipped).has_value());
  Bytes trailing = frame;
  trailing.push_back(0);
  EXPECT_TRUE(check_snapshot_data(trailing).has_value());
  // Not compressed at all: the state machine's restore judges it.
  EXPECT_FALSE(check_snapshot_data(state_bytes(100)).has_value());
  EXPECT_TRUE(check_snapshot_data(Bytes{}).has_value());
}

TEST_F(Directory, AWholeLogEndsAtItsLastEntry) {
  write("0000000000000001-0000000000000004", segment(batches_of(4, 1), false));
  write("0000000000000005-0000000000000006", segment(batches_of(2, 2), false));
  write("open-3", segment(batches_of(3, 2), true));
  write("open-4", Bytes(kRaftSegmentBytes, 0));
  const LogCheck result = check(core::LogPosition{9, 2});
  EXPECT_FALSE(result.refusal.has_value()) << *result.refusal;
  EXPECT_EQ(result.last, (core::LogPosition{9, 2}));
  EXPECT_TRUE(result.notes.empty());
}

TEST_F(Directory, ALogThatEndsBelowTheRecordIsRefused) {
  write("0000000000000001-0000000000000004", segment(batches_of(4, 1), false));
  write("open-2", segment(batches_of(2, 1), true));
  const LogCheck result = check(core::LogPosition{7, 1});
  ASSERT_TRUE(result.refusal.has_value());
  EXPECT_NE(result.refusal->find("acknowledged"), std::string::npos) << *result.refusal;
  // The open segment zeroed, or deleted: the same.
  write("open-2", Bytes(kRaftSegmentBytes, 0));
  EXPECT_TRUE(check(core::LogPosition{5, 1}).refusal.has_value());
  fs::remove(dir_ / "open-2");
  EXPECT_TRUE(check(core::LogPosition{5, 1}).refusal.has_value());
  EXPECT_FALSE(check(core::LogPosition{4, 1}).refusal.has_value());
}

TEST_F(Directory, AFlippedByteInAcknowledgedEntriesIsRefusedAndATornTailAboveThemIsNot) {
  const std::vector<Bytes> batches = batches_of(6, 3);
  Bytes open = segment(batches, true);
  const std::size_t third_batch = 8 + batches[0].size() + batches[1].size();
  open[third_batch + 20] ^= 0xFF;
  write("open-1", open);
  write("metadata1", Bytes(32, 0));
  // Entries 1..4 are whole; 5 and 6 are in the damaged batch.
  const LogCheck acked = check(core::LogPosition{6, 3});
  ASSERT_TRUE(acked.refusal.has_value());
  EXPECT_NE(acked.refusal->find("open-1"), std::string::npos) << *acked.refusal;
  const LogCheck torn = check(core::LogPosition{4, 3});
  EXPECT_FALSE(torn.refusal.has_value()) << *torn.refusal;
  EXPECT_EQ(torn.last, (core::LogPosition{4, 3}));
  ASSERT_EQ(torn.notes.size(), 1U);
  EXPECT_NE(torn.notes[0].find("cut short by a crash"), std::string::npos) << torn.notes[0];
  // No record at all (a directory from before it was kept): the tail is taken for a torn write.
  const LogCheck legacy = check(std::nullopt);
  EXPECT_FALSE(legacy.refusal.has_value());
  EXPECT_EQ(legacy.notes.size(), 2U);
  // But not when an open segment after it holds entries: that is not the end of the log.
  write("open-2", segment(batches_of(2, 3), true));
  EXPECT_TRUE(check(core::LogPosition{4, 3}).refusal.has_value());
}

TEST_F(Directory, AnOpenSegmentCutShortIsRefusedWhereverTheCut) {
  const Bytes open = segment(batches_of(4, 1), true);
  for (std::size_t size : {std::size_t{0}, std::size_t{12}, std::size_t{60}, std::size_t{200},
                           kRaftSegmentBytes - 1}) {
    write("open-1", Bytes(open.begin(), open.begin() + static_cast<std::ptrdiff_t>(size)));
    const LogCheck result = check(core::LogPosition{0, 0});
    ASSERT_TRUE(result.refusal.has_value()) << "size " << size;
    EXPECT_NE(result.refusal->find("it was cut"), std::string::npos) << *result.refusal;
  }
}

TEST_F(Directory, AMissingOrCutClosedSegmentIsRefused) {
  write("0000000000000001-0000000000000004", segment(batches_of(4, 1), false));
  write("0000000000000007-0000000000000008", segment(batches_of(2, 1), false));
  LogCheck gap = check(std::nullopt);
  ASSERT_TRUE(gap.refusal.has_value());
  EXPECT_NE(gap.refusal->find("entries 5 to 6 are missing"), std::string::npos) << *gap.refusal;

  fs::remove(dir_ / "0000000000000007-0000000000000008");
  const std::vector<Bytes> batches = batches_of(4, 1);
  // Cut at a batch boundary: every batch left is whole, but entries are missing.
  Bytes cut = segment(batches, false);
  cut.resize(8 + batches[0].size());
  write("0000000000000001-0000000000000004", cut);
  LogCheck short_segment = check(std::nullopt);
  ASSERT_TRUE(short_segment.refusal.has_value());
  EXPECT_NE(short_segment.refusal->find("holds 2 entries, not 4"), std::string::npos);
  // The first entries gone, with no snapshot to start from.
  fs::remove(dir_ / "0000000000000001-0000000000000004");
  write("0000000000000005-0000000000000006", segment(batches_of(2, 1), false));
  EXPECT_TRUE(check(std::nullopt).refusal.has_value());
}

TEST_F(Directory, TermsThatGoDownAcrossSegmentsAreRefused) {
  write("0000000000000001-0000000000000002", segment(batches_of(2, 5), false));
  write("open-2", segment(batches_of(2, 4), true));
  const LogCheck result = check(std::nullopt);
  ASSERT_TRUE(result.refusal.has_value());
  EXPECT_NE(result.refusal->find("terms"), std::string::npos);
}

TEST_F(Directory, ASnapshotStartsTheLogAndMustBeWhole) {
  const Bytes frame = lz4_frame(state_bytes(1 << 20));
  snapshot("snapshot-2-100-1700000000000", frame);
  write("open-7", segment(batches_of(3, 2), true));
  LogCheck whole = check(core::LogPosition{103, 2});
  EXPECT_FALSE(whole.refusal.has_value()) << *whole.refusal;
  EXPECT_EQ(whole.last, (core::LogPosition{103, 2}));
  // Nothing after the snapshot: the log ends at it.
  write("open-7", Bytes(kRaftSegmentBytes, 0));
  whole = check(core::LogPosition{100, 2});
  EXPECT_FALSE(whole.refusal.has_value()) << *whole.refusal;
  EXPECT_EQ(whole.last, (core::LogPosition{100, 2}));

  write("snapshot-2-100-1700000000000", Bytes(frame.begin(), frame.begin() + frame.size() / 2));
  LogCheck cut = check(core::LogPosition{100, 2});
  ASSERT_TRUE(cut.refusal.has_value());
  EXPECT_NE(cut.refusal->find("snapshot-2-100-1700000000000"), std::string::npos);
  fs::remove(dir_ / "snapshot-2-100-1700000000000");
  EXPECT_TRUE(check(core::LogPosition{100, 2}).refusal.has_value());
  write("snapshot-2-100-1700000000000", frame);
  Bytes meta = meta_file(Bytes(56, 7));
  meta[40] ^= 1;
  write("snapshot-2-100-1700000000000.meta", meta);
  EXPECT_TRUE(check(core::LogPosition{100, 2}).refusal.has_value());
}

TEST_F(Directory, InspectSaysWhatTheDirectoryHolds) {
  std::string error;
  std::optional<DirectoryState> state = inspect_directory(dir_.string(), &error);
  ASSERT_TRUE(state.has_value()) << error;
  EXPECT_TRUE(state->empty);
  write("open-1", Bytes(kRaftSegmentBytes, 0));
  write("metadata1", Bytes(32, 0));
  state = inspect_directory(dir_.string(), &error);
  ASSERT_TRUE(state.has_value());
  EXPECT_FALSE(state->empty);
  EXPECT_TRUE(state->log);
  EXPECT_TRUE(state->metadata);
  EXPECT_FALSE(inspect_directory((dir_ / "nothing").string(), &error).has_value());
  EXPECT_NE(damaged_directory("/d", "x").find("re-add it as a new member"), std::string::npos);
}

}  // namespace
}  // namespace turnstile::net
