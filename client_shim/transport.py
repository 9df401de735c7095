"""A blocking socket speaking the sans-I/O protocol: what the client library and the CLI share.

No event loop: the user's program may have none, or its own.
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

from sanitizerd.protocol import CONNECTION_CLOSED, NEED_DATA, Connection, Role
from sanitizerd.protocol import messages as m

SOCKET_ENV = "SANITIZERD_SOCKET"
JOB_ENV = "SANITIZERD_JOB"


class ClientError(Exception):
    """The daemon refused us, closed on us, or could not be reached."""


class Refused(ClientError):
    """The daemon answered the hello with an error: trying again will not help."""


def default_socket() -> Path:
    env = os.environ.get(SOCKET_ENV)
    if env:
        return Path(env)
    from sanitizerd.daemon import default_socket_path  # the daemon's own default, one definition

    return default_socket_path()


class FrameSocket:
    """One connection: ``send`` from any thread (serialised), ``receive`` from one reader at a time."""

    def __init__(self, path: str | os.PathLike[str], *, timeout: float | None = 10.0) -> None:
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.settimeout(timeout)
            self.sock.connect(self.path)
        except OSError as exc:
            self.sock.close()
            raise ClientError(f"cannot connect to sanitizerd at {self.path}: {exc.strerror or exc}") from exc
        self.connection = Connection(Role.CLIENT)
        self._lock = threading.Lock()  # guards the Connection, which both directions update

    def frame(self, message: m.Message) -> bytearray:
        with self._lock:
            return self.connection.send(message)

    def send(self, message: m.Message) -> None:
        self.sendall(self.frame(message))

    def sendall(self, data: bytes | bytearray | memoryview) -> None:
        try:
            self.sock.sendall(data)
        except OSError as exc:
            raise ClientError(f"lost the connection to sanitizerd: {exc}") from exc

    def receive(self) -> m.Message:
        """The next message from the daemon; ClientError on EOF or a protocol error."""
        while True:
            with self._lock:
                event = self.connection.next_event()
            if event is CONNECTION_CLOSED:
                raise ClientError("sanitizerd closed the connection")
            if event is not NEED_DATA:
                return event  # type: ignore[return-value]
            try:
                data = self.sock.recv(1 << 16)
            except TimeoutError:
                raise
            except OSError as exc:
                raise ClientError(f"lost the connection to sanitizerd: {exc}") from exc
            with self._lock:
                self.connection.receive_data(data)

    def handshake(self, hello: m.Hello) -> m.Welcome:
        self.send(hello)
        reply = self.receive()
        if isinstance(reply, m.Error):
            raise Refused(f"sanitizerd refused the connection ({reply.reason}): {reply.message}")
        assert isinstance(reply, m.Welcome)
        return reply

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
