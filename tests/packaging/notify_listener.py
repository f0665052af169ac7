#!/usr/bin/env python3
"""The service manager's end of sd_notify (tests/packaging/package_test.sh): binds an AF_UNIX
datagram socket at argv[1], writable by any user, and appends every datagram it receives to
argv[2], one line per state, until killed."""
import os
import socket
import sys

path, out = sys.argv[1], sys.argv[2]
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sock.bind(path)
os.chmod(path, 0o666)
with open(out, "a", buffering=1) as states:
    states.write("BOUND\n")
    while True:
        data = sock.recv(4096).decode(errors="replace")
        for line in data.split("\n"):
            states.write(line + "\n")
