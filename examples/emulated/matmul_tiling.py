"""A clean cube kernel: C = A x B tiled through L1 and L0, emulated. Every detector should stay silent.

Each of 4 cube blocks computes one 64 x 64 tile of C (fp32) from a 64 x K strip of A and a K x 64 strip of B
(fp16), K = 256 in four 64-deep steps: GM -> L1 on MTE2, L1 -> L0A/L0B on MTE1 (LOAD_2D), MMAD on the cube
(PIPE_M) accumulating in L0C, then L0C -> UB (V) and UB -> GM (MTE3). Flags order each hand-over, both ways:
MTE2 -> MTE1 -> M for the data, and M -> MTE1 -> MTE2 before L0A/L0B and L1 are refilled for the next step.

    sanitizerd run -t memcheck -t initcheck -t synccheck -- python examples/emulated/matmul_tiling.py
"""

from __future__ import annotations

import client_shim
from client_shim.emulator import Block, KernelEmulator
from client_shim.events import Pipe, Space

BLOCKS, M, N, K, STEP = 4, 64, 64, 256, 64
F16, F32 = 2, 4
A, B, C = 0x12C100000000, 0x12C110000000, 0x12C120000000


def main() -> None:
    client = client_shim.connect(device=0)
    client.device_summary("Ascend910B1", block_num=BLOCKS, device=0)
    kernel = KernelEmulator(client, "matmul_custom", block_dim=BLOCKS, kernel_type="aic")
    a = kernel.gm(A, BLOCKS * M * K * F16)
    b = kernel.gm(B, K * N * BLOCKS * F16)
    c = kernel.gm(C, BLOCKS * M * N * F32, initialized=False)

    def body(block: Block) -> None:
        a_l1, b_l1 = block.l1(0x0, M * STEP * F16), block.l1(0x10000, STEP * N * F16)
        a_l0, b_l0 = block.l0(Space.L0A, 0x0, M * STEP * F16), block.l0(Space.L0B, 0x0, STEP * N * F16)
        c_l0 = block.l0(Space.L0C, 0x0, M * N * F32, dtype_bytes=F32)
        c_ub = block.ub(0x0, M * N * F32, dtype_bytes=F32)
        for step in range(K // STEP):
            if step:  # the cube has finished with L0A/L0B before MTE1 refills them
                block.wait_flag(Pipe.M, Pipe.MTE1, 0)
                # and MTE1 has finished reading L1 before MTE2 refills it
                block.wait_flag(Pipe.MTE1, Pipe.MTE2, 0)
            block.data_copy(a_l1, a.tile((block.idx * K + step * STEP) * M * F16, M * STEP * F16))
            block.data_copy(b_l1, b.tile((block.idx * K + step * STEP) * N * F16, STEP * N * F16))
            block.set_flag(Pipe.MTE2, Pipe.MTE1, 0)
            block.wait_flag(Pipe.MTE2, Pipe.MTE1, 0)
            block.load_2d(a_l0, a_l1)
            block.load_2d(b_l0, b_l1)
            if step + 1 < K // STEP:
                block.set_flag(Pipe.MTE1, Pipe.MTE2, 0)
            block.set_flag(Pipe.MTE1, Pipe.M, 0)
            block.wait_flag(Pipe.MTE1, Pipe.M, 0)
            block.mmad(c_l0, a_l0, b_l0, m=M, k=STEP, n=N, accumulate=step > 0)
            if step + 1 < K // STEP:
                block.set_flag(Pipe.M, Pipe.MTE1, 0)
        block.set_flag(Pipe.M, Pipe.V, 0)
        block.wait_flag(Pipe.M, Pipe.V, 0)
        block.data_copy(c_ub, c_l0)
        block.set_flag(Pipe.V, Pipe.MTE3, 0)
        block.wait_flag(Pipe.V, Pipe.MTE3, 0)
        block.data_copy(c.tile(block.idx * M * N * F32, M * N * F32), c_ub)

    kernel.run(body)
    client.load(C, BLOCKS * M * N * F32)
    for address in (A, B, C):
        client.free(address)
    client.close()


if __name__ == "__main__":
    main()
