"""Sets of byte ranges as sorted, disjoint numpy arrays, queried for a whole batch at once.

Used for the GM ranges a session may legally touch and for the bytes it has written. Queries are
vectorised: one ``searchsorted`` per batch, never a Python loop over accesses.
"""

from __future__ import annotations

import numpy as np

_U64 = np.uint64
# Disjoint ranges one detector's byte-range state (bytes written, defined, owned) may hold. Kernels rewrite
# their buffers, so ordinary state stays far below; a pattern fragmenting it further stops that tracking, and
# the session is told so. About 24 bytes a range at rest, a few times that while merging.
MAX_TRACKED_RANGES = 1 << 21


def merge_ranges(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of ``[starts[i], ends[i])``: sorted, disjoint, touching ranges joined. Empty ranges vanish."""
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


class IntervalSet:
    """A mutable set of byte ranges; mutations are rare (host operations), queries are per batch."""

    __slots__ = ("_cumulative", "ends", "starts")

    def __init__(self, starts: np.ndarray | None = None, ends: np.ndarray | None = None) -> None:
        if starts is None or ends is None:
            starts = ends = np.empty(0, dtype=_U64)
        self.starts, self.ends = merge_ranges(np.asarray(starts), np.asarray(ends))
        self._refresh()

    def _refresh(self) -> None:
        # _cumulative[i] = bytes in ranges before i, so coverage below x is one lookup.
        lengths = self.ends - self.starts
        self._cumulative = np.concatenate(([0], np.cumsum(lengths, dtype=_U64))).astype(_U64)

    def __len__(self) -> int:
        return int(self.starts.size)

    @property
    def total(self) -> int:
        return int(self._cumulative[-1])

    def add(self, starts: np.ndarray, ends: np.ndarray) -> None:
        self.starts, self.ends = merge_ranges(
            np.concatenate((self.starts, np.asarray(starts, dtype=_U64))),
            np.concatenate((self.ends, np.asarray(ends, dtype=_U64))),
        )
        self._refresh()

    def add_new(self, starts: np.ndarray, ends: np.ndarray) -> None:
        """``add``, skipping ranges the set already holds: in steady state most writes rewrite defined bytes,
        and one lookup is far cheaper than merging them in again."""
        if not starts.size:
            return
        fresh = ~self.contains(starts, ends)
        if fresh.any():
            self.add(starts[fresh], ends[fresh])

    def remove(self, start: int, end: int) -> None:
        """Take ``[start, end)`` out of the set."""
        if end <= start or not len(self):
            return
        s, e = self.starts, self.ends
        left_starts, left_ends = s[s < start], np.minimum(e[s < start], _U64(start))
        right_starts, right_ends = np.maximum(s[e > end], _U64(end)), e[e > end]
        self.starts, self.ends = merge_ranges(
            np.concatenate((left_starts, right_starts)), np.concatenate((left_ends, right_ends))
        )
        self._refresh()

    def subtract(self, starts: np.ndarray, ends: np.ndarray) -> None:
        """Take sorted, disjoint ranges out of the set."""
        if len(self) and starts.size:
            self.starts, self.ends = difference(self.starts, self.ends, starts, ends)
            self._refresh()

    def _below(self, x: np.ndarray) -> np.ndarray:
        """Bytes of the set strictly below each ``x``."""
        j = np.searchsorted(self.starts, x, side="right").astype(np.intp) - 1
        safe = np.maximum(j, 0)
        within = np.minimum(x, self.ends[safe]) - np.minimum(x, self.starts[safe])
        below = self._cumulative[safe] + within
        return np.where(j >= 0, below, _U64(0))

    def covered(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Bytes of each ``[lo, hi)`` inside the set."""
        if not len(self):
            return np.zeros(np.shape(lo), dtype=_U64)
        return self._below(hi) - self._below(lo)

    def contains(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Whether each non-empty ``[lo, hi)`` lies wholly inside one range of the set."""
        if not len(self):
            return np.zeros(np.shape(lo), dtype=bool)
        j = np.searchsorted(self.starts, lo, side="right").astype(np.intp) - 1
        return (j >= 0) & (hi <= self.ends[np.maximum(j, 0)])


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
