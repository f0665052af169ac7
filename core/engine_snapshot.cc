#include "core/engine_snapshot.h"

#include <algorithm>
#include <array>
#include <unordered_map>
#include <utility>

#include "core/bytes.h"
#include "core/time.h"
#include "core/wire.h"

namespace turnstile::core {
namespace {

using Kind = DeadlineQueue::Kind;
using Slot = SnapshotImage::Slot;
constexpr std::size_t kNamespaces = 3;

// ---- writing --------------------------------------------------------------------------------

void write_slot(ByteWriter& w, const Slot& slot) {
  w.u8(slot ? 1 : 0);
  if (slot) {
    w.i64(slot->at.ns());
    w.u64(slot->order);
  }
}

void write_header(ByteWriter& w, const SnapshotImage& image) {
  w.u8(kSnapshotVersion);
  w.i64(image.now.ns());
  w.u64(image.last_fence.value);
  w.u64(image.block_next);
  w.u64(image.block_left);
  const EngineCounters& counters = image.counters;
  for (std::uint64_t counter :
       {counters.clock_regressions, counters.grants, counters.lease_expiries,
        counters.wait_timeouts, counters.resources_collected, counters.fence_exhausted,
        counters.forced_releases}) {
    w.u64(counter);
  }
  w.u64(image.next_serial);
  w.u64(image.sequence);
}

void write_resource(ByteWriter& w, const SnapshotImage::Resource& resource) {
  w.u8(static_cast<std::uint8_t>(resource.ns));
  w.bytes(resource.key);
  w.i64(resource.limit);
  w.u64(resource.serial);
  w.i64(resource.last_activity.ns());
  write_slot(w, resource.gc);
  write_slot(w, resource.delay);
  w.u64(resource.forced_fences.size());
  for (const std::uint64_t fence : resource.forced_fences) w.u64(fence);
  w.u64(resource.holders.size());
  for (const SnapshotImage::Holder& h : resource.holders) {
    w.u64(h.token.fence.value);
    w.u64(h.token.salt);
    w.u64(h.session.value);
    w.u8(h.flags);
    if ((h.flags & kHolderOrphan) != 0) w.bytes(h.ref);
    w.i64(h.lease_s);
    w.i64(h.deadline.ns());
    write_slot(w, h.slot);
  }
  w.u64(resource.waiters.size());
  for (const SnapshotImage::Waiter& waiter : resource.waiters) {
    w.u64(waiter.session.value);
    w.i64(waiter.lease_s);
    w.u8(static_cast<std::uint8_t>(waiter.flags | (waiter.shared ? kWaiterShared : 0)));
    if ((waiter.flags & kWaiterOrphan) != 0) w.bytes(waiter.ref);
    w.i64(waiter.since.ns());
    write_slot(w, waiter.slot);
  }
}

// ---- reading --------------------------------------------------------------------------------

// Reads one snapshot into an image, checking every rule as it goes; each step is false for bytes
// to refuse.
class Decoder {
 public:
  Decoder(std::string_view bytes, SnapshotImage& image) : r_(bytes), image_(image) {}

  bool header();
  bool resources(std::int64_t resources_max);
  bool records_and_refs();
  bool records_match_nodes() const;
  bool at_end() const { return r_.left() == 0; }

 private:
  bool resource(SnapshotImage::Resource& resource);
  bool holders(SnapshotImage::Resource& resource);
  bool holder(SnapshotImage::Holder& holder, bool read_write, std::uint64_t holder_count);
  bool waiters(SnapshotImage::Resource& resource);
  bool waiter(SnapshotImage::Waiter& waiter, bool read_write);
  bool read_slot(Slot& slot, Kind kind, std::optional<std::uint64_t> rank = std::nullopt);
  bool unique_sequence(const Slot& slot) {
    return !slot || sequences_seen_.emplace(DeadlineQueue::rank_of(*slot), true).second;
  }
  static bool valid_lease(std::int64_t lease_s) { return lease_s >= 1 && lease_s <= kMaxSeconds; }
  bool has_record(std::uint64_t session, std::uint64_t serial, SnapshotRecordState state) const;

  ByteReader r_;
  SnapshotImage& image_;
  std::uint8_t version_ = 0;
  std::unordered_map<std::uint64_t, std::size_t> by_serial_;
  std::array<std::unordered_map<std::string, std::size_t>, kNamespaces> by_key_;
  std::unordered_map<std::uint64_t, bool> sequences_seen_;
  std::unordered_map<std::uint64_t, std::uint64_t> parked_of_session_;  // session -> count
};

bool Decoder::header() {
  std::int64_t now = 0;
  if (!r_.u8(version_) || (version_ != kSnapshotVersion && version_ != 2) || !r_.i64(now) ||
      !r_.u64(image_.last_fence.value) || !r_.u64(image_.block_next) ||
      !r_.u64(image_.block_left)) {
    return false;
  }
  image_.now = Instant::from_ns(now);
  EngineCounters& counters = image_.counters;
  for (std::uint64_t* counter :
       {&counters.clock_regressions, &counters.grants, &counters.lease_expiries,
        &counters.wait_timeouts, &counters.resources_collected, &counters.fence_exhausted}) {
    if (!r_.u64(*counter)) return false;
  }
  if (version_ > 2 && !r_.u64(counters.forced_releases)) return false;
  if (!r_.u64(image_.next_serial) || !r_.u64(image_.sequence) ||
      image_.sequence >= (std::uint64_t{1} << 56)) {
    return false;
  }
  // The next fence of the block is above the last one minted, and the block fits the space.
  return image_.block_left == 0 || (image_.block_next > image_.last_fence.value &&
                                    image_.block_left - 1 <= UINT64_MAX - image_.block_next);
}

// A slot read back from a snapshot; refused unless its kind is `kind` and (for a ranked GC
// timer) its rank is `rank`, or (for the others) its sequence was issued before the image's.
// A version-2 snapshot numbers the kinds as they were before kDelayEnd: its slots are read with
// that number and given the current one.
bool Decoder::read_slot(Slot& slot, Kind kind, std::optional<std::uint64_t> rank) {
  std::uint8_t scheduled = 0;
  if (!r_.u8(scheduled) || scheduled > 1) return false;
  slot.reset();
  if (scheduled == 0) return true;
  std::int64_t at = 0;
  std::uint64_t order = 0;
  if (!r_.i64(at) || !r_.u64(order)) return false;
  std::uint64_t code = static_cast<std::uint64_t>(kind);
  if (version_ == 2) {
    if (kind == Kind::kDelayEnd) return false;
    if (kind > Kind::kDelayEnd) --code;
  }
  if ((order >> 56) != code) return false;
  const std::uint64_t below = order & ((std::uint64_t{1} << 56) - 1);
  slot =
      DeadlineQueue::Slot{Instant::from_ns(at), (static_cast<std::uint64_t>(kind) << 56) | below};
  return rank ? below == *rank : (below >= 1 && below <= image_.sequence);
}

bool Decoder::resources(std::int64_t resources_max) {
  std::uint64_t resource_count = 0;
  if (!r_.count(resource_count, 40)) return false;
  if (static_cast<std::int64_t>(resource_count) > resources_max) return false;
  image_.resources.resize(static_cast<std::size_t>(resource_count));
  for (std::size_t i = 0; i < image_.resources.size(); ++i) {
    if (!resource(image_.resources[i])) return false;
    by_serial_.emplace(image_.resources[i].serial, i);
  }
  return true;
}

bool Decoder::resource(SnapshotImage::Resource& image) {
  const std::uint64_t previous_serial =
      &image == image_.resources.data() ? 0 : (&image - 1)->serial;
  std::uint8_t ns = 0;
  std::int64_t last_activity = 0;
  const std::uint8_t ns_max = version_ == 2 ? 1 : 2;
  if (!r_.u8(ns) || ns > ns_max || !r_.bytes(image.key) || key_problem(image.key) ||
      !r_.i64(image.limit) || !r_.u64(image.serial) || !r_.i64(last_activity)) {
    return false;
  }
  image.ns = static_cast<Namespace>(ns);
  image.last_activity = Instant::from_ns(last_activity);
  const bool limit_ok =
      image.ns == Namespace::kSemaphore ? limit_in_bounds(image.limit) : image.limit == 1;
  // Serials are written in creation order, each at most the counter.
  if (!limit_ok || image.serial <= previous_serial || image.serial > image_.next_serial ||
      !by_key_[ns].emplace(image.key, 0).second) {
    return false;
  }
  if (!read_slot(image.gc, Kind::kIdleGc, image.serial) ||
      (version_ > 2 && !read_slot(image.delay, Kind::kDelayEnd)) || !unique_sequence(image.delay)) {
    return false;
  }
  if (version_ > 2) {
    std::uint64_t forced = 0;
    if (!r_.count(forced, 8) || forced > kForcedRemembered) return false;
    image.forced_fences.resize(static_cast<std::size_t>(forced));
    for (std::uint64_t& fence : image.forced_fences) {
      if (!r_.u64(fence) || fence == 0 || fence > image_.last_fence.value) return false;
    }
  }
  if (!holders(image) || !waiters(image)) return false;
  // Waiters queue only while the head cannot be granted (a full resource, a writer, readers
  // before a waiting writer, or a lock-delay): a promotion that cannot mint a fence answers
  // and drops them instead.
  if (!image.waiters.empty() && !image.delay) {
    const bool head_admitted =
        image.ns == Namespace::kReadWrite
            ? image.holders.empty() || (image.waiters.front().shared &&
                                        (image.holders.front().flags & kHolderShared) != 0)
            : static_cast<std::int64_t>(image.holders.size()) < image.limit;
    if (head_admitted) return false;
  }
  return true;
}

bool Decoder::holders(SnapshotImage::Resource& image) {
  const bool read_write = image.ns == Namespace::kReadWrite;
  std::uint64_t holder_count = 0;
  // A read-write lock has any number of readers (or one writer, checked below).
  if (!r_.count(holder_count, 42) ||
      (!read_write && static_cast<std::int64_t>(holder_count) > image.limit)) {
    return false;
  }
  image.holders.resize(static_cast<std::size_t>(holder_count));
  std::unordered_map<std::uint64_t, bool> fences_seen;
  for (SnapshotImage::Holder& holder : image.holders) {
    if (!this->holder(holder, read_write, holder_count) ||
        !fences_seen.emplace(holder.token.fence.value, true).second) {
      return false;
    }
  }
  return true;
}

bool Decoder::holder(SnapshotImage::Holder& holder, bool read_write, std::uint64_t holder_count) {
  std::int64_t deadline = 0;
  if (!r_.u64(holder.token.fence.value) || !r_.u64(holder.token.salt) ||
      !r_.u64(holder.session.value) || !r_.u8(holder.flags) ||
      ((holder.flags & kHolderOrphan) != 0 &&
       (!r_.bytes(holder.ref) || !is_valid_stable_ref(holder.ref))) ||
      !r_.i64(holder.lease_s) || !r_.i64(deadline) || !read_slot(holder.slot, Kind::kLeaseExpiry)) {
    return false;
  }
  holder.deadline = Instant::from_ns(deadline);
  // Every holder has its lease timer; only an owned holder can await its `w`, and only one
  // without an owner is orphaned under a ref.
  return holder.token.fence.value != 0 && holder.token.fence <= image_.last_fence &&
         holder.session.value != 0 && holder.flags <= 15 &&
         !((holder.flags & kHolderShared) != 0 && !read_write) &&
         !((holder.flags & kHolderShared) == 0 && read_write && holder_count > 1) &&
         !((holder.flags & kHolderTwoPhasePending) != 0 && (holder.flags & kHolderOwned) == 0) &&
         !((holder.flags & kHolderOrphan) != 0 &&
           (holder.flags & ~kHolderShared) != kHolderOrphan) &&
         valid_lease(holder.lease_s) && holder.slot && unique_sequence(holder.slot);
}

bool Decoder::waiters(SnapshotImage::Resource& image) {
  std::uint64_t waiter_count = 0;
  if (!r_.count(waiter_count, 18)) return false;
  image.waiters.resize(static_cast<std::size_t>(waiter_count));
  for (SnapshotImage::Waiter& waiter : image.waiters) {
    if (!this->waiter(waiter, image.ns == Namespace::kReadWrite)) return false;
  }
  return true;
}

bool Decoder::waiter(SnapshotImage::Waiter& waiter, bool read_write) {
  std::int64_t since = image_.now.ns();
  if (!r_.u64(waiter.session.value) || !r_.i64(waiter.lease_s) || !r_.u8(waiter.flags) ||
      ((waiter.flags & kWaiterOrphan) != 0 &&
       (!r_.bytes(waiter.ref) || !is_valid_stable_ref(waiter.ref))) ||
      (version_ > 2 && !r_.i64(since)) || !read_slot(waiter.slot, Kind::kWaitTimeout)) {
    return false;
  }
  waiter.since = Instant::from_ns(since);
  waiter.shared = (waiter.flags & kWaiterShared) != 0;
  if ((waiter.shared && !read_write) || waiter.since > image_.now) return false;
  waiter.flags &= static_cast<std::uint8_t>(~kWaiterShared);  // the rest is checked as before
  const bool orphan = waiter.flags == kWaiterOrphan;
  const bool parked = (waiter.flags & kWaiterParked) != 0;
  // A waiter has a timeout exactly while a request is parked on it or it is orphaned (the
  // end of its orphan time), and a session parks one request at a time.
  // A waiter is there for a parked request or for an `e` (or both), or as an orphan alone.
  return !(waiter.session.value == 0 || waiter.flags == 0 || (waiter.flags > 3 && !orphan) ||
           !valid_lease(waiter.lease_s) || (parked || orphan) != waiter.slot.has_value() ||
           !unique_sequence(waiter.slot) ||
           (parked && ++parked_of_session_[waiter.session.value] > 1));
}

// Two-phase records in (session, serial) order, each naming a resource of the image; then the
// sessions' stable refs in ascending session order.
bool Decoder::records_and_refs() {
  std::uint64_t record_count = 0;
  if (!r_.count(record_count, 17)) return false;
  image_.records.resize(static_cast<std::size_t>(record_count));
  std::pair<std::uint64_t, std::uint64_t> previous_record{0, 0};
  for (SnapshotImage::Record& record : image_.records) {
    std::uint8_t state = 0;
    if (!r_.u64(record.session) || !r_.u64(record.serial) || !r_.u8(state) || state > 2 ||
        record.session == 0 || !by_serial_.contains(record.serial) ||
        std::pair(record.session, record.serial) <= previous_record) {
      return false;
    }
    previous_record = {record.session, record.serial};
    record.state = static_cast<SnapshotRecordState>(state);
  }
  std::uint64_t ref_count = 0;
  if (!r_.count(ref_count, 9)) return false;
  image_.refs.resize(static_cast<std::size_t>(ref_count));
  std::uint64_t previous_ref_session = 0;
  for (SnapshotImage::Ref& ref : image_.refs) {
    if (!r_.u64(ref.session) || ref.session <= previous_ref_session || !r_.bytes(ref.ref) ||
        !is_valid_stable_ref(ref.ref)) {
      return false;
    }
    previous_ref_session = ref.session;
  }
  return true;
}

bool Decoder::has_record(std::uint64_t session, std::uint64_t serial,
                         SnapshotRecordState state) const {
  const std::vector<SnapshotImage::Record>& records = image_.records;
  auto it = std::lower_bound(records.begin(), records.end(), std::pair(session, serial),
                             [](const SnapshotImage::Record& record, const auto& wanted) {
                               return std::pair(record.session, record.serial) < wanted;
                             });
  return it != records.end() && it->session == session && it->serial == serial &&
         it->state == state;
}

// Exactly one record per two-phase waiter (kWaiting) and per holder awaiting its `w` (kGranted)
// of the same session and resource; kExpired ones name neither.
bool Decoder::records_match_nodes() const {
  std::unordered_map<std::uint64_t, std::unordered_map<std::uint64_t, int>> named;
  for (const SnapshotImage::Resource& image : image_.resources) {
    for (const SnapshotImage::Holder& holder : image.holders) {
      if ((holder.flags & kHolderTwoPhasePending) == 0) continue;
      if (!has_record(holder.session.value, image.serial, SnapshotRecordState::kGranted) ||
          ++named[holder.session.value][image.serial] > 1) {
        return false;
      }
    }
    for (const SnapshotImage::Waiter& waiter : image.waiters) {
      if ((waiter.flags & kWaiterTwoPhase) == 0) continue;
      if (!has_record(waiter.session.value, image.serial, SnapshotRecordState::kWaiting) ||
          ++named[waiter.session.value][image.serial] > 1) {
        return false;
      }
    }
  }
  for (const SnapshotImage::Record& record : image_.records) {
    const bool needs_node = record.state != SnapshotRecordState::kExpired;
    auto session_it = named.find(record.session);
    const bool has_node = session_it != named.end() && session_it->second.contains(record.serial);
    if (needs_node != has_node) return false;
  }
  return true;
}

}  // namespace

std::string encode_snapshot(SnapshotImage image) {
  std::sort(image.resources.begin(), image.resources.end(),
            [](const SnapshotImage::Resource& a, const SnapshotImage::Resource& b) {
              return a.serial < b.serial;
            });
  std::sort(image.records.begin(), image.records.end(),
            [](const SnapshotImage::Record& a, const SnapshotImage::Record& b) {
              return std::pair(a.session, a.serial) < std::pair(b.session, b.serial);
            });
  std::sort(image.refs.begin(), image.refs.end(),
            [](const SnapshotImage::Ref& a, const SnapshotImage::Ref& b) {
              return a.session < b.session;
            });
  ByteWriter w;
  write_header(w, image);
  w.u64(image.resources.size());
  for (const SnapshotImage::Resource& resource : image.resources) write_resource(w, resource);
  w.u64(image.records.size());
  for (const SnapshotImage::Record& record : image.records) {
    w.u64(record.session);
    w.u64(record.serial);
    w.u8(static_cast<std::uint8_t>(record.state));
  }
  w.u64(image.refs.size());
  for (const SnapshotImage::Ref& ref : image.refs) {
    w.u64(ref.session);
    w.bytes(ref.ref);
  }
  return w.take();
}

bool decode_snapshot(std::string_view bytes, std::int64_t resources_max, SnapshotImage& image) {
  Decoder decoder(bytes, image);
  return decoder.header() && decoder.resources(resources_max) && decoder.records_and_refs() &&
         decoder.at_end() && decoder.records_match_nodes();
}

}  // namespace turnstile::core
