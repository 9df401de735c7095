"""The daemon: open the store and the socket (its file: ``socket_file``), accept connections, shake hands, hand each
to a producer session (opened in ``sessions.opening``) or a control pump; signals drain or reload it.

Structured concurrency throughout: the serve task group owns the listener, the signal watcher and every
connection handler; cancelling it (SIGTERM, SIGINT) ends them all, each through its own cleanup.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import sqlite3
import struct
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import anyio
import anyio.abc
import structlog
from anyio.abc import SocketAttribute, TaskStatus

from client_shim import discovery
from sanitizerd import __version__, allocator, config, fds, logs
from sanitizerd.compat_socket import (
    ACCEPT_BACKOFF,
    ACCEPT_RETRY_ERRNOS,
    ACCEPT_SKIP_ERRNOS,
    CompatSockets,
    CompatStream,
)
from sanitizerd.findings.model import Suppression
from sanitizerd.findings.store import FindingsStore, Store, StoreUnavailable
from sanitizerd.metrics import Metrics
from sanitizerd.protocol import Connection, RemoteProtocolError, Role
from sanitizerd.protocol import messages as m
from sanitizerd.sessions.admission import Connections
from sanitizerd.sessions.control import serve_control
from sanitizerd.sessions.hub import RETENTION_INTERVAL, Hub, Limits
from sanitizerd.sessions.opening import open_producer
from sanitizerd.sessions.session import Peer
from sanitizerd.sessions.transport import MessageStream, PeerClosed, UnfinishedBytes
from sanitizerd.socket_file import (
    SOCKET_MODE,
    DaemonAlreadyRunning,
    bind_unpublished,
    claim_socket_path,
    publish_socket,
    remove_socket,
)
from sanitizerd.systemd import Notifier, listen_sockets

log = structlog.get_logger("sanitizerd.daemon")
# Seconds past the drain timeout a draining process may take before it exits abandoning what is still busy in a
# thread (the sessions cancelled at the deadline record their end well within it).
ABANDON_MARGIN = 2.0

HEARTBEAT = 1.0
STALLED_AFTER = 10.0  # seconds without a heartbeat before /readyz says the event loop is stalled
T = TypeVar("T")


def default_socket_path() -> Path:
    """``/run/sanitizerd/sanitizerd.sock`` for root, else a private one: ``$XDG_RUNTIME_DIR/sanitizerd/`` or
    ``/tmp/sanitizerd-<uid>/`` (made 0700 by ``serve``, refused when another user's: ``client_shim.discovery``)."""
    return discovery.default_socket_path()


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
    log_level: str = "info"  # the level in force at start (a worker process configures its log with it)
    # Processes that serve sessions: 1 is one process that does everything; N > 1 is a listener process and N
    # worker processes (sanitizerd/workers).
    workers: int = 1
    suppressions: tuple[Suppression, ...] = ()  # the host's rules, from the config file's ``suppressions``
    store: str = ""  # a PostgreSQL URL (``--store``): one database for many hosts' daemons; "": SQLite


class StartupError(Exception):
    """Something the daemon needs at start is not usable; the message says what and why, in one line."""


def _starting(what: str, step: Callable[..., T], *args: object) -> T:
    try:
        return step(*args)
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename and not what.endswith(str(exc.filename)) else ""
        raise StartupError(f"{what}: {where}{exc.strerror or exc}") from None


# The state directory needs room for the store to be created and its first sessions recorded.
MIN_FREE_BYTES = 1 << 20


def open_store(state_dir: Path, *, max_bytes: int = 0, url: str = "") -> Store:
    """The findings store, or StartupError saying why the state directory cannot hold it (missing and not
    creatable, read-only, full, or a database SQLite cannot open). ``url``: a PostgreSQL database instead, shared
    with other hosts' daemons (the state directory still names this daemon's sessions in it)."""
    if url:
        try:
            from sanitizerd.findings.postgres import PostgresStore, daemon_identity
        except ImportError as exc:
            raise StartupError(str(exc)) from None
        try:
            return PostgresStore(url, daemon=daemon_identity(state_dir), max_bytes=max_bytes)
        except StoreUnavailable as exc:
            raise StartupError(f"the findings store: {exc}") from None
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        usage = os.statvfs(state_dir)
    except OSError as exc:
        raise StartupError(f"the state directory {state_dir}: {exc.strerror or exc}") from None
    if usage.f_flag & os.ST_RDONLY:
        raise StartupError(f"the state directory {state_dir} is on a read-only file system")
    if not os.access(state_dir, os.W_OK | os.X_OK):
        raise StartupError(f"the state directory {state_dir} is not writable by uid {os.geteuid()}")
    if usage.f_bavail * usage.f_frsize < MIN_FREE_BYTES:
        free = usage.f_bavail * usage.f_frsize
        raise StartupError(f"the state directory {state_dir} is full ({free} bytes free)")
    try:
        return FindingsStore(state_dir / "sanitizerd.db", max_bytes=max_bytes)
    except (OSError, sqlite3.Error) as exc:
        raise StartupError(f"cannot open the findings store {state_dir / 'sanitizerd.db'}: {exc}") from None


def _peer_credentials(stream: anyio.abc.ByteStream) -> Peer:
    try:
        raw: socket.socket = stream.extra(SocketAttribute.raw_socket)
        pid, uid, gid = struct.unpack("3i", raw.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        return Peer(pid, uid, gid)
    except (OSError, AttributeError):
        return Peer()


_sighup_held = threading.Event()


def hold_sighup() -> None:
    """Until the event loop watches signals, a SIGHUP is remembered, then acted on (its default action would end
    the process, and a reload asked for during start-up must not be lost)."""
    signal.signal(signal.SIGHUP, lambda _signum, _frame: _sighup_held.set())


class Daemon:
    def __init__(self, settings: DaemonSettings) -> None:
        self.settings = settings
        self.metrics = Metrics()
        self.hub: Hub | None = None
        self._accepting: anyio.CancelScope | None = None
        self._beat = time.monotonic()
        self.connections = Connections()
        self.unfinished = UnfinishedBytes(lambda: self.hub.limits.max_unfinished_bytes_per_uid if self.hub else 0)
        self.nofile = 0  # the soft fd limit in force, once raised at start

    async def serve(self, *, task_status: TaskStatus[Path] = anyio.TASK_STATUS_IGNORED) -> None:
        settings = self.settings
        notifier = Notifier()
        self.nofile = fds.raise_nofile()
        limits = self._fitted(settings.limits)
        activated = listen_sockets()
        if not activated:
            discovery.secure_private_socket_directory(settings.socket_path)
            _starting(f"the socket {settings.socket_path}", claim_socket_path, settings.socket_path)
        store = open_store(settings.state_dir, max_bytes=limits.max_store_size, url=settings.store)
        hub = self._open_hub(store, limits)
        await hub.retain()
        ready = anyio.Event()
        self._instrument(hub, store, ready)
        if settings.metrics_addr:
            _starting(f"metrics on {settings.metrics_addr}", self.metrics.serve, settings.metrics_addr)
        owned: tuple[int, int] | None = None  # the socket file this daemon created, which only it may remove
        unpublished: Path | None = None
        if activated:  # systemd owns the socket file: never unlink it
            listener = await anyio.abc.SocketListener.from_socket(activated[0])
            socket_path = Path(activated[0].getsockname())
        else:
            try:
                sock, unpublished = bind_unpublished(settings.socket_path, SOCKET_MODE)
            except OSError as exc:
                raise StartupError(f"cannot listen on {settings.socket_path}: {exc.strerror or exc}") from None
            listener = await anyio.abc.SocketListener.from_socket(sock)
            socket_path = settings.socket_path
        log.info(
            "serving",
            socket=str(socket_path),
            activated=bool(activated),
            state_dir=str(settings.state_dir),
            metrics=settings.metrics_addr,
            version=__version__,
            workers=settings.workers,
        )
        bound: threading.Timer | None = None
        try:
            async with listener, anyio.create_task_group() as tg:
                self._accepting = accepting = anyio.CancelScope()
                await tg.start(self._watch_signals, accepting, tg.cancel_scope, notifier)
                tg.start_soon(self._retain, hub)
                tg.start_soon(self._heartbeat)
                hub.compat_sockets = compat = CompatSockets(hub, tg, self._serve_compat, self.connections)
                await self._start_serving(tg)
                if unpublished is not None:  # listening and handling signals: now clients may find it
                    owned = publish_socket(unpublished, settings.socket_path)
                if notifier.watchdog_interval:
                    tg.start_soon(self._watchdog, notifier, notifier.watchdog_interval)
                task_status.started(socket_path)
                notifier.ready(f"serving on {socket_path}")
                ready.set()
                with accepting:
                    await self._accept(listener, tg)
                bound = self.bound_the_stop(
                    hub.limits.drain_timeout, lambda: remove_socket(settings.socket_path, owned, unpublished)
                )
                # New clients are refused at once (under systemd they queue on its socket for the next start).
                await listener.aclose()
                compat.stop()
                await self._drain(hub, notifier)
                tg.cancel_scope.cancel()
        finally:
            remove_socket(settings.socket_path, owned, unpublished)
            store.close()
            if bound is not None:
                bound.cancel()
            log.info("stopped")

    def _open_hub(self, store: Store, limits: Limits) -> Hub:
        """The hub over ``store``, with the sessions the last daemon left open closed."""
        self.hub = hub = Hub(store=store, metrics=self.metrics, limits=limits, suppressions=self.settings.suppressions)
        # No session is live yet: any the store says is open was left so by a daemon that died.
        try:
            abandoned = self._close_abandoned(store)
        except StoreUnavailable as exc:  # the store may still serve reads; the next start tries again
            log.error("sessions left open by a stopped daemon stay open", detail=str(exc))
        else:
            if abandoned:
                log.warning("sessions a daemon that stopped unexpectedly left open are closed", sessions=abandoned)
        return hub

    def _close_abandoned(self, store: Store) -> int:
        return store.close_abandoned()

    async def _start_serving(self, tg: anyio.abc.TaskGroup) -> None:
        """What else serves clients besides this process's own handlers (the listener's worker processes)."""

    def _instrument(self, hub: Hub, store: Store, ready: anyio.Event) -> None:
        self.metrics.read_at_scrape(
            queued=hub.queued,
            jobs_live=hub.jobs_live,
            jobs_in_use=lambda: len(hub.jobs),
            open_connections=lambda: float(self.connections.total),
            unfinished_frame_bytes=lambda: float(self.unfinished.total),
            race_memory_used=lambda: float(hub.race_memory.used),
            race_memory_limit=lambda: float(hub.race_memory.limit),
            compat_sockets=lambda: hub.compat_sockets.count() if hub.compat_sockets else 0.0,
            detector_threads=lambda: float(hub.detector_threads.size),
            detector_threads_busy=lambda: float(hub.detector_threads.busy),
            detector_checks_waiting=lambda: float(hub.detector_threads.waiting),
            detector_oldest_wait=hub.detector_threads.oldest_wait,
        )
        self.metrics.queue_by_detector(hub.queued_by_detector)
        self.metrics.store_bytes.set_function(store.file_bytes)  # read at scrape time
        self.metrics.readiness(lambda: self._not_ready(ready))

    def _not_ready(self, started: anyio.Event) -> str:
        """Why a new session would not be served now ("" when it would). Read from the metrics thread."""
        hub, accepting = self.hub, self._accepting
        if hub is None or accepting is None or not started.is_set():
            return "starting"
        if accepting.cancel_called:
            return "draining"
        if self._sessions() >= hub.limits.max_sessions:
            return f"at the limit of {hub.limits.max_sessions} sessions"
        stalled = time.monotonic() - self._beat
        if stalled > STALLED_AFTER:
            return f"the event loop has not run for {stalled:.0f} s"
        return self._saturated()

    def _saturated(self) -> str:
        """Why this process's detector threads are saturated ("" when they are not): a new session's kernels would
        wait for a thread. Read from the metrics thread."""
        hub = self.hub
        return hub.detector_threads.saturated(hub.limits.saturated_after) if hub is not None else ""

    def _sessions(self) -> int:
        """Producer sessions this daemon serves (read from the metrics thread)."""
        return len(self.hub.live) if self.hub is not None else 0

    async def _heartbeat(self) -> None:
        """The event loop's sign of life for /readyz (which is answered from another thread)."""
        while True:
            self._beat = time.monotonic()
            await anyio.sleep(HEARTBEAT)

    @staticmethod
    async def _retain(hub: Hub) -> None:
        while True:
            await anyio.sleep(RETENTION_INTERVAL)
            await hub.retain()

    async def _accept(self, listener: anyio.abc.SocketListener, tg: anyio.abc.TaskGroup) -> None:
        """Accept connections for ever. Out of fds or memory, accept fails while the listener stays readable: back
        off (doubling, up to a second) and try again, logging once per burst, never ending the daemon."""
        failed = 0
        pause = ACCEPT_BACKOFF[0]
        while True:
            try:
                raw = await self._accept_one(listener)
            except anyio.BrokenResourceError as exc:
                code = getattr(exc.__cause__, "errno", None)
                if code in ACCEPT_SKIP_ERRNOS:
                    continue
                if code not in ACCEPT_RETRY_ERRNOS:
                    raise
                name = errno.errorcode[code]
                self.metrics.accept_errors.labels(name).inc()
                if not failed:
                    log.error(
                        "accept failed; backing off until it succeeds",
                        error=name,
                        open_connections=self.connections.total,
                        fd_limit=self.nofile,
                    )
                failed += 1
                await anyio.sleep(pause)
                pause = min(pause * 2, ACCEPT_BACKOFF[1])
                continue
            if failed:
                log.warning("accepting again", failed_accepts=failed)
                failed, pause = 0, ACCEPT_BACKOFF[0]
            tg.start_soon(self._handle, raw)

    async def _accept_one(self, listener: anyio.abc.SocketListener) -> anyio.abc.ByteStream:
        return await listener.accept()

    def _refusal_counter(self, job: str) -> Callable[[str, int], None]:
        """Counts a compat connection's records refused over their expansion bounds, logged per kernel launch."""
        counter = self.metrics.compat_records_refused

        def refused(reason: str, records: int) -> None:
            counter.labels(reason).inc(records)
            log.info("msSanitizer records refused over their bounds", job=job, reason=reason, records=records)

        return refused

    def _cut_counter(self) -> Callable[[str, int], None]:
        """Counts a connection's cut strings; logs the first cut of each field (a client may send millions)."""
        logged: set[str] = set()
        counter = self.metrics.strings_cut

        def cut(field: str, characters: int) -> None:
            counter.labels(field).inc()
            if field not in logged:
                logged.add(field)
                log.info("client string cut to its length", field=field, characters_cut=characters)

        return cut

    def _fitted(self, limits: Limits) -> Limits:
        """``limits`` lowered to what the fd limit allows, saying so."""
        fitted, notes = fds.fit(limits, self.nofile)
        for note in notes:
            log.warning("limit lowered to fit the fd limit", detail=note)
        return fitted

    @staticmethod
    async def _watchdog(notifier: Notifier, interval: float) -> None:
        """Ping from the event loop itself: a stalled loop stops pinging, and systemd restarts the daemon."""
        while True:
            notifier.watchdog()
            await anyio.sleep(interval)

    async def _watch_signals(
        self,
        accepting: anyio.CancelScope,
        everything: anyio.CancelScope,
        notifier: Notifier,
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """SIGTERM/SIGINT: stop accepting and drain; a second one: stop now. SIGHUP: reload."""
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            task_status.started()
            if _sighup_held.is_set():  # one came before this receiver replaced hold_sighup's handler
                _sighup_held.clear()
                self._reload(notifier)
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

    def _stop_margin(self) -> float:
        """Seconds past the drain timeout this process may take to end once it drains: what is left of its sessions
        is cancelled at the deadline, and a cancelled session needs a moment to record its end."""
        return ABANDON_MARGIN

    def bound_the_stop(self, drain_timeout: float, cleanup: Callable[[], None]) -> threading.Timer:
        """Once draining: at the drain timeout plus the margin this process ends, whatever it is still doing. A
        detector (or a store write) runs in a thread that a cancellation cannot stop, and the event loop waits for
        it at the deadline; a huge batch would keep the daemon past any deadline, so that its service manager
        kills it (or, without one, it never ends). Its thread is abandoned instead: ``cleanup`` (the socket file)
        runs, the sessions still open stay open in the store (the next start closes them, as after a crash; their
        findings stored so far are kept) and the process exits. Cancelled on a stop that ended in time."""
        seconds = drain_timeout + self._stop_margin()

        def give_up() -> None:
            log.error(
                "still busy past the drain deadline (a detector or store call in a thread); exiting without it",
                deadline_s=seconds,
                sessions=len(self.hub.live) if self.hub is not None else 0,
            )
            try:
                cleanup()
            finally:
                sys.stderr.flush()
                sys.stdout.flush()
                os._exit(0)

        timer = threading.Timer(seconds, give_up)
        timer.daemon = True
        timer.start()
        return timer

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
        """SIGHUP: the config file's log level and limits, again. A file refused, or any failure at all, changes
        nothing and never ends the daemon: it is logged and counted."""
        settings, hub = self.settings, self.hub
        assert hub is not None
        notifier.notify("RELOADING=1")
        try:
            file = config.read(settings.config_path)
            limits = config.reloaded(hub.limits, file, settings.command_line)
            level = settings.log_level_given or str(file.top.get("log_level", "info"))
        except Exception as exc:  # whatever went wrong, the daemon keeps its settings and serves on
            detail = str(exc) if isinstance(exc, config.ConfigError) else f"{type(exc).__name__}: {exc}"
            self.metrics.config_reloads.labels("failed").inc()
            log.error("reload failed; settings unchanged", detail=detail)
            notifier.notify("READY=1", f"STATUS=reload failed, settings unchanged: {detail}")
            return
        hub.limits = self._fitted(limits)  # one assignment: a connection sees the old limits or the new ones
        hub.race_memory.resize(hub.limits.race_memory)
        hub.suppressions = file.suppressions  # sessions that start from now on
        logs.configure(level)
        self.metrics.config_reloads.labels("ok").inc()
        log.warning("reloaded", config=str(file.path), log_level=level, limits=repr(hub.limits))
        notifier.notify("READY=1", f"STATUS=reloaded {file.path or 'defaults'}")

    async def _handle(self, raw: anyio.abc.ByteStream) -> None:
        hub = self.hub
        assert hub is not None
        peer = _peer_credentials(raw)
        connection = Connection(Role.SERVER, max_frame_size=hub.limits.max_frame_size)
        await self._guarded(raw, peer, connection, lambda stream: self._converse(hub, stream, peer))

    async def _serve_compat(self, conn: socket.socket, peer: Peer, job: str, layout: str) -> None:
        """A connection to a job's msSanitizer-form socket (its peer's uid already checked): an ordinary producer
        session of the job, opened with the implicit hello msSanitizer's protocol stands for."""
        hub = self.hub
        assert hub is not None
        try:
            raw = await anyio.abc.UNIXSocketStream.from_socket(conn)
        except OSError:
            conn.close()
            return
        try:
            from sanitizerd.compat import wire
            from sanitizerd.compat.packets.connection import CompatConnection

            connection = CompatConnection(wire.LAYOUTS[layout], job=job, peer_pid=peer.pid)
            connection.on_refused = self._refusal_counter(job)
            connection.on_unplaced = self.metrics.compat_records_unplaced.inc
        except Exception:  # a bug of ours: this connection ends, never the daemon (it runs in the daemon's tasks)
            log.exception("compat connection could not be set up", job=job, layout=layout)
            hub.metrics.rejected.labels("internal_error").inc()
            await raw.aclose()
            return

        async def serve(stream: MessageStream) -> None:
            stream.frame_timeout = hub.limits.frame_timeout
            stream.idle_timeout = hub.limits.idle_timeout
            await open_producer(hub, stream, connection.hello(), peer)

        stream = CompatStream(raw, connection, unfinished=self.unfinished, uid=peer.uid)  # type: ignore[arg-type]
        await self._guarded(raw, peer, stream, serve)

    async def _guarded(
        self,
        raw: anyio.abc.ByteStream,
        peer: Peer,
        connection: Connection | MessageStream,
        body: Callable[[MessageStream], Awaitable[None]],
    ) -> None:
        """Serve one connection (a protocol connection, or the stream over one) under the connection limits, so
        that nothing it does ends the daemon: a protocol error or a bug of ours ends that connection only, told to
        its peer, counted and logged."""
        hub = self.hub
        assert hub is not None
        if isinstance(connection, MessageStream):
            stream = connection
        else:
            stream = MessageStream(raw, connection, unfinished=self.unfinished, uid=peer.uid)
        stream.on_cut = self._cut_counter()
        async with raw:
            with structlog.contextvars.bound_contextvars(peer_pid=peer.pid, peer_uid=peer.uid):
                refused = self.connections.admit(peer.uid, hub.limits)
                if refused:
                    await hub.refuse(stream, "connection_limit", refused)
                    return
                try:
                    await body(stream)
                except RemoteProtocolError as exc:  # from a handler that did not answer it itself
                    await hub.refuse(stream, exc.reason, str(exc))
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    pass
                except Exception:  # one connection's bug must not take the daemon down, nor leave its peer guessing
                    log.exception("connection handler failed")
                    hub.metrics.rejected.labels("internal_error").inc()
                    await stream.send_error("internal_error", "the daemon failed on this connection; see its log")
                finally:
                    stream.release()
                    self.connections.release(peer.uid)

    async def _converse(self, hub: Hub, stream: MessageStream, peer: Peer) -> None:
        """Shake hands, then serve the connection as the role its hello declared."""
        hello = await receive_hello(hub, stream)
        if hello is None:
            return
        if hello.role == "control":
            await stream.send(m.Welcome(session=0, config=hub.default_config, server=__version__))
            await serve_control(hub, stream, peer)
        else:
            # A control connection may wait on a job for as long as it runs; a producer that sends nothing at all
            # for this long is taken for gone.
            stream.idle_timeout = hub.limits.idle_timeout
            await open_producer(hub, stream, hello, peer)


async def receive_hello(hub: Hub, stream: MessageStream) -> m.Hello | None:
    """The connection's hello within the handshake timeout, or None when it was refused (or its peer left)."""
    try:
        with anyio.fail_after(hub.limits.handshake_timeout):
            hello = await stream.receive()
    except TimeoutError:
        timeout = hub.limits.handshake_timeout
        await hub.refuse(stream, "handshake_timeout", f"no hello within {timeout} s")
        return None
    except RemoteProtocolError as exc:
        await hub.refuse(stream, exc.reason, str(exc), during="handshake")
        return None
    except PeerClosed:
        return None
    assert isinstance(hello, m.Hello)  # the connection allows nothing else first
    stream.frame_timeout = hub.limits.frame_timeout
    return hello


def run_daemon(settings: DaemonSettings) -> int:
    """Serve until stopped; 0 after a clean stop, 1 (after one line on stderr saying why) when it cannot start."""
    allocator.tune()
    daemon = Daemon(settings)
    if settings.workers > 1:
        from sanitizerd.workers.listener import Listener

        daemon = Listener(settings)
    try:
        anyio.run(daemon.serve, backend="asyncio", backend_options={"use_uvloop": True})
    except (DaemonAlreadyRunning, StartupError, discovery.UnsafeDirectory) as exc:
        print(f"sanitizerd: cannot start: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0
