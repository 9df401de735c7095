"""msSanitizer's SIMT thread areas (26.1.0, master) converted into native SIMT sections: each record type, the
sections' shape, and hostile areas, heads and counts. The slots are packed here at the offsets wires.json
measured (``WireLayout.structs``), not through the decoder's own code."""

from __future__ import annotations

import dataclasses
import json
import struct

import numpy as np
import pytest

from sanitizerd.chips import CHIPS
from sanitizerd.compat import wire
from sanitizerd.compat.records import simt, simt_place
from sanitizerd.compat.records import slots as rb
from sanitizerd.compat.records.convert.base import BlockContext
from sanitizerd.compat.records.convert.bounds import ExpansionBudget
from sanitizerd.compat.records.numbering import record_table
from sanitizerd.control_client import ControlClient
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.records import (
    FLAG_ATOMIC,
    FLAG_CLAIM,
    FLAG_SIMT_ENTRY,
    EventKind,
    Pipe,
    Space,
    simt_dims_address,
)
from tests.conftest import RunningDaemon, sanitizerd
from tests.test_compat_layouts import MALLOC, Client, raw_named
from tests.test_compat_socket import connect as compat_connect
from tests.test_compat_socket import recv_exactly

CONTEXT = BlockContext(block_type=0, chip=CHIPS["950"])
WIRES = ["26.1.0", "mssanitizer-1e040de1"]
MAIN_PC = 0x4000


@dataclasses.dataclass
class Rec:
    """One thread-area record: its msSanitizer type name and what its payload says."""

    type: str
    addr: int = 0
    size: int = 4
    space: int = Space.UB
    pc: int = 0x100
    loc: tuple[int, int, int] | None = None  # None: the area's own thread location
    main_pc: int = MAIN_PC
    option: int = 0
    dtype: int = 0  # this release's DetailedDataType number (0: Default)


def pack_record(layout: wire.WireLayout, rec: Rec, loc: tuple[int, int, int]) -> bytes:
    if rec.type in ("THREAD_BLOCK_BARRIER", "SIMT_END"):
        payload = layout.structs["SimtEmptyRecord"]
    elif rec.type in ("SIMT_ATOM", "SIMT_RED"):
        payload = layout.structs["SimtAtomRecord"]
    else:
        payload = layout.structs["SimtLoadStoreRecord"]
    body = bytearray(payload.size)
    x, y, z = rec.loc if rec.loc is not None else loc
    values = {
        "addr": rec.addr, "size": rec.size, "space": rec.space, "location.pc": rec.pc, "location.lineNo": 7,
        "threadLoc.idX": x, "threadLoc.idY": y, "threadLoc.idZ": z, "threadLoc.mainScalarPc": rec.main_pc,
        "option": rec.option, "detailedDataType": rec.dtype,
    }  # fmt: skip
    codes = {"<u8": "<Q", "<u4": "<I", "<u2": "<H", "<i4": "<i", "u1": "<B"}
    for name, offset, fmt in payload.fields:
        if name in values:
            struct.pack_into(codes[fmt], body, offset, values[name])
    return struct.pack("<I", layout.record_types[rec.type]) + bytes(body)


def simt_slot(
    layout: wire.WireLayout,
    threads: dict[int, list[Rec]],
    dims: tuple[int, int, int] | None,
    *,
    thread_bytes: int = 1024,
    calls: list[tuple[int, tuple[int, int, int]]] | None = None,
    head_counts: dict[int, int] | None = None,
    write_offsets: dict[int, int] | None = None,
    simd: list[bytes] | None = None,
    entries: dict[int, bytes] | None = None,
    entry_counts: dict[int, int] | None = None,
    exceeded: dict[int, int] | None = None,
) -> bytes:
    """A SIMT chip's slot: its SIMD records (``simd``; by default one SIMT_CALL per call, as a vf-calling block
    writes), 2 048 thread areas (area i holds ``threads[i]``), then one entry head per SIMT call (``dims``: one call
    at MAIN_PC; ``calls``: several), each followed by its SimtEntryRecords (``entries[n]`` for call n; its
    recordWriteCount theirs, or ``entry_counts[n]``; its exceedSize ``exceeded[n]``)."""
    g, shape = layout.global_head, rb.simt_shape(layout)
    call_list = calls if calls is not None else ([(MAIN_PC, dims)] if dims else [])
    if simd is None:
        simd = [simt_call(layout, pc) for pc, _ in call_list]
    region = b"".join(simd)
    assert shape is not None
    head = bytearray(layout.heads_size)
    struct.pack_into("<Q", head, g.offset("securityVal"), rb.SECURITY_VALUE)
    struct.pack_into("<Q", head, g.offset("kernelInfo.totalBlockDim"), 1)
    struct.pack_into("<I", head, g.offset("offsetInfo.blockHeadSize"), 192)
    struct.pack_into("<Q", head, g.offset("offsetInfo.simtErrorInfo.size"), thread_bytes)
    head[g.offset("supportSimt")] = 1
    b = layout.block_head
    for field, value in (("recordCount", len(simd)), ("recordWriteCount", len(simd)), ("offset", len(region)),
                         ("writeOffset", len(region))):  # fmt: skip
        struct.pack_into("<Q", head, g.size + b.offset(field), value)
    area_head = layout.structs["SimtRecordBlockHead"]
    area = shape.thread_head + thread_bytes
    part = bytearray(rb.SIMT_THREADS * area)
    x, y = (max(d, 1) for d in (dims or (1, 1, 1))[:2])
    for i, recs in threads.items():
        loc = (i % x, (i % (x * y)) // x, i // (x * y))
        records = b"".join(pack_record(layout, rec, loc) for rec in recs)
        assert len(records) <= thread_bytes
        at = i * area
        count = (head_counts or {}).get(i, len(recs))
        offset = (write_offsets or {}).get(i, len(records))
        struct.pack_into("<Q", part, at + area_head.offset("recordWriteCount"), count)
        struct.pack_into("<Q", part, at + area_head.offset("recordCount"), count)
        struct.pack_into("<Q", part, at + area_head.offset("writeOffset"), offset)
        part[at + shape.thread_head : at + shape.thread_head + len(records)] = records
    entry = layout.structs["SimtEntryBlockHead"]
    for n, (main_pc, (cx, cy, cz)) in enumerate(call_list):
        block = bytearray(entry.size)
        struct.pack_into("<Q", block, entry.offset("mainScalarPc"), main_pc)
        struct.pack_into("<HHH", block, entry.offset("threadXDim"), cx, cy, cz)
        records = (entries or {}).get(n, b"")
        count = (entry_counts or {}).get(n, len(records) // layout.structs["SimtEntryRecord"].size)
        struct.pack_into("<Q", block, entry.offset("recordWriteCount"), count)
        struct.pack_into("<Q", block, entry.offset("recordCount"), count)
        struct.pack_into("<Q", block, entry.offset("exceedSize"), (exceeded or {}).get(n, 0))
        part += block + records
    return bytes(head) + region + bytes(part)


def part_start(layout: wire.WireLayout, data: bytes) -> int:
    """Where a slot's SIMT part starts: after the heads and the SIMD records (the block head's writeOffset)."""
    return layout.heads_size + struct.unpack_from("<Q", data, layout.global_head.size + layout.block_head.offset(
        "writeOffset"))[0]  # fmt: skip


def simt_call(layout: wire.WireLayout, pc: int) -> bytes:
    """A SIMT_CALL record (MainScalarEmptyRecord: a Location, pc at 16) of the main scalar calling a vf at ``pc``."""
    payload = bytearray(32)
    struct.pack_into("<QQQ", payload, 0, 3, 9, pc)
    return struct.pack("<I", layout.record_types["SIMT_CALL"]) + bytes(payload)


def decode(
    layout: wire.WireLayout, data: bytes, chunk: int = 1 << 20, budget: ExpansionBudget | None = None
) -> tuple[np.ndarray, list[str]]:
    heads = rb.read_heads(data, layout)
    assert rb.wire_mismatch(heads, layout, len(data)) == ""
    context = dataclasses.replace(CONTEXT, budget=budget or ExpansionBudget())
    decoder = rb.SlotDecoder(heads, context, 10, record_table(layout), rb.simt_shape(layout))
    body, tail, at, out = memoryview(data)[layout.heads_size :], b"", 0, []
    while at < len(body):
        piece = tail + bytes(body[at : at + chunk])
        at += chunk
        events, used = decoder.feed(memoryview(piece), at >= len(body))
        out.append(events)
        tail = piece[used:]
    events = np.concatenate(out)
    assert events["kind"][-1] == EventKind.BLOCK_FINISH
    # Numbered in stream order: a SIMD record's events share its serial, each SIMT event has one of its own (a call's
    # entry records one for all), and a SIMT_CALL (which makes no event) leaves its serial unused
    steps = np.diff(events["serial"].astype(np.int64))
    assert (steps >= 0).all()
    entries = (events["flags"] & FLAG_SIMT_ENTRY) != 0
    simt_rows = (events["thread"][1:] != 0) & ~(entries[1:] & entries[:-1])
    assert (steps[simt_rows] >= 1).all()
    assert decoder.next_serial == int(events["serial"][-1]) + 1
    return events[:-1], decoder.problems()


def layout_of(name: str) -> wire.WireLayout:
    layout = wire.layout_named(name)
    assert layout is not None
    return layout


@pytest.mark.parametrize("name", WIRES)
def test_the_thread_record_structs_are_measured(name: str) -> None:
    layout = layout_of(name)
    ls, atom, empty = (layout.structs[n] for n in ("SimtLoadStoreRecord", "SimtAtomRecord", "SimtEmptyRecord"))
    assert (ls.size, atom.size, empty.size) == (72, 72, 48)
    assert [ls.offset(f) for f in ("addr", "size", "location.pc", "threadLoc.idX", "threadLoc.mainScalarPc")] == [
        0, 8, 32, 48, 56,
    ]  # fmt: skip
    assert (ls.offset("space"), atom.offset("option"), empty.offset("threadLoc.idZ")) == (64, 69, 36)
    assert rb.simt_shape(layout).records is not None  # type: ignore[union-attr]


@pytest.mark.parametrize("name", WIRES)
def test_every_member_of_the_device_findings_union_is_measured(name: str) -> None:
    """KernelErrorDesc's payload is a union: each member the device writes for its error type starts at 80 and is
    read where libclang measured it (illegal and misaligned: address, size; overlap and race: the other thread;
    sync: the barrier and the thread that missed it), whatever the others say."""
    desc = layout_of(name).structs["KernelErrorDesc"]
    assert desc.size == 144
    p = "payload."
    assert [desc.offset(p + f) for f in ("illegalDesc.addr", "illegalDesc.illegalSize", "misAlignDesc.addr",
                                         "misAlignDesc.misAlignSize")] == [80, 88, 80, 88]  # fmt: skip
    assert [desc.offset(p + f) for f in ("overLapDesc.conflictedThreadLoc.idX", "overLapDesc.addr",
                                         "overLapDesc.overLapSize")] == [112, 128, 136]  # fmt: skip
    assert [desc.offset(p + f) for f in ("syncDesc.syncLocation.pc", "syncDesc.syncThreadLoc.idX",
                                         "syncDesc.syncThreadLoc.idZ", "syncDesc.syncThreadLoc.mainScalarPc")] == [
        96, 112, 116, 120]  # fmt: skip
    raw = np.zeros(1, dtype=desc.dtype)  # the union's members share their bytes in the dtype, as in C
    raw[p + "syncDesc.syncThreadLoc.idX"] = 7
    assert int(raw[p + "overLapDesc.conflictedThreadLoc.idX"][0]) == 7


def test_a_wire_without_measured_thread_records_counts_them() -> None:
    before = layout_of("mssanitizer-c05468eb")  # SIMT heads measured, no mainScalarPc, no thread records
    shape = rb.simt_shape(before)
    assert shape is not None and shape.records is None


@pytest.mark.parametrize("name", WIRES)
@pytest.mark.parametrize(
    ("rec", "kind", "flags"),
    [
        (Rec("SIMT_LDG", 0x1000, 4, Space.GM), EventKind.READ, 0),
        (Rec("SIMT_LDS", 0x20, 2, Space.UB), EventKind.READ, 0),
        (Rec("SIMT_LDK", 0x20, 8, Space.UB), EventKind.READ, 0),
        (Rec("SIMT_LD", 0x2000, 1, Space.GM), EventKind.READ, 0),
        (Rec("SIMT_STG", 0x1000, 4, Space.GM), EventKind.WRITE, 0),
        (Rec("SIMT_STS", 0x40, 4, Space.UB), EventKind.WRITE, 0),
        (Rec("SIMT_STK", 0x40, 16, Space.UB), EventKind.WRITE, 0),
        (Rec("SIMT_ST", 0x3000, 8, Space.GM), EventKind.WRITE, 0),
        (Rec("SIMT_ATOM", 0x1000, 4, Space.GM, option=3), EventKind.WRITE, FLAG_ATOMIC),
        (Rec("SIMT_RED", 0x80, 4, Space.UB, option=1), EventKind.WRITE, FLAG_ATOMIC),
    ],
)
def test_each_access_record_becomes_a_thread_access(name: str, rec: Rec, kind: EventKind, flags: int) -> None:
    layout = layout_of(name)
    # Thread 5 of a 4x2x1 call is (1, 1, 0): its area's records say so, and its events carry 5 + 1.
    events, problems = decode(layout, simt_slot(layout, {5: [rec, Rec("SIMT_END")]}, (4, 2, 1)))
    assert problems == []
    assert events["kind"].tolist() == [EventKind.SIMT_START, kind, EventKind.SIMT_END]
    assert int(events["address"][0]) == simt_dims_address(4, 2, 1)
    access = events[1]
    assert (int(access["thread"]), int(access["address"]), int(access["block_size"])) == (6, rec.addr, rec.size)
    assert (int(access["space"]), int(access["flags"]), int(access["pc"])) == (rec.space, flags, rec.pc)
    assert events["thread"][[0, 2]].tolist() == [0, 0]


@pytest.mark.parametrize("name", WIRES)
def test_barriers_and_thread_order(name: str) -> None:
    layout = layout_of(name)
    bar = Rec("THREAD_BLOCK_BARRIER", pc=0x300)
    threads = {
        t: [Rec("SIMT_STS", 0x100 + 4 * t, 4), bar, Rec("SIMT_LDS", 0x100 + 4 * ((t + 1) % 3), 4), Rec("SIMT_END")]
        for t in range(3)
    }
    events, problems = decode(layout, simt_slot(layout, threads, (3, 1, 1)), chunk=5000)
    assert problems == []
    kinds = events["kind"].tolist()
    assert kinds[0] == EventKind.SIMT_START and kinds[-1] == EventKind.SIMT_END
    assert kinds[1:-1] == [EventKind.WRITE, EventKind.SYNC_THREADS, EventKind.READ] * 3
    assert events["thread"][1:-1].tolist() == [1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert events["pc"][2] == 0x300


@pytest.mark.parametrize("chunk", [1 << 20, 3000, 900])
def test_several_calls_are_sections_of_their_own_however_the_slot_arrives(chunk: int) -> None:
    layout = layout_of("26.1.0")
    threads = {
        0: [Rec("SIMT_STG", 0x10, 4, Space.GM, main_pc=0x10), Rec("SIMT_STG", 0x90, 4, Space.GM, main_pc=0x20)],
        1: [Rec("SIMT_STG", 0x14, 4, Space.GM, main_pc=0x10, loc=(1, 0, 0)),
            Rec("SIMT_STG", 0x94, 4, Space.GM, main_pc=0x20, loc=(0, 1, 0))],
    }  # fmt: skip
    data = simt_slot(layout, threads, None, calls=[(0x10, (2, 1, 1)), (0x20, (1, 2, 1))])
    events, problems = decode(layout, data, chunk)
    assert problems == []
    assert events["kind"].tolist() == [EventKind.SIMT_START, EventKind.WRITE, EventKind.WRITE, EventKind.SIMT_END] * 2
    assert events["address"][[0, 4]].tolist() == [simt_dims_address(2, 1, 1), simt_dims_address(1, 2, 1)]
    assert events["address"][[1, 2, 5, 6]].tolist() == [0x10, 0x14, 0x90, 0x94]


# --- hostile thread areas ------------------------------------------------------------------------------------


def online_error(layout: wire.WireLayout, access: Rec, descs: list[dict[str, int]], *, size: int = 72) -> bytes:
    """An ONLINE_ERROR record as the device writes it: [type][KernelErrorRecord][the access][KernelErrorDesc...]."""
    head = layout.structs["KernelErrorRecord"]
    error = bytearray(head.size)
    struct.pack_into("<I", error, head.offset("errorNum"), len(descs))
    struct.pack_into("<I", error, head.offset("recordType"), layout.record_types[access.type])
    struct.pack_into("<H", error, head.offset("recordSize"), size)
    body = pack_record(layout, access, access.loc or (0, 0, 0))[4:][:size].ljust(size, b"\0")
    spec = layout.structs["KernelErrorDesc"]
    codes = {"<u8": "<Q", "<u4": "<I", "<u2": "<H", "<i4": "<i", "u1": "<B"}
    out = struct.pack("<I", layout.record_types["ONLINE_ERROR"]) + bytes(error) + body
    for values in descs:
        desc = bytearray(spec.size)
        for name, offset, fmt in spec.fields:
            if name in values:
                struct.pack_into(codes[fmt], desc, offset, values[name])
        out += bytes(desc)
    return out


def race_desc(layout: wire.WireLayout, kind: str, addr: int, mine: tuple[int, int, int],
              theirs: tuple[int, int, int]) -> dict[str, int]:  # fmt: skip
    race = "payload.raceDesc."
    return {
        "errorType": layout.kernel_error_types[kind], "space": Space.UB, "location.pc": 0x80, "location.lineNo": 9,
        "threadLoc.idX": mine[0], "threadLoc.idY": mine[1], "threadLoc.idZ": mine[2],
        "threadLoc.mainScalarPc": MAIN_PC, race + "addr": addr, race + "conflictedLocation.pc": 0x84,
        race + "conflictedThreadLoc.idX": theirs[0], race + "conflictedThreadLoc.idY": theirs[1],
        race + "conflictedThreadLoc.idZ": theirs[2],
    }  # fmt: skip


def slot_with_area(
    layout: wire.WireLayout, area: int, records: bytes, count: int, dims: tuple[int, int, int], thread_bytes: int = 2048
) -> bytes:
    """A SIMT slot whose thread area ``area`` holds ``records`` (``count`` of them), the others none."""
    data = bytearray(simt_slot(layout, {}, dims, thread_bytes=thread_bytes))
    shape = rb.simt_shape(layout)
    assert shape is not None
    at = part_start(layout, data) + area * (shape.thread_head + thread_bytes)
    data[at + shape.thread_head : at + shape.thread_head + len(records)] = records
    struct.pack_into("<QQQQ", data, at, count, count, len(records), len(records))
    return bytes(data)


@pytest.mark.parametrize("name", WIRES)
@pytest.mark.parametrize(
    ("race", "theirs", "mine"),
    [("THREAD_WW_RACE", EventKind.WRITE, EventKind.WRITE), ("THREAD_RW_RACE", EventKind.READ, EventKind.WRITE),
     ("THREAD_WR_RACE", EventKind.WRITE, EventKind.READ)],
)  # fmt: skip
def test_a_race_the_device_found_is_its_two_accesses(name: str, race: str, theirs: int, mine: int) -> None:
    """Thread 5 of 4x2x1, (1, 1, 0), reports a race at 0x204 with thread (2, 0, 0): the section holds thread 2's
    access and thread 5's, each one byte at 0x204, the first by the conflicting thread's pc."""
    layout = layout_of(name)
    access = Rec("SIMT_STS", 0x204, 4, loc=(1, 1, 0))
    record = online_error(layout, access, [race_desc(layout, race, 0x204, (1, 1, 0), (2, 0, 0))])
    events, problems = decode(layout, slot_with_area(layout, 5, record, 1, (4, 2, 1)))
    assert problems == []
    assert events["kind"].tolist() == [EventKind.SIMT_START, theirs, mine, EventKind.SIMT_END]
    assert events["thread"][1:3].tolist() == [3, 6]
    assert events["address"][1:3].tolist() == [0x204, 0x204] and events["block_size"][1:3].tolist() == [1, 1]
    assert events["pc"][1:3].tolist() == [0x84, 0x80] and events["space"][1:3].tolist() == [Space.UB] * 2


def test_online_errors_other_than_races_and_the_accesses_own_are_stepped_over_and_counted() -> None:
    layout = layout_of("26.1.0")
    rec = Rec("SIMT_STG", 0x10, 4, Space.GM)
    store = pack_record(layout, rec, (0, 0, 0))
    unknown = {"errorType": 42, "space": Space.GM}  # past KernelErrorType's MAX: msSanitizer skips it, logged
    illegal = {"errorType": layout.kernel_error_types["ILLEGAL_ADDR_WRITE"], "space": Space.GM}
    found = online_error(layout, rec, [unknown, unknown])
    damaged = online_error(layout, Rec("SIMT_STG"), [illegal], size=48)  # its access is not a store's size
    # The device findings between the two stores: the walk must step over both to reach the second store.
    records = store + found + damaged + store
    events, problems = decode(layout, slot_with_area(layout, 0, records, 4, (1, 1, 1)))
    assert events["kind"].tolist() == [EventKind.SIMT_START, EventKind.WRITE, EventKind.WRITE, EventKind.SIMT_END]
    assert sorted(problems) == [
        "1 SIMT ONLINE_ERROR records (msSanitizer's device findings) not checked (the record they carry is not a "
        "SIMT access, barrier or thread end of its size)",
        "2 SIMT ONLINE_ERROR findings of msSanitizer's device (42) not checked",
    ]


@pytest.mark.parametrize("name", WIRES)
@pytest.mark.parametrize(("found", "rec", "kind"), [
    ("ILLEGAL_ADDR_WRITE", Rec("SIMT_STG", 0x7000, 8, Space.GM, pc=0x44), EventKind.WRITE),
    ("ILLEGAL_ADDR_READ", Rec("SIMT_LDS", 0x7000, 8, Space.UB, pc=0x44), EventKind.READ),
    ("ILLEGAL_ADDR_WRITE", Rec("SIMT_ATOM", 0x7000, 8, Space.GM, pc=0x44), EventKind.WRITE),
    ("MISALIGNED_ACCESS", Rec("SIMT_LDG", 0x7000, 8, Space.GM, pc=0x44), EventKind.READ),
])  # fmt: skip
def test_an_access_the_device_found_wrong_is_the_access_it_carries(
    name: str, found: str, rec: Rec, kind: EventKind
) -> None:
    """Thread (1, 1, 0) of 4x2x1 (area 5): its record between two of its own stores becomes the carried access, in
    its place in the thread's order, whole (address, size, pc, space, its data type's alignment), for memcheck to
    judge; a READ and a WRITE desc on one record (msSanitizer's MEMCPY_BLOCKS) still make one access."""
    layout = layout_of(name)
    rec = dataclasses.replace(rec, loc=(1, 1, 0), dtype=layout.detailed_data_types["U64"])
    descs = [{"errorType": layout.kernel_error_types[found], "space": rec.space, "threadLoc.idX": 1,
              "threadLoc.idY": 1, "threadLoc.mainScalarPc": MAIN_PC}]  # fmt: skip
    if rec.type == "SIMT_STG":
        descs.append({**descs[0], "errorType": layout.kernel_error_types["ILLEGAL_ADDR_READ"]})
    before, after = (pack_record(layout, Rec("SIMT_STS", a, 4, pc=0x40), (1, 1, 0)) for a in (0x100, 0x104))
    records = before + online_error(layout, rec, descs, size=len(pack_record(layout, rec, (0, 0, 0))) - 4) + after
    events, problems = decode(layout, slot_with_area(layout, 5, records, 3, (4, 2, 1)))
    assert problems == []
    assert events["kind"].tolist() == [EventKind.SIMT_START, EventKind.WRITE, kind, EventKind.WRITE,
                                       EventKind.SIMT_END]  # fmt: skip
    assert events["thread"][1:4].tolist() == [6, 6, 6]
    assert events["address"][1:4].tolist() == [0x100, 0x7000, 0x104]
    assert int(events["block_size"][2]) == 8 and int(events["pc"][2]) == 0x44 and int(events["space"][2]) == rec.space
    assert bool(events["flags"][2] & FLAG_ATOMIC) == (rec.type == "SIMT_ATOM")
    assert events["align"][1:4].tolist() == [1, 8, 1]  # the stores around it: Default, no alignment checked


@pytest.mark.parametrize(("dtype", "align"), [("Default", 1), ("U8", 1), ("HALF", 2), ("F16X2", 4), ("FLOAT", 4),
                                              ("S64", 8), ("B128", 16)])  # fmt: skip
def test_a_thread_access_is_aligned_by_its_data_type_not_by_its_space(dtype: str, align: int) -> None:
    """msSanitizer checks a SIMT access against its data type's alignment, not UB's 32 B rule for vector
    instructions: the event carries that alignment (1: none), so memcheck does not call a float at UB 0x104 misaligned.
    """
    layout = layout_of("26.1.0")
    rec = Rec("SIMT_LDS", 0x104, 4, dtype=layout.detailed_data_types[dtype])
    events, problems = decode(layout, simt_slot(layout, {0: [rec]}, (1, 1, 1)))
    assert problems == [] and events["align"].tolist() == [0, align, 0]


def sync_desc(layout: wire.WireLayout, missed: tuple[int, int, int], pc: int = 0x60, main_pc: int = MAIN_PC,
              kind: str = "THREADS_ASYNC_IN_BLOCK") -> dict[str, int]:  # fmt: skip
    sync = "payload.syncDesc."
    return {
        "errorType": layout.kernel_error_types[kind], "threadLoc.idX": 3, "threadLoc.mainScalarPc": main_pc,
        sync + "syncLocation.pc": pc, sync + "syncLocation.lineNo": 12, sync + "syncThreadLoc.idX": missed[0],
        sync + "syncThreadLoc.idY": missed[1], sync + "syncThreadLoc.idZ": missed[2],
        sync + "syncThreadLoc.mainScalarPc": main_pc,
    }  # fmt: skip


@pytest.mark.parametrize("name", WIRES)
def test_a_divergence_the_device_found_is_the_barriers_it_implies(name: str) -> None:
    """The last thread of 4x1x1 to end, (3,0,0), carries the device's finding that threads (1,0,0) and (2,0,0)
    missed the __syncthreads() at pc 0x60: the section holds that barrier for every other thread, after all each
    did, so synccheck finds 1 and 2 short of it. A thread's own store before it keeps its place."""
    layout = layout_of(name)
    end = Rec("SIMT_END", pc=0x90, loc=(3, 0, 0))
    found = online_error(layout, end, [sync_desc(layout, (1, 0, 0)), sync_desc(layout, (2, 0, 0))], size=48)
    store = pack_record(layout, Rec("SIMT_STS", 0x10, 4, pc=0x40), (3, 0, 0))
    events, problems = decode(layout, slot_with_area(layout, 3, store + found, 2, (4, 1, 1)))
    assert problems == []
    kinds = events["kind"].tolist()
    assert kinds == [EventKind.SIMT_START, EventKind.SYNC_THREADS, EventKind.WRITE, EventKind.SYNC_THREADS,
                     EventKind.SIMT_END]  # fmt: skip
    assert events["thread"][1:4].tolist() == [1, 4, 4] and events["pc"][[1, 3]].tolist() == [0x60, 0x60]


def test_hostile_divergences_are_refused_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A missed thread outside the dims, one of a call with no entry head, and barriers past the device's 64 per
    call are refused and counted; the rest still become barriers; past the slot's limit none is made."""
    layout = layout_of("26.1.0")
    end = Rec("SIMT_END", pc=0x90, loc=(1, 0, 0))
    descs = [sync_desc(layout, (0, 0, 0), pc=0x1000 + 8 * i) for i in range(66)]
    descs += [sync_desc(layout, (2, 0, 0)), sync_desc(layout, (0, 0, 0), main_pc=0x9999)]
    found = online_error(layout, end, descs, size=48)
    data = slot_with_area(layout, 1, found, 1, (2, 1, 1), thread_bytes=16 << 10)
    events, problems = decode(layout, data)
    assert sorted(problems) == [
        "1 SIMT divergences the device found for a thread outside its call's dims",
        "1 SIMT divergences the device found in a SIMT call with no SimtEntryBlockHead (no thread dims)",
        "2 SIMT divergences the device found past 64 barriers of a SIMT call",
    ]
    assert (events["kind"] == EventKind.SYNC_THREADS).sum() == 64 and set(events["thread"][1:-1].tolist()) == {2}
    monkeypatch.setattr(simt, "MAX_SIMT_EVENTS", 10)
    events, problems = decode(layout, data)
    assert events.size == 0
    assert "66 SIMT divergences the device found past the slot's limit of 10 records" in problems


@pytest.mark.parametrize("size", [0, 47, 49, 72])
def test_a_sync_finding_on_a_record_not_of_its_size_is_counted(size: int) -> None:
    layout = layout_of("26.1.0")
    found = online_error(layout, Rec("SIMT_END", loc=(1, 0, 0)), [sync_desc(layout, (0, 0, 0))], size=size)
    events, problems = decode(layout, slot_with_area(layout, 1, found, 1, (2, 1, 1)))
    assert events.size == 0
    assert problems == ["1 SIMT ONLINE_ERROR records (msSanitizer's device findings) not checked (the record they "
                        "carry is not a SIMT access, barrier or thread end of its size)"]  # fmt: skip


def test_the_device_losing_barrier_records_is_not_a_clean_run() -> None:
    """SYNC_THREADS_RECORD_LOSS: the device's barrier table overflowed, so its divergence check is unreliable:
    msSanitizer's own warning, counted, never silently clean."""
    layout = layout_of("26.1.0")
    end = Rec("THREAD_BLOCK_BARRIER", loc=(0, 0, 0))
    found = online_error(layout, end, [sync_desc(layout, (0, 0, 0), kind="SYNC_THREADS_RECORD_LOSS")], size=48)
    _, problems = decode(layout, slot_with_area(layout, 0, found, 1, (1, 1, 1)))
    assert problems == [
        "1 SYNC_THREADS_RECORD_LOSS findings of msSanitizer's device: the number of '__syncthreads()' instructions "
        "exceeds 64. Some records were discarded, the detection result maybe unreliable!"
    ]


def test_an_illegal_address_whose_access_is_another_threads_is_refused() -> None:
    """The carried access must be its area's thread's: a record in area 0 whose access names thread (1, 0, 0) is
    refused, counted, and not taken as thread 0's."""
    layout = layout_of("26.1.0")
    rec = Rec("SIMT_STG", 0x7000, 8, Space.GM, loc=(1, 0, 0))
    descs = [{"errorType": layout.kernel_error_types["ILLEGAL_ADDR_WRITE"], "space": Space.GM}]
    events, problems = decode(layout, slot_with_area(layout, 0, online_error(layout, rec, descs), 1, (2, 1, 1)))
    assert events.size == 0
    assert problems == ["1 SIMT records whose thread location is not their thread area's"]


def test_a_hostile_race_desc_is_refused() -> None:
    """A race naming a thread outside the call's dims, or no address space: refused, counted, never misread."""
    layout = layout_of("26.1.0")
    access = Rec("SIMT_STS", 0x10, 4, loc=(0, 0, 0))
    outside = race_desc(layout, "THREAD_WW_RACE", 0x10, (0, 0, 0), (7, 0, 0))
    no_space = race_desc(layout, "THREAD_WW_RACE", 0x10, (0, 0, 0), (1, 0, 0)) | {"space": 0x7FFF_FFFF}
    record = online_error(layout, access, [outside, no_space])
    events, problems = decode(layout, slot_with_area(layout, 0, record, 1, (2, 1, 1)))
    assert sorted(problems) == [
        "1 SIMT accesses with no such address space or size",
        "1 SIMT records whose thread location is not their thread area's",
    ]
    assert events["kind"].tolist() == [EventKind.SIMT_START, EventKind.WRITE, EventKind.SIMT_END]  # thread 0's side


def test_hostile_heads_and_records_are_refused_and_counted() -> None:
    layout = layout_of("26.1.0")
    st = Rec("SIMT_STS", 0x10, 4)
    threads = {
        0: [st, st],  # fine
        1: [st],  # writeOffset past the area: the area is refused
        2: [st, st],  # count says 5 records, writeOffset holds 2
        3: [st, Rec("SIMT_STS", 0x10, 4, loc=(3, 3, 3))],  # the second says another thread's location
        4: [st, Rec("SIMT_STS", 0x10, 4, space=0)],  # thread-private memory
        5: [st, Rec("SIMT_STS", 0x10, 4, space=9)],  # no such address space
        6: [st, Rec("SIMT_STS", 0x10, 4, main_pc=0x999)],  # a call no entry head names
        7: [st, st],  # writeOffset cuts the second record
    }
    data = simt_slot(
        layout, threads, (8, 1, 1), thread_bytes=512,
        head_counts={2: 5}, write_offsets={1: 1 << 40, 7: 76 + 40},
    )  # fmt: skip
    # The fourth area's unknown type is put in by hand: word 0 of its records.
    raw = bytearray(data)
    shape = rb.simt_shape(layout)
    assert shape is not None
    part = part_start(layout, raw)
    struct.pack_into("<I", raw, part + 8 * (shape.thread_head + 512) + shape.thread_head, 12345)
    struct.pack_into("<QQQQ", raw, part + 8 * (shape.thread_head + 512), 1, 1, 76, 76)
    events, problems = decode(layout, bytes(raw))
    assert sorted(problems) == sorted([
        "1 SIMT thread areas whose writeOffset is past the area (not decoded)",
        "3 SIMT records counted by recordWriteCount but not within writeOffset",
        "1 SIMT records whose thread location is not their thread area's",
        "1 SIMT accesses to thread-private memory (not checked)",
        "1 SIMT accesses with no such address space or size",
        "1 SIMT records of a SIMT call with no SimtEntryBlockHead (no thread dims)",
        "1 SIMT records running past their thread area's writeOffset (the rest of the area)",
        "1 SIMT records of a type sanitizerd does not know (the rest of their thread area)",
    ])  # fmt: skip
    writes = events[events["kind"] == EventKind.WRITE]
    assert sorted(writes["thread"].tolist()) == [1, 1, 3, 3, 4, 5, 6, 7, 8]


@pytest.mark.parametrize("dims", [(0, 1, 1), (2048, 2, 1), (65535, 65535, 65535)])
def test_thread_dims_out_of_range_refuse_their_call(dims: tuple[int, int, int]) -> None:
    layout = layout_of("26.1.0")
    data = simt_slot(layout, {0: [Rec("SIMT_STS", 0x10, 4, loc=(0, 0, 0))]}, dims)
    events, problems = decode(layout, data)
    assert events.size == 0
    assert problems == [
        "1 SIMT records of a SIMT call whose thread dims are out of range (a zero, or over 2048 threads)"
    ]


def test_dims_at_the_bound_are_a_section() -> None:
    layout = layout_of("26.1.0")
    last = rb.SIMT_THREADS - 1  # (1023, 1, 0) of 1024x2x1
    data = simt_slot(layout, {last: [Rec("SIMT_STS", 0x10, 4)]}, (1024, 2, 1))
    events, problems = decode(layout, data)
    assert problems == [] and events["thread"].tolist() == [0, 2048, 0]


def test_thread_areas_past_the_bound_are_counted_not_converted() -> None:
    layout = layout_of("26.1.0")
    big = simt.MAX_AREA_BYTES  # with its head, one area is past the bound
    g = layout.global_head
    heads = bytearray(layout.heads_size)
    struct.pack_into("<Q", heads, g.offset("securityVal"), rb.SECURITY_VALUE)
    struct.pack_into("<Q", heads, g.offset("offsetInfo.simtErrorInfo.size"), big)
    struct.pack_into("<I", heads, g.offset("offsetInfo.blockHeadSize"), 192)
    heads[g.offset("supportSimt")] = 1
    slot_heads = rb.read_heads(bytes(heads), layout)
    part = rb.SimtPart(rb.simt_shape(layout), slot_heads)
    assert part.areas is None and part.too_large
    area = bytearray(part.area)
    struct.pack_into("<Q", area, 8, 3)
    part.feed(memoryview(bytes(area)), True)
    assert part.problems()[0] == (
        f"3 SIMT records of 1 SIMT threads not checked (its thread areas of {part.area} bytes are larger than the "
        f"{simt.MAX_AREA_BYTES} sanitizerd converts)"
    )


def test_the_slot_limit_refuses_what_is_past_it(monkeypatch: pytest.MonkeyPatch) -> None:
    layout = layout_of("26.1.0")
    monkeypatch.setattr(simt, "MAX_SIMT_EVENTS", 5)
    threads = {t: [Rec("SIMT_STS", 0x10 + 4 * t, 4)] for t in range(8)}
    events, problems = decode(layout, simt_slot(layout, threads, (8, 1, 1)))
    assert problems == ["3 SIMT records past the slot's limit of 5"]
    assert events["thread"][1:-1].tolist() == [1, 2, 3, 4, 5]


# --- end to end: a SIMT chip's hooks on the job's compat socket ------------------------------------------------


def kernel_packets(layout: wire.WireLayout, name: str, slot: bytes) -> bytes:
    """A kernel's KERNEL_SUMMARY (one block) and its one slot's KERNEL_RECORD."""
    summary = bytearray(layout.kernel_summary.size)
    struct.pack_into("<QIB", summary, 0, 0, 1, 1)
    summary[15 : 15 + len(name)] = name.encode()
    return (
        wire.PACKET_HEAD.pack(layout.packet_number(wire.PacketType.KERNEL_SUMMARY))
        + bytes(summary)
        + wire.PACKET_HEAD.pack(layout.packet_number(wire.PacketType.KERNEL_RECORD))
        + wire.LENGTH.pack(len(slot))
        + slot
    )


def send_kernels(
    daemon: RunningDaemon, layout: wire.WireLayout, job: str, tools: list[str], kernels: list[bytes]
) -> None:
    """A 950 chip's hooks on ``job``'s compat socket: the handshake, then each kernel, answered before the next."""
    with ControlClient(daemon.socket) as control:
        control.send(m.JobStart(job=job, config=m.Config(tools=tools)))
        answer = control.request(m.CompatListen(job=job, layout=layout.name))
        assert isinstance(answer, m.CompatListening), answer
        with compat_connect(answer.name, timeout=30) as client:
            assert len(recv_exactly(client, layout.config.size)) == layout.config.size
            device = layout.device_summary.struct.pack(11, 32, 24, 0)  # DeviceType 11: the 950 family
            client.sendall(wire.PACKET_HEAD.pack(layout.packet_number(wire.PacketType.DEVICE_SUMMARY)) + device)
            for packets in kernels:
                client.sendall(packets)
                assert recv_exactly(client, 12) == struct.pack("<III", 3001, 1, 0)  # KERNEL_RECORD_RESPONSE


def test_a_simt_thread_race_on_the_wire_is_reported_and_its_clean_variant_is_silent(daemon: RunningDaemon) -> None:
    """msSanitizer 26.1.0's hooks on a 950 chip send one kernel whose threads 0 and 1 both write UB 0x200 between
    the same barriers (a WAW between threads), one where each writes its own word, and one whose only record is the
    device's own THREAD_WW_RACE finding (as 26.1.0's probes write it): through the daemon, the first and third are
    racecheck's WAW with msSanitizer's ``Thread (x,y,z)`` lines, the second has no finding."""
    layout = layout_of("26.1.0")

    def kernel(name: str, racy: bool, online: bool = False) -> bytes:
        threads = {
            t: [Rec("SIMT_STS", 0x100 + 4 * t, 4, pc=0x40), Rec("THREAD_BLOCK_BARRIER", pc=0x60),
                Rec("SIMT_STS", 0x200 if racy else 0x200 + 4 * t, 4, pc=0x80), Rec("SIMT_END", pc=0x90)]
            for t in range(2)
        }  # fmt: skip
        slot = simt_slot(layout, threads, (2, 1, 1))
        if online:
            access = Rec("SIMT_STS", 0x200, 4, pc=0x80, loc=(1, 0, 0))
            found = online_error(layout, access, [race_desc(layout, "THREAD_WW_RACE", 0x200, (1, 0, 0), (0, 0, 0))])
            slot = slot_with_area(layout, 1, found, 1, (2, 1, 1))
        return kernel_packets(layout, name, slot)

    job = "compat-simt"
    kernels = [kernel(name, racy, online) for name, racy, online in (
        ("simt_racy", True, False), ("simt_clean", False, False), ("simt_online", False, True))]  # fmt: skip
    send_kernels(daemon, layout, job, ["racecheck"], kernels)
    found = json.loads(sanitizerd("findings", "--socket", str(daemon.socket), "--job", job, "--format=json").stdout)
    assert sorted((f["kernel"], f["kind"]) for f in found if f["kind"] != "internal_error") == [
        ("simt_online", "race_waw"), ("simt_racy", "race_waw")]  # fmt: skip
    assert not [f for f in found if f["kind"] == "internal_error"], found  # nothing refused, nothing unchecked
    text = sanitizerd("findings", "--socket", str(daemon.socket), "--job", job, "--format", "text").stdout
    lines = [line for line in text.splitlines() if line.startswith("======")]
    for kernel_name in ("simt_racy", "simt_online"):
        at = lines.index(f"====== ERROR: Potential WAW hazard detected at UB in {kernel_name}:")
        assert lines[at + 1].startswith("======     Write Thread (0,0,0) at WAW()+0x200 in block 0 (aiv) on device 0 ")
        assert lines[at + 2].startswith("======     Write Thread (1,0,0) at WAW()+0x200 in block 0 (aiv) on device 0 ")


def test_many_calls_are_one_sort_and_heads_past_the_bound_are_not_kept() -> None:
    """Every thread in a SIMT call of its own (2 048 sections), and more entry heads than a slot keeps: the heads
    past MAX_SIMT_CALLS are counted only, their calls' records refused as having no head; all of it at once."""
    layout = layout_of("26.1.0")
    threads = {
        t: [Rec("SIMT_STS", 0x10, 4, main_pc=0x1000 + t), Rec("SIMT_END", main_pc=0x1000 + t)] for t in range(2048)
    }
    calls = [(0x1000 + t, (2048, 1, 1)) for t in range(2048)]
    calls = [(0x9000 + t, (1, 1, 1)) for t in range(rb.MAX_SIMT_CALLS - 1024)] + calls  # the last 1024 not kept
    events, problems = decode(layout, simt_slot(layout, threads, (2048, 1, 1), calls=calls))
    # 1 024 threads of calls with no head kept: their store and their SIMT_END each refused.
    assert problems == ["2048 SIMT records of a SIMT call with no SimtEntryBlockHead (no thread dims)"]
    assert (events["kind"] == EventKind.SIMT_START).sum() == 1024
    assert events["thread"][events["kind"] == EventKind.WRITE].tolist() == list(range(1, 1025))


@pytest.mark.parametrize(("errors", "size"), [(2**32 - 1, 72), (1, 0xFFFF), (15, 72)])
def test_an_online_error_whose_counts_pass_its_area_ends_the_areas_walk(errors: int, size: int) -> None:
    """errorNum or recordSize that carry the record past writeOffset (15 descs of 144 bytes do not fit either):
    the rest of the area is refused, counted, never read as descs."""
    layout = layout_of("26.1.0")
    record = bytearray(online_error(layout, Rec("SIMT_STS", 0x10, 4), []))
    struct.pack_into("<IIH", record, 4, errors, layout.record_types["SIMT_STS"], size)
    store = pack_record(layout, Rec("SIMT_STS", 0x20, 4), (0, 0, 0))
    events, problems = decode(layout, slot_with_area(layout, 0, store + bytes(record) + store, 3, (1, 1, 1)))
    assert problems == ["2 SIMT records running past their thread area's writeOffset (the rest of the area)"]
    assert events["kind"].tolist() == [EventKind.SIMT_START, EventKind.WRITE, EventKind.SIMT_END]


def test_device_found_errors_on_the_wire_are_reported_in_mssanitizers_text(daemon: RunningDaemon) -> None:
    """msSanitizer 26.1.0's hooks on a 950 chip send kernels whose only SIMT records are the device's own findings, as
    its probes write them into thread (3,0,0)'s area of 4x1x1: a 4-byte UB read at 0x40000, past UB's end, and, at
    that thread's end, thread (1,0,0) having missed the __syncthreads() at pc 0x60. Through the daemon they are
    memcheck's illegal read and synccheck's divergence, by those threads, in msSanitizer's text; the same kernel
    reading inside UB with every thread at the barrier has no finding, and nothing is left unchecked."""
    layout = layout_of("26.1.0")
    u32 = layout.detailed_data_types["U32"]

    def kernel(name: str, addr: int, diverged: bool) -> bytes:
        access = Rec("SIMT_LDS", addr, 4, Space.UB, pc=0x80, loc=(3, 0, 0), dtype=u32)
        kind = "ILLEGAL_ADDR_READ" if diverged else "MISALIGNED_ACCESS"  # the clean one: a finding memcheck rejects
        desc = {"errorType": layout.kernel_error_types[kind], "space": Space.UB, "threadLoc.idX": 3,
                "threadLoc.mainScalarPc": MAIN_PC}  # fmt: skip
        records = online_error(layout, access, [desc])
        missed = [sync_desc(layout, (1, 0, 0))] if diverged else []
        records += online_error(layout, Rec("SIMT_END", pc=0x90, loc=(3, 0, 0)), missed, size=48)
        slot = slot_with_area(layout, 3, records, 2, (4, 1, 1))
        return kernel_packets(layout, name, slot)

    job = "compat-simt-online"
    kernels = [kernel("simt_found", 0x40000, True), kernel("simt_fine", 0x3FF00, False)]
    send_kernels(daemon, layout, job, ["memcheck", "synccheck"], kernels)
    found = json.loads(sanitizerd("findings", "--socket", str(daemon.socket), "--job", job, "--format=json").stdout)
    assert sorted((f["kernel"], f["kind"]) for f in found) == [
        ("simt_found", "divergent_threads"), ("simt_found", "illegal_read")]  # fmt: skip
    text = sanitizerd("findings", "--socket", str(daemon.socket), "--job", job, "--format", "text").stdout
    lines = [line for line in text.splitlines() if line.startswith("======")]
    at = lines.index("====== ERROR: illegal read of size 4")
    assert lines[at + 1 : at + 3] == [
        "======    at 0x40000 on UB in simt_found",
        "======    by thread (3,0,0) in block aiv(0) on device 0",
    ]
    assert lines[at + 3].startswith("======    code in unknown:7 (serialNo:")
    at = lines.index("====== ERROR: Sync error detected. Divergent thread(s) in simt_found")
    assert lines[at + 1] == "======    by thread(1,0,0) in block aiv(0) on device 0"
    assert lines[at + 2].startswith("======    code in unknown:12 ")


@pytest.mark.parametrize(("meant", "lost"), [(1, 0), (3, 2), (2**64 - 1, 2**64 - 2)])
def test_records_the_device_had_no_room_for_are_not_a_clean_run(meant: int, lost: int) -> None:
    """msSanitizer's device counts a record (a finding among them) its full thread area could not take in
    recordCount only: the difference from recordWriteCount is said, never taken as nothing found; a hostile count
    near 2**64 in every area does not wrap."""
    layout = layout_of("26.1.0")
    store = pack_record(layout, Rec("SIMT_STS", 0x10, 4), (0, 0, 0))
    data = bytearray(slot_with_area(layout, 0, store, 1, (1, 1, 1)))
    shape = rb.simt_shape(layout)
    assert shape is not None
    part = part_start(layout, data)
    struct.pack_into("<Q", data, part, meant)  # area 0's recordCount
    events, problems = decode(layout, bytes(data))
    assert events["kind"].tolist() == [EventKind.SIMT_START, EventKind.WRITE, EventKind.SIMT_END]
    expected = (
        [f"{lost} SIMT records msSanitizer's device could not write (their thread area was full)"] if lost else []
    )
    assert problems == expected
    if meant > 1:  # every area claiming as many: the sum is exact
        for area in range(rb.SIMT_THREADS):
            struct.pack_into("<Q", data, part + area * (shape.thread_head + 2048), meant)
        _, problems = decode(layout, bytes(data))
        assert (
            f"{lost + meant * (rb.SIMT_THREADS - 1)} SIMT records msSanitizer's device could not write" in problems[0]
        )


def test_a_divergence_in_a_slot_without_entry_heads_is_refused() -> None:
    layout = layout_of("26.1.0")
    found = online_error(layout, Rec("SIMT_END", loc=(0, 0, 0)), [sync_desc(layout, (0, 0, 0))], size=48)
    data = bytearray(simt_slot(layout, {}, None, thread_bytes=2048))
    shape = rb.simt_shape(layout)
    assert shape is not None
    at = layout.heads_size + shape.thread_head
    data[at : at + len(found)] = found
    struct.pack_into("<QQQQ", data, layout.heads_size, 1, 1, len(found), len(found))
    events, problems = decode(layout, bytes(data))
    assert events.size == 0
    assert problems == [
        "1 SIMT divergences the device found in a SIMT call with no SimtEntryBlockHead (no thread dims)"
    ]


# --- the main scalar against the threads: each section at its SIMT_CALL -------------------------------------------

SCALAR = Client(raw_named("26.1.0"))


def scalar_store(addr: int, pc: int, space: int = Space.UB) -> bytes:
    """The main scalar's 4-byte store (STORE, on PIPE_S_CAL as msSanitizer runs it)."""
    return SCALAR.record("STORE", {"addr": addr, "size": 4, "space": space, "alignSize": 4, "location.pc": pc})


def wait_flag(src: Pipe, dst: Pipe, kind: str = "WAIT_FLAG") -> bytes:
    return SCALAR.record(kind, {"src": src, "dst": dst, "eventID": 1, "location.pc": 0x70})


def pipe_barrier(pipe: Pipe) -> bytes:
    return SCALAR.record("PIPE_BARRIER", {"pipe": pipe, "location.pc": 0x74})


def reading_thread(layout: wire.WireLayout, simd: list[bytes], *, calls: int = 1) -> bytes:
    """A slot whose thread 0 reads UB 0x200 in a SIMT call at MAIN_PC, its SIMD records ``simd``."""
    threads = {0: [Rec("SIMT_LDS", 0x200, 4, pc=0x44)]}
    return simt_slot(layout, threads, (1, 1, 1), simd=simd)


def test_a_section_sits_at_its_simt_call_and_ends_where_pipe_v_is_ordered_before_the_scalar() -> None:
    """The main scalar's stores before the SIMT_CALL come before the section; those after it are inside it up to a
    wait_flag(PIPE_V, PIPE_S) or a pipe_barrier(PIPE_ALL); the records after the call move up by the section's
    events, so serials stay in stream order."""
    layout = layout_of("26.1.0")
    call = simt_call(layout, MAIN_PC)
    simd = [scalar_store(0x100, 0x10), call, scalar_store(0x200, 0x20), wait_flag(Pipe.V, Pipe.S),
            scalar_store(0x300, 0x30), pipe_barrier(Pipe.ALL)]  # fmt: skip
    events, problems = decode(layout, reading_thread(layout, simd))
    assert problems == []
    columns = zip(events["kind"], events["address"], events["serial"], strict=True)
    shape = [(EventKind(k).name, int(a), int(s)) for k, a, s in columns]
    assert shape == [
        ("WRITE", 0x100, 10), ("SIMT_START", simt_dims_address(1, 1, 1), 12), ("READ", 0x200, 13),
        ("WRITE", 0x200, 14), ("SIMT_END", 0, 15), ("WAIT_FLAG", 0, 16), ("WRITE", 0x300, 17),
        ("PIPE_BARRIER", 0, 18),
    ]  # fmt: skip
    for closing in (pipe_barrier(Pipe.ALL), None):  # the barrier closes the section; without it the slot's end does
        simd = [call, closing, scalar_store(0x200, 0x20)] if closing else [call, scalar_store(0x200, 0x20)]
        events, _ = decode(layout, reading_thread(layout, simd))
        kinds = events["kind"].tolist()
        end, store = kinds.index(EventKind.SIMT_END), int(np.flatnonzero(events["kind"] == EventKind.WRITE)[0])
        assert (end < store) == (closing is not None)
    # A wait of another pair, or a barrier of PIPE_V alone, orders nothing of the scalar after the threads.
    for other in (wait_flag(Pipe.MTE2, Pipe.S), wait_flag(Pipe.V, Pipe.MTE3), pipe_barrier(Pipe.V)):
        events, _ = decode(layout, reading_thread(layout, [call, other, scalar_store(0x200, 0x20)]))
        assert events["kind"].tolist()[-1] == EventKind.SIMT_END


def test_each_call_ends_at_the_next_and_an_unplaced_call_follows_the_simd_records() -> None:
    """Two calls: the first's section ends where the second's SIMT_CALL is; a section whose pc no SIMT_CALL has
    is put after the SIMD records, said in a problem line (its threads are still checked against each other)."""
    layout = layout_of("26.1.0")
    threads = {0: [Rec("SIMT_LDS", 0x200, 4, main_pc=0x9000), Rec("SIMT_LDS", 0x240, 4, main_pc=0x9100)]}
    calls = [(0x9000, (1, 1, 1)), (0x9100, (1, 1, 1))]
    simd = [simt_call(layout, 0x9000), scalar_store(0x10, 0x20), simt_call(layout, 0x9100), scalar_store(0x20, 0x24)]
    events, problems = decode(layout, simt_slot(layout, threads, None, calls=calls, simd=simd))
    assert problems == []
    assert [(EventKind(k).name, int(a)) for k, a in zip(events["kind"], events["address"], strict=True)] == [
        ("SIMT_START", simt_dims_address(1, 1, 1)), ("READ", 0x200), ("WRITE", 0x10), ("SIMT_END", 0),
        ("SIMT_START", simt_dims_address(1, 1, 1)), ("READ", 0x240), ("WRITE", 0x20), ("SIMT_END", 0),
    ]  # fmt: skip
    simd = [simt_call(layout, 0x9000), scalar_store(0x10, 0x20)]  # 0x9100's SIMT_CALL missing
    events, problems = decode(layout, simt_slot(layout, threads, None, calls=calls, simd=simd))
    assert [EventKind(k).name for k in events["kind"]] == [
        "SIMT_START", "READ", "WRITE", "SIMT_END", "SIMT_START", "READ", "SIMT_END"]  # fmt: skip
    assert problems == [
        "1 SIMT calls of block 0 (aiv) with no SIMT_CALL record of their mainScalarPc among its SIMD records: placed "
        "after them, so the main scalar is not compared with their threads"
    ]


@pytest.mark.parametrize("chunk", [40, 1 << 20])
def test_the_events_held_after_the_first_call_are_bounded(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """Past MAX_HELD_ROWS the held SIMD events are let go in order (none lost) and the sections follow them,
    said in a problem line; at the bound they are still placed."""
    layout = layout_of("26.1.0")
    simd = [simt_call(layout, MAIN_PC)] + [scalar_store(0x200 + 4 * i, 0x20) for i in range(4)]
    for bound, placed in ((5, True), (4, False)):  # the call and four stores: 5 rows held
        monkeypatch.setattr(simt_place, "MAX_HELD_ROWS", bound)
        budget = ExpansionBudget()
        events, problems = decode(layout, reading_thread(layout, simd), chunk=chunk, budget=budget)
        assert budget.take_counts() == ({} if placed else {"simt_unplaced": 5})  # the metric's count
        assert events.size == 7 and sorted(events["address"][events["kind"] == EventKind.WRITE].tolist()) == [
            0x200, 0x204, 0x208, 0x20C]  # fmt: skip
        section = [EventKind.SIMT_START, EventKind.READ, EventKind.SIMT_END]
        assert (events["kind"][:2].tolist() == section[:2]) == placed
        assert (events["kind"][-3:].tolist() == section) != placed
        assert problems == ([] if placed else [
            "SIMT calls of block 0 (aiv) placed after its SIMD records, not at their SIMT_CALL: the 5 SIMD events "
            "and calls after its first SIMT_CALL are past the 4 sanitizerd holds back, so the main scalar is not "
            "compared with the threads"])  # fmt: skip


def test_the_main_scalar_racing_a_thread_on_the_wire_is_reported_and_its_ordered_variants_are_silent(
    daemon: RunningDaemon,
) -> None:
    """msSanitizer 26.1.0's hooks on a 950 chip: the main scalar stores UB 0x200 after the SIMT_CALL whose thread 0
    reads it (a race, msSanitizer's vf on PIPE_V unordered with the scalar), before the call, after a
    wait_flag(PIPE_V, PIPE_S), after a pipe_barrier(PIPE_ALL): only the first is reported."""
    layout = layout_of("26.1.0")
    call, store = simt_call(layout, MAIN_PC), scalar_store(0x200, 0x20)
    variants = {
        "scalar_after_call": [call, store],
        "scalar_before_call": [store, call],
        "scalar_after_wait": [call, wait_flag(Pipe.V, Pipe.S, "SET_FLAG"), wait_flag(Pipe.V, Pipe.S), store],
        "scalar_after_barrier": [call, pipe_barrier(Pipe.ALL), store],
    }
    job = "compat-simt-scalar"
    kernels = [kernel_packets(layout, name, reading_thread(layout, simd)) for name, simd in variants.items()]
    send_kernels(daemon, layout, job, ["racecheck"], kernels)
    found = json.loads(sanitizerd("findings", "--socket", str(daemon.socket), "--job", job, "--format=json").stdout)
    assert [(f["kernel"], f["kind"]) for f in found] == [("scalar_after_call", "race_war")], found
    text = sanitizerd("findings", "--socket", str(daemon.socket), "--job", job, "--format", "text").stdout
    lines = [line for line in text.splitlines() if line.startswith("======")]
    at = lines.index("====== ERROR: Potential WAR hazard detected at UB in scalar_after_call:")
    assert lines[at + 1].startswith("======     Read Thread (0,0,0) at WAR()+0x200 in block 0 (aiv) on device 0 ")
    assert lines[at + 2].startswith("======    PIPE_S Write at WAR()+0x200 in block 0 (aiv) on device 0 ")


# --- the device's inter-thread stomping (THREAD_OVERLAP) ------------------------------------------------------------


def overlap_desc(layout: wire.WireLayout, mine: tuple[int, int, int], owner: tuple[int, int, int], *,
                 addr: int = 0x2000, size: int = 4, space: int = Space.GM) -> dict[str, int]:  # fmt: skip
    over = "payload.overLapDesc."
    return {
        "errorType": layout.kernel_error_types["THREAD_OVERLAP"], "space": space, "location.pc": 0x88,
        "location.lineNo": 11, "threadLoc.idX": mine[0], "threadLoc.idY": mine[1], "threadLoc.idZ": mine[2],
        "threadLoc.mainScalarPc": MAIN_PC, over + "addr": addr, over + "overLapSize": size,
        over + "conflictedThreadLoc.idX": owner[0], over + "conflictedThreadLoc.idY": owner[1],
        over + "conflictedThreadLoc.idZ": owner[2],
    }  # fmt: skip


@pytest.mark.parametrize("name", WIRES)
@pytest.mark.parametrize(("mine", "owner"), [(1, 2), (2, 1)])
def test_an_overlap_the_device_found_is_the_owners_claim_then_the_write(name: str, mine: int, owner: int) -> None:
    """THREAD_OVERLAP: thread ``mine`` wrote bytes thread ``owner`` had written. It becomes the owner's claim of
    them (FLAG_CLAIM) right before this thread's write of them, whichever thread id is the lower."""
    layout = layout_of(name)
    access = Rec("SIMT_STG", 0x2000, 4, Space.GM, pc=0x88, loc=(mine, 0, 0))
    found = online_error(layout, access, [overlap_desc(layout, (mine, 0, 0), (owner, 0, 0), size=3)])
    events, problems = decode(layout, slot_with_area(layout, mine, found, 1, (4, 1, 1)))
    assert problems == []
    columns = zip(events["kind"], events["thread"], events["address"], events["block_size"], events["flags"],
                  events["pc"], strict=True)  # fmt: skip
    assert [tuple(int(v) for v in row) for row in columns] == [
        (EventKind.SIMT_START, 0, simt_dims_address(4, 1, 1), 0, 0, MAIN_PC),
        (EventKind.WRITE, owner + 1, 0x2000, 3, FLAG_CLAIM, 0),
        (EventKind.WRITE, mine + 1, 0x2000, 3, 0, 0x88),
        (EventKind.SIMT_END, 0, 0, 0, 0, 0),
    ]


@pytest.mark.parametrize(("desc", "problem"), [
    ({"space": Space.UB}, "1 SIMT THREAD_OVERLAP findings of msSanitizer's device outside GM not checked "
                          "(sanitizerd's inter-thread stomping check is GM's)"),
    ({"size": 0}, "1 SIMT accesses with no such address space or size"),
    ({"size": 0x10000}, "1 SIMT accesses with no such address space or size"),
    ({"size": 2**64 - 1}, "1 SIMT accesses with no such address space or size"),
    ({"space": 0}, "1 SIMT accesses with no such address space or size"),
    ({"owner": (9, 0, 0)}, "1 SIMT records whose thread location is not their thread area's"),
])  # fmt: skip
def test_a_hostile_or_unchecked_overlap_is_refused_and_counted(desc: dict, problem: str) -> None:
    """Sizes at and past the bound (1..65535), a space with no stomping check or none at all, an owner outside the
    call's dims: refused, counted, never clean; the write of the 65535-byte overlap at the bound is converted."""
    layout = layout_of("26.1.0")
    owner = desc.pop("owner", (1, 0, 0))
    access = Rec("SIMT_STG", 0x2000, 4, Space.GM, loc=(0, 0, 0))
    found = online_error(layout, access, [overlap_desc(layout, (0, 0, 0), owner, **desc)])
    _, problems = decode(layout, slot_with_area(layout, 0, found, 1, (4, 1, 1)))
    assert problems == [problem]
    found = online_error(layout, access, [overlap_desc(layout, (0, 0, 0), (1, 0, 0), size=0xFFFF)])
    events, problems = decode(layout, slot_with_area(layout, 0, found, 1, (4, 1, 1)))
    assert problems == [] and events["block_size"].tolist() == [0, 0xFFFF, 0xFFFF, 0]


def test_an_overlap_the_device_found_on_the_wire_is_msSanitizers_stomping_and_no_race(
    daemon: RunningDaemon,
) -> None:
    """msSanitizer 26.1.0's hooks on a 950 chip: thread (0,0,0) wrote 4 GM bytes thread (2,0,0) had written (the
    device's THREAD_OVERLAP in thread 0's area). memcheck reports msSanitizer's stomping, by thread (0,0,0);
    racecheck, initcheck and synccheck find nothing in the owner's claim; a kernel without it is clean."""
    layout = layout_of("26.1.0")
    client = Client(raw_named("26.1.0"))
    buffer = 0x12C0_C000_2000

    def kernel(name: str, overlapped: bool) -> bytes:
        access = Rec("SIMT_STG", buffer, 4, Space.GM, pc=0x88, loc=(0, 0, 0))
        kind = "THREAD_OVERLAP" if overlapped else "MISALIGNED_ACCESS"  # the clean one: a finding memcheck rejects
        desc = overlap_desc(layout, (0, 0, 0), (2, 0, 0), addr=buffer)
        desc["errorType"] = layout.kernel_error_types[kind]
        slot = slot_with_area(layout, 0, online_error(layout, access, [desc]), 1, (4, 1, 1))
        return kernel_packets(layout, name, slot)

    job = "compat-simt-overlap"
    malloc = client.host_op(MALLOC, buffer, 256)  # the buffer the threads write
    kernels = [malloc + kernel("simt_overlap", True), kernel("simt_own_bytes", False)]
    send_kernels(daemon, layout, job, ["memcheck", "racecheck", "initcheck", "synccheck"], kernels)
    found = json.loads(sanitizerd("findings", "--socket", str(daemon.socket), "--job", job, "--format=json").stdout)
    assert [(f["kernel"], f["kind"]) for f in found] == [("simt_overlap", "out_of_bounds")], found
    text = sanitizerd("findings", "--socket", str(daemon.socket), "--job", job, "--format", "text").stdout
    lines = [line for line in text.splitlines() if line.startswith("======")]
    at = lines.index("====== WARNING: out of bounds of size 4")
    assert lines[at + 1 : at + 3] == [
        f"======    at {buffer:#x} on GM when writing data in simt_overlap",
        "======    by thread (0,0,0) in block aiv(0) on device 0",
    ]
