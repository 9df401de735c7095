"""The converter registry and the helpers every family uses to build events."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sanitizerd.chips import Chip
from sanitizerd.protocol.records import EVENT_DTYPE, EventKind


@dataclass(frozen=True, slots=True)
class BlockContext:
    """What a converter may know beyond the records: the block they came from and the chip."""

    block_type: int  # BlockType of the record buffer's block (RecordBlockHead.blockInfo.blockType)
    chip: Chip


# records: one RecordType's records of a block, as a structured array of that type's payload dtype (the bytes after
# the u32 type); serials: their serial numbers; returns their events, each record's in program order.
Converter = Callable[[int, np.ndarray, np.ndarray, BlockContext], np.ndarray]


@dataclass(frozen=True, slots=True)
class Registered:
    dtype: np.dtype  # the payload layout (packed, explicit offsets, itemsize = sizeof(struct))
    convert: Converter


CONVERTERS: dict[int, Registered] = {}


def converts(*record_types: int, dtype: np.dtype) -> Callable[[Converter], Converter]:
    """Register ``convert`` for ``record_types``, whose payloads have layout ``dtype``."""

    def register(convert: Converter) -> Converter:
        for record_type in record_types:
            if record_type in CONVERTERS:
                raise ValueError(f"record type {record_type} has two converters")
            CONVERTERS[int(record_type)] = Registered(np.dtype(dtype), convert)
        return convert

    return register


def blank(n: int) -> np.ndarray:
    """``n`` zeroed events with the neutral pattern (one block, one repeat)."""
    events = np.zeros(n, dtype=EVENT_DTYPE)
    events["block_num"] = 1
    events["repeat"] = 1
    events["block_stride"] = 1
    return events


def memory_events(
    kind: EventKind | np.ndarray,
    space: int | np.ndarray,
    address: np.ndarray,
    serials: np.ndarray,
    *,
    pipe: int | np.ndarray,
    block_id: np.ndarray,
    block_type: int | np.ndarray,
    pc: np.ndarray | int = 0,
    block_size: np.ndarray | int = 32,
    block_num: np.ndarray | int = 1,
    block_stride: np.ndarray | int = 1,
    repeat: np.ndarray | int = 1,
    repeat_stride: np.ndarray | int = 0,
    align: np.ndarray | int = 0,
) -> np.ndarray:
    """One memory event per element of ``address`` (every argument broadcasts), msSanitizer's strided pattern."""
    n = len(address)
    events = np.zeros(n, dtype=EVENT_DTYPE)
    events["kind"] = kind
    events["space"] = space
    events["address"] = address
    events["serial"] = serials
    events["pipe"] = pipe
    events["block_id"] = block_id
    events["block_type"] = block_type
    events["pc"] = pc
    events["block_size"] = block_size
    events["block_num"] = block_num
    events["block_stride"] = block_stride
    events["repeat"] = repeat
    events["repeat_stride"] = repeat_stride
    events["align"] = align
    return events


def interleave(*per_record: np.ndarray) -> np.ndarray:
    """Events of the same records, one array per role (e.g. reads, writes), ordered record by record, roles in the
    order given: what a stable sort by serial would give, without the sort."""
    if len(per_record) == 1:
        return per_record[0]
    stacked = np.stack(per_record, axis=1)
    return stacked.reshape(-1)
