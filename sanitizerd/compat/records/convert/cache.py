"""DCCI (master on: data cache clean and invalidate) -> DCCI events, for racecheck's --check-dcci.

The record says which line (``addr`` in ``space``) or the whole data cache (``entire``), and what it cleans
(``type``, msSanitizer's ``DcciDstType``); the April reference has no such record, so its layout is measured on the
first release that does.
"""

from __future__ import annotations

import numpy as np

from sanitizerd.compat.records.convert.base import BlockContext, converts, drop, payload_dtype, subset, sync_events
from sanitizerd.compat.records.types import RecordType
from sanitizerd_protocol.records import DCCI_ENTIRE, DCCI_SINGLE_LINE, DcciTarget, EventKind, Pipe, Space

FIRST_WITH_DCCI = "mssanitizer-62df0173"
DCCI = payload_dtype("DcciRecord", "addr space entire type=target", layout=FIRST_WITH_DCCI)


@converts(RecordType.DCCI, dtype=DCCI, layout=FIRST_WITH_DCCI)
def dcci(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    # Values msSanitizer's enums do not name are damage: such a record would be read as another dcci than it is.
    ok = (records["space"] >= 0) & (records["space"] <= Space.FB)
    ok &= (records["entire"] <= DCCI_ENTIRE) & (records["target"] <= max(DcciTarget))
    if not ok.all():
        drop(context, "DCCI records dropped: no such address space, extent or target", int((~ok).sum()))
        records, serials = subset(records, serials, ok)
    events = sync_events(
        EventKind.DCCI, records, serials, context, pipe=Pipe.S, address=records["addr"],
        mode=np.where(records["entire"] == DCCI_ENTIRE, DCCI_ENTIRE, DCCI_SINGLE_LINE), event_id=records["target"],
    )  # fmt: skip
    events["space"] = records["space"]
    return events
