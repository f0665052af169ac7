#!/usr/bin/env bash
# Smoke run of turnstile-bench (ctest bench_smoke; not a timed test): starts turnstiled and
# turnstile-refserver on ephemeral loopback ports, runs every mode briefly against each, closed
# and open loop, and fails unless every run exits 0 (no unexpected reply, fences monotonic).
# Then the lock and semaphore modes against the hand-off floor (turnstile-refserver --hand-off),
# with every fence check. Then the do-nothing replicated server (a leader and two replicas): the
# load against it, and a reply waits until a majority holds its batch. Then the HTTP transport against a turnstiled with --http-port on a free
# loopback port: the lock and semaphore modes must exit 0 and leave no HTTP session behind; and
# the HTTP load against turnstile-http-refserver, the do-nothing evhttp server.
# The signal modes (signal-emit, signal-fanout) run against turnstiled and the reference server
# with the rest, and must notice listeners that receive fewer frames than the replies counted.
# So do the read-write modes (rwlock, and --versus-plain), which must notice a writer granted
# beside other holders (the reference server, with the exclusion checks on).
# Usage: bench/tools/smoke_test.sh TURNSTILED TURNSTILE_REFSERVER TURNSTILE_BENCH \
#          TURNSTILE_HTTP_REFSERVER
set -euo pipefail
turnstiled=$1
refserver=$2
bench=$3
http_refserver=$4

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
  run "$name" "$port" --mode signal-emit --workers 10 --duration 0.4
  run "$name" "$port" --mode signal-emit --workers 10 --duration 0.3 --versus-uncontended
  run "$name" "$port" --mode signal-fanout --workers 2 --listeners 50 --duration 0.4
  run "$name" "$port" --mode signal-fanout --listeners 20 --pattern wildcard --rounds 50 --warmup 0
  run "$name" "$port" --mode rwlock --workers 20 --keys 2 --duration 0.4
  run "$name" "$port" --mode rwlock --workers 10 --read-percent 80 --hold-us 100 --duration 0.3 --versus-plain
  run "$name" "$port" --mode rwlock-plain --workers 10 --rounds 50 --warmup 0
done

# The rwlock checks must notice a writer granted beside other holders: the reference server
# grants every acquire at once, which must make turnstile-bench exit 1 with the exclusion checks
# on, and say so.
if "$bench" --host 127.0.0.1 --port "$ref_port" --mode rwlock --workers 10 --keys 1 \
  --read-percent 50 --hold-us 500 --warmup 0 --duration 0.3 --no-progress >"$work/negative-rw.out" 2>&1; then
  echo "FAILED: turnstile-bench exited 0 although writers were granted beside other holders" >&2
  cat "$work/negative-rw.out" >&2
  failed=1
elif ! grep -q 'writers and' "$work/negative-rw.out"; then
  echo "FAILED: turnstile-bench exited 1 but reported no rwlock exclusion violation" >&2
  cat "$work/negative-rw.out" >&2
  failed=1
else
  echo "ok: a writer beside other holders is reported ($(grep -c 'writers and' "$work/negative-rw.out") shown)"
fi

# The signal modes must notice frames that never arrive: this server answers every signal
# `ok 1` and writes no frame, which must make turnstile-bench exit 1.
/usr/bin/python3 - >"$work/liar.log" 2>&1 <<'PY' &
import socketserver
class Handler(socketserver.StreamRequestHandler):
    def handle(self):
        while True:
            lines = [self.rfile.readline() for _ in range(3)]
            if not lines[2]:
                return
            command = lines[0].strip()
            self.wfile.write(b"ok\n" if command == b"listen" else
                             b"ok 1\n" if command == b"signal" else b"error\n")
class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
server = Server(("127.0.0.1", 0), Handler)
print("listening on 127.0.0.1:%d" % server.server_address[1], flush=True)
server.serve_forever()
PY
pids+=($!)
liar_port=$(port_from "$work/liar.log")
if "$bench" --host 127.0.0.1 --port "$liar_port" --mode signal-emit --workers 2 --warmup 0 \
  --duration 0.2 --no-progress >"$work/negative-signal.out" 2>&1; then
  echo "FAILED: turnstile-bench exited 0 although no signal frame arrived" >&2
  cat "$work/negative-signal.out" >&2
  failed=1
else
  echo "ok: missing signal frames are reported ($(grep -c '!' "$work/negative-signal.out") shown)"
fi

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

# The hand-off floor (turnstile-refserver --hand-off L) grants at most L at once in FIFO order:
# the lock and semaphore modes run against it with the exclusion checks on.
"$refserver" --host 127.0.0.1 --port 0 --hand-off 1 --idle-poll-us 100 >"$work/floor1.log" 2>&1 &
pids+=($!)
"$refserver" --host 127.0.0.1 --port 0 --hand-off 5 >"$work/floor5.log" 2>&1 &
pids+=($!)
floor1_port=$(port_from "$work/floor1.log")
floor5_port=$(port_from "$work/floor5.log")
run floor "$floor1_port" --mode shared --workers 20 --duration 0.4
run floor "$floor1_port" --mode shared --workers 10 --rate 2000 --duration 0.4
run floor "$floor5_port" --mode semaphore --workers 20 --limit 5 --duration 0.4
# The bench's checks cannot see two grants at once when each is released on receipt, so the
# exclusion itself is checked here: a second acquire waits until the first grant is released.
if ! /usr/bin/python3 - "$floor1_port" <<'PY'; then
import socket, sys
a, b = (socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5) for _ in range(2))
a.sendall(b"l\nk\n10\n")
assert a.recv(100).startswith(b"ok "), "first acquire not granted"
b.sendall(b"l\nk\n10\n")
b.settimeout(0.3)
try:
    sys.exit(f"second acquire granted while the first is held: {b.recv(100)!r}")
except socket.timeout:
    pass
a.sendall(b"r\nk\nt\n")
assert a.recv(100) == b"ok\n", "release not answered ok"
b.settimeout(5)
assert b.recv(100).startswith(b"ok "), "waiter not granted after the release"
PY
  echo "FAILED: the hand-off floor does not hand off one grant at a time" >&2
  failed=1
else
  echo "ok floor: a second acquire waits for the release"
fi

# The do-nothing replicated server (turnstile-refserver --journal --replicate-to, and --replica):
# the load runs against its leader, every journal grows, and a reply waits for a majority: with
# one replica paused requests are still answered, with both paused none is until one resumes.
mkdir "$work/ref-leader" "$work/ref-r1" "$work/ref-r2"
"$refserver" --host 127.0.0.1 --port 0 --replica "$work/ref-r1" >"$work/ref-r1.log" 2>&1 &
replica1=$!
pids+=($!)
"$refserver" --host 127.0.0.1 --port 0 --replica "$work/ref-r2" >"$work/ref-r2.log" 2>&1 &
replica2=$!
pids+=($!)
r1_port=$(port_from "$work/ref-r1.log")
r2_port=$(port_from "$work/ref-r2.log")
"$refserver" --host 127.0.0.1 --port 0 --journal "$work/ref-leader" \
  --replicate-to "127.0.0.1:$r1_port,127.0.0.1:$r2_port" >"$work/ref-leader.log" 2>&1 &
pids+=($!)
replicated_port=$(port_from "$work/ref-leader.log")
run replicated "$replicated_port" --mode uncontended --workers 20 --duration 0.4 --no-exclusion
run replicated "$replicated_port" --mode pipelined --workers 4 --keys-per-connection 8 --duration 0.4 --no-exclusion
for dir in ref-leader ref-r1 ref-r2; do
  if [ "$(cat "$work/$dir"/journal-*.dat | wc -c)" -lt 1000 ]; then
    echo "FAILED: the replicated reference's journal in $dir did not grow" >&2
    failed=1
  fi
done
if ! /usr/bin/python3 - "$replicated_port" "$replica1" "$replica2" <<'PY'; then
import os, signal, socket, sys
port, r1, r2 = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
c = socket.create_connection(("127.0.0.1", port), timeout=5)
def answered(wait_s):
    c.sendall(b"ping\n_\n_\n")
    c.settimeout(wait_s)
    try:
        return c.recv(100) == b"ok\n"
    except socket.timeout:
        return False
os.kill(r1, signal.SIGSTOP)
assert answered(5), "no reply with one replica of two paused"
os.kill(r2, signal.SIGSTOP)
try:
    assert not answered(0.3), "a reply with both replicas paused"
finally:
    os.kill(r1, signal.SIGCONT)
    os.kill(r2, signal.SIGCONT)
c.settimeout(5)
assert c.recv(100) == b"ok\n", "no reply once the replicas resumed"
PY
  echo "FAILED: the replicated reference does not wait for a majority" >&2
  failed=1
else
  echo "ok replicated: a reply waits for a majority"
fi

# --- HTTP transport ------------------------------------------------------------------------------
# A free loopback port (the kernel's pick, released at once: another process may take it before
# turnstiled binds it, hence the retries).
free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
http_port=
for attempt in 1 2 3; do
  candidate=$(free_port)
  "$turnstiled" --host 127.0.0.1 --port 0 --http-port "$candidate" --threads 2 \
    >"$work/turnstiled-http.log" 2>&1 &
  http_pid=$!
  for _ in $(seq 1 100); do
    if grep -q "HTTP API listening on 127.0.0.1:$candidate" "$work/turnstiled-http.log"; then
      http_port=$candidate
      break
    fi
    kill -0 "$http_pid" 2>/dev/null || break
    sleep 0.05
  done
  if [ -n "$http_port" ]; then
    pids+=("$http_pid")
    break
  fi
  kill "$http_pid" 2>/dev/null || true
  wait "$http_pid" 2>/dev/null || true
  echo "turnstiled with --http-port $candidate did not start (attempt $attempt):" >&2
  cat "$work/turnstiled-http.log" >&2
done
if [ -z "$http_port" ]; then
  echo "FAILED: no turnstiled with --http-port" >&2
  exit 1
fi

# With --transport http and no --http-port, turnstile-bench's --port is the HTTP port.
run_http() { run http "$http_port" --transport http "$@"; }
run_http --mode uncontended --workers 20 --duration 0.4
run_http --mode shared --workers 20 --duration 0.4 --lease-ttl 30
run_http --mode semaphore --workers 20 --limit 5 --duration 0.4
run_http --mode uncontended --workers 10 --rounds 200 --warmup 0
run_http --mode shared --workers 10 --rate 2000 --duration 0.4

# Every worker's session was deleted at the end of its run.
sessions=$(/usr/bin/python3 -c '
import sys, urllib.request
with urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=5) as r:
    for line in r.read().decode().splitlines():
        if line.startswith("turnstile_http_sessions "):
            print(line.split()[1])
' "$http_port")
if [ "$sessions" != 0 ]; then
  echo "FAILED: turnstile_http_sessions is '$sessions' after the HTTP runs, not 0" >&2
  failed=1
else
  echo "ok http: no session left behind"
fi

# Over HTTP too, a timeout (200 {"status":"timeout"}) must make turnstile-bench exit 1.
if "$bench" --host 127.0.0.1 --transport http --http-port "$http_port" --mode shared \
  --workers 20 --timeout 0 --warmup 0 --duration 0.3 --no-progress >"$work/negative-http.out" 2>&1; then
  echo "FAILED: turnstile-bench --transport http exited 0 although acquires timed out" >&2
  cat "$work/negative-http.out" >&2
  failed=1
else
  echo "ok http: unexpected replies are reported ($(grep -c '!' "$work/negative-http.out") shown)"
fi

# The do-nothing evhttp server answers the same HTTP load (fences from its counter).
"$http_refserver" --host 127.0.0.1 --port 0 --threads 2 >"$work/http-refserver.log" 2>&1 &
pids+=($!)
http_ref_port=$(port_from "$work/http-refserver.log")
run http-refserver "$http_ref_port" --transport http --mode uncontended --workers 20 --duration 0.4
exit "$failed"
