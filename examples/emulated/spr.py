"""Vector instructions run under a vector mask the kernel set, for memcheck's --trace-non-default-spr-reg=vector.

    sanitizerd run -t memcheck --trace-non-default-spr-reg=vector -- python examples/emulated/spr.py BUG

Two vector blocks. Each copies 256 halves from GM into UB, adds them to themselves (VADD) and multiplies them
(VMUL), then copies the result back. A kernel that narrows the vector mask (``set_vector_mask``) for a tail, or
switches to counter mode (``SetMaskCount``), makes every later vector instruction work on fewer elements; when it
forgets to put the mask back, an instruction meant for the whole repeat silently computes a part of it. The trace
shows, at INFO, each vector instruction that ran with a mask other than all ones, its call stack and the mask.

BUG is one of the names in BUGS; ``none`` runs the clean kernel, silent under every tool (the masks are put back
before the next instruction). The bugs (each bug's line is marked ``# BUG: name``, the lines a trace points at
``# line: name``):

- ``mask_left_narrow``: block 0 narrows the mask to 64 elements for its VADD and does not restore it, so its
  VMUL also runs under it (two traced sites; registercheck also says the mask was left set).
- ``counter_mode``: block 1 runs its VADD in counter mode (CTRL bit 56) with 200 elements, then restores both.
- ``in_a_loop``: block 0 runs its narrowed VADD four times in a loop: one site, four executions.
"""

from __future__ import annotations

import argparse

import client_shim
from client_shim.emulator import Block, KernelEmulator
from client_shim.events import Pipe, Register

BLOCKS = 2
SOURCE = 0x12C100000000
ALL_ONES = (1 << 64) - 1
COUNTER_MODE = 1 << 56  # CTRL's mask-mode bit
BUGS = ("none", "mask_left_narrow", "counter_mode", "in_a_loop")


def main(bug: str) -> None:
    client = client_shim.connect(device=0)
    client.device_summary("Ascend910B1", block_num=BLOCKS, device=0)
    kernel = KernelEmulator(client, "spr_custom", block_dim=BLOCKS)
    x = kernel.gm(SOURCE, BLOCKS * 512, dtype_bytes=2)

    def body(block: Block) -> None:
        ub = block.ub(0, 512)
        tile = x.tile(block.idx * 512, 512)
        block.data_copy(ub, tile)
        block.set_flag(Pipe.MTE2, Pipe.V)
        block.wait_flag(Pipe.MTE2, Pipe.V)
        narrow = block.idx == 0 and bug in ("mask_left_narrow", "in_a_loop")
        counter = block.idx == 1 and bug == "counter_mode"
        if narrow:
            block.set_register(Register.VECTOR_MASK_1, 0)  # the high 64 elements of each repeat off
        if counter:
            block.set_register(Register.CTRL, COUNTER_MODE)
            block.set_register(Register.VECTOR_MASK_0, 200)
            block.set_register(Register.VECTOR_MASK_1, 0)
        vadd_mask, vadd_count = (ALL_ONES if narrow else None), (200 if counter else None)
        for _ in range(4 if bug == "in_a_loop" and block.idx == 0 else 1):
            block.vector(ub, [ub, ub], instr="VADD", mask=vadd_mask, count=vadd_count)  # line: vadd
            block.pipe_barrier(Pipe.V)  # the next vector instruction reads what this one wrote
        if counter:
            block.set_register(Register.CTRL, 0)
            block.set_register(Register.VECTOR_MASK_0, ALL_ONES)
        if (narrow and bug != "mask_left_narrow") or counter:
            block.set_register(Register.VECTOR_MASK_1, ALL_ONES)  # BUG: mask_left_narrow
        left = narrow and bug == "mask_left_narrow"
        block.vector(ub, [ub, ub], instr="VMUL", mask=ALL_ONES if left else None)  # line: vmul
        block.set_flag(Pipe.V, Pipe.MTE3)
        block.wait_flag(Pipe.V, Pipe.MTE3)
        block.data_copy(tile, ub)

    kernel.run(body)
    client.free(SOURCE, location=kernel.here())
    client.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="vector instructions under a non-default mask")
    parser.add_argument("bug", choices=BUGS)
    main(parser.parse_args().bug)
