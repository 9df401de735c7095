"""An AscendC ``add_custom`` kernel, emulated through the sanitizerd client API, with four planted bugs.

Eight vector blocks each add 2048 fp16 elements of x and y into z, 256 at a time: every tile is copied
GM->UB on MTE2, added on V, and copied back UB->GM on MTE3, with set_flag/wait_flag between the pipes, as
the AscendC sample does. The planted bugs, which ``sanitizerd run -t memcheck --leak-check yes`` reports:

1. x was allocated 224 bytes short, so block 7's last tile reads 224 bytes past it (illegal read of size 224);
2. block 0 copies a 13-byte tail into UB at offset 6 with DataCopyPad (misaligned access: UB needs 32-byte
   alignment; msSanitizer's byte-granular MOV_ALIGN access has 1-byte blocks, so the report says size 1);
3. y is freed twice (illegal free);
4. the workspace is never freed (memory leak).

It reports exactly what msSanitizer's hooks would send for the same program, so that the C client
``client_shim/native/msop_add_client.c``, which sends this kernel as msSanitizer packets, gets the same findings
(tests/test_compat_e2e.py): one serial number per instruction record and per host record, counted as
msSanitizer's tool counts them (with a BLOCK_FINISH per sub-block slot and a FINISH per launch); host locations
with a file and a line only (what a MEMORY_RECORD carries); and pcs and stacks as the kernel's ELF gives them
(``client_shim/native/add_custom_kernel.cpp``, whose labels sit at the pcs below).

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
PAD_BYTES = 13
SLOTS = 3 * BLOCKS  # sub-block slots of a 910B launch: two vector and one cube per block

GM_X, GM_Y, GM_Z, GM_WORKSPACE = 0x12C0C0000000, 0x12C0C0010000, 0x12C0C0020000, 0x12C0C0030000
UB_X, UB_Y, UB_Z, UB_PAD = 0x0, 0x200, 0x400, 0x6  # one tile each, 32-byte aligned; the pad's target is not

# Offsets in the kernel's ELF (the msop_pc_* labels of add_custom_kernel.cpp), as msSanitizer reports pcs.
PC_COPY_IN, PC_COMPUTE, PC_COPY_OUT, PC_PAD = 0x800, 0x880, 0x900, 0x980
KERNEL_SOURCE = "/opt/samples/add_custom/add_custom.cpp"
DATA_COPY_SOURCE = "/opt/samples/add_custom/kernel_operator_data_copy_impl.h"


def dma_mov(src: int, src_space: Space, dst: int, dst_space: Space, pipe: Pipe, **where: object) -> np.ndarray:
    """DataCopy as a DMA_MOV of one burst of TILE_BYTES/32 blocks: a read of the source, a write of the dest."""
    blocks = TILE_BYTES // 32
    return np.concatenate([
        accesses(EventKind.READ, src_space, src, 32, block_num=blocks, repeat_stride=blocks, pipe=pipe, **where),
        accesses(EventKind.WRITE, dst_space, dst, 32, block_num=blocks, repeat_stride=blocks, pipe=pipe, **where),
    ])  # fmt: skip


def tile_events(client: client_shim.Client, block: int, tile: int, loc: dict[str, int]) -> np.ndarray:
    """The events of one tile of one block: CopyIn, Compute, CopyOut and the flags between them, one serial per
    instruction."""
    offset = (block * BLOCK_LENGTH + tile * TILE_LENGTH) * ELEMENT

    def at(phase: str) -> dict[str, object]:
        pc = {"copy_in": PC_COPY_IN, "compute": PC_COMPUTE, "copy_out": PC_COPY_OUT, "pad": PC_PAD}[phase]
        return {"block_id": block, "serial": client.next_serial(), "pc": pc, "location": loc[phase]}

    def flag(kind: EventKind, src: Pipe, dst: Pipe, phase: str) -> np.ndarray:
        return syncs(kind, src, dst, 0, **at(phase))  # type: ignore[arg-type]

    parts = [
        dma_mov(GM_X + offset, Space.GM, UB_X, Space.UB, Pipe.MTE2, **at("copy_in")),
        dma_mov(GM_Y + offset, Space.GM, UB_Y, Space.UB, Pipe.MTE2, **at("copy_in")),
        flag(EventKind.SET_FLAG, Pipe.MTE2, Pipe.V, "copy_in"),
        flag(EventKind.WAIT_FLAG, Pipe.MTE2, Pipe.V, "compute"),
    ]
    # Compute: Add over the tile (BINARY_OP), 8 blocks of 32 bytes per repeat: src0, src1, then dst.
    add = at("compute")
    repeats = TILE_BYTES // 256
    parts += [
        accesses(EventKind.READ, Space.UB, [UB_X, UB_Y], 32, block_num=8, repeat=repeats, repeat_stride=8,
                 pipe=Pipe.V, **add),
        accesses(EventKind.WRITE, Space.UB, UB_Z, 32, block_num=8, repeat=repeats, repeat_stride=8, pipe=Pipe.V,
                 **add),
        flag(EventKind.SET_FLAG, Pipe.V, Pipe.MTE3, "compute"),
        flag(EventKind.WAIT_FLAG, Pipe.V, Pipe.MTE3, "copy_out"),
        dma_mov(UB_Z, Space.UB, GM_Z + offset, Space.GM, Pipe.MTE3, **at("copy_out")),
        flag(EventKind.SET_FLAG, Pipe.MTE3, Pipe.MTE2, "copy_out"),
        flag(EventKind.WAIT_FLAG, Pipe.MTE3, Pipe.MTE2, "copy_in"),
    ]  # fmt: skip
    if block == 0 and tile == TILES - 1:
        # Planted bug 2: DataCopyPad (MOV_ALIGN) of block 0's last 13 bytes of x into UB at offset 6. Byte
        # granular: the read covers the 13 bytes, the UB write the 32-byte block they are padded to.
        pad = at("pad")
        source = GM_X + BLOCK_LENGTH * ELEMENT - PAD_BYTES
        parts += [
            accesses(EventKind.READ, Space.GM, source, 1, block_num=PAD_BYTES, repeat_stride=PAD_BYTES,
                     pipe=Pipe.MTE2, **pad),
            accesses(EventKind.WRITE, Space.UB, UB_PAD, 1, block_num=32, repeat_stride=32, pipe=Pipe.MTE2, **pad),
        ]  # fmt: skip
    return np.concatenate(parts)


def main() -> int:
    client = client_shim.connect(tool="add_custom example", device=0)
    client.device_summary("Ascend910B1", block_num=BLOCKS, device=0)

    # Stacks as the kernel's DWARF gives them, innermost first: the DataCopy implementation inlined into the
    # kernel's CopyIn, itself inlined into the kernel function.
    def kernel_line(line: int) -> int:
        return client.location(KERNEL_SOURCE, line, 5, "add_custom_kernel")

    copy_in = client.location(KERNEL_SOURCE, 18, 5, "KernelAdd::CopyIn()", callers=[kernel_line(54)])
    loc = {
        "copy_in": client.location(DATA_COPY_SOURCE, 58, 9, "DataCopyImpl()", callers=[copy_in, kernel_line(54)]),
        "compute": client.location(KERNEL_SOURCE, 30, 9, "KernelAdd::Compute()", callers=[kernel_line(55)]),
        "copy_out": client.location(KERNEL_SOURCE, 40, 5, "KernelAdd::CopyOut()", callers=[kernel_line(56)]),
        "pad": client.location(KERNEL_SOURCE, 24, 5, "KernelAdd::CopyTail()", callers=[kernel_line(57)]),
    }
    # Host operations: the file and line a MEMORY_RECORD carries.
    host = {name: client.location("main.cpp", line) for name, line in
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
    for slot in range(SLOTS):  # vector block b runs in slot b + b // 2; cube slots and those past block 7 are empty
        group, position = divmod(slot, 3)
        block = 2 * group + position
        if position < 2 and block < BLOCKS:
            for tile in range(TILES):
                client.events(kernel, tile_events(client, block, tile, loc))
        client.next_serial()  # the BLOCK_FINISH msSanitizer's tool counts after each slot
    client.next_serial()  # and the FINISH after the last
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
