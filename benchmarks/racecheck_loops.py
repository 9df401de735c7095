"""racecheck's two per-record compiled loops alone, in ns a record: ``select`` (which records are held, one pass over
every batch) and ``mirror`` (a block compared with the reference block as it arrives), on the blocks of
``benchmarks/racecheck.py``'s kernel.

A batch of 65 536 records of the kernel's second block is selected, and compared with its first block (offsets not
yet learned, as at a block's start), ``--repeat`` times each: "hot" with the batch and the reference in cache from
the call before, "cold" after writing 96 MiB elsewhere (more than this host's last-level cache). The least time of
each is reported, after as many calls to warm up. The loops are those of the tree on ``PYTHONPATH``: compare trees
by running it in each, more than once, as one process may be slower in every figure than the next (up to 1.8x on
the 2-core machine: where its memory was placed).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/racecheck_loops.py

The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import numpy as np
from racecheck import BATCH, compiled_loops, iterations_stream

from client_shim.events import EventKind, Space
from sanitizerd.detectors import _race_columns
from sanitizerd.detectors.racecheck import select_native


def _least_ns(call: Callable[[], object], records: int, repeat: int, evict: np.ndarray | None) -> float:
    best = float("inf")
    for _ in range(repeat):
        if evict is not None:
            evict += 1
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best / records * 1e9


def main() -> None:
    args, native = compiled_loops(__doc__)
    stream = iterations_stream(2, args.iterations)
    block = stream["block_id"]
    reference = np.ascontiguousarray(stream[block == 0])
    reference = reference[reference["kind"] != EventKind.BLOCK_FINISH]  # not held
    batch = np.ascontiguousarray(stream[block == 1][:BATCH])
    # As mirror_from classes them: every record here an access or a sync event, no extent past what it vouches for.
    is_access = reference["kind"] <= EventKind.WRITE
    ref_class = np.where(is_access, _race_columns._REF_ACCESS, _race_columns._REF_SYNC).astype(np.uint8)
    access = np.ascontiguousarray(batch["kind"] <= EventKind.WRITE)
    key = (int(batch["block_type"][0]) << 16) | int(batch["block_id"][0])
    keys, kinds = np.empty(batch.size, np.uint32), np.empty(batch.size, np.uint8)
    masks = (_race_columns._ACCESS_MASK, _race_columns._SYNC_MASK)

    def mirror() -> tuple:
        return native.mirror(batch, None, access, 0, key, keys, kinds, reference, ref_class, *masks, int(Space.GM),
                             (0, 0, 0, 0, 0, 0, 0))  # fmt: skip

    stop = mirror()[0]
    if stop != batch.size:
        raise SystemExit(f"the second block matched the first only up to record {stop}")
    evict = np.zeros(96 << 17, dtype=np.uint64)  # 96 MiB
    figures = {}
    for name, call in (("select", lambda: select_native(native, batch)), ("mirror", mirror)):
        _least_ns(call, batch.size, args.repeat, None)  # warm up: the clock's speed, the allocator's pools
        figures[name] = {
            "hot_ns_per_record": round(_least_ns(call, batch.size, args.repeat, None), 2),
            "cold_ns_per_record": round(_least_ns(call, batch.size, args.repeat, evict), 2),
        }
    print(json.dumps({"records": int(batch.size), "reference": int(reference.size), **figures}))


if __name__ == "__main__":
    main()
