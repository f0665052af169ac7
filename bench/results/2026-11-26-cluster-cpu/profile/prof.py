#!/usr/bin/python3
"""Profile a 3-node cluster under turnstile-bench: per-thread CPU, syscalls, context switches.

prof.py --build-dir B --out DIR [--workers 100] [--duration 8] [--mode stat|record|none] [--reps N]
"""
import argparse, json, os, signal, subprocess, sys, time, tempfile, shutil
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(sys.argv[0])), "."))
TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tools")
sys.path.insert(0, TOOLS)
sys.dont_write_bytecode = True
import cluster_bench as cb

SYSCALLS = ["read", "write", "writev", "readv", "sendmsg", "recvmsg", "sendto", "recvfrom",
            "epoll_wait", "epoll_pwait", "futex", "fdatasync", "fsync", "io_submit",
            "io_getevents", "io_uring_enter", "pwritev", "pwritev2", "pwrite64", "mmap", "munmap",
            "madvise", "brk", "timerfd_settime", "epoll_ctl", "getrandom", "fallocate", "openat",
            "close"]
EVENTS = ["raw_syscalls:sys_enter", "sched:sched_switch", "sched:sched_wakeup"] + \
    [f"syscalls:sys_enter_{s}" for s in SYSCALLS]

TICK = os.sysconf("SC_CLK_TCK")


def threads_cpu(pid):
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
            out[int(tid)] = (int(rest[11]) + int(rest[12])) / TICK
        except OSError:
            pass
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build-dir", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--workers", type=int, default=100)
    p.add_argument("--duration", type=float, default=8)
    p.add_argument("--warmup", type=float, default=1)
    p.add_argument("--mode", default="stat")
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--dir", default="/tmp")
    p.add_argument("--server-args", default="")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    ns = argparse.Namespace(turnstiled=os.path.join(a.build_dir, "net", "turnstiled"),
                            server_threads=2, server_args=a.server_args, out=a.out)
    bench = os.path.join(a.build_dir, "bench", "turnstile-bench")
    base = tempfile.mkdtemp(prefix="ts-prof-", dir=a.dir)
    cluster = None
    results = []
    try:
        cluster = cb.Cluster(ns, base)
        leader = cluster.leader()
        pids = [n.pid for n in cluster.nodes]
        print(f"leader node {leader + 1}, pids {pids}", file=sys.stderr)
        for rep in range(a.reps):
            perfs = []
            if a.mode == "stat":
                for i, pid in enumerate(pids):
                    f = os.path.join(a.out, f"perfstat-rep{rep}-node{i + 1}.csv")
                    perfs.append(subprocess.Popen(
                        ["perf", "stat", "--per-thread", "-x", ",", "-o", f, "-e",
                         ",".join(EVENTS), "-p", str(pid)], stderr=subprocess.DEVNULL))
            elif a.mode == "record":
                for i, pid in enumerate(pids):
                    f = os.path.join(a.out, f"perf-rep{rep}-node{i + 1}.data")
                    perfs.append(subprocess.Popen(["perf", "record", "-g", "-F", "499", "-o", f,
                                                   "-p", str(pid)], stderr=subprocess.DEVNULL,
                                                  stdout=subprocess.DEVNULL))
            time.sleep(0.5)
            before = [threads_cpu(pid) for pid in pids]
            mbefore = cb.metrics(cluster.http_ports[leader])
            t0 = time.monotonic()
            argv = [bench, "--host", "127.0.0.1", "--port", str(cluster.client_ports[leader]),
                    "--mode", "uncontended", "--workers", str(a.workers), "--threads",
                    str(min(2, a.workers)), "--duration", str(a.duration), "--warmup",
                    str(a.warmup), "--json", "--no-progress"]
            done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
            t1 = time.monotonic()
            after = [threads_cpu(pid) for pid in pids]
            mafter = cb.metrics(cluster.http_ports[leader])
            for pr in perfs:
                pr.send_signal(signal.SIGINT)
                pr.wait(timeout=60)
            r = json.loads(done.stdout.strip().splitlines()[-1])
            ops = r["ops_all"]
            row = {"rep": rep, "ops_all": ops, "ops_per_s": r["ops_per_s"],
                   "p50": r["latency_us"]["p50"], "p99": r["latency_us"]["p99"],
                   "errors": r["errors"], "wall_s": t1 - t0, "leader": leader + 1,
                   "load": os.getloadavg()[0],
                   "entries": mafter.get("turnstile_raft_proposals_total", 0) -
                   mbefore.get("turnstile_raft_proposals_total", 0),
                   "threads_cpu_us_per_op": []}
            for i in range(3):
                per = {tid: (after[i].get(tid, 0) - before[i].get(tid, 0)) * 1e6 / ops
                       for tid in after[i]}
                row["threads_cpu_us_per_op"].append(per)
            results.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "threads_cpu_us_per_op"}),
                  file=sys.stderr)
            for i in range(3):
                print(f"  node{i + 1}: " + " ".join(f"{tid}:{v:.1f}" for tid, v in
                                                     sorted(row["threads_cpu_us_per_op"][i].items())
                                                     if v > 0.05) +
                      f"  total {sum(row['threads_cpu_us_per_op'][i].values()):.1f}",
                      file=sys.stderr)
    finally:
        if cluster:
            cluster.stop()
        shutil.rmtree(base, ignore_errors=True)
    with open(os.path.join(a.out, "prof.json"), "w") as f:
        json.dump(results, f, indent=1)


main()
