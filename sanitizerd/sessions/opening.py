"""Opening a producer session: the session limits, the job's admission, a resume's checks, the store's record and
the Session itself, in that order (every check before any change), then its pump until it ends.

A refusal at any step is an error frame naming the reason, and leaves nothing behind: the job claimed for the
session is released, no session is recorded."""

from __future__ import annotations

import structlog

from sanitizerd import __version__
from sanitizerd.findings.store import StoreUnavailable
from sanitizerd.sessions.access import Access
from sanitizerd.sessions.hub import Hub
from sanitizerd.sessions.jobs import job_key
from sanitizerd.sessions.producer import serve_producer
from sanitizerd.sessions.session import Peer, Session
from sanitizerd.sessions.transport import MessageStream
from sanitizerd_protocol import messages as m

log = structlog.get_logger("sanitizerd.session")


async def open_producer(hub: Hub, stream: MessageStream, hello: m.Hello, peer: Peer) -> None:
    """Open the session ``hello`` asks for (or refuse it by name) and serve it until it ends."""
    if len(hub.live) >= hub.limits.max_sessions:
        limit = hub.limits.max_sessions
        await hub.refuse(stream, "session_limit", f"the daemon serves its limit of {limit} sessions")
        return
    mine = sum(1 for s in hub.live.values() if s.peer.uid == peer.uid)
    if mine >= hub.limits.max_sessions_per_uid:
        limit = hub.limits.max_sessions_per_uid
        await hub.refuse(stream, "session_limit", f"uid {peer.uid} has its limit of {limit} live sessions")
        return
    # Before anything else changes (the store, the job's counters, its recorders): may this uid join the job?
    # Admitting claims the job for the session until it starts (or is released below).
    key = job_key(hello.job, peer.uid)
    refused = hub.jobs.admit(key, peer.uid, lambda: Access.of(peer, hub.limits.admin_gids).admin)
    if refused is not None:
        await hub.refuse(stream, refused.reason, refused.message, job=hello.job)
        return
    started = False
    try:
        config = hub.jobs.config_for(key, hello)
        already: list[bytes] = []
        if hello.resume:
            refusal = await _resumable(hub, hello, peer)
            if refusal:
                await hub.refuse(stream, refusal[0], refusal[1], session=hello.resume)
                return
        try:
            if hello.resume:
                ident = hello.resume
                already = await hub.store_call(hub.store.finding_keys, ident)
                await hub.store_call(hub.store.reopen_session, ident)
                hub.metrics.sessions_resumed.inc()
            else:
                ident = await hub.store_call(lambda: hub.store.open_session(hello.job, pid=hello.pid, uid=peer.uid))
        except StoreUnavailable as exc:  # a clear refusal, not a bare EOF
            hub.metrics.store_errors.inc()
            await hub.refuse(stream, "store_unavailable", f"the daemon cannot record a session now: {exc}")
            return
        session = Session(
            ident, hello, config, peer, ipc=hub.jobs.ipc_table(key), max_race_events=hub.limits.max_race_events,
            race_memory=hub.race_memory.account(), max_live_allocations=hub.limits.max_live_allocations,
            host_suppressions=hub.suppressions, cross_npu=hub.jobs.cross_npu(key),
            on_cross_npu_cut=lambda reason, count: hub.metrics.cross_npu_cut.labels(reason).inc(count),
        )  # fmt: skip
        session.already_stored.update(already)
        hub.live[ident] = session
        hub.jobs.session_started(key, ident)
        started = True
    finally:
        if not started:
            hub.jobs.release(key)
    hub.jobs.record(key, ident, hello)
    hub.metrics.sessions_started.inc()
    hub.metrics.sessions_live.inc()
    try:
        with structlog.contextvars.bound_contextvars(session=ident, job=hello.job, pid=hello.pid):
            log.info("session started", device=hello.device, rank=hello.rank, tools=config.tools)
            await stream.send(m.Welcome(session=ident, config=config, server=__version__))
            await serve_producer(hub, stream, session)
    finally:
        hub.metrics.sessions_live.dec()
        # Its detectors have stopped (their threads are waited for, even when cut off): nothing is held now.
        session.context.race_memory.close()
        if hub.live.pop(ident, None) is not None:  # ended abnormally before its pump finalized it
            hub.jobs.session_ended(session.info(state="ended"))


async def _resumable(hub: Hub, hello: m.Hello, peer: Peer) -> tuple[str, str] | None:
    """Why a client may not resume the session it names (reason, message), or None. Only looks: the caller
    reopens the session once every check has passed. Whose it is comes first, and another uid's session answers
    as one that does not exist, so another uid learns nothing (not even whether it exists or is live); session
    ids are sequential, and this check, not their secrecy, is what keeps them from being used by another user."""
    stored = await hub.store_call(hub.store.session, hello.resume)
    live = hub.live.get(hello.resume)
    owner = live.peer.uid if live is not None else (stored.uid if stored is not None else None)
    if owner is None or (owner != peer.uid and peer.uid != 0):
        return "bad_reference", f"there is no session {hello.resume} to resume"
    if live is not None:
        return "bad_reference", f"session {hello.resume} is still live"
    return None
