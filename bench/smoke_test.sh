#!/usr/bin/env bash
# Smoke run of turnstile-bench (ctest bench_smoke; not a timed test): starts turnstiled and
# turnstile-refserver on ephemeral loopback ports, runs every mode briefly against each, closed
# and open loop, and fails unless every run exits 0 (no unexpected reply, fences monotonic).
# Usage: bench/smoke_test.sh TURNSTILED TURNSTILE_REFSERVER TURNSTILE_BENCH
set -euo pipefail
turnstiled=$1
refserver=$2
bench=$3

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# Waits for "listening on HOST:PORT" in a log file and prints PORT.
port_from() {
  local log=$1
  for _ in $(seq 1 100); do
    port=$(sed -n 's/.*listening on [^ ]*:\([0-9][0-9]*\).*/\1/p' "$log" | head -n1)
    if [ -n "$port" ]; then
      echo "$port"
      return 0
    fi
    sleep 0.05
  done
  echo "no 'listening on' line in $log:" >&2
  cat "$log" >&2
  return 1
}

"$turnstiled" --host 127.0.0.1 --port 0 --threads 2 >"$work/turnstiled.log" 2>&1 &
pids+=($!)
"$refserver" --host 127.0.0.1 --port 0 --threads 2 >"$work/refserver.log" 2>&1 &
pids+=($!)
ts_port=$(port_from "$work/turnstiled.log")
ref_port=$(port_from "$work/refserver.log")

failed=0
run() {
  local name=$1 port=$2
  shift 2
  # The reference server grants every acquire at once: only causal order and uniqueness hold.
  if [ "$name" = refserver ]; then set -- "$@" --no-exclusion; fi
  if ! out=$("$bench" --host 127.0.0.1 --port "$port" --threads 2 --warmup 0.1 --no-progress "$@" 2>&1); then
    echo "FAILED against $name: turnstile-bench $*" >&2
    echo "$out" >&2
    failed=1
  else
    echo "ok $name: $*"
    echo "$out" | sed -n 2,3p
  fi
}

for target in "turnstiled $ts_port" "refserver $ref_port"; do
  set -- $target
  name=$1
  port=$2
  run "$name" "$port" --mode uncontended --workers 20 --duration 0.4
  run "$name" "$port" --mode shared --workers 20 --duration 0.4
  run "$name" "$port" --mode semaphore --workers 20 --limit 5 --duration 0.4
  run "$name" "$port" --mode pipelined --workers 10 --duration 0.4
  run "$name" "$port" --mode pipelined --workers 4 --keys-per-connection 8 --duration 0.4
  run "$name" "$port" --mode uncontended --workers 10 --rounds 200 --warmup 0
  run "$name" "$port" --mode shared --workers 10 --rate 2000 --duration 0.4
done

# The generator must notice an unexpected reply: with timeout 0, contended acquires of one key
# are answered "timeout", which must make turnstile-bench exit 1.
if "$bench" --host 127.0.0.1 --port "$ts_port" --mode shared --workers 20 --timeout 0 \
  --warmup 0 --duration 0.3 --no-progress >"$work/negative.out" 2>&1; then
  echo "FAILED: turnstile-bench exited 0 although acquires timed out" >&2
  cat "$work/negative.out" >&2
  failed=1
else
  echo "ok: unexpected replies are reported ($(grep -c '!' "$work/negative.out") shown)"
fi
exit "$failed"
