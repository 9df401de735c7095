"""What one batch costs the client to send, and what of it is counting its blocks' records (issue 13, ingest).

``Client.events`` counts each batch's records per block (the emulated per-block record buffer, ``_fits``) before
the kernel copies the batch into the socket: this times, per 65 536-event batch of ``ingest.py``'s stream, in CPU
milliseconds of this process, with a child process reading the other end of a socket pair:

- ``send``: the batch written to the socket alone (what the raw socket figure pays per batch);
- ``count+send``: the client's count (``block_keys``, ``bincount``), then the send;
- ``interleaved``: the count made chunk by chunk, each chunk sent while it is in cache.

Four batches are sent round robin (14 MiB, beyond the caches), as ``ingest.py``'s clients do.

    .venv/bin/python benchmarks/client_send.py
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time
from collections.abc import Callable

import numpy as np

from benchmarks.ingest import ClientPlan, build_batch
from sanitizerd_protocol.records import block_keys

BATCH = 65536


def _reader(sock: socket.socket) -> None:
    view = memoryview(bytearray(1 << 20))
    while sock.recv_into(view):
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=600, help="batches per figure [600]")
    parser.add_argument("--chunk", type=int, default=8192, help="events per chunk of the interleaved count [8192]")
    args = parser.parse_args()
    plan = ClientPlan(0, "", "j", BATCH, 16, 1, 1.0, 4, 4, 32 << 20, 1, ())
    rng = np.random.default_rng(1)
    pool = [build_batch(plan, rng, 1 + i * BATCH) for i in range(plan.pool)]
    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        ours.close()
        _reader(theirs)
        os._exit(0)
    theirs.close()
    keys = np.empty(BATCH, dtype=np.uint32)

    def send(events: np.ndarray) -> None:
        ours.sendall(events.view(np.uint8).data)

    def count_send(events: np.ndarray) -> None:
        np.bincount(block_keys(events))
        send(events)

    def interleaved(events: np.ndarray) -> None:
        raw, step = events.view(np.uint8).data, args.chunk
        for lo in range(0, events.size, step):
            block_keys(events[lo : lo + step], out=keys[lo : lo + step])
            ours.sendall(raw[lo * events.itemsize : (lo + step) * events.itemsize])
        np.bincount(keys[: events.size])

    def timed(fn: Callable[[np.ndarray], None]) -> float:
        for i in range(2 * plan.pool):
            fn(pool[i % plan.pool])
        started = time.process_time()
        for i in range(args.batches):
            fn(pool[i % plan.pool])
        return (time.process_time() - started) / args.batches * 1e3

    figures: dict[str, list[float]] = {"send": [], "count+send": [], "interleaved": []}
    for _ in range(3):  # alternating, so that load falls on each alike
        for name, fn in (("send", send), ("count+send", count_send), ("interleaved", interleaved)):
            figures[name].append(round(timed(fn), 3))
    ours.close()
    os.waitpid(pid, 0)
    for name, values in figures.items():
        print(f"{name:12s} CPU ms per batch: {', '.join(map(str, values))} (best {min(values)})")
    print(json.dumps({name: min(values) for name, values in figures.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
