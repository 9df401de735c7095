"""Multi-core stomping through memcheck (reference §2.1): two blocks of one kernel writing the same GM bytes."""

from __future__ import annotations

import itertools
from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from client_shim.events import EventKind, Space, accesses, syncs
from sanitizerd.detectors import _page_owners
from sanitizerd.detectors._intervals import IntervalSet, merge_ranges
from sanitizerd.detectors._patterns import expand, extents
from sanitizerd.detectors._stomping import _merge_by_block
from sanitizerd.detectors.base import KernelLaunch
from sanitizerd.detectors.memcheck import Memcheck
from sanitizerd.findings.model import Finding
from sanitizerd.findings.render import render_text
from sanitizerd.protocol.messages import HostOp, Location
from sanitizerd.protocol.records import BlockType
from tests.detector_helpers import make_detector, run_kernel, stream

WRITE = EventKind.WRITE
GM = 0x12C0_C000_0000


def memcheck() -> Memcheck:
    detector = make_detector("memcheck")
    assert isinstance(detector, Memcheck)
    detector.host_op(HostOp(op="malloc", address=GM, size=1 << 20))
    return detector


def kernel(detector: Memcheck, *batches: np.ndarray) -> list[Finding]:
    return run_kernel(detector, *batches, name="add_custom_kernel")


def stomps(findings: list[Finding]) -> list[tuple[int, int, dict[str, list[int]]]]:
    return [(f.address, f.size, f.blocks) for f in findings if f.kind == "out_of_bounds"]


class TestStomping:
    def test_two_blocks_write_the_same_bytes(self) -> None:
        """The second block to write bytes the first wrote is reported, with the bytes it overlapped."""
        events = stream(
            accesses(WRITE, Space.GM, GM, 256, block_id=0), accesses(WRITE, Space.GM, GM + 0xC0, 256, block_id=1)
        )
        found = kernel(memcheck(), events)
        assert stomps(found) == [(GM + 0xC0, 64, {"aiv": [1]})]
        assert found[0].severity == "warning"

    def test_one_block_rewriting_its_own_bytes_is_fine(self) -> None:
        """A block writing its own bytes again is not stomping."""
        events = stream(accesses(WRITE, Space.GM, GM, 256, block_id=3), accesses(WRITE, Space.GM, GM, 256, block_id=3))
        assert stomps(kernel(memcheck(), events)) == []

    def test_across_batches(self) -> None:
        """Ownership carries across the batches of one kernel."""
        first = stream(accesses(WRITE, Space.GM, GM, 32, block_id=0))
        second = stream(accesses(WRITE, Space.GM, GM, 32, block_id=2))
        assert stomps(kernel(memcheck(), first, second)) == [(GM, 32, {"aiv": [2]})]

    def test_reported_once(self) -> None:
        """Stomped bytes are not reported again when a third block writes them too."""
        events = stream(*(accesses(WRITE, Space.GM, GM, 64, block_id=b, pc=0x10 * (b + 1)) for b in range(3)))
        assert stomps(kernel(memcheck(), events)) == [(GM, 64, {"aiv": [1]})]

    def test_not_across_kernels(self) -> None:
        """Ownership is per kernel: another kernel's block writing the bytes is not stomping."""
        detector = memcheck()
        assert stomps(kernel(detector, stream(accesses(WRITE, Space.GM, GM, 32, block_id=0)))) == []
        assert stomps(kernel(detector, stream(accesses(WRITE, Space.GM, GM, 32, block_id=1)))) == []

    def test_on_chip_writes_are_per_block(self) -> None:
        """Each block has its own UB: the same UB address written by two blocks is not stomping."""
        events = stream(accesses(WRITE, Space.UB, 0, 32, block_id=0), accesses(WRITE, Space.UB, 0, 32, block_id=1))
        assert stomps(kernel(memcheck(), events)) == []

    def test_block_ids_do_not_alias(self) -> None:
        """Blocks 63 and 0, or 5 and 4101, are different writers (msSanitizer's 6-bit core ids alias at 63)."""
        for a, b in ((0, 63), (5, 4101), (1, 65535)):
            events = stream(
                accesses(WRITE, Space.GM, GM, 32, block_id=a), accesses(WRITE, Space.GM, GM, 32, block_id=b)
            )
            assert stomps(kernel(memcheck(), events)) == [(GM, 32, {"aiv": [b]})]

    def test_atomic_flag_exempts(self) -> None:
        """Writes made in atomic mode (the event's flag) are legitimate sharing."""
        events = stream(
            accesses(WRITE, Space.GM, GM, 32, block_id=0, atomic=True),
            accesses(WRITE, Space.GM, GM, 32, block_id=1, atomic=True),
        )
        assert stomps(kernel(memcheck(), events)) == []

    def test_set_atomic_switches_a_block(self) -> None:
        """set_atomic on exempts the block's later writes, until set_atomic off; the state carries across batches."""
        on = syncs(EventKind.SET_ATOMIC, 0, 0, block_id=1, mode=1)
        off = syncs(EventKind.SET_ATOMIC, 0, 0, block_id=1, mode=0)
        first = stream(accesses(WRITE, Space.GM, GM, 32, block_id=0), on, accesses(WRITE, Space.GM, GM, 32, block_id=1))
        second = stream(accesses(WRITE, Space.GM, GM + 32, 32, block_id=0))
        third = stream(
            accesses(WRITE, Space.GM, GM + 32, 32, block_id=1),
            off,
            accesses(WRITE, Space.GM, GM + 32, 32, block_id=1, pc=8),
        )
        assert stomps(kernel(memcheck(), first, second, third)) == [(GM + 32, 32, {"aiv": [1]})]

    def test_report_text(self) -> None:
        """The report is msSanitizer's warning block, "when writing data"."""
        events = stream(
            accesses(WRITE, Space.GM, GM, 256, block_id=0),
            accesses(WRITE, Space.GM, GM, 256, block_id=9, pc=0x7B8, location=3),
        )
        detector = memcheck()
        detector.context.locations[3] = Location(id=3, file="add_custom.cpp", line=22, column=5)
        text = render_text([f for f in kernel(detector, events) if f.kind == "out_of_bounds"])
        assert text.splitlines() == [
            "====== WARNING: out of bounds of size 256",
            f"======    at {GM:#x} on GM when writing data in add_custom_kernel",
            "======    in block aiv(9) on device 0",
            "======    code in pc current 0x7b8 (serialNo:2)",
            "======    #0 add_custom.cpp:22:5",
            "",  # msSanitizer ends every report with a blank line
        ]


@st.composite
def writes(draw: st.DrawFn) -> list[tuple[int, int, int]]:
    """Small kernels of (block, start, length) GM writes."""
    return draw(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 64), st.integers(1, 24)), min_size=1, max_size=25))


class TestAgainstAByteModel:
    @settings(max_examples=150, deadline=None, database=None)
    @given(program=writes(), cuts=st.lists(st.integers(0, 25), max_size=3))
    def test_matches_a_byte_model(self, program: list[tuple[int, int, int]], cuts: list[int]) -> None:
        """Stomped bytes per write match a byte-by-byte model that takes each batch block by block."""
        events = stream(*(accesses(WRITE, Space.GM, GM + s, n, block_id=b) for b, s, n in program))
        events["pc"] = events["serial"]  # one site per write, so nothing folds
        bounds = sorted({0, events.size, *(c for c in cuts if c <= events.size)})
        batches = [(lo, hi) for lo, hi in itertools.pairwise(bounds) if hi > lo]
        owner: dict[int, int] = {}
        stomped: set[int] = set()
        expected: dict[int, int] = {}
        for lo, hi in batches:
            for block in sorted({program[i][0] for i in range(lo, hi)}):
                mine = [i for i in range(lo, hi) if program[i][0] == block]
                before = dict(owner)
                for i in mine:
                    _, start, length = program[i]
                    foreign = {x for x in range(start, start + length) if before.get(x, block) != block} - stomped
                    if foreign:
                        expected[i + 1] = len(foreign)
                for i in mine:
                    _, start, length = program[i]
                    for x in range(start, start + length):
                        if x in stomped:
                            continue
                        if before.get(x, block) != block:
                            stomped.add(x)
                            owner.pop(x, None)
                        else:
                            owner[x] = block
        found = kernel(memcheck(), *(events[lo:hi] for lo, hi in batches))
        assert {f.serial: f.size for f in found if f.kind == "out_of_bounds"} == expected


# --- issue 13: the batch-wide path (writes merged per block) against a byte model, on wider streams ------------

PAGE = 4096


@st.composite
def kernels(draw: st.DrawFn) -> tuple[list[tuple[int, int]], list[list[tuple[int, ...]]]]:
    """Allocations (start page, pages) in a 4-page window, and 1-3 kernels of strided GM writes
    (block type, block, start, block size, block num, block stride, repeat, repeat stride, atomic), which often
    meet in one page at different bytes, cross page ends, and leave their blocks out of address order."""
    allocations = draw(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 2)), min_size=1, max_size=3))
    write = st.tuples(
        st.sampled_from([0, 0, 0, 1]),
        st.sampled_from([0, 1, 2, 63, 4101]),
        st.integers(0, 4 * PAGE),
        st.sampled_from([1, 7, 32, 96, 512, 1500]),
        st.integers(1, 3),
        st.integers(0, 3),
        st.integers(1, 2),
        st.integers(0, 4),
        st.sampled_from([False, False, False, False, True]),
    )
    return allocations, draw(st.lists(st.lists(write, min_size=1, max_size=30), min_size=1, max_size=3))


def expected_stomps(
    events: np.ndarray, batches: list[tuple[int, int]], legal: IntervalSet
) -> dict[int, tuple[int, int]]:
    """serial -> (address, bytes stomped) by a byte model: each batch block by block in block order, a write's
    pieces (those sharing a byte with legal GM) checked against the owners before its block's turn."""
    owner: dict[int, int] = {}
    stomped: set[int] = set()
    expected: dict[int, tuple[int, int]] = {}
    for lo, hi in batches:
        batch = events[lo:hi]
        ext = extents(batch)
        keep = (batch["kind"] == WRITE) & (batch["space"] == Space.GM) & (ext > 0) & ((batch["flags"] & 1) == 0)
        index = np.flatnonzero(keep)
        piece_owner, starts, stops = expand(batch[index], ext[index])
        touches = legal.covered(starts, stops) > 0
        pieces: dict[int, list[tuple[int, int]]] = {}
        for row, start, stop in zip(piece_owner[touches].tolist(), starts[touches].tolist(), stops[touches].tolist(),
                                    strict=True):  # fmt: skip
            pieces.setdefault(int(index[row]), []).append((start, stop))
        key = {i: (int(batch["block_type"][i]) & 3, int(batch["block_id"][i])) for i in pieces}
        for block in sorted(set(key.values())):
            mine = [i for i in sorted(pieces) if key[i] == block]
            before = dict(owner)
            for i in mine:
                hits = []
                for start, stop in sorted(pieces[i]):
                    foreign = {x for x in range(start, stop) if before.get(x, block) != block} - stomped
                    if foreign:
                        hits.append((start, len(foreign)))
                if hits:
                    expected[int(batch["serial"][i])] = (hits[0][0], sum(n for _, n in hits))
            for i in mine:
                for start, stop in pieces[i]:
                    for x in range(start, stop):
                        if x in stomped:
                            continue
                        if before.get(x, block) != block:
                            stomped.add(x)
                            owner.pop(x, None)
                        else:
                            owner[x] = block
    return expected


class TestBatchWidePathAgainstAByteModel:
    @settings(max_examples=120, deadline=None, database=None)
    @given(program=kernels(), cuts=st.lists(st.integers(0, 30), max_size=4))
    def test_kernels_with_frees_between(
        self, program: tuple[list[tuple[int, int]], list[list[tuple[int, ...]]]], cuts: list[int]
    ) -> None:
        """Stomping reports (address and bytes per write) match the byte model over several kernels, with the
        heap changing between them (a buffer freed, another allocated in its place)."""
        allocations, launches = program
        detector = make_detector("memcheck")
        assert isinstance(detector, Memcheck)
        held: list[int] = []
        for launch, writes_ in enumerate(launches):
            if held:  # free the oldest buffer, allocate the next one: the legal GM changes between kernels
                detector.host_op(HostOp(op="free", address=held.pop(0)))
            for page, pages in allocations[launch:] + allocations[:launch]:
                address = GM + page * PAGE
                if address not in held:
                    detector.host_op(HostOp(op="malloc", address=address, size=pages * PAGE))
                    held.append(address)
            parts = [
                accesses(WRITE, Space.GM, GM + start, size, block_type=BlockType(kind), block_id=block,
                         block_num=num, block_stride=stride, repeat=repeat, repeat_stride=r_stride, atomic=atomic)
                for kind, block, start, size, num, stride, repeat, r_stride, atomic in writes_
            ]  # fmt: skip
            events = stream(*parts)
            events["pc"] = events["serial"]  # one site per write, so nothing folds
            bounds = sorted({0, events.size, *(c for c in cuts if c <= events.size)})
            batches = [(lo, hi) for lo, hi in itertools.pairwise(bounds) if hi > lo]
            legal = IntervalSet(detector.heap.legal.starts.copy(), detector.heap.legal.ends.copy())
            expected = expected_stomps(events, batches, legal)
            found = kernel(detector, *(events[lo:hi] for lo, hi in batches))
            assert {f.serial: (f.address, f.size) for f in found if f.kind == "out_of_bounds"} == expected

    def test_a_block_streaming_through_pages_another_block_shares(self) -> None:
        """Eight blocks stream 512-byte tiles interleaved (each owns every eighth tile, so every page is shared)
        over many batches; one late write crosses into its neighbour's tile by 32 bytes, and only that is told."""
        tiles = 8 * 64
        block = np.arange(tiles) % 8
        events = stream(*(accesses(WRITE, Space.GM, GM + t * 512, 32, block_num=16, block_id=int(b))
                          for t, b in enumerate(block.tolist())),
                        accesses(WRITE, Space.GM, GM + 3 * 512 + 480, 64, block_id=3))  # fmt: skip
        batches = [(lo, min(lo + 100, events.size)) for lo in range(0, events.size, 100)]
        legal = IntervalSet(np.array([GM], np.uint64), np.array([GM + (1 << 20)], np.uint64))
        expected = expected_stomps(events, batches, legal)
        assert expected == {tiles + 1: (GM + 3 * 512 + 480, 32)}  # reported at the write's start, as msSanitizer
        found = kernel(memcheck(), *(events[lo:hi] for lo, hi in batches))
        assert {f.serial: (f.address, f.size) for f in found if f.kind == "out_of_bounds"} == expected

    def test_ownership_past_the_small_set_stays_exact(self) -> None:
        """Eight blocks take 32-byte tiles in turn until each owns 700 separate ranges (owned_by past the size
        where fresh claims are folded at once, so the last batch's claims wait in its pending level); then, in a
        batch of their own, writes reach into tiles claimed long ago and in the batch before."""
        tiles = 8 * 700
        parts = [accesses(WRITE, Space.GM, GM + t * 32, 32, block_id=t % 8) for t in range(tiles)]
        parts += [
            accesses(WRITE, Space.GM, GM + 10 * 32 + 16, 32, block_id=3),  # into block 2's tile 10 and 3's 11
            accesses(WRITE, Space.GM, GM + (tiles - 900) * 32, 64, block_id=5),  # tiles folded in long ago
            accesses(WRITE, Space.GM, GM + (tiles - 3) * 32 + 8, 8, block_id=0),  # a tile still pending
        ]
        events = stream(*parts)
        events["pc"] = events["serial"]
        batches = [(lo, min(lo + 1000, tiles)) for lo in range(0, tiles, 1000)] + [(tiles, events.size)]
        legal = IntervalSet(np.array([GM], np.uint64), np.array([GM + (1 << 20)], np.uint64))
        expected = expected_stomps(events, batches, legal)
        assert set(expected) == {tiles + 1, tiles + 2, tiles + 3}
        detector = memcheck()
        detector.kernel_begin(KernelLaunch(kernel=1, name="add_custom_kernel", block_dim=8, kernel_type="aiv"))
        for lo, hi in batches[:-1]:
            detector.check(events[lo:hi])
        assert len(detector.stomping.owned_by._pending_starts) == 600  # the last batch's claims, not folded yet
        detector.check(events[tiles:])
        found = detector.kernel_end()
        assert {f.serial: (f.address, f.size) for f in found if f.kind == "out_of_bounds"} == expected


class TestPageOwners:
    """The page table: writes in pages only their own block has written are logged, not looked up; a page a
    second block writes turns shared, and its logged claims move into the owner sets before it is checked."""

    @pytest.mark.parametrize("shift", [8, 12])
    @settings(max_examples=60, deadline=None, database=None)
    @given(program=kernels(), cuts=st.lists(st.integers(0, 30), max_size=4))
    def test_small_pages_match_the_byte_model(
        self, shift: int, program: tuple[list[tuple[int, int]], list[list[tuple[int, ...]]]], cuts: list[int]
    ) -> None:
        """Pages of 256 B and 4 KiB instead of 64 KiB: the properties' 16 KiB window then holds many pages,
        some one block's, some turning shared mid-kernel."""
        with patch.object(_page_owners, "PAGE_SHIFT", shift):
            TestBatchWidePathAgainstAByteModel.test_kernels_with_frees_between.hypothesis.inner_test(  # type: ignore[attr-defined]
                self, program, cuts
            )

    def test_past_its_bound_the_table_gives_up_and_nothing_is_missed(self) -> None:
        """A page table of 4 pages: block 0's first batch is logged; its second passes the bound, so the log moves
        into the owner sets and every later write is looked up; block 1 stomping on block 0's first bytes is told."""
        parts = [accesses(WRITE, Space.GM, GM + t * 1024, 1024, block_id=0) for t in range(64)]  # one page
        parts += [accesses(WRITE, Space.GM, GM + (1 << 16) + t * (1 << 16), 64, block_id=0) for t in range(8)]
        parts.append(accesses(WRITE, Space.GM, GM + 100, 8, block_id=1))
        events = stream(*parts)
        detector = memcheck()
        detector.kernel_begin(KernelLaunch(kernel=1, name="add_custom_kernel", block_dim=8, kernel_type="aiv"))
        with patch.object(_page_owners, "MAX_PAGES", 4):
            detector.check(events[:64])
            assert detector.stomping._logged > 0
            detector.check(events[64:72])
            assert detector.stomping.pages is None and detector.stomping._logged == 0
            detector.check(events[72:])
        found = detector.kernel_end()
        assert [(f.serial, f.address, f.size) for f in found if f.kind == "out_of_bounds"] == [(73, GM + 100, 8)]

    def test_a_late_write_into_another_blocks_page_is_told_exactly(self) -> None:
        """Eight blocks stream through 64 KiB pages of their own (their claims only logged); then block 5 writes
        48 bytes from the last 16 of block 2's region into block 3's, in a batch of its own: both pages turn shared,
        and all 48 bytes are told."""
        region = 1 << 16
        parts = [accesses(WRITE, Space.GM, GM + b * region + t * 1024, 1024, block_id=b)
                 for t in range(64) for b in range(8)]  # fmt: skip
        parts.append(accesses(WRITE, Space.GM, GM + 3 * region - 16, 48, block_id=5))
        events = stream(*parts)
        events["pc"] = events["serial"]
        tiles = 8 * 64
        batches = [(lo, min(lo + 128, tiles)) for lo in range(0, tiles, 128)] + [(tiles, events.size)]
        legal = IntervalSet(np.array([GM], np.uint64), np.array([GM + (1 << 20)], np.uint64))
        expected = expected_stomps(events, batches, legal)
        assert expected == {tiles + 1: (GM + 3 * region - 16, 48)}
        detector = memcheck()
        detector.kernel_begin(KernelLaunch(kernel=1, name="add_custom_kernel", block_dim=8, kernel_type="aiv"))
        for lo, hi in batches[:-1]:
            detector.check(events[lo:hi])
        assert len(detector.stomping.owned_by) == 0 and detector.stomping._logged > 0  # nothing looked up yet
        detector.check(events[tiles:])
        found = detector.kernel_end()
        assert {f.serial: (f.address, f.size) for f in found if f.kind == "out_of_bounds"} == expected


class TestMergeByBlock:
    @settings(max_examples=200, deadline=None, database=None)
    @given(
        pieces=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 200), st.integers(0, 40)), min_size=1),
        wide=st.booleans(),
    )
    def test_matches_merging_each_block_alone(self, pieces: list[tuple[int, int, int]], wide: bool) -> None:
        """Per block, the union of its pieces, in block then address order, in order or not, keys of 16 bits or
        more."""
        keys = np.array([k + (70000 if wide else 0) for k, _, _ in pieces], np.uint64)
        start = np.array([GM + s for _, s, _ in pieces], np.uint64)
        stop = start + np.array([n for _, _, n in pieces], np.uint64)
        got = _merge_by_block(keys, start, stop)
        want: list[tuple[int, int, int]] = []
        for key in sorted(set(keys.tolist())):
            lo, hi = merge_ranges(start[keys == key], stop[keys == key])
            want += [(key, a, b) for a, b in zip(lo.tolist(), hi.tolist(), strict=True)]
        assert list(zip(*(g.tolist() for g in got), strict=True)) == want

    @settings(max_examples=200, deadline=None, database=None)
    @given(
        runs=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3), st.integers(1, 40)), min_size=1, max_size=60),
    )
    def test_blocks_streaming_in_address_order(self, runs: list[tuple[int, int, int]]) -> None:
        """Blocks interleaved, each writing pieces in address order that touch or leave gaps (the one-pass path)."""
        reach: dict[int, int] = {}
        keys, start, stop = [], [], []
        for key, gap, length in runs:
            at = reach.get(key, key * 10_000) + gap
            keys.append(key)
            start.append(GM + at)
            stop.append(GM + at + length)
            reach[key] = at + length
        k, lo, hi = (np.array(x, np.uint64) for x in (keys, start, stop))
        got = _merge_by_block(k, lo, hi)
        want: list[tuple[int, int, int]] = []
        for key in sorted(set(keys)):
            a, b = merge_ranges(lo[k == key], hi[k == key])
            want += [(key, x, y) for x, y in zip(a.tolist(), b.tolist(), strict=True)]
        assert list(zip(*(g.tolist() for g in got), strict=True)) == want

    def test_more_blocks_than_fifteen_bits(self) -> None:
        """40 000 blocks in one batch (past the packed form's 2**15) are merged 2**15 at a time."""
        keys = np.repeat(np.arange(40_000, dtype=np.uint64), 2)
        start = GM + np.arange(80_000, dtype=np.uint64) * 8
        got = _merge_by_block(keys[::-1].copy(), start[::-1].copy(), start[::-1] + np.uint64(8))
        assert got[0].tolist() == list(range(40_000))
        assert got[1].tolist() == start[::2].tolist() and got[2].tolist() == (start[::2] + np.uint64(16)).tolist()
