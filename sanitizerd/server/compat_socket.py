"""Per-job sockets in msSanitizer's form: the front door of CANN's hook and injection libraries (I/O only; the
connections they accept become sessions in ``server.doors``).

``sanitizerd run`` asks for one over its control connection (``compat_listen``). The socket is what msSanitizer's
launcher would have made for the run (reference §1.9): a Unix socket in the ABSTRACT namespace named
``/tmp/msop_connect.<YYYYmmddHHMMSS>.<pid>.sock``, the pid being the run's (the control peer's SO_PEERCRED), bound
with the name NUL-padded to the whole ``sun_path``. The hooks connect with the full 110-byte address, and an
abstract address is its bytes *and* its length: a socket bound to ``"\\0" + name`` alone is a different address
the real client can never reach.

An abstract socket has no file, so no mode or directory guards it: any local process may connect. The peer's
uid (SO_PEERCRED) is therefore checked on every connection: only the job owner's uid is served; any other is
counted, logged (rate-limited, as every refusal) and closed without a byte sent. Each accepted connection is then
an ordinary producer session of the job (the daemon's ``serve`` callback wraps it in the wire helper's
``CompatConnection``), so detectors, store, metrics, access control, job view and save/replay are the native ones.

A socket lives as long as the control connection that asked for it (its listener task runs in that connection's
task group), and never past the process that asked (the run: a pidfd says when it is gone); it closes at daemon
stop or drain; sessions already accepted run on in the daemon's task group. With worker processes the listener
holds every socket (``sanitizerd.workers``): a worker's control connection asks it for one, each accepted
connection is handed to the job's worker, and a worker's death leaves the socket open, so that the hooks connect
again while the worker restarts (the connection waits in the listener until it is up). The run's control
connection, which died with that worker, asks again on the new one and adopts the socket it had (same job, uid
and process): the hooks' name stays valid for the whole run.
Bounds: ``max_compat_sockets`` and ``max_compat_sockets_per_uid``, refused with ``request_limit``.
"""

from __future__ import annotations

import errno
import os
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

import anyio
import anyio.abc
import structlog

from sanitizerd.server.accept import accept_forever, peer_credentials
from sanitizerd.server.admission import Connections
from sanitizerd.sessions.hub import Hub
from sanitizerd.sessions.session import Peer
from sanitizerd.sessions.transport import MessageStream, UnfinishedBytes, WireConnection
from sanitizerd_protocol import messages as m

log = structlog.get_logger("sanitizerd.compat")

# sizeof(sockaddr_un.sun_path) on Linux: the abstract address is its first byte (NUL) and the 107 after it.
SUN_PATH = 108
NAME_PREFIX = "/tmp/msop_connect."
# Seconds forward a name may be stamped when the one for now is taken (the same pid asked twice within a second,
# or another process holds that name): the name stays in msSanitizer's form, and the run exports the one it got.
NAME_TRIES = 30
BACKLOG = 128  # one job's processes connect at start-up; the kernel caps it at somaxconn

# (accepted connection, its peer, the job, the wire layout): serves one accepted connection to its end (closing it).
# The connection is a plain socket, nothing read from it yet: the listener of worker processes hands it on whole.
Serve = Callable[[socket.socket, Peer, str, str], Awaitable[None]]


def compat_layouts() -> frozenset[str]:
    """The names of msSanitizer's wire layouts this daemon speaks (``sanitizerd.compat.wire.LAYOUTS``)."""
    from sanitizerd.compat import wire  # the compat package is loaded only by a daemon asked for a compat socket

    return frozenset(wire.LAYOUTS)


def socket_name(pid: int, when: float) -> str:
    """msSanitizer's name for the launcher ``pid``'s socket, stamped with ``when`` in local time, as it does."""
    return f"{NAME_PREFIX}{time.strftime('%Y%m%d%H%M%S', time.localtime(when))}.{pid}.sock"


def abstract_address(name: str) -> bytes:
    """The address msSanitizer's client connects to: NUL, the name, NUL bytes to the end of ``sun_path``."""
    raw = name.encode()
    if len(raw) > SUN_PATH - 1:
        raise ValueError(f"an abstract socket name takes at most {SUN_PATH - 1} bytes: {name!r}")
    return b"\0" + raw + b"\0" * (SUN_PATH - 1 - len(raw))


def bind_abstract(name: str) -> socket.socket:
    """A listening socket at ``name``'s padded abstract address (OSError EADDRINUSE when someone holds it)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(abstract_address(name))
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


class CompatWire(WireConnection, Protocol):
    """msSanitizer's packet connection as its stream drives it (``compat.packets.connection.CompatConnection``,
    loaded only when a compat connection comes): a native door's connection, plus its own answers to send and
    whether a packet has begun."""

    @property
    def in_packet(self) -> bool: ...

    def data_to_send(self) -> bytes: ...


class CompatStream(MessageStream):
    """``MessageStream`` over a ``CompatConnection``: the same reads, bounds and sends, and two things the native
    protocol does not have. The connection answers some packets itself (an IPC operation this release does not
    define is answered FAIL at once, and the hooks block until it is): those bytes are written before the next
    read and after each message. And a streamed KERNEL_RECORD slot leaves nothing buffered in the middle of its
    packet, so whether a packet has begun (the frame timeout runs) or not (the idle timeout runs) is the
    connection's ``in_packet``, not ``buffered``."""

    def __init__(
        self,
        stream: anyio.abc.ByteStream,
        connection: CompatWire,
        *,
        unfinished: UnfinishedBytes | None = None,
        uid: int = -1,
    ) -> None:
        super().__init__(stream, connection, unfinished=unfinished, uid=uid)
        self._compat = connection

    async def receive(self) -> m.Message:
        message = await super().receive()
        await self._flush()
        return message

    async def _read(self) -> None:
        await self._flush()  # the hooks may be blocked on it: before waiting for more of theirs
        begun = self._compat.in_packet
        data = await (self._rest_of_frame(self._chunk) if begun else self._between_frames(self._chunk))
        self.bytes_received += len(data)
        self.connection.receive_data(data)
        self._account()

    async def _flush(self) -> None:
        data = self._compat.data_to_send()
        if data:
            async with self._send_lock:
                await self.stream.send(data)


@dataclass(slots=True)
class _Listening:
    job: str
    uid: int
    pid: int = 0  # the process that asked for it (the run): the socket ends with it
    layout: str = ""
    holder: object = None  # who asked (a worker, in the listener); None: its holder died, and it may be adopted
    name: str = ""
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    running: bool = False  # its accept task has begun: from then on, that task gives back its slot, name, socket


class CompatSockets:
    """Every compat socket the daemon holds, with their bounds. ``serve`` runs an accepted connection (in
    ``sessions``, the daemon's task group, so a session outlives the socket that let it in)."""

    def __init__(self, hub: Hub, sessions: anyio.abc.TaskGroup, serve: Serve, connections: Connections) -> None:
        self.hub = hub
        # Each listening socket holds an fd, as a connection does: it is counted as one of its uid's connections,
        # so the fd budget the connection limits keep (sanitizerd/fds.py) covers it too.
        self.connections = connections
        self._sessions = sessions
        self._serve = serve
        self.open: dict[str, _Listening] = {}  # name -> the socket listening under it
        self.stopped = False

    def count(self) -> float:
        return float(len(self.open))

    def layouts(self) -> frozenset[str]:
        return compat_layouts()

    def stop(self) -> None:
        """Drain or stop: every socket closes, and no new one is opened (sessions already in run on)."""
        self.stopped = True
        for listening in list(self.open.values()):
            listening.scope.cancel()

    def close(self, name: str) -> None:
        """The control connection that asked for ``name`` ended (told by the worker that served it)."""
        listening = self.open.get(name)
        if listening is not None:
            listening.scope.cancel()

    def orphan(self, holder: object) -> None:
        """``holder`` (a worker) died: its sockets stay open, for the hooks and for their runs to adopt."""
        for listening in self.open.values():
            if listening.holder is holder:
                listening.holder = None

    def _adopt(self, job: str, layout: str, peer: Peer, holder: object) -> _Listening | None:
        """The socket a run that lost its control connection had (same job, uid, process and layout), if its
        holder died: the hooks were told its name, so the run keeps it."""
        for listening in self.open.values():
            if (listening.holder is None and holder is not None and listening.running
                    and (listening.job, listening.uid, listening.pid, listening.layout)
                    == (job, peer.uid, peer.pid, layout)):  # fmt: skip
                listening.holder = holder
                return listening
        return None

    def _refusal(self, uid: int) -> str:
        limits = self.hub.limits
        if len(self.open) >= limits.max_compat_sockets:
            return f"the daemon holds its limit of {limits.max_compat_sockets} msSanitizer-form sockets"
        mine = sum(1 for listening in self.open.values() if listening.uid == uid)
        if mine >= limits.max_compat_sockets_per_uid:
            return f"uid {uid} holds its limit of {limits.max_compat_sockets_per_uid} msSanitizer-form sockets"
        return ""

    async def listen(
        self, job: str, layout: str, peer: Peer, tg: anyio.abc.TaskGroup, *, holder: object = None
    ) -> m.CompatListening:
        """Open ``job``'s socket for the control peer ``peer`` (its listener runs in ``tg``: the control
        connection's task group, so that it ends with that connection; or the listener's, ``holder`` the worker
        whose control connection asked), or say why not (counted and logged as every refusal). The caller has
        checked that the job is the peer's to use and that ``layout`` is known."""

        def refused(reason: str, message: str) -> m.CompatListening:
            self.hub.note_refusal(reason, message, what="compat socket refused", job=job, uid=peer.uid)
            return m.CompatListening(job=job, reason=reason, message=message)

        if self.stopped:
            return refused("shutdown", "the daemon is stopping: it opens no new sockets")
        adopted = self._adopt(job, layout, peer, holder)
        if adopted is not None:
            log.info("compat socket adopted", job=job, name=adopted.name, uid=peer.uid, pid=peer.pid)
            return m.CompatListening(job=job, name=adopted.name)
        why = self._refusal(peer.uid)
        if why:
            return refused("request_limit", why)
        if peer.pid <= 0:
            return refused("permission_denied", "the daemon cannot tell this connection's pid (SO_PEERCRED)")
        why = self.connections.admit(peer.uid, self.hub.limits)
        if why:
            return refused("connection_limit", f"{why} (a msSanitizer-form socket holds one)")
        listening = _Listening(job, peer.uid, peer.pid, layout, holder)
        try:
            return await self._bind(listening, layout, peer.pid, tg)
        except BaseException:
            if not listening.running:
                self.connections.release(peer.uid)
            raise

    async def _bind(self, listening: _Listening, layout: str, pid: int, tg: anyio.abc.TaskGroup) -> m.CompatListening:
        """Bind and start listening under the first free name; the connection slot is the caller's until the
        accept task runs."""
        job, uid = listening.job, listening.uid
        sock, name = None, ""
        now = time.time()
        for step in range(NAME_TRIES):
            name = socket_name(pid, now + step)
            if name in self.open:
                continue
            try:
                sock = bind_abstract(name)
                break
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    return self._refused_after_admit(job, uid, f"cannot listen on {name!r}: {exc.strerror or exc}")
        if sock is None:
            return self._refused_after_admit(job, uid, f"every name in msSanitizer's form for pid {pid} is taken")
        # Held under its name before the first await: the limits count it, and no other request takes the name.
        listening.name = name
        self.open[name] = listening
        try:
            # start, not start_soon: once it returns, the task is inside the try whose finally closes the socket
            # and gives back the slot and the name (a task cancelled before its first step would never run one)
            await tg.start(self._accept, sock, listening, layout)
        except BaseException:
            if not listening.running:
                self.open.pop(name, None)
                sock.close()
            raise
        log.info("compat socket listening", job=job, name=name, uid=uid, pid=pid, layout=layout)
        return m.CompatListening(job=job, name=name)

    def _refused_after_admit(self, job: str, uid: int, message: str) -> m.CompatListening:
        self.connections.release(uid)
        self.hub.note_refusal("internal_error", message, what="compat socket refused", job=job, uid=uid)
        return m.CompatListening(job=job, reason="internal_error", message=message)

    async def _accept(
        self,
        sock: socket.socket,
        listening: _Listening,
        layout: str,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        listening.running = True
        try:
            with sock, listening.scope:
                async with anyio.create_task_group() as watch:
                    watch.start_soon(self._until_gone, listening)
                    task_status.started()
                    await self._accept_loop(sock, listening, layout)
                    watch.cancel_scope.cancel()
        finally:
            self.open.pop(listening.name, None)
            self.connections.release(listening.uid)
            log.info("compat socket closed", job=listening.job, name=listening.name)

    async def _accept_loop(self, sock: socket.socket, listening: _Listening, layout: str) -> None:
        try:
            await accept_forever(
                sock,
                lambda conn: self._admit(conn, listening, layout),
                errors=self.hub.metrics.accept_errors,
                context=lambda: {"job": listening.job, "name": listening.name},
            )
        except OSError as exc:  # the socket itself failed: this one ends, no more
            log.error("compat socket failed", job=listening.job, detail=repr(exc))

    @staticmethod
    async def _until_gone(listening: _Listening) -> None:
        """Close the socket once the process that asked for it has ended (a socket whose run is gone would wait for
        hooks that never come, holding a slot of its uid's)."""
        try:
            pidfd = os.pidfd_open(listening.pid)
        except ProcessLookupError:  # gone already
            listening.scope.cancel()
            return
        except OSError:  # a kernel without pidfds: the control connection's end is the bound
            return
        try:
            await anyio.wait_readable(pidfd)
        finally:
            os.close(pidfd)
        log.info("compat socket's process ended", job=listening.job, name=listening.name, pid=listening.pid)
        listening.scope.cancel()

    def _admit(self, conn: socket.socket, listening: _Listening, layout: str) -> None:
        peer = peer_credentials(conn)
        if peer.uid != listening.uid:
            # No bytes: another user's process learns nothing about the job, not even the protocol spoken here.
            self.hub.note_refusal(
                "permission_denied",
                f"uid {peer.uid} connected to uid {listening.uid}'s msSanitizer-form socket",
                what="compat connection refused",
                job=listening.job,
                peer_pid=peer.pid,
                peer_uid=peer.uid,
            )
            conn.close()
            return
        self._sessions.start_soon(self._serve, conn, peer, listening.job, layout)
