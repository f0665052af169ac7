// The canaries: builds of the simulator (and one test) against code broken on purpose, each of
// which must fail with the invariant it names (tests/CMakeLists.txt runs them; sim/CMakeLists.txt
// builds them, each defining one macro for the one file it breaks). This header is the one place
// that turns a macro into a flag; the code tests the flag with `if constexpr`, so the broken path
// is compiled in every build and cannot rot, and runs in none but its canary.
//
// The flags have internal linkage on purpose: a canary defines its macro for one file only.
#pragma once

namespace turnstile::core::canary {

// turnstile-sim-canary (fifo): Engine's promote() grants the tail of the queue, not the head.
#ifdef TURNSTILE_CANARY_SKIP_FIFO
constexpr bool kSkipFifo = true;
#else
constexpr bool kSkipFifo = false;
#endif

// turnstile-sim-canary-lock-delay (lock-delay): a session that closes holding a key
// (auto-release) starts no lock-delay.
#ifdef TURNSTILE_CANARY_SKIP_CLOSE_DELAY
constexpr bool kSkipCloseDelay = true;
#else
constexpr bool kSkipCloseDelay = false;
#endif

// turnstile-sim-canary-router (leak): the router does not send a session's close notice to the
// last of several shards it touched.
#ifdef TURNSTILE_CANARY_ROUTER_SKIP_CLOSE
constexpr bool kRouterSkipClose = true;
#else
constexpr bool kRouterSkipClose = false;
#endif

// turnstile-sim-canary-http (leak): a home shard that withdraws a forwarded request never tells
// the origin, which then waits for its answer forever.
#ifdef TURNSTILE_CANARY_HTTP_SKIP_WITHDRAWN
constexpr bool kHttpSkipWithdrawn = true;
#else
constexpr bool kHttpSkipWithdrawn = false;
#endif

// turnstile-sim-canary-http-lost (http-lost): an HTTP session's replies never carry what it lost.
#ifdef TURNSTILE_CANARY_HTTP_DROP_LOST
constexpr bool kHttpDropLost = true;
#else
constexpr bool kHttpDropLost = false;
#endif

// turnstile-sim-canary-auth-delay (auth-delay): a wrong or missing token on HTTP is answered 401
// at once instead of after core::kAuthFailureDelay (core/http_api.cc).
#ifdef TURNSTILE_CANARY_HTTP_NO_AUTH_DELAY
constexpr bool kHttpNoAuthDelay = true;
#else
constexpr bool kHttpNoAuthDelay = false;
#endif

// turnstile-sim-canary-cluster (linearizability): a cluster leader answers requests when it
// proposes their entry, before it commits.
#ifdef TURNSTILE_CANARY_ACK_BEFORE_COMMIT
constexpr bool kAckBeforeCommit = true;
#else
constexpr bool kAckBeforeCommit = false;
#endif

// turnstile-sim-canary-signals (signals): the signal index gives a plain listener a signal once
// per matching pattern.
#ifdef TURNSTILE_CANARY_SIGNAL_TWICE
constexpr bool kSignalTwice = true;
#else
constexpr bool kSignalTwice = false;
#endif

// turnstile-sim-canary-lost (lost-notify): the simulated server drops every `lost` line instead
// of pushing it into its session.
#ifdef TURNSTILE_CANARY_DROP_LOST
constexpr bool kDropLost = true;
#else
constexpr bool kDropLost = false;
#endif

// turnstile-sim-canary-raft (raft-conflict): the cluster runs on libraft 0.15 as it is, which
// commits entries of earlier terms by counting replicas, and its leaders propose their barrier
// late.
#ifdef TURNSTILE_CANARY_SKIP_COMMIT_RULE
constexpr bool kSkipCommitRule = true;
#else
constexpr bool kSkipCommitRule = false;
#endif

// turnstile-sim-canary-acked and raft_cluster_canary_test (a lost or doubled grant): a cluster
// node keeps no acknowledged-index record, so one whose disk lost entries it acknowledged starts
// and votes.
#ifdef TURNSTILE_CANARY_SKIP_ACKED_RECORD
constexpr bool kSkipAckedRecord = true;
#else
constexpr bool kSkipAckedRecord = false;
#endif

}  // namespace turnstile::core::canary
