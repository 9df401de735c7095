"""Candidate race pairs from one sweep over address-sorted byte ranges (reference §2.2's scanline, done whole).

Every access is cut into its exact byte ranges (strided patterns become their runs), and the ranges of one
address region (GM, or one block's UB, L1, ...) into elementary segments: maximal address intervals no range
boundary crosses. Within a segment the accesses are taken in an order that respects happens-before and
grouped by site key (one instruction in one block). Each access is paired with the latest earlier access of
every group it conflicts with: msSanitizer compares an access with every open access of its segment, so
three pipes writing one byte are three races, not the two neighbouring ones. The latest access of a group
stands for the group's earlier ones: they ran on the same pipe of the same block before it, so whatever
orders it before the later access orders them too. Folding per site pair then makes a race repeated in a
loop one finding. Cost: O(R log R) for R incidences (access, segment), about one per access for tiled
kernels; segments of one or two keys (most) need only running extrema, the others a binary search per pair,
and pairs are at most the keys of the segment per incidence, which a loop does not grow (bounded by
MAX_SITES_PER_SEGMENT, past which a segment falls back to neighbouring pairs and the cut is reported).
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


MAX_SITES_PER_SEGMENT = 64  # distinct (instruction, block) keys each access of a segment is compared with
_PAIR_CHUNK = 1 << 22  # candidate pairs built at a time: bounds the temporaries of the search


class Cut:
    """Segments whose accesses came from more distinct keys than ``MAX_SITES_PER_SEGMENT``: there each access is
    compared with the latest access of the first keys only (writes first), and with its neighbours."""

    __slots__ = ("bound", "most", "segments")

    def __init__(self) -> None:
        self.segments = 0
        self.most = 0
        self.bound = 0


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
    *,
    key: np.ndarray | None = None,
    instruction: np.ndarray | None = None,
    need_pairs: Callable[[int], None] = lambda pairs: None,
    cut: Cut | None = None,
    max_sites: int | None = None,
    native: object | None = None,
    listed: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> list[tuple[np.ndarray, np.ndarray, Segments]]:
    """Pairs (a, b) of accesses that overlap and may race, with one segment each shares, in a few chunks.
    The accesses are ``events[index]`` (``ext``: every event's extent) and are named by their rank in ``index``;
    the other arrays are per access. ``region_block`` is the block owning the access's memory (-1 for GM);
    ``order`` lists the accesses in an order consistent with happens-before; unplaced accesses take no part.
    Ranges that overlap without coinciding are cut into segments, one incidence each: ``need`` is told how many
    there are beyond one per range before they exist (nested ranges make them quadratic), and raises to refuse.

    ``key`` (per access, small non-negative ints, writes numbered below reads) names what folds into one finding
    side: an instruction in one block. Within a segment each access is paired with the latest earlier access of
    every other key it conflicts with (and the latest earlier one of its own key), so every racing pair of
    distinct sites is found, not only neighbouring ones: if an earlier access of a key races with a later one,
    so does that key's latest access before it (same block and pipe: it completes later, is nearer, no barrier
    between). At most ``max_sites`` (default MAX_SITES_PER_SEGMENT) keys per segment; ``cut`` counts the
    segments with more. ``instruction`` (per access, one value per instruction of one block): an instruction's own
    other event is skipped for the one before.
    ``need_pairs`` is told how many pairs there are: a search's before they are built (up to ``max_sites`` per
    incidence), the fast path's (two per incidence at most) once built. Without ``key``: neighbours only (the
    last write before each access, the first write after each read). ``native``: the compiled module
    (sanitizerd/native/_racecheck.c), whose ``site_pairs`` searches the segments of one or two keys; None: numpy.
    ``listed``: ``ranges(events, ext, index)`` where the caller has them (every access's, placed or not)."""
    n = index.size
    empty = np.empty(0, dtype=np.int64)
    none = Segments(np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.uint64), empty)
    if not n:
        return [(empty, empty, none)]
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    rank_of_event = np.full(events.size, -1, dtype=np.int64)
    rank_of_event[index] = np.arange(n)
    if listed is None:
        owner, start, stop = ranges(
            events, ext, None if placed.all() and index.size == events.size else index[placed], native
        )  # fmt: skip
    else:  # every access's, listed by the caller: the unplaced are left out here
        owner, start, stop = listed
        if not placed.all():
            kept = placed[rank_of_event[owner]]
            owner, start, stop = owner[kept], start[kept], stop[kept]
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
    seg, who, starts, ends = _segments(lo, hi, owner, rank[owner], n, need, native)
    del lo, hi, owner, rank_of_event  # the check's peak comes next: free what it does not need
    if key is None:
        del rank
        return _neighbours(seg, who, is_write, starts, ends)
    assert instruction is not None
    bound = MAX_SITES_PER_SEGMENT if max_sites is None else max_sites
    return _site_pairs(
        seg, who, rank, key, is_write, instruction, starts, ends, need_pairs, cut or Cut(), bound, native
    )


def _neighbours(
    seg: np.ndarray, who: np.ndarray, is_write: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> list[tuple[np.ndarray, np.ndarray, Segments]]:
    """Incidences sorted by (segment, rank): each access with the last write before it, each read with the first
    write after it. FastTrack's shadow kept for every segment at once with two running extrema."""
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


def _site_pairs(
    seg: np.ndarray,
    who: np.ndarray,
    rank: np.ndarray,
    key: np.ndarray,
    is_write: np.ndarray,
    instruction: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    need_pairs: Callable[[int], None],
    cut: Cut,
    max_sites: int,
    native: object | None = None,
) -> list[tuple[np.ndarray, np.ndarray, Segments]]:
    """Incidences sorted by (segment, rank). Most segments are touched by one or two keys (a buffer one pipe
    fills and another drains, loop after loop): there the latest earlier access of the other key is the one just
    before the current run of equal keys, and of its own key the one before it (or before the other key's run
    in between), all found with running extrema in this order. Segments of three keys or more go to the
    general search (``_group_pairs``), in (segment, key, rank) order. ``native``: the segments of one or two
    keys searched in one compiled pass (``_racecheck.site_pairs``), as the numpy steps below search them."""

    def general_pairs(general: np.ndarray) -> list[tuple[np.ndarray, np.ndarray, Segments]]:
        """The pairs of the ``general`` incidences (segments of three keys or more), by ``_group_pairs``."""
        if not general.any():
            return []
        sub = np.flatnonzero(general)
        sub = sub[np.lexsort((rank[who[sub]], key[who[sub]], seg[sub]))]
        return _group_pairs(
            seg[sub], who[sub], rank, key, is_write, instruction, starts, ends, need_pairs, cut, max_sites
        )

    if native is not None:
        general = np.empty(seg.size, dtype=bool)
        found = np.empty((4, seg.size), dtype=np.int64)
        others, owns = native.site_pairs(  # type: ignore[attr-defined]
            np.ascontiguousarray(seg, dtype=np.int64), np.ascontiguousarray(who, dtype=np.int64),
            np.ascontiguousarray(key, dtype=np.int64), np.ascontiguousarray(is_write, dtype=bool),
            np.ascontiguousarray(instruction, dtype=np.int64), general, found,
        )  # fmt: skip
        chunks = general_pairs(general)
        need_pairs(others + owns)
        for a, b in ((found[0, :others], found[1, :others]), (found[2, :owns], found[3, :owns])):
            chunks.append((who[a], who[b], Segments(starts, ends, seg[b])))
        return chunks
    size = seg.size
    at = np.arange(size)
    kw = key[who]
    seg_new = np.ones(size, dtype=bool)
    seg_new[1:] = seg[1:] != seg[:-1]
    seg_starts = np.flatnonzero(seg_new)
    s_of_inc = np.cumsum(seg_new) - 1
    seg_first = seg_starts[s_of_inc]
    run_new = seg_new.copy()
    run_new[1:] |= kw[1:] != kw[:-1]
    run_start = np.maximum.accumulate(np.where(run_new, at, 0))
    del run_new
    # Segments with a third key: the first key of the segment, the first other one, then any other still.
    other = kw != kw[seg_first]
    first_other = np.minimum.reduceat(np.where(other, at, size - 1), seg_starts)
    third = other & (kw != kw[first_other[s_of_inc]])
    many = np.logical_or.reduceat(third, seg_starts)
    del other, first_other, third
    general = many[s_of_inc]
    chunks = general_pairs(general)
    write = is_write[who]
    ser = instruction[who]

    def before_of_same_key(p: np.ndarray, ok: np.ndarray) -> np.ndarray:
        """The incidence before ``p`` with the same key, in a segment of at most two keys (-1: none)."""
        at_p = np.maximum(p, 0)
        q = p - 1
        first = seg_first[at_p]
        jump = ok & (q >= first) & (q < run_start[at_p])  # p starts its run: skip the other key's run before it
        q[jump] = run_start[q[jump]] - 1
        return np.where(ok & (p >= 0) & (q >= first), q, -1)

    def skip_same_instruction(p: np.ndarray, t: np.ndarray) -> np.ndarray:
        for _ in range(2):  # an instruction's other event (a vector op reading what it writes), twice at most
            same = p >= 0
            same[same] = ser[p[same]] == ser[t[same]]
            if not same.any():
                break
            p[same] = before_of_same_key(p[same], np.ones(int(same.sum()), dtype=bool))
        return p

    plain = ~general
    # The other key: the incidence just before this run.
    p = run_start - 1
    ok = plain & (p >= seg_first)
    ok[ok] = write[ok] | write[p[ok]]
    t = np.flatnonzero(ok)
    p = skip_same_instruction(p[t], t)
    keep = p >= 0
    a_other, b_other = p[keep], t[keep]
    # Its own key, for a write.
    t = np.flatnonzero(plain & write)
    p = skip_same_instruction(before_of_same_key(t, np.ones(t.size, dtype=bool)), t)
    keep = p >= 0
    a_own, b_own = p[keep], t[keep]
    need_pairs(a_other.size + a_own.size)  # two per incidence at most, as a held event's reservation assumes
    for a, b in ((a_other, b_other), (a_own, b_own)):
        chunks.append((who[a], who[b], Segments(starts, ends, seg[b])))
    return chunks


def _group_pairs(
    seg: np.ndarray,
    who: np.ndarray,
    rank: np.ndarray,
    key: np.ndarray,
    is_write: np.ndarray,
    instruction: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    need_pairs: Callable[[int], None],
    cut: Cut,
    max_sites: int,
) -> list[tuple[np.ndarray, np.ndarray, Segments]]:
    """Incidences sorted by (segment, key, rank): runs of one (segment, key) are the groups. Each incidence is
    paired with the incidence before it in its own group (a write only: reads do not race with reads) and asks
    every other conflicting group of its segment for that group's latest incidence of lower rank: one binary
    search in (group, rank) order. So the pairs are (incidences x groups per segment), linear in the events when
    the same instructions repeat (a loop adds accesses, not keys)."""
    size = seg.size
    n = np.int64(rank.size)
    r = rank[who]
    new = np.ones(size, dtype=bool)
    new[1:] = (seg[1:] != seg[:-1]) | (key[who[1:]] != key[who[:-1]])
    gstart = np.flatnonzero(new)
    gid = np.cumsum(new) - 1
    del new
    g_seg = seg[gstart]
    g_write = is_write[who[gstart]]
    # Per segment: its first group, how many, how many write groups (writes are numbered first).
    first = np.ones(gstart.size, dtype=bool)
    first[1:] = g_seg[1:] != g_seg[:-1]
    s_first = np.flatnonzero(first)
    del first, g_seg
    s_count = np.diff(np.append(s_first, gstart.size))
    wsum = np.concatenate(([0], np.cumsum(g_write)))
    s_writes = wsum[s_first + s_count] - wsum[s_first]
    del wsum
    seg_start = np.zeros(size, dtype=np.int64)
    seg_start[gstart[s_first]] = 1
    s_of_inc = np.cumsum(seg_start) - 1  # incidences are sorted by segment
    del seg_start
    over = s_count > max_sites
    if over.any():
        cut.bound = max_sites
        cut.segments += int(over.sum())
        cut.most = max(cut.most, int(s_count.max()))
    write = is_write[who]
    at = np.arange(size)
    # Own group: the incidence before (and the one before that when it is the same instruction's other event).
    own_slot = gid - s_first[s_of_inc]
    prev = at - 1
    own = write & (prev >= 0) & (own_slot < max_sites)
    own[own] = gid[prev[own]] == gid[own]
    same = own.copy()
    same[same] = instruction[who[prev[same]]] == instruction[who[same]]
    prev[same] -= 1
    own[same] = prev[same] >= gstart[gid[same]]
    del same
    b_own, a_own = who[own], who[prev[own]]
    s_own = seg[own]
    del prev, own
    # Other groups: writes ask every group of the segment but their own, reads the write groups.
    counted = np.minimum(np.where(write, s_count[s_of_inc], s_writes[s_of_inc]), max_sites)
    skip = write & (own_slot < counted)
    count = counted - skip
    del counted
    total = int(count.sum())
    need_pairs(total + a_own.size)
    sorted_key = gid * n + r  # ascending: by group, then rank
    chunks: list[tuple[np.ndarray, np.ndarray, Segments]] = [(a_own, b_own, Segments(starts, ends, s_own))]
    ends_at = np.cumsum(count)
    lo = 0
    while lo < size and total:
        hi = int(np.searchsorted(ends_at, ends_at[lo] - count[lo] + _PAIR_CHUNK, side="right"))
        hi = max(hi, lo + 1)
        c = count[lo:hi]
        q_inc = np.repeat(at[lo:hi], c)
        k = np.arange(q_inc.size) - np.repeat(np.cumsum(c) - c, c)
        k += skip[q_inc] & (k >= own_slot[q_inc])
        q_group = s_first[s_of_inc[q_inc]] + k
        del k
        p = np.searchsorted(sorted_key, q_group * n + r[q_inc]) - 1
        ok = p >= gstart[q_group]
        # The latest may be the same instruction's other event (a vector op reading what it writes): take the one
        # before it (twice: an instruction may read one segment twice).
        for _ in range(2):
            same = ok & (instruction[who[np.maximum(p, 0)]] == instruction[who[q_inc]])
            if not same.any():
                break
            p[same] -= 1
            ok[same] = p[same] >= gstart[q_group[same]]
        q_inc, p = q_inc[ok], p[ok]
        chunks.append((who[p], who[q_inc], Segments(starts, ends, seg[q_inc])))
        lo = hi
    if over.any():  # past the bound: neighbouring pairs still, so that no race goes unreported there
        sub = np.flatnonzero(over[s_of_inc])
        sub = sub[np.lexsort((r[sub], seg[sub]))]
        chunks.extend(_neighbours(seg[sub], who[sub], is_write, starts, ends))
    return chunks


def _segments(
    lo: np.ndarray, hi: np.ndarray, owner: np.ndarray, rank: np.ndarray, n: int, need: Callable[[int], None],
    native: object | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """Incidences (segment, access) sorted by segment, then by ``rank``; and each segment's [start, end).

    Tiled kernels reuse buffers whole: every two ranges are equal or disjoint. Then the ranges themselves are
    the segments, and one sort by (start, rank) is all it takes (the compiled radix sort where ``native`` is
    given). Otherwise the ranges are cut at every boundary and each range counts once per segment it covers."""
    by_rank = _by_rank(rank, native)
    if native is not None:
        o = np.empty(by_rank.size, dtype=np.int64)
        native.sort_by(lo, by_rank, o)  # type: ignore[attr-defined]
        seg, who = np.empty(o.size, dtype=np.int64), np.empty(o.size, dtype=np.int64)
        starts, ends = np.empty(o.size, dtype=np.uint64), np.empty(o.size, dtype=np.uint64)
        owners = np.ascontiguousarray(owner, dtype=np.int64)
        count = native.segments(lo, hi, owners, o, seg, who, starts, ends)  # type: ignore[attr-defined]
        if count >= 0:  # the check below, in one pass
            return seg, who, starts[:count].copy(), ends[:count].copy()
        del seg, who, starts, ends
    else:
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


def _by_rank(rank: np.ndarray, native: object | None = None) -> np.ndarray:
    """``np.argsort(rank, kind="stable")``; without a sort when the ranks are 0, 1, ... each once (every access one
    range, as in tiled kernels), the common case: compiled where ``native`` is given."""
    m = rank.size
    if native is not None and m:
        order = np.empty(m, dtype=np.int64)
        if native.by_rank(np.ascontiguousarray(rank, dtype=np.int64), order):  # type: ignore[attr-defined]
            return order
        return np.argsort(rank, kind="stable")
    if m and int(rank.min()) == 0 and int(rank.max()) == m - 1:
        order = np.zeros(m, dtype=np.int64)
        order[rank] = np.arange(m)
        if np.array_equal(rank[order], np.arange(m)):  # every rank found where it was put: each is there once
            return order
    return np.argsort(rank, kind="stable")


# ``dense`` counts in a table while it is at most this many entries per key, plus the least: a few times the keys.
_DENSE_TABLE_PER_KEY, _DENSE_TABLE_LEAST = 8, 1 << 16


def dense(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, return_inverse=True)`` for non-negative int64 keys: in linear time where they are few
    beside their count (a table of the largest one's size), by np.unique's sort otherwise (a table of 2**24
    entries for one large key would take 128 MB)."""
    if not keys.size:
        return keys, keys
    if int(keys.max()) >= _DENSE_TABLE_PER_KEY * keys.size + _DENSE_TABLE_LEAST:
        unique, inverse = np.unique(keys, return_inverse=True)
        return unique, inverse.reshape(-1)
    seen = np.zeros(int(keys.max()) + 1, dtype=np.int64)
    seen[keys] = 1
    return np.flatnonzero(seen), (np.cumsum(seen) - 1)[keys]
