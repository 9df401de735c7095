"""The metrics endpoint under attack: /healthz latency with idle connections held open on the metrics port and on
the main socket, the daemon's fds and threads meanwhile, and its RSS while connections hold huge request headers.

    python benchmarks/metrics_endpoint.py [--idle 600] [--probes 50]

Starts a real daemon under a host's default soft fd limit (1024), as tests/test_hostile.py does.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path


def _host_limits() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _probe_ms(port: int, probes: int) -> tuple[float, float]:
    """Median and largest /healthz round trip, in milliseconds."""
    times = []
    for _ in range(probes):
        started = time.perf_counter()
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10).read()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), max(times)


def _counts(pid: int) -> str:
    return f"fds {len(os.listdir(f'/proc/{pid}/fd'))}, threads {len(os.listdir(f'/proc/{pid}/task'))}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--idle", type=int, default=600, help="idle connections to hold open")
    parser.add_argument("--probes", type=int, default=50)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="sd-", dir="/tmp"))
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    sock = base / "s.sock"
    daemon = subprocess.Popen(
        [sys.executable, "-m", "sanitizerd", "serve", "--socket", str(sock), "--state-dir", str(base / "state"),
         "--metrics-addr", f"127.0.0.1:{port}", "--handshake-timeout", "30", "--workers", "1"],
        stderr=subprocess.DEVNULL, preexec_fn=_host_limits,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        pid = daemon.pid
        print(f"idle daemon: {_counts(pid)}, RSS {_rss(pid) >> 20} MiB")
        median, worst = _probe_ms(port, args.probes)
        print(f"/healthz, no other connection: median {median:.2f} ms, max {worst:.2f} ms")

        held = [socket.create_connection(("127.0.0.1", port)) for _ in range(args.idle)]
        time.sleep(0.5)
        median, worst = _probe_ms(port, args.probes)
        print(f"/healthz, {args.idle} idle connections on the metrics port: median {median:.2f} ms, "
              f"max {worst:.2f} ms; daemon {_counts(pid)}")  # fmt: skip
        for connection in held:
            connection.close()

        flood = []
        for _ in range(min(args.idle, 800)):
            unix = socket.socket(socket.AF_UNIX)
            unix.connect(str(sock))
            flood.append(unix)
        time.sleep(0.5)
        median, worst = _probe_ms(port, args.probes)
        print(f"/healthz, {len(flood)} silent connections on the main socket: median {median:.2f} ms, "
              f"max {worst:.2f} ms")  # fmt: skip
        for unix in flood:
            unix.close()

        before = _rss(pid)
        line = b"X-Big: " + b"a" * (60 << 10) + b"\r\n"
        big = []
        for _ in range(16):
            connection = socket.create_connection(("127.0.0.1", port))
            with contextlib.suppress(OSError):
                connection.sendall(b"GET /healthz HTTP/1.0\r\n" + line * 99)
            big.append(connection)
        time.sleep(0.5)
        print(f"16 connections holding 99 header lines of 60 KiB: RSS +{(_rss(pid) - before) / (1 << 20):.1f} MiB")
        for connection in big:
            connection.close()
    finally:
        daemon.terminate()
        daemon.wait(20)


if __name__ == "__main__":
    main()
