"""sanitizerd's detectors and msSanitizer's, side by side on identical record streams (issue 29).

Each stream is made once, as the bytes msSanitizer's hooks send on the wire of its master revision (``--layout``):
a DEVICE_SUMMARY (910B1), the host's mallocs (and, for initcheck, the host stores that fill the inputs) as
SANITIZER_RECORD packets of MemOpRecords, a KERNEL_SUMMARY, and one KERNEL_RECORD slot per block ([RecordGlobalHead]
[RecordBlockHead][records]). The kernel is benchmarks/racecheck.py's double-buffered add with a fused multiply, as
msSanitizer's records: per tile WAIT_FLAG(MTE3->MTE2), 2 DMA_MOV GM->UB, SET/WAIT_FLAG(MTE2->V), BINARY_OP add,
PIPE_BARRIER(V), BINARY_OP mul, SET/WAIT_FLAG(V->MTE3), DMA_MOV UB->GM, SET_FLAG(MTE3->MTE2) (12 records; the first
two tiles wait for nothing and the last two signal nobody), a PIPE_BARRIER(ALL) every 1 000 tiles (racecheck.py's
SyncAll without its cross-core flag pair). "contiguous": each DMA_MOV moves one 512-byte burst; "strided x8": eight
32-byte bursts with a 32-byte gap on the GM side (the GM read and write of each tile are 8 separate blocks). Every
stream is valid (no finding is due); ``--plant`` plants a bug in each, which both sides must report.

Ours: the bytes through ``CompatConnection`` (the compat door's framing, slot walk and conversion to events) and
the session's detectors, called in this process in arrival order, CPU time of the process (``time.process_time``);
also the detectors alone on the events the connection made (the native form of the same events). Theirs, with
``--mssanitizer-driver PATH`` (benchmarks/mssanitizer_driver: build.sh builds it from an msSanitizer source tree):
the same file through msSanitizer's MemCheckProtocol, KernelBlock walk, RecordPreProcess and Checker with the same
tools, CPU time of its whole process (its checker runs a thread per tool) from the first packet to the last
kernel's end. Runs alternate (ours, theirs, ours, ...), best of ``--repeat``.

    .venv/bin/python benchmarks/side_by_side.py [--quick] [--repeat 3] [--only racecheck]
        [--mssanitizer-driver /tmp/mss-build/mssanitizer_driver]

Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import numpy as np

from sanitizerd.chips import chip_named
from sanitizerd.compat import wire
from sanitizerd.compat.packets.connection import CompatConnection
from sanitizerd.compat.records import slots
from sanitizerd.compat.records.numbering import record_table
from sanitizerd.compat.records.types import MemType, PipeType, RecordType
from sanitizerd.detectors import create_detectors
from sanitizerd.detectors.base import KernelLaunch, SessionContext
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.records import EVENT_DTYPE

TILE = 512  # bytes of x, y and z per tile (racecheck.py's)
GM_X, GM_Y, GM_Z = 0x12C0C0000000, 0x12C200000000, 0x12C400000000
SYNC_ALL_EVERY = 1000
PC_START = 0x100000
DEVICE_910B1 = 2
BLOCK_TYPE_AIVEC = 0  # msSanitizer's BlockType (record_defs.h)
ADDRESS_SPACE_GM = 1  # msSanitizer's AddressSpace (include/sanitizer_report.h)


class Wire:
    """One release's structs, as numpy dtypes to fill by name."""

    def __init__(self, name: str) -> None:
        layout = wire.layout_named(name)
        if layout is None:
            raise SystemExit(f"no measured wire named {name!r}")
        self.layout = layout
        self.table = record_table(layout)

    def packet(self, packet: wire.PacketType, payload: bytes) -> bytes:
        number = self.layout.packet_number(packet)
        if packet in (wire.PacketType.KERNEL_RECORD, wire.PacketType.KERNEL_BINARY):
            return np.array([number], "<u4").tobytes() + np.array([len(payload)], "<u8").tobytes() + payload
        return np.array([number], "<u4").tobytes() + payload

    def struct(self, name: str, **fields: object) -> bytes:
        layout = self.layout.structs[name]
        value = np.zeros(1, dtype=layout.dtype)
        for key, v in fields.items():
            value[key] = v
        return value.tobytes()

    def records(self, record_type: RecordType, n: int, **fields: object) -> np.ndarray:
        """``n`` records of ``record_type`` as rows of bytes (the u32 type word, then the payload struct)."""
        payload = self.table.dtypes[int(record_type)]
        size = self.table.payload_size[int(record_type)]
        names = list(payload.names)
        dtype = np.dtype(
            {
                "names": ["type", *names],
                "formats": ["<u4", *[payload.fields[k][0] for k in names]],
                "offsets": [0, *[4 + payload.fields[k][1] for k in names]],
                "itemsize": 4 + size,
            }
        )
        rows = np.zeros(n, dtype=dtype)
        rows["type"] = self.table.wire(record_type)
        for key, v in fields.items():
            rows[key] = v
        return rows.view(np.uint8).reshape(n, dtype.itemsize)


@dataclass(frozen=True)
class Stream:
    name: str
    checks: tuple[str, ...]  # our tool names; the driver gets the same
    blocks: int
    tiles: int
    strided: bool = False
    plant: bool = False  # a bug both sides must find: z half allocated, y never written, or a missing wait


def _location(w: Wire, rt: RecordType, n: int, instr: int, block: int, **fields: object) -> np.ndarray:
    return w.records(rt, n, pc=PC_START + 4 * instr, line_no=40 + instr, file_no=1, block_id=block, **fields)


def _tiles(w: Wire, block: int, first: int, count: int, total: int, stream: Stream) -> tuple[bytes, int]:
    """Tiles ``first``.. ``first + count`` of a block's loop as records, tile after tile, and their number."""
    strided = stream.strided
    t = np.arange(first, first + count, dtype=np.uint64)
    ping = (t % 2).astype(np.uint64)
    ub = ping * np.uint64(0x3000)
    xs, ys, ts, zs = ub, ub + np.uint64(0x800), ub + np.uint64(0x1000), ub + np.uint64(0x1800)
    gm = (np.uint64(block) * np.uint64(total) + t) * np.uint64(TILE)
    n = t.size
    S, P = RecordType, PipeType
    GM, UB = MemType.GM, MemType.UB
    # contiguous: one burst of TILE bytes (lenBurst in 32-byte units); strided: 8 bursts of 32 bytes, 32-byte gaps
    # on the GM side, contiguous on UB. The vector ops then cover what the DMA brought: 2 or 1 repeat of 8 blocks.
    bursts, burst_len, gap = (8, 1, 1) if strided else (1, TILE // 32, 0)
    repeat = (bursts * burst_len) // 8

    def dma(instr: int, src: np.ndarray, dst: np.ndarray, src_mem: int, dst_mem: int, src_gap: int, dst_gap: int):
        return _location(w, S.DMA_MOV, n, instr, block, src=src, dst=dst, n_burst=bursts, len_burst=burst_len,
                         src_stride=src_gap, dst_stride=dst_gap, src_mem=src_mem, dst_mem=dst_mem)  # fmt: skip

    def flag(instr: int, rt: RecordType, src: int, dst: int) -> np.ndarray:
        return _location(w, rt, n, instr, block, src=src, dst=dst, event_id=ping)

    def binary(instr: int, dst: np.ndarray, src0: np.ndarray, src1: np.ndarray) -> np.ndarray:
        full = (1 << 64) - 1
        return _location(
            w, S.BINARY_OP, n, instr, block, dst=dst, src0=src0, src1=src1, mask0=full, mask1=full,
            dst_block_stride=1, src0_block_stride=1, src1_block_stride=1,
            dst_repeat_stride=8, src0_repeat_stride=8, src1_repeat_stride=8,
            dst_block_size=32, src0_block_size=32, src1_block_size=32, repeat=repeat,
            dst_block_num=8, src0_block_num=8, src1_block_num=8, dst_data_bits=16, src0_data_bits=16,
            src1_data_bits=16,
        )  # fmt: skip

    columns = [
        flag(0, S.WAIT_FLAG, P.PIPE_MTE3, P.PIPE_MTE2),
        dma(1, np.uint64(GM_X) + gm, xs, GM, UB, gap, 0),
        dma(2, np.uint64(GM_Y) + gm, ys, GM, UB, gap, 0),
        flag(3, S.SET_FLAG, P.PIPE_MTE2, P.PIPE_V),
        flag(4, S.WAIT_FLAG, P.PIPE_MTE2, P.PIPE_V),
        binary(5, ts, xs, ys),
        _location(w, S.PIPE_BARRIER, n, 6, block, pipe=P.PIPE_V),
        binary(7, zs, ts, xs),
        flag(8, S.SET_FLAG, P.PIPE_V, P.PIPE_MTE3),
        flag(9, S.WAIT_FLAG, P.PIPE_V, P.PIPE_MTE3),
        dma(10, zs, np.uint64(GM_Z) + gm, UB, GM, 0, gap),
        flag(11, S.SET_FLAG, P.PIPE_MTE3, P.PIPE_MTE2),
    ]
    if stream.plant and "racecheck" in stream.checks:  # MTE3 reads z[ping] without waiting for V to write it
        del columns[9]
    rows = np.concatenate(columns, axis=1)
    width = [c.shape[1] for c in columns]
    wait_end, set_start = width[0], rows.shape[1] - width[-1]
    # The first two tiles wait for nothing and the last two signal nobody: those rows are cut, the rest are whole.
    mid_start = min(n, max(0, 2 - first))
    mid_end = max(mid_start, min(n, total - 2 - first))
    out = []
    for i in range(mid_start):
        out.append(rows[i, wait_end : set_start if first + i >= total - 2 else None].tobytes())
    out.append(rows[mid_start:mid_end].tobytes())
    for i in range(mid_end, n):
        out.append(rows[i, wait_end if first + i < 2 else 0 : set_start].tobytes())
    cut = int(np.count_nonzero(t < 2) + np.count_nonzero(t >= total - 2))  # the waits and sets left out
    return b"".join(out), n * len(columns) - cut


def block_region(w: Wire, block: int, tiles: int, stream: Stream) -> tuple[bytes, int]:
    """A block's record region and its record count."""
    parts = []
    records = 0
    for first in range(0, tiles, SYNC_ALL_EVERY):
        count = min(SYNC_ALL_EVERY, tiles - first)
        data, n = _tiles(w, block, first, count, tiles, stream)
        parts.append(data)
        records += n
        if first + count < tiles:
            barrier = _location(w, RecordType.PIPE_BARRIER, 1, 12, block, pipe=PipeType.PIPE_ALL)
            parts.append(barrier.tobytes())
            records += 1
    return b"".join(parts), records


def slot(w: Wire, block: int, blocks: int, tiles: int, stream: Stream) -> tuple[bytes, int]:
    region, records = block_region(w, block, tiles, stream)
    layout = w.layout
    head = np.zeros(1, dtype=layout.global_head.dtype)
    head["securityVal"] = slots.SECURITY_VALUE
    head["checkParms.cacheSize"] = 100
    head["checkParms.checkBlockId"] = -1
    head["kernelInfo.totalBlockDim"] = blocks
    head["kernelInfo.kernelType"] = wire.KernelType.AIVEC
    if "offsetInfo.blockHeadSize" in (head.dtype.names or ()):
        head["offsetInfo.blockHeadSize"] = -(-layout.block_head.size // 64) * 64
    block_head = np.zeros(1, dtype=layout.block_head.dtype)
    block_head["recordCount"] = block_head["recordWriteCount"] = records
    block_head["offset"] = block_head["writeOffset"] = len(region)
    block_head["blockInfo.blockId"] = block
    block_head["blockInfo.blockType"] = BLOCK_TYPE_AIVEC
    block_head["blockInfo.vecSubBlockDim"] = 1
    return head.tobytes() + block_head.tobytes() + region, records


def host_record(w: Wire, serial: int, op: wire.MemOpType, dst: int, size: int, src: int = 0) -> bytes:
    body = w.struct(
        "MemOpRecord", serialNo=serial, type=op, coreId=-1, moduleId=-1, srcAddr=src, dstAddr=dst, memSize=size,
        srcSpace=ADDRESS_SPACE_GM, dstSpace=ADDRESS_SPACE_GM, infoSrc=wire.MemInfoSrc.ACL,
        infoDesc=wire.MemInfoDesc.DEFAULT, side=0,  # MemOpSide::HOST; the fields as the tool fills a host record
    )  # fmt: skip
    record = bytearray(w.layout.structs["SanitizerRecord"].size)
    record[0:4] = np.array([wire.RecordVersion.MEMORY_RECORD], "<u4").tobytes()
    at = w.layout.sanitizer_record_payload_offset
    record[at : at + len(body)] = body
    return w.packet(wire.PacketType.SANITIZER_RECORD, bytes(record))


def build(w: Wire, stream: Stream) -> tuple[bytes, int]:
    """The whole connection's bytes and the number of records in it (kernel records and host records)."""
    size = stream.blocks * stream.tiles * TILE
    device = w.struct("DeviceInfoSummary", device=DEVICE_910B1, blockSize=32, blockNum=24, deviceId=0)
    out = [w.packet(wire.PacketType.DEVICE_SUMMARY, device)]
    z_size = size // 2 if stream.plant and stream.checks == ("memcheck",) else size  # half of z's writes illegal
    host = [(wire.MemOpType.MALLOC, base, n, 0) for base, n in ((GM_X, size), (GM_Y, size), (GM_Z, z_size))]
    if "initcheck" in stream.checks:  # the inputs written by the host; z is written before it is read
        inputs = (GM_X,) if stream.plant else (GM_X, GM_Y)  # planted: y is read uninitialized
        host += [(wire.MemOpType.STORE, base, size, 0) for base in inputs]
    out += [host_record(w, i + 1, op, dst, n, src) for i, (op, dst, n, src) in enumerate(host)]
    out.append(w.packet(wire.PacketType.KERNEL_SUMMARY, w.struct(
        "KernelSummary", pcStartAddr=PC_START, blockDim=stream.blocks, kernelType=wire.KernelType.AIVEC,
        hasDebugLine=1, kernelName=b"add_custom")))  # fmt: skip
    records = len(host)
    for block in range(stream.blocks):
        data, n = slot(w, block, stream.blocks, stream.tiles, stream)
        out.append(w.packet(wire.PacketType.KERNEL_RECORD, data))
        records += n
    return b"".join(out), records


def _messages(w: Wire, data: bytes) -> list[m.Message]:
    connection = CompatConnection(w.layout, job="side-by-side", peer_pid=0)
    out: list[m.Message] = []
    for at in range(0, len(data), 1 << 20):  # as recv() gives them
        connection.receive_data(data[at : at + (1 << 20)])
        while isinstance(message := connection.next_event(), m.Message):
            out.append(message)
    connection.receive_data(b"")
    while isinstance(message := connection.next_event(), m.Message):
        out.append(message)
    return out


def _detect(messages: list[m.Message] | None, stream: Stream, w: Wire, data: bytes) -> tuple[int, int, list[str]]:
    """The session's detectors over the messages (decoded here from ``data`` when ``messages`` is None, inside the
    caller's timing): (findings, events, problems)."""
    if messages is None:
        messages = _messages(w, data)
    context = SessionContext(job="side-by-side", session=1, pid=0, device=0, chip=chip_named("910B1"),
                             config=m.Config(tools=list(stream.checks)))  # fmt: skip
    detectors = create_detectors(context)
    findings = events = 0
    problems: list[str] = []
    for message in messages:
        if isinstance(message, m.HostOp):
            for d in detectors:
                findings += len(d.host_op(message))
        elif isinstance(message, m.KernelBegin):
            launch = KernelLaunch(message.kernel, message.name, message.block_dim, message.kernel_type)
            for d in detectors:
                d.kernel_begin(launch)
        elif isinstance(message, m.Events):
            batch = np.frombuffer(message.records, dtype=EVENT_DTYPE)
            events += batch.size
            for d in detectors:
                d.check(batch)
        elif isinstance(message, m.KernelEnd):
            problems += message.problems
            for d in detectors:
                findings += len(d.kernel_end())
    return findings, events, problems


def ours(stream: Stream, w: Wire, data: bytes, messages: list[m.Message] | None) -> tuple[float, int, int]:
    cpu = time.process_time()
    findings, events, problems = _detect(messages, stream, w, data)
    cpu = time.process_time() - cpu
    if problems:
        raise SystemExit(f"{stream.name}: the compat door said: {problems[:3]}")
    return cpu, findings, events


def theirs(driver: str, path: str, stream: Stream) -> dict:
    done = subprocess.run([driver, path, ",".join(stream.checks)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{driver} failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def streams(quick: bool, plant: bool = False) -> list[Stream]:
    mem_tiles = 500 if quick else 5600
    race = (200, 1000) if quick else (1000, 5600, 20000)
    return [
        Stream("memcheck, contiguous", ("memcheck",), 8, mem_tiles, plant=plant),
        Stream("memcheck, strided x8", ("memcheck",), 8, mem_tiles, strided=True, plant=plant),
        Stream("memcheck+initcheck", ("memcheck", "initcheck"), 8, mem_tiles, plant=plant),
        *[Stream(f"racecheck, {n} iterations", ("racecheck",), 8, n, plant=plant) for n in race],
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small streams (memcheck 8 x 500 tiles; racecheck 200, "
                        "1 000 iterations), one run each")  # fmt: skip
    parser.add_argument("--repeat", type=int, default=3, help="runs of each side per stream, alternating [3]")
    parser.add_argument("--mssanitizer-driver", default="", help="benchmarks/mssanitizer_driver's binary")
    parser.add_argument("--layout", default="master", help="the wire of the driver's msSanitizer source [master]")
    parser.add_argument("--only", default="", help="run only the streams whose name contains this")
    parser.add_argument("--plant", action="store_true", help="plant a bug in each stream (z half allocated; y never "
                        "written; no WAIT_FLAG(V->MTE3)): both sides must report it")  # fmt: skip
    args = parser.parse_args()
    repeat = 1 if args.quick else args.repeat
    w = Wire(args.layout)
    rows = []
    with tempfile.TemporaryDirectory(prefix="side-by-side-") as scratch:
        for stream in streams(args.quick, args.plant):
            if args.only and args.only not in stream.name:
                continue
            data, records = build(w, stream)
            path = os.path.join(scratch, "stream.bin")
            with open(path, "wb") as f:
                f.write(data)
            messages = _messages(w, data)  # once, for the detectors-alone figure
            row: dict[str, object] = {"stream": stream.name, "checks": list(stream.checks), "blocks": stream.blocks,
                                      "tiles": stream.tiles, "records": records, "bytes": len(data)}  # fmt: skip
            ours_cpu, native_cpu, their_runs = [], [], []
            for _ in range(repeat):
                cpu, findings, events = ours(stream, w, data, None)
                ours_cpu.append(cpu)
                native, native_findings, _ = ours(stream, w, data, messages)
                native_cpu.append(native)
                if args.mssanitizer_driver:
                    their_runs.append(theirs(args.mssanitizer_driver, path, stream))
            row.update(events=events, ours_cpu_s=min(ours_cpu), ours_findings=findings,
                       ours_detectors_cpu_s=min(native_cpu), ours_detectors_findings=native_findings,
                       ours_records_per_cpu_s=round(records / min(ours_cpu)))  # fmt: skip
            if their_runs:
                best = min(their_runs, key=lambda r: r["cpu_s"])
                if best["records"] != records:  # the driver walked another stream than the one built
                    raise SystemExit(f"{stream.name}: msSanitizer's driver read {best['records']} records of {records}")
                row.update(
                    theirs_cpu_s=best["cpu_s"], theirs_findings=best["findings"], theirs_records=best["records"],
                    theirs_walk_cpu_s=best.get("walk_cpu_s"), theirs_producer_cpu_s=best.get("producer_cpu_s"),
                    theirs_records_per_cpu_s=round(best["records"] / best["cpu_s"]) if best["cpu_s"] else None,
                    theirs_over_ours=round(best["cpu_s"] / min(ours_cpu), 2) if min(ours_cpu) else None,
                )  # fmt: skip
            rows.append(row)
            print(_line(row), flush=True)
    result = {"layout": w.layout.name, "repeat": repeat, "quick": args.quick, "plant": args.plant,
              "driver": bool(args.mssanitizer_driver),
              "python": sys.version.split()[0], "rows": rows}  # fmt: skip
    print(json.dumps(result))


def _line(row: dict) -> str:
    text = (f"{row['stream']:<28} {row['records']:>9,} records  ours {row['ours_cpu_s']:.3f} CPU-s "
            f"({row['ours_findings']} findings; detectors alone {row['ours_detectors_cpu_s']:.3f})")  # fmt: skip
    if "theirs_cpu_s" in row:
        text += (f"  msSanitizer {row['theirs_cpu_s']:.3f} CPU-s ({row['theirs_findings']} findings)  "
                 f"theirs/ours {row['theirs_over_ours']}")  # fmt: skip
    return text


if __name__ == "__main__":
    main()
