#include "core/handshake_slots.h"

#include "core/assert.h"

namespace turnstile::core {

HandshakeSlots::HandshakeSlots(HandshakeSlotsConfig config) : config_(config) {
  TS_ASSERT(config_.capacity >= 1);
  TS_ASSERT(config_.per_source_max >= 1);
  TS_ASSERT(config_.reserved_for_known <= config_.capacity);
  TS_ASSERT(config_.first_message > Duration::zero());
}

bool HandshakeSlots::learn(std::string_view source) {
  if (is_known(source)) return true;
  if (known_.size() >= config_.known_max) return false;
  known_.emplace(source);
  return true;
}

bool HandshakeSlots::is_known(std::string_view source) const {
  return known_.find(source) != known_.end();
}

std::size_t HandshakeSlots::held_by_strangers() const {
  std::size_t n = 0;
  for (const auto& [slot, held] : held_) n += is_known(held.source) ? 0 : 1;
  return n;
}

std::size_t HandshakeSlots::held_from(std::string_view source) const {
  const auto it = per_source_.find(source);
  return it == per_source_.end() ? 0 : it->second;
}

template <typename Pick>
HandshakeSlots::HeldMap::iterator HandshakeSlots::oldest(Pick pick) {
  for (auto it = held_.begin(); it != held_.end(); ++it) {
    if (pick(it->second)) return it;
  }
  return held_.end();
}

void HandshakeSlots::drop(HeldMap::iterator it) {
  const auto count = per_source_.find(it->second.source);
  TS_ASSERT(count != per_source_.end() && count->second > 0);
  if (--count->second == 0) per_source_.erase(count);
  held_.erase(it);
}

HandshakeAdmission HandshakeSlots::admit(std::string_view source, Instant now) {
  HandshakeAdmission out;
  out.known = is_known(source);
  const auto stranger = [this](const Held& h) { return !is_known(h.source); };
  HeldMap::iterator victim = held_.end();
  if (held_from(source) >= config_.per_source_max) {
    // The source holds its share: its own oldest makes room, whatever the rest holds.
    victim = oldest([source](const Held& h) { return h.source == source; });
    TS_ASSERT(victim != held_.end());
  } else if (out.known) {
    if (held_.size() >= config_.capacity) {
      victim = oldest(stranger);
      if (victim == held_.end()) victim = held_.begin();
    }
  } else if (held_.size() >= config_.capacity ||
             held_by_strangers() >= config_.capacity - config_.reserved_for_known) {
    victim = oldest(stranger);
    if (victim == held_.end()) return out;  // known sources hold every slot open to strangers
  }
  if (victim != held_.end()) {
    out.evicted = victim->first;
    drop(victim);
  }
  out.admitted = true;
  out.slot = next_slot_++;
  out.deadline = now + config_.first_message;
  held_.emplace(out.slot, Held{std::string(source), out.deadline});
  ++per_source_[std::string(source)];
  check();
  return out;
}

void HandshakeSlots::release(HandshakeSlot slot) {
  const auto it = held_.find(slot);
  if (it == held_.end()) return;
  drop(it);
}

void HandshakeSlots::check() const {
  TS_ASSERT(held_.size() <= config_.capacity);
  TS_ASSERT(held_by_strangers() <= config_.capacity - config_.reserved_for_known);
  for (const auto& [source, count] : per_source_) {
    TS_ASSERT(count > 0 && count <= config_.per_source_max);
  }
}

}  // namespace turnstile::core
