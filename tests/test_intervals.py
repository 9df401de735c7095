"""Byte-range sets (``_intervals``) and strided-pattern arithmetic (``_patterns``), checked against a
brute-force set-of-bytes model."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from client_shim.events import EventKind, Space, accesses, make_events
from sanitizerd.detectors._intervals import IntervalSet, merge_ranges
from sanitizerd.detectors._patterns import ends, expand, extents, first_misaligned

U64 = np.uint64


def u64(*values: int) -> np.ndarray:
    return np.array(values, dtype=U64)


def pairs(interval_set: IntervalSet) -> list[tuple[int, int]]:
    return list(zip(interval_set.starts.tolist(), interval_set.ends.tolist(), strict=True))


def pattern(
    address: int,
    block_size: int,
    block_num: int = 1,
    block_stride: int = 1,
    repeat: int = 1,
    repeat_stride: int = 0,
) -> np.ndarray:
    return accesses(
        EventKind.READ,
        Space.GM,
        address,
        block_size,
        block_num=block_num,
        block_stride=block_stride,
        repeat=repeat,
        repeat_stride=repeat_stride,
    )


def touched_bytes(event: np.void) -> set[int]:
    """Every byte a strided access touches, by the definition in docs/protocol.md §7.5."""
    out: set[int] = set()
    size = int(event["block_size"])
    for r in range(int(event["repeat"])):
        for i in range(int(event["block_num"])):
            start = int(event["address"]) + (r * int(event["repeat_stride"]) + i * int(event["block_stride"])) * size
            out.update(range(start, start + size))
    return out


def block_starts(event: np.void) -> list[int]:
    """Start address of every block, in program order (repeat-major)."""
    size = int(event["block_size"])
    return [
        int(event["address"]) + (r * int(event["repeat_stride"]) + i * int(event["block_stride"])) * size
        for r in range(int(event["repeat"]))
        for i in range(int(event["block_num"]))
    ]


class TestMergeRanges:
    def test_overlapping_and_touching_are_joined(self) -> None:
        """Overlapping and touching ranges become one; disjoint ones stay apart."""
        starts, stops = merge_ranges(u64(10, 0, 5, 30, 20), u64(15, 5, 8, 40, 30))
        assert starts.tolist() == [0, 10, 20]
        assert stops.tolist() == [8, 15, 40]

    def test_contained_range_does_not_shorten_the_run(self) -> None:
        """A range inside a longer one leaves the longer one's end."""
        starts, stops = merge_ranges(u64(0, 2, 50), u64(100, 3, 60))
        assert starts.tolist() == [0]
        assert stops.tolist() == [100]

    def test_empty_ranges_vanish(self) -> None:
        """Ranges with end <= start are dropped, even between real ranges."""
        starts, stops = merge_ranges(u64(0, 7, 9, 20), u64(5, 7, 3, 25))
        assert list(zip(starts.tolist(), stops.tolist(), strict=True)) == [(0, 5), (20, 25)]

    def test_nothing_in_nothing_out(self) -> None:
        """Merging no ranges gives empty uint64 arrays."""
        starts, stops = merge_ranges(u64(), u64())
        assert starts.size == stops.size == 0
        assert starts.dtype == U64

    def test_large_addresses_keep_precision(self) -> None:
        """48-bit and larger addresses survive merging exactly."""
        base = 0x12C0_C001_5000
        starts, stops = merge_ranges(u64(base + 1, base), u64(base + 2**40, base + 1))
        assert starts.tolist() == [base]
        assert stops.tolist() == [base + 2**40]


class TestIntervalSet:
    def test_constructor_merges(self) -> None:
        """A new set holds the union of its ranges, with len and total in bytes."""
        s = IntervalSet(u64(0, 10, 12), u64(5, 12, 20))
        assert pairs(s) == [(0, 5), (10, 20)]
        assert len(s) == 2
        assert s.total == 15

    def test_empty_set(self) -> None:
        """An empty set covers nothing and contains nothing."""
        s = IntervalSet()
        assert len(s) == 0 and s.total == 0
        assert s.covered(u64(0, 5), u64(10, 6)).tolist() == [0, 0]
        assert s.contains(u64(0), u64(1)).tolist() == [False]

    def test_add_joins_touching(self) -> None:
        """Adding a range that touches two others joins all three."""
        s = IntervalSet(u64(0, 20), u64(10, 30))
        s.add(u64(10), u64(20))
        assert pairs(s) == [(0, 30)]
        assert s.total == 30

    def test_remove_splits_a_range(self) -> None:
        """Removing the middle of a range leaves both ends."""
        s = IntervalSet(u64(0), u64(100))
        s.remove(40, 60)
        assert pairs(s) == [(0, 40), (60, 100)]
        assert s.total == 80

    def test_remove_across_ranges(self) -> None:
        """Removing a span that covers several ranges trims the outer two and drops the inner ones."""
        s = IntervalSet(u64(0, 20, 40, 60), u64(10, 30, 50, 70))
        s.remove(5, 65)
        assert pairs(s) == [(0, 5), (65, 70)]

    def test_remove_exact_and_empty(self) -> None:
        """Removing a whole range drops it; an empty removal changes nothing."""
        s = IntervalSet(u64(0, 20), u64(10, 30))
        s.remove(15, 15)
        s.remove(30, 20)
        assert pairs(s) == [(0, 10), (20, 30)]
        s.remove(0, 10)
        assert pairs(s) == [(20, 30)]
        assert s.total == 10

    def test_covered_counts_bytes_inside(self) -> None:
        """covered counts, per query, only the bytes that fall in the set."""
        s = IntervalSet(u64(10, 30), u64(20, 40))
        lo = u64(0, 10, 15, 0, 20, 35, 45)
        hi = u64(5, 20, 35, 100, 30, 36, 50)
        assert s.covered(lo, hi).tolist() == [0, 10, 10, 20, 0, 1, 0]

    def test_contains_needs_one_range(self) -> None:
        """contains is true only when a query lies wholly inside one range of the set."""
        s = IntervalSet(u64(10, 30), u64(20, 40))
        lo = u64(10, 12, 15, 5, 30, 39, 20)
        hi = u64(20, 13, 35, 12, 40, 41, 30)
        assert s.contains(lo, hi).tolist() == [True, True, False, False, True, False, False]

    def test_adjacent_adds_are_one_range(self) -> None:
        """Two separately added touching ranges contain a query spanning their boundary."""
        s = IntervalSet()
        s.add(u64(0x1000), u64(0x1100))
        s.add(u64(0x1100), u64(0x1200))
        assert s.contains(u64(0x10F0), u64(0x1110)).tolist() == [True]


class TestExtents:
    @pytest.mark.parametrize(
        ("fields", "extent"),
        [
            ({"block_size": 100}, 100),
            # docs/protocol.md §9.2: 2 repeats of 8 contiguous 32-byte blocks, repeat stride 8.
            ({"block_size": 32, "block_num": 8, "repeat": 2, "repeat_stride": 8}, 512),
            ({"block_size": 32, "block_num": 4, "block_stride": 3}, (3 * 3 + 1) * 32),
            ({"block_size": 16, "block_num": 4, "block_stride": 0, "repeat": 3, "repeat_stride": 0}, 16),
            ({"block_size": 32, "repeat": 0}, 0),
            ({"block_size": 32, "block_num": 0}, 0),
            ({"block_size": 0, "block_num": 4, "repeat": 4}, 0),
        ],
    )
    def test_extent_formula(self, fields: dict[str, int], extent: int) -> None:
        """extent = ((repeat-1)*repeat_stride + (block_num-1)*block_stride + 1) * block_size, 0 if empty."""
        assert extents(pattern(0x1000, **fields)).tolist() == [extent]

    def test_huge_pattern_saturates_instead_of_wrapping(self) -> None:
        """The largest field values give a huge extent, never a small wrapped-round one."""
        events = make_events(
            block_size=2**32 - 1, block_num=2**16 - 1, block_stride=2**16 - 1, repeat=2**16 - 1,
            repeat_stride=2**16 - 1,
        )  # fmt: skip
        ext = int(extents(events)[0])
        assert ext >= 2**48
        assert int(ends(u64(2**64 - 1), extents(events))[0]) >= ext

    def test_ends_adds_without_wrapping(self) -> None:
        """ends is address + extent for ordinary addresses."""
        assert ends(u64(0x1000, 5), u64(0x10, 0)).tolist() == [0x1010, 5]


class TestExpand:
    def test_contiguous_is_one_range(self) -> None:
        """A dense access expands to one range covering its extent."""
        events = pattern(0x1000, 32, block_num=8, repeat=2, repeat_stride=8)
        owner, start, stop = expand(events, extents(events))
        assert list(zip(owner.tolist(), start.tolist(), stop.tolist(), strict=True)) == [(0, 0x1000, 0x1200)]

    def test_rows_with_gaps_are_one_range_per_repeat(self) -> None:
        """Contiguous rows separated by gaps expand to one range per repeat."""
        events = pattern(0, 32, block_num=2, repeat=3, repeat_stride=4)
        owner, start, stop = expand(events, extents(events))
        assert list(zip(start.tolist(), stop.tolist(), strict=True)) == [(0, 64), (128, 192), (256, 320)]
        assert owner.tolist() == [0, 0, 0]

    def test_scattered_blocks_are_one_range_each(self) -> None:
        """Blocks with a stride above 1 expand to one range per block, sorted by start."""
        events = pattern(0, 8, block_num=3, block_stride=2, repeat=2, repeat_stride=1)
        _, start, stop = expand(events, extents(events))
        assert start.tolist() == [0, 8, 16, 24, 32, 40]
        assert (stop - start).tolist() == [8] * 6

    def test_coinciding_blocks_are_kept_once(self) -> None:
        """Blocks at the same offset (stride 0) are one range, not counted twice."""
        events = pattern(0x40, 16, block_num=4, block_stride=0, repeat=3, repeat_stride=0)
        _, start, stop = expand(events, extents(events))
        assert list(zip(start.tolist(), stop.tolist(), strict=True)) == [(0x40, 0x50)]

    def test_several_owners(self) -> None:
        """Ranges of several accesses come back grouped by owner index."""
        events = np.concatenate([pattern(100, 4, block_num=2, block_stride=3), pattern(0, 10)])
        owner, start, _ = expand(events, extents(events))
        assert owner.tolist() == [0, 0, 1]
        assert start.tolist() == [100, 112, 0]


class TestFirstMisaligned:
    def test_aligned_pattern(self) -> None:
        """An aligned start with aligned steps is not flagged."""
        events = pattern(64, 32, block_num=4, repeat=2, repeat_stride=8)
        bad, _ = first_misaligned(events, u64(32))
        assert bad.tolist() == [False]

    def test_misaligned_start(self) -> None:
        """A misaligned start address is reported as itself."""
        bad, first = first_misaligned(pattern(6, 13), u64(32))
        assert bad.tolist() == [True] and first.tolist() == [6]

    def test_misaligned_block_stride(self) -> None:
        """An aligned start whose second block is off is reported at that block."""
        bad, first = first_misaligned(pattern(64, 16, block_num=4), u64(32))
        assert bad.tolist() == [True] and first.tolist() == [80]

    def test_misaligned_repeat_stride(self) -> None:
        """Aligned blocks whose second repeat is off are reported at that repeat's first block."""
        bad, first = first_misaligned(pattern(0, 48, repeat=3, repeat_stride=1), u64(32))
        assert bad.tolist() == [True] and first.tolist() == [48]

    def test_single_block_ignores_strides(self) -> None:
        """With one block and one repeat the (meaningless) strides are not checked."""
        bad, _ = first_misaligned(pattern(0, 48, block_num=1, block_stride=1, repeat=1, repeat_stride=1), u64(32))
        assert bad.tolist() == [False]


# --- properties against a brute-force model -----------------------------------------------------------------

patterns = st.fixed_dictionaries(
    {
        "address": st.integers(0, 96),
        "block_size": st.integers(0, 8),
        "block_num": st.integers(0, 4),
        "block_stride": st.integers(0, 4),
        "repeat": st.integers(0, 4),
        "repeat_stride": st.integers(0, 12),
    }
)
range_lists = st.lists(st.tuples(st.integers(0, 160), st.integers(0, 24)), max_size=5)


class TestAgainstBruteForce:
    @settings(max_examples=300, deadline=None, database=None)
    @given(ranges=range_lists, queries=st.lists(st.tuples(st.integers(0, 200), st.integers(0, 60)), max_size=6))
    def test_interval_set_matches_byte_set(self, ranges: list[tuple[int, int]], queries: list[tuple[int, int]]) -> None:
        """covered, contains and total agree with a Python set of bytes."""
        legal = {b for start, length in ranges for b in range(start, start + length)}
        s = IntervalSet(u64(*(a for a, _ in ranges)), u64(*(a + n for a, n in ranges)))
        assert s.total == len(legal)
        assert np.all(s.starts[1:] > s.ends[:-1])  # disjoint, sorted, touching ones joined
        lo = u64(*(a for a, _ in queries))
        hi = u64(*(a + n for a, n in queries))
        covered = s.covered(lo, hi).tolist()
        contains = s.contains(lo, hi).tolist()
        for (a, n), c, inside in zip(queries, covered, contains, strict=True):
            assert c == len(legal.intersection(range(a, a + n)))
            if n:
                one_range = any(x <= a and a + n <= y for x, y in pairs(s))
                assert inside == one_range

    @settings(max_examples=300, deadline=None, database=None)
    @given(ranges=range_lists, cut=st.tuples(st.integers(0, 200), st.integers(0, 60)))
    def test_remove_matches_byte_set(self, ranges: list[tuple[int, int]], cut: tuple[int, int]) -> None:
        """Removing a span leaves exactly the bytes outside it."""
        legal = {b for start, length in ranges for b in range(start, start + length)}
        s = IntervalSet(u64(*(a for a, _ in ranges)), u64(*(a + n for a, n in ranges)))
        s.remove(cut[0], cut[0] + cut[1])
        expected = legal - set(range(cut[0], cut[0] + cut[1]))
        assert {b for a, e in pairs(s) for b in range(a, e)} == expected
        assert s.total == len(expected)

    @settings(max_examples=400, deadline=None, database=None)
    @given(accesses_=st.lists(patterns, min_size=1, max_size=4), ranges=range_lists)
    def test_expand_and_bad_bytes_match_byte_set(
        self, accesses_: list[dict[str, int]], ranges: list[tuple[int, int]]
    ) -> None:
        """expand gives disjoint ranges covering exactly the touched bytes; extents and bad-byte counts agree."""
        events = np.concatenate([pattern(**fields) for fields in accesses_])
        legal = {b for start, length in ranges for b in range(start, start + length)}
        s = IntervalSet(u64(*(a for a, _ in ranges)), u64(*(a + n for a, n in ranges)))
        ext = extents(events)
        owner, start, stop = expand(events, ext)
        bad = (stop - start) - s.covered(start, stop)
        for k, event in enumerate(events):
            touched = touched_bytes(event)
            expected_extent = max(touched) + 1 - int(event["address"]) if touched else 0
            assert int(ext[k]) == expected_extent
            mine = [(int(a), int(b)) for o, a, b in zip(owner, start, stop, strict=True) if o == k and b > a]
            expanded = [b for a, e in mine for b in range(a, e)]
            assert len(expanded) == len(set(expanded)), "ranges of one access overlap"
            assert set(expanded) == touched
            assert int(bad[owner == k].sum()) == len(touched - legal)

    @settings(max_examples=400, deadline=None, database=None)
    @given(fields=patterns, align=st.sampled_from([1, 2, 4, 8, 32, 512]))
    def test_first_misaligned_matches_block_walk(self, fields: dict[str, int], align: int) -> None:
        """An access is flagged iff some block start is off the alignment, at the first such block."""
        events = pattern(**fields)
        starts = block_starts(events[0])
        if not starts or not fields["block_size"]:
            return  # empty accesses are never checked (memcheck masks them out)
        bad, first = first_misaligned(events, u64(align))
        off = [a for a in starts if a % align]
        assert bool(bad[0]) == bool(off)
        if off:
            assert int(first[0]) == off[0]


class TestPendingLevel:
    """Adds a few at a time go to a pending level that is folded in later; every query sees both."""

    @settings(max_examples=150, deadline=None, database=None)
    @given(
        steps=st.lists(
            st.tuples(st.sampled_from(["add", "remove", "query"]), st.integers(0, 3000), st.integers(0, 40)),
            min_size=1,
            max_size=300,
        )
    )
    def test_matches_byte_set_through_many_small_adds(self, steps: list[tuple[str, int, int]]) -> None:
        s, model = IntervalSet(), set[int]()
        for op, at, length in steps:
            if op == "add":
                s.add(u64(at), u64(at + length))
                model |= set(range(at, at + length))
            elif op == "remove":
                s.remove(at, at + length)
                model -= set(range(at, at + length))
            else:
                lo, hi = u64(at, 0), u64(at + length, 3100)
                assert s.covered(lo, hi).tolist() == [len(model & set(range(at, at + length))), len(model)]
                if length:
                    whole = set(range(at, at + length)) <= model
                    assert bool(s.contains(u64(at), u64(at + length))[0]) == whole
            assert s.total == len(model)
        assert {b for a, e in pairs(s) for b in range(a, e)} == model
        assert all(a < e for a, e in pairs(s))
        assert all(e1 < a2 for (_, e1), (a2, _) in zip(pairs(s), pairs(s)[1:], strict=False))


class TestAddDisjoint:
    """Fresh ranges (a kernel claiming bytes nobody owns) inserted without lookups, into a set large enough to keep
    them pending across batches: every query still sees them, and folding joins the ones that touch."""

    @settings(max_examples=60, deadline=None, database=None)
    @given(
        steps=st.lists(
            st.tuples(
                st.sampled_from(["fresh", "fresh", "add", "remove", "query"]),
                st.lists(st.integers(0, 4999), min_size=1, max_size=400, unique=True),
                st.integers(1, 5),
            ),
            min_size=1,
            max_size=12,
        )
    )
    def test_matches_a_byte_set(self, steps: list[tuple[str, list[int], int]]) -> None:
        # 5000 ranges [10i, 10i + 5): past SMALL_SET, so fresh ranges stay pending until about sqrt(n * k).
        s = IntervalSet(np.arange(5000, dtype=np.uint64) * 10, np.arange(5000, dtype=np.uint64) * 10 + 5)
        model = {b for i in range(5000) for b in range(10 * i, 10 * i + 5)}
        for op, slots, length in steps:
            lo = np.array(sorted(10 * i + 5 for i in slots), dtype=np.uint64)
            hi = lo + np.uint64(length)
            if op == "fresh":
                spans = zip(lo.tolist(), hi.tolist(), strict=True)
                free = np.array([not any(b in model for b in range(a, e)) for a, e in spans], dtype=bool)
                s.add_disjoint(lo[free], hi[free])  # touching held ranges (length 5), never sharing a byte
                model |= {b for a, e in zip(lo[free].tolist(), hi[free].tolist(), strict=True) for b in range(a, e)}
            elif op == "add":
                s.add(lo, hi)
                model |= {b for a, e in zip(lo.tolist(), hi.tolist(), strict=True) for b in range(a, e)}
            elif op == "remove":
                s.remove(int(lo[0]), int(hi[-1]))
                model -= set(range(int(lo[0]), int(hi[-1])))
            else:
                want = [len(model & set(range(a, e))) for a, e in zip(lo.tolist(), hi.tolist(), strict=True)]
                assert s.covered(lo, hi).tolist() == want
                whole = [set(range(a, e)) <= model for a, e in zip(lo.tolist(), hi.tolist(), strict=True)]
                assert s.contains(lo, hi).tolist() == whole
            assert s.total == len(model)
            # Every step ends with a lookup, so a later step queries what this one left pending.
            edges = np.array([0, 25_000, 50_010], dtype=np.uint64)
            assert s.covered(edges[:-1], edges[1:]).tolist() == [
                len([b for b in model if b < 25_000]),
                len([b for b in model if b >= 25_000]),
            ]
        assert {b for a, e in pairs(s) for b in range(a, e)} == model
        assert all(e1 < a2 for (_, e1), (a2, _) in zip(pairs(s), pairs(s)[1:], strict=False))
