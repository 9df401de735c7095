"""msSanitizer's SimtEntryRecords (26.1.0, master): each SIMT call's accesses as its block's PIPE_V instruction at
the call's SIMT_CALL, raced against the block's DMA, vector and scalar pipes; hostile heads and counts. The slots
are packed at the offsets wires.json measured (``WireLayout.structs``), not through the decoder's own code."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from sanitizerd.compat import wire
from sanitizerd.compat.records import simt_entry
from sanitizerd.compat.records import slots as rb
from sanitizerd.compat.records.convert.bounds import ExpansionBudget
from sanitizerd_protocol.records import FLAG_SIMT_ENTRY, EventKind, Pipe, Space, simt_dims_address
from tests.conftest import RunningDaemon, sanitizerd
from tests.test_compat_simt_wire import (
    MAIN_PC,
    SCALAR,
    WIRES,
    Rec,
    decode,
    kernel_packets,
    layout_of,
    scalar_store,
    send_kernels,
    simt_call,
    simt_slot,
    wait_flag,
)

READ, GLOBAL_READ, WRITE, RACE = 1, 2, 3, 4  # msSanitizer's MemoryByteStatus


def entry(layout: wire.WireLayout, addr: int, size: int, thread: int, state: int, *, ub: bool = True,
          pc: int = 0x44) -> bytes:  # fmt: skip
    """One SimtEntryRecord: its status word packs the thread id (bits 0-10), the byte state (11-14), UB (30) and
    the pc (32-47), as record_defs.h lays it out."""
    record = layout.structs["SimtEntryRecord"]
    body = bytearray(record.size)
    status = thread | state << 11 | (1 << 30 if ub else 0) | pc << 32
    struct.pack_into("<Q", body, record.offset("addr"), addr)
    struct.pack_into("<Q", body, record.offset("status"), status)
    struct.pack_into("<H", body, record.offset("size"), size)
    return bytes(body)


def shape_of(events: np.ndarray) -> list[tuple]:
    columns = zip(events["kind"], events["pipe"], events["thread"], events["address"], events["serial"], strict=True)
    return [(EventKind(k).name, int(p), int(t), int(a), int(s)) for k, p, t, a, s in columns]


@pytest.mark.parametrize("name", WIRES)
def test_the_entry_record_struct_is_measured(name: str) -> None:
    record = layout_of(name).structs["SimtEntryRecord"]
    assert (record.size, record.fields) == (24, (("addr", 0, "<u8"), ("status", 8, "<u8"), ("size", 16, "<u2")))
    assert simt_entry.entry_layout(record) is record


@pytest.mark.parametrize("name", WIRES)
@pytest.mark.parametrize("chunk", [7, 40, 1 << 20])
def test_each_entry_record_is_a_pipe_v_access_of_its_thread_right_after_its_simt_call(name: str, chunk: int) -> None:
    """A call's records make one PIPE_V instruction (one serial) in a section of their own with the call's dims,
    right after its SIMT_CALL: reads for READ/GLOBAL_READ, writes for WRITE/RACE, UB or GM by bit 30, the thread
    by bits 0-10, the pc's 16 bits; the records after the call move up, however the slot arrives."""
    layout = layout_of(name)
    records = (entry(layout, 0x200, 8, 1, READ) + entry(layout, 0x4000, 4, 2, WRITE, ub=False, pc=0x1234)
               + entry(layout, 0x300, 2, 0, RACE) + entry(layout, 0x5000, 16, 3, GLOBAL_READ, ub=False))  # fmt: skip
    simd = [scalar_store(0x100, 0x10), simt_call(layout, MAIN_PC), scalar_store(0x180, 0x20)]
    events, problems = decode(layout, simt_slot(layout, {}, (4, 1, 1), simd=simd, entries={0: records}), chunk)
    assert problems == []
    v, s = int(Pipe.V), int(Pipe.S)
    assert shape_of(events)[1:] == [
        ("SIMT_START", s, 0, simt_dims_address(4, 1, 1), 12), ("READ", v, 2, 0x200, 13), ("WRITE", v, 3, 0x4000, 13),
        ("WRITE", v, 1, 0x300, 13), ("READ", v, 4, 0x5000, 13), ("SIMT_END", s, 0, 0, 17),
        ("WRITE", events["pipe"][-1], 0, 0x180, 18),
    ]  # fmt: skip
    inner = events[2:6]
    assert (inner["flags"] == FLAG_SIMT_ENTRY).all()
    assert inner["space"].tolist() == [Space.UB, Space.GM, Space.UB, Space.GM]
    assert inner["block_size"].tolist() == [8, 4, 2, 16]
    assert inner["pc"].tolist() == [0x44, 0x1234, 0x44, 0x44]
    assert int(events["pc"][1]) == MAIN_PC


def test_the_nth_head_is_the_nth_call_and_the_threads_section_follows_the_first() -> None:
    """Two calls from one pc (a loop) with a thread record: each call's entry records sit at its own SIMT_CALL,
    as msSanitizer reads its n-th head at the n-th SIMT_CALL; the threads' section (one per pc) follows the first
    call's records; a SIMT_CALL with no head has none."""
    layout = layout_of("26.1.0")
    calls = [(MAIN_PC, (2, 1, 1)), (MAIN_PC, (2, 1, 1))]
    simd = [simt_call(layout, MAIN_PC), scalar_store(0x10, 0x20), simt_call(layout, MAIN_PC),
            scalar_store(0x20, 0x24), simt_call(layout, MAIN_PC)]  # fmt: skip
    entries = {0: entry(layout, 0x200, 4, 1, WRITE), 1: entry(layout, 0x240, 4, 0, READ)}
    threads = {0: [Rec("SIMT_LDS", 0x280, 4)]}
    events, problems = decode(layout, simt_slot(layout, threads, None, calls=calls, simd=simd, entries=entries))
    assert problems == []
    assert [(EventKind(k).name, int(t), int(a)) for k, t, a in zip(
        events["kind"], events["thread"], events["address"], strict=True)] == [
        ("SIMT_START", 0, simt_dims_address(2, 1, 1)), ("WRITE", 2, 0x200), ("SIMT_END", 0, 0),
        ("SIMT_START", 0, simt_dims_address(2, 1, 1)), ("READ", 1, 0x280), ("WRITE", 0, 0x10), ("SIMT_END", 0, 0),
        ("SIMT_START", 0, simt_dims_address(2, 1, 1)), ("READ", 1, 0x240), ("SIMT_END", 0, 0), ("WRITE", 0, 0x20),
    ]  # fmt: skip


def test_a_head_with_no_simt_call_follows_the_simd_records() -> None:
    layout = layout_of("26.1.0")
    calls = [(MAIN_PC, (1, 1, 1)), (MAIN_PC, (1, 1, 1))]
    entries = {0: entry(layout, 0x200, 4, 0, READ), 1: entry(layout, 0x240, 4, 0, READ)}
    simd = [simt_call(layout, MAIN_PC), scalar_store(0x10, 0x20)]  # the second call's SIMT_CALL missing
    events, problems = decode(layout, simt_slot(layout, {}, None, calls=calls, simd=simd, entries=entries))
    assert [(EventKind(k).name, int(a)) for k, a in zip(events["kind"], events["address"], strict=True)][1:] == [
        ("READ", 0x200), ("SIMT_END", 0), ("WRITE", 0x10), ("SIMT_START", simt_dims_address(1, 1, 1)),
        ("READ", 0x240), ("SIMT_END", 0),
    ]  # fmt: skip
    assert problems == [
        "1 SIMT calls of block 0 (aiv) with no SIMT_CALL record of their mainScalarPc among its SIMD records: placed "
        "after them, so the main scalar is not compared with their threads"
    ]


@pytest.mark.parametrize("chunk", [40, 1 << 20])
def test_hostile_entry_records_are_refused_and_counted(chunk: int) -> None:
    """A thread id past the dims, a record of no bytes, dims out of range, a count past the slot's end (2**64-1
    too: the rest of the slot is taken as records, nothing allocated for the count) and a head with exceedSize:
    each refused and said; the good records are still converted."""
    layout = layout_of("26.1.0")
    good, past, empty = (entry(layout, 0x200, 4, 1, READ), entry(layout, 0x240, 4, 2, READ),
                         entry(layout, 0x280, 0, 0, READ))
    calls = [(MAIN_PC, (2, 1, 1)), (0x5000, (0, 1, 1)), (0x6000, (1, 1, 1))]
    simd = [simt_call(layout, pc) for pc, _ in calls]
    alone = entry(layout, 0x200, 4, 0, WRITE)  # thread 0 of a call of one thread
    entries = {0: good + past + empty, 1: good, 2: alone + alone}
    slot = simt_slot(layout, {}, None, calls=calls, simd=simd, entries=entries, entry_counts={2: 5}, exceeded={0: 48})
    events, problems = decode(layout, slot, chunk)
    assert int(np.count_nonzero(events["flags"] == FLAG_SIMT_ENTRY)) == 3  # the first call's good one, the last's two
    assert problems == [
        "1 SIMT entry records of a SIMT call whose thread dims are out of range (a zero, or over 2048 threads)",
        "1 SIMT entry records of no bytes",
        "3 SIMT entry records past the end of the slot",
        "1 SIMT entry records whose thread id is past their call's dims",
        "48 bytes of SIMT entry records of 1 SIMT calls not checked (the device had no room for them: exceedSize)",
    ]
    slot = simt_slot(layout, {}, None, calls=calls[:1], simd=simd[:1], entries={0: good * 3},
                     entry_counts={0: 2**64 - 1})
    events, problems = decode(layout, slot, chunk)
    assert int(np.count_nonzero(events["flags"] == FLAG_SIMT_ENTRY)) == 3
    assert problems == [f"{2**64 - 1 - 3} SIMT entry records past the end of the slot"]


def test_records_past_the_bounds_are_refused_and_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The slot's limit of entry records, the heads a slot keeps, and the kernel's expansion budget."""
    layout = layout_of("26.1.0")
    good = entry(layout, 0x200, 4, 0, READ)
    calls = [(MAIN_PC, (1, 1, 1)), (0x5000, (1, 1, 1))]
    simd = [simt_call(layout, pc) for pc, _ in calls]
    slot = simt_slot(layout, {}, None, calls=calls, simd=simd, entries={0: good * 3, 1: good * 2})
    for bound, kept in ((5, 5), (3, 3)):  # at the bound all are kept; past it the rest is refused
        monkeypatch.setattr(simt_entry, "MAX_ENTRY_RECORDS", bound)
        events, problems = decode(layout, slot)
        assert int(np.count_nonzero(events["flags"] == FLAG_SIMT_ENTRY)) == kept
        assert problems == ([] if kept == 5 else ["2 SIMT entry records past the slot's limit of 3"])
    monkeypatch.undo()
    monkeypatch.setattr(rb, "MAX_SIMT_CALLS", 1)
    events, problems = decode(layout, slot)
    assert int(np.count_nonzero(events["flags"] == FLAG_SIMT_ENTRY)) == 3
    assert problems == ["2 SIMT entry records of a SIMT call past the heads sanitizerd keeps per slot"]
    monkeypatch.undo()
    for left, kept in ((9, 5), (8, 0)):  # the two calls' sections: 3 + 2 records and 4 marks
        budget = ExpansionBudget()
        budget.events_left = left
        events, problems = decode(layout, slot, budget=budget)
        assert int(np.count_nonzero(events["flags"] == FLAG_SIMT_ENTRY)) == kept
        assert problems == ([] if kept else ["5 SIMT entry records past the kernel's expansion limit"])


# --- end to end: a SIMT chip's hooks on the job's compat socket ------------------------------------------------


def dma_in(pc: int) -> bytes:
    """A DMA_MOV (PIPE_MTE2) of 32 bytes from GM 0x9000 to UB 0x200."""
    return SCALAR.dma(0x200, 0x9000, pc)


def test_a_dma_racing_a_simt_call_on_the_wire_is_reported_and_its_synced_variants_are_silent(
    daemon: RunningDaemon,
) -> None:
    """msSanitizer 26.1.0's hooks on a 950 chip, a SIMT call whose thread (1,0,0) reads UB 0x200 (its one entry
    record; the thread area holds nothing, as a real client's): a DMA into it after the call with no sync between
    PIPE_V and PIPE_MTE2 is racecheck's WAR, named as msSanitizer names a SIMT_ENTRY side, and one before the call
    with no sync a RAW; with set_flag/wait_flag (PIPE_V, PIPE_MTE2) after it, or (PIPE_MTE2, PIPE_V) before it,
    nothing. The main scalar storing it after the call is a WAR too (after a wait_flag(PIPE_V, PIPE_S), nothing),
    reported once where the thread's own record says the same. memcheck does not judge the call's records."""
    layout = layout_of("26.1.0")
    call = simt_call(layout, MAIN_PC)
    reads = {0: entry(layout, 0x200, 4, 1, READ, pc=0x44)}

    def kernel(name: str, simd: list[bytes], threads: dict[int, list[Rec]] | None = None,
               entries: dict[int, bytes] = reads) -> bytes:  # fmt: skip
        return kernel_packets(layout, name, simt_slot(layout, threads or {}, (2, 1, 1), simd=simd, entries=entries))

    synced = [wait_flag(Pipe.V, Pipe.MTE2, "SET_FLAG"), wait_flag(Pipe.V, Pipe.MTE2)]
    mte2_to_v = [wait_flag(Pipe.MTE2, Pipe.V, "SET_FLAG"), wait_flag(Pipe.MTE2, Pipe.V)]
    v_to_s = [wait_flag(Pipe.V, Pipe.S, "SET_FLAG"), wait_flag(Pipe.V, Pipe.S)]
    kernels = [
        kernel("dma_after_call", [call, dma_in(0x30)]),
        kernel("dma_after_sync", [call, *synced, dma_in(0x30)]),
        kernel("dma_before_call", [dma_in(0x30), *mte2_to_v, call]),
        kernel("dma_before_call_unsynced", [dma_in(0x30), call]),
        kernel("scalar_after_call", [call, scalar_store(0x200, 0x20)], {1: [Rec("SIMT_LDS", 0x200, 4, pc=0x44)]}),
        kernel("scalar_after_call_entries_only", [call, scalar_store(0x200, 0x20)]),
        kernel("scalar_after_wait_entries_only", [call, *v_to_s, scalar_store(0x200, 0x20)]),
        kernel("entry_in_gm", [call], entries={0: entry(layout, 0x4000, 4, 0, WRITE, ub=False)}),
    ]
    job = "compat-simt-entry"
    send_kernels(daemon, layout, job, ["racecheck", "memcheck"], kernels)
    found = json.loads(sanitizerd("findings", "--socket", str(daemon.socket), "--job", job, "--format=json").stdout)
    # memcheck: the DMA's GM is no allocation of the job's; the SIMT call's records are not judged (the device did)
    assert [(f["kernel"], f["kind"]) for f in found if f["kind"] != "illegal_read"] == [
        ("dma_after_call", "race_war"), ("dma_before_call_unsynced", "race_raw"), ("scalar_after_call", "race_war"),
        ("scalar_after_call_entries_only", "race_war")], found  # fmt: skip
    assert all(f["kernel"].startswith("dma_") for f in found if f["kind"] == "illegal_read"), found
    text = sanitizerd("findings", "--socket", str(daemon.socket), "--job", job, "--format", "text").stdout
    lines = [line for line in text.splitlines() if line.startswith("======")]
    at = lines.index("====== ERROR: Potential WAR hazard detected at UB in dma_after_call:")
    assert lines[at + 1].startswith("======     Read Thread (1,0,0) at WAR()+0x200 in block 0 (aiv) on device 0 ")
    assert lines[at + 2].startswith("======    PIPE_MTE2 Write at WAR()+0x200 in block 0 (aiv) on device 0 ")
    at = lines.index("====== ERROR: Potential RAW hazard detected at UB in dma_before_call_unsynced:")
    assert lines[at + 1].startswith("======    PIPE_MTE2 Write at RAW()+0x200 in block 0 (aiv) on device 0 ")
    assert lines[at + 2].startswith("======     Read Thread (1,0,0) at RAW()+0x200 in block 0 (aiv) on device 0 ")
    for name in ("scalar_after_call", "scalar_after_call_entries_only"):
        at = lines.index(f"====== ERROR: Potential WAR hazard detected at UB in {name}:")
        assert lines[at + 1].startswith("======     Read Thread (1,0,0) at WAR()+0x200 in block 0 (aiv) on device 0 ")
        assert lines[at + 2].startswith("======    PIPE_S Write at WAR()+0x200 in block 0 (aiv) on device 0 ")
