"""Cross-NPU order by mstx signal set / wait (issue 28): the native NPU_SIGNAL_SET / NPU_SIGNAL_WAIT events, the rule
that orders a held and a new access by them (tests/test_cross_npu.py has the barrier's), its bounds and hostile
values, and real daemons: two sessions of one job over the native wire, and the emulated example's ``signalled``
mode (examples/emulated/cross_npu.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from client_shim import Client
from client_shim.events import EventKind, Pipe, syncs
from sanitizerd.detectors import _cross_npu, crossnpu
from sanitizerd.detectors._cross_npu import JobAccesses
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.records import CompareOp, signal_value
from tests.conftest import RunningDaemon, assert_serves_fresh_session, sanitizerd
from tests.test_cross_npu import (
    ALL_TOOLS,
    CROSS,
    CROSS_CONFIG,
    SHARED,
    counted,
    device,
    kernel,
    marked_line,
    one_kernel,
    read,
    run_example,
    write,
)

FLAG = 0x12C1_0000_8000  # the signal's address
I64_MIN, I64_MAX = -(2**63), 2**63 - 1


def signal_set(value: int, address: int = FLAG, **kw: object) -> np.ndarray:
    return syncs(EventKind.NPU_SIGNAL_SET, Pipe.S_CAL, address=address, pc=signal_value(value), **kw)


def signal_wait(value: int, op: int = CompareOp.EQ, address: int = FLAG, **kw: object) -> np.ndarray:
    return syncs(EventKind.NPU_SIGNAL_WAIT, Pipe.S, address=address, pc=signal_value(value), mode=int(op), **kw)


def kinds(findings: list) -> list[str]:
    return [f.kind for f in findings]


class TestOrder:
    def test_a_set_after_the_write_satisfying_a_wait_before_the_read_orders_them(self) -> None:
        job = JobAccesses()
        assert kernel(device(1, 0, job), write(SHARED), signal_set(1, serial=2)) == []
        assert kernel(device(2, 1, job), signal_wait(1, serial=1), read(SHARED)) == []

    def test_without_signals_the_same_accesses_race(self) -> None:
        job = JobAccesses()
        assert kernel(device(1, 0, job), write(SHARED)) == []
        assert kinds(kernel(device(2, 1, job), read(SHARED))) == ["race_raw"]

    def test_an_unsatisfied_wait_orders_nothing(self) -> None:
        job = JobAccesses()
        assert kernel(device(1, 0, job), write(SHARED), signal_set(1)) == []
        assert kinds(kernel(device(2, 1, job), signal_wait(2), read(SHARED))) == ["race_raw"]

    def test_a_wait_on_another_address_orders_nothing(self) -> None:
        job = JobAccesses()
        assert kernel(device(1, 0, job), write(SHARED), signal_set(1)) == []
        assert kinds(kernel(device(2, 1, job), signal_wait(1, address=FLAG + 8), read(SHARED))) == ["race_raw"]

    @pytest.mark.parametrize(
        ("op", "stored", "compared", "ordered"),
        [
            (CompareOp.EQ, 5, 5, True), (CompareOp.EQ, 5, 6, False),
            (CompareOp.NE, 5, 6, True), (CompareOp.NE, 5, 5, False),
            (CompareOp.GT, 6, 5, True), (CompareOp.GT, 5, 5, False),
            (CompareOp.GE, 5, 5, True), (CompareOp.GE, 4, 5, False),
            (CompareOp.LT, 4, 5, True), (CompareOp.LT, 5, 5, False),
            (CompareOp.LE, 5, 5, True), (CompareOp.LE, 6, 5, False),
            # signed, as msSanitizer's int64_t: -1 is below 0, not 2**64 - 1 above it
            (CompareOp.LT, -1, 0, True), (CompareOp.GT, -1, 0, False),
            (CompareOp.GT, I64_MAX, I64_MIN, True), (CompareOp.LE, I64_MIN, I64_MAX, True),
            (CompareOp.EQ, I64_MIN, I64_MIN, True), (CompareOp.EQ, I64_MAX, I64_MAX, True),
            (CompareOp.NE, I64_MAX, I64_MIN, True), (CompareOp.GE, I64_MIN, I64_MAX, False),
        ],
    )  # fmt: skip
    def test_each_compare_op_as_mssanitizer_compares_stored_with_the_waits_value(
        self, op: CompareOp, stored: int, compared: int, ordered: bool
    ) -> None:
        job = JobAccesses()
        assert kernel(device(1, 0, job), write(SHARED), signal_set(stored)) == []
        findings = kernel(device(2, 1, job), signal_wait(compared, op), read(SHARED))
        assert kinds(findings) == ([] if ordered else ["race_raw"])

    def test_the_reader_ending_first_is_ordered_the_other_way_round(self) -> None:
        """The read is held first; the write's kernel ends second and is ordered before it by its own set."""
        job = JobAccesses()
        assert kernel(device(2, 1, job), signal_wait(1, serial=1), read(SHARED, serial=2)) == []
        assert kernel(device(1, 0, job), write(SHARED, serial=3), signal_set(1, serial=4)) == []

    def test_a_set_before_the_write_or_a_wait_after_the_read_orders_nothing(self) -> None:
        job = JobAccesses()
        assert kernel(device(1, 0, job), signal_set(1), write(SHARED)) == []
        assert kinds(kernel(device(2, 1, job), signal_wait(1), read(SHARED))) == ["race_raw"]
        job = JobAccesses()
        assert kernel(device(1, 0, job), write(SHARED), signal_set(1)) == []
        assert kinds(kernel(device(2, 1, job), read(SHARED), signal_wait(1))) == ["race_raw"]

    def test_only_the_setters_first_satisfying_set_counts(self) -> None:
        """The wait passes on the block's first set that satisfies it, before the write: a later one orders no more."""
        job = JobAccesses()
        assert kernel(device(1, 0, job), signal_set(1), write(SHARED), signal_set(1)) == []
        assert kinds(kernel(device(2, 1, job), signal_wait(1), read(SHARED))) == ["race_raw"]

    def test_a_first_set_that_does_not_satisfy_leaves_the_later_one_to(self) -> None:
        job = JobAccesses()
        assert kernel(device(1, 0, job), signal_set(0), write(SHARED), signal_set(1)) == []
        assert kernel(device(2, 1, job), signal_wait(1), read(SHARED)) == []

    def test_a_set_of_another_block_is_not_after_this_blocks_write(self) -> None:
        job = JobAccesses()
        assert kernel(device(1, 0, job), write(SHARED), signal_set(1, block_id=1)) == []
        assert kinds(kernel(device(2, 1, job), signal_wait(1), read(SHARED))) == ["race_raw"]

    def test_a_set_in_a_later_launch_orders_the_earlier_launchs_write(self) -> None:
        job = JobAccesses()
        writer = device(1, 0, job)
        assert kernel(writer, write(SHARED)) == []
        assert kernel(writer, signal_set(1, block_id=3)) == []  # any block: the whole launch comes after
        assert kernel(device(2, 1, job), signal_wait(1), read(SHARED)) == []

    def test_a_set_in_an_earlier_launch_than_the_write_orders_nothing(self) -> None:
        job = JobAccesses()
        writer = device(1, 0, job)
        assert kernel(writer, signal_set(1)) == []
        assert kernel(writer, write(SHARED)) == []
        assert kinds(kernel(device(2, 1, job), signal_wait(1), read(SHARED))) == ["race_raw"]

    def test_a_wait_in_an_earlier_launch_orders_the_later_launchs_read(self) -> None:
        """The waiting session marks nothing shared when it waits: its signals are held all the same."""
        job = JobAccesses()
        assert kernel(device(1, 0, job), write(SHARED), signal_set(7)) == []
        reader = device(2, 1, job, shared=False)
        assert kernel(reader, signal_wait(7, block_id=5)) == []
        reader.region_permission(m.RegionPermission(address=SHARED, size=4096, device=1, flags=7))
        assert kernel(reader, read(SHARED)) == []

    def test_a_signal_of_a_third_session_does_not_order_the_two(self) -> None:
        """No chains: a set by another session orders only that session's accesses."""
        job = JobAccesses()
        assert kernel(device(1, 0, job), write(SHARED)) == []
        assert kernel(device(3, 2, job, shared=False), signal_set(1)) == []
        assert kinds(kernel(device(2, 1, job), signal_wait(1), read(SHARED))) == ["race_raw"]

    def test_only_the_ordered_pairs_of_a_kernel_are_left_out(self) -> None:
        """Per pair: the write before the set is ordered, the one after it still races."""
        job = JobAccesses()
        assert kernel(device(1, 0, job), write(SHARED, serial=1, pc=0x10), signal_set(1, serial=2),
                      write(SHARED + 64, serial=3, pc=0x20)) == []  # fmt: skip
        [race] = kernel(device(2, 1, job), signal_wait(1, serial=1), read(SHARED, serial=2, pc=0x30),
                        read(SHARED + 64, serial=3, pc=0x40))  # fmt: skip
        assert [a.pc for a in race.accesses] == [0x20, 0x40]


class TestBounds:
    def test_signals_past_the_cap_order_nothing_and_are_said(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(_cross_npu, "MAX_SIGNALS", 4)
        monkeypatch.setattr(crossnpu, "MAX_SIGNALS", 4)
        job = JobAccesses()
        fill = signal_set(0, address=FLAG + 8 * (1 + np.arange(4, dtype=np.uint64)))
        first, cuts = counted(device(1, 0, job))
        [cut] = kernel(first, write(SHARED), fill, signal_set(1))
        assert cut.kind == "internal_error"
        assert "1 signal sets and waits of this kernel not held (a job holds at most 4)" in cut.detail
        assert cuts == [("signals", 1)]
        second, cuts = counted(device(2, 1, job))
        findings = kernel(second, signal_wait(1), read(SHARED))
        assert kinds(findings) == ["race_raw", "internal_error"]  # a possible extra report, said, never a hidden one
        assert "1 signal sets and waits" in findings[1].detail
        assert cuts == [("signals", 1)]
        assert job.signals.size == 4 and job.signals_dropped == 2
        job.release()
        assert job.signals.size == 0

    def test_up_to_the_cap_in_one_batch_and_past_it(self) -> None:
        """4096 signals in one kernel are held, the one that orders among them; one more is said."""
        job = JobAccesses()
        many = signal_set(0, address=FLAG + 8 * (1 + np.arange(4094, dtype=np.uint64)))
        assert kernel(device(1, 0, job), write(SHARED), signal_set(1), many) == []
        assert kernel(device(2, 1, job), signal_wait(1), read(SHARED)) == []  # the 4096th
        assert job.signals.size == 4096
        job = JobAccesses()
        more = signal_set(0, address=FLAG + 8 * (1 + np.arange(4096, dtype=np.uint64)))
        [cut] = kernel(device(1, 0, job), write(SHARED), signal_set(1), more)
        assert "1 signal sets and waits of this kernel not held" in cut.detail

    @pytest.mark.parametrize("bound", ["MAX_SIGNAL_EDGES", "MAX_ORDER_TESTS"])
    def test_pairs_not_fully_tested_for_order_are_reported_and_said(
        self, monkeypatch: pytest.MonkeyPatch, bound: str
    ) -> None:
        """Past the edges a job's signals give, or the edge tests one comparison makes, a pair stays a race (a
        possible extra report) and the kernel says how many."""
        monkeypatch.setattr(_cross_npu, bound, 0)
        monkeypatch.setattr(crossnpu, bound, 0)
        job = JobAccesses()
        assert kernel(device(1, 0, job), write(SHARED), signal_set(1)) == []
        second, cuts = counted(device(2, 1, job))
        findings = kernel(second, signal_wait(1), read(SHARED))
        assert kinds(findings) == ["race_raw", "internal_error"]
        assert "1 racing access pairs of this kernel not fully tested for order by signals" in findings[1].detail
        assert cuts == [({"MAX_SIGNAL_EDGES": "signal_edges", "MAX_ORDER_TESTS": "order_tests"}[bound], 1)]

    def test_the_edges_are_found_in_bounded_steps_alike(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Waits matched a few (wait, set) pairs at a time give the same edges as all at once."""
        values = np.arange(64, dtype=np.uint64)
        sets = signal_set(values, block_id=values % np.uint64(3))
        waits = signal_wait(values[::-1], CompareOp.GE)
        table = []
        for step in (1 << 20, 5, 1):
            monkeypatch.setattr(_cross_npu, "_MATCH_STEP", step)
            job = JobAccesses()
            assert kernel(device(1, 0, job), write(SHARED), sets) == []
            assert kernel(device(2, 1, job), waits, read(SHARED)) == []
            edges, cut = _cross_npu.signal_edges(job.signals)
            table.append((np.sort(edges, order=list(edges.dtype.names)).tobytes(), cut))
        assert table[0] == table[1] == table[2] and not table[0][1]
        assert edges.size == sum(min(3, 64 - v) for v in range(64))  # per wait, each block's first satisfying set

    @pytest.mark.parametrize("op", [6, 7, 128, 255])
    def test_a_wait_with_an_unknown_op_orders_nothing_and_is_said(self, op: int) -> None:
        job = JobAccesses()
        assert kernel(device(1, 0, job), write(SHARED), signal_set(1)) == []
        findings = kernel(device(2, 1, job), signal_wait(1, op), read(SHARED))
        assert kinds(findings) == ["race_raw", "internal_error"]
        assert "1 signal waits of this kernel with a compare op outside 0..5 (EQ..LE)" in findings[1].detail
        assert job.signals.size == 1  # the set alone

    def test_many_waits_against_many_sets_of_one_address(self) -> None:
        """2048 sets and 2048 waits on one address: each wait matched once per setter block, in arrays."""
        job = JobAccesses()
        values = np.arange(2048, dtype=np.uint64)
        assert kernel(device(1, 0, job), write(SHARED), signal_set(values)) == []
        reads = read(SHARED + 64 * np.arange(8, dtype=np.uint64))
        assert kernel(device(2, 1, job), signal_wait(values, CompareOp.GE), reads) == []
        assert job.signals.size == 4096


def test_two_sessions_of_a_job_over_the_native_wire(daemon: RunningDaemon) -> None:
    """Real daemon, two native sessions of one job on devices 0 and 1: racing without signals, silent with them,
    racing again with a wait of an op no CompareOp names (said), and the daemon serves on."""

    def pair(job: str, *, signalled: bool, op: int = CompareOp.EQ) -> tuple[int, int]:
        """Device 0 writes (and sets), then, while its session lasts (the job lives as long as one of its sessions
        does), device 1 (waits and) reads."""
        with Client(daemon.socket, job=job, device=0, config=CROSS_CONFIG, resume_buffer=0) as writer:
            writer.region_permission(SHARED, 4096, shared=True)
            sets = [signal_set(I64_MIN, serial=2)] if signalled else []
            written = one_kernel(writer, write(SHARED, serial=1), *sets).errors
            with Client(daemon.socket, job=job, device=1, config=CROSS_CONFIG, resume_buffer=0) as reader:
                reader.region_permission(SHARED, 4096, shared=True)
                waits = [signal_wait(I64_MIN, op, serial=1)] if signalled else []
                return written, one_kernel(reader, *waits, read(SHARED, serial=2)).errors

    assert pair("unsignalled", signalled=False) == (0, 1)
    assert pair("signalled", signalled=True) == (0, 0)
    assert pair("bad-op", signalled=True, op=200) == (0, 2)  # the race and the internal_error saying why
    assert pair("again", signalled=True) == (0, 0)


def test_a_flood_of_signals_over_the_wire_is_held_up_to_the_cap_and_said(daemon: RunningDaemon) -> None:
    """A native session sending 5000 signal sets and waits, values and ops at their extremes, in one kernel: the
    kernel's verdict says what was not held (one internal_error), and the daemon serves on."""
    count = 5000
    values = np.array([I64_MIN, I64_MAX, -1, 0], dtype=np.int64)[np.arange(count) % 4].view(np.uint64)
    addresses = FLAG + 8 * (np.arange(count, dtype=np.uint64) % np.uint64(7))
    flood = syncs(EventKind.NPU_SIGNAL_SET, Pipe.S_CAL, address=addresses, pc=values,
                  block_id=np.arange(count, dtype=np.uint64) % np.uint64(48))  # fmt: skip
    ops = np.arange(count, dtype=np.uint64) % np.uint64(256)
    waits = syncs(EventKind.NPU_SIGNAL_WAIT, Pipe.S, address=addresses, pc=values, mode=ops)
    with Client(daemon.socket, job="flood", device=0, config=CROSS_CONFIG, resume_buffer=0) as client:
        assert one_kernel(client, flood, waits).errors == 1
    query = sanitizerd("findings", "--socket", str(daemon.socket), "--job", "flood", "--format", "json")
    [said] = json.loads(query.stdout)
    bad = int(np.count_nonzero(ops > 5))
    assert said["kind"] == "internal_error"
    assert f"{count * 2 - bad - 4096} signal sets and waits of this kernel not held" in said["detail"]
    assert f"{bad} signal waits of this kernel with a compare op outside 0..5" in said["detail"]
    assert_serves_fresh_session(daemon)


def test_the_signalled_example_is_silent(daemon: RunningDaemon) -> None:
    """Each rank publishes its slot, sets its signal, waits for its peer's and gathers: silent under every
    detector; the gather still races where the wait is left out (the ``race`` mode)."""
    out, findings = run_example(daemon, "signalled", *CROSS, *ALL_TOOLS)
    assert findings == [], out
    assert "[sanitizerd] Cross npu racecheck finished. No error detected." in out
    assert marked_line("signal") < marked_line("await") < marked_line("gather")
