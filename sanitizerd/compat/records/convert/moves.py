"""Data-move records -> a read of the source and a write of the destination (reference §1.7).

The pipe of a move follows from its (source, destination) memory kinds, msSanitizer's ``QueryPipeType``; a pair
with no pipe is dropped, as msSanitizer drops it (with an error log), and counted as a problem of the kernel.
"""

from __future__ import annotations

import numpy as np

from sanitizerd.compat.records.convert import base as convert_base
from sanitizerd.compat.records.convert.base import (
    MAX_LOOP,
    BlockContext,
    by_serial,
    cat,
    converts,
    detailed_types,
    drop,
    in_order,
    loops,
    patterns,
    payload_dtype,
    record_dtype,
    runs,
    subset,
    sync_events,
)
from sanitizerd.compat.records.types import (
    MEMTYPE_TO_SPACE,
    NO_PIPE,
    NO_SPACE,
    PIPE_OF_PAIR,
    DetailedDataType,
    MemType,
    PipeType,
    RecordType,
)
from sanitizerd_protocol.records import EVENT_DTYPE, EventKind, Space

BLOCK = 32  # msSanitizer's MOV_LOCAL_BLOCK_SIZE: bursts and gaps count 32-byte blocks

# Pad modes 1-5 widen the source (each 32-byte destination block holds 32/scale source bytes); 6-8 narrow it.
PAD_SCALE = np.array([1, 32, 16, 8, 4, 2, 8, 4, 2] + [1] * 247, dtype=np.int64)


def with_pipe(
    record_type: int, records: np.ndarray, src: np.ndarray, dst: np.ndarray, context: BlockContext
) -> tuple[np.ndarray, np.ndarray]:
    """The records whose (src, dst) pair has a pipe (and whose kinds are spaces), and those pipes; the rest are
    counted as dropped."""
    pipe = PIPE_OF_PAIR[src, dst]
    keep = (pipe != NO_PIPE) & (MEMTYPE_TO_SPACE[src] != NO_SPACE) & (MEMTYPE_TO_SPACE[dst] != NO_SPACE)
    if not keep.all():
        name = RecordType(record_type).name
        drop(context, f"{name} records dropped: no pipe moves data between their memory kinds", int((~keep).sum()))
    return np.flatnonzero(keep), pipe[keep]


DMA_MOV = payload_dtype(
    "DmaMovRecord", "dst src nBurst lenBurst srcStride dstStride dstMemType=dst_mem srcMemType=src_mem padMode byteMode"
)


_DMA_MEMBERS = ("dst", "src", "n_burst", "len_burst", "src_stride", "dst_stride", "dst_mem", "src_mem", "pad_mode",
                "byte_mode", "pc", "block_id")  # fmt: skip
_DMA_OFFSETS = np.array([DMA_MOV.fields[name][1] for name in _DMA_MEMBERS], dtype=np.int64)
_PIPES = np.ascontiguousarray(PIPE_OF_PAIR, dtype=np.uint8)
_SPACES = np.ascontiguousarray(MEMTYPE_TO_SPACE, dtype=np.uint8)
assert _PIPES.shape == (256, 256) and _SPACES.shape == (256,) and NO_PIPE == NO_SPACE == 0xFF  # what the C takes
assert [DMA_MOV.fields[name][0].str for name in _DMA_MEMBERS] == ["<u8"] * 2 + ["<u2"] * 4 + ["|u1"] * 4 + [
    "<u8",
    "<u2",
]


def dma_mov_plan(record_type: int, dtype: np.dtype, context: BlockContext) -> convert_base.DirectPlan | None:
    """``dma_mov_compiled``'s constants and members as a plan (``_records.direct``); None for records of a
    release whose DmaMovRecord is not ``DMA_MOV`` (numpy's ``dma_mov`` converts those)."""
    if dtype != DMA_MOV:
        return None
    common = dict(block_size=BLOCK, block_stride=1, block_type=context.block_type)
    kinds = (EventKind.READ, EventKind.WRITE)
    constants = np.stack([convert_base.constant_words(kind=kind, **common) for kind in kinds])
    return convert_base.DirectPlan(convert_base.DIRECT_DMA_MOV, DMA_MOV.itemsize, constants, _DMA_OFFSETS)


def dma_mov_compiled(records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray | None:
    """``dma_mov``'s usual case (no pad or byte mode, every pair with a pipe and spaces, strides within 16 bits)
    in one compiled pass (``_records.dma_mov``); None where it is not built or any record is not so (numpy's
    ``dma_mov`` below is the reference and converts those batches)."""
    if convert_base.compiled is None or not len(records):
        return None
    raw, words = convert_base.record_bytes(records, DMA_MOV), convert_base.serial_words(serials)
    if raw is None or words is None or words.size != len(records):
        return None
    plan = dma_mov_plan(RecordType.DMA_MOV, DMA_MOV, context)
    assert plan is not None
    out = np.empty((2 * len(records), EVENT_DTYPE.itemsize // 8), dtype=np.uint64)
    read, write = plan.constants
    usual = convert_base.compiled.dma_mov(out, raw, DMA_MOV.itemsize, words, _DMA_OFFSETS, _PIPES, _SPACES, read, write)
    return out.view(EVENT_DTYPE).reshape(-1) if usual else None


@converts(RecordType.DMA_MOV, dtype=DMA_MOV)
def dma_mov(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    """Bursts of 32-byte blocks; byte mode (bytes, source read rounded up to 32); pad modes 1-8."""
    events = dma_mov_compiled(records, serials, context)
    if events is not None:
        return events
    pad = records["pad_mode"].astype(np.int64)
    bad_pad = (pad > 8) & (records["byte_mode"] == 0)
    if bad_pad.any():  # msSanitizer makes no event for an unknown pad mode
        drop(context, "DMA_MOV records dropped: unknown pad mode", int(bad_pad.sum()))
    rows, pipe = with_pipe(record_type, records, records["src_mem"], records["dst_mem"], context)
    keep = ~bad_pad[rows]
    rows, pipe = rows[keep], pipe[keep]
    r, s = subset(records, serials, rows)
    if not (r["byte_mode"].any() or r["pad_mode"].any()):  # the usual case: bursts of 32-byte blocks
        length = r["len_burst"].astype(np.int64)
        read_stride = length + r["src_stride"]
        write_stride = length + r["dst_stride"]
        if len(r) and max(int(read_stride.max()), int(write_stride.max())) <= 0xFFFF:
            # Each record's read then its write, built in place (no interleaving copy: DMA_MOV is most records).
            both = np.empty((len(r), 2, EVENT_DTYPE.itemsize // 8), dtype=np.uint64)
            patterns(EventKind.READ, MEMTYPE_TO_SPACE[r["src_mem"]], r["src"], BLOCK, r["len_burst"],
                     r["n_burst"], read_stride, r, s, context, pipe=pipe, out=both[:, 0])  # fmt: skip
            patterns(EventKind.WRITE, MEMTYPE_TO_SPACE[r["dst_mem"]], r["dst"], BLOCK, r["len_burst"],
                     r["n_burst"], write_stride, r, s, context, pipe=pipe, out=both[:, 1])  # fmt: skip
            return both.view(EVENT_DTYPE).reshape(-1)
    n_burst = r["n_burst"].astype(np.int64)
    length = r["len_burst"].astype(np.int64)
    src_gap = r["src_stride"].astype(np.int64) * BLOCK
    dst_gap = r["dst_stride"].astype(np.int64) * BLOCK
    byte = r["byte_mode"] != 0
    pad = r["pad_mode"].astype(np.int64)
    widen = ~byte & (pad >= 1) & (pad <= 5)
    narrow = ~byte & (pad >= 6)
    scale = PAD_SCALE[pad]
    squeezed = n_burst * BLOCK // scale  # the contiguous side of a pad-mode move
    # Source: runs, repeat, stride (bytes).
    read_run = np.where(byte, -(-length // BLOCK) * BLOCK, length * BLOCK)
    read_stride = read_run + src_gap
    read_run = np.where(widen, squeezed, np.where(narrow, BLOCK, read_run))
    read_rep = np.where(widen, 1, n_burst)
    read_stride = np.where(widen, 0, np.where(narrow, BLOCK + src_gap, read_stride))
    # Destination.
    write_run = np.where(byte, length, length * BLOCK)
    write_stride = write_run + dst_gap
    write_run = np.where(narrow, squeezed, np.where(widen, BLOCK, write_run))
    write_rep = np.where(narrow, 1, n_burst)
    write_stride = np.where(narrow, 0, np.where(widen, BLOCK + dst_gap, write_stride))
    unit = np.where(byte, 1, BLOCK)
    reads = runs(
        EventKind.READ, MEMTYPE_TO_SPACE[r["src_mem"]], r["src"], read_run, read_rep, read_stride, r, s, context,
        pipe=pipe, unit=np.where(widen, squeezed, unit),
    )  # fmt: skip
    writes = runs(
        EventKind.WRITE, MEMTYPE_TO_SPACE[r["dst_mem"]], r["dst"], write_run, write_rep, write_stride, r, s, context,
        pipe=pipe, unit=np.where(narrow, squeezed, unit),
    )  # fmt: skip
    return in_order(s, reads, writes)


MOV_ALIGN = payload_dtype(
    "MovAlignRecord",
    "dst src srcGap dstGap lenBurst nBurst dstMemType=dst_mem srcMemType=src_mem dataType leftPaddingNum=left_pad"
    " rightPaddingNum=right_pad",
)
# DataType -> element bytes (B8=1, B16=2, B32=4; B4 and anything else count 1, as msSanitizer does).
DATA_SIZE = np.ones(256, dtype=np.int64)
DATA_SIZE[1:4] = (1, 2, 4)


def _ceil32(x: np.ndarray) -> np.ndarray:
    return -(-x // BLOCK) * BLOCK


@converts(RecordType.MOV_ALIGN, dtype=MOV_ALIGN)
def mov_align(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    """DataCopyPad: ``nBurst`` bursts of ``lenBurst`` bytes. Reads cover the data only (not UB's dummy tail); a UB
    write covers data + padding + dummy up to 32 bytes; gaps count bytes on GM and 32-byte blocks on UB."""
    empty = records["len_burst"] == 0
    if empty.any():
        drop(context, "MOV_ALIGN records dropped: lenBurst is 0", int(empty.sum()))
    rows, pipe = with_pipe(record_type, records, records["src_mem"], records["dst_mem"], context)
    keep = ~empty[rows]
    rows, pipe = rows[keep], pipe[keep]
    r, s = subset(records, serials, rows)
    length = r["len_burst"].astype(np.int64)
    n_burst = r["n_burst"].astype(np.int64)
    src_gm = r["src_mem"] == MemType.GM
    dst_gm = r["dst_mem"] == MemType.GM
    read_stride = np.where(src_gm, length + r["src_gap"], _ceil32(length) + r["src_gap"].astype(np.int64) * BLOCK)
    padding = (r["left_pad"].astype(np.int64) + r["right_pad"]) * DATA_SIZE[r["data_type"]]
    ub_write = _ceil32(length + padding)
    write_run = np.where(dst_gm, length, ub_write)
    write_stride = np.where(dst_gm, length + r["dst_gap"], ub_write + r["dst_gap"].astype(np.int64) * BLOCK)
    reads = runs(EventKind.READ, MEMTYPE_TO_SPACE[r["src_mem"]], r["src"], length, n_burst, read_stride, r, s,
                 context, pipe=pipe, unit=1)  # fmt: skip
    writes = runs(EventKind.WRITE, MEMTYPE_TO_SPACE[r["dst_mem"]], r["dst"], write_run, n_burst, write_stride, r, s,
                  context, pipe=pipe, unit=1)  # fmt: skip
    return in_order(s, reads, writes)


MOV_L1_UB = payload_dtype(
    "MovL1UBRecord", "dst src nBurst lenBurst srcGap dstGap dstMemType=dst_mem srcMemType=src_mem"
)


def _nonzero_len(record_type: int, records: np.ndarray, context: BlockContext) -> np.ndarray:
    empty = records["len_burst"] == 0
    if empty.any():
        drop(context, f"{RecordType(record_type).name} records dropped: lenBurst is 0", int(empty.sum()))
    return ~empty


def _bursts(
    record_type: int,
    records: np.ndarray,
    serials: np.ndarray,
    context: BlockContext,
    keep: np.ndarray,
    src_mem: np.ndarray,
    dst_mem: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Records kept by ``keep`` whose (src, dst) has a pipe: (records, serials, pipes, src spaces, dst spaces)."""
    rows, pipe = with_pipe(record_type, records, src_mem, dst_mem, context)
    ok = keep[rows]
    rows, pipe = rows[ok], pipe[ok]
    r, s = subset(records, serials, rows)
    return r, s, pipe, MEMTYPE_TO_SPACE[src_mem[rows]], MEMTYPE_TO_SPACE[dst_mem[rows]]


@converts(RecordType.MOV_L1_TO_UB, RecordType.MOV_UB_TO_L1, RecordType.MOV_UB_TO_UB, dtype=MOV_L1_UB)
def mov_l1_ub(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    """Bursts of 32-byte blocks between L1 and UB (or UB to UB); gaps in blocks."""
    keep = _nonzero_len(record_type, records, context)
    r, s, pipe, src_space, dst_space = _bursts(
        record_type, records, serials, context, keep, records["src_mem"], records["dst_mem"]
    )
    length = r["len_burst"].astype(np.int64)
    n_burst = r["n_burst"].astype(np.int64)
    reads = runs(EventKind.READ, src_space, r["src"], length * BLOCK, n_burst, (length + r["src_gap"]) * BLOCK, r,
                 s, context, pipe=pipe)  # fmt: skip
    writes = runs(EventKind.WRITE, dst_space, r["dst"], length * BLOCK, n_burst, (length + r["dst_gap"]) * BLOCK,
                  r, s, context, pipe=pipe)  # fmt: skip
    return in_order(s, reads, writes)


MOV_BT = payload_dtype(
    "MovBtRecord", "dst src srcGap dstGap lenBurst nBurst convControl dstMemType=dst_mem srcMemType=src_mem"
)


@converts(RecordType.MOV_BT, dtype=MOV_BT)
def mov_bt(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    """A copy into the bias table: msSanitizer models only its read (2 x lenBurst 32-byte blocks per burst); the
    bias table itself is not tracked."""
    keep = _nonzero_len(record_type, records, context)
    r, s, pipe, src_space, _ = _bursts(
        record_type, records, serials, context, keep, records["src_mem"], records["dst_mem"]
    )
    blocks = r["len_burst"].astype(np.int64) * 2
    return runs(EventKind.READ, src_space, r["src"], blocks * BLOCK, r["n_burst"], (blocks + r["src_gap"]) * BLOCK,
                r, s, context, pipe=pipe)  # fmt: skip


MOV_CBUF_BT = payload_dtype("MovL1BtRecord", "dst src nBurst lenBurst srcGap dstGap dataType cvtEnable")


@converts(RecordType.MOV_CBUF_TO_BT, dtype=MOV_CBUF_BT)
def mov_cbuf_to_bt(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    """L1 -> bias table on MTE1. 32-bit data needs an even lenBurst and no conversion, and dstGap must be even
    (msSanitizer drops the record otherwise); 16-bit data takes twice the blocks in the table."""
    wide = np.isin(detailed_types(records["data_type"], context), (DetailedDataType.FLOAT, DetailedDataType.S32))
    bad = (wide & ((records["len_burst"] % 2 != 0) | (records["cvt_enable"] != 0))) | (records["dst_gap"] % 2 != 0)
    if bad.any():
        drop(context, "MOV_CBUF_TO_BT records dropped: lenBurst, dstGap or conversion not allowed", int(bad.sum()))
    r, s = subset(records, serials, ~bad)
    length = r["len_burst"].astype(np.int64)
    n_burst = r["n_burst"].astype(np.int64)
    double = np.isin(detailed_types(r["data_type"], context), (DetailedDataType.F16, DetailedDataType.B16))
    written = np.where(double, length * 2, length)
    pipe = PipeType.PIPE_MTE1
    reads = runs(EventKind.READ, Space.L1, r["src"], length * BLOCK, n_burst, (length + r["src_gap"]) * BLOCK, r, s,
                 context, pipe=pipe)  # fmt: skip
    writes = runs(EventKind.WRITE, Space.BT, r["dst"], written * BLOCK, n_burst, (written + r["dst_gap"]) * BLOCK,
                  r, s, context, pipe=pipe, align=64)  # fmt: skip
    return in_order(s, reads, writes)


MOV_CBUF_FB = payload_dtype("MovL1FbRecord", "dst src nBurst lenBurst srcStride dstStride dstMemBlock")
FB_BURST = 64  # lenBurst counts 64-byte units; the source stride counts 32 bytes, the destination stride 64


@converts(RecordType.MOV_CBUF_TO_FB, dtype=MOV_CBUF_FB)
def mov_cbuf_to_fb(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    """L1 -> fixpipe buffer on PIPE_FIX: nBurst reads of lenBurst x 64 bytes, srcStride x 32 bytes apart (they
    may overlap), and the write of nBurst x lenBurst 64-byte blocks with dstStride (64-byte units) between bursts
    (msSanitizer's layout; dstMemBlock 0 needs even lenBurst and dstStride, 2 or more is invalid)."""
    block = records["dst_mem_block"]
    bad = ((block == 0) & ((records["len_burst"] % 2 != 0) | (records["dst_stride"] % 2 != 0))) | (block >= 2)
    if bad.any():
        drop(context, "MOV_CBUF_TO_FB records dropped: lenBurst, dstStride or dstMemBlock not allowed", int(bad.sum()))
    r, s = subset(records, serials, ~bad)
    run = r["len_burst"].astype(np.int64) * FB_BURST
    n_burst = r["n_burst"].astype(np.int64)
    pipe = PipeType.PIPE_FIX
    reads = runs(EventKind.READ, Space.L1, r["src"], run, n_burst, r["src_stride"].astype(np.int64) * BLOCK, r, s,
                 context, pipe=pipe)  # fmt: skip
    writes = runs(EventKind.WRITE, Space.FB, r["dst"], run, n_burst, r["dst_stride"].astype(np.int64) * FB_BURST, r,
                  s, context, pipe=pipe, unit=FB_BURST, align=np.where(r["dst_mem_block"] == 0, 128, 64))  # fmt: skip
    return in_order(s, reads, writes)


ND2NZ = payload_dtype(
    "DmaMovNd2nzRecord",
    "dst src ndNum nValue dValue srcNdMatrixStride srcDValue=src_d_value dstNzC0Stride dstNzNStride=dst_nz_n_stride"
    " dstNzMatrixStride srcMemType=src_mem dstMemType=dst_mem dataType",
)
C0 = 32  # bytes of one NZ fractal row


@converts(RecordType.DMA_MOV_ND2NZ, dtype=ND2NZ)
def dma_mov_nd2nz(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    """ND -> NZ layout (GM -> L1): per ND matrix a read of nValue rows of dValue elements (srcDValue elements
    apart); per 32-byte column of the result a write of nValue 32-byte rows (dstNzNStride apart) per matrix."""
    rows, pipe = with_pipe(record_type, records, records["src_mem"], records["dst_mem"], context)
    r, s = subset(records, serials, rows)
    size = DATA_SIZE[r["data_type"]]
    columns = -(-(r["d_value"].astype(np.int64) * size) // C0)
    i, nd = loops(r["nd_num"], context, s)
    ri, rs = subset(r, s, i)
    reads = patterns(
        EventKind.READ, MEMTYPE_TO_SPACE[ri["src_mem"]],
        ri["src"] + (ri["src_nd_matrix_stride"].astype(np.int64) * size[i] * nd).astype(np.uint64), size[i],
        ri["d_value"], ri["n_value"], ri["src_d_value"], ri, rs, context, pipe=pipe[i],
    )  # fmt: skip
    j, column = loops(columns, context, s)
    wj, ws = subset(r, s, j)
    writes = patterns(
        EventKind.WRITE, MEMTYPE_TO_SPACE[wj["dst_mem"]],
        wj["dst"] + (C0 * wj["dst_nz_c0_stride"].astype(np.int64) * column).astype(np.uint64), C0, wj["n_value"],
        wj["nd_num"], wj["dst_nz_matrix_stride"].astype(np.int64) * size[j] // C0, wj, ws, context, pipe=pipe[j],
        block_stride=wj["dst_nz_n_stride"],
    )  # fmt: skip
    return in_order(s, reads, writes)


MOV_ALIGN_V2 = payload_dtype(
    "MovAlignRecordV2",
    "dst src loop1DstStride loop2DstStride dstStride srcStride loop1SrcStride loop2SrcStride nBurst lenBurst"
    " loop1Size loop2Size dstMemType=dst_mem srcMemType=src_mem dataType leftPaddingNum=left_pad"
    " rightPaddingNum=right_pad",
)


def _mov_align_v2_valid(r: np.ndarray) -> np.ndarray:
    """msSanitizer's checks of DataCopyPad v2 (it drops what fails them, with an error log)."""
    from_gm = r["src_mem"] == MemType.GM
    padded = (r["left_pad"] > 0) | (r["right_pad"] > 0)
    loop_checked = (r["loop1_size"] > 0) & (r["loop2_size"] > 1)
    size = DATA_SIZE[r["data_type"]]
    ub_stride = np.where(from_gm, r["dst_stride"], r["src_stride"])
    loop_strides = np.where(
        from_gm, r["loop1_dst_stride"] | r["loop2_dst_stride"], r["loop1_src_stride"] | r["loop2_src_stride"]
    )
    compact = ub_stride == r["len_burst"]
    ok = r["len_burst"] != 0
    ok &= ~(from_gm & loop_checked & padded)
    bad_pad = padded & (
        (r["data_type"] < 1) | (r["data_type"] > 3) | (r["left_pad"] * size > 32) | (r["right_pad"] * size > 32)
    )
    ok &= ~(from_gm & bad_pad)
    ok &= compact | (ub_stride % 32 == 0)  # a non-compact UB side needs 32-byte strides
    ok &= ~(loop_checked & (loop_strides % 32 != 0))  # and so do the loops' UB strides
    return ok


@converts(RecordType.MOV_ALIGN_V2, dtype=MOV_ALIGN_V2)
def mov_align_v2(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    """DataCopyPad v2 (950): nBurst bursts of lenBurst bytes, strides in bytes, repeated over two loops (loop mode,
    both loop sizes > 1) or padded left/right (from GM); a compact UB side is one contiguous run."""
    valid = _mov_align_v2_valid(records)
    if not valid.all():
        drop(
            context, "MOV_ALIGN_V2 records dropped: lenBurst, stride, loop or padding not allowed", int((~valid).sum())
        )
    rows, pipe = with_pipe(record_type, records, records["src_mem"], records["dst_mem"], context)
    ok = valid[rows]
    rows, pipe = rows[ok], pipe[ok]
    r, s = subset(records, serials, rows)
    looped = (r["loop1_size"] > 1) & (r["loop2_size"] > 1)
    loop1 = np.where(looped, r["loop1_size"], 1).astype(np.int64)
    loop2 = np.where(looped, r["loop2_size"], 1).astype(np.int64)
    i, it = loops(loop1 * loop2, context, s, each=2)
    ri, si = subset(r, s, i)
    j = (it % loop1[i]).astype(np.uint64)
    k = (it // loop1[i]).astype(np.uint64)
    src = ri["src"] + k * ri["loop2_src_stride"] + j * ri["loop1_src_stride"]
    dst = ri["dst"] + k * ri["loop2_dst_stride"] + j * ri["loop1_dst_stride"]
    length = ri["len_burst"].astype(np.int64)
    n_burst = ri["n_burst"].astype(np.int64)
    # Strides are 40-bit byte counts; more than fits an event's pattern becomes one event per burst (runs()).
    src_stride = np.minimum(ri["src_stride"], 1 << 48).astype(np.int64)
    dst_stride = np.minimum(ri["dst_stride"], 1 << 48).astype(np.int64)
    reads = runs(EventKind.READ, MEMTYPE_TO_SPACE[ri["src_mem"]], src, length, n_burst, src_stride, ri, si, context,
                 pipe=pipe[i], unit=1)  # fmt: skip
    from_gm = ri["src_mem"] == MemType.GM
    padding = np.where(
        from_gm & ~looped[i], (ri["left_pad"].astype(np.int64) + ri["right_pad"]) * DATA_SIZE[ri["data_type"]], 0
    )
    compact = from_gm & (ri["dst_stride"] == ri["len_burst"])
    run = np.where(from_gm, _ceil32(padding + length), length)
    run = np.where(compact, _ceil32((padding + length) * n_burst), run)
    writes = runs(EventKind.WRITE, MEMTYPE_TO_SPACE[ri["dst_mem"]], dst, run, np.where(compact, 1, n_burst),
                  np.where(compact, 1, dst_stride), ri, si, context, pipe=pipe[i], unit=1)  # fmt: skip
    return in_order(si, reads, writes)


CONV_RELU = payload_dtype(
    "DmaMovConvReluRecord",
    "dst src nBurst lenBurst srcStride dstStride crMode dstMemType=dst_mem srcMemType=src_mem srcDataType=src_type"
    " dstDataType=dst_type",
)
B16, B32 = 2, 3  # DataType
# ConvRelu modes by what they do to 16- and 32-bit sources (msSanitizer's tables).
SAME_16 = (0, 5, 6)  # NONE, NONE_RELU, F16_MUL
SAME_32 = (0, 5)  # NONE, NONE_RELU
TO_16 = (1, 2, 3, 7, 10, 11, 12, 13)  # F32toF16_*, S32toF16_*, DEQSCALE_*16
TO_8 = (8, 9)  # DEQSCALE_(V)DEQ8
HALF_32 = (1, 2)  # F32toF16_NONE / _RELU (depth-wise)


@converts(RecordType.DMA_MOV_CONV_RELU, dtype=CONV_RELU)
def dma_mov_conv_relu(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    """L0C <-> UB with conversion/ReLU (310P and older): bursts of 32-byte blocks (64 for 32-bit sources) with the
    source gap in 512-byte (1024) units; the written size follows the conversion."""
    rows, pipe = with_pipe(record_type, records, records["src_mem"], records["dst_mem"], context)
    r, s = subset(records, serials, rows)
    length = r["len_burst"].astype(np.int64)
    n_burst = r["n_burst"].astype(np.int64)
    wide = r["src_type"] == B32
    size = np.where(wide, 64, 32)
    read_stride = length + r["src_stride"].astype(np.int64) * 16  # 512 / 32 and 1024 / 64 blocks
    reads = runs(EventKind.READ, MEMTYPE_TO_SPACE[r["src_mem"]], r["src"], length * size, n_burst,
                 read_stride * size, r, s, context, pipe=pipe, unit=size)  # fmt: skip
    mode, gap = r["cr_mode"], r["dst_stride"].astype(np.int64)
    # Unmatched modes keep the read's layout (msSanitizer only warns).
    w_size, w_blocks, w_stride = size.copy(), length.copy(), read_stride.copy()
    narrow = (r["src_type"] == B16) & np.isin(mode, SAME_16)
    w_stride = np.where(narrow, length + gap, w_stride)
    same = wide & np.isin(mode, SAME_32)
    half = wide & np.isin(mode, TO_16)
    quarter = wide & np.isin(mode, TO_8)
    w_size = np.where(same | half, 32, np.where(quarter, 16, w_size))
    w_blocks = np.where(same, length * 2, w_blocks)
    w_stride = np.where(
        same, length * 2 + gap, np.where(half, length + gap, np.where(quarter, length + gap * 3, w_stride))
    )
    writes = runs(EventKind.WRITE, MEMTYPE_TO_SPACE[r["dst_mem"]], r["dst"], w_blocks * w_size, n_burst,
                  w_stride * w_size, r, s, context, pipe=pipe, unit=w_size)  # fmt: skip
    return in_order(s, reads, writes)


@converts(RecordType.DMA_MOV_DEPTH_WISE, dtype=CONV_RELU)
def dma_mov_depth_wise(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    """L0C -> UB depth-wise: one burst (others are dropped) read as lenBurst 512-byte blocks (1024 for 32-bit), and
    written as two halves: the first 8 channels at dst, the second at dst + half + dstStride x 32 bytes."""
    one = records["n_burst"] == 1
    if not one.all():
        drop(context, "DMA_MOV_DEPTH_WISE records dropped: nBurst is not 1", int((~one).sum()))
    rows, pipe = with_pipe(record_type, records, records["src_mem"], records["dst_mem"], context)
    keep = one[rows]
    rows, pipe = rows[keep], pipe[keep]
    r, s = subset(records, serials, rows)
    length = r["len_burst"].astype(np.int64)
    wide = r["src_type"] == B32
    size = np.where(wide, 1024, 512)
    reads = runs(EventKind.READ, MEMTYPE_TO_SPACE[r["src_mem"]], r["src"], length * size, 1, 0, r, s, context,
                 pipe=pipe, unit=size)  # fmt: skip
    mode = r["cr_mode"]
    narrow = r["src_type"] == B16
    half = np.where(narrow, length * 256, np.where(np.isin(mode, SAME_32), length * 512, length * 256))
    half = np.where(narrow | wide, half, 512)  # other source types keep the read's block size
    writable = ~((narrow & ~np.isin(mode, SAME_16)) | (wide & ~np.isin(mode, (*SAME_32, *HALF_32))))
    if not writable.all():  # msSanitizer keeps the read and drops the writes
        drop(context, "DMA_MOV_DEPTH_WISE writes dropped: ConvRelu mode does not match", int((~writable).sum()))
    w = np.flatnonzero(writable)
    rw, sw = subset(r, s, w)
    first = runs(EventKind.WRITE, MEMTYPE_TO_SPACE[rw["dst_mem"]], rw["dst"], half[w], 1, 0, rw, sw, context,
                 pipe=pipe[w], unit=half[w])  # fmt: skip
    second_at = rw["dst"] + (half[w] + rw["dst_stride"].astype(np.int64) * BLOCK).astype(np.uint64)
    second = runs(EventKind.WRITE, MEMTYPE_TO_SPACE[rw["dst_mem"]], second_at, half[w], 1, 0, rw, sw, context,
                  pipe=pipe[w], unit=half[w])  # fmt: skip
    return in_order(None, reads, first, second)


MOV_FP = payload_dtype(
    "MovFpRecord",
    "dst src dstStride dstNdStride srcStride nSize mSize ndNum srcNdStride srcNzC0Stride quantPreBits"
    " enUnitFlag=unit_flag int8ChannelMerge=int8_merge int4ChannelMerge=int4_merge channelSplit enNZ2ND=nz2nd"
    " enNZ2DN=nz2dn isC310=c310",
)
UNIT_FLAG_EVENT = 11  # msSanitizer's event id for the set/wait a unit flag stands for (apart from ids 0-7)
FRACTAL = 16


class _Fix:
    """The events of fixpipe records, built part by part (each part one event per selected record or loop)."""

    def __init__(self, records: np.ndarray, serials: np.ndarray, context: BlockContext, name: str) -> None:
        self.records, self.serials, self.context, self.name = records, serials, context, name
        self.parts: list[np.ndarray] = []
        self.too_big = 0

    def add(self, rows: np.ndarray, kind: int, space: int | np.ndarray, address: np.ndarray, block_size: np.ndarray,
            block_num: np.ndarray, block_stride: np.ndarray | int, repeat: np.ndarray,
            repeat_stride: np.ndarray) -> None:  # fmt: skip
        values = [np.broadcast_to(np.asarray(v, dtype=np.int64), rows.size)
                  for v in (block_num, block_stride, repeat, repeat_stride)]  # fmt: skip
        fits = np.ones(rows.size, dtype=bool)
        for v in values:
            fits &= (v >= 0) & (v <= 0xFFFF)
        self.too_big += int((~fits).sum())
        keep = np.flatnonzero(fits)
        r, s = subset(self.records, self.serials, rows[keep])
        pick = [v[keep] for v in values]
        self.parts.append(patterns(
            kind, space, np.broadcast_to(address, rows.size)[keep], np.broadcast_to(block_size, rows.size)[keep],
            pick[0], pick[2], pick[3], r, s, self.context, pipe=PipeType.PIPE_FIX, block_stride=pick[1],
        ))  # fmt: skip

    def done(self) -> np.ndarray:
        drop(self.context, f"{self.name} records dropped in part: a pattern count past 65535", self.too_big)
        return base_by_serial(self.parts)


def base_by_serial(parts: list[np.ndarray]) -> np.ndarray:
    return by_serial(cat(parts))


def _fixpipe(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    """MOV_FP (L0C -> GM) and FIX_L0C_TO_L1/UB (950) on PIPE_FIX: the L0C read per NZ fractal column (per ND matrix
    and a partial last column in NZ2ND/NZ2DN mode), the write by mode (NZ2ND/DN, channel split, int4/int8 channel
    merge, normal), and for a unit flag the set/wait FIX -> M msSanitizer adds."""
    name = RecordType(record_type).name
    nop = (records["m_size"] == 0) | (records["n_size"] == 0) | ((records["nz2nd"] != 0) & (records["nd_num"] == 0))
    if nop.any():
        drop(context, f"{name} records dropped: M, N or ND count is 0 (a no-op)", int(nop.sum()))
    r, s = subset(records, serials, ~nop)
    fix = _Fix(r, s, context, name)
    out_space = {RecordType.MOV_FP: Space.GM, RecordType.FIX_L0C_TO_L1: Space.L1}.get(record_type, Space.UB)
    a5 = record_type != RecordType.MOV_FP
    c0, nd_unit = (32, 32) if a5 else (64, 0)
    m = r["m_size"].astype(np.int64)
    n = r["n_size"].astype(np.int64)
    nd_count = r["nd_num"].astype(np.int64)
    dn = r["nz2dn"] != 0
    nz = (r["nz2nd"] != 0) | dn
    c310 = r["c310"] != 0
    nd_size = np.full(len(r), nd_unit) if a5 else np.where(c310, 64, 1024)
    src_stride = r["src_stride"].astype(np.int64)
    # Read of L0C.
    plain = np.flatnonzero(~nz)
    fix.add(plain, EventKind.READ, Space.L0C, r["src"][plain], c0, m[plain], 1, -(-n[plain] // FRACTAL),
            src_stride[plain])  # fmt: skip
    # Each matrix's L0C read lists at most M x its full columns blocks, its tail M rows, its write max(M, N) rows:
    # charged before the loop is expanded, so a record asking for hours of pattern work is refused unexpanded.
    pieces_each = m * (n // FRACTAL) + m + np.maximum(m, n)
    i, nd = loops(np.where(nz, nd_count, 0), context, s, each=3, pieces_each=pieces_each)
    base_at = r["src"][i] + (r["src_nd_stride"][i].astype(np.int64) * nd * nd_size[i]).astype(np.uint64)
    full = n[i] // FRACTAL
    fix.add(i, EventKind.READ, Space.L0C, base_at, c0, m[i], np.where(dn[i], r["src_nz_c0_stride"][i], 1), full,
            src_stride[i])  # fmt: skip
    part = n[i] % FRACTAL != 0
    j = i[part]
    tail_at = base_at[part] + (src_stride[j] * full[part] * c0).astype(np.uint64)
    tail_stride = np.where(dn[j], r["src_nz_c0_stride"][j].astype(np.int64) * FRACTAL, FRACTAL)
    fix.add(j, EventKind.READ, Space.L0C, tail_at, 4, n[j] % FRACTAL, 1, m[j], tail_stride)
    # Write.
    bits = r["quant_pre_bits"].astype(np.int64)
    size = np.where(bits == 4, 1, bits // 8)
    dst_stride = r["dst_stride"].astype(np.int64)
    k = i
    nz_num = np.where(dn[k], m[k], n[k])
    nz_at = r["dst"][k] + (r["dst_nd_stride"][k].astype(np.int64) * nd * bits[k] // 8).astype(np.uint64)
    fix.add(k, EventKind.WRITE, out_space, nz_at, size[k], np.where(bits[k] == 4, nz_num // 2, nz_num), 1,
            np.where(dn[k], n[k], m[k]), np.where(bits[k] == 4, dst_stride[k] // 2, dst_stride[k]))  # fmt: skip
    p = plain
    bsize = size[p] if a5 else np.where(c310[p], size[p], 32)
    columns = -(-n[p] // FRACTAL)
    split = r["channel_split"][p] != 0
    int4 = ~split & (r["int4_merge"][p] != 0)
    int8 = ~split & ~int4 & (r["int8_merge"][p] != 0)
    normal = ~split & ~int4 & ~int8
    cp = c310[p]
    block_num = np.select(
        [split, int4, int8, normal],
        [np.where(cp, m[p] * 8, m[p]), np.where(cp, m[p] * 32, m[p]), np.where(cp, m[p] * 32, m[p]),
         np.where(cp, m[p] * 16, m[p] * bits[p] // 8 // 2)],
    )  # fmt: skip
    repeat = np.select(
        [split, int4, int8, normal],
        [-(-n[p] // 8), np.where(cp, -(-n[p] // 64), columns // 4), columns // 2, columns],
    )
    stride = np.where(int4 & cp, dst_stride[p] // 2, dst_stride[p])
    fix.add(p, EventKind.WRITE, out_space, r["dst"][p], bsize, block_num, 1, repeat, stride)
    odd = int8 & (columns % 2 != 0)  # int8 merge of an odd column count: the last column goes out as it is
    q = p[odd]
    fix.add(q, EventKind.WRITE, out_space, r["dst"][q] + (stride[odd] * repeat[odd] * bsize[odd]).astype(np.uint64),
            np.where(cp[odd], bsize[odd], 16), np.where(cp[odd], m[q] * 16, m[q]), 1, 1, dst_stride[q] * 2)  # fmt: skip
    events = fix.done()
    unit = np.flatnonzero(r["unit_flag"] != 0)
    if unit.size:
        ur, us = subset(r, s, unit)
        syncs = [
            sync_events(kind, ur, us, context, pipe=PipeType.PIPE_FIX, dst_pipe=PipeType.PIPE_M,
                        event_id=UNIT_FLAG_EVENT)
            for kind in (EventKind.SET_FLAG, EventKind.WAIT_FLAG)
        ]  # fmt: skip
        events = base_by_serial([events, *syncs])
    return events


converts(RecordType.MOV_FP, RecordType.FIX_L0C_TO_L1, RecordType.FIX_L0C_TO_UB, dtype=MOV_FP)(_fixpipe)


ND2NZ_DAV = payload_dtype(
    "DmaMovNd2nzDavRecord",
    "dst src loop4SrcStride loop1SrcStride dValue nValue ndNum loop2DstStride loop3DstStride loop4DstStride smallC0"
    " srcMemType=src_mem dstMemType=dst_mem dataType",
)


@converts(RecordType.DMA_MOV_ND2NZ_D, RecordType.DMA_MOV_DN2NZ_D, dtype=ND2NZ_DAV)
def dma_mov_nd2nz_dav(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    """ND/DN -> NZ on 950: per ND matrix, one read per row (dValue elements for ND, nValue for DN,
    loop1SrcStride bytes apart); writes per 32-byte fractal column and matrix, rowNum rows loop2DstStride x 32
    bytes apart, or in small-C0 mode one run of 4-element rows per matrix (at msSanitizer's cumulative offsets)."""
    name = RecordType(record_type).name
    size = DATA_SIZE[records["data_type"]]
    bad = (records["loop1_src_stride"] % size.astype(np.uint64) != 0) | (
        (records["small_c0"] != 0) & (records["d_value"] > 4)
    )
    if bad.any():
        drop(context, f"{name} records dropped: loop1 stride or small-C0 D not allowed", int(bad.sum()))
    rows, pipe = with_pipe(record_type, records, records["src_mem"], records["dst_mem"], context)
    keep = ~bad[rows]
    rows, pipe = rows[keep], pipe[keep]
    r, s = subset(records, serials, rows)
    size = DATA_SIZE[r["data_type"]]
    nd_first = record_type == RecordType.DMA_MOV_ND2NZ_D
    n_value = r["n_value"].astype(np.int64)
    d_value = r["d_value"].astype(np.int64)
    row_count = n_value if nd_first else d_value
    row_bytes = (d_value if nd_first else n_value) * size
    i, h = loops(np.where(row_count > 0, r["nd_num"], 0), context, s)  # one read per row: no rows, no reads
    ri, si = subset(r, s, i)
    src = ri["src"] + h.astype(np.uint64) * ri["loop4_src_stride"]
    stride = np.minimum(ri["loop1_src_stride"], 1 << 48).astype(np.int64)
    reads = runs(EventKind.READ, MEMTYPE_TO_SPACE[ri["src_mem"]], src, row_bytes[i], row_count[i], stride, ri, si,
                 context, pipe=pipe[i], unit=np.maximum(row_bytes[i], 1))  # fmt: skip
    small = r["small_c0"] != 0
    # Small C0: rows of 4 elements, nValue rounded up to a whole 32 bytes, one run per matrix.
    w, h = loops(np.where(small, r["nd_num"], 0), context, s)
    rw, sw = subset(r, s, w)
    per_row = 4 * size[w]
    rounded = -(-n_value[w] // (C0 // per_row)) * (C0 // per_row)
    triangle = (h * (h + 1) // 2).astype(np.uint64)  # msSanitizer adds h x stride to the previous address
    small_at = rw["dst"] + triangle * rw["loop4_dst_stride"].astype(np.uint64) * np.uint64(C0)
    small_writes = runs(EventKind.WRITE, MEMTYPE_TO_SPACE[rw["dst_mem"]], small_at, rounded * per_row, 1, 0, rw, sw,
                        context, pipe=pipe[w], unit=per_row)  # fmt: skip
    # Default: per fractal column m and matrix h, rowNum 32-byte rows.
    matrices = np.where(small | (row_count == 0), 0, -(-(d_value * size) // C0))
    j, it = loops(matrices * r["nd_num"], context, s)
    nd = np.maximum(r["nd_num"][j].astype(np.int64), 1)
    column, matrix = it // nd, it % nd
    rj, sj = subset(r, s, j)
    at = rj["dst"] + ((column * rj["loop3_dst_stride"] + matrix * rj["loop4_dst_stride"]) * C0).astype(np.uint64)
    writes = runs(EventKind.WRITE, MEMTYPE_TO_SPACE[rj["dst_mem"]], at, C0, row_count[j],
                  rj["loop2_dst_stride"].astype(np.int64) * C0, rj, sj, context, pipe=pipe[j])  # fmt: skip
    return in_order(None, reads, small_writes, writes)


_ND_LOOP_FIELDS: dict[str, tuple[str, int]] = {}
for _k in range(5):
    _at = 48 + 24 * _k
    _ND_LOOP_FIELDS |= {
        f"src_stride{_k}": ("<u8", _at),
        f"dst_stride{_k}": ("<u4", _at + 8),
        f"size{_k}": ("<u4", _at + 12),
        f"left{_k}": ("u1", _at + 16),
        f"right{_k}": ("u1", _at + 17),
    }
ND_DMA_OUT_TO_UB = record_dtype(176, 16, {"dst": ("<u8", 0), "src": ("<u8", 8), **_ND_LOOP_FIELDS,
                                          "data_type": ("u1", 168)})  # fmt: skip
ADDRESS_LIMIT = np.uint64(1 << 40)


def _nd_out_valid(r: np.ndarray) -> np.ndarray:
    """msSanitizer's software constraints of nd_dma_mov_out_to_ub, in its own unsigned arithmetic (a loop of no
    element at all wraps its count, as the C++ does)."""
    with np.errstate(over="ignore"):
        increasing = np.ones(len(r), dtype=bool)
        for k in range(1, 5):
            increasing &= r[f"dst_stride{k}"] > r[f"dst_stride{k - 1}"]
        ok = (r["data_type"] >= 1) & (r["data_type"] <= 3)
        cur = np.zeros(len(r), dtype=np.uint64)
        stride = np.ones(len(r), dtype=np.uint64)
        for k in range(5):
            span = (r[f"left{k}"].astype(np.uint64) + r[f"size{k}"] + r[f"right{k}"]) - np.uint64(1)
            step = r[f"src_stride{k}"] if k < 2 else r[f"dst_stride{k}"].astype(np.uint64)
            cur = cur + span * step
            ok &= cur < ADDRESS_LIMIT
            dst = r[f"dst_stride{k}"].astype(np.uint64)
            ok &= ~(increasing & (dst < stride))
            stride = np.where(increasing, stride + span * dst, stride)
            cur = np.where(ok, cur, ADDRESS_LIMIT)  # once out, stays out
    return ok


@converts(RecordType.ND_DMA_OUT_TO_UB, dtype=ND_DMA_OUT_TO_UB)
def nd_dma_out_to_ub(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    """GM -> UB over five nested loops (950) on MTE2: every element read from GM (loop sizes, source strides in
    elements) and written to UB (with each loop's left/right padding elements, destination strides); the
    innermost loop is one strided pattern per combination of the outer four."""
    ok = _nd_out_valid(records)
    if not ok.all():
        drop(context, "ND_DMA_OUT_TO_UB records dropped: data type or loop strides not allowed", int((~ok).sum()))
    r, s = subset(records, serials, ok)
    size = DATA_SIZE[r["data_type"]]
    parts = []
    for kind, space, base, stride_of, padded in (
        (EventKind.READ, Space.GM, r["src"], "src_stride", False),
        (EventKind.WRITE, Space.UB, r["dst"], "dst_stride", True),
    ):
        counts = [r[f"size{k}"].astype(np.int64) + ((r[f"left{k}"].astype(np.int64) + r[f"right{k}"]) if padded else 0)
                  for k in range(5)]  # fmt: skip
        outer = counts[1] * counts[2] * counts[3] * counts[4]
        big = outer > MAX_LOOP
        if big.any():
            drop(context, "ND_DMA_OUT_TO_UB records dropped: more than 65536 loop combinations", int(big.sum()))
        outer = np.where(big | (counts[0] == 0), 0, outer)  # no innermost element: no event
        i, combo = loops(outer, context, s)
        address = base[i].copy()
        rest = combo
        for k in (1, 2, 3, 4):  # loop 1 runs fastest, loop 4 slowest (msSanitizer's recursion order)
            rest, index = np.divmod(rest, np.maximum(counts[k][i], 1))
            address = address + (
                index.astype(np.uint64) * r[f"{stride_of}{k}"][i].astype(np.uint64) * size[i].astype(np.uint64)
            )
        ri, si = subset(r, s, i)
        inner_stride = np.minimum(r[f"{stride_of}0"][i].astype(np.uint64), np.uint64(1 << 40)).astype(np.int64)
        parts.append(runs(kind, space, address, size[i], counts[0][i], inner_stride * size[i], ri, si, context,
                          pipe=PipeType.PIPE_MTE2, unit=size[i]))  # fmt: skip
    return in_order(None, *parts)


# Windows of DMA_MOV records convert straight from their words (slots.DirectPlans), as dma_mov_compiled does
convert_base.direct(dma_mov_plan, RecordType.DMA_MOV)
