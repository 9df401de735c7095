"""Typed messages over an anyio byte stream: the only place the sans-I/O connection meets a socket."""

from __future__ import annotations

import anyio
from anyio.abc import ByteStream

from sanitizerd.protocol import CONNECTION_CLOSED, NEED_DATA, Connection
from sanitizerd.protocol import messages as m

# Large reads keep per-frame overhead low; a batch frame is typically a few MiB.
READ_SIZE = 1 << 20


class PeerClosed(Exception):
    """The peer closed the connection cleanly between frames."""


class MessageStream:
    def __init__(self, stream: ByteStream, connection: Connection) -> None:
        self.stream = stream
        self.connection = connection
        self._send_lock = anyio.Lock()
        self.bytes_received = 0
        self.frames_received = 0

    async def receive(self) -> m.Message:
        """The next message; raises RemoteProtocolError, PeerClosed, or anyio's BrokenResourceError."""
        while True:
            event = self.connection.next_event()
            if event is NEED_DATA:
                try:
                    data = await self.stream.receive(READ_SIZE)
                except anyio.EndOfStream:
                    data = b""
                self.bytes_received += len(data)
                self.connection.receive_data(data)
                continue
            if event is CONNECTION_CLOSED:
                raise PeerClosed
            self.frames_received += 1
            return event  # type: ignore[return-value]

    async def send(self, message: m.Message) -> None:
        async with self._send_lock:
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
