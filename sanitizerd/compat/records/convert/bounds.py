"""Bounds on what msSanitizer's records become: per record and per kernel launch, checked before expanding.

Most records become one event per operand. A few expand: a loop count (a fixpipe's ND matrices, an ND2NZ's
columns, MOV_ALIGN_V2's loops), a burst count whose pattern does not fit one event (``base.runs``), a slot
repeated ``count`` times (``Plan``). An 84-byte record's fields can ask for millions of events, each with a pattern
of 65 535 x 65 535 blocks: hours of detector work and gigabytes from a few kilobytes. A record may therefore
become at most ``MAX_RECORD_EVENTS`` events, whose accesses list at most ``MAX_RECORD_PIECES`` pieces (blocks, or
rows of contiguous blocks: ``sanitizerd_protocol.patterns.piece_counts``, what racecheck and initcheck hold and
walk); and the expanding records of one kernel launch at most ``MAX_KERNEL_EXPANDED_EVENTS`` events and
``MAX_KERNEL_EXPANDED_PIECES`` pieces, past which the rest of the launch's records are refused. No record a real
instruction writes comes near (docs/security.md, "msSanitizer records").

Every expansion asks ``charge`` first, with the counts it is about to expand, computed from the records' fields
(a loop that multiplies patterns also ``charge_pieces``): a record over its bound is refused there (its counts
become 0, so nothing is expanded) and, after the converter returns, ``end`` drops whatever the record made before
(a record is checked whole or not at all) and checks the exact events and pieces of the records that expanded. A
refused record is told to the session as a named problem of its kernel (``record_refused`` /
``kernel_records_refused``), counted by reason in ``sanitizerd_compat_records_refused``.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from sanitizerd_protocol.patterns import extents, piece_counts

# A record's events: one per iteration of a 16-bit count (msSanitizer's loop counts, ndNum, nBurst and the repeat
# fields are all 16-bit or narrower) for a read and a write (a burst move whose stride does not fit one event is
# 2 x 65 535 of them).
MAX_RECORD_EVENTS: Final = 1 << 17
# A record's pieces: the blocks (or contiguous rows) its accesses list where a detector lists them (racecheck's
# ranges, initcheck's written bytes; patterns.piece_counts), what their work and memory grow with. As
# many as the events: a burst move's 2 x 65 535 bursts; a real fixpipe reads at most L0C's 8 192 blocks.
MAX_RECORD_PIECES: Final = 1 << 17
# What the expanding records of one kernel launch may become together: 1 M events (56 MB) and 2 M pieces, a few
# seconds of every detector (docs/performance.md, "Bounded expansion").
MAX_KERNEL_EXPANDED_EVENTS: Final = 1 << 20
MAX_KERNEL_EXPANDED_PIECES: Final = 1 << 21

# Why a record was refused: the label of sanitizerd_compat_records_refused.
RECORD_EVENTS: Final = "record_events"
RECORD_PIECES: Final = "record_pieces"
KERNEL_CAP: Final = "kernel_cap"
# Not refused, but checked less: a SIMT slot's SIMD events past what is held for its sections' places (simt_place)
SIMT_UNPLACED: Final = "simt_unplaced"
REASONS: Final = (RECORD_EVENTS, RECORD_PIECES, KERNEL_CAP, SIMT_UNPLACED)


def _n(value: int) -> str:
    return f"{value:,}".replace(",", " ")


class ExpansionBudget:
    """One kernel launch's expansion budget, and the records it refused. Shared by every slot of the launch
    (``BlockContext.budget``); a converter call is bracketed by ``begin`` and ``end``."""

    def __init__(self) -> None:
        self.events_left = MAX_KERNEL_EXPANDED_EVENTS
        self.pieces_left = MAX_KERNEL_EXPANDED_PIECES
        self.exhausted = False  # the kernel's cap was reached: every later record is refused
        # (reason, record type name) -> [records refused, serial of the first, what it would have become]
        self.refused: dict[tuple[str, str], list[int]] = {}
        self.counts: dict[str, int] = {}  # reason -> records refused, not yet taken (take_counts)
        self._name = ""
        self._serials: np.ndarray | None = None  # the call's records' serials, ascending
        self._spent: np.ndarray = np.empty(0, dtype=np.int64)  # per record of the call: events charged
        self._dead: np.ndarray = np.empty(0, dtype=bool)  # per record of the call: refused
        self._charged = False
        self._call_left = 0

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
        self._call_left = self.events_left  # what the launch had left when the call began

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
            self._spent[rec] = new.astype(np.int64)
            # The launch's cap keeps the call's records whole from the first on: the converter charges operand by
            # operand (every read, then every write), so what the call may spend is settled over whole records.
            spent = np.cumsum(np.where(self._dead, 0, self._spent))
            if int(spent[-1]) > self._call_left:
                self._cap(int(np.searchsorted(spent, self._call_left, side="right")))
            self.events_left = self._call_left - int(self._spent[~self._dead].sum())
        return self._dead[pos]

    def charge_pieces(self, serials: np.ndarray, pieces: np.ndarray) -> np.ndarray:
        """Before an expansion: rows that would list ``pieces`` pieces each (an upper bound). A record whose
        rows add up past its bound is refused; returns, per row, whether its record is refused."""
        pieces = np.asarray(pieces, dtype=np.float64)
        if self._serials is None:
            return pieces > MAX_RECORD_PIECES
        pos = np.searchsorted(self._serials, np.asarray(serials, dtype=np.uint64))
        total = np.bincount(pos, weights=pieces, minlength=self._serials.size)
        over = np.flatnonzero((total > MAX_RECORD_PIECES) & ~self._dead)
        if over.size:
            self._refuse(over, RECORD_PIECES, total[over])
        return self._dead[pos]

    def end(self, events: np.ndarray) -> np.ndarray:
        """After the converter: ``events`` less those of refused records, each record's exact event count and
        pieces checked against its bounds, and the pieces of records that expanded charged to the kernel."""
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
        # Pieces, of the records that expanded: a record that did not is a fixed few events (the fuzz target's
        # PLAIN_EVENTS), each bounded as a native client's event is; and calls without expansion (the hot path)
        # skip this.
        if self._charged:
            assert pos is not None
            if int(events["repeat"].max()) > 1 or int(events["block_stride"].max()) > 1:
                listed = piece_counts(events, extents(events)).astype(np.float64)
                pieces = np.bincount(pos, weights=listed, minlength=n)[:n]
            else:
                pieces = per_record.astype(np.float64)
            expanded = self._spent > 0
            over = np.flatnonzero((pieces > MAX_RECORD_PIECES) & expanded & ~self._dead)
            if over.size:
                self._refuse(over, RECORD_PIECES, pieces[over])
            rec = np.flatnonzero(expanded & ~self._dead)  # their pieces count against the launch's
            if rec.size:
                room = np.cumsum(pieces[rec])
                fits = room <= self.pieces_left
                if not fits.all():
                    self._cap(int(rec[int(np.argmin(fits))]))
                    room = room[fits]
                if room.size:
                    self.pieces_left -= int(room[-1])
        if not self._dead.any():
            return events
        if self._charged:  # what refused records were charged goes back to the launch
            self.events_left = self._call_left - int(self._spent[~self._dead].sum())
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
            elif reason == RECORD_PIECES:
                what = (
                    f"its accesses would be up to {_n(figure)} pieces, past the {_n(MAX_RECORD_PIECES)} one record may"
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
                f"{_n(MAX_KERNEL_EXPANDED_PIECES)} pieces"
            )
        return lines
