"""Kernels that lock up on a wait (wait_flag, wait_flag_dev), and one that hangs without a record to show why (an
emulated vector kernel, 2 blocks).

    sanitizerd run -t synccheck -- python examples/emulated/lockup.py BUG [--deaf]

Each block copies a tile into UB (MTE2), hands it to PIPE_V (set_flag/wait_flag MTE2 -> V), adds it to itself and
hands the result to MTE3 (V -> MTE3), which writes it back to GM. BUG is one of BUGS:

- ``none``: the kernel as described; it ends, clean.
- ``unset_flag``: block 1's MTE3 waits on a flag from PIPE_S (event 3) that nothing sets (``stuck-mte3``). PIPE_S
  itself is not waiting, so it could still set the flag: the daemon cannot know the kernel is locked until the
  program is stopped (Ctrl-C), and then reports PIPE_MTE3 of block 1 locked up.
- ``cycle``: in block 0, PIPE_V waits for MTE3 (``cycle-v``) and MTE3 for V (``cycle-mte3``), neither
  having set the other's flag: nothing left can set either, and the daemon reports both while the kernel runs.
- ``unset_cross``: block 0's PIPE_S waits (wait_flag_dev) on the cross-core flag 5, which no block sets
  (``stuck-dev``): another block could still set it while the kernel runs, so it is reported at Ctrl-C, as
  WAIT_FLAG_DEV locked up on PIPE_S of block 0.
- ``queued_sets``: in block 0, PIPE_V waits for MTE3 and then sets MTE3's flag (``queued-v``), and MTE3 waits for
  V and then sets V's (``queued-mte3``). Both sets are sent, but each sits behind its own pipe's wait, so neither
  runs: both pipes are locked, reported while the kernel runs.
- ``sync_all``: block 0's scalar waits on a flag of PIPE_V (event 4) that nothing sets (``stuck-s``), before the
  kernel's SyncAll; block 1 reaches the SyncAll (``at-sync-all``) and waits there for block 0, which never comes.
  Reported at Ctrl-C: PIPE_S of block 0 at WAIT_FLAG, PIPE_S of block 1 at SYNC_ALL.
- ``cross_ok``, ``queued_ok`` and ``sync_all_ok``: the same syncs done right (every block sets flag 5 before it
  waits on it; V sets before it waits; no wait before the SyncAll); they end, clean.
- ``silent``: every wait is met, but the kernel never ends and sends nothing more (a hang outside the records):
  the daemon reports the launch silent after ``serve --silent-kernel-after`` seconds.

Every BUG but ``none`` and the ``_ok`` ones hangs like a locked kernel: the program blocks with the launch open
until it is killed. SIGINT ends it as it ends a native program (no Python clean-up, no ``close``), unless
``--deaf``: then it ignores SIGINT, as a process stuck in the driver may, and only SIGKILL ends it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

import client_shim
from client_shim.emulator import Block, KernelEmulator
from client_shim.events import Pipe

BLOCKS, TILE = 2, 512
X = 0x12C0C0000000
REPEAT = TILE // 256
BUGS = ("none", "unset_flag", "cycle", "silent", "unset_cross", "queued_sets", "sync_all", "cross_ok", "queued_ok",
        "sync_all_ok")  # fmt: skip
ENDS = ("none", "cross_ok", "queued_ok", "sync_all_ok")


def main(bug: str, deaf: bool) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN if deaf else signal.SIG_DFL)
    client = client_shim.connect(device=0)
    client.device_summary("Ascend910B1", block_num=BLOCKS, device=0)
    kernel = KernelEmulator(client, "lockup_custom", block_dim=BLOCKS)
    x = kernel.gm(X, BLOCKS * TILE)

    def body(block: Block) -> None:
        xs, ys = block.ub(0x0, TILE), block.ub(0x200, TILE)
        tile = x.tile(block.idx * TILE, TILE)
        block.data_copy(xs, tile)
        block.set_flag(Pipe.MTE2, Pipe.V, 0)
        block.wait_flag(Pipe.MTE2, Pipe.V, 0)
        if bug == "cross_ok":
            block.cross_set(Pipe.S, 5)  # FFTS mode 0: every block of the kernel sets it once...
        if bug in ("unset_cross", "cross_ok") and block.idx == 0:
            block.cross_wait(5)  # BUG: unset_cross (nobody sets flag 5)  # line: stuck-dev
        if bug == "sync_all" and block.idx == 0:
            block.wait_flag(Pipe.V, Pipe.S, 4)  # BUG: sync_all (nothing sets it)  # line: stuck-s
        if bug in ("sync_all", "sync_all_ok"):
            block.soft_sync_all()  # every block of the kernel must reach it  # line: at-sync-all
        if bug == "queued_sets" and block.idx == 0:
            block.wait_flag(Pipe.MTE3, Pipe.V, 2)  # BUG: queued_sets  # line: queued-v
            block.set_flag(Pipe.V, Pipe.MTE3, 2)  # queued behind V's own wait: never runs
            block.wait_flag(Pipe.V, Pipe.MTE3, 2)  # line: queued-mte3
            block.set_flag(Pipe.MTE3, Pipe.V, 2)
            return
        if bug == "queued_ok" and block.idx == 0:
            block.set_flag(Pipe.V, Pipe.MTE3, 2)  # V's set first, then its wait: both pipes go on
            block.wait_flag(Pipe.MTE3, Pipe.V, 2)
            block.wait_flag(Pipe.V, Pipe.MTE3, 2)
            block.set_flag(Pipe.MTE3, Pipe.V, 2)
        if bug == "cycle" and block.idx == 0:
            block.wait_flag(Pipe.MTE3, Pipe.V, 2)  # BUG: cycle  # line: cycle-v
            block.wait_flag(Pipe.V, Pipe.MTE3, 2)  # line: cycle-mte3
            return
        block.vector(ys, [xs, xs], repeat=REPEAT)
        block.set_flag(Pipe.V, Pipe.MTE3, 1)
        block.wait_flag(Pipe.V, Pipe.MTE3, 1)
        if bug == "unset_flag" and block.idx == 1:
            block.wait_flag(Pipe.S, Pipe.MTE3, 3)  # BUG: unset_flag  # line: stuck-mte3
            return
        block.data_copy(tile, ys)

    if bug in ENDS:
        kernel.run(body)
        client.free(X, location=kernel.here())
        client.close()
        return
    launch, sent = kernel.run_unended(body)
    print(f"lockup.py: pid {os.getpid()} launch {launch} hangs after {sent} events", flush=True)
    threading.Event().wait()  # the launch never ends: hung until killed


if __name__ == "__main__":
    bug, *flags = sys.argv[1:] or [""]
    if bug not in BUGS or flags not in ([], ["--deaf"]):
        raise SystemExit(f"usage: lockup.py {{{'|'.join(BUGS)}}} [--deaf]")
    main(bug, deaf=flags == ["--deaf"])
