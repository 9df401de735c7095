"""Cross-NPU order by mstx signal set / wait (issue 28): the native NPU_SIGNAL_SET / NPU_SIGNAL_WAIT events, the rule
that orders a held and a new access by them (tests/test_cross_npu.py has the barrier's), chains of them through
sessions, blocks and launches (the closure, checked against its definition on random tables), cycles, its bounds and
hostile values, and real daemons: two and three sessions of one job over the native wire, and the emulated
example's ``signalled`` and ``chained`` modes (examples/emulated/cross_npu.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest

from client_shim import Client
from client_shim.events import EventKind, Pipe, syncs
from sanitizerd.detectors import _cross_npu, crossnpu
from sanitizerd.detectors._cross_npu import JobAccesses
from sanitizerd.detectors.base import KernelLaunch
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.records import CompareOp, signal_value
from tests.conftest import ROOT, RunningDaemon, assert_serves_fresh_session, sanitizerd
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
        """A third session's set follows nothing of the writer's (whose session issued no signal): no chain."""
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


F1, F2, F3 = FLAG, FLAG + 8, FLAG + 16  # the links of a chain


def relay(session_id: int, dev: int, job: JobAccesses, *batches: np.ndarray) -> list:
    """A kernel of a session that marks nothing shared: it only passes signals on."""
    return kernel(device(session_id, dev, job, shared=False), *batches)


class TestChains:
    """Order through chains of set-wait edges and program order, over any number of sessions and blocks
    (msSanitizer's vector clocks carry it along every wait)."""

    def test_write_set_wait_set_wait_read_over_three_devices_is_ordered(self) -> None:
        job = JobAccesses()
        assert kernel(device(1, 0, job), write(SHARED), signal_set(1, F1)) == []
        assert relay(2, 1, job, signal_wait(1, address=F1), signal_set(1, F2)) == []
        assert kernel(device(3, 2, job), signal_wait(1, address=F2), read(SHARED)) == []

    def test_the_middle_links_unsatisfied_wait_breaks_the_chain(self) -> None:
        job = JobAccesses()
        assert kernel(device(1, 0, job), write(SHARED), signal_set(1, F1)) == []
        assert relay(2, 1, job, signal_wait(2, address=F1), signal_set(1, F2)) == []
        assert kinds(kernel(device(3, 2, job), signal_wait(1, address=F2), read(SHARED))) == ["race_raw"]

    def test_the_middle_setting_before_it_waits_breaks_the_chain(self) -> None:
        job = JobAccesses()
        assert kernel(device(1, 0, job), write(SHARED), signal_set(1, F1)) == []
        assert relay(2, 1, job, signal_set(1, F2), signal_wait(1, address=F1)) == []
        assert kinds(kernel(device(3, 2, job), signal_wait(1, address=F2), read(SHARED))) == ["race_raw"]

    def test_the_other_way_round_the_reader_ending_first(self) -> None:
        """The read is held first, the middle passes the signal on, and the write's kernel ends last: the pair is
        judged then, with every link held."""
        job = JobAccesses()
        assert kernel(device(3, 2, job), signal_wait(1, address=F2), read(SHARED)) == []
        assert relay(2, 1, job, signal_wait(1, address=F1), signal_set(1, F2)) == []
        assert kernel(device(1, 0, job), write(SHARED), signal_set(1, F1)) == []

    @pytest.mark.parametrize("middle_waits_for", [1, 2])
    def test_a_link_whose_kernel_ends_after_both_accesses_still_comes_in_time(self, middle_waits_for: int) -> None:
        """The middle's kernel begins first and ends last, as a ring's middle rank may: the reader's verdict waits
        for it. Chained: silent; the middle's wait unsatisfied: the race, given at the reader's session's end."""
        job = JobAccesses()
        middle = device(2, 1, job, shared=False)
        middle.kernel_begin(KernelLaunch(7, "relay", 1, "aiv"))
        assert kernel(device(1, 0, job), write(SHARED), signal_set(1, F1)) == []
        reader = device(3, 2, job)
        assert kernel(reader, signal_wait(1, address=F2), read(SHARED)) == []
        assert reader.take_deferred() == []
        middle.check(np.concatenate((signal_wait(middle_waits_for, address=F1), signal_set(1, F2))))
        assert middle.kernel_end() == []
        given = reader.finish()
        if middle_waits_for == 1:
            assert given == []
        else:
            assert kinds(given) == ["race_raw"] and [a.device for a in given[0].accesses] == [0, 2]
            assert given[0].launch == 1  # the reader's launch, whose verdict it is
        assert reader.finish() == [] and not reader.deferred

    def test_a_waiting_verdict_is_given_at_the_next_kernel_end_once_the_kernels_in_flight_ended(self) -> None:
        """Given as its own launch's, not the later one's; a kernel begun after the reader's ended is not waited
        for."""
        job = JobAccesses()
        middle = device(2, 1, job, shared=False)
        middle.kernel_begin(KernelLaunch(1, "relay", 1, "aiv"))
        assert kernel(device(1, 0, job), write(SHARED), signal_set(1, F1)) == []
        reader = device(3, 2, job)
        reader.kernel_begin(KernelLaunch(11, "gather", 1, "aiv"))
        reader.check(read(SHARED))
        assert reader.kernel_end() == []
        assert kernel(reader) == [] and reader.take_deferred() == []  # the middle's kernel still runs
        middle.check(signal_wait(1, address=F1))
        assert middle.kernel_end() == []
        middle.kernel_begin(KernelLaunch(2, "relay", 1, "aiv"))  # later: not awaited
        assert kernel(reader) == []
        [race] = reader.take_deferred()
        assert (race.kind, race.launch, race.kernel) == ("race_raw", 11, "k")
        assert not reader.deferred and reader.finish() == []

    def test_a_session_gone_with_its_kernel_running_is_no_longer_waited_for(self) -> None:
        job = JobAccesses()
        middle = device(2, 1, job, shared=False)
        middle.kernel_begin(KernelLaunch(1, "relay", 1, "aiv"))
        assert kernel(device(1, 0, job), write(SHARED)) == []
        reader = device(3, 2, job)
        assert kernel(reader, read(SHARED)) == []
        assert middle.finish() == []  # its kernel never ended: it orders nothing
        assert not job.running
        assert kernel(reader) == []
        assert kinds(reader.take_deferred()) == ["race_raw"]

    def test_with_nothing_else_in_flight_the_verdict_is_given_at_once(self) -> None:
        job = JobAccesses()
        assert kernel(device(1, 0, job), write(SHARED)) == []
        other = device(4, 3, job, shared=False)
        other.kernel_begin(KernelLaunch(1, "k", 1, "aiv"))
        assert other.kernel_end() == []
        reader = device(3, 2, job)
        assert kinds(kernel(reader, read(SHARED))) == ["race_raw"] and not reader.deferred

    def test_past_the_bound_of_waiting_kernels_the_oldest_is_given_as_judged_then_and_said(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(crossnpu, "MAX_DEFERRED", 2)
        job = JobAccesses()
        middle = device(2, 1, job, shared=False)
        middle.kernel_begin(KernelLaunch(1, "relay", 1, "aiv"))
        assert kernel(device(1, 0, job), write(SHARED, serial=1), write(SHARED + 64, serial=2, pc=0x20),
                      write(SHARED + 128, serial=3, pc=0x30)) == []  # fmt: skip
        reader = device(3, 2, job)
        for k, address in enumerate((SHARED, SHARED + 64)):
            reader.kernel_begin(KernelLaunch(k + 1, "gather", 1, "aiv"))
            reader.check(read(address, serial=10 + k))
            assert reader.kernel_end() == [] and reader.take_deferred() == []
        reader.kernel_begin(KernelLaunch(3, "gather", 1, "aiv"))
        reader.check(read(SHARED + 128, serial=12))
        assert reader.kernel_end() == []
        race, said = reader.take_deferred()
        assert (race.kind, race.launch, race.accesses[0].address) == ("race_raw", 1, SHARED)
        assert said.kind == "internal_error" and said.launch == 1
        assert "judged before the job's kernels in flight when it ended had all ended" in said.detail
        assert [len(reader.deferred)] == [2]
        assert [f.launch for f in reader.finish()] == [2, 3]

    def test_at_and_past_the_real_bounds(self) -> None:
        """64 kernels wait; the 65th gives the oldest. 1 024 racing accesses wait; one more gives the oldest."""
        job = JobAccesses()
        device(2, 1, job, shared=False).kernel_begin(KernelLaunch(1, "relay", 1, "aiv"))
        assert kernel(device(1, 0, job), write(SHARED)) == []
        reader = device(3, 2, job)
        for k in range(crossnpu.MAX_DEFERRED):
            assert kernel(reader, read(SHARED, serial=2 + k)) == [] and reader.take_deferred() == []
        assert kernel(reader, read(SHARED, serial=100)) == []
        assert kinds(reader.take_deferred()) == ["race_raw", "internal_error"]
        assert len(reader.deferred) == crossnpu.MAX_DEFERRED
        assert len(reader.finish()) == crossnpu.MAX_DEFERRED
        many = read(SHARED + np.arange(crossnpu.MAX_DEFERRED_ROWS, dtype=np.uint64) % np.uint64(16),
                    serial=np.arange(crossnpu.MAX_DEFERRED_ROWS, dtype=np.uint64) + np.uint64(200))  # fmt: skip
        assert kernel(reader, many) == [] and reader.take_deferred() == []
        assert reader.deferred[0].judgment.racing.size == crossnpu.MAX_DEFERRED_ROWS
        assert kernel(reader, read(SHARED, serial=5000)) == []
        assert kinds(reader.take_deferred()) == ["race_raw", "internal_error"]
        assert [v.judgment.racing.size for v in reader.deferred] == [1]

    def test_past_the_bound_of_waiting_racing_accesses_the_kernel_is_given_at_once(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(crossnpu, "MAX_DEFERRED_ROWS", 1)
        job = JobAccesses()
        device(2, 1, job, shared=False).kernel_begin(KernelLaunch(1, "relay", 1, "aiv"))
        assert kernel(device(1, 0, job), write(SHARED)) == []
        reader = device(3, 2, job)
        assert kernel(reader, read(SHARED, serial=2), read(SHARED + 8, serial=3, pc=0x99)) == []
        assert kinds(reader.take_deferred()) == ["race_raw", "race_raw", "internal_error"]
        assert not reader.deferred

    def test_through_two_blocks_of_the_middle_launch(self) -> None:
        """Block 0 waits for the writer and signals block 1, which signals the reader: a set by another block of
        the launch orders what its wait follows."""
        job = JobAccesses()
        assert kernel(device(1, 0, job), write(SHARED), signal_set(1, F1)) == []
        assert relay(2, 1, job, signal_wait(1, address=F1), signal_set(1, F3),
                     signal_wait(1, address=F3, block_id=1), signal_set(1, F2, block_id=1)) == []  # fmt: skip
        assert kernel(device(3, 2, job), signal_wait(1, address=F2), read(SHARED)) == []

    def test_a_block_of_the_middle_launch_that_waited_for_nothing_orders_nothing(self) -> None:
        job = JobAccesses()
        assert kernel(device(1, 0, job), write(SHARED), signal_set(1, F1)) == []
        assert relay(2, 1, job, signal_wait(1, address=F1), signal_set(1, F2, block_id=1)) == []
        assert kinds(kernel(device(3, 2, job), signal_wait(1, address=F2), read(SHARED))) == ["race_raw"]

    def test_through_the_middles_later_launch(self) -> None:
        """A wait in one launch precedes every set of the session's later launches, whatever their block."""
        job = JobAccesses()
        assert kernel(device(1, 0, job), write(SHARED), signal_set(1, F1)) == []
        middle = device(2, 1, job, shared=False)
        assert kernel(middle, signal_wait(1, address=F1)) == []
        assert kernel(middle) == []  # a launch without signals between them
        assert kernel(middle, signal_set(1, F2, block_id=5)) == []
        assert kernel(device(3, 2, job), signal_wait(1, address=F2), read(SHARED)) == []

    def test_the_middles_earlier_launch_does_not_follow_its_later_one(self) -> None:
        job = JobAccesses()
        assert kernel(device(1, 0, job), write(SHARED), signal_set(1, F1)) == []
        middle = device(2, 1, job, shared=False)
        assert kernel(middle, signal_set(1, F2)) == []
        assert kernel(middle, signal_wait(1, address=F1)) == []
        assert kinds(kernel(device(3, 2, job), signal_wait(1, address=F2), read(SHARED))) == ["race_raw"]

    @pytest.mark.parametrize("broken", [None, 2])
    def test_a_ring_of_four_devices_passing_a_token(self, broken: int | None) -> None:
        """Device k waits for device k-1's token, reads the slots of the devices before it, writes its own and
        passes the token on: every read follows its slot's write through the ring, however many hops back. With
        device 2's wait unsatisfied, devices 2 and 3 race with the writes before the break, not with those after."""
        job = JobAccesses()
        slot = [SHARED + 64 * k for k in range(4)]
        verdicts = []
        for k in range(4):
            token = [signal_wait(2 if k == broken else 1, address=FLAG + 8 * (k - 1))] if k else []
            reads = [read(slot[j], serial=10 * k + 1, pc=0x100 + j) for j in range(k)]
            verdicts.append(kinds(kernel(device(k + 1, k, job), *token, *reads, write(slot[k], serial=10 * k + 2),
                                         signal_set(1, FLAG + 8 * k))))  # fmt: skip
        if broken is None:
            assert verdicts == [[], [], [], []]
        else:
            assert verdicts == [[], [], ["race_raw"] * 2, ["race_raw"] * 2]

    def test_a_long_chain_at_the_signal_bound(self) -> None:
        """4 096 signals: a writer's set, a middle session's 2 047 blocks each waiting for one flag and setting the
        next, the reader's wait: 2 048 hops, silent. One signal more cuts the reader's wait, said, and it races."""
        hops = 2047
        for extra in (0, 1):
            job = JobAccesses()
            k = np.arange(hops, dtype=np.uint64)
            assert kernel(device(1, 0, job), write(SHARED), signal_set(1, F1)) == []
            padding = [signal_set(0, FLAG - 8)] if extra else []
            assert relay(2, 1, job, *padding, signal_wait(1, address=F1 + 8 * k, block_id=k + np.uint64(extra)),
                         signal_set(1, F1 + 8 * (k + np.uint64(1)), block_id=k + np.uint64(extra))) == []  # fmt: skip
            findings = kernel(device(3, 2, job), signal_wait(1, address=F1 + 8 * hops), read(SHARED))
            assert job.signals.size == 4096
            if not extra:
                assert findings == []
            else:
                assert kinds(findings) == ["race_raw", "internal_error"]
                assert "1 signal sets and waits of this kernel not held" in findings[1].detail

    def test_a_set_of_the_same_block_before_its_wait_is_no_cycle(self) -> None:
        """A block waiting for its own earlier set (a forward edge) orders nothing more than its program order."""
        job = JobAccesses()
        assert kernel(device(1, 0, job), write(SHARED), signal_set(1, F1), signal_wait(1, address=F1)) == []
        assert kinds(kernel(device(2, 1, job), signal_wait(1, address=F1), read(SHARED))) == []


class TestCycles:
    """Hostile signals whose waits are satisfied only by sets that follow them: the closure ends, within its bound,
    and the cycle's members are ordered as its edges say (each edge alone already orders its two ends)."""

    def test_two_blocks_each_waiting_for_the_others_later_set(self) -> None:
        job = JobAccesses()
        assert kernel(device(1, 0, job), signal_wait(1, address=F2), write(SHARED), signal_set(1, F1)) == []
        assert kernel(device(2, 1, job), signal_wait(1, address=F1), read(SHARED), signal_set(1, F2)) == []
        reach = np.unpackbits(job._signal_closure().reach, axis=1, bitorder="little")
        assert reach[:4, :4].all()  # each of the four signals reaches every other

    def test_a_wait_satisfied_by_a_later_set_of_its_own_block(self) -> None:
        """The block waits for F1, sets F2, writes, then sets F1 itself: the edges lead from after the write back to
        the wait, on through the set of F2 to the reader (the block's cycle is gone round until nothing changes)."""
        job = JobAccesses()
        assert kernel(device(1, 0, job), signal_wait(1, address=F1), signal_set(1, F2), write(SHARED),
                      signal_set(1, F1)) == []  # fmt: skip
        assert kernel(device(2, 1, job), signal_wait(1, address=F2), read(SHARED)) == []

    def test_a_ring_of_2048_blocks_ends_within_its_bound(self) -> None:
        """Block k waits for flag k-1 and sets flag k, block 0 for the last block's flag: one cycle of 4 096
        signals. Every signal reaches every other."""
        n = 2048
        k = np.arange(n, dtype=np.uint64)
        job = JobAccesses()
        waits = signal_wait(1, address=FLAG + 8 * ((k + np.uint64(n - 1)) % np.uint64(n)), block_id=k)
        assert relay(1, 0, job, waits, signal_set(1, FLAG + 8 * k, block_id=k)) == []
        closure = job._signal_closure()
        assert not closure.unsure and closure.work <= _cross_npu.MAX_CLOSURE_WORK
        signals = np.unpackbits(closure.reach[:n * 2], axis=1, bitorder="little")[:, : n * 2]
        assert signals.all()

    def test_a_closure_past_its_work_bound_stops_and_is_said(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Past MAX_CLOSURE_WORK the order found so far is used (none here) and the pairs left racing are said."""
        monkeypatch.setattr(_cross_npu, "MAX_CLOSURE_WORK", 0)
        job = JobAccesses()
        assert kernel(device(1, 0, job), write(SHARED), signal_set(1, F1)) == []
        assert relay(2, 1, job, signal_wait(1, address=F1), signal_set(1, F2)) == []
        findings = kernel(device(3, 2, job), signal_wait(1, address=F2), read(SHARED))
        assert kinds(findings) == ["race_raw", "internal_error"]
        assert "1 racing access pairs of this kernel not fully tested for order by signals" in findings[1].detail


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


def kernel_seen(daemon: RunningDaemon, job: str, dev: int, kernels: int = 1) -> None:
    """Until the daemon has read the session's kernel_begin (its launch is counted)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        listed = json.loads(sanitizerd("sessions", "--socket", str(daemon.socket), "--format", "json").stdout)
        if any(s["job"] == job and s["device"] == dev and s["kernels"] >= kernels for s in listed):
            return
        time.sleep(0.05)
    raise AssertionError(f"the daemon did not see the kernel of job {job} on device {dev}")


def job_findings(daemon: RunningDaemon, job: str) -> list[dict]:
    return json.loads(sanitizerd("findings", "--socket", str(daemon.socket), "--job", job, "--format", "json").stdout)


def test_three_sessions_of_a_job_in_a_chain_over_the_native_wire(daemon: RunningDaemon) -> None:
    """Real daemon, three native sessions of one job on devices 0, 1 and 2: device 0 writes and sets F1, device 1
    (marking nothing shared) waits for F1 and sets F2, device 2 waits for F2 and reads. Device 1's kernel begins
    first and ends last, as a ring's middle rank may: device 2's verdict waits for it (clean at its end). Silent;
    with device 1's wait unsatisfied, the race, given when device 2's session ends, as device 2's launch's; and the
    daemon serves on."""

    def chain(job: str, middle_waits_for: int) -> tuple[int, int, int]:
        with (
            Client(daemon.socket, job=job, device=0, config=CROSS_CONFIG, resume_buffer=0) as writer,
            Client(daemon.socket, job=job, device=1, config=CROSS_CONFIG, resume_buffer=0) as middle,
        ):
            relay = middle.kernel_begin("relay", 1)
            middle.flush()
            kernel_seen(daemon, job, 1)
            writer.region_permission(SHARED, 4096, shared=True)
            written = one_kernel(writer, write(SHARED, serial=1), signal_set(1, F1, serial=2)).errors
            with Client(daemon.socket, job=job, device=2, config=CROSS_CONFIG, resume_buffer=0) as reader:
                reader.region_permission(SHARED, 4096, shared=True)
                waits = signal_wait(I64_MAX, CompareOp.GE, address=F2, serial=1)
                read_errors = one_kernel(reader, waits, read(SHARED, serial=2)).errors
                middle.events(relay, np.concatenate((signal_wait(middle_waits_for, address=F1, serial=1),
                                                     signal_set(I64_MAX, F2, serial=2))))  # fmt: skip
                middle.kernel_end(relay)
                relayed = middle.wait_kernel(relay, timeout=30).errors
            return written, relayed, read_errors

    assert chain("chained", middle_waits_for=1) == (0, 0, 0)
    assert job_findings(daemon, "chained") == []
    assert chain("broken", middle_waits_for=2) == (0, 0, 0)  # the reader's verdict waited: not in it
    [race] = job_findings(daemon, "broken")
    assert race["kind"] == "race_raw" and [a["device"] for a in race["accesses"]] == [0, 2]
    assert race["launch"] == 1 and race["accesses"][1]["op"] == "Read"
    assert chain("again", middle_waits_for=1) == (0, 0, 0)
    assert job_findings(daemon, "again") == []
    assert_serves_fresh_session(daemon)


HANGING_MIDDLE = """
import sys, time
from client_shim import Client
from sanitizerd_protocol import messages as m
with Client(sys.argv[1], job=sys.argv[2], device=1, config=m.Config(tools=["racecheck"], check_cross_npu_races=True),
            resume_buffer=0) as client:
    client.kernel_begin("relay", 1)
    client.flush()
    print("begun", flush=True)
    time.sleep(600)
"""


def test_a_waiting_verdict_is_given_once_the_session_it_waits_for_is_gone(daemon: RunningDaemon) -> None:
    """Real daemon: device 1's process begins a kernel and is killed while it runs (no kernel_end, no close); device
    2's race with device 0 waited for it, and is given at device 2's next kernel end, as its first launch's."""
    job = "gone"
    middle = subprocess.Popen([sys.executable, "-c", HANGING_MIDDLE, str(daemon.socket), job], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert middle.stdout is not None and middle.stdout.readline() == "begun\n"
        kernel_seen(daemon, job, 1)
        with Client(daemon.socket, job=job, device=0, config=CROSS_CONFIG, resume_buffer=0) as writer:
            writer.region_permission(SHARED, 4096, shared=True)
            assert one_kernel(writer, write(SHARED, serial=1)).errors == 0
            with Client(daemon.socket, job=job, device=2, config=CROSS_CONFIG, resume_buffer=0) as reader:
                reader.region_permission(SHARED, 4096, shared=True)
                assert one_kernel(reader, read(SHARED, serial=2)).errors == 0
                assert job_findings(daemon, job) == []
                middle.kill()
                middle.wait(30)
                deadline = time.monotonic() + 30
                while any(s["job"] == job and s["device"] == 1 and s["state"] == "live" for s in json.loads(
                        sanitizerd("sessions", "--socket", str(daemon.socket), "--format", "json").stdout)):
                    assert time.monotonic() < deadline, "the killed session did not end"
                    time.sleep(0.05)
                assert one_kernel(reader).errors == 0
                [race] = job_findings(daemon, job)
                assert (race["kind"], race["launch"], race["device"]) == ("race_raw", 1, 2)
    finally:
        middle.kill()
        middle.wait(30)
        middle.stdout.close()
    assert_serves_fresh_session(daemon)


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


def _brute_force_order(signals: np.ndarray, edges: np.ndarray, before: tuple, after: tuple) -> bool:
    """The order by its definition, on a small table: is there a signal u after ``before`` (session, ordinal, block,
    signals before it) from which set-wait edges and program order lead to a signal v before ``after``?"""
    rows = [tuple(int(r[f]) for f in ("session", "ordinal", "block", "position")) for r in signals]

    def follows(a: tuple, b: tuple) -> bool:  # is b after the place a (a's own position included)?
        return a[0] == b[0] and (b[1] > a[1] or (b[1] == a[1] and b[2] == a[2] and b[3] >= a[3]))

    place = ("session", "ordinal", "block", "position")
    links = {(tuple(int(e[f"set_{f}"]) for f in place), tuple(int(e[f"wait_{f}"]) for f in place)) for e in edges}
    seen = {u for u in rows if follows(before, u)}
    frontier = list(seen)
    while frontier:
        u = frontier.pop()
        for v in rows:
            if v not in seen and ((v != u and follows(u, v)) or (u, v) in links):
                seen.add(v)
                frontier.append(v)
    return any(v[0] == after[0] and (v[1] < after[1] or (v[1] == after[1] and v[2] == after[2] and v[3] < after[3]))
               for v in seen)  # fmt: skip


@pytest.mark.parametrize("seed", range(40))
def test_the_closure_agrees_with_the_definition_on_random_tables(seed: int) -> None:
    """Random sets and waits of 3 sessions, 2 launches, 2 blocks, 3 flags, values 0..2 under every op (cycles
    included): the closure orders exactly the places the definition orders."""
    rng = np.random.default_rng(seed)
    size = int(rng.integers(1, 24))
    signals = np.zeros(size, dtype=_cross_npu.SIGNAL_DTYPE)
    for name, top in (("session", 3), ("ordinal", 2), ("block", 2), ("address", 3), ("value", 3), ("op", 6)):
        signals[name] = rng.integers(0, top, size)
    signals["wait"] = rng.integers(0, 2, size).astype(bool)
    keys = signals["session"] * 100 + signals["ordinal"] * 10 + signals["block"]
    signals["position"] = [int(np.count_nonzero(keys[:i] == keys[i])) for i in range(size)]
    edges, cut = _cross_npu.signal_edges(signals)
    closure = _cross_npu.SignalClosure(signals, edges, cut)
    places = np.zeros(64, dtype=_cross_npu.ACCESS_DTYPE)
    for name, top in (("session", 4), ("ordinal", 3), ("block", 3), ("signals", 5)):
        places[name] = rng.integers(0, top, places.size)
    places["session"][32:] = (places["session"][:32] + rng.integers(1, 4, 32)) % 4  # two sessions, as compared
    found = closure.reaches(closure.starts(places[:32]), closure.ends(places[32:]))
    where = [tuple(int(p[f]) for f in ("session", "ordinal", "block", "signals")) for p in places]
    expected = [_brute_force_order(signals, edges, where[i], where[32 + i]) for i in range(32)]
    assert found.tolist() == expected


def test_the_chained_example_is_silent(daemon: RunningDaemon) -> None:
    """Three ranks in three processes at once pass a token along: rank 2's read of rank 0's slot is ordered by the
    chain through rank 1 alone, whose kernel ends after rank 2's (silent under every detector); without chains, or
    judged at rank 2's kernel end, it was a cross-NPU RAW."""
    out, findings = run_example(daemon, "chained", *CROSS, *ALL_TOOLS)
    assert findings == [], out
    assert "[sanitizerd] Cross npu racecheck finished. No error detected." in out
    assert marked_line("first_write") < marked_line("token") < marked_line("last_read")


def test_the_chained_example_with_its_middle_link_broken_races(daemon: RunningDaemon) -> None:
    """Rank 1 waits for a value rank 0 never sets: rank 2's read races with rank 0's write, reported by the time
    rank 2's session ends (its kernel's verdict waited for rank 1's kernel), printed in msSanitizer's form (the
    access of the lower serial number first: each session numbers its own)."""
    out, findings = run_example(daemon, "chained_broken", *CROSS)
    [race] = findings
    assert race["kind"] in ("race_raw", "race_war") and race["launch"] == 1 and race["device"] == 2
    sides = sorted((a["op"], a["device"], a["location"]["line"]) for a in race["accesses"])
    assert sides == [("Read", 2, marked_line("last_read")), ("Write", 0, marked_line("first_write"))]
    assert out.count("====== ERROR: Potential ") == 1 and "hazard detected at GM in token_relay:" in out
    assert "[sanitizerd] Cross npu racecheck finished. See all detected errors above." in out
