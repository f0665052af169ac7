#include "core/types.h"

#include <array>

namespace turnstile::core {
namespace {
constexpr char kHexDigits[] = "0123456789abcdef";

void write_u64_hex(std::uint64_t value, char* out) {
  for (int i = 15; i >= 0; --i) {
    out[i] = kHexDigits[value & 0xF];
    value >>= 4;
  }
}

// Digit value of each byte, or kNotHex. A table instead of range tests: tokens are random, so
// "digit or letter" is a coin flip the branch predictor loses, and this runs once per r/n request.
constexpr std::uint8_t kNotHex = 0x10;
constexpr std::array<std::uint8_t, 256> make_hex_values() {
  std::array<std::uint8_t, 256> values{};
  values.fill(kNotHex);
  for (unsigned i = 0; i < 10; ++i) values['0' + i] = static_cast<std::uint8_t>(i);
  for (unsigned i = 0; i < 6; ++i) values['a' + i] = static_cast<std::uint8_t>(10 + i);
  return values;
}
constexpr std::array<std::uint8_t, 256> kHexValues = make_hex_values();

std::optional<std::uint64_t> parse_u64_hex(std::string_view text) {
  std::uint64_t value = 0;
  std::uint8_t seen = 0;  // ORs every digit value, so one test at the end finds a non-hex byte
  for (char c : text) {
    const std::uint8_t digit = kHexValues[static_cast<unsigned char>(c)];
    seen = static_cast<std::uint8_t>(seen | digit);
    value = (value << 4) | (digit & 0xFu);
  }
  if ((seen & kNotHex) != 0) return std::nullopt;
  return value;
}
}  // namespace

void Token::write_hex(char* out) const {
  write_u64_hex(fence.value, out);
  write_u64_hex(salt, out + 16);
}

std::string Token::to_string() const {
  std::string text(kWireLength, '0');
  write_hex(text.data());
  return text;
}

std::optional<Token> Token::parse(std::string_view text) {
  if (text.size() != kWireLength) return std::nullopt;
  auto fence = parse_u64_hex(text.substr(0, 16));
  auto salt = parse_u64_hex(text.substr(16));
  if (!fence || !salt) return std::nullopt;
  return Token{Fence{*fence}, *salt};
}

}  // namespace turnstile::core
