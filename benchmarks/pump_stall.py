"""How long one client's flood of small frames holds up another client (issue 10): a daemon, one connection that
writes N tiny frames (``log`` lines, or host loads of an unmapped address) in one go, and one client timing kernel
round trips (begin, one event, end, verdict) meanwhile. Prints the round trips' median and longest.

    PYTHONPATH=. .venv/bin/python benchmarks/pump_stall.py [--frames 400000] [--kind log|load] [--seconds 6]
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import struct
import tempfile
import threading
import time
from pathlib import Path

import msgspec

from client_shim import Client, EventKind, Space, accesses
from tests.conftest import start_daemon, stop_daemon


def frame(**message: object) -> bytes:
    body = msgspec.msgpack.encode(message)
    return struct.pack("<I", len(body)) + body


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=400_000)
    parser.add_argument("--kind", choices=("log", "load"), default="log")
    parser.add_argument("--seconds", type=float, default=6.0)
    args = parser.parse_args()
    one = frame(type="log", text="x") if args.kind == "log" else frame(type="host_op", op="load", address=16, size=1)
    base = Path(tempfile.mkdtemp(prefix="sd-", dir="/tmp"))
    daemon = start_daemon(base)
    try:

        def flood() -> None:
            with socket.socket(socket.AF_UNIX) as sock:
                sock.connect(str(daemon.socket))
                sock.sendall(frame(type="hello", version=1, job="flood") + one * args.frames + frame(type="close"))
                while sock.recv(1 << 16):
                    pass

        flooder = threading.Thread(target=flood)
        round_trips = []
        with Client(daemon.socket, job="probe", resume_buffer=0) as client:
            client.malloc(0x1000, 256)
            flooder.start()
            end = time.monotonic() + args.seconds
            while time.monotonic() < end:
                started = time.monotonic()
                kernel = client.kernel_begin("probe", 1)
                client.events(kernel, accesses(EventKind.READ, Space.GM, 0x1000, 32))
                client.kernel_end(kernel)
                client.wait_kernel(kernel, timeout=60)
                round_trips.append(time.monotonic() - started)
        flooder.join()
        round_trips.sort()
        print(json.dumps({"frames": args.frames, "kind": args.kind, "round_trips": len(round_trips),
                          "median_s": round(round_trips[len(round_trips) // 2], 4),
                          "longest_s": round(round_trips[-1], 3)}))  # fmt: skip
    finally:
        stop_daemon(daemon)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
