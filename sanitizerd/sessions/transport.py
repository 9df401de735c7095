"""Typed messages over an anyio byte stream: the only place the sans-I/O connection meets a socket.

Reading is where a peer can make the daemon hold memory and time, so reading is where it is bounded: the bytes of
unfinished frames count against the peer uid's budget (``UnfinishedBytes``), a begun frame must be finished within
``frame_timeout`` seconds of reading, and (for producers) some frame must begin within ``idle_timeout`` seconds.

Over a socket stream the connection's own memory is read into (``recv_into``): a frame's bytes go straight to the
array it is decoded from, and a read that finds bytes waiting costs one system call, no wait and no timer.
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

import anyio
import anyio.lowlevel
from anyio.abc import ByteStream, SocketAttribute, SocketStream

from sanitizerd_protocol import CONNECTION_CLOSED, NEED_DATA, Connection, RemoteProtocolError, State
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.receiving import Sentinel

T = TypeVar("T")

# Large reads keep per-frame overhead low; a batch frame is typically a few MiB.
READ_SIZE = 1 << 20
# Reads that find their bytes waiting do not wait: a checkpoint this often keeps one fast peer from holding the event
# loop (the session pump adds one every few frames, which alone would let 64 batch frames through).
YIELD_BYTES = 1 << 20
# Seconds between looks at whether a silent producer is idle or waiting for the daemon.
IDLE_RECHECK = 10.0
_ENDED = (State.ERROR, State.CLOSED)


class WireConnection(Protocol):
    """A front door's sans-I/O connection, as a ``MessageStream`` drives it: the native ``Connection``, or
    msSanitizer's ``CompatConnection``, which sessions never import (it has only to fit)."""

    state: State

    @property
    def buffered(self) -> int: ...

    def receive_data(self, data: bytes) -> None: ...

    def next_event(self) -> m.Message | Sentinel: ...

    def take_cuts(self) -> list[tuple[str, int]]: ...

    def send(self, message: m.Message) -> bytes | bytearray: ...

    def send_error(self, reason: str, message: str) -> bytes | bytearray: ...


class PeerClosed(Exception):
    """The peer closed the connection cleanly between frames."""


class UnfinishedBytes:
    """Bytes received but not yet whole frames, per uid across that uid's connections, and in all.

    A uid past its budget has the connection that crossed it refused (``buffer_limit``): refusing is clear to the
    peer and cannot deadlock, where pausing reads could leave every connection of the uid waiting on another.
    """

    def __init__(self, budget: Callable[[], int]) -> None:
        self._budget = budget  # read at each charge: SIGHUP may change it
        self.by_uid: dict[int, int] = {}
        self.total = 0

    def charge(self, uid: int, delta: int) -> None:
        """Add (or, negative, release) ``delta`` bytes to ``uid``; raises RemoteProtocolError past the budget."""
        if not delta:
            return
        held = self.by_uid.get(uid, 0) + delta
        if held:
            self.by_uid[uid] = held
        else:
            self.by_uid.pop(uid, None)
        self.total += delta
        budget = self._budget()
        if delta > 0 and held > budget:
            raise RemoteProtocolError(
                f"uid {uid}'s connections hold {held} bytes of unfinished frames, over its budget of {budget}",
                reason="buffer_limit",
            )


class MessageStream:
    def __init__(
        self,
        stream: ByteStream,
        connection: WireConnection,
        *,
        unfinished: UnfinishedBytes | None = None,
        uid: int = -1,
    ) -> None:
        self.stream = stream
        self.connection = connection
        self._send_lock = anyio.Lock()
        self.bytes_received = 0
        self.frames_received = 0
        # None: no limit. Set once the handshake is over (the handshake timeout bounds it before).
        self.frame_timeout: float | None = None
        self.idle_timeout: float | None = None
        self._unfinished = unfinished
        self._uid = uid
        # Read into the connection's buffers where both sides allow it: a plain socket stream (a TLS stream also
        # has a raw socket, whose bytes are not ours to read) and a connection that offers its memory.
        raw = stream.extra(SocketAttribute.raw_socket, None) if isinstance(stream, SocketStream) else None
        self._socket: socket.socket | None = None
        self._into: Connection | None = None  # the connection whose memory the socket is read into
        if raw is not None and isinstance(connection, Connection):
            self._socket, self._into = raw, connection
        self._unyielded = 0  # bytes read since the last checkpoint
        self._charged = 0  # bytes of this connection's buffer counted in ``unfinished``
        self._frame_read_time = 0.0  # seconds spent reading the frame now begun
        # Whether the daemon owes the peer an answer (a verdict being checked): its silence is then not idleness.
        self.owes_reply: Callable[[], bool] = lambda: False
        # The hello this connection began with, kept where the connection may be handed to a worker process.
        self.hello: m.Hello | None = None
        # Told of each string of the peer's that was cut to its length: (field, characters cut).
        self.on_cut: Callable[[str, int], None] = lambda field, characters: None

    async def receive(self) -> m.Message:
        """The next message; raises RemoteProtocolError, PeerClosed, or anyio's BrokenResourceError."""
        while True:
            event = self.connection.next_event()
            if event is NEED_DATA:
                await self._read()
                continue
            self._account()
            if event is CONNECTION_CLOSED:
                raise PeerClosed
            self.frames_received += 1
            self._frame_read_time = 0.0
            for field, characters in self.connection.take_cuts():
                self.on_cut(field, characters)
            assert not isinstance(event, Sentinel)
            return event

    async def _read(self) -> None:
        if self._socket is None:
            data = await self._waited(self._chunk)
            self.bytes_received += len(data)
            self.connection.receive_data(data)
            self._account()
            return
        # The checkpoint comes before the read: a cancelled checkpoint loses nothing.
        if self._unyielded >= YIELD_BYTES:
            self._unyielded = 0
            await anyio.lowlevel.checkpoint()
        n = self._read_now()  # usually the bytes are waiting: no wait and no timer
        if n is None:
            n = await self._waited(self._read_when_readable)
        # The rest of a frame begun, as far as its bytes are already waiting: no round through ``receive`` per read
        # of a socket buffer (~200 KiB).
        while n and self._into is not None and self._into.frame_rest and self._unyielded < YIELD_BYTES:
            n = self._read_now()

    def _read_now(self) -> int | None:
        """Read into the connection's memory and report it there, with no wait between (the memory between frames
        is shared by every connection); None if nothing is waiting, 0 at EOF. Each read is charged as it is made."""
        assert self._socket is not None and self._into is not None
        try:
            n = self._socket.recv_into(self._into.get_buffer())
        except BlockingIOError:
            return None
        except OSError as exc:
            raise anyio.BrokenResourceError from exc  # as the stream's own receive says it
        if n:
            self._into.buffer_updated(n)
        else:
            self.connection.receive_data(b"")
        self._unyielded += n
        self.bytes_received += n
        self._account()
        return n

    def _waited(self, receive: Callable[[], Awaitable[T]]) -> Awaitable[T]:
        return self._rest_of_frame(receive) if self.connection.buffered else self._between_frames(receive)

    async def _read_when_readable(self) -> int:
        assert self._socket is not None
        while True:
            await anyio.wait_readable(self._socket)  # cancelled, it has read nothing
            n = self._read_now()
            if n is not None:
                return n

    async def _rest_of_frame(self, receive: Callable[[], Awaitable[T]]) -> T:
        timeout = None if self.frame_timeout is None else max(self.frame_timeout - self._frame_read_time, 0.0)
        started = anyio.current_time()
        try:
            with anyio.fail_after(timeout):
                return await receive()
        except TimeoutError:
            raise RemoteProtocolError(
                f"a frame begun was not finished within {self.frame_timeout} s "
                f"({self.connection.buffered} bytes of it received)",
                reason="frame_timeout",
            ) from None
        finally:
            self._frame_read_time += anyio.current_time() - started

    async def _between_frames(self, receive: Callable[[], Awaitable[T]]) -> T:
        """The idle clock runs only while the daemon owes the peer nothing: a producer waiting for the verdict of
        a long check is waiting, not idle."""
        limit = self.idle_timeout
        if limit is None:
            return await receive()
        idle_since = anyio.current_time()
        while True:
            left = limit - (anyio.current_time() - idle_since)
            with anyio.move_on_after(min(left, IDLE_RECHECK)):  # a cancelled receive loses no data
                return await receive()
            now = anyio.current_time()
            if self.owes_reply():
                idle_since = now
            elif now - idle_since >= limit:
                raise RemoteProtocolError(f"nothing received for {limit} s", reason="idle_timeout")

    async def _chunk(self) -> bytes:
        try:
            return await self.stream.receive(READ_SIZE)
        except anyio.EndOfStream:
            return b""

    def _account(self) -> None:
        """Bring this connection's share of its uid's unfinished bytes up to date with its buffer."""
        if self._unfinished is not None:
            held = self.connection.buffered
            delta, self._charged = held - self._charged, held
            try:
                self._unfinished.charge(self._uid, delta)
            except RemoteProtocolError:
                self.release()  # this connection is over: its bytes must not also push its siblings over
                raise

    def release(self) -> None:
        """The connection is over: what it held no longer counts against its uid."""
        if self._unfinished is not None:
            self._unfinished.charge(self._uid, -self._charged)
            self._charged = 0

    async def send(self, message: m.Message) -> None:
        """Raises ClosedResourceError once the connection has ended (an error or ``closed`` said): a verdict that
        finishes after its session was refused has nobody to go to. The state is read under the send lock, where
        no other sender can end the connection between the look and the send."""
        async with self._send_lock:
            if self.connection.state in _ENDED:
                raise anyio.ClosedResourceError(f"the connection has ended ({self.connection.state.value})")
            await self.stream.send(self.connection.send(message))

    async def send_error(self, reason: str, message: str) -> None:
        """Tell the peer why we are closing; best effort, bounded in time, never raises."""
        data = self.connection.send_error(reason, message)
        with anyio.move_on_after(1, shield=True):
            try:
                async with self._send_lock:
                    await self.stream.send(data)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                pass
