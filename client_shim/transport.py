"""A blocking socket speaking the sans-I/O protocol: what the client library and the CLI share.

No event loop: the user's program may have none, or its own.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
import threading
import time
from pathlib import Path

from client_shim import discovery
from sanitizerd_protocol import (
    CONNECTION_CLOSED,
    NEED_DATA,
    Connection,
    LocalProtocolError,
    RemoteProtocolError,
    Role,
    State,
)
from sanitizerd_protocol import messages as m

SOCKET_ENV = "SANITIZERD_SOCKET"
JOB_ENV = "SANITIZERD_JOB"


class ClientError(Exception):
    """The daemon refused us, closed on us, or could not be reached."""


class Refused(ClientError):
    """The daemon answered the hello with an error: trying again will not help."""


class Untrusted(Refused):
    """The socket's daemon runs as a user we must not send anything to."""


class NoDaemon(ClientError):
    """No explicit socket, and none of the default ones has a daemon we may talk to."""

    def __init__(self, message: str, distrusted: list[str]) -> None:
        super().__init__(message)
        self.distrusted = distrusted  # sockets skipped because their directory or daemon is another user's


# A first connect waits this long for a socket that is appearing (its daemon starting) or whose backlog is full.
CONNECT_RETRY = 1.0
_RETRIED = frozenset({errno.ENOENT, errno.ECONNREFUSED, errno.EAGAIN})
# Bytes a connection may have in flight to the daemon. The default (about 200 KiB) lets a 3.5 MiB batch through in
# some twenty pieces, each a wake-up of the daemon and of us; a batch or more in flight lets each side copy whole
# megabytes per system call (benchmarks/ingest.py: about 1.5x the events per second). The kernel caps it at
# net.core.wmem_max, and it is charged to this process only while the daemon has not read the bytes.
SEND_BUFFER = 4 << 20


def explicit_socket() -> Path | None:
    """The socket the environment names (``sanitizerd run`` sets it for its program); None: find the daemon."""
    env = os.environ.get(SOCKET_ENV)
    return Path(env) if env else None


def connect_unix(path: str, *, timeout: float | None, retry: float = CONNECT_RETRY) -> socket.socket:
    """A connection to the daemon at ``path``, retried briefly, whose listener is root, the service user or us."""
    deadline = time.monotonic() + retry
    delay = 0.02
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        try:
            sock.settimeout(timeout)
            sock.connect(path)
        except OSError as exc:
            sock.close()
            if exc.errno in _RETRIED and time.monotonic() + delay < deadline:
                time.sleep(delay)
                delay = min(delay * 2, 0.2)
                continue
            raise ClientError(f"cannot connect to sanitizerd at {path}: {exc.strerror or exc}") from exc
        distrust = discovery.daemon_distrust(sock)
        if distrust:
            sock.close()
            raise Untrusted(f"sanitizerd at {path}: {distrust}")
        return sock


def discover(*, timeout: float | None, among: list[discovery.Candidate] | None = None) -> tuple[socket.socket, str]:
    """Without an explicit socket: the host's daemon, else the user's private one (``among``: the sockets
    ``client_shim.discovery.candidates`` names); NoDaemon when none may be used."""
    tried: list[str] = []
    distrusted: list[str] = []
    for candidate in discovery.candidates() if among is None else among:
        where = str(candidate.path)
        if candidate.distrust:
            distrusted.append(f"{where}: {candidate.distrust}")
            continue
        try:
            if not stat.S_ISSOCK(candidate.path.lstat().st_mode):
                tried.append(f"{where} is not a socket")
                continue
        except OSError:
            tried.append(f"{where} does not exist")
            continue
        try:
            return connect_unix(where, timeout=timeout), where
        except Untrusted as exc:
            distrusted.append(str(exc))
        except ClientError as exc:
            tried.append(str(exc))
    raise NoDaemon(f"no sanitizerd to connect to ({'; '.join(tried + distrusted)})", distrusted)


class FrameSocket:
    """One connection: ``send`` from any thread (serialised), ``receive`` from one reader at a time. ``path``
    None: the daemon is found (``discover``), and ``path`` says which."""

    def __init__(self, path: str | os.PathLike[str] | None, *, timeout: float | None = 10.0) -> None:
        if path is None:
            self.sock, self.path = discover(timeout=timeout)
        else:
            self.path = str(path)
            self.sock = connect_unix(self.path, timeout=timeout)
        self.connection = Connection(Role.CLIENT)
        self._lock = threading.Lock()  # guards the Connection, which both directions update

    def frame(self, message: m.Message, into: bytearray | None = None) -> bytearray:
        """The message framed (in ``into`` if given, reusing its memory); ClientError once the connection has ended
        (the daemon broke off a frame, or refused us): nothing more can be sent on it."""
        with self._lock:
            try:
                return self.connection.send(message, into)
            except LocalProtocolError as exc:
                if self.connection.state is State.ERROR:
                    raise ClientError(f"the connection to sanitizerd is over: {exc}") from exc
                raise

    def events_head(self, kernel: int, records_size: int) -> bytearray:
        """An events batch's frame up to its records (``Connection.send_events_head``): the caller sends them after."""
        with self._lock:
            return self.connection.send_events_head(kernel, records_size)

    def send(self, message: m.Message) -> None:
        self.sendall(self.frame(message))

    def sendall(self, data: bytes | bytearray | memoryview) -> None:
        try:
            self.sock.sendall(data)
        except OSError as exc:
            raise ClientError(f"lost the connection to sanitizerd: {exc}") from exc

    def sendall_parts(self, parts: list[bytearray | memoryview]) -> None:
        """Write the parts in order, as one frame, without joining them."""
        views = [memoryview(part).cast("B") for part in parts]
        try:
            while views:
                sent = self.sock.sendmsg(views)
                while views and sent >= len(views[0]):
                    sent -= len(views.pop(0))
                if sent:
                    views[0] = views[0][sent:]
        except OSError as exc:
            raise ClientError(f"lost the connection to sanitizerd: {exc}") from exc

    def receive(self) -> m.Message:
        """The next message from the daemon; ClientError on EOF or a protocol error."""
        while True:
            with self._lock:
                try:
                    event = self.connection.next_event()
                except RemoteProtocolError as exc:  # a frame cut off, or one that breaks the protocol
                    raise ClientError(f"sanitizerd broke off the connection: {exc}") from exc
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
