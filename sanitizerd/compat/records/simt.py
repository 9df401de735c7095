"""msSanitizer's SIMT thread areas (950 family, from e2feea4b) turned into native SIMT events, sans I/O.

A SIMT chip's slot ends with 2 048 thread areas (area i is thread i, its linear id, x fastest), each a
``SimtRecordBlockHead`` and ``simtErrorInfo.size`` bytes of ``[u32 RecordType][payload]`` records, then one
``SimtEntryBlockHead`` per SIMT call, which gives the call's thread dims and its ``mainScalarPc`` (the same
``mainScalarPc`` every record's ``SimtThreadLocation`` of that call carries). The records a thread area can hold:
loads and stores (``SimtLoadStoreRecord``), atomics (``SimtAtomRecord``), ``__syncthreads()`` and the thread's end
(``SimtEmptyRecord``), and the device's own findings (ONLINE_ERROR, variable length). A device finding becomes
the native events our detectors judge it from: a race its two accesses (racecheck), an illegal or misaligned
address the access its record carries (memcheck), a thread that missed a ``__syncthreads()`` the barriers every
other thread reached (synccheck), an overlap the owner's claim and the stomping write (memcheck's inter-thread
stomping); lost barrier records are said in msSanitizer's warning, never taken as clean.

Areas are walked in lockstep, one record of every area per step (a few numpy calls over at most 2 048 areas),
so a step costs the same whatever the number of threads, and no Python loop runs per record. Nothing read from
the client is trusted: a head's ``writeOffset`` past its area, a record running past it, an unknown type, a thread
location that is not its area's, a call without an entry head or with dims out of range are each refused and
counted (``problems``), never read as something else.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from sanitizerd.compat import wire
from sanitizerd_protocol.records import (
    FLAG_ATOMIC,
    FLAG_CLAIM,
    MAX_SIMT_THREADS,
    EventKind,
    Pipe,
    Space,
    empty_events,
)

MAX_SIMT_EVENTS = 1 << 20  # per slot: 2 048 threads of a few hundred accesses each; more is refused, counted
MAX_AREA_BYTES = 256 << 10  # one thread area converted whole; msSanitizer gives each a tenth of the cache / 2 048
# SimtRecordBlockHead.recordCount (what the device meant to write), .recordWriteCount (what it wrote), .writeOffset
_HEAD_MEANT, _HEAD_COUNT, _HEAD_WRITE_OFFSET = 0, 8, 24
_ONLINE_ERROR_RECORD, _ONLINE_ERROR_DESC = 32, 144  # KernelErrorRecord, KernelErrorDesc (26.1.0 and master)
_PAYLOADS = ("SimtLoadStoreRecord", "SimtAtomRecord", "SimtEmptyRecord")
_READS = ("SIMT_LDG", "SIMT_LDS", "SIMT_LDK", "SIMT_LD")
_WRITES = ("SIMT_STG", "SIMT_STS", "SIMT_STK", "SIMT_ST")
_ATOMICS = ("SIMT_ATOM", "SIMT_RED")
_EMPTIES = ("THREAD_BLOCK_BARRIER", "SIMT_END")


@dataclass(frozen=True, slots=True)
class SimtRecords:
    """A release's thread-area records: each type's number and payload struct."""

    load_store: wire.Layout
    atom: wire.Layout
    empty: wire.Layout
    types: dict[str, int]  # msSanitizer's name -> this release's number
    online_error: int
    error_record: wire.Layout | None = None  # KernelErrorRecord and KernelErrorDesc (ONLINE_ERROR), where measured
    error_desc: wire.Layout | None = None
    error_types: dict[str, int] = field(default_factory=dict)  # KernelErrorType
    # This release's DetailedDataType number -> the alignment a thread's access of it needs (1: none checked)
    alignment: np.ndarray = field(default_factory=lambda: np.ones(256, dtype=np.uint16))


# An on-device race: (the conflicting thread's access, this thread's access), as the error type names them.
_RACES = {"THREAD_RW_RACE": (EventKind.READ, EventKind.WRITE), "THREAD_WR_RACE": (EventKind.WRITE, EventKind.READ),
          "THREAD_WW_RACE": (EventKind.WRITE, EventKind.WRITE)}  # fmt: skip
# msSanitizer's host warning for SYNC_THREADS_RECORD_LOSS (sync_sanitizer.cpp ParseOnlineError), printed once
LOST_BARRIERS_TEXT = (
    "SYNC_THREADS_RECORD_LOSS findings of msSanitizer's device: the number of '__syncthreads()' instructions exceeds "
    "64. Some records were discarded, the detection result maybe unreliable!"
)
# Device findings about the access its record carries, which memcheck judges again from that access.
_OF_THE_ACCESS = ("ILLEGAL_ADDR_READ", "ILLEGAL_ADDR_WRITE", "MISALIGNED_ACCESS")
_AFTER_ITS_RECORDS = 1 << 40
_AFTER_ALL = 1 << 50  # the barriers a device-found divergence implies come after everything a thread did
MAX_MISSED_BARRIERS = 64  # per SIMT call: msSanitizer's SIMT_THREAD_MAX_PC_NUM, the barriers its device counts
_MISSED = np.dtype([("main_pc", "<u8"), ("pc", "<u8"), ("file_no", "<u8"), ("line_no", "<u8"), ("loc", "<u2", 3)])
# A SIMT thread's access is aligned by its data type (msSanitizer's GetAlignSizeByDataType), not by the address
# space's rule for vector instructions (32 B in UB); a type not named here, Default included, is not checked.
_ALIGN_BY_TYPE = {
    **dict.fromkeys(("B16", "S16", "U16", "F16", "HALF", "BF16"), 2),
    **dict.fromkeys(("B32", "S32", "U32", "FLOAT", "F16X2", "BF16X2", "F32"), 4),
    **dict.fromkeys(("B64", "S64", "U64"), 8),
    "B128": 16,
}  # a race's accesses sort after the thread's own records (their index in the area)


@functools.cache
def simt_records(layout: wire.WireLayout) -> SimtRecords | None:
    """The release's thread-area records, or None where their structs are not measured (counted, not converted)."""
    if not all(name in layout.structs for name in _PAYLOADS):
        return None
    names = (*_READS, *_WRITES, *_ATOMICS, *_EMPTIES, "ONLINE_ERROR")
    if not all(name in layout.record_types for name in names):
        return None
    return SimtRecords(
        *(layout.structs[name] for name in _PAYLOADS),
        types={name: layout.record_types[name] for name in names},
        online_error=layout.record_types["ONLINE_ERROR"],
        error_record=layout.structs.get("KernelErrorRecord"),
        error_desc=layout.structs.get("KernelErrorDesc"),
        error_types=dict(layout.kernel_error_types),
        alignment=_alignment(layout),
    )


def _alignment(layout: wire.WireLayout) -> np.ndarray:
    table = np.ones(256, dtype=np.uint16)
    for name, value in layout.detailed_data_types.items():
        if 0 <= value < table.size:
            table[value] = _ALIGN_BY_TYPE.get(name, 1)
    return table


@dataclass(slots=True)
class ThreadRows:
    """Decoded records of the thread areas seen so far, as columns (one row per access, barrier or end)."""

    thread: list[np.ndarray] = field(default_factory=list)  # area index (linear thread id)
    order: list[np.ndarray] = field(default_factory=list)  # the record's index in its area
    kind: list[np.ndarray] = field(default_factory=list)  # EventKind; SIMT_END marks the thread's end
    flags: list[np.ndarray] = field(default_factory=list)
    space: list[np.ndarray] = field(default_factory=list)
    address: list[np.ndarray] = field(default_factory=list)
    size: list[np.ndarray] = field(default_factory=list)
    align: list[np.ndarray] = field(default_factory=list)  # the access's required alignment (1: none)
    pc: list[np.ndarray] = field(default_factory=list)
    file_no: list[np.ndarray] = field(default_factory=list)
    line_no: list[np.ndarray] = field(default_factory=list)
    loc: list[np.ndarray] = field(default_factory=list)  # (x, y, z) as recorded
    main_pc: list[np.ndarray] = field(default_factory=list)
    by_loc: list[np.ndarray] = field(default_factory=list)  # the thread is its location's, not the area's
    rows: int = 0
    # The device's THREADS_ASYNC_IN_BLOCK findings, one row per thread that missed a __syncthreads(): the call's
    # mainScalarPc, the barrier's pc, file and line, and the thread's (x, y, z). Made into barrier rows by
    # section_events, where the call's dims are known.
    missed: list[np.ndarray] = field(default_factory=list)

    def add_finding_side(
        self, desc: np.ndarray, thread: np.ndarray, order: int, kind: int, flags: int, address: str, size: np.ndarray,
        place: str, loc: str, by_loc: bool,
    ) -> None:  # fmt: skip
        """One side of the device's findings ``desc`` (KernelErrorDesc rows) as access rows: its ``address`` member,
        ``size`` bytes, at the location (``place``: its pc, fileNo, lineNo) and thread (``loc``: idX..idZ) the desc
        names for that side."""
        n = desc.size
        self.thread.append(thread)
        self.order.append(np.full(n, order, dtype=np.int64))
        self.kind.append(np.full(n, kind, dtype=np.uint8))
        self.flags.append(np.full(n, flags, dtype=np.uint8))
        self.space.append(desc["space"].astype(np.uint8))
        self.address.append(desc[address].astype(np.uint64))
        self.size.append(size)
        self.align.append(np.ones(n, dtype=np.uint16))
        self.pc.append(desc[place + "pc"])
        self.file_no.append(desc[place + "fileNo"])
        self.line_no.append(desc[place + "lineNo"])
        self.loc.append(np.stack([desc[loc + "idX"], desc[loc + "idY"], desc[loc + "idZ"]], 1))
        self.main_pc.append(desc["threadLoc.mainScalarPc"])
        self.by_loc.append(np.full(n, by_loc))
        self.rows += n

    def column(self, name: str) -> np.ndarray:
        parts = getattr(self, name)
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)


class ThreadAreas:
    """Walks whole thread areas into ``ThreadRows`` and says what it refused."""

    def __init__(self, records: SimtRecords, head: int, thread_bytes: int) -> None:
        self.records = records
        self.head = head
        self.thread_bytes = thread_bytes
        self.area = head + thread_bytes
        self.rows = ThreadRows()
        self.refused: dict[str, int] = {}  # reason -> records (or areas) not converted
        self.online_errors = 0
        self.converted = 0
        step = {}
        for name in (*_READS, *_WRITES):
            step[records.types[name]] = 4 + records.load_store.size
        for name in _ATOMICS:
            step[records.types[name]] = 4 + records.atom.size
        for name in _EMPTIES:
            step[records.types[name]] = 4 + records.empty.size
        self._types = np.array(sorted(step), dtype=np.uint32)
        self._steps = np.array([step[t] for t in self._types.tolist()], dtype=np.int64)

    def refuse(self, reason: str, count: int) -> None:
        if count:
            self.refused[reason] = self.refused.get(reason, 0) + int(count)

    def feed(self, data: memoryview, first_area: int) -> None:
        """``data``: whole areas, the first of them area ``first_area``."""
        n = len(data) // self.area
        if not n:
            return
        raw = np.frombuffer(data, dtype=np.uint8, count=n * self.area)
        base = np.arange(n, dtype=np.int64) * self.area
        counts = _u64_at(raw, base + _HEAD_COUNT)
        # The device counts a record (a finding among them) it had no room for in recordCount only: lost, so the
        # run that lost them is not clean.
        meant = _u64_at(raw, base + _HEAD_MEANT)
        self.refuse("SIMT records msSanitizer's device could not write (their thread area was full)",
                    _total(np.where(meant > counts, meant - counts, np.uint64(0))))  # fmt: skip
        write_offset = _u64_at(raw, base + _HEAD_WRITE_OFFSET)
        past = write_offset > np.uint64(self.thread_bytes)
        self.refuse("SIMT thread areas whose writeOffset is past the area (not decoded)", int(past.sum()))
        end = base + self.head + np.where(past, 0, write_offset).astype(np.int64)
        pos = base + self.head
        left = np.where(past, np.uint64(0), counts)
        area_of: list[np.ndarray] = []
        at_of: list[np.ndarray] = []
        online_area: list[np.ndarray] = []
        online_at: list[np.ndarray] = []
        online_index: list[np.ndarray] = []
        type_of: list[np.ndarray] = []
        index_of: list[np.ndarray] = []
        index = 0
        live = np.flatnonzero((left > 0) & (pos + 4 <= end))
        while live.size:
            p = pos[live]
            record_type = _u32_at(raw, p)
            slot = np.searchsorted(self._types, record_type)
            slot = np.minimum(slot, self._types.size - 1)
            known = self._types[slot] == record_type
            step = np.where(known, self._steps[slot], 0)
            online = record_type == np.uint32(self.records.online_error)
            if online.any():  # [type][KernelErrorRecord][record][KernelErrorDesc x errorNum]: stepped, not read
                q = p[online]
                fits = q + 4 + _ONLINE_ERROR_RECORD <= end[live[online]]
                q = np.where(fits, q, 0)  # a head not all in the area is not read (its record is refused below)
                errors = _u32_at(raw, q + 4).astype(np.int64)
                size = _u16_at(raw, q + 12).astype(np.int64)
                step[online] = np.where(fits, 4 + _ONLINE_ERROR_RECORD + size + _ONLINE_ERROR_DESC * errors, 0)
                known = known | online
            fits = known & (step > 0) & (p + step <= end[live])
            bad = live[~fits]
            if bad.size:
                unknown = ~known
                self.refuse("SIMT records of a type sanitizerd does not know (the rest of their thread area)",
                            _total(left[live[unknown]]))  # fmt: skip
                short = known & ~fits
                self.refuse("SIMT records running past their thread area's writeOffset (the rest of the area)",
                            _total(left[live[short]]))  # fmt: skip
                left[bad] = 0
            good = live[fits]
            kept = fits & ~online
            online_area.append(live[fits & online])
            online_at.append(p[fits & online])
            online_index.append(np.full(int((fits & online).sum()), index, dtype=np.int64))
            area_of.append(live[kept])
            at_of.append(p[kept])
            type_of.append(record_type[kept])
            index_of.append(np.full(int(kept.sum()), index, dtype=np.int64))
            pos[good] += step[fits]
            left[good] -= np.uint64(1)
            index += 1
            live = good[(left[good] > 0) & (pos[good] + 4 <= end[good])]
        # A count that promises more records than writeOffset holds: the rest were never written (msSanitizer
        # stops at its offset too); said, so a run missing them is not taken as whole.
        self.refuse("SIMT records counted by recordWriteCount but not within writeOffset", _total(left))
        if online_area:
            self._online(
                raw, np.concatenate(online_area) + first_area, np.concatenate(online_at), np.concatenate(online_index)
            )
        if not area_of:
            return
        area = np.concatenate(area_of)
        at = np.concatenate(at_of)
        types = np.concatenate(type_of)
        self._keep(raw, area + first_area, at + 4, types, np.concatenate(index_of))

    def _online(self, raw: np.ndarray, thread: np.ndarray, at: np.ndarray, index: np.ndarray) -> None:
        """ONLINE_ERROR records at ``at`` (their type word; ``index`` their place in their area), each
        ``[KernelErrorRecord][the access's record][KernelErrorDesc x errorNum]`` and wholly inside its area (the walk
        checked its step): a race the device found between two threads becomes the pair of accesses it names, which
        racecheck then reports; an illegal or misaligned access becomes the access the record carries, which memcheck
        then judges; any other finding is counted."""
        r = self.records
        if r.error_record is None or r.error_desc is None or not r.error_types:
            self.online_errors += at.size
            return
        head = _gather(raw, at + 4, r.error_record)
        size = head["recordSize"].astype(np.int64)
        # The access's record must be a SIMT access of its own size, else the descs after it are not where we look.
        accesses = [r.types[n] for n in (*_READS, *_WRITES, *_ATOMICS)]
        atomic = np.isin(head["recordType"], [r.types[n] for n in _ATOMICS])
        access = np.isin(head["recordType"], accesses) & (size == np.where(atomic, r.atom.size, r.load_store.size))
        # A barrier's or a thread end's record carries the device's __syncthreads() findings
        empty = np.isin(head["recordType"], [r.types[n] for n in _EMPTIES]) & (size == r.empty.size)
        sane = access | empty
        self.online_errors += int((~sane).sum())
        at, thread, head, size, index, access = (
            at[sane],
            thread[sane],
            head[sane],
            size[sane],
            index[sane],
            access[sane],
        )
        names = {v: k for k, v in r.error_types.items()}
        errors = head["errorNum"].astype(np.int64)
        first_desc = at + 4 + r.error_record.size + size
        of_the_access = [r.error_types.get(name, -1) for name in _OF_THE_ACCESS]
        carried = np.zeros(at.size, dtype=bool)  # records whose access memcheck is to judge
        for j in range(int(errors.max()) if errors.size else 0):
            has = errors > j
            desc = _gather(raw, first_desc[has] + j * r.error_desc.size, r.error_desc)
            kind = desc["errorType"]
            # An illegal or misaligned address is a judgement of the carried access itself: memcheck makes it
            # again, so one rule (the allocations sanitizerd knows, the data type's alignment) decides.
            judged = np.isin(kind, of_the_access) & access[has]
            carried[np.flatnonzero(has)[judged]] = True
            race = judged.copy()
            # A thread that missed a __syncthreads() other threads reached: synccheck judges the barriers it implies
            missed = kind == r.error_types.get("THREADS_ASYNC_IN_BLOCK", -1)
            if missed.any():
                self._missed(desc[missed])
                race |= missed
            for name, (theirs, mine) in _RACES.items():
                chosen = kind == r.error_types.get(name, -1)
                race |= chosen
                if chosen.any():
                    self._race(desc[chosen], thread[has][chosen], theirs, mine, j)
            overlap = kind == r.error_types.get("THREAD_OVERLAP", -1)
            if overlap.any():
                self._overlap(desc[overlap], thread[has][overlap], j)
                race |= overlap
            lost = kind == r.error_types.get("SYNC_THREADS_RECORD_LOSS", -1)
            self.refuse(LOST_BARRIERS_TEXT, int(lost.sum()))
            race |= lost
            for value in np.unique(kind[~race]).tolist():
                name = names.get(int(value), str(value))
                self.refuse(f"SIMT ONLINE_ERROR findings of msSanitizer's device ({name}) not checked",
                            int((kind[~race] == value).sum()))  # fmt: skip
        if carried.any():
            self._keep(raw, thread[carried], at[carried] + 4 + r.error_record.size, head["recordType"][carried],
                       index[carried])  # fmt: skip

    def _missed(self, desc: np.ndarray) -> None:
        sync = "payload.syncDesc."
        missed = np.zeros(desc.size, dtype=_MISSED)
        missed["main_pc"] = desc[sync + "syncThreadLoc.mainScalarPc"]
        missed["pc"] = desc[sync + "syncLocation.pc"]
        missed["file_no"] = desc[sync + "syncLocation.fileNo"]
        missed["line_no"] = desc[sync + "syncLocation.lineNo"]
        missed["loc"] = np.stack([desc[sync + "syncThreadLoc.id" + axis] for axis in "XYZ"], 1)
        self.rows.missed.append(missed)
        self.converted += desc.size

    def _race(self, desc: np.ndarray, thread: np.ndarray, theirs: int, mine: int, j: int) -> None:
        """Both sides of the device's races as rows: this area's thread, and the thread its desc names."""
        n = desc.size
        if self.rows.rows + 2 * n > MAX_SIMT_EVENTS:
            self.refuse(f"SIMT records past the slot's limit of {MAX_SIMT_EVENTS}", n)
            return
        space = desc["space"]
        ok = (space > Space.PRIVATE) & (space <= Space.FB)
        self.refuse("SIMT accesses with no such address space or size", int((~ok).sum()))
        desc, thread = desc[ok], thread[ok]
        n = desc.size
        rows = self.rows
        race = "payload.raceDesc."
        sides = (
            (np.zeros(n, np.int64), theirs, race + "conflictedLocation.", race + "conflictedThreadLoc.", True),
            (thread, mine, "location.", "threadLoc.", False),
        )
        one_byte = np.ones(n, dtype=np.uint32)  # the byte the device found both touching
        for area, kind, place, loc, by_loc in sides:
            rows.add_finding_side(desc, area, _AFTER_ITS_RECORDS + j, kind, 0, race + "addr", one_byte, place, loc,
                                  by_loc)  # fmt: skip
        self.converted += 2 * n

    def _overlap(self, desc: np.ndarray, thread: np.ndarray, j: int) -> None:
        """The device's inter-thread stomping (THREAD_OVERLAP: this thread wrote ``overLapSize`` bytes at ``addr``
        that the thread its desc names had written first) as the owner's claim of those bytes (``FLAG_CLAIM``: the
        stomping check alone reads it; the owner's own write is not on the wire) and this thread's write of them,
        which memcheck then reports as msSanitizer does (``out of bounds ... when writing data``, by this thread).
        Both sort with this thread's rows, the claim first, so the claim precedes the write whatever the ids."""
        if self.rows.rows + 2 * desc.size > MAX_SIMT_EVENTS:
            self.refuse(f"SIMT records past the slot's limit of {MAX_SIMT_EVENTS}", desc.size)
            return
        over = "payload.overLapDesc."
        size = desc[over + "overLapSize"]
        sane = (desc["space"] > Space.PRIVATE) & (desc["space"] <= Space.FB) & (size > 0) & (size <= 0xFFFF)
        self.refuse("SIMT accesses with no such address space or size", int((~sane).sum()))
        # Threads own GM apart (msSanitizer's premise: each thread's GM is its own); the UB ownership its device
        # also tracks has no check here
        gm = sane & (desc["space"] == Space.GM)
        self.refuse("SIMT THREAD_OVERLAP findings of msSanitizer's device outside GM not checked (sanitizerd's "
                    "inter-thread stomping check is GM's)", int((sane & ~gm).sum()))  # fmt: skip
        desc, thread = desc[gm], thread[gm]
        n = desc.size
        rows = self.rows
        sides = (
            (FLAG_CLAIM, over + "conflictedLocation.", over + "conflictedThreadLoc.", True),
            (0, "location.", "threadLoc.", False),
        )
        size = desc[over + "overLapSize"].astype(np.uint32)
        for flags, place, loc, by_loc in sides:  # both sort with this area's thread; the claim is its location's
            rows.add_finding_side(desc, thread, _AFTER_ITS_RECORDS + j, EventKind.WRITE, flags, over + "addr", size,
                                  place, loc, by_loc)  # fmt: skip
        self.converted += 2 * n

    def _keep(self, raw: np.ndarray, thread: np.ndarray, at: np.ndarray, types: np.ndarray, order: np.ndarray) -> None:
        r, t = self.records, self.records.types
        room = MAX_SIMT_EVENTS - self.rows.rows
        if types.size > room:
            self.refuse(f"SIMT records past the slot's limit of {MAX_SIMT_EVENTS}", types.size - max(room, 0))
            keep = slice(0, max(room, 0))
            thread, at, types, order = thread[keep], at[keep], types[keep], order[keep]
        groups = (
            (np.isin(types, [t[n] for n in _READS]), r.load_store, EventKind.READ, 0),
            (np.isin(types, [t[n] for n in _WRITES]), r.load_store, EventKind.WRITE, 0),
            (np.isin(types, [t[n] for n in _ATOMICS]), r.atom, EventKind.WRITE, FLAG_ATOMIC),
            (types == t["THREAD_BLOCK_BARRIER"], r.empty, EventKind.SYNC_THREADS, 0),
            (types == t["SIMT_END"], r.empty, EventKind.SIMT_END, 0),
        )
        rows = self.rows
        for chosen, layout, kind, flags in groups:
            if not chosen.any():
                continue
            payload = _gather(raw, at[chosen], layout)
            n = payload.size
            access = kind in (EventKind.READ, EventKind.WRITE)
            space = payload["space"] if access else np.zeros(n, dtype=np.int32)
            size = payload["size"] if access else np.zeros(n, dtype=np.uint64)
            ok = np.ones(n, dtype=bool)
            if access:
                # Thread-private memory is each thread's own (no other thread can reach it); any other space
                # msSanitizer does not define, or a size no single access has, is damage.
                ok = (space > Space.PRIVATE) & (space <= Space.FB) & (size <= 0xFFFF)
                self.refuse("SIMT accesses to thread-private memory (not checked)", int((space == Space.PRIVATE).sum()))
                self.refuse("SIMT accesses with no such address space or size", int((~ok & (space != 0)).sum()))
            rows.thread.append(thread[chosen][ok])
            rows.order.append(order[chosen][ok])
            rows.kind.append(np.full(int(ok.sum()), kind, dtype=np.uint8))
            rows.flags.append(np.full(int(ok.sum()), flags, dtype=np.uint8))
            rows.space.append(space[ok].astype(np.uint8))
            rows.address.append(payload["addr"][ok].astype(np.uint64) if access else np.zeros(int(ok.sum()), np.uint64))
            rows.size.append(size[ok].astype(np.uint32))
            rows.align.append(
                r.alignment[payload["detailedDataType"][ok]] if access else np.ones(int(ok.sum()), np.uint16)
            )
            rows.pc.append(payload["location.pc"][ok])
            rows.file_no.append(payload["location.fileNo"][ok])
            rows.line_no.append(payload["location.lineNo"][ok])
            rows.loc.append(
                np.stack([payload["threadLoc.idX"][ok], payload["threadLoc.idY"][ok], payload["threadLoc.idZ"][ok]], 1)
            )
            rows.main_pc.append(payload["threadLoc.mainScalarPc"][ok])
            rows.by_loc.append(np.zeros(int(ok.sum()), dtype=bool))
            rows.rows += int(ok.sum())
            self.converted += int(ok.sum())


def _total(counts: np.ndarray) -> int:
    """A sum of hostile u64 counts, in Python ints: 2 048 of them near 2**64 must not wrap."""
    return sum(counts.tolist())


def _u64_at(raw: np.ndarray, at: np.ndarray) -> np.ndarray:
    window = np.lib.stride_tricks.as_strided(raw, shape=(max(raw.size - 7, 0), 8), strides=(1, 1))
    return np.ascontiguousarray(window[at]).view("<u8").reshape(-1)


def _u32_at(raw: np.ndarray, at: np.ndarray) -> np.ndarray:
    window = np.lib.stride_tricks.as_strided(raw, shape=(max(raw.size - 3, 0), 4), strides=(1, 1))
    return np.ascontiguousarray(window[at]).view("<u4").reshape(-1)


def _u16_at(raw: np.ndarray, at: np.ndarray) -> np.ndarray:
    window = np.lib.stride_tricks.as_strided(raw, shape=(max(raw.size - 1, 0), 2), strides=(1, 1))
    return np.ascontiguousarray(window[at]).view("<u2").reshape(-1)


def _gather(raw: np.ndarray, at: np.ndarray, layout: wire.Layout) -> np.ndarray:
    size = layout.size
    window = np.lib.stride_tricks.as_strided(raw, shape=(max(raw.size - size + 1, 0), size), strides=(1, 1))
    return np.ascontiguousarray(window[at]).view(layout.dtype).reshape(-1)


@dataclass(frozen=True, slots=True)
class SimtCall:
    """One SIMT call's entry head: the dims its threads decompose by, and its main scalar's pc."""

    main_pc: int
    dims: tuple[int, int, int]


def section_events(
    rows: ThreadRows, calls: list[SimtCall], block_id: int, block_type: int, first_serial: int
) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """Each SIMT call's records as one native section (SIMT_START with the dims, every thread's accesses and
    barriers in its own order, SIMT_END), sections in the order of their entry heads, numbered from
    ``first_serial``, each SIMT_START's pc its call's ``mainScalarPc`` (the pc of its SIMT_CALL record, which places
    it among the block's SIMD records); returns the events, the index of each event's row in ``rows`` (-1 for
    SIMT_START/SIMT_END), and what was refused. Vectorised over rows and calls alike: a slot of many calls costs one
    sort."""
    refused: dict[str, int] = {}
    # The first entry head of each mainScalarPc names the call; a later head for the same pc adds nothing.
    pcs = np.array([c.main_pc for c in calls], dtype=np.uint64)
    dims = np.array([c.dims for c in calls], dtype=np.int64).reshape(-1, 3)
    pcs, first = np.unique(pcs, return_index=True)
    dims = dims[first]
    _add_missed_barriers(rows, pcs, dims, refused)
    thread = rows.column("thread").astype(np.int64)
    if not thread.size:
        return empty_events(0), np.zeros(0, dtype=np.int64), refused
    main_pc = rows.column("main_pc").astype(np.uint64)
    at = np.minimum(np.searchsorted(pcs, main_pc), max(pcs.size - 1, 0))
    named = (at < pcs.size) & (pcs[at] == main_pc) if pcs.size else np.zeros(thread.size, dtype=bool)
    _count(refused, "SIMT records of a SIMT call with no SimtEntryBlockHead (no thread dims)", ~named)
    call_dims = dims[at] if pcs.size else np.ones((thread.size, 3), dtype=np.int64)
    x, y, z = call_dims[:, 0], call_dims[:, 1], call_dims[:, 2]
    dims_ok = (call_dims.min(1) >= 1) & (x * y * z <= MAX_SIMT_THREADS)
    _count(refused, "SIMT records of a SIMT call whose thread dims are out of range (a zero, or over 2048 threads)",
           named & ~dims_ok)  # fmt: skip
    # Area i is thread i: its records must say the (x, y, z) that i decomposes to, else they are not its. The other
    # side of a device-found race is the thread its location names, inside the call's dims.
    sx, sy = np.maximum(x, 1), np.maximum(y, 1)
    loc = np.concatenate(rows.loc).astype(np.int64)
    by_loc = rows.column("by_loc").astype(bool)
    inside = (loc[:, 0] < x) & (loc[:, 1] < y) & (loc[:, 2] < z)
    area_thread = thread
    thread = np.where(by_loc, loc[:, 0] + loc[:, 1] * x + loc[:, 2] * x * y, thread)
    expect = np.stack([thread % sx, (thread % (sx * sy)) // sx, thread // (sx * sy)], 1)
    usable = named & dims_ok
    agrees = usable & (thread < x * y * z) & (loc == expect).all(1) & (inside | ~by_loc)
    _count(refused, "SIMT records whose thread location is not their thread area's", usable & ~agrees)
    # The thread's own end is the section's end for it: SIMT_END rows are not events of their own.
    kind = rows.column("kind")
    index = np.flatnonzero(agrees & (kind != EventKind.SIMT_END))
    if not index.size:
        return empty_events(0), np.zeros(0, dtype=np.int64), refused
    call = first.argsort().argsort()[at[index]]  # each row's call, numbered in entry-head order
    # An ownership claim sorts with the area whose desc made it, just before that thread's write
    claim = (rows.column("flags")[index] & FLAG_CLAIM) != 0
    sort_thread = np.where(claim, area_thread[index], thread[index])
    index = index[np.lexsort((~claim, rows.column("order").astype(np.int64)[index], sort_thread, call))]
    call = np.sort(call)
    sections, counts = np.unique(call, return_counts=True)
    starts = np.concatenate([[0], np.cumsum(counts + 2)[:-1]])  # each section: START, its rows, END
    section_of_row = np.repeat(np.arange(sections.size), counts)
    rank = np.arange(index.size) - np.repeat(np.cumsum(counts) - counts, counts)
    place = starts[section_of_row] + 1 + rank
    events = empty_events(index.size + 2 * sections.size)
    source = np.full(events.size, -1, dtype=np.int64)
    source[place] = index
    events["pipe"] = Pipe.S
    events["block_id"] = block_id
    events["block_type"] = block_type
    events["serial"] = np.arange(events.size, dtype=np.uint64) + np.uint64(first_serial)
    section_dims = dims[first.argsort()][sections]  # entry-head order -> that call's dims
    events["kind"][starts] = EventKind.SIMT_START
    events["address"][starts] = (
        section_dims[:, 0].astype(np.uint64)
        | section_dims[:, 1].astype(np.uint64) << np.uint64(16)
        | section_dims[:, 2].astype(np.uint64) << np.uint64(32)
    )  # simt_dims_address, per section
    events["pc"][starts] = pcs[first.argsort()][sections]  # the call's mainScalarPc: its SIMT_CALL's pc
    events["kind"][starts + counts + 1] = EventKind.SIMT_END
    inner = events[place]
    inner["kind"] = kind[index]
    inner["thread"] = (thread[index] + 1).astype(np.uint16)
    inner["address"] = rows.column("address")[index]
    inner["block_size"] = rows.column("size")[index]
    inner["align"] = rows.column("align")[index]
    inner["space"] = rows.column("space")[index]
    inner["flags"] = rows.column("flags")[index]
    inner["pc"] = rows.column("pc")[index]
    events[place] = inner
    return events, source, refused


def _add_missed_barriers(rows: ThreadRows, pcs: np.ndarray, dims: np.ndarray, refused: dict[str, int]) -> None:
    """The barrier rows the device's THREADS_ASYNC_IN_BLOCK findings imply: every thread of the call but those the
    device named reached the barrier (after all it did), so synccheck finds the named ones short of it, the lowest
    first, as it does from threads' own barriers. ``pcs`` (sorted) and ``dims``: the calls' mainScalarPc and dims.
    Bounded: at most MAX_MISSED_BARRIERS barriers per call (the device counts no more) and the slot's limit."""
    if not rows.missed:
        return
    missed = np.concatenate(rows.missed)
    rows.missed.clear()  # made into rows once
    at = np.minimum(np.searchsorted(pcs, missed["main_pc"]), max(pcs.size - 1, 0))
    named = pcs[at] == missed["main_pc"] if pcs.size else np.zeros(missed.size, dtype=bool)
    _count(refused, "SIMT divergences the device found in a SIMT call with no SimtEntryBlockHead (no thread dims)",
           ~named)  # fmt: skip
    missed, at = missed[named], at[named]
    call_dims = dims[at]
    loc = missed["loc"].astype(np.int64)
    total = call_dims.prod(1)
    ok = (call_dims.min(1) >= 1) & (total <= MAX_SIMT_THREADS) & (loc < call_dims).all(1)
    _count(refused, "SIMT divergences the device found for a thread outside its call's dims", ~ok)
    missed, at, loc, call_dims, total = missed[ok], at[ok], loc[ok], call_dims[ok], total[ok]
    if not missed.size:
        return
    order = np.lexsort((missed["pc"], at))
    missed, at, loc, call_dims, total = missed[order], at[order], loc[order], call_dims[order], total[order]
    change = np.ones(at.size, dtype=bool)
    change[1:] = (at[1:] != at[:-1]) | (missed["pc"][1:] != missed["pc"][:-1])
    group = np.cumsum(change) - 1  # each (call, barrier) once
    heads = np.flatnonzero(change)
    call = at[heads]
    call_start = np.ones(heads.size, dtype=bool)
    call_start[1:] = call[1:] != call[:-1]
    starts = np.flatnonzero(call_start)
    rank = np.arange(heads.size) - np.repeat(starts, np.diff(np.append(starts, heads.size)))
    kept = rank < MAX_MISSED_BARRIERS
    _count(refused, f"SIMT divergences the device found past {MAX_MISSED_BARRIERS} barriers of a SIMT call",
           ~kept[group])  # fmt: skip
    counts = np.where(kept, total[heads], 0)
    if rows.rows + int(counts.sum()) > MAX_SIMT_EVENTS:
        _count(refused, f"SIMT divergences the device found past the slot's limit of {MAX_SIMT_EVENTS} records",
               np.ones(missed.size, dtype=bool))  # fmt: skip
        return
    of_group = np.repeat(np.arange(heads.size), counts)
    thread = np.arange(of_group.size) - np.repeat(np.cumsum(counts) - counts, counts)
    x, y = call_dims[:, 0], call_dims[:, 1]
    named_key = group.astype(np.int64) << 16 | (loc[:, 0] + loc[:, 1] * x + loc[:, 2] * x * y)
    reached = ~np.isin(of_group.astype(np.int64) << 16 | thread, named_key)
    of_group, thread = of_group[reached], thread[reached]
    head = heads[of_group]
    gx, gy = x[head], y[head]
    n = thread.size
    rows.thread.append(thread)
    rows.order.append(np.full(n, _AFTER_ALL, dtype=np.int64))
    rows.kind.append(np.full(n, EventKind.SYNC_THREADS, dtype=np.uint8))
    rows.flags.append(np.zeros(n, dtype=np.uint8))
    rows.space.append(np.zeros(n, dtype=np.uint8))
    rows.address.append(np.zeros(n, dtype=np.uint64))
    rows.size.append(np.zeros(n, dtype=np.uint32))
    rows.align.append(np.ones(n, dtype=np.uint16))
    rows.pc.append(missed["pc"][head])
    rows.file_no.append(missed["file_no"][head])
    rows.line_no.append(missed["line_no"][head])
    rows.loc.append(np.stack([thread % gx, (thread % (gx * gy)) // gx, thread // (gx * gy)], 1))
    rows.main_pc.append(pcs[at[head]])
    rows.by_loc.append(np.zeros(n, dtype=bool))
    rows.rows += n


def _count(refused: dict[str, int], reason: str, which: np.ndarray) -> None:
    count = int(np.count_nonzero(which))
    if count:
        refused[reason] = refused.get(reason, 0) + count
