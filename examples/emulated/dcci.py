"""A value handed from one core to another through GM by scalar accesses, for racecheck's --check-dcci.

    sanitizerd run -t racecheck --check-dcci=yes -- python examples/emulated/dcci.py BUG

Two vector blocks. Block 0 writes a scalar into GM (``GlobalTensor::SetValue``, ``publish``) and cleans the
cache line that holds it (``dcci``), then every block takes part in an FFTS mode-0 cross-core flag on PIPE_S;
block 1, after its wait, invalidates that line and reads the scalar back (``GetValue``, ``consume``). The
cross-core flag orders the two accesses, so racecheck finds no race; but a scalar access goes through the core's
data cache, and without the dcci the write may sit in block 0's cache, or block 1 may read a stale line: that is
what msSanitizer's --check-dcci reports, as "Missing DCCI instructions detected on cross core data dependency".

BUG is one of the names in BUGS; ``none`` runs the clean kernel, silent under every tool. The bugs (each bug's
line is marked ``# BUG: name``, the lines a finding points at ``# line: name``):

- ``write_without_dcci``: block 0's dcci after its write is left out.
- ``read_without_dcci``: block 1's dcci before its read is left out.
- ``dcci_on_other_line``: block 1 cleans the line 256 bytes on (another cache line of the 910B), not its own.
- ``read_before_write``: no dcci anywhere, but block 1 reads before block 0 writes (block 0 waits for block 1's
  flag): the read cannot depend on the write, so nothing is reported.
"""

from __future__ import annotations

import sys

import client_shim
from client_shim.emulator import Block, KernelEmulator
from client_shim.events import Pipe

BLOCKS = 2
VALUE = 0x12C100000000
BUGS = ("none", "write_without_dcci", "read_without_dcci", "dcci_on_other_line", "read_before_write")


def main(bug: str) -> None:
    client = client_shim.connect(device=0)
    client.device_summary("Ascend910B1", block_num=BLOCKS, device=0)
    kernel = KernelEmulator(client, "dcci_custom", block_dim=BLOCKS)
    value = kernel.gm(VALUE, 512, dtype_bytes=4)
    late = bug == "read_before_write"

    def writer(block: Block) -> None:
        if late:
            block.cross_set(Pipe.S, 2, mode=0)
            block.cross_wait(2)
        block.set_value(value, 0)  # line: publish
        if bug not in ("write_without_dcci", "read_before_write"):
            block.dcci(value, 0)  # BUG: write_without_dcci
        if not late:
            block.cross_set(Pipe.S, 1, mode=0)
            block.cross_wait(1)

    def reader(block: Block) -> None:
        if not late:
            block.cross_set(Pipe.S, 1, mode=0)
            block.cross_wait(1)
        if bug == "dcci_on_other_line":
            block.dcci(value, 64)  # BUG: dcci_on_other_line
        elif bug not in ("read_without_dcci", "read_before_write"):
            block.dcci(value, 0)  # BUG: read_without_dcci
        block.get_value(value, 0)  # line: consume
        if late:
            block.cross_set(Pipe.S, 2, mode=0)
            block.cross_wait(2)

    def body(block: Block) -> None:
        (writer if block.idx == 0 else reader)(block)

    kernel.run(body)
    client.free(VALUE, location=kernel.here())
    client.close()


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in BUGS:
        raise SystemExit(f"usage: dcci.py {{{'|'.join(BUGS)}}}")
    main(sys.argv[1])
