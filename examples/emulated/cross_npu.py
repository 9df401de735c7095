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
Silent. The ranks run at once, as a ring's do, and the middle ranks' kernels, begun first, go on working after
passing the token, so they end after the last rank's: the daemon holds the last rank's verdict until they have
(docs/mssanitizer-later.md). The ranks meet at the end before closing, as a job's ranks do at its last collective.
``chained_broken`` is the same with the first middle rank waiting for a value never set (``# BUG: chained_broken``):
the read races with the write, reported when the last rank's session ends.

``readonly_write`` and ``readonly_clean`` run one process: the weights buffer is marked read-only
(``region_permission(write=False)``); ``readonly_write`` writes into it (``# BUG: readonly_write``), an illegal
write at ``overwrite``; ``readonly_clean`` only reads it. Lines a finding points at are marked ``# line: name``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import client_shim
from client_shim.emulator import Block, KernelEmulator
from client_shim.events import Pipe

WORLD, TILE = 2, 512
SYMMETRIC = 0x12C100000000  # the symmetric buffer: WORLD slots of TILE bytes, at this address on every device
INPUT = 0x12C200000000
WEIGHTS, OUTPUT = 0x12C300000000, 0x12C400000000
SIGNALS = 0x12C100010000  # each rank's signal, 8 bytes apart
CHAIN = 3  # ranks of the chained mode
MODES = ("race", "ordered", "signalled", "chained", "chained_broken", "readonly_write", "readonly_clean")
MEETING_TIMEOUT = 60.0  # seconds a rank waits for the others at a meeting point


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


def arrive(point: str, rank: int) -> None:
    """This rank has reached ``point`` (the ranks' meeting points are files in the launcher's directory)."""
    (Path(os.environ["CHAIN_MEETING"]) / f"{point}.{rank}").touch()


def await_ranks(point: str, ranks: range) -> None:
    """Until every one of ``ranks`` has reached ``point``: a host-side stand-in for the devices' waits."""
    meeting = Path(os.environ["CHAIN_MEETING"])
    deadline = time.monotonic() + MEETING_TIMEOUT
    while not all((meeting / f"{point}.{r}").exists() for r in ranks):
        if time.monotonic() > deadline:
            raise SystemExit(f"rank waited {MEETING_TIMEOUT:g} s for ranks {list(ranks)} at {point}")
        time.sleep(0.01)


def chained_main(rank: int, broken: bool) -> None:
    client = client_shim.connect(device=rank, rank=rank)
    client.device_summary("Ascend910B1", block_num=1, device=rank)
    kernel = KernelEmulator(client, "token_relay", block_dim=1)
    source = kernel.gm(INPUT, TILE)
    shared = kernel.gm(SYMMETRIC, CHAIN * TILE)
    client.region_permission(SYMMETRIC, CHAIN * TILE, shared=True)
    last = CHAIN - 1

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
        if rank < last:  # the middle rank's kernel is running; it passes the token on and goes on working
            client.flush()
            arrive("begun", rank)
            await_ranks("checked", range(last, CHAIN))
        token = 2 if broken and rank == 1 else 1  # BUG: chained_broken
        block.signal_wait(SIGNALS + 8 * (rank - 1), token, "EQ")  # line: token
        if rank < last:
            block.signal_set(SIGNALS + 8 * rank, 1)
        else:
            block.data_copy(staged, shared.tile(0, TILE))  # line: last_read

    if rank == last:  # the token reaches the last rank through every middle one, whose kernels have begun
        await_ranks("checked", range(0, 1))
        await_ranks("begun", range(1, last))
    kernel.run(body)
    arrive("checked", rank)
    arrive("done", rank)
    await_ranks("done", range(CHAIN))
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
    chained = mode.startswith("chained")
    if rank is not None:
        if chained:
            chained_main(int(rank), mode == "chained_broken")
        else:
            rank_main(mode, int(rank))
        return 0
    # the launcher, as torchrun: one process per device, each told its rank
    world = CHAIN if chained else WORLD
    with tempfile.TemporaryDirectory(prefix="cross-npu-") as meeting:
        environments = [{**os.environ, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(world),
                         "CHAIN_MEETING": meeting} for r in range(world)]  # fmt: skip
        ranks = [subprocess.Popen([sys.executable, __file__, mode], env=env) for env in environments]
        return max(process.wait() for process in ranks)


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in MODES:
        sys.exit(f"usage: {sys.argv[0]} {{{','.join(MODES)}}}")
    sys.exit(main(sys.argv[1]))
