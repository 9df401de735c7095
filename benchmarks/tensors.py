"""What local tensors cost memcheck (issue 26, item 1): one batch of 65 536 UB accesses of 8 vector blocks checked
with no tensor declared (today's path), with each block's tensors declared once up front, with a declaration per
tile that hands the same buffer out again (AscendC's queues: no change to the table), with a new tensor per tile
(one table change, one lookup step, per four accesses: the worst a real kernel does), and with the batch as
msSanitizer's mstx annotations send it (an operand per access). Best of five, milliseconds per batch.

    PYTHONPATH=. .venv/bin/python benchmarks/tensors.py
"""

from __future__ import annotations

import time

import numpy as np

from client_shim import EventKind, Space, accesses
from client_shim.events import TENSOR_OPERAND_WRITE, make_events, tensors
from sanitizerd.detectors.base import KernelLaunch
from tests.detector_helpers import make_detector

COUNT, BLOCKS, TILE = 65_536, 8, 1024


def writes(n: int, block: np.ndarray, address: np.ndarray) -> np.ndarray:
    return accesses(EventKind.WRITE, Space.UB, address, 32, block_num=8, repeat=4, repeat_stride=8, block_id=block)


def interleave(*columns: np.ndarray) -> np.ndarray:
    """Rows taken in turn from each column (all of one length): declaration, access, access, ..."""
    out = np.empty(sum(c.size for c in columns), dtype=columns[0].dtype)
    for i, column in enumerate(columns):
        out[i :: len(columns)] = column
    return out


def batches() -> dict[str, np.ndarray]:
    i = np.arange(COUNT)
    block = i % BLOCKS
    slot = (i // BLOCKS) % 64
    plain = writes(COUNT, block, slot * TILE)
    upfront = np.concatenate([tensors(Space.UB, np.arange(64) * TILE, TILE, block_id=b) for b in range(BLOCKS)])
    n = COUNT // 4
    same = tensors(Space.UB, 0, TILE, block_id=np.arange(n) % BLOCKS)
    new = tensors(Space.UB, (np.arange(n) % 64) * TILE, TILE, block_id=np.arange(n) % BLOCKS)
    quarter = [writes(n, np.arange(n) % BLOCKS, ((np.arange(n) % 64) * TILE)) for _ in range(3)]
    same_access = [writes(n, np.arange(n) % BLOCKS, np.zeros(n, dtype=np.uint64)) for _ in range(3)]
    operand = tensors(Space.UB, slot * TILE, TILE, block_id=block, mode=TENSOR_OPERAND_WRITE)
    annotated = make_events(kind=EventKind.TENSOR_WRITE, space=Space.UB, address=slot * TILE, block_size=32,
                            block_num=8, repeat=4, repeat_stride=8, block_id=block)  # fmt: skip
    out = {
        "no tensors": plain,
        "tensors up front": np.concatenate([upfront, plain]),
        "same buffer per tile": interleave(same, *same_access),
        "new tensor per tile": interleave(new, *quarter),
        "mstx operands": interleave(operand, annotated),
    }
    for events in out.values():
        events["serial"] = np.arange(events.size) // (2 if events is out.get("mstx operands") else 1)
    out["mstx operands"]["serial"] = np.arange(out["mstx operands"].size) // 2
    return out


def main() -> None:
    for name, batch in batches().items():
        best = float("inf")
        for _ in range(5):
            memcheck = make_detector("memcheck")
            memcheck.kernel_begin(KernelLaunch(kernel=1, name="k", block_dim=BLOCKS, kernel_type="aiv"))
            start = time.perf_counter()
            memcheck.check(batch)
            best = min(best, time.perf_counter() - start)
            found = memcheck.kernel_end()
        print(f"{name:24s} {batch.size:6d} events  {best * 1e3:8.2f} ms  {len(found)} finding(s)")


if __name__ == "__main__":
    main()
