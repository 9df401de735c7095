"""Records of one instruction share its serial number (msSanitizer aca3f9d, 99e8c685; issue 28).

From aca3f9d (2026-07-03) msSanitizer's tool gives an ELEMENT record after a VGATHER or an ELEMENT, and a VSEL_OP
after a CMPMASK_OP, the serial number of the record before it; from 99e8c685 (2026-07-09) also a UNARY_OP,
BINARY_OP, DMA_MOV or MOV_ALIGN after an MSTX_STUB: one instruction, whose records do not race with each other. The
rule is per wire (``serials.merge`` in wires.json); the wires before it are read with it too, so that racecheck
does not report an instruction racing with itself (docs/mssanitizer-later.md, "Serial numbers").

Records packed at each release's measured offsets (tests/test_compat_layouts.py's Client), read by the compat door,
checked by racecheck.
"""

from __future__ import annotations

import numpy as np
import pytest

from sanitizerd.compat import wire
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.records import EventKind
from tests.conftest import RunningDaemon
from tests.detector_helpers import make_detector, run_kernel
from tests.mssanitizer_job_client import WRITE_LINE
from tests.test_compat_layouts import LAYOUT_NAMES, Client, connect, drain, events_of, feed_all, raw_named
from tests.test_compat_lockup import run_job

READ, WRITE = 0, 1  # AccessType
GM_MEM, UB_MEM = 6, 4  # MemType of a DmaMovRecord
SET_CROSS_SYNC, DATA_COPY = 0, 4001  # InterfaceType of an MstxRecord
UB, GM = 2, 1  # MemorySpace of an mstx tensor
ALL = (1 << 64) - 1
MASTER = "mssanitizer-1e040de1"


def dma(client: Client, ub: int, gm: int) -> bytes:
    values = {"dst": ub, "src": gm, "nBurst": 1, "lenBurst": 1, "dstMemType": UB_MEM, "srcMemType": GM_MEM}
    return client.record("DMA_MOV", values)


def vgather(client: Client, dst: int, offsets: int) -> bytes:
    values = {"dst": dst, "src": offsets, "dstBlockSize": 32, "srcBlockSize": 32, "dstBlockNum": 1, "srcBlockNum": 1,
              "dstRepeat": 1, "dstDataBits": 16, "vectorMask.mask0": ALL, "vectorMask.mask1": ALL}  # fmt: skip
    return client.record("VGATHER", values)


def element(client: Client, addr: int, access: int) -> bytes:
    values = {"addr": addr, "blockSize": 32, "blockNum": 1, "dataBits": 16, "accessType": access}
    return client.record("ELEMENT", values)


def cmpmask(client: Client, addr: int, access: int) -> bytes:
    return client.record("CMPMASK_OP", {"addr": addr, "size": 16, "accessType": access})


def vsel(client: Client, dst: int, src0: int, src1: int) -> bytes:
    values = {"dst": dst, "src0": src0, "src1": src1, "repeat": 1, "vectorMask.mask0": ALL, "vectorMask.mask1": ALL}
    for operand in ("dst", "src0", "src1"):
        values |= {f"{operand}BlockSize": 32, f"{operand}BlockNum": 8, f"{operand}BlockStride": 1,
                   f"{operand}RepeatStride": 8, f"{operand}DataBits": 16}  # fmt: skip
    return client.record("VSEL_OP", values)


def mstx_set_flag(client: Client) -> bytes:
    return client.record("MSTX_STUB", {"interfaceType": SET_CROSS_SYNC, "interface.mstxCrossRecord.flagId": 1})


def mstx_copy(client: Client, ub: int, gm: int) -> bytes:
    """AscendC's annotation of the DataCopy that ``dma(client, ub, gm)`` records (a cross-core set where the
    release has no such annotation)."""
    desc = "interface.mstxDataCopyDesc."
    if f"{desc}nBurst" not in client.raw["payload_structs"]["MstxRecord"]["fields"]:
        return mstx_set_flag(client)
    values = {"interfaceType": DATA_COPY, f"{desc}dst.addr": ub, f"{desc}dst.space": UB, f"{desc}dst.size": 32,
              f"{desc}dst.dataBits": 8, f"{desc}src.addr": gm, f"{desc}src.space": GM, f"{desc}src.size": 32,
              f"{desc}src.dataBits": 8, f"{desc}nBurst": 1, f"{desc}lenBurst": 1}  # fmt: skip
    return client.record("MSTX_STUB", values)


def door_events(name: str, records: list[bytes], piece: int | None = None) -> np.ndarray:
    """The events the compat door makes of one slot of ``records`` (``piece``: fed that many bytes at a time)."""
    client = Client(raw_named(name))
    data = client.device_summary() + client.kernel_summary() + client.slot(records)
    conn = connect(wire.LAYOUTS[name])
    out: list[m.Message] = []
    if piece is None:
        feed_all(conn, data, out)
    else:
        for at in range(0, len(data), piece):
            conn.receive_data(data[at : at + piece])
            drain(conn, out)
        feed_all(conn, b"", out)
    return events_of(out)


# A slot whose records the tool of 99e8c685 on numbers (from the slot's first serial s):
# s, s+1 (VGATHER), s+1, s+1 (its ELEMENTs), s+2 (CMPMASK_OP), s+2 (its VSEL_OP), s+3 (a VSEL_OP after a VSEL_OP),
# s+4 (MSTX_STUB), s+4 (its DMA_MOV), s+5 (an ELEMENT after a DMA_MOV), s+6 (CMPMASK_OP), s+7 (an ELEMENT after it);
# the slot's BLOCK_FINISH s+8. The tool before aca3f9d numbers them s .. s+11 and s+12.
def sample(client: Client) -> list[bytes]:
    return [
        dma(client, 0x100, 0x1000),
        vgather(client, 0x5000, 0x4000),
        element(client, 0x2000, WRITE),
        element(client, 0x2000, WRITE),
        cmpmask(client, 0x3000, WRITE),
        vsel(client, 0x3000, 0x6000, 0x6400),
        vsel(client, 0x7000, 0x8000, 0x8400),
        mstx_set_flag(client),
        dma(client, 0x200, 0x1100),
        element(client, 0x2100, READ),
        cmpmask(client, 0x3100, WRITE),
        element(client, 0x2200, WRITE),
    ]


SAMPLE_SERIALS = {  # an access's address -> its serial, less the slot's first
    0x100: 0, 0x1000: 0, 0x4000: 1, 0x5000: 1, 0x2000: 1, 0x3000: 2, 0x6000: 2, 0x6400: 2, 0x7000: 3,
    0x8000: 3, 0x8400: 3, 0x200: 4, 0x1100: 4,
    0x2100: 5, 0x3100: 6, 0x2200: 7,
}  # fmt: skip
MERGING = {"mssanitizer-6e6a3a28", "mssanitizer-74a1ad94", "mssanitizer-77aa773b", "mssanitizer-e7543a02",
           "mssanitizer-0a8f541f", "mssanitizer-0c6f91eb", "mssanitizer-1e040de1"}  # fmt: skip


def serials_by_address(events: np.ndarray, first: int) -> dict[int, set[int]]:
    accesses = events[np.isin(events["kind"], [EventKind.READ, EventKind.WRITE])]
    found: dict[int, set[int]] = {}
    for address, serial in zip(accesses["address"].tolist(), accesses["serial"].tolist(), strict=True):
        found.setdefault(address, set()).add(serial - first)
    return found


def test_the_wires_from_the_change_on_carry_the_tools_rule() -> None:
    assert {name for name, layout in wire.LAYOUTS.items() if layout.serial_merges} == MERGING
    assert wire.LAYOUTS[MASTER].serial_merges == (
        (("ELEMENT",), ("VGATHER", "ELEMENT")),
        (("VSEL_OP",), ("CMPMASK_OP",)),
        (("UNARY_OP", "BINARY_OP", "DMA_MOV", "MOV_ALIGN"), ("MSTX_STUB",)),
    )
    assert wire.layout_named("26.1.0").serial_merges == wire.layout_named("master").serial_merges  # type: ignore[union-attr]
    assert wire.LAYOUTS[wire.DEFAULT_LAYOUT].serial_merges == ()


@pytest.mark.parametrize("name", LAYOUT_NAMES)
def test_an_instructions_records_share_its_serial_as_the_tool_numbers_them(name: str) -> None:
    """Every wire: the numbering of the tool from 99e8c685 on (the wires before it too: see the module's doc)."""
    first = wire.LAYOUTS[name].first_serial
    events = door_events(name, sample(Client(raw_named(name))))
    assert serials_by_address(events, first) == {address: {serial} for address, serial in SAMPLE_SERIALS.items()}
    assert events["kind"][-1] == EventKind.BLOCK_FINISH
    assert int(events["serial"][-1]) == first + 8


@pytest.mark.parametrize("name", [wire.DEFAULT_LAYOUT, "mssanitizer-6e6a3a28", MASTER])
@pytest.mark.parametrize("piece", [4, 7, 68, 100])
def test_the_serial_follows_the_record_before_across_the_pieces_of_a_slot(name: str, piece: int) -> None:
    """The slot arrives a few bytes at a time: a VGATHER, CMPMASK_OP or MSTX_STUB at the end of one piece, the
    record it lends its serial to in the next."""
    first = wire.LAYOUTS[name].first_serial
    whole = door_events(name, sample(Client(raw_named(name))))
    pieces = door_events(name, sample(Client(raw_named(name))), piece)
    assert serials_by_address(pieces, first) == serials_by_address(whole, first)
    assert pieces.tobytes() == whole.tobytes()


def test_a_record_after_another_slots_last_takes_its_own_serial() -> None:
    """The tool's record before is the block's: a slot's first ELEMENT follows no VGATHER of the slot before."""
    client = Client(raw_named("master"))
    data = client.device_summary() + client.kernel_summary(block_dim=2)
    data += client.slot([vgather(client, 0x5000, 0x4000)], block_id=0, total=2)
    data += client.slot([element(client, 0x2000, WRITE)], block_id=1, total=2)
    out: list[m.Message] = []
    feed_all(connect(wire.layout_named("master")), data, out)  # type: ignore[arg-type]
    events = events_of(out)
    assert serials_by_address(events, 1) == {0x4000: {0}, 0x5000: {0}, 0x2000: {2}}  # 1: block 0's BLOCK_FINISH


def races(name: str, records: list[bytes]) -> list[tuple[str, list[int], int]]:
    """Racecheck's findings on one slot of ``records``: kind, the serials of the first pair, and how many pairs."""
    detector = make_detector("racecheck")
    found = run_kernel(detector, door_events(name, records))
    return [(f.kind, [a.serial for a in f.accesses], f.count) for f in found]


@pytest.mark.parametrize("name", LAYOUT_NAMES)
def test_an_instruction_does_not_race_with_itself(name: str) -> None:
    """A vgather's ELEMENTs writing one place, a vsel writing where its CMPMASK_OP did, and a DataCopy with its
    mstx annotation: one instruction each, no race on any wire."""
    client = Client(raw_named(name))
    records = [
        vgather(client, 0x5000, 0x4000),
        element(client, 0x2000, WRITE),
        element(client, 0x2000, WRITE),
        cmpmask(client, 0x3000, WRITE),
        vsel(client, 0x3000, 0x6000, 0x6400),
        mstx_copy(client, 0x100, 0x1000),
        dma(client, 0x100, 0x1000),
    ]
    assert races(name, records) == []


@pytest.mark.parametrize("name", [wire.DEFAULT_LAYOUT, MASTER])
def test_two_instructions_still_race(name: str) -> None:
    """The same writes as two instructions (an ELEMENT after a CMPMASK_OP, a VSEL_OP after a VSEL_OP) race: two
    write-after-write pairs, reported once (the first)."""
    client = Client(raw_named(name))
    first = wire.LAYOUTS[name].first_serial
    records = [
        element(client, 0x2000, WRITE),
        cmpmask(client, 0x3100, WRITE),
        element(client, 0x2000, WRITE),
        vsel(client, 0x3000, 0x6000, 0x6400),
        vsel(client, 0x3000, 0x6000, 0x6400),
    ]
    assert races(name, records) == [("race_waw", [first, first + 2], 2)]


# --- end to end: a client process of msSanitizer's wire, a real daemon, racecheck ---------------------------------


@pytest.mark.parametrize("release", [wire.DEFAULT_LAYOUT, "26.1.0", "master"])
def test_a_vgathers_elements_are_no_race_through_a_daemon(daemon: RunningDaemon, release: str) -> None:
    out, findings = run_job(daemon, "vgather", ("racecheck",), release)
    assert findings == [], out
    assert "hazard" not in out


@pytest.mark.parametrize(("release", "first"), [(wire.DEFAULT_LAYOUT, 0), ("master", 1)])
def test_two_elements_apart_race_through_a_daemon(daemon: RunningDaemon, release: str, first: int) -> None:
    """The control: the ELEMENTs are two instructions (a CMPMASK_OP between them), reported in msSanitizer's text
    with the serial numbers the client's tool prints."""
    out, findings = run_job(daemon, "vgather-apart", ("racecheck",), release)
    [race] = findings
    assert race["kind"] == "race_waw"
    assert [a["serial"] for a in race["accesses"]] == [first, first + 2]
    assert "====== ERROR: Potential WAW hazard detected at UB in gather_kernel" in out, out
    assert f"block 0 (aiv) on device 0 at unknown:{WRITE_LINE} (serialNo:{first})" in out, out
    assert f"block 0 (aiv) on device 0 at unknown:{WRITE_LINE + 2} (serialNo:{first + 2})" in out, out
