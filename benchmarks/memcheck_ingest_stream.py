"""memcheck alone, in this process, on the batches `benchmarks/ingest.py`'s clients send: each of 48 blocks
writes random places of its own slice of four 32 MiB buffers (half the events GM, 40 % writes, strided 8 x 32 B,
1-8 repeats) and reads anywhere. Where ingest's end-to-end memcheck figure spends its daemon CPU, without the
sockets and the sessions.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/memcheck_ingest_stream.py [--kernels 4] [--profile]

Prints events per CPU-second (best of 3 sittings of ``--kernels`` kernels of 16 batches of 65 536 events, after
one warm-up kernel); ``--profile`` adds cProfile's top functions.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import numpy as np

from benchmarks.ingest import ClientPlan, _allocation_bases, build_batch
from sanitizerd.chips import chip_named
from sanitizerd.detectors import create_detectors
from sanitizerd.detectors.base import KernelLaunch, SessionContext
from sanitizerd_protocol.messages import Config, HostOp

BATCH, BATCHES_PER_KERNEL = 65536, 16


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernels", type=int, default=4)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    plan = ClientPlan(index=0, socket_path="", job="bench", batch_events=BATCH, batches_per_kernel=BATCHES_PER_KERNEL,
                      kernels=0, seconds=0, pool=4, allocations=4, allocation_bytes=32 << 20, seed=1)  # fmt: skip
    rng = np.random.default_rng(plan.seed)
    pool = [build_batch(plan, rng, 1 + i * BATCH) for i in range(plan.pool)]
    context = SessionContext(job="bench", session=1, pid=0, device=0, chip=chip_named("910B1"),
                             config=Config(tools=["memcheck"]))  # fmt: skip
    (memcheck,) = create_detectors(context)
    for base in _allocation_bases(plan).tolist():
        memcheck.host_op(HostOp(op="malloc", address=base, size=plan.allocation_bytes))
    launches = iter(range(1, 1 << 30))

    def kernels(n: int) -> None:
        for _ in range(n):
            memcheck.kernel_begin(KernelLaunch(kernel=next(launches), name="add", block_dim=48, kernel_type="aiv"))
            for i in range(BATCHES_PER_KERNEL):
                memcheck.check(pool[i % len(pool)])
            if memcheck.kernel_end():
                raise SystemExit("the valid stream produced findings")

    kernels(1)
    rates = []
    for _ in range(3):
        started = time.process_time()
        kernels(args.kernels)
        rates.append(args.kernels * BATCHES_PER_KERNEL * BATCH / (time.process_time() - started))
    print(f"memcheck on ingest.py's stream: {max(rates) / 1e6:.2f} M events per CPU-second (best of 3)")
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(kernels, 2)
        pstats.Stats(profile).sort_stats("cumulative").print_stats(20)
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
