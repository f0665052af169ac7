// Signal channels and listen patterns: see signal_pattern.h.
#include "core/signal_pattern.h"

namespace turnstile::core {
namespace {

// Calls `each(token, last)` for every dot-separated token of `name`, in order.
template <class Each>
void for_each_token(std::string_view name, Each each) {
  while (true) {
    const std::size_t dot = name.find('.');
    if (dot == std::string_view::npos) {
      each(name, true);
      return;
    }
    each(name.substr(0, dot), false);
    name.remove_prefix(dot + 1);
  }
}

bool is_wildcard(std::string_view token) { return token == "*" || token == ">"; }

// The next token of `name` (consumed), or nullopt-like empty with `done` when none is left.
std::string_view next_token(std::string_view& name, bool& done) {
  const std::size_t dot = name.find('.');
  std::string_view token = name.substr(0, dot);
  if (dot == std::string_view::npos) {
    done = true;
    name = {};
  } else {
    name.remove_prefix(dot + 1);
  }
  return token;
}

}  // namespace

SignalNameError check_signal_pattern(std::string_view pattern) {
  SignalNameError error = SignalNameError::kNone;
  for_each_token(pattern, [&](std::string_view token, bool last) {
    if (error != SignalNameError::kNone) return;
    if (token.empty()) {
      error = SignalNameError::kEmptyToken;
    } else if (!is_wildcard(token) && token.find_first_of("*>") != std::string_view::npos) {
      error = SignalNameError::kPartialWildcard;
    } else if (token == ">" && !last) {
      error = SignalNameError::kTailNotLast;
    }
  });
  return error;
}

SignalNameError check_signal_channel(std::string_view channel) {
  if (channel.find_first_of("*>") != std::string_view::npos) {
    return SignalNameError::kWildcardInChannel;
  }
  SignalNameError error = SignalNameError::kNone;
  for_each_token(channel, [&](std::string_view token, bool) {
    if (token.empty()) error = SignalNameError::kEmptyToken;
  });
  return error;
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
  bool pattern_done = false;
  bool channel_done = false;
  while (!pattern_done) {
    if (channel_done) return false;  // the pattern has tokens left, the channel none
    const std::string_view want = next_token(pattern, pattern_done);
    if (want == ">") return true;  // at least this channel token remains
    const std::string_view have = next_token(channel, channel_done);
    if (want != "*" && want != have) return false;
  }
  return channel_done;
}

bool signal_pattern_has_wildcard(std::string_view pattern) {
  bool wildcard = false;
  for_each_token(pattern, [&](std::string_view token, bool) { wildcard |= is_wildcard(token); });
  return wildcard;
}

}  // namespace turnstile::core
