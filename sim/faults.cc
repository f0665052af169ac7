#include "sim/faults.h"

#include <cstdint>
#include <cstdio>
#include <vector>

namespace turnstile::sim {

void FaultInjector::start() {
  run_.schedule(faults_.between(1, run_.settings.fault_interval_ms) * kMs, event::Fault{});
}

void FaultInjector::on_fault() {
  if (run_.liveness) return;
  run_.schedule(run_.now + faults_.between(1, 2 * run_.settings.fault_interval_ms) * kMs,
                event::Fault{});
  std::vector<int> choices;
  if (run_.settings.fault_crash && server_.running()) choices.push_back(0);
  if (run_.settings.fault_pause && server_.running() && !server_.paused()) choices.push_back(1);
  if (run_.settings.fault_wall_step) choices.push_back(2);
  if (run_.settings.fault_expiry_burst && server_.running() && !server_.paused())
    choices.push_back(3);
  if (run_.settings.fault_disconnect) choices.push_back(4);
  if (run_.settings.fault_clock_back && server_.running() && server_.clock_back() < 30 * kS)
    choices.push_back(5);
  if (choices.empty()) return;
  const int choice = choices[faults_.below(choices.size())];
  run_.digest.add(static_cast<std::uint64_t>(choice) + 0xfa000);
  static const char* const kFaultNames[] = {
      "crash", "pause", "wall-step", "expiry-burst", "disconnect-fault", "clock-back"};
  ++run_.result.coverage[kFaultNames[choice]];
  if (run_.options.trace) std::printf("%lld fault %d\n", static_cast<long long>(run_.now), choice);
  switch (choice) {
    case 0:
      server_.crash();
      break;
    case 1:  // the process stops (a GC pause, SIGSTOP): its clock reads jump when it resumes
      server_.pause_until(run_.now + faults_.between(1, 2'000) * kMs);
      break;
    case 2: {  // the wall clock steps by an hour
      const bool back = faults_.chance(500);
      run_.wall_offset += back ? -kHour : kHour;
      if (back) run_.wall_went_back = true;
      break;
    }
    case 3:  // a long stop: every lease ends at once when the process resumes
      server_.pause_until(run_.now + faults_.between(30, 120) * kS);
      break;
    case 5:  // the monotonic clock steps back by up to 10 s and stays behind: the engines see
             // regressions, hold their time still until the readings catch up, and must neither
             // revive nor extend a lease. (It never jumps forward again: a forward jump ends
             // leases early in real time, which no lease service can prevent; fences guard that.)
      server_.step_clock_back(faults_.between(1, 10'000) * kMs);
      break;
    case 4: {  // a random client's connection resets
      workload_.reset_connection(faults_.below(workload_.clients()));
      break;
    }
    default:
      break;
  }
}

}  // namespace turnstile::sim
