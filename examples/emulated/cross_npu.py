"""Memory shared between NPUs, and a buffer marked read-only, in small emulated kernels.

    sanitizerd run -t racecheck --check-cross-npu-races=yes -- python examples/emulated/cross_npu.py race
    sanitizerd run -t memcheck -- python examples/emulated/cross_npu.py readonly_write

``race``, ``ordered`` and ``signalled`` launch a torchrun-style job of WORLD processes, each driving its own
device: every rank allocates a symmetric buffer (the same address on every device, as a symmetric heap maps it),
marks it shared (``region_permission(shared=True)``) and runs one kernel that writes its own slot of the buffer and
then reads its peer's slot (an all-gather by hand):

- ``race``: nothing orders a rank's read of its peer's slot after the peer's write of it (``# BUG: race``): a
  cross-NPU RAW on GM between ``publish`` on one device and ``gather`` on the other, for each pair of ranks.
- ``ordered``: a cross-NPU barrier between the write and the read (after ``pipe_barrier(PIPE_ALL)``, so that the
  write has left the block's pipes): every device's writes come before every device's reads. Silent.
- ``signalled``: mstx signals instead (after ``pipe_barrier(PIPE_ALL)`` too): each rank sets its own signal to 1
  after its write and waits until its peer's equals 1 before its read, so the peer's write comes first. Silent.

``readonly_write`` and ``readonly_clean`` run one process: the weights buffer is marked read-only
(``region_permission(write=False)``); ``readonly_write`` writes into it (``# BUG: readonly_write``), an illegal
write at ``overwrite``; ``readonly_clean`` only reads it. Lines a finding points at are marked ``# line: name``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import client_shim
from client_shim.emulator import Block, KernelEmulator
from client_shim.events import Pipe

WORLD, TILE = 2, 512
SYMMETRIC = 0x12C100000000  # the symmetric buffer: WORLD slots of TILE bytes, at this address on every device
INPUT = 0x12C200000000
WEIGHTS, OUTPUT = 0x12C300000000, 0x12C400000000
SIGNALS = 0x12C100010000  # each rank's signal, 8 bytes apart
MODES = ("race", "ordered", "signalled", "readonly_write", "readonly_clean")


def rank_main(mode: str, rank: int) -> None:
    client = client_shim.connect(device=rank, rank=rank)
    client.device_summary("Ascend910B1", block_num=1, device=rank)
    kernel = KernelEmulator(client, "allgather_custom", block_dim=1)
    source = kernel.gm(INPUT, TILE)
    shared = kernel.gm(SYMMETRIC, WORLD * TILE)
    client.region_permission(SYMMETRIC, WORLD * TILE, shared=True)
    peer = (rank + 1) % WORLD

    def body(block: Block) -> None:
        staged, gathered = block.ub(0x0, TILE), block.ub(0x200, TILE)
        block.data_copy(staged, source)
        block.set_flag(Pipe.MTE2, Pipe.MTE3, 0)
        block.wait_flag(Pipe.MTE2, Pipe.MTE3, 0)
        block.data_copy(shared.tile(rank * TILE, TILE), staged)  # line: publish
        if mode == "ordered":
            block.pipe_barrier(Pipe.ALL)  # BUG: race
            block.npu_barrier()  # BUG: race
        elif mode == "signalled":
            block.pipe_barrier(Pipe.ALL)  # BUG: race
            block.signal_set(SIGNALS + 8 * rank, 1)  # line: signal
            block.signal_wait(SIGNALS + 8 * peer, 1, "EQ")  # BUG: race  # line: await
        block.data_copy(gathered, shared.tile(peer * TILE, TILE))  # line: gather

    kernel.run(body)
    client.close()


def readonly_main(mode: str) -> None:
    client = client_shim.connect(device=0)
    client.device_summary("Ascend910B1", block_num=1, device=0)
    kernel = KernelEmulator(client, "scale_custom", block_dim=1)
    weights, output = kernel.gm(WEIGHTS, TILE), kernel.gm(OUTPUT, TILE, initialized=False)
    client.region_permission(WEIGHTS, TILE, write=False)

    def body(block: Block) -> None:
        staged = block.ub(0x0, TILE)
        block.data_copy(staged, weights)
        block.set_flag(Pipe.MTE2, Pipe.MTE3, 0)
        block.wait_flag(Pipe.MTE2, Pipe.MTE3, 0)
        block.data_copy(output, staged)
        if mode == "readonly_write":
            block.data_copy(weights, staged)  # BUG: readonly_write  # line: overwrite

    kernel.run(body)
    client.free(WEIGHTS, location=kernel.here())
    client.free(OUTPUT, location=kernel.here())
    client.close()


def main(mode: str) -> int:
    if mode.startswith("readonly"):
        readonly_main(mode)
        return 0
    rank = os.environ.get("RANK")
    if rank is not None:
        rank_main(mode, int(rank))
        return 0
    # the launcher, as torchrun: one process per device, each told its rank
    ranks = [
        subprocess.Popen([sys.executable, __file__, mode], env={**os.environ, "RANK": str(r), "LOCAL_RANK": str(r),
                                                                "WORLD_SIZE": str(WORLD)})
        for r in range(WORLD)
    ]  # fmt: skip
    return max(process.wait() for process in ranks)


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in MODES:
        sys.exit(f"usage: {sys.argv[0]} {{{','.join(MODES)}}}")
    sys.exit(main(sys.argv[1]))
