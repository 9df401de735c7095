"""What every connection handler shares: limits, the store, the jobs, the metrics, the live sessions."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import structlog
from anyio.streams.memory import MemoryObjectSendStream

from sanitizerd.detectors.base import DEFAULT_MAX_RACE_EVENTS
from sanitizerd.detectors.memory_budget import MemoryBudget, default_race_memory
from sanitizerd.findings.model import Finding
from sanitizerd.findings.store import FindingsStore, finding_key
from sanitizerd.metrics import Metrics
from sanitizerd.protocol import DEFAULT_MAX_FRAME_SIZE
from sanitizerd.protocol import messages as m
from sanitizerd.sessions.jobs import Jobs
from sanitizerd.sessions.jobview import DEFAULT_JOB_GRACE
from sanitizerd.sessions.session import Session
from sanitizerd.sessions.transport import MessageStream

T = TypeVar("T")
log = structlog.get_logger("sanitizerd.hub")


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
    # Events racecheck holds for one kernel launch: it checks a launch only once it has ended.
    max_race_events: int = DEFAULT_MAX_RACE_EVENTS
    # Bytes all sessions' racecheck may hold at once (held events and their check): a launch that would go past it
    # is left unchecked, and says so.
    race_memory: int = field(default_factory=default_race_memory)
    # How long a job whose last session closed still counts as "ending" (its ranks may restart), not ended.
    job_grace: float = DEFAULT_JOB_GRACE
    # Groups whose members (besides root) may read every user's sessions and findings.
    admin_gids: frozenset[int] = frozenset()


@dataclass(slots=True)
class Hub:
    store: FindingsStore
    metrics: Metrics
    limits: Limits = field(default_factory=Limits)
    default_config: m.Config = field(default_factory=m.Config)
    jobs: Jobs = field(init=False)
    live: dict[int, Session] = field(default_factory=dict)
    store_limiter: anyio.CapacityLimiter = field(init=False)
    detector_limiter: anyio.CapacityLimiter = field(init=False)
    # Every live detector queue's sending end, so a scrape can sum what waits in them.
    queues: dict[MemoryObjectSendStream[Any], str] = field(default_factory=dict)  # -> its detector's name
    race_memory: MemoryBudget = field(init=False)

    def __post_init__(self) -> None:
        self.jobs = Jobs(self.default_config)
        self.store_limiter = anyio.CapacityLimiter(1)  # SQLite: one writer
        self.detector_limiter = anyio.CapacityLimiter(self.limits.detector_threads)
        self.race_memory = MemoryBudget(self.limits.race_memory, on_refused=self._race_memory_refused)

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

    def jobs_live(self) -> float:
        return float(len({session.job for session in list(self.live.values())}))

    async def refuse(self, stream: MessageStream, reason: str, message: str, **context: object) -> None:
        """End a connection for breaking the protocol or a limit: counted, logged, and told to the peer."""
        self.metrics.rejected.labels(reason).inc()
        log.warning("connection refused", reason=reason, detail=message, **context)
        await stream.send_error(reason, message)

    async def store_call(self, fn: Callable[..., T], *args: object) -> T:
        """Run a blocking store method on the single store thread."""
        return await anyio.to_thread.run_sync(fn, *args, limiter=self.store_limiter)

    async def publish(self, session: Session, findings: list[Finding]) -> None:
        """Count, persist, then hand findings to the job's watchers."""
        if session.already_stored:
            findings = _not_stored_yet(session, findings)
        if not findings:
            return
        session.count(findings)
        for finding in findings:
            self.metrics.findings.labels(finding.kind, finding.severity).inc()
        try:
            await self.store_call(self.store.add_findings, findings)
            self.metrics.store_writes.inc(len(findings))
        except Exception:  # a full disk must not end the session: the findings still reach the job's watchers
            self.metrics.store_errors.inc()
            log.exception("store write failed", findings=len(findings))
        await self.jobs.publish(findings)


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
