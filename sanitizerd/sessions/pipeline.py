"""Drives one detector of one session from its bounded work stream.

The stream's small buffer is the backpressure: when a detector falls behind, the session's reader blocks on
``send`` and stops reading the socket, so the client's writes block. Batches are checked on a worker thread
(numpy releases the GIL for the heavy parts), so one session's checks never stall another's I/O.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import anyio
import structlog
from anyio.streams.memory import MemoryObjectReceiveStream

from sanitizerd.detectors.base import Detector, SessionContext
from sanitizerd.findings.model import Finding
from sanitizerd.protocol.messages import HostOp
from sanitizerd.sessions.work import Batch, EndKernel, Finish, StartKernel, Work

log = structlog.get_logger("sanitizerd.pipeline")

Publish = Callable[[list[Finding]], Awaitable[None]]
KernelDone = Callable[[int, list[Finding]], Awaitable[None]]


async def drive_detector(
    detector: Detector,
    context: SessionContext,
    work: MemoryObjectReceiveStream[Work],
    *,
    publish: Publish,
    kernel_done: KernelDone,
    limiter: anyio.CapacityLimiter,
    on_checked: Callable[[str, int], None],
    on_failure: Callable[[str], None],
    on_timed: Callable[[float], None] = lambda seconds: None,
    on_cut: Callable[[str, int], None] = lambda detector, n: None,
) -> None:
    """``on_cut``: how many of the detector's own findings say that it cut a check short at one of its bounds
    (its ``internal_error`` findings; a detector's failure is ``on_failure``'s)."""

    async with work:
        async for item in work:
            started = time.perf_counter()
            try:
                findings = await _apply(detector, item, limiter, on_checked)
                on_timed(time.perf_counter() - started)
            except Exception as exc:  # a detector bug ends its own result, not the daemon or the session
                on_failure(detector.name)
                log.exception("detector failed", detector=detector.name, work=type(item).__name__)
                failure = context.finding(
                    "internal_error", detail=f"{detector.name} failed on {type(item).__name__}: {exc!r}"
                )
                findings = [failure]
            else:
                _count_cuts(detector.name, findings, on_cut)
            # Outside the detector's guard: a failure to publish or answer is the session's, not the detector's,
            # and must not be answered a second time as one.
            if isinstance(item, EndKernel):
                await kernel_done(item.kernel, findings)
            elif findings:
                await publish(findings)


def _count_cuts(detector: str, findings: list[Finding], on_cut: Callable[[str, int], None]) -> None:
    cuts = sum(1 for finding in findings if finding.kind == "internal_error")
    if cuts:
        on_cut(detector, cuts)


async def _apply(
    detector: Detector,
    item: Work,
    limiter: anyio.CapacityLimiter,
    on_checked: Callable[[str, int], None],
) -> list[Finding]:
    """The detector's findings on one piece of work; the heavy parts run on a worker thread."""
    match item:
        case Batch(events):
            await anyio.to_thread.run_sync(detector.check, events, limiter=limiter)
            on_checked(detector.name, events.size)
        case StartKernel(launch):
            detector.kernel_begin(launch)
        case EndKernel():  # racecheck does a kernel's whole check here: keep it off the event loop
            return await anyio.to_thread.run_sync(detector.kernel_end, limiter=limiter)
        case HostOp():
            return detector.host_op(item)
        case Finish():
            return await anyio.to_thread.run_sync(detector.finish, limiter=limiter)
    return []
