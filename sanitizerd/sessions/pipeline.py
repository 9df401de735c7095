"""Drives one detector of one session from its bounded work stream.

The stream's small buffer is the backpressure: when a detector falls behind, the session's reader blocks on
``send`` and stops reading the socket, so the client's writes block. Batches are checked on a detector thread
(numpy releases the GIL for the heavy parts), shared out fairly among uids and sessions (``threads.py``), so one
session's checks never stall another's I/O, nor hold every thread from another's kernels.

Each kernel launch has a budget of thread CPU time per detector (``--kernel-cpu-budget``): once a detector's checks
of a launch have used it, the launch's remaining batches are not checked by that detector, and its verdict has an
``internal_error`` that says so. The session goes on with its next launch, with a budget of its own.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import structlog
from anyio.streams.memory import MemoryObjectReceiveStream

from sanitizerd.detectors.base import ALL_PIECES, BatchTooWide, Detector, KernelLaunch, SessionContext
from sanitizerd.sessions.threads import RunOnThread
from sanitizerd.sessions.work import Batch, EndKernel, Finish, SharedSpan, StartKernel, Work
from sanitizerd_protocol.messages import HostOp, RegionPermission
from sanitizerd_protocol.model import Finding

T = TypeVar("T")
log = structlog.get_logger("sanitizerd.pipeline")

Publish = Callable[[list[Finding]], Awaitable[None]]
# A detector has finished a kernel: its findings, and whether it left part of the kernel unchecked.
KernelDone = Callable[[int, list[Finding], bool], Awaitable[None]]
NO_BUDGET = float("inf")


@dataclass(slots=True)
class _KernelCpu:
    """One detector's thread CPU time on the running kernel launch, and what it left unchecked past its budget."""

    launch: KernelLaunch | None = None
    seconds: float = 0.0
    unchecked_events: int = 0
    unchecked_batches: int = 0
    budget: float = NO_BUDGET  # the budget it passed (read at each batch: SIGHUP may change it)

    @property
    def cut(self) -> bool:
        return self.unchecked_batches > 0


async def drive_detector(
    detector: Detector,
    context: SessionContext,
    work: MemoryObjectReceiveStream[Work],
    *,
    publish: Publish,
    kernel_done: KernelDone,
    threads: RunOnThread,
    on_checked: Callable[[str, int], None],
    on_failure: Callable[[str], None],
    on_timed: Callable[[float], None] = lambda seconds: None,
    on_cut: Callable[[str, int], None] = lambda detector, n: None,
    cpu_budget: Callable[[], float] = lambda: NO_BUDGET,
    on_budget_cut: Callable[[str, int], None] = lambda detector, events: None,
) -> None:
    """``on_cut``: how many of the detector's own findings say that it cut a check short at one of its bounds
    (its ``internal_error`` findings; a detector's failure is ``on_failure``'s). ``cpu_budget``: the seconds of
    thread CPU time the detector's checks of one kernel launch may take now; ``on_budget_cut``: a launch passed it
    (the events it left unchecked, told once the launch ends)."""

    cpu = _KernelCpu()

    async def on_thread(fn: Callable[[], T]) -> T:
        return await threads(_timed(fn, cpu))

    walked = getattr(detector, "pieces_walked", ALL_PIECES)
    counts = getattr(detector, "counts_pieces", False)
    async with work:
        async for whole in work:
            # a client's batch as the batches this detector may check at once: cut here, or by the detector's word
            pending = deque([whole] if counts else _cut(whole, walked))
            while pending:
                item = pending.popleft()
                started = time.perf_counter()
                if isinstance(item, StartKernel):
                    cpu = _KernelCpu(item.launch)
                if isinstance(item, Batch) and (cpu.cut or cpu.seconds > cpu_budget()):
                    if not cpu.cut:
                        cpu.budget = cpu_budget()
                    cpu.unchecked_events += item.events.size
                    cpu.unchecked_batches += 1
                    continue
                try:
                    try:
                        findings = await _apply(detector, item, on_thread, on_checked, counts)
                    except BatchTooWide:
                        parts = _cut(item, walked)
                        if len(parts) == 1:  # the detector's count and the cut disagree: a bug, not a loop
                            raise
                        pending.extendleft(reversed(parts))
                        continue
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
                if isinstance(item, EndKernel | Finish) and cpu.cut:
                    findings.append(_budget_cut(detector.name, context, cpu))
                    on_cut(detector.name, 1)
                    on_budget_cut(detector.name, cpu.unchecked_events)
                    log.warning(
                        "kernel launch past its CPU budget: the rest not checked",
                        detector=detector.name,
                        session=context.session,
                        kernel=cpu.launch.name if cpu.launch else None,
                        cpu_s=round(cpu.seconds, 3),
                        unchecked_events=cpu.unchecked_events,
                    )
                # Outside the detector's guard: a failure to publish or answer is the session's, not the detector's,
                # and must not be answered a second time as one.
                if isinstance(item, EndKernel):
                    cut, cpu = cpu.cut, _KernelCpu()
                    await kernel_done(item.kernel, findings, cut)
                    # Earlier launches' verdicts that waited for other sessions' kernels (cross-NPU racecheck): their
                    # own launches' findings, not this one's
                    take_deferred = getattr(detector, "take_deferred", None)
                    later = take_deferred() if take_deferred is not None else []
                    if later:
                        _count_cuts(detector.name, later, on_cut)
                        await publish(later)
                elif findings:
                    await publish(findings)


def _cut(item: Work, walked: str) -> list[Work]:
    """A batch as consecutive batches of at most BATCH_PIECES of the pieces the detector walks (sessions/work.py),
    each then budgeted and shared out among threads on its own; any other work as it is."""
    if not isinstance(item, Batch):
        return [item]
    parts = item.parts(walked)
    return [item] if len(parts) == 1 else [Batch(part) for part in parts]


def _timed(fn: Callable[[], T], cpu: _KernelCpu) -> Callable[[], T]:
    """``fn``, adding the thread CPU time it takes (on the thread it runs on) to the kernel's."""

    def timed() -> T:
        started = time.thread_time()
        try:
            return fn()
        finally:
            cpu.seconds += time.thread_time() - started

    return timed


def _budget_cut(name: str, context: SessionContext, cpu: _KernelCpu) -> Finding:
    return context.finding(
        "internal_error",
        kernel=cpu.launch.name if cpu.launch else None,
        space="",
        size=cpu.unchecked_events,
        detail=(
            f"{name}'s checks of this kernel launch passed their CPU budget of {cpu.budget:g} s (sanitizerd serve "
            f"--kernel-cpu-budget; {cpu.seconds:.1f} s used): {cpu.unchecked_events} events in "
            f"{cpu.unchecked_batches} batches after it were not checked by {name}"
        ),
    )


def _count_cuts(detector: str, findings: list[Finding], on_cut: Callable[[str, int], None]) -> None:
    cuts = sum(1 for finding in findings if finding.kind == "internal_error")
    if cuts:
        on_cut(detector, cuts)


async def _apply(
    detector: Detector,
    item: Work,
    on_thread: Callable[[Callable[[], T]], Awaitable[T]],
    on_checked: Callable[[str, int], None],
    counts_pieces: bool = False,
) -> list[Finding]:
    """The detector's findings on one piece of work; the heavy parts run on a detector thread. ``counts_pieces``:
    a batch goes to the detector's ``check_within_bound``, which may refuse it as too wide (BatchTooWide)."""
    match item:
        case Batch(events):
            check = detector.check_within_bound if counts_pieces else detector.check  # type: ignore[attr-defined]
            await on_thread(lambda: check(events))
            on_checked(detector.name, events.size)
            # What a detector can tell before the kernel ends (synccheck's lock-ups: a locked kernel never ends)
            take_early = getattr(detector, "take_early", None)
            return take_early() if take_early is not None else []
        case StartKernel(launch):
            detector.kernel_begin(launch)
        case EndKernel():  # racecheck does a kernel's whole check here: keep it off the event loop
            return await on_thread(detector.kernel_end)
        case HostOp():
            return detector.host_op(item)
        case RegionPermission():
            # only the detectors that judge by regions have the hook (memcheck, cross-NPU racecheck)
            region = getattr(detector, "region_permission", None)
            return region(item) if region is not None else []
        case SharedSpan():
            span = getattr(detector, "shared_span", None)
            return span(item.address, item.size, item.owner, item.base) if span is not None else []
        case Finish():
            return await on_thread(detector.finish)
    return []
