"""Sets of byte ranges as sorted, disjoint numpy arrays, queried for a whole batch at once.

Used for the GM ranges a session may legally touch and for the bytes it has written. Queries are
vectorised: one ``searchsorted`` per batch, never a Python loop over accesses.
"""

from __future__ import annotations

import math

import numpy as np

from sanitizerd.native import load

_U64 = np.uint64
# The compiled loops (sanitizerd/native/_memcheck.c), or None: numpy's reference path. Tests set it to compare them.
native = load("_memcheck")
# Disjoint ranges one detector's byte-range state (bytes written, defined, owned) may hold. Kernels rewrite
# their buffers, so ordinary state stays far below; a pattern fragmenting it further stops that tracking, and
# the session is told so. About 24 bytes a range at rest, a few times that while merging.
MAX_TRACKED_RANGES = 1 << 21


def merge_ranges(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of ``[starts[i], ends[i])``: sorted, disjoint, touching ranges joined. Empty ranges vanish."""
    if (
        native is not None
        and isinstance(starts, np.ndarray)
        and isinstance(ends, np.ndarray)
        and starts.dtype == _U64
        and ends.dtype == _U64
        and starts.ndim == 1
        and starts.shape == ends.shape
    ):
        merged_starts, merged_ends = native.merge_ranges(np.ascontiguousarray(starts), np.ascontiguousarray(ends))
        return np.frombuffer(merged_starts, _U64), np.frombuffer(merged_ends, _U64)
    return merge_ranges_numpy(starts, ends)


def merge_ranges_numpy(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``merge_ranges``' reference path."""
    keep = ends > starts
    starts, ends = starts[keep].astype(_U64), ends[keep].astype(_U64)
    if starts.size == 0:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)
    new_run = np.empty(starts.size, dtype=bool)
    new_run[0] = True
    new_run[1:] = starts[1:] > reach[:-1]
    first = np.flatnonzero(new_run)
    last = np.append(first[1:] - 1, starts.size - 1)
    return starts[first], reach[last]


SMALL_SET = 4096  # ranges below which adds are folded in at once


class IntervalSet:
    """A set of byte ranges, queried a batch at a time.

    Two levels, so that adding a few ranges does not rewrite the whole set (a session's host stores and scattered
    writes add a few at a time, and rewriting every range each time made them quadratic): the main arrays, and a
    few pending ranges kept disjoint from them. Pending ranges are folded in once there are more than about the
    square root of the main ranges, so an add costs O(sqrt(n)) amortised. ``starts``/``ends`` fold first."""

    __slots__ = ("_cumulative", "_ends", "_pending_cumulative", "_pending_ends", "_pending_starts", "_starts")

    def __init__(self, starts: np.ndarray | None = None, ends: np.ndarray | None = None) -> None:
        if starts is None or ends is None:
            starts = ends = np.empty(0, dtype=_U64)
        self._starts, self._ends = merge_ranges(np.asarray(starts), np.asarray(ends))
        self._pending_starts = self._pending_ends = np.empty(0, dtype=_U64)
        self._pending_cumulative: np.ndarray | None = None
        self._refresh()

    def _refresh(self) -> None:
        # _cumulative[i] = bytes in ranges before i, so coverage below x is one lookup.
        lengths = self._ends - self._starts
        self._cumulative = np.concatenate(([0], np.cumsum(lengths, dtype=_U64))).astype(_U64)

    def _fold(self) -> None:
        """Pending ranges into the main arrays: they are disjoint, so an insertion and a join of touching ends."""
        if not self._pending_starts.size:
            return
        self._starts, self._ends = _insert_disjoint(self._starts, self._ends, self._pending_starts, self._pending_ends)
        self._pending_starts = self._pending_ends = np.empty(0, dtype=_U64)
        self._pending_cumulative = None
        self._refresh()

    @property
    def starts(self) -> np.ndarray:
        self._fold()
        return self._starts

    @property
    def ends(self) -> np.ndarray:
        self._fold()
        return self._ends

    def __len__(self) -> int:
        """Ranges held (an upper bound while some are pending: a pending range may touch a main one)."""
        return int(self._starts.size + self._pending_starts.size)

    @property
    def total(self) -> int:
        return int(self._cumulative[-1]) + int((self._pending_ends - self._pending_starts).sum())

    def add(self, starts: np.ndarray, ends: np.ndarray) -> None:
        new_starts, new_ends = np.asarray(starts, dtype=_U64), np.asarray(ends, dtype=_U64)
        if new_starts.size != 1:
            new_starts, new_ends = merge_ranges(new_starts, new_ends)
        elif new_ends[0] <= new_starts[0]:
            return
        if not new_starts.size:
            return
        in_order = True  # new_starts/new_ends sorted and disjoint, as merge_ranges left them
        if self._starts.size:
            # Keep pending ranges disjoint from the main ones: take out what the main arrays hold already.
            overlaps = _covered_by(self._starts, self._ends, self._cumulative, new_starts, new_ends) > 0
            if overlaps.any():
                lo = int(np.searchsorted(self._ends, new_starts[overlaps].min(), side="right"))
                hi = int(np.searchsorted(self._starts, new_ends[overlaps].max(), side="left"))
                clipped = difference(new_starts[overlaps], new_ends[overlaps], self._starts[lo:hi], self._ends[lo:hi])
                new_starts = np.concatenate((new_starts[~overlaps], clipped[0]))
                new_ends = np.concatenate((new_ends[~overlaps], clipped[1]))
                in_order = False
        self._pending_cumulative = None
        if in_order and not self._pending_starts.size:
            # Already the pending level's form: no second merge (a copy, as the caller may reuse its arrays).
            self._pending_starts, self._pending_ends = new_starts.copy(), new_ends.copy()
        else:
            self._pending_starts, self._pending_ends = merge_ranges(
                np.concatenate((self._pending_starts, new_starts)), np.concatenate((self._pending_ends, new_ends))
            )
        # A small set is folded at once (an insertion into a short array costs less than a second lookup per
        # query); a large one only once its pending level has grown to about sqrt(n) ranges.
        if self._starts.size < SMALL_SET or self._pending_starts.size > max(64, math.isqrt(self._starts.size)):
            self._fold()

    def add_new(self, starts: np.ndarray, ends: np.ndarray) -> None:
        """``add``, skipping ranges the set already holds: in steady state most writes rewrite defined bytes,
        and one lookup is far cheaper than merging them in again."""
        if not starts.size:
            return
        if starts.size > 1024:
            # Sorted lookups walk the arrays in order: far fewer cache misses on a large set.
            order = np.argsort(starts)
            starts, ends = starts[order], ends[order]
        fresh = ~self.contains(starts, ends)
        if fresh.any():
            self.add(starts[fresh], ends[fresh])

    def add_disjoint(self, starts: np.ndarray, ends: np.ndarray) -> None:
        """``add`` for sorted, disjoint ranges that share no byte with the set (they may touch its ranges): a
        kernel claiming fresh bytes. No lookup, and no sort: an insertion into the pending level, which is folded
        once it holds about sqrt(n * k) ranges, k the ranges added, so that a set growing by thousands of
        separate ranges a batch (blocks taking tiles in turn) is not rewritten whole every batch."""
        if not starts.size:
            return
        if self._pending_starts.size:
            self._pending_starts, self._pending_ends = _insert_disjoint(
                self._pending_starts, self._pending_ends, starts, ends
            )
        else:
            self._pending_starts, self._pending_ends = starts.astype(_U64), ends.astype(_U64)
        self._pending_cumulative = None
        limit = max(64, math.isqrt(self._starts.size * int(starts.size)))
        if self._starts.size < SMALL_SET or self._pending_starts.size > limit:
            self._fold()

    def remove(self, start: int, end: int) -> None:
        """Take ``[start, end)`` out of the set."""
        if end <= start or not len(self):
            return
        self._fold()
        s, e = self._starts, self._ends
        first = int(np.searchsorted(e, _U64(start), side="right"))  # ranges before it end at or before start
        last = int(np.searchsorted(s, _U64(end), side="left"))  # ranges from last on start at or after end
        if first >= last:
            return
        # Only ranges first..last-1 meet [start, end): keep their parts outside it, splice them in place.
        keep_starts, keep_ends = [], []
        if s[first] < start:
            keep_starts.append(s[first])
            keep_ends.append(_U64(start))
        if e[last - 1] > end:
            keep_starts.append(_U64(end))
            keep_ends.append(e[last - 1])
        self._starts = np.concatenate((s[:first], np.array(keep_starts, dtype=_U64), s[last:]))
        self._ends = np.concatenate((e[:first], np.array(keep_ends, dtype=_U64), e[last:]))
        self._refresh()

    def subtract(self, starts: np.ndarray, ends: np.ndarray) -> None:
        """Take sorted, disjoint ranges out of the set."""
        if len(self) and starts.size:
            self._fold()
            self._starts, self._ends = difference(self._starts, self._ends, starts, ends)
            self._refresh()

    def covered(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Bytes of each ``[lo, hi)`` inside the set."""
        if not len(self):
            return np.zeros(np.shape(lo), dtype=_U64)
        inside = _covered_by(self._starts, self._ends, self._cumulative, lo, hi)
        if self._pending_starts.size:
            if self._pending_cumulative is None:
                lengths = self._pending_ends - self._pending_starts
                self._pending_cumulative = np.concatenate(([0], np.cumsum(lengths, dtype=_U64))).astype(_U64)
            inside = inside + _covered_by(self._pending_starts, self._pending_ends, self._pending_cumulative, lo, hi)
        return inside

    def contains(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Whether each non-empty ``[lo, hi)`` lies wholly inside one range of the set."""
        if not len(self):
            return np.zeros(np.shape(lo), dtype=bool)
        if self._pending_starts.size:
            # Touching ranges are one range of the set, so wholly covered is wholly inside one.
            return (hi > lo) & (self.covered(lo, hi) == hi - lo)
        j = np.searchsorted(self._starts, lo, side="right").astype(np.intp) - 1
        return (j >= 0) & (hi <= self._ends[np.maximum(j, 0)])


def _insert_disjoint(
    starts: np.ndarray, ends: np.ndarray, new_starts: np.ndarray, new_ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Sorted, disjoint ranges with sorted ranges inserted that share no byte with them: an insertion and a join
    of touching ends, linear in the ranges held."""
    at = np.searchsorted(starts, new_starts)
    starts = np.insert(starts, at, new_starts)
    ends = np.insert(ends, at, new_ends)
    joins = np.flatnonzero(starts[1:] == ends[:-1])
    if joins.size:
        keep = np.ones(starts.size, dtype=bool)
        keep[joins + 1] = False
        run_end = np.ones(starts.size, dtype=bool)
        run_end[joins] = False
        starts, ends = starts[keep], ends[run_end]
    return starts, ends


def _covered_by(
    starts: np.ndarray, ends: np.ndarray, cumulative: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> np.ndarray:
    """Bytes of each ``[lo, hi)`` inside sorted, disjoint ranges whose running lengths are ``cumulative``. Compiled
    where built: one search per bound, where numpy's takes a dozen passes over the batch's ranges."""
    if (
        native is not None
        and starts.size
        and isinstance(lo, np.ndarray)
        and isinstance(hi, np.ndarray)
        and lo.ndim == 1
        and lo.shape == hi.shape
        and all(a.dtype == _U64 for a in (starts, ends, cumulative, lo, hi))
    ):
        return np.frombuffer(
            native.covered_by(*(np.ascontiguousarray(a) for a in (starts, ends, cumulative, lo, hi))), _U64
        )
    return _covered_by_numpy(starts, ends, cumulative, lo, hi)


def _covered_by_numpy(
    starts: np.ndarray, ends: np.ndarray, cumulative: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> np.ndarray:
    """``_covered_by``'s reference path."""
    if not starts.size:
        return np.zeros(np.shape(lo), dtype=_U64)

    def below(x: np.ndarray) -> np.ndarray:
        j = np.searchsorted(starts, x, side="right").astype(np.intp) - 1
        safe = np.maximum(j, 0)
        within = np.minimum(x, ends[safe]) - np.minimum(x, starts[safe])
        return np.where(j >= 0, cumulative[safe] + within, _U64(0))

    return below(hi) - below(lo)


def difference(
    a_starts: np.ndarray, a_ends: np.ndarray, b_starts: np.ndarray, b_ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``A \\ B`` for two sorted, disjoint range lists, as a sorted, disjoint range list.

    A sweep over all boundaries: a point is kept while inside A and outside B.
    """
    if not a_starts.size or not b_starts.size:
        return a_starts.astype(_U64), a_ends.astype(_U64)
    points = np.concatenate((a_starts, a_ends, b_starts, b_ends)).astype(_U64)
    # +1 entering A, -1 leaving A; +2 entering B, -2 leaving B (decoded below from the running sums).
    delta_a = np.concatenate((np.ones(a_starts.size), -np.ones(a_ends.size), np.zeros(b_starts.size * 2)))
    delta_b = np.concatenate((np.zeros(a_starts.size * 2), np.ones(b_starts.size), -np.ones(b_ends.size)))
    order = np.argsort(points, kind="stable")
    points, delta_a, delta_b = points[order], delta_a[order], delta_b[order]
    # Apply every change at one point before judging the segment that follows it.
    last_at_point = np.ones(points.size, dtype=bool)
    last_at_point[:-1] = points[1:] != points[:-1]
    in_a = np.cumsum(delta_a)[last_at_point] > 0
    in_b = np.cumsum(delta_b)[last_at_point] > 0
    where = points[last_at_point]
    keep = in_a[:-1] & ~in_b[:-1]
    return merge_ranges(where[:-1][keep], where[1:][keep])
