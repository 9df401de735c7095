"""What every connection handler shares: limits, the store, the jobs, the metrics, the live sessions."""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import InitVar, dataclass, field
from typing import Any, Protocol, TypeVar

import anyio
import anyio.abc
import structlog
from anyio.streams.memory import MemoryObjectSendStream

from sanitizerd.detectors.base import DEFAULT_MAX_RACE_EVENTS
from sanitizerd.detectors.memory_budget import MemoryBudget, default_race_memory
from sanitizerd.findings.store import Pruned, Store, StoreUnavailable, finding_key
from sanitizerd.metrics import Metrics
from sanitizerd.sessions.jobs import JobKey, Jobs, job_key
from sanitizerd.sessions.jobview import DEFAULT_JOB_GRACE
from sanitizerd.sessions.session import MAX_LIVE_ALLOCATIONS, LogGate, Peer, Session
from sanitizerd.sessions.threads import DetectorThreads
from sanitizerd.sessions.transport import MessageStream
from sanitizerd_protocol import DEFAULT_MAX_FRAME_SIZE
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.model import Finding, Suppression

T = TypeVar("T")
# Refusals logged per reason: a burst, then a steady rate; the rest are counted in the metric, and the next line
# logged says how many it stood for.
REFUSAL_LOG_BURST = 50
REFUSALS_LOGGED_PER_S = 5.0
log = structlog.get_logger("sanitizerd.hub")

RETENTION_INTERVAL = 600.0  # seconds between retention passes (the size limit is also kept at each write)

# The listener's way to hand a control connection, at its first request about a job, to the worker that owns the
# job: the stream, that request, the job, and what to wait for before it goes (the answers already queued written).
ControlHandoff = Callable[[MessageStream, m.Message, JobKey, Callable[[], Awaitable[object]]], Awaitable[None]]


class CompatSocketHolder(Protocol):
    """Whoever holds the per-job sockets in msSanitizer's form, as a control connection's compat_listen sees it: the
    daemon's own (``server.compat_socket.CompatSockets``), or a worker's way of asking its listener for one. Sessions
    know the msSanitizer door only by this (it lies above them)."""

    def count(self) -> float:
        """Sockets held here (for /metrics)."""
        ...

    def layouts(self) -> frozenset[str]:
        """The names of msSanitizer's wire layouts this daemon speaks."""
        ...

    async def listen(self, job: str, layout: str, peer: Peer, tg: anyio.abc.TaskGroup) -> m.CompatListening:
        """Open ``job``'s socket for the control peer ``peer`` (living as long as ``tg``), or say why not."""
        ...


@dataclass(frozen=True, slots=True)
class Limits:
    """Every limit the daemon enforces, in one place, each configurable from ``sanitizerd serve``."""

    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    max_sessions: int = 1024
    max_sessions_per_uid: int = 256  # one user's runaway job must not take every session from the others
    handshake_timeout: float = 5.0
    # After SIGTERM: how long live sessions may take to finish their kernels and close before they are cut off.
    drain_timeout: float = 10.0
    # Work items buffered per detector; with 64 MiB frames the worst case per session is
    # queue_depth x max_frame_size per detector, so keep it small.
    queue_depth: int = 4
    # Threads that run detector checks; numpy releases the GIL, so more than the cores buys nothing.
    detector_threads: int = field(default_factory=lambda: min(4, os.cpu_count() or 1))
    # Seconds of thread CPU time one detector's checks of one kernel launch may take; past it the launch's remaining
    # batches go unchecked by that detector, and its verdict says so (pipeline.py). Generous: a real launch of
    # hundreds of millions of events fits; a hostile one cannot hold a thread for minutes.
    kernel_cpu_budget: float = 60.0
    # Seconds a check may wait for a detector thread, with every thread busy, before /readyz says "saturated".
    saturated_after: float = 10.0
    # Events racecheck holds for one kernel launch: it checks a launch only once it has ended.
    max_race_events: int = DEFAULT_MAX_RACE_EVENTS
    # Live allocations one session may hold (each costs the detectors a table entry and a range of legal GM): far
    # more than a real program keeps (a framework's caching allocator holds thousands); past it the session ends.
    max_live_allocations: int = MAX_LIVE_ALLOCATIONS
    # Bytes all sessions' racecheck may hold at once (held events and their check): a launch that would go past it
    # is left unchecked, and says so.
    race_memory: int = field(default_factory=default_race_memory)
    # How long a job whose last session closed still counts as "ending" (its ranks may restart), not ended.
    job_grace: float = DEFAULT_JOB_GRACE
    # Seconds a running kernel launch may send nothing before it is reported silent (a hung kernel that sends no
    # record must not pass as clean): a real launch sends within seconds; hung ones are seen in minutes.
    silent_kernel_after: float = 300.0
    # Groups whose members (besides root) may read every user's sessions and findings.
    admin_gids: frozenset[int] = frozenset()
    # Requests one control connection may hold open at once (wait_job, watch, job_start: each keeps state in the
    # daemon until answered or until the connection ends); one more ends it (request_limit).
    max_control_requests: int = 64
    # Ended sessions (and their findings) older than this are deleted, at start and every RETENTION_INTERVAL.
    retention_days: float = 30.0
    # Bytes the store's pages may take; past it the oldest ended sessions go, and when none is left to delete new
    # findings are counted as unstored instead of written.
    max_store_size: int = 4 << 30
    # Open client connections (any role, in handshake or not), in all and per uid: each costs a file descriptor.
    # At start both are lowered to what the fd limit allows (sanitizerd/fds.py).
    max_connections: int = 4096
    max_connections_per_uid: int = 512
    # Bytes of unfinished frames all of one uid's connections may hold: one frame may be up to max_frame_size,
    # but a uid cannot pin memory by starting many and finishing none.
    max_unfinished_bytes_per_uid: int = 512 * 1024 * 1024
    # Seconds of reading a begun frame may take; a peer that stalls mid-frame holds its buffer no longer.
    frame_timeout: float = 30.0
    # Seconds a producer may send nothing at all between frames while it is owed no verdict (long: a job may
    # compute for a while between kernels); its session then ends with idle_timeout.
    idle_timeout: float = 3600.0
    # Sockets in msSanitizer's form (compat_listen) open at once, in all and per uid: each is a listening socket
    # (an fd) that lives as long as the control connection that asked for it.
    max_compat_sockets: int = 256
    max_compat_sockets_per_uid: int = 16
    # With worker processes: seconds a worker may answer the listener nothing before it is taken for stalled (its
    # event loop stuck: it serves nobody while it looks alive), killed and started again.
    worker_stall_timeout: float = 30.0


@dataclass(slots=True)
class LiveView:
    """What is live now: producer sessions, and the jobs a live ``run`` has registered (``job_start``), which are
    live while it runs even when no session of theirs is (between a job's processes)."""

    sessions: list[m.SessionInfo] = field(default_factory=list)
    registered: list[JobKey] = field(default_factory=list)


@dataclass(slots=True)
class Hub:
    store: Store
    metrics: Metrics
    limits: Limits = field(default_factory=Limits)
    default_config: m.Config = field(default_factory=m.Config)
    # The host's suppression rules (the config file's ``suppressions``), applied after each job's own.
    suppressions: tuple[Suppression, ...] = ()
    jobs: Jobs = field(init=False)
    live: dict[int, Session] = field(default_factory=dict)
    store_limiter: anyio.CapacityLimiter = field(init=False)
    detector_threads: DetectorThreads = field(init=False)  # shared out fairly among uids and sessions
    # Every live detector queue's sending end, so a scrape can sum what waits in them.
    queues: dict[MemoryObjectSendStream[Any], str] = field(default_factory=dict)  # -> its detector's name
    # Why the store refuses writes now ("" while it takes them): a failure is logged once per burst, not per batch.
    store_failure: str = ""
    unstored_in_burst: int = 0
    race_memory: MemoryBudget = field(init=False)
    refusal_logs: dict[str, LogGate] = field(default_factory=dict)  # reason -> its log's token bucket
    # Makes the holder of the per-job sockets in msSanitizer's form (compat_listen) for this hub, whose limits bound
    # them and whose refusals they count; None where no daemon serves them (tests' hubs).
    compat_holder: InitVar[Callable[[Hub], CompatSocketHolder] | None] = None
    compat_sockets: CompatSocketHolder | None = field(init=False, default=None)
    # With worker processes (sanitizerd/workers): what other processes have live (sessions, registered jobs), for
    # the views that list every session and job; None in a daemon of one process.
    live_elsewhere: Callable[[], Awaitable[LiveView]] | None = None
    # In the listener of worker processes: hands a control connection on to a worker; None where this process
    # serves jobs itself.
    handoff: ControlHandoff | None = None

    def __post_init__(self, compat_holder: Callable[[Hub], CompatSocketHolder] | None) -> None:
        self.jobs = Jobs(self.default_config)
        self.store_limiter = anyio.CapacityLimiter(1)  # SQLite: one writer
        self.detector_threads = DetectorThreads(
            self.limits.detector_threads, on_wait=self.metrics.detector_thread_waits.observe
        )
        self.race_memory = MemoryBudget(self.limits.race_memory, on_refused=self._race_memory_refused)
        self.compat_sockets = compat_holder(self) if compat_holder is not None else None

    def _race_memory_refused(self, asked: int, used: int, limit: int) -> None:
        """A launch's racecheck found the host's budget spent (on a worker thread; once per launch)."""
        self.metrics.race_memory_refusals.inc()
        log.warning("race-check memory budget spent: a launch goes unchecked", asked=asked, used=used, limit=limit)

    def queued(self) -> float:
        """Work items waiting in detector queues. Called from the metrics thread, so it reads a snapshot."""
        return sum(self.queued_by_detector().values())

    def queued_by_detector(self) -> dict[str, float]:
        for _ in range(3):
            try:
                depth: dict[str, float] = {}
                for queue, detector in list(self.queues.items()):
                    depth[detector] = depth.get(detector, 0.0) + queue.statistics().current_buffer_used
                return depth
            except RuntimeError:  # the dict changed under the copy; try again
                continue
        return {}

    def live_here(self) -> LiveView:
        return LiveView([session.info() for session in self.live.values()], self.jobs.registered())

    async def live_view(self) -> LiveView:
        """Every live producer session and registered job, this process's and (with worker processes) the
        others'."""
        view = self.live_here()
        if self.live_elsewhere is not None:
            elsewhere = await self.live_elsewhere()
            view.sessions += elsewhere.sessions
            view.registered += elsewhere.registered
        return view

    def jobs_live(self) -> float:
        return float(len({session.job for session in list(self.live.values())}))

    async def refuse(self, stream: MessageStream, reason: str, message: str, **context: object) -> None:
        """End a connection for breaking the protocol or a limit: counted, logged, and told to the peer. The log is
        rate-limited per reason (a flood of connections must not flood the log); every refusal is counted."""
        self.note_refusal(reason, message, **context)
        await stream.send_error(reason, message)

    def note_refusal(self, reason: str, message: str, *, what: str = "connection refused", **context: object) -> None:
        """Count and (rate-limited) log a refusal; telling the peer, if at all, is the caller's."""
        self.metrics.rejected.labels(reason).inc()
        gate = self.refusal_logs.setdefault(reason, LogGate(rate=REFUSALS_LOGGED_PER_S, burst=REFUSAL_LOG_BURST))
        quiet = gate.admit(time.monotonic())
        if quiet is not None:
            more = {"refusals_not_logged_before": quiet} if quiet else {}
            log.warning(what, reason=reason, detail=message, **more, **context)

    async def store_call(self, fn: Callable[..., T], *args: object) -> T:
        """Run a blocking store method on the single store thread."""
        return await anyio.to_thread.run_sync(fn, *args, limiter=self.store_limiter)

    async def publish(self, session: Session, findings: list[Finding]) -> None:
        """Mark what the suppression rules hide, count, persist, then hand findings to the job's watchers."""
        # Marked first: a resumed session's findings are known by everything but their id and time, marks included.
        session.suppressor.mark(findings)
        # Counted before a resumed session's already stored ones are left out: the session is the whole stream
        # replayed, and its count must say what the store holds for it (the lost worker's rows and the new ones).
        session.count(findings)
        if session.already_stored:
            findings = _not_stored_yet(session, findings)
        if not findings:
            return
        for finding in findings:
            if finding.suppressed:
                self.metrics.findings_suppressed.labels(finding.kind).inc()
            else:
                self.metrics.findings.labels(finding.kind, finding.severity).inc()
        try:
            await self.store_call(self.store.add_findings, findings)
        except StoreUnavailable as exc:  # not the session's end: the findings still reach its client and watchers
            self.unstored(session, len(findings), str(exc))
        except Exception as exc:  # a bug of ours: logged in full, and the findings still counted as not stored
            log.exception("store write failed")
            self.unstored(session, len(findings), repr(exc))
        else:
            self.metrics.store_writes.inc(len(findings))
            self.store_recovered()
        self.jobs.publish(job_key(session.job, session.peer.uid), findings)

    def unstored(self, session: Session, count: int, why: str) -> None:
        """Findings the store could not keep: counted for the session (its close says so) and the operator."""
        session.unstored += count
        self.metrics.findings_unstored.inc(count)
        self.metrics.store_errors.inc()
        self.metrics.store_writable.set(0)
        self.unstored_in_burst += count
        if not self.store_failure:
            log.error("findings not stored (logged once until the store takes writes again)", detail=why)
        self.store_failure = why

    def store_recovered(self) -> None:
        if self.store_failure:
            log.warning("the store takes writes again", unstored=self.unstored_in_burst, was=self.store_failure)
            self.store_failure, self.unstored_in_burst = "", 0
            self.metrics.store_writable.set(1)

    async def retain(self) -> Pruned:
        """One retention pass: sessions past their age go, then the oldest while the store is over its size."""
        self.store.max_bytes = self.limits.max_store_size
        try:
            pruned = await self.store_call(lambda: self.store.prune(max_age=self.limits.retention_days * 86400.0))
        except StoreUnavailable as exc:
            log.error("retention pass failed", detail=str(exc))
            pruned = Pruned()
        self.metrics.store_pruned.labels("sessions").inc(pruned.sessions)
        self.metrics.store_pruned.labels("findings").inc(pruned.findings)
        if pruned.sessions:
            log.info("retention: old sessions deleted", sessions=pruned.sessions, findings=pruned.findings)
        return pruned


def _not_stored_yet(session: Session, findings: list[Finding]) -> list[Finding]:
    """A resumed session's findings, less those its lost daemon had stored already."""
    fresh = []
    for finding in findings:
        key = finding_key(finding)
        if session.already_stored[key] > 0:
            session.already_stored[key] -= 1
        else:
            fresh.append(finding)
    return fresh
