"""Hostile connections against a real daemon at its default limits: what they make it hold.

Three attacks from issue 10, each against a fresh daemon started as a host would start it from a shell (soft fd
limit 1024, which the daemon raises at start):

* ``unfinished``: N sessions each send most of a frame of SIZE bytes and stop; the daemon's peak RSS, and how the
  sessions ended (``buffer_limit`` past the per-uid budget, ``frame_timeout`` for the rest);
* ``idle``: M connections that never say hello; how each ended and the seconds until the daemon served again;
* ``strings``: a 20 MB log text and 200 kernels named with 1 MiB: the growth of the daemon's log and store.

    .venv/bin/python benchmarks/hostile_connections.py [--sessions 40] [--size 60000000] [--idle 1100]

Prints one JSON object per attack.
"""

from __future__ import annotations

import argparse
import json
import resource
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import msgspec

from client_shim import Client

ROOT = Path(__file__).resolve().parent.parent

# The shape its figures were taken in (serve's default is a worker per usable core).
SERVE = [sys.executable, "-m", "sanitizerd", "serve", "--workers", "1"]


def frame(message: dict[str, object]) -> bytes:
    body = msgspec.msgpack.encode(message)
    return struct.pack("<I", len(body)) + body


def last_reason(sock: socket.socket) -> str:
    data = b""
    while True:
        try:
            chunk = sock.recv(1 << 16)
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    last: dict[str, object] = {}
    while len(data) >= 4:
        (length,) = struct.unpack_from("<I", data)
        last = msgspec.msgpack.decode(data[4 : 4 + length])
        data = data[4 + length :]
    return str(last.get("reason") or last.get("type"))


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start(base: Path, *extra: str) -> subprocess.Popen[bytes]:
    def host_limits() -> None:
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))

    sock = base / "s.sock"
    log = open(base / "daemon.log", "ab")  # the daemon writes it for its whole life
    process = subprocess.Popen(
        [*SERVE, "--socket", str(sock), "--state-dir", str(base / "st"), *extra],
        stdout=log,
        stderr=log,
        preexec_fn=host_limits,
        cwd=ROOT,
    )
    deadline = time.monotonic() + 30
    while not sock.exists():
        if time.monotonic() > deadline or process.poll() is not None:
            raise SystemExit("the daemon did not start")
        time.sleep(0.02)
    return process


def connect(base: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(120)
    sock.connect(str(base / "s.sock"))
    return sock


def unfinished(base: Path, sessions: int, size: int) -> dict[str, object]:
    process = start(base)
    reasons: list[str] = []
    chunk = b"\0" * (1 << 20)

    def attack() -> None:
        with connect(base) as sock:
            sock.sendall(frame({"type": "hello", "version": 1, "job": "unfinished"}))
            try:
                sock.sendall(struct.pack("<I", size))
                for _ in range(size // len(chunk)):
                    sock.sendall(chunk)
            except OSError:
                pass
            reasons.append(last_reason(sock))

    started = time.monotonic()
    threads = [threading.Thread(target=attack) for _ in range(sessions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    result = {
        "attack": "unfinished",
        "sessions": sessions,
        "frame_bytes": size,
        "ended": dict(Counter(reasons)),
        "seconds": round(time.monotonic() - started, 1),
        "daemon_peak_rss_mib": round(peak_rss_mib(process.pid)),
    }
    process.terminate()
    process.wait()
    return result


def idle(base: Path, count: int) -> dict[str, object]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, count + 256)), hard))
    process = start(base)
    started = time.monotonic()
    socks = [connect(base) for _ in range(count)]
    reasons = Counter(last_reason(sock) for sock in socks)
    for sock in socks:
        sock.close()
    with Client(base / "s.sock", job="after", resume_buffer=0) as client:
        client.malloc(0x1000, 256)
    result = {
        "attack": "idle",
        "connections": count,
        "ended": dict(reasons),
        "seconds_until_served_again": round(time.monotonic() - started, 1),
        "daemon_alive": process.poll() is None,
    }
    process.terminate()
    process.wait()
    return result


def strings(base: Path) -> dict[str, object]:
    process = start(base)
    log = base / "daemon.log"
    log_before = log.stat().st_size
    huge = "n" * (1 << 20)
    with Client(base / "s.sock", job="strings", timeout=120, resume_buffer=0) as client:
        client.log("x" * 20_000_000)
        client.location(huge + "file", 1, function=huge + "function")
        for _ in range(200):
            kernel = client.kernel_begin(huge + "kernel", 1)
            client.kernel_end(kernel)
            client.wait_kernel(kernel, timeout=120)
    store = sum(p.stat().st_size for p in (base / "st").iterdir() if p.is_file())
    result = {
        "attack": "strings",
        "log_text_bytes": 20_000_000,
        "kernels_named_1MiB": 200,
        "daemon_log_growth_bytes": log.stat().st_size - log_before,
        "store_bytes": store,
    }
    process.terminate()
    process.wait()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--size", type=int, default=60_000_000)
    parser.add_argument("--idle", type=int, default=1100)
    args = parser.parse_args()
    for attack in (
        lambda base: unfinished(base, args.sessions, args.size),
        lambda base: idle(base, args.idle),
        strings,
    ):
        with tempfile.TemporaryDirectory(prefix="sd-", dir="/tmp") as base:
            print(json.dumps(attack(Path(base))), flush=True)


if __name__ == "__main__":
    main()
