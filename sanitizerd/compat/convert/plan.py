"""Building a variable number of events per record, vectorised, in program order.

A converter describes each record's events as *slots*: one slot per event the record may produce (an operand's
full repeats, its full blocks, its tail block, ...), every field an array with one value per record. ``Plan.build``
lays the slots out record by record (slot order within a record), expands a slot into ``count`` copies (0 drops
it, ``k`` repeats it with the address advanced by ``step`` bytes each time) and returns packed events: no Python
loop per record, and each record's events come out in the order its slots were added.
"""

from __future__ import annotations

import numpy as np

from sanitizerd.compat.convert.base import BlockContext
from sanitizerd.protocol.records import EVENT_DTYPE, EventKind, Space

U16_MAX = 0xFFFF
U32_MAX = 0xFFFF_FFFF

# msSanitizer's MemType (u8 in device records) -> our Space (msSanitizer's AddressSpace numbering).
# L1=0, L0A, L0B, L0C, UB, BT, GM, PRIVATE, FB; anything else (INVALID) has no space.
_MEMTYPE_TO_SPACE = np.full(256, 0xFF, dtype=np.uint8)
for _mem, _space in enumerate(
    (Space.L1, Space.L0A, Space.L0B, Space.L0C, Space.UB, Space.BT, Space.GM, Space.PRIVATE, Space.FB)
):
    _MEMTYPE_TO_SPACE[_mem] = _space
NO_SPACE = 0xFF


def memtype_to_space(memtype: np.ndarray) -> np.ndarray:
    """Space per MemType value; ``NO_SPACE`` (0xFF) where the MemType is invalid."""
    return _MEMTYPE_TO_SPACE[np.asarray(memtype, dtype=np.uint8)]


def _u64(value: np.ndarray | int, n: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(value).astype(np.uint64, copy=False), (n,))


class Plan:
    """Slots of ``n`` records; see the module docstring."""

    _FIELDS = (
        "kind",
        "space",
        "address",
        "block_size",
        "block_num",
        "block_stride",
        "repeat",
        "repeat_stride",
        "align",
        "pipe",
        "dst_pipe",
        "event_id",
        "mode",
        "count",
        "step",
    )

    def __init__(self, n: int) -> None:
        self.n = n
        self._slots: list[dict[str, np.ndarray]] = []

    def add(
        self,
        kind: int | np.ndarray,
        space: int | np.ndarray,
        address: np.ndarray | int,
        *,
        pipe: int | np.ndarray,
        block_size: np.ndarray | int = 0,
        block_num: np.ndarray | int = 1,
        block_stride: np.ndarray | int = 1,
        repeat: np.ndarray | int = 1,
        repeat_stride: np.ndarray | int = 0,
        align: np.ndarray | int = 0,
        count: np.ndarray | int = 1,
        step: np.ndarray | int = 0,
        memory: bool = True,
        dst_pipe: int | np.ndarray = 0,
        event_id: int | np.ndarray = 0,
        mode: int | np.ndarray = 0,
    ) -> None:
        """One slot. Memory slots with an empty pattern (no byte) or no space are dropped; values wider than the
        event fields are folded (a contiguous repeat into one block) or, where they cannot be, clamped."""
        n = self.n
        count = _u64(count, n).copy()
        if memory:
            zero = (
                (_u64(block_size, n) == 0)
                | (_u64(block_num, n) == 0)
                | (_u64(repeat, n) == 0)
                | (np.asarray(space) == NO_SPACE)
            )
            count[np.broadcast_to(zero, (n,))] = 0
        self._slots.append(
            {
                "kind": _u64(kind, n),
                "space": _u64(space, n),
                "address": _u64(address, n),
                "block_size": _u64(block_size, n),
                "block_num": _u64(block_num, n),
                "block_stride": _u64(block_stride, n),
                "repeat": _u64(repeat, n),
                "repeat_stride": _u64(repeat_stride, n),
                "align": _u64(align, n),
                "pipe": _u64(pipe, n),
                "dst_pipe": _u64(dst_pipe, n),
                "event_id": _u64(event_id, n),
                "mode": _u64(mode, n),
                "count": count,
                "step": _u64(step, n),
            }
        )

    def add_access(self, access: np.ndarray, space: int | np.ndarray, address: np.ndarray | int, **kw) -> None:
        """A slot whose kind comes from msSanitizer's AccessType (READ=0, WRITE=1, MEMCPY_BLOCKS=2: a read then a
        write of the same bytes, as its race detector splits it)."""
        access = np.asarray(access)
        count = np.asarray(kw.pop("count", 1))
        is_read = (access == 0) | (access == 2)
        is_write = (access == 1) | (access == 2)
        self.add(EventKind.READ, space, address, count=np.where(is_read, count, 0), **kw)
        self.add(EventKind.WRITE, space, address, count=np.where(is_write, count, 0), **kw)

    def build(self, serials: np.ndarray, block_id: np.ndarray, pc: np.ndarray, context: BlockContext) -> np.ndarray:
        if not self._slots or self.n == 0:
            return np.zeros(0, dtype=EVENT_DTYPE)
        # (n, slots) -> row-major: record by record, slots in the order they were added.
        cols = {f: np.stack([s[f] for s in self._slots], axis=1).reshape(-1) for f in self._FIELDS}
        # Every slot expands to at most one event per repeat or rank (bounded by the callers): clip anyway.
        counts = np.minimum(cols["count"], U16_MAX).astype(np.int64)
        total = int(counts.sum())
        events = np.zeros(total, dtype=EVENT_DTYPE)
        if total == 0:
            return events
        slots = len(self._slots)
        rep = np.repeat
        for name in ("kind", "space", "pipe", "dst_pipe", "mode"):
            events[name] = rep(cols[name], counts)
        starts = np.cumsum(counts) - counts
        within = (np.arange(total, dtype=np.int64) - rep(starts, counts)).astype(np.uint64)
        events["address"] = rep(cols["address"], counts) + within * rep(cols["step"], counts)
        per_record = np.repeat(np.arange(self.n), slots)
        events["serial"] = rep(np.asarray(serials, dtype=np.uint64)[per_record], counts)
        events["block_id"] = rep(np.asarray(block_id)[per_record], counts)
        events["pc"] = rep(np.asarray(pc, dtype=np.uint64)[per_record], counts)
        events["block_type"] = context.block_type
        events["event_id"] = rep(np.minimum(cols["event_id"], U16_MAX), counts)
        events["align"] = rep(np.minimum(cols["align"], U16_MAX), counts)

        size = rep(cols["block_size"], counts)
        num = rep(cols["block_num"], counts)
        bstride = rep(cols["block_stride"], counts)
        repeat = rep(cols["repeat"], counts)
        rstride = rep(cols["repeat_stride"], counts)
        # Fold what the 16-bit fields cannot carry: one repeat of contiguous blocks becomes one block; a single
        # repeat needs no stride. What still does not fit is clamped (only hostile records get there).
        fold = (num > U16_MAX) & (bstride == 1) & (repeat <= 1) & (size * num <= U32_MAX)
        size = np.where(fold, size * num, size)
        num = np.where(fold, 1, num)
        rstride = np.where(repeat <= 1, 0, rstride)
        bstride = np.where(num <= 1, 1, bstride)
        events["block_size"] = np.minimum(size, U32_MAX)
        events["block_num"] = np.minimum(num, U16_MAX)
        events["block_stride"] = np.minimum(bstride, U16_MAX)
        events["repeat"] = np.minimum(repeat, U16_MAX)
        events["repeat_stride"] = np.minimum(rstride, U16_MAX)
        return events
