#include "core/address.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <string>
#include <utility>

namespace turnstile::core {
namespace {

HostPort ok(std::string_view text, AddressOptions options = {}) {
  auto parsed = parse_host_port(text, options);
  if (const auto* why = std::get_if<std::string>(&parsed)) {
    ADD_FAILURE() << text << ": " << *why;
    return {};
  }
  return std::get<HostPort>(std::move(parsed));
}

std::string error(std::string_view text, AddressOptions options = {}) {
  auto parsed = parse_host_port(text, options);
  if (std::holds_alternative<HostPort>(parsed)) return "accepted";
  return std::get<std::string>(parsed);
}

TEST(Address, TakesAnIpv4AHostNameAndABracketedIpv6) {
  EXPECT_EQ(ok("10.0.0.4:7000"), (HostPort{"10.0.0.4", 7000, false}));
  EXPECT_EQ(ok("raft.example:1"), (HostPort{"raft.example", 1, false}));
  EXPECT_EQ(ok("Node_2-a.Example:65535"), (HostPort{"Node_2-a.Example", 65535, false}));
  EXPECT_EQ(ok("[::1]:7000"), (HostPort{"::1", 7000, true}));
  EXPECT_EQ(ok("[2001:db8::1]:7000"), (HostPort{"2001:db8::1", 7000, true}));
  EXPECT_EQ(ok("[::ffff:192.0.2.1]:80"), (HostPort{"::ffff:192.0.2.1", 80, true}));
  EXPECT_EQ(ok("[1:2:3:4:5:6:7:8]:80").host, "1:2:3:4:5:6:7:8");
  EXPECT_EQ(ok("h:07000").port, 7000);
  EXPECT_EQ(ok("h:0000000000065535").port, 65535);
  EXPECT_EQ(ok("h:007000").text(), "h:7000");
  EXPECT_EQ(ok("[::1]:7000").text(), "[::1]:7000");
  EXPECT_EQ(ok("10.0.0.4:7000").text(), "10.0.0.4:7000");
}

TEST(Address, RefusesEveryOtherFormWithAReason) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "empty"},
      {"10.0.0.2", "not host:port or [v6]:port"},
      {"10.0.0.2:", "the port must be between 1 and 65535"},
      {"h:0", "the port must be between 1 and 65535"},
      {"h:65536", "the port must be between 1 and 65535"},
      {"h:123456", "the port must be between 1 and 65535"},
      {"h:00000", "the port must be between 1 and 65535"},
      {"h:0065536", "the port must be between 1 and 65535"},
      {"h:99999999999999999999", "the port must be between 1 and 65535"},
      {"h:+1", "the port must be between 1 and 65535"},
      {"h:-1", "the port must be between 1 and 65535"},
      {"h: 1", "the port must be between 1 and 65535"},
      {"h:1 ", "the port must be between 1 and 65535"},
      {"h:7x", "the port must be between 1 and 65535"},
      {"h:0x10", "the port must be between 1 and 65535"},
      {" h:1", "the host must be an IP address or a host name"},
      {"host name:1", "the host must be an IP address or a host name"},
      {"a/b:1", "the host must be an IP address or a host name"},
      {"h@x:1", "the host must be an IP address or a host name"},
      {":7000", "empty host"},
      {"[]:7000", "empty host"},
      {"::1:7000", "an IPv6 address goes in brackets"},
      {"2001:db8::1:7000", "an IPv6 address goes in brackets"},
      {"[::1]", "not host:port or [v6]:port"},
      {"[::1]7000", "not host:port or [v6]:port"},
      {"[::1:7000", "not host:port or [v6]:port"},
      {"::1]:7000", "an IPv6 address goes in brackets"},
      {"[[::1]]:7000", "not host:port or [v6]:port"},
      {"[not-v6]:7000", "not an IPv6 address"},
      {"[10.0.0.2]:7000", "not an IPv6 address"},
      {"[1::2::3]:7000", "not an IPv6 address"},
      {"[1:2:3:4:5:6:7:8:9]:7000", "not an IPv6 address"},
      {"[12345::]:7000", "not an IPv6 address"},
      {"[::1%eth0]:7000", "not an IPv6 address"},
      {"999.0.0.1:7000", "not an IPv4 address"},
      {"1.2.3:7000", "not an IPv4 address"},
      {"01.2.3.4:7000", "not an IPv4 address"},
  };
  for (const auto& [text, why] : cases) {
    EXPECT_NE(error(text).find(why), std::string::npos) << text << " -> " << error(text);
  }
  EXPECT_NE(error(std::string(254, 'a') + ":1"), "accepted");
  EXPECT_EQ(error(std::string(253, 'a') + ":1"), "accepted");
}

TEST(Address, ADefaultPortMakesThePortOptional) {
  const AddressOptions client{6388};
  EXPECT_EQ(ok("locks.internal", client), (HostPort{"locks.internal", 6388, false}));
  EXPECT_EQ(ok("[::1]", client), (HostPort{"::1", 6388, true}));
  EXPECT_EQ(ok("::1", client), (HostPort{"::1", 6388, true}));
  EXPECT_EQ(ok("h:7000", client), (HostPort{"h", 7000, false}));
  for (const char* bad : {"", ":80", "h:", "h:0", "[::1", "[::1]x", "[]:80", "x:1:2"}) {
    EXPECT_NE(error(bad, client), "accepted") << bad;
  }
}

TEST(Address, KnowsTheWildcards) {
  for (const char* wildcard : {"0.0.0.0:1", "[::]:1", "[0:0::0]:1", "[0:0:0:0:0:0:0:0]:1"}) {
    EXPECT_TRUE(ok(wildcard).is_wildcard()) << wildcard;
  }
  for (const char* address : {"10.0.0.1:1", "[::1]:1", "zero:1"}) {
    EXPECT_FALSE(ok(address).is_wildcard()) << address;
  }
}

TEST(Address, ParsesIpLiterals) {
  EXPECT_EQ(parse_ipv4("192.0.2.255"), (std::array<std::uint8_t, 4>{192, 0, 2, 255}));
  EXPECT_FALSE(parse_ipv4("192.0.2.256"));
  EXPECT_FALSE(parse_ipv4("192.0.2."));
  EXPECT_FALSE(parse_ipv4("1.2.3.4.5"));
  const auto mapped = parse_ipv6("::ffff:1.2.3.4");
  ASSERT_TRUE(mapped);
  EXPECT_EQ((*mapped)[10], 0xff);
  EXPECT_EQ((*mapped)[15], 4);
  EXPECT_FALSE(parse_ipv6("1.2.3.4::"));
  EXPECT_FALSE(parse_ipv6(":::"));
  EXPECT_FALSE(parse_ipv6(":1::"));
  EXPECT_TRUE(parse_ipv6("1::"));
  EXPECT_TRUE(parse_ipv6("::"));
}

// Whatever the text, the parser answers; and what it accepts, it writes back as it read it.
RC_GTEST_PROP(AddressProperty, AnAcceptedAddressRoundTripsThroughItsText, (std::string text)) {
  auto parsed = parse_host_port(text);
  if (const auto* address = std::get_if<HostPort>(&parsed)) {
    RC_ASSERT(address->port >= 1);
    RC_ASSERT(std::get<HostPort>(parse_host_port(address->text())) == *address);
  }
}

RC_GTEST_PROP(AddressProperty, EveryPortInRangeIsTakenAndNoOther, (int port)) {
  const std::string text = "h:" + std::to_string(port);
  auto parsed = parse_host_port(text);
  RC_ASSERT(std::holds_alternative<HostPort>(parsed) == (port >= 1 && port <= 65535));
}

}  // namespace
}  // namespace turnstile::core
