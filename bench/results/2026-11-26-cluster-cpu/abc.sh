#!/bin/bash
cd /work/wt-perf
R=bench/results/2026-11-26-cluster-cpu
B=base-src/build
for r in 1 2 3; do
  for v in before limit1 limit2; do
    case $v in before) T=$B/net/turnstiled;; limit1) T=/tmp/prof/final/net/turnstiled;; limit2) T=/tmp/prof/m2/net/turnstiled;; esac
    echo "== $v r$r $(date -u +%H:%M:%S) $(cat /proc/loadavg)"
    timeout 400 bench/tools/cluster_bench.py --build-dir $B --turnstiled $T --repeats 1 \
      --out $R/abc-$v-r$r 2>&1 | grep '^100 workers'
  done
done
echo "end $(date -u +%H:%M:%S) $(cat /proc/loadavg)"
