// Lost slots: a holder that lost its slot without releasing it (docs/semantics.md, "Lost slots";
// docs/protocol.md, `lost-notify`). One vocabulary for everything that speaks of a loss: the
// engine that reports it (Engine::take_losses), the `lost` push line a TCP connection that opted
// in is sent, the HTTP sessions that remember it for their next reply, and the client that reads
// the line back.
//
// Thread affinity: free functions and values, safe anywhere.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/protocol.h"
#include "core/types.h"

namespace turnstile::core {

// Why a holder lost its slot without releasing it.
enum class LossReason : std::uint8_t {
  kExpired,    // its lease ran out
  kForced,     // an operator force-released it
  kReclaimed,  // an orphan kept for a stable ref (docs/semantics.md) ran out of time; the loss
               // goes to the open sessions with that ref
};
// expired, forced or reclaimed.
std::string_view loss_reason_name(LossReason reason);
std::optional<LossReason> parse_loss_reason(std::string_view word);

// One lost slot, as its push line names it: `lost <kind> <key> <token> <reason>`.
struct LostSlot {
  Namespace ns = Namespace::kLock;
  std::string key;
  Token token;
  LossReason reason = LossReason::kExpired;
  bool operator==(const LostSlot&) const = default;
};

// A slot lost by a session that is still open (Engine::take_losses): what a connection that asked
// for lost-notify is told.
struct Loss {
  SessionId session;
  LostSlot slot;
  bool operator==(const Loss&) const = default;
};

// The push line of a lost slot, with its newline.
std::string lost_line(const LostSlot& slot);
// The slot of a `lost <kind> <key> <token> <reason>` line (its '\n' optional); nullopt when the
// line is not one (every word is checked: a known kind, a valid key, a whole token, a known
// reason, single spaces, nothing more).
std::optional<LostSlot> parse_lost_line(std::string_view line);

}  // namespace turnstile::core
