"""One msSanitizer release's record numbering, as the slot walk and the converters use it.

Releases renumber record types and grow payload structs (``record_types``); a ``RecordTable`` is one release's
numbers as arrays indexed by the u32 type word the walk reads, and each converter's dtype moved to that release's
struct member by member (``adapt_dtype``). Above ``convert`` (it reads the converters' dtypes) and below the decoder.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from sanitizerd.compat import wire
from sanitizerd.compat.records.convert import CONVERTERS  # the package import registers every family's converters
from sanitizerd.compat.records.convert.base import member_fields
from sanitizerd.compat.records.types import NO_DETAILED_TYPE, DetailedDataType, RecordType


class RecordTable:
    """One release's record numbering, as arrays the slot walk indexes by the u32 type word it reads.

    ``step_words[t]``: the length in u32 words (type word included) of a record of wire type ``t`` whose payload is
    a fixed struct of that release, 0 for a type it cannot step over (unknown, variable-length, or out of range);
    ``canonical[t]``: its ``RecordType`` value (-1 when sanitizerd has no name for it); ``payload_size``: the sizeof
    of each fixed payload by ``RecordType``; ``dtypes``: for the types whose converter can read this release's
    struct, the converter's dtype at this release's offsets (``adapt_dtype``): the others are stepped over and
    counted, never read through a stale layout. ``detailed_types[v]``: the ``DetailedDataType`` of this release's
    u8 value ``v`` (``NO_DETAILED_TYPE`` for a value it does not name). ``merges``: (wire types, wire types of the
    record before) for the records that share the serial number of the record before them (``serial_merges``)."""

    def __init__(
        self,
        layout: str,
        step_words: np.ndarray,
        canonical: np.ndarray,
        payload_size: dict[int, int],
        dtypes: dict[int, np.dtype],
        names: dict[int, str],
        detailed_types: np.ndarray,
        merges: tuple[tuple[np.ndarray, np.ndarray], ...] = (),
    ) -> None:
        self.layout = layout
        self.merges = merges
        self.detailed_types = detailed_types
        self.step_words = step_words
        self.canonical = canonical
        self.payload_size = payload_size
        self.dtypes = dtypes  # RecordType -> the payload dtype its converter reads in this release
        self.names = names  # wire type -> its enumerator in this release
        self.wire_values = {int(c): t for t, c in enumerate(canonical.tolist()) if c >= 0}  # RecordType -> wire
        self.table_len = step_words.size
        self.step_list: list[int] = step_words.tolist()
        self.max_step = int(step_words.max(initial=1))
        self.search_words = 2 * self.max_step
        self.step_at_least_1 = np.maximum(step_words, 1)
        # Types a speculative walk trusts: payloads are full of zeros and small counts, which read as the scalar
        # types (0-13) and would lead a walk astray, while a type of 100 or more is seldom anything else.
        self.strong = (step_words > 0) & (np.arange(self.table_len) >= RecordType.DMA_MOV)
        known = np.flatnonzero(step_words > 0)
        self.code_type: list[int] = known.tolist()  # walkable wire types as small dense codes, for grouping
        self.type_code = np.zeros(self.table_len, dtype=np.intp)
        self.type_code[known] = np.arange(known.size)

    def step(self, word: int) -> int:
        return self.step_list[word] if 0 <= word < self.table_len else 0

    def name(self, wire_type: int) -> str:
        return self.names.get(wire_type, str(wire_type))

    def wire(self, record_type: RecordType) -> int | None:
        """This release's number for ``record_type`` (None: it has none)."""
        return self.wire_values.get(int(record_type))


_Fields = list[tuple[str, int, int, str]]  # (C name, offset, size, format) of a measured struct's members


def _members(measured: Any) -> _Fields:
    members = []
    for name, (offset, fmt, *count) in measured["fields"].items():
        members.append((name, int(offset), np.dtype(fmt).itemsize * (int(count[0]) if count else 1), str(fmt)))
    return members


def adapt_dtype(reference: np.dtype, written_for: Any, target: Any) -> np.dtype | None:
    """``reference`` (a converter's payload dtype, with the offsets of ``written_for``, the reference release's
    measured struct) moved to another release's struct ``target``: each field finds the C member it reads in the
    reference struct (the member that holds its bytes), and reads that member where ``target`` has it. None when
    a member it reads is gone or changed type, or the dtype reads bytes no member holds: such a record type is
    stepped over and counted, never read through a stale layout. Members added, moved or renamed elsewhere in the
    struct change nothing."""
    old, new = _members(written_for), {m[0]: m for m in _members(target)}
    names, formats, offsets = [], [], []
    for field, (dtype, at, *_) in (reference.fields or {}).items():
        holders = [m for m in old if m[1] <= at and at + dtype.itemsize <= m[1] + m[2]]
        if not holders:
            return None
        moved = set()
        for name, offset, size, fmt in holders:  # members of a union share the bytes: each must agree
            there = new.get(name)
            if there is None or there[2] != size or there[3] != fmt:
                return None
            moved.add(there[1] - offset)
        if len(moved) != 1:
            return None
        names.append(field)
        formats.append(dtype)
        offsets.append(at + moved.pop())
    return np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": int(target["size"])})


# master's vector records name their instruction (instrName, in what was padding): read as the events' ``instr``
# wherever a release's struct has it (convert/instructions.py).
INSTRUCTION_NAME = ("instrName=instr:u1",)


def with_later_members(dtype: np.dtype, later: tuple[str, ...], target: Any) -> np.dtype:
    """``dtype`` plus the ``later`` members (``Registered.later``) that ``target``, one release's struct, has, at its
    offsets; those it lacks stay absent, and the converter reads the release as one before them."""
    added = member_fields(target, later, present_only=True)
    fields = dtype.fields or {}
    return np.dtype(
        {
            "names": [*fields, *(name for name, _, _ in added)],
            "formats": [*(fields[n][0] for n in fields), *(fmt for _, fmt, _ in added)],
            "offsets": [*(fields[n][1] for n in fields), *(at for _, _, at in added)],
            "itemsize": dtype.itemsize,
        }
    )


def serial_merges(layout: wire.WireLayout) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    """The wire types of the records that take the serial number of the record before them, and of that record.

    The releases before aca3f9d number each record of a vgather (VGATHER and its ELEMENTs), a vsel (CMPMASK_OP and
    VSEL_OP) and an mstx annotation with its instruction apart, and their racecheck reports the instruction racing
    with itself; those wires are read with the rules of the first release that has them, so their serial numbers
    are lower than their tool's by the records merged (docs/mssanitizer-later.md, "Serial numbers")."""
    rules = layout.serial_merges or wire.LAYOUTS[wire.FIRST_SERIAL_MERGES].serial_merges
    merges = []
    for records, after in rules:
        values = [np.array([layout.record_types[n] for n in names if n in layout.record_types], dtype=np.int64)
                  for names in (records, after)]  # fmt: skip
        if values[0].size and values[1].size:
            merges.append((values[0], values[1]))
    return tuple(merges)


@functools.cache
def record_table(layout: wire.WireLayout) -> RecordTable:
    """The record numbering of ``layout``'s release (see ``RecordTable``)."""
    top = max(layout.record_types.values(), default=0) + 2
    step_words = np.zeros(top, dtype=np.int64)
    canonical = np.full(top, -1, dtype=np.int64)
    payload_size: dict[int, int] = {}
    dtypes: dict[int, np.dtype] = {}
    names = {value: name for name, value in layout.record_types.items()}
    for name, value in layout.record_types.items():
        if value < 0 or value >= top:
            continue
        known = RecordType.__members__.get(name)
        if known is not None:
            canonical[value] = int(known)
        payload = layout.payloads.get(name)
        if payload is None:
            continue
        struct_name, size = payload
        if size % 4:
            # Every payload is a multiple of 4 in the releases measured, so records start on u32 words: the walk
            # views the region as words. A release where that fails is not walked by type.
            continue
        step_words[value] = (4 + size) // 4
        if known is None:
            continue
        payload_size[int(known)] = size
        registered = CONVERTERS.get(int(known))
        if registered is None:
            continue
        written_in = wire.LAYOUTS[registered.layout]
        ref = written_in.payloads.get(name)
        if ref is None:
            continue
        written_for = written_in.payload_structs.get(ref[0])
        target = layout.payload_structs.get(struct_name)
        if layout is written_in or (written_for is not None and written_for == target):
            # The converters are written for the reference's structs (tests/test_wire_header.py checks them): the
            # very same struct is read as they read it. (That covers a type the tool steps over as one struct and
            # reads as another of the union, as LOAD_L1_2D_TRANSPOSE: stepped as Load2DTransposeRecord, read as
            # LoadL12DTransposeRecord.)
            dtype = registered.dtype
        elif written_for is not None and target is not None:
            dtype = adapt_dtype(registered.dtype, written_for, target)
        else:
            dtype = None
        if dtype is not None and target is not None:
            naming = () if "instr" in (dtype.fields or {}) else INSTRUCTION_NAME
            dtype = with_later_members(dtype, (*registered.later, *naming), target)
        if dtype is not None and dtype.itemsize == size:
            dtypes[int(known)] = dtype
    detailed_types = np.full(256, NO_DETAILED_TYPE, dtype=np.uint8)
    for name, value in layout.detailed_data_types.items():
        known_type = DetailedDataType.__members__.get(name)
        if known_type is not None and 0 <= value < detailed_types.size:
            detailed_types[value] = known_type
    return RecordTable(
        layout.name, step_words, canonical, payload_size, dtypes, names, detailed_types, serial_merges(layout)
    )
