"""memcheck alone, in this process, on strided x8 vector-style accesses (issue 29's regression): every access is 8
blocks of 32 B, ``block_stride`` 1-2, ``repeat`` 1-8, ``repeat_stride`` 8-16, half GM (MTE2 reads, MTE3 writes) and
half UB, 40 % writes, each of 48 blocks writing random places of its own slice of four 32 MiB buffers. Unlike
``ingest.py``'s stream, GM writes are strided too (``--gm-writes strided``, the default: half of them scatter their
blocks, so stomping takes them as 8-64 separate pieces; ``scattered``: all of them, past the 2**18 pieces a batch
lists at once); ``--gm-writes contiguous`` is ingest's stream.

    .venv/bin/python benchmarks/strided_memcheck.py
    /path/to/old/checkout/.venv/bin/python benchmarks/strided_memcheck.py   # that checkout's sanitizerd

The stream is made with numpy alone from a fixed seed, so every checkout sees the same events. Prints events per
CPU-second (best of ``--sittings`` sittings of ``--kernels`` kernels of 16 batches of 65 536 events, after one
warm-up kernel), the findings' count (0: the stream is valid) and, with ``--profile``, cProfile's top functions.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import numpy as np

from sanitizerd.chips import chip_named
from sanitizerd.detectors import create_detectors
from sanitizerd.detectors.base import KernelLaunch, SessionContext

try:
    from sanitizerd_protocol.messages import Config, HostOp
    from sanitizerd_protocol.records import EVENT_DTYPE, BlockType, EventKind, Pipe, Space
except ImportError:  # checkouts before issue 27 moved the wire to its own package
    from sanitizerd.protocol.messages import Config, HostOp  # type: ignore[no-redef]
    from sanitizerd.protocol.records import EVENT_DTYPE, BlockType, EventKind, Pipe, Space  # type: ignore[no-redef]

BATCH, BATCHES_PER_KERNEL, BLOCK_DIM, POOL = 65536, 16, 48, 4
ALLOCATIONS, ALLOCATION_BYTES, UB_BYTES = 4, 32 << 20, 192 << 10
BASES = 0x10_0000_0000 + np.arange(ALLOCATIONS, dtype=np.uint64) * np.uint64(64 << 20)


def build_batch(rng: np.random.Generator, serial0: int, gm_writes: str) -> np.ndarray:
    n = BATCH
    gm = rng.random(n) < 0.5
    write = rng.random(n) < 0.4
    repeat = rng.integers(1, 9, n)
    block_stride = rng.choice(np.array([1, 2]), n)
    if gm_writes != "strided":  # contiguous: ingest.py's DataCopy rows; scattered: every other block
        block_stride = np.where(gm & write, 1 if gm_writes == "contiguous" else 2, block_stride)
    repeat_stride = rng.choice(np.array([8, 16]), n)
    max_extent = ((8 - 1) * 16 + (8 - 1) * 2 + 1) * 32
    block = rng.integers(0, BLOCK_DIM, n)
    read_offset = rng.integers(0, (ALLOCATION_BYTES - max_extent) // 32, n).astype(np.uint64) * np.uint64(32)
    slice_bytes = ALLOCATION_BYTES // BLOCK_DIM
    write_offset = block.astype(np.uint64) * np.uint64(slice_bytes) + rng.integers(
        0, (slice_bytes - max_extent) // 32, n
    ).astype(np.uint64) * np.uint64(32)
    gm_address = BASES[rng.integers(0, ALLOCATIONS, n)] + np.where(write, write_offset, read_offset)
    ub_address = rng.integers(0, (UB_BYTES - max_extent) // 32, n).astype(np.uint64) * np.uint64(32)
    events = np.zeros(n, dtype=EVENT_DTYPE)
    events["address"] = np.where(gm, gm_address, ub_address)
    events["serial"] = np.arange(serial0, serial0 + n, dtype=np.uint64)
    events["pc"] = 0x1000 + 4 * rng.integers(0, 4096, n)
    events["block_size"] = 32
    events["block_num"] = 8
    events["block_stride"] = block_stride
    events["repeat"] = repeat
    events["repeat_stride"] = repeat_stride
    events["block_id"] = block
    events["kind"] = np.where(write, EventKind.WRITE, EventKind.READ)
    events["space"] = np.where(gm, Space.GM, Space.UB)
    events["pipe"] = np.where(gm, np.where(write, Pipe.MTE3, Pipe.MTE2), Pipe.V)
    events["block_type"] = BlockType.AIV
    return events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernels", type=int, default=2)
    parser.add_argument("--sittings", type=int, default=3)
    parser.add_argument("--gm-writes", choices=("strided", "scattered", "contiguous"), default="strided")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    pool = [build_batch(rng, 1 + i * BATCH, args.gm_writes) for i in range(POOL)]
    context = SessionContext(job="bench", session=1, pid=0, device=0, chip=chip_named("910B1"),
                             config=Config(tools=["memcheck"]))  # fmt: skip
    (memcheck,) = create_detectors(context)
    for base in BASES.tolist():
        memcheck.host_op(HostOp(op="malloc", address=base, size=ALLOCATION_BYTES))
    launches = iter(range(1, 1 << 30))
    findings = 0

    def kernels(n: int) -> None:
        nonlocal findings
        for _ in range(n):
            launch = KernelLaunch(kernel=next(launches), name="add", block_dim=BLOCK_DIM, kernel_type="aiv")
            memcheck.kernel_begin(launch)
            for i in range(BATCHES_PER_KERNEL):
                memcheck.check(pool[i % POOL])
            findings += len(memcheck.kernel_end())

    kernels(1)
    rates = []
    for _ in range(args.sittings):
        started = time.process_time()
        kernels(args.kernels)
        rates.append(args.kernels * BATCHES_PER_KERNEL * BATCH / (time.process_time() - started))
    sittings = ", ".join(f"{r / 1e6:.2f}" for r in rates)
    print(f"memcheck, strided x8 ({args.gm_writes} GM writes): {max(rates) / 1e6:.2f} M events per CPU-second "
          f"(best of {args.sittings}; sittings {sittings}); findings {findings}")  # fmt: skip
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(kernels, 1)
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)
        pstats.Stats(profile).sort_stats("cumulative").print_stats(30)


if __name__ == "__main__":
    main()
