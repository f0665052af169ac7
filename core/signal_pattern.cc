// Signal channels and listen patterns: see signal_pattern.h.
#include "core/signal_pattern.h"

#include <algorithm>

namespace turnstile::core {
namespace {

bool is_wildcard(std::string_view token) { return token == "*" || token == ">"; }

}  // namespace

std::vector<std::string_view> signal_tokens(std::string_view name) {
  std::vector<std::string_view> tokens;
  while (true) {
    const std::size_t dot = name.find('.');
    tokens.push_back(name.substr(0, dot));
    if (dot == std::string_view::npos) return tokens;
    name.remove_prefix(dot + 1);
  }
}

SignalNameError check_signal_pattern(std::string_view pattern) {
  const std::vector<std::string_view> tokens = signal_tokens(pattern);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::string_view token = tokens[i];
    if (token.empty()) return SignalNameError::kEmptyToken;
    if (!is_wildcard(token) && token.find_first_of("*>") != std::string_view::npos) {
      return SignalNameError::kPartialWildcard;
    }
    if (token == ">" && i + 1 != tokens.size()) return SignalNameError::kTailNotLast;
  }
  return SignalNameError::kNone;
}

SignalNameError check_signal_channel(std::string_view channel) {
  if (channel.find_first_of("*>") != std::string_view::npos) {
    return SignalNameError::kWildcardInChannel;
  }
  for (const std::string_view token : signal_tokens(channel)) {
    if (token.empty()) return SignalNameError::kEmptyToken;
  }
  return SignalNameError::kNone;
}

std::string_view signal_name_error_text(SignalNameError error) {
  switch (error) {
    case SignalNameError::kNone:
      return "";
    case SignalNameError::kEmptyToken:
      return "empty token";
    case SignalNameError::kPartialWildcard:
      return "a wildcard must be a whole token";
    case SignalNameError::kTailNotLast:
      return "'>' must be the last token";
    case SignalNameError::kWildcardInChannel:
      return "a channel takes no wildcard";
  }
  return "";
}

bool signal_pattern_matches(std::string_view pattern, std::string_view channel) {
  const std::vector<std::string_view> want = signal_tokens(pattern);
  const std::vector<std::string_view> have = signal_tokens(channel);
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (want[i] == ">") return i < have.size();  // at least one channel token remains
    if (i >= have.size() || (want[i] != "*" && want[i] != have[i])) return false;
  }
  return want.size() == have.size();
}

bool signal_pattern_has_wildcard(std::string_view pattern) {
  const std::vector<std::string_view> tokens = signal_tokens(pattern);
  return std::any_of(tokens.begin(), tokens.end(), is_wildcard);
}

std::size_t signal_payload_max(std::string_view channel) {
  // dflockd's rule: 65536 - len("sig ") - len(channel) - 1 (the space after the channel).
  constexpr std::size_t kFraming = 4 + 1;
  return channel.size() + kFraming >= kSignalFrameMax ? 0
                                                      : kSignalFrameMax - kFraming - channel.size();
}

void append_signal_frame(std::string_view channel, std::string_view payload, std::string& out) {
  out.append("sig ");
  out.append(channel);
  out.push_back(' ');
  out.append(payload);
  out.push_back('\n');
}

std::optional<SignalFrame> parse_signal_frame(std::string_view line) {
  constexpr std::string_view kPrefix = "sig ";
  if (line.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  line.remove_prefix(kPrefix.size());
  const std::size_t space = line.find(' ');
  if (space == 0 || space == std::string_view::npos || space + 1 == line.size()) {
    return std::nullopt;
  }
  return SignalFrame{std::string(line.substr(0, space)), std::string(line.substr(space + 1))};
}

}  // namespace turnstile::core
