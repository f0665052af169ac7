#!/usr/bin/python3
"""A 3-node turnstiled cluster on loopback against the fsync floor of the same disk, in one run.

Builds nothing: it takes the binaries (default: from BUILD_DIR, ./build). It makes a temporary
folder under --dir (default /tmp; the script prints which filesystem and device that is), with
the three nodes' raft directories and two probe directories in it, so everything fsyncs to the
same disk. It starts three turnstiled (--raft-dir, --node-id, --raft-addr, --cluster-peers,
--cluster-bootstrap, --cluster-secret, --http-port; --threads --server-threads) on ephemeral
loopback ports and waits until one answers `barrier` with `ok` (the leader, once it applies
its own barrier).

Then, --repeats times, interleaved:
  - the floor: turnstile-fdatasync-probe with two writers in parallel in the two probe
    directories (--probe-count rounds of a 4 KiB append + fdatasync each; a round ends at the
    later finish: one leader fsync in parallel with one follower fsync), the same with
    --preallocate (in-place overwrites of a preallocated file: no size change to write), and
    the loopback TCP round trip;
  - turnstile-bench --mode uncontended (a key per worker; op = acquire + release) against the
    leader's client port, at each of --workers (default 1 and 100), --warmup + --duration s,
    with the leader's CPU time around the run and its /metrics counters
    turnstile_raft_proposals_total and turnstile_raft_apply_calls_total (entries per op and raft
    appends per op: fewer appends than entries is batching).

It also starts the do-nothing replicated server (turnstile-refserver --journal on a leader,
--replica on two more, their journals in three more directories of the folder: the requests that
arrive while a batch is in flight form the next batch, each batch is appended and fdatasynced on
the leader and sent to both replicas, and its canned replies go out once one replica has it
durable too), and runs the same turnstile-bench right after or right before (alternating by
repetition) each turnstiled run: the cluster floor of this machine at that worker count, measured
in the same run (--no-reference leaves it out). With --single-node it also measures one
turnstiled without cluster mode (--threads as the nodes), the same way, for the cluster's cost
beside one node's. The three series go in plot.png too (ops/s and p99 against workers;
python3-matplotlib), e.g. `--workers 1,10,100 --single-node`.

The floor of one acquire+release is two commits: 2 x (the parallel round's p50 + 2 loopback
round trips: client-leader and leader-follower). The script reports each worker count's
medians (min-max), the floor, the ratio of the 1-worker p50 to the floor (the median of the
per-repetition ratios), turnstiled against the reference cluster (ops/s, p50 and p99, medians of
the per-repetition ratios), and the cluster targets (docs/benchmarks.md, "Targets"):
  1 worker: p50 <= 1.5 x floor; 100 workers: >= 20,000 ops/s and p99 <= 10 ms.
It stops the cluster and removes the folder at the end (--keep keeps it), and writes
table.txt and results.json to --out.

    bench/tools/cluster_bench.py                  # 5 x (probe, 1 worker, 100 workers), 10 s runs
    bench/tools/cluster_bench.py --quick          # smoke run, about 20 s
    bench/tools/cluster_bench.py --dir /var/tmp --repeats 3 --out /tmp/cl
    bench/tools/cluster_bench.py --server-threads 1 --server-args "--idle-poll-us 0"

Exit status: 0 when every bench run was clean (no unexpected reply, fences monotonic), else 1.
Meeting the targets or not does not change it.
"""

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ in bench/
from benchlib import (LISTENING, bench_parser, cell, cpu_seconds, kops, LoggedProcess,  # noqa: E402
                      markdown_table, plot_medians, resolve_common, run_bench_json, RunLog, summary)

SECRET = "cluster-bench-secret"


def parse_args():
    parser = bench_parser(__doc__)
    parser.add_argument("--probe", help="turnstile-fdatasync-probe "
                        "(default BUILD_DIR/bench/turnstile-fdatasync-probe)")
    parser.add_argument("--refserver", help="turnstile-refserver "
                        "(default BUILD_DIR/bench/turnstile-refserver)")
    parser.add_argument("--no-reference", action="store_true",
                        help="leave out the do-nothing replicated server")
    parser.add_argument("--single-node", action="store_true",
                        help="also measure one turnstiled without cluster mode")
    parser.add_argument("--dir", default="/tmp",
                        help="where the temporary raft and probe directories go: the disk "
                        "measured (default /tmp)")
    parser.add_argument("--workers", default="1,100", help="comma-separated worker counts (1,100)")
    parser.add_argument("--repeats", type=int, help="repetitions (5)")
    parser.add_argument("--duration", type=float, help="measured seconds per bench run (10)")
    parser.add_argument("--warmup", type=float, help="warm-up seconds per bench run (1)")
    parser.add_argument("--probe-count", type=int, help="fdatasync rounds per probe run (1000)")
    parser.add_argument("--server-threads", type=int, default=2, help="turnstiled --threads (2)")
    parser.add_argument("--bench-threads", type=int, default=2, help="turnstile-bench --threads")
    parser.add_argument("--server-args", default="",
                        help="more turnstiled flags for every node, one string "
                        "(e.g. \"--idle-poll-us 0\")")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 1 repeat, 2 s runs, 200 probe rounds")
    args = parser.parse_args()
    defaults = {"repeats": 5, "duration": 10.0, "warmup": 1.0, "probe_count": 1000}
    if args.quick:
        defaults = {"repeats": 1, "duration": 2.0, "warmup": 0.5, "probe_count": 200}
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    resolve_common(args, "cluster")
    args.probe = args.probe or os.path.join(args.build_dir, "bench", "turnstile-fdatasync-probe")
    args.refserver = args.refserver or os.path.join(args.build_dir, "bench", "turnstile-refserver")
    args.workers = [int(w) for w in args.workers.split(",") if w]
    return args


def free_ports(n):
    """n distinct ephemeral loopback ports (bound, read, closed: a small race, as the tests)."""
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def which_disk(path):
    """The mount point, filesystem type and device that hold path (/proc/self/mountinfo)."""
    path = os.path.realpath(path)
    best = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.split(" - ", 1)
            mount_point = left.split()[4]
            fstype, device = right.split()[:2]
            inside = path == mount_point or path.startswith(mount_point.rstrip("/") + "/")
            if inside and (best is None or len(mount_point) >= len(best[0])):
                best = (mount_point, fstype, device)
    return {"path": path, "mount_point": best[0], "fstype": best[1], "device": best[2]} \
        if best else {"path": path}


def request(port, command, key="_", arg="_", timeout_s=2.0):
    """One wire-protocol request (three lines); its reply line, or None."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
            s.sendall(f"{command}\n{key}\n{arg}\n".encode())
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            return data.decode(errors="replace").strip()
    except OSError:
        return None


def cluster_info(port):
    reply = request(port, "stats")
    if not reply or not reply.startswith("ok "):
        return None
    try:
        return json.loads(reply[3:]).get("cluster")
    except json.JSONDecodeError:
        return None


def metrics(http_port):
    """The leader's raft counters from /metrics."""
    wanted = ("turnstile_raft_proposals_total", "turnstile_raft_apply_calls_total",
              "turnstile_raft_entries_applied_total", "turnstile_raft_snapshot_index",
              "turnstile_raft_apply_latency_seconds_sum",
              "turnstile_raft_apply_latency_seconds_count")
    out = {}
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[0] in wanted:
                    out[parts[0]] = float(parts[1])
    except OSError:
        pass
    return out


class Cluster:
    def __init__(self, args, base):
        self.args = args
        ports = free_ports(9)
        self.client_ports, self.raft_ports, self.http_ports = ports[0:3], ports[3:6], ports[6:9]
        peers = ",".join(f"{i + 1}=127.0.0.1:{self.raft_ports[i]}@127.0.0.1:{self.client_ports[i]}"
                         for i in range(3))
        self.nodes = []
        self.argvs = []
        self.starts = [1, 1, 1]
        try:
            for i in range(3):
                raft_dir = os.path.join(base, f"node{i + 1}")
                os.mkdir(raft_dir)
                argv = [args.turnstiled, "--host", "127.0.0.1", "--port", str(self.client_ports[i]),
                        "--threads", str(args.server_threads), "--http-port",
                        str(self.http_ports[i]), "--raft-dir", raft_dir, "--node-id", str(i + 1),
                        "--raft-addr", f"127.0.0.1:{self.raft_ports[i]}", "--cluster-peers",
                        peers, "--cluster-bootstrap", "--cluster-secret", SECRET]
                argv += shlex.split(args.server_args)
                self.argvs.append(argv)
                self.nodes.append(LoggedProcess(argv, os.path.join(args.out, f"node{i + 1}.log"),
                                                LISTENING.search, f"turnstiled node {i + 1}"))
        except BaseException:
            self.stop()
            raise

    def leader(self, timeout_s=30):
        """The index of the node that answers `barrier` with `ok`."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for i, port in enumerate(self.client_ports):
                if request(port, "barrier") == "ok":
                    return i
            time.sleep(0.1)
        raise SystemExit("cluster_bench: no leader within "
                         f"{timeout_s} s; logs in {self.args.out}/node*.log")

    def kill(self, i):
        """kill -9 of node i, waited for."""
        process = self.nodes[i].process
        process.kill()
        process.wait()
        self.nodes[i].stop()

    def restart(self, i):
        """Starts node i again from its raft directory (its log in node<i>-<start>.log)."""
        self.starts[i] += 1
        self.nodes[i] = LoggedProcess(self.argvs[i], os.path.join(
            self.args.out, f"node{i + 1}-{self.starts[i]}.log"), LISTENING.search,
            f"turnstiled node {i + 1}")

    def stop(self):
        for node in self.nodes:
            node.stop()


class ReferenceCluster:
    """The do-nothing replicated server: two turnstile-refserver --replica and a leader with
    --journal and --replicate-to, each journaling in its own directory under `base`."""

    def __init__(self, args, base):
        self.nodes = []
        try:
            replicas = []
            for name in ("ref-replica1", "ref-replica2"):
                directory = os.path.join(base, name)
                os.mkdir(directory)
                node = LoggedProcess([args.refserver, "--port", "0", "--replica", directory],
                                     os.path.join(args.out, f"{name}.log"), LISTENING.search,
                                     f"turnstile-refserver {name}")
                self.nodes.append(node)
                replicas.append(f"127.0.0.1:{node.ready.group(2)}")
            directory = os.path.join(base, "ref-leader")
            os.mkdir(directory)
            leader = LoggedProcess([args.refserver, "--port", "0", "--journal", directory,
                                    "--replicate-to", ",".join(replicas)],
                                   os.path.join(args.out, "ref-leader.log"), LISTENING.search,
                                   "turnstile-refserver leader")
            self.nodes.append(leader)
            self.port, self.pid = int(leader.ready.group(2)), leader.pid
        except BaseException:
            self.stop()
            raise

    def stop(self):
        for node in self.nodes:
            node.stop()


def run_probe(args, dirs, preallocate):
    argv = [args.probe, "--dir", dirs[0], "--dir", dirs[1], "--count", str(args.probe_count),
            "--json"]
    if preallocate:
        argv.append("--preallocate")
    else:
        argv += ["--loopback-rtt", "2000"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"cluster_bench: the probe failed: {done.stderr.strip()}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def machine_cpu():
    """(busy, total) jiffies of the whole machine, from /proc/stat (steal counted as busy)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    total = sum(fields[:8])  # user .. steal (guest time is inside user)
    return total - idle, total, fields[7]


def measure(args, workers, port, pid, node_pids, http_port):
    """One turnstile-bench run against the leader at `port` (process `pid`; `node_pids` all the
    cluster's processes; the leader's /metrics at `http_port`, or None): its result, and the
    fields to add to it (the raft counters per op when /metrics is there, the nodes' CPU per op,
    the machine's busy share)."""
    before = metrics(http_port) if http_port else {}
    nodes_cpu_before = sum(cpu_seconds(p) for p in node_pids)
    machine_before = machine_cpu()
    argv = [args.bench, "--host", "127.0.0.1", "--port", str(port), "--mode", "uncontended",
            "--workers", str(workers), "--threads", str(min(args.bench_threads, workers)),
            "--duration", str(args.duration), "--warmup", str(args.warmup), "--json",
            "--no-progress"]
    result = run_bench_json(argv, pid, args.warmup + args.duration * 4 + 60)
    after = metrics(http_port) if http_port else {}
    nodes_cpu_after = sum(cpu_seconds(p) for p in node_pids)
    machine_after = machine_cpu()
    ops_all = result.get("ops_all") or 0
    fields = {"workers": workers, "load_avg_1m": os.getloadavg()[0]}
    for name, short in (("turnstile_raft_proposals_total", "entries_per_op"),
                        ("turnstile_raft_apply_calls_total", "appends_per_op")):
        if ops_all and name in before and name in after:
            fields[short] = (after[name] - before[name]) / ops_all
    if ops_all:
        fields["nodes_cpu_us_per_op"] = (nodes_cpu_after - nodes_cpu_before) * 1e6 / ops_all
    busy = machine_after[0] - machine_before[0]
    total = machine_after[1] - machine_before[1]
    if total:
        # Of the machine's CPUs together: 1.0 = every CPU busy the whole run.
        fields["machine_busy"] = busy / total
        fields["machine_steal"] = (machine_after[2] - machine_before[2]) / total
    count = "turnstile_raft_apply_latency_seconds_count"
    total_s = "turnstile_raft_apply_latency_seconds_sum"
    if count in before and count in after and after[count] > before[count]:
        fields["entry_commit_ms"] = (after[total_s] - before[total_s]) * 1e3 / \
            (after[count] - before[count])
        fields["entries_per_s"] = (after[count] - before[count]) / (args.warmup + args.duration)
    snap = "turnstile_raft_snapshot_index"
    if snap in before and snap in after:
        fields["snapshot_advanced"] = after[snap] != before[snap]
    return result, fields


def against(runs, worker_counts, server):
    """The rows of `server` ("reference" or "single"), each with the cluster's ratios to it:
    medians (min-max) of the per-repetition ratios, a repetition's turnstiled run against that
    server's run of the same repetition."""
    rows, lines = [], []
    for workers in worker_counts:
        ours = {r["repeat"]: r for r in runs
                if r["workers"] == workers and r["server"] == "turnstiled"}
        refs = {r["repeat"]: r for r in runs
                if r["workers"] == workers and r["server"] == server}
        if not refs:
            continue
        pairs = [(ours[k], refs[k]) for k in sorted(refs) if k in ours]

        def ratios(get):
            return summary([get(a) / get(b) for a, b in pairs if get(a) and get(b)])

        ref = list(refs.values())
        row = {"workers": workers,
               "ops_per_s": summary([r["ops_per_s"] for r in ref]),
               "p50_us": summary([r["latency_us"].get("p50") for r in ref]),
               "p99_us": summary([r["latency_us"].get("p99") for r in ref]),
               "cpu_us_per_op": summary([r.get("server_cpu_us_per_op") for r in ref]),
               "nodes_cpu_us_per_op": summary([r.get("nodes_cpu_us_per_op") for r in ref]),
               "ratio_ops_per_s": ratios(lambda r: r["ops_per_s"]),
               "ratio_p50": ratios(lambda r: r["latency_us"].get("p50")),
               "ratio_p99": ratios(lambda r: r["latency_us"].get("p99")),
               "ratio_nodes_cpu": ratios(lambda r: r.get("nodes_cpu_us_per_op")),
               "errors": sum(r["errors"] + r["fence_violations"] for r in ref)}
        rows.append(row)

        def two(v):
            return f"{v:.2f}"
        lines.append([str(workers), cell(row["ops_per_s"], kops), cell(row["p50_us"], us),
                      cell(row["p99_us"], us), cell(row["cpu_us_per_op"], lambda v: f"{v:.0f}"),
                      cell(row["nodes_cpu_us_per_op"], lambda v: f"{v:.0f}"),
                      cell(row["ratio_ops_per_s"], two), cell(row["ratio_p50"], two),
                      cell(row["ratio_p99"], two), cell(row["ratio_nodes_cpu"], two)])
    return rows, lines


def plot(rows, reference_rows, single_rows, args, path):
    """ops/s and p99 against workers for the cluster and the servers beside it: plot.png."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("cluster_bench: python3-matplotlib is not installed; no plot", file=sys.stderr)
        return False
    figure, axes = plt.subplots(1, 2, figsize=(10, 4))
    series = (("3-node turnstiled cluster", rows, "s-"),
              ("do-nothing replicated server", reference_rows, "o--"),
              ("one turnstiled, cluster mode off", single_rows, "^:"))
    for column, (field, scale, label) in enumerate((("ops_per_s", 1e-3, "k ops/s"),
                                                    ("p99_us", 1e-3, "p99 latency, ms"))):
        for name, mine, style in series:
            points = [(r["workers"], r[field]) for r in mine if r.get(field)]
            if not points:
                continue
            plot_medians(axes[column], points, scale, style, name)
        axes[column].set_xlabel("workers (acquire+release, a key each)")
        axes[column].set_ylabel(label)
        axes[column].set_xscale("log")
        axes[column].set_yscale("log")
        axes[column].grid(True, alpha=0.3)
        axes[column].legend(fontsize="small")
    figure.suptitle(f"cluster on loopback, fsync on (median, min-max of {args.repeats})")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    return True


def us(v):
    return f"{v:.0f}"


def main():
    args = parse_args()
    needed = (args.turnstiled, args.bench, args.probe) + (() if args.no_reference else
                                                          (args.refserver,))
    for path in needed:
        if not os.access(path, os.X_OK):
            raise SystemExit(f"cluster_bench: {path} not found; build it first (bench/README.md)")
    os.makedirs(args.out, exist_ok=True)
    disk = which_disk(args.dir)
    base = tempfile.mkdtemp(prefix="turnstile-cluster-bench-", dir=args.dir)
    probe_dirs = [os.path.join(base, "probe-a"), os.path.join(base, "probe-b")]
    for d in probe_dirs:
        os.mkdir(d)
    load_before = os.getloadavg()
    print(f"cluster_bench: folder {base} on {disk.get('device')} ({disk.get('fstype')}, "
          f"mounted at {disk.get('mount_point')}); load average {load_before[0]:.2f} "
          f"{load_before[1]:.2f} {load_before[2]:.2f}", file=sys.stderr)
    log = RunLog("cluster_bench")
    probes = []
    leaders = []
    cluster = None
    reference = None
    single = None
    try:
        if args.single_node:
            single = LoggedProcess([args.turnstiled, "--host", "127.0.0.1", "--port", "0",
                                    "--threads", str(args.server_threads)],
                                   os.path.join(args.out, "single-node.log"), LISTENING.search,
                                   "turnstiled single node")
        if not args.no_reference:
            reference = ReferenceCluster(args, base)
        cluster = Cluster(args, base)
        leader = cluster.leader()
        print(f"cluster_bench: node {leader + 1} leads", file=sys.stderr)
        for repeat in range(args.repeats):
            probe = {"repeat": repeat, "load_avg_1m": os.getloadavg()[0],
                     "append": run_probe(args, probe_dirs, False),
                     "preallocated": run_probe(args, probe_dirs, True)}
            probes.append(probe)
            for workers in args.workers:
                present = ["turnstiled"] + (["reference"] if reference else []) + \
                    (["single"] if single else [])
                turn = repeat % len(present)
                for server in present[turn:] + present[:turn]:
                    if server == "turnstiled":
                        leader = cluster.leader()
                        leaders.append(leader + 1)
                        result, fields = measure(args, workers, cluster.client_ports[leader],
                                                 cluster.nodes[leader].pid,
                                                 [n.pid for n in cluster.nodes],
                                                 cluster.http_ports[leader])
                        fields["leader"] = leader + 1
                    elif server == "reference":
                        result, fields = measure(args, workers, reference.port, reference.pid,
                                                 [n.pid for n in reference.nodes], None)
                    else:
                        result, fields = measure(args, workers, int(single.ready.group(2)),
                                                 single.pid, [single.pid], None)
                    log.add(result, f"{server} workers {workers} repeat {repeat}",
                            server=server, repeat=repeat, **fields)
            log.repetition_done(repeat, args.repeats)
    finally:
        if cluster:
            cluster.stop()
        if reference:
            reference.stop()
        if single:
            single.stop()
        if args.keep:
            print(f"cluster_bench: kept {base}", file=sys.stderr)
        else:
            shutil.rmtree(base, ignore_errors=True)
    load_after = os.getloadavg()

    # The floor of each repetition, and each bench run's ratio to its own repetition's floor.
    floors = []
    for p in probes:
        rtt = p["append"].get("loopback_rtt", {}).get("p50_us", 0.0)
        commit = p["append"]["round"]["p50_us"] + 2 * rtt
        commit_pre = p["preallocated"]["round"]["p50_us"] + 2 * rtt
        floors.append({"fsync_round_p50_us": p["append"]["round"]["p50_us"],
                       "fsync_round_p99_us": p["append"]["round"]["p99_us"],
                       "fsync_single_p50_us": p["append"]["writers"][0]["p50_us"],
                       "prealloc_round_p50_us": p["preallocated"]["round"]["p50_us"],
                       "rtt_p50_us": rtt, "floor_us": 2 * commit,
                       "floor_prealloc_us": 2 * commit_pre})
    rows = []
    lines = []
    for workers in args.workers:
        runs = [r for r in log.runs if r["workers"] == workers and r["server"] == "turnstiled"]
        ratios = [r["latency_us"]["p50"] / floors[r["repeat"]]["floor_us"]
                  for r in runs if r["latency_us"].get("p50")]
        row = {"workers": workers,
               "ops_per_s": summary([r["ops_per_s"] for r in runs]),
               "p50_us": summary([r["latency_us"].get("p50") for r in runs]),
               "p99_us": summary([r["latency_us"].get("p99") for r in runs]),
               "cpu_us_per_op": summary([r.get("server_cpu_us_per_op") for r in runs]),
               "entries_per_op": summary([r.get("entries_per_op") for r in runs]),
               "appends_per_op": summary([r.get("appends_per_op") for r in runs]),
               "nodes_cpu_us_per_op": summary([r.get("nodes_cpu_us_per_op") for r in runs]),
               "machine_busy": summary([r.get("machine_busy") for r in runs]),
               "entry_commit_ms": summary([r.get("entry_commit_ms") for r in runs]),
               "p50_over_floor": summary(ratios),
               "errors": sum(r["errors"] + r["fence_violations"] for r in runs)}
        rows.append(row)
        lines.append([str(workers), cell(row["ops_per_s"], kops), cell(row["p50_us"], us),
                      cell(row["p99_us"], us), cell(row["p50_over_floor"], lambda v: f"{v:.2f}"),
                      cell(row["entries_per_op"], lambda v: f"{v:.2f}"),
                      cell(row["appends_per_op"], lambda v: f"{v:.3f}"),
                      cell(row["entry_commit_ms"], lambda v: f"{v:.2f}"),
                      cell(row["cpu_us_per_op"], lambda v: f"{v:.0f}"),
                      cell(row["nodes_cpu_us_per_op"], lambda v: f"{v:.0f}"),
                      cell(row["machine_busy"], lambda v: f"{v * 100:.0f}%"), str(row["errors"])])
    table = markdown_table(["workers", "ops/s", "p50 µs", "p99 µs", "p50 / floor",
                            "raft entries/op", "raft appends/op", "entry commit ms",
                            "leader CPU µs/op", "3 nodes CPU µs/op", "machine busy", "errors"],
                           lines)
    reference_rows, reference_lines = against(log.runs, args.workers, "reference")
    if reference_rows:
        table += "\n\n" + markdown_table(
            ["workers", "reference ops/s", "p50 µs", "p99 µs", "leader CPU µs/op",
             "3 nodes CPU µs/op", "turnstiled / reference: ops/s", "p50", "p99",
             "3 nodes CPU"], reference_lines)
    single_rows, single_lines = against(log.runs, args.workers, "single")
    if single_rows:
        table += "\n\n" + markdown_table(
            ["workers", "single node ops/s", "p50 µs", "p99 µs", "CPU µs/op", "CPU µs/op, again",
             "cluster / single node: ops/s", "p50", "p99", "CPU"], single_lines)
    plotted = plot(rows, reference_rows, single_rows, args,
                   os.path.join(args.out, "plot.png"))
    floor = {k: summary([f[k] for f in floors]) for k in floors[0]} if floors else {}
    floor_lines = [[name, cell(floor[key], us)] for name, key in (
        ("parallel fsync round p50 (2 writers, 4 KiB append + fdatasync)", "fsync_round_p50_us"),
        ("parallel fsync round p99", "fsync_round_p99_us"),
        ("one writer's fsync p50 (of the pair)", "fsync_single_p50_us"),
        ("parallel round p50, preallocated file", "prealloc_round_p50_us"),
        ("loopback TCP round trip p50", "rtt_p50_us"),
        ("**floor** = 2 x (round p50 + 2 x RTT p50)", "floor_us"),
        ("floor with the preallocated round", "floor_prealloc_us"))] if floors else []
    floor_table = markdown_table(["floor of one acquire+release (two commits)", "µs"], floor_lines)

    by_workers = {row["workers"]: row for row in rows}
    verdicts = []
    if 1 in by_workers and by_workers[1]["p50_over_floor"]:
        ratio = by_workers[1]["p50_over_floor"]["median"]
        verdicts.append(f"1 worker: p50 / floor = {ratio:.2f} (target <= 1.5): "
                        f"{'met' if ratio <= 1.5 else 'NOT met'}")
    if 100 in by_workers and by_workers[100]["ops_per_s"]:
        ops = by_workers[100]["ops_per_s"]["median"]
        p99 = by_workers[100]["p99_us"]["median"]
        verdicts.append(f"100 workers: {ops:.0f} ops/s (target >= 20000): "
                        f"{'met' if ops >= 20000 else 'NOT met'}; p99 {p99:.0f} us "
                        f"(target <= 10000): {'met' if p99 <= 10000 else 'NOT met'}")
        reference_100 = next((r for r in reference_rows if r["workers"] == 100), None)
        if reference_100 and reference_100["ratio_ops_per_s"]:
            ref_ops = reference_100["ops_per_s"]["median"]
            ref_p99 = reference_100["p99_us"]["median"]
            ratio = reference_100["ratio_ops_per_s"]["median"]
            verdicts.append(f"100 workers, the do-nothing replicated server in the same run: "
                            f"{ref_ops:.0f} ops/s, p99 {ref_p99:.0f} us; turnstiled / reference "
                            f"ops/s = {ratio:.2f}")
    extra = f" {args.server_args}" if args.server_args else ""
    settings = (f"3-node turnstiled cluster on loopback, --threads {args.server_threads}{extra}; "
                f"turnstile-bench uncontended, --threads {args.bench_threads}, "
                f"{args.warmup:g} s warm-up + {args.duration:g} s, {args.repeats} repetitions; "
                f"disk: {disk.get('device')} ({disk.get('fstype')}) at {disk.get('mount_point')} "
                f"(--dir {args.dir}); leaders {sorted(set(leaders))}; load average "
                f"{load_before[0]:.2f} before, {load_after[0]:.2f} after (1 min)")
    title = "Cluster against the fsync floor of the same disk\n" + settings
    full_table = (table + "\n\n" + floor_table + "\n\n" + "\n".join(verdicts) +
                  "\n\nratios are medians of the per-repetition ratios (each run's p50 / its own "
                  "repetition's floor); raft entries/op and appends/op are the leader's "
                  "turnstile_raft_proposals_total and turnstile_raft_apply_calls_total deltas "
                  "over every op of the run, warm-up included; entry commit ms is the leader's "
                  "mean turnstile_raft_apply_latency_seconds (proposing an entry to applying it); "
                  "machine busy is /proc/stat's non-idle share of all CPUs over the run, "
                  "everyone's load included")
    args.disk = disk
    args.load_avg_before = load_before
    args.load_avg_after = load_after
    status = log.finish(args, title, full_table, {"rows": rows, "floors": floors,
                                                  "probes": probes,
                                                  "reference_rows": reference_rows,
                                                  "single_rows": single_rows,
                                                  "plot": plotted}, None)
    return status


if __name__ == "__main__":
    sys.exit(main())
