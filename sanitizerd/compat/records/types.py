"""msSanitizer's record types, the size of each one's payload, and its MemType / PipeType numbering.

Facts of msSanitizer's ``record_defs.h`` (reference §1.4, §1.9, §1.10), measured by compiling its headers: a record
on the wire is ``[u32 RecordType][payload]`` with the payload's C layout (natural alignment inside the struct, no
padding before it).

Releases renumber record types (26.1.0 inserts KERNEL_FINISH before FINISH; 02aa7ee moved SHADOW_MEMORY), so
``RecordType`` is sanitizerd's own naming: its values are msSanitizer 4a419f05's numbers, the first wire sanitizerd
spoke, and types that release did not have take free values. A ``RecordTable`` maps one release's numbers to these
names (``sanitizerd.compat.records.numbering``): the converters are written once, against the names.
"""

from __future__ import annotations

import enum
from typing import Final

import numpy as np

from sanitizerd.compat import wire
from sanitizerd_protocol.records import Space


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


# The release whose payload structs the converters were written against, and its payload sizes by RecordType:
# what the converters' dtypes are checked against.
REFERENCE_LAYOUT: Final = wire.DEFAULT_LAYOUT
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


class DataType(enum.IntEnum):
    """msSanitizer's u8 DataType of cube and vector records: an operand's element width."""

    DATA_B4 = 0
    DATA_B8 = 1
    DATA_B16 = 2
    DATA_B32 = 3


class DetailedDataType(enum.IntEnum):
    """msSanitizer's u8 DetailedDataType (an element's exact type, in LOAD_L1_2D, LOAD_L1_2D_TRANSPOSE,
    MOV_CBUF_TO_BT and others), numbered as the reference release numbers it. Releases before 2026-01-28 (msSanitizer
    e698c43) have no ``Default`` and every value one less: a ``RecordTable`` maps each release's numbers to these
    (``detailed_types``), as it maps record types."""

    Default = 0
    B4 = 1
    E1M2 = 2
    E2M1 = 3
    B8 = 4
    S8 = 5
    U8 = 6
    E4M3 = 7
    E5M2 = 8
    B16 = 9
    S16 = 10
    U16 = 11
    F16 = 12
    HALF = 13
    BF16 = 14
    B32 = 15
    S32 = 16
    U32 = 17
    FLOAT = 18
    B64 = 19
    S64 = 20
    U64 = 21
    B128 = 22
    F16X2 = 23
    BF16X2 = 24
    F32 = 25


# A DetailedDataType value no release names (what an unknown wire value becomes).
NO_DETAILED_TYPE: Final = 255


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


# msSanitizer's QueryPipeType: the pipe that moves data from one MemType to another, as an array indexed by the
# records' two u8 kinds (every converter family that moves data asks it); NO_PIPE for every other pair.
NO_PIPE = 0xFF
PIPE_OF_PAIR = np.full((256, 256), NO_PIPE, dtype=np.uint8)
for (_src, _dst), _pipe in {
    (MemType.L1, MemType.L0A): PipeType.PIPE_MTE1,
    (MemType.L1, MemType.L0B): PipeType.PIPE_MTE1,
    (MemType.L1, MemType.L0C): PipeType.PIPE_MTE1,
    (MemType.L1, MemType.UB): PipeType.PIPE_MTE1,
    (MemType.L1, MemType.BT): PipeType.PIPE_MTE1,
    (MemType.L1, MemType.GM): PipeType.PIPE_MTE3,
    (MemType.GM, MemType.L0A): PipeType.PIPE_MTE2,
    (MemType.GM, MemType.L0B): PipeType.PIPE_MTE2,
    (MemType.GM, MemType.L1): PipeType.PIPE_MTE2,
    (MemType.GM, MemType.UB): PipeType.PIPE_MTE2,
    (MemType.UB, MemType.GM): PipeType.PIPE_MTE3,
    (MemType.UB, MemType.L1): PipeType.PIPE_MTE3,
    (MemType.UB, MemType.L0C): PipeType.PIPE_MTE3,
    (MemType.L0C, MemType.UB): PipeType.PIPE_V,
    (MemType.UB, MemType.UB): PipeType.PIPE_V,
    (MemType.L0C, MemType.L1): PipeType.PIPE_FIX,
    (MemType.L1, MemType.FB): PipeType.PIPE_FIX,
}.items():
    PIPE_OF_PAIR[_src, _dst] = _pipe


def query_pipe(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """msSanitizer's QueryPipeType, vectorised; ``NO_PIPE`` for a pair it does not know."""
    return PIPE_OF_PAIR[np.asarray(src, dtype=np.uint8), np.asarray(dst, dtype=np.uint8)]
