"""The converter registry and the helpers every family uses to build events."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sanitizerd import native
from sanitizerd.chips import Chip
from sanitizerd.compat import wire
from sanitizerd.compat.records.convert.bounds import ExpansionBudget
from sanitizerd.compat.records.types import REFERENCE_LAYOUT
from sanitizerd_protocol.records import EVENT_DTYPE

# Events packed by a compiled loop where built (sanitizerd/native/_records.c, issue 29): None is numpy's (``pack``)
compiled = native.load("_records")

MAX_RECORD_PLACES = 1 << 16  # distinct (pc, fileNo, lineNo) one connection names; a kernel has a few thousand


class RecordPlaces:
    """Where msSanitizer's reports say each record is: the call stack of its pc where the kernel's binary resolves
    one, else its own ``Location.fileNo`` and ``lineNo``. Each distinct (pc, fileNo, lineNo) gets a key (from 1);
    ``resolve`` (the connection's) turns a key into the location id its events carry, once per key and binding
    (``bind``: a new kernel binary or pc start). Past MAX_RECORD_PLACES keys, records get none (their reports say
    ``unknown:0``) and ``over`` counts them.

    Cost: a record's place is a function of its pc in every real stream (one instruction, one source line), so the
    keys are found with one scatter and gather over the span of the pcs, checked to agree on each pc, in O(records);
    a stream where they disagree (or whose pcs spread too far for their number) takes a sort instead."""

    _UNRESOLVED = np.uint32(0xFFFFFFFF)

    def __init__(self, resolve: Callable[[int], int] | None = None) -> None:
        self._keys: dict[tuple[int, int, int], int] = {}
        self.sites: list[tuple[int, int, int]] = [(0, 0, 0)]  # key -> (pc, fileNo, lineNo); key 0: none
        self.over = 0
        self.resolve = resolve
        self._binding: object = None
        self._ids = np.zeros(1, dtype=np.uint32)  # key -> location id under the binding (_UNRESOLVED: not yet)
        self._version = 0  # moved on by every new key, binding or resolved id (what resolved_sites depends on)
        self._resolved: tuple[int, np.ndarray] | None = None

    def bind(self, binding: object) -> None:
        """What ``resolve`` answers depends on ``binding`` (e.g. the kernel's binary and pc start): a new one
        forgets the answers of the last."""
        if binding != self._binding:
            self._binding = binding
            self._version += 1
            self._ids = np.full(len(self.sites), self._UNRESOLVED, dtype=np.uint32)
            self._ids[0] = 0

    def keys(self, pc: np.ndarray, file_no: np.ndarray, line_no: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The key of each record's (pc, fileNo, lineNo), and the distinct keys: one dictionary look-up per
        distinct one, not per record."""
        pc, file_no, line_no = (np.asarray(a, dtype=np.uint64) for a in (pc, file_no, line_no))
        if not pc.size:
            return np.zeros(0, dtype=np.uint32), np.zeros(0, dtype=np.uint32)
        low, span = int(pc.min()), int(pc.max() - pc.min()) + 1
        if span <= max(4 * pc.size, 4096):
            slot = (pc - np.uint64(low)).astype(np.intp)
            first = np.full(span, -1, dtype=np.intp)
            first[slot] = np.arange(pc.size)  # some record of each pc (the last one written)
            one = first[slot]
            if np.array_equal(file_no[one], file_no) and np.array_equal(line_no[one], line_no):
                present = np.flatnonzero(first >= 0)
                rows = first[present]
                table = np.zeros(span, dtype=np.uint32)
                # in u64: a pc at or past 2**63 overflowed intp (an OverflowError that dropped the records' group,
                # or a pc wrapped negative, keyed apart from the same place met through the sort below)
                pcs = present.astype(np.uint64) + np.uint64(low)
                triples = zip(pcs.tolist(), file_no[rows].tolist(), line_no[rows].tolist(), strict=True)
                distinct = np.array([self._key(triple) for triple in triples], dtype=np.uint32)
                table[present] = distinct
                return self._counted(table[slot]), distinct
        stacked = np.stack((pc, file_no, line_no), axis=1)
        found, inverse = np.unique(stacked, axis=0, return_inverse=True)
        distinct = np.array([self._key((int(a), int(b), int(c))) for a, b, c in found.tolist()], dtype=np.uint32)
        return self._counted(distinct[inverse.reshape(-1)]), distinct

    def locations(self, pc: np.ndarray, file_no: np.ndarray, line_no: np.ndarray) -> np.ndarray:
        """The location id of each record (0 where ``resolve`` is not set or the key bound was passed)."""
        keys, distinct = self.keys(pc, file_no, line_no)
        if self.resolve is None:
            return np.zeros(keys.size, dtype=np.uint32)
        if self._ids.size < len(self.sites):
            grown = np.full(len(self.sites), self._UNRESOLVED, dtype=np.uint32)
            grown[: self._ids.size] = self._ids
            self._ids = grown
        ids = self._ids
        for key in distinct[ids[distinct] == self._UNRESOLVED].tolist():
            ids[key] = self.resolve(key)
            self._version += 1
        return ids[keys]

    def resolved_sites(self) -> np.ndarray:
        """Every place whose location id is resolved under the binding, as (pc, fileNo, lineNo, id) rows of u64
        sorted by pc, leaving out pcs that more than one place shares: what ``_records.direct`` looks a window's
        records up in. A record found there gets from ``locations`` its row's id, with no key made and nothing
        resolved or counted, so its window may be marked without it."""
        if self._resolved is not None and self._resolved[0] == self._version:
            return self._resolved[1]
        sites = np.array(self.sites, dtype=np.uint64).reshape(-1, 3)
        keys = np.arange(1, min(len(self.sites), self._ids.size))
        keys = keys[self._ids[keys] != self._UNRESOLVED]
        rows = np.empty((keys.size, 4), dtype=np.uint64)
        rows[:, :3] = sites[keys]
        rows[:, 3] = self._ids[keys]
        rows = rows[np.argsort(rows[:, 0], kind="stable")]
        if rows.shape[0] > 1:  # a pc of two places: neither is taken (a sort in ``keys`` tells them apart)
            same = rows[1:, 0] == rows[:-1, 0]
            shared = np.zeros(rows.shape[0], dtype=bool)
            shared[1:] |= same
            shared[:-1] |= same
            rows = rows[~shared]
        self._resolved = (self._version, np.ascontiguousarray(rows))
        return self._resolved[1]

    def _key(self, site: tuple[int, int, int]) -> int:
        key = self._keys.get(site)
        if key is None:
            if len(self.sites) > MAX_RECORD_PLACES:
                return 0
            key = self._keys[site] = len(self.sites)
            self.sites.append(site)
            self._version += 1
        return key

    def _counted(self, keys: np.ndarray) -> np.ndarray:
        if len(self.sites) > MAX_RECORD_PLACES:  # only then can a record have gone without a key
            self.over += int((keys == 0).sum())
        return keys


@dataclass(frozen=True, slots=True)
class BlockContext:
    """What a converter may know beyond the records: the block they came from and the chip."""

    block_type: int  # BlockType of the record buffer's block (RecordBlockHead.blockInfo.blockType)
    chip: Chip
    vec_sub_block_dim: int = 2  # vector sub-blocks per AI core (RecordBlockHead.blockInfo.vecSubBlockDim)
    # Records a converter could not turn into events (msSanitizer drops them with an error log): text -> count.
    # The slot decoder gives each slot its own dict and reports one problem line per text.
    dropped: dict[str, int] = field(default_factory=dict, compare=False, hash=False)
    # Whatever a converter must carry from one feed() of the slot to the next (e.g. mstx's last waits): the slot
    # decoder gives each slot its own dict and keeps it for the slot's life.
    state: dict[str, object] = field(default_factory=dict, compare=False, hash=False)
    # What the kernel launch's records may still become (bounds.py): the connection gives each launch its own,
    # shared by its slots; a context made without one (a test's) has a launch of its own.
    budget: ExpansionBudget = field(default_factory=ExpansionBudget, compare=False, hash=False)
    # The connection's keys of the records' own places (fileNo, lineNo); None: none kept (a test's context).
    places: RecordPlaces | None = field(default=None, compare=False, hash=False)
    # This release's DetailedDataType numbers -> the reference's (``RecordTable.detailed_types``); None: the
    # reference's own (a test's context).
    detailed_types: np.ndarray | None = field(default=None, compare=False, hash=False)
    # memcheck traces vector instructions' masks (--trace-non-default-spr-reg): named records say theirs
    trace_registers: bool = field(default=False, compare=False, hash=False)


def detailed_types(values: np.ndarray, context: BlockContext) -> np.ndarray:
    """Records' DetailedDataType fields as ``types.DetailedDataType`` names them, whatever the release's numbers."""
    return values if context.detailed_types is None else context.detailed_types[values]


def mark_places(events: np.ndarray, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    """``events`` (of ``records``, numbered ``serials`` in increasing order) with each one's location id in its
    ``location`` field (``RecordPlaces``); events whose serial names none of these records (none today) keep theirs."""
    places = context.places
    if places is None or places.resolve is None or not events.size or not records.size:
        return events
    ids = places.locations(records["pc"], records["file_no"], records["line_no"])
    first = int(serials[0])
    row = np.full(int(serials[-1]) - first + 2, -1, dtype=np.intp)  # serial -> record: one gather, no search
    row[(serials - np.uint64(first)).astype(np.intp)] = np.arange(serials.size)
    at = events["serial"].astype(np.intp) - first
    if at.min() < 0 or at.max() >= row.size:  # never from the converters: a serial of no record goes to row[-1]
        at = np.where((at >= 0) & (at < row.size), at, row.size - 1)
    record = row[at]
    if not events.flags.writeable:
        events = events.copy()
    if record.min() >= 0:
        events["location"] = ids[record]
    else:
        events["location"] = np.where(record >= 0, ids[record], events["location"])
    return events


def drop(context: BlockContext, text: str, count: int) -> None:
    """Count ``count`` records dropped for the reason ``text`` (one problem line of the kernel per reason)."""
    if count:
        context.dropped[text] = context.dropped.get(text, 0) + int(count)


# records: one RecordType's records of a block, as a structured array of that type's payload dtype (the bytes after
# the u32 type); serials: their serial numbers; returns their events, each record's in program order.
Converter = Callable[[int, np.ndarray, np.ndarray, BlockContext], np.ndarray]


@dataclass(frozen=True, slots=True)
class Registered:
    dtype: np.dtype  # the payload layout (packed, explicit offsets, itemsize = sizeof(struct))
    convert: Converter
    # the release whose measured struct ``dtype``'s offsets are: the reference, or for a type the reference does not
    # have, the first release that does (``numbering.record_table`` moves it to each release from there)
    layout: str = REFERENCE_LAYOUT
    # Members that later releases added to the struct (``cMember=name:format`` words, as ``payload_dtype`` takes
    # them): read where a release's struct has them, absent from the dtype where it has not, so that one converter
    # serves the releases before and after (it tests ``name in records.dtype.names``).
    later: tuple[str, ...] = ()


CONVERTERS: dict[int, Registered] = {}


def converts(
    *record_types: int, dtype: np.dtype, layout: str = REFERENCE_LAYOUT, later: tuple[str, ...] = ()
) -> Callable[[Converter], Converter]:
    """Register ``convert`` for ``record_types``, whose payloads have layout ``dtype`` (measured in ``layout``), and
    ``later``'s members where a release has them (``Registered.later``)."""

    def register(convert: Converter) -> Converter:
        for record_type in record_types:
            if record_type in CONVERTERS:
                raise ValueError(f"record type {record_type} has two converters")
            CONVERTERS[int(record_type)] = Registered(np.dtype(dtype), convert, layout, tuple(later))
        return convert

    return register


def convert_bounded(
    registered: Registered, record_type: int, name: str, records: np.ndarray, serials: np.ndarray, context: BlockContext
) -> np.ndarray:
    """``registered.convert`` of one type's records under the launch's expansion budget: what every caller of a
    converter uses (the slot decoder, a record sent alone, the fuzz target). Records over their bounds, or met
    once the launch's cap is reached, make no event; ``context.budget`` says which and why."""
    budget = context.budget
    if budget.exhausted:
        budget.refuse_all(name, serials)
        return np.empty(0, dtype=EVENT_DTYPE)
    budget.begin(name, serials)
    try:
        events = registered.convert(record_type, records, serials, context)
    except BaseException:
        budget.abandon()
        raise
    return budget.end(events)


def expanding(
    context: BlockContext,
    serials: np.ndarray,
    counts: np.ndarray,
    each: int = 1,
    pieces_each: np.ndarray | None = None,
) -> np.ndarray:
    """``counts`` (events per row, rows of the records with ``serials``, before they are expanded, ``each``
    events per count, and with ``pieces_each`` at most that many pieces listed per count) with the rows of refused
    records set to 0: the check every expansion makes first."""
    counts = np.asarray(counts, dtype=np.int64)
    if counts.size == 0:
        return counts
    if pieces_each is not None:
        dead = context.budget.charge_pieces(serials, counts * np.asarray(pieces_each, dtype=np.float64))
        if dead.any():
            counts = np.where(dead, 0, counts)
    big = counts > 1
    if not big.any() and not context.budget.refusing:
        return counts
    dead = context.budget.charge(serials, np.where(big, counts - 1, 0) * each)
    if dead.any():
        counts = np.where(dead, 0, counts)
    return counts


# Where each event field sits in the event's seven u64 words: (word, bit shift, bit width). Building events a word
# at a time (a few shifts and ors over plain arrays) is several times faster than assigning structured fields.
_PACKING: dict[str, tuple[int, int, int]] = {
    "address": (0, 0, 64),
    "serial": (1, 0, 64),
    "pc": (2, 0, 64),
    "block_size": (3, 0, 32),
    "location": (3, 32, 32),
    "block_num": (4, 0, 16),
    "block_stride": (4, 16, 16),
    "repeat": (4, 32, 16),
    "repeat_stride": (4, 48, 16),
    "block_id": (5, 0, 16),
    "event_id": (5, 16, 16),
    "kind": (5, 32, 8),
    "space": (5, 40, 8),
    "pipe": (5, 48, 8),
    "dst_pipe": (5, 56, 8),
    "block_type": (6, 0, 8),
    "flags": (6, 8, 8),
    "align": (6, 16, 16),
    "mode": (6, 32, 8),
}
assert all(EVENT_DTYPE.fields[name][1] == word * 8 + shift // 8 for name, (word, shift, _) in _PACKING.items())


def pack(n: int, out: np.ndarray | None = None, **fields: int | np.ndarray) -> np.ndarray:
    """``n`` events with ``fields`` (scalars or arrays of ``n``; each value cut to its field's width, as a
    structured assignment would), the rest zero; written into ``out`` (n rows of 7 u64, e.g. every other row of
    a larger array) when given. Compiled (``pack_compiled``) where built, numpy's (``pack_numpy``) otherwise and
    for what the compiled one does not take."""
    if compiled is not None:
        packed = pack_compiled(n, out, fields)
        if packed is not None:
            return packed
    return pack_numpy(n, out, **fields)


def pack_compiled(n: int, out: np.ndarray | None, fields: dict[str, int | np.ndarray]) -> np.ndarray | None:
    """``pack`` in one compiled pass per column (sanitizerd/native/_records.c); None where a column is not a 1-D
    array of ``n`` integers or bools in the host's order (``pack_numpy`` then packs it)."""
    assert compiled is not None
    words = np.empty((n, EVENT_DTYPE.itemsize // 8), dtype=np.uint64) if out is None else out
    if words.dtype != np.uint64 or words.shape != (n, EVENT_DTYPE.itemsize // 8) or (n and words.strides[1] != 8):
        return None
    constant = [0] * words.shape[1]
    columns = []
    for name, value in fields.items():
        word, shift, width = _PACKING[name]
        mask = (1 << width) - 1
        if isinstance(value, np.ndarray) and value.ndim:  # the usual column, without np.ndim's dispatch
            column = value
        elif np.ndim(value) == 0:
            constant[word] |= (int(value) & mask) << shift  # type: ignore[arg-type]
            continue
        else:
            column = np.asarray(value)
        if column.dtype.kind not in "iub" or not column.dtype.isnative or column.shape != (n,):
            return None
        columns.append((column, word, shift, mask))
    if not compiled.pack(words, np.array(constant, dtype=np.uint64), columns):
        return None
    if out is not None:
        return out
    return words.view(EVENT_DTYPE).reshape(-1)


def pack_numpy(n: int, out: np.ndarray | None = None, **fields: int | np.ndarray) -> np.ndarray:
    """``pack`` with numpy: the reference the compiled one is tested against."""
    words = np.empty((n, EVENT_DTYPE.itemsize // 8), dtype=np.uint64) if out is None else out
    constant = [0] * words.shape[1]
    varying: list[np.ndarray | None] = [None] * words.shape[1]
    owned = [False] * words.shape[1]  # whether varying[word] is our own temporary (safe to OR into in place)
    for name, value in fields.items():
        word, shift, width = _PACKING[name]
        mask = (1 << width) - 1
        if np.ndim(value) == 0:
            constant[word] |= (int(value) & mask) << shift
            continue
        column = np.asarray(value)
        mine = True
        if width == 64:
            mine = column.dtype != np.uint64
            if mine:
                column = column.astype(np.uint64)  # two's complement, as a structured assignment casts
        elif column.dtype.kind == "u" and column.dtype.itemsize * 8 <= width:  # fits: no mask needed
            column = np.left_shift(column, np.uint64(shift), dtype=np.uint64)
        else:
            column = column.astype(np.uint64)
            np.bitwise_and(column, np.uint64(mask), out=column)
            np.left_shift(column, np.uint64(shift), out=column)
        if varying[word] is None:
            varying[word], owned[word] = column, mine
        elif owned[word]:
            np.bitwise_or(varying[word], column, out=varying[word])
        else:
            varying[word], owned[word] = varying[word] | column, True
    for word in range(words.shape[1]):
        column = varying[word]
        if column is None:
            words[:, word] = constant[word]
        elif constant[word]:
            words[:, word] = column | np.uint64(constant[word])
        else:
            words[:, word] = column
    if out is not None:
        return out
    return words.view(EVENT_DTYPE).reshape(-1)


def _words(events: np.ndarray) -> np.ndarray:
    # Events as rows of 7 u64: numpy copies plain arrays many times faster than structured ones.
    return np.ascontiguousarray(events).view(np.uint64).reshape(-1, EVENT_DTYPE.itemsize // 8)


def _events(words: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(words).view(EVENT_DTYPE).reshape(-1)


def cat(parts: list[np.ndarray]) -> np.ndarray:
    """``np.concatenate`` of event arrays, fast."""
    if len(parts) == 1:
        return parts[0]
    if not parts:
        return np.empty(0, dtype=EVENT_DTYPE)
    return _events(np.concatenate([_words(p) for p in parts]))


def take(events: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``events[index]``, fast."""
    return np.ascontiguousarray(events).view("V56")[index].view(EVENT_DTYPE)


def by_serial(events: np.ndarray) -> np.ndarray:
    """Events in serial order, stable (each record's events keep their order)."""
    return take(events, np.argsort(events["serial"], kind="stable"))


def interleave(*per_record: np.ndarray) -> np.ndarray:
    """Events of the same records, one array per role (e.g. reads, writes), ordered record by record, roles in the
    order given: what a stable sort by serial would give, without the sort."""
    if len(per_record) == 1:
        return per_record[0]
    return _events(np.stack([_words(p) for p in per_record], axis=1).reshape(-1, EVENT_DTYPE.itemsize // 8))


def record_dtype(
    size: int, location_at: int, fields: dict[str, tuple[str, int]] | list[tuple[str, str, int]]
) -> np.dtype:
    """A payload layout: ``fields`` = name -> (numpy format, byte offset), or (name, format, offset) triples in
    field order (union members may overlap: the MSTX record's do), plus the ``Location`` msSanitizer puts in every
    payload (``file_no``, ``line_no``, ``pc``, ``block_id``) at ``location_at``; ``size`` = sizeof(struct)."""
    triples = [(name, fmt, at) for name, (fmt, at) in fields.items()] if isinstance(fields, dict) else fields
    names = ["file_no", "line_no", "pc", "block_id", *(name for name, _, _ in triples)]
    formats = ["<u8", "<u8", "<u8", "<u2", *(fmt for _, fmt, _ in triples)]
    offsets = [location_at, location_at + 8, location_at + 16, location_at + 24, *(at for _, _, at in triples)]
    return np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": size})


# One member a converter reads: the C member's path in the measured struct, then optionally ``=name`` (the field's
# name when it is not the member's own in snake case) and ``:format`` (when it is read as another type).
_MEMBER = re.compile(r"^([\w.]+)(?:=(\w+))?(?::([^\s:=]+))?$")
_READ_AS = {"?": "u1"}  # a C bool is read as its byte: the converters compare and count with it


def member_name(member: str) -> str:
    """A C member's path as a field name: its last part in snake case (``vectorMask.mask0`` -> ``mask0``)."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", member.rsplit(".", 1)[-1]).lower()


def payload_dtype(struct: str, members: str, layout: str = REFERENCE_LAYOUT) -> np.dtype:
    """The payload layout of msSanitizer's ``struct`` as the converters read it, with every offset and size taken
    from the reference release's measured layout (``wire.LAYOUTS``), so that no number of a layout is written twice.
    ``members``: the members read, space-separated, each ``cMember[=name][:format]``; the ``Location`` members
    come as ``record_dtype`` adds them. An array member is read as its raw bytes unless a format is given."""
    measured = wire.LAYOUTS[layout].payload_structs[struct]
    triples = member_fields(measured, members.split())
    return record_dtype(int(measured["size"]), int(measured["fields"]["location.fileNo"][0]), triples)


def member_fields(measured: Any, members: Iterable[str], *, present_only: bool = False) -> list[tuple[str, str, int]]:
    """(name, numpy format, offset) of each of ``members`` (``cMember[=name][:format]`` words) in ``measured``, one
    release's measured struct; with ``present_only``, the members it lacks are left out instead of refused."""
    fields = measured["fields"]
    triples = []
    for word in members:
        found = _MEMBER.match(word)
        if found is None:
            raise ValueError(f"{word!r} is not cMember[=name][:format]")
        member, name, fmt = found.groups()
        if present_only and member not in fields:
            continue
        offset, c_format, *count = fields[member]
        if fmt is None:
            fmt = f"V{np.dtype(c_format).itemsize * int(count[0])}" if count else _READ_AS.get(c_format, c_format)
        triples.append((name or member_name(member), fmt, int(offset)))
    return triples


def record_events(
    records: np.ndarray, serials: np.ndarray, context: BlockContext, out: np.ndarray | None = None, **fields: object
) -> np.ndarray:
    """One event per record, carrying the record's serial, pc and block (what ties a finding back to it), with
    ``fields`` as ``pack`` takes them; into ``out`` when given."""
    return pack(
        len(records), out, serial=serials, pc=records["pc"], block_id=records["block_id"],
        block_type=context.block_type, **fields,
    )  # fmt: skip


def sync_events(
    kind: int | np.ndarray, records: np.ndarray, serials: np.ndarray, context: BlockContext, **sync: int | np.ndarray
) -> np.ndarray:
    """One synchronization event per record (block_size 0, as native clients send them): ``sync`` gives its
    ``pipe`` and, as its kind needs, ``dst_pipe``, ``event_id``, ``address``, ``mode`` and ``block_num`` (else 1)."""
    return record_events(
        records, serials, context, kind=kind, block_stride=1, repeat=1, block_size=0, **{"block_num": 1, **sync}
    )



U64_MAX = (1 << 64) - 1


def constant_words(**fields: int) -> np.ndarray:
    """The 7 event words with ``fields`` (scalars, each cut to its field) set, the rest zero."""
    words = [0] * (EVENT_DTYPE.itemsize // 8)
    for name, value in fields.items():
        word, shift, width = _PACKING[name]
        words[word] |= (int(value) & ((1 << width) - 1)) << shift
    return np.array(words, dtype=np.uint64)


def serial_words(serials: np.ndarray) -> np.ndarray | None:
    """Serials as contiguous u64 (their bits, as ``pack`` casts them), or None where they are not 8-byte ints."""
    serials = np.asarray(serials)
    if serials.ndim != 1 or serials.dtype.kind not in "iu" or serials.dtype.itemsize != 8:
        return None
    return np.ascontiguousarray(serials).view(np.uint64)


def record_bytes(records: np.ndarray, dtype: np.dtype) -> np.ndarray | None:
    """``records`` (of ``dtype`` exactly) as their contiguous bytes, or None."""
    if records.dtype != dtype or records.ndim != 1:
        return None
    return np.ascontiguousarray(records).view(np.uint8).reshape(-1)


def sync_plan(
    kind: int, dtype: np.dtype, context: BlockContext, saturated: dict[str, tuple[str, int]]
) -> DirectPlan | None:
    """``sync_compiled``'s pass for records of ``dtype``, as a plan (``_records.fields`` reads its fields and
    constants; ``_records.direct`` the plan whole); None where a field is not unsigned little-endian of 1, 2, 4 or
    8 bytes, or is not in ``dtype`` (numpy's ``sync_events`` is the reference)."""
    specs = []
    for event_field, (record_field, top) in {**saturated, "pc": ("pc", -1), "block_id": ("block_id", -1)}.items():
        if dtype.fields is None or record_field not in dtype.fields:
            return None
        member, offset = dtype.fields[record_field][:2]
        if member.kind != "u" or member.itemsize not in (1, 2, 4, 8) or member != member.newbyteorder("<"):
            return None
        word, shift, width = _PACKING[event_field]
        specs.append((int(offset), member.itemsize, top & U64_MAX, word, shift, (1 << width) - 1))
    constants = constant_words(
        kind=kind, block_stride=1, repeat=1, block_size=0, block_num=1, block_type=context.block_type
    )
    return DirectPlan(DIRECT_FIELDS, dtype.itemsize, constants.reshape(1, -1), fields=tuple(specs))


def sync_compiled(
    kind: int, records: np.ndarray, serials: np.ndarray, context: BlockContext, saturated: dict[str, tuple[str, int]]
) -> np.ndarray | None:
    """``sync_events(kind, records, serials, context, **{f: min(records[field], top) ...})`` for ``saturated``
    (event field -> (record field, top)) in one compiled pass (``_records.fields``); None where it is not built or
    does not take these records (a field not unsigned; numpy's ``sync_events`` is the reference)."""
    if compiled is None:
        return None
    raw, words = record_bytes(records, records.dtype), serial_words(serials)
    if raw is None or words is None or words.size != len(records):
        return None
    plan = sync_plan(kind, records.dtype, context, saturated)
    if plan is None:
        return None
    out = np.empty((len(records), EVENT_DTYPE.itemsize // 8), dtype=np.uint64)
    compiled.fields(out, raw, records.dtype.itemsize, words, plan.constants[0], list(plan.fields))
    return out.view(EVENT_DTYPE).reshape(-1)


# --- whole windows converted straight from their words (``_records.direct``, issue 29) ----------------------------
# A converter whose usual case the compiled loops make in one pass registers a plan maker here: the slot decoder
# then converts a window whose every record has a plan and is in its usual case straight from the words into
# program order (no grouping, gather, merge or per-type Python). Any other window takes the converters, the
# reference.

DIRECT_FIELDS, DIRECT_DMA_MOV, DIRECT_BINARY = 1, 2, 3  # _records.c's KIND_*: the events per record are 1, 2, 3
# _records.c's plan layout: PLAN_WORDS u64 per plan, with these words
PLAN_WORDS, _PLAN_ITEMSIZE, _PLAN_NFIELDS, _PLAN_CONSTANTS, _PLAN_OFFSETS, _PLAN_FIELDS = 128, 1, 2, 8, 32, 56
_PLAN_PLACE = 104
PLAN_MAX_FIELDS = 8
EVENT_WORDS = EVENT_DTYPE.itemsize // 8


@dataclass(frozen=True, slots=True)
class DirectPlan:
    """How ``_records.direct`` converts one record type's usual records (one of ``DIRECT_*``)."""

    kind: int
    itemsize: int  # the payload's bytes (the record dtype's itemsize)
    constants: np.ndarray  # (events per record) x 7 u64: each event's constant words
    # dma_mov's or binary's members' offsets (i64, in _records.c's D_* or B_* order)
    offsets: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    # DIRECT_FIELDS: (offset, size, top, word, shift, mask) of each field, as _records.fields takes them
    fields: tuple[tuple[int, int, int, int, int, int], ...] = ()
    # The offsets of the record's pc, fileNo and lineNo (u64 each; ``place_offsets``), None: it has no place
    place: tuple[int, int, int] | None = None

    def words(self) -> np.ndarray:
        """The plan as ``_records.direct`` reads it."""
        if len(self.fields) > PLAN_MAX_FIELDS or self.offsets.size > _PLAN_FIELDS - _PLAN_OFFSETS:
            raise ValueError("a direct plan of too many fields or members")
        words = np.zeros(PLAN_WORDS, dtype=np.uint64)
        words[0], words[_PLAN_ITEMSIZE], words[_PLAN_NFIELDS] = self.kind, self.itemsize, len(self.fields)
        constants = np.asarray(self.constants, dtype=np.uint64).reshape(-1)
        words[_PLAN_CONSTANTS : _PLAN_CONSTANTS + constants.size] = constants
        words[_PLAN_OFFSETS : _PLAN_OFFSETS + self.offsets.size] = self.offsets
        for k, spec in enumerate(self.fields):
            words[_PLAN_FIELDS + 6 * k : _PLAN_FIELDS + 6 * k + 6] = spec
        words[_PLAN_PLACE : _PLAN_PLACE + 3] = self.place if self.place is not None else (U64_MAX,) * 3
        return words


def place_offsets(dtype: np.dtype) -> tuple[int, int, int] | None:
    """Where a record of ``dtype`` has the pc, fileNo and lineNo ``mark_places`` reads, each a little-endian u64;
    None where it has not all three so (its windows then mark places on the grouped path)."""
    offsets = []
    for name in ("pc", "file_no", "line_no"):
        member = (dtype.fields or {}).get(name)
        if member is None or member[0] != np.dtype("<u8"):
            return None
        offsets.append(int(member[1]))
    return offsets[0], offsets[1], offsets[2]


Planner = Callable[[int, np.dtype, BlockContext], "DirectPlan | None"]
DIRECT: dict[int, tuple[Converter, Planner]] = {}


def direct(planner: Planner, *record_types: int) -> None:
    """``planner(record_type, dtype, context)`` makes the plan of ``record_types``' usual case, for records of a
    release's ``dtype`` in a block of ``context``; it belongs to their converter registered now."""
    for record_type in record_types:
        DIRECT[int(record_type)] = (CONVERTERS[int(record_type)].convert, planner)


def direct_plan(record_type: int, dtype: np.dtype, context: BlockContext) -> DirectPlan | None:
    """The plan of ``record_type``'s usual case, or None: no planner, or its converter is no longer the one
    registered (a test's)."""
    entry, registered = DIRECT.get(int(record_type)), CONVERTERS.get(int(record_type))
    if entry is None or registered is None or registered.convert is not entry[0]:
        return None
    return entry[1](int(record_type), dtype, context)


_U16 = 0xFFFF


def patterns(
    kind: int,
    space: int | np.ndarray,
    address: np.ndarray,
    block_size: int | np.ndarray,
    block_num: int | np.ndarray,
    repeat: int | np.ndarray,
    repeat_stride: int | np.ndarray,
    records: np.ndarray,
    serials: np.ndarray,
    context: BlockContext,
    *,
    out: np.ndarray | None = None,
    **fields: int | np.ndarray,
) -> np.ndarray:
    """One memory event per record with msSanitizer's pattern as given (the caller makes sure the values fit the
    event's fields; ``runs`` does that for counts that may not): ``fields`` gives its ``pipe`` and, where they are
    not 0 and 1, its ``align`` and ``block_stride``."""
    return record_events(
        records, serials, context, out, kind=kind, space=space, address=address, block_size=block_size,
        block_num=block_num, repeat=repeat, repeat_stride=repeat_stride, **{"block_stride": 1, **fields},
    )  # fmt: skip


MAX_LOOP = 1 << 16  # events one record may make through a loop count (msSanitizer's counts are 16-bit)


def loops(
    counts: np.ndarray,
    context: BlockContext | None = None,
    serials: np.ndarray | None = None,
    each: int = 1,
    pieces_each: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """For records making ``counts`` events each (a loop in msSanitizer's parser): per event, its record's index
    and its loop index, record by record. At most MAX_LOOP a record; with ``context``, a cut is said; with
    ``serials`` too, the loop (``each`` events and at most ``pieces_each`` pieces an iteration) is charged to
    the launch's budget first, and a refused record loops 0 times."""
    counts = counts.astype(np.int64)
    if context is not None and serials is not None:
        counts = expanding(context, serials, counts, each, pieces_each)
    if context is not None:
        drop(context, f"records cut to their first {MAX_LOOP} loop iterations", int((counts > MAX_LOOP).sum()))
    counts = np.minimum(counts, MAX_LOOP)
    which = np.repeat(np.arange(counts.size), counts)
    index = np.arange(which.size) - np.repeat(np.cumsum(counts) - counts, counts)
    return which, index


def runs(
    kind: int,
    space: int | np.ndarray,
    address: np.ndarray,
    run_bytes: np.ndarray,
    repeat: np.ndarray,
    stride_bytes: np.ndarray,
    records: np.ndarray,
    serials: np.ndarray,
    context: BlockContext,
    *,
    pipe: int | np.ndarray,
    unit: int | np.ndarray = 32,
    align: int | np.ndarray = 0,
) -> np.ndarray:
    """Memory events for ``repeat`` runs of ``run_bytes`` contiguous bytes, ``stride_bytes`` apart, from
    ``address``: msSanitizer's (blockNum x blockSize, repeatStride) pattern with blocks of ``unit`` bytes. Where a
    count or stride does not fit the event's 16-bit fields, the record becomes one event per run instead (same
    bytes). Events come out record by record (one or more each), in the records' order."""
    n = len(records)
    address = np.broadcast_to(np.asarray(address, dtype=np.uint64), n)
    run_bytes = np.broadcast_to(np.asarray(run_bytes, dtype=np.int64), n)
    repeat = np.broadcast_to(np.asarray(repeat, dtype=np.int64), n)
    stride_bytes = np.broadcast_to(np.asarray(stride_bytes, dtype=np.int64), n)
    unit = np.maximum(np.broadcast_to(np.asarray(unit, dtype=np.int64), n), 1)
    space = np.broadcast_to(np.asarray(space), n)
    pipe = np.broadcast_to(np.asarray(pipe), n)
    align = np.broadcast_to(np.asarray(align), n)
    # The natural pattern needs whole units in the run and the stride, and 16-bit counts.
    stride_used = np.where(repeat > 1, stride_bytes, 0)
    whole = (run_bytes % unit == 0) & (stride_used % unit == 0)
    if not whole.all():
        unit = np.where(whole, unit, np.maximum(np.gcd(np.gcd(run_bytes, stride_used), unit), 1))
    block_num = run_bytes // unit
    stride = stride_bytes // unit
    ok = (block_num <= _U16) & (stride <= _U16) & (repeat <= _U16)
    if not ok.all():  # a coarser unit (the largest that divides run and stride) may still fit
        coarse = np.maximum(np.gcd(run_bytes, stride_used), 1)
        unit = np.where(ok, unit, coarse)
        block_num = run_bytes // unit
        stride = stride_bytes // unit
        ok = (block_num <= _U16) & (stride <= _U16) & (repeat <= _U16) & (unit <= 0xFFFFFFFF)
    if ok.all():
        return patterns(
            kind, space, address, unit, block_num, repeat, stride, records, serials, context, pipe=pipe, align=align
        )
    rows = np.flatnonzero(ok)
    some, some_serials = subset(records, serials, rows)
    events = patterns(
        kind, space[rows], address[rows], unit[rows], block_num[rows], repeat[rows], stride[rows], some,
        some_serials, context, pipe=pipe[rows], align=align[rows],
    )  # fmt: skip
    # The rest: one event per run (a run is at most 65535 x 65535 bytes here, within the u32 block size).
    big = np.flatnonzero(~ok)
    reps = expanding(context, serials[big], repeat[big])  # each record's bursts within its bound, or none
    which = np.repeat(big, reps)
    r = np.arange(which.size) - np.repeat(np.cumsum(reps) - reps, reps)
    runs_of, run_serials = subset(records, serials, which)
    extra = record_events(
        runs_of, run_serials, context, kind=kind, space=space[which], pipe=pipe[which], align=align[which],
        address=address[which] + (r * stride_bytes[which]).astype(np.uint64),
        block_size=np.minimum(run_bytes[which], 0xFFFFFFFF), block_num=1, block_stride=1, repeat=1,
    )  # fmt: skip
    return by_serial(cat([events, extra]))


def in_order(serials: np.ndarray | None, *per_role: np.ndarray) -> np.ndarray:
    """Events of the same records, one array per role (reads, writes), merged record by record with the roles in
    the order given: ``interleave`` when each role has exactly one event per record (its serials are ``serials``),
    else a stable sort by serial (``serials`` None: always)."""
    if serials is not None and all(
        len(role) == len(serials) and np.array_equal(role["serial"], serials) for role in per_role
    ):
        return interleave(*per_role)
    return by_serial(cat(list(per_role)))


def subset(records: np.ndarray, serials: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``records[keep], serials[keep]`` (a boolean mask or sorted row indices) without numpy's slow structured
    copy, and without any copy when every record is kept."""
    if keep.dtype == bool:
        if keep.all():
            return records, serials
        keep = np.flatnonzero(keep)
    elif keep.size == len(records) and np.array_equal(keep, np.arange(keep.size)):
        return records, serials
    raw = np.ascontiguousarray(records).view(f"V{records.dtype.itemsize}")
    return raw[keep].view(records.dtype), serials[keep]
