#!/usr/bin/env python3
"""Random clients against turnstiled's signals, then a check that the server let go of them all.

Usage: signal_chaos.py TURNSTILED [SECONDS]

Starts turnstiled on loopback (2 threads, the HTTP API, --signal-queue 8), and for SECONDS
(default 10) runs TCP clients that listen (in groups or not), unlisten, signal payloads of 1 B to
the 64 KiB cap, send over-long lines and random bytes, take locks, read now and then or never,
and close with a FIN or a reset; and HTTP clients that open signal streams and publish. Then it
checks that the server still answers (a ping within 5 s), that every connection it counted is gone
(`turnstile_connections` 0 once the clients are), that no subscription is left, and that it
holds no more file descriptors than at the start (plus a few). Exit 0 on success, 1 on a failure.

A random client found that a listener whose output was full could be left with its last reply
unwritten and its socket open for ever (net/tcp_connections.cc, TcpConnections::service); this
is what would catch it again.
"""
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request

PATTERNS = ["a", "a.*", "a.>", "*", ">", "a.b", "*.b", "a.b.c"]
CHANNELS = ["a", "a.b", "a.b.c", "b", "x.b"]


def free_port():
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    return port


def start(turnstiled):
    process = subprocess.Popen(
        [turnstiled, "--host", "127.0.0.1", "--port", "0", "--http-port", str(free_port()),
         "--threads", "2", "--signal-queue", "8"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ports = {}
    deadline = time.time() + 10
    while len(ports) < 2 and time.time() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        found = re.search(r"listening on 127\.0\.0\.1:(\d+) \((tcp|http)", line)
        if found:
            ports[found.group(2)] = int(found.group(1))
    if len(ports) < 2:
        process.kill()
        sys.exit("signal_chaos: turnstiled did not say where it listens")
    # Keep draining its log so it never blocks on a full pipe.
    threading.Thread(target=lambda: [None for _ in process.stdout], daemon=True).start()
    return process, ports["tcp"], ports["http"]


def tcp_client(port, seed, stop):
    r = random.Random(seed)
    while time.time() < stop:
        try:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, r.choice([4096, 65536]))
            s.settimeout(2)
            s.connect(("127.0.0.1", port))
            for _ in range(r.randint(1, 60)):
                k = r.random()
                if k < 0.3:
                    s.sendall(f"listen\n{r.choice(PATTERNS)}\n{r.choice(['', 'g1', 'g2'])}\n".encode())
                elif k < 0.4:
                    s.sendall(f"unlisten\n{r.choice(PATTERNS)}\n{r.choice(['', 'g1'])}\n".encode())
                elif k < 0.8:
                    size = r.choice([1, 10, 1000, 60000, 65530])
                    s.sendall(f"signal\n{r.choice(CHANNELS)}\n".encode() + b"p" * size + b"\n")
                elif k < 0.85:
                    s.sendall(b"stats\n_\n\n")
                elif k < 0.9:
                    s.sendall(f"l\nk{r.randint(0, 3)}\n{r.randint(0, 1)} 2\n".encode())
                elif k < 0.95:
                    s.sendall(bytes(r.randrange(256) for _ in range(r.randint(1, 300))))
                else:
                    s.sendall(b"signal\na\n" + b"q" * 70000 + b"\n")
                if r.random() < 0.5:
                    s.setblocking(False)
                    try:
                        s.recv(1 << 20)
                    except OSError:
                        pass
                    s.setblocking(True)
                    s.settimeout(2)
            if r.random() < 0.5:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            s.close()
        except OSError:
            pass


def http_client(port, seed, stop):
    r = random.Random(seed)
    while time.time() < stop:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=2)
            if r.random() < 0.5:
                query = "pattern=" + r.choice(PATTERNS).replace(">", "%3E")
                if r.random() < 0.3:
                    query += "&group=g1"
                s.sendall(f"GET /v1/signals?{query} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                time.sleep(r.random() * 0.5)
                if r.random() < 0.5:
                    s.recv(65536)
            else:
                body = '{"payload":"%s"}' % ("z" * r.choice([1, 100, 5000]))
                s.sendall((f"POST /v1/signals/{r.choice(CHANNELS)} HTTP/1.1\r\nHost: x\r\n"
                           f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
                s.recv(4096)
            s.close()
        except OSError:
            pass


def metric(http_port, name):
    text = urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=5).read().decode()
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(found.group(1)) if found else None


def main():
    turnstiled = sys.argv[1]
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 10
    process, tcp_port, http_port = start(turnstiled)
    try:
        fds_before = len(os.listdir(f"/proc/{process.pid}/fd"))
        stop = time.time() + seconds
        threads = [threading.Thread(target=tcp_client, args=(tcp_port, i, stop)) for i in range(6)]
        threads += [threading.Thread(target=http_client, args=(http_port, 100 + i, stop))
                    for i in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        # The frames still on their way to listeners that have gone cost their thread little: a
        # listener is written to as soon as more than its queue waits, and closed once its socket
        # takes no more; the frames after that are dropped. (When every frame of a loop turn was
        # copied into each listener's output first, this ping took up to 25 s on a loaded
        # machine.) So the server answers at once, loaded or not.
        asked = time.time()
        try:
            probe = socket.create_connection(("127.0.0.1", tcp_port), timeout=5)
            probe.sendall(b"ping\n_\n\n")
            answer = probe.recv(100)
        except OSError as error:
            answer = repr(error).encode()
        if answer != b"ok\n":
            print(f"signal_chaos: FAILED: no answer to a ping within 5 s ({answer!r})")
            return 1
        probe.close()
        print(f"signal_chaos: a ping after the clients stopped took {time.time() - asked:.1f} s")
        # Every client has closed: the server must let go of every connection (the write timeout,
        # 5 s, bounds how long a closed peer can keep one).
        deadline = time.time() + 15
        while time.time() < deadline:
            connections = metric(http_port, "turnstile_connections")
            listeners = metric(http_port, "turnstile_signal_listeners")
            if connections == 0 and listeners == 0:
                break
            time.sleep(0.5)
        fds_after = len(os.listdir(f"/proc/{process.pid}/fd"))
        published = metric(http_port, "turnstile_signals_published_total")
        print(f"signal_chaos: {published:.0f} signals; connections {connections:.0f}, "
              f"listeners {listeners:.0f}, descriptors {fds_before} -> {fds_after}")
        if connections != 0 or listeners != 0 or fds_after > fds_before + 4:
            print("signal_chaos: FAILED: the server kept connections the clients had closed")
            return 1
        return 0
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


if __name__ == "__main__":
    sys.exit(main())
