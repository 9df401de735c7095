"""msSanitizer's own memcheck samples, emulated: the kernels of ``example/sample_memcheck`` (memcheck.asc) and
``example/sample_memcheck_advanced`` (memcheck_advanced.asc) as the client API describes them, with the sizes,
block types and allocations of the originals.

    sanitizerd run -t memcheck -- python examples/emulated/mssanitizer_samples.py MODE [--fixed]

MODE is one of:

* ``ub-oob``: sample_memcheck's ``bounds_write_demo``, one vector block: ``DataCopy`` of 256 floats from GM into a
  UB tensor of 64 floats. msSanitizer's README: ``ERROR: illegal write of size 768`` / ``at 0x0 on UB in ...`` /
  ``in block aiv(0) on device 0``.
* ``l1-oob``: ``l1_out_of_bounds``, one cube block: 256 floats from GM into a 64-float L1 tensor (``illegal write``,
  ``on L1``, ``block aic(...)``).
* ``l1-oob-read``: ``l1_read_out_of_bounds``: 64 floats into a 64-float L1 tensor, then 256 floats out of it to GM
  (``illegal read``, ``on L1``).
* ``multi-core``: ``multi_core_stomp``, two vector blocks each ``SetValue(0, ...)`` on the same GM float
  (``WARNING: out of bounds of size 4`` ... ``in block aiv(1)``).

``--fixed`` runs the README's fix: tensors as large as the copies (and one float per block for multi-core); those
are clean. Allocations are reported as msSanitizer's ACL hooks report them (``acl_padding``).
"""

from __future__ import annotations

import sys

import client_shim
from client_shim.emulator import Block, KernelEmulator

FLOAT = 4
ELEMENTS, L1_ELEMENTS = 256, 64  # kElements / elemCnt, and kL1Elements / allocCnt
BUF = 0x12C0C0000000
MODES = ("ub-oob", "l1-oob", "l1-oob-read", "multi-core")
KERNELS = {
    "ub-oob": ("bounds_write_demo", "aiv", 1),
    "l1-oob": ("l1_out_of_bounds", "aic", 1),
    "l1-oob-read": ("l1_read_out_of_bounds", "aic", 1),
    "multi-core": ("multi_core_stomp", "aiv", 2),
}


def main(mode: str, fixed: bool) -> None:
    client = client_shim.connect(device=0)
    client.device_summary("Ascend910B1", block_num=24, device=0)
    name, kernel_type, blocks = KERNELS[mode]
    kernel = KernelEmulator(client, name, block_dim=blocks, kernel_type=kernel_type, acl_padding=True)
    # aclrtMalloc + aclrtMemset of the kernel's buffer: (kElements + 8) floats in the advanced sample, elemCnt floats
    # in the first one.
    size = ELEMENTS * FLOAT if mode == "ub-oob" else (ELEMENTS + 8) * FLOAT
    buf = kernel.gm(BUF, size, FLOAT)
    gm = buf.tile(0, ELEMENTS * FLOAT)
    allocated = ELEMENTS if fixed else L1_ELEMENTS

    def body(block: Block) -> None:
        if mode == "ub-oob":
            local = block.ub(0, allocated * FLOAT, FLOAT)  # ubAlloc.Alloc<float, allocCnt>()
            block.data_copy(local, gm, ELEMENTS)  # DataCopy(localBuf, srcGlobal, elemCnt)
        elif mode == "l1-oob":
            local = block.l1(0, allocated * FLOAT, FLOAT)  # l1Alloc.Alloc<float, kL1Elements>()
            block.data_copy(local, gm, ELEMENTS)
        elif mode == "l1-oob-read":
            local = block.l1(0, allocated * FLOAT, FLOAT)
            block.data_copy(local, gm, L1_ELEMENTS)  # the legal part, written first
            block.data_copy(gm, local, ELEMENTS)  # then 256 floats out of it
        else:
            block.set_value(gm, block.idx if fixed else 0)  # output.SetValue(0, GetBlockIdx() + 1)

    kernel.run(body)
    client.free(BUF, location=kernel.here())
    client.close()


if __name__ == "__main__":
    args = sys.argv[1:]
    fixed = "--fixed" in args
    args = [a for a in args if a != "--fixed"]
    if len(args) != 1 or args[0] not in MODES:
        raise SystemExit(f"usage: mssanitizer_samples.py {{{'|'.join(MODES)}}} [--fixed]")
    main(args[0], fixed)
