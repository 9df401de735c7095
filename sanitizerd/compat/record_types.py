"""msSanitizer's record types, the size of each one's payload, and its MemType / PipeType numbering.

Facts of msSanitizer's ``record_defs.h`` (reference §1.4, §1.9, §1.10), measured by compiling its headers: a record
on the wire is ``[u32 RecordType][payload]`` with the payload's C layout (natural alignment inside the struct, no
padding before it).

Releases renumber record types (26.1.0 inserts KERNEL_FINISH before FINISH; 02aa7ee moved SHADOW_MEMORY), so
``RecordType`` is sanitizerd's own naming: its values are msSanitizer 4a419f05's numbers, the first wire sanitizerd
spoke, and types that release did not have take free values. A ``RecordTable`` maps one release's numbers to these
names (``record_table``): the converters are written once, against the names.
"""

from __future__ import annotations

import enum
import functools
from typing import Any, Final

import numpy as np

from sanitizerd.compat import wire
from sanitizerd.protocol.records import Space


class RecordType(enum.IntEnum):
    LOAD = 0
    STORE = 1
    LD = 2
    LD_IO = 3
    ST = 4
    ST_IO = 5
    STP = 6
    STI = 7
    STI_IO = 8
    LDP = 9
    ST_ATOMIC = 10
    STI_ATOMIC = 11
    ST_DEV = 12
    LD_DEV = 13
    DCCI = 14  # master on
    DMA_MOV = 100
    MOV_ALIGN = 101
    MOV_ALIGN_V2 = 102
    VEC_DUP = 103
    LOAD_2D = 104
    LOAD_L1_2D = 105
    LOAD_L1_MX_2D = 106
    LOAD_L1_2D_TRANSPOSE = 107
    LOAD_B2 = 108
    LOAD_A_WINOGRAD = 109
    LOAD_B_WINOGRAD = 110
    LOAD_3D = 111
    SET_2D = 112
    SET_L1_2D = 113
    DMA_MOV_ND2NZ = 114
    MOV_BT = 115
    LOAD_IMAGE = 116
    MOV_FP = 117
    LOAD_2D_SPARSE = 118
    LOAD_2D_TRANSPOSE = 119
    DECOMPRESS_HEADER = 120
    DMA_MOV_CONV_RELU = 121
    LOAD_SMASK = 122
    BROADCAST = 123
    DMA_MOV_DEPTH_WISE = 124
    ND_DMA_OUT_TO_UB = 125
    DC_PRELOAD = 126
    DMA_MOV_ND2NZ_D = 127
    DMA_MOV_DN2NZ_D = 128
    SCALAR_RED = 129
    SCALAR_ATOM = 130
    LDVA = 131
    MOV_L1_TO_UB = 132
    MOV_UB_TO_L1 = 133
    MOV_UB_TO_UB = 134
    MOV_CBUF_TO_BT = 135
    MOV_CBUF_TO_FB = 136
    VMRGSORT4_OP_C220 = 137
    VMRGSORT4_OP_M200 = 138
    VMRGSORT4_OP_C310 = 139
    FIX_L0C_TO_L1 = 140
    FIX_L0C_TO_UB = 141
    LOAD_3D_V2 = 142
    SIMD_START = 9999
    UNARY_OP = 10000
    VGATHER = 10001
    ELEMENT = 10002
    BINARY_OP = 10003
    TERNARY_OP = 10004
    REDUCE_OP = 10005
    MATRIX_MUL_OP = 10006
    MMAD_A5 = 10007
    VEC_REGPROPCOOR_OP = 10008
    CMPMASK_OP = 10009
    VCOPY_OP = 10010
    VREDUCEV2_UNARY = 10011
    VREDUCEV2_BINARY = 10012
    VREDUCEV2 = 10013
    VCONV_DST_S4_OP = 10014
    VCONV_SRC_S4_OP = 10015
    VSEL_OP = 10016
    SIMD_END = 19999
    SET_FLAG = 20000
    WAIT_FLAG = 20001
    HSET_FLAG = 20002
    HWAIT_FLAG = 20003
    PIPE_BARRIER = 20004
    FFTS_SYNC = 20005
    WAIT_FLAG_DEV = 20006
    SET_ATOMIC = 20007
    IB_SET_STUB = 20008
    IB_WAIT_STUB = 20009
    SYNC_ALL_STUB = 20010
    WAIT_FLAG_DEV_PIPE = 20011
    WAIT_FLAG_DEVI_PIPE = 20012
    SET_INTRA_BLOCK = 20013
    WAIT_INTRA_BLOCK = 20014
    SET_INTRA_BLOCKI = 20015
    WAIT_INTRA_BLOCKI = 20016
    MSTX_STUB = 20017
    SCATTERVNCHWCONV = 20018
    SCATTERVNCHWCONV_A5 = 20019
    VBS32_A5 = 20020
    GET_BUF = 20021
    GET_BUFI = 20022
    RLS_BUF = 20023
    RLS_BUFI = 20024
    SET_FLAGI = 20025
    WAIT_FLAGI = 20026
    HSET_FLAGI = 20027
    HWAIT_FLAGI = 20028
    SET_FLAG_V = 20029
    SET_FLAGI_V = 20030
    WAIT_FLAG_V = 20031
    WAIT_FLAGI_V = 20032
    FFTS_SYNC_V = 20033
    WAIT_FLAG_DEV_PIPE_V = 20034
    WAIT_FLAG_DEVI_PIPE_V = 20035
    SET_INTRA_BLOCK_V = 20036
    SET_INTRA_BLOCKI_V = 20037
    WAIT_INTRA_BLOCK_V = 20038
    WAIT_INTRA_BLOCKI_V = 20039
    GET_BUF_V = 20040
    GET_BUFI_V = 20041
    RLS_BUF_V = 20042
    RLS_BUFI_V = 20043
    SIMT_START = 39999
    SIMT_LDG = 40000
    SIMT_STG = 40001
    SIMT_LDS = 40002
    SIMT_STS = 40003
    SIMT_LDK = 40004
    SIMT_STK = 40005
    SIMT_LD = 40006
    SIMT_ST = 40007
    SIMT_ATOM = 40008
    SIMT_RED = 40009
    SHADOW_MEMORY = 40010
    THREAD_BLOCK_BARRIER = 40011
    SIMT_END = 50000
    MAIN_SCALAR_EMPTY_START = 51000  # 26.1.0 on
    SIMT_CALL = 51001
    MAIN_SCALAR_EMPTY_END = 52000
    ONLINE_ERROR = 60000
    REGISTER_START = 70000
    SET_VECTOR_MASK_0 = 70001
    SET_VECTOR_MASK_1 = 70002
    SET_CTRL = 70003
    SET_FFTS_BASE_ADDR = 70004
    SET_FPC = 70005
    SET_QUANT_PRE = 70006
    SET_QUANT_POST = 70007
    SET_LRELU_ALPHA = 70008
    DYNAMIC_OP = 79999  # 02aa7ee on: the head of a variable-length record
    SIMT_ENTRY = 80000  # 26.1.0 on: a variable-length record's type
    BLOCK_FINISH = 100000
    FINISH = 100001
    KERNEL_FINISH = 100010  # 26.1.0 on, numbered 100001 there (and FINISH 100002)


class RecordTable:
    """One release's record numbering, as arrays the slot walk indexes by the u32 type word it reads.

    ``step_words[t]``: the length in u32 words (type word included) of a record of wire type ``t`` whose payload is
    a fixed struct of that release, 0 for a type it cannot step over (unknown, variable-length, or out of range);
    ``canonical[t]``: its ``RecordType`` value (-1 when sanitizerd has no name for it); ``payload_size``: the sizeof
    of each fixed payload by ``RecordType``; ``dtypes``: for the types whose converter can read this release's
    struct, the converter's dtype at this release's offsets (``adapt_dtype``): the others are stepped over and
    counted, never read through a stale layout."""

    def __init__(
        self,
        layout: str,
        step_words: np.ndarray,
        canonical: np.ndarray,
        payload_size: dict[int, int],
        dtypes: dict[int, np.dtype],
        names: dict[int, str],
    ) -> None:
        self.layout = layout
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


# The release whose payload structs the converters were written against.
REFERENCE_LAYOUT: Final = wire.DEFAULT_LAYOUT

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


@functools.cache
def record_table(layout: wire.WireLayout) -> RecordTable:
    """The record numbering of ``layout``'s release (see ``RecordTable``)."""
    # The converters' dtypes are the reference release's; the package import registers every family's.
    from sanitizerd.compat.convert import CONVERTERS

    reference = wire.LAYOUTS[REFERENCE_LAYOUT]
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
        ref = reference.payloads.get(name)
        if registered is None or ref is None:
            continue
        written_for = reference.payload_structs.get(ref[0])
        target = layout.payload_structs.get(struct_name)
        if layout is reference or (written_for is not None and written_for == target):
            # The converters are written for the reference's structs (tests/test_wire_header.py checks them): the
            # very same struct is read as they read it. (That covers a type the tool steps over as one struct and
            # reads as another of the union, as LOAD_L1_2D_TRANSPOSE: stepped as Load2DTransposeRecord, read as
            # LoadL12DTransposeRecord.)
            dtype = registered.dtype
        elif written_for is not None and target is not None:
            dtype = adapt_dtype(registered.dtype, written_for, target)
        else:
            dtype = None
        if dtype is not None and dtype.itemsize == size:
            dtypes[int(known)] = dtype
    return RecordTable(layout.name, step_words, canonical, payload_size, dtypes, names)


# The reference release's payload sizes by RecordType: what the converters' dtypes are checked against.
PAYLOAD_SIZE: Final[dict[int, int]] = {
    int(RecordType[name]): size
    for name, (_, size) in wire.LAYOUTS[REFERENCE_LAYOUT].payloads.items()
    if name in RecordType.__members__
}


class MemType(enum.IntEnum):
    """The u8 memory kind of instruction records (not the AddressSpace numbering events use)."""

    L1 = 0
    L0A = 1
    L0B = 2
    L0C = 3
    UB = 4
    BT = 5
    GM = 6
    PRIVATE = 7
    FB = 8
    INVALID = 9


MEMTYPE_SPACE: dict[int, Space] = {
    MemType.L1: Space.L1,
    MemType.L0A: Space.L0A,
    MemType.L0B: Space.L0B,
    MemType.L0C: Space.L0C,
    MemType.UB: Space.UB,
    MemType.BT: Space.BT,
    MemType.GM: Space.GM,
    MemType.PRIVATE: Space.PRIVATE,
    MemType.FB: Space.FB,
}

# MemType -> Space as an array (index by the record's u8); 255 marks INVALID and out-of-range values.
NO_SPACE = 255
MEMTYPE_TO_SPACE = np.full(256, NO_SPACE, dtype=np.uint8)
for _mem, _space in MEMTYPE_SPACE.items():
    MEMTYPE_TO_SPACE[_mem] = _space


class PipeType(enum.IntEnum):
    """msSanitizer's PipeType, a u32 inside records; same numbering as sanitizerd's ``Pipe``."""

    PIPE_S = 0
    PIPE_V = 1
    PIPE_M = 2
    PIPE_MTE1 = 3
    PIPE_MTE2 = 4
    PIPE_MTE3 = 5
    PIPE_ALL = 6
    PIPE_MTE4 = 7
    PIPE_MTE5 = 8
    PIPE_V2 = 9
    PIPE_FIX = 10
    PIPE_S_CAL = 11
    SIZE = 12
