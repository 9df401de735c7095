"""SIMT sections (950 family): what racecheck and synccheck check of a block's threads (docs/protocol.md §7.8).

A block's SIMT section runs from its ``SIMT_START`` (the thread dims) to its ``SIMT_END``. Inside it, an access
with a non-zero ``thread`` is that thread's; each thread's ``SYNC_THREADS`` count so far is its epoch. Two
accesses of different threads race when they touch one byte of GM or UB in the same epoch, one of them writes,
and they are not both atomic; an access of the block's main scalar (thread 0, on PIPE_S) made while the section
is open races with any thread's access of that byte the same way, whatever the epoch, since ``__syncthreads()``
orders the threads among themselves only. A section's threads that reach a ``__syncthreads()`` (one pc) fewer
times than the thread that reached it most diverged, as msSanitizer's online check judges them.

``SimtSections.feed`` turns each batch into rows (vectorised: one sort per batch, no step per record), held until
the kernel ends; ``races`` and ``divergences`` read them then. What is held is bounded (``MAX_SIMT_ROWS``, and
``MAX_SIMT_ACCESS_BYTES`` bytes per access): past a bound the check stops, and the detector says so in a finding,
so that a kernel whose threads were not checked is never reported clean.
"""

from __future__ import annotations

import numpy as np

from sanitizerd.detectors._batches import highest_kind
from sanitizerd.detectors._sites import MAX_KERNEL_FINDINGS, left_out_text
from sanitizerd.detectors.base import SessionContext
from sanitizerd_protocol import records
from sanitizerd_protocol.model import Finding, RaceAccess
from sanitizerd_protocol.patterns import extents
from sanitizerd_protocol.records import (
    FLAG_CLAIM,
    FLAG_SIMT_ENTRY,
    MAX_SIMT_THREADS,
    EventKind,
    Pipe,
    Space,
    block_keys,
)

# Rows (accesses and barriers) the SIMT sections of one kernel launch may hold, and bytes one access may cover
# (a SIMT load or store is one element: msSanitizer's SimtLoadStoreRecord carries up to 16 bytes).
MAX_SIMT_ROWS = 1 << 21
MAX_SIMT_ACCESS_BYTES = 64

ROW = np.dtype(
    [
        ("section", "<u8"),  # the kernel's SIMT sections numbered in order of their SIMT_START
        ("epoch", "<i8"),  # the thread's SYNC_THREADS so far; -1 for the main scalar's accesses
        ("thread", "<u2"),  # linear index + 1; 0 = the main scalar
        ("kind", "u1"),  # READ, WRITE or SYNC_THREADS
        ("space", "u1"),
        ("atomic", "?"),
        ("pipe", "u1"),
        ("block_type", "u1"),
        ("block_id", "<u2"),
        ("address", "<u8"),
        ("size", "<u4"),
        ("serial", "<u8"),
        ("pc", "<u8"),
        ("location", "<u4"),
    ]
)

_START, _SYNC, _END = EventKind.SIMT_START, EventKind.SYNC_THREADS, EventKind.SIMT_END
# The kinds that mark a section, by kind: feed reads a batch only where one of them, or a thread's record, is in it,
# or a section is open (racecheck's compiled select reads this table to say so first).
SECTION_MARKS = np.zeros(256, dtype=bool)
SECTION_MARKS[[_START, _SYNC, _END]] = True
_CHECKED_SPACES = (Space.GM, Space.UB)
_SCALAR_PIPES = (Pipe.S, Pipe.S_CAL)


def dims_of(address: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """SIMT_START's packed thread dims (x, y, z), 16 bits each (records.py:simt_dims_address)."""
    address = address.astype(np.uint64)
    return (
        (address & np.uint64(0xFFFF)).astype(np.int64),
        ((address >> np.uint64(16)) & np.uint64(0xFFFF)).astype(np.int64),
        ((address >> np.uint64(32)) & np.uint64(0xFFFF)).astype(np.int64),
    )


def _group_starts(keys: np.ndarray) -> np.ndarray:
    change = np.ones(keys.size, dtype=bool)
    change[1:] = keys[1:] != keys[:-1]
    return change


def _exclusive_count_within(groups: np.ndarray, marked: np.ndarray) -> np.ndarray:
    """For rows sorted by group, how many ``marked`` rows of the same group precede each row."""
    through = np.cumsum(marked, dtype=np.int64)
    before = through - marked
    starts = np.flatnonzero(_group_starts(groups))
    first = np.repeat(before[starts], np.diff(np.append(starts, groups.size)))
    return before - first


class SimtSections:
    """The SIMT sections of one kernel launch: open ones per block, and the rows read at its end."""

    def __init__(self) -> None:
        self.rows: list[np.ndarray] = []
        self.held = 0
        self.sections = 0  # SIMT_STARTs so far, numbering the sections
        # Per block key: (section number, dims x, y, z) of its open section
        self.open: dict[int, tuple[int, int, int, int]] = {}
        self.carried_keys = np.empty(0, dtype=np.uint64)  # section << 16 | thread, of the open sections
        self.carried_counts = np.empty(0, dtype=np.int64)  # SYNC_THREADS each has run so far
        self.dims_parts: list[np.ndarray] = []  # each section's (x, y, z), in the order of its number
        self.start_parts: list[np.ndarray] = []  # each section's (block key, SIMT_START serial), likewise
        self.unchecked = 0  # records inside SIMT sections that could not be placed (bad dims, thread past them)
        self.stopped = ""

    def feed(self, events: np.ndarray) -> None:
        if self.stopped:
            return
        kind = events["kind"]
        marks = SECTION_MARKS[kind]
        thread = events["thread"]
        # A SIMT call's entry records are its block's PIPE_V access (racecheck's pipes check them), not a thread's
        simt = (thread != 0) & ((events["flags"] & FLAG_SIMT_ENTRY) == 0)
        if not (marks.any() or simt.any() or self.open):
            return
        keys = block_keys(events)
        access = kind <= EventKind.WRITE
        in_space = np.isin(events["space"], _CHECKED_SPACES)
        scalar = access & ~simt & in_space & np.isin(events["pipe"], _SCALAR_PIPES)
        # The main scalar matters only in blocks whose section is open at some point of this batch.
        blocks_here = np.union1d(np.fromiter(self.open, dtype=np.uint32, count=len(self.open)), keys[marks])
        claim = (events["flags"] & FLAG_CLAIM) != 0  # memcheck's stomping alone reads a claim
        wanted = marks | (simt & ((access & ~claim) | (kind == _SYNC))) | (scalar & np.isin(keys, blocks_here))
        self.unchecked += int(np.count_nonzero(simt & ~wanted & ~claim))  # a thread's record of another kind
        index = np.flatnonzero(wanted)
        if not index.size:
            return
        index = index[np.argsort(keys[index], kind="stable")]  # by block, then program order
        self._place(events, index, keys[index])

    def _place(self, events: np.ndarray, index: np.ndarray, keys: np.ndarray) -> None:
        kind = events["kind"][index]
        is_start, is_end = kind == _START, kind == _END
        first = _group_starts(keys)
        # Each row's latest boundary in its block (START or END), or none yet in this batch: the carried state.
        position = np.arange(index.size)
        boundary = np.where(is_start | is_end, position, -1)
        block_begin = np.maximum.accumulate(np.where(first, position, 0))
        latest = np.maximum.accumulate(np.maximum(boundary, block_begin - 1))
        has_boundary = latest >= block_begin
        # Sections opened here are numbered in arrival order over the whole batch, after those already numbered.
        start_rows = np.flatnonzero(is_start)
        start_rows_by_arrival = start_rows[np.argsort(index[start_rows], kind="stable")]
        number = np.empty(index.size, dtype=np.int64)
        number[start_rows_by_arrival] = self.sections + np.arange(start_rows.size)
        self.sections += int(start_rows.size)
        x, y, z = dims_of(events["address"][index])
        carried = np.array([self.open.get(int(k), (-1, 0, 0, 0)) for k in np.unique(keys)], dtype=np.int64)
        carried_of = carried[np.searchsorted(np.unique(keys), keys)]
        safe = np.maximum(latest, 0)
        opened_here = has_boundary & is_start[safe]
        section = np.where(has_boundary, np.where(opened_here, number[safe], -1), carried_of[:, 0])
        dx = np.where(has_boundary, np.where(opened_here, x[safe], 0), carried_of[:, 1])
        dy = np.where(has_boundary, np.where(opened_here, y[safe], 0), carried_of[:, 2])
        dz = np.where(has_boundary, np.where(opened_here, z[safe], 0), carried_of[:, 3])
        count = dx * dy * dz
        bad_dims = (dx < 1) | (dy < 1) | (dz < 1) | (count > MAX_SIMT_THREADS)
        thread = events["thread"][index].astype(np.int64)
        inside = (section >= 0) & ~is_start & ~is_end
        placed = inside & ~bad_dims & (thread <= count)
        placed &= (thread > 0) | (kind <= EventKind.WRITE)  # a main-scalar barrier names no thread: not placed
        self.unchecked += int(np.count_nonzero(((thread > 0) & ~placed) & ~is_start & ~is_end))
        if start_rows.size:  # each section is one row held, so that SIMT_STARTs alone cannot grow the state unbounded
            if self.held + start_rows.size > MAX_SIMT_ROWS:
                self.stop(f"more than {MAX_SIMT_ROWS} SIMT thread records in one kernel launch")
                return
            self.held += int(start_rows.size)
            self.dims_parts.append(np.stack((x, y, z), axis=1)[start_rows_by_arrival])
            serials = events["serial"][index[start_rows_by_arrival]].astype(np.uint64)
            self.start_parts.append(np.stack((keys[start_rows_by_arrival].astype(np.uint64), serials), axis=1))
        self._carry(keys, section, dx, dy, dz, is_end, first)
        self._hold(events, index[placed], section[placed], thread[placed], kind[placed])

    def _carry(
        self, keys: np.ndarray, section: np.ndarray, dx: np.ndarray, dy: np.ndarray, dz: np.ndarray,
        is_end: np.ndarray, first: np.ndarray,
    ) -> None:  # fmt: skip
        """What each block's last row leaves open for the next batch."""
        last = np.flatnonzero(np.append(first[1:], True))
        closed = is_end[last] | (section[last] < 0)
        for key, number, x, y, z, gone in zip(
            keys[last].tolist(),
            section[last].tolist(),
            dx[last].tolist(),
            dy[last].tolist(),
            dz[last].tolist(),
            closed.tolist(),
            strict=True,
        ):  # one step per block of the batch, not per record
            if gone:
                self.open.pop(key, None)
            else:
                self.open[key] = (number, x, y, z)

    def _hold(
        self, events: np.ndarray, index: np.ndarray, section: np.ndarray, thread: np.ndarray, kind: np.ndarray
    ) -> None:
        if not index.size:
            return
        if self.held + index.size > MAX_SIMT_ROWS:
            self.stop(f"more than {MAX_SIMT_ROWS} SIMT thread records in one kernel launch")
            return
        # Epochs: SYNC_THREADS of the same section and thread before the row, in program order, plus those of
        # earlier batches (kept per (section, thread) of the sections still open, as sorted keys and counts).
        group = (section.astype(np.uint64) << np.uint64(16)) | thread.astype(np.uint64)
        order = np.lexsort((index, group))
        is_sync = kind == _SYNC
        epoch = np.empty(index.size, dtype=np.int64)
        epoch[order] = _exclusive_count_within(group[order], is_sync[order])
        if self.carried_keys.size:
            at = np.minimum(np.searchsorted(self.carried_keys, group), self.carried_keys.size - 1)
            epoch += np.where(self.carried_keys[at] == group, self.carried_counts[at], 0)
        keys = np.concatenate((self.carried_keys, group[is_sync & (thread > 0)]))
        counts = np.concatenate((self.carried_counts, np.ones(int(np.count_nonzero(is_sync & (thread > 0))), np.int64)))
        still_open = np.fromiter((number for number, *_ in self.open.values()), dtype=np.uint64, count=len(self.open))
        keep = np.isin(keys >> np.uint64(16), still_open)
        self.carried_keys, where = np.unique(keys[keep], return_inverse=True)
        summed = np.bincount(where, weights=counts[keep], minlength=self.carried_keys.size)
        self.carried_counts = summed.astype(np.int64)
        epoch[thread == 0] = -1
        ext = extents(events[index])
        rows = np.empty(index.size, dtype=ROW)
        rows["section"] = section
        rows["epoch"] = epoch
        rows["thread"] = thread
        rows["kind"] = kind
        rows["space"] = events["space"][index]
        rows["atomic"] = (events["flags"][index] & 1) != 0
        rows["pipe"] = events["pipe"][index]
        rows["block_type"] = events["block_type"][index]
        rows["block_id"] = events["block_id"][index]
        rows["address"] = events["address"][index]
        rows["size"] = np.minimum(ext, np.iinfo(np.uint32).max)
        rows["serial"] = events["serial"][index]
        rows["pc"] = events["pc"][index]
        rows["location"] = events["location"][index]
        wide = (kind <= EventKind.WRITE) & (ext > MAX_SIMT_ACCESS_BYTES)
        if wide.any():
            self.unchecked += int(np.count_nonzero(wide))
            rows = rows[~wide]
        self.rows.append(rows)
        self.held += rows.size

    def stop(self, why: str) -> None:
        self.stopped = why
        self.rows, self.held = [], 0

    def all_rows(self) -> np.ndarray:
        return np.concatenate(self.rows) if self.rows else np.empty(0, dtype=ROW)

    def dims(self) -> np.ndarray:
        """Every section's (x, y, z), indexed by its number."""
        if len(self.dims_parts) != 1:
            self.dims_parts = [np.concatenate(self.dims_parts) if self.dims_parts else np.ones((0, 3), np.int64)]
        return self.dims_parts[0]

    def position_at(self, block_key: int, serial: int, thread: int) -> list[int]:
        """The (x, y, z) of ``thread`` (linear index + 1) of the section of block ``block_key`` that began last at
        or before ``serial`` (a SIMT call's entry records sit in a section of their own call); its linear index
        where no such section is known (the check stopped) or the thread is past its dims."""
        if len(self.start_parts) != 1:
            self.start_parts = [np.concatenate(self.start_parts) if self.start_parts else np.zeros((0, 2), np.uint64)]
        starts = self.start_parts[0]
        mine = np.flatnonzero((starts[:, 0] == block_key) & (starts[:, 1] <= serial))
        if mine.size:
            section = int(mine[np.argmax(starts[mine, 1])])
            x, y, z = self.dims()[section].tolist()
            if min(x, y, z) >= 1 and thread <= x * y * z:
                return self.position(section, thread)
        return [thread - 1, 0, 0]

    def position(self, section: int, thread: int) -> list[int]:
        """A thread's (x, y, z) in its section, from its linear index + 1 (its rows are only held where the
        section's dims are good)."""
        x, y, _ = self.dims()[section].tolist()
        linear = thread - 1
        return [linear % x, (linear % (x * y)) // x, linear // (x * y)]


class SimtDims:
    """Each block's latest SIMT section's thread dims, for the detectors that only name a thread's position
    (memcheck, initcheck): what a block's threads did is reported with the dims of the section open last."""

    def __init__(self) -> None:
        self.dims: dict[int, tuple[int, int, int]] = {}

    def feed(self, events: np.ndarray) -> None:
        if highest_kind(events) < _START:
            return  # no SIMT section in the batch (most kernels open none)
        starts = np.flatnonzero(events["kind"] == _START)
        if not starts.size:
            return
        keys = block_keys(events[starts])
        last = keys.size - 1 - np.unique(keys[::-1], return_index=True)[1]  # each block's last SIMT_START here
        x, y, z = dims_of(events["address"][starts[last]])
        for key, dims in zip(keys[last].tolist(), zip(x.tolist(), y.tolist(), z.tolist(), strict=True), strict=True):
            self.dims[key] = dims  # one step per block that opened a section in this batch

    def position(self, head: np.void) -> list[int]:
        """A site row's (or event's) thread position; its linear index where the dims are unknown or do not fit."""
        linear = int(head["thread"]) - 1
        x, y, z = self.dims.get(int(head["block_type"]) << 16 | int(head["block_id"]), (0, 0, 0))
        if min(x, y, z) < 1 or x * y * z > MAX_SIMT_THREADS or linear >= x * y * z:
            return [linear, 0, 0]
        return [linear % x, (linear % (x * y)) // x, linear // (x * y)]


def _first_last(groups: np.ndarray, chosen: np.ndarray, ngroups: int) -> tuple[np.ndarray, np.ndarray]:
    """Per group (rows sorted by group, then thread), the first and last ``chosen`` row; -1 where none."""
    where = np.flatnonzero(chosen)
    first = np.full(ngroups, -1, dtype=np.int64)
    last = np.full(ngroups, -1, dtype=np.int64)
    if where.size:
        g = groups[where]
        first[g[::-1]] = where[::-1]  # the last assignment wins: the first chosen row of each group
        last[g] = where
    return first, last


def _pairs(
    groups: np.ndarray, ngroups: int, thread: np.ndarray, a: np.ndarray, b: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per group, one (row of ``a``, row of ``b``) of different threads, when there is one: the lowest and highest
    thread of each side suffice, since two sides with no differing pair are both one and the same thread."""
    a_first, a_last = _first_last(groups, a, ngroups)
    b_first, b_last = _first_last(groups, b, ngroups)
    both = (a_first >= 0) & (b_first >= 0)
    one = np.where(both, thread[np.maximum(a_first, 0)] != thread[np.maximum(b_last, 0)], False)
    two = np.where(both & ~one, thread[np.maximum(a_last, 0)] != thread[np.maximum(b_first, 0)], False)
    found = one | two
    first = np.where(one, a_first, a_last)[found]
    second = np.where(one, b_last, b_first)[found]
    return first, second


def _byte_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each access row once per byte it covers: (row index, byte address)."""
    size = rows["size"].astype(np.int64)
    row = np.repeat(np.arange(rows.size), size)
    starts = np.cumsum(size) - size
    offset = np.arange(row.size, dtype=np.int64) - np.repeat(starts, size)
    return row, rows["address"][row] + offset.astype(np.uint64)


def races(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Racing pairs of access rows (``first``, ``second`` indices into ``rows``), one per pair of rows: between
    threads of one epoch, and between the main scalar and any thread, of one section, on one byte of one space."""
    accesses = np.flatnonzero((rows["kind"] <= EventKind.WRITE) & np.isin(rows["space"], _CHECKED_SPACES))
    if not accesses.size:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    sub = rows[accesses]
    row, byte = _byte_rows(sub)
    firsts, seconds = [], []
    for with_epoch in (True, False):  # threads among themselves; then the main scalar against the threads
        epoch = sub["epoch"][row] if with_epoch else np.zeros(row.size, np.int64)
        order = np.lexsort((sub["thread"][row], byte, epoch, sub["space"][row], sub["section"][row]))
        r, by, ep = row[order], byte[order], epoch[order]
        key_change = _group_starts(sub["section"][r]) | _group_starts(sub["space"][r]) | _group_starts(by)
        key_change |= _group_starts(ep)
        groups = np.cumsum(key_change) - 1
        ngroups = int(groups[-1]) + 1 if groups.size else 0
        thread = sub["thread"][r]
        write = sub["kind"][r] == EventKind.WRITE
        atomic = sub["atomic"][r]
        if with_epoch:
            side = thread > 0
            pairs_of = ((write & ~atomic & side, side), (write & atomic & side, ~atomic & side))
        else:
            scalar, threads = thread == 0, thread > 0
            pairs_of = (
                (write & ~atomic & scalar, threads), (scalar, write & ~atomic & threads),
                (write & atomic & scalar, ~atomic & threads), (~atomic & scalar, write & atomic & threads),
            )  # fmt: skip
        for a, b in pairs_of:
            first, second = _pairs(groups, ngroups, thread, a, b)
            firsts.append(accesses[r[first]])
            seconds.append(accesses[r[second]])
    first, second = np.concatenate(firsts), np.concatenate(seconds)
    low, high = np.minimum(first, second), np.maximum(first, second)
    unique = np.unique((low.astype(np.uint64) << np.uint64(32)) | high.astype(np.uint64))
    return (unique >> np.uint64(32)).astype(np.int64), (unique & np.uint64(0xFFFFFFFF)).astype(np.int64)


def divergences(rows: np.ndarray, dims: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per (section, barrier) where some thread of the section reached the barrier fewer times than another:
    a row of that barrier (its first, in ``rows``), and the lowest such thread (linear index + 1)."""
    syncs = np.flatnonzero(rows["kind"] == _SYNC)
    if not syncs.size:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    sub = rows[syncs]
    # A barrier is its pc, or its location where the client gives no pc.
    barrier = np.where(sub["pc"] != 0, sub["pc"], sub["location"].astype(np.uint64) | np.uint64(1 << 63))
    order = np.lexsort((sub["thread"], barrier, sub["section"]))
    section, barrier, thread = sub["section"][order], barrier[order], sub["thread"][order].astype(np.int64)
    triple = _group_starts(section) | _group_starts(barrier) | _group_starts(thread)
    starts = np.flatnonzero(triple)
    reached = np.diff(np.append(starts, order.size))  # times each (section, barrier, thread) reached it
    section, barrier, thread = section[starts], barrier[starts], thread[starts]
    change = _group_starts(section) | _group_starts(barrier)
    group = np.cumsum(change) - 1
    group_start = np.flatnonzero(change)
    most = np.maximum.reduceat(reached, group_start)
    present = np.diff(np.append(group_start, thread.size))
    count = dims[section[group_start].astype(np.int64)].prod(axis=1)
    # The lowest thread that reached it fewer times: one present below the most, or the first absent one.
    rank = np.arange(thread.size) - group_start[group] + 1  # threads present are 1..count; absent ones leave gaps
    big = np.int64(1 << 40)
    first_gap = np.minimum.reduceat(np.where(thread != rank, rank, big), group_start)
    first_gap = np.where((first_gap == big) & (present < count), present + 1, first_gap)
    first_low = np.minimum.reduceat(np.where(reached < most[group], thread, big), group_start)
    lowest = np.minimum(first_gap, first_low)
    diverged = lowest < big
    head = order[starts[group_start]]
    return syncs[head[diverged]], lowest[diverged]


def _stopped(context: SessionContext, kernel: str | None, detector: str, sections: SimtSections) -> list[Finding]:
    """What a kernel whose SIMT threads were not (all) checked says, so that it never passes as clean."""
    findings = []
    if sections.stopped:
        detail = f"{detector} stopped checking this kernel's SIMT threads: {sections.stopped}"
        findings.append(context.finding("internal_error", kernel=kernel, space="", detail=detail))
    if sections.unchecked:
        detail = (
            f"{detector} did not check {sections.unchecked} SIMT thread records of this kernel launch: outside a "
            f"SIMT section, past its thread dims (at most {MAX_SIMT_THREADS} threads), of a kind a thread does not "
            f"run, or wider than {MAX_SIMT_ACCESS_BYTES} bytes"
        )
        findings.append(context.finding("internal_error", kernel=kernel, space="", detail=detail))
    return findings


def _fold(keys: list[np.ndarray], order_by: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    """One representative per distinct key (the first by ``order_by``), its occurrences, how many distinct keys
    were left out past MAX_KERNEL_FINDINGS, and each input's site (its representative's rank, -1: left out)."""
    order = np.lexsort((order_by, *reversed(keys)))
    change = np.zeros(order.size, dtype=bool)
    if order.size:
        change[0] = True
    for key in keys:
        column = key[order]
        change[1:] |= column[1:] != column[:-1]
    starts = np.flatnonzero(change)
    counts = np.diff(np.append(starts, order.size))
    heads = order[starts]
    by_serial = np.argsort(order_by[heads], kind="stable")[:MAX_KERNEL_FINDINGS]
    rank = np.full(starts.size, -1, dtype=np.int64)
    rank[by_serial] = np.arange(by_serial.size)
    site = np.empty(order.size, dtype=np.int64)
    site[order] = rank[np.cumsum(change) - 1]
    return heads[by_serial], counts[by_serial], max(starts.size - MAX_KERNEL_FINDINGS, 0), site


def race_findings(context: SessionContext, kernel: str | None, sections: SimtSections) -> list[Finding]:
    """racecheck's SIMT findings: one per site (the two accesses' kind, space, pcs and locations), shown with its
    lowest pair of threads, as msSanitizer keeps the lowest thread locations of a folded race."""
    findings = _stopped(context, kernel, "racecheck", sections)
    rows = sections.all_rows()
    first, second = races(rows)
    if not first.size:
        return findings
    # msSanitizer's order: two threads by thread (lowest first), the main scalar and a thread by serial number.
    both_threads = (rows["thread"][first] > 0) & (rows["thread"][second] > 0)
    swap = np.where(
        both_threads, rows["thread"][first] > rows["thread"][second], rows["serial"][first] > rows["serial"][second]
    )
    first, second = np.where(swap, second, first), np.where(swap, first, second)
    write1 = rows["kind"][first] == EventKind.WRITE
    write2 = rows["kind"][second] == EventKind.WRITE
    hazard = np.where(write2 & write1, 2, np.where(write1, 0, 1))  # WAW, RAW (a read after a write), WAR
    keys = [
        hazard, rows["space"][first], rows["pc"][first], rows["pc"][second], rows["location"][first],
        rows["location"][second],
    ]  # fmt: skip
    lowest = (rows["thread"][first].astype(np.uint64) << np.uint64(16)) | rows["thread"][second]
    heads, counts, left_out, site = _fold(keys, lowest)
    blocks = _blocks_of_sites(site, rows["block_type"][first], rows["block_id"][first], heads.size)
    kinds = ("race_raw", "race_war", "race_waw")
    for number, (head, count) in enumerate(zip(heads.tolist(), counts.tolist(), strict=True)):
        a, b = int(first[head]), int(second[head])
        findings.append(
            context.finding(
                kinds[int(hazard[head])],
                kernel=kernel,
                space=records.space_name(int(rows["space"][a])),
                serial=int(min(rows["serial"][a], rows["serial"][b])),
                count=count,
                blocks=blocks[number],
                accesses=[_access(context, rows, a, sections), _access(context, rows, b, sections)],
            )
        )
    if left_out:
        detail = left_out_text("racecheck", left_out, int(counts.sum()))
        findings.append(context.finding("internal_error", kernel=kernel, space="", detail=detail))
    return findings


def _blocks_of_sites(
    site: np.ndarray, block_type: np.ndarray, block_id: np.ndarray, sites: int
) -> list[dict[str, list[int]]]:
    """Each reported site's blocks, by block type: one sort of the distinct (site, block) pairs."""
    kept = site >= 0
    pairs = np.unique(
        (site[kept].astype(np.uint64) << np.uint64(24)) | (block_type[kept].astype(np.uint64) << np.uint64(16))
        | block_id[kept].astype(np.uint64)
    )  # fmt: skip
    blocks: list[dict[str, list[int]]] = [{} for _ in range(sites)]
    for pair in pairs.tolist():  # one step per (site, block) reported
        blocks[pair >> 24].setdefault(records.block_type_name((pair >> 16) & 0xFF), []).append(pair & 0xFFFF)
    return blocks


def _access(context: SessionContext, rows: np.ndarray, row: int, sections: SimtSections) -> RaceAccess:
    where, stack = context.place(int(rows["location"][row]))
    thread = int(rows["thread"][row])
    return RaceAccess(
        pipe=records.pipe_name(int(rows["pipe"][row])),
        op="Write" if rows["kind"][row] == EventKind.WRITE else "Read",
        address=int(rows["address"][row]),
        block_type=records.block_type_name(int(rows["block_type"][row])),
        blocks=[int(rows["block_id"][row])],
        serial=int(rows["serial"][row]),
        pc=int(rows["pc"][row]),
        location=where,
        stack=stack,
        thread=sections.position(int(rows["section"][row]), thread) if thread else [],
    )


def divergence_findings(context: SessionContext, kernel: str | None, sections: SimtSections) -> list[Finding]:
    """synccheck's SIMT findings: per barrier (pc or location) and block, its lowest diverging thread (msSanitizer
    reports every diverging thread; the count says in how many sections of the block the barrier diverged)."""
    findings = _stopped(context, kernel, "synccheck", sections)
    rows = sections.all_rows()
    heads, lowest = divergences(rows, sections.dims())
    if not heads.size:
        return findings
    keys = [rows["pc"][heads], rows["location"][heads], rows["block_type"][heads], rows["block_id"][heads]]
    picked, counts, left_out, _ = _fold(keys, rows["serial"][heads])
    for pick, count in zip(picked.tolist(), counts.tolist(), strict=True):
        row = int(heads[pick])
        findings.append(
            context.finding(
                "divergent_threads",
                kernel=kernel,
                location=int(rows["location"][row]),
                blocks={records.block_type_name(int(rows["block_type"][row])): [int(rows["block_id"][row])]},
                space="",
                serial=int(rows["serial"][row]),
                pc=int(rows["pc"][row]),
                count=count,
                thread=sections.position(int(rows["section"][row]), int(lowest[pick])),
            )
        )
    if left_out:
        detail = left_out_text("synccheck", left_out, int(counts.sum()))
        findings.append(context.finding("internal_error", kernel=kernel, space="", detail=detail))
    return findings
