"""Kernels that lock up on wait_flag, and one that hangs without a record to show why (an emulated vector kernel,
2 blocks).

    sanitizerd run -t synccheck -- python examples/emulated/lockup.py BUG [--deaf]

Each block copies a tile into UB (MTE2), hands it to PIPE_V (set_flag/wait_flag MTE2 -> V), adds it to itself and
hands the result to MTE3 (V -> MTE3), which writes it back to GM. BUG is one of BUGS:

- ``none``: the kernel as described; it ends, clean.
- ``unset_flag``: block 1's MTE3 waits on a flag from PIPE_S (event 3) that nothing sets (``stuck-mte3``). PIPE_S
  itself is not waiting, so it could still set the flag: the daemon cannot know the kernel is locked until the
  program is stopped (Ctrl-C), and then reports PIPE_MTE3 of block 1 locked up.
- ``cycle``: in block 0, PIPE_V waits for MTE3 (``cycle-v``) and MTE3 for V (``cycle-mte3``), neither
  having set the other's flag: nothing left can set either, and the daemon reports both while the kernel runs.
- ``silent``: every wait is met, but the kernel never ends and sends nothing more (a hang outside the records):
  the daemon reports the launch silent after ``serve --silent-kernel-after`` seconds.

Every BUG but ``none`` hangs like a locked kernel: the program blocks with the launch open until it is killed.
SIGINT ends it as it ends a native program (no Python clean-up, no ``close``), unless ``--deaf``: then it ignores
SIGINT, as a process stuck in the driver may, and only SIGKILL ends it.
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
BUGS = ("none", "unset_flag", "cycle", "silent")


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

    if bug == "none":
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
