"""racecheck: data races between pipes, inside a pipe and between blocks (reference §2.2; docs/design.md).

While blocks arrive one after the other, each is proven race-free on its own as it completes, or takes the proof
of a block alike (``_block_proofs``); a kernel whose blocks are all proven, share no written GM and whose
cross-block waits all match without a cycle needs nothing more. Otherwise its events are kept until it ends (a
wait may be released by a block that arrives later), then the whole check:

1. the happens-before model (``_happens_before``) gives every sync node its clock and says which
   instructions could not be placed (deadlock);
2. the candidate pairs come from one sweep over address-sorted byte ranges (``_race_pairs``): per elementary
   address segment, in an order that respects happens-before, each access is paired with the latest earlier
   access of every other instruction (per block) it conflicts with, so every racing pair of distinct sites is
   found (at most MAX_SITES_PER_SEGMENT instructions per segment; past it an internal_error says so);
3. each pair is a race unless ordered: different pipes of a block by the clock of one side, one pipe by a
   pipe_barrier between them, their distance, or a hand-over that left the pipe and came back; two blocks
   (GM only) by what the later one learned through cross-block waits.
Races fold per site pair and pair of blocks (loop iterations become a count), as msSanitizer reports them; an
in-block race found alike in several blocks is one report; ``race_fold`` folds blocks too (a count and block lists).

Memory: a launch reserves what it holds and what its check will allocate from the host's budget, shared by all
sessions (``memory_budget``; ``sanitizerd serve --race-memory``), per event as it arrives and, for the parts that
grow faster than the events (strided patterns, nested ranges, candidate pairs, cross-block knowledge), before
they are built. A launch the budget has no room for is not checked, and an internal_error says so.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sanitizerd.detectors._block_proofs import BlockProofs, Shape
from sanitizerd.detectors._happens_before import NPIPES, POS_BITS, blocked_nodes, build, issuer_of, scalar_to_cal
from sanitizerd.detectors._patterns import ranges
from sanitizerd.detectors._race_columns import (
    NATIVE,
    PLACED_FIELDS,
    HeldColumns,
    Span,
    SpanColumns,
    Stretch,
    joined,
    rank_among,
)
from sanitizerd.detectors._race_pairs import Cut, Segments, candidate_pairs, dense, pieces
from sanitizerd.detectors._simt import SECTION_MARKS, SimtSections
from sanitizerd.detectors._simt import race_findings as simt_race_findings
from sanitizerd.detectors._sites import MAX_KERNEL_FINDINGS, left_out_text
from sanitizerd.detectors.base import KernelLaunch, SessionContext
from sanitizerd.detectors.memory_budget import MemoryAccount, OverBudget, TrialAccount
from sanitizerd.detectors.registry import register
from sanitizerd_protocol.messages import HostOp
from sanitizerd_protocol.model import Finding, RaceAccess
from sanitizerd_protocol.records import (
    BLOCK_RECORDS_ENDED,
    DCCI_ENTIRE,
    EVENT_DTYPE,
    FLAG_ATOMIC,
    FLAG_SIMT_ENTRY,
    GET_BUF_NONBLOCK,
    DcciTarget,
    EventKind,
    Pipe,
    Space,
    block_keys,
    block_type_name,
    pipe_name,
    space_name,
)

_S, _S_CAL, _V = int(Pipe.S), int(Pipe.S_CAL), int(Pipe.V)
_SCALAR_PIPE_NAMES = (pipe_name(_S), pipe_name(_S_CAL))
_KEEP = np.zeros(256, dtype=bool)
_KEEP[[EventKind.READ, EventKind.WRITE, EventKind.SET_ATOMIC]] = True
_KEEP[EventKind.SET_FLAG : EventKind.CROSS_WAIT + 1] = True
_KEEP[EventKind.HSET_FLAG : EventKind.RLS_BUF + 1] = True
# Waits synccheck's lock-up replay (detectors/_lockup.py) reports when a block's records end on one: with synccheck on,
# such a stuck wait is its lock-up, not a deadlock here too (msSanitizer's racecheck reports nothing of a hung kernel).
_LOCKUP_WAITS = np.zeros(256, dtype=bool)
_LOCKUP_WAITS[
    [
        EventKind.WAIT_FLAG,
        EventKind.CROSS_WAIT,
        EventKind.SOFT_WAIT,
        EventKind.SOFT_SYNC_ALL,
        EventKind.MSTX_CROSS_WAIT,
        EventKind.GET_BUF,
        EventKind.NPU_BARRIER,
    ]
] = True
# The kinds whose dst_pipe is a pipe (on the others it has no meaning, whatever it holds).
_TO_PIPE = np.zeros(256, dtype=bool)
_TO_PIPE[[EventKind.SET_FLAG, EventKind.WAIT_FLAG, EventKind.HSET_FLAG, EventKind.HWAIT_FLAG]] = True
# The compiled pass's copy of the choice above (sanitizerd/native/_racecheck.c, ``select``): its tables, and the
# kind, mode, flag and pipe count it compares with.
_SELECT_TABLES = np.concatenate((_KEEP, _TO_PIPE, SECTION_MARKS)).astype(np.uint8)
_SELECT_CONSTANTS = (
    int(EventKind.GET_BUF), GET_BUF_NONBLOCK, FLAG_SIMT_ENTRY, NPIPES, int(EventKind.WRITE),
    int(EventKind.BLOCK_FINISH), BLOCK_RECORDS_ENDED,
)  # fmt: skip
# What a launch reserves from the host's budget, measured with benchmarks/racecheck_memory.py (docs/performance.md):
# per held event, its record until the launch ends and its share of the check's temporaries; per byte range beyond
# the first that a strided access becomes, or that overlapping ranges are cut into, in the check's sweep; per
# candidate pair (at most two per range), ordering and folding it.
BYTES_PER_HELD_EVENT = 512
BYTES_PER_RANGE = 160
BYTES_PER_PAIR = 160
_BYTES_PER_CHECKED_EVENT = BYTES_PER_HELD_EVENT + 2 * BYTES_PER_PAIR
PROOF_STRETCH = 1 << 15  # events of complete blocks checked at once, at least (but the last ones)
_HAZARDS = {(0, 1): "race_raw", (1, 0): "race_war", (1, 1): "race_waw"}  # (later writes, earlier writes)
# --check-dcci: what racecheck keeps of a launch's DCCI events until it ends (charged to the host's budget per event),
# and how far from a scalar access its dcci may be, in serial numbers (msSanitizer's DCCI_WINDOW_THRESHOLD: the
# very next instruction after a write, the one just before a read).
DCCI_DTYPE = np.dtype([("block_key", "<u4"), ("serial", "<u8"), ("address", "<u8"), ("space", "u1"), ("mode", "u1"),
                       ("target", "<u2")])  # fmt: skip
BYTES_PER_DCCI = 64
DCCI_WINDOW = 1
_SERIAL_BITS = 40  # a (block, serial) pair as one int64 key; a serial past it (no real stream's) matches no dcci


def select(events: np.ndarray) -> tuple[np.ndarray, int, int]:
    """The events racecheck holds of a batch: (a mask of them, how many, how many were left out for their pipe)."""
    kind = events["kind"]
    keep = _KEEP[kind]
    # A non-blocking GET_BUF stalls nothing: msSanitizer's race check neither orders by it nor counts it among
    # the buffer's gets (race_alg_base.cpp, single_pipe_race_alg_impl.cpp: BLOCK_MODE only), so it is left out
    keep &= (kind != EventKind.GET_BUF) | (events["mode"] != GET_BUF_NONBLOCK)
    threads = events["thread"] != 0
    if threads.any():  # a SIMT thread's accesses are ordered by its barriers, not by pipes
        # but a SIMT call's entry records are its block's PIPE_V instruction at the call (FLAG_SIMT_ENTRY)
        keep &= ~threads | ((events["flags"] & FLAG_SIMT_ENTRY) != 0)
    # A pipe past the last defined one (a hostile client's, or a newer chip's through the compat path, there
    # 255) has no place in the model: such events are left out and counted, and the verdict says so.
    off_pipe = keep & ((events["pipe"] >= NPIPES) | ((events["dst_pipe"] >= NPIPES) & _TO_PIPE[kind]))
    off = int(np.count_nonzero(off_pipe))
    if off:
        keep &= ~off_pipe
    return keep, int(np.count_nonzero(keep)), off


class Selected(NamedTuple):
    """What the compiled ``select`` finds in a batch, in one pass over its records."""

    keep: np.ndarray  # the events held (``select``'s mask)
    accesses: np.ndarray  # of them, the accesses
    kept: int
    off_pipe: int  # left out for their pipe
    simt_seen: bool  # a record marks a SIMT section or is a SIMT thread's
    last_finish: int  # the last BLOCK_FINISH's index, or -1
    records_ended: bool  # a BLOCK_FINISH says its block's records ended
    ranges: int  # the held accesses' byte ranges beyond one each (``_race_pairs.pieces``), for the budget


def select_native(native: object, events: np.ndarray) -> Selected:
    """``select`` in one pass over the records (the compiled loop; ``events`` C-contiguous EVENT_DTYPE), with
    what else that pass sees (``Selected``)."""
    keep, mem = np.empty(events.size, dtype=bool), np.empty(events.size, dtype=bool)
    select_held = native.select  # type: ignore[attr-defined]
    return Selected(keep, mem, *select_held(events, _SELECT_TABLES, _SELECT_CONSTANTS, keep, mem))


@register("racecheck")
class Racecheck:
    name = "racecheck"

    def __init__(self, context: SessionContext) -> None:
        self.context = context
        self.kernel: KernelLaunch | None = None
        # The compiled loops (sanitizerd/native/_racecheck.c), or None for numpy's reference path: chosen per
        # process by SANITIZERD_NATIVE; a test may set it on a fresh detector to run either path.
        self.native = NATIVE
        self.columns = HeldColumns(self.native)  # what the check reads of the held events, gathered as they arrive
        self.held = self.dropped = 0  # events of the current launch kept, and refused past the limit
        self.refused = 0  # events of the current launch left unchecked for want of the host's memory budget
        self.asked = 0  # bytes the current launch asked of the budget
        self.off_pipe = 0  # events of the current launch on a pipe that is not defined: not checked
        self.limit = 0
        self.distance = context.config.single_pipe_distance
        self.prove_blocks = True  # check complete blocks as they arrive (``_block_proofs``); off: at kernel_end only
        self.proofs = BlockProofs()
        self.pending: list[Stretch] = []  # complete blocks not yet checked
        # A missing dcci is a pair of blocks that may each be proven race-free on its own: with the check on, the
        # whole launch is checked at its end.
        self.check_dcci = context.config.check_dcci
        if self.check_dcci:
            self.prove_blocks = False
        self.dccis: list[np.ndarray] = []  # the launch's DCCI events, as DCCI_DTYPE
        self.dcci_held = self.dcci_dropped = 0
        self.simt = SimtSections()  # the launch's SIMT threads: checked apart from the pipes (detectors/_simt.py)

    def kernel_begin(self, launch: KernelLaunch) -> None:
        self._reset()
        self.kernel = launch
        if self.prove_blocks and launch.block_dim > 1:  # its first block may become the reference (``_prove``)
            self.columns.keep_first_block(self.context.race_memory)
        # One launch never holds more than the whole budget would check (its events and up to two candidate pairs
        # each): past that it is cut, like at --max-race-events, rather than left unchecked for good.
        self.limit = int(min(self.context.max_race_events, self.context.race_memory.limit // _BYTES_PER_CHECKED_EVENT))

    def _reset(self) -> None:
        self.columns = HeldColumns(self.native)
        self.proofs = BlockProofs()
        self.pending = []
        self.held = self.dropped = self.refused = self.asked = self.off_pipe = 0
        self.records_ended = np.empty(0, dtype=np.uint32)  # blocks whose records ended, run to their end or not
        self.dccis = []
        self.dcci_held = self.dcci_dropped = 0
        self.simt = SimtSections()
        self.context.race_memory.release()

    def check(self, events: np.ndarray) -> None:
        cut = self._reference_cut(events)
        if cut:  # the block that finishes first is proven before the next one's records are held (once a batch)
            self._check(events[:cut])
            events = events[cut:]
        self._check(events)

    def _check(self, events: np.ndarray) -> None:
        kind = events["kind"]
        if self.check_dcci:
            self._hold_dccis(events, kind == EventKind.DCCI)
        ranges: int | None = None  # what the held accesses' ranges cost, where the compiled select counted them
        if self.native is not None and events.dtype == EVENT_DTYPE:
            events = np.ascontiguousarray(events)
            selected = select_native(self.native, events)
            keep, mem, kept, off_pipe, simt_seen = selected[:5]
            last_finish, ended_any, ranges = selected.last_finish, selected.records_ended, selected.ranges
        else:
            (keep, kept, off_pipe), mem, simt_seen = select(events), None, True  # feed looks for itself
            finished = np.flatnonzero(kind == EventKind.BLOCK_FINISH)
            last_finish = int(finished[-1]) if finished.size else -1
            ended_any = bool((events["mode"][finished] == BLOCK_RECORDS_ENDED).any())
        self.off_pipe += off_pipe
        if simt_seen or self.simt.open:
            self.simt.feed(events)
        if self.refused:  # this launch goes unchecked already
            self.refused += kept
            return
        room = self.limit - self.held
        batch = events
        if kept > room:  # the daemon's memory limit: the rest of this launch goes unchecked, and says so
            self.dropped += kept - max(room, 0)
            cut = int(np.flatnonzero(keep)[room]) if room > 0 else 0
            batch, keep, kept = events[:cut], keep[:cut], max(room, 0)
            mem, ranges = None if mem is None else mem[:cut], None
        if kept:
            self._hold(batch, keep, kept, mem, ranges)
        if ended_any:
            ended = (kind == EventKind.BLOCK_FINISH) & (events["mode"] == BLOCK_RECORDS_ENDED)
            self.records_ended = np.union1d(self.records_ended, block_keys(events[ended]))
        if last_finish >= 0 and not self.refused:
            self.columns.finish(int(block_keys(events[last_finish : last_finish + 1])[0]))
        self._prove_completed(self.columns, self.kernel)

    def _reference_cut(self, events: np.ndarray) -> int:
        """Where to check a batch in two: after its first BLOCK_FINISH, while the launch has no reference block
        (``HeldColumns.mirror_from``) and that is not its last record, so that the finished block may become it
        before the next block begins (which is then compared with it, not gathered); 0: not cut."""
        if (
            not self.prove_blocks or self.native is None or self.proofs.reference is not None or self.proofs.failed
            or self.refused or not self.columns.in_order
        ):  # fmt: skip
            return 0
        if events.dtype == EVENT_DTYPE and events.flags.c_contiguous:
            first = self.native.first_of_kind(events, int(EventKind.BLOCK_FINISH))  # type: ignore[attr-defined]
        else:
            finished = np.flatnonzero(events["kind"] == EventKind.BLOCK_FINISH)
            first = int(finished[0]) if finished.size else -1
        return first + 1 if 0 <= first < events.size - 1 else 0

    def _hold(
        self, batch: np.ndarray, keep: np.ndarray, kept: int, mem: np.ndarray | None = None, ranges: int | None = None
    ) -> None:
        """Hold the ``kept`` events of ``batch`` that ``keep`` marks (``mem``: those that are accesses, where known;
        ``ranges``: their byte ranges beyond one each, where counted), as the columns the check reads (the records
        themselves are not kept: the columns are gathered from them straight)."""
        if mem is None:
            mem = keep & (batch["kind"] <= EventKind.WRITE)
        if ranges is None and self.native is not None and batch.dtype == EVENT_DTYPE:  # one pass over the records
            ranges = self.native.ranges_beyond(np.ascontiguousarray(batch), np.ascontiguousarray(mem, dtype=bool))
        elif ranges is None:
            ranges = int(pieces(batch)[mem].sum()) - int(mem.sum())  # by fields: no copy of the records
        cost = kept * BYTES_PER_HELD_EVENT + ranges * BYTES_PER_RANGE
        self.asked += cost
        if not self.context.race_memory.reserve(cost):
            # The host's budget has not that much left: hold none of this launch rather than check an arbitrary
            # part, and give back at once what it held, for the other launches.
            refused, asked, off_pipe = self.held + kept + self.dropped, self.asked, self.off_pipe
            self._reset()
            self.refused, self.asked, self.off_pipe = refused, asked, off_pipe
            return
        self.columns.append(batch, keep if kept < batch.size else None, mem)
        self.held += kept

    def _hold_dccis(self, events: np.ndarray, is_dcci: np.ndarray) -> None:
        """Keep the batch's DCCI events for the launch's check, within the launch's limit and the host's budget: past
        either, they are counted, and the scalar accesses they would have covered are not reported."""
        rows = np.flatnonzero(is_dcci)
        if not rows.size:
            return
        room = max(self.limit - self.dcci_held, 0)
        if self.refused or not self.context.race_memory.reserve(min(rows.size, room) * BYTES_PER_DCCI):
            room = 0
        if rows.size > room:
            self.dcci_dropped += rows.size - room
            rows = rows[:room]
        if not rows.size:
            return
        kept = np.empty(rows.size, dtype=DCCI_DTYPE)
        picked = events[rows]
        kept["block_key"] = block_keys(picked)
        for name in ("serial", "address", "space", "mode"):
            kept[name] = picked[name]
        kept["target"] = picked["event_id"]
        self.dccis.append(kept)
        self.dcci_held += rows.size

    def _prove_completed(self, columns: HeldColumns, launch: KernelLaunch | None, *, last: bool = False) -> None:
        """Check the blocks that completed on their own (``_block_proofs``), once they are PROOF_STRETCH events
        or more (a check's fixed cost is a few milliseconds: small blocks, or batches of a few events, share one),
        and all of them at the ``last``."""
        self.pending.extend(columns.completed)
        columns.completed = []
        if self.prove_blocks and not self.dropped:
            self._prove_alike(columns, launch)
        if not self.prove_blocks or self.proofs.failed or self.dropped:
            self.pending = []
            if columns.whole:  # the whole check's nodes, made as blocks complete
                columns.make_all()
            return
        if not self.pending or (not last and self.pending[-1].events[1] - self.pending[0].events[0] < PROOF_STRETCH):
            return
        stretch, self.pending = joined(self.pending), []
        self._prove(columns, stretch, launch)

    def _prove_alike(self, columns: HeldColumns, launch: KernelLaunch | None) -> None:
        """Prove the pending blocks found alike to the reference as they arrived (``HeldColumns.alike``) by its
        proof, each after the stretches before it."""
        while self.pending and not self.proofs.failed:
            alike = next((i for i, s in enumerate(self.pending) if s.events[0] in columns.alike), None)
            if alike is None:
                return
            if alike:  # the stretches before it first, in order
                before, self.pending = joined(self.pending[:alike]), self.pending[alike:]
                self._prove(columns, before, launch)
                continue
            stretch = self.pending.pop(0)
            self.proofs.mirrored(stretch, columns.mirror_base(columns.alike[stretch.events[0]]))
            columns.skip(stretch)

    def _prove(self, columns: HeldColumns, stretch: Stretch, launch: KernelLaunch | None) -> None:
        shaped = self.proofs.shape(columns, stretch)
        if shaped is not None and self.proofs.reuse(columns, shaped):  # blocks alike were proven: not made
            columns.skip(stretch)
            return
        span = columns.make(stretch)
        try:
            self._prove_span(columns, span, shaped, launch)
        finally:  # the first span's proof is the only one its records are kept for
            columns.forget_first_block()

    def _prove_span(self, columns: HeldColumns, span: Span, shaped: Shape | None, launch: KernelLaunch | None) -> None:
        cut = Cut()
        memory = TrialAccount(self.context.race_memory)
        try:
            check = Kernel(self, launch, SpanColumns(columns, span), truncated=False, cut=cut, memory=memory)
            racing = check.racing()[0].size
        except OverBudget:  # the whole check will say so
            self.proofs.fail()
            return
        finally:
            memory.give_back()
        proof = self.proofs.add(span, check, racing, len(check.model.stuck), cut.segments, shaped)
        more = launch is None or span.blocks[1] < launch.block_dim  # blocks may follow it: worth a reference
        if proof is not None and shaped is not None and self.proofs.reference is None and more:
            if columns.mirror_from(span, self.context.race_memory.spare):
                self.proofs.reference = proof

    def kernel_end(self) -> list[Finding]:
        columns, self.columns = self.columns, HeldColumns(self.native)
        launch, self.kernel = self.kernel, None
        dropped, refused, asked, limit, off_pipe = self.dropped, self.refused, self.asked, self.limit, self.off_pipe
        dcci_dropped = self.dcci_dropped
        dccis = None
        if self.check_dcci and not dcci_dropped:  # without every DCCI, a covered access would look bare
            dccis = np.concatenate(self.dccis) if self.dccis else np.empty(0, dtype=DCCI_DTYPE)
        simt = self.simt
        try:
            cut = Cut()
            check = None
            if columns.size and (dropped or not self._proven(columns, launch)):
                check = Kernel(self, launch, columns, truncated=dropped > 0, cut=cut, dccis=dccis)
            del columns  # the check holds what it needs of them
            findings = check.findings() if check is not None else []
            del check
            if cut.segments:  # the bound on pairs per segment cut: said, and counted as a cut like the others
                findings.append(self._sites_cut(launch, cut))
        except OverBudget as exc:  # a part of the check quadratic in what the launch holds
            findings = [self._over_budget(launch, exc)]
        finally:  # a failed check too gives back its share of the host's budget
            self._reset()
        kernel = launch.name if launch else None
        if refused or dropped:  # one or the other: a refused launch counts what it had cut among its refused
            detail = self._refused_text(refused, asked) if refused else self._cut_text(limit, dropped)
            findings.append(self.context.finding("internal_error", kernel=kernel, detail=detail))
        if off_pipe:
            detail = (
                f"racecheck did not check {off_pipe} events of this kernel launch whose pipe is not defined "
                f"(pipes are 0 to {NPIPES - 1}; for set_flag and wait_flag, both the source and the destination)"
            )
            findings.append(self.context.finding("internal_error", kernel=kernel, detail=detail))
        if dcci_dropped:
            detail = (
                f"racecheck kept at most {limit} DCCI events of a kernel launch within the host's race-check memory "
                f"budget ({BYTES_PER_DCCI} bytes each); {dcci_dropped} were not kept, so missing dcci instructions "
                "were not looked for in this launch"
            )
            findings.append(self.context.finding("internal_error", kernel=kernel, detail=detail))
        return without_twins(findings, simt_race_findings(self.context, kernel, simt))

    def _proven(self, columns: HeldColumns, launch: KernelLaunch | None) -> bool:
        """Whether the launch's blocks, checked as they completed, prove it free of races and deadlocks."""
        if not self.prove_blocks or not columns.in_order:
            return False
        columns.complete_all()  # the last block completes now
        self._prove_completed(columns, launch, last=True)
        memory = TrialAccount(self.context.race_memory)
        try:
            return self.proofs.verdict(
                columns.sync_rows, columns.complete_block_keys(), memory.need,
                cross_free=self.context.config.block_id >= 0,
            )  # fmt: skip
        except OverBudget:  # the whole check will say so
            return False
        finally:
            memory.give_back()

    def _cut_text(self, limit: int, dropped: int) -> str:
        if limit < self.context.max_race_events:
            why = (
                f"what the host's race-check memory can check ({self.context.race_memory.limit} bytes, "
                f"sanitizerd serve --race-memory; {_BYTES_PER_CHECKED_EVENT} bytes per event at most)"
            )
        else:
            why = "sanitizerd serve --max-race-events"
        return (
            f"racecheck holds at most {limit} events of a kernel launch ({why}); "
            f"the last {dropped} were not checked for races"
        )

    def _refused_text(self, refused: int, asked: int) -> str:
        return (
            f"racecheck did not check this kernel launch for races: it needed {asked} bytes of the host's race-check "
            f"memory budget ({self.context.race_memory.limit} bytes shared by all sessions, sanitizerd serve "
            f"--race-memory; {BYTES_PER_HELD_EVENT} bytes per held event, {BYTES_PER_RANGE} per byte range beyond an "
            f"access's first), more than it had left; {refused} events were not checked"
        )

    def _sites_cut(self, launch: KernelLaunch | None, cut: Cut) -> Finding:
        return self.context.finding(
            "internal_error",
            kernel=launch.name if launch else None,
            detail=(
                f"racecheck compared each access with the latest access of at most {cut.bound} "
                f"instructions per memory segment; {cut.segments} segments were accessed by more (up to "
                f"{cut.most} instructions and blocks): there races among the rest were looked for between "
                "neighbouring accesses only, and racing pairs of sites may be missing"
            ),
        )

    def _over_budget(self, launch: KernelLaunch | None, exc: OverBudget) -> Finding:
        return self.context.finding(
            "internal_error",
            kernel=launch.name if launch else None,
            detail=(
                f"racecheck did not check this kernel launch for races: {exc.what}, which need {exc.nbytes} bytes, "
                f"more than the host's race-check memory budget ({self.context.race_memory.limit} bytes shared by "
                "all sessions, sanitizerd serve --race-memory) had left"
            ),
        )

    def host_op(self, op: HostOp) -> list[Finding]:
        return []

    def finish(self) -> list[Finding]:
        if self.kernel is not None:
            return self.kernel_end()
        self._reset()
        return []


class Kernel:
    """One kernel's check: the events sorted by block, the model, the accesses' place in it."""

    def __init__(
        self,
        detector: Racecheck,
        launch: KernelLaunch | None,
        columns: HeldColumns,
        *,
        truncated: bool,
        cut: Cut,
        memory: TrialAccount | None = None,
        dccis: np.ndarray | None = None,
    ) -> None:
        """With ``memory``, a trial: the columns are some blocks of the kernel, checked as if they were all of
        it, with cross-block waits teaching nothing (``_block_proofs``), their temporaries taken from ``memory``.
        With ``dccis`` (the launch's DCCI events, --check-dcci), missing dcci instructions are looked for too."""
        self.context = detector.context
        # synccheck reports these blocks' stuck waits as lock-ups (see _LOCKUP_WAITS)
        self.locked_up_blocks = detector.records_ended if "synccheck" in self.context.config.tools else None
        self.memory: MemoryAccount | TrialAccount = memory or detector.context.race_memory
        alone = memory is not None
        # A trial's footprint (``_block_proofs``) reads the byte ranges the pair search lists: listed once for both,
        # and kept. The whole check's pair search lists its own and frees them before its peak.
        self.listed: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self.keeps_ranges = alone
        self.cut = cut
        self.simt = detector.simt  # names the thread of a SIMT call's entry record
        self.distance = detector.distance
        self.native = detector.native
        self._pair_inputs: tuple[np.ndarray, ...] | None = None  # ``_pair_columns``, made on first use
        self.launch = launch
        self.truncated = truncated
        self.left_out = (0, 0)  # racing sites, and their pairs, past MAX_KERNEL_FINDINGS (not reported)
        # Memory held per event is what the host's budget is reserved by (BYTES_PER_HELD_EVENT): what is kept for
        # every access is what the check needs to its end, and per-event temporaries go as soon as they are used.
        # Blocks that arrived one after the other had their accesses placed among their sync nodes as they completed.
        self.placed_in_blocks = columns.placed()
        arrived = columns.events  # in arrival order
        self.is_sync = arrived["kind"] >= EventKind.SET_FLAG  # for a stuck wait's row among the sync events
        kind = arrived["kind"]
        self.order: np.ndarray | None = None  # block-sorted position -> arrival position; None: the same
        if self.placed_in_blocks:  # blocks in key order, each whole: a block starts where the key changes
            key = arrived["block_key"]
            starts = np.ones(key.size, dtype=bool)
            starts[1:] = key[1:] != key[:-1]
            self.block_keys, block = key[starts].astype(np.int64), np.cumsum(starts) - 1
            del key, starts
        else:
            self.block_keys, block = dense(arrived["block_key"].astype(np.int64))
        if not self.placed_in_blocks and block.size > 1 and (block[1:] < block[:-1]).any():
            self.order = np.argsort(block, kind="stable")
            kind, block = kind[self.order], block[self.order]
        # else blocks arrived one after the other, as the emulator and msSanitizer's per-block buffers send them
        self.total = columns.size
        self.syncs = columns.syncs  # in arrival order: read back for deadlocks
        sync = np.flatnonzero(kind >= EventKind.SET_FLAG)
        sync_arrival = self.arrival(sync)
        s = columns.syncs
        if self.order is not None:  # the columns' rows are in arrival order
            s = s[rank_among(self.is_sync, sync_arrival)]
        mem = np.flatnonzero(kind <= EventKind.WRITE)
        m = columns.accesses
        if self.order is not None:
            m = m[rank_among(arrived["kind"] <= EventKind.WRITE, self.arrival(mem))]
        del arrived
        ext = m["ext"]
        keep = ext > 0
        if not keep.all():
            mem, ext = mem[keep], ext[keep]
            m = m[keep]
        present = {(int(k) >> 16, int(k) & 0xFFFF) for k in self.block_keys}
        self.pipe = scalar_to_cal(m["pipe"].astype(np.int64))
        pipes = np.flatnonzero(np.bincount(self.pipe, minlength=1))  # np.unique, counted (pipes are bytes)
        self.model = build(
            kind[sync], s["pipe"].astype(np.int64), s["dst_pipe"].astype(np.int64), s["event_id"].astype(np.int64),
            s["mode"], s["block_num"], s["address"], block[sync], s["block_type"], s["block_id"], sync_arrival, sync,
            present, pipes, self.block_keys.size, cross_free=alone or self.context.config.block_id >= 0,
            truncated=truncated, need=self.memory.need,
            made=columns.parts if self.placed_in_blocks else lambda members: None, native=detector.native,
            members=columns.members(),
        )  # fmt: skip
        self.mem = mem  # block-sorted positions of the accesses
        self.access = m
        self.ext = ext
        self.mblock = block[mem]
        self.atomic = ((m["flags"] & FLAG_ATOMIC) != 0) | _atomic_state(
            mem,
            self.mblock,
            sync[kind[sync] == EventKind.SET_ATOMIC],
            block,
            s["mode"][kind[sync] == EventKind.SET_ATOMIC],
        )
        self.write = m["kind"] == EventKind.WRITE
        self.serial = m["serial"].view(np.int64)  # serial numbers stay far below 2**63
        self._place_accesses()
        self.dcci_covered = None if dccis is None else self._dcci_covered(dccis)
        self.dcci_pairs: list[tuple[np.ndarray, np.ndarray]] = []  # (write, read) missing a dcci, per chunk

    def arrival(self, positions: np.ndarray) -> np.ndarray:
        """Arrival positions (in the held batches) of block-sorted positions."""
        return positions if self.order is None else self.order[positions]

    # --- where each access sits in the model ---
    def _place_accesses(self) -> None:
        if self.placed_in_blocks:
            self._placed_in_blocks()
        else:
            self._search_places()
        self.placed = self._placed()
        self.cross_rows = self._cross_rows()

    def _placed_in_blocks(self) -> None:
        """The places counted per block as blocks completed (``_block_parts``): a count of nodes before the access
        on a chain is an index among the chain's nodes. Compiled where ``native`` is given (``placed_nodes``)."""
        seg, issued, barriers, pipe_index = (self.access[name] for name in PLACED_FIELDS)
        chains = np.arange(self.block_keys.size * NPIPES, dtype=np.int64)
        first = np.searchsorted(self.model.nodes.key, chains << POS_BITS, side="left")
        # Counted within the block: only compared within one (block, pipe), as the searched ones are.
        self.barrier_no, self.pipe_index = barriers, pipe_index
        if self.native is not None and seg.dtype == issued.dtype == np.int32:  # the held columns' type
            self.prev, self.issuer, self.seg = (np.empty(seg.size, dtype=np.int64) for _ in range(3))
            columns = [np.ascontiguousarray(x) for x in (seg, issued)]
            columns += [np.ascontiguousarray(x, dtype=np.int64) for x in (self.mblock, self.pipe, first)]
            self.native.placed_nodes(*columns, NPIPES, _S, self.prev, self.issuer, self.seg)  # type: ignore[attr-defined]
            return
        base = self.mblock * NPIPES
        self.prev = np.where(seg > 0, first[base + self.pipe] + seg - 1, -1)
        self.seg = seg.astype(np.int64)
        self.issuer = np.where(issued > 0, first[base + _S] + issued - 1, -1)

    def _search_places(self) -> None:
        """Each access's place found among all the kernel's nodes (blocks that arrived interleaved)."""
        model, mem = self.model, self.mem
        nodes = model.nodes
        chain = self.mblock * NPIPES + self.pipe
        pos = 2 * mem  # an access's place in its block, between the sync nodes' (odd) places
        key = (chain << POS_BITS) + pos
        at = np.searchsorted(nodes.key, key, side="left") - 1
        ok = at >= 0
        ok[ok] = (nodes.key[at[ok]] >> POS_BITS) == chain[ok]
        del chain
        self.prev = np.where(ok, at, -1)
        self.seg = np.zeros(mem.size, dtype=np.int64)
        self.seg[ok] = nodes.ordinal[at[ok]] + 1
        del at, ok
        self.issuer = issuer_of(nodes, self.mblock, pos, self.native)
        del pos
        self.barrier_no = np.searchsorted(model.barriers, key, side="left")
        del key
        # The count of distinct instructions on the access's pipe up to it (msSanitizer's pipeSerialNo); only
        # differences within one (block, pipe) are used, and accesses are in block, then program, order.
        self.pipe_index = np.zeros(mem.size, dtype=np.int64)
        for pipe in np.unique(self.pipe):
            on = np.flatnonzero(self.pipe == pipe)
            serial = self.serial[on]
            new = np.ones(on.size, dtype=np.int64)
            new[1:] = serial[1:] != serial[:-1]
            self.pipe_index[on] = np.cumsum(new)

    def field(self, name: str, rows: np.ndarray) -> np.ndarray:
        """Field ``name`` of accesses ``rows``."""
        return self.access[name][rows]

    def know(self, rows: np.ndarray, comp: np.ndarray) -> np.ndarray:
        return self.model.knowledge(self.prev[rows], self.issuer[rows], comp)

    def _placed(self) -> np.ndarray:
        start = self.model.start
        if not (start < np.iinfo(np.int64).max).any():
            return np.ones(self.mem.size, dtype=bool)
        rows = np.arange(self.mem.size)
        blocked = self.seg > start[self.mblock * NPIPES + self.pipe]
        base = self.mblock * NPIPES
        for p in range(NPIPES):
            blocked |= self.know(rows, np.full(rows.size, p)) >= start[base + p]
        return ~blocked

    def _cross_rows(self) -> np.ndarray:
        """Per access, the rows of G (cross-block waits) it knows: the latest on each pipe that has any."""
        model = self.model
        chains = sorted(model.chains_with_cross)
        per_block: dict[int, list[int]] = {}
        for c in chains:
            per_block.setdefault(c // NPIPES, []).append(c)
        width = max((len(v) for v in per_block.values()), default=0)
        if width > 1:  # one column is in what a held event costs; a block waiting across blocks on many pipes is not
            what = f"its {self.mem.size} accesses know cross-block waits on {width} pipes"
            self.memory.need(self.mem.size * (width - 1) * 8, what)
        rows = np.full((self.mem.size, width), -1, dtype=np.int64)
        for b, block_chains in per_block.items():
            lo, hi = np.searchsorted(self.mblock, [b, b + 1])
            if lo == hi:
                continue
            sel = np.arange(lo, hi)
            for j, c in enumerate(block_chains):
                pipe = c % NPIPES
                known = self.know(sel, np.full(sel.size, pipe))
                own = self.pipe[sel] == pipe
                known = np.where(own, np.maximum(known, self.seg[sel] - 1), known)
                ords, g_rows = model.chains_with_cross[c]
                at = np.searchsorted(ords, known, side="right") - 1
                rows[sel, j] = np.where(at >= 0, g_rows[np.maximum(at, 0)], -1)
        return rows

    def _linear_order(self) -> np.ndarray:
        """A rank per access consistent with happens-before: the Lamport clock of the cross-block waits it knows,
        then its place in its block's program (or topological) order."""
        model = self.model
        cross = np.full(self.mem.size, -1, dtype=np.int64)
        lamport = np.append(model.lamport, -1)  # row -1 (no cross-block wait known) reads the -1 at the end
        for j in range(self.cross_rows.shape[1]):
            np.maximum(cross, lamport[self.cross_rows[:, j]], out=cross)
        if not model.nonforward.size:  # then the second key is the accesses' own order: a stable sort by the first
            return _stable_order(cross)
        within = 2 * self.mem
        odd = np.isin(self.mblock, model.nonforward)
        anchor = np.maximum(
            np.where(self.prev >= 0, model.rank[np.maximum(self.prev, 0)], -1),
            np.where(self.issuer >= 0, model.rank[np.maximum(self.issuer, 0)], -1),
        )
        within[odd] = (anchor[odd] + 1) * (2 * self.total + 2) + 2 * self.mem[odd]
        return np.lexsort((within, cross))

    # --- the check ---
    def findings(self) -> list[Finding]:
        out = self._races()  # in msSanitizer's order: races, then missing dcci instructions
        out.extend(self._missing_dcci())
        out.extend(sorted(self._deadlocks(), key=lambda f: f.serial))
        if self.left_out[0]:
            out.append(
                self.context.finding(
                    "internal_error",
                    kernel=self.launch.name if self.launch else None,
                    space="",
                    detail=left_out_text("racecheck", *self.left_out),
                )
            )
        return out

    def _races(self) -> list[Finding]:
        a, b, segments = self.racing()
        if not a.size:
            return []
        return self._fold(a, b, segments.start(), segments.size())

    def racing(self) -> tuple[np.ndarray, np.ndarray, Segments]:
        """The racing pairs of accesses, each once, with a segment both touch."""
        mem = self.mem
        empty = np.empty(0, dtype=np.int64)
        if not mem.size:
            return empty, empty, Segments(np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.uint64), empty)
        space = self.access["space"]
        region_block = np.where(space == Space.GM, -1, self.mblock)
        account = self.memory

        def pieces_beyond_ranges(n: int) -> None:  # ranges nested in each other: pieces quadratic in the accesses
            account.need(n * BYTES_PER_RANGE, f"its {mem.size} accesses overlap in {n} pieces beyond their ranges")

        def pairs_to_order(pairs: int) -> None:  # what ordering and folding them costs, asked before it is spent
            account.need(pairs * BYTES_PER_PAIR, f"its {mem.size} accesses make {pairs} candidate pairs")

        if self.keeps_ranges:
            self.listed = ranges(self.access, self.ext, None, self.native)
            kept = sum(column.nbytes for column in self.listed)
            account.need(kept, f"its {mem.size} accesses' byte ranges, kept for its footprint")
        chunks = candidate_pairs(
            self.access, self.ext, np.arange(mem.size), space, region_block, self.placed, self.write,
            self._linear_order(), need=pieces_beyond_ranges, key=self._site_keys(), instruction=self._instructions(),
            need_pairs=pairs_to_order, cut=self.cut, native=self.native, listed=self.listed,
        )  # fmt: skip
        racing = []
        while chunks:
            a, b, segments = chunks.pop()
            if a.size:
                if self.dcci_covered is not None and not self.truncated:
                    self._collect_missing_dcci(a, b)
                race = self._unordered(a, b)
                racing.append((a[race], b[race], segments[race]))
            del a, b, segments
        racing.reverse()
        a = np.concatenate([r[0] for r in racing]) if racing else empty
        if not a.size:
            return empty, empty, Segments(np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.uint64), empty)
        b = np.concatenate([r[1] for r in racing])
        first = racing[0][2]
        segments = Segments(first.starts, first.ends, np.concatenate([r[2].segment for r in racing]))
        _, once = np.unique(a * self.mem.size + b, return_index=True)  # a pair overlapping in several segments
        return a[once], b[once], segments[once]

    def _site_keys(self) -> np.ndarray:
        """Per access, a small int naming its instruction (pc, location, pipe, read or write, atomic) in its block:
        what one side of a folded finding is, and what the pair search keeps one latest access of per segment.
        Writes are numbered before reads (reads are compared with write keys only, which come first)."""
        if not self.mem.size:
            return np.empty(0, dtype=np.int64)
        # One mixed-radix number, digits from the least: block, atomic, pipe, location, pc, read. A pc or location
        # that every access shares is a digit of one value, and costs no pass.
        site = self.atomic.astype(np.int64)
        site *= self.block_keys.size
        site += self.mblock
        radix = 2 * self.block_keys.size
        site += self.pipe * radix
        radix *= NPIPES
        for name in ("location", "pc"):
            values = self.access[name]
            if int(values.min()) != int(values.max()):
                digit = _small(values if values.dtype == np.uint64 else values.astype(np.int64))
                site += digit * radix
                radix *= int(digit.max()) + 1
        site += np.multiply(~self.write, radix, dtype=np.int64)
        return _small(site)

    def _instructions(self) -> np.ndarray:
        """Each access's instruction: its block and serial number. Serial numbers count within a block, so every
        block running the same code has the same ones; a serial alone would take another block's access by the same
        instruction for an instruction's own other event."""
        if not self.serial.size:
            return self.serial
        if int(self.serial.max()) < 1 << _SERIAL_BITS:
            return (self.mblock.astype(np.int64) << _SERIAL_BITS) | self.serial
        pairs = np.stack([self.mblock.astype(np.int64), self.serial], axis=1)
        return np.unique(pairs, axis=0, return_inverse=True)[1].reshape(-1).astype(np.int64)

    def _unordered(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Per candidate pair, whether nothing orders its two accesses: compiled (``_racecheck.unordered``) for
        pairs within a block, as numpy's path below decides them; pairs of two blocks by their cross-block
        knowledge."""
        if self.native is None:
            return self._unordered_numpy(a, b)
        race = np.empty(a.size, dtype=bool)
        table, column = self.model.clock_table()
        cross = self.native.unordered(  # type: ignore[attr-defined]
            np.ascontiguousarray(a, dtype=np.int64), np.ascontiguousarray(b, dtype=np.int64), *self._pair_columns(),
            table, table.shape[1], column, self._in_order_pipes(), _S_CAL, self.distance, race,
        )  # fmt: skip
        if cross:
            i = np.flatnonzero(self.mblock[a] != self.mblock[b])
            if self.truncated:
                race[i] = False
            else:
                race[i] &= ~(self._cross_knows(b[i], a[i]) | self._cross_knows(a[i], b[i]))
        return race

    def _pair_columns(self) -> tuple[np.ndarray, ...]:
        """What the compiled ``unordered`` reads per access, as it reads them (int64; bytes for the two masks)."""
        if self._pair_inputs is None:
            as64 = [
                np.ascontiguousarray(x, dtype=np.int64)
                for x in (self.mem, self.serial, self.pipe, self.mblock, self.seg, self.prev, self.issuer,
                          self.pipe_index, self.barrier_no)
            ]  # fmt: skip
            masks = [np.ascontiguousarray(x, dtype=bool).view(np.uint8) for x in (self.write, self.atomic)]
            self._pair_inputs = (*as64, *masks)
        return self._pair_inputs

    def _in_order_pipes(self) -> int:
        """The pipes whose accesses complete in issue order (a bit each): the scalar ones, and the 950's vector pipe
        (reference §2.2)."""
        pipes = 1 << _S_CAL | 1 << _S
        return pipes | 1 << _V if self.context.chip.is_950 else pipes

    def _unordered_numpy(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        serial, write = self.serial, self.write
        pa, pb = self.pipe[a], self.pipe[b]
        same_block = self.mblock[a] == self.mblock[b]
        race = ~same_block | (serial[a] != serial[b])  # an instruction never races with itself
        scalar = (pa == _S_CAL) | (pb == _S_CAL)
        race &= ~(write[a] & write[b] & self.atomic[a] & self.atomic[b] & ~scalar)
        single = same_block & (pa == pb)
        inter = same_block & (pa != pb)
        cross = ~same_block
        if single.any():
            i = np.flatnonzero(single)
            race[i] &= self._single_pipe_unordered(a[i], b[i])
        if inter.any():
            i = np.flatnonzero(inter)
            ordered = (self.know(b[i], pa[i]) >= self.seg[a[i]]) | (self.know(a[i], pb[i]) >= self.seg[b[i]])
            race[i] &= ~ordered
        if self.truncated:  # blocks past the limit are missing, and with them what orders the kept ones: no verdict
            race &= ~cross
        elif cross.any():
            i = np.flatnonzero(cross)
            ordered = self._cross_knows(b[i], a[i]) | self._cross_knows(a[i], b[i])
            race[i] &= ~ordered
        return race

    # --- --check-dcci ---
    def _dcci_covered(self, dccis: np.ndarray) -> np.ndarray:
        """Per access, whether it is a scalar GM access with the dcci msSanitizer asks for beside it: a read, one
        as the instruction before it in its block (what it reads is fetched anew); a write, one as the instruction
        after it (what it wrote leaves the cache). A dcci counts when it names GM, not only UB, and the whole data
        cache or the access's cache line (256 bytes; 64 on the 950)."""
        covered = np.zeros(self.mem.size, dtype=bool)
        rows = np.flatnonzero((self.pipe == _S_CAL) & (self.access["space"] == Space.GM))
        useful = dccis[(dccis["space"] == Space.GM) & (dccis["target"] != DcciTarget.CACHE_LINE_UB)]
        if not rows.size or not useful.size:
            return covered
        limit = np.uint64(1 << _SERIAL_BITS)
        # Blocks numbered as the accesses' (a DCCI of a block with no access covers nothing).
        at = np.searchsorted(self.block_keys, useful["block_key"].astype(np.int64))
        at = np.minimum(at, self.block_keys.size - 1)
        known = (self.block_keys[at] == useful["block_key"]) & (useful["serial"] < limit)
        useful, at = useful[known], at[known]
        keys = (at.astype(np.int64) << _SERIAL_BITS) | useful["serial"].astype(np.int64)
        order = np.argsort(keys, kind="stable")
        keys, useful = keys[order], useful[order]
        serial = self.access["serial"][rows]
        window = np.uint64(DCCI_WINDOW)
        write = self.write[rows]
        # Neither side wraps around u64: a write at the last serial or a read at the first has no neighbour there.
        valid = np.where(write, serial < limit - window, (serial >= window) & (serial < limit))
        beside = np.where(valid, np.where(write, serial + window, serial - window), 0)
        wanted = (self.mblock[rows].astype(np.int64) << _SERIAL_BITS) | beside.astype(np.int64)
        found = np.minimum(np.searchsorted(keys, wanted), max(keys.size - 1, 0))
        hit = valid & (keys.size > 0) & (keys[found] == wanted)
        line = np.uint64(64 if self.context.chip.is_950 else 256)
        same_line = self.access["address"][rows] // line == useful["address"][found] // line
        covered[rows] = hit & ((useful["mode"][found] == DCCI_ENTIRE) | same_line)
        return covered

    def _collect_missing_dcci(self, a: np.ndarray, b: np.ndarray) -> None:
        """Of candidate pairs ``a``, ``b``: a write and a read of GM by two blocks, one of them scalar, whose read
        the write's block did not learn of before writing (the read may depend on the write), and a scalar side
        without its dcci: msSanitizer's missing-dcci pair (mem_event_checker.cpp, IsMissDcciEvent)."""
        covered, write, pipe = self.dcci_covered, self.write, self.pipe
        assert covered is not None
        pick = (self.mblock[a] != self.mblock[b]) & (write[a] != write[b])
        pick &= (pipe[a] == _S_CAL) | (pipe[b] == _S_CAL)
        if not pick.any():
            return
        a, b = a[pick], b[pick]
        w, r = np.where(write[a], a, b), np.where(write[a], b, a)
        bare = ((pipe[w] == _S_CAL) & ~covered[w]) | ((pipe[r] == _S_CAL) & ~covered[r])
        w, r = w[bare], r[bare]
        if w.size:
            read_first = self._cross_knows(w, r)
            self.dcci_pairs.append((w[~read_first], r[~read_first]))

    def _missing_dcci(self) -> list[Finding]:
        """One report per pair of instructions and pair of blocks, the write first, as msSanitizer's."""
        if not self.dcci_pairs:
            return []
        w = np.concatenate([pair[0] for pair in self.dcci_pairs])
        r = np.concatenate([pair[1] for pair in self.dcci_pairs])
        if not w.size:
            return []
        pc, location = self.access["pc"], self.access["location"].astype(np.int64)
        site = np.stack([_small(pc[w]), location[w], self.mblock[w], _small(pc[r]), location[r], self.mblock[r]])
        _, first, count = np.unique(site, axis=1, return_index=True, return_counts=True)
        by_serial = np.argsort(self.serial[w[first]], kind="stable")
        first, count = first[by_serial], count[by_serial]
        if first.size > MAX_KERNEL_FINDINGS:
            self.left_out = (
                self.left_out[0] + first.size - MAX_KERNEL_FINDINGS,
                self.left_out[1] + int(count[MAX_KERNEL_FINDINGS:].sum()),
            )
            first, count = first[:MAX_KERNEL_FINDINGS], count[:MAX_KERNEL_FINDINGS]
        findings = []
        for i, n in zip(first.tolist(), count.tolist(), strict=True):
            wi, ri = int(w[i]), int(r[i])
            accesses = [self._access(wi, np.array([wi])), self._access(ri, np.array([ri]))]
            blocks: dict[str, list[int]] = {}
            for acc in accesses:
                blocks[acc.block_type] = sorted(set(blocks.get(acc.block_type, [])) | set(acc.blocks))
            findings.append(
                self.context.finding(
                    "dcci_missing",
                    kernel=self.launch.name if self.launch else None,
                    location=int(location[wi]),
                    blocks=blocks,
                    space=space_name(int(self.access["space"][wi])),
                    address=int(self.access["address"][wi]),
                    size=int(self.ext[wi]),
                    serial=int(self.serial[wi]),
                    pc=int(pc[wi]),
                    count=n,
                    accesses=accesses,
                )
            )
        return findings

    def _single_pipe_unordered(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Two accesses of one pipe may overlap in flight unless a pipe_barrier separates them, they are more
        than ``distance`` instructions apart, or a hand-over from after the first returned before the second."""
        first = np.where(self.mem[a] < self.mem[b], a, b)
        second = np.where(self.mem[a] < self.mem[b], b, a)
        pipe = self.pipe[first]
        in_order = (pipe == _S_CAL) | (pipe == _S)
        if self.context.chip.is_950:
            in_order |= pipe == _V  # the 950's vector pipe keeps its own order (reference §2.2)
        apart = self.pipe_index[second] - self.pipe_index[first] > self.distance
        barrier = self.barrier_no[first] != self.barrier_no[second]
        returned = self.know(second, pipe) >= self.seg[first]
        return ~(in_order | apart | barrier | returned)

    def _cross_knows(self, later: np.ndarray, earlier: np.ndarray) -> np.ndarray:
        """Whether ``later`` learned, through cross-block waits, that ``earlier`` (another block) completed."""
        G = self.model.G
        out = np.zeros(later.size, dtype=bool)
        if not G.size:
            return out
        comp = self.mblock[earlier] * NPIPES + self.pipe[earlier]
        for j in range(self.cross_rows.shape[1]):
            r = self.cross_rows[later, j]
            has = r >= 0
            out[has] |= G[r[has], comp[has]] >= self.seg[earlier[has]]
        return out

    # --- reports ---
    def _fold(self, a: np.ndarray, b: np.ndarray, seg_start: np.ndarray, seg_size: np.ndarray) -> list[Finding]:
        serial = self.serial
        swap = (serial[b] < serial[a]) | ((serial[b] == serial[a]) & (self.mblock[b] < self.mblock[a]))
        early, late = np.where(swap, b, a), np.where(swap, a, b)
        del swap
        write = self.write
        pairs = np.concatenate((early, late))
        location = self.field("location", pairs).reshape(2, -1)
        pc = self.field("pc", pairs).reshape(2, -1)
        space = self.field("space", pairs).reshape(2, -1)
        block_type = self.field("block_type", pairs).reshape(2, -1)
        del pairs
        # A site is a pair of instructions; every column in its own narrow type (a pair's row of int64s cost more
        # than all the rest of the check, for a launch where most pairs race).
        pipe_early, pipe_late = self.pipe[early].astype(np.uint8), self.pipe[late].astype(np.uint8)
        site = (write[late], write[early], space[0], pipe_early, pipe_late, location[0], location[1], pc[0], pc[1],
                block_type[0], block_type[1])  # fmt: skip
        fold = self.context.config.race_fold
        cross = self.mblock[early] != self.mblock[late]
        if not fold:
            # msSanitizer's report is a pair of accesses, each in its block: a race between two blocks is one report
            # per pair of blocks. An in-block race found alike in several blocks stays one report, shown in its
            # first block (msSanitizer looks in block 0 only; the finding's blocks list every one).
            blocks = self.block_keys.size
            site += (np.where(cross, self.mblock[early], blocks), np.where(cross, self.mblock[late], blocks))
        order = np.lexsort(site[::-1])  # by site, the first column first
        same = np.zeros(order.size, dtype=bool)  # as the row before, in every column
        same[1:] = True
        for column in site:
            ordered = column[order]
            same[1:] &= ordered[1:] == ordered[:-1]
        del site, ordered, pipe_early, pipe_late
        starts = np.flatnonzero(~same)
        ends = np.append(starts[1:], order.size)
        if starts.size > MAX_KERNEL_FINDINGS:  # the earliest sites by serial number, chosen before the loop below
            first = np.minimum.reduceat(serial[early[order]], starts)
            chosen = np.sort(np.argsort(first, kind="stable")[:MAX_KERNEL_FINDINGS])
            self.left_out = (starts.size - chosen.size, order.size - int((ends[chosen] - starts[chosen]).sum()))
            starts, ends = starts[chosen], ends[chosen]
        findings = []
        order_keys: list[tuple[bool, int, int]] = []
        for lo, hi in zip(starts.tolist(), ends.tolist(), strict=True):
            rows = order[lo:hi]
            pick = rows[np.lexsort((serial[late[rows]], serial[early[rows]], self.mblock[early[rows]]))[0]]
            e, lt = early[pick], late[pick]
            kind = _HAZARDS[(int(write[lt]), int(write[e]))]
            shown = (early[rows], late[rows]) if fold else (early[pick : pick + 1], late[pick : pick + 1])
            accesses = [self._access(e, shown[0]), self._access(lt, shown[1])]
            blocks: dict[str, list[int]] = {}
            for acc, side in zip(accesses, (early[rows], late[rows]), strict=True):
                found_in = self._block_ids(side)
                blocks[acc.block_type] = sorted(set(blocks.get(acc.block_type, [])) | set(found_in))
            findings.append(
                self.context.finding(
                    kind,
                    kernel=self.launch.name if self.launch else None,
                    location=int(location[1, pick]),
                    blocks=blocks,
                    space=space_name(int(space[0, pick])),
                    address=int(seg_start[pick]),
                    size=int(seg_size[pick]),
                    serial=int(serial[lt]),
                    pc=int(pc[1, pick]),
                    count=hi - lo,
                    accesses=accesses,
                )
            )
            order_keys.append((bool(cross[pick]), int(seg_start[pick]), int(serial[lt])))
        # msSanitizer's order: its in-block checks report before its cross-block one, each in the address order of
        # its sweep.
        return [findings[i] for i in sorted(range(len(findings)), key=order_keys.__getitem__)]

    def _block_ids(self, rows: np.ndarray) -> list[int]:
        return sorted({int(self.block_keys[blk]) & 0xFFFF for blk in np.unique(self.mblock[rows])})

    def _access(self, row: int, rows: np.ndarray) -> RaceAccess:
        """One side of a report: ``row``'s access, shown in the blocks of ``rows``."""
        one = np.array([row])
        where, stack = self.context.place(int(self.field("location", one)[0]))
        ids = self._block_ids(rows)
        thread = int(self.field("thread", one)[0])
        return RaceAccess(
            thread=self.simt.position_at(int(self.block_keys[self.mblock[row]]), int(self.serial[row]), thread)
            if thread
            else [],
            pipe=pipe_name(int(self.pipe[row])),
            op="Write" if self.write[row] else "Read",
            address=int(self.access["address"][row]),
            block_type=block_type_name(int(self.field("block_type", one)[0])),
            blocks=ids,
            serial=int(self.serial[row]),
            pc=int(self.field("pc", one)[0]),
            location=where,
            stack=stack,
        )

    def _synccheck_lockups(self, rows: np.ndarray, kind: np.ndarray) -> np.ndarray:
        """Of the stuck waits (their sync ``rows``, node ``kind``), those synccheck reports as locked up: of a kind
        its replay holds, in a block whose records ended (msSanitizer's hooks' BLOCK_FINISH: a kernel its runtime
        may have stopped), with synccheck on. A block that ran to its end keeps its deadlock."""
        if self.locked_up_blocks is None or not self.locked_up_blocks.size:
            return np.zeros(rows.size, dtype=bool)
        blocks = (self.syncs["block_type"][rows].astype(np.uint32) << np.uint32(16)) | self.syncs["block_id"][rows]
        return _LOCKUP_WAITS[kind] & np.isin(blocks, self.locked_up_blocks)

    def _deadlocks(self) -> list[Finding]:
        model = self.model
        if not model.stuck:
            return []
        nodes = model.nodes
        blocked = int((~self.placed).sum()) + int(blocked_nodes(nodes, model.start).sum()) - len(model.stuck)
        names = ("pipe", "dst_pipe", "event_id", "location", "pc", "serial", "block_type", "block_id", "address")
        at = self.arrival(np.array([stuck.event for stuck in model.stuck]))
        rows = rank_among(self.is_sync, at)
        f = {name: self.syncs[name][rows].tolist() for name in names}
        lockup = self._synccheck_lockups(rows, np.array([int(nodes.kind[stuck.node]) for stuck in model.stuck]))
        sites: dict[tuple, list[int]] = {}
        for j, stuck in enumerate(model.stuck):
            if lockup[j]:
                continue
            key = (int(nodes.kind[stuck.node]), f["pipe"][j], f["dst_pipe"][j], f["event_id"][j], f["location"][j],
                   f["pc"][j])  # fmt: skip
            sites.setdefault(key, []).append(j)
        findings = []
        for (kind, src, dst, event_id, location, pc), rows in sites.items():
            first = min(rows, key=lambda j: f["serial"][j])
            blocks: dict[str, list[int]] = {}
            for j in rows:
                blocks.setdefault(block_type_name(int(f["block_type"][j])), []).append(f["block_id"][j])
            findings.append(
                self.context.finding(
                    "deadlock",
                    kernel=self.launch.name if self.launch else None,
                    location=location,
                    blocks={k: sorted(set(v)) for k, v in blocks.items()},
                    space="",
                    serial=f["serial"][first],
                    pc=pc,
                    count=len(rows),
                    pipe=pipe_name(src),
                    dst_pipe=pipe_name(dst),
                    event_id=event_id,
                    detail=_wait_text(kind, src, dst, event_id, f["address"][first]),
                    blocked=blocked,
                )
            )
        return findings


def _stable_order(values: np.ndarray) -> np.ndarray:
    """``np.argsort(values, kind="stable")`` for values from -1 up; a radix sort when they fit in 16 bits (a
    Lamport clock over the cross-block waits: a few values for millions of accesses)."""
    if not values.size:
        return np.empty(0, dtype=np.int64)
    low, high = int(values.min()), int(values.max())
    if low == high:
        return np.arange(values.size)
    if low >= -1 and high < (1 << 16) - 1:
        return np.argsort((values + 1).astype(np.uint16), kind="stable")
    return np.argsort(values, kind="stable")


def _small(values: np.ndarray) -> np.ndarray:
    """Values numbered densely from 0 in their order: all 0 where they are one value (no pcs or locations sent),
    linear for small ones, a sort otherwise."""
    if values.size:
        low, high = int(values.min()), int(values.max())
        if low == high:
            return np.zeros(values.size, dtype=np.int64)
        if low >= 0 and high < 1 << 24:  # a uint64 view, not a cast: the same bits below 2**63, and 20 times faster
            return dense(values.view(np.int64) if values.dtype == np.uint64 else values.astype(np.int64, copy=False))[1]
    values = values.astype(np.int64) if values.dtype != np.uint64 else values
    return np.unique(values, return_inverse=True)[1].astype(np.int64)


def _atomic_state(
    mem: np.ndarray, mem_block: np.ndarray, sets: np.ndarray, block: np.ndarray, mode: np.ndarray
) -> np.ndarray:
    """Each access's block's atomic mode: the last SET_ATOMIC (positions ``sets``, modes ``mode``) before it in
    its block; off before any."""
    if not sets.size:
        return np.zeros(mem.size, dtype=bool)
    last = np.searchsorted(sets, mem, side="right") - 1
    valid = last >= 0
    valid[valid] = block[sets[last[valid]]] == mem_block[valid]
    return valid & (mode[np.maximum(last, 0)] != 0)


_WAIT_TEXTS = {
    EventKind.WAIT_FLAG: "wait_flag from {src} to {dst} (event id {event_id})",
    EventKind.HWAIT_FLAG: "hwait_flag from {src} to {dst} (event id {event_id})",
    EventKind.CROSS_WAIT: "wait_flag_dev on {src} (flag {event_id})",
    EventKind.SOFT_WAIT: "IB_WAIT (event id {event_id}, block {address})",
    EventKind.SOFT_SYNC_ALL: "SyncAll (soft)",
    EventKind.MSTX_CROSS_WAIT: "mstx cross-core wait on {src} (address {address:#x}, flag {event_id})",
    EventKind.GET_BUF: "GET_BUF on {src} (buffer {event_id})",
    EventKind.PIPE_BARRIER: "pipe_barrier(PIPE_ALL)",
}


def _wait_text(kind: int, src: int, dst: int, event_id: int, address: int) -> str:
    """The stuck instruction, as a user wrote it."""
    text = _WAIT_TEXTS.get(EventKind(kind), EventKind(kind).name.lower() + " on {src}")
    return text.format(src=pipe_name(src), dst=pipe_name(dst), event_id=event_id, address=address)


def _twin_key(finding: Finding) -> tuple | None:
    """What a race between a SIMT thread's access and the main scalar's is the same race by, whichever check found
    it: hazard, space, the scalar's access (pipe, op, pc, blocks) and the thread's (op, position). None for others."""
    sides = finding.accesses
    if len(sides) != 2 or bool(sides[0].thread) == bool(sides[1].thread):
        return None
    thread, scalar = (sides[0], sides[1]) if sides[0].thread else (sides[1], sides[0])
    if scalar.pipe not in _SCALAR_PIPE_NAMES:
        return None
    return (finding.kind, finding.space, scalar.pipe, scalar.op, scalar.pc, tuple(scalar.blocks), thread.op,
            tuple(thread.thread))  # fmt: skip


def without_twins(pipe_findings: list[Finding], simt_findings: list[Finding]) -> list[Finding]:
    """Both findings, less the pipes' report of a race the threads' check reported too: a main-scalar access
    racing a SIMT call's entry record (its PIPE_V access) and that thread's own record of it. The threads' report
    stays: its side has the thread instruction's own pc and location (an entry record keeps 16 bits of the pc)."""
    seen = {key for key in map(_twin_key, simt_findings) if key is not None}
    if not seen:
        return pipe_findings + simt_findings
    kept = [f for f in pipe_findings if _twin_key(f) not in seen]
    return kept + simt_findings
