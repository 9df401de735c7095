"""One planted race per racecheck hazard, in a small emulated vector kernel (4 vector blocks, 512-byte tiles).

    sanitizerd run -t racecheck -- python examples/emulated/races.py BUG

BUG is one of the names in BUGS; ``none`` runs the clean kernel, which orders every access pair with a full
happens-before chain: each hand-over between pipes is a set_flag/wait_flag pair, dependent vector instructions
are separated by pipe_barrier(PIPE_V), and GM handed from one block to another is ordered by SyncAll or by FFTS
cross-core flags. It is also silent under memcheck, initcheck and synccheck. Each block of the kernel:

1. copies its x tile into UB (``copy-x``, MTE2), computes three dependent vector instructions, t = x + x
   (``add``), u = f(t) (``vec-1``) and z = u + t (``vec-2``), and writes z to its own z tile (``phase-1``, MTE3);
2. computes v = y + t and adds it atomically into the z tile of the block before it (``phase-2``, MTE3; block 0
   into its own), after a SyncAll that orders every block's phase-1 write before it (atomic, so that memcheck's
   multi-core stomping check allows two blocks writing one tile; racecheck exempts only pairs of atomic writes).
   Into the block before, not after: memcheck, like msSanitizer's, takes no synchronisation into account and
   takes the blocks in turn, and an atomic write takes bytes nobody owns yet, so an add into a tile whose block
   comes later would take it first and make that block's own phase-1 write stomping;
3. block 0 publishes a tile to w (``publish``, MTE3) and signals every block with an FFTS mode-0 set on MTE3
   (flag 1, every block sets it and waits for it); block 1 reads w after its wait (``consume``, MTE2).

The bugs (each bug's line is marked ``# BUG: name``, the lines a finding points at ``# line: name``):

- ``missing_wait_flag``: the wait_flag(MTE2 -> V) before ``add`` is left out (its set_flag stays): RAW on UB
  between the MTE2 write of the x tile (``copy-x``) and the PIPE_V read of it (``add``), in every block.
- ``missing_pipe_barrier``: no pipe_barrier(PIPE_V) between ``vec-1`` and ``vec-2``, which reads vec-1's output:
  RAW within PIPE_V (``vec-1`` writes, ``vec-2`` reads), in every block.
- ``gm_overlap``: the SyncAll between the phases is left out: WAW on GM between each block's phase-1 write
  (``phase-1``) and the atomic phase-2 write of the block after it (``phase-2``); only the latter is atomic.
  Block 0 adds into its own tile: there the two writes are a WAW within its PIPE_MTE3.
- ``misordered_cross_flag``: block 0 issues its cross_set before its write instead of after: RAW on GM between
  block 0's write (``publish``) and block 1's read (``consume``).
- ``deadlock``: a wait_flag(MTE3 -> MTE2, event 5) that no set_flag matches (``stuck``), followed by more MTE2 and
  V instructions; it comes after the ``missing_pipe_barrier`` race, which this bug plants too, so that race is
  found among the events before the stuck wait.
"""

from __future__ import annotations

import sys

import client_shim
from client_shim.emulator import Block, KernelEmulator
from client_shim.events import Pipe

BLOCKS, TILE = 4, 512
X, Y, Z, W = 0x12C0C0000000, 0x12C0D0000000, 0x12C0E0000000, 0x12C0F0000000
REPEAT = TILE // 256  # vector repeats of 256 bytes (8 blocks of 32) per tile
BUGS = ("none", "missing_wait_flag", "missing_pipe_barrier", "gm_overlap", "misordered_cross_flag", "deadlock")


def main(bug: str) -> None:
    client = client_shim.connect(device=0)
    client.device_summary("Ascend910B1", block_num=BLOCKS, device=0)
    kernel = KernelEmulator(client, "race_custom", block_dim=BLOCKS)
    x, y = kernel.gm(X, BLOCKS * TILE), kernel.gm(Y, BLOCKS * TILE)
    z = kernel.gm(Z, BLOCKS * TILE, initialized=False)
    w = kernel.gm(W, TILE, initialized=False)

    def body(block: Block) -> None:
        xs, ts, us, zs = block.ub(0x0, TILE), block.ub(0x200, TILE), block.ub(0x400, TILE), block.ub(0x600, TILE)
        ys, vs, ws = block.ub(0x800, TILE), block.ub(0xA00, TILE), block.ub(0xC00, TILE)
        own, neighbour = block.idx * TILE, max(block.idx - 1, 0) * TILE

        # 1. t = x + x, u = f(t), z = u + t: dependent vector instructions, then z to the block's own tile
        block.data_copy(xs, x.tile(own, TILE))  # line: copy-x
        block.set_flag(Pipe.MTE2, Pipe.V, 0)
        if bug != "missing_wait_flag":
            block.wait_flag(Pipe.MTE2, Pipe.V, 0)  # BUG: missing_wait_flag
        block.vector(ts, [xs, xs], repeat=REPEAT)  # line: add
        block.pipe_barrier(Pipe.V)
        block.vector(us, [ts], repeat=REPEAT)  # line: vec-1
        if bug not in ("missing_pipe_barrier", "deadlock"):
            block.pipe_barrier(Pipe.V)  # BUG: missing_pipe_barrier
        block.vector(zs, [us, ts], repeat=REPEAT)  # line: vec-2
        block.set_flag(Pipe.V, Pipe.MTE3, 0)
        block.wait_flag(Pipe.V, Pipe.MTE3, 0)
        block.data_copy(z.tile(own, TILE), zs)  # line: phase-1

        # 2. v = y + t, atomically added into the z tile of the block before once every block has written its own
        if bug == "deadlock":
            block.wait_flag(Pipe.MTE3, Pipe.MTE2, 5)  # BUG: deadlock  # line: stuck
        block.data_copy(ys, y.tile(own, TILE))
        block.set_flag(Pipe.MTE2, Pipe.V, 1)
        block.wait_flag(Pipe.MTE2, Pipe.V, 1)
        block.vector(vs, [ys, ts], repeat=REPEAT)
        block.set_flag(Pipe.V, Pipe.MTE3, 1)
        block.wait_flag(Pipe.V, Pipe.MTE3, 1)
        if bug != "gm_overlap":
            block.sync_all()  # BUG: gm_overlap
        block.set_atomic(True)
        block.data_copy(z.tile(neighbour, TILE), vs)  # line: phase-2
        block.set_atomic(False)

        # 3. block 0 hands a tile to block 1 through GM; every block takes part in the mode-0 cross-core flag
        early = block.idx == 0 and bug == "misordered_cross_flag"
        if early:
            block.cross_set(Pipe.MTE3, 1, mode=0)  # BUG: misordered_cross_flag
        if block.idx == 0:
            block.data_copy(w, zs)  # line: publish
        if not early:
            block.cross_set(Pipe.MTE3, 1, mode=0)
        block.cross_wait(1)
        if block.idx == 1:
            block.data_copy(ws, w)  # line: consume

    kernel.run(body)
    client.load(Z, BLOCKS * TILE)
    client.load(W, TILE)
    for address in (X, Y, Z, W):
        client.free(address, location=kernel.here())
    client.close()


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in BUGS:
        raise SystemExit(f"usage: races.py {{{'|'.join(BUGS)}}}")
    main(sys.argv[1])
