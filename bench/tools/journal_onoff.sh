#!/bin/bash
# The fence journal's cost in turnstiled: the same binary without --fence-state-file (in the
# "ref" columns of compare.py's table) and with it (the "ts" columns), measured in one run.
#   bench/tools/journal_onoff.sh [BUILD_DIR]  (default ./build; run from the repository root)
# Environment: REPEATS (7), WORKERS (10,50,100), MODES (uncontended), OUT (compare.py --out),
# EXTRA (more flags for the journaled daemon, e.g. "--test-fence-range 65536" to make it write
# every 32,768 grants). The state file lives in a fresh directory on the repository's disk, so
# fsync is real (not tmpfs).
set -euo pipefail
B=$(realpath "${1:-build}")
DIR=$(mktemp -d "$PWD/.journal-bench.XXXXXX")
OFF= ON=
trap 'kill $OFF $ON 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$DIR"' EXIT

# Starts turnstiled on an ephemeral loopback port; the port is read from its "listening on" line.
port_of() {
  for _ in $(seq 100); do
    if grep -q "listening on" "$1"; then
      sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$1" | head -1
      return
    fi
    sleep 0.1
  done
  echo "turnstiled did not start: $(cat "$1")" >&2
  exit 1
}
"$B/net/turnstiled" --host 127.0.0.1 --port 0 --threads 2 >"$DIR/off.log" 2>&1 & OFF=$!
# shellcheck disable=SC2086
"$B/net/turnstiled" --host 127.0.0.1 --port 0 --threads 2 --fence-state-file "$DIR/fences" \
  ${EXTRA:-} >"$DIR/on.log" 2>&1 & ON=$!
OFF_PORT=$(port_of "$DIR/off.log")
ON_PORT=$(port_of "$DIR/on.log")
/usr/bin/python3 "$(dirname "$0")/compare.py" --build-dir "$B" \
  --ref-addr "127.0.0.1:$OFF_PORT" --ref-pid $OFF --ts-addr "127.0.0.1:$ON_PORT" --ts-pid $ON \
  --modes ${MODES:-uncontended} --workers ${WORKERS:-10,50,100} --repeats ${REPEATS:-7} --duration 2 --warmup 0.5 \
  --bench-threads 2 --no-plot --out "${OUT:-$DIR/out}"
