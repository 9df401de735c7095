"""The geometry of an access's strided pattern as the wire carries it (docs/protocol.md; reference §1.7): how far
it reaches and how many pieces it lists, from its fields alone. Both doors need it before anything is checked: the
detectors, and msSanitizer's converters bounding a record's expansion before they make it.

Block ``i`` of repeat ``r`` covers ``[address + (r*repeat_stride + i*block_stride) * block_size, + block_size)``.
"""

from __future__ import annotations

import numpy as np

_U64 = np.uint64
_SATURATE = 1 << 62


def extents(events: np.ndarray) -> np.ndarray:
    """Bytes from the first to one past the last byte each access touches; 0 for an empty access."""
    repeat, block_num = events["repeat"], events["block_num"]
    block_size = events["block_size"]
    block_stride = events["block_stride"]
    if events.size and int(repeat.max()) <= 1 and int(block_stride.max()) <= 1:
        # One row each, of adjacent blocks (a DataCopy of a tile) or of one block repeated in place (stride 0, as
        # sync events carry): block_num x block_size or block_size, which fit 48 bits; a repeat of 0 is empty.
        if int(block_stride.min()) == 0:
            block_num = np.where(block_stride == 0, np.minimum(block_num, 1), block_num)
        ext = block_num.astype(_U64)
        ext *= block_size
        if int(repeat.min()) == 0:
            ext[repeat == 0] = 0
        return ext
    # In place, from the 16-bit fields: this runs over every event of every batch.
    units = np.maximum(repeat, 1).astype(_U64)
    units -= _U64(1)
    units *= events["repeat_stride"]
    blocks = np.maximum(block_num, 1).astype(_U64)
    blocks -= _U64(1)
    blocks *= block_stride
    units += blocks
    units += _U64(1)
    if events.size and int(units.max()) * int(block_size.max()) >= _SATURATE:
        # Only hostile or corrupt records get here; saturate instead of wrapping round.
        span = np.minimum(units.astype(np.float64) * block_size, float(_SATURATE))
        ext = span.astype(_U64)
    else:
        ext = units
        ext *= block_size
    empty = np.minimum(repeat, block_num) == 0
    if empty.any():
        ext[empty] = 0
    return ext


def pattern_shape(events: np.ndarray, ext: np.ndarray, index: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """Per access (of ``events[index]`` when given), as ``detectors._patterns.expand`` classifies it: whether each
    row is one range, a row's length in bytes, and whether the whole access is one range. Fields are gathered one
    by one: numpy copies a structured selection field by field, several times slower."""

    def field(name: str) -> np.ndarray:
        return events[name] if index is None else events[name][index]

    block_num = field("block_num").astype(np.int64)
    block_stride = field("block_stride").astype(np.int64)
    block_size = field("block_size").astype(_U64)
    row_is_range = (block_num <= 1) | (block_stride <= 1)
    row_length = np.where((block_num <= 1) | (block_stride == 0), block_size, block_num.astype(_U64) * block_size)
    repeat_bytes = field("repeat_stride").astype(_U64) * block_size
    extent = ext if index is None else ext[index]
    dense = (row_is_range & ((field("repeat") <= 1) | (repeat_bytes <= row_length))) | (extent == 0)
    return row_is_range, row_length, dense


def piece_counts(events: np.ndarray, ext: np.ndarray, index: np.ndarray | None = None) -> np.ndarray:
    """Pieces each access (of ``events[index]`` when given) lists, coinciding blocks counted each time: what
    ``detectors._patterns.ranges`` would allocate."""
    row_is_range, _, dense = pattern_shape(events, ext, index)
    repeat = (events["repeat"] if index is None else events["repeat"][index]).astype(np.int64)
    block_num = (events["block_num"] if index is None else events["block_num"][index]).astype(np.int64)
    return np.where(dense, 1, np.where(row_is_range, repeat, repeat * block_num))
