"""Soak: many concurrent sessions streaming for minutes; the daemon's RSS over time (flat: no leak).

Starts a real daemon (memcheck only) and, in this process, N asyncio clients speaking the protocol through the
sans-I/O ``Connection`` (threads per client would not scale to a thousand here). Every client holds its
session open the whole time and loops: kernel_begin, a few event batches, kernel_end, wait for the verdict,
pause. Every ``--sample`` seconds the daemon's RSS and the events checked so far are recorded.

    .venv/bin/python benchmarks/soak.py --sessions 1000 --minutes 3

Prints one line per sample and one JSON object last (RSS at each sample, its growth over the second half of
the run, throughput).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from client_shim.events import EventKind, Pipe, Space, accesses
from sanitizerd_protocol import Connection, Role
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.connection import NEED_DATA

GM = 0x12C0C0000000


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def batch(n: int, block: int) -> bytes:
    events = accesses(EventKind.READ, Space.GM, GM + 64 * (np.arange(n) % 1024), 64, pipe=Pipe.MTE2, block_id=block)
    return events.tobytes()


class SoakClient:
    def __init__(self, path: str, index: int, events_per_batch: int) -> None:
        self.path, self.index, self.events_per_batch = path, index, events_per_batch
        self.conn = Connection(Role.CLIENT)
        self.kernels = 0

    async def _receive(self, reader: asyncio.StreamReader) -> m.Message:
        while True:
            event = self.conn.next_event()
            if event is not NEED_DATA:
                return event  # type: ignore[return-value]
            self.conn.receive_data(await reader.read(65536))

    async def run(self, stop: asyncio.Event, counter: list[int]) -> None:
        reader, writer = await asyncio.open_unix_connection(self.path)
        writer.write(self.conn.send(m.Hello(version=1, job=f"soak-{self.index % 50}", pid=os.getpid())))
        await self._receive(reader)  # welcome
        writer.write(self.conn.send(m.DeviceSummary(chip="Ascend910B1", block_num=1, device=0)))
        host = m.HostOp(op="malloc", address=GM, size=1 << 20)
        writer.write(self.conn.send(host))
        records = batch(self.events_per_batch, self.index % 48)
        while not stop.is_set():
            self.kernels += 1
            kernel = self.kernels
            writer.write(self.conn.send(m.KernelBegin(kernel=kernel, name="soak", block_dim=48)))
            for _ in range(4):
                writer.write(self.conn.send(m.Events(kernel=kernel, records=memoryview(records))))
                await writer.drain()  # backpressure: the daemon reads as fast as it checks
            writer.write(self.conn.send(m.KernelEnd(kernel=kernel)))
            await writer.drain()
            verdict = await self._receive(reader)
            assert isinstance(verdict, m.Verdict), verdict
            counter[0] += 4 * self.events_per_batch
            await asyncio.sleep(0.5)
        writer.write(self.conn.send(m.Close()))
        await writer.drain()
        writer.close()


async def soak(path: str, daemon_pid: int, sessions: int, minutes: float, sample: float, events: int) -> dict:
    stop = asyncio.Event()
    counter = [0]
    clients = [SoakClient(path, i, events) for i in range(sessions)]
    tasks = [asyncio.create_task(c.run(stop, counter)) for c in clients]
    started = time.monotonic()
    samples = []
    while time.monotonic() - started < minutes * 60:
        await asyncio.sleep(sample)
        row = {"t_s": round(time.monotonic() - started), "rss_mib": round(rss_mib(daemon_pid), 1), "events": counter[0]}
        samples.append(row)
        print(json.dumps(row), flush=True)
        failed = [t for t in tasks if t.done() and t.exception()]
        if failed:
            raise failed[0].exception()  # type: ignore[misc]
    stop.set()
    await asyncio.gather(*tasks)
    elapsed = time.monotonic() - started
    half = [s["rss_mib"] for s in samples[len(samples) // 2 :]]
    return {
        "sessions": sessions,
        "seconds": round(elapsed),
        "events_checked": counter[0],
        "events_per_s": round(counter[0] / elapsed),
        "kernels": sum(c.kernels for c in clients),
        "rss_mib": [s["rss_mib"] for s in samples],
        "rss_growth_second_half_mib": round(half[-1] - half[0], 1) if len(half) > 1 else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--sample", type=float, default=10.0, help="seconds between RSS samples")
    parser.add_argument("--events", type=int, default=1024, help="events per batch (4 batches per kernel)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="soak-", dir="/tmp") as tmp:
        sock = Path(tmp) / "s.sock"
        daemon = subprocess.Popen(
            [sys.executable, "-m", "sanitizerd", "serve", "--socket", str(sock), "--state-dir", str(Path(tmp) / "st"),
             "--log-level", "warning", "--workers", "1", "--max-sessions", str(args.sessions + 24),
             # every session here is this uid's
             "--max-sessions-per-uid", str(args.sessions + 24), "--max-connections-per-uid", str(args.sessions + 64)],
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 20
            while not sock.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            result = asyncio.run(soak(str(sock), daemon.pid, args.sessions, args.minutes, args.sample, args.events))
            result["daemon_exit"] = None
        finally:
            daemon.terminate()
            code = daemon.wait(30)
    result["daemon_exit"] = code
    print(json.dumps(result))


if __name__ == "__main__":
    main()
