"""SIMT threads on a 950 vector block: a race between threads, one against the main scalar, and a divergent
``__syncthreads()``, each found with msSanitizer's report text; ``none`` runs the clean kernel.

    sanitizerd run -t racecheck -t synccheck -- python examples/emulated/simt.py BUG

Each of the 2 vector blocks launches a SIMT function of 8 x 2 threads. Every thread stores its element of a UB
tile, waits at ``__syncthreads()``, then loads its neighbour's element (the next thread's, wrapping) and stores the
sum to its own GM element; the block's main scalar reads a flag in GM while the threads run. The bugs (each bug's
line is marked ``# BUG: name``, the lines a finding points at ``# line: name``):

- ``thread_race``: the ``__syncthreads()`` between the store and the neighbour's load is left out: RAW on UB
  between thread (0,0,0)'s store (``store-own``) and thread (15 of 16, i.e. (7,1,0))'s load of it
  (``load-neighbour``), in every block.
- ``scalar_race``: the main scalar writes the GM output element of thread (0,0,0) while the threads run
  (``scalar-write``): WAW on GM between it and that thread's store (``store-out``).
- ``divergent``: only the threads of the first row (y = 0) reach the ``__syncthreads()`` (``barrier``): the
  threads of the second row diverged; msSanitizer names the first of them, thread(0,1,0).
- ``thread_stomping``: each thread stores to the output element of its x alone, so the second row's threads
  write the first row's elements (inter-thread stomping, memcheck): ``out of bounds of size 4 ... when writing
  data``, by thread (0,1,0), the first of them (``store-out``).
"""

from __future__ import annotations

import sys

import client_shim
from client_shim.emulator import Block, KernelEmulator, SimtThread
from client_shim.events import Space

BLOCKS, DIMS = 2, (8, 2, 1)
THREADS = DIMS[0] * DIMS[1] * DIMS[2]
OUT, FLAG = 0x12C0C0000000, 0x12C0D0000000
BUGS = ("none", "thread_race", "scalar_race", "divergent", "thread_stomping")


def main(bug: str) -> None:
    client = client_shim.connect(device=0)
    client.device_summary("Ascend950PR", block_num=BLOCKS, device=0)
    kernel = KernelEmulator(client, "simt_custom", block_dim=BLOCKS)
    out = kernel.gm(OUT, BLOCKS * THREADS * 4, dtype_bytes=4, initialized=False)
    flag = kernel.gm(FLAG, 32, dtype_bytes=4)

    def body(block: Block) -> None:
        tile = block.tensor(Space.UB, 0, THREADS * 4, dtype_bytes=4)

        def thread(t: SimtThread) -> None:
            t.store(tile, t.linear)  # line: store-own
            if bug == "divergent":
                if t.y == 0:
                    t.syncthreads()  # BUG: divergent  # line: barrier
            elif bug != "thread_race":
                t.syncthreads()  # BUG: thread_race
            t.load(tile, (t.linear + 1) % THREADS)  # line: load-neighbour
            own = t.x if bug == "thread_stomping" else t.linear  # BUG: thread_stomping
            t.store(out, block.idx * THREADS + own)  # line: store-out

        def scalar(b: Block) -> None:
            b.get_value(flag, 0)
            if bug == "scalar_race":
                b.set_value(out, b.idx * THREADS)  # BUG: scalar_race  # line: scalar-write

        block.simt(DIMS, thread, alongside=scalar)

    kernel.run(body)
    client.load(OUT, BLOCKS * THREADS * 4)
    client.free(OUT, location=kernel.here())
    client.free(FLAG, location=kernel.here())
    client.close()


if __name__ == "__main__":
    asked = sys.argv[1:]
    if len(asked) != 1 or asked[0] not in BUGS:
        raise SystemExit("usage: simt.py " + "|".join(BUGS))
    main(asked[0])
