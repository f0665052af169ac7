#!/usr/bin/python3
"""Idle and scale costs of a running turnstiled (issue 6, docs/benchmarks.md).

Measures against a server it starts on an ephemeral loopback port:

  idle-connections N   open N connections (each sends one ping), then sit idle for --idle-s
                       seconds: server RSS per connection and server CPU while idle.
  idle-keys N          acquire and release N distinct keys (they stay as idle resources until
                       GC): server RSS per idle key.
  held-locks N         hold N locks (distinct keys, pipelined over --connections connections)
                       with a --lease-s lease: RSS per held lock; then, while every lease expires
                       at about the same moment, a probe connection pings every millisecond and
                       the longest ping is reported (an expiry stall shows as a long ping).

    bench/scale_probe.py --build-dir build idle-connections 10000
    bench/scale_probe.py --build-dir build held-locks 1000000

Raise `ulimit -n` for large connection counts (the script raises its own soft limit to the hard
limit and passes --max-connections 0 to the server).
"""
import argparse
import os
import resource
import socket
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in bench/
from benchlib import LISTENING, LoggedProcess, cpu_seconds, rss_kib  # noqa: E402


def start_server(binary, extra, log_dir):
    server = LoggedProcess([binary, "--host", "127.0.0.1", "--port", "0"] + extra,
                           os.path.join(log_dir, "turnstiled.log"), LISTENING.search,
                           "scale_probe.py: turnstiled")
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


def held_locks(port, pid, n, connections, lease_s):
    time.sleep(0.5)
    rss_before = rss_kib(pid)
    began = time.monotonic()
    socks, replies = pipelined(
        port, [f"l\nheld-{i}\n0 {lease_s}\n".encode() for i in range(n)], connections)
    took = time.monotonic() - began
    assert all(r.startswith(b"ok ") for r in replies), "an acquire failed"
    rss_after = rss_kib(pid)
    print(f"held-locks {n}: acquired in {took:.1f} s; RSS {rss_before} -> {rss_after} KiB "
          f"({rss_after / 1024:.0f} MiB), {(rss_after - rss_before) * 1024 / n:.0f} bytes per "
          f"held lock")
    # Every lease ends within `took` seconds of the first: ping through the whole window.
    probe = socket.create_connection(("127.0.0.1", port))
    deadline = began + lease_s + took + 2
    longest = 0.0
    pings = 0
    while time.monotonic() < deadline:
        sent = time.monotonic()
        probe.sendall(b"ping\n_\n_\n")
        read_lines(probe, 1)
        longest = max(longest, time.monotonic() - sent)
        pings += 1
        time.sleep(0.001)
    print(f"held-locks {n}: while every lease expired, {pings} pings, longest "
          f"{longest * 1000:.2f} ms; RSS now {rss_kib(pid) / 1024:.0f} MiB")
    for s in socks:
        s.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default="build")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--idle-s", type=float, default=10)
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--lease-s", type=int, default=20)
    parser.add_argument("what", choices=["idle-connections", "idle-keys", "held-locks"])
    parser.add_argument("n", type=int)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    extra = ["--threads", str(args.threads), "--max-connections", "0", "--max-locks",
             str(max(args.n * 2, 1048576))]
    server, port = start_server(os.path.join(args.build_dir, "net", "turnstiled"), extra,
                                tempfile.mkdtemp(prefix="turnstile-scale-probe-"))
    try:
        if args.what == "idle-connections":
            idle_connections(port, server.pid, args.n, args.idle_s)
        elif args.what == "idle-keys":
            idle_keys(port, server.pid, args.n)
        else:
            held_locks(port, server.pid, args.n, args.connections, args.lease_s)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
