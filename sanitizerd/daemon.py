"""The daemon's process: open the store and the socket (its file: ``socket_file``), accept connections and hand each
to its door (``server.doors``: a hello becomes a producer session or a control pump); signals drain or reload it.

Structured concurrency throughout: the serve task group owns the listener, the signal watcher and every
connection handler; cancelling it (SIGTERM, SIGINT) ends them all, each through its own cleanup.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import sqlite3
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar, final

import anyio
import anyio.abc
import structlog
from anyio.abc import SocketAttribute, TaskStatus

from client_shim import discovery
from sanitizerd import __version__, config, fds, logs, native
from sanitizerd.findings.store import FindingsStore, Store, StoreUnavailable
from sanitizerd.metrics import Metrics
from sanitizerd.server.accept import accept_forever, peer_credentials
from sanitizerd.server.admission import Connections
from sanitizerd.server.compat_socket import CompatSockets
from sanitizerd.server.doors import Doors, Reception
from sanitizerd.sessions.hub import RETENTION_INTERVAL, CompatSocketHolder, ControlHandoff, Hub, Limits, LiveView
from sanitizerd.sessions.session import Peer
from sanitizerd.sessions.transport import UnfinishedBytes
from sanitizerd.socket_file import (
    SOCKET_MODE,
    bind_unpublished,
    claim_socket_path,
    publish_socket,
    remove_socket,
)
from sanitizerd.systemd import Notifier, listen_sockets
from sanitizerd_protocol.model import Suppression

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


# Limits given on the command line, by name (None: not given); a worker process gets them too, as JSON.
CommandLine = dict[str, int | float | frozenset[int] | None]


@dataclass(slots=True)
class DaemonSettings:
    socket_path: Path = field(default_factory=default_socket_path)
    state_dir: Path = field(default_factory=default_state_dir)
    metrics_addr: str | None = None
    limits: Limits = field(default_factory=Limits)
    config_path: Path | None = None  # read again on SIGHUP
    command_line: CommandLine = field(default_factory=dict)  # limits given on the command line: they win
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


_sighup_held = threading.Event()


def hold_sighup() -> None:
    """Until the event loop watches signals, a SIGHUP is remembered, then acted on (its default action would end
    the process, and a reload asked for during start-up must not be lost)."""
    signal.signal(signal.SIGHUP, lambda _signum, _frame: _sighup_held.set())


class HeldCompatSockets(CompatSocketHolder, Protocol):
    """The msSanitizer-form sockets as the process that serves them sees them: they stop when it drains."""

    def stop(self) -> None:
        """No new socket is opened, and those this process holds close (sessions already in run on)."""
        ...


class Front(Protocol):
    """Where a process's connections come from, and who speaks for the daemon to the host: the socket clients find,
    systemd, /metrics, the store's upkeep and the msSanitizer-form sockets (``SocketFront``: one process, or the
    listener of workers), or the listener's channel (a worker: ``workers.worker.ChannelFront``)."""

    notifier: Notifier  # a worker's says nothing: the listener speaks to systemd

    def claim(self) -> None:
        """Before the store opens: what start-up must fail on first (another daemon on the socket)."""
        ...

    def compat_sockets(self, hub: Hub, sessions: anyio.abc.TaskGroup, daemon: Daemon) -> HeldCompatSockets:
        """The msSanitizer-form sockets of ``hub``, whose connections ``daemon`` serves in ``sessions``."""
        ...

    async def open(self, daemon: Daemon) -> None:
        """Once the hub is open, before anything is served: the store kept, listening, not yet found by clients."""
        ...

    def keep(self, tg: anyio.abc.TaskGroup, hub: Hub) -> None:
        """Start what keeps the daemon's shared state while it runs (the store's retention)."""
        ...

    async def found(self, tg: anyio.abc.TaskGroup) -> Path | None:
        """Everything serves: let clients find this process (the socket file, systemd's watchdog, the listener)."""
        ...

    async def take(self, tg: anyio.abc.TaskGroup, daemon: Daemon) -> None:
        """Connections into ``daemon``, until there are no more or the take is cancelled (the drain)."""
        ...

    async def aclose(self) -> None:
        """No new connection comes (at the drain, and again at the end)."""
        ...

    def remove(self) -> None:
        """What clients find this process by is gone (any thread: the stop's bound runs it too)."""
        ...


class Serving(Protocol):
    """Who serves the sessions a process admits: its own hub (``OwnSessions``: one process, or a worker), or worker
    processes behind it (``workers.listener.Listener``)."""

    live_elsewhere: Callable[[], Awaitable[LiveView]] | None  # what other processes have live (the hub's)
    handoff: ControlHandoff | None  # where a control connection goes at its first request about a job (the hub's)
    stop_margin: float  # seconds past the drain timeout this process may take to end once it drains

    def share(self, limits: Limits) -> Limits:
        """This process's part of the host's ``limits`` as configured, at start and at each reload."""
        ...

    def close_abandoned(self, store: Store) -> int:
        """At start, with no session live: close the sessions of this process's jobs that a dead one left open."""
        ...

    def reception(self, doors: Doors) -> Reception:
        """How this process takes in what its front accepts, given its hub's doors."""
        ...

    async def start(self, tg: anyio.abc.TaskGroup, compat: HeldCompatSockets) -> None:
        """What serves besides this process's own handlers, started before clients find it (the workers)."""
        ...

    def sessions(self, hub: Hub) -> int:
        """Producer sessions served (read from the metrics thread)."""
        ...

    def busy(self, hub: Hub) -> str:
        """Why a new session's kernels would wait ("" when they would not): every detector thread busy, a worker
        starting. Read from the metrics thread."""
        ...

    async def drain(self, hub: Hub, notifier: Notifier) -> None:
        """The live sessions get up to the drain timeout to finish and close; the rest end as "shutdown"."""
        ...

    def reloaded(self) -> None:
        """SIGHUP was handled here (whether it changed anything or not): pass it on."""
        ...


@dataclass(slots=True)
class OwnSessions:
    """Sessions served by this process's own hub: all of the host's (one process), or a worker's part of them."""

    live_elsewhere: Callable[[], Awaitable[LiveView]] | None = None
    # The host's race-check memory is shared out among this many processes (the workers).
    parts: int = 1
    # The jobs (name, uid) whose abandoned sessions are this process's to close; None: every job's.
    mine: Callable[[str, int], bool] | None = None
    handoff: ControlHandoff | None = None
    stop_margin: float = ABANDON_MARGIN

    def share(self, limits: Limits) -> Limits:
        if self.parts == 1:
            return limits
        return dataclasses.replace(limits, race_memory=limits.race_memory // self.parts)

    def close_abandoned(self, store: Store) -> int:
        return store.close_abandoned() if self.mine is None else store.close_abandoned(mine=self.mine)

    def reception(self, doors: Doors) -> Reception:
        return doors  # every connection is served here

    async def start(self, tg: anyio.abc.TaskGroup, compat: HeldCompatSockets) -> None:
        pass  # nothing serves but this process's own handlers

    def sessions(self, hub: Hub) -> int:
        return len(hub.live)

    def busy(self, hub: Hub) -> str:
        return hub.detector_threads.saturated(hub.limits.saturated_after)

    async def drain(self, hub: Hub, notifier: Notifier) -> None:
        deadline = hub.limits.drain_timeout
        log.info("draining", sessions=len(hub.live), deadline_s=deadline)
        with anyio.move_on_after(deadline):
            while hub.live:
                notifier.status(f"draining: {len(hub.live)} session(s) still open")
                await anyio.sleep(0.1)
        if hub.live:
            log.warning("drain deadline passed", sessions=len(hub.live))

    def reloaded(self) -> None:
        pass  # no other process reads the file


class SocketFront:
    """The socket clients find, with what the host sees of the daemon: systemd's notifications and watchdog, /metrics,
    the store's retention and the msSanitizer-form sockets."""

    def __init__(self, settings: DaemonSettings) -> None:
        self.settings = settings
        self.notifier = Notifier()
        self.activated: list[socket.socket] = []  # systemd's socket, when it holds the socket file
        self.listener: anyio.abc.SocketListener | None = None
        self.address = settings.socket_path  # where it listens, as the log and ``serve``'s caller are told
        self.owned: tuple[int, int] | None = None  # the socket file this daemon created, which only it may remove
        self.unpublished: Path | None = None

    def claim(self) -> None:
        settings = self.settings
        self.activated = listen_sockets()
        if not self.activated:
            discovery.secure_private_socket_directory(settings.socket_path)
            _starting(f"the socket {settings.socket_path}", claim_socket_path, settings.socket_path)

    def compat_sockets(self, hub: Hub, sessions: anyio.abc.TaskGroup, daemon: Daemon) -> CompatSockets:
        return CompatSockets(hub, sessions, daemon.serve_compat, daemon.connections)

    async def open(self, daemon: Daemon) -> None:
        settings = self.settings
        assert daemon.hub is not None
        await daemon.hub.retain()
        if settings.metrics_addr:
            _starting(f"metrics on {settings.metrics_addr}", daemon.metrics.serve, settings.metrics_addr)
        if self.activated:  # systemd owns the socket file: never unlink it
            self.listener = await anyio.abc.SocketListener.from_socket(self.activated[0])
            self.address = Path(self.activated[0].getsockname())
        else:
            try:
                sock, self.unpublished = bind_unpublished(settings.socket_path, SOCKET_MODE)
            except OSError as exc:
                raise StartupError(f"cannot listen on {settings.socket_path}: {exc.strerror or exc}") from None
            self.listener = await anyio.abc.SocketListener.from_socket(sock)
        log.info(
            "serving",
            socket=str(self.address),
            activated=bool(self.activated),
            state_dir=str(settings.state_dir),
            metrics=settings.metrics_addr,
            version=__version__,
            workers=settings.workers,
            # numpy's paths cost several times the CPU per event: an operator should see which this daemon runs
            compiled_loops=",".join(name for name, built in native.built().items() if built) or "none",
        )

    def keep(self, tg: anyio.abc.TaskGroup, hub: Hub) -> None:
        tg.start_soon(_retain, hub)

    async def found(self, tg: anyio.abc.TaskGroup) -> Path:
        if self.unpublished is not None:  # listening and handling signals: now clients may find it
            self.owned = publish_socket(self.unpublished, self.settings.socket_path)
        if self.notifier.watchdog_interval:
            tg.start_soon(_watchdog, self.notifier, self.notifier.watchdog_interval)
        return self.address

    async def take(self, tg: anyio.abc.TaskGroup, daemon: Daemon) -> None:
        assert self.listener is not None
        await accept_forever(
            self.listener.extra(SocketAttribute.raw_socket),
            lambda conn: tg.start_soon(daemon.handle, conn),
            errors=daemon.metrics.accept_errors,
            context=lambda: {"open_connections": daemon.connections.total, "fd_limit": daemon.nofile},
        )

    async def aclose(self) -> None:
        # New clients are refused at once (under systemd they queue on its socket for the next start).
        if self.listener is not None:
            await self.listener.aclose()

    def remove(self) -> None:
        remove_socket(self.settings.socket_path, self.owned, self.unpublished)


async def _retain(hub: Hub) -> None:
    while True:
        await anyio.sleep(RETENTION_INTERVAL)
        await hub.retain()


async def _watchdog(notifier: Notifier, interval: float) -> None:
    """Ping from the event loop itself: a stalled loop stops pinging, and systemd restarts the daemon."""
    while True:
        notifier.watchdog()
        await anyio.sleep(interval)


@final
class Daemon:
    """One process's life: the store and the hub, signals (drain, reload), readiness, the bounded stop. Where its
    connections come from is its ``front``; who serves the sessions it admits, its ``serving``."""

    def __init__(
        self,
        settings: DaemonSettings,
        serving: Serving | None = None,
        front: Front | None = None,
        *,
        metrics: Metrics | None = None,
    ) -> None:
        """By default, the whole daemon in one process: the socket clients find, and every session served here.
        ``metrics``: where ``serving`` already counts (the listener's pool, its merged /metrics)."""
        self.settings = settings
        self.serving: Serving = serving or OwnSessions()
        self.front: Front = front or SocketFront(settings)
        self.reception: Reception | None = None  # once the hub is open
        self.metrics = metrics or Metrics()
        self.hub: Hub | None = None
        self.doors: Doors | None = None  # once the hub is open
        self._accepting: anyio.CancelScope | None = None
        self._beat = time.monotonic()
        self.connections = Connections()
        self.unfinished = UnfinishedBytes(lambda: self.hub.limits.max_unfinished_bytes_per_uid if self.hub else 0)
        self.nofile = 0  # the soft fd limit in force, once raised at start

    async def serve(self, *, task_status: TaskStatus[Path | None] = anyio.TASK_STATUS_IGNORED) -> None:
        settings, front, serving = self.settings, self.front, self.serving
        self.nofile = fds.raise_nofile()
        limits = self._fitted(settings.limits)
        front.claim()
        store = open_store(settings.state_dir, max_bytes=limits.max_store_size, url=settings.store)
        # Entered once the front listens; made now, as the compat sockets made with the hub run their sessions in it.
        everything = anyio.create_task_group()
        hub, compat = self._open_hub(store, limits, everything)
        ready = anyio.Event()
        self._instrument(hub, store, ready)
        await front.open(self)
        bound: threading.Timer | None = None
        try:
            async with contextlib.aclosing(front), everything as tg:
                self._accepting = accepting = anyio.CancelScope()
                await tg.start(self._watch_signals, accepting, tg.cancel_scope, front.notifier)
                front.keep(tg, hub)
                tg.start_soon(self._heartbeat)
                await serving.start(tg, compat)
                address = await front.found(tg)
                task_status.started(address)
                front.notifier.ready(f"serving on {address}")
                ready.set()
                with accepting:
                    await front.take(tg, self)
                bound = self.bound_the_stop(hub.limits.drain_timeout, front.remove)
                await front.aclose()
                compat.stop()
                await serving.drain(hub, front.notifier)
                tg.cancel_scope.cancel()
        finally:
            front.remove()
            store.close()
            if bound is not None:
                bound.cancel()
            log.info("stopped")

    def _open_hub(self, store: Store, limits: Limits, sessions: anyio.abc.TaskGroup) -> tuple[Hub, HeldCompatSockets]:
        """The hub over ``store`` and its msSanitizer-form sockets (running their sessions in ``sessions``), with
        the sessions the last daemon left open closed."""
        compat: list[HeldCompatSockets] = []  # the one the hub makes, as the daemon (which stops it) sees it

        def hold_compat(hub: Hub) -> HeldCompatSockets:
            compat.append(self.front.compat_sockets(hub, sessions, self))
            return compat[0]

        self.hub = hub = Hub(
            store=store,
            metrics=self.metrics,
            limits=limits,
            suppressions=self.settings.suppressions,
            compat_holder=hold_compat,
            live_elsewhere=self.serving.live_elsewhere,
            handoff=self.serving.handoff,
        )
        self.doors = Doors(hub, self.metrics, self.connections, self.unfinished)
        self.reception = self.serving.reception(self.doors)
        # No session is live yet: any the store says is open was left so by a daemon that died.
        try:
            abandoned = self.serving.close_abandoned(store)
        except StoreUnavailable as exc:  # the store may still serve reads; the next start tries again
            log.error("sessions left open by a stopped daemon stay open", detail=str(exc))
        else:
            if abandoned:
                log.warning("sessions a daemon that stopped unexpectedly left open are closed", sessions=abandoned)
        return hub, compat[0]

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
        if self.serving.sessions(hub) >= hub.limits.max_sessions:
            return f"at the limit of {hub.limits.max_sessions} sessions"
        stalled = time.monotonic() - self._beat
        if stalled > STALLED_AFTER:
            return f"the event loop has not run for {stalled:.0f} s"
        return self.serving.busy(hub)

    async def _heartbeat(self) -> None:
        """The event loop's sign of life for /readyz (which is answered from another thread)."""
        while True:
            self._beat = time.monotonic()
            await anyio.sleep(HEARTBEAT)

    def _fitted(self, limits: Limits) -> Limits:
        """This process's part of ``limits`` as configured, lowered to what the fd limit allows, saying so."""
        fitted, notes = fds.fit(self.serving.share(limits), self.nofile)
        for note in notes:
            log.warning("limit lowered to fit the fd limit", detail=note)
        return fitted

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

    def bound_the_stop(self, drain_timeout: float, cleanup: Callable[[], None]) -> threading.Timer:
        """Once draining: at the drain timeout plus the margin this process ends, whatever it is still doing. A
        detector (or a store write) runs in a thread that a cancellation cannot stop, and the event loop waits for
        it at the deadline; a huge batch would keep the daemon past any deadline, so that its service manager
        kills it (or, without one, it never ends). Its thread is abandoned instead: ``cleanup`` (the socket file)
        runs, the sessions still open stay open in the store (the next start closes them, as after a crash; their
        findings stored so far are kept) and the process exits. Cancelled on a stop that ended in time."""
        seconds = drain_timeout + self.serving.stop_margin

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
        else:
            hub.limits = self._fitted(limits)  # one assignment: a connection sees the old limits or the new ones
            hub.race_memory.resize(hub.limits.race_memory)
            hub.suppressions = file.suppressions  # sessions that start from now on
            logs.configure(level)
            self.metrics.config_reloads.labels("ok").inc()
            log.warning("reloaded", config=str(file.path), log_level=level, limits=repr(hub.limits))
            notifier.notify("READY=1", f"STATUS=reloaded {file.path or 'defaults'}")
        self.serving.reloaded()  # other processes read the file themselves, whatever it did here

    async def handle(self, conn: socket.socket) -> None:
        """A connection accepted on the socket clients find, or handed over by the listener."""
        reception = self.reception
        assert self.doors is not None and reception is not None
        raw = await reception.stream(conn)
        if raw is not None:
            await self.doors.native(raw, peer_credentials(raw), reception.converse)

    async def serve_compat(self, conn: socket.socket, peer: Peer, job: str, layout: str) -> None:
        """A connection accepted on a job's msSanitizer-form socket (its peer's uid checked there)."""
        assert self.reception is not None
        await self.reception.compat(conn, peer, job, layout)
