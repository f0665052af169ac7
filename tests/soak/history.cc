// The soak's record of client calls: see history.h.
#include "tests/soak/history.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <utility>

namespace turnstile::soak {
namespace {

// JSON string contents: the soak's own words and keys, but escaped all the same.
std::string escaped(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char code[8];
      std::snprintf(code, sizeof code, "\\u%04x", static_cast<unsigned>(c));
      out += code;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

void History::add(Call call) {
  std::lock_guard lock(mutex_);
  calls_.push_back(std::move(call));
}

std::size_t History::size() const {
  std::lock_guard lock(mutex_);
  return calls_.size();
}

void History::write_jsonl(std::ostream& out) const {
  std::lock_guard lock(mutex_);
  char times[96];
  for (const Call& call : calls_) {
    std::snprintf(times, sizeof times, "\"sent_s\":%.6f,\"answered_s\":%.6f", call.sent_s,
                  call.answered_s);
    out << "{\"worker\":" << call.worker << ",\"kind\":\"" << escaped(call.kind) << "\",\"key\":\""
        << escaped(call.key) << "\"," << times << ",\"outcome\":\"" << escaped(call.outcome)
        << "\",\"fence\":" << call.fence << "}\n";
  }
}

std::vector<std::string> History::check_fence_order() const {
  std::lock_guard lock(mutex_);
  std::map<std::string, std::vector<const Call*>> grants;  // by key
  for (const Call& call : calls_) {
    if (call.fence != 0) grants[call.key].push_back(&call);
  }
  std::vector<std::string> breaches;
  for (auto& [key, of_key] : grants) {
    std::vector<const Call*> by_answer = of_key;
    std::sort(by_answer.begin(), by_answer.end(),
              [](const Call* a, const Call* b) { return a->answered_s < b->answered_s; });
    std::vector<const Call*> by_send = of_key;
    std::sort(by_send.begin(), by_send.end(),
              [](const Call* a, const Call* b) { return a->sent_s < b->sent_s; });
    // Walking the grants in the order they were asked for, `highest` is the grant with the
    // highest fence among those answered before the current one was sent, and `own` every
    // (worker, fence) among them: a worker may take back its own slot.
    const Call* highest = nullptr;
    std::set<std::pair<std::size_t, std::uint64_t>> own;
    std::size_t answered = 0;
    for (const Call* grant : by_send) {
      while (answered < by_answer.size() && by_answer[answered]->answered_s < grant->sent_s) {
        const Call* earlier = by_answer[answered++];
        own.emplace(earlier->worker, earlier->fence);
        if (highest == nullptr || earlier->fence > highest->fence) highest = earlier;
      }
      if (highest == nullptr || grant->fence > highest->fence) continue;
      if (own.count({grant->worker, grant->fence}) > 0) continue;
      char text[320];
      std::snprintf(
          text, sizeof text,
          "fence order on %s: worker %zu's grant (sent at %.3f s) has fence %llu, not "
          "above fence %llu granted to worker %zu at %.3f s",
          key.c_str(), grant->worker, grant->sent_s, static_cast<unsigned long long>(grant->fence),
          static_cast<unsigned long long>(highest->fence), highest->worker, highest->answered_s);
      breaches.emplace_back(text);
    }
  }
  return breaches;
}

}  // namespace turnstile::soak
