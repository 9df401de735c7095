"""Data-move records -> a read of the source and a write of the destination (reference §1.7).

The pipe of a move follows from its (source, destination) memory kinds, msSanitizer's ``QueryPipeType``; a pair
with no pipe is dropped, as msSanitizer drops it (with an error log), and counted as a problem of the kernel.
"""

from __future__ import annotations

import numpy as np

from sanitizerd.compat.convert.base import (
    BlockContext,
    converts,
    drop,
    in_order,
    interleave,
    loops,
    patterns,
    record_dtype,
    runs,
    subset,
)
from sanitizerd.compat.record_types import MEMTYPE_TO_SPACE, NO_SPACE, MemType, PipeType, RecordType
from sanitizerd.protocol.records import EventKind, Space

BLOCK = 32  # msSanitizer's MOV_LOCAL_BLOCK_SIZE: bursts and gaps count 32-byte blocks
NO_PIPE = 255

# (src MemType, dst MemType) -> pipe; every other pair has none.
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


DMA_MOV = record_dtype(
    64,
    16,
    {
        "dst": ("<u8", 0),
        "src": ("<u8", 8),
        "n_burst": ("<u2", 48),
        "len_burst": ("<u2", 50),
        "src_stride": ("<u2", 52),
        "dst_stride": ("<u2", 54),
        "dst_mem": ("u1", 56),
        "src_mem": ("u1", 57),
        "pad_mode": ("u1", 58),
        "byte_mode": ("u1", 59),
    },
)


@converts(RecordType.DMA_MOV, dtype=DMA_MOV)
def dma_mov(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    """Bursts of 32-byte blocks; byte mode (bytes, source read rounded up to 32); pad modes 1-8."""
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
            reads = patterns(EventKind.READ, MEMTYPE_TO_SPACE[r["src_mem"]], r["src"], BLOCK, r["len_burst"],
                             r["n_burst"], read_stride, r, s, context, pipe=pipe)  # fmt: skip
            writes = patterns(EventKind.WRITE, MEMTYPE_TO_SPACE[r["dst_mem"]], r["dst"], BLOCK, r["len_burst"],
                              r["n_burst"], write_stride, r, s, context, pipe=pipe)  # fmt: skip
            return interleave(reads, writes)
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
    return in_order(len(r), reads, writes)


MOV_ALIGN = record_dtype(
    72,
    16,
    {
        "dst": ("<u8", 0),
        "src": ("<u8", 8),
        "src_gap": ("<u4", 48),
        "dst_gap": ("<u4", 52),
        "len_burst": ("<u4", 56),
        "n_burst": ("<u2", 60),
        "dst_mem": ("u1", 62),
        "src_mem": ("u1", 63),
        "data_type": ("u1", 64),
        "left_pad": ("u1", 65),
        "right_pad": ("u1", 66),
    },
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
    return in_order(len(r), reads, writes)


MOV_L1_UB = record_dtype(
    64,
    16,
    {
        "dst": ("<u8", 0),
        "src": ("<u8", 8),
        "n_burst": ("<u2", 48),
        "len_burst": ("<u2", 50),
        "src_gap": ("<u2", 52),
        "dst_gap": ("<u2", 54),
        "dst_mem": ("u1", 56),
        "src_mem": ("u1", 57),
    },
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
    return in_order(len(r), reads, writes)


MOV_BT = record_dtype(
    64,
    16,
    {
        "dst": ("<u8", 0),
        "src": ("<u8", 8),
        "src_gap": ("<u2", 48),
        "dst_gap": ("<u2", 50),
        "len_burst": ("<u2", 52),
        "n_burst": ("<u2", 54),
        "conv_control": ("<u2", 56),
        "dst_mem": ("u1", 58),
        "src_mem": ("u1", 59),
    },
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


MOV_CBUF_BT = record_dtype(
    64,
    0,
    {
        "dst": ("<u8", 32),
        "src": ("<u8", 40),
        "n_burst": ("<u2", 48),
        "len_burst": ("<u2", 50),
        "src_gap": ("<u2", 52),
        "dst_gap": ("<u2", 54),
        "data_type": ("u1", 56),
        "cvt_enable": ("u1", 57),
    },
)
# DetailedDataType values the checks name.
DT_B16, DT_S32, DT_F16, DT_FLOAT = 9, 16, 12, 18


@converts(RecordType.MOV_CBUF_TO_BT, dtype=MOV_CBUF_BT)
def mov_cbuf_to_bt(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    """L1 -> bias table on MTE1. 32-bit data needs an even lenBurst and no conversion, and dstGap must be even
    (msSanitizer drops the record otherwise); 16-bit data takes twice the blocks in the table."""
    wide = np.isin(records["data_type"], (DT_FLOAT, DT_S32))
    bad = (wide & ((records["len_burst"] % 2 != 0) | (records["cvt_enable"] != 0))) | (records["dst_gap"] % 2 != 0)
    if bad.any():
        drop(context, "MOV_CBUF_TO_BT records dropped: lenBurst, dstGap or conversion not allowed", int(bad.sum()))
    r, s = subset(records, serials, ~bad)
    length = r["len_burst"].astype(np.int64)
    n_burst = r["n_burst"].astype(np.int64)
    double = np.isin(r["data_type"], (DT_F16, DT_B16))
    written = np.where(double, length * 2, length)
    pipe = PipeType.PIPE_MTE1
    reads = runs(EventKind.READ, Space.L1, r["src"], length * BLOCK, n_burst, (length + r["src_gap"]) * BLOCK, r, s,
                 context, pipe=pipe)  # fmt: skip
    writes = runs(EventKind.WRITE, Space.BT, r["dst"], written * BLOCK, n_burst, (written + r["dst_gap"]) * BLOCK,
                  r, s, context, pipe=pipe, align=64)  # fmt: skip
    return in_order(len(r), reads, writes)


MOV_CBUF_FB = record_dtype(
    64,
    0,
    {
        "dst": ("<u8", 32),
        "src": ("<u8", 40),
        "n_burst": ("<u2", 48),
        "len_burst": ("<u2", 50),
        "src_stride": ("<u2", 52),
        "dst_stride": ("<u2", 54),
        "dst_mem_block": ("u1", 56),
    },
)
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
    return in_order(len(r), reads, writes)


ND2NZ = record_dtype(
    72,
    16,
    {
        "dst": ("<u8", 0),
        "src": ("<u8", 8),
        "nd_num": ("<u2", 48),
        "n_value": ("<u2", 50),
        "d_value": ("<u2", 52),
        "src_nd_matrix_stride": ("<u2", 54),
        "src_d_value": ("<u2", 56),
        "dst_nz_c0_stride": ("<u2", 58),
        "dst_nz_n_stride": ("<u2", 60),
        "dst_nz_matrix_stride": ("<u2", 62),
        "src_mem": ("u1", 64),
        "dst_mem": ("u1", 65),
        "data_type": ("u1", 66),
    },
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
    i, nd = loops(r["nd_num"])
    ri, rs = subset(r, s, i)
    reads = patterns(
        EventKind.READ, MEMTYPE_TO_SPACE[ri["src_mem"]],
        ri["src"] + (ri["src_nd_matrix_stride"].astype(np.int64) * size[i] * nd).astype(np.uint64), size[i],
        ri["d_value"], ri["n_value"], ri["src_d_value"], ri, rs, context, pipe=pipe[i],
    )  # fmt: skip
    j, column = loops(columns)
    wj, ws = subset(r, s, j)
    writes = patterns(
        EventKind.WRITE, MEMTYPE_TO_SPACE[wj["dst_mem"]],
        wj["dst"] + (C0 * wj["dst_nz_c0_stride"].astype(np.int64) * column).astype(np.uint64), C0, wj["n_value"],
        wj["nd_num"], wj["dst_nz_matrix_stride"].astype(np.int64) * size[j] // C0, wj, ws, context, pipe=pipe[j],
        block_stride=wj["dst_nz_n_stride"],
    )  # fmt: skip
    return in_order(len(r), reads, writes)
