#!/usr/bin/python3
"""Medians and ranges of the runs run.sh wrote: summarize.py DIR > DIR/summary.txt"""
import glob
import json
import os
import statistics
import sys

directory = sys.argv[1]
configs = {}
for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
    name = os.path.basename(path).rsplit("-", 1)[0]
    with open(path) as f:
        run = json.load(f)
    configs.setdefault(name, []).append(run)


def cell(values, fmt):
    values = sorted(values)
    return f"{fmt(statistics.median(values))} ({fmt(values[0])}–{fmt(values[-1])})"


def k(value):
    return f"{value / 1000:.1f}k"


def us(value):
    return f"{value:.0f}"


def ratio(value):
    return f"{value:.2f}"


def pct(value):
    return f"{value:.1f}%"


print("median (min–max) over the runs; ops/s of the measured 5 s; latency of an op (acquire,")
print("hold, release) in µs")
print()
for name, runs in configs.items():
    rw = [r for r in runs]
    plain = [r["versus_plain"]["plain"] for r in runs]
    errors = sum(r["errors"] + r["fence_violations"] + p["errors"] + p["fence_violations"]
                 for r, p in zip(rw, plain))
    print(f"{name}: {len(runs)} runs, {rw[0]['workers']} workers, "
          f"{rw[0]['read_write']['keys']} keys, {rw[0]['read_write']['read_percent']:g}% reads, "
          f"hold {rw[0]['read_write']['hold_us']:g} µs; errors + fence violations: {errors}")
    print(f"  rwlock ops/s        {cell([r['ops_per_s'] for r in rw], k)}")
    print(f"  rwlock-plain ops/s  {cell([p['ops_per_s'] for p in plain], k)}")
    print(f"  ratio rw/plain      {cell([r['versus_plain']['ratio'] for r in rw], ratio)}")
    for label, source in (("rwlock", rw), ("plain", plain)):
        print(f"  {label:6} p50 {cell([r['latency_us']['p50'] for r in source], us)}"
              f"  p99 {cell([r['latency_us']['p99'] for r in source], us)}")
    print(f"  rwlock reads  p50 {cell([r['read_write']['read_latency_us']['p50'] for r in rw], us)}"
          f"  p99 {cell([r['read_write']['read_latency_us']['p99'] for r in rw], us)}")
    print(f"  rwlock writes p50 {cell([r['read_write']['write_latency_us']['p50'] for r in rw], us)}"
          f"  p99 {cell([r['read_write']['write_latency_us']['p99'] for r in rw], us)}")
    if "read_grants" in rw[0]["read_write"]:
        shares = [100.0 * r["read_write"]["shared_read_grants"] / r["read_write"]["read_grants"]
                  for r in rw if r["read_write"]["read_grants"] > 0]
        print(f"  read grants that found another reader holding {cell(shares, pct)}; "
              f"most readers of one key at once "
              f"{cell([r['read_write']['max_readers_at_once'] for r in rw], lambda v: f'{v:.0f}')}")
    print()

# turnstiled against the reference server, the same load on each, round by round.
for mine, theirs in (("ts-r95-h200", "ref-r95-h200"),):
    if mine in configs and theirs in configs:
        pairs = list(zip(configs[mine], configs[theirs]))
        print(f"{mine} / {theirs} (same round):")
        print(f"  rwlock ops/s  {cell([a['ops_per_s'] / b['ops_per_s'] for a, b in pairs], ratio)}")
        print("  plain ops/s   " + cell([a['versus_plain']['plain']['ops_per_s'] /
                                         b['versus_plain']['plain']['ops_per_s']
                                         for a, b in pairs], ratio))
