// Unit tests for Token in core/types.h: the 32-character lowercase hex wire form
// (16 hex of the big-endian fence, then 16 hex of the salt) and its strict parser.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/types.h"

namespace turnstile::core {
namespace {

constexpr std::uint64_t kU64Max = std::numeric_limits<std::uint64_t>::max();

TEST(TokenTest, WireFormIsFenceThenSaltIn32LowercaseHex) {
  Token token{Fence{0x0123456789abcdefULL}, 0xfedcba9876543210ULL};
  EXPECT_EQ(token.to_string(), "0123456789abcdeffedcba9876543210");
  EXPECT_EQ(Token::kWireLength, 32u);
}

TEST(TokenTest, FenceIsBigEndianAndZeroPadded) {
  EXPECT_EQ((Token{Fence{1}, 0}).to_string(), "00000000000000010000000000000000");
  EXPECT_EQ((Token{Fence{0x100}, 0xa}).to_string(), "0000000000000100000000000000000a");
  EXPECT_EQ((Token{Fence{kU64Max}, kU64Max}).to_string(), std::string(32, 'f'));
  EXPECT_EQ((Token{Fence{0}, 0}).to_string(), std::string(32, '0'));
}

TEST(TokenTest, StringOrderEqualsFenceOrder) {
  const std::uint64_t large = 1'700'000'000'000'000'000ULL;
  std::vector<std::uint64_t> fences = {
      0, 1, 9, 10, 15, 16, 255, 256, 0xffffffffULL, 0x100000000ULL, large, kU64Max - 1, kU64Max};
  for (std::size_t i = 1; i < fences.size(); ++i) {
    Token lower{Fence{fences[i - 1]}, kU64Max};  // a high salt cannot reverse the order
    Token higher{Fence{fences[i]}, 0};
    EXPECT_LT(lower.to_string(), higher.to_string()) << fences[i - 1] << " vs " << fences[i];
  }
}

TEST(TokenTest, WriteHexWritesExactly32Characters) {
  std::string buffer(40, '#');
  Token{Fence{0xabc}, 0xdef}.write_hex(buffer.data() + 4);
  EXPECT_EQ(buffer, "####0000000000000abc0000000000000def####");
}

TEST(TokenTest, ParseRoundTrips) {
  for (Token token : {Token{Fence{0}, 0}, Token{Fence{1}, 2}, Token{Fence{kU64Max}, kU64Max},
                      Token{Fence{0x0123456789abcdefULL}, 0x1122334455667788ULL}}) {
    EXPECT_EQ(Token::parse(token.to_string()), token) << token.to_string();
  }
  std::optional<Token> parsed = Token::parse("0000000000000abc0000000000000def");
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->fence, Fence{0xabc});
  EXPECT_EQ(parsed->salt, 0xdefu);
}

TEST(TokenTest, ParseRejectsAnythingButExactly32LowercaseHex) {
  const std::string good = "0123456789abcdeffedcba9876543210";
  ASSERT_TRUE(Token::parse(good).has_value());
  EXPECT_FALSE(Token::parse("").has_value());
  EXPECT_FALSE(Token::parse(good.substr(0, 31)).has_value());
  EXPECT_FALSE(Token::parse(good + "0").has_value());
  EXPECT_FALSE(Token::parse(good.substr(0, 16)).has_value());
  std::string upper = good;
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](char c) { return c >= 'a' && c <= 'f' ? static_cast<char>(c - 32) : c; });
  EXPECT_FALSE(Token::parse(upper).has_value());
  for (char bad : {'A', 'F', 'g', 'x', ' ', '\t', '\n', '-', '+', '\0', '/', ':', '`', 'G'}) {
    for (std::size_t position :
         {std::size_t{0}, std::size_t{15}, std::size_t{16}, std::size_t{31}}) {
      std::string text = good;
      text[position] = bad;
      EXPECT_FALSE(Token::parse(text).has_value())
          << "char " << static_cast<int>(bad) << " at " << position;
    }
  }
  EXPECT_FALSE(Token::parse("0x23456789abcdeffedcba9876543210a").has_value());
  EXPECT_FALSE(Token::parse(" 123456789abcdeffedcba9876543210").has_value());
}

TEST(TokenTest, EqualityComparesFenceAndSalt) {
  EXPECT_EQ((Token{Fence{1}, 2}), (Token{Fence{1}, 2}));
  EXPECT_NE((Token{Fence{1}, 2}), (Token{Fence{1}, 3}));
  EXPECT_NE((Token{Fence{1}, 2}), (Token{Fence{2}, 2}));
}

TEST(SessionIdAndFenceTest, OrderedByValue) {
  EXPECT_LT(Fence{1}, Fence{2});
  EXPECT_EQ(Fence{}, Fence{0});
  EXPECT_LT(SessionId{1}, SessionId{2});
  EXPECT_EQ(SessionId{}.value, 0u);
}

}  // namespace
}  // namespace turnstile::core
