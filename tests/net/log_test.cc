// Unit tests for net/log.h: the two line formats, their escaping, level filtering and the rate
// limit of noisy events.
#include "net/log.h"

#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace turnstile::net {
namespace {

constexpr std::string_view kStamp = "2026-01-31T12:34:56.789Z";

std::string render(LogFormat format, LogLevel level, std::string_view event,
                   std::string_view message, const std::vector<LogField>& fields) {
  return render_log_line(format, kStamp, level, event, message, fields);
}

TEST(LogTest, TextPlainLineIsTheHistoricFormat) {
  EXPECT_EQ(render(LogFormat::kText, LogLevel::kInfo, "", "listening on 127.0.0.1:6388", {}),
            "2026-01-31T12:34:56.789Z info listening on 127.0.0.1:6388\n");
  // One event, one line: a newline in a message becomes a blank.
  EXPECT_EQ(render(LogFormat::kText, LogLevel::kWarn, "", "a\nb", {}),
            "2026-01-31T12:34:56.789Z warn a b\n");
}

TEST(LogTest, TextEventAppendsItsFields) {
  const std::string line =
      render(LogFormat::kText, LogLevel::kInfo, "listen", "listening on 127.0.0.1:6388",
             {{"protocol", "tcp"}, {"address", "127.0.0.1:6388"}, {"shards", 4}, {"tls", false}});
  EXPECT_EQ(line,
            "2026-01-31T12:34:56.789Z info listening on 127.0.0.1:6388 event=listen protocol=tcp "
            "address=127.0.0.1:6388 shards=4 tls=false\n");
}

TEST(LogTest, TextQuotesValuesThatAreNotPlainWords) {
  const std::string line = render(
      LogFormat::kText, LogLevel::kWarn, "admin_force_release", "",
      {{"key", "a b"}, {"peer", ""}, {"q", "say \"hi\"\\"}, {"eq", "a=b"}, {"nl", "x\ny\x01"}});
  EXPECT_EQ(line,
            "2026-01-31T12:34:56.789Z warn event=admin_force_release key=\"a b\" peer=\"\" "
            "q=\"say \\\"hi\\\"\\\\\" eq=\"a=b\" nl=\"x\\ny\\x01\"\n");
}

TEST(LogTest, JsonLineIsOneObjectWithTypedFields) {
  const std::string line = render(
      LogFormat::kJson, LogLevel::kError, "fence_reservation", "fence state file f: cannot write",
      {{"path", "/var/lib/f"}, {"ceiling", 18446744073709551615ULL}, {"delta", -3}, {"ok", false}});
  ASSERT_EQ(line.back(), '\n');
  ASSERT_EQ(line.find('\n'), line.size() - 1);
  const nlohmann::json object = nlohmann::json::parse(line);
  EXPECT_EQ(object["ts"], kStamp);
  EXPECT_EQ(object["level"], "error");
  EXPECT_EQ(object["event"], "fence_reservation");
  EXPECT_EQ(object["msg"], "fence state file f: cannot write");
  EXPECT_EQ(object["path"], "/var/lib/f");
  EXPECT_EQ(object["ceiling"].get<std::uint64_t>(), 18446744073709551615ULL);
  EXPECT_EQ(object["delta"].get<std::int64_t>(), -3);
  EXPECT_EQ(object["ok"], false);
}

TEST(LogTest, JsonPlainLineHasNoEvent) {
  const nlohmann::json object =
      nlohmann::json::parse(render(LogFormat::kJson, LogLevel::kInfo, "", "stopped", {}));
  EXPECT_FALSE(object.contains("event"));
  EXPECT_EQ(object["msg"], "stopped");
}

TEST(LogTest, JsonEscapesEverythingAStringCanHold) {
  std::string nasty = "quote\" backslash\\ nl\n cr\r tab\t ctl\x01\x1f del\x7f ";
  nasty += "utf8 \xc3\xa9 \xe2\x82\xac \xf0\x9f\x94\x92 ";
  nasty += "bad \xff \xc3 \xed\xa0\x80 \xc0\xaf end";  // invalid, truncated, surrogate, overlong
  const std::string line =
      render(LogFormat::kJson, LogLevel::kWarn, "auth_failure", nasty, {{"key", nasty}});
  EXPECT_EQ(line.find('\n'), line.size() - 1) << line;
  nlohmann::json object;
  ASSERT_NO_THROW(object = nlohmann::json::parse(line)) << line;
  const std::string msg = object["msg"];
  EXPECT_EQ(object["key"], msg);
  EXPECT_NE(msg.find("quote\" backslash\\ nl\n cr\r tab\t ctl\x01\x1f del\x7f "),
            std::string::npos);
  EXPECT_NE(msg.find("utf8 \xc3\xa9 \xe2\x82\xac \xf0\x9f\x94\x92 "), std::string::npos);
  // Each invalid byte is one U+FFFD.
  EXPECT_NE(msg.find("bad \xef\xbf\xbd \xef\xbf\xbd \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd "
                     "\xef\xbf\xbd\xef\xbf\xbd end"),
            std::string::npos)
      << msg;
}

// The JSON log writes strings with the project's one JSON writer (core/json_text.h): markup is
// escaped as an HTTP signal event escapes it.
TEST(LogTest, JsonStringsAreWrittenAsTheHttpApiWritesThem) {
  const std::string line =
      render(LogFormat::kJson, LogLevel::kInfo, "", "<b>&\b\f\xe2\x80\xa8", {});
  EXPECT_NE(line.find("\"\\u003cb\\u003e\\u0026\\b\\f\\u2028\""), std::string::npos) << line;
}

TEST(LogTest, ParsesLevelsAndFormats) {
  EXPECT_EQ(parse_log_level("debug"), LogLevel::kDebug);
  EXPECT_EQ(parse_log_level("info"), LogLevel::kInfo);
  EXPECT_EQ(parse_log_level("warn"), LogLevel::kWarn);
  EXPECT_EQ(parse_log_level("warning"), LogLevel::kWarn);
  EXPECT_EQ(parse_log_level("error"), LogLevel::kError);
  EXPECT_EQ(parse_log_level("verbose"), std::nullopt);
  EXPECT_EQ(parse_log_format("text"), LogFormat::kText);
  EXPECT_EQ(parse_log_format("json"), LogFormat::kJson);
  EXPECT_EQ(parse_log_format("logfmt"), std::nullopt);
}

TEST(LogTest, LevelFiltering) {
  const LogLevel before = log_level();
  set_log_level(LogLevel::kWarn);
  EXPECT_FALSE(log_enabled(LogLevel::kDebug));
  EXPECT_FALSE(log_enabled(LogLevel::kInfo));
  EXPECT_TRUE(log_enabled(LogLevel::kWarn));
  EXPECT_TRUE(log_enabled(LogLevel::kError));
  set_log_level(LogLevel::kError);
  EXPECT_FALSE(log_enabled(LogLevel::kWarn));
  EXPECT_TRUE(log_enabled(LogLevel::kError));
  set_debug_logging(true);  // the --debug alias
  EXPECT_TRUE(log_enabled(LogLevel::kDebug));
  EXPECT_TRUE(debug_logging());
  set_debug_logging(false);
  EXPECT_FALSE(log_enabled(LogLevel::kDebug));
  EXPECT_TRUE(log_enabled(LogLevel::kInfo));
  set_log_level(before);
}

TEST(LogTest, RateLimitAdmitsOneLinePerIntervalAndCountsTheRest) {
  using namespace std::chrono_literals;
  LogRateLimit limit(10s);
  constexpr std::int64_t kSecond = 1'000'000'000;
  EXPECT_EQ(limit.admit(100 * kSecond), 0U);
  EXPECT_EQ(limit.admit(101 * kSecond), std::nullopt);
  EXPECT_EQ(limit.admit(105 * kSecond), std::nullopt);
  EXPECT_EQ(limit.admit(109 * kSecond), std::nullopt);
  EXPECT_EQ(limit.admit(110 * kSecond), 3U);  // three suppressed since the last line
  EXPECT_EQ(limit.admit(119 * kSecond), std::nullopt);
  EXPECT_EQ(limit.admit(200 * kSecond), 1U);
  EXPECT_EQ(limit.admit(300 * kSecond), 0U);
}

}  // namespace
}  // namespace turnstile::net
