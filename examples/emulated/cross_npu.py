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

``chained`` passes a token along CHAIN ranks, as a ring all-reduce's hops do: rank 0 writes its slot and sets its
signal; each middle rank (touching no shared memory) waits for the signal before it and sets its own; the last rank
waits for its predecessor's and reads rank 0's slot. Only the chain of signals orders that read after that write.
Silent. The ranks run one after another (each waits for its predecessor's token, as a device would): the daemon
judges a pair when its second kernel ends, with the signals of the kernels ended by then, and a middle rank ending
last would come too late (docs/mssanitizer-later.md).

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
CHAIN = 3  # ranks of the chained mode
MODES = ("race", "ordered", "signalled", "chained", "readonly_write", "readonly_clean")


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


def chained_main(rank: int) -> None:
    client = client_shim.connect(device=rank, rank=rank)
    client.device_summary("Ascend910B1", block_num=1, device=rank)
    kernel = KernelEmulator(client, "token_relay", block_dim=1)
    source = kernel.gm(INPUT, TILE)
    shared = kernel.gm(SYMMETRIC, CHAIN * TILE)
    client.region_permission(SYMMETRIC, CHAIN * TILE, shared=True)

    def body(block: Block) -> None:
        staged = block.ub(0x0, TILE)
        if rank == 0:
            block.data_copy(staged, source)
            block.set_flag(Pipe.MTE2, Pipe.MTE3, 0)
            block.wait_flag(Pipe.MTE2, Pipe.MTE3, 0)
            block.data_copy(shared.tile(0, TILE), staged)  # line: first_write
            block.pipe_barrier(Pipe.ALL)
            block.signal_set(SIGNALS, 1)
            return
        block.signal_wait(SIGNALS + 8 * (rank - 1), 1, "EQ")  # line: token
        if rank < CHAIN - 1:
            block.signal_set(SIGNALS + 8 * rank, 1)
        else:
            block.data_copy(staged, shared.tile(0, TILE))  # line: last_read

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
        if mode == "chained":
            chained_main(int(rank))
        else:
            rank_main(mode, int(rank))
        return 0
    # the launcher, as torchrun: one process per device, each told its rank
    world = CHAIN if mode == "chained" else WORLD
    environments = [{**os.environ, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(world)}
                    for r in range(world)]  # fmt: skip
    if mode == "chained":  # one after another: each rank's kernel waits for its predecessor's token
        return max(subprocess.run([sys.executable, __file__, mode], env=env).returncode for env in environments)
    ranks = [subprocess.Popen([sys.executable, __file__, mode], env=env) for env in environments]
    return max(process.wait() for process in ranks)


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in MODES:
        sys.exit(f"usage: {sys.argv[0]} {{{','.join(MODES)}}}")
    sys.exit(main(sys.argv[1]))
