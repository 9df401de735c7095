"""The control plane under load, against a real daemon: a wait_job flood and a findings reply larger than a frame.

1. One connection sends ``--frames`` wait_job frames (10 MB for 300 000) and never reads: how long until the
   daemon refuses it (request_limit), and how long another client's ``sanitizerd sessions`` takes meanwhile.
2. A store holding ``--findings`` findings of ``--detail`` bytes each: how long ``sanitizerd findings`` takes to
   page through them all, and the largest page.

    .venv/bin/python benchmarks/control_plane.py --quick

Prints one JSON object last.
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

from sanitizerd.control_client import ControlClient
from sanitizerd.findings.store import FindingsStore
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.model import make_finding
from tests.conftest import sanitizerd, start_daemon, stop_daemon


def frame(message: dict[str, object]) -> bytes:
    body = msgspec.msgpack.encode(message)
    return struct.pack("<I", len(body)) + body


def flood(sock_path: Path, frames: int) -> dict[str, float]:
    asked = time.monotonic()
    sanitizerd("sessions", "--socket", str(sock_path))
    result_idle = time.monotonic() - asked  # the CLI's own start-up, for comparison
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(str(sock_path))
    sock.sendall(frame({"type": "hello", "version": 1, "role": "control"}))
    sock.recv(65536)
    data = frame({"type": "wait_job", "job": "flood"}) * frames
    refused = threading.Event()
    started = time.monotonic()
    result: dict[str, float] = {"sessions_idle_s": result_idle}

    def send() -> None:
        try:
            sock.sendall(data)
        except OSError:
            pass
        result["send_ended_s"] = time.monotonic() - started

    def read() -> None:
        got = b""
        try:
            while chunk := sock.recv(65536):
                got += chunk
                if b"request_limit" in got:
                    break
        except OSError:
            pass
        if b"request_limit" in got:
            result["refused_after_s"] = time.monotonic() - started
        refused.set()

    threads = [threading.Thread(target=send), threading.Thread(target=read)]
    for thread in threads:
        thread.start()
    asked = time.monotonic()
    listed = sanitizerd("sessions", "--socket", str(sock_path))
    result["sessions_during_flood_s"] = time.monotonic() - asked
    assert listed.returncode == 0, listed.stderr
    refused.wait(60)
    sock.close()
    for thread in threads:
        thread.join(10)
    return result


def paging(base: Path, count: int, detail: int) -> dict[str, float]:
    store = FindingsStore(base / "state" / "sanitizerd.db")
    session = store.open_session("big", uid=0)
    text = "x" * detail
    for start in range(0, count, 2000):
        store.add_findings(
            [
                make_finding("illegal_read", job="big", session=session, address=i, size=8, detail=text)
                for i in range(start, min(count, start + 2000))
            ]
        )
    store.close()
    daemon = start_daemon(base)
    try:
        started = time.monotonic()
        listed = sanitizerd("findings", "--socket", str(daemon.socket), "--job", "big", "--format", "json")
        elapsed = time.monotonic() - started
        assert len(json.loads(listed.stdout)) == count
        with ControlClient(daemon.socket) as control:
            page = control.request(m.QueryFindings(job="big"))
        return {
            "findings": count,
            "reply_bytes_unpaged": count * (detail + 300),
            "cli_all_pages_s": elapsed,
            "first_page_bytes": len(msgspec.msgpack.encode(page)),
        }
    finally:
        stop_daemon(daemon)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--frames", type=int, default=300_000)
    parser.add_argument("--findings", type=int, default=20_000)
    parser.add_argument("--detail", type=int, default=4096)
    parser.add_argument("--quick", action="store_true", help="a smaller store (5 000 findings)")
    args = parser.parse_args()
    if args.quick:
        args.findings = 5_000
    results: dict[str, object] = {}
    base = Path(tempfile.mkdtemp(prefix="sd-", dir="/tmp"))
    try:
        daemon = start_daemon(base)
        try:
            results["wait_job_flood"] = {"frames": args.frames, **flood(daemon.socket, args.frames)}
        finally:
            stop_daemon(daemon)
        shutil.rmtree(base / "state", ignore_errors=True)
        results["findings_paging"] = paging(base, args.findings, args.detail)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
