"""Multi-core stomping (reference §2.1): two blocks of one kernel writing the same GM bytes.

msSanitizer keeps, in every GM shadow byte, the id of the core that owns it (63: nobody) and a state, and a
store walks its bytes: a byte in state ERROR is skipped; a byte nobody owns becomes the writer's, in atomic mode
or not; a byte another core owns becomes ERROR and is counted as stomped, unless the store runs in atomic mode
(then nothing changes). So an atomic write claims fresh bytes, and each stomped byte is reported once: by the
first store of the first block to reach it. The report is the store's: at its start, the bytes it stomped.

Here the same, per kernel, with the full block id as owner: each block owns the GM byte ranges it claimed, and
stomped bytes move to a "stomped" set that nothing claims or reports again. A report is per contiguous run of
one write's bytes (msSanitizer's flattened, merged store record): at the run's start, the bytes of the run that
write was the first of its block to stomp. A write runs in atomic mode when its event says so or its block's
last SET_ATOMIC turned it on.

Ownership is two interval sets: the union of owned bytes, and the same bytes keyed by owner in the top bits
(``owner << 49 | address``, owners numbered per kernel), so one lookup answers "owned by anyone" and one
"owned by this block" for every write of a batch. A batch without conflicts, the common case, is settled with
a few whole-batch operations; a batch with one is taken block by block, as msSanitizer processes each block's
record buffer.

Before either, a page table (``_page_owners``) settles the steady state: a batch whose writes touch only pages
no other block has written cannot stomp, so its claims are only logged, merged into the owner sets when a later
batch needs them exact (it touches a page two blocks wrote) and never otherwise: a kernel whose blocks write
their own slices never searches the owner sets at all. In such a page an atomic write is a claim like any other.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from sanitizerd.detectors import _intervals
from sanitizerd.detectors._batches import records_of
from sanitizerd.detectors._intervals import MAX_TRACKED_RANGES, IntervalSet, difference, merge_ranges
from sanitizerd.detectors._page_owners import PageOwners, pages_of
from sanitizerd.detectors._patterns import ADDRESS_LIMIT
from sanitizerd.detectors._runs import (
    LIST_AT_ONCE,
    PairBudget,
    Runs,
    inside_or_none,
    listed_touching,
    lists_few_pieces,
    piece_chunks,
    runs_by_group,
    touching,
)
from sanitizerd_protocol.records import FLAG_ATOMIC, EventKind, Space

_U64 = np.uint64
_OWNER_SHIFT = _U64(49)
_ADDRESS_MASK = _U64((1 << 49) - 1)
_NONE = np.empty(0, np.intp), np.empty(0, _U64), np.empty(0, _U64)
_EMPTY = np.empty(0, _U64)
# Logged claims (keyed ranges) past which the log is merged into itself: a kernel rewriting its own pages keeps
# a log the size of what it owns, not of what it wrote.
_LOG_MERGE = 1 << 16
# Block keys up to which _owner_numbers numbers sorted keys in Python rather than with numpy
_FEW_KEYS = 64


@dataclass(frozen=True)
class BatchWrites:
    """A batch's live GM writes as memcheck's compiled first look found them in its pass over the records
    (``sanitizerd.native._memcheck.batch``), so that stomping does not scan the batch again for them: their
    positions (ascending), ``lists_few_pieces``' upper bound of their pieces, whether any record is flagged
    atomic or switches the atomic mode, and ``merged``: their pieces merged per block (keys, lo, hi), what
    ``list_merged`` gives where no record is in atomic mode, found in the same pass where each block's pieces came
    in address order (None where they did not, or not looked for). ``of`` is the numpy twin the tests hold the
    compiled one to (without ``merged``, which the tests hold to ``list_merged``)."""

    index: np.ndarray
    pieces_bound: int
    any_atomic: bool
    merged: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    @classmethod
    def of(cls, events: np.ndarray, live: np.ndarray) -> BatchWrites:
        index = np.flatnonzero(live & (events["kind"] == EventKind.WRITE) & (events["space"] == Space.GM))
        pieces = np.maximum(events["repeat"][index], 1).astype(np.int64)
        scattered = events["block_stride"][index] > 1
        pieces[scattered] *= np.maximum(events["block_num"][index[scattered]], 1)
        atomic = ((events["flags"] & FLAG_ATOMIC) != 0) | (events["kind"] == EventKind.SET_ATOMIC)
        return cls(index, int(pieces.sum()), bool(atomic.any()))


def _block_keys(events: np.ndarray) -> np.ndarray:
    """Block type (0-3), full block id and SIMT thread (0: none) in one integer: a block's threads own GM apart,
    as msSanitizer's inter-thread stomping check has them (memcheck keeps them in a tracker of their own)."""
    keys = ((events["block_type"].astype(_U64) & _U64(3)) << _U64(16)) | events["block_id"].astype(_U64)
    return keys | (events["thread"].astype(_U64) << _U64(18))


def _joined(found: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Reports of chunks joined: one per write and run start, its stomped bytes in all."""
    found = [f for f in found if f[0].size]
    if not found:
        return _NONE
    if len(found) == 1:
        return found[0]
    event, address, size = (np.concatenate([f[i] for f in found]) for i in range(3))
    order = np.lexsort((address, event))
    event, address, size = event[order], address[order], size[order]
    head = np.ones(event.size, dtype=bool)
    head[1:] = (event[1:] != event[:-1]) | (address[1:] != address[:-1])
    heads = np.flatnonzero(head)
    return event[heads], address[heads], np.add.reduceat(size, heads)


def _without(lo: np.ndarray, hi: np.ndarray, held: IntervalSet) -> tuple[np.ndarray, np.ndarray]:
    """Sorted, disjoint ranges less the bytes ``held`` holds, looking only at the held ranges they meet (a
    kernel's owner set may hold millions of ranges; one block's writes meet a few)."""
    if not lo.size or not len(held):
        return lo, hi
    meets = held.covered(lo, hi) > 0
    if not meets.any():
        return lo, hi
    starts, ends = held.starts, held.ends
    first = int(np.searchsorted(ends, lo[meets].min(), side="right"))
    last = int(np.searchsorted(starts, hi[meets].max(), side="left"))
    cut_lo, cut_hi = difference(lo[meets], hi[meets], starts[first:last], ends[first:last])
    return merge_ranges(np.concatenate((lo[~meets], cut_lo)), np.concatenate((hi[~meets], cut_hi)))


def _keyed_claims(
    keys: np.ndarray, lo: np.ndarray, hi: np.ndarray, chosen: np.ndarray, held_lo: np.ndarray, held_hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The ranges ``chosen`` keyed by owner (``key << 49 | bound``), less those wholly inside one of ``held``
    (sorted, disjoint, touching ones joined: a ``merge_ranges`` result), in their order. Compiled where built: one
    pass, and one walk of ``held`` for ranges in order."""
    native = _intervals.native
    if (
        native is not None
        and all(a.dtype == _U64 and a.ndim == 1 for a in (keys, lo, hi, held_lo, held_hi))
        and chosen.dtype == bool
        and keys.shape == lo.shape == hi.shape == chosen.shape
    ):
        arrays = (keys, lo, hi, chosen.view(np.uint8), held_lo, held_hi)
        kept_lo, kept_hi = native.keyed_claims(*(np.ascontiguousarray(a) for a in arrays))
        return np.frombuffer(kept_lo, _U64), np.frombuffer(kept_hi, _U64)
    return _keyed_claims_numpy(keys, lo, hi, chosen, held_lo, held_hi)


def _keyed_claims_numpy(
    keys: np.ndarray, lo: np.ndarray, hi: np.ndarray, chosen: np.ndarray, held_lo: np.ndarray, held_hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``_keyed_claims``' reference path."""
    keys = keys[chosen] << _OWNER_SHIFT
    lo, hi = keys | lo[chosen], keys | hi[chosen]
    if not held_lo.size or not lo.size:
        return lo, hi
    at = np.searchsorted(held_hi, lo, side="right")
    inside = at < held_lo.size
    inside[inside] = (held_lo[at[inside]] <= lo[inside]) & (hi[inside] <= held_hi[at[inside]])
    if not inside.any():
        return lo, hi
    return lo[~inside], hi[~inside]


def _meeting(owned: IntervalSet, stomped: IntervalSet, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The owned and stomped ranges that meet any of ``[lo, hi)``, sorted and disjoint (owned and stomped bytes
    never coincide)."""
    found_lo, found_hi = [], []
    for held in (owned, stomped):
        if not len(held):
            continue
        starts, ends = held.starts, held.ends
        first = np.searchsorted(ends, lo, side="right")
        count = np.maximum(np.searchsorted(starts, hi, side="left") - first, 0)
        index = np.repeat(first - (np.cumsum(count) - count), count) + np.arange(int(count.sum()))
        index = np.unique(index)
        found_lo.append(starts[index])
        found_hi.append(ends[index])
    if not found_lo:
        return np.empty(0, _U64), np.empty(0, _U64)
    return merge_ranges(np.concatenate(found_lo), np.concatenate(found_hi))


def _first_cover(rank: np.ndarray, first: np.ndarray, last: np.ndarray, segments: int) -> np.ndarray:
    """For each of ``segments`` segments, the smallest ``rank`` of the spans ``[first, last)`` covering it
    (int64 max where none does). A segment tree over the segments, filled a level at a time for every span at
    once (each span is O(log n) nodes) and pushed down to the leaves: no loop over spans or segments."""
    size = 1 << max(1, (segments - 1).bit_length())
    none = np.iinfo(np.int64).max
    tree = np.full(2 * size, none, dtype=np.int64)
    lo, hi, value = first.astype(np.int64) + size, last.astype(np.int64) + size, rank.astype(np.int64)
    while lo.size:
        active = lo < hi
        lo, hi, value = lo[active], hi[active], value[active]
        odd = (lo & 1) == 1
        np.minimum.at(tree, lo[odd], value[odd])
        lo += odd
        odd = (hi & 1) == 1
        hi -= odd
        np.minimum.at(tree, hi[odd], value[odd])
        lo >>= 1
        hi >>= 1
    level = 1
    while level < size:
        parents = np.arange(level, 2 * level)
        tree[2 * parents] = np.minimum(tree[2 * parents], tree[parents])
        tree[2 * parents + 1] = np.minimum(tree[2 * parents + 1], tree[parents])
        level *= 2
    return tree[size : size + segments]


def _first_hits(
    event: np.ndarray, start: np.ndarray, stop: np.ndarray, stomp_lo: np.ndarray, stomp_hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One block's plain writes (pieces in event order) and the bytes its turn stomped (sorted, disjoint):
    per contiguous run of each write's bytes, the stomped bytes in it that no earlier write of the block reached
    (msSanitizer's store leaves them ERROR, so a second store skips them): (event, run start, bytes)."""
    stomp = IntervalSet(stomp_lo, stomp_hi)
    touches = stomp.covered(start, stop) > 0
    keep = np.isin(event, np.unique(event[touches]))  # the runs of writes that stomped, whole
    event, start, stop, touches = event[keep], start[keep], stop[keep], touches[keep]
    events, rank = np.unique(event, return_inverse=True)
    rank = rank.ravel().astype(_U64)
    # Segments between every piece and stomp boundary: each lies wholly inside or outside every piece and the stomp.
    bounds = np.unique(np.concatenate((start, stop, stomp_lo, stomp_hi)))
    first = np.searchsorted(bounds, start).astype(_U64)
    last = np.searchsorted(bounds, stop).astype(_U64)
    segments = bounds.size - 1
    earliest = _first_cover(rank[touches], first[touches], last[touches], segments)
    hit = (earliest < np.iinfo(np.int64).max) & (stomp.covered(bounds[:-1], bounds[1:]) > 0)
    # Each write's runs in segment numbers, keyed by its rank above them (fewer than 2**32 segments: pieces
    # come CHUNK at a time).
    run_lo, _ = merge_ranges((rank << _U64(32)) | first, (rank << _U64(32)) | last)
    segment = np.flatnonzero(hit)
    key = (earliest[segment].astype(_U64) << _U64(32)) | segment.astype(_U64)
    run = np.searchsorted(run_lo, key, side="right") - 1
    stomped = np.zeros(run_lo.size, dtype=_U64)
    np.add.at(stomped, run, bounds[segment + 1] - bounds[segment])
    reported = np.flatnonzero(stomped)
    run_lo = run_lo[reported]
    return (
        events[(run_lo >> _U64(32)).astype(np.intp)],
        bounds[(run_lo & _U64(0xFFFFFFFF)).astype(np.intp)],
        stomped[reported],
    )


def _piece_block_keys(events: np.ndarray, event: np.ndarray) -> np.ndarray:
    """``_block_keys`` of the pieces' events, gathering only their rows."""
    block_id = events["block_id"][event].astype(_U64)
    threads = events["thread"]
    if threads.any():
        block_id |= threads[event].astype(_U64) << _U64(18)
    types = events["block_type"]
    lowest = int(types.min())
    if lowest == int(types.max()):  # one block type in the batch, the common case: no gather
        return block_id | _U64((lowest & 3) << 16)
    return ((events["block_type"][event].astype(_U64) & _U64(3)) << _U64(16)) | block_id


def _merge_by_block(block_keys: np.ndarray, start: np.ndarray, stop: np.ndarray) -> tuple[np.ndarray, ...]:
    """Each block's ranges merged, for all blocks at once: (block key, start, stop), sorted by block then start;
    empty ranges dropped, and every bound clipped to 2**49 - 1 when an end passes it. Compiled where built (one
    radix sort, skipped when the pieces come in order, and one pass)."""
    native = _intervals.native
    if native is not None and block_keys.dtype == start.dtype == stop.dtype == _U64 and block_keys.ndim == 1:
        keys, lo, hi = native.merge_by_block(*(np.ascontiguousarray(a) for a in (block_keys, start, stop)))
        return np.frombuffer(keys, _U64), np.frombuffer(lo, _U64), np.frombuffer(hi, _U64)
    return _merge_by_block_numpy(block_keys, start, stop)


def _merge_by_block_numpy(block_keys: np.ndarray, start: np.ndarray, stop: np.ndarray) -> tuple[np.ndarray, ...]:
    """``_merge_by_block``'s reference path.

    The pieces are grouped by block with a stable sort of the keys alone (a radix sort when they fit 16 bits); a
    kernel's blocks stream through their buffers in address order, so within a block they are then mostly in
    order already, and one pass joins them. Only when they are not are they sorted by address too."""
    narrow = block_keys.astype(np.uint16) if int(block_keys.max()) < 1 << 16 else block_keys
    order = np.argsort(narrow, kind="stable")
    keys, lo, hi = block_keys[order], start[order], stop[order]
    if int(hi.max()) > _ADDRESS_MASK:  # pieces start below ADDRESS_LIMIT; only their ends can pass 2**49
        lo, hi = np.minimum(lo, _ADDRESS_MASK), np.minimum(hi, _ADDRESS_MASK)
    new_block = np.empty(keys.size, dtype=bool)
    new_block[0] = True
    np.not_equal(keys[1:], keys[:-1], out=new_block[1:])
    heads = keys[new_block]
    if lo.size > 1 and bool(((lo[1:] >= hi[:-1]) | new_block[1:]).all()) and bool((hi > lo).all()):
        # Each block's pieces in address order and apart, as a block streaming through its output writes them:
        # a piece joins the one before only when it starts where that one ends, within the block.
        joined = np.empty(lo.size, dtype=bool)
        joined[0] = False
        np.equal(lo[1:], hi[:-1], out=joined[1:])
        joined[1:] &= ~new_block[1:]
        first = np.flatnonzero(~joined)
        last = np.empty_like(first)
        last[:-1] = first[1:] - 1
        last[-1] = lo.size - 1
        return keys[first], lo[first], hi[last]
    rank = np.cumsum(new_block, dtype=np.int64) - 1
    if rank[-1] < 1 << 15:
        rank, lo, hi = _merge_ranked(rank.astype(_U64), lo, hi)
        return heads[rank], lo, hi
    # More blocks than 15 bits hold (a hostile batch): 2**15 blocks at a time, at most 8 times.
    group = rank >> 15
    parts = [_merge_ranked((rank[group == g] & 0x7FFF).astype(_U64), lo[group == g], hi[group == g])
             for g in range(int(group[-1]) + 1)]  # fmt: skip
    ranks = np.concatenate([p[0].astype(np.int64) + (g << 15) for g, p in enumerate(parts)])
    return heads[ranks], np.concatenate([p[1] for p in parts]), np.concatenate([p[2] for p in parts])


def _merge_ranked(rank: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, ...]:
    """Ranges grouped by ``rank`` (below 2**15, ascending), each group's merged: (rank, start, stop)."""
    packed_lo = (rank << _OWNER_SHIFT) | lo
    packed_hi = (rank << _OWNER_SHIFT) | hi
    keep = hi > lo
    if not keep.all():
        packed_lo, packed_hi = packed_lo[keep], packed_hi[keep]
    if packed_lo.size > 1 and (packed_lo[1:] < packed_lo[:-1]).any():
        packed_lo, packed_hi = merge_ranges(packed_lo, packed_hi)
    elif packed_lo.size:
        # In order already: a range joins the one before when it starts at or before the reach so far (a rank
        # change always starts past it, as the rank sits above every address bit).
        reach = np.maximum.accumulate(packed_hi)
        joined = np.empty(packed_lo.size, dtype=bool)
        joined[0] = False
        np.less_equal(packed_lo[1:], reach[:-1], out=joined[1:])
        first = np.flatnonzero(~joined)
        last = np.append(first[1:] - 1, packed_lo.size - 1)
        packed_lo, packed_hi = packed_lo[first], reach[last]
    return packed_lo >> _OWNER_SHIFT, packed_lo & _ADDRESS_MASK, packed_hi & _ADDRESS_MASK


class StompTracker:
    """One kernel's GM ownership; a fresh tracker per kernel launch."""

    def __init__(self) -> None:
        self.owned = IntervalSet()  # every owned byte; owners are disjoint
        self.owned_by = IntervalSet()  # the same bytes, keyed block << 49 | address
        self.stomped = IntervalSet()
        self.atomic: dict[int, bool] = {}  # block -> atomic mode at the end of the last batch
        self._owners: dict[int, int] = {}  # block key -> owner number
        self.given_up = False
        self.pages: PageOwners | None = PageOwners()  # None: past its bound, every write is looked up
        self._log: list[tuple[np.ndarray, np.ndarray]] = []  # claims in pages of one writer: keyed ranges
        self._logged = 0  # ranges in the log
        self._log_merged = 0  # ranges the last merge of the log left
        self._log_head_merged = False  # whether _log[0] is that merge: sorted, disjoint, touching ones joined

    def check(
        self,
        events: np.ndarray,
        ext: np.ndarray,
        live: np.ndarray,
        legal: IntervalSet,
        budget: PairBudget,
        writes: BatchWrites | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Stomping writes of a batch: (event index, address reported, bytes stomped). Writes wholly outside
        ``legal`` GM (illegal writes, reported as such) own nothing. The writes' pieces are taken in bounded
        chunks, never all at once; past MAX_TRACKED_RANGES owned ranges the kernel is no longer checked
        (``given_up``), which the caller reports. ``writes``: the live GM writes of ``live`` already found (the
        compiled first look's), None to find them here."""
        if self.given_up:
            return _NONE
        atomic_mode = writes is None or writes.any_atomic or any(self.atomic.values())
        if not atomic_mode:
            atomic = np.zeros(events.size, dtype=bool)  # no flag, no switch, no mode carried: nothing to scan
        else:
            atomic = self._atomic_modes(events)  # atomic writes claim too: only a conflict looks at the mode
        if writes is not None:
            index = writes.index
            few = writes.pieces_bound <= LIST_AT_ONCE  # lists_few_pieces' own bound, counted in the same pass
        else:
            written = live & (events["kind"] == EventKind.WRITE)
            written &= events["space"] == Space.GM
            index = np.flatnonzero(written)
            few = False
        if not index.size:
            return _NONE
        if few or lists_few_pieces(events, ext, index, LIST_AT_ONCE):  # the common case: list the pieces at once
            native = _intervals.native
            records = records_of(events) if native is not None else None
            if records is not None and ext.dtype == _U64 and ext.shape == records.shape:
                # compiled: listed, keyed and merged per block in one call (or in the first look's pass already,
                # where no record is in atomic mode); the pieces again only for a conflict
                if writes is not None and writes.merged is not None and not atomic_mode:
                    (keys, lo, hi), tagged = writes.merged, False
                else:
                    *merged, tagged = native.list_merged(  # type: ignore[union-attr]
                        records, index.astype(np.int64, copy=False), ext, np.ascontiguousarray(legal.starts),
                        np.ascontiguousarray(legal.ends), np.ascontiguousarray(atomic).view(np.uint8),
                    )  # fmt: skip
                    keys, lo, hi = (np.frombuffer(part, _U64) for part in merged)
                merged_atomic = ((keys & _U64(1)) == 1) if tagged else None
                if tagged:
                    keys = keys >> _U64(1)

                def pieces() -> tuple[np.ndarray, ...]:
                    event, start, stop = listed_touching(legal, events, ext, index)
                    return event, start, stop, _piece_block_keys(events, event), atomic[event]

                found = [self._check_merged((keys, lo, hi), merged_atomic, pieces)]
            else:
                found = [self._check_pieces(events, atomic, *listed_touching(legal, events, ext, index))]
            self.given_up = self._past_bound()
            return _joined(found)
        self._flush()  # the runs' lookups below read the owner sets
        found = []
        for rows, group in runs_by_group(events, ext, index):
            in_heap = inside_or_none(group, legal, ADDRESS_LIMIT, budget)
            group = replace(group, owner=rows[group.owner])
            if in_heap is not None:
                group = group.take(in_heap > 0)
            group = self._not_owned_already(events, group, budget)
            for event, start, stop in piece_chunks(group):
                found.append(self._check_pieces(events, atomic, *touching(legal, event, start, stop)))
                if self._past_bound():
                    self.given_up = True
                    return _joined(found)
        return _joined(found)

    def _past_bound(self) -> bool:
        """Whether ownership holds more than MAX_TRACKED_RANGES separate ranges. ``len`` is an upper bound while
        ranges are pending (they may touch held ones); past the bound the sets are folded and counted exactly."""
        if len(self.owned_by) + len(self.stomped) + self._logged <= MAX_TRACKED_RANGES:
            return False
        self._flush()
        return self.owned_by.starts.size + self.stomped.starts.size > MAX_TRACKED_RANGES

    def _flush(self, pages: np.ndarray | None = None) -> None:
        """Logged claims into the owner sets: all of them (then the sets hold every claim exactly), or those
        touching ``pages`` (sorted page numbers)."""
        if not self._log:
            return
        keyed_lo = np.concatenate([lo for lo, _ in self._log])
        keyed_hi = np.concatenate([hi for _, hi in self._log])
        if pages is not None:
            first, last = pages_of(keyed_lo & _ADDRESS_MASK, keyed_hi & _ADDRESS_MASK)
            at = np.searchsorted(pages, first)
            touches = at < pages.size
            touches[touches] = pages[at[touches]] <= last[touches]
            if not touches.any():
                return
            self._log = [(keyed_lo[~touches], keyed_hi[~touches])]
            self._logged = int((~touches).sum())
            self._log_head_merged = False
            keyed_lo, keyed_hi = keyed_lo[touches], keyed_hi[touches]
        else:
            self._log, self._logged = [], 0
            self._log_head_merged = False
        self._claim(keyed_lo >> _OWNER_SHIFT, keyed_lo & _ADDRESS_MASK, keyed_hi & _ADDRESS_MASK)

    def _log_claims(self, keys: np.ndarray, lo: np.ndarray, hi: np.ndarray, chosen: np.ndarray) -> None:
        """The ranges ``chosen`` logged, keyed by owner."""
        # A block rewriting its own output claims what the log holds already: such claims change no union, and
        # leaving them out keeps the log from growing (and being merged again) on every rewrite.
        held = self._log[0] if self._log_head_merged else (_EMPTY, _EMPTY)
        keyed_lo, keyed_hi = _keyed_claims(keys, lo, hi, chosen, *held)
        if not keyed_lo.size:
            return
        self._log.append((keyed_lo, keyed_hi))
        self._logged += keyed_lo.size
        # Merged once it doubles what the last merge left: each range is sorted O(log n) times in all.
        if self._logged > max(_LOG_MERGE, 2 * self._log_merged) and len(self._log) > 1:
            merged = merge_ranges(np.concatenate([a for a, _ in self._log]), np.concatenate([b for _, b in self._log]))
            self._log, self._logged = [merged], merged[0].size
            self._log_merged = self._logged
            self._log_head_merged = True

    def _not_owned_already(self, events: np.ndarray, runs: Runs, budget: PairBudget) -> Runs:
        """Drop the runs whose writing block already owns every byte (the steady state of a kernel rewriting its
        own output): a closed form per run, so a rewrite of billions of blocks costs no listing. Runs whose keyed
        addresses would not fit an int64 are kept and listed."""
        if not len(self.owned_by) or not (runs.count > 1).any():
            return runs  # one-piece runs are settled as pieces, by _claim_if_clean
        keys = self._owner_numbers(_block_keys(events)[runs.owner])
        last = runs.count.astype(np.int64) - 1
        room = (_ADDRESS_MASK - np.minimum(runs.first, _ADDRESS_MASK)) // np.maximum(runs.step, _U64(1))
        fits = (runs.count > 1) & (keys < _U64(1 << 13)) & (runs.first < _ADDRESS_MASK) & (last.astype(_U64) < room)
        extent_end = runs.first + np.where(fits, last.astype(_U64), _U64(0)) * runs.step + runs.size
        fits &= extent_end <= _ADDRESS_MASK
        if not fits.any():
            return runs
        keyed = replace(runs.take(fits), first=(keys[fits] << _OWNER_SHIFT) | runs.first[fits])
        inside = inside_or_none(keyed, self.owned_by, 1 << 62, budget)
        if inside is None:
            return runs
        owned = np.zeros(len(runs), dtype=bool)
        owned[fits] = inside == keyed.count * keyed.size
        return runs.take(~owned)

    def _check_pieces(
        self, events: np.ndarray, atomic: np.ndarray, event: np.ndarray, start: np.ndarray, stop: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if not event.size:
            return _NONE
        block_keys = _piece_block_keys(events, event)
        piece_atomic = atomic[event]
        merged_atomic: np.ndarray | None = None
        if piece_atomic.any():  # each block's atomic and plain writes merged apart (the mode decides conflicts)
            tagged, lo, hi = _merge_by_block((block_keys << _U64(1)) | piece_atomic.astype(_U64), start, stop)
            merged = (tagged >> _U64(1), lo, hi)
            merged_atomic = (tagged & _U64(1)) == 1
        else:
            merged = _merge_by_block(block_keys, start, stop)
        return self._check_merged(merged, merged_atomic, lambda: (event, start, stop, block_keys, piece_atomic))

    def _check_merged(
        self,
        merged: tuple[np.ndarray, ...],
        merged_atomic: np.ndarray | None,
        pieces: Callable[[], tuple[np.ndarray, ...]],
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``_check_pieces`` from its writes merged per block (and per mode, where ``merged_atomic`` says which are
        atomic); ``pieces()`` gives the pieces themselves (event, start, stop, block key, atomic), which only a
        conflict reads."""
        if not merged[0].size:  # only empty pieces: nothing written
            return _NONE
        merged_keys = self._owner_numbers(merged[0])
        noted = self.pages.note(merged_keys, merged[1], merged[2]) if self.pages is not None else None
        if noted is None:  # no page table (any more): the owner sets must hold every claim
            self.pages = None
            self._flush()
            alone, newly_shared = np.zeros(merged_keys.size, dtype=bool), np.empty(0, _U64)
        else:
            alone, newly_shared = noted
        if newly_shared.size:  # pages a second block now writes: their logged claims must be exact from here on
            self._flush(newly_shared)
        if alone.any():  # ranges in pages of their own writers: no stomping, claims logged
            self._log_claims(merged_keys, merged[1], merged[2], alone)
            if alone.all():
                return _NONE
            merged = tuple(part[~alone] for part in merged)
            if merged_atomic is not None:
                merged_atomic = merged_atomic[~alone]
        # The rest touch pages other blocks write too: the owner sets hold every claim there, exactly.
        if self._claim_if_clean(*merged, merged_atomic):
            return _NONE
        self._flush()  # a conflict: the block-by-block path reads whole owners' sets
        event, start, stop, block_keys, piece_atomic = pieces()
        keys = self._owner_numbers(block_keys)
        # Blocks in block order (not owner-number order), as msSanitizer walks the blocks' record buffers; each
        # block's writes in event order, as it walks one buffer.
        _, first = np.unique(block_keys, return_index=True)
        found = []
        for owner in keys[first].tolist():
            mine = keys == owner
            found.append(self._block_writes(owner, event[mine], start[mine], stop[mine], piece_atomic[mine]))
        return tuple(np.concatenate([f[i] for f in found]) for i in range(3))  # type: ignore[return-value]

    def _owner_numbers(self, block_keys: np.ndarray) -> np.ndarray:
        """Blocks numbered 0, 1, 2, ... in the order the kernel first wrote with them, so that an owner fits the
        15 bits above a 49-bit address whatever its block id (msSanitizer's 6-bit core ids alias at 63)."""
        # A batch names few distinct blocks: number those through the dict (a dense table over every possible
        # block key would cost 2 MiB per session).
        keys = block_keys.tolist() if block_keys.size <= _FEW_KEYS else None
        if keys is not None and all(a <= b for a, b in itertools.pairwise(keys)):
            # a few ranges in block order (each block's merged writes): numbered one by one, first seen first, as
            # below (numpy's calls cost more than the dict on so few)
            owners = self._owners
            return np.array([owners.setdefault(key, len(owners)) for key in keys], dtype=_U64)
        if block_keys.size > 1 and bool((block_keys[1:] >= block_keys[:-1]).all()):
            # sorted already (ranges merged per block): the distinct keys are where the key changes, no sort, and
            # each block's number repeated over its run (a running count over every range cost more)
            head = np.empty(block_keys.size, dtype=bool)
            head[0] = True
            np.not_equal(block_keys[1:], block_keys[:-1], out=head[1:])
            heads = np.flatnonzero(head)
            numbers = self._numbers_of(block_keys[heads])
            return np.repeat(numbers, np.diff(heads, append=block_keys.size))
        distinct, where = np.unique(block_keys, return_inverse=True)
        return self._numbers_of(distinct)[where.ravel()]

    def _numbers_of(self, distinct: np.ndarray) -> np.ndarray:
        """Owner numbers of distinct block keys, a block new to the kernel numbered next."""
        numbers = np.empty(distinct.size, dtype=_U64)
        for i, key in enumerate(distinct.tolist()):
            numbers[i] = self._owners.setdefault(key, len(self._owners))
        return numbers

    def _owned_by_me(self, keys: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Bytes of each range its own block owns."""
        return self.owned_by.covered((keys << _OWNER_SHIFT) | lo, (keys << _OWNER_SHIFT) | hi)

    def _foreign(self, keys: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Bytes of each range that a block other than its own owns."""
        owned = self.owned.covered(lo, hi)
        if not owned.any():  # fresh bytes (a kernel streaming through its output): nobody's, so nobody else's
            return owned
        return owned - self.owned_by.covered((keys << _OWNER_SHIFT) | lo, (keys << _OWNER_SHIFT) | hi)

    def _claim(self, keys: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> None:
        self.owned.add_new(lo, hi)
        self.owned_by.add_new((keys << _OWNER_SHIFT) | lo, (keys << _OWNER_SHIFT) | hi)

    def _claim_if_clean(
        self, block_keys: np.ndarray, lo: np.ndarray, hi: np.ndarray, atomic: np.ndarray | None = None
    ) -> bool:
        """The common case, for the whole batch at once, over its writes merged per block (and per mode where
        ``atomic`` says which ranges are atomic writes): no plain write touches stomped bytes or bytes another
        block owns, no atomic write touches owned or stomped bytes but wholly (where it changes nothing), and no
        two blocks' writes in the batch overlap. Then every block claims what it wrote. Bytes a block rewrites of
        its own are neither foreign nor stomped, and claiming them again changes nothing, so they need no lookup of
        their own."""
        keys = self._owner_numbers(block_keys)
        stomped = self.stomped.covered(lo, hi) if len(self.stomped) else None
        plain = None if atomic is None else ~atomic
        if stomped is not None and (stomped.any() if plain is None else stomped[plain].any()):
            return False
        fresh = True  # no byte owned yet: a kernel streaming through its output
        owned = mine = None
        if len(self.owned):
            owned = self.owned.covered(lo, hi)
            if owned.any():
                fresh = False
                mine = self._owned_by_me(keys, lo, hi)
                foreign = owned - mine
                if foreign.any() if plain is None else foreign[plain].any():
                    return False
        if atomic is not None:
            # An atomic write claims the bytes nobody owns and leaves every other byte as it is: where all its
            # bytes are owned or stomped already (every block adding into one output, after the first), nothing.
            taken = (owned if owned is not None else _U64(0)) + (stomped if stomped is not None else _U64(0))
            noop = atomic & (taken == hi - lo)
            partly = atomic & ~noop & (taken > 0)  # its claim is the rest: the taken ranges it meets are needed
            held = _meeting(self.owned, self.stomped, lo[partly], hi[partly]) if partly.any() else None
            if noop.any():
                keep = ~noop
                block_keys, keys, lo, hi = block_keys[keep], keys[keep], lo[keep], hi[keep]
                if not lo.size:
                    return True
                fresh = owned is None or not owned[keep].any()
            if (atomic & ~noop).any():
                if block_keys[0] != block_keys[-1] or held is not None:
                    return self._claim_first_come(block_keys, keys, lo, hi, atomic[~noop], held)
                # A block's atomic and plain ranges may overlap: one union per block.
                block_keys, lo, hi = _merge_by_block(block_keys, lo, hi)
                keys = self._owner_numbers(block_keys)
        if block_keys[0] != block_keys[-1]:  # sorted by block: more than one block wrote
            order = np.argsort(lo, kind="stable")
            lo_sorted, hi_sorted = lo[order], hi[order]
            # Each block's ranges are disjoint, so an overlap in the sorted union is between two blocks.
            if (lo_sorted[1:] < np.maximum.accumulate(hi_sorted)[:-1]).any():
                return False
        else:
            lo_sorted, hi_sorted = lo, hi
        if not fresh:
            if mine is not None and atomic is None:
                # A block rewriting bytes it owns already claims nothing new (the owner sets' unions stay as they
                # are): only the other ranges are claimed, which spares both sets a sort and a lookup of them.
                new = mine < hi - lo
                if not new.all():
                    keys, lo, hi = keys[new], lo[new], hi[new]
            self._claim(keys, lo, hi)
            return True
        # Fresh bytes, sorted and disjoint: inserted as they are, no lookup of what the sets hold.
        self.owned.add_disjoint(lo_sorted, hi_sorted)
        packed_lo, packed_hi = (keys << _OWNER_SHIFT) | lo, (keys << _OWNER_SHIFT) | hi
        if packed_lo.size > 1 and (packed_lo[1:] < packed_lo[:-1]).any():  # owners numbered out of block order
            order = np.argsort(packed_lo)
            packed_lo, packed_hi = packed_lo[order], packed_hi[order]
        self.owned_by.add_disjoint(packed_lo, packed_hi)
        return True

    def _claim_first_come(
        self,
        block_keys: np.ndarray,
        keys: np.ndarray,
        lo: np.ndarray,
        hi: np.ndarray,
        atomic: np.ndarray,
        held: tuple[np.ndarray, np.ndarray] | None,
    ) -> bool:
        """Blocks of one batch whose atomic writes meet on bytes nobody owned (every block adding into one fresh
        output tile): each byte goes to the first block, in block order, to write it, and the others' atomic writes
        then meet its bytes and change nothing; bytes in ``held`` (owned or stomped before the batch, sorted and
        disjoint: those the atomic writes partly meet) are nobody's to claim. Settled for the batch at once unless a
        plain write meets another block's write: then the order decides a stomp, which the block path tells
        (False). ``block_keys`` sorted."""
        points = (lo, hi) if held is None else (lo, hi, *held)
        bounds = np.unique(np.concatenate(points))
        first, last = np.searchsorted(bounds, lo), np.searchsorted(bounds, hi)
        new_block = np.ones(block_keys.size, dtype=bool)
        new_block[1:] = block_keys[1:] != block_keys[:-1]
        rank = np.cumsum(new_block) - 1
        segments = bounds.size - 1
        earliest = _first_cover(rank, first, last, segments)
        covered = earliest < np.iinfo(np.int64).max
        contested = covered & (earliest != -_first_cover(-rank, first, last, segments))
        if contested.any():
            before = np.concatenate(([0], np.cumsum(contested)))
            plain = ~atomic
            if (before[last[plain]] > before[first[plain]]).any():
                return False
        if held is not None:
            covered &= IntervalSet(*held).covered(bounds[:-1], bounds[1:]) == 0
        segment = np.flatnonzero(covered)
        owner = keys[new_block][earliest[segment]]
        seg_lo, seg_hi = bounds[segment], bounds[segment + 1]
        joined = np.zeros(segment.size, dtype=bool)
        joined[1:] = (seg_lo[1:] == seg_hi[:-1]) & (owner[1:] == owner[:-1])
        heads = np.flatnonzero(~joined)
        tails = np.append(heads[1:] - 1, segment.size - 1)
        self._claim(owner[heads], seg_lo[heads], seg_hi[tails])
        return True

    def _block_writes(
        self, block: int, event: np.ndarray, start: np.ndarray, stop: np.ndarray, atomic: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One block's turn: its plain writes stomp the bytes other blocks own, each byte reported once, by the
        first write to reach it; all its writes, atomic or not, claim the bytes nobody owns."""
        key = _U64(block)
        found = _NONE
        plain = ~atomic
        if plain.all():
            p_event, p_start, p_stop = event, start, stop
        else:
            p_event, p_start, p_stop = event[plain], start[plain], stop[plain]
        foreign = self._foreign(np.full(p_start.size, key), p_start, p_stop)
        if foreign.any():
            written_lo, written_hi = merge_ranges(p_start, p_stop)
            mine_lo, mine_hi = self._owned_by(key)
            not_mine = difference(written_lo, written_hi, mine_lo, mine_hi)
            outside = _without(*not_mine, self.owned)
            conflict_lo, conflict_hi = difference(*not_mine, *outside)
            owners = np.unique(self.owned_by.starts >> _OWNER_SHIFT)
            owners = owners[owners != key]
            # Take the conflict out of every other owner's ranges: one packed subtraction for all of them.
            packed_lo = ((owners[:, None] << _OWNER_SHIFT) | conflict_lo[None, :]).ravel()
            packed_hi = ((owners[:, None] << _OWNER_SHIFT) | conflict_hi[None, :]).ravel()
            order = np.argsort(packed_lo, kind="stable")
            self.owned_by.subtract(packed_lo[order], packed_hi[order])
            self.owned.subtract(conflict_lo, conflict_hi)
            self.stomped.add(conflict_lo, conflict_hi)
            found = _first_hits(p_event, p_start, p_stop, conflict_lo, conflict_hi)
        # Claims: the bytes nobody owns (an atomic write over another block's bytes leaves them that block's).
        fresh = _without(*_without(*merge_ranges(start, stop), self.stomped), self.owned)
        self._claim(np.full(fresh[0].size, key), *fresh)
        return found

    def _owned_by(self, key: np.uint64) -> tuple[np.ndarray, np.ndarray]:
        """The ranges one block owns, as plain addresses."""
        lo_key, hi_key = key << _OWNER_SHIFT, (key + _U64(1)) << _OWNER_SHIFT
        first, last = np.searchsorted(self.owned_by.starts, [lo_key, hi_key])
        return self.owned_by.starts[first:last] & _ADDRESS_MASK, (
            self.owned_by.ends[first:last] - self.owned_by.starts[first:last]
        ) + (self.owned_by.starts[first:last] & _ADDRESS_MASK)

    def _atomic_modes(self, events: np.ndarray) -> np.ndarray:
        """Whether each event runs in atomic mode: its flag, or its block's last SET_ATOMIC before it."""
        flagged = (events["flags"] & FLAG_ATOMIC) != 0
        switches = events["kind"] == EventKind.SET_ATOMIC
        if not switches.any() and not any(self.atomic.values()):
            return flagged
        n = events.size
        keys = _block_keys(events).astype(np.int64)
        order = np.lexsort((np.arange(n), keys))
        sorted_keys = keys[order]
        group_start = np.ones(n, dtype=bool)
        group_start[1:] = sorted_keys[1:] != sorted_keys[:-1]
        position = np.arange(n)
        first_of_group = np.maximum.accumulate(np.where(group_start, position, 0))
        last_switch = np.maximum.accumulate(np.where(switches[order], position, -1))
        switched = last_switch >= first_of_group
        mode_on = events["mode"][order][np.maximum(last_switch, 0)] != 0
        unique_keys, group_of = np.unique(sorted_keys, return_inverse=True)
        carried = np.array([self.atomic.get(k, False) for k in unique_keys.tolist()], dtype=bool)[group_of]
        state_sorted = np.where(switched, mode_on, carried)
        ends_of_group = np.append(np.flatnonzero(group_start)[1:] - 1, n - 1)
        for key, state in zip(unique_keys.tolist(), state_sorted[ends_of_group].tolist(), strict=True):
            self.atomic[key] = state
        state = np.empty(n, dtype=bool)
        state[order] = state_sorted
        return flagged | state
