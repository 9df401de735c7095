"""Kernels locked up on a wait (wait_flag, wait_flag_dev, IB, mstx, GET_BUF), and silent kernels (issue 28:
msSanitizer master's 算子卡死 check).

synccheck driven directly for the rules (which pipes are stuck, which are locked for certain, what the report
says), then end to end: a real daemon, real ``sanitizerd run`` processes running examples/emulated/lockup.py,
whose kernels never end, stopped by SIGINT sent to the run alone, as a user's Ctrl-C.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from client_shim.events import BlockType, EventKind, Pipe, Space, accesses, make_events, syncs
from sanitizerd.cli.run import CTRL_C_TEXT, KILL_GRACE
from sanitizerd.detectors import _lockup
from sanitizerd.detectors.base import KernelLaunch
from sanitizerd.detectors.synccheck import Synccheck
from sanitizerd.findings.render import render_text
from sanitizerd_protocol.messages import Location
from sanitizerd_protocol.model import Finding
from sanitizerd_protocol.records import GET_BUF_NONBLOCK
from tests.conftest import ROOT, RunningDaemon, sanitizerd, start_daemon, stop_daemon
from tests.detector_helpers import make_detector, stream

SET, WAIT = EventKind.SET_FLAG, EventKind.WAIT_FLAG
LOCKUP = ROOT / "examples" / "emulated" / "lockup.py"


def synccheck() -> Synccheck:
    detector = make_detector(
        "synccheck", device=1, locations={5: Location(id=5, file="/src/kernel.cpp", line=9, column=5)}
    )
    assert isinstance(detector, Synccheck)
    detector.kernel_begin(KernelLaunch(kernel=1, name="vec_kernel", block_dim=8, kernel_type="aiv"))
    return detector


def locked(findings: list[Finding]) -> list[tuple[str, str, dict[str, list[int]], int]]:
    """(waiting pipe, pipe waited for, blocks, serial) of each lock-up finding."""
    return [(f.dst_pipe, f.pipe, f.blocks, f.serial) for f in findings if f.kind == "kernel_locked_up"]


def copy_in(block_id: int = 0) -> np.ndarray:
    return accesses(EventKind.READ, Space.GM, 0x1000, 32, pipe=Pipe.MTE2, block_id=block_id)


class TestWhileRunning:
    def test_two_pipes_waiting_on_each_other_are_reported_at_once(self) -> None:
        """V waits for MTE3 and MTE3 for V, neither set: nothing left can set either, reported after the batch."""
        detector = synccheck()
        detector.check(stream(copy_in(), syncs(WAIT, Pipe.MTE3, Pipe.V, 2), syncs(WAIT, Pipe.V, Pipe.MTE3, 2)))
        assert locked(detector.take_early()) == [
            ("PIPE_V", "PIPE_MTE3", {"aiv": [0]}, 2),
            ("PIPE_MTE3", "PIPE_V", {"aiv": [0]}, 3),
        ]
        assert detector.take_early() == []  # handed over once
        # and not again when the session ends with the launch open
        assert locked(detector.finish()) == []

    def test_a_pipe_waiting_on_a_pipe_still_free_is_not_reported_yet(self) -> None:
        """MTE3 waits for PIPE_S, which waits on nothing: PIPE_S may still set the flag, so no report yet."""
        detector = synccheck()
        detector.check(stream(copy_in(), syncs(WAIT, Pipe.S, Pipe.MTE3, 3)))
        assert detector.take_early() == []
        (finding,) = detector.finish()  # the session ended with the launch open: it is reported then
        assert locked([finding]) == [("PIPE_MTE3", "PIPE_S", {"aiv": [0]}, 2)]

    def test_a_chain_into_a_cycle_is_locked_and_a_chain_to_a_free_pipe_is_not(self) -> None:
        """MTE2 waits for V, V for MTE3, MTE3 for V: all three locked; FIX waits for S (free): not, until the end."""
        detector = synccheck()
        detector.check(
            stream(
                syncs(WAIT, Pipe.V, Pipe.MTE2, 0),
                syncs(WAIT, Pipe.MTE3, Pipe.V, 1),
                syncs(WAIT, Pipe.V, Pipe.MTE3, 1),
                syncs(WAIT, Pipe.S, Pipe.FIX, 4),
            )
        )
        assert {f.dst_pipe for f in detector.take_early()} == {"PIPE_MTE2", "PIPE_V", "PIPE_MTE3"}
        assert [f.dst_pipe for f in detector.finish()] == ["PIPE_FIX"]

    def test_a_set_in_a_later_batch_releases_the_wait(self) -> None:
        """A wait may come before its set: once the set arrives the pipe is not stuck."""
        detector = synccheck()
        detector.check(stream(syncs(WAIT, Pipe.MTE2, Pipe.V, 0)))
        detector.check(stream(syncs(SET, Pipe.MTE2, Pipe.V, 0)))
        assert detector.take_early() == []
        assert locked(detector.finish()) == []

    def test_a_pipe_that_went_on_after_its_wait_is_not_stuck(self) -> None:
        """A wait met by an earlier set, then work on the pipe: only each pipe's last record counts."""
        detector = synccheck()
        batch = stream(
            syncs(SET, Pipe.MTE2, Pipe.V, 0),
            syncs(WAIT, Pipe.MTE2, Pipe.V, 0),
            syncs(WAIT, Pipe.MTE2, Pipe.V, 1),  # never set: V stuck here...
            syncs(SET, Pipe.MTE2, Pipe.V, 1),  # ...until this
            accesses(EventKind.READ, Space.UB, 0, 32, pipe=Pipe.V),
        )
        detector.check(batch)
        assert locked(detector.finish()) == []

    def test_a_finished_block_is_not_locked(self) -> None:
        """A block that sent BLOCK_FINISH ran to its end, whatever its last wait."""
        detector = synccheck()
        finish = make_events(kind=EventKind.BLOCK_FINISH, block_id=0, block_size=0)
        detector.check(stream(syncs(WAIT, Pipe.S, Pipe.MTE3, 3), finish, syncs(WAIT, Pipe.S, Pipe.V, 3, block_id=1)))
        assert locked(detector.finish()) == [("PIPE_V", "PIPE_S", {"aiv": [1]}, 3)]

    def test_a_kernel_that_ends_is_not_locked_up(self) -> None:
        """A kernel that reached its end did not hang: its unmatched wait is racecheck's deadlock, not a lock-up."""
        detector = synccheck()
        detector.check(stream(syncs(WAIT, Pipe.S, Pipe.MTE3, 3)))
        assert [f.kind for f in detector.kernel_end()] == []

    def test_the_same_wait_in_many_blocks_is_one_site_counting_each_pipe(self) -> None:
        """40 blocks stuck on one line: one entry listing the blocks, and msSanitizer's summary counts 40 pipes."""
        detector = synccheck()
        detector.check(stream(*(syncs(WAIT, Pipe.S, Pipe.MTE3, 3, block_id=b, location=5) for b in range(40))))
        findings = detector.finish()
        assert [(f.blocks, f.count) for f in findings] == [({"aiv": list(range(40))}, 40)]
        assert "====== SUMMARY: 40 pipe(s) locked up." in render_text(findings)


def stuck_at(findings: list[Finding]) -> list[tuple[str, str, dict[str, list[int]]]]:
    """(instruction, held pipe, blocks) of each lock-up finding."""
    return [(f.detail, f.dst_pipe, f.blocks) for f in findings if f.kind == "kernel_locked_up"]


CROSS_SET, CROSS_WAIT = EventKind.CROSS_SET, EventKind.CROSS_WAIT


def handovers_sent_late(n: int) -> np.ndarray:
    """``n`` hand-overs MTE2 -> V -> MTE2 ..., V's records all sent before MTE2's: each of V's waits arrives before
    the set that releases it, so the replay needs a step per hand-over."""
    v = [syncs(WAIT, Pipe.MTE2, Pipe.V, 0) if i % 2 == 0 else syncs(SET, Pipe.V, Pipe.MTE2, 1) for i in range(2 * n)]
    mte2 = [syncs(SET, Pipe.MTE2, Pipe.V, 0) if i % 2 == 0 else syncs(WAIT, Pipe.V, Pipe.MTE2, 1) for i in range(2 * n)]
    return stream(*v, *mte2)


class TestQueuedBehindAWait:
    def test_two_pipes_each_with_its_set_behind_its_own_wait_are_locked_at_once(self) -> None:
        """V waits for MTE3 then sets MTE3's flag; MTE3 waits for V then sets V's. Every set was received, but each
        sits behind its pipe's wait, so neither ever runs: both pipes are locked, reported while the kernel runs."""
        detector = synccheck()
        detector.check(
            stream(
                syncs(WAIT, Pipe.MTE3, Pipe.V, 2),
                syncs(SET, Pipe.V, Pipe.MTE3, 2),
                syncs(WAIT, Pipe.V, Pipe.MTE3, 2),
                syncs(SET, Pipe.MTE3, Pipe.V, 2),
            )
        )
        assert locked(detector.take_early()) == [
            ("PIPE_V", "PIPE_MTE3", {"aiv": [0]}, 1),
            ("PIPE_MTE3", "PIPE_V", {"aiv": [0]}, 3),
        ]
        assert locked(detector.finish()) == []  # reported once

    def test_the_same_records_with_one_set_before_its_wait_are_clean(self) -> None:
        """V sets first, then waits: MTE3's wait is released, its set runs, and V's wait with it."""
        detector = synccheck()
        detector.check(
            stream(
                syncs(SET, Pipe.V, Pipe.MTE3, 2),
                syncs(WAIT, Pipe.MTE3, Pipe.V, 2),
                syncs(WAIT, Pipe.V, Pipe.MTE3, 2),
                syncs(SET, Pipe.MTE3, Pipe.V, 2),
            )
        )
        assert detector.take_early() == []
        assert detector.finish() == []

    def test_a_set_behind_a_wait_on_a_free_pipe_holds_its_waiter_too(self) -> None:
        """MTE3 waits on PIPE_S (free: not reported while running), and V on the set queued behind that wait: at
        the session's end both pipes are locked up, each at its own wait."""
        detector = synccheck()
        detector.check(
            stream(
                syncs(WAIT, Pipe.S, Pipe.MTE3, 3),
                syncs(SET, Pipe.MTE3, Pipe.V, 1),
                syncs(WAIT, Pipe.MTE3, Pipe.V, 1),
            )
        )
        assert detector.take_early() == []
        findings = detector.finish()
        assert locked(findings) == [("PIPE_MTE3", "PIPE_S", {"aiv": [0]}, 1), ("PIPE_V", "PIPE_MTE3", {"aiv": [0]}, 3)]
        assert "====== SUMMARY: 2 pipe(s) locked up." in render_text(findings)

    def test_a_wait_whose_set_arrives_after_it_in_the_batch_is_released(self) -> None:
        """A long hand-over chain whose every set arrives after the wait it releases (each pipe's records sent
        together): the replay takes a step per hand-over, past one batch's work, and still ends clean."""
        detector = synccheck()
        detector.check(handovers_sent_late(40))
        assert not detector.tails.settled  # more steps than one batch may take
        assert detector.finish() == []

    def test_a_held_scalar_holds_what_it_issued_after(self) -> None:
        """MTE3 waits on V's flag; then PIPE_S waits on a flag nobody sets; then V's set for MTE3 comes. The
        scalar issues nothing after its held wait, so that set never runs: MTE3 is locked too. The DMA after the
        scalar's wait is held by the scalar, not stuck on its own, and is not reported."""
        detector = synccheck()
        detector.check(
            stream(
                syncs(WAIT, Pipe.V, Pipe.MTE3, 1),
                syncs(WAIT, Pipe.V, Pipe.S, 0),
                syncs(SET, Pipe.V, Pipe.MTE3, 1),
                syncs(WAIT, Pipe.MTE3, Pipe.MTE2, 4),
            )
        )
        assert locked(detector.finish()) == [
            ("PIPE_MTE3", "PIPE_V", {"aiv": [0]}, 1),
            ("PIPE_S", "PIPE_V", {"aiv": [0]}, 2),
        ]


class TestOtherWaits:
    def test_wait_flag_dev_on_a_flag_nobody_sets(self) -> None:
        """Block 0's PIPE_S waits on FFTS flag 5, which no block sets: WAIT_FLAG_DEV locked up, at the session's end
        only (another block could still set it while the kernel runs)."""
        detector = synccheck()
        detector.check(stream(syncs(CROSS_WAIT, Pipe.S, Pipe.S, 5, location=5)))
        assert detector.take_early() == []
        findings = detector.finish()
        assert stuck_at(findings) == [("WAIT_FLAG_DEV", "PIPE_S", {"aiv": [0]})]
        assert "======    WAIT_FLAG_DEV in vec_kernel\n======    by PIPE_S in block aiv(0) on device 1" in render_text(
            findings
        )

    def test_a_mode_0_round_needs_every_block_of_the_launch(self) -> None:
        """SyncAll as FFTS mode 0 (set and wait flag 31) in 7 of the launch's 8 blocks: the round never completes,
        so the 7 are locked up; with the 8th block's set it completes and all is clean."""

        def sync_all(block: int) -> np.ndarray:
            return stream(
                syncs(CROSS_SET, Pipe.S, Pipe.S, 31, block_id=block),
                syncs(CROSS_WAIT, Pipe.S, Pipe.S, 31, block_id=block),
            )

        detector = synccheck()
        for block in range(7):
            detector.check(sync_all(block))
        (finding,) = detector.finish()
        assert (finding.detail, finding.blocks, finding.count) == ("WAIT_FLAG_DEV", {"aiv": list(range(7))}, 7)
        detector = synccheck()
        for block in range(8):
            detector.check(sync_all(block))
        assert detector.finish() == []

    def test_mode_2_cube_set_releases_its_vector_blocks_but_not_an_intra_block_wait(self) -> None:
        """A cube's mode-2 set releases wait_flag_dev of its two vector sub-blocks; wait_intra_block (mode 4) is
        a flag space of its own, and stays locked."""
        detector = synccheck()
        detector.check(
            stream(
                syncs(CROSS_SET, Pipe.FIX, Pipe.S, 1, mode=2, block_num=2, block_type=BlockType.AIC),
                syncs(CROSS_WAIT, Pipe.V, Pipe.S, 1, block_id=0),
                syncs(CROSS_WAIT, Pipe.V, Pipe.S, 1, block_id=1),
                syncs(CROSS_WAIT, Pipe.MTE2, Pipe.S, 1, block_id=1, mode=4),
            )
        )
        assert stuck_at(detector.finish()) == [("WAIT_INTRA_BLOCK", "PIPE_MTE2", {"aiv": [1]})]

    def test_ib_wait_mstx_wait_and_get_buf(self) -> None:
        """IB_WAIT on block 3, which never IB_SETs; an mstx cross wait nothing sets; a second GET_BUF of buffer 4
        without its release: all three locked up. Their releasing twins (IB_SET by block 2, an mstx set, RLS_BUF on
        another pipe) and an "is more" mstx wait leave the rest clean."""
        detector = synccheck()
        detector.check(
            stream(
                syncs(EventKind.SOFT_SET, Pipe.S, Pipe.S, 7, block_id=2),
                syncs(EventKind.SOFT_WAIT, Pipe.S, Pipe.S, 7, address=2, block_id=0),
                syncs(EventKind.SOFT_WAIT, Pipe.S, Pipe.S, 7, address=3, block_id=1),
                syncs(EventKind.MSTX_CROSS_SET, Pipe.S, Pipe.S, 1, address=0x1000, block_id=4),
                syncs(EventKind.MSTX_CROSS_WAIT, Pipe.MTE3, Pipe.S, 1, address=0x1000, block_id=5),
                syncs(EventKind.MSTX_CROSS_WAIT, Pipe.V, Pipe.S, 1, address=0x1000, block_id=5),
                syncs(EventKind.MSTX_CROSS_WAIT, Pipe.MTE2, Pipe.S, 2, address=0x1000, block_id=5, mode=1),
                syncs(EventKind.GET_BUF, Pipe.MTE2, Pipe.S, 4, block_id=6),
                syncs(EventKind.RLS_BUF, Pipe.V, Pipe.S, 4, block_id=6),
                syncs(EventKind.GET_BUF, Pipe.MTE2, Pipe.S, 4, block_id=6),
                syncs(EventKind.GET_BUF, Pipe.MTE2, Pipe.S, 4, block_id=6),
            )
        )
        assert sorted(stuck_at(detector.finish())) == [
            ("GET_BUF", "PIPE_MTE2", {"aiv": [6]}),
            ("IB_WAIT", "PIPE_S", {"aiv": [1]}),
            ("MSTX_WAIT_CROSS", "PIPE_V", {"aiv": [5]}),
        ]

    def test_a_non_blocking_get_buf_never_holds_and_takes_no_release(self) -> None:
        """GET_BUF in msSanitizer's NONBLOCK_MODE (GET_BUF_NONBLOCK) waits for nothing, as its replay lets it pass,
        and is not one of the buffer's gets: the block-mode GET_BUF after two of them is the buffer's first, free;
        the block-mode one after that needs a release, and none comes."""
        detector = synccheck()
        nonblocking = syncs(EventKind.GET_BUF, Pipe.MTE2, Pipe.S, 4, mode=GET_BUF_NONBLOCK)
        detector.check(stream(nonblocking, nonblocking, syncs(EventKind.GET_BUF, Pipe.MTE2, Pipe.S, 4)))
        assert detector.finish() == []
        detector = synccheck()
        blocking = syncs(EventKind.GET_BUF, Pipe.MTE2, Pipe.S, 4)
        detector.check(stream(nonblocking, blocking, nonblocking, blocking))
        assert stuck_at(detector.finish()) == [("GET_BUF", "PIPE_MTE2", {"aiv": [0]})]

    def test_a_cross_core_set_behind_a_stuck_wait_flag_releases_nothing(self) -> None:
        """Block 0's PIPE_S waits on a flag of V that is never set, and its IB_SET sits behind that wait: block 1's
        IB_WAIT on block 0 is locked too."""
        detector = synccheck()
        detector.check(
            stream(
                syncs(WAIT, Pipe.V, Pipe.S, 0, block_id=0),
                syncs(EventKind.SOFT_SET, Pipe.S, Pipe.S, 1, block_id=0),
                syncs(EventKind.SOFT_WAIT, Pipe.S, Pipe.S, 1, address=0, block_id=1),
            )
        )
        assert stuck_at(detector.finish()) == [
            ("WAIT_FLAG", "PIPE_S", {"aiv": [0]}),
            ("IB_WAIT", "PIPE_S", {"aiv": [1]}),
        ]


SYNC_ALL, NPU_BARRIER = EventKind.SOFT_SYNC_ALL, EventKind.NPU_BARRIER


def barrier(kind: EventKind, block: int, used: int = 0, serial: int = 0) -> np.ndarray:
    return syncs(kind, Pipe.S, Pipe.S, 0, address=used, block_id=block, serial=serial)


def after(block: int) -> np.ndarray:
    """A record of the block after its barrier: it went past it."""
    return copy_in(block)


class TestBarriers:
    def test_blocks_at_a_sync_all_one_block_never_reaches_are_locked_up(self) -> None:
        """Block 0's scalar waits on a flag nobody sets; blocks 1-7 sit at SyncAll, whose round needs block 0: all
        eight are reported when the session ends, block 0 at its wait, the rest at SYNC_ALL."""
        detector = synccheck()
        detector.check(stream(syncs(WAIT, Pipe.V, Pipe.S, 0, block_id=0), barrier(SYNC_ALL, 0)))
        detector.check(stream(*(barrier(SYNC_ALL, b) for b in range(1, 8))))
        assert detector.take_early() == []  # a block that has not reached it yet may still reach it
        findings = detector.finish()
        assert stuck_at(findings) == [
            ("WAIT_FLAG", "PIPE_S", {"aiv": [0]}),
            ("SYNC_ALL", "PIPE_S", {"aiv": [1, 2, 3, 4, 5, 6, 7]}),
        ]
        assert "====== SUMMARY: 8 pipe(s) locked up." in render_text(findings)
        assert "======    SYNC_ALL in vec_kernel\n======    by PIPE_S in block aiv(1-7) on device 1" in render_text(
            findings
        )

    def test_a_block_of_the_launch_that_sent_nothing_holds_the_round(self) -> None:
        """Blocks 0-6 of 8 at SyncAll, block 7 never heard from: the launch gave it, so the round waits for it."""
        detector = synccheck()
        detector.check(stream(*(barrier(SYNC_ALL, b) for b in range(7))))
        assert stuck_at(detector.finish()) == [("SYNC_ALL", "PIPE_S", {"aiv": list(range(7))})]

    def test_rounds_every_block_reaches_are_clean_in_any_order(self) -> None:
        """Twenty SyncAll rounds in each of the 8 blocks, each block's records sent whole before the next block's
        (as msSanitizer's wire sends them), then interleaved: every round completes within the batch's replay
        (more rounds than a batch's steps: rounds whose barriers lead every block's queue settle in one step),
        and the session's end finds nothing, whether or not the blocks sent anything after their last round."""
        per_block = [
            stream(barrier(SYNC_ALL, b), after(b), *(barrier(SYNC_ALL, b) for _ in range(19))) for b in range(8)
        ]
        for parts in (per_block, [barrier(SYNC_ALL, b) for _ in range(20) for b in range(8)]):
            detector = synccheck()
            detector.check(stream(*parts))
            assert detector.tails.settled and not detector.tails.pending.size
            assert detector.finish() == []

    def test_a_sync_all_of_the_first_blocks_needs_only_them(self) -> None:
        """SyncAll(used=4): blocks 0-3 take part; with block 3 missing, blocks 0-2 are locked up; with it, none."""
        detector = synccheck()
        detector.check(stream(*(barrier(SYNC_ALL, b, used=4) for b in range(3))))
        assert stuck_at(detector.finish()) == [("SYNC_ALL", "PIPE_S", {"aiv": [0, 1, 2]})]
        detector = synccheck()
        detector.check(stream(*(barrier(SYNC_ALL, b, used=4) for b in range(4))))
        assert detector.finish() == []

    def test_a_sync_all_cannot_release_what_releases_it(self) -> None:
        """Block 0 reaches SyncAll(2) and then IB_SETs; block 1 waits on that IB_SET before its SyncAll. The set
        arrives before the wait, but runs only after the round, which needs block 1 past its wait: a cycle, both
        locked up (whatever the order the records came in)."""
        records = [
            barrier(SYNC_ALL, 0, used=2),
            syncs(EventKind.SOFT_SET, Pipe.S, Pipe.S, 1, block_id=0),
            syncs(EventKind.SOFT_WAIT, Pipe.S, Pipe.S, 1, address=0, block_id=1),
            barrier(SYNC_ALL, 1, used=2),
        ]
        for order in (records, records[2:] + records[:2]):
            detector = synccheck()
            detector.check(stream(*order))
            assert sorted(stuck_at(detector.finish())) == [
                ("IB_WAIT", "PIPE_S", {"aiv": [1]}),
                ("SYNC_ALL", "PIPE_S", {"aiv": [0]}),
            ]

    def test_a_hostile_count_of_blocks_taking_part_never_completes(self) -> None:
        detector = synccheck()
        detector.check(stream(*(barrier(SYNC_ALL, b, used=2**64 - 1) for b in range(8))))
        assert stuck_at(detector.finish()) == [("SYNC_ALL", "PIPE_S", {"aiv": list(range(8))})]

    def test_hostile_barriers_at_the_bounds(self) -> None:
        """Block ids and types at their tops (and a count past every block) are judged, not misread; more distinct
        SyncAll counts than MAX_BARRIER_GROUPS stop the launch's lock-up check, said so, never clean."""
        detector = synccheck()
        top = stream(
            syncs(SYNC_ALL, Pipe.S, Pipe.S, 0, address=2**16, block_id=0xFFFF, block_type=255),
            syncs(NPU_BARRIER, Pipe.S, Pipe.S, 0, block_id=0xFFFF, block_type=255),
        )
        detector.check(top)
        assert stuck_at(detector.finish()) == [("SYNC_ALL", "PIPE_S", {"255": [0xFFFF]})]
        detector = synccheck()
        many = _lockup.MAX_BARRIER_GROUPS + 1
        detector.check(stream(*(barrier(SYNC_ALL, 0, used=n) for n in range(1, many + 1))))
        assert detector.tails.stopped
        (finding,) = [f for f in detector.finish() if f.kind == "internal_error"]
        assert "stopped looking for locked pipes" in finding.detail and "SyncAll block counts" in finding.detail

    def test_a_cross_npu_barrier_one_block_of_this_device_never_reaches_is_locked_up(self) -> None:
        detector = synccheck()
        stuck = syncs(WAIT, Pipe.V, Pipe.S, 0, block_id=0)
        detector.check(stream(stuck, *(barrier(NPU_BARRIER, b) for b in range(1, 8))))
        assert stuck_at(detector.finish()) == [
            ("WAIT_FLAG", "PIPE_S", {"aiv": [0]}),
            ("MSTX_CROSS_NPU_BARRIER", "PIPE_S", {"aiv": list(range(1, 8))}),
        ]

    def test_a_cross_npu_barrier_every_block_reached_waits_on_another_device(self) -> None:
        """All 8 blocks at the barrier and nothing after: what holds them is another device. Never clean: each is
        reported stuck there, saying so."""
        detector = synccheck()
        detector.check(stream(*(barrier(NPU_BARRIER, b) for b in range(8))))
        findings = detector.finish()
        remote = "MSTX_CROSS_NPU_BARRIER (waiting on another device)"
        assert stuck_at(findings) == [(remote, "PIPE_S", {"aiv": list(range(8))})]
        assert "MSTX_CROSS_NPU_BARRIER (waiting on another device) in vec_kernel" in render_text(findings)

    def test_a_cross_npu_barrier_a_block_went_past_is_open(self) -> None:
        """The blocks' records after the barrier show it opened: clean."""
        detector = synccheck()
        detector.check(stream(*(barrier(NPU_BARRIER, b) for b in range(8))))
        detector.check(stream(*(after(b) for b in range(8))))
        assert detector.finish() == []


def test_report_text_is_mssanitizers() -> None:
    """sync_info_display.h (master): the header, each pipe after a separator line, the summary, a blank line."""
    detector = synccheck()
    detector.check(
        stream(
            syncs(WAIT, Pipe.MTE3, Pipe.V, 2, location=5),
            syncs(WAIT, Pipe.V, Pipe.MTE3, 2),
        )
    )
    assert render_text(detector.take_early()) == (
        "====== ERROR: Sync error detected. kernel locked up at\n"
        "======    \n"
        "======    WAIT_FLAG in vec_kernel\n"
        "======    by PIPE_V in block aiv(0) on device 1\n"
        "======    code in /src/kernel.cpp:9 (serialNo:1)\n"
        "======    \n"
        "======    WAIT_FLAG in vec_kernel\n"
        "======    by PIPE_MTE3 in block aiv(0) on device 1\n"
        "======    code in unknown:0 (serialNo:2)\n"
        "======    \n"
        "====== SUMMARY: 2 pipe(s) locked up.\n"
        "\n"
    )


class TestHostileRecords:
    def test_extreme_fields_do_not_break_the_check(self) -> None:
        """The largest block id, pipe and event id a record can carry: tracked, compared whole, reported."""
        detector = synccheck()
        wait = syncs(WAIT, Pipe.V, Pipe.MTE3, 0xFFFF, block_id=0xFFFF)
        wait["pipe"], wait["dst_pipe"] = 0xFF, 0xFF  # a pipe waiting on itself: locked at once
        detector.check(stream(wait))
        (finding,) = detector.take_early()
        assert (finding.blocks, finding.event_id) == ({"aiv": [0xFFFF]}, 0xFFFF)

    def test_tracking_is_bounded_and_a_stop_is_said(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Past MAX_LOCKUP_KEYS (block, pipe) pairs the launch's lock-up check stops; the session's end says so
        rather than pass the launch as free of lock-ups."""
        monkeypatch.setattr(_lockup, "MAX_LOCKUP_KEYS", 64)
        detector = synccheck()
        detector.check(stream(*(syncs(WAIT, Pipe.S, Pipe.MTE3, 3, block_id=b) for b in range(100))))
        assert detector.tails.pending.size == 0  # what it held is dropped
        findings = detector.finish()
        assert [f.kind for f in findings] == ["internal_error"]
        assert "stopped looking for locked pipes" in findings[0].detail

    def test_hostile_cross_fields(self) -> None:
        """An IB_WAIT naming a block past 16 bits (nothing can release it, nor is block 0's IB_SET taken for it),
        an FFTS wait with the largest flag and an unknown mode, an mstx wait at the top address: no crash, each
        locked."""
        detector = synccheck()
        detector.check(
            stream(
                syncs(EventKind.SOFT_SET, Pipe.S, Pipe.S, 1, block_id=0),
                syncs(EventKind.SOFT_WAIT, Pipe.S, Pipe.S, 1, address=0x10000, block_id=1),
                syncs(CROSS_SET, Pipe.S, Pipe.S, 0xFFFF, mode=0xFF, block_id=2, block_num=0xFFFF),
                syncs(CROSS_WAIT, Pipe.S, Pipe.S, 0xFFFF, mode=0xFF, block_id=3),
                syncs(EventKind.MSTX_CROSS_WAIT, Pipe.S, Pipe.S, 0xFFFF, address=2**64 - 1, block_id=4),
            )
        )
        assert sorted(stuck_at(detector.finish())) == [
            ("IB_WAIT", "PIPE_S", {"aiv": [1]}),
            ("MSTX_WAIT_CROSS", "PIPE_S", {"aiv": [4]}),
            ("WAIT_FLAG_DEV", "PIPE_S", {"aiv": [3]}),
        ]

    def test_records_queued_behind_waits_are_bounded(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A pipe stuck at its first record with ever more records behind it: past MAX_PENDING_ROWS the launch's
        lock-up check stops, and the session's end says so."""
        monkeypatch.setattr(_lockup, "MAX_PENDING_ROWS", 64)
        detector = synccheck()
        detector.check(stream(syncs(WAIT, Pipe.S, Pipe.V, 0), *(syncs(SET, Pipe.V, Pipe.MTE3, 1) for _ in range(100))))
        assert detector.tails.stopped and detector.tails.pending.size == 0
        findings = detector.finish()
        assert [f.kind for f in findings if "queued behind waits" in f.detail] == ["internal_error"]
        assert locked(findings) == []

    def test_cross_core_flags_set_by_block_are_bounded(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Each FFTS set of a distinct (flag, block) is a key the replay reads in Python: past MAX_FFTS_SET_KEYS
        of them the launch's lock-up check stops, said so, and a block stuck on a cross-core wait is not taken
        for clean."""
        monkeypatch.setattr(_lockup, "MAX_FFTS_SET_KEYS", 16)
        detector = synccheck()
        detector.check(stream(syncs(CROSS_WAIT, Pipe.S, Pipe.S, 9, block_id=0)))
        detector.check(stream(*(syncs(CROSS_SET, Pipe.S, Pipe.S, f, block_id=1) for f in range(17))))
        findings = detector.finish()
        assert [f.kind for f in findings] == ["internal_error"]
        assert "cross-core (FFTS) flags" in findings[0].detail

    def test_a_replay_that_cannot_settle_in_its_budget_says_so(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A hand-over chain longer than the session end's replay work allows: not judged, and said so, rather
        than reported clean or locked."""
        monkeypatch.setattr(_lockup, "FINAL_WORK", 1 << 10)
        detector = synccheck()
        detector.check(handovers_sent_late(200))
        (finding,) = detector.finish()
        assert finding.kind == "internal_error" and "did not settle" in finding.detail


# --- end to end -----------------------------------------------------------------------------------------------------


class Run:
    """A ``sanitizerd run`` of lockup.py in the background, its output read as it comes."""

    def __init__(self, daemon: RunningDaemon, bug: str, *extra: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "sanitizerd", "run", "--socket", str(daemon.socket), "-t", "synccheck", "--",
             sys.executable, str(LOCKUP), bug, *extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
        )  # fmt: skip
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    @property
    def text(self) -> str:
        return "".join(self.lines)

    def wait_for(self, pattern: str, timeout: float = 60.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(pattern, self.text)
            if found:
                return found
            assert self.process.poll() is None or self.reader.is_alive(), f"run ended:\n{self.text}"
            time.sleep(0.05)
        raise AssertionError(f"{pattern!r} not in the run's output:\n{self.text}")

    def end(self, timeout: float = 60.0) -> int:
        code = self.process.wait(timeout)
        self.reader.join(10)
        return code

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.reader.join(10)
        assert self.process.stdout is not None
        self.process.stdout.close()


@pytest.fixture
def runs() -> Iterator[list[Run]]:
    started: list[Run] = []
    yield started
    for run in started:
        run.kill()


def hung(run: Run, daemon: RunningDaemon) -> int:
    """Once the program hangs and the daemon has every event it sent: the program's pid."""
    found = run.wait_for(r"lockup.py: pid (\d+) launch \d+ hangs after (\d+) events")
    pid, sent = int(found.group(1)), int(found.group(2))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        listed = json.loads(sanitizerd("sessions", "--socket", str(daemon.socket), "--format", "json").stdout)
        if any(s["pid"] == pid and s["events"] == sent for s in listed):
            return pid
        time.sleep(0.1)
    raise AssertionError(f"the daemon did not receive the {sent} events of pid {pid}")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "zombie" not in status.read_text()


def marked_line(name: str) -> int:
    for number, line in enumerate(LOCKUP.read_text().splitlines(), 1):
        if f"# line: {name}" in line:
            return number
    raise AssertionError(f"no line marked {name}")


def stored(daemon: RunningDaemon, run: Run) -> list[dict]:
    job = re.search(r"SUMMARY: job (\S+):", run.text)
    assert job, run.text
    query = sanitizerd("findings", "--socket", str(daemon.socket), "--job", job.group(1), "--format", "json")
    return json.loads(query.stdout)


def test_ctrl_c_reports_the_locked_pipe(daemon: RunningDaemon, runs: list[Run]) -> None:
    """The kernel never ends and nothing proves it locked while it runs; SIGINT to the run stops the program, and
    the daemon reports the pipe stuck on its wait, at the marked line; the run's status is an error."""
    run = Run(daemon, "unset_flag")
    runs.append(run)
    pid = hung(run, daemon)
    assert "locked up" not in run.text
    run.process.send_signal(signal.SIGINT)
    code = run.end()
    assert code == 128 + signal.SIGINT, run.text
    assert not alive(pid)
    assert CTRL_C_TEXT in run.text
    assert f"user program {sys.executable} exited by signal(2)" in run.text
    block = run.text[run.text.index("====== ERROR: Sync error detected. kernel locked up at") :]
    serial = re.search(r"serialNo:(\d+)", block).group(1)
    assert block.splitlines()[:7] == [
        "====== ERROR: Sync error detected. kernel locked up at",
        "======    ",
        "======    WAIT_FLAG in lockup_custom",
        "======    by PIPE_MTE3 in block aiv(1) on device 0",
        f"======    code in {LOCKUP}:{marked_line('stuck-mte3')} (serialNo:{serial})",
        "======    ",
        "====== SUMMARY: 1 pipe(s) locked up.",
    ]
    (finding,) = stored(daemon, run)
    assert (finding["kind"], finding["dst_pipe"], finding["pipe"], finding["event_id"]) == (
        "kernel_locked_up", "PIPE_MTE3", "PIPE_S", 3,
    )  # fmt: skip


def test_the_daemon_finds_a_lockup_while_the_kernel_runs(daemon: RunningDaemon, runs: list[Run]) -> None:
    """Two pipes waiting on each other: reported with no signal sent, while the program still hangs; a Ctrl-C
    after does not report them again."""
    run = Run(daemon, "cycle")
    runs.append(run)
    run.wait_for(r"SUMMARY: 2 pipe\(s\) locked up\.")
    assert run.process.poll() is None  # the program still hangs, the run still waits for it
    text = run.text
    assert f"{LOCKUP}:{marked_line('cycle-v')} " in text and f"{LOCKUP}:{marked_line('cycle-mte3')} " in text
    assert "by PIPE_V in block aiv(0)" in text and "by PIPE_MTE3 in block aiv(0)" in text
    run.process.send_signal(signal.SIGINT)
    assert run.end() != 0
    assert run.text.count("kernel locked up at") == 1
    assert sorted(f["dst_pipe"] for f in stored(daemon, run)) == ["PIPE_MTE3", "PIPE_V"]


def test_ctrl_c_reports_a_wait_flag_dev_nobody_releases(daemon: RunningDaemon, runs: list[Run]) -> None:
    """Block 0 waits on a cross-core flag no block sets: another block could still set it, so nothing is reported
    while the kernel runs; Ctrl-C reports it under its own instruction's name, msSanitizer's WAIT_FLAG_DEV."""
    run = Run(daemon, "unset_cross")
    runs.append(run)
    hung(run, daemon)
    assert "locked up" not in run.text
    run.process.send_signal(signal.SIGINT)
    assert run.end() == 128 + signal.SIGINT, run.text
    block = run.text[run.text.index("====== ERROR: Sync error detected. kernel locked up at") :]
    serial = re.search(r"serialNo:(\d+)", block).group(1)
    assert block.splitlines()[:7] == [
        "====== ERROR: Sync error detected. kernel locked up at",
        "======    ",
        "======    WAIT_FLAG_DEV in lockup_custom",
        "======    by PIPE_S in block aiv(0) on device 0",
        f"======    code in {LOCKUP}:{marked_line('stuck-dev')} (serialNo:{serial})",
        "======    ",
        "====== SUMMARY: 1 pipe(s) locked up.",
    ]
    (finding,) = stored(daemon, run)
    assert (finding["kind"], finding["detail"], finding["dst_pipe"]) == ("kernel_locked_up", "WAIT_FLAG_DEV", "PIPE_S")


def test_ctrl_c_reports_a_block_stuck_before_sync_all_and_the_block_waiting_there(
    daemon: RunningDaemon, runs: list[Run]
) -> None:
    """Block 0's scalar waits on a flag nothing sets, so it never reaches the kernel's SyncAll; block 1 waits there
    for it. Nothing is reported while the kernel runs (PIPE_V could still set the flag); Ctrl-C reports both."""
    run = Run(daemon, "sync_all")
    runs.append(run)
    hung(run, daemon)
    assert "locked up" not in run.text
    run.process.send_signal(signal.SIGINT)
    assert run.end() == 128 + signal.SIGINT, run.text
    block = run.text[run.text.index("====== ERROR: Sync error detected. kernel locked up at") :]
    assert "======    WAIT_FLAG in lockup_custom\n======    by PIPE_S in block aiv(0) on device 0" in block
    assert "======    SYNC_ALL in lockup_custom\n======    by PIPE_S in block aiv(1) on device 0" in block
    assert f"{LOCKUP}:{marked_line('at-sync-all')}" in block and f"{LOCKUP}:{marked_line('stuck-s')}" in block
    assert "====== SUMMARY: 2 pipe(s) locked up." in block
    stuck = sorted((f["detail"], f["blocks"]["aiv"]) for f in stored(daemon, run))
    assert stuck == [("SYNC_ALL", [1]), ("WAIT_FLAG", [0])]


def test_sets_queued_behind_their_own_waits_are_found_while_running(daemon: RunningDaemon, runs: list[Run]) -> None:
    """V and MTE3 each wait for the other and then set the other's flag: both sets reach the daemon, but each
    sits behind its pipe's wait; both pipes are reported locked with no signal sent."""
    run = Run(daemon, "queued_sets")
    runs.append(run)
    run.wait_for(r"SUMMARY: 2 pipe\(s\) locked up\.")
    assert run.process.poll() is None
    text = run.text
    assert f"{LOCKUP}:{marked_line('queued-v')} " in text and f"{LOCKUP}:{marked_line('queued-mte3')} " in text
    run.process.send_signal(signal.SIGINT)
    assert run.end() != 0
    assert run.text.count("kernel locked up at") == 1
    assert sorted(f["dst_pipe"] for f in stored(daemon, run)) == ["PIPE_MTE3", "PIPE_V"]


@pytest.mark.parametrize("variant", ["cross_ok", "queued_ok", "sync_all_ok"])
def test_the_same_syncs_done_right_end_clean(daemon: RunningDaemon, runs: list[Run], variant: str) -> None:
    """Every block sets the cross-core flag before block 0 waits on it; V sets before it waits: the kernel ends
    with nothing reported."""
    run = Run(daemon, variant)
    runs.append(run)
    assert run.end() == 0, run.text
    assert "No error detected." in run.text and "locked up" not in run.text


def test_a_second_ctrl_c_ends_the_run_at_once(daemon: RunningDaemon, runs: list[Run]) -> None:
    """A program deaf to SIGINT (stuck in a driver call, say) is given KILL_GRACE seconds; a second Ctrl-C does
    not wait for them: the run ends now, with the program killed."""
    run = Run(daemon, "unset_flag", "--deaf")
    runs.append(run)
    pid = hung(run, daemon)
    run.process.send_signal(signal.SIGINT)
    run.wait_for(re.escape(CTRL_C_TEXT))
    time.sleep(0.3)
    assert run.process.poll() is None and alive(pid)  # the first Ctrl-C waits for the program
    started = time.monotonic()
    run.process.send_signal(signal.SIGINT)
    assert run.end(timeout=KILL_GRACE) == 128 + signal.SIGINT
    assert time.monotonic() - started < KILL_GRACE / 2
    deadline = time.monotonic() + 5
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid), "the program outlived a forced quit"
    assert "Forced to quit by a second Ctrl-C" in run.text


def test_a_deaf_program_is_killed_after_the_grace(daemon: RunningDaemon, runs: list[Run]) -> None:
    """One Ctrl-C alone ends a program that ignores SIGINT, KILL_GRACE seconds later, and the lock-up is reported."""
    run = Run(daemon, "unset_flag", "--deaf")
    runs.append(run)
    hung(run, daemon)
    run.process.send_signal(signal.SIGINT)
    assert run.end(timeout=KILL_GRACE + 60) == 128 + signal.SIGKILL
    assert "SUMMARY: 1 pipe(s) locked up." in run.text


@pytest.fixture
def quick_silence(short_dir: Path) -> Iterator[RunningDaemon]:
    running = start_daemon(short_dir, "--silent-kernel-after", "1")
    yield running
    assert stop_daemon(running) == 0, running.log_text()


def test_a_silent_kernel_is_reported_not_clean(quick_silence: RunningDaemon, runs: list[Run]) -> None:
    """Every wait met, but the kernel never ends: after --silent-kernel-after it is reported silent, with no
    signal; Ctrl-C then finds no locked pipe, and the run fails."""
    run = Run(quick_silence, "silent")
    runs.append(run)
    run.wait_for(r"Kernel lockup_custom sent no record for 1 s and has not ended")
    run.process.send_signal(signal.SIGINT)
    assert run.end() != 0
    assert "locked up at" not in run.text
    assert [f["kind"] for f in stored(quick_silence, run)] == ["kernel_silent"]
    assert quick_silence.wait_for_log("kernel launch silent")


def test_a_kernel_that_ends_is_clean_and_never_silent(quick_silence: RunningDaemon, runs: list[Run]) -> None:
    """The same kernel run to its end: clean, and a launch that ended is not reported silent after."""
    run = Run(quick_silence, "none")
    runs.append(run)
    assert run.end() == 0, run.text
    assert "No error detected." in run.text
    time.sleep(1.5)
    assert stored(quick_silence, run) == []
