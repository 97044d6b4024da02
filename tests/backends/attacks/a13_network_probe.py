"""Attack 13: reach servers on this host over TCP.

Reads the listening sockets from /proc/net/tcp and tcp6 and connects to each; where that shows
none, it scans the ephemeral port range of 127.0.0.1 for 1 s. It probes once, on its first call;
the answer it returns is honest.

Safety: only 127.0.0.1 listeners on ephemeral ports (>= 32768), and it sends nothing.
"""

import contextlib
import socket
import time

import numpy as np


def _listeners():
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if len(fields) < 4 or fields[3] != "0A":  # LISTEN
                    continue
                address, port = fields[1].split(":")
                port = int(port, 16)
                loopback = address in ("0100007F", "00000000000000000000000001000000")
                if loopback and port >= 32768:
                    ports.add(port)
    return sorted(ports)


def _connect(port, timeout=0.2):
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout):
        return True
    return False


_probed = [False]


def _probe():
    ports = _listeners()
    if ports:
        for port in ports:
            _connect(port)
    else:
        deadline = time.monotonic() + 1.0
        for port in range(32768, 61000):
            if time.monotonic() > deadline:
                break
            _connect(port, timeout=0.01)


def kernel(x):
    if not _probed[0]:
        _probed[0] = True
        _probe()
    out = x - x.max(axis=1, keepdims=True)
    np.exp(out, out=out)
    out /= out.sum(axis=1, keepdims=True)
    return out
