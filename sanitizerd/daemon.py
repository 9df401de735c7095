"""The daemon: bind the socket, accept connections, shake hands, hand each to its session or control pump.

Structured concurrency throughout: the serve task group owns the listener, the signal watcher and every
connection handler; cancelling it (SIGTERM, SIGINT) ends them all, each through its own cleanup.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import struct
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc
import structlog
from anyio.abc import SocketAttribute, SocketStream, TaskStatus

from sanitizerd import __version__, config, logs
from sanitizerd.findings.store import FindingsStore
from sanitizerd.metrics import Metrics
from sanitizerd.protocol import Connection, RemoteProtocolError, Role
from sanitizerd.protocol import messages as m
from sanitizerd.sessions.control import serve_control
from sanitizerd.sessions.hub import Hub, Limits
from sanitizerd.sessions.producer import serve_producer
from sanitizerd.sessions.session import Peer, Session
from sanitizerd.sessions.transport import MessageStream, PeerClosed
from sanitizerd.systemd import Notifier, listen_sockets

log = structlog.get_logger("sanitizerd.daemon")

SOCKET_MODE = 0o660


def default_socket_path() -> Path:
    """``/run/sanitizerd/sanitizerd.sock`` for root, else under ``$XDG_RUNTIME_DIR`` (or /tmp, per user)."""
    if os.geteuid() == 0:
        return Path("/run/sanitizerd/sanitizerd.sock")
    runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/tmp/sanitizerd-{os.geteuid()}"
    return Path(runtime) / "sanitizerd" / "sanitizerd.sock"


def default_state_dir() -> Path:
    if os.geteuid() == 0:
        return Path("/var/lib/sanitizerd")
    base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(base) / "sanitizerd"


@dataclass(slots=True)
class DaemonSettings:
    socket_path: Path = field(default_factory=default_socket_path)
    state_dir: Path = field(default_factory=default_state_dir)
    metrics_addr: str | None = None
    limits: Limits = field(default_factory=Limits)
    config_path: Path | None = None  # read again on SIGHUP
    command_line: dict[str, object] = field(default_factory=dict)  # limits given on the command line: they win
    log_level_given: str | None = None


class DaemonAlreadyRunning(Exception):
    pass


def _peer_credentials(stream: SocketStream) -> Peer:
    try:
        raw: socket.socket = stream.extra(SocketAttribute.raw_socket)
        pid, uid, gid = struct.unpack("3i", raw.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        return Peer(pid, uid, gid)
    except (OSError, AttributeError):
        return Peer()


def claim_socket_path(path: Path) -> None:
    """Refuse a path a live daemon answers on; remove a stale socket file left by a dead one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() and not path.is_symlink():
        return
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1)
        probe.connect(str(path))
    except (ConnectionRefusedError, FileNotFoundError):
        path.unlink(missing_ok=True)  # stale: nobody listens
        return
    except OSError as exc:
        if exc.errno in (errno.ENOTSOCK, errno.ECONNREFUSED):
            raise DaemonAlreadyRunning(f"{path} exists and is not a socket sanitizerd can replace") from exc
        raise
    finally:
        probe.close()
    raise DaemonAlreadyRunning(f"a daemon is already serving on {path}")


class Daemon:
    def __init__(self, settings: DaemonSettings) -> None:
        self.settings = settings
        self.metrics = Metrics()
        self.hub: Hub | None = None

    async def serve(self, *, task_status: TaskStatus[Path] = anyio.TASK_STATUS_IGNORED) -> None:
        settings = self.settings
        notifier = Notifier()
        activated = listen_sockets()
        if not activated:
            claim_socket_path(settings.socket_path)
        store = FindingsStore(settings.state_dir / "sanitizerd.db")
        self.hub = hub = Hub(store=store, metrics=self.metrics, limits=settings.limits)
        self.metrics.queue_depth(hub.queued, hub.queued_by_detector)
        self.metrics.gauges(jobs_live=hub.jobs_live)
        self.metrics.race_memory(lambda: float(hub.race_memory.used), lambda: float(hub.race_memory.limit))
        ready = anyio.Event()
        self.metrics.readiness(ready.is_set)
        if settings.metrics_addr:
            self.metrics.serve(settings.metrics_addr)
        if activated:  # systemd owns the socket file: never unlink it
            listener = await anyio.abc.SocketListener.from_socket(activated[0])
            socket_path = Path(activated[0].getsockname())
        else:
            listener = await anyio.create_unix_listener(settings.socket_path, mode=SOCKET_MODE)
            socket_path = settings.socket_path
        log.info(
            "serving",
            socket=str(socket_path),
            activated=bool(activated),
            state_dir=str(settings.state_dir),
            metrics=settings.metrics_addr,
            version=__version__,
        )
        try:
            async with listener, anyio.create_task_group() as tg:
                accepting = anyio.CancelScope()
                tg.start_soon(self._watch_signals, accepting, tg.cancel_scope, notifier)
                if notifier.watchdog_interval:
                    tg.start_soon(self._watchdog, notifier, notifier.watchdog_interval)
                task_status.started(socket_path)
                notifier.ready(f"serving on {socket_path}")
                ready.set()
                with accepting:
                    await listener.serve(self._handle, task_group=tg)
                # New clients are refused at once (under systemd they queue on its socket for the next start).
                await listener.aclose()
                await self._drain(hub, notifier)
                tg.cancel_scope.cancel()
        finally:
            if not activated:
                settings.socket_path.unlink(missing_ok=True)
            store.close()
            log.info("stopped")

    @staticmethod
    async def _watchdog(notifier: Notifier, interval: float) -> None:
        """Ping from the event loop itself: a stalled loop stops pinging, and systemd restarts the daemon."""
        while True:
            notifier.watchdog()
            await anyio.sleep(interval)

    async def _watch_signals(
        self, accepting: anyio.CancelScope, everything: anyio.CancelScope, notifier: Notifier
    ) -> None:
        """SIGTERM/SIGINT: stop accepting and drain; a second one: stop now. SIGHUP: reload."""
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            async for signum in signals:
                name = signal.Signals(signum).name
                if signum == signal.SIGHUP:
                    self._reload(notifier)
                elif not accepting.cancel_called:
                    log.info("signal received, draining", signal=name)
                    notifier.stopping(f"draining on {name}")
                    accepting.cancel()
                else:
                    log.info("signal received again, stopping now", signal=name)
                    everything.cancel()
                    return

    async def _drain(self, hub: Hub, notifier: Notifier) -> None:
        """No new connections; the live sessions get up to the drain timeout to finish their kernels and close
        (their findings are checked and stored as usual); the rest end as "shutdown"."""
        deadline = hub.limits.drain_timeout
        log.info("draining", sessions=len(hub.live), deadline_s=deadline)
        with anyio.move_on_after(deadline):
            while hub.live:
                notifier.status(f"draining: {len(hub.live)} session(s) still open")
                await anyio.sleep(0.1)
        if hub.live:
            log.warning("drain deadline passed", sessions=len(hub.live))

    def _reload(self, notifier: Notifier) -> None:
        """SIGHUP: the config file's log level and limits, again; a broken file changes nothing."""
        settings, hub = self.settings, self.hub
        assert hub is not None
        notifier.notify("RELOADING=1")
        try:
            file = config.read(settings.config_path)
        except config.ConfigError as exc:
            log.error("reload failed; settings unchanged", detail=str(exc))
            notifier.status(f"reload failed: {exc}")
            return
        hub.limits = config.reloaded(hub.limits, file, settings.command_line)
        hub.race_memory.resize(hub.limits.race_memory)
        level = settings.log_level_given or str(file.top.get("log_level", "info"))
        log.warning("reloaded", config=str(file.path), log_level=level, limits=repr(hub.limits))
        logs.configure(level)
        notifier.notify("READY=1", f"STATUS=reloaded {file.path or 'defaults'}")

    async def _handle(self, raw: SocketStream) -> None:
        hub = self.hub
        assert hub is not None
        peer = _peer_credentials(raw)
        stream = MessageStream(raw, Connection(Role.SERVER, max_frame_size=hub.limits.max_frame_size))
        async with raw:
            with structlog.contextvars.bound_contextvars(peer_pid=peer.pid, peer_uid=peer.uid):
                try:
                    with anyio.fail_after(hub.limits.handshake_timeout):
                        hello = await stream.receive()
                except TimeoutError:
                    timeout = hub.limits.handshake_timeout
                    await hub.refuse(stream, "handshake_timeout", f"no hello within {timeout} s")
                    return
                except RemoteProtocolError as exc:
                    await hub.refuse(stream, exc.reason, str(exc), during="handshake")
                    return
                except (PeerClosed, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    return
                assert isinstance(hello, m.Hello)
                try:
                    if hello.role == "control":
                        await stream.send(m.Welcome(session=0, config=hub.default_config, server=__version__))
                        await serve_control(hub, stream, peer)
                    else:
                        await self._producer(hub, stream, hello, peer)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    pass
                except Exception:  # one connection's bug must not take the daemon down
                    log.exception("connection handler failed")

    @staticmethod
    async def _resumable(hub: Hub, hello: m.Hello, peer: Peer) -> tuple[str, str] | None:
        """Why a client may not resume the session it names (reason, message), or None."""
        if hello.resume in hub.live:
            return "bad_reference", f"session {hello.resume} is still live"
        stored = await hub.store_call(hub.store.reopen_session, hello.resume)
        if stored is None:
            return "bad_reference", f"there is no session {hello.resume} to resume"
        if stored.uid != peer.uid and peer.uid != 0:
            return "permission_denied", f"session {hello.resume} belongs to another user"
        return None

    async def _producer(self, hub: Hub, stream: MessageStream, hello: m.Hello, peer: Peer) -> None:
        if len(hub.live) >= hub.limits.max_sessions:
            limit = hub.limits.max_sessions
            await hub.refuse(stream, "session_limit", f"the daemon serves its limit of {limit} sessions")
            return
        mine = sum(1 for s in hub.live.values() if s.peer.uid == peer.uid)
        if mine >= hub.limits.max_sessions_per_uid:
            limit = hub.limits.max_sessions_per_uid
            await hub.refuse(stream, "session_limit", f"uid {peer.uid} has its limit of {limit} live sessions")
            return
        config = hub.jobs.config_for(hello)
        already: list[bytes] = []
        if hello.resume:
            refused = await self._resumable(hub, hello, peer)
            if refused:
                await hub.refuse(stream, refused[0], refused[1], session=hello.resume)
                return
            ident = hello.resume
            already = await hub.store_call(hub.store.finding_keys, ident)
            hub.metrics.sessions_resumed.inc()
        else:
            ident = await hub.store_call(lambda: hub.store.open_session(hello.job, pid=hello.pid, uid=peer.uid))
        session = Session(
            ident, hello, config, peer, ipc=hub.jobs.ipc_table(hello.job), max_race_events=hub.limits.max_race_events,
            race_memory=hub.race_memory.account(),
        )  # fmt: skip
        session.already_stored.update(already)
        hub.live[ident] = session
        hub.jobs.session_started(hello.job, ident)
        await hub.jobs.record(hello.job, ident, hello)
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


def run_daemon(settings: DaemonSettings) -> int:
    try:
        anyio.run(Daemon(settings).serve, backend="asyncio", backend_options={"use_uvloop": True})
    except DaemonAlreadyRunning as exc:
        log.error("cannot start", detail=str(exc))
        return 1
    except KeyboardInterrupt:
        pass
    return 0
