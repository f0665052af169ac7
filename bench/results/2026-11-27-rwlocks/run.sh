#!/bin/bash
# Read-write lock benchmarks (docs/benchmarks.md, "Read-write locks"): ROUNDS rounds, each starting
# turnstiled and the do-nothing reference server (--threads 2, ephemeral loopback ports), running
# every configuration against them with --versus-plain (the same load on plain locks first, then
# on read-write locks), and stopping both. One JSON object per run in OUT; OUT/load.txt has the
# machine's load average and its busiest other processes at the start and end of every round.
# Usage: run.sh BUILD_DIR OUT [ROUNDS]     (ROUNDS: 5)
set -euo pipefail
build=$1
out=$2
rounds=${3:-5}
mkdir -p "$out"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

port_from() {  # "listening on HOST:PORT" in a log -> PORT
  for _ in $(seq 1 100); do
    port=$(sed -n 's/.*listening on [^ ]*:\([0-9][0-9]*\).*/\1/p' "$1" | head -n1)
    if [ -n "$port" ]; then echo "$port"; return 0; fi
    sleep 0.05
  done
  echo "no 'listening on' line in $1" >&2
  return 1
}

bench() {  # NAME PORT ARGS...: one run, its JSON in OUT/NAME-ROUND.json
  local name=$1 port=$2
  shift 2
  timeout 120 "$build/bench/turnstile-bench" --host 127.0.0.1 --port "$port" --mode rwlock \
    --workers 32 --threads 2 --warmup 1 --duration 5 --versus-plain --json --no-progress "$@" \
    >"$out/$name-$round.json" 2>"$out/$name-$round.err" || echo "run $name-$round exited $?" >&2
}

load() {  # the load average and the busiest processes, into OUT/load.txt
  { echo "round $round $1 $(date -u +%FT%TZ) loadavg $(cat /proc/loadavg)"
    ps -eo pcpu=,etime=,comm= --sort=-pcpu | head -n 4 | sed 's/^/  /'; } >>"$out/load.txt"
}

for round in $(seq 1 "$rounds"); do
  load start
  "$build/net/turnstiled" --host 127.0.0.1 --port 0 --threads 2 >"$out/turnstiled-$round.log" 2>&1 &
  ts=$!
  pids+=("$ts")
  "$build/bench/turnstile-refserver" --host 127.0.0.1 --port 0 --threads 2 \
    >"$out/refserver-$round.log" 2>&1 &
  ref=$!
  pids+=("$ref")
  ts_port=$(port_from "$out/turnstiled-$round.log")
  ref_port=$(port_from "$out/refserver-$round.log")
  bench ts-r95-h200 "$ts_port"
  bench ref-r95-h200 "$ref_port" --no-exclusion
  bench ts-r95-h0 "$ts_port" --hold-us 0
  bench ts-r50-h200 "$ts_port" --read-percent 50
  bench ts-r99-h200 "$ts_port" --read-percent 99
  kill "$ts" "$ref"
  wait "$ts" "$ref" 2>/dev/null || true
  pids=()
  load end
done
