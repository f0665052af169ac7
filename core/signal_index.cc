// Who listens to what: see signal_index.h.
#include "core/signal_index.h"

#include <algorithm>
#include <optional>
#include <unordered_set>
#include <utility>

#include "core/signal_pattern.h"

namespace turnstile::core {

// The subscriptions that end at one place of the trie: all of them to the same pattern.
struct SignalIndex::Ends {
  std::string pattern;   // set while anything is subscribed
  std::string no_group;  // always "": where Subscribers::group points for plain listeners
  struct Group {
    std::vector<Listener> members;
    mutable std::uint64_t next = 0;  // the round-robin's next start (plan())
  };
  std::vector<Listener> plain;
  std::map<std::string, Group, std::less<>> groups;

  bool empty() const { return plain.empty() && groups.empty(); }

  void add_to(std::vector<Subscribers>& plain_out, std::vector<Subscribers>& groups_out) const {
    if (!plain.empty()) plain_out.push_back({&pattern, &no_group, &plain, nullptr});
    for (const auto& [name, group] : groups) {
      groups_out.push_back({&pattern, &name, &group.members, &group.next});
    }
  }
  void each(const std::function<void(const Subscribers&)>& fn) const {
    if (!plain.empty()) fn({&pattern, &no_group, &plain, nullptr});
    for (const auto& [name, group] : groups) fn({&pattern, &name, &group.members, &group.next});
  }
};

struct SignalIndex::Node {
  std::map<std::string, std::unique_ptr<Node>, std::less<>> children;  // literal tokens
  std::unique_ptr<Node> star;                                          // a `*` token
  Ends end;   // patterns whose last token led here
  Ends tail;  // patterns with one more token after those that led here: `>`

  bool empty() const { return children.empty() && !star && end.empty() && tail.empty(); }
};

void SignalIndex::Matches::clear() {
  exact.clear();
  exact_groups.clear();
  wildcard.clear();
  wildcard_groups.clear();
}

SignalIndex::SignalIndex() : root_(std::make_unique<Node>()) {}
SignalIndex::~SignalIndex() = default;

SignalIndex::Ends& SignalIndex::ends_of(std::string_view pattern) {
  Node* node = root_.get();
  for (const std::string_view token : signal_tokens(pattern)) {
    if (token == ">") return node->tail;  // the last token, in a valid pattern
    std::unique_ptr<Node>* next = &node->star;
    if (token != "*") {
      auto it = node->children.find(token);
      if (it == node->children.end()) {
        it = node->children.emplace(std::string(token), nullptr).first;
      }
      next = &it->second;
    }
    if (*next == nullptr) *next = std::make_unique<Node>();
    node = next->get();
  }
  return node->end;
}

bool SignalIndex::add(std::string_view pattern, std::string_view group, Listener who) {
  if (!by_listener_[who].emplace(std::string(pattern), std::string(group)).second) return false;
  Ends& ends = ends_of(pattern);
  if (ends.empty()) ends.pattern = std::string(pattern);
  if (group.empty()) {
    ends.plain.push_back(who);
  } else {
    auto it = ends.groups.find(group);
    if (it == ends.groups.end()) it = ends.groups.emplace(std::string(group), Ends::Group{}).first;
    it->second.members.push_back(who);
  }
  ++size_;
  return true;
}

bool SignalIndex::remove(std::string_view pattern, std::string_view group, Listener who) {
  const auto mine = by_listener_.find(who);
  if (mine == by_listener_.end()) return false;
  if (mine->second.erase(Subscription(pattern, group)) == 0) return false;
  if (mine->second.empty()) by_listener_.erase(mine);
  drop(pattern, group, who);
  return true;
}

void SignalIndex::drop(std::string_view pattern, std::string_view group, Listener who) {
  Ends& ends = ends_of(pattern);
  auto leave = [who](std::vector<Listener>& members) {
    members.erase(std::find(members.begin(), members.end(), who));
  };
  if (group.empty()) {
    leave(ends.plain);
  } else {
    const auto it = ends.groups.find(group);
    leave(it->second.members);
    if (it->second.members.empty()) ends.groups.erase(it);
  }
  if (ends.empty()) ends.pattern.clear();
  --size_;
  prune(pattern);
}

std::size_t SignalIndex::remove_all(Listener who) {
  const auto mine = by_listener_.find(who);
  if (mine == by_listener_.end()) return 0;
  const std::set<Subscription> subscriptions = std::move(mine->second);
  by_listener_.erase(mine);
  for (const auto& [pattern, group] : subscriptions) drop(pattern, group, who);
  return subscriptions.size();
}

bool SignalIndex::has(std::string_view pattern, std::string_view group, Listener who) const {
  const auto mine = by_listener_.find(who);
  return mine != by_listener_.end() && mine->second.count(Subscription(pattern, group)) != 0;
}

std::size_t SignalIndex::count(Listener who) const {
  const auto mine = by_listener_.find(who);
  return mine == by_listener_.end() ? 0 : mine->second.size();
}

void SignalIndex::prune(std::string_view pattern) {
  // The path from the root, node by node, with the edge that leads to each.
  std::vector<std::pair<Node*, std::string_view>> path;
  Node* node = root_.get();
  for (const std::string_view token : signal_tokens(pattern)) {
    if (token == ">") break;
    Node* next = nullptr;
    if (token == "*") {
      next = node->star.get();
    } else {
      const auto it = node->children.find(token);
      next = it == node->children.end() ? nullptr : it->second.get();
    }
    if (next == nullptr) break;
    path.emplace_back(node, token);
    node = next;
  }
  // Bottom up: a node that holds nothing goes from its parent.
  for (auto step = path.rbegin(); step != path.rend(); ++step) {
    Node* parent = step->first;
    const std::string_view token = step->second;
    if (token == "*") {
      if (!parent->star->empty()) return;
      parent->star.reset();
    } else {
      const auto it = parent->children.find(token);
      if (!it->second->empty()) return;
      parent->children.erase(it);
    }
  }
}

void SignalIndex::match(std::string_view channel, Matches& out) const {
  out.clear();
  const std::vector<std::string_view> tokens = signal_tokens(channel);
  // Depth first, at most two ways at each token: the literal edge and the `*` edge.
  struct Step {
    const Node* node;
    std::size_t depth;
    bool wildcard;  // a `*` edge was taken on the way here
  };
  std::vector<Step> stack{{root_.get(), 0, false}};
  while (!stack.empty()) {
    const Step step = stack.back();
    stack.pop_back();
    const Node& node = *step.node;
    if (step.depth < tokens.size()) {
      node.tail.add_to(out.wildcard, out.wildcard_groups);  // `>`: at least one token remains
      if (node.star) stack.push_back({node.star.get(), step.depth + 1, true});
      const auto it = node.children.find(tokens[step.depth]);
      if (it != node.children.end())
        stack.push_back({it->second.get(), step.depth + 1, step.wildcard});
    } else if (step.wildcard) {
      node.end.add_to(out.wildcard, out.wildcard_groups);
    } else {
      node.end.add_to(out.exact, out.exact_groups);
    }
  }
}

void SignalIndex::plan(std::string_view channel, const std::function<std::size_t(Listener)>& room,
                       Plan& out, const std::function<bool(Listener)>& keeping_up) {
  out.deliver.clear();
  out.close.clear();
  match(channel, scratch_);
  std::unordered_map<Listener, std::size_t> planned;  // frames planned per listener
  std::unordered_set<Listener> seen;                  // plain deliveries, one per listener
  std::unordered_set<Listener> closing;
  auto takes = [&](Listener who) { return closing.count(who) == 0 && room(who) > planned[who]; };
  auto plain = [&](const std::vector<Subscribers>& all) {
    for (const Subscribers& subscribers : all) {
      for (const Listener who : *subscribers.members) {
#ifdef TURNSTILE_CANARY_SIGNAL_TWICE
        // The canary (sim/CMakeLists.txt): a plain listener gets a signal once per matching
        // pattern. The simulator must notice.
        (void)seen;
#else
        if (!seen.insert(who).second) continue;
#endif
        if (takes(who)) {
          ++planned[who];
          out.deliver.push_back(who);
        } else if (closing.insert(who).second) {
          out.close.push_back(who);  // a slow consumer: its queue is full
        }
      }
    }
  };
  auto groups = [&](const std::vector<Subscribers>& all) {
    for (const Subscribers& subscribers : all) {
      const std::vector<Listener>& members = *subscribers.members;
      const std::size_t start = static_cast<std::size_t>((*subscribers.next)++ % members.size());
      std::optional<Listener> chosen;
      std::optional<Listener> fallback;  // has room, but does not keep up
      for (std::size_t k = 0; k < members.size() && !chosen; ++k) {
        const Listener who = members[(start + k) % members.size()];
        if (!takes(who)) continue;
        if (keeping_up == nullptr || keeping_up(who)) {
          chosen = who;
        } else if (!fallback) {
          fallback = who;
        }
      }
      if (!chosen) chosen = fallback;
      if (chosen) {
        ++planned[*chosen];
        out.deliver.push_back(*chosen);
      } else if (closing.insert(members[start]).second) {
        // Every member full: the one whose turn it was is closed, as the reference does.
        out.close.push_back(members[start]);
      }
    }
  };
  plain(scratch_.exact);
  groups(scratch_.exact_groups);
  plain(scratch_.wildcard);
  groups(scratch_.wildcard_groups);
}

void SignalIndex::for_each(const std::function<void(const Subscribers&)>& each) const {
  std::vector<const Node*> stack{root_.get()};
  while (!stack.empty()) {
    const Node* node = stack.back();
    stack.pop_back();
    node->end.each(each);
    node->tail.each(each);
    if (node->star) stack.push_back(node->star.get());
    for (const auto& [token, child] : node->children) stack.push_back(child.get());
  }
}

}  // namespace turnstile::core
