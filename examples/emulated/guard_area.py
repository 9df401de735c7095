"""A host-side tiling function that writes past its GM buffer into the guard area msSanitizer's hooks leave there.

    sanitizerd run -t memcheck --padding=64 -- python examples/emulated/guard_area.py BUG

With the aicpu tiling sink, an operator's tiling function runs on the host and writes its tiling data into a GM
buffer; msSanitizer allocates ``--padding`` bytes of guard area after each buffer and, after the launch, reports a
guard area that was written (GM_ADDR_OUT_OF_BOUND_RECORD). This program plays both parts: it allocates a 96-byte
tiling buffer, runs a kernel that reads it, and reports what its stand-in for the hooks found in the guard.

BUG is one of the names in BUGS; ``none`` writes the 96 bytes the buffer holds and is silent. The bug:

- ``tiling_overrun``: the tiling function writes 128 bytes: 32 of them land in the guard area, 0 bytes after the
  buffer's end, reported as msSanitizer's "illegal write of size 32 byte(s)".
"""

from __future__ import annotations

import sys

import client_shim
from client_shim.emulator import Block, KernelEmulator

TILING, TILING_SIZE = 0x12C2_0000_0000, 96
BUGS = ("none", "tiling_overrun")


def main(bug: str) -> None:
    client = client_shim.connect(device=0)
    client.device_summary("Ascend910B1", block_num=1, device=0)
    kernel = KernelEmulator(client, "tiling_custom", block_dim=1)
    tiling = kernel.gm(TILING, TILING_SIZE, dtype_bytes=4)
    written = 128 if bug == "tiling_overrun" else TILING_SIZE  # BUG: tiling_overrun

    def body(block: Block) -> None:
        block.data_copy(block.ub(0, TILING_SIZE), tiling)

    kernel.run(body)
    padding = client.config.padding  # the run's --padding, as the daemon's welcome gives it
    past = written - TILING_SIZE
    if past > 0:  # what the hooks find in the guard: the bytes of it that were written, up to its end
        client.guard_write(TILING, TILING_SIZE, TILING + TILING_SIZE, min(past, padding))
    client.free(TILING, location=kernel.here())
    client.close()


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in BUGS:
        raise SystemExit(f"usage: guard_area.py {{{'|'.join(BUGS)}}}")
    main(sys.argv[1])
