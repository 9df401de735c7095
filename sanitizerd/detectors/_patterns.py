"""Vectorised arithmetic on msSanitizer's strided access pattern (reference §1.7).

Block ``i`` of repeat ``r`` covers ``[address + (r*repeat_stride + i*block_stride) * block_size, + block_size)``.
Every block offset is a whole multiple of ``block_size``, so two blocks of one access either coincide or are
disjoint; that is what lets ``expand`` dedupe exactly.
"""

from __future__ import annotations

import numpy as np

from sanitizerd_protocol.patterns import extents

__all__ = ["ADDRESS_LIMIT", "ends", "expand", "extents", "first_misaligned", "ranges"]

_U64 = np.uint64
# GM addresses are 48-bit (msSanitizer's 0xFFFFFFFFFFFF mask); anything past this is outside every range.
ADDRESS_LIMIT = 1 << 48


def ends(addresses: np.ndarray, ext: np.ndarray) -> np.ndarray:
    """``address + extent``, saturating at 2**64 - 1 instead of wrapping round."""
    total = addresses + ext
    wrapped = total < addresses
    if wrapped.any():
        total[wrapped] = np.iinfo(np.uint64).max
    return total


def first_misaligned(events: np.ndarray, alignment: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which accesses have any block of any repeat off ``alignment`` (a power of two), and for those the first
    misaligned block's address (other rows of the second array hold their start address).

    Every block start is ``address + k * block_size * stride``, so the whole pattern is aligned iff the
    address and both step sizes are: one OR and one AND per access, no expansion.
    """
    mask = alignment.astype(_U64) - 1
    address = events["address"]
    block_size = events["block_size"].astype(_U64)
    block_step = events["block_stride"] * block_size * (events["block_num"] > 1)
    repeat_step = events["repeat_stride"] * block_size * (events["repeat"] > 1)
    bad = ((address | block_step | repeat_step) & mask) != 0
    first = address.copy()
    if bad.any():  # the rare rows: work out which step is off
        a, b, r, k = address[bad], block_step[bad], repeat_step[bad], np.broadcast_to(mask, bad.shape)[bad]
        first[bad] = np.where((a & k) != 0, a, np.where((b & k) != 0, a + b, a + r))
    return bad, first


def _pieces_ascend(
    dense: np.ndarray,
    row_is_range: np.ndarray,
    repeat: np.ndarray,
    repeat_stride: np.ndarray,
    block_num: np.ndarray,
    block_stride: np.ndarray,
    block_size: np.ndarray,
) -> bool:
    """Whether ``expand`` lists every access's pieces by start already, so that its sort may be skipped (the
    sort is stable: same result). They come out by owner, and by start within an owner unless a repeat starts
    before its previous row's last block (rows interleaved) or an offset wraps past 2**64 (starts saturate, so
    the top of the address space keeps the order)."""
    listed = ~dense
    if not listed.any():
        return True
    rows_after = listed & ~row_is_range & (repeat > 1)
    if not (repeat_stride[rows_after] >= (block_num[rows_after] - _U64(1)) * block_stride[rows_after]).all():
        return False
    repeat_span = repeat[listed] * repeat_stride[listed].astype(np.float64)
    row_span = block_num[listed] * block_stride[listed].astype(np.float64)
    return float((block_size[listed] * (repeat_span + row_span)).max()) < 2.0**62


def expand(events: np.ndarray, ext: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Disjoint byte ranges each access touches, as (owner index, start, end), sorted by owner then start.

    Dense accesses stay one range; accesses whose rows are contiguous become one range per repeat; the rest
    one range per block. Meant for the few accesses a fast check flagged, not for whole batches.
    """
    n = events.size
    address = events["address"]
    block_size = events["block_size"].astype(_U64)
    block_num = events["block_num"].astype(_U64)
    block_stride = events["block_stride"].astype(_U64)
    repeat = events["repeat"].astype(np.int64)
    repeat_stride = events["repeat_stride"].astype(_U64)

    row_is_range = (block_num <= 1) | (block_stride <= 1)
    row_length = np.where((block_num <= 1) | (block_stride == 0), block_size, block_num * block_size)
    dense = row_is_range & ((repeat <= 1) | (repeat_stride * block_size <= row_length))
    dense |= ext == 0

    # Pieces per access: 1 (dense), repeat (contiguous rows), repeat*block_num (scattered blocks).
    per_row = np.where(row_is_range, 1, block_num.astype(np.int64))
    pieces = np.where(dense, 1, repeat * per_row)
    # Per-access values spread to the pieces by np.repeat (sequential copies), not by gathers through ``owner``.
    def spread(values: np.ndarray) -> np.ndarray:
        return np.repeat(values, pieces)

    owner = spread(np.arange(n))
    k = np.arange(owner.size) - spread(np.cumsum(pieces) - pieces)
    row_pieces = spread(per_row)
    r = k // row_pieces
    i = k - r * row_pieces
    offset = (r.astype(_U64) * spread(repeat_stride) + i.astype(_U64) * spread(block_stride)) * spread(block_size)
    start = ends(spread(address), offset)
    stop = ends(start, spread(np.where(dense, ext, np.where(row_is_range, row_length, block_size))))
    if not _pieces_ascend(dense, row_is_range, repeat, repeat_stride, block_num, block_stride, block_size):
        order = np.lexsort((start, owner))
        owner, start, stop = owner[order], start[order], stop[order]
    # Blocks that coincide (stride 0) are the same bytes: keep one.
    keep = np.ones(owner.size, dtype=bool)
    keep[1:] = (owner[1:] != owner[:-1]) | (start[1:] != start[:-1])
    return owner[keep], start[keep], stop[keep]


_RANGE_FIELDS = {"address": np.dtype(np.uint64), "block_size": np.dtype(np.uint32), "block_num": np.dtype(np.uint16),
                 "block_stride": np.dtype(np.uint16), "repeat": np.dtype(np.uint16),
                 "repeat_stride": np.dtype(np.uint16)}  # fmt: skip


def _ranges_native(
    native: object, events: np.ndarray, ext: np.ndarray, index: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``ranges`` by the compiled loop, or None where an access is scattered or a column is not of its type."""
    columns = [events[name] for name in _RANGE_FIELDS]
    if ext.dtype != np.uint64 or any(c.dtype != dt for c, dt in zip(columns, _RANGE_FIELDS.values(), strict=True)):
        return None
    args = [np.ascontiguousarray(a) for a in (columns[0], ext, *columns[1:], np.asarray(index, dtype=np.int64))]
    pieces = native.ranges(*args, None, None, None)  # type: ignore[attr-defined]
    if pieces < 0:
        return None
    owner, start, stop = np.empty(pieces, dtype=np.int64), np.empty(pieces, dtype=_U64), np.empty(pieces, dtype=_U64)
    native.ranges(*args, owner, start, stop)  # type: ignore[attr-defined]
    return owner, start, stop


def ranges(
    events: np.ndarray, ext: np.ndarray, index: np.ndarray | None = None, native: object | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Byte ranges of the accesses ``events[index]`` (all when ``index`` is None) as (event index, start, end),
    cheaply: fields are gathered one by one (numpy copies a structured selection field by field, far slower),
    and dense accesses, the common case, are one range each without going through ``expand``. Not sorted.
    ``native``: racecheck's compiled module, whose ``ranges`` lists them where none is scattered (the columns of
    EVENT_DTYPE's types); else, or None, numpy's steps below."""

    def field(name: str) -> np.ndarray:
        return events[name] if index is None else events[name][index]

    if index is None:
        index = np.arange(events.size)
    if native is not None:
        listed = _ranges_native(native, events, ext, index)
        if listed is not None:
            return listed
    block_stride, repeat = field("block_stride"), field("repeat")
    if not index.size or (int(block_stride.max()) <= 1 and int(repeat.max()) <= 1):
        # Every access one row of adjacent blocks (the usual DataCopy of a tile): each is one range, its extent.
        start = events["address"][index]
        return index, start, ends(start, ext[index])
    block_size = field("block_size").astype(_U64)
    block_num, repeat_stride = field("block_num"), field("repeat_stride")
    row_is_range = (block_num <= 1) | (block_stride <= 1)
    row_length = np.where((block_num <= 1) | (block_stride == 0), block_size, block_num * block_size)
    dense = row_is_range & ((repeat <= 1) | (repeat_stride * block_size <= row_length))
    owner = index[dense]
    start = events["address"][owner]
    stop = ends(start, ext[owner])
    # Contiguous rows with gaps between them (DataCopy bursts): one range per row, which never coincide.
    rows = row_is_range & ~dense
    if rows.any():
        count = repeat[rows].astype(np.int64)
        row_owner = np.repeat(index[rows], count)
        r = (np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)).astype(_U64)
        step = np.repeat((repeat_stride[rows] * block_size[rows]).astype(_U64), count)
        row_start = ends(events["address"][row_owner], r * step)
        owner = np.concatenate((owner, row_owner))
        start = np.concatenate((start, row_start))
        stop = np.concatenate((stop, ends(row_start, np.repeat(row_length[rows].astype(_U64), count))))
    if not row_is_range.all():
        scattered = index[~row_is_range]
        s_owner, s_start, s_stop = expand(events[scattered], ext[scattered])
        owner = np.concatenate((owner, scattered[s_owner]))
        start = np.concatenate((start, s_start))
        stop = np.concatenate((stop, s_stop))
    return owner, start, stop
