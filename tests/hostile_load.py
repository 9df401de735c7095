"""A hostile client that keeps a daemon's detector threads busy: SESSIONS producer sessions of one uid, each sending,
without end, batches that cost initcheck nearly a second of CPU each (strided vector accesses: 8 blocks of 32 bytes,
repeat 255, per event), kernel after kernel. It never reads what the daemon answers; it ends when it is killed.
Used by the fair-share test (tests/test_fair_share.py) and benchmark (benchmarks/fair_share.py).

    python -m tests.hostile_load SOCKET JOB SESSIONS [EVENTS_PER_BATCH] [BATCHES_PER_KERNEL]

Prints ``connected`` once every session has sent its hello.
"""

from __future__ import annotations

import socket
import struct
import sys
import threading

import msgspec
import numpy as np

from client_shim import EventKind, Space, accesses
from sanitizerd_protocol import PROTOCOL_VERSION
from sanitizerd_protocol import messages as m

_encoder = msgspec.msgpack.Encoder()


def framed(message: m.Message) -> bytes:
    body = _encoder.encode(message)
    return struct.pack("<I", len(body)) + body


def costly_batch(events: int) -> np.ndarray:
    """initcheck's costly case: strided vector writes and reads of UB, 2 040 blocks of 32 bytes each."""
    kinds = np.where(np.arange(events) % 2 == 0, EventKind.WRITE, EventKind.READ)
    return accesses(kinds, Space.UB, 0, 32, block_num=8, block_stride=2, repeat=255, repeat_stride=16,
                    block_id=(np.arange(events) // 2) % 8)  # fmt: skip


def session(path: str, job: str, events: int, per_kernel: int, connected: threading.Barrier) -> None:
    records = np.ascontiguousarray(costly_batch(events)).view(np.uint8).data
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(path)
    sock.sendall(framed(m.Hello(version=PROTOCOL_VERSION, job=job, config=m.Config(tools=["initcheck"]))))
    connected.wait()
    kernel = 0
    try:
        while True:
            kernel += 1
            sock.sendall(framed(m.KernelBegin(kernel=kernel, name="hostile_kernel", block_dim=8)))
            batch = framed(m.Events(kernel=kernel, records=records))
            for _ in range(per_kernel):
                sock.sendall(batch)
            sock.sendall(framed(m.KernelEnd(kernel=kernel)))
    except OSError:  # the daemon ended the session (or stopped)
        return


def main() -> None:
    path, job, sessions = sys.argv[1], sys.argv[2], int(sys.argv[3])
    events = int(sys.argv[4]) if len(sys.argv) > 4 else 4096
    per_kernel = int(sys.argv[5]) if len(sys.argv) > 5 else 20
    connected = threading.Barrier(sessions + 1)
    threads = [
        threading.Thread(target=session, args=(path, job, events, per_kernel, connected), daemon=True)
        for _ in range(sessions)
    ]
    for thread in threads:
        thread.start()
    connected.wait()
    print("connected", flush=True)
    for thread in threads:
        thread.join()


if __name__ == "__main__":
    main()
