"""The client side of a control connection to the daemon: the cli, api and the pytest plugin all speak through it,
so it sits below them (issue 27)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from client_shim.transport import ClientError, FrameSocket
from sanitizerd_protocol import PROTOCOL_VERSION
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.errors import LocalProtocolError


class ControlClient:
    def __init__(self, path: str | os.PathLike[str] | None, *, timeout: float | None = 10.0) -> None:
        """``path`` None: the daemon the client library finds (the host's, else the user's private one)."""
        self._socket = FrameSocket(path, timeout=timeout)
        self.path = Path(self._socket.path)
        try:
            self._socket.handshake(
                m.Hello(version=PROTOCOL_VERSION, role="control", pid=os.getpid(), host=socket.gethostname())
            )
        except BaseException:
            self._socket.close()
            raise
        self._socket.sock.settimeout(None)

    def send(self, message: m.Message) -> None:
        self._socket.send(message)

    def receive(self) -> m.Message:
        message = self._socket.receive()
        if isinstance(message, m.Error):
            raise ClientError(f"sanitizerd: {message.reason}: {message.message}")
        return message

    def request(self, message: m.Message) -> m.Message:
        self.send(message)
        return self.receive()

    def close(self) -> None:
        try:
            self._socket.send(m.Close())
        except (ClientError, LocalProtocolError):  # the daemon ended it first (its error frame): nothing to close
            pass
        self._socket.close()

    def __enter__(self) -> ControlClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
