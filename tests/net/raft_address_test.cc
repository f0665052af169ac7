// Raft addresses (net/raft_address.h): parsing the configured ones, and the source key an incoming
// connection counts against in the handshake slots.
#include "net/raft_address.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <cstdint>
#include <optional>
#include <string>

namespace turnstile::net {
namespace {

sockaddr_storage v4(const char* host, int port) {
  sockaddr_storage out{};
  auto* in = reinterpret_cast<sockaddr_in*>(&out);
  in->sin_family = AF_INET;
  in->sin_port = htons(static_cast<std::uint16_t>(port));
  EXPECT_EQ(inet_pton(AF_INET, host, &in->sin_addr), 1);
  return out;
}

sockaddr_storage v6(const char* host, int port) {
  sockaddr_storage out{};
  auto* in6 = reinterpret_cast<sockaddr_in6*>(&out);
  in6->sin6_family = AF_INET6;
  in6->sin6_port = htons(static_cast<std::uint16_t>(port));
  EXPECT_EQ(inet_pton(AF_INET6, host, &in6->sin6_addr), 1);
  return out;
}

const sockaddr* raw(const sockaddr_storage& s) { return reinterpret_cast<const sockaddr*>(&s); }

TEST(RaftAddress, SplitsHostAndPort) {
  const auto plain = split_host_port("10.0.0.4:7000");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->host, "10.0.0.4");
  EXPECT_EQ(plain->port, "7000");
  const auto bracketed = split_host_port("[2001:db8::1]:7000");
  ASSERT_TRUE(bracketed);
  EXPECT_EQ(bracketed->host, "2001:db8::1");
  EXPECT_TRUE(split_host_port("raft.example:1"));
  for (const char* bad : {"", "10.0.0.4", "10.0.0.4:", ":7000", "2001:db8::1:7000", "[::1]7000",
                          "h:0", "h:65536", "h:123456", "h:7x",
                          // the host is checked too (core/address.h)
                          "999.0.0.1:7000", "[not-v6]:7000", "a b:7000"}) {
    EXPECT_FALSE(split_host_port(bad)) << bad;
  }
  EXPECT_EQ(dial_address("10.0.0.4:7000@10.0.0.4:6388"), "10.0.0.4:7000");
  EXPECT_EQ(dial_address("10.0.0.4:7000"), "10.0.0.4:7000");
}

TEST(RaftAddress, NamesASocketAddressForTheLog) {
  EXPECT_EQ(address_name(raw(v4("192.0.2.7", 7000))), "192.0.2.7:7000");
  EXPECT_EQ(address_name(raw(v6("2001:db8::1", 7000))), "[2001:db8::1]:7000");
  sockaddr_storage unix_family{};
  unix_family.ss_family = AF_UNIX;
  EXPECT_EQ(address_name(raw(unix_family)), "?");
}

TEST(RaftAddress, OneSourceIsAnIpv4AddressOrAnIpv6Slash64) {
  EXPECT_EQ(source_key(raw(v4("192.0.2.7", 1))), "192.0.2.7");
  EXPECT_EQ(source_key(raw(v4("192.0.2.7", 2))), "192.0.2.7");  // the port does not count
  EXPECT_EQ(source_key(raw(v6("::ffff:192.0.2.7", 1))), "192.0.2.7");
  EXPECT_EQ(source_key(raw(v6("2001:db8:0:1::5", 1))), "2001:db8:0:1::/64");
  EXPECT_EQ(source_key(raw(v6("2001:db8:0:1:ffff::9", 1))), "2001:db8:0:1::/64");
  EXPECT_NE(source_key(raw(v6("2001:db8:0:2::5", 1))), "2001:db8:0:1::/64");
  sockaddr_storage unix_family{};
  unix_family.ss_family = AF_UNIX;
  EXPECT_EQ(source_key(raw(unix_family)), "");
}

TEST(RaftAddress, AConfiguredNumericAddressHasTheKeyItsConnectionsComeFrom) {
  EXPECT_EQ(source_key_of("10.0.0.4:7000@10.0.0.4:6388"), "10.0.0.4");
  EXPECT_EQ(source_key_of("[2001:db8:0:1::5]:7000"), "2001:db8:0:1::/64");
  EXPECT_EQ(source_key_of("raft.example:7000"), std::nullopt);  // known once resolved
  EXPECT_EQ(source_key_of("not an address"), std::nullopt);
}

}  // namespace
}  // namespace turnstile::net
