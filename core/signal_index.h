// Who listens to what (docs/protocol.md, "Signals: names and matching"): listeners'
// subscriptions to patterns, each with an optional queue group, matched against a signal's channel
// without looking at every pattern. The patterns live in a trie of their tokens: matching a channel
// of n tokens follows, at each depth, the channel's own token and the `*` edge, and collects the
// `>` subscriptions it passes, so its cost grows with the channel and with what matches, not with
// how many patterns there are (dflockd scans every wildcard pattern).
//
// The trie is compressed: an edge carries a run of tokens up to the next place where patterns
// part or end, and a node holds subscriptions only where one ends. So a pattern costs about twice
// its own length (its edge's label and the copy its subscribers point to) plus a few hundred
// bytes, however many tokens it has; a 120-token pattern is one edge, not 120 nodes
// (tests/core/signal_memory_test.cc holds the bound).
//
// It only answers what matches; which group member gets a signal, and what happens to a full
// queue, is the delivery's business. Patterns must be valid (core/signal_pattern.h); the index
// does not check them. Single-threaded, like the rest of the core.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace turnstile::core {

class SignalIndex {
 public:
  using Listener = std::uint64_t;

  // The listeners of one pattern and group; `group` empty: the plain (non-group) listeners.
  struct Subscribers {
    const std::string* pattern = nullptr;
    const std::string* group = nullptr;
    const std::vector<Listener>* members = nullptr;  // in the order they subscribed
    std::uint64_t* next = nullptr;  // a group's round-robin start; null for plain listeners
  };

  // One signal's deliveries, decided by plan().
  struct Plan {
    // Who gets the frame, in delivery order; a listener appears once for its plain
    // subscriptions and once more for each group that picked it.
    std::vector<Listener> deliver;
    // Slow consumers, to be disconnected: a plain listener whose queue is full, or the member
    // whose turn it was in a group whose members are all full.
    std::vector<Listener> close;
  };

  // What a channel matches, in the reference's delivery order: the plain listeners and the groups
  // of wildcard-free patterns, then those of patterns with a wildcard. A listener subscribed to
  // several matching patterns appears once per pattern (de-duplication is the delivery's rule).
  struct Matches {
    std::vector<Subscribers> exact;
    std::vector<Subscribers> exact_groups;
    std::vector<Subscribers> wildcard;
    std::vector<Subscribers> wildcard_groups;
    void clear();
  };

  SignalIndex();
  ~SignalIndex();
  SignalIndex(const SignalIndex&) = delete;
  SignalIndex& operator=(const SignalIndex&) = delete;

  // Subscribes `who` to `pattern` in `group` ("" for none). False when it already was: a
  // duplicate listen changes nothing.
  bool add(std::string_view pattern, std::string_view group, Listener who);
  // Unsubscribes; false when it was not subscribed.
  bool remove(std::string_view pattern, std::string_view group, Listener who);
  // Every subscription of `who` goes (its connection closed); how many there were.
  std::size_t remove_all(Listener who);
  // Whether `who` is subscribed to `pattern` in `group`.
  bool has(std::string_view pattern, std::string_view group, Listener who) const;
  // How many subscriptions `who` has (the per-connection cap counts these).
  std::size_t count(Listener who) const;
  // Subscriptions in all.
  std::size_t size() const { return size_; }

  // Clears `out` and fills it with what matches `channel` (valid, core/signal_pattern.h). The
  // pointers stay valid until the next add or remove.
  void match(std::string_view channel, Matches& out) const;

  // Decides one signal's deliveries (dflockd v1's rules, docs/protocol.md): the plain listeners
  // of wildcard-free patterns, then one member of each such group, then the plain listeners of
  // wildcard patterns not already served, then one member of each wildcard group. A plain
  // listener gets a signal once however many of its patterns match; groups do not count
  // against that. `room(who)` is how many more frames who's queue takes now (the plan counts
  // what it adds). A plain listener without room is closed. A group picks its members
  // round-robin: the first from its turn on that has room and, when `keeping_up` is given, keeps
  // up; failing that, the first with room; failing that, the member whose turn it was is closed.
  // A listener being closed gets nothing more. plan() advances the groups' round-robin, its only
  // change to the index; closing is the caller's.
  void plan(std::string_view channel, const std::function<std::size_t(Listener)>& room, Plan& out,
            const std::function<bool(Listener)>& keeping_up = nullptr);

  // Every pattern and group with its listeners (stats' signal_channels), in no promised order.
  void for_each(const std::function<void(const Subscribers&)>& each) const;

 private:
  struct Node;
  struct Ends;
  // One edge on the way from the root to a node: the node the edge leaves and the slot holding
  // the node it reaches.
  struct Link {
    Node* parent;
    std::unique_ptr<Node>* slot;
  };
  using Subscription = std::pair<Ends*, std::string>;  // where it ends, group

  // The subscriptions of `pattern` (its node's `end`, or its `tail` for a pattern ending in `>`),
  // made when missing, splitting an edge where the pattern leaves it.
  Ends& ends_of(std::string_view pattern);
  // Those of `pattern` when it has any; null otherwise. With `path`, the edges walked to them.
  Ends* find(std::string_view pattern, std::vector<Link>* path = nullptr) const;
  // Takes `who` out of `ends`'s subscribers in `group` (it is there); `ends` may go.
  void drop(Ends& ends, std::string_view group, Listener who);
  // After the subscriptions of `pattern` went: drops the nodes on its path that hold nothing any
  // more, and joins a node left with one edge and nothing of its own to that edge.
  void prune(std::string_view pattern);

  std::unique_ptr<Node> root_;
  Matches scratch_;  // plan()'s matches, kept for their capacity
  std::unordered_map<Listener, std::set<Subscription>> by_listener_;
  std::size_t size_ = 0;
};

}  // namespace turnstile::core
