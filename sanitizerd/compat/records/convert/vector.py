"""Vector (PIPE_V, UB) records -> events, with msSanitizer's mask semantics (reference §1.7).

Every operand becomes one pattern ``{addr, blockNum, blockSize, blockStride, repeat, repeatStride}``; the vector
mask then cuts it:

* MASK_COUNT: mask0 is an element count, split into full repeats, full blocks and a partial tail block (up to
  three events per operand). VCOPY (and VREDUCEV2's source) count per repeat instead: mask0 elements of every
  repeat, i.e. ``mask0 / elements-per-block`` blocks per repeat and a tail block in each repeat; VREDUCEV2's
  destination is written contiguously (``mask0 * repeat`` elements).
* MASK_NORM: only when blockNum == 8 and blockSize == 32 and dataBits >= 16 is the bit mask turned into "every
  element up to the last set bit" (counted per repeat); otherwise the mask is ignored.
* A block of type AICUBE never runs a masked vector operand: those events are dropped (msSanitizer does too).

Each record gives its events in msSanitizer's order: sources read, then the destination written (a ternary
destination and MEMCPY-style accesses are read then written).
"""

from __future__ import annotations

from functools import partial

import numpy as np

from sanitizerd.compat.records.convert import base
from sanitizerd.compat.records.convert.base import BlockContext, converts, drop, payload_dtype
from sanitizerd.compat.records.convert.plan import U16_MAX, Plan, explicit_align, plans
from sanitizerd.compat.records.types import DataType, RecordType
from sanitizerd_protocol.records import EVENT_DTYPE, BlockType, EventKind, Pipe, Space

READ, WRITE, MEMCPY = 0, 1, 2  # msSanitizer's AccessType
MASK_NORM, MASK_COUNT = 0, 1
ALL_ONES = np.uint64(0xFFFF_FFFF_FFFF_FFFF)
UB = int(Space.UB)
V = int(Pipe.V)

# Mask variants (which MaskCountProcess path msSanitizer takes for the operand).
GENERAL, BY_REPEAT, REDUCEV2 = 0, 1, 2

VEC_DUP_DTYPE = payload_dtype(
    "VecDupRecord", "dst vectorMask.mask0 vectorMask.mask1 dstBlockStride dstRepeatStride repeat dataBits maskMode"
)

UNARY_DTYPE = payload_dtype(
    "UnaryOpRecord",
    "dst src vectorMask.mask0 vectorMask.mask1 dstBlockSize srcBlockSize dstBlockStride srcBlockStride"
    " dstRepeatStride srcRepeatStride repeat dstBlockNum srcBlockNum dstDataBits srcDataBits maskMode",
)

VGATHER_DTYPE = payload_dtype(
    "VgatherRecord",
    "dst src vectorMask.mask0 vectorMask.mask1 dstBlockSize srcBlockSize offsetAddr dstRepeatStride dstBlockNum"
    " srcBlockNum dstAlignSize dstBlockStride dstRepeat dstDataBits maskMode",
)

ELEMENT_DTYPE = payload_dtype("ElementRecord", "addr blockSize blockNum alignSize dataBits accessType=access")

BINARY_DTYPE = payload_dtype(
    "BinaryOpRecord",
    "dst src0 src1 vectorMask.mask0 vectorMask.mask1 dstBlockStride src0BlockStride src1BlockStride dstRepeatStride"
    " src0RepeatStride src1RepeatStride dstBlockSize src0BlockSize src1BlockSize repeat dstBlockNum src0BlockNum"
    " src1BlockNum dstDataBits src0DataBits src1DataBits maskMode",
)

REGPROPCOOR_DTYPE = payload_dtype("VecRegPropCoordOpRecord", "dst src dataType regionRange repeat isExtract")

REDUCE_DTYPE = payload_dtype(
    "ReduceOpRecord",
    "dst src vectorMask.mask0 vectorMask.mask1 srcBlockStride dstRepeatStride srcRepeatStride dstRepeatLength"
    " dstAlignSize repeat dstBlockNum srcBlockNum dstBlockSize srcBlockSize dstDataBits srcDataBits"
    " dstDataBitsFactor maskMode",
)

REDUCEV2_DTYPE = payload_dtype(
    "ReduceV2Record",
    "dst src0 src1 vectorMask.mask0 vectorMask.mask1 compareMask.mask0=cmp_mask0 compareMask.mask1=cmp_mask1 repeat"
    " src0RepeatStride src1RepeatStride src0BlockStride dataBytes patternMode maskMode",
)

SCATTER_DTYPE = payload_dtype(
    "ScatterVnchwconvRecord",
    "dst0.l64=dst0_l dst0.h64=dst0_h dst1.l64=dst1_l dst1.h64=dst1_h src0.l64=src0_l src0.h64=src0_h"
    " src1.l64=src1_l src1.h64=src1_h dstStride srcStride repeat dstHighHalf srcHighHalf dataType",
)

VBS32_DTYPE = payload_dtype("Vbs32Record", "dst src0 src1 repeat dataType")

VMS4_DTYPE = payload_dtype(
    "Vms4v2RecordA5", "dst src:(4,)<u2 elementNum:(4,)<u2 repeat validMask isAllStored detailedDataType"
)

CMPMASK_DTYPE = payload_dtype("CmpMaskRecord", "addr size accessType=access")


def data_size(data_type: np.ndarray) -> np.ndarray:
    """Bytes per element of msSanitizer's DataType (B8 1, B16 2, B32 4; anything else counts as 1)."""
    data_type = np.asarray(data_type)
    return np.select([data_type == DataType.DATA_B16, data_type == DataType.DATA_B32], [2, 4], 1).astype(np.uint64)


def _u(x: np.ndarray | int) -> np.ndarray:
    return np.asarray(x).astype(np.uint64)


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a // b with 0 where b == 0 (the callers drop those)."""
    return np.floor_divide(a, np.maximum(b, 1)) * (b != 0)


def _bit_length(x: np.ndarray) -> np.ndarray:
    """Index of the highest set bit + 1 (0 for 0), exact for every u64 (halves go through float64 exactly)."""
    hi = (x >> np.uint64(32)).astype(np.float64)
    lo = (x & np.uint64(0xFFFF_FFFF)).astype(np.float64)
    return np.where(hi > 0, 32 + np.frexp(hi)[1], np.frexp(lo)[1]).astype(np.uint64)


def _at(value: np.ndarray | int, rows: np.ndarray) -> np.ndarray:
    """``value`` at ``rows`` as u64 (a scalar broadcasts)."""
    value = np.asarray(value)
    return (value if value.ndim == 0 else value[rows]).astype(np.uint64)


def _subset(value: np.ndarray | int, rows: np.ndarray) -> np.ndarray | int:
    value = np.asarray(value)
    return value if value.ndim == 0 else value[rows]


class _MaskRows:
    """The records of one mask branch of an operand (``rows``): the operand's pattern at those rows (u64), the
    elements of one block, and ``add``, a slot of the rows' access on UB by the vector pipe with the operand's
    alignment (every slot of a branch is one)."""

    def __init__(
        self,
        plan: Plan,
        rows: np.ndarray,
        access: np.ndarray,
        address: np.ndarray,
        pattern: tuple[np.ndarray | int, ...],
        data_bits: np.ndarray | int,
        align: np.ndarray | int,
    ) -> None:
        self.at = partial(_at, rows=rows)
        self.address = self.at(address)
        self.size, self.num, self.stride, self.rep, self.rstride = map(self.at, pattern)
        self.bits = self.at(data_bits)
        self.per_block = _div(self.size * np.uint64(8), self.bits)
        self.ok = self.per_block != 0
        self.add = partial(plan.add_access, access[rows], UB, rows=rows, pipe=V, align=_subset(align, rows))

    def repeats_of_blocks(self, address: np.ndarray, block_num: np.ndarray, repeat: np.ndarray) -> None:
        """A slot of ``repeat`` runs of ``block_num`` whole blocks at the operand's strides (none where either is 0)."""
        self.add(
            address,
            block_size=self.size,
            block_num=block_num,
            block_stride=self.stride,
            repeat=repeat,
            repeat_stride=self.rstride,
            count=self.ok & (block_num > 0) & (repeat > 0),
        )


def masked_operand(
    plan: Plan,
    access: int | np.ndarray,
    address: np.ndarray,
    block_num: np.ndarray | int,
    block_size: np.ndarray | int,
    block_stride: np.ndarray | int,
    repeat: np.ndarray | int,
    repeat_stride: np.ndarray | int,
    data_bits: np.ndarray | int,
    mask0: np.ndarray,
    mask1: np.ndarray,
    mask_mode: np.ndarray,
    *,
    aicube: bool,
    variant: int = GENERAL,
    enabled: np.ndarray | bool = True,
    align: np.ndarray | int = 0,
) -> None:
    """Slots for one vector operand through msSanitizer's MaskModeProcess (see the module docstring). The common
    cases (MASK_NORM as it is) cost a few comparisons per record; the cuts are computed only for the records
    that need them."""
    if aicube:
        return
    n = plan.n
    mask0 = np.asarray(mask0)
    mask1 = np.asarray(mask1)
    mask_mode = np.asarray(mask_mode)
    live = np.asarray(enabled) & (np.asarray(block_num) != 0) & (np.asarray(block_size) != 0)
    norm = live & (mask_mode == MASK_NORM) & (np.asarray(repeat) != 0)
    count_mode = live & (mask_mode != MASK_NORM) & (mask0 != 0) & (np.asarray(data_bits) != 0)

    # MASK_NORM: as it is, or (element-based ops with >= 16-bit data) every element up to the last set bit.
    full = (mask0 == ALL_ONES) & (mask1 == ALL_ONES)
    eligible = (np.asarray(block_num) == 8) & (np.asarray(block_size) == 32) & (np.asarray(data_bits) >= 16)
    as_is = norm & (full | ~eligible)
    common = dict(pipe=V, align=align)
    plan.add_access(
        access,
        UB,
        address,
        block_size=block_size,
        block_num=block_num,
        block_stride=block_stride,
        repeat=repeat,
        repeat_stride=repeat_stride,
        count=as_is,
        **common,
    )
    converted = norm & ~as_is
    access = np.broadcast_to(np.asarray(access), (n,))
    if variant == BY_REPEAT:
        by_count, continuous, general = count_mode, None, None
    elif variant == REDUCEV2:
        by_count, continuous, general = count_mode & (access == READ), count_mode & (access != READ), None
    else:
        by_count, continuous, general = None, None, count_mode

    # Per-repeat counting (VCOPY, VREDUCEV2 source, converted MASK_NORM): m elements of every repeat.
    rows = np.flatnonzero(converted if by_count is None else converted | by_count)
    pattern = (block_size, block_num, block_stride, repeat, repeat_stride)
    if rows.size:
        branch = _MaskRows(plan, rows, access, address, pattern, data_bits, align)
        size, stride, rstride, bits, rep = branch.size, branch.stride, branch.rstride, branch.bits, branch.rep
        ok, per_block, add = branch.ok, branch.per_block, branch.add
        m0 = branch.at(mask0)
        counted = np.asarray(by_count)[rows] if by_count is not None else np.zeros(rows.size, dtype=bool)
        m1 = branch.at(mask1)
        m = np.where(counted, m0, np.where(m1 != 0, 64 + _bit_length(m1), _bit_length(m0)))
        n_block = _div(m, per_block)
        branch.repeats_of_blocks(branch.address, n_block, rep)
        last = m - n_block * per_block
        tail_size = last * bits // np.uint64(8)
        tail_address = branch.address + n_block * stride * size
        span = rstride * size  # bytes from one repeat's tail to the next
        # The tails of all repeats as one pattern of g-byte blocks, g = gcd(tail, repeat distance), when the
        # counts fit the event's 16-bit fields; else one event per repeat (as msSanitizer makes them).
        grain = np.gcd(tail_size, span)
        tail_blocks = _div(tail_size, grain)
        compact_stride = _div(span, grain)
        compact = (grain != 0) & (tail_blocks <= U16_MAX) & (compact_stride <= U16_MAX)
        has_tail = ok & (last > 0)
        add(
            tail_address,
            block_size=grain,
            block_num=tail_blocks,
            repeat=rep,
            repeat_stride=compact_stride,
            count=has_tail & compact,
        )
        add(
            tail_address,
            block_size=tail_size,
            count=np.where(has_tail & ~compact, rep, 0),
            step=span,
        )

    # General MASK_COUNT: mask0 elements in all: full repeats, then full blocks, then a partial block.
    rows = np.flatnonzero(general) if general is not None else np.zeros(0, dtype=np.intp)
    if rows.size:
        branch = _MaskRows(plan, rows, access, address, pattern, data_bits, align)
        size, stride, bits, ok, per_block, add = (
            branch.size, branch.stride, branch.bits, branch.ok, branch.per_block, branch.add
        )  # fmt: skip
        m0 = branch.at(mask0)
        per_repeat = branch.num * per_block
        n_repeat = _div(m0, per_repeat)
        branch.repeats_of_blocks(branch.address, branch.num, n_repeat)
        rest = m0 - n_repeat * per_repeat
        last_blocks = _div(rest, per_block)
        rest_address = branch.address + n_repeat * branch.rstride * size
        add(
            rest_address,
            block_size=size,
            block_num=last_blocks,
            block_stride=stride,
            count=ok & (last_blocks > 0),
        )
        last_elements = rest - last_blocks * per_block
        add(
            rest_address + last_blocks * stride * size,
            block_size=last_elements * bits // np.uint64(8),
            count=ok & (last_elements > 0),
        )

    # VREDUCEV2 destination under MASK_COUNT: mask0 elements per repeat, written back to back.
    rows = np.flatnonzero(continuous) if continuous is not None else np.zeros(0, dtype=np.intp)
    if rows.size:
        at = partial(_at, rows=rows)
        plan.add_access(
            access[rows],
            UB,
            at(address),
            block_size=at(mask0) * at(data_bits) * at(repeat) // np.uint64(8),
            rows=rows,
            pipe=V,
            align=_subset(align, rows),
        )


def operand(r: np.ndarray, name: str) -> tuple[np.ndarray, ...]:
    """Operand ``name``'s address, block count, block size, block stride, repeat, repeat stride and data bits, as the
    records name them (``name``, ``name_block_num``, ...): ``masked_operand``'s arguments after the access."""
    return (
        r[name],
        r[f"{name}_block_num"],
        r[f"{name}_block_size"],
        r[f"{name}_block_stride"],
        r["repeat"],
        r[f"{name}_repeat_stride"],
        r[f"{name}_data_bits"],
    )


def pattern_fields(r: np.ndarray, name: str, *fields: str) -> dict[str, np.ndarray]:
    """Operand ``name``'s pattern ``fields`` (``block_size``, ``repeat``, ...) as the records name them
    (``name_block_size``, ...): ``Plan.add``'s keyword arguments."""
    return {field: r[f"{name}_{field}"] for field in fields}


def masks_of(r: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A record's vector mask and mask mode: ``masked_operand``'s mask arguments."""
    return r["mask0"], r["mask1"], r["mask_mode"]


def simd_align(context: BlockContext, data_bits: np.ndarray | int, record_type: int) -> np.ndarray | int:
    """msSanitizer's alignment for SIMD-range records checked by record type: on 310P the element width, else by
    address space (0)."""
    if context.chip.name != "310P" or not RecordType.SIMD_START < record_type < RecordType.SIMD_END:
        return 0
    return explicit_align(np.asarray(data_bits) // 8)


def _aicube(context: BlockContext) -> bool:
    return context.block_type == BlockType.AIC


@plans(RecordType.VEC_DUP, dtype=VEC_DUP_DTYPE)
def convert_vec_dup(plan: Plan, r: np.ndarray, context: BlockContext, record_type: int) -> None:
    """VEC_DUP: one destination of 8 x 32-byte blocks per repeat, masked."""
    masked_operand(
        plan,
        WRITE,
        r["dst"],
        8,
        32,
        r["dst_block_stride"],
        r["repeat"],
        r["dst_repeat_stride"],
        r["data_bits"],
        r["mask0"],
        r["mask1"],
        r["mask_mode"],
        aicube=_aicube(context),
    )


@plans(
    RecordType.UNARY_OP,
    RecordType.VCOPY_OP,
    RecordType.VREDUCEV2_UNARY,
    RecordType.VMRGSORT4_OP_C220,
    RecordType.VMRGSORT4_OP_M200,
    RecordType.VCONV_DST_S4_OP,
    RecordType.VCONV_SRC_S4_OP,
    dtype=UNARY_DTYPE,
)
def convert_unary(plan: Plan, r: np.ndarray, context: BlockContext, record_type: int) -> None:
    """UnaryOpRecord: the source read, then the destination written, both masked."""
    variant = {RecordType.VCOPY_OP: BY_REPEAT, RecordType.VREDUCEV2_UNARY: REDUCEV2}.get(record_type, GENERAL)
    common = dict(aicube=_aicube(context), variant=variant)
    # VMRGSORT4 alignment (msSanitizer's special rules): 910B reads need 8 bytes, writes 32; 310P's rule uses the
    # data width value itself.
    read_align: np.ndarray | int = simd_align(context, r["src_data_bits"], record_type)
    write_align: np.ndarray | int = simd_align(context, r["dst_data_bits"], record_type)
    if record_type == RecordType.VMRGSORT4_OP_C220:
        read_align, write_align = 8, 32
    elif record_type == RecordType.VMRGSORT4_OP_M200:
        read_align, write_align = r["src_data_bits"], r["dst_data_bits"]
    masks = masks_of(r)
    masked_operand(
        plan,
        READ,
        *operand(r, "src"),
        *masks,
        **common,
        align=read_align,
    )
    masked_operand(
        plan,
        WRITE,
        *operand(r, "dst"),
        *masks,
        **common,
        align=write_align,
    )


def _binary_source(plan: Plan, r: np.ndarray, name: str, context: BlockContext, record_type: int, **kw) -> None:
    masked_operand(
        plan,
        READ,
        *operand(r, name),
        *masks_of(r),
        aicube=_aicube(context),
        align=simd_align(context, r[f"{name}_data_bits"], record_type),
        **kw,
    )


def _binary_destination(plan: Plan, r: np.ndarray, access: int, context: BlockContext, record_type: int) -> None:
    masked_operand(
        plan,
        access,
        *operand(r, "dst"),
        *masks_of(r),
        aicube=_aicube(context),
        align=simd_align(context, r["dst_data_bits"], record_type),
    )


_BINARY_MEMBERS = [
    *(f"{name}{member}" for name in ("src0", "src1", "dst")
      for member in ("", "_block_num", "_block_size", "_block_stride", "_repeat_stride", "_data_bits")),
    "mask0", "mask1", "mask_mode", "repeat", "pc", "block_id",
]  # fmt: skip
_BINARY_OFFSETS = np.array([BINARY_DTYPE.fields[name][1] for name in _BINARY_MEMBERS], dtype=np.int64)
assert [BINARY_DTYPE.fields[name][0].str for name in _BINARY_MEMBERS] == [
    "<u8", "|u1", "<u2", "<u2", "<u2", "|u1"
] * 3 + ["<u8", "<u8", "|u1", "|u1", "<u8", "<u2"]  # fmt: skip


def binary_plan(record_type: int, dtype: np.dtype, context: BlockContext) -> base.DirectPlan | None:
    """``binary_compiled``'s constants and members as a plan (``_records.direct``), where its context-wide
    conditions hold: BINARY_OP or VREDUCEV2_BINARY off the cube, on a chip whose SIMD records align by space, records
    of ``BINARY_DTYPE``. None otherwise."""
    if (
        record_type not in (RecordType.BINARY_OP, RecordType.VREDUCEV2_BINARY)
        or dtype != BINARY_DTYPE
        or _aicube(context)
        or simd_align(context, 8, record_type) != 0
    ):
        return None
    common = dict(space=UB, pipe=V, block_type=context.block_type)
    kinds = (EventKind.READ, EventKind.READ, EventKind.WRITE)
    constants = np.stack([base.constant_words(kind=kind, **common) for kind in kinds])
    return base.DirectPlan(base.DIRECT_BINARY, BINARY_DTYPE.itemsize, constants, _BINARY_OFFSETS)


def binary_compiled(
    record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext
) -> np.ndarray | None:
    """``convert_binary``'s usual case in one compiled pass (``_records.binary``): BINARY_OP or VREDUCEV2_BINARY
    off the cube, on a chip whose SIMD records align by space, the launch's budget not refusing, and every record
    in MASK_NORM with a repeat and its operands' masks kept as they are (one event per operand). None otherwise
    (numpy's plan below is the reference and converts those batches)."""
    if base.compiled is None or not len(records) or context.budget.refusing:
        return None
    plan = binary_plan(record_type, BINARY_DTYPE, context)
    raw, words = base.record_bytes(records, BINARY_DTYPE), base.serial_words(serials)
    if plan is None or raw is None or words is None or words.size != len(records):
        return None
    out = np.empty((3 * len(records), EVENT_DTYPE.itemsize // 8), dtype=np.uint64)
    usual = base.compiled.binary(out, raw, BINARY_DTYPE.itemsize, words, _BINARY_OFFSETS, plan.constants)
    return out.view(EVENT_DTYPE).reshape(-1) if usual else None


@plans(
    RecordType.BINARY_OP, RecordType.TERNARY_OP, RecordType.VREDUCEV2_BINARY, dtype=BINARY_DTYPE,
    compiled=binary_compiled,
)  # fmt: skip
def convert_binary(plan: Plan, r: np.ndarray, context: BlockContext, record_type: int) -> None:
    """BinaryOpRecord: src0 and src1 read, the destination written (TERNARY_OP: read then written), masked.
    msSanitizer takes the general MASK_COUNT path for all three (VREDUCEV2_BINARY included)."""
    _binary_source(plan, r, "src0", context, record_type)
    _binary_source(plan, r, "src1", context, record_type)
    _binary_destination(plan, r, MEMCPY if record_type == RecordType.TERNARY_OP else WRITE, context, record_type)


# Windows of these records convert straight from their words (slots.DirectPlans), as binary_compiled does
base.direct(binary_plan, RecordType.BINARY_OP, RecordType.VREDUCEV2_BINARY)


def _vsel_select_repeat(r: np.ndarray, context: BlockContext) -> np.ndarray:
    """The repeat count msSanitizer gives VSEL's unmasked select operand: the record's, except under MASK_COUNT
    where it keeps what cutting src0 by the count left behind (its full repeats, or 1 when a partial repeat
    follows them). Kept for parity: it is msSanitizer's event, and the count decides the real repeats."""
    u = _u
    repeat = u(r["repeat"])
    per_block = _div(u(r["src0_block_size"]) * np.uint64(8), u(r["src0_data_bits"]))
    per_repeat = u(r["src0_block_num"]) * per_block
    mask0 = u(r["mask0"])
    cut = (
        (r["mask_mode"] != MASK_NORM)
        & (r["src0_block_num"] != 0)
        & (r["src0_block_size"] != 0)
        & (not _aicube(context))
        & (mask0 != 0)
        & (per_block != 0)
    )
    n_repeat = _div(mask0, per_repeat)
    partial = mask0 - n_repeat * per_repeat != 0
    return np.where(cut & partial, 1, np.where(cut & (n_repeat > 0), n_repeat, repeat))


@plans(RecordType.VSEL_OP, dtype=BINARY_DTYPE)
def convert_vsel(plan: Plan, r: np.ndarray, context: BlockContext, record_type: int) -> None:
    """VSEL: as a binary op, except that src1 (the select mask) is unmasked in mode 1 (one block, or repeat
    stride 1)."""
    _binary_source(plan, r, "src0", context, record_type)
    unmasked = (r["src1_block_num"] == 1) | (r["src1_repeat_stride"] == 1)
    plan.add(
        EventKind.READ,
        UB,
        r["src1"],
        pipe=V,
        repeat=_vsel_select_repeat(r, context),
        align=simd_align(context, r["src1_data_bits"], record_type),
        count=unmasked,
        **pattern_fields(r, "src1", "block_size", "block_num", "block_stride", "repeat_stride"),
    )
    _binary_source(plan, r, "src1", context, record_type, enabled=~unmasked)
    _binary_destination(plan, r, WRITE, context, record_type)


@converts(RecordType.REDUCE_OP, dtype=REDUCE_DTYPE)
def convert_reduce(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    """REDUCE_OP: the source read (masked), one reduced block per repeat written (MASK_COUNT: the count scaled
    down by the reduction ratio). A MASK_COUNT record whose ratio cannot be computed is dropped, as msSanitizer
    drops it."""
    r = records
    u = _u
    count_mode = r["mask_mode"] != MASK_NORM
    bad = (r["dst_block_size"] == 0) | (r["dst_block_num"] == 0) | (r["dst_data_bits_factor"] == 0)
    ratio = _div(
        _div(_div(u(r["src_block_num"]) * u(r["src_block_size"]), u(r["dst_data_bits_factor"])), u(r["dst_block_num"])),
        u(r["dst_block_size"]),
    )
    ratio &= np.uint64(0xFFFF)  # msSanitizer keeps it in a uint16_t
    keep = ~(count_mode & (bad | (ratio == 0)))
    drop(context, "REDUCE_OP records dropped: MASK_COUNT with no reduction ratio", int((~keep).sum()))
    ratio = np.where(count_mode & keep, ratio, 1)
    plan = Plan(len(r), serials, r, context)
    aicube = _aicube(context)
    masked_operand(
        plan,
        READ,
        *operand(r, "src"),
        *masks_of(r),
        aicube=aicube,
        enabled=keep,
        align=simd_align(context, r["src_data_bits"], record_type),
    )
    mask0 = u(r["mask0"])
    dst_mask0 = np.where(count_mode, mask0 // ratio + (mask0 % ratio != 0), mask0)
    masked_operand(
        plan,
        WRITE,
        r["dst"],
        r["dst_block_num"],
        r["dst_repeat_length"],
        1,
        r["repeat"],
        r["dst_repeat_stride"],
        r["dst_data_bits"],
        dst_mask0,
        r["mask1"],
        r["mask_mode"],
        aicube=aicube,
        enabled=keep,
        align=explicit_align(r["dst_align_size"]),
    )
    plan_events = plan.build()
    return plan_events


# VREDUCEV2 pattern modes 1..7: the bits of a 64-bit compare mask kept, and how many of the 64 are set.
_PATTERNS = np.array(
    [
        0x0,
        0x5555555555555555,
        0xAAAAAAAAAAAAAAAA,
        0x1111111111111111,
        0x2222222222222222,
        0x4444444444444444,
        0x8888888888888888,
        0xFFFFFFFFFFFFFFFF,
    ],
    dtype=np.uint64,
)
_PATTERN_BITS = np.array([0, 32, 32, 16, 16, 16, 16, 64], dtype=np.uint64)


def _low_bits(mask: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Set bits of ``mask`` among its lowest ``count`` (0..64) bits."""
    keep = np.where(count >= 64, ALL_ONES, (np.uint64(1) << np.minimum(count, 63)) - np.uint64(1))
    return np.bitwise_count(mask & keep).astype(np.uint64)


def reducev2_written(r: np.ndarray) -> np.ndarray:
    """Elements VREDUCEV2 writes: per repeat, the elements the compare mask (or pattern) keeps among those read."""
    data_bytes = _u(r["data_bytes"])
    read = np.where(r["mask_mode"] == MASK_NORM, _div(np.uint64(256), data_bytes), _u(r["mask0"]))
    loop, remain = read // np.uint64(64), read % np.uint64(64)
    cmp0, cmp1 = _u(r["cmp_mask0"]), _u(r["cmp_mask1"])
    bits0 = np.bitwise_count(cmp0).astype(np.uint64)
    bits1 = np.bitwise_count(cmp1).astype(np.uint64)
    # 16-bit data alternates the two 64-bit halves of the compare mask; wider data reuses mask0.
    loop1 = loop // np.uint64(2)
    loop0 = loop - loop1
    by_half = loop0 * bits0 + loop1 * bits1 + _low_bits(np.where(loop0 == loop1, cmp0, cmp1), remain)
    by_first = loop * bits0 + _low_bits(cmp0, remain)
    by_compare = np.where(data_bytes == 2, by_half, by_first)
    pattern = np.minimum(r["pattern_mode"], 7)
    by_pattern = loop * _PATTERN_BITS[pattern] + _low_bits(_PATTERNS[pattern], remain)
    per_repeat = np.where(r["pattern_mode"] == 0, by_compare, by_pattern)
    return per_repeat * _u(r["repeat"])


@converts(RecordType.VREDUCEV2, dtype=REDUCEV2_DTYPE)
def convert_reducev2(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    """VREDUCEV2 (gather by compare mask or pattern): src0 read (MASK_NORM: 256 bytes per repeat, the mask
    ignored; MASK_COUNT: mask0 elements per repeat), src1 (the compare mask, pattern mode 0 only) read, the kept
    elements written back to back. A pattern mode past 7 (undefined in msSanitizer) writes nothing."""
    r = records
    n = len(r)
    plan = Plan(n, serials, r, context)
    data_bits = _u(r["data_bytes"]) * np.uint64(8)
    norm = r["mask_mode"] == MASK_NORM
    plan.add(
        EventKind.READ,
        UB,
        r["src0"],
        pipe=V,
        block_size=32,
        block_num=8,
        block_stride=r["src0_block_stride"],
        repeat=r["repeat"],
        repeat_stride=r["src0_repeat_stride"],
        count=norm,
    )
    # MASK_COUNT source: msSanitizer's per-repeat counting, called directly (no AICUBE drop, no mask0 check).
    masked_operand(
        plan,
        READ,
        r["src0"],
        8,
        32,
        r["src0_block_stride"],
        r["repeat"],
        r["src0_repeat_stride"],
        data_bits,
        r["mask0"],
        r["mask1"],
        r["mask_mode"],
        aicube=False,
        variant=BY_REPEAT,
        enabled=~norm,
    )
    plan.add(
        EventKind.READ,
        UB,
        r["src1"],
        pipe=V,
        block_size=1,
        block_num=_div(np.uint64(256), _u(r["data_bytes"])) // np.uint64(8),
        repeat=r["repeat"],
        repeat_stride=_u(r["src1_repeat_stride"]) * np.uint64(32),
        count=r["pattern_mode"] == 0,
    )
    plan.add(
        EventKind.WRITE,
        UB,
        r["dst"],
        pipe=V,
        block_size=reducev2_written(r) * _u(r["data_bytes"]),
        count=r["pattern_mode"] <= 7,
    )
    return plan.build()


@plans(RecordType.VGATHER, dtype=VGATHER_DTYPE)
def convert_vgather(plan: Plan, r: np.ndarray, context: BlockContext, record_type: int) -> None:
    """VGATHER: the offset table read (one contiguous run, 32-byte aligned), the destination written; unmasked."""
    plan.add(EventKind.READ, UB, r["src"], pipe=V, align=32, **pattern_fields(r, "src", "block_size", "block_num"))
    plan.add(
        EventKind.WRITE,
        UB,
        r["dst"],
        pipe=V,
        align=explicit_align(r["dst_align_size"]),
        **pattern_fields(r, "dst", "block_size", "block_num", "block_stride", "repeat", "repeat_stride"),
    )


@plans(RecordType.ELEMENT, dtype=ELEMENT_DTYPE)
def convert_element(plan: Plan, r: np.ndarray, context: BlockContext, record_type: int) -> None:
    """ELEMENT: one contiguous access of the record's own kind and alignment."""
    plan.add_access(
        r["access"],
        UB,
        r["addr"],
        pipe=V,
        block_size=r["block_size"],
        block_num=r["block_num"],
        align=explicit_align(r["align_size"]),
    )


@plans(RecordType.CMPMASK_OP, dtype=CMPMASK_DTYPE)
def convert_cmpmask(plan: Plan, r: np.ndarray, context: BlockContext, record_type: int) -> None:
    """CMPMASK (compare-mask register to or from UB): one run of ``size`` bytes, 16-byte aligned."""
    plan.add_access(r["access"], UB, r["addr"], pipe=V, block_size=r["size"], align=16)


@plans(RecordType.VEC_REGPROPCOOR_OP, dtype=REGPROPCOOR_DTYPE)
def convert_regpropcoor(plan: Plan, r: np.ndarray, context: BlockContext, record_type: int) -> None:
    """Region-proposal coordinates (vconcat / vextract): 16 elements per repeat on the src side, one element
    of each of 16 eight-element proposals on the dst side. Extraction swaps read and write. Data types other than
    B16/B32 and region ranges past 5 are dropped, as msSanitizer drops them."""
    ok = ((r["data_type"] == DataType.DATA_B16) | (r["data_type"] == DataType.DATA_B32)) & (r["region_range"] <= 5)
    drop(context, "VEC_REGPROPCOOR_OP records dropped: data type not B16/B32 or region range past 5", int((~ok).sum()))
    size = data_size(r["data_type"])
    extract = r["is_extract"] != 0
    first = np.where(extract, EventKind.WRITE, EventKind.READ)
    second = np.where(extract, EventKind.READ, EventKind.WRITE)
    plan.add(
        first,
        UB,
        r["src"],
        pipe=V,
        block_size=size * np.uint64(16),
        block_stride=0,
        repeat=r["repeat"],
        repeat_stride=1,
        count=ok,
    )
    plan.add(
        second,
        UB,
        _u(r["dst"]) + size * _u(r["region_range"]),
        pipe=V,
        block_size=size,
        block_num=16,
        block_stride=8,
        repeat=r["repeat"],
        repeat_stride=128,
        count=ok,
    )


def _va_addresses(low: np.ndarray, high: np.ndarray) -> list[np.ndarray]:
    """The eight UB addresses of a VA register: 16-bit fields in 32-byte units, four in each half."""
    out = []
    for half in (low, high):
        for i in range(4):
            out.append(((_u(half) >> np.uint64(16 * i)) & np.uint64(0xFFFF)) << np.uint64(5))
    return out


@plans(RecordType.SCATTERVNCHWCONV, RecordType.SCATTERVNCHWCONV_A5, dtype=SCATTER_DTYPE)
def convert_scatter(plan: Plan, r: np.ndarray, context: BlockContext, record_type: int) -> None:
    """SCATTERVNCHWCONV (transpose through VA registers): 16 source blocks read (src0's 8 addresses, then
    src1's), then 16 destination blocks written; each address repeats ``repeat`` times. B8 data moves 16-byte
    halves (the high half with the high-half flag) and its strides count in those halves."""
    b8 = r["data_type"] == DataType.DATA_B8
    size = np.where(b8, 16, 32)
    for kind, prefix, stride, high in (
        (EventKind.READ, "src", r["src_stride"], r["src_high_half"]),
        (EventKind.WRITE, "dst", r["dst_stride"], r["dst_high_half"]),
    ):
        offset = np.where(b8 & (high != 0), 16, 0).astype(np.uint64)
        rstride = np.where(b8, _u(stride) * np.uint64(2), _u(stride))
        for reg in (0, 1):
            for address in _va_addresses(r[f"{prefix}{reg}_l"], r[f"{prefix}{reg}_h"]):
                plan.add(
                    kind,
                    UB,
                    address + offset,
                    pipe=V,
                    block_size=size,
                    repeat=r["repeat"],
                    repeat_stride=rstride,
                )


@plans(RecordType.VBS32_A5, dtype=VBS32_DTYPE)
def convert_vbs32(plan: Plan, r: np.ndarray, context: BlockContext, record_type: int) -> None:
    """VBS32 (sort 32 scores with their indices): per repeat, 32 scores and 128 bytes of indices read, 256 bytes
    (32 eight-byte pairs) written."""
    common = dict(pipe=V, block_stride=0, repeat=r["repeat"], repeat_stride=1)
    plan.add(EventKind.READ, UB, r["src0"], block_size=data_size(r["data_type"]) * np.uint64(32), **common)
    plan.add(EventKind.READ, UB, r["src1"], block_size=128, **common)
    plan.add(EventKind.WRITE, UB, r["dst"], block_size=256, **common)


@converts(RecordType.VMRGSORT4_OP_C310, dtype=VMS4_DTYPE)
def convert_vms4v2(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    """VMRGSORT4 (910_95 form): merge up to four sorted lists of 8-byte elements. One repeat (or "all stored",
    modelled as one repeat): each valid list read, the sum written. Several repeats need four equal valid lists
    and read and write ``repeat`` runs of 4 x 8 x elementNum bytes. Nops and invalid forms give nothing.

    The list addresses are used as the record gives them (msSanitizer does the same)."""
    r = records
    n = len(r)
    counts = r["element_num"].astype(np.uint64)
    valid = (r["valid_mask"][:, None].astype(np.uint64) >> np.arange(4, dtype=np.uint64)) & np.uint64(1) != 0
    empty_valid = (valid & (counts == 0)).any(axis=1)
    repeat = r["repeat"]
    all_stored = r["is_all_stored"] != 0
    same = (counts == counts[:, :1]).all(axis=1)
    single = (all_stored | (repeat == 1)) & ~empty_valid
    multi = ~all_stored & (repeat > 1) & (r["valid_mask"] == 0xF) & same & (counts[:, 0] != 0)
    refused = ~all_stored & (repeat > 1) & ((r["valid_mask"] != 0xF) | ~same)
    drop(
        context,
        "VMRGSORT4_OP_C310 records dropped: several repeats need four valid lists of one length",
        int(refused.sum()),
    )
    plan = Plan(n, serials, r, context)
    for i in range(4):
        plan.add(
            EventKind.READ,
            UB,
            r["src"][:, i],
            pipe=V,
            block_size=8,
            block_num=counts[:, i],
            count=single & valid[:, i],
        )
    plan.add(EventKind.WRITE, UB, r["dst"], pipe=V, block_size=8, block_num=(counts * valid).sum(axis=1), count=single)
    for kind, address in ((EventKind.READ, r["src"][:, 0]), (EventKind.WRITE, r["dst"])):
        plan.add(
            kind,
            UB,
            address,
            pipe=V,
            block_size=counts[:, 0] * np.uint64(32),
            repeat=repeat,
            repeat_stride=1,
            count=multi,
        )
    return plan.build()
