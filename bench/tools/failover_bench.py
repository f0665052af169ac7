#!/usr/bin/python3
"""How long a 3-node turnstiled cluster on loopback takes to serve again after a kill -9 of its
leader, --rounds times, and when a lock whose holder died with the leader is granted again.

It starts the cluster as cluster_bench.py does (raft directories in a temporary folder under
--dir, --cluster-bootstrap, election timeout --election-ms, default turnstiled's 1000 ms). Each
round:
  1. waits for a ready leader (`barrier` answered `ok`) and for every node to follow it;
  2. a holder takes `held-<round>` on the leader with a --lease s lease, over a connection that
     dies with the leader (the holder never comes back: no renewal, no stable ref);
  3. kill -9 of the leader, at t0;
  4. serving: on every surviving node, one connection asks `l probe-<round> 0 30` (a try-once
     acquire) again and again; the first `ok` is the new leader serving, at t1;
  5. the dead holder's lock: on the new leader, `l held-<round> 60 30` blocks until that lock is
     granted, at t2. A holder's lease runs on after a failover (docs/cluster.md, "Failover") and
     the election gap costs it no lease time, so t2 comes a lease after the grant, plus the gap;
  6. restarts the killed node from its directory.

It prints and writes (table.txt, results.json in --out) p50, p99 and max of t1 - t0 (the target:
within two election timeouts) and of t2 - t0 and t2 - the grant, with every round's figures.

With --load N (default 4; 0 for none), N client processes run acquire+release on keys of their own
all along (`l key 10 5`, `r key token`, one connection each, following `error_not_leader <addr>`
and trying every node after a failure, a fresh key after an op whose outcome is unknown). The
script first runs that load for --baseline s with no fault, and each round then waits --settle s
with every node following before the kill; it compares the p99 of the ops outside every failover
window (a window: from the kill until every node follows the new leader again, the killed one
restarted and caught up) with the baseline's p99 (the target: within 10 %). The load is Python: its latencies carry the
interpreter's own cost, the same in both phases.

    bench/tools/failover_bench.py                      # 20 rounds, lease 3 s, ~2.5 min
    bench/tools/failover_bench.py --rounds 5 --out /tmp/fo

Exit status: 0 when every round completed, 1 when one did not (no leader, no grant in time).
"""

import json
import os
import shutil
import socket
import statistics
import sys
import multiprocessing
import queue
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in bench/
from benchlib import bench_parser, markdown_table, resolve_common  # noqa: E402
from cluster_bench import Cluster, cluster_info, request, which_disk  # noqa: E402


def parse_args():
    parser = bench_parser(__doc__)
    parser.add_argument("--rounds", type=int, default=20, help="kills of the leader (20)")
    parser.add_argument("--lease", type=int, default=3, help="the dead holder's lease, s (3)")
    parser.add_argument("--election-ms", type=int, default=1000,
                        help="--raft-election-timeout-ms of every node (1000, the default)")
    parser.add_argument("--dir", default="/tmp", help="where the raft directories go (/tmp)")
    parser.add_argument("--load", type=int, default=4,
                        help="load processes during the rounds (4)")
    parser.add_argument("--settle", type=float, default=3.0,
                        help="seconds of load with every node following before each kill (3)")
    parser.add_argument("--baseline", type=float, default=10.0,
                        help="seconds of load with no fault before the first round (10)")
    args = parser.parse_args()
    resolve_common(args, "failover")
    # What Cluster reads besides the paths.
    args.server_threads = 2
    args.server_args = f"--raft-election-timeout-ms {args.election_ms}"
    return args


class Line:
    """One wire-protocol connection that sends requests and reads reply lines."""

    def __init__(self, port, timeout_s=2.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self.buffer = b""

    def ask(self, command, key, arg, timeout_s=2.0):
        self.sock.settimeout(timeout_s)
        self.sock.sendall(f"{command}\n{key}\n{arg}\n".encode())
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise OSError("closed")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode(errors="replace")

    def close(self):
        self.sock.close()


def follows(port, leader_address, timeout_s=20):
    """Whether the node at `port` answers `error_not_leader <leader_address>` within timeout_s."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if request(port, "l", "follow-probe", "0 30") == f"error_not_leader {leader_address}":
            return True
        time.sleep(0.05)
    return False


def caught_up(ports, leader_port, timeout_s=30):
    """Whether every node at `ports` applied, within timeout_s, every entry the leader at
    `leader_port` had committed when asked: a restarted node has then replayed its log and
    received what it missed."""
    info = cluster_info(leader_port)
    if not info:
        return False
    target = info["commit_index"]
    deadline = time.monotonic() + timeout_s
    for port in ports:
        while True:
            node = cluster_info(port)
            if node and node["applied_index"] >= target:
                break
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
    return True


def first_grant(ports, key, timeout_s):
    """Asks `l key 0 30` on every port in turn until one answers `ok`: (index, time) or None."""
    lines = {}
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            for i, port in ports.items():
                try:
                    if i not in lines:
                        lines[i] = Line(port, 0.5)
                    reply = lines[i].ask("l", key, "0 30", 2.0)
                except OSError:
                    lines.pop(i, None)
                    continue
                if reply.startswith("ok "):
                    at = time.monotonic()
                    lines[i].ask("r", key, reply.split()[1])
                    return i, at
            time.sleep(0.002)
        return None
    finally:
        for line in lines.values():
            line.close()


def load_worker(n, ports, stopping, results):
    """One --load process: acquire+release in a loop against whichever node leads; at the end puts
    (its completed ops as (start, end) monotonic seconds, its failures) on `results`."""
    ops, failures = [], 0
    line, preferred, generation = None, None, 0

    def connect():
        for port in ([preferred] if preferred else []) + list(ports):
            try:
                return Line(port, 0.5)
            except OSError:
                continue
        return None

    while not stopping.is_set():
        key = f"load-{n}-{generation}"
        try:
            if line is None:
                line = connect()
                if line is None:
                    time.sleep(0.01)
                    continue
            start = time.monotonic()
            reply = line.ask("l", key, "10 5", 15)
            if reply.startswith("error_not_leader"):
                parts = reply.split()
                preferred = int(parts[1].rsplit(":", 1)[1]) if len(parts) > 1 else None
                line.close()
                line = None
                if len(parts) == 1:
                    time.sleep(0.01)
                continue
            if not reply.startswith("ok "):
                raise OSError(reply)
            released = line.ask("r", key, reply.split()[1], 15)
            if released != "ok":
                raise OSError(released)
            ops.append((start, time.monotonic()))
        except OSError:
            # Unknown outcome (the node died or stopped leading): a new key, so that a grant
            # nobody will release (its lease runs out) does not block the next op.
            failures += 1
            generation += 1
            if line is not None:
                line.close()
            line, preferred = None, None
            time.sleep(0.01)
    if line is not None:
        line.close()
    results.put((ops, failures))


class Load:
    """--load processes (not threads: the probe that times the failover must not wait for the
    interpreter's lock). CLOCK_MONOTONIC is the machine's, so their times compare with ours."""

    def __init__(self, ports, processes):
        self.stopping = multiprocessing.Event()
        self.results = multiprocessing.Queue()
        self.ops = []
        self.failures = 0
        self.processes = [multiprocessing.Process(target=load_worker, daemon=True,
                                                  args=(i, ports, self.stopping, self.results))
                          for i in range(processes)]
        for process in self.processes:
            process.start()

    def stop(self):
        self.stopping.set()
        for _ in self.processes:
            try:
                ops, failures = self.results.get(timeout=60)
            except queue.Empty:
                break
            self.ops += ops
            self.failures += failures
        for process in self.processes:
            process.join(10)


def p99_ms(ops):
    latencies = sorted((end - start) * 1e3 for start, end in ops)
    if not latencies:
        return None
    return latencies[min(len(latencies) - 1, int(round(0.99 * (len(latencies) - 1))))]


def summary_ms(values):
    values = sorted(values)
    if not values:
        return None
    p99 = values[min(len(values) - 1, int(round(0.99 * (len(values) - 1))))]
    return {"p50": statistics.median(values), "p99": p99, "max": values[-1],
            "min": values[0]}


def main():
    args = parse_args()
    if not os.access(args.turnstiled, os.X_OK):
        raise SystemExit(f"failover_bench: {args.turnstiled} not found; build it first")
    os.makedirs(args.out, exist_ok=True)
    disk = which_disk(args.dir)
    base = tempfile.mkdtemp(prefix="turnstile-failover-bench-", dir=args.dir)
    rounds = []
    failed = 0
    cluster = None
    load = None
    windows = []  # (kill, every node following again) of every round
    baseline_window = None
    try:
        cluster = Cluster(args, base)
        cluster.leader()
        if args.load:
            load = Load([cluster.client_ports[i] for i in range(3)], args.load)
            started = time.monotonic()
            time.sleep(args.baseline)
            baseline_window = (started + 1.0, time.monotonic())  # the first second warms up
        for n in range(args.rounds):
            leader = cluster.leader()
            address = f"127.0.0.1:{cluster.client_ports[leader]}"
            others = [i for i in range(3) if i != leader]
            if not all(follows(cluster.client_ports[i], address) for i in others):
                print(f"failover_bench: round {n}: a node does not follow", file=sys.stderr)
                failed += 1
                break
            if not caught_up([cluster.client_ports[i] for i in others],
                             cluster.client_ports[leader]):
                print(f"failover_bench: round {n}: a node does not catch up", file=sys.stderr)
                failed += 1
                break
            if windows:
                # The previous round's failover is over: every node follows again.
                windows[-1] = (windows[-1][0], time.monotonic())
            if load:
                time.sleep(args.settle)  # steady state: the load's ops here are outside
            holder = Line(cluster.client_ports[leader])
            grant = holder.ask("l", f"held-{n}", f"0 {args.lease}")
            granted_at = time.monotonic()
            if not grant.startswith("ok "):
                print(f"failover_bench: round {n}: holder got {grant!r}", file=sys.stderr)
                failed += 1
                break
            t0 = time.monotonic()
            cluster.kill(leader)
            holder.close()
            serving = first_grant({i: cluster.client_ports[i] for i in others}, f"probe-{n}", 30)
            if serving is None:
                print(f"failover_bench: round {n}: no grant within 30 s", file=sys.stderr)
                failed += 1
                break
            new_leader, t1 = serving
            windows.append((t0, None))  # ends once every node follows again
            waiter = Line(cluster.client_ports[new_leader], 5)
            reply = waiter.ask("l", f"held-{n}", "60 30", 65)
            t2 = time.monotonic()
            waiter.close()
            record = {"round": n, "killed": leader + 1, "new_leader": new_leader + 1,
                      "serving_ms": (t1 - t0) * 1e3, "held_lock_ms": (t2 - t0) * 1e3,
                      "held_lock_after_grant_ms": (t2 - granted_at) * 1e3,
                      "held_lock_reply": reply}
            rounds.append(record)
            print(f"failover_bench: round {n + 1}/{args.rounds}: node {leader + 1} killed, node "
                  f"{new_leader + 1} serving after {record['serving_ms']:.0f} ms, the dead "
                  f"holder's lock granted after {record['held_lock_ms']:.0f} ms "
                  f"({record['held_lock_after_grant_ms']:.0f} ms after its grant)",
                  file=sys.stderr)
            if not reply.startswith("ok "):
                failed += 1
            cluster.restart(leader)
        if windows:
            leader = cluster.leader()
            address = f"127.0.0.1:{cluster.client_ports[leader]}"
            others = [i for i in range(3) if i != leader]
            for i in others:
                follows(cluster.client_ports[i], address)
            caught_up([cluster.client_ports[i] for i in others], cluster.client_ports[leader])
            windows[-1] = (windows[-1][0], time.monotonic())
        end_of_rounds = time.monotonic()
    finally:
        if load:
            load.stop()
        if cluster:
            cluster.stop()
        shutil.rmtree(base, ignore_errors=True)

    serving = summary_ms([r["serving_ms"] for r in rounds])
    held = summary_ms([r["held_lock_ms"] for r in rounds])
    held_after = summary_ms([r["held_lock_after_grant_ms"] for r in rounds])

    def cells(s):
        return [f"{s[k]:.0f}" for k in ("p50", "p99", "max", "min")] if s else ["-"] * 4

    table = markdown_table(
        ["from the kill -9 of the leader to", "p50 ms", "p99 ms", "max ms", "min ms"],
        [["the first grant by the new leader"] + cells(serving),
         ["the grant of a lock whose holder died with the leader"] + cells(held),
         ["(the same, from that lock's own grant)"] + cells(held_after)])
    load_result = None
    if load and baseline_window:
        windows = [(a, b if b is not None else end_of_rounds) for a, b in windows]
        baseline_ops = [op for op in load.ops
                        if op[0] >= baseline_window[0] and op[1] <= baseline_window[1]]
        outside_ops = [op for op in load.ops if op[0] > baseline_window[1] and
                       op[1] <= end_of_rounds and
                       not any(op[1] >= w[0] and op[0] <= w[1] for w in windows)]
        inside_ops = [op for op in load.ops if op[0] > baseline_window[1] and
                      any(op[1] >= w[0] and op[0] <= w[1] for w in windows)]
        load_result = {"processes": args.load, "failures": load.failures,
                       "baseline_ops": len(baseline_ops), "baseline_p99_ms": p99_ms(baseline_ops),
                       "outside_ops": len(outside_ops), "outside_p99_ms": p99_ms(outside_ops),
                       "inside_ops": len(inside_ops), "inside_p99_ms": p99_ms(inside_ops)}
        if load_result["baseline_p99_ms"] and load_result["outside_p99_ms"]:
            load_result["ratio"] = load_result["outside_p99_ms"] / load_result["baseline_p99_ms"]
        table += "\n\n" + markdown_table(
            ["load: acquire+release, " + f"{args.load} processes", "ops", "p99 ms"],
            [["with no fault (baseline)", str(len(baseline_ops)),
              f"{load_result['baseline_p99_ms'] or 0:.1f}"],
             ["during the rounds, outside every failover window", str(len(outside_ops)),
              f"{load_result['outside_p99_ms'] or 0:.1f}"],
             ["overlapping a failover window (kill to all following again)", str(len(inside_ops)),
              f"{load_result['inside_p99_ms'] or 0:.1f}"]])
    target = 2 * args.election_ms
    verdict = (f"new leader serving within 2 election timeouts ({target} ms): "
               f"{'met' if serving and serving['p99'] <= target else 'NOT met'} "
               f"(p99 {serving['p99']:.0f} ms)" if serving else "no round completed")
    title = (f"Failover of a 3-node turnstiled cluster on loopback: {len(rounds)} kills of the "
             f"leader, election timeout {args.election_ms} ms, the dead holder's lease "
             f"{args.lease} s; disk {disk.get('device')} ({disk.get('fstype')}); "
             f"{os.cpu_count()} CPUs, {os.uname().release}")
    if load_result and "ratio" in load_result:
        verdict += (f"\nload p99 outside the failover windows / with no fault: "
                    f"{load_result['ratio']:.2f} (target <= 1.10): "
                    f"{'met' if load_result['ratio'] <= 1.10 else 'NOT met'}")
    text = f"{title}\n{table}\n\n{verdict}\n"
    print(text)
    with open(os.path.join(args.out, "table.txt"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"settings": {k: v for k, v in vars(args).items()}, "rounds": rounds,
                   "serving_ms": serving, "held_lock_ms": held,
                   "held_lock_after_grant_ms": held_after, "load": load_result}, f, indent=1)
    print(f"failover_bench: wrote {args.out}/table.txt and results.json", file=sys.stderr)
    return 1 if failed or len(rounds) < args.rounds else 0


if __name__ == "__main__":
    sys.exit(main())
