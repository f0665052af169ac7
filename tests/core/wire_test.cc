// Tests of the wire codec against reference sections 1.1 (framing), 1.3 (argument rules), 1.6
// (protocol errors) and 1.9 (example exchanges), plus properties over chunking, round trips and
// random bytes.
#include "core/wire.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "core/protocol.h"
#include "core/stats.h"
#include "core/types.h"
#include "testing/requests.h"

namespace turnstile::core {

// Printers so that failures show requests readably.
void PrintTo(const ProtocolError& error, std::ostream* os) { *os << protocol_error_name(error); }

namespace {

using Error = ProtocolError;

constexpr std::string_view kHex = "0006a1b2c3d4e5f6a7b8c9d0e1f2a3b4";
const Token kToken{Fence{0x0006a1b2c3d4e5f6}, 0xa7b8c9d0e1f2a3b4};

// Every command a client can send (force-release is HTTP-only).
constexpr std::array<Command, 32> kAllCommands = {
    Command::kLock,       Command::kRelease,     Command::kRenew,        Command::kEnqueue,
    Command::kWait,       Command::kSemLock,     Command::kSemRelease,   Command::kSemRenew,
    Command::kSemEnqueue, Command::kSemWait,     Command::kPing,         Command::kStats,
    Command::kAuth,       Command::kBarrier,     Command::kStableRef,    Command::kListen,
    Command::kUnlisten,   Command::kSignal,      Command::kSignalPeer,   Command::kReadLock,
    Command::kWriteLock,  Command::kReadRelease, Command::kWriteRelease, Command::kReadRenew,
    Command::kWriteRenew, Command::kReadEnqueue, Command::kWriteEnqueue, Command::kReadWait,
    Command::kWriteWait,  Command::kCheck,       Command::kInspect,      Command::kLostNotify};

std::string request_text(std::string_view command, std::string_view key, std::string_view arg) {
  std::string text;
  text.append(command).append("\n").append(key).append("\n").append(arg).append("\n");
  return text;
}

// Feeds `input` to `parser` until it is used up, collecting every result. Checks the contract on
// the way: never more consumed than given, and no result only when everything was consumed.
std::vector<ParseResult> parse_all(RequestParser& parser, std::string_view input) {
  std::vector<ParseResult> results;
  while (!input.empty()) {
    std::optional<ParseResult> out;
    const std::size_t used = parser.parse(input, out);
    EXPECT_LE(used, input.size());
    input.remove_prefix(std::min(used, input.size()));
    if (!out) {
      EXPECT_TRUE(input.empty());
      break;
    }
    results.push_back(std::move(*out));
  }
  return results;
}

// Parses text that must hold exactly one complete request. An error that closes the connection
// ends the stream: what follows it is never read.
ParseResult parse_one(std::string_view text, RequestParser::Limits limits = {}) {
  RequestParser parser(limits);
  std::optional<ParseResult> first;
  (void)parser.parse(text, first);
  if (first && closes_connection(first->error)) return *first;

  parser = RequestParser(limits);
  std::vector<ParseResult> results = parse_all(parser, text);
  EXPECT_EQ(results.size(), 1u) << "input: " << testing::PrintToString(std::string(text));
  EXPECT_FALSE(parser.mid_request());
  if (results.size() != 1) return ParseResult{Error::kNone, Request{}};
  return results.front();
}

Error error_of(std::string_view text) { return parse_one(text).error; }
Error error_of(std::string_view command, std::string_view key, std::string_view arg) {
  return error_of(request_text(command, key, arg));
}

Request parsed(std::string_view command, std::string_view key, std::string_view arg) {
  ParseResult result = parse_one(request_text(command, key, arg));
  EXPECT_EQ(result.error, Error::kNone) << testing::PrintToString(request_text(command, key, arg));
  return result.request;
}

bool same_results(const std::vector<ParseResult>& a, const std::vector<ParseResult>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].error != b[i].error || !(a[i].request == b[i].request)) return false;
  }
  return true;
}

// ---- Framing (1.1) ------------------------------------------------------------------------------

TEST(WireFraming, ParsesAThreeLineRequest) {
  Request expected = test::keyed_request(Command::kLock, "k");
  expected.timeout_s = 10;
  expected.lease_s = 33;
  EXPECT_EQ(parsed("l", "k", "10 33"), expected);
}

TEST(WireFraming, IncompleteRequestYieldsNothingAndWaits) {
  RequestParser parser;
  std::optional<ParseResult> out;
  EXPECT_EQ(parser.parse("l\nk\n10", out), 6u);
  EXPECT_FALSE(out.has_value());
  EXPECT_TRUE(parser.mid_request());
  EXPECT_EQ(parser.parse("\n", out), 1u);
  ASSERT_TRUE(out.has_value());
  EXPECT_TRUE(out->ok());
  EXPECT_EQ(out->request.timeout_s, 10);
  EXPECT_FALSE(parser.mid_request());
}

TEST(WireFraming, AllThreeLinesAreReadBeforeValidating) {
  // An unknown command is reported only once its key and arg lines have arrived, so the next
  // request starts on a line boundary.
  RequestParser parser;
  std::optional<ParseResult> out;
  EXPECT_EQ(parser.parse("bogus\n", out), 6u);
  EXPECT_FALSE(out.has_value());
  EXPECT_EQ(parser.parse("key\n", out), 4u);
  EXPECT_FALSE(out.has_value());
  EXPECT_EQ(parser.parse("arg\nping\n_\n\n", out), 4u);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->error, Error::kUnknownCommand);
}

TEST(WireFraming, EmptyInputConsumesNothing) {
  RequestParser parser;
  std::optional<ParseResult> out = ParseResult{};
  EXPECT_EQ(parser.parse("", out), 0u);
  EXPECT_FALSE(out.has_value());
  EXPECT_FALSE(parser.mid_request());
}

TEST(WireFraming, MidRequestTracksPartialRequests) {
  RequestParser parser;
  std::optional<ParseResult> out;
  EXPECT_FALSE(parser.mid_request());
  (void)parser.parse("p", out);
  EXPECT_TRUE(parser.mid_request());
  (void)parser.parse("ing\n_\n", out);
  EXPECT_TRUE(parser.mid_request());
  (void)parser.parse("\n", out);
  ASSERT_TRUE(out.has_value());
  EXPECT_FALSE(parser.mid_request());
  EXPECT_EQ(parser.buffered_bytes(), 0u);
}

TEST(WireFraming, PipelinedRequestsComeOutOneAtATimeInOrder) {
  const std::string stream = request_text("l", "a", "1") + request_text("ping", "_", "") +
                             request_text("bogus", "_", "") + request_text("r", "a", kHex);
  RequestParser parser;
  std::optional<ParseResult> out;
  std::string_view rest = stream;

  std::size_t used = parser.parse(rest, out);
  EXPECT_EQ(used, 6u);  // only the first request; the rest stays for later
  ASSERT_TRUE(out && out->ok());
  EXPECT_EQ(out->request.command, Command::kLock);
  rest.remove_prefix(used);

  used = parser.parse(rest, out);
  ASSERT_TRUE(out && out->ok());
  EXPECT_EQ(out->request.command, Command::kPing);
  rest.remove_prefix(used);

  used = parser.parse(rest, out);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->error, Error::kUnknownCommand);
  rest.remove_prefix(used);

  used = parser.parse(rest, out);
  ASSERT_TRUE(out && out->ok());
  EXPECT_EQ(out->request.command, Command::kRelease);
  EXPECT_EQ(out->request.token, kToken);
  EXPECT_EQ(used, rest.size());
}

TEST(WireFraming, OneByteAtATimeGivesTheSameRequests) {
  const std::string stream = request_text("l", "a", "1 2") + request_text("sl", "b", "0 3") +
                             request_text("auth", "_", " secret ") + request_text("x", "", "") +
                             request_text("n", "a", std::string(kHex) + " 9");
  RequestParser whole_parser;
  const std::vector<ParseResult> whole = parse_all(whole_parser, stream);
  ASSERT_EQ(whole.size(), 5u);

  RequestParser parser;
  std::vector<ParseResult> bytewise;
  for (char c : stream) {
    std::optional<ParseResult> out;
    EXPECT_EQ(parser.parse(std::string_view(&c, 1), out), 1u);
    if (out) bytewise.push_back(*out);
  }
  EXPECT_TRUE(same_results(whole, bytewise));
}

TEST(WireFraming, ReusedResultIsOverwrittenCompletely) {
  RequestParser parser;
  std::optional<ParseResult> out;
  const std::string first = request_text("sl", "long_key_beyond_sso_size", "5 7 9");
  (void)parser.parse(first, out);
  ASSERT_TRUE(out && out->ok());
  (void)parser.parse(request_text("ping", "_", ""), out);
  ASSERT_TRUE(out && out->ok());
  EXPECT_EQ(out->request, test::keyed_request(Command::kPing));
}

TEST(WireFraming, CrlfIsAccepted) {
  Request expected = test::keyed_request(Command::kLock, "k");
  expected.timeout_s = 10;
  expected.lease_s = 33;
  EXPECT_EQ(parse_one("l\r\nk\r\n10 33\r\n").request, expected);
  EXPECT_EQ(parse_one("ping\r\n_\r\n\r\n").request, test::keyed_request(Command::kPing));
}

TEST(WireFraming, OnlyOneTrailingCarriageReturnIsStripped) {
  EXPECT_EQ(error_of("l\r\r\nk\n10\n"), Error::kUnknownCommand);
  EXPECT_EQ(error_of("l\nk\r\r\n10\n"), Error::kBadKey);
  // A second '\r' on the arg line is whitespace to the field splitter, so it is harmless there.
  EXPECT_EQ(error_of("l\nk\n10\r\r\n"), Error::kNone);
}

TEST(WireFraming, LineOfExactly256BytesIsAccepted) {
  const std::string key(256, 'k');
  EXPECT_EQ(parsed("l", key, "1").key, key);
  EXPECT_EQ(parsed("e", "k", std::string(255, ' ') + "5").lease_s, 5);
}

TEST(WireFraming, LineOf257BytesIsTooLong) {
  EXPECT_EQ(error_of("l", std::string(257, 'k'), "1"), Error::kLineTooLong);
  EXPECT_EQ(error_of(std::string(257, 'l'), "k", "1"), Error::kLineTooLong);
  EXPECT_EQ(error_of("l", "k", std::string(256, ' ') + "1"), Error::kLineTooLong);
}

TEST(WireFraming, TrailingCarriageReturnCountsTowardTheCap) {
  const std::string key255(255, 'k');
  EXPECT_EQ(parse_one("l\n" + key255 + "\r\n1\n").request.key, key255);
  const std::string key256(256, 'k');
  EXPECT_EQ(error_of("l\n" + key256 + "\r\n1\n"), Error::kLineTooLong);
}

TEST(WireFraming, TooLongLineIsReportedAtItsNewlineWithoutTheRemainingLines) {
  // The key line is over its cap; the error comes as soon as that line ends, and the arg line is
  // not waited for (the connection closes anyway).
  const std::string input = "l\n" + std::string(300, 'k') + "\n" + "10\n";
  RequestParser parser;
  std::optional<ParseResult> out;
  const std::size_t used = parser.parse(input, out);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->error, Error::kLineTooLong);
  EXPECT_EQ(used, 2u + 300u + 1u);
}

TEST(WireFraming, TooLongLineIsDrainedBeforeTheError) {
  RequestParser parser;
  std::optional<ParseResult> out;
  const std::string junk(100'000, 'x');
  for (int i = 0; i < 100; ++i) {  // 10 MB without a newline
    EXPECT_EQ(parser.parse(junk, out), junk.size());
    EXPECT_FALSE(out.has_value());
    EXPECT_TRUE(parser.mid_request());
    EXPECT_LE(parser.buffered_bytes(), 256u);  // nothing past the cap is kept
  }
  EXPECT_EQ(parser.parse("tail\nping\n_\n\n", out), 5u);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->error, Error::kLineTooLong);
  EXPECT_TRUE(closes_connection(out->error));
  EXPECT_FALSE(parser.mid_request());
  EXPECT_EQ(parser.buffered_bytes(), 0u);
}

TEST(WireFraming, TooLongLineSplitAcrossChunksIsStillCaught) {
  RequestParser parser;
  std::optional<ParseResult> out;
  EXPECT_EQ(parser.parse("l\nk\n" + std::string(200, '1'), out), 204u);
  EXPECT_FALSE(out.has_value());
  EXPECT_EQ(parser.parse(std::string(56, '1'), out), 56u);  // exactly 256: still fine
  EXPECT_FALSE(out.has_value());
  EXPECT_EQ(parser.parse("1\n", out), 2u);  // the 257th byte
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->error, Error::kLineTooLong);
}

TEST(WireFraming, LinesAtTheCapAreAcceptedWhenSplitAcrossChunks) {
  // The buffered path must apply the same cap as the in-place path: 256 is fine however the
  // line arrives.
  const std::vector<std::string> inputs = {
      request_text(std::string(256, 'l'), "k", "1"),  // unknown command, but not too long
      request_text("l", std::string(256, 'k'), "1"),
      request_text("l", "k", std::string(255, ' ') + "1"),
      request_text("l", std::string(255, 'k') + "\r", "1"),
      request_text("auth", "_", std::string(64 * 1024, 's'))};
  for (const std::string& input : inputs) {
    RequestParser whole_parser;
    const std::vector<ParseResult> whole = parse_all(whole_parser, input);
    ASSERT_EQ(whole.size(), 1u);
    EXPECT_NE(whole[0].error, Error::kLineTooLong);
    for (std::size_t split = 1; split < input.size(); split += 1 + split / 8) {
      RequestParser parser;
      std::vector<ParseResult> pieces = parse_all(parser, std::string_view(input).substr(0, split));
      std::vector<ParseResult> rest = parse_all(parser, std::string_view(input).substr(split));
      pieces.insert(pieces.end(), rest.begin(), rest.end());
      EXPECT_TRUE(same_results(whole, pieces)) << "split at " << split;
    }
  }
}

TEST(WireFraming, AuthArgLineMayHold64KiB) {
  const std::string secret(64 * 1024, 's');
  ParseResult result = parse_one(request_text("auth", "_", secret));
  ASSERT_EQ(result.error, Error::kNone);
  EXPECT_EQ(result.request.secret, secret);
  // The cap also applies when the command line arrived with CRLF.
  EXPECT_EQ(parse_one("auth\r\n_\r\n" + secret + "\n").error, Error::kNone);
  EXPECT_EQ(parse_one("auth\r\n_\r\n" + secret.substr(1) + "\r\n").request.secret,
            secret.substr(1));
}

TEST(WireFraming, AuthArgLineOverItsCapIsTooLong) {
  EXPECT_EQ(error_of("auth", "_", std::string(64 * 1024 + 1, 's')), Error::kLineTooLong);
  EXPECT_EQ(error_of("auth\n_\n" + std::string(64 * 1024, 's') + "\r\n"), Error::kLineTooLong);
}

TEST(WireFraming, AuthCapCoversOnlyTheArgLineOfAuth) {
  EXPECT_EQ(error_of("auth", std::string(257, '_'), "s"), Error::kLineTooLong);
  EXPECT_EQ(error_of("ping", "_", std::string(257, 'x')), Error::kLineTooLong);
  EXPECT_EQ(error_of("AUTH", "_", std::string(257, 'x')), Error::kLineTooLong);
}

TEST(WireFraming, AuthLineFedInPiecesIsBufferedWithinBounds) {
  RequestParser parser;
  std::optional<ParseResult> out;
  EXPECT_EQ(parser.parse("auth\n_\n", out), 7u);
  const std::string piece(1000, 's');
  for (int i = 0; i < 65; ++i) {
    (void)parser.parse(piece, out);
    EXPECT_FALSE(out.has_value());
  }
  EXPECT_EQ(parser.buffered_bytes(), 4u + 1u + 65'000u);
  (void)parser.parse("\n", out);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->request.secret.size(), 65'000u);
  EXPECT_EQ(parser.buffered_bytes(), 0u);
}

TEST(WireFraming, SmallerConfiguredLimitsAreHonoured) {
  RequestParser::Limits limits{.line_max = 4, .long_line_max = 8};
  EXPECT_EQ(parse_one("l\nabcd\n1\n", limits).error, Error::kNone);
  EXPECT_EQ(parse_one("l\nabcde\n1\n", limits).error, Error::kLineTooLong);
  EXPECT_EQ(parse_one("auth\n_\n12345678\n", limits).error, Error::kNone);
  EXPECT_EQ(parse_one("auth\n_\n123456789\n", limits).error, Error::kLineTooLong);
}

// ---- Protocol errors (1.6) ----------------------------------------------------------------------

TEST(WireErrors, OnlyLineTooLongClosesTheConnection) {
  for (Error error : {Error::kNone, Error::kUnknownCommand, Error::kBadInteger, Error::kBadKey,
                      Error::kBadTimeout, Error::kEmptyToken, Error::kBadArguments,
                      Error::kBadLease, Error::kBadLimit}) {
    EXPECT_FALSE(closes_connection(error)) << protocol_error_name(error);
  }
  EXPECT_TRUE(closes_connection(Error::kLineTooLong));
}

TEST(WireErrors, CodesAreDflockdsNumbers) {
  EXPECT_EQ(static_cast<int>(Error::kUnknownCommand), 3);
  EXPECT_EQ(static_cast<int>(Error::kBadInteger), 4);
  EXPECT_EQ(static_cast<int>(Error::kBadKey), 5);
  EXPECT_EQ(static_cast<int>(Error::kBadTimeout), 6);
  EXPECT_EQ(static_cast<int>(Error::kEmptyToken), 7);
  EXPECT_EQ(static_cast<int>(Error::kBadArguments), 8);
  EXPECT_EQ(static_cast<int>(Error::kBadLease), 9);
  EXPECT_EQ(static_cast<int>(Error::kLineTooLong), 12);
  EXPECT_EQ(static_cast<int>(Error::kBadLimit), 13);
}

TEST(WireErrors, EveryErrorHasADistinctName) {
  std::vector<std::string_view> names;
  for (Error error : {Error::kNone, Error::kUnknownCommand, Error::kBadInteger, Error::kBadKey,
                      Error::kBadTimeout, Error::kEmptyToken, Error::kBadArguments,
                      Error::kBadLease, Error::kLineTooLong, Error::kBadLimit}) {
    const std::string_view name = protocol_error_name(error);
    EXPECT_FALSE(name.empty());
    EXPECT_EQ(std::count(names.begin(), names.end(), name), 0);
    names.push_back(name);
  }
}

// Code 3.
TEST(WireErrors, UnknownCommand) {
  EXPECT_EQ(error_of("x", "k", "1"), Error::kUnknownCommand);
  EXPECT_EQ(error_of("lock", "k", "1"), Error::kUnknownCommand);
  EXPECT_EQ(error_of("", "k", "1"), Error::kUnknownCommand);
  EXPECT_EQ(error_of(" l", "k", "1"), Error::kUnknownCommand);
  EXPECT_EQ(error_of("l ", "k", "1"), Error::kUnknownCommand);
  EXPECT_EQ(error_of("s", "k", "1"), Error::kUnknownCommand);
  EXPECT_EQ(error_of("sx", "k", "1"), Error::kUnknownCommand);
  EXPECT_EQ(error_of("listens", "k", ""), Error::kUnknownCommand);
  EXPECT_EQ(error_of("Signal", "k", "p"), Error::kUnknownCommand);
  EXPECT_EQ(error_of("barriers", "_", ""), Error::kUnknownCommand);
  EXPECT_EQ(error_of("stable_ref", "r", "_"), Error::kUnknownCommand);
}

TEST(WireErrors, CommandsAreCaseSensitive) {
  EXPECT_EQ(error_of("L", "k", "1"), Error::kUnknownCommand);
  EXPECT_EQ(error_of("PING", "_", ""), Error::kUnknownCommand);
  EXPECT_EQ(error_of("Stats", "_", ""), Error::kUnknownCommand);
  EXPECT_EQ(error_of("SL", "k", "1 2"), Error::kUnknownCommand);
}

TEST(WireErrors, EveryCommandNameIsRecognised) {
  for (Command command : kAllCommands) {
    std::string arg;
    switch (command) {
      case Command::kLock:
      case Command::kWait:
      case Command::kSemWait:
      case Command::kReadLock:
      case Command::kWriteLock:
      case Command::kReadWait:
      case Command::kWriteWait:
        arg = "1";
        break;
      case Command::kSemLock:
        arg = "1 2";
        break;
      case Command::kSemEnqueue:
        arg = "2";
        break;
      case Command::kRelease:
      case Command::kRenew:
      case Command::kSemRelease:
      case Command::kSemRenew:
      case Command::kReadRelease:
      case Command::kWriteRelease:
      case Command::kReadRenew:
      case Command::kWriteRenew:
        arg = kHex;
        break;
      case Command::kSignal:
      case Command::kSignalPeer:
        arg = "payload";
        break;
      case Command::kCheck:
        arg = kHex;
        break;
      case Command::kLostNotify:
        arg = "on";
        break;
      default:
        break;
    }
    ParseResult result = parse_one(request_text(command_name(command), "k", arg));
    EXPECT_EQ(result.error, Error::kNone) << command_name(command);
    EXPECT_EQ(result.request.command, command);
  }
}

// The cluster surface: barrier ignores its key and argument lines; stable-ref carries its ref on
// the key line, 1 to 64 printable ASCII bytes (spaces allowed), and ignores the argument line.
TEST(WireRequests, BarrierAndStableRef) {
  ParseResult barrier = parse_one(request_text("barrier", "anything", "at all"));
  ASSERT_EQ(barrier.error, Error::kNone);
  EXPECT_EQ(barrier.request.command, Command::kBarrier);
  EXPECT_EQ(barrier.request.key, "");
  ParseResult ref = parse_one(request_text("stable-ref", "worker 7/a", "_"));
  ASSERT_EQ(ref.error, Error::kNone);
  EXPECT_EQ(ref.request.command, Command::kStableRef);
  EXPECT_EQ(ref.request.ref, "worker 7/a");
  EXPECT_EQ(ref.request.key, "");
  EXPECT_EQ(parse_one(request_text("stable-ref", std::string(64, 'r'), "_")).error, Error::kNone);
  for (const std::string& bad : {std::string(), std::string(65, 'r'), std::string("a\tb"),
                                 std::string("caf\xc3\xa9"), std::string("x\x7f")}) {
    EXPECT_EQ(parse_one(request_text("stable-ref", bad, "_")).error, Error::kBadArguments) << bad;
  }
  std::string encoded;
  encode_request(ref.request, encoded);
  EXPECT_EQ(encoded, "stable-ref\nworker 7/a\n_\n");
  encoded.clear();
  encode_request(barrier.request, encoded);
  EXPECT_EQ(encoded, "barrier\n_\n_\n");
}

// Signals (dflockd v1.11-v1.16): listen and unlisten take a pattern and an optional group (the
// trimmed argument line); signal a literal channel and a payload (the line as it came) that is
// not blank, up to
// 65536 - len("sig ") - len(channel) - 1 bytes, on an argument line that may be 64 KiB long.
TEST(WireRequests, Signals) {
  Request listen = parsed("listen", "jobs.*.done", "  workers ");
  EXPECT_EQ(listen.command, Command::kListen);
  EXPECT_EQ(listen.key, "jobs.*.done");
  EXPECT_EQ(listen.text, "workers");
  EXPECT_EQ(parsed("listen", "jobs.>", "").text, "");
  EXPECT_EQ(parsed("unlisten", "jobs.>", "g").command, Command::kUnlisten);
  Request signal = parsed("signal", "jobs.7.done", "{\"ok\": true}");
  EXPECT_EQ(signal.command, Command::kSignal);
  EXPECT_EQ(signal.key, "jobs.7.done");
  EXPECT_EQ(signal.text, "{\"ok\": true}");
  // The payload is the line as it came: white space at either end stays (dflockd trims only to
  // see that the payload is not blank), and only the line's '\r' goes.
  EXPECT_EQ(parsed("signal", "a", "  both  ").text, "  both  ");
  EXPECT_EQ(parsed("signal", "a", "\tlead").text, "\tlead");
  EXPECT_EQ(parsed("signal", "a", "trail \r").text, "trail ");
  for (const char* bad : {"a.b*", "a.>.b", "a..b", ".a", "a.", ">b"}) {
    EXPECT_EQ(error_of("listen", bad, ""), Error::kBadKey) << bad;
    EXPECT_EQ(error_of("unlisten", bad, ""), Error::kBadKey) << bad;
  }
  EXPECT_EQ(error_of("listen", "", ""), Error::kBadKey);
  for (const char* bad : {"a.*", "a.>", "*", ">", "a..b", "a b"}) {
    EXPECT_EQ(error_of("signal", bad, "x"), Error::kBadKey) << bad;
  }
  EXPECT_EQ(error_of("signal", "a", ""), Error::kBadArguments);
  EXPECT_EQ(error_of("signal", "a", " \t "), Error::kBadArguments);

  // The payload cap depends on the channel; the line is read up to 64 KiB either way.
  const std::string channel = "c";
  const std::size_t max = 65536 - 4 - channel.size() - 1;
  EXPECT_EQ(parsed("signal", channel, std::string(max, 'p')).text.size(), max);
  EXPECT_EQ(error_of("signal", channel, std::string(max + 1, 'p')), Error::kBadArguments);
  EXPECT_EQ(error_of("signal", channel, " " + std::string(max, 'p')), Error::kBadArguments);
  EXPECT_EQ(error_of("signal", channel, std::string(64 * 1024 + 1, 'p')), Error::kLineTooLong);
  EXPECT_EQ(error_of("listen", "a", std::string(300, 'g')), Error::kLineTooLong);

  std::string encoded;
  encode_request(listen, encoded);
  EXPECT_EQ(encoded, "listen\njobs.*.done\nworkers\n");
  encoded.clear();
  encode_request(signal, encoded);
  EXPECT_EQ(encoded, "signal\njobs.7.done\n{\"ok\": true}\n");
  // A payload ending in '\r' (sent as "k\r\r\n") is encoded the same way, so it comes back whole.
  Request carriage = parsed("signal", "a", "k\r\r");
  EXPECT_EQ(carriage.text, "k\r");
  encoded.clear();
  encode_request(carriage, encoded);
  EXPECT_EQ(encoded, "signal\na\nk\r\r\n");
  EXPECT_EQ(decode_reply(Command::kSignal, "ok 3"), Reply::delivered(3));
  EXPECT_EQ(decode_reply(Command::kSignal, "ok"), std::nullopt);
  EXPECT_EQ(decode_reply(Command::kListen, "ok"), Reply::of(Status::kOk));
  std::string reply;
  encode_reply(Reply::delivered(0), reply);
  EXPECT_EQ(reply, "ok 0\n");

  // signal-peer (cluster mode: a signal forwarded by another node) has signal's lines, rules and
  // reply.
  Request peer = parsed("signal-peer", "jobs.7.done", "p");
  EXPECT_EQ(peer.command, Command::kSignalPeer);
  EXPECT_EQ(peer.key, "jobs.7.done");
  EXPECT_EQ(peer.text, "p");
  EXPECT_EQ(parsed("signal-peer", "a", " p ").text, " p ");
  EXPECT_EQ(error_of("signal-peer", "a.*", "x"), Error::kBadKey);
  EXPECT_EQ(error_of("signal-peer", "a", " "), Error::kBadArguments);
  EXPECT_EQ(parsed("signal-peer", channel, std::string(max, 'p')).text.size(), max);
  EXPECT_EQ(error_of("signal-peer", channel, std::string(max + 1, 'p')), Error::kBadArguments);
  EXPECT_EQ(error_of("signal-peer", channel, std::string(64 * 1024 + 1, 'p')), Error::kLineTooLong);
  encoded.clear();
  encode_request(peer, encoded);
  EXPECT_EQ(encoded, "signal-peer\njobs.7.done\np\n");
  EXPECT_EQ(decode_reply(Command::kSignalPeer, "ok 2"), Reply::delivered(2));
  EXPECT_EQ(decode_reply(Command::kSignalPeer, "ok"), std::nullopt);
}

TEST(WireErrors, CommandIsCheckedBeforeKeyAndKeyBeforeArguments) {
  EXPECT_EQ(error_of("x", "", "junk junk junk"), Error::kUnknownCommand);
  EXPECT_EQ(error_of("l", "", "junk junk junk"), Error::kBadKey);
  EXPECT_EQ(error_of("l", "bad key", ""), Error::kBadKey);
}

// Code 5.
TEST(WireErrors, EmptyKeyIsBadForEveryKeyedCommand) {
  for (Command command : kAllCommands) {
    if (!is_engine_command(command) || command == Command::kBarrier) continue;
    EXPECT_EQ(error_of(command_name(command), "", "1"), Error::kBadKey) << command_name(command);
  }
}

TEST(WireErrors, KeyWithSpaceTabOrCarriageReturnIsBad) {
  EXPECT_EQ(error_of("l", "a b", "1"), Error::kBadKey);
  EXPECT_EQ(error_of("l", " a", "1"), Error::kBadKey);
  EXPECT_EQ(error_of("l", "a\t", "1"), Error::kBadKey);
  EXPECT_EQ(error_of("l", "a\rb", "1"), Error::kBadKey);
  EXPECT_EQ(error_of("sr", " ", kHex), Error::kBadKey);
}

TEST(WireErrors, KeyMayHoldOtherBytes) {
  // Control characters, other ASCII whitespace, Unicode spaces and invalid UTF-8 all pass: only
  // space, \t, \r and \n are checked.
  for (std::string key :
       {std::string("a\x01\x7f"), std::string("a\vb\fc"),
        std::string("a\xc2\xa0"
                    "b"),
        std::string("\xff\xfe"), std::string("lock:k"), std::string("_"), std::string(1, '\0')}) {
    EXPECT_EQ(parsed("l", key, "1").key, key);
  }
}

TEST(WireErrors, KeyLineIsIgnoredForPingStatsAndAuth) {
  EXPECT_EQ(parsed("ping", "", ""), test::keyed_request(Command::kPing));
  EXPECT_EQ(parsed("ping", "any key at all", "and args"), test::keyed_request(Command::kPing));
  EXPECT_EQ(parsed("stats", "with space", "x y z"), test::keyed_request(Command::kStats));
  Request auth = test::keyed_request(Command::kAuth);
  auth.secret = "s";
  EXPECT_EQ(parsed("auth", "\t", "s"), auth);
}

// Code 4.
TEST(WireErrors, NonIntegerIsBadInteger) {
  for (std::string_view text : {"abc", "1.5", "1e3", "0x10", "--1", "+-1", "-+1", "+", "-", "1_000",
                                "١", "1a", "a1", "++1", "1-"}) {
    EXPECT_EQ(error_of("l", "k", text), Error::kBadInteger) << text;
  }
}

TEST(WireErrors, PlusSignAndLeadingZerosAreAccepted) {
  Request request = parsed("l", "k", "+10 +033");
  EXPECT_EQ(request.timeout_s, 10);
  EXPECT_EQ(request.lease_s, 33);
  EXPECT_EQ(parsed("w", "k", "-0").timeout_s, 0);
  EXPECT_EQ(parsed("w", "k", "0000000000000000000000000007").timeout_s, 7);
}

TEST(WireErrors, Int64OverflowIsBadIntegerNotOutOfRange) {
  EXPECT_EQ(error_of("l", "k", "9223372036854775807"), Error::kBadTimeout);
  EXPECT_EQ(error_of("l", "k", "9223372036854775808"), Error::kBadInteger);
  EXPECT_EQ(error_of("l", "k", "-9223372036854775808"), Error::kBadTimeout);
  EXPECT_EQ(error_of("l", "k", "-9223372036854775809"), Error::kBadInteger);
  EXPECT_EQ(error_of("l", "k", "99999999999999999999999"), Error::kBadInteger);
  EXPECT_EQ(error_of("l", "k", "1 9223372036854775807"), Error::kBadLease);
  EXPECT_EQ(error_of("l", "k", "1 18446744073709551616"), Error::kBadInteger);
  EXPECT_EQ(error_of("se", "k", "-9223372036854775808"), Error::kBadLimit);
}

// Code 6.
TEST(WireErrors, TimeoutBoundaries) {
  EXPECT_EQ(parsed("l", "k", "0").timeout_s, 0);
  EXPECT_EQ(parsed("l", "k", "9223372036").timeout_s, kMaxSeconds);
  EXPECT_EQ(error_of("l", "k", "9223372037"), Error::kBadTimeout);
  EXPECT_EQ(error_of("l", "k", "-1"), Error::kBadTimeout);
  EXPECT_EQ(error_of("sl", "k", "-1 2"), Error::kBadTimeout);
  EXPECT_EQ(error_of("w", "k", "-1"), Error::kBadTimeout);
  EXPECT_EQ(error_of("sw", "k", "9223372037"), Error::kBadTimeout);
}

// Code 7.
TEST(WireErrors, EmptyTokenForReleaseAndRenew) {
  for (std::string_view command : {"r", "sr", "n", "sn"}) {
    EXPECT_EQ(error_of(command, "k", ""), Error::kEmptyToken) << command;
    EXPECT_EQ(error_of(command, "k", " \t \v\f"), Error::kEmptyToken) << command;
    EXPECT_EQ(error_of(command, "k", "\xe3\x80\x80"), Error::kEmptyToken) << command;
    EXPECT_EQ(error_of(std::string(command) + "\r", "k\r", "\r"), Error::kEmptyToken);
  }
}

// Code 8.
TEST(WireErrors, FieldCountsOfLock) {
  EXPECT_EQ(error_of("l", "k", ""), Error::kBadArguments);
  EXPECT_EQ(error_of("l", "k", "   "), Error::kBadArguments);
  EXPECT_EQ(parsed("l", "k", "1").lease_s, 0);
  EXPECT_EQ(parsed("l", "k", "1 2").lease_s, 2);
  EXPECT_EQ(error_of("l", "k", "1 2 3"), Error::kBadArguments);
  EXPECT_EQ(error_of("l", "k", "x y z"), Error::kBadArguments);  // count before integers
}

TEST(WireErrors, FieldCountsOfSemLock) {
  EXPECT_EQ(error_of("sl", "k", ""), Error::kBadArguments);
  EXPECT_EQ(error_of("sl", "k", "1"), Error::kBadArguments);
  Request request = parsed("sl", "k", "1 2");
  EXPECT_EQ(request.timeout_s, 1);
  EXPECT_EQ(request.limit, 2);
  EXPECT_EQ(request.lease_s, 0);
  EXPECT_EQ(parsed("sl", "k", "1 2 3").lease_s, 3);
  EXPECT_EQ(error_of("sl", "k", "1 2 3 4"), Error::kBadArguments);
}

TEST(WireErrors, FieldCountsOfRenew) {
  for (std::string_view command : {"n", "sn"}) {
    Request request = parsed(command, "k", kHex);
    EXPECT_EQ(request.token, kToken);
    EXPECT_EQ(request.lease_s, 0);
    EXPECT_EQ(parsed(command, "k", std::string(kHex) + " 60").lease_s, 60);
    EXPECT_EQ(error_of(command, "k", std::string(kHex) + " 60 1"), Error::kBadArguments);
    EXPECT_EQ(error_of(command, "k", std::string(kHex) + " x"), Error::kBadInteger);
    EXPECT_EQ(error_of(command, "k", std::string(kHex) + " 0"), Error::kBadLease);
  }
}

TEST(WireErrors, FieldCountsOfEnqueue) {
  EXPECT_EQ(parsed("e", "k", ""), test::keyed_request(Command::kEnqueue, "k"));
  EXPECT_EQ(parsed("e", "k", " ").lease_s, 0);
  EXPECT_EQ(parsed("e", "k", "5").lease_s, 5);
  EXPECT_EQ(error_of("e", "k", "5 6"), Error::kBadArguments);  // rejected since v2.0
}

TEST(WireErrors, FieldCountsOfSemEnqueue) {
  EXPECT_EQ(error_of("se", "k", ""), Error::kBadArguments);
  Request request = parsed("se", "k", "3");
  EXPECT_EQ(request.limit, 3);
  EXPECT_EQ(request.lease_s, 0);
  EXPECT_EQ(parsed("se", "k", "3 4").lease_s, 4);
  EXPECT_EQ(error_of("se", "k", "3 4 5"), Error::kBadArguments);
}

TEST(WireErrors, FieldCountsOfWait) {
  for (std::string_view command : {"w", "sw"}) {
    EXPECT_EQ(error_of(command, "k", ""), Error::kBadArguments);
    EXPECT_EQ(parsed(command, "k", "5").timeout_s, 5);
    EXPECT_EQ(parsed(command, "k", "5").limit, 1);
    EXPECT_EQ(error_of(command, "k", "5 6"), Error::kBadArguments);
  }
}

TEST(WireErrors, ReleaseTakesTheWholeTrimmedLine) {
  for (std::string_view command : {"r", "sr"}) {
    EXPECT_EQ(parsed(command, "k", kHex).token, kToken);
    EXPECT_EQ(parsed(command, "k", "  " + std::string(kHex) + "\t ").token, kToken);
    // An inner space makes the token one that never matches; not a protocol error.
    EXPECT_EQ(parsed(command, "k", std::string(kHex) + " 60").token, std::nullopt);
  }
}

TEST(WireErrors, MalformedTokenIsNotAProtocolError) {
  std::string upper(kHex);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (std::string text : {std::string("abc"), upper, std::string(kHex) + "0",
                           std::string(kHex.substr(1)), std::string(31, 'g') + "0"}) {
    EXPECT_EQ(parsed("r", "k", text).token, std::nullopt) << text;
    EXPECT_EQ(parsed("n", "k", text).token, std::nullopt) << text;
  }
}

// Code 9.
TEST(WireErrors, LeaseBoundaries) {
  EXPECT_EQ(parsed("l", "k", "1 1").lease_s, 1);
  EXPECT_EQ(parsed("l", "k", "1 9223372036").lease_s, kMaxSeconds);
  EXPECT_EQ(error_of("l", "k", "1 0"), Error::kBadLease);
  EXPECT_EQ(error_of("l", "k", "1 -1"), Error::kBadLease);
  EXPECT_EQ(error_of("l", "k", "1 9223372037"), Error::kBadLease);
  EXPECT_EQ(error_of("e", "k", "0"), Error::kBadLease);
  EXPECT_EQ(error_of("sl", "k", "1 2 0"), Error::kBadLease);
  EXPECT_EQ(error_of("se", "k", "2 -5"), Error::kBadLease);
}

// Code 13.
TEST(WireErrors, LimitBoundaries) {
  EXPECT_EQ(parsed("sl", "k", "1 1").limit, 1);
  EXPECT_EQ(parsed("sl", "k", "1 1048576").limit, kMaxSemaphoreLimit);
  EXPECT_EQ(error_of("sl", "k", "1 1048577"), Error::kBadLimit);
  EXPECT_EQ(error_of("sl", "k", "1 0"), Error::kBadLimit);
  EXPECT_EQ(error_of("sl", "k", "1 -3"), Error::kBadLimit);
  EXPECT_EQ(parsed("se", "k", "1048576").limit, kMaxSemaphoreLimit);
  EXPECT_EQ(error_of("se", "k", "0"), Error::kBadLimit);
  EXPECT_EQ(error_of("se", "k", "1048577 5"), Error::kBadLimit);
}

TEST(WireErrors, LocksHaveLimitOne) {
  EXPECT_EQ(parsed("l", "k", "1").limit, 1);
  EXPECT_EQ(parsed("e", "k", "").limit, 1);
}

TEST(WireErrors, FieldsAreCheckedLeftToRight) {
  EXPECT_EQ(error_of("l", "k", "-1 x"), Error::kBadTimeout);
  EXPECT_EQ(error_of("l", "k", "x -1"), Error::kBadInteger);
  EXPECT_EQ(error_of("l", "k", "1 x"), Error::kBadInteger);
  EXPECT_EQ(error_of("sl", "k", "-1 0 0"), Error::kBadTimeout);
  EXPECT_EQ(error_of("sl", "k", "1 0 0"), Error::kBadLimit);
  EXPECT_EQ(error_of("sl", "k", "1 x 0"), Error::kBadInteger);
  EXPECT_EQ(error_of("sl", "k", "1 2 0"), Error::kBadLease);
  EXPECT_EQ(error_of("se", "k", "0 0"), Error::kBadLimit);
  EXPECT_EQ(error_of("se", "k", "2 0"), Error::kBadLease);
}

// ---- Arguments: whitespace (1.3) ----------------------------------------------------------------

TEST(WireArguments, AsciiWhitespaceRunsSplitFields) {
  Request request = parsed("l", "k", " \t10 \v\f \r 33\t ");
  EXPECT_EQ(request.timeout_s, 10);
  EXPECT_EQ(request.lease_s, 33);
}

TEST(WireArguments, EveryUnicodeSpaceSplitsFields) {
  const std::vector<std::string> spaces = {
      "\xc2\x85",     "\xc2\xa0",     "\xe1\x9a\x80", "\xe2\x80\x80", "\xe2\x80\x81",
      "\xe2\x80\x82", "\xe2\x80\x83", "\xe2\x80\x84", "\xe2\x80\x85", "\xe2\x80\x86",
      "\xe2\x80\x87", "\xe2\x80\x88", "\xe2\x80\x89", "\xe2\x80\x8a", "\xe2\x80\xa8",
      "\xe2\x80\xa9", "\xe2\x80\xaf", "\xe2\x81\x9f", "\xe3\x80\x80"};
  for (const std::string& space : spaces) {
    Request request = parsed("l", "k", space + "10" + space + space + "33" + space);
    EXPECT_EQ(request.timeout_s, 10) << testing::PrintToString(space);
    EXPECT_EQ(request.lease_s, 33) << testing::PrintToString(space);
    // The trimmed token line of r loses them too.
    EXPECT_EQ(parsed("r", "k", space + std::string(kHex) + space).token, kToken);
  }
}

TEST(WireArguments, OtherUnicodeAndInvalidUtf8AreNotSpaces) {
  // U+200B ZERO WIDTH SPACE and U+180E are not White_Space; neighbours of real spaces are not
  // either; truncated and stray bytes are invalid UTF-8, never spaces.
  for (std::string not_space :
       {std::string("\xe2\x80\x8b"), std::string("\xe1\xa0\x8e"), std::string("\xe2\x80\x8c"),
        std::string("\xe2\x80\xb0"), std::string("\xe2\x81\xa0"), std::string("\xc2\xa1"),
        std::string("\xc2"), std::string("\xe2\x80"), std::string("\xa0"), std::string("\x85"),
        std::string("\xc0\xa0")}) {
    EXPECT_EQ(error_of("l", "k", "10" + not_space + "33"), Error::kBadInteger)
        << testing::PrintToString(not_space);
    EXPECT_EQ(error_of("l", "k", not_space), Error::kBadInteger)
        << testing::PrintToString(not_space);
  }
}

TEST(WireArguments, SpaceAfterAnInvalidLeadByteStillCounts) {
  // Go decodes "\xe2" + "\xc2\xa0" as an invalid byte then U+00A0, so the split happens.
  Request request = parsed("n", "k",
                           std::string(kHex) +
                               "\xe2\xc2\xa0"
                               "5");
  EXPECT_EQ(request.token, std::nullopt);  // the token field ends in the stray \xe2
  EXPECT_EQ(request.lease_s, 5);
}

TEST(WireArguments, AuthSecretIsTrimmed) {
  Request request = parsed("auth", "_",
                           " \t s e\xc2\xa0"
                           "cret \xe3\x80\x80");
  EXPECT_EQ(request.secret,
            "s e\xc2\xa0"
            "cret");
  EXPECT_EQ(parsed("auth", "_", "").secret, "");
  EXPECT_EQ(parsed("auth", "_", "   ").secret, "");
}

TEST(WireArguments, PingAndStatsIgnoreTheirArgument) {
  EXPECT_EQ(parsed("ping", "_", "1 2 3 4"), test::keyed_request(Command::kPing));
  EXPECT_EQ(parsed("stats", "_", "_"), test::keyed_request(Command::kStats));
}

// ---- Encoders -----------------------------------------------------------------------------------

std::string reply_text(const Reply& reply) {
  std::string out;
  encode_reply(reply, out);
  return out;
}

std::string request_wire(const Request& request) {
  std::string out;
  encode_request(request, out);
  return out;
}

TEST(WireEncode, StatusOnlyReplies) {
  EXPECT_EQ(reply_text(Reply::of(Status::kOk)), "ok\n");
  EXPECT_EQ(reply_text(Reply::of(Status::kQueued)), "queued\n");
  EXPECT_EQ(reply_text(Reply::of(Status::kTimeout)), "timeout\n");
  EXPECT_EQ(reply_text(Reply::of(Status::kError)), "error\n");
  EXPECT_EQ(reply_text(Reply::of(Status::kErrorAuth)), "error_auth\n");
  EXPECT_EQ(reply_text(Reply::of(Status::kErrorMaxLocks)), "error_max_locks\n");
  EXPECT_EQ(reply_text(Reply::of(Status::kErrorMaxWaiters)), "error_max_waiters\n");
  EXPECT_EQ(reply_text(Reply::of(Status::kErrorLimitMismatch)), "error_limit_mismatch\n");
  EXPECT_EQ(reply_text(Reply::of(Status::kErrorNotEnqueued)), "error_not_enqueued\n");
  EXPECT_EQ(reply_text(Reply::of(Status::kErrorAlreadyEnqueued)), "error_already_enqueued\n");
  EXPECT_EQ(reply_text(Reply::of(Status::kErrorLeaseExpired)), "error_lease_expired\n");
  EXPECT_EQ(reply_text(Reply::of(Status::kErrorDraining)), "error_draining\n");
}

TEST(WireEncode, GrantReplies) {
  EXPECT_EQ(reply_text(Reply::granted(Status::kOk, kToken, 33)),
            "ok 0006a1b2c3d4e5f6a7b8c9d0e1f2a3b4 33\n");
  EXPECT_EQ(reply_text(Reply::granted(Status::kAcquired, kToken, 9223372036)),
            "acquired 0006a1b2c3d4e5f6a7b8c9d0e1f2a3b4 9223372036\n");
  EXPECT_EQ(reply_text(Reply::granted(Status::kOk, Token{}, 1)),
            "ok 00000000000000000000000000000000 1\n");
}

TEST(WireEncode, RenewAndStatsReplies) {
  EXPECT_EQ(reply_text(Reply::renewed(60)), "ok 60\n");
  EXPECT_EQ(reply_text(Reply::renewed(0)), "ok 0\n");
  EXPECT_EQ(reply_text(Reply::stats("{\"connections\":1}")), "ok {\"connections\":1}\n");
}

TEST(WireEncode, ReplyIsAppended) {
  std::string out = "queued\n";
  encode_reply(Reply::of(Status::kOk), out);
  EXPECT_EQ(out, "queued\nok\n");
}

TEST(WireEncodeDeathTest, ParkedIsNeverEncoded) {
  std::string out;
  EXPECT_DEATH(encode_reply(Reply::parked(), out), "assertion failed");
}

TEST(WireEncode, CanonicalRequestForms) {
  Request lock = test::keyed_request(Command::kLock, "k");
  lock.timeout_s = 10;
  EXPECT_EQ(request_wire(lock), "l\nk\n10\n");
  lock.lease_s = 33;
  EXPECT_EQ(request_wire(lock), "l\nk\n10 33\n");

  Request sem_lock = test::keyed_request(Command::kSemLock, "s");
  sem_lock.timeout_s = 0;
  sem_lock.limit = 3;
  EXPECT_EQ(request_wire(sem_lock), "sl\ns\n0 3\n");
  sem_lock.lease_s = 5;
  EXPECT_EQ(request_wire(sem_lock), "sl\ns\n0 3 5\n");

  for (Command command : {Command::kRenew, Command::kSemRenew}) {
    Request renew = test::keyed_request(command, "k");
    renew.token = kToken;
    EXPECT_EQ(request_wire(renew),
              std::string(command_name(command)) + "\nk\n" + std::string(kHex) + "\n");
    renew.lease_s = 60;
    EXPECT_EQ(request_wire(renew),
              std::string(command_name(command)) + "\nk\n" + std::string(kHex) + " 60\n");
  }
  for (Command command : {Command::kRelease, Command::kSemRelease}) {
    Request release = test::keyed_request(command, "k");
    release.token = kToken;
    release.lease_s = 60;  // not part of a release
    EXPECT_EQ(request_wire(release),
              std::string(command_name(command)) + "\nk\n" + std::string(kHex) + "\n");
  }

  Request enqueue = test::keyed_request(Command::kEnqueue, "k");
  EXPECT_EQ(request_wire(enqueue), "e\nk\n\n");
  enqueue.lease_s = 7;
  EXPECT_EQ(request_wire(enqueue), "e\nk\n7\n");

  Request sem_enqueue = test::keyed_request(Command::kSemEnqueue, "k");
  sem_enqueue.limit = 4;
  EXPECT_EQ(request_wire(sem_enqueue), "se\nk\n4\n");
  sem_enqueue.lease_s = 8;
  EXPECT_EQ(request_wire(sem_enqueue), "se\nk\n4 8\n");

  for (Command command : {Command::kWait, Command::kSemWait}) {
    Request wait = test::keyed_request(command, "k");
    wait.timeout_s = 12;
    EXPECT_EQ(request_wire(wait), std::string(command_name(command)) + "\nk\n12\n");
  }

  EXPECT_EQ(request_wire(test::keyed_request(Command::kPing)), "ping\n_\n\n");
  EXPECT_EQ(request_wire(test::keyed_request(Command::kStats)), "stats\n_\n\n");
  Request auth = test::keyed_request(Command::kAuth);
  auth.secret = "hunter2";
  EXPECT_EQ(request_wire(auth), "auth\n_\nhunter2\n");
}

// The default kind (lock) is left out, so the encoding of a check or inspect that arrived under
// a tight line cap fits under that cap again (found by fuzz_wire).
TEST(WireEncode, CheckAndInspectLeaveOutTheDefaultKind) {
  Request check = test::keyed_request(Command::kCheck, "k");
  check.token = Token::parse("0006a1b2c3d4e5f6a7b8c9d0e1f2a3b4");
  EXPECT_EQ(request_wire(check), "check\nk\n0006a1b2c3d4e5f6a7b8c9d0e1f2a3b4\n");
  check.space = Namespace::kSemaphore;
  EXPECT_EQ(request_wire(check), "check\nk\n0006a1b2c3d4e5f6a7b8c9d0e1f2a3b4 sem\n");

  Request inspect = test::keyed_request(Command::kInspect, "k");
  EXPECT_EQ(request_wire(inspect), "inspect\nk\n\n");
  inspect.space = Namespace::kReadWrite;
  EXPECT_EQ(request_wire(inspect), "inspect\nk\nrw\n");

  // Parsed under a cap that the longer form would exceed, and encoded to bytes that parse again.
  RequestParser parser(RequestParser::Limits{.line_max = 34, .long_line_max = 28});
  std::optional<ParseResult> parsed;
  const std::string wire = "check\nk\n0006a1b2c3d4e5f6a7b8c9d0e1f2a3b4\n";
  ASSERT_EQ(parser.parse(wire, parsed), wire.size());
  ASSERT_TRUE(parsed && parsed->ok());
  EXPECT_EQ(request_wire(parsed->request), wire);
}

TEST(WireEncodeDeathTest, TokenCommandWithoutTokenIsNotEncoded) {
  std::string out;
  EXPECT_DEATH(encode_request(test::keyed_request(Command::kRelease, "k"), out),
               "assertion failed");
  EXPECT_DEATH(encode_request(test::keyed_request(Command::kSemRenew, "k"), out),
               "assertion failed");
}

// ---- Reference 1.9 example exchanges ------------------------------------------------------------

TEST(WireReference, ExampleExchanges) {
  Request lock = parsed("l", "k", "10");
  EXPECT_EQ(lock.command, Command::kLock);
  EXPECT_EQ(lock.timeout_s, 10);
  EXPECT_EQ(lock.lease_s, 0);  // the server default (33 s) is applied by the engine
  EXPECT_EQ(reply_text(Reply::granted(Status::kOk, kToken, 33)),
            "ok 0006a1b2c3d4e5f6a7b8c9d0e1f2a3b4 33\n");

  Request renew = parse_one("n\nk\n" + std::string(kHex) + " 60\n").request;
  EXPECT_EQ(renew.command, Command::kRenew);
  EXPECT_EQ(renew.token, kToken);
  EXPECT_EQ(renew.lease_s, 60);
  EXPECT_EQ(reply_text(Reply::renewed(60)), "ok 60\n");

  Request release = parse_one("r\nk\n" + std::string(kHex) + "\n").request;
  EXPECT_EQ(release.command, Command::kRelease);
  EXPECT_EQ(release.token, kToken);
  EXPECT_EQ(reply_text(Reply::of(Status::kOk)), "ok\n");

  EXPECT_EQ(parse_one("e\nk\n\n").request, test::keyed_request(Command::kEnqueue, "k"));
  EXPECT_EQ(reply_text(Reply::of(Status::kQueued)), "queued\n");
  EXPECT_EQ(reply_text(Reply::granted(Status::kAcquired, kToken, 33)),
            "acquired 0006a1b2c3d4e5f6a7b8c9d0e1f2a3b4 33\n");

  Request wait = parse_one("w\nk\n10\n").request;
  EXPECT_EQ(wait.command, Command::kWait);
  EXPECT_EQ(wait.timeout_s, 10);

  EXPECT_EQ(parse_one("stats\n_\n\n").request, test::keyed_request(Command::kStats));
  // dflockd's line plus turnstile's "truncated" field at the end.
  EXPECT_EQ(reply_text(Reply::stats(encode_stats_json(1, StatsSnapshot{}))),
            "ok {\"connections\":1,\"locks\":[],\"semaphores\":[],\"idle_locks\":[],"
            "\"idle_semaphores\":[],\"truncated\":false}\n");
}

// ---- Properties ---------------------------------------------------------------------------------

rc::Gen<char> key_byte() {
  return rc::gen::suchThat(
      rc::gen::map(rc::gen::inRange(0, 256), [](int b) { return static_cast<char>(b); }),
      [](char c) { return c != ' ' && c != '\t' && c != '\r' && c != '\n'; });
}

std::string random_key() {
  const auto length =
      *rc::gen::oneOf(rc::gen::inRange<std::size_t>(1, 16), rc::gen::inRange<std::size_t>(1, 257));
  return *rc::gen::container<std::string>(length, key_byte());
}

std::int64_t random_in(std::int64_t min, std::int64_t max) {
  return *rc::gen::oneOf(rc::gen::element(min, max), rc::gen::inRange(min, max + 1),
                         rc::gen::inRange(min, std::min(max, min + 100) + 1));
}

Token random_token() {
  return Token{Fence{*rc::gen::arbitrary<std::uint64_t>()}, *rc::gen::arbitrary<std::uint64_t>()};
}

std::string random_secret() {
  const auto length = *rc::gen::oneOf(rc::gen::inRange<std::size_t>(0, 20),
                                      rc::gen::inRange<std::size_t>(200, 3000));
  std::string secret = *rc::gen::container<std::string>(
      length, rc::gen::oneOf(rc::gen::inRange('!', '\x7f'), rc::gen::element(' ', '\t')));
  const std::size_t begin = secret.find_first_not_of(" \t");
  if (begin == std::string::npos) return {};
  return secret.substr(begin, secret.find_last_not_of(" \t") + 1 - begin);
}

// A valid signal channel, or with `pattern` a listen pattern: 1 to 4 tokens.
std::string random_signal_name(bool pattern) {
  const std::size_t tokens = *rc::gen::inRange<std::size_t>(1, 5);
  std::string name;
  for (std::size_t i = 0; i < tokens; ++i) {
    if (i > 0) name.push_back('.');
    const int kind = pattern ? *rc::gen::inRange(0, 4) : 0;
    if (kind == 1) {
      name.push_back('*');
    } else if (kind == 2 && i + 1 == tokens) {
      name.push_back('>');
    } else {
      name += *rc::gen::container<std::string>(*rc::gen::inRange<std::size_t>(1, 6),
                                               rc::gen::inRange('a', 'e'));
    }
  }
  return name;
}

// Text as the parser leaves a trimmed argument line: printable, no space at either end.
std::string random_trimmed_text(std::size_t min, std::size_t max) {
  const auto length = *rc::gen::inRange<std::size_t>(min, max + 1);
  std::string text = *rc::gen::container<std::string>(
      length, rc::gen::oneOf(rc::gen::inRange('!', '\x7f'), rc::gen::just(' ')));
  if (!text.empty()) {
    text.front() = 'x';
    text.back() = 'y';
  }
  return text;
}

// A request exactly as the parser would produce it: fields a command does not carry keep their
// defaults.
Request random_valid_request() {
  Request request;
  request.command = *rc::gen::elementOf(kAllCommands);
  if (is_engine_command(request.command) && request.command != Command::kBarrier) {
    request.key = random_key();
  }
  const auto maybe_lease = [] {
    return *rc::gen::element(true, false) ? random_in(1, kMaxSeconds) : std::int64_t{0};
  };
  switch (request.command) {
    case Command::kLock:
    case Command::kReadLock:
    case Command::kWriteLock:
      request.timeout_s = random_in(0, kMaxSeconds);
      request.lease_s = maybe_lease();
      break;
    case Command::kSemLock:
      request.timeout_s = random_in(0, kMaxSeconds);
      request.limit = random_in(1, kMaxSemaphoreLimit);
      request.lease_s = maybe_lease();
      break;
    case Command::kRelease:
    case Command::kSemRelease:
    case Command::kReadRelease:
    case Command::kWriteRelease:
      request.token = random_token();
      break;
    case Command::kRenew:
    case Command::kSemRenew:
    case Command::kReadRenew:
    case Command::kWriteRenew:
      request.token = random_token();
      request.lease_s = maybe_lease();
      break;
    case Command::kEnqueue:
    case Command::kReadEnqueue:
    case Command::kWriteEnqueue:
      request.lease_s = maybe_lease();
      break;
    case Command::kSemEnqueue:
      request.limit = random_in(1, kMaxSemaphoreLimit);
      request.lease_s = maybe_lease();
      break;
    case Command::kWait:
    case Command::kSemWait:
    case Command::kReadWait:
    case Command::kWriteWait:
      request.timeout_s = random_in(0, kMaxSeconds);
      break;
    case Command::kPing:
    case Command::kStats:
    case Command::kBarrier:
      break;
    case Command::kAuth:
      request.secret = random_secret();
      break;
    case Command::kStableRef:
      request.ref = *rc::gen::container<std::string>(*rc::gen::inRange<std::size_t>(1, 65),
                                                     rc::gen::inRange(' ', '\x7f'));
      break;
    case Command::kListen:
    case Command::kUnlisten:
      request.key = random_signal_name(true);
      request.text = random_trimmed_text(0, 40);
      break;
    case Command::kSignal:
    case Command::kSignalPeer:
      request.key = random_signal_name(false);
      request.text = random_trimmed_text(1, 3000);
      break;
    case Command::kCheck:
      request.token = random_token();
      request.space =
          *rc::gen::element(Namespace::kLock, Namespace::kSemaphore, Namespace::kReadWrite);
      break;
    case Command::kInspect:
      request.space =
          *rc::gen::element(Namespace::kLock, Namespace::kSemaphore, Namespace::kReadWrite);
      break;
    case Command::kLostNotify:
      request.enable = *rc::gen::arbitrary<bool>();
      break;
    case Command::kForceRelease:
      break;  // not in kAllCommands
  }
  return request;
}

// Short lines over an alphabet that reaches every validation branch, for requests that are
// framed correctly but fail validation.
std::string random_short_line() {
  return *rc::gen::container<std::string>(
      *rc::gen::inRange<std::size_t>(0, 12),
      rc::gen::element('l', 's', 'n', 'r', 'e', 'w', 'x', ' ', '\t', '\r', '1', '0', '-', '+', 'a',
                       '\xc2', '\xa0', '\xe3', '\x80'));
}

// A stream of well-framed requests: valid ones, ones that fail validation, CRLF variants.
std::string random_stream() {
  std::string stream;
  const auto count = *rc::gen::inRange(0, 30);
  for (int i = 0; i < count; ++i) {
    std::string one;
    if (*rc::gen::inRange(0, 4) != 0) {
      encode_request(random_valid_request(), one);
    } else {
      one = request_text(random_short_line(), random_short_line(), random_short_line());
    }
    // CRLF adds a byte to every line, and the '\r' counts toward the cap: a request whose
    // longest line is already at the cap would no longer be well framed, so it stays LF.
    std::size_t longest_line = 0;
    for (std::size_t start = 0, end; (end = one.find('\n', start)) != std::string::npos;
         start = end + 1) {
      longest_line = std::max(longest_line, end - start);
    }
    if (longest_line < RequestParser::Limits{}.line_max && *rc::gen::inRange(0, 5) == 0) {
      std::string crlf;
      for (char c : one) {
        if (c == '\n') crlf.push_back('\r');
        crlf.push_back(c);
      }
      one = std::move(crlf);
    }
    stream += one;
  }
  return stream;
}

// Feeds `stream` in chunks of random sizes, checking the buffer bound after every call.
std::vector<ParseResult> parse_chunked(RequestParser& parser, std::string_view stream,
                                       std::size_t buffered_max) {
  std::vector<ParseResult> results;
  const auto sizes = *rc::gen::container<std::vector<std::size_t>>(
      rc::gen::oneOf(rc::gen::inRange<std::size_t>(1, 4), rc::gen::inRange<std::size_t>(1, 400)));
  std::size_t next_size = 0;
  while (!stream.empty()) {
    const std::size_t size =
        next_size < sizes.size() ? std::min(sizes[next_size++], stream.size()) : stream.size();
    std::string_view chunk = stream.substr(0, size);
    stream.remove_prefix(size);
    while (!chunk.empty()) {
      std::optional<ParseResult> out;
      const std::size_t used = parser.parse(chunk, out);
      RC_ASSERT(used <= chunk.size());
      RC_ASSERT(parser.buffered_bytes() <= buffered_max);
      chunk.remove_prefix(used);
      if (out) {
        results.push_back(std::move(*out));
      } else {
        RC_ASSERT(chunk.empty());
      }
    }
  }
  return results;
}

constexpr std::size_t kSlack = 16;

RC_GTEST_PROP(WireProperties, AnyChunkingGivesTheSameResultsAsWhole, ()) {
  const std::string stream = random_stream();
  RequestParser whole_parser;
  const std::vector<ParseResult> whole = parse_all(whole_parser, stream);
  RequestParser parser;
  const RequestParser::Limits limits;
  const std::vector<ParseResult> chunked =
      parse_chunked(parser, stream, limits.long_line_max + 2 * limits.line_max + kSlack);
  RC_ASSERT(same_results(whole, chunked));
  RC_ASSERT(!parser.mid_request());
}

RC_GTEST_PROP(WireProperties, EncodedRequestParsesBackToItself, ()) {
  const Request request = random_valid_request();
  std::string wire;
  encode_request(request, wire);
  RequestParser parser;
  std::optional<ParseResult> out;
  RC_ASSERT(parser.parse(wire, out) == wire.size());
  RC_ASSERT(out.has_value());
  RC_ASSERT(out->error == Error::kNone);
  RC_ASSERT(out->request == request);
}

RC_GTEST_PROP(WireProperties, RandomBytesNeverBreakTheParser, ()) {
  // Small limits make over-long lines (and the auth cap) common; random bytes with many
  // newlines mix complete, failing and over-long requests. Chunked must still equal whole.
  const bool small = *rc::gen::arbitrary<bool>();
  const RequestParser::Limits limits =
      small ? RequestParser::Limits{.line_max = 8, .long_line_max = 40} : RequestParser::Limits{};
  const std::string stream = *rc::gen::container<std::string>(rc::gen::oneOf(
      rc::gen::arbitrary<char>(), rc::gen::element('\n', '\r', ' ', 'l', 's', 'a', 'u', 't', 'h')));
  std::string with_auth = stream;
  if (*rc::gen::arbitrary<bool>()) with_auth = "auth\n_\n" + stream;

  RequestParser whole_parser(limits);
  const std::vector<ParseResult> whole = parse_all(whole_parser, with_auth);
  RequestParser parser(limits);
  const std::vector<ParseResult> chunked =
      parse_chunked(parser, with_auth, limits.long_line_max + 2 * limits.line_max + kSlack);
  RC_ASSERT(same_results(whole, chunked));
  RC_ASSERT(whole_parser.mid_request() == parser.mid_request());
  RC_ASSERT(whole_parser.buffered_bytes() == parser.buffered_bytes());
}

}  // namespace
// ---- the key rule and the reply decoder -----------------------------------------------------

TEST(KeyRule, OneRuleForTheWireHttpAndTheClient) {
  EXPECT_EQ(key_problem("build-job"), std::nullopt);
  EXPECT_EQ(key_problem(std::string(256, 'k')), std::nullopt);
  EXPECT_EQ(key_problem(std::string("a\0b\xff\v", 5)), std::nullopt);  // any other byte
  EXPECT_EQ(key_problem(""), "key is empty");
  EXPECT_EQ(key_problem(std::string(257, 'k')), "key is longer than 256 bytes");
  for (const char* bad : {"a b", "a\tb", "a\rb", "a\nb"}) {
    EXPECT_EQ(key_problem(bad), "key contains whitespace (a space, tab, CR or LF)") << bad;
  }
}

TEST(ReplyDecoder, InvertsTheEncoderForEveryReplyShape) {
  const Token token = *Token::parse("0123456789abcdef0123456789abcdef");
  const std::pair<Command, Reply> cases[] = {
      {Command::kLock, Reply::granted(Status::kOk, token, 33)},
      {Command::kSemWait, Reply::granted(Status::kOk, token, 0)},
      {Command::kEnqueue, Reply::granted(Status::kAcquired, token, 5)},
      {Command::kSemEnqueue, Reply::of(Status::kQueued)},
      {Command::kRenew, Reply::renewed(60)},
      {Command::kRelease, Reply::of(Status::kOk)},
      {Command::kPing, Reply::of(Status::kOk)},
      {Command::kStats, Reply::stats(R"({"connections":1,"locks":[]})")},
      {Command::kLock, Reply::of(Status::kTimeout)},
      {Command::kWait, Reply::of(Status::kErrorNotEnqueued)},
      {Command::kSemLock, Reply::of(Status::kErrorLimitMismatch)},
      {Command::kRelease, Reply::of(Status::kError)},
      {Command::kPing, Reply::of(Status::kErrorDraining)},
      {Command::kLock, Reply::not_leader("10.0.0.2:6388")},
      {Command::kRelease, Reply::not_leader("[::1]:6389")},
      {Command::kEnqueue, Reply::not_leader("")},  // no leader known: the status alone
  };
  for (const auto& [command, reply] : cases) {
    std::string line;
    encode_reply(reply, line);
    line.pop_back();  // its '\n'
    const std::optional<Reply> decoded = decode_reply(command, line);
    ASSERT_TRUE(decoded.has_value()) << line;
    EXPECT_EQ(*decoded, reply) << line;
  }
}

TEST(ReplyEncoder, NotLeaderNamesTheLeaderWhenOneIsKnown) {
  std::string line;
  encode_reply(Reply::not_leader("10.0.0.2:6388"), line);
  EXPECT_EQ(line, "error_not_leader 10.0.0.2:6388\n");
  line.clear();
  encode_reply(Reply::not_leader(""), line);
  EXPECT_EQ(line, "error_not_leader\n");
}

TEST(ReplyDecoder, RefusesWhatTheCommandCannotGet) {
  const std::string grant = "ok 0123456789abcdef0123456789abcdef 33";
  EXPECT_EQ(decode_reply(Command::kRelease, grant), std::nullopt);
  EXPECT_EQ(decode_reply(Command::kLock, "ok"), std::nullopt);  // a grant carries its token
  EXPECT_EQ(decode_reply(Command::kRenew, "ok"), std::nullopt);
  EXPECT_EQ(decode_reply(Command::kRenew, "ok -1"), std::nullopt);
  EXPECT_EQ(decode_reply(Command::kRenew, "ok 1x"), std::nullopt);
  EXPECT_EQ(decode_reply(Command::kLock, "ok 0123 33"), std::nullopt);  // not a token
  EXPECT_EQ(decode_reply(Command::kLock, grant + " extra"), std::nullopt);
  EXPECT_EQ(decode_reply(Command::kEnqueue, "acquired"), std::nullopt);
  EXPECT_EQ(decode_reply(Command::kLock, "acquired 0123456789abcdef0123456789abcdef 3"),
            std::nullopt);
  EXPECT_EQ(decode_reply(Command::kStats, "ok"), std::nullopt);
  EXPECT_EQ(decode_reply(Command::kLock, "error_unheard_of"), std::nullopt);
  EXPECT_EQ(decode_reply(Command::kLock, "parked"), std::nullopt);  // never on the wire
  EXPECT_EQ(decode_reply(Command::kLock, ""), std::nullopt);
}

}  // namespace turnstile::core

namespace turnstile::core {
namespace {

// The wire reads a request's numbers with the one rule (timeout_in_bounds and friends): at each
// edge it accepts what the rule accepts, a given lease of 0 being the wire's one extra refusal.
TEST(RequestBounds, TheWireFollowsTheOneRuleAtEveryEdge) {
  for (const std::int64_t s :
       {std::int64_t{-1}, std::int64_t{0}, std::int64_t{1}, kMaxSeconds, kMaxSeconds + 1}) {
    const std::string n = std::to_string(s);
    EXPECT_EQ(error_of("l", "k", n) == Error::kNone, timeout_in_bounds(s)) << s;
    EXPECT_EQ(error_of("l", "k", "0 " + n) == Error::kNone, s != 0 && lease_in_bounds(s)) << s;
  }
  for (const std::int64_t limit :
       {std::int64_t{0}, std::int64_t{1}, kMaxSemaphoreLimit, kMaxSemaphoreLimit + 1}) {
    EXPECT_EQ(error_of("sl", "k", "0 " + std::to_string(limit)) == Error::kNone,
              limit_in_bounds(limit))
        << limit;
  }
  static_assert(timeout_in_bounds(0) && !timeout_in_bounds(-1) &&
                !timeout_in_bounds(kMaxSeconds + 1));
  static_assert(lease_in_bounds(0) && lease_in_bounds(kMaxSeconds) && !lease_in_bounds(-1));
  static_assert(!limit_in_bounds(0) && limit_in_bounds(kMaxSemaphoreLimit));
}

}  // namespace
}  // namespace turnstile::core
