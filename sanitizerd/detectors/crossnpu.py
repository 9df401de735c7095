"""Cross-NPU racecheck (msSanitizer's ``--check-cross-npu-races``): GM accesses to memory shared between devices,
compared with those of every other device of the job, whichever process drives them.

Per session it keeps what is shared here (regions marked shared, IPC exports and mappings) and, for the running
kernel, its accesses to them with their epoch (``_cross_npu.block_epochs``) and their place among their block's
signal events, and the kernel's signal sets and waits, shared memory or not; when the kernel ends its signals join
the job's (whose order, chains through any sessions included, is found again when they grew), then its accesses are
compared with the job's (``_cross_npu.JobAccesses``) and held there for the kernels still to come. Reports are
msSanitizer's race form with each access's device.

A kernel that races while other kernels of the job are in flight may race only for want of their signals (a ring's
middle rank ending after both ends of the pair): its verdict waits (``_Deferred``), its racing accesses judged anew
against the same held ones whenever the job's signals grew, at this session's later kernel ends and at its end. It
is given once the kernels in flight with it have ended, at the session's end at the latest; what it reports then is
published with its own launch, not with the kernel at whose end it is given (``take_deferred``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sanitizerd.detectors._cross_npu import (
    ACCESS_DTYPE,
    MAX_CLOSURE_WORK,
    MAX_ORDER_TESTS,
    MAX_SHARED_ACCESSES,
    MAX_SIGNAL_EDGES,
    MAX_SIGNALS,
    SIGNAL_DTYPE,
    JobAccesses,
    Judgment,
    RacePair,
    block_epochs,
)
from sanitizerd.detectors._patterns import ends, extents
from sanitizerd.detectors.base import KernelLaunch, SessionContext
from sanitizerd_protocol.messages import REGION_SHARED, HostOp, RegionPermission
from sanitizerd_protocol.model import CROSS_NPU, Finding, RaceAccess
from sanitizerd_protocol.records import (
    FLAG_ATOMIC,
    FLAG_CLAIM,
    CompareOp,
    EventKind,
    Space,
    block_keys,
    block_type_name,
    pipe_name,
)

# Spans of one session's shared memory: its regions (MAX_REGIONS) and IPC mappings are bounded where they are made.
_HAZARD = {(True, True): "race_waw", (True, False): "race_raw", (False, True): "race_war"}
# Kernels of one session whose verdict waits for the job's kernels in flight, and their racing accesses together:
# judging them anew then costs at most one comparison's bound (1 << 10 accesses against a job's 1 << 16 held ones is
# MAX_PAIR_TESTS). Past either, the oldest is given as judged then (said).
MAX_DEFERRED = 64
MAX_DEFERRED_ROWS = 1 << 10


@dataclass(slots=True)
class _Deferred:
    """A kernel's verdict waiting for the job's kernels that were in flight when it ended."""

    launch: KernelLaunch | None
    judgment: Judgment  # the last: its racing rows and pairs, the held prefix and signals they were judged with
    awaited: set[tuple[int, int]]  # (session, launch ordinal) of the kernels in flight it waits for


class CrossNpuRacecheck:
    name = "crossnpu"

    def __init__(self, context: SessionContext, job: JobAccesses) -> None:
        self.context = context
        self.job = job
        self.spans: dict[int, tuple[int, int, int]] = {}  # start -> (size, owner, base)
        self._table: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        self.epoch = 0  # cross-NPU barriers passed in the session's earlier kernels
        self.passed: dict[int, int] = {}  # block key -> barriers it passed in the running kernel
        self.pending: list[np.ndarray] = []
        self.pending_rows = 0
        self.left_out = 0  # of the running kernel: past the cap before it ended
        self.launch: KernelLaunch | None = None
        self.launches = 0  # the session's kernel launches so far; the running one's ordinal is one less
        self.signalled: dict[int, int] = {}  # block key -> signal events it issued in the running kernel
        self.signals: list[np.ndarray] = []  # the running kernel's, SIGNAL_DTYPE
        self.signal_rows = 0
        self.signals_left_out = 0  # of the running kernel: past MAX_SIGNALS before it ended
        self.bad_waits = 0  # of the running kernel: a CompareOp outside EQ..LE
        self.deferred: list[_Deferred] = []  # oldest first
        self.ready: list[Finding] = []  # verdicts of earlier kernels given at a kernel's end (``take_deferred``)

    # --- what is shared -------------------------------------------------------------------------------------------

    def region_permission(self, region: RegionPermission) -> list[Finding]:
        """A region marked shared is symmetric memory: every device reaches it at this address. msSanitizer's
        shared spans only grow, and so do ours: a later permission without the flag leaves it shared."""
        if region.flags & REGION_SHARED:
            self.spans[region.address] = (region.size, 0, region.address)
            self._table = None
        return []

    def shared_span(self, address: int, size: int, owner: int, base: int) -> list[Finding]:
        if size:
            self.spans[address] = (size, owner, base)
        else:
            self.spans.pop(address, None)
        self._table = None
        return []

    def _spans(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        if self._table is None:
            starts = sorted(self.spans)
            self._table = (
                np.array(starts, dtype=np.uint64),
                np.array([s + self.spans[s][0] for s in starts], dtype=np.uint64),
                np.array([self.spans[s][1] for s in starts], dtype=np.int64),
                np.array([self.spans[s][2] for s in starts], dtype=np.uint64),
            )
        return self._table

    # --- kernel side ------------------------------------------------------------------------------------------

    def kernel_begin(self, launch: KernelLaunch) -> None:
        self.launch = launch
        self.launches += 1
        self.job.kernel_began(self.context.session, self.launches - 1)
        self.passed = {}
        self.pending = []
        self.pending_rows = 0
        self.left_out = 0
        self.signalled = {}
        self.signals = []
        self.signal_rows = 0
        self.signals_left_out = 0
        self.bad_waits = 0

    def check(self, events: np.ndarray) -> None:
        if not events.size:
            return
        kind = events["kind"]
        barrier = kind == EventKind.NPU_BARRIER
        signal = (kind == EventKind.NPU_SIGNAL_SET) | (kind == EventKind.NPU_SIGNAL_WAIT)
        signalled = bool(signal.any())
        if not self.spans and not barrier.any() and not signalled:
            return
        access = (kind <= EventKind.WRITE) & (events["space"] == Space.GM) & ((events["flags"] & FLAG_CLAIM) == 0)
        rows = np.flatnonzero(access)
        hit = np.zeros(0, dtype=np.intp)
        if rows.size and self.spans:
            starts, stops = self._spans()[:2]
            lo = events["address"][rows]
            hi = ends(lo, extents(events[rows]))
            span = np.searchsorted(starts, hi, side="left").astype(np.intp) - 1  # the last span starting before hi
            inside = (span >= 0) & (hi > lo)
            inside[inside] = stops[span[inside]] > lo[inside]
            hit = rows[inside]
            span, lo, hi = span[inside], lo[inside], hi[inside]
        if not hit.size and not barrier.any() and not signalled:
            return
        keys = block_keys(events)
        epochs = block_epochs(keys, barrier, self.passed)
        if signalled or self.signalled:
            positions = block_epochs(keys, signal, self.signalled)
        else:
            positions = np.zeros(events.size, dtype=np.int64)
        if signalled:
            self._hold_signals(events, keys, np.flatnonzero(signal), positions)
        if not hit.size:
            return
        room = max(MAX_SHARED_ACCESSES - self.pending_rows, 0)
        if hit.size > room:  # a kernel of more cannot be held by its job either
            self.left_out += hit.size - room
            hit, span, lo, hi = hit[:room], span[:room], lo[:room], hi[:room]
            if not hit.size:
                return
        rows = self._rows(events[hit], span, lo, hi, epochs[hit])
        rows["signals"] = positions[hit]
        rows["block"] = keys[hit]
        self.pending.append(rows)
        self.pending_rows += hit.size

    def _hold_signals(self, events: np.ndarray, keys: np.ndarray, rows: np.ndarray, positions: np.ndarray) -> None:
        """The batch's signal events for the job's table, up to MAX_SIGNALS a kernel (a job holds no more). A wait
        whose op names no CompareOp is counted and dropped: msSanitizer's never passes, so it orders nothing."""
        signal = events[rows]
        wait = signal["kind"] == EventKind.NPU_SIGNAL_WAIT
        bad = wait & (signal["mode"] > max(CompareOp))
        if bad.any():
            self.bad_waits += int(np.count_nonzero(bad))
            rows, signal, wait = rows[~bad], signal[~bad], wait[~bad]
        room = max(MAX_SIGNALS - self.signal_rows, 0)
        if rows.size > room:  # the block's last signals go, so its held ones stay a prefix of its program order
            self.signals_left_out += rows.size - room
            rows, signal, wait = rows[:room], signal[:room], wait[:room]
        if not rows.size:
            return
        table = np.zeros(rows.size, dtype=SIGNAL_DTYPE)
        table["session"] = self.context.session
        table["ordinal"] = self.launches - 1
        table["position"] = positions[rows]
        table["address"] = signal["address"]
        table["value"] = signal["pc"].view(np.int64)  # the i64 its two's complement carries
        table["block"] = keys[rows]
        table["op"] = signal["mode"]
        table["wait"] = wait
        self.signals.append(table)
        self.signal_rows += rows.size

    def _rows(self, hit: np.ndarray, span: np.ndarray, lo: np.ndarray, hi: np.ndarray, epoch: np.ndarray) -> np.ndarray:
        starts, stops, owners, bases = self._spans()
        rows = np.zeros(hit.size, dtype=ACCESS_DTYPE)
        start = starts[span]
        rows["owner"] = owners[span]
        rows["lo"] = np.maximum(lo, start) - start + bases[span]
        rows["hi"] = np.minimum(hi, stops[span]) - start + bases[span]
        rows["address"] = lo
        rows["epoch"] = self.epoch + epoch
        device = self.context.device
        rows["device"] = device if device >= 0 else -1 - self.context.session
        rows["session"] = self.context.session
        rows["launch"] = self.launch.kernel if self.launch else 0
        rows["ordinal"] = self.launches - 1
        for name in ("serial", "pc", "location", "block_id", "block_type", "pipe"):
            rows[name] = hit[name]
        rows["write"] = hit["kind"] == EventKind.WRITE
        rows["atomic"] = (hit["flags"] & FLAG_ATOMIC) != 0
        return rows

    def kernel_end(self) -> list[Finding]:
        launch, self.launch = self.launch, None
        in_flight = self.job.kernel_ended(self.context.session)  # first: a failure below must not leave it running
        self.epoch += max(self.passed.values(), default=0)
        new = np.concatenate(self.pending) if self.pending else np.zeros(0, dtype=ACCESS_DTYPE)
        self.pending = []
        self.pending_rows = 0
        signals_left_out = self.signals_left_out
        if self.signals:  # before the comparison: this kernel's own sets and waits order its accesses too
            signals_left_out += self.job.hold_signals(np.concatenate(self.signals))
            self.signals = []
        findings: list[Finding] = []
        left_out = self.left_out
        untested = unsure = 0
        judgment: Judgment | None = None
        if new.size:
            self._remember(new, launch)
            judgment = self.job.compare_and_add(new)
            left_out += judgment.left_out
            untested = judgment.untested
            if judgment.pairs and in_flight:  # their signals may yet order it
                self._defer(_Deferred(launch, judgment, in_flight))
            else:
                findings = [self._finding(pair) for pair in judgment.pairs]
                unsure = judgment.unsure
                self._count_unsure(judgment)
        if self.left_out or self.signals_left_out:
            with self.job.lock:
                self.job.dropped += self.left_out
                self.job.signals_dropped += self.signals_left_out
        self._count_cuts(judgment, signals_left_out)
        said = []
        if left_out or untested:
            said.append(
                f"cross-NPU racecheck: {left_out} accesses of this kernel to shared memory not held and {untested} "
                f"access pairs not compared (a job holds at most {MAX_SHARED_ACCESSES} such accesses): races with "
                "them are not reported"
            )
        if signals_left_out:
            said.append(
                f"cross-NPU racecheck: {signals_left_out} signal sets and waits of this kernel not held (a job holds "
                f"at most {MAX_SIGNALS}): the order they give is not used, so races they order may be reported"
            )
        if unsure:
            said.append(_unsure(unsure))
        if self.bad_waits:
            said.append(
                f"cross-NPU racecheck: {self.bad_waits} signal waits of this kernel with a compare op outside 0..5 "
                "(EQ..LE): they order nothing"
            )
        if said:
            findings.append(
                self.context.finding(
                    "internal_error", kernel=launch.name if launch else None, space="GM", size=left_out,
                    detail="; ".join(said),
                )
            )  # fmt: skip
        self.ready.extend(self._settle(final=False))
        return findings

    def _count_cuts(self, judgment: Judgment | None, signals_left_out: int) -> None:
        """What the bounds left out of this kernel's check, by reason, for the daemon's metric (the racing pairs not
        fully tested for order are counted when their verdict is given: ``_count_unsure``)."""
        cuts = {
            "job_accesses": self.left_out + (judgment.job_not_held if judgment else 0),
            "host_accesses": judgment.host_not_held if judgment else 0,
            "pair_tests": judgment.untested if judgment else 0,
            "signals": signals_left_out,
        }
        for reason, count in cuts.items():
            if count:
                self.context.on_cross_npu_cut(reason, count)

    def _count_unsure(self, judgment: Judgment) -> None:
        for reason, count in (("signal_edges", judgment.unsure_edges), ("order_tests", judgment.unsure_tests)):
            if count:
                self.context.on_cross_npu_cut(reason, count)

    # --- verdicts that wait -----------------------------------------------------------------------------------

    def _defer(self, waiting: _Deferred) -> None:
        """Holds a verdict back; past MAX_DEFERRED kernels or MAX_DEFERRED_ROWS racing accesses, the oldest are
        given now, as judged now, and say so."""
        self.deferred.append(waiting)
        while len(self.deferred) > MAX_DEFERRED or _racing(self.deferred) > MAX_DEFERRED_ROWS:
            oldest = self.deferred.pop(0)
            if self._judge_again(oldest):
                early = bool(self.job.still_running(oldest.awaited))
                self.ready.extend(self._verdict(oldest, early=early))

    def _judge_again(self, waiting: _Deferred) -> bool:
        """Judges the verdict anew if the job's signals grew since; whether it still races."""
        if self.job.signals.size != waiting.judgment.signals:
            waiting.judgment = self.job.judge_again(waiting.judgment.racing, waiting.judgment.prefix)
        return bool(waiting.judgment.pairs)

    def _settle(self, *, final: bool) -> list[Finding]:
        """The waiting verdicts whose races signals now order are dropped; those whose awaited kernels have all
        ended (or every one, ``final``) are given. Per kernel waiting, never per access."""
        given: list[Finding] = []
        waiting: list[_Deferred] = []
        for verdict in self.deferred:
            if not self._judge_again(verdict):
                continue
            verdict.awaited = self.job.still_running(verdict.awaited)
            if final or not verdict.awaited:
                given.extend(self._verdict(verdict, early=False))
            else:
                waiting.append(verdict)
        self.deferred = waiting
        return given

    def _verdict(self, verdict: _Deferred, *, early: bool) -> list[Finding]:
        """A waiting kernel's findings, as its own launch's."""
        launch, judgment = verdict.launch, verdict.judgment
        findings = [self._finding(pair) for pair in judgment.pairs]
        self._count_unsure(judgment)
        said = []
        if judgment.unsure:
            said.append(_unsure(judgment.unsure))
        if early:
            said.append(
                f"cross-NPU racecheck: this kernel's races judged before the job's kernels in flight when it ended "
                f"had all ended (a session keeps at most {MAX_DEFERRED} kernels' verdicts, with {MAX_DEFERRED_ROWS} "
                "racing accesses, waiting for them): races their signals would order may be reported"
            )
        if said:
            findings.append(
                self.context.finding(
                    "internal_error", kernel=launch.name if launch else None, space="GM", detail="; ".join(said)
                )
            )
        for finding in findings:
            finding.launch = launch.kernel if launch else 0
        return findings

    def take_deferred(self) -> list[Finding]:
        """Earlier kernels' verdicts given at the last kernel's end: published as their own launches', not counted
        in that kernel's verdict."""
        ready, self.ready = self.ready, []
        return ready

    def _remember(self, new: np.ndarray, launch: KernelLaunch | None) -> None:
        """The places and the kernel name the job's reports will print for these accesses, resolved here where the
        session's location table is (the report may be another session's)."""
        session = self.context.session
        places = self.job.places
        with self.job.lock:
            if launch is not None:
                self.job.kernels.setdefault((session, launch.kernel), launch.name)
            for location in np.unique(new["location"]).tolist():  # per source line, not per access
                if len(places) >= MAX_SHARED_ACCESSES:
                    break
                if (session, location) not in places:
                    places[session, location] = self.context.place(location)

    def _finding(self, pair: RacePair) -> Finding:
        """msSanitizer's order: the access with the lower serial number first (the one held first on a tie); the
        hazard is the second's access after the first's."""
        first, second = pair.held, pair.new
        if int(second["serial"]) < int(first["serial"]):
            first, second = second, first
        kind = _HAZARD[bool(first["write"]), bool(second["write"])]
        kernel = self.job.kernels.get((int(first["session"]), int(first["launch"])), "unknown")
        return self.context.finding(
            kind,
            kernel=kernel,
            space="GM",
            address=int(first["address"]),
            count=pair.count,
            accesses=[self._access(first), self._access(second)],
            detail=CROSS_NPU,
        )

    def _access(self, row: np.void) -> RaceAccess:
        where, stack = self.job.places.get((int(row["session"]), int(row["location"])), (None, []))
        return RaceAccess(
            pipe=pipe_name(int(row["pipe"])),
            op="Write" if row["write"] else "Read",
            address=int(row["address"]),
            block_type=block_type_name(int(row["block_type"])),
            blocks=[int(row["block_id"])],
            serial=int(row["serial"]),
            pc=int(row["pc"]),
            location=where,
            stack=stack,
            device=int(row["device"]),
        )

    # --- host side --------------------------------------------------------------------------------------------

    def host_op(self, op: HostOp) -> list[Finding]:
        return []

    def finish(self) -> list[Finding]:
        """The session is over (closed, or gone without closing): a kernel left running is no longer in flight
        (its accesses were never compared), and every verdict still waiting is given, judged with all the job has."""
        if self.launch is not None:
            self.launch = None
            self.job.kernel_ended(self.context.session)
        return [*self.take_deferred(), *self._settle(final=True)]


def _unsure(pairs: int) -> str:
    return (
        f"cross-NPU racecheck: {pairs} racing access pairs of this kernel not fully tested for order by signals (a "
        f"job's signals give at most {MAX_SIGNAL_EDGES} set-wait edges, their closure takes at most {MAX_CLOSURE_WORK} "
        f"bytes of work, a kernel's comparison tests at most {MAX_ORDER_TESTS} pairs): some of their reports may be "
        "ordered"
    )


def _racing(deferred: list[_Deferred]) -> int:
    return sum(verdict.judgment.racing.size for verdict in deferred)  # per kernel waiting, at most MAX_DEFERRED
