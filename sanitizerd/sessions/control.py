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

import anyio
import anyio.lowlevel
import structlog

from sanitizerd.findings.store import FINDINGS_PAGE_COUNT, FindingsPage
from sanitizerd.protocol import RemoteProtocolError
from sanitizerd.protocol import messages as m
from sanitizerd.sessions.access import Access
from sanitizerd.sessions.hub import Hub
from sanitizerd.sessions.jobview import summarize
from sanitizerd.sessions.session import Peer
from sanitizerd.sessions.transport import MessageStream, PeerClosed

log = structlog.get_logger("sanitizerd.control")

SESSIONS_LISTED = 1000  # ended sessions a sessions or jobs reply lists (the newest of those the client may read)


async def serve_control(hub: Hub, stream: MessageStream, peer: Peer) -> None:
    access = Access.of(peer, hub.limits.admin_gids)
    reader_uid = None if access.admin else access.uid  # whose rows the store selects
    outbound_send, outbound_receive = anyio.create_memory_object_stream[m.Message](16)
    registered: list[str] = []
    watching: list[str] = []
    waits = 0

    async def write_out() -> None:
        async with outbound_receive:
            async for message in outbound_receive:
                await stream.send(message)

    async def wait_job(job: str) -> None:
        nonlocal waits
        try:
            await outbound_send.send(await hub.jobs.wait_idle(job))
        finally:
            waits -= 1

    async def visible_sessions() -> list[m.SessionInfo]:
        ended = await hub.store_call(lambda: hub.store.ended_sessions(SESSIONS_LISTED, uid=reader_uid))
        return ended + access.visible([s.info() for s in hub.live.values()])

    def page_of(query: m.QueryFindings) -> FindingsPage:
        """One page of the findings the query names that this client may read (on the store thread)."""
        count = min(query.limit, FINDINGS_PAGE_COUNT) if query.limit > 0 else FINDINGS_PAGE_COUNT
        return hub.store.findings_page(
            job=query.job, session=query.session, uid=reader_uid, after=query.after, limit=count
        )

    async def allowed(*, job: str = "", session: int = 0) -> bool:
        """Whether this client may read what it names; if not, it is refused (and the connection ends)."""
        if access.admin or not (job or session):
            return True
        owners = await hub.store_call(lambda: hub.store.owners(job=job, session=session))
        live = hub.live.values()
        owners |= {s.peer.uid for s in live if (not job or s.job == job) and (not session or s.id == session)}
        why = access.refusal_by_owners(owners, job=job, session=session)
        if why:
            await hub.refuse(stream, "permission_denied", why, connection="control", uid=access.uid)
        return not why

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(write_out)
            try:
                while True:
                    message = await stream.receive()
                    # Frames already buffered arrive without a wait: let signals and other connections in.
                    await anyio.lowlevel.checkpoint()
                    match message:
                        case m.Close():
                            break
                        case m.WaitJob() | m.Watch() | m.JobStart() if (
                            waits + len(watching) + len(registered) >= hub.limits.max_control_requests
                        ):
                            limit = hub.limits.max_control_requests
                            await hub.refuse(
                                stream, "request_limit", f"this connection holds its limit of {limit} requests "
                                "(wait_job, watch, job_start)", connection="control", uid=access.uid,
                            )  # fmt: skip
                            return
                        case m.JobStart(job=job, config=config):
                            hub.jobs.register(job, config)
                            registered.append(job)
                        case m.Watch(job=job, record=record):
                            if not await allowed(job=job):
                                return
                            hub.jobs.watch(job, outbound_send, record=record)
                            watching.append(job)
                        case m.WaitJob(job=job):
                            waits += 1
                            tg.start_soon(wait_job, job)
                        case m.QueryFindings(job=job, session=session):
                            if not await allowed(job=job, session=session):
                                return
                            page = await hub.store_call(page_of, message)
                            await outbound_send.send(m.Findings(findings=page.findings, next=page.next))
                        case m.QuerySessions():
                            await outbound_send.send(m.Sessions(sessions=await visible_sessions()))
                        case m.QueryJobs():
                            jobs = summarize(await visible_sessions(), now=time.time(), grace=hub.limits.job_grace)
                            await outbound_send.send(m.Jobs(jobs=jobs))
            except RemoteProtocolError as exc:
                await hub.refuse(stream, exc.reason, str(exc), connection="control")
            except (PeerClosed, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                pass
            finally:
                for job in watching:
                    hub.jobs.unwatch(job, outbound_send)
                for job in registered:
                    hub.jobs.unregister(job)
                tg.cancel_scope.cancel()
    finally:
        outbound_send.close()
