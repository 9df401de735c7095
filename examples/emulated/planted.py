"""One planted bug per finding kind, in a small emulated add kernel (2 vector blocks, one 512-byte tile each).

    sanitizerd run -t memcheck -t initcheck -t synccheck --leak-check yes -- python examples/emulated/planted.py BUG

BUG is one of the names in BUGS; ``none`` runs the clean kernel. Each bug's line is marked ``# BUG: name``
and the line a finding is reported at is marked ``# line: name`` (tests/test_emulator.py checks them).
"""

from __future__ import annotations

import sys

import client_shim
from client_shim.emulator import Block, KernelEmulator
from client_shim.events import Pipe, Register

BLOCKS, TILE = 2, 512
X, Y, Z = 0x12C0C0000000, 0x12C0D0000000, 0x12C0E0000000
BUGS = (
    "none",
    "illegal_read",
    "misaligned_access",
    "out_of_bounds",
    "uninitialized_read",
    "unpaired_set_flag",
    "redundant_set_flag",
    "register_not_reset",
    "illegal_free",
    "memory_leak",
)


def main(bug: str) -> None:
    client = client_shim.connect(device=0)
    client.device_summary("Ascend910B1", block_num=BLOCKS, device=0)
    kernel = KernelEmulator(client, "add_custom", block_dim=BLOCKS)
    if bug == "illegal_read":
        x = kernel.gm(X, BLOCKS * TILE - 224)  # BUG: illegal_read
    else:
        x = kernel.gm(X, BLOCKS * TILE)  # line: alloc-x
    y = kernel.gm(Y, BLOCKS * TILE, initialized=bug != "uninitialized_read")  # BUG: uninitialized_read
    z = kernel.gm(Z, BLOCKS * TILE, initialized=False)

    def body(block: Block) -> None:
        xs, zs = block.ub(0x0, TILE), block.ub(0x600, TILE)
        # The misaligned case takes its tile 16 bytes into a larger tensor (AscendC's ``storage[8]`` of halves).
        storage = block.ub(0x200, TILE + 32 if bug == "misaligned_access" else TILE)
        ys = storage.tile(0x10 if bug == "misaligned_access" else 0, TILE)  # BUG: misaligned_access
        block.data_copy(xs, x.tile(block.idx * TILE, TILE))  # line: copy-x
        block.data_copy(ys, y.tile(block.idx * TILE, TILE))  # line: copy-y
        block.set_flag(Pipe.MTE2, Pipe.V, 0)
        if bug == "redundant_set_flag":
            block.set_flag(Pipe.MTE2, Pipe.V, 0)  # BUG: redundant_set_flag  # line: set-again
            block.wait_flag(Pipe.MTE2, Pipe.V, 0)
        block.wait_flag(Pipe.MTE2, Pipe.V, 0)
        block.vector(zs, [xs, ys], repeat=TILE // 256)
        block.set_flag(Pipe.V, Pipe.MTE3, 0)
        block.wait_flag(Pipe.V, Pipe.MTE3, 0)
        own = 0 if bug == "out_of_bounds" else block.idx  # BUG: out_of_bounds (every block writes tile 0)
        block.data_copy(z.tile(own * TILE, TILE), zs)  # line: copy-z
        if bug == "unpaired_set_flag":
            block.set_flag(Pipe.MTE3, Pipe.MTE2, 1)  # BUG: unpaired_set_flag  # line: set-unpaired
        if bug == "register_not_reset":
            block.set_register(Register.VECTOR_MASK_0, 0xFF)  # BUG: register_not_reset  # line: register

    kernel.run(body)
    client.load(Z, BLOCKS * TILE)
    if bug != "memory_leak":
        client.free(X, location=kernel.here())
    client.free(Y, location=kernel.here())
    client.free(Z, location=kernel.here())
    if bug == "illegal_free":
        client.free(Z, location=kernel.here())  # BUG: illegal_free  # line: free-again
    client.close()


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in BUGS:
        raise SystemExit(f"usage: planted.py {{{'|'.join(BUGS)}}}")
    main(sys.argv[1])
