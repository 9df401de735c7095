"""Synchronization records -> sync events, with the native semantics of ``sanitizerd_protocol.records``.

msSanitizer's pre-processing (reference §1.8) that sanitizerd's detectors already do from these events is not
repeated here: PIPE_S -> PIPE_S_CAL renaming, pipe_barrier(PIPE_ALL) fan-out, atomic-mode stamping, in-pipe sync
inference.
"""

from __future__ import annotations

import numpy as np

from sanitizerd.compat.records.convert import base
from sanitizerd.compat.records.convert.base import BlockContext, converts, drop, payload_dtype, subset, sync_events
from sanitizerd.compat.records.types import MemType, PipeType, RecordType
from sanitizerd_protocol.records import GET_BUF_NONBLOCK, BlockType, EventKind, Pipe

R = RecordType

SYNC = payload_dtype("SyncRecord", "src dst eventID isGenerated=generated")


def _pipe(values: np.ndarray) -> np.ndarray:
    """A PipeType from a record as the u8 event field; out-of-range values (hostile or newer) become 255, which
    no detector treats as a pipe of its own."""
    return np.where(values < 256, values, 255).astype(np.uint8)


def _u16(values: np.ndarray) -> np.ndarray:
    return np.minimum(values, 0xFFFF).astype(np.uint16)


# A flag's set or wait, in each of its four forms: one event each, with its pipes and event id.
_FLAG_KINDS = {
    **dict.fromkeys((R.SET_FLAG, R.SET_FLAGI, R.SET_FLAG_V, R.SET_FLAGI_V), EventKind.SET_FLAG),
    **dict.fromkeys((R.WAIT_FLAG, R.WAIT_FLAGI, R.WAIT_FLAG_V, R.WAIT_FLAGI_V), EventKind.WAIT_FLAG),
}


_FLAG_SATURATED = {"pipe": ("src", 255), "dst_pipe": ("dst", 255), "event_id": ("event_id", 0xFFFF)}


@converts(*_FLAG_KINDS, dtype=SYNC)
def set_or_wait_flag(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    events = base.sync_compiled(_FLAG_KINDS[record_type], records, serials, context, _FLAG_SATURATED)
    if events is not None:  # _pipe and _u16 in the same pass as the packing
        return events
    return sync_events(
        _FLAG_KINDS[record_type], records, serials, context,
        pipe=_pipe(records["src"]), dst_pipe=_pipe(records["dst"]), event_id=_u16(records["event_id"]),
    )  # fmt: skip


HARD = payload_dtype("HardSyncRecord", "src dst eventID memory v")
_CUBE_PIPES = (PipeType.PIPE_MTE1, PipeType.PIPE_M, PipeType.PIPE_FIX)


def _valid_hard(records: np.ndarray, context: BlockContext) -> np.ndarray:
    """msSanitizer's check of hset/hwait: cube side only, between MTE1/M/FIX, on an on-chip buffer other than
    UB, v <= 1, event id <= 3; anything else is dropped (with an error log there, a problem line here)."""
    ok = np.isin(records["src"], _CUBE_PIPES) & np.isin(records["dst"], _CUBE_PIPES)
    memory = records["memory"]
    ok &= (memory < MemType.INVALID) & (memory != MemType.GM) & (memory != MemType.UB)
    ok &= (records["v"] <= 1) & (records["event_id"] <= 3)
    return ok & (context.block_type != BlockType.AIV)


def _hard(
    kind: EventKind, record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext
) -> np.ndarray:
    ok = _valid_hard(records, context)
    if not ok.all():
        drop(context, f"{RecordType(record_type).name} records dropped: not a valid hardware flag", int((~ok).sum()))
        records, serials = subset(records, serials, ok)
    return sync_events(
        kind, records, serials, context,
        pipe=_pipe(records["src"]), dst_pipe=_pipe(records["dst"]), event_id=_u16(records["event_id"]),
    )  # fmt: skip


@converts(R.HSET_FLAG, R.HSET_FLAGI, dtype=HARD)
def hset_flag(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    return _hard(EventKind.HSET_FLAG, record_type, records, serials, context)


@converts(R.HWAIT_FLAG, R.HWAIT_FLAGI, dtype=HARD)
def hwait_flag(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    return _hard(EventKind.HWAIT_FLAG, record_type, records, serials, context)


BARRIER = payload_dtype("PipeBarrierRecord", "pipe")
_BARRIER_SATURATED = {"pipe": ("pipe", 255)}


@converts(R.PIPE_BARRIER, dtype=BARRIER)
def pipe_barrier(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    # pipe_barrier(PIPE_ALL) stays one event: the detectors expand it (every pipe waits for PIPE_S).
    events = base.sync_compiled(EventKind.PIPE_BARRIER, records, serials, context, _BARRIER_SATURATED)
    if events is not None:
        return events
    return sync_events(EventKind.PIPE_BARRIER, records, serials, context, pipe=_pipe(records["pipe"]))


# Windows of these records convert straight from their words (slots.DirectPlans), as sync_compiled does
base.direct(lambda t, dtype, context: base.sync_plan(_FLAG_KINDS[t], dtype, context, _FLAG_SATURATED), *_FLAG_KINDS)
base.direct(lambda t, dtype, context: base.sync_plan(EventKind.PIPE_BARRIER, dtype, context, _BARRIER_SATURATED),
            R.PIPE_BARRIER)  # fmt: skip


FFTS = payload_dtype("FftsSyncRecord", "dst mode flagID=flag")


def _sub_blocks(context: BlockContext) -> int:
    # msSanitizer overwrites the record's vecSubBlockDim with the block head's; 2 when a head says nothing.
    return context.vec_sub_block_dim or 2


@converts(R.FFTS_SYNC, R.FFTS_SYNC_V, dtype=FFTS)
def ffts_sync(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    # msSanitizer adds a pipe_barrier on the set's pipe; sanitizerd's detectors treat CROSS_SET as one already.
    return sync_events(
        EventKind.CROSS_SET, records, serials, context, pipe=_pipe(records["dst"]), event_id=records["flag"],
        mode=records["mode"], block_num=_sub_blocks(context),
    )  # fmt: skip


WAIT_DEV = payload_dtype("WaitFlagDevRecord", "flagID=flag")
WAIT_DEV_PIPE = payload_dtype("WaitFlagDevPipeRecord", "flagID=flag pipe")


@converts(R.WAIT_FLAG_DEV, dtype=WAIT_DEV)
def wait_flag_dev(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    return sync_events(EventKind.CROSS_WAIT, records, serials, context, pipe=Pipe.S, event_id=records["flag"])


@converts(R.WAIT_FLAG_DEV_PIPE, R.WAIT_FLAG_DEVI_PIPE, R.WAIT_FLAG_DEV_PIPE_V, R.WAIT_FLAG_DEVI_PIPE_V,
          dtype=WAIT_DEV_PIPE)  # fmt: skip
def wait_flag_dev_pipe(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    return sync_events(
        EventKind.CROSS_WAIT, records, serials, context, pipe=_pipe(records["pipe"]), event_id=records["flag"]
    )


INTRA = payload_dtype("IntraBlockSyncRecord", "pipe syncID")


@converts(R.SET_INTRA_BLOCK, R.SET_INTRA_BLOCKI, R.SET_INTRA_BLOCK_V, R.SET_INTRA_BLOCKI_V, dtype=INTRA)
def set_intra_block(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    return sync_events(
        EventKind.CROSS_SET, records, serials, context, pipe=_pipe(records["pipe"]),
        event_id=_u16(records["sync_id"]), mode=4, block_num=_sub_blocks(context),
    )  # fmt: skip


@converts(R.WAIT_INTRA_BLOCK, R.WAIT_INTRA_BLOCKI, R.WAIT_INTRA_BLOCK_V, R.WAIT_INTRA_BLOCKI_V, dtype=INTRA)
def wait_intra_block(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    return sync_events(
        EventKind.CROSS_WAIT, records, serials, context, pipe=_pipe(records["pipe"]),
        event_id=_u16(records["sync_id"]), mode=4,
    )  # fmt: skip


ATOMIC = payload_dtype("AtomicModeRecord", "mode")
# AtomicMode: NONE=0 turns atomic mode off; F32, F16, S16, S32, S8, BF16 (1-6) on; SUM/MAX/MIN (7-9) only choose
# the operation and leave the state as it was, so they make no event.
ATOMIC_ON_OFF = 6


@converts(R.SET_ATOMIC, dtype=ATOMIC)
def set_atomic(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    keep = records["mode"] <= ATOMIC_ON_OFF
    records, serials = subset(records, serials, keep)
    return sync_events(
        EventKind.SET_ATOMIC, records, serials, context, pipe=Pipe.S, mode=(records["mode"] != 0).astype(np.uint8)
    )


SOFT = payload_dtype("SoftSyncRecord", "waitCoreID=wait_core usedCores eventID isAIVOnly=aiv_only")


def _i16(values: np.ndarray) -> np.ndarray:
    return np.clip(values, 0, 0xFFFF).astype(np.uint16)


@converts(R.IB_SET_STUB, dtype=SOFT)
def ib_set(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    return sync_events(
        EventKind.SOFT_SET, records, serials, context, pipe=Pipe.S, dst_pipe=Pipe.S,
        event_id=_i16(records["event_id"]),
    )  # fmt: skip


@converts(R.IB_WAIT_STUB, dtype=SOFT)
def ib_wait(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    return sync_events(
        EventKind.SOFT_WAIT, records, serials, context, pipe=Pipe.S, dst_pipe=Pipe.S,
        event_id=_i16(records["event_id"]), address=records["wait_core"],
    )  # fmt: skip


@converts(R.SYNC_ALL_STUB, dtype=SOFT)
def sync_all(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    # usedCores <= 0: every block of the type takes part (the native event's 0).
    return sync_events(
        EventKind.SOFT_SYNC_ALL, records, serials, context, pipe=Pipe.S, dst_pipe=Pipe.S,
        address=np.maximum(records["used_cores"], 0).astype(np.uint64),
    )  # fmt: skip


BUF = payload_dtype("BufRecord", "pipe bufId mode")


@converts(R.GET_BUF, R.GET_BUFI, R.GET_BUF_V, R.GET_BUFI_V, dtype=BUF)
def get_buf(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    # BufMode: BLOCK_MODE 0 waits for the buffer's release, anything else does not (GET_BUF_NONBLOCK)
    return sync_events(
        EventKind.GET_BUF, records, serials, context, pipe=_pipe(records["pipe"]), event_id=_u16(records["buf_id"]),
        mode=(records["mode"] != 0).astype(np.uint8) * GET_BUF_NONBLOCK,
    )  # fmt: skip


@converts(R.RLS_BUF, R.RLS_BUFI, R.RLS_BUF_V, R.RLS_BUFI_V, dtype=BUF)
def rls_buf(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    return sync_events(
        EventKind.RLS_BUF, records, serials, context, pipe=_pipe(records["pipe"]), event_id=_u16(records["buf_id"])
    )
