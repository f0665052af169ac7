// Who listens to what: see signal_index.h.
#include "core/signal_index.h"

#include <algorithm>
#include <map>
#include <optional>
#include <unordered_set>
#include <utility>

#include "core/canary.h"
#include "core/signal_pattern.h"

namespace turnstile::core {

namespace {

// Where Subscribers::group points for plain listeners.
const std::string kNoGroup;

// The first token of an edge's label.
std::string_view first_token(std::string_view label) { return label.substr(0, label.find('.')); }

std::string join(const std::vector<std::string_view>& tokens, std::size_t from, std::size_t to) {
  std::string out;
  for (std::size_t i = from; i < to; ++i) {
    if (i != from) out.push_back('.');
    out.append(tokens[i]);
  }
  return out;
}

// How many of `label`'s tokens equal the tokens of `tokens` from `at` on, in order.
std::size_t common_tokens(std::string_view label, const std::vector<std::string_view>& tokens,
                          std::size_t at) {
  std::size_t same = 0;
  while (at + same < tokens.size()) {
    const std::size_t dot = label.find('.');
    if (label.substr(0, dot) != tokens[at + same]) break;
    ++same;
    if (dot == std::string_view::npos) break;
    label.remove_prefix(dot + 1);
  }
  return same;
}

std::size_t token_count(std::string_view label) {
  return 1 + static_cast<std::size_t>(std::count(label.begin(), label.end(), '.'));
}

}  // namespace

// The subscriptions that end at one place of the trie: all of them to the same pattern.
struct SignalIndex::Ends {
  std::string pattern;
  struct Group {
    std::vector<Listener> members;
    mutable std::uint64_t next = 0;  // the round-robin's next start (plan())
  };
  std::vector<Listener> plain;
  std::map<std::string, Group, std::less<>> groups;

  bool empty() const { return plain.empty() && groups.empty(); }

  void add_to(std::vector<Subscribers>& plain_out, std::vector<Subscribers>& groups_out) const {
    if (!plain.empty()) plain_out.push_back({&pattern, &kNoGroup, &plain, nullptr});
    for (const auto& [name, group] : groups) {
      groups_out.push_back({&pattern, &name, &group.members, &group.next});
    }
  }
  void each(const std::function<void(const Subscribers&)>& fn) const {
    if (!plain.empty()) fn({&pattern, &kNoGroup, &plain, nullptr});
    for (const auto& [name, group] : groups) fn({&pattern, &name, &group.members, &group.next});
  }
};

struct SignalIndex::Node {
  // The tokens of the edge that leads here, joined by '.' ("" at the root): one or more, up to
  // where patterns part or one ends.
  std::string label;
  std::vector<std::unique_ptr<Node>> children;  // edges starting with a literal token, by it
  std::unique_ptr<Node> star;                   // the edge starting with `*`
  std::unique_ptr<Ends> end;                    // patterns whose last token led here
  std::unique_ptr<Ends> tail;  // patterns with one more token after those that led here: `>`

  bool holds() const { return end != nullptr || tail != nullptr; }
  std::size_t edges() const { return children.size() + (star ? 1 : 0); }

  // The slot of the edge starting with `token`; null when there is none and `make` is false.
  std::unique_ptr<Node>* edge(std::string_view token, bool make) {
    if (token == "*") return star || make ? &star : nullptr;
    const auto it =
        std::lower_bound(children.begin(), children.end(), token,
                         [](const std::unique_ptr<Node>& child, std::string_view wanted) {
                           return first_token(child->label) < wanted;
                         });
    if (it != children.end() && first_token((*it)->label) == token) return &*it;
    if (!make) return nullptr;
    return &*children.emplace(it);
  }
  const Node* edge(std::string_view token) const {
    std::unique_ptr<Node>* slot = const_cast<Node*>(this)->edge(token, false);
    return slot == nullptr ? nullptr : slot->get();
  }
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
  std::vector<std::string_view> tokens = signal_tokens(pattern);
  const bool tail = tokens.back() == ">";  // the last token, in a valid pattern
  if (tail) tokens.pop_back();
  Node* node = root_.get();
  std::size_t at = 0;
  while (at < tokens.size()) {
    std::unique_ptr<Node>* slot = node->edge(tokens[at], /*make=*/true);
    if (*slot == nullptr) {  // a new edge with the rest of the pattern
      *slot = std::make_unique<Node>();
      (*slot)->label = join(tokens, at, tokens.size());
      node = slot->get();
      break;
    }
    Node* next = slot->get();
    const std::size_t same = common_tokens(next->label, tokens, at);  // at least the first
    if (same < token_count(next->label)) {
      // The pattern leaves the edge (or ends) inside it: a node where it does.
      const std::vector<std::string_view> label = signal_tokens(next->label);
      auto middle = std::make_unique<Node>();
      middle->label = join(label, 0, same);
      std::string rest = join(label, same, label.size());
      std::unique_ptr<Node> below = std::move(*slot);
      below->label = std::move(rest);
      const std::string_view below_first = first_token(below->label);
      *middle->edge(below_first, /*make=*/true) = std::move(below);
      *slot = std::move(middle);
      next = slot->get();
    }
    node = next;
    at += same;
  }
  std::unique_ptr<Ends>& ends = tail ? node->tail : node->end;
  if (ends == nullptr) {
    ends = std::make_unique<Ends>();
    ends->pattern = std::string(pattern);
  }
  return *ends;
}

SignalIndex::Ends* SignalIndex::find(std::string_view pattern, std::vector<Link>* path) const {
  std::vector<std::string_view> tokens = signal_tokens(pattern);
  const bool tail = tokens.back() == ">";
  if (tail) tokens.pop_back();
  Node* node = root_.get();
  std::size_t at = 0;
  while (at < tokens.size()) {
    std::unique_ptr<Node>* slot = node->edge(tokens[at], /*make=*/false);
    if (slot == nullptr) return nullptr;
    const std::size_t same = common_tokens((*slot)->label, tokens, at);
    if (same < token_count((*slot)->label)) return nullptr;
    if (path != nullptr) path->push_back({node, slot});
    node = slot->get();
    at += same;
  }
  return (tail ? node->tail : node->end).get();
}

bool SignalIndex::add(std::string_view pattern, std::string_view group, Listener who) {
  Ends& ends = ends_of(pattern);
  if (!by_listener_[who].emplace(&ends, std::string(group)).second) return false;
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
  Ends* ends = find(pattern);
  if (ends == nullptr || mine->second.erase(Subscription(ends, group)) == 0) return false;
  if (mine->second.empty()) by_listener_.erase(mine);
  drop(*ends, group, who);
  return true;
}

void SignalIndex::drop(Ends& ends, std::string_view group, Listener who) {
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
  --size_;
  if (ends.empty()) prune(std::string(ends.pattern));  // a copy: `ends` goes
}

std::size_t SignalIndex::remove_all(Listener who) {
  const auto mine = by_listener_.find(who);
  if (mine == by_listener_.end()) return 0;
  const std::set<Subscription> subscriptions = std::move(mine->second);
  by_listener_.erase(mine);
  for (const auto& [ends, group] : subscriptions) drop(*ends, group, who);
  return subscriptions.size();
}

bool SignalIndex::has(std::string_view pattern, std::string_view group, Listener who) const {
  const auto mine = by_listener_.find(who);
  if (mine == by_listener_.end()) return false;
  Ends* ends = find(pattern);
  return ends != nullptr && mine->second.count(Subscription(ends, group)) != 0;
}

std::size_t SignalIndex::count(Listener who) const {
  const auto mine = by_listener_.find(who);
  return mine == by_listener_.end() ? 0 : mine->second.size();
}

void SignalIndex::prune(std::string_view pattern) {
  std::vector<Link> path;
  (void)find(pattern, &path);
  Node* node = path.empty() ? root_.get() : path.back().slot->get();
  (pattern.ends_with(">") ? node->tail : node->end).reset();
  // Bottom up: a node that holds nothing goes from its parent; one left with a single edge and
  // nothing of its own becomes part of that edge. Either keeps the trie as small as its patterns.
  for (auto link = path.rbegin(); link != path.rend(); ++link) {
    Node& here = **link->slot;
    if (here.holds()) return;
    if (here.edges() == 0) {
      if (link->slot == &link->parent->star) {
        link->parent->star.reset();
      } else {
        std::vector<std::unique_ptr<Node>>& siblings = link->parent->children;
        siblings.erase(siblings.begin() + (link->slot - siblings.data()));
        // A node that once had many edges gives their room back as they go.
        if (siblings.capacity() > 4 * siblings.size()) siblings.shrink_to_fit();
      }
      continue;
    }
    if (here.edges() == 1) {
      std::unique_ptr<Node> only = here.star ? std::move(here.star) : std::move(here.children[0]);
      only->label = here.label + "." + only->label;
      *link->slot = std::move(only);  // `here` goes
    }
    return;
  }
}

void SignalIndex::match(std::string_view channel, Matches& out) const {
  out.clear();
  const std::vector<std::string_view> tokens = signal_tokens(channel);
  // Depth first, at most two ways at each node: the channel's own token and the `*` edge; an edge
  // of several tokens is followed only if each is the channel's or `*`.
  struct Step {
    const Node* node;
    std::size_t depth;
    bool wildcard;  // a `*` token was on the way here
  };
  std::vector<Step> stack{{root_.get(), 0, false}};
  const auto follow = [&](const Node* next, std::size_t depth, bool wildcard) {
    std::string_view label = next->label;
    while (true) {
      if (depth == tokens.size()) return;
      const std::size_t dot = label.find('.');
      const std::string_view token = label.substr(0, dot);
      if (token == "*") {
        wildcard = true;
      } else if (token != tokens[depth]) {
        return;
      }
      ++depth;
      if (dot == std::string_view::npos) break;
      label.remove_prefix(dot + 1);
    }
    stack.push_back({next, depth, wildcard});
  };
  while (!stack.empty()) {
    const Step step = stack.back();
    stack.pop_back();
    const Node& node = *step.node;
    if (step.depth < tokens.size()) {
      if (node.tail) node.tail->add_to(out.wildcard, out.wildcard_groups);  // `>`: a token left
      if (node.star) follow(node.star.get(), step.depth, true);
      if (const Node* literal = node.edge(tokens[step.depth]); literal != nullptr) {
        follow(literal, step.depth, step.wildcard);
      }
    } else if (node.end) {
      node.end->add_to(step.wildcard ? out.wildcard : out.exact,
                       step.wildcard ? out.wildcard_groups : out.exact_groups);
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
        // The canary (core/canary.h): a plain listener gets a signal once per matching
        // pattern. The simulator must notice.
        if (!canary::kSignalTwice && !seen.insert(who).second) continue;
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
    if (node->end) node->end->each(each);
    if (node->tail) node->tail->each(each);
    if (node->star) stack.push_back(node->star.get());
    for (const auto& child : node->children) stack.push_back(child.get());
  }
}

}  // namespace turnstile::core
