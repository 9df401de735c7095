"""Host operations and unused-memory tracking at scale (issue 10): the detectors called directly, one process.

* ``malloc_store``: N allocations, each followed by a store into it (alternating, as a program filling its
  buffers one by one), through memcheck (with check_unused_memory) and initcheck; the time per operation
  should not grow with the number of allocations (it used to: 20 000 operations took 54 s in a daemon).
* ``scattered``: batches of 65 536 one-byte GM writes at random even addresses of one 4 GiB allocation, through
  memcheck with check_unused_memory; the time of the first and of the last batches, and the ranges held.

    .venv/bin/python benchmarks/host_ops.py --allocations 10000 --batches 20

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import numpy as np

from client_shim.events import EventKind, Space, accesses
from sanitizerd.chips import chip_named
from sanitizerd.detectors import DETECTORS
from sanitizerd.detectors.base import KernelLaunch, SessionContext
from sanitizerd_protocol.messages import Config, HostOp


def detector(tool: str, unused: bool = False) -> object:
    config = Config(tools=[tool], check_unused_memory=unused)
    context = SessionContext(job="bench", session=1, pid=1, device=0, chip=chip_named("910B1"), config=config)
    return DETECTORS[tool](context)


def malloc_store(tool: str, allocations: int) -> dict[str, float]:
    d = detector(tool, unused=True)
    times = []
    for half in (allocations // 2, allocations - allocations // 2):
        started = time.perf_counter()
        for _ in range(half):
            address = 0x100000 + next(_serial) * 0x1000
            d.host_op(HostOp(op="malloc", address=address, size=512))  # type: ignore[attr-defined]
            d.host_op(HostOp(op="store", address=address, size=64))  # type: ignore[attr-defined]
        times.append(time.perf_counter() - started)
    return {"seconds": round(sum(times), 2), "first_half_s": round(times[0], 2), "second_half_s": round(times[1], 2)}


def scattered(batches: int, per_batch: int = 65536) -> dict[str, float]:
    d = detector("memcheck", unused=True)
    base, size = 0x10000000, 1 << 32
    d.host_op(HostOp(op="malloc", address=base, size=size))  # type: ignore[attr-defined]
    d.kernel_begin(KernelLaunch(kernel=1, name="scatter", block_dim=1, kernel_type="aiv"))  # type: ignore[attr-defined]
    rng = np.random.default_rng(1)
    times = []
    for _ in range(batches):
        events = accesses(EventKind.WRITE, Space.GM, base + rng.integers(0, size // 2, per_batch) * 2, 1)
        started = time.perf_counter()
        d.check(events)  # type: ignore[attr-defined]
        times.append(time.perf_counter() - started)
    held = len(d.written)  # type: ignore[attr-defined]
    d.kernel_end()  # type: ignore[attr-defined]
    return {
        "first_batch_s": round(times[0], 3), "last_batches_s": round(float(np.mean(times[-3:])), 3),
        "ranges_held": held, "writes": batches * per_batch,
    }  # fmt: skip


_serial = iter(range(1 << 62))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--allocations", type=int, default=10000, help="malloc+store pairs per detector")
    parser.add_argument("--batches", type=int, default=20, help="batches of 65 536 scattered one-byte writes")
    args = parser.parse_args()
    result: dict[str, object] = {"allocations": args.allocations, "operations": 2 * args.allocations}
    for tool in ("memcheck", "initcheck"):
        result[f"{tool}_malloc_store"] = malloc_store(tool, args.allocations)
    result["scattered"] = scattered(args.batches)
    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
