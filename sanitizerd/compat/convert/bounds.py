"""Bounds on what msSanitizer's records become: per record and per kernel launch, checked before expanding.

Most records become one event per operand. A few expand: a loop count (a fixpipe's ND matrices, an ND2NZ's
columns, MOV_ALIGN_V2's loops), a burst count whose pattern does not fit one event (``runs``), a slot repeated
``count`` times (``Plan``). An 84-byte record's fields can ask for millions of events, each with a pattern of
65 535 x 65 535 blocks: hours of detector work from a few kilobytes. A record may therefore become at most
``MAX_RECORD_EVENTS`` events, whose patterns are at most ``MAX_RECORD_RUNS`` strided runs (the detectors' unit
of closed-form work, ``detectors._runs.line_counts``); and the expanding records of one kernel launch at most
``MAX_KERNEL_EXPANDED_EVENTS`` events and ``MAX_KERNEL_EXPANDED_RUNS`` runs, past which the rest of the kernel's
records are refused. No record a real instruction writes comes near (docs/security.md, "msSanitizer records").

Every expansion asks ``charge`` first, with the counts it is about to expand, computed from the records' fields:
a record over its bound is refused there (its counts become 0, so nothing is expanded) and, after the converter
returns, ``end`` drops whatever the record made before (a record is checked whole or not at all) and checks the
events' exact counts and runs. A refused record is told to the session as a named problem of its kernel
(``record_refused`` / ``kernel_records_refused``), counted by reason for ``sanitizerd_compat_records_refused``.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from sanitizerd.detectors._patterns import extents
from sanitizerd.detectors._runs import line_counts

# A record's events: one per iteration of a 16-bit count (msSanitizer's loop counts, ndNum, nBurst and the repeat
# fields are all 16-bit or narrower) for each of up to four operands (a burst move's read and write that do not fit
# one event each are 2 x 65 535).
MAX_RECORD_EVENTS: Final = 1 << 18
# A record's strided runs: 16 of the widest patterns an event can hold (65 535 runs each). A real fixpipe reads
# at most L0C's 8 192 blocks of 32 bytes; a real DMA burst move is two events.
MAX_RECORD_RUNS: Final = 1 << 20
# The events that expanding records of one kernel launch may become (about 235 MB of events over the launch),
# and their runs (about a minute of closed-form checks at the detectors' pace).
MAX_KERNEL_EXPANDED_EVENTS: Final = 1 << 22
MAX_KERNEL_EXPANDED_RUNS: Final = 1 << 26

# Why a record was refused: the label of sanitizerd_compat_records_refused.
RECORD_EVENTS: Final = "record_events"
RECORD_RUNS: Final = "record_runs"
KERNEL_CAP: Final = "kernel_cap"
REASONS: Final = (RECORD_EVENTS, RECORD_RUNS, KERNEL_CAP)


def _n(value: int) -> str:
    return f"{value:,}".replace(",", " ")


class ExpansionBudget:
    """One kernel launch's expansion budget, and the records it refused. Shared by every slot of the launch
    (``BlockContext.budget``); a converter call is bracketed by ``begin`` and ``end``."""

    def __init__(self) -> None:
        self.events_left = MAX_KERNEL_EXPANDED_EVENTS
        self.runs_left = MAX_KERNEL_EXPANDED_RUNS
        self.exhausted = False  # the kernel's cap was reached: every later record is refused
        # (reason, record type name) -> [records refused, serial of the first, what it would have become]
        self.refused: dict[tuple[str, str], list[int]] = {}
        self.counts: dict[str, int] = {}  # reason -> records refused, not yet taken (take_counts)
        self._name = ""
        self._serials: np.ndarray | None = None  # the call's records' serials, ascending
        self._spent: np.ndarray = np.empty(0, dtype=np.int64)  # per record of the call: events charged
        self._dead: np.ndarray = np.empty(0, dtype=bool)  # per record of the call: refused
        self._charged = False

    # --- a converter call ---------------------------------------------------------------------------------

    @property
    def refusing(self) -> bool:
        """Whether a record of the current call has been refused (its later expansions must make nothing)."""
        return self._serials is not None and bool(self._dead.any())

    def abandon(self) -> None:
        """The converter failed: the call is over, nothing of it is checked."""
        self._serials = None

    def begin(self, name: str, serials: np.ndarray) -> None:
        self._name = name
        self._serials = np.asarray(serials, dtype=np.uint64)
        self._spent = np.zeros(self._serials.size, dtype=np.int64)
        self._dead = np.zeros(self._serials.size, dtype=bool)
        self._charged = False

    def charge(self, serials: np.ndarray, extra: np.ndarray) -> np.ndarray:
        """Before an expansion: rows (records, with ``serials``; a record may have several rows) that would make
        ``extra`` events each beyond one. Returns, per row, whether its record is refused (expand nothing)."""
        extra = np.asarray(extra, dtype=np.int64)
        if self._serials is None:  # a converter called outside a bounded call: the per-record bound alone
            return extra >= MAX_RECORD_EVENTS
        pos = np.searchsorted(self._serials, np.asarray(serials, dtype=np.uint64))
        if extra.size == 0 or not (extra > 0).any():
            return self._dead[pos]
        self._charged = True
        # float64 sums are exact far past anything that is not refused here (2**53)
        total = np.bincount(pos, weights=np.maximum(extra, 0), minlength=self._serials.size)
        rec = np.flatnonzero((total > 0) & ~self._dead)
        if rec.size:
            new = self._spent[rec] + total[rec]
            over = new > MAX_RECORD_EVENTS
            if over.any():
                self._refuse(rec[over], RECORD_EVENTS, new[over])
                rec, new = rec[~over], new[~over]
            room = np.cumsum(new - self._spent[rec])
            fits = room <= self.events_left
            if not fits.all():
                self._cap(int(rec[int(np.argmin(fits))]))
                rec, new, room = rec[fits], new[fits], room[fits]
            if rec.size:
                self.events_left -= int(room[-1])
                self._spent[rec] = new.astype(np.int64)
        return self._dead[pos]

    def charge_runs(self, serials: np.ndarray, runs: np.ndarray) -> np.ndarray:
        """Before an expansion: rows that would make ``runs`` strided runs each (an upper bound). A record whose
        rows add up past its bound is refused; returns, per row, whether its record is refused."""
        runs = np.asarray(runs, dtype=np.float64)
        if self._serials is None:
            return runs > MAX_RECORD_RUNS
        pos = np.searchsorted(self._serials, np.asarray(serials, dtype=np.uint64))
        total = np.bincount(pos, weights=runs, minlength=self._serials.size)
        over = np.flatnonzero((total > MAX_RECORD_RUNS) & ~self._dead)
        if over.size:
            self._refuse(over, RECORD_RUNS, total[over])
        return self._dead[pos]

    def end(self, events: np.ndarray) -> np.ndarray:
        """After the converter: ``events`` less those of refused records, each record's exact event count and
        strided runs checked against its bounds, and the runs of records that expanded charged to the kernel."""
        serials = self._serials
        assert serials is not None, "end() without begin()"
        try:
            return self._checked(serials, events)
        finally:
            self._serials = None

    def _checked(self, serials: np.ndarray, events: np.ndarray) -> np.ndarray:
        if not events.size:
            return events
        n = serials.size
        pos: np.ndarray | None = None
        if self._charged or events.size > MAX_RECORD_EVENTS:
            pos = self._positions(serials, events)
            per_record = np.bincount(pos, minlength=n)[:n]
            over = np.flatnonzero((per_record > MAX_RECORD_EVENTS) & ~self._dead)
            if over.size:
                self._refuse(over, RECORD_EVENTS, per_record[over])
        # Runs: only an access of scattered blocks is more than one (line_counts), and only a record that expanded
        # has more than a few accesses: a record of plain operands stays far within its bound (at most a few
        # thousand runs, tests/test_compat_bounds.py), so calls without expansion (the hot path) skip this.
        if self._charged and int(events["block_stride"].max()) > 1:
            assert pos is not None
            scattered = np.flatnonzero((events["block_stride"] > 1) & (events["block_num"] > 1))
            some = events[scattered]
            lines = line_counts(some, extents(some)).astype(np.float64) - 1
            runs = np.bincount(pos[scattered], weights=lines, minlength=n)[:n] + per_record
            over = np.flatnonzero((runs > MAX_RECORD_RUNS) & ~self._dead)
            if over.size:
                self._refuse(over, RECORD_RUNS, runs[over])
            # The runs of records that expanded count against the launch's.
            rec = np.flatnonzero((self._spent > 0) & ~self._dead)
            if rec.size:
                room = np.cumsum(runs[rec])
                fits = room <= self.runs_left
                if not fits.all():
                    self._cap(int(rec[int(np.argmin(fits))]))
                    room = room[fits]
                if room.size:
                    self.runs_left -= int(room[-1])
        if not self._dead.any():
            return events
        if pos is None:
            pos = self._positions(serials, events)
        dead = np.append(self._dead, False)  # position n: an event of no record of this call, never refused
        return events[~dead[pos]]

    @staticmethod
    def _positions(serials: np.ndarray, events: np.ndarray) -> np.ndarray:
        """Per event, its record's position in the call; ``serials.size`` for an event of no record of the call
        (none is expected: a converter makes events of its own records)."""
        ev = events["serial"]
        pos = np.searchsorted(serials, ev)
        inside = np.minimum(pos, serials.size - 1)
        return np.where(serials[inside] == ev, inside, serials.size)

    def refuse_all(self, name: str, serials: np.ndarray) -> None:
        """Records met after the kernel's cap was reached: refused unconverted."""
        if len(serials):
            self._count(KERNEL_CAP, name, len(serials), int(np.min(serials)), 0)

    # --- what is told ---------------------------------------------------------------------------------------

    def _cap(self, first: int) -> None:
        """The kernel's cap is reached at the call's record ``first``: it and every later record are refused."""
        self.exhausted = True
        rest = np.arange(first, self._dead.size)
        rest = rest[~self._dead[rest]]
        if rest.size:
            self._dead[rest] = True
            self._count(KERNEL_CAP, self._name, int(rest.size), int(self._serials[rest[0]]), 0)  # type: ignore[index]

    def _refuse(self, rec: np.ndarray, reason: str, figures: np.ndarray) -> None:
        self._dead[rec] = True
        assert self._serials is not None
        self._count(reason, self._name, int(rec.size), int(self._serials[rec[0]]), int(figures[0]))

    def _count(self, reason: str, name: str, records: int, first: int, figure: int) -> None:
        entry = self.refused.get((reason, name))
        if entry is None:
            self.refused[(reason, name)] = [records, first, figure]
        else:
            entry[0] += records
            if first < entry[1]:
                entry[1], entry[2] = first, figure
        self.counts[reason] = self.counts.get(reason, 0) + records

    def take_counts(self) -> dict[str, int]:
        """Records refused since the last call, by reason (for the metric)."""
        counts, self.counts = self.counts, {}
        return counts

    def problem_lines(self) -> list[str]:
        """The kernel's refusals as named problems: one per (reason, record type), one for the kernel's cap."""
        lines = []
        capped = [(name, entry) for (reason, name), entry in self.refused.items() if reason == KERNEL_CAP]
        for (reason, name), (records, first, figure) in self.refused.items():
            if reason == RECORD_EVENTS:
                what = f"it would become up to {_n(figure)} events, past the {_n(MAX_RECORD_EVENTS)} one record may"
            elif reason == RECORD_RUNS:
                what = (
                    f"its accesses would be up to {_n(figure)} strided runs, past the {_n(MAX_RECORD_RUNS)} one record "
                    "may"
                )
            else:
                continue
            also = f" ({_n(records)} records of this kernel refused so)" if records > 1 else ""
            lines.append(f"record_refused: {name} record serial {first} not checked: {what}{also}")
        if capped:
            records = sum(entry[0] for _, entry in capped)
            first = min(entry[1] for _, entry in capped)
            names = ", ".join(sorted({name for name, _ in capped}))
            lines.append(
                f"kernel_records_refused: {_n(records)} records from serial {first} on not checked ({names}): the "
                f"kernel's expanding records reached {_n(MAX_KERNEL_EXPANDED_EVENTS)} events or "
                f"{_n(MAX_KERNEL_EXPANDED_RUNS)} strided runs"
            )
        return lines
