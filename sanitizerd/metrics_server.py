"""The HTTP side of the metrics: ``/metrics``, ``/healthz`` and ``/readyz``, from threads of their own.

Served apart from the event loop, so that ``/healthz`` answers while the loop is busy (a connection flood on the
main socket, a long detector batch) and a scrape never waits for a session. Its own resources are bounded, since
anyone who can reach the port can open connections to it:

* at most ``max_connections`` connections are served at once, one thread each. A new connection beyond that
  closes the oldest one first, so idle connections cannot lock out a prober or a scrape; a flood faster than
  closed connections end is refused at twice that (closed at once). Either is counted in
  ``sanitizerd_metrics_connections_dropped_total{reason}``;
* each connection has ``deadline`` seconds for its request and answer, then it is closed;
* a socket read waits at most ``READ_TIMEOUT`` seconds, and a request is read up to ``MAX_REQUEST_BYTES`` only.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import threading
import time
from collections.abc import Callable
from socketserver import TCPServer, ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

import structlog

log = structlog.get_logger("sanitizerd.metrics")

MAX_CONNECTIONS = 16
DEADLINE = 10.0
READ_TIMEOUT = 5.0
MAX_REQUEST_BYTES = 16 << 10  # a request line and its headers; a scrape or a probe sends a few hundred bytes
_LOG_EVERY = 60.0  # a flood is logged once a minute, and counted always


def metrics_address(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[IPV6]:PORT`` or ``:PORT`` (127.0.0.1) as (host, port); ValueError says what is wrong."""
    host, colon, port_text = text.rpartition(":")
    if not colon:
        raise ValueError(f"{text!r} is not HOST:PORT (an IPv6 host goes in brackets: [::1]:9464)")
    if host.startswith("[") and host.endswith("]"):
        try:
            host = str(ipaddress.IPv6Address(host[1:-1]))
        except ValueError:
            raise ValueError(f"{host!r} is not an IPv6 address") from None
    elif ":" in host:
        raise ValueError(f"{text!r}: an IPv6 host goes in brackets, as in [::1]:9464")
    elif host and not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?", host):
        raise ValueError(f"{host!r} is not a host name or an IPv4 address")
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"the port in {text!r} must be a number from 1 to 65535")
    return host or "127.0.0.1", int(port_text)


class MetricsServer(ThreadingMixIn, WSGIServer):
    """A WSGI server with one daemon thread per connection, at most ``max_connections`` of them (see above)."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        family: socket.AddressFamily,
        app: Callable[..., Any],
        dropped: Callable[[str], None],
        *,
        max_connections: int = MAX_CONNECTIONS,
        deadline: float = DEADLINE,
    ) -> None:
        self.address_family = family
        self.max_connections = max_connections
        self.deadline = deadline
        self._dropped = dropped
        self._open: dict[socket.socket, float] = {}  # in arrival order: the oldest first; -> its deadline
        self._closing: set[socket.socket] = set()  # shut down, its thread not yet ended
        self._lock = threading.Lock()
        self._last_logged = 0.0
        super().__init__(address, _Handler)
        self.set_app(app)

    def server_bind(self) -> None:
        # HTTPServer.server_bind would ask DNS for the host's full name (getfqdn), which can hang the start.
        TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)
        self.setup_environ()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            if len(self._open) + len(self._closing) >= 2 * self.max_connections:
                overflow = True
            else:
                overflow = False
                if len(self._open) >= self.max_connections:
                    self._close(next(iter(self._open)))
                    self._count("evicted")
                self._open[request] = time.monotonic() + self.deadline
        if overflow:
            self._count("overflow")
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def service_actions(self) -> None:
        """Twice a second, from the serving thread: close the connections past their deadline."""
        now = time.monotonic()
        with self._lock:
            late = [request for request, deadline in self._open.items() if deadline < now]
            for request in late:
                self._close(request)
        for _ in late:
            self._count("deadline")

    def shutdown_request(self, request: Any) -> None:
        with self._lock:
            self._open.pop(request, None)
            self._closing.discard(request)
            super().shutdown_request(request)  # under the lock: a socket is never shut down after its close

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that timed out or went away: its connection ends, nothing else is wrong

    def _close(self, request: socket.socket) -> None:
        """Wake the connection's thread (its read returns at once) and stop counting it as open."""
        self._open.pop(request, None)
        self._closing.add(request)
        try:
            request.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _count(self, reason: str) -> None:
        self._dropped(reason)
        now = time.monotonic()
        if now - self._last_logged > _LOG_EVERY:
            self._last_logged = now
            log.warning("metrics connections dropped", reason=reason, limit=self.max_connections)


class _Handler(WSGIRequestHandler):
    timeout = READ_TIMEOUT  # StreamRequestHandler sets it on the socket

    def setup(self) -> None:
        super().setup()
        self.rfile = _Capped(self.rfile, MAX_REQUEST_BYTES)  # type: ignore[assignment]

    def log_message(self, format: str, *args: object) -> None:
        pass


class _Capped:
    """A request's reader that ends, as if the client had stopped sending, after ``budget`` bytes: the standard
    library would read 100 header lines of 64 KiB each (6.4 MiB per connection) before refusing them."""

    def __init__(self, raw: Any, budget: int) -> None:
        self._raw, self._left = raw, budget

    def readline(self, limit: int = -1) -> bytes:
        return self._take(self._raw.readline, limit)

    def read(self, size: int = -1) -> bytes:
        return self._take(self._raw.read, size)

    def _take(self, reader: Callable[[int], bytes], size: int) -> bytes:
        if self._left <= 0:
            return b""
        data = reader(self._left if size < 0 else min(size, self._left))
        self._left -= len(data)
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


def bind(host: str, port: int, app: Callable[..., Any], dropped: Callable[[str], None], **bounds: Any) -> MetricsServer:
    """A server bound to ``host:port`` (the first address the host resolves to); OSError if it cannot be."""
    try:
        family, _type, _proto, _name, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise OSError(f"cannot resolve {host!r}: {exc.strerror}") from None
    return MetricsServer((str(address[0]), int(address[1])), family, app, dropped, **bounds)


def serve(server: MetricsServer) -> threading.Thread:
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.5}, name="sanitizerd-metrics", daemon=True
    )
    thread.start()
    return thread
