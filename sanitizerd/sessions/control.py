"""A control connection (the CLI): register a job, watch its findings, query findings and sessions.

Everything this connection sends goes through one outbound stream and one writer task, so pushed findings
and replies keep their order: a ``job_idle`` always follows the findings published before it.
"""

from __future__ import annotations

import time

import anyio
import structlog

from sanitizerd.protocol import RemoteProtocolError
from sanitizerd.protocol import messages as m
from sanitizerd.sessions.access import Access
from sanitizerd.sessions.hub import Hub
from sanitizerd.sessions.jobview import summarize
from sanitizerd.sessions.session import Peer
from sanitizerd.sessions.transport import MessageStream, PeerClosed

log = structlog.get_logger("sanitizerd.control")


async def serve_control(hub: Hub, stream: MessageStream, peer: Peer) -> None:
    access = Access.of(peer, hub.limits.admin_gids)
    outbound_send, outbound_receive = anyio.create_memory_object_stream[m.Message](16)
    registered: list[str] = []
    watching: list[str] = []

    async def write_out() -> None:
        async with outbound_receive:
            async for message in outbound_receive:
                await stream.send(message)

    async def wait_job(job: str) -> None:
        await outbound_send.send(await hub.jobs.wait_idle(job))

    async def every_session() -> list[m.SessionInfo]:
        ended = await hub.store_call(hub.store.ended_sessions)
        return ended + [s.info() for s in hub.live.values()]

    async def allowed(sessions: list[m.SessionInfo], **named: object) -> bool:
        """Whether this client may read what it names; if not, it is refused (and the connection ends)."""
        why = access.refusal(sessions, **named)  # type: ignore[arg-type]
        if why:
            await hub.refuse(stream, "permission_denied", why, connection="control", uid=access.uid)
        return not why

    async def sessions_to_check() -> list[m.SessionInfo]:
        """Every session, for a client whose reads are checked; none to read for an admin, who may read all."""
        return [] if access.admin else await every_session()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(write_out)
            try:
                while True:
                    message = await stream.receive()
                    match message:
                        case m.Close():
                            break
                        case m.JobStart(job=job, config=config):
                            hub.jobs.register(job, config)
                            registered.append(job)
                        case m.Watch(job=job, record=record):
                            if not await allowed(await sessions_to_check(), job=job):
                                return
                            hub.jobs.watch(job, outbound_send, record=record)
                            watching.append(job)
                        case m.WaitJob(job=job):
                            tg.start_soon(wait_job, job)
                        case m.QueryFindings(job=job, session=session):
                            every = await sessions_to_check()
                            if not await allowed(every, job=job, session=session):
                                return
                            found = await hub.store_call(lambda: hub.store.findings(job=job, session=session))
                            if not access.admin:
                                mine = {s.session for s in access.visible(every)}
                                found = [f for f in found if f.session in mine]
                            await outbound_send.send(m.Findings(findings=found))
                        case m.QuerySessions():
                            await outbound_send.send(m.Sessions(sessions=access.visible(await every_session())))
                        case m.QueryJobs():
                            mine = access.visible(await every_session())
                            jobs = summarize(mine, now=time.time(), grace=hub.limits.job_grace)
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
