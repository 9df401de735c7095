"""Control-register writes (SET_VECTOR_MASK_0/1, SET_CTRL, ...) -> SET_REGISTER events for registercheck."""

from __future__ import annotations

import numpy as np

from sanitizerd.compat.records.convert.base import BlockContext, converts, payload_dtype, sync_events
from sanitizerd.compat.records.types import RecordType
from sanitizerd_protocol.records import EventKind, Pipe, Register

R = RecordType

# RegisterSetRecord {Location; RegisterPayload {u64 regValType; u64 regVal; i64 regIdx}}: the value is kept as
# the raw 64 bits whatever its type (registercheck compares it with the default bit pattern).
REGISTER_SET = payload_dtype(
    "RegisterSetRecord", "regPayLoad.regValType=value_type regPayLoad.regVal=value regPayLoad.regIdx=core_slot"
)

REGISTER_OF = {
    R.SET_VECTOR_MASK_0: Register.VECTOR_MASK_0,
    R.SET_VECTOR_MASK_1: Register.VECTOR_MASK_1,
    R.SET_CTRL: Register.CTRL,
    R.SET_FFTS_BASE_ADDR: Register.FFTS_BASE_ADDR,
    R.SET_FPC: Register.FPC,
    R.SET_QUANT_PRE: Register.QUANT_PRE,
    R.SET_QUANT_POST: Register.QUANT_POST,
    R.SET_LRELU_ALPHA: Register.LRELU_ALPHA,
}


@converts(*REGISTER_OF, dtype=REGISTER_SET)
def set_register(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    return sync_events(
        EventKind.SET_REGISTER, records, serials, context, pipe=Pipe.S, event_id=int(REGISTER_OF[R(record_type)]),
        address=records["value"],
    )  # fmt: skip
