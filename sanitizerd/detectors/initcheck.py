"""initcheck: reads of bytes nothing has written (``uninitialized_read``, reference §2.1).

Which bytes are defined is kept as byte ranges, not one shadow byte per byte: memory use follows how
fragmented the written data is, not how much was allocated. GM ranges live for the session (host stores,
memcpy and memset define them, a free undefines them); on-chip and private ranges are per block and are
forgotten at the kernel's end (msSanitizer resets them at each block's end). One set holds all of them under
a composite key: the address space, and for on-chip spaces the block, in the top bits.

A batch is checked in order without a per-event loop: reads are first checked against what was defined
before the batch; only reads with undefined bytes (in a steady-state kernel, few) are checked again against
the batch's earlier writes, pairwise, with the writes found by a sorted search.
"""

from __future__ import annotations

import sys

import numpy as np

from sanitizerd.detectors._heap import LEAKING_TABLE, TABLE_OF_SOURCE
from sanitizerd.detectors._intervals import MAX_TRACKED_RANGES, IntervalSet, merge_ranges
from sanitizerd.detectors._patterns import extents, ranges
from sanitizerd.detectors._runs import (
    CHUNK,
    PairBudget,
    PatternTooComplex,
    below,
    coverage,
    piece_bounds,
    piece_chunks,
    runs,
)
from sanitizerd.detectors._simt import SimtDims
from sanitizerd.detectors._sites import SiteLog, site_findings, site_rows
from sanitizerd.detectors.base import KernelLaunch, SessionContext
from sanitizerd.detectors.registry import register
from sanitizerd.native import load
from sanitizerd_protocol.messages import HostOp
from sanitizerd_protocol.model import Finding
from sanitizerd_protocol.records import EVENT_DTYPE, FLAG_CLAIM, BlockType, EventKind, Space

_U64 = np.uint64
_SPACE_SHIFT = _U64(60)
_GM_LO, _GM_HI = int(Space.GM) << 60, (int(Space.GM) + 1) << 60
_ADDRESS_BITS = _U64((1 << 42) - 1)
_UNINITIALIZED = 0
_ON_CHIP = (Space.PRIVATE, Space.L1, Space.L0A, Space.L0B, Space.L0C, Space.UB, Space.BT, Space.FB)
# What the composite keys have room for: the defined spaces (4 bits) and block types (2 bits). An access naming any
# other (a hostile or newer client's) is not checked, and the kernel's findings say how many were not.
_KEYED_SPACE = np.zeros(256, dtype=bool)
_KEYED_SPACE[[Space.GM, *_ON_CHIP]] = True
_KEYED_BLOCK_TYPE = np.zeros(256, dtype=bool)
_KEYED_BLOCK_TYPE[list(BlockType)] = True
# Events per slice of the in-order recheck: a read is paired only with earlier writes of its own slice, which
# bounds the pairs (and memory) however many writes of the same bytes a batch holds.
_SLICE = 2048


def _key_window(event: np.void) -> tuple[int, int]:
    """An access's composite keys are its addresses plus this offset, for addresses below this window."""
    space = int(event["space"])
    if space == Space.GM:
        return _GM_LO, 1 << 59
    return (space << 60) | (int(event["block_type"]) << 58) | (int(event["block_id"]) << 42), 1 << 42


def composite(space: np.ndarray, block_type: np.ndarray, block_id: np.ndarray, address: np.ndarray) -> np.ndarray:
    """One key space for every (address space, block) so that one interval set serves them all."""
    key = space.astype(_U64) << _SPACE_SHIFT
    gm = space == Space.GM
    on_chip = (block_type.astype(_U64) << _U64(58)) | (block_id.astype(_U64) << _U64(42)) | (address & _ADDRESS_BITS)
    return key | np.where(gm, np.minimum(address, _U64((1 << 59) - 1)), on_chip)


# Pieces an access may list before its exact count is taken for grouping (see _check_accesses).
WIDE_ACCESS = 64

# The steady-state batch in one compiled pass (sanitizerd/native/_initcheck.c), or None: numpy's path alone. The
# records are read in the wire's little-endian order.
NATIVE = load("_initcheck") if sys.byteorder == "little" else None
_STATUS_NONE, _STATUS_FAST, _STATUS_FALLBACK = 0, 1, 2
_EMPTY = np.zeros(0, dtype=_U64)
_NO_RANGES = np.zeros(1, dtype=_U64)  # the cumulative lengths of an empty level
# The batch's own written ranges the compiled pass keeps to check reads of them (a batch writing more separate
# ranges, with such a read after, is numpy's).
NATIVE_WRITTEN_RANGES = 1024
# Pieces of writes not yet defined the compiled pass lists for a batch, at least (a batch with more is numpy's).
NATIVE_LISTED = 1 << 16


@register("initcheck")
class Initcheck:
    name = "initcheck"

    def __init__(self, context: SessionContext, native: object | None = NATIVE) -> None:
        self.context = context
        self.native = native  # the compiled module, or None for numpy's path (the equivalence tests pick)
        self.defined = IntervalSet()
        self.sites = SiteLog()
        self.kernel: KernelLaunch | None = None
        self.simt_dims = SimtDims()  # to name the position of a SIMT thread's uninitialized read
        # (heap table, GM address) -> size, to undefine on free: per table, as memcheck's heap keeps them, so that
        # an annotation freed at a buffer's address is not taken for the buffer.
        self.allocations: dict[tuple[str, int], int] = {}
        self.given_up = False
        self.notices: list[Finding] = []  # bounds this detector hit, told with the kernel's findings
        self.unkeyed = 0  # accesses of the current kernel whose space or block type is not defined: not checked

    def kernel_begin(self, launch: KernelLaunch) -> None:
        self.kernel = launch
        self.sites = SiteLog()
        self.unkeyed = 0
        self.simt_dims = SimtDims()

    def check(self, events: np.ndarray) -> None:
        if self.native is not None and events.dtype == EVENT_DTYPE and self._check_native(events):
            return
        self.simt_dims.feed(events)
        kind = events["kind"]
        ext = extents(events)
        live = (ext > 0) & (kind <= EventKind.WRITE) & ((events["flags"] & FLAG_CLAIM) == 0)
        unkeyed = live & ~(_KEYED_SPACE[events["space"]] & _KEYED_BLOCK_TYPE[events["block_type"]])
        if unkeyed.any():
            self.unkeyed += int(unkeyed.sum())
            live &= ~unkeyed
        if live.any():
            self._check_accesses(events, kind, ext, live)
        finished = kind == EventKind.BLOCK_FINISH
        if finished.any():
            self._forget_blocks(events[finished])

    def _check_native(self, events: np.ndarray) -> bool:
        """``check`` through the compiled pass, where the batch is of its shape (every access one range, every
        read defined by the set or the batch's earlier writes); False, with nothing changed, where numpy's path is
        to check it (a finding among them).

        What is left here is per group, not per record: the writes the pass found not yet defined are added as
        numpy's path adds them (_check_accesses's groups, and within a group _recheck_in_order's calls, the bound on
        ranges checked after each group), so that the set, and when initcheck gives up, come out the same."""
        events = np.ascontiguousarray(events)
        defined = self.defined
        main = (defined._starts, defined._ends, defined._cumulative)
        if defined._pending_starts.size:
            lengths = defined._pending_ends - defined._pending_starts
            pending = (defined._pending_starts, defined._pending_ends,
                       np.concatenate(([0], np.cumsum(lengths, dtype=_U64))).astype(_U64))  # fmt: skip
        else:
            pending = (_EMPTY, _EMPTY, _NO_RANGES)
        slots = max(events.size, NATIVE_LISTED)
        keys, stops = np.empty(slots, _U64), np.empty(slots, _U64)
        groups, calls = np.empty(slots, np.int64), np.empty(slots, np.int64)
        status, unkeyed, listed, simt_start, block_finish = self.native.scan(
            events, *(np.ascontiguousarray(part, dtype=_U64) for part in (*main, *pending)),
            CHUNK, WIDE_ACCESS, _SLICE, NATIVE_WRITTEN_RANGES, not self.given_up, keys, stops, groups, calls,
        )  # fmt: skip
        if status == _STATUS_FALLBACK:
            return False
        if simt_start:
            self.simt_dims.feed(events)
        self.unkeyed += unkeyed
        if status == _STATUS_FAST and not self.given_up:
            self._add_checked_writes(keys[:listed], stops[:listed], groups[:listed], calls[:listed])
        if block_finish:
            self._forget_blocks(events[events["kind"] == EventKind.BLOCK_FINISH])
        return True

    def _add_checked_writes(self, keys: np.ndarray, stops: np.ndarray, groups: np.ndarray, calls: np.ndarray) -> None:
        """The batch's writes not yet defined, one ``add_new`` per call of numpy's path, the bound checked after
        each group. A group adding nothing leaves the set as it was, so its check is the one before."""
        if len(self.defined) > MAX_TRACKED_RANGES:
            self._give_up()
            return
        cut = (np.flatnonzero((np.diff(groups) != 0) | (np.diff(calls) != 0)) + 1).tolist()
        for lo, hi in zip([0, *cut], [*cut, keys.size], strict=True):
            self.defined.add_new(keys[lo:hi], stops[lo:hi])
            if (hi == keys.size or groups[hi] != groups[lo]) and len(self.defined) > MAX_TRACKED_RANGES:
                self._give_up()
                return

    def _forget_blocks(self, finished: np.ndarray) -> None:
        """A finished block's on-chip and private bytes are undefined again (msSanitizer's BLOCK_FINISH)."""
        finished = finished[_KEYED_BLOCK_TYPE[finished["block_type"]]]  # no other block type has keys
        for block_type, block_id in set(
            zip(finished["block_type"].tolist(), finished["block_id"].tolist(), strict=True)
        ):
            for space in _ON_CHIP:
                # The block's whole region of this space in the composite key space (see ``composite``).
                lo = (int(space) << 60) | (block_type << 58) | (block_id << 42)
                self.defined.remove(lo, lo + (1 << 42))

    def _check_accesses(self, events: np.ndarray, kind: np.ndarray, ext: np.ndarray, live: np.ndarray) -> None:
        """The batch in order, in runs of events whose pieces number about CHUNK (a strided vector access is
        thousands of pieces); an access of more pieces than that is checked alone, without listing its pieces."""
        if self.given_up:
            return
        index = np.flatnonzero(live)
        # Bounds, not counts: the exact count reads every record's pattern fields, which costs more than checking
        # a few more groups; it is taken only for wide accesses, where a bound could be far off.
        pieces = piece_bounds(events, ext, index, exact_above=WIDE_ACCESS)
        if int(pieces.sum()) <= CHUNK:  # the common case: the whole batch at once
            self._check_rows(events, kind, ext, index)
            if len(self.defined) > MAX_TRACKED_RANGES:
                self._give_up()
            return
        budget = PairBudget()  # the closed forms' CPU for this batch
        huge = pieces > CHUNK
        group = np.cumsum(np.where(huge, CHUNK, pieces)) // CHUNK
        group[huge] = -1 - np.arange(int(huge.sum()))  # each huge access a group of its own
        cut = np.flatnonzero(np.diff(group, prepend=group[0] - 1) != 0)
        for lo, hi in zip(cut.tolist(), [*cut[1:].tolist(), index.size], strict=True):
            rows = index[lo:hi]
            if huge[lo]:
                self._check_huge(events, ext, rows, budget)
            else:
                self._check_rows(events, kind, ext, rows)
            if len(self.defined) > MAX_TRACKED_RANGES:
                self._give_up()
                return

    def _check_rows(self, events: np.ndarray, kind: np.ndarray, ext: np.ndarray, rows: np.ndarray) -> None:
        event, start, stop = ranges(events, ext, rows)  # event: batch position, i.e. order
        keys = composite(events["space"][event], events["block_type"][event], events["block_id"][event], start)
        stops = keys + (stop - start)
        is_read = kind[event] == EventKind.READ
        undefined = np.zeros(event.size, dtype=_U64)
        undefined[is_read] = (stops - keys)[is_read] - self.defined.covered(keys[is_read], stops[is_read])
        if undefined.any():
            self._recheck_in_order(event, keys, stops, is_read, undefined)
            self._report(events, event[is_read], keys[is_read], undefined[is_read])
        else:
            self.defined.add_new(keys[~is_read], stops[~is_read])

    def _check_huge(self, events: np.ndarray, ext: np.ndarray, rows: np.ndarray, budget: PairBudget) -> None:
        """One access of more than CHUNK pieces. Nothing earlier in the batch is left unapplied, so a read is
        checked against the set in closed form, and a write's runs not yet wholly defined are added a bounded
        chunk of pieces at a time. Its keys are its addresses plus one offset inside the space's window (2**59
        bytes of GM, 2**42 of an on-chip space); pieces past the window (no memory lies there) count as never
        written, and writes there are not kept."""
        [row] = rows.tolist()
        one = events[rows]
        offset, window = _key_window(one[0])
        found = runs(one, ext[rows])
        within = self._defined_within(offset, window)
        try:
            inside, first_bad = coverage(found, within, window, budget)
        except PatternTooComplex as too_many:
            if int(one["kind"][0]) == EventKind.READ:
                self.notices.append(self._not_checked(one, too_many))
                return
            inside, first_bad = np.zeros(len(found), _U64), found.first
        if int(one["kind"][0]) == EventKind.READ:
            undefined = int((found.count * found.size - inside).sum())
            if undefined:
                first = np.array([offset + min(int(first_bad.min()), window - 1)], _U64)
                self._report(events, np.array([row]), first, np.array([undefined], _U64))
            return
        todo = below(found.take(inside < found.count * found.size), window)
        for _, start, stop in piece_chunks(todo):
            self.defined.add_new(start + _U64(offset), stop + _U64(offset))
            if len(self.defined) > MAX_TRACKED_RANGES:
                return

    def _not_checked(self, access: np.ndarray, too_many: PatternTooComplex) -> Finding:
        return self.context.finding(
            "internal_error",
            kernel=self.kernel.name if self.kernel else None,
            address=int(access["address"][0]),
            serial=int(access["serial"][0]),
            detail=f"initcheck did not check the read at serialNo {int(access['serial'][0])}: its block runs "
            f"meet the defined ranges in {too_many}",
        )

    def _defined_within(self, offset: int, window: int) -> IntervalSet:
        """The defined ranges of one key window, as plain addresses."""
        starts, ends = self.defined.starts, self.defined.ends
        lo = int(np.searchsorted(ends, _U64(offset), side="right"))
        hi = int(np.searchsorted(starts, _U64(offset + window), side="left"))
        base, top = _U64(offset), _U64(offset + window)
        return IntervalSet(np.maximum(starts[lo:hi], base) - base, np.minimum(ends[lo:hi], top) - base)

    def _give_up(self) -> None:
        self.given_up = True
        self.defined = IntervalSet()
        self.notices.append(
            self.context.finding(
                "internal_error",
                kernel=self.kernel.name if self.kernel else None,
                detail=(
                    f"initcheck stopped: the bytes written form more than {MAX_TRACKED_RANGES} separate ranges "
                    "(sanitizerd's bound on its state per session); later reads are not checked"
                ),
            )
        )

    def _recheck_in_order(
        self, event: np.ndarray, keys: np.ndarray, stops: np.ndarray, is_read: np.ndarray, undefined: np.ndarray
    ) -> None:
        """Reads found undefined against the set as it was before the batch may have been written earlier in
        the batch. Walk the batch in slices of ``_SLICE`` events: writes of earlier slices go into the set,
        earlier writes of the read's own slice are paired with it. Only slices with such reads are visited;
        the set ends holding every write of the batch."""
        doubtful = undefined > 0
        slice_of = event // _SLICE
        order = np.argsort(slice_of, kind="stable")
        slice_sorted = slice_of[order]
        bounds = np.flatnonzero(np.diff(slice_sorted)) + 1
        starts = np.concatenate(([0], bounds))
        stops_at = np.concatenate((bounds, [order.size]))
        added_until = 0  # slices whose writes are already in the set
        for first, last in zip(starts.tolist(), stops_at.tolist(), strict=True):
            rows = order[first:last]
            if not doubtful[rows].any():
                continue
            self._add_writes(order[added_until:first], is_read, keys, stops)
            added_until = first
            reads = rows[is_read[rows]]
            undefined[reads] = (stops[reads] - keys[reads]) - self.defined.covered(keys[reads], stops[reads])
            reads = reads[undefined[reads] > 0]
            writes = rows[~is_read[rows]]
            if reads.size and writes.size:
                undefined[reads] -= self._written_earlier(
                    event[reads], keys[reads], stops[reads], event[writes], keys[writes], stops[writes]
                )
        self._add_writes(order[added_until:], is_read, keys, stops)

    def _add_writes(self, rows: np.ndarray, is_read: np.ndarray, keys: np.ndarray, stops: np.ndarray) -> None:
        writes = rows[~is_read[rows]]
        self.defined.add_new(keys[writes], stops[writes])

    def _written_earlier(
        self,
        read_event: np.ndarray,
        read_lo: np.ndarray,
        read_hi: np.ndarray,
        write_event: np.ndarray,
        write_lo: np.ndarray,
        write_hi: np.ndarray,
    ) -> np.ndarray:
        """Bytes of each read range that an earlier write (of the same slice) defined and the set did not.

        A kernel rewrites the same bytes again and again: writes of the same range are one, at their earliest,
        so a read meets each distinct range once. Reads are taken in chunks of about CHUNK (read, write) pairs."""
        order = np.lexsort((write_event, write_hi, write_lo))
        write_event, write_lo, write_hi = write_event[order], write_lo[order], write_hi[order]
        distinct = np.ones(write_lo.size, dtype=bool)
        distinct[1:] = (write_lo[1:] != write_lo[:-1]) | (write_hi[1:] != write_hi[:-1])
        write_event, write_lo, write_hi = write_event[distinct], write_lo[distinct], write_hi[distinct]
        longest = _U64((write_hi - write_lo).max())
        # Writes overlapping [lo, hi) start before hi and, being at most `longest` long, at lo - longest or later.
        first = np.searchsorted(write_lo, np.where(read_lo > longest, read_lo - longest, _U64(0)), "left")
        last = np.searchsorted(write_lo, read_hi, "left")
        counts = np.maximum(last - first, 0)
        gained = np.zeros(read_lo.size, dtype=_U64)
        chunk_of = (np.cumsum(counts) - counts) // CHUNK
        cut = np.flatnonzero(np.diff(chunk_of, prepend=-1))
        for lo, hi in zip(cut.tolist(), [*cut[1:].tolist(), read_lo.size], strict=True):
            reads = slice(lo, hi)
            gained[reads] = self._gained(
                read_event[reads], read_lo[reads], read_hi[reads], first[reads], counts[reads],
                write_event, write_lo, write_hi,
            )  # fmt: skip
        return gained

    def _gained(
        self,
        read_event: np.ndarray,
        read_lo: np.ndarray,
        read_hi: np.ndarray,
        first: np.ndarray,
        counts: np.ndarray,
        write_event: np.ndarray,
        write_lo: np.ndarray,
        write_hi: np.ndarray,
    ) -> np.ndarray:
        read = np.repeat(np.arange(read_lo.size), counts)
        write = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(first, counts)
        lo = np.maximum(write_lo[write], read_lo[read])
        hi = np.minimum(write_hi[write], read_hi[read])
        useful = (hi > lo) & (write_event[write] < read_event[read])
        read, lo, hi = read[useful], lo[useful], hi[useful]
        gained = np.zeros(read_lo.size, dtype=_U64)
        if not read.size:
            return gained
        # Union of each read's useful write pieces, minus what the set already covered there.
        shift = _U64(int((read_hi - read_lo).max()) + 1)
        base = read_lo[read]
        rel_lo = read.astype(_U64) * shift + (lo - base)
        rel_hi = read.astype(_U64) * shift + (hi - base)
        merged_lo, merged_hi = merge_ranges(rel_lo, rel_hi)
        group = (merged_lo // shift).astype(np.intp)
        absolute_lo = read_lo[group] + (merged_lo - group.astype(_U64) * shift)
        absolute_hi = absolute_lo + (merged_hi - merged_lo)
        new = (absolute_hi - absolute_lo) - self.defined.covered(absolute_lo, absolute_hi)
        np.add.at(gained, group, new)
        return gained

    def _report(self, events: np.ndarray, read_event: np.ndarray, read_lo: np.ndarray, undefined: np.ndarray) -> None:
        bad = undefined > 0
        if not bad.any():
            return
        event, lo, count = read_event[bad], read_lo[bad], undefined[bad]
        # One report per access: its undefined bytes in all, at the first range that has any.
        order = np.lexsort((lo, event))
        event, lo, count = event[order], lo[order], count[order]
        first = np.ones(event.size, dtype=bool)
        first[1:] = event[1:] != event[:-1]
        totals = np.add.reduceat(count, np.flatnonzero(first))
        hit = events[event[first]]
        address = np.where(hit["space"] == Space.GM, lo[first] & _U64((1 << 59) - 1), lo[first] & _ADDRESS_BITS)
        self.sites.add(site_rows(hit, _UNINITIALIZED, address, totals))

    def kernel_end(self) -> list[Finding]:
        launch = self.kernel
        kernel = launch.name if launch else None
        self.kernel = None
        # On-chip and private bytes do not outlive the kernel's blocks.
        self.defined.remove(0, _GM_LO)
        self.defined.remove(_GM_HI, (1 << 64) - 1)
        notices, self.notices = self.notices, []
        if self.unkeyed:
            detail = (
                f"initcheck did not check {self.unkeyed} accesses of this kernel launch whose address space or "
                "block type is not defined"
            )
            notices.append(self.context.finding("internal_error", kernel=kernel, detail=detail))
            self.unkeyed = 0
        kinds = {_UNINITIALIZED: "uninitialized_read"}
        return site_findings(self.context, kernel, self.sites, kinds, self.simt_dims.position) + notices

    def host_op(self, op: HostOp) -> list[Finding]:
        table = TABLE_OF_SOURCE.get(op.source, LEAKING_TABLE)
        if op.op == "malloc":
            self.allocations.setdefault((table, op.address), op.size)
        elif op.op == "free":
            size = self.allocations.pop((table, op.address), 0)
            # msSanitizer's FREE of an EXTRA record (a framework's tensor annotation) only clears the owner ids:
            # the buffer under it, and what was written there, live on (reference §2.1, "Shadow memory").
            if size and op.source != "extra":
                self.defined.remove(_GM_LO | op.address, _GM_LO | (op.address + size))
        elif op.op in ("store", "memset", "memcpy") and op.size and not self.given_up:
            self.defined.add(
                np.array([_GM_LO | op.address], dtype=_U64), np.array([_GM_LO | (op.address + op.size)], dtype=_U64)
            )
            if len(self.defined) > MAX_TRACKED_RANGES:
                self._give_up()
                notices, self.notices = self.notices, []
                return notices
        return []

    def finish(self) -> list[Finding]:
        return self.kernel_end() if self.kernel is not None else []
