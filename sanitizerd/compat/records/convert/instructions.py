"""msSanitizer's ``instrName`` (master of August 2026: the vector records' InstrName byte, in what was padding) ->
the events' ``instr``, and, for memcheck's register trace, the mask each named record ran with as observed
SET_REGISTER events just before its accesses.

The converters read the reference release's structs, which have no ``instrName``: the record table adds the member
as ``instr`` to a converter's dtype where the release's struct has it (``numbering.record_table``), and this step
runs after any converter, so no converter changes. The mask travels on its own records (``vectorMask``,
``maskMode``); our wire says it with the block's registers (docs/protocol.md §7.4), so each named record gives three
observed values (VECTOR_MASK_0, VECTOR_MASK_1, CTRL with the mode in bit 56), only when the session traces: they
cost three events a vector record, and registercheck ignores them (the kernel did not write them).
"""

from __future__ import annotations

import numpy as np

from sanitizerd.compat.records.convert.base import BlockContext
from sanitizerd_protocol.records import (
    CTRL_MASK_MODE_BIT,
    EVENT_DTYPE,
    REGISTER_OBSERVED,
    EventKind,
    Pipe,
    Register,
    empty_events,
)

_MASK_FIELDS = ("mask0", "mask1", "mask_mode")
_OBSERVED = (Register.VECTOR_MASK_0, Register.VECTOR_MASK_1, Register.CTRL)


def name_instructions(
    events: np.ndarray, records: np.ndarray, serials: np.ndarray, context: BlockContext
) -> np.ndarray:
    """``events`` (of ``records``, numbered ``serials`` in increasing order) with each memory event's ``instr`` its
    record's instrName, and with the observed masks of the named records when ``context.trace_registers``."""
    names = records.dtype.names or ()
    # A record whose mask this converter does not read is left unnamed: named, it would be traced with the mask of
    # the block's previous named record.
    if "instr" not in names or not set(_MASK_FIELDS) <= set(names) or not events.size or not records.size:
        return events
    record = np.searchsorted(serials, events["serial"])
    record = np.minimum(record, serials.size - 1)
    own = serials[record] == events["serial"]  # every event is its record's; a stray one keeps its instr
    memory = own & (events["kind"] <= EventKind.WRITE)
    events["instr"] = np.where(memory, records["instr"][record], events["instr"])
    if not context.trace_registers:
        return events
    named = np.flatnonzero(records["instr"] != 0)
    if not named.size:
        return events
    rows = records[named]
    observed = empty_events(3 * named.size)
    values = (
        rows["mask0"],
        rows["mask1"],
        (rows["mask_mode"].astype(np.uint64) & np.uint64(1)) << np.uint64(CTRL_MASK_MODE_BIT),
    )
    for i, (reg, value) in enumerate(zip(_OBSERVED, values, strict=True)):
        part = observed[i::3]
        part["kind"] = EventKind.SET_REGISTER
        part["event_id"] = reg
        part["address"] = value
        part["mode"] = REGISTER_OBSERVED
        part["pipe"] = Pipe.S
        part["serial"] = serials[named]
        part["pc"] = rows["pc"]
        part["block_id"] = rows["block_id"]
        part["block_type"] = context.block_type
        part["block_size"] = 0
    both = np.concatenate([observed, events.astype(EVENT_DTYPE, copy=False)])
    return both[np.argsort(both["serial"], kind="stable")]  # each record's observed values before its accesses
