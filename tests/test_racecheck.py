"""racecheck driven directly with hand-built streams (reference §2.2), and its report text (§2.5).

Each test builds a kernel's events in program order per block; ``stream`` numbers instructions 1, 2, 3, ...
(an instruction that reads and writes is two events with one serial: ``instr``).
"""

from __future__ import annotations

import numpy as np
import pytest

from client_shim.events import BlockType, EventKind, Pipe, Space, accesses, make_events, syncs
from sanitizerd.chips import chip_named
from sanitizerd.detectors.racecheck import Racecheck
from sanitizerd.findings.render import render_text
from sanitizerd_protocol.messages import Location
from sanitizerd_protocol.model import Finding
from sanitizerd_protocol.records import GET_BUF_NONBLOCK
from tests.detector_helpers import make_detector, run_kernel

R, W = EventKind.READ, EventKind.WRITE
SET, WAIT, BARRIER = EventKind.SET_FLAG, EventKind.WAIT_FLAG, EventKind.PIPE_BARRIER
UB, GM = Space.UB, Space.GM


def racecheck(**config: object) -> Racecheck:
    detector = make_detector("racecheck", locations={7: Location(id=7, file="add.cpp", line=18, column=5)})
    for name, value in config.items():
        setattr(detector.context.config, name, value)
    assert isinstance(detector, Racecheck)
    detector.distance = detector.context.config.single_pipe_distance
    return detector


def program(*instructions: np.ndarray | list[np.ndarray]) -> np.ndarray:
    """Instructions in program order; each is an event array or a list of events sharing one serial."""
    parts = []
    for serial, instruction in enumerate(instructions, start=1):
        events = np.concatenate(instruction) if isinstance(instruction, list) else instruction.copy()
        events["serial"] = serial
        parts.append(events)
    return np.concatenate(parts)


def on_block(events: np.ndarray, block: int, block_type: BlockType = BlockType.AIV) -> np.ndarray:
    events = events.copy()
    events["block_id"] = block
    events["block_type"] = block_type
    events["serial"] += 1000 * block
    return events


def races(*batches: np.ndarray, detector: Racecheck | None = None) -> list[tuple]:
    findings = run_kernel(detector or racecheck(), *batches)
    return [summary(f) for f in findings]


def summary(f: Finding) -> tuple:
    if f.kind == "deadlock":
        return (f.kind, f.detail, f.blocks, f.blocked)
    return (f.kind, f.space, [(a.pipe, a.op, a.serial, a.blocks) for a in f.accesses], f.count)


def copy_in(ub: int = 0, gm: int = 0x1000, size: int = 512) -> list[np.ndarray]:
    """DataCopy GM -> UB on MTE2."""
    return [accesses(R, GM, gm, size, pipe=Pipe.MTE2), accesses(W, UB, ub, size, pipe=Pipe.MTE2)]


def vec(dst: int, *srcs: int, size: int = 256) -> list[np.ndarray]:
    return [accesses(R, UB, s, size, pipe=Pipe.V) for s in srcs] + [accesses(W, UB, dst, size, pipe=Pipe.V)]


def copy_out(ub: int = 0x400, gm: int = 0x8000, size: int = 256) -> list[np.ndarray]:
    return [accesses(R, UB, ub, size, pipe=Pipe.MTE3), accesses(W, GM, gm, size, pipe=Pipe.MTE3)]


def flag(src: Pipe, dst: Pipe, event_id: int = 0) -> list[np.ndarray]:
    return [syncs(SET, src, dst, event_id), syncs(WAIT, src, dst, event_id)]


def sync_all() -> list[np.ndarray]:
    return [
        syncs(BARRIER, Pipe.ALL),
        syncs(EventKind.CROSS_SET, Pipe.S, Pipe.S, 31, mode=0),
        syncs(EventKind.CROSS_WAIT, Pipe.S, Pipe.S, 31),
    ]


class TestInterPipe:
    def test_missing_wait_flag_is_raw(self) -> None:
        """MTE2 fills UB and V reads it with only the set_flag: a RAW between the two pipes."""
        events = program(copy_in(), syncs(SET, Pipe.MTE2, Pipe.V), vec(0x400, 0x0))
        assert races(events) == [("race_raw", "UB", [("PIPE_MTE2", "Write", 1, [0]), ("PIPE_V", "Read", 3, [0])], 1)]

    def test_flagged_hand_over_is_clean(self) -> None:
        events = program(copy_in(), *flag(Pipe.MTE2, Pipe.V), vec(0x400, 0x0))
        assert races(events) == []

    def test_war_when_refilled_before_the_reader_is_done(self) -> None:
        """V reads the tile; MTE2 refills it with no V -> MTE2 flag: a WAR (and, inside MTE2, a WAW with the
        first fill, which nothing completed either)."""
        events = program(copy_in(), *flag(Pipe.MTE2, Pipe.V), vec(0x400, 0x0), copy_in(gm=0x2000))
        found = races(events)
        assert [r[0] for r in found] == ["race_war", "race_waw"]
        assert found[0][2] == [("PIPE_V", "Read", 4, [0]), ("PIPE_MTE2", "Write", 5, [0])]
        assert found[1][2] == [("PIPE_MTE2", "Write", 1, [0]), ("PIPE_MTE2", "Write", 5, [0])]

    def test_knowledge_is_transitive(self) -> None:
        """MTE2 -> V -> MTE3 orders MTE2's write before MTE3's read without a direct flag."""
        events = program(
            copy_in(), *flag(Pipe.MTE2, Pipe.V), vec(0x400, 0x0), *flag(Pipe.V, Pipe.MTE3), copy_out(ub=0x0)
        )
        assert races(events) == []

    def test_wait_on_scalar_orders_what_is_issued_after(self) -> None:
        """wait_flag(MTE2 -> S) blocks issue: V's later read is ordered after MTE2's write."""
        events = program(copy_in(), *flag(Pipe.MTE2, Pipe.S), vec(0x400, 0x0))
        assert races(events) == []

    def test_pipe_all_barrier_orders_every_pipe(self) -> None:
        events = program(copy_in(), syncs(BARRIER, Pipe.ALL), vec(0x400, 0x0), copy_out(ub=0x0))
        assert races(events) == []

    def test_reads_never_race(self) -> None:
        events = program(accesses(R, UB, 0, 256, pipe=Pipe.MTE3), vec(0x400, 0x0))
        assert races(events) == []

    def test_disjoint_bytes_never_race(self) -> None:
        events = program(copy_in(ub=0x0, size=256), vec(0x400, 0x100, size=256))
        assert races(events) == []

    def test_strided_patterns_overlap_exactly(self) -> None:
        """Every other 32-byte block against the blocks between them: no shared byte, no race."""
        even = accesses(W, UB, 0x0, 32, block_num=8, block_stride=2, pipe=Pipe.MTE2)
        odd = accesses(R, UB, 0x20, 32, block_num=8, block_stride=2, pipe=Pipe.V)
        assert races(program(even, odd)) == []
        odd["address"] = 0x40
        assert [r[0] for r in races(program(even, odd))] == ["race_raw"]

    def test_atomic_writes_are_exempt(self) -> None:
        """Two atomic-mode writes (reductions) do not race; the atomic state comes from SET_ATOMIC."""
        events = program(
            syncs(EventKind.SET_ATOMIC, Pipe.S, mode=1),
            accesses(W, GM, 0x1000, 64, pipe=Pipe.MTE3),
            accesses(W, GM, 0x1000, 64, pipe=Pipe.FIX),
        )
        assert races(events) == []

    def test_every_block_is_checked(self) -> None:
        """msSanitizer looks inside block 0 only; every block's own race is found, and the four, alike but for
        their block, are one report shown in block 0 as msSanitizer's, the finding naming every block."""
        body = program(copy_in(), syncs(SET, Pipe.MTE2, Pipe.V), vec(0x400, 0x0))
        [finding] = run_kernel(racecheck(), *(on_block(body, b) for b in range(4)))
        kind, _, (first, second), count = summary(finding)
        assert (kind, count, first[3], second[3]) == ("race_raw", 4, [0], [0])
        assert finding.blocks == {"aiv": [0, 1, 2, 3]}

    def test_race_fold_shows_every_block_on_both_sides(self) -> None:
        """--race-fold yes: the same, with the blocks listed on each side."""
        body = program(copy_in(), syncs(SET, Pipe.MTE2, Pipe.V), vec(0x400, 0x0))
        found = races(*(on_block(body, b) for b in range(4)), detector=racecheck(race_fold=True))
        assert len(found) == 1
        kind, _, (first, second), count = found[0]
        assert (kind, count, first[3], second[3]) == ("race_raw", 4, [0, 1, 2, 3], [0, 1, 2, 3])

    def test_loop_iterations_fold_with_a_count(self) -> None:
        """The same missing flag in 5 iterations of a loop: one finding, counted 5 times. (Without MTE2 -> V
        knowledge, V's flag back no longer tells MTE2 that its own last fill is done: in-pipe WAWs follow.)"""
        one = [copy_in(), syncs(SET, Pipe.MTE2, Pipe.V), vec(0x400, 0x0), *flag(Pipe.V, Pipe.MTE2, 1)]
        found = races(program(*(one * 5)))
        assert ("race_raw", 5) in [(r[0], r[3]) for r in found]
        assert all(r[0] == "race_waw" for r in found if r[0] != "race_raw")


class TestSinglePipe:
    def test_dependent_vector_ops_need_a_barrier(self) -> None:
        events = program(vec(0x400, 0x0), vec(0x800, 0x400))
        assert races(events) == [("race_raw", "UB", [("PIPE_V", "Write", 1, [0]), ("PIPE_V", "Read", 2, [0])], 1)]

    def test_pipe_barrier_orders_them(self) -> None:
        assert races(program(vec(0x400, 0x0), syncs(BARRIER, Pipe.V), vec(0x800, 0x400))) == []

    def test_an_in_place_op_does_not_race_with_itself(self) -> None:
        assert races(program(vec(0x0, 0x0))) == []

    def test_distance_bounds_the_check(self) -> None:
        """17 instructions apart is ordered at msSanitizer's distance 16; the option widens it."""
        filler = [vec(0x1000 + 0x100 * i, 0x3000) for i in range(16)]
        events = program(vec(0x400, 0x0), *filler, vec(0x800, 0x400))
        assert races(events) == []
        assert [r[0] for r in races(events, detector=racecheck(single_pipe_distance=17))] == ["race_raw"]
        near = program(vec(0x400, 0x0), *filler[:15], vec(0x800, 0x400))
        assert [r[0] for r in races(near)] == ["race_raw"]
        assert races(near, detector=racecheck(single_pipe_distance=0)) == []

    def test_the_950s_vector_pipe_keeps_its_order(self) -> None:
        """On the 950 family the hardware orders PIPE_V (reference §2.2, single-pipe): dependent vector ops need no
        barrier there; on the 910B they race. Every 950 variant is the one chip entry (``chip_named``)."""
        events = program(vec(0x400, 0x0), vec(0x800, 0x400))
        for name in ("Ascend950PR", "950", "Ascend950DT"):
            detector = racecheck()
            detector.context.chip = chip_named(name)
            assert races(events, detector=detector) == []
        assert [r[0] for r in races(events)] == ["race_raw"]

    def test_a_round_trip_through_another_pipe_orders_the_pipe(self) -> None:
        """set(V->MTE3) wait, set(MTE3->V) wait: V's later op knows its earlier one finished (msSanitizer's
        in-pipe sync inference, generalised to any chain of flags)."""
        events = program(vec(0x400, 0x0), *flag(Pipe.V, Pipe.MTE3), *flag(Pipe.MTE3, Pipe.V), vec(0x800, 0x400))
        assert races(events) == []

    def test_scalar_accesses_keep_their_order(self) -> None:
        events = program(accesses(W, UB, 0, 32, pipe=Pipe.S), accesses(R, UB, 0, 32, pipe=Pipe.S))
        assert races(events) == []


class TestCrossCore:
    def test_two_blocks_writing_the_same_gm(self) -> None:
        body = program(copy_out(gm=0x8000))
        found = races(on_block(body, 0), on_block(body, 1))
        assert found == [("race_waw", "GM", [("PIPE_MTE3", "Write", 1, [0]), ("PIPE_MTE3", "Write", 1001, [1])], 1)]

    @pytest.mark.parametrize("second", [W, R])
    def test_blocks_numbering_their_instructions_alike(self, second: EventKind) -> None:
        """A client may number serials per block, as msSanitizer's hooks do: the same instruction in two blocks then
        has one serial, and is still two accesses that race (once paired as "an instruction's own other event")."""
        first = on_block(program(copy_out(gm=0x8000)), 0)
        other = on_block(program(accesses(second, GM, 0x8000, 256, pipe=Pipe.MTE3)), 1)
        other["serial"] = first["serial"][0]
        assert [r[0] for r in races(first, other)] == ["race_waw" if second == W else "race_raw"]

    def test_sync_all_orders_the_phases(self) -> None:
        """Each block writes its own tile, SyncAll, then reads its neighbour's: clean; without SyncAll, RAW."""

        def block(b: int, synced: bool) -> np.ndarray:
            mine = copy_out(gm=0x8000 + 0x100 * b)
            theirs = accesses(R, GM, 0x8000 + 0x100 * ((b + 1) % 2), 256, pipe=Pipe.MTE2)
            middle = sync_all() if synced else []
            return on_block(program(mine, *middle, theirs), b)

        assert races(block(0, True), block(1, True)) == []
        found = races(block(0, False), block(1, False))
        # Named by serial order, as msSanitizer does: block 1 reads block 0's tile after (RAW), block 0 reads
        # block 1's tile before block 1's write by serial number (WAR).
        assert sorted(r[0] for r in found) == ["race_raw", "race_war"]

    def test_cross_flag_set_before_the_write(self) -> None:
        """Block 0 signals (mode 0) before it writes; block 1 reads after the wait: RAW. Set after: clean."""
        signal = [
            syncs(EventKind.CROSS_SET, Pipe.MTE3, Pipe.S, 1, mode=0),
            syncs(EventKind.CROSS_WAIT, Pipe.S, Pipe.S, 1),
        ]
        write = copy_out(gm=0x8000)
        read = accesses(R, GM, 0x8000, 256, pipe=Pipe.MTE2)
        early = on_block(program(signal[0], write, signal[1]), 0)
        late = on_block(program(write, *signal), 0)
        reader = on_block(program(*signal, read), 1)
        assert [r[0] for r in races(early, reader)] == ["race_raw"]
        assert races(late, reader) == []

    def test_ffts_mode_2_hands_over_between_cube_and_vector(self) -> None:
        """AIC writes GM, sets mode 2 to its vector sub-blocks (one per core here), which wait and read."""
        set_ = syncs(EventKind.CROSS_SET, Pipe.FIX, Pipe.S, 3, mode=2)
        set_["block_num"] = 1  # one vector sub-block per core
        cube = on_block(program(accesses(W, GM, 0x8000, 256, pipe=Pipe.FIX), set_), 0, BlockType.AIC)
        vector = on_block(
            program(syncs(EventKind.CROSS_WAIT, Pipe.S, Pipe.S, 3), accesses(R, GM, 0x8000, 256, pipe=Pipe.MTE2)), 0
        )
        assert races(cube, vector) == []
        unsynced = on_block(program(accesses(R, GM, 0x8000, 256, pipe=Pipe.MTE2)), 0)
        unsynced["serial"] += 100  # after the cube's write by serial number: read after write
        assert [r[0] for r in races(cube, unsynced)] == ["race_raw"]

    def test_soft_sync_and_mstx_flags(self) -> None:
        """IB_SET/IB_WAIT and mstx cross-core set/wait release their waiters like hardware flags."""
        ib_set = make_events(kind=EventKind.SOFT_SET, pipe=Pipe.S, event_id=2, block_size=0)
        ib_wait = make_events(kind=EventKind.SOFT_WAIT, pipe=Pipe.S, event_id=2, address=0, block_size=0)
        writer = on_block(program(copy_out(gm=0x8000), syncs(BARRIER, Pipe.ALL), ib_set), 0)
        reader = on_block(program(ib_wait, accesses(R, GM, 0x8000, 256, pipe=Pipe.MTE2)), 1)
        assert races(writer, reader) == []
        mset = make_events(kind=EventKind.MSTX_CROSS_SET, pipe=Pipe.MTE3, address=0x77, event_id=1, block_size=0)
        mwait = make_events(kind=EventKind.MSTX_CROSS_WAIT, pipe=Pipe.S, address=0x77, event_id=1, block_size=0)
        writer = on_block(program(copy_out(gm=0x8000), mset), 0)
        reader = on_block(program(mwait, accesses(R, GM, 0x8000, 256, pipe=Pipe.MTE2)), 1)
        assert races(writer, reader) == []


class TestSyncKinds:
    """Each remaining way to order two accesses, checked both ways: with it, no race; without it, the race."""

    @staticmethod
    def sync(kind: EventKind, pipe: Pipe = Pipe.S, **fields: object) -> np.ndarray:
        return make_events(kind=kind, pipe=pipe, block_size=0, **fields)

    def test_hset_hwait_pair_like_flags_in_their_own_space(self) -> None:
        """hset_flag/hwait_flag order MTE1's L0A fill before the cube's read; a plain wait_flag of the same
        pipes and id does not pair with an hset: it waits for ever, and the read behind it is never placed."""
        fill = accesses(W, Space.L0A, 0, 512, pipe=Pipe.MTE1)
        use = accesses(R, Space.L0A, 0, 512, pipe=Pipe.M)
        hset = syncs(EventKind.HSET_FLAG, Pipe.MTE1, Pipe.M, 1)
        hwait = syncs(EventKind.HWAIT_FLAG, Pipe.MTE1, Pipe.M, 1)
        assert races(program(fill, hset, hwait, use)) == []
        mixed = program(fill, hset, syncs(WAIT, Pipe.MTE1, Pipe.M, 1), use)
        assert [r[0] for r in races(mixed)] == ["deadlock"]

    def test_get_buf_waits_for_the_previous_release(self) -> None:
        """GET_BUF k waits for RLS_BUF k-1 of the buffer: the V pipe's second use of the buffer follows the
        MTE3 read that released it."""
        first = [self.sync(EventKind.GET_BUF, Pipe.V, event_id=3), accesses(W, UB, 0, 256, pipe=Pipe.V)]
        hand = [*flag(Pipe.V, Pipe.MTE3), accesses(R, UB, 0, 256, pipe=Pipe.MTE3)]
        release = self.sync(EventKind.RLS_BUF, Pipe.MTE3, event_id=3)
        again = [self.sync(EventKind.GET_BUF, Pipe.V, event_id=3), accesses(W, UB, 0, 256, pipe=Pipe.V)]
        assert races(program(*first, *hand, release, *again)) == []
        early = [*flag(Pipe.V, Pipe.MTE3), release, accesses(R, UB, 0, 256, pipe=Pipe.MTE3)]  # released too soon
        assert [r[0] for r in races(program(*first, *early, *again))] == ["race_war"]

    def test_a_non_blocking_get_buf_orders_nothing(self) -> None:
        """msSanitizer's NONBLOCK_MODE GET_BUF (mode GET_BUF_NONBLOCK) stalls nothing: the V pipe's second use of the
        buffer behind one races with the MTE3 read that released it, where a blocking get orders them."""
        first = [self.sync(EventKind.GET_BUF, Pipe.V, event_id=3), accesses(W, UB, 0, 256, pipe=Pipe.V)]
        hand = [*flag(Pipe.V, Pipe.MTE3), accesses(R, UB, 0, 256, pipe=Pipe.MTE3)]
        release = self.sync(EventKind.RLS_BUF, Pipe.MTE3, event_id=3)
        write = accesses(W, UB, 0, 256, pipe=Pipe.V)
        nonblocking = self.sync(EventKind.GET_BUF, Pipe.V, event_id=3, mode=GET_BUF_NONBLOCK)
        blocking = self.sync(EventKind.GET_BUF, Pipe.V, event_id=3)
        assert races(program(*first, *hand, release, blocking, write)) == []
        found = races(program(*first, *hand, release, nonblocking, write))
        # ... and with the first write on its own pipe, which the released get had ordered it after too
        assert [(kind, [side[:2] for side in sides]) for kind, _, sides, _ in found] == [
            ("race_war", [("PIPE_MTE3", "Read"), ("PIPE_V", "Write")]),
            ("race_waw", [("PIPE_V", "Write"), ("PIPE_V", "Write")]),
        ]

    def test_a_non_blocking_get_buf_is_not_one_of_the_buffers_gets(self) -> None:
        """The k-th blocking get of a buffer takes its (k-1)-th release whatever non-blocking gets came between: one
        before the second blocking get neither takes the release (which would leave that get unreleased, a deadlock)
        nor is held for want of one."""
        first = [self.sync(EventKind.GET_BUF, Pipe.V, event_id=3), accesses(W, UB, 0, 256, pipe=Pipe.V)]
        hand = [*flag(Pipe.V, Pipe.MTE3), accesses(R, UB, 0, 256, pipe=Pipe.MTE3)]
        release = self.sync(EventKind.RLS_BUF, Pipe.MTE3, event_id=3)
        nonblocking = self.sync(EventKind.GET_BUF, Pipe.V, event_id=3, mode=GET_BUF_NONBLOCK)
        again = [self.sync(EventKind.GET_BUF, Pipe.V, event_id=3), accesses(W, UB, 0, 256, pipe=Pipe.V)]
        assert races(program(*first, nonblocking, *hand, release, nonblocking, *again)) == []
        assert races(program(nonblocking, nonblocking)) == []  # nothing released them, and nothing had to

    def test_ffts_mode_1_pairs_the_two_vector_sub_blocks(self) -> None:
        set_ = syncs(EventKind.CROSS_SET, Pipe.MTE3, Pipe.S, 4, mode=1)
        set_["block_num"] = 2
        wait = syncs(EventKind.CROSS_WAIT, Pipe.S, Pipe.S, 4)
        write = copy_out(gm=0x8000)
        read = accesses(R, GM, 0x8000, 256, pipe=Pipe.MTE2)
        assert races(on_block(program(write, set_, wait), 0), on_block(program(set_, wait, read), 1)) == []
        # Blocks 1 and 2 sit on different cores (their partners 0 and 3 are absent): nothing orders them.
        found = races(on_block(program(write, set_, wait), 1), on_block(program(set_, wait, read), 2))
        assert [r[0] for r in found] == ["race_raw"]

    def test_ffts_mode_4_has_its_own_flag_space(self) -> None:
        """set_intra_block releases wait_intra_block (a CROSS_WAIT in mode 4), not wait_flag_dev."""
        set_ = syncs(EventKind.CROSS_SET, Pipe.FIX, Pipe.S, 2, mode=4)
        set_["block_num"] = 1
        cube = on_block(program(accesses(W, GM, 0x8000, 256, pipe=Pipe.FIX), set_), 0, BlockType.AIC)
        intra = syncs(EventKind.CROSS_WAIT, Pipe.S, Pipe.S, 2, mode=4)
        vector = on_block(program(intra, accesses(R, GM, 0x8000, 256, pipe=Pipe.MTE2)), 0)
        vector["serial"] += 100
        assert races(cube, vector) == []
        dev_wait = syncs(EventKind.CROSS_WAIT, Pipe.S, Pipe.S, 2)
        plain = on_block(program(dev_wait, accesses(R, GM, 0x8000, 256, pipe=Pipe.MTE2)), 0)
        plain["serial"] += 100
        assert {r[0] for r in races(cube, plain)} == {"deadlock"}  # the read waits behind a wait nothing releases

    def test_soft_sync_all_over_the_blocks_taking_part(self) -> None:
        soft = self.sync(EventKind.SOFT_SYNC_ALL, address=2)
        write = copy_out(gm=0x8000)
        read = accesses(R, GM, 0x8000, 256, pipe=Pipe.MTE2)
        before = on_block(program(write, syncs(BARRIER, Pipe.ALL), soft), 0)
        after = on_block(program(soft, read), 1)
        assert races(before, after) == []
        assert [r[0] for r in races(on_block(program(write), 0), on_block(program(read), 1))] == ["race_raw"]


class TestDeadlock:
    def test_unmatched_wait(self) -> None:
        """The race before the stuck wait is still found; what comes after it is counted, not checked."""
        events = program(
            vec(0x400, 0x0), vec(0x800, 0x400),  # the race: no pipe_barrier(PIPE_V)
            syncs(WAIT, Pipe.MTE3, Pipe.MTE2, 5),  # nothing sets it
            copy_in(ub=0x800), vec(0xC00, 0x800),
        )  # fmt: skip
        found = races(events)
        assert found[0][0] == "race_raw" and found[0][2][0][2] == 1
        assert found[1] == ("deadlock", "wait_flag from PIPE_MTE3 to PIPE_MTE2 (event id 5)", {"aiv": [0]}, 2)

    @pytest.mark.parametrize(
        ("tools", "finish_mode", "deadlocks"),
        [
            (["racecheck", "synccheck"], 1, 0),  # records ended (msSanitizer's hooks): synccheck's lock-up stands
            (["racecheck", "synccheck"], 0, 1),  # the block ran to its end: a genuine deadlock
            (["racecheck"], 1, 1),  # nobody else reports it
        ],
        ids=["records-ended-with-synccheck", "ran-to-end-with-synccheck", "records-ended-alone"],
    )
    def test_a_wait_synccheck_reports_locked_up_is_not_a_deadlock_too(
        self, tools: list[str], finish_mode: int, deadlocks: int
    ) -> None:
        """A lone stuck wait_flag whose block's records ended (BLOCK_FINISH mode BLOCK_RECORDS_ENDED) is synccheck's
        lock-up when synccheck is on; racecheck stands down for that wait only, and only then."""
        events = program(
            copy_in(),
            syncs(WAIT, Pipe.MTE3, Pipe.MTE2, 5),
            make_events(kind=EventKind.BLOCK_FINISH, mode=finish_mode, block_type=BlockType.AIV),
        )
        found = races(events, detector=racecheck(tools=tools))
        assert [r[0] for r in found].count("deadlock") == deadlocks

    def test_cycle_of_waits(self) -> None:
        """V waits for MTE2's flag, which MTE2 only sets after waiting for V's: neither can move."""
        events = program(
            syncs(WAIT, Pipe.MTE2, Pipe.V, 0), syncs(SET, Pipe.V, Pipe.MTE2, 1),
            syncs(WAIT, Pipe.V, Pipe.MTE2, 1), syncs(SET, Pipe.MTE2, Pipe.V, 0),
        )  # fmt: skip
        assert {r[0] for r in races(events)} == {"deadlock"}

    def test_a_block_stuck_before_sync_all_holds_the_others(self) -> None:
        stuck = on_block(program(syncs(WAIT, Pipe.MTE3, Pipe.MTE2, 5), *sync_all()), 0)
        other = on_block(program(*sync_all(), copy_out()), 1)
        found = races(stuck, other)
        assert [r[0] for r in found] == ["deadlock", "deadlock"]
        assert "wait_flag_dev" in found[1][1] and found[1][2] == {"aiv": [1]}

    def test_wait_released_by_a_later_set_is_not_a_deadlock(self) -> None:
        """A wait issued before its set (on another pipe) just waits: no deadlock. V's read waits for the set
        after MTE2's first fill, so only MTE2's second fill races with it."""
        events = program(
            syncs(WAIT, Pipe.MTE2, Pipe.V, 0), vec(0x400, 0x0), copy_in(), syncs(SET, Pipe.MTE2, Pipe.V, 0),
            copy_in(gm=0x2000),
        )  # fmt: skip
        found = races(events)
        assert "deadlock" not in [r[0] for r in found]
        assert ("race_war", [("PIPE_V", "Read", 2, [0]), ("PIPE_MTE2", "Write", 5, [0])]) in [
            (r[0], r[2]) for r in found
        ]
        assert not any(r[2][0][2] == 3 and r[2][1][2] == 2 for r in found)  # the first fill is ordered


class TestReport:
    def test_text_and_json(self) -> None:
        events = program(copy_in(), syncs(SET, Pipe.MTE2, Pipe.V), vec(0x400, 0x0))
        events["location"] = 7
        events["pc"][events["pipe"] == Pipe.V] = 0xAD4
        (finding,) = run_kernel(racecheck(), events)
        assert render_text([finding]).splitlines() == [
            "====== ERROR: Potential RAW hazard detected at UB in add_custom:",
            "======    PIPE_MTE2 Write at RAW()+0x0 in block 0 (aiv) on device 0 at add.cpp:18 (serialNo:1)",
            "======    PIPE_V Read at RAW()+0x0 in block 0 (aiv) on device 0 at pc current 0xad4 (serialNo:3)",
            "======    #0 add.cpp:18:5",
            "",  # msSanitizer ends every report with a blank line
        ]
        assert (finding.address, finding.size, finding.serial) == (0, 256, 3)

    def test_deadlock_text(self) -> None:
        events = program(syncs(WAIT, Pipe.MTE3, Pipe.MTE2, 5), copy_in())
        events["location"] = 7
        (finding,) = run_kernel(racecheck(), events)
        assert render_text([finding]).splitlines() == [
            "====== ERROR: Deadlock: wait_flag from PIPE_MTE3 to PIPE_MTE2 (event id 5) is never released in "
            "add_custom",
            "======    in block aiv(0) on device 0",
            "======    code in add.cpp:18 (serialNo:1)",
            "======    The pipe line cannot progress: 2 instruction(s) waiting behind it were not checked for races",
            "",  # msSanitizer ends every report with a blank line
        ]


@pytest.mark.parametrize("blocks", [1, 3])
def test_no_events_no_findings(blocks: int) -> None:
    assert run_kernel(racecheck()) == []


class TestLimit:
    def test_events_past_the_limit_are_reported_unchecked(self) -> None:
        """Past --max-race-events the launch's later events are not held: an internal_error says how many, the
        races among the kept events of a block are still found, and no deadlock or cross-block race is guessed
        from the missing half."""
        detector = racecheck()
        detector.context.max_race_events = 6
        writer = on_block(program(copy_in(), syncs(SET, Pipe.MTE2, Pipe.V), vec(0x400, 0x0)), 0)
        other = on_block(program(syncs(WAIT, Pipe.MTE3, Pipe.MTE2, 5), copy_out(gm=0x1000)), 1)
        findings = run_kernel(detector, writer, other)
        assert [f.kind for f in findings] == ["race_raw", "internal_error"]
        assert "the last 2 were not checked for races" in findings[1].detail
        assert detector.held == 0  # ready for the next launch


def test_a_block_with_no_sync_event_is_still_a_block_of_the_model() -> None:
    """Blocks 0 and 1 wait at SyncAll for block 2, which only accesses memory (and so never arrives): a
    deadlock, and block 2's GM write still races with block 0's, checked against the model's tables."""
    waiting = [on_block(program(copy_out(gm=0x8000), *sync_all()), b) for b in (0, 1)]
    silent = on_block(program(copy_out(gm=0x8000)), 2)
    kinds = [r[0] for r in races(*waiting, silent)]
    assert "deadlock" in kinds and "race_waw" in kinds


class TestEveryPair:
    """Every racing pair of distinct sites, not only neighbouring ones (issue 11; msSanitizer compares each access
    with every open access of the segment, reference §2.2), folded per site pair."""

    def test_three_pipes_writing_one_ub_byte_are_three_races(self) -> None:
        events = program(
            accesses(W, UB, 0x40, 1, pipe=Pipe.M),
            accesses(W, UB, 0x40, 1, pipe=Pipe.V),
            accesses(W, UB, 0x40, 1, pipe=Pipe.MTE1),
        )
        found = races(events)
        assert sorted(found) == [
            ("race_waw", "UB", [("PIPE_M", "Write", 1, [0]), ("PIPE_MTE1", "Write", 3, [0])], 1),
            ("race_waw", "UB", [("PIPE_M", "Write", 1, [0]), ("PIPE_V", "Write", 2, [0])], 1),
            ("race_waw", "UB", [("PIPE_V", "Write", 2, [0]), ("PIPE_MTE1", "Write", 3, [0])], 1),
        ]

    def test_two_writing_blocks_and_a_reading_one_are_three_races(self) -> None:
        """Blocks 0 and 1 write one GM tile (different instructions: other branches), block 2 reads it."""
        write0 = accesses(W, GM, 0x8000, 256, pipe=Pipe.MTE3, pc=0x100)
        write1 = accesses(W, GM, 0x8000, 256, pipe=Pipe.MTE3, pc=0x200)
        read = accesses(R, GM, 0x8000, 256, pipe=Pipe.MTE2, pc=0x300)
        found = races(on_block(program(write0), 0), on_block(program(write1), 1), on_block(program(read), 2))
        assert sorted(found) == [
            ("race_raw", "GM", [("PIPE_MTE3", "Write", 1, [0]), ("PIPE_MTE2", "Read", 2001, [2])], 1),
            ("race_raw", "GM", [("PIPE_MTE3", "Write", 1001, [1]), ("PIPE_MTE2", "Read", 2001, [2])], 1),
            ("race_waw", "GM", [("PIPE_MTE3", "Write", 1, [0]), ("PIPE_MTE3", "Write", 1001, [1])], 1),
        ]

    def test_the_same_instruction_in_two_blocks_is_a_report_per_pair_of_blocks(self) -> None:
        """SPMD: blocks 0 and 1 run the same write; RAW 0/2 and RAW 1/2 are two reports, as msSanitizer prints a
        pair of accesses each in its block, so that a race between blocks reads as one."""
        write = program(accesses(W, GM, 0x8000, 256, pipe=Pipe.MTE3, pc=0x100))
        read = program(accesses(R, GM, 0x8000, 256, pipe=Pipe.MTE2, pc=0x300))
        found = races(on_block(write, 0), on_block(write, 1), on_block(read, 2))
        assert sorted(found) == [
            ("race_raw", "GM", [("PIPE_MTE3", "Write", 1, [0]), ("PIPE_MTE2", "Read", 2001, [2])], 1),
            ("race_raw", "GM", [("PIPE_MTE3", "Write", 1001, [1]), ("PIPE_MTE2", "Read", 2001, [2])], 1),
            ("race_waw", "GM", [("PIPE_MTE3", "Write", 1, [0]), ("PIPE_MTE3", "Write", 1001, [1])], 1),
        ]

    def test_race_fold_makes_the_same_instruction_in_two_blocks_one_finding(self) -> None:
        """--race-fold yes: RAW 0/2 and RAW 1/2 are one site pair, counted twice."""
        write = program(accesses(W, GM, 0x8000, 256, pipe=Pipe.MTE3, pc=0x100))
        read = program(accesses(R, GM, 0x8000, 256, pipe=Pipe.MTE2, pc=0x300))
        found = races(on_block(write, 0), on_block(write, 1), on_block(read, 2), detector=racecheck(race_fold=True))
        assert sorted(found) == [
            ("race_raw", "GM", [("PIPE_MTE3", "Write", 1, [0, 1]), ("PIPE_MTE2", "Read", 2001, [2])], 2),
            ("race_waw", "GM", [("PIPE_MTE3", "Write", 1, [0]), ("PIPE_MTE3", "Write", 1001, [1])], 1),
        ]

    def test_a_race_repeated_in_a_loop_is_one_finding(self) -> None:
        """Ten iterations of MTE2 filling a tile and V reading it with the wait missing: one RAW, counted ten
        times (and the refill's WAR with the previous read, the WAW of consecutive fills, once each)."""
        body = []
        for _ in range(10):
            body += [
                [
                    accesses(R, GM, 0x1000, 256, pipe=Pipe.MTE2, pc=0x10),
                    accesses(W, UB, 0, 256, pipe=Pipe.MTE2, pc=0x10),
                ],
                syncs(SET, Pipe.MTE2, Pipe.V),
                accesses(R, UB, 0, 256, pipe=Pipe.V, pc=0x20),
            ]
        found = races(program(*body))
        kinds = sorted(f[0] for f in found)
        assert kinds == ["race_raw", "race_war", "race_waw"]
        raw = next(f for f in found if f[0] == "race_raw")
        assert raw[2] == [("PIPE_MTE2", "Write", 1, [0]), ("PIPE_V", "Read", 3, [0])]
        assert raw[3] == 10

    def test_past_the_sites_bound_a_segment_is_cut_and_says_so(self) -> None:
        """70 instructions writing one UB tile (more than the 64 sites a segment keeps): the neighbouring races
        are still found, and an internal_error (counted as a cut) says the segment was cut."""
        writes = [accesses(W, UB, 0, 32, pipe=Pipe.V, pc=0x100 + 8 * i) for i in range(70)]
        findings = run_kernel(racecheck(), program(*writes))
        assert findings[-1].kind == "internal_error"
        assert "at most 64 instructions per memory segment; 1 segments were accessed by more (up to 70" in (
            findings[-1].detail
        )
        races_found = [f for f in findings if f.kind == "race_waw"]
        assert len(races_found) >= 69  # every neighbour at least
        assert all(f.kind != "internal_error" for f in findings[:-1])

    def test_pairs_stay_linear_when_sites_repeat(self) -> None:
        """A loop of three instructions on one tile, 3 000 times: each access meets the latest access of each
        of the three keys, so there are at most three pairs per access, not a quadratic number."""
        from sanitizerd.detectors._patterns import extents
        from sanitizerd.detectors._race_pairs import candidate_pairs

        n = 9000
        events = accesses(W, UB, np.zeros(n, dtype=np.uint64), 32, pipe=Pipe.V)
        key = np.arange(n) % 3
        write = np.ones(n, dtype=bool)
        counted: list[int] = []
        chunks = candidate_pairs(
            events, extents(events), np.arange(n), events["space"].astype(np.int64), np.zeros(n, dtype=np.int64),
            write.copy(), write, np.arange(n), key=key, instruction=np.arange(n), need_pairs=counted.append,
        )  # fmt: skip
        pairs = sum(a.size for a, _, _ in chunks)
        assert pairs <= sum(counted) <= 3 * n and pairs > 2 * n  # reserved before they were built


class TestUndefinedPipes:
    def test_events_on_an_undefined_pipe_are_left_out_and_said(self) -> None:
        """A set_flag to pipe 200, a wait on pipe 255 and an access on pipe 250 (values no chip defines: a hostile
        client's, or the compat path's 255 for a newer chip's): left out of the check, one internal_error of the
        kernel counting them, and the rest of the kernel checked as before (its RAW still found)."""
        undefined = [
            syncs(SET, Pipe.MTE2, 200),  # type: ignore[arg-type]
            syncs(WAIT, 255, Pipe.V),  # type: ignore[arg-type]
            accesses(W, UB, 0x800, 32, pipe=250),  # type: ignore[arg-type]
        ]
        events = program(copy_in(), *undefined, syncs(SET, Pipe.MTE2, Pipe.V), vec(0x400, 0x0))
        findings = run_kernel(racecheck(), events)
        [cut] = [f for f in findings if f.kind == "internal_error"]
        assert "did not check 3 events of this kernel launch whose pipe is not defined" in cut.detail
        assert [summary(f) for f in findings if f.kind != "internal_error"] == [
            ("race_raw", "UB", [("PIPE_MTE2", "Write", 1, [0]), ("PIPE_V", "Read", 6, [0])], 1)
        ]

    def test_dst_pipe_of_kinds_without_one_is_not_looked_at(self) -> None:
        """dst_pipe has no meaning on an access or a barrier: whatever it holds, they are checked."""
        events = program(copy_in(), syncs(SET, Pipe.MTE2, Pipe.V), vec(0x400, 0x0))
        events["dst_pipe"][events["kind"] != SET] = 255
        assert races(events) == [("race_raw", "UB", [("PIPE_MTE2", "Write", 1, [0]), ("PIPE_V", "Read", 3, [0])], 1)]


@pytest.mark.parametrize("seed", range(80))
def test_site_keys_number_instructions_in_order_writes_first(seed: int) -> None:
    """Kernel._site_keys is a dense rank of (read, pc, location, pipe, atomic, block) in that order: a pc or location
    that every access shares, several, or ones near 2**64."""
    from types import SimpleNamespace

    from sanitizerd.detectors._happens_before import NPIPES
    from sanitizerd.detectors.racecheck import Kernel

    rng = np.random.default_rng(seed)
    n, blocks = int(rng.integers(1, 300)), int(rng.integers(1, 5))

    def values(dtype: type, high: int) -> np.ndarray:
        how = seed % 3
        if how == 0:  # one value: a digit that costs nothing
            return np.full(n, rng.integers(0, high, dtype=dtype), dtype=dtype)
        return rng.choice(rng.integers(0, high, size=int(rng.integers(1, 6)), dtype=dtype), n)

    pc = values(np.uint64, (1 << 64) - 1 if seed % 2 else 1 << 20)
    location = values(np.uint32, (1 << 32) - 1)
    pipe = rng.integers(0, NPIPES, n).astype(np.int64)
    atomic, write = rng.random(n) < 0.3, rng.random(n) < 0.5
    mblock = rng.integers(0, blocks, n).astype(np.int64)
    kernel = SimpleNamespace(
        mem=np.arange(n), access={"pc": pc, "location": location}, atomic=atomic, write=write, pipe=pipe,
        mblock=mblock, block_keys=np.arange(blocks),
    )  # fmt: skip
    digits = [np.unique(x, return_inverse=True)[1].reshape(-1) for x in (~write, pc, location, pipe, atomic, mblock)]
    expected = np.unique(np.stack(digits, axis=1), axis=0, return_inverse=True)[1].reshape(-1)
    assert np.array_equal(Kernel._site_keys(kernel), expected)  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", range(60))
def test_pairs_from_ranges_listed_by_the_caller_are_the_same(seed: int) -> None:
    """candidate_pairs given every access's ranges (``listed``, as a proof's kernel keeps them for its footprint)
    pairs what it pairs listing them itself: unplaced accesses left out either way, accesses one range or several
    (repeats apart), in any order of ``index``."""
    from sanitizerd.detectors._patterns import extents, ranges
    from sanitizerd.detectors._race_pairs import candidate_pairs

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 120))
    write = rng.random(n) < 0.5
    repeat = np.where(rng.random(n) < 0.3, 3, 1)
    events = np.concatenate([
        accesses(W if write[i] else R, GM if rng.random() < 0.5 else UB, int(rng.integers(0, 8)) * 32,
                 int(rng.choice([32, 64])), repeat=int(repeat[i]), repeat_stride=4, pipe=Pipe.V)
        for i in range(n)
    ])  # fmt: skip
    ext = extents(events)
    index = rng.permutation(n)[: int(rng.integers(1, n + 1))]
    m = index.size
    placed = np.ones(m, dtype=bool) if seed % 3 == 0 else rng.random(m) < 0.7
    is_write = write[index]
    key = np.where(is_write, 0, 3) + rng.integers(0, 3, m)  # writes numbered below reads
    space = events["space"][index].astype(np.int64)

    def pairs(**listed: object) -> list[tuple[list[int], list[int], list[int]]]:
        chunks = candidate_pairs(
            events, ext, index, space, np.zeros(m, dtype=np.int64), placed, is_write, np.arange(m), key=key,
            instruction=np.arange(m), **listed,  # type: ignore[arg-type]
        )  # fmt: skip
        return [(a.tolist(), b.tolist(), s.segment.tolist()) for a, b, s in chunks]

    assert pairs() == pairs(listed=ranges(events, ext, index))
