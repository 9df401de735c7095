"""A worker process (``python -m sanitizerd.workers.worker FD INDEX``, started by the listener): today's Hub,
session pumps and detectors, fed connections over its channel instead of accepting them.

It ends with the listener (PR_SET_PDEATHSIG): a killed daemon takes its workers with it, and their clients resume
on the next one, as they did when the daemon was one process.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import signal
import socket
import sys

import anyio
import anyio.abc
import structlog
from anyio.abc import TaskStatus
from prometheus_client import generate_latest

from sanitizerd import __version__, allocator, logs
from sanitizerd.daemon import Daemon, DaemonSettings, OwnSessions
from sanitizerd.server.accept import peer_credentials
from sanitizerd.server.compat_socket import compat_layouts
from sanitizerd.sessions.control import serve_control
from sanitizerd.sessions.hub import Hub, LiveView
from sanitizerd.sessions.jobs import job_key
from sanitizerd.sessions.session import Peer
from sanitizerd.sessions.transport import MessageStream
from sanitizerd.systemd import Notifier
from sanitizerd.workers import channel as packets
from sanitizerd.workers.channel import Channel, ChannelClosed
from sanitizerd.workers.pool import ASK_TIMEOUT, SETTINGS_ENV, decode_settings
from sanitizerd.workers.routing import worker_for
from sanitizerd_protocol import messages as m

log = structlog.get_logger("sanitizerd.worker")
PR_SET_PDEATHSIG = 1


def worker_daemon(settings: DaemonSettings, index: int, channel: Channel) -> Daemon:
    """Worker ``index``'s process: the connections the listener hands it over ``channel``, served here; the
    sessions a dead worker left open of its own jobs only, and its part of the host's race-check memory."""
    count = settings.workers
    front = ChannelFront(channel)
    serving = OwnSessions(
        live_elsewhere=front.live_elsewhere,
        parts=count,
        mine=lambda job, uid: worker_for(job_key(job, uid), count) == index,
    )
    return Daemon(settings, serving, front)


class ChannelFront:
    """A worker's front (``daemon.Front``): the listener's channel, which hands it connections and asks it what only
    it knows. The listener speaks for the daemon to the host (systemd, /metrics, the store's upkeep, the socket) and
    holds the msSanitizer-form sockets; this worker asks it for one."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.notifier = Notifier({})  # the listener speaks to systemd
        self._asks = itertools.count(1)
        self._answers: dict[int, tuple[anyio.Event, list[LiveView]]] = {}
        self._opened: dict[int, tuple[anyio.Event, list[m.CompatListening]]] = {}

    def claim(self) -> None:
        pass  # the listener claimed the socket

    def compat_sockets(self, hub: Hub, sessions: anyio.abc.TaskGroup, daemon: Daemon) -> RemoteCompatSockets:
        return RemoteCompatSockets(hub, self)

    async def open(self, daemon: Daemon) -> None:
        daemon.metrics.store_bytes.set_function(lambda: 0.0)  # the listener reports the store: one file, counted once
        log.info("worker serving", pid=os.getpid(), version=__version__)

    def keep(self, tg: anyio.abc.TaskGroup, hub: Hub) -> None:
        pass  # the listener keeps the store

    async def found(self, tg: anyio.abc.TaskGroup) -> None:
        await self._answer(packets.Ready())  # watching signals and taking connections: the listener may send both

    async def aclose(self) -> None:
        pass  # the listener stops handing connections as it drains

    def remove(self) -> None:
        pass  # the listener's socket file is the listener's

    async def take(self, tg: anyio.abc.TaskGroup, daemon: Daemon) -> None:
        """Connections the listener hands over, and its questions, until it is gone (or this worker drains)."""
        hub = daemon.hub
        assert hub is not None
        while True:
            try:
                packet, conn, data = await self.channel.receive()
            except ChannelClosed:
                log.warning("the listener is gone; draining")
                return
            match packet:
                case packets.Handoff(welcomed=True) if conn is not None:
                    # Its first request (a job_start, a watch) takes effect before any connection handed after
                    # it is served: a job's sessions see the configuration and watchers registered before them.
                    await tg.start(self._serve_handed, daemon, conn, data, True)
                case packets.Handoff(compat_job=job, compat_layout=layout) if conn is not None and job:
                    tg.start_soon(self._serve_handed_compat, daemon, conn, job, layout)
                case packets.Handoff() if conn is not None:
                    tg.start_soon(self._serve_handed, daemon, conn, data, False)
                case packets.AskLive(ask=ask):
                    here = hub.live_here()
                    tg.start_soon(
                        self._answer, packets.Live(ask=ask, sessions=here.sessions, registered=here.registered)
                    )
                case packets.AskMetrics(ask=ask):
                    tg.start_soon(
                        self._answer, packets.MetricsText(ask=ask, text=generate_latest(daemon.metrics.registry))
                    )
                case packets.Ping():
                    tg.start_soon(self._answer, packets.Pong(saturated=daemon.serving.busy(hub)))
                case packets.CompatOpened(ask=ask, answer=opened) if ask in self._opened:
                    done, answers = self._opened[ask]
                    answers.append(opened)
                    done.set()
                case packets.CompatOpened(answer=opened) if opened.name:  # opened after its asker gave up: closed again
                    tg.start_soon(self._answer, packets.CloseCompat(name=opened.name))
                case packets.Live(ask=ask, sessions=sessions, registered=registered) if ask in self._answers:
                    done, answer = self._answers[ask]
                    answer.append(LiveView(sessions, [job_key(*key) for key in registered]))
                    done.set()
                case _:
                    if conn is not None:
                        conn.close()

    async def open_compat(self, job: str, layout: str, peer: Peer) -> m.CompatListening | None:
        """The listener's answer to a control connection's compat_listen: it opens the socket (or says why not);
        None when it does not answer."""
        ask = next(self._asks)
        done, answers = anyio.Event(), []
        self._opened[ask] = (done, answers)
        try:
            await self.channel.send(packets.OpenCompat(ask=ask, job=job, layout=layout, uid=peer.uid, pid=peer.pid))
            with anyio.move_on_after(ASK_TIMEOUT):
                await done.wait()
        except (ChannelClosed, OSError):
            pass
        finally:
            self._opened.pop(ask, None)
        return answers[0] if answers else None

    async def close_compat(self, name: str) -> None:
        await self._answer(packets.CloseCompat(name=name))

    async def _answer(self, packet: packets.Packet) -> None:
        try:
            await self.channel.send(packet)
        except (ChannelClosed, OSError):
            pass

    async def live_elsewhere(self) -> LiveView:
        """The other workers' live sessions and registered jobs, as the listener gathers them (none if it does not
        answer in time)."""
        ask = next(self._asks)
        done, answer = anyio.Event(), list[LiveView]()
        self._answers[ask] = (done, answer)
        try:
            await self.channel.send(packets.AskLive(ask=ask))
            with anyio.move_on_after(ASK_TIMEOUT * 2):
                await done.wait()
        except (ChannelClosed, OSError):
            pass
        finally:
            self._answers.pop(ask, None)
        return answer[0] if answer else LiveView()

    async def _serve_handed(
        self,
        daemon: Daemon,
        conn: socket.socket,
        data: bytes,
        welcomed: bool,
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """A connection the listener read the hello of: rebuilt from the bytes it read (the hello first), then
        served as if accepted here. ``welcomed``: a control connection the listener already answered."""
        hub, doors = daemon.hub, daemon.doors
        assert hub is not None and doors is not None
        started = False

        def handled() -> None:
            nonlocal started
            if not started:
                started = True
                task_status.started()

        raw = await doors.stream(conn)
        if raw is None:
            handled()
            return
        peer = peer_credentials(raw)

        async def converse(stream: MessageStream, peer: Peer) -> None:
            if not welcomed:
                await doors.converse(stream, peer)
                return
            await stream.receive()  # the hello the listener answered
            stream.connection.send(m.Welcome(session=0, config=hub.default_config, server=__version__))  # its state
            stream.frame_timeout = hub.limits.frame_timeout
            await serve_control(hub, stream, peer, handled=handled)

        try:
            await doors.native(raw, peer, converse, data=data)
        finally:
            handled()
            if not welcomed:  # the listener counts the producer connections it handed
                with anyio.CancelScope(shield=True):
                    await self._answer(packets.Ended(uid=peer.uid))

    async def _serve_handed_compat(self, daemon: Daemon, conn: socket.socket, job: str, layout: str) -> None:
        """A connection the listener accepted on a job's msSanitizer-form socket (its uid checked there)."""
        peer = peer_credentials(conn)
        try:
            await daemon.serve_compat(conn, peer, job, layout)
        finally:
            with anyio.CancelScope(shield=True):  # the listener counts the producer connections it handed
                await self._answer(packets.Ended(uid=peer.uid))


class RemoteCompatSockets:
    """A worker's side of the msSanitizer-form sockets, which the listener holds (``sanitizerd.server.compat_socket``):
    a control connection's compat_listen is asked of the listener, and the socket is closed again when that
    connection ends. When this worker dies the listener keeps it: its hooks may connect again, and its run, which
    asks again on the new worker, adopts it."""

    def __init__(self, hub: Hub, listener: ChannelFront) -> None:
        self.hub = hub
        self.listener = listener
        self.stopped = False

    def count(self) -> float:
        return 0.0  # the listener's /metrics counts them, once

    def layouts(self) -> frozenset[str]:
        return compat_layouts()

    def stop(self) -> None:
        self.stopped = True  # the listener closes them as it drains

    async def listen(self, job: str, layout: str, peer: Peer, tg: anyio.abc.TaskGroup) -> m.CompatListening:
        if self.stopped:
            why = "the daemon is stopping: it opens no new sockets"
            self.hub.note_refusal("shutdown", why, what="compat socket refused", job=job, uid=peer.uid)
            return m.CompatListening(job=job, reason="shutdown", message=why)
        answer = await self.listener.open_compat(job, layout, peer)
        if answer is None:
            why = "the listener did not answer: it holds the msSanitizer-form sockets"
            self.hub.note_refusal("internal_error", why, what="compat socket refused", job=job, uid=peer.uid)
            return m.CompatListening(job=job, reason="internal_error", message=why)
        if answer.name:
            tg.start_soon(self._held, answer.name)
        return answer

    async def _held(self, name: str) -> None:
        """Until the control connection that asked for it ends (its task group is cancelled)."""
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await self.listener.close_compat(name)


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
    settings = decode_settings(os.environ.pop(SETTINGS_ENV))
    logs.configure(settings.log_level)
    structlog.contextvars.bind_contextvars(worker=index)
    allocator.tune()
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # until the loop watches signals: a reload is the listener's word
    channel = Channel(socket.socket(fileno=fd))
    try:
        daemon = worker_daemon(settings, index, channel)
        anyio.run(daemon.serve, backend="asyncio", backend_options={"use_uvloop": True})
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
