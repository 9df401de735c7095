"""memcheck: GM and on-chip bounds, alignment, illegal free, leaks and unused memory (reference §2.1, §1.6).

Kernel-side accesses are checked a batch at a time: one vectorised pass decides which accesses are
misaligned or out of bounds; only those few are expanded block by block to count the bad bytes. Errors are
folded per site and reported when the kernel ends, as msSanitizer does; host-side ones are reported at once.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sanitizerd.detectors import _intervals
from sanitizerd.detectors._batches import BatchFields, highest_kind, records_of, split_by_pieces, walked_pieces
from sanitizerd.detectors._heap import LEAKING_TABLE, TABLE_OF_SOURCE, Allocation, Heap
from sanitizerd.detectors._intervals import MAX_TRACKED_RANGES, IntervalSet
from sanitizerd.detectors._patterns import ADDRESS_LIMIT, ends, extents, first_misaligned
from sanitizerd.detectors._runs import (
    LIST_AT_ONCE,
    PairBudget,
    PatternTooComplex,
    Runs,
    coverage,
    coverage_own,
    inside_or_none,
    listed_touching,
    lists_few_pieces,
    piece_chunks,
    runs_by_group,
    touching,
)
from sanitizerd.detectors._simt import SimtDims
from sanitizerd.detectors._sites import SiteLog, site_findings, site_rows
from sanitizerd.detectors._spr_trace import SprTrace
from sanitizerd.detectors._stomping import BatchWrites, StompTracker
from sanitizerd.detectors._tensors import LOCAL_SPACES, BlockTensors, Judged, operand_ranges, refusal_text
from sanitizerd.detectors.base import (
    BATCH_PIECES,
    GM_WRITES,
    WIDE_ACCESS_PIECES,
    BatchTooWide,
    KernelLaunch,
    SessionContext,
)
from sanitizerd.detectors.registry import register
from sanitizerd_protocol.messages import REGION_READ, REGION_SHARED, REGION_WRITE, HostOp, RegionPermission
from sanitizerd_protocol.model import Finding
from sanitizerd_protocol.records import FLAG_CLAIM, FLAG_SIMT_ENTRY, EventKind, Space

_READ, _WRITE, _MISALIGNED, _STOMPED = 0, 1, 2, 3
# The Finding.table names of the heap's tables: msSanitizer's RUNTIME and DFX scopes, and its MSTX heap manager.
_TABLE_NAMES = {"device": "runtime", "annotation": "dfx", "heap": "mstx", "region": "mstx"}
_SITE_KINDS = {
    _READ: "illegal_read",
    _WRITE: "illegal_write",
    _MISALIGNED: "misaligned_access",
    _STOMPED: "out_of_bounds",
}
_NO_LIMIT = np.iinfo(np.uint64).max
# Sizes are stored as SQLite integers (signed 64-bit); a hostile pattern's bad bytes can pass that.
_MAX_REPORTED = np.uint64(2**63 - 1)

# Default alignment by address space (§1.6): UB and L1 32 B, L0A/L0B/L0C 512 B, the rest unchecked.
_ALIGN_BY_SPACE = np.ones(256, dtype=np.uint64)
_ALIGN_BY_SPACE[[Space.UB, Space.L1]] = 32
_ALIGN_BY_SPACE[[Space.L0A, Space.L0B, Space.L0C]] = 512


def _aligned_table(align: np.ndarray) -> np.ndarray:
    """Requested alignment, rounded up to a power of two so that a mask test is exact."""
    align = align.astype(np.uint64)
    not_pow2 = (align & (align - 1)) != 0
    if not_pow2.any():
        align[not_pow2] = 1 << np.ceil(np.log2(align[not_pow2])).astype(np.uint64)
    return align


@register("memcheck")
class Memcheck:
    name = "memcheck"
    # Its stomping and unused-memory checks list the pieces of GM writes (and claims); every other access is checked
    # per record (bounds, alignment, permissions, tensors): a batch of wide reads costs it nothing per piece.
    pieces_walked = GM_WRITES
    # It counts them in its first look at a batch, so the pipeline gives it each batch whole (check_within_bound)
    # and cuts only one it says is too wide: the pipeline's own count would read every record once more.
    counts_pieces = True

    def __init__(self, context: SessionContext) -> None:
        self.context = context
        self.heap = Heap()
        self.track_writes = context.config.check_unused_memory
        self.written = IntervalSet()
        self.sites = SiteLog()
        self.kernel: KernelLaunch | None = None
        self.stomping = StompTracker()
        # msSanitizer's trade, kept as a choice: stomping is reported as a warning, so at --log-level=error, where
        # no warning is shown, its cost (about a fifth of memcheck's, docs/performance.md) is not paid either.
        self.check_stomping = context.config.log_level != "error"
        self.thread_stomping = StompTracker()  # SIMT threads own GM apart from the blocks' pipes (_simt.py)
        self.simt_dims = SimtDims()
        self.limits = self._chip_limits()
        self.notices: list[Finding] = []  # bounds this detector hit, told with the kernel's findings
        self.pairs = PairBudget()
        self.tensors = BlockTensors()
        # GM bytes a kernel of this session may not write, and may not read: memory-permission regions
        # (msSanitizer's mstxMemRegionsSetPermission) that take the permission away, until changed or freed.
        self.no_write = IntervalSet()
        self.no_read = IntervalSet()
        # --trace-non-default-spr-reg: a sub-option of memcheck in msSanitizer, so it runs wherever memcheck does
        self.spr_trace = SprTrace(context) if context.config.trace_non_default_spr_reg else None

    def _chip_limits(self) -> np.ndarray:
        """Bytes each on-chip space holds on the session's chip; GM is checked against the heap, BT/FB not at all."""
        limits = np.full(256, _NO_LIMIT, dtype=np.uint64)
        for space, size in self.context.chip.sizes.items():
            limits[space] = size
        return limits

    # --- kernel side -------------------------------------------------------------------------------------------

    def kernel_begin(self, launch: KernelLaunch) -> None:
        self.kernel = launch
        self.stomping = StompTracker()
        self.thread_stomping = StompTracker()
        self.simt_dims = SimtDims()
        self.limits = self._chip_limits()  # the device summary may have named the chip after we were made
        self.sites = SiteLog()
        self.tensors = BlockTensors()
        if self.spr_trace is not None:
            self.spr_trace.kernel_begin()

    def check(self, records: np.ndarray) -> None:
        """Any batch; one past BATCH_PIECES of GM writes' pieces in parts, as the pipeline cuts them."""
        try:
            self.check_within_bound(records)
        except BatchTooWide:
            for part in split_by_pieces(records, walked=GM_WRITES):
                self.check_within_bound(part)

    def check_within_bound(self, records: np.ndarray) -> None:
        """``check``, refusing (BatchTooWide, before any state changes) a batch past BATCH_PIECES of the pieces it
        walks, counted in the same first pass."""
        if not records.size:
            return
        events: np.ndarray = BatchFields(records)  # type: ignore[assignment]
        native = _intervals.native
        raw = records_of(events) if native is not None else None
        scanned = None
        writes: BatchWrites | None = None  # found in the compiled pass; numpy's path has stomping find them
        any_thread = True
        parts = None
        if raw is not None:
            # Compiled: two passes over the records give the extents, the live records and the claims, every live
            # record's bounds and alignment, and the fields the rest reads (docs/design.md, "Compiled hot loops").
            legal = self.heap.legal
            parts = native.batch(  # type: ignore[union-attr]
                raw, self.limits, _ALIGN_BY_SPACE, np.ascontiguousarray(legal.starts), np.ascontiguousarray(legal.ends),
                WIDE_ACCESS_PIECES,
            )  # fmt: skip
            walked = parts[8][4]
        else:
            walked = int(walked_pieces(records, GM_WRITES).sum())
        if walked > BATCH_PIECES:  # before any state changes: the pipeline checks it in parts
            raise BatchTooWide
        if self.spr_trace is not None:
            self.spr_trace.check(records)
        if parts is not None:
            ext, live = np.frombuffer(parts[0], np.uint64), np.frombuffer(parts[1], bool)
            # kind, the one field a common batch reads after the pass; any other is copied out if asked for
            events.preload("kind", np.frombuffer(parts[2], np.uint8))  # type: ignore[attr-defined]
            claim_at, bad, misaligned = (np.frombuffer(part, np.int64) for part in parts[3:6])
            claimed = bool(claim_at.size)
            claims = np.zeros(ext.size, dtype=bool)
            claims[claim_at] = True
            scanned = bad, misaligned, np.frombuffer(parts[6], np.uint64)
            pieces_bound, any_thread, any_atomic, highest, _ = parts[8]
            events.preload_highest_kind(highest)  # type: ignore[attr-defined]
            merged = None if parts[9] is None else tuple(np.frombuffer(part, np.uint64) for part in parts[9])
            writes = BatchWrites(np.frombuffer(parts[7], np.int64), pieces_bound, any_atomic, merged)
        else:
            ext = extents(events)
            # Sync events ride in the same batch; masking them out is far cheaper than copying the memory events
            # out (numpy copies a structured array field by field).
            live = (ext > 0) & (events["kind"] <= EventKind.WRITE)
            # A SIMT call's entry records: the device judged their bounds (msSanitizer's ignoreIllegalCheck), and
            # the threads' stomping is the device's THREAD_OVERLAP (docs/mssanitizer-later.md); their GM writes
            # still count as use for unused-memory (_record_writes reads every write)
            live &= (events["flags"] & FLAG_SIMT_ENTRY) == 0
            # A SIMT thread's ownership claim is for the stomping check alone (docs/protocol.md §7.8)
            claims = live & ((events["flags"] & FLAG_CLAIM) != 0)
            claimed = claims.any()
            if claimed:
                live &= ~claims
        self.pairs = PairBudget()  # the closed forms' CPU for this batch
        judged = self._judge_by_tensors(events, live)
        hi = None
        if scanned is not None:  # alignment as scanned; bounds too unless block tensors judge some accesses
            bad, misaligned, first = scanned
            if misaligned.size:
                hit = events[misaligned]
                self.sites.add(site_rows(hit, _MISALIGNED, first, hit["block_size"]))
            if judged is None:
                self._report_bounds(events, ext, bad)
            else:
                hi = ends(events["address"], ext)
                self._check_bounds(events, events["address"], hi, ext, live, judged)
        else:
            lo = events["address"]
            hi = ends(lo, ext)
            self._check_alignment(events, live)
            self._check_bounds(events, lo, hi, ext, live, judged)
        if len(self.no_write) or len(self.no_read):
            lo = events["address"]
            self._check_permissions(events, lo, ends(lo, ext) if hi is None else hi, live)
        self._check_operands(events, ext)
        self.simt_dims.feed(events)
        # the compiled pass told whether any record has a SIMT thread: where none has, the field is not scanned
        threads = events["thread"] != 0 if any_thread else np.zeros(0, dtype=bool)
        if not self.check_stomping:
            pass
        elif threads.any():  # inter-thread stomping: a SIMT thread's GM is its own, apart from the block's pipes
            self._check_stomping(events, ext, live & ~threads)
            if claimed:  # a claim says its thread wrote the bytes first: taken before the batch's writes
                self._check_stomping(events, ext, claims & threads, self.thread_stomping)
            self._check_stomping(events, ext, live & threads, self.thread_stomping)
        else:
            self._check_stomping(events, ext, live, writes=writes)
        if self.track_writes:
            self._record_writes(events, ext)

    def _check_alignment(self, events: np.ndarray, live: np.ndarray) -> None:
        space = events["space"]
        override = events["align"]
        lowest = int(space.min())
        if lowest == int(space.max()) and _ALIGN_BY_SPACE[lowest] == 1 and not override.any():
            return  # one space without an alignment rule (a GM stream): nothing can be misaligned
        align = _ALIGN_BY_SPACE[space]
        if override.any():
            align = np.where(override > 0, _aligned_table(override), align)
        if int(align.max()) == 1:
            return  # only spaces without an alignment rule (a GM stream): nothing can be misaligned
        bad, first = first_misaligned(events, align)
        bad &= live
        if bad.any():
            hit = events[bad]
            self.sites.add(site_rows(hit, _MISALIGNED, first[bad], hit["block_size"]))

    def _judge_by_tensors(self, events: np.ndarray, live: np.ndarray) -> Judged | None:
        """Which block tensor judges each on-chip access of the batch (``_tensors.BlockTensors``); None when none
        does, the common case of a client that declares none, settled by one reduction."""
        if not len(self.tensors) and highest_kind(events) < EventKind.TENSOR:
            return None
        candidates = np.flatnonzero(live & LOCAL_SPACES[events["space"]])
        return self.tensors.apply(events, candidates, self.limits)

    def _check_bounds(
        self,
        events: np.ndarray,
        lo: np.ndarray,
        hi: np.ndarray,
        ext: np.ndarray,
        live: np.ndarray,
        judged: Judged | None = None,
    ) -> None:
        if judged is not None:
            # An access that starts inside a local tensor is judged by that tensor alone, not by the space.
            in_tensor = judged.index[judged.found]
            live = live.copy()
            live[in_tensor] = False
            self._check_in_tensors(events, lo, hi, ext, judged)
        space = events["space"]
        gm = space == Space.GM
        # None while every access is within bounds, so a GM stream inside its buffers costs a few reductions.
        ok = None if gm.all() else hi <= self.limits[space]  # on-chip spaces start at 0; GM's limit here is "none"
        gm &= live
        if gm.any():
            legal = self.heap.legal
            if not self._one_allocation_holds(legal, lo, hi, gm):
                # One lookup over every row is cheaper than gathering the GM rows and scattering back.
                in_heap = ~gm | legal.contains(lo, hi)
                ok = in_heap if ok is None else ok & in_heap
        if ok is None:
            return
        self._report_bounds(events, ext, np.flatnonzero(live & ~ok))

    def _report_bounds(self, events: np.ndarray, ext: np.ndarray, index: np.ndarray) -> None:
        """The accesses at ``index`` (ascending), out of bounds: their bad bytes counted in closed form, as sites."""
        if not index.size:
            return
        space = events["space"][index]
        total = np.zeros(index.size, dtype=np.uint64)
        address = np.zeros(index.size, dtype=np.uint64)
        for where in np.unique(space).tolist():
            at = np.flatnonzero(space == where)
            total[at], address[at] = self._bad_bytes(events, ext, index[at], where)
        reported = total > 0
        hit = events[index[reported]]
        kind = np.where(hit["kind"] == EventKind.WRITE, _WRITE, _READ)
        self.sites.add(site_rows(hit, kind, address[reported], np.minimum(total[reported], _MAX_REPORTED)))

    def _check_permissions(self, events: np.ndarray, lo: np.ndarray, hi: np.ndarray, live: np.ndarray) -> None:
        """A GM write into bytes a region made unwritable, a read of bytes it made unreadable: msSanitizer's
        illegal write or read (its bounds check refuses bytes whose permission lacks the access), reported at
        the access's start with the bytes it touched there. A strided access counts the bytes of its extent."""
        if not (len(self.no_write) or len(self.no_read)):
            return
        gm = live & (events["space"] == Space.GM)
        # an access not wholly in legal GM is the bounds check's report already: one report for one bug
        gm[gm] = self.heap.legal.contains(lo[gm], hi[gm])
        kind = events["kind"]
        for denied, access, site in ((self.no_write, EventKind.WRITE, _WRITE), (self.no_read, EventKind.READ, _READ)):
            if not len(denied):
                continue
            rows = np.flatnonzero(gm & (kind == access))
            if not rows.size:
                continue
            bad = denied.covered(lo[rows], hi[rows])
            hit_rows = rows[bad > 0]
            if hit_rows.size:
                self.sites.add(site_rows(events[hit_rows], site, lo[hit_rows], np.minimum(bad[bad > 0], _MAX_REPORTED)))

    def region_permission(self, region: RegionPermission) -> list[Finding]:
        """A region's permission replaces what its bytes allowed (msSanitizer's SetPermission). A region of another
        device that is not shared allows this session's kernels nothing."""
        own = region.device < 0 or self.context.device < 0 or region.device == self.context.device
        flags = region.flags if own or region.flags & REGION_SHARED else 0
        lo, hi = region.address, region.address + region.size
        for denied, bit in ((self.no_read, REGION_READ), (self.no_write, REGION_WRITE)):
            denied.remove(lo, hi)
            if not flags & bit:
                denied.add(np.array([lo], dtype=np.uint64), np.array([hi], dtype=np.uint64))
        return []

    def _check_in_tensors(
        self, events: np.ndarray, lo: np.ndarray, hi: np.ndarray, ext: np.ndarray, judged: Judged
    ) -> None:
        """Accesses that start inside a block tensor: the bytes of each outside its tensor. One whose whole extent
        lies in its tensor (nearly all) is settled by two comparisons."""
        rows = np.flatnonzero(judged.found)
        index = judged.index[rows]
        start, end = judged.start[rows], judged.end[rows]
        out = (lo[index] < start) | (hi[index] > end)
        if not out.any():
            return
        index, rows = index[out], rows[out]
        each = np.arange(index.size)
        total, address = self._outside_own(events, ext, index, judged.start[rows], judged.end[rows], each, each * 0 + 1)
        reported = total > 0
        hit = events[index[reported]]
        site = site_rows(hit, np.where(hit["kind"] == EventKind.WRITE, _WRITE, _READ), address[reported],
                         np.minimum(total[reported], _MAX_REPORTED))  # fmt: skip
        rows = rows[reported]
        site["tensor_address"] = judged.start[rows]
        site["tensor_size"] = judged.end[rows] - judged.start[rows]
        site["tensor_serial"] = judged.serial[rows]
        site["tensor_location"] = judged.location[rows]
        self.sites.add(site)

    def _check_operands(self, events: np.ndarray, ext: np.ndarray) -> None:
        """msSanitizer's mstx local-tensor check: an annotated instruction's accesses (TENSOR_READ/TENSOR_WRITE) in
        an on-chip space, each against the operand tensors its instruction names for its side; bytes outside them
        are illegal, wherever they lie in the space. Accesses elsewhere (GM, whose GlobalTensor has no length) are
        not checked, as there."""
        if highest_kind(events) < EventKind.TENSOR_READ:
            return
        kind = events["kind"]
        accesses = np.flatnonzero(
            ((kind == EventKind.TENSOR_READ) | (kind == EventKind.TENSOR_WRITE)) & (ext > 0)
            & LOCAL_SPACES[events["space"]]
        )  # fmt: skip
        if not accesses.size:
            return
        ops = operand_ranges(events, accesses, ADDRESS_LIMIT, self.tensors)
        # An access whose whole extent lies in one of its operands (nearly all) is settled by two comparisons.
        lo = events["address"][accesses]
        hi = ends(lo, ext[accesses])
        j = np.minimum(ops.first, max(ops.starts.size - 1, 0))
        inside = (ops.count > 0) & (lo >= ops.starts[j]) & (hi <= ops.stops[j]) if ops.starts.size else ops.count > 0
        rest = ~inside
        if not rest.any():
            return
        accesses, first, count = accesses[rest], ops.first[rest], ops.count[rest]
        named_start, named_size = ops.named_start[rest], ops.named_size[rest]
        total, address = self._outside_own(events, ext, accesses, ops.starts, ops.stops, first, count)
        reported = total > 0
        if not reported.any():
            return
        hit = events[accesses[reported]]
        site = site_rows(hit, np.where(hit["kind"] == EventKind.TENSOR_WRITE, _WRITE, _READ), address[reported],
                         np.minimum(total[reported], _MAX_REPORTED))  # fmt: skip
        site["tensor_address"] = named_start[reported]
        site["tensor_size"] = named_size[reported]
        site["tensor_serial"] = hit["serial"]
        site["tensor_location"] = hit["location"]
        self.sites.add(site)

    def _outside_own(
        self,
        events: np.ndarray,
        ext: np.ndarray,
        index: np.ndarray,
        starts: np.ndarray,
        stops: np.ndarray,
        first: np.ndarray,
        count: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Bytes of each access at ``index`` outside its own ranges (``starts/stops[first[i] : first[i] +
        count[i]]``), and the start of its first piece with any: closed forms over its runs, as ``_bad_bytes``."""

        def covered(rows: np.ndarray, runs: Runs, part: slice) -> tuple[np.ndarray, np.ndarray]:
            return coverage_own(runs, starts, stops, first[part], count[part], ADDRESS_LIMIT)

        return _outside(events, ext, index, covered)

    def _bad_bytes(self, events: np.ndarray, ext: np.ndarray, index: np.ndarray, space: int) -> tuple[np.ndarray, ...]:
        """Bytes of each access outside what ``space`` allows, and the start of its first piece (the range
        msSanitizer's flattened pattern reports) with any: closed forms over the pattern's runs, never its blocks."""
        allowed = self._allowed(space)

        def covered(rows: np.ndarray, runs: Runs, part: slice) -> tuple[np.ndarray, np.ndarray] | None:
            try:
                return coverage(runs, allowed, ADDRESS_LIMIT, self.pairs)
            except PatternTooComplex as too_many:
                self._not_checked(events[rows], too_many)
                return None

        return _outside(events, ext, index, covered)

    def _not_checked(self, accesses: np.ndarray, too_many: PatternTooComplex) -> None:
        """Accesses whose bounds a closed form could not settle within MAX_PAIRS: told, never silently passed."""
        self.notices.append(
            self.context.finding(
                "internal_error",
                kernel=self.kernel.name if self.kernel else None,
                address=int(accesses["address"][0]),
                serial=int(accesses["serial"][0]),
                detail=(
                    f"memcheck did not check the bounds of {accesses.size} access(es) from serialNo "
                    f"{int(accesses['serial'][0])}: their block runs meet the heap's ranges in {too_many}"
                ),
            )
        )

    def _allowed(self, space: int) -> IntervalSet:
        """The bytes an access to ``space`` may touch, below ADDRESS_LIMIT: GM's legal ranges, an on-chip space's
        size from 0."""
        if space != Space.GM:
            return IntervalSet(np.zeros(1, np.uint64), np.minimum(self.limits[[space]], np.uint64(ADDRESS_LIMIT)))
        legal = self.heap.legal
        if not len(legal) or int(legal.ends[-1]) <= ADDRESS_LIMIT:
            return legal
        limit = np.uint64(ADDRESS_LIMIT)
        return IntervalSet(np.minimum(legal.starts, limit), np.minimum(legal.ends, limit))

    @staticmethod
    def _one_allocation_holds(legal: IntervalSet, lo: np.ndarray, hi: np.ndarray, gm: np.ndarray) -> bool:
        """Whether every GM access of the batch lies in one allocation: most kernels stream within one buffer,
        and two reductions settle that for the whole batch."""
        if not len(legal):
            return False
        if gm.all():
            lowest, highest = lo.min(), hi.max()
        else:
            lowest = lo.min(where=gm, initial=np.iinfo(np.uint64).max)
            highest = hi.max(where=gm, initial=0)
        j = int(np.searchsorted(legal.starts, lowest, side="right")) - 1
        return j >= 0 and int(highest) <= int(legal.ends[j])

    def _check_stomping(
        self,
        events: np.ndarray,
        ext: np.ndarray,
        live: np.ndarray,
        tracker: StompTracker | None = None,
        writes: BatchWrites | None = None,
    ) -> None:
        tracker = tracker or self.stomping
        if tracker.given_up:
            return
        event, address, size = tracker.check(events, ext, live, self._allowed(Space.GM), self.pairs, writes)
        if event.size:
            self.sites.add(site_rows(events[event], _STOMPED, address, size))
        if tracker.given_up:
            self.notices.append(
                self.context.finding(
                    "internal_error",
                    kernel=self.kernel.name if self.kernel else None,
                    detail=(
                        f"multi-core stomping check stopped for this kernel: its writes form more than "
                        f"{MAX_TRACKED_RANGES} separate ranges (sanitizerd's bound on its state per kernel)"
                    ),
                )
            )

    def _record_writes(self, events: np.ndarray, ext: np.ndarray) -> None:
        """Bytes written, for unused-memory: runs already written are settled in closed form, the others listed a
        bounded chunk at a time; past MAX_TRACKED_RANGES separate ranges the check stops, and says so."""
        writes = (events["kind"] == EventKind.WRITE) & (events["space"] == Space.GM) & (ext > 0)
        if not writes.any():
            return
        legal = self._allowed(Space.GM)
        index = np.flatnonzero(writes)
        if lists_few_pieces(events, ext, index, LIST_AT_ONCE):  # the common case: list the pieces at once
            _, start, stop = listed_touching(legal, events, ext, index)
            self.written.add_new(start, stop)
        else:
            for _, runs in runs_by_group(events, ext, index):
                # Only allocated bytes can be unused; a write wholly outside them (an illegal write) is not kept.
                in_heap = inside_or_none(runs, legal, ADDRESS_LIMIT, self.pairs)
                if in_heap is not None:
                    runs = runs.take(in_heap > 0)
                long = runs.count > 1
                inside = (
                    inside_or_none(runs.take(long), self.written, ADDRESS_LIMIT, self.pairs) if self.written else None
                )
                if inside is not None:
                    long[long] = inside == runs.count[long] * runs.size[long]
                    runs = runs.take(~long)
                for _, start, stop in piece_chunks(runs):
                    self.written.add_new(*touching(legal, start, start, stop)[1:])
                    if len(self.written) > MAX_TRACKED_RANGES:
                        break
        if len(self.written) > MAX_TRACKED_RANGES:
            self._stop_tracking_writes()

    def _stop_tracking_writes(self) -> None:
        self.track_writes = False
        self.written = IntervalSet()
        self.notices.append(
            self.context.finding(
                "internal_error",
                kernel=self.kernel.name if self.kernel else None,
                detail=(
                    f"unused-memory check stopped: the bytes written form more than {MAX_TRACKED_RANGES} separate "
                    "ranges (sanitizerd's bound on its state per session); no unused_memory is reported"
                ),
            )
        )

    def kernel_end(self) -> list[Finding]:
        launch = self.kernel
        self.kernel = None
        if self.tensors.refused:
            self.notices.append(
                self.context.finding(
                    "internal_error", kernel=launch.name if launch else None, space="",
                    size=sum(self.tensors.refused.values()), detail=refusal_text(self.tensors.refused),
                )
            )  # fmt: skip
        self.tensors = BlockTensors()
        notices, self.notices = self.notices, []
        kernel = launch.name if launch else None
        traces = self.spr_trace.kernel_end(kernel) if self.spr_trace is not None else []
        return site_findings(self.context, kernel, self.sites, _SITE_KINDS, self.simt_dims.position) + notices + traces

    # --- host side ---------------------------------------------------------------------------------------------

    def host_op(self, op: HostOp) -> list[Finding]:
        if op.op == "malloc":
            allocation = Allocation(op.address, op.size, op.source, op.serial, op.location, op.module, op.root)
            if op.source == "mstx_heap" and not self.heap.in_device_memory(op.address):
                # msSanitizer keeps such a heap but marks it invalid, and says so; we report it and keep it out.
                detail = f"heap is not in malloc range, heap addr: {op.address:#x} size: {op.size}"
                return [self.context.finding("internal_error", location=op.location, address=op.address,
                                             size=op.size, serial=op.serial, detail=detail)]  # fmt: skip
            if op.source == "mstx_region" and op.root and not self.heap.heap_registered(op.root):
                # msSanitizer's words (its rootAddr in hex without 0x); the region is not added.
                detail = f"add regions error, heap is not registered, addr:{op.root:x} size: {op.size}"
                return [self.context.finding("internal_error", location=op.location, address=op.address,
                                             size=op.size, serial=op.serial, detail=detail, table="mstx")]  # fmt: skip
            self.heap.malloc(allocation)
            return []
        if op.op == "free":
            return self._free(op)
        findings: list[Finding] = []
        if op.op in ("load", "memcpy"):
            findings += self._host_access(op, op.src if op.op == "memcpy" else op.address, "illegal_read")
        if op.op in ("store", "memset", "memcpy"):
            findings += self._host_access(op, op.address, "illegal_write")
            if self.track_writes and op.size:
                self.written.add(np.array([op.address], np.uint64), np.array([op.address + op.size], np.uint64))
                if len(self.written) > MAX_TRACKED_RANGES:
                    self._stop_tracking_writes()
                    findings += self.notices
                    self.notices = []
        return findings

    def _host_access(self, op: HostOp, address: int, kind: str) -> list[Finding]:
        """A host load or store, judged by the table its source names (docs/design.md, "One legality table"): an
        EXTRA or MANUAL access by the annotations (msSanitizer's DFX table) while there are any, every other one
        (and those, with no annotation at all) by the one table of legal GM; a miss inside a registered MSTX heap
        is the heap's (\"mstx\")."""
        size = max(op.size, 1)  # a zero-size access still checks its address (§2.1)
        lo = np.array([address], dtype=np.uint64)
        hi = np.array([min(address + size, ADDRESS_LIMIT)], dtype=np.uint64)
        dfx = op.source in ("extra", "manual") and len(self.heap.annotations) > 0
        legal = self.heap.annotations if dfx else self.heap.legal
        bad = size - int(legal.covered(lo, np.maximum(hi, lo))[0])
        if bad <= 0:
            return []
        table = "dfx" if dfx else "mstx" if self.heap.in_heap(address, address + size) else "runtime"
        return [
            self.context.finding(kind, location=op.location, address=address, size=bad, serial=op.serial, table=table)
        ]

    def _free(self, op: HostOp) -> list[Finding]:
        allocation = self.heap.free(op.address, op.source)
        if allocation is not None:  # a freed buffer's permissions go with it: the next one there starts allowed
            self.no_write.remove(allocation.address, allocation.address + allocation.size)
            self.no_read.remove(allocation.address, allocation.address + allocation.size)
        if allocation is None:
            detail = "free of an address that is not allocated (never allocated, or freed already)"
            if op.source == "mstx_region":
                detail = "free of an MSTX region that is not registered (never, freed already, or its heap was gone)"
            return [
                self.context.finding(
                    "illegal_free", location=op.location, address=op.address, serial=op.serial, detail=detail,
                    table=_TABLE_NAMES[TABLE_OF_SOURCE.get(op.source, LEAKING_TABLE)],
                )
            ]  # fmt: skip
        if self.track_writes:
            unused = self._unused([allocation])
            # Freed bytes are undefined again: a later allocation at the same place starts unwritten.
            self.written.remove(allocation.address, allocation.address + allocation.size)
            return unused
        return []

    def _unused(self, allocations: list[Allocation]) -> list[Finding]:
        if not allocations:
            return []
        lo = np.array([a.address for a in allocations], dtype=np.uint64)
        hi = lo + np.array([a.size for a in allocations], dtype=np.uint64)
        unused = (hi - lo) - self.written.covered(lo, hi)
        return [
            self.context.finding(
                "unused_memory",
                location=a.location,
                address=a.address,
                size=int(n),
                serial=a.serial,
                detail=f"{int(n)} of {a.size} allocated bytes were never written",
            )
            for a, n in zip(allocations, unused.tolist(), strict=True)
            if n > 0
        ]

    def finish(self) -> list[Finding]:
        # A client that died inside a kernel still gets that kernel's findings: nothing is dropped silently.
        findings: list[Finding] = self.kernel_end() if self.kernel is not None else []
        if self.track_writes:
            findings += self._unused(self.heap.live())
        if self.context.config.leak_check:
            for block in self.heap.leaks():
                findings.append(
                    self.context.finding(
                        "memory_leak",
                        location=block.location,
                        address=block.address,
                        size=block.size,
                        serial=block.serial,
                        module=block.module,
                        table="runtime",
                    )
                )
        return findings


def _outside(
    events: np.ndarray,
    ext: np.ndarray,
    index: np.ndarray,
    covered: Callable[[np.ndarray, Runs, slice], tuple[np.ndarray, np.ndarray] | None],
) -> tuple[np.ndarray, np.ndarray]:
    """Bytes of each access at ``index`` outside what ``covered`` finds inside its runs (a group's bytes inside
    and first bad address per run, or None for a group not checked), and the start of its first piece with any."""
    total = np.zeros(index.size, dtype=np.uint64)
    address = np.zeros(index.size, dtype=np.uint64)
    done = 0
    for rows, runs in runs_by_group(events, ext, index):
        part = slice(done, done + rows.size)
        found = covered(rows, runs, part)
        if found is not None:
            inside, first_bad = found
            heads = np.flatnonzero(np.diff(runs.owner, prepend=-1))
            owners = done + runs.owner[heads]
            total[owners] = np.add.reduceat(runs.count * runs.size - inside, heads)
            address[owners] = np.minimum.reduceat(first_bad, heads)
        done += rows.size
    return total, address
