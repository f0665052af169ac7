#!/usr/bin/python3
"""HTTP against TCP: one turnstiled, the same load over its line protocol and its HTTP API.

Starts turnstiled (--threads 2 by default) with --port 0 and --http-port on a free loopback port
(or uses --ts-addr / --http-addr / --ts-pid of a running one), then runs turnstile-bench in one
mode (uncontended by default) at each worker count over --transport tcp and --transport http,
interleaved (the order alternates every repetition) so that machine noise hits both alike. For
every run it records ops/s, latency percentiles and the server's CPU time per op (utime+stime
from /proc/<pid>/stat over every op the bench completed, warm-up included). It prints medians
with min-max ranges and the HTTP/TCP ratios of the medians, and writes table.txt and
results.json to --out.

With --http-floor it also starts turnstile-http-refserver, the do-nothing evhttp server (same
--threads), and runs the HTTP load against it too: the latency any HTTP API built on evhttp
would have on this machine, whatever it did per request. Its p50 against turnstiled's TCP p50 is
the best HTTP/TCP ratio an evhttp-based API could reach here.

    cmake -S . -B build -G Ninja && ninja -C build
    bench/tools/http_vs_tcp.py                        # workers 10,50,100, 5 repetitions of 0.5+2 s
    bench/tools/http_vs_tcp.py --build-dir build-benchhttp --repeats 7 --out /tmp/http-vs-tcp

Exit status: 0 when every bench run was clean (no unexpected reply, fences monotonic), else 1.
"""

import os
import re
import socket
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in bench/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (bench_parser, cell, kops, LoggedProcess, markdown_table,  # noqa: E402
                      ratio_cell, resolve_common, rss_kib, run_bench_json, RunLog,
                      summarize_runs)

TRANSPORTS = ["tcp", "http"]


def parse_args():
    parser = bench_parser(__doc__)
    parser.add_argument("--ts-addr", help="HOST:PORT (TCP) of a running turnstiled (not started)")
    parser.add_argument("--http-addr", help="HOST:PORT of its HTTP API (with --ts-addr)")
    parser.add_argument("--ts-pid", type=int, help="its pid, for CPU and RSS")
    parser.add_argument("--mode", default="uncontended",
                        help="uncontended | shared | semaphore (uncontended)")
    parser.add_argument("--workers", default="10,50,100", help="comma-separated (10,50,100)")
    parser.add_argument("--repeats", type=int, default=5, help="repetitions (5)")
    parser.add_argument("--duration", type=float, default=2.0, help="measured seconds per run (2)")
    parser.add_argument("--warmup", type=float, default=0.5, help="warm-up seconds per run (0.5)")
    parser.add_argument("--server-threads", type=int, default=2, help="turnstiled --threads (2)")
    parser.add_argument("--bench-threads", type=int, default=2, help="turnstile-bench --threads")
    parser.add_argument("--http-floor", action="store_true",
                        help="also measure turnstile-http-refserver (the do-nothing evhttp server)")
    parser.add_argument("--http-refserver",
                        help="turnstile-http-refserver (default BUILD_DIR/bench/...)")
    args = parser.parse_args()
    resolve_common(args, "http-vs-tcp")
    args.http_refserver = args.http_refserver or os.path.join(args.build_dir, "bench",
                                                              "turnstile-http-refserver")
    args.transports = TRANSPORTS + (["floor"] if args.http_floor else [])
    args.workers = [int(w) for w in args.workers.split(",") if w]
    if bool(args.ts_addr) != bool(args.http_addr):
        parser.error("--ts-addr and --http-addr go together")
    return args


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """turnstiled with both listeners, started here (and stopped here) or given by address."""

    def __init__(self, args, log_dir):
        self.process = None
        if args.ts_addr:
            self.host, tcp = args.ts_addr.rsplit(":", 1)
            self.tcp_port, self.http_port = int(tcp), int(args.http_addr.rsplit(":", 1)[1])
            self.pid = args.ts_pid
            return
        for _ in range(3):  # the free port may be taken before turnstiled binds it
            self.host, self.http_port = "127.0.0.1", free_port()
            try:
                self.process = LoggedProcess(
                    [args.turnstiled, "--host", "127.0.0.1", "--port", "0", "--http-port",
                     str(self.http_port), "--threads", str(args.server_threads)],
                    os.path.join(log_dir, "turnstiled.log"), self.listening,
                    "http_vs_tcp.py: turnstiled")
            except SystemExit:
                continue
            self.pid = self.process.pid
            self.tcp_port = int(self.process.ready.group(1))
            return
        raise SystemExit("http_vs_tcp.py: turnstiled did not start (see turnstiled.log)")

    def listening(self, text):
        """The TCP port's match once both listeners are up."""
        if f"HTTP API listening on 127.0.0.1:{self.http_port}" not in text:
            return None
        return re.search(r"^(?!.*HTTP API).*listening on \S+:(\d+)", text, re.M)

    def stop(self):
        if self.process is not None:
            self.process.stop()


class HttpFloor:
    """turnstile-http-refserver on an ephemeral loopback port (stopped here)."""

    def __init__(self, args, log_dir):
        self.process = LoggedProcess(
            [args.http_refserver, "--host", "127.0.0.1", "--port", "0", "--threads",
             str(args.server_threads)],
            os.path.join(log_dir, "http-refserver.log"),
            lambda text: re.search(r"listening on \S+:(\d+)", text),
            "http_vs_tcp.py: turnstile-http-refserver")
        self.pid = self.process.pid
        self.port = int(self.process.ready.group(1))

    def stop(self):
        self.process.stop()


def run_bench(args, daemon, floor, transport, workers):
    host, port, pid = daemon.host, daemon.http_port, daemon.pid
    if transport == "floor":
        host, port, pid = "127.0.0.1", floor.port, floor.pid
    argv = [args.bench, "--host", host, "--port", str(daemon.tcp_port), "--transport",
            "tcp" if transport == "tcp" else "http", "--http-port", str(port), "--mode",
            args.mode, "--workers", str(workers), "--threads",
            str(min(args.bench_threads, workers)), "--duration", str(args.duration), "--warmup",
            str(args.warmup), "--json", "--no-progress"]
    result = run_bench_json(argv, pid, args.warmup + args.duration * 4 + 60)
    result.update(transport=transport, workers=workers)
    return result


def aggregate(runs, args):
    rows = []
    for workers in args.workers:
        row = {"workers": workers}
        for transport in args.transports:
            row[transport] = summarize_runs(
                [r for r in runs if r["transport"] == transport and r["workers"] == workers])
        row["ratio"] = {}
        for field in ("p50_us", "p99_us", "ops_per_s", "cpu_us_per_op"):
            tcp, http = row["tcp"][field], row["http"][field]
            if tcp and http and tcp["median"]:
                row["ratio"][field] = http["median"] / tcp["median"]
            if "floor" in row and row["floor"][field] and tcp and tcp["median"]:
                row["ratio"]["floor_" + field] = row["floor"][field]["median"] / tcp["median"]
        rows.append(row)
    return rows


def format_table(rows, args):
    us = lambda v: f"{v:.0f}"
    cpu = lambda v: f"{v:.1f}"
    header = ["workers", "TCP p50 µs", "HTTP p50 µs", "p50 HTTP/TCP", "TCP ops/s", "HTTP ops/s",
              "ops/s HTTP/TCP", "TCP p99 µs", "HTTP p99 µs", "TCP CPU µs/op", "HTTP CPU µs/op",
              "errors"]
    if "floor" in args.transports:
        header[-1:-1] = ["evhttp floor p50 µs", "p50 floor/TCP", "floor ops/s",
                         "floor CPU µs/op"]
    lines = []
    for row in rows:
        tcp, http, r = row["tcp"], row["http"], row["ratio"]
        lines.append([
            str(row["workers"]), cell(tcp["p50_us"], us), cell(http["p50_us"], us),
            ratio_cell(r, "p50_us"), cell(tcp["ops_per_s"], kops), cell(http["ops_per_s"], kops),
            ratio_cell(r, "ops_per_s"), cell(tcp["p99_us"], us), cell(http["p99_us"], us),
            cell(tcp["cpu_us_per_op"], cpu), cell(http["cpu_us_per_op"], cpu),
        ])
        if "floor" in row:
            floor = row["floor"]
            lines[-1] += [cell(floor["p50_us"], us), ratio_cell(r, "floor_p50_us"),
                          cell(floor["ops_per_s"], kops), cell(floor["cpu_us_per_op"], cpu)]
        lines[-1].append(str(sum(row[t]["errors"] for t in args.transports)))
    return markdown_table(header, lines)


def main():
    args = parse_args()
    for path in (args.bench, args.turnstiled) + ((args.http_refserver,) if args.http_floor else ()):
        if not os.access(path, os.X_OK):
            raise SystemExit(f"http_vs_tcp.py: {path} is not an executable; build first or pass it")
    os.makedirs(args.out, exist_ok=True)
    log_dir = tempfile.mkdtemp(prefix="turnstile-http-vs-tcp-")
    daemon = Daemon(args, log_dir)
    floor = None
    log = RunLog("http_vs_tcp.py")
    try:
        if args.http_floor:
            floor = HttpFloor(args, log_dir)
        total = args.repeats * len(args.workers) * len(args.transports)
        print(f"http_vs_tcp.py: {total} runs of {args.warmup}+{args.duration} s; turnstiled pid "
              f"{daemon.pid}, TCP :{daemon.tcp_port}, HTTP :{daemon.http_port}", file=sys.stderr)
        for repeat in range(args.repeats):
            order = args.transports if repeat % 2 == 0 else args.transports[::-1]
            for workers in args.workers:
                for transport in order:
                    log.add(run_bench(args, daemon, floor, transport, workers),
                            f"{transport} {workers}", repeat=repeat)
            log.repetition_done(repeat, args.repeats)
        rss = rss_kib(daemon.pid) if daemon.pid else None
    finally:
        daemon.stop()
        if floor is not None:
            floor.stop()

    rows = aggregate(log.runs, args)
    title = (f"HTTP against TCP, mode {args.mode}: median (min–max) of {args.repeats} "
             f"interleaved runs of {args.warmup}+{args.duration} s, turnstiled --threads "
             f"{args.server_threads}, bench --threads {args.bench_threads}")
    return log.finish(args, title, format_table(rows, args), rows, rss)


if __name__ == "__main__":
    sys.exit(main())
