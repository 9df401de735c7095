"""Synchronization records -> sync events, with the native semantics of ``sanitizerd.protocol.records``.

msSanitizer's pre-processing (reference §1.8) that sanitizerd's detectors already do from these events is not
repeated here: PIPE_S -> PIPE_S_CAL renaming, pipe_barrier(PIPE_ALL) fan-out, atomic-mode stamping, in-pipe sync
inference.
"""

from __future__ import annotations

import numpy as np

from sanitizerd.compat.convert.base import BlockContext, converts, record_dtype, sync_events
from sanitizerd.compat.record_types import RecordType
from sanitizerd.protocol.records import EventKind

R = RecordType

SYNC = record_dtype(56, 0, {"src": ("<u4", 32), "dst": ("<u4", 36), "event_id": ("<u8", 40), "generated": ("u1", 48)})


def _pipe(values: np.ndarray) -> np.ndarray:
    """A PipeType from a record as the u8 event field; out-of-range values (hostile or newer) become 255, which
    no detector treats as a pipe of its own."""
    return np.where(values < 256, values, 255).astype(np.uint8)


def _u16(values: np.ndarray) -> np.ndarray:
    return np.minimum(values, 0xFFFF).astype(np.uint16)


@converts(R.SET_FLAG, R.SET_FLAGI, R.SET_FLAG_V, R.SET_FLAGI_V, dtype=SYNC)
def set_flag(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    return sync_events(
        EventKind.SET_FLAG, records, serials, context,
        pipe=_pipe(records["src"]), dst_pipe=_pipe(records["dst"]), event_id=_u16(records["event_id"]),
    )  # fmt: skip


@converts(R.WAIT_FLAG, R.WAIT_FLAGI, R.WAIT_FLAG_V, R.WAIT_FLAGI_V, dtype=SYNC)
def wait_flag(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    return sync_events(
        EventKind.WAIT_FLAG, records, serials, context,
        pipe=_pipe(records["src"]), dst_pipe=_pipe(records["dst"]), event_id=_u16(records["event_id"]),
    )  # fmt: skip
