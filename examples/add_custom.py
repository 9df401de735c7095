"""An AscendC ``add_custom`` kernel, emulated through the sanitizerd client API, with four planted bugs.

Eight vector blocks each add 2048 fp16 elements of x and y into z, 256 at a time: every tile is copied
GM->UB on MTE2, added on V, and copied back UB->GM on MTE3, with set_flag/wait_flag between the pipes, as
the AscendC sample does. The planted bugs, which ``sanitizerd run -t memcheck --leak-check yes`` reports:

1. x was allocated 224 bytes short, so block 7's last tile reads 224 bytes past it (illegal read of size 224);
2. block 0 copies a 13-byte tail into UB at offset 6 (misaligned access: UB needs 32-byte alignment);
3. y is freed twice (illegal free);
4. the workspace is never freed (memory leak).

Run it: ``sanitizerd run -t memcheck --leak-check yes -- python examples/add_custom.py``
"""

from __future__ import annotations

import sys

import numpy as np

import client_shim
from client_shim import EventKind, Pipe, Space, accesses, syncs

BLOCKS = 8
BLOCK_LENGTH = 2048  # fp16 elements per block
TILE_LENGTH = 256
TILES = BLOCK_LENGTH // TILE_LENGTH
ELEMENT = 2  # bytes in fp16
TILE_BYTES = TILE_LENGTH * ELEMENT
TOTAL_BYTES = BLOCKS * BLOCK_LENGTH * ELEMENT
SHORT_BY = 224

GM_X, GM_Y, GM_Z, GM_WORKSPACE = 0x12C0C0000000, 0x12C0C0010000, 0x12C0C0020000, 0x12C0C0030000
UB_X, UB_Y, UB_Z = 0x0, 0x200, 0x400  # one tile each, 32-byte aligned

PC_COPY_IN, PC_COMPUTE, PC_COPY_OUT, PC_PAD = 0x77C, 0x7A0, 0x7B8, 0x780


def tile_events(client: client_shim.Client, block: int, tile: int, loc: dict[str, int]) -> np.ndarray:
    """The events of one tile of one block: CopyIn, Compute, CopyOut and the flags between them."""
    offset = (block * BLOCK_LENGTH + tile * TILE_LENGTH) * ELEMENT
    blocks32 = TILE_BYTES // 32
    serial = client.next_serial
    parts = [
        # CopyIn: DataCopy GM->UB for x and y, nBurst 1 of TILE_BYTES/32 32-byte blocks.
        accesses(EventKind.READ, Space.GM, GM_X + offset, 32, block_num=blocks32, pipe=Pipe.MTE2,
                 block_id=block, serial=serial(), pc=PC_COPY_IN, location=loc["copy_in"]),
        accesses(EventKind.WRITE, Space.UB, UB_X, 32, block_num=blocks32, pipe=Pipe.MTE2,
                 block_id=block, serial=serial(), pc=PC_COPY_IN, location=loc["copy_in"]),
        accesses(EventKind.READ, Space.GM, GM_Y + offset, 32, block_num=blocks32, pipe=Pipe.MTE2,
                 block_id=block, serial=serial(), pc=PC_COPY_IN, location=loc["copy_in"]),
        accesses(EventKind.WRITE, Space.UB, UB_Y, 32, block_num=blocks32, pipe=Pipe.MTE2,
                 block_id=block, serial=serial(), pc=PC_COPY_IN, location=loc["copy_in"]),
        syncs(EventKind.SET_FLAG, Pipe.MTE2, Pipe.V, 0, block_id=block, serial=serial(), location=loc["copy_in"]),
        syncs(EventKind.WAIT_FLAG, Pipe.MTE2, Pipe.V, 0, block_id=block, serial=serial(), location=loc["compute"]),
        # Compute: Add over the tile, 8 blocks of 32 bytes per repeat.
        accesses(EventKind.READ, Space.UB, [UB_X, UB_Y], 32, block_num=8, repeat=blocks32 // 8, repeat_stride=8,
                 pipe=Pipe.V, block_id=block, serial=serial(), pc=PC_COMPUTE, location=loc["compute"]),
        accesses(EventKind.WRITE, Space.UB, UB_Z, 32, block_num=8, repeat=blocks32 // 8, repeat_stride=8,
                 pipe=Pipe.V, block_id=block, serial=serial(), pc=PC_COMPUTE, location=loc["compute"]),
        syncs(EventKind.SET_FLAG, Pipe.V, Pipe.MTE3, 0, block_id=block, serial=serial(), location=loc["compute"]),
        syncs(EventKind.WAIT_FLAG, Pipe.V, Pipe.MTE3, 0, block_id=block, serial=serial(), location=loc["copy_out"]),
        # CopyOut: DataCopy UB->GM for z.
        accesses(EventKind.READ, Space.UB, UB_Z, 32, block_num=blocks32, pipe=Pipe.MTE3,
                 block_id=block, serial=serial(), pc=PC_COPY_OUT, location=loc["copy_out"]),
        accesses(EventKind.WRITE, Space.GM, GM_Z + offset, 32, block_num=blocks32, pipe=Pipe.MTE3,
                 block_id=block, serial=serial(), pc=PC_COPY_OUT, location=loc["copy_out"]),
        syncs(EventKind.SET_FLAG, Pipe.MTE3, Pipe.MTE2, 0, block_id=block, serial=serial(),
              location=loc["copy_out"]),
        syncs(EventKind.WAIT_FLAG, Pipe.MTE3, Pipe.MTE2, 0, block_id=block, serial=serial(),
              location=loc["copy_in"]),
    ]  # fmt: skip
    if block == 0 and tile == TILES - 1:
        # Planted bug 2: a 13-byte DataCopyPad tail into UB at offset 6.
        parts.append(
            accesses(EventKind.WRITE, Space.UB, 0x6, 13, pipe=Pipe.MTE2, block_id=block, serial=serial(),
                     pc=PC_PAD, location=loc["pad"])
        )  # fmt: skip
    return np.concatenate(parts)


def main() -> int:
    client = client_shim.connect(tool="add_custom example", device=0)
    client.device_summary("Ascend910B1", block_num=BLOCKS, device=0)
    # Stacks are innermost first: the DataCopy implementation, called from the kernel's CopyIn.
    copy_in = client.location("add_custom.cpp", 18, 5, "KernelAdd::CopyIn")
    loc = {
        "copy_in": client.location("kernel_operator_data_copy_impl.h", 58, 9, "DataCopyImpl", callers=[copy_in]),
        "compute": client.location("add_custom.cpp", 30, 9, "KernelAdd::Compute"),
        "copy_out": client.location("add_custom.cpp", 40, 5, "KernelAdd::CopyOut"),
        "pad": client.location("add_custom.cpp", 24, 5, "KernelAdd::CopyTail"),
    }
    host = {name: client.location("main.cpp", line, 0, "main") for name, line in
            (("x", 70), ("y", 71), ("z", 72), ("workspace", 73), ("free_x", 84), ("free_y", 85), ("free_z", 86),
             ("free_y_again", 87), ("copy_x", 75), ("copy_y", 76), ("copy_z", 80))}  # fmt: skip

    # Planted bug 1: x is 224 bytes short of the TOTAL_BYTES the kernel reads.
    client.malloc(GM_X, TOTAL_BYTES - SHORT_BY, location=host["x"])
    client.malloc(GM_Y, TOTAL_BYTES, location=host["y"])
    client.malloc(GM_Z, TOTAL_BYTES, location=host["z"])
    client.malloc(GM_WORKSPACE, 4096, location=host["workspace"])  # planted bug 4: never freed

    # aclrtMemcpy host -> device of the inputs: host-side stores into GM.
    client.store(GM_X, TOTAL_BYTES - SHORT_BY, location=host["copy_x"])
    client.store(GM_Y, TOTAL_BYTES, location=host["copy_y"])

    kernel = client.kernel_begin("add_custom_kernel", block_dim=BLOCKS, kernel_type="aiv")
    for block in range(BLOCKS):
        for tile in range(TILES):
            client.events(kernel, tile_events(client, block, tile, loc))
    client.kernel_end(kernel)
    verdict = client.wait_kernel(kernel, timeout=60)
    print(
        f"add_custom_kernel: {verdict.events} events from {BLOCKS} blocks checked: "
        f"{verdict.errors} error(s), {verdict.warnings} warning(s)",
        file=sys.stderr,
    )

    client.load(GM_Z, TOTAL_BYTES, location=host["copy_z"])  # aclrtMemcpy device -> host of the result

    client.free(GM_X, location=host["free_x"])
    client.free(GM_Y, location=host["free_y"])
    client.free(GM_Z, location=host["free_z"])
    client.free(GM_Y, location=host["free_y_again"])  # planted bug 3: double free
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
