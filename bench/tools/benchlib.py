"""What the server-benchmark scripts share (compare.py, http_vs_tcp.py, scale_probe.py).

A server process started with its log in a file and waited for until its log shows it listening;
one turnstile-bench run with the server's CPU time around it; /proc readings; and the
median/min/max summary every table is made of.
"""
import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import time

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
LISTENING = re.compile(r"listening on (\S+):(\d+)")


def cpu_seconds(pid):
    """utime+stime of every thread of pid, in seconds (clock-tick resolution)."""
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / CLOCK_TICKS


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return None


def summary(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize_runs(runs):
    """The summaries of one table cell: a group of turnstile-bench results."""
    return {
        "ops_per_s": summary([r["ops_per_s"] for r in runs]),
        "p50_us": summary([r["latency_us"].get("p50") for r in runs]),
        "p99_us": summary([r["latency_us"].get("p99") for r in runs]),
        "cpu_us_per_op": summary([r.get("server_cpu_us_per_op") for r in runs]),
        "rss_kib": summary([r.get("server_rss_kib") for r in runs]),
        "errors": sum(r["errors"] + r["fence_violations"] for r in runs),
    }


class LoggedProcess:
    """A server started here with its output in `log_path`, ready once `ready(log_text)` returns
    a true value (kept as `.ready`); stopped with stop()."""

    def __init__(self, argv, log_path, ready, what, timeout_s=10):
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.process = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL)
        self.pid = self.process.pid
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.process.poll() is None:
            self.ready = ready(self.log_text())
            if self.ready:
                return
            time.sleep(0.05)
        self.stop()
        raise SystemExit(f"{what} did not start:\n{self.log_text()}")

    def log_text(self):
        with open(self.log_path) as f:
            return f.read()

    def stop(self):
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
        self.process = None


def run_bench_json(argv, pid, timeout_s):
    """Runs turnstile-bench with --json; its result with exit_status, and the server's CPU per op
    (over every op, warm-up included) and RSS when its pid is known."""
    cpu_before = cpu_seconds(pid) if pid else None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as timeout:
        done = subprocess.CompletedProcess(argv, 124, "", f"turnstile-bench hung: {timeout}")
    cpu_after = cpu_seconds(pid) if pid else None
    try:
        result = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        result = {"ops": 0, "ops_all": 0, "ops_per_s": 0, "errors": 1, "fence_violations": 0,
                  "latency_us": {}, "messages": [done.stderr.strip()[-500:]]}
    result["exit_status"] = done.returncode
    if cpu_before is not None and result.get("ops_all"):
        result["server_cpu_s"] = cpu_after - cpu_before
        result["server_cpu_us_per_op"] = (cpu_after - cpu_before) * 1e6 / result["ops_all"]
    if pid:
        result["server_rss_kib"] = rss_kib(pid)
    return result


def plot_medians(axis, points, scale, style, label):
    """One series on a matplotlib axis: (x, summary) points as their medians, with min-max error
    bars, each value times `scale`."""
    x = [p[0] for p in points]
    y = [p[1]["median"] * scale for p in points]
    low = [(p[1]["median"] - p[1]["min"]) * scale for p in points]
    high = [(p[1]["max"] - p[1]["median"]) * scale for p in points]
    axis.errorbar(x, y, yerr=[low, high], fmt=style, capsize=3, label=label)


def cell(s, fmt):
    """A table cell for a summary: median (min–max)."""
    if s is None:
        return "-"
    return f"{fmt(s['median'])} ({fmt(s['min'])}–{fmt(s['max'])})"


def ratio_cell(ratios, field):
    return f"{ratios[field]:.2f}" if field in ratios else "-"


def kops(v):
    return f"{v / 1000:.1f}k"


def markdown_table(header, lines):
    """A Markdown table with padded columns."""
    rows = [header] + lines
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    out = []
    for n, row in enumerate(rows):
        out.append("| " + " | ".join(c.ljust(widths[i]) for i, c in enumerate(row)) + " |")
        if n == 0:
            out.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(out)


# The repository's root: this file is bench/tools/benchlib.py.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def bench_parser(description):
    """An argument parser with the options every server benchmark script takes: --build-dir,
    --bench, --turnstiled and --out (resolved by resolve_common)."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default=os.path.join(ROOT, "build"),
                        help="where the binaries are (default: ./build)")
    parser.add_argument("--bench", help="turnstile-bench (default BUILD_DIR/bench/turnstile-bench)")
    parser.add_argument("--turnstiled", help="turnstiled (default BUILD_DIR/net/turnstiled)")
    parser.add_argument("--out", help="results folder (default bench/results/<script>-<time>)")
    return parser


def resolve_common(args, results_prefix):
    """Fills in the defaults of bench_parser's options."""
    args.bench = args.bench or os.path.join(args.build_dir, "bench", "turnstile-bench")
    args.turnstiled = args.turnstiled or os.path.join(args.build_dir, "net", "turnstiled")
    if args.out is None:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        args.out = os.path.join(ROOT, "bench", "results", f"{results_prefix}-{stamp}")


class RunLog:
    """The bench runs of one script's matrix: each run's result, the unclean ones reported as
    they happen, and at the end the table printed and written with results.json."""

    def __init__(self, script):
        self.script = script
        self.runs = []
        self.bad = 0

    def add(self, result, label, **fields):
        """Keeps `result` (with `fields` added); reports it when it was not clean."""
        result.update(fields)
        self.runs.append(result)
        if result["exit_status"] != 0:
            self.bad += 1
            print(f"{self.script}: {label}: exit {result['exit_status']}: "
                  f"{result.get('messages')}", file=sys.stderr)

    def repetition_done(self, repeat, repeats):
        print(f"{self.script}: repetition {repeat + 1}/{repeats} done", file=sys.stderr)

    def finish(self, args, title, table, rows, rss_after):
        """Prints and writes table.txt and results.json to args.out; returns the exit status
        (1 when a run had errors or fence violations)."""
        machine = f"{os.cpu_count()} CPUs, {os.uname().release}"
        heading = (f"{title}; {machine}\nop = acquire+release; CPU = server utime+stime / ops; "
                   f"ratios are of medians\n")
        print(heading + table)
        with open(os.path.join(args.out, "table.txt"), "w") as f:
            f.write(heading + table + "\n")
        with open(os.path.join(args.out, "results.json"), "w") as f:
            json.dump({"settings": vars(args), "machine": machine, "rss_kib_after": rss_after,
                       "rows": rows, "runs": self.runs}, f, indent=1)
        print(f"{self.script}: wrote {args.out}/table.txt and results.json", file=sys.stderr)
        if self.bad:
            print(f"{self.script}: {self.bad} runs had errors or fence violations",
                  file=sys.stderr)
        return 1 if self.bad else 0
