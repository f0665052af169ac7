// The soak's fault schedule: see schedule.h. It draws with its own arithmetic on splitmix64
// rather than std:: distributions, whose results differ between standard libraries: a seed must
// name the same schedule wherever the soak was built.
#include "tests/soak/schedule.h"

#include <cstdio>

namespace turnstile::soak {
namespace {

class Draw {
 public:
  explicit Draw(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1), from the top 53 bits.
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double between(double low, double high) { return low + (high - low) * unit(); }
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(next() % n); }

 private:
  std::uint64_t state_;
};

}  // namespace

std::string_view fault_kind_name(FaultKind kind) {
  switch (kind) {
    case FaultKind::kKill:
      return "kill -9";
    case FaultKind::kStop:
      return "sigstop leader";
    case FaultKind::kTerm:
      return "sigterm leader";
    case FaultKind::kTransfer:
      return "transfer leader";
    case FaultKind::kReplace:
      return "replace";
    case FaultKind::kDiskFull:
      return "disk full";
    case FaultKind::kSkew:
      return "clock skew";
  }
  return "?";
}

bool picks_a_member(FaultKind kind) {
  return kind == FaultKind::kKill || kind == FaultKind::kReplace || kind == FaultKind::kDiskFull ||
         kind == FaultKind::kSkew;
}

std::vector<Fault> make_schedule(std::uint64_t seed, double minutes, std::size_t nodes) {
  Draw draw(seed);
  std::vector<Fault> schedule;
  const double end_s = minutes * 60.0;
  for (double at = draw.between(5, 15); at < end_s; at += draw.between(5, 15)) {
    Fault fault;
    fault.at_s = at;
    const double kind = draw.unit();
    if (kind < 0.30) {
      fault.kind = FaultKind::kKill;
    } else if (kind < 0.45) {
      fault.kind = FaultKind::kStop;
    } else if (kind < 0.55) {
      fault.kind = FaultKind::kTerm;
    } else if (kind < 0.65) {
      fault.kind = FaultKind::kTransfer;
    } else if (kind < 0.75) {
      fault.kind = FaultKind::kReplace;
    } else if (kind < 0.90) {
      fault.kind = FaultKind::kDiskFull;
    } else {
      fault.kind = FaultKind::kSkew;
    }
    if (picks_a_member(fault.kind)) {
      fault.on_leader = draw.unit() < (fault.kind == FaultKind::kReplace ? 1.0 / 3 : 0.5);
      fault.node = draw.below(nodes);
    }
    switch (fault.kind) {
      case FaultKind::kStop:
        fault.down_s = draw.between(3, 4);
        break;
      case FaultKind::kDiskFull:
        fault.down_s = draw.between(2, 5);
        break;
      case FaultKind::kTransfer:
      case FaultKind::kReplace:
        break;
      case FaultKind::kKill:
      case FaultKind::kTerm:
      case FaultKind::kSkew:
        fault.down_s = draw.between(1, 3);
        break;
    }
    if (fault.kind == FaultKind::kSkew) {
      fault.monotonic_offset_s = static_cast<std::int64_t>(draw.below(30 * 86'400 + 1));
      fault.wall_offset_s = static_cast<std::int64_t>(draw.below(2 * 86'400 + 1)) - 86'400;
    }
    schedule.push_back(fault);
  }
  return schedule;
}

std::string describe(const Fault& fault) {
  char text[192];
  const std::string target = !picks_a_member(fault.kind) ? ""
                             : fault.on_leader           ? " leader"
                                               : " member " + std::to_string(fault.node + 1);
  int n = std::snprintf(text, sizeof text, "t=%.1fs %s%s", fault.at_s,
                        std::string(fault_kind_name(fault.kind)).c_str(), target.c_str());
  if (fault.down_s > 0) {
    n += std::snprintf(text + n, sizeof text - static_cast<std::size_t>(n), ", down %.1fs",
                       fault.down_s);
  }
  if (fault.kind == FaultKind::kSkew) {
    std::snprintf(text + n, sizeof text - static_cast<std::size_t>(n),
                  ", monotonic +%llds, wall %+llds",
                  static_cast<long long>(fault.monotonic_offset_s),
                  static_cast<long long>(fault.wall_offset_s));
  }
  return text;
}

}  // namespace turnstile::soak
