"""msSanitizer's record types, the size of each one's payload, and its MemType / PipeType numbering.

Facts of msSanitizer's ``record_defs.h`` in the release this compat layer speaks (reference §1.4, §1.9), checked
with a probe that compiled its headers: a record on the wire is ``[u32 RecordType][payload]`` with the payload's C
layout (natural alignment inside the struct, no padding before it).
"""

from __future__ import annotations

import enum

import numpy as np

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
    BLOCK_FINISH = 100000
    FINISH = 100001


# sizeof(payload struct) of every record type whose layout this release fixes, converted or not: the walker steps
# over a record it does not convert by this size. ONLINE_ERROR is absent on purpose: its length is in its payload
# (a variable trailer of error descriptors), so a buffer holding one cannot be walked by type alone.
PAYLOAD_SIZE: dict[int, int] = {
    RecordType.LOAD: 56,  # LoadStoreRecord
    RecordType.STORE: 56,  # LoadStoreRecord
    RecordType.LD: 56,  # LoadStoreRecord
    RecordType.LD_IO: 56,  # LoadStoreRecord
    RecordType.ST: 56,  # LoadStoreRecord
    RecordType.ST_IO: 56,  # LoadStoreRecord
    RecordType.STP: 56,  # LoadStoreRecord
    RecordType.STI: 56,  # LoadStoreRecord
    RecordType.STI_IO: 56,  # LoadStoreRecord
    RecordType.LDP: 56,  # LoadStoreRecord
    RecordType.ST_ATOMIC: 56,  # LoadStoreRecord
    RecordType.STI_ATOMIC: 56,  # LoadStoreRecord
    RecordType.ST_DEV: 56,  # LoadStoreRecord
    RecordType.LD_DEV: 56,  # LoadStoreRecord
    RecordType.DMA_MOV: 64,  # DmaMovRecord
    RecordType.MOV_ALIGN: 72,  # MovAlignRecord
    RecordType.MOV_ALIGN_V2: 120,  # MovAlignRecordV2
    RecordType.VEC_DUP: 64,  # VecDupRecord
    RecordType.LOAD_2D: 64,  # Load2DRecord
    RecordType.LOAD_L1_2D: 72,  # LoadL12DRecord
    RecordType.LOAD_L1_MX_2D: 64,  # LoadL1Mx2DRecord
    RecordType.LOAD_L1_2D_TRANSPOSE: 64,  # Load2DTransposeRecord
    RecordType.LOAD_B2: 56,  # LoadB2Record
    RecordType.LOAD_A_WINOGRAD: 72,  # LoadAWinogradRecord
    RecordType.LOAD_B_WINOGRAD: 56,  # LoadBWinogradRecord
    RecordType.LOAD_3D: 88,  # Load3DRecord
    RecordType.SET_2D: 56,  # Set2DRecord
    RecordType.SET_L1_2D: 48,  # SetL12DRecord
    RecordType.DMA_MOV_ND2NZ: 72,  # DmaMovNd2nzRecord
    RecordType.MOV_BT: 64,  # MovBtRecord
    RecordType.LOAD_IMAGE: 64,  # LoadImageRecord
    RecordType.MOV_FP: 80,  # MovFpRecord
    RecordType.LOAD_2D_SPARSE: 56,  # Load2DSparseRecord
    RecordType.LOAD_2D_TRANSPOSE: 64,  # Load2DTransposeRecord
    RecordType.DECOMPRESS_HEADER: 48,  # DecompressHeaderRecord
    RecordType.DMA_MOV_CONV_RELU: 64,  # DmaMovConvReluRecord
    RecordType.LOAD_SMASK: 48,  # LoadSmaskRecord
    RecordType.BROADCAST: 64,  # BroadcastRecord
    RecordType.DMA_MOV_DEPTH_WISE: 64,  # DmaMovConvReluRecord
    RecordType.ND_DMA_OUT_TO_UB: 176,  # NdDMAOut2UbRecord
    RecordType.DC_PRELOAD: 48,  # DcPreloadRecord
    RecordType.DMA_MOV_ND2NZ_D: 88,  # DmaMovNd2nzDavRecord
    RecordType.DMA_MOV_DN2NZ_D: 88,  # DmaMovNd2nzDavRecord
    RecordType.SCALAR_RED: 56,  # LoadStoreRecord
    RecordType.SCALAR_ATOM: 56,  # LoadStoreRecord
    RecordType.LDVA: 56,  # LoadStoreRecord
    RecordType.MOV_L1_TO_UB: 64,  # MovL1UBRecord
    RecordType.MOV_UB_TO_L1: 64,  # MovL1UBRecord
    RecordType.MOV_UB_TO_UB: 64,  # MovL1UBRecord
    RecordType.MOV_CBUF_TO_BT: 64,  # MovL1BtRecord
    RecordType.MOV_CBUF_TO_FB: 64,  # MovL1FbRecord
    RecordType.VMRGSORT4_OP_C220: 96,  # UnaryOpRecord
    RecordType.VMRGSORT4_OP_M200: 96,  # UnaryOpRecord
    RecordType.VMRGSORT4_OP_C310: 64,  # Vms4v2RecordA5
    RecordType.FIX_L0C_TO_L1: 80,  # MovFpRecord
    RecordType.FIX_L0C_TO_UB: 80,  # MovFpRecord
    RecordType.LOAD_3D_V2: 96,  # Load3DV2Record
    RecordType.UNARY_OP: 96,  # UnaryOpRecord
    RecordType.VGATHER: 88,  # VgatherRecord
    RecordType.ELEMENT: 48,  # ElementRecord
    RecordType.BINARY_OP: 104,  # BinaryOpRecord
    RecordType.TERNARY_OP: 104,  # BinaryOpRecord
    RecordType.REDUCE_OP: 88,  # ReduceOpRecord
    RecordType.MATRIX_MUL_OP: 96,  # MarixMulOpRecord
    RecordType.MMAD_A5: 80,  # MmadA5Record
    RecordType.VEC_REGPROPCOOR_OP: 56,  # VecRegPropCoordOpRecord
    RecordType.CMPMASK_OP: 56,  # CmpMaskRecord
    RecordType.VCOPY_OP: 96,  # UnaryOpRecord
    RecordType.VREDUCEV2_UNARY: 96,  # UnaryOpRecord
    RecordType.VREDUCEV2_BINARY: 104,  # BinaryOpRecord
    RecordType.VREDUCEV2: 104,  # ReduceV2Record
    RecordType.VCONV_DST_S4_OP: 96,  # UnaryOpRecord
    RecordType.VCONV_SRC_S4_OP: 96,  # UnaryOpRecord
    RecordType.VSEL_OP: 104,  # BinaryOpRecord
    RecordType.SET_FLAG: 56,  # SyncRecord
    RecordType.WAIT_FLAG: 56,  # SyncRecord
    RecordType.HSET_FLAG: 56,  # HardSyncRecord
    RecordType.HWAIT_FLAG: 56,  # HardSyncRecord
    RecordType.PIPE_BARRIER: 40,  # PipeBarrierRecord
    RecordType.FFTS_SYNC: 40,  # FftsSyncRecord
    RecordType.WAIT_FLAG_DEV: 40,  # WaitFlagDevRecord
    RecordType.SET_ATOMIC: 40,  # AtomicModeRecord
    RecordType.IB_SET_STUB: 48,  # SoftSyncRecord
    RecordType.IB_WAIT_STUB: 48,  # SoftSyncRecord
    RecordType.SYNC_ALL_STUB: 48,  # SoftSyncRecord
    RecordType.WAIT_FLAG_DEV_PIPE: 40,  # WaitFlagDevPipeRecord
    RecordType.WAIT_FLAG_DEVI_PIPE: 40,  # WaitFlagDevPipeRecord
    RecordType.SET_INTRA_BLOCK: 56,  # IntraBlockSyncRecord
    RecordType.WAIT_INTRA_BLOCK: 56,  # IntraBlockSyncRecord
    RecordType.SET_INTRA_BLOCKI: 56,  # IntraBlockSyncRecord
    RecordType.WAIT_INTRA_BLOCKI: 56,  # IntraBlockSyncRecord
    RecordType.MSTX_STUB: 272,  # MstxRecord
    RecordType.SCATTERVNCHWCONV: 104,  # ScatterVnchwconvRecord
    RecordType.SCATTERVNCHWCONV_A5: 104,  # ScatterVnchwconvRecord
    RecordType.VBS32_A5: 64,  # Vbs32Record
    RecordType.GET_BUF: 56,  # BufRecord
    RecordType.GET_BUFI: 56,  # BufRecord
    RecordType.RLS_BUF: 56,  # BufRecord
    RecordType.RLS_BUFI: 56,  # BufRecord
    RecordType.SET_FLAGI: 56,  # SyncRecord
    RecordType.WAIT_FLAGI: 56,  # SyncRecord
    RecordType.HSET_FLAGI: 56,  # HardSyncRecord
    RecordType.HWAIT_FLAGI: 56,  # HardSyncRecord
    RecordType.SET_FLAG_V: 56,  # SyncRecord
    RecordType.SET_FLAGI_V: 56,  # SyncRecord
    RecordType.WAIT_FLAG_V: 56,  # SyncRecord
    RecordType.WAIT_FLAGI_V: 56,  # SyncRecord
    RecordType.FFTS_SYNC_V: 40,  # FftsSyncRecord
    RecordType.WAIT_FLAG_DEV_PIPE_V: 40,  # WaitFlagDevPipeRecord
    RecordType.WAIT_FLAG_DEVI_PIPE_V: 40,  # WaitFlagDevPipeRecord
    RecordType.SET_INTRA_BLOCK_V: 56,  # IntraBlockSyncRecord
    RecordType.SET_INTRA_BLOCKI_V: 56,  # IntraBlockSyncRecord
    RecordType.WAIT_INTRA_BLOCK_V: 56,  # IntraBlockSyncRecord
    RecordType.WAIT_INTRA_BLOCKI_V: 56,  # IntraBlockSyncRecord
    RecordType.GET_BUF_V: 56,  # BufRecord
    RecordType.GET_BUFI_V: 56,  # BufRecord
    RecordType.RLS_BUF_V: 56,  # BufRecord
    RecordType.RLS_BUFI_V: 56,  # BufRecord
    RecordType.SIMT_LDG: 64,  # SimtLoadStoreRecord
    RecordType.SIMT_STG: 64,  # SimtLoadStoreRecord
    RecordType.SIMT_LDS: 64,  # SimtLoadStoreRecord
    RecordType.SIMT_STS: 64,  # SimtLoadStoreRecord
    RecordType.SIMT_LDK: 64,  # SimtLoadStoreRecord
    RecordType.SIMT_STK: 64,  # SimtLoadStoreRecord
    RecordType.SIMT_LD: 64,  # SimtLoadStoreRecord
    RecordType.SIMT_ST: 64,  # SimtLoadStoreRecord
    RecordType.SIMT_ATOM: 64,  # SimtAtomRecord
    RecordType.SIMT_RED: 64,  # SimtLoadStoreRecord
    RecordType.THREAD_BLOCK_BARRIER: 40,  # SimtSyncRecord
    RecordType.SET_VECTOR_MASK_0: 56,  # RegisterSetRecord
    RecordType.SET_VECTOR_MASK_1: 56,  # RegisterSetRecord
    RecordType.SET_CTRL: 56,  # RegisterSetRecord
    RecordType.SET_FFTS_BASE_ADDR: 56,  # RegisterSetRecord
    RecordType.SET_FPC: 56,  # RegisterSetRecord
    RecordType.SET_QUANT_PRE: 56,  # RegisterSetRecord
    RecordType.SET_QUANT_POST: 56,  # RegisterSetRecord
    RecordType.SET_LRELU_ALPHA: 56,  # RegisterSetRecord
}

# Every payload size is a multiple of 4, so with the 4-byte type every record starts at a multiple of 4 in the
# record region: the walker relies on this to view the region as u32 words.
assert all(size % 4 == 0 for size in PAYLOAD_SIZE.values())


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
