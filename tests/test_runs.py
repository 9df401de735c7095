"""Strided runs (``_runs``): the closed forms agree exactly with expanding the pattern block by block, and a
pattern of 65 535 x 65 535 blocks costs a few runs, not billions of ranges."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from client_shim.events import EventKind, Space, accesses
from sanitizerd.detectors import _patterns, _runs, _stomping, initcheck, memcheck
from sanitizerd.detectors._intervals import IntervalSet
from sanitizerd.detectors._patterns import expand, extents, ranges
from sanitizerd.detectors._runs import CHUNK, PairBudget, coverage, line_counts, piece_chunks, runs, runs_by_group
from sanitizerd_protocol.messages import HostOp
from sanitizerd_protocol.records import EVENT_DTYPE
from tests.detector_helpers import make_detector, run_kernel, stream

U64 = np.uint64
HORIZON = 1 << 48


def pattern(address: int, block_size: int, block_num: int = 1, block_stride: int = 1, repeat: int = 1,
            repeat_stride: int = 0) -> np.ndarray:  # fmt: skip
    return accesses(EventKind.READ, Space.GM, address, block_size, block_num=block_num, block_stride=block_stride,
                    repeat=repeat, repeat_stride=repeat_stride)  # fmt: skip


def all_pieces(r: object) -> list[tuple[int, int, int]]:
    out = []
    for owner, start, stop in piece_chunks(r, limit=7):  # type: ignore[arg-type]
        out += zip(owner.tolist(), start.tolist(), stop.tolist(), strict=True)
    return sorted(out)


patterns = st.fixed_dictionaries(
    {
        "address": st.integers(0, 96),
        "block_size": st.integers(1, 8),
        "block_num": st.integers(1, 9),
        "block_stride": st.integers(0, 5),
        "repeat": st.integers(1, 9),
        "repeat_stride": st.integers(0, 13),
    }
)
range_lists = st.lists(st.tuples(st.integers(0, 400), st.integers(0, 40)), max_size=6)


wide_patterns = st.fixed_dictionaries(
    {
        "address": st.sampled_from([0, 0x1000, (1 << 63) - 64, (1 << 64) - (1 << 20), (1 << 64) - 64]),
        "block_size": st.sampled_from([1, 32, 1 << 20, (1 << 32) - 1]),
        "block_num": st.integers(1, 9),
        "block_stride": st.sampled_from([0, 1, 2, 3, 8, 65535]),
        "repeat": st.integers(1, 9),
        "repeat_stride": st.sampled_from([0, 1, 7, 8, 14, 16, 24, 65535]),
    }
)


class TestExpandOrder:
    @settings(max_examples=500, deadline=None, database=None)
    @given(fields=st.lists(wide_patterns, min_size=1, max_size=4))
    def test_pieces_by_owner_then_start_with_or_without_the_sort(self, fields: list[dict[str, int]]) -> None:
        """``expand`` skips its sort when the pieces come out in order (issue 29); the result is the sorted one,
        at the top of the address space and past offsets that wrap too."""
        events = np.concatenate([pattern(**f) for f in fields])
        ext = extents(events)
        listed = expand(events, ext)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(_patterns, "_pieces_ascend", lambda *_: False)
            sorted_ = expand(events, ext)
        for got, want in zip(listed, sorted_, strict=True):
            assert np.array_equal(got, want)
        owner, start, _ = listed
        assert (np.diff(owner) >= 0).all() and (start[1:][np.diff(owner) == 0] > start[:-1][np.diff(owner) == 0]).all()


class TestListedTouching:
    @settings(max_examples=300, deadline=None, database=None)
    @given(fields=st.lists(patterns, min_size=1, max_size=6), held=range_lists)
    def test_same_pieces_as_one_lookup_each(self, fields: list[dict[str, int]], held: list[tuple[int, int]]) -> None:
        """One lookup per access inside a range of the set keeps exactly the pieces a lookup per piece keeps."""
        events = np.concatenate([pattern(**f) for f in fields])
        ext = extents(events)
        within = IntervalSet()
        if held:
            within.add(np.array([a for a, _ in held], U64), np.array([a + n for a, n in held], U64))
        index = np.arange(events.size)
        for got, want in zip(
            _runs.listed_touching(within, events, ext, index), _runs.touching(within, *ranges(events, ext, index)),
            strict=True,
        ):
            assert np.array_equal(got, want)


class TestAgainstExpansion:
    @settings(max_examples=500, deadline=None, database=None)
    @given(fields=st.lists(patterns, min_size=1, max_size=4))
    def test_pieces_are_the_expanded_ranges(self, fields: list[dict[str, int]]) -> None:
        """The runs' pieces are exactly the ranges ``expand`` lists, each once."""
        events = np.concatenate([pattern(**f) for f in fields])
        ext = extents(events)
        owner, start, stop = expand(events, ext)
        expected = sorted(zip(owner.tolist(), start.tolist(), stop.tolist(), strict=True))
        found = runs(events, ext)
        assert all_pieces(found) == expected
        assert (found.count[1:] <= 1).all() or (found.step[found.count > 1] >= found.size[found.count > 1]).all()
        assert len(found) <= int(line_counts(events, ext).sum())

    @settings(max_examples=500, deadline=None, database=None)
    @given(fields=st.lists(patterns, min_size=1, max_size=4), ranges=range_lists)
    def test_coverage_matches_expansion(self, fields: list[dict[str, int]], ranges: list[tuple[int, int]]) -> None:
        """Bytes inside the set and the first piece not wholly inside it, per access, as the expansion says."""
        events = np.concatenate([pattern(**f) for f in fields])
        ext = extents(events)
        covered_by = IntervalSet(np.array([a for a, _ in ranges], U64), np.array([a + n for a, n in ranges], U64))
        owner, start, stop = expand(events, ext)
        bad = (stop - start) - covered_by.covered(start, stop)
        found = runs(events, ext)
        inside, first_bad = coverage(found, covered_by, HORIZON, PairBudget())
        for k in range(events.size):
            mine = owner == k
            expected_inside = int(covered_by.covered(start[mine], stop[mine]).sum())
            got = found.owner == k
            assert int(inside[got].sum()) == expected_inside
            bad_starts = start[mine][bad[mine] > 0]
            expected_first = int(bad_starts.min()) if bad_starts.size else None
            got_first = int(first_bad[got].min()) if got.any() else None
            assert (got_first if got_first != 2**64 - 1 else None) == expected_first


class TestHugePatterns:
    def test_widest_pattern_is_a_few_runs(self) -> None:
        """65 535 x 65 535 scattered blocks: 4.3 billion blocks, at most 65 535 runs, exact byte count."""
        events = pattern(0x7000_0000_0000, 32, block_num=65535, block_stride=2, repeat=65535, repeat_stride=65535)
        found = runs(events, extents(events))
        assert len(found) <= 65535
        assert int((found.count * found.size).sum()) == 65535 * 65535 * 32

    def test_overlapping_rows_join(self) -> None:
        """Rows one unit apart with block stride 2 fall in two residue classes: two runs."""
        events = pattern(0, 32, block_num=65535, block_stride=2, repeat=65535, repeat_stride=1)
        found = runs(events, extents(events))
        assert len(found) == 2
        # Units 0 .. 2*65534 + 65534: every one of them, each once.
        assert int(found.count.sum()) == 2 * 65534 + 65534 + 1

    def test_coverage_of_widest_pattern_outside_everything(self) -> None:
        legal = IntervalSet(np.array([0x1000], U64), np.array([0x2000], U64))
        events = pattern(0x5000_0000, 32, block_num=65535, block_stride=2, repeat=65535, repeat_stride=65535)
        found = runs(events, extents(events))
        inside, first_bad = coverage(found, legal, HORIZON, PairBudget())
        assert int(inside.sum()) == 0 and int(first_bad.min()) == 0x5000_0000

    def test_pieces_past_the_address_space_saturate(self) -> None:
        events = pattern(2**64 - 64, 2**31, block_num=3, block_stride=2, repeat=2, repeat_stride=65535)
        found = runs(events, extents(events))
        starts = [s for _, s, _ in all_pieces(found)]
        assert len(starts) == 6 and all(s >= 2**64 - 64 for s in starts)

    def test_groups_bound_runs(self) -> None:
        """Accesses are taken in groups of about CHUNK runs before joining, each access in exactly one group."""
        one = pattern(0, 32, block_num=65535, block_stride=2, repeat=65535, repeat_stride=65535)
        events = np.concatenate([one] * 9)
        ext = extents(events)
        groups = [(rows.tolist(), int(line_counts(events[rows], ext[rows]).sum()))
                  for rows, _ in runs_by_group(events, ext, np.arange(9))]  # fmt: skip
        assert sorted(r for rows, _ in groups for r in rows) == list(range(9))
        assert len(groups) > 1 and all(lines <= CHUNK + 65535 for _, lines in groups)


# --- the detectors' bounded paths give the same findings as listing every piece ---------------------------------

stream_events = st.lists(
    st.tuples(st.sampled_from([EventKind.READ, EventKind.WRITE]), st.sampled_from([Space.GM, Space.UB]),
              patterns, st.integers(0, 2)),
    min_size=1, max_size=8,
)  # fmt: skip


def _stream(items: list[tuple[EventKind, Space, dict[str, int], int]]) -> np.ndarray:
    parts = []
    for kind, space, fields, block in items:
        f = dict(fields)
        address = f.pop("address") + (0x1000 if space == Space.GM else 0)
        parts.append(accesses(kind, space, address, f.pop("block_size"), block_id=block, **f))
    return stream(*parts)


def _findings(tool: str, events: np.ndarray, unused: bool = False) -> list[tuple[object, ...]]:
    detector = make_detector(tool)
    if unused:
        detector.track_writes = True  # type: ignore[attr-defined]
    detector.host_op(HostOp(op="malloc", address=0x1000, size=300, serial=0))
    detector.host_op(HostOp(op="store", address=0x1000, size=40, serial=0))
    found = run_kernel(detector, events)
    detector.host_op(HostOp(op="free", address=0x1000, serial=0))
    found += detector.finish()
    return sorted((f.kind, f.address, f.size, f.serial, f.count, f.detail) for f in found)


class TestBoundedPathsAgree:
    @settings(max_examples=200, deadline=None, database=None)
    @given(items=stream_events)
    def test_initcheck_chunked_and_alone(self, items: list[tuple[EventKind, Space, dict[str, int], int]]) -> None:
        """With a tiny CHUNK every access of more than 4 pieces is checked alone, in closed form; the rest are taken
        in small groups: the findings are those of one pass over the listed pieces."""
        events = _stream(items)
        expected = _findings("initcheck", events)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(initcheck, "CHUNK", 4)
            assert _findings("initcheck", events) == expected

    @settings(max_examples=200, deadline=None, database=None)
    @given(items=stream_events)
    def test_memcheck_chunked_writes(self, items: list[tuple[EventKind, Space, dict[str, int], int]]) -> None:
        """Stomping and unused-memory through runs and piece chunks report what listing the pieces reports."""
        events = _stream(items)
        expected = _findings("memcheck", events, unused=True)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(memcheck, "LIST_AT_ONCE", 0)
            patch.setattr(_stomping, "LIST_AT_ONCE", 0)
            assert _findings("memcheck", events, unused=True) == expected


class TestStateBounds:
    """Past MAX_TRACKED_RANGES separate ranges a check stops, and the session is told; nothing fails."""

    @staticmethod
    def scattered_writes(block: int = 0, count: int = 64) -> np.ndarray:
        return accesses(EventKind.WRITE, Space.GM, 0x1000 + np.arange(count) * 4, 1, block_id=block)

    def test_unused_memory_stops_and_says_so(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(memcheck, "MAX_TRACKED_RANGES", 16)
        detector = make_detector("memcheck")
        detector.track_writes = True  # type: ignore[attr-defined]
        detector.host_op(HostOp(op="malloc", address=0x1000, size=4096, serial=1))
        found = run_kernel(detector, self.scattered_writes())
        [notice] = [f for f in found if f.kind == "internal_error"]
        assert "unused-memory check stopped" in (notice.detail or "")
        assert not [f for f in detector.finish() if f.kind == "unused_memory"]

    def test_unused_memory_host_stores_stop_and_say_so(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(memcheck, "MAX_TRACKED_RANGES", 16)
        detector = make_detector("memcheck")
        detector.track_writes = True  # type: ignore[attr-defined]
        detector.host_op(HostOp(op="malloc", address=0x1000, size=4096, serial=1))
        told = [f for i in range(40) for f in detector.host_op(HostOp(op="store", address=0x1000 + 4 * i, size=1))]
        assert [f.kind for f in told] == ["internal_error"]

    def test_stomping_stops_for_the_kernel_and_says_so(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(_stomping, "MAX_TRACKED_RANGES", 16)
        detector = make_detector("memcheck")
        detector.host_op(HostOp(op="malloc", address=0x1000, size=4096, serial=1))
        found = run_kernel(detector, self.scattered_writes(0), self.scattered_writes(1))
        assert [f.kind for f in found] == ["internal_error"]
        assert "stomping check stopped" in (found[0].detail or "")
        # The next kernel is checked again.
        found = run_kernel(detector, self.scattered_writes(0, 4), self.scattered_writes(1, 4))
        assert {f.kind for f in found} == {"out_of_bounds"}

    def test_initcheck_stops_and_says_so(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(initcheck, "MAX_TRACKED_RANGES", 16)
        detector = make_detector("initcheck")
        found = run_kernel(detector, self.scattered_writes())
        assert [f.kind for f in found] == ["internal_error"]
        assert "initcheck stopped" in (found[0].detail or "")
        assert run_kernel(detector, accesses(EventKind.READ, Space.GM, 0x9000, 8)) == []

    def test_memcheck_says_which_accesses_it_could_not_settle(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A pattern whose runs meet more than MAX_PAIRS allocations is not passed silently: it is named."""
        monkeypatch.setattr(_runs, "MAX_PAIRS", 4)
        detector = make_detector("memcheck")
        for i in range(8):
            detector.host_op(HostOp(op="malloc", address=0x1000 + i * 64, size=32, serial=i))
        wide = accesses(EventKind.READ, Space.GM, 0x1000, 32, block_num=16, block_stride=2, serial=7)
        found = run_kernel(detector, wide)
        assert [(f.kind, f.address, f.serial) for f in found] == [("internal_error", 0x1000, 7)]
        assert "did not check the bounds" in (found[0].detail or "")

    def test_initcheck_says_which_read_it_could_not_settle(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(_runs, "MAX_PAIRS", 4)
        monkeypatch.setattr(initcheck, "CHUNK", 4)
        detector = make_detector("initcheck")
        writes = accesses(EventKind.WRITE, Space.GM, 0x1000 + np.arange(8) * 64, 32)
        wide = accesses(EventKind.READ, Space.GM, 0x1000, 32, block_num=16, block_stride=2, serial=9)
        found = run_kernel(detector, np.concatenate((writes, wide)))
        assert [(f.kind, f.serial) for f in found] == [("internal_error", 9)]


class TestExtents:
    @settings(max_examples=300, deadline=None, database=None)
    @given(
        rows=st.lists(
            st.tuples(
                st.integers(0, 2),
                st.integers(0, 3),
                st.sampled_from([0, 1, 2, 16, 65535]),
                st.integers(0, 9),
                st.sampled_from([0, 1, 32, 1 << 31]),
            ),
            min_size=1,
            max_size=40,
        )
    )
    def test_matches_the_pattern_formula(self, rows: list[tuple[int, int, int, int, int]]) -> None:
        """extents (with its shortcut for batches of one-row accesses) is (last block's end - first block's
        start) of the pattern: ((repeat-1) * repeat_stride + (block_num-1) * block_stride + 1) * block_size,
        0 when repeat or block_num is 0."""
        events = np.zeros(len(rows), dtype=EVENT_DTYPE)
        for name, column in zip(("repeat", "block_stride", "block_num", "repeat_stride", "block_size"),
                                zip(*rows, strict=True), strict=True):  # fmt: skip
            events[name] = column
        want = [0 if r == 0 or n == 0 else ((r - 1) * rs + (n - 1) * bs + 1) * size for r, bs, n, rs, size in rows]
        assert extents(events).tolist() == want
