// The client's pure parts: CRC-32 placement pinned to the values zlib.crc32 (the Python dflockd
// client's stable_hash_shard) computes, server address parsing, argument validation and reply
// splitting. No server needed.
#include "client/placement.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "client/connection.h"

namespace turnstile::client {
namespace {

TEST(ClientCrc32, MatchesZlib) {
  EXPECT_EQ(crc32_ieee("123456789"), 0xCBF43926U);  // the CRC-32/IEEE check value
  EXPECT_EQ(crc32_ieee(""), 0x00000000U);
  EXPECT_EQ(crc32_ieee("a"), 0xE8B7BE43U);
  EXPECT_EQ(crc32_ieee("hello"), 0x3610A686U);
  EXPECT_EQ(crc32_ieee("build-job"), 0x2B477BEBU);
  EXPECT_EQ(crc32_ieee("\xc3\xa9t\xc3\xa9"), 0x44D16CD4U);  // "été" in UTF-8
}

// Indices from Python: zlib.crc32(key.encode()) % n.
TEST(ClientPlacement, KnownKeysLandWhereTheDflockdClientsPutThem) {
  struct Case {
    std::string key;
    std::size_t of2, of3, of5;
  };
  const std::vector<Case> cases = {
      {"123456789", 0, 2, 2}, {"a", 1, 0, 2},      {"hello", 0, 1, 0},   {"build-job", 1, 1, 2},
      {"nightly", 0, 0, 1},   {"lock:1", 1, 1, 1}, {"user/42", 1, 0, 3},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(server_index(c.key, 1), 0U) << c.key;
    EXPECT_EQ(server_index(c.key, 2), c.of2) << c.key;
    EXPECT_EQ(server_index(c.key, 3), c.of3) << c.key;
    EXPECT_EQ(server_index(c.key, 5), c.of5) << c.key;
  }
}

TEST(ClientEndpoint, ParsesHostPortAndIpv6Literals) {
  auto plain = parse_endpoint("127.0.0.1:7000");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->host, "127.0.0.1");
  EXPECT_EQ(plain->port, 7000);
  auto v6 = parse_endpoint("[::1]:7001");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 7001);
  EXPECT_EQ(v6->to_string(), "[::1]:7001");
  auto name_only = parse_endpoint("locks.internal");
  ASSERT_TRUE(name_only.ok());
  EXPECT_EQ(name_only->port, kDefaultPort);
  auto bare_v6 = parse_endpoint("::1");
  ASSERT_TRUE(bare_v6.ok());
  EXPECT_EQ(bare_v6->host, "::1");
  EXPECT_EQ(bare_v6->port, kDefaultPort);
  for (const char* bad :
       {"", ":80", "host:", "host:0", "host:65536", "host:x", "[::1", "[::1]x", "[]:80",
        // Refused since the one address grammar (core/address.h): a blank or a stray character
        // in the host, a signed port, and an unbracketed text that is no IPv6 address.
        "a b:80", "a/b:80", "host:+80", "x:1:2", "2001:db8::1:7000x"}) {
    auto parsed = parse_endpoint(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.error().code, ErrorCode::kInvalidArgument) << bad;
  }
}

TEST(ClientValidation, KeysMirrorTheServer) {
  EXPECT_TRUE(validate_key("k").ok());
  EXPECT_TRUE(validate_key(std::string(kKeyMaxBytes, 'x')).ok());
  EXPECT_TRUE(validate_key("caf\xc3\xa9/\x01").ok());  // other bytes pass, as on the server
  for (const std::string& bad :
       {std::string(), std::string(kKeyMaxBytes + 1, 'x'), std::string("a b"), std::string("a\tb"),
        std::string("a\rb"), std::string("a\nl\nk\n10")}) {
    auto checked = validate_key(bad);
    ASSERT_FALSE(checked.ok());
    EXPECT_EQ(checked.error().code, ErrorCode::kInvalidArgument);
  }
}

TEST(ClientValidation, TokensAre32LowercaseHex) {
  EXPECT_TRUE(parse_token("0123456789abcdef0123456789abcdef").ok());
  EXPECT_EQ(parse_token("00000000000000ff0000000000000001")->fence.value, 255U);
  for (const char* bad : {"", "0123456789ABCDEF0123456789abcdef", "0123456789abcdef",
                          "0123456789abcdef0123456789abcdef0", "0123456789abcdef\n123456789abcdef",
                          "0123456789abcdef 123456789abcdef"}) {
    EXPECT_FALSE(parse_token(bad).ok()) << bad;
  }
}

TEST(ClientValidation, NumbersMirrorTheServer) {
  EXPECT_TRUE(validate_timeout(Seconds{0}).ok());
  EXPECT_TRUE(validate_timeout(Seconds{9'223'372'036}).ok());
  EXPECT_FALSE(validate_timeout(Seconds{-1}).ok());
  EXPECT_FALSE(validate_timeout(Seconds{9'223'372'037}).ok());
  EXPECT_TRUE(validate_lease(Seconds{0}).ok());  // the server's default
  EXPECT_FALSE(validate_lease(Seconds{-1}).ok());
  EXPECT_FALSE(validate_lease(Seconds{9'223'372'037}).ok());
  EXPECT_TRUE(validate_limit(1).ok());
  EXPECT_TRUE(validate_limit(1'048'576).ok());
  EXPECT_FALSE(validate_limit(0).ok());
  EXPECT_FALSE(validate_limit(1'048'577).ok());
}

TEST(ClientErrorCodes, HaveNames) {
  EXPECT_EQ(error_code_name(ErrorCode::kLeaseExpired), "lease_expired");
  EXPECT_EQ((Error{ErrorCode::kTimeout, "x"}).to_string(), "timeout: x");
}

}  // namespace
}  // namespace turnstile::client
