"""An access pattern as a few strided runs, and closed forms over them: no pattern is ever materialised.

A record's pattern can name 65 535 x 65 535 blocks in 56 bytes; expanding it block by block costs tens of GB.
Its blocks lie on a lattice (``address + (r*repeat_stride + i*block_stride) * block_size``), so they can be
written as at most ``min(repeat, block_num)`` runs, each ``count`` pieces of ``size`` bytes ``step`` bytes
apart (``step >= size``), the runs of one access disjoint. The pieces are the ones ``_patterns.expand`` lists:
the whole extent of a dense access, one row of a contiguous-rows access, one block of a scattered one.

How much of a run a set of byte ranges covers, and its first piece the set does not wholly hold, are closed
forms per (run, set range) pair; the pairs are taken in chunks of bounded size. Where pieces must be listed
(to record writes), ``piece_chunks`` lists them a bounded chunk at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np

from sanitizerd.detectors import _intervals
from sanitizerd.detectors._batches import records_of
from sanitizerd.detectors._intervals import IntervalSet
from sanitizerd.detectors._patterns import ends, ranges
from sanitizerd_protocol.patterns import pattern_shape, piece_counts

_U64 = np.uint64
_MAX = np.iinfo(np.uint64).max
# Pieces (or run/range pairs) handled at once: bounds the memory of one step whatever the pattern.
CHUNK = 1 << 18
# Pieces a batch's GM writes may list at once, stomping's and unused-memory's common path, sized by memory: a listed
# piece costs about 160 bytes at the peak of a stomping check (tracemalloc, 2**20 pieces of 8 x 8 scattered blocks:
# 158 MiB), so 2**19 stay near 80 MiB. Past it the writes go as runs, CHUNK pieces at a time; below it that path's
# per-chunk closed forms and flushes cost more than listing (issue 29: strided writes at 2**18 ran 0.9x of listing).
LISTING_BUDGET_BYTES = 80 << 20
LIST_AT_ONCE = 1 << ((LISTING_BUDGET_BYTES // 160).bit_length() - 1)
# (run, range) pairs the closed forms may walk over one batch: CPU, not memory (pairs are taken CHUNK at a time),
# about a second. Ordinary patterns meet a few ranges per run; 65 535 runs that each span thousands of
# allocations pass it, and the caller says what it could not check.
MAX_PAIRS = 1 << 24


class PatternTooComplex(Exception):
    """A closed form would walk more (run, range) pairs than its batch has left."""

    def __init__(self, pairs: int) -> None:
        super().__init__(f"{pairs} (block run, byte range) pairs, past the {MAX_PAIRS} a batch may walk")
        self.pairs = pairs


class PairBudget:
    """The (run, range) pairs one batch's closed forms may still walk."""

    __slots__ = ("left",)

    def __init__(self) -> None:
        self.left = MAX_PAIRS

    def spend(self, pairs: int) -> None:
        if pairs > self.left:
            raise PatternTooComplex(pairs)
        self.left -= pairs


@dataclass(frozen=True, slots=True)
class Runs:
    """Strided runs: ``owner`` (index of the access they belong to), ``first`` byte address of piece 0 (2**64 - 1
    when past every address), ``step`` bytes between pieces, ``count`` pieces, ``size`` bytes per piece."""

    owner: np.ndarray
    first: np.ndarray
    step: np.ndarray
    count: np.ndarray
    size: np.ndarray

    def __len__(self) -> int:
        return int(self.owner.size)

    def take(self, rows: np.ndarray | slice) -> Runs:
        return Runs(self.owner[rows], self.first[rows], self.step[rows], self.count[rows], self.size[rows])

    @property
    def pieces(self) -> int:
        return int(self.count.sum()) if len(self) else 0


def _offset(address: np.ndarray, units: np.ndarray, unit_size: np.ndarray) -> np.ndarray:
    """``address + units * unit_size``, saturating at 2**64 - 1 instead of wrapping round."""
    address, units, unit_size = address.astype(_U64), units.astype(_U64), unit_size.astype(_U64)
    room = (_U64(_MAX) - address) // np.maximum(unit_size, _U64(1))
    return np.where(units > room, _U64(_MAX), address + units * unit_size)


def line_counts(events: np.ndarray, ext: np.ndarray) -> np.ndarray:
    """Runs each access is built from (before coinciding runs are joined): what ``runs`` will allocate."""
    block_num = events["block_num"].astype(np.int64)
    block_stride = events["block_stride"].astype(np.int64)
    repeat = events["repeat"].astype(np.int64)
    repeat_stride = events["repeat_stride"].astype(np.int64)
    scattered = (block_num > 1) & (block_stride > 1) & (ext > 0)
    rows = np.where(repeat_stride == 0, 1, repeat)
    return np.where(scattered, np.minimum(rows, block_num), 1)


def lists_few_pieces(events: np.ndarray, ext: np.ndarray, index: np.ndarray, limit: int) -> bool:
    """Whether the accesses at ``index`` list at most ``limit`` pieces in all: the common case, where they are
    listed at once. An upper bound settles most batches without the exact count, whose field reads over every
    record cost more than the check they guard: repeat x the blocks of a scattered row."""
    if index.size > limit:
        return False
    # Only blocks of a scattered row (block_stride > 1) are pieces apart; a contiguous row is at most one piece
    # (a DataCopy's 32-byte blocks of one tile are one piece, not 16).
    repeat = np.maximum(events["repeat"][index], 1).astype(np.int64)
    scattered = events["block_stride"][index] > 1
    if scattered.any():
        repeat[scattered] *= np.maximum(events["block_num"][index[scattered]], 1)
    return int(repeat.sum()) <= limit or int(piece_counts(events, ext, index).sum()) <= limit


def piece_bounds(events: np.ndarray, ext: np.ndarray, index: np.ndarray, *, exact_above: int | None) -> np.ndarray:
    """Per access at ``index``, an upper bound of the pieces it lists: repeat x block_num, which costs two field
    reads; exact (``piece_counts``) for the accesses whose bound is above ``exact_above``, where the difference
    matters (a wide access is often one range). Groups cut by these bounds hold at most as many pieces."""
    bound = np.maximum(events["repeat"][index], 1).astype(np.int64) * np.maximum(events["block_num"][index], 1)
    if exact_above is not None:
        wide = np.flatnonzero(bound > exact_above)
        if wide.size:
            bound[wide] = piece_counts(events, ext, index[wide])
    return bound


def runs(events: np.ndarray, ext: np.ndarray) -> Runs:
    """Every access of ``events`` as disjoint strided runs, sorted by owner. Memory: ``line_counts(...).sum()``
    runs, at most ``min(repeat, block_num)`` per access, never one entry per block."""
    address = events["address"].astype(_U64)
    block_size = events["block_size"].astype(_U64)
    block_num = events["block_num"].astype(np.int64)
    block_stride = events["block_stride"].astype(np.int64)
    repeat = events["repeat"].astype(np.int64)
    repeat_stride = events["repeat_stride"].astype(np.int64)
    row_is_range, row_length, dense = pattern_shape(events, ext)
    parts: list[Runs] = []
    simple = np.flatnonzero(row_is_range | dense)
    if simple.size:
        # A dense access is one piece, its extent; contiguous rows with gaps are one run of rows.
        d = dense[simple]
        parts.append(
            Runs(
                owner=simple,
                first=address[simple],
                step=np.where(d, _U64(0), repeat_stride[simple].astype(_U64) * block_size[simple]),
                count=np.where(d, 1, repeat[simple]).astype(_U64),
                size=np.where(d, ext[simple], row_length[simple]).astype(_U64),
            )
        )
    scattered = np.flatnonzero(~(row_is_range | dense))
    if scattered.size:
        parts.append(_scattered_runs(scattered, address, block_size, block_num, block_stride, repeat, repeat_stride))
    if not parts:
        empty = np.empty(0, _U64)
        return Runs(np.empty(0, np.intp), empty, empty, empty, empty)
    joined = Runs(*(np.concatenate([getattr(p, f) for p in parts]) for f in Runs.__slots__))
    order = np.argsort(joined.owner, kind="stable")
    return joined.take(order)


def _scattered_runs(
    index: np.ndarray,
    address: np.ndarray,
    block_size: np.ndarray,
    block_num: np.ndarray,
    block_stride: np.ndarray,
    repeat: np.ndarray,
    repeat_stride: np.ndarray,
) -> Runs:
    """Blocks of scattered accesses as runs. Take the pattern as ``lines`` arithmetic progressions of units
    (rows: start ``r * repeat_stride``, step ``block_stride``; or columns: start ``i * block_stride``, step
    ``repeat_stride``, whichever are fewer). Two lines share blocks only if their starts agree modulo the step;
    within one such class a line covers a range of lattice positions, and overlapping ranges join exactly."""
    a, b = address[index], block_size[index]
    n_blocks, s_blocks = block_num[index], block_stride[index]
    n_rows = np.where(repeat_stride[index] == 0, 1, repeat[index])  # rows that coincide are one row
    s_rows = repeat_stride[index]
    by_rows = n_rows <= n_blocks
    lines = np.where(by_rows, n_rows, n_blocks)
    length = np.where(by_rows, n_blocks, n_rows)  # lattice positions per line
    along = np.where(by_rows, s_blocks, s_rows)  # step of a line, in units (>= 1 when length > 1)
    across = np.where(by_rows, s_rows, s_blocks)  # step between line starts, in units
    along = np.maximum(along, 1)
    owner = np.repeat(np.arange(index.size), lines)
    line = np.arange(owner.size) - np.repeat(np.cumsum(lines) - lines, lines)
    start_unit = line * across[owner]
    step = along[owner]
    residue, position = start_unit % step, start_unit // step
    order = np.lexsort((position, residue, owner))
    owner, residue, position = owner[order], residue[order], position[order]
    span = length[owner]
    breaks = np.ones(owner.size, dtype=bool)
    breaks[1:] = (owner[1:] != owner[:-1]) | (residue[1:] != residue[:-1]) | (position[1:] > position[:-1] + span[:-1])
    head = np.flatnonzero(breaks)
    tail = np.append(head[1:] - 1, owner.size - 1)
    owner_h = owner[head]
    first_unit = residue[head] + position[head] * step[order][head]
    count = position[tail] + span[tail] - position[head]
    size = b[owner_h]
    return Runs(
        owner=index[owner_h],
        first=_offset(a[owner_h], first_unit, size),
        step=(along[owner_h].astype(_U64) * size),
        count=count.astype(_U64),
        size=size,
    )


def _limit_below(runs: Runs, horizon: int) -> np.ndarray:
    """Pieces of each run that start below ``horizon`` (no arithmetic past it can overflow)."""
    below = runs.first < _U64(horizon)
    gap = np.where(below, _U64(horizon) - np.minimum(runs.first, _U64(horizon)), _U64(0))
    step = np.maximum(runs.step, _U64(1))
    reach = (gap + step - _U64(1)) // step
    return np.where(below, np.minimum(runs.count, np.where(runs.step == 0, _U64(1), reach)), _U64(0))


def below(runs: Runs, horizon: int) -> Runs:
    """The runs cut to their pieces that start below ``horizon``; runs left empty dropped."""
    count = _limit_below(runs, horizon)
    return replace(runs, count=count).take(count > 0)


def inside_or_none(runs: Runs, covered_by: IntervalSet, horizon: int, budget: PairBudget) -> np.ndarray | None:
    """``coverage``'s bytes inside, or None when that would walk more than MAX_PAIRS pairs (for callers that
    only use it to skip work, and can do without)."""
    try:
        return coverage(runs, covered_by, horizon, budget)[0]
    except PatternTooComplex:
        return None


def coverage(runs: Runs, covered_by: IntervalSet, horizon: int, budget: PairBudget) -> tuple[np.ndarray, np.ndarray]:
    """For each run: bytes of it inside ``covered_by`` (whose ranges lie below ``horizon``; bytes past it count as
    outside), and the address of its first piece not wholly inside (2**64 - 1 when every piece is). Raises
    PatternTooComplex when its (run, range) pairs pass what ``budget`` has left."""
    m = len(runs)
    inside = np.zeros(m, dtype=_U64)
    first_bad = runs.first.copy()
    if not m or not len(covered_by):
        first_bad[runs.count == 0] = _MAX
        return inside, first_bad
    usable = _limit_below(runs, horizon).astype(np.int64)
    f = np.minimum(runs.first, _U64(horizon)).astype(np.int64)
    step = runs.step.astype(np.int64)
    size = runs.size.astype(np.int64)
    reach_end = f + np.maximum(usable - 1, 0) * step + size
    starts, stops = covered_by.starts, covered_by.ends
    lo_j = np.searchsorted(stops, f.astype(_U64), side="right")
    hi_j = np.searchsorted(starts, reach_end.astype(_U64), side="left")
    pairs = np.where(usable > 0, np.maximum(hi_j - lo_j, 0), 0)
    budget.spend(int(pairs.sum()))
    bad_k = np.zeros(m, dtype=np.int64)
    # Runs with no pair have their first piece outside; the others are taken in chunks of about CHUNK pairs (a
    # single run meets at most every range of the set).
    ends_at = np.cumsum(pairs)
    begin = int(np.searchsorted(ends_at, 0, side="right"))
    while begin < m:
        base = int(ends_at[begin - 1]) if begin else 0
        stop = min(max(int(np.searchsorted(ends_at, base + CHUNK, side="right")), begin + 1), m)
        _pair_chunk(np.arange(begin, stop), pairs, lo_j, f, step, size, usable, starts, stops, inside, bad_k, horizon)
        begin = stop
    count = runs.count.astype(np.int64)
    whole = bad_k >= count
    first_bad = np.where(
        whole, _U64(_MAX), _offset(runs.first, bad_k.astype(_U64), np.maximum(runs.step, _U64(1)) * (bad_k > 0))
    )
    return inside, first_bad


def _pair_chunk(
    rows: np.ndarray,
    pairs: np.ndarray,
    lo_j: np.ndarray,
    f: np.ndarray,
    step: np.ndarray,
    size: np.ndarray,
    usable: np.ndarray,
    starts: np.ndarray,
    stops: np.ndarray,
    inside: np.ndarray,
    bad_k: np.ndarray,
    horizon: int,
) -> None:
    counts = pairs[rows]
    run = np.repeat(rows, counts)
    if not run.size:
        return
    j = np.arange(run.size) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(lo_j[rows], counts)
    a = np.minimum(starts[j], _U64(horizon)).astype(np.int64)
    b = np.minimum(stops[j], _U64(horizon)).astype(np.int64)
    fr, s, z, c = f[run], np.maximum(step[run], 1), size[run], usable[run]

    def below(x: np.ndarray) -> np.ndarray:
        # Bytes of the run below x: every piece that starts below x is whole but the last one.
        y = np.maximum(x - fr, 0)
        started = np.minimum(c, (y + s - 1) // s)
        last = started - 1
        return np.where(started > 0, last * z + np.minimum(y - last * s, z), 0)

    heads_all = np.flatnonzero(np.diff(run, prepend=-1))
    inside[run[heads_all]] += np.add.reduceat((below(b) - below(a)).astype(_U64), heads_all)
    # Pieces wholly inside range j: k in [k_lo, k_hi). They are sorted and disjoint along each run; the first
    # piece outside is where the chain of touching k-ranges that starts at 0 ends.
    k_lo = np.minimum(np.maximum((a - fr + s - 1) // s, 0), c)
    k_hi = np.minimum(np.where(b - z >= fr, (b - z - fr) // s + 1, 0), c)
    keep = k_hi > k_lo
    run, k_lo, k_hi = run[keep], k_lo[keep], k_hi[keep]
    if not run.size:
        return
    new_run = np.ones(run.size, dtype=bool)
    new_run[1:] = run[1:] != run[:-1]
    chained = np.zeros(run.size, dtype=bool)
    chained[1:] = ~new_run[1:] & (k_lo[1:] == k_hi[:-1])
    breaks = np.flatnonzero(~chained)
    heads = np.flatnonzero(new_run)
    following = np.searchsorted(breaks, heads, side="right")
    end_of_chain = np.where(following < breaks.size, breaks[np.minimum(following, breaks.size - 1)], run.size) - 1
    bad_k[run[heads]] = np.where(k_lo[heads] == 0, k_hi[end_of_chain], 0)


def piece_chunks(runs: Runs, limit: int = CHUNK) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The runs' pieces as (owner, start, stop), at most ``2 * limit`` at a time: long runs are cut into runs of
    at most ``limit`` pieces first. Starts and stops saturate at 2**64 - 1."""
    if not len(runs):
        return
    count = runs.count.astype(np.int64)
    parts = np.maximum((count + limit - 1) // limit, 1)
    row = np.repeat(np.arange(count.size), parts)
    cut = np.arange(row.size) - np.repeat(np.cumsum(parts) - parts, parts)
    sub_count = np.minimum(count[row] - cut * limit, limit)
    sub_first = _offset(runs.first[row], (cut * limit).astype(_U64), runs.step[row])
    before = np.cumsum(sub_count) - sub_count
    chunk = before // limit
    bounds = np.flatnonzero(np.diff(chunk, prepend=-1))
    for lo, hi in zip(bounds.tolist(), [*bounds[1:].tolist(), row.size], strict=True):
        take = sub_count[lo:hi]
        index = np.repeat(np.arange(lo, hi), take)
        k = np.arange(index.size) - np.repeat(np.cumsum(take) - take, take)
        start = _offset(sub_first[index], k.astype(_U64), runs.step[row[index]])
        stop = _offset(start, np.ones(start.size, _U64), runs.size[row[index]])
        yield runs.owner[row[index]], start, stop


def runs_by_group(events: np.ndarray, ext: np.ndarray, index: np.ndarray) -> Iterator[tuple[np.ndarray, Runs]]:
    """The accesses ``events[index]`` in groups whose runs number about CHUNK at most (one access may be a
    group alone: it has at most 65 535 runs): (the group's positions in ``events``, its runs, owners 0..)."""
    if not index.size:
        return
    lines = line_counts(events[index], ext[index])
    group = (np.cumsum(lines) - lines) // CHUNK
    bounds = np.flatnonzero(np.diff(group, prepend=-1))
    for lo, hi in zip(bounds.tolist(), [*bounds[1:].tolist(), index.size], strict=True):
        rows = index[lo:hi]
        yield rows, runs(events[rows], ext[rows])


def touching(within: IntervalSet, owner: np.ndarray, start: np.ndarray, stop: np.ndarray) -> tuple[np.ndarray, ...]:
    """The pieces that share a byte with ``within``; all of them at the cost of two reductions when one range of
    ``within`` holds them all (a kernel writing its output buffer)."""
    if not start.size or not len(within):
        return owner[:0], start[:0], stop[:0]
    j = int(np.searchsorted(within.starts, start.min(), side="right")) - 1
    if j >= 0 and int(stop.max()) <= int(within.ends[j]):
        return owner, start, stop
    keep = within.covered(start, np.maximum(stop, start)) > 0
    return owner[keep], start[keep], stop[keep]


def listed_touching(
    within: IntervalSet, events: np.ndarray, ext: np.ndarray, index: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``touching(within, *ranges(events, ext, index))``, with one lookup per access where it can: an access whose
    extent lies inside one range of ``within`` keeps its pieces unlooked-at (a strided write lists 8-64 pieces,
    issue 29), the others' pieces are looked up one by one. Compiled where built: one pass lists and looks up."""
    native = _intervals.native
    records = records_of(events) if native is not None else None
    if records is not None and ext.dtype == _U64 and ext.shape == records.shape and index.ndim == 1:
        listed = native.list_touching(  # type: ignore[union-attr]
            records, np.ascontiguousarray(index, dtype=np.int64), np.ascontiguousarray(ext),
            np.ascontiguousarray(within.starts), np.ascontiguousarray(within.ends),
        )  # fmt: skip
        owner, start, stop = listed
        owners = np.frombuffer(owner, np.int64).astype(np.intp, copy=False)
        return owners, np.frombuffer(start, _U64), np.frombuffer(stop, _U64)
    return listed_touching_numpy(within, events, ext, index)


def listed_touching_numpy(
    within: IntervalSet, events: np.ndarray, ext: np.ndarray, index: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``listed_touching``'s reference path."""
    owner, start, stop = ranges(events, ext, index)
    if not start.size or not len(within):
        return owner[:0], start[:0], stop[:0]
    j = int(np.searchsorted(within.starts, start.min(), side="right")) - 1
    if j >= 0 and int(stop.max()) <= int(within.ends[j]):
        return owner, start, stop
    address = events["address"][index]
    held = np.zeros(events.size, dtype=bool)
    held[index] = (ext[index] > 0) & within.contains(address, ends(address, ext[index]))
    keep = held[owner] & (stop > start)
    rest = ~keep
    keep[rest] = within.covered(start[rest], np.maximum(stop[rest], start[rest])) > 0
    return owner[keep], start[keep], stop[keep]


def coverage_own(
    runs: Runs, starts: np.ndarray, stops: np.ndarray, first: np.ndarray, count: np.ndarray, horizon: int
) -> tuple[np.ndarray, np.ndarray]:
    """``coverage`` where each access has byte ranges of its own (a local tensor, an instruction's operands):
    access ``o``'s are ``starts/stops[first[o] : first[o] + count[o]]``, sorted and disjoint. A run meets only its
    access's few ranges, so no budget is spent: the pairs number the runs times a small constant."""
    m = len(runs)
    inside = np.zeros(m, dtype=_U64)
    if not m:
        return inside, runs.first.copy()
    usable = _limit_below(runs, horizon).astype(np.int64)
    f = np.minimum(runs.first, _U64(horizon)).astype(np.int64)
    pairs = np.where(usable > 0, count[runs.owner], 0).astype(np.int64)
    lo_j = first[runs.owner].astype(np.int64)
    bad_k = np.zeros(m, dtype=np.int64)
    step, size = runs.step.astype(np.int64), runs.size.astype(np.int64)
    ends_at = np.cumsum(pairs)
    begin = 0
    while begin < m:
        base = int(ends_at[begin - 1]) if begin else 0
        stop = min(max(int(np.searchsorted(ends_at, base + CHUNK, side="right")), begin + 1), m)
        _pair_chunk(np.arange(begin, stop), pairs, lo_j, f, step, size, usable, starts, stops, inside, bad_k, horizon)
        begin = stop
    whole = bad_k >= runs.count.astype(np.int64)
    first_bad = np.where(
        whole, _U64(_MAX), _offset(runs.first, bad_k.astype(_U64), np.maximum(runs.step, _U64(1)) * (bad_k > 0))
    )
    return inside, first_bad
