// Keeping turnstiled's heap in transparent huge pages.
//
// On the virtual machine we measure on (docs/benchmark-history.md, "The expiry stall"), a process
// whose resident set is hundreds of MiB loses 5-13 ms at a time when it is switched back onto a
// vCPU that ran another process, and the guest counts that time as the process's own CPU. The cost
// follows the number of 4 KiB pages the process has mapped: a probe writing 300 MiB had 94 gaps
// over 5 ms in 20 s beside a process that slept 1 ms in a loop on the same vCPU, a 4 MiB one
// none, and the 300 MiB one in 2 MiB pages none either. A million held locks are about 300 MiB of
// heap, and these stalls were the server's loop turns of 10-35 ms while the leases expired.
//
// glibc keeps its heap in huge pages when GLIBC_TUNABLES has glibc.malloc.hugetlb=1, but only
// the main arena's: a thread's own arena grows a page at a time and never gets one, so the
// threads must share the main arena (glibc.malloc.arena_max=1). glibc reads GLIBC_TUNABLES once,
// when the process starts, so turnstiled sets it and executes itself again, once, before it
// starts a thread. --huge-pages=false turns this off; an operator's own glibc.malloc.hugetlb
// setting is left as it is.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace turnstile::net {

// The tunables turnstiled adds to GLIBC_TUNABLES.
inline constexpr std::string_view kHugePageTunables =
    "glibc.malloc.hugetlb=1:glibc.malloc.arena_max=1";

// The GLIBC_TUNABLES value to restart with, or nullopt to run as we are: huge pages are off by
// configuration (`enabled` false); the kernel's transparent huge pages are off ("[never]" in
// `thp_enabled`, the text of /sys/kernel/mm/transparent_hugepage/enabled) or unknown (empty);
// or `current` (GLIBC_TUNABLES now) already sets glibc.malloc.hugetlb, because we restarted
// already or the operator chose. Other tunables in `current` are kept, ours after them.
std::optional<std::string> huge_page_tunables(bool enabled, std::string_view thp_enabled,
                                              const std::optional<std::string>& current);

}  // namespace turnstile::net
