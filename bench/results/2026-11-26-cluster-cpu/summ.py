import json, glob, statistics, os
R = "/work/wt-perf/bench/results/2026-11-26-cluster-cpu"
groups = {"before": sorted(glob.glob(f"{R}/ab-before-r*")) + sorted(glob.glob(f"{R}/abc-before-r*")),
          "after": sorted(glob.glob(f"{R}/ab-after-r*")) + sorted(glob.glob(f"{R}/abc-limit1-r*")),
          "limit2": sorted(glob.glob(f"{R}/abc-limit2-r*"))}
def med(vals, fmt):
    vals = [v for v in vals if v is not None]
    return f"{fmt(statistics.median(vals))} ({fmt(min(vals))}–{fmt(max(vals))})"
out = {}
for name, dirs in groups.items():
    for workers in (1, 100):
        runs, ratios = [], []
        for d in dirs:
            j = json.load(open(f"{d}/results.json"))
            floors = j["rows"]["floors"] if isinstance(j["rows"], dict) else None
            for r in j["runs"]:
                if r["workers"] == workers:
                    runs.append(r)
                    if floors: ratios.append(r["latency_us"]["p50"] / floors[r["repeat"]]["floor_us"])
        k = lambda v: f"{v/1000:.1f}k"
        i = lambda v: f"{v:.0f}"
        f2 = lambda v: f"{v:.2f}"
        row = {"n": len(runs), "ops": med([r["ops_per_s"] for r in runs], k if workers > 1 else lambda v: f"{v:.0f}"),
               "p50": med([r["latency_us"]["p50"] for r in runs], i),
               "p99": med([r["latency_us"]["p99"] for r in runs], i),
               "p50/floor": med(ratios, f2) if ratios else "",
               "entries/op": med([r.get("entries_per_op") for r in runs], f2),
               "commit ms": med([r.get("entry_commit_ms") for r in runs], f2),
               "leader": med([r.get("server_cpu_us_per_op") for r in runs], i),
               "nodes": med([r.get("nodes_cpu_us_per_op") for r in runs], i),
               "busy": med([100 * r.get("machine_busy") for r in runs], i),
               "load": med([r.get("load_avg_1m") for r in runs], lambda v: f"{v:.1f}"),
               "errors": sum(r["errors"] + r["fence_violations"] for r in runs)}
        print(name, workers, row)
        out[f"{name}-{workers}"] = row
json.dump(out, open(f"{R}/summary.json", "w"), indent=1)
