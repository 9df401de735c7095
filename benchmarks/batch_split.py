"""What splitting a client's batch by pieces costs and buys (issue 25, item 2): the split's time on a common batch
(65 536 contiguous accesses, one part) and on a costly one (65 536 scattered accesses of 8 x 255 blocks); and
initcheck's thread CPU time on the costly batch checked whole, against its longest part checked alone: what one
check may hold a detector thread for, between which the fair share and the kernel's CPU budget act.

    PYTHONPATH=. .venv/bin/python benchmarks/batch_split.py
"""

from __future__ import annotations

import time
import timeit

import numpy as np

from client_shim import EventKind, Space, accesses
from sanitizerd.detectors.base import KernelLaunch
from sanitizerd.sessions.work import split_by_pieces
from tests.detector_helpers import make_detector, stream

COUNT = 65_536


def costly() -> np.ndarray:
    address = np.arange(COUNT, dtype=np.uint64) * 64 + (1 << 32)
    pattern = dict(block_num=8, block_stride=3, repeat=255, repeat_stride=7)
    written = accesses(EventKind.WRITE, Space.GM, address, 2, **pattern)
    return stream(written, accesses(EventKind.READ, Space.GM, address, 2, **pattern))


def initcheck_seconds(batches: list[np.ndarray]) -> list[float]:
    detector = make_detector("initcheck")
    detector.kernel_begin(KernelLaunch(kernel=1, name="k", block_dim=8, kernel_type="aiv"))
    spent = []
    for batch in batches:
        started = time.thread_time()
        detector.check(batch)
        spent.append(time.thread_time() - started)
    detector.kernel_end()
    return spent


def main() -> None:
    common = accesses(EventKind.READ, Space.GM, np.arange(COUNT, dtype=np.uint64) * 256, 32, block_num=8)
    heavy = costly()
    for name, events in (("common", common), ("costly", heavy)):
        seconds = min(timeit.repeat(lambda events=events: split_by_pieces(events), number=20, repeat=5)) / 20
        print(f"split of a {name} batch of {events.size} events: {seconds * 1e3:.2f} ms, "
              f"{len(split_by_pieces(events))} part(s)")  # fmt: skip
    parts = split_by_pieces(heavy)
    whole = initcheck_seconds([heavy])[0]
    each = initcheck_seconds(parts)
    print(f"initcheck on the costly batch: whole {whole:.1f} s in one check; in {len(parts)} parts "
          f"{sum(each):.1f} s, the longest part {max(each):.2f} s")  # fmt: skip


if __name__ == "__main__":
    main()
