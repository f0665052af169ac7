#!/usr/bin/python3
"""Compare turnstiled with the do-nothing reference server, in one run, with turnstile-bench.

Builds nothing: it takes the binaries (default: from BUILD_DIR, ./build). It starts
turnstile-refserver and turnstiled on ephemeral loopback ports (or uses --ref-addr / --ts-addr),
runs the matrix (modes x workers) against both, interleaved so that machine noise hits both
alike, and repeats it. For every run it records the bench's ops/s and latency percentiles and the
server's CPU time (utime+stime from /proc/<pid>/stat, divided by every op the bench completed,
warm-up included) and its RSS (VmRSS after the run). It prints a table of medians with min-max
ranges and the ratios turnstiled/reference, and writes results.json, table.txt and plot.png
(ops/s and p99 against workers, matplotlib) to --out.

The shared and semaphore modes also run against the hand-off floor: turnstile-refserver
--hand-off 1 (shared) or --hand-off LIMIT (semaphore), one thread polling 100 us like turnstiled,
which does nothing but hand one semaphore from client to client in FIFO order
(bench/reference/reference_server.cc). The reference server grants every acquire at once, so for
these two modes the floor is the fairer bound: the "ts/floor" column. --no-floor skips it; it is
not started when the reference server is given by --ref-addr.

    cmake -S . -B build -G Ninja && ninja -C build
    bench/tools/compare.py                         # full matrix, 5 repetitions (/usr/bin/python3)
    bench/tools/compare.py --quick                 # smoke run, under a minute
    bench/tools/compare.py --build-dir build-bench --repeats 7 --out /tmp/cmp

The plot needs Debian's python3-matplotlib (`scripts/setup.sh bench` installs it); when the python3
running this script cannot import it (a pyenv or venv python3 first on PATH), the script
re-executes itself with /usr/bin/python3.

Exit status: 0 when every bench run was clean (no unexpected reply, fences monotonic), else 1.
"""

import os
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in bench/
from benchlib import (LISTENING, bench_parser, cell, kops, LoggedProcess,  # noqa: E402
                      markdown_table, plot_medians, ratio_cell, resolve_common, rss_kib,
                      run_bench_json, RunLog, summarize_runs)

MODES = ["uncontended", "shared", "semaphore", "pipelined"]
WORKERS = [1, 10, 50, 100, 200]


def parse_args():
    parser = bench_parser(__doc__)
    parser.add_argument("--refserver",
                        help="turnstile-refserver (default BUILD_DIR/bench/turnstile-refserver)")
    parser.add_argument("--ref-addr", help="HOST:PORT of a running reference server (not started)")
    parser.add_argument("--ref-pid", type=int, help="its pid, for CPU and RSS")
    parser.add_argument("--ts-addr", help="HOST:PORT of a running turnstiled (not started)")
    parser.add_argument("--ts-pid", type=int, help="its pid, for CPU and RSS")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--workers", help="comma-separated worker counts (1,10,50,100,200)")
    parser.add_argument("--repeats", type=int, help="repetitions of the matrix (5)")
    parser.add_argument("--duration", type=float, help="measured seconds per run (2)")
    parser.add_argument("--warmup", type=float, help="warm-up seconds per run (0.5)")
    parser.add_argument("--server-threads", type=int, default=2,
                        help="--threads of both servers (turnstiled's default is the core count)")
    parser.add_argument("--bench-threads", type=int, default=2, help="turnstile-bench --threads")
    parser.add_argument("--limit", type=int, default=10, help="semaphore limit")
    parser.add_argument("--keys-per-connection", type=int, default=1,
                        help="pipelined mode: keys per connection")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: workers 1,10,100, 1 repeat, 0.5 s runs")
    parser.add_argument("--no-floor", action="store_true",
                        help="do not run the shared and semaphore modes against the hand-off floor")
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args()
    defaults = {"workers": ",".join(map(str, WORKERS)), "repeats": 5, "duration": 2.0,
                "warmup": 0.5}
    if args.quick:
        defaults = {"workers": "1,10,100", "repeats": 1, "duration": 0.5, "warmup": 0.2}
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    resolve_common(args, "compare")
    args.refserver = args.refserver or os.path.join(args.build_dir, "bench", "turnstile-refserver")
    args.modes = [m for m in args.modes.split(",") if m]
    args.workers = [int(w) for w in args.workers.split(",") if w]
    return args


class Server:
    """A server under test: started here (and stopped here), or given by address."""

    def __init__(self, name, argv, addr, pid, log_dir):
        self.name = name
        self.process = None
        self.pid = pid
        if addr:
            self.host, port = addr.rsplit(":", 1)
            self.port = int(port)
            return
        self.process = LoggedProcess(argv, os.path.join(log_dir, name + ".log"),
                                     LISTENING.search, f"compare.py: {name}")
        self.pid = self.process.pid
        self.host, self.port = self.process.ready.group(1), int(self.process.ready.group(2))

    def stop(self):
        if self.process is not None:
            self.process.stop()


def run_bench(args, server, mode, workers):
    argv = [args.bench, "--host", server.host, "--port", str(server.port), "--mode", mode,
            "--workers", str(workers), "--threads", str(min(args.bench_threads, workers)),
            "--duration", str(args.duration), "--warmup", str(args.warmup), "--json",
            "--no-progress", "--limit", str(args.limit)]
    if server.name == "ref":
        argv.append("--no-exclusion")  # it grants every acquire at once; see turnstile_bench.cc
    if mode == "pipelined" and args.keys_per_connection > 1:
        argv += ["--keys-per-connection", str(args.keys_per_connection)]
    result = run_bench_json(argv, server.pid, args.warmup + args.duration * 4 + 60)
    result["server"] = server.name
    return result


def aggregate(runs, args):
    rows = []
    for mode in args.modes:
        for workers in args.workers:
            row = {"mode": mode, "workers": workers}
            for name in ("ref", "ts", "floor"):
                row[name] = summarize_runs(
                    [r for r in runs
                     if r["server"] == name and r["mode"] == mode and r["workers"] == workers])
            row["ratio"] = {}
            for field in ("ops_per_s", "p99_us", "cpu_us_per_op"):
                ref, ts = row["ref"][field], row["ts"][field]
                if ref and ts and ref["median"]:
                    row["ratio"][field] = ts["median"] / ref["median"]
            floor, ts = row["floor"]["ops_per_s"], row["ts"]["ops_per_s"]
            if floor and ts and floor["median"]:
                row["ratio"]["ops_per_s_of_floor"] = ts["median"] / floor["median"]
            rows.append(row)
    return rows


def format_table(rows, args):
    us = lambda v: f"{v:.0f}"
    cpu = lambda v: f"{v:.2f}"
    header = ["mode", "workers", "ref ops/s", "ts ops/s", "ts/ref", "ref p99 us", "ts p99 us",
              "ts/ref", "ref cpu us/op", "ts cpu us/op", "ts RSS MiB", "floor ops/s", "ts/floor",
              "errors"]
    lines = []
    for row in rows:
        ref, ts, floor, r = row["ref"], row["ts"], row["floor"], row["ratio"]
        lines.append([
            row["mode"], str(row["workers"]), cell(ref["ops_per_s"], kops),
            cell(ts["ops_per_s"], kops), ratio_cell(r, "ops_per_s"), cell(ref["p99_us"], us),
            cell(ts["p99_us"], us), ratio_cell(r, "p99_us"), cell(ref["cpu_us_per_op"], cpu),
            cell(ts["cpu_us_per_op"], cpu),
            f"{ts['rss_kib']['max'] / 1024:.1f}" if ts["rss_kib"] else "-",
            cell(floor["ops_per_s"], kops), ratio_cell(r, "ops_per_s_of_floor"),
            str(ref["errors"] + ts["errors"] + floor["errors"]),
        ])
    return markdown_table(header, lines)


def plot(rows, args, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("compare.py: python3-matplotlib is not installed; no plot", file=sys.stderr)
        return False
    figure, axes = plt.subplots(2, len(args.modes), figsize=(4.2 * len(args.modes), 7),
                                squeeze=False)
    labels = {"ref": "reference server", "ts": "turnstiled", "floor": "hand-off floor"}
    for column, mode in enumerate(args.modes):
        mine = [r for r in rows if r["mode"] == mode]
        for name, style in (("ref", "o--"), ("ts", "s-"), ("floor", "^:")):
            for line, field, scale in ((0, "ops_per_s", 1e-3), (1, "p99_us", 1)):
                points = [(r["workers"], r[name][field]) for r in mine if r[name][field]]
                if not points:
                    continue
                plot_medians(axes[line][column], points, scale, style, labels[name])
        axes[0][column].set_title(mode)
        axes[0][column].set_ylabel("k ops/s (acquire+release)")
        axes[1][column].set_ylabel("p99 latency, us")
        for line in (0, 1):
            axes[line][column].set_xlabel("workers")
            axes[line][column].set_xscale("symlog", linthresh=10)
            axes[line][column].set_ylim(bottom=0)
            axes[line][column].grid(True, alpha=0.3)
            axes[line][column].legend(fontsize="small")
    figure.suptitle(f"turnstiled vs the do-nothing reference server "
                    f"(median, min-max of {args.repeats})")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    return True


def reexec_with_debian_python(argv):
    """Run under /usr/bin/python3 when this interpreter lacks matplotlib and that one may not."""
    if "--no-plot" in argv or os.environ.get("TURNSTILE_COMPARE_REEXEC"):
        return
    try:
        import matplotlib  # noqa: F401
        return
    except ImportError:
        pass
    debian = "/usr/bin/python3"
    if os.path.realpath(sys.executable) != os.path.realpath(debian) and os.access(debian, os.X_OK):
        os.environ["TURNSTILE_COMPARE_REEXEC"] = "1"
        os.execv(debian, [debian, os.path.abspath(__file__)] + argv)


def main():
    reexec_with_debian_python(sys.argv[1:])
    args = parse_args()
    for path in (args.bench, args.refserver, args.turnstiled):
        if not os.access(path, os.X_OK):
            raise SystemExit(f"compare.py: {path} is not an executable; build first or pass it")
    os.makedirs(args.out, exist_ok=True)
    log_dir = tempfile.mkdtemp(prefix="turnstile-compare-")
    threads = str(args.server_threads)
    servers = []
    floors = {}  # mode -> its hand-off floor server
    try:
        servers.append(Server("ref", [args.refserver, "--host", "127.0.0.1", "--port", "0",
                                      "--threads", threads], args.ref_addr, args.ref_pid, log_dir))
        servers.append(Server("ts", [args.turnstiled, "--host", "127.0.0.1", "--port", "0",
                                     "--threads", threads], args.ts_addr, args.ts_pid, log_dir))
        if not args.no_floor and not args.ref_addr:
            for mode, limit in (("shared", 1), ("semaphore", args.limit)):
                if mode in args.modes:
                    floors[mode] = Server("floor", [args.refserver, "--host", "127.0.0.1",
                                                    "--port", "0", "--hand-off", str(limit),
                                                    "--idle-poll-us", "100"],
                                          None, None, log_dir)
        total = args.repeats * len(args.workers) * sum(
            len(servers) + (mode in floors) for mode in args.modes)
        print(f"compare.py: {total} runs of {args.warmup}+{args.duration} s "
              f"(about {total * (args.warmup + args.duration + 0.2) / 60:.1f} min); "
              f"reference on :{servers[0].port}, turnstiled on :{servers[1].port}",
              file=sys.stderr)
        log = RunLog("compare.py")
        for repeat in range(args.repeats):
            for mode in args.modes:
                for workers in args.workers:
                    for server in servers + ([floors[mode]] if mode in floors else []):
                        log.add(run_bench(args, server, mode, workers),
                                f"{server.name} {mode} {workers}", repeat=repeat, mode=mode,
                                workers=workers)
            log.repetition_done(repeat, args.repeats)
        rss_after = {s.name: rss_kib(s.pid) for s in servers if s.pid}
    finally:
        for server in servers + list(floors.values()):
            server.stop()

    rows = aggregate(log.runs, args)
    title = (f"turnstiled vs reference server: median (min-max) of {args.repeats} runs, "
             f"{args.warmup}+{args.duration} s each, servers --threads {args.server_threads}, "
             f"bench --threads {args.bench_threads}, semaphore limit {args.limit}")
    status = log.finish(args, title, format_table(rows, args), rows, rss_after)
    if not args.no_plot and plot(rows, args, os.path.join(args.out, "plot.png")):
        print(f"compare.py: wrote {args.out}/plot.png", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
