// The one JSON string writer and UTF-8 check (core/json_text.h).
#include "core/json_text.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

namespace turnstile::core {
namespace {

std::string json(std::string_view text) {
  std::string out;
  append_json_string(out, text);
  return out;
}

TEST(JsonText, WritesWhatGosEncodingJsonWrites) {
  EXPECT_EQ(json(""), "\"\"");
  EXPECT_EQ(json("plain text"), "\"plain text\"");
  EXPECT_EQ(json("q\" b\\ \b\f\n\r\t"), "\"q\\\" b\\\\ \\b\\f\\n\\r\\t\"");
  EXPECT_EQ(json(std::string("\x00\x01\x1f", 3)), "\"\\u0000\\u0001\\u001f\"");
  EXPECT_EQ(json("<a href=x>&amp;"), "\"\\u003ca href=x\\u003e\\u0026amp;\"");
  EXPECT_EQ(json("\x7f"), "\"\x7f\"");  // DEL is not a control character to JSON
  EXPECT_EQ(json("line\xe2\x80\xa8sep\xe2\x80\xa9"), "\"line\\u2028sep\\u2029\"");
  EXPECT_EQ(json("\xc3\xa9 \xe2\x82\xac \xf0\x9f\x94\x92"),
            "\"\xc3\xa9 \xe2\x82\xac \xf0\x9f\x94\x92\"");
}

TEST(JsonText, EachByteThatStartsNoSequenceIsOneReplacement) {
  // invalid lead, truncated, surrogate, overlong, past U+10FFFF
  EXPECT_EQ(json("\xff"), "\"\\ufffd\"");
  EXPECT_EQ(json("a\xc3"), "\"a\\ufffd\"");
  EXPECT_EQ(json("\xed\xa0\x80"), "\"\\ufffd\\ufffd\\ufffd\"");
  EXPECT_EQ(json("\xc0\xaf"), "\"\\ufffd\\ufffd\"");
  EXPECT_EQ(json("\xf4\x90\x80\x80"), "\"\\ufffd\\ufffd\\ufffd\\ufffd\"");
}

TEST(JsonText, EveryByteStringIsValidJsonThatKeepsItsValidText) {
  std::string all;
  for (int c = 0; c < 256; ++c) all.push_back(static_cast<char>(c));
  all += "\xc3\xa9 end";
  nlohmann::json parsed;
  ASSERT_NO_THROW(parsed = nlohmann::json::parse(json(all)));
  const std::string back = parsed.get<std::string>();
  EXPECT_EQ(back.substr(0, 128), all.substr(0, 128));
  EXPECT_NE(back.find("\xc3\xa9 end"), std::string::npos);
}

TEST(JsonText, Utf8LengthFollowsRfc3629) {
  EXPECT_EQ(utf8_length_at("a", 0), 1U);
  EXPECT_EQ(utf8_length_at("\xc3\xa9", 0), 2U);
  EXPECT_EQ(utf8_length_at("\xe2\x82\xac", 0), 3U);
  EXPECT_EQ(utf8_length_at("\xf0\x9f\x94\x92", 0), 4U);
  EXPECT_EQ(utf8_length_at("\xe0\x80\x80", 0), 0U);  // overlong
  EXPECT_EQ(utf8_length_at("\xed\xbf\xbf", 0), 0U);  // surrogate
  EXPECT_EQ(utf8_length_at("\xf4\x90\x80\x80", 0), 0U);
  EXPECT_EQ(utf8_length_at("\xe2\x82", 0), 0U);  // cut short
  EXPECT_EQ(utf8_length_at("x\xc3\xa9", 1), 2U);
}

}  // namespace
}  // namespace turnstile::core
