"""Building a variable number of events per record, vectorised, in program order.

A converter describes each record's events as *slots*: one slot per event the record may produce (an operand's
full repeats, its full blocks, its tail block, ...), every field an array with one value per record. ``Plan.build``
lays the slots out record by record (slot order within a record), expands a slot into ``count`` copies (0 drops
it, ``k`` repeats it with the address advanced by ``step`` bytes each time) and returns packed events: no Python
loop per record, and each record's events come out in the order its slots were added.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sanitizerd.compat.records.convert.base import BlockContext, Converter, converts, expanding, pack
from sanitizerd.compat.records.types import MEMTYPE_TO_SPACE, NO_SPACE
from sanitizerd_protocol.records import EVENT_DTYPE, EventKind

U16_MAX = 0xFFFF
U32_MAX = 0xFFFF_FFFF


def memtype_to_space(memtype: np.ndarray) -> np.ndarray:
    """Space per MemType value; ``NO_SPACE`` (0xFF) where the MemType is invalid."""
    return MEMTYPE_TO_SPACE[np.asarray(memtype, dtype=np.uint8)]


def explicit_align(size: np.ndarray | int) -> np.ndarray | int:
    """A record's own alignment as an event's: msSanitizer checks nothing for 0, which for an event is 1 (0 means
    "by address space")."""
    if isinstance(size, np.ndarray):
        return np.where(size == 0, 1, size)
    return size or 1


def _pick(value: np.ndarray | int, rows: np.ndarray | None) -> np.ndarray | int:
    """A slot argument for the kept rows: scalars stay scalars (assigned by broadcasting)."""
    value = np.asarray(value)
    if value.ndim == 0:
        return value[()]
    return value if rows is None else value[rows]


def _clamp(value: np.ndarray | int, top: int) -> np.ndarray | int:
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "ui" and np.iinfo(value.dtype).max <= top:
            return value
        return np.minimum(value, np.asarray(top, dtype=np.uint64) if value.dtype.kind == "u" else top)
    return min(int(value), top)


class Plan:
    """Slots of ``n`` records; see the module docstring. A slot stores only the rows it keeps (count > 0), as
    packed events, so the many alternative slots of a masked operand cost a mask each."""

    def __init__(self, n: int, serials: np.ndarray, records: np.ndarray, context: BlockContext) -> None:
        self.n = n
        self._serials = np.asarray(serials, dtype=np.uint64)
        self._block_id = records["block_id"]
        self._pc = records["pc"]
        self._block_type = context.block_type
        self._context = context
        self._slots = 0
        # (slot, record row of each event, events, whether the slot kept every record exactly once)
        self._parts: list[tuple[int, np.ndarray, np.ndarray, bool]] = []

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
        rows: np.ndarray | None = None,
        pc: np.ndarray | None = None,
    ) -> None:
        """One slot. Array arguments have one value per record, or, with ``rows``, one per row in ``rows`` (the
        records this slot may concern, ascending). Memory slots with an empty pattern (no byte) or no space are
        dropped; values wider than the event fields are folded (one repeat of contiguous blocks into one block)
        or, where they cannot be, clamped (only hostile records get there). ``pc``: what the events carry there
        instead of the record's pc (a signal's value)."""
        slot = self._slots
        self._slots += 1
        width = self.n if rows is None else len(rows)
        keep = np.asarray(count) > 0
        if memory:
            keep = keep & ~(
                (np.asarray(block_size) == 0)
                | (np.asarray(block_num) == 0)
                | (np.asarray(repeat) == 0)
                | (np.asarray(space) == NO_SPACE)
            )
        keep = np.broadcast_to(keep, (width,))
        if keep.all():
            local = None
            kept = np.arange(self.n) if rows is None else rows
        else:
            local = np.flatnonzero(keep)
            if local.size == 0:
                return
            kept = local if rows is None else rows[local]

        def pick(value: np.ndarray | int) -> np.ndarray | int:
            return _pick(value, local)

        m = kept.size
        counts = pick(count)
        if isinstance(counts, np.ndarray):
            # Every slot expands to at most one event per repeat or rank (bounded by the callers): clip anyway.
            counts = np.minimum(counts, U16_MAX).astype(np.int64)
            expand = not (counts == 1).all()
        else:
            counts = min(int(counts), U16_MAX)
            expand = counts != 1
            counts = np.full(m, counts, dtype=np.int64)
        if expand or self._context.budget.refusing:
            counts = expanding(self._context, self._serials[kept], counts)
            expand = not (counts == 1).all()
            if not counts.any():
                return
        if expand:
            which = np.repeat(np.arange(m), counts)
            starts = np.cumsum(counts) - counts
            within = (np.arange(which.size, dtype=np.int64) - starts[which]).astype(np.uint64)
        else:
            which = None

        def each(value: np.ndarray | int) -> np.ndarray | int:
            value = pick(value)
            if which is None or not isinstance(value, np.ndarray):
                return value
            return value[which]

        erows = kept if which is None else kept[which]
        address = each(address)
        if which is not None:
            address = np.asarray(address, dtype=np.uint64) + within * np.asarray(each(step), dtype=np.uint64)
        size, num, bstride = each(block_size), each(block_num), each(block_stride)
        rep, rstride = each(repeat), each(repeat_stride)
        if isinstance(num, np.ndarray) and (num > U16_MAX).any():
            size = np.asarray(size, dtype=np.uint64) * np.ones(erows.size, dtype=np.uint64)
            num = num.astype(np.uint64)
            fold = (num > U16_MAX) & (np.asarray(bstride) == 1) & (np.asarray(rep) <= 1) & (size * num <= U32_MAX)
            size = np.where(fold, size * num, size)
            num = np.where(fold, 1, num)
        events = pack(
            erows.size, address=address, serial=self._serials[erows], pc=self._pc[erows] if pc is None else each(pc),
            block_id=self._block_id[erows], kind=each(kind), space=each(space), block_type=self._block_type,
            pipe=each(pipe), dst_pipe=each(dst_pipe), mode=each(mode), event_id=_clamp(each(event_id), U16_MAX),
            align=_clamp(each(align), U16_MAX), block_size=_clamp(size, U32_MAX), block_num=_clamp(num, U16_MAX),
            block_stride=_clamp(bstride, U16_MAX), repeat=_clamp(rep, U16_MAX),
            repeat_stride=_clamp(rstride, U16_MAX),
        )  # fmt: skip
        self._parts.append((slot, erows, events, which is None and erows.size == self.n))

    def add_access(self, access: np.ndarray | int, space: int | np.ndarray, address: np.ndarray | int, **kw) -> None:
        """A slot whose kind comes from msSanitizer's AccessType (READ=0, WRITE=1, MEMCPY_BLOCKS=2: a read then a
        write of the same bytes, as its race detector splits it)."""
        access = np.asarray(access)
        count = kw.pop("count", 1)
        if access.ndim == 0:
            if access in (0, 2):
                self.add(EventKind.READ, space, address, count=count, **kw)
            else:
                self._slots += 1
            if access in (1, 2):
                self.add(EventKind.WRITE, space, address, count=count, **kw)
            else:
                self._slots += 1
            return
        count = np.asarray(count)
        is_read = (access == 0) | (access == 2)
        is_write = (access == 1) | (access == 2)
        self.add(EventKind.READ, space, address, count=np.where(is_read, count, 0), **kw)
        self.add(EventKind.WRITE, space, address, count=np.where(is_write, count, 0), **kw)

    def build(self) -> np.ndarray:
        """The events, record by record, each record's slots in the order they were added."""
        parts = self._parts
        if not parts:
            return np.zeros(0, dtype=EVENT_DTYPE)
        if len(parts) == 1:
            return parts[0][2]
        if all(p[3] for p in parts):
            # Every slot kept every record once: interleave.
            out = np.empty((self.n, len(parts)), dtype=EVENT_DTYPE)
            raw = out.view(np.uint8).reshape(self.n, len(parts), EVENT_DTYPE.itemsize)
            for column, part in enumerate(parts):  # as bytes: far faster than copying structured items
                raw[:, column, :] = part[2].view(np.uint8).reshape(self.n, EVENT_DTYPE.itemsize)
            return out.reshape(-1)
        # Scatter each slot's events to their places: a record's events start after those of the records before
        # it, and within a record the slots come in the order they were added (no sort).
        width = len(parts)
        counts = np.zeros((self.n, width), dtype=np.int64)
        for column, part in enumerate(parts):
            counts[:, column] = np.bincount(part[1], minlength=self.n)
        flat = counts.reshape(-1)
        starts = (np.cumsum(flat) - flat).reshape(self.n, width)
        out = np.empty(int(flat.sum()), dtype=EVENT_DTYPE)
        raw = out.view(np.uint8).reshape(out.size, EVENT_DTYPE.itemsize)
        for column, (_, rows, events, once) in enumerate(parts):
            at = starts[rows, column]
            if not once and rows.size > 1 and (rows[1:] == rows[:-1]).any():
                # A slot expanded into several events per record: they follow one another.
                at = at + (np.arange(rows.size) - np.searchsorted(rows, rows, side="left"))
            raw[at] = events.view(np.uint8).reshape(events.size, EVENT_DTYPE.itemsize)
        return out


# A converter written as a description of slots: it adds each record's slots to ``plan`` (a Plan of ``records``).
PlanFill = Callable[[Plan, np.ndarray, BlockContext, int], None]


def plans(
    *record_types: int, dtype: np.dtype, compiled: Converter | None = None
) -> Callable[[PlanFill], PlanFill]:
    """Register ``fill(plan, records, context, record_type)`` as the converter of ``record_types``: the plan of the
    records is made before it and built after it, so a family's converters say only what their slots are.
    ``compiled``: a converter tried first, whose None leaves the batch to the plan (a compiled usual case)."""

    def register(fill: PlanFill) -> PlanFill:
        def convert(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
            if compiled is not None:
                events = compiled(record_type, records, serials, context)
                if events is not None:
                    return events
            plan = Plan(len(records), serials, records, context)
            fill(plan, records, context, record_type)
            return plan.build()

        convert.__name__ = convert.__qualname__ = fill.__name__
        convert.__doc__ = fill.__doc__
        converts(*record_types, dtype=dtype)(convert)
        return fill

    return register
