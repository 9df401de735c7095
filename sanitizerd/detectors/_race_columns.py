"""The columns racecheck's check reads, gathered from each batch as it arrives (issue 13).

Reading a few fields of millions of held 56-byte records back at kernel_end cost about a sixth of the check,
and all of it fell between the kernel's end and its verdict. Every field the check and its findings read is here,
so the records themselves are let go when the check starts. Each kept batch is split once, when it arrives, into
what every event, every access and every sync event contributes, appended to columns that grow by doubling, so
that at kernel_end they are views, not copies. Untouched capacity is never faulted in, so what a column holds in
memory is what was appended (and, while one doubles, the old copy).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sanitizerd.detectors._batches import Columns
from sanitizerd.detectors._block_parts import place
from sanitizerd.detectors._happens_before import (
    NPIPES,
    POS_BITS,
    BlockParts,
    Nodes,
    barrier_members,
    block_edges,
    make_nodes,
    scalar_to_cal,
)
from sanitizerd.detectors._patterns import extents
from sanitizerd.native import load
from sanitizerd_protocol.records import EVENT_DTYPE, EventKind, Pipe, block_keys

_ALL = int(Pipe.ALL)

# Every kept event: its block and its kind (which of the two tables below it is in, and the model's node kind).
_EVENT_COLUMNS = {"block_key": np.dtype(np.uint32), "kind": np.dtype(np.uint8)}
# What every access needs to its check's end: its pattern, pipe, space and order, and what names its site.
ACCESS_FIELDS = ("kind", "address", "block_size", "block_num", "block_stride", "repeat", "repeat_stride", "pipe",
                 "space", "flags", "serial", "pc", "location", "block_type", "thread")  # fmt: skip
# Filled when the access's block is complete (``_block_parts``), while blocks arrive one after the other.
PLACED_FIELDS = ("seg", "issued", "barriers", "pipe_index")
_ACCESS_COLUMNS = {
    **{name: EVENT_DTYPE[name] for name in ACCESS_FIELDS},
    "ext": np.dtype(np.uint64),
    **{name: np.dtype(np.int32) for name in PLACED_FIELDS},
}
# A node as held until the kernel's end, narrow (event, chain and key follow from these; ``Nodes`` has them wide).
_NODE_COLUMNS = {
    "block": np.dtype(np.int32),
    "pipe": np.dtype(np.uint8),
    "pos": np.dtype(np.int64),
    "ordinal": np.dtype(np.int32),
    "local": np.dtype(np.int64),
    "kind": np.dtype(np.uint8),
}
# Every sync event: what the model needs, and what a deadlock finding names.
SYNC_FIELDS = ("pipe", "dst_pipe", "event_id", "mode", "block_num", "address", "block_type", "block_id", "location",
               "pc", "serial")  # fmt: skip
_SYNC_COLUMNS = {name: EVENT_DTYPE[name] for name in SYNC_FIELDS}
# The compiled hold (sanitizerd/native/_racecheck.c: every column of a batch in one pass over its records), or None
# where numpy's compress per field is to run (SANITIZERD_NATIVE=0, or not built). A detector may choose either.
NATIVE = load("_racecheck")
_OFFSET = {name: EVENT_DTYPE.fields[name][1] for name in EVENT_DTYPE.names}


class _Table:
    """Columns of one dtype each, appended to in place; capacity quadruples, so each row is copied a third of a
    time on average (doubling copied each about once: a tenth of a large kernel's hold). Capacity never appended
    to is never faulted in, so the larger step costs address space only."""

    def __init__(self, dtypes: dict[str, np.dtype]) -> None:
        self.dtypes = dtypes
        self.size = 0
        self.capacity = 0
        self.columns: dict[str, np.ndarray] = {name: np.empty(0, dtype=dt) for name, dt in dtypes.items()}

    def grow(self, n: int) -> Columns:
        """Room for ``n`` more rows, counted as appended: views of it, per column, to fill."""
        end = self.size + n
        if end > self.capacity:
            capacity = max(end, 4 * self.capacity, 4096)
            for name, old in self.columns.items():
                grown = np.empty(capacity, dtype=self.dtypes[name])
                grown[: self.size] = old[: self.size]
                self.columns[name] = grown
            self.capacity = capacity
        room = Columns({name: column[self.size : end] for name, column in self.columns.items()})
        self.size = end
        return room

    def view(self) -> Columns:
        return Columns({name: column[: self.size] for name, column in self.columns.items()})


_EXTENT_FIELDS = ("repeat", "block_num", "block_size", "block_stride", "repeat_stride")


def native_extents(native: object | None, accesses: Columns) -> None:
    """``accesses["ext"]`` filled with ``patterns.extents`` of the other columns: compiled where ``native`` is given
    and every column has the model's dtype (held tables' columns are C-contiguous), else numpy's."""
    columns = [accesses[name] for name in _EXTENT_FIELDS]
    out = accesses["ext"]
    if native is not None and out.dtype == np.uint64 and out.flags.c_contiguous and all(
        c.dtype == EVENT_DTYPE[name] and c.flags.c_contiguous for name, c in zip(_EXTENT_FIELDS, columns, strict=True)
    ):
        native.extents(*columns, out)  # type: ignore[attr-defined]
    else:
        out[:] = extents(accesses)


@dataclass(frozen=True, slots=True)
class Stretch:
    """Complete blocks, one after the other: their rows in the held tables ([lo, hi) of events, accesses, sync
    events, and blocks numbered kernel-wide)."""

    events: tuple[int, int]
    accesses: tuple[int, int]
    syncs: tuple[int, int]
    blocks: tuple[int, int]


@dataclass(frozen=True, slots=True)
class Span(Stretch):
    """A stretch whose accesses are placed and whose nodes are made (``HeldColumns.make``): their rows in the
    node, edge and stuck tables, the members of pipe_barrier(PIPE_ALL) the nodes were made with (None: the
    stretch has no such barrier), and the pipes it keeps busy (a bit per pipe)."""

    nodes: tuple[int, int]
    edges: tuple[tuple[int, int], ...]
    multi: tuple[int, int]
    stuck: tuple[tuple[int, int], ...]
    members: bytes | None
    busy: int


class HeldColumns:
    """A kernel launch's kept events as racecheck's check reads them: per event in arrival order (``events``), per
    access (``accesses``) and per sync event (``syncs``), each in arrival order among its own kind."""

    def __init__(self, native: object | None = NATIVE) -> None:
        self.native = native  # the compiled hold, or None: numpy's
        self._events = _Table(_EVENT_COLUMNS)
        self._accesses = _Table(_ACCESS_COLUMNS)
        self._syncs = _Table(_SYNC_COLUMNS)
        # Whether every block so far arrived whole and after the blocks of lower keys (as the emulator and
        # msSanitizer's per-block buffers send them): then a block is complete once the next one starts. The
        # events, accesses and sync events of the blocks complete so far, and of those made so far (their accesses
        # placed among their sync nodes, the nodes made: ``make``). A stretch left unmade (``skip``: its proof
        # stood for it) leaves the nodes of the kernel incomplete, and its accesses unplaced.
        self.in_order = True
        self._complete_to = (0, 0, 0)
        self._made_to = 0
        self.whole = True
        # The model's sync nodes of the complete blocks, made as they completed, and for each stretch of blocks
        # made at once, the members of pipe_barrier(PIPE_ALL) it used if it had any such barrier (the kernel's
        # are known only at its end; where they differ, the nodes are made again then).
        self._nodes = _Table(_NODE_COLUMNS)
        self._blocks = 0
        self._members: set[bytes] = set()
        # Their edges (``_happens_before.BlockParts``), node indices kernel-wide.
        pair = {"src": np.dtype(np.int64), "dst": np.dtype(np.int64)}
        self._edges = [_Table(pair) for _ in range(3)]  # flag hand-overs, buffer hand-overs, issue
        self._multi = _Table(pair)
        self._has_multi = False
        self._stuck = [_Table({"node": np.dtype(np.int64)}) for _ in range(2)]
        self._finished = False  # the last block's BLOCK_FINISH arrived: it is complete, and may not grow
        self.completed: list[Stretch] = []  # stretches completed since the detector last took them
        self._unmade: list[Stretch] = []  # complete, neither made nor skipped

    @property
    def size(self) -> int:
        return self._events.size

    def append(self, batch: np.ndarray, keep: np.ndarray | None, access: np.ndarray) -> None:
        """The events of ``batch`` that ``keep`` marks (None: all of them; accesses and sync events only);
        ``access`` marks its accesses. Each field is gathered straight from the records into its column (no copy
        of the selected records first)."""
        previous = int(self._events.columns["block_key"][self._events.size - 1]) if self._events.size else -1
        size = batch.size if keep is None else int(np.count_nonzero(keep))
        if self.native is not None and batch.dtype == EVENT_DTYPE:
            key = self._append_native(batch, keep, access, size)
        else:
            key = self._append_numpy(batch, keep, access, size)
        if self.in_order:  # a finished block's key may not come back
            floor = previous + 1 if self._finished else previous
            self.in_order = int(key[0]) >= floor and bool((key[1:] >= key[:-1]).all())
        self._finished = False
        if self.in_order:
            changes = np.flatnonzero(key[1:] != key[:-1])
            if changes.size:  # the blocks before the last one to start are complete
                self._complete(self._events.size - size + int(changes[-1]) + 1)
            elif int(key[0]) != previous and previous >= 0:
                self._complete(self._events.size - size)

    def _append_native(self, batch: np.ndarray, keep: np.ndarray | None, access: np.ndarray, size: int) -> np.ndarray:
        """``append``'s columns in one pass over the records (the compiled hold); the kept events' block keys."""
        batch = np.ascontiguousarray(batch)
        access = np.ascontiguousarray(access, dtype=bool)
        if keep is not None:
            keep = np.ascontiguousarray(keep, dtype=bool)
        n = int(np.count_nonzero(access))
        room = self._events.grow(size)
        accesses = self._accesses.grow(n)
        syncs = self._syncs.grow(size - n)
        self.native.gather(  # type: ignore[attr-defined]
            batch, keep, access, room["block_key"], room["kind"],
            tuple((_OFFSET[name], accesses[name]) for name in ACCESS_FIELDS),
            tuple((_OFFSET[name], syncs[name]) for name in SYNC_FIELDS),
        )  # fmt: skip
        if n:
            native_extents(self.native, accesses)
        return room["block_key"]

    def _append_numpy(self, batch: np.ndarray, keep: np.ndarray | None, access: np.ndarray, size: int) -> np.ndarray:
        """``append``'s columns gathered with numpy, field by field (the reference path); the kept events' keys."""
        room = self._events.grow(size)
        if keep is None:
            room["kind"][:] = batch["kind"]
            key = block_keys(batch, out=room["block_key"])
        else:
            np.compress(keep, batch["kind"], out=room["kind"])
            key = room["block_key"]
            np.compress(keep, block_keys(batch), out=key)
        n = int(np.count_nonzero(access))
        if n:
            room = self._accesses.grow(n)
            for name in ACCESS_FIELDS:
                _gather(batch[name], access, n == batch.size, room[name])
            room["ext"][:] = extents(room)
        if n < size:
            sync = ~access if keep is None else keep & ~access
            room = self._syncs.grow(size - n)
            for name in SYNC_FIELDS:
                _gather(batch[name], sync, False, room[name])
        return key

    def finish(self, block_key: int) -> None:
        """The block of ``block_key`` has run its last instruction (BLOCK_FINISH): if it is the one arriving now,
        it is complete without waiting for the next block to start."""
        if self.in_order and self._events.size and int(self._events.columns["block_key"][self._events.size - 1]) == (
            block_key
        ):
            self._complete(self._events.size)
            self._finished = True

    def placed(self) -> bool:
        """Places every access among its block's nodes, the last block being complete now; whether they could be
        (blocks arrived one after the other, and none was skipped): then ``accesses`` has PLACED_FIELDS and
        ``parts`` the kernel's nodes."""
        if self.in_order:
            self._complete(self._events.size)
            if self.whole:
                self.make_all()
        return self.in_order and self.whole

    def complete_all(self) -> None:
        """The last block is complete too (the kernel ended)."""
        if self.in_order:
            self._complete(self._events.size)

    def _complete(self, end: int) -> None:
        """The blocks among events [complete so far, ``end``) are complete."""
        lo, access_lo, sync_lo = self._complete_to
        if end <= lo:
            return
        kind = self._events.columns["kind"][lo:end]
        key = self._events.columns["block_key"][lo:end]
        blocks = 1 + int(np.count_nonzero(key[1:] != key[:-1]))
        access_hi = access_lo + int(np.count_nonzero(kind <= EventKind.WRITE))
        sync_hi = sync_lo + (kind.size - (access_hi - access_lo))
        block_lo = self._blocks
        self._blocks += blocks
        stretch = Stretch(
            events=(lo, end), accesses=(access_lo, access_hi), syncs=(sync_lo, sync_hi), blocks=(block_lo, self._blocks)
        )
        self.completed.append(stretch)
        self._unmade.append(stretch)
        self._complete_to = (end, access_hi, sync_hi)

    def make_all(self) -> None:
        """Make every complete stretch not made yet (as one)."""
        if self._unmade:
            self.make(joined(self._unmade))

    def skip(self, stretch: Stretch) -> None:
        """Leave ``stretch`` (the next to make, or the next ones joined) unmade for good."""
        self._take(stretch)
        self.whole = False

    def _take(self, stretch: Stretch) -> None:
        if stretch.events[0] != self._made_to:
            raise ValueError("stretches are made or skipped in order")
        self._made_to = stretch.events[1]
        self._unmade = [s for s in self._unmade if s.events[0] >= self._made_to]

    def make(self, stretch: Stretch) -> Span:
        """Place the accesses of ``stretch`` (the next to make, or the next ones joined) among its sync nodes, and
        make the nodes."""
        self._take(stretch)
        lo, end = stretch.events
        access_lo, access_hi = stretch.accesses
        sync_lo, sync_hi = stretch.syncs
        events = self._events.columns
        kind = events["kind"][lo:end]
        key = events["block_key"][lo:end]
        start = np.ones(kind.size, dtype=bool)
        start[1:] = key[1:] != key[:-1]
        accesses, syncs = self._accesses.columns, self._syncs.columns
        placed = place(
            kind, start, syncs["pipe"][sync_lo:sync_hi], syncs["dst_pipe"][sync_lo:sync_hi],
            accesses["pipe"][access_lo:access_hi], accesses["serial"][access_lo:access_hi], self.native,
        )  # fmt: skip
        for name, values in zip(PLACED_FIELDS, placed, strict=True):
            accesses[name][access_lo:access_hi] = values
        before = self._offsets()
        work = accesses["pipe"][access_lo:access_hi][accesses["ext"][access_lo:access_hi] > 0]
        work = scalar_to_cal(np.flatnonzero(np.bincount(work, minlength=1)))  # np.unique, counted (pipes are bytes)
        members, busy = self._make_nodes(lo, kind, start, work, sync_lo, sync_hi, stretch.blocks[0])
        after = self._offsets()
        return Span(
            events=stretch.events, accesses=stretch.accesses, syncs=stretch.syncs, blocks=stretch.blocks,
            nodes=(before[0], after[0]), edges=tuple(zip(before[1:4], after[1:4], strict=True)),
            multi=(before[4], after[4]), stuck=tuple(zip(before[5:], after[5:], strict=True)), members=members,
            busy=busy,
        )  # fmt: skip

    def _offsets(self) -> tuple[int, ...]:
        """The sizes of the node, edge and stuck tables: where a span's rows start."""
        tables = (self._nodes, *self._edges, self._multi, *self._stuck)
        return tuple(table.size for table in tables)

    def _make_nodes(
        self, lo: int, kind: np.ndarray, start: np.ndarray, work: np.ndarray, sync_lo: int, sync_hi: int, block_lo: int
    ) -> tuple[bytes | None, int]:
        """The sync nodes of complete blocks (events from ``lo``, of kinds ``kind``; ``start`` marks where each
        block starts; ``work``: the pipes their accesses ran on), as ``_happens_before.make_nodes`` makes them for
        the whole kernel. Returns the members of pipe_barrier(PIPE_ALL) they were made with (None: no such
        barrier) and the busy pipes, a bit each."""
        blocks = np.cumsum(start) + (block_lo - 1)
        is_sync = kind >= EventKind.SET_FLAG
        if not is_sync.any():
            return None, _bits(barrier_members(kind[:0], work[:0], work[:0], work))
        syncs = self._syncs.columns
        pipe = syncs["pipe"][sync_lo:sync_hi].astype(np.int64)
        dst_pipe = syncs["dst_pipe"][sync_lo:sync_hi].astype(np.int64)
        sync_kind = kind[is_sync]
        members = barrier_members(sync_kind, pipe, dst_pipe, work)
        made_with: bytes | None = None
        if ((sync_kind == EventKind.PIPE_BARRIER) & (pipe == _ALL)).any():
            made_with = members.tobytes()
            self._members.add(made_with)
        seq = lo + np.flatnonzero(is_sync)
        nodes = make_nodes(sync_kind, pipe, dst_pipe, blocks[is_sync], seq, members)
        parts = block_edges(nodes, pipe, dst_pipe, syncs["event_id"][sync_lo:sync_hi], members)
        first = self._nodes.size
        room = self._nodes.grow(nodes.size)
        for name in _NODE_COLUMNS:
            room[name][:] = getattr(nodes, name)
        room["local"] += sync_lo
        for table, (src, dst) in zip(self._edges, parts.edges, strict=True):
            _append_pair(table, src + first, dst + first)
        for src, dst in parts.multi:
            self._has_multi = True
            _append_pair(self._multi, src + first, dst + first)
        for table, stuck in zip(self._stuck, parts.stuck, strict=True):
            table.grow(stuck.size)["node"][:] = stuck + first
        return made_with, _bits(members)

    def parts(self, members: np.ndarray) -> BlockParts | None:
        """The nodes and edges made block by block, if made with these members of pipe_barrier(PIPE_ALL) (the
        kernel's); else None. Only once ``placed`` is true."""
        if self._members - {members.astype(np.int64).tobytes()}:
            return None
        held = self._nodes.view()
        block, pipe, pos = held["block"].astype(np.int64), held["pipe"].astype(np.int64), held["pos"]
        chain = block * NPIPES + pipe
        nodes = Nodes(
            block=block, pipe=pipe, pos=pos, ordinal=held["ordinal"].astype(np.int64), event=pos >> 1,
            local=held["local"], kind=held["kind"], key=(chain << POS_BITS) + pos, chain=chain,
        )  # fmt: skip
        edges = tuple(_pair(table) for table in self._edges)
        multi = (_pair(self._multi),) if self._has_multi else ()
        return BlockParts(nodes, edges, multi, tuple(table.view()["node"] for table in self._stuck))

    @property
    def events(self) -> Columns:
        return self._events.view()

    @property
    def accesses(self) -> Columns:
        return self._accesses.view()

    @property
    def syncs(self) -> Columns:
        return self._syncs.view()


class SpanColumns:
    """The blocks of one span read as a kernel of their own, as ``racecheck.Kernel`` reads ``HeldColumns``: rows
    numbered from the span's first, blocks from its first block (``_block_proofs``)."""

    def __init__(self, held: HeldColumns, span: Span) -> None:
        self.held, self.span = held, span

    @property
    def size(self) -> int:
        lo, hi = self.span.events
        return hi - lo

    def placed(self) -> bool:
        return True

    @property
    def events(self) -> Columns:
        return self.held.events[slice(*self.span.events)]

    @property
    def accesses(self) -> Columns:
        return self.held.accesses[slice(*self.span.accesses)]

    @property
    def syncs(self) -> Columns:
        return self.held.syncs[slice(*self.span.syncs)]

    def parts(self, members: np.ndarray) -> BlockParts | None:
        """The span's nodes and edges as made when it completed, if made with these members of
        pipe_barrier(PIPE_ALL); else None."""
        span, held = self.span, self.held
        if span.members is not None and span.members != members.astype(np.int64).tobytes():
            return None
        first = span.nodes[0]
        rows = held._nodes.view()[slice(*span.nodes)]
        block = rows["block"].astype(np.int64) - span.blocks[0]
        pipe = rows["pipe"].astype(np.int64)
        pos = rows["pos"] - 2 * span.events[0]
        chain = block * NPIPES + pipe
        nodes = Nodes(
            block=block, pipe=pipe, pos=pos, ordinal=rows["ordinal"].astype(np.int64), event=pos >> 1,
            local=rows["local"] - span.syncs[0], kind=rows["kind"], key=(chain << POS_BITS) + pos, chain=chain,
        )  # fmt: skip

        def rebased(table: _Table, lo_hi: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
            view = table.view()[slice(*lo_hi)]
            return view["src"] - first, view["dst"] - first

        edges = tuple(rebased(table, lo_hi) for table, lo_hi in zip(held._edges, span.edges, strict=True))
        multi = (rebased(held._multi, span.multi),) if span.multi[1] > span.multi[0] else ()
        stuck = tuple(
            table.view()["node"][slice(*lo_hi)] - first for table, lo_hi in zip(held._stuck, span.stuck, strict=True)
        )
        return BlockParts(nodes, edges, multi, stuck)


def joined(stretches: list[Stretch]) -> Stretch:
    """Consecutive stretches as one."""
    first, last = stretches[0], stretches[-1]
    return Stretch(
        events=(first.events[0], last.events[1]), accesses=(first.accesses[0], last.accesses[1]),
        syncs=(first.syncs[0], last.syncs[1]), blocks=(first.blocks[0], last.blocks[1]),
    )


def _bits(pipes: np.ndarray) -> int:
    return int(np.bitwise_or.reduce(np.left_shift(1, pipes.astype(np.int64)), initial=0))


def _append_pair(table: _Table, src: np.ndarray, dst: np.ndarray) -> None:
    room = table.grow(src.size)
    room["src"][:], room["dst"][:] = src, dst


def _pair(table: _Table) -> tuple[np.ndarray, np.ndarray]:
    view = table.view()
    return view["src"], view["dst"]


def _gather(field: np.ndarray, mask: np.ndarray, every: bool, out: np.ndarray) -> None:
    if every:
        out[:] = field
    else:
        np.compress(mask, field, out=out)


def rank_among(kind_is: np.ndarray, arrival: np.ndarray) -> np.ndarray:
    """Rows (in a table of one kind, arrival order) of the events at arrival positions ``arrival``, all of that
    kind; ``kind_is`` marks, per event in arrival order, whether it is of that kind."""
    return (np.cumsum(kind_is) - 1)[arrival]
