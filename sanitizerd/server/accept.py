"""The one accept loop (the daemon's socket, each msSanitizer-form socket, the listener of worker processes) and the
one reader of a connection's peer credentials."""

from __future__ import annotations

import errno
import socket
import struct
from collections.abc import Callable, Mapping

import anyio
import structlog
from anyio.abc import SocketAttribute, SocketStream
from prometheus_client import Counter

from sanitizerd.sessions.session import Peer

log = structlog.get_logger("sanitizerd.daemon")

# accept() failures that pass once connections close or memory frees: back off and retry, never end the daemon.
ACCEPT_RETRY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
# A connection that ended before it was accepted: nothing to do.
ACCEPT_SKIP_ERRNOS = frozenset({errno.ECONNABORTED, errno.EPROTO, errno.EINTR, errno.EAGAIN})
ACCEPT_BACKOFF = (0.01, 1.0)  # first and longest pause after a failed accept, doubling in between


def peer_credentials(stream: SocketStream | anyio.abc.ByteStream | socket.socket) -> Peer:
    """The connected process's pid, uid and gid (SO_PEERCRED), or an unknown peer (uid -1) if they cannot be read."""
    try:
        raw: socket.socket = stream if isinstance(stream, socket.socket) else stream.extra(SocketAttribute.raw_socket)
        pid, uid, gid = struct.unpack("3i", raw.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        return Peer(pid, uid, gid)
    except (OSError, AttributeError, anyio.TypedAttributeLookupError):
        return Peer()


async def accept_forever(
    sock: socket.socket,
    take: Callable[[socket.socket], None],
    *,
    errors: Counter,
    context: Callable[[], Mapping[str, object]] = dict,
) -> None:
    """Accept connections on the non-blocking listening ``sock`` for ever, each given to ``take`` as a bare socket
    (nothing read from it: a connection may be handed on whole to a worker process, and an anyio stream would read
    ahead into a buffer of its own). Out of fds or memory, accept fails while the socket stays readable: back off
    (doubling, up to a second) and try again, counting each failure in ``errors`` and logging once per burst (with
    ``context()``), never ending the daemon. Any other failure is the socket's own: OSError."""
    failed = 0
    pause = ACCEPT_BACKOFF[0]
    while True:
        await anyio.wait_readable(sock)
        try:
            conn, _address = sock.accept()
        except BlockingIOError:
            continue
        except OSError as exc:
            code = exc.errno
            if code in ACCEPT_SKIP_ERRNOS:
                continue
            if code not in ACCEPT_RETRY_ERRNOS:
                raise
            name = errno.errorcode[code]
            errors.labels(name).inc()
            if not failed:
                log.error("accept failed; backing off until it succeeds", error=name, **context())
            failed += 1
            await anyio.sleep(pause)
            pause = min(pause * 2, ACCEPT_BACKOFF[1])
            continue
        if failed:
            log.warning("accepting again", failed_accepts=failed, **context())
            failed, pause = 0, ACCEPT_BACKOFF[0]
        take(conn)
