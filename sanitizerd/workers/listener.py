"""The listener of ``sanitizerd serve --workers N``: the one process that owns the socket, signals, systemd's
notifications and watchdog, retention and /metrics; it shakes hands and hands each connection to a worker.

A producer goes to the worker that owns its job (``routing.worker_for``) right after its hello. A control
connection is welcomed and served here while it asks only what the store and the workers' live lists answer
(findings, sessions, jobs); at its first request about a job (job_start, watch, wait_job, compat_listen) it goes,
with that request, to the job's worker, which serves it from then on.
"""

from __future__ import annotations

import dataclasses
import signal
import socket
from collections.abc import Awaitable, Callable

import anyio
import anyio.abc
import anyio.lowlevel
import structlog

from sanitizerd.daemon import ABANDON_MARGIN, Daemon, DaemonSettings, HeldCompatSockets
from sanitizerd.findings.store import Store
from sanitizerd.metrics import Metrics
from sanitizerd.server.compat_socket import CompatSockets
from sanitizerd.server.doors import Doors, receive_hello, welcome_control
from sanitizerd.sessions.control import serve_control
from sanitizerd.sessions.hub import Hub, Limits, LiveView
from sanitizerd.sessions.jobs import JobKey, job_key
from sanitizerd.sessions.session import Peer
from sanitizerd.sessions.transport import MessageStream
from sanitizerd.systemd import Notifier
from sanitizerd.workers.channel import Channel, OpenCompat
from sanitizerd.workers.metrics import MergedMetrics
from sanitizerd.workers.pool import Pool
from sanitizerd.workers.rawstream import RawSocketStream
from sanitizerd.workers.routing import worker_for
from sanitizerd_protocol import messages as m

log = structlog.get_logger("sanitizerd.listener")
STOP_MARGIN = 5.0  # seconds past the drain timeout a worker may take to record its sessions' end and exit


def listener_daemon(settings: DaemonSettings) -> Daemon:
    """The process of ``serve --workers N``: the socket clients find, and its sessions served by N workers."""
    metrics = Metrics()
    return Daemon(settings, Listener(settings, metrics), metrics=metrics)


class Listener:
    """The listener's part of a daemon (``daemon.Serving``): its sessions are served by worker processes, each of
    the jobs it owns, and this process only hands connections on."""

    stop_margin = STOP_MARGIN + ABANDON_MARGIN  # the workers' drain, the wait for them (killed at STOP_MARGIN), its end

    def __init__(self, settings: DaemonSettings, metrics: Metrics) -> None:
        self.settings = settings
        self.handing: Handing | None = None  # once the hub is open
        self.configured = settings.limits  # as configured (start, SIGHUP): what a worker started now is given
        self.pool = Pool(settings, metrics, lambda: self.configured)
        self.merged = MergedMetrics(metrics.registry, self.pool)
        metrics.exposed = self.merged.registry  # /metrics: this process's and every worker's, summed

    def share(self, limits: Limits) -> Limits:
        """The listener runs no detector: the host's race-check memory is the workers' (shared out among them)."""
        self.configured = limits
        return dataclasses.replace(limits, race_memory=0)

    def close_abandoned(self, store: Store) -> int:
        return store.close_abandoned()  # at the daemon's start, before any worker: every job's

    def reception(self, doors: Doors) -> Handing:
        self.handing = Handing(self.pool, self.settings.workers, doors.hub)
        return self.handing

    async def live_elsewhere(self) -> LiveView:
        return await self.pool.live()

    async def handoff(
        self, stream: MessageStream, request: m.Message, key: JobKey, written: Callable[[], Awaitable[object]]
    ) -> None:
        assert self.handing is not None
        await self.handing.hand(stream, key, welcomed=True, request=request, written=written)

    async def start(self, tg: anyio.abc.TaskGroup, compat: HeldCompatSockets) -> None:
        assert isinstance(compat, CompatSockets)  # the listener's front holds the sockets themselves
        self.merged.token = anyio.lowlevel.current_token()
        await tg.start(self.pool.run, ListenerCompat(compat, tg))

    def sessions(self, hub: Hub) -> int:
        return self.pool.producers()

    def busy(self, hub: Hub) -> str:
        """A worker whose detector threads were saturated at its last answer to the watchdog's ping (every few
        seconds): the jobs it owns wait for a thread (the listener runs no detector of its own). Else a worker that
        (re)starts: the jobs it owns wait for it."""
        for worker in list(self.pool.workers):
            if worker.saturated:
                return f"worker {worker.index} {worker.saturated}"
        down = [worker.index for worker in self.pool.workers if not worker.up.is_set()]
        return f"worker {down[0]} is starting" if down else ""

    async def drain(self, hub: Hub, notifier: Notifier) -> None:
        """The workers drain their sessions (each under the drain timeout) and stop; then this process does."""
        deadline = hub.limits.drain_timeout
        log.info("draining the workers", workers=len(self.pool.workers), deadline_s=deadline)
        notifier.status("draining the workers")
        await self.pool.stop(deadline + STOP_MARGIN)

    def reloaded(self) -> None:
        self.pool.signal_all(signal.SIGHUP)  # each worker reads the file again itself


class ListenerCompat:
    """The listener's msSanitizer-form sockets as its workers ask for them (``pool.WorkersCompat``): opened for a
    worker's control connection (the worker's channel holds it), living as long as the listener serves."""

    def __init__(self, sockets: CompatSockets, tg: anyio.abc.TaskGroup) -> None:
        self.sockets = sockets
        self.tg = tg

    async def open(self, request: OpenCompat, holder: Channel) -> m.CompatListening:
        peer = Peer(pid=request.pid, uid=request.uid)
        return await self.sockets.listen(request.job, request.layout, peer, self.tg, holder=holder)

    def close(self, name: str) -> None:
        self.sockets.close(name)

    def orphan(self, holder: Channel) -> None:
        self.sockets.orphan(holder)


class Handing:
    """The listener's reception (``server.doors.Reception``): it shakes hands and hands each connection, with
    every byte it read of it, to the worker that owns its job."""

    def __init__(self, pool: Pool, workers: int, hub: Hub) -> None:
        self.pool = pool
        self.workers = workers
        self.hub = hub

    async def stream(self, conn: socket.socket) -> anyio.abc.ByteStream:
        """A connection read from its own socket: nothing read ahead into a buffer a worker would not get."""
        return RawSocketStream(conn)

    async def converse(self, stream: MessageStream, peer: Peer) -> None:
        hub = self.hub
        hello = await receive_hello(hub, stream)
        if hello is None:
            return
        stream.hello = hello
        if hello.role == "control":
            await welcome_control(hub, stream)
            await serve_control(hub, stream, peer)
        else:
            refused = await self._session_limit(hub, peer.uid)
            if refused:
                await hub.refuse(stream, "session_limit", refused)
                return
            await self.hand(stream, await self._job_of(hub, hello, peer), welcomed=False, producer_uid=peer.uid)

    async def _session_limit(self, hub: Hub, uid: int) -> str:
        """Why a new producer of ``uid`` would pass a session limit over all workers ("" when it would not). The
        connections handed and not yet reported ended are counted first; only when they reach a limit are the
        workers asked which sessions are live (a session that just ended may not have been reported yet)."""
        limits = hub.limits
        if self.pool.producers() < limits.max_sessions and self.pool.producers(uid) < limits.max_sessions_per_uid:
            return ""
        live = (await self.pool.live()).sessions
        if len(live) >= limits.max_sessions:
            return f"the daemon serves its limit of {limits.max_sessions} sessions"
        if sum(1 for info in live if info.uid == uid) >= limits.max_sessions_per_uid:
            return f"uid {uid} has its limit of {limits.max_sessions_per_uid} live sessions"
        return ""

    @staticmethod
    async def _job_of(hub: Hub, hello: m.Hello, peer: Peer) -> JobKey:
        """The job whose worker serves a producer: a resume goes where the session it names was served (that
        worker tells the client whether it may resume it), whatever job its hello names."""
        if hello.resume:
            stored = await hub.store_call(hub.store.session, hello.resume)
            if stored is not None:
                return job_key(stored.job, stored.uid)
        return job_key(hello.job, peer.uid)

    async def hand(
        self,
        stream: MessageStream,
        key: JobKey,
        *,
        welcomed: bool,
        request: m.Message | None = None,
        producer_uid: int | None = None,
        written: Callable[[], Awaitable[object]] | None = None,
    ) -> None:
        """The connection to the job's worker, with every byte read from it that it has not answered: its hello,
        the request that made it go (if any), and whatever followed them."""
        hub = self.hub
        assert stream.hello is not None
        index = worker_for(key, self.workers)
        # The worker's turn is taken before anything else is awaited: connections of one job reach its worker in
        # the order their requests were read here (a job_start before the sessions that follow it).
        async with self.pool.workers[index].order:
            if written is not None:
                await written()
            connection = stream.connection
            data = bytearray(connection.frame(stream.hello))
            if request is not None:
                data += connection.frame(request)
            data += connection.take_unparsed()
            raw = stream.stream
            assert isinstance(raw, RawSocketStream)
            await self.pool.hand(
                index, raw.sock.fileno(), bytes(data), welcomed=welcomed, wait=hub.limits.drain_timeout,
                producer_uid=producer_uid,
            )  # fmt: skip

    async def compat(self, conn: socket.socket, peer: Peer, job: str, layout: str) -> None:
        """A connection accepted on a job's msSanitizer-form socket (held here), handed to the job's worker as the
        producer it is: while that worker restarts it waits here (as a resuming client's does), so that hooks that
        connect again after a worker died reach the new one."""
        hub = self.hub
        with conn:
            refused = await self._session_limit(hub, peer.uid)
            if refused:
                hub.note_refusal("session_limit", refused, what="compat connection refused", job=job, uid=peer.uid)
                return
            index = worker_for(job_key(job, peer.uid), self.workers)
            async with self.pool.workers[index].order:
                await self.pool.hand(
                    index, conn.fileno(), b"", welcomed=False, wait=hub.limits.drain_timeout,
                    producer_uid=peer.uid, compat=(job, layout),
                )  # fmt: skip
