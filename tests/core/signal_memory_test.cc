// What a subscription costs the signal index (core/signal_index.h): the bytes it holds grow with
// the pattern's length, not with its number of tokens, and every byte comes back when the
// subscriptions go. The test counts the bytes the process has allocated and not freed, through
// its own global operator new (this file is its own executable: tests/CMakeLists.txt).
#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "core/signal_index.h"

namespace {

std::atomic<std::size_t> live_bytes{0};

// Each block carries its size in front of it, so the unsized deletes can count it too.
constexpr std::size_t kHeader = alignof(std::max_align_t);

void* allocate(std::size_t size) {
  void* block = std::malloc(size + kHeader);
  if (block == nullptr) throw std::bad_alloc();
  *static_cast<std::size_t*>(block) = size;
  live_bytes += size;
  return static_cast<char*>(block) + kHeader;
}

void release(void* pointer) noexcept {
  if (pointer == nullptr) return;
  void* block = static_cast<char*>(pointer) - kHeader;
  live_bytes -= *static_cast<std::size_t*>(block);
  std::free(block);
}

}  // namespace

void* operator new(std::size_t size) { return allocate(size); }
void* operator new[](std::size_t size) { return allocate(size); }
void operator delete(void* pointer) noexcept { release(pointer); }
void operator delete[](void* pointer) noexcept { release(pointer); }
void operator delete(void* pointer, std::size_t) noexcept { release(pointer); }
void operator delete[](void* pointer, std::size_t) noexcept { release(pointer); }

namespace turnstile::core {
namespace {

// A pattern of `tokens` tokens, the first one `first`, the others `filler` ("x" or "*").
std::string pattern_of(const std::string& first, std::size_t tokens, const std::string& filler) {
  std::string pattern = first;
  for (std::size_t i = 1; i < tokens; ++i) pattern += "." + filler;
  return pattern;
}

// Bytes held per subscription, at most: the pattern twice (an edge's label, and the copy its
// subscribers point to) and a fixed part for the node, its subscribers and the listener's record.
// Before the trie was compressed, a 120-token pattern took about 45 KB here.
std::size_t bound_for(const std::string& pattern) { return 2 * pattern.size() + 640; }

// The listener map keeps its bucket array once it has grown (a hash map does not shrink), so each
// test grows it first, with the listeners it then uses, before it counts.
void grow_listener_map(SignalIndex& index, std::size_t listeners) {
  for (std::size_t who = 1; who <= listeners; ++who) ASSERT_TRUE(index.add("warm", "", who));
  for (std::size_t who = 1; who <= listeners; ++who) ASSERT_EQ(index.remove_all(who), 1u);
}

void expect_bounded(const std::string& filler) {
  constexpr std::size_t kSubscriptions = 200;
  constexpr std::size_t kTokens = 120;
  std::vector<std::string> patterns;
  for (std::size_t i = 0; i < kSubscriptions; ++i) {
    patterns.push_back(pattern_of("p" + std::to_string(i), kTokens, filler));
  }
  SignalIndex index;
  grow_listener_map(index, kSubscriptions);
  const std::size_t before = live_bytes;
  for (std::size_t i = 0; i < kSubscriptions; ++i) ASSERT_TRUE(index.add(patterns[i], "", i + 1));
  const std::size_t per_subscription = (live_bytes - before) / kSubscriptions;
  EXPECT_LE(per_subscription, bound_for(patterns[0]))
      << patterns[0].size() << "-byte patterns of " << kTokens << " tokens";
  for (std::size_t i = 0; i < kSubscriptions; ++i) EXPECT_EQ(index.remove_all(i + 1), 1u);
  EXPECT_EQ(live_bytes, before) << "the index kept bytes after every subscription went";
}

TEST(SignalIndexMemory, ALongLiteralPatternCostsAboutItsLength) { expect_bounded("x"); }

TEST(SignalIndexMemory, ALongWildcardPatternCostsAboutItsLength) { expect_bounded("*"); }

// Patterns that share a long prefix split one edge and share it; when they go, the edges join
// again and nothing is left over, whatever order they leave in.
TEST(SignalIndexMemory, PatternsThatPartSplitAnEdgeAndJoinItAgainWhenTheyGo) {
  const std::string stem = pattern_of("s", 60, "x");
  std::vector<std::string> patterns;
  for (int i = 0; i < 50; ++i) {
    patterns.push_back(stem + "." + std::to_string(i) + ".tail.end");
    patterns.push_back(stem + "." + std::to_string(i) + ".>");
    patterns.push_back(stem + ".*." + std::to_string(i));
  }
  patterns.push_back(stem);
  patterns.push_back(stem + ".>");
  SignalIndex index;
  grow_listener_map(index, patterns.size());
  const std::size_t before = live_bytes;
  SignalIndex::Listener who = 1;
  for (const std::string& pattern : patterns) ASSERT_TRUE(index.add(pattern, "g", who++));
  // The shared stem is stored once: well under the cost of every pattern whole.
  std::size_t whole = 0;
  for (const std::string& pattern : patterns) whole += pattern.size();
  EXPECT_LT(live_bytes - before, whole + patterns.size() * 640);
  {
    SignalIndex::Matches matches;
    index.match(stem + ".7.tail.end", matches);
    EXPECT_EQ(matches.exact_groups.size(), 1u);
    EXPECT_EQ(matches.wildcard_groups.size(), 2u);  // stem.7.> and stem.>
  }
  // Leave in an order that is neither the order they came in nor its reverse.
  for (std::size_t step = 0; step < patterns.size(); ++step) {
    const std::size_t i = (step * 37) % patterns.size();
    EXPECT_TRUE(index.remove(patterns[i], "g", i + 1)) << patterns[i];
  }
  EXPECT_EQ(index.size(), 0u);
  EXPECT_EQ(live_bytes, before) << "the index kept bytes after every subscription went";
}

}  // namespace
}  // namespace turnstile::core
