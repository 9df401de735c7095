"""A clean kernel: AscendC's double-buffered add, emulated. Every detector should stay silent.

Each of 8 vector blocks adds its 16 KiB slice of x and y into z, 512 bytes at a time, alternating two UB
buffers so that copying in tile i+1 overlaps computing tile i; event ids 0 and 1 keep the two buffers'
flags apart. Run it with every detector on:

    sanitizerd run -t memcheck -t initcheck -t synccheck -- python examples/emulated/add_double_buffer.py
"""

from __future__ import annotations

import client_shim
from client_shim.emulator import Block, KernelEmulator
from client_shim.events import Pipe

BLOCKS, SLICE, TILE = 8, 16 * 1024, 512
X, Y, Z = 0x12C0C0000000, 0x12C0D0000000, 0x12C0E0000000


def main() -> None:
    client = client_shim.connect(device=0)
    client.device_summary("Ascend910B1", block_num=BLOCKS, device=0)
    kernel = KernelEmulator(client, "add_custom", block_dim=BLOCKS)
    x, y = kernel.gm(X, BLOCKS * SLICE), kernel.gm(Y, BLOCKS * SLICE)
    z = kernel.gm(Z, BLOCKS * SLICE, initialized=False)

    def body(block: Block) -> None:
        base = block.idx * SLICE
        buffers = [(block.ub(0x0, TILE), block.ub(0x200, TILE), block.ub(0x400, TILE)),
                   (block.ub(0x600, TILE), block.ub(0x800, TILE), block.ub(0xA00, TILE))]  # fmt: skip
        for i in range(SLICE // TILE):
            xs, ys, zs = buffers[i % 2]
            ping = i % 2
            if i >= 2:  # the buffer's previous result must have left UB before we overwrite its inputs
                block.wait_flag(Pipe.MTE3, Pipe.MTE2, ping)
            block.data_copy(xs, x.tile(base + i * TILE, TILE))
            block.data_copy(ys, y.tile(base + i * TILE, TILE))
            block.set_flag(Pipe.MTE2, Pipe.V, ping)
            block.wait_flag(Pipe.MTE2, Pipe.V, ping)
            block.vector(zs, [xs, ys], repeat=TILE // 256)
            block.set_flag(Pipe.V, Pipe.MTE3, ping)
            block.wait_flag(Pipe.V, Pipe.MTE3, ping)
            block.data_copy(z.tile(base + i * TILE, TILE), zs)
            if i + 2 < SLICE // TILE:
                block.set_flag(Pipe.MTE3, Pipe.MTE2, ping)

    kernel.run(body)
    client.load(Z, BLOCKS * SLICE)
    for address in (X, Y, Z):
        client.free(address)
    client.close()


if __name__ == "__main__":
    main()
