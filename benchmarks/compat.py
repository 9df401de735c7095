"""Decoding speed of msSanitizer record buffers (issue 11): records/s of ``SlotDecoder`` on one core for the record
mix of an AscendC vector kernel's tile loop (DataCopy in x 2, set/wait MTE2->V, a binary vector op, set/wait
V->MTE3, DataCopy out, set/wait MTE3->MTE2, one pipe_barrier), the record region fed in chunks as a connection
feeds it. Prints the best of ``--repeats`` runs.

    PYTHONPATH=. .venv/bin/python benchmarks/compat.py [--records 2000000] [--chunk-mib 2] [--repeats 3] [--shuffle]
        [--connection [--binary ELF]]

``--connection`` sends the slot through ``CompatConnection`` (a KERNEL_SUMMARY and the KERNEL_RECORD packet, read
1 MiB at a time): what the sans-I/O layer adds to the decoder. ``--shuffle`` puts the same records in a random
order: the walk then cannot predict a loop and walks in lockstep. ``--binary`` sends a kernel ELF first, as the
hooks always do, so that each record's pc is looked up in it (tests/test_report_shape.py compiles one).

BINARY_OP counts as a vector record only where its converter is registered (the vector family); without it the
figure says so, and those records are walked and counted as not converted.
"""

from __future__ import annotations

import argparse
import struct
import sys
import time
from pathlib import Path

import numpy as np

from sanitizerd import allocator, native
from sanitizerd.chips import CHIPS
from sanitizerd.compat import wire as _wire
from sanitizerd.compat.packets.connection import CHUNK_SIZE, CompatConnection
from sanitizerd.compat.records import slots as rb
from sanitizerd.compat.records.convert import CONVERTERS, BlockContext
from sanitizerd.compat.records.numbering import record_table as _record_table
from sanitizerd.compat.records.types import MemType, PipeType, RecordType
from sanitizerd.compat.wire import DEFAULT_LAYOUT, LAYOUTS
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.records import EVENT_DTYPE

APRIL = _wire.MSSANITIZER_4A419F05
APRIL_RECORDS = _record_table(APRIL)

GM, UB = MemType.GM, MemType.UB


def location(pc: int) -> bytes:
    return struct.pack("<QQQH6x", 1, 40 + pc % 7, 0x1000 + pc * 4, 0)


def dma(pc: int, src: int, dst: int, src_mem: int, dst_mem: int) -> bytes:
    return (
        struct.pack("<IQQ", RecordType.DMA_MOV, dst, src)
        + location(pc)
        + struct.pack("<HHHHBBBB4x", 1, 64, 0, 0, dst_mem, src_mem, 0, 0)
    )


def flag(pc: int, record_type: int, src: int, dst: int, event: int) -> bytes:
    return struct.pack("<I", record_type) + location(pc) + struct.pack("<IIQB7x", src, dst, event, 0)


def barrier(pc: int, pipe: int) -> bytes:
    return struct.pack("<I", RecordType.PIPE_BARRIER) + location(pc) + struct.pack("<I4x", pipe)


def binary(pc: int, dst: int, src0: int, src1: int) -> bytes:
    # BinaryOpRecord: 3 addresses, Location, VectorMask, 3 block strides, 3 repeat strides, 3 block sizes, repeat,
    # 3 block numbers, 3 data bits, mask mode (offsets measured on msSanitizer's headers; sizeof 104).
    head = struct.pack("<IQQQ", RecordType.BINARY_OP, dst, src0, src1) + location(pc)
    tail = struct.pack("<QQ", ~0 & (2**64 - 1), ~0 & (2**64 - 1))
    tail += struct.pack("<HHHHHHHHHBBBBBBBB6x", 1, 1, 1, 8, 8, 8, 32, 32, 32, 8, 8, 8, 8, 16, 16, 16, 0)
    return head + tail


def tile(i: int) -> list[bytes]:
    x, y, z = 0x10000000 + i * 2048, 0x20000000 + i * 2048, 0x30000000 + i * 2048
    S = RecordType
    P = PipeType
    return [
        dma(0, x, 0x0, GM, UB),
        dma(1, y, 0x800, GM, UB),
        flag(2, S.SET_FLAG, P.PIPE_MTE2, P.PIPE_V, 0),
        flag(3, S.WAIT_FLAG, P.PIPE_MTE2, P.PIPE_V, 0),
        binary(4, 0x1000, 0x0, 0x800),
        flag(5, S.SET_FLAG, P.PIPE_V, P.PIPE_MTE3, 0),
        flag(6, S.WAIT_FLAG, P.PIPE_V, P.PIPE_MTE3, 0),
        dma(7, 0x1000, z, UB, GM),
        flag(8, S.SET_FLAG, P.PIPE_MTE3, P.PIPE_MTE2, 0),
        flag(9, S.WAIT_FLAG, P.PIPE_MTE3, P.PIPE_MTE2, 0),
        barrier(10, P.PIPE_V),
    ]


def build(records: int, shuffle: bool = False) -> tuple[bytes, int]:
    one = tile(0)
    tiles = -(-records // len(one))
    count = tiles * len(one)
    if shuffle:  # the same records in a random order: no loop for the walk to predict
        order = np.random.default_rng(0).integers(0, len(one), count)
        region = b"".join([one[i] for i in order.tolist()])
    else:  # the tile's bytes repeated (the decoder's speed does not depend on the addresses differing)
        region = b"".join(one) * tiles
    head = bytearray(APRIL.heads_size)
    struct.pack_into("<Q", head, 0, rb.SECURITY_VALUE)
    struct.pack_into("<QQQQ", head, APRIL.global_head.size, count, count, len(region), len(region))
    struct.pack_into("<B", head, APRIL.global_head.size + 49, 2)
    struct.pack_into("<I", head, 24, 1)  # kernelInfo.totalBlockDim: one slot, so the kernel ends with it
    return bytes(head) + region, count


def packets(data: bytes, elf: bytes = b"") -> bytes:
    """The slot as the hooks send it: a KERNEL_SUMMARY, the kernel's ELF if given (KERNEL_BINARY; its code then
    starts at 0x1000, where the records' pcs are), then the KERNEL_RECORD packet."""
    summary = bytearray(2064)
    struct.pack_into("<QIB", summary, 0, 0x1000 if elf else 0, 1, 1)
    summary[15:25] = b"benchmark\0"
    binary = struct.pack("<IQ", 2, len(elf)) + elf if elf else b""
    return struct.pack("<I", 1) + bytes(summary) + binary + struct.pack("<IQ", 1001, len(data)) + data


def through_connection(reads: list[bytes]) -> tuple[int, int, list[str]]:
    """``packets`` through ``CompatConnection`` in the pieces a socket gives them: framing, chunking and the
    ``events`` messages included."""
    connection = CompatConnection(LAYOUTS[DEFAULT_LAYOUT], job="benchmark", peer_pid=0)
    events = 0
    problems: list[str] = []
    for data in reads:
        connection.receive_data(data)
        while isinstance(message := connection.next_event(), m.Message):
            if isinstance(message, m.Events):
                events += message.records.nbytes // EVENT_DTYPE.itemsize
            elif isinstance(message, m.KernelEnd):
                problems = message.problems
    return events, events, problems


def decode(data: bytes, chunk: int) -> tuple[int, int, list[str]]:
    """Feed the record region as a connection does: up to ``chunk`` new bytes at a time, after whatever the decoder
    left unconsumed (here a view of the same buffer, so the harness copies nothing)."""
    decoder = rb.SlotDecoder(rb.read_heads(data, APRIL), BlockContext(0, CHIPS["910B1"]), 0)
    region = memoryview(data)[APRIL.heads_size :]
    events = 0
    consumed = 0
    arrived = 0
    while True:
        arrived = min(arrived + chunk, len(region))
        final = arrived == len(region)
        out, used = decoder.feed(region[consumed:arrived], final)
        events += len(out)
        consumed += used
        if final:
            return decoder.records, events, decoder.problems()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--chunk-mib", type=float, default=CHUNK_SIZE / (1 << 20))  # as the connection feeds
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--shuffle", action="store_true", help="the records in a random order (no loop to predict)")
    parser.add_argument("--connection", action="store_true", help="through CompatConnection, 1 MiB socket reads")
    parser.add_argument("--binary", default="", help="with --connection: send this kernel ELF, as the hooks do")
    args = parser.parse_args()
    allocator.tune()  # as the daemon runs (sanitizerd/allocator.py)
    data, count = build(args.records, args.shuffle)
    elf = Path(args.binary).read_bytes() if args.binary else b""
    stream = packets(data, elf) if args.connection else b""
    reads = [stream[at : at + (1 << 20)] for at in range(0, len(stream), 1 << 20)]  # as recv() gives them
    chunk = int(args.chunk_mib * (1 << 20))
    vector = RecordType.BINARY_OP in CONVERTERS
    best = cpu = float("inf")
    for _ in range(args.repeats):
        started, cpu_started = time.perf_counter(), time.process_time()
        if args.connection:
            _, events, problems = through_connection(reads)
            records = count
        else:
            records, events, problems = decode(data, chunk)
        best = min(best, time.perf_counter() - started)
        cpu = min(cpu, time.process_time() - cpu_started)
    assert records == count, (records, count)
    print(f"command: {' '.join(['benchmarks/compat.py', *sys.argv[1:]])}")
    print(f"records: {count:,} in {len(data) - APRIL.heads_size:,} bytes, chunks of {args.chunk_mib:g} MiB, "
          f"numpy {np.__version__}, one core")  # fmt: skip
    compiled = native.built().get("_records", False)
    print(f"record decoder: {'compiled (sanitizerd.native._records)' if compiled else 'numpy'}")
    print(f"mix per tile: 3 DMA_MOV, 6 SET/WAIT_FLAG, 1 PIPE_BARRIER, 1 BINARY_OP "
          f"({'converted' if vector else 'NOT converted on this branch: walked and counted only'})")  # fmt: skip
    print(f"best of {args.repeats}: {best:.3f} s = {count / best / 1e6:.2f} M records/s, {events / best / 1e6:.2f} "
          f"M events/s ({events:,} events)")  # fmt: skip
    # CPU time: what the decoder costs one core even when other work shares the machine.
    print(f"best CPU time: {cpu:.3f} s = {count / cpu / 1e6:.2f} M records/s")
    for line in problems:
        print(f"problem: {line}")


if __name__ == "__main__":
    main()
