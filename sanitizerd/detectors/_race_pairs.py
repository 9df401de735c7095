"""Candidate race pairs from one sweep over address-sorted byte ranges (reference §2.2's scanline, done whole).

Every access is cut into its exact byte ranges (strided patterns become their runs), and the ranges of one
address region (GM, or one block's UB, L1, ...) into elementary segments: maximal address intervals no range
boundary crosses. Within a segment the accesses are taken in an order that respects happens-before, and
each is paired with the last write before it, each read with the first write after it. This is FastTrack's
shadow (last write, reads since it) kept for every segment at once with two running extrema instead of a loop:
if an earlier access races with a later one, some adjacent pair in this order races too, so races are not
lost, only pairs that another reported race already shadows. Cost: O(R log R) for R incidences (access,
segment), which is about one per access for tiled kernels.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sanitizerd.detectors._patterns import ADDRESS_LIMIT, ranges

_LIMIT = np.uint64(ADDRESS_LIMIT)
_REGION_SHIFT = np.uint64(48)


def pieces(events: np.ndarray) -> np.ndarray:
    """The byte ranges each access becomes in the sweep (``_patterns.ranges``), at most: 1 for a dense access, one
    per repeat for contiguous rows, one per block otherwise. What the check's memory grows with, besides events."""
    block_num = events["block_num"].astype(np.int64)
    block_stride = events["block_stride"]
    repeat = events["repeat"].astype(np.int64)
    row_is_range = (block_num <= 1) | (block_stride <= 1)
    row_length = np.where((block_num <= 1) | (block_stride == 0), 1, block_num)
    dense = row_is_range & ((repeat <= 1) | (events["repeat_stride"] <= row_length))
    return np.where(dense, 1, np.maximum(repeat, 1) * np.where(row_is_range, 1, block_num))


class Segments:
    """The segment each candidate pair was found in; its address and size are worked out only for the pairs
    asked about (the few that race)."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray, segment: np.ndarray) -> None:
        self.starts, self.ends, self.segment = starts, ends, segment

    def __getitem__(self, rows: np.ndarray) -> Segments:
        return Segments(self.starts, self.ends, self.segment[rows])

    def start(self) -> np.ndarray:
        return self.starts[self.segment] & np.uint64(ADDRESS_LIMIT - 1)

    def size(self) -> np.ndarray:
        return self.ends[self.segment] - self.starts[self.segment]


def candidate_pairs(
    events: np.ndarray,
    ext: np.ndarray,
    index: np.ndarray,
    space: np.ndarray,
    region_block: np.ndarray,
    placed: np.ndarray,
    is_write: np.ndarray,
    order: np.ndarray,
    need: Callable[[int], None] = lambda incidences: None,
) -> list[tuple[np.ndarray, np.ndarray, Segments]]:
    """Pairs (a, b) of accesses that overlap and may race, with one segment each shares, in a few chunks.
    The accesses are ``events[index]`` (``ext``: every event's extent) and are named by their rank in ``index``;
    the other arrays are per access. ``region_block`` is the block owning the access's memory (-1 for GM);
    ``order`` lists the accesses in an order consistent with happens-before; unplaced accesses take no part.
    Ranges that overlap without coinciding are cut into segments, one incidence each: ``need`` is told how many
    there are beyond one per range before they exist (nested ranges make them quadratic), and raises to refuse."""
    n = index.size
    empty = np.empty(0, dtype=np.int64)
    none = Segments(np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.uint64), empty)
    if not n:
        return [(empty, empty, none)]
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    rank_of_event = np.full(events.size, -1, dtype=np.int64)
    rank_of_event[index] = np.arange(n)
    owner, start, stop = ranges(events, ext, None if placed.all() and index.size == events.size else index[placed])
    owner = rank_of_event[owner]
    if not owner.size:
        return [(empty, empty, none)]
    # GM is one region; each block's UB, L1, L0A/B/C... another.
    blocks = int(region_block.max()) + 2
    region = space[owner].astype(np.int64) * blocks + region_block[owner] + 1
    if int(region.max()) >= 1 << 16:  # more regions than 16 bits name (thousands of blocks): number them densely
        region = dense(region)[1]
    base = region.astype(np.uint64) << _REGION_SHIFT
    del region
    lo = base + np.minimum(start, _LIMIT)
    del start
    hi = base + np.minimum(stop, _LIMIT)
    del stop, base
    seg, who, starts, ends = _segments(lo, hi, owner, rank[owner], n, need)
    del lo, hi, owner, rank, rank_of_event  # the check's peak comes next: free what it does not need
    write = is_write[who]
    size = seg.size
    at = np.arange(size)

    last_write = np.maximum.accumulate(np.where(write, at, -1))
    before = np.concatenate(([-1], last_write[:-1]))
    ok = before >= 0
    ok[ok] = seg[before[ok]] == seg[ok]
    a1, b1, s1 = who[before[ok]], who[ok], seg[ok]

    next_write = np.minimum.accumulate(np.where(write, at, size)[::-1])[::-1]
    after = np.concatenate((next_write[1:], [size]))
    ok = ~write & (after < size)
    ok[ok] = seg[after[ok]] == seg[ok]
    a2, b2, s2 = who[ok], who[after[ok]], seg[ok]

    # A pair met in several segments comes out once per segment; the caller dedupes the few that race. The two
    # kinds of pair stay apart: joining millions of candidates only to keep a few is a copy for nothing.
    return [(a1, b1, Segments(starts, ends, s1)), (a2, b2, Segments(starts, ends, s2))]


def _segments(
    lo: np.ndarray, hi: np.ndarray, owner: np.ndarray, rank: np.ndarray, n: int, need: Callable[[int], None]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Incidences (segment, access) sorted by segment, then by ``rank``; and each segment's [start, end).

    Tiled kernels reuse buffers whole: every two ranges are equal or disjoint. Then the ranges themselves are
    the segments, and one sort by (start, rank) is all it takes. Otherwise the ranges are cut at every
    boundary and each range counts once per segment it covers."""
    by_rank = np.argsort(rank, kind="stable")
    o = by_rank[np.argsort(lo[by_rank], kind="stable")]
    lo_s, hi_s = lo[o], hi[o]
    new = np.ones(o.size, dtype=bool)
    new[1:] = lo_s[1:] != lo_s[:-1]
    same = ~new[1:]
    if (hi_s[1:][same] == hi_s[:-1][same]).all():
        reach = np.maximum.accumulate(hi_s)
        if (lo_s[1:][new[1:]] >= reach[:-1][new[1:]]).all():
            return np.cumsum(new) - 1, owner[o], lo_s[new], hi_s[new]
    bounds = np.sort(np.concatenate((lo, hi)))
    distinct = np.ones(bounds.size, dtype=bool)
    distinct[1:] = bounds[1:] != bounds[:-1]
    bounds = bounds[distinct]
    first = np.searchsorted(bounds, lo)
    count = np.searchsorted(bounds, hi) - first
    incidences = int(count.sum())
    if incidences > count.size:
        need(incidences - count.size)
    seg = np.repeat(first, count) + (np.arange(incidences) - np.repeat(np.cumsum(count) - count, count))
    who = np.repeat(owner, count)
    by = np.argsort(seg * n + np.repeat(rank, count), kind="stable")
    return seg[by], who[by], bounds[:-1], bounds[1:]


def dense(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, return_inverse=True)`` for small non-negative keys, in linear time."""
    if not keys.size:
        return keys, keys
    seen = np.zeros(int(keys.max()) + 1, dtype=np.int64)
    seen[keys] = 1
    return np.flatnonzero(seen), (np.cumsum(seen) - 1)[keys]
