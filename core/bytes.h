// Little-endian integers and length-prefixed strings: the byte layout of the replicated log's
// entries (core/log_entry.h) and of engine snapshots (Engine::save). ByteReader takes any bytes
// (a corrupt file, a hostile peer): every read says whether it succeeded, and no length is trusted
// before it is checked against what is left.
//
// Thread affinity: plain values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace turnstile::core {

class ByteWriter {
 public:
  void u8(std::uint8_t value) { out_.push_back(static_cast<char>(value)); }
  void u64(std::uint64_t value) {
    for (int i = 0; i < 8; ++i) u8(static_cast<std::uint8_t>(value >> (8 * i)));
  }
  void i64(std::int64_t value) { u64(static_cast<std::uint64_t>(value)); }
  void bytes(std::string_view value) {
    u64(value.size());
    out_.append(value);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class ByteReader {
 public:
  explicit ByteReader(std::string_view in) : in_(in) {}
  bool u8(std::uint8_t& value) {
    if (in_.empty()) return false;
    value = static_cast<std::uint8_t>(in_.front());
    in_.remove_prefix(1);
    return true;
  }
  bool u64(std::uint64_t& value) {
    if (in_.size() < 8) return false;
    value = 0;
    for (std::size_t i = 0; i < 8; ++i) {
      value |= static_cast<std::uint64_t>(static_cast<std::uint8_t>(in_[i])) << (8 * i);
    }
    in_.remove_prefix(8);
    return true;
  }
  bool i64(std::int64_t& value) {
    std::uint64_t raw = 0;
    if (!u64(raw)) return false;
    value = static_cast<std::int64_t>(raw);
    return true;
  }
  bool bytes(std::string& value) {
    std::uint64_t size = 0;
    if (!u64(size) || size > in_.size()) return false;
    value.assign(in_.substr(0, static_cast<std::size_t>(size)));
    in_.remove_prefix(static_cast<std::size_t>(size));
    return true;
  }
  // A count of items that take at least `min_bytes` each: refused when what is left cannot hold
  // that many, so that no hostile count makes the caller reserve memory for nothing.
  bool count(std::uint64_t& value, std::size_t min_bytes) {
    return u64(value) && value <= in_.size() / min_bytes;
  }
  std::size_t left() const { return in_.size(); }

 private:
  std::string_view in_;
};

}  // namespace turnstile::core
