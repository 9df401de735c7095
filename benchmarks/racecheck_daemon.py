"""racecheck through a real daemon: the CPU and the page faults of the daemon's processes per kernel launch.

One client sends ``benchmarks/racecheck.py``'s kernel (8 blocks of ``--iterations`` tiles, in 65 536-event
batches) ``--launches`` times to a fresh ``sanitizerd serve`` with racecheck, waiting for each launch's verdict.
Per launch it reads, from /proc, the user + system CPU and the minor page faults of the daemon and its worker
processes; /proc counts CPU in clock ticks (10 ms here), so the mean over the launches is the figure to read.
The first ``--warm`` launches are left out (the daemon's imports, its heap's first growth). In-process figures
(``racecheck.py``) leave out what the daemon adds (the socket, framing, sessions) and depend on how that
process's heap was laid out (a launch's temporaries given back to the kernel at its end are faulted in afresh by
the next: ``sanitizerd/allocator.py``); this is what a launch costs the daemon.

    .venv/bin/python benchmarks/racecheck_daemon.py

The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from racecheck import BATCH, iterations_stream

from client_shim.client import Client
from client_shim.transport import ClientError
from sanitizerd.control_client import ControlClient
from sanitizerd_protocol import messages as m

_TICKS = os.sysconf("SC_CLK_TCK")


def _tree(root: int) -> list[int]:
    """``root`` and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(entry))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo += children.get(pid, [])
    return tree


def _usage(root: int) -> tuple[float, int]:
    """CPU seconds (user + system) and minor faults of ``root``'s processes so far."""
    cpu, faults = 0.0, 0
    for pid in _tree(root):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        cpu += (int(fields[11]) + int(fields[12])) / _TICKS
        faults += int(fields[7])
    return cpu, faults


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=5600, help="tiles per block [5600]")
    parser.add_argument("--launches", type=int, default=25, help="kernel launches sent [25]")
    parser.add_argument("--warm", type=int, default=3, help="first launches left out [3]")
    args = parser.parse_args()
    stream = iterations_stream(8, args.iterations)
    with tempfile.TemporaryDirectory() as scratch:
        socket_path = str(Path(scratch) / "sanitizerd.sock")
        command = [sys.executable, "-m", "sanitizerd", "serve", "--socket", socket_path]
        daemon = subprocess.Popen([*command, "--state-dir", f"{scratch}/state", "--log-level", "warning"])
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    ControlClient(socket_path, timeout=5).close()
                    break
                except ClientError:
                    if time.monotonic() > deadline or daemon.poll() is not None:
                        raise SystemExit("the daemon did not start") from None
                    time.sleep(0.05)
            client = Client(socket_path, job="racecheck", config=m.Config(tools=["racecheck"]), batch_events=BATCH)
            client.device_summary("Ascend910B1", block_num=8, device=0)
            cpu, faults, findings = [], [], 0
            for _ in range(args.launches):
                cpu_before, faults_before = _usage(daemon.pid)
                kernel = client.kernel_begin("add_custom", 8)
                for lo in range(0, stream.size, BATCH):
                    client.events(kernel, stream[lo : lo + BATCH])
                client.kernel_end(kernel)
                verdict = client.wait_kernel(kernel, timeout=300)
                if verdict.events != stream.size:
                    raise SystemExit(f"the daemon checked {verdict.events} events of {stream.size}")
                findings += verdict.errors + verdict.warnings
                cpu_after, faults_after = _usage(daemon.pid)
                cpu.append(cpu_after - cpu_before)
                faults.append(faults_after - faults_before)
            client.close(timeout=60)
        finally:
            daemon.terminate()
            daemon.wait()
    cpu, faults = cpu[args.warm :], faults[args.warm :]
    print(json.dumps({
        "events": int(stream.size), "launches": len(cpu), "findings": findings,
        "daemon_cpu_ms_mean": round(1000 * statistics.fmean(cpu), 1),
        "daemon_cpu_ms_median": round(1000 * statistics.median(cpu)),
        "events_per_daemon_cpu_s": round(stream.size / max(statistics.fmean(cpu), 1e-3)),
        "minor_faults_median": int(statistics.median(faults)), "minor_faults_max": max(faults),
        "cpu_tick_ms": round(1000 / _TICKS),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
