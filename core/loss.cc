#include "core/loss.h"

#include <array>

#include "core/assert.h"
#include "core/wire.h"

namespace turnstile::core {

std::string_view loss_reason_name(LossReason reason) {
  switch (reason) {
    case LossReason::kExpired:
      return "expired";
    case LossReason::kForced:
      return "forced";
    case LossReason::kReclaimed:
      return "reclaimed";
  }
  TS_ASSERT(false);
}

std::optional<LossReason> parse_loss_reason(std::string_view word) {
  for (const LossReason reason :
       {LossReason::kExpired, LossReason::kForced, LossReason::kReclaimed}) {
    if (word == loss_reason_name(reason)) return reason;
  }
  return std::nullopt;
}

std::string lost_line(const LostSlot& slot) {
  std::string line = "lost ";
  line.append(namespace_word(slot.ns));
  line.push_back(' ');
  line.append(slot.key);
  line.push_back(' ');
  line.append(slot.token.to_string());
  line.push_back(' ');
  line.append(loss_reason_name(slot.reason));
  line.push_back('\n');
  return line;
}

std::optional<LostSlot> parse_lost_line(std::string_view line) {
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  // A space after the reason would end the fifth word and leave nothing: refuse it here, so
  // that a line is taken only as lost_line() writes it.
  if (line.ends_with(' ')) return std::nullopt;
  std::array<std::string_view, 5> words;
  for (std::string_view& word : words) {
    if (line.empty()) return std::nullopt;
    const std::size_t space = line.find(' ');
    word = line.substr(0, space);
    line.remove_prefix(space == std::string_view::npos ? line.size() : space + 1);
    if (word.empty()) return std::nullopt;
  }
  if (!line.empty() || words[0] != "lost" || key_problem(words[2])) return std::nullopt;
  const std::optional<Namespace> ns = parse_namespace_word(words[1]);
  const std::optional<Token> token = Token::parse(words[3]);
  const std::optional<LossReason> reason = parse_loss_reason(words[4]);
  if (!ns || !token || !reason) return std::nullopt;
  return LostSlot{*ns, std::string(words[2]), *token, *reason};
}

}  // namespace turnstile::core
