// Unit tests for net/config.h: turnstiled's flags and environment (reference section 4,
// compatibility.md sections 1 and 2, edge cases 7, 11, 23 and 31).
#include "net/config.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace turnstile::net {
namespace {

using Env = std::map<std::string, std::string>;

constexpr std::int64_t kMaxSeconds = 9'223'372'036;
constexpr std::int64_t kI64Max = std::numeric_limits<std::int64_t>::max();

EnvLookup lookup_in(Env env) {
  return [env = std::move(env)](const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

ConfigResult parse(const std::vector<std::string>& args, const Env& env = {}, int cores = 4) {
  return parse_config(args, lookup_in(env), cores);
}

// The Config a successful parse produced; fails the test (and returns defaults) otherwise.
Config ok(const ConfigResult& result) {
  if (const auto* exit = std::get_if<ConfigExit>(&result)) {
    ADD_FAILURE() << "expected a config, got exit " << exit->code << ": " << exit->message;
    return Config{};
  }
  return std::get<Config>(result);
}

// The message of a code-2 exit; checks it is one line starting with the program name.
std::string error(const ConfigResult& result) {
  const auto* exit = std::get_if<ConfigExit>(&result);
  if (exit == nullptr) {
    ADD_FAILURE() << "expected an error, got a config";
    return "";
  }
  EXPECT_EQ(exit->code, 2);
  EXPECT_EQ(exit->message.find('\n'), std::string::npos) << exit->message;
  EXPECT_EQ(exit->message.rfind("turnstiled: ", 0), 0U) << exit->message;
  return exit->message;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A directory under /tmp for token files, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = "/tmp/turnstile_config_test_XXXXXX";
    const char* made = mkdtemp(pattern.data());
    EXPECT_NE(made, nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string write(const std::string& name, const std::string& contents) const {
    const std::string file = path_ + "/" + name;
    std::ofstream out(file, std::ios::binary);
    out << contents;
    return file;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// ---- defaults -------------------------------------------------------------------------------

TEST(ConfigDefaults, MatchTheReferenceWithTurnstileDifferences) {
  const Config config = ok(parse({}));
  EXPECT_EQ(config.host, "127.0.0.1");
  EXPECT_EQ(config.port, 6388);
  EXPECT_EQ(config.threads, 4);
  EXPECT_EQ(config.idle_poll_us, 100);
  EXPECT_FALSE(config.pin_threads);
  EXPECT_TRUE(config.huge_pages);
  EXPECT_EQ(config.default_lease_ttl_s, 33);
  EXPECT_EQ(config.lease_sweep_interval_s, 1);
  EXPECT_EQ(config.gc_interval_s, 5);
  EXPECT_EQ(config.gc_max_idle_s, 60);
  EXPECT_EQ(config.max_locks, 1'048'576);
  EXPECT_EQ(config.max_waiters, 0);
  EXPECT_EQ(config.max_connections, 0);
  EXPECT_EQ(config.max_connections_per_ip, 0);
  EXPECT_EQ(config.read_timeout_s, 23);
  EXPECT_EQ(config.idle_timeout_s, 0);
  EXPECT_EQ(config.write_timeout_s, 5);
  EXPECT_EQ(config.shutdown_timeout_s, 30);
  EXPECT_TRUE(config.auto_release_on_disconnect);
  EXPECT_EQ(config.tls_cert, "");
  EXPECT_EQ(config.tls_key, "");
  EXPECT_FALSE(config.auth_token.has_value());
  EXPECT_FALSE(config.debug);
  EXPECT_FALSE(config.cluster.enabled());
}

TEST(ConfigDefaults, ThreadsDefaultToCoresClampedToOneAnd1024) {
  EXPECT_EQ(ok(parse({}, {}, 1)).threads, 1);
  EXPECT_EQ(ok(parse({}, {}, 0)).threads, 1);
  EXPECT_EQ(ok(parse({}, {}, -3)).threads, 1);
  EXPECT_EQ(ok(parse({}, {}, 64)).threads, 64);
  EXPECT_EQ(ok(parse({}, {}, 5000)).threads, 1024);
}

// ---- integer flags: every flag's boundaries, from the flag and from both env names ----------

struct IntegerFlag {
  std::string flag;
  std::string env;  // after TURNSTILE_ / DFLOCKD_
  std::int64_t min;
  std::int64_t max;
  std::int64_t Config::*field64;
  int Config::*field32;
};

std::int64_t read_field(const Config& config, const IntegerFlag& flag) {
  return flag.field64 != nullptr ? config.*flag.field64 : config.*flag.field32;
}

const IntegerFlag kIntegerFlags[] = {
    {"port", "PORT", 0, 65535, nullptr, &Config::port},
    {"threads", "THREADS", 1, 1024, nullptr, &Config::threads},
    {"default-lease-ttl", "DEFAULT_LEASE_TTL_S", 1, kMaxSeconds, &Config::default_lease_ttl_s,
     nullptr},
    {"lease-sweep-interval", "LEASE_SWEEP_INTERVAL_S", 1, kMaxSeconds,
     &Config::lease_sweep_interval_s, nullptr},
    {"gc-interval", "GC_INTERVAL_S", 1, kMaxSeconds, &Config::gc_interval_s, nullptr},
    {"gc-max-idle", "GC_MAX_IDLE_S", 0, kMaxSeconds, &Config::gc_max_idle_s, nullptr},
    {"max-locks", "MAX_LOCKS", 1, kI64Max, &Config::max_locks, nullptr},
    {"max-waiters", "MAX_WAITERS", 0, kI64Max, &Config::max_waiters, nullptr},
    {"max-connections", "MAX_CONNECTIONS", 0, kI64Max, &Config::max_connections, nullptr},
    {"max-connections-per-ip", "MAX_CONNECTIONS_PER_IP", 0, kI64Max,
     &Config::max_connections_per_ip, nullptr},
    {"read-timeout", "READ_TIMEOUT_S", 1, kMaxSeconds, &Config::read_timeout_s, nullptr},
    {"idle-timeout", "IDLE_TIMEOUT_S", 0, kMaxSeconds, &Config::idle_timeout_s, nullptr},
    {"idle-poll-us", "IDLE_POLL_US", 0, 10'000, &Config::idle_poll_us, nullptr},
    {"write-timeout", "WRITE_TIMEOUT_S", 0, kMaxSeconds, &Config::write_timeout_s, nullptr},
    {"shutdown-timeout", "SHUTDOWN_TIMEOUT_S", 0, kMaxSeconds, &Config::shutdown_timeout_s,
     nullptr},
};

class IntegerFlagTest : public testing::TestWithParam<IntegerFlag> {};

TEST_P(IntegerFlagTest, AcceptsItsMinimumAndMaximum) {
  const IntegerFlag& f = GetParam();
  EXPECT_EQ(read_field(ok(parse({"--" + f.flag, std::to_string(f.min)})), f), f.min);
  EXPECT_EQ(read_field(ok(parse({"--" + f.flag + "=" + std::to_string(f.max)})), f), f.max);
}

TEST_P(IntegerFlagTest, RejectsBelowMinimum) {
  const IntegerFlag& f = GetParam();
  const std::string message = error(parse({"--" + f.flag, std::to_string(f.min - 1)}));
  EXPECT_TRUE(contains(message, "for --" + f.flag + ":")) << message;
  EXPECT_TRUE(contains(message, "must be")) << message;
}

TEST_P(IntegerFlagTest, RejectsAboveMaximumAndInt64Overflow) {
  const IntegerFlag& f = GetParam();
  if (f.max != kI64Max) {
    const std::string message = error(parse({"--" + f.flag, std::to_string(f.max + 1)}));
    EXPECT_TRUE(contains(message, "for --" + f.flag + ": must be between")) << message;
  }
  const std::string message = error(parse({"--" + f.flag, "9223372036854775808"}));
  EXPECT_TRUE(contains(message, "for --" + f.flag + ": must be")) << message;
  EXPECT_TRUE(contains(error(parse({"--" + f.flag, "-9223372036854775809"})), "must be"));
}

TEST_P(IntegerFlagTest, RejectsNonIntegers) {
  const IntegerFlag& f = GetParam();
  for (const std::string bad :
       {"", "abc", "1.5", " 7", "7 ", "7s", "0x10", "1_000", "+", "-", "--7", "+-7", "1e3"}) {
    const std::string message = error(parse({"--" + f.flag + "=" + bad}));
    EXPECT_TRUE(contains(message, "for --" + f.flag + ": not an integer")) << message;
  }
}

TEST_P(IntegerFlagTest, ReadsTurnstileAndDflockdEnvironmentNames) {
  const IntegerFlag& f = GetParam();
  const std::string value = std::to_string(f.min + 1);
  EXPECT_EQ(read_field(ok(parse({}, {{"TURNSTILE_" + f.env, value}})), f), f.min + 1);
  EXPECT_EQ(read_field(ok(parse({}, {{"DFLOCKD_" + f.env, value}})), f), f.min + 1);
  const std::string message = error(parse({}, {{"DFLOCKD_" + f.env, std::to_string(f.min - 1)}}));
  EXPECT_TRUE(contains(message, "for --" + f.flag + " (from DFLOCKD_" + f.env + "): must be"))
      << message;
}

INSTANTIATE_TEST_SUITE_P(AllIntegerFlags, IntegerFlagTest, testing::ValuesIn(kIntegerFlags),
                         [](const testing::TestParamInfo<IntegerFlag>& param_info) {
                           std::string name;
                           for (char c : param_info.param.flag) name += c == '-' ? '_' : c;
                           return name;
                         });

TEST(ConfigIntegers, ErrorMessageIsExact) {
  EXPECT_EQ(error(parse({"--port", "abc"})),
            "turnstiled: invalid value \"abc\" for --port: not an integer");
  EXPECT_EQ(error(parse({"--port", "65536"})),
            "turnstiled: invalid value \"65536\" for --port: must be between 0 and 65535");
  EXPECT_EQ(error(parse({}, {{"TURNSTILE_MAX_LOCKS", "0"}})),
            "turnstiled: invalid value \"0\" for --max-locks (from TURNSTILE_MAX_LOCKS): must be "
            ">= 1");
}

TEST(ConfigIntegers, PlusSignAndLeadingZerosAreDecimalLikeGoParseInt) {
  EXPECT_EQ(ok(parse({"--port", "+7000"})).port, 7000);
  EXPECT_EQ(ok(parse({"--port", "007000"})).port, 7000);
  EXPECT_EQ(ok(parse({"--max-waiters", "-0"})).max_waiters, 0);
}

TEST(ConfigIntegers, NegativeValueAfterSpaceIsTakenAsTheValue) {
  const std::string message = error(parse({"--max-waiters", "-1"}));
  EXPECT_EQ(message, "turnstiled: invalid value \"-1\" for --max-waiters: must be >= 0");
}

TEST(ConfigIntegers, Edge07_GcMaxIdleZeroIsValidAndNegativeIsNot) {
  EXPECT_EQ(ok(parse({"--gc-max-idle", "0"})).gc_max_idle_s, 0);
  EXPECT_TRUE(contains(error(parse({"--gc-max-idle", "-1"})), "--gc-max-idle"));
}

TEST(ConfigIntegers, Edge06_WriteTimeoutZeroIsValid) {
  EXPECT_EQ(ok(parse({"--write-timeout", "0"})).write_timeout_s, 0);
}

TEST(ConfigIntegers, Edge23_SecondsAbove9223372036AreRejectedNotWrapped) {
  EXPECT_EQ(ok(parse({"--read-timeout", "9223372036"})).read_timeout_s, kMaxSeconds);
  EXPECT_EQ(error(parse({"--read-timeout", "9223372037"})),
            "turnstiled: invalid value \"9223372037\" for --read-timeout: must be between 1 and "
            "9223372036 seconds");
  EXPECT_TRUE(contains(error(parse({"--default-lease-ttl", "99999999999999999999"})),
                       "must be between 1 and 9223372036 seconds"));
  EXPECT_TRUE(contains(error(parse({}, {{"TURNSTILE_SHUTDOWN_TIMEOUT_S", "18446744073709551616"}})),
                       "(from TURNSTILE_SHUTDOWN_TIMEOUT_S): must be between 0 and 9223372036"));
}

// ---- flag syntax ----------------------------------------------------------------------------

TEST(ConfigSyntax, SpaceAndEqualsFormsAreEquivalent) {
  EXPECT_EQ(ok(parse({"--port", "7000"})).port, 7000);
  EXPECT_EQ(ok(parse({"--port=7000"})).port, 7000);
  EXPECT_EQ(ok(parse({"--host", "::1"})).host, "::1");
  EXPECT_EQ(ok(parse({"--host=0.0.0.0"})).host, "0.0.0.0");
}

TEST(ConfigSyntax, SingleDashLongFlagsLikeGo) {
  EXPECT_EQ(ok(parse({"-port", "7000"})).port, 7000);
  EXPECT_EQ(ok(parse({"-port=7001"})).port, 7001);
  EXPECT_TRUE(ok(parse({"-debug"})).debug);
  EXPECT_FALSE(ok(parse({"-auto-release-on-disconnect=false"})).auto_release_on_disconnect);
}

TEST(ConfigSyntax, ValueStartingWithDashIsAValueNotAFlag) {
  EXPECT_EQ(ok(parse({"--host", "-debug"})).host, "-debug");
  const Config config = ok(parse({"--auth-token", "--port"}));
  EXPECT_EQ(config.auth_token, "--port");
  EXPECT_EQ(config.port, 6388);
}

TEST(ConfigSyntax, RepeatedFlagLastWins) {
  EXPECT_EQ(ok(parse({"--port", "1", "--port=2"})).port, 2);
}

TEST(ConfigSyntax, EveryFlagTogether) {
  const Config config = ok(parse({"--host=0.0.0.0",
                                  "--port=1",
                                  "--threads=2",
                                  "--idle-poll-us=250",
                                  "--default-lease-ttl=3",
                                  "--lease-sweep-interval=4",
                                  "--gc-interval=5",
                                  "--gc-max-idle=6",
                                  "--max-locks=7",
                                  "--max-waiters=8",
                                  "--max-connections=9",
                                  "--max-connections-per-ip=10",
                                  "--read-timeout=11",
                                  "--idle-timeout=12",
                                  "--write-timeout=13",
                                  "--shutdown-timeout=14",
                                  "--auto-release-on-disconnect=false",
                                  "--tls-cert=c.pem",
                                  "--tls-key=k.pem",
                                  "--auth-token=secret",
                                  "--debug"}));
  EXPECT_EQ(config.host, "0.0.0.0");
  EXPECT_EQ(config.port, 1);
  EXPECT_EQ(config.threads, 2);
  EXPECT_EQ(config.idle_poll_us, 250);
  EXPECT_EQ(config.default_lease_ttl_s, 3);
  EXPECT_EQ(config.lease_sweep_interval_s, 4);
  EXPECT_EQ(config.gc_interval_s, 5);
  EXPECT_EQ(config.gc_max_idle_s, 6);
  EXPECT_EQ(config.max_locks, 7);
  EXPECT_EQ(config.max_waiters, 8);
  EXPECT_EQ(config.max_connections, 9);
  EXPECT_EQ(config.max_connections_per_ip, 10);
  EXPECT_EQ(config.read_timeout_s, 11);
  EXPECT_EQ(config.idle_timeout_s, 12);
  EXPECT_EQ(config.write_timeout_s, 13);
  EXPECT_EQ(config.shutdown_timeout_s, 14);
  EXPECT_FALSE(config.auto_release_on_disconnect);
  EXPECT_EQ(config.tls_cert, "c.pem");
  EXPECT_EQ(config.tls_key, "k.pem");
  EXPECT_EQ(config.auth_token, "secret");
  EXPECT_TRUE(config.debug);
}

TEST(ConfigSyntax, UnknownFlagIsAnError) {
  EXPECT_EQ(error(parse({"--nope"})), "turnstiled: unknown flag --nope");
  EXPECT_EQ(error(parse({"--nope=1"})), "turnstiled: unknown flag --nope");
  EXPECT_EQ(error(parse({"-x"})), "turnstiled: unknown flag -x");
  EXPECT_EQ(error(parse({"-xyz"})), "turnstiled: unknown flag --xyz");
  EXPECT_EQ(error(parse({"-1"})), "turnstiled: unknown flag -1");
  // dflockd has no --no-... form of its boolean flags (reference section 4).
  EXPECT_EQ(error(parse({"--no-auto-release-on-disconnect"})),
            "turnstiled: unknown flag --no-auto-release-on-disconnect");
  // Flags turnstile does not implement are unknown, not silently ignored (dflockd's raft token
  // is --cluster-secret here; its raft TLS flags do not exist).
  EXPECT_EQ(error(parse({"--raft-auth-token=x"})), "turnstiled: unknown flag --raft-auth-token");
  EXPECT_EQ(error(parse({"--raft-tls-cert=c"})), "turnstiled: unknown flag --raft-tls-cert");
}

TEST(ConfigSyntax, PositionalArgumentsAreErrors) {
  EXPECT_EQ(error(parse({"serve"})), "turnstiled: unexpected argument \"serve\"");
  EXPECT_EQ(error(parse({"--port", "1", "--", "x"})), "turnstiled: unexpected argument \"x\"");
  EXPECT_EQ(error(parse({"-"})), "turnstiled: unexpected argument \"-\"");
}

TEST(ConfigSyntax, MissingValueNamesTheFlag) {
  EXPECT_EQ(error(parse({"--port"})), "turnstiled: flag needs an argument: --port");
  EXPECT_EQ(error(parse({"--debug", "--auth-token-file"})),
            "turnstiled: flag needs an argument: --auth-token-file");
}

TEST(ConfigSyntax, BadFlagSyntax) { EXPECT_TRUE(contains(error(parse({"---port=1"})), "flag")); }

TEST(ConfigSyntax, ValuesInMessagesStayOnOneLine) {
  const std::string message = error(parse({"--port", "1\n2"}));
  EXPECT_TRUE(contains(message, "\"1\\n2\"")) << message;
  const std::string long_value = std::string(500, '9') + "x";
  EXPECT_LT(error(parse({"--port", long_value})).size(), 200U);
}

// ---- logging --------------------------------------------------------------------------------

TEST(ConfigLogging, FormatAndLevelFromFlagsAndEnvironment) {
  const Config defaults = ok(parse({}));
  EXPECT_EQ(defaults.log_format, "text");
  EXPECT_EQ(defaults.log_level, "info");
  EXPECT_EQ(ok(parse({"--log-format", "json"})).log_format, "json");
  EXPECT_EQ(ok(parse({"--log-format=JSON"})).log_format, "json");
  EXPECT_EQ(ok(parse({}, {{"TURNSTILE_LOG_FORMAT", "json"}})).log_format, "json");
  EXPECT_EQ(ok(parse({}, {{"DFLOCKD_LOG_LEVEL", "error"}})).log_level, "error");
  EXPECT_EQ(ok(parse({"--log-level", "warning"})).log_level, "warn");
  EXPECT_EQ(ok(parse({"--log-level=warn"}, {{"TURNSTILE_LOG_LEVEL", "error"}})).log_level, "warn");
  // --debug is an alias of --log-level debug, and wins over it.
  EXPECT_EQ(ok(parse({"--debug"})).log_level, "debug");
  EXPECT_EQ(ok(parse({"--log-level=error", "--debug"})).log_level, "debug");
  EXPECT_EQ(ok(parse({}, {{"TURNSTILE_DEBUG", "1"}})).log_level, "debug");
  EXPECT_EQ(error(parse({"--log-format=xml"})),
            "turnstiled: invalid value \"xml\" for --log-format: not a log format (use text or "
            "json)");
  EXPECT_EQ(error(parse({}, {{"TURNSTILE_LOG_LEVEL", "loud"}})),
            "turnstiled: invalid value \"loud\" for --log-level (from TURNSTILE_LOG_LEVEL): not a "
            "log level (use debug, info, warn or error)");
}

TEST(ConfigSyntax, EmptyHostIsAnError) {
  EXPECT_TRUE(contains(error(parse({"--host="})), "for --host: empty"));
}

// ---- booleans -------------------------------------------------------------------------------

TEST(ConfigBooleans, BareFlagMeansTrue) {
  EXPECT_TRUE(ok(parse({"--debug"})).debug);
  EXPECT_TRUE(ok(parse({"--pin-threads"})).pin_threads);
  EXPECT_TRUE(ok(parse({}, {{"TURNSTILE_PIN_THREADS", "1"}})).pin_threads);
  EXPECT_TRUE(ok(parse({"--auto-release-on-disconnect"})).auto_release_on_disconnect);
}

TEST(ConfigBooleans, HugePagesAreOnUnlessTurnedOff) {
  EXPECT_TRUE(ok(parse({})).huge_pages);
  EXPECT_FALSE(ok(parse({"--huge-pages=false"})).huge_pages);
  EXPECT_FALSE(ok(parse({}, {{"TURNSTILE_HUGE_PAGES", "0"}})).huge_pages);
  EXPECT_TRUE(ok(parse({"--huge-pages"}, {{"TURNSTILE_HUGE_PAGES", "no"}})).huge_pages);
}

TEST(ConfigBooleans, EqualsFormsAcceptGoAndEnvironmentWords) {
  for (const std::string yes : {"true", "TRUE", "True", "1", "t", "T", "yes", "YES"}) {
    EXPECT_TRUE(ok(parse({"--debug=" + yes})).debug) << yes;
  }
  for (const std::string no : {"false", "FALSE", "False", "0", "f", "F", "no", "No"}) {
    EXPECT_TRUE(
        ok(parse({"--auto-release-on-disconnect=" + no}, {}, 4)).auto_release_on_disconnect ==
        false)
        << no;
  }
}

TEST(ConfigBooleans, BadValueIsAnError) {
  EXPECT_EQ(error(parse({"--debug=maybe"})),
            "turnstiled: invalid value \"maybe\" for --debug: not a boolean (use --debug=true or "
            "--debug=false)");
  EXPECT_TRUE(contains(error(parse({"--debug="})), "for --debug: not a boolean"));
}

TEST(ConfigBooleans, SpaceSeparatedValueIsNotTakenLikeGo) {
  EXPECT_EQ(error(parse({"--auto-release-on-disconnect", "false"})),
            "turnstiled: unexpected argument \"false\" (boolean flags take --name=false, not "
            "--name false)");
}

TEST(ConfigBooleans, EnvironmentAcceptsOneYesTrueZeroNoFalseAnyCase) {
  for (const std::string yes : {"1", "yes", "YES", "true", "True", "tRuE"}) {
    EXPECT_TRUE(ok(parse({}, {{"TURNSTILE_DEBUG", yes}})).debug) << yes;
    EXPECT_TRUE(ok(parse({}, {{"DFLOCKD_DEBUG", yes}})).debug) << yes;
  }
  for (const std::string no : {"0", "no", "NO", "false", "False"}) {
    EXPECT_FALSE(
        ok(parse({}, {{"TURNSTILE_AUTO_RELEASE_ON_DISCONNECT", no}})).auto_release_on_disconnect)
        << no;
    EXPECT_FALSE(
        ok(parse({}, {{"DFLOCKD_AUTO_RELEASE_ON_DISCONNECT", no}})).auto_release_on_disconnect)
        << no;
  }
}

TEST(ConfigBooleans, EnvironmentRejectsAnyOtherValue) {
  for (const std::string bad : {"t", "f", "on", "off", "2", "y", "n", " true", "truee"}) {
    const std::string message = error(parse({}, {{"DFLOCKD_AUTO_RELEASE_ON_DISCONNECT", bad}}));
    EXPECT_TRUE(contains(message,
                         "for --auto-release-on-disconnect (from "
                         "DFLOCKD_AUTO_RELEASE_ON_DISCONNECT): not a boolean"))
        << message;
  }
  EXPECT_EQ(error(parse({}, {{"TURNSTILE_DEBUG", "on"}})),
            "turnstiled: invalid value \"on\" for --debug (from TURNSTILE_DEBUG): not a boolean "
            "(use 1/yes/true or 0/no/false)");
}

// ---- environment precedence -----------------------------------------------------------------

TEST(ConfigPrecedence, TurnstileEnvironmentWinsOverDflockd) {
  const Env env = {{"TURNSTILE_PORT", "1111"}, {"DFLOCKD_PORT", "2222"}};
  EXPECT_EQ(ok(parse({}, env)).port, 1111);
  EXPECT_EQ(ok(parse({}, {{"DFLOCKD_PORT", "2222"}})).port, 2222);
}

TEST(ConfigPrecedence, FlagWinsOverBothEnvironmentNames) {
  const Env env = {{"TURNSTILE_PORT", "1111"}, {"DFLOCKD_PORT", "2222"}};
  EXPECT_EQ(ok(parse({"--port", "3333"}, env)).port, 3333);
  const Env bools = {{"TURNSTILE_DEBUG", "true"}, {"DFLOCKD_DEBUG", "true"}};
  EXPECT_FALSE(ok(parse({"--debug=false"}, bools)).debug);
}

TEST(ConfigPrecedence, EnvironmentIsNotReadForAFlagGivenOnTheCommandLine) {
  EXPECT_EQ(ok(parse({"--port", "3333"}, {{"TURNSTILE_PORT", "junk"}})).port, 3333);
}

TEST(ConfigPrecedence, InvalidTurnstileValueIsAnErrorEvenWithAValidDflockdOne) {
  const Env env = {{"TURNSTILE_PORT", "junk"}, {"DFLOCKD_PORT", "2222"}};
  EXPECT_EQ(error(parse({}, env)),
            "turnstiled: invalid value \"junk\" for --port (from TURNSTILE_PORT): not an integer");
}

TEST(ConfigPrecedence, EmptyEnvironmentValueCountsAsUnset) {
  EXPECT_EQ(ok(parse({}, {{"TURNSTILE_PORT", ""}, {"DFLOCKD_PORT", "2222"}})).port, 2222);
  EXPECT_EQ(ok(parse({}, {{"TURNSTILE_HOST", ""}})).host, "127.0.0.1");
  EXPECT_TRUE(
      ok(parse({}, {{"DFLOCKD_AUTO_RELEASE_ON_DISCONNECT", ""}})).auto_release_on_disconnect);
}

TEST(ConfigPrecedence, TextSettingsFromEnvironment) {
  EXPECT_EQ(ok(parse({}, {{"TURNSTILE_HOST", "::"}, {"DFLOCKD_HOST", "0.0.0.0"}})).host, "::");
  EXPECT_EQ(ok(parse({}, {{"DFLOCKD_HOST", "0.0.0.0"}})).host, "0.0.0.0");
  const Config tls = ok(parse({}, {{"DFLOCKD_TLS_CERT", "c"}, {"TURNSTILE_TLS_KEY", "k"}}));
  EXPECT_EQ(tls.tls_cert, "c");
  EXPECT_EQ(tls.tls_key, "k");
}

// ---- TLS ------------------------------------------------------------------------------------

TEST(ConfigTls, Edge11_CertAndKeyBothOrNeither) {
  const Config both = ok(parse({"--tls-cert", "c.pem", "--tls-key", "k.pem"}));
  EXPECT_EQ(both.tls_cert, "c.pem");
  EXPECT_EQ(both.tls_key, "k.pem");
  EXPECT_EQ(error(parse({"--tls-cert", "c.pem"})),
            "turnstiled: --tls-cert is set but --tls-key is not");
  EXPECT_EQ(error(parse({"--tls-key", "k.pem"})),
            "turnstiled: --tls-key is set but --tls-cert is not");
  EXPECT_TRUE(contains(error(parse({}, {{"TURNSTILE_TLS_CERT", "c.pem"}})), "--tls-cert is set"));
  EXPECT_TRUE(contains(error(parse({"--tls-cert=c.pem", "--tls-key="})), "--tls-key is not"));
}

TEST(ConfigTls, CertFromFlagAndKeyFromEnvironmentCombine) {
  const Config config = ok(parse({"--tls-cert=c.pem"}, {{"DFLOCKD_TLS_KEY", "k.pem"}}));
  EXPECT_EQ(config.tls_key, "k.pem");
}

// ---- auth token -----------------------------------------------------------------------------

TEST(ConfigAuthToken, FromFlagIsTrimmed) {
  EXPECT_EQ(ok(parse({"--auth-token", "  s3cret \t"})).auth_token, "s3cret");
  EXPECT_EQ(ok(parse({"--auth-token=inner space"})).auth_token, "inner space");
}

TEST(ConfigAuthToken, Edge31_EmptyOrWhitespaceOnlyIsRejected) {
  EXPECT_EQ(error(parse({"--auth-token="})),
            "turnstiled: invalid value for --auth-token: empty after trimming whitespace");
  EXPECT_TRUE(contains(error(parse({"--auth-token", " \t "})), "empty"));
  EXPECT_EQ(error(parse({}, {{"TURNSTILE_AUTH_TOKEN", ""}})),
            "turnstiled: invalid value for --auth-token (from TURNSTILE_AUTH_TOKEN): empty after "
            "trimming whitespace");
  EXPECT_TRUE(contains(error(parse({}, {{"DFLOCKD_AUTH_TOKEN", "  "}})), "DFLOCKD_AUTH_TOKEN"));
}

TEST(ConfigAuthToken, Edge11_InnerNewlineOrCarriageReturnIsRejected) {
  EXPECT_EQ(error(parse({"--auth-token", "abc\ndef"})),
            "turnstiled: invalid value for --auth-token: contains CR or LF (the token must be one "
            "line)");
  EXPECT_TRUE(contains(error(parse({"--auth-token", "abc\rdef"})), "CR or LF"));
  EXPECT_TRUE(contains(error(parse({}, {{"DFLOCKD_AUTH_TOKEN", "a\nb"}})), "CR or LF"));
}

TEST(ConfigAuthToken, ErrorsNeverEchoTheSecret) {
  for (const std::string bad : {"topsecret\nx", "topsecret\r"}) {
    // "topsecret\r" trims to a valid token; only the first is an error.
    const ConfigResult result = parse({"--auth-token", bad});
    if (std::holds_alternative<ConfigExit>(result)) {
      EXPECT_FALSE(contains(error(result), "topsecret"));
    }
  }
  EXPECT_FALSE(contains(error(parse({}, {{"TURNSTILE_AUTH_TOKEN", "topsecret\nx"}})), "topsecret"));
}

TEST(ConfigAuthToken, LongestSendableTokenIsAcceptedOneMoreByteIsNot) {
  const std::string longest(65536, 'a');
  EXPECT_EQ(ok(parse({"--auth-token", longest})).auth_token, longest);
  EXPECT_TRUE(contains(error(parse({"--auth-token", longest + "a"})), "longer than 65536 bytes"));
}

TEST(ConfigAuthToken, FromFileIsTrimmedOneLine) {
  TempDir dir;
  EXPECT_EQ(ok(parse({"--auth-token-file", dir.write("lf", "tok\n")})).auth_token, "tok");
  EXPECT_EQ(ok(parse({"--auth-token-file", dir.write("crlf", "  tok\r\n\n")})).auth_token, "tok");
  EXPECT_EQ(ok(parse({"--auth-token-file=" + dir.write("bare", "tok")})).auth_token, "tok");
}

TEST(ConfigAuthToken, Edge11_EmptyFileIsRejected) {
  TempDir dir;
  const std::string empty = dir.write("empty", "");
  EXPECT_EQ(error(parse({"--auth-token-file", empty})),
            "turnstiled: invalid value \"" + empty + "\" for --auth-token-file: the file is empty");
  EXPECT_TRUE(contains(error(parse({"--auth-token-file", dir.write("blank", " \n\r\n\t")})),
                       "the file is empty"));
}

TEST(ConfigAuthToken, Edge11_FileWithTwoLinesIsRejected) {
  TempDir dir;
  const std::string two = dir.write("two", "secret-one\nsecret-two\n");
  const std::string message = error(parse({"--auth-token-file", two}));
  EXPECT_EQ(message, "turnstiled: invalid value \"" + two +
                         "\" for --auth-token-file: the file holds more than one line (the token "
                         "must be one line)");
  EXPECT_FALSE(contains(message, "secret-one")) << message;
}

TEST(ConfigAuthToken, UnreadableFileIsRejected) {
  TempDir dir;
  const std::string missing = dir.path() + "/missing";
  EXPECT_EQ(error(parse({"--auth-token-file", missing})),
            "turnstiled: invalid value \"" + missing +
                "\" for --auth-token-file: cannot open: No such file or directory");
  EXPECT_TRUE(contains(error(parse({"--auth-token-file", dir.path()})), "cannot read"));
  EXPECT_TRUE(contains(error(parse({"--auth-token-file="})), "for --auth-token-file: empty path"));
  EXPECT_TRUE(contains(error(parse({}, {{"DFLOCKD_AUTH_TOKEN_FILE", missing}})),
                       "for --auth-token-file (from DFLOCKD_AUTH_TOKEN_FILE): cannot open"));
}

TEST(ConfigAuthToken, HugeFileIsRejectedWithoutReadingItAll) {
  const std::string message = error(parse({"--auth-token-file", "/dev/zero"}));
  EXPECT_TRUE(contains(message, "larger than")) << message;
}

// --auth-token > --auth-token-file > TURNSTILE_AUTH_TOKEN > DFLOCKD_AUTH_TOKEN >
// TURNSTILE_AUTH_TOKEN_FILE > DFLOCKD_AUTH_TOKEN_FILE; each test removes the winner of the last.
TEST(ConfigAuthToken, Edge31_PrecedenceChain) {
  TempDir dir;
  const std::string flag_file = dir.write("flag", "from-flag-file\n");
  const std::string turnstile_file = dir.write("t", "from-turnstile-file\n");
  const std::string dflockd_file = dir.write("d", "from-dflockd-file\n");
  Env env = {{"TURNSTILE_AUTH_TOKEN", "from-turnstile-env"},
             {"DFLOCKD_AUTH_TOKEN", "from-dflockd-env"},
             {"TURNSTILE_AUTH_TOKEN_FILE", turnstile_file},
             {"DFLOCKD_AUTH_TOKEN_FILE", dflockd_file}};
  EXPECT_EQ(
      ok(parse({"--auth-token-file", flag_file, "--auth-token", "from-flag"}, env)).auth_token,
      "from-flag");
  EXPECT_EQ(ok(parse({"--auth-token-file", flag_file}, env)).auth_token, "from-flag-file");
  EXPECT_EQ(ok(parse({}, env)).auth_token, "from-turnstile-env");
  env.erase("TURNSTILE_AUTH_TOKEN");
  EXPECT_EQ(ok(parse({}, env)).auth_token, "from-dflockd-env");
  env.erase("DFLOCKD_AUTH_TOKEN");
  EXPECT_EQ(ok(parse({}, env)).auth_token, "from-turnstile-file");
  env.erase("TURNSTILE_AUTH_TOKEN_FILE");
  EXPECT_EQ(ok(parse({}, env)).auth_token, "from-dflockd-file");
  env.erase("DFLOCKD_AUTH_TOKEN_FILE");
  EXPECT_FALSE(ok(parse({}, env)).auth_token.has_value());
}

TEST(ConfigAuthToken, OnlyTheWinningSourceIsRead) {
  TempDir dir;
  const std::string missing = dir.path() + "/missing";
  EXPECT_EQ(ok(parse({"--auth-token", "x", "--auth-token-file", missing})).auth_token, "x");
  EXPECT_EQ(ok(parse({}, {{"DFLOCKD_AUTH_TOKEN", "y"}, {"TURNSTILE_AUTH_TOKEN_FILE", missing}}))
                .auth_token,
            "y");
}

// ---- help and version -----------------------------------------------------------------------

TEST(ConfigHelp, ListsEveryFlagWithEnvironmentNamesAndDefaults) {
  const ConfigResult result = parse({"--help"}, {}, 6);
  const auto* exit = std::get_if<ConfigExit>(&result);
  ASSERT_NE(exit, nullptr);
  EXPECT_EQ(exit->code, 0);
  for (const std::string flag : {"host",
                                 "port",
                                 "threads",
                                 "default-lease-ttl",
                                 "lease-sweep-interval",
                                 "gc-interval",
                                 "gc-max-idle",
                                 "max-locks",
                                 "max-waiters",
                                 "max-connections",
                                 "max-connections-per-ip",
                                 "read-timeout",
                                 "idle-timeout",
                                 "idle-poll-us",
                                 "pin-threads",
                                 "huge-pages",
                                 "write-timeout",
                                 "shutdown-timeout",
                                 "auto-release-on-disconnect",
                                 "tls-cert",
                                 "tls-key",
                                 "auth-token",
                                 "auth-token-file",
                                 "debug",
                                 "log-format",
                                 "log-level",
                                 "raft-dir",
                                 "node-id",
                                 "raft-addr",
                                 "cluster-peers",
                                 "advertise-addr",
                                 "cluster-bootstrap",
                                 "orphan-ttl",
                                 "cluster-secret",
                                 "cluster-secret-file",
                                 "admin-token",
                                 "admin-token-file",
                                 "raft-election-timeout-ms",
                                 "raft-heartbeat-timeout-ms",
                                 "raft-snapshot-threshold",
                                 "raft-snapshot-trailing",
                                 "raft-min-free-mb",
                                 "raft-start-timeout-s",
                                 "help",
                                 "version"}) {
    EXPECT_TRUE(contains(exit->message, "  --" + flag)) << flag;
  }
  for (const std::string env :
       {"TURNSTILE_HOST, DFLOCKD_HOST; default 127.0.0.1",
        "TURNSTILE_PORT, DFLOCKD_PORT; default 6388",
        "TURNSTILE_THREADS, DFLOCKD_THREADS; default number of cores (6)",
        "TURNSTILE_DEFAULT_LEASE_TTL_S, DFLOCKD_DEFAULT_LEASE_TTL_S; default 33",
        "TURNSTILE_IDLE_TIMEOUT_S, DFLOCKD_IDLE_TIMEOUT_S; default 0",
        "TURNSTILE_IDLE_POLL_US, DFLOCKD_IDLE_POLL_US; default 100",
        "TURNSTILE_MAX_LOCKS, DFLOCKD_MAX_LOCKS; default 1048576",
        "TURNSTILE_AUTO_RELEASE_ON_DISCONNECT, DFLOCKD_AUTO_RELEASE_ON_DISCONNECT; default true",
        "TURNSTILE_AUTH_TOKEN_FILE, DFLOCKD_AUTH_TOKEN_FILE; default unset",
        "TURNSTILE_DEBUG, DFLOCKD_DEBUG; default false",
        "TURNSTILE_RAFT_DIR, DFLOCKD_RAFT_DIR; default unset",
        "TURNSTILE_NODE_ID, DFLOCKD_NODE_ID; default unset (required in cluster mode)",
        "TURNSTILE_CLUSTER_PEERS, DFLOCKD_CLUSTER_PEERS; default unset",
        "TURNSTILE_ORPHAN_TTL_S, DFLOCKD_ORPHAN_TTL_S; default 0",
        "TURNSTILE_CLUSTER_SECRET_FILE, DFLOCKD_CLUSTER_SECRET_FILE; default unset",
        "TURNSTILE_ADMIN_TOKEN, DFLOCKD_ADMIN_TOKEN; default unset",
        "TURNSTILE_RAFT_ELECTION_TIMEOUT_MS, DFLOCKD_RAFT_ELECTION_TIMEOUT_MS; default 1000",
        "TURNSTILE_RAFT_HEARTBEAT_TIMEOUT_MS, DFLOCKD_RAFT_HEARTBEAT_TIMEOUT_MS; default 100",
        "TURNSTILE_RAFT_SNAPSHOT_THRESHOLD, DFLOCKD_RAFT_SNAPSHOT_THRESHOLD; default 8192",
        "TURNSTILE_RAFT_SNAPSHOT_TRAILING, DFLOCKD_RAFT_SNAPSHOT_TRAILING; default 1024"}) {
    EXPECT_TRUE(contains(exit->message, env)) << env;
  }
}

TEST(ConfigHelp, ShortAndSingleDashFormsAndHelpWinsOverBadValues) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"-h"}, {"-h=true"}, {"-help"}, {"--port=junk", "--help"}}) {
    const ConfigResult result = parse(args, {{"TURNSTILE_PORT", "junk"}});
    const auto* exit = std::get_if<ConfigExit>(&result);
    ASSERT_NE(exit, nullptr);
    EXPECT_EQ(exit->code, 0);
    EXPECT_TRUE(contains(exit->message, "Usage: turnstiled"));
  }
}

TEST(ConfigHelp, VersionPrintsVersionString) {
  EXPECT_EQ(version_string(), "turnstiled 0.1.0");
  for (const std::string arg : {"--version", "-version"}) {
    const ConfigResult result = parse({arg});
    const auto* exit = std::get_if<ConfigExit>(&result);
    ASSERT_NE(exit, nullptr);
    EXPECT_EQ(exit->code, 0);
    EXPECT_EQ(exit->message, version_string());
  }
}

// ---- warnings -------------------------------------------------------------------------------

TEST(ConfigWarnings, LoopbackHostNeverWarns) {
  for (const std::string host : {"127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost",
                                 "LocalHost", "::ffff:127.0.0.1", "0:0:0:0:0:0:0:1"}) {
    Config config;
    config.host = host;
    EXPECT_TRUE(config_warnings(config).empty()) << host;
  }
}

TEST(ConfigWarnings, NonLoopbackWithUnboundedCapsWarnsOncePerCap) {
  for (const std::string host : {"0.0.0.0", "::", "10.0.0.1", "128.0.0.1", "example.com", "::2"}) {
    Config config;
    config.host = host;
    const std::vector<std::string> warnings = config_warnings(config);
    ASSERT_EQ(warnings.size(), 3U) << host;
    EXPECT_TRUE(contains(warnings[0], "--max-connections is 0"));
    EXPECT_TRUE(contains(warnings[1], "--max-connections-per-ip is 0"));
    EXPECT_TRUE(contains(warnings[2], "--max-waiters is 0"));
    for (const std::string& warning : warnings) {
      EXPECT_EQ(warning.find('\n'), std::string::npos);
      EXPECT_TRUE(contains(warning, host));
    }
  }
}

TEST(ConfigWarnings, OnlyUnboundedCapsWarn) {
  Config config;
  config.host = "0.0.0.0";
  config.max_connections = 100;
  config.max_waiters = 10;
  const std::vector<std::string> warnings = config_warnings(config);
  ASSERT_EQ(warnings.size(), 1U);
  EXPECT_TRUE(contains(warnings[0], "--max-connections-per-ip"));
  config.max_connections_per_ip = 5;
  EXPECT_TRUE(config_warnings(config).empty());
}

// ---- the fence journal and the test-only wall-clock offset ----------------------------------

TEST(ConfigFenceStateFile, OffByDefault) {
  const Config config = ok(parse({}));
  EXPECT_EQ(config.fence_state_file, "");
  EXPECT_EQ(config.test.wall_clock_offset_s, 0);
}

TEST(ConfigFenceStateFile, FromFlagInBothForms) {
  EXPECT_EQ(ok(parse({"--fence-state-file", "/var/lib/t/fences"})).fence_state_file,
            "/var/lib/t/fences");
  EXPECT_EQ(ok(parse({"--fence-state-file=f"})).fence_state_file, "f");
  EXPECT_EQ(ok(parse({"-fence-state-file=f"})).fence_state_file, "f");
}

TEST(ConfigFenceStateFile, PrecedenceFlagThenTurnstileThenDflockd) {
  const Env both = {{"TURNSTILE_FENCE_STATE_FILE", "t"}, {"DFLOCKD_FENCE_STATE_FILE", "d"}};
  EXPECT_EQ(ok(parse({"--fence-state-file=flag"}, both)).fence_state_file, "flag");
  EXPECT_EQ(ok(parse({}, both)).fence_state_file, "t");
  EXPECT_EQ(ok(parse({}, {{"DFLOCKD_FENCE_STATE_FILE", "d"}})).fence_state_file, "d");
  // An empty variable counts as unset, like every other ordinary setting.
  EXPECT_EQ(ok(parse({}, {{"TURNSTILE_FENCE_STATE_FILE", ""}, {"DFLOCKD_FENCE_STATE_FILE", "d"}}))
                .fence_state_file,
            "d");
}

TEST(ConfigFenceStateFile, EmptyFlagTurnsItOff) {
  EXPECT_EQ(
      ok(parse({"--fence-state-file="}, {{"TURNSTILE_FENCE_STATE_FILE", "t"}})).fence_state_file,
      "");
}

TEST(ConfigFenceStateFile, MissingValueNamesTheFlag) {
  EXPECT_TRUE(contains(error(parse({"--fence-state-file"})), "--fence-state-file"));
}

TEST(ConfigTestWallClockOffset, SignedSecondsWithinACentury) {
  EXPECT_EQ(ok(parse({"--test-wall-clock-offset-s=-3600"})).test.wall_clock_offset_s, -3600);
  EXPECT_EQ(ok(parse({"--test-wall-clock-offset-s", "-86400"})).test.wall_clock_offset_s, -86400);
  EXPECT_EQ(ok(parse({"--test-wall-clock-offset-s=+60"})).test.wall_clock_offset_s, 60);
  EXPECT_EQ(ok(parse({"--test-wall-clock-offset-s=3155760000"})).test.wall_clock_offset_s,
            3'155'760'000);
  EXPECT_EQ(ok(parse({"--test-wall-clock-offset-s=-3155760000"})).test.wall_clock_offset_s,
            -3'155'760'000);
}

TEST(ConfigTestWallClockOffset, InvalidValuesAreRejected) {
  EXPECT_EQ(error(parse({"--test-wall-clock-offset-s=3155760001"})),
            "turnstiled: invalid value \"3155760001\" for --test-wall-clock-offset-s: must be "
            "between -3155760000 and 3155760000 seconds");
  EXPECT_TRUE(contains(error(parse({"--test-wall-clock-offset-s=-3155760001"})),
                       "must be between -3155760000 and 3155760000 seconds"));
  EXPECT_TRUE(contains(error(parse({"--test-wall-clock-offset-s=-99999999999999999999"})),
                       "must be between"));
  EXPECT_TRUE(contains(error(parse({"--test-wall-clock-offset-s=1h"})), "not an integer"));
  EXPECT_TRUE(contains(error(parse({"--test-wall-clock-offset-s="})), "not an integer"));
}

TEST(ConfigTestWallClockOffset, IsNeverReadFromTheEnvironment) {
  const Env env = {{"TURNSTILE_TEST_WALL_CLOCK_OFFSET_S", "-3600"},
                   {"DFLOCKD_TEST_WALL_CLOCK_OFFSET_S", "-3600"},
                   {"TURNSTILE_", "-3600"},
                   {"DFLOCKD_", "-3600"}};
  EXPECT_EQ(ok(parse({}, env)).test.wall_clock_offset_s, 0);
}

TEST(ConfigTestMonotonicOffset, FlagOnlySecondsAheadWithinAYear) {
  EXPECT_EQ(ok(parse({})).test.monotonic_offset_s, 0);
  EXPECT_EQ(ok(parse({"--test-monotonic-offset-s=86400"})).test.monotonic_offset_s, 86'400);
  EXPECT_EQ(ok(parse({"--test-monotonic-offset-s", "31557600"})).test.monotonic_offset_s,
            31'557'600);
  // Never back: the shifted clock must stay above zero.
  EXPECT_TRUE(contains(error(parse({"--test-monotonic-offset-s=-1"})),
                       "must be between 0 and 31557600 seconds"));
  EXPECT_TRUE(contains(error(parse({"--test-monotonic-offset-s=31557601"})), "must be between"));
  EXPECT_EQ(ok(parse({}, {{"TURNSTILE_TEST_MONOTONIC_OFFSET_S", "60"}})).test.monotonic_offset_s,
            0);
}

TEST(ConfigTestFenceKnobs, RangeAndWriteFailuresAreFlagOnlyAndBounded) {
  const Config defaults = ok(parse({}));
  EXPECT_EQ(defaults.test.fence_range, 0);
  EXPECT_EQ(defaults.test.fence_write_failures, 0);
  EXPECT_EQ(ok(parse({"--test-fence-range=64"})).test.fence_range, 64);
  EXPECT_EQ(ok(parse({"--test-fence-range=4194304"})).test.fence_range, 4'194'304);
  EXPECT_TRUE(contains(error(parse({"--test-fence-range=1"})), "must be between 2 and 4194304"));
  EXPECT_TRUE(contains(error(parse({"--test-fence-range=4194305"})), "must be between"));
  EXPECT_EQ(ok(parse({"--test-fence-write-failures", "3"})).test.fence_write_failures, 3);
  EXPECT_TRUE(contains(error(parse({"--test-fence-write-failures=-1"})), "must be between 0"));
  EXPECT_TRUE(contains(error(parse({"--test-fence-write-failures=1001"})), "must be between"));
  const Env env = {{"TURNSTILE_TEST_FENCE_RANGE", "64"},
                   {"TURNSTILE_TEST_FENCE_WRITE_FAILURES", "3"}};
  EXPECT_EQ(ok(parse({}, env)).test.fence_range, 0);
  EXPECT_EQ(ok(parse({}, env)).test.fence_write_failures, 0);
}

TEST(ConfigHelp, ListsTheFenceStateFile) {
  const ConfigResult result = parse({"--help"});
  const auto* exit = std::get_if<ConfigExit>(&result);
  ASSERT_NE(exit, nullptr);
  EXPECT_TRUE(contains(exit->message,
                       "TURNSTILE_FENCE_STATE_FILE, DFLOCKD_FENCE_STATE_FILE; default unset"));
}

// The test hooks (Config::TestHooks) are hidden from --help, and their flags still parse.
TEST(ConfigHelp, HidesTheTestHooksWhichStillParse) {
  const ConfigResult result = parse({"--help"});
  const auto* exit = std::get_if<ConfigExit>(&result);
  ASSERT_NE(exit, nullptr);
  EXPECT_EQ(exit->code, 0);
  for (const std::string hidden :
       {"test-wall-clock-offset-s", "test-fence-range", "test-fence-write-failures"}) {
    EXPECT_FALSE(contains(exit->message, hidden)) << hidden;
  }
  EXPECT_FALSE(contains(exit->message, "FOR TESTS ONLY"));
  EXPECT_FALSE(contains(exit->message, "--test-"));

  const Config config = ok(parse({"--test-wall-clock-offset-s", "-60", "--test-fence-range=128",
                                  "--test-fence-write-failures", "2"}));
  EXPECT_EQ(config.test.wall_clock_offset_s, -60);
  EXPECT_EQ(config.test.fence_range, 128);
  EXPECT_EQ(config.test.fence_write_failures, 2);
  // --help still wins over them, as over any flag.
  const ConfigResult with_help = parse({"--test-fence-range=128", "--help"});
  ASSERT_NE(std::get_if<ConfigExit>(&with_help), nullptr);
  EXPECT_EQ(std::get<ConfigExit>(with_help).code, 0);
}

// ---- the process environment ----------------------------------------------------------------

TEST(ConfigProcessEnvironment, WrapsGetenv) {
  const std::string name = "TURNSTILE_CONFIG_TEST_" + std::to_string(getpid());
  const EnvLookup env = process_environment();
  EXPECT_FALSE(env(name).has_value());
  ASSERT_EQ(setenv(name.c_str(), "value", 1), 0);
  EXPECT_EQ(env(name), "value");
  ASSERT_EQ(setenv(name.c_str(), "", 1), 0);
  EXPECT_EQ(env(name), "");
  unsetenv(name.c_str());
  EXPECT_FALSE(env(name).has_value());
}

// ---- the HTTP API (reference sections 3.1 and 4) ----------------------------------------------

TEST(ConfigHttp, DefaultsAreOffAndFollowTheReference) {
  const Config config = ok(parse({}));
  EXPECT_EQ(config.http_port, 0);
  EXPECT_EQ(config.http_host, "127.0.0.1");  // = --host
  EXPECT_EQ(config.http_session_idle_timeout_s, 20);
  EXPECT_EQ(config.http_max_sessions, 0);
  EXPECT_EQ(config.http_max_sessions_per_ip, 0);
  EXPECT_EQ(config.http_max_connections_per_ip, 0);
  EXPECT_EQ(config.http_rate_limit_per_ip, 0);
  EXPECT_EQ(config.http_rate_limit_burst, 0);
  EXPECT_EQ(config.http_cors_allowed_origins, "");
}

TEST(ConfigHttp, FlagsAndEnvironmentNames) {
  const Config config =
      ok(parse({"--http-port", "8080", "--http-session-idle-timeout=7", "--http-max-sessions=5",
                "--http-max-sessions-per-ip=2", "--http-max-connections-per-ip=3",
                "--http-rate-limit-per-ip=10", "--http-cors-allowed-origins=https://a.example,*"}));
  EXPECT_EQ(config.http_port, 8080);
  EXPECT_EQ(config.http_session_idle_timeout_s, 7);
  EXPECT_EQ(config.http_max_sessions, 5);
  EXPECT_EQ(config.http_max_sessions_per_ip, 2);
  EXPECT_EQ(config.http_max_connections_per_ip, 3);
  EXPECT_EQ(config.http_rate_limit_per_ip, 10);
  EXPECT_EQ(config.http_rate_limit_burst, 10);  // 0 = the rate
  EXPECT_EQ(config.http_cors_allowed_origins, "https://a.example,*");

  const Config from_env = ok(parse({}, {{"DFLOCKD_HTTP_PORT", "9000"},
                                        {"TURNSTILE_HTTP_HOST", "::1"},
                                        {"DFLOCKD_HTTP_SESSION_IDLE_S", "0"},
                                        {"TURNSTILE_HTTP_MAX_SESSIONS", "4"},
                                        {"DFLOCKD_HTTP_MAX_SESSIONS_PER_IP", "1"},
                                        {"DFLOCKD_HTTP_MAX_CONNECTIONS_PER_IP", "6"},
                                        {"DFLOCKD_HTTP_RATE_LIMIT_PER_IP", "3"},
                                        {"DFLOCKD_HTTP_RATE_LIMIT_BURST", "8"},
                                        {"DFLOCKD_HTTP_CORS_ALLOWED_ORIGINS", "*"}}));
  EXPECT_EQ(from_env.http_port, 9000);
  EXPECT_EQ(from_env.http_host, "::1");
  EXPECT_EQ(from_env.http_session_idle_timeout_s, 0);
  EXPECT_EQ(from_env.http_max_sessions, 4);
  EXPECT_EQ(from_env.http_max_sessions_per_ip, 1);
  EXPECT_EQ(from_env.http_max_connections_per_ip, 6);
  EXPECT_EQ(from_env.http_rate_limit_per_ip, 3);
  EXPECT_EQ(from_env.http_rate_limit_burst, 8);
  EXPECT_EQ(from_env.http_cors_allowed_origins, "*");
  // Precedence: flag > TURNSTILE_ > DFLOCKD_.
  EXPECT_EQ(ok(parse({"--http-port=1"}, {{"TURNSTILE_HTTP_PORT", "2"}})).http_port, 1);
  EXPECT_EQ(ok(parse({}, {{"TURNSTILE_HTTP_PORT", "2"}, {"DFLOCKD_HTTP_PORT", "3"}})).http_port, 2);
}

TEST(ConfigHttp, HttpHostDefaultsToHost) {
  EXPECT_EQ(ok(parse({"--host", "0.0.0.0"})).http_host, "0.0.0.0");
  EXPECT_EQ(ok(parse({"--host", "0.0.0.0", "--http-host", "127.0.0.1"})).http_host, "127.0.0.1");
  EXPECT_TRUE(contains(error(parse({"--http-host="})), "--http-host"));
}

TEST(ConfigHttp, HttpPortMustDifferFromPort) {
  EXPECT_EQ(error(parse({"--port=7000", "--http-port=7000"})),
            "turnstiled: --http-port must differ from --port (both are 7000)");
  EXPECT_EQ(error(parse({"--http-port=6388"})),
            "turnstiled: --http-port must differ from --port (both are 6388)");
  EXPECT_EQ(ok(parse({"--port=0", "--http-port=0"})).http_port, 0);  // both ephemeral/off
}

TEST(ConfigHttp, BoundsAreChecked) {
  EXPECT_TRUE(contains(error(parse({"--http-port=65536"})), "--http-port"));
  EXPECT_TRUE(contains(error(parse({"--http-port=-1"})), "--http-port"));
  EXPECT_TRUE(contains(error(parse({"--http-session-idle-timeout=-1"})), "--http-session-idle"));
  EXPECT_TRUE(contains(error(parse({"--http-max-sessions=x"})), "not an integer"));
  EXPECT_TRUE(contains(error(parse({}, {{"DFLOCKD_HTTP_RATE_LIMIT_PER_IP", "-3"}})),
                       "(from DFLOCKD_HTTP_RATE_LIMIT_PER_IP)"));
}

TEST(ConfigHttp, NonLoopbackHttpHostWarnsAboutUnboundedHttpCaps) {
  Config config = ok(parse({"--http-port=8080", "--http-host=0.0.0.0"}));
  const std::vector<std::string> warnings = config_warnings(config);
  ASSERT_EQ(warnings.size(), 4U);
  EXPECT_TRUE(contains(warnings[0], "--http-max-sessions is 0"));
  config.http_port = 0;  // HTTP off: nothing to warn about
  EXPECT_TRUE(config_warnings(config).empty());
}

// ---- cluster mode (Config::Cluster, docs/cluster.md "Flags") --------------------------------

// The smallest valid cluster configuration, as flags; `drop` leaves one of them out (so a test
// can give it another way), `extra` comes after them (so it wins over them).
std::vector<std::string> cluster_args(const std::vector<std::string>& extra = {},
                                      const std::string& drop = "") {
  std::vector<std::string> args;
  for (const std::string flag : {"--raft-dir=/var/lib/turnstile/raft", "--node-id=2",
                                 "--raft-addr=10.0.0.2:7000", "--cluster-secret=cluster-s3cret"}) {
    if (drop.empty() || !flag.starts_with("--" + drop + "=")) args.push_back(flag);
  }
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

const std::string kThreePeers =
    "1=10.0.0.1:7000@10.0.0.1:6388,2=10.0.0.2:7000@10.0.0.2:6388,3=10.0.0.3:7000@10.0.0.3:6388";

TEST(ConfigCluster, OffByDefaultWithTheDocumentedDefaults) {
  const Config config = ok(parse({}));
  const Config::Cluster& cluster = config.cluster;
  EXPECT_FALSE(cluster.enabled());
  EXPECT_EQ(cluster.raft_dir, "");
  EXPECT_EQ(cluster.node_id, 0U);
  EXPECT_EQ(cluster.raft_addr, "");
  EXPECT_TRUE(cluster.peers.empty());
  EXPECT_EQ(cluster.advertise_addr, "");
  EXPECT_FALSE(cluster.bootstrap);
  EXPECT_EQ(cluster.orphan_ttl_s, 0);
  EXPECT_FALSE(cluster.secret.has_value());
  EXPECT_FALSE(cluster.admin_token.has_value());
  EXPECT_EQ(cluster.election_timeout_ms, 1000);
  EXPECT_EQ(cluster.heartbeat_timeout_ms, 100);
  EXPECT_EQ(cluster.snapshot_threshold, 8192);
  EXPECT_EQ(cluster.snapshot_trailing, 1024);
}

TEST(ConfigCluster, MinimalConfigTurnsClusterModeOnWithDefaults) {
  const Config config = ok(parse(cluster_args()));
  const Config::Cluster& cluster = config.cluster;
  EXPECT_TRUE(cluster.enabled());
  EXPECT_EQ(cluster.raft_dir, "/var/lib/turnstile/raft");
  EXPECT_EQ(cluster.node_id, 2U);
  EXPECT_EQ(cluster.raft_addr, "10.0.0.2:7000");
  EXPECT_TRUE(cluster.peers.empty());
  EXPECT_EQ(cluster.advertise_addr, "127.0.0.1:6388");  // --host:--port
  EXPECT_FALSE(cluster.bootstrap);
  EXPECT_EQ(cluster.orphan_ttl_s, 0);
  EXPECT_EQ(cluster.secret, "cluster-s3cret");
  EXPECT_FALSE(cluster.admin_token.has_value());
  EXPECT_EQ(cluster.election_timeout_ms, 1000);
  EXPECT_EQ(cluster.heartbeat_timeout_ms, 100);
  EXPECT_EQ(cluster.snapshot_threshold, 8192);
  EXPECT_EQ(cluster.snapshot_trailing, 1024);
}

TEST(ConfigCluster, FullValidConfig) {
  TempDir dir;
  const std::string secret_file = dir.write("secret", "  from-the-file\n");
  const std::string admin_file = dir.write("admin", "admin-from-file\r\n");
  const Config config =
      ok(parse({"--host=0.0.0.0", "--port=6388", "--http-port=6389", "--raft-dir=/data/raft",
                "--node-id=3", "--raft-addr=[fd00::3]:7000", "--cluster-peers",
                "1=10.0.0.1:7000@10.0.0.1:6388, 2=node2.example:7000@node2.example:"
                "6388, 3=[fd00::3]:7000@[fd00::3]:6388",
                "--cluster-bootstrap", "--orphan-ttl=300", "--cluster-secret-file=" + secret_file,
                "--admin-token-file", admin_file, "--raft-election-timeout-ms=2000",
                "--raft-heartbeat-timeout-ms=200", "--raft-snapshot-threshold=16",
                "--raft-snapshot-trailing=0"}));
  const Config::Cluster& cluster = config.cluster;
  EXPECT_TRUE(cluster.enabled());
  EXPECT_EQ(cluster.raft_dir, "/data/raft");
  EXPECT_EQ(cluster.node_id, 3U);
  EXPECT_EQ(cluster.raft_addr, "[fd00::3]:7000");
  const std::vector<Config::ClusterPeer> peers = {
      {1, "10.0.0.1:7000", "10.0.0.1:6388"},
      {2, "node2.example:7000", "node2.example:6388"},
      {3, "[fd00::3]:7000", "[fd00::3]:6388"},
  };
  EXPECT_EQ(cluster.peers, peers);
  // The listener is a wildcard, but this node's client address is in --cluster-peers.
  EXPECT_EQ(cluster.advertise_addr, "[fd00::3]:6388");
  EXPECT_TRUE(cluster.bootstrap);
  EXPECT_EQ(cluster.orphan_ttl_s, 300);
  EXPECT_EQ(cluster.secret, "from-the-file");
  EXPECT_EQ(cluster.admin_token, "admin-from-file");
  EXPECT_EQ(cluster.election_timeout_ms, 2000);
  EXPECT_EQ(cluster.heartbeat_timeout_ms, 200);
  EXPECT_EQ(cluster.snapshot_threshold, 16);
  EXPECT_EQ(cluster.snapshot_trailing, 0);
  EXPECT_FALSE(config.auth_token.has_value());  // the cluster secret is not the client token
}

TEST(ConfigCluster, EveryFlagFromTheEnvironment) {
  TempDir dir;
  const std::string admin_file = dir.write("admin", "admin-env-file\n");
  const Config config = ok(parse({}, {{"TURNSTILE_RAFT_DIR", "/data/raft"},
                                      {"DFLOCKD_NODE_ID", "1"},
                                      {"TURNSTILE_RAFT_ADDR", "10.0.0.1:7000"},
                                      {"DFLOCKD_CLUSTER_PEERS", kThreePeers},
                                      {"TURNSTILE_ADVERTISE_ADDR", "lb.example:6388"},
                                      {"DFLOCKD_CLUSTER_BOOTSTRAP", "yes"},
                                      {"TURNSTILE_ORPHAN_TTL_S", "60"},
                                      {"DFLOCKD_CLUSTER_SECRET", " env-secret "},
                                      {"DFLOCKD_ADMIN_TOKEN_FILE", admin_file},
                                      {"TURNSTILE_RAFT_ELECTION_TIMEOUT_MS", "5000"},
                                      {"DFLOCKD_RAFT_HEARTBEAT_TIMEOUT_MS", "500"},
                                      {"TURNSTILE_RAFT_SNAPSHOT_THRESHOLD", "100"},
                                      {"DFLOCKD_RAFT_SNAPSHOT_TRAILING", "10"}}));
  const Config::Cluster& cluster = config.cluster;
  EXPECT_EQ(cluster.raft_dir, "/data/raft");
  EXPECT_EQ(cluster.node_id, 1U);
  EXPECT_EQ(cluster.raft_addr, "10.0.0.1:7000");
  ASSERT_EQ(cluster.peers.size(), 3U);
  EXPECT_EQ(cluster.peers[2], (Config::ClusterPeer{3, "10.0.0.3:7000", "10.0.0.3:6388"}));
  EXPECT_EQ(cluster.advertise_addr, "lb.example:6388");  // the flag wins over the peer list
  EXPECT_TRUE(cluster.bootstrap);
  EXPECT_EQ(cluster.orphan_ttl_s, 60);
  EXPECT_EQ(cluster.secret, "env-secret");
  EXPECT_EQ(cluster.admin_token, "admin-env-file");
  EXPECT_EQ(cluster.election_timeout_ms, 5000);
  EXPECT_EQ(cluster.heartbeat_timeout_ms, 500);
  EXPECT_EQ(cluster.snapshot_threshold, 100);
  EXPECT_EQ(cluster.snapshot_trailing, 10);
}

TEST(ConfigCluster, PrecedenceFlagThenTurnstileThenDflockd) {
  const Env ids = {{"TURNSTILE_NODE_ID", "5"}, {"DFLOCKD_NODE_ID", "6"}};
  EXPECT_EQ(ok(parse(cluster_args({"--node-id=4"}, "node-id"), ids)).cluster.node_id, 4U);
  EXPECT_EQ(ok(parse(cluster_args({}, "node-id"), ids)).cluster.node_id, 5U);
  EXPECT_EQ(ok(parse(cluster_args({}, "node-id"), {{"DFLOCKD_NODE_ID", "6"}})).cluster.node_id, 6U);
  const Env addrs = {{"TURNSTILE_RAFT_ADDR", "10.0.0.5:7000"},
                     {"DFLOCKD_RAFT_ADDR", "10.0.0.6:7000"}};
  EXPECT_EQ(ok(parse(cluster_args(), addrs)).cluster.raft_addr, "10.0.0.2:7000");
  EXPECT_EQ(ok(parse(cluster_args({}, "raft-addr"), addrs)).cluster.raft_addr, "10.0.0.5:7000");
  // An empty variable counts as unset; a bad TURNSTILE_ value is an error even with a good
  // DFLOCKD_ one, and names the variable.
  EXPECT_EQ(ok(parse(cluster_args({}, "raft-addr"),
                     {{"TURNSTILE_RAFT_ADDR", ""}, {"DFLOCKD_RAFT_ADDR", "10.0.0.6:7000"}}))
                .cluster.raft_addr,
            "10.0.0.6:7000");
  EXPECT_TRUE(contains(
      error(parse(cluster_args({}, "raft-addr"),
                  {{"TURNSTILE_RAFT_ADDR", "nope"}, {"DFLOCKD_RAFT_ADDR", "10.0.0.6:7000"}})),
      "for --raft-addr (from TURNSTILE_RAFT_ADDR)"));
}

TEST(ConfigCluster, RaftDirTurnsClusterModeOnAndEmptyTurnsItOff) {
  EXPECT_TRUE(ok(parse(cluster_args())).cluster.enabled());
  EXPECT_TRUE(
      ok(parse(cluster_args({}, "raft-dir"), {{"DFLOCKD_RAFT_DIR", "/d"}})).cluster.enabled());
  // An empty variable is unset; an empty flag overrides a variable (single node).
  EXPECT_FALSE(ok(parse({}, {{"TURNSTILE_RAFT_DIR", ""}})).cluster.enabled());
  EXPECT_FALSE(ok(parse({"--raft-dir="}, {{"TURNSTILE_RAFT_DIR", "/d"}})).cluster.enabled());
}

// ---- every cluster flag needs --raft-dir ---------------------------------------------------

struct ClusterFlagValue {
  std::string flag;
  std::string env;  // after TURNSTILE_ / DFLOCKD_
  std::string value;
};

const ClusterFlagValue kClusterFlagValues[] = {
    {"node-id", "NODE_ID", "1"},
    {"raft-addr", "RAFT_ADDR", "10.0.0.1:7000"},
    {"cluster-peers", "CLUSTER_PEERS", "1=10.0.0.1:7000@10.0.0.1:6388"},
    {"advertise-addr", "ADVERTISE_ADDR", "10.0.0.1:6388"},
    {"cluster-bootstrap", "CLUSTER_BOOTSTRAP", "true"},
    {"cluster-secret", "CLUSTER_SECRET", "s3cret"},
    {"cluster-secret-file", "CLUSTER_SECRET_FILE", "/etc/hostname"},
    {"raft-election-timeout-ms", "RAFT_ELECTION_TIMEOUT_MS", "1000"},
    {"raft-heartbeat-timeout-ms", "RAFT_HEARTBEAT_TIMEOUT_MS", "100"},
    {"raft-snapshot-threshold", "RAFT_SNAPSHOT_THRESHOLD", "8192"},
    {"raft-snapshot-trailing", "RAFT_SNAPSHOT_TRAILING", "1024"},
    {"raft-min-free-mb", "RAFT_MIN_FREE_MB", "64"},
    {"raft-start-timeout-s", "RAFT_START_TIMEOUT_S", "120"},
};

class ClusterFlagTest : public testing::TestWithParam<ClusterFlagValue> {};

// --orphan-ttl works on one node too (stable refs are not a cluster feature here).
TEST(ConfigTest, OrphanTtlNeedsNoCluster) {
  EXPECT_EQ(ok(parse({"--orphan-ttl=45"})).cluster.orphan_ttl_s, 45);
  EXPECT_EQ(ok(parse({}, {{"TURNSTILE_ORPHAN_TTL_S", "7"}})).cluster.orphan_ttl_s, 7);
}

// So does the admin token: force-release (DELETE /v1/admin/locks/{key}) is not a cluster feature.
TEST(ConfigTest, AdminTokenNeedsNoCluster) {
  EXPECT_EQ(ok(parse({"--admin-token= adm1n "})).cluster.admin_token, "adm1n");
  EXPECT_EQ(ok(parse({}, {{"DFLOCKD_ADMIN_TOKEN", "env-admin"}})).cluster.admin_token, "env-admin");
  TempDir dir;
  EXPECT_EQ(ok(parse({"--admin-token-file=" + dir.write("a", "from-file\n")})).cluster.admin_token,
            "from-file");
  EXPECT_FALSE(ok(parse({})).cluster.admin_token.has_value());
}

TEST_P(ClusterFlagTest, NeedsRaftDir) {
  const ClusterFlagValue& f = GetParam();
  if (f.flag.ends_with("-file")) {
    // The file is read before the rule is checked; any readable one-line file will do.
    TempDir dir;
    const std::string file = dir.write("secret", "one-line\n");
    EXPECT_EQ(error(parse({"--" + f.flag + "=" + file})),
              "turnstiled: --" + f.flag + " needs --raft-dir (cluster mode)");
    return;
  }
  EXPECT_EQ(error(parse({"--" + f.flag + "=" + f.value})),
            "turnstiled: --" + f.flag + " needs --raft-dir (cluster mode)");
  // Also when it comes from the environment, which the message names.
  EXPECT_EQ(
      error(parse({}, {{"DFLOCKD_" + f.env, f.value}})),
      "turnstiled: --" + f.flag + " (from DFLOCKD_" + f.env + ") needs --raft-dir (cluster mode)");
  // --raft-dir= (empty) is single node: the flag still needs a real one.
  EXPECT_TRUE(contains(error(parse({"--raft-dir=", "--" + f.flag + "=" + f.value})),
                       "--" + f.flag + " needs --raft-dir"));
}

TEST_P(ClusterFlagTest, IsAcceptedInClusterMode) {
  const ClusterFlagValue& f = GetParam();
  if (f.flag.ends_with("-file")) {
    TempDir dir;
    ok(parse(cluster_args({"--" + f.flag + "=" + dir.write("secret", "one-line\n")})));
    return;
  }
  // node-id 1 and raft-addr 10.0.0.1:7000 match the one-entry peer list (which
  // --cluster-bootstrap needs).
  std::vector<std::string> extra;
  for (const std::string arg : {"--node-id=1", "--raft-addr=10.0.0.1:7000",
                                "--cluster-peers=1=10.0.0.1:7000@10.0.0.1:6388"}) {
    if (!arg.starts_with("--" + f.flag + "=")) extra.push_back(arg);
  }
  std::vector<std::string> with_flag = extra;
  with_flag.push_back("--" + f.flag + "=" + f.value);
  ok(parse(cluster_args(with_flag)));
  ok(parse(cluster_args(extra, f.flag), {{"TURNSTILE_" + f.env, f.value}}));
}

INSTANTIATE_TEST_SUITE_P(AllClusterFlags, ClusterFlagTest, testing::ValuesIn(kClusterFlagValues),
                         [](const testing::TestParamInfo<ClusterFlagValue>& param_info) {
                           std::string name;
                           for (char c : param_info.param.flag) name += c == '-' ? '_' : c;
                           return name;
                         });

TEST(ConfigCluster, TheFirstClusterFlagInHelpOrderIsNamed) {
  EXPECT_EQ(error(parse({"--raft-snapshot-trailing=1", "--node-id=1"})),
            "turnstiled: --node-id needs --raft-dir (cluster mode)");
}

// ---- cluster integers: bounds from the flag and both environment names ----------------------

struct ClusterIntegerFlag {
  std::string flag;
  std::string env;
  std::int64_t min;
  std::int64_t max;
  std::int64_t (*read)(const Config&);
  std::vector<std::string> extra = {};  // what makes min and max valid with the rest
};

const ClusterIntegerFlag kClusterIntegerFlags[] = {
    {"node-id", "NODE_ID", 1, kI64Max,
     [](const Config& c) { return static_cast<std::int64_t>(c.cluster.node_id); }},
    {"orphan-ttl", "ORPHAN_TTL_S", 0, kMaxSeconds,
     [](const Config& c) { return c.cluster.orphan_ttl_s; }},
    {"raft-election-timeout-ms",
     "RAFT_ELECTION_TIMEOUT_MS",
     100,
     60'000,
     [](const Config& c) { return c.cluster.election_timeout_ms; },
     {"--raft-heartbeat-timeout-ms=10"}},
    {"raft-heartbeat-timeout-ms",
     "RAFT_HEARTBEAT_TIMEOUT_MS",
     10,
     10'000,
     [](const Config& c) { return c.cluster.heartbeat_timeout_ms; },
     {"--raft-election-timeout-ms=60000"}},
    {"raft-snapshot-threshold", "RAFT_SNAPSHOT_THRESHOLD", 16, 4'294'967'295,
     [](const Config& c) { return c.cluster.snapshot_threshold; }},
    {"raft-snapshot-trailing", "RAFT_SNAPSHOT_TRAILING", 0, 4'294'967'295,
     [](const Config& c) { return c.cluster.snapshot_trailing; }},
    {"raft-min-free-mb", "RAFT_MIN_FREE_MB", 0, 1'048'576,
     [](const Config& c) { return c.cluster.min_free_mb; }},
    {"raft-start-timeout-s", "RAFT_START_TIMEOUT_S", 1, 86'400,
     [](const Config& c) { return c.cluster.start_timeout_s; }},
};

class ClusterIntegerFlagTest : public testing::TestWithParam<ClusterIntegerFlag> {
 protected:
  static ConfigResult with(const std::string& value, const Env& env = {}) {
    const ClusterIntegerFlag& f = GetParam();
    std::vector<std::string> extra = f.extra;
    if (!value.empty()) extra.push_back("--" + f.flag + "=" + value);
    return parse(cluster_args(extra, f.flag), env);
  }
};

TEST_P(ClusterIntegerFlagTest, AcceptsItsMinimumAndMaximum) {
  const ClusterIntegerFlag& f = GetParam();
  EXPECT_EQ(f.read(ok(with(std::to_string(f.min)))), f.min);
  EXPECT_EQ(f.read(ok(with(std::to_string(f.max)))), f.max);
}

TEST_P(ClusterIntegerFlagTest, RejectsOutsideItsBounds) {
  const ClusterIntegerFlag& f = GetParam();
  const std::string below = error(with(std::to_string(f.min - 1)));
  EXPECT_TRUE(contains(below, "for --" + f.flag + ": must be between " + std::to_string(f.min) +
                                  " and " + std::to_string(f.max)))
      << below;
  const std::string above =
      error(with(f.max == kI64Max ? "9223372036854775808" : std::to_string(f.max + 1)));
  EXPECT_TRUE(contains(above, "for --" + f.flag + ": must be between")) << above;
  for (const std::string bad : {"", "abc", "1.5", "7 ", "0x10", "1e3"}) {
    const std::string message = error(parse(cluster_args({"--" + f.flag + "=" + bad})));
    EXPECT_TRUE(contains(message, "for --" + f.flag + ": not an integer")) << message;
  }
}

TEST_P(ClusterIntegerFlagTest, ReadsTurnstileAndDflockdEnvironmentNames) {
  const ClusterIntegerFlag& f = GetParam();
  const std::string value = std::to_string(f.min + 1);
  EXPECT_EQ(f.read(ok(with("", {{"TURNSTILE_" + f.env, value}, {"DFLOCKD_" + f.env, "x"}}))),
            f.min + 1);
  EXPECT_EQ(f.read(ok(with("", {{"DFLOCKD_" + f.env, value}}))), f.min + 1);
  const std::string message = error(with("", {{"DFLOCKD_" + f.env, std::to_string(f.min - 1)}}));
  EXPECT_TRUE(contains(message, "for --" + f.flag + " (from DFLOCKD_" + f.env + "): must be"))
      << message;
}

INSTANTIATE_TEST_SUITE_P(AllClusterIntegerFlags, ClusterIntegerFlagTest,
                         testing::ValuesIn(kClusterIntegerFlags),
                         [](const testing::TestParamInfo<ClusterIntegerFlag>& param_info) {
                           std::string name;
                           for (char c : param_info.param.flag) name += c == '-' ? '_' : c;
                           return name;
                         });

TEST(ConfigCluster, MillisecondBoundsSayMilliseconds) {
  EXPECT_EQ(error(parse(cluster_args({"--raft-election-timeout-ms=99"}))),
            "turnstiled: invalid value \"99\" for --raft-election-timeout-ms: must be between 100 "
            "and 60000 milliseconds");
  EXPECT_TRUE(contains(error(parse(cluster_args({"--orphan-ttl=-1"}))),
                       "must be between 0 and 9223372036 seconds"));
}

TEST(ConfigCluster, HeartbeatMustBeLessThanTheElectionTimeout) {
  EXPECT_EQ(error(parse(cluster_args({"--raft-heartbeat-timeout-ms=1000"}))),
            "turnstiled: --raft-heartbeat-timeout-ms (1000) must be less than "
            "--raft-election-timeout-ms (1000)");
  EXPECT_TRUE(contains(error(parse(cluster_args({"--raft-election-timeout-ms=100"}))),
                       "--raft-heartbeat-timeout-ms (100) must be less than "
                       "--raft-election-timeout-ms (100)"));
  EXPECT_TRUE(contains(error(parse(cluster_args(
                           {"--raft-election-timeout-ms=500", "--raft-heartbeat-timeout-ms=600"}))),
                       "must be less than"));
  const Config config = ok(parse(cluster_args({"--raft-heartbeat-timeout-ms=999"})));
  EXPECT_EQ(config.cluster.heartbeat_timeout_ms, 999);
}

// ---- what cluster mode requires -------------------------------------------------------------

TEST(ConfigCluster, NeedsNodeId) {
  EXPECT_EQ(error(parse(cluster_args({}, "node-id"))),
            "turnstiled: cluster mode (--raft-dir) needs --node-id");
}

TEST(ConfigCluster, NeedsRaftAddr) {
  EXPECT_EQ(error(parse(cluster_args({}, "raft-addr"))),
            "turnstiled: cluster mode (--raft-dir) needs --raft-addr");
  // An empty value is no address.
  EXPECT_EQ(error(parse(cluster_args({"--raft-addr="}))),
            "turnstiled: cluster mode (--raft-dir) needs --raft-addr");
}

TEST(ConfigCluster, NeedsAClusterSecret) {
  const std::string expected =
      "turnstiled: cluster mode needs --cluster-secret or --cluster-secret-file: nodes "
      "authenticate each other with it";
  EXPECT_EQ(error(parse(cluster_args({}, "cluster-secret"))), expected);
  // The client auth token and the admin token are other secrets.
  EXPECT_EQ(error(parse(cluster_args({"--auth-token=a", "--admin-token=b"}, "cluster-secret"))),
            expected);
}

TEST(ConfigCluster, FenceStateFileIsRefused) {
  const std::string expected =
      "turnstiled: --fence-state-file cannot be used in cluster mode: the fence counter is "
      "replicated in the raft log and its snapshots";
  EXPECT_EQ(error(parse(cluster_args({"--fence-state-file=/var/lib/t/fences"}))), expected);
  EXPECT_EQ(error(parse(cluster_args(), {{"DFLOCKD_FENCE_STATE_FILE", "/f"}})), expected);
  // Empty is off, and a single node keeps it.
  ok(parse(cluster_args({"--fence-state-file="})));
  EXPECT_EQ(ok(parse({"--fence-state-file=/f"})).fence_state_file, "/f");
}

TEST(ConfigCluster, BootstrapNeedsPeers) {
  EXPECT_EQ(error(parse(cluster_args({"--cluster-bootstrap"}))),
            "turnstiled: --cluster-bootstrap needs --cluster-peers: the voters of the initial "
            "configuration");
  EXPECT_TRUE(contains(
      error(parse(cluster_args({"--cluster-peers="}), {{"TURNSTILE_CLUSTER_BOOTSTRAP", "1"}})),
      "--cluster-bootstrap needs --cluster-peers"));
  EXPECT_TRUE(ok(parse(cluster_args({"--cluster-bootstrap", "--cluster-peers=" + kThreePeers})))
                  .cluster.bootstrap);
  EXPECT_FALSE(ok(parse(cluster_args({"--cluster-bootstrap=false"}))).cluster.bootstrap);
}

TEST(ConfigCluster, PeersMustListThisNodeWithItsRaftAddress) {
  EXPECT_EQ(error(parse(cluster_args({"--node-id=4", "--cluster-peers=" + kThreePeers}))),
            "turnstiled: --cluster-peers does not list --node-id 4 (the list must include this "
            "node)");
  EXPECT_EQ(
      error(parse(cluster_args({"--raft-addr=10.0.0.2:7001", "--cluster-peers=" + kThreePeers}))),
      "turnstiled: --raft-addr 10.0.0.2:7001 differs from node 2's raft address in "
      "--cluster-peers (10.0.0.2:7000)");
  // Another node's raft address is not this node's.
  EXPECT_TRUE(contains(
      error(parse(cluster_args({"--raft-addr=10.0.0.1:7000", "--cluster-peers=" + kThreePeers}))),
      "differs from node 2's raft address"));
  // Addresses compare in canonical form.
  const Config config = ok(parse(cluster_args(
      {"--raft-addr=[FD00:0:0::2]:07000",
       "--cluster-peers=1=[fd00::1]:7000@[fd00::1]:6388,2=[fd00::2]:7000@[fd00::2]:6388"})));
  EXPECT_EQ(config.cluster.raft_addr, "[fd00::2]:7000");
  EXPECT_EQ(config.cluster.peers[1].raft_address, "[fd00::2]:7000");
}

TEST(ConfigCluster, RaftAddrMustNotBeTheTcpListenersAddress) {
  EXPECT_EQ(error(parse(cluster_args({"--raft-addr=127.0.0.1:6388"}))),
            "turnstiled: --raft-addr 127.0.0.1:6388 is the address of the TCP listener (--host "
            "127.0.0.1, --port 6388): raft needs a port of its own");
  EXPECT_TRUE(
      contains(error(parse(cluster_args({"--host=::1", "--port=7000", "--raft-addr=[0::1]:7000"}))),
               "is the address of the TCP listener"));
  EXPECT_TRUE(contains(error(parse(cluster_args({"--host=Node2.Example", "--port=7000",
                                                 "--raft-addr=node2.example:7000"}))),
                       "is the address of the TCP listener"));
  // A wildcard listener takes the port on every address.
  for (const std::string wildcard : {"0.0.0.0", "::"}) {
    EXPECT_TRUE(contains(error(parse(cluster_args({"--host=" + wildcard, "--port=7000",
                                                   "--advertise-addr=10.0.0.2:7000"}))),
                         "is the address of the TCP listener"))
        << wildcard;
  }
  // Another port, or another address on the same port, is fine.
  ok(parse(cluster_args({"--raft-addr=127.0.0.1:7000"})));
  ok(parse(cluster_args({"--host=10.0.0.2", "--port=7000", "--raft-addr=10.0.0.3:7000"})));
}

TEST(ConfigCluster, RaftAddrMustNotBeTheHttpApisAddress) {
  EXPECT_EQ(error(parse(cluster_args({"--raft-addr=127.0.0.1:7000", "--http-port=7000"}))),
            "turnstiled: --raft-addr 127.0.0.1:7000 is the address of the HTTP API (--http-host "
            "127.0.0.1, --http-port 7000): raft needs a port of its own");
  EXPECT_TRUE(contains(error(parse(cluster_args({"--http-port=7000", "--http-host=10.0.0.2"}))),
                       "is the address of the HTTP API"));
  EXPECT_TRUE(contains(error(parse(cluster_args({"--http-port=7000", "--http-host=::"}))),
                       "is the address of the HTTP API"));
  ok(parse(cluster_args({"--http-port=7001"})));
  ok(parse(cluster_args({"--http-port=7000", "--http-host=10.0.0.9"})));
}

// ---- the advertised client address ----------------------------------------------------------

TEST(ConfigCluster, AdvertiseAddrDefaultsToThisNodesClientAddressInThePeers) {
  EXPECT_EQ(ok(parse(cluster_args({"--cluster-peers=" + kThreePeers}))).cluster.advertise_addr,
            "10.0.0.2:6388");
}

TEST(ConfigCluster, AdvertiseAddrDefaultsToTheTcpListenerWithoutPeers) {
  EXPECT_EQ(ok(parse(cluster_args())).cluster.advertise_addr, "127.0.0.1:6388");
  EXPECT_EQ(ok(parse(cluster_args({"--host=10.1.2.3", "--port=7777"}))).cluster.advertise_addr,
            "10.1.2.3:7777");
  EXPECT_EQ(ok(parse(cluster_args({"--host=::1"}))).cluster.advertise_addr, "[::1]:6388");
  EXPECT_EQ(ok(parse(cluster_args({"--host=Node2.Example"}))).cluster.advertise_addr,
            "node2.example:6388");
}

TEST(ConfigCluster, AdvertiseAddrGivenWins) {
  EXPECT_EQ(
      ok(parse(cluster_args({"--advertise-addr=[FD00::9]:6388", "--cluster-peers=" + kThreePeers})))
          .cluster.advertise_addr,
      "[fd00::9]:6388");
}

TEST(ConfigCluster, AWildcardOrEphemeralListenerNeedsAdvertiseAddr) {
  for (const std::string wildcard : {"0.0.0.0", "::", "[::]"}) {
    const std::string message = error(parse(cluster_args({"--host=" + wildcard})));
    EXPECT_TRUE(contains(message, "cluster mode needs --advertise-addr")) << message;
    EXPECT_TRUE(contains(message, "wildcard")) << message;
    EXPECT_TRUE(contains(message, "--host \"" + wildcard + "\"")) << message;
    EXPECT_EQ(ok(parse(cluster_args({"--host=" + wildcard, "--advertise-addr=10.0.0.2:6388"})))
                  .cluster.advertise_addr,
              "10.0.0.2:6388");
  }
  const std::string message = error(parse(cluster_args({"--port=0"})));
  EXPECT_TRUE(contains(message, "cluster mode needs --advertise-addr")) << message;
  EXPECT_TRUE(contains(message, "--port 0")) << message;
  // This node's entry in --cluster-peers is enough.
  ok(parse(cluster_args({"--host=0.0.0.0", "--cluster-peers=" + kThreePeers})));
}

// ---- host:port addresses --------------------------------------------------------------------

TEST(ConfigClusterAddress, AcceptedFormsAreStoredCanonical) {
  const std::pair<std::string, std::string> cases[] = {
      {"10.0.0.2:7000", "10.0.0.2:7000"},
      {"10.0.0.2:1", "10.0.0.2:1"},
      {"10.0.0.2:65535", "10.0.0.2:65535"},
      {"10.0.0.2:007000", "10.0.0.2:7000"},
      {"Node-2.Example_x:7000", "node-2.example_x:7000"},
      {"localhost:7000", "localhost:7000"},
      {"[::1]:7000", "[::1]:7000"},
      {"[FD00:0000::0002]:7000", "[fd00::2]:7000"},
      {"[::ffff:10.0.0.2]:7000", "[::ffff:10.0.0.2]:7000"},
  };
  for (const auto& [given, stored] : cases) {
    EXPECT_EQ(ok(parse(cluster_args({"--raft-addr=" + given}))).cluster.raft_addr, stored) << given;
    EXPECT_EQ(ok(parse(cluster_args({"--advertise-addr=" + given}))).cluster.advertise_addr, stored)
        << given;
  }
}

TEST(ConfigClusterAddress, MalformedAddressesAreRejectedWithTheReason) {
  const std::pair<std::string, std::string> cases[] = {
      {"10.0.0.2", "not host:port or [v6]:port"},
      {"10.0.0.2:", "the port must be between 1 and 65535"},
      {"10.0.0.2:0", "the port must be between 1 and 65535"},
      {"10.0.0.2:65536", "the port must be between 1 and 65535"},
      {"10.0.0.2:+70", "the port must be between 1 and 65535"},
      {"10.0.0.2:7000x", "the port must be between 1 and 65535"},
      {":7000", "empty host"},
      {"[]:7000", "empty host"},
      {"::1:7000", "an IPv6 address goes in brackets"},
      {"[::1]", "not host:port or [v6]:port"},
      {"[::1]7000", "not host:port or [v6]:port"},
      {"[::1:7000", "not host:port or [v6]:port"},
      {"[not-v6]:7000", "not an IPv6 address"},
      {"[10.0.0.2]:7000", "not an IPv6 address"},
      {"999.0.0.1:7000", "not an IPv4 address"},
      {"host name:7000", "the host must be an IP address or a host name"},
      {"a/b:7000", "the host must be an IP address or a host name"},
      {"0.0.0.0:7000", "0.0.0.0 is a wildcard"},
      {"[::]:7000", ":: is a wildcard"},
      {"[0:0::0]:7000", ":: is a wildcard"},
  };
  for (const auto& [given, reason] : cases) {
    for (const std::string flag : {"raft-addr", "advertise-addr"}) {
      const std::string message = error(parse(cluster_args({"--" + flag + "=" + given})));
      EXPECT_TRUE(contains(message, "for --" + flag + ": " + reason)) << given << ": " << message;
    }
  }
  EXPECT_TRUE(
      contains(error(parse(cluster_args({}, "raft-addr"), {{"DFLOCKD_RAFT_ADDR", "x"}})),
               "invalid value \"x\" for --raft-addr (from DFLOCKD_RAFT_ADDR): not host:port"));
}

// ---- --cluster-peers ------------------------------------------------------------------------

TEST(ConfigClusterPeers, ParsesEveryEntryInOrder) {
  const Config config = ok(parse(cluster_args(
      {"--cluster-peers= 9=r9.example:7000@c9.example:6388 ,2=10.0.0.2:7000@10.0.0.2:6388,"
       "7=[fd00::7]:7000@[FD00::7]:6388 "})));
  const std::vector<Config::ClusterPeer> expected = {
      {9, "r9.example:7000", "c9.example:6388"},
      {2, "10.0.0.2:7000", "10.0.0.2:6388"},
      {7, "[fd00::7]:7000", "[fd00::7]:6388"},
  };
  EXPECT_EQ(config.cluster.peers, expected);
}

TEST(ConfigClusterPeers, IdsSpanOneTo2To63Minus1) {
  const Config config =
      ok(parse(cluster_args({"--node-id=9223372036854775807",
                             "--cluster-peers=1=10.0.0.1:7000@10.0.0.1:6388,"
                             "9223372036854775807=10.0.0.2:7000@10.0.0.2:6388"})));
  EXPECT_EQ(config.cluster.node_id, 9'223'372'036'854'775'807U);
  EXPECT_EQ(config.cluster.peers[1].id, 9'223'372'036'854'775'807U);
}

TEST(ConfigClusterPeers, EmptyListIsNoList) {
  EXPECT_TRUE(ok(parse(cluster_args({"--cluster-peers="}))).cluster.peers.empty());
  EXPECT_TRUE(ok(parse(cluster_args({"--cluster-peers=  "}))).cluster.peers.empty());
}

TEST(ConfigClusterPeers, MalformedEntriesAreRejectedAndNamed) {
  const std::string a = "1=10.0.0.1:7000@10.0.0.1:6388";
  const std::pair<std::string, std::string> cases[] = {
      {a + ",", "entry 2 is empty"},
      {a + ",,2=10.0.0.2:7000@10.0.0.2:6388", "entry 2 is empty"},
      {"," + a, "entry 1 is empty"},
      {"10.0.0.1:7000@10.0.0.1:6388",
       "entry 1 \"10.0.0.1:7000@10.0.0.1:6388\": expected "
       "id=raftHost:port@clientHost:port"},
      {"1=10.0.0.1:7000", "expected id=raftHost:port@clientHost:port"},
      {"1=10.0.0.1:7000@10.0.0.1:6388@x:1", "expected id=raftHost:port@clientHost:port"},
      {"1@10.0.0.1:7000=10.0.0.1:6388", "expected id=raftHost:port@clientHost:port"},
      {"=10.0.0.1:7000@10.0.0.1:6388", "the id is not a number"},
      {"x=10.0.0.1:7000@10.0.0.1:6388", "the id is not a number"},
      {"-1=10.0.0.1:7000@10.0.0.1:6388", "the id is not a number"},
      {"+1=10.0.0.1:7000@10.0.0.1:6388", "the id is not a number"},
      {"0=10.0.0.1:7000@10.0.0.1:6388", "the id must be between 1 and 9223372036854775807"},
      {"9223372036854775808=10.0.0.1:7000@10.0.0.1:6388", "the id must be between 1 and"},
      {"1=10.0.0.1@10.0.0.1:6388", "raft address \"10.0.0.1\": not host:port"},
      {"1=10.0.0.1:7000@::1:6388", "client address \"::1:6388\": an IPv6 address goes in brackets"},
      {"1=0.0.0.0:7000@10.0.0.1:6388", "raft address \"0.0.0.0:7000\": 0.0.0.0 is a wildcard"},
      {"1=10.0.0.1:7000@[::]:6388", "client address \"[::]:6388\": :: is a wildcard"},
      {"1 =10.0.0.1:7000@10.0.0.1:6388", "the id is not a number"},
      {"1=10.0.0.1:7000@ 10.0.0.1:6388", "the host must be an IP address or a host name"},
      {"1=10.0.0.1:7000 @10.0.0.1:6388", "the port must be between 1 and 65535"},
  };
  for (const auto& [given, reason] : cases) {
    const std::string message = error(parse(cluster_args({"--cluster-peers=" + given})));
    EXPECT_TRUE(contains(message, "invalid value for --cluster-peers: "))
        << given << ": " << message;
    EXPECT_TRUE(contains(message, reason)) << given << ": " << message;
  }
  EXPECT_TRUE(contains(error(parse(cluster_args(), {{"TURNSTILE_CLUSTER_PEERS", a + ","}})),
                       "for --cluster-peers (from TURNSTILE_CLUSTER_PEERS): entry 2 is empty"));
}

TEST(ConfigClusterPeers, DuplicatesAreRejected) {
  const std::pair<std::string, std::string> cases[] = {
      {"1=10.0.0.1:7000@10.0.0.1:6388,1=10.0.0.2:7000@10.0.0.2:6388",
       "entry 2 \"1=10.0.0.2:7000@10.0.0.2:6388\": node id 1 is listed twice"},
      {"1=10.0.0.1:7000@10.0.0.1:6388,2=10.0.0.1:7000@10.0.0.2:6388",
       "entry 2 \"2=10.0.0.1:7000@10.0.0.2:6388\": raft address 10.0.0.1:7000 is already node "
       "1's raft address"},
      // The same IPv6 address written two ways is one address.
      {"1=[fd00::1]:7000@[fd00::1]:6388,2=[FD00:0::1]:7000@[fd00::2]:6388",
       "raft address [fd00::1]:7000 is already node 1's raft address"},
      {"1=10.0.0.1:7000@10.0.0.9:6388,2=10.0.0.2:7000@10.0.0.9:6388",
       "client address 10.0.0.9:6388 is already node 1's client address"},
      {"1=10.0.0.1:7000@10.0.0.1:6388,2=10.0.0.1:6388@10.0.0.2:6388",
       "raft address 10.0.0.1:6388 is already node 1's client address"},
      {"1=10.0.0.1:7000@10.0.0.1:7000",
       "client address 10.0.0.1:7000 is already node 1's raft "
       "address"},
  };
  for (const auto& [given, reason] : cases) {
    const std::string message = error(parse(cluster_args({"--cluster-peers=" + given})));
    EXPECT_TRUE(contains(message, reason)) << given << ": " << message;
  }
}

TEST(ConfigClusterPeers, LongListsStayOnOneLineAndNameOnlyTheBadEntry) {
  std::string peers;
  for (int id = 1; id <= 50; ++id) {
    peers += (id > 1 ? "," : "") + std::to_string(id) + "=10.0.1." + std::to_string(id) +
             ":7000@10.0.2." + std::to_string(id) + ":6388";
  }
  const Config config =
      ok(parse(cluster_args({"--raft-addr=10.0.1.2:7000", "--cluster-peers=" + peers})));
  EXPECT_EQ(config.cluster.peers.size(), 50U);
  const std::string message =
      error(parse(cluster_args({"--cluster-peers", peers + ",51=x\ny:1@z:2"})));
  EXPECT_TRUE(contains(message, "entry 51 \"51=x\\ny:1@z:2\"")) << message;
  EXPECT_FALSE(contains(message, "10.0.1.1:7000")) << message;
}

// ---- the cluster secret and the admin token -------------------------------------------------

TEST(ConfigClusterSecrets, TrimmedOneLineNonEmptyLikeTheAuthToken) {
  EXPECT_EQ(ok(parse(cluster_args({"--cluster-secret= s3 cret \t"}))).cluster.secret, "s3 cret");
  EXPECT_EQ(ok(parse(cluster_args({"--admin-token", " adm1n "}))).cluster.admin_token, "adm1n");
  for (const std::string flag : {"cluster-secret", "admin-token"}) {
    EXPECT_EQ(error(parse(cluster_args({"--" + flag + "="}))),
              "turnstiled: invalid value for --" + flag + ": empty after trimming whitespace");
    const std::string message = error(parse(cluster_args({"--" + flag, "topsecret\nx"})));
    EXPECT_TRUE(contains(message, "contains CR or LF")) << message;
    EXPECT_FALSE(contains(message, "topsecret")) << message;
    EXPECT_TRUE(contains(error(parse(cluster_args({"--" + flag, std::string(65537, 'a')}))),
                         "longer than 65536 bytes"));
  }
  // An empty variable is an error, not unset, as for the auth token.
  EXPECT_EQ(error(parse(cluster_args({}, "cluster-secret"), {{"TURNSTILE_CLUSTER_SECRET", ""}})),
            "turnstiled: invalid value for --cluster-secret (from TURNSTILE_CLUSTER_SECRET): empty "
            "after trimming whitespace");
  EXPECT_TRUE(contains(error(parse(cluster_args(), {{"DFLOCKD_ADMIN_TOKEN", " "}})),
                       "for --admin-token (from DFLOCKD_ADMIN_TOKEN): empty"));
}

TEST(ConfigClusterSecrets, FilesAreReadTrimmedAndOneLine) {
  TempDir dir;
  for (const std::string flag : {"cluster-secret-file", "admin-token-file"}) {
    // --cluster-secret would win over --cluster-secret-file, which would then not be read.
    const std::string drop = flag == "cluster-secret-file" ? "cluster-secret" : "";
    const std::string empty = dir.write("empty", " \n");
    EXPECT_EQ(error(parse(cluster_args({"--" + flag, empty}, drop))),
              "turnstiled: invalid value \"" + empty + "\" for --" + flag + ": the file is empty");
    const std::string two = dir.write("two", "secret-one\nsecret-two\n");
    const std::string message = error(parse(cluster_args({"--" + flag, two}, drop)));
    EXPECT_TRUE(contains(message, "more than one line")) << message;
    EXPECT_FALSE(contains(message, "secret-one")) << message;
    EXPECT_TRUE(contains(error(parse(cluster_args({"--" + flag, dir.path() + "/missing"}, drop))),
                         "for --" + flag + ": cannot open"));
    EXPECT_TRUE(contains(error(parse(cluster_args({"--" + flag + "="}, drop))), "empty path"));
  }
  const Config config =
      ok(parse(cluster_args({"--cluster-secret-file", dir.write("s", "\tsecret\r\n"),
                             "--admin-token-file", dir.write("a", "admin\n")},
                            "cluster-secret")));
  EXPECT_EQ(config.cluster.secret, "secret");
  EXPECT_EQ(config.cluster.admin_token, "admin");
}

// --cluster-secret > --cluster-secret-file > TURNSTILE_CLUSTER_SECRET > DFLOCKD_CLUSTER_SECRET >
// TURNSTILE_CLUSTER_SECRET_FILE > DFLOCKD_CLUSTER_SECRET_FILE, as for the auth token.
TEST(ConfigClusterSecrets, PrecedenceChainLikeTheAuthToken) {
  TempDir dir;
  const std::string flag_file = dir.write("flag", "from-flag-file\n");
  Env env = {{"TURNSTILE_CLUSTER_SECRET", "from-turnstile-env"},
             {"DFLOCKD_CLUSTER_SECRET", "from-dflockd-env"},
             {"TURNSTILE_CLUSTER_SECRET_FILE", dir.write("t", "from-turnstile-file\n")},
             {"DFLOCKD_CLUSTER_SECRET_FILE", dir.write("d", "from-dflockd-file\n")}};
  const auto secret = [&](const std::vector<std::string>& extra) {
    return ok(parse(cluster_args(extra, "cluster-secret"), env)).cluster.secret;
  };
  EXPECT_EQ(secret({"--cluster-secret-file", flag_file, "--cluster-secret", "from-flag"}),
            "from-flag");
  EXPECT_EQ(secret({"--cluster-secret-file", flag_file}), "from-flag-file");
  EXPECT_EQ(secret({}), "from-turnstile-env");
  env.erase("TURNSTILE_CLUSTER_SECRET");
  EXPECT_EQ(secret({}), "from-dflockd-env");
  env.erase("DFLOCKD_CLUSTER_SECRET");
  EXPECT_EQ(secret({}), "from-turnstile-file");
  env.erase("TURNSTILE_CLUSTER_SECRET_FILE");
  EXPECT_EQ(secret({}), "from-dflockd-file");
  // Only the winning source is read.
  EXPECT_EQ(
      ok(parse(cluster_args({"--admin-token=x", "--admin-token-file=" + dir.path() + "/missing"})))
          .cluster.admin_token,
      "x");
  EXPECT_EQ(ok(parse(cluster_args(), {{"DFLOCKD_ADMIN_TOKEN", "y"},
                                      {"TURNSTILE_ADMIN_TOKEN_FILE", dir.path() + "/missing"}}))
                .cluster.admin_token,
            "y");
}

TEST(ConfigClusterSecrets, TheThreeSecretsAreIndependent) {
  const Config config = ok(parse(cluster_args({"--auth-token=client", "--admin-token=admin"}),
                                 {{"TURNSTILE_CLUSTER_SECRET", "ignored: the flag wins"}}));
  EXPECT_EQ(config.auth_token, "client");
  EXPECT_EQ(config.cluster.secret, "cluster-s3cret");
  EXPECT_EQ(config.cluster.admin_token, "admin");
  EXPECT_FALSE(ok(parse(cluster_args())).cluster.admin_token.has_value());  // optional
}

TEST(ConfigHelp, ExplainsClusterMode) {
  const ConfigResult result = parse({"--help"});
  const auto* exit = std::get_if<ConfigExit>(&result);
  ASSERT_NE(exit, nullptr);
  EXPECT_TRUE(contains(exit->message, "--raft-dir turns it on"));
  EXPECT_TRUE(
      contains(exit->message, "--cluster-secret and --admin-token are resolved the same way"));
  EXPECT_TRUE(contains(exit->message, "(1..9223372036854775807)"));
  EXPECT_TRUE(contains(exit->message, "(100..60000)"));
}

}  // namespace
}  // namespace turnstile::net
