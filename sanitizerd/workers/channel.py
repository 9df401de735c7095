"""The listener's line to one worker: a SOCK_SEQPACKET socketpair carrying msgpack messages, a connection's file
descriptor riding with the message that hands it over (SCM_RIGHTS).

Packets keep their bounds, so a message never needs framing; what may be larger than a packet (the bytes the
listener read ahead of a handed connection) follows its message in chunks. One reader task per end; senders take
turns under a lock, so a message and its chunks are never interleaved with another's.
"""

from __future__ import annotations

import os
import socket

import anyio
import msgspec

from sanitizerd_protocol import messages as m

CHUNK = 60 * 1024  # bytes per packet: below the smallest default socket send buffer
MAX_HANDED_BYTES = 256 << 20  # read-ahead a handed connection may carry (a frame limit plus one read, with room)


class Handoff(msgspec.Struct, tag="handoff"):
    """A client connection (the packet's fd); ``size`` bytes already read from it follow in chunks. ``welcomed``:
    a control connection the listener answered the hello of; its data begins with the hello all the same."""

    size: int
    welcomed: bool = False
    # A connection accepted on a job's msSanitizer-form socket (its peer's uid checked there): served as a compat
    # producer of this job, in this wire layout.
    compat_job: str = ""
    compat_layout: str = ""


class AskLive(msgspec.Struct, tag="ask_live"):
    """Which producer sessions are live (``ask`` pairs the answer with the question)."""

    ask: int


class Live(msgspec.Struct, tag="live"):
    ask: int
    sessions: list[m.SessionInfo]
    registered: list[tuple[str, int]] = []  # the jobs (name, uid) a live run has registered


class AskMetrics(msgspec.Struct, tag="ask_metrics"):
    ask: int


class MetricsText(msgspec.Struct, tag="metrics_text"):
    ask: int
    text: bytes  # the worker's registry in Prometheus text format


class Ended(msgspec.Struct, tag="ended"):
    """A producer connection the listener handed over has ended (the listener counts sessions per uid)."""

    uid: int


class OpenCompat(msgspec.Struct, tag="open_compat"):
    """A control connection of ``uid`` (process ``pid``) asks for ``job``'s msSanitizer-form socket: the listener
    opens it, where it outlives this worker (its accepted connections come back as handoffs with ``compat_job``)."""

    ask: int
    job: str
    layout: str
    uid: int
    pid: int


class CompatOpened(msgspec.Struct, tag="compat_opened"):
    ask: int
    answer: m.CompatListening


class CloseCompat(msgspec.Struct, tag="close_compat"):
    """The control connection that asked for the socket ``name`` ended: the listener closes it."""

    name: str


class Ready(msgspec.Struct, tag="ready"):
    """The worker takes connections and handles signals (a SIGHUP before this would end it)."""


class Ping(msgspec.Struct, tag="ping"):
    """Is the worker's event loop turning? It answers ``Pong`` from that loop (the listener's watchdog)."""


class Pong(msgspec.Struct, tag="pong"):
    saturated: str = ""  # why its detector threads are saturated, "" when they are not: the listener's /readyz


Packet = (
    Handoff
    | AskLive
    | Live
    | AskMetrics
    | MetricsText
    | Ended
    | Ready
    | OpenCompat
    | CompatOpened
    | CloseCompat
    | Ping
    | Pong
)
_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Packet)


class ChannelClosed(Exception):
    """The other end is gone (its process ended)."""


class Channel:
    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self.sock = sock
        self._send_lock = anyio.Lock()

    @staticmethod
    def pair() -> tuple[socket.socket, socket.socket]:
        return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)

    def close(self) -> None:
        self.sock.close()

    async def send(self, packet: Packet, *, fd: int = -1, data: bytes = b"") -> None:
        """One message (with ``fd`` attached when given), then ``data`` in chunks."""
        async with self._send_lock:
            await self._send_packet(_encoder.encode(packet), [fd] if fd >= 0 else [])
            view = memoryview(data)
            for start in range(0, len(view), CHUNK):
                await self._send_packet(view[start : start + CHUNK], [])

    async def _send_packet(self, payload: bytes | memoryview, fds: list[int]) -> None:
        while True:
            try:
                socket.send_fds(self.sock, [payload], fds) if fds else self.sock.send(payload)
                return
            except BlockingIOError:
                await anyio.wait_writable(self.sock)
            except (BrokenPipeError, ConnectionResetError) as exc:
                raise ChannelClosed(str(exc)) from None

    async def receive(self) -> tuple[Packet, socket.socket | None, bytes]:
        """The next message, the connection it hands over (or None), and the bytes that follow it."""
        payload, fds = await self._receive_packet(1)
        try:
            packet = _decoder.decode(payload)
        except msgspec.DecodeError:
            for fd in fds:
                os.close(fd)
            raise
        conn = socket.socket(fileno=fds[0]) if fds else None
        for fd in fds[1:]:
            os.close(fd)
        data = b""
        if isinstance(packet, Handoff) and packet.size:
            if packet.size > MAX_HANDED_BYTES:
                raise ChannelClosed(f"a handoff of {packet.size} bytes is past any the listener sends")
            parts = []
            left = packet.size
            while left > 0:
                chunk, extra = await self._receive_packet(0)
                for fd in extra:
                    os.close(fd)
                parts.append(chunk)
                left -= len(chunk)
            data = b"".join(parts)
        return packet, conn, data

    async def _receive_packet(self, max_fds: int) -> tuple[bytes, list[int]]:
        while True:
            try:
                if max_fds:
                    payload, fds, _flags, _addr = socket.recv_fds(self.sock, CHUNK, max_fds)
                else:
                    payload, fds = self.sock.recv(CHUNK), []
            except BlockingIOError:
                await anyio.wait_readable(self.sock)
                continue
            except ConnectionResetError as exc:
                raise ChannelClosed(str(exc)) from None
            if not payload and not fds:
                raise ChannelClosed("the other end closed")
            return payload, list(fds)
