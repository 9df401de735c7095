"""msSanitizer's SimtEntryRecords (950 family, 26.1.0 and master) turned into native events, sans I/O.

After a SIMT chip's thread areas, each SIMT call of the block has a ``SimtEntryBlockHead`` and its
``recordWriteCount`` ``SimtEntryRecord``s: the device's shadow memory of the call at its end
(``CopyShadowMemoryToMemInfo`` in ``csrc/plugin/shadow_memory_online.h``), one record per run of bytes of one
state: ``addr``, ``size`` and a ``status`` word (``record_defs.h``): the thread id in bits 0-10, the byte's state
in 11-14 (READ 1 and GLOBAL_READ 2 are reads, anything else a write: ``IsReadStatus``), UB in bit 30 (else GM),
and the low 16 bits of the pc in 32-47.
msSanitizer's host (``command.cpp`` ``HandleKernelBlock``, ``kernel_block.cpp`` ``ParseSimtEntryRecord``) reads the
n-th head at the block's n-th SIMT_CALL and puts its records right after that call as DYNAMIC_OP SIMT_ENTRY events on
PIPE_V (``record_parse.cpp`` ``ParseRecordDynamic``): its race check orders them as a vector instruction issued
there, against the block's DMA, vector and scalar pipes, and its memcheck/initcheck take them as the threads'
accesses without a bounds check.

Here each record becomes one native ``READ``/``WRITE`` on PIPE_V with ``FLAG_SIMT_ENTRY`` and ``thread`` = its thread
id + 1, all of one call sharing one serial (one instruction, as msSanitizer's event). A call's records sit in a
section of their own (SIMT_START with the head's dims, the records, SIMT_END), placed by ``simt_place`` right after
the call's SIMT_CALL, so a report can name each record's thread by the dims of its own call. Nothing read from the
client is trusted: records past the slot's limit, of a call whose head was not kept, of dims out of range, of a
thread past the dims, or of no bytes are refused and counted, never read as something else.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sanitizerd.compat import wire
from sanitizerd.compat.records.simt import SimtCall
from sanitizerd_protocol.records import (
    FLAG_SIMT_ENTRY,
    MAX_SIMT_THREADS,
    EventKind,
    Pipe,
    Space,
    empty_events,
)

MAX_ENTRY_RECORDS = 1 << 20  # per slot: a call's records are runs of bytes of one state, far fewer in practice
# The status word (record_defs.h, OnlineShadowMemory): thread id, byte state, memory type, pc
_THREAD_ID_MASK = np.uint64(0x7FF)
_STATE_SHIFT, _STATE_MASK = np.uint64(11), np.uint64(0xF)
_UB_BIT = np.uint64(30)
_PC_SHIFT, _PC_MASK = np.uint64(32), np.uint64(0xFFFF)
_READ_STATES = (1, 2)  # MemoryByteStatus READ, GLOBAL_READ: IsReadStatus; DEFAULT, WRITE and RACE are writes
_FIELDS = ("addr", "status", "size")


def entry_layout(layout: wire.Layout) -> wire.Layout | None:
    """The release's SimtEntryRecord where it has the fields read here (else its records are counted only)."""
    return layout if all(layout.has(name) for name in _FIELDS) else None


@dataclass(slots=True)
class EntryRecords:
    """A slot's SimtEntryRecords as they stream past, each with the ordinal of its call (its entry head)."""

    layout: wire.Layout
    call: list[np.ndarray] = field(default_factory=list)
    addr: list[np.ndarray] = field(default_factory=list)
    status: list[np.ndarray] = field(default_factory=list)
    size: list[np.ndarray] = field(default_factory=list)
    kept: int = 0
    refused: dict[str, int] = field(default_factory=dict)

    def refuse(self, reason: str, count: int) -> None:
        if count > 0:
            self.refused[reason] = self.refused.get(reason, 0) + int(count)

    def take(self, data: memoryview, offset: int, count: int, call: int) -> None:
        """``count`` whole records at ``offset`` of ``data``, of call ``call`` (-1: a head not kept)."""
        if call < 0:
            self.refuse("SIMT entry records of a SIMT call past the heads sanitizerd keeps per slot", count)
            return
        room = MAX_ENTRY_RECORDS - self.kept
        taken = min(count, max(room, 0))
        self.refuse(f"SIMT entry records past the slot's limit of {MAX_ENTRY_RECORDS}", count - taken)
        if not taken:
            return
        records = np.frombuffer(data, dtype=self.layout.dtype, count=taken, offset=offset)
        self.call.append(np.full(taken, call, dtype=np.int64))
        self.addr.append(records["addr"].astype(np.uint64))
        self.status.append(records["status"].astype(np.uint64))
        self.size.append(records["size"].astype(np.uint32))
        self.kept += taken

    def sections(
        self, calls: list[SimtCall], block_id: int, block_type: int, first_serial: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Each call's records as one section (SIMT_START with its dims and mainScalarPc, the records, SIMT_END),
        in call order, numbered from ``first_serial`` (a call's records share one serial); and each section's
        call ordinal (which SIMT_CALL of the slot it follows). Vectorised: no step per record."""
        if not self.kept:
            return empty_events(0), np.zeros(0, dtype=np.int64)
        call = np.concatenate(self.call)
        addr, status, size = (np.concatenate(part) for part in (self.addr, self.status, self.size))
        dims = np.array([c.dims for c in calls], dtype=np.int64).reshape(-1, 3)[call]
        total = dims.prod(1)
        dims_ok = (dims.min(1) >= 1) & (total <= MAX_SIMT_THREADS)
        self.refuse("SIMT entry records of a SIMT call whose thread dims are out of range (a zero, or over 2048 "
                    "threads)", int(np.count_nonzero(~dims_ok)))  # fmt: skip
        thread = (status & _THREAD_ID_MASK).astype(np.int64)
        thread_ok = dims_ok & (thread < total)
        self.refuse("SIMT entry records whose thread id is past their call's dims",
                    int(np.count_nonzero(dims_ok & ~thread_ok)))  # fmt: skip
        sized = thread_ok & (size > 0)
        self.refuse("SIMT entry records of no bytes", int(np.count_nonzero(thread_ok & ~sized)))
        index = np.flatnonzero(sized)
        self.call, self.addr, self.status, self.size, self.kept = [], [], [], [], 0  # made into events once
        if not index.size:
            return empty_events(0), np.zeros(0, dtype=np.int64)
        index = index[np.argsort(call[index], kind="stable")]
        ordinals, counts = np.unique(call[index], return_counts=True)
        starts = np.concatenate([[0], np.cumsum(counts + 2)[:-1]])  # each section: START, its records, END
        section_of = np.repeat(np.arange(ordinals.size), counts)
        place = starts[section_of] + 1 + np.arange(index.size) - np.repeat(np.cumsum(counts) - counts, counts)
        events = empty_events(index.size + 2 * ordinals.size)
        events["pipe"] = Pipe.S
        events["block_id"] = block_id
        events["block_type"] = block_type
        events["serial"] = np.arange(events.size, dtype=np.uint64) + np.uint64(first_serial)
        head_dims = np.array([c.dims for c in calls], dtype=np.uint64).reshape(-1, 3)[ordinals]
        events["kind"][starts] = EventKind.SIMT_START
        x, y, z = head_dims[:, 0], head_dims[:, 1], head_dims[:, 2]
        events["address"][starts] = x | y << np.uint64(16) | z << np.uint64(32)  # simt_dims_address
        events["pc"][starts] = np.array([calls[i].main_pc for i in ordinals.tolist()], dtype=np.uint64)
        events["kind"][starts + counts + 1] = EventKind.SIMT_END
        inner = events[place]
        state = (status[index] >> _STATE_SHIFT) & _STATE_MASK
        inner["kind"] = np.where(np.isin(state, _READ_STATES), EventKind.READ, EventKind.WRITE)
        inner["space"] = np.where((status[index] >> _UB_BIT) & np.uint64(1), Space.UB, Space.GM)
        inner["pipe"] = Pipe.V
        inner["thread"] = (thread[index] + 1).astype(np.uint16)
        inner["address"] = addr[index]
        inner["block_size"] = size[index]
        inner["align"] = 1  # the device judged alignment; msSanitizer's memcheck skips these records' checks
        inner["flags"] = FLAG_SIMT_ENTRY
        inner["pc"] = (status[index] >> _PC_SHIFT) & _PC_MASK
        inner["serial"] = events["serial"][starts[section_of] + 1]  # one instruction per call
        events[place] = inner
        return events, ordinals
