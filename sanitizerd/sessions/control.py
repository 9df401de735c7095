"""A control connection (the CLI): register a job, watch its findings, query findings and sessions.

Everything this connection sends goes through one outbound stream and one writer task, so pushed findings
and replies keep their order: a ``job_idle`` always follows the findings published before it.

What a client may read is selected by its uid in the store's queries (admins: every uid), so no number of other
users' sessions hides its own. Requests are handled one at a time, each a bounded amount of work (a findings reply
is one page). Those that keep state in the daemon while the connection lasts (``wait_job`` until answered,
``watch`` and ``job_start`` until it ends) are at most ``max_control_requests`` at once: their bookkeeping stays
small, and no request costs time in proportion to how many came before it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio
import anyio.abc
import anyio.lowlevel
import structlog

from sanitizerd.findings.store import FINDINGS_PAGE_COUNT, FindingsPage
from sanitizerd.sessions.access import Access
from sanitizerd.sessions.hub import Hub, LiveView
from sanitizerd.sessions.jobs import WATCH_MESSAGES, JobKey, Watcher, job_key
from sanitizerd.sessions.jobview import summarize
from sanitizerd.sessions.session import Peer
from sanitizerd.sessions.transport import MessageStream, PeerClosed
from sanitizerd_protocol import RemoteProtocolError
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.model import kinds_named

log = structlog.get_logger("sanitizerd.control")

SESSIONS_LISTED = 1000  # ended sessions a sessions or jobs reply lists (the newest of those the client may read)


async def serve_control(
    hub: Hub, stream: MessageStream, peer: Peer, *, handled: Callable[[], None] = lambda: None
) -> None:
    """``handled`` is called after each request is handled (and before a compat_listen's wait): a worker process
    takes its next handed connection only once a handed control connection's request is in effect."""
    access = Access.of(peer, hub.limits.admin_gids)
    reader_uid = None if access.admin else access.uid  # whose rows the store selects
    outbound_send, outbound_receive = anyio.create_memory_object_stream[m.Message](WATCH_MESSAGES)
    # What the jobs this connection watches publish goes to the same outbox, without waiting for it: a watcher
    # that falls behind is dropped (and this connection ended), never a stall for the job's sessions.
    watcher = Watcher(outbound_send)
    registered: set[JobKey] = set()
    watching: set[JobKey] = set()
    waits = 0
    listens = 0  # msSanitizer-form sockets this connection holds (each until it ends)

    written = anyio.Event()  # the writer has sent everything queued and stopped (before a handoff)

    async def write_out() -> None:
        try:
            async with outbound_receive:
                async for message in outbound_receive:
                    await stream.send(message)
                    watcher.delivered(message)
        finally:
            written.set()

    async def end_when_dropped(scope: anyio.CancelScope) -> None:
        await watcher.dropped.wait()
        scope.cancel()

    async def wait_job(key: JobKey) -> None:
        nonlocal waits
        try:
            await outbound_send.send(await hub.jobs.wait_idle(key))
        finally:
            waits -= 1

    async def may_use(key: JobKey) -> bool:
        """Whether this client may register, watch or wait on its job of the name (only the bounds on jobs in use
        refuse); if not, it is refused (and the connection ends) before anything changed."""
        refused = hub.jobs.refusal(key, access.uid, lambda: access.admin)
        if refused is not None:
            await hub.refuse(stream, refused.reason, refused.message, connection="control", uid=access.uid)
        return refused is None

    async def compat_listen(request: m.CompatListen, tg: anyio.abc.TaskGroup) -> m.CompatListening:
        """A socket in msSanitizer's form for the job, living as long as this connection, or why not."""
        sockets = hub.compat_sockets
        if sockets is None:
            why = "this daemon serves no msSanitizer-form sockets"
            hub.note_refusal("shutdown", why, what="compat socket refused", job=request.job, uid=access.uid)
            return m.CompatListening(job=request.job, reason="shutdown", message=why)
        known = sockets.layouts()  # asked of the sockets, which speak msSanitizer's wire: sessions know none of it
        if request.layout not in known:
            why = (
                f"msSanitizer's wire layout {request.layout!r} is not one this daemon speaks "
                f"(it knows: {', '.join(sorted(known)) or 'none'})"
            )
            hub.note_refusal("version", why, what="compat socket refused", job=request.job, uid=access.uid)
            return m.CompatListening(job=request.job, reason="version", message=why)
        return await sockets.listen(request.job, request.layout, peer, tg)

    async def visible_sessions(view: LiveView) -> list[m.SessionInfo]:
        ended = await hub.store_call(lambda: hub.store.ended_sessions(SESSIONS_LISTED, uid=reader_uid))
        return ended + access.visible(view.sessions)

    def page_of(query: m.QueryFindings) -> FindingsPage:
        """One page of the findings the query names that this client may read (on the store thread)."""
        if query.newest:
            return FindingsPage([], hub.store.newest_finding(uid=reader_uid))
        count = min(query.limit, FINDINGS_PAGE_COUNT) if query.limit > 0 else FINDINGS_PAGE_COUNT
        return hub.store.findings_page(
            job=query.job, session=query.session, uid=reader_uid, after=query.after, limit=count,
            kinds=kinds_named(query.kinds, query.severity), since=query.since,
        )  # fmt: skip

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(write_out)
            tg.start_soon(end_when_dropped, tg.cancel_scope)
            try:
                while True:
                    message = await stream.receive()
                    # Frames already buffered arrive without a wait: let signals and other connections in.
                    await anyio.lowlevel.checkpoint()
                    match message:
                        case m.Close():
                            break
                        case m.WaitJob() | m.Watch() | m.JobStart() | m.CompatListen() if (
                            waits + len(watching) + len(registered) + listens >= hub.limits.max_control_requests
                        ):
                            limit = hub.limits.max_control_requests
                            await hub.refuse(
                                stream, "request_limit", f"this connection holds its limit of {limit} requests "
                                "(wait_job, watch, job_start, compat_listen)", connection="control", uid=access.uid,
                            )  # fmt: skip
                            return
                        case m.JobStart() | m.Watch() | m.WaitJob() | m.CompatListen() if hub.handoff is not None:
                            # The job's worker serves the connection from this request on, once every answer
                            # given here has been written (so that answers keep their order).
                            outbound_send.close()
                            await hub.handoff(stream, message, job_key(message.job, access.uid), written.wait)
                            return
                        case m.JobStart(job=job, config=config):
                            key = job_key(job, access.uid)
                            if not await may_use(key):
                                return
                            # A connection's second job_start of a job changes its configuration only.
                            hub.jobs.register(key, config, access.uid, again=key in registered)
                            registered.add(key)
                        case m.Watch(job=job, record=record):
                            key = job_key(job, access.uid)
                            if not await may_use(key):
                                return
                            hub.jobs.watch(key, watcher, admin=access.admin, record=record)
                            watching.add(key)
                        case m.WaitJob(job=job):
                            key = job_key(job, access.uid)
                            if not await may_use(key):
                                return
                            waits += 1
                            tg.start_soon(wait_job, key)
                        case m.CompatListen(job=job):
                            if not await may_use(job_key(job, access.uid)):
                                return
                            handled()  # its answer waits on the listener: the next handoff must not
                            answer = await compat_listen(message, tg)
                            listens += bool(answer.name)
                            await outbound_send.send(answer)
                        case m.QueryFindings():
                            # Another uid's job or session is not refused: the query selects this client's rows,
                            # so it answers as for one that does not exist (a refusal would say that it does).
                            page = await hub.store_call(page_of, message)
                            await outbound_send.send(m.Findings(findings=page.findings, next=page.next))
                        case m.QuerySessions():
                            await outbound_send.send(m.Sessions(sessions=await visible_sessions(await hub.live_view())))
                        case m.QueryJobs(job=named):
                            view = await hub.live_view()
                            # a job a live run registered is live between its processes too; another uid's
                            # registration is not said (its name would be an existence oracle)
                            running = {name for name, uid in view.registered if access.admin or uid == access.uid}
                            listed = await visible_sessions(view)
                            if named:  # one job: the others' sessions are not summarized
                                listed = [s for s in listed if s.job == named]
                                running &= {named}
                            jobs = summarize(listed, now=time.time(), grace=hub.limits.job_grace, running=running)
                            await outbound_send.send(m.Jobs(jobs=jobs))
                    handled()
            except RemoteProtocolError as exc:
                await hub.refuse(stream, exc.reason, str(exc), connection="control")
            except (PeerClosed, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                pass
            finally:
                handled()
                for key in watching:
                    hub.jobs.unwatch(key, watcher)
                for key in registered:
                    hub.jobs.unregister(key)
                tg.cancel_scope.cancel()
        if watcher.reason:
            # Its reader fell behind: what is still queued is not waited for; the reason is sent (bounded in time,
            # since the peer may not be reading at all), logged and counted.
            await hub.refuse(stream, "slow_consumer", f"watcher dropped: {watcher.reason}", uid=access.uid)
    finally:
        outbound_send.close()
