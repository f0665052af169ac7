// The HTTP response head parser the CLI and the integration tests share (client/http_response.h).
// No server needed.
#include "client/http_response.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>

namespace turnstile::client {
namespace {

TEST(HttpResponseHead, StatusHeadersAndWhereTheBodyStarts) {
  const std::string bytes =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
      "X-Dflockd-Leader:\t127.0.0.1:6388 \r\nno colon here\r\n\r\n{\"error\":\"not_leader\"}\n";
  const std::optional<HttpResponseHead> head = parse_http_response_head(bytes);
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 503);
  EXPECT_EQ(head->headers.size(), 2U);
  EXPECT_EQ(head->headers.at("content-type"), "application/json");
  EXPECT_EQ(head->headers.at("x-dflockd-leader"), "127.0.0.1:6388");
  EXPECT_EQ(bytes.substr(head->size), "{\"error\":\"not_leader\"}\n");
}

TEST(HttpResponseHead, NoHeadersAndARepeatedName) {
  const std::optional<HttpResponseHead> bare = parse_http_response_head("HTTP/1.0 204\r\n\r\n");
  ASSERT_TRUE(bare);
  EXPECT_EQ(bare->status, 204);
  EXPECT_TRUE(bare->headers.empty());
  EXPECT_EQ(bare->size, 16U);
  const std::optional<HttpResponseHead> twice =
      parse_http_response_head("HTTP/1.1 200 OK\r\nA: 1\r\na: 2\r\n\r\n");
  ASSERT_TRUE(twice);
  EXPECT_EQ(twice->headers.at("a"), "2");  // the last one
}

TEST(HttpResponseHead, NotAnAnswerOrNotCompleteYet) {
  EXPECT_FALSE(parse_http_response_head(""));
  EXPECT_FALSE(parse_http_response_head("ok 18ea2be7e7580ab36cf99344731093de 33\n"));
  EXPECT_FALSE(parse_http_response_head("HTTP/2 200\r\n\r\n"));
  EXPECT_FALSE(parse_http_response_head("HTTP/1.1 2x0 OK\r\n\r\n"));
  EXPECT_FALSE(parse_http_response_head("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"));
}

}  // namespace
}  // namespace turnstile::client
