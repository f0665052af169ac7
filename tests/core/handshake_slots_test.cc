// The admission policy for unfinished raft handshakes (core/handshake_slots.h): per-source shares,
// the room kept for known peers, the oldest unfinished connection making room, the first-message
// deadline; and, as properties over random floods, that a known peer is always admitted and that
// nothing strangers do takes a known peer's slot or holds more than the capacity.
#include "core/handshake_slots.h"

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace turnstile::core {
namespace {

constexpr Instant kT0 = Instant::from_ns(1'000'000'000);

HandshakeSlotsConfig small_config() {
  HandshakeSlotsConfig c;
  c.capacity = 6;
  c.per_source_max = 2;
  c.reserved_for_known = 2;
  return c;
}

std::string stranger(int i) { return "10.0.0." + std::to_string(i); }

TEST(HandshakeSlots, StrangersFillTheirShareThenTheOldestStrangerMakesRoom) {
  HandshakeSlots slots(small_config());
  std::vector<HandshakeSlot> held;
  for (int i = 0; i < 4; ++i) {  // capacity 6, 2 kept for known peers
    const HandshakeAdmission a = slots.admit(stranger(i), kT0);
    ASSERT_TRUE(a.admitted);
    EXPECT_FALSE(a.known);
    EXPECT_FALSE(a.evicted.has_value());
    held.push_back(a.slot);
  }
  EXPECT_EQ(slots.held_by_strangers(), 4u);
  const HandshakeAdmission fifth = slots.admit(stranger(4), kT0);
  ASSERT_TRUE(fifth.admitted);
  ASSERT_TRUE(fifth.evicted.has_value());
  EXPECT_EQ(*fifth.evicted, held[0]);  // the oldest
  EXPECT_EQ(slots.held(), 4u);
  EXPECT_EQ(slots.held_from(stranger(0)), 0u);
}

TEST(HandshakeSlots, OneSourceHoldsAtMostItsShareAndItsOwnOldestMakesRoom) {
  HandshakeSlots slots(small_config());
  const HandshakeAdmission other = slots.admit(stranger(9), kT0);
  const HandshakeAdmission first = slots.admit(stranger(1), kT0);
  const HandshakeAdmission second = slots.admit(stranger(1), kT0);
  ASSERT_TRUE(first.admitted && second.admitted && other.admitted);
  const HandshakeAdmission third = slots.admit(stranger(1), kT0);
  ASSERT_TRUE(third.admitted);
  ASSERT_TRUE(third.evicted.has_value());
  EXPECT_EQ(*third.evicted, first.slot);  // its own oldest, not the older slot of another source
  EXPECT_EQ(slots.held_from(stranger(1)), 2u);
  EXPECT_EQ(slots.held_from(stranger(9)), 1u);
}

TEST(HandshakeSlots, AKnownPeerGetsTheRoomStrangersCannotTake) {
  HandshakeSlots slots(small_config());
  EXPECT_TRUE(slots.learn("peer-a"));
  EXPECT_TRUE(slots.learn("peer-b"));
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(slots.admit(stranger(i), kT0).admitted);
  EXPECT_EQ(slots.held(), 4u);
  for (const char* peer : {"peer-a", "peer-b"}) {
    const HandshakeAdmission a = slots.admit(peer, kT0);
    ASSERT_TRUE(a.admitted);
    EXPECT_TRUE(a.known);
    EXPECT_FALSE(a.evicted.has_value());  // the reserved room: nobody loses a slot
  }
  EXPECT_EQ(slots.held(), 6u);
  // Strangers keep churning among themselves, never through the peers' slots.
  const HandshakeAdmission late = slots.admit(stranger(20), kT0);
  ASSERT_TRUE(late.admitted);
  ASSERT_TRUE(late.evicted.has_value());
  EXPECT_EQ(slots.held_from("peer-a"), 1u);
  EXPECT_EQ(slots.held_from("peer-b"), 1u);
}

TEST(HandshakeSlots, AKnownPeerFindingEverySlotHeldTakesTheOldestStrangersSlot) {
  HandshakeSlotsConfig c = small_config();
  c.per_source_max = 6;
  HandshakeSlots slots(c);
  slots.learn("peer");
  ASSERT_TRUE(slots.admit("peer", kT0).admitted);
  ASSERT_TRUE(slots.admit("peer", kT0).admitted);
  const HandshakeAdmission oldest_stranger = slots.admit(stranger(1), kT0);
  ASSERT_TRUE(oldest_stranger.admitted);
  for (int i = 2; i < 5; ++i) ASSERT_TRUE(slots.admit(stranger(i), kT0).admitted);
  ASSERT_EQ(slots.held(), 6u);
  const HandshakeAdmission a = slots.admit("peer", kT0);
  ASSERT_TRUE(a.admitted);
  ASSERT_TRUE(a.evicted.has_value());
  EXPECT_EQ(*a.evicted, oldest_stranger.slot);  // not one of the peer's older slots
  EXPECT_EQ(slots.held_from("peer"), 3u);
}

TEST(HandshakeSlots, AStrangerIsRefusedOnlyWhenKnownPeersHoldEverySlot) {
  HandshakeSlotsConfig c = small_config();
  c.per_source_max = 6;
  HandshakeSlots slots(c);
  slots.learn("peer");
  std::vector<HandshakeSlot> peer_slots;
  for (int i = 0; i < 6; ++i) peer_slots.push_back(slots.admit("peer", kT0).slot);
  const HandshakeAdmission refused = slots.admit(stranger(1), kT0);
  EXPECT_FALSE(refused.admitted);
  EXPECT_FALSE(refused.evicted.has_value());
  EXPECT_EQ(slots.held(), 6u);
  // A known peer still gets in, in place of the oldest.
  const HandshakeAdmission a = slots.admit("other-peer", kT0);
  EXPECT_FALSE(a.known);  // not learned: a stranger, refused too
  EXPECT_FALSE(a.admitted);
  slots.learn("other-peer");
  const HandshakeAdmission b = slots.admit("other-peer", kT0);
  ASSERT_TRUE(b.admitted);
  EXPECT_EQ(b.evicted, peer_slots[0]);
}

TEST(HandshakeSlots, NoRoomForStrangersAtAllWhenEverySlotIsReserved) {
  HandshakeSlotsConfig c = small_config();
  c.reserved_for_known = c.capacity;
  HandshakeSlots slots(c);
  EXPECT_FALSE(slots.admit(stranger(1), kT0).admitted);
  slots.learn(stranger(1));
  EXPECT_TRUE(slots.admit(stranger(1), kT0).admitted);
}

TEST(HandshakeSlots, ReleaseGivesTheSlotBackAndIgnoresSlotsNotHeld) {
  HandshakeSlots slots(small_config());
  const HandshakeAdmission a = slots.admit(stranger(1), kT0);
  const HandshakeAdmission b = slots.admit(stranger(1), kT0);
  const HandshakeAdmission c = slots.admit(stranger(1), kT0);  // evicts a
  ASSERT_EQ(c.evicted, a.slot);
  slots.release(a.slot);  // already gone: nothing happens
  EXPECT_EQ(slots.held(), 2u);
  slots.release(b.slot);
  EXPECT_EQ(slots.held(), 1u);
  EXPECT_EQ(slots.held_from(stranger(1)), 1u);
  slots.release(b.slot);
  slots.release(12345);
  EXPECT_EQ(slots.held(), 1u);
  slots.release(c.slot);
  EXPECT_EQ(slots.held(), 0u);
  EXPECT_EQ(slots.held_from(stranger(1)), 0u);
}

TEST(HandshakeSlots, TheFirstMessageIsDueAFixedTimeAfterAdmission) {
  HandshakeSlots slots;  // the defaults the transport runs with
  EXPECT_EQ(slots.config().capacity, 64u);
  EXPECT_EQ(slots.config().per_source_max, 8u);
  EXPECT_EQ(slots.config().reserved_for_known, 16u);
  const HandshakeAdmission a = slots.admit("x", kT0);
  EXPECT_EQ(a.deadline, kT0 + Duration::milliseconds(500));
  const HandshakeAdmission b = slots.admit("x", kT0 + Duration::seconds(3));
  EXPECT_EQ(b.deadline, kT0 + Duration::milliseconds(3500));
  EXPECT_NE(a.slot, b.slot);
  EXPECT_NE(a.slot, 0u);
}

TEST(HandshakeSlots, LearningASourceMakesItsHeldSlotsAPeersAndItRemembersABoundedNumber) {
  HandshakeSlotsConfig c = small_config();
  c.known_max = 2;
  HandshakeSlots slots(c);
  ASSERT_TRUE(slots.admit(stranger(1), kT0).admitted);
  EXPECT_EQ(slots.held_by_strangers(), 1u);
  EXPECT_TRUE(slots.learn(stranger(1)));
  EXPECT_EQ(slots.held_by_strangers(), 0u);
  EXPECT_TRUE(slots.learn(stranger(1)));  // again: still one
  EXPECT_TRUE(slots.learn(stranger(2)));
  EXPECT_FALSE(slots.learn(stranger(3)));
  EXPECT_FALSE(slots.is_known(stranger(3)));
  EXPECT_EQ(slots.known_count(), 2u);
}

// --- properties over random floods --------------------------------------------------------------

struct Op {
  enum Kind { kAdmit, kRelease, kLearn } kind;
  int source;  // sources 0..2 are learned before the run; the others are strangers unless learned
  int pick;    // kRelease: which held slot, modulo their count
};

rc::Gen<Op> op_gen() {
  return rc::gen::apply(
      [](int kind, int source, int pick) {
        const Op::Kind k = kind < 7 ? Op::kAdmit : kind < 9 ? Op::kRelease : Op::kLearn;
        return Op{k, source, pick};
      },
      rc::gen::inRange(0, 10), rc::gen::inRange(0, 12), rc::gen::inRange(0, 1000));
}

std::string source_name(int i) { return i < 3 ? "peer-" + std::to_string(i) : stranger(i); }

RC_GTEST_PROP(HandshakeSlotsProperty, AKnownPeerIsAlwaysAdmittedAndStrangersNeverTakeItsSlot, ()) {
  HandshakeSlotsConfig config;
  config.capacity = *rc::gen::inRange<std::size_t>(1, 20);
  config.per_source_max = *rc::gen::inRange<std::size_t>(1, 8);
  config.reserved_for_known = *rc::gen::inRange<std::size_t>(0, config.capacity + 1);
  HandshakeSlots slots(config);
  for (int i = 0; i < 3; ++i) slots.learn(source_name(i));
  const auto ops = *rc::gen::container<std::vector<Op>>(op_gen());

  std::map<HandshakeSlot, std::string> model;  // what the test believes is held
  Instant now = kT0;
  for (const Op& op : ops) {
    now = now + Duration::milliseconds(1);
    const std::string source = source_name(op.source);
    if (op.kind == Op::kLearn) {
      slots.learn(source);
      continue;
    }
    if (op.kind == Op::kRelease) {
      if (model.empty()) continue;
      auto it = model.begin();
      std::advance(it, op.pick % static_cast<int>(model.size()));
      slots.release(it->first);
      model.erase(it);
      RC_ASSERT(slots.held() == model.size());
      continue;
    }
    const bool known = slots.is_known(source);
    bool all_known = true;
    for (const auto& [slot, from] : model) all_known = all_known && slots.is_known(from);
    const bool full = model.size() >= config.capacity;
    const HandshakeAdmission a = slots.admit(source, now);
    RC_ASSERT(a.known == known);
    if (known) RC_ASSERT(a.admitted);
    if (!a.admitted) {
      RC_ASSERT(!known);
      RC_ASSERT(!a.evicted.has_value());
      RC_ASSERT(slots.held() == model.size());
      continue;
    }
    RC_ASSERT(a.deadline == now + config.first_message);
    RC_ASSERT(model.find(a.slot) == model.end());
    if (a.evicted) {
      const auto victim = model.find(*a.evicted);
      RC_ASSERT(victim != model.end());
      if (slots.is_known(victim->second)) {
        // Only its own source, or a peer when peers hold every slot, takes a peer's slot.
        RC_ASSERT(victim->second == source || (known && full && all_known));
      }
      model.erase(victim);
    }
    model.emplace(a.slot, source);
    RC_ASSERT(slots.held() == model.size());
    RC_ASSERT(slots.held() <= config.capacity);
    RC_ASSERT(slots.held_by_strangers() <= config.capacity - config.reserved_for_known);
    RC_ASSERT(slots.held_from(source) <= config.per_source_max);
  }
}

// Strangers alone, however many and from however many sources, never hold more than their share,
// and the peers' reserved room stays free for them.
RC_GTEST_PROP(HandshakeSlotsProperty, StrangersNeverHoldMoreThanTheirShare, ()) {
  HandshakeSlots slots;
  slots.learn("peer");
  const auto sources = *rc::gen::container<std::vector<int>>(rc::gen::inRange(0, 40));
  Instant now = kT0;
  for (int s : sources) {
    const HandshakeAdmission a = slots.admit(stranger(s), now);
    RC_ASSERT(a.admitted);
    RC_ASSERT(slots.held() <= 48u);
    RC_ASSERT(slots.held_from(stranger(s)) <= 8u);
    now = now + Duration::milliseconds(1);
  }
  for (int i = 0; i < 16; ++i) {
    const HandshakeAdmission a = slots.admit("peer", now);
    RC_ASSERT(a.admitted);
    // Its own share, once full, recycles its own oldest; never a stranger's before that.
    if (i < 8) RC_ASSERT(!a.evicted.has_value());
  }
}

}  // namespace
}  // namespace turnstile::core
