"""Where a connection from either front door becomes a session, for the single-process daemon and the worker
processes alike.

Our protocol's door: a hello within the handshake timeout, then a control pump or a producer session. The
msSanitizer door (``compat_socket``): a connection accepted on a job's socket, its peer's uid already checked,
stands for a hello (``CompatConnection.hello``) and becomes a producer session of that job. Either way the
connection is served under the connection limits and nothing it does ends the daemon (``Doors.guarded``).
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable
from typing import Protocol

import anyio
import anyio.abc
import structlog

from sanitizerd import __version__
from sanitizerd.metrics import Metrics
from sanitizerd.server.admission import Connections
from sanitizerd.server.compat_socket import CompatStream
from sanitizerd.sessions.control import serve_control
from sanitizerd.sessions.hub import Hub
from sanitizerd.sessions.opening import open_producer
from sanitizerd.sessions.session import Peer
from sanitizerd.sessions.transport import MessageStream, PeerClosed, UnfinishedBytes
from sanitizerd_protocol import Connection, RemoteProtocolError, Role
from sanitizerd_protocol import messages as m

log = structlog.get_logger("sanitizerd.daemon")

# What a connection is served as once its limits admit it: the stream over it, and who is at its other end.
Converse = Callable[[MessageStream, Peer], Awaitable[None]]


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


async def welcome_control(hub: Hub, stream: MessageStream) -> None:
    """Answer a control connection's hello (a control connection has no session of its own)."""
    await stream.send(m.Welcome(session=0, config=hub.default_config, server=__version__))


async def serve_hello(hub: Hub, stream: MessageStream, hello: m.Hello, peer: Peer) -> None:
    """Serve a connection as the role its hello declared: a control pump, or a producer session (``hello`` our
    protocol's, or the one a msSanitizer-wire connection stands for)."""
    if hello.role == "control":
        await welcome_control(hub, stream)
        await serve_control(hub, stream, peer)
        return
    # A control connection may wait on a job for as long as it runs; a producer that sends nothing at all for this
    # long is taken for gone.
    stream.idle_timeout = hub.limits.idle_timeout
    await open_producer(hub, stream, hello, peer)


class Reception(Protocol):
    """How a process takes in what its sockets accept: ``Doors`` serves each connection here; the listener of worker
    processes (``workers.listener.Handing``) shakes hands and hands each on to a worker."""

    async def stream(self, conn: socket.socket) -> anyio.abc.ByteStream | None:
        """The stream over an accepted connection (None when it could not be made: the connection is closed)."""
        ...

    async def converse(self, stream: MessageStream, peer: Peer) -> None:
        """Serve a connection of our protocol once its limits admitted it."""
        ...

    async def compat(self, conn: socket.socket, peer: Peer, job: str, layout: str) -> None:
        """Serve a connection accepted on ``job``'s msSanitizer-form socket (its peer's uid already checked)."""
        ...


class Doors:
    """Both front doors of one process's hub: the connection limits and accounting (``connections``,
    ``unfinished``) shared by every connection it serves, whichever door it came in by."""

    def __init__(self, hub: Hub, metrics: Metrics, connections: Connections, unfinished: UnfinishedBytes) -> None:
        self.hub = hub
        self.metrics = metrics
        self.connections = connections
        self.unfinished = unfinished

    @staticmethod
    async def stream(conn: socket.socket) -> anyio.abc.ByteStream | None:
        """The stream over an accepted connection (None when it could not be made: the connection is closed)."""
        try:
            return await anyio.abc.UNIXSocketStream.from_socket(conn)
        except OSError:
            conn.close()
            return None

    async def converse(self, stream: MessageStream, peer: Peer) -> None:
        """Shake hands, then serve the connection as the role its hello declared."""
        hello = await receive_hello(self.hub, stream)
        if hello is not None:
            await serve_hello(self.hub, stream, hello, peer)

    async def native(
        self, raw: anyio.abc.ByteStream, peer: Peer, converse: Converse | None = None, *, data: bytes = b""
    ) -> None:
        """Serve a connection of our protocol by ``converse`` (by default: ``Doors.converse``). ``data``: bytes
        already read from it (by the listener that handed it over), taken as if read here."""
        connection = Connection(Role.SERVER, max_frame_size=self.hub.limits.max_frame_size)
        if data:
            connection.receive_data(data)
        serve = converse or self.converse

        async def body(stream: MessageStream) -> None:
            stream.bytes_received += len(data)
            await serve(stream, peer)

        stream = MessageStream(raw, connection, unfinished=self.unfinished, uid=peer.uid)
        await self.guarded(raw, peer, stream, body)

    async def compat(self, conn: socket.socket, peer: Peer, job: str, layout: str) -> None:
        """A connection to a job's msSanitizer-form socket (its peer's uid already checked): an ordinary producer
        session of the job, opened with the implicit hello msSanitizer's protocol stands for."""
        hub = self.hub
        raw = await self.stream(conn)
        if raw is None:
            return
        try:
            # Loaded only once a compat connection comes (the compat package is large, and most daemons see none).
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

        stream = CompatStream(raw, connection, unfinished=self.unfinished, uid=peer.uid)
        await self.guarded(raw, peer, stream, serve)

    async def guarded(
        self,
        raw: anyio.abc.ByteStream,
        peer: Peer,
        stream: MessageStream,
        body: Callable[[MessageStream], Awaitable[None]],
    ) -> None:
        """Serve one connection under the connection limits, so that nothing it does ends the daemon: a protocol
        error or a bug of ours ends that connection only, told to its peer, counted and logged."""
        hub = self.hub
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
