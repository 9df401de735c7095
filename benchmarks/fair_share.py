"""One hostile and one ordinary client on the same daemon (issue 25, item 2): how long the ordinary one waits for
its findings, without and with the hostile one.

The daemon runs as one process with ``--detector-threads 2``. The hostile client (tests/hostile_load.py) is SESSIONS
producer sessions of one uid, each sending without end batches of EVENTS strided vector accesses that cost initcheck
nearly a second of CPU each (4 096 events). The ordinary client is another uid's whole session from its own process
(as root: the ``daemon`` user; else the same uid, whose share is then its session's): one kernel with 3 illegal reads,
then close. Its latency is from its first frame to the daemon's ``closed`` (its verdict, with every finding, comes
before). Prints one JSON object: the latencies alone and beside the hostile load, and the daemon's detector gauges.

    .venv/bin/python benchmarks/fair_share.py [--sessions 48] [--events 4096] [--repeats 3]
    PYTHONPATH=<another checkout> ... --daemon-source <that checkout>    # the same against another daemon's code
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from tests import other_uid
from tests.conftest import RunningDaemon, wait_for_socket
from tests.test_e2e_daemon import free_port

ROOT = Path(__file__).resolve().parent.parent
ILLEGAL_READS = 3


def start(base: Path, source: Path, port: int) -> RunningDaemon:
    sock, state, log = base / "s.sock", base / "state", base / "daemon.log"
    command = [sys.executable, "-m", "sanitizerd", "serve", "--socket", str(sock), "--state-dir", str(state),
               "--workers", "1", "--detector-threads", "2", "--drain-timeout", "2", "--log-level", "warning",
               "--metrics-addr", f"127.0.0.1:{port}"]  # fmt: skip
    with open(log, "ab") as out:
        # Its cwd too: ``-m`` puts the cwd first on the path.
        env = dict(os.environ, PYTHONPATH=str(source))
        process = subprocess.Popen(command, stdout=out, stderr=out, cwd=source, env=env)
    wait_for_socket(sock, process)
    return RunningDaemon(sock, state, log, process)


def gauges(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    wanted = ("sanitizerd_detector_threads_busy", "sanitizerd_detector_checks_waiting",
              "sanitizerd_detector_oldest_wait_seconds", "sanitizerd_detector_queue_batches")  # fmt: skip
    return {line.split()[0]: float(line.split()[1]) for line in text.splitlines() if line.startswith(wanted)}


def ordinary(daemon: RunningDaemon, job: str) -> float:
    user = other_uid.DAEMON_USER if os.geteuid() == 0 else None
    data = other_uid.producer_session(job, illegal_reads=ILLEGAL_READS)
    started = time.monotonic()
    if user is not None:
        raw = other_uid.send(user, daemon.socket, data, expect=3, wait=900, timeout=900)
    else:
        raw = _send_own(daemon.socket, data)
    elapsed = time.monotonic() - started
    answer = other_uid.replies(raw)
    assert [a["type"] for a in answer] == ["welcome", "verdict", "closed"], answer
    assert answer[1]["errors"] == ILLEGAL_READS, answer
    return round(elapsed, 2)


def _send_own(path: Path, data: bytes) -> bytes:
    import socket

    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(path))
        sock.sendall(data)
        got = b""
        while chunk := sock.recv(1 << 16):
            got += chunk
        return got


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=48)
    parser.add_argument("--events", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--daemon-source", type=Path, default=ROOT, help="the checkout whose daemon is measured")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="sd-", dir="/tmp"))
    port = free_port()
    daemon = start(base, args.daemon_source, port)
    result: dict[str, object] = {"sessions": args.sessions, "events": args.events, "detector_threads": 2}
    hostile: subprocess.Popen[str] | None = None
    try:
        other_uid.open_socket_to_all(daemon)
        result["alone_s"] = [ordinary(daemon, f"ordinary-alone-{i}") for i in range(args.repeats)]
        hostile = subprocess.Popen(
            [sys.executable, "-m", "tests.hostile_load", str(daemon.socket), "hostile", str(args.sessions),
             str(args.events)],
            cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert hostile.stdout is not None and hostile.stdout.readline().strip() == "connected"
        time.sleep(10)  # every session's queue full, every thread busy
        result["under_load"] = gauges(port)
        result["beside_hostile_s"] = [ordinary(daemon, f"ordinary-{i}") for i in range(args.repeats)]
    finally:
        if hostile is not None:
            hostile.send_signal(signal.SIGKILL)
            hostile.wait()
            if hostile.stdout is not None:
                hostile.stdout.close()
        daemon.process.send_signal(signal.SIGTERM)
        try:
            daemon.process.wait(30)
        except subprocess.TimeoutExpired:
            daemon.process.kill()
            daemon.process.wait()
        shutil.rmtree(base, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
