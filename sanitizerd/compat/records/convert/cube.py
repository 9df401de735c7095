"""Cube-side records (matrix multiply, L1/L0 loads, fills) -> events, with msSanitizer's semantics.

Matrix ops run on PIPE_M: L0A and L0B read, L0C written (or read and written when it accumulates: neither the
initial value nor the bias source is set). With the unit flag on, a generated SET_FLAG/WAIT_FLAG pair M -> FIX
(event id 11, msSanitizer's) follows, telling the race detector that the fixpipe waits for the result.
Loads pick their pipe from (source, destination) memory as msSanitizer's ``QueryPipeType`` does; a pair it does
not know (or an invalid memory type) gives no event.
"""

from __future__ import annotations

import numpy as np

from sanitizerd.compat.records.convert.base import BlockContext, detailed_types, drop, payload_dtype, record_dtype
from sanitizerd.compat.records.convert.plan import NO_SPACE, Plan, explicit_align, memtype_to_space, plans
from sanitizerd.compat.records.types import NO_PIPE, DataType, DetailedDataType, MemType, RecordType, query_pipe
from sanitizerd_protocol.records import EventKind, Pipe, Space

FRACTAL = 512  # bytes of one 16 x 16 fractal (msSanitizer's MATRIX_FRACTAL_SIZE)
FRACTAL_ROW = 32
UNIT_FLAG_EVENT = 11  # msSanitizer's event id for generated syncs, apart from user ids 0..7

# The members of msSanitizer's structs the longer converters read, as one table (payload_dtype: C member names,
# renamed where the converter calls them otherwise); a one-line layout stays beside its converter.
MATRIX_MUL_DTYPE = payload_dtype(
    "MarixMulOpRecord",
    "dst src0 src1 m k n src0RepeatStride dstBlockSize src0BlockSize src1BlockSize src0Repeat dstBlockNum"
    " src0BlockNum src1BlockNum dstAlignSize src0AlignSize src1AlignSize cmatrixSource cmatrixInitVal"
    " enUnitFlag=unit_flag",
)
MMAD_A5_DTYPE = payload_dtype(
    "MmadA5Record",
    "dst src0 src1 m k n dstBlockNum src0BlockNum src1BlockNum src0AlignSize src1AlignSize src0Dtype src1Dtype"
    " cmatrixSource cmatrixInitVal enUnitFlag=unit_flag",
)
LOAD_2D_DTYPE = payload_dtype(
    "Load2DRecord",
    "dst src baseIdx srcStride dstStride blockSize repeat dstMemType=dst_mem srcMemType=src_mem addrCalMode:<u4",
)
LOAD_2D_SPARSE_DTYPE = payload_dtype(
    "Load2DSparseRecord", "dst src0 src1 startId repeat dstMemType=dst_mem srcMemType=src_mem"
)
LOAD_2D_TRANSPOSE_DTYPE = payload_dtype(
    "Load2DTransposeRecord",
    "dst src indexId srcStride dstStride dstFracStride repeat addrMode dataType dstMemType=dst_mem srcMemType=src_mem",
)
LOAD_L1_2D_DTYPE = payload_dtype(
    "LoadL12DRecord",
    "dst src mStartPosition=m_start kStartPosition=k_start mStep kStep srcStride dstStride dstMemType=dst_mem"
    " transposeMode=transpose:<u4 detailedDataType=detailed_type",
)
LOAD_L1_MX_2D_DTYPE = payload_dtype(
    "LoadL1Mx2DRecord",
    "dst src xStartPosition=x_start yStartPosition=y_start xStep yStep srcStride dstStride dstMemType=dst_mem",
)
LOAD_IMAGE_DTYPE = payload_dtype(
    "LoadImageRecord",
    "dst horSize verSize horStartP=hor_start verStartP=ver_start sHorRes lPadSize=l_pad rPadSize=r_pad dataType"
    " dstMemType=dst_mem topPadSize=top_pad botPadSize=bot_pad",
)
LOAD_A_WINOGRAD_DTYPE = payload_dtype(
    "LoadAWinogradRecord",
    "dst src fmSizeW=fm_w fmSizeH=fm_h fmSizeCh=fm_ch extStepK=ext_k extStepM=ext_m dstStartPointK=dst_start_k"
    " dstStartPointM=dst_start_m innerDstGap dataType dstMemType=dst_mem srcMemType=src_mem",
)
LOAD_B_WINOGRAD_DTYPE = payload_dtype(
    "LoadBWinogradRecord",
    "dst src srcRptStride dstRptStride innerDstStride repeat dstMemType=dst_mem srcMemType=src_mem",
)
BROADCAST_DTYPE = payload_dtype(
    "BroadcastRecord",
    "dst src nBurst lenBurst srcGap dstGap enableRepeat srcDataType=src_type dstDataType=dst_type"
    " dstMemType=dst_mem srcMemType=src_mem",
)
LOAD_3D_V2_DTYPE = payload_dtype(
    "Load3DV2Record",
    "dst src dstStride fMapW=fmap_w fMapH=fmap_h fMapC=fmap_c filterW filterH matrixRptStride=rpt_stride"
    " filterWStride=filter_w_stride filterHStride=filter_h_stride matrixKPos=k_pos matrixMPos=m_pos"
    " matrixKStep=k_step matrixMStep=m_step matrixRptTimes=rpt_times outputMPos=output_m_pos dataType"
    " dstMemType=dst_mem srcMemType=src_mem fMapTopPad=pad_top fMapBottomPad=pad_bottom fMapLeftPad=pad_left"
    " fMapRightPad=pad_right filterWDilation=dilation_w filterHDilation=dilation_h matrixMode matrixRptMode=rpt_mode"
    " transposeMode=transpose",
)
LOAD_3D_DTYPE = payload_dtype(
    "Load3DRecord",
    "dst src fMapW=fmap_w fMapH=fmap_h fMapC=fmap_c filterW filterH matrixRptStride=rpt_stride"
    " filterWStride=filter_w_stride filterHStride=filter_h_stride matrixKPos=k_pos matrixMPos=m_pos"
    " matrixKStep=k_step matrixMStep=m_step matrixRptTimes=rpt_times dataType dstMemType=dst_mem srcMemType=src_mem"
    " fMapTopPad=pad_top fMapBottomPad=pad_bottom fMapLeftPad=pad_left fMapRightPad=pad_right"
    " filterWDilation=dilation_w filterHDilation=dilation_h matrixMode matrixRptMode=rpt_mode",
)


def _u(x: np.ndarray | int) -> np.ndarray:
    return np.asarray(x).astype(np.uint64)


def _no_pipe(context: BlockContext, name: str, pipe: np.ndarray) -> None:
    drop(
        context, f"{name} records dropped: no pipe moves data between their memory kinds", int((pipe == NO_PIPE).sum())
    )


def _space(memtype: np.ndarray | int, ok: np.ndarray) -> np.ndarray:
    """Space of a MemType, NO_SPACE where the record is not to give events."""
    return np.where(ok, memtype_to_space(memtype), NO_SPACE)


def _copy(
    plan: Plan,
    r: np.ndarray,
    ok: np.ndarray,
    *,
    read: dict[str, np.ndarray | int] | None = None,
    write: dict[str, np.ndarray | int] | None = None,
    **both: np.ndarray | int,
) -> None:
    """A load's two slots: its source read, then its destination written, each in the memory its record names
    (none where not ``ok``); ``both`` is the pattern the sides share, ``read`` and ``write`` each side's own."""
    plan.add(EventKind.READ, _space(r["src_mem"], ok), r["src"], **both, **(read or {}))
    plan.add(EventKind.WRITE, _space(r["dst_mem"], ok), r["dst"], **both, **(write or {}))


def _in_grains(run: np.ndarray, stride: np.ndarray) -> dict[str, np.ndarray]:
    """Runs of ``run`` bytes, ``stride`` bytes apart, as one pattern: blocks of the largest size that divides both
    (1 when both are 0), ``run`` of them a repeat, repeats ``stride`` apart."""
    grain = np.gcd(run, stride)
    grain = np.where(grain == 0, 1, grain)
    return dict(block_size=grain, block_num=run // grain, repeat_stride=stride // grain)


def _matrix(
    plan: Plan,
    r: np.ndarray,
    *,
    a: dict,
    b: dict,
    c: dict,
) -> None:
    m = int(Pipe.M)
    plan.add(EventKind.READ, Space.L0A, r["src0"], pipe=m, **a)
    plan.add(EventKind.READ, Space.L0B, r["src1"], pipe=m, **b)
    accumulate = (r["cmatrix_init_val"] == 0) & (r["cmatrix_source"] == 0)
    plan.add(EventKind.READ, Space.L0C, r["dst"], pipe=m, count=accumulate, **c)
    plan.add(EventKind.WRITE, Space.L0C, r["dst"], pipe=m, **c)
    unit = r["unit_flag"] != 0
    for kind in (EventKind.SET_FLAG, EventKind.WAIT_FLAG):
        plan.add(
            kind,
            0,
            0,
            pipe=m,
            dst_pipe=int(Pipe.FIX),
            event_id=UNIT_FLAG_EVENT,
            count=unit,
            memory=False,
        )


@plans(RecordType.MATRIX_MUL_OP, dtype=MATRIX_MUL_DTYPE)
def convert_matrix_mul(plan: Plan, r: np.ndarray, context: BlockContext, record_type: int) -> None:
    """MMAD: A as src0Repeat repeats of src0BlockNum blocks, B and C as one run of blocks each."""
    _matrix(
        plan,
        r,
        a=dict(
            block_num=r["src0_block_num"],
            block_size=r["src0_block_size"],
            repeat=r["src0_repeat"],
            repeat_stride=r["src0_repeat_stride"],
            align=explicit_align(r["src0_align_size"]),
        ),
        b=dict(
            block_num=r["src1_block_num"], block_size=r["src1_block_size"], align=explicit_align(r["src1_align_size"])
        ),
        c=dict(block_num=r["dst_block_num"], block_size=r["dst_block_size"], align=explicit_align(r["dst_align_size"])),
    )


@plans(RecordType.MMAD_A5, dtype=MMAD_A5_DTYPE)
def convert_mmad_a5(plan: Plan, r: np.ndarray, context: BlockContext, record_type: int) -> None:
    """MMAD (910_95 form): 512-byte fractals of A and B, 1024-byte fractals of C (1024-aligned)."""
    _matrix(
        plan,
        r,
        a=dict(block_num=r["src0_block_num"], block_size=FRACTAL, align=explicit_align(r["src0_align_size"])),
        b=dict(block_num=r["src1_block_num"], block_size=FRACTAL, align=explicit_align(r["src1_align_size"])),
        c=dict(block_num=r["dst_block_num"], block_size=1024, align=1024),
    )


@plans(RecordType.LOAD_2D, dtype=LOAD_2D_DTYPE)
def convert_load_2d(plan: Plan, r: np.ndarray, context: BlockContext, record_type: int) -> None:
    """LOAD_2D: ``repeat`` fractals, one per repeat (strides in fractals), from ``src + baseIdx`` fractals
    upward, or (decrement mode) ending there. A decrement that would start below address 0 is dropped."""
    pipe = query_pipe(r["src_mem"], r["dst_mem"])
    repeat = _u(r["repeat"])
    start = _u(r["src"]) + _u(r["base_idx"]) * np.uint64(FRACTAL)
    back = (np.maximum(repeat, 1) - np.uint64(1)) * _u(r["src_stride"]) * np.uint64(FRACTAL)
    dec = r["addr_cal_mode"] != 0
    ok = (pipe != NO_PIPE) & (repeat != 0) & ~(dec & (start < back))
    _no_pipe(context, "LOAD_2D", pipe)
    drop(
        context,
        "LOAD_2D records dropped: decrementing below address 0",
        int((dec & (start < back) & (repeat != 0)).sum()),
    )
    address = np.where(dec, start - np.where(start >= back, back, 0), start)
    common = dict(pipe=pipe, block_size=r["block_size"], block_stride=0, repeat=repeat)
    plan.add(EventKind.READ, _space(r["src_mem"], ok), address, repeat_stride=r["src_stride"], **common)
    plan.add(EventKind.WRITE, _space(r["dst_mem"], ok), r["dst"], repeat_stride=r["dst_stride"], **common)


@plans(RecordType.LOAD_2D_SPARSE, dtype=LOAD_2D_SPARSE_DTYPE)
def convert_load_2d_sparse(plan: Plan, r: np.ndarray, context: BlockContext, record_type: int) -> None:
    """LOAD_2D_SPARSE: ``repeat`` consecutive fractals of data and 128-byte index blocks read, fractals written."""
    pipe = query_pipe(r["src_mem"], r["dst_mem"])
    ok = (pipe != NO_PIPE) & (r["repeat"] != 0)
    _no_pipe(context, "LOAD_2D_SPARSE", pipe)
    drop(context, "LOAD_2D_SPARSE records dropped: repeat 0", int((r["repeat"] == 0).sum()))
    start = _u(r["start_id"])
    src = _space(r["src_mem"], ok)
    common = dict(pipe=pipe, repeat=r["repeat"], repeat_stride=1)
    plan.add(EventKind.READ, src, _u(r["src0"]) + start * np.uint64(FRACTAL), block_size=FRACTAL, **common)
    plan.add(EventKind.READ, src, _u(r["src1"]) + start * np.uint64(128), block_size=128, **common)
    plan.add(EventKind.WRITE, _space(r["dst_mem"], ok), r["dst"], block_size=FRACTAL, **common)


_FRACTALS_PER_TYPE = np.ones(256, dtype=np.uint64)
_FRACTALS_PER_TYPE[[DataType.DATA_B4, DataType.DATA_B8, DataType.DATA_B16, DataType.DATA_B32]] = [4, 2, 1, 2]


@plans(RecordType.LOAD_2D_TRANSPOSE, dtype=LOAD_2D_TRANSPOSE_DTYPE)
def convert_load_2d_transpose(plan: Plan, r: np.ndarray, context: BlockContext, record_type: int) -> None:
    """LOAD_2D_TRANSPOSE: per repeat, the type's fractal group (4 for B4, 2 for B8/B32, 1 for B16) read
    contiguously and written with the destination fractal stride. Decrement mode ends at the index; one whose
    index would go below zero is dropped, as msSanitizer drops it."""
    pipe = query_pipe(r["src_mem"], r["dst_mem"])
    repeat = _u(r["repeat"])
    fractals = _FRACTALS_PER_TYPE[r["data_type"]]
    src_repeat_stride = fractals * _u(r["src_stride"])
    start = _u(r["src"]) + _u(r["index_id"]) * fractals * np.uint64(FRACTAL)
    dec = r["addr_mode"] != 0
    back = src_repeat_stride * np.uint64(FRACTAL) * (np.maximum(repeat, 1) - np.uint64(1))
    negative_index = _u(r["index_id"]) < _u(r["src_stride"]) * (np.maximum(repeat, 1) - np.uint64(1))
    ok = (pipe != NO_PIPE) & (repeat != 0) & ~(dec & negative_index)
    _no_pipe(context, "LOAD_2D_TRANSPOSE", pipe)
    drop(context, "LOAD_2D_TRANSPOSE records dropped: repeat 0", int((repeat == 0).sum()))
    drop(
        context,
        "LOAD_2D_TRANSPOSE records dropped: index below zero in a repeat",
        int((dec & negative_index & (repeat != 0)).sum()),
    )
    common = dict(pipe=pipe, block_num=fractals, block_size=FRACTAL, repeat=repeat)
    plan.add(
        EventKind.READ,
        _space(r["src_mem"], ok),
        np.where(dec, start - back, start),  # msSanitizer wraps too when the start is below the offset
        block_stride=1,
        repeat_stride=src_repeat_stride,
        **common,
    )
    plan.add(
        EventKind.WRITE,
        _space(r["dst_mem"], ok),
        r["dst"],
        block_stride=_u(r["dst_frac_stride"]) + np.uint64(1),
        repeat_stride=_u(r["dst_stride"]) + np.uint64(1),
        **common,
    )


@plans(RecordType.LOAD_L1_2D, dtype=LOAD_L1_2D_DTYPE)
def convert_load_l1_2d(plan: Plan, r: np.ndarray, context: BlockContext, record_type: int) -> None:
    """LOAD_L1_2D (910_95): kStep repeats of mStep fractals from L1 at (kStart, mStart); written the same way,
    or transposed (blocks and repeats traded by the element width). Transposes the hardware refuses give
    nothing."""
    pipe = query_pipe(np.full(len(r), MemType.L1, dtype=np.uint8), r["dst_mem"])
    t = detailed_types(r["detailed_type"], context)
    transpose = r["transpose"] != 0
    m_step, k_step = _u(r["m_step"]), _u(r["k_step"])
    legal = (
        ((t == DetailedDataType.B4) & (m_step % np.uint64(4) == 0))
        | ((t == DetailedDataType.B8) & (m_step % np.uint64(2) == 0))
        | (t == DetailedDataType.B16)
        | ((t == DetailedDataType.B32) & (k_step % np.uint64(2) == 0))
    )
    ok = (pipe != NO_PIPE) & (~transpose | legal)
    _no_pipe(context, "LOAD_L1_2D", pipe)
    drop(
        context,
        "LOAD_L1_2D records dropped: transpose with steps or type the hardware refuses",
        int((transpose & ~legal).sum()),
    )
    src = _u(r["src"]) + (_u(r["k_start"]) * _u(r["src_stride"]) + _u(r["m_start"])) * np.uint64(FRACTAL)
    plan.add(
        EventKind.READ,
        _space(MemType.L1, ok),
        src,
        pipe=pipe,
        block_num=m_step,
        block_size=FRACTAL,
        repeat=k_step,
        repeat_stride=r["src_stride"],
    )
    factor = np.select([t == DetailedDataType.B4, t == DetailedDataType.B8], [4, 2], 1).astype(np.uint64)
    blocks = np.select(
        [transpose & (t == DetailedDataType.B32), transpose], [k_step // np.uint64(2), k_step * factor], m_step
    )
    repeats = np.select(
        [transpose & (t == DetailedDataType.B32), transpose], [m_step * np.uint64(2), m_step // factor], k_step
    )
    plan.add(
        EventKind.WRITE,
        _space(r["dst_mem"], ok),
        r["dst"],
        pipe=pipe,
        block_num=blocks,
        block_size=FRACTAL,
        repeat=repeats,
        repeat_stride=r["dst_stride"],
    )


@plans(RecordType.LOAD_L1_MX_2D, dtype=LOAD_L1_MX_2D_DTYPE)
def convert_load_l1_mx_2d(plan: Plan, r: np.ndarray, context: BlockContext, record_type: int) -> None:
    """LOAD_L1_MX_2D (scale matrix): only the L1 read is modelled (msSanitizer models no write either):
    xStep repeats of yStep 32-byte rows from (xStart, yStart), on MTE1."""
    src = _u(r["src"]) + (_u(r["x_start"]) * _u(r["src_stride"]) + _u(r["y_start"])) * np.uint64(FRACTAL_ROW)
    plan.add(
        EventKind.READ,
        Space.L1,
        src,
        pipe=int(Pipe.MTE1),
        block_num=r["y_step"],
        block_size=FRACTAL_ROW,
        repeat=r["x_step"],
        repeat_stride=r["src_stride"],
    )


# Offsets of its own: the measured layout gives this record type Load2DTransposeRecord's members, which the fields
# read here do not follow.
LOAD_L1_2D_TRANSPOSE_DTYPE = record_dtype(
    64,
    0,
    [
        ("dst", "<u8", 32),
        ("src", "<u8", 40),
        ("repeat", "<u2", 48),
        ("src_stride", "<u2", 50),
        ("dst_stride", "<u2", 52),
        ("src_frac_stride", "<u2", 54),
        ("dst_frac_stride", "<u2", 56),
        ("detailed_type", "u1", 58),
    ],
)


@plans(RecordType.LOAD_L1_2D_TRANSPOSE, dtype=LOAD_L1_2D_TRANSPOSE_DTYPE)
def convert_load_l1_2d_transpose(plan: Plan, r: np.ndarray, context: BlockContext, record_type: int) -> None:
    """LOAD_L1_2D_TRANSPOSE (L1 -> L0B): per repeat, the type's fractal group, each side with its own fractal
    and repeat strides. An unknown type has no fractals (nothing)."""
    t = detailed_types(r["detailed_type"], context)
    fractals = np.select(
        [t == DetailedDataType.B4, t == DetailedDataType.B8, t == DetailedDataType.B16, t == DetailedDataType.B32],
        [4, 2, 1, 2],
        0,
    )
    common = dict(pipe=int(Pipe.MTE1), block_num=fractals, block_size=FRACTAL, repeat=r["repeat"])
    for kind, space, side in ((EventKind.READ, Space.L1, "src"), (EventKind.WRITE, Space.L0B, "dst")):
        plan.add(
            kind, space, r[side], block_stride=r[f"{side}_frac_stride"], repeat_stride=r[f"{side}_stride"], **common
        )


DECOMPRESS_HEADER_DTYPE = payload_dtype("DecompressHeaderRecord", "src nBlock srcMemType=src_mem")


@plans(RecordType.DECOMPRESS_HEADER, dtype=DECOMPRESS_HEADER_DTYPE)
def convert_decompress_header(plan: Plan, r: np.ndarray, context: BlockContext, record_type: int) -> None:
    """DECOMPRESS_HEADER: nBlock 32-byte headers read on MTE2 (32-byte aligned)."""
    drop(context, "DECOMPRESS_HEADER records dropped: nBlock 0", int((r["n_block"] == 0).sum()))
    plan.add(
        EventKind.READ,
        memtype_to_space(r["src_mem"]),
        r["src"],
        pipe=int(Pipe.MTE2),
        block_size=_u(r["n_block"]) * np.uint64(32),
        align=32,
    )


SET_2D_DTYPE = payload_dtype("Set2DRecord", "dst dstBlockSize repeat dstBlockNum repeatGap dstMemType=dst_mem")


@plans(RecordType.SET_2D, dtype=SET_2D_DTYPE)
def convert_set_2d(plan: Plan, r: np.ndarray, context: BlockContext, record_type: int) -> None:
    """SET_2D (fill): ``repeat`` runs of dstBlockNum blocks, repeatGap blocks apart; MTE2 into L1, else MTE1."""
    plan.add(
        EventKind.WRITE,
        memtype_to_space(r["dst_mem"]),
        r["dst"],
        pipe=np.where(r["dst_mem"] == MemType.L1, int(Pipe.MTE2), int(Pipe.MTE1)),
        block_num=r["dst_block_num"],
        block_size=r["dst_block_size"],
        repeat=r["repeat"],
        repeat_stride=_u(r["dst_block_num"]) + _u(r["repeat_gap"]),
    )


SET_L1_2D_DTYPE = payload_dtype("SetL12DRecord", "dst repeat dstBlockNum repeatGap detailedDataType=detailed_type")


@plans(RecordType.SET_L1_2D, dtype=SET_L1_2D_DTYPE)
def convert_set_l1_2d(plan: Plan, r: np.ndarray, context: BlockContext, record_type: int) -> None:
    """SET_L1_2D (910_95 fill of L1): ``repeat`` runs of dstBlockNum 32-byte blocks, repeat stride repeatGap
    blocks (msSanitizer's reading of the gap), on MTE2, 32-byte aligned."""
    plan.add(
        EventKind.WRITE,
        Space.L1,
        r["dst"],
        pipe=int(Pipe.MTE2),
        block_num=r["dst_block_num"],
        block_size=32,
        repeat=r["repeat"],
        repeat_stride=r["repeat_gap"],
        align=32,
    )


@plans(RecordType.LOAD_IMAGE, dtype=LOAD_IMAGE_DTYPE)
def convert_load_image(plan: Plan, r: np.ndarray, context: BlockContext, record_type: int) -> None:
    """LOAD_IMAGE: the padded image written as (width + pads) x (height + pads) 32-byte blocks, on MTE2. The
    image source is not in the record, so no read."""
    width = _u(r["hor_size"]) + _u(r["l_pad"]) + _u(r["r_pad"])
    height = _u(r["ver_size"]) + _u(r["top_pad"]) + _u(r["bot_pad"])
    plan.add(
        EventKind.WRITE,
        memtype_to_space(r["dst_mem"]),
        r["dst"],
        pipe=int(Pipe.MTE2),
        block_num=width * height,
        block_size=32,
    )


LOAD_SMASK_DTYPE = payload_dtype("LoadSmaskRecord", "src dst smaskSize srcMemType=src_mem")


@plans(RecordType.LOAD_SMASK, dtype=LOAD_SMASK_DTYPE)
def convert_load_smask(plan: Plan, r: np.ndarray, context: BlockContext, record_type: int) -> None:
    """LOAD_SMASK: smaskSize bytes of sparsity mask read, from GM on MTE2 (2-byte aligned) or from UB on MTE3.
    The destination is an internal register: no write."""
    gm = r["src_mem"] == MemType.GM
    plan.add(
        EventKind.READ,
        memtype_to_space(r["src_mem"]),
        r["src"],
        pipe=np.where(gm, int(Pipe.MTE2), int(Pipe.MTE3)),
        block_size=r["smask_size"],
        align=np.where(gm, 2, 0),
    )


LOAD_B2_DTYPE = payload_dtype("LoadB2Record", "dst src repeat dataType dstMemType=dst_mem srcMemType=src_mem")


@plans(RecordType.LOAD_B2, dtype=LOAD_B2_DTYPE)
def convert_load_b2(plan: Plan, r: np.ndarray, context: BlockContext, record_type: int) -> None:
    """LOAD_B2: ``repeat`` fractals of 128 bytes (B8) or 64 bytes, rounded up to 512, read and written."""
    pipe = query_pipe(r["src_mem"], r["dst_mem"])
    ok = pipe != NO_PIPE
    _no_pipe(context, "LOAD_B2", pipe)
    nominal = _u(r["repeat"]) * np.where(r["data_type"] == DataType.DATA_B8, 128, 64).astype(np.uint64)
    size = (nominal + np.uint64(511)) // np.uint64(512) * np.uint64(512)
    _copy(plan, r, ok, pipe=pipe, block_size=size)


def _element_size(data_type: np.ndarray) -> np.ndarray:
    return np.select([data_type == DataType.DATA_B16, data_type == DataType.DATA_B32], [2, 4], 1).astype(np.uint64)


@plans(RecordType.LOAD_A_WINOGRAD, dtype=LOAD_A_WINOGRAD_DTYPE)
def convert_load_a_winograd(plan: Plan, r: np.ndarray, context: BlockContext, record_type: int) -> None:
    """LOAD_A_WINOGRAD: the whole feature map (W x H x C elements) read; four output sub-matrices of
    extK x extM elements written as fractals, innerDstGap fractals apart. A destination that is not whole
    fractals drops the write (msSanitizer logs an error and keeps the read)."""
    pipe = query_pipe(r["src_mem"], r["dst_mem"])
    ok = pipe != NO_PIPE
    _no_pipe(context, "LOAD_A_WINOGRAD", pipe)
    size = _element_size(r["data_type"])
    plan.add(
        EventKind.READ,
        _space(r["src_mem"], ok),
        r["src"],
        pipe=pipe,
        block_size=_u(r["fm_w"]) * _u(r["fm_h"]) * _u(r["fm_ch"]) * size,
        block_stride=0,
    )
    # msSanitizer multiplies extStepK * extStepM in int then by the element size.
    out = (_u(r["ext_k"]) * _u(r["ext_m"]) & np.uint64(0xFFFF_FFFF)) * size
    blocks = out // np.uint64(FRACTAL)
    whole = (blocks != 0) & (out % np.uint64(FRACTAL) == 0)
    drop(context, "LOAD_A_WINOGRAD writes dropped: output not whole fractals", int((ok & ~whole).sum()))
    plan.add(
        EventKind.WRITE,
        _space(r["dst_mem"], ok & whole),
        r["dst"],
        pipe=pipe,
        block_num=blocks,
        block_size=FRACTAL,
        repeat=4,
        repeat_stride=_u(r["inner_dst_gap"]) + blocks,
    )


@plans(RecordType.LOAD_B_WINOGRAD, dtype=LOAD_B_WINOGRAD_DTYPE)
def convert_load_b_winograd(plan: Plan, r: np.ndarray, context: BlockContext, record_type: int) -> None:
    """LOAD_B_WINOGRAD: per repeat, 9 fractals read and 4 fractals written (innerDstStride apart)."""
    pipe = query_pipe(r["src_mem"], r["dst_mem"])
    ok = pipe != NO_PIPE
    _no_pipe(context, "LOAD_B_WINOGRAD", pipe)
    _copy(
        plan,
        r,
        ok,
        pipe=pipe,
        block_size=FRACTAL,
        repeat=r["repeat"],
        read=dict(block_num=9, repeat_stride=r["src_rpt_stride"]),
        write=dict(block_num=4, block_stride=r["inner_dst_stride"], repeat_stride=r["dst_rpt_stride"]),
    )


@plans(RecordType.BROADCAST, dtype=BROADCAST_DTYPE)
def convert_broadcast(plan: Plan, r: np.ndarray, context: BlockContext, record_type: int) -> None:
    """BROADCAST (UB -> L0C, on PIPE_V): nBurst bursts; the source gives lenBurst 32-byte blocks per burst (one
    when repeating, doubled for B32), the destination lenBurst fractals of 512 bytes (1024 for B32, 1024-aligned).
    A zero nBurst or lenBurst gives nothing."""
    ok = (r["n_burst"] != 0) & (r["len_burst"] != 0)
    drop(context, "BROADCAST records dropped: nBurst or lenBurst 0", int((~ok).sum()))
    src_blocks = np.where(r["enable_repeat"] != 0, 1, _u(r["len_burst"])).astype(np.uint64)
    src_blocks = src_blocks * np.where(r["src_type"] == DataType.DATA_B32, 2, 1).astype(np.uint64)
    dst_b32 = r["dst_type"] == DataType.DATA_B32
    _copy(
        plan,
        r,
        ok,
        pipe=int(Pipe.V),
        repeat=r["n_burst"],
        read=dict(block_num=src_blocks, block_size=32, repeat_stride=_u(r["src_gap"]) + src_blocks),
        write=dict(
            block_num=r["len_burst"],
            block_size=np.where(dst_b32, 1024, 512),
            repeat_stride=_u(r["dst_gap"]) + _u(r["len_burst"]),
            align=np.where(dst_b32 & (r["dst_mem"] == MemType.L0C), 1024, 0),
        ),
    )


_BITS_OF_TYPE = np.zeros(256, dtype=np.int64)
_BITS_OF_TYPE[[DataType.DATA_B4, DataType.DATA_B8, DataType.DATA_B16, DataType.DATA_B32]] = [4, 8, 16, 32]
# Channel counts the hardware takes, per type: channel % divisor in the allowed remainders.
_CHANNEL_DIVISOR = np.ones(256, dtype=np.int64)
_CHANNEL_DIVISOR[[DataType.DATA_B4, DataType.DATA_B8, DataType.DATA_B16, DataType.DATA_B32]] = [64, 32, 16, 8]
_CHANNEL_OK = {
    DataType.DATA_B4: (0, 8, 16, 32),
    DataType.DATA_B8: (0, 4, 8, 16),
    DataType.DATA_B16: (0, 4, 8),
    DataType.DATA_B32: (0, 4),
}


def _positions(size: np.ndarray, before: np.ndarray, after: np.ndarray, window: np.ndarray, stride: np.ndarray):
    """How many window positions msSanitizer walks along one axis: from -before while < size + after - window + 1,
    by ``stride``."""
    span = size + after - window + 1 + before
    return np.where(span > 0, -(-span // np.maximum(stride, 1)), 0)


def _intervals(mode1: np.ndarray, pos: np.ndarray, step: np.ndarray, stride: np.ndarray, times: np.ndarray, total):
    """The kept index intervals of one im2col axis, as msSanitizer's window test keeps them: mode 0 keeps what
    lies outside [pos, pos + step) (its test reads so), mode 1 the repeated windows (contiguous when step >=
    stride). Returns two intervals (lo, hi) each, and which records have gapped mode-1 windows (not modelled)."""
    lo1 = np.zeros_like(total)
    hi1 = np.where(mode1, 0, np.minimum(pos, total))
    lo2 = np.where(mode1, pos, pos + step)
    hi2 = np.where(mode1, np.minimum(pos + stride * times, total), total)
    gapped = mode1 & (step < stride) & (times > 0)
    return (lo1, hi1), (np.minimum(lo2, total), hi2), gapped


def _img2col_checks(r: np.ndarray, channel: np.ndarray, context: BlockContext, name: str) -> tuple[np.ndarray, ...]:
    """What LOAD_3D and LOAD_3D_V2 check alike, as msSanitizer does: the element bits of each record's data type,
    its pipe, and whether it is valid (a known type, no zero dilation, a channel count the hardware takes); the
    records with no pipe or not valid are counted as dropped under ``name``."""
    data_type = r["data_type"]
    bits = _BITS_OF_TYPE[data_type]
    remainder = channel % _CHANNEL_DIVISOR[data_type]
    channel_ok = np.zeros(len(r), dtype=bool)
    for dtype_value, allowed in _CHANNEL_OK.items():
        channel_ok |= (data_type == dtype_value) & np.isin(remainder, allowed)
    pipe = query_pipe(r["src_mem"], r["dst_mem"])
    _no_pipe(context, name, pipe)
    valid = (bits != 0) & (r["dilation_w"] != 0) & (r["dilation_h"] != 0) & channel_ok
    drop(context, f"{name} records dropped: data type, dilation or channel count invalid", int((~valid).sum()))
    return bits, pipe, valid


@plans(RecordType.LOAD_3D_V2, dtype=LOAD_3D_V2_DTYPE)
def convert_load_3d_v2(plan: Plan, r: np.ndarray, context: BlockContext, record_type: int) -> None:
    """LOAD_3D_V2 (img2col, 910B): msSanitizer's model, kept as it is. The read walks the im2col matrix laid over
    the source (rows = output positions, columns = filter positions x channels, ``bitSize`` bytes per element as
    msSanitizer counts them) and keeps the rows and columns its window test passes; the write is mStep/16 fractals
    by kStep/(32 bytes of elements) repeats at ``dst + outputMPos`` fractals. Records with an unknown type, a zero
    dilation or stride, or a channel count the hardware refuses are dropped, as msSanitizer drops them; mode-1
    windows with gaps (step < stride) are not modelled (their reads are dropped and counted)."""
    i64 = lambda name: r[name].astype(np.int64)  # noqa: E731
    channel = i64("fmap_c")
    bits, pipe, valid = _img2col_checks(r, channel, context, "LOAD_3D_V2")
    rows_h = _positions(i64("fmap_h"), i64("pad_top"), i64("pad_bottom"), i64("filter_h") * i64("dilation_h"),
                        i64("filter_h_stride"))  # fmt: skip
    rows_w = _positions(i64("fmap_w"), i64("pad_left"), i64("pad_right"), i64("filter_w") * i64("dilation_w"),
                        i64("filter_w_stride"))  # fmt: skip
    zero_stride = ((r["filter_h_stride"] == 0) & (rows_h > 0)) | ((r["filter_w_stride"] == 0) & (rows_w > 0))
    drop(context, "LOAD_3D_V2 records dropped: filter stride 0", int((valid & zero_stride).sum()))
    valid &= ~zero_stride & (pipe != NO_PIPE)
    n_pos = rows_h * rows_w
    k_total = i64("filter_h") * i64("filter_w") * channel
    mode1 = r["matrix_mode"] != 0
    bits_safe = np.maximum(bits, 1)
    m_stride = i64("rpt_stride") * 16
    k_stride = i64("rpt_stride") * (256 // bits_safe)
    zero_rpt = mode1 & (i64("rpt_stride") == 0) & (n_pos > 0) & (k_total > 0)
    drop(context, "LOAD_3D_V2 records dropped: mode-1 repeat stride 0", int((valid & zero_rpt).sum()))
    valid &= ~zero_rpt
    m_intervals = _intervals(mode1, i64("m_pos"), i64("m_step"), m_stride, i64("rpt_times"), n_pos)
    k_intervals = _intervals(mode1, i64("k_pos"), i64("k_step"), k_stride, i64("rpt_times"), k_total)
    gapped = m_intervals[2] | k_intervals[2]
    drop(context, "LOAD_3D_V2 reads not converted: mode-1 windows with gaps", int((valid & gapped).sum()))
    read_ok = valid & ~gapped
    src_space = _space(r["src_mem"], read_ok)
    src = r["src"].astype(np.uint64)
    for m_lo, m_hi in m_intervals[:2]:
        for k_lo, k_hi in k_intervals[:2]:
            rows = np.maximum(m_hi - m_lo, 0)
            run = np.maximum(k_hi - k_lo, 0) * bits
            stride = k_total * bits
            full = (k_lo == 0) & (k_hi == k_total)  # whole rows: one contiguous run
            grained = _in_grains(run, stride)
            fits = ~full & (grained["block_num"] <= 0xFFFF) & (grained["repeat_stride"] <= 0xFFFF)
            address = src + ((m_lo * k_total + k_lo) * bits).astype(np.uint64)
            plan.add(EventKind.READ, src_space, address, pipe=pipe, block_size=run * rows, count=full)
            plan.add(EventKind.READ, src_space, address, pipe=pipe, repeat=rows, count=fits, **grained)
            plan.add(
                EventKind.READ,
                src_space,
                address,
                pipe=pipe,
                block_size=run,
                count=np.where(~full & ~fits, rows, 0),
                step=stride,
            )
    elements = 256 // bits_safe  # elements in 32 bytes
    transpose = r["transpose"] != 0
    m_src = np.where(transpose, i64("k_step"), i64("m_step"))
    k_src = np.where(transpose, i64("m_step"), i64("k_step"))
    plan.add(
        EventKind.WRITE,
        _space(r["dst_mem"], valid),
        r["dst"].astype(np.uint64) + i64("output_m_pos").astype(np.uint64) * np.uint64(FRACTAL),
        pipe=pipe,
        block_size=FRACTAL,
        block_num=(m_src + 15) // 16 & 0xFFFF,
        repeat=-(-k_src // elements) & 0xFFFF,
        repeat_stride=r["dst_stride"],
    )


def _covered(size, before, after, window, stride, dilation):
    """The feature-map rows (or columns) a LOAD_3D window walk touches: window starts from -before while
    < size + after, by ``stride``, each touching ``window`` taps ``dilation`` apart; clipped to [0, size).
    Returns (lo, hi) and which records touch a set with holes (not modelled)."""
    starts = np.where(size + after + before > 0, -(-(size + after + before) // np.maximum(stride, 1)), 0)
    first = -before
    last = first + (starts - 1) * stride + (window - 1) * dilation
    one = (starts == 1) | (window == 1)
    contiguous = (
        ((stride == 1) & ((starts >= dilation) | (window == 1)))
        | ((dilation == 1) & ((stride <= window) | (starts == 1)))
        | (one & ((dilation == 1) | (window == 1)) & ((stride == 1) | (starts == 1)))
    )
    empty = (starts == 0) | (window == 0)
    lo = np.clip(first, 0, size)
    hi = np.where(empty, lo, np.clip(last + 1, lo, size))
    return lo, hi, ~empty & ~contiguous


@plans(RecordType.LOAD_3D, dtype=LOAD_3D_DTYPE)
def convert_load_3d(plan: Plan, r: np.ndarray, context: BlockContext, record_type: int) -> None:
    """LOAD_3D (img2col, 910A/310P): the 32-byte feature-map blocks every window tap reaches (channel groups of
    256 bits x reached rows x reached columns), then the whole output matrix (kStep x mStep x repeats elements)
    written at ``dst``. Validity as for LOAD_3D_V2; a repeat too short for its step drops the write (msSanitizer
    logs an error); walks whose reached rows or columns have holes (large strides with dilation) are not
    modelled (dropped and counted)."""
    i64 = lambda name: r[name].astype(np.int64)  # noqa: E731
    channel = i64("fmap_c")
    bits, pipe, valid = _img2col_checks(r, channel, context, "LOAD_3D")
    width, height = i64("fmap_w"), i64("fmap_h")
    h_lo, h_hi, h_holes = _covered(height, i64("pad_top"), i64("pad_bottom"), i64("filter_h"),
                                   i64("filter_h_stride"), i64("dilation_h"))  # fmt: skip
    w_lo, w_hi, w_holes = _covered(width, i64("pad_left"), i64("pad_right"), i64("filter_w"),
                                   i64("filter_w_stride"), i64("dilation_w"))  # fmt: skip
    zero_stride = ((r["filter_h_stride"] == 0) & (height + i64("pad_bottom") + i64("pad_top") > 0)) | (
        (r["filter_w_stride"] == 0) & (width + i64("pad_right") + i64("pad_left") > 0)
    )
    drop(context, "LOAD_3D records dropped: filter stride 0", int((valid & zero_stride).sum()))
    valid &= ~zero_stride & (pipe != NO_PIPE)
    holes = valid & (h_holes | w_holes)
    drop(context, "LOAD_3D reads not converted: window walks that leave holes", int(holes.sum()))
    groups = (channel * bits + 255) // 256
    plane = width * height * 32
    rows = np.maximum(h_hi - h_lo, 0)
    run = np.maximum(w_hi - w_lo, 0) * 32
    full_rows = (w_lo == 0) & (w_hi == width)
    start = r["src"].astype(np.uint64) + ((h_lo * width + w_lo) * 32).astype(np.uint64)
    read_space = _space(r["src_mem"], valid & ~holes)
    # Whole rows: one run per channel group, the groups a plane apart.
    plan.add(
        EventKind.READ,
        read_space,
        start,
        pipe=pipe,
        repeat=groups,
        count=full_rows,
        **_in_grains(rows * width * 32, plane),
    )
    # Part of each row: per channel group, ``rows`` runs a row apart.
    plan.add(
        EventKind.READ,
        read_space,
        start,
        pipe=pipe,
        repeat=rows,
        count=np.where(full_rows, 0, groups),
        step=plane,
        **_in_grains(run, width * 32),
    )
    rpt = i64("rpt_times")
    short = (rpt > 1) & (
        ((r["rpt_mode"] > 0) & (256 // np.maximum(bits, 1) * i64("rpt_stride") < i64("k_step")))
        | ((r["rpt_mode"] == 0) & (16 * i64("rpt_stride") < i64("m_step")))
    )
    drop(context, "LOAD_3D writes dropped: repeat stride shorter than the step", int((valid & short).sum()))
    plan.add(
        EventKind.WRITE,
        _space(r["dst_mem"], valid & ~short),
        r["dst"],
        pipe=pipe,
        block_size=i64("k_step") * i64("m_step") * rpt * bits // 8,
    )
