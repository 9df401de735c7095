"""The async pump of one producer session: read messages, hand work to detectors, answer verdicts.

Every task has an owner: the session's task group owns its detector tasks, and the session is finalized
(end-of-run checks, store, watchers) before the handler returns, whatever ended it.
"""

from __future__ import annotations

import time
from functools import partial

import anyio
import anyio.lowlevel
import structlog
from anyio.streams.memory import MemoryObjectSendStream

from sanitizerd.findings.store import StoreUnavailable
from sanitizerd.sessions.hub import Hub
from sanitizerd.sessions.jobs import job_key
from sanitizerd.sessions.pipeline import drive_detector
from sanitizerd.sessions.session import (
    Answer,
    ForeignFrees,
    GuardWriteRefused,
    RegionRefused,
    Reply,
    Session,
    SessionFindings,
    SignatureReport,
)
from sanitizerd.sessions.transport import MessageStream, PeerClosed
from sanitizerd.sessions.work import Finish, Work
from sanitizerd_protocol import EVENT_DTYPE, RemoteProtocolError
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.model import Finding

log = structlog.get_logger("sanitizerd.session")
YIELD_EVERY = 64  # frames between two checkpoints of the session pump


async def serve_producer(hub: Hub, stream: MessageStream, session: Session) -> None:
    metrics = hub.metrics
    job = job_key(session.job, session.peer.uid)
    reason = "closed"
    stream.owes_reply = lambda: any(state.pending for state in session.kernels.values())
    graceful = False
    misread = False  # the client spoke another wire (wire_mismatch): its host state is not to be checked

    async def publish(findings: list[Finding]) -> None:
        await hub.publish(session, findings)

    async def kernel_done(kernel: int, findings: list[Finding], cut: bool) -> None:
        for finding in findings:
            finding.launch = kernel
        await publish(findings)
        if cut and kernel in session.kernels:  # a detector left part of it unchecked (its CPU budget)
            session.kernels[kernel].incomplete = True
        checked = session.kernel_checked(kernel, findings)
        if checked is not None:
            await answer(checked)

    async def answer(checked: Answer) -> None:
        """The verdict to the client (if it is still there), the report to the job's watchers."""
        try:
            await stream.send(checked.verdict)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass  # the client left, or its session was refused; its findings are stored all the same
        hub.jobs.kernel_checked(job, checked.report)

    async def dispatch(item: Work | Reply) -> None:
        """Detector work to every detector's queue; everything else where it belongs."""
        match item:
            case Answer():
                await answer(item)
            case SessionFindings(findings=findings):
                await publish(findings)
            case RegionRefused(finding=finding):
                metrics.regions_refused.inc()
                await publish([finding])
            case GuardWriteRefused(findings=findings):
                metrics.guard_writes_refused.inc()
                if findings:
                    await publish(findings)
            case SignatureReport(signature=signature, rank=rank):
                for f in hub.jobs.signature(job, signature, rank):
                    # A replica's disagreement belongs to the rank it names, which may be another session of the job.
                    owner = next(
                        (
                            s
                            for s in hub.live.values()
                            if job_key(s.job, s.peer.uid) == job and s.hello.rank == f.replay.rank
                        ),
                        None,
                    )
                    if owner is not None:
                        finding = owner.context.finding(f.kind, space="", detail=f.text, replay=f.replay)
                    else:  # a rank on another host (its process group compared the replicas): this host's run says so
                        owner = session
                        text = f"{f.text} (rank {f.replay.rank} is not served by this daemon: another host's ranks)"
                        finding = owner.context.finding(f.kind, space="", detail=text, replay=f.replay)
                        finding.device = -1  # not this session's device
                    await hub.publish(owner, [finding])
            case m.IpcResult():
                await stream.send(item)
            case ForeignFrees(by_session=by_session):
                for other, addresses in by_session.items():
                    target = hub.live.get(other)
                    if target is not None:
                        target.unmapped_elsewhere(addresses)
            case _:
                for name, send in senders:
                    stats = send.statistics()
                    if stats.current_buffer_used >= stats.max_buffer_size:  # the detector is behind: we wait
                        metrics.backpressure_waits.labels(name).inc()
                    await send.send(item)

    def on_checked(detector: str, n: int) -> None:
        metrics.events_checked.labels(detector).inc(n)

    def on_failure(detector: str) -> None:
        metrics.detector_failures.labels(detector).inc()

    def on_budget_cut(detector: str, events: int) -> None:
        metrics.cpu_budget_cuts.labels(detector).inc()
        metrics.cpu_budget_unchecked_events.labels(detector).inc(events)

    heard = [time.monotonic()]  # when the client last sent anything
    silence = anyio.CancelScope()

    async def watch_silence() -> None:
        """A running launch that sends nothing for ``silent_kernel_after`` seconds is reported silent, once: a kernel
        hung without a record to show it (or whose records stopped coming) must not end the run as clean."""
        reported: object = None  # the launch last reported
        with silence:
            while True:
                after = hub.limits.silent_kernel_after  # SIGHUP may change it
                state, quiet = session.current, time.monotonic() - heard[0]
                if state is None or state is reported:
                    await anyio.sleep(after / 2)
                    continue
                if quiet < after:
                    await anyio.sleep(after - quiet)
                    continue
                reported = state
                state.errors += 1  # its verdict, should it still end, is not clean
                metrics.kernels_silent.inc()
                log.warning("kernel launch silent", session=session.id, kernel=state.launch.name, seconds=after)
                name = state.launch.name
                await publish([session.context.finding("kernel_silent", kernel=name, space="", detail=f"{after:g} s")])

    senders: list[tuple[str, MemoryObjectSendStream[Work]]] = []
    counted_bytes = 0  # bytes already added to the metric, which is bumped per frame, not per session
    try:
        async with anyio.create_task_group() as tg:
            for detector in session.detectors:
                send, receive = anyio.create_memory_object_stream[Work](hub.limits.queue_depth)
                senders.append((detector.name, send))
                hub.queues[send] = detector.name
                drive = partial(
                    drive_detector,
                    publish=publish,
                    kernel_done=kernel_done,
                    threads=hub.detector_threads.runner(session.peer.uid, session.id),
                    on_checked=on_checked,
                    on_failure=on_failure,
                    on_timed=metrics.detector_seconds.labels(detector.name).observe,
                    on_cut=lambda name, n: metrics.detector_checks_cut.labels(name).inc(n),
                    cpu_budget=lambda: hub.limits.kernel_cpu_budget,  # SIGHUP may change it
                    on_budget_cut=on_budget_cut,
                )
                tg.start_soon(drive, detector, session.context, receive)
            tg.start_soon(watch_silence)
            try:
                while True:
                    # Frames already buffered are returned without a wait: yield now and then, so that one client's
                    # megabytes of small frames cannot hold the event loop from the others.
                    if not stream.frames_received % YIELD_EVERY:
                        await anyio.lowlevel.checkpoint()
                    message = await stream.receive()
                    heard[0] = time.monotonic()
                    metrics.frames.labels(type(message).__struct_config__.tag).inc()
                    metrics.bytes.inc(stream.bytes_received - counted_bytes)
                    counted_bytes = stream.bytes_received
                    if isinstance(message, m.Close):
                        graceful = True
                        break
                    if hub.jobs.recording(job):
                        hub.jobs.record(job, session.id, message)
                    if isinstance(message, m.Log):
                        dropped = session.log_gate.admit(time.monotonic())
                        if dropped is None:
                            metrics.client_logs_dropped.inc()
                        else:
                            extra = {"dropped_before": dropped} if dropped else {}
                            log.info("client log", text=message.text, level=message.level, **extra)
                        continue
                    if isinstance(message, m.Events):
                        metrics.events.inc(message.records.nbytes // EVENT_DTYPE.itemsize)
                    elif isinstance(message, m.KernelEnd) and message.problems:
                        metrics.kernel_problems.inc(len(message.problems))
                    for item in session.handle(message):
                        await dispatch(item)
            except RemoteProtocolError as exc:
                reason = "protocol_error"
                session.end_reason = f"protocol error ({exc.reason}): {exc}"
                if exc.reason == "wire_mismatch":
                    # Everything this client sent was read at the wrong offsets: its end-of-session checks (leaks
                    # of misread allocations) would be false, and a run must not pass as clean, so the session's
                    # result is this one error.
                    misread = True
                    await publish([session.context.finding("wire_mismatch", space="", detail=str(exc))])
                await hub.refuse(stream, exc.reason, str(exc))
            except PeerClosed:
                reason = "disconnected"
                session.end_reason = "client disconnected without close"
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                reason = "disconnected"
                session.end_reason = f"connection lost: {exc!r}"
            except anyio.get_cancelled_exc_class():
                reason = "shutdown"
                session.end_reason = "daemon shutting down"
                raise
            except Exception as exc:  # a bug of ours on this session's input ends this session, said so
                reason = "internal_error"
                session.end_reason = f"internal error: {type(exc).__name__}"
                log.exception("session pump failed")
                await hub.refuse(stream, "internal_error", "the daemon failed on this session's input; see its log")
            finally:
                silence.cancel()
                metrics.bytes.inc(stream.bytes_received - counted_bytes)
                with anyio.CancelScope(shield=True):
                    for _, send in senders:
                        # A session the daemon cuts off (shutdown) is not over: its client resumes it on the next
                        # daemon, which runs the end-of-session checks then. Leaks reported now would be false.
                        if reason != "shutdown" and not misread:
                            try:
                                await send.send(Finish())
                            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                                pass
                        await send.aclose()
                        hub.queues.pop(send, None)
    finally:
        # Whatever ended it (close, disconnect, protocol error, shutdown), the session is recorded as ended.
        with anyio.CancelScope(shield=True):
            await _finalize(hub, stream, session, reason, graceful)


async def _finalize(hub: Hub, stream: MessageStream, session: Session, reason: str, graceful: bool) -> None:
    session.end_reason = session.end_reason or "closed by client"
    if session.log_gate.dropped:
        log.info("client log lines dropped at the end", dropped=session.log_gate.dropped)
    info = session.info(state="ended")
    info.ended = time.time()
    try:
        await hub.store_call(hub.store.close_session, info)
    except StoreUnavailable as exc:  # the next start closes it as a crashed session; its client still hears why
        hub.metrics.store_errors.inc()
        log.error("session end not stored", detail=str(exc))
    hub.metrics.sessions_ended.labels(reason).inc()
    # Attached and sent no device record and no signature: hooks that do not record look like a clean host. A session
    # cut by a shutdown is left out: its client resumes it and sends its records then.
    if not (info.events or info.signatures) and reason != "shutdown":
        hub.metrics.sessions_silent.inc()
    log.info(
        "session ended",
        reason=reason,
        detail=session.end_reason,
        kernels=info.kernels,
        events=info.events,
        findings=info.findings,
    )
    if graceful:
        try:
            await stream.send(
                m.Closed(
                    session=session.id,
                    kernels=info.kernels,
                    events=info.events,
                    findings=info.findings,
                    unstored=info.unstored,
                )
            )
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
    hub.live.pop(session.id, None)
    hub.jobs.session_ended(info)
