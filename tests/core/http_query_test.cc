// Query strings as Go's net/url reads them, but for a bad escape, which refuses the whole query
// (core/http_query.h).
#include "core/http_query.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace turnstile::core {
namespace {

std::vector<HttpQueryPair> pairs_of(std::string_view query) {
  auto parsed = parse_http_query(query);
  EXPECT_TRUE(std::holds_alternative<std::vector<HttpQueryPair>>(parsed)) << query;
  if (!std::holds_alternative<std::vector<HttpQueryPair>>(parsed)) return {};
  return std::get<std::vector<HttpQueryPair>>(parsed);
}

std::string error_of(std::string_view query) {
  auto parsed = parse_http_query(query);
  if (const auto* error = std::get_if<HttpQueryError>(&parsed)) return error->detail;
  return "";
}

TEST(HttpQuery, PairsAreSplitAndUnescapedAsGoDoes) {
  const std::vector<HttpQueryPair> pairs = pairs_of("a=1&b=x+y%2Bz&&c&d=&a=2&e=%3D=%26");
  ASSERT_EQ(pairs.size(), 6U);
  EXPECT_EQ(pairs[0].name, "a");
  EXPECT_EQ(pairs[0].value, "1");
  EXPECT_EQ(pairs[1].value, "x y+z");  // '+' is a space, %2B a '+'
  EXPECT_EQ(pairs[2].name, "c");       // the empty pair between && is skipped
  EXPECT_EQ(pairs[2].value, "");
  EXPECT_EQ(pairs[3].name, "d");
  EXPECT_EQ(pairs[4].value, "2");
  EXPECT_EQ(pairs[5].value, "==&");  // split on the first '='; escapes decoded after splitting
  EXPECT_EQ(first_query_value(pairs, "a"), "1");
  EXPECT_EQ(first_query_value(pairs, "c"), "");
  EXPECT_EQ(first_query_value(pairs, "zz"), std::nullopt);
  EXPECT_TRUE(pairs_of("").empty());
  EXPECT_EQ(pairs_of("p%61ttern=%e2%82%ac")[0].name, "pattern");
  EXPECT_EQ(pairs_of("p%61ttern=%e2%82%ac")[0].value, "\xe2\x82\xac");
}

// Go's url.Query drops such a pair; turnstile refuses the query, and says where.
TEST(HttpQuery, ABadEscapeRefusesTheWholeQuery) {
  for (const char* bad : {"pattern=a%", "pattern=a%zz", "pattern=a%2", "pattern=a%g1",
                          "pattern=b&pattern=a%zz", "x%=1&pattern=a", "%"}) {
    EXPECT_NE(error_of(bad).find("'%' not followed by two hex digits"), std::string::npos) << bad;
  }
  EXPECT_EQ(error_of("pattern=a%"),
            "query string has a '%' not followed by two hex digits (byte 9)");
  EXPECT_EQ(error_of("a=1&x%=1"), "query string has a '%' not followed by two hex digits (byte 5)");
  EXPECT_EQ(error_of("pattern=a%25"), "");  // %25 is a '%'
}

}  // namespace
}  // namespace turnstile::core
