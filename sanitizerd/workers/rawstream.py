"""A byte stream straight over a non-blocking socket, for the listener's side of a connection it may hand over.

anyio's own streams read through a transport that may read ahead into a buffer of its own; bytes held there would
never reach the worker. Here a read takes from the socket exactly what it returns, so what the listener has not
read is still in the socket when its file descriptor goes to a worker.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from typing import Any

import anyio
from anyio.abc import ByteStream, SocketAttribute

HANDSHAKE_READ = 64 * 1024  # bytes per read before the handoff: a hello is small, and what is read ahead travels


class RawSocketStream(ByteStream):
    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self.sock = sock
        self._closed = False

    @property
    def extra_attributes(self) -> Mapping[Any, Callable[[], Any]]:
        return {SocketAttribute.raw_socket: lambda: self.sock}

    async def receive(self, max_bytes: int = 65536) -> bytes:
        while True:
            if self._closed:
                raise anyio.ClosedResourceError
            try:
                data = self.sock.recv(min(max_bytes, HANDSHAKE_READ))
            except BlockingIOError:
                await anyio.wait_readable(self.sock)
                continue
            except OSError as exc:
                raise anyio.BrokenResourceError from exc
            if not data:
                raise anyio.EndOfStream
            return data

    async def send(self, item: bytes) -> None:
        view = memoryview(item)
        while view:
            if self._closed:
                raise anyio.ClosedResourceError
            try:
                sent = self.sock.send(view)
            except BlockingIOError:
                await anyio.wait_writable(self.sock)
                continue
            except OSError as exc:
                raise anyio.BrokenResourceError from exc
            view = view[sent:]

    async def send_eof(self) -> None:
        self.sock.shutdown(socket.SHUT_WR)

    async def aclose(self) -> None:
        """Closes this process's descriptor only (never ``shutdown``): a worker may hold the connection now."""
        if not self._closed:
            self._closed = True
            self.sock.close()
