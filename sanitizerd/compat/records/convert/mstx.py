"""MSTX_STUB records (a kernel's mstx annotations, msSanitizer's ``MstxRecord``) -> events.

One record type carries several interfaces (``interfaceType``) in a union:

* cross-core set / wait (0, 1): ``MSTX_CROSS_SET`` / ``MSTX_CROSS_WAIT`` on the record's pipe, address = flag
  address, event_id = flag id, mode bit 0 = "is more". A wait with "is more" that repeats one of the block's two
  previous such waits (same flag, pipe, flags, block) is a duplicate and dropped, as msSanitizer drops it.
* HCCL (2): collective data movement on GM, per ``flagId``: ALLREDUCE one read + one write; ALLGATHER one read
  + rankDim writes ``dstStride`` elements apart; REDUCESCATTER rankDim reads + one write; ALLTOALL rankDim reads +
  rankDim writes. Each access is ``repeat`` runs of count x typeSize bytes, repeatStride runs apart.
* HCCL-V core records (3): one read of srclenBurst and one write of dstlenBurst bytes, ``repeat`` contiguous runs.
* cross-core barrier / set flag / wait flag (4, 5, 6): optionally a full pipe barrier first (one
  pipe_barrier(PIPE_ALL), which the detectors expand as msSanitizer's 33 generated events do), then a software
  SyncAll of every block (``SOFT_SYNC_ALL``, mode 1 so that a lock-up names it msSanitizer's way; msSanitizer's
  FFTS flag 31 pair) or a soft set/wait
  (``SOFT_SET``/``SOFT_WAIT`` on PIPE_S, address = the peer block), as the sync family converts the stubs.
* cross-NPU barrier (9, releases from 2026-04-13 on): optionally a full pipe barrier first (its ``pipeBarrierAll``,
  from 2026-04-23 on), then one ``NPU_BARRIER`` on PIPE_S, the native event cross-NPU racecheck orders by. The
  devices and cores it names (``usedDeviceNum`` x ``usedCoreNum``, device pointers) are not read: the native barrier
  is every block of every device of the job (docs/mssanitizer-later.md).
* signal set / wait (7, 8, releases from 2026-04-13 on): ``NPU_SIGNAL_SET`` on PIPE_S_CAL and ``NPU_SIGNAL_WAIT`` on
  PIPE_S, as msSanitizer's parser puts them; address = the signal's, ``pc`` = the value (set) or cmpValue (wait) as
  a u64, a wait's mode = its CompareOp (one outside EQ..LE, whatever its i32, as 255: a bad op, which orders
  nothing and is said). The record's pc is not lost: the events' location comes from the record, as for every event.
* vector unary / binary (3000, 3001): as UNARY_OP / BINARY_OP with 32-byte blocks, masked.
* data copy (4001): as a DMA_MOV of 32-byte bursts.

* data copy with pad (4002): as a MOV_ALIGN (DataCopyPad), through that family's converter.

The last four are msSanitizer's "local tensor" annotations: AscendC's vector and copy APIs name their LocalTensors
(space, address, elements x bits), and msSanitizer checks the annotation's own accesses against those tensors, reads
against the sources and writes against the destination, in memcheck only (its racecheck and synccheck skip such
records, and the instruction's own record carries the access for every other check). So their accesses become
TENSOR_READ / TENSOR_WRITE, preceded by one TENSOR operand event per on-chip tensor (GM ones have no length,
msSanitizer skips them too): memcheck's operand check (``detectors/_tensors``).

A record with ``error`` set produces nothing. Not converted here: the merge mode that ``isMerge`` toggles, which
spans record types (a decoder-level rule).
"""

from __future__ import annotations

import numpy as np

from sanitizerd.compat.records.convert import moves
from sanitizerd.compat.records.convert.base import BlockContext, converts, drop, payload_dtype
from sanitizerd.compat.records.convert.plan import NO_SPACE, Plan
from sanitizerd.compat.records.convert.vector import READ, WRITE, masked_operand
from sanitizerd.compat.records.types import MEMTYPE_SPACE, DataType, RecordType, query_pipe
from sanitizerd_protocol.records import (
    SYNC_ALL_MSTX_BARRIER,
    TENSOR_OPERAND_READ,
    TENSOR_OPERAND_WRITE,
    BlockType,
    CompareOp,
    EventKind,
    Pipe,
    Space,
)

SET_CROSS_SYNC, WAIT_CROSS_SYNC, HCCL, HCCLV = 0, 1, 2, 3
CROSS_CORE_BARRIER, CROSS_CORE_SET_FLAG, CROSS_CORE_WAIT_FLAG = 4, 5, 6
SIGNAL_SET, SIGNAL_WAIT, CROSS_NPU_BARRIER = 7, 8, 9
VEC_UNARY_OP, VEC_BINARY_OP = 3000, 3001
DATA_COPY, DATA_COPY_PAD = 4001, 4002
ALLREDUCE, ALLGATHER, REDUCESCATTER, ALLTOALL = 0, 1, 2, 3
LAST_COMPARE_OP = max(CompareOp)

# A kernel's HCCL annotation names the ranks it moves data for; more than this many events per record is a
# damaged record (an 8-byte-aligned i32 taken for a rank count), so the ranks are cut here.
MAX_RANKS = 128


def _union_member(member: str, names: str) -> str:
    """``names`` (``cMember=name`` each) of ``member``, one of MstxRecord's ``interface`` union, as
    ``payload_dtype`` reads them."""
    return " ".join(f"interface.{member}.{word}" for word in names.split())


def _tensor(prefix: str, path: str) -> str:
    """An MstxTensorDesc {AddressSpace space; u64 addr; u64 size; u8 dataBits} at ``path``, read as ``prefix``'s."""
    members = (("space", "space"), ("addr", "addr"), ("size", "size"), ("dataBits", "bits"))
    return " ".join(f"{path}.{member}={prefix}_{name}" for member, name in members)


# The union's members overlap: a data copy's tensors are read as the unary op's (same offsets), a binary op's
# destination too.
MSTX_DTYPE = payload_dtype(
    "MstxRecord",
    " ".join(
        (
            "interfaceType=interface bufferLens error",
            _union_member(
                "mstxCrossRecord",
                "addr=cross_addr flagId=cross_flag pipe=cross_pipe isMore=cross_more isMerge=cross_merge",
            ),
            _union_member(
                "mstxHcclRecord",
                "src=hccl_src dst=hccl_dst srcCount=hccl_src_count dstCount=hccl_dst_count srcStride=hccl_src_stride"
                " dstStride=hccl_dst_stride srcRepeatStride=hccl_src_repeat_stride"
                " dstRepeatStride=hccl_dst_repeat_stride srcDataTypeSize=hccl_src_type_size"
                " dstDataTypeSize=hccl_dst_type_size repeat=hccl_repeat rankDim=hccl_rank_dim flagId=hccl_flag",
            ),
            _union_member("mstxHcclCoreRecord", "srclenBurst=core_src_len dstlenBurst=core_dst_len repeat=core_repeat"),
            _union_member("mstxCrossCoreBarrier", "pipeBarrierAll=barrier_pipe_all"),
            _union_member(
                "mstxCrossCoreSetFlag", "eventId=flag_event peerCoreId=flag_peer pipeBarrierAll=flag_pipe_all"
            ),
            _union_member(
                "mstxVecUnaryDesc",
                f"{_tensor('un_dst', 'dst')} {_tensor('un_src', 'src')} wrapper.maskMode=un_mask_mode"
                " wrapper.mask.mask0=un_mask0 wrapper.mask.mask1=un_mask1 blockNum=un_block_num"
                " dstBlockStride=un_dst_block_stride srcBlockStride=un_src_block_stride repeatTimes=un_repeat"
                " dstRepeatStride=un_dst_repeat_stride srcRepeatStride=un_src_repeat_stride",
            ),
            _union_member(
                "mstxVecBinaryDesc",
                f"{_tensor('bi_src0', 'src0')} {_tensor('bi_src1', 'src1')} wrapper.maskMode=bi_mask_mode"
                " wrapper.mask.mask0=bi_mask0 wrapper.mask.mask1=bi_mask1 blockNum=bi_block_num"
                " dstBlockStride=bi_dst_block_stride src0BlockStride=bi_src0_block_stride"
                " src1BlockStride=bi_src1_block_stride repeatTimes=bi_repeat dstRepeatStride=bi_dst_repeat_stride"
                " src0RepeatStride=bi_src0_repeat_stride src1RepeatStride=bi_src1_repeat_stride",
            ),
            _union_member(
                "mstxDataCopyDesc",
                "lenBurst=copy_len_burst nBurst=copy_n_burst srcGap=copy_src_gap dstGap=copy_dst_gap",
            ),
            _union_member("mstxDataCopyPadDesc", "leftPad=pad_left rightPad=pad_right"),
        )
    ),
)

# AddressSpace (our Space numbering) -> MemType, for the pipe of a copy; 0xFF, no MemType, where none is.
_SPACE_TO_MEMTYPE = np.full(256, 0xFF, dtype=np.uint8)
for _mem, _space in MEMTYPE_SPACE.items():
    _SPACE_TO_MEMTYPE[_space] = _mem


def _u(x: np.ndarray | int) -> np.ndarray:
    return np.asarray(x).astype(np.uint64)


def _valid_space(space: np.ndarray) -> np.ndarray:
    """AddressSpace (i32) as a Space, NO_SPACE when out of range."""
    space = np.asarray(space)
    return np.where((space >= 0) & (space <= int(Space.FB)), space, NO_SPACE).astype(np.uint64)


def duplicate_waits(r: np.ndarray, live: np.ndarray, state: dict | None = None) -> np.ndarray:
    """Waits msSanitizer drops: an "is more" cross wait equal (flag address, id, pipe, flags, block) to one of
    the two "is more" waits before it in the block. ``state`` (per block, kept across calls when the decoder
    gives one) carries the last two waits over from the block's earlier records."""
    dup = np.zeros(len(r), dtype=bool)
    waits = np.flatnonzero(live & (r["interface"] == WAIT_CROSS_SYNC) & (r["cross_more"] != 0))
    before = state.get("mstx_waits", np.zeros((0, 5), dtype=np.uint64)) if state is not None else None
    if len(waits) == 0:
        return dup
    keys = np.stack(
        [
            _u(r["cross_addr"][waits]),
            _u(r["cross_flag"][waits]),
            _u(r["cross_pipe"][waits]),
            _u(r["cross_merge"][waits]),
            _u(r["block_id"][waits]),
        ],
        axis=1,
    )
    carried = 0 if before is None else len(before)
    if carried:
        keys = np.concatenate([before, keys])
    same_prev = np.zeros(len(keys), dtype=bool)
    same_prev[1:] = (keys[1:] == keys[:-1]).all(axis=1)
    same_prev2 = np.zeros(len(keys), dtype=bool)
    same_prev2[2:] = (keys[2:] == keys[:-2]).all(axis=1)
    dup[waits] = (same_prev | same_prev2)[carried:]
    if state is not None:
        state["mstx_waits"] = keys[-2:]
    return dup


def _pipe_all(plan: Plan, on: np.ndarray) -> None:
    """A full pipe barrier: one pipe_barrier(PIPE_ALL) event, which the detectors expand (every pipe waits for
    PIPE_S, msSanitizer's 33 generated events), as the sync family converts PIPE_BARRIER records."""
    plan.add(EventKind.PIPE_BARRIER, 0, 0, pipe=int(Pipe.ALL), count=on, memory=False)


def _cross_npu_barrier(plan: Plan, r: np.ndarray, barrier: np.ndarray, names: tuple[str, ...]) -> None:
    """msSanitizer's order: the full pipe barrier its ``pipeBarrierAll`` asks for (releases that have the member),
    then the barrier itself on PIPE_S."""
    if "npu_pipe_all" in names:
        _pipe_all(plan, barrier & (r["npu_pipe_all"] != 0))
    s = int(Pipe.S)
    plan.add(EventKind.NPU_BARRIER, 0, 0, pipe=s, dst_pipe=s, count=barrier, memory=False)


def _signals(plan: Plan, r: np.ndarray, live: np.ndarray, interface: np.ndarray) -> None:
    """Signal set / wait: one event each, the value in ``pc`` (docs/protocol.md)."""
    is_set = live & (interface == SIGNAL_SET)
    is_wait = live & (interface == SIGNAL_WAIT)
    op = r["wait_op"]
    known = (op >= 0) & (op <= LAST_COMPARE_OP)
    plan.add(
        np.where(is_wait, EventKind.NPU_SIGNAL_WAIT, EventKind.NPU_SIGNAL_SET),
        0,
        np.where(is_wait, r["wait_addr"], r["signal_addr"]),
        pipe=np.where(is_wait, int(Pipe.S), int(Pipe.S_CAL)),
        dst_pipe=int(Pipe.S),
        mode=np.where(is_wait & ~known, 0xFF, np.where(is_wait, op, 0)).astype(np.uint64),
        count=is_set | is_wait,
        memory=False,
        pc=np.where(is_wait, r["wait_value"], r["signal_value"]).view(np.uint64),
    )


def _hccl(plan: Plan, r: np.ndarray, hccl: np.ndarray, context: BlockContext) -> None:
    flag = r["hccl_flag"]
    ranks = np.clip(r["hccl_rank_dim"], 0, MAX_RANKS).astype(np.uint64)
    drop(
        context,
        f"MSTX_STUB HCCL annotations cut to {MAX_RANKS} ranks",
        int((hccl & (r["hccl_rank_dim"] > MAX_RANKS)).sum()),
    )
    one = np.uint64(1)
    reads = np.select([flag == ALLREDUCE, flag == ALLGATHER, flag == REDUCESCATTER, flag == ALLTOALL], [1, 1, 0, 0], 0)
    reads = np.where((flag == REDUCESCATTER) | (flag == ALLTOALL), ranks, _u(reads))
    writes = np.select([flag == ALLREDUCE, flag == REDUCESCATTER], [one, one], np.uint64(0))
    writes = np.where((flag == ALLGATHER) | (flag == ALLTOALL), ranks, writes)
    gm = int(Space.GM)
    common = dict(pipe=int(Pipe.S), block_stride=0, repeat=r["hccl_repeat"])
    for kind, side, accesses in ((EventKind.READ, "src", reads), (EventKind.WRITE, "dst", writes)):
        type_size = _u(r[f"hccl_{side}_type_size"])
        plan.add(
            kind,
            gm,
            r[f"hccl_{side}"],
            block_size=_u(r[f"hccl_{side}_count"]) * type_size,
            repeat_stride=r[f"hccl_{side}_repeat_stride"],
            count=np.where(hccl, accesses, 0),
            step=_u(r[f"hccl_{side}_stride"]) * type_size,
            **common,
        )


# The April reference has no cross-NPU barrier: its members are read where a release has them. ``npu_devices`` is
# there from the barrier's first release, so its presence says the release has the barrier at all.
MSTX_LATER = (
    "interface.mstxCrossNpuBarrier.usedDeviceNum=npu_devices",
    "interface.mstxCrossNpuBarrier.pipeBarrierAll=npu_pipe_all:u1",
    # MstxSignalSet {u64 addr; i64 value}, MstxSignalWait {u64 addr; i64 cmpValue; CompareOp cmpOp (an int)}: from
    # 2026-04-13 (mssanitizer-5cb9ea94) on. Each read by its own name though they overlap, so that a release moving
    # one is read right.
    "interface.mstxSignalSet.addr=signal_addr",
    "interface.mstxSignalSet.value=signal_value",
    "interface.mstxSignalWait.addr=wait_addr",
    "interface.mstxSignalWait.cmpValue=wait_value",
    "interface.mstxSignalWait.cmpOp=wait_op",
)


@converts(RecordType.MSTX_STUB, dtype=MSTX_DTYPE, later=MSTX_LATER)
def convert_mstx(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    r = records
    live = r["error"] == 0
    interface = r["interface"]
    # msSanitizer logs "Parse MstxStub failed" for these: the kernel-side stub could not describe the call.
    drop(context, "MSTX_STUB records dropped: marked as errors by the kernel", int((~live).sum()))
    plan = Plan(len(r), serials, r, context)
    annotated = live & np.isin(interface, _WITH_TENSORS)
    if annotated.any():
        _operands(plan, r, annotated)

    # Cross-core set / wait through a flag in GM.
    is_set = live & (interface == SET_CROSS_SYNC)
    # A per-block state dict, where the decoder keeps one (BlockContext.state), makes the drop span feed() calls.
    is_wait = live & (interface == WAIT_CROSS_SYNC) & ~duplicate_waits(r, live, getattr(context, "state", None))
    plan.add(
        np.where(interface == WAIT_CROSS_SYNC, EventKind.MSTX_CROSS_WAIT, EventKind.MSTX_CROSS_SET),
        0,
        r["cross_addr"],
        pipe=np.minimum(r["cross_pipe"], 0xFF),
        event_id=r["cross_flag"],
        mode=(r["cross_more"] != 0).astype(np.uint64),
        count=is_set | is_wait,
        memory=False,
    )

    _hccl(plan, r, live & (interface == HCCL), context)

    hcclv = live & (interface == HCCLV)
    gm = int(Space.GM)
    for kind, address, size in (
        (EventKind.READ, r["hccl_src"], r["core_src_len"]),
        (EventKind.WRITE, r["hccl_dst"], r["core_dst_len"]),
    ):
        plan.add(
            kind,
            gm,
            address,
            pipe=int(Pipe.S),
            block_size=size,
            block_stride=0,
            repeat=r["core_repeat"],
            repeat_stride=1,
            count=hcclv,
        )

    # Cross-core barrier (SyncAll) and soft set / wait flags.
    barrier = live & (interface == CROSS_CORE_BARRIER)
    set_flag = live & (interface == CROSS_CORE_SET_FLAG)
    wait_flag = live & (interface == CROSS_CORE_WAIT_FLAG)
    _pipe_all(plan, (barrier & (r["barrier_pipe_all"] != 0)) | ((set_flag | wait_flag) & (r["flag_pipe_all"] != 0)))
    # msSanitizer barriers every core whatever the record names (it warns): a software SyncAll of all blocks.
    s = int(Pipe.S)
    plan.add(
        EventKind.SOFT_SYNC_ALL, 0, 0, pipe=s, dst_pipe=s, mode=SYNC_ALL_MSTX_BARRIER, count=barrier, memory=False
    )
    plan.add(
        np.where(set_flag, EventKind.SOFT_SET, EventKind.SOFT_WAIT),
        0,
        np.where(wait_flag, np.maximum(r["flag_peer"], 0), 0).astype(np.uint64),
        pipe=s,
        dst_pipe=s,
        event_id=np.clip(r["flag_event"], 0, 0xFFFF),
        count=set_flag | wait_flag,
        memory=False,
    )

    names = r.dtype.names or ()
    if "wait_op" in names:
        _signals(plan, r, live, interface)
    if "npu_devices" in names:
        _cross_npu_barrier(plan, r, live & (interface == CROSS_NPU_BARRIER), names)

    # Vector unary / binary on local tensors: 32-byte blocks, masked as UNARY_OP / BINARY_OP.
    aicube = context.block_type == BlockType.AIC
    unary = live & (interface == VEC_UNARY_OP)
    binary = live & (interface == VEC_BINARY_OP)
    for access, pre, stride in ((READ, "un_src", "un_src"), (WRITE, "un_dst", "un_dst")):
        masked_operand(
            plan,
            access,
            r[f"{pre}_addr"],
            r["un_block_num"],
            32,
            r[f"{stride}_block_stride"],
            r["un_repeat"],
            r[f"{stride}_repeat_stride"],
            r[f"{pre}_bits"],
            r["un_mask0"],
            r["un_mask1"],
            r["un_mask_mode"],
            aicube=aicube,
            enabled=unary,
        )
    for access, pre in ((READ, "bi_src0"), (READ, "bi_src1"), (WRITE, "bi_dst")):
        masked_operand(
            plan,
            access,
            r["un_dst_addr"] if pre == "bi_dst" else r[f"{pre}_addr"],
            r["bi_block_num"],
            32,
            r[f"{pre}_block_stride"],
            r["bi_repeat"],
            r[f"{pre}_repeat_stride"],
            r["un_dst_bits"] if pre == "bi_dst" else r[f"{pre}_bits"],
            r["bi_mask0"],
            r["bi_mask1"],
            r["bi_mask_mode"],
            aicube=aicube,
            enabled=binary,
        )

    # Data copy: a DMA_MOV of nBurst bursts of lenBurst 32-byte blocks (fields cut to the DMA record's u16).
    copy = live & (interface == DATA_COPY)
    src_space = _valid_space(r["un_src_space"])
    dst_space = _valid_space(r["un_dst_space"])
    pipe = query_pipe(_SPACE_TO_MEMTYPE[np.minimum(src_space, 255)], _SPACE_TO_MEMTYPE[np.minimum(dst_space, 255)])
    drop(
        context,
        "MSTX_STUB data-copy annotations dropped: no pipe moves data between their spaces",
        int((copy & (pipe == 0xFF)).sum()),
    )
    copy &= pipe != 0xFF
    mask16 = np.uint64(0xFFFF)
    length = _u(r["copy_len_burst"]) & mask16
    bursts = _u(r["copy_n_burst"]) & mask16
    for kind, space, address, gap in (
        (EventKind.READ, src_space, r["un_src_addr"], r["copy_src_gap"]),
        (EventKind.WRITE, dst_space, r["un_dst_addr"], r["copy_dst_gap"]),
    ):
        plan.add(
            kind,
            np.where(copy, space, NO_SPACE),
            address,
            pipe=pipe,
            block_num=length,
            block_size=32,
            repeat=bursts,
            repeat_stride=length + (_u(gap) & mask16),
        )
    events = plan.build()
    pad = np.flatnonzero(live & (interface == DATA_COPY_PAD))
    if pad.size:
        padded = _data_copy_pad(r[pad], serials[pad], context)
        events = np.concatenate([events, padded])
        events = events[np.argsort(events["serial"], kind="stable")]
    if annotated.any():
        # The annotations' accesses are judged by their operands alone, and by memcheck alone.
        mine = np.isin(events["serial"], serials[annotated])
        kind = events["kind"]
        events["kind"] = np.where(
            mine & (kind == EventKind.READ),
            EventKind.TENSOR_READ,
            np.where(mine & (kind == EventKind.WRITE), EventKind.TENSOR_WRITE, kind),
        )
    return events


_WITH_TENSORS = np.array([VEC_UNARY_OP, VEC_BINARY_OP, DATA_COPY, DATA_COPY_PAD])
_U32_MAX = np.uint64(2**32 - 1)


def _operands(plan: Plan, r: np.ndarray, annotated: np.ndarray) -> None:
    """One TENSOR operand event per on-chip tensor an annotation names, before its accesses: ``size`` elements of
    ``dataBits`` bits, as msSanitizer sizes it (``size * dataBits / 8``, 64-bit arithmetic). A size past 4 GiB is cut
    there: it covers any on-chip space whole either way."""
    interface = r["interface"]
    binary = interface == VEC_BINARY_OP
    # (tensor fields, side, which records name it): dst and src share their offsets in unary and the copies; a
    # binary op's dst is at the unary dst's offset, its sources after it.
    for prefix, mode, names in (
        ("un_dst", TENSOR_OPERAND_WRITE, annotated),
        ("un_src", TENSOR_OPERAND_READ, annotated & ~binary),
        ("bi_src0", TENSOR_OPERAND_READ, annotated & binary),
        ("bi_src1", TENSOR_OPERAND_READ, annotated & binary),
    ):
        space = _valid_space(r[f"{prefix}_space"])
        local = (space != NO_SPACE) & (space != int(Space.GM)) & (space <= int(Space.UB)) & (space >= int(Space.L1))
        size = _u(r[f"{prefix}_size"]) * _u(r[f"{prefix}_bits"]) // np.uint64(8)
        plan.add(
            EventKind.TENSOR,
            np.where(names & local, space, 0),
            r[f"{prefix}_addr"],
            pipe=0,
            block_size=np.minimum(size, _U32_MAX),
            count=names & local,
            memory=False,
            mode=mode,
        )


# DataType by element bits, as msSanitizer picks it for a padded copy (B4, B8, B16, B32; else unknown).
_TYPE_OF_BITS = np.full(256, 0xFF, dtype=np.uint8)
_TYPE_OF_BITS[[4, 8, 16, 32]] = [DataType.DATA_B4, DataType.DATA_B8, DataType.DATA_B16, DataType.DATA_B32]


def _data_copy_pad(r: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    """A padded copy is a MOV_ALIGN (DataCopyPad) of the same bursts, converted by that family's converter:
    fields narrowed to MovAlignRecord's widths as msSanitizer copies them."""
    eq = np.zeros(len(r), dtype=moves.MOV_ALIGN)
    eq["pc"] = r["pc"]
    eq["block_id"] = r["block_id"]
    eq["file_no"] = r["file_no"]
    eq["line_no"] = r["line_no"]
    eq["dst"] = r["un_dst_addr"]
    eq["src"] = r["un_src_addr"]
    eq["src_gap"] = r["copy_src_gap"]
    eq["dst_gap"] = r["copy_dst_gap"]
    eq["len_burst"] = r["copy_len_burst"]
    eq["n_burst"] = r["copy_n_burst"] & 0xFFFF
    eq["dst_mem"] = _SPACE_TO_MEMTYPE[np.minimum(_valid_space(r["un_dst_space"]), 255)]
    eq["src_mem"] = _SPACE_TO_MEMTYPE[np.minimum(_valid_space(r["un_src_space"]), 255)]
    eq["data_type"] = _TYPE_OF_BITS[r["un_dst_bits"]]
    eq["left_pad"] = r["pad_left"] & 0xFF
    eq["right_pad"] = r["pad_right"] & 0xFF
    return moves.mov_align(RecordType.MOV_ALIGN, eq, serials, context)
