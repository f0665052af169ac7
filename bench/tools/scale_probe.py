#!/usr/bin/python3
"""Idle and scale costs of a running turnstiled (issue 6, docs/benchmarks.md).

Measures against a server it starts on an ephemeral loopback port:

  idle-connections N   open N connections (each sends one ping), then sit idle for --idle-s
                       seconds: server RSS per connection and server CPU while idle.
  idle-keys N          acquire and release N distinct keys (they stay as idle resources until
                       GC): server RSS per idle key.
  held-locks N         hold N locks (distinct keys, pipelined over --connections connections)
                       with a --lease-s lease: RSS per held lock, and the longest wait of an
                       open-loop turnstile-bench (500 ops/s) meanwhile; then, while every lease
                       expires at about the same moment, a probe connection sends a request every
                       millisecond, in turn a ping and an acquire + release of its own key, and
                       the longest round trip of each is reported (an expiry stall shows as a
                       long one).
  renewing N           N connections each hold a lock (distinct keys, --lease-s lease) and renew
                       it every half lease, spread evenly over time, as the dflockd clients do
                       (turnstile-renew-load, one epoll thread); an extra client
                       (turnstile-bench, one worker, acquire + release in a loop) measures its
                       latency first with the server otherwise idle, then while the N
                       connections renew. Every renewal must succeed. --renewals-to ref is the
                       control: turnstiled holds the N locks unrenewed and the same renewals go
                       to the do-nothing reference server, so what remains of the extra client's
                       slow-down is the cost of the load generator on the shared CPUs.
                       --server ref runs the whole probe against the do-nothing reference server
                       instead, polling 100 us before it sleeps as turnstiled does: the floor,
                       what the same load does to the extra client when the server does nothing.

    bench/tools/scale_probe.py --build-dir build idle-connections 10000
    bench/tools/scale_probe.py --build-dir build held-locks 1000000
    bench/tools/scale_probe.py --build-dir build --lease-s 10 renewing 10000
    bench/tools/scale_probe.py --build-dir build --lease-s 10 --server ref renewing 10000

Raise `ulimit -n` for large connection counts (the script raises its own soft limit to the hard
limit and passes --max-connections 0 to the server).
"""
import argparse
import datetime
import json
import os
import re
import resource
import socket
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in bench/
from benchlib import (LISTENING, LoggedProcess, cpu_seconds, rss_kib,  # noqa: E402
                      run_bench_json)


def start_server(binary, extra, log_dir):
    name = os.path.basename(binary)
    server = LoggedProcess([binary, "--host", "127.0.0.1", "--port", "0"] + extra,
                           os.path.join(log_dir, name + ".log"), LISTENING.search,
                           "scale_probe.py: " + name)
    return server, int(server.ready.group(2))


def read_lines(sock, count, buffer=b""):
    """Reads `count` reply lines; returns them and the bytes left over."""
    lines = []
    while len(lines) < count:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise RuntimeError("server closed the connection")
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        lines.extend(complete)
    return lines, buffer


def idle_connections(port, pid, n, idle_s):
    time.sleep(0.5)
    rss_before = rss_kib(pid)
    sockets = []
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"ping\n_\n_\n")
        sockets.append(s)
    for s in sockets:
        assert read_lines(s, 1)[0] == [b"ok"]
    time.sleep(0.5)
    rss_after = rss_kib(pid)
    cpu_before = cpu_seconds(pid)
    time.sleep(idle_s)
    cpu_used = cpu_seconds(pid) - cpu_before
    print(f"idle-connections {n}: RSS {rss_before} -> {rss_after} KiB, "
          f"{(rss_after - rss_before) * 1024 / n:.0f} bytes per connection; "
          f"CPU while idle {idle_s:.0f} s: {cpu_used:.3f} s ({100 * cpu_used / idle_s:.2f}%)")
    for s in sockets:
        s.close()


def pipelined(port, requests, connections):
    """Sends the requests spread over `connections` connections, pipelined; returns replies."""
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(connections)]
    share = [requests[i::connections] for i in range(connections)]
    replies = []
    batch = 2000
    for s, mine in zip(socks, share):
        buffer = b""
        for start in range(0, len(mine), batch):
            chunk = mine[start:start + batch]
            s.sendall(b"".join(chunk))
            lines, buffer = read_lines(s, len(chunk), buffer)
            replies.extend(lines)
    return socks, replies


def idle_keys(port, pid, n):
    time.sleep(0.5)
    rss_before = rss_kib(pid)
    s = socket.create_connection(("127.0.0.1", port))
    buffer = b""
    # Batches of acquires, then their releases: only a batch's holders are ever alive at once,
    # so what stays is the idle resources, not freed holders kept for reuse.
    for start in range(0, n, 2000):
        keys = [f"idle-key-{i}".encode() for i in range(start, min(n, start + 2000))]
        s.sendall(b"".join(b"l\n" + key + b"\n0 3600\n" for key in keys))
        lines, buffer = read_lines(s, len(keys), buffer)
        assert all(line.startswith(b"ok ") for line in lines), "an acquire failed"
        s.sendall(b"".join(b"r\n" + key + b"\n" + line.split()[1] + b"\n"
                           for key, line in zip(keys, lines)))
        lines, buffer = read_lines(s, len(keys), buffer)
        assert all(line == b"ok" for line in lines), "a release failed"
    time.sleep(0.5)
    rss_after = rss_kib(pid)
    print(f"idle-keys {n}: RSS {rss_before} -> {rss_after} KiB, "
          f"{(rss_after - rss_before) * 1024 / n:.0f} bytes per idle key")


def probe_until(probe, deadline):
    """Every millisecond until `deadline`, one round trip on `probe`, in turn a ping (answered by
    the connection's shard, no engine) and a request to an engine (an acquire of the key
    `scale-probe`, then its release). Returns {"ping": (count, longest s, count > 5 ms),
    "lock": (the same over acquires and releases)}."""
    stats = {"ping": [0, 0.0, 0], "lock": [0, 0.0, 0]}

    def round_trip(kind, request):
        sent = time.monotonic()
        probe.sendall(request)
        reply = read_lines(probe, 1)[0][0]
        took = time.monotonic() - sent
        entry = stats[kind]
        entry[0] += 1
        entry[1] = max(entry[1], took)
        entry[2] += took > 0.005
        return reply

    turn = 0
    while time.monotonic() < deadline:
        if turn % 2 == 0:
            round_trip("ping", b"ping\n_\n_\n")
        else:
            reply = round_trip("lock", b"l\nscale-probe\n0 10\n")
            assert reply.startswith(b"ok "), reply
            token = reply.split()[1]
            reply = round_trip("lock", b"r\nscale-probe\n" + token + b"\n")
            assert reply == b"ok", reply
        turn += 1
        time.sleep(0.001)
    return {kind: tuple(entry) for kind, entry in stats.items()}


def report_probe(what, stats):
    for kind, label in (("ping", "pings"), ("lock", "lock requests")):
        count, longest, slow = stats[kind]
        print(f"{what}: {count} {label}, longest {longest * 1000:.2f} ms, {slow} over 5 ms")


def held_locks(port, pid, n, connections, lease_s, bench):
    time.sleep(0.5)
    rss_before = rss_kib(pid)
    # While the locks are being acquired (the key maps grow), turnstile-bench sends 500
    # acquire + release pairs a second on a key of its own, open loop: its max is the longest
    # wait of a request, measured from when it should have been sent.
    prober = subprocess.Popen(
        [bench, "--host", "127.0.0.1", "--port", str(port), "--mode", "uncontended", "--workers",
         "1", "--threads", "1", "--rate", "500", "--duration", str(lease_s * 0.6), "--warmup",
         "0", "--json", "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    began = time.monotonic()
    socks, replies = pipelined(
        port, [f"l\nheld-{i}\n0 {lease_s}\n".encode() for i in range(n)], connections)
    took = time.monotonic() - began
    assert all(r.startswith(b"ok ") for r in replies), "an acquire failed"
    rss_after = rss_kib(pid)
    print(f"held-locks {n}: acquired in {took:.1f} s; RSS {rss_before} -> {rss_after} KiB "
          f"({rss_after / 1024:.0f} MiB), {(rss_after - rss_before) * 1024 / n:.0f} bytes per "
          f"held lock")
    out, err = prober.communicate(timeout=lease_s * 0.6 + 60)
    try:
        latency = json.loads(out.strip().splitlines()[-1])["latency_us"]
        print(f"held-locks {n}: while acquiring (and after, {lease_s * 0.6:.0f} s in all), "
              f"turnstile-bench at 500 ops/s: p99 {latency['p99'] / 1000:.2f} ms, longest "
              f"{latency['max'] / 1000:.2f} ms")
    except (IndexError, KeyError, json.JSONDecodeError):
        print(f"held-locks {n}: the probe during the acquisition failed: {err.strip()[-300:]}")
    # Every lease ends within `took` seconds of the first: probe through the whole window.
    probe = socket.create_connection(("127.0.0.1", port))
    probe.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    windows = []
    expiry_began = time.time()
    stats = probe_until(probe, began + lease_s + took + 2)
    windows.append((f"held-locks {n}: while every lease expired", expiry_began, time.time()))
    report_probe(windows[-1][0], stats)
    print(f"held-locks {n}: RSS now {rss_kib(pid) / 1024:.0f} MiB")
    # The control: the same probe for as long, with nothing expiring (the machine's own noise).
    control_began = time.time()
    stats = probe_until(probe, time.monotonic() + took + 2)
    windows.append((f"held-locks {n}: control, nothing expiring", control_began, time.time()))
    report_probe(windows[-1][0], stats)
    for s in socks:
        s.close()
    return windows


LONG_TURN = re.compile(r"^(\S+)Z warn shard (\d+): a loop turn took ([\d.]+) ms")
LONGEST_TURN = re.compile(r"shard (\d+): longest loop turn ([\d.]+) ms, (\d+) over 10 ms")


def report_server_turns(log_text, windows):
    """The server's own account: its turns over 10 ms (logged at most once a second per shard,
    each line the longest since the last) that fall in each window, and its longest turn."""
    logged = []
    for line in log_text.splitlines():
        match = LONG_TURN.match(line)
        if match:
            when = datetime.datetime.fromisoformat(match.group(1)).replace(
                tzinfo=datetime.timezone.utc).timestamp()
            logged.append((when, float(match.group(3))))
    for label, began, ended in windows:
        inside = [took for when, took in logged if began <= when <= ended + 1]
        longest = f"longest {max(inside):.2f} ms" if inside else "none"
        print(f"{label}: server loop turns over 10 ms: {longest}")
    for match in LONGEST_TURN.finditer(log_text):
        print(f"server shard {match.group(1)}: longest loop turn of the whole run "
              f"{match.group(2)} ms, {match.group(3)} over 10 ms")


def extra_client(bench, port, duration_s):
    """turnstile-bench with one worker, closed loop: its result (latency_us has the percentiles)."""
    return run_bench_json([bench, "--host", "127.0.0.1", "--port", str(port), "--mode",
                           "uncontended", "--workers", "1", "--threads", "1", "--duration",
                           str(duration_s), "--warmup", "0.5", "--json", "--no-progress"],
                          None, duration_s + 60)


def renew_load(build_dir, port, n, lease_s, rate, key_prefix, log_dir):
    """turnstile-renew-load holding n locks on `port` and renewing `rate` of them a second,
    returned once it holds them all; stop() it, then renew_load_result() reads its counts."""
    return LoggedProcess([os.path.join(build_dir, "bench", "turnstile-renew-load"), "--port",
                          str(port), "--connections", str(n), "--lease", str(lease_s), "--rate",
                          str(rate), "--key-prefix", key_prefix],
                         os.path.join(log_dir, f"renew-load-{key_prefix}{port}.log"),
                         lambda text: "holding " in text, "turnstile-renew-load", timeout_s=120)


def renew_load_result(load):
    load.stop()
    for line in reversed(load.log_text().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise SystemExit(f"turnstile-renew-load reported nothing:\n{load.log_text()}")


def renewing(build_dir, port, pid, n, lease_s, bench, duration_s, renewals_to, log_dir):
    unloaded = [extra_client(bench, port, duration_s) for _ in range(2)]
    rate = n / (lease_s / 2)  # each connection renews every half lease
    loads = []
    ref = None
    try:
        if renewals_to == "ref":
            # The control: turnstiled holds the n locks but is not renewed; the same renewals go
            # to the do-nothing reference server, so only the load generator's cost remains.
            loads.append(renew_load(build_dir, port, n, lease_s, 0, "held-", log_dir))
            ref = LoggedProcess([os.path.join(build_dir, "bench", "turnstile-refserver"), "--host",
                                 "127.0.0.1", "--port", "0", "--threads", "2"],
                                os.path.join(log_dir, "refserver.log"), LISTENING.search,
                                "scale_probe.py: turnstile-refserver")
            loads.append(renew_load(build_dir, int(ref.ready.group(2)), n, lease_s, rate,
                                    "renewing-", log_dir))
        else:
            loads.append(renew_load(build_dir, port, n, lease_s, rate, "renewing-", log_dir))
        cpu_before = cpu_seconds(pid)
        loaded_since = time.monotonic()
        loaded = extra_client(bench, port, duration_s)
        loaded_s = time.monotonic() - loaded_since
        cpu_used = cpu_seconds(pid) - cpu_before
        counts = [renew_load_result(load) for load in loads]
    finally:
        for load in loads:
            load.stop()
        if ref is not None:
            ref.stop()
    renewal = counts[-1]

    def pct(result, field):
        return result.get("latency_us", {}).get(field, float("nan"))

    base_p99 = min(pct(r, "p99") for r in unloaded)
    p50s = ", ".join(f"{pct(r, 'p50'):.0f}" for r in unloaded)
    p99s = ", ".join(f"{pct(r, 'p99'):.0f}" for r in unloaded)
    where = "the server" if renewals_to == "turnstiled" else "the reference server (control)"
    print(f"renewing {n}: unloaded extra client ({len(unloaded)} runs): p50 {p50s} us, "
          f"p99 {p99s} us")
    print(f"renewing {n}: renewals to {where}: {renewal['renewals_sent']} sent over "
          f"{renewal['seconds']:.1f} s ({renewal['renewals_sent'] / renewal['seconds']:.0f}/s), "
          f"{renewal['renewals_ok']} ok, {renewal['renewals_failed']} failed; server CPU "
          f"{cpu_used / loaded_s * 100:.1f}%")
    print(f"renewing {n}: loaded extra client: p50 {pct(loaded, 'p50'):.0f} us, p99 "
          f"{pct(loaded, 'p99'):.0f} us, p99.9 {pct(loaded, 'p999'):.0f} us, errors "
          f"{loaded.get('errors')}; p99 loaded / best unloaded {pct(loaded, 'p99') / base_p99:.2f} "
          f"(target <= 2)")
    failed = sum(c["renewals_failed"] + c["renewals_sent"] - c["renewals_ok"] for c in counts)
    return failed == 0 and loaded.get("errors") == 0


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default="build")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--idle-s", type=float, default=10)
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--lease-s", type=int, default=20)
    parser.add_argument("--duration-s", type=float, default=10,
                        help="renewing: seconds of each extra-client run")
    parser.add_argument("--renewals-to", choices=["turnstiled", "ref"], default="turnstiled",
                        help="renewing: where the renewals go; ref = the control, turnstiled "
                             "holds the locks and the reference server takes the renewals")
    parser.add_argument("--server", choices=["turnstiled", "ref"], default="turnstiled",
                        help="renewing: the server under test; ref = turnstile-refserver "
                             "--idle-poll-us 100, the floor")
    parser.add_argument("what",
                        choices=["idle-connections", "idle-keys", "held-locks", "renewing"])
    parser.add_argument("n", type=int)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if args.server == "ref" and (args.what != "renewing" or args.renewals_to == "ref"):
        parser.error("--server ref is for renewing, without --renewals-to ref")
    extra = ["--threads", str(args.threads), "--max-connections", "0", "--max-locks",
             str(max(args.n * 2, 1048576))]
    binary = os.path.join(args.build_dir, "net", "turnstiled")
    if args.server == "ref":
        extra = ["--threads", str(args.threads), "--idle-poll-us", "100"]
        binary = os.path.join(args.build_dir, "bench", "turnstile-refserver")
    log_dir = tempfile.mkdtemp(prefix="turnstile-scale-probe-")
    server, port = start_server(binary, extra, log_dir)
    bench = os.path.join(args.build_dir, "bench", "turnstile-bench")
    try:
        if args.what == "idle-connections":
            idle_connections(port, server.pid, args.n, args.idle_s)
        elif args.what == "idle-keys":
            idle_keys(port, server.pid, args.n)
        elif args.what == "held-locks":
            windows = held_locks(port, server.pid, args.n, args.connections, args.lease_s, bench)
            server.stop()
            report_server_turns(server.log_text(), windows)
        else:
            if not renewing(args.build_dir, port, server.pid, args.n, args.lease_s, bench,
                            args.duration_s, args.renewals_to, log_dir):
                return 1
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
