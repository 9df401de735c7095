"""The blocking socket the client library and the CLI share (client_shim/transport.py), against a peer that breaks
off a frame: every way it fails is a ClientError, which callers catch, never a protocol error escaping as a
traceback (as `sanitizerd run --save` did when the daemon dropped a watcher mid-frame)."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from client_shim.transport import ClientError, FrameSocket
from sanitizerd_protocol import PROTOCOL_VERSION
from sanitizerd_protocol import messages as m


@pytest.fixture
def cut_off_peer(tmp_path: Path) -> Iterator[Path]:
    """A listener that reads the hello, then sends the head of a 4 000-byte frame and 10 bytes of it, and closes."""
    path = tmp_path / "peer.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)

    def serve() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(1 << 16)
            connection.sendall(struct.pack("<I", 4000) + b"\x81" * 10)

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    yield path
    server.join(10)
    listener.close()


def test_a_frame_cut_off_is_a_client_error_and_so_is_sending_after_it(cut_off_peer: Path) -> None:
    connection = FrameSocket(cut_off_peer)
    try:
        with pytest.raises(ClientError, match="broke off the connection: peer closed after 10 of a 4000-byte frame"):
            connection.handshake(m.Hello(version=PROTOCOL_VERSION, role="control"))
        with pytest.raises(ClientError, match="broke off the connection"):  # asked again: the same, not a traceback
            connection.receive()
        with pytest.raises(ClientError, match="the connection to sanitizerd is over"):
            connection.send(m.Close())
    finally:
        connection.close()
