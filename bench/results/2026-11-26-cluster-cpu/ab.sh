#!/bin/bash
# Interleaved A/B of cluster_bench.py: the build of 1fa1783 (before) and of d2fcb70 (after).
cd /work/wt-perf
R=bench/results/2026-11-26-cluster-cpu
B=base-src/build
for r in 1 2 3; do
  for v in before after; do
    if [ $v = before ]; then T=$B/net/turnstiled; else T=/tmp/prof/final/net/turnstiled; fi
    echo "== $v r$r $(date -u +%H:%M:%S) $(cat /proc/loadavg)"
    timeout 400 bench/tools/cluster_bench.py --build-dir $B --turnstiled $T --repeats 1 \
      --out $R/ab-$v-r$r 2>&1 | tail -4
  done
done
echo "end $(date -u +%H:%M:%S) $(cat /proc/loadavg)"
