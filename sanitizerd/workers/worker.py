"""A worker process (``python -m sanitizerd.workers.worker FD INDEX``, started by the listener): today's Hub,
session pumps and detectors, fed connections over its channel instead of accepting them.

It ends with the listener (PR_SET_PDEATHSIG): a killed daemon takes its workers with it, and their clients resume
on the next one, as they did when the daemon was one process.
"""

from __future__ import annotations

import base64
import ctypes
import dataclasses
import itertools
import os
import pickle
import signal
import socket
import sys

import anyio
import anyio.abc
import structlog
from anyio.abc import TaskStatus
from prometheus_client import generate_latest

from sanitizerd import __version__, allocator, fds, logs
from sanitizerd.compat_socket import CompatSockets
from sanitizerd.daemon import Daemon, DaemonSettings, _peer_credentials, open_store
from sanitizerd.findings.store import Store
from sanitizerd.protocol import Connection, Role
from sanitizerd.protocol import messages as m
from sanitizerd.sessions.control import serve_control
from sanitizerd.sessions.hub import Limits
from sanitizerd.sessions.jobs import job_key
from sanitizerd.sessions.transport import MessageStream
from sanitizerd.systemd import Notifier
from sanitizerd.workers.channel import (
    AskLive,
    AskMetrics,
    Channel,
    ChannelClosed,
    ClaimCompat,
    CompatClaimed,
    CompatReleased,
    Ended,
    Handoff,
    Live,
    MetricsText,
    Ping,
    Pong,
    Ready,
)
from sanitizerd.workers.pool import ASK_TIMEOUT, SETTINGS_ENV
from sanitizerd.workers.routing import worker_for

log = structlog.get_logger("sanitizerd.worker")
PR_SET_PDEATHSIG = 1


class WorkerDaemon(Daemon):
    def __init__(self, settings: DaemonSettings, index: int, channel: Channel) -> None:
        super().__init__(settings)
        self.index = index
        self.channel = channel
        self._asks = itertools.count(1)
        self._answers: dict[int, tuple[anyio.Event, list[m.SessionInfo]]] = {}
        self._claims: dict[int, tuple[anyio.Event, list[str]]] = {}
        self._tg: anyio.abc.TaskGroup | None = None

    def _fitted(self, limits: Limits) -> Limits:
        """The host's race-check memory is shared out: each worker holds its part (at start and at each reload)."""
        fitted = super()._fitted(limits)
        return dataclasses.replace(fitted, race_memory=fitted.race_memory // self.settings.workers)

    def _close_abandoned(self, store: Store) -> int:
        """The sessions of this worker's jobs a worker that died left open (at the daemon's start: all of its jobs'
        that a daemon that died left open). The other workers' are theirs, live or not."""
        count = self.settings.workers
        return store.close_abandoned(mine=lambda job, uid: worker_for(job_key(job, uid), count) == self.index)

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        settings = self.settings
        self.nofile = fds.raise_nofile()
        limits = self._fitted(settings.limits)
        store = open_store(settings.state_dir, max_bytes=limits.max_store_size, url=settings.store)
        hub = self._open_hub(store, limits)
        hub.live_elsewhere = self._live_elsewhere
        ready = anyio.Event()
        self._instrument(hub, store, ready)
        self.metrics.store_bytes.set_function(lambda: 0.0)  # the listener reports the store: one file, counted once
        notifier = Notifier({})  # the listener speaks to systemd
        log.info("worker serving", pid=os.getpid(), version=__version__)
        try:
            async with anyio.create_task_group() as tg:
                self._accepting = accepting = anyio.CancelScope()
                await tg.start(self._watch_signals, accepting, tg.cancel_scope, notifier)
                tg.start_soon(self._heartbeat)
                hub.compat_sockets = compat = CompatSockets(hub, tg, self._serve_compat, self.connections)
                compat.claim, compat.unclaim = self._claim_compat, self._unclaim_compat
                self._tg = tg
                task_status.started()
                ready.set()
                await self._answer(Ready())  # watching signals and taking connections: the listener may send both
                with accepting:
                    await self._receive(tg)
                compat.stop()
                await self._drain(hub, notifier)
                tg.cancel_scope.cancel()
        finally:
            store.close()
            log.info("worker stopped")

    async def _receive(self, tg: anyio.abc.TaskGroup) -> None:
        """Connections the listener hands over, and its questions, until it is gone (or this worker drains)."""
        while True:
            try:
                packet, conn, data = await self.channel.receive()
            except ChannelClosed:
                log.warning("the listener is gone; draining")
                return
            match packet:
                case Handoff(welcomed=True) if conn is not None:
                    # Its first request (a job_start, a watch) takes effect before any connection handed after
                    # it is served: a job's sessions see the configuration and watchers registered before them.
                    await tg.start(self._serve_handed, conn, data, True)
                case Handoff() if conn is not None:
                    tg.start_soon(self._serve_handed, conn, data, False)
                case AskLive(ask=ask):
                    assert self.hub is not None
                    tg.start_soon(self._answer, Live(ask=ask, sessions=[s.info() for s in self.hub.live.values()]))
                case AskMetrics(ask=ask):
                    tg.start_soon(self._answer, MetricsText(ask=ask, text=generate_latest(self.metrics.registry)))
                case Ping():
                    tg.start_soon(self._answer, Pong(saturated=self._saturated()))
                case CompatClaimed(ask=ask, refused=refused) if ask in self._claims:
                    done, answer = self._claims[ask]
                    answer.append(refused)
                    done.set()
                case CompatClaimed(uid=uid, refused=""):  # granted after its asker gave up: given back
                    tg.start_soon(self._answer, CompatReleased(uid=uid))
                case Live(ask=ask, sessions=sessions) if ask in self._answers:
                    done, answer = self._answers[ask]
                    answer.extend(sessions)
                    done.set()
                case _:
                    if conn is not None:
                        conn.close()

    async def _claim_compat(self, uid: int) -> str:
        """The listener's word on one more msSanitizer-form socket for ``uid`` ("" granted)."""
        ask = next(self._asks)
        done, answer = anyio.Event(), []
        self._claims[ask] = (done, answer)
        try:
            await self.channel.send(ClaimCompat(ask=ask, uid=uid))
            with anyio.move_on_after(ASK_TIMEOUT):
                await done.wait()
        except (ChannelClosed, OSError):
            pass
        finally:
            self._claims.pop(ask, None)
        return answer[0] if answer else "the listener did not answer: no socket is opened without its count"

    def _unclaim_compat(self, uid: int) -> None:
        if self._tg is not None:
            self._tg.start_soon(self._answer, CompatReleased(uid=uid))

    async def _answer(self, packet: Live | MetricsText | Ended | Ready | CompatReleased | Pong) -> None:
        try:
            await self.channel.send(packet)
        except (ChannelClosed, OSError):
            pass

    async def _live_elsewhere(self) -> list[m.SessionInfo]:
        """The other workers' live sessions, as the listener gathers them (none if it does not answer in time)."""
        ask = next(self._asks)
        done, answer = anyio.Event(), []
        self._answers[ask] = (done, answer)
        try:
            await self.channel.send(AskLive(ask=ask))
            with anyio.move_on_after(ASK_TIMEOUT * 2):
                await done.wait()
        except (ChannelClosed, OSError):
            pass
        finally:
            self._answers.pop(ask, None)
        return answer

    async def _serve_handed(
        self,
        conn: socket.socket,
        data: bytes,
        welcomed: bool,
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """A connection the listener read the hello of: rebuilt from the bytes it read (the hello first), then
        served as if accepted here. ``welcomed``: a control connection the listener already answered."""
        hub = self.hub
        assert hub is not None
        started = False

        def handled() -> None:
            nonlocal started
            if not started:
                started = True
                task_status.started()

        try:
            raw = await anyio.abc.UNIXSocketStream.from_socket(conn)
        except OSError:
            conn.close()
            handled()
            return
        peer = _peer_credentials(raw)
        connection = Connection(Role.SERVER, max_frame_size=hub.limits.max_frame_size)
        if data:
            connection.receive_data(data)

        async def converse(stream: MessageStream) -> None:
            stream.bytes_received += len(data)
            if not welcomed:
                await self._converse(hub, stream, peer)
                return
            await stream.receive()  # the hello the listener answered
            stream.connection.send(m.Welcome(session=0, config=hub.default_config, server=__version__))  # its state
            stream.frame_timeout = hub.limits.frame_timeout
            await serve_control(hub, stream, peer, handled=handled)

        try:
            await self._guarded(raw, peer, connection, converse)
        finally:
            handled()
            if not welcomed:  # the listener counts the producer connections it handed
                with anyio.CancelScope(shield=True):
                    await self._answer(Ended(uid=peer.uid))


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def main(argv: list[str]) -> int:
    fd, index = int(argv[0]), int(argv[1])
    _die_with_parent()
    parent = os.getppid()
    if parent == 1:  # the listener died before the line above took effect
        return 1
    settings: DaemonSettings = pickle.loads(base64.b64decode(os.environ.pop(SETTINGS_ENV)))
    logs.configure(settings.log_level)
    structlog.contextvars.bind_contextvars(worker=index)
    allocator.tune()
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # until the loop watches signals: a reload is the listener's word
    channel = Channel(socket.socket(fileno=fd))
    try:
        anyio.run(WorkerDaemon(settings, index, channel).serve, backend="asyncio", backend_options={"use_uvloop": True})
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
