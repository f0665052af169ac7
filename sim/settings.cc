#include "sim/settings.h"

#include "sim/prng.h"

namespace turnstile::sim {

std::string Settings::describe() const {
  std::string text;
  auto add = [&](const std::string& part) {
    if (!text.empty()) text += ' ';
    text += part;
  };
  add("shards=" + std::to_string(shards));
  add("clients=" + std::to_string(clients));
  add("keys=" + std::to_string(hot_keys) + "hot+" + std::to_string(cold_keys) + "cold");
  add(std::string("auto_release=") + (auto_release ? "on" : "off"));
  add("waiters_max=" + std::to_string(waiters_max));
  add("max_locks=" + std::to_string(resources_max));
  add("gc_idle_ms=" + std::to_string(gc_idle_ms));
  add("deadlines_per_call=" + std::to_string(deadlines_per_call));
  add("faults=[");
  std::string faults;
  auto fault = [&](bool on, const char* name) {
    if (!on) return;
    if (!faults.empty()) faults += ',';
    faults += name;
  };
  fault(fault_crash, "crash");
  fault(fault_pause, "pause");
  fault(fault_wall_step, "wall-step");
  fault(fault_expiry_burst, "expiry-burst");
  fault(fault_disconnect, "disconnect");
  fault(fault_clock_back, "clock-back");
  fault(fragment, "fragment");
  fault(pipelining, "pipelining");
  text += faults + "]";
  add("fault_interval_ms=" + std::to_string(fault_interval_ms));
  add("vanish_permille=" + std::to_string(vanish_permille));
  if (http_clients > 0) {
    add("http=[clients=" + std::to_string(http_clients) +
        ",idle_timeout_ms=" + std::to_string(http_idle_timeout_ms) +
        ",give_up_permille=" + std::to_string(http_give_up_permille) + "]");
  }
  if (signal_permille > 0) add("signal_permille=" + std::to_string(signal_permille));
  if (rw_permille > 0) add("rw_permille=" + std::to_string(rw_permille));
  if (lock_delay_ms > 0) add("lock_delay_ms=" + std::to_string(lock_delay_ms));
  if (lost_notify_permille > 0) add("lost_notify_permille=" + std::to_string(lost_notify_permille));
  if (force_interval_ms > 0) add("force_interval_ms=" + std::to_string(force_interval_ms));
  if (fence_journal) {
    add("journal=[range=" + std::to_string(journal_range) + ",block=" +
        std::to_string(fence_block) + ",fail_permille=" + std::to_string(journal_fail_permille) +
        ",sync_max_us=" + std::to_string(journal_sync_max_us) + "]");
  } else {
    add("journal=off");
  }
  return text;
}

namespace {

// Each part draws from `prng` in the order it always did: the order of the parts and of the draws
// in each is what makes a seed mean the same run.

// How big the world is, and how the engines are configured.
void choose_shape(Prng& prng, Settings& s) {
  s.shards = static_cast<std::size_t>(prng.between(1, 4));
  s.clients = static_cast<std::size_t>(prng.between(2, 8));
  s.hot_keys = static_cast<std::size_t>(prng.between(1, 3));
  s.cold_keys = static_cast<std::size_t>(prng.between(4, 24));
  s.auto_release = prng.chance(800);
  s.waiters_max = prng.chance(200) ? prng.between(1, 4) : 0;
  s.resources_max = prng.chance(150) ? prng.between(2, 12) : 1'048'576;
  const std::int64_t gc_choices[] = {0, 1, 500, 5'000, 60'000};
  s.gc_idle_ms = gc_choices[prng.below(5)];
}

// Which faults strike, how often, and how the network behaves.
void choose_faults(Prng& prng, Settings& s) {
  s.fault_crash = prng.chance(400);
  s.fault_pause = prng.chance(400);
  s.fault_wall_step = prng.chance(100);
  s.fault_expiry_burst = prng.chance(300);
  s.fault_disconnect = prng.chance(500);
  s.fault_clock_back = prng.chance(200);
  s.fragment = prng.chance(700);
  s.pipelining = prng.chance(500);
  s.fault_interval_ms = prng.between(300, 5'000);
  s.vanish_permille = static_cast<std::uint64_t>(prng.between(0, 20));
  s.hot_permille = static_cast<std::uint64_t>(prng.between(300, 900));
  s.net_delay_max_us = prng.between(10, 5'000);
  s.hop_delay_max_us = prng.between(0, 500);
}

// What the profile forces or draws anew.
void apply_profile(Prng& prng, Settings& s, const std::string& profile) {
  if (profile == "crash-heavy") {
    s.fault_crash = true;
    s.fault_interval_ms = prng.between(300, 1'500);
  } else if (profile == "clock-chaos") {
    s.fault_wall_step = true;
    s.fault_clock_back = true;
    s.fault_pause = true;
    s.fault_expiry_burst = true;
    s.fault_crash = prng.chance(700);
  } else if (profile == "disconnect-storm") {
    s.fault_disconnect = true;
    s.vanish_permille = static_cast<std::uint64_t>(prng.between(60, 200));
    s.fragment = true;
  } else if (profile == "contention") {
    s.clients = static_cast<std::size_t>(prng.between(8, 16));
    s.hot_keys = 1;
    s.hot_permille = 950;
    s.pipelining = true;
  }
}

// The fence journal and its disk.
void choose_journal(Prng& prng, Settings& s, const std::string& profile) {
  // Small ranges and blocks, so that reservations, run-outs and block hand-offs happen often.
  s.fence_journal = prng.chance(750) || profile == "crash-heavy" || profile == "clock-chaos";
  s.journal_range =
      static_cast<std::uint64_t>(prng.chance(500) ? prng.between(2, 64) : prng.between(2, 2'000));
  s.fence_block = static_cast<std::uint64_t>(prng.between(1, 64));
  s.journal_fail_permille = prng.chance(500) ? static_cast<std::uint64_t>(prng.between(1, 100)) : 0;
  // Some disks are slow (up to 300 ms per fsync): grants then run out of durable fences.
  s.journal_sync_max_us =
      prng.chance(300) ? prng.between(10'000, 300'000) : prng.between(50, 20'000);
}

// What came later: each drawn after everything before it, so that earlier choices stay what they
// were for every seed.
void choose_later_features(Prng& prng, Settings& s, const std::string& profile) {
  // Drawn last, so that the choices above stay what they were for every seed. One or two per
  // call leave deadlines behind at almost every expiry.
  const std::size_t per_call_choices[] = {8, 8, 1, 2};
  s.deadlines_per_call = per_call_choices[prng.below(4)];
  // HTTP sessions, used from many connections (each request lands on any shard), beside the TCP
  // clients; drawn after everything else for the same reason.
  if (profile == "http") {
    s.shards = static_cast<std::size_t>(prng.between(2, 4));
    s.http_clients = static_cast<std::size_t>(prng.between(2, 6));
    s.http_idle_timeout_ms = prng.chance(300) ? prng.between(500, 3'000) : 20'000;
    s.http_give_up_permille = static_cast<std::uint64_t>(prng.between(0, 200));
  }
  // Signals on half of the seeds, drawn last for the same reason.
  if (prng.chance(500)) s.signal_permille = static_cast<std::uint64_t>(prng.between(50, 300));
  // Read-write locks on half of the seeds, and a lock-delay on about one in four, drawn after
  // everything else for the same reason.
  if (prng.chance(500)) s.rw_permille = static_cast<std::uint64_t>(prng.between(100, 500));
  if (prng.chance(250)) s.lock_delay_ms = prng.between(50, 800);
  // lost-notify on most seeds, and an operator who force-releases keys on half of them, drawn
  // after everything else for the same reason; the cluster profiles have neither (no HTTP).
  if (profile.rfind("cluster-", 0) != 0) {
    if (prng.chance(800))
      s.lost_notify_permille = static_cast<std::uint64_t>(prng.between(200, 1000));
    if (prng.chance(500)) s.force_interval_ms = prng.between(200, 3'000);
  }
}

}  // namespace

Settings choose_settings(std::uint64_t seed, const std::string& profile) {
  Prng prng(seed, kSwarm);
  Settings s;
  choose_shape(prng, s);
  choose_faults(prng, s);
  apply_profile(prng, s, profile);
  choose_journal(prng, s, profile);
  choose_later_features(prng, s, profile);
  return s;
}

}  // namespace turnstile::sim
