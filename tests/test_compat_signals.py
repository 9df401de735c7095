"""msSanitizer's mstx signal set / wait on its own wire (issue 28): MSTX_STUB records of interfaces 7 and 8 packed at
the offsets wires.json measured, read by the compat door into the native NPU_SIGNAL_SET / NPU_SIGNAL_WAIT; hostile
values; and end to end, two msSanitizer-form connections of one job ordered by a signal through a real daemon."""

from __future__ import annotations

import numpy as np
import pytest

from sanitizerd.compat import wire
from sanitizerd.compat.records.numbering import record_table
from sanitizerd.compat.records.types import RecordType
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.records import CompareOp, EventKind, Pipe, signal_value
from tests.conftest import RunningDaemon
from tests.mssanitizer_job_client import SIGNAL_SET, SIGNAL_WAIT
from tests.test_compat_cross_npu import CROSS, FIRST, SIGNALS_ONLY, WITH_BARRIER, _mstx_fields, converted, run_job
from tests.test_compat_layouts import Client, raw_named

SET, WAIT = "interface.mstxSignalSet.", "interface.mstxSignalWait."
WITH_SIGNALS = [name for name in wire.LAYOUTS if WAIT + "cmpOp" in _mstx_fields(name)]
MSTX = int(RecordType.MSTX_STUB)
ADDRESS = 0x12C0_4000_1000
I64_MIN, I64_MAX = -(2**63), 2**63 - 1


def test_the_signals_are_read_where_measured_and_nowhere_else() -> None:
    """MstxSignalSet {u64 addr; i64 value} and MstxSignalWait {u64 addr; i64 cmpValue; CompareOp cmpOp} in
    MstxRecord's union at 48 (measured with g++'s offsetof on 5cb9ea94, 9743f8b7, 26.1.0 and master: 48, 56, 48,
    56, 64, a 4-byte enum, MstxRecord 272 bytes): from their first release, 2026-04-13's 5cb9ea94 (``git log -S
    MstxSignalSet``), a day before the cross-NPU barrier, to master; the reference and releases before lack them."""
    assert SIGNALS_ONLY in WITH_SIGNALS and set(WITH_BARRIER) <= set(WITH_SIGNALS)
    assert set(WITH_SIGNALS) == {*WITH_BARRIER, SIGNALS_ONLY}
    assert wire.layout_named("master").name in WITH_SIGNALS and wire.layout_named("26.1.0").name in WITH_SIGNALS
    for name in WITH_SIGNALS:
        fields = _mstx_fields(name)
        assert fields[SET + "addr"][:2] == [48, "<u8"] and fields[SET + "value"][:2] == [56, "<i8"]
        assert fields[WAIT + "addr"][:2] == [48, "<u8"] and fields[WAIT + "cmpValue"][:2] == [56, "<i8"]
        assert fields[WAIT + "cmpOp"][:2] == [64, "<i4"]
        dtype = record_table(wire.LAYOUTS[name]).dtypes[MSTX]
        offsets = {n: dtype.fields[n][1] for n in ("signal_addr", "signal_value", "wait_addr", "wait_value", "wait_op")}
        assert offsets == {"signal_addr": 48, "signal_value": 56, "wait_addr": 48, "wait_value": 56, "wait_op": 64}
    dtype = record_table(wire.LAYOUTS[wire.DEFAULT_LAYOUT]).dtypes[MSTX]
    assert wire.DEFAULT_LAYOUT not in WITH_SIGNALS and "wait_op" not in dtype.names


def signal_set(client: Client, value: int, pc: int, *, address: int = ADDRESS, **extra: int) -> bytes:
    values = {"interfaceType": SIGNAL_SET, SET + "addr": address, SET + "value": value, "location.pc": pc}
    return client.record("MSTX_STUB", values | extra)


def signal_wait(client: Client, value: int, op: int, pc: int, *, address: int = ADDRESS, **extra: int) -> bytes:
    values = {"interfaceType": SIGNAL_WAIT, WAIT + "addr": address, WAIT + "cmpValue": value, WAIT + "cmpOp": op,
              "location.pc": pc}  # fmt: skip
    return client.record("MSTX_STUB", values | extra)


def signals(events: np.ndarray) -> list[tuple[int, int, int, int, int, int]]:
    """(kind, pipe, address, pc, mode, serial) of each event but the slot's BLOCK_FINISH."""
    rows = events[events["kind"] != EventKind.BLOCK_FINISH]
    return [(int(r["kind"]), int(r["pipe"]), int(r["address"]), int(r["pc"]), int(r["mode"]), int(r["serial"]))
            for r in rows]  # fmt: skip


@pytest.mark.parametrize("name", [SIGNALS_ONLY, FIRST, "26.1.0", "master"])
def test_set_and_wait_become_native_signal_events(name: str) -> None:
    """msSanitizer's parser puts a set on PIPE_S_CAL and a wait on PIPE_S; the value rides in pc, which the door
    does not rebase by the kernel's pcStartAddr as it does program counters (-5 as a u64 lies above it)."""
    client = Client(raw_named(name))
    events, _ = converted(client, [signal_set(client, -5, 0x40), signal_wait(client, 7, CompareOp.GE, 0x44)])
    first = wire.LAYOUTS[client.name].first_serial  # the slot's first record: where the release starts its count
    assert signals(events) == [
        (EventKind.NPU_SIGNAL_SET, Pipe.S_CAL, ADDRESS, signal_value(-5), 0, first),
        (EventKind.NPU_SIGNAL_WAIT, Pipe.S, ADDRESS, 7, CompareOp.GE, first + 1),
    ]


def test_a_release_before_the_signals_makes_nothing_of_interfaces_7_and_8() -> None:
    client = Client(raw_named(wire.DEFAULT_LAYOUT))
    records = [client.record("MSTX_STUB", {"interfaceType": kind, "location.pc": 0x10}) for kind in (7, 8)]
    events, _ = converted(client, records)
    assert signals(events) == []


class TestHostileSignals:
    def test_values_and_addresses_at_their_extremes_travel_unchanged(self) -> None:
        client = Client(raw_named("master"))
        top = 2**64 - 1
        records = [
            signal_set(client, I64_MIN, 0x10, address=0),
            signal_set(client, I64_MAX, 0x14, address=top),
            signal_wait(client, I64_MIN, CompareOp.LE, 0x18, address=top),
            signal_wait(client, -1, CompareOp.NE, 0x1C),
        ]
        events, _ = converted(client, records)
        assert [(k, a, pc, mode) for k, _, a, pc, mode, _ in signals(events)] == [
            (EventKind.NPU_SIGNAL_SET, 0, 2**63, 0),
            (EventKind.NPU_SIGNAL_SET, top, I64_MAX, 0),
            (EventKind.NPU_SIGNAL_WAIT, top, 2**63, CompareOp.LE),
            (EventKind.NPU_SIGNAL_WAIT, ADDRESS, top, CompareOp.NE),
        ]

    @pytest.mark.parametrize("op", [-1, 6, 255, 256, 2**31 - 1, -(2**31)])
    def test_an_op_outside_the_compare_ops_is_255_whatever_its_i32(self, op: int) -> None:
        """Not wrapped into a CompareOp by the u8 it lands in: 255, which cross-NPU racecheck counts and orders
        nothing by (msSanitizer's wait never passes)."""
        client = Client(raw_named("master"))
        events, _ = converted(client, [signal_wait(client, 1, op, 0x10)])
        [(kind, _, _, _, mode, _)] = signals(events)
        assert (kind, mode) == (EventKind.NPU_SIGNAL_WAIT, 255)

    def test_a_record_marked_as_an_error_makes_nothing_and_is_said(self) -> None:
        client = Client(raw_named("master"))
        records = [signal_set(client, 1, 0x10, error=1), signal_wait(client, 1, 0, 0x14, error=1)]
        events, out = converted(client, records)
        assert signals(events) == []
        [end] = [x for x in out if isinstance(x, m.KernelEnd)]
        assert any("2 MSTX_STUB records dropped: marked as errors" in line for line in end.problems), end.problems

    def test_many_signals_in_one_slot_stay_one_event_each(self) -> None:
        """A slot of 4097 sets and waits (one past cross-NPU racecheck's cap): one event per record, and the
        launch ends."""
        client = Client(raw_named("master"))
        records = [signal_set(client, i, 0x10) if i % 2 else signal_wait(client, i, CompareOp.EQ, 0x14)
                   for i in range(4097)]  # fmt: skip
        events, out = converted(client, records)
        counts = np.bincount(events["kind"], minlength=64)
        assert counts[EventKind.NPU_SIGNAL_SET] == 2048 and counts[EventKind.NPU_SIGNAL_WAIT] == 2049
        assert any(isinstance(x, m.KernelEnd) for x in out)


def test_the_signal_ordered_job_is_silent(daemon: RunningDaemon) -> None:
    """tests/test_compat_cross_npu.py's racing job with device 0 setting a signal to -1 after its write and device 1
    waiting for it to be below 0 before its read: silent, synccheck too (it pairs no flag)."""
    out, findings = run_job(daemon, "signalled", *CROSS, "-t", "synccheck")
    assert findings == [], out
    assert "[sanitizerd] Cross npu racecheck finished. No error detected." in out
