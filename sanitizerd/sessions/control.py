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
from sanitizerd.sessions.jobs import WATCH_MESSAGES, JobKey, Watcher, job_key
from sanitizerd.sessions.jobview import summarize
from sanitizerd.sessions.session import Peer
from sanitizerd.sessions.transport import MessageStream, PeerClosed

log = structlog.get_logger("sanitizerd.control")


async def serve_control(hub: Hub, stream: MessageStream, peer: Peer) -> None:
    access = Access.of(peer, hub.limits.admin_gids)
    outbound_send, outbound_receive = anyio.create_memory_object_stream[m.Message](WATCH_MESSAGES)
    # What the jobs this connection watches publish goes to the same outbox, without waiting for it: a watcher
    # that falls behind is dropped (and this connection ended), never a stall for the job's sessions.
    watcher = Watcher(outbound_send)
    registered: set[JobKey] = set()
    watching: set[JobKey] = set()

    async def write_out() -> None:
        async with outbound_receive:
            async for message in outbound_receive:
                await stream.send(message)
                watcher.delivered(message)

    async def end_when_dropped(scope: anyio.CancelScope) -> None:
        await watcher.dropped.wait()
        scope.cancel()

    async def wait_job(key: JobKey) -> None:
        await outbound_send.send(await hub.jobs.wait_idle(key))

    async def may_use(key: JobKey) -> bool:
        """Whether this client may register, watch or wait on the job; if not, it is refused (and the connection
        ends) before anything changed."""
        refused = hub.jobs.refusal(key, access.uid, lambda: access.admin)
        if refused is not None:
            await hub.refuse(stream, refused.reason, refused.message, connection="control", uid=access.uid)
        return refused is None

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
            tg.start_soon(end_when_dropped, tg.cancel_scope)
            try:
                while True:
                    message = await stream.receive()
                    match message:
                        case m.Close():
                            break
                        case m.JobStart(job=job, config=config):
                            key = job_key(job, access.uid)
                            if not await may_use(key):
                                return
                            # A connection's second job_start of a job changes its configuration only.
                            hub.jobs.register(key, config, access.uid, again=key in registered)
                            registered.add(key)
                        case m.Watch(job=job, record=record):
                            key = job_key(job, access.uid)
                            # The store's ended sessions first: the in-memory check and the watch that claims the
                            # job happen with no wait between them, so no other uid claims the job in between.
                            if not await allowed(await sessions_to_check(), job=job):
                                return
                            if not await may_use(key):
                                return
                            hub.jobs.watch(key, watcher, access.uid, admin=access.admin, record=record)
                            watching.add(key)
                        case m.WaitJob(job=job):
                            key = job_key(job, access.uid)
                            if not await may_use(key):
                                return
                            tg.start_soon(wait_job, key)
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
