#!/bin/bash
# Single node, cluster mode off: compare.py against the build before (1fa1783) and after (d2fcb70), interleaved.
cd /work/wt-perf
R=bench/results/2026-11-26-cluster-cpu
for r in 1 2 3; do
  for v in before after; do
    if [ $v = before ]; then T=base-src/build/net/turnstiled; else T=/tmp/prof/final/net/turnstiled; fi
    echo "== $v r$r $(date -u +%H:%M:%S) $(cat /proc/loadavg)"
    timeout 900 bench/tools/compare.py --build-dir base-src/build --turnstiled $T \
      --workers 100 --repeats 1 --no-floor --no-plot --out $R/single-node-$v-r$r 2>&1 | grep '^| [a-z]'
  done
done
echo "end $(date -u +%H:%M:%S) $(cat /proc/loadavg)"
