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
from sanitizerd.detectors._intervals import merge_ranges
from sanitizerd.detectors._stomping import StompTracker, _first_cover, _merge_by_block
from sanitizerd.detectors.base import KernelLaunch
from sanitizerd.detectors.memcheck import Memcheck
from sanitizerd.findings.render import render_text
from sanitizerd_protocol.messages import HostOp, Location
from sanitizerd_protocol.model import Finding
from sanitizerd_protocol.records import BlockType
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


# --- msSanitizer's rule, a byte at a time ------------------------------------------------------------------------


class ShadowModel:
    """msSanitizer's GM shadow as stomping uses it (csrc/address_sanitizer/shadow_memory.cpp, StoreNBytesInRange),
    written from the rule: per byte an owner (none, core 63, at first) and a state that turns ERROR when stomped. A
    store skips ERROR bytes; takes a byte nobody owns, in atomic mode or not; changes nothing on its own bytes; and
    on another block's byte, unless in atomic mode, makes it ERROR and counts it. The count is the store's report.
    Owners are (block type, block id), as sanitizerd keeps them, not msSanitizer's 6-bit core ids."""

    def __init__(self) -> None:
        self.owner: dict[int, tuple[int, int]] = {}
        self.error: set[int] = set()
        self.atomic: dict[tuple[int, int], bool] = {}  # block -> its SET_ATOMIC state

    def store(self, block: tuple[int, int], start: int, stop: int, atomic: bool) -> int:
        stomped = 0
        for byte in range(start, stop):
            if byte in self.error:
                continue
            owner = self.owner.get(byte)
            if owner is None:
                self.owner[byte] = block
            elif owner != block and not atomic:
                self.error.add(byte)
                stomped += 1
        return stomped


def records_of(event: np.void) -> list[tuple[int, int]]:
    """msSanitizer's flattening of a strided access into store records (reference §1.7): with a block stride of at
    most 1, a row per repeat (``block_num`` blocks, or one for stride 0), one record for all when the rows touch
    or overlap; otherwise a record per block, block i of repeat r at
    ``address + (r * repeat_stride + i * block_stride) * block_size`` (its special cases for repeat stride 1, which
    can cover bytes the access does not, left out)."""
    address, size, num = int(event["address"]), int(event["block_size"]), int(event["block_num"])
    stride, repeat, repeat_stride = int(event["block_stride"]), int(event["repeat"]), int(event["repeat_stride"])
    if not size or not repeat:
        return []
    if stride <= 1 or num <= 1:
        row = size * num if stride == 1 and num > 1 else size
        if repeat_stride * size <= row:
            return [(address, address + (repeat - 1) * repeat_stride * size + row)]
        return [(address + r * repeat_stride * size, address + r * repeat_stride * size + row) for r in range(repeat)]
    return [
        (start, start + size)
        for r in range(repeat)
        for i in range(num)
        for start in [address + (r * repeat_stride + i * stride) * size]
    ]


def runs_of(pieces: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """A write's bytes as msSanitizer's merged store records: maximal contiguous runs, in address order."""
    runs: list[list[int]] = []
    for start, stop in sorted(pieces):
        if runs and start <= runs[-1][1]:
            runs[-1][1] = max(runs[-1][1], stop)
        else:
            runs.append([start, stop])
    return [(a, b) for a, b in runs]


def model_stomps(
    events: np.ndarray, batches: list[tuple[int, int]], legal: list[tuple[int, int]], shadow: ShadowModel | None = None
) -> dict[tuple[int, int], int]:
    """(serial, run start) -> bytes stomped, for one kernel: each batch's blocks in block order (msSanitizer walks
    one block's buffer, then the next), each block's events in order; SET_ATOMIC switches its block, an event's
    atomic flag its own write. Records wholly outside ``legal`` GM are illegal writes and own nothing (sanitizerd's
    choice, docs/mssanitizer-compat.md)."""
    shadow = shadow or ShadowModel()
    found: dict[tuple[int, int], int] = {}
    for lo, hi in batches:
        batch = events[lo:hi]
        blocks = sorted({(int(e["block_type"]) & 3, int(e["block_id"])) for e in batch})
        for block in blocks:
            for e in batch:
                if (int(e["block_type"]) & 3, int(e["block_id"])) != block:
                    continue
                if e["kind"] == EventKind.SET_ATOMIC:
                    shadow.atomic[block] = bool(e["mode"])
                    continue
                if e["kind"] != WRITE or e["space"] != Space.GM:
                    continue
                atomic = bool(e["flags"] & 1) or shadow.atomic.get(block, False)
                kept = [(a, b) for a, b in records_of(e) if any(a < end and start < b for start, end in legal)]
                for start, stop in runs_of(kept):
                    stomped = shadow.store(block, start, stop, atomic)
                    if stomped:
                        found[(int(e["serial"]), start)] = stomped
    return found


def found_stomps(findings: list[Finding]) -> dict[tuple[int, int], int]:
    return {(f.serial, f.address): f.size for f in findings if f.kind == "out_of_bounds"}


@st.composite
def writes(draw: st.DrawFn) -> list[tuple[int, int, int]]:
    """Small kernels of (block, start, length) GM writes."""
    return draw(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 64), st.integers(1, 24)), min_size=1, max_size=25))


class TestAgainstAByteModel:
    @settings(max_examples=150, deadline=None, database=None)
    @given(program=writes(), cuts=st.lists(st.integers(0, 25), max_size=3))
    def test_matches_a_byte_model(self, program: list[tuple[int, int, int]], cuts: list[int]) -> None:
        """Stomped bytes per write match msSanitizer's rule a byte at a time, the kernel cut into batches."""
        events = stream(*(accesses(WRITE, Space.GM, GM + s, n, block_id=b) for b, s, n in program))
        events["pc"] = events["serial"]  # one site per write, so nothing folds
        bounds = sorted({0, events.size, *(c for c in cuts if c <= events.size)})
        batches = [(lo, hi) for lo, hi in itertools.pairwise(bounds) if hi > lo]
        expected = model_stomps(events, batches, [(GM, GM + (1 << 20))])
        found = kernel(memcheck(), *(events[lo:hi] for lo, hi in batches))
        assert found_stomps(found) == expected


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
            legal = list(zip(detector.heap.legal.starts.tolist(), detector.heap.legal.ends.tolist(), strict=True))
            expected = model_stomps(events, batches, legal)
            found = kernel(detector, *(events[lo:hi] for lo, hi in batches))
            assert found_stomps(found) == expected

    def test_a_block_streaming_through_pages_another_block_shares(self) -> None:
        """Eight blocks stream 512-byte tiles interleaved (each owns every eighth tile, so every page is shared)
        over many batches; one late write crosses into its neighbour's tile by 32 bytes, and only that is told."""
        tiles = 8 * 64
        block = np.arange(tiles) % 8
        events = stream(*(accesses(WRITE, Space.GM, GM + t * 512, 32, block_num=16, block_id=int(b))
                          for t, b in enumerate(block.tolist())),
                        accesses(WRITE, Space.GM, GM + 3 * 512 + 480, 64, block_id=3))  # fmt: skip
        batches = [(lo, min(lo + 100, events.size)) for lo in range(0, events.size, 100)]
        expected = model_stomps(events, batches, [(GM, GM + (1 << 20))])
        assert expected == {(tiles + 1, GM + 3 * 512 + 480): 32}  # reported at the write's start, as msSanitizer
        found = kernel(memcheck(), *(events[lo:hi] for lo, hi in batches))
        assert found_stomps(found) == expected

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
        expected = model_stomps(events, batches, [(GM, GM + (1 << 20))])
        assert {serial for serial, _ in expected} == {tiles + 1, tiles + 2, tiles + 3}
        detector = memcheck()
        detector.kernel_begin(KernelLaunch(kernel=1, name="add_custom_kernel", block_dim=8, kernel_type="aiv"))
        for lo, hi in batches[:-1]:
            detector.check(events[lo:hi])
        assert len(detector.stomping.owned_by._pending_starts) == 600  # the last batch's claims, not folded yet
        detector.check(events[tiles:])
        found = detector.kernel_end()
        assert found_stomps(found) == expected


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
        expected = model_stomps(events, batches, [(GM, GM + (1 << 20))])
        assert expected == {(tiles + 1, GM + 3 * region - 16): 48}
        detector = memcheck()
        detector.kernel_begin(KernelLaunch(kernel=1, name="add_custom_kernel", block_dim=8, kernel_type="aiv"))
        for lo, hi in batches[:-1]:
            detector.check(events[lo:hi])
        assert len(detector.stomping.owned_by) == 0 and detector.stomping._logged > 0  # nothing looked up yet
        detector.check(events[tiles:])
        found = detector.kernel_end()
        assert found_stomps(found) == expected


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


# --- issue 26: msSanitizer's ownership semantics (an atomic write claims; a stomped byte is told once) -------------


def set_atomic(block: int, on: bool) -> np.ndarray:
    return syncs(EventKind.SET_ATOMIC, 0, 0, block_id=block, mode=int(on))


class TestMsSanitizerOwnership:
    def test_an_atomic_write_claims_bytes_nobody_owns(self) -> None:
        """msSanitizer's case of 9 stomped bytes where sanitizerd told 1: block 0 adds 9 bytes atomically (the
        event's flag), then block 1 writes them plainly, with one byte more of its own: 9 bytes stomped."""
        events = stream(
            accesses(WRITE, Space.GM, GM, 9, block_id=0, atomic=True),
            accesses(WRITE, Space.GM, GM, 10, block_id=1),
        )
        assert found_stomps(kernel(memcheck(), events)) == {(2, GM): 9}

    def test_set_atomic_claims_too_across_batches(self) -> None:
        """The same through SET_ATOMIC on block 0's side, the plain write in a later batch."""
        first = stream(set_atomic(0, True), accesses(WRITE, Space.GM, GM, 9, block_id=0), set_atomic(0, False))
        second = stream(accesses(WRITE, Space.GM, GM, 9, block_id=1))
        assert found_stomps(kernel(memcheck(), first, second)) == {(1, GM): 9}

    def test_an_atomic_write_over_another_blocks_bytes_changes_nothing(self) -> None:
        """Block 1 adds atomically into block 0's bytes: no stomping, and the bytes stay block 0's, so block 0
        writes them again freely and block 2's plain write stomps them (reported against block 2 only)."""
        events = stream(
            accesses(WRITE, Space.GM, GM, 32, block_id=0),
            accesses(WRITE, Space.GM, GM, 32, block_id=1, atomic=True),
        )
        later = stream(
            accesses(WRITE, Space.GM, GM, 32, block_id=0, pc=4), accesses(WRITE, Space.GM, GM, 32, block_id=2, pc=8)
        )
        later["serial"] += events.size
        found = kernel(memcheck(), events, later)
        assert [(f.serial, f.size, f.blocks) for f in found if f.kind == "out_of_bounds"] == [(4, 32, {"aiv": [2]})]

    def test_blocks_adding_into_one_output_are_not_stomping(self) -> None:
        """Every block adds its partial sums into one output in atomic mode, batch after batch: nothing told."""
        batches = [
            stream(
                *(
                    part
                    for b in range(8)
                    for part in (set_atomic(b, True), accesses(WRITE, Space.GM, GM, 4096, block_id=b))
                )
            )
            for _ in range(3)
        ]
        assert found_stomps(kernel(memcheck(), *batches)) == {}

    def test_blocks_adding_into_fresh_tiles_settle_batch_wide(self) -> None:
        """Blocks 3, 1 and 2 add into the same fresh tiles in one batch (in pages they share): each byte goes to the
        first block in block order to write it, with no block-by-block pass; so block 1 writes the tiles again
        freely, while block 2's plain write of them, and block 1's over the bytes only block 3 added, stomp."""
        tile = [
            accesses(WRITE, Space.GM, GM + t * 64, 64, block_id=b, atomic=True) for t in range(8) for b in (3, 1, 2)
        ]
        tile.append(accesses(WRITE, Space.GM, GM + 512, 32, block_id=3, atomic=True))  # only block 3's
        first = stream(*tile)
        later = stream(
            accesses(WRITE, Space.GM, GM, 512, block_id=1, pc=4),
            accesses(WRITE, Space.GM, GM, 64, block_id=2, pc=8),
            accesses(WRITE, Space.GM, GM + 448, 96, block_id=1, pc=12),
        )
        later["serial"] += first.size
        detector = memcheck()
        with patch.object(StompTracker, "_block_writes", side_effect=AssertionError("block path")):
            detector.kernel_begin(KernelLaunch(kernel=1, name="add_custom_kernel", block_dim=8, kernel_type="aiv"))
            detector.check(first)
        detector.check(later)
        assert found_stomps(detector.kernel_end()) == {(first.size + 2, GM): 64, (first.size + 3, GM + 448): 32}

    def test_atomic_writes_partly_over_owned_bytes_claim_the_rest(self) -> None:
        """Blocks 2 and 1 add atomically into bytes block 0 owns and past them, in one batch: the rest goes to block
        1 (first in block order), with no block-by-block pass; block 0's bytes stay its own."""
        first = stream(accesses(WRITE, Space.GM, GM, 64, block_id=0))
        adds = stream(*(accesses(WRITE, Space.GM, GM + 32, 96, block_id=b, atomic=True) for b in (2, 1)))
        later = stream(
            accesses(WRITE, Space.GM, GM, 64, block_id=0, pc=4),
            accesses(WRITE, Space.GM, GM + 64, 64, block_id=1, pc=8),
            accesses(WRITE, Space.GM, GM + 32, 64, block_id=2, pc=12),
        )
        adds["serial"] += first.size
        later["serial"] += first.size + adds.size
        detector = memcheck()
        detector.kernel_begin(KernelLaunch(kernel=1, name="add_custom_kernel", block_dim=8, kernel_type="aiv"))
        detector.check(first)
        with patch.object(StompTracker, "_block_writes", side_effect=AssertionError("block path")):
            detector.check(adds)
        detector.check(later)
        assert found_stomps(detector.kernel_end()) == {(6, GM + 32): 64}

    def test_a_block_rewriting_bytes_it_stomped_is_told_once(self) -> None:
        """msSanitizer marks stomped bytes ERROR and skips them: block 1's second write of block 0's bytes, in
        the same batch or the next, is not reported again (sanitizerd told 2 where msSanitizer tells 1)."""
        events = stream(
            accesses(WRITE, Space.GM, GM, 64, block_id=0),
            accesses(WRITE, Space.GM, GM, 64, block_id=1, pc=0x10),
            accesses(WRITE, Space.GM, GM, 64, block_id=1, pc=0x20),
        )
        assert found_stomps(kernel(memcheck(), events)) == {(2, GM): 64}
        again = stream(accesses(WRITE, Space.GM, GM, 64, block_id=1, pc=0x30))
        assert found_stomps(kernel(memcheck(), events, again)) == {(2, GM): 64}

    def test_overlapping_repeats_count_each_byte_once(self) -> None:
        """One write whose repeats overlap (8 x 4 bytes, repeat stride 7 blocks: [0, 32) and [28, 60)) over block
        0's bytes: 60 bytes stomped, one record as msSanitizer merges it (sanitizerd told 64)."""
        events = stream(
            accesses(WRITE, Space.GM, GM, 64, block_id=0),
            accesses(WRITE, Space.GM, GM, 4, block_num=8, repeat=2, repeat_stride=7, block_id=1),
        )
        assert found_stomps(kernel(memcheck(), events)) == {(2, GM): 60}

    def test_a_write_with_gaps_is_told_per_record(self) -> None:
        """A DataCopy of 4 bursts of 64 bytes with 64-byte gaps over block 0's 512 bytes: msSanitizer flattens
        it into one store record per burst, and each stomps at its own address."""
        events = stream(
            accesses(WRITE, Space.GM, GM, 512, block_id=0),
            accesses(WRITE, Space.GM, GM, 32, block_num=2, repeat=4, repeat_stride=4, block_id=1),
        )
        assert found_stomps(kernel(memcheck(), events)) == {(2, GM + k * 128): 64 for k in range(4)}

    def test_blocks_telling_the_same_record_fold_into_one_report(self) -> None:
        """msSanitizer's ErrorBuffer keys a report without the core id, block type and serial: blocks 1 and 2 each
        stomping 32 new bytes from the same address at the same pc are one report, aiv(1-2), at the smaller
        serial; block 3 stomping 32 bytes elsewhere at that pc is another."""
        events = stream(
            accesses(WRITE, Space.GM, GM + 32, 32, block_id=0),
            accesses(WRITE, Space.GM, GM + 128, 32, block_id=0),
            accesses(WRITE, Space.GM, GM, 64, block_id=1, pc=0x40),  # [0, 32) its own, [32, 64) stomped
            accesses(WRITE, Space.GM, GM, 96, block_id=2, pc=0x40),  # [0, 32) block 1's: 32 new, then ERROR, then own
            accesses(WRITE, Space.GM, GM + 96, 64, block_id=3, pc=0x40),  # [128, 160) block 0's
        )
        found = [f for f in kernel(memcheck(), events) if f.kind == "out_of_bounds"]
        assert [(f.address, f.size, f.blocks, f.serial) for f in found] == [
            (GM, 32, {"aiv": [1, 2]}, 3),
            (GM + 96, 32, {"aiv": [3]}, 5),
        ]
        assert "in block aiv(1-2) on device 0" in render_text(found[:1])


def random_kernel(rng: np.random.Generator, window: int) -> np.ndarray:
    """A kernel's events: 3-4 blocks (one a cube block, ids past 63) writing strided patterns into a small window,
    reads between, atomic flags and SET_ATOMIC on and off."""
    blocks = [(BlockType.AIV, 0), (BlockType.AIV, 1), (BlockType.AIC, 1), (BlockType.AIV, 4101)][: rng.integers(3, 5)]
    parts = []
    for _ in range(int(rng.integers(10, 60))):
        block_type, block = blocks[rng.integers(len(blocks))]
        roll = rng.random()
        if roll < 0.1:
            parts.append(
                syncs(EventKind.SET_ATOMIC, 0, 0, block_id=block, block_type=block_type, mode=int(rng.random() < 0.5))
            )
            continue
        kind = EventKind.READ if roll < 0.2 else WRITE
        parts.append(
            accesses(
                kind, Space.GM, GM + int(rng.integers(0, window)), int(rng.choice([1, 3, 8, 32, 64])),
                block_num=int(rng.integers(1, 4)), block_stride=int(rng.integers(0, 4)), repeat=int(rng.integers(1, 4)),
                repeat_stride=int(rng.integers(0, 5)), block_id=block, block_type=block_type,
                atomic=bool(rng.random() < 0.15),
            )
        )  # fmt: skip
    events = stream(*parts)
    events["pc"] = events["serial"]  # one site per write, so nothing folds
    return events


class TestRandomKernelsAgainstMsSanitizersRule:
    @pytest.mark.parametrize("seed", range(12))
    def test_seed(self, seed: int) -> None:
        """Random kernels (blocks, atomic modes by flag and by SET_ATOMIC, repeats and strides, batches cut
        anywhere, two kernels per session, a heap with a hole) against the byte model: the same reports, each at
        the same address with the same bytes. Every other seed with 256-byte pages, so that pages turn shared."""
        rng = np.random.default_rng(seed)
        detector = make_detector("memcheck")
        assert isinstance(detector, Memcheck)
        detector.host_op(HostOp(op="malloc", address=GM, size=1536))
        detector.host_op(HostOp(op="malloc", address=GM + 1600, size=1024))
        legal = [(GM, GM + 1536), (GM + 1600, GM + 2624)]
        with patch.object(_page_owners, "PAGE_SHIFT", 8 if seed % 2 else _page_owners.PAGE_SHIFT):
            for _ in range(2):
                events = random_kernel(rng, 2600)
                cuts = sorted({0, events.size, *rng.integers(0, events.size, int(rng.integers(0, 4))).tolist()})
                batches = [(lo, hi) for lo, hi in itertools.pairwise(cuts) if hi > lo]
                expected = model_stomps(events, batches, legal)
                assert found_stomps(kernel(detector, *(events[lo:hi] for lo, hi in batches))) == expected


class TestFirstCover:
    @settings(max_examples=200, deadline=None, database=None)
    @given(spans=st.lists(st.tuples(st.integers(0, 50), st.integers(0, 40), st.integers(0, 12)), max_size=30))
    def test_matches_a_scan(self, spans: list[tuple[int, int, int]]) -> None:
        """The smallest rank covering each segment, against a scan of every span."""
        segments = 45
        rank = np.array([r for r, _, _ in spans], dtype=np.int64)
        first = np.array([min(a, segments) for _, a, _ in spans], dtype=np.int64)
        last = np.array([min(a + n, segments) for _, a, n in spans], dtype=np.int64)
        none = np.iinfo(np.int64).max
        spans_ = list(zip(rank.tolist(), first.tolist(), last.tolist(), strict=True))
        want = [min((r for r, a, b in spans_ if a <= j < b), default=none) for j in range(segments)]
        assert _first_cover(rank, first, last, segments).tolist() == want


class TestMsSanitizerRecords:
    """The atomic mode as msSanitizer's hooks send it (SET_ATOMIC records, reference §1.8), through the converter
    into memcheck: F32 to BF16 turn it on, NONE off, SUM/MAX/MIN and unknown values leave it as it is."""

    @staticmethod
    def slot_events(block: int, modes: list[int], size: int) -> np.ndarray:
        from tests import compat_model as cm
        from tests.test_compat_records import decode

        records = [cm.record("SET_ATOMIC", mode=m, block_id=block) for m in modes]
        records.append(cm.record("STORE", addr=GM, size=size, space=1, align=1, block_id=block))
        events, decoder = decode(cm.slot(records, block_id=block))
        assert decoder.problems() == []
        return events

    @pytest.mark.parametrize(
        ("modes", "atomic"),
        [([], False), ([1], True), ([6, 0], False), ([2, 7], True), ([0, 8], False), ([3, 200], True), ([9], False)],
    )
    def test_block_0_plain_then_block_1_after_its_set_atomic(self, modes: list[int], atomic: bool) -> None:
        """Block 0 stores 9 bytes; block 1, after its SET_ATOMIC records, stores them too: stomping unless block 1's
        mode is on at its store. And an atomic store claims: block 1's, before block 0's plain store, makes that
        one stomping whatever the mode."""
        plain = self.slot_events(0, [], 9)
        other = self.slot_events(1, modes, 9)
        other["serial"] += plain.size
        found = kernel(memcheck(), plain, other)
        assert [f.size for f in found if f.kind == "out_of_bounds"] == ([] if atomic else [9])
        other = self.slot_events(1, modes, 9)
        plain = self.slot_events(2, [], 9)
        plain["serial"] += other.size
        found = kernel(memcheck(), other, plain)
        assert [(f.size, f.blocks) for f in found if f.kind == "out_of_bounds"] == [(9, {"aiv": [2]})]
