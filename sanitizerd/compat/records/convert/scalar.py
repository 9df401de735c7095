"""Scalar loads and stores, scalar atomics and reductions, LDVA and DC_PRELOAD -> memory events (reference §1.7).

Scalar accesses run on msSanitizer's scalar-compute pipe (PIPE_S_CAL) and must be aligned to their own width
(``alignSize``); SCALAR_RED/SCALAR_ATOM are a read and a write of GM on PIPE_S aligned to their size.
"""

from __future__ import annotations

import numpy as np

from sanitizerd.compat.records.convert.base import BlockContext, converts, drop, interleave, payload_dtype, runs, subset
from sanitizerd.compat.records.types import RecordType
from sanitizerd_protocol.records import EventKind, Pipe, Space

R = RecordType

LOAD_STORE = payload_dtype("LoadStoreRecord", "addr size space dataType alignSize=align")
READS = (R.LOAD, R.LD, R.LD_IO, R.LDP, R.LD_DEV)
WRITES = (R.STORE, R.ST, R.ST_IO, R.STP, R.STI, R.STI_IO, R.ST_ATOMIC, R.STI_ATOMIC, R.ST_DEV)
MAX_ACCESS = 0xFFFFFFFF  # the event's block size is u32; a scalar access is a few bytes, so more is damage


@converts(*READS, *WRITES, dtype=LOAD_STORE)
def load_store(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    # The record's AddressSpace is numbered as Space; anything else (INVALID, hostile) is dropped.
    ok = (records["space"] >= 0) & (records["space"] <= Space.FB) & (records["size"] <= MAX_ACCESS)
    if not ok.all():
        drop(context, f"{R(record_type).name} records dropped: no such address space or size", int((~ok).sum()))
        records, serials = subset(records, serials, ok)
    kind = EventKind.READ if record_type in READS else EventKind.WRITE
    size = records["size"].astype(np.int64)
    return runs(
        kind, records["space"].astype(np.uint8), records["addr"], size, 1, 0, records, serials, context,
        pipe=Pipe.S_CAL, unit=np.maximum(size, 1), align=records["align"],
    )  # fmt: skip


RED = payload_dtype("LoadStoreRecord", "addr size space=is_atom:u1")


@converts(R.SCALAR_RED, R.SCALAR_ATOM, dtype=RED)
def scalar_red(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    """A read-modify-write of GM (msSanitizer's MEMCPY_BLOCKS access): a read and a write, aligned to the size."""
    ok = records["size"] <= MAX_ACCESS
    if not ok.all():
        drop(context, f"{R(record_type).name} records dropped: size out of range", int((~ok).sum()))
        records, serials = subset(records, serials, ok)
    size = records["size"].astype(np.int64)
    align = np.minimum(size, 0xFFFF)
    unit = np.maximum(size, 1)
    reads = runs(EventKind.READ, Space.GM, records["addr"], size, 1, 0, records, serials, context, pipe=Pipe.S,
                 unit=unit, align=align)  # fmt: skip
    writes = runs(EventKind.WRITE, Space.GM, records["addr"], size, 1, 0, records, serials, context, pipe=Pipe.S,
                  unit=unit, align=align)  # fmt: skip
    return interleave(reads, writes)


@converts(R.LDVA, dtype=LOAD_STORE)
def ldva(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    """A vector-register load from UB on PIPE_V: ``size`` bytes at ``addr`` (the record's space is not used)."""
    ok = records["size"] <= MAX_ACCESS
    if not ok.all():
        drop(context, "LDVA records dropped: size out of range", int((~ok).sum()))
        records, serials = subset(records, serials, ok)
    size = records["size"].astype(np.int64)
    return runs(
        EventKind.READ, Space.UB, records["addr"], size, 1, 0, records, serials, context, pipe=Pipe.V,
        unit=np.maximum(size, 1), align=records["align"],
    )  # fmt: skip


DC_PRELOAD = payload_dtype("DcPreloadRecord", "addr offset")


@converts(R.DC_PRELOAD, dtype=DC_PRELOAD)
def dc_preload(record_type: int, records: np.ndarray, serials: np.ndarray, context: BlockContext) -> np.ndarray:
    """A data-cache preload of GM at ``addr + offset``: msSanitizer makes it a zero-byte read (an address check)."""
    address = records["addr"] + records["offset"].astype(np.uint64)  # wraps like the C++ u64 sum
    events = runs(EventKind.READ, Space.GM, address, 0, 1, 0, records, serials, context, pipe=Pipe.S_CAL, unit=1,
                  align=1)  # fmt: skip
    events["block_size"] = 0
    events["block_num"] = 1
    return events
