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

import numpy as np

from sanitizerd.detectors._patterns import ADDRESS_LIMIT, ranges

_LIMIT = np.uint64(ADDRESS_LIMIT)
_REGION_SHIFT = np.uint64(48)


class Segments:
    """The segment each candidate pair was found in; its address and size are worked out only for the pairs
    asked about (the few that race)."""

    def __init__(self, bounds: np.ndarray, segment: np.ndarray) -> None:
        self.bounds, self.segment = bounds, segment

    def __getitem__(self, rows: np.ndarray) -> Segments:
        return Segments(self.bounds, self.segment[rows])

    def start(self) -> np.ndarray:
        return self.bounds[self.segment] & np.uint64(ADDRESS_LIMIT - 1)

    def size(self) -> np.ndarray:
        return self.bounds[self.segment + 1] - self.bounds[self.segment]


def candidate_pairs(
    events: np.ndarray,
    ext: np.ndarray,
    index: np.ndarray,
    space: np.ndarray,
    region_block: np.ndarray,
    placed: np.ndarray,
    is_write: np.ndarray,
    order: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, Segments]:
    """Pairs (a, b) of accesses that overlap and may race, with one segment each shares.
    The accesses are ``events[index]`` (``ext``: every event's extent) and are named by their rank in ``index``;
    the other arrays are per access. ``region_block`` is the block owning the access's memory (-1 for GM);
    ``order`` lists the accesses in an order consistent with happens-before; unplaced accesses take no part."""
    n = index.size
    empty = np.empty(0, dtype=np.int64)
    none = Segments(np.zeros(1, dtype=np.uint64), empty)
    if not n:
        return empty, empty, none
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    rank_of_event = np.full(events.size, -1, dtype=np.int64)
    rank_of_event[index] = np.arange(n)
    owner, start, stop = ranges(events, ext, index[placed])
    owner = rank_of_event[owner]
    if not owner.size:
        return empty, empty, none
    # GM is one region; each block's UB, L1, L0A/B/C... another.
    blocks = int(region_block.max()) + 2
    region = space[owner].astype(np.int64) * blocks + region_block[owner] + 1
    if int(region.max()) >= 1 << 16:  # more regions than 16 bits name (thousands of blocks): number them densely
        region = _dense(region)
    base = region.astype(np.uint64) << _REGION_SHIFT
    lo = base + np.minimum(start, _LIMIT)
    hi = base + np.minimum(stop, _LIMIT)
    bounds = np.sort(np.concatenate((lo, hi)))
    distinct = np.ones(bounds.size, dtype=bool)
    distinct[1:] = bounds[1:] != bounds[:-1]
    bounds = bounds[distinct]
    first = np.searchsorted(bounds, lo)
    count = np.searchsorted(bounds, hi) - first
    seg = np.repeat(first, count) + (np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count))
    who = np.repeat(owner, count)
    by = np.argsort(seg * n + rank[who], kind="stable")
    seg, who = seg[by], who[by]
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

    # A pair met in several segments comes out once per segment; the caller dedupes the few that race.
    a, b, s = np.concatenate((a1, a2)), np.concatenate((b1, b2)), np.concatenate((s1, s2))
    return a, b, Segments(bounds, s)


def _dense(keys: np.ndarray) -> np.ndarray:
    """Each key's rank among the distinct keys (small non-negative keys)."""
    if not keys.size:
        return keys
    seen = np.zeros(int(keys.max()) + 1, dtype=np.int64)
    seen[keys] = 1
    return (np.cumsum(seen) - 1)[keys]
