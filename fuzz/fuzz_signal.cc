// Fuzzes signal names and the subscription index (core/signal_pattern.h, core/signal_index.h).
//
// Input: a stream of operations, each one byte of kind then its arguments: a name is a length
// byte then that many bytes, either raw or (one flag byte) drawn from the small alphabet
// "a", "b", ".", "*", ">" so that valid patterns and channels that meet are common.
//
// Checks:
//  * the name checks never crash on any bytes; a name they accept has no empty token, a channel
//    they accept has no wildcard, and a pattern they accept has its wildcards as whole tokens and
//    `>` last only;
//  * add, remove and remove_all answer as a naive set of (pattern, group, listener) does, and
//    size() and count() agree with it;
//  * match() names exactly the subscriptions whose pattern signal_pattern_matches() the channel,
//    each in its delivery step (exact or wildcard, plain or group).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "core/signal_index.h"
#include "core/signal_pattern.h"
#include "fuzz/fuzz_input.h"

namespace turnstile::fuzz {
namespace {

using core::SignalIndex;
using core::SignalNameError;

constexpr const char* kHarness = "fuzz_signal";

void check(bool condition, const char* what) {
  if (!condition) fail(kHarness, what);
}

std::string name(FuzzInput& in) {
  const std::size_t length = in.below(24);
  if (!in.flag()) return std::string(in.bytes(length));
  static constexpr std::string_view kAlphabet[] = {"a", "b", ".", "*", ">", "a", "."};
  std::string out;
  for (std::size_t i = 0; i < length; ++i) out += kAlphabet[in.below(std::size(kAlphabet))];
  return out;
}

// The rules restated from the documentation, to hold the checks to them.
void check_name_rules(const std::string& text) {
  const std::vector<std::string_view> parts = core::signal_tokens(text);
  if (core::check_signal_pattern(text) == SignalNameError::kNone) {
    for (std::size_t i = 0; i < parts.size(); ++i) {
      const std::string_view token = parts[i];
      check(!token.empty(), "an accepted pattern has an empty token");
      const bool wildcard = token == "*" || token == ">";
      check(wildcard || token.find_first_of("*>") == std::string_view::npos,
            "an accepted pattern has a wildcard inside a token");
      check(token != ">" || i + 1 == parts.size(), "an accepted pattern has '>' before its end");
    }
  }
  if (core::check_signal_channel(text) == SignalNameError::kNone) {
    check(text.find_first_of("*>") == std::string::npos, "an accepted channel has a wildcard");
    for (const std::string_view token : parts) {
      check(!token.empty(), "an accepted channel has an empty token");
    }
  }
}

}  // namespace
}  // namespace turnstile::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace turnstile::fuzz;
  FuzzInput in(data, size);
  SignalIndex index;
  std::set<std::tuple<std::string, std::string, SignalIndex::Listener>> naive;
  for (int step = 0; step < 64 && !in.empty(); ++step) {
    const std::size_t kind = in.below(4);
    if (kind == 3) {  // remove_all
      const SignalIndex::Listener who = in.below(4);
      std::size_t of_who = 0;
      for (auto it = naive.begin(); it != naive.end();) {
        if (std::get<2>(*it) == who) {
          it = naive.erase(it);
          ++of_who;
        } else {
          ++it;
        }
      }
      check(index.remove_all(who) == of_who, "remove_all counted differently");
      continue;
    }
    const std::string text = name(in);
    check_name_rules(text);
    if (kind == 2) {  // match
      if (turnstile::core::check_signal_channel(text) != SignalNameError::kNone) continue;
      using Row = std::tuple<int, std::string, std::string, SignalIndex::Listener>;
      std::vector<Row> expected;
      for (const auto& [pattern, group, who] : naive) {
        if (!turnstile::core::signal_pattern_matches(pattern, text)) continue;
        const int kind_of = (turnstile::core::signal_pattern_has_wildcard(pattern) ? 2 : 0) +
                            (group.empty() ? 0 : 1);
        expected.emplace_back(kind_of, pattern, group, who);
      }
      SignalIndex::Matches matches;
      index.match(text, matches);
      std::vector<Row> got;
      int kind_of = 0;
      for (const auto* part :
           {&matches.exact, &matches.exact_groups, &matches.wildcard, &matches.wildcard_groups}) {
        for (const SignalIndex::Subscribers& subscribers : *part) {
          for (const SignalIndex::Listener who : *subscribers.members) {
            got.emplace_back(kind_of, *subscribers.pattern, *subscribers.group, who);
          }
        }
        ++kind_of;
      }
      std::sort(expected.begin(), expected.end());
      std::sort(got.begin(), got.end());
      check(got == expected, "match() differs from trying every subscription");
      continue;
    }
    if (turnstile::core::check_signal_pattern(text) != SignalNameError::kNone) continue;
    const std::string group = in.flag() ? "" : std::string(1, static_cast<char>('g' + in.below(2)));
    const SignalIndex::Listener who = in.below(4);
    const auto key = std::make_tuple(text, group, who);
    if (kind == 0) {
      check(index.add(text, group, who) == naive.insert(key).second, "add answered wrongly");
    } else {
      check(index.remove(text, group, who) == (naive.erase(key) == 1), "remove answered wrongly");
    }
    check(index.size() == naive.size(), "size() differs");
  }
  return 0;
}
