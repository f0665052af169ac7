// Signal names and the subscription index (core/signal_pattern.h, core/signal_index.h): the
// reference's validation and matching rules, and the index against a naive matcher that tries
// every subscription with signal_pattern_matches(), on random patterns and channels.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/signal_index.h"
#include "core/signal_pattern.h"

namespace turnstile::core {
namespace {

// ---- names --------------------------------------------------------------------------------

TEST(SignalPattern, WholeTokenWildcardsAndATailOnlyAtTheEnd) {
  for (const char* ok : {"a", "a.b.c", "*", ">", "a.*", "a.>", "*.b.>", "*.*", "orders.eu.*.>"}) {
    EXPECT_EQ(check_signal_pattern(ok), SignalNameError::kNone) << ok;
  }
  EXPECT_EQ(check_signal_pattern("a.b*"), SignalNameError::kPartialWildcard);
  EXPECT_EQ(check_signal_pattern("a.*x"), SignalNameError::kPartialWildcard);
  EXPECT_EQ(check_signal_pattern(">b"), SignalNameError::kPartialWildcard);
  EXPECT_EQ(check_signal_pattern("a.>>"), SignalNameError::kPartialWildcard);
  EXPECT_EQ(check_signal_pattern("a.>.b"), SignalNameError::kTailNotLast);
  EXPECT_EQ(check_signal_pattern(">.>"), SignalNameError::kTailNotLast);
  EXPECT_EQ(check_signal_pattern("a..b"), SignalNameError::kEmptyToken);
  EXPECT_EQ(check_signal_pattern(".a"), SignalNameError::kEmptyToken);
  EXPECT_EQ(check_signal_pattern("a."), SignalNameError::kEmptyToken);
  EXPECT_EQ(check_signal_pattern(""), SignalNameError::kEmptyToken);
}

TEST(SignalPattern, AChannelIsLiteral) {
  for (const char* ok : {"a", "a.b.c", "orders.eu.42", "x-y_z.\x01"}) {
    EXPECT_EQ(check_signal_channel(ok), SignalNameError::kNone) << ok;
  }
  for (const char* bad : {"*", "a.*", "a.>", "a*b", "b>"}) {
    EXPECT_EQ(check_signal_channel(bad), SignalNameError::kWildcardInChannel) << bad;
  }
  EXPECT_EQ(check_signal_channel("a..b"), SignalNameError::kEmptyToken);
  EXPECT_EQ(check_signal_channel("a."), SignalNameError::kEmptyToken);
  EXPECT_EQ(signal_name_error_text(SignalNameError::kTailNotLast), "'>' must be the last token");
}

TEST(SignalPattern, MatchesTokenByToken) {
  EXPECT_TRUE(signal_pattern_matches("a.b", "a.b"));
  EXPECT_FALSE(signal_pattern_matches("a.b", "a.b.c"));
  EXPECT_FALSE(signal_pattern_matches("a.b.c", "a.b"));
  EXPECT_TRUE(signal_pattern_matches("a.*", "a.b"));
  EXPECT_FALSE(signal_pattern_matches("a.*", "a"));
  EXPECT_FALSE(signal_pattern_matches("a.*", "a.b.c"));
  EXPECT_TRUE(signal_pattern_matches("a.>", "a.b"));
  EXPECT_TRUE(signal_pattern_matches("a.>", "a.b.c.d"));
  EXPECT_FALSE(signal_pattern_matches("a.>", "a"));  // `>` needs at least one token
  EXPECT_TRUE(signal_pattern_matches(">", "a"));
  EXPECT_TRUE(signal_pattern_matches("*.b.>", "x.b.y"));
  EXPECT_FALSE(signal_pattern_matches("*.b.>", "x.c.y"));
  EXPECT_FALSE(signal_pattern_matches("ab", "a"));
  EXPECT_TRUE(signal_pattern_has_wildcard("a.*.c"));
  EXPECT_TRUE(signal_pattern_has_wildcard("a.>"));
  EXPECT_FALSE(signal_pattern_has_wildcard("a.b"));
}

// ---- the index ------------------------------------------------------------------------------

// What a match names, flattened: (step, pattern, group, listener), sorted.
using Flat = std::vector<std::tuple<int, std::string, std::string, SignalIndex::Listener>>;

Flat flatten(const SignalIndex::Matches& matches) {
  Flat flat;
  int step = 0;
  for (const auto* part :
       {&matches.exact, &matches.exact_groups, &matches.wildcard, &matches.wildcard_groups}) {
    ++step;
    for (const SignalIndex::Subscribers& subscribers : *part) {
      for (const SignalIndex::Listener who : *subscribers.members) {
        flat.emplace_back(step, *subscribers.pattern, *subscribers.group, who);
      }
    }
  }
  std::sort(flat.begin(), flat.end());
  return flat;
}

Flat match(const SignalIndex& index, std::string_view channel) {
  SignalIndex::Matches matches;
  index.match(channel, matches);
  return flatten(matches);
}

TEST(SignalIndex, SortsMatchesIntoTheReferenceSteps) {
  SignalIndex index;
  EXPECT_TRUE(index.add("orders.eu", "", 1));
  EXPECT_TRUE(index.add("orders.eu", "workers", 2));
  EXPECT_TRUE(index.add("orders.eu", "workers", 3));
  EXPECT_TRUE(index.add("orders.*", "", 1));
  EXPECT_TRUE(index.add("orders.>", "audit", 4));
  EXPECT_TRUE(index.add("orders.us", "", 5));
  EXPECT_TRUE(index.add(">", "", 6));
  const Flat expected = {{1, "orders.eu", "", 1},        {2, "orders.eu", "workers", 2},
                         {2, "orders.eu", "workers", 3}, {3, ">", "", 6},
                         {3, "orders.*", "", 1},         {4, "orders.>", "audit", 4}};
  EXPECT_EQ(match(index, "orders.eu"), expected);
  EXPECT_EQ(match(index, "orders"), (Flat{{3, ">", "", 6}}));
  EXPECT_EQ(index.size(), 7u);
}

TEST(SignalIndex, ADuplicateIsANoOpAndRemovalsLeaveNothingBehind) {
  SignalIndex index;
  EXPECT_TRUE(index.add("a.*", "", 1));
  EXPECT_FALSE(index.add("a.*", "", 1));  // a duplicate: no-op, not counted
  EXPECT_TRUE(index.add("a.*", "g", 1));  // the same pattern in a group is another subscription
  EXPECT_TRUE(index.add("a.b.>", "", 1));
  EXPECT_EQ(index.count(1), 3u);
  EXPECT_FALSE(index.remove("a.*", "", 2));
  EXPECT_FALSE(index.remove("x", "", 1));
  EXPECT_TRUE(index.remove("a.*", "", 1));
  EXPECT_FALSE(index.remove("a.*", "", 1));
  EXPECT_EQ(index.count(1), 2u);
  EXPECT_EQ(index.remove_all(1), 2u);
  EXPECT_EQ(index.count(1), 0u);
  EXPECT_EQ(index.size(), 0u);
  EXPECT_TRUE(match(index, "a.b.c").empty());
  std::size_t seen = 0;
  index.for_each([&](const SignalIndex::Subscribers&) { ++seen; });
  EXPECT_EQ(seen, 0u);
}

TEST(SignalIndex, ForEachListsEveryPatternAndGroupWithItsListeners) {
  SignalIndex index;
  index.add("a.>", "", 1);
  index.add("a.>", "", 2);
  index.add("a.>", "g", 3);
  index.add("a", "", 4);
  std::map<std::pair<std::string, std::string>, std::size_t> listed;
  index.for_each([&](const SignalIndex::Subscribers& subscribers) {
    listed[{*subscribers.pattern, *subscribers.group}] = subscribers.members->size();
  });
  const std::map<std::pair<std::string, std::string>, std::size_t> expected = {
      {{"a.>", ""}, 2}, {{"a.>", "g"}, 1}, {{"a", ""}, 1}};
  EXPECT_EQ(listed, expected);
}

// ---- one signal's deliveries (plan) ---------------------------------------------------------

std::size_t unlimited(SignalIndex::Listener) { return 64; }

TEST(SignalPlan, PlainListenersOnceEachInTheReferenceOrderAndGroupsOnTop) {
  SignalIndex index;
  index.add("a.>", "", 3);   // wildcard plain
  index.add("a.*", "", 3);   // the same listener again: still once
  index.add("a.b", "", 1);   // exact plain
  index.add("a.*", "", 1);   // already served by its exact pattern
  index.add("a.b", "g", 2);  // exact group
  index.add("a.*", "w", 1);  // wildcard group: groups do not count against the plain rule
  SignalIndex::Plan plan;
  index.plan("a.b", unlimited, plan);
  EXPECT_EQ(plan.deliver, (std::vector<SignalIndex::Listener>{1, 2, 3, 1}));
  EXPECT_TRUE(plan.close.empty());
  index.plan("x", unlimited, plan);
  EXPECT_TRUE(plan.deliver.empty());
}

TEST(SignalPlan, AGroupGoesRoundRobinAndSkipsAFullMember) {
  SignalIndex index;
  for (SignalIndex::Listener who : {1, 2, 3}) index.add("jobs", "workers", who);
  SignalIndex::Plan plan;
  std::vector<SignalIndex::Listener> picked;
  for (int i = 0; i < 6; ++i) {
    index.plan("jobs", unlimited, plan);
    ASSERT_EQ(plan.deliver.size(), 1u);
    picked.push_back(plan.deliver[0]);
  }
  EXPECT_EQ(picked, (std::vector<SignalIndex::Listener>{1, 2, 3, 1, 2, 3}));
  // Member 1's turn, but its queue is full: the next one gets it, and nobody is closed.
  auto one_full = [](SignalIndex::Listener who) -> std::size_t { return who == 1 ? 0 : 64; };
  index.plan("jobs", one_full, plan);
  EXPECT_EQ(plan.deliver, (std::vector<SignalIndex::Listener>{2}));
  EXPECT_TRUE(plan.close.empty());
}

TEST(SignalPlan, SlowConsumersAreClosedAndGetNothingMore) {
  SignalIndex index;
  index.add("a", "", 1);
  index.add("a", "", 2);
  index.add("a", "g", 1);  // 1 is also in a group, whose only other member is full too
  index.add("a", "g", 3);
  auto room = [](SignalIndex::Listener who) -> std::size_t { return who == 2 ? 64 : 0; };
  SignalIndex::Plan plan;
  index.plan("a", room, plan);
  EXPECT_EQ(plan.deliver, (std::vector<SignalIndex::Listener>{2}));
  // 1: plain and full. The group (1's turn, then 3, both full) closes the member whose turn it
  // was, 1, already closing: once.
  EXPECT_EQ(plan.close, (std::vector<SignalIndex::Listener>{1}));
}

TEST(SignalPlan, CountsWhatItPlansAgainstTheRoomLeft) {
  SignalIndex index;
  index.add("a", "", 1);
  index.add("a", "g", 1);
  index.add("a", "h", 1);
  index.add("a", "h", 2);
  // Room for two frames: its plain one and group g's; group h must pass to 2.
  auto room = [](SignalIndex::Listener who) -> std::size_t { return who == 1 ? 2 : 64; };
  SignalIndex::Plan plan;
  index.plan("a", room, plan);
  EXPECT_EQ(plan.deliver, (std::vector<SignalIndex::Listener>{1, 1, 2}));
  EXPECT_TRUE(plan.close.empty());
}

// ---- the index against the naive matcher ----------------------------------------------------

// Names from a small alphabet, so that patterns and channels meet often: 1-4 tokens.
rc::Gen<std::vector<std::string>> gen_tokens(std::vector<std::string> alphabet) {
  return rc::gen::mapcat(rc::gen::inRange<std::size_t>(1, 5), [alphabet](std::size_t n) {
    return rc::gen::container<std::vector<std::string>>(n, rc::gen::elementOf(alphabet));
  });
}

std::string joined(const std::vector<std::string>& tokens) {
  std::string name;
  for (const std::string& token : tokens) name += (name.empty() ? "" : ".") + token;
  return name;
}

rc::Gen<std::string> gen_channel() {
  return rc::gen::map(gen_tokens({"a", "b", "c", "dd"}), joined);
}

rc::Gen<std::string> gen_pattern() {
  return rc::gen::map(
      rc::gen::pair(gen_tokens({"a", "b", "c", "dd", "*"}), rc::gen::arbitrary<bool>()),
      [](const std::pair<std::vector<std::string>, bool>& drawn) {
        return joined(drawn.first) + (drawn.second ? ".>" : "");
      });
}

struct Op {
  bool add = true;
  std::string pattern;
  std::string group;
  SignalIndex::Listener who = 0;
};

RC_GTEST_PROP(SignalIndexProperty, MatchesWhatTryingEverySubscriptionMatches, ()) {
  const auto ops = *rc::gen::container<std::vector<Op>>(rc::gen::build<Op>(
      rc::gen::set(&Op::add, rc::gen::weightedElement<bool>({{3, true}, {1, false}})),
      rc::gen::set(&Op::pattern, gen_pattern()),
      rc::gen::set(&Op::group, rc::gen::element<std::string>("", "", "g", "h")),
      rc::gen::set(&Op::who, rc::gen::inRange<SignalIndex::Listener>(1, 6))));
  const auto channels = *rc::gen::container<std::vector<std::string>>(3, gen_channel());
  const bool close_one = *rc::gen::arbitrary<bool>();

  SignalIndex index;
  std::set<std::tuple<std::string, std::string, SignalIndex::Listener>> naive;
  for (const Op& op : ops) {
    RC_ASSERT(check_signal_pattern(op.pattern) == SignalNameError::kNone);
    const auto key = std::make_tuple(op.pattern, op.group, op.who);
    if (op.add) {
      RC_ASSERT(index.add(op.pattern, op.group, op.who) == naive.insert(key).second);
    } else {
      RC_ASSERT(index.remove(op.pattern, op.group, op.who) == (naive.erase(key) == 1));
    }
  }
  if (close_one) {
    std::size_t of_one = 0;
    for (auto it = naive.begin(); it != naive.end();) {
      if (std::get<2>(*it) == 1) {
        it = naive.erase(it);
        ++of_one;
      } else {
        ++it;
      }
    }
    RC_ASSERT(index.remove_all(1) == of_one);
  }
  RC_ASSERT(index.size() == naive.size());
  for (const std::string& channel : channels) {
    Flat expected;
    for (const auto& [pattern, group, who] : naive) {
      if (!signal_pattern_matches(pattern, channel)) continue;
      const int step = (signal_pattern_has_wildcard(pattern) ? 3 : 1) + (group.empty() ? 0 : 1);
      expected.emplace_back(step, pattern, group, who);
    }
    std::sort(expected.begin(), expected.end());
    RC_ASSERT(match(index, channel) == expected);
  }
}

}  // namespace
}  // namespace turnstile::core
