// The soak's fault schedule (docs/soak.md): a pure function of the seed, the duration and the
// number of nodes, drawn up front so that `turnstile-soak --seed S --minutes M` replays it. Which
// process a "leader" fault hits is decided at run time (whoever leads then), so a replay repeats
// the schedule, not necessarily the same victims.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace turnstile::soak {

enum class FaultKind : std::uint8_t {
  kKill,      // SIGKILL, restarted from its raft directory after `down_s`
  kStop,      // SIGSTOP of the leader for `down_s`, then SIGCONT
  kTerm,      // SIGTERM of the leader (it hands leadership over), restarted `down_s` after it exits
  kTransfer,  // the leader hands leadership over through the admin route
  kReplace,   // the spare node is added as a voter, then a member is removed and becomes the spare
  kDiskFull,  // a member's raft directory filled to below the minimum: it must leave (exit 1);
              // emptied and restarted after `down_s`
  kSkew,      // SIGKILL, restarted after `down_s` with its clocks moved (the offsets below)
};

std::string_view fault_kind_name(FaultKind kind);

// Does the fault hit a member it picks (the leader, or the member `node`), rather than always the
// leader (kStop, kTerm, kTransfer)?
bool picks_a_member(FaultKind kind);

struct Fault {
  double at_s = 0;  // seconds from the start of the load
  FaultKind kind = FaultKind::kKill;
  bool on_leader = true;  // picks_a_member(kind): the leader, else the member `node`
  std::size_t node = 0;   // picks_a_member(kind) && !on_leader: which member (0-based, in id order)
  double down_s = 0;      // how long the node stays down (0: kTransfer, kReplace)
  std::int64_t monotonic_offset_s = 0;  // kSkew: the node's monotonic clock, seconds ahead
  std::int64_t wall_offset_s = 0;       // kSkew: its wall clock, seconds ahead (or behind)
};

// One fault every 5-15 s, the first 5-15 s in, none starting after `minutes` (the last one may
// end a little later). Kinds: kill 30 %, stop 15 %, term 10 %, transfer 10 %, replace 10 %, disk
// full 15 %, skew 10 %. A fault that picks a member hits the leader with probability 1/2 (1/3
// for replace). Kill, term and skew stay down 1-3 s, stop 3-4 s (beyond the default election
// timeout of 1 s, twice), disk full 2-5 s. A skew moves the monotonic clock 0 to 30 days ahead
// and the wall clock up to a day either way.
std::vector<Fault> make_schedule(std::uint64_t seed, double minutes, std::size_t nodes);

// "t=12.3s kill leader down 1.8s" and the like.
std::string describe(const Fault& fault);

}  // namespace turnstile::soak
