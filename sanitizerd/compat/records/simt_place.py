"""Where a slot's SIMT sections go among its SIMD events: at their SIMT_CALL, as msSanitizer places them.

msSanitizer (26.1.0, master: ``command.cpp`` ``HandleKernelBlock``) puts each SIMT call's accesses (its
``SimtEntryRecord``s, a DYNAMIC_OP SIMT_ENTRY event on PIPE_V) right after the call's SIMT_CALL record, "to restore
the issue order", so its race check orders the call as a vector instruction issued there: the main scalar's
accesses before the SIMT_CALL are ordered before it (issuing from PIPE_S orders), and those after it race with the
threads until something orders PIPE_V before PIPE_S: a ``wait_flag(PIPE_V, PIPE_S)`` or a ``pipe_barrier(PIPE_ALL)``.
A native section is open from SIMT_START to SIMT_END and the main scalar's accesses inside it race with the threads
(detectors/_simt.py), so a section starts right after its SIMT_CALL and ends before the first of: such a sync, the
block's next SIMT_CALL (one section is open per block at a time), the slot's end.

The SIMT part follows the SIMD records in the slot, so the SIMD events from the slot's first SIMT_CALL on are held
until the slot ends (``HeldEvents``), at most ``MAX_HELD_ROWS`` of them; past that they are let go and the sections
follow the SIMD records, said in a problem line. Everything is renumbered so serials stay in stream order: a section
takes the serials after its SIMT_CALL's and the later records move up by the events put before them (msSanitizer
numbers its SIMT_ENTRY event after the SIMT_CALL too, and the thread records after every SIMD record).
"""

from __future__ import annotations

import numpy as np

from sanitizerd.compat.records.numbering import RecordTable
from sanitizerd.compat.records.types import RecordType
from sanitizerd_protocol.records import EVENT_DTYPE, FLAG_SIMT_ENTRY, EventKind, Pipe

# SIMD events (and SIMT_CALL records) a slot holds back from its first SIMT_CALL until its SIMT part is read:
# 28 MiB of events. A real vf-calling block has far fewer records after its first call.
MAX_HELD_ROWS = 1 << 19
PC_WORDS = 4  # SIMT_CALL's payload is a Location {fileNo, lineNo, pc, ...}: its pc is the payload's third u64

_NO_SERIAL = np.iinfo(np.int64).max


def simt_call_types(table: RecordTable) -> np.ndarray:
    """The wire values this release numbers SIMT_CALL with (none before 26.1.0)."""
    wire = table.wire_values.get(int(RecordType.SIMT_CALL))
    return np.array([] if wire is None else [wire], dtype=np.uint32)


class HeldEvents:
    """A slot's SIMD events from its first SIMT_CALL on, and every SIMT_CALL's serial and pc, until the slot ends."""

    def __init__(self, call_types: np.ndarray) -> None:
        self.call_types = call_types
        self.parts: list[np.ndarray] = []
        self.call_serials: list[np.ndarray] = []
        self.call_pcs: list[np.ndarray] = []
        self.rows = 0
        self.holding = False
        self.let_go = 0  # events released unplaced when the bound was passed (0: never)

    def route(self, events: np.ndarray, words: np.ndarray, path: np.ndarray, serials: np.ndarray) -> np.ndarray:
        """What of ``events`` (the records ``path`` of ``words``, numbered ``serials``) goes on now; the rest is
        held."""
        if self.let_go or not self.call_types.size:
            return events
        calls = np.flatnonzero(np.isin(words[path], self.call_types))
        if calls.size:
            at = path[calls].astype(np.int64) + 1 + PC_WORDS
            pcs = words[at].astype(np.uint64) | (words[at + 1].astype(np.uint64) << np.uint64(32))
            self.call_serials.append(serials[calls].astype(np.int64))
            self.call_pcs.append(pcs)
        out = events
        if not self.holding:
            if not calls.size:
                return events
            self.holding = True
            cut = int(np.searchsorted(events["serial"], serials[calls[0]], side="right"))
            out, events = events[:cut], events[cut:]
        else:
            out = events[:0]
        self.parts.append(events)
        self.rows += events.size + calls.size
        if self.rows > MAX_HELD_ROWS:  # let them all go, in order; the sections will follow the SIMD records
            out = np.concatenate([out, *self.parts])
            self.let_go = max(self.rows, 1)
            self.parts, self.call_serials, self.call_pcs = [], [], []
            self.holding = False
        return out

    def place(
        self, sections: np.ndarray, last_serial: int, ordinals: np.ndarray | None = None
    ) -> tuple[np.ndarray, int]:
        """The held events with ``sections`` (``simt.section_events``, numbered from ``last_serial + 1``) put in
        place, all renumbered; and how many sections had no SIMT_CALL (they follow the SIMD records).
        ``ordinals``: per section, the slot's SIMT_CALL it follows and ends at (a call's entry records, which
        msSanitizer reads at the n-th SIMT_CALL), or -1: placed by its pc, as above."""
        held = np.concatenate(self.parts) if self.parts else np.empty(0, dtype=EVENT_DTYPE)
        self.parts = []
        kind = sections["kind"]
        starts = np.flatnonzero(kind == EventKind.SIMT_START)
        if not starts.size or self.let_go:  # let go: the SIMD events went on unheld, the sections follow them
            return np.concatenate([held, sections]), 0
        call_serial = np.concatenate(self.call_serials) if self.call_serials else np.empty(0, dtype=np.int64)
        call_pc = np.concatenate(self.call_pcs) if self.call_pcs else np.empty(0, dtype=np.uint64)
        start, end, matched = _section_bounds(held, sections["pc"][starts], call_serial, call_pc, last_serial)
        if ordinals is not None and ordinals.size:
            by_call = ordinals >= 0
            at_call = by_call & (ordinals < call_serial.size)
            serial = call_serial[np.minimum(ordinals, max(call_serial.size - 1, 0))] if call_serial.size else start
            start = np.where(at_call, serial, np.where(by_call, last_serial, start))
            end = np.where(by_call, start, end)
            matched = np.where(by_call, at_call, matched)
        # Each section event's place: after record ``after`` (START and the threads' rows at the call, END at the
        # end); sections keep their call order, the unmatched ones last.
        section = np.cumsum(kind == EventKind.SIMT_START) - 1
        after = np.where(kind == EventKind.SIMT_END, end[section], start[section])
        rank = np.lexsort((start, ~matched)).argsort()
        order = np.lexsort((np.arange(kind.size), rank[section]))
        inserted, after = sections[order], after[order]
        keys = np.concatenate([2 * held["serial"].astype(np.int64), 2 * after + 1])
        merged = np.concatenate([held, inserted])[np.argsort(keys, kind="stable")]
        # Renumber: the j-th inserted event follows record ``after_j`` and the j events inserted before it; a
        # record moves up by the events inserted before it.
        is_inserted = np.argsort(keys, kind="stable") >= held.size
        after_sorted = np.sort(after)
        simd = ~is_inserted
        merged["serial"][simd] = merged["serial"][simd] + np.searchsorted(
            after_sorted, merged["serial"][simd].astype(np.int64), side="left"
        ).astype(np.uint64)
        merged["serial"][is_inserted] = (after_sorted + 1 + np.arange(after_sorted.size)).astype(np.uint64)
        _one_serial_per_call(merged, is_inserted)
        return merged, int((~matched).sum())


def _one_serial_per_call(merged: np.ndarray, is_inserted: np.ndarray) -> None:
    """A call's entry records are one instruction (msSanitizer's SIMT_ENTRY event): they take the first one's serial
    (a run of them is a section's, between its SIMT_START and SIMT_END)."""
    entry = is_inserted & ((merged["flags"] & FLAG_SIMT_ENTRY) != 0) & (merged["kind"] <= EventKind.WRITE)
    if not entry.any():
        return
    first = entry & ~np.concatenate([[False], entry[:-1]])
    run = np.cumsum(first) - 1
    merged["serial"][entry] = merged["serial"][first][run[entry]]


def _section_bounds(
    held: np.ndarray, section_pcs: np.ndarray, call_serial: np.ndarray, call_pc: np.ndarray, last_serial: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per section: the record it starts after (its pc's first SIMT_CALL), the record it ends after, and whether a
    SIMT_CALL of its pc was seen (if not, both are ``last_serial``)."""
    pcs, first = np.unique(call_pc, return_index=True)  # a loop's calls from one pc merged into one section
    at = np.minimum(np.searchsorted(pcs, section_pcs), max(pcs.size - 1, 0))
    matched = (pcs[at] == section_pcs) if pcs.size else np.zeros(section_pcs.size, dtype=bool)
    call = first[at] if pcs.size else np.zeros(section_pcs.size, dtype=np.int64)
    start = np.where(matched, call_serial[call] if call_serial.size else 0, last_serial).astype(np.int64)
    following = np.append(call_serial, _NO_SERIAL)[np.minimum(call + 1, call_serial.size)]
    kind, pipe = held["kind"], held["pipe"]
    to_scalar = np.isin(held["dst_pipe"], (Pipe.S, Pipe.S_CAL))
    orders = ((kind == EventKind.WAIT_FLAG) & (pipe == Pipe.V) & to_scalar) | (
        (kind == EventKind.PIPE_BARRIER) & (pipe == Pipe.ALL)
    )
    syncs = held["serial"][orders].astype(np.int64)
    sync_at = np.searchsorted(syncs, start, side="right")
    next_sync = np.append(syncs, _NO_SERIAL)[sync_at]
    closes = np.minimum(following, next_sync)
    end = np.where(matched & (closes != _NO_SERIAL), closes - 1, last_serial)
    return start, np.maximum(end, start), matched
