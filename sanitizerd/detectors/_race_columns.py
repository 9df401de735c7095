"""The columns racecheck's check reads, gathered from each batch as it arrives (issue 13).

Reading a few fields of millions of held 56-byte records back at kernel_end cost about a sixth of the check,
and all of it fell between the kernel's end and its verdict. Every field the check and its findings read is here,
so the records themselves are let go when the check starts. Each kept batch is split once, when it arrives, into
what every event, every access and every sync event contributes, appended to columns that grow by doubling, so
that at kernel_end they are views, not copies. Untouched capacity is never faulted in, so what a column holds in
memory is what was appended (and, while one doubles, the old copy).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sanitizerd.detectors._batches import Columns
from sanitizerd.detectors._block_parts import place
from sanitizerd.detectors._happens_before import (
    _ALL_PIPES,
    NPIPES,
    POS_BITS,
    BlockParts,
    Nodes,
    barrier_members,
    block_edges,
    make_nodes,
    scalar_to_cal,
)
from sanitizerd.detectors._patterns import ADDRESS_LIMIT, ends, extents
from sanitizerd.detectors.memory_budget import MemoryAccount
from sanitizerd.native import load
from sanitizerd_protocol.records import EVENT_DTYPE, EventKind, Pipe, Space, block_keys

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


def _mask(names: tuple[str, ...]) -> bytes:
    """The bytes of a 56-byte record that fields ``names`` take."""
    mask = bytearray(EVENT_DTYPE.itemsize)
    for name in names:
        offset = _OFFSET[name]
        mask[offset : offset + EVENT_DTYPE[name].itemsize] = b"\xff" * EVENT_DTYPE[name].itemsize
    return bytes(mask)


# What the compiled mirror (``HeldColumns.mirror_from``) compares of a record with the reference's: every field
# held of an access, or of a sync event but its block id (the block's own; its key is compared), and the kind.
# Address and serial are compared apart (their offsets), in the first two words, where the compiled loop expects
# them.
_ACCESS_MASK = _mask(ACCESS_FIELDS)
_SYNC_MASK = _mask((*(name for name in SYNC_FIELDS if name != "block_id"), "kind"))
assert (_OFFSET["address"], _OFFSET["serial"]) == (0, 8)
_BATCH_END, _BLOCK_END, _MISMATCH = range(3)  # how a mirror pass stopped (_racecheck.c)
_REF_NO_MATCH, _REF_ACCESS, _REF_SYNC = range(3)  # what a reference record may match
# An extent from here on may depend on its batch (``native_extents`` saturates a batch together): a reference
# access with one matches nothing.
_EXACT_EXTENT = 1 << 53
# Blocks compared and found not alike before a launch stops comparing: an SPMD kernel's blocks are alike, and each
# block compared in vain costs some 25 us of Python over gathering it (a client sending one-record blocks).
MAX_MISSES = 8
_U64 = np.uint64
_RECORD = np.dtype((np.void, EVENT_DTYPE.itemsize))  # a record as its bytes: copied whole, not field by field


# A table's first capacity, in rows, and the capacity up to which it grows sixteenfold (quadruples above).
_FIRST_CAPACITY, _STEEP_UP_TO = 1 << 16, 1 << 20


class _Table:
    """Columns of one dtype each, appended to in place; capacity grows sixteenfold up to a million rows and
    quadruples above, so each row is copied a fifteenth, then a third of a time on average (doubling copied each
    about once: a tenth of a large kernel's hold; quadrupling from the start a fifth of a 0.85 M-event one's).
    Capacity never appended to is never faulted in, so the larger step costs address space only (a few MB below
    a million rows, four times a large table's above)."""

    def __init__(self, dtypes: dict[str, np.dtype]) -> None:
        self.dtypes = dtypes
        self.size = 0
        self.capacity = 0
        self.columns: dict[str, np.ndarray] = {name: np.empty(0, dtype=dt) for name, dt in dtypes.items()}

    def grow(self, n: int, unwritten: Callable[[], list[tuple[int, int]]] | None = None) -> Columns:
        """Room for ``n`` more rows, counted as appended: views of it, per column, to fill. ``unwritten``: the
        row ranges left unwritten (in order, apart), which a larger capacity does not copy."""
        end = self.size + n
        if end > self.capacity:
            capacity = max(end, (16 if self.capacity < _STEEP_UP_TO else 4) * self.capacity, _FIRST_CAPACITY)
            copied = _between(unwritten() if unwritten is not None else [], self.size)
            for name, old in self.columns.items():
                grown = np.empty(capacity, dtype=self.dtypes[name])
                for lo, hi in copied:
                    grown[lo:hi] = old[lo:hi]
                self.columns[name] = grown
            self.capacity = capacity
        room = Columns({name: column[self.size : end] for name, column in self.columns.items()})
        self.size = end
        return room

    def view(self) -> Columns:
        return Columns({name: column[: self.size] for name, column in self.columns.items()})


def _key_at(batch: np.ndarray, i: int) -> int:
    """The block key (``block_keys``) of record ``i`` of a batch."""
    return (int(batch["block_type"][i]) << 16) | int(batch["block_id"][i])


def _between(unwritten: list[tuple[int, int]], size: int) -> list[tuple[int, int]]:
    """The row ranges of [0, ``size``) outside ``unwritten`` (in order, apart)."""
    out, at = [], 0
    for lo, hi in unwritten:
        if lo > at:
            out.append((at, lo))
        at = max(at, hi)
    if at < size:
        out.append((at, size))
    return out


_EXTENT_FIELDS = ("repeat", "block_num", "block_size", "block_stride", "repeat_stride")


def key_steps(key: np.ndarray, native: object | None = None) -> tuple[bool, int]:
    """A batch's block keys (``block_keys``, one or more), as ``HeldColumns.append`` reads them: whether they only
    go up where they change, and where the last block among them begins (0: one block). Compiled where ``native``
    is given and the keys are contiguous uint32, the held column's type; else numpy's."""
    if native is not None and key.dtype == np.uint32 and key.flags.c_contiguous:
        return native.key_steps(key)  # type: ignore[attr-defined,no-any-return]
    changes = np.flatnonzero(key[1:] != key[:-1])
    return bool((key[changes + 1] > key[changes]).all()), int(changes[-1]) + 1 if changes.size else 0


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


@dataclass(frozen=True, slots=True)
class _Reference:
    """A proven block that the blocks arriving after it are compared with (``HeldColumns.mirror_from``): its rows,
    its lowest GM address (0: it has no GM access), the end of its furthest GM range, and its events as records
    (the fields held, written back) with what each may match."""

    events: tuple[int, int]
    accesses: tuple[int, int]
    syncs: tuple[int, int]
    gm_low: int
    gm_end: int
    records: np.ndarray
    matches: np.ndarray


@dataclass(slots=True)
class Mirror:
    """A block compared with the reference as it arrives: its key, its first rows in the three tables, how many of
    the reference's events, accesses and sync events it has matched, and the offsets its GM addresses and serials
    have from the reference's (learned from its first GM access and its first record)."""

    key: int
    events: int
    accesses: int
    syncs: int
    state: tuple[int, int, int, int, int, int, int] = (0, 0, 0, 0, 0, 0, 0)  # p, a, s, has_gm, gm, has_serial, serial

    @property
    def matched(self) -> tuple[int, int, int]:
        return self.state[0], self.state[1], self.state[2]

    @property
    def has_gm(self) -> bool:
        """Whether it has matched a GM access (and so learned its GM offset)."""
        return bool(self.state[3])

    @property
    def gm_offset(self) -> int:
        """The GM offset as a signed number (0 if it has no GM access)."""
        offset = self.state[4] if self.has_gm else 0
        return offset - (1 << 64) if offset >= 1 << 63 else offset

    @property
    def serial_offset(self) -> int:
        return self.state[6] if self.state[5] else 0

    def stretch_events(self) -> tuple[int, int]:
        return self.events, self.events + self.state[0]


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
        self._block_keys: list[np.ndarray] = []  # the complete blocks' keys, per stretch, in order
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
        # Blocks alike to a proven one, compared as they arrive rather than gathered (``mirror_from``): the
        # reference, the block being compared now, and those found alike, whose access and sync rows stay unwritten
        # until something reads them (``_fill``), by their first event row.
        self._reference: _Reference | None = None
        self._mirror: Mirror | None = None
        self.alike: dict[int, Mirror] = {}
        self._unfilled: list[Mirror] = []  # in arrival order
        self._cuts: list[int] = []  # where alike blocks begin and end, in order (``_complete``)
        self.misses = 0  # blocks compared and found not alike (MAX_MISSES)
        # The first block's kept records as they arrived (``keep_first_block``), its first rows written (the gather
        # copies them): what ``mirror_from`` compares the next blocks with, rather than records written back.
        self._first: np.ndarray | None = None
        self._first_rows = 0
        self._first_open = False  # the first block's records may go on
        self._first_memory: MemoryAccount | None = None  # holds their bytes

    @property
    def size(self) -> int:
        return self._events.size

    def keep_first_block(self, memory: MemoryAccount) -> None:
        """Keep the first block's records as they arrive (on the compiled path, from the first), copied by the
        gather into room spared by ``memory`` while it has it, for ``mirror_from``: the copy costs a tenth of
        writing them back from the columns (``scatter``)."""
        if self.native is not None and not self._events.size:
            self._first, self._first_open, self._first_memory = np.empty(0, dtype=_RECORD), True, memory

    def forget_first_block(self, *, taken: bool = False) -> None:
        """The first block's records are of no more use: ``taken`` by ``mirror_from`` (their bytes stay held with
        the reference), or given back."""
        if self._first_memory is not None and self._first is not None and not taken:
            self._first_memory.give_back(self._first.nbytes)
        self._first, self._first_open, self._first_memory, self._first_rows = None, False, None, 0

    def _first_room(self, batch: np.ndarray, keep: np.ndarray | None, kept: int) -> np.ndarray | None:
        """Where the gather copies a batch's ``kept`` records while the first block's may go on and the batch
        begins with it (None: not kept): after the first block's rows, its capacity doubled where they do not fit,
        the bytes spared."""
        first, rows = self._first, self._first_rows
        if first is None or self._first_memory is None or not self._first_open:
            return None
        if rows:  # the batch's first kept record is the first block's, or the block has ended
            at = 0 if keep is None else int(np.argmax(keep))
            if _key_at(batch, at) != self._first_key():
                self._first_open = False
                return None
        if rows + kept > first.size:
            grown = np.empty(max(rows + kept, 2 * first.size), dtype=_RECORD)
            if not self._first_memory.spare(grown.nbytes - first.nbytes):
                self.forget_first_block()
                return None
            grown[:rows] = first[:rows]
            self._first = first = grown
        return first[rows : rows + kept]

    def _first_key(self) -> int:
        """The first block's key (its first record is the launch's first row)."""
        return int(self._events.columns["block_key"][0])

    def _keep_first(self, key: np.ndarray) -> None:
        """The records the gather copied (``key``: their block keys) are the first block's up to where another
        block begins: that prefix is kept."""
        first_key = self._first_key()
        n = key.size if int(key[-1]) == first_key else int(np.argmax(key != first_key))  # in order: a prefix
        self._first_open = n == key.size  # else the next block began: the first one's records are all here
        self._first_rows += n

    def append(self, batch: np.ndarray, keep: np.ndarray | None, access: np.ndarray) -> None:
        """The events of ``batch`` that ``keep`` marks (None: all of them; accesses and sync events only);
        ``access`` marks its accesses. Each field is gathered straight from the records into its column (no copy
        of the selected records first)."""
        previous = int(self._events.columns["block_key"][self._events.size - 1]) if self._events.size else -1
        size = batch.size if keep is None else int(np.count_nonzero(keep))
        if self.native is not None and batch.dtype == EVENT_DTYPE:
            key = self._append_native(batch, keep, access, size, previous)
        else:
            self.forget_first_block()  # its records would lack this batch's
            key = self._append_numpy(batch, keep, access, size)
        finished, self._finished = self._finished, False
        if not self.in_order:
            return
        ascending, last_start = key_steps(key, self.native)
        floor = previous + 1 if finished else previous  # in order: a finished block's key may not come back
        self.in_order = int(key[0]) >= floor and ascending
        if not self.in_order:
            return
        if last_start:  # the blocks before the last one to start are complete
            self._complete(self._events.size - size + last_start)
        elif int(key[0]) != previous and previous >= 0:
            self._complete(self._events.size - size)

    def _append_native(
        self, batch: np.ndarray, keep: np.ndarray | None, access: np.ndarray, size: int, previous: int
    ) -> np.ndarray:
        """``append``'s columns in one pass over the records (the compiled hold); the kept events' block keys.
        With a reference block, the blocks that begin in the batch are compared with it instead (``_mirrored``)."""
        batch = np.ascontiguousarray(batch)
        access = np.ascontiguousarray(access, dtype=bool)
        if keep is not None:
            keep = np.ascontiguousarray(keep, dtype=bool)
        n = int(np.count_nonzero(access))
        room = self._events.grow(size)
        accesses = self._accesses.grow(n, lambda: self._unwritten(1))
        syncs = self._syncs.grow(size - n, lambda: self._unwritten(2))
        if self._reference is None or not self.in_order or self.misses >= MAX_MISSES:
            if self._mirror is not None:  # out of order since it began: what it matched is written
                mirror, self._mirror = self._mirror, None
                self._fill(mirror)
            copy = self._first_room(batch, keep, size)
            self._gather(batch, keep, access, room, accesses, syncs, copy)
            if copy is not None:
                self._keep_first(room["block_key"])
        else:
            self._mirrored(batch, keep, access, room, accesses, syncs, previous)
        return room["block_key"]

    def _gather(
        self, batch: np.ndarray, keep: np.ndarray | None, access: np.ndarray, room: Columns, accesses: Columns,
        syncs: Columns, copy: np.ndarray | None = None,
    ) -> None:  # fmt: skip
        """``gather``'s columns of the kept records, and each kept record whole into ``copy`` where given."""
        self.native.gather(  # type: ignore[attr-defined]
            batch, keep, access, room["block_key"], room["kind"],
            tuple((_OFFSET[name], accesses[name]) for name in ACCESS_FIELDS),
            tuple((_OFFSET[name], syncs[name]) for name in SYNC_FIELDS), copy,
        )  # fmt: skip
        if accesses.size:
            native_extents(self.native, accesses)

    # --- blocks alike to a proven one, compared as they arrive ---
    def mirror_from(self, span: Span, spare: Callable[[int], bool]) -> bool:
        """Compare the blocks that begin from now on with ``span``, a proven block, as their records arrive, instead
        of gathering them: SPMD blocks run one program on their own GM tiles, so most are the reference's records
        but for the block id, a GM offset and a serial offset (the compiled ``mirror``). A block found so is alike
        to the reference in everything its check reads (``_block_proofs.alike``, and more: every held field), so
        the reference's proof stands for it; its access and sync rows are written from the reference's only when
        something reads them. Whether the span was taken as the reference (the first one-block span of an
        in-order launch, on the compiled path, whose GM ranges end below ADDRESS_LIMIT, with its records: those
        kept as they arrived (``keep_first_block``), else written back from the columns where ``spare`` grants
        their bytes)."""
        if (
            self._reference is not None or self.native is None or not self.in_order
            or span.blocks[1] - span.blocks[0] != 1 or span.events[1] <= span.events[0]
        ):  # fmt: skip
            return False
        accesses = self._accesses.columns
        lo, hi = span.accesses
        gm = lo + np.flatnonzero(accesses["space"][lo:hi] == Space.GM)
        gm_low = gm_end = 0
        if gm.size:
            address = accesses["address"][gm]
            gm_low, gm_end = int(address.min()), int(ends(address, accesses["ext"][gm]).max())
            if gm_end >= ADDRESS_LIMIT:
                return False
        kind = self._events.columns["kind"][slice(*span.events)]
        a = slice(*span.accesses)
        records = self._first_block_records(span)
        if records is None:
            if not spare(kind.size * EVENT_DTYPE.itemsize):
                return False
            records = np.zeros(kind.size, dtype=EVENT_DTYPE)
            self.native.scatter(  # type: ignore[attr-defined]
                kind, tuple((_OFFSET[name], accesses[name][a]) for name in ACCESS_FIELDS),
                tuple((_OFFSET[name], self._syncs.columns[name][slice(*span.syncs)]) for name in SYNC_FIELDS),
                int(EventKind.WRITE), records,
            )  # fmt: skip
            records["kind"] = kind  # a sync event's kind is held in the events table only
        is_access = kind <= EventKind.WRITE
        matches = np.where(is_access, _REF_ACCESS, _REF_SYNC).astype(np.uint8)
        matches[np.flatnonzero(is_access)[accesses["ext"][a] >= _EXACT_EXTENT]] = _REF_NO_MATCH
        self._reference = _Reference(span.events, span.accesses, span.syncs, gm_low, gm_end, records, matches)
        return True

    def _first_block_records(self, span: Span) -> np.ndarray | None:
        """The kept records of ``span``, if it is the first block and they were kept whole (``keep_first_block``;
        their bytes spared then), as EVENT_DTYPE; None: write them back from the columns. Either way the mirror
        compares only the fields held (its masks), the same in both."""
        first, rows = self._first, self._first_rows
        if first is None or span.events != (0, rows):
            return None
        self.forget_first_block(taken=True)  # its bytes spared stay held with the reference
        return first[:rows].view(EVENT_DTYPE)

    def _mirrored(
        self, batch: np.ndarray, keep: np.ndarray | None, access: np.ndarray, room: Columns, accesses: Columns,
        syncs: Columns, previous: int,
    ) -> None:  # fmt: skip
        """``_gather`` of a batch, but each block that begins in it (after the blocks before it, as in order) is
        compared with the reference for as long as it matches; what matched is not written (``Mirror``)."""
        native = self.native
        first = (self._events.size - room.size, self._accesses.size - accesses.size, self._syncs.size - syncs.size)
        e = a = s = i = 0
        current = previous  # the block of the records before ``i``
        while i < batch.size:
            mirror = self._mirror
            if mirror is None:
                start = native.block_start(batch, keep, i, current)  # type: ignore[attr-defined]
                if start > i:  # the records of the current block: gathered
                    e, a, s = self._gather_part(batch, keep, access, i, start, room, accesses, syncs, (e, a, s))
                    i = start
                    continue
                key = _key_at(batch, i)
                if key < current or self.misses >= MAX_MISSES:
                    # Out of order (``append`` sees it), or compared in vain: every block from here on is gathered.
                    self._gather_part(batch, keep, access, i, batch.size, room, accesses, syncs, (e, a, s))
                    return
                mirror = self._mirror = Mirror(key, first[0] + e, first[1] + a, first[2] + s)
            ref = self._reference
            assert ref is not None
            matched = mirror.matched
            i, status, mirror.state = native.mirror(  # type: ignore[attr-defined]
                batch, keep, access, i, mirror.key, room["block_key"][e:], room["kind"][e:], ref.records, ref.matches,
                _ACCESS_MASK, _SYNC_MASK, int(Space.GM), mirror.state,
            )  # fmt: skip
            e, a, s = (x + now - before for x, now, before in zip((e, a, s), mirror.matched, matched, strict=True))
            current = mirror.key
            if status == _BLOCK_END:
                self._end_mirror()
            elif status == _MISMATCH:  # what matched is written, and the rest of the block gathered
                self._mirror = None
                self._miss(mirror)

    def _gather_part(
        self, batch: np.ndarray, keep: np.ndarray | None, access: np.ndarray, lo: int, hi: int, room: Columns,
        accesses: Columns, syncs: Columns, rows: tuple[int, int, int],
    ) -> tuple[int, int, int]:  # fmt: skip
        """Records [lo, hi) of the batch gathered into the rooms from ``rows`` on; the rows after them."""
        e, a, s = rows
        part_keep = None if keep is None else keep[lo:hi]
        part_access = access[lo:hi]
        kept = hi - lo if part_keep is None else int(np.count_nonzero(part_keep))
        n = int(np.count_nonzero(part_access))
        self._gather(batch[lo:hi], part_keep, part_access, room[e : e + kept], accesses[a : a + n],
                     syncs[s : s + kept - n])  # fmt: skip
        return e + kept, a + n, s + kept - n

    def _end_mirror(self) -> None:
        """The block being compared has ended: alike if it matched all of the reference, its GM ranges moved by its
        offset staying within [0, ADDRESS_LIMIT); else what matched is written."""
        mirror, self._mirror = self._mirror, None
        ref = self._reference
        if mirror is None or ref is None:
            return
        offset = mirror.gm_offset
        whole = mirror.matched == (ref.events[1] - ref.events[0], ref.accesses[1] - ref.accesses[0],
                                   ref.syncs[1] - ref.syncs[0])  # fmt: skip
        if whole and (not mirror.has_gm or (ref.gm_low + offset >= 0 and ref.gm_end + offset < ADDRESS_LIMIT)):
            self.alike[mirror.events] = mirror
            self._unfilled.append(mirror)
            self._cuts.extend(mirror.stretch_events())
        else:
            self._miss(mirror)

    def _miss(self, mirror: Mirror) -> None:
        """``mirror``'s block is not alike: what it matched is written, and counted against MAX_MISSES."""
        self.misses += 1
        self._fill(mirror)

    def _unwritten(self, which: int) -> list[tuple[int, int]]:
        """The rows of the access (``which`` 1) or sync event (2) table that alike blocks and the block being
        compared left unwritten, in order, adjacent ones joined."""
        out: list[tuple[int, int]] = []
        for mirror in (*self._unfilled, *((self._mirror,) if self._mirror is not None else ())):
            lo = mirror.accesses if which == 1 else mirror.syncs
            hi = lo + mirror.matched[which]
            if out and out[-1][1] == lo:
                out[-1] = (out[-1][0], hi)
            elif hi > lo:
                out.append((lo, hi))
        return out

    def mirror_base(self, mirror: Mirror) -> int:
        """An alike block's GM base (its lowest GM address, as ``_block_proofs.shape`` takes it)."""
        assert self._reference is not None
        return self._reference.gm_low + mirror.gm_offset  # an offset of 0 where neither has a GM access

    def _fill(self, mirror: Mirror) -> None:
        """Write the access and sync rows ``mirror`` matched: the reference's, moved by its offsets."""
        ref = self._reference
        assert ref is not None
        _, n_access, n_sync = mirror.matched
        if n_access:
            accesses = self._accesses.columns
            to = slice(mirror.accesses, mirror.accesses + n_access)
            of = slice(ref.accesses[0], ref.accesses[0] + n_access)
            for name in (*ACCESS_FIELDS, "ext"):
                accesses[name][to] = accesses[name][of]
            if mirror.has_gm:  # added modulo 2**64, as the compiled comparison took it
                address, gm = accesses["address"][to], accesses["space"][to] == Space.GM
                np.add(address, _U64(mirror.gm_offset % (1 << 64)), out=address, where=gm)
            accesses["serial"][to] += _U64(mirror.serial_offset)
        if n_sync:
            syncs = self._syncs.columns
            to, of = slice(mirror.syncs, mirror.syncs + n_sync), slice(ref.syncs[0], ref.syncs[0] + n_sync)
            for name in SYNC_FIELDS:
                syncs[name][to] = syncs[name][of]
            syncs["block_id"][to] = mirror.key & 0xFFFF
            syncs["serial"][to] += _U64(mirror.serial_offset)

    def _fill_overlapping(self, events: tuple[int, int] | None = None) -> None:
        """Write the rows of the alike blocks left unwritten (among events ``events``; None: all), and what the
        block being compared has matched so far (written again, the same, if it goes on matching)."""
        if self._mirror is not None:
            lo, hi = self._mirror.stretch_events()
            if events is None or (lo < events[1] and events[0] < hi):
                self._fill(self._mirror)
        if not self._unfilled:
            return
        lo, hi = 0, len(self._unfilled)
        if events is not None:  # the blocks are in arrival order and apart: their ends in order too
            lo = bisect.bisect_right(self._unfilled, events[0], key=lambda mirror: mirror.stretch_events()[1])
            hi = bisect.bisect_left(self._unfilled, events[1], key=lambda mirror: mirror.events)
        for mirror in self._unfilled[lo:hi]:
            self._fill(mirror)
        del self._unfilled[lo:hi]

    def rows_of(self, stretch: Stretch) -> tuple[Columns, Columns, Columns]:
        """The events, accesses and sync events of ``stretch``, every row written."""
        self._fill_overlapping(stretch.events)
        return (self._events.view()[slice(*stretch.events)], self._accesses.view()[slice(*stretch.accesses)],
                self._syncs.view()[slice(*stretch.syncs)])  # fmt: skip

    def sync_rows(self, rows: np.ndarray) -> Columns:
        """The sync events at ``rows``, those of alike blocks read from the reference's rows (none is written)."""
        if self._mirror is not None:
            self._fill(self._mirror)
        held = self._syncs.view()[rows]
        if not self._unfilled or not rows.size:
            return held
        ref = self._reference
        assert ref is not None
        starts = np.array([m.syncs for m in self._unfilled], dtype=np.int64)  # in arrival order: sorted
        counts = np.array([m.matched[2] for m in self._unfilled], dtype=np.int64)
        at = np.searchsorted(starts, rows, side="right") - 1
        inside = (at >= 0) & (rows < starts[np.maximum(at, 0)] + counts[np.maximum(at, 0)])
        if not inside.any():
            return held
        which = at[inside]
        source = rows[inside] - starts[which] + ref.syncs[0]
        syncs = self._syncs.columns
        for name in SYNC_FIELDS:
            held[name][inside] = syncs[name][source]
        held["block_id"][inside] = np.array([m.key & 0xFFFF for m in self._unfilled], dtype=np.uint16)[which]
        serial = np.array([m.serial_offset for m in self._unfilled], dtype=np.uint64)[which]
        held["serial"][inside] += serial
        return held

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
        if self._mirror is not None and self._mirror.key == block_key:
            self._end_mirror()
        if self._first_open and self._events.size and self._first_key() == block_key:
            self._first_open = False  # the first block's records are all here
        if self.in_order and self._events.size and int(self._events.columns["block_key"][self._events.size - 1]) == (
            block_key
        ):
            self._complete(self._events.size)
            self._finished = True

    def placed(self) -> bool:
        """Places every access among its block's nodes, the last block being complete now; whether they could be
        (blocks arrived one after the other, and none was skipped): then ``accesses`` has PLACED_FIELDS and
        ``parts`` the kernel's nodes."""
        self._end_mirror()
        if self.in_order:
            self._complete(self._events.size)
            if self.whole:
                self.make_all()
        return self.in_order and self.whole

    def members(self) -> None:
        """The members of pipe_barrier(PIPE_ALL) are the whole kernel's, found by the check (``build``)."""
        return None

    def complete_all(self) -> None:
        """The last block is complete too (the kernel ended)."""
        self._end_mirror()
        if self.in_order:
            self._complete(self._events.size)

    def _complete(self, end: int) -> None:
        """The blocks among events [complete so far, ``end``) are complete: a stretch of them, cut where an alike
        block begins and ends, so that each alike block is a stretch of its own."""
        cuts = self._cuts[bisect.bisect_right(self._cuts, self._complete_to[0]) : bisect.bisect_left(self._cuts, end)]
        for at in (*cuts, end):
            self._complete_stretch(at)

    def _complete_stretch(self, end: int) -> None:
        lo, access_lo, sync_lo = self._complete_to
        if end <= lo:
            return
        mirror = self.alike.get(lo)
        if mirror is not None and mirror.stretch_events()[1] == end:  # an alike block: its counts are known
            blocks, accesses = 1, mirror.matched[1]
            self._block_keys.append(np.array([mirror.key], dtype=np.int64))
        else:
            key = self._events.columns["block_key"][lo:end]
            starts = np.flatnonzero(key[1:] != key[:-1]) + 1
            blocks = 1 + starts.size
            self._block_keys.append(np.append(key[0], key[starts]).astype(np.int64))
            accesses = int(np.count_nonzero(self._events.columns["kind"][lo:end] <= EventKind.WRITE))
        access_hi = access_lo + accesses
        sync_hi = sync_lo + (end - lo - accesses)
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
        self._fill_overlapping(stretch.events)
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
        nodes = make_nodes(sync_kind, pipe, dst_pipe, blocks[is_sync], seq, members, self.native)
        parts = block_edges(nodes, pipe, dst_pipe, syncs["event_id"][sync_lo:sync_hi], members, self.native)
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

    def complete_block_keys(self) -> np.ndarray:
        """The complete blocks' keys in order (int64), while blocks arrive in order (``in_order``): each block is
        whole in one stretch, so this is the events' block keys where they change."""
        return np.concatenate(self._block_keys) if self._block_keys else np.empty(0, dtype=np.int64)

    @property
    def block_key(self) -> np.ndarray:
        """Every kept event's block key, in arrival order (always written, alike blocks' too)."""
        return self._events.view()["block_key"]

    @property
    def events(self) -> Columns:
        self._fill_overlapping()
        return self._events.view()

    @property
    def accesses(self) -> Columns:
        self._fill_overlapping()
        return self._accesses.view()

    @property
    def syncs(self) -> Columns:
        self._fill_overlapping()
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

    def members(self) -> np.ndarray:
        """The members of pipe_barrier(PIPE_ALL) for the span alone: its busy pipes, as its nodes were made with
        (``barrier_members`` of the same events)."""
        return _ALL_PIPES[(self.span.busy >> _ALL_PIPES) & 1 == 1]

    @property
    def events(self) -> Columns:
        return self.held.rows_of(self.span)[0]

    @property
    def accesses(self) -> Columns:
        return self.held.rows_of(self.span)[1]

    @property
    def syncs(self) -> Columns:
        return self.held.rows_of(self.span)[2]

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
