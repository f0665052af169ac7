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
  kKill,  // SIGKILL, restarted from its raft directory after `down_s`
  kStop,  // SIGSTOP of the leader for `down_s`, then SIGCONT
  kTerm,  // SIGTERM of the leader (it hands leadership over), restarted `down_s` after it exits
};

std::string_view fault_kind_name(FaultKind kind);

struct Fault {
  double at_s = 0;  // seconds from the start of the load
  FaultKind kind = FaultKind::kKill;
  bool on_leader = true;  // kKill only: the leader, else node `node`
  std::size_t node = 0;   // kKill with !on_leader: the node index (0-based)
  double down_s = 0;      // how long the node stays killed / stopped / terminated
};

// One fault every 5-15 s, the first 5-15 s in, none starting after `minutes` (the last one may
// end a little later). Kinds: kill 1/2 (on the leader with probability 1/2), stop 1/4, term 1/4;
// kill and term stay down 1-3 s, stop 3-4 s (beyond the default election timeout of 1 s, twice).
std::vector<Fault> make_schedule(std::uint64_t seed, double minutes, std::size_t nodes);

// "t=12.3s kill leader down 1.8s" and the like.
std::string describe(const Fault& fault);

}  // namespace turnstile::soak
