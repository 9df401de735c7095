"""DCCI records (master on) packed at the offsets wires.json measured, read by the compat door into DCCI events, and
what racecheck --check-dcci makes of them; hostile DCCI events sent to racecheck directly (native door's shape)."""

from __future__ import annotations

import numpy as np
import pytest

from sanitizerd.chips import chip_named
from sanitizerd.compat import wire
from sanitizerd.compat.records.numbering import record_table
from sanitizerd.compat.records.types import RecordType
from sanitizerd.detectors import DETECTORS
from sanitizerd.detectors.base import SessionContext
from sanitizerd.detectors.memory_budget import MemoryBudget
from sanitizerd.detectors.racecheck import BYTES_PER_DCCI
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.records import DCCI_ENTIRE, EVENT_DTYPE, BlockType, DcciTarget, EventKind, Pipe, Space
from tests.detector_helpers import run_kernel
from tests.test_compat_layouts import Client, connect, events_of, feed_all, raw_named

GM_SPACE = 1  # AddressSpace::GM in the record
VALUE = 0x12C1_0000_0000
WITH_DCCI = [name for name, layout in wire.LAYOUTS.items() if "DCCI" in layout.record_types]


def test_the_releases_with_dcci_read_it_and_the_others_have_none() -> None:
    """The DcciRecord as measured (48 bytes; addr 32, space 40, entire 44, type 45), read on every release that has
    it, from the first to master; the April reference has no such type."""
    assert "mssanitizer-1e040de1" in WITH_DCCI and wire.layout_named("master").name in WITH_DCCI
    assert len(WITH_DCCI) == 3
    for name in WITH_DCCI:
        raw = raw_named(name)
        assert raw["payloads"]["DCCI"] == ["DcciRecord", 48]
        fields = raw["payload_structs"]["DcciRecord"]["fields"]
        assert [fields[f][0] for f in ("addr", "space", "entire", "type")] == [32, 40, 44, 45]
        dtype = record_table(wire.LAYOUTS[name]).dtypes[int(RecordType.DCCI)]
        assert dtype.itemsize == 48 and dtype.fields["addr"][1] == 32 and dtype.fields["target"][1] == 45
    assert int(RecordType.DCCI) not in record_table(wire.LAYOUTS[wire.DEFAULT_LAYOUT]).dtypes


def scalar(client: Client, kind: str, address: int, pc: int, block_id: int) -> bytes:
    values = {"addr": address, "size": 4, "space": GM_SPACE, "alignSize": 4, "location.pc": pc,
              "location.blockId": block_id}  # fmt: skip
    return client.record(kind, values)


def dcci(client: Client, address: int, pc: int, block_id: int, *, entire: int = 0, target: int = 0,
         space: int = GM_SPACE) -> bytes:  # fmt: skip
    values = {"addr": address, "space": space, "entire": entire, "type": target, "location.pc": pc,
              "location.blockId": block_id}  # fmt: skip
    return client.record("DCCI", values)


def converted(client: Client, *blocks: list[bytes]) -> tuple[np.ndarray, list[m.Message]]:
    """One launch, a slot per block (block ids from 0), read by one connection."""
    conn = connect(wire.LAYOUTS[client.name])
    out: list[m.Message] = []
    slots = [client.slot(records, block_id=i, total=len(blocks)) for i, records in enumerate(blocks)]
    feed_all(conn, client.device_summary() + client.kernel_summary(block_dim=len(blocks)) + b"".join(slots), out)
    return events_of(out), out


@pytest.mark.parametrize("name", WITH_DCCI)
def test_dcci_records_become_dcci_events(name: str) -> None:
    client = Client(raw_named(name))
    events, _ = converted(client, [
        scalar(client, "ST", VALUE, 0x10, 0),
        dcci(client, VALUE, 0x14, 0, target=DcciTarget.CACHE_LINE_OUT),
        dcci(client, 2**64 - 1, 0x18, 0, entire=1, target=DcciTarget.CACHE_LINE_UB),
    ])  # fmt: skip
    write = events[events["kind"] == EventKind.WRITE]
    line, whole = events[events["kind"] == EventKind.DCCI]
    assert line["serial"] == write[0]["serial"] + 1 and whole["serial"] == line["serial"] + 1
    assert (line["address"], line["space"], line["mode"], line["event_id"]) == (VALUE, Space.GM, 0, 2)
    assert (whole["address"], whole["mode"], whole["event_id"]) == (2**64 - 1, DCCI_ENTIRE, DcciTarget.CACHE_LINE_UB)
    assert line["pipe"] == Pipe.S and line["block_size"] == 0


def test_damaged_dcci_records_are_dropped_and_said() -> None:
    client = Client(raw_named("master"))
    records = [dcci(client, VALUE, 0x10, 0, space=0x7FFF_FFFF), dcci(client, VALUE, 0x14, 0, space=-1),
               dcci(client, VALUE, 0x18, 0, entire=2), dcci(client, VALUE, 0x1C, 0, target=4),
               dcci(client, VALUE, 0x20, 0, entire=255, target=255), dcci(client, VALUE, 0x24, 0)]  # fmt: skip
    events, out = converted(client, records)
    assert (events["kind"] == EventKind.DCCI).sum() == 1
    (end,) = [x for x in out if isinstance(x, m.KernelEnd)]
    assert end.problems == ["5 DCCI records dropped: no such address space, extent or target"]


def racecheck(check_dcci: bool = True, *, budget: int | None = None, max_events: int = 10_000_000):
    context = SessionContext(job="j", session=1, pid=2, device=0, chip=chip_named("910B1"),
                             config=m.Config(tools=["racecheck"], check_dcci=check_dcci),
                             max_race_events=max_events)  # fmt: skip
    if budget is not None:
        context.race_memory = MemoryBudget(budget).account()
    return DETECTORS["racecheck"](context)


def test_a_write_and_a_read_of_two_blocks_read_from_the_wire() -> None:
    """Block 0 writes and cleans; block 1 reads with no dcci before it: one report, the write first. With block 1's
    dcci before its read, none; with the check off, none (the two blocks share a cross-core flag in neither: the
    race itself is racecheck's own finding and is left aside here)."""
    client = Client(raw_named("master"))
    writer = [scalar(client, "ST", VALUE, 0x10, 0), dcci(client, VALUE, 0x14, 0)]
    bare_reader = [scalar(client, "LD", VALUE, 0x20, 1)]
    reader = [dcci(client, VALUE + 8, 0x1C, 1), scalar(client, "LD", VALUE, 0x20, 1)]

    def missing(*blocks: list[bytes], on: bool = True) -> list:
        events, _ = converted(client, *blocks)
        assert set(events["block_type"].tolist()) == {BlockType.AIV}
        return [f for f in run_kernel(racecheck(on), events) if f.kind == "dcci_missing"]

    (finding,) = missing(writer, bare_reader)
    assert [(a.op, a.blocks, a.pc, a.address) for a in finding.accesses] == [
        ("Write", [0], 0x10, VALUE), ("Read", [1], 0x20, VALUE)]  # fmt: skip
    assert missing(writer, reader) == []  # the dcci names the read's 256-byte line
    assert missing(writer, bare_reader, on=False) == []


# --- hostile DCCI events, as a native client may send them ---------------------------------------------------------


def events(*rows: dict) -> np.ndarray:
    out = np.zeros(len(rows), dtype=EVENT_DTYPE)
    out["block_num"] = out["repeat"] = out["block_stride"] = 1
    for i, row in enumerate(rows):
        for key, value in row.items():
            out[key][i] = value
    return out


def write(serial: int, block: int = 0, address: int = VALUE) -> dict:
    return dict(kind=EventKind.WRITE, space=Space.GM, address=address, block_size=4, pipe=Pipe.S_CAL, serial=serial,
                block_id=block)  # fmt: skip


def read(serial: int, block: int = 1, address: int = VALUE) -> dict:
    return {**write(serial, block, address), "kind": EventKind.READ}


def a_dcci(serial: int, block: int, address: int = VALUE, **more: int) -> dict:
    return {"kind": EventKind.DCCI, "space": Space.GM, "address": address, "serial": serial, "block_id": block,
            "pipe": Pipe.S, "block_size": 0, **more}  # fmt: skip


def kinds(findings: list) -> list[str]:
    return sorted(f.kind for f in findings if f.kind != "race_raw")


@pytest.mark.parametrize(
    ("dcci_row", "reported"),
    [
        (a_dcci(2, 0), False),  # the very next instruction, on the write's line
        (a_dcci(2, 0, address=VALUE + 255), False),  # the same 256-byte line
        (a_dcci(2, 0, address=VALUE + 256), True),  # the next line
        (a_dcci(2, 0, address=0, mode=DCCI_ENTIRE), False),  # the whole data cache
        (a_dcci(3, 0), True),  # two instructions on: past msSanitizer's window of one
        (a_dcci(0, 0), True),  # before the write, not after it
        (a_dcci(2, 1), True),  # another block's
        (a_dcci(2, 0, event_id=DcciTarget.CACHE_LINE_UB), True),  # UB only
        (a_dcci(2, 0, space=Space.UB), True),
        (a_dcci(2, 0, space=200, event_id=60_000), True),  # no such space or target
        (a_dcci(2, 0, address=2**64 - 1), True),
    ],
)
def test_which_dcci_covers_a_write(dcci_row: dict, reported: bool) -> None:
    found = run_kernel(racecheck(), events(write(1), dcci_row, a_dcci(9, 1), read(10)))
    assert kinds(found) == (["dcci_missing"] if reported else [])


@pytest.mark.parametrize(("offset", "reported"), [(0, False), (63, False), (64, True), (255, True)])
def test_the_950s_cache_line_is_64_bytes(offset: int, reported: bool) -> None:
    """On the 950 family a dcci of one cache line covers 64 bytes, not 256: a write's line is its own 64."""
    detector = racecheck()
    detector.context.chip = chip_named("Ascend950PR")
    found = run_kernel(detector, events(write(1), a_dcci(2, 0, address=VALUE + offset), a_dcci(9, 1), read(10)))
    assert kinds(found) == (["dcci_missing"] if reported else [])


def test_serials_at_the_ends_of_u64_match_nothing_and_end_nothing() -> None:
    top = 2**64 - 1
    found = run_kernel(racecheck(), events(write(top), a_dcci(0, 0), a_dcci(top, 1), read(0), a_dcci(top - 1, 1),
                                           read(top, address=VALUE + 4)))  # fmt: skip
    assert "dcci_missing" in kinds(found)


def test_a_dcci_not_kept_is_said_and_nothing_is_guessed() -> None:
    """Past the launch's limit, DCCI events are counted and the launch is not judged on the rest."""
    many = [a_dcci(100 + i, 1, address=0) for i in range(50)]
    found = run_kernel(racecheck(max_events=20), events(write(1), a_dcci(2, 0), *many, read(200)))
    assert kinds(found) == ["internal_error"]
    (error,) = [f for f in found if f.kind == "internal_error"]
    assert "racecheck kept at most 20 DCCI events" in error.detail and "31 were not kept" in error.detail


def test_dcci_events_are_charged_to_the_hosts_budget() -> None:
    detector = racecheck(budget=10 * BYTES_PER_DCCI)
    found = run_kernel(detector, events(*[a_dcci(i, 0) for i in range(11)]))
    assert [f.kind for f in found] == ["internal_error"]
    assert detector.context.race_memory.held == 0  # given back at the launch's end


def test_dcci_events_without_the_check_cost_nothing() -> None:
    detector = racecheck(check_dcci=False, budget=BYTES_PER_DCCI)
    assert run_kernel(detector, events(*[a_dcci(i, 0) for i in range(100)])) == []
