// A body nlohmann's parser refuses is described in turnstile's words, naming the field whose
// value was being read (core/json_error.h); none of the parser's own text gets through.
#include "core/json_error.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

namespace turnstile::core {
namespace {

TEST(JsonError, ALoneSurrogateNamesItsFieldAndTheProblem) {
  const std::string body = R"({"payload":"\ud800"})";
  ASSERT_TRUE(nlohmann::json::parse(body, nullptr, false).is_discarded());
  EXPECT_EQ(describe_json_error(body),
            "field \"payload\": not valid JSON at byte 18: a \\u escape is half of a UTF-16 "
            "surrogate pair (U+D800 to U+DFFF) without the other half");
  // The low half alone, and in a later field after a nested value.
  EXPECT_EQ(describe_json_error(R"({"a":{"b":[1]},"token":"x\udc00"})").substr(0, 16),
            "field \"token\": n");
}

TEST(JsonError, EachProblemHasItsOwnWords) {
  const std::pair<std::string, std::string> cases[] = {
      {R"({"token":"\u12"})",
       "field \"token\": not valid JSON at byte 14: a \\u escape needs 4 hex digits"},
      {"{\"token\":\"a\x01\"}",
       "a control character (U+0000 to U+001F) inside a string must be escaped"},
      {R"({"token":"\q"})", "a backslash starts no JSON escape"},
      {R"({"token":"abc)", "a string has no closing quote"},
      {R"({"limit":-})", "field \"limit\": not valid JSON at byte 10: a number is malformed"},
      {R"({"limit":tru})", "a word that is not true, false or null"},
      {R"({"limit":)", "the body ends before its JSON value does"},
      {"{} {}", "request body is not valid JSON at byte 3: something follows the JSON value"},
      {R"({"a" 1})", "field \"a\": not valid JSON at byte 5: a field name is not followed by ':'"},
      {R"({"a":1 "b":2})",
       "request body is not valid JSON at byte 9: an object's fields are not "
       "separated by ',' or closed by '}'"},
      {R"({"a":[1 2]})", "field \"a\": not valid JSON at byte 8: an array's values are not"},
      {R"({7:1})", "request body is not valid JSON at byte 1: a field name is not a string"},
      {R"({"a":})", "field \"a\": not valid JSON at byte 5: a value is missing"},
  };
  for (const auto& [body, words] : cases) {
    const std::string described = describe_json_error(body);
    EXPECT_NE(described.find(words), std::string::npos) << body << " -> " << described;
    // Nothing of nlohmann's wording.
    for (const char* theirs : {"parse error", "syntax error", "last read", "[json.exception"}) {
      EXPECT_EQ(described.find(theirs), std::string::npos) << body << " -> " << described;
    }
  }
}

}  // namespace
}  // namespace turnstile::core
